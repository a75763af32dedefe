/* store_pg.c: the PostgreSQL backend of the storage interface (libpq).
 *
 * Many outboxd instances may share one database: nothing here assumes a single owner.
 * Claims lease rows with FOR UPDATE SKIP LOCKED, results apply only while this instance
 * still holds the lease, and the relay takes outbox rows with SKIP LOCKED, so instances
 * never block on or duplicate each other's work. Everything lives in schema `outboxd`,
 * fully qualified, so the tables can sit in an application's own database, next to the
 * business tables its producers write in the same transaction as their outbox rows.
 *
 * Connections: one per role (ingest, dispatcher, jobs, API), each behind a mutex, so the
 * hot paths never queue behind each other and any thread may call any function. Each
 * prepares its statements once, lazily, and again after a reconnect. Batches travel as
 * binary arrays expanded with unnest(): one round trip per ingest group or result batch.
 * A listener thread with its own connection turns NOTIFY outboxd_work into wake-ups.
 *
 * Outages: a lost connection makes calls answer STORE_UNAVAILABLE at once; later calls
 * reconnect with a backoff (100 ms doubling to 2 s), so an outage costs no waiting and no
 * restart. The loss is logged once per outage, and the recovery once.
 *
 * Must not: interpolate values into SQL (only fixed fragments and column names from
 * tables here), keep a transaction open across calls, or return libpq codes to callers. */
#include "store/backend.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <libpq-fe.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

#define CLEANUP_CHUNK 10000
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

/* ---- schema ------------------------------------------------------------------------ */

/* The migrations are src/store/postgres/schema/NNN_*.sql (store/backend.h), applied under an
 * advisory lock. The tables mirror the SQLite backend's; ids are text in the "C"
 * collation so keyset pages order them byte-wise, like strcmp. */


#define DELIVERY_COLUMNS                                                             \
	"id, event_id, subscription_id, event_type, status, replay, attempt_count, "  \
	"retry_count, next_attempt_at, created_at, updated_at, processed_at, "        \
	"last_code, last_message, last_cause, lease_owner, lease_until"

#define JOB_COLUMNS "id, kind, state, filter, force, rate, matched, done, cursor, actor, error," \
		    " created_at, updated_at"

/* ---- prepared statements ----------------------------------------------------------- */

enum stmt {
	S_PING,
	S_INGEST,
	S_INGEST_REPLAY,
	S_DUP_LOOKUP,
	S_OUTBOX_TAKE,
	S_CLAIM,
	S_NEXT_DUE,
	S_RESULTS,
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

/* The ingest statement; CONFLICT says which unique keys make an event a duplicate. */
#define INGEST_SQL(CONFLICT) \
		"WITH ev AS (" \
		" INSERT INTO outboxd.events(id, event_type, source, source_event_id," \
		"  partition_key, content_type, payload, created_at, traceparent)" \
		" SELECT u.id, u.event_type, u.source, u.source_event_id, u.partition_key," \
		"  u.content_type, u.payload, u.created_at, u.traceparent" \
		" FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]," \
		"  $6::text[], $7::bytea[], $8::int8[], $15::text[]) WITH ORDINALITY AS u(id," \
		"  event_type, source, source_event_id, partition_key, content_type, payload," \
		"  created_at, traceparent, ord)" \
		" ORDER BY u.ord" \
		CONFLICT " DO NOTHING RETURNING id)," \
		" dl AS (" \
		" INSERT INTO outboxd.deliveries(id, event_id, subscription_id, event_type, status," \
		"  next_attempt_at, last_code, last_message, last_cause, created_at, updated_at)" \
		" SELECT v.id, v.event_id, v.subscription_id, v.event_type, v.status, v.next," \
		"  v.code, v.message, v.cause, v.due, v.due" \
		" FROM unnest($9::text[], $10::text[], $11::text[], $12::text[], $13::int8[]," \
		"  $16::text[], $17::int8[], $18::int4[], $19::text[], $20::text[])" \
		"  AS v(id, event_id, subscription_id, event_type, due, status, next, code," \
		"  message, cause)" \
		" WHERE v.event_id IN (SELECT id FROM ev))," \
		" moved AS (DELETE FROM outboxd.outbox WHERE id = ANY($14::int8[]))" \
		" SELECT id FROM ev"

static const char *const sql_of[S_COUNT] = {
	[S_PING] = "SELECT 1",
	/* One statement, one implicit transaction: the events (a repeated idempotency key
	 * is skipped, the first one in the batch wins), the deliveries of the events that
	 * were inserted, and for the relay the outbox rows it moved. RETURNING says which
	 * events were new. */
	[S_INGEST] = INGEST_SQL(" ON CONFLICT (source, source_event_id)"
				" WHERE source_event_id IS NOT NULL"),
	/* A spool replay: a stored id is a duplicate as well (any unique key). */
	[S_INGEST_REPLAY] = INGEST_SQL(" ON CONFLICT"),
	[S_DUP_LOOKUP] =
		"SELECT k.ord, e.id FROM unnest($1::text[], $2::text[]) WITH ORDINALITY"
		" AS k(source, source_event_id, ord)"
		" JOIN outboxd.events e ON e.source = k.source"
		" AND e.source_event_id = k.source_event_id",
	[S_OUTBOX_TAKE] =
		"SELECT id, event_type, source, source_event_id, partition_key, payload,"
		" content_type, created_at FROM outboxd.outbox ORDER BY id LIMIT $1"
		" FOR UPDATE SKIP LOCKED",
	/* Rows another instance is claiming right now are skipped, not waited for. */
	[S_CLAIM] =
		"WITH c AS ("
		" UPDATE outboxd.deliveries d SET lease_owner = $1, lease_until = $2"
		" WHERE d.id IN (SELECT id FROM outboxd.deliveries"
		"  WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL"
		"  AND next_attempt_at <= $3 ORDER BY next_attempt_at LIMIT $4"
		"  FOR UPDATE SKIP LOCKED)"
		" RETURNING d.id, d.event_id, d.subscription_id, d.status, d.replay,"
		"  d.attempt_count, d.retry_count, d.next_attempt_at, d.delay_actions)"
		" SELECT c.id, c.event_id, c.subscription_id, c.status, c.replay, c.attempt_count,"
		" c.retry_count, e.event_type, e.content_type, e.payload, e.created_at,"
		" e.traceparent, c.delay_actions, e.source, e.source_event_id, e.partition_key"
		" FROM c JOIN outboxd.events e ON e.id = c.event_id"
		" ORDER BY c.next_attempt_at, c.id",
	[S_NEXT_DUE] =
		"SELECT MIN(next_attempt_at) FROM outboxd.deliveries"
		" WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL",
	/* A result applies only while this owner ($13) holds the lease; the attempts of
	 * the results that applied are inserted in the same statement. $22: the results'
	 * delay_actions (added last so the other parameters keep their numbers). */
	[S_RESULTS] =
		"WITH r AS ("
		" SELECT * FROM unnest($1::text[], $2::text[], $3::bool[], $4::int4[], $5::int4[],"
		"  $6::int8[], $7::int8[], $8::bool[], $9::int4[], $10::text[], $11::text[],"
		"  $22::int4[])"
		"  AS u(id, status, replay, attempt_count, retry_count, next_attempt_at,"
		"  processed_at, keep_error, last_code, last_message, last_cause, delay_actions)),"
		" upd AS ("
		" UPDATE outboxd.deliveries d SET status = r.status, replay = r.replay,"
		"  attempt_count = r.attempt_count, retry_count = r.retry_count,"
		"  next_attempt_at = r.next_attempt_at, processed_at = r.processed_at,"
		"  last_code = CASE WHEN r.keep_error THEN d.last_code ELSE r.last_code END,"
		"  last_message = CASE WHEN r.keep_error THEN d.last_message ELSE r.last_message END,"
		"  last_cause = CASE WHEN r.keep_error THEN d.last_cause ELSE r.last_cause END,"
		"  lease_owner = NULL, lease_until = NULL, delay_actions = r.delay_actions,"
		"  updated_at = $12"
		" FROM r WHERE d.id = r.id AND d.lease_owner = $13 RETURNING d.id),"
		" att AS ("
		" INSERT INTO outboxd.attempts(delivery_id, n, kind, started_at, duration_ms, code,"
		"  message, cause, instance)"
		" SELECT a.delivery_id, a.n, a.kind, a.started_at, a.duration_ms, a.code,"
		"  a.message, a.cause, $13"
		" FROM unnest($14::text[], $15::int4[], $16::text[], $17::int8[], $18::int8[],"
		"  $19::int4[], $20::text[], $21::text[])"
		"  AS a(delivery_id, n, kind, started_at, duration_ms, code, message, cause)"
		" WHERE a.delivery_id IN (SELECT id FROM upd)"
		" ON CONFLICT (delivery_id, n) DO NOTHING)"
		" SELECT count(*) FROM upd",
	[S_REAP] =
		"UPDATE outboxd.deliveries SET lease_owner = NULL, lease_until = NULL"
		" WHERE id IN (SELECT id FROM outboxd.deliveries"
		"  WHERE lease_until IS NOT NULL AND lease_until < $1 FOR UPDATE SKIP LOCKED)",
	[S_RELEASE_ALL] =
		"UPDATE outboxd.deliveries SET lease_owner = NULL, lease_until = NULL"
		" WHERE lease_until IS NOT NULL AND (lease_owner = $1 OR lease_until < $2)",
	[S_EVENT_GET] =
		"SELECT id, event_type, source, source_event_id, partition_key, content_type,"
		" payload, created_at FROM outboxd.events WHERE id = $1",
	[S_EVENT_DELIVERIES] =
		"SELECT " DELIVERY_COLUMNS " FROM outboxd.deliveries WHERE event_id = $1"
		" ORDER BY created_at, id",
	[S_DELIVERY_GET] = "SELECT " DELIVERY_COLUMNS " FROM outboxd.deliveries WHERE id = $1",
	[S_ATTEMPTS] =
		"SELECT n, kind, started_at, duration_ms, code, message, cause"
		" FROM outboxd.attempts WHERE delivery_id = $1 ORDER BY n",
	[S_REPLAY_CHECK] =
		"SELECT id, status, lease_until FROM outboxd.deliveries WHERE id = ANY($1::text[])"
		" FOR UPDATE",
	[S_REPLAY_SET] =
		"UPDATE outboxd.deliveries SET status = 'NEW', replay = true, next_attempt_at = $2,"
		" processed_at = NULL, lease_owner = NULL, lease_until = NULL, delay_actions = 0,"
		" updated_at = $2"
		" WHERE id = ANY($1::text[])",
	[S_NOTIFY] = "SELECT pg_notify('" NOTIFY_CHANNEL "', '')",
	[S_PURGE_CHECK] =
		"SELECT status, next_attempt_at, lease_until, event_id FROM outboxd.deliveries"
		" WHERE id = $1 FOR UPDATE",
	[S_DELIVERY_DELETE] = "DELETE FROM outboxd.deliveries WHERE id = $1",
	[S_EVENT_DELETE_ORPHAN] =
		"DELETE FROM outboxd.events WHERE id = $1"
		" AND NOT EXISTS (SELECT 1 FROM outboxd.deliveries WHERE event_id = $1)",
	[S_CLEANUP_CHUNK] =
		"DELETE FROM outboxd.deliveries WHERE id IN (SELECT id FROM outboxd.deliveries"
		"  WHERE status = 'PROCESSED' AND lease_until IS NULL LIMIT $1"
		"  FOR UPDATE SKIP LOCKED)"
		" RETURNING event_id",
	[S_EVENTS_DELETE_ORPHANS] =
		"DELETE FROM outboxd.events e WHERE e.id = ANY($1::text[])"
		" AND NOT EXISTS (SELECT 1 FROM outboxd.deliveries d WHERE d.event_id = e.id)",
	/* Events that never had a delivery (no subscription wanted them). */
	[S_SWEEP_ORPHANS] =
		"DELETE FROM outboxd.events WHERE id IN (SELECT e.id FROM outboxd.events e"
		"  WHERE NOT EXISTS (SELECT 1 FROM outboxd.deliveries d WHERE d.event_id = e.id)"
		"  LIMIT $1 FOR UPDATE SKIP LOCKED)",
	[S_SUB_INSERT] =
		"INSERT INTO outboxd.subscriptions(id, name, config, enabled, created_at,"
		" updated_at) VALUES ($1, $2, $3, $4, $5, $6)",
	[S_SUB_UPDATE] =
		"UPDATE outboxd.subscriptions SET name = $2, config = $3, enabled = $4,"
		" updated_at = $5 WHERE id = $1",
	[S_SUB_DELETE] = "DELETE FROM outboxd.subscriptions WHERE id = $1",
	[S_SUB_GET] =
		"SELECT id, name, config, enabled, created_at, updated_at"
		" FROM outboxd.subscriptions WHERE id = $1",
	[S_SUB_LIST] =
		"SELECT id, name, config, enabled, created_at, updated_at"
		" FROM outboxd.subscriptions ORDER BY created_at, id",
};

/* ---- state --------------------------------------------------------------------------- */

/* One connection per role: the hot paths (ingest group commit, the dispatcher's claims
 * and results) never wait behind each other or behind an operator's query. */
enum role { ROLE_INGEST, ROLE_DISPATCH, ROLE_JOBS, ROLE_API, ROLE_COUNT };

static const char *const role_names[ROLE_COUNT] = {"ingest", "dispatch", "jobs", "api"};

struct pgconn {
	pthread_mutex_t mu;          /* guards everything below */
	PGconn *conn;                /* NULL while disconnected */
	uint64_t prepared;           /* bit k: statement k is prepared on conn */
	int64_t retry_at;            /* monotonic ms: no connection attempt before */
	int backoff_ms;
	unsigned epoch;              /* pg->epoch when conn was opened */
	enum role role;
};

struct pg {
	char *dsn;
	struct pgconn conns[ROLE_COUNT];
	/* Outage bookkeeping: down is 1 from the first failure until a connection succeeds
	 * again; epoch counts recoveries. A connection opened before the last recovery
	 * that breaks later belongs to an outage already logged. */
	atomic_int down;
	atomic_uint epoch;
	/* The listener thread (store_on_work). */
	pthread_mutex_t listen_mu;   /* serialises store_on_work */
	pthread_t listener;
	int listening;
	int stop_pipe[2];
	void (*work_cb)(void *ctx);         /* NOTIFY outboxd_work, or NULL */
	void *work_ctx;
	void (*subs_cb)(void *ctx);         /* NOTIFY outboxd_subs, or NULL */
	void *subs_ctx;
};

static struct pg *pg_of(store *st)
{
	return st->priv;
}

/* ---- outage bookkeeping ------------------------------------------------------------- */

/* The last line of a libpq message, without its trailing newline, into buf. */
static const char *one_line(const char *msg, char *buf, size_t size)
{
	size_t len;

	char *o = buf;

	snprintf(buf, size, "%s", msg && *msg ? msg : "no message");
	/* One line: newlines and tabs become single spaces. */
	for (const char *p = buf; *p; p++) {
		int space = *p == '\n' || *p == '\t' || *p == ' ';

		if (space && (o == buf || o[-1] == ' '))
			continue;
		*o++ = space ? ' ' : *p;
	}
	*o = '\0';
	len = strlen(buf);
	while (len && buf[len - 1] == ' ')
		buf[--len] = '\0';
	return buf;
}

static void note_down(struct pg *pg, const char *what, const char *msg)
{
	char line[512];

	if (atomic_exchange(&pg->down, 1) == 0)
		log_error("postgres: database unavailable (%s: %s); calls answer \"store "
			  "unavailable\" and reconnect with backoff until it is back",
			  what, one_line(msg, line, sizeof(line)));
}

static void note_up(struct pg *pg)
{
	if (atomic_exchange(&pg->down, 0) == 1) {
		atomic_fetch_add(&pg->epoch, 1);
		log_info("postgres: database reachable again");
	}
}

/* ---- connections ------------------------------------------------------------------------ */

/* Opens a connection. The DSN's own settings override the defaults given before it
 * (libpq expands dbname in place): a bounded connect, TCP keepalives so a vanished server
 * is noticed, and a name operators can find in pg_stat_activity. */
/* Server notices (and the FATAL a server sends to idle sessions as it shuts down) go to
 * the log instead of libpq's default, stderr: the loss itself is logged by note_down. */
static void notice_cb(void *arg, const char *message)
{
	char line[512];

	log_debug("postgres: %s", one_line(message, line, sizeof(line)));
}

static PGconn *connect_dsn(const char *dsn)
{
	static const char *const keys[] = {"connect_timeout", "keepalives_idle",
		"keepalives_interval", "keepalives_count", "application_name", "dbname", NULL};
	const char *values[] = {"5", "30", "10", "3", "outboxd", dsn, NULL};
	PGconn *conn = PQconnectdbParams(keys, values, 1);

	if (conn)
		PQsetNoticeProcessor(conn, notice_cb, NULL);
	return conn;
}

static void conn_close(struct pgconn *c)
{
	if (c->conn)
		PQfinish(c->conn);
	c->conn = NULL;
	c->prepared = 0;
}

/* Makes sure c has a working connection (c->mu held). STORE_UNAVAILABLE at once while
 * the backoff after a failed attempt runs. */
static int conn_ready(struct pg *pg, struct pgconn *c)
{
	int64_t now = clock_mono_ms();
	PGconn *conn;

	if (c->conn && PQstatus(c->conn) == CONNECTION_OK)
		return STORE_OK;
	conn_close(c);
	if (now < c->retry_at)
		return STORE_UNAVAILABLE;
	conn = connect_dsn(pg->dsn);
	if (PQstatus(conn) != CONNECTION_OK) {
		note_down(pg, "connect", PQerrorMessage(conn));
		PQfinish(conn);
		c->backoff_ms = c->backoff_ms ? c->backoff_ms * 2 : BACKOFF_MIN_MS;
		if (c->backoff_ms > BACKOFF_MAX_MS)
			c->backoff_ms = BACKOFF_MAX_MS;
		c->retry_at = now + c->backoff_ms;
		return STORE_UNAVAILABLE;
	}
	/* Claims and results commit without waiting for the WAL flush, as the SQLite
	 * backend relaxes its sync for them: losing the last few to a database crash only
	 * means those deliveries are sent again (at-least-once). Events are acknowledged
	 * only from the ingest connection, whose commits are synchronous. */
	if (c->role == ROLE_DISPATCH) {
		PGresult *r = PQexec(conn, "SET synchronous_commit = off");

		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			log_warn("postgres: %s", PQresultErrorMessage(r));
		PQclear(r);
	}
	note_up(pg);
	c->conn = conn;
	c->prepared = 0;
	c->backoff_ms = 0;
	c->retry_at = 0;
	c->epoch = atomic_load(&pg->epoch);
	return STORE_OK;
}

/* The connection broke under a call: drop it; the next call reconnects at once (and
 * starts the backoff if that fails). */
static void conn_lost(struct pg *pg, struct pgconn *c, const char *msg)
{
	char line[512];

	if (c->epoch == atomic_load(&pg->epoch))
		note_down(pg, role_names[c->role], msg);
	else
		log_debug("postgres: %s connection from before the last outage closed (%s)",
			  role_names[c->role], one_line(msg, line, sizeof(line)));
	conn_close(c);
}

/* Locks the role's connection and makes sure it works: returns it, or NULL with *rc set
 * (and nothing locked). */
static struct pgconn *take(struct pg *pg, enum role role, int *rc)
{
	struct pgconn *c = &pg->conns[role];

	pthread_mutex_lock(&c->mu);
	*rc = conn_ready(pg, c);
	if (*rc != STORE_OK) {
		pthread_mutex_unlock(&c->mu);
		return NULL;
	}
	return c;
}

/* Unlocks c; a transaction an error path left open is rolled back first. */
static void give(struct pgconn *c)
{
	if (c->conn) {
		PGTransactionStatusType ts = PQtransactionStatus(c->conn);

		if (ts == PQTRANS_INTRANS || ts == PQTRANS_INERROR) {
			PQclear(PQexec(c->conn, "ROLLBACK"));
		} else if (ts != PQTRANS_IDLE) {
			conn_close(c);
		}
	}
	pthread_mutex_unlock(&c->mu);
}

/* Maps a failed result to a store code, logging what deserves it. A lost connection,
 * a shutting-down server, a serialization failure or a full disk mean "try again later". */
static int fail_code(struct pg *pg, struct pgconn *c, PGresult *res, const char *what)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = res ? PQresultErrorMessage(res) : PQerrorMessage(c->conn);
	char line[512];

	if (PQstatus(c->conn) != CONNECTION_OK || !state || strncmp(state, "08", 2) == 0 ||
	    strncmp(state, "57P", 3) == 0) {
		conn_lost(pg, c, msg);
		return STORE_UNAVAILABLE;
	}
	if (strcmp(state, "23505") == 0)        /* unique_violation */
		return STORE_CONFLICT;
	if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 ||
	    strncmp(state, "53", 2) == 0 || strcmp(state, "55P03") == 0 ||
	    strcmp(state, "57014") == 0) {
		log_warn("postgres: %s (in: %.60s)", one_line(msg, line, sizeof(line)), what);
		return STORE_UNAVAILABLE;
	}
	log_error("postgres: %s [%s] (in: %.80s)", one_line(msg, line, sizeof(line)), state, what);
	return STORE_ERROR;
}

/* ---- parameters and results ------------------------------------------------------------- */

#define MAX_PARAMS 24

struct params {
	int n;
	const char *values[MAX_PARAMS];
	int lengths[MAX_PARAMS];
	int formats[MAX_PARAMS];
	char num[MAX_PARAMS][24];
};

static void p_text(struct params *p, const char *s)
{
	p->values[p->n] = s;
	p->lengths[p->n] = 0;
	p->formats[p->n++] = 0;
}

static void p_i64(struct params *p, int64_t v)
{
	snprintf(p->num[p->n], sizeof(p->num[0]), "%lld", (long long)v);
	p_text(p, p->num[p->n]);
}

static void p_bool(struct params *p, int b)
{
	p_text(p, b ? "t" : "f");
}

static void p_bin(struct params *p, const void *data, size_t len)
{
	p->values[p->n] = data;
	p->lengths[p->n] = (int)len;
	p->formats[p->n++] = 1;
}

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

static void arr_init(struct pgarr *a, uint32_t oid)
{
	memset(a, 0, sizeof(*a));
	a->oid = oid;
	a->len = ARR_HEADER;
}

static void arr_free(struct pgarr *a)
{
	free(a->buf);
	a->buf = NULL;
}

static int arr_reserve(struct pgarr *a, size_t more)
{
	size_t want = a->len + more;
	size_t ncap;
	char *q;

	if (a->failed)
		return -1;
	if (want > ARRAY_MAX) {
		log_error("postgres: a batch exceeds %u bytes", ARRAY_MAX);
		a->failed = 1;
		return -1;
	}
	if (want <= a->cap)
		return 0;
	ncap = a->cap ? a->cap * 2 : 1024;
	while (ncap < want)
		ncap *= 2;
	q = realloc(a->buf, ncap);
	if (!q) {
		log_error("store: out of memory");
		a->failed = 1;
		return -1;
	}
	a->buf = q;
	a->cap = ncap;
	return 0;
}

static void put32(char *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, 4);
}

static void arr_add(struct pgarr *a, const void *data, size_t len)
{
	if (arr_reserve(a, 4 + len))
		return;
	put32(a->buf + a->len, (uint32_t)len);
	if (len)
		memcpy(a->buf + a->len + 4, data, len);
	a->len += 4 + len;
	a->n++;
}

static void arr_null(struct pgarr *a)
{
	if (arr_reserve(a, 4))
		return;
	put32(a->buf + a->len, 0xffffffffu);
	a->len += 4;
	a->n++;
	a->has_null = 1;
}

static void arr_text(struct pgarr *a, const char *s)
{
	if (s)
		arr_add(a, s, strlen(s));
	else
		arr_null(a);
}

static void arr_i64(struct pgarr *a, int64_t v)
{
	uint64_t be = htobe64((uint64_t)v);

	arr_add(a, &be, 8);
}

static void arr_time(struct pgarr *a, int64_t v)
{
	if (v)
		arr_i64(a, v);
	else
		arr_null(a);
}

static void arr_i32(struct pgarr *a, int32_t v)
{
	uint32_t be = htobe32((uint32_t)v);

	arr_add(a, &be, 4);
}

static void arr_bool(struct pgarr *a, int b)
{
	char v = b ? 1 : 0;

	arr_add(a, &v, 1);
}

/* Length of the longest prefix of t (at most max bytes) that is valid UTF-8. */
static size_t utf8_prefix(const unsigned char *t, size_t len)
{
	size_t i = 0;

	while (i < len) {
		unsigned char c = t[i];
		size_t k = c < 0x80 ? 1 : (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 :
			   (c & 0xf8) == 0xf0 ? 4 : 0;

		if (!k || i + k > len || (k == 2 && c < 0xc2))
			break;
		for (size_t j = 1; j < k; j++)
			if ((t[i + j] & 0xc0) != 0x80)
				return i;
		i += k;
	}
	return i;
}

/* Error text (attempt message and cause, last_message/last_cause): at most
 * ERROR_TEXT_MAX bytes cut on a character boundary, and valid UTF-8, which PostgreSQL
 * insists on where SQLite does not: a response body in another encoding must not make
 * a batch of results unwritable. Invalid bytes become '?'. */
static void arr_error_text(struct pgarr *a, const char *t)
{
	const unsigned char *s = (const unsigned char *)t;
	unsigned char out[ERROR_TEXT_MAX];
	size_t len, o = 0, i = 0;

	if (!t) {
		arr_null(a);
		return;
	}
	len = strnlen(t, ERROR_TEXT_MAX);
	while (i < len) {
		size_t ok = utf8_prefix(s + i, len - i);

		memcpy(out + o, s + i, ok);
		o += ok;
		i += ok;
		if (i < len) {
			/* A character cut by the length cap ends the text; anything else invalid
			 * is replaced. */
			if (len == ERROR_TEXT_MAX && len - i < 4 && (s[i] & 0xc0) == 0xc0 &&
			    utf8_prefix(s + i, len - i) == 0) {
				int cut = 1;

				for (size_t j = i + 1; j < len; j++)
					cut &= (s[j] & 0xc0) == 0x80;
				if (cut)
					break;
			}
			out[o++] = '?';
			i++;
		}
	}
	arr_add(a, out, o);
}

/* Finishes the header; the array is then passed with p_arr. */
static void arr_finish(struct pgarr *a)
{
	if (arr_reserve(a, 0))
		return;
	if (!a->buf && arr_reserve(a, ARR_HEADER + 1))
		return;
	if (a->n == 0) {
		/* An empty array has no dimensions. */
		put32(a->buf, 0);
		put32(a->buf + 4, 0);
		put32(a->buf + 8, a->oid);
		a->len = 12;
		return;
	}
	put32(a->buf, 1);
	put32(a->buf + 4, a->has_null ? 1 : 0);
	put32(a->buf + 8, a->oid);
	put32(a->buf + 12, a->n);
	put32(a->buf + 16, 1);
}

static void p_arr(struct params *p, struct pgarr *a)
{
	arr_finish(a);
	p_bin(p, a->buf, a->len);
}

/* Integer of any width (bool, int2, int4, int8) from a binary result; 0 for NULL. */
static int64_t get_int(const PGresult *r, int row, int col)
{
	const char *v;
	int16_t i16;
	int32_t i32;
	int64_t i64;

	if (PQgetisnull(r, row, col))
		return 0;
	v = PQgetvalue(r, row, col);
	switch (PQgetlength(r, row, col)) {
	case 1:
		return (unsigned char)v[0];
	case 2:
		memcpy(&i16, v, 2);
		return (int16_t)be16toh((uint16_t)i16);
	case 4:
		memcpy(&i32, v, 4);
		return (int32_t)be32toh((uint32_t)i32);
	case 8:
		memcpy(&i64, v, 8);
		return (int64_t)be64toh((uint64_t)i64);
	default:
		return 0;
	}
}

static void get_id(const PGresult *r, int row, int col, char dst[UUID_STR_LEN])
{
	snprintf(dst, UUID_STR_LEN, "%s", PQgetisnull(r, row, col) ? "" : PQgetvalue(r, row, col));
}

/* Copies a text column into *out (NULL for SQL NULL). 0, or -1 when memory runs out. */
static int get_dup(const PGresult *r, int row, int col, char **out)
{
	int len;

	*out = NULL;
	if (PQgetisnull(r, row, col))
		return 0;
	len = PQgetlength(r, row, col);
	*out = malloc((size_t)len + 1);
	if (!*out) {
		log_error("store: out of memory");
		return -1;
	}
	memcpy(*out, PQgetvalue(r, row, col), (size_t)len);
	(*out)[len] = '\0';
	return 0;
}

/* Runs statement k on c (locked and connected), preparing it first if this connection
 * has not yet. Results come back in binary. Returns the result (PQclear it) or NULL with
 * *rc set to the store code. */
static PGresult *run(struct pg *pg, struct pgconn *c, enum stmt k, const struct params *p,
		     int *rc)
{
	char name[16];
	PGresult *res;

	snprintf(name, sizeof(name), "obx%d", (int)k);
	if (!(c->prepared & (1ull << k))) {
		res = PQprepare(c->conn, name, sql_of[k], 0, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			*rc = fail_code(pg, c, res, sql_of[k]);
			PQclear(res);
			return NULL;
		}
		PQclear(res);
		c->prepared |= 1ull << k;
	}
	res = PQexecPrepared(c->conn, name, p ? p->n : 0, p ? p->values : NULL,
			     p ? p->lengths : NULL, p ? p->formats : NULL, 1);
	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
		*rc = fail_code(pg, c, res, sql_of[k]);
		PQclear(res);
		return NULL;
	}
	*rc = STORE_OK;
	return res;
}

/* run() for statements whose rows are not needed; *changed (may be NULL) gets the
 * number of rows affected. */
static int run_done(struct pg *pg, struct pgconn *c, enum stmt k, const struct params *p,
		    size_t *changed)
{
	int rc;
	PGresult *res = run(pg, c, k, p, &rc);

	if (res && changed)
		*changed = (size_t)strtoull(PQcmdTuples(res), NULL, 10);
	PQclear(res);
	return rc;
}

/* A statement outside the prepared set (BEGIN, COMMIT, dynamic SQL) with text
 * parameters, binary results. */
static PGresult *run_sql(struct pg *pg, struct pgconn *c, const char *sql,
			 const struct params *p, int *rc)
{
	PGresult *res = PQexecParams(c->conn, sql, p ? p->n : 0, NULL, p ? p->values : NULL,
				     p ? p->lengths : NULL, p ? p->formats : NULL, 1);

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
		*rc = fail_code(pg, c, res, sql);
		PQclear(res);
		return NULL;
	}
	*rc = STORE_OK;
	return res;
}

static int exec_simple(struct pg *pg, struct pgconn *c, const char *sql)
{
	int rc;

	PQclear(run_sql(pg, c, sql, NULL, &rc));
	return rc;
}

static int tx_begin(struct pg *pg, struct pgconn *c)
{
	return exec_simple(pg, c, "BEGIN");
}

/* Commits when rc is STORE_OK; give() rolls back otherwise. Returns the final code. */
static int tx_end(struct pg *pg, struct pgconn *c, int rc)
{
	if (rc == STORE_OK)
		rc = exec_simple(pg, c, "COMMIT");
	return rc;
}

/* ---- open and close ------------------------------------------------------------------- */

/* Runs sql on conn during open; on failure writes the message to err. Returns the
 * result (PQclear it) or NULL. */
static PGresult *open_exec(PGconn *conn, const char *sql, char *err, size_t errlen)
{
	PGresult *r = PQexec(conn, sql);
	char line[512];

	if (PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK)
		return r;
	snprintf(err, errlen, "postgres: %s (in: %.60s)",
		 one_line(PQresultErrorMessage(r), line, sizeof(line)), sql);
	PQclear(r);
	return NULL;
}

/* Applies the migrations the database lacks. Instances starting together take turns on
 * a session advisory lock, so each migration runs once. */
static int migrate(PGconn *conn, char *err, size_t errlen)
{
	PGresult *r;
	long version;
	size_t v;
	int rc = STORE_ERROR;

	if (!(r = open_exec(conn, "SELECT pg_advisory_lock(" MIGRATION_LOCK ")", err, errlen)))
		return STORE_ERROR;
	PQclear(r);
	r = open_exec(conn,
		      "SET client_min_messages = warning;"
		      "CREATE SCHEMA IF NOT EXISTS outboxd;"
		      "CREATE TABLE IF NOT EXISTS outboxd.schema_migrations ("
		      " version integer PRIMARY KEY, applied_at bigint NOT NULL)", err, errlen);
	if (!r)
		goto out;
	PQclear(r);
	r = open_exec(conn, "SELECT COALESCE(MAX(version), 0) FROM outboxd.schema_migrations",
		      err, errlen);
	if (!r)
		goto out;
	version = strtol(PQgetvalue(r, 0, 0), NULL, 10);
	PQclear(r);
	if (version > (long)postgres_migrations_n) {
		snprintf(err, errlen,
			 "database schema version %ld is newer than this outboxd knows (%zu)",
			 version, postgres_migrations_n);
		goto out;
	}
	for (v = (size_t)version + 1; v <= postgres_migrations_n; v++) {
		char record[160];

		snprintf(record, sizeof(record),
			 "INSERT INTO outboxd.schema_migrations(version, applied_at)"
			 " VALUES (%zu, %lld)", v, (long long)clock_now_ms());
		if (!(r = open_exec(conn, "BEGIN", err, errlen)))
			goto out;
		PQclear(r);
		if ((r = open_exec(conn, postgres_migrations[v - 1].sql, err, errlen))) {
			PQclear(r);
			r = open_exec(conn, record, err, errlen);
		}
		if (r) {
			PQclear(r);
			r = open_exec(conn, "COMMIT", err, errlen);
		}
		if (!r) {
			PQclear(PQexec(conn, "ROLLBACK"));
			goto out;
		}
		PQclear(r);
		log_info("store: applied schema migration %zu (postgres, %s)", v,
			 postgres_migrations[v - 1].name);
	}
	rc = STORE_OK;
out:
	PQclear(PQexec(conn, "SELECT pg_advisory_unlock(" MIGRATION_LOCK ")"));
	PQclear(PQexec(conn, "RESET client_min_messages"));
	return rc;
}

static void listener_stop(struct pg *pg);

static void pg_close(store *st)
{
	struct pg *pg = pg_of(st);

	if (!pg)
		return;
	pthread_mutex_lock(&pg->listen_mu);
	listener_stop(pg);
	pthread_mutex_unlock(&pg->listen_mu);
	for (int i = 0; i < ROLE_COUNT; i++) {
		conn_close(&pg->conns[i]);
		pthread_mutex_destroy(&pg->conns[i].mu);
	}
	pthread_mutex_destroy(&pg->listen_mu);
	free(pg->dsn);
	free(pg);
	st->priv = NULL;
}

static int pg_open(store *st, const char *dsn, char *err, size_t errlen)
{
	struct pg *pg = calloc(1, sizeof(*pg));
	char line[512];
	PGconn *conn;
	int rc;

	if (!pg || !(pg->dsn = strdup(dsn))) {
		free(pg);
		snprintf(err, errlen, "out of memory");
		return STORE_ERROR;
	}
	for (int i = 0; i < ROLE_COUNT; i++) {
		pthread_mutex_init(&pg->conns[i].mu, NULL);
		pg->conns[i].role = (enum role)i;
	}
	pthread_mutex_init(&pg->listen_mu, NULL);
	st->priv = pg;

	/* The jobs connection runs the migrations and stays open. */
	conn = connect_dsn(dsn);
	if (PQstatus(conn) != CONNECTION_OK) {
		snprintf(err, errlen, "postgres: cannot connect: %s",
			 one_line(PQerrorMessage(conn), line, sizeof(line)));
		PQfinish(conn);
		pg_close(st);
		return STORE_UNAVAILABLE;
	}
	rc = migrate(conn, err, errlen);
	if (rc != STORE_OK) {
		PQfinish(conn);
		pg_close(st);
		return rc;
	}
	pg->conns[ROLE_JOBS].conn = conn;
	return STORE_OK;
}

static int pg_ping(store *st)
{
	struct pg *pg = pg_of(st);
	struct pgconn *c;
	int rc;

	if (!(c = take(pg, ROLE_API, &rc)))
		return rc;
	rc = run_done(pg, c, S_PING, NULL, NULL);
	give(c);
	return rc;
}

/* ---- ingest and relay ------------------------------------------------------------------- */

/* The arrays of one S_INGEST call. */
struct ingest_arrays {
	struct pgarr ev[8];          /* $1..$8: the events */
	struct pgarr dl[10];         /* $9..$13, $16..$20: the deliveries */
	struct pgarr outbox_ids;     /* $14 */
	struct pgarr traceparent;    /* $15: the events' trace context */
};

static void ingest_arrays_init(struct ingest_arrays *a)
{
	static const uint32_t ev_oids[8] = {OID_TEXT, OID_TEXT, OID_TEXT, OID_TEXT, OID_TEXT,
					    OID_TEXT, OID_BYTEA, OID_INT8};
	static const uint32_t dl_oids[10] = {OID_TEXT, OID_TEXT, OID_TEXT, OID_TEXT, OID_INT8,
					     OID_TEXT, OID_INT8, OID_INT4, OID_TEXT, OID_TEXT};

	for (int i = 0; i < 8; i++)
		arr_init(&a->ev[i], ev_oids[i]);
	for (int i = 0; i < 10; i++)
		arr_init(&a->dl[i], dl_oids[i]);
	arr_init(&a->outbox_ids, OID_INT8);
	arr_init(&a->traceparent, OID_TEXT);
}

static void ingest_arrays_free(struct ingest_arrays *a)
{
	for (int i = 0; i < 8; i++)
		arr_free(&a->ev[i]);
	for (int i = 0; i < 10; i++)
		arr_free(&a->dl[i]);
	arr_free(&a->outbox_ids);
	arr_free(&a->traceparent);
}

/* Appends one event and its deliveries (created and due at due_at). The subscription
 * ids are copied here, so the fan-out's array may change after the call. */
static void ingest_add(struct ingest_arrays *a, const struct store_event_in *ev, int64_t due_at)
{
	arr_text(&a->ev[0], ev->id);
	arr_text(&a->ev[1], ev->event_type);
	arr_text(&a->ev[2], ev->source ? ev->source : "");
	arr_text(&a->ev[3], ev->source_event_id);
	arr_text(&a->ev[4], ev->partition_key);
	arr_text(&a->ev[5], ev->content_type);
	arr_add(&a->ev[6], ev->payload, ev->payload_len);
	arr_i64(&a->ev[7], ev->created_at);
	arr_text(&a->traceparent, ev->traceparent);
	for (size_t i = 0; i < ev->n_subscriptions; i++) {
		char id[UUID_STR_LEN];

		uuid_v7(id);
		arr_text(&a->dl[0], id);
		arr_text(&a->dl[1], ev->id);
		arr_text(&a->dl[2], ev->subscription_ids[i]);
		arr_text(&a->dl[3], ev->event_type);
		arr_i64(&a->dl[4], due_at);
		/* the initial state (store_event_in): NEW and due at due_at unless asked */
		int64_t next = store_event_first_due(ev, due_at);
		arr_text(&a->dl[5], delivery_status_name(ev->initial_status));
		if (next)
			arr_i64(&a->dl[6], next);
		else
			arr_null(&a->dl[6]);
		if (ev->initial_code)
			arr_i32(&a->dl[7], ev->initial_code);
		else
			arr_null(&a->dl[7]);
		arr_text(&a->dl[8], ev->initial_message);
		arr_text(&a->dl[9], ev->initial_cause);
	}
}

static int ingest_arrays_failed(const struct ingest_arrays *a)
{
	int failed = a->outbox_ids.failed | a->traceparent.failed;

	for (int i = 0; i < 8; i++)
		failed |= a->ev[i].failed;
	for (int i = 0; i < 10; i++)
		failed |= a->dl[i].failed;
	return failed;
}

static int id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Marks the events S_INGEST did not insert as duplicates and gives each the id of the
 * stored event with its key (possibly one from earlier in the same batch). res holds the
 * inserted ids. */
static int mark_duplicates(struct pg *pg, struct pgconn *c, struct store_event_in *events,
			   size_t n, PGresult *res)
{
	size_t n_new = (size_t)PQntuples(res);
	char (*fresh)[UUID_STR_LEN] = NULL;
	size_t *dups = NULL, n_dups = 0;
	struct pgarr keys[2];
	struct params p = {0};
	PGresult *found = NULL;
	int rc = STORE_OK;

	if (n_new == n)
		return STORE_OK;
	fresh = calloc(n_new ? n_new : 1, UUID_STR_LEN);
	dups = calloc(n, sizeof(*dups));
	arr_init(&keys[0], OID_TEXT);
	arr_init(&keys[1], OID_TEXT);
	if (!fresh || !dups) {
		rc = STORE_ERROR;
		goto out;
	}
	for (size_t i = 0; i < n_new; i++)
		get_id(res, (int)i, 0, fresh[i]);
	qsort(fresh, n_new, UUID_STR_LEN, id_cmp);
	for (size_t i = 0; i < n; i++) {
		if (bsearch(events[i].id, fresh, n_new, UUID_STR_LEN, id_cmp))
			continue;
		/* Only an idempotency key can make an event a duplicate, or in a spool
		 * replay its own id (then the stored event is this one: its id stays). */
		if (!events[i].source_event_id) {
			if (events[i].dedupe_by_id)
				events[i].duplicate = 1;
			continue;
		}
		dups[n_dups++] = i;
		events[i].duplicate = 1;
		arr_text(&keys[0], events[i].source ? events[i].source : "");
		arr_text(&keys[1], events[i].source_event_id);
	}
	p_arr(&p, &keys[0]);
	p_arr(&p, &keys[1]);
	if (keys[0].failed || keys[1].failed) {
		rc = STORE_ERROR;
		goto out;
	}
	found = run(pg, c, S_DUP_LOOKUP, &p, &rc);
	for (int r = 0; found && r < PQntuples(found); r++) {
		int64_t ord = get_int(found, r, 0);

		if (ord >= 1 && (size_t)ord <= n_dups)
			get_id(found, r, 1, events[dups[ord - 1]].id);
	}
out:
	PQclear(found);
	arr_free(&keys[0]);
	arr_free(&keys[1]);
	free(fresh);
	free(dups);
	return rc;
}

/* One S_INGEST call on c; marks duplicates. */
static int ingest_run(struct pg *pg, struct pgconn *c, struct store_event_in *events, size_t n,
		      struct ingest_arrays *a)
{
	struct params p = {0};
	PGresult *res;
	int rc;

	for (int i = 0; i < 8; i++)
		p_arr(&p, &a->ev[i]);
	for (int i = 0; i < 5; i++)
		p_arr(&p, &a->dl[i]);
	p_arr(&p, &a->outbox_ids);
	p_arr(&p, &a->traceparent);
	for (int i = 5; i < 10; i++)
		p_arr(&p, &a->dl[i]);
	if (ingest_arrays_failed(a))
		return STORE_ERROR;
	res = run(pg, c, n && events[0].dedupe_by_id ? S_INGEST_REPLAY : S_INGEST, &p, &rc);
	if (!res)
		return rc;
	rc = mark_duplicates(pg, c, events, n, res);
	PQclear(res);
	return rc;
}

static int pg_ingest(store *st, struct store_event_in *events, size_t n)
{
	struct pg *pg = pg_of(st);
	struct ingest_arrays a;
	int64_t now = clock_now_ms();
	struct pgconn *c;
	int rc;

	ingest_arrays_init(&a);
	for (size_t i = 0; i < n; i++) {
		if (!events[i].created_at)
			events[i].created_at = now;
		ingest_add(&a, &events[i], events[i].created_at);
	}
	/* One statement in its own transaction, committed synchronously: durable when
	 * this returns STORE_OK. Duplicates are looked up after the commit (the first
	 * event of a key is committed by then). */
	if ((c = take(pg, ROLE_INGEST, &rc))) {
		rc = ingest_run(pg, c, events, n, &a);
		give(c);
	}
	ingest_arrays_free(&a);
	if (rc != STORE_OK)
		for (size_t i = 0; i < n; i++)
			events[i].duplicate = 0;
	return rc;
}

static int pg_relay_outbox(store *st, size_t limit, store_fanout_cb fanout, void *ctx,
			   size_t *relayed)
{
	struct pg *pg = pg_of(st);
	int64_t now = clock_now_ms();
	struct store_event_in *events = NULL;
	struct ingest_arrays a;
	struct params p = {0};
	PGresult *rows = NULL;
	struct pgconn *c;
	size_t count = 0;
	int rc;

	if (!(c = take(pg, ROLE_JOBS, &rc)))
		return rc;
	ingest_arrays_init(&a);
	rc = tx_begin(pg, c);
	if (rc != STORE_OK)
		goto out;
	/* Rows another instance is relaying, or a producer's uncommitted ones, are
	 * skipped: their turn comes in a later round. */
	p_i64(&p, (int64_t)limit);
	rows = run(pg, c, S_OUTBOX_TAKE, &p, &rc);
	if (!rows)
		goto out;
	count = (size_t)PQntuples(rows);
	if (!count)
		goto out;
	events = calloc(count, sizeof(*events));
	if (!events) {
		rc = STORE_ERROR;
		goto out;
	}
	for (size_t i = 0; i < count; i++) {
		struct store_event_in *ev = &events[i];
		const char (*ids)[UUID_STR_LEN] = NULL;
		size_t n_ids = 0;
		int r = (int)i;

		arr_i64(&a.outbox_ids, get_int(rows, r, 0));
		uuid_v7(ev->id);
		ev->event_type = PQgetvalue(rows, r, 1);
		ev->source = PQgetvalue(rows, r, 2);
		ev->source_event_id = PQgetisnull(rows, r, 3) ? NULL : PQgetvalue(rows, r, 3);
		ev->partition_key = PQgetisnull(rows, r, 4) ? NULL : PQgetvalue(rows, r, 4);
		ev->payload = PQgetvalue(rows, r, 5);
		ev->payload_len = (size_t)PQgetlength(rows, r, 5);
		ev->content_type = PQgetvalue(rows, r, 6);
		ev->created_at = get_int(rows, r, 7);
		if (ev->created_at <= 0)
			ev->created_at = now;
		fanout(ctx, ev->event_type, &ids, &n_ids);
		ev->subscription_ids = ids;
		ev->n_subscriptions = ids ? n_ids : 0;
		ingest_add(&a, ev, now);
		ev->subscription_ids = NULL; /* valid only until the next fan-out */
	}
	rc = ingest_run(pg, c, events, count, &a);
	for (size_t i = 0; rc == STORE_OK && i < count; i++)
		if (events[i].duplicate)
			log_debug("store: outbox row duplicates event %s, dropped", events[i].id);
out:
	rc = tx_end(pg, c, rc);
	give(c);
	PQclear(rows);
	free(events);
	ingest_arrays_free(&a);
	if (rc == STORE_OK)
		*relayed = count;
	return rc;
}

/* ---- claim and results -------------------------------------------------------------- */

/* One allocation per claim holding event_type, content_type and the payload
 * (NUL-terminated for convenience; payload_len excludes it), as store_claims_free
 * expects. */
static int fill_claim(const PGresult *r, int row, struct store_claim *c)
{
	size_t type_len = (size_t)PQgetlength(r, row, 7);
	size_t ctype_len = (size_t)PQgetlength(r, row, 8);
	enum delivery_status status = DELIVERY_NEW;
	char *block;

	get_id(r, row, 0, c->delivery_id);
	get_id(r, row, 1, c->event_id);
	get_id(r, row, 2, c->subscription_id);
	delivery_status_parse(PQgetvalue(r, row, 3), &status);
	c->status = status;
	c->replay = (int)get_int(r, row, 4);
	c->attempt_count = (int)get_int(r, row, 5);
	c->retry_count = (int)get_int(r, row, 6);
	c->payload_len = (size_t)PQgetlength(r, row, 9);
	c->event_created_at = get_int(r, row, 10);
	snprintf(c->traceparent, sizeof(c->traceparent), "%s",
		 PQgetisnull(r, row, 11) ? "" : PQgetvalue(r, row, 11));
	c->delay_actions = (int)get_int(r, row, 12);
	size_t source_len = (size_t)PQgetlength(r, row, 13);
	int has_seid = !PQgetisnull(r, row, 14), has_pkey = !PQgetisnull(r, row, 15);
	size_t seid_len = has_seid ? (size_t)PQgetlength(r, row, 14) : 0;
	size_t pkey_len = has_pkey ? (size_t)PQgetlength(r, row, 15) : 0;
	block = malloc(type_len + 1 + ctype_len + 1 + source_len + 1 + seid_len + 1 + pkey_len + 1 +
		       c->payload_len + 1);
	if (!block) {
		log_error("store: out of memory");
		return -1;
	}
	char *at = block;
	c->event_type = at;
	memcpy(at, PQgetvalue(r, row, 7), type_len + 1);
	at += type_len + 1;
	c->content_type = at;
	memcpy(at, PQgetvalue(r, row, 8), ctype_len + 1);
	at += ctype_len + 1;
	c->source = at;
	memcpy(at, PQgetvalue(r, row, 13), source_len + 1);
	at += source_len + 1;
	c->source_event_id = has_seid ? at : NULL;
	memcpy(at, PQgetvalue(r, row, 14), seid_len + 1);
	at += seid_len + 1;
	c->partition_key = has_pkey ? at : NULL;
	memcpy(at, PQgetvalue(r, row, 15), pkey_len + 1);
	at += pkey_len + 1;
	c->payload = at;
	if (c->payload_len)
		memcpy(c->payload, PQgetvalue(r, row, 9), c->payload_len);
	((char *)c->payload)[c->payload_len] = '\0';
	return 0;
}

static int pg_claim_due(store *st, int64_t now_ms, int64_t lease_ms, size_t limit,
			struct store_claim **items, size_t *n)
{
	struct pg *pg = pg_of(st);
	struct store_claim *out = NULL;
	struct params p = {0};
	PGresult *res = NULL;
	struct pgconn *c;
	size_t count = 0, filled = 0;
	int rc;

	if (!(c = take(pg, ROLE_DISPATCH, &rc)))
		return rc;
	p_text(&p, st->owner);
	p_i64(&p, now_ms + lease_ms);
	p_i64(&p, now_ms);
	p_i64(&p, (int64_t)limit);
	res = run(pg, c, S_CLAIM, &p, &rc);
	give(c);
	if (!res)
		return rc;
	count = (size_t)PQntuples(res);
	if (count) {
		out = calloc(count, sizeof(*out));
		for (; out && filled < count; filled++)
			if (fill_claim(res, (int)filled, &out[filled]))
				break;
	}
	PQclear(res);
	if (filled < count) {
		/* Out of memory: the leases expire and the work returns to the pool. */
		store_claims_free(out, filled);
		return STORE_ERROR;
	}
	*items = out;
	*n = count;
	return STORE_OK;
}

static int pg_next_due(store *st, int64_t *at_ms)
{
	struct pg *pg = pg_of(st);
	PGresult *res;
	struct pgconn *c;
	int rc;

	if (!(c = take(pg, ROLE_DISPATCH, &rc)))
		return rc;
	res = run(pg, c, S_NEXT_DUE, NULL, &rc);
	give(c);
	if (res && PQntuples(res) == 1)
		*at_ms = get_int(res, 0, 0);
	PQclear(res);
	return rc;
}

static int pg_record_results(store *st, const struct store_result *results, size_t n)
{
	static const uint32_t r_oids[11] = {OID_TEXT, OID_TEXT, OID_BOOL, OID_INT4, OID_INT4,
		OID_INT8, OID_INT8, OID_BOOL, OID_INT4, OID_TEXT, OID_TEXT};
	static const uint32_t a_oids[8] = {OID_TEXT, OID_INT4, OID_TEXT, OID_INT8, OID_INT8,
		OID_INT4, OID_TEXT, OID_TEXT};
	struct pg *pg = pg_of(st);
	struct pgarr r[11], a[8], delays;
	struct params p = {0};
	PGresult *res = NULL;
	struct pgconn *c;
	int failed = 0;
	int rc;

	for (int i = 0; i < 11; i++)
		arr_init(&r[i], r_oids[i]);
	for (int i = 0; i < 8; i++)
		arr_init(&a[i], a_oids[i]);
	arr_init(&delays, OID_INT4);
	for (size_t i = 0; i < n; i++) {
		const struct store_result *x = &results[i];

		arr_text(&r[0], x->delivery_id);
		arr_text(&r[1], delivery_status_name(x->status));
		arr_bool(&r[2], x->replay);
		arr_i32(&r[3], x->attempt_count);
		arr_i32(&r[4], x->retry_count);
		arr_i32(&delays, x->delay_actions);
		arr_time(&r[5], x->next_attempt_at);
		arr_time(&r[6], x->processed_at);
		/* No error code means no error: message and cause are not kept either; -1
		 * keeps whatever error the delivery shows already. */
		arr_bool(&r[7], x->last_code == -1);
		if (x->last_code > 0) {
			arr_i32(&r[8], x->last_code);
			arr_error_text(&r[9], x->last_message);
			arr_error_text(&r[10], x->last_cause);
		} else {
			arr_null(&r[8]);
			arr_null(&r[9]);
			arr_null(&r[10]);
		}
		for (size_t k = 0; k < x->n_attempts; k++) {
			const struct store_attempt *t = &x->attempts[k];

			arr_text(&a[0], x->delivery_id);
			arr_i32(&a[1], t->n);
			arr_text(&a[2], attempt_kind_name(t->kind));
			arr_i64(&a[3], t->started_at);
			arr_i64(&a[4], t->duration_ms);
			arr_i32(&a[5], t->code);
			arr_error_text(&a[6], t->message);
			arr_error_text(&a[7], t->cause);
		}
	}
	for (int i = 0; i < 11; i++) {
		p_arr(&p, &r[i]);
		failed |= r[i].failed;
	}
	p_i64(&p, clock_now_ms());
	p_text(&p, st->owner);
	for (int i = 0; i < 8; i++) {
		p_arr(&p, &a[i]);
		failed |= a[i].failed;
	}
	p_arr(&p, &delays);
	failed |= delays.failed;
	rc = STORE_ERROR;
	if (!failed && (c = take(pg, ROLE_DISPATCH, &rc))) {
		res = run(pg, c, S_RESULTS, &p, &rc);
		give(c);
	}
	if (res) {
		size_t applied = (size_t)get_int(res, 0, 0);

		if (applied < n)
			log_warn("store: %zu of %zu results ignored: their lease was lost",
				 n - applied, n);
	}
	PQclear(res);
	for (int i = 0; i < 11; i++)
		arr_free(&r[i]);
	for (int i = 0; i < 8; i++)
		arr_free(&a[i]);
	arr_free(&delays);
	return rc;
}

static int pg_reap_leases(store *st, int64_t now_ms, size_t *n)
{
	struct pg *pg = pg_of(st);
	struct params p = {0};
	struct pgconn *c;
	int rc;

	if (!(c = take(pg, ROLE_JOBS, &rc)))
		return rc;
	p_i64(&p, now_ms);
	rc = run_done(pg, c, S_REAP, &p, n);
	give(c);
	return rc;
}

/* Other instances hold live leases: only this owner's and expired ones are cleared. */
static int pg_release_all(store *st, size_t *n)
{
	struct pg *pg = pg_of(st);
	struct params p = {0};
	struct pgconn *c;
	int rc;

	if (!(c = take(pg, ROLE_JOBS, &rc)))
		return rc;
	p_text(&p, st->owner);
	p_i64(&p, clock_now_ms());
	rc = run_done(pg, c, S_RELEASE_ALL, &p, n);
	give(c);
	return rc;
}

/* ---- reading ------------------------------------------------------------------------ */

/* Runs a reading statement on the API connection. */
static PGresult *read_run(struct pg *pg, enum stmt k, const struct params *p, int *rc)
{
	struct pgconn *c;
	PGresult *res;

	if (!(c = take(pg, ROLE_API, rc)))
		return NULL;
	res = run(pg, c, k, p, rc);
	give(c);
	return res;
}

static int read_delivery(const PGresult *r, int row, struct store_delivery *d)
{
	enum delivery_status status = DELIVERY_NEW;
	const char *name = PQgetvalue(r, row, 4);

	memset(d, 0, sizeof(*d));
	get_id(r, row, 0, d->id);
	get_id(r, row, 1, d->event_id);
	get_id(r, row, 2, d->subscription_id);
	if (delivery_status_parse(name, &status) != 0)
		log_warn("store: delivery %s has unknown status %s", d->id, name);
	d->status = status;
	d->replay = (int)get_int(r, row, 5);
	d->attempt_count = (int)get_int(r, row, 6);
	d->retry_count = (int)get_int(r, row, 7);
	d->next_attempt_at = get_int(r, row, 8);
	d->created_at = get_int(r, row, 9);
	d->updated_at = get_int(r, row, 10);
	d->processed_at = get_int(r, row, 11);
	d->last_code = (int)get_int(r, row, 12);
	d->lease_until = get_int(r, row, 16);
	if (get_dup(r, row, 3, &d->event_type) || get_dup(r, row, 13, &d->last_message) ||
	    get_dup(r, row, 14, &d->last_cause) || get_dup(r, row, 15, &d->lease_owner)) {
		store_delivery_free(d);
		return -1;
	}
	return 0;
}

/* Every row of res as deliveries (returned array); STORE_ERROR when memory runs out. */
static int read_deliveries(const PGresult *res, struct store_delivery **items, size_t *n)
{
	size_t count = (size_t)PQntuples(res);
	struct store_delivery *out;

	*items = NULL;
	*n = 0;
	if (!count)
		return STORE_OK;
	out = calloc(count, sizeof(*out));
	if (!out)
		return STORE_ERROR;
	for (size_t i = 0; i < count; i++) {
		if (read_delivery(res, (int)i, &out[i])) {
			store_deliveries_free(out, i);
			return STORE_ERROR;
		}
	}
	*items = out;
	*n = count;
	return STORE_OK;
}

static int pg_event_get(store *st, const char *id, struct store_event *ev)
{
	struct params p = {0};
	PGresult *res;
	int rc;

	p_text(&p, id);
	res = read_run(pg_of(st), S_EVENT_GET, &p, &rc);
	if (!res)
		return rc;
	if (PQntuples(res) == 0) {
		PQclear(res);
		return STORE_NOT_FOUND;
	}
	get_id(res, 0, 0, ev->id);
	ev->created_at = get_int(res, 0, 7);
	ev->payload_len = (size_t)PQgetlength(res, 0, 6);
	ev->payload = malloc(ev->payload_len + 1);
	if (!ev->payload || get_dup(res, 0, 1, &ev->event_type) ||
	    get_dup(res, 0, 2, &ev->source) || get_dup(res, 0, 3, &ev->source_event_id) ||
	    get_dup(res, 0, 4, &ev->partition_key) || get_dup(res, 0, 5, &ev->content_type)) {
		store_event_free(ev);
		PQclear(res);
		return STORE_ERROR;
	}
	if (ev->payload_len)
		memcpy(ev->payload, PQgetvalue(res, 0, 6), ev->payload_len);
	((char *)ev->payload)[ev->payload_len] = '\0';
	PQclear(res);
	return STORE_OK;
}

static int pg_event_deliveries(store *st, const char *event_id, struct store_delivery **items,
			       size_t *n)
{
	struct params p = {0};
	PGresult *res;
	int rc;

	p_text(&p, event_id);
	res = read_run(pg_of(st), S_EVENT_DELIVERIES, &p, &rc);
	if (!res)
		return rc;
	rc = read_deliveries(res, items, n);
	PQclear(res);
	return rc;
}

static int pg_delivery_get(store *st, const char *id, struct store_delivery *d)
{
	struct params p = {0};
	PGresult *res;
	int rc;

	p_text(&p, id);
	res = read_run(pg_of(st), S_DELIVERY_GET, &p, &rc);
	if (!res)
		return rc;
	if (PQntuples(res) == 0)
		rc = STORE_NOT_FOUND;
	else
		rc = read_delivery(res, 0, d) ? STORE_ERROR : STORE_OK;
	PQclear(res);
	return rc;
}

static int pg_delivery_attempts(store *st, const char *id, struct store_attempt_row **items,
				size_t *n)
{
	struct store_attempt_row *rows = NULL;
	struct params p = {0};
	PGresult *res;
	size_t count;
	int rc;

	p_text(&p, id);
	res = read_run(pg_of(st), S_ATTEMPTS, &p, &rc);
	if (!res)
		return rc;
	count = (size_t)PQntuples(res);
	if (count && !(rows = calloc(count, sizeof(*rows)))) {
		PQclear(res);
		return STORE_ERROR;
	}
	for (size_t i = 0; i < count; i++) {
		struct store_attempt_row *a = &rows[i];
		int r = (int)i;

		a->n = (int)get_int(res, r, 0);
		a->kind = attempt_kind_parse(PQgetvalue(res, r, 1));
		a->started_at = get_int(res, r, 2);
		a->duration_ms = get_int(res, r, 3);
		a->code = (int)get_int(res, r, 4);
		if (get_dup(res, r, 5, &a->message) || get_dup(res, r, 6, &a->cause)) {
			store_attempts_free(rows, i + 1);
			PQclear(res);
			return STORE_ERROR;
		}
	}
	PQclear(res);
	*items = rows;
	*n = count;
	return STORE_OK;
}

/* Appends a formatted fragment; the buffers are sized for every fragment at once. */
static void sql_add(char *sql, size_t size, const char *fmt, int a, int b)
{
	size_t len = strlen(sql);

	snprintf(sql + len, size - len, fmt, a, b);
}

/* A glob ('*' any run, '?' one character) as a LIKE pattern with '\' escaping, into
 * out (at least 2 * strlen(glob) + 1 bytes). */
static void glob_to_like(const char *glob, char *out)
{
	for (; *glob; glob++) {
		if (*glob == '*') {
			*out++ = '%';
		} else if (*glob == '?') {
			*out++ = '_';
		} else {
			if (*glob == '%' || *glob == '_' || *glob == '\\')
				*out++ = '\\';
			*out++ = *glob;
		}
	}
	*out = '\0';
}

/* The WHERE conditions of a delivery filter (fixed fragments, values as parameters),
 * appended to sql, and their values to p. like (returned, free it) holds the LIKE
 * pattern of an event-type glob. */
static int filter_sql(const struct delivery_filter *f, char *sql, size_t size,
		      struct params *p, char **like)
{
	*like = NULL;
	if (f->has_status) {
		p_text(p, delivery_status_name(f->status));
		sql_add(sql, size, " AND status = $%d", p->n, 0);
	}
	if (f->dead_only)
		sql_add(sql, size, " AND status = 'FAILED' AND next_attempt_at IS NULL", 0, 0);
	if (f->subscription_id) {
		p_text(p, f->subscription_id);
		sql_add(sql, size, " AND subscription_id = $%d", p->n, 0);
	}
	if (f->event_type && f->event_type_glob) {
		if (!(*like = malloc(2 * strlen(f->event_type) + 1)))
			return -1;
		glob_to_like(f->event_type, *like);
		p_text(p, *like);
		sql_add(sql, size, " AND event_type LIKE $%d ESCAPE '\\'", p->n, 0);
	} else if (f->event_type) {
		p_text(p, f->event_type);
		sql_add(sql, size, " AND event_type = $%d", p->n, 0);
	}
	/* strpos(), not LIKE: '%' and '_' in the search text match themselves. */
	if (f->q && *f->q) {
		p_text(p, f->q);
		sql_add(sql, size, " AND (strpos(last_message, $%d) > 0 OR strpos(last_cause, $%d) > 0)",
			p->n, p->n);
	}
	if (f->has_code) {
		p_i64(p, f->code);
		sql_add(sql, size, " AND last_code = $%d", p->n, 0);
	}
	if (f->source) {
		p_text(p, f->source);
		sql_add(sql, size, " AND EXISTS (SELECT 1 FROM outboxd.events e"
			" WHERE e.id = deliveries.event_id AND e.source = $%d)", p->n, 0);
	}
	if (f->event_id) {
		p_text(p, f->event_id);
		sql_add(sql, size, " AND event_id = $%d", p->n, 0);
	}
	if (f->from_ms) {
		p_i64(p, f->from_ms);
		sql_add(sql, size, " AND created_at >= $%d", p->n, 0);
	}
	if (f->to_ms) {
		p_i64(p, f->to_ms);
		sql_add(sql, size, " AND created_at < $%d", p->n, 0);
	}
	return 0;
}

static int pg_deliveries_list(store *st, const struct delivery_filter *f,
			      struct store_delivery **items, size_t *n, char **next_cursor)
{
	struct pg *pg = pg_of(st);
	const char *col = store_sort_column(f->sort);
	const char *dir = f->descending ? "DESC" : "ASC";
	char cursor_id[UUID_STR_LEN], sql[2048], frag[192];
	int64_t cursor_value = 0;
	struct params p = {0};
	struct pgconn *c;
	PGresult *res = NULL;
	char *like = NULL;
	size_t count = 0;
	int rc;

	if (f->cursor && store_cursor_parse(f, &cursor_value, cursor_id) != 0)
		return STORE_INVALID;
	snprintf(sql, sizeof(sql), "SELECT " DELIVERY_COLUMNS " FROM outboxd.deliveries WHERE true");
	if (filter_sql(f, sql, sizeof(sql), &p, &like))
		return STORE_ERROR;
	if (f->cursor) {
		p_i64(&p, cursor_value);
		p_text(&p, cursor_id);
		snprintf(frag, sizeof(frag), " AND (%s, id) %s ($%d, $%d)", col,
			 f->descending ? "<" : ">", p.n - 1, p.n);
		strncat(sql, frag, sizeof(sql) - strlen(sql) - 1);
	}
	/* One row more than asked tells whether there is a next page. */
	p_i64(&p, (int64_t)f->limit + 1);
	snprintf(frag, sizeof(frag), " ORDER BY %s %s, id %s LIMIT $%d", col, dir, dir, p.n);
	strncat(sql, frag, sizeof(sql) - strlen(sql) - 1);

	if ((c = take(pg, ROLE_API, &rc))) {
		res = run_sql(pg, c, sql, &p, &rc);
		give(c);
	}
	free(like);
	if (!res)
		return rc;
	rc = read_deliveries(res, items, &count);
	PQclear(res);
	if (rc == STORE_OK && count > f->limit) {
		*next_cursor = store_cursor_after(f, &(*items)[f->limit - 1]);
		if (!*next_cursor)
			rc = STORE_ERROR;
		store_delivery_free(&(*items)[f->limit]);
		count = f->limit;
	}
	if (rc != STORE_OK) {
		store_deliveries_free(*items, count);
		*items = NULL;
		return rc;
	}
	*n = count;
	return STORE_OK;
}

static int pg_deliveries_count(store *st, const struct delivery_filter *f, size_t *n)
{
	struct pg *pg = pg_of(st);
	char sql[2048] = "SELECT count(*) FROM outboxd.deliveries WHERE true";
	struct params p = {0};
	struct pgconn *c;
	PGresult *res = NULL;
	char *like = NULL;
	int rc;

	if (filter_sql(f, sql, sizeof(sql), &p, &like))
		return STORE_ERROR;
	if ((c = take(pg, ROLE_API, &rc))) {
		res = run_sql(pg, c, sql, &p, &rc);
		give(c);
	}
	free(like);
	if (res)
		*n = (size_t)get_int(res, 0, 0);
	PQclear(res);
	return rc;
}

/* ---- operator actions --------------------------------------------------------------- */

struct replay_row {
	char id[UUID_STR_LEN];
	enum delivery_status status;
	int64_t lease_until;
	int taken;                   /* already replayed by an earlier id of the same call */
};

static int replay_row_cmp(const void *a, const void *b)
{
	return strcmp(((const struct replay_row *)a)->id, ((const struct replay_row *)b)->id);
}

static int pg_replay(store *st, const char (*ids)[UUID_STR_LEN], size_t n, int force,
		     enum store_replay_outcome *outcomes, size_t *replayed)
{
	struct pg *pg = pg_of(st);
	int64_t now = clock_now_ms();
	struct replay_row *rows = NULL;
	struct pgarr all, chosen;
	struct params p = {0}, q = {0};
	PGresult *res = NULL;
	struct pgconn *c;
	size_t count = 0, done = 0;
	int rc;

	arr_init(&all, OID_TEXT);
	arr_init(&chosen, OID_TEXT);
	for (size_t i = 0; i < n; i++)
		arr_text(&all, ids[i]);
	p_arr(&p, &all);
	if (all.failed) {
		arr_free(&all);
		return STORE_ERROR;
	}
	if (!(c = take(pg, ROLE_API, &rc))) {
		arr_free(&all);
		return rc;
	}
	rc = tx_begin(pg, c);
	if (rc == STORE_OK)
		res = run(pg, c, S_REPLAY_CHECK, &p, &rc);
	if (res) {
		count = (size_t)PQntuples(res);
		rows = calloc(count ? count : 1, sizeof(*rows));
		if (!rows)
			rc = STORE_ERROR;
		for (size_t i = 0; rows && i < count; i++) {
			enum delivery_status status = DELIVERY_NEW;

			get_id(res, (int)i, 0, rows[i].id);
			delivery_status_parse(PQgetvalue(res, (int)i, 1), &status);
			rows[i].status = status;
			rows[i].lease_until = PQgetisnull(res, (int)i, 2) ? -1 : get_int(res, (int)i, 2);
		}
		if (rows)
			qsort(rows, count, sizeof(*rows), replay_row_cmp);
	}
	for (size_t i = 0; rc == STORE_OK && i < n; i++) {
		enum store_replay_outcome outcome = REPLAY_NOT_FOUND;
		struct replay_row key, *row;

		snprintf(key.id, sizeof(key.id), "%s", ids[i]);
		row = bsearch(&key, rows, count, sizeof(*rows), replay_row_cmp);
		if (row) {
			outcome = REPLAY_NOT_FAILED;
			if (row->lease_until >= now)
				outcome = REPLAY_IN_FLIGHT;
			else if (!row->taken && (row->status == DELIVERY_FAILED ||
						 (row->status == DELIVERY_PROCESSED && force)))
				outcome = REPLAY_DONE;
		}
		if (outcome == REPLAY_DONE) {
			row->taken = 1;
			arr_text(&chosen, ids[i]);
			done++;
		}
		if (outcomes)
			outcomes[i] = outcome;
	}
	if (rc == STORE_OK && done) {
		p_arr(&q, &chosen);
		p_i64(&q, now);
		rc = chosen.failed ? STORE_ERROR : run_done(pg, c, S_REPLAY_SET, &q, NULL);
		/* Other instances' dispatchers learn of it at once. */
		if (rc == STORE_OK)
			rc = run_done(pg, c, S_NOTIFY, NULL, NULL);
	}
	rc = tx_end(pg, c, rc);
	give(c);
	PQclear(res);
	free(rows);
	arr_free(&all);
	arr_free(&chosen);
	if (rc == STORE_OK)
		*replayed = done;
	return rc;
}

static int pg_dlq_purge(store *st, const char *delivery_id)
{
	struct pg *pg = pg_of(st);
	char event_id[UUID_STR_LEN];
	struct params p = {0}, q = {0};
	PGresult *res = NULL;
	struct pgconn *c;
	int result = STORE_OK;
	int rc;

	if (!(c = take(pg, ROLE_API, &rc)))
		return rc;
	p_text(&p, delivery_id);
	rc = tx_begin(pg, c);
	if (rc == STORE_OK)
		res = run(pg, c, S_PURGE_CHECK, &p, &rc);
	if (res && PQntuples(res) == 0) {
		result = STORE_NOT_FOUND;
	} else if (res) {
		/* Dead means FAILED with no attempt pending and no lease. */
		if (strcmp(PQgetvalue(res, 0, 0), "FAILED") != 0 || !PQgetisnull(res, 0, 1) ||
		    !PQgetisnull(res, 0, 2)) {
			result = STORE_CONFLICT;
		} else {
			get_id(res, 0, 3, event_id);
			rc = run_done(pg, c, S_DELIVERY_DELETE, &p, NULL);
			p_text(&q, event_id);
			if (rc == STORE_OK)
				rc = run_done(pg, c, S_EVENT_DELETE_ORPHAN, &q, NULL);
		}
	}
	PQclear(res);
	rc = tx_end(pg, c, rc);
	give(c);
	return rc != STORE_OK ? rc : result;
}

static int pg_dlq_purge_matching(store *st, const struct delivery_filter *f, size_t limit,
				 size_t *purged)
{
	struct pg *pg = pg_of(st);
	struct delivery_filter dead = *f;
	struct store_delivery *items = NULL;
	struct pgconn *c;
	char *next = NULL;
	size_t n = 0, done = 0;
	int rc;

	dead.dead_only = 1;
	dead.cursor = NULL;
	dead.limit = limit;
	rc = pg_deliveries_list(st, &dead, &items, &n, &next);
	free(next);
	if (rc != STORE_OK)
		return rc;
	if (!(c = take(pg, ROLE_API, &rc))) {
		store_deliveries_free(items, n);
		return rc;
	}
	rc = tx_begin(pg, c);
	for (size_t i = 0; rc == STORE_OK && i < n; i++) {
		struct params p = {0}, q = {0};
		PGresult *res;

		/* Still dead and unleased: it may have changed since the listing. */
		p_text(&p, items[i].id);
		res = run_sql(pg, c, "DELETE FROM outboxd.deliveries WHERE id = $1"
			      " AND status = 'FAILED' AND next_attempt_at IS NULL"
			      " AND lease_until IS NULL", &p, &rc);
		if (res && strtoull(PQcmdTuples(res), NULL, 10) == 1) {
			done++;
			p_text(&q, items[i].event_id);
			rc = run_done(pg, c, S_EVENT_DELETE_ORPHAN, &q, NULL);
		}
		PQclear(res);
	}
	rc = tx_end(pg, c, rc);
	give(c);
	store_deliveries_free(items, n);
	if (rc == STORE_OK)
		*purged = done;
	return rc;
}

/* Deletes up to CLEANUP_CHUNK PROCESSED deliveries (attempts cascade) and the events
 * they leave without deliveries, in one transaction. *deleted = deliveries removed. */
static int cleanup_chunk(struct pg *pg, size_t *deleted)
{
	struct params p = {0}, q = {0};
	struct pgarr events;
	PGresult *res = NULL;
	struct pgconn *c;
	size_t count = 0;
	int rc;

	if (!(c = take(pg, ROLE_JOBS, &rc)))
		return rc;
	arr_init(&events, OID_TEXT);
	rc = tx_begin(pg, c);
	p_i64(&p, CLEANUP_CHUNK);
	if (rc == STORE_OK)
		res = run(pg, c, S_CLEANUP_CHUNK, &p, &rc);
	if (res) {
		count = (size_t)PQntuples(res);
		for (size_t i = 0; i < count; i++)
			arr_text(&events, PQgetvalue(res, (int)i, 0));
		p_arr(&q, &events);
		rc = events.failed ? STORE_ERROR :
				     run_done(pg, c, S_EVENTS_DELETE_ORPHANS, &q, NULL);
	}
	rc = tx_end(pg, c, rc);
	give(c);
	PQclear(res);
	arr_free(&events);
	if (rc == STORE_OK)
		*deleted = count;
	return rc;
}

static int pg_cleanup(store *st, size_t *deleted)
{
	struct pg *pg = pg_of(st);
	struct params p = {0};
	struct pgconn *c;
	size_t chunk;
	int rc;

	do {
		chunk = 0;
		rc = cleanup_chunk(pg, &chunk);
		*deleted += chunk;
	} while (rc == STORE_OK && chunk == CLEANUP_CHUNK);
	p_i64(&p, CLEANUP_CHUNK);
	while (rc == STORE_OK) {
		chunk = 0;
		if (!(c = take(pg, ROLE_JOBS, &rc)))
			break;
		rc = run_done(pg, c, S_SWEEP_ORPHANS, &p, &chunk);
		give(c);
		if (chunk < CLEANUP_CHUNK)
			break;
	}
	return rc;
}

/* ---- jobs and audit --------------------------------------------------------------------- */

static void job_params(struct params *p, const struct store_job *j)
{
	p_text(p, j->id);
	p_text(p, j->kind);
	p_text(p, j->state);
	p_text(p, j->filter);
	p_bool(p, j->force);
	p_i64(p, j->rate);
	p_i64(p, j->matched);
	p_i64(p, j->done);
	p_text(p, j->cursor);
	p_text(p, j->actor);
	p_text(p, j->error);
	p_i64(p, j->created_at);
	p_i64(p, j->updated_at ? j->updated_at : clock_now_ms());
}

/* A write on the API connection; STORE_NOT_FOUND when it touched no row. */
static int api_write(struct pg *pg, const char *sql, const struct params *p)
{
	struct pgconn *c;
	PGresult *res;
	int rc;

	if (!(c = take(pg, ROLE_API, &rc)))
		return rc;
	res = run_sql(pg, c, sql, p, &rc);
	give(c);
	if (res && strtoull(PQcmdTuples(res), NULL, 10) == 0)
		rc = STORE_NOT_FOUND;
	PQclear(res);
	return rc;
}

static int pg_job_create(store *st, const struct store_job *job)
{
	struct params p = {0};

	job_params(&p, job);
	return api_write(pg_of(st), "INSERT INTO outboxd.jobs(" JOB_COLUMNS ") VALUES ($1, $2, $3,"
			 " $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)", &p);
}

static int pg_job_update(store *st, const struct store_job *job)
{
	struct params p = {0};

	p_text(&p, job->id);
	p_text(&p, job->kind);
	p_text(&p, job->state);
	p_i64(&p, job->matched);
	p_i64(&p, job->done);
	p_text(&p, job->cursor);
	p_text(&p, job->error);
	p_i64(&p, job->updated_at ? job->updated_at : clock_now_ms());
	/* Only a running job changes: a cancel that lands between a replay's batches is not
	 * overwritten by the replay's next progress write (which then finds nothing and
	 * stops), as on SQLite. */
	return api_write(pg_of(st), "UPDATE outboxd.jobs SET state = $3, matched = $4, done = $5,"
			 " cursor = $6, error = $7, updated_at = $8 WHERE id = $1 AND kind = $2"
			 " AND state = 'running'",
			 &p);
}

static int jobs_query(store *st, const char *sql, const char *one_id, struct store_job **items,
		      size_t *n)
{
	struct pg *pg = pg_of(st);
	struct store_job *rows = NULL;
	struct params p = {0};
	struct pgconn *c;
	PGresult *res = NULL;
	size_t count;
	int rc;

	if (one_id)
		p_text(&p, one_id);
	if ((c = take(pg, ROLE_API, &rc))) {
		res = run_sql(pg, c, sql, &p, &rc);
		give(c);
	}
	if (!res)
		return rc;
	count = (size_t)PQntuples(res);
	if (count && !(rows = calloc(count, sizeof(*rows)))) {
		PQclear(res);
		return STORE_ERROR;
	}
	for (size_t i = 0; i < count; i++) {
		struct store_job *j = &rows[i];
		int r = (int)i;

		get_id(res, r, 0, j->id);
		snprintf(j->kind, sizeof(j->kind), "%s", PQgetvalue(res, r, 1));
		snprintf(j->state, sizeof(j->state), "%s", PQgetvalue(res, r, 2));
		j->force = (int)get_int(res, r, 4);
		j->rate = (int)get_int(res, r, 5);
		j->matched = get_int(res, r, 6);
		j->done = get_int(res, r, 7);
		j->created_at = get_int(res, r, 11);
		j->updated_at = get_int(res, r, 12);
		if (get_dup(res, r, 3, &j->filter) || get_dup(res, r, 8, &j->cursor) ||
		    get_dup(res, r, 9, &j->actor) || get_dup(res, r, 10, &j->error)) {
			store_jobs_free(rows, i + 1);
			PQclear(res);
			return STORE_ERROR;
		}
	}
	PQclear(res);
	*items = rows;
	*n = count;
	return STORE_OK;
}

static int pg_job_get(store *st, const char *id, struct store_job *out)
{
	struct store_job *rows = NULL;
	size_t n = 0;
	int rc = jobs_query(st, "SELECT " JOB_COLUMNS " FROM outboxd.jobs WHERE id = $1", id,
			    &rows, &n);

	if (rc != STORE_OK)
		return rc;
	if (n == 0) {
		free(rows);
		return STORE_NOT_FOUND;
	}
	*out = rows[0];
	free(rows);
	return STORE_OK;
}

static int pg_jobs_running(store *st, struct store_job **items, size_t *n)
{
	return jobs_query(st, "SELECT " JOB_COLUMNS " FROM outboxd.jobs WHERE state = 'running'"
			  " ORDER BY created_at", NULL, items, n);
}

static int pg_audit_append(store *st, const struct store_audit *a)
{
	struct params p = {0};

	p_text(&p, a->id);
	p_i64(&p, a->at ? a->at : clock_now_ms());
	p_text(&p, a->actor);
	p_text(&p, a->action);
	p_text(&p, a->target);
	p_i64(&p, a->count);
	p_text(&p, a->detail);
	return api_write(pg_of(st), "INSERT INTO outboxd.audit(id, at, actor, action, target,"
			 " count, detail) VALUES ($1, $2, $3, $4, $5, $6, $7)", &p);
}

static int pg_audit_list(store *st, const char *before_id, size_t limit,
			 struct store_audit **items, size_t *n)
{
	struct pg *pg = pg_of(st);
	struct store_audit *rows = NULL;
	struct params p = {0};
	struct pgconn *c;
	PGresult *res = NULL;
	size_t count;
	int rc;

	p_text(&p, before_id);
	p_i64(&p, (int64_t)limit);
	if ((c = take(pg, ROLE_API, &rc))) {
		res = run_sql(pg, c, "SELECT id, at, actor, action, target, count, detail"
			      " FROM outboxd.audit WHERE ($1::text IS NULL OR id < $1)"
			      " ORDER BY id DESC LIMIT $2", &p, &rc);
		give(c);
	}
	if (!res)
		return rc;
	count = (size_t)PQntuples(res);
	if (count && !(rows = calloc(count, sizeof(*rows)))) {
		PQclear(res);
		return STORE_ERROR;
	}
	for (size_t i = 0; i < count; i++) {
		struct store_audit *a = &rows[i];
		int r = (int)i;

		get_id(res, r, 0, a->id);
		a->at = get_int(res, r, 1);
		a->count = get_int(res, r, 5);
		if (get_dup(res, r, 2, &a->actor) || get_dup(res, r, 3, &a->action) ||
		    get_dup(res, r, 4, &a->target) || get_dup(res, r, 6, &a->detail)) {
			store_audits_free(rows, i + 1);
			PQclear(res);
			return STORE_ERROR;
		}
	}
	PQclear(res);
	*items = rows;
	*n = count;
	return STORE_OK;
}

/* ---- stats -------------------------------------------------------------------------------- */

static int pg_stats(store *st, int64_t now_ms, int64_t window_ms, struct store_stats *out)
{
	struct pg *pg = pg_of(st);
	struct params p = {0}, w = {0};
	PGresult *counts = NULL, *subs = NULL;
	struct pgconn *c;
	int rc;

	p_i64(&p, now_ms);
	p_i64(&w, now_ms - window_ms);
	if (!(c = take(pg, ROLE_API, &rc)))
		return rc;
	counts = run_sql(pg, c,
			 "SELECT"
			 " count(*) FILTER (WHERE status = 'NEW'),"
			 " count(*) FILTER (WHERE status = 'PROCESSED'),"
			 " count(*) FILTER (WHERE status = 'FAILED' AND next_attempt_at IS NOT NULL),"
			 " count(*) FILTER (WHERE status = 'FAILED' AND next_attempt_at IS NULL),"
			 " count(*) FILTER (WHERE lease_until IS NOT NULL),"
			 " count(*) FILTER (WHERE lease_until IS NULL AND next_attempt_at <= $1),"
			 " COALESCE(MIN(next_attempt_at) FILTER (WHERE lease_until IS NULL"
			 "   AND next_attempt_at <= $1), 0),"
			 " COALESCE(MIN(created_at) FILTER (WHERE status = 'FAILED'"
			 "   AND next_attempt_at IS NULL), 0)"
			 " FROM outboxd.deliveries", &p, &rc);
	/* Per subscription over the window: attempts, successes, and the newest failure. */
	if (counts)
		subs = run_sql(pg, c,
			       "SELECT d.subscription_id, count(*),"
			       " count(*) FILTER (WHERE a.code BETWEEN 200 AND 299),"
			       " (array_agg(a.code ORDER BY a.started_at DESC)"
			       "   FILTER (WHERE a.code NOT BETWEEN 200 AND 299))[1],"
			       " (array_agg(a.message ORDER BY a.started_at DESC)"
			       "   FILTER (WHERE a.code NOT BETWEEN 200 AND 299))[1],"
			       " COALESCE(max(a.started_at) FILTER (WHERE a.code NOT BETWEEN 200"
			       "   AND 299), 0)"
			       " FROM outboxd.attempts a JOIN outboxd.deliveries d"
			       " ON d.id = a.delivery_id WHERE a.started_at >= $1"
			       " GROUP BY d.subscription_id ORDER BY d.subscription_id", &w, &rc);
	give(c);
	if (counts) {
		out->new_count = get_int(counts, 0, 0);
		out->processed_count = get_int(counts, 0, 1);
		out->retrying_count = get_int(counts, 0, 2);
		out->dead_count = get_int(counts, 0, 3);
		out->in_flight = get_int(counts, 0, 4);
		out->due_count = get_int(counts, 0, 5);
		out->oldest_due_at = get_int(counts, 0, 6);
		out->oldest_dead_at = get_int(counts, 0, 7);
	}
	if (subs && PQntuples(subs) > 0) {
		size_t count = (size_t)PQntuples(subs);

		out->subs = calloc(count, sizeof(*out->subs));
		if (!out->subs)
			rc = STORE_ERROR;
		for (size_t i = 0; out->subs && i < count; i++) {
			struct store_sub_stats *x = &out->subs[i];
			int r = (int)i;

			out->n_subs = i + 1;
			get_id(subs, r, 0, x->subscription_id);
			x->attempts = get_int(subs, r, 1);
			x->successes = get_int(subs, r, 2);
			x->last_code = (int)get_int(subs, r, 3);
			x->last_error_at = get_int(subs, r, 5);
			if (get_dup(subs, r, 4, &x->last_message)) {
				rc = STORE_ERROR;
				break;
			}
		}
	}
	PQclear(counts);
	PQclear(subs);
	if (rc != STORE_OK)
		store_stats_free(out);
	return rc;
}

/* ---- subscriptions ------------------------------------------------------------------ */

static int sub_write(struct pg *pg, enum stmt k, const struct params *p)
{
	struct pgconn *c;
	size_t changed = 0;
	int rc;

	if (!(c = take(pg, ROLE_API, &rc)))
		return rc;
	rc = run_done(pg, c, k, p, &changed);
	give(c);
	if (rc == STORE_OK && changed == 0)
		rc = STORE_NOT_FOUND;
	return rc;
}

static int pg_sub_create(store *st, const struct sub_row *sub)
{
	int64_t now = clock_now_ms();
	struct params p = {0};

	p_text(&p, sub->id);
	p_text(&p, sub->name);
	p_text(&p, sub->config);
	p_bool(&p, sub->enabled);
	p_i64(&p, sub->created_at ? sub->created_at : now);
	p_i64(&p, sub->updated_at ? sub->updated_at : now);
	return sub_write(pg_of(st), S_SUB_INSERT, &p);
}

static int pg_sub_update(store *st, const struct sub_row *sub)
{
	struct params p = {0};

	p_text(&p, sub->id);
	p_text(&p, sub->name);
	p_text(&p, sub->config);
	p_bool(&p, sub->enabled);
	p_i64(&p, sub->updated_at ? sub->updated_at : clock_now_ms());
	return sub_write(pg_of(st), S_SUB_UPDATE, &p);
}

static int pg_sub_delete(store *st, const char *id)
{
	struct params p = {0};

	p_text(&p, id);
	return sub_write(pg_of(st), S_SUB_DELETE, &p);
}

static int read_sub(const PGresult *r, int row, struct sub_row *sub)
{
	memset(sub, 0, sizeof(*sub));
	get_id(r, row, 0, sub->id);
	sub->enabled = (int)get_int(r, row, 3);
	sub->created_at = get_int(r, row, 4);
	sub->updated_at = get_int(r, row, 5);
	if (get_dup(r, row, 1, &sub->name) || get_dup(r, row, 2, &sub->config)) {
		store_sub_free(sub);
		return -1;
	}
	return 0;
}

static int pg_sub_get(store *st, const char *id, struct sub_row *out)
{
	struct params p = {0};
	PGresult *res;
	int rc;

	p_text(&p, id);
	res = read_run(pg_of(st), S_SUB_GET, &p, &rc);
	if (!res)
		return rc;
	if (PQntuples(res) == 0)
		rc = STORE_NOT_FOUND;
	else
		rc = read_sub(res, 0, out) ? STORE_ERROR : STORE_OK;
	PQclear(res);
	return rc;
}

static int pg_sub_list(store *st, struct sub_row **items, size_t *n)
{
	struct sub_row *subs = NULL;
	PGresult *res;
	size_t count;
	int rc;

	res = read_run(pg_of(st), S_SUB_LIST, NULL, &rc);
	if (!res)
		return rc;
	count = (size_t)PQntuples(res);
	if (count && !(subs = calloc(count, sizeof(*subs)))) {
		PQclear(res);
		return STORE_ERROR;
	}
	for (size_t i = 0; i < count; i++) {
		if (read_sub(res, (int)i, &subs[i])) {
			store_subs_free(subs, i);
			PQclear(res);
			return STORE_ERROR;
		}
	}
	PQclear(res);
	*items = subs;
	*n = count;
	return STORE_OK;
}

/* ---- the listener -------------------------------------------------------------------------- */

/* Waits up to ms for the stop pipe; 1 when asked to stop. */
static int wait_stop(struct pg *pg, int fd, int ms)
{
	struct pollfd fds[2] = {{pg->stop_pipe[0], POLLIN, 0}, {fd, POLLIN, 0}};
	int n = fd >= 0 ? 2 : 1;

	while (poll(fds, (nfds_t)n, ms) < 0 && errno == EINTR)
		;
	return (fds[0].revents & (POLLIN | POLLHUP)) != 0;
}

static void listener_wake(struct pg *pg, int work, int subs)
{
	/* Subscriptions first: work that arrives with a new subscription needs it. */
	if (subs && pg->subs_cb)
		pg->subs_cb(pg->subs_ctx);
	if (work && pg->work_cb)
		pg->work_cb(pg->work_ctx);
}

/* LISTENs on its own connection and calls the callbacks once per burst of
 * notifications. When the connection fails it reconnects with the same backoff as the
 * other roles, and calls both once after every reconnect: work may have become due, and
 * subscriptions may have changed, while nobody listened. */
static void *listener_main(void *arg)
{
	struct pg *pg = arg;

	pthread_setname_np(pthread_self(), "pg-listener");
	PGconn *conn = NULL;
	unsigned epoch = 0;
	int backoff = 0;

	for (;;) {
		if (!conn) {
			PGresult *r;

			conn = connect_dsn(pg->dsn);
			if (PQstatus(conn) == CONNECTION_OK) {
				r = PQexec(conn, "LISTEN " NOTIFY_CHANNEL "; LISTEN " SUBS_CHANNEL);
				if (PQresultStatus(r) != PGRES_COMMAND_OK) {
					PQfinish(conn);
					conn = NULL;
				}
				PQclear(r);
			} else {
				note_down(pg, "listen", PQerrorMessage(conn));
				PQfinish(conn);
				conn = NULL;
			}
			if (!conn) {
				backoff = backoff ? backoff * 2 : BACKOFF_MIN_MS;
				if (backoff > BACKOFF_MAX_MS)
					backoff = BACKOFF_MAX_MS;
				if (wait_stop(pg, -1, backoff))
					break;
				continue;
			}
			note_up(pg);
			epoch = atomic_load(&pg->epoch);
			backoff = 0;
			listener_wake(pg, 1, 1);
		}
		if (wait_stop(pg, PQsocket(conn), -1))
			break;
		if (!PQconsumeInput(conn) || PQstatus(conn) != CONNECTION_OK) {
			if (epoch == atomic_load(&pg->epoch))
				note_down(pg, "listen", PQerrorMessage(conn));
			PQfinish(conn);
			conn = NULL;
			continue;
		}
		int work = 0, subs = 0;
		PGnotify *note;

		while ((note = PQnotifies(conn))) {
			if (strcmp(note->relname, SUBS_CHANNEL) == 0)
				subs = 1;
			else
				work = 1;
			PQfreemem(note);
		}
		listener_wake(pg, work, subs);
	}
	if (conn)
		PQfinish(conn);
	return NULL;
}

/* listen_mu held. */
static void listener_stop(struct pg *pg)
{
	char c = 's';

	if (!pg->listening)
		return;
	if (write(pg->stop_pipe[1], &c, 1) < 0)
		log_warn("postgres: cannot signal the listener: %s", strerror(errno));
	pthread_join(pg->listener, NULL);
	close(pg->stop_pipe[0]);
	close(pg->stop_pipe[1]);
	pg->listening = 0;
}

/* Sets one callback; the listener runs while either is set. Restarting it is cheap and
 * happens only when the daemon wires or unwires itself. */
static void listener_set(store *st, int subs, void (*cb)(void *ctx), void *ctx)
{
	struct pg *pg = pg_of(st);

	pthread_mutex_lock(&pg->listen_mu);
	listener_stop(pg);
	if (subs) {
		pg->subs_cb = cb;
		pg->subs_ctx = ctx;
	} else {
		pg->work_cb = cb;
		pg->work_ctx = ctx;
	}
	if (pg->work_cb || pg->subs_cb) {
		if (pipe2(pg->stop_pipe, O_CLOEXEC) != 0) {
			log_error("postgres: cannot start the listener: %s", strerror(errno));
		} else if (pthread_create(&pg->listener, NULL, listener_main, pg) != 0) {
			log_error("postgres: cannot start the listener thread");
			close(pg->stop_pipe[0]);
			close(pg->stop_pipe[1]);
		} else {
			pg->listening = 1;
		}
	}
	pthread_mutex_unlock(&pg->listen_mu);
}

static void pg_on_work(store *st, void (*cb)(void *ctx), void *ctx)
{
	listener_set(st, 0, cb, ctx);
}

static void pg_on_subscriptions_changed(store *st, void (*cb)(void *ctx), void *ctx)
{
	listener_set(st, 1, cb, ctx);
}

const struct store_ops store_pg_ops = {
	.name = "postgres",
	.dsn_prefix = "postgres://",
	.open = pg_open,
	.close = pg_close,
	.ping = pg_ping,
	.ingest = pg_ingest,
	.relay_outbox = pg_relay_outbox,
	.claim_due = pg_claim_due,
	.next_due = pg_next_due,
	.record_results = pg_record_results,
	.reap_leases = pg_reap_leases,
	.release_all = pg_release_all,
	.event_get = pg_event_get,
	.event_deliveries = pg_event_deliveries,
	.delivery_get = pg_delivery_get,
	.delivery_attempts = pg_delivery_attempts,
	.deliveries_list = pg_deliveries_list,
	.replay = pg_replay,
	.dlq_purge = pg_dlq_purge,
	.cleanup = pg_cleanup,
	.deliveries_count = pg_deliveries_count,
	.dlq_purge_matching = pg_dlq_purge_matching,
	.job_create = pg_job_create,
	.job_update = pg_job_update,
	.job_get = pg_job_get,
	.jobs_running = pg_jobs_running,
	.audit_append = pg_audit_append,
	.audit_list = pg_audit_list,
	.stats = pg_stats,
	.sub_create = pg_sub_create,
	.sub_update = pg_sub_update,
	.sub_delete = pg_sub_delete,
	.sub_get = pg_sub_get,
	.sub_list = pg_sub_list,
	.on_work = pg_on_work,
	.on_subscriptions_changed = pg_on_subscriptions_changed,
};
