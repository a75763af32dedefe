/* test_store.c: the storage conformance suite, one set of tests for every backend.
 *
 * Each test gets a fresh, empty database from its backend's fixture and talks to it
 * only through store.h, so a backend passes exactly when it keeps the promises written
 * there. The fixtures (below) are the only backend-specific code: they make a database
 * and play the external producer that inserts into the outbox table with its own
 * connection. Both always run: PostgreSQL on the server named by OUTBOXD_TEST_PG_DSN, or
 * on one the suite starts itself (see the fixture). To add a backend: write its fixture
 * and add one line to `backends`. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <ftw.h>
#include <libpq-fe.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness_pg.h"
#include "core/secretbox.h"
#include "store/store.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

#define MINUTE_MS 60000
#define HOUR_MS 3600000

/* ---- backend fixtures --------------------------------------------------------------- */

struct fixture_db {
	char dsn[1024];
	char dir[256];     /* sqlite: the temporary directory */
	char path[512];    /* sqlite: the database file */
	char schema[64];   /* postgres: the per-test schema */
};

struct backend_fixture {
	const char *name;
	/* Makes a fresh database for one test and fills db->dsn. 0 on success. */
	int (*create)(struct fixture_db *db);
	void (*destroy)(struct fixture_db *db);
	/* Inserts one outbox row as an independent producer would: event_type and payload,
	 * plus source and source_event_id when not NULL. as_text stores the payload as a
	 * text value where the database distinguishes it. 0 on success. */
	int (*producer_insert)(struct fixture_db *db, const char *event_type,
			       const char *source, const char *source_event_id,
			       const void *payload, size_t len, int as_text);
	int has_owner_lock;  /* one process per database (SQLite's flock) */
	int (*available)(void);
	void (*finished)(void); /* after the backend's last test, or NULL */
};

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

/* PostgreSQL: the suite gets one database of its own, on the server named by
 * OUTBOXD_TEST_PG_DSN (a postgres:// URI of a role allowed to create databases, e.g.
 * postgres://outboxd@127.0.0.1:5432/postgres), or else on a server it starts itself
 * (tests/support/harness_pg.h). The store keeps everything in schema outboxd, so each
 * test starts from a dropped schema. */
static struct pg_server own_server;   /* running when the suite started its own */
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

static int pg_create(struct fixture_db *db)
{
	if (pg_exec_on(pg_suite_dsn, "SET client_min_messages = warning;"
				     "DROP SCHEMA IF EXISTS outboxd CASCADE"))
		return -1;
	snprintf(db->dsn, sizeof(db->dsn), "%s", pg_suite_dsn);
	return 0;
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
		.available = pg_available,
		.finished = pg_finished,
	},
};

/* The backend the running group tests (cmocka setups take no parameter). */
static const struct backend_fixture *backend;

/* ---- per-test state and helpers ----------------------------------------------------- */

struct t {
	struct fixture_db db;
	store *st;
	char subs[3][UUID_STR_LEN];
	int64_t t0;        /* a base time one hour ago: events created from it are due */
};

static int setup(void **state)
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

static int teardown(void **state)
{
	struct t *t = *state;

	store_close(t->st);
	backend->destroy(&t->db);
	free(t);
	return 0;
}

/* Ingests one event fanned out to the first n_subs test subscriptions. */
static void ingest_one(struct t *t, const char *type, int64_t created_at, size_t n_subs,
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
static struct store_delivery *deliveries_of(struct t *t, const char *event_id, size_t n)
{
	struct store_delivery *items = NULL;
	size_t got = 0;

	assert_int_equal(store_event_deliveries(t->st, event_id, &items, &got), STORE_OK);
	assert_int_equal(got, n);
	return items;
}

static size_t claim_n(struct t *t, int64_t now, int64_t lease_ms, size_t limit,
		      struct store_claim **items)
{
	size_t n = 0;

	assert_int_equal(store_claim_due(t->st, now, lease_ms, limit, items, &n), STORE_OK);
	return n;
}

/* Records one result for a claimed delivery with a single attempt numbered n;
 * ordered_key as the dispatcher sets it for a keyed delivery of an ordered subscription. */
static void record_as(struct t *t, const char *delivery_id, enum delivery_status status,
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

static void record(struct t *t, const char *delivery_id, enum delivery_status status,
		   int attempt_count, int64_t next_attempt_at, int code, const char *message,
		   const char *cause)
{
	record_as(t, delivery_id, status, attempt_count, next_attempt_at, code, message, cause, 0);
}

static struct store_delivery get_delivery(struct t *t, const char *id)
{
	struct store_delivery d;

	assert_int_equal(store_delivery_get(t->st, id, &d), STORE_OK);
	return d;
}

/* ---- ingest --------------------------------------------------------------------------- */

static void test_ingest_fans_out(void **state)
{
	struct t *t = *state;
	static const unsigned char bin[] = {0x00, 0xff, 0x10, 0x00, 0x7f};
	struct store_event_in ev[2] = {
		{
			.event_type = "user.created",
			.source = "crm",
			.source_event_id = "u-1",
			.partition_key = "user-42",
			.content_type = "application/octet-stream",
			.payload = bin,
			.payload_len = sizeof(bin),
			.created_at = t->t0,
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 3,
		},
		{
			.event_type = "nobody.cares",
			.content_type = "application/json",
			.payload = "{}",
			.payload_len = 2,
			.created_at = t->t0 + 1,
		},
	};
	struct store_event got;
	struct store_delivery *d;
	int64_t due = 0;

	uuid_v7(ev[0].id);
	uuid_v7(ev[1].id);
	assert_int_equal(store_ingest(t->st, ev, 2), STORE_OK);
	assert_int_equal(ev[0].duplicate, 0);

	assert_int_equal(store_event_get(t->st, ev[0].id, &got), STORE_OK);
	assert_string_equal(got.id, ev[0].id);
	assert_string_equal(got.event_type, "user.created");
	assert_string_equal(got.source, "crm");
	assert_string_equal(got.source_event_id, "u-1");
	assert_string_equal(got.partition_key, "user-42");
	assert_string_equal(got.content_type, "application/octet-stream");
	assert_int_equal(got.payload_len, sizeof(bin));
	assert_memory_equal(got.payload, bin, sizeof(bin));
	assert_int_equal(got.created_at, t->t0);
	store_event_free(&got);

	d = deliveries_of(t, ev[0].id, 3);
	for (size_t i = 0; i < 3; i++) {
		int matched = 0;

		assert_int_equal(d[i].status, DELIVERY_NEW);
		assert_string_equal(d[i].event_id, ev[0].id);
		assert_string_equal(d[i].event_type, "user.created");
		assert_int_equal(d[i].next_attempt_at, t->t0);
		assert_int_equal(d[i].attempt_count, 0);
		assert_int_equal(d[i].replay, 0);
		assert_null(d[i].lease_owner);
		assert_null(d[i].last_message);
		for (size_t j = 0; j < 3; j++)
			matched += strcmp(d[i].subscription_id, t->subs[j]) == 0;
		assert_int_equal(matched, 1);
	}
	store_deliveries_free(d, 3);

	/* An event nobody subscribes to is stored, with no deliveries; absent optional
	 * fields read back as "" (source) and NULL. */
	assert_int_equal(store_event_get(t->st, ev[1].id, &got), STORE_OK);
	assert_string_equal(got.source, "");
	assert_null(got.source_event_id);
	assert_null(got.partition_key);
	store_event_free(&got);
	d = deliveries_of(t, ev[1].id, 0);
	assert_null(d);

	assert_int_equal(store_next_due(t->st, &due), STORE_OK);
	assert_int_equal(due, t->t0);
	assert_int_equal(store_event_get(t->st, "no-such-event", &got), STORE_NOT_FOUND);
	assert_int_equal(store_ping(t->st), STORE_OK);
}

static void test_ingest_is_idempotent(void **state)
{
	struct t *t = *state;
	struct store_event_in a = {
		.event_type = "order.paid", .source = "shop", .source_event_id = "o-1",
		.content_type = "application/json", .payload = "{}", .payload_len = 2,
		.created_at = t->t0,
		.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs, .n_subscriptions = 2,
	};
	struct store_event_in b = a;
	struct store_event_in batch[4];
	struct store_delivery *d;
	char first[UUID_STR_LEN];

	uuid_v7(a.id);
	assert_int_equal(store_ingest(t->st, &a, 1), STORE_OK);
	assert_int_equal(a.duplicate, 0);
	memcpy(first, a.id, UUID_STR_LEN);

	/* The same key again: the first id comes back, nothing new is stored. */
	uuid_v7(b.id);
	assert_int_equal(store_ingest(t->st, &b, 1), STORE_OK);
	assert_int_equal(b.duplicate, 1);
	assert_string_equal(b.id, first);
	d = deliveries_of(t, first, 2);
	store_deliveries_free(d, 2);

	/* Within one batch: the second o-2 is a duplicate of the first. The same
	 * source_event_id under another source is a different event. */
	for (int i = 0; i < 4; i++) {
		batch[i] = a;
		uuid_v7(batch[i].id);
	}
	batch[0].source_event_id = "o-2";
	batch[1].source_event_id = "o-2";
	batch[2].source = "warehouse";
	batch[3].source_event_id = NULL;
	assert_int_equal(store_ingest(t->st, batch, 4), STORE_OK);
	assert_int_equal(batch[0].duplicate, 0);
	assert_int_equal(batch[1].duplicate, 1);
	assert_string_equal(batch[1].id, batch[0].id);
	assert_int_equal(batch[2].duplicate, 0);
	assert_string_not_equal(batch[2].id, first);
	assert_int_equal(batch[3].duplicate, 0);
	d = deliveries_of(t, batch[0].id, 2);
	store_deliveries_free(d, 2);

	/* Without a source_event_id there is no key: both are stored. */
	batch[3].duplicate = 0;
	uuid_v7(batch[3].id);
	assert_int_equal(store_ingest(t->st, &batch[3], 1), STORE_OK);
	assert_int_equal(batch[3].duplicate, 0);
}

/* A large batch (ingest groups rows): keyed events mixed with plain ones, a key
 * repeated within the batch, every event with its deliveries and its own payload. */
static void test_ingest_many(void **state)
{
	struct t *t = *state;
	enum { N = 150 };
	struct store_event_in ev[N];
	char payloads[N][32], keys[N][16];
	struct store_claim *c = NULL;
	size_t stored = 0, n;

	memset(ev, 0, sizeof(ev));
	for (int i = 0; i < N; i++) {
		snprintf(payloads[i], sizeof(payloads[i]), "{\"i\":%d}", i);
		ev[i].event_type = i % 7 ? "many.a" : "many.b";
		ev[i].source = "";
		ev[i].content_type = "application/json";
		ev[i].payload = payloads[i];
		ev[i].payload_len = strlen(payloads[i]);
		ev[i].created_at = t->t0 + i;
		ev[i].subscription_ids = (const char (*)[UUID_STR_LEN])t->subs;
		ev[i].n_subscriptions = 1 + i % 3;
		if (i % 10 == 0) { /* keys k-0, k-0, k-1, k-1, ...: every second one repeats */
			snprintf(keys[i], sizeof(keys[i]), "k-%d", i / 20);
			ev[i].source_event_id = keys[i];
		}
		uuid_v7(ev[i].id);
	}
	assert_int_equal(store_ingest(t->st, ev, N), STORE_OK);

	for (int i = 0; i < N; i++) {
		int dup = i % 20 == 10;
		assert_int_equal(ev[i].duplicate, dup);
		if (dup) {
			assert_string_equal(ev[i].id, ev[i - 10].id);
			continue;
		}
		struct store_delivery *d = deliveries_of(t, ev[i].id, ev[i].n_subscriptions);
		for (size_t k = 0; k < ev[i].n_subscriptions; k++) {
			assert_int_equal(d[k].status, DELIVERY_NEW);
			assert_int_equal(d[k].created_at, t->t0 + i);
			assert_string_equal(d[k].event_type, ev[i].event_type);
		}
		store_deliveries_free(d, ev[i].n_subscriptions);
		stored += ev[i].n_subscriptions;
	}
	/* All of them due, each with its own event's payload. */
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 1000, &c);
	assert_int_equal(n, stored);
	for (size_t k = 0; k < n; k++) {
		int i = -1;
		assert_int_equal(sscanf((const char *)c[k].payload, "{\"i\":%d}", &i), 1);
		assert_true(i >= 0 && i < N);
		assert_string_equal(c[k].event_id, ev[i].id);
		assert_int_equal(c[k].payload_len, strlen(payloads[i]));
	}
	store_claims_free(c, n);
}

static void test_ingest_is_atomic(void **state)
{
	struct t *t = *state;
	struct store_event_in ev[2] = {
		{
			.event_type = "a", .content_type = "application/json",
			.payload = "1", .payload_len = 1, .created_at = t->t0,
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 1,
		},
	};
	struct store_event got;
	int64_t due = -1;

	/* The second event reuses the first one's id: the batch must fail as a whole. */
	uuid_v7(ev[0].id);
	ev[1] = ev[0];
	assert_int_not_equal(store_ingest(t->st, ev, 2), STORE_OK);
	assert_int_equal(store_event_get(t->st, ev[0].id, &got), STORE_NOT_FOUND);
	assert_int_equal(store_next_due(t->st, &due), STORE_OK);
	assert_int_equal(due, 0);

	/* And the store keeps working afterwards. */
	assert_int_equal(store_ingest(t->st, ev, 1), STORE_OK);
	assert_int_equal(store_event_get(t->st, ev[0].id, &got), STORE_OK);
	store_event_free(&got);

	/* Bad arguments never reach the backend. */
	ev[1].event_type = NULL;
	assert_int_equal(store_ingest(t->st, &ev[1], 1), STORE_INVALID);
}

/* ---- claim, lease, results -------------------------------------------------------- */

static void test_claim_leases(void **state)
{
	struct t *t = *state;
	struct store_claim *c1 = NULL, *c2 = NULL, *c3 = NULL;
	char ids[5][UUID_STR_LEN];
	int64_t now = clock_now_ms();
	struct store_delivery d;
	size_t n1, n2, n3;

	/* Created newest first so that claim order (by due time) differs from insert
	 * order; the sixth is due in the future. */
	for (int i = 4; i >= 0; i--)
		ingest_one(t, "user.updated", t->t0 + i * 1000, 1, ids[i]);
	ingest_one(t, "user.updated", now + HOUR_MS, 1, NULL);

	n1 = claim_n(t, now, MINUTE_MS, 3, &c1);
	assert_int_equal(n1, 3);
	for (size_t i = 0; i < n1; i++) {
		assert_string_equal(c1[i].event_id, ids[i]);
		assert_string_equal(c1[i].subscription_id, t->subs[0]);
		assert_int_equal(c1[i].status, DELIVERY_NEW);
		assert_int_equal(c1[i].event_created_at, t->t0 + (int64_t)i * 1000);
		assert_string_equal(c1[i].event_type, "user.updated");
		assert_string_equal(c1[i].content_type, "application/json");
		assert_int_equal(c1[i].payload_len, 7);
		assert_memory_equal(c1[i].payload, "{\"n\":1}", 7);
	}
	d = get_delivery(t, c1[0].delivery_id);
	assert_string_equal(d.lease_owner, "test-owner");
	assert_int_equal(d.lease_until, now + MINUTE_MS);
	store_delivery_free(&d);

	/* A second claim gets only the others, never a leased one nor a future one. */
	n2 = claim_n(t, now, MINUTE_MS, 10, &c2);
	assert_int_equal(n2, 2);
	assert_string_equal(c2[0].event_id, ids[3]);
	assert_string_equal(c2[1].event_id, ids[4]);
	for (size_t i = 0; i < n1; i++)
		for (size_t j = 0; j < n2; j++)
			assert_string_not_equal(c1[i].delivery_id, c2[j].delivery_id);
	n3 = claim_n(t, now, MINUTE_MS, 10, &c3);
	assert_int_equal(n3, 0);
	assert_null(c3);

	store_claims_free(c1, n1);
	store_claims_free(c2, n2);
	assert_int_equal(store_claim_due(t->st, now, MINUTE_MS, 0, &c3, &n3), STORE_INVALID);
}

/* An event's id upstream (webhook_id) and a delivery whose first round is scheduled
 * (starts_scheduled): stored, read back, and carried in claims and hand-off claims; an
 * event without them reads NULL and 0. */
static void test_event_identity_and_scheduled_start(void **state)
{
	struct t *t = *state;
	int64_t now = clock_now_ms();
	struct store_event_in ev[3] = {
		{ /* a dead-letter topic's message: NEW, first tried by the scheduled layer */
			.event_type = "user.created", .source = "kafka:users.dlt",
			.source_event_id = "up-1/sub-a", .webhook_id = "up-1",
			.content_type = "application/json", .payload = "{}", .payload_len = 2,
			.created_at = now - 10, .first_due_at = now - 5, .starts_scheduled = 1,
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 1,
		},
		{ /* an envelope's event with no key of its own and no other state */
			.event_type = "user.created", .source = "kafka:users",
			.webhook_id = "up-2", .content_type = "application/json", .payload = "{}",
			.payload_len = 2, .created_at = now - 10,
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 1,
		},
		{
			.event_type = "user.created", .content_type = "application/json",
			.payload = "{}", .payload_len = 2, .created_at = now - 10,
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 1,
		},
	};
	struct store_claim *c = NULL, handed;
	struct store_event got;
	size_t n;

	for (int i = 0; i < 3; i++)
		uuid_v7(ev[i].id);
	assert_int_equal(store_ingest(t->st, ev, 3), STORE_OK);
	struct store_delivery *d = deliveries_of(t, ev[0].id, 1);
	assert_int_equal(d[0].status, DELIVERY_NEW);
	assert_int_equal(d[0].next_attempt_at, now - 5);
	store_deliveries_free(d, 1);

	n = claim_n(t, now, MINUTE_MS, 10, &c);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++) {
		int k = strcmp(c[i].event_id, ev[0].id) == 0 ? 0
			: strcmp(c[i].event_id, ev[1].id) == 0 ? 1 : 2;
		assert_int_equal(c[i].status, DELIVERY_NEW);
		assert_int_equal(c[i].starts_scheduled, k == 0);
		if (k == 2) {
			assert_null(c[i].webhook_id);
			assert_string_equal(store_claim_webhook_id(&c[i]), ev[2].id);
		} else {
			assert_string_equal(c[i].webhook_id, k == 0 ? "up-1" : "up-2");
			assert_string_equal(store_claim_webhook_id(&c[i]), c[i].webhook_id);
		}
		assert_memory_equal(c[i].payload, "{}", 2);
	}
	store_claims_free(c, n);

	assert_int_equal(store_event_get(t->st, ev[0].id, &got), STORE_OK);
	assert_string_equal(got.webhook_id, "up-1");
	assert_string_equal(got.source_event_id, "up-1/sub-a");
	store_event_free(&got);
	assert_int_equal(store_event_get(t->st, ev[2].id, &got), STORE_OK);
	assert_null(got.webhook_id);
	store_event_free(&got);

	/* the hand-off builds its claim from the event in memory, alike */
	char did[1][UUID_STR_LEN] = {"0190a0b0-0000-7000-8000-00000000d001"};
	ev[1].delivery_ids = did;
	assert_int_equal(store_claim_of_event(&ev[1], 0, &handed), 0);
	assert_string_equal(handed.webhook_id, "up-2");
	assert_int_equal(handed.starts_scheduled, 0);
	free(handed.event_type); /* the start of the claim's one allocation */
}

/* A dead result marked for the dead-letter topic is listed, with its event and last
 * error, until it is marked done; other results are not listed. */
static void test_dead_letter_marks(void **state)
{
	struct t *t = *state;
	char ids[2][UUID_STR_LEN];
	struct store_claim *c = NULL;
	struct store_dead_letter *dl = NULL;
	size_t n;

	ingest_one(t, "job.done", t->t0, 1, ids[0]);
	ingest_one(t, "job.done", t->t0 + 1, 1, ids[1]);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 2);
	struct store_attempt a = {.n = 1, .kind = ATTEMPT_IMMEDIATE, .started_at = t->t0,
				  .duration_ms = 5, .code = 500, .message = "HTTP 500"};
	struct store_result r[2] = {
		{.delivery_id = c[0].delivery_id, .status = DELIVERY_FAILED, .attempt_count = 1,
		 .last_code = 500, .last_message = "HTTP 500", .last_cause = "busy",
		 .attempts = &a, .n_attempts = 1, .dead_letter = 1},
		{.delivery_id = c[1].delivery_id, .status = DELIVERY_PROCESSED, .attempt_count = 1,
		 .processed_at = clock_now_ms(), .attempts = &a, .n_attempts = 1},
	};
	assert_int_equal(store_record_results(t->st, r, 2), STORE_OK);
	assert_int_equal(store_dead_letters(t->st, 10, &dl, &n), STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(dl[0].claim.delivery_id, c[0].delivery_id);
	assert_string_equal(dl[0].claim.event_id, c[0].event_id);
	assert_string_equal(dl[0].claim.subscription_id, t->subs[0]);
	assert_string_equal(dl[0].claim.event_type, "job.done");
	assert_memory_equal(dl[0].claim.payload, "{\"n\":1}", 7);
	assert_int_equal(dl[0].claim.attempt_count, 1);
	assert_int_equal(dl[0].last_code, 500);
	assert_string_equal(dl[0].last_message, "HTTP 500");
	assert_string_equal(dl[0].last_cause, "busy");
	const char done[1][UUID_STR_LEN];
	memcpy((char *)done[0], dl[0].claim.delivery_id, UUID_STR_LEN);
	store_dead_letters_free(dl, n);
	assert_int_equal(store_dead_letters_done(t->st, done, 1), STORE_OK);
	assert_int_equal(store_dead_letters(t->st, 10, &dl, &n), STORE_OK);
	assert_int_equal(n, 0);
	store_dead_letters_free(dl, n);
	store_claims_free(c, 2);
}

static void test_expired_lease_is_reclaimable(void **state)
{
	struct t *t = *state;
	struct store_claim *c = NULL, *again = NULL;
	int64_t now = clock_now_ms();
	size_t n, m, reaped;
	int64_t due;

	ingest_one(t, "a", t->t0, 2, NULL);
	n = claim_n(t, now, 1000, 10, &c);
	assert_int_equal(n, 2);
	/* Leased deliveries are not pending for the scheduler either. */
	assert_int_equal(store_next_due(t->st, &due), STORE_OK);
	assert_int_equal(due, 0);

	assert_int_equal(store_reap_leases(t->st, now + 500, &reaped), STORE_OK);
	assert_int_equal(reaped, 0);
	assert_int_equal(claim_n(t, now + 500, 1000, 10, &again), 0);

	assert_int_equal(store_reap_leases(t->st, now + 1001, &reaped), STORE_OK);
	assert_int_equal(reaped, 2);
	m = claim_n(t, now + 1001, 1000, 10, &again);
	assert_int_equal(m, 2);
	for (size_t i = 0; i < m; i++)
		assert_true(strcmp(again[i].delivery_id, c[0].delivery_id) == 0 ||
			    strcmp(again[i].delivery_id, c[1].delivery_id) == 0);
	store_claims_free(again, m);

	/* At start the single owner drops every lease it held before a crash. */
	assert_int_equal(store_release_all(t->st, &reaped), STORE_OK);
	assert_int_equal(reaped, 2);
	m = claim_n(t, now, 1000, 10, &again);
	assert_int_equal(m, 2);
	store_claims_free(again, m);
	store_claims_free(c, n);
}

static void test_record_success(void **state)
{
	struct t *t = *state;
	struct store_claim *c = NULL;
	struct store_attempt_row *a = NULL;
	struct store_delivery d;
	struct store_attempt tries[2] = {
		{1, ATTEMPT_IMMEDIATE, 0, 1000, 504, "Gateway Timeout", "Operation timed out", 0},
		{2, ATTEMPT_IMMEDIATE, 0, 35, 200, "OK", NULL, 0},
	};
	struct store_result r = {
		.status = DELIVERY_PROCESSED,
		.attempt_count = 2,
		.attempts = tries,
		.n_attempts = 2,
	};
	size_t n, na;
	int64_t due;

	ingest_one(t, "a", t->t0, 1, NULL);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 1);
	r.delivery_id = c[0].delivery_id;
	r.processed_at = clock_now_ms();
	tries[0].started_at = r.processed_at - 1100;
	tries[1].started_at = r.processed_at - 50;
	assert_int_equal(store_record_results(t->st, &r, 1), STORE_OK);

	d = get_delivery(t, c[0].delivery_id);
	assert_int_equal(d.status, DELIVERY_PROCESSED);
	assert_int_equal(d.processed_at, r.processed_at);
	assert_int_equal(d.attempt_count, 2);
	assert_int_equal(d.next_attempt_at, 0);
	assert_int_equal(d.last_code, 0);
	assert_null(d.last_message);
	assert_null(d.lease_owner);
	assert_int_equal(d.lease_until, 0);
	store_delivery_free(&d);

	assert_int_equal(store_delivery_attempts(t->st, c[0].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 2);
	assert_int_equal(a[0].n, 1);
	assert_int_equal(a[0].kind, ATTEMPT_IMMEDIATE);
	assert_int_equal(a[0].code, 504);
	assert_int_equal(a[0].duration_ms, 1000);
	assert_int_equal(a[0].started_at, tries[0].started_at);
	assert_string_equal(a[0].message, "Gateway Timeout");
	assert_string_equal(a[0].cause, "Operation timed out");
	assert_int_equal(a[1].code, 200);
	assert_null(a[1].cause);
	store_attempts_free(a, na);

	assert_int_equal(store_next_due(t->st, &due), STORE_OK);
	assert_int_equal(due, 0);
	store_claims_free(c, n);
}

/* Results come in batches (the dispatcher writes up to 512 at once): every one is
 * applied as if written alone, its attempts kept, a result for a lease already given
 * up ignored, and the error fields follow the same rules. */
static void test_record_many(void **state)
{
	struct t *t = *state;
	enum { N = 75 };
	struct store_claim *c = NULL;
	struct store_result r[N + 1];
	struct store_attempt tries[N][2];
	int64_t now = clock_now_ms();
	size_t n;

	for (int i = 0; i < N; i++)
		ingest_one(t, "many", t->t0 + i, 1, NULL);
	n = claim_n(t, now, MINUTE_MS, 100, &c);
	assert_int_equal(n, N);

	/* The last one is written alone first: its lease is gone when the batch comes. */
	record(t, c[N - 1].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	memset(r, 0, sizeof(r));
	for (int i = 0; i < N; i++) {
		struct store_result *x = &r[i];
		x->delivery_id = c[i].delivery_id;
		tries[i][0] = (struct store_attempt){1, ATTEMPT_IMMEDIATE, now - 30, 10, 503,
						     "Service Unavailable", "busy", 0};
		tries[i][1] = (struct store_attempt){2, ATTEMPT_IMMEDIATE, now - 10, 5, 200, "OK", NULL, 0};
		x->attempts = tries[i];
		switch (i % 3) {
		case 0: /* delivered on the second try */
			x->status = DELIVERY_PROCESSED;
			x->attempt_count = 2;
			x->processed_at = now;
			x->n_attempts = 2;
			break;
		case 1: /* failed, retried in a minute */
			x->status = DELIVERY_FAILED;
			x->attempt_count = 1;
			x->retry_count = 1;
			x->next_attempt_at = now + MINUTE_MS;
			x->last_code = 503;
			x->last_message = "Service Unavailable";
			x->last_cause = "busy";
			x->n_attempts = 1;
			break;
		default: /* released untouched: keeps its error */
			x->status = DELIVERY_NEW;
			x->next_attempt_at = now + 5000;
			x->delay_actions = 2;
			x->last_code = -1;
			break;
		}
	}
	assert_int_equal(store_record_results(t->st, r, N), STORE_OK);

	for (int i = 0; i < N - 1; i++) {
		struct store_delivery d = get_delivery(t, c[i].delivery_id);
		struct store_attempt_row *a = NULL;
		size_t na = 0;

		assert_int_equal(d.status, r[i].status);
		assert_int_equal(d.attempt_count, r[i].attempt_count);
		assert_int_equal(d.next_attempt_at, r[i].next_attempt_at);
		assert_int_equal(d.processed_at, r[i].processed_at);
		assert_null(d.lease_owner);
		assert_int_equal(d.last_code, i % 3 == 1 ? 503 : 0);
		if (i % 3 == 1)
			assert_string_equal(d.last_cause, "busy");
		store_delivery_free(&d);
		assert_int_equal(store_delivery_attempts(t->st, c[i].delivery_id, &a, &na), STORE_OK);
		assert_int_equal(na, r[i].n_attempts);
		if (na == 2) {
			assert_int_equal(a[0].code, 503);
			assert_string_equal(a[0].cause, "busy");
			assert_int_equal(a[1].code, 200);
		}
		store_attempts_free(a, na);
	}
	/* the one written alone keeps what it was given then: one attempt, processed */
	struct store_delivery d = get_delivery(t, c[N - 1].delivery_id);
	struct store_attempt_row *a = NULL;
	size_t na = 0;
	assert_int_equal(d.status, DELIVERY_PROCESSED);
	assert_int_equal(d.attempt_count, 1);
	store_delivery_free(&d);
	assert_int_equal(store_delivery_attempts(t->st, c[N - 1].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 1);
	store_attempts_free(a, na);
	store_claims_free(c, n);
}

static void test_record_failure_then_dead(void **state)
{
	struct t *t = *state;
	struct delivery_filter f = {.dead_only = 1, .limit = 100};
	struct store_claim *c = NULL, *c2 = NULL;
	struct store_delivery *items = NULL;
	struct store_attempt_row *a = NULL;
	struct store_delivery d;
	char cause[3000], *cursor = NULL;
	int64_t now = clock_now_ms(), due;
	size_t n, n2, na, ni;

	/* A cause longer than the cap, ending in multi-byte characters. */
	memset(cause, 'x', sizeof(cause));
	for (size_t i = 1020; i + 2 < sizeof(cause); i += 2)
		memcpy(&cause[i], "\xc3\xa9", 2);
	cause[sizeof(cause) - 1] = '\0';

	ingest_one(t, "a", t->t0, 1, NULL);
	n = claim_n(t, now, MINUTE_MS, 10, &c);
	record(t, c[0].delivery_id, DELIVERY_FAILED, 3, now + 3000, 503, "Service Unavailable",
	       cause);
	d = get_delivery(t, c[0].delivery_id);
	assert_int_equal(d.status, DELIVERY_FAILED);
	assert_int_equal(d.next_attempt_at, now + 3000);
	assert_int_equal(d.attempt_count, 3);
	assert_int_equal(d.last_code, 503);
	assert_string_equal(d.last_message, "Service Unavailable");
	assert_true(strlen(d.last_cause) <= 1024 && strlen(d.last_cause) >= 1020);
	assert_memory_equal(d.last_cause, cause, strlen(d.last_cause));
	assert_int_equal(d.processed_at, 0);
	store_delivery_free(&d);
	assert_int_equal(store_delivery_attempts(t->st, c[0].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 1);
	assert_true(strlen(a[0].cause) <= 1024);
	store_attempts_free(a, na);

	/* Scheduled, not dead: pending at its time, not in the DLQ. */
	assert_int_equal(store_next_due(t->st, &due), STORE_OK);
	assert_int_equal(due, now + 3000);
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &ni, &cursor), STORE_OK);
	assert_int_equal(ni, 0);
	assert_int_equal(claim_n(t, now + 2999, MINUTE_MS, 10, &c2), 0);
	n2 = claim_n(t, now + 3000, MINUTE_MS, 10, &c2);
	assert_int_equal(n2, 1);
	assert_int_equal(c2[0].status, DELIVERY_FAILED);
	assert_int_equal(c2[0].attempt_count, 3);

	/* Exhausted: FAILED with no next attempt is the dead-letter queue. */
	record(t, c2[0].delivery_id, DELIVERY_FAILED, 4, 0, 503, "Service Unavailable", "refused");
	assert_int_equal(store_next_due(t->st, &due), STORE_OK);
	assert_int_equal(due, 0);
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &ni, &cursor), STORE_OK);
	assert_int_equal(ni, 1);
	assert_string_equal(items[0].id, c[0].delivery_id);
	assert_int_equal(items[0].next_attempt_at, 0);
	assert_string_equal(items[0].last_cause, "refused");
	assert_null(cursor);
	store_deliveries_free(items, ni);
	store_claims_free(c, n);
	store_claims_free(c2, n2);
}

static void test_result_after_lost_lease_is_ignored(void **state)
{
	struct t *t = *state;
	struct store_claim *c = NULL;
	struct store_attempt_row *a = NULL;
	struct store_delivery d;
	int64_t now = clock_now_ms();
	size_t n, na, reaped;

	ingest_one(t, "a", t->t0, 2, NULL);
	n = claim_n(t, now, 1000, 10, &c);
	assert_int_equal(n, 2);
	/* The lease of both expires and is reaped before the results come in. */
	assert_int_equal(store_reap_leases(t->st, now + 5000, &reaped), STORE_OK);
	assert_int_equal(reaped, 2);

	record(t, c[0].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	d = get_delivery(t, c[0].delivery_id);
	assert_int_equal(d.status, DELIVERY_NEW);
	assert_int_equal(d.attempt_count, 0);
	assert_int_equal(d.next_attempt_at, t->t0);
	store_delivery_free(&d);
	/* ... but the request it made is in the history all the same */
	assert_int_equal(store_delivery_attempts(t->st, c[0].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 1);
	assert_int_equal(a[0].n, 1);
	store_attempts_free(a, na);

	/* A batch mixing a lost lease and a held one applies only the held one. */
	store_claims_free(c, n);
	n = claim_n(t, now + 5000, 1000, 1, &c);
	assert_int_equal(n, 1);
	{
		struct store_result r[2] = {
			{.delivery_id = c[0].delivery_id, .status = DELIVERY_PROCESSED,
			 .attempt_count = 1, .processed_at = now},
			{.delivery_id = "0190f000-0000-7000-8000-000000000000",
			 .status = DELIVERY_PROCESSED, .attempt_count = 1, .processed_at = now},
		};

		assert_int_equal(store_record_results(t->st, r, 2), STORE_OK);
	}
	d = get_delivery(t, c[0].delivery_id);
	assert_int_equal(d.status, DELIVERY_PROCESSED);
	store_delivery_free(&d);
	store_claims_free(c, n);
}

/* One result of a single attempt numbered n, written through st (another instance). */
static void record_through(store *st, const char *delivery_id, enum delivery_status status,
			   int n, int code)
{
	struct store_attempt a = {.n = n, .kind = ATTEMPT_IMMEDIATE,
				  .started_at = clock_now_ms() - 20, .duration_ms = 20,
				  .code = code, .message = code == 200 ? "OK" : "HTTP 503"};
	struct store_result r = {.delivery_id = delivery_id, .status = status, .attempt_count = n,
				 .next_attempt_at = status == DELIVERY_FAILED ? clock_now_ms() : 0,
				 .processed_at = status == DELIVERY_PROCESSED ? clock_now_ms() : 0,
				 .last_code = code == 200 ? 0 : code, .attempts = &a, .n_attempts = 1};
	assert_int_equal(store_record_results(st, &r, 1), STORE_OK);
}

/* A renewed lease outlives its first term: the reaper leaves it and no other instance's
 * claim takes it; a lease that is not the owner's is not renewed. A round whose lease was
 * lost adds its attempts after the ones its successor recorded, and changes nothing else. */
static void test_leases_renew(void **state)
{
	struct t *t = *state;
	struct store_claim *c = NULL, *other_c = NULL;
	struct store_attempt_row *a = NULL;
	struct store_delivery d;
	store *other = NULL;
	int64_t now = clock_now_ms();
	size_t n, na, reaped;
	unsigned char ok[3] = {9, 9, 9};
	char ids[3][UUID_STR_LEN], err[256];
	int64_t until[3] = {now + 60000, now + 70000, now + 70000};

	ingest_one(t, "a", t->t0, 2, NULL);
	n = claim_n(t, now, 1000, 10, &c);
	assert_int_equal(n, 2);
	assert_int_equal(c[0].lease_until, now + 1000);
	assert_int_equal(store_open_shared(t->db.dsn, "other-owner", &other, err, sizeof(err)),
			 STORE_OK);

	/* c[0] renewed: the reaper takes only c[1], which the other instance claims */
	memcpy(ids[0], c[0].delivery_id, UUID_STR_LEN);
	assert_int_equal(store_leases_renew(t->st, (const char (*)[UUID_STR_LEN])ids, until, 1,
					    ok), STORE_OK);
	assert_int_equal(ok[0], 1);
	assert_int_equal(store_reap_leases(t->st, now + 5000, &reaped), STORE_OK);
	assert_int_equal(reaped, 1);
	assert_int_equal(store_claim_due(other, now + 5000, 30000, 10, &other_c, &n), STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(other_c[0].delivery_id, c[1].delivery_id);

	/* ours renews; one that does not exist and one that is the other's do not */
	memcpy(ids[1], "0190f000-0000-7000-8000-000000000000", UUID_STR_LEN);
	memcpy(ids[2], c[1].delivery_id, UUID_STR_LEN);
	until[0] = now + 70000;
	assert_int_equal(store_leases_renew(t->st, (const char (*)[UUID_STR_LEN])ids, until, 3,
					    ok), STORE_OK);
	assert_int_equal(ok[0], 1);
	assert_int_equal(ok[1], 0);
	assert_int_equal(ok[2], 0);
	d = get_delivery(t, c[0].delivery_id);
	assert_int_equal(d.lease_until, now + 70000);
	store_delivery_free(&d);
	d = get_delivery(t, c[1].delivery_id);
	assert_string_equal(d.lease_owner, "other-owner");
	store_delivery_free(&d);

	/* the other's round of c[1] records attempt 1; our lost round's late result adds
	 * its attempt as number 2 and leaves the state alone */
	record_through(other, c[1].delivery_id, DELIVERY_FAILED, 1, 503);
	record_through(t->st, c[1].delivery_id, DELIVERY_PROCESSED, 1, 200);
	assert_int_equal(store_delivery_attempts(t->st, c[1].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 2);
	assert_int_equal(a[0].n, 1);
	assert_int_equal(a[0].code, 503);
	assert_int_equal(a[1].n, 2);
	assert_int_equal(a[1].code, 200);
	store_attempts_free(a, na);
	d = get_delivery(t, c[1].delivery_id);
	assert_int_equal(d.status, DELIVERY_FAILED);
	store_delivery_free(&d);

	/* the other instance's next round numbers its try 2 (its claim knew of one): taken
	 * by the lost round's, so it goes after, as 3; no request drops out of the history */
	store_claims_free(other_c, 1);
	other_c = NULL;
	assert_int_equal(store_claim_due(other, clock_now_ms() + 1000, 30000, 10, &other_c, &n),
			 STORE_OK);
	assert_int_equal(n, 1);
	assert_int_equal(other_c[0].attempt_count, 1);
	record_through(other, c[1].delivery_id, DELIVERY_PROCESSED, 2, 200);
	assert_int_equal(store_delivery_attempts(t->st, c[1].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 3);
	assert_int_equal(a[2].n, 3);
	assert_int_equal(a[2].code, 200);
	store_attempts_free(a, na);

	/* our renewed one still takes its result */
	record_through(t->st, c[0].delivery_id, DELIVERY_PROCESSED, 1, 200);
	d = get_delivery(t, c[0].delivery_id);
	assert_int_equal(d.status, DELIVERY_PROCESSED);
	store_delivery_free(&d);
	store_claims_free(other_c, 1);
	store_claims_free(c, 2);
	store_close(other);
}

/* Many threads claiming at once never share a delivery. */
struct claimer {
	struct t *t;
	char (*got)[UUID_STR_LEN];
	size_t n;
};

static void *claimer_main(void *arg)
{
	struct claimer *cl = arg;
	struct store_claim *c;
	size_t n;

	for (;;) {
		c = NULL;
		n = 0;
		if (store_claim_due(cl->t->st, clock_now_ms(), MINUTE_MS, 7, &c, &n) != STORE_OK ||
		    n == 0)
			break;
		for (size_t i = 0; i < n; i++)
			memcpy(cl->got[cl->n++], c[i].delivery_id, UUID_STR_LEN);
		store_claims_free(c, n);
	}
	return NULL;
}

static int id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

static void test_concurrent_claims_are_disjoint(void **state)
{
	struct t *t = *state;
	enum { THREADS = 4, EVENTS = 100 };
	struct claimer cl[THREADS];
	pthread_t th[THREADS];
	char (*all)[UUID_STR_LEN] = calloc(EVENTS * 2, UUID_STR_LEN);
	size_t total = 0;

	for (int i = 0; i < EVENTS; i++)
		ingest_one(t, "a", t->t0 + i, 2, NULL);
	for (int i = 0; i < THREADS; i++) {
		cl[i] = (struct claimer){t, calloc(EVENTS * 2, UUID_STR_LEN), 0};
		assert_int_equal(pthread_create(&th[i], NULL, claimer_main, &cl[i]), 0);
	}
	for (int i = 0; i < THREADS; i++) {
		pthread_join(th[i], NULL);
		memcpy(all[total], cl[i].got, cl[i].n * UUID_STR_LEN);
		total += cl[i].n;
		free(cl[i].got);
	}
	assert_int_equal(total, EVENTS * 2);
	qsort(all, total, UUID_STR_LEN, id_cmp);
	for (size_t i = 1; i < total; i++)
		assert_string_not_equal(all[i - 1], all[i]);
	free(all);
}

/* ---- operator actions ----------------------------------------------------------------- */

static void test_replay(void **state)
{
	struct t *t = *state;
	char ev_dead[UUID_STR_LEN], ev_ok[UUID_STR_LEN], ev_new[UUID_STR_LEN];
	char ev_leased[UUID_STR_LEN], ev_sched[UUID_STR_LEN];
	struct store_delivery *dd, *dok, *dnew, *dlease, *dsched, d;
	enum store_replay_outcome out[6];
	char ids[6][UUID_STR_LEN];
	struct store_claim *c = NULL;
	size_t n, replayed = 99;
	int64_t before = clock_now_ms();

	ingest_one(t, "dead", t->t0, 1, ev_dead);
	ingest_one(t, "ok", t->t0 + 1, 1, ev_ok);
	ingest_one(t, "sched", t->t0 + 2, 1, ev_sched);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 3);
	record(t, c[0].delivery_id, DELIVERY_FAILED, 6, 0, 503, "Service Unavailable", "x");
	record(t, c[1].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	record(t, c[2].delivery_id, DELIVERY_FAILED, 3, clock_now_ms() + HOUR_MS, 502, "Bad", "y");
	store_claims_free(c, n);
	ingest_one(t, "leased", t->t0 + 3, 1, ev_leased);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 1);
	store_claims_free(c, n);
	ingest_one(t, "new", t->t0 + 4, 1, ev_new);

	dd = deliveries_of(t, ev_dead, 1);
	dok = deliveries_of(t, ev_ok, 1);
	dnew = deliveries_of(t, ev_new, 1);
	dlease = deliveries_of(t, ev_leased, 1);
	dsched = deliveries_of(t, ev_sched, 1);
	memcpy(ids[0], dd->id, UUID_STR_LEN);
	memcpy(ids[1], dok->id, UUID_STR_LEN);
	memcpy(ids[2], dnew->id, UUID_STR_LEN);
	memcpy(ids[3], dlease->id, UUID_STR_LEN);
	memcpy(ids[4], dsched->id, UUID_STR_LEN);
	snprintf(ids[5], UUID_STR_LEN, "0190f000-0000-7000-8000-000000000000");

	assert_int_equal(store_replay(t->st, (const char (*)[UUID_STR_LEN])ids, 6, 0, out,
				      &replayed), STORE_OK);
	assert_int_equal(replayed, 2);
	assert_int_equal(out[0], REPLAY_DONE);
	assert_int_equal(out[1], REPLAY_NOT_FAILED);
	assert_int_equal(out[2], REPLAY_NOT_FAILED);
	assert_int_equal(out[3], REPLAY_IN_FLIGHT);
	assert_int_equal(out[4], REPLAY_DONE);
	assert_int_equal(out[5], REPLAY_NOT_FOUND);

	d = get_delivery(t, ids[0]);
	assert_int_equal(d.status, DELIVERY_NEW);
	assert_int_equal(d.replay, 1);
	assert_true(d.next_attempt_at >= before && d.next_attempt_at <= clock_now_ms());
	assert_int_equal(d.attempt_count, 6);
	store_delivery_free(&d);

	/* The replayed ones are claimable now, marked as replays. */
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++)
		if (strcmp(c[i].delivery_id, ids[0]) == 0)
			assert_int_equal(c[i].replay, 1);
	store_claims_free(c, n);

	/* PROCESSED needs force. */
	assert_int_equal(store_replay(t->st, (const char (*)[UUID_STR_LEN])&ids[1], 1, 1, out,
				      &replayed), STORE_OK);
	assert_int_equal(out[0], REPLAY_DONE);
	assert_int_equal(replayed, 1);
	d = get_delivery(t, ids[1]);
	assert_int_equal(d.status, DELIVERY_NEW);
	assert_int_equal(d.processed_at, 0);
	store_delivery_free(&d);

	store_deliveries_free(dd, 1);
	store_deliveries_free(dok, 1);
	store_deliveries_free(dnew, 1);
	store_deliveries_free(dlease, 1);
	store_deliveries_free(dsched, 1);
}

static void test_purge_only_dead(void **state)
{
	struct t *t = *state;
	char ev1[UUID_STR_LEN], ev2[UUID_STR_LEN];
	struct store_attempt_row *a = NULL;
	struct store_claim *c = NULL;
	struct store_delivery d, *left;
	struct store_event got;
	size_t n, na;

	/* ev1: one delivery dead; ev2: one dead, one scheduled, one processed. */
	ingest_one(t, "a", t->t0, 1, ev1);
	ingest_one(t, "b", t->t0 + 1, 3, ev2);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 4);
	record(t, c[0].delivery_id, DELIVERY_FAILED, 1, 0, 404, "Not Found", NULL);
	record(t, c[1].delivery_id, DELIVERY_FAILED, 1, 0, 404, "Not Found", NULL);
	record(t, c[2].delivery_id, DELIVERY_FAILED, 1, clock_now_ms() + HOUR_MS, 503, "x", NULL);
	record(t, c[3].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);

	assert_int_equal(store_dlq_purge(t->st, c[2].delivery_id), STORE_CONFLICT);
	assert_int_equal(store_dlq_purge(t->st, c[3].delivery_id), STORE_CONFLICT);
	assert_int_equal(store_dlq_purge(t->st, "0190f000-0000-7000-8000-000000000000"),
			 STORE_NOT_FOUND);

	/* The last delivery of ev1: the delivery, its attempts and the event go. */
	assert_string_equal(c[0].event_id, ev1);
	assert_int_equal(store_dlq_purge(t->st, c[0].delivery_id), STORE_OK);
	assert_int_equal(store_delivery_get(t->st, c[0].delivery_id, &d), STORE_NOT_FOUND);
	assert_int_equal(store_delivery_attempts(t->st, c[0].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 0);
	assert_int_equal(store_event_get(t->st, ev1, &got), STORE_NOT_FOUND);
	assert_int_equal(store_dlq_purge(t->st, c[0].delivery_id), STORE_NOT_FOUND);

	/* ev2 keeps its other deliveries, so the event stays. */
	assert_int_equal(store_dlq_purge(t->st, c[1].delivery_id), STORE_OK);
	assert_int_equal(store_event_get(t->st, ev2, &got), STORE_OK);
	store_event_free(&got);
	left = deliveries_of(t, ev2, 2);
	store_deliveries_free(left, 2);
	store_claims_free(c, n);
}

static void test_cleanup_keeps_failed(void **state)
{
	struct t *t = *state;
	char ev_done[UUID_STR_LEN], ev_mixed[UUID_STR_LEN], ev_new[UUID_STR_LEN];
	char ev_none[UUID_STR_LEN];
	struct store_attempt_row *a = NULL;
	struct store_delivery *left;
	struct store_claim *c = NULL;
	struct store_event got;
	size_t n, na, deleted = 0;

	ingest_one(t, "done", t->t0, 2, ev_done);
	ingest_one(t, "mixed", t->t0 + 1, 2, ev_mixed);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 4);
	record(t, c[0].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	record(t, c[1].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	record(t, c[2].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	record(t, c[3].delivery_id, DELIVERY_FAILED, 1, 0, 500, "boom", NULL);
	ingest_one(t, "new", t->t0 + 2, 1, ev_new);
	ingest_one(t, "none", t->t0 + 3, 0, ev_none);

	assert_int_equal(store_cleanup(t->st, clock_now_ms() + 1, &deleted), STORE_OK);
	assert_int_equal(deleted, 3);

	assert_int_equal(store_event_get(t->st, ev_done, &got), STORE_NOT_FOUND);
	assert_int_equal(store_event_get(t->st, ev_none, &got), STORE_NOT_FOUND);
	assert_int_equal(store_delivery_attempts(t->st, c[0].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 0);
	left = deliveries_of(t, ev_mixed, 1);
	assert_string_equal(left->id, c[3].delivery_id);
	assert_int_equal(left->status, DELIVERY_FAILED);
	store_deliveries_free(left, 1);
	assert_int_equal(store_delivery_attempts(t->st, c[3].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 1);
	store_attempts_free(a, na);
	left = deliveries_of(t, ev_new, 1);
	store_deliveries_free(left, 1);
	assert_int_equal(store_event_get(t->st, ev_mixed, &got), STORE_OK);
	store_event_free(&got);

	/* Nothing left to clean. */
	assert_int_equal(store_cleanup(t->st, clock_now_ms() + 1, &deleted), STORE_OK);
	assert_int_equal(deleted, 0);
	store_claims_free(c, n);
}

/* Retention (cleanup_after): only PROCESSED deliveries processed at or before
 * the cut are deleted; younger ones stay until a later run. */
static void test_cleanup_keeps_young(void **state)
{
	struct t *t = *state;
	char ev_old[UUID_STR_LEN], ev_young[UUID_STR_LEN];
	struct store_claim *c = NULL;
	struct store_event got;
	int64_t now = clock_now_ms();
	size_t n, deleted = 0;

	ingest_one(t, "old", t->t0, 1, ev_old);
	ingest_one(t, "young", t->t0 + 1, 1, ev_young);
	n = claim_n(t, now, MINUTE_MS, 10, &c);
	assert_int_equal(n, 2);
	for (size_t i = 0; i < 2; i++) {
		struct store_attempt a = {.n = 1, .kind = ATTEMPT_IMMEDIATE, .started_at = now,
					  .duration_ms = 1, .code = 200, .message = "OK"};
		struct store_result r = {
			.delivery_id = c[i].delivery_id,
			.status = DELIVERY_PROCESSED,
			.attempt_count = 1,
			/* the first delivered two hours ago, the second a minute ago */
			.processed_at = i == 0 ? now - 2 * HOUR_MS : now - MINUTE_MS,
			.attempts = &a,
			.n_attempts = 1,
		};
		assert_int_equal(store_record_results(t->st, &r, 1), STORE_OK);
	}
	/* cleanup_after 1h: the old one goes, the young one stays */
	assert_int_equal(store_cleanup(t->st, now - HOUR_MS, &deleted), STORE_OK);
	assert_int_equal(deleted, 1);
	assert_int_equal(store_event_get(t->st, ev_old, &got), STORE_NOT_FOUND);
	assert_int_equal(store_event_get(t->st, ev_young, &got), STORE_OK);
	store_event_free(&got);
	/* an hour later it is old enough too */
	assert_int_equal(store_cleanup(t->st, now + HOUR_MS, &deleted), STORE_OK);
	assert_int_equal(deleted, 1);
	assert_int_equal(store_event_get(t->st, ev_young, &got), STORE_NOT_FOUND);
	store_claims_free(c, n);
}

/* The implicit DLQ (max_retries 0): a delivery that keeps failing is found by how often and how
 * long; failing_since is set by its first failure, kept by later ones, cleared by a
 * success; stats show the oldest still retried. */
static void test_failing_since(void **state)
{
	struct t *t = *state;
	char ev[UUID_STR_LEN];
	struct store_claim *c = NULL;
	struct store_delivery *items = NULL, d;
	struct delivery_filter f = {0};
	struct store_stats st;
	char *cursor = NULL;
	size_t n, ni;

	ingest_one(t, "failing", t->t0, 1, ev);
	int64_t before = clock_now_ms();
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 1);
	record(t, c[0].delivery_id, DELIVERY_FAILED, 1, clock_now_ms() - 1, 500, "boom", NULL);
	d = get_delivery(t, c[0].delivery_id);
	int64_t since = d.failing_since;
	assert_true(since >= before && since <= clock_now_ms());
	store_delivery_free(&d);

	f.limit = 10;
	f.failing_since_ms = clock_now_ms();
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &ni, &cursor), STORE_OK);
	assert_int_equal(ni, 1);
	store_deliveries_free(items, ni);
	f.failing_since_ms = since - 1; /* not failing that long yet */
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &ni, &cursor), STORE_OK);
	assert_int_equal(ni, 0);
	store_deliveries_free(items, ni);
	f.failing_since_ms = 0;
	f.min_attempts = 2;
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &ni, &cursor), STORE_OK);
	assert_int_equal(ni, 0);
	store_deliveries_free(items, ni);
	assert_int_equal(store_stats(t->st, clock_now_ms(), MINUTE_MS, &st), STORE_OK);
	assert_int_equal(st.oldest_failing_since, since);
	store_stats_free(&st);

	/* the second failure keeps when it began */
	store_claims_free(c, n);
	usleep(5000);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 1);
	record(t, c[0].delivery_id, DELIVERY_FAILED, 2, clock_now_ms() - 1, 503, "busy", NULL);
	d = get_delivery(t, c[0].delivery_id);
	assert_int_equal(d.failing_since, since);
	store_delivery_free(&d);
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &ni, &cursor), STORE_OK);
	assert_int_equal(ni, 1); /* min_attempts 2 */
	store_deliveries_free(items, ni);

	/* success clears it, and stats have nothing failing */
	store_claims_free(c, n);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 1);
	record(t, c[0].delivery_id, DELIVERY_PROCESSED, 3, 0, 0, NULL, NULL);
	d = get_delivery(t, c[0].delivery_id);
	assert_int_equal(d.failing_since, 0);
	store_delivery_free(&d);
	assert_int_equal(store_stats(t->st, clock_now_ms(), MINUTE_MS, &st), STORE_OK);
	assert_int_equal(st.oldest_failing_since, 0);
	store_stats_free(&st);
	store_claims_free(c, n);
}

/* ---- outbox relay ------------------------------------------------------------------- */

struct fanout {
	const char (*subs)[UUID_STR_LEN];
	int calls;
};

/* order.* goes to two subscriptions, everything else to none. */
static void fanout_cb(void *ctx, const char *event_type, const char (**ids)[UUID_STR_LEN],
		      size_t *n)
{
	struct fanout *fo = ctx;

	fo->calls++;
	if (strncmp(event_type, "order.", 6) == 0) {
		*ids = fo->subs;
		*n = 2;
	} else {
		*ids = NULL;
		*n = 0;
	}
}

/* The one delivery of the listing filtered by event type. */
static void find_by_type(struct t *t, const char *type, size_t expect,
			 struct store_delivery **items)
{
	struct delivery_filter f = {.event_type = type, .limit = 100};
	char *cursor = NULL;
	size_t n = 0;

	assert_int_equal(store_deliveries_list(t->st, &f, items, &n, &cursor), STORE_OK);
	assert_int_equal(n, expect);
	assert_null(cursor);
}

static void test_relay_outbox(void **state)
{
	struct t *t = *state;
	struct fanout fo = {(const char (*)[UUID_STR_LEN])t->subs, 0};
	static const unsigned char bin[] = {0x01, 0x00, 0x02};
	struct store_delivery *items = NULL;
	struct store_event got;
	size_t relayed = 0;

	assert_int_equal(backend->producer_insert(&t->db, "order.created", NULL, NULL,
						  "{\"order\":1}", 11, 1), 0);
	assert_int_equal(backend->producer_insert(&t->db, "order.paid", NULL, NULL, bin,
						  sizeof(bin), 0), 0);
	assert_int_equal(backend->producer_insert(&t->db, "audit.logged", NULL, NULL, "{}", 2,
						  1), 0);
	assert_int_equal(backend->producer_insert(&t->db, "order.created", "shop", "o-9",
						  "{\"order\":9}", 11, 1), 0);
	assert_int_equal(backend->producer_insert(&t->db, "order.created", "shop", "o-9",
						  "{\"order\":9}", 11, 1), 0);

	/* The limit bounds one transaction; the rest waits for the next call. */
	assert_int_equal(store_relay_outbox(t->st, 2, fanout_cb, &fo, &relayed), STORE_OK);
	assert_int_equal(relayed, 2);
	assert_int_equal(store_relay_outbox(t->st, 100, fanout_cb, &fo, &relayed), STORE_OK);
	assert_int_equal(relayed, 3);
	assert_int_equal(store_relay_outbox(t->st, 100, fanout_cb, &fo, &relayed), STORE_OK);
	assert_int_equal(relayed, 0);
	assert_int_equal(fo.calls, 5);

	/* Two order.created events (the o-9 duplicate dropped), two deliveries each. */
	find_by_type(t, "order.created", 4, &items);
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(items[i].status, DELIVERY_NEW);
		assert_true(items[i].next_attempt_at > 0);
	}
	assert_int_equal(store_event_get(t->st, items[0].event_id, &got), STORE_OK);
	assert_true(uuid_valid(got.id));
	assert_string_equal(got.content_type, "application/json");
	assert_string_equal(got.source, "");
	assert_true(got.created_at > 0);
	assert_int_equal(got.payload_len, 11);
	assert_memory_equal(got.payload, "{\"order\":1}", 11);
	store_event_free(&got);
	store_deliveries_free(items, 4);

	/* A binary payload comes through byte for byte. */
	find_by_type(t, "order.paid", 2, &items);
	assert_int_equal(store_event_get(t->st, items[0].event_id, &got), STORE_OK);
	assert_int_equal(got.payload_len, sizeof(bin));
	assert_memory_equal(got.payload, bin, sizeof(bin));
	store_event_free(&got);
	store_deliveries_free(items, 2);

	find_by_type(t, "audit.logged", 0, &items);
}

/* ---- jobs ------------------------------------------------------------------------------ */

/* A job's progress is written only while it runs: a cancel between two progress writes
 * stays, and the late write is told the job is gone (store.h). */
static void test_job_cancel_is_not_overwritten(void **state)
{
	struct t *t = *state;
	struct store_job j = {
		.kind = "replay", .state = "running", .filter = "{}", .rate = 10, .matched = 5,
		.actor = "admin", .created_at = clock_now_ms(), .updated_at = clock_now_ms(),
	};
	struct store_job got;

	uuid_v7(j.id);
	assert_int_equal(store_job_create(t->st, &j), STORE_OK);
	j.done = 2;
	assert_int_equal(store_job_update(t->st, &j), STORE_OK);

	struct store_job cancel = j;
	snprintf(cancel.state, sizeof(cancel.state), "cancelled");
	assert_int_equal(store_job_update(t->st, &cancel), STORE_OK);

	j.done = 3; /* the replay's next progress write, still saying "running" */
	assert_int_equal(store_job_update(t->st, &j), STORE_NOT_FOUND);
	assert_int_equal(store_job_get(t->st, j.id, &got), STORE_OK);
	assert_string_equal(got.state, "cancelled");
	assert_int_equal(got.done, 2);
	store_job_free(&got);
}

/* GET /v1/jobs: newest first (created_at, then id for a tie), keyset pages that neither
 * skip nor repeat a job, a state filter, and a foreign cursor refused. */
static void test_jobs_list_pages(void **state)
{
	struct t *t = *state;
	static const char *const states[] = {"done", "running", "cancelled", "done", "failed"};
	char ids[5][UUID_STR_LEN];
	int64_t base = clock_now_ms() - 100000;
	struct store_job *items = NULL;
	size_t n = 0;
	char *next = NULL, *again = NULL;

	for (int i = 0; i < 5; i++) {
		struct store_job j = {.kind = "replay", .filter = "{}", .rate = 10, .matched = 10,
				      .done = i, .actor = "admin"};
		snprintf(j.state, sizeof(j.state), "%s", states[i]);
		/* jobs 2 and 3 share their created_at: the id decides */
		j.created_at = j.updated_at = base + (i == 3 ? 2000 : i * 1000);
		uuid_v7(j.id);
		memcpy(ids[i], j.id, UUID_STR_LEN);
		assert_int_equal(store_job_create(t->st, &j), STORE_OK);
	}
	/* newest first: 4, then 3 and 2 (same time: the greater id first), 1, 0 */
	const int order[5] = {4, 3, 2, 1, 0};
	assert_true(strcmp(ids[3], ids[2]) > 0);
	assert_int_equal(store_jobs_list(t->st, NULL, NULL, 2, &items, &n, &next), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(items[0].id, ids[order[0]]);
	assert_string_equal(items[1].id, ids[order[1]]);
	assert_string_equal(items[0].state, "failed");
	assert_string_equal(items[0].actor, "admin");
	assert_int_equal(items[0].done, 4);
	assert_non_null(next);
	store_jobs_free(items, n);
	assert_int_equal(store_jobs_list(t->st, NULL, next, 2, &items, &n, &again), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(items[0].id, ids[order[2]]);
	assert_string_equal(items[1].id, ids[order[3]]);
	assert_non_null(again);
	store_jobs_free(items, n);
	free(next);
	assert_int_equal(store_jobs_list(t->st, NULL, again, 2, &items, &n, &next), STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(items[0].id, ids[order[4]]);
	assert_null(next); /* the last page */
	store_jobs_free(items, n);
	free(again);

	assert_int_equal(store_jobs_list(t->st, "done", NULL, 10, &items, &n, &next), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(items[0].id, ids[3]);
	assert_string_equal(items[1].id, ids[0]);
	assert_null(next);
	store_jobs_free(items, n);
	assert_int_equal(store_jobs_list(t->st, "cancelled", NULL, 10, &items, &n, &next),
			 STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(items[0].id, ids[2]);
	store_jobs_free(items, n);

	assert_int_equal(store_jobs_list(t->st, NULL, "bd:12:abc", 10, &items, &n, &next),
			 STORE_INVALID);
	assert_int_equal(store_jobs_list(t->st, NULL, "j:x:abc", 10, &items, &n, &next),
			 STORE_INVALID);
	assert_int_equal(store_jobs_list(t->st, NULL, NULL, 0, &items, &n, &next), STORE_INVALID);
	assert_null(items);
}

/* ---- ownership ---------------------------------------------------------------------- */

static void test_second_open_is_locked(void **state)
{
	struct t *t = *state;
	store *other = NULL;
	char err[512] = "";

	if (!backend->has_owner_lock)
		skip();
	assert_int_equal(store_open(t->db.dsn, "intruder", &other, err, sizeof(err)),
			 STORE_LOCKED);
	assert_null(other);
	assert_non_null(strstr(err, "another outboxd is already using"));
	assert_non_null(strstr(err, ".lock is held"));

	/* Once the owner closes, the next one gets in, with its data intact. */
	ingest_one(t, "a", t->t0, 1, NULL);
	store_close(t->st);
	t->st = NULL;
	assert_int_equal(store_open(t->db.dsn, "successor", &t->st, err, sizeof(err)), STORE_OK);
	assert_string_equal(store_owner(t->st), "successor");
	assert_string_equal(store_backend_name(t->st), backend->name);
	{
		struct store_claim *c = NULL;
		size_t n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);

		assert_int_equal(n, 1);
		store_claims_free(c, n);
	}
}

/* SQLite's status and kind CHECKs are written with OR (migration 6): an IN list of three
 * constants builds a temporary b-tree on every insert. A database made before migration 6
 * is rewritten when opened, and the checks still refuse bad values. */
static void sqlite_exec_ok(sqlite3 *conn, const char *sql)
{
	char *msg = NULL;

	if (sqlite3_exec(conn, sql, NULL, NULL, &msg) != SQLITE_OK)
		fail_msg("%s: %s", sql, msg);
}

static int sqlite_schema_has(const char *path, const char *table, const char *text)
{
	sqlite3 *conn = NULL;
	sqlite3_stmt *s = NULL;
	int found = 0;

	assert_int_equal(sqlite3_open_v2(path, &conn, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(conn, "SELECT instr(sql, ?2) > 0 FROM sqlite_master"
						  " WHERE type = 'table' AND name = ?1",
					    -1, &s, NULL),
			 SQLITE_OK);
	sqlite3_bind_text(s, 1, table, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, text, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(s), SQLITE_ROW);
	found = sqlite3_column_int(s, 0);
	sqlite3_finalize(s);
	sqlite3_close(conn);
	return found;
}

static void test_sqlite_checks_without_in_lists(void **state)
{
	struct t *t = *state;
	sqlite3 *conn = NULL;
	char err[512] = "";

	if (strcmp(backend->name, "sqlite") != 0)
		skip();
	store_close(t->st);
	t->st = NULL;
	assert_true(sqlite_schema_has(t->db.path, "deliveries",
				      "CHECK (status = 'NEW' OR status = 'PROCESSED' OR status = 'FAILED')"));
	assert_false(sqlite_schema_has(t->db.path, "deliveries", "status IN ("));
	assert_true(sqlite_schema_has(t->db.path, "attempts",
				      "CHECK (kind = 'immediate' OR kind = 'scheduled' OR kind = 'manual')"));

	/* Make it look like a database from before migration 6 (without what later
	 * migrations added), then reopen. */
	assert_int_equal(sqlite3_open_v2(t->db.path, &conn, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	sqlite_exec_ok(conn, "DROP INDEX deliveries_dead_letter_pending;"
			     "ALTER TABLE deliveries DROP COLUMN dead_letter_pending;"
			     "ALTER TABLE events DROP COLUMN webhook_id;"
			     "ALTER TABLE deliveries DROP COLUMN starts_scheduled;"
			     "ALTER TABLE attempts DROP COLUMN not_sent;"
			     "DROP TABLE store_meta; DROP TABLE tokens; DROP INDEX deliveries_order;"
			     "DROP INDEX deliveries_failing;"
			     "ALTER TABLE deliveries DROP COLUMN failing_since;"
			     "DROP INDEX deliveries_blocked;"
			     "ALTER TABLE deliveries DROP COLUMN order_key;"
			     "ALTER TABLE deliveries DROP COLUMN blocked;"
			     "ALTER TABLE subscriptions DROP COLUMN ordering;");
	sqlite_exec_ok(conn, "BEGIN; PRAGMA writable_schema = ON;"
			     "UPDATE sqlite_master SET sql = replace(sql,"
			     " 'CHECK (status = ''NEW'' OR status = ''PROCESSED'' OR status = ''FAILED'')',"
			     " 'CHECK (status IN (''NEW'', ''PROCESSED'', ''FAILED''))')"
			     " WHERE name = 'deliveries';"
			     "UPDATE sqlite_master SET sql = replace(sql,"
			     " 'CHECK (kind = ''immediate'' OR kind = ''scheduled'' OR kind = ''manual'')',"
			     " 'CHECK (kind IN (''immediate'', ''scheduled'', ''manual''))')"
			     " WHERE name = 'attempts';"
			     "PRAGMA schema_version = 1000; PRAGMA writable_schema = OFF;"
			     "DELETE FROM schema_migrations WHERE version >= 6; COMMIT;");
	sqlite3_close(conn);
	assert_true(sqlite_schema_has(t->db.path, "deliveries", "status IN ("));

	assert_int_equal(store_open(t->db.dsn, "test-owner", &t->st, err, sizeof(err)), STORE_OK);
	assert_false(sqlite_schema_has(t->db.path, "deliveries", "status IN ("));
	assert_false(sqlite_schema_has(t->db.path, "attempts", "kind IN ("));
	ingest_one(t, "a", t->t0, 1, NULL);

	/* The checks still hold. */
	assert_int_equal(sqlite3_open_v2(t->db.path, &conn, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	sqlite3_busy_timeout(conn, 5000);
	sqlite_exec_ok(conn, "PRAGMA integrity_check");
	assert_int_equal(sqlite3_exec(conn, "UPDATE deliveries SET status = 'DONE'", NULL, NULL, NULL),
			 SQLITE_CONSTRAINT);
	assert_int_equal(sqlite3_exec(conn, "INSERT INTO attempts(delivery_id, n, kind, started_at,"
					    " duration_ms, code) SELECT id, 1, 'later', 0, 0, 200"
					    " FROM deliveries",
				      NULL, NULL, NULL),
			 SQLITE_CONSTRAINT);
	sqlite3_close(conn);
}

static void test_open_rejects_bad_dsn(void **state)
{
	store *st = NULL;
	char err[256];

	assert_int_equal(store_open("mysql://x", "o", &st, err, sizeof(err)), STORE_INVALID);
	assert_int_equal(store_open("sqlite:", "o", &st, err, sizeof(err)), STORE_INVALID);
	assert_null(st);
	assert_string_not_equal(store_strerror(STORE_LOCKED), store_strerror(STORE_ERROR));
}

/* ---- listing -------------------------------------------------------------------------- */

/* 45 deliveries over 3 subscriptions and 15 events, with ties in every sort key. */
static void make_history(struct t *t)
{
	struct store_claim *c = NULL;
	size_t n;

	for (int i = 0; i < 15; i++)
		ingest_one(t, i % 2 ? "user.created" : "order.paid", t->t0 + (i / 3) * 1000, 3,
			   NULL);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 1000, &c);
	assert_int_equal(n, 45);
	/* A third succeed, a third are dead, the rest stay scheduled; attempt counts
	 * 1..4 repeat. */
	for (size_t i = 0; i < n; i++) {
		int attempts = (int)(i % 4) + 1;

		if (i % 3 == 0)
			record(t, c[i].delivery_id, DELIVERY_PROCESSED, attempts, 0, 0, NULL,
			       NULL);
		else if (i % 3 == 1)
			record(t, c[i].delivery_id, DELIVERY_FAILED, attempts, 0,
			       i % 2 ? 404 : 503, i % 2 ? "Not Found" : "Service Unavailable",
			       i % 2 ? "no route 100%_match" : "connection refused");
		else
			record(t, c[i].delivery_id, DELIVERY_FAILED, attempts,
			       clock_now_ms() + HOUR_MS, 504, "Gateway Timeout", "timed out");
	}
	store_claims_free(c, n);
}

static int64_t key_of(const struct store_delivery *d, enum delivery_sort sort)
{
	return sort == DELIVERY_SORT_UPDATED ? d->updated_at :
	       sort == DELIVERY_SORT_ATTEMPTS ? d->attempt_count : d->created_at;
}

/* Walks every page of f and checks that each row comes exactly once, in order. */
static size_t walk_pages(struct t *t, struct delivery_filter f)
{
	char (*seen)[UUID_STR_LEN] = calloc(1000, UUID_STR_LEN);
	char *cursor = NULL;
	size_t total = 0, pages = 0;
	int64_t prev_key = 0;
	char prev_id[UUID_STR_LEN] = "";

	do {
		struct store_delivery *items = NULL;
		char *next = NULL;
		size_t n = 0;

		f.cursor = cursor;
		assert_int_equal(store_deliveries_list(t->st, &f, &items, &n, &next), STORE_OK);
		assert_true(n <= f.limit);
		if (next)
			assert_int_equal(n, f.limit);
		for (size_t i = 0; i < n; i++) {
			int64_t key = key_of(&items[i], f.sort);

			if (total) {
				int cmp = key != prev_key ? (key > prev_key ? 1 : -1) :
							    strcmp(items[i].id, prev_id);

				assert_true(f.descending ? cmp < 0 : cmp > 0);
			}
			prev_key = key;
			memcpy(prev_id, items[i].id, UUID_STR_LEN);
			assert_true(total < 1000);
			memcpy(seen[total++], items[i].id, UUID_STR_LEN);
		}
		store_deliveries_free(items, n);
		free(cursor);
		cursor = next;
		pages++;
	} while (cursor);
	qsort(seen, total, UUID_STR_LEN, id_cmp);
	for (size_t i = 1; i < total; i++)
		assert_string_not_equal(seen[i - 1], seen[i]);
	free(seen);
	return total;
}

static void test_pagination(void **state)
{
	struct t *t = *state;
	enum delivery_sort sorts[] = {DELIVERY_SORT_CREATED, DELIVERY_SORT_UPDATED, DELIVERY_SORT_ATTEMPTS};

	make_history(t);
	for (size_t s = 0; s < 3; s++) {
		for (int desc = 0; desc < 2; desc++) {
			struct delivery_filter f = {.sort = sorts[s], .descending = desc};

			f.limit = 7;
			assert_int_equal(walk_pages(t, f), 45);
			f.limit = 45;
			assert_int_equal(walk_pages(t, f), 45);
			f.limit = 1000;
			assert_int_equal(walk_pages(t, f), 45);
			f.limit = 4;
			f.has_status = 1;
			f.status = DELIVERY_FAILED;
			assert_int_equal(walk_pages(t, f), 30);
		}
	}
}

static size_t count_matching(struct t *t, const struct delivery_filter *f)
{
	struct store_delivery *items = NULL;
	char *cursor = NULL;
	size_t n = 0;

	assert_int_equal(store_deliveries_list(t->st, f, &items, &n, &cursor), STORE_OK);
	for (size_t i = 0; i < n; i++) {
		if (f->has_status)
			assert_int_equal(items[i].status, f->status);
		if (f->dead_only)
			assert_true(items[i].status == DELIVERY_FAILED &&
				    items[i].next_attempt_at == 0);
		if (f->subscription_id)
			assert_string_equal(items[i].subscription_id, f->subscription_id);
		if (f->event_type)
			assert_string_equal(items[i].event_type, f->event_type);
		if (f->from_ms)
			assert_true(items[i].created_at >= f->from_ms);
		if (f->to_ms)
			assert_true(items[i].created_at < f->to_ms);
	}
	store_deliveries_free(items, n);
	free(cursor);
	return n;
}

static void test_filters(void **state)
{
	struct t *t = *state;
	struct delivery_filter f = {.limit = 1000};
	struct store_delivery *items = NULL;
	char *cursor = NULL;
	size_t n;

	make_history(t);
	assert_int_equal(count_matching(t, &f), 45);
	f.has_status = 1;
	f.status = DELIVERY_PROCESSED;
	assert_int_equal(count_matching(t, &f), 15);
	f.status = DELIVERY_FAILED;
	assert_int_equal(count_matching(t, &f), 30);
	f.has_status = 0;
	f.dead_only = 1;
	assert_int_equal(count_matching(t, &f), 15);
	f.status = DELIVERY_PROCESSED;
	f.has_status = 1;
	assert_int_equal(count_matching(t, &f), 0);
	f.has_status = 0;

	/* Error text search: plain substring, '%' and '_' are not wildcards. */
	f.q = "refused";
	n = count_matching(t, &f);
	assert_true(n > 0 && n < 15);
	f.q = "100%_match";
	assert_int_equal(count_matching(t, &f) + n, 15);
	f.q = "100%%";
	assert_int_equal(count_matching(t, &f), 0);
	f.q = "Not Found";
	assert_int_equal(count_matching(t, &f), 15 - n);
	f.q = NULL;
	f.dead_only = 0;

	f.subscription_id = t->subs[1];
	assert_int_equal(count_matching(t, &f), 15);
	f.event_type = "user.created";
	assert_int_equal(count_matching(t, &f), 7);
	f.event_type = "user.*";
	assert_int_equal(count_matching(t, &f), 0);
	f.event_type = NULL;

	/* created_at in [t0 + 1000, t0 + 3000): events 3..8, nine per second. */
	f.from_ms = t->t0 + 1000;
	f.to_ms = t->t0 + 3000;
	assert_int_equal(count_matching(t, &f), 6);
	f.subscription_id = NULL;
	assert_int_equal(count_matching(t, &f), 18);
	f.event_type = "order.paid";
	f.has_status = 1;
	f.status = DELIVERY_FAILED;
	n = count_matching(t, &f);
	assert_true(n > 0 && n < 9);
	f = (struct delivery_filter){.limit = 1000, .to_ms = t->t0};
	assert_int_equal(count_matching(t, &f), 0);

	/* Malformed or mismatched cursors and bad limits are refused. */
	f = (struct delivery_filter){.limit = 10};
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &n, &cursor), STORE_OK);
	assert_non_null(cursor);
	store_deliveries_free(items, n);
	f.sort = DELIVERY_SORT_UPDATED;
	f.cursor = cursor;
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &n, &cursor),
			 STORE_INVALID);
	f.sort = DELIVERY_SORT_CREATED;
	f.descending = 1;
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &n, &cursor),
			 STORE_INVALID);
	free((char *)f.cursor);
	f.descending = 0;
	{
		static const char *const bad[] = {"", "garbage", "ca:", "ca:12", "ca:x:abc",
			"ca:12:", "ca:12:not a uuid'; DROP TABLE deliveries; --",
			"ca:99999999999999999999999:0190f000-0000-7000-8000-000000000000"};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			f.cursor = bad[i];
			assert_int_equal(store_deliveries_list(t->st, &f, &items, &n, &cursor),
					 STORE_INVALID);
		}
	}
	f.cursor = NULL;
	f.limit = 0;
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &n, &cursor), STORE_INVALID);
	f.limit = 1001;
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &n, &cursor), STORE_INVALID);
}

/* ---- subscriptions ------------------------------------------------------------------ */

static void test_subscriptions(void **state)
{
	struct t *t = *state;
	struct sub_row a = {.name = "analytics", .config = "{\"endpoint\":\"https://a\"}",
			      .enabled = 1, .created_at = 1000, .updated_at = 1000};
	struct sub_row b = {.name = "billing", .config = "{}", .enabled = 0,
			      .created_at = 2000, .updated_at = 2000};
	struct sub_row got, *list = NULL;
	size_t n = 0;

	uuid_v7(a.id);
	uuid_v7(b.id);
	assert_int_equal(store_sub_create(t->st, &b), STORE_OK);
	assert_int_equal(store_sub_create(t->st, &a), STORE_OK);

	assert_int_equal(store_sub_get(t->st, a.id, &got), STORE_OK);
	assert_string_equal(got.id, a.id);
	assert_string_equal(got.name, "analytics");
	assert_string_equal(got.config, a.config);
	assert_int_equal(got.enabled, 1);
	assert_int_equal(got.created_at, 1000);
	store_sub_free(&got);

	/* Ordered by created_at. */
	assert_int_equal(store_sub_list(t->st, &list, &n), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(list[0].name, "analytics");
	assert_string_equal(list[1].name, "billing");
	assert_int_equal(list[1].enabled, 0);
	store_subs_free(list, n);

	/* Names are unique, on create and on rename. */
	{
		struct sub_row dup = a;

		uuid_v7(dup.id);
		assert_int_equal(store_sub_create(t->st, &dup), STORE_CONFLICT);
		assert_int_equal(store_sub_create(t->st, &a), STORE_CONFLICT);
	}
	b.name = "analytics";
	assert_int_equal(store_sub_update(t->st, &b), STORE_CONFLICT);
	b.name = "billing-v2";
	b.config = "{\"v\":2}";
	b.enabled = 1;
	b.updated_at = 3000;
	assert_int_equal(store_sub_update(t->st, &b), STORE_OK);
	assert_int_equal(store_sub_get(t->st, b.id, &got), STORE_OK);
	assert_string_equal(got.name, "billing-v2");
	assert_string_equal(got.config, "{\"v\":2}");
	assert_int_equal(got.enabled, 1);
	assert_int_equal(got.created_at, 2000);
	assert_int_equal(got.updated_at, 3000);
	store_sub_free(&got);

	assert_int_equal(store_sub_delete(t->st, a.id), STORE_OK);
	assert_int_equal(store_sub_delete(t->st, a.id), STORE_NOT_FOUND);
	assert_int_equal(store_sub_get(t->st, a.id, &got), STORE_NOT_FOUND);
	assert_int_equal(store_sub_update(t->st, &a), STORE_NOT_FOUND);
	assert_int_equal(store_sub_list(t->st, &list, &n), STORE_OK);
	assert_int_equal(n, 1);
	store_subs_free(list, n);

	/* A deleted subscription's deliveries stay for the record. */
	memcpy(t->subs[0], b.id, UUID_STR_LEN);
	{
		char ev[UUID_STR_LEN];
		struct store_delivery *d;

		ingest_one(t, "a", t->t0, 1, ev);
		assert_int_equal(store_sub_delete(t->st, b.id), STORE_OK);
		d = deliveries_of(t, ev, 1);
		assert_string_equal(d->subscription_id, b.id);
		store_deliveries_free(d, 1);
	}
}

/* ---- several instances on one database ---------------------------------------------- */

struct owner_claims {
	store *st;
	char (*got)[UUID_STR_LEN];
	size_t n;
};

static void *owner_claimer(void *arg)
{
	struct owner_claims *oc = arg;

	for (;;) {
		struct store_claim *c = NULL;
		size_t n = 0;

		if (store_claim_due(oc->st, clock_now_ms(), MINUTE_MS, 7, &c, &n) != STORE_OK ||
		    n == 0)
			break;
		for (size_t i = 0; i < n; i++)
			memcpy(oc->got[oc->n++], c[i].delivery_id, UUID_STR_LEN);
		store_claims_free(c, n);
	}
	return NULL;
}

/* Two stores with different owners claim from one database at once: every delivery
 * goes to exactly one of them, a result from the one that does not hold the lease is
 * ignored, and an owner releasing its leases leaves the other's alone. */
static void test_two_owners_share_work(void **state)
{
	struct t *t = *state;
	enum { EVENTS = 120 };
	struct owner_claims a = {t->st, NULL, 0}, b = {NULL, NULL, 0};
	char (*all)[UUID_STR_LEN];
	pthread_t ta, tb;
	struct store_delivery d;
	char err[512];
	size_t released = 0;

	if (backend->has_owner_lock)
		skip(); /* SQLite: one process per database */
	a.got = calloc(EVENTS, UUID_STR_LEN);
	b.got = calloc(EVENTS, UUID_STR_LEN);
	all = calloc(EVENTS, UUID_STR_LEN);
	assert_int_equal(store_open(t->db.dsn, "other-owner", &b.st, err, sizeof(err)), STORE_OK);
	for (int i = 0; i < EVENTS; i++)
		ingest_one(t, "a", t->t0 + i, 1, NULL);
	assert_int_equal(pthread_create(&ta, NULL, owner_claimer, &a), 0);
	assert_int_equal(pthread_create(&tb, NULL, owner_claimer, &b), 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	assert_int_equal(a.n + b.n, EVENTS);
	memcpy(all, a.got, a.n * UUID_STR_LEN);
	memcpy(all[a.n], b.got, b.n * UUID_STR_LEN);
	qsort(all, EVENTS, UUID_STR_LEN, id_cmp);
	for (size_t i = 1; i < EVENTS; i++)
		assert_string_not_equal(all[i - 1], all[i]);

	if (b.n > 0) {
		/* b's delivery, written by a: ignored. */
		record(t, b.got[0], DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
		d = get_delivery(t, b.got[0]);
		assert_int_equal(d.status, DELIVERY_NEW);
		assert_string_equal(d.lease_owner, "other-owner");
		store_delivery_free(&d);
	}
	assert_int_equal(store_release_all(t->st, &released), STORE_OK);
	assert_int_equal(released, a.n);
	if (b.n > 0) {
		d = get_delivery(t, b.got[0]);
		assert_string_equal(d.lease_owner, "other-owner");
		store_delivery_free(&d);
	}
	store_close(b.st);
	free(a.got);
	free(b.got);
	free(all);
}

/* ---- outages and wake-ups (PostgreSQL) ---------------------------------------------- */

/* The database goes away: every call answers STORE_UNAVAILABLE at once, nothing hangs;
 * when it is back the same store works again, with nothing lost, without reopening. */
static void test_outage_then_recovery(void **state)
{
	struct t *t = *state;
	struct store_event_in ev = {
		.event_type = "a", .content_type = "application/json", .payload = "{}",
		.payload_len = 2, .created_at = t->t0,
		.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs, .n_subscriptions = 1,
	};
	char before[UUID_STR_LEN];
	struct store_claim *c = NULL;
	struct store_event got;
	int64_t start, due;
	size_t n = 0;
	int rc = STORE_ERROR;

	if (backend->has_owner_lock || own_server.pid <= 0)
		skip(); /* SQLite has no server; an external server is not ours to stop */
	ingest_one(t, "a", t->t0, 1, before);
	assert_int_equal(pg_server_halt(&own_server), 0);

	start = clock_mono_ms();
	uuid_v7(ev.id);
	assert_int_equal(store_ingest(t->st, &ev, 1), STORE_UNAVAILABLE);
	for (int i = 0; i < 20; i++) {
		assert_int_equal(store_ping(t->st), STORE_UNAVAILABLE);
		assert_int_equal(store_claim_due(t->st, clock_now_ms(), MINUTE_MS, 10, &c, &n),
				 STORE_UNAVAILABLE);
		assert_int_equal(store_next_due(t->st, &due), STORE_UNAVAILABLE);
		assert_int_equal(store_event_get(t->st, before, &got), STORE_UNAVAILABLE);
	}
	assert_true(clock_mono_ms() - start < 2000);

	assert_int_equal(pg_server_start(&own_server), 0);
	/* Reconnects are spaced by a backoff of at most 2 s. */
	for (int i = 0; i < 100 && rc != STORE_OK; i++) {
		uuid_v7(ev.id);
		rc = store_ingest(t->st, &ev, 1);
		if (rc != STORE_OK)
			usleep(50 * 1000);
	}
	assert_int_equal(rc, STORE_OK);
	for (int i = 0; i < 100 && store_ping(t->st) != STORE_OK; i++)
		usleep(50 * 1000);
	assert_int_equal(store_ping(t->st), STORE_OK);
	assert_int_equal(store_event_get(t->st, before, &got), STORE_OK);
	store_event_free(&got);
	for (int i = 0; i < 100; i++) {
		rc = store_claim_due(t->st, clock_now_ms(), MINUTE_MS, 10, &c, &n);
		if (rc == STORE_OK)
			break;
		usleep(50 * 1000);
	}
	assert_int_equal(rc, STORE_OK);
	assert_int_equal(n, 2);
	store_claims_free(c, n);
}

struct wake_count {
	pthread_mutex_t mu;
	int calls;
};

static void count_wake(void *ctx)
{
	struct wake_count *w = ctx;

	pthread_mutex_lock(&w->mu);
	w->calls++;
	pthread_mutex_unlock(&w->mu);
}

static int wakes(struct wake_count *w)
{
	int n;

	pthread_mutex_lock(&w->mu);
	n = w->calls;
	pthread_mutex_unlock(&w->mu);
	return n;
}

static int wait_wakes(struct wake_count *w, int more_than)
{
	for (int i = 0; i < 200; i++) {
		if (wakes(w) > more_than)
			return 1;
		usleep(10 * 1000);
	}
	return 0;
}

/* Another instance's ingest, a producer's outbox insert and a replay each wake this
 * store's listener, a subscription change calls the subscriptions callback; after
 * store_on_work(NULL) nothing calls back any more. */
static void test_work_notifications(void **state)
{
	struct t *t = *state;
	/* Static: a failed assertion leaves the test before store_on_work(NULL), and the
	 * listener may still call back until teardown closes the store. */
	static struct wake_count w = {PTHREAD_MUTEX_INITIALIZER, 0};
	struct store_claim *c = NULL;
	enum store_replay_outcome out;
	store *other = NULL;
	char err[512], id[UUID_STR_LEN];
	size_t n, replayed;
	int seen;

	if (backend->has_owner_lock)
		skip(); /* SQLite: one process, no listener; store_on_work is a no-op */
	w.calls = 0;
	store_on_work(t->st, count_wake, &w);
	assert_true(wait_wakes(&w, 0)); /* the first connect always wakes once */
	seen = wakes(&w);
	assert_true(seen >= 1);

	assert_int_equal(store_open(t->db.dsn, "other-owner", &other, err, sizeof(err)), STORE_OK);
	{
		struct store_event_in ev = {
			.event_type = "a", .content_type = "application/json", .payload = "{}",
			.payload_len = 2, .created_at = t->t0,
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 1,
		};

		uuid_v7(ev.id);
		assert_int_equal(store_ingest(other, &ev, 1), STORE_OK);
	}
	assert_true(wait_wakes(&w, seen));
	seen = wakes(&w);

	assert_int_equal(backend->producer_insert(&t->db, "order.created", NULL, NULL, "{}", 2, 1),
			 0);
	assert_true(wait_wakes(&w, seen));
	seen = wakes(&w);

	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 1);
	record(t, c[0].delivery_id, DELIVERY_FAILED, 1, 0, 404, "Not Found", NULL);
	memcpy(id, c[0].delivery_id, UUID_STR_LEN);
	store_claims_free(c, n);
	usleep(100 * 1000);
	seen = wakes(&w);
	assert_int_equal(store_replay(other, (const char (*)[UUID_STR_LEN])id, 1, 0, &out,
				      &replayed), STORE_OK);
	assert_int_equal(out, REPLAY_DONE);
	assert_true(wait_wakes(&w, seen));

	/* A subscription created elsewhere reaches the other callback. */
	{
		static struct wake_count subs = {PTHREAD_MUTEX_INITIALIZER, 0};
		struct sub_row sub = {.name = "elsewhere", .config = "{}", .enabled = 1};

		subs.calls = 0;
		store_on_subscriptions_changed(t->st, count_wake, &subs);
		assert_true(wait_wakes(&subs, 0)); /* once at connect: changes may be missed */
		seen = wakes(&subs);
		uuid_v7(sub.id);
		assert_int_equal(store_sub_create(other, &sub), STORE_OK);
		assert_true(wait_wakes(&subs, seen));
		store_on_subscriptions_changed(t->st, NULL, NULL);
	}

	store_on_work(t->st, NULL, NULL);
	seen = wakes(&w);
	assert_int_equal(backend->producer_insert(&t->db, "order.created", NULL, NULL, "{}", 2, 1),
			 0);
	usleep(300 * 1000);
	assert_int_equal(wakes(&w), seen);
	store_close(other);
}

/* ---- per-key ordering ------------------------------------------------------------------ */

/* Ingests one event with partition_key key (NULL: none) for the three test subscriptions. */
static void ingest_keyed(struct t *t, const char *key, int64_t created_at, char id[UUID_STR_LEN])
{
	struct store_event_in ev = {
		.event_type = "keyed",
		.source = "",
		.partition_key = key,
		.content_type = "application/json",
		.payload = "{}",
		.payload_len = 2,
		.created_at = created_at,
		.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
		.n_subscriptions = 3,
	};

	uuid_v7(ev.id);
	assert_int_equal(store_ingest(t->st, &ev, 1), STORE_OK);
	memcpy(id, ev.id, UUID_STR_LEN);
}

/* The id of event ev's delivery to test subscription k. */
static void delivery_of(struct t *t, const char *ev, int k, char out[UUID_STR_LEN])
{
	struct store_delivery *d = deliveries_of(t, ev, 3);
	out[0] = '\0';
	for (size_t i = 0; i < 3; i++)
		if (strcmp(d[i].subscription_id, t->subs[k]) == 0)
			memcpy(out, d[i].id, UUID_STR_LEN);
	store_deliveries_free(d, 3);
	assert_true(out[0] != '\0');
}

/* Claims everything due and checks it is exactly the deliveries in want (n of them). */
static void claim_exactly(struct t *t, const char (*want)[UUID_STR_LEN], size_t n)
{
	struct store_claim *c = NULL;
	size_t got = claim_n(t, clock_now_ms(), MINUTE_MS, 100, &c);
	for (size_t i = 0; i < got; i++) {
		int found = 0;
		for (size_t k = 0; k < n; k++)
			found |= strcmp(c[i].delivery_id, want[k]) == 0;
		if (!found)
			fprintf(stderr, "claimed %s, not expected\n", c[i].delivery_id);
		assert_true(found);
	}
	assert_int_equal(got, n);
	store_claims_free(c, got);
}

/* Subscription 0 orders by key and blocks on a dead delivery, 1 orders and passes dead
 * ones over, 2 does not order: what each may claim, a dead head, parking, replay. */
static void test_key_ordering(void **state)
{
	struct t *t = *state;
	static const int modes[3] = {ORDERING_KEY_BLOCK, ORDERING_KEY_SKIP, ORDERING_NONE};
	static const char *const keys[5] = {"k1", "k1", "k2", NULL, "k1"};
	char ev[5][UUID_STR_LEN], d[3][5][UUID_STR_LEN], want[16][UUID_STR_LEN];
	size_t n = 0, parked = 0, unparked = 0, replayed = 0;
	enum store_replay_outcome out;

	for (int k = 0; k < 3; k++) {
		char name[16];
		snprintf(name, sizeof(name), "ordered-%d", k);
		struct sub_row row = {.name = name, .config = "{}", .enabled = 1,
				      .ordering = modes[k]};
		memcpy(row.id, t->subs[k], UUID_STR_LEN);
		assert_int_equal(store_sub_create(t->st, &row), STORE_OK);
	}
	for (int i = 0; i < 5; i++)
		ingest_keyed(t, keys[i], t->t0 + i, ev[i]);
	for (int k = 0; k < 3; k++)
		for (int i = 0; i < 5; i++)
			delivery_of(t, ev[i], k, d[k][i]);

	/* ordered: the first of each key and the keyless one; unordered: all */
	int first[] = {0, 2, 3};
	for (int k = 0; k < 2; k++)
		for (int j = 0; j < 3; j++)
			memcpy(want[n++], d[k][first[j]], UUID_STR_LEN);
	for (int i = 0; i < 5; i++)
		memcpy(want[n++], d[2][i], UUID_STR_LEN);
	claim_exactly(t, (const char (*)[UUID_STR_LEN])want, n);

	/* the sweep parks what waits its turn (not shown as blocked: nothing is dead) */
	assert_int_equal(store_order_sweep(t->st, clock_now_ms(), 0, &parked, &unparked),
			 STORE_OK);
	struct store_delivery got = get_delivery(t, d[1][1]);
	assert_int_equal(got.next_attempt_at, 0);
	assert_int_equal(got.blocked, 0);
	store_delivery_free(&got);

	/* the k1 heads die (the skipping subscription's result lets its next one go); the
	 * rest succeeds */
	for (int k = 0; k < 2; k++) {
		record_as(t, d[k][0], DELIVERY_FAILED, 1, 0, 500, "Internal Server Error", NULL,
			  k == 1);
		record(t, d[k][2], DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
		record(t, d[k][3], DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	}
	for (int i = 0; i < 5; i++)
		record(t, d[2][i], DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);

	/* blocking: nothing more of k1; skipping: the next k1, then the one after */
	claim_exactly(t, &d[1][1], 1);
	record_as(t, d[1][1], DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL, 1);
	claim_exactly(t, &d[1][4], 1);
	record(t, d[1][4], DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	claim_exactly(t, NULL, 0);

	/* the sweep parks what waits behind the dead head, and only that */
	assert_int_equal(store_order_sweep(t->st, clock_now_ms(), 1, &parked, &unparked),
			 STORE_OK);
	assert_int_equal(parked, 2);
	assert_int_equal(unparked, 0);
	got = get_delivery(t, d[0][1]);
	assert_int_equal(got.blocked, 1);
	assert_int_equal(got.status, DELIVERY_NEW);
	assert_int_equal(got.next_attempt_at, 0);
	store_delivery_free(&got);
	assert_int_equal(store_order_sweep(t->st, clock_now_ms(), 1, &parked, &unparked),
			 STORE_OK);
	assert_int_equal(parked + unparked, 0);

	/* replaying the head wakes them, but they still wait for it */
	assert_int_equal(store_replay(t->st, &d[0][0], 1, 0, &out, &replayed), STORE_OK);
	assert_int_equal(replayed, 1);
	assert_int_equal(store_order_sweep(t->st, clock_now_ms(), 1, &parked, &unparked),
			 STORE_OK);
	assert_int_equal(unparked, 2);
	got = get_delivery(t, d[0][4]);
	assert_int_equal(got.blocked, 0);
	assert_true(got.next_attempt_at > 0);
	store_delivery_free(&got);
	for (int i = 0; i < 5; i++) {
		if (i == 2 || i == 3)
			continue;
		claim_exactly(t, &d[0][i], 1);
		record(t, d[0][i], DELIVERY_PROCESSED, 2, 0, 0, NULL, NULL);
	}
	claim_exactly(t, NULL, 0);

	/* turning ordering off frees a blocked key at the next sweep */
	char late[2][UUID_STR_LEN], ld[2][UUID_STR_LEN];
	ingest_keyed(t, "k3", clock_now_ms() - 10, late[0]);
	ingest_keyed(t, "k3", clock_now_ms() - 5, late[1]);
	delivery_of(t, late[0], 0, ld[0]);
	delivery_of(t, late[1], 0, ld[1]);
	struct store_claim *c = NULL;
	size_t got_n = claim_n(t, clock_now_ms(), MINUTE_MS, 100, &c);
	for (size_t i = 0; i < got_n; i++)
		record(t, c[i].delivery_id,
		       strcmp(c[i].delivery_id, ld[0]) == 0 ? DELIVERY_FAILED : DELIVERY_PROCESSED,
		       1, 0, strcmp(c[i].delivery_id, ld[0]) == 0 ? 500 : 0, "x", NULL);
	store_claims_free(c, got_n);
	assert_int_equal(store_order_sweep(t->st, clock_now_ms(), 1, &parked, &unparked),
			 STORE_OK);
	assert_int_equal(parked, 1);
	struct sub_row row = {.name = "ordered-0", .config = "{}", .enabled = 1,
			      .ordering = ORDERING_NONE};
	memcpy(row.id, t->subs[0], UUID_STR_LEN);
	assert_int_equal(store_sub_update(t->st, &row), STORE_OK);
	assert_int_equal(store_order_sweep(t->st, clock_now_ms(), 1, &parked, &unparked),
			 STORE_OK);
	assert_int_equal(unparked, 1);
	/* ld[1] is due (with the second k3 delivery of the skipping subscription) */
	got_n = claim_n(t, clock_now_ms(), MINUTE_MS, 100, &c);
	int freed = 0;
	for (size_t i = 0; i < got_n; i++)
		freed |= strcmp(c[i].delivery_id, ld[1]) == 0;
	store_claims_free(c, got_n);
	assert_true(freed);
}

/* Named API tokens: kept with their hash, scopes and expiry, a name once, listed oldest
 * first, their last use recorded (never moved back), revoked once. */
static void test_tokens(void **state)
{
	struct t *t = *state;
	struct store_token a = {.name = "ci", .scopes = "ingest", .prefix = "obx_aaaa",
				.actor = "admin", .created_at = 1000, .expires_at = 90000};
	struct store_token b = {.name = "grafana", .scopes = "read", .prefix = "obx_bbbb",
				.created_at = 2000};
	struct store_token *list = NULL;
	size_t n = 0;

	uuid_v7(a.id);
	uuid_v7(b.id);
	memset(a.hash, 'a', 64);
	memset(b.hash, 'b', 64);
	assert_int_equal(store_token_create(t->st, &b), STORE_OK);
	assert_int_equal(store_token_create(t->st, &a), STORE_OK);

	/* a name is unique; a short hash is refused before the backend */
	struct store_token dup = b;
	uuid_v7(dup.id);
	memset(dup.hash, 'c', 64);
	assert_int_equal(store_token_create(t->st, &dup), STORE_CONFLICT);
	dup.name = "other";
	dup.hash[10] = '\0';
	assert_int_equal(store_token_create(t->st, &dup), STORE_INVALID);

	assert_int_equal(store_token_list(t->st, &list, &n), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(list[0].id, a.id);
	assert_string_equal(list[0].name, "ci");
	assert_string_equal(list[0].scopes, "ingest");
	assert_string_equal(list[0].hash, a.hash);
	assert_string_equal(list[0].prefix, "obx_aaaa");
	assert_string_equal(list[0].actor, "admin");
	assert_int_equal(list[0].created_at, 1000);
	assert_int_equal(list[0].expires_at, 90000);
	assert_int_equal(list[0].last_used_at, 0);
	assert_null(list[1].actor);
	assert_int_equal(list[1].expires_at, 0);
	store_tokens_free(list, n);

	/* a last use is recorded; an older one (another instance, late) does not move it
	 * back */
	assert_int_equal(store_token_touch(t->st, a.id, 5000), STORE_OK);
	assert_int_equal(store_token_touch(t->st, a.id, 4000), STORE_OK);
	assert_int_equal(store_token_touch(t->st, a.id, 0), STORE_INVALID);
	assert_int_equal(store_token_list(t->st, &list, &n), STORE_OK);
	assert_int_equal(list[0].last_used_at, 5000);
	assert_int_equal(list[1].last_used_at, 0);
	store_tokens_free(list, n);
	dup.expires_at = -1;
	assert_int_equal(store_token_create(t->st, &dup), STORE_INVALID);

	assert_int_equal(store_token_delete(t->st, a.id), STORE_OK);
	assert_int_equal(store_token_delete(t->st, a.id), STORE_NOT_FOUND);
	assert_int_equal(store_token_touch(t->st, a.id, 6000), STORE_NOT_FOUND);
	assert_int_equal(store_token_list(t->st, &list, &n), STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(list[0].name, "grafana");
	store_tokens_free(list, n);
}

/* ---- subscription configs sealed at rest (store/secrets.c) ------------------------------ */

static struct secretbox_key test_key(unsigned char fill)
{
	unsigned char raw[SECRETBOX_KEY_LEN];
	struct secretbox_key k;

	memset(raw, fill, sizeof(raw));
	secretbox_key_from_bytes(raw, &k);
	return k;
}

static void expect_config(struct t *t, const char *id, const char *config)
{
	struct sub_row got;

	assert_int_equal(store_sub_get(t->st, id, &got), STORE_OK);
	assert_string_equal(got.config, config);
	store_sub_free(&got);
}

static void test_sealed_subscriptions(void **state)
{
	struct t *t = *state;
	struct secretbox_key k1 = test_key(1), k2 = test_key(2), k3 = test_key(3);
	struct sub_row old = {.name = "old", .config = "{\"auth\":{\"password\":\"pw-1\"}}",
			      .enabled = 1, .created_at = 1000, .updated_at = 1000};
	struct sub_row new = {.name = "new", .config = "{\"secret\":\"whsec_x\"}", .enabled = 1};
	struct sub_row got, *list = NULL;
	size_t n = 0, migrated = 9, resealed = 9, skipped = 9;
	char err[1024], dsn[sizeof(t->db.dsn)];

	/* Written in clear before the store had a key (an older outboxd). */
	uuid_v7(old.id);
	assert_int_equal(store_sub_create(t->st, &old), STORE_OK);
	assert_int_equal(store_set_secret_key(t->st, &k1), STORE_OK);
	expect_config(t, old.id, old.config); /* a clear row reads as it is */
	assert_int_equal(store_secrets_prepare(t->st, &migrated, err, sizeof(err)), STORE_OK);
	assert_int_equal(migrated, 1);
	assert_int_equal(store_secrets_prepare(t->st, &migrated, err, sizeof(err)), STORE_OK);
	assert_int_equal(migrated, 0);
	/* sealing is not a change of the subscription */
	assert_int_equal(store_sub_get(t->st, old.id, &got), STORE_OK);
	assert_string_equal(got.config, old.config);
	assert_int_equal(got.updated_at, 1000);
	store_sub_free(&got);

	/* Sealed on the way in, opened on the way out. */
	uuid_v7(new.id);
	assert_int_equal(store_sub_create(t->st, &new), STORE_OK);
	new.config = "{\"secret\":\"whsec_y\"}";
	assert_int_equal(store_sub_update(t->st, &new), STORE_OK);
	expect_config(t, new.id, new.config);
	assert_int_equal(store_sub_list(t->st, &list, &n), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(list[0].config, old.config);
	store_subs_free(list, n);

	/* Another key opens nothing, and the start check says which row, which key. */
	assert_int_equal(store_set_secret_key(t->st, &k2), STORE_OK);
	assert_int_equal(store_sub_get(t->st, old.id, &got), STORE_ERROR);
	assert_null(got.config);
	assert_int_equal(store_sub_list(t->st, &list, &n), STORE_ERROR);
	assert_null(list);
	assert_int_equal(n, 0);
	assert_int_equal(store_secrets_prepare(t->st, &migrated, err, sizeof(err)), STORE_ERROR);
	assert_non_null(strstr(err, old.id));
	assert_non_null(strstr(err, k1.id));
	assert_non_null(strstr(err, k2.id));
	assert_null(strstr(err, "pw-1"));

	/* Rotation k1 -> k2, then again, as after an interruption: nothing left to do. */
	assert_int_equal(store_set_secret_key(t->st, &k1), STORE_OK);
	assert_int_equal(store_secrets_rotate(t->st, &k2, &resealed, &skipped, err, sizeof(err)),
			 STORE_OK);
	assert_int_equal(resealed, 2);
	assert_int_equal(skipped, 0);
	assert_int_equal(store_secrets_rotate(t->st, &k2, &resealed, &skipped, err, sizeof(err)),
			 STORE_OK);
	assert_int_equal(resealed, 0);
	assert_int_equal(skipped, 2);
	/* From a key that sealed nothing here: refused before any row changes. */
	assert_int_equal(store_set_secret_key(t->st, &k3), STORE_OK);
	assert_int_equal(store_secrets_rotate(t->st, &k1, &resealed, &skipped, err, sizeof(err)),
			 STORE_ERROR);
	assert_non_null(strstr(err, k2.id));
	assert_int_equal(resealed, 0);
	assert_int_equal(store_set_secret_key(t->st, &k2), STORE_OK);
	expect_config(t, old.id, old.config);
	expect_config(t, new.id, new.config);

	/* What is stored is sealed: a store without the key cannot read it. */
	snprintf(dsn, sizeof(dsn), "%s", t->db.dsn);
	store_close(t->st);
	assert_int_equal(store_open(dsn, "test-owner", &t->st, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_sub_get(t->st, old.id, &got), STORE_ERROR);
	assert_int_equal(store_sub_get(t->st, new.id, &got), STORE_ERROR);
}

/* The store records the key of its first start; another key is refused before anything
 * changes, and a rotation moves the record along. */
static void test_store_records_its_key(void **state)
{
	struct t *t = *state;
	struct secretbox_key k1 = test_key(1), k2 = test_key(2);
	struct sub_row clear = {.name = "clear", .config = "{\"secret\":\"whsec_c\"}", .enabled = 1};
	struct store_meta_value v;
	size_t migrated = 9, resealed = 9, skipped = 9;
	char err[1024];

	/* a row from before the store had a key (an older outboxd) */
	uuid_v7(clear.id);
	assert_int_equal(store_sub_create(t->st, &clear), STORE_OK);

	/* the facts themselves: set once, then only from what they are */
	assert_int_equal(store_meta_get(t->st, "test_fact", &v), STORE_NOT_FOUND);
	assert_int_equal(store_meta_swap(t->st, "test_fact", NULL, "a", &v), STORE_OK);
	assert_int_equal(store_meta_swap(t->st, "test_fact", NULL, "b", &v), STORE_CONFLICT);
	assert_string_equal(v.value, "a");
	assert_int_equal(store_meta_swap(t->st, "test_fact", "x", "b", &v), STORE_CONFLICT);
	assert_string_equal(v.value, "a");
	assert_int_equal(store_meta_swap(t->st, "test_fact", "a", "b", NULL), STORE_OK);
	assert_int_equal(store_meta_get(t->st, "test_fact", &v), STORE_OK);
	assert_string_equal(v.value, "b");

	/* the first start records its key (here another instance, a moment earlier) */
	assert_int_equal(store_meta_swap(t->st, STORE_META_SEALING_KEY, NULL, k1.id, NULL),
			 STORE_OK);

	/* another key is refused, naming both, before the clear row is sealed under it */
	assert_int_equal(store_set_secret_key(t->st, &k2), STORE_OK);
	assert_int_equal(store_secrets_prepare(t->st, &migrated, err, sizeof(err)), STORE_CONFLICT);
	assert_int_equal(migrated, 0);
	assert_non_null(strstr(err, k1.id));
	assert_non_null(strstr(err, k2.id));
	expect_config(t, clear.id, clear.config);
	assert_int_equal(store_set_secret_key(t->st, &k1), STORE_OK);
	assert_int_equal(store_secrets_prepare(t->st, &migrated, err, sizeof(err)), STORE_OK);
	assert_int_equal(migrated, 1);
	assert_int_equal(store_meta_get(t->st, STORE_META_SEALING_KEY, &v), STORE_OK);
	assert_string_equal(v.value, k1.id);

	/* a rotation moves the record; the old key is refused afterwards */
	assert_int_equal(store_secrets_rotate(t->st, &k2, &resealed, &skipped, err, sizeof(err)),
			 STORE_OK);
	assert_int_equal(store_meta_get(t->st, STORE_META_SEALING_KEY, &v), STORE_OK);
	assert_string_equal(v.value, k2.id);
	assert_int_equal(store_secrets_prepare(t->st, &migrated, err, sizeof(err)), STORE_ERROR);
	assert_int_equal(store_set_secret_key(t->st, &k2), STORE_OK);
	assert_int_equal(store_secrets_prepare(t->st, &migrated, err, sizeof(err)), STORE_OK);
	/* run again (as after an interruption): the record is the new key already */
	assert_int_equal(store_set_secret_key(t->st, &k1), STORE_OK);
	assert_int_equal(store_secrets_rotate(t->st, &k2, &resealed, &skipped, err, sizeof(err)),
			 STORE_OK);
	assert_int_equal(skipped, 1);
}

/* ---- attempt series (the console's chart) --------------------------------------------- */

/* Attempts counted in the minute they started, by outcome; outside the range not at all. */
static void test_attempt_series(void **state)
{
	struct t *t = *state;
	struct store_claim *c = NULL;
	struct store_series_bucket b[3];
	int64_t from = (clock_now_ms() / MINUTE_MS - 5) * MINUTE_MS;
	struct store_attempt tries[6] = {
		{1, ATTEMPT_IMMEDIATE, from - 1, 5, 503, "HTTP 503", NULL, 0},          /* before */
		{2, ATTEMPT_IMMEDIATE, from, 5, 200, "HTTP 200", NULL, 0},              /* bucket 0 */
		{3, ATTEMPT_SCHEDULED, from + MINUTE_MS + 10, 5, 404, "HTTP 404", NULL, 0},
		{4, ATTEMPT_SCHEDULED, from + 2 * MINUTE_MS, 5, 503, "HTTP 503", NULL, 0},
		{5, ATTEMPT_SCHEDULED, from + 3 * MINUTE_MS - 1, 5, 302, "HTTP 302", NULL, 0},
		{6, ATTEMPT_MANUAL, from + 3 * MINUTE_MS, 5, 200, "HTTP 200", NULL, 0}, /* after */
	};
	struct store_result r = {
		.status = DELIVERY_PROCESSED,
		.attempt_count = 6,
		.attempts = tries,
		.n_attempts = 6,
	};

	ingest_one(t, "a", t->t0, 1, NULL);
	assert_int_equal(claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c), 1);
	r.delivery_id = c[0].delivery_id;
	r.processed_at = clock_now_ms();
	assert_int_equal(store_record_results(t->st, &r, 1), STORE_OK);
	store_claims_free(c, 1);

	assert_int_equal(store_attempt_series(t->st, from, MINUTE_MS, 3, b), STORE_OK);
	assert_int_equal(b[0].succeeded, 1);
	assert_int_equal(b[0].client_error + b[0].server_error, 0);
	assert_int_equal(b[1].client_error, 1);
	assert_int_equal(b[1].succeeded + b[1].server_error, 0);
	assert_int_equal(b[2].server_error, 2); /* 503 and the 302 */
	assert_int_equal(b[2].succeeded + b[2].client_error, 0);

	/* Nothing there: zeros. Bad arguments: refused. */
	assert_int_equal(store_attempt_series(t->st, from - 100 * MINUTE_MS, MINUTE_MS, 3, b), STORE_OK);
	assert_int_equal(b[0].succeeded + b[1].server_error + b[2].client_error, 0);
	assert_int_equal(store_attempt_series(t->st, from, 0, 3, b), STORE_INVALID);
	assert_int_equal(store_attempt_series(t->st, from, MINUTE_MS, STORE_SERIES_MAX + 1, b),
			 STORE_INVALID);
}

/* ---- main ------------------------------------------------------------------------- */

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_ingest_fans_out),
		T(test_ingest_is_idempotent),
		T(test_ingest_many),
		T(test_ingest_is_atomic),
		T(test_claim_leases),
		T(test_event_identity_and_scheduled_start),
		T(test_dead_letter_marks),
		T(test_expired_lease_is_reclaimable),
		T(test_record_success),
		T(test_record_many),
		T(test_record_failure_then_dead),
		T(test_result_after_lost_lease_is_ignored),
		T(test_leases_renew),
		T(test_concurrent_claims_are_disjoint),
		T(test_replay),
		T(test_purge_only_dead),
		T(test_cleanup_keeps_failed),
		T(test_cleanup_keeps_young),
		T(test_failing_since),
		T(test_relay_outbox),
		T(test_job_cancel_is_not_overwritten),
		T(test_jobs_list_pages),
		T(test_second_open_is_locked),
		T(test_sqlite_checks_without_in_lists),
		T(test_pagination),
		T(test_filters),
		T(test_subscriptions),
		T(test_tokens),
		T(test_key_ordering),
		T(test_sealed_subscriptions),
		T(test_store_records_its_key),
		T(test_attempt_series),
		T(test_two_owners_share_work),
		T(test_work_notifications),
		T(test_outage_then_recovery),
		cmocka_unit_test(test_open_rejects_bad_dsn),
	};
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
		failed += _cmocka_run_group_tests(backend->name, tests,
						  sizeof(tests) / sizeof(tests[0]), NULL, NULL);
		if (backend->finished)
			backend->finished();
	}
	return failed ? 1 : 0;
}
