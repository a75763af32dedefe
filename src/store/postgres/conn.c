/* conn.c: the PostgreSQL backend of the storage interface (libpq): opening the
 * database, its schema migrations (schema/NNN_*.sql), the connections with their outage
 * handling and prepared statements, and the backend's table of functions (store_pg_methods).
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
 *
 * Outages: a lost connection makes calls answer STORE_UNAVAILABLE at once; later calls
 * reconnect with a backoff (100 ms doubling to 2 s), so an outage costs no waiting and no
 * restart. The loss is logged once per outage, and the recovery once.
 *
 * The other files: rows.c (parameters, binary arrays, results), write.c (ingest, relay,
 * claims, results), read.c (gets, lists, stats), admin.c (operator actions, jobs, audit,
 * subscriptions), listen.c (LISTEN/NOTIFY wake-ups), copy.c (the rows of a copy between
 * backends).
 *
 * Must not: interpolate values into SQL (only fixed fragments and column names from
 * tables here), keep a transaction open across calls, or return libpq codes to callers. */
#include "store/postgres/pg_int.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

/* ---- prepared statements ------------------------------------------------- */

/* The results statement's pieces: the insert into attempts, and the batch's attempts
 * (the CTE a, their arrays unnested once: the statement reads them three or four times,
 * and an unnest of nine arrays costs ~2 µs a row, more than reading a row back). */
#define ATTEMPTS_INSERT \
	" INSERT INTO outboxd.attempts(delivery_id, n, kind, started_at, duration_ms, code," \
	"  message, cause, instance, not_sent)"
#define ATTEMPTS_CTE \
	" a AS MATERIALIZED (" \
	" SELECT * FROM unnest($14::text[], $15::int4[], $16::text[], $17::int8[], $18::int8[]," \
	"  $19::int4[], $20::text[], $21::text[], $24::bool[])" \
	"  AS u(delivery_id, n, kind, started_at, duration_ms, code, message, cause," \
	"  not_sent)),"
#define ATTEMPTS_FROM " FROM a"

/* The results statement. A result applies only while this owner ($13) holds the lease
 * on the delivery's queue row (schema/020_queue.sql): qd deletes the rows of those
 * delivered, qu updates the others' (a retry, a death), each re-checking the lease on
 * the row's latest version as it locks it, and upd then writes the delivery (no index of
 * deliveries names a column it sets, so the update is HOT); the attempts of the results
 * that applied are inserted in the same statement. $22: the
 * results' delay_actions (added last so the other parameters keep their numbers).
 * prom: per-key ordering, a delivery done (delivered or dead) lets the next one of its key
 * go when that one is parked waiting its turn. lost: a round whose lease was lost changes
 * nothing but its history, its attempts recorded after the delivery's last one (another
 * round may hold their numbers). ATT_END: how the insert of the applied results' attempts
 * ends; MOVED: the part that records those whose number was taken, or nothing. */
#define RESULTS_SQL(ATT_END, MOVED) \
	"WITH r AS (" \
	" SELECT * FROM unnest($1::text[], $2::text[], $3::bool[], $4::int4[], $5::int4[]," \
	"  $6::int8[], $7::int8[], $8::bool[], $9::int4[], $10::text[], $11::text[]," \
	"  $22::int4[], $23::bool[])" \
	"  AS u(id, status, replay, attempt_count, retry_count, next_attempt_at," \
	"  processed_at, keep_error, last_code, last_message, last_cause, delay_actions," \
	"  dead_letter))," \
	ATTEMPTS_CTE \
	" qd AS (" \
	" DELETE FROM outboxd.queue q USING r" \
	" WHERE q.id = r.id AND q.lease_owner = $13 AND r.status = 'PROCESSED'" \
	" RETURNING q.id)," \
	" qu AS (" \
	" UPDATE outboxd.queue q SET status = r.status, attempt_count = r.attempt_count," \
	"  next_attempt_at = r.next_attempt_at, lease_owner = NULL, lease_until = NULL," \
	"  failing_since = CASE WHEN r.status = 'FAILED'" \
	"   THEN COALESCE(q.failing_since, $12) END" \
	" FROM r WHERE q.id = r.id AND q.lease_owner = $13 AND r.status <> 'PROCESSED'" \
	" RETURNING q.id)," \
	" upd AS (" \
	" UPDATE outboxd.deliveries d SET status = r.status, replay = r.replay," \
	"  attempt_count = r.attempt_count, retry_count = r.retry_count," \
	"  next_attempt_at = r.next_attempt_at, processed_at = r.processed_at," \
	"  last_code = CASE WHEN r.keep_error THEN d.last_code ELSE r.last_code END," \
	"  last_message = CASE WHEN r.keep_error THEN d.last_message ELSE r.last_message END," \
	"  last_cause = CASE WHEN r.keep_error THEN d.last_cause ELSE r.last_cause END," \
	"  lease_owner = NULL, lease_until = NULL, delay_actions = r.delay_actions," \
	"  failing_since = CASE WHEN r.status = 'FAILED'" \
	"   THEN COALESCE(d.failing_since, $12) END," \
	"  dead_letter_pending = d.dead_letter_pending OR r.dead_letter," \
	"  updated_at = $12" \
	" FROM r JOIN (SELECT id FROM qd UNION ALL SELECT id FROM qu) k ON k.id = r.id" \
	" WHERE d.id = r.id" \
	" RETURNING d.id, d.subscription_id, d.order_key, d.status, d.next_attempt_at)," \
	" prom AS (" \
	" UPDATE outboxd.queue w SET blocked = 0, next_attempt_at = $12" \
	" FROM (SELECT * FROM upd WHERE order_key IS NOT NULL" \
	"  AND (status = 'PROCESSED' OR next_attempt_at IS NULL)) u," \
	" LATERAL (SELECT x.id, x.blocked FROM outboxd.queue x" \
	"  WHERE x.subscription_id = u.subscription_id AND x.order_key = u.order_key" \
	"  AND x.id > u.id ORDER BY x.id LIMIT 1) n" \
	" WHERE w.id = n.id AND n.blocked = 2)," \
	" att AS (" \
	ATTEMPTS_INSERT \
	" SELECT a.delivery_id, a.n, a.kind, a.started_at, a.duration_ms, a.code," \
	"  a.message, a.cause, $13, a.not_sent" \
	ATTEMPTS_FROM \
	" WHERE a.delivery_id IN (SELECT id FROM upd)" \
	ATT_END ")," \
	MOVED \
	" lost AS (" \
	ATTEMPTS_INSERT \
	" SELECT a.delivery_id, (SELECT COALESCE(max(x.n), 0) FROM outboxd.attempts x" \
	"  WHERE x.delivery_id = a.delivery_id)" \
	"  + row_number() OVER (PARTITION BY a.delivery_id ORDER BY a.n)," \
	"  a.kind, a.started_at, a.duration_ms, a.code, a.message, a.cause, $13, a.not_sent" \
	ATTEMPTS_FROM \
	" WHERE a.delivery_id NOT IN (SELECT id FROM upd)" \
	" AND EXISTS (SELECT 1 FROM outboxd.deliveries d WHERE d.id = a.delivery_id)" \
	" ON CONFLICT (delivery_id, n) DO NOTHING)," \
	RESULTS_COUNTS \
	" SELECT count(*) FROM upd"

/* The results statement's per-minute attempt counts and newest failure per subscription
 * (/v1/stats and the console's series read them, not the attempts): cs, the batch's
 * attempts with their deliveries' subscriptions (from upd; a lost result's from its
 * delivery, looked up only for those), added to this owner's rows, which no other
 * instance writes, so instances never wait on each other's counts. A row is written once
 * per statement (GROUP BY, DISTINCT ON), in key order. */
#define TEXT_OF_(x) #x
#define TEXT_OF(x) TEXT_OF_(x)
#define MINUTE_MS_SQL TEXT_OF(STORE_MINUTE_MS) /* a minute of the counts, as SQL text */
#define RESULTS_COUNTS \
	" cs AS (" \
	" SELECT a.started_at, a.duration_ms, a.code, a.message, u.subscription_id" \
	ATTEMPTS_FROM " JOIN upd u ON u.id = a.delivery_id" \
	" UNION ALL" \
	" SELECT a.started_at, a.duration_ms, a.code, a.message, d.subscription_id" \
	ATTEMPTS_FROM " JOIN outboxd.deliveries d ON d.id = a.delivery_id" \
	" WHERE a.delivery_id NOT IN (SELECT id FROM upd))," \
	" cnt AS (" \
	" INSERT INTO outboxd.attempt_minutes AS m(minute, subscription_id, duration_ms," \
	"  owner, succeeded, client_error, server_error)" \
	" SELECT started_at - started_at % " MINUTE_MS_SQL ", subscription_id, duration_ms, $13," \
	"  count(*) FILTER (WHERE code BETWEEN 200 AND 299)," \
	"  count(*) FILTER (WHERE code BETWEEN 400 AND 499)," \
	"  count(*) FILTER (WHERE code NOT BETWEEN 200 AND 299 AND code NOT BETWEEN 400 AND 499)" \
	" FROM cs GROUP BY 1, 2, 3 ORDER BY 1, 2, 3" \
	" ON CONFLICT (minute, subscription_id, duration_ms, owner) DO UPDATE SET" \
	"  succeeded = m.succeeded + EXCLUDED.succeeded," \
	"  client_error = m.client_error + EXCLUDED.client_error," \
	"  server_error = m.server_error + EXCLUDED.server_error)," \
	" errs AS (" \
	" INSERT INTO outboxd.attempt_errors AS x(subscription_id, owner, at, code, message)" \
	" SELECT DISTINCT ON (subscription_id) subscription_id, $13, started_at, code, message" \
	" FROM cs WHERE code NOT BETWEEN 200 AND 299" \
	" ORDER BY subscription_id, started_at DESC" \
	" ON CONFLICT (subscription_id, owner) DO UPDATE SET at = EXCLUDED.at," \
	"  code = EXCLUDED.code, message = EXCLUDED.message WHERE EXCLUDED.at >= x.at)"

/* An attempt number taken already (by a round whose lease was lost, recorded first):
 * after the delivery's last one instead, so every request sent stays in the history. */
#define RESULTS_MOVED \
	" moved AS (" \
	ATTEMPTS_INSERT \
	" SELECT a.delivery_id, GREATEST((SELECT COALESCE(max(x.n), 0) FROM outboxd.attempts x" \
	"  WHERE x.delivery_id = a.delivery_id), (SELECT COALESCE(max(t.n), 0) FROM att t" \
	"  WHERE t.delivery_id = a.delivery_id))" \
	"  + row_number() OVER (PARTITION BY a.delivery_id ORDER BY a.n)," \
	"  a.kind, a.started_at, a.duration_ms, a.code, a.message, a.cause, $13, a.not_sent" \
	ATTEMPTS_FROM \
	" WHERE a.delivery_id IN (SELECT id FROM upd)" \
	" AND (a.delivery_id, a.n) NOT IN (SELECT delivery_id, n FROM att)" \
	" ON CONFLICT (delivery_id, n) DO NOTHING),"

const char *const pg_sql_of[S_COUNT] = {
	[S_PING] = "SELECT 1",
	/* One statement, one implicit transaction: the events (a repeated idempotency key
	 * is skipped, the first one in the batch wins), the deliveries of the events that
	 * were inserted, and for the relay the outbox rows it moved. RETURNING says which
	 * events were new. */
	[S_INGEST] = INGEST_SQL(
		"ev_plain AS (" INGEST_EVENTS_SQL("u.source_event_id IS NULL", "") "),"
		" ev_keyed AS (" INGEST_EVENTS_SQL("u.source_event_id IS NOT NULL",
			" ON CONFLICT (source, source_event_id) WHERE source_event_id IS NOT NULL"
			" DO NOTHING") "),"
		" ev AS (SELECT id FROM ev_plain UNION ALL SELECT id FROM ev_keyed)"),
	/* A batch in which no event has an idempotency key: one plain insert. */
	[S_INGEST_UNKEYED] = INGEST_SQL("ev AS (" INGEST_EVENTS_SQL("true", "") ")"),
	/* A spool replay: a stored id is a duplicate as well (any unique key). */
	[S_INGEST_REPLAY] = INGEST_SQL(
		"ev AS (" INGEST_EVENTS_SQL("true", " ON CONFLICT DO NOTHING") ")"),
	[S_DUP_LOOKUP] =
		"SELECT k.ord, e.id FROM unnest($1::text[], $2::text[]) WITH ORDINALITY"
		" AS k(source, source_event_id, ord)"
		" JOIN outboxd.events e ON e.source = k.source"
		" AND e.source_event_id = k.source_event_id",
	[S_OUTBOX_TAKE] =
		"SELECT id, event_type, source, source_event_id, partition_key, payload,"
		" content_type, created_at FROM outboxd.outbox ORDER BY id LIMIT $1"
		" FOR UPDATE SKIP LOCKED",
	/* Rows another instance is claiming right now are skipped, not waited for. The
	 * pick is a materialized CTE, run once: as "WHERE id IN (SELECT ... LIMIT $4 FOR
	 * UPDATE SKIP LOCKED)" the planner may put the subquery inside a nested-loop semi
	 * join and run it again for every row it looks at, each run skipping the rows the
	 * statement has just updated, so the claim leased far more than $4 (all 2,000 due
	 * rows for a LIMIT 5 with hash joins, hash aggregation, sorts and materialization
	 * disabled; seen in practice while ANALYZE ran). The update finds the picked rows
	 * by key (= ANY of their ids) rather than by a join with pick: the planner sizes a
	 * join by its guess of the pick's rows, and a guess of thousands (a LIMIT it cannot
	 * see, on a large table) made it hash-join pick with a scan of the whole table, and
	 * the events with a walk of their whole key index: 100 rows leased in 132 ms
	 * instead of 8 on a 120,000-delivery store. */
	[S_CLAIM] =
		"WITH pick AS MATERIALIZED (SELECT id FROM outboxd.queue d"
		"  WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL"
		"  AND next_attempt_at <= $3 AND " ORDERING_SQL
		"  ORDER BY next_attempt_at LIMIT $4 FOR UPDATE SKIP LOCKED),"
		" c AS ("
		" UPDATE outboxd.queue q SET lease_owner = $1, lease_until = $2"
		" FROM outboxd.deliveries d"
		" WHERE q.id = ANY (ARRAY(SELECT id FROM pick)) AND d.id = q.id"
		" RETURNING d.id, d.event_id, d.subscription_id, d.status, d.replay,"
		"  d.attempt_count, d.retry_count, q.next_attempt_at, d.delay_actions,"
		"  d.starts_scheduled)"
		" SELECT c.id, c.event_id, c.subscription_id, c.status, c.replay, c.attempt_count,"
		" c.retry_count, e.event_type, e.content_type, e.payload, e.created_at,"
		" e.traceparent, c.delay_actions, e.source, e.source_event_id, e.partition_key,"
		" c.starts_scheduled, e.webhook_id"
		" FROM c JOIN outboxd.events e ON e.id = c.event_id"
		" ORDER BY c.next_attempt_at, c.id",
	/* Deliveries waiting for an earlier one of their key do not count: the claim
	 * would not take them (one row, NULL when nothing is pending). */
	[S_NEXT_DUE] =
		"SELECT (SELECT next_attempt_at FROM outboxd.queue d"
		" WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL AND " ORDERING_SQL
		" ORDER BY next_attempt_at LIMIT 1)",
	/* Results (RESULTS_SQL, above); an attempt number already taken is recorded after
	 * the delivery's last one. */
	[S_RESULTS] = RESULTS_SQL(" ON CONFLICT (delivery_id, n) DO NOTHING"
				  " RETURNING delivery_id, n", RESULTS_MOVED),
	/* The same without a speculative insert per attempt: a number taken already makes it
	 * fail as a whole (unique_violation), and S_RESULTS runs instead. */
	[S_RESULTS_FAST] = RESULTS_SQL("", ""),
	[S_LEASE_RENEW] =
		"UPDATE outboxd.queue d SET lease_until = u.until"
		" FROM unnest($1::text[], $2::int8[]) WITH ORDINALITY AS u(id, until, i)"
		" WHERE d.id = u.id AND d.lease_owner = $3 RETURNING u.i",
	/* This and the cleanups below pick their rows once, in a materialized CTE, as the
	 * claim does (S_CLAIM says why). */
	[S_REAP] =
		"WITH pick AS MATERIALIZED (SELECT id FROM outboxd.queue"
		"  WHERE lease_until IS NOT NULL AND lease_until < $1 FOR UPDATE SKIP LOCKED)"
		" UPDATE outboxd.queue d SET lease_owner = NULL, lease_until = NULL"
		" FROM pick WHERE d.id = pick.id",
	[S_RELEASE_ALL] =
		"UPDATE outboxd.queue SET lease_owner = NULL, lease_until = NULL"
		" WHERE lease_until IS NOT NULL AND (lease_owner = $1 OR lease_until < $2)",
	[S_EVENT_GET] =
		"SELECT id, event_type, source, source_event_id, partition_key, content_type,"
		" payload, created_at, webhook_id, envelope, traceparent FROM outboxd.events"
		" WHERE id = $1",
	[S_EVENT_DELIVERIES] =
		"SELECT " DELIVERY_COLUMNS DELIVERY_FROM " WHERE d.event_id = $1"
		" ORDER BY d.created_at, d.id",
	[S_DELIVERY_GET] = "SELECT " DELIVERY_COLUMNS DELIVERY_FROM " WHERE d.id = $1",
	[S_ATTEMPTS] =
		"SELECT n, kind, started_at, duration_ms, code, message, cause, not_sent"
		" FROM outboxd.attempts WHERE delivery_id = $1 ORDER BY n",
	/* The queue rows first, then the deliveries, as results lock them. */
	[S_REPLAY_CHECK] =
		"WITH ql AS MATERIALIZED (SELECT id, lease_until FROM outboxd.queue"
		"  WHERE id = ANY($1::text[]) FOR UPDATE)"
		" SELECT d.id, d.status, ql.lease_until FROM outboxd.deliveries d"
		" LEFT JOIN ql ON ql.id = d.id WHERE d.id = ANY($1::text[]) FOR UPDATE OF d",
	/* A delivered one enters the queue again; a dead one's row is due again. */
	[S_REPLAY_SET] =
		"WITH upd AS ("
		" UPDATE outboxd.deliveries SET status = 'NEW', replay = true, next_attempt_at = $2,"
		" processed_at = NULL, lease_owner = NULL, lease_until = NULL, delay_actions = 0,"
		" blocked = 0, updated_at = $2"
		" WHERE id = ANY($1::text[])"
		" RETURNING id, subscription_id, event_type, created_at, attempt_count, order_key,"
		"  failing_since)"
		" INSERT INTO outboxd.queue AS q(id, subscription_id, event_type, created_at, status,"
		"  attempt_count, next_attempt_at, order_key, failing_since)"
		" SELECT id, subscription_id, event_type, created_at, 'NEW', attempt_count, $2,"
		"  order_key, failing_since FROM upd"
		" ON CONFLICT (id) DO UPDATE SET status = 'NEW', next_attempt_at = $2,"
		"  lease_owner = NULL, lease_until = NULL, blocked = 0",
	[S_NOTIFY] = "SELECT pg_notify('" NOTIFY_CHANNEL "', '')",
	[S_PURGE_CHECK] =
		"WITH ql AS MATERIALIZED (SELECT next_attempt_at, lease_until FROM outboxd.queue"
		"  WHERE id = $1 FOR UPDATE)"
		" SELECT d.status, ql.next_attempt_at, ql.lease_until, d.event_id"
		" FROM outboxd.deliveries d LEFT JOIN ql ON true WHERE d.id = $1 FOR UPDATE OF d",
	[S_DELIVERY_DELETE] = "DELETE FROM outboxd.deliveries WHERE id = $1",
	[S_EVENT_DELETE_ORPHAN] =
		"DELETE FROM outboxd.events WHERE id = $1"
		" AND NOT EXISTS (SELECT 1 FROM outboxd.deliveries WHERE event_id = $1)",
	/* From the run's cursor ($3, $4: the last delivery a batch deleted) on, in the order
	 * of deliveries_created: each batch reads on from where the last one stopped. A pick
	 * without order read the table from its start each time, through the dead rows of the
	 * batches before (until a vacuum): 100 ms for the first batch of a large store's
	 * cleanup, 670 ms for the 300th. */
	[S_CLEANUP_CHUNK] =
		"WITH pick AS MATERIALIZED (SELECT id FROM outboxd.deliveries"
		"  WHERE (created_at, id) > ($3, $4::text) AND status = 'PROCESSED'"
		"  AND lease_until IS NULL AND processed_at <= $2"
		"  ORDER BY created_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)"
		" DELETE FROM outboxd.deliveries d WHERE d.id = ANY (ARRAY(SELECT id FROM pick))"
		" RETURNING d.event_id, d.created_at, d.id",
	[S_EVENTS_DELETE_ORPHANS] =
		"DELETE FROM outboxd.events e WHERE e.id = ANY($1::text[])"
		" AND NOT EXISTS (SELECT 1 FROM outboxd.deliveries d WHERE d.event_id = e.id)",
	/* Events that never had a delivery (no subscription wanted them), kept as long as
	 * delivered ones ($3, the retention's cut) so that an operator can still find out
	 * why an event went nowhere. The next $1 events after $2 in id order, and those of
	 * them created by $3 without a delivery deleted: the last one looked at, how many
	 * were. A sweep of the whole table in
	 * one statement found nothing to delete and read every event each run (0.45 s at
	 * 500,000), holding up the janitor. */
	[S_SWEEP_ORPHANS] =
		"WITH scan AS MATERIALIZED (SELECT id FROM outboxd.events WHERE id > $2::text"
		"  ORDER BY id LIMIT $1),"
		" gone AS (DELETE FROM outboxd.events e WHERE e.id = ANY (ARRAY(SELECT id FROM scan))"
		"  AND e.created_at <= $3"
		"  AND NOT EXISTS (SELECT 1 FROM outboxd.deliveries d WHERE d.event_id = e.id)"
		"  RETURNING 1)"
		" SELECT (SELECT max(id) FROM scan), (SELECT count(*) FROM scan),"
		" (SELECT count(*) FROM gone)",
	[S_SUB_INSERT] =
		"INSERT INTO outboxd.subscriptions(id, name, config, enabled, created_at,"
		" updated_at, ordering) VALUES ($1, $2, $3, $4, $5, $6, $7)",
	[S_SUB_UPDATE] =
		"UPDATE outboxd.subscriptions SET name = $2, config = $3, enabled = $4,"
		" updated_at = $5, ordering = $6 WHERE id = $1",
	[S_SUB_DELETE] = "DELETE FROM outboxd.subscriptions WHERE id = $1",
	[S_SUB_GET] =
		"SELECT id, name, config, enabled, created_at, updated_at, ordering"
		" FROM outboxd.subscriptions WHERE id = $1",
	[S_SUB_LIST] =
		"SELECT id, name, config, enabled, created_at, updated_at, ordering"
		" FROM outboxd.subscriptions ORDER BY created_at, id",
};

/* ---- state --------------------------------------------------------------- */

static const char *const role_names[ROLE_COUNT] = {"ingest", "dispatch", "results", "janitor",
						   "api"};

struct pg *pg_of(store *st)
{
	return st->priv;
}

/* ---- outage bookkeeping -------------------------------------------------- */

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

void pg_note_down(struct pg *pg, const char *what, const char *msg)
{
	char line[512];

	if (atomic_exchange(&pg->down, 1) == 0)
		log_error("postgres: database unavailable (%s: %s); calls answer \"store "
			  "unavailable\" and reconnect with backoff until it is back",
			  what, one_line(msg, line, sizeof(line)));
}

void pg_note_up(struct pg *pg)
{
	if (atomic_exchange(&pg->down, 0) == 1) {
		atomic_fetch_add(&pg->epoch, 1);
		log_info("postgres: database reachable again");
	}
}

/* ---- connections --------------------------------------------------------- */

/* Opens a connection. The DSN's own settings override the defaults given before it
 * (libpq expands dbname in place): a bounded connect, TCP keepalives so a vanished server
 * is noticed, and a name operators can find in pg_stat_activity. */
/* Server notices (and the FATAL a server sends to idle sessions as it shuts down) go to
 * the log instead of libpq's default, stderr: the loss itself is logged by pg_note_down. */
static void notice_cb(void *arg, const char *message)
{
	char line[512];

	log_debug("postgres: %s", one_line(message, line, sizeof(line)));
}

PGconn *pg_connect_dsn(const char *dsn)
{
	static const char *const keys[] = {"connect_timeout", "keepalives_idle",
		"keepalives_interval", "keepalives_count", "application_name", "dbname", NULL};
	const char *values[] = {"5", "30", "10", "3", "outboxd", dsn, NULL};
	PGconn *conn = PQconnectdbParams(keys, values, 1);

	if (conn)
		PQsetNoticeProcessor(conn, notice_cb, NULL);
	return conn;
}

/* Runs a session command (a SET, DISCARD PLANS); a refusal is logged, and the connection
 * serves as is. */
static void conn_set(PGconn *conn, const char *sql)
{
	PGresult *r = PQexec(conn, sql);

	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		log_warn("postgres: %s", PQresultErrorMessage(r));
	PQclear(r);
}

/* The plans of the hot sessions: ingest, dispatch (claims) and results. Their statements
 * run thousands of times a second, and planning the claim takes about 0.7 ms and the
 * results statement about 2 ms, so each session keeps one generic plan. Left to choose
 * (plan_cache_mode auto), PostgreSQL compares a rebuilt plan with the custom plans it
 * made first, on a small table, and from then on plans every call afresh (every call of
 * nine after a DISCARD PLANS did). But a plan is made for the table sizes of its moment,
 * and a store starts empty: the results statement's plan made on a table of a few
 * hundred deliveries scans the whole table (hash join), and kept it while the table grew
 * to 100,000 rows until an autoanalyze happened to replace it (two runs of 100,000
 * events in eight at 5,200-6,000 deliveries/s instead of 7,200-8,800, the server at
 * 223-261 us per delivery instead of 141-173); the claim's, made on 220 events, found
 * the rows it leased by reading the whole of both tables (60 ms a claim of 100 at 11,000
 * deliveries). So these sessions rebuild their plans (DISCARD PLANS) each time the rows
 * this instance has written double (pg->written: the events and deliveries it inserted,
 * the deliveries it leased), from REPLAN_FIRST on: a plan then never meets tables more
 * than about twice the size it was made for, as far as this instance grew them.
 * Autoanalyze's invalidations rebuild it as well, which covers what other instances
 * write. Their statements find rows by key, or walk an index in order (the claim:
 * plans_of_role), so the generic plan is the right one at any size.
 * docs/performance.md has the measurements. */
#define REPLAN_FIRST 1000

static int plans_follow_growth(enum role role)
{
	return role == ROLE_INGEST || role == ROLE_DISPATCH || role == ROLE_RESULTS;
}

/* The claim's plan (S_CLAIM, S_NEXT_DUE: the dispatch session's only statements) is the
 * walk of the due index in next_attempt_at order, stopping after $4 rows: it reads about
 * as many entries as it leases, whatever the table holds. A generic plan cannot see $4
 * (PostgreSQL guesses a tenth of the rows), and a plan made on statistics that had 3
 * deliveries due (against 79,588 when it ran) chose instead to read every due row
 * through a bitmap scan and sort them, for each claim: 35 ms a claim of 100 in a drain
 * of 100,000, the drain three times slower, two runs in seven of bench/backlog.sh. So
 * that session has no bitmap scans and no sorts to choose from (a sort still runs where
 * nothing else gives the order, as the claim's final ORDER BY). Disabling a plan type
 * adds a penalty to its cost, which would push the statement past the server's
 * jit_above_cost and compile every claim (about 500 ms a claim), so JIT is off there; it
 * is off on the ingest and results sessions as well, whose statements run for
 * milliseconds and could only lose by it. The results statement has no sorts to choose
 * from either: when a delivery of an ordered key is done it looks up the next one of the
 * key in id order (prom), which without sorts only the ordering index gives; on
 * statistics taken while every delivery was done it read the status index whole and
 * sorted it for each such result instead (9.6 s for 100 results on a copy with 96,000
 * ordered deliveries due, 10.6 ms without sorts). Its own sorts (the counts' upsert
 * order, the newest error per subscription) still run: nothing else gives their order. */
static void plans_of_role(PGconn *conn, enum role role)
{
	if (!plans_follow_growth(role))
		return;
	conn_set(conn, "SET plan_cache_mode = force_generic_plan");
	conn_set(conn, "SET jit = off");
	if (role == ROLE_DISPATCH)
		conn_set(conn, "SET enable_bitmapscan = off");
	if (role == ROLE_DISPATCH || role == ROLE_RESULTS)
		conn_set(conn, "SET enable_sort = off");
}

static void conn_close(struct pgconn *c)
{
	if (c->conn)
		PQfinish(c->conn);
	c->conn = NULL;
	c->prepared = 0;
}

/* The connection broke, under a call or while idle (conn_closed_while_idle): drop it;
 * the next connect is at once (and starts the backoff if that fails). */
static void conn_lost(struct pg *pg, struct pgconn *c, const char *msg)
{
	char line[512];

	if (c->epoch == atomic_load(&pg->epoch))
		pg_note_down(pg, role_names[c->role], msg);
	else
		log_debug("postgres: %s connection from before the last outage closed (%s)",
			  role_names[c->role], one_line(msg, line, sizeof(line)));
	conn_close(c);
}

/* Whether an idle connection was closed by the server while nobody used it (a restart,
 * an idle timeout, pg_terminate_backend): its goodbye already waits on the socket, so it
 * is read now, one poll(), and the call reconnects rather than fail its first statement
 * on a connection that is known dead before the statement was sent. */
static int conn_closed_while_idle(PGconn *conn)
{
	struct pollfd p = {.fd = PQsocket(conn), .events = POLLIN};

	if (PQtransactionStatus(conn) != PQTRANS_IDLE)
		return 0;
	/* a read takes what is there (the server's FATAL message), the next finds the end */
	for (int reads = 0; reads < 4 && poll(&p, 1, 0) > 0; reads++)
		if (!PQconsumeInput(conn) || PQstatus(conn) != CONNECTION_OK)
			return 1;
	return 0;
}

/* Makes sure c has a working connection (c->mu held). STORE_UNAVAILABLE at once while
 * the backoff after a failed attempt runs. */
static int conn_ready(struct pg *pg, struct pgconn *c)
{
	int64_t now = clock_mono_ms();
	PGconn *conn;

	if (c->conn && PQstatus(c->conn) == CONNECTION_OK) {
		if (!conn_closed_while_idle(c->conn))
			return STORE_OK;
		conn_lost(pg, c, PQerrorMessage(c->conn));
	}
	conn_close(c);
	if (now < c->retry_at)
		return STORE_UNAVAILABLE;
	conn = pg_connect_dsn(pg->dsn);
	if (PQstatus(conn) != CONNECTION_OK) {
		pg_note_down(pg, "connect", PQerrorMessage(conn));
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
	if (c->role == ROLE_DISPATCH || c->role == ROLE_RESULTS)
		conn_set(conn, "SET synchronous_commit = off");
	plans_of_role(conn, c->role);
	pg_note_up(pg);
	c->conn = conn;
	c->prepared = 0;
	c->replan_at = REPLAN_FIRST;
	c->timeout_ms = -1;
	c->backoff_ms = 0;
	c->retry_at = 0;
	c->epoch = atomic_load(&pg->epoch);
	return STORE_OK;
}

/* Locks a free connection of the API's (API_CONNS), the first one free in their order:
 * the others are opened only when calls overlap. When all are busy, waits for one,
 * a different one each time. */
static struct pgconn *api_lock(struct pg *pg)
{
	for (unsigned i = 0; i < API_CONNS; i++) {
		struct pgconn *c = &pg->conns[ROLE_API + i];
		if (pthread_mutex_trylock(&c->mu) == 0)
			return c;
	}
	struct pgconn *c = &pg->conns[ROLE_API + atomic_fetch_add(&pg->api_next, 1) % API_CONNS];
	pthread_mutex_lock(&c->mu);
	return c;
}

/* Locks the role's connection and makes sure it works: returns it, or NULL with *rc set
 * (and nothing locked). */
struct pgconn *pg_take(struct pg *pg, enum role role, int *rc)
{
	struct pgconn *c = &pg->conns[role];

	if (role == ROLE_API)
		c = api_lock(pg);
	else
		pthread_mutex_lock(&c->mu);
	*rc = conn_ready(pg, c);
	if (*rc != STORE_OK) {
		pthread_mutex_unlock(&c->mu);
		return NULL;
	}
	if (role == ROLE_API) {
		/* the store's read timeout (store_set_read_timeout), as it is now */
		int64_t timeout = atomic_load(&pg->st->read_timeout_ms);
		if (c->timeout_ms != timeout) {
			char sql[64];
			snprintf(sql, sizeof(sql), "SET statement_timeout = %lld", (long long)timeout);
			conn_set(c->conn, sql);
			c->timeout_ms = timeout;
		}
	}
	if (plans_follow_growth(role)) {
		uint64_t written = atomic_load_explicit(&pg->written, memory_order_relaxed);

		if (written >= c->replan_at) {
			c->replan_at = written * 2;
			conn_set(c->conn, "DISCARD PLANS");
		}
	}
	return c;
}

/* Unlocks c; a transaction an error path left open is rolled back first. */
void pg_give(struct pgconn *c)
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

#define SHORTAGE_OVER_MS 5000 /* over once a write succeeds with no failure for this long */

/* Maps a failed result to a store code, logging what deserves it. A lost connection,
 * a shutting-down server, a serialization failure or a full disk mean "try again later". */
int pg_fail_code(struct pg *pg, struct pgconn *c, PGresult *res, const char *what)
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
	/* query_canceled on an API session: its statement_timeout (the store's read timeout) */
	if (strcmp(state, "57014") == 0 && c->role == ROLE_API) {
		log_warn("postgres: %s (in: %.60s)", one_line(msg, line, sizeof(line)), what);
		return STORE_TIMEOUT;
	}
	if (strncmp(state, "53", 2) == 0) { /* insufficient resources: until there are */
		long n;
		int64_t span_ms;
		switch (log_burst_hit(&pg->short_of, clock_mono_ms(), LOG_BURST_EVERY_MS, &n,
				      &span_ms)) {
		case LOG_BURST_START:
			log_error("postgres: %s [%s] (in: %.60s). Until the server has it again, "
				  "ingest answers 503 (or goes to the spool, when one is set) and "
				  "delivery results wait in memory; logged again once a minute "
				  "while it lasts", one_line(msg, line, sizeof(line)), state, what);
			break;
		case LOG_BURST_STILL:
			log_error("postgres: still: %s [%s] (%ld statements failed so in the last "
				  "%.0f s)", one_line(msg, line, sizeof(line)), state, n,
				  (double)span_ms / 1000.0);
			break;
		case LOG_BURST_QUIET:
			break;
		}
		return STORE_UNAVAILABLE;
	}
	if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 ||
	    strcmp(state, "55P03") == 0 || strcmp(state, "57014") == 0) {
		log_warn("postgres: %s (in: %.60s)", one_line(msg, line, sizeof(line)), what);
		return STORE_UNAVAILABLE;
	}
	log_error("postgres: %s [%s] (in: %.80s)", one_line(msg, line, sizeof(line)), state, what);
	return STORE_ERROR;
}

void pg_writes_ok(struct pg *pg)
{
	int64_t span_ms;
	long n = log_burst_over(&pg->short_of, clock_mono_ms(), SHORTAGE_OVER_MS, &span_ms);
	if (n)
		log_info("postgres: writes succeed again: %ld statements failed for want of a "
			 "server resource over %.1f s", n, (double)span_ms / 1000.0);
}

/* ---- open and close ------------------------------------------------------ */

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

static void pg_close(store *st)
{
	struct pg *pg = pg_of(st);

	if (!pg)
		return;
	pthread_mutex_lock(&pg->listen_mu);
	pg_listener_stop(pg);
	pthread_mutex_unlock(&pg->listen_mu);
	for (int i = 0; i < PG_CONNS; i++) {
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
	for (int i = 0; i < PG_CONNS; i++) {
		pthread_mutex_init(&pg->conns[i].mu, NULL);
		pg->conns[i].role = i < ROLE_API ? (enum role)i : ROLE_API;
	}
	pthread_mutex_init(&pg->listen_mu, NULL);
	pg->st = st;
	st->priv = pg;

	/* The jobs connection runs the migrations and stays open. */
	conn = pg_connect_dsn(dsn);
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
	pg->conns[ROLE_JANITOR].conn = conn;
	return STORE_OK;
}

static int pg_ping(store *st)
{
	struct pg *pg = pg_of(st);
	struct pgconn *c;
	int rc;

	if (!(c = pg_take(pg, ROLE_API, &rc)))
		return rc;
	rc = pg_run_done(pg, c, S_PING, NULL, NULL);
	pg_give(c);
	return rc;
}

/* ---- the listener -------------------------------------------------------- */

const struct store_methods store_pg_methods = {
	.name = "postgres",
	.dsn_prefix = "postgres://",
	.concurrent_writers = 3,
	.open = pg_open,
	.close = pg_close,
	.ping = pg_ping,
	.ingest = pg_ingest,
	.relay_outbox = pg_relay_outbox,
	.claim_due = pg_claim_due,
	.next_due = pg_next_due,
	.record_results = pg_record_results,
	.attempt_counts_prune = pg_attempt_counts_prune,
	.dead_letters = pg_dead_letters,
	.dead_letters_done = pg_dead_letters_done,
	.reap_leases = pg_reap_leases,
	.order_sweep = pg_order_sweep,
	.release_all = pg_release_all,
	.event_get = pg_event_get,
	.event_deliveries = pg_event_deliveries,
	.delivery_get = pg_delivery_get,
	.delivery_attempts = pg_delivery_attempts,
	.deliveries_list = pg_deliveries_list,
	.replay = pg_replay,
	.dlq_purge = pg_dlq_purge,
	.cleanup_batch = pg_cleanup_batch,
	.cleanup_sweep = pg_cleanup_sweep,
	.deliveries_count = pg_deliveries_count,
	.events_list = pg_events_list,
	.dlq_purge_matching = pg_dlq_purge_matching,
	.job_create = pg_job_create,
	.job_update = pg_job_update,
	.job_get = pg_job_get,
	.jobs_running = pg_jobs_running,
	.jobs_list = pg_jobs_list,
	.audit_append = pg_audit_append,
	.audit_list = pg_audit_list,
	.token_create = pg_token_create,
	.token_delete = pg_token_delete,
	.token_list = pg_token_list,
	.token_touch = pg_token_touch,
	.stats = pg_stats,
	.attempt_series = pg_attempt_series,
	.sub_create = pg_sub_create,
	.sub_update = pg_sub_update,
	.sub_delete = pg_sub_delete,
	.sub_get = pg_sub_get,
	.sub_list = pg_sub_list,
	.sub_page = pg_sub_page,
	.event_types = pg_event_types,
	.sub_config_swap = pg_sub_config_swap,
	.sub_scrub = pg_sub_scrub,
	.meta_swap = pg_meta_swap,
	.leases_renew = pg_leases_renew,
	.meta_get = pg_meta_get,
	.copy_read = pg_copy_read,
	.copy_write = pg_copy_write,
	.copy_find = pg_copy_find,
	.copy_check = pg_copy_check,
	.copy_in_use = pg_copy_in_use,
	.on_work = pg_on_work,
	.on_subscriptions_changed = pg_on_subscriptions_changed,
};
