/* store_suite.c: the backend fixtures of the storage conformance suite, its per-test setup
 * and the helpers several of its files share (store_suite.h says what each is for).
 *
 * Only the fixtures know a backend's own API (sqlite3, libpq): they make a fresh database
 * per test and insert outbox rows as an external producer does. Nothing here asserts a
 * store promise; the tests in tests/store/test_store_*.c do. */
#include "store_suite.h"

#include <ftw.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store/backend.h"
#include "util/clock.h"
#include "util/log.h"

/* ---- backend fixtures --------------------------------------------------------------- */

static int always(void)
{
	return 1;
}

static int sqlite_create(struct fixture_db *db)
{
	snprintf(db->dir, sizeof(db->dir), "/tmp/outboxd-store-test-XXXXXX");
	if (!mkdtemp(db->dir))
		return -1;
	/* A missing parent directory is created by the store. */
	snprintf(db->path, sizeof(db->path), "%s/data/outboxd.db", db->dir);
	snprintf(db->dsn, sizeof(db->dsn), "sqlite:%s", db->path);
	return 0;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void sqlite_destroy(struct fixture_db *db)
{
	nftw(db->dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

static int sqlite_producer_insert(struct fixture_db *db, const char *event_type,
				  const char *source, const char *source_event_id,
				  const void *payload, size_t len, int as_text)
{
	sqlite3 *conn = NULL;
	sqlite3_stmt *s = NULL;
	int rc;

	rc = sqlite3_open_v2(db->path, &conn, SQLITE_OPEN_READWRITE, NULL);
	if (rc == SQLITE_OK)
		sqlite3_busy_timeout(conn, 5000);
	if (rc == SQLITE_OK && source)
		rc = sqlite3_prepare_v2(conn, "INSERT INTO outbox(event_type, payload, source,"
					" source_event_id) VALUES (?1, ?2, ?3, ?4)", -1, &s,
					NULL);
	else if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(conn, "INSERT INTO outbox(event_type, payload)"
					" VALUES (?1, ?2)", -1, &s, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(s, 1, event_type, -1, SQLITE_STATIC);
		if (as_text)
			sqlite3_bind_text(s, 2, payload, (int)len, SQLITE_STATIC);
		else
			sqlite3_bind_blob(s, 2, payload, (int)len, SQLITE_STATIC);
		if (source) {
			sqlite3_bind_text(s, 3, source, -1, SQLITE_STATIC);
			sqlite3_bind_text(s, 4, source_event_id, -1, SQLITE_STATIC);
		}
		rc = sqlite3_step(s) == SQLITE_DONE ? SQLITE_OK : SQLITE_ERROR;
	}
	if (rc != SQLITE_OK)
		fprintf(stderr, "producer insert: %s\n", sqlite3_errmsg(conn));
	sqlite3_finalize(s);
	sqlite3_close(conn);
	return rc == SQLITE_OK ? 0 : -1;
}

/* PostgreSQL: each binary of the suite gets one database of its own, on the server named
 * by OUTBOXD_TEST_PG_DSN (a postgres:// URI of a role allowed to create databases, e.g.
 * postgres://outboxd@127.0.0.1:5432/postgres), or else on a server it starts itself
 * (tests/support/harness_pg.h). The store keeps everything in schema outboxd, so each
 * test starts from a dropped schema. */
struct pg_server own_server;          /* running when the binary started its own */
static char pg_admin_dsn[512];        /* where the suite database is created and dropped */
static char pg_suite_dsn[512];
static char pg_suite_db[64];

/* base with its database replaced by name, into out. */
static void dsn_with_db(const char *base, const char *name, char *out, size_t size)
{
	const char *auth = strstr(base, "://");
	const char *path, *query;

	if (!auth) {
		snprintf(out, size, "%s dbname=%s", base, name);
		return;
	}
	path = strchr(auth + 3, '/');
	query = strchr(auth + 3, '?');
	if (!path || (query && path > query))
		path = query ? query : base + strlen(base);
	if (!query)
		query = base + strlen(base);
	snprintf(out, size, "%.*s/%s%s", (int)(path - base), base, name, query);
}

static int pg_exec_on(const char *dsn, const char *sql)
{
	PGconn *conn = PQconnectdb(dsn);
	PGresult *res = NULL;
	int rc = -1;

	if (PQstatus(conn) == CONNECTION_OK) {
		res = PQexec(conn, sql);
		if (PQresultStatus(res) == PGRES_COMMAND_OK)
			rc = 0;
	}
	if (rc)
		fprintf(stderr, "postgres fixture: %s: %s", sql, PQerrorMessage(conn));
	PQclear(res);
	PQfinish(conn);
	return rc;
}

static int pg_available(void)
{
	const char *dsn = getenv("OUTBOXD_TEST_PG_DSN");
	char sql[128];

	if (dsn && *dsn) {
		snprintf(pg_admin_dsn, sizeof(pg_admin_dsn), "%s", dsn);
	} else {
		if (pg_server_start(&own_server) != 0)
			return 0;
		snprintf(pg_admin_dsn, sizeof(pg_admin_dsn), "%s", own_server.admin_dsn);
	}
	snprintf(pg_suite_db, sizeof(pg_suite_db), "outboxd_store_test_%d", (int)getpid());
	snprintf(sql, sizeof(sql), "CREATE DATABASE %s", pg_suite_db);
	if (pg_exec_on(pg_admin_dsn, sql) != 0)
		return 0;
	dsn_with_db(pg_admin_dsn, pg_suite_db, pg_suite_dsn, sizeof(pg_suite_dsn));
	return 1;
}

static void pg_finished(void)
{
	char sql[128];

	if (own_server.pid > 0) {
		pg_server_stop(&own_server);
		return;
	}
	snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s", pg_suite_db);
	pg_exec_on(pg_admin_dsn, sql);
}

static int pg_adverse_plans(struct fixture_db *db, int on);

static int pg_older_schema(struct fixture_db *db, size_t version, const char *sql)
{
	char record[160];

	if (version > postgres_migrations_n ||
	    pg_exec_on(db->dsn, "SET client_min_messages = warning;"
				"DROP SCHEMA IF EXISTS outboxd CASCADE;"
				"CREATE SCHEMA outboxd;"
				"CREATE TABLE outboxd.schema_migrations ("
				" version integer PRIMARY KEY, applied_at bigint NOT NULL)"))
		return -1;
	for (size_t v = 1; v <= version; v++) {
		snprintf(record, sizeof(record),
			 "INSERT INTO outboxd.schema_migrations(version, applied_at)"
			 " VALUES (%zu, %lld)", v, (long long)clock_now_ms());
		if (pg_exec_on(db->dsn, postgres_migrations[v - 1].sql) ||
		    pg_exec_on(db->dsn, record))
			return -1;
	}
	return sql ? pg_exec_on(db->dsn, sql) : 0;
}

static int pg_create(struct fixture_db *db)
{
	if (pg_exec_on(pg_suite_dsn, "SET client_min_messages = warning;"
				     "DROP SCHEMA IF EXISTS outboxd CASCADE") ||
	    pg_adverse_plans(db, 0)) /* a failed test may have left them on */
		return -1;
	snprintf(db->dsn, sizeof(db->dsn), "%s", pg_suite_dsn);
	return 0;
}

/* Hash joins and aggregation, merge joins, sorts and materialization off: what is left
 * are nested loops that run their inner side again for every outer row. */
static int pg_adverse_plans(struct fixture_db *db, int on)
{
	char sql[1024];
	(void)db;
	if (on)
		snprintf(sql, sizeof(sql),
			 "ALTER DATABASE %s SET enable_hashjoin = off;"
			 "ALTER DATABASE %s SET enable_hashagg = off;"
			 "ALTER DATABASE %s SET enable_mergejoin = off;"
			 "ALTER DATABASE %s SET enable_sort = off;"
			 "ALTER DATABASE %s SET enable_material = off",
			 pg_suite_db, pg_suite_db, pg_suite_db, pg_suite_db, pg_suite_db);
	else
		snprintf(sql, sizeof(sql), "ALTER DATABASE %s RESET ALL", pg_suite_db);
	return pg_exec_on(pg_admin_dsn, sql);
}

/* One number from the statistics views, read on a new connection (a fresh snapshot). */
static long long pg_stat_count(struct fixture_db *db, const char *sql)
{
	PGconn *conn = PQconnectdb(db->dsn);
	PGresult *res = NULL;
	long long n = -1;

	if (PQstatus(conn) == CONNECTION_OK)
		res = PQexec(conn, sql);
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
		n = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
	else
		fprintf(stderr, "postgres fixture: %s: %s", sql, PQerrorMessage(conn));
	PQclear(res);
	PQfinish(conn);
	return n;
}

static long long pg_rows_scanned(struct fixture_db *db)
{
	return pg_stat_count(db, "SELECT sum(seq_tup_read) FROM pg_stat_user_tables"
				 " WHERE relid IN ('outboxd.deliveries'::regclass,"
				 " 'outboxd.queue'::regclass)");
}

static long long pg_index_writing_updates(struct fixture_db *db)
{
	return pg_stat_count(db, "SELECT n_tup_upd - n_tup_hot_upd FROM pg_stat_user_tables"
				 " WHERE relid = 'outboxd.deliveries'::regclass");
}

static long long pg_due_index_reads(struct fixture_db *db)
{
	return pg_stat_count(db, "SELECT idx_tup_read FROM pg_stat_user_indexes"
				 " WHERE indexrelid = 'outboxd.queue_due'::regclass");
}

static long long pg_status_index_reads(struct fixture_db *db)
{
	return pg_stat_count(db, "SELECT idx_tup_read FROM pg_stat_user_indexes"
				 " WHERE indexrelid = 'outboxd.queue_status'::regclass");
}

/* The session that holds the lock of pg_hold_reads, NULL when none. */
static PGconn *holder;

static int pg_hold_reads(struct fixture_db *db, int on)
{
	PGresult *res;
	int ok;

	if (!on) {
		if (holder)
			PQfinish(holder); /* its transaction, and the lock, end with it */
		holder = NULL;
		return 0;
	}
	holder = PQconnectdb(db->dsn);
	res = PQexec(holder, "BEGIN; LOCK TABLE outboxd.deliveries IN ACCESS EXCLUSIVE MODE");
	ok = PQstatus(holder) == CONNECTION_OK && PQresultStatus(res) == PGRES_COMMAND_OK;
	if (!ok)
		fprintf(stderr, "postgres fixture: hold reads: %s", PQerrorMessage(holder));
	PQclear(res);
	return ok ? 0 : -1;
}

static long long pg_reads_held(struct fixture_db *db)
{
	return pg_stat_count(db, "SELECT count(*) FROM pg_stat_activity"
				 " WHERE datname = current_database() AND wait_event_type = 'Lock'");
}

static int pg_analyze(struct fixture_db *db)
{
	return pg_exec_on(db->dsn, "ANALYZE outboxd.deliveries; ANALYZE outboxd.events");
}

static void pg_destroy(struct fixture_db *db)
{
	pg_exec_on(pg_suite_dsn, "SET client_min_messages = warning;"
				 "DROP SCHEMA IF EXISTS outboxd CASCADE");
}

/* The payload always goes in as bytea (the column's type); as_text does not apply. */
static int pg_producer_insert(struct fixture_db *db, const char *event_type,
			      const char *source, const char *source_event_id,
			      const void *payload, size_t len, int as_text)
{
	const char *values[4] = {event_type, payload, source, source_event_id};
	int lengths[4] = {0, (int)len, 0, 0};
	int formats[4] = {0, 1, 0, 0};
	PGconn *conn = PQconnectdb(db->dsn);
	PGresult *res = NULL;
	int rc = -1;

	if (PQstatus(conn) == CONNECTION_OK) {
		res = PQexecParams(conn, source ?
				   "INSERT INTO outboxd.outbox(event_type, payload, source,"
				   " source_event_id) VALUES ($1, $2, $3, $4)" :
				   "INSERT INTO outboxd.outbox(event_type, payload) VALUES ($1, $2)",
				   source ? 4 : 2, NULL, values, lengths, formats, 0);
		if (PQresultStatus(res) == PGRES_COMMAND_OK)
			rc = 0;
	}
	if (rc)
		fprintf(stderr, "producer insert: %s", PQerrorMessage(conn));
	PQclear(res);
	PQfinish(conn);
	return rc;
}

static const struct backend_fixture backends[] = {
	{
		.name = "sqlite",
		.create = sqlite_create,
		.destroy = sqlite_destroy,
		.producer_insert = sqlite_producer_insert,
		.has_owner_lock = 1,
		.available = always,
	},
	{
		.name = "postgres",
		.create = pg_create,
		.destroy = pg_destroy,
		.producer_insert = pg_producer_insert,
		.adverse_plans = pg_adverse_plans,
		.rows_scanned = pg_rows_scanned,
		.index_writing_updates = pg_index_writing_updates,
		.due_index_reads = pg_due_index_reads,
		.status_index_reads = pg_status_index_reads,
		.analyze = pg_analyze,
		.hold_reads = pg_hold_reads,
		.reads_held = pg_reads_held,
		.older_schema = pg_older_schema,
		.available = pg_available,
		.finished = pg_finished,
	},
};

const struct backend_fixture *backend;

/* ---- per-test state ------------------------------------------------------------------ */

int store_suite_setup(void **state)
{
	struct t *t = calloc(1, sizeof(*t));
	char err[512];
	int rc;

	if (!t || backend->create(&t->db) != 0) {
		free(t);
		return -1;
	}
	rc = store_open(t->db.dsn, "test-owner", &t->st, err, sizeof(err));
	if (rc != STORE_OK) {
		fprintf(stderr, "store_open(%s): %s: %s\n", t->db.dsn, store_strerror(rc), err);
		backend->destroy(&t->db);
		free(t);
		return -1;
	}
	for (int i = 0; i < 3; i++)
		uuid_v7(t->subs[i]);
	t->t0 = clock_now_ms() - HOUR_MS;
	*state = t;
	return 0;
}

int store_suite_teardown(void **state)
{
	struct t *t = *state;

	store_close(t->st);
	backend->destroy(&t->db);
	free(t);
	return 0;
}

int store_suite_run(const struct CMUnitTest *tests, size_t n)
{
	int failed = 0;

	/* The lost-lease warnings are expected here; keep the output readable. */
	log_set_level(LOG_ERROR);
	for (size_t i = 0; i < sizeof(backends) / sizeof(backends[0]); i++) {
		backend = &backends[i];
		if (!backend->available()) {
			printf("[  FAILED  ] %s backend: no database to test on\n", backend->name);
			failed++;
			continue;
		}
		failed += _cmocka_run_group_tests(backend->name, tests, n, NULL, NULL);
		if (backend->finished)
			backend->finished();
	}
	return failed ? 1 : 0;
}

/* ---- shared helpers ------------------------------------------------------------------ */

/* Ingests one event fanned out to the first n_subs test subscriptions. */
void ingest_one(struct t *t, const char *type, int64_t created_at, size_t n_subs,
		char id[UUID_STR_LEN])
{
	struct store_event_in ev = {
		.event_type = type,
		.source = "",
		.content_type = "application/json",
		.payload = "{\"n\":1}",
		.payload_len = 7,
		.created_at = created_at,
		.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
		.n_subscriptions = n_subs,
	};

	uuid_v7(ev.id);
	assert_int_equal(store_ingest(t->st, &ev, 1), STORE_OK);
	assert_int_equal(ev.duplicate, 0);
	if (id)
		memcpy(id, ev.id, UUID_STR_LEN);
}

/* The deliveries of one event, asserted to number n. */
struct store_delivery *deliveries_of(struct t *t, const char *event_id, size_t n)
{
	struct store_delivery *items = NULL;
	size_t got = 0;

	assert_int_equal(store_event_deliveries(t->st, event_id, &items, &got), STORE_OK);
	assert_int_equal(got, n);
	return items;
}

size_t claim_n(struct t *t, int64_t now, int64_t lease_ms, size_t limit,
	       struct store_claim **items)
{
	size_t n = 0;

	assert_int_equal(store_claim_due(t->st, now, lease_ms, limit, items, &n), STORE_OK);
	return n;
}

/* Records one result for a claimed delivery with a single attempt numbered n;
 * ordered_key as the dispatcher sets it for a keyed delivery of an ordered subscription. */
void record_as(struct t *t, const char *delivery_id, enum delivery_status status,
	       int attempt_count, int64_t next_attempt_at, int code, const char *message,
	       const char *cause, int ordered_key)
{
	struct store_attempt a = {
		.n = attempt_count,
		.kind = attempt_count == 1 ? ATTEMPT_IMMEDIATE : ATTEMPT_SCHEDULED,
		.started_at = clock_now_ms() - 20,
		.duration_ms = 20,
		.code = code ? code : 200,
		.message = code ? message : "OK",
		.cause = cause,
	};
	struct store_result r = {
		.delivery_id = delivery_id,
		.status = status,
		.attempt_count = attempt_count,
		.next_attempt_at = next_attempt_at,
		.processed_at = status == DELIVERY_PROCESSED ? clock_now_ms() : 0,
		.last_code = code,
		.last_message = message,
		.last_cause = cause,
		.attempts = &a,
		.n_attempts = 1,
		.ordered_key = ordered_key,
	};

	assert_int_equal(store_record_results(t->st, &r, 1), STORE_OK);
}

void record(struct t *t, const char *delivery_id, enum delivery_status status,
	    int attempt_count, int64_t next_attempt_at, int code, const char *message,
	    const char *cause)
{
	record_as(t, delivery_id, status, attempt_count, next_attempt_at, code, message, cause, 0);
}

struct store_delivery get_delivery(struct t *t, const char *id)
{
	struct store_delivery d;

	assert_int_equal(store_delivery_get(t->st, id, &d), STORE_OK);
	return d;
}

int id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}
