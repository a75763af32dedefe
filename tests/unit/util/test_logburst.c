/* test_logburst.c: one log line for a burst of the same failure (util/logburst.c): the
 * start said once, a line per interval with the count while it goes on, the end after a
 * quiet spell, and a new burst after a pause; and threads hitting one burst at once say
 * its start once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>

#include "util/logburst.h"

#define MIN 60000 /* the interval, as the store uses it */

static void test_start_then_once_per_interval(void **state)
{
	(void)state;
	struct log_burst b;
	long n = -1;
	int64_t span = -1;
	memset(&b, 0, sizeof(b));
	assert_int_equal(log_burst_hit(&b, 1000, MIN, &n, &span), LOG_BURST_START);
	/* a thousand more within the minute: nothing to say */
	for (int i = 1; i <= 1000; i++)
		assert_int_equal(log_burst_hit(&b, 1000 + i * 50, MIN, &n, &span), LOG_BURST_QUIET);
	/* the minute is up: one line, counting all since the start line */
	assert_int_equal(log_burst_hit(&b, 1000 + MIN, MIN, &n, &span), LOG_BURST_STILL);
	assert_int_equal(n, 1001);
	assert_int_equal(span, MIN);
	assert_int_equal(log_burst_hit(&b, 1000 + MIN + 10, MIN, &n, &span), LOG_BURST_QUIET);
	assert_int_equal(log_burst_hit(&b, 1000 + 2 * MIN, MIN, &n, &span), LOG_BURST_STILL);
	assert_int_equal(n, 2);
}

static void test_over_after_a_quiet_spell(void **state)
{
	(void)state;
	struct log_burst b;
	long n;
	int64_t span = -1;
	memset(&b, 0, sizeof(b));
	/* nothing going on: no end to say */
	assert_int_equal(log_burst_over(&b, 500, 5000, &span), 0);
	assert_int_equal(log_burst_hit(&b, 1000, MIN, &n, &span), LOG_BURST_START);
	assert_int_equal(log_burst_hit(&b, 3000, MIN, &n, &span), LOG_BURST_QUIET);
	/* a success 2 s after the last failure: a nearly full disk, not over */
	assert_int_equal(log_burst_over(&b, 5000, 5000, &span), 0);
	assert_int_equal(log_burst_hit(&b, 6000, MIN, &n, &span), LOG_BURST_QUIET);
	/* 5 s without one: over, three failures over the 5 s from the first to the last */
	assert_int_equal(log_burst_over(&b, 11000, 5000, &span), 3);
	assert_int_equal(span, 5000);
	assert_int_equal(log_burst_over(&b, 12000, 5000, &span), 0);
	/* the next failure starts a new burst */
	assert_int_equal(log_burst_hit(&b, 13000, MIN, &n, &span), LOG_BURST_START);
	/* quiet_ms 0: the first success ends it */
	assert_int_equal(log_burst_over(&b, 13000, 0, &span), 1);
}

static void test_a_pause_starts_anew(void **state)
{
	(void)state;
	struct log_burst b;
	long n;
	int64_t span;
	memset(&b, 0, sizeof(b));
	assert_int_equal(log_burst_hit(&b, 1000, MIN, &n, &span), LOG_BURST_START);
	/* no success came to end it, but nothing failed for an interval: a new start, not
	 * "still" over a span the failures did not fill */
	assert_int_equal(log_burst_hit(&b, 1000 + 3 * MIN, MIN, &n, &span), LOG_BURST_START);
	assert_int_equal(log_burst_over(&b, 1000 + 4 * MIN, 5000, &span), 1);
}

struct racer {
	struct log_burst *b;
	int starts;
};

static void *race(void *arg)
{
	struct racer *r = arg;
	long n;
	int64_t span;
	for (int i = 0; i < 10000; i++)
		r->starts += log_burst_hit(r->b, 1000, MIN, &n, &span) == LOG_BURST_START;
	return NULL;
}

static void test_threads_say_the_start_once(void **state)
{
	(void)state;
	struct log_burst b;
	struct racer r[4];
	pthread_t t[4];
	memset(&b, 0, sizeof(b));
	for (int i = 0; i < 4; i++) {
		r[i] = (struct racer){.b = &b};
		assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
	}
	int starts = 0;
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		starts += r[i].starts;
	}
	assert_int_equal(starts, 1);
	int64_t span;
	assert_int_equal(log_burst_over(&b, 1000 + 5000, 5000, &span), 40000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_start_then_once_per_interval),
		cmocka_unit_test(test_over_after_a_quiet_spell),
		cmocka_unit_test(test_a_pause_starts_anew),
		cmocka_unit_test(test_threads_say_the_start_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
