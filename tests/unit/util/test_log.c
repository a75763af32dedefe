/* test_log.c: the one-line stderr log (util/log.c): line shape, level filtering, control
 * characters and truncation. stderr is pointed at a temporary file while a test logs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/log.h"

struct capture {
	FILE *file;
	int saved_fd;
};

static void capture_start(struct capture *c)
{
	fflush(stderr);
	c->file = tmpfile();
	assert_non_null(c->file);
	c->saved_fd = dup(STDERR_FILENO);
	assert_true(c->saved_fd >= 0);
	assert_true(dup2(fileno(c->file), STDERR_FILENO) >= 0);
}

/* Restores stderr; returns what was written (returned to caller, free it). */
static char *capture_end(struct capture *c)
{
	long n;
	char *text;

	fflush(stderr);
	assert_true(dup2(c->saved_fd, STDERR_FILENO) >= 0);
	close(c->saved_fd);
	n = ftell(c->file);
	assert_true(n >= 0);
	text = calloc(1, (size_t)n + 1);
	assert_non_null(text);
	rewind(c->file);
	assert_int_equal(fread(text, 1, (size_t)n, c->file), (size_t)n);
	fclose(c->file);
	return text;
}

/* "YYYY-MM-DDTHH:MM:SS.mmmZ " */
static void assert_timestamp_prefix(const char *line)
{
	static const char shape[] = "dddd-dd-ddTdd:dd:dd.dddZ ";

	for (size_t i = 0; i < sizeof(shape) - 1; i++) {
		if (shape[i] == 'd')
			assert_true(line[i] >= '0' && line[i] <= '9');
		else
			assert_int_equal(line[i], shape[i]);
	}
}

static void test_line_shape(void **state)
{
	struct capture c;
	char *out;

	log_set_level(LOG_INFO);
	capture_start(&c);
	log_info("delivered %d of %s", 3, "batch");
	out = capture_end(&c);
	assert_int_equal(strlen(out), 25 + strlen("info delivered 3 of batch\n"));
	assert_timestamp_prefix(out);
	assert_string_equal(out + 25, "info delivered 3 of batch\n");
	free(out);
}

static void test_levels(void **state)
{
	struct capture c;
	char *out;

	log_set_level(LOG_INFO); /* the default */
	capture_start(&c);
	log_debug("hidden");
	log_info("i");
	log_warn("w");
	log_error("e");
	out = capture_end(&c);
	assert_null(strstr(out, "hidden"));
	assert_non_null(strstr(out, " info i\n"));
	assert_non_null(strstr(out, " warn w\n"));
	assert_non_null(strstr(out, " error e\n"));
	free(out);

	log_set_level(LOG_ERROR);
	capture_start(&c);
	log_warn("w");
	log_error("e");
	out = capture_end(&c);
	assert_null(strstr(out, " warn w"));
	assert_non_null(strstr(out, " error e\n"));
	free(out);

	log_set_level(LOG_DEBUG);
	capture_start(&c);
	log_debug("shown");
	out = capture_end(&c);
	assert_string_equal(out + 25, "debug shown\n");
	free(out);
	log_set_level(LOG_INFO);
}

static void test_one_line(void **state)
{
	struct capture c;
	char *out;

	capture_start(&c);
	log_warn("peer said: %s", "bad\nrequest\r\x01!");
	out = capture_end(&c);
	assert_string_equal(out + 25, "warn peer said: bad request ?!\n");
	free(out);
}

static void test_truncated(void **state)
{
	char *big = malloc(10000);
	struct capture c;
	char *out;
	size_t n;

	assert_non_null(big);
	memset(big, 'x', 9999);
	big[9999] = '\0';
	capture_start(&c);
	log_info("%s", big);
	out = capture_end(&c);
	n = strlen(out);
	assert_true(n < 4200);
	assert_string_equal(out + n - 4, "...\n");
	assert_true(strchr(out, '\n') == out + n - 1); /* still one line */
	free(out);
	free(big);
}

static void test_parse(void **state)
{
	enum log_level l = LOG_ERROR;

	assert_int_equal(log_level_parse("debug", &l), 0);
	assert_int_equal(l, LOG_DEBUG);
	assert_int_equal(log_level_parse("INFO", &l), 0);
	assert_int_equal(l, LOG_INFO);
	assert_int_equal(log_level_parse("warn", &l), 0);
	assert_int_equal(l, LOG_WARN);
	assert_int_equal(log_level_parse("warning", &l), 0);
	assert_int_equal(l, LOG_WARN);
	assert_int_equal(log_level_parse("error", &l), 0);
	assert_int_equal(l, LOG_ERROR);
	assert_int_equal(log_level_parse("verbose", &l), -1);
	assert_int_equal(log_level_parse("", &l), -1);
	assert_int_equal(log_level_parse(NULL, &l), -1);
	assert_int_equal(l, LOG_ERROR);
}

static void test_json_lines(void **state)
{
	struct capture c;
	enum log_format f;

	assert_int_equal(log_format_parse("json", &f), 0);
	assert_int_equal(f, LOG_FORMAT_JSON);
	assert_int_equal(log_format_parse("yaml", &f), -1);
	log_set_format(LOG_FORMAT_JSON);
	capture_start(&c);
	log_warn("say \"hi\" to C:\\temp\nnext");
	char *text = capture_end(&c);
	log_set_format(LOG_FORMAT_TEXT);
	/* One JSON object per line, quotes and backslashes escaped, newline replaced. */
	assert_int_equal(strncmp(text, "{\"time\":\"", 9), 0);
	assert_non_null(strstr(text, "\"level\":\"warn\",\"msg\":\"say \\\"hi\\\" to C:\\\\temp next\"}\n"));
	assert_int_equal(strchr(text, '\n') - text + 1, (long)strlen(text));
	free(text);
}

/* Audit records: whatever the level, one line; JSON members join the line's object. */
static void test_records(void **state)
{
	struct capture c;

	log_set_level(LOG_ERROR);
	log_set_format(LOG_FORMAT_JSON);
	capture_start(&c);
	log_record("EXECUTED", "{\"delivery_id\":\"d1\",\"code\":200}");
	log_record("DEAD", "{}");
	log_record("EVIL\"msg", "{\"a\":1}\n{\"forged\":true}");
	char *text = capture_end(&c);
	log_set_format(LOG_FORMAT_TEXT);
	log_set_level(LOG_INFO);
	assert_non_null(strstr(text, "\"level\":\"info\",\"msg\":\"EXECUTED\",\"delivery_id\":\"d1\","
				     "\"code\":200}\n"));
	assert_non_null(strstr(text, "\"msg\":\"DEAD\"}\n"));
	assert_non_null(strstr(text, "\"msg\":\"record\"}\n")); /* bad word, bad fields: dropped */
	assert_null(strstr(text, "forged"));
	int lines = 0;
	for (const char *p = text; *p; p++)
		lines += *p == '\n';
	assert_int_equal(lines, 3);
	free(text);

	capture_start(&c);
	log_record("FAILED", "{\"code\":500}");
	text = capture_end(&c);
	assert_timestamp_prefix(text);
	assert_non_null(strstr(text, " info FAILED {\"code\":500}\n"));
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_lines),
		cmocka_unit_test(test_records),
		cmocka_unit_test(test_line_shape),
		cmocka_unit_test(test_levels),
		cmocka_unit_test(test_one_line),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_parse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
