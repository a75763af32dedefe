/* test_file.c: file_read_stream reads the rest of a stream, NUL-terminated, however long. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "util/file.h"

static void test_reads_everything(void **state)
{
	FILE *f = tmpfile();
	assert_non_null(f);
	for (int i = 0; i < 10000; i++)
		fputc('a' + i % 26, f);
	rewind(f);
	size_t len = 0;
	char *text = file_read_stream(f, &len);
	assert_non_null(text);
	assert_int_equal(len, 10000);
	assert_int_equal(strlen(text), 10000);
	assert_int_equal(text[9999], 'a' + 9999 % 26);
	free(text);
	/* at its end: an empty string, not NULL */
	text = file_read_stream(f, &len);
	assert_non_null(text);
	assert_int_equal(len, 0);
	assert_string_equal(text, "");
	free(text);
	fclose(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reads_everything),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
