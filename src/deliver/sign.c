/* sign.c: Standard Webhooks HMAC-SHA256 signing with OpenSSL (the secret format is
 * core/whsec.h's). */
#include "deliver/sign.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "core/whsec.h"
#include "util/base64.h"

/* One HMAC context per thread, kept: a new one costs OpenSSL 3 about ten allocations and
 * a fetch of SHA-256 from its provider for every request signed (docs/performance.md,
 * "Allocations per delivery"). Freed when the thread ends. */
static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;
static int ctx_key_made;  /* 0: no key (the process ran out of them): a context per call */
static const EVP_MD *sha256;

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void ctx_free(void *ctx)
{
	HMAC_CTX_free(ctx);
}

static void ctx_key_make(void)
{
	ctx_key_made = pthread_key_create(&ctx_key, ctx_free) == 0;
	sha256 = EVP_sha256();
}

/* The thread's context, or a new one the caller frees (*own set) when there is no key or
 * it could not be set. NULL when out of memory. */
static HMAC_CTX *thread_ctx(int *own)
{
	HMAC_CTX *ctx;

	pthread_once(&ctx_once, ctx_key_make);
	*own = 0;
	if (ctx_key_made && (ctx = pthread_getspecific(ctx_key)))
		return ctx;
	if (!(ctx = HMAC_CTX_new()))
		return NULL;
	if (!ctx_key_made || pthread_setspecific(ctx_key, ctx) != 0)
		*own = 1;
	return ctx;
}

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
	/* HMAC_CTX is deprecated in OpenSSL 3 but still the simplest streaming HMAC;
	 * EVP_MAC would do the same with more ceremony. */
	int own;
	HMAC_CTX *ctx = thread_ctx(&own);
	if (!ctx || !HMAC_Init_ex(ctx, key, (int)klen, sha256, NULL) ||
	    !HMAC_Update(ctx, (const unsigned char *)msg_id, strlen(msg_id)) ||
	    !HMAC_Update(ctx, (const unsigned char *)".", 1) ||
	    !HMAC_Update(ctx, (const unsigned char *)ts, (size_t)tslen) ||
	    !HMAC_Update(ctx, (const unsigned char *)".", 1) ||
	    !HMAC_Update(ctx, body, len) || !HMAC_Final(ctx, mac, &mac_len))
		goto out;
	memcpy(out, "v1,", 3);
	base64_encode(mac, mac_len, out + 3);
	rc = 0;
out:
	if (own)
		HMAC_CTX_free(ctx);
	OPENSSL_cleanse(key, sizeof(key));
	return rc;
}
#pragma GCC diagnostic pop

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
