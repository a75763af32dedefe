/* test_base64.c: util/base64.c against RFC 4648 §10's test vectors, binary bytes, and
 * the texts it must refuse (bad length, foreign characters, padding inside, blanks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "util/base64.h"

static const struct {
	const char *plain, *b64;
} rfc4648[] = {
	{"", ""},           {"f", "Zg=="},         {"fo", "Zm8="},         {"foo", "Zm9v"},
	{"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"},
};

static void test_rfc4648_vectors(void **state)
{
	for (size_t i = 0; i < sizeof(rfc4648) / sizeof(rfc4648[0]); i++) {
		char enc[32];
		unsigned char dec[32];
		size_t n = 99;
		size_t plen = strlen(rfc4648[i].plain);

		assert_true(base64_encoded_size(plen) <= sizeof(enc));
		assert_int_equal(base64_encode(rfc4648[i].plain, plen, enc), strlen(rfc4648[i].b64));
		assert_string_equal(enc, rfc4648[i].b64);
		assert_int_equal(base64_decode(rfc4648[i].b64, strlen(rfc4648[i].b64), dec,
					       sizeof(dec), &n), 0);
		assert_int_equal(n, plen);
		assert_memory_equal(dec, rfc4648[i].plain, plen);
	}
}

static void test_binary_round_trip(void **state)
{
	unsigned char in[256], out[260];
	char text[400];
	size_t n = 0;

	for (int i = 0; i < 256; i++)
		in[i] = (unsigned char)(255 - i);
	for (size_t len = 0; len <= sizeof(in); len += 17) {
		size_t tlen = base64_encode(in, len, text);
		assert_int_equal(tlen + 1, base64_encoded_size(len));
		assert_int_equal(base64_decode(text, tlen, out, sizeof(out), &n), 0);
		assert_int_equal(n, len);
		assert_memory_equal(out, in, len);
	}
}

static void test_refused(void **state)
{
	static const char *const bad[] = {
		"Zm9", "Zm9vY", "Zg=", "Z===", "Zm=v", "Zg==Zg==", " Zm9v", "Zm9v\n", "Zm9*",
		"Zm9vYmFy!!!!",
	};
	unsigned char out[32];
	size_t n = 7;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (base64_decode(bad[i], strlen(bad[i]), out, sizeof(out), &n) == 0)
			fail_msg("\"%s\" was accepted", bad[i]);
	}
	/* room for the decoded bytes is checked up front */
	assert_int_equal(base64_decode("Zm9vYmFy", 8, out, 5, &n), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rfc4648_vectors),
		cmocka_unit_test(test_binary_round_trip),
		cmocka_unit_test(test_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
