/* test_subscriptions.c: subscription sets — lookup by id whatever the order of adds,
 * matching of enabled subscriptions, the patterns' index matching exactly what trying
 * every pattern matches (random sets and event types), reference counting through the
 * registry, reads published in the order they began. */
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
	assert_int_equal(sub_set_match(set, "user.created", &ids, &cap), 1);
	assert_string_equal(ids[0], "01a20000-0000-7000-8000-000000000002");
	assert_int_equal(sub_set_match(set, "billing.paid", &ids, &cap), 0);
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

static void test_index_matches_as_every_pattern(void **state)
{
	unsigned seed = 12345;
	char (*want)[UUID_STR_LEN] = NULL, (*got)[UUID_STR_LEN] = NULL;
	size_t want_cap = 0, got_cap = 0;
	for (int round = 0; round < 200; round++) {
		/* two sets alike: one tried pattern by pattern, one indexed */
		struct sub_set *plain = sub_set_new(), *indexed = sub_set_new();
		int subs = 1 + rand_r(&seed) % 40;
		for (int k = 0; k < subs; k++) {
			char pats[3][32];
			int np = 1 + rand_r(&seed) % 3, enabled = rand_r(&seed) % 5 != 0;
			for (int p = 0; p < np; p++)
				random_text(pats[p], sizeof(pats[p]), 1, &seed);
			for (int copy = 0; copy < 2; copy++) {
				struct subscription *s = sub(k, pats[0], enabled);
				s->event_types = realloc(s->event_types, (size_t)np * sizeof(char *));
				for (int p = 1; p < np; p++)
					s->event_types[p] = strdup(pats[p]);
				s->n_event_types = (size_t)np;
				if (k % 7 == 3)
					s->origin = strdup("kafka_envelope");
				assert_int_equal(sub_set_add(copy ? indexed : plain, s), 0);
			}
		}
		sub_set_index(indexed);
		assert_non_null(indexed->index);
		for (int e = 0; e < 50; e++) {
			char type[32];
			random_text(type, sizeof(type), 0, &seed);
			long w = sub_set_match(plain, type, &want, &want_cap);
			long g = sub_set_match(indexed, type, &got, &got_cap);
			if (w != g)
				fail_msg("round %d, \"%s\": %ld matched pattern by pattern, %ld indexed",
					 round, type, w, g);
			for (long i = 0; i < w; i++)
				assert_string_equal(want[i], got[i]);
		}
		struct sub_registry reg;
		sub_registry_init(&reg);
		sub_registry_publish(&reg, plain);
		sub_registry_publish(&reg, indexed);
		sub_registry_destroy(&reg);
	}
	free(want);
	free(got);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_find_any_order),
		cmocka_unit_test(test_match_enabled_only),
		cmocka_unit_test(test_index_matches_as_every_pattern),
		cmocka_unit_test(test_older_read_does_not_replace_newer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
