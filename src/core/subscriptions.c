/* subscriptions.c: reference-counted, immutable subscription sets (see the header). */
#include "core/subscriptions.h"

#include "core/ops_event.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/pattern.h"
#include "core/payload_filter.h"

void sub_registry_init(struct sub_registry *reg)
{
	pthread_mutex_init(&reg->mu, NULL);
	reg->current = sub_set_new();
	reg->generation = 0;
	reg->tickets = reg->published_ticket = 0;
	reg->stale_since_ms = 0;
	reg->stale_why[0] = '\0';
	reg->reload_wanted = 0;
	reg->reading = NULL;
	reg->n_reading = reg->cap_reading = 0;
	reg->changes = NULL;
	reg->n_changes = reg->cap_changes = 0;
	reg->changes_gen = 0;
}

static size_t lower_bound(const struct sub_set *set, const char *id);

/* ---- the patterns' index (sub_set_index) ---------------------------------------------- */

/* One event-type pattern of an enabled subscription: its literal part (all of it, or
 * what comes before its trailing stars), borrowed from the subscription. */
struct match_key {
	const char *text;
	size_t len;
	uint32_t item;      /* its subscription's place in the set */
	uint32_t pattern;   /* which of its patterns */
};

/* The prefix keys of one length: prefix[lo, hi). */
struct prefix_run {
	size_t len, lo, hi;
};

struct sub_match_index {
	struct match_key *exact;    /* literal patterns, sorted by text */
	size_t n_exact;
	struct match_key *prefix;   /* trailing-star patterns, sorted by length then text */
	size_t n_prefix;
	struct prefix_run *runs;    /* one per length among them, shortest first */
	size_t n_runs;
	struct match_key *other;    /* the rest, tried with pattern_match */
	size_t n_other;
};

static void index_free(struct sub_match_index *x)
{
	if (!x)
		return;
	free(x->exact);
	free(x->prefix);
	free(x->runs);
	free(x->other);
	free(x);
}

static int key_text_cmp(const struct match_key *a, const struct match_key *b)
{
	size_t n = a->len < b->len ? a->len : b->len;
	int c = memcmp(a->text, b->text, n);
	return c ? c : (a->len > b->len) - (a->len < b->len);
}

static int exact_cmp(const void *a, const void *b)
{
	return key_text_cmp(a, b);
}

static int prefix_cmp(const void *a, const void *b)
{
	const struct match_key *x = a, *y = b;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return memcmp(x->text, y->text, x->len);
}

/* An index with room for total keys in each array, NULL when out of memory. Each array
 * is filled before it is read: no zeroing (a change of one subscription indexes the set
 * again). */
static struct sub_match_index *index_new(size_t total)
{
	struct sub_match_index *x = calloc(1, sizeof(*x));
	if (!x)
		return NULL;
	if (total && (!(x->exact = malloc(total * sizeof(*x->exact))) ||
		      !(x->prefix = malloc(total * sizeof(*x->prefix))) ||
		      !(x->runs = malloc(total * sizeof(*x->runs))) ||
		      !(x->other = malloc(total * sizeof(*x->other))))) {
		index_free(x);
		return NULL;
	}
	return x;
}

/* Files the patterns of s, the set's item-th subscription, among x's keys when it can be
 * fanned out to (room made by the caller). */
static void index_add(struct sub_match_index *x, const struct subscription *s, size_t item)
{
	if (!s->enabled || s->origin || item > UINT32_MAX) /* never fanned out to */
		return;
	for (size_t p = 0; p < s->n_event_types && p <= UINT32_MAX; p++) {
		const char *pat = s->event_types[p];
		size_t star = strcspn(pat, "*?");
		struct match_key k = {pat, star, (uint32_t)item, (uint32_t)p};
		if (!pat[star])
			x->exact[x->n_exact++] = k;
		else if (pat[star] == '*' && !pat[star + strspn(pat + star, "*")])
			x->prefix[x->n_prefix++] = k;
		else
			x->other[x->n_other++] = k;
	}
}

/* The exact keys sorted by text, the prefix keys by length then text. */
static void index_sort(struct sub_match_index *x)
{
	if (x->n_exact > 1)
		qsort(x->exact, x->n_exact, sizeof(*x->exact), exact_cmp);
	if (x->n_prefix > 1)
		qsort(x->prefix, x->n_prefix, sizeof(*x->prefix), prefix_cmp);
}

/* The prefix keys' runs of one length, from the sorted prefix keys. */
static void index_runs(struct sub_match_index *x)
{
	x->n_runs = 0;
	for (size_t i = 0; i < x->n_prefix; i++) {
		if (!x->n_runs || x->runs[x->n_runs - 1].len != x->prefix[i].len)
			x->runs[x->n_runs++] = (struct prefix_run){x->prefix[i].len, i, i};
		x->runs[x->n_runs - 1].hi = i + 1;
	}
}

void sub_set_index(struct sub_set *set)
{
	size_t total = 0;
	for (size_t i = 0; i < set->n; i++)
		total += set->items[i]->n_event_types;
	struct sub_match_index *x = index_new(total);
	if (!x)
		return;
	for (size_t i = 0; i < set->n; i++)
		index_add(x, set->items[i], i);
	index_sort(x);
	index_runs(x);
	index_free(set->index);
	set->index = x;
}

/* A key of the index a set was copied from, for the set after one change at place at
 * (op: +1 a subscription inserted there, 0 replaced, -1 removed): 0 when it was the old
 * subscription's there, else 1 with its item moved along. */
static int key_moved(struct match_key *k, size_t at, int op)
{
	if (op <= 0 && k->item == at)
		return 0;
	if (op > 0 && k->item >= at)
		k->item++;
	else if (op < 0 && k->item > at)
		k->item--;
	return 1;
}

/* Merges the sorted keys old[0, n_old) (moved by key_moved; dropped ones left out) and
 * add[0, n_add) into out; returns the count. */
static size_t keys_merge(struct match_key *out, const struct match_key *old, size_t n_old,
			 const struct match_key *add, size_t n_add, size_t at, int op,
			 int (*cmp)(const void *, const void *))
{
	size_t n = 0, j = 0;
	for (size_t i = 0; i < n_old; i++) {
		struct match_key k = old[i];
		if (!key_moved(&k, at, op))
			continue;
		while (j < n_add && cmp(&add[j], &k) < 0)
			out[n++] = add[j++];
		out[n++] = k;
	}
	while (j < n_add)
		out[n++] = add[j++];
	return n;
}

/* The index of set from from, the index of the set it is a copy of but for one change
 * at place at (op as for key_moved): the old keys kept in their order, the changed
 * subscription's merged in, no sort of the whole. NULL when out of memory. */
static struct sub_match_index *index_derive(const struct sub_set *set,
					    const struct sub_match_index *from, size_t at, int op)
{
	const struct subscription *s = op >= 0 ? set->items[at] : NULL;
	size_t n_new = s ? s->n_event_types : 0;
	struct sub_match_index *x = index_new(from->n_exact + from->n_prefix + from->n_other +
					      n_new);
	struct sub_match_index *add = index_new(n_new);
	if (!x || !add) {
		index_free(x);
		index_free(add);
		return NULL;
	}
	if (s)
		index_add(add, s, at);
	index_sort(add);
	x->n_exact = keys_merge(x->exact, from->exact, from->n_exact, add->exact, add->n_exact,
				at, op, exact_cmp);
	x->n_prefix = keys_merge(x->prefix, from->prefix, from->n_prefix, add->prefix,
				 add->n_prefix, at, op, prefix_cmp);
	for (size_t i = 0; i < from->n_other; i++) { /* tried in any order */
		struct match_key k = from->other[i];
		if (key_moved(&k, at, op))
			x->other[x->n_other++] = k;
	}
	for (size_t i = 0; i < add->n_other; i++)
		x->other[x->n_other++] = add->other[i];
	index_runs(x);
	index_free(add);
	return x;
}

/* The first of keys[lo, hi) whose text is not below (text, len) in cmp's order. */
static size_t key_lower_bound(const struct match_key *keys, size_t lo, size_t hi,
			      const char *text, size_t len)
{
	struct match_key probe = {text, len, 0, 0};
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (key_text_cmp(&keys[mid], &probe) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Whether a pattern may reach the event at all: outboxd's own events (ops) reach only
 * patterns written for them ("outboxd.*"), never "*". */
static int reaches(const char *pattern, int ops)
{
	return !ops || ops_event_type(pattern);
}

/* items (n of them, room for *cap, each size bytes) with room for one more: the same
 * array, or a larger one (the capacity doubled; *cap updated), NULL when out of memory
 * (items and *cap unchanged). */
static void *room_for_one(void *items, size_t n, size_t *cap, size_t size)
{
	if (n < *cap)
		return items;
	size_t ncap = *cap ? *cap * 2 : 8;
	void *grown = realloc(items, ncap * size);
	if (grown)
		*cap = ncap;
	return grown;
}

/* An event's payload at fan-out: parsed once, by the first subscription with a payload
 * filter among those its type matched (a payload that is not JSON passes no filter). */
struct fanout_payload {
	int by_type;             /* the patterns alone decide (sub_set_match_types) */
	const char *content_type;
	const char *data;
	size_t len;
	json_t *doc;
	int parsed;
};

static int payload_passes(const struct payload_filter *f, struct fanout_payload *pl)
{
	if (!pl->parsed) {
		pl->doc = payload_filter_doc(pl->content_type, pl->data, pl->len);
		pl->parsed = 1;
	}
	return payload_filter_match(f, pl->doc);
}

/* Appends the id of item to *ids (grown as needed) unless its payload filter leaves the
 * event out; -1 when out of memory. */
static int ids_append(const struct sub_set *set, size_t item, struct fanout_payload *pl,
		      char (**ids)[UUID_STR_LEN], size_t *cap, long *n)
{
	if (!pl->by_type && set->items[item]->filter &&
	    !payload_passes(set->items[item]->filter, pl))
		return 0;
	char (*room)[UUID_STR_LEN] = room_for_one(*ids, (size_t)*n, cap, sizeof(**ids));
	if (!room)
		return -1;
	*ids = room;
	memcpy((*ids)[(*n)++], set->items[item]->id, UUID_STR_LEN);
	return 0;
}

/* Every key of keys[lo, hi) whose text is (text, len), into *ids; ops: the event is
 * outboxd's own (reaches). */
static int append_equal(const struct sub_set *set, const struct match_key *keys, size_t lo,
			size_t hi, const char *text, size_t len, int ops, struct fanout_payload *pl,
			char (**ids)[UUID_STR_LEN], size_t *cap, long *n)
{
	for (size_t i = key_lower_bound(keys, lo, hi, text, len);
	     i < hi && keys[i].len == len && memcmp(keys[i].text, text, len) == 0; i++) {
		const struct subscription *s = set->items[keys[i].item];
		if (reaches(s->event_types[keys[i].pattern], ops) &&
		    ids_append(set, keys[i].item, pl, ids, cap, n))
			return -1;
	}
	return 0;
}

static int id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

static long match_indexed(const struct sub_set *set, const char *event_type,
			  struct fanout_payload *pl, char (**ids)[UUID_STR_LEN], size_t *cap)
{
	const struct sub_match_index *x = set->index;
	size_t len = strlen(event_type);
	int ops = ops_event_type(event_type);
	long n = 0;

	if (append_equal(set, x->exact, 0, x->n_exact, event_type, len, ops, pl, ids, cap, &n))
		return -1;
	for (size_t r = 0; r < x->n_runs && x->runs[r].len <= len; r++)
		if (append_equal(set, x->prefix, x->runs[r].lo, x->runs[r].hi, event_type,
				 x->runs[r].len, ops, pl, ids, cap, &n))
			return -1;
	for (size_t i = 0; i < x->n_other; i++) {
		const char *pat = set->items[x->other[i].item]->event_types[x->other[i].pattern];
		if (reaches(pat, ops) && pattern_match(pat, event_type) &&
		    ids_append(set, x->other[i].item, pl, ids, cap, &n))
			return -1;
	}
	/* In the set's order (it is sorted by id), each subscription once however many of
	 * its patterns matched. */
	if (n > 1) {
		qsort(*ids, (size_t)n, sizeof(**ids), id_cmp);
		long u = 1;
		for (long i = 1; i < n; i++)
			if (strcmp((*ids)[i], (*ids)[u - 1]) != 0)
				memcpy((*ids)[u++], (*ids)[i], UUID_STR_LEN);
		n = u;
	}
	return n;
}

static void set_free(struct sub_set *set)
{
	for (size_t i = 0; i < set->n; i++)
		subscription_put(set->items[i]);
	free(set->items);
	index_free(set->index);
	free(set);
}

void sub_registry_destroy(struct sub_registry *reg)
{
	if (reg->current)
		sub_registry_release(reg, reg->current);
	reg->current = NULL;
	for (size_t i = 0; i < reg->n_changes; i++)
		subscription_put(reg->changes[i].sub);
	free(reg->changes);
	free(reg->reading);
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
	unsigned long *r = room_for_one(reg->reading, reg->n_reading, &reg->cap_reading,
					sizeof(*r));
	if (!r)
		abort(); /* a few bytes for each thread reading at once */
	reg->reading = r;
	reg->reading[reg->n_reading++] = t;
	pthread_mutex_unlock(&reg->mu);
	return t;
}

/* The read with ticket t is over; the changes no read in flight began before are
 * forgotten. Under the registry's mutex. */
static void read_done(struct sub_registry *reg, unsigned long t)
{
	unsigned long oldest = 0;
	for (size_t i = 0; i < reg->n_reading; i++)
		if (reg->reading[i] == t)
			reg->reading[i--] = reg->reading[--reg->n_reading];
		else if (!oldest || reg->reading[i] < oldest)
			oldest = reg->reading[i];
	for (size_t i = 0; i < reg->n_changes; i++)
		if (!oldest || reg->changes[i].ticket < oldest) {
			subscription_put(reg->changes[i].sub);
			reg->changes[i--] = reg->changes[--reg->n_changes];
		}
}

void sub_registry_abandon(struct sub_registry *reg, unsigned long ticket)
{
	pthread_mutex_lock(&reg->mu);
	read_done(reg, ticket);
	pthread_mutex_unlock(&reg->mu);
}

/* s (a reference, consumed; NULL: none) as the subscription of set with that id, in
 * place of the one it had. The set is not shared yet. *at and *op say what changed where
 * (op +1 inserted, 0 replaced, -1 removed, 2 nothing). Returns 0, or -1 when out of
 * memory (the reference given back). */
static int set_put(struct sub_set *set, const char *id, struct subscription *s, size_t *at,
		   int *op)
{
	*at = lower_bound(set, id);
	int found = *at < set->n && strcmp(set->items[*at]->id, id) == 0;
	if (!found) {
		*op = s ? 1 : 2;
		return s ? sub_set_add(set, s) : 0;
	}
	index_free(set->index); /* its places are about to move */
	set->index = NULL;
	subscription_put(set->items[*at]);
	if (s) {
		*op = 0;
		set->items[*at] = s;
	} else {
		*op = -1;
		memmove(set->items + *at, set->items + *at + 1,
			(set->n - *at - 1) * sizeof(*set->items));
		set->n--;
	}
	return 0;
}

/* The kept change of that id, or NULL. Under the registry's mutex. */
static struct sub_change *change_of(struct sub_registry *reg, const char *id)
{
	for (size_t i = 0; i < reg->n_changes; i++)
		if (strcmp(reg->changes[i].id, id) == 0)
			return &reg->changes[i];
	return NULL;
}

/* Copies of the kept changes from reads that began after ticket, each with a reference
 * (a count in *n; NULL when there are none, or on running out of memory: -1 in *n).
 * Under the registry's mutex. */
static struct sub_change *changes_after(struct sub_registry *reg, unsigned long ticket,
					long *n)
{
	struct sub_change *out = NULL;
	*n = 0;
	for (size_t i = 0; i < reg->n_changes; i++) {
		if (reg->changes[i].ticket < ticket)
			continue;
		if (!out && !(out = malloc(reg->n_changes * sizeof(*out)))) {
			*n = -1;
			return NULL;
		}
		out[*n] = reg->changes[i];
		if (out[*n].sub)
			subscription_hold(out[*n].sub);
		(*n)++;
	}
	return out;
}

void sub_registry_publish(struct sub_registry *reg, struct sub_set *set)
{
	unsigned long merged_gen = 0;
	int merged = 0;

	for (;;) {
		if (!set->index)
			sub_set_index(set); /* before anyone else reads it */
		pthread_mutex_lock(&reg->mu);
		int newer = set->read_ticket && set->read_ticket < reg->published_ticket;
		if (!newer && set->read_ticket && (!merged || merged_gen != reg->changes_gen)) {
			/* changes applied in place from later reads: apply them here too */
			long n;
			struct sub_change *c = changes_after(reg, set->read_ticket, &n);
			merged_gen = reg->changes_gen;
			pthread_mutex_unlock(&reg->mu);
			for (long i = 0; i < n; i++) {
				size_t at;
				int op;
				if (set_put(set, c[i].id, c[i].sub, &at, &op))
					n = -1; /* set_put gave the reference back */
			}
			free(c);
			if (n < 0) { /* out of memory: a set without them would lose them */
				sub_registry_abandon(reg, set->read_ticket);
				sub_registry_stale(reg, set->loaded_at_ms, "out of memory publishing "
						   "the subscriptions: events cannot be fanned out");
				sub_registry_release(reg, set);
				return;
			}
			merged = 1;
			continue;
		}
		if (set->read_ticket)
			read_done(reg, set->read_ticket);
		if (newer) {
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
		return;
	}
}

/* A new set with from's subscriptions (a reference to each), NULL when out of memory. */
static struct sub_set *set_copy(const struct sub_set *from)
{
	struct sub_set *set = sub_set_new();
	if (sub_set_reserve(set, from->n + 1)) {
		free(set);
		return NULL;
	}
	for (size_t i = 0; i < from->n; i++) {
		subscription_hold(from->items[i]);
		set->items[i] = from->items[i];
	}
	set->n = from->n;
	set->loaded_at_ms = from->loaded_at_ms;
	set->read_ticket = from->read_ticket;
	set->defaults = from->defaults;
	set->has_defaults = from->has_defaults;
	return set;
}

/* Keeps the change of id from read ticket when a read in flight began before it.
 * Returns -1 when out of memory. Under the registry's mutex. */
static int keep_change(struct sub_registry *reg, const char *id, struct subscription *s,
		       unsigned long ticket)
{
	int needed = 0;
	for (size_t i = 0; i < reg->n_reading && !needed; i++)
		needed = reg->reading[i] < ticket;
	if (!needed)
		return 0;
	struct sub_change *c = change_of(reg, id);
	if (!c) {
		struct sub_change *room = room_for_one(reg->changes, reg->n_changes,
						       &reg->cap_changes, sizeof(*room));
		if (!room)
			return -1;
		reg->changes = room;
		c = &reg->changes[reg->n_changes++];
		snprintf(c->id, sizeof(c->id), "%s", id);
	} else if (c->sub) {
		subscription_put(c->sub);
	}
	c->ticket = ticket;
	c->sub = s;
	if (s)
		subscription_hold(s);
	reg->changes_gen++;
	return 0;
}

int sub_registry_apply(struct sub_registry *reg, const char *id, struct subscription *s,
		       unsigned long ticket)
{
	for (;;) {
		pthread_mutex_lock(&reg->mu);
		struct sub_change *known = change_of(reg, id);
		if (ticket < reg->published_ticket || (known && known->ticket > ticket)) {
			read_done(reg, ticket); /* a read that began later knows better */
			pthread_mutex_unlock(&reg->mu);
			if (s)
				subscription_put(s);
			return 0;
		}
		struct sub_set *cur = reg->current;
		cur->refs++;
		unsigned long gen = reg->generation;
		pthread_mutex_unlock(&reg->mu);

		struct sub_set *next = set_copy(cur);
		size_t at;
		int op;
		if (next && s)
			subscription_hold(s);
		if (!next || set_put(next, id, s, &at, &op)) {
			sub_registry_release(reg, cur);
			if (next)
				sub_registry_release(reg, next);
			sub_registry_abandon(reg, ticket);
			if (s)
				subscription_put(s);
			return -1;
		}
		/* from cur's index, without sorting every pattern again */
		if (cur->index && op != 2)
			next->index = index_derive(next, cur->index, at, op);
		sub_registry_release(reg, cur);
		if (!next->index)
			sub_set_index(next);

		pthread_mutex_lock(&reg->mu);
		if (reg->generation != gen) { /* published meanwhile: start from that one */
			pthread_mutex_unlock(&reg->mu);
			sub_registry_release(reg, next);
			continue;
		}
		read_done(reg, ticket);
		if (keep_change(reg, id, s, ticket)) {
			pthread_mutex_unlock(&reg->mu);
			sub_registry_release(reg, next);
			if (s)
				subscription_put(s);
			return -1;
		}
		cur = reg->current;
		reg->current = next;
		reg->generation++;
		pthread_mutex_unlock(&reg->mu);
		sub_registry_release(reg, cur);
		if (s)
			subscription_put(s);
		return 0;
	}
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

int sub_set_reserve(struct sub_set *set, size_t n)
{
	if (n <= set->cap)
		return 0;
	struct subscription **items = realloc(set->items, n * sizeof(*items));
	if (!items)
		return -1;
	set->items = items;
	set->cap = n;
	return 0;
}

int sub_set_add(struct sub_set *set, struct subscription *s)
{
	if (set->n == set->cap && sub_set_reserve(set, set->cap ? set->cap * 2 : 8)) {
		subscription_put(s);
		return -1;
	}
	struct subscription **items = set->items;
	index_free(set->index); /* its places are about to move */
	set->index = NULL;
	/* Kept sorted by id so the dispatcher finds a delivery's subscription in log n; ids
	 * are UUIDv7 and come from the store in creation order, so this is an append. */
	size_t at = lower_bound(set, s->id);
	memmove(items + at + 1, items + at, (set->n - at) * sizeof(*items));
	items[at] = s;
	set->n++;
	return 0;
}

size_t sub_set_place(const struct sub_set *set, const char *id)
{
	size_t at = lower_bound(set, id);
	return at < set->n && strcmp(set->items[at]->id, id) == 0 ? at : set->n;
}

const struct subscription *sub_set_find(const struct sub_set *set, const char *id)
{
	size_t at = sub_set_place(set, id);
	return at < set->n ? set->items[at] : NULL;
}

/* Fan-out of one event: sub_set_match and sub_set_match_types (subscriptions.h). */
static long match(const struct sub_set *set, const char *event_type, struct fanout_payload pl,
		  char (**ids)[UUID_STR_LEN], size_t *cap)
{
	long n = 0;
	if (set->index) {
		n = match_indexed(set, event_type, &pl, ids, cap);
		json_decref(pl.doc);
		return n;
	}
	int ops = ops_event_type(event_type);
	for (size_t i = 0; i < set->n; i++) {
		const struct subscription *s = set->items[i];
		if (!s->enabled || s->origin) /* an envelope's own: never fanned out to */
			continue;
		int hit = 0;
		for (size_t p = 0; p < s->n_event_types && !hit; p++)
			hit = reaches(s->event_types[p], ops) &&
			      pattern_match(s->event_types[p], event_type);
		if (hit && ids_append(set, i, &pl, ids, cap, &n)) {
			n = -1;
			break;
		}
	}
	json_decref(pl.doc);
	return n;
}

long sub_set_match(const struct sub_set *set, const char *event_type, const char *content_type,
		   const void *payload, size_t payload_len, char (**ids)[UUID_STR_LEN],
		   size_t *cap)
{
	struct fanout_payload pl = {0, content_type, payload, payload_len, NULL, 0};
	return match(set, event_type, pl, ids, cap);
}

long sub_set_match_types(const struct sub_set *set, const char *event_type,
			 char (**ids)[UUID_STR_LEN], size_t *cap)
{
	struct fanout_payload pl = {1, NULL, NULL, 0, NULL, 0};
	return match(set, event_type, pl, ids, cap);
}
