/* test_intake.c: how events get in — idempotent ingest, batches, the producer outbox
 * table written by another process (SQLite) or in a producer's own transaction and through
 * outboxd.enqueue() (PostgreSQL), and every bad-input case answered with the right 4xx and
 * a JSON error naming the field, with nothing stored. */
#include "e2e.h"
#include "harness_pg.h"

#include <libpq-fe.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

static struct receiver rcv;
static struct daemon dmn;
static char sub_id[64];

static int setup(void **state)
{
	assert_int_equal(receiver_start(&rcv), 0);
	/* relay_batch 2: the outbox test's five rows take three transactions of one poll */
	const char *env[] = {"OUTBOXD_MAX_PAYLOAD=1KiB", "OUTBOXD_MAX_REQUEST=64KiB",
			     "OUTBOXD_RELAY_BATCH=2", NULL};
	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, env), 0);
	e2e_create_sub(&dmn, sub_id, "{\"name\":\"all\",\"event_types\":[\"*\"],\"endpoint\":\"%s/in\"}",
		       rcv.url);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

static size_t delivery_total(void)
{
	size_t total = 0;
	char path[256] = "/v1/deliveries?limit=1000";
	for (;;) {
		json_t *page = e2e_get(&dmn, "%s", path);
		total += json_array_size(json_object_get(page, "items"));
		json_t *next = json_object_get(page, "next_cursor");
		if (!json_is_string(next)) {
			json_decref(page);
			return total;
		}
		snprintf(path, sizeof(path), "/v1/deliveries?limit=1000&cursor=%s", json_string_value(next));
		json_decref(page);
	}
}

static void test_idempotent_ingest(void **state)
{
	const char *body = "{\"event_type\":\"order.paid\",\"source\":\"shop\","
			   "\"source_event_id\":\"order-17\",\"payload\":{\"total\":5}}";
	json_t *first = api_call(&dmn, "POST", "/v1/events", body, 202);
	json_t *second = api_call(&dmn, "POST", "/v1/events", body, 202);
	const char *id1 = json_string_value(json_array_get(json_object_get(first, "ids"), 0));
	const char *id2 = json_string_value(json_array_get(json_object_get(second, "ids"), 0));
	assert_string_equal(id1, id2);
	assert_null(json_object_get(first, "duplicate"));
	assert_true(json_is_true(json_object_get(second, "duplicate")));
	char ids[4][64];
	assert_int_equal(e2e_deliveries_of(&dmn, id1, ids, 4), 1);
	assert_int_equal(receiver_wait_count(&rcv, "/in", 1, 5000), 0);
	usleep(300 * 1000);
	/* Delivered once, not twice. */
	json_t *reqs = receiver_requests(&rcv, "/in");
	size_t seen = 0;
	for (size_t i = 0; i < json_array_size(reqs); i++) {
		json_t *h = json_object_get(json_array_get(reqs, i), "headers");
		seen += strcmp(json_string_value(json_object_get(h, "webhook-id")), id1) == 0;
	}
	assert_int_equal(seen, 1);
	json_decref(reqs);
	json_decref(first);
	json_decref(second);
}

static void test_batch(void **state)
{
	json_t *r = api_call(&dmn, "POST", "/v1/events",
			     "{\"events\":[{\"event_type\":\"b.one\",\"payload\":1},"
			     "{\"event_type\":\"b.two\",\"payload\":\"two\"},"
			     "{\"event_type\":\"b.three\",\"payload_base64\":\"AQID\"}]}", 202);
	assert_int_equal(json_array_size(json_object_get(r, "ids")), 3);
	json_t *ev = e2e_get(&dmn, "/v1/events/%s",
			     json_string_value(json_array_get(json_object_get(r, "ids"), 2)));
	assert_string_equal(json_string_value(json_object_get(ev, "payload_base64")), "AQID");
	assert_string_equal(json_string_value(json_object_get(ev, "content_type")),
			    "application/octet-stream");
	json_decref(ev);
	json_decref(r);
}

/* A producer writes its outbox rows from its own process, as an application sharing the
 * SQLite file would, inserting only event_type and payload: five rows, more than
 * relay_batch (2), all relayed; a subscription with a payload filter gets the two it
 * matches. */
static void test_outbox_table_from_another_process(void **state)
{
	if (harness_pg_wanted())
		skip(); /* PostgreSQL: test_pg_producer_transaction */
	long before = receiver_count(&rcv, "/in");
	/* the relay's fan-out applies payload filters too: the even ones only */
	char even[64];
	e2e_create_sub(&dmn, even, "{\"name\":\"even\",\"event_types\":[\"user.batch\"],"
				   "\"endpoint\":\"%s/even\",\"filter\":{\"n\":{\"$in\":[2,4]}}}",
		       rcv.url);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		sqlite3 *db;
		if (sqlite3_open(e2e_db_path(&dmn), &db) != SQLITE_OK)
			_exit(1);
		sqlite3_busy_timeout(db, 5000);
		int rc = sqlite3_exec(db,
				      "BEGIN; CREATE TABLE IF NOT EXISTS app_users(name TEXT);"
				      "INSERT INTO app_users VALUES('zoe');"
				      "INSERT INTO outbox(event_type, payload) VALUES('user.created', "
				      "'{\"name\":\"zoe\"}');"
				      "INSERT INTO outbox(event_type, payload) VALUES('user.batch', "
				      "'{\"n\":1}'), ('user.batch', '{\"n\":2}'), ('user.batch', "
				      "'{\"n\":3}'), ('user.batch', '{\"n\":4}'); COMMIT;",
				      NULL, NULL, NULL);
		sqlite3_close(db);
		_exit(rc == SQLITE_OK ? 0 : 2);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);

	/* Find it among what the receiver got (earlier tests' deliveries may still arrive). */
	json_t *found = NULL;
	for (int i = 0; i < 100 && !found; i++) {
		json_t *reqs = receiver_requests(&rcv, "/in");
		for (size_t k = 0; k < json_array_size(reqs); k++) {
			json_t *r = json_array_get(reqs, k);
			const char *type = json_string_value(
				json_object_get(json_object_get(r, "headers"), "outboxd-event-type"));
			if (type && strcmp(type, "user.created") == 0)
				found = json_incref(r);
		}
		json_decref(reqs);
		if (!found)
			usleep(50 * 1000);
	}
	assert_non_null(found);
	assert_string_equal(json_string_value(json_object_get(found, "body")), "{\"name\":\"zoe\"}");
	json_decref(found);
	/* the four others, each once */
	int seen[5] = {0};
	for (int i = 0; i < 100; i++) {
		memset(seen, 0, sizeof(seen));
		json_t *reqs = receiver_requests(&rcv, "/in");
		for (size_t k = 0; k < json_array_size(reqs); k++) {
			const char *body = json_string_value(json_object_get(json_array_get(reqs, k),
									   "body"));
			int n;
			if (body && sscanf(body, "{\"n\":%d}", &n) == 1 && n >= 1 && n <= 4)
				seen[n]++;
		}
		json_decref(reqs);
		if (seen[1] && seen[2] && seen[3] && seen[4])
			break;
		usleep(50 * 1000);
	}
	for (int n = 1; n <= 4; n++)
		assert_int_equal(seen[n], 1);
	assert_true(receiver_count(&rcv, "/in") > before);
	assert_int_equal(receiver_wait_count(&rcv, "/even", 2, 5000), 0);
	json_t *evens = receiver_requests(&rcv, "/even");
	assert_int_equal(json_array_size(evens), 2);
	for (size_t k = 0; k < 2; k++) {
		const char *body = json_string_value(json_object_get(json_array_get(evens, k), "body"));
		assert_true(strcmp(body, "{\"n\":2}") == 0 || strcmp(body, "{\"n\":4}") == 0);
	}
	json_decref(evens);

	/* The row left the outbox table. */
	sqlite3 *db;
	sqlite3_stmt *st;
	assert_int_equal(sqlite3_open(e2e_db_path(&dmn), &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "SELECT count(*) FROM outbox", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(st, 0), 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
}

/* The first request the receiver got on /in with outboxd-event-type type, waiting up
 * to 5 s; returned to the caller (json_decref it), or NULL. */
static json_t *received_of_type(const char *type)
{
	for (int i = 0; i < 100; i++) {
		json_t *reqs = receiver_requests(&rcv, "/in"), *found = NULL;
		for (size_t k = 0; k < json_array_size(reqs) && !found; k++) {
			json_t *r = json_array_get(reqs, k);
			const char *t = json_string_value(
				json_object_get(json_object_get(r, "headers"), "outboxd-event-type"));
			if (t && strcmp(t, type) == 0)
				found = json_incref(r);
		}
		json_decref(reqs);
		if (found)
			return found;
		usleep(50 * 1000);
	}
	return NULL;
}

static long received_count_of_type(const char *type)
{
	json_t *reqs = receiver_requests(&rcv, "/in");
	long n = 0;
	for (size_t k = 0; k < json_array_size(reqs); k++) {
		const char *t = json_string_value(json_object_get(
			json_object_get(json_array_get(reqs, k), "headers"), "outboxd-event-type"));
		n += t && strcmp(t, type) == 0;
	}
	json_decref(reqs);
	return n;
}

/* Runs sql (several statements allowed) on conn; asserts success. */
static void pg_must(PGconn *conn, const char *sql)
{
	PGresult *r = PQexec(conn, sql);
	if (PQresultStatus(r) != PGRES_COMMAND_OK && PQresultStatus(r) != PGRES_TUPLES_OK)
		fprintf(stderr, "%s: %s", sql, PQerrorMessage(conn));
	assert_true(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK);
	PQclear(r);
}

/* A producer on PostgreSQL writes its business row and its outbox row in one transaction
 * of its own: a commit is delivered, a rollback leaves no trace. */
static void test_pg_producer_transaction(void **state)
{
	if (!harness_pg_wanted())
		skip(); /* SQLite: test_outbox_table_from_another_process */
	PGconn *conn = PQconnectdb(dmn.db);
	assert_int_equal(PQstatus(conn), CONNECTION_OK);
	pg_must(conn, "CREATE TABLE IF NOT EXISTS app_users(name text PRIMARY KEY)");
	pg_must(conn, "BEGIN;"
		      "INSERT INTO app_users(name) VALUES ('zoe');"
		      "INSERT INTO outboxd.outbox(event_type, payload)"
		      " VALUES ('user.created', convert_to('{\"name\":\"zoe\"}', 'UTF8'));"
		      "COMMIT");
	pg_must(conn, "BEGIN;"
		      "INSERT INTO app_users(name) VALUES ('ghost');"
		      "INSERT INTO outboxd.outbox(event_type, payload)"
		      " VALUES ('user.ghost', convert_to('{\"name\":\"ghost\"}', 'UTF8'));"
		      "ROLLBACK");
	/* Committed after the rollback: once it has arrived, the relay has long passed the
	 * rolled-back row's place. */
	pg_must(conn, "BEGIN;"
		      "INSERT INTO app_users(name) VALUES ('amy');"
		      "INSERT INTO outboxd.outbox(event_type, source, source_event_id, payload)"
		      " VALUES ('user.marker', 'crm', 'amy-1', convert_to('{\"name\":\"amy\"}', 'UTF8'));"
		      "COMMIT");

	json_t *zoe = received_of_type("user.created");
	assert_non_null(zoe);
	assert_string_equal(json_string_value(json_object_get(zoe, "body")), "{\"name\":\"zoe\"}");
	json_decref(zoe);
	json_t *amy = received_of_type("user.marker");
	assert_non_null(amy);
	json_t *ev = e2e_get(&dmn, "/v1/events/%s", json_string_value(json_object_get(
				       json_object_get(amy, "headers"), "webhook-id")));
	assert_string_equal(json_string_value(json_object_get(ev, "source")), "crm");
	assert_string_equal(json_string_value(json_object_get(ev, "source_event_id")), "amy-1");
	json_decref(ev);
	json_decref(amy);
	usleep(300 * 1000);
	assert_int_equal(received_count_of_type("user.ghost"), 0);

	/* The rows left the outbox table; the business table has exactly the commits. */
	PGresult *r = PQexec(conn, "SELECT (SELECT count(*) FROM outboxd.outbox),"
				   " (SELECT string_agg(name, ',' ORDER BY name) FROM app_users)");
	assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
	assert_string_equal(PQgetvalue(r, 0, 0), "0");
	assert_string_equal(PQgetvalue(r, 0, 1), "amy,zoe");
	PQclear(r);
	PQfinish(conn);
}

/* outboxd.enqueue(): a call instead of an INSERT, with text, jsonb and bytea payloads;
 * a repeated (source, source_event_id) is delivered once. */
static void test_pg_enqueue(void **state)
{
	if (!harness_pg_wanted())
		skip(); /* a PostgreSQL function */
	PGconn *conn = PQconnectdb(dmn.db);
	assert_int_equal(PQstatus(conn), CONNECTION_OK);
	pg_must(conn, "BEGIN;"
		      "SELECT outboxd.enqueue('invoice.sent', '{\"n\":1}');"
		      "SELECT outboxd.enqueue('invoice.paid', '{\"n\": 2}'::jsonb,"
		      " source => 'billing', source_event_id => 'inv-2');"
		      "SELECT outboxd.enqueue('invoice.paid', '{\"n\": 2}'::jsonb,"
		      " source => 'billing', source_event_id => 'inv-2');"
		      "SELECT outboxd.enqueue('invoice.raw', '\\x0001ff'::bytea,"
		      " content_type => 'application/octet-stream');"
		      "COMMIT");
	json_t *sent = received_of_type("invoice.sent");
	json_t *paid = received_of_type("invoice.paid");
	json_t *raw = received_of_type("invoice.raw");
	assert_non_null(sent);
	assert_non_null(paid);
	assert_non_null(raw);
	assert_string_equal(json_string_value(json_object_get(sent, "body")), "{\"n\":1}");
	assert_string_equal(json_string_value(json_object_get(paid, "body")), "{\"n\": 2}");
	json_t *ev = e2e_get(&dmn, "/v1/events/%s", json_string_value(json_object_get(
				       json_object_get(raw, "headers"), "webhook-id")));
	assert_string_equal(json_string_value(json_object_get(ev, "payload_base64")), "AAH/");
	json_decref(ev);
	usleep(300 * 1000);
	assert_int_equal(received_count_of_type("invoice.paid"), 1);
	json_decref(sent);
	json_decref(paid);
	json_decref(raw);
	PQfinish(conn);
}

struct bad_case {
	const char *name;
	const char *method;
	const char *path;
	const char *token;        /* "admin", "ingest", "wrong" or NULL */
	const char *content_type;
	const char *body;
	long status;
	const char *code;
	const char *field;        /* NULL: not checked */
};

static void test_bad_input(void **state)
{
	static const struct bad_case cases[] = {
		{"malformed JSON", "POST", "/v1/events", "admin", NULL, "{\"event_type\":", 400,
		 "invalid_json", NULL},
		{"not an object", "POST", "/v1/events", "admin", NULL, "[1,2]", 400, "invalid_argument", NULL},
		{"missing event_type", "POST", "/v1/events", "admin", NULL, "{\"payload\":{}}", 400,
		 "invalid_argument", "event_type"},
		{"event_type wrong type", "POST", "/v1/events", "admin", NULL,
		 "{\"event_type\":5,\"payload\":{}}", 400, "invalid_argument", "event_type"},
		{"missing payload", "POST", "/v1/events", "admin", NULL, "{\"event_type\":\"a.b\"}", 400,
		 "invalid_argument", "payload"},
		{"both payloads", "POST", "/v1/events", "admin", NULL,
		 "{\"event_type\":\"a.b\",\"payload\":1,\"payload_base64\":\"AQ==\"}", 400,
		 "invalid_argument", "payload"},
		{"bad base64", "POST", "/v1/events", "admin", NULL,
		 "{\"event_type\":\"a.b\",\"payload_base64\":\"***\"}", 400, "invalid_argument",
		 "payload_base64"},
		{"unknown event field", "POST", "/v1/events", "admin", NULL,
		 "{\"event_type\":\"a.b\",\"payload\":1,\"colour\":\"red\"}", 400, "invalid_argument",
		 "colour"},
		{"bad event in a batch", "POST", "/v1/events", "admin", NULL,
		 "{\"events\":[{\"event_type\":\"ok.one\",\"payload\":1},{\"event_type\":\"\",\"payload\":2}]}",
		 400, "invalid_argument", "events[1].event_type"},
		{"payload over the limit", "POST", "/v1/events", "admin", NULL, NULL, 413,
		 "payload_too_large", "payload"},
		{"body over the request limit", "POST", "/v1/events", "admin", NULL, NULL, 413,
		 "payload_too_large", NULL},
		{"not JSON content type", "POST", "/v1/events", "admin", "text/plain", "hello", 415,
		 "unsupported_media_type", NULL},
		{"unknown subscription field", "POST", "/v1/subscriptions", "admin", NULL,
		 "{\"name\":\"x\",\"event_types\":[\"*\"],\"endpoint\":\"http://127.0.0.1:9/\",\"colour\":1}",
		 400, "invalid_argument", "colour"},
		{"invalid URL", "POST", "/v1/subscriptions", "admin", NULL,
		 "{\"name\":\"x\",\"event_types\":[\"*\"],\"endpoint\":\"ftp://example.com\"}", 400,
		 "invalid_argument", "endpoint"},
		{"URL without host", "POST", "/v1/subscriptions", "admin", NULL,
		 "{\"name\":\"x\",\"event_types\":[\"*\"],\"endpoint\":\"http:///path\"}", 400,
		 "invalid_argument", "endpoint"},
		{"missing event_types", "POST", "/v1/subscriptions", "admin", NULL,
		 "{\"name\":\"x\",\"endpoint\":\"http://127.0.0.1:9/\"}", 400, "invalid_argument",
		 "event_types"},
		{"bad retry policy", "POST", "/v1/subscriptions", "admin", NULL,
		 "{\"name\":\"x\",\"event_types\":[\"*\"],\"endpoint\":\"http://127.0.0.1:9/\","
		 "\"retry\":{\"policy\":\"sometimes\"}}", 400, "invalid_argument", "retry.policy"},
		{"bad duration", "POST", "/v1/subscriptions", "admin", NULL,
		 "{\"name\":\"x\",\"event_types\":[\"*\"],\"endpoint\":\"http://127.0.0.1:9/\","
		 "\"timeout\":\"soon\"}", 400, "invalid_argument", "timeout"},
		{"duplicate name", "POST", "/v1/subscriptions", "admin", NULL,
		 "{\"name\":\"all\",\"event_types\":[\"*\"],\"endpoint\":\"http://127.0.0.1:9/\"}", 409,
		 "conflict", "name"},
		{"invalid UUID in path", "GET", "/v1/deliveries/not-a-uuid", "admin", NULL, NULL, 400,
		 "invalid_argument", "id"},
		{"unknown delivery", "GET", "/v1/deliveries/01890a5d-ac96-774b-bcce-b302099a8057",
		 "admin", NULL, NULL, 404, "not_found", NULL},
		{"unknown route", "GET", "/v1/nothing-here", "admin", NULL, NULL, 404, "not_found", NULL},
		{"wrong method", "DELETE", "/v1/events", "admin", NULL, NULL, 405, "method_not_allowed",
		 NULL},
		{"missing token", "GET", "/v1/deliveries", NULL, NULL, NULL, 401, "unauthenticated", NULL},
		{"wrong token", "GET", "/v1/deliveries", "wrong", NULL, NULL, 401, "unauthenticated", NULL},
		{"ingest token elsewhere", "GET", "/v1/subscriptions", "ingest", NULL, NULL, 403,
		 "forbidden", NULL},
		{"bad list filter", "GET", "/v1/deliveries?status=LOST", "admin", NULL, NULL, 400,
		 "invalid_argument", "status"},
		{"bad limit", "GET", "/v1/deliveries?limit=5000", "admin", NULL, NULL, 400,
		 "invalid_argument", "limit"},
		{"bad cursor", "GET", "/v1/deliveries?cursor=garbage", "admin", NULL, NULL, 400,
		 "invalid_argument", "cursor"},
		{"replay with bad id", "POST", "/v1/dlq/replay", "admin", NULL, "{\"ids\":[\"nope\"]}",
		 400, "invalid_argument", "ids[0]"},
	};
	size_t before = delivery_total();

	/* Bodies over the limits are built here. */
	char big_payload[2048], big_body[70 * 1024];
	snprintf(big_payload, sizeof(big_payload), "{\"event_type\":\"a.b\",\"payload\":\"%01500d\"}", 0);
	memset(big_body, ' ', sizeof(big_body) - 1);
	big_body[sizeof(big_body) - 1] = '\0';
	memcpy(big_body, "{\"events\":[]}", 13);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct bad_case *c = &cases[i];
		const char *body = c->body;
		if (!body && strcmp(c->name, "payload over the limit") == 0)
			body = big_payload;
		if (!body && strcmp(c->name, "body over the request limit") == 0)
			body = big_body;
		const char *token = !c->token ? NULL
				    : strcmp(c->token, "admin") == 0 ? dmn.token
				    : strcmp(c->token, "ingest") == 0 ? "test-ingest-token"
								       : "not-the-token";
		char url[512];
		snprintf(url, sizeof(url), "%s%s", dmn.url, c->path);
		struct http_resp r;
		assert_int_equal(http_do(c->method, url, token, c->content_type, body,
					 body ? strlen(body) : 0, &r), 0);
		if (r.status != c->status || !r.json) {
			fprintf(stderr, "case \"%s\": got %ld %s\n", c->name, r.status,
				r.body ? r.body : "");
		}
		assert_int_equal(r.status, c->status);
		assert_non_null(r.json);
		json_t *e = json_object_get(r.json, "error");
		assert_non_null(e);
		assert_string_equal(json_string_value(json_object_get(e, "code")), c->code);
		assert_true(json_string_length(json_object_get(e, "message")) > 0);
		if (c->field) {
			const char *f = json_string_value(json_object_get(e, "field"));
			if (!f || strcmp(f, c->field) != 0)
				fprintf(stderr, "case \"%s\": field %s, want %s\n", c->name,
					f ? f : "(none)", c->field);
			assert_non_null(f);
			assert_string_equal(f, c->field);
		}
		http_resp_free(&r);
	}
	/* Nothing was stored half-way. */
	assert_int_equal(delivery_total(), before);

	/* The daemon is still healthy after all of it. */
	struct http_resp h;
	char url[128];
	snprintf(url, sizeof(url), "%s/healthz", dmn.url);
	assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &h), 0);
	assert_int_equal(h.status, 200);
	http_resp_free(&h);
	snprintf(url, sizeof(url), "%s/readyz", dmn.url);
	assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &h), 0);
	assert_int_equal(h.status, 200);
	http_resp_free(&h);
}

static void test_ingest_token_may_send(void **state)
{
	char url[128];
	struct http_resp r;
	snprintf(url, sizeof(url), "%s/v1/events", dmn.url);
	const char *body = "{\"event_type\":\"t.ok\",\"payload\":true}";
	assert_int_equal(http_do("POST", url, "test-ingest-token", NULL, body, strlen(body), &r), 0);
	assert_int_equal(r.status, 202);
	http_resp_free(&r);
}

/* Prometheus text at /metrics, without a token by default. */
static void test_metrics(void **state)
{
	char url[128];
	struct http_resp r;
	snprintf(url, sizeof(url), "%s/metrics", dmn.url);
	assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "# TYPE outboxd_ingested_events_total counter"));
	long ingested = -1, rejected = -1, up = -1;
	const char *ing = "\noutboxd_ingested_events_total{protocol=\"http\"} ";
	const char *rej = "\noutboxd_ingest_rejected_total{protocol=\"http\",class=\"4xx\"} ";
	const char *p = strstr(r.body, ing);
	if (p)
		ingested = atol(p + strlen(ing));
	p = strstr(r.body, rej);
	if (p)
		rejected = atol(p + strlen(rej));
	/* nothing came over gRPC (off by default) */
	assert_non_null(strstr(r.body, "\noutboxd_ingested_events_total{protocol=\"grpc\"} 0\n"));
	p = strstr(r.body, "\noutboxd_store_up ");
	if (p)
		up = atol(p + strlen("\noutboxd_store_up "));
	assert_true(ingested >= 6); /* the events of the tests before */
	assert_true(rejected >= 8); /* the bad-input cases refused by validation */
	assert_int_equal(up, 1);
	assert_non_null(strstr(r.body, "outboxd_dlq_depth "));
	assert_non_null(strstr(r.body, "outboxd_attempt_duration_seconds_bucket{le=\"+Inf\"}"));
	http_resp_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_idempotent_ingest),
		cmocka_unit_test(test_batch),
		cmocka_unit_test(test_outbox_table_from_another_process),
		cmocka_unit_test(test_pg_producer_transaction),
		cmocka_unit_test(test_pg_enqueue),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_ingest_token_may_send),
		cmocka_unit_test(test_metrics),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
