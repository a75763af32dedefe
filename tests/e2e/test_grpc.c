/* test_grpc.c: the gRPC ingest (grpc_listen, docs/grpc.md) against a real gRPC client —
 * Node's @grpc/grpc-js with the .proto files loaded by @grpc/proto-loader
 * (tests/support/grpc/client.mjs) — idempotency and an outage of the store on both
 * stores, the rest on SQLite (sqlite_only, below): 10,000 events in Publish and
 * PublishStream calls all delivered to the receiver; bad envelopes INVALID_ARGUMENT
 * naming the field, a stream all or nothing; wrong and ingest-less tokens
 * UNAUTHENTICATED and PERMISSION_DENIED; idempotency by (source, source_event_id); trace
 * contexts carried to the subscriber; the
 * store down answered UNAVAILABLE with nothing stored; a stream still sending when
 * SIGTERM comes refused UNAVAILABLE with a clean stop; TLS with tls_cert. */
#include "e2e.h"
#include "harness_pg.h"

#include <sqlite3.h>
#include <sys/stat.h>

#define OUT_MAX (4 << 20)      /* the client's JSON: 10,000 ids fit */
#define EVENTS_EACH 5000       /* events through Publish, and as many through PublishStream */

static struct receiver rcv;
static struct daemon dmn;
static int grpc_port;
static char grpc_env[64];
static char sub_id[64];

/* What the store does not change (validation, auth, tracing, streams, TLS, throughput
 * through the ingest shared with HTTP) runs on SQLite only: on PostgreSQL (e2e-pg) only
 * the cases that touch the store's own behaviour run — idempotency by its unique index,
 * and an outage of the server — which keeps make test within its 10 minutes. */
static void sqlite_only(void)
{
	if (harness_pg_wanted())
		skip();
}

static int setup(void **state)
{
	grpc_port = harness_free_port();
	snprintf(grpc_env, sizeof(grpc_env), "OUTBOXD_GRPC_LISTEN=127.0.0.1:%d", grpc_port);
	const char *env[] = {grpc_env, NULL};
	e2e_setup(&rcv, &dmn, env);
	e2e_create_sub(&dmn, sub_id, "{\"name\":\"grpc\",\"event_types\":[\"grpc.*\"],"
		       "\"endpoint\":\"%s/grpc\"}", rcv.url);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

/* Runs the client (GRPC_CLIENT: node and client.mjs) with args against port; its JSON
 * line, returned to the caller (json_decref it). Fails the test when it prints none. */
static json_t *client_at(int port, const char *args)
{
	char *cmd = malloc(16384), *out = malloc(OUT_MAX);
	assert_non_null(cmd);
	assert_non_null(out);
	snprintf(cmd, 16384, "%s --target 127.0.0.1:%d %s", getenv("GRPC_CLIENT"), port, args);
	int rc = e2e_run(cmd, out, OUT_MAX);
	json_error_t jerr;
	json_t *doc = json_loads(out, JSON_DISABLE_EOF_CHECK, &jerr);
	if (rc != 0 || !doc)
		fail_msg("%s: exit %d, output %.500s", cmd, rc, out);
	free(cmd);
	free(out);
	return doc;
}

#define client(args) client_at(grpc_port, (args))

static long code_of(json_t *a)
{
	return json_integer_value(json_object_get(a, "code"));
}

static const char *details_of(json_t *a)
{
	const char *d = json_string_value(json_object_get(a, "details"));
	return d ? d : "";
}

static const char *trailer_of(json_t *a, const char *key)
{
	const char *v = json_string_value(json_object_get(json_object_get(a, "trailers"), key));
	return v ? v : "";
}

static void expect_code(json_t *a, long code, const char *in_details)
{
	if (code_of(a) != code || !strstr(details_of(a), in_details)) {
		char *text = json_dumps(a, JSON_COMPACT);
		fail_msg("expected code %ld with \"%s\", got %s", code, in_details, text);
	}
}

enum { GRPC_OK = 0, GRPC_INVALID_ARGUMENT = 3, GRPC_PERMISSION_DENIED = 7,
       GRPC_UNAVAILABLE = 14, GRPC_UNAUTHENTICATED = 16 };

static int receiver_has_all(void *arg)
{
	json_t *st = receiver_stats(arg, NULL);
	long unique = json_integer_value(json_object_get(st, "unique_ids"));
	json_decref(st);
	return unique >= 2 * EVENTS_EACH;
}

/* The value of one sample of GET /metrics (its name with labels, as rendered), -1 when
 * absent. */
static long metric_value(const char *sample)
{
	char url[160], needle[256];
	struct http_resp r;
	long v = -1;
	snprintf(url, sizeof(url), "%s/metrics", dmn.url);
	snprintf(needle, sizeof(needle), "\n%s ", sample);
	assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &r), 0);
	const char *p = r.body ? strstr(r.body, needle) : NULL;
	if (p)
		v = atol(p + strlen(needle));
	http_resp_free(&r);
	return v;
}

/* 5,000 events in Publish calls (8 at once) and 5,000 in PublishStream calls of 500: every
 * call answered OK with its ids, every id a new event, and every event delivered. The
 * load's events (type load.grpc) are the only ones its receiver gets and each delivery's
 * webhook-id is its event's id, so the receiver's unique webhook-ids are the ids returned
 * when there are as many. */
static void test_ten_thousand_events_delivered(void **state)
{
	sqlite_only();
	struct receiver load;
	char args[256], load_sub[64];
	assert_int_equal(receiver_start(&load), 0);
	e2e_create_sub(&dmn, load_sub, "{\"name\":\"grpc-load\",\"event_types\":[\"load.*\"],"
		       "\"endpoint\":\"%s/load\"}", load.url);
	snprintf(args, sizeof(args), "--token test-ingest-token load --unary %d --stream %d "
		 "--stream-size 500 --concurrency 8 --type load.grpc --run load", EVENTS_EACH,
		 EVENTS_EACH);
	json_t *r = client(args);
	json_t *errors = json_object_get(r, "errors");
	if (json_array_size(errors)) {
		char *text = json_dumps(errors, JSON_COMPACT);
		fail_msg("calls failed: %s", text);
	}
	assert_int_equal(json_integer_value(json_object_get(r, "unary_ok")), EVENTS_EACH);
	assert_int_equal(json_integer_value(json_object_get(r, "stream_ok")), EVENTS_EACH);
	assert_int_equal(json_integer_value(json_object_get(r, "duplicates")), 0);
	json_t *ids = json_object_get(r, "ids");
	assert_int_equal(json_array_size(ids), 2 * EVENTS_EACH);
	/* each id a new event */
	json_t *sent = json_object();
	for (size_t i = 0; i < json_array_size(ids); i++)
		json_object_set_new(sent, json_string_value(json_array_get(ids, i)), json_true());
	assert_int_equal(json_object_size(sent), 2 * EVENTS_EACH);

	if (harness_wait(receiver_has_all, &load, 240000))
		fail_msg("the receiver did not get %d unique webhook-ids in 4 minutes",
			 2 * EVENTS_EACH);
	json_t *st = receiver_stats(&load, NULL);
	assert_int_equal(json_integer_value(json_object_get(st, "unique_ids")), 2 * EVENTS_EACH);
	json_decref(st);
	receiver_stop(&load);
	/* and one of them, end to end: its event as sent, its delivery done */
	const char *one = json_string_value(json_array_get(ids, EVENTS_EACH + 17));
	json_t *ev = e2e_get(&dmn, "/v1/events/%s", one);
	assert_string_equal(json_string_value(json_object_get(ev, "event_type")), "load.grpc");
	/* a streamed one (the client lists the Publish calls' ids first) */
	assert_int_equal(strncmp(json_string_value(json_object_get(ev, "source_event_id")),
				 "load-s-", 7), 0);
	json_t *del = json_array_get(json_object_get(ev, "deliveries"), 0);
	assert_string_equal(json_string_value(json_object_get(del, "status")), "PROCESSED");
	json_decref(ev);
	json_decref(sent);
	json_decref(r);
	/* counted as gRPC ingest in /metrics (and OTLP: network.protocol.name grpc) */
	assert_true(metric_value("outboxd_ingested_events_total{protocol=\"grpc\"}") >=
		    2 * EVENTS_EACH);
}

static void test_bad_envelopes_name_the_field(void **state)
{
	sqlite_only();
	json_t *a = client("--token test-ingest-token publish "
			   "'{\"event\":{\"type\":\"\",\"payload\":\"{}\"}}'");
	expect_code(a, GRPC_INVALID_ARGUMENT, "event.type is required");
	assert_string_equal(trailer_of(a, "outboxd-error-field"), "event.type");
	assert_string_equal(trailer_of(a, "outboxd-error-code"), "invalid_argument");
	json_decref(a);

	a = client("--token test-ingest-token publish "
		   "'{\"event\":{\"type\":\"grpc.bad\",\"payload\":\"not json\"}}'");
	expect_code(a, GRPC_INVALID_ARGUMENT, "event.payload is not JSON");
	assert_string_equal(trailer_of(a, "outboxd-error-field"), "event.payload");
	json_decref(a);

	a = client("--token test-ingest-token publish '{\"event\":{\"type\":\"grpc.bad\","
		   "\"payload\":\"{}\"},\"endpoint\":\"https://hooks.example.com/\"}'");
	expect_code(a, GRPC_INVALID_ARGUMENT, "endpoint must be unset");
	json_decref(a);
	assert_true(metric_value("outboxd_ingest_rejected_total{protocol=\"grpc\",class=\"4xx\"}") >=
		    3);

	/* a stream is all or nothing: its good first event is not stored either, so the
	 * same stream with the bad one fixed stores both, neither a duplicate (the binary
	 * payload has no NUL byte: the receiver's record of it stays JSON the harness reads) */
	a = client("--token test-ingest-token stream '["
		   "{\"event\":{\"type\":\"grpc.one\",\"source\":\"t\",\"source_event_id\":\"aon-1\","
		   "\"payload\":\"{}\"}},"
		   "{\"event\":{\"type\":\"grpc two\",\"source\":\"t\",\"source_event_id\":\"aon-2\","
		   "\"payload\":\"{}\"}}]'");
	expect_code(a, GRPC_INVALID_ARGUMENT, "message 1 of the stream: event.type");
	json_decref(a);
	a = client("--token test-ingest-token stream '["
		   "{\"event\":{\"type\":\"grpc.one\",\"source\":\"t\",\"source_event_id\":\"aon-1\","
		   "\"payload\":\"{}\"}},"
		   "{\"event\":{\"type\":\"grpc.two\",\"source\":\"t\",\"source_event_id\":\"aon-2\","
		   "\"payload_base64\":\"AQID\"},\"payload_type\":\"PAYLOAD_TYPE_BINARY\"}]'");
	expect_code(a, GRPC_OK, "");
	assert_int_equal(json_array_size(json_object_get(a, "ids")), 2);
	assert_int_equal(json_array_size(json_object_get(a, "duplicates")), 0);
	json_t *ev = e2e_get(&dmn, "/v1/events/%s",
			     json_string_value(json_array_get(json_object_get(a, "ids"), 1)));
	assert_string_equal(json_string_value(json_object_get(ev, "payload_base64")), "AQID");
	assert_string_equal(json_string_value(json_object_get(ev, "content_type")),
			    "application/octet-stream");
	json_decref(ev);
	json_decref(a);
}

static void test_tokens_and_scopes(void **state)
{
	sqlite_only();
	json_t *a = client("--token wrong-token publish "
			   "'{\"event\":{\"type\":\"grpc.auth\",\"payload\":\"{}\"}}'");
	expect_code(a, GRPC_UNAUTHENTICATED, "invalid bearer token");
	json_decref(a);
	a = client("publish '{\"event\":{\"type\":\"grpc.auth\",\"payload\":\"{}\"}}'");
	expect_code(a, GRPC_UNAUTHENTICATED, "Bearer");
	json_decref(a);

	/* named tokens: one without the ingest scope, one with it */
	json_t *reader = api_call(&dmn, "POST", "/v1/tokens",
				  "{\"name\":\"grpc-reader\",\"scopes\":[\"read\"]}", 201);
	json_t *writer = api_call(&dmn, "POST", "/v1/tokens",
				  "{\"name\":\"grpc-producer\",\"scopes\":[\"ingest\"]}", 201);
	char args[512];
	snprintf(args, sizeof(args), "--token %s publish "
		 "'{\"event\":{\"type\":\"grpc.auth\",\"payload\":\"{}\"}}'",
		 json_string_value(json_object_get(reader, "token")));
	a = client(args);
	expect_code(a, GRPC_PERMISSION_DENIED, "needs the ingest scope");
	assert_string_equal(trailer_of(a, "outboxd-error-code"), "forbidden");
	json_decref(a);
	snprintf(args, sizeof(args), "--token %s publish "
		 "'{\"event\":{\"type\":\"grpc.auth\",\"payload\":\"{}\"}}'",
		 json_string_value(json_object_get(writer, "token")));
	a = client(args);
	expect_code(a, GRPC_OK, "");
	json_decref(a);
	/* the admin token may ingest too, as on POST /v1/events */
	a = client("--token test-admin-token publish "
		   "'{\"event\":{\"type\":\"grpc.auth\",\"payload\":\"{}\"}}'");
	expect_code(a, GRPC_OK, "");
	json_decref(a);
	json_decref(reader);
	json_decref(writer);
}

static void test_idempotency(void **state)
{
	const char *args = "--token test-ingest-token publish '{\"event\":{\"type\":\"grpc.once\","
			   "\"source\":\"shop\",\"source_event_id\":\"order-17\",\"payload\":\"{\\\"n\\\":1}\"}}'";
	json_t *first = client(args), *second = client(args);
	expect_code(first, GRPC_OK, "");
	expect_code(second, GRPC_OK, "");
	const char *id = json_string_value(json_array_get(json_object_get(first, "ids"), 0));
	assert_string_equal(id, json_string_value(json_array_get(json_object_get(second, "ids"), 0)));
	assert_int_equal(json_array_size(json_object_get(first, "duplicates")), 0);
	assert_int_equal(json_integer_value(json_array_get(json_object_get(second, "duplicates"), 0)),
			 0);
	assert_int_equal(json_array_size(json_object_get(second, "duplicates")), 1);
	/* the same key through a stream, and through POST /v1/events: still the one event */
	json_t *third = client("--token test-ingest-token stream '[{\"event\":{\"type\":\"grpc.once\","
			       "\"source\":\"shop\",\"source_event_id\":\"order-17\",\"payload\":\"2\"}}]'");
	assert_string_equal(id, json_string_value(json_array_get(json_object_get(third, "ids"), 0)));
	json_t *http = api_call(&dmn, "POST", "/v1/events", "{\"event_type\":\"grpc.once\","
				"\"source\":\"shop\",\"source_event_id\":\"order-17\",\"payload\":3}", 202);
	assert_string_equal(id, json_string_value(json_array_get(json_object_get(http, "ids"), 0)));
	char ids[4][64];
	assert_int_equal(e2e_deliveries_of(&dmn, id, ids, 4), 1);
	json_decref(http);
	json_decref(third);
	json_decref(second);
	json_decref(first);
}

/* The webhook-id a request the receiver got on /grpc has, or NULL: that request's
 * traceparent header (borrowed from reqs). */
static const char *traceparent_of(json_t *reqs, const char *id)
{
	for (size_t i = 0; i < json_array_size(reqs); i++) {
		json_t *h = json_object_get(json_array_get(reqs, i), "headers");
		const char *wid = json_string_value(json_object_get(h, "webhook-id"));
		if (wid && strcmp(wid, id) == 0)
			return json_string_value(json_object_get(h, "traceparent"));
	}
	return NULL;
}

/* A trace context travels with the events to their subscriber, as POST /v1/events's
 * header does: the envelope's own, else the call's traceparent metadata. */
static void test_trace_context_travels(void **state)
{
	sqlite_only();
	const char *own = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
	json_t *a = client("--token test-ingest-token --traceparent "
			   "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01 stream '["
			   "{\"event\":{\"type\":\"grpc.trace\",\"payload\":\"1\"}},"
			   "{\"event\":{\"type\":\"grpc.trace\",\"payload\":\"2\"},"
			   "\"traceparent\":\"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}]'");
	expect_code(a, GRPC_OK, "");
	json_t *ids = json_object_get(a, "ids");
	const char *from_call = json_string_value(json_array_get(ids, 0));
	const char *from_event = json_string_value(json_array_get(ids, 1));
	const char *tp_call = NULL, *tp_event = NULL;
	json_t *reqs = NULL;
	for (int64_t until = harness_now_ms() + 30000; harness_now_ms() < until;) {
		json_decref(reqs);
		reqs = receiver_requests(&rcv, "/grpc");
		tp_call = traceparent_of(reqs, from_call);
		tp_event = traceparent_of(reqs, from_event);
		if (tp_call && tp_event)
			break;
		usleep(100 * 1000);
	}
	assert_non_null(tp_call);
	assert_non_null(tp_event);
	/* the same trace id, a span id of the attempt's own */
	assert_memory_equal(tp_call, "00-4bf92f3577b34da6a3ce929d0e0e4736-", 36);
	assert_memory_equal(tp_event, own, 36);
	json_decref(reqs);
	json_decref(a);
}

/* The store taken away (PostgreSQL halted, or SQLite's write lock held by another
 * connection, as tests/e2e/test_spool.c does): a call is answered UNAVAILABLE, and nothing
 * of it was stored — once the store is back, the same event is new, not a duplicate. */
static void test_store_down_is_unavailable(void **state)
{
	const char *args = "--token test-ingest-token publish '{\"event\":{\"type\":\"grpc.down\","
			   "\"source\":\"t\",\"source_event_id\":\"while-down\",\"payload\":\"{}\"}}'";
	sqlite3 *lock = NULL;
	if (harness_pg_wanted()) {
		assert_int_equal(pg_server_halt(harness_pg()), 0);
	} else {
		assert_int_equal(sqlite3_open_v2(e2e_db_path(&dmn), &lock, SQLITE_OPEN_READWRITE,
						 NULL), SQLITE_OK);
		sqlite3_busy_timeout(lock, 10000);
		assert_int_equal(sqlite3_exec(lock, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	}
	/* UNAVAILABLE, for the store itself, or for the subscriptions when the daemon found
	 * the store gone while re-reading them (either may come first) */
	json_t *a = client(args);
	const char *why = trailer_of(a, "outboxd-error-code");
	if (strcmp(why, "subscriptions_unavailable") == 0) {
		expect_code(a, GRPC_UNAVAILABLE, "subscriptions cannot be read from the store");
	} else {
		expect_code(a, GRPC_UNAVAILABLE, "store is unavailable");
		assert_string_equal(why, "unavailable");
	}
	json_decref(a);
	if (lock) {
		assert_int_equal(sqlite3_exec(lock, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
		sqlite3_close(lock);
	} else {
		assert_int_equal(pg_server_start(harness_pg()), 0);
	}
	/* back: the daemon may need a moment to find its store again (UNAVAILABLE meanwhile) */
	int64_t until = harness_now_ms() + 30000;
	for (;;) {
		a = client(args);
		if (code_of(a) != GRPC_UNAVAILABLE || harness_now_ms() > until)
			break;
		json_decref(a);
		usleep(200 * 1000);
	}
	expect_code(a, GRPC_OK, "");
	assert_int_equal(json_array_size(json_object_get(a, "duplicates")), 0);
	json_decref(a);
}

/* SIGTERM while a stream is still sending: the stream is told UNAVAILABLE (nothing of it
 * stored, to be sent again), and the daemon stops cleanly. Runs last: it stops dmn. */
static void test_sigterm_refuses_open_stream(void **state)
{
	sqlite_only();
	char cmd[1024], line[4096];
	snprintf(cmd, sizeof(cmd), "%s --target 127.0.0.1:%d --token test-ingest-token hold "
		 "'{\"event\":{\"type\":\"grpc.hold\",\"source\":\"t\",\"source_event_id\":\"held\","
		 "\"payload\":\"{}\"}}'", getenv("GRPC_CLIENT"), grpc_port);
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	assert_non_null(fgets(line, sizeof(line), p));
	if (!strstr(line, "\"open\":true"))
		fail_msg("the stream did not open: %s", line);
	assert_int_equal(daemon_stop(&dmn), 0);
	assert_non_null(fgets(line, sizeof(line), p));
	pclose(p);
	json_t *a = json_loads(line, 0, NULL);
	assert_non_null(a);
	int code = code_of(a);
	json_decref(a);
	if (code != GRPC_UNAVAILABLE) {
		char *log = e2e_daemon_log(&dmn);
		size_t n = strlen(log);
		fprintf(stderr, "the daemon's log ends:\n%s\n", log + (n > 3000 ? n - 3000 : 0));
		free(log);
		fail_msg("the open stream was not told UNAVAILABLE: %s", line);
	}
}

/* With tls_cert and tls_key the gRPC ingest speaks TLS with them. */
static void test_tls(void **state)
{
	sqlite_only();
	struct daemon d;
	char *dir = harness_tmpdir("grpc-tls");
	char cmd[2048], cert[512], key[512], env_cert[600], env_key[600], env_listen[64];
	e2e_self_signed(dir, cert, key);
	snprintf(env_cert, sizeof(env_cert), "OUTBOXD_TLS_CERT=%s", cert);
	snprintf(env_key, sizeof(env_key), "OUTBOXD_TLS_KEY=%s", key);
	int port = harness_free_port();
	snprintf(env_listen, sizeof(env_listen), "OUTBOXD_GRPC_LISTEN=127.0.0.1:%d", port);
	setenv("HARNESS_CA_FILE", cert, 1);
	const char *env[] = {env_cert, env_key, env_listen, NULL};
	e2e_setup(NULL, &d, env);
	snprintf(cmd, sizeof(cmd), "--ca %s --token test-ingest-token publish "
		 "'{\"event\":{\"type\":\"grpc.tls\",\"payload\":\"{}\"}}'", cert);
	json_t *a = client_at(port, cmd);
	expect_code(a, GRPC_OK, "");
	json_decref(a);
	/* a plaintext client gets nowhere */
	a = client_at(port, "--wait no --token test-ingest-token publish "
		      "'{\"event\":{\"type\":\"grpc.tls\",\"payload\":\"{}\"}}' 2>/dev/null");
	assert_int_not_equal(code_of(a), GRPC_OK);
	json_decref(a);
	unsetenv("HARNESS_CA_FILE");
	e2e_teardown(NULL, &d);
	harness_rmrf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_envelopes_name_the_field),
		cmocka_unit_test(test_tokens_and_scopes),
		cmocka_unit_test(test_idempotency),
		cmocka_unit_test(test_trace_context_travels),
		cmocka_unit_test(test_store_down_is_unavailable),
		cmocka_unit_test(test_ten_thousand_events_delivered),
		cmocka_unit_test(test_sigterm_refuses_open_stream),
	};
	const struct CMUnitTest tls[] = {
		cmocka_unit_test(test_tls),
	};
	int failed = cmocka_run_group_tests_name("grpc", tests, setup, teardown);
	if (harness_pg_wanted()) /* sqlite_only: not even its daemon */
		return failed;
	return failed + cmocka_run_group_tests_name("grpc-tls", tls, NULL, NULL);
}
