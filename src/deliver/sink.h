/* sink.h: where a delivery goes — the family of delivery targets (HTTP, Kafka) and its
 * registry.
 *
 * The dispatcher (dispatcher.c) owns a delivery's round: claims, the immediate retries,
 * the circuit breaker and limits, the outcome and the result write. A sink owns one
 * transport and nothing else: it makes one attempt of a round and says how it ended. It
 * never decides a retry, never touches the store, and knows no other sink.
 *
 * Members: sink_http.c (libcurl multi, a lean HTTP/1.1 client for plain http://, request
 * building, OAuth2 tokens) and sink_kafka.c (librdkafka producer). Each is one `const
 * struct sink_type`: its name, the endpoint schemes it delivers to with what it supports
 * there (SINK_CAN_*, core/sink_caps.h), whether its settings are present, how it opens,
 * and its ops. The registry (sink.c) lists them: serve.c opens every member whose
 * settings are present (sink_set_open), the dispatcher finds an endpoint's member by its
 * scheme (sink_set_find), and a member's declared capabilities must match the
 * subscription rules' copy in core/sink_caps.c (sink_type_check) or nothing starts.
 * Callers never call a member's ops directly: the wrappers below, one contract each.
 *
 * Threads: open, close and the registry's lookups run anywhere; the rest on the
 * dispatcher's thread, except ready (any thread). A sink that waits on I/O exposes one
 * pollable fd (an epoll set of its own, an eventfd); the dispatcher watches it and calls
 * run when it turns ready or when wait_us says so. */
#ifndef OUTBOXD_DELIVER_SINK_H
#define OUTBOXD_DELIVER_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "core/model.h"
#include "core/sink_caps.h"
#include "store/store.h"

#define SINK_MSG_LEN 128     /* an attempt's short message */
#define SINK_CAUSE_LEN 1024  /* an attempt's cause: the first KiB of a body */
#define SINKS_MAX 4          /* members a registry lists, and a dispatcher can hold */
#define SINK_SCHEMES_MAX 4   /* endpoint schemes of one member */

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
	int lost_syns;                    /* out: connects made again because the target's
	                                     accept queue dropped the first (an overload sign
	                                     however the attempt ended); preset to 0 */
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

/* A member's operations on an open sink (priv: what its open returned). Only the
 * wrappers below call them; a NULL slot is a no-op or "none". */
struct sink_methods {
	void (*attach)(void *priv, const struct sink_env *env);
	void (*send)(void *priv, struct sink_round *j);
	int (*fd)(void *priv);
	void (*run)(void *priv);
	int64_t (*wait_us)(void *priv, int64_t now_us);
	int (*busy)(void *priv);
	void (*abort)(void *priv);
	void (*round_end)(void *priv, struct sink_round *j);
	void (*slot_free)(void *priv, struct sink_round *j);
	void (*prune)(void *priv, int64_t now_ms);
	int (*ready)(void *priv, char *why, size_t whylen);
	int (*dead_letter)(void *priv, const struct store_claim *c);
	void (*close)(void *priv);
};

/* One endpoint scheme of a member and what the member supports there. */
struct sink_type_scheme {
	const char *scheme;          /* lowercase, without "://" ("https"); NULL ends the list */
	unsigned supports;           /* SINK_CAN_* (core/sink_caps.h) */
};

struct config;

/* A member of the family, defined once as a const in its sink_NAME.c. */
struct sink_type {
	const char *name;            /* "http", "kafka": log lines and messages */
	struct sink_type_scheme schemes[SINK_SCHEMES_MAX]; /* where it delivers, and what it
	                                supports there */
	/* 1 when cfg has the settings the member needs (Kafka: kafka_brokers); NULL: always. */
	int (*configured)(const struct config *cfg);
	/* Its state from cfg (borrowed: cfg outlives the sink), or NULL with err filled. */
	void *(*open)(const struct config *cfg, char *err, size_t errlen);
	const struct sink_methods *methods;
};

/* An open member (made by sink_open). */
struct sink {
	const struct sink_type *type;
	void *priv;
};

/* ---- the wrappers: one contract each ------------------------------------------------- */

/* Gives s the dispatcher's callbacks and its state slot; before the first send. */
static inline void sink_attach(struct sink *s, const struct sink_env *env)
{
	s->type->methods->attach(s->priv, env);
}
/* Starts one attempt of j; env->done follows, now (from inside send) or from run. */
static inline void sink_send(struct sink *s, struct sink_round *j)
{
	s->type->methods->send(s->priv, j);
}
/* The fd the dispatcher watches (readable = run has work), -1 for none. */
static inline int sink_fd(struct sink *s)
{
	return s->type->methods->fd ? s->type->methods->fd(s->priv) : -1;
}
/* Does whatever is ready: I/O, timers, completions (which call env->done). */
static inline void sink_run(struct sink *s)
{
	if (s->type->methods->run)
		s->type->methods->run(s->priv);
}
/* µs until run is due even if fd stays quiet (now_us monotonic), -1 = only the fd. */
static inline int64_t sink_wait_us(struct sink *s, int64_t now_us)
{
	return s->type->methods->wait_us ? s->type->methods->wait_us(s->priv, now_us) : -1;
}
/* Attempts and background work (token requests) still running. */
static inline int sink_busy(struct sink *s)
{
	return s->type->methods->busy ? s->type->methods->busy(s->priv) : 0;
}
/* Stops every running attempt: each is reported through env->abandoned. */
static inline void sink_abort(struct sink *s)
{
	if (s->type->methods->abort)
		s->type->methods->abort(s->priv);
}
/* The round of j is over: drops what belonged to it (its state slot stays). */
static inline void sink_round_end(struct sink *s, struct sink_round *j)
{
	if (s->type->methods->round_end)
		s->type->methods->round_end(s->priv, j);
}
/* The round slot goes away (dispatcher stop): frees state[slot]. */
static inline void sink_slot_free(struct sink *s, struct sink_round *j)
{
	if (s->type->methods->slot_free)
		s->type->methods->slot_free(s->priv, j);
}
/* Drops caches nobody used for a while (now_ms monotonic). */
static inline void sink_prune(struct sink *s, int64_t now_ms)
{
	if (s->type->methods->prune)
		s->type->methods->prune(s->priv, now_ms);
}
/* 0 when s can deliver; -1 with the reason in why while it cannot (its client is being
 * recreated after a fatal error). Any thread. */
static inline int sink_ready(struct sink *s, char *why, size_t whylen)
{
	return s->type->methods->ready ? s->type->methods->ready(s->priv, why, whylen) : 0;
}
/* 1 when a delivery of c that goes dead is to be published to a dead-letter topic (the
 * mark store_result.dead_letter, written with the result, which the relay of
 * kafka/dead_letter.h publishes): s owns the source c's event came from. */
static inline int sink_dead_letter(struct sink *s, const struct store_claim *c)
{
	return s->type->methods->dead_letter ? s->type->methods->dead_letter(s->priv, c) : 0;
}

/* ---- the registry (sink.c) ------------------------------------------------------------ */

/* The members (each defined in its sink_NAME.c, listed in sink.c's sink_types[]). */
extern const struct sink_type sink_type_http;
extern const struct sink_type sink_type_kafka;

/* The i-th member of the registry (0-based), NULL past the last. */
const struct sink_type *sink_type_at(size_t i);
/* The member called name ("kafka"), NULL when none. */
const struct sink_type *sink_type_by_name(const char *name);
/* The member that delivers to endpoint's scheme (case-insensitive), NULL when none;
 * *supports (may be NULL) gets what it supports there. Opened or not. */
const struct sink_type *sink_type_for(const char *endpoint, unsigned *supports);
/* 0 when t's schemes and capabilities are exactly the subscription rules' rows for its
 * name (core/sink_caps.c), both ways; -1 with the first difference in why. */
int sink_type_check(const struct sink_type *t, char *why, size_t whylen);

/* Opens one member from cfg (borrowed, outlives it). NULL with err filled. */
struct sink *sink_open(const struct sink_type *t, const struct config *cfg, char *err,
		       size_t errlen);
/* Closes s and frees it (NULL is fine). Only after the dispatcher using it stopped. */
void sink_close(struct sink *s);

/* The open members of a daemon: what the dispatcher delivers with (owned by whoever
 * opened it with sink_set_open). */
struct sink_set {
	struct sink *members[SINKS_MAX]; /* in the registry's order */
	int n;
};

/* Opens every member whose settings cfg has (configured), after checking each against
 * the subscription rules (sink_type_check). 0; or -1 with err filled and nothing open. */
int sink_set_open(struct sink_set *set, const struct config *cfg, char *err, size_t errlen);
/* Closes every member (an empty or zeroed set is fine). After the dispatcher stopped. */
void sink_set_close(struct sink_set *set);
/* The open member for endpoint, NULL when none is (kafka:// without kafka_brokers). */
struct sink *sink_set_find(const struct sink_set *set, const char *endpoint);
/* 0 when every open member is ready; -1 with the first one's reason. Any thread. */
int sink_set_ready(const struct sink_set *set, char *why, size_t whylen);
/* 1 when an open member marks a dead delivery of c for its dead-letter topic. */
int sink_set_dead_letter(const struct sink_set *set, const struct store_claim *c);

#endif
