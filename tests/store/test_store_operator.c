/* test_store_operator.c: the conformance suite on what operators and background jobs do
 * to the history: replay, purge of dead deliveries, retention cleanup, the deliveries that
 * keep failing, the jobs table (progress, cancel, listing pages), and a read that takes
 * long (a search over a large store) holding up no other read, and stopped past the
 * store's read timeout.
 *
 * Every test runs once per backend (store_suite.h); none knows which. */
#include "store_suite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bg_call.h"
#include "store_reads.h"
#include "util/clock.h"

static void test_replay(void **state)
{
	struct t *t = *state;
	char ev_dead[UUID_STR_LEN], ev_ok[UUID_STR_LEN], ev_new[UUID_STR_LEN];
	char ev_leased[UUID_STR_LEN], ev_sched[UUID_STR_LEN];
	struct store_delivery *dd, *dok, *dnew, *dlease, *dsched, d;
	enum store_replay_outcome out[6];
	char ids[6][UUID_STR_LEN];
	struct store_claim *c = NULL;
	size_t n, replayed = 99;
	int64_t before = clock_now_ms();

	ingest_one(t, "dead", t->t0, 1, ev_dead);
	ingest_one(t, "ok", t->t0 + 1, 1, ev_ok);
	ingest_one(t, "sched", t->t0 + 2, 1, ev_sched);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 3);
	record(t, c[0].delivery_id, DELIVERY_FAILED, 6, 0, 503, "Service Unavailable", "x");
	record(t, c[1].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	record(t, c[2].delivery_id, DELIVERY_FAILED, 3, clock_now_ms() + HOUR_MS, 502, "Bad", "y");
	store_claims_free(c, n);
	ingest_one(t, "leased", t->t0 + 3, 1, ev_leased);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 1);
	store_claims_free(c, n);
	ingest_one(t, "new", t->t0 + 4, 1, ev_new);

	dd = deliveries_of(t, ev_dead, 1);
	dok = deliveries_of(t, ev_ok, 1);
	dnew = deliveries_of(t, ev_new, 1);
	dlease = deliveries_of(t, ev_leased, 1);
	dsched = deliveries_of(t, ev_sched, 1);
	memcpy(ids[0], dd->id, UUID_STR_LEN);
	memcpy(ids[1], dok->id, UUID_STR_LEN);
	memcpy(ids[2], dnew->id, UUID_STR_LEN);
	memcpy(ids[3], dlease->id, UUID_STR_LEN);
	memcpy(ids[4], dsched->id, UUID_STR_LEN);
	snprintf(ids[5], UUID_STR_LEN, "0190f000-0000-7000-8000-000000000000");

	assert_int_equal(store_replay(t->st, (const char (*)[UUID_STR_LEN])ids, 6, 0, out,
				      &replayed), STORE_OK);
	assert_int_equal(replayed, 2);
	assert_int_equal(out[0], REPLAY_DONE);
	assert_int_equal(out[1], REPLAY_NOT_FAILED);
	assert_int_equal(out[2], REPLAY_NOT_FAILED);
	assert_int_equal(out[3], REPLAY_IN_FLIGHT);
	assert_int_equal(out[4], REPLAY_DONE);
	assert_int_equal(out[5], REPLAY_NOT_FOUND);

	d = get_delivery(t, ids[0]);
	assert_int_equal(d.status, DELIVERY_NEW);
	assert_int_equal(d.replay, 1);
	assert_true(d.next_attempt_at >= before && d.next_attempt_at <= clock_now_ms());
	assert_int_equal(d.attempt_count, 6);
	store_delivery_free(&d);

	/* The replayed ones are claimable now, marked as replays. */
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++)
		if (strcmp(c[i].delivery_id, ids[0]) == 0)
			assert_int_equal(c[i].replay, 1);
	store_claims_free(c, n);

	/* PROCESSED needs force. */
	assert_int_equal(store_replay(t->st, (const char (*)[UUID_STR_LEN])&ids[1], 1, 1, out,
				      &replayed), STORE_OK);
	assert_int_equal(out[0], REPLAY_DONE);
	assert_int_equal(replayed, 1);
	d = get_delivery(t, ids[1]);
	assert_int_equal(d.status, DELIVERY_NEW);
	assert_int_equal(d.processed_at, 0);
	store_delivery_free(&d);

	store_deliveries_free(dd, 1);
	store_deliveries_free(dok, 1);
	store_deliveries_free(dnew, 1);
	store_deliveries_free(dlease, 1);
	store_deliveries_free(dsched, 1);
}

static void test_purge_only_dead(void **state)
{
	struct t *t = *state;
	char ev1[UUID_STR_LEN], ev2[UUID_STR_LEN];
	struct store_attempt_row *a = NULL;
	struct store_claim *c = NULL;
	struct store_delivery d, *left;
	struct store_event got;
	size_t n, na;

	/* ev1: one delivery dead; ev2: one dead, one scheduled, one processed. */
	ingest_one(t, "a", t->t0, 1, ev1);
	ingest_one(t, "b", t->t0 + 1, 3, ev2);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 4);
	record(t, c[0].delivery_id, DELIVERY_FAILED, 1, 0, 404, "Not Found", NULL);
	record(t, c[1].delivery_id, DELIVERY_FAILED, 1, 0, 404, "Not Found", NULL);
	record(t, c[2].delivery_id, DELIVERY_FAILED, 1, clock_now_ms() + HOUR_MS, 503, "x", NULL);
	record(t, c[3].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);

	assert_int_equal(store_dlq_purge(t->st, c[2].delivery_id), STORE_CONFLICT);
	assert_int_equal(store_dlq_purge(t->st, c[3].delivery_id), STORE_CONFLICT);
	assert_int_equal(store_dlq_purge(t->st, "0190f000-0000-7000-8000-000000000000"),
			 STORE_NOT_FOUND);

	/* The last delivery of ev1: the delivery, its attempts and the event go. */
	assert_string_equal(c[0].event_id, ev1);
	assert_int_equal(store_dlq_purge(t->st, c[0].delivery_id), STORE_OK);
	assert_int_equal(store_delivery_get(t->st, c[0].delivery_id, &d), STORE_NOT_FOUND);
	assert_int_equal(store_delivery_attempts(t->st, c[0].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 0);
	assert_int_equal(store_event_get(t->st, ev1, &got), STORE_NOT_FOUND);
	assert_int_equal(store_dlq_purge(t->st, c[0].delivery_id), STORE_NOT_FOUND);

	/* ev2 keeps its other deliveries, so the event stays. */
	assert_int_equal(store_dlq_purge(t->st, c[1].delivery_id), STORE_OK);
	assert_int_equal(store_event_get(t->st, ev2, &got), STORE_OK);
	store_event_free(&got);
	left = deliveries_of(t, ev2, 2);
	store_deliveries_free(left, 2);
	store_claims_free(c, n);
}

/* A purge by filter takes each dead delivery with its attempts, and the events left with
 * no delivery; a delivery that is not dead stays with its history. */
static void test_purge_matching(void **state)
{
	struct t *t = *state;
	char ev1[UUID_STR_LEN], ev2[UUID_STR_LEN];
	struct store_attempt_row *a = NULL;
	struct delivery_filter f = {.dead_only = 1, .limit = 100};
	struct store_claim *c = NULL;
	struct store_event got;
	size_t n, na, purged = 0;

	ingest_one(t, "a", t->t0, 1, ev1);
	ingest_one(t, "b", t->t0 + 1, 2, ev2);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 3);
	record(t, c[0].delivery_id, DELIVERY_FAILED, 1, 0, 404, "Not Found", NULL);
	record(t, c[1].delivery_id, DELIVERY_FAILED, 1, 0, 410, "Gone", NULL);
	record(t, c[2].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);

	assert_int_equal(store_dlq_purge_matching(t->st, &f, 100, &purged), STORE_OK);
	assert_int_equal(purged, 2);
	for (size_t i = 0; i < 2; i++) {
		assert_int_equal(store_delivery_attempts(t->st, c[i].delivery_id, &a, &na),
				 STORE_OK);
		assert_int_equal(na, 0);
	}
	assert_int_equal(store_event_get(t->st, ev1, &got), STORE_NOT_FOUND);
	assert_int_equal(store_event_get(t->st, ev2, &got), STORE_OK);
	store_event_free(&got);
	assert_int_equal(store_delivery_attempts(t->st, c[2].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 1);
	store_attempts_free(a, na);
	store_claims_free(c, n);
}

static void test_cleanup_keeps_failed(void **state)
{
	struct t *t = *state;
	char ev_done[UUID_STR_LEN], ev_mixed[UUID_STR_LEN], ev_new[UUID_STR_LEN];
	char ev_none[UUID_STR_LEN];
	struct store_attempt_row *a = NULL;
	struct store_delivery *left;
	struct store_claim *c = NULL;
	struct store_event got;
	size_t n, na, deleted = 0;

	ingest_one(t, "done", t->t0, 2, ev_done);
	ingest_one(t, "mixed", t->t0 + 1, 2, ev_mixed);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 4);
	record(t, c[0].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	record(t, c[1].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	record(t, c[2].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	record(t, c[3].delivery_id, DELIVERY_FAILED, 1, 0, 500, "boom", NULL);
	ingest_one(t, "new", t->t0 + 2, 1, ev_new);
	ingest_one(t, "none", t->t0 + 3, 0, ev_none);

	assert_int_equal(store_cleanup(t->st, clock_now_ms() + 1, 0, &deleted, NULL), STORE_OK);
	assert_int_equal(deleted, 3);

	assert_int_equal(store_event_get(t->st, ev_done, &got), STORE_NOT_FOUND);
	assert_int_equal(store_event_get(t->st, ev_none, &got), STORE_NOT_FOUND);
	assert_int_equal(store_delivery_attempts(t->st, c[0].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 0);
	left = deliveries_of(t, ev_mixed, 1);
	assert_string_equal(left->id, c[3].delivery_id);
	assert_int_equal(left->status, DELIVERY_FAILED);
	store_deliveries_free(left, 1);
	assert_int_equal(store_delivery_attempts(t->st, c[3].delivery_id, &a, &na), STORE_OK);
	assert_int_equal(na, 1);
	store_attempts_free(a, na);
	left = deliveries_of(t, ev_new, 1);
	store_deliveries_free(left, 1);
	assert_int_equal(store_event_get(t->st, ev_mixed, &got), STORE_OK);
	store_event_free(&got);

	/* Nothing left to clean. */
	assert_int_equal(store_cleanup(t->st, clock_now_ms() + 1, 0, &deleted, NULL), STORE_OK);
	assert_int_equal(deleted, 0);
	store_claims_free(c, n);
}

/* Retention (the cleanup_after setting): only PROCESSED deliveries processed at or before
 * the cut are deleted; younger ones stay until a later run. An event no subscription
 * wanted is kept as long, counted from its creation. */
static void test_cleanup_keeps_young(void **state)
{
	struct t *t = *state;
	char ev_old[UUID_STR_LEN], ev_young[UUID_STR_LEN];
	char none_old[UUID_STR_LEN], none_young[UUID_STR_LEN];
	struct store_claim *c = NULL;
	struct store_event got;
	int64_t now = clock_now_ms();
	size_t n, deleted = 0;

	ingest_one(t, "old", t->t0, 1, ev_old);
	ingest_one(t, "young", t->t0 + 1, 1, ev_young);
	ingest_one(t, "none", now - 2 * HOUR_MS, 0, none_old);
	ingest_one(t, "none", now - MINUTE_MS, 0, none_young);
	n = claim_n(t, now, MINUTE_MS, 10, &c);
	assert_int_equal(n, 2);
	for (size_t i = 0; i < 2; i++) {
		struct store_attempt a = {.n = 1, .kind = ATTEMPT_IMMEDIATE, .started_at = now,
					  .duration_ms = 1, .code = 200, .message = "OK"};
		struct store_result r = {
			.delivery_id = c[i].delivery_id,
			.status = DELIVERY_PROCESSED,
			.attempt_count = 1,
			/* the first delivered two hours ago, the second a minute ago */
			.processed_at = i == 0 ? now - 2 * HOUR_MS : now - MINUTE_MS,
			.attempts = &a,
			.n_attempts = 1,
		};
		assert_int_equal(store_record_results(t->st, &r, 1), STORE_OK);
	}
	/* cleanup_after 1h: the old one goes, the young one stays */
	assert_int_equal(store_cleanup(t->st, now - HOUR_MS, 0, &deleted, NULL), STORE_OK);
	assert_int_equal(deleted, 1);
	assert_int_equal(store_event_get(t->st, ev_old, &got), STORE_NOT_FOUND);
	assert_int_equal(store_event_get(t->st, ev_young, &got), STORE_OK);
	store_event_free(&got);
	assert_int_equal(store_event_get(t->st, none_old, &got), STORE_NOT_FOUND);
	assert_int_equal(store_event_get(t->st, none_young, &got), STORE_OK);
	store_event_free(&got);
	/* an hour later they are old enough too */
	assert_int_equal(store_cleanup(t->st, now + HOUR_MS, 0, &deleted, NULL), STORE_OK);
	assert_int_equal(deleted, 1);
	assert_int_equal(store_event_get(t->st, ev_young, &got), STORE_NOT_FOUND);
	assert_int_equal(store_event_get(t->st, none_young, &got), STORE_NOT_FOUND);
	store_claims_free(c, n);
}

/* The cleanup a slice at a time (the janitor's way, so that its other duties take turns):
 * a call deletes at most max, the next goes on, and the events that never had a delivery
 * go once the delivered ones are all gone. */
static void test_cleanup_in_slices(void **state)
{
	struct t *t = *state;
	char ev[5][UUID_STR_LEN], ev_none[UUID_STR_LEN];
	struct store_claim *c = NULL;
	struct store_event got;
	size_t n, deleted = 0;
	int more = -1;

	for (int i = 0; i < 5; i++)
		ingest_one(t, "sliced", t->t0 + i, 1, ev[i]);
	ingest_one(t, "none", t->t0 + 5, 0, ev_none);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 5);
	for (size_t i = 0; i < n; i++)
		record(t, c[i].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);

	assert_int_equal(store_cleanup(t->st, clock_now_ms() + 1, 2, &deleted, &more), STORE_OK);
	assert_int_equal(deleted, 2);
	assert_int_equal(more, 1);
	/* the event without deliveries waits for the delivered ones to be gone */
	assert_int_equal(store_event_get(t->st, ev_none, &got), STORE_OK);
	store_event_free(&got);
	assert_int_equal(store_cleanup(t->st, clock_now_ms() + 1, 2, &deleted, &more), STORE_OK);
	assert_int_equal(deleted, 2);
	assert_int_equal(more, 1);
	/* fewer than max: the deliveries are done, and the sweep (one slice here) with them */
	assert_int_equal(store_cleanup(t->st, clock_now_ms() + 1, 2, &deleted, &more), STORE_OK);
	assert_int_equal(deleted, 1);
	assert_int_equal(more, 0);
	assert_int_equal(store_event_get(t->st, ev_none, &got), STORE_NOT_FOUND);
	for (int i = 0; i < 5; i++)
		assert_int_equal(store_event_get(t->st, ev[i], &got), STORE_NOT_FOUND);
	/* a new run starts from the beginning and finds nothing */
	assert_int_equal(store_cleanup(t->st, clock_now_ms() + 1, 2, &deleted, &more), STORE_OK);
	assert_int_equal(deleted, 0);
	assert_int_equal(more, 0);
	store_claims_free(c, n);
}

/* The implicit dead-letter queue: a delivery that keeps failing is found by how often
 * and how long; failing_since is set by its first failure, kept by later ones, cleared by
 * a success; stats show the oldest still retried. */
static void test_failing_since(void **state)
{
	struct t *t = *state;
	char ev[UUID_STR_LEN];
	struct store_claim *c = NULL;
	struct store_delivery *items = NULL, d;
	struct delivery_filter f = {0};
	struct store_stats st;
	char *cursor = NULL;
	size_t n, ni;

	ingest_one(t, "failing", t->t0, 1, ev);
	int64_t before = clock_now_ms();
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 1);
	record(t, c[0].delivery_id, DELIVERY_FAILED, 1, clock_now_ms() - 1, 500, "boom", NULL);
	d = get_delivery(t, c[0].delivery_id);
	int64_t since = d.failing_since;
	assert_true(since >= before && since <= clock_now_ms());
	store_delivery_free(&d);

	f.limit = 10;
	f.failing_since_ms = clock_now_ms();
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &ni, &cursor), STORE_OK);
	assert_int_equal(ni, 1);
	store_deliveries_free(items, ni);
	f.failing_since_ms = since - 1; /* not failing that long yet */
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &ni, &cursor), STORE_OK);
	assert_int_equal(ni, 0);
	store_deliveries_free(items, ni);
	f.failing_since_ms = 0;
	f.min_attempts = 2;
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &ni, &cursor), STORE_OK);
	assert_int_equal(ni, 0);
	store_deliveries_free(items, ni);
	assert_int_equal(store_stats(t->st, clock_now_ms(), MINUTE_MS, &st), STORE_OK);
	assert_int_equal(st.oldest_failing_since, since);
	store_stats_free(&st);

	/* the second failure keeps when it began */
	store_claims_free(c, n);
	usleep(5000);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 1);
	record(t, c[0].delivery_id, DELIVERY_FAILED, 2, clock_now_ms() - 1, 503, "busy", NULL);
	d = get_delivery(t, c[0].delivery_id);
	assert_int_equal(d.failing_since, since);
	store_delivery_free(&d);
	assert_int_equal(store_deliveries_list(t->st, &f, &items, &ni, &cursor), STORE_OK);
	assert_int_equal(ni, 1); /* min_attempts 2 */
	store_deliveries_free(items, ni);

	/* success clears it, and stats have nothing failing */
	store_claims_free(c, n);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 1);
	record(t, c[0].delivery_id, DELIVERY_PROCESSED, 3, 0, 0, NULL, NULL);
	d = get_delivery(t, c[0].delivery_id);
	assert_int_equal(d.failing_since, 0);
	store_delivery_free(&d);
	assert_int_equal(store_stats(t->st, clock_now_ms(), MINUTE_MS, &st), STORE_OK);
	assert_int_equal(st.oldest_failing_since, 0);
	store_stats_free(&st);
	store_claims_free(c, n);
}

/* The store's counts by state, which /metrics and /v1/stats show: each status, the
 * leased, the due backlog and the oldest dead delivery, in a store holding every state
 * at once (the processed count is taken from the total, the others from their indexes). */
static void test_stats_counts(void **state)
{
	struct t *t = *state;
	char ev1[UUID_STR_LEN], ev2[UUID_STR_LEN];
	struct store_claim *c = NULL;
	struct store_stats st;
	struct store_delivery dead;

	ingest_one(t, "counted", t->t0, 3, ev1);
	ingest_one(t, "counted", t->t0 + 1, 3, ev2);
	size_t n = claim_n(t, clock_now_ms(), MINUTE_MS, 5, &c);
	assert_int_equal(n, 5); /* the sixth stays due */
	record(t, c[0].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	record(t, c[1].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	record(t, c[2].delivery_id, DELIVERY_FAILED, 1, clock_now_ms() + HOUR_MS, 503, "x", NULL);
	record(t, c[3].delivery_id, DELIVERY_FAILED, 1, 0, 404, "Not Found", NULL);
	/* c[4] stays leased */

	assert_int_equal(store_stats(t->st, clock_now_ms(), MINUTE_MS, &st), STORE_OK);
	assert_int_equal(st.new_count, 2);       /* the leased one and the due one */
	assert_int_equal(st.processed_count, 2);
	assert_int_equal(st.retrying_count, 1);
	assert_int_equal(st.dead_count, 1);
	assert_int_equal(st.in_flight, 1);
	assert_int_equal(st.due_count, 1);
	assert_true(st.oldest_due_at > 0);
	dead = get_delivery(t, c[3].delivery_id);
	assert_int_equal(st.oldest_dead_at, dead.created_at);
	store_delivery_free(&dead);
	assert_int_equal(st.blocked_count, 0);
	store_stats_free(&st);
	store_claims_free(c, n);
}

/* A job's progress is written only while it runs: a cancel between two progress writes
 * stays, and the late write is told the job is gone (store.h). */
static void test_job_cancel_is_not_overwritten(void **state)
{
	struct t *t = *state;
	struct store_job j = {
		.kind = "replay", .state = "running", .filter = "{}", .rate = 10, .matched = 5,
		.actor = "admin", .created_at = clock_now_ms(), .updated_at = clock_now_ms(),
	};
	struct store_job got;

	uuid_v7(j.id);
	assert_int_equal(store_job_create(t->st, &j), STORE_OK);
	j.done = 2;
	assert_int_equal(store_job_update(t->st, &j), STORE_OK);

	struct store_job cancel = j;
	snprintf(cancel.state, sizeof(cancel.state), "cancelled");
	assert_int_equal(store_job_update(t->st, &cancel), STORE_OK);

	j.done = 3; /* the replay's next progress write, still saying "running" */
	assert_int_equal(store_job_update(t->st, &j), STORE_NOT_FOUND);
	assert_int_equal(store_job_get(t->st, j.id, &got), STORE_OK);
	assert_string_equal(got.state, "cancelled");
	assert_int_equal(got.done, 2);
	store_job_free(&got);
}

/* GET /v1/jobs: newest first (created_at, then id for a tie), keyset pages that neither
 * skip nor repeat a job, a state filter, and a foreign cursor refused. */
static void test_jobs_list_pages(void **state)
{
	struct t *t = *state;
	static const char *const states[] = {"done", "running", "cancelled", "done", "failed"};
	char ids[5][UUID_STR_LEN];
	int64_t base = clock_now_ms() - 100000;
	struct store_job *items = NULL;
	size_t n = 0;
	char *next = NULL, *again = NULL;

	for (int i = 0; i < 5; i++) {
		struct store_job j = {.kind = "replay", .filter = "{}", .rate = 10, .matched = 10,
				      .done = i, .actor = "admin"};
		snprintf(j.state, sizeof(j.state), "%s", states[i]);
		/* jobs 2 and 3 share their created_at: the id decides */
		j.created_at = j.updated_at = base + (i == 3 ? 2000 : i * 1000);
		uuid_v7(j.id);
		memcpy(ids[i], j.id, UUID_STR_LEN);
		assert_int_equal(store_job_create(t->st, &j), STORE_OK);
	}
	/* newest first: 4, then 3 and 2 (same time: the greater id first), 1, 0 */
	const int order[5] = {4, 3, 2, 1, 0};
	assert_true(strcmp(ids[3], ids[2]) > 0);
	assert_int_equal(store_jobs_list(t->st, NULL, NULL, 2, &items, &n, &next), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(items[0].id, ids[order[0]]);
	assert_string_equal(items[1].id, ids[order[1]]);
	assert_string_equal(items[0].state, "failed");
	assert_string_equal(items[0].actor, "admin");
	assert_int_equal(items[0].done, 4);
	assert_non_null(next);
	store_jobs_free(items, n);
	assert_int_equal(store_jobs_list(t->st, NULL, next, 2, &items, &n, &again), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(items[0].id, ids[order[2]]);
	assert_string_equal(items[1].id, ids[order[3]]);
	assert_non_null(again);
	store_jobs_free(items, n);
	free(next);
	assert_int_equal(store_jobs_list(t->st, NULL, again, 2, &items, &n, &next), STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(items[0].id, ids[order[4]]);
	assert_null(next); /* the last page */
	store_jobs_free(items, n);
	free(again);

	assert_int_equal(store_jobs_list(t->st, "done", NULL, 10, &items, &n, &next), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(items[0].id, ids[3]);
	assert_string_equal(items[1].id, ids[0]);
	assert_null(next);
	store_jobs_free(items, n);
	assert_int_equal(store_jobs_list(t->st, "cancelled", NULL, 10, &items, &n, &next),
			 STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(items[0].id, ids[2]);
	store_jobs_free(items, n);

	assert_int_equal(store_jobs_list(t->st, NULL, "bd:12:abc", 10, &items, &n, &next),
			 STORE_INVALID);
	assert_int_equal(store_jobs_list(t->st, NULL, "j:x:abc", 10, &items, &n, &next),
			 STORE_INVALID);
	assert_int_equal(store_jobs_list(t->st, NULL, NULL, 0, &items, &n, &next), STORE_INVALID);
	assert_null(items);
}

/* A read that takes long (here: held up by another session's lock on the deliveries, as
 * a search over millions of them takes seconds) must not hold up the others: /readyz's
 * ping answers meanwhile. 30 s is far more than a ping takes on any machine. */
static void test_a_long_read_holds_up_no_other(void **state)
{
	struct t *t = *state;
	struct bg_call list, pinged_call;
	char ev[UUID_STR_LEN];

	if (!backend->hold_reads)
		skip(); /* tests/unit/store/test_sqlite_readers.c holds SQLite's readers */
	ingest_one(t, "listed", t->t0, 1, ev);
	assert_int_equal(backend->hold_reads(&t->db, 1), 0);
	assert_int_equal(bg_call_start(&list, read_list_some, t->st), 0);
	int waiting = 0;
	for (int i = 0; i < 300 && !waiting; i++) {
		waiting = backend->reads_held(&t->db) > 0;
		if (!waiting)
			usleep(100 * 1000);
	}
	if (!waiting) {
		backend->hold_reads(&t->db, 0);
		fail_msg("the listing never reached the held lock");
	}
	assert_int_equal(bg_call_start(&pinged_call, read_ping, t->st), 0);
	int pinged = bg_call_done(&pinged_call, 30);
	int listed = bg_call_done(&list, 0);
	backend->hold_reads(&t->db, 0);
	/* both end once the lock goes: the threads are joined before any verdict */
	bg_call_join(&pinged_call);
	bg_call_join(&list);
	assert_int_equal(pinged_call.rc, STORE_OK);
	assert_int_equal(list.rc, STORE_OK);
	if (!pinged)
		fail_msg("the ping waited for the long read");
	assert_false(listed); /* it was still held up when the ping answered */
}

/* A read that runs past the store's read timeout is stopped and answered STORE_TIMEOUT
 * (here it waits on another session's lock; a search over millions of deliveries is the
 * case in the field), and the session serves the next read. */
static void test_a_read_past_the_timeout_is_stopped(void **state)
{
	struct t *t = *state;
	struct bg_call list;

	if (!backend->hold_reads)
		skip(); /* tests/unit/store/test_sqlite_readers.c runs a read past SQLite's */
	store_set_read_timeout(t->st, 300);
	assert_int_equal(backend->hold_reads(&t->db, 1), 0);
	assert_int_equal(bg_call_start(&list, read_list_some, t->st), 0);
	int stopped = bg_call_done(&list, 30);
	backend->hold_reads(&t->db, 0);
	bg_call_join(&list);
	if (!stopped)
		fail_msg("the read waited past its timeout");
	assert_int_equal(list.rc, STORE_TIMEOUT);
	store_set_read_timeout(t->st, STORE_READ_TIMEOUT_MS);
	assert_int_equal(read_list_some(t->st), STORE_OK);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_replay),
		T(test_purge_only_dead),
		T(test_purge_matching),
		T(test_cleanup_keeps_failed),
		T(test_cleanup_keeps_young),
		T(test_cleanup_in_slices),
		T(test_failing_since),
		T(test_stats_counts),
		T(test_job_cancel_is_not_overwritten),
		T(test_jobs_list_pages),
		T(test_a_long_read_holds_up_no_other),
		T(test_a_read_past_the_timeout_is_stopped),
	};

	return store_suite_run(tests, sizeof(tests) / sizeof(tests[0]));
}
