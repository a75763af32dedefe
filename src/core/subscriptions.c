/* subscriptions.c: reference-counted, immutable subscription sets (see the header). */
#include "core/subscriptions.h"

#include "core/ops_event.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pattern.h"

void sub_registry_init(struct sub_registry *reg)
{
	pthread_mutex_init(&reg->mu, NULL);
	reg->current = sub_set_new();
	reg->generation = 0;
	reg->tickets = reg->published_ticket = 0;
	reg->stale_since_ms = 0;
	reg->stale_why[0] = '\0';
	reg->reload_wanted = 0;
}

static void set_free(struct sub_set *set)
{
	for (size_t i = 0; i < set->n; i++)
		subscription_free(set->items[i]);
	free(set->items);
	free(set);
}

void sub_registry_destroy(struct sub_registry *reg)
{
	if (reg->current)
		sub_registry_release(reg, reg->current);
	reg->current = NULL;
	pthread_mutex_destroy(&reg->mu);
}

struct sub_set *sub_registry_acquire(struct sub_registry *reg)
{
	pthread_mutex_lock(&reg->mu);
	struct sub_set *set = reg->current;
	set->refs++;
	pthread_mutex_unlock(&reg->mu);
	return set;
}

void sub_registry_release(struct sub_registry *reg, struct sub_set *set)
{
	pthread_mutex_lock(&reg->mu);
	int last = --set->refs == 0;
	pthread_mutex_unlock(&reg->mu);
	if (last)
		set_free(set);
}

unsigned long sub_registry_ticket(struct sub_registry *reg)
{
	pthread_mutex_lock(&reg->mu);
	unsigned long t = ++reg->tickets;
	pthread_mutex_unlock(&reg->mu);
	return t;
}

void sub_registry_publish(struct sub_registry *reg, struct sub_set *set)
{
	pthread_mutex_lock(&reg->mu);
	if (set->read_ticket && set->read_ticket < reg->published_ticket) {
		pthread_mutex_unlock(&reg->mu);
		sub_registry_release(reg, set); /* a newer read is published already */
		return;
	}
	if (set->read_ticket)
		reg->published_ticket = set->read_ticket;
	struct sub_set *old = reg->current;
	reg->current = set;
	reg->generation++;
	reg->stale_since_ms = 0;
	reg->stale_why[0] = '\0';
	pthread_mutex_unlock(&reg->mu);
	if (old)
		sub_registry_release(reg, old);
}

void sub_registry_stale(struct sub_registry *reg, int64_t now_ms, const char *why)
{
	pthread_mutex_lock(&reg->mu);
	if (!reg->stale_since_ms)
		reg->stale_since_ms = now_ms > 0 ? now_ms : 1;
	snprintf(reg->stale_why, sizeof(reg->stale_why), "%s", why ? why : "");
	pthread_mutex_unlock(&reg->mu);
}

int sub_registry_current(struct sub_registry *reg, char *why, size_t whylen)
{
	pthread_mutex_lock(&reg->mu);
	int current = reg->stale_since_ms == 0;
	if (!current && why && whylen)
		snprintf(why, whylen, "%s", reg->stale_why);
	pthread_mutex_unlock(&reg->mu);
	return current;
}

void sub_registry_want_reload(struct sub_registry *reg)
{
	pthread_mutex_lock(&reg->mu);
	reg->reload_wanted = 1;
	pthread_mutex_unlock(&reg->mu);
}

int sub_registry_take_reload(struct sub_registry *reg)
{
	pthread_mutex_lock(&reg->mu);
	int wanted = reg->reload_wanted;
	reg->reload_wanted = 0;
	pthread_mutex_unlock(&reg->mu);
	return wanted;
}

struct sub_set *sub_set_new(void)
{
	struct sub_set *set = calloc(1, sizeof(*set));
	if (!set)
		abort(); /* nothing sensible to do without a few bytes at start-up */
	set->refs = 1;
	return set;
}

/* Index of the first item whose id is not below id (binary search; items are kept
 * sorted by id). */
static size_t lower_bound(const struct sub_set *set, const char *id)
{
	size_t lo = 0, hi = set->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(set->items[mid]->id, id) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int sub_set_add(struct sub_set *set, struct subscription *s)
{
	struct subscription **items = realloc(set->items, (set->n + 1) * sizeof(*items));
	if (!items) {
		subscription_free(s);
		return -1;
	}
	set->items = items;
	/* Kept sorted by id so the dispatcher finds a delivery's subscription in log n; ids
	 * are UUIDv7 and come from the store in creation order, so this is an append. */
	size_t at = lower_bound(set, s->id);
	memmove(items + at + 1, items + at, (set->n - at) * sizeof(*items));
	items[at] = s;
	set->n++;
	return 0;
}

const struct subscription *sub_set_find(const struct sub_set *set, const char *id)
{
	size_t at = lower_bound(set, id);
	return at < set->n && strcmp(set->items[at]->id, id) == 0 ? set->items[at] : NULL;
}

long sub_set_match(const struct sub_set *set, const char *event_type,
		   char (**ids)[UUID_STR_LEN], size_t *cap)
{
	long n = 0;
	/* outboxd's own events reach only patterns written for them ("outboxd.*"), never
	 * "*" */
	int ops = ops_event_type(event_type);
	for (size_t i = 0; i < set->n; i++) {
		const struct subscription *s = set->items[i];
		if (!s->enabled || s->origin) /* an envelope's own: never fanned out to */
			continue;
		int hit = 0;
		for (size_t p = 0; p < s->n_event_types && !hit; p++)
			hit = (!ops || ops_event_type(s->event_types[p])) &&
			      pattern_match(s->event_types[p], event_type);
		if (!hit)
			continue;
		if ((size_t)n == *cap) {
			size_t ncap = *cap ? *cap * 2 : 8;
			char (*grown)[UUID_STR_LEN] = realloc(*ids, ncap * sizeof(**ids));
			if (!grown)
				return -1;
			*ids = grown;
			*cap = ncap;
		}
		memcpy((*ids)[n++], s->id, UUID_STR_LEN);
	}
	return n;
}
