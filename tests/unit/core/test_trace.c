/* test_trace.c: W3C traceparent validation and the child spans outboxd sends. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "core/trace.h"

static void test_valid(void **state)
{
	assert_true(trace_valid("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
	assert_false(trace_valid(NULL));
	assert_false(trace_valid(""));
	assert_false(trace_valid("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
	assert_false(trace_valid("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"));
	assert_false(trace_valid("00-00000000000000000000000000000000-00f067aa0ba902b7-01"));
	assert_false(trace_valid("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"));
	assert_false(trace_valid("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x"));
	assert_false(trace_valid("00-4bf92f3577b34da6a3ce929d0e0e473-600f067aa0ba902b7-01"));
}

static void test_child(void **state)
{
	char out[TRACEPARENT_LEN];
	trace_child("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		    "01a20073-0ecb-7053-bb4e-f80469a6ea56", 0xabc, out);
	assert_string_equal(out, "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000abc-00");
	assert_true(trace_valid(out));
	trace_child(NULL, "01a20073-0ecb-7053-bb4e-f80469a6ea56", 7, out);
	assert_string_equal(out, "00-01a200730ecb7053bb4ef80469a6ea56-0000000000000007-01");
	trace_child("garbage", "01a20073-0ecb-7053-bb4e-f80469a6ea56", 0, out);
	assert_string_equal(out, "00-01a200730ecb7053bb4ef80469a6ea56-0000000000000001-01");
	trace_child(NULL, "01a20073-0ecb-7053-bb4e-f80469a6ea56", 0xfedcba9876543210ULL, out);
	assert_string_equal(out, "00-01a200730ecb7053bb4ef80469a6ea56-fedcba9876543210-01");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid),
		cmocka_unit_test(test_child),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
