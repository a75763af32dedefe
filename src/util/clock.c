/* clock.c: wall and monotonic time in milliseconds, and RFC 3339 timestamps.
 *
 * Output is always UTC with exactly three fraction digits and 'Z' (the API's times are
 * a contract: docs/contracts.md), clamped to years 0000-9999 so it stays valid
 * RFC 3339. Input accepts what RFC 3339 allows: any fraction length (truncated to ms),
 * 'Z' or a numeric offset. */
#include "util/clock.h"

#include <stdbool.h>
#include <stdio.h>
#include <time.h>

/* 0000-01-01T00:00:00.000Z and 9999-12-31T23:59:59.999Z */
#define RFC3339_MIN_MS (-62167219200000LL)
#define RFC3339_MAX_MS (253402300799999LL)

static int64_t clock_ms(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t clock_now_ms(void)
{
	return clock_ms(CLOCK_REALTIME);
}

int64_t clock_mono_ms(void)
{
	return clock_ms(CLOCK_MONOTONIC);
}

int64_t clock_now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t clock_mono_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t clock_now_ns(void)
{
	return clock_ns(CLOCK_REALTIME);
}

int64_t clock_mono_ns(void)
{
	return clock_ns(CLOCK_MONOTONIC);
}

/* Writes v as exactly n decimal digits (v < 10^n). */
static char *put_digits(char *p, int v, int n)
{
	for (int i = n - 1; i >= 0; i--) {
		p[i] = (char)('0' + v % 10);
		v /= 10;
	}
	return p + n;
}

char *clock_format_rfc3339(int64_t ms, char *buf)
{
	struct tm tm;
	time_t secs;
	int64_t frac;
	char *p = buf;

	if (ms < RFC3339_MIN_MS)
		ms = RFC3339_MIN_MS;
	if (ms > RFC3339_MAX_MS)
		ms = RFC3339_MAX_MS;
	/* Floor division: -1 ms is 1969-12-31T23:59:59.999Z, not .-01. */
	frac = ms % 1000;
	if (frac < 0)
		frac += 1000;
	secs = (time_t)((ms - frac) / 1000);
	if (!gmtime_r(&secs, &tm)) {
		snprintf(buf, RFC3339_LEN, "1970-01-01T00:00:00.000Z");
		return buf;
	}
	/* The clamp keeps every field in range, so the digit counts are exact. */
	p = put_digits(p, tm.tm_year + 1900, 4);
	*p++ = '-';
	p = put_digits(p, tm.tm_mon + 1, 2);
	*p++ = '-';
	p = put_digits(p, tm.tm_mday, 2);
	*p++ = 'T';
	p = put_digits(p, tm.tm_hour, 2);
	*p++ = ':';
	p = put_digits(p, tm.tm_min, 2);
	*p++ = ':';
	p = put_digits(p, tm.tm_sec, 2);
	*p++ = '.';
	p = put_digits(p, (int)frac, 3);
	*p++ = 'Z';
	*p = '\0';
	return buf;
}

/* Reads exactly n digits at *p into *out and advances *p. Stops at the NUL, so it never
 * reads past the end of the string. */
static bool read_digits(const char **p, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		char c = (*p)[i];

		if (c < '0' || c > '9')
			return false;
		v = v * 10 + (c - '0');
	}
	*p += n;
	*out = v;
	return true;
}

static bool expect(const char **p, char c)
{
	if (**p != c)
		return false;
	(*p)++;
	return true;
}

static int days_in_month(int year, int month)
{
	static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
	bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;

	return month == 2 && leap ? 29 : days[month - 1];
}

int clock_parse_rfc3339(const char *text, int64_t *out_ms)
{
	const char *p = text;
	int year, month, day, hour, min, sec, ms = 0, off_h, off_m;
	int64_t offset_ms = 0;
	struct tm tm = {0};
	time_t secs;

	if (!text)
		return -1;
	if (!read_digits(&p, 4, &year) || !expect(&p, '-') || !read_digits(&p, 2, &month) ||
	    !expect(&p, '-') || !read_digits(&p, 2, &day))
		return -1;
	if (*p != 'T' && *p != 't') /* RFC 3339 §5.6 allows lower case */
		return -1;
	p++;
	if (!read_digits(&p, 2, &hour) || !expect(&p, ':') || !read_digits(&p, 2, &min) ||
	    !expect(&p, ':') || !read_digits(&p, 2, &sec))
		return -1;
	if (month < 1 || month > 12 || day < 1 || day > days_in_month(year, month) ||
	    hour > 23 || min > 59 || sec > 60) /* 60: a leap second, timegm rolls it over */
		return -1;
	if (*p == '.') {
		int digits = 0;

		p++;
		for (; *p >= '0' && *p <= '9'; p++, digits++) {
			if (digits < 3)
				ms = ms * 10 + (*p - '0');
		}
		if (digits == 0)
			return -1;
		for (; digits < 3; digits++)
			ms *= 10;
	}
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p == '-' ? -1 : 1;

		p++;
		if (!read_digits(&p, 2, &off_h) || !expect(&p, ':') || !read_digits(&p, 2, &off_m))
			return -1;
		if (off_h > 23 || off_m > 59)
			return -1;
		offset_ms = sign * ((int64_t)off_h * 3600000 + (int64_t)off_m * 60000);
	} else {
		return -1;
	}
	if (*p != '\0')
		return -1;

	tm.tm_year = year - 1900;
	tm.tm_mon = month - 1;
	tm.tm_mday = day;
	tm.tm_hour = hour;
	tm.tm_min = min;
	tm.tm_sec = sec;
	secs = timegm(&tm);
	/* The local time minus its offset is UTC: 10:00+02:00 is 08:00Z. */
	*out_ms = (int64_t)secs * 1000 + ms - offset_ms;
	return 0;
}
