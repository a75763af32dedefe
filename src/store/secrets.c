/* secrets.c: subscription configs sealed at rest — the store's half (core/secretbox.c
 * the cipher).
 *
 * The store.c wrappers call store_config_seal on the way in and store_config_open on the
 * way out, so both backends keep only sealed texts (core/secretbox.h) and every layer
 * above sees clear documents. This file also checks and migrates the rows at start
 * (store_secrets_prepare) and re-seals them under a new key (store_secrets_rotate).
 * Rows are rewritten with the backends' compare-and-swap (sub_config_swap), so a
 * subscription changed meanwhile by another instance is read again, never overwritten.
 * Must not log or return a clear config or a key; errors name rows and key ids only. */
#include "store/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "core/secretbox.h"
#include "util/log.h"

/* A row changed under a rewrite is read again; more than this in a row means another
 * instance keeps rewriting it (it runs with another key): give up with a message. */
#define SWAP_TRIES 5

int store_set_secret_key(store *st, const struct secretbox_key *key)
{
	if (!st || !key)
		return STORE_INVALID;
	if (!st->secret_key && !(st->secret_key = malloc(sizeof(*st->secret_key))))
		return STORE_ERROR;
	*st->secret_key = *key;
	return STORE_OK;
}

int store_config_seal(store *st, const struct sub_row *sub, char **sealed)
{
	*sealed = NULL;
	if (!st->secret_key)
		return STORE_OK;
	int rc = secretbox_seal(st->secret_key, sub->id, sub->config, strlen(sub->config), sealed);
	if (rc != SECRETBOX_OK) {
		log_error("subscription %s: cannot seal its config: %s", sub->id,
			  secretbox_strerror(rc));
		return STORE_ERROR;
	}
	return STORE_OK;
}

/* Frees a clear config, overwriting it first. */
static void clear_free(char *text)
{
	if (text) {
		OPENSSL_cleanse(text, strlen(text));
		free(text);
	}
}

/* Opens row's config with key (row->config replaced by the clear text on success). */
static int open_with(const struct secretbox_key *key, struct sub_row *row)
{
	char *plain = NULL;
	int rc = secretbox_open(key, row->id, row->config, &plain, NULL);
	if (rc == SECRETBOX_OK) {
		free(row->config);
		row->config = plain;
	}
	return rc;
}

int store_config_open(store *st, struct sub_row *row)
{
	char found[SECRETBOX_KEY_ID_LEN + 1];

	if (!secretbox_is_sealed(row->config))
		return STORE_OK;
	if (!st->secret_key) {
		log_error("subscription %s is sealed, and this store was given no key to open it",
			  row->id);
		return STORE_ERROR;
	}
	int rc = open_with(st->secret_key, row);
	if (rc == SECRETBOX_OK)
		return STORE_OK;
	secretbox_sealed_key_id(row->config, found);
	log_error("subscription %s cannot be read: %s (sealed with key id %s, this outboxd's "
		  "key has id %s)", row->id, secretbox_strerror(rc), found[0] ? found : "?",
		  st->secret_key->id);
	return STORE_ERROR;
}

/* ---- checking and rewriting every row ------------------------------------------------- */

/* Which key a rewrite seals with (to) and which sealed rows it may read besides those
 * already under to (from: the old key of a rotation; NULL at start). */
struct rewrite {
	const struct secretbox_key *to;
	const struct secretbox_key *from;
	size_t rewritten;
	size_t kept;
	int record;          /* at start: the store records to's id as its key, or refuses
	                        when it has recorded another (before any row changes) */
};

/* The store's key is the one it recorded at its first start (STORE_META_SEALING_KEY):
 * instances started together with keys of their own would each seal what they create
 * under their key and fail to open the others' rows. Records key's id when none is
 * recorded yet; STORE_CONFLICT with err naming both ids when another is. */
static int key_record(store *st, const struct secretbox_key *key, char *err, size_t errlen)
{
	struct store_meta_value found;
	int rc = store_meta_swap(st, STORE_META_SEALING_KEY, NULL, key->id, &found);
	if (rc == STORE_CONFLICT && strcmp(found.value, key->id) == 0)
		return STORE_OK; /* recorded already: ours */
	if (rc == STORE_CONFLICT)
		snprintf(err, errlen,
			 "this store's subscriptions are sealed with key id %s (recorded at its "
			 "first start), but the configured key has id %s: start every outboxd of "
			 "this store with that key (secret_key, or a copy of the DATA_DIR/secret.key "
			 "of the instance that started first; docs/operations.md, \"The secret "
			 "key\"). Nothing was changed.", found.value, key->id);
	else if (rc != STORE_OK)
		snprintf(err, errlen, "cannot record the key id in the store: %s",
			 store_strerror(rc));
	return rc;
}

/* Why row cannot be read with the rewrite's keys, into err: the row, the key ids, and
 * what the operator can do. */
static void describe(const struct rewrite *w, const struct sub_row *row, int rc, char *err,
		     size_t errlen)
{
	char found[SECRETBOX_KEY_ID_LEN + 1];
	const char *name = row->name ? row->name : "";

	secretbox_sealed_key_id(row->config, found);
	if (rc == SECRETBOX_OTHER_KEY && !w->from) {
		snprintf(err, errlen,
			 "subscription %s (%s) is sealed with key id %s, but the configured key has "
			 "id %s: start outboxd with the key that sealed it (secret_key, or the "
			 "DATA_DIR/secret.key of the instance that wrote it; on PostgreSQL every "
			 "instance needs the same key), or run `outboxd rotate-key` again if a "
			 "rotation was interrupted. Nothing was changed.",
			 row->id, name, found, w->to->id);
	} else if (rc == SECRETBOX_OTHER_KEY) {
		snprintf(err, errlen,
			 "subscription %s (%s) is sealed with key id %s, neither the old key (id %s) "
			 "nor the new one (id %s): give the key that sealed it as the old key "
			 "(--secret-key). Nothing was changed.",
			 row->id, name, found, w->from->id, w->to->id);
	} else if (rc == SECRETBOX_UNSUPPORTED) {
		snprintf(err, errlen,
			 "subscription %s (%s) is sealed in a format newer than this outboxd reads "
			 "(%.6s...): run the outboxd version that wrote it. Nothing was changed.",
			 row->id, name, row->config);
	} else {
		snprintf(err, errlen,
			 "subscription %s (%s) does not open with key id %s: %s. Its row was changed "
			 "outside outboxd or copied from another row: restore it from a backup, or "
			 "delete the subscription and create it again. Nothing was changed.",
			 row->id, name, found[0] ? found : "?", secretbox_strerror(rc));
	}
}

/* Reads row's config with the rewrite's keys: *plain is the clear config to seal with
 * w->to (returned; NULL when the row is under w->to already: nothing to do). SECRETBOX_OK
 * or why it cannot be read. */
static int row_plain(const struct rewrite *w, const struct sub_row *row, char **plain)
{
	char id[SECRETBOX_KEY_ID_LEN + 1];
	char *text = NULL;
	int rc;

	*plain = NULL;
	if (!secretbox_is_sealed(row->config)) {
		*plain = strdup(row->config);
		return *plain ? SECRETBOX_OK : SECRETBOX_ERROR;
	}
	const struct secretbox_key *key = w->to;
	if (secretbox_sealed_key_id(row->config, id) == 0 && w->from &&
	    strcmp(id, w->from->id) == 0 && strcmp(id, w->to->id) != 0)
		key = w->from;
	/* Opened even when it stays as it is: a row that does not verify is found now,
	 * not at its first delivery. */
	rc = secretbox_open(key, row->id, row->config, &text, NULL);
	if (rc != SECRETBOX_OK)
		return rc;
	if (key == w->to) {
		clear_free(text);
		return SECRETBOX_OK;
	}
	*plain = text;
	return SECRETBOX_OK;
}

/* Seals one row under w->to unless it is there already; on a conflict (the row changed
 * meanwhile) reads it again. */
static int rewrite_row(store *st, struct rewrite *w, struct sub_row *row, char *err,
		       size_t errlen)
{
	struct sub_row fresh = {0};
	char id[UUID_STR_LEN];
	int rc = STORE_OK;

	snprintf(id, sizeof(id), "%s", row->id);
	for (int tries = 0; tries < SWAP_TRIES; tries++) {
		char *plain = NULL, *sealed = NULL;
		int brc = row_plain(w, row, &plain);
		if (brc != SECRETBOX_OK) {
			describe(w, row, brc, err, errlen);
			rc = STORE_ERROR;
			goto out;
		}
		if (!plain) {
			w->kept++;
			goto out;
		}
		brc = secretbox_seal(w->to, row->id, plain, strlen(plain), &sealed);
		clear_free(plain);
		if (brc != SECRETBOX_OK) {
			snprintf(err, errlen, "subscription %s: cannot seal its config: %s", row->id,
				 secretbox_strerror(brc));
			rc = STORE_ERROR;
			goto out;
		}
		rc = st->methods->sub_config_swap(st, row->id, row->config, sealed);
		free(sealed);
		if (rc == STORE_OK) {
			w->rewritten++;
			goto out;
		}
		if (rc != STORE_CONFLICT) {
			snprintf(err, errlen, "subscription %s: cannot write it: %s", row->id,
				 store_strerror(rc));
			goto out;
		}
		/* Changed or deleted meanwhile (another instance): read it again. */
		store_sub_free(&fresh);
		rc = st->methods->sub_get(st, id, &fresh);
		if (rc == STORE_NOT_FOUND) {
			rc = STORE_OK;
			goto out;
		}
		if (rc != STORE_OK) {
			snprintf(err, errlen, "subscription %s: cannot read it: %s", id,
				 store_strerror(rc));
			goto out;
		}
		row = &fresh;
	}
	snprintf(err, errlen, "subscription %s keeps changing while it is sealed: is an outboxd "
		 "with another key running on this database? Stop it and try again", id);
	rc = STORE_ERROR;
out:
	store_sub_free(&fresh);
	return rc;
}

/* Every row: first all are checked (nothing changes when one cannot be read), then the
 * ones not under w->to yet are rewritten. */
static int rewrite_all(store *st, struct rewrite *w, char *err, size_t errlen)
{
	struct sub_row *rows = NULL;
	size_t n = 0;
	int rc = st->methods->sub_list(st, &rows, &n);

	if (rc != STORE_OK) {
		snprintf(err, errlen, "cannot list the subscriptions: %s", store_strerror(rc));
		return rc;
	}
	for (size_t i = 0; i < n; i++) {
		char *plain = NULL;
		int brc = row_plain(w, &rows[i], &plain);
		clear_free(plain);
		if (brc != SECRETBOX_OK) {
			describe(w, &rows[i], brc, err, errlen);
			rc = STORE_ERROR;
			goto out;
		}
	}
	if (w->record && (rc = key_record(st, w->to, err, errlen)) != STORE_OK)
		goto out;
	for (size_t i = 0; i < n && rc == STORE_OK; i++)
		rc = rewrite_row(st, w, &rows[i], err, errlen);
	if (w->rewritten && st->methods->sub_scrub)
		st->methods->sub_scrub(st);
out:
	store_subs_free(rows, n);
	return rc;
}

int store_secrets_prepare(store *st, size_t *migrated, char *err, size_t errlen)
{
	if (migrated)
		*migrated = 0;
	if (!st || !migrated || !st->secret_key) {
		snprintf(err, errlen, "no key to seal subscriptions with");
		return STORE_INVALID;
	}
	struct rewrite w = {.to = st->secret_key, .record = 1};
	int rc = rewrite_all(st, &w, err, errlen);
	*migrated = w.rewritten;
	return rc;
}

int store_secrets_rotate(store *st, const struct secretbox_key *new_key, size_t *resealed,
			 size_t *skipped, char *err, size_t errlen)
{
	if (resealed)
		*resealed = 0;
	if (skipped)
		*skipped = 0;
	if (!st || !new_key || !resealed || !skipped || !st->secret_key) {
		snprintf(err, errlen, "rotating needs the old key and the new one");
		return STORE_INVALID;
	}
	struct rewrite w = {.to = new_key, .from = st->secret_key};
	int rc = rewrite_all(st, &w, err, errlen);
	*resealed = w.rewritten;
	*skipped = w.kept;
	if (rc != STORE_OK)
		return rc;
	/* Every row is under the new key: the store's recorded key follows (from the old
	 * one, from none on a store older than the record, or already the new one when a
	 * rotation that got this far is run again). */
	struct store_meta_value found;
	rc = store_meta_swap(st, STORE_META_SEALING_KEY, st->secret_key->id, new_key->id, &found);
	if (rc == STORE_CONFLICT && !found.value[0])
		rc = store_meta_swap(st, STORE_META_SEALING_KEY, NULL, new_key->id, &found);
	if (rc == STORE_CONFLICT && strcmp(found.value, new_key->id) == 0)
		rc = STORE_OK;
	if (rc == STORE_CONFLICT)
		snprintf(err, errlen, "every subscription is sealed under the new key (id %s), but "
			 "the store records key id %s as its key, neither the old (%s) nor the new "
			 "one: was another rotation run at the same time?", new_key->id,
			 found.value, st->secret_key->id);
	else if (rc != STORE_OK)
		snprintf(err, errlen, "every subscription is sealed under the new key (id %s), but "
			 "the store's record of its key cannot be updated: %s; run rotate-key again",
			 new_key->id, store_strerror(rc));
	return rc;
}
