/* test_standard_webhooks.c: the tests' signature verifier (tests/support/standard_webhooks.h)
 * on its own, so an end-to-end test that relies on it can trust its verdict both ways.
 *
 * The vectors are the Standard Webhooks specification's example and HMACs computed apart
 * from any C code here, with `openssl dgst -sha256 -mac HMAC` and Python's hmac module:
 * a 16-byte key (base64 ending in "==") and a 1 MiB body of bytes i % 251. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "standard_webhooks.h"

#define SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define MSG_ID "msg_p5jXN8AQM9LWM0D4loKWxJek"
#define TS_TEXT "1614265330"
#define TS 1614265330LL
#define BODY "{\"test\": 2432232314}"
#define SPEC_SIG "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
/* The same request under a key of 16 bytes 00..0f, and with the 1 MiB body under SECRET. */
#define TWO_PAD_SECRET "whsec_AAECAwQFBgcICQoLDA0ODw=="
#define TWO_PAD_SIG "v1,YA6MmMhwztQQnjVT5s7VnIJrrIpIRYrxFLdJ8TxT/KM="
#define BIG_SIG "v1,DtblojVsTInjRO8r9ytNTKv8Z+aZraPQqdiOzrj2xWo="

static struct standard_webhooks_request request(const char *sig)
{
	return (struct standard_webhooks_request){
		.id = MSG_ID, .timestamp = TS_TEXT, .signature = sig,
		.body = BODY, .body_len = strlen(BODY),
	};
}

static enum standard_webhooks_result verify(const struct standard_webhooks_request *req,
					    const char *secret,
					    struct standard_webhooks_match *m)
{
	return standard_webhooks_verify(req, secret, TS, STANDARD_WEBHOOKS_TOLERANCE_S, m);
}

static void test_good_signature(void **state)
{
	struct standard_webhooks_request req = request(SPEC_SIG);
	struct standard_webhooks_match m;

	assert_int_equal(verify(&req, SECRET, &m), SWH_OK);
	assert_int_equal(m.index, 0);
	assert_int_equal(m.count, 1);
	/* the base64 alone is the same key */
	assert_int_equal(verify(&req, SECRET + 6, NULL), SWH_OK);
}

static void test_wrong_secret(void **state)
{
	struct standard_webhooks_request req = request(SPEC_SIG);

	assert_int_equal(verify(&req, TWO_PAD_SECRET, NULL), SWH_MISMATCH);
	assert_int_equal(verify(&req, "whsec_not*base64", NULL), SWH_BAD_SECRET);
	assert_int_equal(verify(&req, "whsec_", NULL), SWH_BAD_SECRET);
}

/* One byte of the body, the id or the timestamp, and the signature no longer holds. */
static void test_request_changed(void **state)
{
	struct standard_webhooks_request req = request(SPEC_SIG);

	req.body_len--;
	assert_int_equal(verify(&req, SECRET, NULL), SWH_MISMATCH);
	req = request(SPEC_SIG);
	req.id = "msg_p5jXN8AQM9LWM0D4loKWxJeK";
	assert_int_equal(verify(&req, SECRET, NULL), SWH_MISMATCH);
	req = request(SPEC_SIG);
	req.timestamp = "1614265331";
	assert_int_equal(verify(&req, SECRET, NULL), SWH_MISMATCH);
}

static void test_two_padding_characters(void **state)
{
	struct standard_webhooks_request req = request(TWO_PAD_SIG);

	assert_int_equal(verify(&req, TWO_PAD_SECRET, NULL), SWH_OK);
	/* without its padding it is the same key; a third '=' is not base64 */
	assert_int_equal(verify(&req, "whsec_AAECAwQFBgcICQoLDA0ODw", NULL), SWH_OK);
	assert_int_equal(verify(&req, "whsec_AAECAwQFBgcICQoLDA0ODw===", NULL), SWH_BAD_SECRET);
}

static void test_one_mebibyte_body(void **state)
{
	enum { LEN = 1 << 20 };
	unsigned char *body = malloc(LEN);
	struct standard_webhooks_request req = request(BIG_SIG);

	assert_non_null(body);
	for (size_t i = 0; i < LEN; i++)
		body[i] = (unsigned char)(i % 251);
	req.body = body;
	req.body_len = LEN;
	assert_int_equal(verify(&req, SECRET, NULL), SWH_OK);
	/* the last byte counts too */
	body[LEN - 1] ^= 1;
	assert_int_equal(verify(&req, SECRET, NULL), SWH_MISMATCH);
	free(body);
}

/* A rotation sends two signatures: either secret verifies, and says which entry it made;
 * entries of other versions are skipped. */
static void test_several_signatures(void **state)
{
	struct standard_webhooks_request req = request(TWO_PAD_SIG " " SPEC_SIG);
	struct standard_webhooks_match m;

	assert_int_equal(verify(&req, SECRET, &m), SWH_OK);
	assert_int_equal(m.index, 1);
	assert_int_equal(m.count, 2);
	assert_int_equal(verify(&req, TWO_PAD_SECRET, &m), SWH_OK);
	assert_int_equal(m.index, 0);
	req.signature = "v1a,AAAA " SPEC_SIG;
	assert_int_equal(verify(&req, SECRET, &m), SWH_OK);
	assert_int_equal(m.index, 1);
	req.signature = "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";
	assert_int_equal(verify(&req, SECRET, &m), SWH_NO_SIGNATURE);
	assert_int_equal(m.index, -1);
	/* a prefix of the right signature is not the signature */
	req.signature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE";
	assert_int_equal(verify(&req, SECRET, NULL), SWH_MISMATCH);
}

static void test_timestamp_in_milliseconds_refused(void **state)
{
	struct standard_webhooks_request req = request(SPEC_SIG);

	req.timestamp = "1614265330000";
	assert_int_equal(verify(&req, SECRET, NULL), SWH_STALE_TIMESTAMP);
}

static void test_timestamp_ten_minutes_old_refused(void **state)
{
	struct standard_webhooks_request req = request(SPEC_SIG);

	/* at TS + 10 min the request is too old; at TS + 4 min, or 4 min early, it is not */
	assert_int_equal(standard_webhooks_verify(&req, SECRET, TS + 600,
						  STANDARD_WEBHOOKS_TOLERANCE_S, NULL),
			 SWH_STALE_TIMESTAMP);
	assert_int_equal(standard_webhooks_verify(&req, SECRET, TS - 600,
						  STANDARD_WEBHOOKS_TOLERANCE_S, NULL),
			 SWH_STALE_TIMESTAMP);
	assert_int_equal(standard_webhooks_verify(&req, SECRET, TS + 240,
						  STANDARD_WEBHOOKS_TOLERANCE_S, NULL), SWH_OK);
	assert_int_equal(standard_webhooks_verify(&req, SECRET, TS - 240,
						  STANDARD_WEBHOOKS_TOLERANCE_S, NULL), SWH_OK);
}

static void test_malformed_headers(void **state)
{
	static const char *const bad_ts[] = {"", "-1614265330", "+1614265330", " 1614265330",
					     "1614265330.5", "1614265330x"};
	struct standard_webhooks_request req = request(SPEC_SIG);

	for (size_t i = 0; i < sizeof(bad_ts) / sizeof(bad_ts[0]); i++) {
		req.timestamp = bad_ts[i];
		assert_int_equal(verify(&req, SECRET, NULL), SWH_BAD_TIMESTAMP);
	}
	req = request(NULL);
	assert_int_equal(verify(&req, SECRET, NULL), SWH_MISSING_HEADER);
	req = request(SPEC_SIG);
	req.id = NULL;
	assert_int_equal(verify(&req, SECRET, NULL), SWH_MISSING_HEADER);
	req = request("");
	assert_int_equal(verify(&req, SECRET, NULL), SWH_NO_SIGNATURE);
	assert_string_not_equal(standard_webhooks_strerror(SWH_MISMATCH),
				standard_webhooks_strerror(SWH_STALE_TIMESTAMP));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good_signature),
		cmocka_unit_test(test_wrong_secret),
		cmocka_unit_test(test_request_changed),
		cmocka_unit_test(test_two_padding_characters),
		cmocka_unit_test(test_one_mebibyte_body),
		cmocka_unit_test(test_several_signatures),
		cmocka_unit_test(test_timestamp_in_milliseconds_refused),
		cmocka_unit_test(test_timestamp_ten_minutes_old_refused),
		cmocka_unit_test(test_malformed_headers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
