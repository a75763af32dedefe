/* otlp.h: OpenTelemetry export over OTLP/HTTP (setting otlp_endpoint): one span per
 * delivery attempt to ENDPOINT/v1/traces, and the counters of GET /metrics to
 * ENDPOINT/v1/metrics every otlp_interval, as binary protobuf (otlp_protocol
 * http/protobuf, the OpenTelemetry Collector's default) or as OTLP JSON (http/json).
 * Off unless otlp_start was called.
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

/* How export requests are encoded (otlp_protocol). */
enum otlp_protocol {
	OTLP_PROTOBUF = 0,    /* "http/protobuf": Content-Type application/x-protobuf */
	OTLP_JSON,            /* "http/json": Content-Type application/json */
};

/* The protocol named name ("http/protobuf", "http/json") into *out: 0, or -1 for any other
 * name. */
int otlp_protocol_parse(const char *name, enum otlp_protocol *out);

/* Starts the exporter thread. endpoint (copied) is the collector's base URL
 * (http://host:4318); headers (copied, NULL for none) the otlp_headers setting,
 * "Name=value,Name=value", sent with every export; protocol the otlp_protocol setting;
 * compression the otlp_compression setting ("none", NULL or "" for none, or "gzip");
 * service_instance (copied) names this process in the resource (host:pid). Returns 0, or
 * -1 with err set. */
int otlp_start(const char *endpoint, const char *headers, const char *protocol,
	       const char *compression, const char *service_instance, const char *version,
	       int64_t metrics_interval_ms, char *err, size_t errlen);

/* Sends what is queued (one last try, bounded by a short timeout) and stops the thread.
 * A no-op when not started. Call after the dispatcher has stopped. */
void otlp_stop(void);

/* One delivery attempt is over: a span for it, when the exporter runs (else nothing).
 * c is the claimed delivery (its event's traceparent parents the span), a the attempt
 * as recorded (its code, message), span_id the span id the attempt's traceparent header
 * carried (0: a fresh one), start_ns when it began (wall clock, ns since the epoch),
 * duration_ns its length (a monotonic clock's). All borrowed; never blocks. */
void otlp_attempt(const struct store_claim *c, const struct store_attempt *a, uint64_t span_id,
		  int64_t start_ns, int64_t duration_ns);

/* ---- encoding (otlp_encode.c): pure, for the exporter and the tests ----------------- */

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
	unsigned trace_flags;     /* W3C trace flags of the attempt's traceparent */
	int64_t start_ns, end_ns; /* ns since the epoch */
};

/* Fills s from an attempt (see otlp_attempt). The trace id is the one the attempt's
 * traceparent header carried (core/trace.h: the event's, else one made from its id). */
void otlp_span_from_attempt(struct otlp_span *s, const struct store_claim *c,
			    const struct store_attempt *a, uint64_t span_id, int64_t start_ns,
			    int64_t duration_ns);

/* The ExportTraceServiceRequest of spans[0..n) (borrowed) in protocol p: into *body
 * (malloc'd, returned to the caller) of *len bytes. 0, or -1 when out of memory. */
int otlp_encode_traces(enum otlp_protocol p, const struct otlp_span *spans, size_t n,
		       const char *service_instance, const char *version, char **body,
		       size_t *len);

/* The ExportMetricsServiceRequest of a Prometheus text exposition (core/metrics.h,
 * borrowed) in protocol p, into *body and *len as above. Each family gets its
 * OpenTelemetry name and unit (outboxd_deliveries_total: outboxd.deliveries, {delivery});
 * counters become cumulative monotonic integer sums, gauges gauges, the attempt-duration
 * histogram an explicit-bucket histogram in seconds; labels become attributes.
 * start_ns is when counting began, now_ns the sample time (ns since the epoch). */
int otlp_encode_metrics(enum otlp_protocol p, const char *prometheus_text,
			const char *service_instance, const char *version, int64_t start_ns,
			int64_t now_ns, char **body, size_t *len);

/* What a collector's 2xx answer to an export says it did not take: the partial_success of
 * an ExportTraceServiceResponse (spans 1) or ExportMetricsServiceResponse (spans 0) in
 * body[0..len) (borrowed), encoded as protocol p. The count of rejected spans or data
 * points into *rejected and the collector's error_message into message (msglen bytes,
 * "" when none); both stay 0 and "" for an empty body, a full success, or a body that
 * does not decode (the export was taken). */
void otlp_response_rejected(enum otlp_protocol p, int spans, const char *body, size_t len,
			    int64_t *rejected, char *message, size_t msglen);

/* body (len bytes, an encoded export request) compressed as one gzip member (RFC 1952,
 * what Content-Encoding: gzip means) into *out (malloc'd, *out_len bytes): 0, or -1 when
 * out of memory. */
int otlp_gzip(const void *body, size_t len, char **out, size_t *out_len);

/* The OpenTelemetry name of a Prometheus family of GET /metrics, with its unit into
 * *unit; NULL for a family outboxd does not know (it is then exported under a name made
 * from its own: outboxd_foo_total as outboxd.foo, without a unit). */
const char *otlp_metric_name(const char *prometheus_family, const char **unit);

#endif
