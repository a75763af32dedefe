/* store_suite.h: the fixtures of the storage conformance suite (tests/store/test_store_*.c).
 *
 * The suite is one set of tests for every backend, split by concern into one binary per
 * file; each binary runs all of its tests once per backend (store_suite_run), SQLite and
 * PostgreSQL alike. Each test gets a fresh, empty database from its backend's fixture and
 * talks to it only through store.h, so a backend passes exactly when it keeps the promises
 * written there. The fixtures (store_suite.c) are the only backend-specific code: they make
 * a database and play the external producer that inserts into the outbox table with its
 * own connection. PostgreSQL runs on the server named by OUTBOXD_TEST_PG_DSN, or on one
 * each binary starts itself (tests/support/harness_pg.h). To add a backend: write its
 * fixture in store_suite.c and add one line to its `backends`.
 *
 * The helpers below are the ones several files use; a helper one file needs stays a static
 * in that file. They fail the running cmocka test on an unexpected store answer. */
#ifndef OUTBOXD_TESTS_STORE_SUITE_H
#define OUTBOXD_TESTS_STORE_SUITE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "harness_pg.h"
#include "store/store.h"
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
	/* Makes the database's planner choose its worst plans for new connections (on) or
	 * its own again (off), for a test that a statement's result does not depend on the
	 * plan; NULL for a backend whose statements have no plan to choose. */
	int (*adverse_plans)(struct fixture_db *db, int on);
	/* Rows the database has read so far by scanning the deliveries or queue table from
	 * end to end, as counted by the statistics its sessions have reported (-1 when it
	 * cannot say); NULL for a backend without such a count. */
	long long (*rows_scanned)(struct fixture_db *db);
	/* Updates of deliveries so far that wrote new index entries (not HOT), as the
	 * statistics count them (-1 when it cannot say); NULL for a backend without them. */
	long long (*index_writing_updates)(struct fixture_db *db);
	/* Entries read so far from the index the claims walk (-1 when it cannot say); NULL
	 * for a backend without such a count. */
	long long (*due_index_reads)(struct fixture_db *db);
	/* Entries read so far from the index of unfinished deliveries by status (-1 when it
	 * cannot say); NULL for a backend without such a count. */
	long long (*status_index_reads)(struct fixture_db *db);
	/* Has the planner's statistics describe the tables as they are now (0 on success);
	 * NULL for a backend whose planner keeps none. */
	int (*analyze)(struct fixture_db *db);
	/* Makes every read of the deliveries table wait (on), from a session of the fixture's
	 * own that locks it, until released (off). 0 on success. NULL for a backend whose
	 * readers another session cannot hold up (SQLite's WAL: tests/unit/store/
	 * test_sqlite_readers.c holds its readers from inside instead). */
	int (*hold_reads)(struct fixture_db *db, int on);
	/* Sessions waiting for that lock (-1 when it cannot say). */
	long long (*reads_held)(struct fixture_db *db);
	/* Makes the database a store of an older schema: empty, then the backend's
	 * migrations 1 to version applied and recorded as outboxd applies them, then sql
	 * (rows as that version wrote them). Close the test's store first; store_open then
	 * migrates the rest. 0 on success; NULL for a backend whose last migrations the
	 * suite has no older rows for. */
	int (*older_schema)(struct fixture_db *db, size_t version, const char *sql);
	int has_owner_lock;  /* one process per database (SQLite's flock) */
	int (*available)(void);
	void (*finished)(void); /* after the backend's last test, or NULL */
};

/* The backend the running group tests (cmocka setups take no parameter). */
extern const struct backend_fixture *backend;

/* The PostgreSQL server the binary started itself (pid 0 when it runs on the server of
 * OUTBOXD_TEST_PG_DSN instead, or has not started one yet): an outage test may halt it. */
extern struct pg_server own_server;

/* ---- per-test state ------------------------------------------------------------------ */

struct t {
	struct fixture_db db;
	store *st;
	char subs[3][UUID_STR_LEN];
	int64_t t0;        /* a base time one hour ago: events created from it are due */
};

/* A fresh database of the running backend and a store open on it as "test-owner", three
 * subscription ids, t0: *state gets the struct t (freed by the teardown). */
int store_suite_setup(void **state);
int store_suite_teardown(void **state);

#define T(f) cmocka_unit_test_setup_teardown(f, store_suite_setup, store_suite_teardown)

/* Runs tests (n of them, borrowed) once per backend, each run a cmocka group named after
 * the backend; a backend without a database to test on counts as a failure. Returns the
 * exit code for main: 0 when every test passed on every backend, else 1. */
int store_suite_run(const struct CMUnitTest *tests, size_t n);

/* ---- shared helpers ------------------------------------------------------------------ */

/* Ingests one event fanned out to the first n_subs test subscriptions; its id into id
 * when not NULL. */
void ingest_one(struct t *t, const char *type, int64_t created_at, size_t n_subs,
		char id[UUID_STR_LEN]);

/* The deliveries of one event, asserted to number n; returned to the caller
 * (store_deliveries_free). */
struct store_delivery *deliveries_of(struct t *t, const char *event_id, size_t n);

/* store_claim_due asserted to succeed; the claims in *items, returned to the caller
 * (store_claims_free). Returns how many. */
size_t claim_n(struct t *t, int64_t now, int64_t lease_ms, size_t limit,
	       struct store_claim **items);

/* Records one result for a claimed delivery with a single attempt numbered n;
 * ordered_key as the dispatcher sets it for a keyed delivery of an ordered subscription. */
void record_as(struct t *t, const char *delivery_id, enum delivery_status status,
	       int attempt_count, int64_t next_attempt_at, int code, const char *message,
	       const char *cause, int ordered_key);

/* record_as for a delivery that is not keyed. */
void record(struct t *t, const char *delivery_id, enum delivery_status status,
	    int attempt_count, int64_t next_attempt_at, int code, const char *message,
	    const char *cause);

/* The delivery id, asserted to exist; its strings are the caller's
 * (store_delivery_free). */
struct store_delivery get_delivery(struct t *t, const char *id);

/* qsort comparator for arrays of char[UUID_STR_LEN]. */
int id_cmp(const void *a, const void *b);

#endif
