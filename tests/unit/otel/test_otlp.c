/* test_otlp.c: the OTLP export requests of attempt spans and of the Prometheus counters,
 * in both encodings: the binary protobuf decoded back with the protobuf-c code generated
 * from the OTLP definitions, the JSON with jansson (ids in hex, 64-bit integers as
 * strings, enums as numbers). No collector, no thread; tests/e2e/test_otel.c decodes what
 * the daemon sends with the definitions as released. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>
#include <zlib.h>

#include "core/metrics.h"
#include "otel/otlp.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb-c.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"

typedef Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest trace_request;
typedef Opentelemetry__Proto__Collector__Metrics__V1__ExportMetricsServiceRequest metrics_request;
typedef Opentelemetry__Proto__Common__V1__KeyValue key_value;
typedef Opentelemetry__Proto__Metrics__V1__Metric metric;

/* ---- helpers ------------------------------------------------------------------------------- */

static const char *json_attr(json_t *attrs, const char *key)
{
	size_t i;
	json_t *a;
	json_array_foreach(attrs, i, a) {
		if (strcmp(json_string_value(json_object_get(a, "key")), key) != 0)
			continue;
		json_t *v = json_object_get(a, "value");
		if (json_object_get(v, "stringValue"))
			return json_string_value(json_object_get(v, "stringValue"));
		return json_string_value(json_object_get(v, "intValue"));
	}
	return NULL;
}

/* The attribute key of attrs[0..n) as text (a string, or an integer in decimal; static
 * buffer), NULL when absent. */
static const char *pb_attr(key_value **attrs, size_t n, const char *key)
{
	static char num[32];
	for (size_t i = 0; i < n; i++) {
		if (strcmp(attrs[i]->key, key) != 0)
			continue;
		if (attrs[i]->value->value_case ==
		    OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE)
			return attrs[i]->value->string_value;
		snprintf(num, sizeof(num), "%lld", (long long)attrs[i]->value->int_value);
		return num;
	}
	return NULL;
}

static void assert_bytes_hex(ProtobufCBinaryData b, const char *hex)
{
	char text[65] = "";
	assert_true(b.len * 2 < sizeof(text));
	for (size_t i = 0; i < b.len; i++)
		snprintf(text + 2 * i, 3, "%02x", b.data[i]);
	assert_string_equal(text, hex);
}

static struct store_claim claim(const char *traceparent)
{
	static char type[] = "user.created";
	struct store_claim c;
	memset(&c, 0, sizeof(c));
	strcpy(c.delivery_id, "0190f5e2-0000-7000-8000-00000000000d");
	strcpy(c.event_id, "0190f5e2-1111-7000-8000-0000000000e1");
	strcpy(c.subscription_id, "0190f5e2-2222-7000-8000-0000000000a1");
	snprintf(c.traceparent, sizeof(c.traceparent), "%s", traceparent);
	c.event_type = type;
	return c;
}

/* A failed attempt of an event with a traceparent, 2.5 ms long from a start with
 * nanoseconds of its own. */
static struct otlp_span failed_span(void)
{
	struct store_claim c = claim("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
	struct store_attempt a = {.n = 2, .kind = ATTEMPT_IMMEDIATE, .started_at = 1700000000123,
				  .code = 503, .message = "HTTP 503"};
	struct otlp_span s;
	otlp_span_from_attempt(&s, &c, &a, 0xabcdef0123456789ULL, 1700000000123456789LL, 2500001);
	return s;
}

static trace_request *traces_pb(const struct otlp_span *s, size_t n)
{
	char *body;
	size_t len;
	assert_int_equal(otlp_encode_traces(OTLP_PROTOBUF, s, n, "host:1", "0.1.0", &body, &len), 0);
	trace_request *req = opentelemetry__proto__collector__trace__v1__export_trace_service_request__unpack(
		NULL, len, (const uint8_t *)body);
	free(body);
	assert_non_null(req);
	assert_int_equal(req->n_resource_spans, 1);
	Opentelemetry__Proto__Trace__V1__ResourceSpans *rs = req->resource_spans[0];
	assert_string_equal(pb_attr(rs->resource->attributes, rs->resource->n_attributes,
				    "service.name"), "outboxd");
	assert_string_equal(pb_attr(rs->resource->attributes, rs->resource->n_attributes,
				    "service.instance.id"), "host:1");
	assert_int_equal(rs->n_scope_spans, 1);
	assert_string_equal(rs->scope_spans[0]->scope->name, "outboxd");
	assert_int_equal(rs->scope_spans[0]->n_spans, n);
	return req;
}

static json_t *first_json_span(const struct otlp_span *s)
{
	char *body;
	size_t len;
	assert_int_equal(otlp_encode_traces(OTLP_JSON, s, 1, "host:1", "0.1.0", &body, &len), 0);
	json_error_t e;
	json_t *root = json_loadb(body, len, 0, &e);
	free(body);
	assert_non_null(root);
	json_t *rs = json_array_get(json_object_get(root, "resourceSpans"), 0);
	json_t *res = json_object_get(json_object_get(rs, "resource"), "attributes");
	assert_string_equal(json_attr(res, "service.name"), "outboxd");
	assert_string_equal(json_attr(res, "service.instance.id"), "host:1");
	json_t *ss = json_array_get(json_object_get(rs, "scopeSpans"), 0);
	json_t *span = json_incref(json_array_get(json_object_get(ss, "spans"), 0));
	json_decref(root);
	return span;
}

/* ---- spans --------------------------------------------------------------------------------- */

/* The producer's trace id, its span as (remote) parent, our span id, nanosecond times,
 * status error with the message, the attributes: in protobuf. */
static void test_span_protobuf(void **state)
{
	struct otlp_span s = failed_span();
	trace_request *req = traces_pb(&s, 1);
	Opentelemetry__Proto__Trace__V1__Span *span = req->resource_spans[0]->scope_spans[0]->spans[0];
	assert_bytes_hex(span->trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
	assert_bytes_hex(span->parent_span_id, "00f067aa0ba902b7");
	assert_bytes_hex(span->span_id, "abcdef0123456789");
	assert_int_equal(span->flags, 0x301); /* sampled; the parent is known to be remote */
	assert_string_equal(span->name, "deliver user.created");
	assert_int_equal(span->kind, OPENTELEMETRY__PROTO__TRACE__V1__SPAN__SPAN_KIND__SPAN_KIND_CLIENT);
	assert_true(span->start_time_unix_nano == 1700000000123456789ULL);
	assert_true(span->end_time_unix_nano == 1700000000125956790ULL);
	assert_string_equal(pb_attr(span->attributes, span->n_attributes, "outboxd.delivery.id"),
			    "0190f5e2-0000-7000-8000-00000000000d");
	assert_string_equal(pb_attr(span->attributes, span->n_attributes, "outboxd.attempt.kind"),
			    "immediate");
	assert_string_equal(pb_attr(span->attributes, span->n_attributes, "outboxd.attempt.number"),
			    "2");
	assert_string_equal(pb_attr(span->attributes, span->n_attributes,
				    "http.response.status_code"), "503");
	assert_string_equal(pb_attr(span->attributes, span->n_attributes, "outboxd.attempt.outcome"),
			    "failure");
	assert_int_equal(span->status->code,
			 OPENTELEMETRY__PROTO__TRACE__V1__STATUS__STATUS_CODE__STATUS_CODE_ERROR);
	assert_string_equal(span->status->message, "HTTP 503");
	opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(req, NULL);
}

/* The same span as OTLP JSON: hex ids, times as decimal strings, enums as numbers. */
static void test_span_json(void **state)
{
	struct otlp_span s = failed_span();
	json_t *span = first_json_span(&s);
	assert_string_equal(json_string_value(json_object_get(span, "traceId")),
			    "4bf92f3577b34da6a3ce929d0e0e4736");
	assert_string_equal(json_string_value(json_object_get(span, "parentSpanId")),
			    "00f067aa0ba902b7");
	assert_string_equal(json_string_value(json_object_get(span, "spanId")), "abcdef0123456789");
	assert_int_equal(json_integer_value(json_object_get(span, "flags")), 0x301);
	assert_int_equal(json_integer_value(json_object_get(span, "kind")), 3);
	assert_string_equal(json_string_value(json_object_get(span, "startTimeUnixNano")),
			    "1700000000123456789");
	assert_string_equal(json_string_value(json_object_get(span, "endTimeUnixNano")),
			    "1700000000125956790");
	json_t *attrs = json_object_get(span, "attributes");
	assert_string_equal(json_attr(attrs, "outboxd.subscription.id"),
			    "0190f5e2-2222-7000-8000-0000000000a1");
	assert_string_equal(json_attr(attrs, "outboxd.attempt.number"), "2");
	assert_string_equal(json_attr(attrs, "http.response.status_code"), "503");
	json_t *status = json_object_get(span, "status");
	assert_int_equal(json_integer_value(json_object_get(status, "code")), 2);
	assert_string_equal(json_string_value(json_object_get(status, "message")), "HTTP 503");
	json_decref(span);
}

/* No traceparent: no parent, and the trace id the attempt's header carried (made from
 * the event id); a 2xx is status ok, without a message. */
static void test_span_without_parent(void **state)
{
	struct store_claim c = claim("");
	struct store_attempt a = {.n = 1, .kind = ATTEMPT_SCHEDULED, .code = 200,
				  .message = "HTTP 200"};
	struct otlp_span s;
	otlp_span_from_attempt(&s, &c, &a, 7, 1000, 0);
	json_t *span = first_json_span(&s);
	assert_null(json_object_get(span, "parentSpanId"));
	assert_string_equal(json_string_value(json_object_get(span, "traceId")),
			    "0190f5e21111700080000000000000e1" /* the event id's hex digits */);
	assert_string_equal(json_string_value(json_object_get(span, "spanId")), "0000000000000007");
	assert_int_equal(json_integer_value(json_object_get(span, "flags")), 0x101);
	json_t *status = json_object_get(span, "status");
	assert_int_equal(json_integer_value(json_object_get(status, "code")), 1);
	assert_null(json_object_get(status, "message"));
	json_decref(span);

	trace_request *req = traces_pb(&s, 1);
	assert_int_equal(req->resource_spans[0]->scope_spans[0]->spans[0]->parent_span_id.len, 0);
	opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(req, NULL);
}

/* A message cut inside a UTF-8 character (the fixed-size copy) or in another encoding
 * still makes a request a collector can read: protobuf strings must be UTF-8. */
static void test_span_text_not_utf8(void **state)
{
	struct otlp_span s = failed_span();
	snprintf(s.message, sizeof(s.message), "bad \xe2\x82 and \xff end \xc3");
	trace_request *req = traces_pb(&s, 1);
	assert_string_equal(req->resource_spans[0]->scope_spans[0]->spans[0]->status->message,
			    "bad ?? and ? end ?");
	opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(req, NULL);
	json_t *span = first_json_span(&s);
	assert_string_equal(json_string_value(json_object_get(json_object_get(span, "status"),
							      "message")),
			    "bad ?? and ? end ?");
	json_decref(span);
}

/* A whole batch goes into one request. */
static void test_batch(void **state)
{
	static struct otlp_span spans[OTLP_BATCH_MAX];
	for (size_t i = 0; i < OTLP_BATCH_MAX; i++)
		spans[i] = failed_span();
	trace_request *req = traces_pb(spans, OTLP_BATCH_MAX);
	opentelemetry__proto__collector__trace__v1__export_trace_service_request__free_unpacked(req, NULL);
}

/* ---- metrics ------------------------------------------------------------------------------- */

static const char *prom =
	"# HELP outboxd_attempts_total HTTP attempts.\n"
	"# TYPE outboxd_attempts_total counter\n"
	"outboxd_attempts_total{class=\"2xx\"} 7\n"
	"outboxd_attempts_total{class=\"5xx\"} 0\n"
	"# HELP outboxd_attempt_duration_seconds Duration of HTTP attempts.\n"
	"# TYPE outboxd_attempt_duration_seconds histogram\n"
	"outboxd_attempt_duration_seconds_bucket{le=\"0.1\"} 3\n"
	"outboxd_attempt_duration_seconds_bucket{le=\"1\"} 5\n"
	"outboxd_attempt_duration_seconds_bucket{le=\"+Inf\"} 6\n"
	"outboxd_attempt_duration_seconds_sum 4.250000\n"
	"outboxd_attempt_duration_seconds_count 6\n"
	"# TYPE outboxd_in_flight gauge\n"
	"outboxd_in_flight 4\n"
	"# TYPE outboxd_endpoint_latency_seconds gauge\n"
	"outboxd_endpoint_latency_seconds{endpoint=\"h:80#1\"} 0.025\n"
	"# TYPE outboxd_kafka_consumer_lag gauge\n"
	"outboxd_kafka_consumer_lag{topic=\"orders\",partition=\"3\"} 12\n"
	"# TYPE outboxd_kafka_dead_lettered_total counter\n"
	"# TYPE outboxd_new_things_total counter\n"
	"outboxd_new_things_total 1\n";

static metric *find_metric(metrics_request *req, const char *name)
{
	Opentelemetry__Proto__Metrics__V1__ScopeMetrics *sm =
		req->resource_metrics[0]->scope_metrics[0];
	for (size_t i = 0; i < sm->n_metrics; i++)
		if (strcmp(sm->metrics[i]->name, name) == 0)
			return sm->metrics[i];
	return NULL;
}

/* Counters as cumulative monotonic integer sums under OpenTelemetry names and units, the
 * histogram with per-bucket counts, gauges whole or fractional, labels as attributes. */
static void test_metrics_protobuf(void **state)
{
	char *body;
	size_t len;
	assert_int_equal(otlp_encode_metrics(OTLP_PROTOBUF, prom, "host:1", "0.1.0", 1000, 2000,
					     &body, &len), 0);
	metrics_request *req = opentelemetry__proto__collector__metrics__v1__export_metrics_service_request__unpack(
		NULL, len, (const uint8_t *)body);
	free(body);
	assert_non_null(req);
	/* 6: the family without samples is left out */
	assert_int_equal(req->resource_metrics[0]->scope_metrics[0]->n_metrics, 6);

	metric *m = find_metric(req, "outboxd.attempts");
	assert_non_null(m);
	assert_string_equal(m->unit, "{attempt}");
	assert_string_equal(m->description, "HTTP attempts.");
	assert_int_equal(m->data_case, OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_SUM);
	assert_true(m->sum->is_monotonic);
	assert_int_equal(m->sum->aggregation_temporality,
			 OPENTELEMETRY__PROTO__METRICS__V1__AGGREGATION_TEMPORALITY__AGGREGATION_TEMPORALITY_CUMULATIVE);
	assert_int_equal(m->sum->n_data_points, 2);
	Opentelemetry__Proto__Metrics__V1__NumberDataPoint *p = m->sum->data_points[0];
	assert_int_equal(p->value_case,
			 OPENTELEMETRY__PROTO__METRICS__V1__NUMBER_DATA_POINT__VALUE_AS_INT);
	assert_int_equal(p->as_int, 7);
	assert_string_equal(pb_attr(p->attributes, p->n_attributes, "outboxd.class"), "2xx");
	assert_true(p->start_time_unix_nano == 1000 && p->time_unix_nano == 2000);
	assert_int_equal(m->sum->data_points[1]->value_case,
			 OPENTELEMETRY__PROTO__METRICS__V1__NUMBER_DATA_POINT__VALUE_AS_INT);
	assert_int_equal(m->sum->data_points[1]->as_int, 0);

	m = find_metric(req, "outboxd.attempt.duration");
	assert_non_null(m);
	assert_string_equal(m->unit, "s");
	assert_int_equal(m->data_case, OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_HISTOGRAM);
	Opentelemetry__Proto__Metrics__V1__HistogramDataPoint *h = m->histogram->data_points[0];
	assert_int_equal(h->count, 6);
	assert_int_equal(h->optional_sum_case,
			 OPENTELEMETRY__PROTO__METRICS__V1__HISTOGRAM_DATA_POINT__OPTIONAL_SUM_SUM);
	assert_true(h->sum == 4.25);
	assert_int_equal(h->n_explicit_bounds, 2);
	assert_true(h->explicit_bounds[0] == 0.1 && h->explicit_bounds[1] == 1);
	assert_int_equal(h->n_bucket_counts, 3);
	assert_true(h->bucket_counts[0] == 3 && h->bucket_counts[1] == 2 && h->bucket_counts[2] == 1);

	m = find_metric(req, "outboxd.in_flight");
	assert_int_equal(m->data_case, OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_GAUGE);
	assert_string_equal(m->unit, "{delivery}");
	assert_int_equal(m->gauge->data_points[0]->as_int, 4);
	assert_int_equal(m->gauge->data_points[0]->start_time_unix_nano, 0);

	m = find_metric(req, "outboxd.endpoint.latency");
	assert_int_equal(m->gauge->data_points[0]->value_case,
			 OPENTELEMETRY__PROTO__METRICS__V1__NUMBER_DATA_POINT__VALUE_AS_DOUBLE);
	assert_true(m->gauge->data_points[0]->as_double == 0.025);

	m = find_metric(req, "outboxd.kafka.consumer_lag");
	p = m->gauge->data_points[0];
	assert_string_equal(pb_attr(p->attributes, p->n_attributes, "messaging.destination.name"),
			    "orders");
	assert_string_equal(pb_attr(p->attributes, p->n_attributes,
				    "messaging.destination.partition.id"), "3");

	/* a family not in the table still goes out, under a name made from its own */
	m = find_metric(req, "outboxd.new_things");
	assert_non_null(m);
	assert_string_equal(m->unit, "");
	opentelemetry__proto__collector__metrics__v1__export_metrics_service_request__free_unpacked(req, NULL);
}

/* The same as OTLP JSON: asInt as a decimal string (a zero included: a set oneof member
 * is written), the histogram's counts as strings, bounds as numbers. */
static void test_metrics_json(void **state)
{
	char *body;
	size_t len;
	assert_int_equal(otlp_encode_metrics(OTLP_JSON, prom, "host:1", "0.1.0", 1000, 2000, &body,
					     &len), 0);
	json_t *root = json_loadb(body, len, 0, NULL);
	free(body);
	assert_non_null(root);
	json_t *rm = json_array_get(json_object_get(root, "resourceMetrics"), 0);
	json_t *sm = json_array_get(json_object_get(rm, "scopeMetrics"), 0);
	json_t *metrics = json_object_get(sm, "metrics");
	json_t *sum = json_object_get(json_array_get(metrics, 0), "sum");
	assert_string_equal(json_string_value(json_object_get(json_array_get(metrics, 0), "name")),
			    "outboxd.attempts");
	assert_string_equal(json_string_value(json_object_get(json_array_get(metrics, 0), "unit")),
			    "{attempt}");
	assert_true(json_is_true(json_object_get(sum, "isMonotonic")));
	assert_int_equal(json_integer_value(json_object_get(sum, "aggregationTemporality")), 2);
	json_t *p0 = json_array_get(json_object_get(sum, "dataPoints"), 0);
	json_t *p1 = json_array_get(json_object_get(sum, "dataPoints"), 1);
	assert_string_equal(json_string_value(json_object_get(p0, "asInt")), "7");
	assert_string_equal(json_string_value(json_object_get(p1, "asInt")), "0");
	assert_null(json_object_get(p0, "asDouble"));
	assert_string_equal(json_string_value(json_object_get(p0, "startTimeUnixNano")), "1000");
	assert_string_equal(json_string_value(json_object_get(p0, "timeUnixNano")), "2000");
	json_t *hist = json_object_get(json_array_get(metrics, 1), "histogram");
	json_t *h = json_array_get(json_object_get(hist, "dataPoints"), 0);
	assert_string_equal(json_string_value(json_object_get(h, "count")), "6");
	assert_true(json_real_value(json_object_get(h, "sum")) == 4.25);
	assert_string_equal(json_string_value(json_array_get(json_object_get(h, "bucketCounts"), 1)),
			    "2");
	assert_true(json_real_value(json_array_get(json_object_get(h, "explicitBounds"), 0)) == 0.1);
	json_decref(root);
}

/* Every family GET /metrics renders has its OpenTelemetry name and a unit. */
static void test_every_family_named(void **state)
{
	char *text = NULL;
	size_t len = 0;
	assert_int_equal(metrics_render(&text, &len), 0);
	int families = 0;
	for (const char *line = text; line && *line;) {
		char name[128], type[16];
		if (sscanf(line, "# TYPE %127s %15s", name, type) == 2) {
			const char *unit = NULL;
			const char *otel = otlp_metric_name(name, &unit);
			if (!otel)
				fail_msg("%s has no OpenTelemetry name in src/otel/otlp_metrics.c", name);
			assert_non_null(strchr(otel, '.'));
			assert_null(strstr(otel, "_total"));
			assert_true(unit && *unit);
			families++;
		}
		line = strchr(line, '\n');
		line = line ? line + 1 : NULL;
	}
	assert_true(families >= 30);
	free(text);
}

/* A collector's partial success: what it rejected, and why; anything else rejects nothing. */
static void test_partial_success(void **state)
{
	int64_t n;
	char why[64];
	Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceResponse r =
		OPENTELEMETRY__PROTO__COLLECTOR__TRACE__V1__EXPORT_TRACE_SERVICE_RESPONSE__INIT;
	Opentelemetry__Proto__Collector__Trace__V1__ExportTracePartialSuccess ps =
		OPENTELEMETRY__PROTO__COLLECTOR__TRACE__V1__EXPORT_TRACE_PARTIAL_SUCCESS__INIT;
	ps.rejected_spans = 3;
	ps.error_message = "spans too old";
	r.partial_success = &ps;
	uint8_t buf[128];
	size_t len = opentelemetry__proto__collector__trace__v1__export_trace_service_response__pack(&r, buf);
	otlp_response_rejected(OTLP_PROTOBUF, 1, (const char *)buf, len, &n, why, sizeof(why));
	assert_int_equal(n, 3);
	assert_string_equal(why, "spans too old");

	const char *json = "{\"partialSuccess\":{\"rejectedDataPoints\":\"2\","
			   "\"errorMessage\":\"no such unit\"}}";
	otlp_response_rejected(OTLP_JSON, 0, json, strlen(json), &n, why, sizeof(why));
	assert_int_equal(n, 2);
	assert_string_equal(why, "no such unit");
	const char *warning = "{\"partialSuccess\":{\"errorMessage\":\"deprecated\"}}";
	otlp_response_rejected(OTLP_JSON, 1, warning, strlen(warning), &n, why, sizeof(why));
	assert_int_equal(n, 0);
	assert_string_equal(why, "deprecated");

	/* a full success (empty, {}), or an answer that is not OTLP at all */
	otlp_response_rejected(OTLP_PROTOBUF, 1, "", 0, &n, why, sizeof(why));
	assert_int_equal(n, 0);
	otlp_response_rejected(OTLP_JSON, 1, "{}", 2, &n, why, sizeof(why));
	assert_int_equal(n, 0);
	assert_string_equal(why, "");
	otlp_response_rejected(OTLP_PROTOBUF, 0, "<html>ok</html>", 15, &n, why, sizeof(why));
	assert_int_equal(n, 0);
}

static void test_protocol_names(void **state)
{
	enum otlp_protocol p;
	assert_int_equal(otlp_protocol_parse("http/protobuf", &p), 0);
	assert_int_equal(p, OTLP_PROTOBUF);
	assert_int_equal(otlp_protocol_parse("http/json", &p), 0);
	assert_int_equal(p, OTLP_JSON);
	assert_int_equal(otlp_protocol_parse("grpc", &p), -1);
}

/* otlp_compression gzip: a batch of spans encoded, compressed as one gzip member, and
 * inflated back the way a collector reads Content-Encoding: gzip gives the same bytes;
 * the batch (the same attribute names, ids and texts over and over) shrinks. */
static void test_gzip(void **state)
{
	static struct otlp_span spans[OTLP_BATCH_MAX];
	char *body = NULL, *packed = NULL;
	size_t len = 0, packed_len = 0;

	for (size_t i = 0; i < OTLP_BATCH_MAX; i++)
		spans[i] = failed_span();
	assert_int_equal(otlp_encode_traces(OTLP_PROTOBUF, spans, OTLP_BATCH_MAX, "h:1", "1.0",
					    &body, &len), 0);
	assert_int_equal(otlp_gzip(body, len, &packed, &packed_len), 0);
	assert_true(packed_len >= 18);                 /* a gzip header and trailer at least */
	assert_int_equal((unsigned char)packed[0], 0x1f); /* the gzip magic */
	assert_int_equal((unsigned char)packed[1], 0x8b);
	assert_true(packed_len * 4 < len);

	char *back = malloc(len + 1);
	assert_non_null(back);
	z_stream z = {0};
	assert_int_equal(inflateInit2(&z, 15 + 16), Z_OK); /* gzip only, as a collector's */
	z.next_in = (Bytef *)packed;
	z.avail_in = (uInt)packed_len;
	z.next_out = (Bytef *)back;
	z.avail_out = (uInt)len + 1;
	assert_int_equal(inflate(&z, Z_FINISH), Z_STREAM_END);
	assert_int_equal(z.total_out, len);
	inflateEnd(&z);
	assert_memory_equal(back, body, len);

	/* an empty body is a valid member too */
	free(packed);
	assert_int_equal(otlp_gzip("", 0, &packed, &packed_len), 0);
	assert_true(packed_len >= 18);
	free(packed);
	free(back);
	free(body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_span_protobuf),
		cmocka_unit_test(test_span_json),
		cmocka_unit_test(test_span_without_parent),
		cmocka_unit_test(test_span_text_not_utf8),
		cmocka_unit_test(test_batch),
		cmocka_unit_test(test_metrics_protobuf),
		cmocka_unit_test(test_metrics_json),
		cmocka_unit_test(test_every_family_named),
		cmocka_unit_test(test_partial_success),
		cmocka_unit_test(test_protocol_names),
		cmocka_unit_test(test_gzip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
