/* sink.h: where a delivery goes — the family of delivery targets (HTTP, Kafka).
 *
 * The dispatcher (dispatcher.c) owns a delivery's round: claims, the immediate retries,
 * the circuit breaker and limits, the outcome and the result write. A sink owns one
 * transport and nothing else: it makes one attempt of a round and says how it ended. It
 * never decides a retry, never touches the store, and knows no other sink. Members:
 * sink_http.c (libcurl multi, a lean HTTP/1.1 client for plain http://, request
 * building, OAuth2 tokens) and sink_kafka.c
 * (librdkafka producer). A new target is a new member: an `ops` table and an open
 * function, picked by the endpoint's scheme (accepts).
 *
 * Threads: everything but open and close runs on the dispatcher's thread. A sink that
 * waits on I/O exposes one pollable fd (an epoll set of its own, an eventfd); the
 * dispatcher watches it and calls run when it turns ready or when wait_us says so. */
#ifndef OUTBOXD_DELIVER_SINK_H
#define OUTBOXD_DELIVER_SINK_H

#include <stdint.h>

#include "core/model.h"
#include "store/store.h"

#define SINK_MSG_LEN 128     /* an attempt's short message */
#define SINK_CAUSE_LEN 1024  /* an attempt's cause: the first KiB of a body */
#define SINKS_MAX 4          /* members a dispatcher can hold */

/* What a sink sees of one round (the dispatcher's struct round starts with it). The inputs are
 * borrowed for the attempt; a sink writes the outputs before it reports. */
struct sink_round {
	const struct store_claim *claim;  /* in: the delivery and its event */
	const struct subscription *sub;   /* in: where and how to send */
	int attempt_no;                   /* in: 1-based number of this attempt */
	int64_t timeout_ms;               /* in: this attempt's timeout */
	uint64_t *rng;                    /* in: the dispatcher's random state (trace ids) */
	uint64_t span_id;                 /* in: this attempt's span id (its traceparent header
	                                     and its OTLP span, otel/otlp.h) */
	int code;                         /* out: HTTP status, mapped code, 200 on a broker ack */
	char *message;                    /* out: SINK_MSG_LEN bytes, e.g. "HTTP 503" */
	char *cause;                      /* out: SINK_CAUSE_LEN bytes, "" when none; free of
	                                     credentials (the sink redacts) */
	int64_t retry_after_ms;           /* out: a Retry-After the target asked for, -1 none */
	int end_round;                    /* out: 1 = no more immediate tries (the request
	                                     could not even be built) */
	int permanent;                    /* out: 1 = the failure cannot pass by retrying (the
	                                     SSRF guard refused the address): to the DLQ */
	int sent;                         /* out: 1 = the request (or part of it) reached the
	                                     target; 0 = it failed before (refused, connect
	                                     timeout, SSRF): the history says "not sent".
	                                     Preset to 1 */
	int local;                        /* out: 1 = it failed for want of a resource of
	                                     outboxd's own (descriptors, ports, memory): not the
	                                     target's doing, so the try does not count. Preset
	                                     to 0 */
	int64_t latency_us;               /* out: from the start of the transfer (connect
	                                     included) to its end; preset to the time since
	                                     send, which a sink may narrow */
	int flow;                         /* out: enum concurrency_outcome, what the attempt
	                                     says of the target's capacity (core/concurrency.h);
	                                     preset to CONCURRENCY_NEUTRAL */
	void *state[SINKS_MAX];           /* each sink's own per-round state (state[slot]); it
	                                     lives as long as the round slot, across rounds */
};

/* How a sink reports back to the dispatcher (set by sink_attach). */
struct sink_env {
	/* The attempt of j is over; its outputs are set. May be called from inside send. */
	void (*done)(void *ctx, struct sink_round *j);
	/* The attempt of j was stopped undecided (abort at shutdown): hand it back. */
	void (*abandoned)(void *ctx, struct sink_round *j);
	void *ctx;
	int slot;                         /* this sink's index into sink_round.state */
};

struct sink_ops {
	const char *name;
	/* 1 when endpoint is this sink's to deliver to (by its scheme). */
	int (*accepts)(const char *endpoint);
	void (*attach)(void *priv, const struct sink_env *env);
	/* Starts one attempt of j; env->done follows, now or from run. */
	void (*send)(void *priv, struct sink_round *j);
	/* The fd the dispatcher watches (readable = run has work), -1 for none. */
	int (*fd)(void *priv);
	/* Does whatever is ready: I/O, timers, completions (which call env->done). */
	void (*run)(void *priv);
	/* µs until run is due even if fd stays quiet (now_us monotonic), -1 = only the fd. */
	int64_t (*wait_us)(void *priv, int64_t now_us);
	/* Attempts and background work (token requests) still running. */
	int (*busy)(void *priv);
	/* Stops every running attempt: each is reported through env->abandoned. */
	void (*abort)(void *priv);
	/* The round of j is over: drop what belonged to it (its state slot stays). */
	void (*round_end)(void *priv, struct sink_round *j);
	/* The round slot goes away (dispatcher stop): free state[slot]. */
	void (*slot_free)(void *priv, struct sink_round *j);
	/* Drops caches nobody used for a while (now_ms monotonic). */
	void (*prune)(void *priv, int64_t now_ms);
	void (*close)(void *priv);
};

/* An open sink. Made by a member's open function (sink_http_open, sink_kafka_open). */
struct sink {
	const struct sink_ops *ops;
	void *priv;
};

/* The wrappers the dispatcher calls (a NULL slot is a no-op or "none"). */
static inline int sink_accepts(const struct sink *s, const char *endpoint)
{
	return s->ops->accepts(endpoint);
}
static inline void sink_attach(struct sink *s, const struct sink_env *env)
{
	s->ops->attach(s->priv, env);
}
static inline void sink_send(struct sink *s, struct sink_round *j)
{
	s->ops->send(s->priv, j);
}
static inline int sink_fd(struct sink *s)
{
	return s->ops->fd ? s->ops->fd(s->priv) : -1;
}
static inline void sink_run(struct sink *s)
{
	if (s->ops->run)
		s->ops->run(s->priv);
}
static inline int64_t sink_wait_us(struct sink *s, int64_t now_us)
{
	return s->ops->wait_us ? s->ops->wait_us(s->priv, now_us) : -1;
}
static inline int sink_busy(struct sink *s)
{
	return s->ops->busy ? s->ops->busy(s->priv) : 0;
}
static inline void sink_abort(struct sink *s)
{
	if (s->ops->abort)
		s->ops->abort(s->priv);
}
static inline void sink_round_end(struct sink *s, struct sink_round *j)
{
	if (s->ops->round_end)
		s->ops->round_end(s->priv, j);
}
static inline void sink_slot_free(struct sink *s, struct sink_round *j)
{
	if (s->ops->slot_free)
		s->ops->slot_free(s->priv, j);
}
static inline void sink_prune(struct sink *s, int64_t now_ms)
{
	if (s->ops->prune)
		s->ops->prune(s->priv, now_ms);
}
/* Closes s and frees it (NULL is fine). Only after the dispatcher using it stopped. */
void sink_close(struct sink *s);

/* The members. Each returns NULL (with a message in err) when it cannot start. */
struct ssrf_policy;
/* What the HTTP sink is opened with (pointers borrowed: they outlive the sink). */
struct sink_http_settings {
	int max_connections;         /* kept-alive connections at most */
	int lean;                    /* plain http:// deliveries over its own HTTP/1.1 client
	                                (http_wire.c) when they can, else all over libcurl */
	int64_t connect_timeout_ms;  /* how long a connect may take before the attempt's own
	                                timeout (from when its request is written) starts */
	const struct ssrf_policy *ssrf; /* which addresses deliveries and token requests may
	                                   connect to (core/ssrf.h) */
	const char *tls_dir;         /* a subscription's TLS files are used only from inside
	                                it (NULL or "": none is) */
	const char *egress_proxy;    /* http://host:port: every request through its CONNECT
	                                tunnels, over libcurl (NULL or "": connect directly) */
};

/* The HTTP sink; NULL with err filled when it cannot be set up. */
struct sink *sink_http_open(const struct sink_http_settings *set, char *err, size_t errlen);

#endif
