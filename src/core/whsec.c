/* whsec.c: the whsec_ secret format (see whsec.h). */
#include "core/whsec.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "util/base64.h"

int whsec_decode(const char *secret, unsigned char key[WHSEC_KEY_MAX], size_t *len)
{
	unsigned char tmp[WHSEC_KEY_MAX + 3];
	size_t plen = sizeof(WHSEC_PREFIX) - 1, n = 0;

	*len = 0;
	if (!secret || strncmp(secret, WHSEC_PREFIX, plen) != 0)
		return -1;
	const char *b64 = secret + plen;
	size_t blen = strlen(b64);
	if (blen == 0 || blen > 4 * ((WHSEC_KEY_MAX + 2) / 3) ||
	    base64_decode(b64, blen, tmp, sizeof(tmp), &n) || n < WHSEC_KEY_MIN || n > WHSEC_KEY_MAX) {
		OPENSSL_cleanse(tmp, sizeof(tmp));
		return -1;
	}
	memcpy(key, tmp, n);
	OPENSSL_cleanse(tmp, sizeof(tmp));
	*len = n;
	return 0;
}

char *whsec_generate(size_t n)
{
	unsigned char key[WHSEC_KEY_MAX];
	size_t plen = sizeof(WHSEC_PREFIX) - 1;
	char *out;

	if (n > sizeof(key) || !(out = malloc(plen + base64_encoded_size(n))))
		return NULL;
	if (RAND_bytes(key, (int)n) != 1) {
		free(out);
		return NULL;
	}
	memcpy(out, WHSEC_PREFIX, plen);
	base64_encode(key, n, out + plen);
	OPENSSL_cleanse(key, sizeof(key));
	return out;
}
