/* read.c: the SQLite backend's reads on the reader connection: one event, one
 * delivery, attempts, filtered and paged lists, and the stats. Must not write. */
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

/* ---- reading ------------------------------------------------------------- */

/* An sq_row_cb for struct store_event (R_EVENT_GET's columns). */
static int read_event(sqlite3_stmt *s, void *row)
{
	struct store_event *ev = row;
	const void *payload = sqlite3_column_blob(s, 6);

	memset(ev, 0, sizeof(*ev));
	sq_col_id(s, 0, ev->id);
	ev->created_at = sqlite3_column_int64(s, 7);
	ev->payload_len = (size_t)sqlite3_column_bytes(s, 6);
	ev->payload = malloc(ev->payload_len + 1);
	if (!ev->payload || sq_col_dup(s, 1, &ev->event_type) || sq_col_dup(s, 2, &ev->source) ||
	    sq_col_dup(s, 3, &ev->source_event_id) || sq_col_dup(s, 4, &ev->partition_key) ||
	    sq_col_dup(s, 5, &ev->content_type) || sq_col_dup(s, 8, &ev->webhook_id)) {
		if (!ev->payload)
			sq_log_nomem();
		store_event_free(ev);
		return SQLITE_NOMEM;
	}
	if (ev->payload_len)
		memcpy(ev->payload, payload, ev->payload_len);
	((char *)ev->payload)[ev->payload_len] = '\0';
	return SQLITE_OK;
}

/* An sq_row_cb for R_EVENT_GET: read_event's columns, then the envelope and the trace
 * context. */
static int read_event_whole(sqlite3_stmt *s, void *row)
{
	struct store_event *ev = row;
	int rc = read_event(s, ev);
	if (rc != SQLITE_OK)
		return rc;
	if (sqlite3_column_type(s, 10) != SQLITE_NULL)
		snprintf(ev->traceparent, sizeof(ev->traceparent), "%s",
			 (const char *)sqlite3_column_text(s, 10));
	if (sqlite3_column_type(s, 9) == SQLITE_NULL)
		return SQLITE_OK;
	ev->envelope_len = (size_t)sqlite3_column_bytes(s, 9);
	if (!(ev->envelope = malloc(ev->envelope_len + 1))) {
		store_event_free(ev);
		return sq_log_nomem();
	}
	if (ev->envelope_len)
		memcpy(ev->envelope, sqlite3_column_blob(s, 9), ev->envelope_len);
	return SQLITE_OK;
}

int sq_event_get(store *st, const char *id, struct store_event *ev)
{
	struct sq *sq = sq_of(st);
	return sq_get_one(sq, R_EVENT_GET, id, read_event_whole, ev);
}

int sq_event_deliveries(store *st, const char *event_id,
			       struct store_delivery **items, size_t *n)
{
	struct sq *sq = sq_of(st);
	struct sq_reader *rd;
	sqlite3_stmt *s;
	size_t cap = 0;
	int rc;

	rd = sq_read_lock(sq);
	s = rd->r[R_EVENT_DELIVERIES];
	sqlite3_bind_text(s, 1, event_id, -1, SQLITE_STATIC);
	rc = sq_read_rows(s, sizeof(**items), sq_read_delivery, (void **)items, n, &cap);
	sq_stmt_end(s);
	sq_read_unlock(rd);
	if (rc != SQLITE_OK) {
		store_deliveries_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return sq_store_code(rc);
}

int sq_delivery_get(store *st, const char *id, struct store_delivery *d)
{
	struct sq *sq = sq_of(st);
	return sq_get_one(sq, R_DELIVERY_GET, id, sq_read_delivery, d);
}

/* An sq_row_cb for struct store_attempt_row (R_ATTEMPTS' columns). */
static int read_attempt(sqlite3_stmt *s, void *row)
{
	struct store_attempt_row *a = row;

	memset(a, 0, sizeof(*a));
	a->n = sqlite3_column_int(s, 0);
	a->kind = attempt_kind_parse((const char *)sqlite3_column_text(s, 1));
	a->started_at = sqlite3_column_int64(s, 2);
	a->duration_ms = sqlite3_column_int64(s, 3);
	a->code = sqlite3_column_int(s, 4);
	a->not_sent = sqlite3_column_int(s, 7);
	if (sq_col_dup(s, 5, &a->message) || sq_col_dup(s, 6, &a->cause)) {
		free(a->message);
		free(a->cause);
		return SQLITE_NOMEM;
	}
	return SQLITE_OK;
}

int sq_delivery_attempts(store *st, const char *id, struct store_attempt_row **items,
			 size_t *n)
{
	struct sq *sq = sq_of(st);
	struct sq_reader *rd;
	sqlite3_stmt *s;
	struct store_attempt_row *rows = NULL;
	size_t count = 0, cap = 0;
	int rc;

	rd = sq_read_lock(sq);
	s = rd->r[R_ATTEMPTS];
	sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
	rc = sq_read_rows(s, sizeof(*rows), read_attempt, (void **)&rows, &count, &cap);
	sq_stmt_end(s);
	sq_read_unlock(rd);
	if (rc != SQLITE_OK) {
		store_attempts_free(rows, count);
		return sq_store_code(rc);
	}
	*items = rows;
	*n = count;
	return STORE_OK;
}

/* Appends a constant SQL fragment; the buffer is sized for every fragment at once. */
static void sql_add(char *sql, size_t size, const char *fragment)
{
	size_t len = strlen(sql);

	snprintf(sql + len, size - len, "%s", fragment);
}

/* The WHERE conditions of a delivery filter, appended to sql (constant fragments only);
 * sq_filter_bind binds their values in the same order. */
void sq_filter_sql(const struct delivery_filter *f, char *sql, size_t size)
{
	if (f->has_status)
		sql_add(sql, size, " AND status = ?");
	if (f->dead_only)
		sql_add(sql, size, " AND status = 'FAILED' AND next_attempt_at IS NULL");
	if (f->subscription_id)
		sql_add(sql, size, " AND subscription_id = ?");
	if (f->event_type)
		sql_add(sql, size, f->event_type_glob ? " AND event_type GLOB ?" : " AND event_type = ?");
	/* instr(), not LIKE: '%' and '_' in the search text match themselves. */
	if (f->q && *f->q)
		sql_add(sql, size, " AND (instr(last_message, ?) > 0 OR instr(last_cause, ?) > 0)");
	if (f->has_code)
		sql_add(sql, size, " AND last_code = ?");
	if (f->source)
		sql_add(sql, size, " AND EXISTS (SELECT 1 FROM events e WHERE e.id = deliveries.event_id"
				   " AND e.source = ?)");
	if (f->event_id)
		sql_add(sql, size, " AND event_id = ?");
	if (f->from_ms)
		sql_add(sql, size, " AND created_at >= ?");
	if (f->to_ms)
		sql_add(sql, size, " AND created_at < ?");
	if (f->min_attempts)
		sql_add(sql, size, " AND attempt_count >= ?");
	if (f->failing_since_ms)
		sql_add(sql, size, " AND status = 'FAILED' AND failing_since <= ?");
}

void sq_filter_bind(sqlite3_stmt *s, const struct delivery_filter *f, int *b)
{
	if (f->has_status)
		sqlite3_bind_text(s, (*b)++, delivery_status_name(f->status), -1, SQLITE_STATIC);
	if (f->subscription_id)
		sqlite3_bind_text(s, (*b)++, f->subscription_id, -1, SQLITE_STATIC);
	if (f->event_type)
		sqlite3_bind_text(s, (*b)++, f->event_type, -1, SQLITE_STATIC);
	if (f->q && *f->q) {
		sqlite3_bind_text(s, (*b)++, f->q, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, (*b)++, f->q, -1, SQLITE_STATIC);
	}
	if (f->has_code)
		sqlite3_bind_int(s, (*b)++, f->code);
	if (f->source)
		sqlite3_bind_text(s, (*b)++, f->source, -1, SQLITE_STATIC);
	if (f->event_id)
		sqlite3_bind_text(s, (*b)++, f->event_id, -1, SQLITE_STATIC);
	if (f->from_ms)
		sqlite3_bind_int64(s, (*b)++, f->from_ms);
	if (f->to_ms)
		sqlite3_bind_int64(s, (*b)++, f->to_ms);
	if (f->min_attempts)
		sqlite3_bind_int(s, (*b)++, f->min_attempts);
	if (f->failing_since_ms)
		sqlite3_bind_int64(s, (*b)++, f->failing_since_ms);
}

int sq_deliveries_list(store *st, const struct delivery_filter *f,
			      struct store_delivery **items, size_t *n, char **next_cursor)
{
	struct sq *sq = sq_of(st);
	const char *col = store_sort_column(f->sort);
	const char *dir = f->descending ? "DESC" : "ASC";
	char cursor_id[UUID_STR_LEN];
	int64_t cursor_value = 0;
	sqlite3_stmt *s = NULL;
	size_t count = 0, cap = 0;
	char sql[1536], frag[192];
	int rc, b = 1;

	if (f->cursor && store_cursor_parse(f, &cursor_value, cursor_id) != 0)
		return STORE_INVALID;

	/* Only constant fragments and column names from a fixed table go into the SQL;
	 * every value is bound. */
	snprintf(sql, sizeof(sql), "SELECT " DELIVERY_COLUMNS " FROM deliveries WHERE 1");
	sq_filter_sql(f, sql, sizeof(sql));
	if (f->cursor) {
		snprintf(frag, sizeof(frag), " AND (%s, id) %s (?, ?)", col,
			 f->descending ? "<" : ">");
		sql_add(sql, sizeof(sql), frag);
	}
	snprintf(frag, sizeof(frag), " ORDER BY %s %s, id %s LIMIT ?", col, dir, dir);
	sql_add(sql, sizeof(sql), frag);

	struct sq_reader *rd = sq_read_lock(sq);
	rc = sqlite3_prepare_v2(rd->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s (in: %.60s)", sqlite3_errmsg(rd->db), sql);
		goto out;
	}
	sq_filter_bind(s, f, &b);
	if (f->cursor) {
		sqlite3_bind_int64(s, b++, cursor_value);
		sqlite3_bind_text(s, b++, cursor_id, -1, SQLITE_STATIC);
	}
	/* One row more than asked tells whether there is a next page. */
	sqlite3_bind_int64(s, b++, (int64_t)f->limit + 1);
	rc = sq_read_rows(s, sizeof(**items), sq_read_delivery, (void **)items, &count, &cap);
out:
	sqlite3_finalize(s);
	sq_read_unlock(rd);
	if (rc == SQLITE_OK && count > f->limit) {
		*next_cursor = store_cursor_after(f, &(*items)[f->limit - 1]);
		if (!*next_cursor)
			rc = sq_log_nomem();
		store_delivery_free(&(*items)[f->limit]);
		count = f->limit;
	}
	if (rc != SQLITE_OK) {
		store_deliveries_free(*items, count);
		*items = NULL;
		return sq_store_code(rc);
	}
	*n = count;
	return STORE_OK;
}

/* ---- the event search ---------------------------------------------------- */

/* An sq_row_cb for struct store_event_summary: read_event's columns (the payload NULL),
 * then the four counts. */
static int read_event_summary(sqlite3_stmt *s, void *row)
{
	struct store_event_summary *e = row;
	int rc = read_event(s, &e->event);

	e->new_count = sqlite3_column_int64(s, 9);
	e->processed_count = sqlite3_column_int64(s, 10);
	e->retrying_count = sqlite3_column_int64(s, 11);
	e->dead_count = sqlite3_column_int64(s, 12);
	return rc;
}

/* The page of events comes first (events_created or events_type give it in order, or
 * the primary key and the idempotency key find the one event), then each one's
 * deliveries are counted through deliveries_event: the counting never reads more than a
 * page's deliveries. */
int sq_events_list(store *st, const struct event_filter *f, int64_t before_at,
		   const char *before_id, size_t limit, struct store_event_summary **items,
		   size_t *n)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	size_t cap = 0;
	char sql[1536];
	int rc, b = 1;

	/* Only constant fragments go into the SQL; every value is bound. */
	snprintf(sql, sizeof(sql),
		 "SELECT e.id, e.event_type, e.source, e.source_event_id, e.partition_key,"
		 " e.content_type, %s, e.created_at, e.webhook_id,"
		 " sum(d.status = 'NEW'), sum(d.status = 'PROCESSED'),"
		 " sum(d.status = 'FAILED' AND d.next_attempt_at IS NOT NULL),"
		 " sum(d.status = 'FAILED' AND d.next_attempt_at IS NULL)"
		 " FROM (SELECT id, event_type, source, source_event_id, partition_key, content_type,"
		 " created_at, webhook_id%s FROM events WHERE 1",
		 f->with_payload ? "e.payload" : "NULL", f->with_payload ? ", payload" : "");
	const struct {
		const char *text;     /* a text value, or NULL */
		int64_t ms;           /* else a time, 0 = none */
		const char *sql;
	} conds[] = {
		{f->event_type, 0, f->event_type_glob ? " AND event_type GLOB ?" : " AND event_type = ?"},
		{f->source, 0, " AND source = ?"},
		{f->source_event_id, 0, " AND source_event_id = ?"},
		{f->id, 0, " AND id = ?"},
		{NULL, f->from_ms, " AND created_at >= ?"},
		{NULL, f->to_ms, " AND created_at < ?"},
	};
	const size_t n_conds = sizeof(conds) / sizeof(conds[0]);

	for (size_t i = 0; i < n_conds; i++)
		if (conds[i].text || conds[i].ms)
			sql_add(sql, sizeof(sql), conds[i].sql);
	if (before_id)
		sql_add(sql, sizeof(sql), " AND (created_at, id) < (?, ?)");
	sql_add(sql, sizeof(sql), " ORDER BY created_at DESC, id DESC LIMIT ?) e"
		" LEFT JOIN deliveries d ON d.event_id = e.id"
		" GROUP BY e.id ORDER BY e.created_at DESC, e.id DESC");

	struct sq_reader *rd = sq_read_lock(sq);
	rc = sqlite3_prepare_v2(rd->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s (in: %.60s)", sqlite3_errmsg(rd->db), sql);
		goto out;
	}
	for (size_t i = 0; i < n_conds; i++) {
		if (conds[i].text)
			sqlite3_bind_text(s, b++, conds[i].text, -1, SQLITE_STATIC);
		else if (conds[i].ms)
			sqlite3_bind_int64(s, b++, conds[i].ms);
	}
	if (before_id) {
		sqlite3_bind_int64(s, b++, before_at);
		sqlite3_bind_text(s, b++, before_id, -1, SQLITE_STATIC);
	}
	sqlite3_bind_int64(s, b++, (int64_t)limit);
	rc = sq_read_rows(s, sizeof(**items), read_event_summary, (void **)items, n, &cap);
out:
	sqlite3_finalize(s);
	sq_read_unlock(rd);
	if (rc != SQLITE_OK) {
		store_event_summaries_free(*items, *n);
		*items = NULL;
		*n = 0;
		return sq_store_code(rc);
	}
	return STORE_OK;
}

/* ---- stats --------------------------------------------------------------- */

/* Runs a query whose single row holds int64 columns into out[0..ncols). */
static int int_row(struct sq_reader *rd, const char *sql, int64_t bind1, int64_t *out, int ncols)
{
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(rd->db, sql, -1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s", sqlite3_errmsg(rd->db));
		return rc;
	}
	if (sqlite3_bind_parameter_count(s) > 0)
		sqlite3_bind_int64(s, 1, bind1);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		for (int i = 0; i < ncols; i++)
			out[i] = sqlite3_column_int64(s, i);
		rc = SQLITE_OK;
	} else if (rc == SQLITE_DONE) {
		rc = SQLITE_OK;
	} else {
		sq_log_stmt_error(s, rc);
	}
	sqlite3_finalize(s);
	return rc;
}

static int sub_stats_cmp(const void *a, const void *b)
{
	return strcmp(((const struct store_sub_stats *)a)->subscription_id,
		      ((const struct store_sub_stats *)b)->subscription_id);
}

/* The figures of subscription id: found among the first n_sorted (sorted by id), or a
 * new entry at the end. A search per row kept 10,000 subscriptions' stats near a
 * third of a second (a linear search each); this is a binary one. */
static struct store_sub_stats *sub_stats_for(struct store_stats *out, size_t n_sorted,
					     const char *id, size_t *cap)
{
	struct store_sub_stats *x = store_sub_stats_find(out->subs, n_sorted, id);
	if (x)
		return x;
	struct store_sub_stats *more = sq_grow(out->subs, cap, out->n_subs, sizeof(*more));
	if (!more)
		return NULL;
	out->subs = more;
	x = &out->subs[out->n_subs++];
	memset(x, 0, sizeof(*x));
	snprintf(x->subscription_id, sizeof(x->subscription_id), "%s", id);
	return x;
}

/* The counts by status; the total (for PROCESSED) as TOTAL says: counted, or 0 when
 * store_stats reuses an earlier PROCESSED count (store/count_cache.h). */
#define STATUS_COUNTS_SQL(TOTAL)                                                   \
	"SELECT"                                                                   \
	" (SELECT count(*) FROM deliveries WHERE status <> 'PROCESSED'"            \
	"   AND status = 'NEW'),"                                                  \
	" " TOTAL ","                                                              \
	" (SELECT count(*) FROM deliveries WHERE status = 'FAILED'"                \
	"   AND next_attempt_at IS NOT NULL),"                                     \
	" (SELECT count(*) FROM deliveries WHERE status = 'FAILED'"                \
	"   AND next_attempt_at IS NULL)"

int sq_stats(store *st, int64_t now_ms, int64_t window_ms, int count_processed,
	     struct store_stats *out)
{
	struct sq *sq = sq_of(st);
	int64_t v[4] = {0};
	sqlite3_stmt *s = NULL;
	size_t cap = 0;
	int rc;

	/* Every count here reads a partial index of the unfinished or dead deliveries, but
	 * the total (a count of the smallest index): /metrics runs this on every scrape, and
	 * the PROCESSED deliveries are nearly all of a store's rows, so a large store's
	 * PROCESSED count is reused for a while (store/count_cache.h). The predicates are
	 * spelled as the indexes' (status <> 'PROCESSED', blocked > 0), which SQLite needs to
	 * use a partial index. */
	struct sq_reader *rd = sq_read_lock(sq);
	rc = int_row(rd, count_processed
			       ? STATUS_COUNTS_SQL("(SELECT count(*) FROM deliveries)")
			       : STATUS_COUNTS_SQL("0"), 0, v, 4);
	if (rc != SQLITE_OK)
		goto out;
	out->new_count = v[0];
	out->retrying_count = v[2];
	out->dead_count = v[3];
	if (count_processed)
		out->processed_count = v[1] - v[0] - v[2] - v[3]; /* the statuses there are */
	memset(v, 0, sizeof(v));
	rc = int_row(rd, "SELECT"
		     " (SELECT count(*) FROM deliveries WHERE lease_until IS NOT NULL),"
		     " (SELECT count(*) FROM deliveries WHERE lease_until IS NULL"
		     "   AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?1),"
		     " (SELECT COALESCE(MIN(next_attempt_at), 0) FROM deliveries"
		     "   WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL"
		     "   AND next_attempt_at <= ?1),"
		     " (SELECT COALESCE(MIN(created_at), 0) FROM deliveries"
		     "   INDEXED BY deliveries_dead_sub"
		     "   WHERE status = 'FAILED' AND next_attempt_at IS NULL)", now_ms, v, 4);
	if (rc != SQLITE_OK)
		goto out;
	out->in_flight = v[0];
	out->due_count = v[1];
	out->oldest_due_at = v[2];
	out->oldest_dead_at = v[3];
	memset(v, 0, sizeof(v));
	rc = int_row(rd, "SELECT (SELECT count(*) FROM deliveries"
		     "  WHERE blocked > 0 AND blocked = 1),"
		     " (SELECT count(*) FROM (SELECT DISTINCT subscription_id, order_key"
		     "  FROM deliveries WHERE blocked > 0 AND blocked = 1)),"
		     " (SELECT COALESCE(MIN(failing_since), 0) FROM deliveries"
		     "  WHERE status = 'FAILED' AND next_attempt_at IS NOT NULL)", 0, v, 3);
	if (rc != SQLITE_OK)
		goto out;
	out->blocked_count = v[0];
	out->blocked_keys = v[1];
	out->oldest_failing_since = v[2];

	/* Per subscription over the window, from the per-minute counts (counts.c): its
	 * attempts and successes in the minutes from the one window_ms ago began in, and its
	 * newest failure when that started within the window. */
	rc = sqlite3_prepare_v2(rd->db,
				"SELECT subscription_id, sum(succeeded + client_error + server_error),"
				" sum(succeeded) FROM attempt_minutes WHERE minute >= ?1"
				" GROUP BY subscription_id",
				-1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s", sqlite3_errmsg(rd->db));
		goto out;
	}
	sqlite3_bind_int64(s, 1, store_minute_start(now_ms - window_ms));
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_sub_stats *x =
			sub_stats_for(out, 0, (const char *)sqlite3_column_text(s, 0), &cap);
		if (!x) {
			rc = SQLITE_NOMEM;
			goto out;
		}
		x->attempts = sqlite3_column_int64(s, 1);
		x->successes = sqlite3_column_int64(s, 2);
	}
	rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
	sqlite3_finalize(s);
	s = NULL;
	if (rc != SQLITE_OK)
		goto out;
	if (out->n_subs)
		qsort(out->subs, out->n_subs, sizeof(*out->subs), sub_stats_cmp);
	size_t n_sorted = out->n_subs;
	/* SQLite returns the row of max() for the bare columns. */
	rc = sqlite3_prepare_v2(rd->db,
				"SELECT subscription_id, max(at), code, message FROM attempt_errors"
				" WHERE at >= ?1 GROUP BY subscription_id",
				-1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s", sqlite3_errmsg(rd->db));
		goto out;
	}
	sqlite3_bind_int64(s, 1, now_ms - window_ms);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_sub_stats *x =
			sub_stats_for(out, n_sorted, (const char *)sqlite3_column_text(s, 0), &cap);
		if (!x || sq_col_dup(s, 3, &x->last_message) != SQLITE_OK) {
			rc = SQLITE_NOMEM;
			goto out;
		}
		x->last_error_at = sqlite3_column_int64(s, 1);
		x->last_code = sqlite3_column_int(s, 2);
	}
	rc = rc == SQLITE_DONE ? SQLITE_OK : rc; /* (store_stats sorts what was appended) */
out:
	sqlite3_finalize(s);
	sq_read_unlock(rd);
	if (rc != SQLITE_OK) {
		store_stats_free(out);
		return sq_store_code(rc);
	}
	return STORE_OK;
}
