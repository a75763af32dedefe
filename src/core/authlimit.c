/* authlimit.c: failed authentications per source address (see authlimit.h). A fixed
 * open-addressing table under one mutex; no I/O. */
#include "core/authlimit.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROBE 8 /* places an address may take, from its hash on */

struct slot {
	char addr[48];            /* "" when free; an IPv6 address's text fits */
	int64_t window_start;     /* the first failure of the current window */
	int failures;             /* in the current window */
	int64_t limited_until;    /* 0, or while limited */
	int64_t last_seen;
};

struct authlimit {
	pthread_mutex_t mu;
	uint32_t hash_key;        /* keys the hash: an address's place cannot be aimed at */
	struct slot slots[AUTHLIMIT_SLOTS];
	int64_t minute_start;     /* the global audit budget's minute */
	long audited;             /* in that minute */
	long unaudited;
};

struct authlimit *authlimit_new(uint32_t hash_key)
{
	struct authlimit *l = calloc(1, sizeof(*l));
	if (!l)
		return NULL;
	pthread_mutex_init(&l->mu, NULL);
	l->hash_key = hash_key;
	return l;
}

void authlimit_free(struct authlimit *l)
{
	if (!l)
		return;
	pthread_mutex_destroy(&l->mu);
	free(l);
}

/* The place of addr: where it is, else a free one, else the least recently seen of its
 * PROBE places (forgotten). */
static struct slot *slot_of(struct authlimit *l, const char *addr)
{
	uint32_t h = l->hash_key;
	for (const char *p = addr; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	struct slot *oldest = NULL, *free_slot = NULL;

	for (int i = 0; i < PROBE; i++) {
		struct slot *s = &l->slots[(h + (uint32_t)i) % AUTHLIMIT_SLOTS];
		if (s->addr[0] && strcmp(s->addr, addr) == 0)
			return s;
		if (!s->addr[0] && !free_slot)
			free_slot = s;
		if (!oldest || s->last_seen < oldest->last_seen)
			oldest = s;
	}
	struct slot *s = free_slot ? free_slot : oldest;
	memset(s, 0, sizeof(*s));
	snprintf(s->addr, sizeof(s->addr), "%s", addr);
	return s;
}

void authlimit_fail(struct authlimit *l, const char *addr, int64_t now_ms,
		    struct authlimit_verdict *v)
{
	memset(v, 0, sizeof(*v));
	if (!addr || !*addr)
		addr = "unknown";

	pthread_mutex_lock(&l->mu);
	struct slot *s = slot_of(l, addr);
	s->last_seen = now_ms;
	if (s->limited_until && now_ms >= s->limited_until) {
		s->limited_until = 0;
		s->failures = 0;
		s->window_start = now_ms;
	}
	if (s->limited_until) {
		v->limited = 1;
	} else {
		if (!s->failures || now_ms - s->window_start >= AUTHLIMIT_WINDOW_MS) {
			s->window_start = now_ms;
			s->failures = 0;
		}
		s->failures++;
		if (s->failures > AUTHLIMIT_FAILURES) {
			s->limited_until = now_ms + AUTHLIMIT_WINDOW_MS;
			v->limited = 1;
			v->started = 1;
		}
		v->audit = 1;
	}
	if (v->limited) {
		int64_t left = s->limited_until - now_ms;
		v->retry_after_s = (int)((left + 999) / 1000);
		if (v->retry_after_s < 1)
			v->retry_after_s = 1;
	}

	/* every address together: at most AUTHLIMIT_AUDIT_PER_MINUTE rows a minute */
	if (!l->minute_start || now_ms - l->minute_start >= 60000) {
		v->unaudited = l->unaudited;
		l->minute_start = now_ms;
		l->audited = 0;
		l->unaudited = 0;
	}
	if (v->audit) {
		if (l->audited < AUTHLIMIT_AUDIT_PER_MINUTE) {
			l->audited++;
		} else {
			v->audit = 0;
			l->unaudited++;
		}
	}
	pthread_mutex_unlock(&l->mu);
}
