/* outcome.h: what one attempt, or one refused round, makes of a delivery (the retry
 * layers, the circuit breaker's delay actions, the dead-letter queue: docs/retries.md).
 *
 * One pure function, outcome_decide(): no clock, no I/O, no allocation; the time and the
 * random source come in, so tests/unit/core/test_outcome.c can walk every rule as a table.
 * Every path that ends an attempt calls it: the dispatcher after each attempt in any sink
 * (HTTP, Kafka), after an attempt that failed before a sink (deleted subscription, no sink
 * for the endpoint), for a round its breaker refused, and for operator replays (manual
 * rounds) alike. What the dispatcher adds is bookkeeping: counts, messages, store writes.
 *
 * The rules, in order:
 *   refused by an open breaker  -> DELAYED at now + a random wait in the policy's
 *                                  [min_delay, max_delay] (a delay action), or DEAD
 *                                  (CIRCUIT_OPEN) once max_delay_actions were taken
 *   2xx                         -> PROCESSED
 *   a failure the sink calls permanent (the SSRF guard) -> DEAD (PERMANENT)
 *   another try left in the round (immediate/manual rounds, not a permanent code, no
 *   Retry-After longer than the stagger, the sink did not end the round)
 *                               -> TRY at now + the stagger
 *   permanent code              -> DEAD (PERMANENT)
 *   manual round                -> DEAD (MANUAL): a replay is one round, no schedule
 *   scheduled retries exhausted -> DEAD (EXHAUSTED); max_retries 0 never exhausts
 *   otherwise                   -> RETRY at now + the policy's delay, postponed (never
 *                                  brought forward) by a 429/503 Retry-After up to
 *                                  retry_after_max, capped at 10 years */
#ifndef OUTBOXD_CORE_OUTCOME_H
#define OUTBOXD_CORE_OUTCOME_H

#include <stdbool.h>
#include <stdint.h>

#include "core/model.h"
#include "core/retry.h"

/* A scheduled retry is never set further out than this (10 years). */
#define OUTCOME_DELAY_MAX_MS (3650LL * 86400 * 1000)

/* last_error of a delivery the breaker dead-lettered after its delay actions. */
#define OUTCOME_CIRCUIT_OPEN_CODE 503
#define OUTCOME_CIRCUIT_OPEN_MESSAGE "circuit_open"

enum outcome_next {
	OUTCOME_TRY = 0,       /* the round goes on: the next try at at_ms */
	OUTCOME_DONE,          /* PROCESSED */
	OUTCOME_RETRY,         /* FAILED, a scheduled retry at at_ms */
	OUTCOME_DELAY,         /* breaker open: nothing sent, due again at at_ms */
	OUTCOME_DLQ,           /* FAILED with no next attempt: the dead-letter queue */
};

/* Why a delivery went to the dead-letter queue. */
enum outcome_why {
	OUTCOME_WHY_NONE = 0,
	OUTCOME_WHY_PERMANENT,    /* the code is one of the policy's permanent codes */
	OUTCOME_WHY_MANUAL,       /* an operator's replay failed (one round, no schedule) */
	OUTCOME_WHY_EXHAUSTED,    /* max_retries scheduled retries were made */
	OUTCOME_WHY_CIRCUIT_OPEN, /* max_delay_actions delay actions were taken */
};

/* What is known when the decision is made. */
struct outcome_in {
	enum attempt_kind kind;  /* the round: immediate, scheduled or manual */
	bool refused;            /* the breaker refused the round (BREAKER_DELAY): no attempt */
	int tries;               /* attempts made in this round, the last one included */
	int max_tries;           /* the round's limit (1 for scheduled rounds and probes) */
	int code;                /* the last attempt's status or mapped code */
	int64_t retry_after_ms;  /* that attempt's Retry-After as a delay, -1 = none */
	bool end_round;          /* the sink ended the round: no further try in it */
	bool permanent;          /* the sink says the failure is permanent whatever the code
	                            (the SSRF guard refused the address) */
	int retry_count;         /* scheduled retries made before this round */
	int delay_actions;       /* delay actions taken before this decision */
	int64_t now_ms;          /* wall clock */
};

struct outcome {
	enum outcome_next next;
	enum outcome_why why;    /* OUTCOME_DLQ only */
	int64_t at_ms;           /* TRY, RETRY, DELAY: when (now_ms + delay_ms); else 0 */
	int64_t delay_ms;        /* TRY, RETRY, DELAY: the wait; else 0 */
	int retry_count;         /* scheduled retries made, this round included */
	int delay_actions;       /* delay actions taken, this decision included */
};

/* Decides the delivery's next state. p and breaker are borrowed; rnd draws the random
 * part of a delay (retry_rand_cb: a value in [0, 1)). Always fills *out. */
void outcome_decide(const struct retry_policy *p, const struct circuit_breaker_config *breaker,
		    const struct outcome_in *in, retry_rand_cb rnd, void *rnd_ctx,
		    struct outcome *out);

/* "try", "processed", "retry", "delay", "dead" (logs and tests). */
const char *outcome_next_name(enum outcome_next next);

/* "permanent", "manual", "exhausted", "circuit_open", or "" for NONE. */
const char *outcome_why_name(enum outcome_why why);

#endif
