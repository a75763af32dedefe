/* test_store_results.c: the conformance suite on results and attempts: a success, a
 * failure and a dead end recorded with their attempts, results written in batches, and
 * dead results marked for the dead-letter topic.
 *
 * Every test runs once per backend (store_suite.h); none knows which. */
#include "store_suite.h"

#include <stdlib.h>
#include <string.h>

#include "util/clock.h"

/* A dead result marked for the dead-letter topic is listed, with its event and last
 * error, until it is marked done; other results are not listed. */
static void test_dead_letter_marks(void **state)
{
	struct t *t = *state;
	char ids[2][UUID_STR_LEN];
	struct store_claim *c = NULL;
	struct store_dead_letter *dl = NULL;
	size_t n;

	ingest_one(t, "job.done", t->t0, 1, ids[0]);
	ingest_one(t, "job.done", t->t0 + 1, 1, ids[1]);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 2);
	struct store_attempt a = {.n = 1, .kind = ATTEMPT_IMMEDIATE, .started_at = t->t0,
				  .duration_ms = 5, .code = 500, .message = "HTTP 500"};
	struct store_result r[2] = {
		{.delivery_id = c[0].delivery_id, .status = DELIVERY_FAILED, .attempt_count = 1,
		 .last_code = 500, .last_message = "HTTP 500", .last_cause = "busy",
		 .attempts = &a, .n_attempts = 1, .dead_letter = 1},
		{.delivery_id = c[1].delivery_id, .status = DELIVERY_PROCESSED, .attempt_count = 1,
		 .processed_at = clock_now_ms(), .attempts = &a, .n_attempts = 1},
	};
	assert_int_equal(store_record_results(t->st, r, 2), STORE_OK);
	assert_int_equal(store_dead_letters(t->st, 10, &dl, &n), STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(dl[0].claim.delivery_id, c[0].delivery_id);
	assert_string_equal(dl[0].claim.event_id, c[0].event_id);
	assert_string_equal(dl[0].claim.subscription_id, t->subs[0]);
	assert_string_equal(dl[0].claim.event_type, "job.done");
	assert_memory_equal(dl[0].claim.payload, "{\"n\":1}", 7);
	assert_int_equal(dl[0].claim.attempt_count, 1);
	assert_int_equal(dl[0].last_code, 500);
	assert_string_equal(dl[0].last_message, "HTTP 500");
	assert_string_equal(dl[0].last_cause, "busy");
	const char done[1][UUID_STR_LEN];
	memcpy((char *)done[0], dl[0].claim.delivery_id, UUID_STR_LEN);
	store_dead_letters_free(dl, n);
	assert_int_equal(store_dead_letters_done(t->st, done, 1), STORE_OK);
	assert_int_equal(store_dead_letters(t->st, 10, &dl, &n), STORE_OK);
	assert_int_equal(n, 0);
	store_dead_letters_free(dl, n);
	store_claims_free(c, 2);
}

static void test_record_success(void **state)
{
	struct t *t = *state;
	struct store_claim *c = NULL;
	struct store_attempt_row *a = NULL;
	struct store_delivery d;
	struct store_attempt tries[2] = {
		{1, ATTEMPT_IMMEDIATE, 0, 1000, 504, "Gateway Timeout", "Operation timed out", 0},
		{2, ATTEMPT_IMMEDIATE, 0, 35, 200, "OK", NULL, 0},
	};
	struct store_result r = {
		.status = DELIVERY_PROCESSED,
		.attempt_count = 2,
		.attempts = tries,
		.n_attempts = 2,
	};
	size_t n, na;
	int64_t due;

	ingest_one(t, "a", t->t0, 1, NULL);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 1);
	r.delivery_id = c[0].delivery_id;
	r.processed_at = clock_now_ms();
	tries[0].started_at = r.processed_at - 1100;
	tries[1].started_at = r.processed_at - 50;
	assert_int_equal(store_record_results(t->st, &r, 1), STORE_OK);

	d = get_delivery(t, c[0].delivery_id);
	assert_int_equal(d.status, DELIVERY_PROCESSED);
	assert_int_equal(d.processed_at, r.processed_at);
	assert_int_equal(d.attempt_count, 2);
	assert_int_equal(d.next_attempt_at, 0);
	assert_int_equal(d.last_code, 0);
	assert_null(d.last_message);
	assert_null(d.lease_owner);
	assert_int_equal(d.lease_until, 0);
	store_delivery_free(&d);

	assert_int_equal(store_delivery_attempts(t->st, c[0].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 2);
	assert_int_equal(a[0].n, 1);
	assert_int_equal(a[0].kind, ATTEMPT_IMMEDIATE);
	assert_int_equal(a[0].code, 504);
	assert_int_equal(a[0].duration_ms, 1000);
	assert_int_equal(a[0].started_at, tries[0].started_at);
	assert_string_equal(a[0].message, "Gateway Timeout");
	assert_string_equal(a[0].cause, "Operation timed out");
	assert_int_equal(a[1].code, 200);
	assert_null(a[1].cause);
	store_attempts_free(a, na);

	assert_int_equal(store_next_due(t->st, &due), STORE_OK);
	assert_int_equal(due, 0);
	store_claims_free(c, n);
}

/* Results come in batches (the dispatcher writes up to 512 at once): every one is
 * applied as if written alone, its attempts kept, a result for a lease already given
 * up ignored, and the error fields follow the same rules. */
static void test_record_many(void **state)
{
	struct t *t = *state;
	enum { N = 75 };
	struct store_claim *c = NULL;
	struct store_result r[N + 1];
	struct store_attempt tries[N][2];
	int64_t now = clock_now_ms();
	size_t n;

	for (int i = 0; i < N; i++)
		ingest_one(t, "many", t->t0 + i, 1, NULL);
	n = claim_n(t, now, MINUTE_MS, 100, &c);
	assert_int_equal(n, N);

	/* The last one is written alone first: its lease is gone when the batch comes. */
	record(t, c[N - 1].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	memset(r, 0, sizeof(r));
	for (int i = 0; i < N; i++) {
		struct store_result *x = &r[i];
		x->delivery_id = c[i].delivery_id;
		tries[i][0] = (struct store_attempt){1, ATTEMPT_IMMEDIATE, now - 30, 10, 503,
						     "Service Unavailable", "busy", 0};
		tries[i][1] = (struct store_attempt){2, ATTEMPT_IMMEDIATE, now - 10, 5, 200, "OK", NULL, 0};
		x->attempts = tries[i];
		switch (i % 3) {
		case 0: /* delivered on the second try */
			x->status = DELIVERY_PROCESSED;
			x->attempt_count = 2;
			x->processed_at = now;
			x->n_attempts = 2;
			break;
		case 1: /* failed, retried in a minute */
			x->status = DELIVERY_FAILED;
			x->attempt_count = 1;
			x->retry_count = 1;
			x->next_attempt_at = now + MINUTE_MS;
			x->last_code = 503;
			x->last_message = "Service Unavailable";
			x->last_cause = "busy";
			x->n_attempts = 1;
			break;
		default: /* released untouched: keeps its error */
			x->status = DELIVERY_NEW;
			x->next_attempt_at = now + 5000;
			x->delay_actions = 2;
			x->last_code = -1;
			break;
		}
	}
	assert_int_equal(store_record_results(t->st, r, N), STORE_OK);

	for (int i = 0; i < N - 1; i++) {
		struct store_delivery d = get_delivery(t, c[i].delivery_id);
		struct store_attempt_row *a = NULL;
		size_t na = 0;

		assert_int_equal(d.status, r[i].status);
		assert_int_equal(d.attempt_count, r[i].attempt_count);
		assert_int_equal(d.next_attempt_at, r[i].next_attempt_at);
		assert_int_equal(d.processed_at, r[i].processed_at);
		assert_null(d.lease_owner);
		assert_int_equal(d.last_code, i % 3 == 1 ? 503 : 0);
		if (i % 3 == 1)
			assert_string_equal(d.last_cause, "busy");
		store_delivery_free(&d);
		assert_int_equal(store_delivery_attempts(t->st, c[i].delivery_id, &a, &na), STORE_OK);
		assert_int_equal(na, r[i].n_attempts);
		if (na == 2) {
			assert_int_equal(a[0].code, 503);
			assert_string_equal(a[0].cause, "busy");
			assert_int_equal(a[1].code, 200);
		}
		store_attempts_free(a, na);
	}
	/* the one written alone keeps what it was given then: one attempt, processed */
	struct store_delivery d = get_delivery(t, c[N - 1].delivery_id);
	struct store_attempt_row *a = NULL;
	size_t na = 0;
	assert_int_equal(d.status, DELIVERY_PROCESSED);
	assert_int_equal(d.attempt_count, 1);
	store_delivery_free(&d);
	assert_int_equal(store_delivery_attempts(t->st, c[N - 1].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 1);
	store_attempts_free(a, na);
	store_claims_free(c, n);
}

static void test_record_failure_then_dead(void **state)
{
	struct t *t = *state;
	struct delivery_filter f = {.dead_only = 1, .limit = 100};
	struct store_claim *c = NULL, *c2 = NULL;
	struct store_delivery *items = NULL;
	struct store_attempt_row *a = NULL;
	struct store_delivery d;
	char cause[3000], *cursor = NULL;
	int64_t now = clock_now_ms(), due;
	size_t n, n2, na, ni;

	/* A cause longer than the cap, ending in multi-byte characters. */
	memset(cause, 'x', sizeof(cause));
	for (size_t i = 1020; i + 2 < sizeof(cause); i += 2)
		memcpy(&cause[i], "\xc3\xa9", 2);
	cause[sizeof(cause) - 1] = '\0';

	ingest_one(t, "a", t->t0, 1, NULL);
	n = claim_n(t, now, MINUTE_MS, 10, &c);
	record(t, c[0].delivery_id, DELIVERY_FAILED, 3, now + 3000, 503, "Service Unavailable",
	       cause);
	d = get_delivery(t, c[0].delivery_id);
	assert_int_equal(d.status, DELIVERY_FAILED);
	assert_int_equal(d.next_attempt_at, now + 3000);
	assert_int_equal(d.attempt_count, 3);
	assert_int_equal(d.last_code, 503);
	assert_string_equal(d.last_message, "Service Unavailable");
	assert_true(strlen(d.last_cause) <= 1024 && strlen(d.last_cause) >= 1020);
	assert_memory_equal(d.last_cause, cause, strlen(d.last_cause));
	assert_int_equal(d.processed_at, 0);
	store_delivery_free(&d);
	assert_int_equal(store_delivery_attempts(t->st, c[0].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 1);
	assert_true(strlen(a[0].cause) <= 1024);
	store_attempts_free(a, na);

	/* Scheduled, not dead: pending at its time, not in the DLQ. */
	assert_int_equal(store_next_due(t->st, &due), STORE_OK);
	assert_int_equal(due, now + 3000);
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &ni, &cursor), STORE_OK);
	assert_int_equal(ni, 0);
	assert_int_equal(claim_n(t, now + 2999, MINUTE_MS, 10, &c2), 0);
	n2 = claim_n(t, now + 3000, MINUTE_MS, 10, &c2);
	assert_int_equal(n2, 1);
	assert_int_equal(c2[0].status, DELIVERY_FAILED);
	assert_int_equal(c2[0].attempt_count, 3);

	/* Exhausted: FAILED with no next attempt is the dead-letter queue. */
	record(t, c2[0].delivery_id, DELIVERY_FAILED, 4, 0, 503, "Service Unavailable", "refused");
	assert_int_equal(store_next_due(t->st, &due), STORE_OK);
	assert_int_equal(due, 0);
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &ni, &cursor), STORE_OK);
	assert_int_equal(ni, 1);
	assert_string_equal(items[0].id, c[0].delivery_id);
	assert_int_equal(items[0].next_attempt_at, 0);
	assert_string_equal(items[0].last_cause, "refused");
	assert_null(cursor);
	store_deliveries_free(items, ni);
	store_claims_free(c, n);
	store_claims_free(c2, n2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_dead_letter_marks),
		T(test_record_success),
		T(test_record_many),
		T(test_record_failure_then_dead),
	};

	return store_suite_run(tests, sizeof(tests) / sizeof(tests[0]));
}
