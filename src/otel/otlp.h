/* otlp.h: OpenTelemetry export over OTLP/HTTP with JSON bodies (setting otlp_endpoint):
 * one span per delivery attempt to ENDPOINT/v1/traces, and the counters of GET /metrics
 * to ENDPOINT/v1/metrics every otlp_interval. Off unless otlp_start was called.
 *
 * The exporter is process-wide, like the counters (core/metrics.h): the dispatcher
 * records an attempt with one call, otlp_attempt, which copies the span into a bounded
 * queue under a short lock and returns; it never waits for the network. A full queue
 * drops the span and counts it (outboxd_otlp_spans_total{outcome="dropped"}). One thread
 * of its own sends batches with libcurl; a collector that is down costs lost spans,
 * never a delivery.
 *
 * The endpoint is set by the operator, so the SSRF guard (core/ssrf.h) does not apply. */
#ifndef OUTBOXD_OTEL_OTLP_H
#define OUTBOXD_OTEL_OTLP_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define OTLP_QUEUE_MAX 8192   /* spans waiting for export at most; more are dropped */
#define OTLP_BATCH_MAX 512    /* spans per export request */
#define OTLP_FLUSH_MS 1000    /* a span waits at most this long before it is sent */

/* Starts the exporter thread. endpoint (copied) is the collector's base URL
 * (http://host:4318); headers (copied, NULL for none) the otlp_headers setting,
 * "Name=value,Name=value", sent with every export; service_instance (copied) names this
 * process in the resource (host:pid). Returns 0, or -1 with err set. */
int otlp_start(const char *endpoint, const char *headers, const char *service_instance,
	       const char *version, int64_t metrics_interval_ms, char *err, size_t errlen);

/* Sends what is queued (one last try, bounded by a short timeout) and stops the thread.
 * A no-op when not started. Call after the dispatcher has stopped. */
void otlp_stop(void);

/* One delivery attempt is over: a span for it, when the exporter runs (else nothing).
 * c is the claimed delivery (its event's traceparent parents the span), a the attempt
 * as recorded (its start, code, message), span_id the span id the attempt's traceparent
 * header carried (0: a fresh one), duration_us its length. All borrowed; never blocks. */
void otlp_attempt(const struct store_claim *c, const struct store_attempt *a, uint64_t span_id,
		  int64_t duration_us);

/* ---- encoding (otlp_json.c): pure, for the exporter and the tests ------------------- */

/* One span as kept in the queue: fixed-size, copied in and out. */
struct otlp_span {
	char trace_id[33];        /* 32 lowercase hex digits */
	char span_id[17];
	char parent_span_id[17];  /* "" when the event had no traceparent */
	char delivery_id[UUID_STR_LEN];
	char event_id[UUID_STR_LEN];
	char subscription_id[UUID_STR_LEN];
	char event_type[96];
	char kind[12];            /* immediate, scheduled, manual */
	char message[128];
	int attempt;              /* 1-based attempt number of the delivery */
	int code;                 /* HTTP status or mapped code */
	int64_t start_ns, end_ns; /* Unix epoch */
};

/* Fills s from an attempt (see otlp_attempt). The trace id is the one the attempt's
 * traceparent header carried (core/trace.h: the event's, else one made from its id). */
void otlp_span_from_attempt(struct otlp_span *s, const struct store_claim *c,
			    const struct store_attempt *a, uint64_t span_id, int64_t duration_us);

/* The ExportTraceServiceRequest of spans[0..n) as OTLP JSON; returned (free it), NULL when
 * out of memory. */
char *otlp_traces_json(const struct otlp_span *spans, size_t n, const char *service_instance,
		       const char *version);

/* The ExportMetricsServiceRequest of a Prometheus text exposition (core/metrics.h): each
 * counter becomes a cumulative monotonic sum, each gauge a gauge, labels become
 * attributes (histograms are left to /metrics). start_ns is when counting began, now_ns
 * the sample time. Returned (free it), NULL when out of memory. */
char *otlp_metrics_json(const char *prometheus_text, const char *service_instance,
			const char *version, int64_t start_ns, int64_t now_ns);

#endif
