/* test_delivery.c: what a subscriber sees — fan-out with exact bodies and headers,
 * signatures, immediate retries, and the error mapping of failed attempts (timeout
 * 504, connection refused 503). Real daemon, real receiver. */
#include "e2e.h"

static struct receiver rcv;
static struct daemon dmn;

static int setup(void **state)
{
	/* A try waits up to 10 s for its answer, so a busy machine never turns an answered
	 * request into one more try: the counts of requests and attempts below are exact.
	 * The timeout test sets its own. */
	const char *env[] = {"OUTBOXD_RETRY_INTERVAL=200ms", "OUTBOXD_DELIVERY_TIMEOUT=10s", NULL};
	e2e_setup(&rcv, &dmn, env);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

static const char *header(json_t *req, const char *name)
{
	return json_string_value(json_object_get(json_object_get(req, "headers"), name));
}

static void test_fanout_three_subscribers(void **state)
{
	char a[64], b[64], c[64], other[64], ev[64];
	e2e_create_sub(&dmn, a, "{\"name\":\"a\",\"event_types\":[\"user.*\"],\"endpoint\":\"%s/a\"}",
		       rcv.url);
	e2e_create_sub(&dmn, b,
		       "{\"name\":\"b\",\"event_types\":[\"user.created\"],\"endpoint\":\"%s/b?x=1\","
		       "\"secret\":\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\","
		       "\"headers\":{\"X-Team\":\"growth\"},\"auth\":{\"type\":\"bearer\",\"token\":\"t0k\"}}",
		       rcv.url);
	e2e_create_sub(&dmn, c, "{\"name\":\"c\",\"event_types\":[\"*.created\"],\"endpoint\":\"%s/c\"}",
		       rcv.url);
	e2e_create_sub(&dmn, other,
		       "{\"name\":\"other\",\"event_types\":[\"order.*\"],\"endpoint\":\"%s/other\"}",
		       rcv.url);

	/* The payload must arrive byte for byte: 0.1 and the big number would change if
	 * re-encoded, and so would the spacing. */
	const char *payload = "{ \"user\": \"ann\", \"score\": 0.1, \"n\": 12345678901234567 }";
	char body[512];
	snprintf(body, sizeof(body), "{\"event_type\":\"user.created\",\"source\":\"crm\",\"payload\":%s}",
		 payload);
	e2e_send(&dmn, ev, body);

	assert_int_equal(receiver_wait_count(&rcv, "/a", 1, 5000), 0);
	assert_int_equal(receiver_wait_count(&rcv, "/b", 1, 5000), 0);
	assert_int_equal(receiver_wait_count(&rcv, "/c", 1, 5000), 0);

	const char *paths[] = {"/a", "/b", "/c"};
	for (int i = 0; i < 3; i++) {
		json_t *reqs = receiver_requests(&rcv, paths[i]);
		assert_int_equal(json_array_size(reqs), 1);
		json_t *r = json_array_get(reqs, 0);
		assert_string_equal(json_string_value(json_object_get(r, "method")), "POST");
		assert_string_equal(json_string_value(json_object_get(r, "body")), payload);
		assert_string_equal(header(r, "content-type"), "application/json");
		assert_string_equal(header(r, "webhook-id"), ev);
		assert_non_null(header(r, "webhook-timestamp"));
		assert_string_equal(header(r, "outboxd-event-type"), "user.created");
		assert_string_equal(header(r, "outboxd-attempt"), "1");
		assert_non_null(header(r, "outboxd-delivery-id"));
		const char *tp = header(r, "traceparent");
		assert_non_null(tp);
		assert_int_equal(strlen(tp), 55);
		assert_memory_equal(tp, "00-", 3);
		if (i == 1) {
			struct standard_webhooks_match m;
			assert_string_equal(json_string_value(json_object_get(r, "path")), "/b?x=1");
			assert_string_equal(header(r, "x-team"), "growth");
			assert_string_equal(header(r, "authorization"), "Bearer t0k");
			/* one secret, one signature */
			e2e_assert_signed(r, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &m);
			assert_int_equal(m.count, 1);
		} else {
			assert_null(header(r, "webhook-signature"));
		}
		json_decref(reqs);
	}
	assert_int_equal(receiver_count(&rcv, "/other"), 0);

	/* What an operator sees: three PROCESSED deliveries, one attempt each. */
	char ids[8][64];
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 8), 3);
	for (int i = 0; i < 3; i++) {
		json_t *d = e2e_wait_status(&dmn, ids[i], "PROCESSED", 5000);
		json_t *attempts = json_object_get(d, "attempts");
		assert_int_equal(json_array_size(attempts), 1);
		assert_int_equal(json_integer_value(json_object_get(json_array_get(attempts, 0), "code")), 200);
		assert_true(json_is_string(json_object_get(d, "processed_at")));
		json_decref(d);
	}
}

static void test_503_twice_then_200(void **state)
{
	char sub[64], ev[64], ids[2][64];
	assert_int_equal(receiver_script(&rcv, "/flaky",
					 "{\"path\":\"/flaky\",\"responses\":[{\"status\":503,\"body\":\"busy\"},"
					 "{\"status\":503},{\"status\":200}]}"), 0);
	e2e_create_sub(&dmn, sub, "{\"name\":\"flaky\",\"event_types\":[\"flaky.event\"],"
				  "\"endpoint\":\"%s/flaky\"}", rcv.url);
	e2e_send(&dmn, ev, "{\"event_type\":\"flaky.event\",\"payload\":{\"k\":1}}");
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 2), 1);
	json_t *d = e2e_wait_status(&dmn, ids[0], "PROCESSED", 5000);
	json_t *attempts = json_object_get(d, "attempts");
	assert_int_equal(json_array_size(attempts), 3);
	int codes[] = {503, 503, 200};
	for (int i = 0; i < 3; i++) {
		json_t *a = json_array_get(attempts, i);
		assert_int_equal(json_integer_value(json_object_get(a, "code")), codes[i]);
		assert_int_equal(json_integer_value(json_object_get(a, "n")), i + 1);
		assert_string_equal(json_string_value(json_object_get(a, "kind")), "immediate");
		assert_true(json_is_true(json_object_get(a, "sent"))); /* a 503 answer was sent */
	}
	/* The subscriber's answer is kept as the cause. */
	assert_string_equal(json_string_value(json_object_get(json_array_get(attempts, 0), "cause")),
			    "busy");
	assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), 3);
	json_decref(d);

	json_t *reqs = receiver_requests(&rcv, "/flaky");
	assert_int_equal(json_array_size(reqs), 3);
	for (int i = 0; i < 3; i++) {
		char want[4];
		snprintf(want, sizeof(want), "%d", i + 1);
		json_t *h = json_object_get(json_array_get(reqs, (size_t)i), "headers");
		assert_string_equal(json_string_value(json_object_get(h, "outboxd-attempt")), want);
		assert_string_equal(json_string_value(json_object_get(h, "webhook-id")), ev);
	}
	json_decref(reqs);
}

static void test_timeout_is_504(void **state)
{
	char sub[64], ev[64], ids[2][64];
	/* answers after 5 s: a try cut at its 200 ms is far from that on any machine */
	assert_int_equal(receiver_script(&rcv, "/slow",
					 "{\"path\":\"/slow\",\"default\":{\"status\":200,\"delay_ms\":5000}}"),
			 0);
	e2e_create_sub(&dmn, sub,
		       "{\"name\":\"slow\",\"event_types\":[\"slow.event\"],\"endpoint\":\"%s/slow\","
		       "\"timeout\":\"200ms\",\"retry\":{\"immediate\":1,\"max_retries\":1,"
		       "\"interval\":\"100ms\",\"timeout\":\"200ms\"}}", rcv.url);
	e2e_send(&dmn, ev, "{\"event_type\":\"slow.event\",\"payload\":{}}");
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 2), 1);

	/* One immediate try and one scheduled retry, both timing out: dead-lettered. */
	char path[128];
	snprintf(path, sizeof(path), "/v1/deliveries/%s", ids[0]);
	json_t *d = NULL;
	for (int i = 0; i < 100; i++) {
		json_decref(d);
		d = e2e_get(&dmn, "%s", path);
		if (json_is_true(json_object_get(d, "dead")))
			break;
		usleep(100 * 1000);
	}
	assert_true(json_is_true(json_object_get(d, "dead")));
	assert_string_equal(json_string_value(json_object_get(d, "status")), "FAILED");
	json_t *attempts = json_object_get(d, "attempts");
	assert_int_equal(json_array_size(attempts), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(attempts, 1), "kind")),
			    "scheduled");
	for (int i = 0; i < 2; i++) {
		json_t *a = json_array_get(attempts, (size_t)i);
		assert_int_equal(json_integer_value(json_object_get(a, "code")), 504);
		assert_true(json_integer_value(json_object_get(a, "duration_ms")) >= 150);
		assert_true(json_integer_value(json_object_get(a, "duration_ms")) < 4000);
	}
	assert_int_equal(json_integer_value(json_object_get(json_object_get(d, "last_error"), "code")),
			 504);
	json_decref(d);
}

static void test_connection_refused_is_503(void **state)
{
	char sub[64], ev[64], ids[2][64];
	int port = harness_free_port(); /* nothing listens there */
	e2e_create_sub(&dmn, sub,
		       "{\"name\":\"refused\",\"event_types\":[\"refused.event\"],"
		       "\"endpoint\":\"http://127.0.0.1:%d/x\",\"retry\":{\"immediate\":2,"
		       "\"max_retries\":1,\"interval\":\"100ms\"}}", port);
	e2e_send(&dmn, ev, "{\"event_type\":\"refused.event\",\"payload\":[1,2]}");
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 2), 1);
	json_t *d = NULL;
	for (int i = 0; i < 100; i++) {
		json_decref(d);
		d = e2e_get(&dmn, "/v1/deliveries/%s", ids[0]);
		if (json_is_true(json_object_get(d, "dead")))
			break;
		usleep(100 * 1000);
	}
	assert_true(json_is_true(json_object_get(d, "dead")));
	json_t *attempts = json_object_get(d, "attempts");
	assert_int_equal(json_array_size(attempts), 3);
	for (int i = 0; i < 3; i++) {
		json_t *a = json_array_get(attempts, (size_t)i);
		assert_int_equal(json_integer_value(json_object_get(a, "code")), 503);
		assert_string_equal(json_string_value(json_object_get(a, "message")),
				    "connection refused");
		assert_non_null(json_string_value(json_object_get(a, "cause")));
		/* the request never reached anyone: the history says so */
		assert_true(json_is_false(json_object_get(a, "sent")));
	}
	json_decref(d);
}

static void test_binary_payload_and_basic_auth(void **state)
{
	char sub[64], ev[64];
	e2e_create_sub(&dmn, sub,
		       "{\"name\":\"bin\",\"event_types\":[\"bin.*\"],\"endpoint\":\"%s/bin\","
		       "\"payload_format\":\"binary\",\"auth\":{\"type\":\"basic\","
		       "\"username\":\"u\",\"password\":\"p@ss\"}}", rcv.url);
	/* bytes 00 01 02 ff fe */
	e2e_send(&dmn, ev, "{\"event_type\":\"bin.blob\",\"payload_base64\":\"AAEC//4=\"}");
	assert_int_equal(receiver_wait_count(&rcv, "/bin", 1, 5000), 0);
	json_t *reqs = receiver_requests(&rcv, "/bin");
	json_t *r = json_array_get(reqs, 0);
	assert_string_equal(json_string_value(json_object_get(r, "body_base64")), "AAEC//4=");
	assert_string_equal(header(r, "content-type"), "application/octet-stream");
	assert_string_equal(header(r, "authorization"), "Basic dTpwQHNz");
	json_decref(reqs);

	/* Credentials are never returned in clear. */
	json_t *s = e2e_get(&dmn, "/v1/subscriptions/%s", sub);
	json_t *auth = json_object_get(s, "auth");
	assert_string_equal(json_string_value(json_object_get(auth, "username")), "u");
	assert_string_not_equal(json_string_value(json_object_get(auth, "password")), "p@ss");
	json_decref(s);
}

/* A subscription's payload filter: of its types' events it gets only those whose payload
 * matches (a batch of four: two pass, one fails on the amount, one is binary and passes
 * nothing), while one without a filter gets all; a malformed filter is a 400 naming the
 * member at fault; PATCH replaces the filter whole and the next event follows it. */
static void test_payload_filter(void **state)
{
	char all[64], big[64];
	e2e_create_sub(&dmn, all, "{\"name\":\"pf-all\",\"event_types\":[\"pf.*\"],"
				  "\"endpoint\":\"%s/pf-all\"}", rcv.url);
	e2e_create_sub(&dmn, big, "{\"name\":\"pf-big\",\"event_types\":[\"pf.*\"],"
				  "\"endpoint\":\"%s/pf-big\",\"filter\":{\"order.amount\":"
				  "{\"$gte\":100},\"$or\":[{\"order.currency\":\"EUR\"},"
				  "{\"order.vip\":true}]}}", rcv.url);
	json_t *r = api_call(&dmn, "POST", "/v1/events",
			     "{\"events\":["
			     "{\"event_type\":\"pf.order\",\"payload\":{\"order\":{\"amount\":150,"
			     "\"currency\":\"EUR\"}}},"
			     "{\"event_type\":\"pf.order\",\"payload\":{\"order\":{\"amount\":50,"
			     "\"currency\":\"EUR\"}}},"
			     "{\"event_type\":\"pf.order\",\"payload\":{\"order\":{\"amount\":500.5,"
			     "\"currency\":\"USD\",\"vip\":true}}},"
			     "{\"event_type\":\"pf.order\",\"payload_base64\":\"AAEC\"}]}", 202);
	json_t *evs = json_object_get(r, "ids");
	assert_int_equal(json_array_size(evs), 4);
	static const size_t want[] = {2, 1, 2, 1};
	char ids[4][64];
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(e2e_deliveries_of(&dmn, json_string_value(json_array_get(evs, i)),
						   ids, 4), want[i]);
	json_decref(r);
	assert_int_equal(receiver_wait_count(&rcv, "/pf-all", 4, 5000), 0);
	assert_int_equal(receiver_wait_count(&rcv, "/pf-big", 2, 5000), 0);
	json_t *got = receiver_requests(&rcv, "/pf-big");
	assert_int_equal(json_array_size(got), 2);
	char bodies[256] = "";
	for (size_t i = 0; i < 2; i++)
		strcat(bodies, json_string_value(json_object_get(json_array_get(got, i), "body")));
	assert_non_null(strstr(bodies, "150"));
	assert_non_null(strstr(bodies, "500.5"));
	json_decref(got);

	/* a malformed filter: 400 naming the member */
	json_t *e = api_call(&dmn, "POST", "/v1/subscriptions",
			     "{\"name\":\"pf-bad\",\"event_types\":[\"pf.*\"],\"endpoint\":"
			     "\"http://127.0.0.1:9/x\",\"filter\":{\"order.amount\":{\"$regex\":\"1\"}}}",
			     400);
	assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "field")),
			    "filter.order.amount");
	json_decref(e);
	char path[128], ev[64];
	snprintf(path, sizeof(path), "/v1/subscriptions/%s", big);
	e = api_call(&dmn, "PATCH", path, "{\"filter\":[]}", 400);
	assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "field")),
			    "filter");
	json_decref(e);

	/* replaced whole: the $or is gone with the old filter */
	json_t *p = api_call(&dmn, "PATCH", path, "{\"filter\":{\"order.amount\":{\"$lt\":100}}}",
			     200);
	char *shown = json_dumps(json_object_get(p, "filter"), JSON_COMPACT);
	assert_string_equal(shown, "{\"order.amount\":{\"$lt\":100}}");
	free(shown);
	json_decref(p);
	e2e_send(&dmn, ev, "{\"event_type\":\"pf.order\",\"payload\":{\"order\":{\"amount\":7,"
			   "\"currency\":\"USD\"}}}");
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 4), 2);
	assert_int_equal(receiver_wait_count(&rcv, "/pf-big", 3, 5000), 0);
	/* and null removes it */
	json_decref(api_call(&dmn, "PATCH", path, "{\"filter\":null}", 200));
	e2e_send(&dmn, ev, "{\"event_type\":\"pf.order\",\"payload_base64\":\"AAEC\"}");
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 4), 2);
}

/* A producer's trace continues to the subscriber: same trace id and flags, a new span;
 * and the delivery shows up in the Prometheus counters. */
static void test_trace_context_and_metrics(void **state)
{
	char sub[64], url[256];
	e2e_create_sub(&dmn, sub, "{\"name\":\"traced\",\"event_types\":[\"traced.*\"],"
				  "\"endpoint\":\"%s/traced\"}", rcv.url);
	const char *tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
	const char *headers[] = {"traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				 NULL};
	const char *body = "{\"event_type\":\"traced.one\",\"payload\":{}}";
	snprintf(url, sizeof(url), "%s/v1/events", dmn.url);
	struct http_req req = {.method = "POST", .url = url, .token = dmn.token, .body = body,
			       .len = strlen(body), .headers = headers};
	struct http_resp r;
	assert_int_equal(http_do_ex(&req, &r), 0);
	assert_int_equal(r.status, 202);
	http_resp_free(&r);
	assert_int_equal(receiver_wait_count(&rcv, "/traced", 1, 5000), 0);
	json_t *reqs = receiver_requests(&rcv, "/traced");
	const char *got = header(json_array_get(reqs, 0), "traceparent");
	assert_non_null(got);
	assert_int_equal(strlen(got), 55);
	assert_memory_equal(got, tp, 36);           /* version and trace id */
	assert_memory_equal(got + 52, tp + 52, 3);  /* flags */
	assert_memory_not_equal(got + 36, tp + 36, 16); /* our own span */
	json_decref(reqs);

	snprintf(url, sizeof(url), "%s/metrics", dmn.url);
	assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &r), 0);
	char want[160];
	snprintf(want, sizeof(want), "outboxd_deliveries_total{subscription_id=\"%s\",outcome=\"processed\"} 1",
		 sub);
	assert_non_null(strstr(r.body, want));
	assert_non_null(strstr(r.body, "outboxd_attempts_total{class=\"2xx\"}"));
	assert_null(strstr(r.body, "outboxd_attempt_duration_seconds_count 0\n"));
	http_resp_free(&r);
}

/* outboxd_rounds_started_total{via=...}, or -1. */
static long started(const char *via)
{
	char series[96];
	snprintf(series, sizeof(series), "outboxd_rounds_started_total{via=\"%s\"}", via);
	return (long)e2e_metric(&dmn, series);
}

struct processed_ctx {
	const char *sub;
	long want;
};

/* 1 once the dispatcher has counted want deliveries of the subscription processed. */
static int processed_all(void *arg)
{
	struct processed_ctx *c = arg;
	char series[160];
	snprintf(series, sizeof(series),
		 "outboxd_deliveries_total{subscription_id=\"%s\",outcome=\"processed\"}", c->sub);
	return (long)e2e_metric(&dmn, series) >= c->want;
}

/* One request the receiver got: its webhook-id and outboxd-attempt. */
static int by_string(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

struct seen {
	const char *id;
	long attempt;
};

static int by_id_then_attempt(const void *a, const void *b)
{
	const struct seen *x = a, *y = b;
	int c = strcmp(x->id, y->id);
	return c ? c : (x->attempt > y->attempt) - (x->attempt < y->attempt);
}

/* The distinct webhook-ids of the requests on path. */
static size_t distinct_ids(const char *path)
{
	json_t *reqs = receiver_requests(&rcv, path);
	size_t n = json_array_size(reqs), d = 0;
	const char **ids = calloc(n ? n : 1, sizeof(*ids));
	for (size_t i = 0; i < n; i++)
		ids[i] = header(json_array_get(reqs, i), "webhook-id");
	qsort(ids, n, sizeof(*ids), by_string);
	for (size_t i = 0; i < n; i++)
		d += i == 0 || strcmp(ids[i - 1], ids[i]) != 0;
	free(ids);
	json_decref(reqs);
	return d;
}

/* The hand-off (store/writer.h): fresh deliveries go from the ingest commit to the
 * dispatcher without a claim, the rest of a burst and keyed events through claims; each
 * event arrives, and a second request for one is only ever a recorded retry (an answer
 * that came after the try's timeout: that try is in the history, with its own
 * outboxd-attempt). */
static void test_handoff_and_claims_each_once(void **state)
{
	char sub[64];
	e2e_create_sub(&dmn, sub, "{\"name\":\"burst\",\"event_types\":[\"burst.*\",\"load.event\"],"
				  "\"endpoint\":\"%s/burst\"}", rcv.url);
	long claimed0 = started("claim"), handed0 = started("handoff");
	for (int b = 0; b < 4; b++) {
		char *body = e2e_batch_body(b * 500, 500);
		json_decref(api_call(&dmn, "POST", "/v1/events", body, 202));
		free(body);
	}
	for (int i = 0; i < 50; i++) { /* keyed: always claimed (per-key ordering's rule) */
		char ev[64], body[160];
		snprintf(body, sizeof(body), "{\"event_type\":\"burst.keyed\",\"partition_key\":"
					     "\"k%d\",\"payload\":{}}", i % 5);
		e2e_send(&dmn, ev, body);
	}
	/* every event arrives: 2,050 distinct webhook-ids */
	size_t distinct = 0;
	for (int waited = 0; distinct < 2050 && waited < 60000; waited += 200) {
		if (receiver_count(&rcv, "/burst") >= 2050)
			distinct = distinct_ids("/burst");
		if (distinct < 2050)
			usleep(200 * 1000);
	}
	assert_int_equal(distinct, 2050);
	/* every one processed: none is left to be sent again */
	struct processed_ctx all = {sub, 2050};
	assert_int_equal(harness_wait(processed_all, &all, 30000), 0);

	json_t *reqs = receiver_requests(&rcv, "/burst");
	size_t n = json_array_size(reqs), extra = 0;
	struct seen *seen = calloc(n, sizeof(*seen));
	for (size_t i = 0; i < n; i++) {
		seen[i].id = header(json_array_get(reqs, i), "webhook-id");
		const char *a = header(json_array_get(reqs, i), "outboxd-attempt");
		seen[i].attempt = a ? strtol(a, NULL, 10) : 0;
	}
	qsort(seen, n, sizeof(*seen), by_id_then_attempt);
	for (size_t i = 0; i < n;) {
		size_t k = i + 1;
		while (k < n && strcmp(seen[k].id, seen[i].id) == 0)
			k++;
		if (k - i > 1) {
			/* each request of the event is a different try, and every one is in the
			 * history of its delivery */
			for (size_t m = i + 1; m < k; m++)
				assert_true(seen[m].attempt > seen[m - 1].attempt);
			char ids[2][64];
			assert_int_equal(e2e_deliveries_of(&dmn, seen[i].id, ids, 2), 1);
			json_t *d = e2e_get(&dmn, "/v1/deliveries/%s", ids[0]);
			assert_true(json_array_size(json_object_get(d, "attempts")) >= k - i);
			json_decref(d);
			extra += k - i - 1;
		}
		i = k;
	}
	free(seen);
	json_decref(reqs);
	assert_int_equal(n - extra, 2050); /* each event once, besides recorded retries */
	long claimed = started("claim") - claimed0, handed = started("handoff") - handed0;
	fprintf(stderr, "hand-off: %ld rounds handed, %ld claimed; %zu requests were retries\n",
		handed, claimed, extra);
	assert_true(handed > 0);
	assert_true(claimed >= 50);
	assert_true(claimed + handed >= 2050); /* a scheduled retry is a round of its own */
}

/* outboxd_http_requests_total{client=...}. */
static long http_requests(const char *client)
{
	char series[96];
	snprintf(series, sizeof(series), "outboxd_http_requests_total{client=\"%s\"}", client);
	return (long)e2e_metric(&dmn, series);
}

/* The lean HTTP/1.1 client (deliver/http_wire.c): a host name goes through libcurl until
 * libcurl has connected there once, then over the lean client to the address it used;
 * the subscriber gets the same headers either way. */
static void test_lean_client_after_libcurl_resolves(void **state)
{
	char sub[64], url[160], ev[64];
	const char *port = strrchr(rcv.url, ':');
	snprintf(url, sizeof(url), "http://localhost%s/named", port);
	e2e_create_sub(&dmn, sub, "{\"name\":\"named\",\"event_types\":[\"named.*\"],"
				  "\"endpoint\":\"%s\",\"headers\":{\"X-Team\":\"billing\"}}", url);
	long lean0 = http_requests("lean"), curl0 = http_requests("libcurl");
	e2e_send(&dmn, ev, "{\"event_type\":\"named.first\",\"payload\":{\"n\":0}}");
	assert_int_equal(receiver_wait_count(&rcv, "/named", 1, 10000), 0);
	for (int i = 1; i <= 5; i++) {
		char body[96];
		snprintf(body, sizeof(body), "{\"event_type\":\"named.next\",\"payload\":{\"n\":%d}}", i);
		e2e_send(&dmn, ev, body);
		assert_int_equal(receiver_wait_count(&rcv, "/named", (size_t)i + 1, 10000), 0);
	}
	long lean = http_requests("lean") - lean0, curl = http_requests("libcurl") - curl0;
	fprintf(stderr, "named host: %ld requests over libcurl, %ld over the lean client\n", curl,
		lean);
	assert_int_equal(curl, 1);
	assert_int_equal(lean, 5);

	/* the same header names, and the same values where they do not vary */
	json_t *reqs = receiver_requests(&rcv, "/named");
	assert_int_equal(json_array_size(reqs), 6);
	json_t *first = json_object_get(json_array_get(reqs, 0), "headers");
	for (size_t i = 1; i < 6; i++) {
		json_t *h = json_object_get(json_array_get(reqs, i), "headers");
		const char *name;
		json_t *v;
		assert_int_equal(json_object_size(h), json_object_size(first));
		json_object_foreach(first, name, v) {
			assert_non_null(json_object_get(h, name));
		}
		assert_string_equal(header(json_array_get(reqs, i), "x-team"), "billing");
		assert_string_equal(header(json_array_get(reqs, i), "host"),
				    header(json_array_get(reqs, 0), "host"));
		assert_string_equal(header(json_array_get(reqs, i), "user-agent"), "outboxd/0.1");
	}
	json_decref(reqs);
}

/* A payload near max_payload (1 MiB) reaches the subscriber byte for byte: the lean client
 * writes such a body over several sendmsg calls when the socket buffer fills. */
static void test_large_payload_byte_for_byte(void **state)
{
	enum { BLOB = 1000 * 1000 };
	char sub[64], ev[64];
	e2e_create_sub(&dmn, sub, "{\"name\":\"large\",\"event_types\":[\"large.*\"],"
				  "\"endpoint\":\"%s/large\"}", rcv.url);
	char *payload = malloc(BLOB + 16), *body = malloc(BLOB + 128);
	assert_non_null(payload);
	assert_non_null(body);
	int n = snprintf(payload, 16, "{\"blob\":\"");
	for (int i = 0; i < BLOB; i++)
		payload[n + i] = (char)('a' + i % 26);
	strcpy(payload + n + BLOB, "\"}");
	snprintf(body, BLOB + 128, "{\"event_type\":\"large.one\",\"payload\":%s}", payload);
	e2e_send(&dmn, ev, body);
	assert_int_equal(receiver_wait_count(&rcv, "/large", 1, 20000), 0);
	json_t *reqs = receiver_requests(&rcv, "/large");
	json_t *r = json_array_get(reqs, 0);
	assert_string_equal(header(r, "webhook-id"), ev);
	const char *got = json_string_value(json_object_get(r, "body"));
	assert_non_null(got);
	assert_int_equal(strlen(got), strlen(payload));
	assert_true(strcmp(got, payload) == 0);
	json_decref(reqs);
	free(payload);
	free(body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fanout_three_subscribers),
		cmocka_unit_test(test_503_twice_then_200),
		cmocka_unit_test(test_timeout_is_504),
		cmocka_unit_test(test_connection_refused_is_503),
		cmocka_unit_test(test_binary_payload_and_basic_auth),
		cmocka_unit_test(test_payload_filter),
		cmocka_unit_test(test_trace_context_and_metrics),
		cmocka_unit_test(test_handoff_and_claims_each_once),
		cmocka_unit_test(test_lean_client_after_libcurl_resolves),
		cmocka_unit_test(test_large_payload_byte_for_byte),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
