/* routes_tokens.c: named API tokens — POST/GET/DELETE /v1/tokens, and the in-memory set
 * of token hashes the router authenticates against.
 *
 * A token is shown once, in the response that created it; the store keeps its SHA-256
 * (core/token.h). The set is read from the store again when this instance changes it, and
 * by a request that finds it older than a second: a token revoked on this instance stops
 * working at once, one revoked on another instance (PostgreSQL) within a second or so.
 * Only a change on this instance makes requests wait for the read; a periodic one is made
 * by one request, outside the lock, while the others go on with the set in hand, so a
 * store read that waits (the store's API connections busy with long searches) never
 * holds up authentication, and with it every request. A token
 * may expire (expires_at, or a ttl at creation): from then on it is refused as expired.
 * Its last use is written to the store at most once a minute (TOUCH_EVERY_MS) by each
 * instance, never once per request. */
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "api/api.h"
#include "api/render.h"
#include "core/token.h"
#include "util/clock.h"
#include "util/duration.h"
#include "util/log.h"
#include "util/uuid.h"

#define RELOAD_MS 1000
#define TOUCH_EVERY_MS 60000
#define TTL_MIN_MS 60000LL                        /* 1m */
#define TTL_MAX_MS (3650LL * 24 * 3600 * 1000)    /* 3650d */

struct token_entry {
	char id[UUID_STR_LEN];
	char hash[65];
	unsigned scopes;
	char name[TOKEN_NAME_MAX + 1];
	int64_t expires_at;           /* 0: never */
	int64_t last_used_at;         /* the later of the store's and what this instance wrote */
};

struct api_tokens {
	store *st;
	pthread_mutex_t mu;
	pthread_cond_t loaded;        /* a reload ended */
	struct token_entry *items;
	size_t n;
	int64_t loaded_at;            /* 0: never loaded */
	unsigned changed;             /* changes this instance made (tokens_changed) */
	unsigned read;                /* the changes the set in hand was read after */
	int reloading;                /* a request reads the store, outside mu */
	int failing;                  /* the last reload failed (logged once) */
};

struct api_tokens *api_tokens_new(store *st)
{
	struct api_tokens *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->st = st;
	pthread_mutex_init(&t->mu, NULL);
	pthread_cond_init(&t->loaded, NULL);
	return t;
}

void api_tokens_free(struct api_tokens *t)
{
	if (!t)
		return;
	pthread_cond_destroy(&t->loaded);
	pthread_mutex_destroy(&t->mu);
	free(t->items);
	free(t);
}

/* Reads the set from the store and puts it in use: called with t->mu held and no other
 * reload running; the lock is let go during the store's read (t->reloading says one
 * runs). On a store error the set loaded before stays in use. */
static void reload(struct api_tokens *t, int64_t now)
{
	struct store_token *rows = NULL;
	size_t n = 0;
	unsigned changes = t->changed;

	t->reloading = 1;
	pthread_mutex_unlock(&t->mu);
	int rc = store_token_list(t->st, &rows, &n);
	pthread_mutex_lock(&t->mu);
	t->reloading = 0;
	t->read = changes;
	t->loaded_at = now;
	pthread_cond_broadcast(&t->loaded);
	if (rc) {
		if (!t->failing)
			log_error("tokens: cannot read the named tokens: %s (the ones read before "
				  "stay in use)", store_strerror(rc));
		t->failing = 1;
		return;
	}
	t->failing = 0;
	struct token_entry *items = n ? calloc(n, sizeof(*items)) : NULL;
	if (n && !items) {
		log_error("tokens: out of memory reading the named tokens");
		store_tokens_free(rows, n);
		return;
	}
	size_t kept = 0;
	for (size_t i = 0; i < n; i++) {
		struct token_entry *e = &items[kept];
		if (token_scopes_from_text(rows[i].scopes, &e->scopes)) {
			log_error("tokens: token %s has unknown scopes \"%s\"; it is refused",
				  rows[i].id, rows[i].scopes);
			continue;
		}
		snprintf(e->id, sizeof(e->id), "%s", rows[i].id);
		snprintf(e->hash, sizeof(e->hash), "%s", rows[i].hash);
		snprintf(e->name, sizeof(e->name), "%s", rows[i].name);
		e->expires_at = rows[i].expires_at;
		e->last_used_at = rows[i].last_used_at;
		/* a use this instance noted but could not write yet is not noted again */
		for (size_t j = 0; j < t->n; j++)
			if (strcmp(t->items[j].id, e->id) == 0 && t->items[j].last_used_at > e->last_used_at)
				e->last_used_at = t->items[j].last_used_at;
		kept++;
	}
	store_tokens_free(rows, n);
	free(t->items);
	t->items = items;
	t->n = kept;
}

int api_tokens_lookup(struct api_tokens *t, const char *token, size_t len, int64_t now_ms,
		      struct api_caller *out)
{
	if (!t || len != TOKEN_LEN)
		return -1;
	char hash[65], touch[UUID_STR_LEN] = "";
	token_hash(token, len, hash);
	int64_t now = clock_now_ms();
	int found = -1, rc = -1;

	pthread_mutex_lock(&t->mu);
	for (;;) {
		/* a change made here, or no set yet: this request waits for a fresh one */
		int must = t->read != t->changed || !t->loaded_at;
		if (!must && now - t->loaded_at < RELOAD_MS)
			break;
		if (!t->reloading) {
			reload(t, now);
			break;
		}
		if (!must)
			break; /* another request reloads; the set in hand serves meanwhile */
		pthread_cond_wait(&t->loaded, &t->mu);
	}
	/* Every entry is compared, in constant time, whether or not one matched. */
	for (size_t i = 0; i < t->n; i++)
		if (CRYPTO_memcmp(t->items[i].hash, hash, 64) == 0)
			found = (int)i;
	if (found >= 0) {
		struct token_entry *e = &t->items[found];
		out->scopes = e->scopes;
		out->expires_at = e->expires_at;
		snprintf(out->name, sizeof(out->name), "%s", e->name);
		if (e->expires_at && now_ms >= e->expires_at) {
			rc = API_TOKEN_EXPIRED;
		} else {
			rc = 0;
			if (now_ms - e->last_used_at >= TOUCH_EVERY_MS) {
				e->last_used_at = now_ms;
				snprintf(touch, sizeof(touch), "%s", e->id);
			}
		}
	}
	pthread_mutex_unlock(&t->mu);
	/* outside the lock: other requests do not wait for this write */
	if (touch[0]) {
		int wrc = store_token_touch(t->st, touch, now_ms);
		if (wrc && wrc != STORE_NOT_FOUND)
			log_warn("tokens: cannot record the use of token %s: %s (tried again in a "
				 "minute)", touch, store_strerror(wrc));
	}
	return rc;
}

/* The next lookup reads the store again (after this instance changed the tokens). */
static void tokens_changed(struct api *api)
{
	if (!api->tokens)
		return;
	pthread_mutex_lock(&api->tokens->mu);
	api->tokens->changed++;
	pthread_mutex_unlock(&api->tokens->mu);
}

/* ---- routes ------------------------------------------------------------------------------ */

static json_t *render_token(const struct store_token *t, unsigned scopes, int64_t now_ms)
{
	json_t *o = json_pack("{s:s, s:s, s:o, s:s, s:o, s:o, s:o, s:b}", "id", t->id, "name",
			      t->name, "scopes", token_scopes_json(scopes), "prefix", t->prefix,
			      "created_at", render_time(t->created_at), "expires_at",
			      render_time(t->expires_at), "last_used_at",
			      render_time(t->last_used_at), "expired",
			      t->expires_at && now_ms >= t->expires_at);
	if (t->actor)
		json_object_set_new(o, "created_by", json_string(t->actor));
	return o;
}

/* The expiry a new token asks for: "expires_at" (RFC 3339, in the future) or "ttl" (a
 * duration from now, 1m to 3650d), not both; 0 when neither. 0, or -1 with res set to a
 * 400 naming the field. */
static int requested_expiry(const json_t *doc, int64_t now_ms, int64_t *out,
			    struct api_response *res)
{
	const json_t *at = json_object_get(doc, "expires_at"), *ttl = json_object_get(doc, "ttl");
	int64_t v;

	*out = 0;
	if (at && ttl) {
		api_reply_errorf(res, 400, "invalid_argument", "ttl",
				 "give expires_at or ttl, not both");
		return -1;
	}
	if (at) {
		if (!json_is_string(at) || clock_parse_rfc3339(json_string_value(at), &v)) {
			api_reply_errorf(res, 400, "invalid_argument", "expires_at",
					 "expires_at must be an RFC 3339 time, e.g. "
					 "2027-01-31T00:00:00Z");
			return -1;
		}
		if (v <= now_ms) {
			api_reply_errorf(res, 400, "invalid_argument", "expires_at",
					 "expires_at must be in the future");
			return -1;
		}
		*out = v;
	} else if (ttl) {
		if (!json_is_string(ttl) || duration_parse(json_string_value(ttl), &v) ||
		    v < TTL_MIN_MS || v > TTL_MAX_MS) {
			api_reply_errorf(res, 400, "invalid_argument", "ttl",
					 "ttl must be a duration from 1m to 3650d, e.g. \"90d\"");
			return -1;
		}
		*out = now_ms + v;
	}
	return 0;
}

void api_tokens_create(struct api *api, const struct api_request *req, struct api_response *res)
{
	json_error_t jerr;
	struct input_error err;
	json_t *doc = json_loadb(req->body ? req->body : "", req->body_len, JSON_REJECT_DUPLICATES,
				 &jerr);
	if (!doc) {
		api_reply_errorf(res, 400, "invalid_json", NULL,
				 "the body is not valid JSON: %s (line %d, column %d)", jerr.text,
				 jerr.line, jerr.column);
		return;
	}
	const char *key;
	json_t *v;
	unsigned scopes = 0;
	const char *name = json_string_value(json_object_get(doc, "name"));

	if (!json_is_object(doc)) {
		api_reply_errorf(res, 400, "invalid_argument", NULL,
				 "the body must be an object {\"name\", \"scopes\"}");
		goto out;
	}
	json_object_foreach(doc, key, v) {
		if (strcmp(key, "name") != 0 && strcmp(key, "scopes") != 0 &&
		    strcmp(key, "expires_at") != 0 && strcmp(key, "ttl") != 0) {
			api_reply_errorf(res, 400, "invalid_argument", key,
					 "unknown field \"%.64s\" (a token has name, scopes, and "
					 "expires_at or ttl)", key);
			goto out;
		}
	}
	if (!token_name_valid(name)) {
		api_reply_errorf(res, 400, "invalid_argument", "name",
				 "name must be 1 to %d characters of letters, digits, '.', '_' "
				 "and '-'", TOKEN_NAME_MAX);
		goto out;
	}
	if (strcmp(name, "admin") == 0 || strcmp(name, "ingest") == 0) {
		api_reply_errorf(res, 400, "invalid_argument", "name",
				 "\"%s\" is the name of the configured %s token", name, name);
		goto out;
	}
	if (token_scopes_from_json(json_object_get(doc, "scopes"), &scopes, &err)) {
		api_reply_error(res, &err);
		goto out;
	}
	int64_t now = clock_now_ms(), expires_at;
	if (requested_expiry(doc, now, &expires_at, res))
		goto out;

	char token[TOKEN_LEN + 1], text[64];
	struct store_token t = {0};
	if (token_generate(token)) {
		api_reply_errorf(res, 500, "internal", NULL, "no randomness to make a token");
		goto out;
	}
	uuid_v7(t.id);
	t.name = (char *)name;
	token_scopes_to_text(scopes, text, sizeof(text));
	t.scopes = text;
	token_hash(token, TOKEN_LEN, t.hash);
	snprintf(t.prefix, sizeof(t.prefix), "%.*s", TOKEN_PREFIX_LEN, token);
	t.actor = (char *)req->actor;
	t.created_at = now;
	t.expires_at = expires_at;
	int rc = store_token_create(api->st, &t);
	if (rc == STORE_CONFLICT) {
		api_reply_errorf(res, 409, "conflict", "name", "a token named \"%s\" already exists",
				 name);
	} else if (rc) {
		api_reply_store_error(res, rc, "token");
	} else {
		tokens_changed(api);
		json_t *d = json_pack("{s:s, s:s, s:o}", "name", name, "scopes", text, "expires_at",
				      render_time(expires_at));
		char *detail = json_dumps(d, JSON_COMPACT);
		json_decref(d);
		api_audit(api, req, "token.create", t.id, 1, detail);
		free(detail);
		json_t *view = render_token(&t, scopes, now);
		json_object_set_new(view, "token", json_string(token));
		api_reply_json(res, 201, view);
	}
	OPENSSL_cleanse(token, sizeof(token));
out:
	json_decref(doc);
}

void api_tokens_list(struct api *api, struct api_response *res)
{
	struct store_token *rows = NULL;
	size_t n = 0;
	int rc = store_token_list(api->st, &rows, &n);
	if (rc) {
		api_reply_store_error(res, rc, "tokens");
		return;
	}
	json_t *items = json_array();
	int64_t now = clock_now_ms();
	for (size_t i = 0; i < n; i++) {
		unsigned scopes = 0;
		token_scopes_from_text(rows[i].scopes, &scopes);
		json_array_append_new(items, render_token(&rows[i], scopes, now));
	}
	store_tokens_free(rows, n);
	api_reply_json(res, 200, json_pack("{s:o}", "items", items));
}

void api_tokens_delete(struct api *api, const char *id, const struct api_request *req,
		       struct api_response *res)
{
	int rc = store_token_delete(api->st, id);
	if (rc) {
		api_reply_store_error(res, rc, "token");
		return;
	}
	tokens_changed(api);
	api_audit(api, req, "token.revoke", id, 1, NULL);
	res->status = 204;
	res->body = NULL;
}
