/* test_header.c: core/header.c, the one check of what may go into an HTTP header line —
 * every control character refused (CR and LF above all: they would start a header of
 * their own), the tab, visible ASCII and UTF-8 bytes kept; header names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "core/header.h"

static void test_values(void **state)
{
	static const char *const ok[] = {
		"", "Bearer abc.def-123_~+/=", "a b\tc", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
		"caf\xc3\xa9 \xe2\x82\xac", "\x80\xff",
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		assert_true(header_value_valid(ok[i], strlen(ok[i])));

	/* every byte below 0x20 but the tab, and DEL, at the start, middle and end */
	for (int c = 0; c < 0x80; c++) {
		int bad = (c < 0x20 && c != '\t') || c == 0x7f;
		char v[3][8];
		memcpy(v[0], "\0ab", 3);
		memcpy(v[1], "a\0b", 3);
		memcpy(v[2], "ab\0", 3);
		v[0][0] = v[1][1] = v[2][2] = (char)c;
		for (int at = 0; at < 3; at++)
			assert_int_equal(header_value_valid(v[at], 3), !bad);
	}
	/* every byte at every place of longer values, which are checked eight bytes at a
	 * time: each word, across the words' edges and in the tail */
	for (int c = 0; c < 0x100; c++) {
		int bad = (c < 0x20 && c != '\t') || c == 0x7f;
		for (size_t len = 8; len <= 27; len += 19) {
			for (size_t at = 0; at < len; at++) {
				char w[32];
				memset(w, c == 'x' ? 'y' : 'x', sizeof(w));
				w[at] = (char)c;
				assert_int_equal(header_value_valid(w, len), !bad);
			}
		}
	}
	/* a tab in a word does not hide a CR in the same word */
	assert_false(header_value_valid("abc\tdef\rghijklm", 15));
	assert_true(header_value_valid("abc\tdefghij\tklm", 15));
	/* UTF-8 bytes around a control character */
	assert_false(header_value_valid("\xe2\x82\xac\x01\xe2\x82\xac\xff", 8));
	/* the attacks of a smuggled header: CRLF, a bare LF, a bare CR, a NUL cut */
	static const char *const attacks[] = {
		"abc\r\nX-Injected: 1\r\nHost: evil", "abc\nX-Injected: 1", "abc\rX-Injected: 1",
	};
	for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++)
		assert_false(header_value_valid(attacks[i], strlen(attacks[i])));
	assert_false(header_value_valid("abc\0X-Injected: 1", 17));
	/* the length is the caller's: a NUL inside it counts */
	assert_true(header_value_valid("abc\0def", 3));
}

static void test_names(void **state)
{
	assert_true(header_name_valid("X-Api-Key"));
	assert_true(header_name_valid("x_key_2"));
	char longest[HEADER_NAME_MAX + 2];
	memset(longest, 'a', sizeof(longest));
	longest[HEADER_NAME_MAX] = '\0';
	assert_true(header_name_valid(longest));
	longest[HEADER_NAME_MAX] = 'a';
	longest[HEADER_NAME_MAX + 1] = '\0';
	assert_false(header_name_valid(longest));
	static const char *const bad[] = {"", "X Key", "X-Key:", "X\r\nHost", "X\tK", "K\xc3\xa9",
					  "a/b", "(x)"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(header_name_valid(bad[i]));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_values),
		cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
