/* test_subscriptions.c: subscription sets — lookup by id whatever the order of adds,
 * matching of enabled subscriptions, the patterns' index matching exactly what trying
 * every pattern matches (random sets and event types), reference counting through the
 * registry, reads published in the order they began, one subscription changed in place
 * without losing it to a read that began before (and threads doing both at once). */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/subscriptions.h"

static struct subscription *sub(int k, const char *pattern, int enabled)
{
	struct subscription *s = calloc(1, sizeof(*s));
	snprintf(s->id, sizeof(s->id), "01a20000-0000-7000-8000-%012d", k);
	s->event_types = calloc(1, sizeof(char *));
	s->event_types[0] = strdup(pattern);
	s->n_event_types = 1;
	s->enabled = enabled;
	return s;
}

static void test_find_any_order(void **state)
{
	static const int order[] = {5, 1, 9, 3, 7, 0, 8, 2, 6, 4};
	struct sub_set *set = sub_set_new();
	for (int i = 0; i < 10; i++)
		assert_int_equal(sub_set_add(set, sub(order[i], "*", 1)), 0);
	for (size_t i = 1; i < set->n; i++)
		assert_true(strcmp(set->items[i - 1]->id, set->items[i]->id) < 0);
	for (int k = 0; k < 10; k++) {
		char id[UUID_STR_LEN];
		snprintf(id, sizeof(id), "01a20000-0000-7000-8000-%012d", k);
		const struct subscription *s = sub_set_find(set, id);
		assert_non_null(s);
		assert_string_equal(s->id, id);
	}
	assert_null(sub_set_find(set, "01a20000-0000-7000-8000-000000000010"));
	assert_null(sub_set_find(set, ""));

	struct sub_registry reg;
	sub_registry_init(&reg);
	sub_registry_publish(&reg, set);
	struct sub_set *held = sub_registry_acquire(&reg);
	sub_registry_publish(&reg, sub_set_new()); /* the held set stays valid */
	assert_int_equal(held->n, 10);
	sub_registry_release(&reg, held);
	sub_registry_destroy(&reg);
}

static void test_match_enabled_only(void **state)
{
	struct sub_set *set = sub_set_new();
	assert_int_equal(sub_set_add(set, sub(2, "user.*", 1)), 0);
	assert_int_equal(sub_set_add(set, sub(1, "user.created", 0)), 0);
	assert_int_equal(sub_set_add(set, sub(3, "order.*", 1)), 0);
	char (*ids)[UUID_STR_LEN] = NULL;
	size_t cap = 0;
	assert_int_equal(sub_set_match(set, "user.created", NULL, NULL, 0, &ids, &cap), 1);
	assert_string_equal(ids[0], "01a20000-0000-7000-8000-000000000002");
	assert_int_equal(sub_set_match(set, "billing.paid", NULL, NULL, 0, &ids, &cap), 0);
	free(ids);
	struct sub_registry reg;
	sub_registry_init(&reg);
	sub_registry_publish(&reg, set);
	sub_registry_destroy(&reg);
}

/* A random event type or pattern over a small alphabet, so that they often meet; a
 * pattern may hold stars and '?' anywhere, an event type sometimes is outboxd's own. */
static void random_text(char *out, size_t cap, int pattern, unsigned *seed)
{
	static const char alpha[] = "ab.";
	size_t n = 0;
	if (rand_r(seed) % 6 == 0)
		n = (size_t)snprintf(out, cap, "outboxd.");
	size_t len = (size_t)(rand_r(seed) % 6);
	for (size_t i = 0; i < len && n + 1 < cap; i++) {
		int r = rand_r(seed) % 10;
		out[n++] = pattern && r == 0 ? '*' : pattern && r == 1 ? '?' : alpha[r % 3];
	}
	if (pattern && rand_r(seed) % 3 == 0 && n + 2 < cap) /* a trailing star or two */
		for (int k = 1 + rand_r(seed) % 2; k > 0; k--)
			out[n++] = '*';
	if (pattern && n == 0)
		out[n++] = '*';
	out[n] = '\0';
}

/* Subscription k with 1-3 random patterns, sometimes disabled or an envelope's own. */
static struct subscription *random_sub(int k, unsigned *seed)
{
	char pat[32];
	random_text(pat, sizeof(pat), 1, seed);
	struct subscription *s = sub(k, pat, rand_r(seed) % 5 != 0);
	int np = 1 + rand_r(seed) % 3;
	s->event_types = realloc(s->event_types, (size_t)np * sizeof(char *));
	for (int p = 1; p < np; p++) {
		random_text(pat, sizeof(pat), 1, seed);
		s->event_types[p] = strdup(pat);
	}
	s->n_event_types = (size_t)np;
	if (rand_r(seed) % 7 == 0)
		s->origin = strdup("kafka_envelope");
	return s;
}

/* n random event types matched by both sets: the same subscriptions, in the same order
 * (plain tries every pattern, indexed uses its index); what says where when not. */
static void expect_same_matches(const struct sub_set *plain, const struct sub_set *indexed,
				int n, unsigned *seed, const char *where, int at)
{
	static char (*want)[UUID_STR_LEN], (*got)[UUID_STR_LEN];
	static size_t want_cap, got_cap;
	for (int e = 0; e < n; e++) {
		char type[32];
		random_text(type, sizeof(type), 0, seed);
		long w = sub_set_match(plain, type, NULL, NULL, 0, &want, &want_cap);
		long g = sub_set_match(indexed, type, NULL, NULL, 0, &got, &got_cap);
		if (w != g)
			fail_msg("%s %d, \"%s\": %ld matched pattern by pattern, %ld indexed", where,
				 at, type, w, g);
		for (long i = 0; i < w; i++)
			assert_string_equal(want[i], got[i]);
	}
	if (!n) { /* the last call: give the buffers back */
		free(want);
		free(got);
		want = got = NULL;
		want_cap = got_cap = 0;
	}
}

static void test_index_matches_as_every_pattern(void **state)
{
	unsigned seed = 12345;
	for (int round = 0; round < 200; round++) {
		/* two sets alike: one tried pattern by pattern, one indexed */
		struct sub_set *plain = sub_set_new(), *indexed = sub_set_new();
		int subs = 1 + rand_r(&seed) % 40;
		for (int k = 0; k < subs; k++) {
			unsigned again = seed;
			assert_int_equal(sub_set_add(plain, random_sub(k, &again)), 0);
			assert_int_equal(sub_set_add(indexed, random_sub(k, &seed)), 0);
		}
		sub_set_index(indexed);
		assert_non_null(indexed->index);
		expect_same_matches(plain, indexed, 50, &seed, "round", round);
		struct sub_registry reg;
		sub_registry_init(&reg);
		sub_registry_publish(&reg, plain);
		sub_registry_publish(&reg, indexed);
		sub_registry_destroy(&reg);
	}
	expect_same_matches(NULL, NULL, 0, &seed, "", 0);
}

/* Two reads of the store side by side: the one that began later was published first
 * (it holds a subscription just created); the earlier one, finishing after it, must not
 * put the older set back. */
static void test_older_read_does_not_replace_newer(void **state)
{
	struct sub_registry reg;
	sub_registry_init(&reg);
	unsigned long early = sub_registry_ticket(&reg), late = sub_registry_ticket(&reg);
	assert_true(late > early);

	struct sub_set *newer = sub_set_new(), *older = sub_set_new();
	assert_int_equal(sub_set_add(newer, sub(1, "*", 1)), 0);
	assert_int_equal(sub_set_add(newer, sub(2, "*", 1)), 0);
	assert_int_equal(sub_set_add(older, sub(1, "*", 1)), 0);
	newer->read_ticket = late;
	older->read_ticket = early;
	sub_registry_publish(&reg, newer);
	sub_registry_publish(&reg, older); /* dropped */
	struct sub_set *cur = sub_registry_acquire(&reg);
	assert_int_equal(cur->n, 2);
	sub_registry_release(&reg, cur);

	/* a later read is published as usual, and so is a set without a ticket */
	struct sub_set *later = sub_set_new();
	later->read_ticket = sub_registry_ticket(&reg);
	sub_registry_publish(&reg, later);
	cur = sub_registry_acquire(&reg);
	assert_int_equal(cur->n, 0);
	sub_registry_release(&reg, cur);
	struct sub_set *unticketed = sub_set_new();
	assert_int_equal(sub_set_add(unticketed, sub(3, "*", 1)), 0);
	sub_registry_publish(&reg, unticketed);
	cur = sub_registry_acquire(&reg);
	assert_int_equal(cur->n, 1);
	sub_registry_release(&reg, cur);
	sub_registry_destroy(&reg);
}

/* Changes applied in place derive the set's index from the one before (no sort of every
 * pattern): after each of random insertions anywhere by id, replacements and removals,
 * it matches as trying every pattern does. */
static void test_applied_index_matches_as_every_pattern(void **state)
{
	unsigned seed = 4242;
	struct sub_registry reg;

	sub_registry_init(&reg);
	struct sub_set *first = sub_set_new();
	for (int k = 0; k < 60; k += 3)
		assert_int_equal(sub_set_add(first, random_sub(k, &seed)), 0);
	first->read_ticket = sub_registry_ticket(&reg);
	sub_registry_publish(&reg, first);
	for (int step = 0; step < 400; step++) {
		int k = rand_r(&seed) % 60;
		struct subscription *s = rand_r(&seed) % 4 ? random_sub(k, &seed) : NULL;
		struct subscription *probe = sub(k, "-", 1);
		assert_int_equal(sub_registry_apply(&reg, probe->id, s, sub_registry_ticket(&reg)), 0);
		subscription_free(probe);
		struct sub_set *cur = sub_registry_acquire(&reg), *plain = sub_set_new();
		assert_non_null(cur->index);
		for (size_t i = 0; i < cur->n; i++) {
			subscription_hold(cur->items[i]);
			assert_int_equal(sub_set_add(plain, cur->items[i]), 0);
		}
		expect_same_matches(plain, cur, 20, &seed, "step", step);
		sub_registry_release(&reg, plain);
		sub_registry_release(&reg, cur);
	}
	expect_same_matches(NULL, NULL, 0, &seed, "", 0);
	sub_registry_destroy(&reg);
}

/* The pattern of the current set's subscription k, NULL when the set has none. */
static const char *pattern_of(struct sub_registry *reg, int k, char *buf, size_t len)
{
	struct subscription *probe = sub(k, "-", 1);
	struct sub_set *cur = sub_registry_acquire(reg);
	const struct subscription *s = sub_set_find(cur, probe->id);
	const char *out = s ? (snprintf(buf, len, "%s", s->event_types[0]), buf) : NULL;
	sub_registry_release(reg, cur);
	subscription_free(probe);
	return out;
}

/* A full read with subscriptions 1..n of pattern "a", as published from ticket t. */
static struct sub_set *full_read(int n, unsigned long t)
{
	struct sub_set *set = sub_set_new();
	for (int k = 1; k <= n; k++)
		assert_int_equal(sub_set_add(set, sub(k, "a", 1)), 0);
	set->read_ticket = t;
	return set;
}

/* One subscription changed in place: added, replaced, removed, the others kept; the set
 * is indexed (matching finds the new one); nothing is kept when no read is in flight. */
static void test_apply_in_place(void **state)
{
	struct sub_registry reg;
	char buf[32];
	char (*ids)[UUID_STR_LEN] = NULL;
	size_t cap = 0;

	sub_registry_init(&reg);
	sub_registry_publish(&reg, full_read(2, sub_registry_ticket(&reg)));
	assert_int_equal(sub_registry_apply(&reg, "x", NULL, sub_registry_ticket(&reg)), 0);
	struct subscription *three = sub(3, "order.*", 1);
	assert_int_equal(sub_registry_apply(&reg, three->id, three, sub_registry_ticket(&reg)), 0);
	struct subscription *two = sub(2, "b", 1);
	assert_int_equal(sub_registry_apply(&reg, two->id, two, sub_registry_ticket(&reg)), 0);
	struct subscription *one = sub(1, "-", 1);
	char one_id[UUID_STR_LEN];
	memcpy(one_id, one->id, UUID_STR_LEN);
	subscription_free(one);
	assert_int_equal(sub_registry_apply(&reg, one_id, NULL, sub_registry_ticket(&reg)), 0);

	assert_null(pattern_of(&reg, 1, buf, sizeof(buf)));
	assert_string_equal(pattern_of(&reg, 2, buf, sizeof(buf)), "b");
	assert_string_equal(pattern_of(&reg, 3, buf, sizeof(buf)), "order.*");
	struct sub_set *cur = sub_registry_acquire(&reg);
	assert_int_equal(cur->n, 2);
	assert_non_null(cur->index);
	assert_int_equal(sub_set_match(cur, "order.created", NULL, NULL, 0, &ids, &cap), 1);
	sub_registry_release(&reg, cur);
	assert_int_equal(reg.n_changes, 0);
	assert_int_equal(reg.n_reading, 0);
	free(ids);
	sub_registry_destroy(&reg);
}

/* A full read that began before a change applied in place, published after it: the
 * change is applied to it too (an addition, a replacement, a removal), then forgotten. */
static void test_apply_survives_older_read(void **state)
{
	struct sub_registry reg;
	char buf[32];

	sub_registry_init(&reg);
	sub_registry_publish(&reg, full_read(3, sub_registry_ticket(&reg)));
	unsigned long before = sub_registry_ticket(&reg); /* a full read starts */
	struct subscription *four = sub(4, "new", 1), *two = sub(2, "b", 1);
	struct subscription *three = sub(3, "-", 1);
	char three_id[UUID_STR_LEN];
	memcpy(three_id, three->id, UUID_STR_LEN);
	subscription_free(three);
	assert_int_equal(sub_registry_apply(&reg, four->id, four, sub_registry_ticket(&reg)), 0);
	assert_int_equal(sub_registry_apply(&reg, two->id, two, sub_registry_ticket(&reg)), 0);
	assert_int_equal(sub_registry_apply(&reg, three_id, NULL, sub_registry_ticket(&reg)), 0);
	assert_int_equal(reg.n_changes, 3);
	sub_registry_publish(&reg, full_read(3, before)); /* it saw none of them */
	assert_string_equal(pattern_of(&reg, 1, buf, sizeof(buf)), "a");
	assert_string_equal(pattern_of(&reg, 2, buf, sizeof(buf)), "b");
	assert_null(pattern_of(&reg, 3, buf, sizeof(buf)));
	assert_string_equal(pattern_of(&reg, 4, buf, sizeof(buf)), "new");
	assert_int_equal(reg.n_changes, 0);
	assert_int_equal(reg.n_reading, 0);
	sub_registry_destroy(&reg);
}

/* A change read before what is already published is dropped, whether the newer read was
 * a full one or the same subscription's: an older value never comes back. */
static void test_apply_never_goes_back(void **state)
{
	struct sub_registry reg;
	char buf[32];

	sub_registry_init(&reg);
	unsigned long old = sub_registry_ticket(&reg);
	sub_registry_publish(&reg, full_read(1, sub_registry_ticket(&reg)));
	struct subscription *stale = sub(1, "old", 1);
	assert_int_equal(sub_registry_apply(&reg, stale->id, stale, old), 0);
	assert_string_equal(pattern_of(&reg, 1, buf, sizeof(buf)), "a");

	/* the same subscription read twice, applied in the other order */
	unsigned long t1 = sub_registry_ticket(&reg), t2 = sub_registry_ticket(&reg);
	struct subscription *v2 = sub(1, "v2", 1), *v1 = sub(1, "v1", 1);
	assert_int_equal(sub_registry_apply(&reg, v2->id, v2, t2), 0);
	assert_int_equal(sub_registry_apply(&reg, v1->id, v1, t1), 0);
	assert_string_equal(pattern_of(&reg, 1, buf, sizeof(buf)), "v2");
	/* deleted, then a read from before the deletion arrives */
	t1 = sub_registry_ticket(&reg);
	t2 = sub_registry_ticket(&reg);
	struct subscription *back = sub(1, "back", 1);
	assert_int_equal(sub_registry_apply(&reg, back->id, NULL, t2), 0);
	assert_int_equal(sub_registry_apply(&reg, back->id, back, t1), 0);
	assert_null(pattern_of(&reg, 1, buf, sizeof(buf)));
	assert_int_equal(reg.n_changes, 0);
	/* an abandoned read is no longer in flight */
	sub_registry_abandon(&reg, sub_registry_ticket(&reg));
	assert_int_equal(reg.n_reading, 0);
	sub_registry_destroy(&reg);
}

/* A store of KEYS subscriptions, each present or not, with a version that every write
 * raises, that threads change and read as the API and the reloads do: a change, then a
 * read of that row applied in place; meanwhile whole reads published. An observer checks
 * that no version it saw in a set goes back in a later one (an older read winning); once
 * all are done, the set is the store. */
#define KEYS 12
#define WRITERS 3
#define CHANGES 1500
static struct {
	pthread_mutex_t mu;
	int version[KEYS];
	int present[KEYS];
} store = {PTHREAD_MUTEX_INITIALIZER, {0}, {0}};
static struct sub_registry stress_reg;
static volatile int writers_done;
static volatile int went_back;

static struct subscription *stored_sub(int k)
{
	char pattern[16];
	snprintf(pattern, sizeof(pattern), "v%d", store.version[k]);
	return store.present[k] ? sub(k, pattern, 1) : NULL;
}

static void *writer(void *arg)
{
	unsigned seed = (unsigned)(uintptr_t)arg;
	char id[UUID_STR_LEN];
	for (int i = 0; i < CHANGES; i++) {
		int k = (int)(rand_r(&seed) % KEYS);
		pthread_mutex_lock(&store.mu); /* the API's write */
		store.version[k]++;
		store.present[k] = rand_r(&seed) % 4 != 0;
		pthread_mutex_unlock(&store.mu);
		unsigned long t = sub_registry_ticket(&stress_reg);
		pthread_mutex_lock(&store.mu); /* its read of that row */
		struct subscription *s = stored_sub(k);
		pthread_mutex_unlock(&store.mu);
		struct subscription *probe = sub(k, "-", 1);
		memcpy(id, probe->id, UUID_STR_LEN);
		subscription_free(probe);
		if (sub_registry_apply(&stress_reg, id, s, t))
			abort();
	}
	return NULL;
}

static void *reloader(void *arg)
{
	(void)arg;
	while (!__atomic_load_n(&writers_done, __ATOMIC_ACQUIRE)) {
		struct sub_set *set = sub_set_new();
		set->read_ticket = sub_registry_ticket(&stress_reg);
		pthread_mutex_lock(&store.mu);
		for (int k = 0; k < KEYS; k++) {
			struct subscription *s = stored_sub(k);
			if (s && sub_set_add(set, s))
				abort();
		}
		pthread_mutex_unlock(&store.mu);
		sub_registry_publish(&stress_reg, set);
	}
	return NULL;
}

static void *observer(void *arg)
{
	int seen[KEYS] = {0};
	(void)arg;
	while (!__atomic_load_n(&writers_done, __ATOMIC_ACQUIRE)) {
		struct sub_set *cur = sub_registry_acquire(&stress_reg);
		for (size_t i = 0; i < cur->n; i++) {
			int k = atoi(cur->items[i]->id + 24), v = atoi(cur->items[i]->event_types[0] + 1);
			if (v < seen[k])
				went_back = 1;
			seen[k] = v;
		}
		sub_registry_release(&stress_reg, cur);
	}
	return NULL;
}

static void test_apply_and_reloads_side_by_side(void **state)
{
	pthread_t w[WRITERS], r[3];
	char buf[32], want[32];

	sub_registry_init(&stress_reg);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pthread_create(&r[i], NULL, i < 2 ? reloader : observer, NULL), 0);
	for (int i = 0; i < WRITERS; i++)
		assert_int_equal(pthread_create(&w[i], NULL, writer, (void *)(uintptr_t)(i + 1)), 0);
	for (int i = 0; i < WRITERS; i++)
		pthread_join(w[i], NULL);
	__atomic_store_n(&writers_done, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 3; i++)
		pthread_join(r[i], NULL);
	assert_false(went_back);
	for (int k = 0; k < KEYS; k++) {
		const char *got = pattern_of(&stress_reg, k, buf, sizeof(buf));
		if (!store.present[k]) {
			assert_null(got);
		} else {
			snprintf(want, sizeof(want), "v%d", store.version[k]);
			assert_non_null(got);
			assert_string_equal(got, want);
		}
	}
	assert_int_equal(stress_reg.n_changes, 0);
	assert_int_equal(stress_reg.n_reading, 0);
	sub_registry_destroy(&stress_reg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_find_any_order),
		cmocka_unit_test(test_match_enabled_only),
		cmocka_unit_test(test_index_matches_as_every_pattern),
		cmocka_unit_test(test_older_read_does_not_replace_newer),
		cmocka_unit_test(test_apply_in_place),
		cmocka_unit_test(test_apply_survives_older_read),
		cmocka_unit_test(test_apply_never_goes_back),
		cmocka_unit_test(test_apply_and_reloads_side_by_side),
		cmocka_unit_test(test_applied_index_matches_as_every_pattern),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
