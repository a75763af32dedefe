/* fmt.h: numbers as text without printf, for the paths every delivery takes (a request's
 * head, its traceparent, its result's message): printf's engine costs about a thousand
 * instructions a call, these a few dozen. Pure, no allocation. */
#ifndef OUTBOXD_UTIL_FMT_H
#define OUTBOXD_UTIL_FMT_H

#include <stddef.h>
#include <stdint.h>

#define FMT_U64_LEN 21 /* the 20 digits of UINT64_MAX and the NUL */

/* The decimal digits of v, NUL-terminated, written at the end of buf: returns where they
 * start (inside buf). */
static inline char *fmt_u64(uint64_t v, char buf[FMT_U64_LEN])
{
	char *p = buf + FMT_U64_LEN - 1;

	*p = '\0';
	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	return p;
}

/* v as 16 lowercase hexadecimal digits, zero-padded, into out (no NUL). */
static inline void fmt_hex64(uint64_t v, char out[16])
{
	static const char digits[] = "0123456789abcdef";

	for (int i = 15; i >= 0; i--, v >>= 4)
		out[i] = digits[v & 15];
}

#endif
