/* retry.c: how long to wait before the next try, and whether there is one.
 *
 * Pure arithmetic on a struct retry_policy: no clock, no I/O, and the random source for
 * the exponential window and for jitter comes from the caller. Every product is guarded:
 * policies come from operators and retry counters grow without bound when max_retries is
 * 0, so a large retry_no must saturate, never overflow. */
#include "core/retry.h"

#include <ctype.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define IMMEDIATE_ROUND_CAP_MS RETRY_IMMEDIATE_ROUND_CAP_MS

int64_t retry_immediate_delay(const struct retry_policy *p, int next_try)
{
	int64_t d = p->immediate_delay_ms;
	int64_t k, before, spent, remaining;

	if (next_try < 2 || d <= 0)
		return 0;
	k = next_try;
	/* Delays before tries 2..k-1 were d * (1 + 2 + ... + (k-2)). k <= INT_MAX, so the
	 * triangle number fits in int64_t; its product with d may not. */
	before = (k - 2) * (k - 1) / 2;
	if (before > 0 && d > IMMEDIATE_ROUND_CAP_MS / before)
		return 0; /* the round's minute is already used up */
	spent = d * before;
	remaining = IMMEDIATE_ROUND_CAP_MS - spent;
	if (k - 1 > remaining / d)
		return remaining;
	return d * (k - 1);
}

/* A draw from the source, clamped into [0, 1) (a source may break its contract). */
static double draw(retry_rand_cb rnd, void *rnd_ctx)
{
	double r = rnd ? rnd(rnd_ctx) : 0.0;
	if (!(r >= 0.0)) /* also NaN */
		return 0.0;
	if (r >= 1.0)
		return nextafter(1.0, 0.0);
	return r;
}

static int64_t mul_saturate(int64_t a, int64_t b)
{
	/* a, b >= 0 */
	if (a != 0 && b > INT64_MAX / a)
		return INT64_MAX;
	return a * b;
}

/* Backoff: every retry is re-queued at a random point of a window that starts at
 * min_delay, so a burst of failures comes back spread out, never at one instant. The
 * window's upper end grows with the retry, min_delay * factor^retry_no capped at
 * max_delay (10 s, factor 2: retry 1 in [10 s, 20 s], retry 2 in [10 s, 40 s], then
 * [10 s, 60 s]); a factor of 1 (or a broken one) is Connxio's flat window, every draw in
 * [min_delay, max_delay]. */
static int64_t exponential_delay(const struct retry_policy *p, int retry_no,
				 retry_rand_cb rnd, void *rnd_ctx)
{
	int64_t lo = p->min_delay_ms > 0 ? p->min_delay_ms : 0;
	int64_t hi = p->max_delay_ms > lo ? p->max_delay_ms : lo; /* inverted window: lo */
	int64_t upper, value;
	double grown, r, offset;

	/* pow() saturates to +inf for a large exponent, which the comparisons below map to
	 * hi; a NaN factor or one that does not grow (<= 1) opens the whole window. */
	grown = (double)lo * pow(p->factor, (double)retry_no);
	if (isnan(grown) || !(p->factor > 1.0) || grown >= (double)hi)
		upper = hi;
	else if (grown <= (double)lo)
		upper = lo;
	else
		upper = (int64_t)grown;

	r = draw(rnd, rnd_ctx);
	/* (upper - lo + 1) integer outcomes, so both ends of [lo, upper] can be drawn. */
	offset = floor(r * ((double)(upper - lo) + 1.0));
	if (offset >= (double)(upper - lo))
		return upper;
	value = lo + (int64_t)offset;
	return value < upper ? value : upper;
}

/* delay minus a random part of up to jitter * delay: a value in [delay*(1-jitter), delay]. */
static int64_t apply_jitter(int64_t delay, double jitter, retry_rand_cb rnd, void *rnd_ctx)
{
	double cut;

	if (!(jitter > 0.0) || delay <= 0) /* also NaN */
		return delay;
	if (jitter > 1.0)
		jitter = 1.0;
	cut = floor(draw(rnd, rnd_ctx) * jitter * (double)delay);
	if (!(cut > 0.0))
		return delay;
	if (cut >= (double)delay)
		return 0;
	return delay - (int64_t)cut;
}

int64_t retry_scheduled_delay(const struct retry_policy *p, int retry_no,
			      retry_rand_cb rnd, void *rnd_ctx)
{
	int64_t interval = p->interval_ms > 0 ? p->interval_ms : 0;
	int64_t cap, d;

	if (retry_no < 1)
		retry_no = 1;
	switch (p->policy) {
	case RETRY_LINEAR:
		/* Grows by one interval per retry up to max_delay, so "retry forever" does not
		 * drift into waits of days; a max_delay below one interval caps nothing. */
		cap = p->max_delay_ms > interval ? p->max_delay_ms : interval;
		d = mul_saturate(interval, retry_no);
		return apply_jitter(d < cap ? d : cap, p->jitter, rnd, rnd_ctx);
	case RETRY_EXPONENTIAL:
		return exponential_delay(p, retry_no, rnd, rnd_ctx);
	case RETRY_FIXED:
		break;
	}
	return apply_jitter(interval, p->jitter, rnd, rnd_ctx);
}

bool retry_may_schedule(const struct retry_policy *p, int retries_done)
{
	/* 0 is "retry forever"; a negative count is a broken policy and gets no
	 * scheduled retries rather than infinitely many. */
	if (p->max_retries == 0)
		return true;
	if (p->max_retries < 0)
		return false;
	return retries_done < p->max_retries;
}

bool retry_is_success(int code)
{
	return code >= 200 && code <= 299;
}

bool retry_is_permanent(const struct retry_policy *p, int code)
{
	unsigned bit;

	if (code < 400 || code > 599)
		return false;
	bit = (unsigned)(code - 400);
	return (p->permanent[bit / 64] >> (bit % 64)) & 1u;
}

int retry_permanent_add(struct retry_policy *p, int code)
{
	unsigned bit;

	if (code < 400 || code > 599)
		return -1;
	bit = (unsigned)(code - 400);
	p->permanent[bit / 64] |= (uint64_t)1 << (bit % 64);
	return 0;
}

bool retry_after_applies(int code)
{
	return code == 429 || code == 503;
}

/* ---- Retry-After ------------------------------------------------------------------- */

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static int month_index(const char *name)
{
	static const char *const months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
					     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
	for (int i = 0; i < 12; i++)
		if (strcmp(name, months[i]) == 0)
			return i + 1;
	return 0;
}

/* The three HTTP-date forms; *epoch_s on success. */
static int http_date_parse(const char *v, int64_t *epoch_s)
{
	char wkday[16], mon[4], zone[4];
	int day, year, hh, mm, ss, n = -1;

	/* IMF-fixdate: Sun, 06 Nov 1994 08:49:37 GMT */
	if (sscanf(v, "%3[A-Za-z], %2d %3[A-Za-z] %4d %2d:%2d:%2d %3s%n", wkday, &day, mon, &year,
		   &hh, &mm, &ss, zone, &n) == 8 && n > 0 && v[n] == '\0' && strcmp(zone, "GMT") == 0)
		goto found;
	/* RFC 850: Sunday, 06-Nov-94 08:49:37 GMT (a two-digit year: 19xx from 70 on) */
	n = -1;
	if (sscanf(v, "%15[A-Za-z], %2d-%3[A-Za-z]-%2d %2d:%2d:%2d %3s%n", wkday, &day, mon,
		   &year, &hh, &mm, &ss, zone, &n) == 8 && n > 0 && v[n] == '\0' &&
	    strcmp(zone, "GMT") == 0) {
		year += year < 70 ? 2000 : 1900;
		goto found;
	}
	/* asctime: Sun Nov  6 08:49:37 1994 */
	n = -1;
	if (sscanf(v, "%3[A-Za-z] %3[A-Za-z] %2d %2d:%2d:%2d %4d%n", wkday, mon, &day, &hh, &mm,
		   &ss, &year, &n) == 7 && n > 0 && v[n] == '\0')
		goto found;
	return -1;
found:;
	int m = month_index(mon);
	if (!m || day < 1 || day > 31 || hh > 23 || mm > 59 || ss > 60 || year < 1970 ||
	    hh < 0 || mm < 0 || ss < 0)
		return -1;
	*epoch_s = days_from_civil(year, m, day) * 86400 + hh * 3600 + mm * 60 + ss;
	return 0;
}

int retry_after_parse(const char *value, int64_t now_ms, int64_t *delay_ms)
{
	char buf[64];
	size_t len;
	int64_t at_s;

	if (!value)
		return -1;
	while (*value == ' ' || *value == '\t')
		value++;
	len = strlen(value);
	while (len && (value[len - 1] == ' ' || value[len - 1] == '\t' ||
		       value[len - 1] == '\r' || value[len - 1] == '\n'))
		len--;
	if (len == 0 || len >= sizeof(buf))
		return -1;
	memcpy(buf, value, len);
	buf[len] = '\0';

	if (isdigit((unsigned char)buf[0])) {
		int64_t secs = 0;
		for (size_t i = 0; i < len; i++) {
			if (!isdigit((unsigned char)buf[i]))
				return -1;
			if (secs < INT64_MAX / 10000) /* saturate: any huge value is "very long" */
				secs = secs * 10 + (buf[i] - '0');
		}
		*delay_ms = secs * 1000;
		return 0;
	}
	if (http_date_parse(buf, &at_s))
		return -1;
	/* at_s has a four-digit year: far from overflowing in milliseconds */
	*delay_ms = at_s * 1000 <= now_ms ? 0 : at_s * 1000 - now_ms;
	return 0;
}

/* ---- decisions ------------------------------------------------------------------------ */

int64_t retry_next_delay(const struct retry_policy *p, enum attempt_kind kind, int retries_done,
			 int code, int64_t retry_after_ms, retry_rand_cb rnd, void *rnd_ctx)
{
	int64_t delay, hint;

	if (retry_is_success(code) || retry_is_permanent(p, code) || kind == ATTEMPT_MANUAL)
		return -1;
	if (kind == ATTEMPT_IMMEDIATE)
		retries_done = 0;
	if (retries_done < 0)
		retries_done = 0;
	if (!retry_may_schedule(p, retries_done))
		return -1;
	delay = retry_scheduled_delay(p, retries_done < INT_MAX ? retries_done + 1 : retries_done,
				      rnd, rnd_ctx);
	if (retry_after_ms >= 0 && retry_after_applies(code)) {
		hint = retry_after_ms;
		if (hint > p->retry_after_max_ms)
			hint = p->retry_after_max_ms > 0 ? p->retry_after_max_ms : 0;
		if (hint > delay)
			delay = hint;
	}
	return delay;
}

bool retry_immediate_continue(const struct retry_policy *p, int tries_done, int max_tries,
			      int code, int64_t retry_after_ms)
{
	if (retry_is_success(code) || retry_is_permanent(p, code) || tries_done >= max_tries)
		return false;
	/* The subscriber asked for a pause longer than our next stagger: respect it, and let
	 * the scheduled retry (which honours it) take over. */
	if (retry_after_ms > 0 && retry_after_applies(code) &&
	    retry_after_ms > retry_immediate_delay(p, tries_done + 1))
		return false;
	return true;
}

int64_t retry_requeue_delay(const struct retry_policy *p, retry_rand_cb rnd, void *rnd_ctx)
{
	int64_t lo = p->min_delay_ms > 0 ? p->min_delay_ms : 0;
	int64_t hi = p->max_delay_ms > lo ? p->max_delay_ms : lo;
	double offset = floor(draw(rnd, rnd_ctx) * ((double)(hi - lo) + 1.0));

	if (offset >= (double)(hi - lo))
		return hi;
	return lo + (int64_t)offset;
}

/* ---- the policy's own rules -------------------------------------------------------------- */

int retry_policy_kind_parse(const char *name, enum retry_policy_kind *kind)
{
	static const struct {
		const char *name;
		enum retry_policy_kind kind;
	} names[] = {{"fixed", RETRY_FIXED}, {"linear", RETRY_LINEAR}, {"exponential", RETRY_EXPONENTIAL}};

	for (size_t i = 0; name && i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(name, names[i].name) == 0) {
			*kind = names[i].kind;
			return 0;
		}
	}
	return -1;
}

enum retry_rule retry_policy_check(const struct retry_policy *p, const char *prefix, char *field,
				   size_t fieldlen, char *msg, size_t msglen)
{
	if (p->factor < 1.0 || p->factor > 10.0) {
		snprintf(field, fieldlen, "%sfactor", prefix);
		snprintf(msg, msglen, "%sfactor must be a number from 1 to 10", prefix);
		return RETRY_RULE_RANGE;
	}
	if (p->jitter < 0.0 || p->jitter > 1.0) {
		snprintf(field, fieldlen, "%sjitter", prefix);
		snprintf(msg, msglen, "%sjitter must be a number from 0 to 1", prefix);
		return RETRY_RULE_RANGE;
	}
	/* Linear engine retry retries no fewer than 3 and no more than 10 times, each retry a
	 * whole endpoint-retry round (docs/retries.md) */
	if (p->policy == RETRY_LINEAR && !p->max_retries_auto &&
	    (p->max_retries < 3 || p->max_retries > 10)) {
		snprintf(field, fieldlen, "%smax_retries", prefix);
		snprintf(msg, msglen, "%smax_retries must be from 3 to 10 with policy linear", prefix);
		return RETRY_RULE_RANGE;
	}
	if (p->min_delay_ms > p->max_delay_ms) {
		snprintf(field, fieldlen, "%smin_delay", prefix);
		snprintf(msg, msglen, "%smin_delay must not exceed %smax_delay", prefix, prefix);
		return RETRY_RULE_ORDER;
	}
	return RETRY_RULE_KEPT;
}

/* ---- slot filling ------------------------------------------------------------------- */

int retry_slots_for(const struct retry_policy *p)
{
	int64_t lo = p->min_delay_ms > 0 ? p->min_delay_ms : 0;
	int64_t span = p->max_delay_ms > lo ? p->max_delay_ms - lo : 0;
	int64_t n = span / RETRY_SLOT_MS;

	if (n < 1)
		return 1;
	return n > RETRY_SLOTS_MAX ? RETRY_SLOTS_MAX : (int)n;
}

void retry_slots_setup(struct retry_slots *s, int n, retry_rand_cb rnd, void *rnd_ctx)
{
	if (n < 1)
		n = 1;
	if (n > RETRY_SLOTS_MAX)
		n = RETRY_SLOTS_MAX;
	s->rnd = rnd;
	s->rnd_ctx = rnd_ctx;
	if (s->n == n)
		return;
	memset(s->taken, 0, sizeof(s->taken));
	s->n = n;
	s->n_taken = 0;
}

static bool slot_taken(const struct retry_slots *s, int k)
{
	return (s->taken[k / 64] >> (k % 64)) & 1u;
}

double retry_slots_draw(void *ctx)
{
	struct retry_slots *s = ctx;
	int n = s->n > 0 && s->n <= RETRY_SLOTS_MAX ? s->n : 1;
	int free_slots, pick, k;

	if (s->n_taken >= n) { /* every slot used: the process repeats */
		memset(s->taken, 0, sizeof(s->taken));
		s->n_taken = 0;
	}
	free_slots = n - s->n_taken;
	/* the pick-th free slot, pick uniform in [0, free_slots) */
	pick = (int)(draw(s->rnd, s->rnd_ctx) * (double)free_slots);
	if (pick >= free_slots)
		pick = free_slots - 1;
	for (k = 0; k < n; k++) {
		if (slot_taken(s, k))
			continue;
		if (pick-- == 0)
			break;
	}
	s->taken[k / 64] |= (uint64_t)1 << (k % 64);
	s->n_taken++;
	double v = ((double)k + draw(s->rnd, s->rnd_ctx)) / (double)n;
	double end = (double)(k + 1) / (double)n; /* k + u may round up to k + 1 */
	return v < end ? v : nextafter(end, 0.0);
}
