/* test_secretbox.c: core/secretbox.c — a sealed text opens with its key and context only;
 * the format is the documented one (opened here with OpenSSL directly); tampering, a
 * wrong key, a key id that is not ours, another row's context and a newer format are each
 * refused with their own error; keys are read from hex and base64, and a bad key text is
 * refused with a message that does not repeat it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "core/secretbox.h"
#include "util/base64.h"

#define SUB_ID "0193a0c4-7e55-7b1c-9a3e-5f0d2c8b1a77"
#define DOC "{\"auth\":{\"type\":\"basic\",\"username\":\"ann\",\"password\":\"b4sic-pw!\"}}"

static struct secretbox_key key_of(unsigned char fill)
{
	unsigned char raw[SECRETBOX_KEY_LEN];
	struct secretbox_key k;

	memset(raw, fill, sizeof(raw));
	secretbox_key_from_bytes(raw, &k);
	return k;
}

static char *seal(const struct secretbox_key *k, const char *context, const char *plain)
{
	char *out = NULL;

	assert_int_equal(secretbox_seal(k, context, plain, strlen(plain), &out), SECRETBOX_OK);
	assert_non_null(out);
	return out;
}

static void test_round_trip(void **state)
{
	struct secretbox_key k = key_of(7);
	const char *texts[] = {DOC, "", "{}", "q v&l=ue/\xc3\xbc"};

	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		char *sealed = seal(&k, SUB_ID, texts[i]), *plain = NULL;
		size_t len = 99;

		assert_true(secretbox_is_sealed(sealed));
		assert_null(strstr(sealed, "b4sic"));
		assert_int_equal(secretbox_open(&k, SUB_ID, sealed, &plain, &len), SECRETBOX_OK);
		assert_int_equal(len, strlen(texts[i]));
		assert_string_equal(plain, texts[i]);
		free(plain);
		free(sealed);
	}
	/* a fresh nonce each time: the same text seals differently */
	char *a = seal(&k, SUB_ID, DOC), *b = seal(&k, SUB_ID, DOC);
	assert_string_not_equal(a, b);
	free(a);
	free(b);
}

/* The documented format, read without secretbox: obx1:<first 8 hex of SHA-256(key)>:
 * base64(nonce | ciphertext | tag), AAD = "obx1:<id>:" + context. */
static void test_format(void **state)
{
	struct secretbox_key k = key_of(0);
	char *sealed = seal(&k, SUB_ID, DOC);
	char id[SECRETBOX_KEY_ID_LEN + 1];

	/* SHA-256 of 32 zero bytes is 66687aad... */
	assert_string_equal(k.id, "66687aad");
	assert_int_equal(strncmp(sealed, "obx1:66687aad:", 14), 0);
	assert_int_equal(secretbox_sealed_key_id(sealed, id), 0);
	assert_string_equal(id, "66687aad");

	unsigned char raw[512], out[512], aad[128];
	size_t n = 0;
	int len = 0, fin = 0;
	assert_int_equal(base64_decode(sealed + 14, strlen(sealed + 14), raw, sizeof(raw), &n), 0);
	assert_int_equal(n, 12 + strlen(DOC) + 16);
	int aad_len = snprintf((char *)aad, sizeof(aad), "obx1:66687aad:%s", SUB_ID);
	EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
	assert_int_equal(EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL), 1);
	assert_int_equal(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, 12, NULL), 1);
	assert_int_equal(EVP_DecryptInit_ex(ctx, NULL, NULL, k.bytes, raw), 1);
	assert_int_equal(EVP_DecryptUpdate(ctx, NULL, &len, aad, aad_len), 1);
	assert_int_equal(EVP_DecryptUpdate(ctx, out, &len, raw + 12, (int)(n - 28)), 1);
	assert_int_equal(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, 16, raw + n - 16), 1);
	assert_int_equal(EVP_DecryptFinal_ex(ctx, out + len, &fin), 1);
	EVP_CIPHER_CTX_free(ctx);
	assert_int_equal(len + fin, (int)strlen(DOC));
	assert_memory_equal(out, DOC, strlen(DOC));
	free(sealed);
}

static void expect_open(const struct secretbox_key *k, const char *context, const char *sealed,
			int want)
{
	char *plain = (char *)1;

	assert_int_equal(secretbox_open(k, context, sealed, &plain, NULL), want);
	assert_null(plain);
}

static void test_tampered(void **state)
{
	struct secretbox_key k = key_of(1);
	char *sealed = seal(&k, SUB_ID, DOC);
	size_t len = strlen(sealed);

	/* every byte of nonce, ciphertext and tag is covered: change one character of the
	 * base64 in a few places (start, middle, the tag at the end) */
	size_t at[] = {14, 20, len / 2, len - 6};
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		char *t = strdup(sealed);
		t[at[i]] = t[at[i]] == 'A' ? 'B' : 'A';
		expect_open(&k, SUB_ID, t, SECRETBOX_AUTH_FAILED);
		free(t);
	}
	/* truncated, or not base64 at all */
	char *t = strdup(sealed);
	t[len - 4] = '\0';
	expect_open(&k, SUB_ID, t, SECRETBOX_AUTH_FAILED);
	strcpy(t + 14, "AAAA");
	expect_open(&k, SUB_ID, t, SECRETBOX_MALFORMED);
	strcpy(t + 14, "not base64!");
	expect_open(&k, SUB_ID, t, SECRETBOX_MALFORMED);
	free(t);
	/* the key id is authenticated too: one with its id forged to ours does not open */
	struct secretbox_key other = key_of(2);
	char *theirs = seal(&other, SUB_ID, DOC);
	memcpy(theirs + 5, k.id, SECRETBOX_KEY_ID_LEN);
	expect_open(&k, SUB_ID, theirs, SECRETBOX_AUTH_FAILED);
	free(theirs);
	free(sealed);
}

static void test_wrong_key(void **state)
{
	struct secretbox_key k = key_of(3), other = key_of(4);
	char *sealed = seal(&k, SUB_ID, DOC);

	expect_open(&other, SUB_ID, sealed, SECRETBOX_OTHER_KEY);
	/* another key that claims our id (a collision of the 32-bit id, or a forged key
	 * struct): the tag check still refuses it */
	memcpy(other.id, k.id, sizeof(k.id));
	expect_open(&other, SUB_ID, sealed, SECRETBOX_AUTH_FAILED);
	free(sealed);
}

static void test_other_row(void **state)
{
	struct secretbox_key k = key_of(5);
	char *sealed = seal(&k, SUB_ID, DOC);

	/* the context (the subscription id) is bound: moved to another row, it fails */
	expect_open(&k, "0193a0c4-7e55-7b1c-9a3e-5f0d2c8b1a78", sealed, SECRETBOX_AUTH_FAILED);
	expect_open(&k, "", sealed, SECRETBOX_AUTH_FAILED);
	free(sealed);
}

static void test_formats(void **state)
{
	struct secretbox_key k = key_of(6);
	char id[SECRETBOX_KEY_ID_LEN + 1];
	char *sealed = seal(&k, SUB_ID, DOC);

	assert_false(secretbox_is_sealed(DOC));
	assert_false(secretbox_is_sealed(""));
	assert_false(secretbox_is_sealed("obx:abc"));
	assert_false(secretbox_is_sealed("obx1"));
	assert_true(secretbox_is_sealed("obx2:whatever"));
	assert_int_equal(secretbox_sealed_key_id(DOC, id), -1);
	assert_int_equal(secretbox_sealed_key_id("obx1:1234567:x", id), -1);
	expect_open(&k, SUB_ID, DOC, SECRETBOX_MALFORMED);
	/* a newer format is not mistaken for clear text, nor read as this one */
	sealed[3] = '2';
	expect_open(&k, SUB_ID, sealed, SECRETBOX_UNSUPPORTED);
	free(sealed);
}

static void test_key_parse(void **state)
{
	struct secretbox_key k;
	char err[256];
	const char *hex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
	unsigned char want[32];
	for (int i = 0; i < 32; i++)
		want[i] = (unsigned char)i;

	assert_int_equal(secretbox_key_parse(hex, &k, err, sizeof(err)), 0);
	assert_memory_equal(k.bytes, want, 32);
	/* upper case, and the line end of a key file */
	assert_int_equal(secretbox_key_parse("000102030405060708090A0B0C0D0E0F101112131415161718191A1B1C1D1E1F\n",
					     &k, err, sizeof(err)), 0);
	assert_memory_equal(k.bytes, want, 32);
	/* base64 of the same bytes */
	assert_int_equal(secretbox_key_parse(" AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8= ", &k, err,
					     sizeof(err)), 0);
	assert_memory_equal(k.bytes, want, 32);
	char hexout[65];
	secretbox_key_hex(&k, hexout);
	assert_string_equal(hexout, hex);

	const char *bad[] = {
		"",
		"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e",     /* 31 bytes */
		"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f00", /* 33 */
		"g00102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",   /* not hex */
		"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHg==",  /* base64 of 31 bytes */
		"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8",   /* no padding */
		"correct horse battery staple",
		"0001020304050607 08090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		if (secretbox_key_parse(bad[i], &k, err, sizeof(err)) == 0)
			fail_msg("\"%s\" was accepted", bad[i]);
		assert_non_null(strstr(err, "64 hex digits"));
		if (*bad[i])
			assert_null(strstr(err, bad[i]));
	}
	/* the message counts characters, never shows them */
	assert_int_equal(secretbox_key_parse("correct horse battery staple", &k, err, sizeof(err)), -1);
	assert_null(strstr(err, "horse"));
}

static void test_generate(void **state)
{
	struct secretbox_key a, b;
	assert_int_equal(secretbox_key_generate(&a), 0);
	assert_int_equal(secretbox_key_generate(&b), 0);
	assert_memory_not_equal(a.bytes, b.bytes, SECRETBOX_KEY_LEN);
	assert_int_equal(strlen(a.id), SECRETBOX_KEY_ID_LEN);
	char *sealed = seal(&a, SUB_ID, DOC), *plain = NULL;
	assert_int_equal(secretbox_open(&a, SUB_ID, sealed, &plain, NULL), SECRETBOX_OK);
	free(plain);
	free(sealed);
	secretbox_key_clear(&a);
	unsigned char zero[SECRETBOX_KEY_LEN] = {0};
	assert_memory_equal(a.bytes, zero, SECRETBOX_KEY_LEN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_tampered),
		cmocka_unit_test(test_wrong_key),
		cmocka_unit_test(test_other_row),
		cmocka_unit_test(test_formats),
		cmocka_unit_test(test_key_parse),
		cmocka_unit_test(test_generate),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
