/* test_pacing.c: the claim pacing rules of core/pacing.h as tables: one turn's decision
 * from a state, and what each event (an answer, a hint, a wake-up) makes of the state;
 * the gap claims keep while small ingest requests wait (claim_yield). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>

#include "core/pacing.h"

static const struct pacing_config cfg = {
	.max_in_flight = 100, .batch = 10, .idle_poll_us = 1000000, .gap_us = 2000,
	.store_down_us = 500000,
};

#define NOW 10000000 /* 10 s on the monotonic clock */

/* One turn: the state and the turn in, the decision out. */
static void test_decide_table(void **state)
{
	static const struct {
		const char *name;
		int64_t next_claim_us;
		struct pacing_turn turn;
		size_t claim;
		bool worth;
		int64_t wait_us;
	} rows[] = {
		{"idle and due: a whole batch", NOW, {.active = 0}, 10, true, 0},
		{"due, 30 free: a whole batch fits", NOW, {.active = 70}, 10, true, 0},
		{"due, a batch does not fit and less than a quarter is free: wait for room",
		 NOW, {.active = 95}, 0, false, -1},
		{"due, nothing active: even a small claim is worth it",
		 NOW, {.active = 0, .asked = 0}, 10, true, 0},
		{"full: no room", NOW, {.active = 100}, 0, false, -1},
		{"a claim asked and not answered: none more", NOW, {.active = 0, .asked = 10}, 0, true,
		 -1},
		{"stopping: none", NOW, {.active = 0, .stopping = true}, 0, true, -1},
		{"not yet due: the wait until then", NOW + 300000, {.active = 0}, 0, true, 300000},
		{"not yet due but a retry is: now", NOW + 300000, {.active = 0, .retry_due = true}, 10,
		 true, 0},
		{"a full queue waits to drain: no claim", NOW, {.active = 40, .saturated = true}, 0,
		 false, -1},
		{"a full queue, but a retry is due: claimed", NOW,
		 {.active = 40, .saturated = true, .retry_due = true}, 10, false, 0},
		{"a queue that overflowed has room for 3: a claim of 3", NOW,
		 {.active = 40, .claim_max = 3}, 3, true, 0},
		{"room for more than a batch: a batch", NOW, {.active = 0, .claim_max = 500}, 10, true, 0},
		{"a retry due while stopping: none", NOW, {.stopping = true, .retry_due = true}, 0,
		 true, -1},
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct pacing p = {.next_claim_us = rows[i].next_claim_us};
		struct pacing_decision d = pacing_decide(&p, &cfg, &rows[i].turn, NOW);
		if (d.claim != rows[i].claim || d.worth != rows[i].worth ||
		    d.wait_us != rows[i].wait_us)
			fprintf(stderr, "row \"%s\": claim %zu worth %d wait %lld\n", rows[i].name,
				d.claim, d.worth, (long long)d.wait_us);
		assert_int_equal(d.claim, rows[i].claim);
		assert_int_equal(d.worth, rows[i].worth);
		assert_int_equal(d.wait_us, rows[i].wait_us);
	}
}

/* Less room than a batch: claimed while a quarter of max_in_flight is free (what fits),
 * not below that (a small claim per finished round would cost a transaction each). */
static void test_partial_batches(void **state)
{
	const struct pacing_config big = {.max_in_flight = 100, .batch = 40,
					  .idle_poll_us = 1000000, .gap_us = 2000,
					  .store_down_us = 500000};
	struct pacing p = {.next_claim_us = NOW};
	struct pacing_turn t = {.active = 70};
	struct pacing_decision d = pacing_decide(&p, &big, &t, NOW);
	assert_int_equal(d.claim, 30);
	t.active = 80;
	d = pacing_decide(&p, &big, &t, NOW);
	assert_int_equal(d.claim, 0);
	assert_false(d.worth);
}

/* An answer sets when the next claim may go. */
static void test_answers(void **state)
{
	static const struct {
		const char *name;
		bool ok;
		size_t asked, got;
		int64_t next_claim_us, short_claim_us;
	} rows[] = {
		{"the store failed: probe again in store_down_us", false, 10, 0, NOW + 500000, 0},
		{"as many as asked: more may be due, at once", true, 10, 10, NOW, 0},
		{"fewer than asked: at the idle poll, a short claim", true, 10, 3, NOW + 1000000, NOW},
		{"none: the same", true, 10, 0, NOW + 1000000, NOW},
	};
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct pacing p = {0};
		pacing_answered(&p, &cfg, NOW, rows[i].ok, rows[i].asked, rows[i].got);
		if (p.next_claim_us != rows[i].next_claim_us ||
		    p.short_claim_us != rows[i].short_claim_us)
			fprintf(stderr, "row \"%s\": next %lld short %lld\n", rows[i].name,
				(long long)p.next_claim_us, (long long)p.short_claim_us);
		assert_int_equal(p.next_claim_us, rows[i].next_claim_us);
		assert_int_equal(p.short_claim_us, rows[i].short_claim_us);
	}
}

/* The store's hint only brings the next claim forward, never back, and a past due time
 * means now. */
static void test_due_hint(void **state)
{
	struct pacing p = {.next_claim_us = NOW + 1000000};
	pacing_due_hint(&p, NOW, 200);
	assert_int_equal(p.next_claim_us, NOW + 200000);
	pacing_due_hint(&p, NOW, 800); /* later than already planned: kept */
	assert_int_equal(p.next_claim_us, NOW + 200000);
	pacing_due_hint(&p, NOW, -50);
	assert_int_equal(p.next_claim_us, NOW);
}

/* A wake-up claims at once, except within gap_us of a short claim: a stream of commits
 * is claimed in batches, one claim per gap, not one per commit. */
static void test_wakeups_batch_after_a_short_claim(void **state)
{
	struct pacing p = {0};
	const struct pacing_turn idle = {.active = 0};
	pacing_answered(&p, &cfg, NOW, true, 10, 2); /* short */
	pacing_woken(&p, &cfg, NOW + 500);
	struct pacing_decision d = pacing_decide(&p, &cfg, &idle, NOW + 500);
	assert_int_equal(d.claim, 0);
	assert_int_equal(d.wait_us, 1500); /* until the gap is over */
	d = pacing_decide(&p, &cfg, &idle, NOW + 2000);
	assert_int_equal(d.claim, 10);
	/* long after the short claim a wake-up claims at once */
	pacing_answered(&p, &cfg, NOW + 2000, true, 10, 1);
	pacing_woken(&p, &cfg, NOW + 50000);
	assert_int_equal(p.next_claim_us, NOW + 50000);
	/* a wake-up never delays a claim already due sooner */
	p.next_claim_us = NOW;
	pacing_woken(&p, &cfg, NOW + 1000);
	assert_int_equal(p.next_claim_us, NOW);
}

/* A walk: a steady load keeps claims whole batches; the store going down spaces them. */
static void test_walk_store_down_then_up(void **state)
{
	struct pacing p = {0};
	struct pacing_turn t = {.active = 0};
	int64_t now = NOW;
	struct pacing_decision d = pacing_decide(&p, &cfg, &t, now);
	assert_int_equal(d.claim, 10);
	pacing_answered(&p, &cfg, now, false, 10, 0);
	d = pacing_decide(&p, &cfg, &t, now + 100000);
	assert_int_equal(d.claim, 0);
	assert_int_equal(d.wait_us, 400000);
	d = pacing_decide(&p, &cfg, &t, now + 500000);
	assert_int_equal(d.claim, 10);
	pacing_answered(&p, &cfg, now + 500000, true, 10, 10);
	t.active = 10;
	d = pacing_decide(&p, &cfg, &t, now + 500001);
	assert_int_equal(d.claim, 10); /* a full claim: the next at once */
}

/* Claims yield to small ingest requests that waited: the gap doubles from its minimum
 * up to its maximum while they wait longer than the target, shrinks by an eighth while
 * they do not (to 0 below a quarter of the minimum), and is 0 once none came for a while. */
static void test_claim_yield(void **state)
{
	struct claim_yield y = {0};
	int64_t now = NOW;

	assert_int_equal(claim_yield_gap(&y, now), 0);
	claim_yield_observe(&y, now, YIELD_TARGET_US); /* at the target: no gap */
	assert_int_equal(claim_yield_gap(&y, now), 0);
	claim_yield_observe(&y, now, YIELD_TARGET_US + 1);
	assert_int_equal(claim_yield_gap(&y, now), YIELD_GAP_MIN_US);
	claim_yield_observe(&y, now, 5000);
	assert_int_equal(claim_yield_gap(&y, now), 2 * YIELD_GAP_MIN_US);
	for (int i = 0; i < 20; i++)
		claim_yield_observe(&y, now, 5000);
	assert_int_equal(claim_yield_gap(&y, now), YIELD_GAP_MAX_US);
	claim_yield_observe(&y, now, 100);
	assert_int_equal(claim_yield_gap(&y, now), YIELD_GAP_MAX_US - YIELD_GAP_MAX_US / 8);
	/* waits under the target bring it down to 0 */
	for (int i = 0; i < 100 && claim_yield_gap(&y, now); i++)
		claim_yield_observe(&y, now, 100);
	assert_int_equal(claim_yield_gap(&y, now), 0);
	/* small requests stop coming: the gap goes with them */
	claim_yield_observe(&y, now, 5000);
	assert_true(claim_yield_gap(&y, now + YIELD_IDLE_US - 1) > 0);
	assert_int_equal(claim_yield_gap(&y, now + YIELD_IDLE_US), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decide_table),
		cmocka_unit_test(test_partial_batches),
		cmocka_unit_test(test_answers),
		cmocka_unit_test(test_due_hint),
		cmocka_unit_test(test_wakeups_batch_after_a_short_claim),
		cmocka_unit_test(test_walk_store_down_then_up),
		cmocka_unit_test(test_claim_yield),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
