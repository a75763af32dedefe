/* test_breaker.c: the circuit breaker state machine (core/breaker.c): closed, open and
 * half-open; failures counted in fixed windows; one probe at a time; the probe closes or
 * reopens; a disabled breaker passes everything. Time is passed in, so every step is
 * exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "core/breaker.h"

static struct circuit_breaker_config config(int max_errors, int64_t window_ms)
{
	struct circuit_breaker_config c;

	circuit_breaker_defaults(&c);
	c.max_errors = max_errors;
	c.failure_window_ms = window_ms;
	return c;
}

static void fail_n(struct breaker *b, const struct circuit_breaker_config *c, int n,
		   int64_t now)
{
	for (int i = 0; i < n; i++)
		breaker_record(b, c, now, false, false);
}

static void test_defaults_and_names(void **state)
{
	struct circuit_breaker_config c;
	struct breaker b;

	circuit_breaker_defaults(&c);
	assert_int_equal(c.enabled, 1);
	assert_int_equal(c.max_errors, 1000);
	assert_int_equal(c.failure_window_ms, 180000);
	assert_int_equal(c.max_delay_actions, 5);
	breaker_init(&b);
	assert_int_equal(breaker_state_at(&b, &c, 0), BREAKER_CLOSED);
	assert_string_equal(breaker_state_name(BREAKER_CLOSED), "closed");
	assert_string_equal(breaker_state_name(BREAKER_OPEN), "open");
	assert_string_equal(breaker_state_name(BREAKER_HALF_OPEN), "half_open");
	assert_string_equal(breaker_state_name((enum breaker_state)9), "unknown");
}

/* Reaching max_errors failures within one window opens it until that window ends
 * (delaying starts when MaxErrorsPerInterval "is hit": docs/reference.md). */
static void test_opens_at_max_errors(void **state)
{
	struct circuit_breaker_config c = config(3, 1000);
	struct breaker b;

	breaker_init(&b);
	fail_n(&b, &c, 2, 100); /* one below max_errors: still closed */
	assert_int_equal(breaker_state_at(&b, &c, 100), BREAKER_CLOSED);
	assert_int_equal(breaker_admit(&b, &c, 150), BREAKER_PASS);
	breaker_record(&b, &c, 400, false, false); /* the third, in the window that began at 100 */
	assert_int_equal(breaker_state_at(&b, &c, 400), BREAKER_OPEN);
	assert_int_equal(b.open_until_ms, 1100);
	for (int64_t t = 400; t < 1100; t += 50)
		assert_int_equal(breaker_admit(&b, &c, t), BREAKER_DELAY);
	assert_int_equal(breaker_state_at(&b, &c, 1099), BREAKER_OPEN);
	assert_int_equal(breaker_state_at(&b, &c, 1100), BREAKER_HALF_OPEN);
}

/* A window that ends resets the count: failures spread thinly never open it. */
static void test_window_resets(void **state)
{
	struct circuit_breaker_config c = config(3, 1000);
	struct breaker b;

	breaker_init(&b);
	for (int64_t t = 0; t < 100000; t += 1000) {
		fail_n(&b, &c, 2, t + 10); /* two per window, every window */
		assert_int_equal(breaker_state_at(&b, &c, t + 10), BREAKER_CLOSED);
	}
	/* successes count nothing either way */
	breaker_init(&b);
	fail_n(&b, &c, 2, 0);
	for (int i = 0; i < 100; i++)
		breaker_record(&b, &c, 10, true, false);
	breaker_record(&b, &c, 20, false, false);
	assert_int_equal(breaker_state_at(&b, &c, 20), BREAKER_OPEN);
	/* a clock that went back starts a new window rather than counting into a future one */
	breaker_init(&b);
	fail_n(&b, &c, 2, 5000);
	fail_n(&b, &c, 2, 1000);
	assert_int_equal(breaker_state_at(&b, &c, 1000), BREAKER_CLOSED);
}

/* Half-open lets exactly one probe through; the others are delayed until it reports. */
static void test_half_open_single_probe(void **state)
{
	struct circuit_breaker_config c = config(2, 1000);
	struct breaker b;

	breaker_init(&b);
	fail_n(&b, &c, 2, 0);
	assert_int_equal(breaker_admit(&b, &c, 999), BREAKER_DELAY);
	assert_int_equal(breaker_admit(&b, &c, 1000), BREAKER_PROBE);
	assert_int_equal(breaker_state_at(&b, &c, 1000), BREAKER_HALF_OPEN);
	for (int i = 0; i < 50; i++)
		assert_int_equal(breaker_admit(&b, &c, 1001 + i), BREAKER_DELAY);
	/* rounds that started before it opened end without a say */
	breaker_record(&b, &c, 1100, true, false);
	breaker_record(&b, &c, 1100, false, false);
	assert_int_equal(breaker_state_at(&b, &c, 1100), BREAKER_HALF_OPEN);
	assert_int_equal(breaker_admit(&b, &c, 1100), BREAKER_DELAY);
}

static void test_probe_success_closes(void **state)
{
	struct circuit_breaker_config c = config(2, 1000);
	struct breaker b;

	breaker_init(&b);
	fail_n(&b, &c, 2, 0);
	assert_int_equal(breaker_admit(&b, &c, 1500), BREAKER_PROBE);
	breaker_record(&b, &c, 1600, true, true);
	assert_int_equal(breaker_state_at(&b, &c, 1600), BREAKER_CLOSED);
	assert_int_equal(breaker_admit(&b, &c, 1601), BREAKER_PASS);
	/* a fresh count: one failure is within max_errors again */
	breaker_record(&b, &c, 1700, false, false);
	assert_int_equal(breaker_state_at(&b, &c, 1700), BREAKER_CLOSED);
	breaker_record(&b, &c, 1800, false, false);
	assert_int_equal(breaker_state_at(&b, &c, 1800), BREAKER_OPEN);
	assert_int_equal(b.open_until_ms, 2700);
}

static void test_probe_failure_reopens(void **state)
{
	struct circuit_breaker_config c = config(2, 1000);
	struct breaker b;

	breaker_init(&b);
	fail_n(&b, &c, 2, 0);
	assert_int_equal(breaker_admit(&b, &c, 1000), BREAKER_PROBE);
	breaker_record(&b, &c, 1300, false, true);
	/* open again for a whole window from the probe's failure */
	assert_int_equal(breaker_state_at(&b, &c, 1300), BREAKER_OPEN);
	assert_int_equal(breaker_admit(&b, &c, 2299), BREAKER_DELAY);
	assert_int_equal(breaker_admit(&b, &c, 2300), BREAKER_PROBE);
	breaker_record(&b, &c, 2400, true, true);
	assert_int_equal(breaker_state_at(&b, &c, 2400), BREAKER_CLOSED);
}

static void test_probe_abandoned(void **state)
{
	struct circuit_breaker_config c = config(2, 1000);
	struct breaker b;

	breaker_init(&b);
	fail_n(&b, &c, 2, 0);
	assert_int_equal(breaker_admit(&b, &c, 1000), BREAKER_PROBE);
	assert_int_equal(breaker_admit(&b, &c, 1001), BREAKER_DELAY);
	breaker_probe_abandoned(&b); /* handed back at shutdown */
	assert_int_equal(breaker_admit(&b, &c, 1002), BREAKER_PROBE);
}

static void test_disabled(void **state)
{
	struct circuit_breaker_config c = config(2, 1000);
	struct breaker b;

	c.enabled = 0;
	breaker_init(&b);
	fail_n(&b, &c, 1000, 0);
	assert_int_equal(breaker_state_at(&b, &c, 0), BREAKER_CLOSED);
	assert_int_equal(breaker_admit(&b, &c, 0), BREAKER_PASS);
	/* switched off while open: forgotten */
	c.enabled = 1;
	fail_n(&b, &c, 2, 0);
	assert_int_equal(breaker_state_at(&b, &c, 0), BREAKER_OPEN);
	c.enabled = 0;
	assert_int_equal(breaker_state_at(&b, &c, 1), BREAKER_CLOSED);
	assert_int_equal(breaker_admit(&b, &c, 1), BREAKER_PASS);
	c.enabled = 1;
	assert_int_equal(breaker_state_at(&b, &c, 2), BREAKER_CLOSED);
}

/* xorshift64 for the random walk below. */
static uint64_t next_rand(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Property: under a random stream of admissions and outcomes, the machine keeps its
 * invariants: at most one probe out at a time; nothing passes while open; a closed
 * breaker never counts max_errors failures; it only opens after max_errors failures
 * within one window (or a failed probe). */
static void test_random_walk_property(void **state)
{
	uint64_t seed = 0x1234567ULL;

	for (int run = 0; run < 200; run++) {
		struct circuit_breaker_config c = config(1 + (int)(next_rand(&seed) % 5),
							 100 + (int64_t)(next_rand(&seed) % 900));
		struct breaker b;
		int64_t now = 1;
		int probes_out = 0;
		int64_t fail_times[64];
		int n_fail = 0;

		breaker_init(&b);
		for (int step = 0; step < 2000; step++) {
			now += (int64_t)(next_rand(&seed) % 40);
			uint64_t r = next_rand(&seed) % 10;
			enum breaker_state before = breaker_state_at(&b, &c, now);
			if (r < 5) {
				enum breaker_admission a = breaker_admit(&b, &c, now);
				if (before == BREAKER_OPEN)
					assert_int_equal(a, BREAKER_DELAY);
				if (before == BREAKER_CLOSED)
					assert_int_equal(a, BREAKER_PASS);
				if (a == BREAKER_PROBE) {
					assert_int_equal(before, BREAKER_HALF_OPEN);
					assert_int_equal(probes_out, 0);
					probes_out = 1;
				}
			} else if (r < 7 && probes_out) {
				bool ok = next_rand(&seed) % 2;
				breaker_record(&b, &c, now, ok, true);
				probes_out = 0;
				assert_int_equal(breaker_state_at(&b, &c, now),
						 ok ? BREAKER_CLOSED : BREAKER_OPEN);
				n_fail = 0;
			} else {
				bool ok = r == 9;
				breaker_record(&b, &c, now, ok, false);
				if (before == BREAKER_CLOSED && !ok) {
					fail_times[n_fail++ % 64] = now;
					if (breaker_state_at(&b, &c, now) == BREAKER_OPEN) {
						/* max_errors failures within one window */
						assert_true(n_fail >= c.max_errors);
						int64_t first = fail_times[(n_fail - c.max_errors) % 64];
						assert_true(now - first < c.failure_window_ms);
						n_fail = 0;
					}
				}
			}
			if (b.state == BREAKER_CLOSED)
				assert_true(b.failures < c.max_errors);
			assert_true(b.probing == probes_out || b.state != BREAKER_HALF_OPEN);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults_and_names),
		cmocka_unit_test(test_opens_at_max_errors),
		cmocka_unit_test(test_window_resets),
		cmocka_unit_test(test_half_open_single_probe),
		cmocka_unit_test(test_probe_success_closes),
		cmocka_unit_test(test_probe_failure_reopens),
		cmocka_unit_test(test_probe_abandoned),
		cmocka_unit_test(test_disabled),
		cmocka_unit_test(test_random_walk_property),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
