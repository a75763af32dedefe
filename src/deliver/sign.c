/* sign.c: Standard Webhooks HMAC-SHA256 signing with OpenSSL (the secret format is
 * core/whsec.h's). */
#include "deliver/sign.h"

#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "core/whsec.h"
#include "util/base64.h"

int sign_standard_v1(const char *secret, const char *msg_id, int64_t timestamp,
		     const void *body, size_t len, char out[SIGN_V1_LEN])
{
	unsigned char key[WHSEC_KEY_MAX], mac[EVP_MAX_MD_SIZE];
	unsigned int mac_len = 0;
	size_t klen = 0;
	char ts[24];
	int rc = -1;

	if (whsec_decode(secret, key, &klen))
		return -1;

	int tslen = snprintf(ts, sizeof(ts), "%lld", (long long)timestamp);
	HMAC_CTX *ctx = NULL;
	/* HMAC_CTX is deprecated in OpenSSL 3 but still the simplest streaming HMAC;
	 * EVP_MAC would do the same with more ceremony. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	ctx = HMAC_CTX_new();
	if (!ctx || !HMAC_Init_ex(ctx, key, (int)klen, EVP_sha256(), NULL) ||
	    !HMAC_Update(ctx, (const unsigned char *)msg_id, strlen(msg_id)) ||
	    !HMAC_Update(ctx, (const unsigned char *)".", 1) ||
	    !HMAC_Update(ctx, (const unsigned char *)ts, (size_t)tslen) ||
	    !HMAC_Update(ctx, (const unsigned char *)".", 1) ||
	    !HMAC_Update(ctx, body, len) || !HMAC_Final(ctx, mac, &mac_len))
		goto out;
#pragma GCC diagnostic pop
	memcpy(out, "v1,", 3);
	base64_encode(mac, mac_len, out + 3);
	rc = 0;
out:
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
	HMAC_CTX_free(ctx);
#pragma GCC diagnostic pop
	OPENSSL_cleanse(key, sizeof(key));
	return rc;
}

int sign_webhook_signature(const char *secret, const char *previous, const char *msg_id,
			   int64_t timestamp, const void *body, size_t len,
			   char out[SIGN_HEADER_LEN])
{
	if (sign_standard_v1(secret, msg_id, timestamp, body, len, out))
		return -1;
	if (!previous)
		return 0;
	size_t n = strlen(out);
	out[n] = ' ';
	return sign_standard_v1(previous, msg_id, timestamp, body, len, out + n + 1);
}
