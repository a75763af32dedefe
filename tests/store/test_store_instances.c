/* test_store_instances.c: the conformance suite on opening a database and sharing it:
 * a bad DSN refused, one process per SQLite file, SQLite's schema checks, two owners
 * claiming from one database, a PostgreSQL outage and recovery without reopening, and the
 * wake-ups one instance's writes send another's listener.
 *
 * Every test runs once per backend (store_suite.h); a test of what one backend alone can
 * do skips on the other. */
#include "store_suite.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"

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
	sqlite_exec_ok(conn, "DROP INDEX deliveries_dead_created;"
			     "DROP TABLE attempt_minutes; DROP TABLE attempt_errors;"
			     "CREATE INDEX attempts_started ON attempts(started_at);"
			     "DROP TRIGGER deliveries_delete_attempts;"
			     "DROP INDEX events_created; DROP INDEX events_type;"
			     "DROP INDEX deliveries_dead_letter_pending;"
			     "ALTER TABLE deliveries DROP COLUMN dead_letter_pending;"
			     "ALTER TABLE events DROP COLUMN webhook_id;"
			     "ALTER TABLE events DROP COLUMN envelope;"
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

/* A database from before the per-minute attempt counts gets them from the attempts it
 * holds (the last day's), when opened: the stats and the series show its history. */
static void test_sqlite_counts_from_history(void **state)
{
	struct t *t = *state;
	struct store_claim *c = NULL;
	struct store_stats st;
	struct store_series_bucket b[2];
	sqlite3 *conn = NULL;
	char err[512] = "";
	int64_t now = clock_now_ms(), m = now - now % MINUTE_MS;
	struct store_attempt tries[3] = {
		{1, ATTEMPT_IMMEDIATE, m - MINUTE_MS, 40, 503, "HTTP 503", NULL, 0},
		{2, ATTEMPT_SCHEDULED, m - MINUTE_MS + 10, 40, 503, "busy", NULL, 0},
		{3, ATTEMPT_SCHEDULED, m, 12, 200, "HTTP 200", NULL, 0},
	};

	if (strcmp(backend->name, "sqlite") != 0)
		skip();
	ingest_one(t, "a", t->t0, 1, NULL);
	assert_int_equal(claim_n(t, now, MINUTE_MS, 10, &c), 1);
	struct store_result r = {
		.delivery_id = c[0].delivery_id,
		.status = DELIVERY_PROCESSED,
		.attempt_count = 3,
		.processed_at = now,
		.attempts = tries,
		.n_attempts = 3,
	};
	assert_int_equal(store_record_results(t->st, &r, 1), STORE_OK);
	store_claims_free(c, 1);
	store_close(t->st);
	t->st = NULL;

	assert_int_equal(sqlite3_open_v2(t->db.path, &conn, SQLITE_OPEN_READWRITE, NULL), SQLITE_OK);
	sqlite_exec_ok(conn, "DROP INDEX deliveries_dead_created;"
			     "DROP TABLE attempt_minutes; DROP TABLE attempt_errors;"
			     "CREATE INDEX attempts_started ON attempts(started_at);"
			     "DELETE FROM schema_migrations WHERE version >= 19;");
	sqlite3_close(conn);
	assert_int_equal(store_open(t->db.dsn, "test-owner", &t->st, err, sizeof(err)), STORE_OK);

	assert_int_equal(store_stats(t->st, now, 10 * MINUTE_MS, &st), STORE_OK);
	assert_int_equal(st.n_subs, 1);
	assert_int_equal(st.subs[0].attempts, 3);
	assert_int_equal(st.subs[0].successes, 1);
	assert_int_equal(st.subs[0].last_code, 503);
	assert_string_equal(st.subs[0].last_message, "busy");
	assert_int_equal(st.subs[0].last_error_at, m - MINUTE_MS + 10);
	store_stats_free(&st);
	assert_int_equal(store_attempt_series(t->st, t->subs[0], m - MINUTE_MS, MINUTE_MS, 2, b),
			 STORE_OK);
	assert_int_equal(b[0].server_error, 2);
	assert_int_equal(b[0].p50_ms, 40);
	assert_int_equal(b[1].succeeded, 1);
	assert_int_equal(b[1].p99_ms, 12);
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

/* The server restarts while the store's connections sit idle (a quick restart, or an
 * administrator's pg_terminate_backend): the first call of each kind after it succeeds,
 * since a connection the server closed is found dead before a statement is sent on it. */
static void test_restart_between_calls(void **state)
{
	struct t *t = *state;
	char before[UUID_STR_LEN], after[UUID_STR_LEN];
	struct store_claim *c = NULL;
	struct store_event got;
	size_t n = 0;

	if (backend->has_owner_lock || own_server.pid <= 0)
		skip(); /* SQLite has no server; an external server is not ours to stop */
	/* every connection the calls below use is open and idle */
	ingest_one(t, "a", t->t0, 1, before);
	assert_int_equal(store_event_get(t->st, before, &got), STORE_OK);
	store_event_free(&got);
	assert_int_equal(store_claim_due(t->st, clock_now_ms(), MINUTE_MS, 10, &c, &n), STORE_OK);
	store_claims_free(c, n);

	assert_int_equal(pg_server_halt(&own_server), 0);
	assert_int_equal(pg_server_start(&own_server), 0);

	assert_int_equal(store_event_get(t->st, before, &got), STORE_OK);
	store_event_free(&got);
	ingest_one(t, "a", t->t0, 1, after);
	assert_int_equal(store_claim_due(t->st, clock_now_ms() + 2 * MINUTE_MS, MINUTE_MS, 10, &c,
					 &n), STORE_OK);
	store_claims_free(c, n);
	assert_int_equal(store_ping(t->st), STORE_OK);
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

/* What the subscriptions' callback was told: calls naming none (all), and the ids named
 * (named: the first one named, again or not; others: any other). */
struct subs_named {
	pthread_mutex_t mu;
	int all, named, others;
	char want[UUID_STR_LEN]; /* the first id named */
};

static void count_subs(void *ctx, const char (*ids)[UUID_STR_LEN], size_t n)
{
	struct subs_named *s = ctx;

	pthread_mutex_lock(&s->mu);
	if (!n)
		s->all++;
	for (size_t i = 0; i < n; i++) {
		if (!s->want[0])
			memcpy(s->want, ids[i], UUID_STR_LEN);
		if (strcmp(ids[i], s->want) == 0)
			s->named++;
		else
			s->others++;
	}
	pthread_mutex_unlock(&s->mu);
}

/* Waits up to 10 s until the callback was told of at least want changes (a call naming
 * none counts one). */
static int wait_subs(struct subs_named *s, int want)
{
	for (int i = 0; i < 1000; i++) {
		pthread_mutex_lock(&s->mu);
		int got = s->all + s->named + s->others;
		pthread_mutex_unlock(&s->mu);
		if (got >= want)
			return 1;
		usleep(10 * 1000);
	}
	return 0;
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
 * store's listener, unless the ingest leased every delivery to itself (the hand-off); a
 * subscription change calls the subscriptions callback; after store_on_work(NULL) nothing
 * calls back any more. */
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
		assert_true(wait_wakes(&w, seen));
		seen = wakes(&w);
		/* handed to the other instance at ingest (leased to it): nothing to claim
		 * here, so no wake-up (a claim each would find nothing) */
		char handed[1][UUID_STR_LEN];
		ev.lease_until = clock_now_ms() + MINUTE_MS;
		ev.delivery_ids = handed;
		uuid_v7(ev.id);
		assert_int_equal(store_ingest(other, &ev, 1), STORE_OK);
		usleep(300 * 1000);
		assert_int_equal(wakes(&w), seen);
	}

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

	/* A subscription created, changed or deleted elsewhere reaches the other callback,
	 * named; the call at connect names none (read them all). */
	{
		static struct subs_named subs = {.mu = PTHREAD_MUTEX_INITIALIZER};
		struct sub_row sub = {.name = "elsewhere", .config = "{}", .enabled = 1};

		store_on_subscriptions_changed(t->st, count_subs, &subs);
		assert_true(wait_subs(&subs, 1));
		assert_int_equal(subs.all, 1); /* once at connect: changes may be missed */
		uuid_v7(sub.id);
		assert_int_equal(store_sub_create(other, &sub), STORE_OK);
		assert_true(wait_subs(&subs, 2));
		/* each change waited for before the next: the listener names an id once per
		 * burst of notifications, so an update and a delete close together may come
		 * as one call (a burst), which is all the instance needs */
		sub.config = "{\"v\":2}";
		assert_int_equal(store_sub_update(other, &sub), STORE_OK);
		assert_true(wait_subs(&subs, 3));
		assert_int_equal(store_sub_delete(other, sub.id), STORE_OK);
		assert_true(wait_subs(&subs, 4));
		pthread_mutex_lock(&subs.mu);
		assert_int_equal(subs.all, 1);      /* the connect's only */
		assert_int_equal(subs.named, 3);    /* each change named, none twice in a call */
		assert_int_equal(subs.others, 0);   /* and only that subscription */
		pthread_mutex_unlock(&subs.mu);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_second_open_is_locked),
		T(test_sqlite_checks_without_in_lists),
		T(test_sqlite_counts_from_history),
		T(test_two_owners_share_work),
		T(test_work_notifications),
		T(test_outage_then_recovery),
		T(test_restart_between_calls),
		cmocka_unit_test(test_open_rejects_bad_dsn),
	};

	return store_suite_run(tests, sizeof(tests) / sizeof(tests[0]));
}
