/* outcome.h: everything one attempt, one refused round or one handed-back round makes of
 * a delivery and of its subscription (the retry layers, the dead-letter queue, the
 * circuit breaker, endpoint health: docs/retries.md).
 *
 * One pure function, outcome_decide(): no clock, no I/O, no allocation; the time, the
 * random source and the subscription's breaker and health state come in, so
 * tests/unit/core/test_outcome.c can walk every rule as a table. Every path that ends an
 * attempt calls it: the dispatcher after each attempt in any sink (HTTP, Kafka), after an
 * attempt that failed before a sink (deleted subscription, no sink for the endpoint), for
 * a round its breaker refused, and for operator replays (manual rounds) alike. A round
 * handed back undecided (shutdown, a lost lease, a disabled subscription, a full queue)
 * gets its outcome from outcome_release(). The dispatcher only applies the answer: the
 * result it writes, the state it keeps, the logs, metrics and operational events.
 *
 * The rules for the delivery, in order:
 *   refused by an open breaker  -> DELAY at now + a random wait in the policy's
 *                                  [min_delay, max_delay] (a delay action), or DLQ
 *                                  (CIRCUIT_OPEN) once max_delay_actions were taken
 *   2xx                         -> DONE (PROCESSED)
 *   a failure the sink calls permanent (the SSRF guard) -> DLQ (PERMANENT)
 *   another try left in the round (immediate/manual rounds, not a half-open probe, which
 *   is one request; not a permanent code, no Retry-After longer than the stagger, the
 *   sink did not end the round)
 *                               -> TRY at now + the stagger
 *   permanent code              -> DLQ (PERMANENT)
 *   manual round                -> DLQ (MANUAL): a replay is one round, no schedule
 *   scheduled retries exhausted -> DLQ (EXHAUSTED); max_retries 0 never exhausts
 *   otherwise                   -> RETRY at now + the policy's delay, postponed (never
 *                                  brought forward) by a 429/503 Retry-After up to
 *                                  retry_after_max, capped at 10 years
 *   a final result (DONE, DLQ) of a key-ordered delivery releases its key: the next
 *   delivery of the key may go now. Whether the key orders with "block" or "skip" does
 *   not change the decision: the store's claim rule holds a dead delivery's key or
 *   passes it over.
 *
 * The rules for the subscription (only with in->tracked; a round that goes on, TRY, and a
 * refused round change nothing): a round that ended with attempts counts once
 *   - for its breaker (core/breaker.h, on a copy): max_errors failed rounds in a
 *     failure_window open a closed breaker (OPENED); the probe's failure opens it again
 *     (REOPENED), its success closes it (CLOSED); other rounds of an open breaker count
 *     nothing;
 *   - for its endpoint health: a failure starts the failing streak (failing_since); once
 *     every attempt failed for disable_after, the subscription is to be disabled, once
 *     per streak; a success ends the streak, and is a recovery when the streak lasted a
 *     failure_window at least.
 *   A probe handed back (outcome_release) is abandoned: the next round asking probes. */
#ifndef OUTBOXD_CORE_OUTCOME_H
#define OUTBOXD_CORE_OUTCOME_H

#include <stdbool.h>
#include <stdint.h>

#include "core/breaker.h"
#include "core/model.h"
#include "core/retry.h"

/* A scheduled retry is never set further out than this (10 years). */
#define OUTCOME_DELAY_MAX_MS (3650LL * 86400 * 1000)

/* last_error of a delivery the breaker refused (a delay action, or the DLQ after them). */
#define OUTCOME_CIRCUIT_OPEN_CODE 503
#define OUTCOME_CIRCUIT_OPEN_MESSAGE "circuit_open"

enum outcome_next {
	OUTCOME_TRY = 0,       /* the round goes on: the next try at at_ms */
	OUTCOME_DONE,          /* PROCESSED */
	OUTCOME_RETRY,         /* FAILED, a scheduled retry at at_ms */
	OUTCOME_DELAY,         /* breaker open: nothing sent, due again at at_ms */
	OUTCOME_DLQ,           /* FAILED with no next attempt: the dead-letter queue */
	OUTCOME_RELEASE,       /* handed back undecided, status and counts as they were: due
	                          again at at_ms (outcome_release) */
};

/* Why a delivery went to the dead-letter queue. */
enum outcome_why {
	OUTCOME_WHY_NONE = 0,
	OUTCOME_WHY_PERMANENT,    /* the code is one of the policy's permanent codes */
	OUTCOME_WHY_MANUAL,       /* an operator's replay failed (one round, no schedule) */
	OUTCOME_WHY_EXHAUSTED,    /* max_retries scheduled retries were made */
	OUTCOME_WHY_CIRCUIT_OPEN, /* max_delay_actions delay actions were taken */
};

/* What the round did to its subscription's breaker. */
enum outcome_breaker {
	OUTCOME_BREAKER_SAME = 0, /* no transition (a failure counted, or nothing counted) */
	OUTCOME_BREAKER_OPENED,   /* closed -> open: max_errors failed rounds in a window */
	OUTCOME_BREAKER_REOPENED, /* half-open -> open: the probe failed */
	OUTCOME_BREAKER_CLOSED,   /* half-open -> closed: the probe succeeded */
	OUTCOME_BREAKER_PROBE_ABANDONED, /* the probe was handed back undecided: the next
	                                    round asking is the probe */
};

/* Why the subscription is to be disabled. */
enum outcome_disable_why {
	OUTCOME_DISABLE_NONE = 0,
	OUTCOME_DISABLE_FAILING,  /* every attempt failed for disable_after */
};

/* What the dispatcher keeps per subscription (per instance) that a decision reads and
 * changes: a plain value, copied in and handed back whole. */
struct outcome_sub_state {
	struct breaker breaker;    /* the circuit breaker (core/breaker.h) */
	int64_t failing_since_ms;  /* wall clock: the first failure since the last success, 0
	                              while it succeeds (disable_after) */
	bool disable_asked;        /* the subscription was to be disabled in this streak */
};

/* What is known when the decision is made. */
struct outcome_in {
	/* the round */
	enum attempt_kind kind;  /* immediate, scheduled or manual */
	bool refused;            /* the breaker refused the round (BREAKER_DELAY): no attempt */
	int tries;               /* attempts made in this round, the last one included */
	int max_tries;           /* the round's limit (1 for scheduled rounds) */
	int code;                /* the last attempt's status or mapped code */
	int64_t retry_after_ms;  /* that attempt's Retry-After as a delay, -1 = none */
	bool end_round;          /* the sink ended the round: no further try in it */
	bool permanent;          /* the sink says the failure is permanent whatever the code
	                            (the SSRF guard refused the address) */
	int64_t round_started_ms; /* wall clock: when its first try began, 0 = unknown */
	int64_t try_max_ms;      /* the most a further try of it may take (its connect and its
	                            timeout), 0 = unknown: with round_started_ms, a try that
	                            could end past the round's minute is not made */
	/* the delivery */
	int retry_count;         /* scheduled retries made before this round */
	int delay_actions;       /* delay actions taken before this decision */
	bool key_ordered;        /* it has a partition_key and its subscription orders by key
	                            (either mode) */
	/* its subscription */
	bool tracked;            /* the dispatcher keeps state for it (not when out of memory,
	                            nor for a deleted subscription): sub, probe and the
	                            disable_after fields are read only then */
	struct outcome_sub_state sub; /* as it is now */
	bool probe;              /* this round is the half-open breaker's probe */
	int64_t disable_after_ms; /* the subscription's: 0 = never, -1 = the default */
	int64_t disable_after_default_ms; /* the setting disable_after (0 = never) */
	int64_t now_ms;          /* wall clock */
};

struct outcome {
	/* the delivery */
	enum outcome_next next;
	enum outcome_why why;    /* OUTCOME_DLQ only */
	int64_t at_ms;           /* TRY, RETRY, DELAY, RELEASE: when (now_ms + delay_ms); else 0 */
	int64_t delay_ms;        /* TRY, RETRY, DELAY, RELEASE: the wait; else 0 */
	int retry_count;         /* scheduled retries made, this round included */
	int delay_actions;       /* delay actions taken, this decision included */
	bool release_key;        /* a final result of a key-ordered delivery: the next one of
	                            its key may go now */
	/* its subscription (all false/SAME and sub == in->sub unless in->tracked) */
	bool counted;            /* the round counted for the breaker and health */
	struct outcome_sub_state sub; /* the state to keep from now on */
	enum outcome_breaker breaker; /* the transition, if any */
	struct {
		bool now;                  /* disable the subscription */
		enum outcome_disable_why why;
		int64_t after_ms;          /* its disable_after, resolved */
		int64_t failing_since_ms;  /* the streak's first failure */
	} disable;
	struct {
		bool now;                  /* it recovered: a success ended a streak that lasted
		                              a failure_window at least */
		int64_t failing_since_ms;  /* the streak's first failure */
		int64_t failing_ms;        /* how long the streak lasted */
	} recovery;
};

/* Decides the delivery's next state and what the round does to its subscription. p,
 * breaker and in are borrowed; rnd draws the random part of a delay (retry_rand_cb: a
 * value in [0, 1)). Always fills *out. */
void outcome_decide(const struct retry_policy *p, const struct circuit_breaker_config *breaker,
		    const struct outcome_in *in, retry_rand_cb rnd, void *rnd_ctx,
		    struct outcome *out);

/* The round is handed back undecided: OUTCOME_RELEASE at in->now_ms + delay_ms, the
 * delivery's counts unchanged, a probe abandoned (in->probe). Always fills *out. */
void outcome_release(const struct outcome_in *in, int64_t delay_ms, struct outcome *out);

/* "try", "processed", "retry", "delay", "dead", "released" (logs and tests). */
const char *outcome_next_name(enum outcome_next next);

/* "permanent", "manual", "exhausted", "circuit_open", or "" for NONE. */
const char *outcome_why_name(enum outcome_why why);

/* "same", "opened", "reopened", "closed", "probe_abandoned" (logs and tests). */
const char *outcome_breaker_name(enum outcome_breaker b);

#endif
