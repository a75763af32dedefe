/* backend.h: what a storage backend implements (SQLite, PostgreSQL).
 *
 * Only store.c and the backends include this file; everybody else uses the store_*
 * wrappers of store.h with an opaque handle. */
#ifndef OUTBOXD_STORE_BACKEND_H
#define OUTBOXD_STORE_BACKEND_H

#include <stdatomic.h>

#include "store/copy.h"
#include "store/count_cache.h"
#include "store/store.h"

/* ---- backends ------------------------------------------------------------------------ */

/* One group of the attempt series (store_methods.attempt_series): the attempts of one bucket
 * that took duration_ms, by outcome, and how many attempts the whole bucket has. */
struct store_series_group {
	int64_t bucket;
	int64_t duration_ms;
	int64_t succeeded;          /* the outcomes of store_series_bucket */
	int64_t client_error;
	int64_t server_error;
	int64_t bucket_total;       /* every attempt of the bucket, of any duration */
};
typedef int (*store_series_group_cb)(void *ctx, const struct store_series_group *g);

/* What a backend implements. The wrappers above check arguments and call these. */
struct store_methods {
	const char *name;
	const char *dsn_prefix;     /* "sqlite:", "postgres://" */
	int concurrent_writers;     /* group writes that may run side by side (writer lanes) */
	int (*open)(store *st, const char *dsn, char *err, size_t errlen);
	void (*close)(store *st);
	int (*ping)(store *st);
	int (*ingest)(store *st, struct store_event_in *events, size_t n);
	int (*relay_outbox)(store *st, size_t limit, store_fanout_cb fanout, void *ctx,
			    size_t *relayed);
	int (*claim_due)(store *st, int64_t now_ms, int64_t lease_ms, size_t limit,
			 struct store_claim **items, size_t *n);
	int (*next_due)(store *st, int64_t *at_ms);
	int (*leases_renew)(store *st, const char (*ids)[UUID_STR_LEN], const int64_t *until,
			    size_t n, unsigned char *renewed);
	/* Results, their attempt rows, and the attempts' per-minute counts (attempt_minutes)
	 * and each subscription's newest failure (attempt_errors) under st->owner, in one
	 * transaction. */
	int (*record_results)(store *st, const struct store_result *results, size_t n);
	int (*attempt_counts_prune)(store *st, int64_t before_ms);
	int (*dead_letters)(store *st, size_t limit, struct store_dead_letter **items, size_t *n);
	int (*dead_letters_done)(store *st, const char (*ids)[UUID_STR_LEN], size_t n);
	int (*reap_leases)(store *st, int64_t now_ms, size_t *n);
	int (*release_all)(store *st, size_t *n);
	int (*order_sweep)(store *st, int64_t now_ms, int full, size_t *parked,
			   size_t *unparked);
	int (*event_get)(store *st, const char *id, struct store_event *ev);
	int (*event_deliveries)(store *st, const char *event_id, struct store_delivery **items,
				size_t *n);
	int (*delivery_get)(store *st, const char *id, struct store_delivery *d);
	int (*delivery_attempts)(store *st, const char *id, struct store_attempt_row **items,
				 size_t *n);
	int (*deliveries_list)(store *st, const struct delivery_filter *f,
			       struct store_delivery **items, size_t *n, char **next_cursor);
	int (*replay)(store *st, const char (*ids)[UUID_STR_LEN], size_t n, int force,
		      enum store_replay_outcome *outcomes, size_t *replayed);
	int (*dlq_purge)(store *st, const char *delivery_id);
	/* The cleanup's two steps (store.c runs them as store_cleanup promises): one
	 * transaction deleting up to limit PROCESSED deliveries processed at or before
	 * before_ms, from the start of the table when from_start, else on from where the
	 * last batch stopped; and a slice of the sweep of the events without a delivery
	 * created at or before before_ms (up to CLEANUP_SWEEP events looked at, all when
	 * all), from the start when from_start, setting *done when it reached the end. */
	int (*cleanup_batch)(store *st, int64_t before_ms, size_t limit, int from_start,
			     size_t *deleted);
	int (*cleanup_sweep)(store *st, int64_t before_ms, int from_start, int all, int *done);
	int (*deliveries_count)(store *st, const struct delivery_filter *f, size_t *n);
	/* Up to limit events matching f newest first, after the event (before_at,
	 * before_id) when before_id is not NULL (f->cursor and f->limit are the wrapper's). */
	int (*events_list)(store *st, const struct event_filter *f, int64_t before_at,
			   const char *before_id, size_t limit, struct store_event_summary **items,
			   size_t *n);
	/* Up to limit event types after the type after (NULL: from the first), in byte
	 * order, each with its newest event's created_at. */
	int (*event_types)(store *st, const char *after, size_t limit,
			   struct store_event_type **items, size_t *n);
	int (*dlq_purge_matching)(store *st, const struct delivery_filter *f, size_t limit,
				  size_t *purged);
	int (*job_create)(store *st, const struct store_job *job);
	int (*job_update)(store *st, const struct store_job *job);
	int (*job_get)(store *st, const char *id, struct store_job *out);
	int (*jobs_running)(store *st, struct store_job **items, size_t *n);
	/* Up to limit jobs newest first, state NULL = any, after the job (before_at,
	 * before_id) when before_id is not NULL. */
	int (*jobs_list)(store *st, const char *state, int64_t before_at, const char *before_id,
			 size_t limit, struct store_job **items, size_t *n);
	int (*audit_append)(store *st, const struct store_audit *a);
	int (*audit_list)(store *st, const char *before_id, size_t limit,
			  struct store_audit **items, size_t *n);
	int (*token_create)(store *st, const struct store_token *t);
	int (*token_delete)(store *st, const char *id);
	int (*token_list)(store *st, struct store_token **items, size_t *n);
	int (*token_touch)(store *st, const char *id, int64_t at_ms);
	/* count_processed 0: the PROCESSED count is not counted (left 0; store_stats reuses an
	 * earlier one, count_cache.h), sparing the count of the whole table. */
	int (*stats)(store *st, int64_t now_ms, int64_t window_ms, int count_processed,
		     struct store_stats *out);
	/* The attempts started in [from_ms, from_ms + bucket_ms * n_buckets) (of
	 * subscription_id's deliveries, NULL = all) grouped by bucket and duration_ms: one
	 * call of group per group, ordered by bucket, then duration (store/series.c turns
	 * them into store_attempt_series' buckets), read from the per-minute counts (from_ms
	 * and bucket_ms are whole minutes). A nonzero return of group stops it:
	 * STORE_ERROR. */
	int (*attempt_series)(store *st, const char *subscription_id, int64_t from_ms,
			      int64_t bucket_ms, size_t n_buckets, store_series_group_cb group,
			      void *ctx);
	int (*sub_create)(store *st, const struct sub_row *sub);
	int (*sub_update)(store *st, const struct sub_row *sub);
	int (*sub_delete)(store *st, const char *id);
	int (*sub_get)(store *st, const char *id, struct sub_row *out);
	int (*sub_list)(store *st, struct sub_row **items, size_t *n);
	/* Up to limit subscriptions oldest first (created_at, id), after the row (after_at,
	 * after_id) when after_id is not NULL, named name when it is not NULL, with a name
	 * LIKE like ('\' escaping; letters' case ignored) when like is not NULL. Configs as
	 * stored (the wrapper opens them). */
	int (*sub_page)(store *st, int64_t after_at, const char *after_id, const char *name,
			const char *like, size_t limit, struct sub_row **items, size_t *n);
	/* Sets the config of subscription id to new_config only while it still is
	 * old_config (STORE_CONFLICT otherwise: changed or deleted meanwhile), leaving name,
	 * enabled and the timestamps alone: sealing a row is not a change of the
	 * subscription (store/secrets.c). The old value is overwritten where the backend can
	 * (SQLite: secure_delete). */
	int (*sub_config_swap)(store *st, const char *id, const char *old_config,
			       const char *new_config);
	/* Optional: after swaps, makes the replaced values unreachable in the database's
	 * files where the backend can (SQLite: checkpoint and truncate the WAL; PostgreSQL:
	 * VACUUM FULL of the table). Failing is logged, not fatal. */
	void (*sub_scrub)(store *st);
	/* The fact name set to value while it is expect (NULL: while absent), in one
	 * statement; STORE_NOT_FOUND when it was not (see store_meta_swap). */
	int (*meta_swap)(store *st, const char *name, const char *expect, const char *value);
	int (*meta_get)(store *st, const char *name, struct store_meta_value *out);
	/* The copy between backends (store/copy.h; each backend's copy.c). copy_read: up
	 * to limit rows of t after the row whose key is after's first row (NULL: from the
	 * start) in primary-key order, appended to out, stopping early once out's arena holds
	 * COPY_BATCH_BYTES. copy_write: rows in one transaction. copy_find: the rows whose
	 * keys are those of keys' rows, appended to found. copy_check: tables, columns and
	 * schema version against store_copy_tables. copy_in_use: optional (NULL: the backend's
	 * open already refuses a store in use). */
	int (*copy_read)(store *st, const struct copy_table *t, const struct copy_batch *after,
			 size_t limit, struct copy_batch *out);
	int (*copy_write)(store *st, const struct copy_batch *rows);
	int (*copy_find)(store *st, const struct copy_batch *keys, struct copy_batch *found);
	int (*copy_check)(store *st, char *err, size_t errlen);
	int (*copy_in_use)(store *st, int *in_use);
	/* Optional (NULL: nothing to listen to). See store_on_work and
	 * store_on_subscriptions_changed. */
	void (*on_work)(store *st, void (*cb)(void *ctx), void *ctx);
	void (*on_subscriptions_changed)(store *st, store_subs_changed_cb cb, void *ctx);
};

/* The handle every backend receives; backends keep their state behind priv. */
struct store {
	const struct store_methods *methods;
	void *priv;
	char owner[128];
	int shared;                 /* store_open_shared: SQLite takes no owner lock */
	/* store_fault_set: the next fault_count calls of the kinds in fault_calls answer
	 * fault_rc */
	_Atomic int fault_count;
	unsigned fault_calls;
	int fault_rc;
	/* store_call_hook_set: called at the start of those calls */
	_Atomic(store_call_hook) call_hook;
	void *call_hook_ctx;
	/* store_set_secret_key: seals subscription configs (store/secrets.c); NULL = clear */
	struct secretbox_key *secret_key;
	/* the PROCESSED count of store_stats, reused while the store is large (count_cache.h) */
	struct count_cache processed;
	_Atomic int64_t read_timeout_ms; /* store_set_read_timeout; 0: none */
	/* where store_cleanup's run is: CLEANUP_IDLE between runs (only the janitor calls it) */
	enum { CLEANUP_IDLE, CLEANUP_DELETING, CLEANUP_SWEEP_START, CLEANUP_SWEEPING } cleanup;
};

extern const struct store_methods store_sqlite_methods;
extern const struct store_methods store_pg_methods;

/* ---- small helpers every backend uses (store.c) --------------------------------------- */

/* PROCESSED deliveries deleted per cleanup transaction: writers wait at most one. */
#define CLEANUP_BATCH 1000

/* Events the cleanup's sweep reads per statement (those without a delivery are deleted),
 * so ingest never waits long behind it. */
#define CLEANUP_CHUNK 10000

/* Events a slice of the cleanup's sweep looks at (store_cleanup with a max), in
 * statements of CLEANUP_CHUNK: about 50 ms on PostgreSQL. */
#define CLEANUP_SWEEP 50000

/* The row of a by-id query that returned n rows of size bytes: moves rows[0] into out and
 * frees the array (returned to the caller's ownership: out). STORE_NOT_FOUND when n is 0. */
int store_take_one(void *rows, size_t n, size_t size, void *out);

/* The event part of a claim, as a backend read it (or the writer holds it): texts with
 * their lengths (source_event_id and partition_key NULL when absent, source never). */
struct store_claim_event {
	const char *event_type, *content_type, *source, *source_event_id, *partition_key,
		*webhook_id; /* NULL: absent */
	size_t type_len, ctype_len, source_len, seid_len, pkey_len, wid_len;
	const void *payload;
	size_t payload_len;
};

/* Copies e into c in the one allocation store_claims_free frees (event_type first; the
 * payload NUL-terminated for convenience, payload_len without it). 0, or -1 when out of
 * memory (logged). */
int store_claim_fill(struct store_claim *c, const struct store_claim_event *e);

/* ---- the copy between backends (store/copy.c) ------------------------------------------ */

/* Compares a backend's schema, n (table, column) pairs (names[2 * i], names[2 * i + 1],
 * borrowed), with store_copy_tables: every described column must be there, and every
 * column there must be described or in skipped (n_skipped: columns the backend leaves
 * out of a copy, each for a reason stated where it is listed). STORE_OK, or STORE_ERROR
 * with err naming the first difference. */
int store_copy_schema_compare(const char *const *names, size_t n,
			      const struct copy_skipped *skipped, size_t n_skipped, char *err,
			      size_t errlen);

/* ---- subscription configs sealed at rest (store/secrets.c) ----------------------------- */

/* The text to store for sub's config: *sealed is the sealed text (returned), or NULL
 * when the store has no key (store the clear config). STORE_OK or STORE_ERROR (logged). */
int store_config_seal(store *st, const struct sub_row *sub, char **sealed);
/* Replaces a stored row's sealed config by the clear one (a clear row stays as it is).
 * STORE_OK, or STORE_ERROR when it does not open with the store's key (logged with the
 * row id and both key ids; the row is left as it was). */
int store_config_open(store *st, struct sub_row *row);

/* ---- schema migrations ------------------------------------------------------------- */

/* One schema step of a backend: src/store/BACKEND/schema/NNN_name.sql, embedded at build
 * time by CMakeLists.txt (in file-name order; version = position = NNN). Applied in
 * order, each in its own transaction, recorded in schema_migrations. Never edit a
 * released migration: add the next file. */
struct store_migration {
	int version;
	const char *name;   /* the file name */
	const char *sql;
};

extern const struct store_migration sqlite_migrations[];
extern const size_t sqlite_migrations_n;
extern const struct store_migration postgres_migrations[];
extern const size_t postgres_migrations_n;

/* ---- what the backend-independent files share (store.c, subscriptions.c,
 * operator_records.c) ------------------------------------------------------------------ */

/* Hard caps on batch sizes: one transaction must stay short enough not to hold the
 * writer for long (ingest of other requests waits behind it). */
#define STORE_MAX_BATCH 10000
#define STORE_MAX_PAGE 1000

/* A backend that lacks an optional op answers STORE_ERROR (logged once by the caller). */
#define OPTIONAL_OP(st, op) \
	do { \
		if (!(st)->methods->op) \
			return STORE_ERROR; \
	} while (0)

/* ---- listing cursors, the same for every backend (store.c) ------------------------- */

/* The column a listing sorts by. */
const char *store_sort_column(enum delivery_sort sort);
/* Reads f->cursor (made by store_cursor_after for the same sort and order) into the sort
 * value and id of the previous page's last row. 0, or -1 when it is not such a cursor. */
int store_cursor_parse(const struct delivery_filter *f, int64_t *value,
		       char id[UUID_STR_LEN]);
/* The cursor of the page after the one ending with last (returned), or NULL when out of
 * memory. */
char *store_cursor_after(const struct delivery_filter *f, const struct store_delivery *last);
/* A cursor of a list keyed by creation (events and jobs newest first, subscriptions oldest
 * first: "<tag>:<created_at>:<id>", the last row of the previous page) into *at and id.
 * 0, or -1 when it is not one. */
int store_newest_cursor_parse(const char *c, char tag, long long *at, char id[UUID_STR_LEN]);
/* The cursor of the page after the row (at, id) of such a list (returned), or NULL when
 * out of memory. */
char *store_newest_cursor(char tag, int64_t at, const char *id);
/* A glob ('*' any run, '?' one character) as a LIKE pattern with '\' escaping, into
 * out (at least 2 * strlen(glob) + 1 bytes). */
void store_glob_to_like(const char *glob, char *out);

#endif
