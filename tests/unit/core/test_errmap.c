/* test_errmap.c: transport failure classes map to their codes (DNS 502, refused 503,
 * timeout 504, TLS 525, other 520) and stable messages. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "core/errmap.h"

static void test_codes(void **state)
{
	assert_int_equal(errmap_code(TRANSPORT_OK), 0);
	assert_int_equal(errmap_code(TRANSPORT_DNS), 502);
	assert_int_equal(errmap_code(TRANSPORT_REFUSED), 503);
	assert_int_equal(errmap_code(TRANSPORT_TIMEOUT), 504);
	assert_int_equal(errmap_code(TRANSPORT_TLS), 525);
	assert_int_equal(errmap_code(TRANSPORT_OTHER), 520);
}

static void test_messages(void **state)
{
	assert_string_equal(errmap_message(TRANSPORT_OK), "ok");
	assert_string_equal(errmap_message(TRANSPORT_DNS), "dns resolution failed");
	assert_string_equal(errmap_message(TRANSPORT_REFUSED), "connection refused");
	assert_string_equal(errmap_message(TRANSPORT_TIMEOUT), "timeout");
	assert_string_equal(errmap_message(TRANSPORT_TLS), "tls handshake failed");
	assert_string_equal(errmap_message(TRANSPORT_OTHER), "transport error");
}

/* A value outside the enum (a future class, a corrupted field) is an unknown failure. */
static void test_out_of_range(void **state)
{
	assert_int_equal(errmap_code((enum transport_error)99), 520);
	assert_string_equal(errmap_message((enum transport_error)99), "transport error");
	assert_int_equal(errmap_code((enum transport_error)-1), 520);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_codes),
		cmocka_unit_test(test_messages),
		cmocka_unit_test(test_out_of_range),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
