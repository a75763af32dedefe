/* test_count_cache.c: store/count_cache.c, the PROCESSED count of GET /v1/stats and
 * /metrics reused while the store is large: a small count is never reused; a count of N
 * serves for N / 100,000 seconds, at most five minutes; while one caller counts afresh,
 * the others get the last large count instead of counting too; a failed count lets the
 * next caller count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "store/count_cache.h"

static void test_small_counts_are_never_reused(void **state)
{
	(void)state;
	struct count_cache c;
	int64_t v = -1;

	count_cache_init(&c);
	assert_int_equal(count_cache_get(&c, 1000, &v), 0); /* nothing counted yet */
	count_cache_put(&c, 1000, COUNT_CACHE_ROWS_PER_S - 1);
	assert_int_equal(count_cache_get(&c, 1000, &v), 0);
	/* nor while another caller counts: counting it is quick */
	assert_int_equal(count_cache_get(&c, 1000, &v), 0);
	count_cache_put(&c, 1001, 5);
	assert_int_equal(count_cache_get(&c, 1001, &v), 0);
	count_cache_put(&c, 1001, 6);
	count_cache_destroy(&c);
}

static void test_a_large_count_serves_for_its_size(void **state)
{
	(void)state;
	struct count_cache c;
	int64_t v = -1;

	count_cache_init(&c);
	assert_int_equal(count_cache_get(&c, 0, &v), 0);
	count_cache_put(&c, 50000, 1000000); /* a million: reused for 10 s */
	assert_int_equal(count_cache_get(&c, 50000, &v), 1);
	assert_int_equal(v, 1000000);
	v = -1;
	assert_int_equal(count_cache_get(&c, 59999, &v), 1);
	assert_int_equal(v, 1000000);
	assert_int_equal(count_cache_get(&c, 60000, &v), 0); /* this caller counts */
	count_cache_put(&c, 60100, 1000250);
	assert_int_equal(count_cache_get(&c, 60100, &v), 1);
	assert_int_equal(v, 1000250);

	/* a billion would be reused for 10,000 s: five minutes at most */
	count_cache_put(&c, 0, 1000000000);
	assert_int_equal(count_cache_get(&c, COUNT_CACHE_MAX_MS - 1, &v), 1);
	assert_int_equal(count_cache_get(&c, COUNT_CACHE_MAX_MS, &v), 0);
	count_cache_put(&c, COUNT_CACHE_MAX_MS, 1000000000);
	count_cache_destroy(&c);
}

static void test_one_caller_counts_the_others_wait_not(void **state)
{
	(void)state;
	struct count_cache c;
	int64_t v = -1;

	count_cache_init(&c);
	assert_int_equal(count_cache_get(&c, 0, &v), 0);
	count_cache_put(&c, 0, 2000000); /* 20 s */
	assert_int_equal(count_cache_get(&c, 30000, &v), 0); /* expired: this one counts */
	/* meanwhile the others get the last count, expired as it is */
	v = -1;
	assert_int_equal(count_cache_get(&c, 30001, &v), 1);
	assert_int_equal(v, 2000000);
	/* the count failed: the next caller counts */
	count_cache_fail(&c);
	assert_int_equal(count_cache_get(&c, 30002, &v), 0);
	count_cache_put(&c, 30003, 2100000);
	v = -1;
	assert_int_equal(count_cache_get(&c, 30004, &v), 1);
	assert_int_equal(v, 2100000);
	count_cache_destroy(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_small_counts_are_never_reused),
		cmocka_unit_test(test_a_large_count_serves_for_its_size),
		cmocka_unit_test(test_one_caller_counts_the_others_wait_not),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
