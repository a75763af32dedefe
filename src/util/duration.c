/* duration.c: "500ms", "3s", "60m", "1h", "2d" <-> milliseconds.
 * Used for configuration and subscription JSON; a unit is mandatory so that "3" can never
 * be misread as seconds by one reader and milliseconds by another. */
#include "util/duration.h"

#include <stdio.h>
#include <string.h>

struct duration_unit {
	const char *suffix;
	int64_t ms;
};

/* Largest first: duration_format picks the first unit that divides exactly. */
static const struct duration_unit units[] = {
	{"d", 86400000},
	{"h", 3600000},
	{"m", 60000},
	{"s", 1000},
	{"ms", 1},
};

#define N_UNITS (sizeof(units) / sizeof(units[0]))

int duration_parse(const char *text, int64_t *out_ms)
{
	const char *p = text;
	int64_t n = 0;

	if (!text || *p < '0' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++) {
		int digit = *p - '0';

		if (n > (INT64_MAX - digit) / 10)
			return -1;
		n = n * 10 + digit;
	}
	for (size_t i = 0; i < N_UNITS; i++) {
		if (strcmp(p, units[i].suffix) != 0)
			continue;
		if (n > INT64_MAX / units[i].ms)
			return -1;
		*out_ms = n * units[i].ms;
		return 0;
	}
	return -1;
}

char *duration_format(int64_t ms, char *buf, size_t len)
{
	/* Work on the magnitude as unsigned so INT64_MIN has one too. */
	uint64_t mag = ms < 0 ? (uint64_t)0 - (uint64_t)ms : (uint64_t)ms;
	const char *sign = ms < 0 ? "-" : "";
	size_t i = 0;

	if (!buf || len == 0)
		return buf;
	if (mag == 0) {
		snprintf(buf, len, "0s");
		return buf;
	}
	while (mag % (uint64_t)units[i].ms != 0)
		i++; /* terminates at "ms" */
	snprintf(buf, len, "%s%llu%s", sign,
		 (unsigned long long)(mag / (uint64_t)units[i].ms), units[i].suffix);
	return buf;
}
