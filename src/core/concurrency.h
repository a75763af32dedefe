/* concurrency.h: the adaptive concurrency limit of one endpoint: how many requests outboxd
 * may have open to it at once, learned from how it answers (docs/flow-control.md).
 *
 * Pure: no I/O, no clock reads, no allocation. The caller passes the time in (monotonic
 * microseconds), keeps one struct per endpoint, and reports every finished attempt with
 * concurrency_record; the answer is the limit to use from now on. Not thread-safe: one
 * owner (the dispatcher's thread) calls it.
 *
 * The rules, in short (the why of each is in docs/flow-control.md):
 *   - slow start: from initial_limit, +1 per successful answer while the limit was in use,
 *     so the limit doubles per round trip, until the first congestion signal;
 *   - afterwards, once per round trip: + sqrt(limit) when the round's latency stayed near
 *     the observed minimum and the limit was in use; a multiplicative cut, proportional to
 *     the inflation, when the latency rose above latency_tolerance x the minimum;
 *   - a request that stalls (concurrency_stalled_after) is an overload signal at once:
 *     signals that wait for the request's end (a SYN retransmitted after a second) come
 *     too late for a limit that doubles every millisecond;
 *   - overload signals cut at once: a timeout of a request the receiver had (the strongest:
 *     x backoff_timeout, and growth stays below the in-flight count it happened at for
 *     ceiling_hold_us), a 429/503 or a refused/reset connection (x backoff_overload); a
 *     burst of signals for requests sent before the last cut counts once, at the depth
 *     of its strongest signal;
 *   - the minimum latency falls with every lower reading and is learned again when
 *     relearn_rounds rounds in a row stayed inflated while the cuts halved the limit and
 *     the latency did not fall (the receiver became slower, not more loaded);
 *   - the limit stays within [min_limit, max_limit].
 */
#ifndef OUTBOXD_CORE_CONCURRENCY_H
#define OUTBOXD_CORE_CONCURRENCY_H

#include <stdint.h>

/* What a finished attempt says about the endpoint's capacity. */
enum concurrency_outcome {
	CONCURRENCY_SUCCESS = 0,  /* an answer that is no sign of overload (2xx, 3xx, 4xx but
				   * 429, 500, 501): the receiver did the work, a latency
				   * sample */
	CONCURRENCY_TIMEOUT,      /* no answer within the timeout after the request was sent */
	CONCURRENCY_REFUSED,      /* connection refused or reset by the receiver */
	CONCURRENCY_REJECTED,     /* 429, 503, or a gateway's 502/504: overloaded (the
				   * receiver, or what stands behind its proxy) */
	CONCURRENCY_NEUTRAL,      /* says nothing either way (a transport error of another
				   * kind, an attempt that was not an HTTP request) */
	CONCURRENCY_NOT_SENT,     /* failed before a byte reached the receiver: ignored */
	CONCURRENCY_STALLED,      /* not an answer: a request still open long after answers
				   * to later ones came back (a connection waiting in a full
				   * accept queue, a request queued behind busy workers); an
				   * overload signal as soon as it is seen, not when it ends */
};

/* The class of an HTTP answer: 429, 502, 503 and 504 rejected, any other a success (a
 * quick 500 or 404 is as much a sign of capacity as a 200: the receiver answered). */
enum concurrency_outcome concurrency_classify_status(long status);

/* "success", "timeout", "refused", "rejected", "neutral", "not_sent", "stalled". */
const char *concurrency_outcome_name(enum concurrency_outcome o);

/* Settings; concurrency_params_default gives the documented defaults. */
struct concurrency_params {
	int initial_limit;         /* 4: where a new endpoint starts */
	int min_limit;             /* 1: never below */
	int max_limit;             /* 8192: never above (the caller's max_in_flight) */
	double latency_tolerance;  /* 1.5: a round's latency up to this x the minimum is
				    * "near the minimum"; above it the receiver is queueing */
	double busy_fraction;      /* 0.5: the limit grows only from attempts that started with
				    * at least this fraction of it in flight */
	double backoff_timeout;    /* 0.5: the cut for a timeout after the request was sent */
	double backoff_overload;   /* 0.7: the cut for 429, 503, refused or reset */
	double backoff_latency;    /* 0.7: the deepest cut for latency inflation (a milder
				    * inflation cuts less: x tolerance * minimum / latency) */
	double latency_smoothing;  /* 0.125: weight of a new sample in the smoothed latency
				    * the minimum is taken from */
	int relearn_rounds;        /* 5: inflated rounds in a row, with the limit halved and
				    * the latency not falling, before the minimum is learned
				    * again */
	int64_t ceiling_hold_us;   /* 30 s: how long growth stays below the in-flight count a
				    * timeout happened at */
	double queue_allowance;    /* 4: requests that may wait at the receiver (in flight x
				    * the inflated share of the latency) before a latency
				    * above tolerance counts as inflation */
};

void concurrency_params_default(struct concurrency_params *p);

/* One endpoint's state. Read the fields for stats; change them only through the calls. */
struct concurrency {
	struct concurrency_params p;
	double limit;              /* the current limit (concurrency_limit rounds it down) */
	double slow_start_until;   /* slow start while limit < this (max_limit until the first
				    * congestion signal) */
	int64_t latency_min_us;    /* lowest smoothed latency seen (0 = none yet) */
	int64_t latency_smooth_us; /* smoothed latency of successful answers (0 = none yet) */
	int64_t latency_ref_us;    /* the minimum when it was last learned again or a ceiling
				    * was set; a minimum well below it means a faster receiver */
	int64_t last_cut_us;       /* when the limit was last cut (signals for requests sent
				    * before it are part of that burst) */
	double cut_from;           /* the limit before that cut */
	double cut_factor;         /* and its depth: a stronger signal of the same burst
				    * deepens it to its own factor, once */
	double ceiling;            /* after a timeout: the limit stays at or below this (the
				    * in-flight count it happened at, less one, or the limit
				    * after the cut if higher) until ceiling_until_us; 0 = none */
	int64_t ceiling_until_us;
	int64_t ceiling_latency_us; /* the smoothed latency when the ceiling was set, if it
				     * was more times the minimum than requests were open
				     * (the receiver itself slower, not queueing), else 0 */
	/* the round trip under way: it ends when an answer to a request sent after
	 * round_start_us arrives; its figures count only requests sent since the last cut */
	int64_t round_start_us;
	double round_limit;        /* the limit when the round began: the answers of a round
				    * were sent with at most this much allowed, so "in use" is
				    * judged against it */
	int64_t round_latency_sum_us;
	int64_t round_in_flight_sum;
	int round_samples;
	int round_busiest;         /* most in flight at the start of one of its attempts */
	/* rounds in a row whose latency was inflated and stayed where it was; the streak
	 * restarts whenever a round's latency moves more than 10% from its first one's */
	int inflated_rounds;
	double inflated_limit;     /* the limit at the streak's first round */
	int64_t inflated_first_us; /* that round's latency */
	int64_t inflated_low_us;   /* the lowest round latency of the streak */
	/* counters, for stats and tests */
	uint64_t cuts;             /* times the limit was cut */
	uint64_t relearns;         /* times the minimum was learned again */
};

/* A new endpoint at initial_limit. p (copied) may be NULL for the defaults; out-of-range
 * settings are brought into range (min_limit >= 1, max_limit >= min_limit, factors in
 * (0, 1), tolerance > 1). */
void concurrency_init(struct concurrency *c, const struct concurrency_params *p, int64_t now_us);

/* Reports one finished attempt and returns the limit from now on.
 *   now_us      when it finished
 *   latency_us  from the start of its transfer (connect included) to its answer (for
 *               a timeout: to the moment it was given up); now_us - latency_us is when
 *               it was sent
 *   outcome     its class; CONCURRENCY_NOT_SENT and CONCURRENCY_NEUTRAL change nothing
 *   in_flight   requests open to the endpoint when it started, itself included */
int concurrency_record(struct concurrency *c, int64_t now_us, int64_t latency_us,
		       enum concurrency_outcome outcome, int in_flight);

/* How long a request may stay open before it counts as stalled: 4 x the smoothed latency
 * and 50 ms more (the tail of a fast receiver's answers), 0 while no latency is known. */
int64_t concurrency_stalled_after(const struct concurrency *c);

/* The current limit, in [min_limit, max_limit]. */
int concurrency_limit(const struct concurrency *c);

/* A new cap (the subscription's max_in_flight or the instance's changed): the limit is
 * cut to it at once when above. max < min_limit is taken as min_limit. */
void concurrency_set_max(struct concurrency *c, int max);

#endif
