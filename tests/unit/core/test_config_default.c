/* test_config_default.c: the configuration file an installed outboxd reads when given
 * none. The path is fixed at build time (OUTBOXD_DEFAULT_CONFIG: make install and the
 * Debian package set it), so this test builds core/config.c with one of its own; the
 * development build's empty default is covered by test_config. */
#define OUTBOXD_DEFAULT_CONFIG "/etc/outboxd-test/outboxd.conf"
#include "../../../src/core/config.c"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

static void test_default_when_none_given(void **state)
{
	char *none[] = {NULL};
	assert_string_equal(config_default_file(), "/etc/outboxd-test/outboxd.conf");
	assert_string_equal(config_file_path(none, 0, none), "/etc/outboxd-test/outboxd.conf");
}

static void test_given_file_wins(void **state)
{
	char *env[] = {"OUTBOXD_CONFIG=/srv/a.conf", NULL};
	char *flag[] = {"--config", "/srv/b.conf"};
	char *flag_eq[] = {"--config=/srv/c.conf"};
	char *none[] = {NULL};
	assert_string_equal(config_file_path(env, 0, none), "/srv/a.conf");
	assert_string_equal(config_file_path(env, 2, flag), "/srv/b.conf");
	assert_string_equal(config_file_path(none, 1, flag_eq), "/srv/c.conf");
}

/* An empty --config or OUTBOXD_CONFIG turns the default off: no file at all. */
static void test_empty_means_no_file(void **state)
{
	char *env[] = {"OUTBOXD_CONFIG=", NULL};
	char *flag[] = {"--config="};
	char *none[] = {NULL};
	assert_null(config_file_path(env, 0, none));
	assert_null(config_file_path(none, 1, flag));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_when_none_given),
		cmocka_unit_test(test_given_file_wins),
		cmocka_unit_test(test_empty_means_no_file),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
