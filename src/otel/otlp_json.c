/* otlp_json.c: the OTLP JSON encoding (the protobuf JSON mapping of the OTLP trace and
 * metrics services: ids as lowercase hex, 64-bit integers as strings, enums as numbers)
 * of attempt spans and of the Prometheus counters. Pure: no I/O, no clock. */
#include "otel/otlp.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/model.h"
#include "core/trace.h"

#define SPAN_KIND_CLIENT 3      /* opentelemetry.proto.trace.v1.Span.SpanKind */
#define STATUS_OK 1             /* Status.StatusCode */
#define STATUS_ERROR 2
#define TEMPORALITY_CUMULATIVE 2

static void copy(char *dst, size_t size, const char *src)
{
	snprintf(dst, size, "%s", src ? src : "");
}

void otlp_span_from_attempt(struct otlp_span *s, const struct store_claim *c,
			    const struct store_attempt *a, uint64_t span_id, int64_t duration_us)
{
	char tp[TRACEPARENT_LEN];

	memset(s, 0, sizeof(*s));
	/* the same trace id the attempt's traceparent header carried (core/trace.h) */
	trace_child(c->traceparent, c->event_id, span_id, tp);
	memcpy(s->trace_id, tp + 3, 32);
	memcpy(s->span_id, tp + 36, 16);
	if (trace_valid(c->traceparent))
		memcpy(s->parent_span_id, c->traceparent + 36, 16);
	copy(s->delivery_id, sizeof(s->delivery_id), c->delivery_id);
	copy(s->event_id, sizeof(s->event_id), c->event_id);
	copy(s->subscription_id, sizeof(s->subscription_id), c->subscription_id);
	copy(s->event_type, sizeof(s->event_type), c->event_type);
	copy(s->kind, sizeof(s->kind), attempt_kind_name(a->kind));
	copy(s->message, sizeof(s->message), a->message);
	s->attempt = a->n;
	s->code = a->code;
	s->start_ns = a->started_at * 1000000;
	s->end_ns = s->start_ns + (duration_us > 0 ? duration_us : 0) * 1000;
}

static json_t *attr_str(const char *key, const char *value)
{
	return json_pack("{s:s, s:{s:s}}", "key", key, "value", "stringValue", value);
}

static json_t *attr_int(const char *key, long long value)
{
	char text[24];
	snprintf(text, sizeof(text), "%lld", value);
	return json_pack("{s:s, s:{s:s}}", "key", key, "value", "intValue", text);
}

static json_t *nanos(int64_t ns)
{
	char text[24];
	snprintf(text, sizeof(text), "%" PRId64, ns);
	return json_string(text);
}

static json_t *resource(const char *service_instance, const char *version)
{
	json_t *attrs = json_array();
	json_array_append_new(attrs, attr_str("service.name", "outboxd"));
	json_array_append_new(attrs, attr_str("service.version", version));
	json_array_append_new(attrs, attr_str("service.instance.id", service_instance));
	return json_pack("{s:o}", "attributes", attrs);
}

static char *dump(json_t *root)
{
	char *text = root ? json_dumps(root, JSON_COMPACT) : NULL;
	json_decref(root);
	return text;
}

static json_t *span_json(const struct otlp_span *s)
{
	int ok = s->code >= 200 && s->code < 300;
	char name[128];
	snprintf(name, sizeof(name), "deliver %s", s->event_type[0] ? s->event_type : "event");
	json_t *attrs = json_array();
	json_array_append_new(attrs, attr_str("outboxd.delivery.id", s->delivery_id));
	json_array_append_new(attrs, attr_str("outboxd.event.id", s->event_id));
	json_array_append_new(attrs, attr_str("outboxd.event.type", s->event_type));
	json_array_append_new(attrs, attr_str("outboxd.subscription.id", s->subscription_id));
	json_array_append_new(attrs, attr_str("outboxd.attempt.kind", s->kind));
	json_array_append_new(attrs, attr_int("outboxd.attempt.number", s->attempt));
	json_array_append_new(attrs, attr_int("outboxd.attempt.code", s->code));
	json_array_append_new(attrs, attr_str("outboxd.attempt.outcome", ok ? "success" : "failure"));
	if (s->code >= 100 && s->code < 600)
		json_array_append_new(attrs, attr_int("http.response.status_code", s->code));
	json_t *status = ok ? json_pack("{s:i}", "code", STATUS_OK)
			    : json_pack("{s:i, s:s}", "code", STATUS_ERROR, "message", s->message);
	json_t *span = json_pack("{s:s, s:s, s:s, s:i, s:o, s:o, s:o, s:o}", "traceId", s->trace_id,
				 "spanId", s->span_id, "name", name, "kind", SPAN_KIND_CLIENT,
				 "startTimeUnixNano", nanos(s->start_ns), "endTimeUnixNano",
				 nanos(s->end_ns), "attributes", attrs, "status", status);
	if (span && s->parent_span_id[0])
		json_object_set_new(span, "parentSpanId", json_string(s->parent_span_id));
	return span;
}

char *otlp_traces_json(const struct otlp_span *spans, size_t n, const char *service_instance,
		       const char *version)
{
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(list, span_json(&spans[i]));
	return dump(json_pack("{s:[{s:o, s:[{s:{s:s, s:s}, s:o}]}]}", "resourceSpans", "resource",
			      resource(service_instance, version), "scopeSpans", "scope", "name",
			      "outboxd", "version", version, "spans", list));
}

/* ---- Prometheus text -> OTLP metrics ------------------------------------------------- */

/* name{k="v",...} value: the labels as OTLP attributes into attrs. 0, or -1 when the
 * line is not a sample. */
static int parse_sample(const char *line, char *name, size_t name_size, json_t *attrs,
			double *value)
{
	size_t n = strcspn(line, "{ ");
	if (n == 0 || n >= name_size)
		return -1;
	memcpy(name, line, n);
	name[n] = '\0';
	const char *p = line + n;
	if (*p == '{') {
		p++;
		while (*p && *p != '}') {
			char key[128], val[256];
			size_t kl = strcspn(p, "=");
			if (kl == 0 || kl >= sizeof(key) || p[kl] != '=' || p[kl + 1] != '"')
				return -1;
			memcpy(key, p, kl);
			key[kl] = '\0';
			p += kl + 2;
			size_t vl = 0;
			while (*p && *p != '"' && vl < sizeof(val) - 1) {
				if (*p == '\\' && p[1])
					p++;
				val[vl++] = *p++;
			}
			val[vl] = '\0';
			if (*p != '"')
				return -1;
			p++;
			json_array_append_new(attrs, attr_str(key, val));
			if (*p == ',')
				p++;
		}
		if (*p != '}')
			return -1;
		p++;
	}
	char *end;
	*value = strtod(p, &end);
	return end == p ? -1 : 0;
}

char *otlp_metrics_json(const char *text, const char *service_instance, const char *version,
			int64_t start_ns, int64_t now_ns)
{
	json_t *metrics = json_array();
	json_t *points = NULL;     /* data points of the current family */
	char family[128] = "", type[16] = "";
	const char *line = text;

	while (line && *line) {
		const char *eol = strchr(line, '\n');
		size_t len = eol ? (size_t)(eol - line) : strlen(line);
		char buf[1024];
		if (len < sizeof(buf)) {
			memcpy(buf, line, len);
			buf[len] = '\0';
			char name[128];
			if (sscanf(buf, "# TYPE %127s %15s", name, type) == 2) {
				snprintf(family, sizeof(family), "%s", name);
				points = NULL;
				if (!strcmp(type, "counter") || !strcmp(type, "gauge")) {
					points = json_array();
					json_t *m = !strcmp(type, "counter")
						? json_pack("{s:s, s:{s:o, s:i, s:b}}", "name", name, "sum",
							    "dataPoints", points, "aggregationTemporality",
							    TEMPORALITY_CUMULATIVE, "isMonotonic", 1)
						: json_pack("{s:s, s:{s:o}}", "name", name, "gauge",
							    "dataPoints", points);
					json_array_append_new(metrics, m);
				}
			} else if (buf[0] != '#' && buf[0] && points) {
				json_t *attrs = json_array();
				double v;
				if (parse_sample(buf, name, sizeof(name), attrs, &v) == 0 &&
				    strcmp(name, family) == 0) {
					json_t *pt = json_pack("{s:o, s:o, s:f}", "attributes", attrs,
							       "timeUnixNano", nanos(now_ns), "asDouble", v);
					if (pt && !strcmp(type, "counter"))
						json_object_set_new(pt, "startTimeUnixNano", nanos(start_ns));
					json_array_append_new(points, pt);
				} else {
					json_decref(attrs);
				}
			}
		}
		line = eol ? eol + 1 : NULL;
	}
	return dump(json_pack("{s:[{s:o, s:[{s:{s:s, s:s}, s:o}]}]}", "resourceMetrics",
			      "resource", resource(service_instance, version), "scopeMetrics",
			      "scope", "name", "outboxd", "version", version, "metrics", metrics));
}
