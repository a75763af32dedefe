/* test_retry.c: retry delays and limits (core/retry.c): exact values for each policy,
 * the 60 s cap on the immediate round, saturation for huge retry numbers, and
 * property loops with a deterministic random source. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <math.h>

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
	assert_int_equal(p.immediate, 3);
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
	assert_int_equal(retry_scheduled_delay(&p, INT_MAX, NULL, NULL),
			 (int64_t)3000 * INT_MAX);
	p.interval_ms = INT64_MAX / 2;
	assert_true(retry_scheduled_delay(&p, 3, NULL, NULL) == INT64_MAX); /* saturates */
}

static void test_exponential_exact(void **state)
{
	struct retry_policy p = exponential_policy();
	double r;

	/* retry 1: the window is [10 s, 10 s] */
	r = 0.0;
	assert_int_equal(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r), 10000);
	r = 0.99;
	assert_int_equal(retry_scheduled_delay(&p, 1, rand_fixed_cb, &r), 10000);

	/* retry 2: [10 s, 20 s], 10001 integer outcomes */
	r = 0.0;
	assert_int_equal(retry_scheduled_delay(&p, 2, rand_fixed_cb, &r), 10000);
	r = 0.5;
	assert_int_equal(retry_scheduled_delay(&p, 2, rand_fixed_cb, &r), 15000);
	r = nextafter(1.0, 0.0);
	assert_int_equal(retry_scheduled_delay(&p, 2, rand_fixed_cb, &r), 20000);

	/* retry 3: [10 s, 40 s] */
	r = 0.25;
	assert_int_equal(retry_scheduled_delay(&p, 3, rand_fixed_cb, &r), 17500);

	/* retry 4 and later: capped at max_delay */
	r = nextafter(1.0, 0.0);
	assert_int_equal(retry_scheduled_delay(&p, 4, rand_fixed_cb, &r), 60000);
	r = 0.5;
	assert_int_equal(retry_scheduled_delay(&p, 4, rand_fixed_cb, &r), 35000);
	assert_int_equal(retry_scheduled_delay(&p, 1000, rand_fixed_cb, &r), 35000);
	assert_int_equal(retry_scheduled_delay(&p, INT_MAX, rand_fixed_cb, &r), 35000);

	p.factor = 3.0; /* retry 2: [10 s, 30 s] */
	r = 0.5;
	assert_int_equal(retry_scheduled_delay(&p, 2, rand_fixed_cb, &r), 20000);
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
	p.factor = 0.5;   /* shrinking: the window collapses onto min */
	assert_int_equal(retry_scheduled_delay(&p, 3, rand_fixed_cb, &r), 10000);
	p.factor = NAN;
	assert_int_equal(retry_scheduled_delay(&p, 3, rand_fixed_cb, &r), 10000);

	p = exponential_policy();
	p.min_delay_ms = 60000; /* inverted window */
	p.max_delay_ms = 10000;
	assert_int_equal(retry_scheduled_delay(&p, 3, rand_fixed_cb, &r), 60000);

	p = exponential_policy();
	p.max_delay_ms = INT64_MAX; /* 10 s * 2^(n-1) without a practical cap */
	r = nextafter(1.0, 0.0);
	assert_int_equal(retry_scheduled_delay(&p, 11, rand_fixed_cb, &r), 10240000);
	/* factor^(n-1) is inf: the window is [10 s, INT64_MAX], and nothing overflows */
	assert_true(retry_scheduled_delay(&p, INT_MAX, rand_fixed_cb, &r) > INT64_MAX / 4 * 3);
	r = 0.0;
	assert_int_equal(retry_scheduled_delay(&p, INT_MAX, rand_fixed_cb, &r), 10000);
}

/* Property: 10,000 draws from a deterministic source are always inside
 * [min_delay, min(max_delay, min_delay * factor^(n-1))], and the window is used from end
 * to end. */
static void test_exponential_window_property(void **state)
{
	struct retry_policy p = exponential_policy();
	uint64_t seed = 0x243f6a8885a308d3ULL;
	int64_t lowest = INT64_MAX, highest = 0;

	for (int i = 0; i < 10000; i++) {
		int retry_no = 1 + (int)(seed % 40);
		double upper = fmin(60000.0, 10000.0 * pow(2.0, retry_no - 1));
		int64_t d = retry_scheduled_delay(&p, retry_no, rand_xorshift_cb, &seed);

		assert_true(d >= 10000);
		assert_true(d <= 60000);
		assert_true((double)d <= upper);
		if (retry_no >= 4) {
			lowest = d < lowest ? d : lowest;
			highest = d > highest ? d : highest;
		}
	}
	assert_true(lowest < 10500);
	assert_true(highest > 59500);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_immediate_linear_stagger),
		cmocka_unit_test(test_immediate_round_cap),
		cmocka_unit_test(test_immediate_round_sum_property),
		cmocka_unit_test(test_fixed),
		cmocka_unit_test(test_linear),
		cmocka_unit_test(test_exponential_exact),
		cmocka_unit_test(test_exponential_odd_inputs),
		cmocka_unit_test(test_exponential_window_property),
		cmocka_unit_test(test_max_retries),
		cmocka_unit_test(test_max_retries_honoured),
		cmocka_unit_test(test_zero_is_forever),
		cmocka_unit_test(test_is_success),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
