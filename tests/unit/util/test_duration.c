/* test_duration.c: "500ms" / "3s" / "1h" parsing and shortest-form formatting
 * (util/duration.c), with overflow edges and a round-trip loop. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "util/duration.h"

static void assert_parses(const char *text, int64_t want)
{
	int64_t ms = -12345;

	if (duration_parse(text, &ms) != 0)
		fail_msg("\"%s\" was rejected", text);
	if (ms != want)
		fail_msg("\"%s\": got %lld, want %lld", text, (long long)ms, (long long)want);
}

static void assert_rejects(const char *text)
{
	int64_t ms = -12345;

	if (duration_parse(text, &ms) != -1)
		fail_msg("\"%s\" was accepted", text ? text : "(null)");
	assert_true(ms == -12345); /* untouched on error */
}

static void test_parse_units(void **state)
{
	assert_parses("500ms", 500);
	assert_parses("1ms", 1);
	assert_parses("0ms", 0);
	assert_parses("0s", 0);
	assert_parses("3s", 3000);
	assert_parses("60m", 3600000);
	assert_parses("1h", 3600000);
	assert_parses("2d", 172800000);
	assert_parses("1500ms", 1500);
	assert_parses("007s", 7000);
}

static void test_parse_rejects(void **state)
{
	assert_rejects(NULL);
	assert_rejects("");
	assert_rejects("3");        /* a unit is mandatory */
	assert_rejects("s");
	assert_rejects("ms");
	assert_rejects("-1s");
	assert_rejects("+1s");
	assert_rejects(" 3s");
	assert_rejects("3s ");
	assert_rejects("3 s");
	assert_rejects("1.5s");
	assert_rejects("3S");
	assert_rejects("3sec");
	assert_rejects("3mss");
	assert_rejects("3w");
	assert_rejects("1h30m");
	assert_rejects("0x10s");
}

static void test_parse_overflow(void **state)
{
	assert_parses("9223372036854775807ms", INT64_MAX);
	assert_rejects("9223372036854775808ms");
	assert_rejects("99999999999999999999999ms");
	assert_parses("9223372036854775s", 9223372036854775000LL);
	assert_rejects("9223372036854776s");
	assert_parses("106751991167d", 106751991167LL * 86400000LL);
	assert_rejects("106751991168d");
}

static void assert_formats(int64_t ms, const char *want)
{
	char buf[32];

	assert_string_equal(duration_format(ms, buf, sizeof(buf)), want);
}

static void test_format(void **state)
{
	assert_formats(0, "0s");
	assert_formats(1, "1ms");
	assert_formats(999, "999ms");
	assert_formats(1000, "1s");
	assert_formats(1500, "1500ms");
	assert_formats(3000, "3s");
	assert_formats(90000, "90s");
	assert_formats(250, "250ms");
	assert_formats(432000000, "5d");
	assert_formats(60000, "1m");
	assert_formats(3600000, "1h");     /* "60m" is written "1h" */
	assert_formats(5400000, "90m");
	assert_formats(86400000, "1d");
	assert_formats(172800000, "2d");
	assert_formats(90000000, "25h");
	assert_formats(-3000, "-3s");
	assert_formats(INT64_MAX, "9223372036854775807ms");
	assert_formats(INT64_MIN, "-9223372036854775808ms");
}

static void test_format_small_buffer(void **state)
{
	char buf[4];

	memset(buf, 'x', sizeof(buf));
	assert_string_equal(duration_format(1500, buf, 3), "15");
	assert_int_equal(buf[3], 'x'); /* nothing written past len */
	assert_string_equal(duration_format(3000, buf, sizeof(buf)), "3s");
	buf[0] = 'q';
	duration_format(3000, buf, 0);
	assert_int_equal(buf[0], 'q');
}

/* Property: parse(format(ms)) == ms, and format picks the largest exact unit. */
static void test_round_trip(void **state)
{
	static const int64_t scales[] = {1, 1000, 60000, 3600000, 86400000};
	uint64_t s = 88172645463325252ULL;
	char buf[32];

	for (int i = 0; i < 20000; i++) {
		int64_t ms, back = -1;

		s ^= s << 13;
		s ^= s >> 7;
		s ^= s << 17;
		ms = (int64_t)(s % 1000000) * scales[s % 5];
		duration_format(ms, buf, sizeof(buf));
		assert_int_equal(duration_parse(buf, &back), 0);
		assert_true(back == ms);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_units),
		cmocka_unit_test(test_parse_rejects),
		cmocka_unit_test(test_parse_overflow),
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_format_small_buffer),
		cmocka_unit_test(test_round_trip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
