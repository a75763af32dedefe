/* routes_tokens.c: named API tokens (issue 14) — POST/GET/DELETE /v1/tokens, and the
 * in-memory set of token hashes the router authenticates against.
 *
 * A token is shown once, in the response that created it; the store keeps its SHA-256
 * (core/token.h). The set is read from the store again when this instance changes it, and
 * by a request that finds it older than a second: a token revoked on this instance stops
 * working at once, one revoked on another instance (PostgreSQL) within a second. */
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "api/api.h"
#include "api/render.h"
#include "core/token.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

#define RELOAD_MS 1000

struct token_entry {
	char hash[65];
	unsigned scopes;
	char name[TOKEN_NAME_MAX + 1];
};

struct api_tokens {
	store *st;
	pthread_mutex_t mu;
	struct token_entry *items;
	size_t n;
	int64_t loaded_at;            /* 0: load at the next lookup */
	int failing;                  /* the last reload failed (logged once) */
};

struct api_tokens *api_tokens_new(store *st)
{
	struct api_tokens *t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->st = st;
	pthread_mutex_init(&t->mu, NULL);
	return t;
}

void api_tokens_free(struct api_tokens *t)
{
	if (!t)
		return;
	pthread_mutex_destroy(&t->mu);
	free(t->items);
	free(t);
}

/* Called with t->mu held. On a store error the set loaded before stays in use. */
static void reload_locked(struct api_tokens *t, int64_t now)
{
	struct store_token *rows = NULL;
	size_t n = 0;
	int rc = store_token_list(t->st, &rows, &n);
	if (rc) {
		if (!t->failing)
			log_error("tokens: cannot read the named tokens: %s (the ones read before "
				  "stay in use)", store_strerror(rc));
		t->failing = 1;
		t->loaded_at = now;
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
		snprintf(e->hash, sizeof(e->hash), "%s", rows[i].hash);
		snprintf(e->name, sizeof(e->name), "%s", rows[i].name);
		kept++;
	}
	store_tokens_free(rows, n);
	free(t->items);
	t->items = items;
	t->n = kept;
	t->loaded_at = now;
}

int api_tokens_lookup(struct api_tokens *t, const char *token, size_t len,
		      struct api_caller *out)
{
	if (!t || len != TOKEN_LEN)
		return -1;
	char hash[65];
	token_hash(token, len, hash);
	int64_t now = clock_now_ms();
	int found = -1;

	pthread_mutex_lock(&t->mu);
	if (!t->loaded_at || now - t->loaded_at >= RELOAD_MS)
		reload_locked(t, now);
	/* Every entry is compared, in constant time, whether or not one matched. */
	for (size_t i = 0; i < t->n; i++)
		if (CRYPTO_memcmp(t->items[i].hash, hash, 64) == 0)
			found = (int)i;
	if (found >= 0) {
		out->scopes = t->items[found].scopes;
		snprintf(out->name, sizeof(out->name), "%s", t->items[found].name);
	}
	pthread_mutex_unlock(&t->mu);
	return found >= 0 ? 0 : -1;
}

/* The next lookup reads the store again (after this instance changed the tokens). */
static void tokens_changed(struct api *api)
{
	if (!api->tokens)
		return;
	pthread_mutex_lock(&api->tokens->mu);
	api->tokens->loaded_at = 0;
	pthread_mutex_unlock(&api->tokens->mu);
}

/* ---- routes ------------------------------------------------------------------------------ */

static json_t *render_token(const struct store_token *t, unsigned scopes)
{
	json_t *o = json_pack("{s:s, s:s, s:o, s:s, s:o}", "id", t->id, "name", t->name,
			      "scopes", token_scopes_json(scopes), "prefix", t->prefix,
			      "created_at", render_time(t->created_at));
	if (t->actor)
		json_object_set_new(o, "created_by", json_string(t->actor));
	return o;
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
		if (strcmp(key, "name") != 0 && strcmp(key, "scopes") != 0) {
			api_reply_errorf(res, 400, "invalid_argument", key,
					 "unknown field \"%.64s\" (a token has name and scopes)", key);
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
	t.created_at = clock_now_ms();
	int rc = store_token_create(api->st, &t);
	if (rc == STORE_CONFLICT) {
		api_reply_errorf(res, 409, "conflict", "name", "a token named \"%s\" already exists",
				 name);
	} else if (rc) {
		api_reply_store_error(res, rc, "token");
	} else {
		tokens_changed(api);
		char detail[160];
		snprintf(detail, sizeof(detail), "{\"name\":\"%s\",\"scopes\":\"%s\"}", name, text);
		api_audit(api, req, "token.create", t.id, 1, detail);
		json_t *view = render_token(&t, scopes);
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
	for (size_t i = 0; i < n; i++) {
		unsigned scopes = 0;
		token_scopes_from_text(rows[i].scopes, &scopes);
		json_array_append_new(items, render_token(&rows[i], scopes));
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
