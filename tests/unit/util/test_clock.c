/* test_clock.c: RFC 3339 formatting and parsing (util/clock.c) and the clocks' basic
 * sanity (no timing assertions). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "util/clock.h"

static void assert_formats(int64_t ms, const char *want)
{
	char buf[RFC3339_LEN];

	assert_string_equal(clock_format_rfc3339(ms, buf), want);
}

static void assert_parses(const char *text, int64_t want)
{
	int64_t ms = -12345;

	if (clock_parse_rfc3339(text, &ms) != 0)
		fail_msg("\"%s\" was rejected", text);
	if (ms != want)
		fail_msg("\"%s\": got %lld, want %lld", text, (long long)ms, (long long)want);
}

static void assert_rejects(const char *text)
{
	int64_t ms = -12345;

	if (clock_parse_rfc3339(text, &ms) != -1)
		fail_msg("\"%s\" was accepted", text ? text : "(null)");
	assert_true(ms == -12345);
}

static void test_format(void **state)
{
	assert_formats(0, "1970-01-01T00:00:00.000Z");
	assert_formats(1, "1970-01-01T00:00:00.001Z");
	assert_formats(-1, "1969-12-31T23:59:59.999Z");
	assert_formats(1795302255123LL, "2026-11-21T23:04:15.123Z");
	assert_formats(1795302255000LL, "2026-11-21T23:04:15.000Z");
	assert_formats(1709208000000LL, "2024-02-29T12:00:00.000Z");
	assert_formats(951868800000LL, "2000-03-01T00:00:00.000Z");
	/* clamped to what RFC 3339 can write */
	assert_formats(INT64_MAX, "9999-12-31T23:59:59.999Z");
	assert_formats(INT64_MIN, "0000-01-01T00:00:00.000Z");
}

static void test_parse(void **state)
{
	assert_parses("1970-01-01T00:00:00Z", 0);
	assert_parses("1970-01-01T00:00:00.000Z", 0);
	assert_parses("1969-12-31T23:59:59.999Z", -1);
	assert_parses("2026-11-21T23:04:15Z", 1795302255000LL);
	assert_parses("2026-11-21T23:04:15.123Z", 1795302255123LL);
	assert_parses("2026-11-21T23:04:15.1Z", 1795302255100LL);
	assert_parses("2026-11-21T23:04:15.12Z", 1795302255120LL);
	assert_parses("2026-11-21T23:04:15.123456789Z", 1795302255123LL); /* truncated */
	assert_parses("2026-11-21T23:04:15.9999Z", 1795302255999LL);
	assert_parses("2026-11-21t23:04:15z", 1795302255000LL);
	assert_parses("2024-02-29T12:00:00Z", 1709208000000LL);
	/* a leap second reads as the first second of the next minute */
	assert_parses("2016-12-31T23:59:60Z", 1483228800000LL);
}

static void test_parse_offsets(void **state)
{
	/* 01:04:15 at +02:00 is 23:04:15 the day before in UTC */
	assert_parses("2026-11-22T01:04:15+02:00", 1795302255000LL);
	assert_parses("2026-11-21T17:34:15.123-05:30", 1795302255123LL);
	assert_parses("2026-11-21T23:04:15+00:00", 1795302255000LL);
	assert_parses("2026-11-21T23:04:15-00:00", 1795302255000LL);
	assert_parses("1970-01-01T00:00:00+23:59", -(23 * 3600 + 59 * 60) * 1000LL);
}

static void test_parse_rejects(void **state)
{
	assert_rejects(NULL);
	assert_rejects("");
	assert_rejects("2026-11-21");
	assert_rejects("2026-11-21T23:04");
	assert_rejects("2026-11-21T23:04:15");      /* no zone */
	assert_rejects("2026-11-21 23:04:15Z");
	assert_rejects("2026-11-21T23:04:15.Z");
	assert_rejects("2026-11-21T23:04:15Z ");
	assert_rejects(" 2026-11-21T23:04:15Z");
	assert_rejects("2026-11-21T23:04:15+0200");
	assert_rejects("2026-11-21T23:04:15+02");
	assert_rejects("2026-11-21T23:04:15+24:00");
	assert_rejects("2026-11-21T23:04:15+02:60");
	assert_rejects("2026-13-01T00:00:00Z");
	assert_rejects("2026-00-01T00:00:00Z");
	assert_rejects("2026-11-00T00:00:00Z");
	assert_rejects("2026-11-31T00:00:00Z");
	assert_rejects("2026-02-29T00:00:00Z");     /* not a leap year */
	assert_rejects("1900-02-29T00:00:00Z");
	assert_rejects("2026-11-21T24:00:00Z");
	assert_rejects("2026-11-21T23:60:00Z");
	assert_rejects("2026-11-21T23:04:61Z");
	assert_rejects("26-11-21T23:04:15Z");
	assert_rejects("2026-1-21T23:04:15Z");
	assert_rejects("+2026-11-21T23:04:15Z");
	assert_rejects("2026/11/21T23:04:15Z");
}

/* Property: every millisecond in years 0000-9999 survives format then parse. */
static void test_round_trip(void **state)
{
	const int64_t lo = -62167219200000LL, hi = 253402300799999LL;
	uint64_t s = 0x853c49e6748fea9bULL;
	char buf[RFC3339_LEN];

	for (int i = 0; i < 20000; i++) {
		int64_t ms, back = 0;

		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		ms = lo + (int64_t)(s % (uint64_t)(hi - lo + 1));
		clock_format_rfc3339(ms, buf);
		assert_int_equal(strlen(buf), 24);
		assert_int_equal(clock_parse_rfc3339(buf, &back), 0);
		assert_true(back == ms);
	}
}

static void test_clocks(void **state)
{
	int64_t a = clock_mono_ms(), b;
	int64_t ua = clock_mono_us(), ub;

	assert_true(clock_now_ms() > 1700000000000LL); /* after 2023-11 */
	for (int i = 0; i < 1000; i++) {
		b = clock_mono_ms();
		ub = clock_mono_us();
		assert_true(b >= a);
		assert_true(ub >= ua);
		a = b;
		ua = ub;
	}
	/* the two monotonic readings are the same clock in different units */
	assert_true(clock_mono_us() / 1000 >= a);
}

/* The nanosecond readings are the same clocks, to the nanosecond: over a thousand
 * readings some do not end in 000 (a microsecond clock scaled up always would). */
static void test_nanosecond_clocks(void **state)
{
	int64_t us = clock_now_us(), ns = clock_now_ns();
	int64_t mono_us = clock_mono_us(), mono_ns = clock_mono_ns();
	int finer = 0;

	assert_true(ns / 1000 >= us && ns / 1000 - us < 5000000);
	assert_true(mono_ns / 1000 >= mono_us && mono_ns / 1000 - mono_us < 5000000);
	for (int i = 0; i < 1000; i++) {
		int64_t next = clock_mono_ns();
		assert_true(next >= mono_ns);
		mono_ns = next;
		finer |= next % 1000 != 0 || clock_now_ns() % 1000 != 0;
	}
	assert_true(finer);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_parse),
		cmocka_unit_test(test_parse_offsets),
		cmocka_unit_test(test_parse_rejects),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_clocks),
		cmocka_unit_test(test_nanosecond_clocks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
