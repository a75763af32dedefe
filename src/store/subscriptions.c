/* subscriptions.c: the storage interface's subscription rows, backend-independent:
 * each config sealed on write when the store has a key (store/secrets.c), checked and
 * freed here, and the rows loaded into the in-memory registry (store_subs_load). No SQL
 * here. */
#include "store/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/sub_codec.h"
#include "util/clock.h"
#include "util/log.h"

/* ---- subscriptions ------------------------------------------------------------------ */

static int sub_valid(const struct sub_row *sub)
{
	return sub && sub->id[0] && strnlen(sub->id, UUID_STR_LEN) < UUID_STR_LEN &&
	       sub->name && *sub->name && sub->config;
}

/* A create or update with the config sealed (store/secrets.c) when the store has a key. */
static int sub_write(store *st, const struct sub_row *sub,
		     int (*write)(store *st, const struct sub_row *sub))
{
	struct sub_row row;
	char *sealed = NULL;
	int rc;

	if (!st || !sub_valid(sub))
		return STORE_INVALID;
	if ((rc = store_config_seal(st, sub, &sealed)) != STORE_OK)
		return rc;
	row = *sub;
	if (sealed)
		row.config = sealed;
	rc = write(st, &row);
	free(sealed);
	return rc;
}

int store_sub_create(store *st, const struct sub_row *sub)
{
	return sub_write(st, sub, st ? st->methods->sub_create : NULL);
}

int store_sub_update(store *st, const struct sub_row *sub)
{
	return sub_write(st, sub, st ? st->methods->sub_update : NULL);
}

int store_sub_disable(store *st, const char *id, const char *reason, int64_t at_ms)
{
	struct sub_row row;
	char ts[RFC3339_LEN];
	int rc = store_sub_get(st, id, &row);
	if (rc)
		return rc;
	json_t *doc = json_loads(row.config, 0, NULL);
	char *text = NULL;
	if (!doc) {
		rc = STORE_ERROR;
		goto out;
	}
	json_object_set_new(doc, "enabled", json_false());
	json_object_set_new(doc, "disabled_reason", json_string(reason));
	json_object_set_new(doc, "disabled_at", json_string(clock_format_rfc3339(at_ms, ts)));
	if (!(text = json_dumps(doc, JSON_COMPACT))) {
		rc = STORE_ERROR;
		goto out;
	}
	free(row.config);
	row.config = text;
	text = NULL;
	row.enabled = 0;
	row.updated_at = at_ms;
	rc = store_sub_update(st, &row);
out:
	json_decref(doc);
	free(text);
	store_sub_free(&row);
	return rc;
}

int store_sub_delete(store *st, const char *id)
{
	if (!st || !id)
		return STORE_INVALID;
	return st->methods->sub_delete(st, id);
}

int store_sub_get(store *st, const char *id, struct sub_row *out)
{
	if (out)
		memset(out, 0, sizeof(*out));
	if (!st || !id || !out)
		return STORE_INVALID;
	int rc = st->methods->sub_get(st, id, out);
	if (rc == STORE_OK && (rc = store_config_open(st, out)) != STORE_OK)
		store_sub_free(out);
	return rc;
}

int store_sub_list(store *st, struct sub_row **items, size_t *n)
{
	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (!st || !items || !n)
		return STORE_INVALID;
	int rc = st->methods->sub_list(st, items, n);
	/* One row that does not open fails the list: a set without it would silently stop
	 * delivering to it. */
	for (size_t i = 0; rc == STORE_OK && i < *n; i++)
		rc = store_config_open(st, &(*items)[i]);
	if (rc != STORE_OK) {
		store_subs_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return rc;
}

/* Subscription cursors: "s:<created_at>:<id>" of the last row of the previous page. */
int store_sub_page(store *st, const char *cursor, const char *name, size_t limit,
		   struct sub_row **items, size_t *n, char **next_cursor)
{
	char after_id[UUID_STR_LEN] = "";
	long long after_at = 0;

	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (next_cursor)
		*next_cursor = NULL;
	if (!st || !items || !n || !next_cursor || limit < 1 || limit > STORE_MAX_PAGE)
		return STORE_INVALID;
	if (cursor && store_newest_cursor_parse(cursor, 's', &after_at, after_id))
		return STORE_INVALID;
	OPTIONAL_OP(st, sub_page);
	char *like = NULL;
	if (name && strpbrk(name, "*?")) {
		if (!(like = malloc(2 * strlen(name) + 1)))
			return STORE_ERROR;
		store_glob_to_like(name, like);
		name = NULL;
	}
	/* One more than asked: whether a next page exists. */
	int rc = st->methods->sub_page(st, after_at, cursor ? after_id : NULL, name, like,
				       limit + 1, items, n);
	free(like);
	for (size_t i = 0; rc == STORE_OK && i < *n && i < limit; i++)
		rc = store_config_open(st, &(*items)[i]);
	if (rc == STORE_OK && *n > limit) {
		const struct sub_row *last = &(*items)[limit - 1];
		if ((*next_cursor = store_newest_cursor('s', last->created_at, last->id))) {
			store_sub_free(&(*items)[limit]);
			*n = limit;
		} else {
			rc = STORE_ERROR;
		}
	}
	if (rc != STORE_OK) {
		store_subs_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return rc;
}

void store_sub_free(struct sub_row *sub)
{
	if (!sub)
		return;
	free(sub->name);
	if (sub->config) /* it holds credentials in clear */
		explicit_bzero(sub->config, strlen(sub->config));
	free(sub->config);
	sub->name = NULL;
	sub->config = NULL;
}

void store_subs_free(struct sub_row *items, size_t n)
{
	if (!items)
		return;
	for (size_t i = 0; i < n; i++)
		store_sub_free(&items[i]);
	free(items);
}

/* ---- subscriptions into the registry ---------------------------------------------- */

/* The subscription of prev (the set a reload replaces) with row's id when decoding row
 * again would give it back unchanged: the same stored config, the columns the decoding
 * reads the same. A full read (at start, after another instance's change, while the set
 * is stale) then costs a comparison per unchanged row, not an opening and a JSON
 * decoding of each of thousands. NULL when it must be decoded. *next: where in prev the next row is looked
 * for first (rows come in creation order, which is mostly prev's order by id). */
static struct subscription *unchanged(const struct sub_set *prev, const struct sub_row *row,
				      size_t *next)
{
	size_t at = *next < prev->n && strcmp(prev->items[*next]->id, row->id) == 0
			    ? *next : sub_set_place(prev, row->id);
	if (at == prev->n)
		return NULL;
	struct subscription *s = prev->items[at];
	*next = at + 1;
	if (!s->stored || s->enabled != row->enabled || s->created_at != row->created_at ||
	    s->updated_at != row->updated_at || strcmp(s->stored, row->config) != 0)
		return NULL;
	return s;
}

/* row (its config as stored) opened and decoded; NULL with the reason in why. */
static struct subscription *decode(store *st, struct sub_row *row,
				   const struct retry_policy *defaults, char *why, size_t whylen)
{
	char *stored = strdup(row->config);
	struct subscription *s = NULL;
	if (!stored) {
		snprintf(why, whylen, "out of memory loading subscription %s", row->id);
		return NULL;
	}
	if (store_config_open(st, row) != STORE_OK) /* logged with the row's id */
		snprintf(why, whylen, "subscription %s cannot be opened: events cannot be fanned "
			 "out", row->id);
	else if (!(s = sub_codec_from_row(row, defaults)))
		snprintf(why, whylen, "subscription %s cannot be decoded: events cannot be fanned "
			 "out", row->id);
	if (!s) {
		explicit_bzero(stored, strlen(stored));
		free(stored);
		return NULL;
	}
	s->stored = stored;
	return s;
}

int store_subs_load(store *st, struct sub_registry *reg, const struct retry_policy *defaults)
{
	struct sub_row *rows = NULL;
	size_t n = 0;
	char why[256];
	int64_t now = clock_now_ms();
	unsigned long ticket = sub_registry_ticket(reg);
	int rc = st ? st->methods->sub_list(st, &rows, &n) : STORE_INVALID;
	if (rc) {
		snprintf(why, sizeof(why), "the subscriptions cannot be read from the store (%s): "
			 "events cannot be fanned out", store_strerror(rc));
		sub_registry_abandon(reg, ticket);
		sub_registry_stale(reg, now, why);
		return rc;
	}
	struct sub_set *prev = sub_registry_acquire(reg);
	int keep = prev->has_defaults && retry_policy_same(&prev->defaults, defaults);
	size_t next = 0;
	struct sub_set *set = sub_set_new();
	set->loaded_at_ms = now;
	set->read_ticket = ticket;
	set->defaults = *defaults;
	set->has_defaults = 1;
	if (sub_set_reserve(set, n)) {
		snprintf(why, sizeof(why), "out of memory loading %zu subscriptions", n);
		rc = STORE_ERROR;
	}
	/* One row that does not open or decode fails the load: a set without it would
	 * silently stop delivering to it. */
	for (size_t i = 0; i < n && rc == STORE_OK; i++) {
		struct subscription *s = keep ? unchanged(prev, &rows[i], &next) : NULL;
		if (s)
			subscription_hold(s);
		else if (!(s = decode(st, &rows[i], defaults, why, sizeof(why))))
			rc = STORE_ERROR;
		if (s && sub_set_add(set, s)) {
			snprintf(why, sizeof(why), "out of memory loading subscription %s", rows[i].id);
			rc = STORE_ERROR;
		}
	}
	sub_registry_release(reg, prev);
	store_subs_free(rows, n);
	if (rc != STORE_OK) {
		/* keep the set there was: a partial one would fan out without that row */
		log_error("%s", why);
		sub_registry_abandon(reg, ticket);
		sub_registry_release(reg, set);
		sub_registry_stale(reg, now, why);
		return rc;
	}
	sub_registry_publish(reg, set);
	return STORE_OK;
}

int store_subs_load_one(store *st, struct sub_registry *reg,
			const struct retry_policy *defaults, const char *id)
{
	struct sub_row row = {0};
	struct subscription *s = NULL;
	char why[256];

	if (!st || !id)
		return STORE_INVALID;
	struct sub_set *cur = sub_registry_acquire(reg);
	int same = cur->has_defaults && retry_policy_same(&cur->defaults, defaults);
	sub_registry_release(reg, cur);
	if (!same) /* the set in use was decoded otherwise (or not at all yet) */
		return store_subs_load(st, reg, defaults);
	unsigned long ticket = sub_registry_ticket(reg);
	int rc = st->methods->sub_get(st, id, &row);
	if (rc == STORE_OK && !(s = decode(st, &row, defaults, why, sizeof(why))))
		rc = STORE_ERROR; /* the whole reload says why, and marks the set stale */
	store_sub_free(&row);
	if (rc != STORE_OK && rc != STORE_NOT_FOUND) {
		sub_registry_abandon(reg, ticket);
		return store_subs_load(st, reg, defaults);
	}
	if (sub_registry_apply(reg, id, s, ticket)) /* out of memory: nothing published */
		return store_subs_load(st, reg, defaults);
	return STORE_OK;
}
