/* test_otel.c: OpenTelemetry export (otlp_endpoint). A delivery that fails once and then
 * succeeds gives two attempt spans at a local OTLP/HTTP receiver (the test receiver plays
 * the collector and records the JSON posts): the producer's trace id, its span as parent,
 * the span ids the subscriber saw in traceparent, status error then ok; and the counters
 * arrive at /v1/metrics, both with the otlp_headers. Runs on SQLite and PostgreSQL. */
#include "e2e.h"

static struct receiver rcv;
static struct daemon dmn;

static int setup(void **state)
{
	char endpoint[160], env_endpoint[200];
	assert_int_equal(receiver_start(&rcv), 0);
	snprintf(endpoint, sizeof(endpoint), "%s/otel", rcv.url);
	snprintf(env_endpoint, sizeof(env_endpoint), "OUTBOXD_OTLP_ENDPOINT=%s", endpoint);
	const char *env[] = {env_endpoint, "OUTBOXD_OTLP_INTERVAL=1s",
			     "OUTBOXD_OTLP_HEADERS=X-Api-Key=otel-k3y,X-Tenant=t1", NULL};
	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, env), 0);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

static const char *attr(json_t *attrs, const char *key)
{
	size_t i;
	json_t *a;
	json_array_foreach(attrs, i, a) {
		if (strcmp(json_string_value(json_object_get(a, "key")), key) != 0)
			continue;
		json_t *v = json_object_get(a, "value");
		json_t *s = json_object_get(v, "stringValue");
		return json_string_value(s ? s : json_object_get(v, "intValue"));
	}
	return NULL;
}

/* Every span posted to /otel/v1/traces whose outboxd.delivery.id is delivery_id, into
 * spans (a new array, in arrival order). */
static json_t *spans_of(const char *delivery_id)
{
	json_t *out = json_array();
	json_t *reqs = receiver_requests(&rcv, "/otel/v1/traces");
	size_t i, j, k, l;
	json_t *req, *rs, *ss, *span;
	json_array_foreach(reqs, i, req) {
		json_t *h = json_object_get(req, "headers");
		assert_string_equal(json_string_value(json_object_get(h, "content-type")),
				    "application/json");
		/* otlp_headers, on every export */
		assert_string_equal(json_string_value(json_object_get(h, "x-api-key")), "otel-k3y");
		assert_string_equal(json_string_value(json_object_get(h, "x-tenant")), "t1");
		json_t *body = json_loads(json_string_value(json_object_get(req, "body")), 0, NULL);
		assert_non_null(body);
		json_array_foreach(json_object_get(body, "resourceSpans"), j, rs) {
			json_array_foreach(json_object_get(rs, "scopeSpans"), k, ss) {
				json_array_foreach(json_object_get(ss, "spans"), l, span) {
					const char *d = attr(json_object_get(span, "attributes"),
							     "outboxd.delivery.id");
					if (d && strcmp(d, delivery_id) == 0)
						json_array_append(out, span);
				}
			}
		}
		json_decref(body);
	}
	json_decref(reqs);
	return out;
}

static void test_attempt_spans(void **state)
{
	char sub[64], ev[64], ids[4][64], url[256];
	const char *trace = "0af7651916cd43dd8448eb211c80319c", *parent = "b7ad6b7169203331";
	char tp[64], header_tp[80];
	snprintf(tp, sizeof(tp), "00-%s-%s-01", trace, parent);
	snprintf(header_tp, sizeof(header_tp), "traceparent: %s", tp);

	assert_int_equal(receiver_script(&rcv, "/hook",
					 "{\"responses\":[{\"status\":503}],\"default\":{\"status\":200}}"),
			 0);
	e2e_create_sub(&dmn, sub, "{\"name\":\"traced\",\"event_types\":[\"order.*\"],"
				  "\"endpoint\":\"%s/hook\"}", rcv.url);
	const char *headers[] = {header_tp, NULL};
	const char *body = "{\"event_type\":\"order.paid\",\"payload\":{\"n\":1}}";
	snprintf(url, sizeof(url), "%s/v1/events", dmn.url);
	struct http_req req = {.method = "POST", .url = url, .token = dmn.token, .body = body,
			       .len = strlen(body), .headers = headers};
	struct http_resp r;
	assert_int_equal(http_do_ex(&req, &r), 0);
	assert_int_equal(r.status, 202);
	json_t *ack = json_loads(r.body, 0, NULL);
	snprintf(ev, sizeof(ev), "%s", json_string_value(json_array_get(json_object_get(ack, "ids"), 0)));
	json_decref(ack);
	http_resp_free(&r);

	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 4), 1);
	json_decref(e2e_wait_status(&dmn, ids[0], "PROCESSED", 10000));

	/* the spans arrive within a flush interval (1 s) */
	json_t *spans = NULL;
	for (int waited = 0; waited < 10000; waited += 100) {
		json_decref(spans);
		spans = spans_of(ids[0]);
		if (json_array_size(spans) >= 2)
			break;
		usleep(100 * 1000);
	}
	assert_int_equal(json_array_size(spans), 2);

	/* what the subscriber saw: one traceparent per attempt, in order */
	json_t *got = receiver_requests(&rcv, "/hook");
	assert_int_equal(json_array_size(got), 2);
	for (size_t i = 0; i < 2; i++) {
		json_t *span = json_array_get(spans, i);
		json_t *attrs = json_object_get(span, "attributes");
		assert_string_equal(json_string_value(json_object_get(span, "traceId")), trace);
		assert_string_equal(json_string_value(json_object_get(span, "parentSpanId")), parent);
		const char *seen = json_string_value(json_object_get(
			json_object_get(json_array_get(got, i), "headers"), "traceparent"));
		assert_non_null(seen);
		assert_memory_equal(seen + 36, json_string_value(json_object_get(span, "spanId")), 16);
		assert_string_equal(attr(attrs, "outboxd.event.id"), ev);
		assert_string_equal(attr(attrs, "outboxd.subscription.id"), sub);
		assert_string_equal(attr(attrs, "outboxd.attempt.kind"), "immediate");
		assert_string_equal(attr(attrs, "outboxd.attempt.number"), i == 0 ? "1" : "2");
		assert_string_equal(attr(attrs, "http.response.status_code"), i == 0 ? "503" : "200");
		json_int_t code = json_integer_value(json_object_get(json_object_get(span, "status"), "code"));
		assert_int_equal(code, i == 0 ? 2 : 1);
	}
	json_decref(got);
	json_decref(spans);
}

/* The counters reach /v1/metrics every otlp_interval (1 s here). */
static void test_counters(void **state)
{
	assert_int_equal(receiver_wait_count(&rcv, "/otel/v1/metrics", 1, 5000), 0);
	json_t *reqs = receiver_requests(&rcv, "/otel/v1/metrics");
	json_t *body = json_loads(json_string_value(json_object_get(json_array_get(reqs, 0), "body")),
				  0, NULL);
	assert_non_null(body);
	char *text = json_dumps(body, JSON_COMPACT);
	assert_non_null(strstr(text, "\"name\":\"outboxd_attempts_total\""));
	assert_non_null(strstr(text, "\"name\":\"outboxd_ingested_events_total\""));
	free(text);
	json_decref(body);
	json_decref(reqs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_attempt_spans),
		cmocka_unit_test(test_counters),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
