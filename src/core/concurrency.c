/* concurrency.c: the adaptive concurrency limit of one endpoint (see concurrency.h; the
 * reasons for each rule and the simulated receivers it was tuned on are in
 * docs/flow-control.md). Pure: no I/O, no clock, no allocation; it never decides what to
 * send, it only says how many may be open. */
#include "core/concurrency.h"

#include <math.h>
#include <stddef.h>

#define DEFAULT_INITIAL_LIMIT   4
#define DEFAULT_MAX_LIMIT       8192
#define DEFAULT_TOLERANCE       1.5
#define DEFAULT_BUSY_FRACTION   0.5
#define DEFAULT_BACKOFF_TIMEOUT 0.5
#define DEFAULT_BACKOFF_OVERLOAD 0.7
#define DEFAULT_BACKOFF_LATENCY 0.7
#define DEFAULT_SMOOTHING       0.125
#define DEFAULT_RELEARN_ROUNDS  5
#define DEFAULT_QUEUE_ALLOWANCE 4.0
#define DEFAULT_CEILING_HOLD_US (30 * 1000000LL)
/* A round latency below this x the streak's first one (the cuts are working), or above
 * it / this (the receiver changed again): the streak starts over. */
#define LATENCY_MOVED           0.9

enum concurrency_outcome concurrency_classify_status(long status)
{
	if (status == 429 || (status >= 502 && status <= 504))
		return CONCURRENCY_REJECTED;
	return status >= 100 && status <= 599 ? CONCURRENCY_SUCCESS : CONCURRENCY_NEUTRAL;
}

const char *concurrency_outcome_name(enum concurrency_outcome o)
{
	switch (o) {
	case CONCURRENCY_SUCCESS: return "success";
	case CONCURRENCY_TIMEOUT: return "timeout";
	case CONCURRENCY_REFUSED: return "refused";
	case CONCURRENCY_REJECTED: return "rejected";
	case CONCURRENCY_NEUTRAL: return "neutral";
	case CONCURRENCY_NOT_SENT: return "not_sent";
	case CONCURRENCY_STALLED: return "stalled";
	}
	return "unknown";
}

void concurrency_params_default(struct concurrency_params *p)
{
	p->initial_limit = DEFAULT_INITIAL_LIMIT;
	p->min_limit = 1;
	p->max_limit = DEFAULT_MAX_LIMIT;
	p->latency_tolerance = DEFAULT_TOLERANCE;
	p->busy_fraction = DEFAULT_BUSY_FRACTION;
	p->backoff_timeout = DEFAULT_BACKOFF_TIMEOUT;
	p->backoff_overload = DEFAULT_BACKOFF_OVERLOAD;
	p->backoff_latency = DEFAULT_BACKOFF_LATENCY;
	p->latency_smoothing = DEFAULT_SMOOTHING;
	p->relearn_rounds = DEFAULT_RELEARN_ROUNDS;
	p->ceiling_hold_us = DEFAULT_CEILING_HOLD_US;
	p->queue_allowance = DEFAULT_QUEUE_ALLOWANCE;
}

/* A factor strictly inside (0, 1), else fallback (NaN included). */
static double factor_or(double v, double fallback)
{
	return v > 0.0 && v < 1.0 ? v : fallback;
}

static void params_sanitize(struct concurrency_params *p)
{
	if (p->min_limit < 1)
		p->min_limit = 1;
	if (p->max_limit < p->min_limit)
		p->max_limit = p->min_limit;
	if (p->initial_limit < p->min_limit)
		p->initial_limit = p->min_limit;
	if (p->initial_limit > p->max_limit)
		p->initial_limit = p->max_limit;
	if (!(p->latency_tolerance > 1.0) || isinf(p->latency_tolerance))
		p->latency_tolerance = DEFAULT_TOLERANCE;
	if (!(p->busy_fraction >= 0.0 && p->busy_fraction <= 1.0))
		p->busy_fraction = DEFAULT_BUSY_FRACTION;
	p->backoff_timeout = factor_or(p->backoff_timeout, DEFAULT_BACKOFF_TIMEOUT);
	p->backoff_overload = factor_or(p->backoff_overload, DEFAULT_BACKOFF_OVERLOAD);
	p->backoff_latency = factor_or(p->backoff_latency, DEFAULT_BACKOFF_LATENCY);
	if (!(p->latency_smoothing > 0.0 && p->latency_smoothing <= 1.0))
		p->latency_smoothing = DEFAULT_SMOOTHING;
	if (p->relearn_rounds < 1)
		p->relearn_rounds = DEFAULT_RELEARN_ROUNDS;
	if (p->ceiling_hold_us < 0)
		p->ceiling_hold_us = 0;
	if (!(p->queue_allowance >= 0.0) || isinf(p->queue_allowance))
		p->queue_allowance = DEFAULT_QUEUE_ALLOWANCE;
}

/* The limit back within its bounds: the caller's max, the ceiling a timeout left, and
 * min_limit (which wins over the ceiling). */
static void limit_clamp(struct concurrency *c)
{
	if (c->ceiling > 0 && c->limit > c->ceiling)
		c->limit = c->ceiling;
	if (c->limit > c->p.max_limit)
		c->limit = c->p.max_limit;
	if (c->limit < c->p.min_limit)
		c->limit = c->p.min_limit;
}

static void round_clear(struct concurrency *c)
{
	c->round_latency_sum_us = 0;
	c->round_in_flight_sum = 0;
	c->round_samples = 0;
	c->round_busiest = 0;
}

void concurrency_init(struct concurrency *c, const struct concurrency_params *p, int64_t now_us)
{
	struct concurrency_params defaults;

	if (!p) {
		concurrency_params_default(&defaults);
		p = &defaults;
	}
	*c = (struct concurrency){.p = *p};
	params_sanitize(&c->p);
	c->limit = c->p.initial_limit;
	c->slow_start_until = c->p.max_limit;
	c->round_start_us = now_us;
	c->round_limit = c->limit;
	c->last_cut_us = now_us;
}

int concurrency_limit(const struct concurrency *c)
{
	return (int)c->limit;
}

void concurrency_set_max(struct concurrency *c, int max)
{
	c->p.max_limit = max < c->p.min_limit ? c->p.min_limit : max;
	if (c->slow_start_until > c->p.max_limit)
		c->slow_start_until = c->p.max_limit;
	limit_clamp(c);
}

/* A multiplicative cut: the end of slow start, and the start of a new regime whose
 * answers are the only ones the next decision looks at. */
static void limit_cut(struct concurrency *c, int64_t now_us, double factor)
{
	c->cut_from = c->limit;
	c->cut_factor = factor;
	c->limit *= factor;
	limit_clamp(c);
	c->slow_start_until = c->limit;
	c->last_cut_us = now_us;
	c->latency_ref_us = c->latency_min_us;
	c->cuts++;
	c->round_limit = c->limit;
	round_clear(c);
}

/* A timeout, 429/503 or refused connection. One cut per burst: a signal for a request
 * sent before the last cut was caused by the limit that cut already corrected; only when
 * it is stronger than that cut does it deepen it to its own factor (a timeout caught in
 * the burst of a mild latency cut still halves the limit). */
static int latency_inflated(const struct concurrency *c, double latency_us, double in_flight);

/* A timeout while the other answers still come back near the unloaded latency is one
 * request that hung (a receiver's stray slow path), not a queue: a gentle cut and no
 * ceiling, or a receiver with a few percent of such requests would be held at one
 * request at a time. With the latency inflated (or not known yet) it is the strongest
 * sign of a queue. */
#define STRAY_TIMEOUT_FACTOR 0.9

static void signal_overload(struct concurrency *c, int64_t now_us, int64_t sent_us,
			    enum concurrency_outcome outcome, int in_flight)
{
	int queueing = outcome == CONCURRENCY_TIMEOUT &&
		       (c->latency_smooth_us == 0 ||
			latency_inflated(c, (double)c->latency_smooth_us, in_flight));
	double factor = outcome != CONCURRENCY_TIMEOUT ? c->p.backoff_overload
			: queueing ? c->p.backoff_timeout : STRAY_TIMEOUT_FACTOR;
	double before;
	int repeated;

	repeated = c->ceiling > 0 && now_us < c->ceiling_until_us;
	if (sent_us >= c->last_cut_us) {
		before = c->limit;
		limit_cut(c, now_us, factor);
	} else if (factor < c->cut_factor) {
		before = c->cut_from;
		c->cut_factor = factor;
		c->last_cut_us = now_us;
		if (c->limit > before * factor)
			c->limit = before * factor;
		limit_clamp(c);
		c->slow_start_until = c->limit;
		c->round_limit = c->limit;
	} else {
		return;
	}
	if (!queueing)
		return;
	/* The receiver could not answer in time with in_flight requests open: growing back
	 * to that many would time out again, so stay below it for a while (never below the
	 * cut itself, so one timeout under light traffic does not pin the limit to 1). A
	 * timeout while an earlier ceiling holds says that ceiling was still too high: the
	 * cut itself becomes the ceiling. */
	c->ceiling = !repeated && in_flight - 1 > c->limit ? in_flight - 1 : c->limit;
	if (c->ceiling > before)
		c->ceiling = before;
	c->ceiling_until_us = now_us + c->p.ceiling_hold_us;
	/* A latency more times the minimum than requests were open cannot be a queue of
	 * them (each would have to take the whole latency of the last): the receiver itself
	 * became slower. Once it answers fast again, this ceiling says nothing of it
	 * (latency_update lifts it). */
	c->ceiling_latency_us = c->latency_min_us > 0 &&
		c->latency_smooth_us > (int64_t)in_flight * c->latency_min_us
		? c->latency_smooth_us : 0;
}

/* The smoothed latency and its minimum. A minimum well below the one of the last cut or
 * relearn means the receiver became faster: what was learned about it no longer holds,
 * so the ceiling goes and slow start may find the new capacity quickly. */
static void latency_update(struct concurrency *c, int64_t latency_us)
{
	double smooth = c->latency_smooth_us == 0
		? (double)latency_us
		: (double)c->latency_smooth_us +
			  c->p.latency_smoothing * (double)(latency_us - c->latency_smooth_us);

	c->latency_smooth_us = smooth < 1.0 ? 1 : (int64_t)llround(smooth);
	if (c->latency_min_us == 0 || c->latency_smooth_us < c->latency_min_us)
		c->latency_min_us = c->latency_smooth_us;
	/* Answers many times faster than when a receiver grown slower set the ceiling (see
	 * signal_overload): it recovered (a few requests queued at a slow receiver do not
	 * count as inflation, so no relearn marked the change), and the ceiling learned then
	 * says nothing of it now. */
	if (c->ceiling > 0 && c->ceiling_latency_us > 0 &&
	    2.0 * c->p.latency_tolerance * (double)c->latency_smooth_us < (double)c->ceiling_latency_us) {
		c->ceiling = 0;
		c->ceiling_latency_us = 0;
		c->slow_start_until = c->p.max_limit;
	}
	if (c->latency_ref_us > 0 &&
	    (double)c->latency_min_us * c->p.latency_tolerance < (double)c->latency_ref_us) {
		/* The smoothed latency still remembers the slow answers: start it afresh,
		 * or slow start would run on a minimum many times too high. */
		c->latency_smooth_us = latency_us > 0 ? latency_us : 1;
		c->latency_min_us = c->latency_smooth_us;
		c->ceiling = 0;
		c->slow_start_until = c->p.max_limit;
		c->latency_ref_us = 0;
		c->inflated_rounds = 0;
	}
}

/* Inflated: above tolerance x the minimum, by more than INFLATION_SLACK_US, and with more
 * than queue_allowance requests waiting at the receiver by Little's law (in_flight x the
 * share of the latency that is not the unloaded one: Vegas's estimate).
 *   - The slack: against a receiver that answers in microseconds the latency measured is
 *     mostly the sender's own loop (it reads thousands of answers per turn under load); a
 *     millisecond there says nothing of the receiver's queue.
 *   - The allowance: a receiver that works on one request at a time (Python's
 *     http.server under its interpreter lock) answers 4 requests in 4 x its unloaded
 *     latency, yet it needs those few queued to stay busy while the sender turns each
 *     answer into the next request. A few requests waiting is the receiver's own buffer,
 *     not a flood; more is. */
#define INFLATION_SLACK_US 1000
static int latency_inflated(const struct concurrency *c, double latency_us, double in_flight)
{
	if (c->latency_min_us <= 0 || latency_us <= c->p.latency_tolerance * (double)c->latency_min_us ||
	    latency_us <= (double)c->latency_min_us + INFLATION_SLACK_US)
		return 0;
	return in_flight * (1.0 - (double)c->latency_min_us / latency_us) > c->p.queue_allowance;
}

static int in_slow_start(const struct concurrency *c)
{
	return c->limit < c->slow_start_until;
}

/* A round lasts at least as long as a request may stay open before it counts as
 * stalled (up to ROUND_MIN_CAP_US, which slower receivers' round trips exceed anyway):
 * against a receiver that answers in a millisecond, round trips would let the limit
 * double (or grow by its square root) many times before the first stalled request (a
 * connection in a full accept queue, retried by the kernel only a second later) can be
 * seen. */
#define ROUND_MIN_CAP_US 100000
static int round_long_enough(const struct concurrency *c, int64_t now_us)
{
	int64_t min = concurrency_stalled_after(c);
	return now_us - c->round_start_us >= (min < ROUND_MIN_CAP_US ? min : ROUND_MIN_CAP_US);
}

/* The end of a round trip: one decision on what the round's answers showed. */
static void round_end(struct concurrency *c, int64_t now_us, int64_t sent_us)
{
	double mean, in_use = c->p.busy_fraction * c->round_limit;

	c->round_start_us = now_us;
	c->round_limit = c->limit;
	if (c->round_samples == 0)
		return;
	mean = (double)c->round_latency_sum_us / c->round_samples;
	if (!latency_inflated(c, mean, (double)c->round_in_flight_sum / c->round_samples)) {
		c->inflated_rounds = 0;
		if (!in_slow_start(c) && c->round_busiest >= in_use) {
			c->limit += sqrt(c->limit);
			limit_clamp(c);
		}
		round_clear(c);
		return;
	}
	/* A streak of inflated rounds restarts whenever the latency moves: it measures cuts
	 * that leave the latency where it is. */
	if (c->inflated_rounds == 0 || mean < LATENCY_MOVED * (double)c->inflated_first_us ||
	    mean * LATENCY_MOVED > (double)c->inflated_first_us) {
		c->inflated_rounds = 0;
		c->inflated_limit = c->limit;
		c->inflated_first_us = (int64_t)llround(mean);
		c->inflated_low_us = c->inflated_first_us;
	}
	if (mean < (double)c->inflated_low_us)
		c->inflated_low_us = (int64_t)llround(mean);
	c->inflated_rounds++;
	/* Cuts that halved the limit without bringing the latency down (or a limit that cannot
	 * go lower) mean the receiver itself became slower: its new latency is the minimum
	 * from now on, or it would be starved at min_limit forever. Queueing we caused
	 * ourselves falls with the limit, so it never gets here. */
	if ((c->inflated_rounds >= c->p.relearn_rounds && c->limit <= 0.5 * c->inflated_limit) ||
	    c->limit <= c->p.min_limit) {
		c->latency_min_us = c->inflated_low_us;
		c->latency_ref_us = c->latency_min_us;
		c->slow_start_until = c->limit;
		c->inflated_rounds = 0;
		c->relearns++;
		round_clear(c);
		return;
	}
	if (sent_us >= c->last_cut_us) {
		double gradient = c->p.latency_tolerance * (double)c->latency_min_us / mean;

		limit_cut(c, now_us, gradient > c->p.backoff_latency ? gradient : c->p.backoff_latency);
		return;
	}
	round_clear(c);
}

static void signal_success(struct concurrency *c, int64_t now_us, int64_t sent_us,
			   int64_t latency_us, int in_flight)
{
	latency_update(c, latency_us);
	if (c->ceiling > 0 && now_us >= c->ceiling_until_us)
		c->ceiling = 0;
	if (sent_us >= c->last_cut_us) {
		c->round_latency_sum_us += latency_us;
		c->round_in_flight_sum += in_flight;
		c->round_samples++;
		if (in_flight > c->round_busiest)
			c->round_busiest = in_flight;
		/* Slow start: one more per answer that came back near the minimum while the
		 * limit was in use, so a full limit doubles per round trip (at most: a round
		 * lasts long enough to see a stall, see round_long_enough). */
		if (in_slow_start(c) && in_flight >= c->p.busy_fraction * c->round_limit &&
		    c->limit < 2.0 * c->round_limit && !latency_inflated(c, (double)latency_us, in_flight)) {
			c->limit += 1.0;
			limit_clamp(c);
		}
	}
	if (sent_us >= c->round_start_us && round_long_enough(c, now_us))
		round_end(c, now_us, sent_us);
}

/* What a fast receiver's answers vary by without being overloaded: Python's http.server
 * at 8 connections answers in 2.6 ms at the median, 24 ms at the 99th percentile and 210
 * ms at most (wrk --latency on the test machine). */
#define STALL_SLACK_US 50000

int64_t concurrency_stalled_after(const struct concurrency *c)
{
	return c->latency_smooth_us > 0 ? 4 * c->latency_smooth_us + STALL_SLACK_US : 0;
}

int concurrency_record(struct concurrency *c, int64_t now_us, int64_t latency_us,
		       enum concurrency_outcome outcome, int in_flight)
{
	int64_t sent_us;

	if (latency_us < 0)
		latency_us = 0;
	sent_us = now_us - latency_us;
	switch (outcome) {
	case CONCURRENCY_SUCCESS:
		signal_success(c, now_us, sent_us, latency_us, in_flight);
		break;
	case CONCURRENCY_TIMEOUT:
	case CONCURRENCY_REFUSED:
	case CONCURRENCY_REJECTED:
	case CONCURRENCY_STALLED:
		signal_overload(c, now_us, sent_us, outcome, in_flight);
		break;
	case CONCURRENCY_NEUTRAL:
	case CONCURRENCY_NOT_SENT:
		break;
	}
	return concurrency_limit(c);
}
