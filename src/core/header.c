/* header.c: what may go into an HTTP header line (see header.h). */
#include "core/header.h"

#include <string.h>

int header_value_valid(const char *value, size_t len)
{
	const unsigned char *p = (const unsigned char *)value;
	for (size_t i = 0; i < len; i++)
		if ((p[i] < 0x20 && p[i] != '\t') || p[i] == 0x7f)
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
