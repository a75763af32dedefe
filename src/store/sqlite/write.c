/* write.c: the SQLite backend's hot writes: ingest (events and their deliveries in
 * one transaction), the outbox relay, claims (leases), delivery results with their
 * attempts, and lease recovery. Every call here runs on the writer connection in one
 * transaction; must not leave one open across calls. */
#include "store/sqlite/sqlite_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

/* ---- ingest and relay ---------------------------------------------------- */

/* Inserts one event and its deliveries (created and due at due_at) inside the open
 * transaction, or marks it duplicate when its (source, source_event_id) is already
 * stored — including earlier in the same transaction. */
static int insert_event(struct sq *sq, const char *owner, struct store_event_in *ev,
			int64_t due_at)
{
	const char *source = ev->source ? ev->source : "";
	sqlite3_stmt *s;
	int rc;

	ev->duplicate = 0;
	if (ev->dedupe_by_id) {
		/* A spool replay: this very event may have been committed already. */
		s = sq->w[W_EVENT_FIND_ID];
		sqlite3_bind_text(s, 1, ev->id, -1, SQLITE_STATIC);
		rc = sq_step_row(s);
		if (rc == SQLITE_ROW) {
			ev->duplicate = 1;
			sq_stmt_end(s);
			return SQLITE_OK;
		}
		if (rc != SQLITE_DONE)
			return rc;
	}
	if (ev->source_event_id) {
		s = sq->w[W_EVENT_FIND];
		sqlite3_bind_text(s, 1, source, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, ev->source_event_id, -1, SQLITE_STATIC);
		rc = sq_step_row(s);
		if (rc == SQLITE_ROW) {
			sq_col_id(s, 0, ev->id);
			ev->duplicate = 1;
			sq_stmt_end(s);
			return SQLITE_OK;
		}
		if (rc != SQLITE_DONE)
			return rc;
	}

	s = sq->w[W_EVENT_INSERT];
	sqlite3_bind_text(s, 1, ev->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, ev->event_type, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, source, -1, SQLITE_STATIC);
	sq_bind_text(s, 4, ev->source_event_id);
	sq_bind_text(s, 5, ev->partition_key);
	sqlite3_bind_text(s, 6, ev->content_type, -1, SQLITE_STATIC);
	sq_bind_payload(s, 7, ev->payload, ev->payload_len);
	sqlite3_bind_int64(s, 8, ev->created_at);
	sq_bind_text(s, 9, ev->traceparent);
	sq_bind_text(s, 10, ev->webhook_id);
	if (ev->envelope)
		sq_bind_payload(s, 11, ev->envelope, ev->envelope_len);
	else
		sqlite3_bind_null(s, 11);
	rc = sq_step_done(s);
	if (rc != SQLITE_OK)
		return rc;

	int initial = store_event_initial(ev);
	s = sq->w[initial ? W_DELIVERY_INSERT_STATE : W_DELIVERY_INSERT];
	for (size_t i = 0; i < ev->n_subscriptions; i++) {
		char id[UUID_STR_LEN];

		uuid_v7(id);
		sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, ev->id, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 3, ev->subscription_ids[i], -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 4, ev->event_type, -1, SQLITE_STATIC);
		if (initial) {
			int64_t next = store_event_first_due(ev, due_at);
			sqlite3_bind_text(s, 5, delivery_status_name(ev->initial_status), -1,
					  SQLITE_STATIC);
			if (next)
				sqlite3_bind_int64(s, 6, next);
			else
				sqlite3_bind_null(s, 6);
			if (ev->initial_code)
				sqlite3_bind_int(s, 7, ev->initial_code);
			else
				sqlite3_bind_null(s, 7);
			sq_bind_text(s, 8, ev->initial_message);
			sq_bind_text(s, 9, ev->initial_cause);
			sqlite3_bind_int64(s, 10, due_at);
			sq_bind_text(s, 11, ev->partition_key);
			sqlite3_bind_int(s, 12, ev->starts_scheduled ? 1 : 0);
		} else {
			sqlite3_bind_int64(s, 5, due_at);
			sq_bind_text(s, 6, ev->partition_key);
			if (ev->lease_until) { /* the hand-off (store_event_in) */
				sqlite3_bind_text(s, 7, owner, -1, SQLITE_STATIC);
				sqlite3_bind_int64(s, 8, ev->lease_until);
				memcpy(ev->delivery_ids[i], id, UUID_STR_LEN);
			}
		}
		rc = sq_step_done(s);
		if (rc != SQLITE_OK)
			return rc;
	}
	return SQLITE_OK;
}

/* Runs the delivery group: a full one as one INSERT, a partial one row by row. */
static int delivery_group_run(struct sq *sq, const char *owner, struct delivery_group *g)
{
	int rc = SQLITE_OK;

	if (g->rows == INGEST_ROWS) {
		sqlite3_stmt *s = sq->delivery_rows;

		for (int r = 0; r < INGEST_ROWS; r++) {
			int base = 1 + r * DELIVERY_COLS;

			sqlite3_bind_text(s, base, g->ids[r], -1, SQLITE_STATIC);
			sqlite3_bind_text(s, base + 1, g->ev[r]->id, -1, SQLITE_STATIC);
			sqlite3_bind_text(s, base + 2, g->ev[r]->subscription_ids[g->sub[r]], -1,
					  SQLITE_STATIC);
			sqlite3_bind_text(s, base + 3, g->ev[r]->event_type, -1, SQLITE_STATIC);
			sqlite3_bind_int64(s, base + 4, g->ev[r]->created_at);
			sq_bind_text(s, base + 5, g->ev[r]->partition_key);
			if (g->ev[r]->lease_until)
				sqlite3_bind_int64(s, base + 6, g->ev[r]->lease_until);
		}
		sqlite3_bind_text(s, INGEST_ROWS * DELIVERY_COLS + 1, owner, -1,
				  SQLITE_STATIC);
		rc = sq_step_done(s);
	} else {
		sqlite3_stmt *s = sq->w[W_DELIVERY_INSERT];

		for (int r = 0; rc == SQLITE_OK && r < g->rows; r++) {
			sqlite3_bind_text(s, 1, g->ids[r], -1, SQLITE_STATIC);
			sqlite3_bind_text(s, 2, g->ev[r]->id, -1, SQLITE_STATIC);
			sqlite3_bind_text(s, 3, g->ev[r]->subscription_ids[g->sub[r]], -1,
					  SQLITE_STATIC);
			sqlite3_bind_text(s, 4, g->ev[r]->event_type, -1, SQLITE_STATIC);
			sqlite3_bind_int64(s, 5, g->ev[r]->created_at);
			sq_bind_text(s, 6, g->ev[r]->partition_key);
			if (g->ev[r]->lease_until) {
				sqlite3_bind_text(s, 7, owner, -1, SQLITE_STATIC);
				sqlite3_bind_int64(s, 8, g->ev[r]->lease_until);
			}
			rc = sq_step_done(s);
		}
	}
	g->rows = 0;
	return rc;
}

/* Inserts INGEST_ROWS events that need no key check with one INSERT, and queues their
 * deliveries (created and due at the event's created_at, as insert_event does). */
static int event_group_run(struct sq *sq, const char *owner, struct store_event_in **evs,
			   struct delivery_group *g)
{
	sqlite3_stmt *s = sq->event_rows;
	int rc;

	for (int r = 0; r < INGEST_ROWS; r++) {
		struct store_event_in *ev = evs[r];
		int base = 1 + r * EVENT_COLS;

		ev->duplicate = 0;
		sqlite3_bind_text(s, base, ev->id, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, base + 1, ev->event_type, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, base + 2, ev->source ? ev->source : "", -1, SQLITE_STATIC);
		sqlite3_bind_null(s, base + 3);
		sq_bind_text(s, base + 4, ev->partition_key);
		sqlite3_bind_text(s, base + 5, ev->content_type, -1, SQLITE_STATIC);
		sq_bind_payload(s, base + 6, ev->payload, ev->payload_len);
		sqlite3_bind_int64(s, base + 7, ev->created_at);
		sq_bind_text(s, base + 8, ev->traceparent);
	}
	if ((rc = sq_step_done(s)) != SQLITE_OK)
		return rc;
	for (int r = 0; r < INGEST_ROWS; r++) {
		for (size_t k = 0; k < evs[r]->n_subscriptions; k++) {
			uuid_v7(g->ids[g->rows]);
			if (evs[r]->lease_until)
				memcpy(evs[r]->delivery_ids[k], g->ids[g->rows], UUID_STR_LEN);
			g->ev[g->rows] = evs[r];
			g->sub[g->rows] = k;
			if (++g->rows == INGEST_ROWS &&
			    (rc = delivery_group_run(sq, owner, g)) != SQLITE_OK)
				return rc;
		}
	}
	return SQLITE_OK;
}

/* Events with an idempotency key (or replayed from the spool) are checked and inserted
 * one by one, in order, so a key repeated within the batch is found; the others go in
 * groups. A partial group at the end goes one by one too. */
int sq_ingest(store *st, struct store_event_in *events, size_t n)
{
	struct sq *sq = sq_of(st);
	int64_t now = clock_now_ms();
	struct store_event_in *group[INGEST_ROWS];
	struct delivery_group *g = malloc(sizeof(*g));
	int rows = 0;
	int rc;

	if (!g)
		return STORE_ERROR;
	g->rows = 0;
	rc = sq_wlock(sq);
	if (rc == SQLITE_OK)
		rc = sq_tx_begin(sq);
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
		struct store_event_in *ev = &events[i];

		if (!ev->created_at)
			ev->created_at = now;
		/* the grouped INSERT has no webhook_id nor envelope: such an event goes alone */
		if (ev->source_event_id || ev->dedupe_by_id || store_event_initial(ev) ||
		    ev->webhook_id || ev->envelope) {
			rc = insert_event(sq, st->owner, ev, ev->created_at);
			continue;
		}
		group[rows++] = ev;
		if (rows == INGEST_ROWS) {
			rows = 0;
			rc = event_group_run(sq, st->owner, group, g);
		}
	}
	for (int r = 0; rc == SQLITE_OK && r < rows; r++)
		rc = insert_event(sq, st->owner, group[r], group[r]->created_at);
	if (rc == SQLITE_OK)
		rc = delivery_group_run(sq, st->owner, g);
	rc = sq_tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	free(g);
	return rc;
}

int sq_relay_outbox(store *st, size_t limit, store_fanout_cb fanout, void *ctx,
			   size_t *relayed)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->w[W_OUTBOX_SELECT];
	int64_t now = clock_now_ms();
	int64_t last_id = 0;
	size_t count = 0;
	int rc;

	rc = sq_wlock(sq);
	if (rc == SQLITE_OK)
		rc = sq_tx_begin(sq);
	if (rc != SQLITE_OK)
		goto out;
	sqlite3_bind_int64(s, 1, (int64_t)limit);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_event_in ev = {0};
		const char (*ids)[UUID_STR_LEN] = NULL;
		size_t n_ids = 0;

		/* Every column is read once: a later conversion would invalidate the
		 * pointers. The payload may have been inserted as TEXT or BLOB. */
		last_id = sqlite3_column_int64(s, 0);
		uuid_v7(ev.id);
		ev.event_type = (const char *)sqlite3_column_text(s, 1);
		ev.source = (const char *)sqlite3_column_text(s, 2);
		ev.source_event_id = (const char *)sqlite3_column_text(s, 3);
		ev.partition_key = (const char *)sqlite3_column_text(s, 4);
		ev.payload = sqlite3_column_blob(s, 5);
		ev.payload_len = (size_t)sqlite3_column_bytes(s, 5);
		ev.content_type = (const char *)sqlite3_column_text(s, 6);
		ev.created_at = sqlite3_column_int64(s, 7);
		if (!ev.event_type || !ev.content_type) {
			rc = sq_log_nomem();
			goto out;
		}
		if (ev.created_at <= 0)
			ev.created_at = now;
		fanout(ctx, &ev, &ids, &n_ids);
		ev.subscription_ids = ids;
		ev.n_subscriptions = ids ? n_ids : 0;
		rc = insert_event(sq, st->owner, &ev, now);
		if (rc != SQLITE_OK)
			goto out;
		if (ev.duplicate)
			log_debug("store: outbox row %lld duplicates event %s, dropped",
				  (long long)last_id, ev.id);
		count++;
	}
	if (rc != SQLITE_DONE) {
		sq_log_stmt_error(s, rc);
		goto out;
	}
	sq_stmt_end(s);
	rc = SQLITE_OK;
	if (count) {
		/* The writer lock was held since the SELECT, and AUTOINCREMENT ids sq_grow in
		 * commit order, so every id up to last_id was just relayed. */
		sqlite3_bind_int64(sq->w[W_OUTBOX_DELETE], 1, last_id);
		rc = sq_step_done(sq->w[W_OUTBOX_DELETE]);
	}
out:
	sq_stmt_end(s);
	rc = sq_tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	if (rc == STORE_OK)
		*relayed = count;
	return rc;
}

/* ---- claim and results --------------------------------------------------- */

static int claim_row_cmp(const void *a, const void *b)
{
	const struct claim_row *x = a, *y = b;

	if (x->due != y->due)
		return x->due < y->due ? -1 : 1;
	return strcmp(x->c.delivery_id, y->c.delivery_id);
}

/* Fills the event part of a claim from the event columns of a W_CLAIM row, starting at
 * column col (store_claim_fill). A delivery whose event row is missing is an error. */
static int claim_event_cols(sqlite3_stmt *s, int col, struct store_claim *c)
{
	struct store_claim_event e;

	if (sqlite3_column_type(s, col) == SQLITE_NULL) {
		log_error("store: delivery %s refers to missing event %s", c->delivery_id,
			  c->event_id);
		return SQLITE_CORRUPT;
	}
	/* Every column is read once: a later conversion would invalidate the pointers. */
	e.event_type = (const char *)sqlite3_column_text(s, col);
	e.type_len = (size_t)sqlite3_column_bytes(s, col);
	e.content_type = (const char *)sqlite3_column_text(s, col + 1);
	e.ctype_len = (size_t)sqlite3_column_bytes(s, col + 1);
	e.payload = sqlite3_column_blob(s, col + 2);
	e.payload_len = (size_t)sqlite3_column_bytes(s, col + 2);
	c->event_created_at = sqlite3_column_int64(s, col + 3);
	c->traceparent[0] = '\0';
	if (sqlite3_column_type(s, col + 4) == SQLITE_TEXT)
		snprintf(c->traceparent, sizeof(c->traceparent), "%s",
			 (const char *)sqlite3_column_text(s, col + 4));
	e.source = (const char *)sqlite3_column_text(s, col + 5);
	e.source_len = (size_t)sqlite3_column_bytes(s, col + 5);
	e.source_event_id = (const char *)sqlite3_column_text(s, col + 6);
	e.seid_len = e.source_event_id ? (size_t)sqlite3_column_bytes(s, col + 6) : 0;
	e.partition_key = (const char *)sqlite3_column_text(s, col + 7);
	e.pkey_len = e.partition_key ? (size_t)sqlite3_column_bytes(s, col + 7) : 0;
	e.webhook_id = (const char *)sqlite3_column_text(s, col + 8);
	e.wid_len = e.webhook_id ? (size_t)sqlite3_column_bytes(s, col + 8) : 0;
	if (!e.event_type || !e.content_type || store_claim_fill(c, &e))
		return SQLITE_NOMEM;
	return SQLITE_OK;
}

/* A claim reads the due deliveries with their events in one statement, then leases each
 * by rowid: measured against one UPDATE ... RETURNING over a subquery followed by a
 * read of each event (Python's sqlite3 replaying claims, results and ingest of 20,000
 * deliveries under callgrind: 2,599 M -> 2,527 M instructions in sqlite3_step). */
int sq_claim_due(store *st, int64_t now_ms, int64_t lease_ms, size_t limit,
			struct store_claim **items, size_t *n)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->w[W_CLAIM], *lease = sq->w[W_CLAIM_LEASE];
	struct claim_row *rows = NULL;
	struct store_claim *out = NULL;
	size_t count = 0, cap = 0;
	int rc;

	sq_wlock_relaxed(sq);
	rc = sq_tx_begin(sq);
	if (rc != SQLITE_OK)
		goto out;
	sqlite3_bind_int64(s, 1, now_ms);
	sqlite3_bind_int64(s, 2, (int64_t)limit);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_claim *c;
		enum delivery_status status = DELIVERY_NEW;
		const char *name = (const char *)sqlite3_column_text(s, 4);
		struct claim_row *more = sq_grow(rows, &cap, count, sizeof(*rows));

		if (!more) {
			rc = SQLITE_NOMEM;
			goto out;
		}
		rows = more;
		c = &rows[count].c;
		memset(c, 0, sizeof(*c));
		rows[count].rowid = sqlite3_column_int64(s, 0);
		sq_col_id(s, 1, c->delivery_id);
		sq_col_id(s, 2, c->event_id);
		sq_col_id(s, 3, c->subscription_id);
		if (name)
			delivery_status_parse(name, &status);
		c->status = status;
		c->replay = sqlite3_column_int(s, 5);
		c->attempt_count = sqlite3_column_int(s, 6);
		c->retry_count = sqlite3_column_int(s, 7);
		rows[count].due = sqlite3_column_int64(s, 8);
		c->delay_actions = sqlite3_column_int(s, 9);
		c->starts_scheduled = sqlite3_column_int(s, 10);
		count++; /* freed below with what it holds */
		if ((rc = claim_event_cols(s, 11, c)) != SQLITE_OK)
			goto out;
	}
	if (rc != SQLITE_DONE) {
		sq_log_stmt_error(s, rc);
		goto out;
	}
	sq_stmt_end(s);
	rc = SQLITE_OK;
	for (size_t i = 0; rc == SQLITE_OK && i < count; i++) {
		sqlite3_bind_text(lease, 1, st->owner, -1, SQLITE_STATIC);
		sqlite3_bind_int64(lease, 2, now_ms + lease_ms);
		sqlite3_bind_int64(lease, 3, rows[i].rowid);
		rc = sq_step_done(lease); /* which clears the bindings */
	}
	if (rc != SQLITE_OK || !count)
		goto out;
	qsort(rows, count, sizeof(*rows), claim_row_cmp);
	out = calloc(count, sizeof(*out));
	if (!out) {
		rc = sq_log_nomem();
		goto out;
	}
	for (size_t i = 0; i < count; i++)
		out[i] = rows[i].c;
out:
	sq_stmt_end(s);
	rc = sq_tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	if (rc != STORE_OK) {
		/* the claims' event parts (out, when there, holds copies of the pointers) */
		for (size_t i = 0; i < count; i++)
			store_claim_release(&rows[i].c);
		free(rows);
		free(out);
		return rc;
	}
	free(rows);
	*items = out; /* NULL when nothing was due */
	*n = out ? count : 0;
	return STORE_OK;
}

int sq_next_due(store *st, int64_t *at_ms)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->w[W_NEXT_DUE];
	int rc;

	pthread_mutex_lock(&sq->wmu);
	rc = sq_step_row(s);
	if (rc == SQLITE_ROW) {
		*at_ms = sqlite3_column_int64(s, 0);
		sq_stmt_end(s);
		rc = SQLITE_OK;
	}
	pthread_mutex_unlock(&sq->wmu);
	return sq_store_code(rc);
}

/* Records attempt a of delivery_id under its number; append: after the delivery's last
 * recorded attempt instead (a round whose lease was lost, whose numbers another round may
 * have taken). A number already taken (by such a round, recorded first) also appends:
 * every request sent stays in the history. A recorded attempt is counted for sub (NULL:
 * the delivery is gone, nothing is recorded). */
static int record_attempt(struct sq *sq, const char *delivery_id, const char *sub,
			  const struct store_attempt *a, int append)
{
	sqlite3_stmt *s = sq->w[append ? W_ATTEMPT_APPEND : W_ATTEMPT_INSERT];
	int rc;

	sqlite3_bind_text(s, 1, delivery_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, a->n);
	sqlite3_bind_text(s, 3, attempt_kind_name(a->kind), -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 4, a->started_at);
	sqlite3_bind_int64(s, 5, a->duration_ms);
	sqlite3_bind_int(s, 6, a->code);
	sq_bind_error_text(s, 7, a->message);
	sq_bind_error_text(s, 8, a->cause);
	sqlite3_bind_int(s, 9, a->not_sent ? 1 : 0);
	rc = sq_step_done(s);
	if (rc != SQLITE_OK)
		return rc;
	if (sqlite3_changes(sq->wdb) == 0)
		return append ? SQLITE_OK : record_attempt(sq, delivery_id, sub, a, 1);
	return sub ? sq_counts_add(&sq->counts, sub, a) : SQLITE_OK;
}

/* The subscription of delivery id into sub; "" when the delivery is gone. */
static int delivery_sub(struct sq *sq, const char *id, char sub[UUID_STR_LEN])
{
	sqlite3_stmt *s = sq->w[W_DELIVERY_SUB];
	int rc;

	sub[0] = '\0';
	sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
	rc = sq_step_row(s);
	if (rc != SQLITE_ROW)
		return rc == SQLITE_DONE ? SQLITE_OK : rc;
	sq_col_id(s, 0, sub);
	sq_stmt_end(s);
	return SQLITE_OK;
}

static int record_one(struct sq *sq, const char *owner, const struct store_result *r,
		      int64_t now)
{
	sqlite3_stmt *s = sq->w[W_RESULT];
	int rc;

	sqlite3_bind_text(s, 1, r->delivery_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, delivery_status_name(r->status), -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 3, r->replay ? 1 : 0);
	sqlite3_bind_int(s, 4, r->attempt_count);
	sqlite3_bind_int(s, 5, r->retry_count);
	sq_bind_time(s, 6, r->next_attempt_at);
	sq_bind_time(s, 7, r->processed_at);
	/* No error code means no error: message and cause are not kept either; -1 keeps
	 * whatever error the delivery shows already. */
	sqlite3_bind_int(s, 13, r->last_code == -1);
	if (r->last_code > 0) {
		sqlite3_bind_int(s, 8, r->last_code);
		sq_bind_error_text(s, 9, r->last_message);
		sq_bind_error_text(s, 10, r->last_cause);
	} else {
		sqlite3_bind_null(s, 8);
		sqlite3_bind_null(s, 9);
		sqlite3_bind_null(s, 10);
	}
	sqlite3_bind_int64(s, 11, now);
	sqlite3_bind_text(s, 12, owner, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 14, r->delay_actions);
	sqlite3_bind_int(s, 15, r->dead_letter ? 1 : 0);
	rc = sq_step_done(s);
	if (rc != SQLITE_OK)
		return rc;
	int lost = sqlite3_changes(sq->wdb) == 0;
	if (lost)
		log_warn("store: result for delivery %s ignored: its lease was lost (its %zu "
			 "attempts are recorded)", r->delivery_id, r->n_attempts);
	/* The subscription the attempts are counted for. UPDATE ... RETURNING would give
	 * it, but SQLite runs RETURNING through a temporary table: +37,000 instructions per
	 * delivery (callgrind, bench/quick.sh 10000), twice the whole results write. */
	const char *sub = r->subscription_id;
	char found[UUID_STR_LEN];
	if (!sub && r->n_attempts) {
		if ((rc = delivery_sub(sq, r->delivery_id, found)) != SQLITE_OK)
			return rc;
		sub = found[0] ? found : NULL;
	}
	for (size_t i = 0; i < r->n_attempts; i++)
		if ((rc = record_attempt(sq, r->delivery_id, sub, &r->attempts[i], lost)) !=
		    SQLITE_OK)
			return rc;
	if (lost)
		return SQLITE_OK;
	if (r->ordered_key && (r->status == DELIVERY_PROCESSED || !r->next_attempt_at)) {
		s = sq->w[W_PROMOTE];
		sqlite3_bind_text(s, 1, r->delivery_id, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, now);
		if ((rc = sq_step_done(s)) != SQLITE_OK)
			return rc;
	}
	return SQLITE_OK;
}

/* Results are written one statement each: grouping them 32 to an UPDATE ... FROM
 * (VALUES ...) was measured (bench: claim and record 20,000 deliveries under callgrind)
 * at 82,200 against 81,100 instructions per delivery, the b-tree work of the update and
 * the attempt row being nearly all of it; not worth the code. */
int sq_record_results(store *st, const struct store_result *results, size_t n)
{
	struct sq *sq = sq_of(st);
	int64_t now = clock_now_ms();
	int rc;

	sq_wlock_relaxed(sq);
	rc = sq_tx_begin(sq);
	sq->counts.n_m = sq->counts.n_e = 0;
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++)
		rc = record_one(sq, st->owner, &results[i], now);
	if (rc == SQLITE_OK)
		rc = sq_counts_write(sq, st->owner);
	rc = sq_tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	return rc;
}

int sq_leases_renew(store *st, const char (*ids)[UUID_STR_LEN], const int64_t *until,
		    size_t n, unsigned char *renewed)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->w[W_LEASE_RENEW];
	int rc;

	sq_wlock_relaxed(sq);
	rc = sq_tx_begin(sq);
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
		sqlite3_bind_text(s, 1, ids[i], -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, until[i]);
		sqlite3_bind_text(s, 3, st->owner, -1, SQLITE_STATIC);
		rc = sq_step_done(s);
		renewed[i] = rc == SQLITE_OK && sqlite3_changes(sq->wdb) > 0;
	}
	rc = sq_tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	if (rc != STORE_OK)
		memset(renewed, 0, n);
	return rc;
}

/* ---- dead-letter marks ----------------------------------------------------- */

int sq_dead_letters(store *st, size_t limit, struct store_dead_letter **items, size_t *n)
{
	static const char sql[] =
		"SELECT d.id, d.event_id, d.subscription_id, d.attempt_count, d.last_code,"
		" d.last_message, d.last_cause, e.event_type, e.content_type, e.payload,"
		" e.created_at, e.traceparent, e.source, e.source_event_id, e.partition_key,"
		" e.webhook_id FROM deliveries d JOIN events e ON e.id = d.event_id"
		" WHERE d.dead_letter_pending = 1 ORDER BY d.id LIMIT ?1";
	struct sq *sq = sq_of(st);
	struct store_dead_letter *out = NULL;
	sqlite3_stmt *s = NULL;
	size_t count = 0, cap = 0;
	int rc;

	struct sq_reader *rd = sq_read_lock(sq);
	rc = sqlite3_prepare_v2(rd->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s", sqlite3_errmsg(rd->db));
		goto out;
	}
	sqlite3_bind_int64(s, 1, (int64_t)limit);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_dead_letter *more = sq_grow(out, &cap, count, sizeof(*out));
		if (!more) {
			rc = sq_log_nomem();
			goto out;
		}
		out = more;
		struct store_dead_letter *x = &out[count];
		struct store_claim *c = &x->claim;
		memset(x, 0, sizeof(*x));
		sq_col_id(s, 0, c->delivery_id);
		sq_col_id(s, 1, c->event_id);
		sq_col_id(s, 2, c->subscription_id);
		c->status = DELIVERY_FAILED;
		c->attempt_count = sqlite3_column_int(s, 3);
		x->last_code = sqlite3_column_int(s, 4);
		c->event_created_at = sqlite3_column_int64(s, 10);
		if (sqlite3_column_type(s, 11) == SQLITE_TEXT)
			snprintf(c->traceparent, sizeof(c->traceparent), "%s",
				 (const char *)sqlite3_column_text(s, 11));
		struct store_claim_event e = {
			.event_type = (const char *)sqlite3_column_text(s, 7),
			.type_len = (size_t)sqlite3_column_bytes(s, 7),
			.content_type = (const char *)sqlite3_column_text(s, 8),
			.ctype_len = (size_t)sqlite3_column_bytes(s, 8),
			.payload = sqlite3_column_blob(s, 9),
			.payload_len = (size_t)sqlite3_column_bytes(s, 9),
			.source = (const char *)sqlite3_column_text(s, 12),
			.source_len = (size_t)sqlite3_column_bytes(s, 12),
			.source_event_id = (const char *)sqlite3_column_text(s, 13),
			.seid_len = (size_t)sqlite3_column_bytes(s, 13),
			.partition_key = (const char *)sqlite3_column_text(s, 14),
			.pkey_len = (size_t)sqlite3_column_bytes(s, 14),
			.webhook_id = (const char *)sqlite3_column_text(s, 15),
			.wid_len = (size_t)sqlite3_column_bytes(s, 15),
		};
		if (!e.event_type || !e.content_type || store_claim_fill(c, &e) ||
		    sq_col_dup(s, 5, &x->last_message) || sq_col_dup(s, 6, &x->last_cause)) {
			count++; /* freed below with what it holds */
			rc = SQLITE_NOMEM;
			goto out;
		}
		count++;
	}
	if (rc != SQLITE_DONE)
		sq_log_stmt_error(s, rc);
	else
		rc = SQLITE_OK;
out:
	sqlite3_finalize(s);
	sq_read_unlock(rd);
	if (rc != SQLITE_OK) {
		store_dead_letters_free(out, count);
		return sq_store_code(rc);
	}
	*items = out;
	*n = count;
	return STORE_OK;
}

int sq_dead_letters_done(store *st, const char (*ids)[UUID_STR_LEN], size_t n)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	int rc;

	rc = sq_wlock(sq);
	if (rc == SQLITE_OK)
		rc = sq_tx_begin(sq);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(sq->wdb, "UPDATE deliveries SET dead_letter_pending = 0"
						 " WHERE id = ?1", -1, &s, NULL);
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
		sqlite3_bind_text(s, 1, ids[i], -1, SQLITE_STATIC);
		rc = sq_step_done(s);
	}
	sqlite3_finalize(s);
	rc = sq_tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	return rc;
}

/* Clears leases with the given statement; now_ms is bound when the statement takes it. */
static int clear_leases(struct sq *sq, sqlite3_stmt *s, int64_t now_ms, size_t *n)
{
	int rc;

	sq_wlock(sq);
	if (sqlite3_bind_parameter_count(s) > 0)
		sqlite3_bind_int64(s, 1, now_ms);
	rc = sq_step_done(s);
	if (rc == SQLITE_OK)
		*n = (size_t)sqlite3_changes(sq->wdb);
	pthread_mutex_unlock(&sq->wmu);
	return sq_store_code(rc);
}

int sq_reap_leases(store *st, int64_t now_ms, size_t *n)
{
	struct sq *sq = sq_of(st);

	return clear_leases(sq, sq->w[W_REAP], now_ms, n);
}

int sq_release_all(store *st, size_t *n)
{
	struct sq *sq = sq_of(st);

	/* The owner lock makes this process the only one with leases to lose. */
	return clear_leases(sq, sq->w[W_RELEASE_ALL], 0, n);
}

/* ---- per-key ordering ---------------------------------------------------- */

/* A dead delivery earlier than D of D's key. */
#define DEAD_BEFORE(D)                                                                   \
	"EXISTS (SELECT 1 FROM deliveries p WHERE p.subscription_id = " D ".subscription_id" \
	" AND p.order_key = " D ".order_key AND p.id < " D ".id"                            \
	" AND p.status <> 'PROCESSED' AND p.status = 'FAILED'"                              \
	" AND p.next_attempt_at IS NULL AND p.lease_until IS NULL)"

/* An earlier delivery of D's key still to be done (a dead one not counted when the
 * subscription S passes dead ones over): D must wait its turn. */
#define PENDING_BEFORE(D, S)                                                             \
	"EXISTS (SELECT 1 FROM deliveries p WHERE p.subscription_id = " D ".subscription_id" \
	" AND p.order_key = " D ".order_key AND p.id < " D ".id"                            \
	" AND p.status <> 'PROCESSED' AND NOT (" S ".ordering = 2 AND p.status = 'FAILED'"  \
	" AND p.next_attempt_at IS NULL AND p.lease_until IS NULL))"

/* Pending deliveries of ordered subscriptions: blocked 1 behind a dead one of their key
 * (blocking subscriptions), else 2 behind an unfinished one. */
static const char park_dead_sql[] =
	"UPDATE deliveries SET blocked = 1, next_attempt_at = NULL WHERE rowid IN ("
	" SELECT d.rowid FROM subscriptions s JOIN deliveries d ON d.subscription_id = s.id"
	" WHERE s.ordering = 1 AND d.order_key IS NOT NULL AND d.status <> 'PROCESSED'"
	" AND d.status = 'NEW' AND d.blocked <> 1 AND d.lease_until IS NULL"
	" AND " DEAD_BEFORE("d") ")";

static const char park_wait_sql[] =
	"UPDATE deliveries SET blocked = 2, next_attempt_at = NULL WHERE rowid IN ("
	" SELECT d.rowid FROM deliveries d INDEXED BY deliveries_due"
	" JOIN subscriptions s ON s.id = d.subscription_id"
	" WHERE d.lease_until IS NULL AND d.next_attempt_at IS NOT NULL"
	" AND s.ordering > 0 AND d.order_key IS NOT NULL AND d.status <> 'PROCESSED'"
	" AND d.status = 'NEW' AND d.blocked = 0 AND " PENDING_BEFORE("d", "s") ")";

/* Parked deliveries whose reason is gone: due now (the claim still checks the order). */
static const char unpark_sql[] =
	"UPDATE deliveries SET blocked = 0, next_attempt_at = ?1 WHERE rowid IN ("
	" SELECT d.rowid FROM deliveries d LEFT JOIN subscriptions s"
	"  ON s.id = d.subscription_id AND s.ordering > 0"
	" WHERE d.blocked > 0 AND NOT (s.id IS NOT NULL AND CASE d.blocked"
	"  WHEN 1 THEN s.ordering = 1 AND " DEAD_BEFORE("d")
	"  ELSE " PENDING_BEFORE("d", "s") " END))";

static int run_sweep(struct sq *sq, const char *sql, int64_t now_ms, size_t *n)
{
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(sq->wdb, sql, -1, &s, NULL);

	*n = 0;
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s", sqlite3_errmsg(sq->wdb));
		return rc;
	}
	if (sqlite3_bind_parameter_count(s) > 0)
		sqlite3_bind_int64(s, 1, now_ms);
	rc = sq_step_done(s);
	if (rc == SQLITE_OK)
		*n = (size_t)sqlite3_changes(sq->wdb);
	sqlite3_finalize(s);
	return rc;
}

/* Whether a subscription keeps per-key order (*yes). */
static int any_ordered(struct sq *sq, int *yes)
{
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(sq->wdb,
				    "SELECT 1 FROM subscriptions WHERE ordering > 0 LIMIT 1", -1,
				    &s, NULL);

	*yes = 0;
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s", sqlite3_errmsg(sq->wdb));
		return rc;
	}
	rc = sqlite3_step(s);
	*yes = rc == SQLITE_ROW;
	rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? SQLITE_OK : rc;
	sqlite3_finalize(s);
	return rc;
}

/* The parking sweeps walk every due delivery (the due index has no subscription in it),
 * under the write lock: with 120,000 due, ~19 ms every second, ingest waiting behind
 * it. Without an ordered subscription there is nothing to park, so they do not
 * run; unparking runs regardless (a subscription whose ordering was switched off
 * releases what it parked). */
int sq_order_sweep(store *st, int64_t now_ms, int full, size_t *parked, size_t *unparked)
{
	struct sq *sq = sq_of(st);
	size_t waiting = 0;
	int ordered = 0;

	*parked = *unparked = 0;
	sq_wlock(sq);
	int rc = any_ordered(sq, &ordered);
	if (rc == SQLITE_OK && ordered && full)
		rc = run_sweep(sq, park_dead_sql, now_ms, parked);
	if (rc == SQLITE_OK && ordered)
		rc = run_sweep(sq, park_wait_sql, now_ms, &waiting);
	if (full && rc == SQLITE_OK)
		rc = run_sweep(sq, unpark_sql, now_ms, unparked);
	pthread_mutex_unlock(&sq->wmu);
	return sq_store_code(rc);
}
