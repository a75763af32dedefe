/* limits.h: what the dispatcher keeps per subscription, on its own thread: the circuit
 * breaker and the failing streak (core/outcome.h's struct outcome_sub_state: the breaker
 * says when rounds may start, the outcome core what a round did to both), and the limits
 * (max_in_flight, and rate_limit as a token bucket: when an attempt may go), with the
 * queue of rounds those limits hold back.
 *
 * No locks: only the dispatcher thread touches a table. This file decides nothing about
 * a round's outcome: it keeps the state core/outcome.c returns, logs the breaker's
 * changes and publishes them to the metrics (core/metrics.h), where GET /v1/stats and
 * /metrics read them from other threads. The parked queue is the dispatcher's: this file
 * only keeps its head and counts, it never looks inside a round. */
#ifndef OUTBOXD_DELIVER_LIMITS_H
#define OUTBOXD_DELIVER_LIMITS_H

#include <stdint.h>

#include "core/breaker.h"
#include "core/model.h"
#include "core/outcome.h"
#include "core/ratelimit.h"
#include "core/retry.h"
#include "deliver/endpoints.h"
#include "util/hashchain.h"
#include "util/uuid.h"

struct round; /* the dispatcher's */

struct sub_limits {
	char sub_id[UUID_STR_LEN];
	struct outcome_sub_state state; /* breaker and failing streak: read and returned
	                                   whole by the outcome core (limits_apply) */
	struct token_bucket bucket;
	double bucket_rate;          /* the rate the bucket is set up for, 0 = none yet */
	int in_flight;               /* attempts running (a request, or waiting for a token) */
	int refs;                    /* rounds pointing here */
	struct round *parked_head, *parked_tail; /* held back, in order (the dispatcher's) */
	int parked;
	int on_parked_list;
	int saturated;               /* its queue overflowed at this cap (rounds were handed
	                                back): until it empties, claims wait for room for a
	                                whole claim in it; 0 = not */
	int64_t full_since_us;       /* monotonic: since when it has had less room than a
	                                claim, 0 = it has room */
	uint64_t started;            /* rounds it started from its queue, ever */
	uint64_t started_then;       /* ... at full_since_us */
	int stuck;                   /* it stayed full longer than claims may wait: claims
	                                no longer wait for it (its receiver takes too little
	                                to be worth it), until it empties */
	struct retry_slots requeue_slots; /* its re-queue window's slots (core/retry.h) */
	int published;               /* the breaker's state was published (metrics_circuit) */
	int published_state;         /* ... this state, */
	int64_t published_until;     /* ... open until then */
	int64_t window_ms;           /* the breaker's failure window as last seen */
	int64_t last_used_ms;        /* monotonic */
	struct endpoint *ep;         /* its endpoint's flow control (one ref), NULL: none */
	char *ep_for;                /* the endpoint URL ep was found for */
	struct hc_node link;         /* in the table, by sub_id */
	struct sub_limits *next_parked; /* in the dispatcher's list of queues that wait */
};

struct limits_table {
	struct hc_table subs;        /* struct sub_limits by sub_id; zeroed: empty */
};

/* The state of s, made on first use; NULL when out of memory (the subscription then goes
 * without breaker and limits rather than without deliveries). */
struct sub_limits *limits_get(struct limits_table *t, const struct subscription *s);

/* Drops the state of subscriptions nobody used for an hour (deleted ones, mostly) and
 * with nothing parked or referring; an open breaker is kept for its failure window. */
void limits_prune(struct limits_table *t, int64_t now_mono_ms);

void limits_free_all(struct limits_table *t);

/* May a round of s start? BREAKER_PROBE makes it the half-open probe (*probe = 1, logged
 * with delivery_id). */
enum breaker_admission limits_admit(struct sub_limits *x, const struct subscription *s,
				    const char *delivery_id, int *probe);

/* Keeps what the outcome core decided for a round of s (outcome_decide or
 * outcome_release: o->sub is the state from now on), logs a breaker that opened or
 * closed, and publishes the breaker's state when the round counted. o is borrowed. */
void limits_apply(struct sub_limits *x, const struct subscription *s, const struct outcome *o);

/* The cap on s's requests open at once: max_in_flight, or concurrency when that is
 * lower (a fixed limit instead of the endpoint's adaptive one); 0 = none. */
int limits_cap(const struct subscription *s);

/* x's endpoint state for s (found again when s's endpoint changed), NULL when s has none
 * or pins its concurrency. */
struct endpoint *limits_endpoint(struct sub_limits *x, const struct subscription *s,
				 struct endpoint_table *t, int64_t now_us);

/* Takes what an attempt of s needs now: a place under max_in_flight, then a rate_limit
 * token. 1 when it may go (the place is held until limits_put), 0 when not (nothing
 * taken). */
int limits_take(struct sub_limits *x, const struct subscription *s, int64_t now_us);

/* Gives an attempt's place under max_in_flight back. */
void limits_put(struct sub_limits *x);

/* When an attempt of s held back could go: a wait in µs for a token, or -1 when it waits
 * for a running attempt to end (a completion wakes the dispatcher). */
int64_t limits_wait(struct sub_limits *x, const struct subscription *s, int64_t now_us);

/* How many rounds s may keep parked in a pool of pool_size: enough to keep its limits
 * busy, never more than a quarter of the pool, so other subscriptions find room. With
 * adaptive flow control (ep_limit > 0: its endpoint's current limit) half the pool: the
 * limit may grow many times over within a second, and a queue must hold more than a
 * claim brings (once a queue overflowed, the dispatcher claims only when it has room for
 * a whole claim). */
int limits_parked_cap(int pool_size, const struct subscription *s, int ep_limit);

#endif
