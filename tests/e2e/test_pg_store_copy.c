/* test_pg_store_copy.c: growing from the embedded SQLite store to PostgreSQL with
 * `outboxd store copy` (PostgreSQL only; ctest runs it as e2e-pg/test_pg_store_copy).
 *
 * A SQLite store is filled through the real daemon and its API: N_SUBS subscriptions with
 * each kind of credential (bearer, basic, API key, OAuth2 client credentials, a signing
 * secret), N_OK processed deliveries, N_DEAD dead ones with their attempt histories, N_PEND
 * pending ones (failed once, retried every few seconds, some left leased as by a crashed
 * instance), named tokens, and a finished replay job. The daemon stops; `outboxd store
 * copy` moves the store into a fresh PostgreSQL database; three instances start on it with
 * the same secret key. Then, as a user would see it:
 *  - every pending delivery reaches the receiver exactly once (the leased ones too, at
 *    once: the copy cleared the leases);
 *  - the dead-letter queue, every dead delivery with its attempts, processed deliveries,
 *    the job and the audit log read the same through the API as they did on SQLite, field
 *    by field; the one field left out is a delivery's "in_flight" (whether an instance
 *    holds its lease at the moment of the read, which the copy clears by design);
 *  - the named tokens authenticate, a wrong one does not;
 *  - each subscription's credentials open: an event to each arrives with its
 *    Authorization header, API key or a valid signature;
 *  - `outboxd store verify` passes on the fresh copy and fails (exit 1, naming the table)
 *    after one row of the copy is changed behind outboxd's back, and passes again once
 *    the row is put back;
 *  - a second copy into the now non-empty database is refused;
 *  - the PostgreSQL store copies back into a new SQLite file and verifies the same.
 *
 * The sizes are the full ones a migration is expected to carry (10,000 processed, 1,000
 * pending, 500 dead, 20 subscriptions). */
#include "e2e.h"
#include "harness_pg.h"

#include <libpq-fe.h>
#include <openssl/evp.h>
#include <sqlite3.h>

#define N_OK 10000
#define N_PEND 1000
#define N_DEAD 500
#define N_SUBS 20
#define N_LEASED 10  /* pending deliveries left leased in the SQLite file */
#define INSTANCES 3
#define BATCH 1000   /* events per POST /v1/events */

/* a whsec_ signing secret (16 bytes) */
#define SIGNING_SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILA=="

static struct receiver rcv;
static struct daemon lite;               /* on SQLite */
static struct daemon dmn[INSTANCES];     /* on the PostgreSQL copy */
static char pg_dsn[300];
static char lite_dir[256];

static int setup(void **state)
{
	(void)state;
	if (!harness_pg_wanted())
		return 0;
	memset(&lite, 0, sizeof(lite));
	memset(dmn, 0, sizeof(dmn));
	assert_int_equal(receiver_start(&rcv), 0);
	assert_int_equal(harness_pg_fresh_db(pg_dsn, sizeof(pg_dsn)), 0);
	char *dir = harness_tmpdir("outboxd-copy");
	assert_non_null(dir);
	snprintf(lite_dir, sizeof(lite_dir), "%s", dir);
	free(dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (!harness_pg_wanted())
		return 0;
	for (int i = 0; i < INSTANCES; i++) {
		dmn[i].db[0] = '\0'; /* the database is the server's: it goes with it */
		daemon_cleanup(&dmn[i]);
	}
	daemon_cleanup(&lite);
	receiver_stop(&rcv);
	return 0;
}

/* ---- helpers ----------------------------------------------------------------------------- */

static void pg_exec(const char *text)
{
	PGconn *conn = PQconnectdb(pg_dsn);
	assert_int_equal(PQstatus(conn), CONNECTION_OK);
	PGresult *r = PQexec(conn, text);
	if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
		fail_msg("%s: %s", text, PQerrorMessage(conn));
	PQclear(r);
	PQfinish(conn);
}

/* The one value of a one-row, one-column query, as a number. */
static long pg_number(const char *text)
{
	PGconn *conn = PQconnectdb(pg_dsn);
	assert_int_equal(PQstatus(conn), CONNECTION_OK);
	PGresult *r = PQexec(conn, text);
	if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1)
		fail_msg("%s: %s", text, PQerrorMessage(conn));
	long v = atol(PQgetvalue(r, 0, 0));
	PQclear(r);
	PQfinish(conn);
	return v;
}

/* `outboxd store ARGS`: its stdout and stderr into out; returns the exit code. */
static int store_cmd(const char *args, char *out, size_t len)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "%s store %s 2>&1", getenv("OUTBOXD_BIN"), args);
	int rc = e2e_run(cmd, out, len);
	fprintf(stderr, "$ outboxd store %.20s... -> exit %d\n%s", args, rc, out);
	return rc;
}

/* POSTs n events of type `type` to d in batches. */
static void send_events(struct daemon *d, const char *type, int n)
{
	size_t cap = (size_t)BATCH * 96 + 32;
	char *body = malloc(cap);
	assert_non_null(body);
	for (int first = 0; first < n; first += BATCH) {
		int k = n - first < BATCH ? n - first : BATCH;
		size_t off = (size_t)snprintf(body, cap, "{\"events\":[");
		for (int i = 0; i < k; i++)
			off += (size_t)snprintf(body + off, cap - off,
						"%s{\"event_type\":\"%s\",\"payload\":{\"n\":%d}}",
						i ? "," : "", type, first + i);
		snprintf(body + off, cap - off, "]}");
		json_decref(api_call(d, "POST", "/v1/events", body, 202));
	}
	free(body);
}

static long stat_of(struct daemon *d, const char *state)
{
	json_t *s = e2e_get(d, "/v1/stats");
	long v = (long)json_integer_value(json_object_get(json_object_get(s, "deliveries"), state));
	json_decref(s);
	return v;
}

struct stat_wait {
	struct daemon *d;
	const char *state;
	long want;
};

static int stat_reached(void *arg)
{
	struct stat_wait *w = arg;
	return stat_of(w->d, w->state) >= w->want;
}

static void wait_stat(struct daemon *d, const char *state, long want, int timeout_ms)
{
	struct stat_wait w = {d, state, want};
	if (harness_wait(stat_reached, &w, timeout_ms))
		fail_msg("%s never reached %ld (at %ld)", state, want, stat_of(d, state));
}

/* Fails unless a and b hold the same members with the same values, but those named in
 * ignore (NULL-terminated): what makes a difference is named. */
static void assert_same_json(json_t *a, json_t *b, const char *const *ignore, const char *what)
{
	const char *key;
	json_t *va;
	json_object_foreach(a, key, va) {
		int skip = 0;
		for (int i = 0; ignore && ignore[i]; i++)
			skip |= strcmp(ignore[i], key) == 0;
		json_t *vb = json_object_get(b, key);
		if (skip)
			continue;
		if (!vb || !json_equal(va, vb)) {
			char *x = json_dumps(va, JSON_COMPACT | JSON_ENCODE_ANY);
			char *y = vb ? json_dumps(vb, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
			fail_msg("%s: field %s differs: SQLite %s, PostgreSQL %s", what, key, x,
				 y ? y : "(absent)");
		}
	}
	json_object_foreach(b, key, va)
		if (!json_object_get(a, key))
			fail_msg("%s: field %s only on PostgreSQL", what, key);
}

/* The deliveries' fields that depend on the moment of the read: whether an instance holds
 * the delivery's lease right now. The copy clears leases, so it is left out. */
static const char *const read_dependent[] = {"in_flight", NULL};

/* ---- the subscriptions ---------------------------------------------------------------------- */

/* What each extra subscription carries, and how a request shows it. */
enum cred { CRED_BEARER, CRED_BASIC, CRED_KEY, CRED_OAUTH2, CRED_SIGNED, CRED_KINDS };

static char sub_ids[N_SUBS][64];

static void create_subs(void)
{
	char fields[512];
	e2e_create_sub(&lite, sub_ids[0],
		       "{\"name\":\"ok\",\"event_types\":[\"ok.*\"],\"endpoint\":\"%s/ok\","
		       "\"auth\":{\"type\":\"bearer\",\"token\":\"ok-bearer-t0ken\"}}", rcv.url);
	/* pending: fails once, then retried every 4 s, forever */
	e2e_create_sub(&lite, sub_ids[1],
		       "{\"name\":\"pending\",\"event_types\":[\"pend.*\"],"
		       "\"endpoint\":\"%s/pending\",\"auth\":{\"type\":\"basic\",\"username\":\"ann\","
		       "\"password\":\"pend-pw\"},\"retry\":{\"immediate\":1,\"interval\":\"4s\","
		       "\"max_retries\":0},\"circuit_breaker\":{\"enabled\":false}}", rcv.url);
	/* dead: two tries, one scheduled retry, then the dead-letter queue */
	e2e_create_sub(&lite, sub_ids[2],
		       "{\"name\":\"dead\",\"event_types\":[\"dead.*\"],\"endpoint\":\"%s/dead\","
		       "\"secret\":\"" SIGNING_SECRET "\",\"retry\":{\"immediate\":2,"
		       "\"immediate_delay\":\"10ms\",\"interval\":\"100ms\",\"max_retries\":1},"
		       "\"circuit_breaker\":{\"enabled\":false}}", rcv.url);
	for (int i = 3; i < N_SUBS; i++) {
		switch ((enum cred)(i % CRED_KINDS)) {
		case CRED_BEARER:
			snprintf(fields, sizeof(fields),
				 "\"auth\":{\"type\":\"bearer\",\"token\":\"bearer-%d\"}", i);
			break;
		case CRED_BASIC:
			snprintf(fields, sizeof(fields), "\"auth\":{\"type\":\"basic\","
				 "\"username\":\"user%d\",\"password\":\"pw-%d\"}", i, i);
			break;
		case CRED_KEY:
			snprintf(fields, sizeof(fields), "\"auth\":{\"type\":\"api_key\","
				 "\"header\":\"X-Api-Key\",\"value\":\"key-%d\"}", i);
			break;
		case CRED_OAUTH2:
			snprintf(fields, sizeof(fields), "\"auth\":{\"type\":\"oauth2\","
				 "\"token_url\":\"%s/token\",\"client_id\":\"c%d\","
				 "\"client_secret\":\"client-s3cret-%d\"}", rcv.url, i, i);
			break;
		default:
			snprintf(fields, sizeof(fields), "\"secret\":\"" SIGNING_SECRET "\"");
			break;
		}
		e2e_create_sub(&lite, sub_ids[i], "{\"name\":\"extra-%d\",\"event_types\":"
			       "[\"extra.%d\"],\"endpoint\":\"%s/extra/%d\",%s}", i, i, rcv.url, i,
			       fields);
	}
}

/* The request on /extra/i carries subscription i's credential. */
static void assert_credential(int i, json_t *req)
{
	json_t *h = json_object_get(req, "headers");
	const char *authz = json_string_value(json_object_get(h, "authorization"));
	char want[256], plain[64], b64[128];
	switch ((enum cred)(i % CRED_KINDS)) {
	case CRED_BEARER:
		snprintf(want, sizeof(want), "Bearer bearer-%d", i);
		break;
	case CRED_BASIC:
		snprintf(plain, sizeof(plain), "user%d:pw-%d", i, i);
		EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)plain, (int)strlen(plain));
		snprintf(want, sizeof(want), "Basic %s", b64);
		break;
	case CRED_KEY:
		authz = json_string_value(json_object_get(h, "x-api-key"));
		snprintf(want, sizeof(want), "key-%d", i);
		break;
	case CRED_OAUTH2:
		snprintf(want, sizeof(want), "Bearer ACCESS-after-copy");
		break;
	default:
		e2e_assert_signed(req, SIGNING_SECRET, NULL);
		return;
	}
	if (!authz || strcmp(authz, want) != 0)
		fail_msg("extra-%d: credential \"%s\", wanted \"%s\"", i, authz ? authz : "(none)",
			 want);
}

/* ---- the test ------------------------------------------------------------------------------- */

/* Leaves n pending deliveries of the SQLite file leased far into the future, as an
 * instance that crashed would: ids into leased. */
static void lease_in_sqlite(char leased[][64], int n)
{
	char path[320];
	sqlite3 *db;
	sqlite3_stmt *s;
	snprintf(path, sizeof(path), "%s/outboxd.db", lite_dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "UPDATE deliveries SET lease_owner = 'crashed',"
					    " lease_until = 9999999999999 WHERE id IN (SELECT id"
					    " FROM deliveries WHERE subscription_id = ?1 ORDER BY"
					    " id LIMIT ?2) RETURNING id", -1, &s, NULL), SQLITE_OK);
	sqlite3_bind_text(s, 1, sub_ids[1], -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, n);
	int k = 0;
	while (sqlite3_step(s) == SQLITE_ROW && k < n)
		snprintf(leased[k++], 64, "%s", (const char *)sqlite3_column_text(s, 0));
	sqlite3_finalize(s);
	sqlite3_close(db);
	assert_int_equal(k, n);
}

static void test_sqlite_to_postgres(void **state)
{
	(void)state;
	if (!harness_pg_wanted())
		skip();
	int64_t t0 = harness_now_ms();
	char db_env[512], pg_env[400], out[16384], args[1200];
	static char leased[N_LEASED][64];

	/* ---- a SQLite store, filled through the daemon ---- */
	snprintf(lite.dir, sizeof(lite.dir), "%s", lite_dir);
	snprintf(db_env, sizeof(db_env), "OUTBOXD_DB=sqlite:%s/outboxd.db", lite_dir);
	const char *lite_env[] = {db_env, E2E_SHARED_SECRET_KEY, NULL};
	assert_int_equal(daemon_start(&lite, lite_env), 0);
	assert_int_equal(receiver_script(&rcv, "/pending", "{\"default\":{\"status\":503}}"), 0);
	assert_int_equal(receiver_script(&rcv, "/dead", "{\"default\":{\"status\":500,"
						      "\"body\":\"no such customer\"}}"), 0);
	create_subs();
	const char *scopes[] = {"read", "ingest", "operate"};
	char tokens[3][128];
	for (int i = 0; i < 3; i++) {
		char body[128];
		snprintf(body, sizeof(body), "{\"name\":\"t-%s\",\"scopes\":[\"%s\"]}", scopes[i],
			 scopes[i]);
		json_t *t = api_call(&lite, "POST", "/v1/tokens", body, 201);
		snprintf(tokens[i], sizeof(tokens[i]), "%s",
			 json_string_value(json_object_get(t, "token")));
		json_decref(t);
	}
	send_events(&lite, "dead.x", N_DEAD);
	send_events(&lite, "pend.x", N_PEND);
	send_events(&lite, "ok.x", N_OK);
	wait_stat(&lite, "PROCESSED", N_OK, 60000);
	wait_stat(&lite, "FAILED_DEAD", N_DEAD, 30000);
	wait_stat(&lite, "FAILED_RETRYING", N_PEND, 30000);
	/* a replay job that finds nothing left to replay, done at once */
	char body[256], job_id[64];
	snprintf(body, sizeof(body), "{\"filter\":{\"subscription_id\":\"%s\"}}", sub_ids[3]);
	json_t *job = api_call(&lite, "POST", "/v1/dlq/replay", body, 202);
	snprintf(job_id, sizeof(job_id), "%s", json_string_value(json_object_get(job, "job_id")));
	json_decref(job);
	char job_path[128];
	snprintf(job_path, sizeof(job_path), "/v1/jobs/%s", job_id);
	struct e2e_wait_ctx jw = {&lite, job_path, "state", "done", NULL};
	assert_int_equal(harness_wait(e2e_field_is, &jw, 10000), 0);
	json_t *job_before = jw.last;

	/* what the API shows of it */
	json_t *dlq_before = e2e_get(&lite, "/v1/dlq?limit=1000");
	assert_int_equal(json_array_size(json_object_get(dlq_before, "items")), N_DEAD);
	json_t *done_before = e2e_get(&lite, "/v1/deliveries?status=PROCESSED&subscription_id=%s"
				      "&limit=1000", sub_ids[0]);
	json_t *audit_before = e2e_get(&lite, "/v1/audit?limit=1000");
	json_t *dead_before[N_DEAD];
	json_t *items = json_object_get(dlq_before, "items");
	for (size_t i = 0; i < N_DEAD; i++) {
		const char *id = json_string_value(json_object_get(json_array_get(items, i), "id"));
		dead_before[i] = e2e_get(&lite, "/v1/deliveries/%s", id);
		assert_true(json_array_size(json_object_get(dead_before[i], "attempts")) >= 3);
	}
	assert_int_equal(daemon_stop(&lite), 0);
	lease_in_sqlite(leased, N_LEASED);
	fprintf(stderr, "SQLite store built in %.1f s\n", (harness_now_ms() - t0) / 1000.0);

	/* ---- the copy ---- */
	int64_t t1 = harness_now_ms();
	snprintf(args, sizeof(args), "copy --from sqlite:%s/outboxd.db --to %s", lite_dir, pg_dsn);
	assert_int_equal(store_cmd(args, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "every table is the same on both sides"));
	fprintf(stderr, "copied and verified in %.1f s\n", (harness_now_ms() - t1) / 1000.0);
	assert_int_equal(pg_number("SELECT count(*) FROM outboxd.deliveries"), N_OK + N_PEND + N_DEAD);
	assert_int_equal(pg_number("SELECT count(*) FROM outboxd.deliveries"
				   " WHERE lease_owner IS NOT NULL OR lease_until IS NOT NULL"), 0);

	/* a second copy into the database, which now holds rows, is refused */
	assert_int_equal(store_cmd(args, out, sizeof(out)), 1);
	assert_non_null(strstr(out, "not empty"));

	/* verify notices a row changed behind outboxd's back, and only that */
	snprintf(args, sizeof(args), "verify --from sqlite:%s/outboxd.db --to %s", lite_dir, pg_dsn);
	assert_int_equal(store_cmd(args, out, sizeof(out)), 0);
	pg_exec("UPDATE outboxd.attempts SET code = 299 WHERE (delivery_id, n) ="
		" (SELECT delivery_id, n FROM outboxd.attempts ORDER BY delivery_id, n LIMIT 1)");
	assert_int_equal(store_cmd(args, out, sizeof(out)), 1);
	assert_non_null(strstr(out, "DIFFERENT"));
	assert_non_null(strstr(out, "1 table differs"));
	const char *line = strstr(out, "\nattempts ");
	assert_non_null(line);
	assert_non_null(strstr(line, "DIFFERENT"));
	pg_exec("UPDATE outboxd.attempts SET code = 500 WHERE (delivery_id, n) ="
		" (SELECT delivery_id, n FROM outboxd.attempts ORDER BY delivery_id, n LIMIT 1)");
	assert_int_equal(store_cmd(args, out, sizeof(out)), 0);

	/* ---- three instances on the copy ---- */
	assert_int_equal(receiver_reset(&rcv), 0); /* /pending answers 200 from now on */
	assert_int_equal(receiver_script(&rcv, "/token", "{\"default\":{\"status\":200,"
			 "\"headers\":{\"Content-Type\":\"application/json\"},\"body\":"
			 "\"{\\\"access_token\\\":\\\"ACCESS-after-copy\\\","
			 "\\\"token_type\\\":\\\"Bearer\\\"}\"}}"), 0);
	snprintf(pg_env, sizeof(pg_env), "OUTBOXD_DB=%s", pg_dsn);
	const char *env[] = {pg_env, E2E_SHARED_SECRET_KEY, NULL};
	for (int i = 0; i < INSTANCES; i++)
		assert_int_equal(daemon_start(&dmn[i], env), 0);

	/* every pending delivery once, the ones a crashed instance had leased too */
	assert_int_equal(receiver_wait_count(&rcv, "/pending", N_PEND, 30000), 0);
	usleep(500 * 1000);
	json_t *st = receiver_stats(&rcv, "/pending");
	assert_int_equal(json_integer_value(json_object_get(st, "count")), N_PEND);
	assert_int_equal(json_integer_value(json_object_get(st, "duplicates")), 0);
	json_decref(st);
	for (int i = 0; i < N_LEASED; i++)
		json_decref(e2e_wait_status(&dmn[i % INSTANCES], leased[i], "PROCESSED", 10000));
	json_t *reqs = receiver_requests(&rcv, "/pending");
	const char *authz = json_string_value(json_object_get(
		json_object_get(json_array_get(reqs, 0), "headers"), "authorization"));
	assert_non_null(authz);
	assert_string_equal(authz, "Basic YW5uOnBlbmQtcHc="); /* ann:pend-pw */
	json_decref(reqs);

	/* the DLQ, each dead delivery with its attempts, processed ones, the job, the audit */
	json_t *dlq_after = e2e_get(&dmn[1], "/v1/dlq?limit=1000");
	json_t *a_items = json_object_get(dlq_after, "items");
	assert_int_equal(json_array_size(a_items), N_DEAD);
	for (size_t i = 0; i < N_DEAD; i++)
		assert_same_json(json_array_get(items, i), json_array_get(a_items, i),
				 read_dependent, "dlq item");
	for (size_t i = 0; i < N_DEAD; i++) {
		const char *id = json_string_value(json_object_get(dead_before[i], "id"));
		json_t *after = e2e_get(&dmn[i % INSTANCES], "/v1/deliveries/%s", id);
		assert_same_json(dead_before[i], after, read_dependent, id);
		json_decref(after);
		json_decref(dead_before[i]);
	}
	json_t *done_after = e2e_get(&dmn[2], "/v1/deliveries?status=PROCESSED&subscription_id=%s"
				     "&limit=1000", sub_ids[0]);
	json_t *d_items = json_object_get(done_after, "items");
	assert_int_equal(json_array_size(d_items), 1000);
	for (size_t i = 0; i < json_array_size(json_object_get(done_before, "items")); i++)
		assert_same_json(json_array_get(json_object_get(done_before, "items"), i),
				 json_array_get(d_items, i), read_dependent, "processed delivery");
	json_t *job_after = e2e_get(&dmn[0], "%s", job_path);
	assert_same_json(job_before, job_after, NULL, "job");
	json_t *audit_after = e2e_get(&dmn[0], "/v1/audit?limit=1000");
	assert_same_json(audit_before, audit_after, NULL, "audit");

	/* the named tokens authenticate; a wrong one does not */
	json_decref(api_call_as(&dmn[0], tokens[0], "GET", "/v1/subscriptions", NULL, 200));
	json_decref(api_call_as(&dmn[1], tokens[2], "GET", "/v1/dlq?limit=1", NULL, 200));
	json_decref(api_call_as(&dmn[2], "obx_not-a-token", "GET", "/v1/subscriptions", NULL, 401));

	/* every subscription's credentials open: one event each, sent with the ingest token */
	for (int i = 3; i < N_SUBS; i++) {
		snprintf(body, sizeof(body), "{\"event_type\":\"extra.%d\",\"payload\":{}}", i);
		json_decref(api_call_as(&dmn[i % INSTANCES], tokens[1], "POST", "/v1/events", body,
					202));
	}
	for (int i = 3; i < N_SUBS; i++) {
		char path[64];
		snprintf(path, sizeof(path), "/extra/%d", i);
		assert_int_equal(receiver_wait_count(&rcv, path, 1, 15000), 0);
		json_t *r = receiver_requests(&rcv, path);
		assert_credential(i, json_array_get(r, 0));
		json_decref(r);
	}
	for (int i = 0; i < INSTANCES; i++)
		assert_int_equal(daemon_stop(&dmn[i]), 0);

	/* ---- and back: the PostgreSQL store into a new SQLite file ---- */
	snprintf(args, sizeof(args), "copy --from %s --to sqlite:%s/back.db", pg_dsn, lite_dir);
	assert_int_equal(store_cmd(args, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "every table is the same on both sides"));
	char back_env[512];
	struct daemon back = {0};
	snprintf(back_env, sizeof(back_env), "OUTBOXD_DB=sqlite:%s/back.db", lite_dir);
	const char *benv[] = {back_env, E2E_SHARED_SECRET_KEY, NULL};
	assert_int_equal(daemon_start(&back, benv), 0);
	json_t *dlq_back = e2e_get(&back, "/v1/dlq?limit=1000");
	assert_same_json(dlq_after, dlq_back, NULL, "dlq page back on SQLite");
	assert_int_equal(stat_of(&back, "PROCESSED"), N_OK + N_PEND + N_SUBS - 3);
	assert_int_equal(daemon_stop(&back), 0);
	daemon_cleanup(&back);

	json_decref(dlq_back);
	json_decref(dlq_before);
	json_decref(dlq_after);
	json_decref(done_before);
	json_decref(done_after);
	json_decref(job_before);
	json_decref(job_after);
	json_decref(audit_before);
	json_decref(audit_after);
	fprintf(stderr, "whole test %.1f s\n", (harness_now_ms() - t0) / 1000.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_sqlite_to_postgres, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
