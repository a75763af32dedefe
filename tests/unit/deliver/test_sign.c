/* test_sign.c: deliver/sign.c and core/whsec.c. The vector is the example of the Standard
 * Webhooks specification (github.com/standard-webhooks, "Signature scheme"), checked
 * independently with `openssl dgst -sha256 -mac HMAC`; plus secret rotation (two
 * signatures in one header), and the secrets refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/whsec.h"
#include "deliver/sign.h"

#define SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define MSG_ID "msg_p5jXN8AQM9LWM0D4loKWxJek"
#define TS 1614265330LL
#define BODY "{\"test\": 2432232314}"
#define EXPECTED "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="

static void test_spec_vector(void **state)
{
	char sig[SIGN_V1_LEN];

	assert_int_equal(sign_standard_v1(SECRET, MSG_ID, TS, BODY, strlen(BODY), sig), 0);
	assert_string_equal(sig, EXPECTED);
	/* one byte of the body, the id or the time changes it */
	assert_int_equal(sign_standard_v1(SECRET, MSG_ID, TS + 1, BODY, strlen(BODY), sig), 0);
	assert_string_not_equal(sig, EXPECTED);
	assert_int_equal(sign_standard_v1(SECRET, MSG_ID, TS, BODY, strlen(BODY) - 1, sig), 0);
	assert_string_not_equal(sig, EXPECTED);
}

static void test_binary_body(void **state)
{
	static const unsigned char body[] = {0x00, 0xff, 0x10, 0x00, 0x80};
	char a[SIGN_V1_LEN], b[SIGN_V1_LEN];

	assert_int_equal(sign_standard_v1(SECRET, MSG_ID, TS, body, sizeof(body), a), 0);
	assert_int_equal(sign_standard_v1(SECRET, MSG_ID, TS, body, 1, b), 0);
	assert_string_not_equal(a, b); /* bytes after a NUL are signed too */
}

static void test_rotation_sends_both(void **state)
{
	char header[SIGN_HEADER_LEN], current[SIGN_V1_LEN], previous[SIGN_V1_LEN];
	char *other = whsec_generate(32);

	assert_non_null(other);
	assert_int_equal(sign_webhook_signature(other, SECRET, MSG_ID, TS, BODY, strlen(BODY),
						header), 0);
	assert_int_equal(sign_standard_v1(other, MSG_ID, TS, BODY, strlen(BODY), current), 0);
	assert_int_equal(sign_standard_v1(SECRET, MSG_ID, TS, BODY, strlen(BODY), previous), 0);
	char want[SIGN_HEADER_LEN];
	snprintf(want, sizeof(want), "%s %s", current, previous);
	assert_string_equal(header, want);
	assert_string_equal(previous, EXPECTED);
	/* without a previous secret: one signature */
	assert_int_equal(sign_webhook_signature(SECRET, NULL, MSG_ID, TS, BODY, strlen(BODY),
						header), 0);
	assert_string_equal(header, EXPECTED);
	free(other);
}

static void test_secrets_refused(void **state)
{
	static const char *const bad[] = {
		"MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",   /* no prefix */
		"whsec_",                             /* no key */
		"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaS", /* not base64 (length) */
		"whsec_MfKQ9r8G*YqrTwjUPD8ILPZIo2LaLaSw", /* not base64 (character) */
		"whsec_c2hvcnQ=",                     /* 5 bytes: under 16 */
	};
	char sig[SIGN_V1_LEN];
	unsigned char key[WHSEC_KEY_MAX];
	size_t len;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (sign_standard_v1(bad[i], MSG_ID, TS, BODY, strlen(BODY), sig) == 0)
			fail_msg("signed with \"%s\"", bad[i]);
		assert_int_equal(whsec_decode(bad[i], key, &len), -1);
	}
	assert_int_equal(whsec_decode(SECRET, key, &len), 0);
	assert_int_equal(len, 24);
}

static void test_generated_secrets_decode(void **state)
{
	unsigned char key[WHSEC_KEY_MAX];
	size_t len;
	char *a = whsec_generate(32), *b = whsec_generate(32);

	assert_non_null(a);
	assert_non_null(b);
	assert_string_not_equal(a, b);
	assert_int_equal(strncmp(a, "whsec_", 6), 0);
	assert_int_equal(whsec_decode(a, key, &len), 0);
	assert_int_equal(len, 32);
	assert_null(whsec_generate(WHSEC_KEY_MAX + 1));
	free(a);
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spec_vector),
		cmocka_unit_test(test_binary_body),
		cmocka_unit_test(test_rotation_sends_both),
		cmocka_unit_test(test_secrets_refused),
		cmocka_unit_test(test_generated_secrets_decode),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
