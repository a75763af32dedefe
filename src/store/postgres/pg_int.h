/* pg_int.h: what the files of the PostgreSQL backend share (see conn.c for the
 * backend's rules): the connection state, the prepared statements, and the helpers that
 * build parameters, read results and run transactions. Only src/store/postgres/
 * includes it. */
#ifndef OUTBOXD_STORE_POSTGRES_PG_INT_H
#define OUTBOXD_STORE_POSTGRES_PG_INT_H

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "store/backend.h"
#include "util/buf.h"
#include "util/logburst.h"


#define ERROR_TEXT_MAX 1024       /* stored error text, as in SQLite */

#define BACKOFF_MIN_MS 100

#define BACKOFF_MAX_MS 2000

#define ARRAY_MAX (1u << 30)      /* PostgreSQL's largest field: 1 GiB */

#define NOTIFY_CHANNEL "outboxd_work"

#define SUBS_CHANNEL "outboxd_subs"

/* pg_advisory_lock key serialising migrations of concurrently starting instances
 * ("outboxd" in ASCII). */
#define MIGRATION_LOCK "31079169042065508"


/* Built-in type OIDs (pg_type.dat; fixed across versions) of binary array elements. */
#define OID_BOOL 16

#define OID_BYTEA 17

#define OID_INT8 20

#define OID_INT4 23

#define OID_TEXT 25


/* The migrations are src/store/postgres/schema/NNN_*.sql (store/backend.h), applied under an
 * advisory lock. The tables mirror the SQLite backend's; ids are text in the "C"
 * collation so keyset pages order them byte-wise, like strcmp. */


/* A delivery as the API shows it, read FROM DELIVERY_FROM: its due time, lease and
 * parking are its queue row's (schema/020_queue.sql: a delivered one has none). */
#define DELIVERY_COLUMNS                                                                 \
	"d.id, d.event_id, d.subscription_id, d.event_type, d.status, d.replay,"          \
	" d.attempt_count, d.retry_count, q.next_attempt_at, d.created_at, d.updated_at," \
	" d.processed_at, d.last_code, d.last_message, d.last_cause, q.lease_owner,"      \
	" q.lease_until, COALESCE(q.blocked, 0), d.failing_since"
#define DELIVERY_FROM " FROM outboxd.deliveries d LEFT JOIN outboxd.queue q ON q.id = d.id"


#define JOB_COLUMNS "id, kind, state, filter, force, rate, matched, done, cursor, actor, error," \
		    " created_at, updated_at"


enum stmt {
	S_PING,
	S_INGEST,
	S_INGEST_UNKEYED,
	S_INGEST_REPLAY,
	S_DUP_LOOKUP,
	S_OUTBOX_TAKE,
	S_CLAIM,
	S_NEXT_DUE,
	S_RESULTS,
	S_RESULTS_FAST,
	S_LEASE_RENEW,
	S_REAP,
	S_RELEASE_ALL,
	S_EVENT_GET,
	S_EVENT_DELIVERIES,
	S_DELIVERY_GET,
	S_ATTEMPTS,
	S_REPLAY_CHECK,
	S_REPLAY_SET,
	S_NOTIFY,
	S_PURGE_CHECK,
	S_DELIVERY_DELETE,
	S_EVENT_DELETE_ORPHAN,
	S_CLEANUP_CHUNK,
	S_EVENTS_DELETE_ORPHANS,
	S_SWEEP_ORPHANS,
	S_SUB_INSERT,
	S_SUB_UPDATE,
	S_SUB_DELETE,
	S_SUB_GET,
	S_SUB_LIST,
	S_COUNT
};


/* The claim's ordering rule for a candidate delivery d (per-key ordering): it has no
 * key, or its subscription is not ordered, or no earlier delivery of its key to that
 * subscription is still to be done — a dead one excepted when the subscription passes
 * dead ones over (ORDERING_KEY_SKIP). An earlier one another instance holds locked still
 * counts: the subquery reads rows, it does not lock them.
 * The earlier delivery is looked for as the first one in id order rather than with
 * EXISTS: on the claims session, which has no sorts to choose from, only the ordering
 * index gives that order, so the check reads a few of its entries whatever the
 * statistics say. With statistics taken while nothing was unfinished, EXISTS read the
 * status index from its start for every candidate: 26 s for a claim of 100 in a backlog
 * of 96,000 ordered deliveries, 50-77 ms this way (docs/performance.md). */
#define ORDERING_SQL                                                                      \
	"(d.order_key IS NULL OR NOT EXISTS (SELECT 1 FROM outboxd.subscriptions s"      \
	"  WHERE s.id = d.subscription_id AND s.ordering > 0 AND "                      \
	PENDING_BEFORE("d", "s") "))"

/* An earlier delivery of D's key still to be done (a dead one not counted when the
 * subscription S passes dead ones over): D must wait its turn. The check of ORDERING_SQL,
 * which the janitor's ordering sweeps (write.c) make the same way. */
#define PENDING_BEFORE(D, S)                                                             \
	"(SELECT p.id FROM outboxd.queue p"                                             \
	" WHERE p.subscription_id = " D ".subscription_id AND p.order_key = " D ".order_key" \
	" AND p.id < " D ".id AND NOT (" S ".ordering = 2"                                \
	" AND p.status = 'FAILED' AND p.next_attempt_at IS NULL AND p.lease_until IS NULL)"\
	" ORDER BY p.id LIMIT 1) IS NOT NULL"

/* The ingest statement's insert of the events whose rows WHERE picks: ev_plain takes the
 * events without an idempotency key (nothing can make them duplicates: a plain insert),
 * ev_keyed those with one (CONFLICT says which unique keys make an event a duplicate).
 * ON CONFLICT costs every row it inserts a speculative insertion (a check of the
 * arbiter index, a token lock and a confirmation record in the WAL), so the events that
 * cannot conflict do not go through it. */
#define INGEST_EVENTS_SQL(WHERE, CONFLICT) \
		" INSERT INTO outboxd.events(id, event_type, source, source_event_id," \
		"  partition_key, content_type, payload, created_at, traceparent, webhook_id," \
		"  envelope)" \
		" SELECT u.id, u.event_type, u.source, u.source_event_id, u.partition_key," \
		"  u.content_type, u.payload, u.created_at, u.traceparent, u.webhook_id," \
		"  u.envelope" \
		" FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]," \
		"  $6::text[], $7::bytea[], $8::int8[], $15::text[], $23::text[], $25::bytea[])" \
		"  WITH ORDINALITY" \
		"  AS u(id, event_type, source, source_event_id, partition_key, content_type," \
		"  payload, created_at, traceparent, webhook_id, envelope, ord)" \
		" WHERE " WHERE " ORDER BY u.ord" CONFLICT " RETURNING id"

/* The ingest statement; EVENTS inserts the events into the CTE ev (RETURNING the ids it
 * inserted). */
#define INGEST_SQL(EVENTS) \
		"WITH " EVENTS "," \
		" dl AS (" \
		" INSERT INTO outboxd.deliveries(id, event_id, subscription_id, event_type, status," \
		"  next_attempt_at, last_code, last_message, last_cause, created_at, updated_at," \
		"  order_key, lease_until, lease_owner, starts_scheduled)" \
		" SELECT v.id, v.event_id, v.subscription_id, v.event_type, v.status, v.next," \
		"  v.code, v.message, v.cause, v.due, v.due, k.partition_key, v.lease," \
		"  CASE WHEN v.lease IS NULL THEN NULL ELSE $22::text END, v.sched" \
		" FROM unnest($9::text[], $10::text[], $11::text[], $12::text[], $13::int8[]," \
		"  $16::text[], $17::int8[], $18::int4[], $19::text[], $20::text[], $21::int8[]," \
		"  $24::bool[])" \
		"  AS v(id, event_id, subscription_id, event_type, due, status, next, code," \
		"  message, cause, lease, sched)" \
		" JOIN unnest($1::text[], $5::text[]) AS k(id, partition_key) ON k.id = v.event_id" \
		" WHERE v.event_id IN (SELECT id FROM ev))," \
		" moved AS (DELETE FROM outboxd.outbox WHERE id = ANY($14::int8[]))" \
		" SELECT id FROM ev"


/* One connection per role, so the hot paths never wait behind each other or behind an
 * operator's query: ingest (synchronous commits), claims (dispatch), result groups and
 * lease renewals (results), the janitor's and the API's. */
enum role { ROLE_INGEST, ROLE_DISPATCH, ROLE_RESULTS, ROLE_JANITOR, ROLE_API, ROLE_COUNT };

/* The API's role has up to API_CONNS connections (conns[ROLE_API] onwards), and a call
 * takes whichever is free: an operator's search that reads a large store for seconds (a
 * substring of the errors, a sort by attempts) then holds one of them, while /readyz,
 * /metrics, the console and the other reads go on over the others. */
#define API_CONNS 3
#define PG_CONNS (ROLE_API + API_CONNS)


struct pgconn {
	pthread_mutex_t mu;          /* guards everything below */
	PGconn *conn;                /* NULL while disconnected */
	uint64_t prepared;           /* bit k: statement k is prepared on conn */
	int64_t retry_at;            /* monotonic ms: no connection attempt before */
	int backoff_ms;
	unsigned epoch;              /* pg->epoch when conn was opened */
	uint64_t replan_at;          /* pg->written at which its plans are rebuilt (conn.c) */
	int64_t timeout_ms;          /* the statement_timeout set on conn (the API's), -1: none */
	enum role role;
};


struct pg {
	store *st;                   /* the handle it backs (its read timeout) */
	char *dsn;
	struct pgconn conns[PG_CONNS];
	/* Outage bookkeeping: down is 1 from the first failure until a connection succeeds
	 * again; epoch counts recoveries. A connection opened before the last recovery
	 * that breaks later belongs to an outage already logged. */
	atomic_int down;
	atomic_uint epoch;
	/* The server short of a resource (SQLSTATE class 53: a full disk, memory,
	 * connections), which fails every write while it lasts: logged as a burst
	 * (util/logburst.h), its end when an ingest or results write succeeds again. */
	struct log_burst short_of;
	/* Events and deliveries this instance has inserted, and deliveries it has leased:
	 * the ingest, dispatch and results roles rebuild their plans as it doubles (conn.c,
	 * REPLAN_FIRST). */
	_Atomic uint64_t written;
	atomic_uint api_next;        /* the API connection a call waits for when all are busy */
	/* The cleanup run's cursors (admin.c): the last delivery (created_at, id) its batches
	 * deleted, and the last event its sweep looked at. Only store_cleanup uses them, and
	 * the janitor is its one caller. */
	int64_t cleanup_at;
	char cleanup_id[UUID_STR_LEN];
	char sweep_after[UUID_STR_LEN];
	/* The listener thread (store_on_work). */
	pthread_mutex_t listen_mu;   /* serialises store_on_work */
	pthread_t listener;
	int listening;
	int stop_pipe[2];
	void (*work_cb)(void *ctx);         /* NOTIFY outboxd_work, or NULL */
	void *work_ctx;
	store_subs_changed_cb subs_cb;      /* NOTIFY outboxd_subs, or NULL */
	void *subs_ctx;
};


#define MAX_PARAMS 32


struct params {
	int n;
	const char *values[MAX_PARAMS];
	int lengths[MAX_PARAMS];
	int formats[MAX_PARAMS];
	char num[MAX_PARAMS][24];
};


/* A one-dimensional array in PostgreSQL's binary format (array_recv): a header of
 * ndim, has-null flag, element type, length and lower bound, then each element as a
 * length (-1 for NULL) and its bytes, all integers big-endian. */
struct pgarr {
	char *buf;
	size_t len, cap;
	uint32_t n;
	uint32_t oid;
	int has_null;
	int failed;
};


#define ARR_HEADER 20


/* The arrays of one S_INGEST call. */
struct ingest_arrays {
	struct pgarr ev[8];          /* $1..$8: the events */
	struct pgarr dl[11];         /* $9..$13, $16..$21: the deliveries ($21: the
	                                hand-off's lease_until, NULL when not leased) */
	struct pgarr outbox_ids;     /* $14 */
	struct pgarr traceparent;    /* $15: the events' trace context */
	struct pgarr webhook_id;     /* $23: the events' upstream ids */
	struct pgarr starts_scheduled; /* $24: per delivery */
	struct pgarr envelope;       /* $25: the Kafka messages the events came as */
};


struct replay_row {
	char id[UUID_STR_LEN];
	enum delivery_status status;
	int64_t lease_until;
	int taken;                   /* already replayed by an earlier id of the same call */
};

/* ---- admin.c --------------------------------------------------------------- */

int pg_replay(store *st, const char (*ids)[UUID_STR_LEN], size_t n, int force,
		     enum store_replay_outcome *outcomes, size_t *replayed);

int pg_dlq_purge(store *st, const char *delivery_id);

int pg_dlq_purge_matching(store *st, const struct delivery_filter *f, size_t limit,
				 size_t *purged);

int pg_cleanup_batch(store *st, int64_t before_ms, size_t limit, int from_start,
		     size_t *deleted);
int pg_cleanup_sweep(store *st, int64_t before_ms, int from_start, int all, int *done);
int pg_attempt_counts_prune(store *st, int64_t before_ms);

int pg_job_create(store *st, const struct store_job *job);

int pg_job_update(store *st, const struct store_job *job);

int pg_job_get(store *st, const char *id, struct store_job *out);

int pg_jobs_running(store *st, struct store_job **items, size_t *n);
int pg_jobs_list(store *st, const char *state, int64_t before_at, const char *before_id,
		 size_t limit, struct store_job **items, size_t *n);

int pg_order_sweep(store *st, int64_t now_ms, int full, size_t *parked, size_t *unparked);
int pg_audit_append(store *st, const struct store_audit *a);

int pg_audit_list(store *st, const char *before_id, size_t limit,
			 struct store_audit **items, size_t *n);
int pg_token_create(store *st, const struct store_token *t);
int pg_token_delete(store *st, const char *id);
int pg_token_list(store *st, struct store_token **items, size_t *n);
int pg_token_touch(store *st, const char *id, int64_t at_ms);

int pg_sub_create(store *st, const struct sub_row *sub);

int pg_sub_update(store *st, const struct sub_row *sub);

int pg_sub_delete(store *st, const char *id);

int pg_sub_get(store *st, const char *id, struct sub_row *out);

int pg_sub_list(store *st, struct sub_row **items, size_t *n);
int pg_event_types(store *st, const char *after, size_t limit, struct store_event_type **items,
		   size_t *n);
int pg_sub_page(store *st, int64_t after_at, const char *after_id, const char *name,
		const char *like, size_t limit, struct sub_row **items, size_t *n);

int pg_sub_config_swap(store *st, const char *id, const char *old_config,
		       const char *new_config);

void pg_sub_scrub(store *st);
int pg_leases_renew(store *st, const char (*ids)[UUID_STR_LEN], const int64_t *until,
		    size_t n, unsigned char *renewed);
int pg_meta_swap(store *st, const char *name, const char *expect, const char *value);
int pg_meta_get(store *st, const char *name, struct store_meta_value *out);

/* ---- copy.c ---------------------------------------------------------------- */

/* store_methods.copy_* (store/backend.h), on the janitor connection. */
int pg_copy_read(store *st, const struct copy_table *t, const struct copy_batch *after,
		 size_t limit, struct copy_batch *out);
int pg_copy_write(store *st, const struct copy_batch *rows);
int pg_copy_find(store *st, const struct copy_batch *keys, struct copy_batch *found);
int pg_copy_check(store *st, char *err, size_t errlen);
int pg_copy_in_use(store *st, int *in_use);

/* ---- conn.c ---------------------------------------------------------------- */

struct pg *pg_of(store *st);

void pg_note_down(struct pg *pg, const char *what, const char *msg);

void pg_note_up(struct pg *pg);

PGconn *pg_connect_dsn(const char *dsn);

/* Locks the role's connection and makes sure it works: returns it, or NULL with *rc set
 * (and nothing locked). */
struct pgconn *pg_take(struct pg *pg, enum role role, int *rc);

/* Unlocks c; a transaction an error path left open is rolled back first. */
void pg_give(struct pgconn *c);

/* Maps a failed result to a store code, logging what deserves it. A lost connection,
 * a shutting-down server, a serialization failure or a full disk mean "try again later". */
int pg_fail_code(struct pg *pg, struct pgconn *c, PGresult *res, const char *what);
/* An ingest or results write succeeded: the end of a shortage before it, if any. */
void pg_writes_ok(struct pg *pg);

extern const char *const pg_sql_of[S_COUNT];

/* ---- listen.c -------------------------------------------------------------- */

/* listen_mu held. */
void pg_listener_stop(struct pg *pg);

void pg_on_work(store *st, void (*cb)(void *ctx), void *ctx);

void pg_on_subscriptions_changed(store *st, store_subs_changed_cb cb, void *ctx);

/* ---- read.c ---------------------------------------------------------------- */

/* Runs a reading statement on the API connection. */
PGresult *pg_read_run(struct pg *pg, enum stmt k, const struct params *p, int *rc);

/* Runs a reading statement made at run time (a filtered list) on the API connection. */
PGresult *pg_read_sql(struct pg *pg, const char *sql, const struct params *p, int *rc);

/* Reads row `row` of a result into out (zeroed here first). 0, or -1 with whatever the
 * row had allocated freed again. */
typedef int (*pg_row_cb)(const PGresult *res, int row, void *out);

/* The one row of id: runs reading statement k with id as $1 and reads its row into out
 * with read. STORE_OK, STORE_NOT_FOUND, or the store error. Every "get one row by id" of
 * the backend is this call. */
int pg_get_one(struct pg *pg, enum stmt k, const char *id, pg_row_cb read, void *out);

/* Reads every row of res with read into a new array of size-byte elements (*items, *n).
 * STORE_OK, or STORE_ERROR: then *items holds the *n rows read before the failure, for
 * the caller to free with the type's list free. */
int pg_read_rows(const PGresult *res, size_t size, pg_row_cb read, void **items, size_t *n);

int pg_event_get(store *st, const char *id, struct store_event *ev);

int pg_event_deliveries(store *st, const char *event_id, struct store_delivery **items,
			       size_t *n);

int pg_delivery_get(store *st, const char *id, struct store_delivery *d);

int pg_delivery_attempts(store *st, const char *id, struct store_attempt_row **items,
				size_t *n);

int pg_deliveries_list(store *st, const struct delivery_filter *f,
			      struct store_delivery **items, size_t *n, char **next_cursor);

int pg_deliveries_count(store *st, const struct delivery_filter *f, size_t *n);

int pg_events_list(store *st, const struct event_filter *f, int64_t before_at,
		   const char *before_id, size_t limit, struct store_event_summary **items,
		   size_t *n);

int pg_stats(store *st, int64_t now_ms, int64_t window_ms, int count_processed,
	     struct store_stats *out);
int pg_attempt_series(store *st, const char *subscription_id, int64_t from_ms,
		      int64_t bucket_ms, size_t n_buckets, store_series_group_cb group,
		      void *ctx); /* series.c */

/* ---- rows.c ---------------------------------------------------------------- */

void pg_p_text(struct params *p, const char *s);

void pg_p_i64(struct params *p, int64_t v);

void pg_p_bool(struct params *p, int b);

void pg_arr_init(struct pgarr *a, uint32_t oid);

void pg_arr_free(struct pgarr *a);

void pg_arr_add(struct pgarr *a, const void *data, size_t len);

void pg_arr_null(struct pgarr *a);

void pg_arr_text(struct pgarr *a, const char *s);

void pg_arr_i64(struct pgarr *a, int64_t v);

void pg_arr_time(struct pgarr *a, int64_t v);

void pg_arr_i32(struct pgarr *a, int32_t v);

void pg_arr_bool(struct pgarr *a, int b);

/* Error text (attempt message and cause, last_message/last_cause): at most
 * ERROR_TEXT_MAX bytes cut on a character boundary, and valid UTF-8, which PostgreSQL
 * insists on where SQLite does not: a response body in another encoding must not make
 * a batch of results unwritable. Invalid bytes become '?'. */
void pg_arr_error_text(struct pgarr *a, const char *t);

void pg_p_arr(struct params *p, struct pgarr *a);

/* Integer of any width (bool, int2, int4, int8) from a binary result; 0 for NULL. */
int64_t pg_get_int(const PGresult *r, int row, int col);

void pg_get_id(const PGresult *r, int row, int col, char dst[UUID_STR_LEN]);

/* Copies a text column into *out (NULL for SQL NULL). 0, or -1 when memory runs out. */
int pg_get_dup(const PGresult *r, int row, int col, char **out);

/* Runs statement k on c (locked and connected), preparing it first if this connection
 * has not yet. Results come back in binary. Returns the result (PQclear it) or NULL with
 * *rc set to the store code. */
PGresult *pg_run(struct pg *pg, struct pgconn *c, enum stmt k, const struct params *p,
		     int *rc);

/* pg_run() for statements whose rows are not needed; *changed (may be NULL) gets the
 * number of rows affected. */
int pg_run_done(struct pg *pg, struct pgconn *c, enum stmt k, const struct params *p,
		    size_t *changed);

/* A statement outside the prepared set (BEGIN, COMMIT, dynamic SQL) with text
 * parameters, binary results. */
PGresult *pg_run_sql(struct pg *pg, struct pgconn *c, const char *sql,
			 const struct params *p, int *rc);

int pg_tx_begin(struct pg *pg, struct pgconn *c);

/* Commits when rc is STORE_OK; pg_give() rolls back otherwise. Returns the final code. */
int pg_tx_end(struct pg *pg, struct pgconn *c, int rc);

/* ---- write.c --------------------------------------------------------------- */

int pg_ingest(store *st, struct store_event_in *events, size_t n);

int pg_dead_letters(store *st, size_t limit, struct store_dead_letter **items, size_t *n);

int pg_dead_letters_done(store *st, const char (*ids)[UUID_STR_LEN], size_t n);

int pg_relay_outbox(store *st, size_t limit, store_fanout_cb fanout, void *ctx,
			   size_t *relayed);

int pg_claim_due(store *st, int64_t now_ms, int64_t lease_ms, size_t limit,
			struct store_claim **items, size_t *n);

int pg_next_due(store *st, int64_t *at_ms);

int pg_record_results(store *st, const struct store_result *results, size_t n);

int pg_reap_leases(store *st, int64_t now_ms, size_t *n);

/* Other instances hold live leases: only this owner's and expired ones are cleared. */
int pg_release_all(store *st, size_t *n);

#endif
