/* test_retry.c: retry delays and limits (core/retry.c): exact values for each policy,
 * the 60 s cap on the immediate round, saturation for huge retry numbers, jitter,
 * permanent codes, Retry-After parsing and clamping, and property loops with a
 * deterministic random source (delays within bounds, attempts never above the maximum,
 * nothing after a permanent code). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>
#include <string.h>

#include "core/retry.h"

/* Random source that returns a fixed value. */
static double rand_fixed_cb(void *ctx)
{
	return *(const double *)ctx;
}

/* xorshift64*, mapped to [0, 1) with 53 bits. */
static double rand_xorshift_cb(void *ctx)
{
	uint64_t *s = ctx;

	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return (double)((*s * 0x2545f4914f6cdd1dULL) >> 11) * 0x1.0p-53;
}

static struct retry_policy exponential_policy(void)
{
	struct retry_policy p;

	retry_policy_defaults(&p);
	p.policy = RETRY_EXPONENTIAL;
	p.min_delay_ms = 10000;
	p.max_delay_ms = 60000;
	p.factor = 2.0;
	return p;
}

static void test_defaults(void **state)
{
	struct retry_policy p;

	retry_policy_defaults(&p);
	assert_int_equal(p.immediate, 4);
	assert_int_equal(p.policy, RETRY_FIXED);
	assert_int_equal(p.interval_ms, 3000);
	assert_int_equal(p.max_retries, 3);
}

static void test_immediate_linear_stagger(void **state)
{
	struct retry_policy p;

	retry_policy_defaults(&p); /* 100 ms stagger */
	assert_int_equal(retry_immediate_delay(&p, 0), 0);
	assert_int_equal(retry_immediate_delay(&p, 1), 0);
	assert_int_equal(retry_immediate_delay(&p, 2), 100);
	assert_int_equal(retry_immediate_delay(&p, 3), 200);
	assert_int_equal(retry_immediate_delay(&p, 4), 300);
	p.immediate_delay_ms = 0;
	assert_int_equal(retry_immediate_delay(&p, 3), 0);
	p.immediate_delay_ms = -5;
	assert_int_equal(retry_immediate_delay(&p, 3), 0);
}

static void test_immediate_round_cap(void **state)
{
	struct retry_policy p;

	retry_policy_defaults(&p);
	p.immediate_delay_ms = 20000; /* 20 + 40 = 60 s: exactly the cap */
	assert_int_equal(retry_immediate_delay(&p, 2), 20000);
	assert_int_equal(retry_immediate_delay(&p, 3), 40000);
	assert_int_equal(retry_immediate_delay(&p, 4), 0);

	p.immediate_delay_ms = 25000; /* 25 + 50 would be 75 s: the second is cut to 35 */
	assert_int_equal(retry_immediate_delay(&p, 2), 25000);
	assert_int_equal(retry_immediate_delay(&p, 3), 35000);
	assert_int_equal(retry_immediate_delay(&p, 4), 0);

	p.immediate_delay_ms = 120000;
	assert_int_equal(retry_immediate_delay(&p, 2), 60000);
	assert_int_equal(retry_immediate_delay(&p, 3), 0);

	p.immediate_delay_ms = INT64_MAX;
	assert_int_equal(retry_immediate_delay(&p, 2), 60000);
	assert_int_equal(retry_immediate_delay(&p, INT_MAX), 0);

	p.immediate_delay_ms = 1; /* triangle number near 2^61: must not overflow */
	assert_int_equal(retry_immediate_delay(&p, INT_MAX), 0);
}

/* Property: for any stagger and round size, the delays of a round sum to <= 60 s and
 * each is the uncapped value until the cap is reached. */
static void test_immediate_round_sum_property(void **state)
{
	static const int64_t staggers[] = {1, 7, 100, 999, 1000, 4321, 10000, 29999, 60000,
					   60001, 1000000};

	for (size_t i = 0; i < sizeof(staggers) / sizeof(staggers[0]); i++) {
		struct retry_policy p;
		int64_t sum = 0;

		retry_policy_defaults(&p);
		p.immediate_delay_ms = staggers[i];
		for (int k = 2; k <= 500; k++) {
			int64_t d = retry_immediate_delay(&p, k);
			int64_t uncapped = staggers[i] * (k - 1);

			assert_true(d >= 0);
			if (sum + uncapped <= 60000)
				assert_int_equal(d, uncapped);
			else
				assert_int_equal(d, 60000 - sum);
			sum += d;
			assert_true(sum <= 60000);
		}
	}
}

static void test_fixed(void **state)
{
	struct retry_policy p;

	retry_policy_defaults(&p);
	assert_int_equal(retry_scheduled_delay(&p, 1, NULL, NULL), 3000);
	assert_int_equal(retry_scheduled_delay(&p, 2, NULL, NULL), 3000);
	assert_int_equal(retry_scheduled_delay(&p, INT_MAX, NULL, NULL), 3000);
	p.interval_ms = 500;
	assert_int_equal(retry_scheduled_delay(&p, 7, NULL, NULL), 500);
}

static void test_linear(void **state)
{
	struct retry_policy p;

	retry_policy_defaults(&p);
	p.policy = RETRY_LINEAR;
	assert_int_equal(retry_scheduled_delay(&p, 1, NULL, NULL), 3000);
	assert_int_equal(retry_scheduled_delay(&p, 2, NULL, NULL), 6000);
	assert_int_equal(retry_scheduled_delay(&p, 10, NULL, NULL), 30000);
	assert_int_equal(retry_scheduled_delay(&p, 0, NULL, NULL), 3000); /* treated as 1 */
	/* grows up to max_delay (60 s by default), then stays there */
	assert_int_equal(retry_scheduled_delay(&p, 20, NULL, NULL), 60000);
	assert_int_equal(retry_scheduled_delay(&p, 21, NULL, NULL), 60000);
	assert_int_equal(retry_scheduled_delay(&p, INT_MAX, NULL, NULL), 60000);
	p.max_delay_ms = INT64_MAX; /* no practical cap: the product must not overflow */
	assert_int_equal(retry_scheduled_delay(&p, INT_MAX, NULL, NULL), (int64_t)3000 * INT_MAX);
	p.interval_ms = INT64_MAX / 2;
	assert_true(retry_scheduled_delay(&p, 3, NULL, NULL) == INT64_MAX); /* saturates */
	/* a max_delay below one interval caps nothing: the first step is one interval */
	p.interval_ms = 120000;
	p.max_delay_ms = 60000;
	assert_int_equal(retry_scheduled_delay(&p, 1, NULL, NULL), 120000);
	assert_int_equal(retry_scheduled_delay(&p, 5, NULL, NULL), 120000);
}

static void test_exponential_exact(void **state)
{
	struct retry_policy p = exponential_policy();
	double r;

	/* retry 1: the window is [10 s, 20 s], 10001 integer outcomes: never one instant */
	r = 0.0;
	assert_int_equal(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r), 10000);
	r = 0.5;
	assert_int_equal(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r), 15000);
	r = 0.99;
	assert_int_equal(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r), 19900);
	r = nextafter(1.0, 0.0);
	assert_int_equal(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r), 20000);

	/* retry 2: [10 s, 40 s] */
	r = 0.5;
	assert_int_equal(retry_scheduled_delay(&p, 2, rand_fixed_cb, &r), 25000);
	r = nextafter(1.0, 0.0);
	assert_int_equal(retry_scheduled_delay(&p, 2, rand_fixed_cb, &r), 40000);

	/* retry 3 and later: [10 s, 60 s], capped at max_delay */
	r = 0.25;
	assert_int_equal(retry_scheduled_delay(&p, 3, rand_fixed_cb, &r), 22500);
	r = nextafter(1.0, 0.0);
	assert_int_equal(retry_scheduled_delay(&p, 4, rand_fixed_cb, &r), 60000);
	r = 0.5;
	assert_int_equal(retry_scheduled_delay(&p, 4, rand_fixed_cb, &r), 35000);
	assert_int_equal(retry_scheduled_delay(&p, 1000, rand_fixed_cb, &r), 35000);
	assert_int_equal(retry_scheduled_delay(&p, INT_MAX, rand_fixed_cb, &r), 35000);

	p.factor = 3.0; /* retry 1: [10 s, 30 s] */
	r = 0.5;
	assert_int_equal(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r), 20000);
	p.factor = 1.0; /* Connxio's flat window from the first retry: [10 s, 60 s] */
	assert_int_equal(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r), 35000);
	assert_int_equal(retry_scheduled_delay(&p, 9, rand_fixed_cb, &r), 35000);
}

static void test_exponential_odd_inputs(void **state)
{
	struct retry_policy p = exponential_policy();
	double r;

	/* a source that breaks its contract is clamped into [0, 1) */
	r = 1.0;
	assert_int_equal(retry_scheduled_delay(&p, 5, rand_fixed_cb, &r), 60000);
	r = 7.5;
	assert_int_equal(retry_scheduled_delay(&p, 5, rand_fixed_cb, &r), 60000);
	r = -3.0;
	assert_int_equal(retry_scheduled_delay(&p, 5, rand_fixed_cb, &r), 10000);
	r = NAN;
	assert_int_equal(retry_scheduled_delay(&p, 5, rand_fixed_cb, &r), 10000);
	/* no source: the lower bound */
	assert_int_equal(retry_scheduled_delay(&p, 5, NULL, NULL), 10000);

	r = 0.5;
	p.factor = 1e300; /* overflows to inf: capped */
	assert_int_equal(retry_scheduled_delay(&p, 3, rand_fixed_cb, &r), 35000);
	p.factor = 0.5;   /* does not grow: the whole window */
	assert_int_equal(retry_scheduled_delay(&p, 3, rand_fixed_cb, &r), 35000);
	p.factor = NAN;
	assert_int_equal(retry_scheduled_delay(&p, 3, rand_fixed_cb, &r), 35000);

	p = exponential_policy();
	p.min_delay_ms = 60000; /* inverted window */
	p.max_delay_ms = 10000;
	assert_int_equal(retry_scheduled_delay(&p, 3, rand_fixed_cb, &r), 60000);

	p = exponential_policy();
	p.max_delay_ms = INT64_MAX; /* 10 s * 2^n without a practical cap */
	r = nextafter(1.0, 0.0);
	assert_int_equal(retry_scheduled_delay(&p, 11, rand_fixed_cb, &r), 20480000);
	/* factor^n is inf: the window is [10 s, INT64_MAX], and nothing overflows */
	assert_true(retry_scheduled_delay(&p, INT_MAX, rand_fixed_cb, &r) > INT64_MAX / 4 * 3);
	r = 0.0;
	assert_int_equal(retry_scheduled_delay(&p, INT_MAX, rand_fixed_cb, &r), 10000);
}

/* Property: 10,000 draws from a deterministic source are always inside
 * [min_delay, min(max_delay, min_delay * factor^n)], and the window is used from end
 * to end. */
static void test_exponential_window_property(void **state)
{
	struct retry_policy p = exponential_policy();
	uint64_t seed = 0x243f6a8885a308d3ULL;
	int64_t lowest = INT64_MAX, highest = 0;

	for (int i = 0; i < 10000; i++) {
		int retry_no = 1 + (int)(seed % 40);
		double upper = fmin(60000.0, 10000.0 * pow(2.0, retry_no));
		int64_t d = retry_scheduled_delay(&p, retry_no, rand_xorshift_cb, &seed);

		assert_true(d >= 10000);
		assert_true(d <= 60000);
		assert_true((double)d <= upper);
		if (retry_no >= 3) {
			lowest = d < lowest ? d : lowest;
			highest = d > highest ? d : highest;
		}
	}
	assert_true(lowest < 10500);
	assert_true(highest > 59500);
}

/* A burst of 200 failures comes back spread over the window: no 100 ms slot of the first
 * retry's [10 s, 20 s] holds more than 5% of them (an even spread puts 2 in each). */
static void test_exponential_burst_spreads(void **state)
{
	struct retry_policy p = exponential_policy();
	uint64_t seed = 0x9e3779b97f4a7c15ULL;
	int slots[101] = {0};
	int most = 0;

	(void)state;
	for (int i = 0; i < 200; i++) {
		int64_t d = retry_scheduled_delay(&p, 1, rand_xorshift_cb, &seed);
		assert_true(d >= 10000 && d <= 20000);
		int s = (int)((d - 10000) / 100);
		if (++slots[s] > most)
			most = slots[s];
	}
	assert_true(most <= 10);
}

static void test_max_retries(void **state)
{
	struct retry_policy p;

	retry_policy_defaults(&p);
	assert_true(retry_may_schedule(&p, 0));
	assert_true(retry_may_schedule(&p, 2));
	assert_false(retry_may_schedule(&p, 3));
	assert_false(retry_may_schedule(&p, 4));

	p.max_retries = -1; /* broken policy: no scheduled retries */
	assert_false(retry_may_schedule(&p, 0));
}

/* Property: driving the decision loop yields exactly max_retries scheduled retries. */
static void test_max_retries_honoured(void **state)
{
	struct retry_policy p;

	retry_policy_defaults(&p);
	for (int max = 1; max <= 100; max++) {
		int done = 0;

		p.max_retries = max;
		while (retry_may_schedule(&p, done) && done < 1000)
			done++;
		assert_int_equal(done, max);
	}
}

static void test_zero_is_forever(void **state)
{
	struct retry_policy p;

	retry_policy_defaults(&p);
	p.max_retries = 0;
	for (int done = 0; done < 100000; done++)
		assert_true(retry_may_schedule(&p, done));
	assert_true(retry_may_schedule(&p, INT_MAX));
}

static void test_is_success(void **state)
{
	assert_false(retry_is_success(0));
	assert_false(retry_is_success(-1));
	assert_false(retry_is_success(199));
	assert_true(retry_is_success(200));
	assert_true(retry_is_success(202));
	assert_true(retry_is_success(204));
	assert_true(retry_is_success(299));
	assert_false(retry_is_success(300)); /* redirects are failures */
	assert_false(retry_is_success(304));
	assert_false(retry_is_success(429));
	assert_false(retry_is_success(503));
	assert_false(retry_is_success(520));
}


/* ---- jitter ---------------------------------------------------------------------------- */

static void test_jitter_exact(void **state)
{
	struct retry_policy p;
	double r;

	retry_policy_defaults(&p);
	p.jitter = 0.5; /* fixed 3 s: [1.5 s, 3 s] */
	r = 0.0;
	assert_int_equal(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r), 3000);
	r = 0.5;
	assert_int_equal(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r), 2250);
	r = nextafter(1.0, 0.0);
	assert_int_equal(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r), 1501);
	assert_int_equal(retry_scheduled_delay(&p, 1, NULL, NULL), 3000); /* no source */

	p.jitter = 1.0; /* anything in [0, 3 s] */
	r = nextafter(1.0, 0.0);
	assert_true(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r) <= 1);
	p.jitter = 7.0; /* out of range: treated as 1 */
	assert_true(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r) <= 1);
	p.jitter = NAN; /* broken: no jitter */
	assert_int_equal(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r), 3000);
	p.jitter = -1.0;
	assert_int_equal(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r), 3000);

	p.policy = RETRY_LINEAR; /* linear 3 s step, retry 4: [6 s, 12 s] with jitter 0.5 */
	p.jitter = 0.5;
	r = 0.5;
	assert_int_equal(retry_scheduled_delay(&p, 4, rand_fixed_cb, &r), 9000);
}

/* Property: for every policy, retry number and draw, a delay is inside the policy's
 * bounds: fixed [i(1-j), i]; linear [L(1-j), L] with L = min(i*n, max(max_delay, i));
 * exponential [min_delay, max(min_delay, max_delay)]. */
static void test_delays_within_bounds_property(void **state)
{
	static const double jitters[] = {0.0, 0.1, 0.25, 0.5, 0.9, 1.0};
	static const int64_t intervals[] = {1, 100, 300, 3000, 59999, 60000, 120000};
	uint64_t seed = 0x9e3779b97f4a7c15ULL;

	for (int policy = RETRY_FIXED; policy <= RETRY_EXPONENTIAL; policy++) {
		for (size_t ji = 0; ji < sizeof(jitters) / sizeof(jitters[0]); ji++) {
			for (size_t ii = 0; ii < sizeof(intervals) / sizeof(intervals[0]); ii++) {
				struct retry_policy p;
				retry_policy_defaults(&p);
				p.policy = (enum retry_policy_kind)policy;
				p.jitter = jitters[ji];
				p.interval_ms = intervals[ii];
				p.min_delay_ms = intervals[ii] / 2;
				p.max_delay_ms = 60000;
				for (int i = 0; i < 300; i++) {
					int n = 1 + (int)(seed % 64);
					int64_t d = retry_scheduled_delay(&p, n, rand_xorshift_cb, &seed);
					int64_t hi, lo;
					if (policy == RETRY_EXPONENTIAL) {
						lo = p.min_delay_ms;
						hi = p.max_delay_ms > lo ? p.max_delay_ms : lo;
					} else {
						int64_t cap = p.max_delay_ms > p.interval_ms
								      ? p.max_delay_ms : p.interval_ms;
						hi = policy == RETRY_FIXED ? p.interval_ms
							: ((int64_t)n * p.interval_ms < cap
								   ? (int64_t)n * p.interval_ms : cap);
						lo = (int64_t)floor((double)hi * (1.0 - p.jitter));
					}
					assert_true(d >= lo);
					assert_true(d <= hi);
				}
			}
		}
	}
}

/* ---- permanent codes --------------------------------------------------------------------- */

static void test_permanent_set(void **state)
{
	struct retry_policy p;

	retry_policy_defaults(&p);
	for (int code = 0; code < 700; code++)
		assert_false(retry_is_permanent(&p, code)); /* by default everything is retried */
	assert_int_equal(retry_permanent_add(&p, 410), 0);
	assert_int_equal(retry_permanent_add(&p, 400), 0);
	assert_int_equal(retry_permanent_add(&p, 599), 0);
	assert_int_equal(retry_permanent_add(&p, 463), 0); /* crosses a 64-bit word */
	assert_int_equal(retry_permanent_add(&p, 399), -1);
	assert_int_equal(retry_permanent_add(&p, 600), -1);
	assert_int_equal(retry_permanent_add(&p, -410), -1);
	for (int code = -5; code < 700; code++)
		assert_int_equal(retry_is_permanent(&p, code),
				 code == 400 || code == 410 || code == 463 || code == 599);
}

/* Property: after a permanent code nothing more happens, whatever the kind, the retries
 * done, the Retry-After or the policy: no scheduled retry and no further immediate try. */
static void test_no_retry_after_permanent_property(void **state)
{
	static const int codes[] = {400, 401, 403, 404, 410, 422, 429, 500, 503, 520, 599};
	uint64_t seed = 42;

	for (int policy = RETRY_FIXED; policy <= RETRY_EXPONENTIAL; policy++) {
		for (size_t c = 0; c < sizeof(codes) / sizeof(codes[0]); c++) {
			struct retry_policy p;
			retry_policy_defaults(&p);
			p.policy = (enum retry_policy_kind)policy;
			p.max_retries = 0; /* forever: still nothing after a permanent code */
			assert_int_equal(retry_permanent_add(&p, codes[c]), 0);
			for (int kind = ATTEMPT_IMMEDIATE; kind <= ATTEMPT_MANUAL; kind++)
				for (int done = 0; done < 50; done++)
					assert_int_equal(retry_next_delay(&p, (enum attempt_kind)kind, done,
									  codes[c], done * 1000 - 1,
									  rand_xorshift_cb, &seed), -1);
			for (int tries = 1; tries < 10; tries++)
				assert_false(retry_immediate_continue(&p, tries, 10, codes[c], -1));
			/* the code next to it is still retried */
			int other = codes[c] == 599 ? 598 : codes[c] + 1;
			if (!retry_is_permanent(&p, other)) {
				assert_true(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 0, other, -1,
							     rand_xorshift_cb, &seed) >= 0);
				assert_true(retry_immediate_continue(&p, 1, 3, other, -1));
			}
		}
	}
}

/* ---- the decision after a failed round ------------------------------------------------- */

static void test_next_delay_kinds(void **state)
{
	struct retry_policy p;

	retry_policy_defaults(&p); /* fixed 3 s, max 3 */
	assert_int_equal(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 0, 500, -1, NULL, NULL), 3000);
	assert_int_equal(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 7, 500, -1, NULL, NULL), 3000);
	assert_int_equal(retry_next_delay(&p, ATTEMPT_SCHEDULED, 1, 500, -1, NULL, NULL), 3000);
	assert_int_equal(retry_next_delay(&p, ATTEMPT_SCHEDULED, 2, 500, -1, NULL, NULL), 3000);
	assert_int_equal(retry_next_delay(&p, ATTEMPT_SCHEDULED, 3, 500, -1, NULL, NULL), -1);
	assert_int_equal(retry_next_delay(&p, ATTEMPT_MANUAL, 0, 500, -1, NULL, NULL), -1);
	assert_int_equal(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 0, 200, -1, NULL, NULL), -1);
	p.policy = RETRY_LINEAR; /* the retry number follows the retries done */
	assert_int_equal(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 0, 500, -1, NULL, NULL), 3000);
	assert_int_equal(retry_next_delay(&p, ATTEMPT_SCHEDULED, 1, 500, -1, NULL, NULL), 6000);
	assert_int_equal(retry_next_delay(&p, ATTEMPT_SCHEDULED, 2, 500, -1, NULL, NULL), 9000);
	p.max_retries = 0;
	assert_int_equal(retry_next_delay(&p, ATTEMPT_SCHEDULED, INT_MAX, 500, -1, NULL, NULL),
			 60000);
}

/* Property: driving rounds through retry_next_delay never makes more than max_retries
 * scheduled retries, and with max_retries 0 never stops. */
static void test_attempts_never_exceed_maximum_property(void **state)
{
	uint64_t seed = 7;

	for (int policy = RETRY_FIXED; policy <= RETRY_EXPONENTIAL; policy++) {
		for (int max = 0; max <= 40; max++) {
			struct retry_policy p;
			int retries = 0, rounds = 0;
			enum attempt_kind kind = ATTEMPT_IMMEDIATE;

			retry_policy_defaults(&p);
			p.policy = (enum retry_policy_kind)policy;
			p.max_retries = max;
			for (;;) {
				int code = 500 + (int)(seed % 100);
				int64_t ra = (int64_t)(seed % 5000) - 1;
				int64_t d = retry_next_delay(&p, kind, retries, code, ra,
							     rand_xorshift_cb, &seed);
				rounds++;
				if (d < 0 || rounds > 1000)
					break;
				kind = ATTEMPT_SCHEDULED;
				retries++;
			}
			if (max == 0)
				assert_int_equal(rounds, 1001);
			else
				assert_int_equal(retries, max);
		}
	}
}

/* ---- Retry-After ----------------------------------------------------------------------- */

static void test_retry_after_parse(void **state)
{
	/* Sun, 06 Nov 1994 08:49:37 GMT = 784111777 */
	const int64_t at = 784111777000LL;
	int64_t d;

	assert_int_equal(retry_after_parse("120", 0, &d), 0);
	assert_int_equal(d, 120000);
	assert_int_equal(retry_after_parse(" 2 \r\n", 0, &d), 0);
	assert_int_equal(d, 2000);
	assert_int_equal(retry_after_parse("0", 0, &d), 0);
	assert_int_equal(d, 0);
	assert_int_equal(retry_after_parse("99999999999999999999999999", 0, &d), 0);
	assert_true(d > 0); /* saturates, never wraps */

	assert_int_equal(retry_after_parse("Sun, 06 Nov 1994 08:49:37 GMT", at - 5000, &d), 0);
	assert_int_equal(d, 5000);
	assert_int_equal(retry_after_parse("Sunday, 06-Nov-94 08:49:37 GMT", at - 1500, &d), 0);
	assert_int_equal(d, 1500);
	assert_int_equal(retry_after_parse("Sun Nov  6 08:49:37 1994", at - 60000, &d), 0);
	assert_int_equal(d, 60000);
	assert_int_equal(retry_after_parse("Sun, 06 Nov 1994 08:49:37 GMT", at + 1, &d), 0);
	assert_int_equal(d, 0); /* in the past: no wait */
	assert_int_equal(retry_after_parse("Thu, 01 Jan 2037 00:00:00 GMT", 0, &d), 0);
	assert_int_equal(d, 2114380800000LL);
	assert_int_equal(retry_after_parse("Tue, 29 Feb 2028 12:00:00 GMT", 0, &d), 0);
	assert_int_equal(d, 1835438400000LL);

	static const char *const bad[] = {
		"", "   ", "-1", "1.5", "12s", "soon", "Sun, 06 Nov 1994 08:49:37 PST",
		"Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 06 Nov 1994 25:49:37 GMT",
		"Sun, 06 Nov 1994 08:49:37 GMT trailing", NULL,
	};
	for (const char *const *b = bad; *b; b++)
		assert_int_equal(retry_after_parse(*b, 0, &d), -1);
	assert_int_equal(retry_after_parse(NULL, 0, &d), -1);
}

static void test_retry_after_rule(void **state)
{
	struct retry_policy p;

	retry_policy_defaults(&p); /* fixed 3 s, Retry-After honoured up to 1 h */
	/* 503 and 429: the later of the policy delay and the header */
	assert_int_equal(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 0, 503, 10000, NULL, NULL), 10000);
	assert_int_equal(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 0, 429, 10000, NULL, NULL), 10000);
	assert_int_equal(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 0, 503, 1000, NULL, NULL), 3000);
	assert_int_equal(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 0, 503, 0, NULL, NULL), 3000);
	/* other codes ignore it */
	assert_int_equal(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 0, 500, 10000, NULL, NULL), 3000);
	assert_int_equal(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 0, 502, 10000, NULL, NULL), 3000);
	/* capped at retry_after_max */
	assert_int_equal(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 0, 503, 86400000, NULL, NULL),
			 3600000);
	p.retry_after_max_ms = 5000;
	assert_int_equal(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 0, 503, 86400000, NULL, NULL), 5000);
	/* the cap never shortens the policy's own delay */
	p.interval_ms = 20000;
	assert_int_equal(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 0, 503, 86400000, NULL, NULL),
			 20000);
	p.retry_after_max_ms = 0; /* 0: Retry-After is ignored */
	assert_int_equal(retry_next_delay(&p, ATTEMPT_IMMEDIATE, 0, 503, 86400000, NULL, NULL),
			 20000);
	/* it never revives a retry the policy ended */
	p.retry_after_max_ms = 3600000;
	assert_int_equal(retry_next_delay(&p, ATTEMPT_SCHEDULED, 3, 503, 1000, NULL, NULL), -1);
	assert_int_equal(retry_next_delay(&p, ATTEMPT_MANUAL, 0, 429, 1000, NULL, NULL), -1);
}

/* Property: with a Retry-After on 429/503 the wait is max(policy, min(header, cap)):
 * never below the policy delay, never above max(policy delay, retry_after_max). */
static void test_retry_after_clamp_property(void **state)
{
	uint64_t seed = 0xdeadbeefULL, seed2;

	for (int i = 0; i < 20000; i++) {
		struct retry_policy p;
		retry_policy_defaults(&p);
		p.policy = (enum retry_policy_kind)(seed % 3);
		p.interval_ms = 1 + (int64_t)(seed % 100000);
		p.retry_after_max_ms = (int64_t)((seed >> 8) % 7200000);
		int code = (seed >> 20) % 2 ? 429 : 503;
		int64_t ra = (int64_t)((seed >> 24) % 10000000);
		int retries = (int)((seed >> 40) % 3);
		seed2 = seed;
		int64_t policy = retry_next_delay(&p, ATTEMPT_SCHEDULED, retries, code, -1,
						  rand_xorshift_cb, &seed2);
		seed2 = seed;
		int64_t d = retry_next_delay(&p, ATTEMPT_SCHEDULED, retries, code, ra,
					     rand_xorshift_cb, &seed2);
		assert_true(policy >= 0);
		int64_t hint = ra < p.retry_after_max_ms ? ra : p.retry_after_max_ms;
		assert_int_equal(d, policy > hint ? policy : hint);
		assert_true(d >= policy);
		assert_true(d <= (policy > p.retry_after_max_ms ? policy : p.retry_after_max_ms));
		rand_xorshift_cb(&seed);
	}
}

static void test_immediate_continue(void **state)
{
	struct retry_policy p;

	retry_policy_defaults(&p); /* 3 tries, 100 ms stagger */
	assert_true(retry_immediate_continue(&p, 1, 3, 500, -1));
	assert_true(retry_immediate_continue(&p, 2, 3, 500, -1));
	assert_false(retry_immediate_continue(&p, 3, 3, 500, -1));
	assert_false(retry_immediate_continue(&p, 1, 3, 200, -1));
	/* Retry-After longer than the next stagger (100 ms after try 1) ends the round */
	assert_false(retry_immediate_continue(&p, 1, 3, 503, 2000));
	assert_false(retry_immediate_continue(&p, 1, 3, 429, 101));
	assert_true(retry_immediate_continue(&p, 1, 3, 429, 100));
	assert_true(retry_immediate_continue(&p, 1, 3, 503, 0));
	assert_true(retry_immediate_continue(&p, 1, 3, 500, 2000)); /* not 429/503 */
	assert_int_equal(retry_permanent_add(&p, 404), 0);
	assert_false(retry_immediate_continue(&p, 1, 3, 404, -1));
}

/* Slot filling: 50 re-queues of one subscription in the 10-60 s window take the 50
 * one-second slots once each; the 51st starts the next cycle. Independent draws from the
 * same source leave seconds empty and double others (what slot filling is for). */
static void test_requeue_slots_fill_the_window(void **state)
{
	struct retry_policy p;
	struct retry_slots slots = {0};
	uint64_t seed = 0x9e3779b97f4a7c15ULL;
	int hits[50], plain[50] = {0}, empty = 0;

	(void)state;
	retry_policy_defaults(&p); /* 10-60 s */
	assert_int_equal(retry_slots_for(&p), 50);
	retry_slots_setup(&slots, retry_slots_for(&p), rand_xorshift_cb, &seed);
	for (int cycle = 0; cycle < 3; cycle++) {
		memset(hits, 0, sizeof(hits));
		for (int i = 0; i < 50; i++) {
			int64_t d = retry_requeue_delay(&p, retry_slots_draw, &slots);
			assert_true(d >= 10000 && d < 60000);
			hits[(d - 10000) / 1000]++;
		}
		for (int k = 0; k < 50; k++)
			assert_int_equal(hits[k], 1); /* every second once, in every cycle */
	}
	/* exponential retries fill the same way: 20 first retries in [10 s, 20 s] */
	p = exponential_policy();
	slots = (struct retry_slots){0};
	retry_slots_setup(&slots, 20, rand_xorshift_cb, &seed);
	memset(hits, 0, sizeof(hits));
	for (int i = 0; i < 20; i++) {
		int64_t d = retry_scheduled_delay(&p, 1, retry_slots_draw, &slots);
		assert_true(d >= 10000 && d <= 20000);
		hits[(d - 10000) / 500]++; /* 20 slots of 500 ms */
	}
	for (int k = 0; k < 20; k++)
		assert_int_equal(hits[k], 1);
	/* the same 50 draws without slots */
	retry_policy_defaults(&p);
	for (int i = 0; i < 50; i++)
		plain[(retry_requeue_delay(&p, rand_xorshift_cb, &seed) - 10000) / 1000]++;
	for (int k = 0; k < 50; k++)
		empty += plain[k] == 0;
	assert_true(empty > 0);
}

/* The slot count follows the window (1 s a slot, 1..RETRY_SLOTS_MAX); setting the same
 * count again keeps the cycle, another count starts a new one. */
static void test_requeue_slots_setup(void **state)
{
	struct retry_policy p;
	struct retry_slots slots = {0};
	double r = 0.0;

	(void)state;
	retry_policy_defaults(&p);
	p.min_delay_ms = 10000;
	p.max_delay_ms = 10000; /* no window: one slot */
	assert_int_equal(retry_slots_for(&p), 1);
	p.max_delay_ms = 10000 + 3600000; /* an hour: capped */
	assert_int_equal(retry_slots_for(&p), RETRY_SLOTS_MAX);
	p.max_delay_ms = 12500;
	assert_int_equal(retry_slots_for(&p), 2);

	retry_slots_setup(&slots, 4, rand_fixed_cb, &r);
	assert_true(retry_slots_draw(&slots) < 0.25); /* the first free slot: 0 */
	assert_true(retry_slots_draw(&slots) >= 0.25); /* 0 is taken: 1 */
	retry_slots_setup(&slots, 4, rand_fixed_cb, &r);
	assert_int_equal(slots.n_taken, 2); /* the cycle goes on */
	retry_slots_setup(&slots, 8, rand_fixed_cb, &r);
	assert_int_equal(slots.n_taken, 0);
	r = nextafter(1.0, 0.0); /* the last free slot, and never past its end */
	double v = retry_slots_draw(&slots);
	assert_true(v >= 7.0 / 8.0 && v < 1.0);
}

static void test_requeue_window(void **state)
{
	struct retry_policy p;
	uint64_t seed = 99;
	int64_t lowest = INT64_MAX, highest = 0;
	double r;

	retry_policy_defaults(&p); /* 10-60 s */
	r = 0.0;
	assert_int_equal(retry_requeue_delay(&p, rand_fixed_cb, &r), 10000);
	r = nextafter(1.0, 0.0);
	assert_int_equal(retry_requeue_delay(&p, rand_fixed_cb, &r), 60000);
	r = 0.5;
	assert_int_equal(retry_requeue_delay(&p, rand_fixed_cb, &r), 35000);
	for (int i = 0; i < 10000; i++) {
		int64_t d = retry_requeue_delay(&p, rand_xorshift_cb, &seed);
		assert_true(d >= 10000 && d <= 60000);
		lowest = d < lowest ? d : lowest;
		highest = d > highest ? d : highest;
	}
	assert_true(lowest < 10100);
	assert_true(highest > 59900);
	p.min_delay_ms = 5000; /* inverted: the lower bound */
	p.max_delay_ms = 1000;
	assert_int_equal(retry_requeue_delay(&p, rand_fixed_cb, &r), 5000);
	p.min_delay_ms = -5;
	p.max_delay_ms = 0;
	assert_int_equal(retry_requeue_delay(&p, rand_fixed_cb, &r), 0);
}

/* The rules every policy keeps; linear keeps max_retries from 3 to 10 once someone set it
 * (left to the default it is 3). */
static void test_policy_check(void **state)
{
	struct retry_policy p;
	char field[32], msg[96];

	(void)state;
	retry_policy_defaults(&p);
	assert_int_equal(retry_policy_check(&p, "retry.", field, sizeof(field), msg, sizeof(msg)),
			 RETRY_RULE_KEPT);
	p.policy = RETRY_LINEAR;
	assert_int_equal(retry_policy_check(&p, "retry.", field, sizeof(field), msg, sizeof(msg)),
			 RETRY_RULE_KEPT); /* the default 3 */
	static const struct { int n; enum retry_rule want; } rows[] = {
		{0, RETRY_RULE_RANGE}, {2, RETRY_RULE_RANGE}, {3, RETRY_RULE_KEPT},
		{10, RETRY_RULE_KEPT}, {11, RETRY_RULE_RANGE},
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		p.max_retries = rows[i].n;
		p.max_retries_auto = 0;
		assert_int_equal(retry_policy_check(&p, "retry.", field, sizeof(field), msg,
						    sizeof(msg)), rows[i].want);
		if (rows[i].want != RETRY_RULE_KEPT)
			assert_string_equal(field, "retry.max_retries");
	}
	p.policy = RETRY_FIXED; /* other policies: any count (0 = forever) */
	p.max_retries = 0;
	assert_int_equal(retry_policy_check(&p, "retry.", field, sizeof(field), msg, sizeof(msg)),
			 RETRY_RULE_KEPT);
	p.factor = 11;
	assert_int_equal(retry_policy_check(&p, "retry.", field, sizeof(field), msg, sizeof(msg)),
			 RETRY_RULE_RANGE);
	assert_string_equal(field, "retry.factor");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_immediate_linear_stagger),
		cmocka_unit_test(test_immediate_round_cap),
		cmocka_unit_test(test_immediate_round_sum_property),
		cmocka_unit_test(test_fixed),
		cmocka_unit_test(test_linear),
		cmocka_unit_test(test_policy_check),
		cmocka_unit_test(test_exponential_exact),
		cmocka_unit_test(test_exponential_odd_inputs),
		cmocka_unit_test(test_exponential_window_property),
		cmocka_unit_test(test_exponential_burst_spreads),
		cmocka_unit_test(test_max_retries),
		cmocka_unit_test(test_max_retries_honoured),
		cmocka_unit_test(test_zero_is_forever),
		cmocka_unit_test(test_is_success),
		cmocka_unit_test(test_jitter_exact),
		cmocka_unit_test(test_delays_within_bounds_property),
		cmocka_unit_test(test_permanent_set),
		cmocka_unit_test(test_no_retry_after_permanent_property),
		cmocka_unit_test(test_next_delay_kinds),
		cmocka_unit_test(test_attempts_never_exceed_maximum_property),
		cmocka_unit_test(test_retry_after_parse),
		cmocka_unit_test(test_retry_after_rule),
		cmocka_unit_test(test_retry_after_clamp_property),
		cmocka_unit_test(test_immediate_continue),
		cmocka_unit_test(test_requeue_window),
		cmocka_unit_test(test_requeue_slots_fill_the_window),
		cmocka_unit_test(test_requeue_slots_setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
