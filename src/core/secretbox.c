/* secretbox.c: AES-256-GCM sealing of text at rest (see secretbox.h for the format).
 * Must not do I/O or log: callers say what failed, with the row it belongs to. */
#include "core/secretbox.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "util/base64.h"

#define NONCE_LEN 12
#define TAG_LEN 16
/* "obx1:" + 8 hex digits + ':' */
#define HEADER_LEN (sizeof(SECRETBOX_PREFIX) - 1 + SECRETBOX_KEY_ID_LEN + 1)

static const char *const err_names[] = {
	[SECRETBOX_OK] = "ok",
	[SECRETBOX_MALFORMED] = "not a readable sealed text",
	[SECRETBOX_UNSUPPORTED] = "sealed in a format this outboxd does not read",
	[SECRETBOX_OTHER_KEY] = "sealed under another key",
	[SECRETBOX_AUTH_FAILED] = "does not verify with this key (wrong key, or the text was "
				  "changed or moved from another row)",
	[SECRETBOX_ERROR] = "crypto library, randomness or memory failure",
};

const char *secretbox_strerror(int err)
{
	if (err < 0 || (size_t)err >= sizeof(err_names) / sizeof(err_names[0]))
		return "unknown secretbox error";
	return err_names[err];
}

/* ---- keys ---------------------------------------------------------------------------- */

void secretbox_key_from_bytes(const unsigned char bytes[SECRETBOX_KEY_LEN],
			      struct secretbox_key *out)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;

	memcpy(out->bytes, bytes, SECRETBOX_KEY_LEN);
	EVP_Digest(bytes, SECRETBOX_KEY_LEN, md, &n, EVP_sha256(), NULL);
	for (int i = 0; i < SECRETBOX_KEY_ID_LEN / 2; i++)
		snprintf(out->id + 2 * i, 3, "%02x", md[i]);
}

static int hex_value(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = tolower(c);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int secretbox_key_parse(const char *text, struct secretbox_key *out, char *err, size_t errlen)
{
	unsigned char raw[SECRETBOX_KEY_LEN + 4]; /* base64_decoded_max(44) */
	size_t len, n = 0;
	int rc = -1;

	memset(out, 0, sizeof(*out));
	if (!text)
		text = "";
	while (isspace((unsigned char)*text))
		text++;
	len = strlen(text);
	while (len && isspace((unsigned char)text[len - 1]))
		len--;

	if (len == 2 * SECRETBOX_KEY_LEN && strspn(text, "0123456789abcdefABCDEF") >= len) {
		for (size_t i = 0; i < SECRETBOX_KEY_LEN; i++)
			raw[i] = (unsigned char)(hex_value(text[2 * i]) << 4 |
						 hex_value(text[2 * i + 1]));
		n = SECRETBOX_KEY_LEN;
	} else if (len == base64_encoded_size(SECRETBOX_KEY_LEN) - 1 &&
		   base64_decode(text, len, raw, sizeof(raw), &n) == 0 &&
		   n == SECRETBOX_KEY_LEN) {
		/* n is right: decoded below */
	} else {
		/* The text may be a key with a typo: say what is wrong, never what it is. */
		snprintf(err, errlen, "must be 64 hex digits or the base64 of 32 bytes "
			 "(44 characters), got %zu characters that are neither", len);
		goto out;
	}
	secretbox_key_from_bytes(raw, out);
	rc = 0;
out:
	OPENSSL_cleanse(raw, sizeof(raw));
	return rc;
}

int secretbox_key_generate(struct secretbox_key *out)
{
	unsigned char raw[SECRETBOX_KEY_LEN];

	memset(out, 0, sizeof(*out));
	if (RAND_bytes(raw, sizeof(raw)) != 1)
		return -1;
	secretbox_key_from_bytes(raw, out);
	OPENSSL_cleanse(raw, sizeof(raw));
	return 0;
}

void secretbox_key_hex(const struct secretbox_key *key, char out[2 * SECRETBOX_KEY_LEN + 1])
{
	for (size_t i = 0; i < SECRETBOX_KEY_LEN; i++)
		snprintf(out + 2 * i, 3, "%02x", key->bytes[i]);
}

void secretbox_key_clear(struct secretbox_key *key)
{
	OPENSSL_cleanse(key, sizeof(*key));
}

/* ---- the sealed format ------------------------------------------------------------------ */

/* Length of "obx<digits>:" at the start of text, or 0 when it does not start so. */
static size_t version_prefix(const char *text)
{
	size_t d;

	if (!text || strncmp(text, "obx", 3) != 0)
		return 0;
	d = strspn(text + 3, "0123456789");
	return d && text[3 + d] == ':' ? 3 + d + 1 : 0;
}

int secretbox_is_sealed(const char *text)
{
	return version_prefix(text) != 0;
}

int secretbox_sealed_key_id(const char *text, char id[SECRETBOX_KEY_ID_LEN + 1])
{
	size_t p = version_prefix(text);

	id[0] = '\0';
	if (!p || strspn(text + p, "0123456789abcdef") != SECRETBOX_KEY_ID_LEN ||
	    text[p + SECRETBOX_KEY_ID_LEN] != ':')
		return -1;
	memcpy(id, text + p, SECRETBOX_KEY_ID_LEN);
	id[SECRETBOX_KEY_ID_LEN] = '\0';
	return 0;
}

/* AES-256-GCM over in[0..len) with the header and context as AAD. encrypt: out gets the
 * ciphertext and tag gets written; decrypt: tag is checked. 0, or -1 (for decrypt: the
 * tag did not verify, or the library failed). */
static int gcm(int encrypt, const struct secretbox_key *key, const unsigned char nonce[NONCE_LEN],
	       const char *header, const char *context, const unsigned char *in, size_t len,
	       unsigned char *out, unsigned char tag[TAG_LEN])
{
	EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
	int n = 0, ok;

	ok = ctx && EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL, encrypt) == 1 &&
	     EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, NONCE_LEN, NULL) == 1 &&
	     EVP_CipherInit_ex(ctx, NULL, NULL, key->bytes, nonce, encrypt) == 1 &&
	     EVP_CipherUpdate(ctx, NULL, &n, (const unsigned char *)header,
			      (int)strlen(header)) == 1 &&
	     EVP_CipherUpdate(ctx, NULL, &n, (const unsigned char *)context,
			      (int)strlen(context)) == 1 &&
	     (len == 0 || EVP_CipherUpdate(ctx, out, &n, in, (int)len) == 1);
	if (ok && !encrypt)
		ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG_LEN, tag) == 1;
	if (ok)
		ok = EVP_CipherFinal_ex(ctx, out + (len ? n : 0), &n) == 1;
	if (ok && encrypt)
		ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, TAG_LEN, tag) == 1;
	EVP_CIPHER_CTX_free(ctx);
	return ok ? 0 : -1;
}

int secretbox_seal(const struct secretbox_key *key, const char *context, const void *plain,
		   size_t len, char **out)
{
	char header[HEADER_LEN + 1];
	unsigned char *raw = NULL;
	char *text = NULL;
	int rc = SECRETBOX_ERROR;

	*out = NULL;
	if (len > SECRETBOX_MAX_TEXT || !context)
		return SECRETBOX_ERROR;
	snprintf(header, sizeof(header), SECRETBOX_PREFIX "%s:", key->id);
	size_t raw_len = NONCE_LEN + len + TAG_LEN;
	if (!(raw = malloc(raw_len)) ||
	    !(text = malloc(HEADER_LEN + base64_encoded_size(raw_len))))
		goto out;
	if (RAND_bytes(raw, NONCE_LEN) != 1 ||
	    gcm(1, key, raw, header, context, plain, len, raw + NONCE_LEN,
		raw + NONCE_LEN + len))
		goto out;
	memcpy(text, header, HEADER_LEN);
	base64_encode(raw, raw_len, text + HEADER_LEN);
	*out = text;
	text = NULL;
	rc = SECRETBOX_OK;
out:
	free(raw); /* nonce, ciphertext and tag: nothing clear */
	free(text);
	return rc;
}

int secretbox_open(const struct secretbox_key *key, const char *context, const char *sealed,
		   char **plain, size_t *len)
{
	char header[HEADER_LEN + 1], id[SECRETBOX_KEY_ID_LEN + 1];
	unsigned char *raw = NULL;
	char *text = NULL;
	size_t b64_len, raw_len = 0, text_len;
	int rc;

	*plain = NULL;
	if (len)
		*len = 0;
	if (!secretbox_is_sealed(sealed))
		return SECRETBOX_MALFORMED;
	if (strncmp(sealed, SECRETBOX_PREFIX, sizeof(SECRETBOX_PREFIX) - 1) != 0)
		return SECRETBOX_UNSUPPORTED;
	if (secretbox_sealed_key_id(sealed, id) != 0)
		return SECRETBOX_MALFORMED;
	if (strcmp(id, key->id) != 0)
		return SECRETBOX_OTHER_KEY;
	b64_len = strlen(sealed + HEADER_LEN);
	if (b64_len > base64_encoded_size(SECRETBOX_MAX_TEXT + NONCE_LEN + TAG_LEN))
		return SECRETBOX_MALFORMED;
	if (!(raw = malloc(base64_decoded_max(b64_len)))) {
		rc = SECRETBOX_ERROR;
		goto out;
	}
	if (base64_decode(sealed + HEADER_LEN, b64_len, raw, base64_decoded_max(b64_len),
			  &raw_len) || raw_len < NONCE_LEN + TAG_LEN) {
		rc = SECRETBOX_MALFORMED;
		goto out;
	}
	text_len = raw_len - NONCE_LEN - TAG_LEN;
	if (!(text = malloc(text_len + 1))) {
		rc = SECRETBOX_ERROR;
		goto out;
	}
	memcpy(header, sealed, HEADER_LEN);
	header[HEADER_LEN] = '\0';
	if (gcm(0, key, raw, header, context ? context : "", raw + NONCE_LEN, text_len,
		(unsigned char *)text, raw + NONCE_LEN + text_len)) {
		/* GCM has written unverified plain text: it must not outlive the call. */
		OPENSSL_cleanse(text, text_len);
		rc = SECRETBOX_AUTH_FAILED;
		goto out;
	}
	text[text_len] = '\0';
	*plain = text;
	text = NULL;
	if (len)
		*len = text_len;
	rc = SECRETBOX_OK;
out:
	free(raw);
	free(text);
	return rc;
}
