/* test_metrics_circuits.c: the circuit states core/metrics publishes for GET /v1/stats
 * (metrics_circuit, metrics_circuit_state): read back for any number of subscriptions,
 * beyond the 1,024 that get labelled series in /metrics; an open circuit reads half-open
 * once its window is over; a closed one is forgotten. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"

#define SUBS 3000

static void sub_id(int i, char out[40])
{
	snprintf(out, 40, "0190a0b0-0000-7000-8000-%012d", i);
}

/* 3,000 subscriptions publish a breaker each (more than the metrics' 1,024 labelled
 * slots); every third is open: each reads back as published, in any order. */
static void test_many_subscriptions(void **state)
{
	char id[40];
	int64_t now = 1000000;

	for (int i = SUBS - 1; i >= 0; i--) {
		sub_id(i, id);
		metrics_circuit(id, i % 3 == 0 ? 1 : 0, i % 3 == 0 ? now + 60000 : 0);
	}
	for (int i = 0; i < SUBS; i++) {
		sub_id(i, id);
		assert_int_equal(metrics_circuit_state(id, now), i % 3 == 0 ? 1 : 0);
	}
	/* the last one published, far beyond the labelled slots, closes and reopens */
	sub_id(SUBS - 1, id);
	metrics_circuit(id, 1, now + 1000);
	assert_int_equal(metrics_circuit_state(id, now), 1);
	assert_int_equal(metrics_circuit_state(id, now + 1000), 2); /* its window is over */
	metrics_circuit(id, 2, 0);
	assert_int_equal(metrics_circuit_state(id, now), 2);
	metrics_circuit(id, 0, 0);
	assert_int_equal(metrics_circuit_state(id, now), 0);
	/* closing every open one leaves none open */
	for (int i = 0; i < SUBS; i += 3) {
		sub_id(i, id);
		metrics_circuit(id, 0, 0);
	}
	for (int i = 0; i < SUBS; i++) {
		sub_id(i, id);
		assert_int_equal(metrics_circuit_state(id, now), 0);
	}
}

static void test_unknown_and_null(void **state)
{
	assert_int_equal(metrics_circuit_state("0190a0b0-0000-7000-8000-999999999999", 0), 0);
	assert_int_equal(metrics_circuit_state(NULL, 0), 0);
	metrics_circuit(NULL, 1, 0); /* ignored */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_many_subscriptions),
		cmocka_unit_test(test_unknown_and_null),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
