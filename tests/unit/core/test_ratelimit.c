/* test_ratelimit.c: the token bucket (core/ratelimit.c): a full bucket's burst, the pace
 * after it, the wait it reports, reconfiguration, odd inputs, and a property: over any
 * span, no more than burst + rate * span requests pass. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "core/ratelimit.h"

static void test_burst_then_rate(void **state)
{
	struct token_bucket b;

	token_bucket_init(&b, 10.0, token_bucket_burst_for(10.0), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(token_bucket_take(&b, 0), 0);
	int64_t wait = token_bucket_take(&b, 0);
	assert_int_equal(wait, 100000); /* one token per 100 ms */
	assert_true(token_bucket_take(&b, 99999) > 0);
	assert_int_equal(token_bucket_take(&b, 100000), 0);
	assert_int_equal(token_bucket_take(&b, 150000), 50000);
	/* a long pause refills only up to the burst */
	int passed = 0;
	while (token_bucket_take(&b, 100000000) == 0)
		passed++;
	assert_int_equal(passed, 10);
}

static void test_slow_rate(void **state)
{
	struct token_bucket b;

	assert_true(token_bucket_burst_for(0.5) == 1.0);
	token_bucket_init(&b, 0.5, token_bucket_burst_for(0.5), 1000);
	assert_int_equal(token_bucket_take(&b, 1000), 0);
	assert_int_equal(token_bucket_take(&b, 1000), 2000000); /* one per 2 s */
	assert_int_equal(token_bucket_take(&b, 2001000), 0);
}

static void test_configure_and_odd_inputs(void **state)
{
	struct token_bucket b;

	token_bucket_init(&b, 100.0, 100.0, 0);
	token_bucket_configure(&b, 1.0, 1.0, 0); /* tokens capped at the new burst */
	assert_int_equal(token_bucket_take(&b, 0), 0);
	assert_int_equal(token_bucket_take(&b, 0), 1000000);

	token_bucket_init(&b, 0.0, 0.0, 0); /* no rate: the slowest one, burst 1 */
	assert_int_equal(token_bucket_take(&b, 0), 0);
	assert_true(token_bucket_take(&b, 0) >= 3600000000LL - 1);
	token_bucket_init(&b, NAN, NAN, 0);
	assert_int_equal(token_bucket_take(&b, 0), 0);
	assert_true(token_bucket_take(&b, 0) > 0);

	/* the clock going back refills nothing and breaks nothing */
	token_bucket_init(&b, 10.0, 1.0, 5000000);
	assert_int_equal(token_bucket_take(&b, 5000000), 0);
	assert_true(token_bucket_take(&b, 0) > 0);
	assert_true(token_bucket_take(&b, 4000000) > 0);
	assert_int_equal(token_bucket_take(&b, 5100000), 0);
}

static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Property: whatever the request times, the passes within [0, t] never exceed
 * burst + rate * t, and a request refused with wait w passes when retried w later. */
static void test_never_exceeds_rate_property(void **state)
{
	static const double rates[] = {0.5, 1, 3, 10, 77.7, 1000};
	uint64_t seed = 1;

	for (size_t ri = 0; ri < sizeof(rates) / sizeof(rates[0]); ri++) {
		double rate = rates[ri], burst = token_bucket_burst_for(rate);
		struct token_bucket b;
		int64_t now = 0;
		long passed = 0;

		token_bucket_init(&b, rate, burst, 0);
		for (int i = 0; i < 20000; i++) {
			now += (int64_t)(next_rand(&seed) % (uint64_t)(2e6 / rate));
			int64_t w = token_bucket_take(&b, now);
			if (w == 0) {
				passed++;
			} else {
				assert_true(w >= 1);
				struct token_bucket later = b;
				assert_int_equal(token_bucket_take(&later, now + w), 0);
			}
			assert_true((double)passed <= burst + rate * (double)now / 1e6 + 1e-6);
		}
		assert_true(passed > 0);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_burst_then_rate),
		cmocka_unit_test(test_slow_rate),
		cmocka_unit_test(test_configure_and_odd_inputs),
		cmocka_unit_test(test_never_exceeds_rate_property),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
