/* standard_webhooks.c: the tests' Standard Webhooks verifier (standard_webhooks.h).
 *
 * Written from the specification: its own base64 codec and OpenSSL's EVP_MAC, nothing
 * from src/. It only verifies; it must not grow a signer the tests could compare outboxd
 * against byte for byte, which would make a shared mistake pass. */
#include "standard_webhooks.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#define MAC_LEN 32                              /* HMAC-SHA256 */
#define MAC_B64_LEN (4 * ((MAC_LEN + 2) / 3))   /* 44, padding included */

static const char b64_alphabet[] =
	"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static int b64_value(char c)
{
	const char *p = c ? strchr(b64_alphabet, c) : NULL;

	return p ? (int)(p - b64_alphabet) : -1;
}

/* Decodes standard base64 with zero, one or two '=' of padding (or none where it would be
 * due). Returns the length written to out (at least 3 * len / 4 bytes of room), or -1
 * when in is not base64. */
static long b64_decode(const char *in, size_t len, unsigned char *out)
{
	unsigned int acc = 0;
	int bits = 0;
	long n = 0;

	while (len > 0 && in[len - 1] == '=')
		len--;
	if (strlen(in) - len > 2 || len % 4 == 1)
		return -1;
	for (size_t i = 0; i < len; i++) {
		int v = b64_value(in[i]);

		if (v < 0)
			return -1;
		acc = (acc << 6) | (unsigned int)v;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[n++] = (unsigned char)(acc >> bits);
			acc &= (1u << bits) - 1;
		}
	}
	return n;
}

static void b64_encode(const unsigned char *in, size_t len, char *out)
{
	size_t o = 0;

	for (size_t i = 0; i < len; i += 3) {
		unsigned int v = (unsigned int)in[i] << 16;

		if (i + 1 < len)
			v |= (unsigned int)in[i + 1] << 8;
		if (i + 2 < len)
			v |= in[i + 2];
		out[o++] = b64_alphabet[(v >> 18) & 63];
		out[o++] = b64_alphabet[(v >> 12) & 63];
		out[o++] = i + 1 < len ? b64_alphabet[(v >> 6) & 63] : '=';
		out[o++] = i + 2 < len ? b64_alphabet[v & 63] : '=';
	}
	out[o] = '\0';
}

/* HMAC-SHA256 of "id.timestamp.body" with key, streamed (no copy of the body). */
static int mac_compute(const unsigned char *key, size_t key_len,
		       const struct standard_webhooks_request *req, unsigned char mac[MAC_LEN])
{
	EVP_MAC *hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx = hmac ? EVP_MAC_CTX_new(hmac) : NULL;
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
		OSSL_PARAM_construct_end(),
	};
	size_t out_len = 0;
	int rc = -1;

	if (!ctx || !EVP_MAC_init(ctx, key, key_len, params) ||
	    !EVP_MAC_update(ctx, (const unsigned char *)req->id, strlen(req->id)) ||
	    !EVP_MAC_update(ctx, (const unsigned char *)".", 1) ||
	    !EVP_MAC_update(ctx, (const unsigned char *)req->timestamp,
			    strlen(req->timestamp)) ||
	    !EVP_MAC_update(ctx, (const unsigned char *)".", 1) ||
	    !EVP_MAC_update(ctx, req->body, req->body_len) ||
	    !EVP_MAC_final(ctx, mac, &out_len, MAC_LEN) || out_len != MAC_LEN)
		goto out;
	rc = 0;
out:
	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(hmac);
	return rc;
}

/* Unix seconds in decimal digits only (no sign, no space, no fraction) into *out. */
static int timestamp_parse(const char *s, int64_t *out)
{
	int64_t v = 0;
	size_t n = strlen(s);

	if (n == 0 || n > 18)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return 0;
}

enum standard_webhooks_result standard_webhooks_verify(const struct standard_webhooks_request *req,
						       const char *secret, int64_t now_s,
						       int64_t tolerance_s,
						       struct standard_webhooks_match *match)
{
	struct standard_webhooks_match m = {.index = -1, .count = 0};
	enum standard_webhooks_result rc;
	const char *b64 = secret;
	unsigned char *key = NULL, mac[MAC_LEN];
	char want[MAC_B64_LEN + 1];
	int64_t ts;
	long key_len;
	int v1_entries = 0;

	if (strncmp(b64, "whsec_", 6) == 0)
		b64 += 6;
	key = malloc(3 * strlen(b64) / 4 + 3);
	if (!key) {
		rc = SWH_NO_MEMORY;
		goto out;
	}
	key_len = b64_decode(b64, strlen(b64), key);
	if (key_len <= 0) {
		rc = SWH_BAD_SECRET;
		goto out;
	}
	if (!req->id || !req->timestamp || !req->signature) {
		rc = SWH_MISSING_HEADER;
		goto out;
	}
	if (timestamp_parse(req->timestamp, &ts) != 0) {
		rc = SWH_BAD_TIMESTAMP;
		goto out;
	}
	if (ts < now_s - tolerance_s || ts > now_s + tolerance_s) {
		rc = SWH_STALE_TIMESTAMP;
		goto out;
	}
	if (mac_compute(key, (size_t)key_len, req, mac) != 0) {
		rc = SWH_NO_MEMORY;
		goto out;
	}
	b64_encode(mac, MAC_LEN, want);

	/* Entries are separated by single spaces; each is "version,signature". Every v1
	 * entry is compared in full, so the time taken does not say how much of one was
	 * right. */
	for (const char *p = req->signature; *p;) {
		size_t len = strcspn(p, " ");

		if (len > 0) {
			m.count++;
			if (len > 3 && memcmp(p, "v1,", 3) == 0) {
				v1_entries++;
				if (len - 3 == MAC_B64_LEN &&
				    CRYPTO_memcmp(p + 3, want, MAC_B64_LEN) == 0 && m.index < 0)
					m.index = m.count - 1;
			}
		}
		p += len;
		while (*p == ' ')
			p++;
	}
	if (v1_entries == 0)
		rc = SWH_NO_SIGNATURE;
	else
		rc = m.index >= 0 ? SWH_OK : SWH_MISMATCH;
out:
	if (key)
		OPENSSL_cleanse(key, 3 * strlen(b64) / 4 + 3);
	free(key);
	OPENSSL_cleanse(mac, sizeof(mac));
	if (match)
		*match = m;
	return rc;
}

const char *standard_webhooks_strerror(enum standard_webhooks_result r)
{
	switch (r) {
	case SWH_OK:
		return "signature verified";
	case SWH_BAD_SECRET:
		return "the secret is not whsec_ followed by base64";
	case SWH_MISSING_HEADER:
		return "webhook-id, webhook-timestamp or webhook-signature missing";
	case SWH_BAD_TIMESTAMP:
		return "webhook-timestamp is not Unix seconds";
	case SWH_STALE_TIMESTAMP:
		return "webhook-timestamp is outside the tolerance around now";
	case SWH_NO_SIGNATURE:
		return "webhook-signature holds no v1 signature";
	case SWH_MISMATCH:
		return "no v1 signature matches the request";
	case SWH_NO_MEMORY:
		return "out of memory";
	}
	return "unknown result";
}
