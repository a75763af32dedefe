/* test_store_upgrade.c: a store written by an older outboxd, opened by this one.
 *
 * Migrations change tables under deliveries that are waiting: an upgrade must keep every
 * one of them where it was (due, leased by an instance that is gone, waiting for a later
 * retry, dead, parked behind a dead one of its key, delivered) with its history, and the
 * store must go on from there. The fixture builds the older schema from the backend's own
 * migrations and writes rows as that version wrote them; store_open migrates the rest.
 * PostgreSQL only: its migration 20 moved every unfinished delivery into a table of its
 * own (the queue); SQLite's schema has no such step to check. */
#include "store_suite.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"

#define EVENT_ID "0190f000-0000-7000-8000-0000000000e1"
#define SUB_ID "0190f000-0000-7000-8000-0000000000a1"
#define D_DONE "0190f000-0000-7000-8000-0000000000d1"
#define D_DUE "0190f000-0000-7000-8000-0000000000d2"
#define D_LATER "0190f000-0000-7000-8000-0000000000d3"
#define D_DEAD "0190f000-0000-7000-8000-0000000000d4"
#define D_LEASED "0190f000-0000-7000-8000-0000000000d5"
#define D_PARKED "0190f000-0000-7000-8000-0000000000d6"

/* The last schema before the queue (PostgreSQL migration 20). */
#define BEFORE_QUEUE 19

/* One event and a delivery in each state, with their attempts, as migration 19's
 * outboxd wrote them (every column the deliveries had then). */
static char *rows_before_queue(int64_t now, int64_t t0)
{
	static const char fmt[] =
		"INSERT INTO outboxd.events(id, event_type, content_type, payload, created_at)"
		" VALUES ('" EVENT_ID "', 'order.created', 'application/json',"
		" convert_to('{\"n\":1}', 'UTF8'), %1$lld);"
		"INSERT INTO outboxd.deliveries(id, event_id, subscription_id, event_type,"
		" status, attempt_count, next_attempt_at, last_code, last_message, lease_owner,"
		" lease_until, created_at, updated_at, processed_at, order_key, blocked,"
		" failing_since) VALUES"
		" ('" D_DONE "', '" EVENT_ID "', '" SUB_ID "', 'order.created', 'PROCESSED', 1,"
		"  NULL, 200, 'OK', NULL, NULL, %1$lld, %1$lld, %1$lld, NULL, 0, NULL),"
		" ('" D_DUE "', '" EVENT_ID "', '" SUB_ID "', 'order.created', 'NEW', 0,"
		"  %1$lld, NULL, NULL, NULL, NULL, %1$lld, %1$lld, NULL, NULL, 0, NULL),"
		" ('" D_LATER "', '" EVENT_ID "', '" SUB_ID "', 'order.created', 'FAILED', 1,"
		"  %2$lld, 503, 'HTTP 503', NULL, NULL, %1$lld, %1$lld, NULL, NULL, 0, %1$lld),"
		" ('" D_DEAD "', '" EVENT_ID "', '" SUB_ID "', 'order.created', 'FAILED', 3,"
		"  NULL, 500, 'HTTP 500', NULL, NULL, %1$lld, %1$lld, NULL, 'k1', 0, %1$lld),"
		" ('" D_LEASED "', '" EVENT_ID "', '" SUB_ID "', 'order.created', 'NEW', 0,"
		"  %1$lld, NULL, NULL, 'gone-instance', %3$lld, %1$lld, %1$lld, NULL, NULL, 0,"
		"  NULL),"
		" ('" D_PARKED "', '" EVENT_ID "', '" SUB_ID "', 'order.created', 'NEW', 0,"
		"  NULL, NULL, NULL, NULL, NULL, %1$lld, %1$lld, NULL, 'k1', 1, NULL);"
		"INSERT INTO outboxd.attempts(delivery_id, n, kind, started_at, duration_ms, code,"
		" message, instance) VALUES"
		" ('" D_DONE "', 1, 'immediate', %1$lld, 12, 200, 'OK', 'gone-instance'),"
		" ('" D_LATER "', 1, 'immediate', %1$lld, 12, 503, 'HTTP 503', 'gone-instance'),"
		" ('" D_DEAD "', 1, 'immediate', %1$lld, 12, 500, 'HTTP 500', 'gone-instance'),"
		" ('" D_DEAD "', 2, 'scheduled', %1$lld, 12, 500, 'HTTP 500', 'gone-instance'),"
		" ('" D_DEAD "', 3, 'scheduled', %1$lld, 12, 500, 'HTTP 500', 'gone-instance')";
	char *sql = NULL;

	if (asprintf(&sql, fmt, (long long)t0, (long long)(now + HOUR_MS),
		     (long long)(now - 1000)) < 0)
		return NULL;
	return sql;
}

static void assert_status(struct t *t, const char *id, enum delivery_status status,
			  int attempt_count)
{
	struct store_delivery d = get_delivery(t, id);

	assert_int_equal(d.status, status);
	assert_int_equal(d.attempt_count, attempt_count);
	store_delivery_free(&d);
}

static void test_upgrade_keeps_every_delivery(void **state)
{
	struct t *t = *state;
	struct store_stats s = {0};
	struct store_claim *c = NULL;
	struct store_attempt_row *a = NULL;
	struct store_delivery *dead = NULL;
	struct delivery_filter f = {.has_status = 1, .status = DELIVERY_FAILED, .dead_only = 1,
				    .limit = 10};
	int64_t now = clock_now_ms();
	size_t n, reaped;
	char *next = NULL, err[512];

	if (!backend->older_schema)
		skip(); /* no older rows to write for this backend's last migrations */
	store_close(t->st);
	t->st = NULL;
	char *sql = rows_before_queue(now, t->t0);
	assert_non_null(sql);
	assert_int_equal(backend->older_schema(&t->db, BEFORE_QUEUE, sql), 0);
	free(sql);
	assert_int_equal(store_open(t->db.dsn, "test-owner", &t->st, err, sizeof(err)),
			 STORE_OK);

	/* every delivery where it was */
	assert_int_equal(store_stats(t->st, now, HOUR_MS, &s), STORE_OK);
	assert_int_equal(s.new_count, 3);
	assert_int_equal(s.processed_count, 1);
	assert_int_equal(s.retrying_count, 1);
	assert_int_equal(s.dead_count, 1);
	assert_int_equal(s.in_flight, 1);
	assert_int_equal(s.due_count, 1);
	assert_int_equal(s.blocked_count, 1);
	assert_int_equal(s.oldest_dead_at, t->t0);
	store_stats_free(&s);
	assert_status(t, D_DONE, DELIVERY_PROCESSED, 1);
	assert_status(t, D_DEAD, DELIVERY_FAILED, 3);

	/* the dead one in the dead-letter queue, with its history */
	assert_int_equal(store_deliveries_list(t->st, &f, &dead, &n, &next), STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(dead[0].id, D_DEAD);
	store_deliveries_free(dead, n);
	free(next);
	assert_int_equal(store_delivery_attempts(t->st, D_DEAD, &a, &n), STORE_OK);
	assert_int_equal(n, 3);
	store_attempts_free(a, n);

	/* the gone instance's lease is reaped; it and the due one are claimed, nothing else */
	assert_int_equal(store_reap_leases(t->st, now, &reaped), STORE_OK);
	assert_int_equal(reaped, 1);
	n = claim_n(t, now, MINUTE_MS, 10, &c);
	assert_int_equal(n, 2);
	const char *want[2] = {D_DUE, D_LEASED};
	for (size_t i = 0; i < 2; i++) {
		assert_true(!strcmp(c[0].delivery_id, want[i]) ||
			    !strcmp(c[1].delivery_id, want[i]));
		record(t, want[i], DELIVERY_PROCESSED, 1, 0, 200, "OK", NULL);
	}
	store_claims_free(c, n);
	assert_status(t, D_DUE, DELIVERY_PROCESSED, 1);
	assert_status(t, D_LEASED, DELIVERY_PROCESSED, 1);

	/* the later retry when it is due, with its first attempt kept */
	c = NULL;
	n = claim_n(t, now + 2 * HOUR_MS, MINUTE_MS, 10, &c);
	assert_int_equal(n, 1);
	assert_string_equal(c[0].delivery_id, D_LATER);
	assert_int_equal(c[0].attempt_count, 1);
	record(t, D_LATER, DELIVERY_PROCESSED, 2, 0, 200, "OK", NULL);
	store_claims_free(c, n);
	assert_int_equal(store_delivery_attempts(t->st, D_LATER, &a, &n), STORE_OK);
	assert_int_equal(n, 2);
	assert_int_equal(a[0].code, 503);
	assert_int_equal(a[1].code, 200);
	store_attempts_free(a, n);

	/* and what is ingested after the upgrade is delivered like any other */
	char id[UUID_STR_LEN];
	ingest_one(t, "order.paid", now, 1, id);
	struct store_delivery *ds = deliveries_of(t, id, 1);
	c = NULL;
	n = claim_n(t, now, MINUTE_MS, 10, &c);
	assert_int_equal(n, 1);
	assert_string_equal(c[0].delivery_id, ds[0].id);
	record(t, ds[0].id, DELIVERY_PROCESSED, 1, 0, 200, "OK", NULL);
	store_claims_free(c, n);
	store_deliveries_free(ds, 1);

	memset(&s, 0, sizeof(s));
	assert_int_equal(store_stats(t->st, now, HOUR_MS, &s), STORE_OK);
	assert_int_equal(s.new_count, 1);  /* the parked one, still behind the dead one */
	assert_int_equal(s.processed_count, 5);
	assert_int_equal(s.dead_count, 1);
	assert_int_equal(s.in_flight, 0);
	store_stats_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_upgrade_keeps_every_delivery),
	};

	return store_suite_run(tests, sizeof(tests) / sizeof(tests[0]));
}
