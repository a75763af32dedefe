/* otlp_int.h: what the files of src/otel share and nothing outside it sees — the arena
 * an export request is built in, short names for the protobuf-c types generated from the
 * OTLP definitions (proto/opentelemetry), the builders of common messages, and the OTLP
 * JSON writer. Only the files of this folder include the generated headers. */
#ifndef OUTBOXD_OTEL_OTLP_INT_H
#define OUTBOXD_OTEL_OTLP_INT_H

#include <stddef.h>
#include <stdint.h>

#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb-c.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb-c.h"

typedef Opentelemetry__Proto__Common__V1__KeyValue otlp_kv;
typedef Opentelemetry__Proto__Common__V1__AnyValue otlp_any;
typedef Opentelemetry__Proto__Common__V1__InstrumentationScope otlp_scope;
typedef Opentelemetry__Proto__Resource__V1__Resource otlp_resource;
typedef Opentelemetry__Proto__Trace__V1__Span otlp_pb_span;
typedef Opentelemetry__Proto__Trace__V1__Status otlp_status;
typedef Opentelemetry__Proto__Trace__V1__ResourceSpans otlp_resource_spans;
typedef Opentelemetry__Proto__Trace__V1__ScopeSpans otlp_scope_spans;
typedef Opentelemetry__Proto__Metrics__V1__Metric otlp_metric;
typedef Opentelemetry__Proto__Metrics__V1__Sum otlp_sum;
typedef Opentelemetry__Proto__Metrics__V1__Gauge otlp_gauge;
typedef Opentelemetry__Proto__Metrics__V1__Histogram otlp_histogram;
typedef Opentelemetry__Proto__Metrics__V1__NumberDataPoint otlp_number_point;
typedef Opentelemetry__Proto__Metrics__V1__HistogramDataPoint otlp_histogram_point;
typedef Opentelemetry__Proto__Metrics__V1__ResourceMetrics otlp_resource_metrics;
typedef Opentelemetry__Proto__Metrics__V1__ScopeMetrics otlp_scope_metrics;
typedef Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceRequest otlp_trace_request;
typedef Opentelemetry__Proto__Collector__Metrics__V1__ExportMetricsServiceRequest
	otlp_metrics_request;

/* ---- the arena ------------------------------------------------------------------------ */

/* A request's messages, strings and arrays live in one arena, freed at once after the
 * request is packed. OTLP_ARENA_MAX bounds it: the 64 MiB OTLP recommends as the largest
 * request body, far above a batch of OTLP_BATCH_MAX spans or the counters of 1024
 * subscriptions. */
#define OTLP_ARENA_MAX ((size_t)64 << 20)

struct otlp_arena_chunk;
struct otlp_arena {
	struct otlp_arena_chunk *head;
	size_t total;                 /* bytes of all chunks */
};

/* n zeroed bytes, aligned for any type; NULL when out of memory or over OTLP_ARENA_MAX. */
void *otlp_alloc(struct otlp_arena *a, size_t n);
/* A copy of s (NULL reads as "") in which bytes that are not valid UTF-8 became '?':
 * protobuf strings must be UTF-8, and a collector refuses a whole request otherwise (a
 * message cut inside a character by a fixed-size buffer would do it). NULL as above. */
char *otlp_strdup(struct otlp_arena *a, const char *s);
void otlp_arena_free(struct otlp_arena *a);

/* ---- messages ------------------------------------------------------------------------- */

/* Attributes, built into the arena; NULL when out of memory. key and value are copied. */
otlp_kv *otlp_kv_str(struct otlp_arena *a, const char *key, const char *value);
otlp_kv *otlp_kv_int(struct otlp_arena *a, const char *key, int64_t value);

/* The resource every export carries (service.name outboxd, service.version,
 * service.instance.id) and the instrumentation scope (outboxd, version). NULL when out of
 * memory. */
otlp_resource *otlp_resource_new(struct otlp_arena *a, const char *service_instance,
				 const char *version);
otlp_scope *otlp_scope_new(struct otlp_arena *a, const char *version);

/* The metrics of a Prometheus text exposition (core/metrics.h) as OTLP metrics
 * (otlp_metrics.c): into *out an arena array of *n metrics. 0, or -1 when out of memory. */
int otlp_metrics_from_prometheus(struct otlp_arena *a, const char *text, int64_t start_ns,
				 int64_t now_ns, otlp_metric ***out, size_t *n);

/* ---- encodings -------------------------------------------------------------------------- */

/* m (borrowed) in the OTLP JSON encoding (otlp_json.c): proto3's JSON mapping with OTLP's
 * deviations. Returned in *out (malloc'd, the caller frees it), *len bytes. 0, or -1 when
 * out of memory. */
int otlp_json_encode(const ProtobufCMessage *m, char **out, size_t *len);

#endif
