/* header.c: what may go into an HTTP header line (see header.h). */
#include "core/header.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

static int byte_bad(unsigned char c)
{
	return (c < 0x20 && c != '\t') || c == 0x7f;
}

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Every request's header lines pass here (~400 bytes): eight bytes at a time, a word
 * that holds a byte below 0x20 or a DEL is then looked at byte by byte (a tab is
 * allowed). (x - 0x20 * ONES) & ~x & HIGHS is non-zero exactly when a byte of x is below
 * 0x20, and the same on x ^ 0x7f * ONES below 1 finds a DEL. */
int header_value_valid(const char *value, size_t len)
{
	const unsigned char *p = (const unsigned char *)value;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		uint64_t x, d;
		memcpy(&x, p + i, 8);
		d = x ^ (0x7f * ONES);
		if ((((x - 0x20 * ONES) & ~x) | ((d - ONES) & ~d)) & HIGHS)
			for (size_t k = i; k < i + 8; k++)
				if (byte_bad(p[k]))
					return 0;
	}
	for (; i < len; i++)
		if (byte_bad(p[i]))
			return 0;
	return 1;
}

int header_name_valid(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > HEADER_NAME_MAX)
		return 0;
	for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
		int ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			 (*p >= '0' && *p <= '9') || *p == '-' || *p == '_';
		if (!ok)
			return 0;
	}
	return 1;
}

int header_is_json_type(const char *ct)
{
	size_t n = strcspn(ct, ";");
	while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t'))
		n--;
	return (n == 16 && strncasecmp(ct, "application/json", 16) == 0) ||
	       (n > 5 && strncasecmp(ct + n - 5, "+json", 5) == 0);
}
