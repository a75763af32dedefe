/* base64.c: standard base64 over OpenSSL (see base64.h). Must not allocate. */
#include "util/base64.h"

#include <string.h>

#include <openssl/evp.h>

size_t base64_encode(const void *in, size_t n, char *out)
{
	int len = EVP_EncodeBlock((unsigned char *)out, in, (int)n);
	return len > 0 ? (size_t)len : (out[0] = '\0', 0);
}

int base64_decode(const char *in, size_t len, unsigned char *out, size_t cap, size_t *n)
{
	*n = 0;
	if (len == 0)
		return 0;
	if (len % 4 || len > (size_t)0x7fffffff || cap < base64_decoded_max(len))
		return -1;
	/* EVP_DecodeBlock accepts '=' inside the text and skips leading blanks: refuse both. */
	size_t pad = (in[len - 1] == '=') + (in[len - 2] == '=');
	for (size_t i = 0; i < len - pad; i++)
		if (in[i] == '=' || in[i] == ' ' || in[i] == '\t' || in[i] == '\r' || in[i] == '\n')
			return -1;
	int got = EVP_DecodeBlock(out, (const unsigned char *)in, (int)len);
	if (got < 0 || (size_t)got < pad)
		return -1;
	*n = (size_t)got - pad;
	return 0;
}
