/* sqlite_int.h: what the files of the SQLite backend share (see conn.c for the
 * backend's rules): the connection state, the prepared statements, and the helpers that
 * bind values, read rows and run transactions. Only src/store/sqlite/ includes it. */
#ifndef OUTBOXD_STORE_SQLITE_SQLITE_INT_H
#define OUTBOXD_STORE_SQLITE_SQLITE_INT_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "store/backend.h"
#include "util/buf.h"



/* Stored error text (attempt message and cause, last_message/last_cause) is bounded. */
#define ERROR_TEXT_MAX 1024


/* The migration whose SQL file (006_checks_without_in.sql) only explains: its work is
 * rewrite_checks above. */
#define CHECKS_MIGRATION 6


#define DELIVERY_COLUMNS                                                             \
	"id, event_id, subscription_id, event_type, status, replay, attempt_count, "  \
	"retry_count, next_attempt_at, created_at, updated_at, processed_at, "        \
	"last_code, last_message, last_cause, lease_owner, lease_until, blocked, "   \
	"failing_since"


/* The claim's ordering rule for a candidate delivery d (per-key ordering): it has no
 * key, or its subscription is not ordered, or no earlier delivery of its key to that
 * subscription is still to be done — a dead one excepted when the subscription passes
 * dead ones over (ORDERING_KEY_SKIP). The same text serves the parking sweep. */
#define ORDERING_SQL                                                                      \
	"(d.order_key IS NULL OR NOT EXISTS (SELECT 1 FROM subscriptions s"              \
	"  WHERE s.id = d.subscription_id AND s.ordering > 0 AND EXISTS ("              \
	"   SELECT 1 FROM deliveries p WHERE p.subscription_id = d.subscription_id"     \
	"   AND p.order_key = d.order_key AND p.id < d.id AND p.status <> 'PROCESSED'"  \
	"   AND NOT (s.ordering = 2 AND p.status = 'FAILED' AND p.next_attempt_at IS NULL"\
	"    AND p.lease_until IS NULL))))"

/* On the write connection. */
enum wstmt {
	W_BEGIN,
	W_COMMIT,
	W_ROLLBACK,
	W_EVENT_FIND,
	W_EVENT_FIND_ID,
	W_EVENT_INSERT,
	W_DELIVERY_INSERT,
	W_DELIVERY_INSERT_STATE,
	W_CLAIM,
	W_CLAIM_LEASE,
	W_RESULT,
	W_DELIVERY_SUB,
	W_PROMOTE,
	W_ATTEMPT_INSERT,
	W_ATTEMPT_APPEND,
	W_LEASE_RENEW,
	W_REAP,
	W_RELEASE_ALL,
	W_OUTBOX_SELECT,
	W_OUTBOX_DELETE,
	W_DELIVERY_STATE,
	W_REPLAY_SET,
	W_DELIVERY_DELETE,
	W_EVENT_DELETE_ORPHAN,
	W_CLEANUP_CHUNK,
	W_SUB_INSERT,
	W_SUB_UPDATE,
	W_SUB_DELETE,
	W_COUNTS_MINUTE,
	W_COUNTS_ERROR,
	W_COUNTS_PRUNE_MINUTES,     /* then W_COUNTS_PRUNE_ERRORS: one prune, in this order */
	W_COUNTS_PRUNE_ERRORS,
	W_NEXT_DUE,                 /* the writer's, after a claim (sq_next_due) */
	W_COUNT
};


/* On each read connection (struct sq_reader). */
enum rstmt {
	R_PING,
	R_EVENT_GET,
	R_EVENT_DELIVERIES,
	R_DELIVERY_GET,
	R_ATTEMPTS,
	R_EVENT_SCAN,
	R_SUB_GET,
	R_SUB_LIST,
	R_COUNT
};


/* A results batch's attempts, counted per minute (counts.c). */
struct count_minute {
	int64_t minute;             /* ms, the start of the minute the attempts started in */
	int64_t duration_ms;
	int64_t n[3];               /* succeeded, client_error, server_error */
	char sub[UUID_STR_LEN];
};

/* A subscription's newest failed attempt in a results batch (counts.c). */
struct count_error {
	int64_t at;
	int code;
	const char *message;        /* borrowed from the batch's results */
	char sub[UUID_STR_LEN];
};

struct sq_counts {
	struct count_minute *m;
	size_t n_m, cap_m;
	struct count_error *e;
	size_t n_e, cap_e;
};

/* The readers: up to SQ_READERS read connections, and a read takes whichever is free
 * (sq_read_lock). An operator's search that reads a large store for a second or more (a
 * substring of the errors over two million deliveries: 0.55-1.1 s) then holds one of
 * them, while /readyz, /metrics, the console and the other reads go on over the others.
 * The first is opened with the store; the others when reads first overlap, with a
 * smaller page cache (READER_CACHE_KIB, EXTRA_READER_CACHE_KIB in conn.c). */
#define SQ_READERS 3

struct sq_reader {
	pthread_mutex_t mu;         /* guards db, r[] and deadline_ms */
	sqlite3 *db;                /* NULL until first needed (all but readers[0]) */
	sqlite3_stmt *r[R_COUNT];
	/* while held: the monotonic ms after which its statements are interrupted (the
	 * store's read timeout; SQLITE_INTERRUPT, STORE_TIMEOUT), 0 for none */
	int64_t deadline_ms;
};

struct sq {
	store *st;                  /* the handle it backs (its read timeout) */
	char *path;
	int lock_fd;
	sqlite3 *wdb;
	pthread_mutex_t wmu;        /* guards wdb and w[] */
	struct sq_reader readers[SQ_READERS];
	atomic_uint reader_next;    /* the reader a read waits for when all are busy */
	int relaxed;                /* wdb runs with synchronous=NORMAL (guarded by wmu) */
	int64_t busy_until_ms;      /* in an outage: writes fail fast until then, 0 = none
	                               (sq_tx_begin; guarded by wmu) */
	sqlite3_stmt *w[W_COUNT];
	sqlite3_stmt *event_rows;   /* INGEST_ROWS events in one INSERT (guarded by wmu) */
	sqlite3_stmt *delivery_rows; /* INGEST_ROWS new deliveries in one INSERT (wmu) */
	struct sq_counts counts;    /* the results batch being written (wmu) */
	/* The cleanup run's sweep of the events: the last rowid it looked at (admin.c). Only
	 * store_cleanup uses it, and the janitor is its one caller. */
	int64_t sweep_after;
};


/* Another process holding the write lock past the busy timeout (BUSY_WAIT_MS) is an
 * outage. The writer that waited it out latches it for BUSY_LATCH_MS: the writers queued
 * behind it on wmu (the writer, the janitor, the API) then fail at once — ingest goes to the
 * spool — instead of each waiting its own timeout in turn. Until a write gets through
 * again, the one that tries after each latch waits only BUSY_PROBE_MS, so the others are
 * not held up behind it either. */
#define BUSY_WAIT_MS 5000

#define BUSY_PROBE_MS 200

#define BUSY_LATCH_MS 1000


/* Ingest writes in groups of INGEST_ROWS rows: one statement execution per group instead
 * of one per row (per execution SQLite opens a cursor on the table and on each index it
 * touches; the group pays that once). Measured (callgrind, 20,000 events of one
 * subscription in batches of 100): 60,500 -> 38,600 instructions per delivery. The texts
 * are made here, with numbered parameters, *_COLS per row. */
#define INGEST_ROWS 32

#define EVENT_COLS 9

#define DELIVERY_COLS 7


/* New deliveries waiting to be inserted INGEST_ROWS at a time. */
struct delivery_group {
	char ids[INGEST_ROWS][UUID_STR_LEN]; /* bound, so they live until the group runs */
	const struct store_event_in *ev[INGEST_ROWS];
	size_t sub[INGEST_ROWS];
	int rows;
};


struct claim_row {
	int64_t due;
	int64_t rowid;                /* the delivery's, to lease it by */
	struct store_claim c;
};


#define JOB_COLUMNS "id, kind, state, filter, force, rate, matched, done, cursor, actor, error," \
		    " created_at, updated_at"

/* ---- admin.c --------------------------------------------------------------- */

int sq_replay(store *st, const char (*ids)[UUID_STR_LEN], size_t n, int force,
		     enum store_replay_outcome *outcomes, size_t *replayed);

int sq_dlq_purge(store *st, const char *delivery_id);

int sq_cleanup_batch(store *st, int64_t before_ms, size_t limit, int from_start,
		     size_t *deleted);
int sq_cleanup_sweep(store *st, int64_t before_ms, int from_start, int all, int *done);

int sq_sub_create(store *st, const struct sub_row *sub);

int sq_sub_update(store *st, const struct sub_row *sub);

int sq_sub_delete(store *st, const char *id);

int sq_sub_get(store *st, const char *id, struct sub_row *out);

int sq_sub_list(store *st, struct sub_row **items, size_t *n);
int sq_event_types(store *st, const char *after, size_t limit, struct store_event_type **items,
		   size_t *n);
int sq_sub_page(store *st, int64_t after_at, const char *after_id, const char *name,
		const char *like, size_t limit, struct sub_row **items, size_t *n);

int sq_sub_config_swap(store *st, const char *id, const char *old_config,
		       const char *new_config);

void sq_sub_scrub(store *st);
int sq_leases_renew(store *st, const char (*ids)[UUID_STR_LEN], const int64_t *until,
		    size_t n, unsigned char *renewed);
int sq_meta_swap(store *st, const char *name, const char *expect, const char *value);
int sq_meta_get(store *st, const char *name, struct store_meta_value *out);

int sq_deliveries_count(store *st, const struct delivery_filter *f, size_t *n);

int sq_dlq_purge_matching(store *st, const struct delivery_filter *f, size_t limit,
				 size_t *purged);

int sq_job_create(store *st, const struct store_job *job);

int sq_job_update(store *st, const struct store_job *job);

int sq_job_get(store *st, const char *id, struct store_job *out);

int sq_jobs_running(store *st, struct store_job **items, size_t *n);
int sq_jobs_list(store *st, const char *state, int64_t before_at, const char *before_id,
		 size_t limit, struct store_job **items, size_t *n);

int sq_order_sweep(store *st, int64_t now_ms, int full, size_t *parked, size_t *unparked);
int sq_audit_append(store *st, const struct store_audit *a);

int sq_audit_list(store *st, const char *before_id, size_t limit,
			 struct store_audit **items, size_t *n);
int sq_token_create(store *st, const struct store_token *t);
int sq_token_delete(store *st, const char *id);
int sq_token_list(store *st, struct store_token **items, size_t *n);
int sq_token_touch(store *st, const char *id, int64_t at_ms);

/* ---- copy.c ---------------------------------------------------------------- */

/* store_methods.copy_*: (store/backend.h). The owner lock store_open takes refuses a
 * file a daemon holds, so the backend has no copy_in_use. */
int sq_copy_read(store *st, const struct copy_table *t, const struct copy_batch *after,
		 size_t limit, struct copy_batch *out);
int sq_copy_write(store *st, const struct copy_batch *rows);
int sq_copy_find(store *st, const struct copy_batch *keys, struct copy_batch *found);
int sq_copy_check(store *st, char *err, size_t errlen);

/* ---- counts.c -------------------------------------------------------------- */

/* Counts attempt a of a delivery of subscription sub into sq->counts. SQLITE_OK or
 * SQLITE_NOMEM. */
int sq_counts_add(struct sq_counts *c, const char *sub, const struct store_attempt *a);
/* Writes sq->counts under owner in the open transaction (sq_record_results empties it
 * before each batch). A SQLite code. */
int sq_counts_write(struct sq *sq, const char *owner);
void sq_counts_free(struct sq *sq);
/* store_methods.attempt_counts_prune. */
int sq_attempt_counts_prune(store *st, int64_t before_ms);

/* ---- conn.c ---------------------------------------------------------------- */

struct sq *sq_of(store *st);

/* Locks a free reader (opening it if need be), or waits for one: never NULL. Its
 * statements are interrupted once the store's read timeout has passed since (STORE_TIMEOUT);
 * sq_read_unlock ends that. */
struct sq_reader *sq_read_lock(struct sq *sq);
void sq_read_unlock(struct sq_reader *rd);

/* ---- read.c ---------------------------------------------------------------- */

int sq_event_get(store *st, const char *id, struct store_event *ev);

int sq_event_deliveries(store *st, const char *event_id,
			       struct store_delivery **items, size_t *n);

int sq_delivery_get(store *st, const char *id, struct store_delivery *d);

int sq_delivery_attempts(store *st, const char *id, struct store_attempt_row **items,
				size_t *n);

/* The WHERE conditions of a delivery filter, appended to sql (constant fragments only);
 * sq_filter_bind binds their values in the same order. */
void sq_filter_sql(const struct delivery_filter *f, char *sql, size_t size);

void sq_filter_bind(sqlite3_stmt *s, const struct delivery_filter *f, int *b);

int sq_deliveries_list(store *st, const struct delivery_filter *f,
			      struct store_delivery **items, size_t *n, char **next_cursor);

int sq_events_list(store *st, const struct event_filter *f, int64_t before_at,
		   const char *before_id, size_t limit, struct store_event_summary **items,
		   size_t *n);

int sq_stats(store *st, int64_t now_ms, int64_t window_ms, int count_processed,
	     struct store_stats *out);
int sq_attempt_series(store *st, const char *subscription_id, int64_t from_ms,
		      int64_t bucket_ms, size_t n_buckets, store_series_group_cb group,
		      void *ctx); /* series.c */

/* ---- rows.c ---------------------------------------------------------------- */

/* Busy, full disk, I/O trouble: the caller should answer "try again later". */
int sq_store_code(int rc);

int sq_log_stmt_error(sqlite3_stmt *s, int rc);

int sq_log_nomem(void);

void sq_stmt_end(sqlite3_stmt *s);

/* Steps a statement that returns no rows and resets it. SQLITE_OK or the error. */
int sq_step_done(sqlite3_stmt *s);

/* Steps a statement expected to return at most one row: SQLITE_ROW (the statement is
 * left on the row; the caller calls sq_stmt_end), SQLITE_DONE (reset) or the error. */
int sq_step_row(sqlite3_stmt *s);

void sq_bind_text(sqlite3_stmt *s, int i, const char *t);

/* Text of at most ERROR_TEXT_MAX bytes, cut on a UTF-8 character boundary. */
void sq_bind_error_text(sqlite3_stmt *s, int i, const char *t);

void sq_bind_payload(sqlite3_stmt *s, int i, const void *p, size_t len);
/* The schema's version: the highest applied migration, 0 with none. A SQLite code. */
int sq_schema_version(sqlite3 *db, int64_t *version);

/* 0 means "none" in the interface and NULL in the table. */
void sq_bind_time(sqlite3_stmt *s, int i, int64_t v);

void sq_col_id(sqlite3_stmt *s, int i, char dst[UUID_STR_LEN]);

/* Copies a text column into *out (NULL for SQL NULL). SQLITE_OK or SQLITE_NOMEM. */
int sq_col_dup(sqlite3_stmt *s, int i, char **out);

/* Makes room for element n of an array of size-byte elements: returns the array (maybe
 * moved), or NULL when memory runs out (the old array is then untouched). */
void *sq_grow(void *arr, size_t *cap, size_t n, size_t size);

int sq_tx_begin(struct sq *sq);

/* Takes the writer lock with the connection at synchronous=FULL. SQLITE_OK, or the
 * error that left it relaxed (the lock is held either way). */
int sq_wlock(struct sq *sq);

/* Takes the writer lock for claims and results, at synchronous=NORMAL when it can (a
 * failure only means a stricter commit). */
void sq_wlock_relaxed(struct sq *sq);

/* Ends a write transaction: commit on success, rollback otherwise. Returns the
 * store code. */
int sq_tx_end(struct sq *sq, int rc);

/* Reads the current row of s into row (zeroed here first). SQLITE_OK, or an error with
 * whatever the row had allocated freed again. */
typedef int (*sq_row_cb)(sqlite3_stmt *s, void *row);

/* Reads a delivery row (DELIVERY_COLUMNS): an sq_row_cb for struct store_delivery. */
int sq_read_delivery(sqlite3_stmt *s, void *row);

/* Steps s to its end, appending each row (size bytes, read by read) to *items, which
 * holds *n rows in *cap allocated (all may start at 0/NULL). Returns an SQLite code; on
 * failure the rows read so far stay in *items for the caller to free. Does not reset s;
 * the caller holds the statement's connection. */
int sq_read_rows(sqlite3_stmt *s, size_t size, sq_row_cb read, void **items, size_t *n,
		 size_t *cap);

/* The one row of id: binds id to ?1 of reader statement k and reads the row into out with
 * read, on a reader it holds meanwhile (sq_read_lock). STORE_OK, STORE_NOT_FOUND, or
 * the store error. Every "get one row by id" of the backend is this call. */
int sq_get_one(struct sq *sq, enum rstmt k, const char *id, sq_row_cb read, void *out);

/* ---- write.c --------------------------------------------------------------- */

/* Events with an idempotency key (or replayed from the spool) are checked and inserted
 * one by one, in order, so a key repeated within the batch is found; the others go in
 * groups. A partial group at the end goes one by one too. */
int sq_ingest(store *st, struct store_event_in *events, size_t n);

int sq_relay_outbox(store *st, size_t limit, store_fanout_cb fanout, void *ctx,
			   size_t *relayed);

int sq_claim_due(store *st, int64_t now_ms, int64_t lease_ms, size_t limit,
			struct store_claim **items, size_t *n);

int sq_next_due(store *st, int64_t *at_ms);

/* Results are written one statement each: grouping them 32 to an UPDATE ... FROM
 * (VALUES ...) was measured (bench: claim and record 20,000 deliveries under callgrind)
 * at 82,200 against 81,100 instructions per delivery, the b-tree work of the update and
 * the attempt row being nearly all of it; not worth the code. */
int sq_record_results(store *st, const struct store_result *results, size_t n);

int sq_reap_leases(store *st, int64_t now_ms, size_t *n);

int sq_dead_letters(store *st, size_t limit, struct store_dead_letter **items, size_t *n);

int sq_dead_letters_done(store *st, const char (*ids)[UUID_STR_LEN], size_t n);

int sq_release_all(store *st, size_t *n);

#endif
