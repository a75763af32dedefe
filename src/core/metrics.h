/* metrics.h: process-wide counters for GET /metrics (Prometheus text exposition).
 *
 * Updates are lock-free atomics, cheap enough for the delivery hot path; per-subscription
 * counters live in a fixed open-addressing table keyed by subscription id. Rendering
 * happens only at scrape time. */
#ifndef OUTBOXD_CORE_METRICS_H
#define OUTBOXD_CORE_METRICS_H

#include <stddef.h>
#include <stdint.h>

enum metrics_outcome {
	METRICS_PROCESSED = 0, /* a 2xx */
	METRICS_RETRYING,      /* failed, a scheduled retry is pending */
	METRICS_DEAD,          /* failed into the dead-letter queue */
	METRICS_RELEASED,      /* handed back undecided (shutdown, disabled subscription) */
	METRICS_DELAYED,       /* a circuit-breaker delay action: re-queued, nothing sent */
	METRICS_OUTCOMES
};

/* A delivery round ended. */
void metrics_delivery(const char *subscription_id, enum metrics_outcome outcome);
/* One HTTP attempt with its code and duration. */
void metrics_attempt(int code, int64_t duration_us);
void metrics_in_flight(long n);
/* The writer's times (store/writer.c), each a histogram of its own. Its store calls, by
 * what they did: how long an ingest group, a claim, a result group or a lease renewal
 * held the writer. An ingest request's time in it: until a group took it (QUEUED), and
 * until its caller had the answer (ANSWERED: the wait, the group's store call and the
 * caller's wake-up), the writer's whole share of an acknowledgement. */
enum metrics_writer_time {
	METRICS_STORE_INGEST,
	METRICS_STORE_CLAIM,
	METRICS_STORE_RESULTS,
	METRICS_STORE_RENEW,
	METRICS_INGEST_QUEUED,
	METRICS_INGEST_ANSWERED,
	METRICS_WRITER_TIMES
};
void metrics_writer_time(enum metrics_writer_time what, int64_t duration_us);
/* The circuit breaker of a subscription in this instance changed: state is 0 closed,
 * 1 open (until open_until_ms, ms since the epoch; it reads as 2 after that), 2 half-open. */
void metrics_circuit(const char *subscription_id, int state, int64_t open_until_ms);
/* The last published state of the subscription's breaker at now_ms (0 closed, 1 open,
 * 2 half-open: an open breaker whose open_until passed), for any number of subscriptions
 * (the per-subscription series of the metrics stop at 1,024). 0 when none was published:
 * the dispatcher has not delivered to it. Any thread: GET /v1/stats reads it. */
int metrics_circuit_state(const char *subscription_id, int64_t now_ms);
/* The ingest's protocol: the label protocol of outboxd_ingested_events_total and
 * outboxd_ingest_rejected_total. */
enum ingest_protocol { INGEST_HTTP = 0, INGEST_GRPC = 1, INGEST_PROTOCOLS };
/* Events accepted by POST /v1/events (INGEST_HTTP) or the gRPC ingest. */
void metrics_ingested(enum ingest_protocol protocol, long events);
/* Rounds started from a claim, and from the ingest hand-off (store/writer.h). */
void metrics_started(long claimed, long handed);
/* Leases of rounds in progress renewed, and found lost (the lease ran out before a
 * renewal reached the store, so the delivery may be another round's now). */
void metrics_leases(long renewed, long lost);
/* An HTTP request sent by the lean client (lean 1, deliver/http_wire.c) or by libcurl. */
void metrics_http_request(int lean);
/* A connect of the lean client made again at once after its SYN went unanswered. */
void metrics_http_reconnect(void);
/* A request of the lean client sent again on a new connection: the kept-alive one it went
 * out on closed before any byte of an answer. */
void metrics_http_resend(void);
/* A TLS handshake of the lean client completed: resumed a session (1) or a full one. */
void metrics_http_tls_handshake(int resumed);
/* An ingest request (or a streamed message) refused with status (4xx or 5xx). */
void metrics_ingest_rejected(enum ingest_protocol protocol, int status);
void metrics_store_error(void);
/* Endpoint health: a subscription disabled after disable_after, one recovered. */
void metrics_subscription_disabled(void);
void metrics_subscription_recovered(void);
/* Operational events (intake/ops_events.c): counts to add, and the totals so far. */
void metrics_ops_events(long stored, long suppressed, long dropped);
void metrics_ops_events_read(long *stored, long *suppressed, long *dropped);
/* Kafka: a message not acknowledged; messages stored by the intake (of which
 * undecodable); the intake paused for its backlog; a partition's lag. */
void metrics_kafka_produce_error(const char *topic);
/* A Kafka client raised a fatal error (librdkafka) and is recreated; client is "producer",
 * "intake" or "dead-letter" (any other name counts as "producer"). */
void metrics_kafka_fatal_error(const char *client);
/* A dead delivery's message acknowledged by its dead-letter topic. */
void metrics_kafka_dead_lettered(void);
void metrics_kafka_consumed(long messages, long undecodable);
void metrics_kafka_paused(int paused);
/* Consumer lag, one round per look at the intake's assignment: metrics_kafka_lag_round,
 * then metrics_kafka_lag for each assigned partition whose lag is known and
 * metrics_kafka_lag_keep for one whose lag could not be read this time (its last value
 * stays), then metrics_kafka_lag_sweep: the partitions the round did not name (revoked:
 * another instance consumes them now) have no lag here any more. */
void metrics_kafka_lag_round(void);
void metrics_kafka_lag(const char *topic, int partition, long long lag);
void metrics_kafka_lag_keep(const char *topic, int partition);
void metrics_kafka_lag_sweep(void);

/* Flow control (deliver/endpoints.h): what one endpoint's adaptive concurrency is now. */
struct metrics_endpoint_view {
	char key[280];               /* "host:port#pathhash" (deliver/endpoints.h) */
	int limit;                   /* requests it may have open at once */
	int in_flight;               /* open now */
	int queued;                  /* deliveries waiting for room */
	int64_t latency_min_us;      /* the lowest smoothed latency seen: its unloaded speed */
	int64_t latency_us;          /* smoothed latency of its recent answers */
	long cuts;                   /* times the limit was cut */
};
void metrics_endpoint(const char *key, int limit, int in_flight, int queued,
		      int64_t latency_min_us, int64_t latency_us, long cuts);
void metrics_endpoint_gone(const char *key);
/* Copies up to max endpoints into out, the busiest (the most requests open and waiting)
 * first, ties by key; returns how many. Any thread. Every endpoint this instance delivers
 * to is kept (the /metrics series show the first 256 by key). */
size_t metrics_endpoints(struct metrics_endpoint_view *out, size_t max);
/* The endpoint with that key into out: 0, or -1 when this instance has none by it. */
int metrics_endpoint_get(const char *key, struct metrics_endpoint_view *out);
/* How many endpoints this instance has. */
size_t metrics_endpoint_count(void);

/* The API refused a request for its credentials: no token, an unknown one, an expired
 * one; or answered 429 because the address is over its failure limit (core/authlimit.h). */
enum metrics_auth_failure {
	METRICS_AUTH_MISSING = 0,
	METRICS_AUTH_INVALID,
	METRICS_AUTH_EXPIRED,
	METRICS_AUTH_LIMITED,
	METRICS_AUTH_FAILURES
};
void metrics_api_auth_failure(enum metrics_auth_failure why);

/* The API protected itself from a request: refused for its declared size (413 before its
 * body), refused because requests in progress hold api_body_memory (503), or its
 * connection closed at api_request_timeout before the request had arrived whole. */
enum metrics_api_refusal {
	METRICS_API_TOO_LARGE = 0,
	METRICS_API_MEMORY,
	METRICS_API_DEADLINE,
	METRICS_API_REFUSALS
};
void metrics_api_refused(enum metrics_api_refusal why);

/* OpenTelemetry export (otel/otlp.h): attempt spans sent to the collector, dropped
 * because the export queue was full, or lost with a failed export request. */
void metrics_otlp_spans(long exported, long dropped, long failed);

/* Appends the counters in Prometheus text format to out (malloc'd, grown as needed);
 * *len is its length. Returns 0 or -1 when out of memory. */
int metrics_render(char **out, size_t *len);

#endif
