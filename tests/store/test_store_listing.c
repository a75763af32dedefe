/* test_store_listing.c: the conformance suite on reading the history back: keyset pages
 * over every sort key (each row once, in order), the delivery filters, and the attempt
 * series of the console's charts (outcomes per minute, exact latency percentiles, one
 * subscription's or everyone's).
 *
 * Every test runs once per backend (store_suite.h); none knows which. */
#include "store_suite.h"

#include <stdlib.h>
#include <string.h>

#include "util/clock.h"

/* 45 deliveries over 3 subscriptions and 15 events, with ties in every sort key. */
static void make_history(struct t *t)
{
	struct store_claim *c = NULL;
	size_t n;

	for (int i = 0; i < 15; i++)
		ingest_one(t, i % 2 ? "user.created" : "order.paid", t->t0 + (i / 3) * 1000, 3,
			   NULL);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 1000, &c);
	assert_int_equal(n, 45);
	/* A third succeed, a third are dead, the rest stay scheduled; attempt counts
	 * 1..4 repeat. */
	for (size_t i = 0; i < n; i++) {
		int attempts = (int)(i % 4) + 1;

		if (i % 3 == 0)
			record(t, c[i].delivery_id, DELIVERY_PROCESSED, attempts, 0, 0, NULL,
			       NULL);
		else if (i % 3 == 1)
			record(t, c[i].delivery_id, DELIVERY_FAILED, attempts, 0,
			       i % 2 ? 404 : 503, i % 2 ? "Not Found" : "Service Unavailable",
			       i % 2 ? "no route 100%_match" : "connection refused");
		else
			record(t, c[i].delivery_id, DELIVERY_FAILED, attempts,
			       clock_now_ms() + HOUR_MS, 504, "Gateway Timeout", "timed out");
	}
	store_claims_free(c, n);
}

static int64_t key_of(const struct store_delivery *d, enum delivery_sort sort)
{
	return sort == DELIVERY_SORT_UPDATED ? d->updated_at :
	       sort == DELIVERY_SORT_ATTEMPTS ? d->attempt_count : d->created_at;
}

/* Walks every page of f and checks that each row comes exactly once, in order. */
static size_t walk_pages(struct t *t, struct delivery_filter f)
{
	char (*seen)[UUID_STR_LEN] = calloc(1000, UUID_STR_LEN);
	char *cursor = NULL;
	size_t total = 0, pages = 0;
	int64_t prev_key = 0;
	char prev_id[UUID_STR_LEN] = "";

	do {
		struct store_delivery *items = NULL;
		char *next = NULL;
		size_t n = 0;

		f.cursor = cursor;
		assert_int_equal(store_deliveries_list(t->st, &f, &items, &n, &next), STORE_OK);
		assert_true(n <= f.limit);
		if (next)
			assert_int_equal(n, f.limit);
		for (size_t i = 0; i < n; i++) {
			int64_t key = key_of(&items[i], f.sort);

			if (total) {
				int cmp = key != prev_key ? (key > prev_key ? 1 : -1) :
							    strcmp(items[i].id, prev_id);

				assert_true(f.descending ? cmp < 0 : cmp > 0);
			}
			prev_key = key;
			memcpy(prev_id, items[i].id, UUID_STR_LEN);
			assert_true(total < 1000);
			memcpy(seen[total++], items[i].id, UUID_STR_LEN);
		}
		store_deliveries_free(items, n);
		free(cursor);
		cursor = next;
		pages++;
	} while (cursor);
	qsort(seen, total, UUID_STR_LEN, id_cmp);
	for (size_t i = 1; i < total; i++)
		assert_string_not_equal(seen[i - 1], seen[i]);
	free(seen);
	return total;
}

static void test_pagination(void **state)
{
	struct t *t = *state;
	enum delivery_sort sorts[] = {DELIVERY_SORT_CREATED, DELIVERY_SORT_UPDATED, DELIVERY_SORT_ATTEMPTS};

	make_history(t);
	for (size_t s = 0; s < 3; s++) {
		for (int desc = 0; desc < 2; desc++) {
			struct delivery_filter f = {.sort = sorts[s], .descending = desc};

			f.limit = 7;
			assert_int_equal(walk_pages(t, f), 45);
			f.limit = 45;
			assert_int_equal(walk_pages(t, f), 45);
			f.limit = 1000;
			assert_int_equal(walk_pages(t, f), 45);
			f.limit = 4;
			f.has_status = 1;
			f.status = DELIVERY_FAILED;
			assert_int_equal(walk_pages(t, f), 30);
		}
	}
}

static size_t count_matching(struct t *t, const struct delivery_filter *f)
{
	struct store_delivery *items = NULL;
	char *cursor = NULL;
	size_t n = 0;

	assert_int_equal(store_deliveries_list(t->st, f, &items, &n, &cursor), STORE_OK);
	for (size_t i = 0; i < n; i++) {
		if (f->has_status)
			assert_int_equal(items[i].status, f->status);
		if (f->dead_only)
			assert_true(items[i].status == DELIVERY_FAILED &&
				    items[i].next_attempt_at == 0);
		if (f->subscription_id)
			assert_string_equal(items[i].subscription_id, f->subscription_id);
		if (f->event_type)
			assert_string_equal(items[i].event_type, f->event_type);
		if (f->from_ms)
			assert_true(items[i].created_at >= f->from_ms);
		if (f->to_ms)
			assert_true(items[i].created_at < f->to_ms);
	}
	store_deliveries_free(items, n);
	free(cursor);
	return n;
}

static void test_filters(void **state)
{
	struct t *t = *state;
	struct delivery_filter f = {.limit = 1000};
	struct store_delivery *items = NULL;
	char *cursor = NULL;
	size_t n;

	make_history(t);
	assert_int_equal(count_matching(t, &f), 45);
	f.has_status = 1;
	f.status = DELIVERY_PROCESSED;
	assert_int_equal(count_matching(t, &f), 15);
	f.status = DELIVERY_FAILED;
	assert_int_equal(count_matching(t, &f), 30);
	f.has_status = 0;
	f.dead_only = 1;
	assert_int_equal(count_matching(t, &f), 15);
	f.status = DELIVERY_PROCESSED;
	f.has_status = 1;
	assert_int_equal(count_matching(t, &f), 0);
	f.has_status = 0;

	/* Error text search: plain substring, '%' and '_' are not wildcards. */
	f.q = "refused";
	n = count_matching(t, &f);
	assert_true(n > 0 && n < 15);
	f.q = "100%_match";
	assert_int_equal(count_matching(t, &f) + n, 15);
	f.q = "100%%";
	assert_int_equal(count_matching(t, &f), 0);
	f.q = "Not Found";
	assert_int_equal(count_matching(t, &f), 15 - n);
	f.q = NULL;
	f.dead_only = 0;

	f.subscription_id = t->subs[1];
	assert_int_equal(count_matching(t, &f), 15);
	f.event_type = "user.created";
	assert_int_equal(count_matching(t, &f), 7);
	f.event_type = "user.*";
	assert_int_equal(count_matching(t, &f), 0);
	f.event_type = NULL;

	/* created_at in [t0 + 1000, t0 + 3000): events 3..8, nine per second. */
	f.from_ms = t->t0 + 1000;
	f.to_ms = t->t0 + 3000;
	assert_int_equal(count_matching(t, &f), 6);
	f.subscription_id = NULL;
	assert_int_equal(count_matching(t, &f), 18);
	f.event_type = "order.paid";
	f.has_status = 1;
	f.status = DELIVERY_FAILED;
	n = count_matching(t, &f);
	assert_true(n > 0 && n < 9);
	f = (struct delivery_filter){.limit = 1000, .to_ms = t->t0};
	assert_int_equal(count_matching(t, &f), 0);

	/* Malformed or mismatched cursors and bad limits are refused. */
	f = (struct delivery_filter){.limit = 10};
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &n, &cursor), STORE_OK);
	assert_non_null(cursor);
	store_deliveries_free(items, n);
	f.sort = DELIVERY_SORT_UPDATED;
	f.cursor = cursor;
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &n, &cursor),
			 STORE_INVALID);
	f.sort = DELIVERY_SORT_CREATED;
	f.descending = 1;
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &n, &cursor),
			 STORE_INVALID);
	free((char *)f.cursor);
	f.descending = 0;
	{
		static const char *const bad[] = {"", "garbage", "ca:", "ca:12", "ca:x:abc",
			"ca:12:", "ca:12:not a uuid'; DROP TABLE deliveries; --",
			"ca:99999999999999999999999:0190f000-0000-7000-8000-000000000000"};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			f.cursor = bad[i];
			assert_int_equal(store_deliveries_list(t->st, &f, &items, &n, &cursor),
					 STORE_INVALID);
		}
	}
	f.cursor = NULL;
	f.limit = 0;
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &n, &cursor), STORE_INVALID);
	f.limit = 1001;
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &n, &cursor), STORE_INVALID);
}

/* Attempts counted in the minute they started, by outcome; outside the range not at all. */
static void test_attempt_series(void **state)
{
	struct t *t = *state;
	struct store_claim *c = NULL;
	struct store_series_bucket b[3];
	int64_t from = (clock_now_ms() / MINUTE_MS - 5) * MINUTE_MS;
	struct store_attempt tries[6] = {
		{1, ATTEMPT_IMMEDIATE, from - 1, 5, 503, "HTTP 503", NULL, 0},          /* before */
		{2, ATTEMPT_IMMEDIATE, from, 5, 200, "HTTP 200", NULL, 0},              /* bucket 0 */
		{3, ATTEMPT_SCHEDULED, from + MINUTE_MS + 10, 5, 404, "HTTP 404", NULL, 0},
		{4, ATTEMPT_SCHEDULED, from + 2 * MINUTE_MS, 5, 503, "HTTP 503", NULL, 0},
		{5, ATTEMPT_SCHEDULED, from + 3 * MINUTE_MS - 1, 5, 302, "HTTP 302", NULL, 0},
		{6, ATTEMPT_MANUAL, from + 3 * MINUTE_MS, 5, 200, "HTTP 200", NULL, 0}, /* after */
	};
	struct store_result r = {
		.status = DELIVERY_PROCESSED,
		.attempt_count = 6,
		.attempts = tries,
		.n_attempts = 6,
	};

	ingest_one(t, "a", t->t0, 1, NULL);
	assert_int_equal(claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c), 1);
	r.delivery_id = c[0].delivery_id;
	r.processed_at = clock_now_ms();
	assert_int_equal(store_record_results(t->st, &r, 1), STORE_OK);
	store_claims_free(c, 1);

	assert_int_equal(store_attempt_series(t->st, NULL, from, MINUTE_MS, 3, b), STORE_OK);
	assert_int_equal(b[0].succeeded, 1);
	assert_int_equal(b[0].p50_ms, 5);
	assert_int_equal(b[0].p99_ms, 5);
	assert_int_equal(b[0].client_error + b[0].server_error, 0);
	assert_int_equal(b[1].client_error, 1);
	assert_int_equal(b[1].succeeded + b[1].server_error, 0);
	assert_int_equal(b[2].server_error, 2); /* 503 and the 302 */
	assert_int_equal(b[2].succeeded + b[2].client_error, 0);

	/* Nothing there: zeros, and no latency. Bad arguments: refused. */
	assert_int_equal(store_attempt_series(t->st, NULL, from - 100 * MINUTE_MS, MINUTE_MS, 3, b),
			 STORE_OK);
	assert_int_equal(b[0].succeeded + b[1].server_error + b[2].client_error, 0);
	assert_int_equal(b[1].p50_ms, -1);
	assert_int_equal(b[2].p99_ms, -1);
	assert_int_equal(store_attempt_series(t->st, NULL, from, 0, 3, b), STORE_INVALID);
	assert_int_equal(store_attempt_series(t->st, NULL, from, MINUTE_MS, STORE_SERIES_MAX + 1, b),
			 STORE_INVALID);
	assert_int_equal(store_attempt_series(t->st, "", from, MINUTE_MS, 3, b), STORE_INVALID);
}

/* Records n attempts for a claimed delivery: attempt i (from 1) started at at(i) and took
 * took(i) ms, code 200 when i is even, else 503. */
static void record_attempts(struct t *t, const char *delivery_id, int n, int64_t (*at)(int),
			    int64_t (*took)(int))
{
	struct store_attempt *tries = calloc((size_t)n, sizeof(*tries));
	struct store_result r = {
		.delivery_id = delivery_id,
		.status = DELIVERY_PROCESSED,
		.attempt_count = n,
		.processed_at = clock_now_ms(),
		.attempts = tries,
		.n_attempts = (size_t)n,
	};

	for (int i = 1; i <= n; i++)
		tries[i - 1] = (struct store_attempt){i, ATTEMPT_IMMEDIATE, at(i), took(i),
						      i % 2 ? 503 : 200, "HTTP", NULL, 0};
	assert_int_equal(store_record_results(t->st, &r, 1), STORE_OK);
	free(tries);
}

static int64_t series_from;

/* Subscription 0: attempts 1..100 in minute 0 taking 1..100 ms, attempt 101 in minute
 * 1 taking 3 ms. Subscription 1: four in minute 0, taking 7, 1000, 1000 and 1000 ms. */
static int64_t at_sub0(int i) { return series_from + (i <= 100 ? i * 100 : MINUTE_MS + 5); }
static int64_t took_sub0(int i) { return i <= 100 ? i : 3; }
static int64_t at_sub1(int i) { return series_from + 30000 + i; }
static int64_t took_sub1(int i) { return i == 1 ? 7 : 1000; }

/* The latency percentiles are exact (nearest rank over the bucket's attempts, equal
 * durations counted each), and a subscription's series holds its deliveries' attempts
 * only. */
static void test_attempt_series_latency(void **state)
{
	struct t *t = *state;
	struct store_claim *c = NULL;
	struct store_series_bucket b[3];
	size_t n;

	series_from = (clock_now_ms() / MINUTE_MS - 5) * MINUTE_MS;
	ingest_one(t, "a", t->t0, 2, NULL);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 2);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(c[i].subscription_id, t->subs[0]) == 0)
			record_attempts(t, c[i].delivery_id, 101, at_sub0, took_sub0);
		else
			record_attempts(t, c[i].delivery_id, 4, at_sub1, took_sub1);
	}
	store_claims_free(c, n);

	assert_int_equal(store_attempt_series(t->st, t->subs[0], series_from, MINUTE_MS, 3, b),
			 STORE_OK);
	assert_int_equal(b[0].succeeded, 50);
	assert_int_equal(b[0].server_error, 50);
	assert_int_equal(b[0].p50_ms, 50);  /* the 50th of 1..100 */
	assert_int_equal(b[0].p99_ms, 99);
	assert_int_equal(b[1].server_error, 1);
	assert_int_equal(b[1].p50_ms, 3);
	assert_int_equal(b[1].p99_ms, 3);
	assert_int_equal(b[2].p50_ms, -1);

	assert_int_equal(store_attempt_series(t->st, t->subs[1], series_from, MINUTE_MS, 3, b),
			 STORE_OK);
	assert_int_equal(b[0].succeeded + b[0].server_error, 4);
	assert_int_equal(b[0].p50_ms, 1000); /* 7, 1000, 1000, 1000: rank 2 */
	assert_int_equal(b[0].p99_ms, 1000);
	assert_int_equal(b[1].succeeded + b[1].server_error, 0);
	assert_int_equal(b[1].p50_ms, -1);

	/* Everyone's: 104 in minute 0 (1..7, 7, 8..100, 1000 three times). */
	assert_int_equal(store_attempt_series(t->st, NULL, series_from, MINUTE_MS, 3, b), STORE_OK);
	assert_int_equal(b[0].succeeded + b[0].client_error + b[0].server_error, 104);
	assert_int_equal(b[0].p50_ms, 51);   /* rank 52 */
	assert_int_equal(b[0].p99_ms, 1000); /* rank 103 */
	assert_int_equal(b[1].p50_ms, 3);

	/* A subscription without attempts: nothing. */
	assert_int_equal(store_attempt_series(t->st, t->subs[2], series_from, MINUTE_MS, 3, b),
			 STORE_OK);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(b[i].succeeded + b[i].client_error + b[i].server_error, 0);
		assert_int_equal(b[i].p50_ms, -1);
		assert_int_equal(b[i].p99_ms, -1);
	}
}

/* The subscription's figures in st (NULL when it has none). */
static const struct store_sub_stats *sub_stats(const struct store_stats *st, const char *sub)
{
	for (size_t i = 0; i < st->n_subs; i++)
		if (strcmp(st->subs[i].subscription_id, sub) == 0)
			return &st->subs[i];
	return NULL;
}

/* Records the attempts tries (n of them) for delivery_id of subscription sub (NULL: the
 * store looks it up, as for a result from a spool) in one result: DELIVERY_PROCESSED when
 * the last succeeded, else FAILED with a retry. */
static void record_tries(struct t *t, const char *delivery_id, const char *sub,
			 const struct store_attempt *tries, int n)
{
	int ok = tries[n - 1].code >= 200 && tries[n - 1].code <= 299;
	struct store_result r = {
		.delivery_id = delivery_id,
		.subscription_id = sub,
		.status = ok ? DELIVERY_PROCESSED : DELIVERY_FAILED,
		.attempt_count = tries[n - 1].n,
		.next_attempt_at = ok ? 0 : clock_now_ms() + HOUR_MS,
		.processed_at = ok ? clock_now_ms() : 0,
		.last_code = ok ? 0 : tries[n - 1].code,
		.last_message = ok ? NULL : tries[n - 1].message,
		.attempts = tries,
		.n_attempts = (size_t)n,
	};
	assert_int_equal(store_record_results(t->st, &r, 1), STORE_OK);
}

/* /v1/stats' per-subscription figures come from the per-minute counts results keep: the
 * whole minutes from the one now - window falls in, the newest failure only when it
 * started within the window; a result whose lease was lost still counts its attempts
 * (they were sent), under the instance that recorded them. Pruning drops the counts of
 * older minutes, never the attempts. */
static void test_attempt_counts(void **state)
{
	struct t *t = *state;
	struct store_claim *c = NULL;
	struct store_stats st;
	struct store_series_bucket b[4];
	const struct store_sub_stats *x;
	int64_t now = clock_now_ms(), m = now - now % MINUTE_MS;
	struct store_attempt tries0[3] = {
		{1, ATTEMPT_IMMEDIATE, m - 3 * MINUTE_MS + 1000, 7, 503, "HTTP 503", NULL, 0},
		{2, ATTEMPT_SCHEDULED, m - MINUTE_MS + 5, 9, 404, "HTTP 404", NULL, 0},
		{3, ATTEMPT_SCHEDULED, now, 9, 200, "HTTP 200", NULL, 0},
	};
	struct store_attempt tries1[1] = {{1, ATTEMPT_IMMEDIATE, now, 9, 204, "HTTP 204", NULL, 0}};
	struct store_attempt tries2[1] = {{1, ATTEMPT_IMMEDIATE, now, 30, 500, "HTTP 500", NULL, 0}};
	const char *d0 = NULL, *d1 = NULL, *d2 = NULL;

	ingest_one(t, "a", t->t0, 3, NULL);
	assert_int_equal(claim_n(t, now, MINUTE_MS, 10, &c), 3);
	for (int i = 0; i < 3; i++) {
		if (strcmp(c[i].subscription_id, t->subs[0]) == 0)
			d0 = c[i].delivery_id;
		else if (strcmp(c[i].subscription_id, t->subs[1]) == 0)
			d1 = c[i].delivery_id;
		else
			d2 = c[i].delivery_id;
	}
	record_tries(t, d0, NULL, tries0, 3);
	record_tries(t, d1, t->subs[1], tries1, 1);
	/* another instance, which lost the lease, records its attempt anyway */
	assert_int_equal(store_set_owner(t->st, "other-owner"), STORE_OK);
	record_tries(t, d2, NULL, tries2, 1);
	assert_int_equal(store_set_owner(t->st, "test-owner"), STORE_OK);

	/* 10 minutes: every attempt */
	assert_int_equal(store_stats(t->st, now, 10 * MINUTE_MS, &st), STORE_OK);
	assert_non_null(x = sub_stats(&st, t->subs[0]));
	assert_int_equal(x->attempts, 3);
	assert_int_equal(x->successes, 1);
	assert_int_equal(x->last_code, 404);
	assert_string_equal(x->last_message, "HTTP 404");
	assert_int_equal(x->last_error_at, m - MINUTE_MS + 5);
	assert_non_null(x = sub_stats(&st, t->subs[1]));
	assert_int_equal(x->attempts, 1);
	assert_int_equal(x->successes, 1);
	assert_int_equal(x->last_code, 0);
	assert_non_null(x = sub_stats(&st, t->subs[2]));
	assert_int_equal(x->attempts, 1);
	assert_int_equal(x->successes, 0);
	assert_int_equal(x->last_code, 500);
	store_stats_free(&st);

	/* now - window falls in minute m - 2: the 503 of minute m - 3 is out */
	assert_int_equal(store_stats(t->st, now, now - (m - 2 * MINUTE_MS + 30000), &st), STORE_OK);
	assert_non_null(x = sub_stats(&st, t->subs[0]));
	assert_int_equal(x->attempts, 2);
	assert_int_equal(x->successes, 1);
	assert_int_equal(x->last_code, 404);
	store_stats_free(&st);
	/* the newest failure started before now - window: none shown */
	assert_int_equal(store_stats(t->st, now, now - (m - MINUTE_MS + 6), &st), STORE_OK);
	assert_non_null(x = sub_stats(&st, t->subs[0]));
	assert_int_equal(x->attempts, 2); /* minute m - 1 still counts whole */
	assert_int_equal(x->last_code, 0);
	assert_null(x->last_message);
	store_stats_free(&st);

	/* the series reads the same counts, both instances' */
	assert_int_equal(store_attempt_series(t->st, NULL, m - 3 * MINUTE_MS, MINUTE_MS, 4, b),
			 STORE_OK);
	assert_int_equal(b[0].server_error, 1);
	assert_int_equal(b[0].p50_ms, 7);
	assert_int_equal(b[1].succeeded + b[1].client_error + b[1].server_error, 0);
	assert_int_equal(b[2].client_error, 1);
	assert_int_equal(b[3].succeeded, 2);
	assert_int_equal(b[3].server_error, 1);
	assert_int_equal(b[3].p50_ms, 9);
	assert_int_equal(b[3].p99_ms, 30);
	/* minutes only */
	assert_int_equal(store_attempt_series(t->st, NULL, m + 1, MINUTE_MS, 4, b), STORE_INVALID);
	assert_int_equal(store_attempt_series(t->st, NULL, m, 1000, 4, b), STORE_INVALID);

	/* Pruned before minute m: the older counts and the 404 go, the attempts stay. */
	assert_int_equal(store_attempt_counts_prune(t->st, m), STORE_OK);
	assert_int_equal(store_stats(t->st, now, 10 * MINUTE_MS, &st), STORE_OK);
	assert_non_null(x = sub_stats(&st, t->subs[0]));
	assert_int_equal(x->attempts, 1);
	assert_int_equal(x->last_code, 0);
	assert_non_null(x = sub_stats(&st, t->subs[2]));
	assert_int_equal(x->last_code, 500);
	store_stats_free(&st);
	assert_int_equal(store_attempt_series(t->st, t->subs[0], m - 3 * MINUTE_MS, MINUTE_MS, 4, b),
			 STORE_OK);
	assert_int_equal(b[0].server_error + b[2].client_error, 0);
	assert_int_equal(b[3].succeeded, 1);
	struct store_attempt_row *rows = NULL;
	size_t n_rows = 0;
	assert_int_equal(store_delivery_attempts(t->st, d0, &rows, &n_rows), STORE_OK);
	assert_int_equal(n_rows, 3);
	store_attempts_free(rows, n_rows);
	store_claims_free(c, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_pagination),
		T(test_filters),
		T(test_attempt_series),
		T(test_attempt_series_latency),
		T(test_attempt_counts),
	};

	return store_suite_run(tests, sizeof(tests) / sizeof(tests[0]));
}
