/* test_buf.c: the capped growing buffer (util/buf.c): contents, the hard cap, and that a
 * refused append leaves the buffer as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "util/buf.h"

static void test_init_free(void **state)
{
	struct buf b;

	buf_init(&b, 100);
	assert_null(b.data);
	assert_int_equal(b.len, 0);
	assert_int_equal(b.cap, 0);
	assert_int_equal(b.max, 100);
	buf_free(&b);
	assert_null(b.data);
	buf_free(&b); /* twice is harmless */
}

static void test_append(void **state)
{
	struct buf b;

	buf_init(&b, 1024);
	assert_int_equal(buf_append(&b, "abc", 3), 0);
	assert_int_equal(b.len, 3);
	assert_string_equal(b.data, "abc");
	assert_int_equal(buf_append(&b, "de", 2), 0);
	assert_string_equal(b.data, "abcde");
	assert_int_equal(buf_append(&b, "x\0y", 3), 0); /* bytes, not a string */
	assert_int_equal(b.len, 8);
	assert_memory_equal(b.data, "abcdex\0y", 9);
	buf_free(&b);
}

static void test_append_empty(void **state)
{
	struct buf b;

	buf_init(&b, 10);
	assert_int_equal(buf_append(&b, NULL, 0), 0);
	assert_non_null(b.data);
	assert_string_equal(b.data, "");
	assert_int_equal(b.len, 0);
	buf_free(&b);
}

static void test_appendf(void **state)
{
	struct buf b;

	buf_init(&b, 1024);
	assert_int_equal(buf_appendf(&b, "%d-%s", 42, "x"), 0);
	assert_string_equal(b.data, "42-x");
	assert_int_equal(buf_appendf(&b, "%s", ""), 0);
	assert_int_equal(buf_appendf(&b, "[%05.1f]", 2.25), 0);
	assert_string_equal(b.data, "42-x[002.2]");
	assert_int_equal(b.len, 11);
	buf_free(&b);
}

static void test_cap(void **state)
{
	struct buf b;

	buf_init(&b, 5);
	assert_int_equal(buf_append(&b, "abcde", 5), 0);
	assert_int_equal(buf_append(&b, "f", 1), -1);
	assert_int_equal(b.len, 5);
	assert_string_equal(b.data, "abcde");
	assert_int_equal(buf_appendf(&b, "%d", 1), -1);
	assert_string_equal(b.data, "abcde");
	assert_true(b.cap <= 6);

	buf_reset(&b);
	assert_int_equal(b.len, 0);
	assert_string_equal(b.data, "");
	assert_int_equal(buf_appendf(&b, "%s", "123456"), -1);
	assert_string_equal(b.data, "");
	assert_int_equal(buf_appendf(&b, "%s", "12345"), 0);
	assert_string_equal(b.data, "12345");
	/* a length that would wrap len + n must be refused before anything is read */
	assert_int_equal(buf_append(&b, "z", SIZE_MAX), -1);
	assert_int_equal(b.len, 5);
	buf_free(&b);

	buf_init(&b, 0);
	assert_int_equal(buf_append(&b, "", 0), 0);
	assert_int_equal(buf_append(&b, "a", 1), -1);
	buf_free(&b);
}

/* Property: byte-at-a-time growth reaches exactly the cap, keeps every byte, and never
 * allocates beyond max + 1. */
static void test_growth(void **state)
{
	const size_t max = 100000;
	struct buf b;

	buf_init(&b, max);
	for (size_t i = 0; i < max; i++) {
		char c = (char)('a' + i % 26);

		assert_int_equal(buf_append(&b, &c, 1), 0);
	}
	assert_int_equal(buf_append(&b, "!", 1), -1);
	assert_int_equal(b.len, max);
	assert_true(b.cap <= max + 1);
	assert_int_equal(strlen(b.data), max);
	for (size_t i = 0; i < max; i++)
		assert_int_equal(b.data[i], 'a' + i % 26);
	buf_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init_free),
		cmocka_unit_test(test_append),
		cmocka_unit_test(test_append_empty),
		cmocka_unit_test(test_appendf),
		cmocka_unit_test(test_cap),
		cmocka_unit_test(test_growth),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
