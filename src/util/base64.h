/* base64.h: standard base64 (RFC 4648 §4, with padding), the one encoder and decoder of
 * outboxd: payload_base64 in the API, whsec_ secrets, Basic credentials, signatures.
 * Wraps OpenSSL's EVP_EncodeBlock/EVP_DecodeBlock and handles what they leave to the
 * caller (the padding's bytes, the length rules). */
#ifndef OUTBOXD_UTIL_BASE64_H
#define OUTBOXD_UTIL_BASE64_H

#include <stddef.h>

/* Bytes base64_encode writes for n input bytes, the NUL included. */
static inline size_t base64_encoded_size(size_t n)
{
	return 4 * ((n + 2) / 3) + 1;
}

/* Bytes base64_decode may write for a text of len characters (an upper bound). */
static inline size_t base64_decoded_max(size_t len)
{
	return len / 4 * 3 + 3;
}

/* Encodes n bytes of in into out (base64_encoded_size(n) bytes, NUL-terminated).
 * Returns the text's length. */
size_t base64_encode(const void *in, size_t n, char *out);

/* Decodes len characters of standard, padded base64 into out (cap bytes, at least
 * base64_decoded_max(len)); *n receives the decoded length. Returns 0, or -1 when the
 * text is not base64 (a length not a multiple of 4, a character outside the alphabet,
 * padding anywhere but at the end) or out is too small. */
int base64_decode(const char *in, size_t len, unsigned char *out, size_t cap, size_t *n);

#endif
