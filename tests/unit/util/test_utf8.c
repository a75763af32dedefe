/* test_utf8.c: utf8_valid_prefix, which keeps text that must be UTF-8 (PostgreSQL's text
 * columns, OTLP's protobuf strings) from carrying bytes that are not. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "util/utf8.h"

static size_t prefix(const char *s)
{
	return utf8_valid_prefix((const unsigned char *)s, strlen(s));
}

static void test_valid_text_is_whole(void **state)
{
	assert_int_equal(prefix(""), 0);
	assert_int_equal(prefix("HTTP 503"), 8);
	assert_int_equal(prefix("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x93\xa6"), 14); /* é, €, a 4-byte */
}

static void test_stops_at_the_first_bad_byte(void **state)
{
	assert_int_equal(prefix("ab\xff"), 2);              /* never UTF-8 */
	assert_int_equal(prefix("ab\x80"), 2);              /* a stray continuation */
	assert_int_equal(prefix("ab\xc0\xaf"), 2);          /* an overlong '/' */
	assert_int_equal(prefix("ab\xe2\x82"), 2);          /* a character cut short */
	assert_int_equal(prefix("ab\xe2\x82x"), 2);         /* ... and not continued */
	assert_int_equal(prefix("\xc3\xa9\xc3"), 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_text_is_whole),
		cmocka_unit_test(test_stops_at_the_first_bad_byte),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
