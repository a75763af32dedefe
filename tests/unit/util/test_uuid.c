/* test_uuid.c: UUIDv7 generation (util/uuid.c): RFC 9562 layout, strict ordering across
 * 100,000 ids and across threads, and the validator. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/uuid.h"

#define N_IDS 100000
#define N_THREADS 4
#define IDS_PER_THREAD 25000

static uint64_t hex_value(const char *s, int n)
{
	uint64_t v = 0;

	for (int i = 0; i < n; i++) {
		char c = s[i];

		v = v * 16 + (uint64_t)(c <= '9' ? c - '0' : c - 'a' + 10);
	}
	return v;
}

static void assert_v7_layout(const char *id)
{
	assert_int_equal(strlen(id), 36);
	assert_true(uuid_valid(id));
	for (int i = 0; i < 36; i++) {
		if (i == 8 || i == 13 || i == 18 || i == 23)
			assert_int_equal(id[i], '-');
		else
			assert_true((id[i] >= '0' && id[i] <= '9') || (id[i] >= 'a' && id[i] <= 'f'));
	}
	assert_int_equal(id[14], '7');                  /* version */
	assert_non_null(strchr("89ab", id[19]));        /* variant 10 */
}

static void test_layout_and_order(void **state)
{
	char (*ids)[37] = malloc(sizeof(*ids) * N_IDS);
	int64_t before = clock_now_ms(), after;
	uint64_t ts_first, ts_last;

	assert_non_null(ids);
	for (int i = 0; i < N_IDS; i++)
		uuid_v7(ids[i]);
	after = clock_now_ms();

	for (int i = 0; i < N_IDS; i++) {
		assert_v7_layout(ids[i]);
		if (i > 0 && strcmp(ids[i - 1], ids[i]) >= 0)
			fail_msg("id %d not after its predecessor: %s then %s", i, ids[i - 1],
				 ids[i]);
	}

	/* The 48-bit prefix is the unix time in ms. A counter overflow may run it ahead of
	 * the wall clock by one ms per 2048 ids at most. */
	ts_first = hex_value(ids[0], 8) << 16 | hex_value(ids[0] + 9, 4);
	ts_last = hex_value(ids[N_IDS - 1], 8) << 16 | hex_value(ids[N_IDS - 1] + 9, 4);
	assert_true(ts_first >= (uint64_t)before);
	assert_true(ts_last <= (uint64_t)after + N_IDS / 2048 + 1);
	free(ids);
}

/* The 62 random bits differ between ids (a constant would still sort correctly). */
static void test_random_tail(void **state)
{
	char a[37], b[37];

	uuid_v7(a);
	uuid_v7(b);
	assert_string_not_equal(a + 19, b + 19);
}

struct thread_ids {
	char (*ids)[37];
	int ordered;
};

static void *generate_cb(void *arg)
{
	struct thread_ids *t = arg;

	t->ordered = 1;
	for (int i = 0; i < IDS_PER_THREAD; i++) {
		uuid_v7(t->ids[i]);
		if (i > 0 && strcmp(t->ids[i - 1], t->ids[i]) >= 0)
			t->ordered = 0;
	}
	return NULL;
}

static int compare_ids(const void *a, const void *b)
{
	return strcmp(a, b);
}

static void test_threads_unique(void **state)
{
	char (*all)[37] = malloc(sizeof(*all) * N_THREADS * IDS_PER_THREAD);
	pthread_t threads[N_THREADS];
	struct thread_ids t[N_THREADS];

	assert_non_null(all);
	for (int i = 0; i < N_THREADS; i++) {
		t[i].ids = all + (size_t)i * IDS_PER_THREAD;
		assert_int_equal(pthread_create(&threads[i], NULL, generate_cb, &t[i]), 0);
	}
	for (int i = 0; i < N_THREADS; i++) {
		assert_int_equal(pthread_join(threads[i], NULL), 0);
		assert_int_equal(t[i].ordered, 1);
	}
	qsort(all, N_THREADS * IDS_PER_THREAD, sizeof(*all), compare_ids);
	for (int i = 1; i < N_THREADS * IDS_PER_THREAD; i++)
		assert_true(strcmp(all[i - 1], all[i]) < 0);
	free(all);
}

static void test_valid(void **state)
{
	assert_true(uuid_valid("0192f1e2-7c3a-7b4d-8e5f-0123456789ab"));
	assert_true(uuid_valid("0192F1E2-7C3A-7B4D-8E5F-0123456789AB"));
	assert_true(uuid_valid("00000000-0000-0000-0000-000000000000"));
	assert_true(uuid_valid("550e8400-e29b-41d4-a716-446655440000")); /* v4 */
	assert_false(uuid_valid(NULL));
	assert_false(uuid_valid(""));
	assert_false(uuid_valid("0192f1e2-7c3a-7b4d-8e5f-0123456789a"));   /* 35 */
	assert_false(uuid_valid("0192f1e2-7c3a-7b4d-8e5f-0123456789abc")); /* 37 */
	assert_false(uuid_valid("0192f1e27c3a-7b4d-8e5f-0123456789abc"));
	assert_false(uuid_valid("0192f1e2-7c3a-7b4d-8e5f_0123456789ab"));
	assert_false(uuid_valid("0192f1e-27c3a-7b4d-8e5f-0123456789ab"));
	assert_false(uuid_valid("0192f1g2-7c3a-7b4d-8e5f-0123456789ab"));
	assert_false(uuid_valid("{0192f1e2-7c3a-7b4d-8e5f-0123456789a}"));
	assert_false(uuid_valid("0192f1e20c3a07b408e5f00123456789ab0000"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_layout_and_order),
		cmocka_unit_test(test_random_tail),
		cmocka_unit_test(test_threads_unique),
		cmocka_unit_test(test_valid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
