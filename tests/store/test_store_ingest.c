/* test_store_ingest.c: the conformance suite on the ways events come in: ingest (fan-out
 * to deliveries, idempotency by event id, large batches, all or nothing), an event's id
 * upstream and a delivery's scheduled start, the outbox relay from a producer's own
 * insert, and per-key ordering of what a claim may take.
 *
 * Every test runs once per backend (store_suite.h); none knows which. */
#include "store_suite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"

static void test_ingest_fans_out(void **state)
{
	struct t *t = *state;
	static const unsigned char bin[] = {0x00, 0xff, 0x10, 0x00, 0x7f};
	struct store_event_in ev[2] = {
		{
			.event_type = "user.created",
			.source = "crm",
			.source_event_id = "u-1",
			.partition_key = "user-42",
			.content_type = "application/octet-stream",
			.payload = bin,
			.payload_len = sizeof(bin),
			.created_at = t->t0,
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 3,
		},
		{
			.event_type = "nobody.cares",
			.content_type = "application/json",
			.payload = "{}",
			.payload_len = 2,
			.created_at = t->t0 + 1,
		},
	};
	struct store_event got;
	struct store_delivery *d;
	int64_t due = 0;

	uuid_v7(ev[0].id);
	uuid_v7(ev[1].id);
	assert_int_equal(store_ingest(t->st, ev, 2), STORE_OK);
	assert_int_equal(ev[0].duplicate, 0);

	assert_int_equal(store_event_get(t->st, ev[0].id, &got), STORE_OK);
	assert_string_equal(got.id, ev[0].id);
	assert_string_equal(got.event_type, "user.created");
	assert_string_equal(got.source, "crm");
	assert_string_equal(got.source_event_id, "u-1");
	assert_string_equal(got.partition_key, "user-42");
	assert_string_equal(got.content_type, "application/octet-stream");
	assert_int_equal(got.payload_len, sizeof(bin));
	assert_memory_equal(got.payload, bin, sizeof(bin));
	assert_int_equal(got.created_at, t->t0);
	store_event_free(&got);

	d = deliveries_of(t, ev[0].id, 3);
	for (size_t i = 0; i < 3; i++) {
		int matched = 0;

		assert_int_equal(d[i].status, DELIVERY_NEW);
		assert_string_equal(d[i].event_id, ev[0].id);
		assert_string_equal(d[i].event_type, "user.created");
		assert_int_equal(d[i].next_attempt_at, t->t0);
		assert_int_equal(d[i].attempt_count, 0);
		assert_int_equal(d[i].replay, 0);
		assert_null(d[i].lease_owner);
		assert_null(d[i].last_message);
		for (size_t j = 0; j < 3; j++)
			matched += strcmp(d[i].subscription_id, t->subs[j]) == 0;
		assert_int_equal(matched, 1);
	}
	store_deliveries_free(d, 3);

	/* An event nobody subscribes to is stored, with no deliveries; absent optional
	 * fields read back as "" (source) and NULL. */
	assert_int_equal(store_event_get(t->st, ev[1].id, &got), STORE_OK);
	assert_string_equal(got.source, "");
	assert_null(got.source_event_id);
	assert_null(got.partition_key);
	store_event_free(&got);
	d = deliveries_of(t, ev[1].id, 0);
	assert_null(d);

	assert_int_equal(store_next_due(t->st, &due), STORE_OK);
	assert_int_equal(due, t->t0);
	assert_int_equal(store_event_get(t->st, "no-such-event", &got), STORE_NOT_FOUND);
	assert_int_equal(store_ping(t->st), STORE_OK);
}

static void test_ingest_is_idempotent(void **state)
{
	struct t *t = *state;
	struct store_event_in a = {
		.event_type = "order.paid", .source = "shop", .source_event_id = "o-1",
		.content_type = "application/json", .payload = "{}", .payload_len = 2,
		.created_at = t->t0,
		.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs, .n_subscriptions = 2,
	};
	struct store_event_in b = a;
	struct store_event_in batch[4];
	struct store_delivery *d;
	char first[UUID_STR_LEN];

	uuid_v7(a.id);
	assert_int_equal(store_ingest(t->st, &a, 1), STORE_OK);
	assert_int_equal(a.duplicate, 0);
	memcpy(first, a.id, UUID_STR_LEN);

	/* The same key again: the first id comes back, nothing new is stored. */
	uuid_v7(b.id);
	assert_int_equal(store_ingest(t->st, &b, 1), STORE_OK);
	assert_int_equal(b.duplicate, 1);
	assert_string_equal(b.id, first);
	d = deliveries_of(t, first, 2);
	store_deliveries_free(d, 2);

	/* Within one batch: the second o-2 is a duplicate of the first. The same
	 * source_event_id under another source is a different event. */
	for (int i = 0; i < 4; i++) {
		batch[i] = a;
		uuid_v7(batch[i].id);
	}
	batch[0].source_event_id = "o-2";
	batch[1].source_event_id = "o-2";
	batch[2].source = "warehouse";
	batch[3].source_event_id = NULL;
	assert_int_equal(store_ingest(t->st, batch, 4), STORE_OK);
	assert_int_equal(batch[0].duplicate, 0);
	assert_int_equal(batch[1].duplicate, 1);
	assert_string_equal(batch[1].id, batch[0].id);
	assert_int_equal(batch[2].duplicate, 0);
	assert_string_not_equal(batch[2].id, first);
	assert_int_equal(batch[3].duplicate, 0);
	d = deliveries_of(t, batch[0].id, 2);
	store_deliveries_free(d, 2);

	/* Without a source_event_id there is no key: both are stored. */
	batch[3].duplicate = 0;
	uuid_v7(batch[3].id);
	assert_int_equal(store_ingest(t->st, &batch[3], 1), STORE_OK);
	assert_int_equal(batch[3].duplicate, 0);
}

/* A large batch (ingest groups rows): keyed events mixed with plain ones, a key
 * repeated within the batch, every event with its deliveries and its own payload. */
static void test_ingest_many(void **state)
{
	struct t *t = *state;
	enum { N = 150 };
	struct store_event_in ev[N];
	char payloads[N][32], keys[N][16];
	struct store_claim *c = NULL;
	size_t stored = 0, n;

	memset(ev, 0, sizeof(ev));
	for (int i = 0; i < N; i++) {
		snprintf(payloads[i], sizeof(payloads[i]), "{\"i\":%d}", i);
		ev[i].event_type = i % 7 ? "many.a" : "many.b";
		ev[i].source = "";
		ev[i].content_type = "application/json";
		ev[i].payload = payloads[i];
		ev[i].payload_len = strlen(payloads[i]);
		ev[i].created_at = t->t0 + i;
		ev[i].subscription_ids = (const char (*)[UUID_STR_LEN])t->subs;
		ev[i].n_subscriptions = 1 + i % 3;
		if (i % 10 == 0) { /* keys k-0, k-0, k-1, k-1, ...: every second one repeats */
			snprintf(keys[i], sizeof(keys[i]), "k-%d", i / 20);
			ev[i].source_event_id = keys[i];
		}
		uuid_v7(ev[i].id);
	}
	assert_int_equal(store_ingest(t->st, ev, N), STORE_OK);

	for (int i = 0; i < N; i++) {
		int dup = i % 20 == 10;
		assert_int_equal(ev[i].duplicate, dup);
		if (dup) {
			assert_string_equal(ev[i].id, ev[i - 10].id);
			continue;
		}
		struct store_delivery *d = deliveries_of(t, ev[i].id, ev[i].n_subscriptions);
		for (size_t k = 0; k < ev[i].n_subscriptions; k++) {
			assert_int_equal(d[k].status, DELIVERY_NEW);
			assert_int_equal(d[k].created_at, t->t0 + i);
			assert_string_equal(d[k].event_type, ev[i].event_type);
		}
		store_deliveries_free(d, ev[i].n_subscriptions);
		stored += ev[i].n_subscriptions;
	}
	/* All of them due, each with its own event's payload. */
	n = claim_n(t, clock_now_ms(), MINUTE_MS, 1000, &c);
	assert_int_equal(n, stored);
	for (size_t k = 0; k < n; k++) {
		int i = -1;
		assert_int_equal(sscanf((const char *)c[k].payload, "{\"i\":%d}", &i), 1);
		assert_true(i >= 0 && i < N);
		assert_string_equal(c[k].event_id, ev[i].id);
		assert_int_equal(c[k].payload_len, strlen(payloads[i]));
	}
	store_claims_free(c, n);
}

static void test_ingest_is_atomic(void **state)
{
	struct t *t = *state;
	struct store_event_in ev[2] = {
		{
			.event_type = "a", .content_type = "application/json",
			.payload = "1", .payload_len = 1, .created_at = t->t0,
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 1,
		},
	};
	struct store_event got;
	int64_t due = -1;

	/* The second event reuses the first one's id: the batch must fail as a whole. */
	uuid_v7(ev[0].id);
	ev[1] = ev[0];
	assert_int_not_equal(store_ingest(t->st, ev, 2), STORE_OK);
	assert_int_equal(store_event_get(t->st, ev[0].id, &got), STORE_NOT_FOUND);
	assert_int_equal(store_next_due(t->st, &due), STORE_OK);
	assert_int_equal(due, 0);

	/* And the store keeps working afterwards. */
	assert_int_equal(store_ingest(t->st, ev, 1), STORE_OK);
	assert_int_equal(store_event_get(t->st, ev[0].id, &got), STORE_OK);
	store_event_free(&got);

	/* Bad arguments never reach the backend. */
	ev[1].event_type = NULL;
	assert_int_equal(store_ingest(t->st, &ev[1], 1), STORE_INVALID);

	/* The same inside a batch written many rows to a statement: the clash is in the
	 * middle of the second group, after rows of its own statement went in. */
	enum { N = 70 };
	struct store_event_in many[N];
	for (int i = 0; i < N; i++) {
		many[i] = ev[0];
		many[i].event_type = "a";
		many[i].created_at = t->t0 + i;
		uuid_v7(many[i].id);
	}
	memcpy(many[40].id, many[35].id, UUID_STR_LEN);
	assert_int_not_equal(store_ingest(t->st, many, N), STORE_OK);
	for (int i = 0; i < N; i++)
		assert_int_equal(store_event_get(t->st, many[i].id, &got), STORE_NOT_FOUND);
	struct store_claim *c = NULL;
	size_t n = claim_n(t, clock_now_ms(), MINUTE_MS, 1000, &c);
	assert_int_equal(n, 1); /* only the event stored above */
	store_claims_free(c, n);
}

/* An event's id upstream (webhook_id) and a delivery whose first round is scheduled
 * (starts_scheduled): stored, read back, and carried in claims and hand-off claims; an
 * event without them reads NULL and 0. */
static void test_event_identity_and_scheduled_start(void **state)
{
	struct t *t = *state;
	int64_t now = clock_now_ms();
	struct store_event_in ev[3] = {
		{ /* a dead-letter topic's message: NEW, first tried by the scheduled layer */
			.event_type = "user.created", .source = "kafka:users.dlt",
			.source_event_id = "up-1/sub-a", .webhook_id = "up-1",
			.content_type = "application/json", .payload = "{}", .payload_len = 2,
			.created_at = now - 10, .first_due_at = now - 5, .starts_scheduled = 1,
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 1,
		},
		{ /* an envelope's event with no key of its own and no other state */
			.event_type = "user.created", .source = "kafka:users",
			.webhook_id = "up-2", .content_type = "application/json", .payload = "{}",
			.payload_len = 2, .created_at = now - 10,
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 1,
		},
		{
			.event_type = "user.created", .content_type = "application/json",
			.payload = "{}", .payload_len = 2, .created_at = now - 10,
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 1,
		},
	};
	struct store_claim *c = NULL, handed;
	struct store_event got;
	size_t n;

	for (int i = 0; i < 3; i++)
		uuid_v7(ev[i].id);
	assert_int_equal(store_ingest(t->st, ev, 3), STORE_OK);
	struct store_delivery *d = deliveries_of(t, ev[0].id, 1);
	assert_int_equal(d[0].status, DELIVERY_NEW);
	assert_int_equal(d[0].next_attempt_at, now - 5);
	store_deliveries_free(d, 1);

	n = claim_n(t, now, MINUTE_MS, 10, &c);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++) {
		int k = strcmp(c[i].event_id, ev[0].id) == 0 ? 0
			: strcmp(c[i].event_id, ev[1].id) == 0 ? 1 : 2;
		assert_int_equal(c[i].status, DELIVERY_NEW);
		assert_int_equal(c[i].starts_scheduled, k == 0);
		if (k == 2) {
			assert_null(c[i].webhook_id);
			assert_string_equal(store_claim_webhook_id(&c[i]), ev[2].id);
		} else {
			assert_string_equal(c[i].webhook_id, k == 0 ? "up-1" : "up-2");
			assert_string_equal(store_claim_webhook_id(&c[i]), c[i].webhook_id);
		}
		assert_memory_equal(c[i].payload, "{}", 2);
	}
	store_claims_free(c, n);

	assert_int_equal(store_event_get(t->st, ev[0].id, &got), STORE_OK);
	assert_string_equal(got.webhook_id, "up-1");
	assert_string_equal(got.source_event_id, "up-1/sub-a");
	store_event_free(&got);
	assert_int_equal(store_event_get(t->st, ev[2].id, &got), STORE_OK);
	assert_null(got.webhook_id);
	store_event_free(&got);

	/* the hand-off builds its claim from the event in memory, alike */
	char did[1][UUID_STR_LEN] = {"0190a0b0-0000-7000-8000-00000000d001"};
	ev[1].delivery_ids = did;
	assert_int_equal(store_claim_of_event(&ev[1], 0, &handed), 0);
	assert_string_equal(handed.webhook_id, "up-2");
	assert_int_equal(handed.starts_scheduled, 0);
	free(handed.event_type); /* the start of the claim's one allocation */
}

/* The Kafka message an event came as (envelope) is kept byte for byte, every byte value
 * and an empty one included, and read back with the event (its trace context too); an
 * event without one reads NULL, and the event search never carries it. */
static void test_event_envelope(void **state)
{
	struct t *t = *state;
	static const unsigned char env[] = {0x00, 0x00, 0x00, 0x00, 0x2a, 0x00, 0x0a, 0x03,
					    0x12, 0x01, 0x74, 0xff, 0x00};
	const char *tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
	struct store_event_in ev[4] = {
		{ /* an envelope's event: keyed, with an id upstream */
			.event_type = "user.created", .source = "kafka:users",
			.source_event_id = "up-1", .webhook_id = "up-1", .traceparent = tp,
			.content_type = "application/json", .payload = "{}", .payload_len = 2,
			.envelope = env, .envelope_len = sizeof(env), .created_at = t->t0,
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 1,
		},
		{ /* an undecodable message: dead at once, its raw bytes an empty message */
			.event_type = "kafka.undecodable", .source = "kafka:users",
			.source_event_id = "0/7", .content_type = "application/octet-stream",
			.payload = "", .payload_len = 0, .envelope = "", .envelope_len = 0,
			.created_at = t->t0, .initial_status = DELIVERY_FAILED, .initial_code = 422,
			.initial_message = "undecodable", .initial_cause = "empty message",
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 1,
		},
		{ /* no key of its own: the way of events without one */
			.event_type = "user.created", .content_type = "application/json",
			.payload = "{}", .payload_len = 2, .envelope = env, .envelope_len = 3,
			.created_at = t->t0,
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 1,
		},
		{
			.event_type = "user.created", .content_type = "application/json",
			.payload = "{}", .payload_len = 2, .created_at = t->t0,
			.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
			.n_subscriptions = 1,
		},
	};
	struct store_event got;

	for (int i = 0; i < 4; i++)
		uuid_v7(ev[i].id);
	assert_int_equal(store_ingest(t->st, ev, 4), STORE_OK);

	assert_int_equal(store_event_get(t->st, ev[0].id, &got), STORE_OK);
	assert_non_null(got.envelope);
	assert_int_equal(got.envelope_len, sizeof(env));
	assert_memory_equal(got.envelope, env, sizeof(env));
	assert_string_equal(got.traceparent, tp);
	assert_memory_equal(got.payload, "{}", 2);
	store_event_free(&got);
	assert_null(got.envelope);

	assert_int_equal(store_event_get(t->st, ev[1].id, &got), STORE_OK);
	assert_non_null(got.envelope);
	assert_int_equal(got.envelope_len, 0);
	store_event_free(&got);

	assert_int_equal(store_event_get(t->st, ev[2].id, &got), STORE_OK);
	assert_int_equal(got.envelope_len, 3);
	assert_memory_equal(got.envelope, env, 3);
	assert_string_equal(got.traceparent, "");
	store_event_free(&got);

	assert_int_equal(store_event_get(t->st, ev[3].id, &got), STORE_OK);
	assert_null(got.envelope);
	assert_int_equal(got.envelope_len, 0);
	store_event_free(&got);

	/* the search lists events without their payload and without their envelope */
	struct event_filter f = {.limit = 10};
	struct store_event_summary *items = NULL;
	size_t n = 0;
	char *next = NULL;
	assert_int_equal(store_events_list(t->st, &f, &items, &n, &next), STORE_OK);
	assert_int_equal(n, 4);
	for (size_t i = 0; i < n; i++) {
		assert_null(items[i].event.envelope);
		assert_string_equal(items[i].event.traceparent, "");
	}
	store_event_summaries_free(items, n);
	free(next);
}

/* ---- outbox relay ------------------------------------------------------------------- */

struct fanout {
	const char (*subs)[UUID_STR_LEN];
	int calls;
};

/* order.* goes to two subscriptions, everything else to none. */
static void fanout_cb(void *ctx, const struct store_event_in *ev,
		      const char (**ids)[UUID_STR_LEN], size_t *n)
{
	struct fanout *fo = ctx;

	fo->calls++;
	if (strncmp(ev->event_type, "order.", 6) == 0) {
		*ids = fo->subs;
		*n = 2;
	} else {
		*ids = NULL;
		*n = 0;
	}
}

/* The one delivery of the listing filtered by event type. */
static void find_by_type(struct t *t, const char *type, size_t expect,
			 struct store_delivery **items)
{
	struct delivery_filter f = {.event_type = type, .limit = 100};
	char *cursor = NULL;
	size_t n = 0;

	assert_int_equal(store_deliveries_list(t->st, &f, items, &n, &cursor), STORE_OK);
	assert_int_equal(n, expect);
	assert_null(cursor);
}

static void test_relay_outbox(void **state)
{
	struct t *t = *state;
	struct fanout fo = {(const char (*)[UUID_STR_LEN])t->subs, 0};
	static const unsigned char bin[] = {0x01, 0x00, 0x02};
	struct store_delivery *items = NULL;
	struct store_event got;
	size_t relayed = 0;

	assert_int_equal(backend->producer_insert(&t->db, "order.created", NULL, NULL,
						  "{\"order\":1}", 11, 1), 0);
	assert_int_equal(backend->producer_insert(&t->db, "order.paid", NULL, NULL, bin,
						  sizeof(bin), 0), 0);
	assert_int_equal(backend->producer_insert(&t->db, "audit.logged", NULL, NULL, "{}", 2,
						  1), 0);
	assert_int_equal(backend->producer_insert(&t->db, "order.created", "shop", "o-9",
						  "{\"order\":9}", 11, 1), 0);
	assert_int_equal(backend->producer_insert(&t->db, "order.created", "shop", "o-9",
						  "{\"order\":9}", 11, 1), 0);

	/* The limit bounds one transaction; the rest waits for the next call. */
	assert_int_equal(store_relay_outbox(t->st, 2, fanout_cb, &fo, &relayed), STORE_OK);
	assert_int_equal(relayed, 2);
	assert_int_equal(store_relay_outbox(t->st, 100, fanout_cb, &fo, &relayed), STORE_OK);
	assert_int_equal(relayed, 3);
	assert_int_equal(store_relay_outbox(t->st, 100, fanout_cb, &fo, &relayed), STORE_OK);
	assert_int_equal(relayed, 0);
	assert_int_equal(fo.calls, 5);

	/* Two order.created events (the o-9 duplicate dropped), two deliveries each. */
	find_by_type(t, "order.created", 4, &items);
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(items[i].status, DELIVERY_NEW);
		assert_true(items[i].next_attempt_at > 0);
	}
	assert_int_equal(store_event_get(t->st, items[0].event_id, &got), STORE_OK);
	assert_true(uuid_valid(got.id));
	assert_string_equal(got.content_type, "application/json");
	assert_string_equal(got.source, "");
	assert_true(got.created_at > 0);
	assert_int_equal(got.payload_len, 11);
	assert_memory_equal(got.payload, "{\"order\":1}", 11);
	store_event_free(&got);
	store_deliveries_free(items, 4);

	/* A binary payload comes through byte for byte. */
	find_by_type(t, "order.paid", 2, &items);
	assert_int_equal(store_event_get(t->st, items[0].event_id, &got), STORE_OK);
	assert_int_equal(got.payload_len, sizeof(bin));
	assert_memory_equal(got.payload, bin, sizeof(bin));
	store_event_free(&got);
	store_deliveries_free(items, 2);

	find_by_type(t, "audit.logged", 0, &items);
}

/* ---- the event types ------------------------------------------------------------------- */

/* The stored events' types in byte order, each with its newest event's time, in pages
 * that follow each other by cursor; a foreign cursor refused. */
static void test_event_types(void **state)
{
	struct t *t = *state;
	static const struct {
		const char *type;
		int64_t at;
	} evs[] = {{"b.two", 1000}, {"a.one", 2000}, {"b.two", 3000}, {"c.three", 500},
		   {"B.upper", 700}, {"b.two", 2500}};
	for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++) {
		struct store_event_in ev = {.event_type = evs[i].type, .source = "",
					    .content_type = "application/json", .payload = "{}",
					    .payload_len = 2, .created_at = evs[i].at};
		uuid_v7(ev.id);
		assert_int_equal(store_ingest(t->st, &ev, 1), STORE_OK);
	}
	struct store_event_type *items = NULL;
	size_t n = 0;
	char *next = NULL;
	assert_int_equal(store_event_types(t->st, NULL, 2, &items, &n, &next), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(items[0].event_type, "B.upper"); /* bytes: upper case first */
	assert_int_equal(items[0].last_seen, 700);
	assert_string_equal(items[1].event_type, "a.one");
	assert_int_equal(items[1].last_seen, 2000);
	assert_non_null(next);
	store_event_types_free(items, n);
	char *cursor = next;
	assert_int_equal(store_event_types(t->st, cursor, 2, &items, &n, &next), STORE_OK);
	free(cursor);
	assert_int_equal(n, 2);
	assert_string_equal(items[0].event_type, "b.two");
	assert_int_equal(items[0].last_seen, 3000);
	assert_string_equal(items[1].event_type, "c.three");
	assert_int_equal(items[1].last_seen, 500);
	assert_null(next); /* exactly a page's worth left */
	store_event_types_free(items, n);

	assert_int_equal(store_event_types(t->st, NULL, 1000, &items, &n, &next), STORE_OK);
	assert_int_equal(n, 4);
	assert_null(next);
	store_event_types_free(items, n);
	assert_int_equal(store_event_types(t->st, "e:1:x", 10, &items, &n, &next), STORE_INVALID);
	assert_int_equal(store_event_types(t->st, NULL, 0, &items, &n, &next), STORE_INVALID);
}

/* ---- per-key ordering ------------------------------------------------------------------ */

/* Ingests one event with partition_key key (NULL: none) for the three test subscriptions. */
static void ingest_keyed(struct t *t, const char *key, int64_t created_at, char id[UUID_STR_LEN])
{
	struct store_event_in ev = {
		.event_type = "keyed",
		.source = "",
		.partition_key = key,
		.content_type = "application/json",
		.payload = "{}",
		.payload_len = 2,
		.created_at = created_at,
		.subscription_ids = (const char (*)[UUID_STR_LEN])t->subs,
		.n_subscriptions = 3,
	};

	uuid_v7(ev.id);
	assert_int_equal(store_ingest(t->st, &ev, 1), STORE_OK);
	memcpy(id, ev.id, UUID_STR_LEN);
}

/* The id of event ev's delivery to test subscription k. */
static void delivery_of(struct t *t, const char *ev, int k, char out[UUID_STR_LEN])
{
	struct store_delivery *d = deliveries_of(t, ev, 3);
	out[0] = '\0';
	for (size_t i = 0; i < 3; i++)
		if (strcmp(d[i].subscription_id, t->subs[k]) == 0)
			memcpy(out, d[i].id, UUID_STR_LEN);
	store_deliveries_free(d, 3);
	assert_true(out[0] != '\0');
}

/* Claims everything due and checks it is exactly the deliveries in want (n of them). */
static void claim_exactly(struct t *t, const char (*want)[UUID_STR_LEN], size_t n)
{
	struct store_claim *c = NULL;
	size_t got = claim_n(t, clock_now_ms(), MINUTE_MS, 100, &c);
	for (size_t i = 0; i < got; i++) {
		int found = 0;
		for (size_t k = 0; k < n; k++)
			found |= strcmp(c[i].delivery_id, want[k]) == 0;
		if (!found)
			fprintf(stderr, "claimed %s, not expected\n", c[i].delivery_id);
		assert_true(found);
	}
	assert_int_equal(got, n);
	store_claims_free(c, got);
}

/* Subscription 0 orders by key and blocks on a dead delivery, 1 orders and passes dead
 * ones over, 2 does not order: what each may claim, a dead head, parking, replay. */
static void test_key_ordering(void **state)
{
	struct t *t = *state;
	static const int modes[3] = {ORDERING_KEY_BLOCK, ORDERING_KEY_SKIP, ORDERING_NONE};
	static const char *const keys[5] = {"k1", "k1", "k2", NULL, "k1"};
	char ev[5][UUID_STR_LEN], d[3][5][UUID_STR_LEN], want[16][UUID_STR_LEN];
	size_t n = 0, parked = 0, unparked = 0, replayed = 0;
	enum store_replay_outcome out;

	for (int k = 0; k < 3; k++) {
		char name[16];
		snprintf(name, sizeof(name), "ordered-%d", k);
		struct sub_row row = {.name = name, .config = "{}", .enabled = 1,
				      .ordering = modes[k]};
		memcpy(row.id, t->subs[k], UUID_STR_LEN);
		assert_int_equal(store_sub_create(t->st, &row), STORE_OK);
	}
	for (int i = 0; i < 5; i++)
		ingest_keyed(t, keys[i], t->t0 + i, ev[i]);
	for (int k = 0; k < 3; k++)
		for (int i = 0; i < 5; i++)
			delivery_of(t, ev[i], k, d[k][i]);

	/* ordered: the first of each key and the keyless one; unordered: all */
	int first[] = {0, 2, 3};
	for (int k = 0; k < 2; k++)
		for (int j = 0; j < 3; j++)
			memcpy(want[n++], d[k][first[j]], UUID_STR_LEN);
	for (int i = 0; i < 5; i++)
		memcpy(want[n++], d[2][i], UUID_STR_LEN);
	claim_exactly(t, (const char (*)[UUID_STR_LEN])want, n);

	/* the sweep parks what waits its turn (not shown as blocked: nothing is dead) */
	assert_int_equal(store_order_sweep(t->st, clock_now_ms(), 0, &parked, &unparked),
			 STORE_OK);
	struct store_delivery got = get_delivery(t, d[1][1]);
	assert_int_equal(got.next_attempt_at, 0);
	assert_int_equal(got.blocked, 0);
	store_delivery_free(&got);

	/* the k1 heads die (the skipping subscription's result lets its next one go); the
	 * rest succeeds */
	for (int k = 0; k < 2; k++) {
		record_as(t, d[k][0], DELIVERY_FAILED, 1, 0, 500, "Internal Server Error", NULL,
			  k == 1);
		record(t, d[k][2], DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
		record(t, d[k][3], DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	}
	for (int i = 0; i < 5; i++)
		record(t, d[2][i], DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);

	/* blocking: nothing more of k1; skipping: the next k1, then the one after */
	claim_exactly(t, &d[1][1], 1);
	record_as(t, d[1][1], DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL, 1);
	claim_exactly(t, &d[1][4], 1);
	record(t, d[1][4], DELIVERY_PROCESSED, 1, 0, 0, NULL, NULL);
	claim_exactly(t, NULL, 0);

	/* the sweep parks what waits behind the dead head, and only that */
	assert_int_equal(store_order_sweep(t->st, clock_now_ms(), 1, &parked, &unparked),
			 STORE_OK);
	assert_int_equal(parked, 2);
	assert_int_equal(unparked, 0);
	got = get_delivery(t, d[0][1]);
	assert_int_equal(got.blocked, 1);
	assert_int_equal(got.status, DELIVERY_NEW);
	assert_int_equal(got.next_attempt_at, 0);
	store_delivery_free(&got);
	assert_int_equal(store_order_sweep(t->st, clock_now_ms(), 1, &parked, &unparked),
			 STORE_OK);
	assert_int_equal(parked + unparked, 0);

	/* replaying the head wakes them, but they still wait for it */
	assert_int_equal(store_replay(t->st, &d[0][0], 1, 0, &out, &replayed), STORE_OK);
	assert_int_equal(replayed, 1);
	assert_int_equal(store_order_sweep(t->st, clock_now_ms(), 1, &parked, &unparked),
			 STORE_OK);
	assert_int_equal(unparked, 2);
	got = get_delivery(t, d[0][4]);
	assert_int_equal(got.blocked, 0);
	assert_true(got.next_attempt_at > 0);
	store_delivery_free(&got);
	for (int i = 0; i < 5; i++) {
		if (i == 2 || i == 3)
			continue;
		claim_exactly(t, &d[0][i], 1);
		record(t, d[0][i], DELIVERY_PROCESSED, 2, 0, 0, NULL, NULL);
	}
	claim_exactly(t, NULL, 0);

	/* turning ordering off frees a blocked key at the next sweep, also when no
	 * subscription keeps order any more (the parking sweeps then do not run) */
	char late[2][UUID_STR_LEN], ld[2][UUID_STR_LEN];
	ingest_keyed(t, "k3", clock_now_ms() - 10, late[0]);
	ingest_keyed(t, "k3", clock_now_ms() - 5, late[1]);
	delivery_of(t, late[0], 0, ld[0]);
	delivery_of(t, late[1], 0, ld[1]);
	struct store_claim *c = NULL;
	size_t got_n = claim_n(t, clock_now_ms(), MINUTE_MS, 100, &c);
	for (size_t i = 0; i < got_n; i++)
		record(t, c[i].delivery_id,
		       strcmp(c[i].delivery_id, ld[0]) == 0 ? DELIVERY_FAILED : DELIVERY_PROCESSED,
		       1, 0, strcmp(c[i].delivery_id, ld[0]) == 0 ? 500 : 0, "x", NULL);
	store_claims_free(c, got_n);
	assert_int_equal(store_order_sweep(t->st, clock_now_ms(), 1, &parked, &unparked),
			 STORE_OK);
	assert_int_equal(parked, 1);
	for (int k = 0; k < 2; k++) {
		char name[16];
		snprintf(name, sizeof(name), "ordered-%d", k);
		struct sub_row row = {.name = name, .config = "{}", .enabled = 1,
				      .ordering = ORDERING_NONE};
		memcpy(row.id, t->subs[k], UUID_STR_LEN);
		assert_int_equal(store_sub_update(t->st, &row), STORE_OK);
	}
	assert_int_equal(store_order_sweep(t->st, clock_now_ms(), 1, &parked, &unparked),
			 STORE_OK);
	assert_int_equal(unparked, 1);
	/* ld[1] is due (with the k3 deliveries of the other subscriptions) */
	got_n = claim_n(t, clock_now_ms(), MINUTE_MS, 100, &c);
	int freed = 0;
	for (size_t i = 0; i < got_n; i++)
		freed |= strcmp(c[i].delivery_id, ld[1]) == 0;
	store_claims_free(c, got_n);
	assert_true(freed);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_ingest_fans_out),
		T(test_ingest_is_idempotent),
		T(test_ingest_many),
		T(test_ingest_is_atomic),
		T(test_event_identity_and_scheduled_start),
		T(test_event_envelope),
		T(test_relay_outbox),
		T(test_event_types),
		T(test_key_ordering),
	};

	return store_suite_run(tests, sizeof(tests) / sizeof(tests[0]));
}
