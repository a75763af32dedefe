/* test_hashchain.c: chained hash tables that grow (util/hashchain.c): every node found
 * again as the table grows to keep chains short, nodes with equal hashes kept apart by
 * their keys, a sweep taking out exactly what it is told to (and letting the visitor free
 * them), and a freed table empty and usable again. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/hash.h"
#include "util/hashchain.h"

struct item {
	char key[16];
	struct hc_node link;
};

static struct item *item_of(struct hc_node *n)
{
	return (struct item *)((char *)n - offsetof(struct item, link));
}

static struct item *find(struct hc_table *t, const char *key, uint32_t h)
{
	for (struct hc_node *n = hc_chain(t, h); n; n = n->next)
		if (n->hash == h && strcmp(item_of(n)->key, key) == 0)
			return item_of(n);
	return NULL;
}

static struct item *add(struct hc_table *t, int k, uint32_t h)
{
	struct item *x = calloc(1, sizeof(*x));
	snprintf(x->key, sizeof(x->key), "k%d", k);
	assert_int_equal(hc_add(t, &x->link, h), 0);
	return x;
}

static int take_odd(struct hc_node *n, void *ctx)
{
	struct item *x = item_of(n);
	int take = atoi(x->key + 1) % 2;
	if (take) {
		(*(int *)ctx)++;
		free(x);
	}
	return take;
}

static int take_all(struct hc_node *n, void *ctx)
{
	(void)ctx;
	free(item_of(n));
	return 1;
}

#define N 20000

static void test_grows_and_finds_every_node(void **state)
{
	(void)state;
	struct hc_table t;
	char key[16];
	memset(&t, 0, sizeof(t));
	assert_null(hc_chain(&t, 7)); /* a zeroed table is empty */
	for (int k = 0; k < N; k++) {
		snprintf(key, sizeof(key), "k%d", k);
		add(&t, k, hash_fnv1a(key));
	}
	assert_int_equal(t.count, N);
	assert_true(t.mask + 1 >= N / 2); /* two nodes per chain at most, on average */
	size_t longest = 0;
	for (size_t i = 0; i <= t.mask; i++) {
		size_t len = 0;
		for (struct hc_node *n = t.chains[i]; n; n = n->next)
			len++;
		longest = len > longest ? len : longest;
	}
	assert_true(longest < 16);
	for (int k = 0; k < N; k++) {
		snprintf(key, sizeof(key), "k%d", k);
		struct item *x = find(&t, key, hash_fnv1a(key));
		assert_non_null(x);
		assert_string_equal(x->key, key);
	}
	assert_null(find(&t, "k-1", hash_fnv1a("k-1")));

	/* a sweep takes out the odd ones, which the visitor frees */
	int taken = 0;
	hc_sweep(&t, take_odd, &taken);
	assert_int_equal(taken, N / 2);
	assert_int_equal(t.count, N / 2);
	for (int k = 0; k < N; k++) {
		snprintf(key, sizeof(key), "k%d", k);
		assert_true((find(&t, key, hash_fnv1a(key)) != NULL) == (k % 2 == 0));
	}
	hc_sweep(&t, take_all, NULL);
	assert_int_equal(t.count, 0);
	hc_free(&t);
	assert_null(t.chains);
	add(&t, 1, 1); /* usable again */
	assert_non_null(find(&t, "k1", 1));
	hc_sweep(&t, take_all, NULL);
	hc_free(&t);
}

/* Equal hashes (one chain): the keys tell the nodes apart, through growth too. */
static void test_equal_hashes(void **state)
{
	(void)state;
	struct hc_table t;
	memset(&t, 0, sizeof(t));
	for (int k = 0; k < 300; k++)
		add(&t, k, 42);
	char key[16];
	for (int k = 0; k < 300; k++) {
		snprintf(key, sizeof(key), "k%d", k);
		assert_non_null(find(&t, key, 42));
		assert_null(find(&t, key, 43));
	}
	hc_sweep(&t, take_all, NULL);
	hc_free(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_grows_and_finds_every_node),
		cmocka_unit_test(test_equal_hashes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
