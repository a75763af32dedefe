/* test_otlp.c: the OTLP JSON of attempt spans (ids, parent, attributes, status) and of
 * the Prometheus counters, decoded back with jansson. No collector, no thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "otel/otlp.h"

static const char *attr(json_t *attrs, const char *key)
{
	static char num[32];
	size_t i;
	json_t *a;
	json_array_foreach(attrs, i, a) {
		if (strcmp(json_string_value(json_object_get(a, "key")), key) != 0)
			continue;
		json_t *v = json_object_get(a, "value");
		if (json_object_get(v, "stringValue"))
			return json_string_value(json_object_get(v, "stringValue"));
		snprintf(num, sizeof(num), "%s", json_string_value(json_object_get(v, "intValue")));
		return num;
	}
	return NULL;
}

static struct store_claim claim(const char *traceparent)
{
	static char type[] = "user.created";
	struct store_claim c;
	memset(&c, 0, sizeof(c));
	strcpy(c.delivery_id, "0190f5e2-0000-7000-8000-00000000000d");
	strcpy(c.event_id, "0190f5e2-1111-7000-8000-0000000000e1");
	strcpy(c.subscription_id, "0190f5e2-2222-7000-8000-0000000000s1");
	snprintf(c.traceparent, sizeof(c.traceparent), "%s", traceparent);
	c.event_type = type;
	return c;
}

static json_t *first_span(const char *text)
{
	json_t *root = json_loads(text, 0, NULL);
	assert_non_null(root);
	json_t *rs = json_array_get(json_object_get(root, "resourceSpans"), 0);
	json_t *res = json_object_get(json_object_get(rs, "resource"), "attributes");
	assert_string_equal(attr(res, "service.name"), "outboxd");
	assert_string_equal(attr(res, "service.instance.id"), "host:1");
	json_t *ss = json_array_get(json_object_get(rs, "scopeSpans"), 0);
	json_t *span = json_incref(json_array_get(json_object_get(ss, "spans"), 0));
	json_decref(root);
	return span;
}

/* A failed attempt of an event with a traceparent: the producer's trace id, its span as
 * parent, our span id, status error with the message, the attributes. */
static void test_span_with_parent(void **state)
{
	struct store_claim c = claim("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
	struct store_attempt a = {.n = 2, .kind = ATTEMPT_IMMEDIATE, .started_at = 1700000000123,
				  .code = 503, .message = "HTTP 503"};
	struct otlp_span s;
	otlp_span_from_attempt(&s, &c, &a, 0xabcdef0123456789ULL, 2500);
	char *text = otlp_traces_json(&s, 1, "host:1", "0.1.0");
	assert_non_null(text);
	json_t *span = first_span(text);
	assert_string_equal(json_string_value(json_object_get(span, "traceId")),
			    "4bf92f3577b34da6a3ce929d0e0e4736");
	assert_string_equal(json_string_value(json_object_get(span, "parentSpanId")),
			    "00f067aa0ba902b7");
	assert_string_equal(json_string_value(json_object_get(span, "spanId")), "abcdef0123456789");
	assert_string_equal(json_string_value(json_object_get(span, "name")), "deliver user.created");
	assert_string_equal(json_string_value(json_object_get(span, "startTimeUnixNano")),
			    "1700000000123000000");
	assert_string_equal(json_string_value(json_object_get(span, "endTimeUnixNano")),
			    "1700000000125500000");
	json_t *attrs = json_object_get(span, "attributes");
	assert_string_equal(attr(attrs, "outboxd.delivery.id"), c.delivery_id);
	assert_string_equal(attr(attrs, "outboxd.event.id"), c.event_id);
	assert_string_equal(attr(attrs, "outboxd.subscription.id"), c.subscription_id);
	assert_string_equal(attr(attrs, "outboxd.attempt.kind"), "immediate");
	assert_string_equal(attr(attrs, "outboxd.attempt.number"), "2");
	assert_string_equal(attr(attrs, "http.response.status_code"), "503");
	assert_string_equal(attr(attrs, "outboxd.attempt.outcome"), "failure");
	json_t *status = json_object_get(span, "status");
	assert_int_equal(json_integer_value(json_object_get(status, "code")), 2);
	assert_string_equal(json_string_value(json_object_get(status, "message")), "HTTP 503");
	json_decref(span);
	free(text);
}

/* No traceparent: no parent, and the trace id the attempt's header carried (made from
 * the event id); a 2xx is status ok. */
static void test_span_without_parent(void **state)
{
	struct store_claim c = claim("");
	struct store_attempt a = {.n = 1, .kind = ATTEMPT_SCHEDULED, .started_at = 1, .code = 200,
				  .message = "HTTP 200"};
	struct otlp_span s;
	otlp_span_from_attempt(&s, &c, &a, 7, 0);
	char *text = otlp_traces_json(&s, 1, "host:1", "0.1.0");
	json_t *span = first_span(text);
	assert_null(json_object_get(span, "parentSpanId"));
	assert_string_equal(json_string_value(json_object_get(span, "traceId")),
			    "0190f5e21111700080000000000000e1" /* the event id's hex digits */);
	assert_string_equal(json_string_value(json_object_get(span, "spanId")), "0000000000000007");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(span, "status"), "code")), 1);
	json_decref(span);
	free(text);
}

static void test_metrics(void **state)
{
	const char *prom =
		"# HELP outboxd_attempts_total HTTP attempts.\n"
		"# TYPE outboxd_attempts_total counter\n"
		"outboxd_attempts_total{class=\"2xx\"} 7\n"
		"outboxd_attempts_total{class=\"5xx\"} 2\n"
		"# TYPE outboxd_attempt_duration_seconds histogram\n"
		"outboxd_attempt_duration_seconds_bucket{le=\"0.1\"} 3\n"
		"# TYPE outboxd_in_flight gauge\n"
		"outboxd_in_flight 4\n";
	char *text = otlp_metrics_json(prom, "host:1", "0.1.0", 1000, 2000);
	assert_non_null(text);
	json_t *root = json_loads(text, 0, NULL);
	json_t *rm = json_array_get(json_object_get(root, "resourceMetrics"), 0);
	json_t *sm = json_array_get(json_object_get(rm, "scopeMetrics"), 0);
	json_t *metrics = json_object_get(sm, "metrics");
	assert_int_equal(json_array_size(metrics), 2); /* the histogram is left to /metrics */
	json_t *sum = json_object_get(json_array_get(metrics, 0), "sum");
	assert_string_equal(json_string_value(json_object_get(json_array_get(metrics, 0), "name")),
			    "outboxd_attempts_total");
	assert_true(json_is_true(json_object_get(sum, "isMonotonic")));
	assert_int_equal(json_integer_value(json_object_get(sum, "aggregationTemporality")), 2);
	json_t *points = json_object_get(sum, "dataPoints");
	assert_int_equal(json_array_size(points), 2);
	json_t *p1 = json_array_get(points, 1);
	assert_string_equal(attr(json_object_get(p1, "attributes"), "class"), "5xx");
	assert_true(json_real_value(json_object_get(p1, "asDouble")) == 2.0);
	assert_string_equal(json_string_value(json_object_get(p1, "startTimeUnixNano")), "1000");
	assert_string_equal(json_string_value(json_object_get(p1, "timeUnixNano")), "2000");
	json_t *gauge = json_object_get(json_array_get(metrics, 1), "gauge");
	json_t *g = json_array_get(json_object_get(gauge, "dataPoints"), 0);
	assert_true(json_real_value(json_object_get(g, "asDouble")) == 4.0);
	json_decref(root);
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_span_with_parent),
		cmocka_unit_test(test_span_without_parent),
		cmocka_unit_test(test_metrics),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
