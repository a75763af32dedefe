/* test_store_events.c: the conformance suite on the event search (store_events_list):
 * newest first over keyset pages (each event once, in order, ties in created_at broken by
 * id), every filter alone and together, the counts of each event's deliveries by state,
 * and cursors that are not the store's refused.
 *
 * Every test runs once per backend (store_suite.h); none knows which. */
#include "store_suite.h"

#include <stdlib.h>
#include <string.h>

#include "util/clock.h"

#define N_EVENTS 20

struct history {
	char ids[N_EVENTS][UUID_STR_LEN];
	int64_t created[N_EVENTS];
};

static void ingest_event(struct t *t, const char *type, const char *source,
			 const char *source_event_id, int64_t created_at, size_t n_subs,
			 char id[UUID_STR_LEN])
{
	struct store_event_in ev = {
		.event_type = type,
		.source = source,
		.source_event_id = source_event_id,
		.content_type = "application/json",
		.payload = "{}",
		.payload_len = 2,
		.created_at = created_at,
		.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
		.n_subscriptions = n_subs,
	};

	uuid_v7(ev.id);
	assert_int_equal(store_ingest(t->st, &ev, 1), STORE_OK);
	assert_int_equal(ev.duplicate, 0);
	memcpy(id, ev.id, UUID_STR_LEN);
}

/* 20 events, two per millisecond (ties in created_at), of three types and two sources,
 * each with a source_event_id, fanned out to 0, 1 or 2 subscriptions. */
static void make_history(struct t *t, struct history *h)
{
	static const char *const types[] = {"order.paid", "order.created", "user.created"};

	for (int i = 0; i < N_EVENTS; i++) {
		char seid[16];

		snprintf(seid, sizeof(seid), "s-%d", i);
		h->created[i] = t->t0 + (i / 2) * 1000;
		ingest_event(t, types[i % 3], i % 2 ? "crm" : "shop", seid, h->created[i],
			     (size_t)(i % 3), h->ids[i]);
	}
}

/* Walks every page of f; checks each event comes once, newest first; returns how many
 * there were and their ids in order into seen (room for N_EVENTS). */
static size_t walk(struct t *t, struct event_filter f, char (*seen)[UUID_STR_LEN])
{
	char *cursor = NULL;
	size_t total = 0;
	int64_t prev_at = 0;
	char prev_id[UUID_STR_LEN] = "";

	do {
		struct store_event_summary *items = NULL;
		char *next = NULL;
		size_t n = 0;

		f.cursor = cursor;
		assert_int_equal(store_events_list(t->st, &f, &items, &n, &next), STORE_OK);
		assert_true(n <= f.limit);
		if (next)
			assert_int_equal(n, f.limit);
		for (size_t i = 0; i < n; i++) {
			const struct store_event *e = &items[i].event;

			if (total)
				assert_true(e->created_at < prev_at ||
					    (e->created_at == prev_at && strcmp(e->id, prev_id) < 0));
			prev_at = e->created_at;
			memcpy(prev_id, e->id, UUID_STR_LEN);
			assert_true(total < N_EVENTS);
			memcpy(seen[total++], e->id, UUID_STR_LEN);
		}
		store_event_summaries_free(items, n);
		free(cursor);
		cursor = next;
	} while (cursor);
	for (size_t i = 0; i < total; i++)
		for (size_t j = i + 1; j < total; j++)
			assert_string_not_equal(seen[i], seen[j]);
	return total;
}

static size_t count(struct t *t, struct event_filter f)
{
	char seen[N_EVENTS][UUID_STR_LEN];

	f.limit = f.limit ? f.limit : 3;
	return walk(t, f, seen);
}

static void test_newest_first_in_pages(void **state)
{
	struct t *t = *state;
	struct history h;
	char seen[N_EVENTS][UUID_STR_LEN];

	make_history(t, &h);
	for (size_t limit = 1; limit <= 21; limit += 4) {
		struct event_filter f = {.limit = limit};

		assert_int_equal(walk(t, f, seen), N_EVENTS);
		/* the newest (the last two, tied) first */
		assert_true(strcmp(seen[0], h.ids[N_EVENTS - 1]) == 0 ||
			    strcmp(seen[0], h.ids[N_EVENTS - 2]) == 0);
	}
}

static void test_filters(void **state)
{
	struct t *t = *state;
	struct history h;
	struct store_event_summary *items = NULL;
	char *next = NULL;
	size_t n = 0;

	make_history(t, &h);
	/* types cycle paid, created, user.created: 7, 7, 6 of 20 */
	assert_int_equal(count(t, (struct event_filter){.event_type = "order.paid"}), 7);
	assert_int_equal(count(t, (struct event_filter){.event_type = "order.*",
							 .event_type_glob = 1}), 14);
	assert_int_equal(count(t, (struct event_filter){.event_type = "*.created",
							 .event_type_glob = 1}), 13);
	assert_int_equal(count(t, (struct event_filter){.event_type = "order.pai?",
							 .event_type_glob = 1}), 7);
	assert_int_equal(count(t, (struct event_filter){.event_type = "order"}), 0);
	/* a glob's '%' and '_' are no wildcards */
	assert_int_equal(count(t, (struct event_filter){.event_type = "order_%",
							 .event_type_glob = 1}), 0);
	assert_int_equal(count(t, (struct event_filter){.source = "crm"}), 10);
	assert_int_equal(count(t, (struct event_filter){.source = ""}), 0);
	assert_int_equal(count(t, (struct event_filter){.source = "crm",
							 .event_type = "order.paid"}), 3);
	assert_int_equal(count(t, (struct event_filter){.source_event_id = "s-7"}), 1);
	assert_int_equal(count(t, (struct event_filter){.source = "crm",
							 .source_event_id = "s-7"}), 1);
	assert_int_equal(count(t, (struct event_filter){.source = "shop",
							 .source_event_id = "s-7"}), 0);
	assert_int_equal(count(t, (struct event_filter){.id = h.ids[4]}), 1);
	assert_int_equal(count(t, (struct event_filter){.id = h.ids[4], .source = "crm"}), 0);
	/* created_at in [t0 + 2000, t0 + 5000): events 4..9 */
	assert_int_equal(count(t, (struct event_filter){.from_ms = t->t0 + 2000,
							 .to_ms = t->t0 + 5000}), 6);
	assert_int_equal(count(t, (struct event_filter){.from_ms = t->t0 + 9000}), 2);
	assert_int_equal(count(t, (struct event_filter){.to_ms = t->t0}), 0);
	assert_int_equal(count(t, (struct event_filter){.from_ms = t->t0 + 2000,
							 .to_ms = t->t0 + 5000, .source = "shop",
							 .event_type = "order.*",
							 .event_type_glob = 1}), 2);

	/* Everything but the payload comes back as stored. */
	struct event_filter f = {.id = h.ids[7], .limit = 10};
	assert_int_equal(store_events_list(t->st, &f, &items, &n, &next), STORE_OK);
	assert_int_equal(n, 1);
	assert_null(next);
	assert_string_equal(items[0].event.id, h.ids[7]);
	assert_string_equal(items[0].event.event_type, "order.created");
	assert_string_equal(items[0].event.source, "crm");
	assert_string_equal(items[0].event.source_event_id, "s-7");
	assert_null(items[0].event.partition_key);
	assert_null(items[0].event.webhook_id);
	assert_string_equal(items[0].event.content_type, "application/json");
	assert_int_equal(items[0].event.created_at, h.created[7]);
	assert_int_equal(items[0].event.payload_len, 0);
	store_event_summaries_free(items, n);
}

/* Each event's deliveries counted by state: new, processed, retrying, dead. */
static void test_delivery_counts(void **state)
{
	struct t *t = *state;
	struct store_claim *c = NULL;
	struct store_event_summary *items = NULL;
	char none[UUID_STR_LEN], three[UUID_STR_LEN], again[UUID_STR_LEN], *next = NULL;
	size_t n;

	ingest_event(t, "a.none", "", NULL, t->t0, 0, none);
	ingest_event(t, "a.three", "", NULL, t->t0 + 1, 3, three);
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 10, &c);
	assert_int_equal(n, 3);
	/* one processed, one dead, one retrying later */
	record(t, c[0].delivery_id, DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	record(t, c[1].delivery_id, DELIVERY_FAILED, 1, 0, 503, "HTTP 503", NULL);
	record(t, c[2].delivery_id, DELIVERY_FAILED, 1, clock_now_ms() + HOUR_MS, 503,
	       "HTTP 503", NULL);
	store_claims_free(c, n);
	ingest_event(t, "a.three", "", NULL, t->t0 + 2, 2, again);

	struct event_filter f = {.event_type = "a.*", .event_type_glob = 1, .limit = 10};
	assert_int_equal(store_events_list(t->st, &f, &items, &n, &next), STORE_OK);
	assert_int_equal(n, 3);
	/* newest first: the second a.three (2 new), the first (1 of each), a.none (none) */
	assert_string_equal(items[0].event.id, again);
	assert_int_equal(items[0].new_count, 2);
	assert_int_equal(items[0].processed_count + items[0].retrying_count + items[0].dead_count,
			 0);
	assert_string_equal(items[1].event.id, three);
	assert_int_equal(items[1].new_count, 0);
	assert_int_equal(items[1].processed_count, 1);
	assert_int_equal(items[1].retrying_count, 1);
	assert_int_equal(items[1].dead_count, 1);
	assert_string_equal(items[2].event.id, none);
	assert_int_equal(items[2].new_count + items[2].processed_count + items[2].retrying_count +
			 items[2].dead_count, 0);
	store_event_summaries_free(items, n);
}

static void test_bad_cursors_and_limits(void **state)
{
	struct t *t = *state;
	struct history h;
	struct store_event_summary *items = NULL;
	char *next = NULL;
	size_t n = 0;
	static const char *const bad[] = {"", "garbage", "e:", "e:12", "e:x:abc", "e:12:",
		"j:12:0190f000-0000-7000-8000-000000000000",
		"e:12:not a uuid'; DROP TABLE events; --",
		"e:99999999999999999999999:0190f000-0000-7000-8000-000000000000"};

	make_history(t, &h);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct event_filter f = {.limit = 5, .cursor = bad[i]};
		assert_int_equal(store_events_list(t->st, &f, &items, &n, &next), STORE_INVALID);
		assert_null(items);
		assert_null(next);
	}
	struct event_filter f = {.limit = 0};
	assert_int_equal(store_events_list(t->st, &f, &items, &n, &next), STORE_INVALID);
	f.limit = 1001;
	assert_int_equal(store_events_list(t->st, &f, &items, &n, &next), STORE_INVALID);
	/* a cursor past the oldest event: an empty last page */
	f = (struct event_filter){.limit = 5, .cursor = "e:1:0190f000-0000-7000-8000-000000000000"};
	assert_int_equal(store_events_list(t->st, &f, &items, &n, &next), STORE_OK);
	assert_int_equal(n, 0);
	assert_null(next);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_newest_first_in_pages),
		T(test_filters),
		T(test_delivery_counts),
		T(test_bad_cursors_and_limits),
	};

	return store_suite_run(tests, sizeof(tests) / sizeof(tests[0]));
}
