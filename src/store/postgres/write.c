/* write.c: the PostgreSQL backend's hot writes: ingest (events and their deliveries in
 * one round trip), the outbox relay, claims (FOR UPDATE SKIP LOCKED leases), delivery
 * results with their attempts (only where this instance still holds the lease), and
 * lease recovery. Must not keep a transaction open across calls. */
#include "store/postgres/pg_int.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

/* ---- ingest and relay ---------------------------------------------------- */

static void ingest_arrays_init(struct ingest_arrays *a)
{
	static const uint32_t ev_oids[8] = {OID_TEXT, OID_TEXT, OID_TEXT, OID_TEXT, OID_TEXT,
					    OID_TEXT, OID_BYTEA, OID_INT8};
	static const uint32_t dl_oids[11] = {OID_TEXT, OID_TEXT, OID_TEXT, OID_TEXT, OID_INT8,
					     OID_TEXT, OID_INT8, OID_INT4, OID_TEXT, OID_TEXT,
					     OID_INT8};

	for (int i = 0; i < 8; i++)
		pg_arr_init(&a->ev[i], ev_oids[i]);
	for (int i = 0; i < 11; i++)
		pg_arr_init(&a->dl[i], dl_oids[i]);
	pg_arr_init(&a->outbox_ids, OID_INT8);
	pg_arr_init(&a->traceparent, OID_TEXT);
	pg_arr_init(&a->webhook_id, OID_TEXT);
	pg_arr_init(&a->starts_scheduled, OID_BOOL);
	pg_arr_init(&a->envelope, OID_BYTEA);
}

static void ingest_arrays_free(struct ingest_arrays *a)
{
	for (int i = 0; i < 8; i++)
		pg_arr_free(&a->ev[i]);
	for (int i = 0; i < 11; i++)
		pg_arr_free(&a->dl[i]);
	pg_arr_free(&a->outbox_ids);
	pg_arr_free(&a->traceparent);
	pg_arr_free(&a->webhook_id);
	pg_arr_free(&a->starts_scheduled);
	pg_arr_free(&a->envelope);
}

/* Appends one event and its deliveries (created and due at due_at). The subscription
 * ids are copied here, so the fan-out's array may change after the call. */
static void ingest_add(struct ingest_arrays *a, struct store_event_in *ev, int64_t due_at)
{
	pg_arr_text(&a->ev[0], ev->id);
	pg_arr_text(&a->ev[1], ev->event_type);
	pg_arr_text(&a->ev[2], ev->source ? ev->source : "");
	pg_arr_text(&a->ev[3], ev->source_event_id);
	pg_arr_text(&a->ev[4], ev->partition_key);
	pg_arr_text(&a->ev[5], ev->content_type);
	pg_arr_add(&a->ev[6], ev->payload, ev->payload_len);
	pg_arr_i64(&a->ev[7], ev->created_at);
	pg_arr_text(&a->traceparent, ev->traceparent);
	pg_arr_text(&a->webhook_id, ev->webhook_id);
	if (ev->envelope)
		pg_arr_add(&a->envelope, ev->envelope, ev->envelope_len);
	else
		pg_arr_null(&a->envelope);
	for (size_t i = 0; i < ev->n_subscriptions; i++) {
		char id[UUID_STR_LEN];

		uuid_v7(id);
		pg_arr_text(&a->dl[0], id);
		pg_arr_text(&a->dl[1], ev->id);
		pg_arr_text(&a->dl[2], ev->subscription_ids[i]);
		pg_arr_text(&a->dl[3], ev->event_type);
		pg_arr_i64(&a->dl[4], due_at);
		/* the initial state (store_event_in): NEW and due at due_at unless asked */
		int64_t next = store_event_first_due(ev, due_at);
		pg_arr_text(&a->dl[5], delivery_status_name(ev->initial_status));
		if (next)
			pg_arr_i64(&a->dl[6], next);
		else
			pg_arr_null(&a->dl[6]);
		if (ev->initial_code)
			pg_arr_i32(&a->dl[7], ev->initial_code);
		else
			pg_arr_null(&a->dl[7]);
		pg_arr_text(&a->dl[8], ev->initial_message);
		pg_arr_text(&a->dl[9], ev->initial_cause);
		if (ev->lease_until) { /* the hand-off (store_event_in) */
			pg_arr_i64(&a->dl[10], ev->lease_until);
			memcpy(ev->delivery_ids[i], id, UUID_STR_LEN);
		} else {
			pg_arr_null(&a->dl[10]);
		}
		pg_arr_bool(&a->starts_scheduled, ev->starts_scheduled);
	}
}

static int ingest_arrays_failed(const struct ingest_arrays *a)
{
	int failed = a->outbox_ids.failed | a->traceparent.failed | a->webhook_id.failed |
		     a->starts_scheduled.failed | a->envelope.failed;

	for (int i = 0; i < 8; i++)
		failed |= a->ev[i].failed;
	for (int i = 0; i < 11; i++)
		failed |= a->dl[i].failed;
	return failed;
}

static int id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Marks the events S_INGEST did not insert as duplicates and gives each the id of the
 * stored event with its key (possibly one from earlier in the same batch). res holds the
 * inserted ids. */
static int mark_duplicates(struct pg *pg, struct pgconn *c, struct store_event_in *events,
			   size_t n, PGresult *res)
{
	size_t n_new = (size_t)PQntuples(res);
	char (*fresh)[UUID_STR_LEN] = NULL;
	size_t *dups = NULL, n_dups = 0;
	struct pgarr keys[2];
	struct params p = {0};
	PGresult *found = NULL;
	int rc = STORE_OK;

	if (n_new == n)
		return STORE_OK;
	fresh = calloc(n_new ? n_new : 1, UUID_STR_LEN);
	dups = calloc(n, sizeof(*dups));
	pg_arr_init(&keys[0], OID_TEXT);
	pg_arr_init(&keys[1], OID_TEXT);
	if (!fresh || !dups) {
		rc = STORE_ERROR;
		goto out;
	}
	for (size_t i = 0; i < n_new; i++)
		pg_get_id(res, (int)i, 0, fresh[i]);
	qsort(fresh, n_new, UUID_STR_LEN, id_cmp);
	for (size_t i = 0; i < n; i++) {
		if (bsearch(events[i].id, fresh, n_new, UUID_STR_LEN, id_cmp))
			continue;
		/* Only an idempotency key can make an event a duplicate, or in a spool
		 * replay its own id (then the stored event is this one: its id stays). */
		if (!events[i].source_event_id) {
			if (events[i].dedupe_by_id)
				events[i].duplicate = 1;
			continue;
		}
		dups[n_dups++] = i;
		events[i].duplicate = 1;
		pg_arr_text(&keys[0], events[i].source ? events[i].source : "");
		pg_arr_text(&keys[1], events[i].source_event_id);
	}
	pg_p_arr(&p, &keys[0]);
	pg_p_arr(&p, &keys[1]);
	if (keys[0].failed || keys[1].failed) {
		rc = STORE_ERROR;
		goto out;
	}
	found = pg_run(pg, c, S_DUP_LOOKUP, &p, &rc);
	for (int r = 0; found && r < PQntuples(found); r++) {
		int64_t ord = pg_get_int(found, r, 0);

		if (ord >= 1 && (size_t)ord <= n_dups)
			pg_get_id(found, r, 1, events[dups[ord - 1]].id);
	}
out:
	PQclear(found);
	pg_arr_free(&keys[0]);
	pg_arr_free(&keys[1]);
	free(fresh);
	free(dups);
	return rc;
}

/* One ingest statement on c (S_INGEST_REPLAY for a spool replay, S_INGEST_UNKEYED when no
 * event of the batch has an idempotency key, so the server does not look for keyed ones,
 * S_INGEST otherwise); marks duplicates. */
static int ingest_run(struct pg *pg, struct pgconn *c, const char *owner,
		      struct store_event_in *events, size_t n, struct ingest_arrays *a)
{
	struct params p = {0};
	PGresult *res;
	int rc;

	for (int i = 0; i < 8; i++)
		pg_p_arr(&p, &a->ev[i]);
	for (int i = 0; i < 5; i++)
		pg_p_arr(&p, &a->dl[i]);
	pg_p_arr(&p, &a->outbox_ids);
	pg_p_arr(&p, &a->traceparent);
	for (int i = 5; i < 11; i++)
		pg_p_arr(&p, &a->dl[i]);
	pg_p_text(&p, owner);
	pg_p_arr(&p, &a->webhook_id);
	pg_p_arr(&p, &a->starts_scheduled);
	pg_p_arr(&p, &a->envelope);
	if (ingest_arrays_failed(a))
		return STORE_ERROR;
	int keyed = 0;
	for (size_t i = 0; i < n && !keyed; i++)
		keyed = events[i].source_event_id != NULL;
	res = pg_run(pg, c, n && events[0].dedupe_by_id ? S_INGEST_REPLAY
				: keyed ? S_INGEST : S_INGEST_UNKEYED, &p, &rc);
	if (!res)
		return rc;
	atomic_fetch_add_explicit(&pg->written, (uint64_t)n + a->dl[0].n, memory_order_relaxed);
	rc = mark_duplicates(pg, c, events, n, res);
	PQclear(res);
	return rc;
}

int pg_ingest(store *st, struct store_event_in *events, size_t n)
{
	struct pg *pg = pg_of(st);
	struct ingest_arrays a;
	int64_t now = clock_now_ms();
	struct pgconn *c;
	int rc;

	ingest_arrays_init(&a);
	for (size_t i = 0; i < n; i++) {
		if (!events[i].created_at)
			events[i].created_at = now;
		ingest_add(&a, &events[i], events[i].created_at);
	}
	/* One statement in its own transaction, committed synchronously: durable when
	 * this returns STORE_OK. Duplicates are looked up after the commit (the first
	 * event of a key is committed by then). */
	if ((c = pg_take(pg, ROLE_INGEST, &rc))) {
		rc = ingest_run(pg, c, st->owner, events, n, &a);
		pg_give(c);
	}
	ingest_arrays_free(&a);
	if (rc != STORE_OK)
		for (size_t i = 0; i < n; i++)
			events[i].duplicate = 0;
	else
		pg_writes_ok(pg);
	return rc;
}

int pg_relay_outbox(store *st, size_t limit, store_fanout_cb fanout, void *ctx,
			   size_t *relayed)
{
	struct pg *pg = pg_of(st);
	int64_t now = clock_now_ms();
	struct store_event_in *events = NULL;
	struct ingest_arrays a;
	struct params p = {0};
	PGresult *rows = NULL;
	struct pgconn *c;
	size_t count = 0;
	int rc;

	if (!(c = pg_take(pg, ROLE_JANITOR, &rc)))
		return rc;
	ingest_arrays_init(&a);
	rc = pg_tx_begin(pg, c);
	if (rc != STORE_OK)
		goto out;
	/* Rows another instance is relaying, or a producer's uncommitted ones, are
	 * skipped: their turn comes in a later round. */
	pg_p_i64(&p, (int64_t)limit);
	rows = pg_run(pg, c, S_OUTBOX_TAKE, &p, &rc);
	if (!rows)
		goto out;
	count = (size_t)PQntuples(rows);
	if (!count)
		goto out;
	events = calloc(count, sizeof(*events));
	if (!events) {
		rc = STORE_ERROR;
		goto out;
	}
	for (size_t i = 0; i < count; i++) {
		struct store_event_in *ev = &events[i];
		const char (*ids)[UUID_STR_LEN] = NULL;
		size_t n_ids = 0;
		int r = (int)i;

		pg_arr_i64(&a.outbox_ids, pg_get_int(rows, r, 0));
		uuid_v7(ev->id);
		ev->event_type = PQgetvalue(rows, r, 1);
		ev->source = PQgetvalue(rows, r, 2);
		ev->source_event_id = PQgetisnull(rows, r, 3) ? NULL : PQgetvalue(rows, r, 3);
		ev->partition_key = PQgetisnull(rows, r, 4) ? NULL : PQgetvalue(rows, r, 4);
		ev->payload = PQgetvalue(rows, r, 5);
		ev->payload_len = (size_t)PQgetlength(rows, r, 5);
		ev->content_type = PQgetvalue(rows, r, 6);
		ev->created_at = pg_get_int(rows, r, 7);
		if (ev->created_at <= 0)
			ev->created_at = now;
		fanout(ctx, ev, &ids, &n_ids);
		ev->subscription_ids = ids;
		ev->n_subscriptions = ids ? n_ids : 0;
		ingest_add(&a, ev, now);
		ev->subscription_ids = NULL; /* valid only until the next fan-out */
	}
	rc = ingest_run(pg, c, st->owner, events, count, &a);
	for (size_t i = 0; rc == STORE_OK && i < count; i++)
		if (events[i].duplicate)
			log_debug("store: outbox row duplicates event %s, dropped", events[i].id);
out:
	rc = pg_tx_end(pg, c, rc);
	pg_give(c);
	PQclear(rows);
	free(events);
	ingest_arrays_free(&a);
	if (rc == STORE_OK)
		*relayed = count;
	return rc;
}

/* ---- claim and results --------------------------------------------------- */

/* One claim from a row of S_CLAIM (the event part through store_claim_fill). */
static int fill_claim(const PGresult *r, int row, struct store_claim *c)
{
	enum delivery_status status = DELIVERY_NEW;
	struct store_claim_event e = {
		.event_type = PQgetvalue(r, row, 7),
		.type_len = (size_t)PQgetlength(r, row, 7),
		.content_type = PQgetvalue(r, row, 8),
		.ctype_len = (size_t)PQgetlength(r, row, 8),
		.payload = PQgetvalue(r, row, 9),
		.payload_len = (size_t)PQgetlength(r, row, 9),
		.source = PQgetvalue(r, row, 13),
		.source_len = (size_t)PQgetlength(r, row, 13),
		.source_event_id = PQgetisnull(r, row, 14) ? NULL : PQgetvalue(r, row, 14),
		.seid_len = PQgetisnull(r, row, 14) ? 0 : (size_t)PQgetlength(r, row, 14),
		.partition_key = PQgetisnull(r, row, 15) ? NULL : PQgetvalue(r, row, 15),
		.pkey_len = PQgetisnull(r, row, 15) ? 0 : (size_t)PQgetlength(r, row, 15),
		.webhook_id = PQgetisnull(r, row, 17) ? NULL : PQgetvalue(r, row, 17),
		.wid_len = PQgetisnull(r, row, 17) ? 0 : (size_t)PQgetlength(r, row, 17),
	};

	pg_get_id(r, row, 0, c->delivery_id);
	pg_get_id(r, row, 1, c->event_id);
	pg_get_id(r, row, 2, c->subscription_id);
	delivery_status_parse(PQgetvalue(r, row, 3), &status);
	c->status = status;
	c->replay = (int)pg_get_int(r, row, 4);
	c->attempt_count = (int)pg_get_int(r, row, 5);
	c->retry_count = (int)pg_get_int(r, row, 6);
	c->event_created_at = pg_get_int(r, row, 10);
	snprintf(c->traceparent, sizeof(c->traceparent), "%s",
		 PQgetisnull(r, row, 11) ? "" : PQgetvalue(r, row, 11));
	c->delay_actions = (int)pg_get_int(r, row, 12);
	c->starts_scheduled = (int)pg_get_int(r, row, 16);
	return store_claim_fill(c, &e);
}

int pg_claim_due(store *st, int64_t now_ms, int64_t lease_ms, size_t limit,
			struct store_claim **items, size_t *n)
{
	struct pg *pg = pg_of(st);
	struct store_claim *out = NULL;
	struct params p = {0};
	PGresult *res = NULL;
	struct pgconn *c;
	size_t count = 0, filled = 0;
	int rc;

	if (!(c = pg_take(pg, ROLE_DISPATCH, &rc)))
		return rc;
	pg_p_text(&p, st->owner);
	pg_p_i64(&p, now_ms + lease_ms);
	pg_p_i64(&p, now_ms);
	pg_p_i64(&p, (int64_t)limit);
	res = pg_run(pg, c, S_CLAIM, &p, &rc);
	pg_give(c);
	if (!res)
		return rc;
	count = (size_t)PQntuples(res);
	if (count) {
		out = calloc(count, sizeof(*out));
		for (; out && filled < count; filled++)
			if (fill_claim(res, (int)filled, &out[filled]))
				break;
	}
	PQclear(res);
	atomic_fetch_add_explicit(&pg->written, (uint64_t)count, memory_order_relaxed);
	if (filled < count) {
		/* Out of memory: the leases expire and the work returns to the pool. */
		store_claims_free(out, filled);
		return STORE_ERROR;
	}
	*items = out;
	*n = count;
	return STORE_OK;
}

int pg_next_due(store *st, int64_t *at_ms)
{
	struct pg *pg = pg_of(st);
	PGresult *res;
	struct pgconn *c;
	int rc;

	if (!(c = pg_take(pg, ROLE_DISPATCH, &rc)))
		return rc;
	res = pg_run(pg, c, S_NEXT_DUE, NULL, &rc);
	pg_give(c);
	if (res && PQntuples(res) == 1)
		*at_ms = pg_get_int(res, 0, 0);
	PQclear(res);
	return rc;
}

int pg_record_results(store *st, const struct store_result *results, size_t n)
{
	static const uint32_t r_oids[11] = {OID_TEXT, OID_TEXT, OID_BOOL, OID_INT4, OID_INT4,
		OID_INT8, OID_INT8, OID_BOOL, OID_INT4, OID_TEXT, OID_TEXT};
	static const uint32_t a_oids[8] = {OID_TEXT, OID_INT4, OID_TEXT, OID_INT8, OID_INT8,
		OID_INT4, OID_TEXT, OID_TEXT};
	struct pg *pg = pg_of(st);
	struct pgarr r[11], a[8], delays, dead_letter, not_sent;
	struct params p = {0};
	PGresult *res = NULL;
	struct pgconn *c;
	int failed = 0;
	int rc;

	for (int i = 0; i < 11; i++)
		pg_arr_init(&r[i], r_oids[i]);
	for (int i = 0; i < 8; i++)
		pg_arr_init(&a[i], a_oids[i]);
	pg_arr_init(&delays, OID_INT4);
	pg_arr_init(&dead_letter, OID_BOOL);
	pg_arr_init(&not_sent, OID_BOOL);
	for (size_t i = 0; i < n; i++) {
		const struct store_result *x = &results[i];

		pg_arr_text(&r[0], x->delivery_id);
		pg_arr_text(&r[1], delivery_status_name(x->status));
		pg_arr_bool(&r[2], x->replay);
		pg_arr_i32(&r[3], x->attempt_count);
		pg_arr_i32(&r[4], x->retry_count);
		pg_arr_i32(&delays, x->delay_actions);
		pg_arr_bool(&dead_letter, x->dead_letter);
		pg_arr_time(&r[5], x->next_attempt_at);
		pg_arr_time(&r[6], x->processed_at);
		/* No error code means no error: message and cause are not kept either; -1
		 * keeps whatever error the delivery shows already. */
		pg_arr_bool(&r[7], x->last_code == -1);
		if (x->last_code > 0) {
			pg_arr_i32(&r[8], x->last_code);
			pg_arr_error_text(&r[9], x->last_message);
			pg_arr_error_text(&r[10], x->last_cause);
		} else {
			pg_arr_null(&r[8]);
			pg_arr_null(&r[9]);
			pg_arr_null(&r[10]);
		}
		for (size_t k = 0; k < x->n_attempts; k++) {
			const struct store_attempt *t = &x->attempts[k];

			pg_arr_text(&a[0], x->delivery_id);
			pg_arr_i32(&a[1], t->n);
			pg_arr_text(&a[2], attempt_kind_name(t->kind));
			pg_arr_i64(&a[3], t->started_at);
			pg_arr_i64(&a[4], t->duration_ms);
			pg_arr_i32(&a[5], t->code);
			pg_arr_error_text(&a[6], t->message);
			pg_arr_error_text(&a[7], t->cause);
			pg_arr_bool(&not_sent, t->not_sent);
		}
	}
	for (int i = 0; i < 11; i++) {
		pg_p_arr(&p, &r[i]);
		failed |= r[i].failed;
	}
	pg_p_i64(&p, clock_now_ms());
	pg_p_text(&p, st->owner);
	for (int i = 0; i < 8; i++) {
		pg_p_arr(&p, &a[i]);
		failed |= a[i].failed;
	}
	pg_p_arr(&p, &delays);
	pg_p_arr(&p, &dead_letter);
	pg_p_arr(&p, &not_sent);
	failed |= delays.failed | dead_letter.failed | not_sent.failed;
	rc = STORE_ERROR;
	if (!failed && (c = pg_take(pg, ROLE_RESULTS, &rc))) {
		/* Nearly always no attempt number is taken: the insert without ON CONFLICT
		 * saves a speculative insertion per attempt. When one is (a round whose lease
		 * was lost recorded its attempts first), that statement changed nothing and
		 * the one that records the attempt after the delivery's last runs. */
		res = pg_run(pg, c, S_RESULTS_FAST, &p, &rc);
		if (!res && rc == STORE_CONFLICT) {
			log_debug("store: an attempt number of this results batch is taken; "
				  "recording the batch again, such attempts after the last");
			res = pg_run(pg, c, S_RESULTS, &p, &rc);
		}
		pg_give(c);
	}
	if (res) {
		size_t applied = (size_t)pg_get_int(res, 0, 0);

		pg_writes_ok(pg);
		if (applied < n)
			log_warn("store: %zu of %zu results ignored: their lease was lost (their "
				 "attempts are recorded)", n - applied, n);
	}
	PQclear(res);
	for (int i = 0; i < 11; i++)
		pg_arr_free(&r[i]);
	for (int i = 0; i < 8; i++)
		pg_arr_free(&a[i]);
	pg_arr_free(&delays);
	pg_arr_free(&dead_letter);
	pg_arr_free(&not_sent);
	return rc;
}

/* ---- dead-letter marks ----------------------------------------------------- */

int pg_dead_letters(store *st, size_t limit, struct store_dead_letter **items, size_t *n)
{
	static const char sql[] =
		"SELECT d.id, d.event_id, d.subscription_id, d.attempt_count, d.last_code,"
		" d.last_message, d.last_cause, e.event_type, e.content_type, e.payload,"
		" e.created_at, e.traceparent, e.source, e.source_event_id, e.partition_key,"
		" e.webhook_id FROM outboxd.deliveries d JOIN outboxd.events e ON e.id = d.event_id"
		" WHERE d.dead_letter_pending ORDER BY d.id LIMIT $1";
	struct pg *pg = pg_of(st);
	struct store_dead_letter *out = NULL;
	struct params p = {0};
	struct pgconn *c;
	size_t count = 0, filled = 0;
	int rc;

	if (!(c = pg_take(pg, ROLE_JANITOR, &rc)))
		return rc;
	pg_p_i64(&p, (int64_t)limit);
	PGresult *res = pg_run_sql(pg, c, sql, &p, &rc);
	pg_give(c);
	if (!res)
		return rc;
	count = (size_t)PQntuples(res);
	if (count && !(out = calloc(count, sizeof(*out))))
		rc = STORE_ERROR;
	for (int r = 0; out && filled < count; filled++, r++) {
		struct store_dead_letter *x = &out[filled];
		struct store_claim *cl = &x->claim;
#define OPT(col) (PQgetisnull(res, r, col) ? NULL : PQgetvalue(res, r, col))
#define LEN(col) (PQgetisnull(res, r, col) ? 0 : (size_t)PQgetlength(res, r, col))
		struct store_claim_event e = {
			.event_type = PQgetvalue(res, r, 7), .type_len = LEN(7),
			.content_type = PQgetvalue(res, r, 8), .ctype_len = LEN(8),
			.payload = PQgetvalue(res, r, 9), .payload_len = LEN(9),
			.source = PQgetvalue(res, r, 12), .source_len = LEN(12),
			.source_event_id = OPT(13), .seid_len = LEN(13),
			.partition_key = OPT(14), .pkey_len = LEN(14),
			.webhook_id = OPT(15), .wid_len = LEN(15),
		};
#undef OPT
#undef LEN
		pg_get_id(res, r, 0, cl->delivery_id);
		pg_get_id(res, r, 1, cl->event_id);
		pg_get_id(res, r, 2, cl->subscription_id);
		cl->status = DELIVERY_FAILED;
		cl->attempt_count = (int)pg_get_int(res, r, 3);
		x->last_code = (int)pg_get_int(res, r, 4);
		cl->event_created_at = pg_get_int(res, r, 10);
		snprintf(cl->traceparent, sizeof(cl->traceparent), "%s",
			 PQgetisnull(res, r, 11) ? "" : PQgetvalue(res, r, 11));
		if (store_claim_fill(cl, &e) || pg_get_dup(res, r, 5, &x->last_message) ||
		    pg_get_dup(res, r, 6, &x->last_cause)) {
			filled++;
			rc = STORE_ERROR;
			break;
		}
	}
	PQclear(res);
	if (rc != STORE_OK) {
		store_dead_letters_free(out, filled);
		return rc;
	}
	*items = out;
	*n = count;
	return STORE_OK;
}

int pg_dead_letters_done(store *st, const char (*ids)[UUID_STR_LEN], size_t n)
{
	struct pg *pg = pg_of(st);
	struct params p = {0};
	struct pgarr arr;
	struct pgconn *c;
	int rc = STORE_ERROR;

	pg_arr_init(&arr, OID_TEXT);
	for (size_t i = 0; i < n; i++)
		pg_arr_text(&arr, ids[i]);
	pg_p_arr(&p, &arr);
	if (!arr.failed && (c = pg_take(pg, ROLE_JANITOR, &rc))) {
		PQclear(pg_run_sql(pg, c, "UPDATE outboxd.deliveries SET dead_letter_pending = false"
				   " WHERE id = ANY($1::text[])", &p, &rc));
		pg_give(c);
	}
	pg_arr_free(&arr);
	return rc;
}

int pg_leases_renew(store *st, const char (*ids)[UUID_STR_LEN], const int64_t *until,
		    size_t n, unsigned char *renewed)
{
	struct pg *pg = pg_of(st);
	struct pgarr a_id, a_until;
	struct params p = {0};
	PGresult *res = NULL;
	struct pgconn *c;
	int rc = STORE_ERROR;

	pg_arr_init(&a_id, OID_TEXT);
	pg_arr_init(&a_until, OID_INT8);
	for (size_t i = 0; i < n; i++) {
		pg_arr_text(&a_id, ids[i]);
		pg_arr_i64(&a_until, until[i]);
	}
	pg_p_arr(&p, &a_id);
	pg_p_arr(&p, &a_until);
	pg_p_text(&p, st->owner);
	/* on the results' session: the writer runs renewals on the results' lane */
	if (!a_id.failed && !a_until.failed && (c = pg_take(pg, ROLE_RESULTS, &rc))) {
		res = pg_run(pg, c, S_LEASE_RENEW, &p, &rc);
		pg_give(c);
	}
	for (int r = 0; res && r < PQntuples(res); r++) {
		int64_t i = pg_get_int(res, r, 0); /* 1-based ordinality */
		if (i >= 1 && (size_t)i <= n)
			renewed[i - 1] = 1;
	}
	PQclear(res);
	pg_arr_free(&a_id);
	pg_arr_free(&a_until);
	return rc;
}

int pg_reap_leases(store *st, int64_t now_ms, size_t *n)
{
	struct pg *pg = pg_of(st);
	struct params p = {0};
	struct pgconn *c;
	int rc;

	if (!(c = pg_take(pg, ROLE_JANITOR, &rc)))
		return rc;
	pg_p_i64(&p, now_ms);
	rc = pg_run_done(pg, c, S_REAP, &p, n);
	pg_give(c);
	return rc;
}

/* Other instances hold live leases: only this owner's and expired ones are cleared. */
int pg_release_all(store *st, size_t *n)
{
	struct pg *pg = pg_of(st);
	struct params p = {0};
	struct pgconn *c;
	int rc;

	if (!(c = pg_take(pg, ROLE_JANITOR, &rc)))
		return rc;
	pg_p_text(&p, st->owner);
	pg_p_i64(&p, clock_now_ms());
	rc = pg_run_done(pg, c, S_RELEASE_ALL, &p, n);
	pg_give(c);
	return rc;
}

/* ---- per-key ordering ---------------------------------------------------- */

/* The sweeps below test each candidate D against the earlier deliveries of its key, and
 * do it as the claim does (PENDING_BEFORE, pg_int.h): the first earlier one in id order,
 * which with sorts disabled (sweep_plans) only the ordering index gives, so each test
 * reads a few of its entries whatever the planner's statistics say. As EXISTS, on
 * statistics taken while every delivery was done, PostgreSQL made the waiting sweep a
 * nested loop over the status index: on 96,000 ordered deliveries due it had not ended
 * after 30 s (5 s on fresh statistics), and it held the janitor, and with it the reaper
 * and the relay, meanwhile. */

/* A dead delivery earlier than D of D's key. */
#define DEAD_BEFORE(D)                                                                   \
	"(SELECT p.id FROM outboxd.queue p"                                             \
	" WHERE p.subscription_id = " D ".subscription_id AND p.order_key = " D ".order_key" \
	" AND p.id < " D ".id AND p.status = 'FAILED'"                                    \
	" AND p.next_attempt_at IS NULL AND p.lease_until IS NULL"                       \
	" ORDER BY p.id LIMIT 1) IS NOT NULL"

/* Pending deliveries of ordered subscriptions: blocked 1 behind a dead one of their key
 * (blocking subscriptions), else 2 behind an unfinished one. Rows another instance holds
 * are left for the next sweep. */
static const char park_dead_sql[] =
	"UPDATE outboxd.queue SET blocked = 1, next_attempt_at = NULL WHERE id IN ("
	" SELECT d.id FROM outboxd.subscriptions s JOIN outboxd.queue d"
	"  ON d.subscription_id = s.id"
	" WHERE s.ordering = 1 AND d.order_key IS NOT NULL"
	" AND d.status = 'NEW' AND d.blocked <> 1 AND d.lease_until IS NULL"
	" AND " DEAD_BEFORE("d") " FOR UPDATE OF d SKIP LOCKED)";

static const char park_wait_sql[] =
	"UPDATE outboxd.queue SET blocked = 2, next_attempt_at = NULL WHERE id IN ("
	" SELECT d.id FROM outboxd.subscriptions s JOIN outboxd.queue d"
	"  ON d.subscription_id = s.id"
	" WHERE s.ordering > 0 AND d.order_key IS NOT NULL"
	" AND d.status = 'NEW' AND d.blocked = 0 AND d.lease_until IS NULL"
	" AND d.next_attempt_at IS NOT NULL AND " PENDING_BEFORE("d", "s")
	" FOR UPDATE OF d SKIP LOCKED)";

/* Parked deliveries whose reason is gone: due now (the claim still checks the order). */
static const char unpark_sql[] =
	"UPDATE outboxd.queue SET blocked = 0, next_attempt_at = $1 WHERE id IN ("
	" SELECT d.id FROM outboxd.queue d LEFT JOIN outboxd.subscriptions s"
	"  ON s.id = d.subscription_id AND s.ordering > 0"
	" WHERE d.blocked > 0 AND NOT (s.id IS NOT NULL AND CASE d.blocked"
	"  WHEN 1 THEN s.ordering = 1 AND " DEAD_BEFORE("d")
	"  ELSE " PENDING_BEFORE("d", "s") " END)"
	" FOR UPDATE OF d SKIP LOCKED)";

/* The janitor's session plans the sweeps without sorts (on), and everything else as
 * the server would (off). JIT goes with it: a disabled plan type adds a penalty to the
 * plan's cost that would have every sweep compiled. A connection lost meanwhile is
 * reopened with the server's settings. */
static void sweep_plans(struct pg *pg, struct pgconn *c, int on)
{
	static const char *const sql[2][2] = {
		{"RESET enable_sort", "RESET jit"},
		{"SET enable_sort = off", "SET jit = off"},
	};
	int rc;

	for (int i = 0; i < 2 && c->conn; i++)
		PQclear(pg_run_sql(pg, c, sql[on][i], NULL, &rc));
}

static int run_sweep(struct pg *pg, struct pgconn *c, const char *sql, int64_t now_ms,
		     size_t *n)
{
	struct params p = {0};
	int rc;

	if (strchr(sql, '$'))
		pg_p_i64(&p, now_ms);
	PGresult *res = pg_run_sql(pg, c, sql, &p, &rc);
	*n = res ? (size_t)strtoull(PQcmdTuples(res), NULL, 10) : 0;
	PQclear(res);
	return rc;
}

int pg_order_sweep(store *st, int64_t now_ms, int full, size_t *parked, size_t *unparked)
{
	struct pg *pg = pg_of(st);
	struct pgconn *c;
	size_t waiting = 0;
	int rc = STORE_OK;

	*parked = *unparked = 0;
	if (!(c = pg_take(pg, ROLE_JANITOR, &rc)))
		return rc;
	/* Without an ordered subscription there is nothing to park: the parking sweeps'
	 * plans may still walk every unfinished delivery with a partition key. Unparking
	 * runs regardless (a subscription whose ordering was switched off releases what it
	 * parked). */
	PGresult *res = pg_run_sql(pg, c, "SELECT 1 FROM outboxd.subscriptions"
					  " WHERE ordering > 0 LIMIT 1", NULL, &rc);
	int ordered = res && PQntuples(res) > 0;
	PQclear(res);
	/* the session's settings change only around sweeps that run: most seconds of a
	 * store without ordered subscriptions run none */
	if (rc == STORE_OK && (ordered || full)) {
		sweep_plans(pg, c, 1);
		if (ordered && full)
			rc = run_sweep(pg, c, park_dead_sql, now_ms, parked);
		if (rc == STORE_OK && ordered)
			rc = run_sweep(pg, c, park_wait_sql, now_ms, &waiting);
		if (rc == STORE_OK && full)
			rc = run_sweep(pg, c, unpark_sql, now_ms, unparked);
		sweep_plans(pg, c, 0);
	}
	pg_give(c);
	return rc;
}
