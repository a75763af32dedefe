/* retry.c: how long to wait before the next try, and whether there is one.
 *
 * Pure arithmetic on a struct retry_policy: no clock, no I/O, and the random source for
 * the exponential window comes from the caller. Every product is guarded: policies come
 * from operators and retry counters grow without bound when max_retries is 0, so a large
 * retry_no must saturate, never overflow. */
#include "core/retry.h"

#include <math.h>

/* Seed 004: the immediate round, every stagger included, fits in one minute. */
#define IMMEDIATE_ROUND_CAP_MS 60000

int64_t retry_immediate_delay(const struct retry_policy *p, int next_try)
{
	int64_t d = p->immediate_delay_ms;
	int64_t k, before, spent, remaining;

	if (next_try < 2 || d <= 0)
		return 0;
	k = next_try;
	/* Delays before tries 2..k-1 were d * (1 + 2 + ... + (k-2)). k <= INT_MAX, so the
	 * triangle number fits in int64_t; its product with d may not. */
	before = (k - 2) * (k - 1) / 2;
	if (before > 0 && d > IMMEDIATE_ROUND_CAP_MS / before)
		return 0; /* the round's minute is already used up */
	spent = d * before;
	remaining = IMMEDIATE_ROUND_CAP_MS - spent;
	if (k - 1 > remaining / d)
		return remaining;
	return d * (k - 1);
}

static int64_t mul_saturate(int64_t a, int64_t b)
{
	/* a, b >= 0 */
	if (a != 0 && b > INT64_MAX / a)
		return INT64_MAX;
	return a * b;
}

static int64_t exponential_delay(const struct retry_policy *p, int retry_no,
				 retry_rand_cb rnd, void *rnd_ctx)
{
	int64_t lo = p->min_delay_ms > 0 ? p->min_delay_ms : 0;
	int64_t hi = p->max_delay_ms > lo ? p->max_delay_ms : lo; /* inverted window: lo */
	int64_t upper, value;
	double grown, r, offset;

	/* pow() saturates to +inf for a large exponent, which the comparisons below map to
	 * hi; a NaN factor or a shrinking one (< 1) collapses the window onto lo. */
	grown = (double)lo * pow(p->factor, (double)(retry_no - 1));
	if (isnan(grown) || grown <= (double)lo)
		upper = lo;
	else if (grown >= (double)hi)
		upper = hi;
	else
		upper = (int64_t)grown;
	if (upper > hi)
		upper = hi;

	r = rnd ? rnd(rnd_ctx) : 0.0;
	if (!(r >= 0.0)) /* also NaN */
		r = 0.0;
	if (r >= 1.0)
		r = nextafter(1.0, 0.0);
	/* (upper - lo + 1) integer outcomes, so both ends of [lo, upper] can be drawn. */
	offset = floor(r * ((double)(upper - lo) + 1.0));
	if (offset >= (double)(upper - lo))
		return upper;
	value = lo + (int64_t)offset;
	return value < upper ? value : upper;
}

int64_t retry_scheduled_delay(const struct retry_policy *p, int retry_no,
			      retry_rand_cb rnd, void *rnd_ctx)
{
	int64_t interval = p->interval_ms > 0 ? p->interval_ms : 0;

	if (retry_no < 1)
		retry_no = 1;
	switch (p->policy) {
	case RETRY_LINEAR:
		return mul_saturate(interval, retry_no);
	case RETRY_EXPONENTIAL:
		return exponential_delay(p, retry_no, rnd, rnd_ctx);
	case RETRY_FIXED:
		break;
	}
	return interval;
}

bool retry_may_schedule(const struct retry_policy *p, int retries_done)
{
	/* 0 is the seed's "retry forever"; a negative count is a broken policy and gets no
	 * scheduled retries rather than infinitely many. */
	if (p->max_retries == 0)
		return true;
	if (p->max_retries < 0)
		return false;
	return retries_done < p->max_retries;
}

bool retry_is_success(int code)
{
	return code >= 200 && code <= 299;
}
