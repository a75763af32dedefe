/* test_otel.c: OpenTelemetry export (otlp_endpoint), in both encodings. The test
 * receiver plays the collector and records the export requests; each is decoded the way a
 * collector would, with the OTLP definitions as released (tests/support/otlp_decode.py:
 * protoc's Python code and python3-protobuf; the JSON read strictly and required to be
 * canonical OTLP JSON). A delivery that fails once and then succeeds gives two attempt
 * spans: the producer's trace id, its span as the remote parent, the span ids the
 * subscriber saw in traceparent, status error then ok, nanosecond times; the counters
 * arrive at /v1/metrics as integer sums under OpenTelemetry names with units, the attempt
 * durations as a histogram in seconds. With otlp_protocol unset the exports are binary
 * protobuf; with http/json, JSON; both carry the otlp_headers. Runs on SQLite and
 * PostgreSQL. */
#include "e2e.h"

#include <inttypes.h>
#include <time.h>

#include "util/base64.h"

#define DECODED_MAX ((size_t)4 << 20)

struct otel_case {
	const char *protocol;      /* OUTBOXD_OTLP_PROTOCOL, NULL: unset (the default) */
	const char *content_type;  /* what the exports must carry */
	const char *prefix;        /* the collector's path on the receiver */
	const char *partial;       /* the receiver's script for /v1/traces: each export is
	                              answered with a partial success (1 span rejected:
	                              "nope"), in the case's encoding */
	const char *compression;   /* OUTBOXD_OTLP_COMPRESSION, NULL: unset (none) */
};

/* ExportTraceServiceResponse{partial_success{rejected_spans: 1, error_message: "nope"}} */
#define PROTOBUF_PARTIAL                                                                    \
	"{\"default\":{\"status\":200,\"headers\":{\"Content-Type\":\"application/x-protobuf\"},"\
	"\"body\":\"\\n\\b\\b\\u0001\\u0012\\u0004nope\"}}"

static const struct otel_case protobuf_case = {
	NULL, "application/x-protobuf", "/otel-pb", PROTOBUF_PARTIAL, NULL};
static const struct otel_case json_case = {
	"http/json", "application/json", "/otel-json",
	"{\"default\":{\"status\":200,\"headers\":{\"Content-Type\":\"application/json\"},"
	"\"body\":\"{\\\"partialSuccess\\\":{\\\"rejectedSpans\\\":\\\"1\\\","
	"\\\"errorMessage\\\":\\\"nope\\\"}}\"}}", NULL};

/* Binary protobuf, gzip-compressed (otlp_compression gzip). */
static const struct otel_case gzip_case = {
	NULL, "application/x-protobuf", "/otel-gzip", PROTOBUF_PARTIAL, "gzip"};

/* A collector that sheds load: its first two trace exports answer 503 and 429, the
 * next ones 200. */
static const struct otel_case retry_case = {
	NULL, "application/x-protobuf", "/otel-retry",
	"{\"responses\":[{\"status\":503},{\"status\":429}],\"default\":{\"status\":200}}",
	NULL};

static struct receiver rcv;
static struct daemon dmn;
static uint64_t started_ns; /* just before the daemon started */

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int setup_receiver(void **state)
{
	assert_int_equal(receiver_start(&rcv), 0);
	return 0;
}

static int teardown_receiver(void **state)
{
	receiver_stop(&rcv);
	return 0;
}

static int setup(void **state)
{
	const struct otel_case *c = *state;
	char endpoint[200], protocol[80], compression[80];
	snprintf(endpoint, sizeof(endpoint), "OUTBOXD_OTLP_ENDPOINT=%s%s", rcv.url, c->prefix);
	snprintf(protocol, sizeof(protocol), "OUTBOXD_OTLP_PROTOCOL=%s",
		 c->protocol ? c->protocol : "");
	snprintf(compression, sizeof(compression), "OUTBOXD_OTLP_COMPRESSION=%s",
		 c->compression ? c->compression : "");
	const char *env[] = {endpoint, "OUTBOXD_OTLP_INTERVAL=1s",
			     "OUTBOXD_OTLP_HEADERS=X-Api-Key=otel-k3y,X-Tenant=t1",
			     c->protocol ? protocol : "OUTBOXD_OTLP_PROTOCOL",
			     c->compression ? compression : "OUTBOXD_OTLP_COMPRESSION", NULL};
	started_ns = now_ns();
	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, env), 0);
	return 0;
}

static int teardown(void **state)
{
	assert_int_equal(daemon_stop(&dmn), 0);
	daemon_cleanup(&dmn);
	return 0;
}

/* ---- decoding --------------------------------------------------------------------------- */

/* A recorded export request (borrowed) decoded by otlp_decode.py as signal ("traces",
 * "metrics"), after checking its headers: the Content-Type of c and the otlp_headers.
 * Returned (json_decref it): canonical OTLP JSON. Fails the test when it does not decode. */
static json_t *decode(const struct otel_case *c, const char *signal, json_t *req)
{
	json_t *h = json_object_get(req, "headers");
	assert_string_equal(json_string_value(json_object_get(h, "content-type")), c->content_type);
	assert_string_equal(json_string_value(json_object_get(h, "x-api-key")), "otel-k3y");
	assert_string_equal(json_string_value(json_object_get(h, "x-tenant")), "t1");
	const char *encoding = json_string_value(json_object_get(h, "content-encoding"));
	if (c->compression)
		assert_string_equal(encoding, c->compression);
	else
		assert_null(encoding);

	const char *b64 = json_string_value(json_object_get(req, "body_base64"));
	assert_non_null(b64);
	size_t len = strlen(b64), n = 0;
	unsigned char *body = malloc(base64_decoded_max(len) + 1);
	assert_non_null(body);
	assert_int_equal(base64_decode(b64, len, body, base64_decoded_max(len) + 1, &n), 0);
	char file[] = "/tmp/otel-export-XXXXXX";
	int fd = mkstemp(file);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, body, n), (ssize_t)n);
	close(fd);
	free(body);

	char cmd[1024];
	const char *decoder = getenv("OTLP_DECODE");
	assert_non_null(decoder);
	if (c->compression) /* what a collector does with Content-Encoding: gzip first */
		snprintf(cmd, sizeof(cmd), "gzip -dc < %s | %s %s %s", file, decoder, signal,
			 c->content_type);
	else
		snprintf(cmd, sizeof(cmd), "%s %s %s < %s", decoder, signal, c->content_type, file);
	char *out = malloc(DECODED_MAX);
	assert_non_null(out);
	int rc = e2e_run(cmd, out, DECODED_MAX);
	unlink(file);
	if (rc != 0)
		fail_msg("otlp_decode.py refused a %s export of %zu bytes (%s): see above", signal,
			 n, c->content_type);
	json_t *decoded = json_loads(out, 0, NULL);
	free(out);
	assert_non_null(decoded);
	return decoded;
}

/* The value of attribute key in attrs (an array of KeyValue, canonical JSON) as text: a
 * stringValue, or an intValue (a decimal string); NULL when absent. */
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

static uint64_t nanos(json_t *obj, const char *key)
{
	const char *text = json_string_value(json_object_get(obj, key));
	assert_non_null(text);
	return strtoull(text, NULL, 10);
}

/* Every span of every export at prefix/v1/traces whose outboxd.delivery.id is
 * delivery_id, into a new array (in arrival order). */
static json_t *spans_of(const struct otel_case *c, const char *delivery_id)
{
	char path[80];
	snprintf(path, sizeof(path), "%s/v1/traces", c->prefix);
	json_t *out = json_array();
	json_t *reqs = receiver_requests(&rcv, path);
	size_t i, j, k, l;
	json_t *req, *rs, *ss, *span;
	json_array_foreach(reqs, i, req) {
		json_t *body = decode(c, "traces", req);
		json_array_foreach(json_object_get(body, "resourceSpans"), j, rs) {
			json_t *res = json_object_get(json_object_get(rs, "resource"), "attributes");
			assert_string_equal(attr(res, "service.name"), "outboxd");
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

/* The metric named name in a decoded ExportMetricsServiceRequest, NULL when absent. */
static json_t *metric(json_t *body, const char *name)
{
	size_t i, j, k;
	json_t *rm, *sm, *m;
	json_array_foreach(json_object_get(body, "resourceMetrics"), i, rm)
		json_array_foreach(json_object_get(rm, "scopeMetrics"), j, sm)
			json_array_foreach(json_object_get(sm, "metrics"), k, m)
				if (strcmp(json_string_value(json_object_get(m, "name")), name) == 0)
					return m;
	return NULL;
}

/* The asInt of the sum's point whose attribute key is value (key NULL: the only
 * point), -1 when there is none. */
static long long sum_point(json_t *m, const char *key, const char *value)
{
	json_t *sum = json_object_get(m, "sum");
	size_t i;
	json_t *p;
	assert_non_null(sum);
	json_array_foreach(json_object_get(sum, "dataPoints"), i, p) {
		const char *v = key ? attr(json_object_get(p, "attributes"), key) : NULL;
		if (key && (!v || strcmp(v, value) != 0))
			continue;
		assert_null(json_object_get(p, "asDouble"));
		const char *n = json_string_value(json_object_get(p, "asInt"));
		assert_non_null(n);
		return strtoll(n, NULL, 10);
	}
	return -1;
}

/* ---- the delivery -------------------------------------------------------------------- */

/* Sends one event with a producer's traceparent to a subscription whose endpoint fails
 * once (503) and then takes it; its subscription id into sub, its delivery id into
 * delivery. Returns when the delivery is PROCESSED. */
static void deliver_twice(const char *tp, char sub[64], char delivery[64])
{
	char ev[64], ids[4][64], url[256], header_tp[80];
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
	snprintf(delivery, 64, "%s", ids[0]);
	json_decref(e2e_wait_status(&dmn, delivery, "PROCESSED", 10000));
}

/* The two attempt spans, as a collector decodes them. */
static void check_spans(const struct otel_case *c, const char *sub, const char *delivery,
			const char *trace, const char *parent)
{
	/* the spans arrive within a flush interval (1 s) */
	json_t *spans = NULL;
	for (int waited = 0; waited < 10000; waited += 200) {
		json_decref(spans);
		spans = spans_of(c, delivery);
		if (json_array_size(spans) >= 2)
			break;
		usleep(200 * 1000);
	}
	assert_int_equal(json_array_size(spans), 2);

	/* what the subscriber saw: one traceparent per attempt, in order */
	json_t *got = receiver_requests(&rcv, "/hook");
	assert_int_equal(json_array_size(got), 2);
	int sub_microsecond = 0;
	uint64_t upto = now_ns();
	for (size_t i = 0; i < 2; i++) {
		json_t *span = json_array_get(spans, i);
		json_t *attrs = json_object_get(span, "attributes");
		assert_string_equal(attr(attrs, "outboxd.attempt.number"), i == 0 ? "1" : "2");
		assert_string_equal(json_string_value(json_object_get(span, "traceId")), trace);
		assert_string_equal(json_string_value(json_object_get(span, "parentSpanId")), parent);
		const char *seen = json_string_value(json_object_get(
			json_object_get(json_array_get(got, i), "headers"), "traceparent"));
		assert_non_null(seen);
		assert_memory_equal(seen + 36, json_string_value(json_object_get(span, "spanId")), 16);
		assert_string_equal(json_string_value(json_object_get(span, "name")),
				    "deliver order.paid");
		assert_int_equal(json_integer_value(json_object_get(span, "kind")), 3); /* client */
		/* sampled, and the parent (the producer's span) is remote */
		assert_int_equal(json_integer_value(json_object_get(span, "flags")), 0x301);
		assert_string_equal(attr(attrs, "outboxd.subscription.id"), sub);
		assert_string_equal(attr(attrs, "outboxd.event.type"), "order.paid");
		assert_string_equal(attr(attrs, "outboxd.attempt.kind"), "immediate");
		assert_string_equal(attr(attrs, "http.response.status_code"), i == 0 ? "503" : "200");
		assert_string_equal(attr(attrs, "outboxd.attempt.outcome"),
				    i == 0 ? "failure" : "success");
		json_int_t code = json_integer_value(json_object_get(json_object_get(span, "status"),
								     "code"));
		assert_int_equal(code, i == 0 ? 2 : 1);
		/* when it ran, on the wall clock, to the nanosecond */
		uint64_t start = nanos(span, "startTimeUnixNano"), end = nanos(span, "endTimeUnixNano");
		assert_true(start >= started_ns && start <= end && end <= upto);
		sub_microsecond |= start % 1000 != 0 || end % 1000 != 0;
	}
	/* a nanosecond clock, not milliseconds (or microseconds) scaled: that all four times
	 * end in 000 has odds of one in 10^12 */
	assert_true(sub_microsecond);
	json_decref(got);
	json_decref(spans);
}

/* The counters of the delivery, as a collector decodes them: the first export that has
 * both attempts. */
static void check_counters(const struct otel_case *c, const char *sub)
{
	char path[80];
	snprintf(path, sizeof(path), "%s/v1/metrics", c->prefix);
	json_t *body = NULL;
	size_t seen = 0;
	for (int waited = 0; waited < 15000 && !body; waited += 200) {
		json_t *reqs = receiver_requests(&rcv, path);
		for (; seen < json_array_size(reqs) && !body; seen++) {
			json_t *b = decode(c, "metrics", json_array_get(reqs, seen));
			json_t *m = metric(b, "outboxd.attempts");
			if (m && sum_point(m, "outboxd.class", "5xx") == 1 &&
			    sum_point(m, "outboxd.class", "2xx") == 1)
				body = b;
			else
				json_decref(b);
		}
		json_decref(reqs);
		if (!body)
			usleep(200 * 1000);
	}
	assert_non_null(body);
	uint64_t upto = now_ns();

	json_t *m = metric(body, "outboxd.attempts");
	assert_string_equal(json_string_value(json_object_get(m, "unit")), "{attempt}");
	json_t *sum = json_object_get(m, "sum");
	assert_true(json_is_true(json_object_get(sum, "isMonotonic")));
	assert_int_equal(json_integer_value(json_object_get(sum, "aggregationTemporality")), 2);
	json_t *p = json_array_get(json_object_get(sum, "dataPoints"), 0);
	uint64_t start = nanos(p, "startTimeUnixNano"), at = nanos(p, "timeUnixNano");
	assert_true(start >= started_ns && start < at && at <= upto);

	m = metric(body, "outboxd.deliveries");
	assert_non_null(m);
	assert_string_equal(json_string_value(json_object_get(m, "unit")), "{delivery}");
	size_t i;
	json_t *pt;
	long long processed = -1;
	json_array_foreach(json_object_get(json_object_get(m, "sum"), "dataPoints"), i, pt) {
		json_t *attrs = json_object_get(pt, "attributes");
		const char *s = attr(attrs, "outboxd.subscription.id"), *o = attr(attrs, "outboxd.outcome");
		if (s && o && strcmp(s, sub) == 0 && strcmp(o, "processed") == 0)
			processed = strtoll(json_string_value(json_object_get(pt, "asInt")), NULL, 10);
	}
	assert_int_equal(processed, 1);

	m = metric(body, "outboxd.events.ingested");
	assert_non_null(m);
	assert_string_equal(json_string_value(json_object_get(m, "unit")), "{event}");
	assert_int_equal(sum_point(m, "network.protocol.name", "http"), 1);
	assert_int_equal(sum_point(m, "network.protocol.name", "grpc"), 0);

	m = metric(body, "outboxd.attempt.duration");
	assert_non_null(m);
	assert_string_equal(json_string_value(json_object_get(m, "unit")), "s");
	json_t *hist = json_object_get(m, "histogram");
	assert_int_equal(json_integer_value(json_object_get(hist, "aggregationTemporality")), 2);
	json_t *h = json_array_get(json_object_get(hist, "dataPoints"), 0);
	assert_string_equal(json_string_value(json_object_get(h, "count")), "2");
	json_t *counts = json_object_get(h, "bucketCounts");
	assert_int_equal(json_array_size(counts),
			 json_array_size(json_object_get(h, "explicitBounds")) + 1);
	long long in_buckets = 0;
	json_t *n;
	json_array_foreach(counts, i, n)
		in_buckets += strtoll(json_string_value(n), NULL, 10);
	assert_int_equal(in_buckets, 2);
	assert_true(json_number_value(json_object_get(h, "sum")) > 0);

	/* OpenTelemetry names all through: dotted, no Prometheus suffix, a unit each */
	json_t *rm, *sm;
	size_t j, k;
	json_array_foreach(json_object_get(body, "resourceMetrics"), i, rm)
		json_array_foreach(json_object_get(rm, "scopeMetrics"), j, sm)
			json_array_foreach(json_object_get(sm, "metrics"), k, m) {
				const char *name = json_string_value(json_object_get(m, "name"));
				assert_true(strncmp(name, "outboxd.", 8) == 0);
				assert_null(strstr(name, "_total"));
				assert_non_null(json_string_value(json_object_get(m, "unit")));
			}
	json_decref(body);
}

static void test_export(void **state)
{
	const struct otel_case *c = *state;
	const char *trace = "0af7651916cd43dd8448eb211c80319c", *parent = "b7ad6b7169203331";
	char tp[64], sub[64], delivery[64];
	snprintf(tp, sizeof(tp), "00-%s-%s-01", trace, parent);
	char traces[80];
	snprintf(traces, sizeof(traces), "%s/v1/traces", c->prefix);
	assert_int_equal(receiver_reset(&rcv), 0);
	assert_int_equal(receiver_script(&rcv, traces, c->partial), 0);
	deliver_twice(tp, sub, delivery);
	check_spans(c, sub, delivery, trace, parent);
	check_counters(c, sub);
	/* the collector's partial success: what it rejected is counted as failed, and its
	 * message logged */
	assert_true(e2e_metric(&dmn, "outboxd_otlp_spans_total{outcome=\"failed\"}") >= 1);
	char log[512];
	assert_true(e2e_file_contains(daemon_log_path(&dmn, log, sizeof(log)),
				      "did not take 1 of the spans sent: nope"));
}

/* otlp_protocol unset: binary protobuf, the OpenTelemetry Collector's default */
static void test_protobuf_by_default(void **state)
{
	test_export(state);
}

static void test_json(void **state)
{
	test_export(state);
}

/* otlp_compression gzip: every export carries Content-Encoding: gzip and decodes, once
 * inflated, like the uncompressed ones */
static void test_gzip(void **state)
{
	test_export(state);
}

/* OTLP/HTTP's retryable answers (429, 502, 503, 504, none): the same export is sent again
 * after 1 s, then 2 s; here the third send is taken, and the spans count as exported,
 * none as failed. */
static void test_retried_after_503_and_429(void **state)
{
	const struct otel_case *c = *state;
	char tp[64], sub[64], delivery[64], traces[80];
	snprintf(tp, sizeof(tp), "00-%s-%s-01", "4bf92f3577b34da6a3ce929d0e0e4736",
		 "00f067aa0ba902b7");
	snprintf(traces, sizeof(traces), "%s/v1/traces", c->prefix);
	assert_int_equal(receiver_reset(&rcv), 0);
	assert_int_equal(receiver_script(&rcv, traces, c->partial), 0);
	deliver_twice(tp, sub, delivery);
	double exported = 0;
	for (int i = 0; i < 150 && exported < 2; i++) {
		exported = e2e_metric(&dmn, "outboxd_otlp_spans_total{outcome=\"exported\"}");
		if (exported < 2)
			usleep(100 * 1000);
	}
	assert_true(exported >= 2); /* the two attempts' spans */
	assert_true(e2e_metric(&dmn, "outboxd_otlp_spans_total{outcome=\"failed\"}") == 0);
	assert_true(receiver_count(&rcv, traces) >= 3); /* 503, 429, then taken */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_prestate_setup_teardown(test_protobuf_by_default, setup, teardown,
							 (void *)&protobuf_case),
		cmocka_unit_test_prestate_setup_teardown(test_json, setup, teardown,
							 (void *)&json_case),
		cmocka_unit_test_prestate_setup_teardown(test_gzip, setup, teardown,
							 (void *)&gzip_case),
		cmocka_unit_test_prestate_setup_teardown(test_retried_after_503_and_429, setup,
							 teardown, (void *)&retry_case),
	};
	return cmocka_run_group_tests(tests, setup_receiver, teardown_receiver);
}
