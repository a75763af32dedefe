/* test_authlimit.c: failed authentications per address (core/authlimit.c): the failures
 * an address may have before it is limited, how long the limit lasts and what
 * Retry-After says, that other addresses are not touched, the bound on audit rows across
 * addresses, and that a table filled by many addresses stays usable. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "core/authlimit.h"

static void test_limit_after_failures(void **state)
{
	struct authlimit *l = authlimit_new(12345);
	struct authlimit_verdict v;
	int64_t t = 1000000;

	for (int i = 0; i < AUTHLIMIT_FAILURES; i++) {
		authlimit_fail(l, "192.0.2.7", t + i, &v);
		assert_false(v.limited);
		assert_true(v.audit);
	}
	/* one more: limited from now on, for a window; the start is audited once */
	authlimit_fail(l, "192.0.2.7", t + 100, &v);
	assert_true(v.limited);
	assert_true(v.started);
	assert_true(v.audit);
	assert_int_equal(v.retry_after_s, AUTHLIMIT_WINDOW_MS / 1000);
	authlimit_fail(l, "192.0.2.7", t + 30100, &v);
	assert_true(v.limited);
	assert_false(v.started);
	assert_false(v.audit);
	assert_int_equal(v.retry_after_s, 30);
	/* another address is not limited */
	authlimit_fail(l, "198.51.100.1", t + 30100, &v);
	assert_false(v.limited);
	/* the limit ends; the count starts over */
	authlimit_fail(l, "192.0.2.7", t + 100 + AUTHLIMIT_WINDOW_MS, &v);
	assert_false(v.limited);
	assert_true(v.audit);
	authlimit_free(l);
}

static void test_failures_spread_out_are_not_limited(void **state)
{
	struct authlimit *l = authlimit_new(1);
	struct authlimit_verdict v;

	/* AUTHLIMIT_FAILURES a window, window after window */
	for (int w = 0; w < 5; w++)
		for (int i = 0; i < AUTHLIMIT_FAILURES; i++) {
			authlimit_fail(l, "2001:db8::1", (int64_t)w * (AUTHLIMIT_WINDOW_MS + 1) + i, &v);
			assert_false(v.limited);
		}
	authlimit_free(l);
}

static void test_audit_bounded_across_addresses(void **state)
{
	struct authlimit *l = authlimit_new(7);
	struct authlimit_verdict v;
	char addr[32];
	int audited = 0;

	for (int i = 0; i < 500; i++) {
		snprintf(addr, sizeof(addr), "10.0.%d.%d", i / 256, i % 256);
		authlimit_fail(l, addr, 5000 + i, &v);
		assert_false(v.limited);
		audited += v.audit;
	}
	assert_int_equal(audited, AUTHLIMIT_AUDIT_PER_MINUTE);
	/* the next minute's first failure says how many were left out */
	authlimit_fail(l, "10.9.9.9", 5000 + 60000, &v);
	assert_int_equal(v.unaudited, 500 - AUTHLIMIT_AUDIT_PER_MINUTE);
	assert_true(v.audit);
	authlimit_fail(l, "10.9.9.9", 5000 + 60001, &v);
	assert_int_equal(v.unaudited, 0);
	authlimit_free(l);
}

static void test_full_table(void **state)
{
	struct authlimit *l = authlimit_new(99);
	struct authlimit_verdict v;
	char addr[48];

	/* many more addresses than places: the table forgets old ones, never fails */
	for (int i = 0; i < AUTHLIMIT_SLOTS * 4; i++) {
		snprintf(addr, sizeof(addr), "2001:db8::%x", i);
		authlimit_fail(l, addr, i, &v);
		assert_false(v.limited);
	}
	/* an address limited just now is remembered while it fails */
	for (int i = 0; i <= AUTHLIMIT_FAILURES; i++)
		authlimit_fail(l, "203.0.113.9", 100000 + i, &v);
	assert_true(v.limited);
	authlimit_fail(l, NULL, 100020, &v); /* an unknown address counts as one */
	assert_false(v.limited);
	authlimit_free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_limit_after_failures),
		cmocka_unit_test(test_failures_spread_out_are_not_limited),
		cmocka_unit_test(test_audit_bounded_across_addresses),
		cmocka_unit_test(test_full_table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
