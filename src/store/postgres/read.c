/* read.c: the PostgreSQL backend's reads: one event, one delivery, attempts, filtered
 * and paged lists, and the stats. Must not write. */
#include "store/postgres/pg_int.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

/* ---- reading ------------------------------------------------------------- */

/* Runs a reading statement on the API connection. */
PGresult *pg_read_run(struct pg *pg, enum stmt k, const struct params *p, int *rc)
{
	struct pgconn *c;
	PGresult *res;

	if (!(c = pg_take(pg, ROLE_API, rc)))
		return NULL;
	res = pg_run(pg, c, k, p, rc);
	pg_give(c);
	return res;
}

/* Runs a reading statement made at run time (a filtered list) on the API connection. */
PGresult *pg_read_sql(struct pg *pg, const char *sql, const struct params *p, int *rc)
{
	struct pgconn *c;
	PGresult *res;

	if (!(c = pg_take(pg, ROLE_API, rc)))
		return NULL;
	res = pg_run_sql(pg, c, sql, p, rc);
	pg_give(c);
	return res;
}

int pg_get_one(struct pg *pg, enum stmt k, const char *id, pg_row_cb read, void *out)
{
	struct params p = {0};
	PGresult *res;
	int rc;

	pg_p_text(&p, id);
	res = pg_read_run(pg, k, &p, &rc);
	if (!res)
		return rc;
	if (PQntuples(res) == 0)
		rc = STORE_NOT_FOUND;
	else
		rc = read(res, 0, out) ? STORE_ERROR : STORE_OK;
	PQclear(res);
	return rc;
}

/* A pg_row_cb for struct store_delivery (DELIVERY_COLUMNS). */
static int read_delivery(const PGresult *r, int row, void *out)
{
	struct store_delivery *d = out;
	enum delivery_status status = DELIVERY_NEW;
	const char *name = PQgetvalue(r, row, 4);

	memset(d, 0, sizeof(*d));
	pg_get_id(r, row, 0, d->id);
	pg_get_id(r, row, 1, d->event_id);
	pg_get_id(r, row, 2, d->subscription_id);
	if (delivery_status_parse(name, &status) != 0)
		log_warn("store: delivery %s has unknown status %s", d->id, name);
	d->status = status;
	d->replay = (int)pg_get_int(r, row, 5);
	d->attempt_count = (int)pg_get_int(r, row, 6);
	d->retry_count = (int)pg_get_int(r, row, 7);
	d->next_attempt_at = pg_get_int(r, row, 8);
	d->created_at = pg_get_int(r, row, 9);
	d->updated_at = pg_get_int(r, row, 10);
	d->processed_at = pg_get_int(r, row, 11);
	d->last_code = (int)pg_get_int(r, row, 12);
	d->lease_until = pg_get_int(r, row, 16);
	d->blocked = pg_get_int(r, row, 17) == 1; /* 2, waiting its turn, is not shown */
	d->failing_since = pg_get_int(r, row, 18);
	if (pg_get_dup(r, row, 3, &d->event_type) || pg_get_dup(r, row, 13, &d->last_message) ||
	    pg_get_dup(r, row, 14, &d->last_cause) || pg_get_dup(r, row, 15, &d->lease_owner)) {
		store_delivery_free(d);
		return -1;
	}
	return 0;
}

/* Every row of res as deliveries (returned array); STORE_ERROR when memory runs out. */
int pg_read_rows(const PGresult *res, size_t size, pg_row_cb read, void **items, size_t *n)
{
	size_t count = (size_t)PQntuples(res);
	char *out;

	*items = NULL;
	*n = 0;
	if (!count)
		return STORE_OK;
	if (!(out = calloc(count, size)))
		return STORE_ERROR;
	*items = out;
	for (size_t i = 0; i < count; i++) {
		if (read(res, (int)i, out + i * size))
			return STORE_ERROR;
		(*n)++;
	}
	return STORE_OK;
}

/* Every row of res as a delivery (returned in *items, *n). */
static int read_deliveries(const PGresult *res, struct store_delivery **items, size_t *n)
{
	int rc = pg_read_rows(res, sizeof(**items), read_delivery, (void **)items, n);
	if (rc != STORE_OK) {
		store_deliveries_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return rc;
}

/* A pg_row_cb for struct store_event (S_EVENT_GET's columns). */
static int read_event(const PGresult *res, int row, void *out)
{
	struct store_event *ev = out;

	memset(ev, 0, sizeof(*ev));
	pg_get_id(res, row, 0, ev->id);
	ev->created_at = pg_get_int(res, row, 7);
	ev->payload_len = (size_t)PQgetlength(res, row, 6);
	ev->payload = malloc(ev->payload_len + 1);
	if (!ev->payload || pg_get_dup(res, row, 1, &ev->event_type) ||
	    pg_get_dup(res, row, 2, &ev->source) || pg_get_dup(res, row, 3, &ev->source_event_id) ||
	    pg_get_dup(res, row, 4, &ev->partition_key) || pg_get_dup(res, row, 5, &ev->content_type) ||
	    pg_get_dup(res, row, 8, &ev->webhook_id)) {
		store_event_free(ev);
		return -1;
	}
	if (ev->payload_len)
		memcpy(ev->payload, PQgetvalue(res, row, 6), ev->payload_len);
	((char *)ev->payload)[ev->payload_len] = '\0';
	return 0;
}

/* A pg_row_cb for S_EVENT_GET: read_event's columns, then the envelope and the trace
 * context. */
static int read_event_whole(const PGresult *res, int row, void *out)
{
	struct store_event *ev = out;
	if (read_event(res, row, ev))
		return -1;
	if (!PQgetisnull(res, row, 10))
		snprintf(ev->traceparent, sizeof(ev->traceparent), "%.*s",
			 PQgetlength(res, row, 10), PQgetvalue(res, row, 10));
	if (PQgetisnull(res, row, 9))
		return 0;
	ev->envelope_len = (size_t)PQgetlength(res, row, 9);
	if (!(ev->envelope = malloc(ev->envelope_len + 1))) {
		store_event_free(ev);
		return -1;
	}
	if (ev->envelope_len)
		memcpy(ev->envelope, PQgetvalue(res, row, 9), ev->envelope_len);
	return 0;
}

int pg_event_get(store *st, const char *id, struct store_event *ev)
{
	return pg_get_one(pg_of(st), S_EVENT_GET, id, read_event_whole, ev);
}

int pg_event_deliveries(store *st, const char *event_id, struct store_delivery **items,
			       size_t *n)
{
	struct params p = {0};
	PGresult *res;
	int rc;

	pg_p_text(&p, event_id);
	res = pg_read_run(pg_of(st), S_EVENT_DELIVERIES, &p, &rc);
	if (!res)
		return rc;
	rc = read_deliveries(res, items, n);
	PQclear(res);
	return rc;
}

int pg_delivery_get(store *st, const char *id, struct store_delivery *d)
{
	return pg_get_one(pg_of(st), S_DELIVERY_GET, id, read_delivery, d);
}

/* A pg_row_cb for struct store_attempt_row (S_ATTEMPTS' columns). */
static int read_attempt(const PGresult *res, int r, void *out)
{
	struct store_attempt_row *a = out;

	memset(a, 0, sizeof(*a));
	a->n = (int)pg_get_int(res, r, 0);
	a->kind = attempt_kind_parse(PQgetvalue(res, r, 1));
	a->started_at = pg_get_int(res, r, 2);
	a->duration_ms = pg_get_int(res, r, 3);
	a->code = (int)pg_get_int(res, r, 4);
	a->not_sent = (int)pg_get_int(res, r, 7); /* binary: one byte */
	if (pg_get_dup(res, r, 5, &a->message) || pg_get_dup(res, r, 6, &a->cause)) {
		free(a->message);
		free(a->cause);
		return -1;
	}
	return 0;
}

int pg_delivery_attempts(store *st, const char *id, struct store_attempt_row **items,
			 size_t *n)
{
	struct store_attempt_row *rows = NULL;
	struct params p = {0};
	PGresult *res;
	size_t count = 0;
	int rc;

	pg_p_text(&p, id);
	res = pg_read_run(pg_of(st), S_ATTEMPTS, &p, &rc);
	if (!res)
		return rc;
	rc = pg_read_rows(res, sizeof(*rows), read_attempt, (void **)&rows, &count);
	PQclear(res);
	if (rc != STORE_OK) {
		store_attempts_free(rows, count);
		return rc;
	}
	*items = rows;
	*n = count;
	return STORE_OK;
}

/* Appends a formatted fragment; the buffers are sized for every fragment at once. */
__attribute__((format(printf, 3, 4)))
static void sql_add(char *sql, size_t size, const char *fmt, ...)
{
	size_t len = strlen(sql);
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(sql + len, size - len, fmt, ap);
	va_end(ap);
}

/* A filter by state (new, failed, dead, failing) is answered from the queue's rows
 * (schema/020_queue.sql: every delivery not delivered, with the indexes of each state),
 * any other from every delivery. */
static int filter_on_queue(const struct delivery_filter *f)
{
	return (f->has_status && f->status != DELIVERY_PROCESSED) || f->dead_only ||
	       f->failing_since_ms;
}

#define QUEUE_FROM " FROM outboxd.queue q JOIN outboxd.deliveries d ON d.id = q.id"

/* The WHERE conditions of a delivery filter (fixed fragments, values as parameters),
 * appended to sql, and their values to p; t is the table ("q." or "d.") of the columns
 * the queue has as well. like (returned, free it) holds the LIKE pattern of an
 * event-type glob. */
static int filter_sql(const struct delivery_filter *f, const char *t, char *sql, size_t size,
		      struct params *p, char **like)
{
	*like = NULL;
	if (f->has_status) {
		pg_p_text(p, delivery_status_name(f->status));
		sql_add(sql, size, " AND %sstatus = $%d", t, p->n);
	}
	/* dead_only and failing_since_ms are answered from the queue (filter_on_queue) */
	if (f->dead_only)
		sql_add(sql, size, " AND q.status = 'FAILED' AND q.next_attempt_at IS NULL");
	if (f->subscription_id) {
		pg_p_text(p, f->subscription_id);
		sql_add(sql, size, " AND %ssubscription_id = $%d", t, p->n);
	}
	if (f->event_type && f->event_type_glob) {
		if (!(*like = malloc(2 * strlen(f->event_type) + 1)))
			return -1;
		store_glob_to_like(f->event_type, *like);
		pg_p_text(p, *like);
		sql_add(sql, size, " AND %sevent_type LIKE $%d ESCAPE '\\'", t, p->n);
	} else if (f->event_type) {
		pg_p_text(p, f->event_type);
		sql_add(sql, size, " AND %sevent_type = $%d", t, p->n);
	}
	/* strpos(), not LIKE: '%' and '_' in the search text match themselves. */
	if (f->q && *f->q) {
		pg_p_text(p, f->q);
		sql_add(sql, size,
			" AND (strpos(d.last_message, $%d) > 0 OR strpos(d.last_cause, $%d) > 0)",
			p->n, p->n);
	}
	if (f->has_code) {
		pg_p_i64(p, f->code);
		sql_add(sql, size, " AND d.last_code = $%d", p->n);
	}
	if (f->source) {
		pg_p_text(p, f->source);
		sql_add(sql, size, " AND EXISTS (SELECT 1 FROM outboxd.events e"
			" WHERE e.id = d.event_id AND e.source = $%d)", p->n);
	}
	if (f->event_id) {
		pg_p_text(p, f->event_id);
		sql_add(sql, size, " AND d.event_id = $%d", p->n);
	}
	if (f->from_ms) {
		pg_p_i64(p, f->from_ms);
		sql_add(sql, size, " AND %screated_at >= $%d", t, p->n);
	}
	if (f->to_ms) {
		pg_p_i64(p, f->to_ms);
		sql_add(sql, size, " AND %screated_at < $%d", t, p->n);
	}
	if (f->min_attempts) {
		pg_p_i64(p, f->min_attempts);
		sql_add(sql, size, " AND %sattempt_count >= $%d", t, p->n);
	}
	if (f->failing_since_ms) {
		pg_p_i64(p, f->failing_since_ms);
		sql_add(sql, size, " AND q.status = 'FAILED' AND q.failing_since <= $%d", p->n);
	}
	return 0;
}

int pg_deliveries_list(store *st, const struct delivery_filter *f,
			      struct store_delivery **items, size_t *n, char **next_cursor)
{
	struct pg *pg = pg_of(st);
	const int on_queue = filter_on_queue(f);
	const char *t = on_queue ? "q." : "d.";
	const char *col = store_sort_column(f->sort);
	/* updated_at is the delivery's alone */
	const char *col_t = f->sort == DELIVERY_SORT_UPDATED ? "d." : t;
	const char *dir = f->descending ? "DESC" : "ASC";
	char cursor_id[UUID_STR_LEN], sql[2048];
	int64_t cursor_value = 0;
	struct params p = {0};
	PGresult *res = NULL;
	char *like = NULL;
	size_t count = 0;
	int rc;

	if (f->cursor && store_cursor_parse(f, &cursor_value, cursor_id) != 0)
		return STORE_INVALID;
	snprintf(sql, sizeof(sql), "SELECT " DELIVERY_COLUMNS "%s WHERE true",
		 on_queue ? QUEUE_FROM : DELIVERY_FROM);
	if (filter_sql(f, t, sql, sizeof(sql), &p, &like))
		return STORE_ERROR;
	if (f->cursor) {
		pg_p_i64(&p, cursor_value);
		pg_p_text(&p, cursor_id);
		sql_add(sql, sizeof(sql), " AND (%s%s, %sid) %s ($%d, $%d)", col_t, col, t,
			f->descending ? "<" : ">", p.n - 1, p.n);
	}
	/* One row more than asked tells whether there is a next page. */
	pg_p_i64(&p, (int64_t)f->limit + 1);
	sql_add(sql, sizeof(sql), " ORDER BY %s%s %s, %sid %s LIMIT $%d", col_t, col, dir, t,
		dir, p.n);

	res = pg_read_sql(pg, sql, &p, &rc);
	free(like);
	if (!res)
		return rc;
	rc = read_deliveries(res, items, &count);
	PQclear(res);
	if (rc == STORE_OK && count > f->limit) {
		*next_cursor = store_cursor_after(f, &(*items)[f->limit - 1]);
		if (!*next_cursor)
			rc = STORE_ERROR;
		store_delivery_free(&(*items)[f->limit]);
		count = f->limit;
	}
	if (rc != STORE_OK) {
		store_deliveries_free(*items, count);
		*items = NULL;
		return rc;
	}
	*n = count;
	return STORE_OK;
}

int pg_deliveries_count(store *st, const struct delivery_filter *f, size_t *n)
{
	struct pg *pg = pg_of(st);
	const int on_queue = filter_on_queue(f);
	char sql[2048];
	struct params p = {0};
	PGresult *res = NULL;
	char *like = NULL;
	int rc;

	snprintf(sql, sizeof(sql), "SELECT count(*)%s WHERE true",
		 on_queue ? QUEUE_FROM : " FROM outboxd.deliveries d");
	if (filter_sql(f, on_queue ? "q." : "d.", sql, sizeof(sql), &p, &like))
		return STORE_ERROR;
	res = pg_read_sql(pg, sql, &p, &rc);
	free(like);
	if (res)
		*n = (size_t)pg_get_int(res, 0, 0);
	PQclear(res);
	return rc;
}

/* ---- the event search ---------------------------------------------------- */

/* A pg_row_cb for struct store_event_summary: read_event's columns (the payload NULL),
 * then the four counts. */
static int read_event_summary(const PGresult *res, int row, void *out)
{
	struct store_event_summary *e = out;
	int rc = read_event(res, row, &e->event);

	e->new_count = pg_get_int(res, row, 9);
	e->processed_count = pg_get_int(res, row, 10);
	e->retrying_count = pg_get_int(res, row, 11);
	e->dead_count = pg_get_int(res, row, 12);
	return rc;
}

/* The page of events comes first (events_created or events_type give it in order, or
 * the primary key and the idempotency key find the one event), then each one's
 * deliveries are counted through deliveries_event: the counting never reads more than a
 * page's deliveries. A type glob is a LIKE prefix range on events_type (text_pattern_ops,
 * whatever the database's collation). */
int pg_events_list(store *st, const struct event_filter *f, int64_t before_at,
		   const char *before_id, size_t limit, struct store_event_summary **items,
		   size_t *n)
{
	struct pg *pg = pg_of(st);
	struct params p = {0};
	PGresult *res = NULL;
	char sql[2048], *like = NULL;
	int rc;

	*items = NULL;
	*n = 0;
	snprintf(sql, sizeof(sql),
		 "SELECT e.id, e.event_type, e.source, e.source_event_id, e.partition_key,"
		 " e.content_type, %s, e.created_at, e.webhook_id, c.n_new, c.n_processed,"
		 " c.n_retrying, c.n_dead"
		 " FROM (SELECT id, event_type, source, source_event_id, partition_key, content_type,"
		 " created_at, webhook_id%s FROM outboxd.events WHERE true",
		 f->with_payload ? "e.payload" : "NULL::bytea", f->with_payload ? ", payload" : "");
	if (f->event_type && f->event_type_glob) {
		if (!(like = malloc(2 * strlen(f->event_type) + 1)))
			return STORE_ERROR;
		store_glob_to_like(f->event_type, like);
		pg_p_text(&p, like);
		sql_add(sql, sizeof(sql), " AND event_type LIKE $%d", p.n);
	} else if (f->event_type) {
		pg_p_text(&p, f->event_type);
		sql_add(sql, sizeof(sql), " AND event_type = $%d", p.n);
	}
	const struct {
		const char *text;     /* a text value, or NULL */
		int64_t ms;           /* else a time, 0 = none */
		const char *sql;
	} conds[] = {
		{f->source, 0, " AND source = $%d"},
		{f->source_event_id, 0, " AND source_event_id = $%d"},
		{f->id, 0, " AND id = $%d"},
		{NULL, f->from_ms, " AND created_at >= $%d"},
		{NULL, f->to_ms, " AND created_at < $%d"},
	};
	for (size_t i = 0; i < sizeof(conds) / sizeof(conds[0]); i++) {
		if (conds[i].text)
			pg_p_text(&p, conds[i].text);
		else if (conds[i].ms)
			pg_p_i64(&p, conds[i].ms);
		else
			continue;
		sql_add(sql, sizeof(sql), conds[i].sql, p.n);
	}
	if (before_id) {
		pg_p_i64(&p, before_at);
		pg_p_text(&p, before_id);
		sql_add(sql, sizeof(sql), " AND (created_at, id) < ($%d::bigint, $%d::text)",
			p.n - 1, p.n);
	}
	pg_p_i64(&p, (int64_t)limit);
	sql_add(sql, sizeof(sql), " ORDER BY created_at DESC, id DESC LIMIT $%d) e"
		" CROSS JOIN LATERAL (SELECT"
		" count(*) FILTER (WHERE d.status = 'NEW') AS n_new,"
		" count(*) FILTER (WHERE d.status = 'PROCESSED') AS n_processed,"
		" count(*) FILTER (WHERE d.status = 'FAILED' AND d.next_attempt_at IS NOT NULL)"
		" AS n_retrying,"
		" count(*) FILTER (WHERE d.status = 'FAILED' AND d.next_attempt_at IS NULL) AS n_dead"
		" FROM outboxd.deliveries d WHERE d.event_id = e.id) c"
		" ORDER BY e.created_at DESC, e.id DESC", p.n);

	res = pg_read_sql(pg, sql, &p, &rc);
	free(like);
	if (!res)
		return rc;
	rc = pg_read_rows(res, sizeof(**items), read_event_summary, (void **)items, n);
	PQclear(res);
	if (rc != STORE_OK) {
		store_event_summaries_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return rc;
}

/* ---- stats --------------------------------------------------------------- */

/* The store's counts in one statement; the total (for PROCESSED) as TOTAL says: counted,
 * or 0 when store_stats reuses an earlier PROCESSED count (store/count_cache.h). */
#define COUNTS_SQL(TOTAL)                                                      \
	"SELECT"                                                               \
	" (SELECT count(*) FROM outboxd.queue WHERE status = 'NEW'),"          \
	" " TOTAL ","                                                          \
	" (SELECT count(*) FROM outboxd.queue WHERE status = 'FAILED'"         \
	"   AND next_attempt_at IS NOT NULL),"                                 \
	" (SELECT count(*) FROM outboxd.queue WHERE status = 'FAILED'"         \
	"   AND next_attempt_at IS NULL),"                                     \
	" (SELECT count(*) FROM outboxd.queue WHERE lease_until IS NOT NULL)," \
	" (SELECT count(*) FROM outboxd.queue WHERE lease_until IS NULL"       \
	"   AND next_attempt_at IS NOT NULL AND next_attempt_at <= $1),"       \
	" (SELECT COALESCE(MIN(next_attempt_at), 0) FROM outboxd.queue"        \
	"   WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL"         \
	"   AND next_attempt_at <= $1),"                                       \
	" (SELECT COALESCE(MIN(created_at), 0) FROM outboxd.queue"             \
	"   WHERE status = 'FAILED' AND next_attempt_at IS NULL),"             \
	" (SELECT count(*) FROM outboxd.queue WHERE blocked = 1),"             \
	" (SELECT count(*) FROM (SELECT DISTINCT subscription_id, order_key"   \
	"   FROM outboxd.queue WHERE blocked = 1) b),"                         \
	" (SELECT COALESCE(MIN(failing_since), 0) FROM outboxd.queue"          \
	"   WHERE status = 'FAILED' AND next_attempt_at IS NOT NULL)"

int pg_stats(store *st, int64_t now_ms, int64_t window_ms, int count_processed,
	     struct store_stats *out)
{
	struct pg *pg = pg_of(st);
	struct params p = {0}, w = {0};
	PGresult *counts = NULL, *subs = NULL;
	struct pgconn *c;
	int rc;

	pg_p_i64(&p, now_ms);
	pg_p_i64(&w, store_minute_start(now_ms - window_ms));
	pg_p_i64(&w, now_ms - window_ms);
	if (!(c = pg_take(pg, ROLE_API, &rc)))
		return rc;
	/* One statement, one snapshot. Every part reads the queue (the unfinished and dead
	 * deliveries) by one of its indexes, but the total (the cheapest count of the
	 * deliveries): /metrics runs this on every scrape, and PROCESSED deliveries are
	 * nearly all of a store's rows (one pass over the table with a filter per count
	 * cost ~0.45 us per row), so a large store's PROCESSED count is reused for a while
	 * (store/count_cache.h). */
	counts = pg_run_sql(pg, c,
			    count_processed
				    ? COUNTS_SQL("(SELECT count(*) FROM outboxd.deliveries)")
				    : COUNTS_SQL("0"),
			    &p, &rc);
	/* Per subscription over the window, from the per-minute counts results keep (summed
	 * over the instances that recorded them): its attempts and successes in the minutes
	 * from the one window_ms ago began in, and its newest failure when that started
	 * within the window. */
	if (counts)
		subs = pg_run_sql(pg, c,
			       "SELECT subscription_id, COALESCE(m.attempts, 0),"
			       " COALESCE(m.successes, 0), e.code, e.message, COALESCE(e.at, 0)"
			       " FROM (SELECT subscription_id,"
			       "  sum(succeeded + client_error + server_error)::bigint AS attempts,"
			       "  sum(succeeded)::bigint AS successes FROM outboxd.attempt_minutes"
			       "  WHERE minute >= $1 GROUP BY subscription_id) m"
			       " FULL JOIN (SELECT DISTINCT ON (subscription_id) subscription_id,"
			       "  at, code, message FROM outboxd.attempt_errors WHERE at >= $2"
			       "  ORDER BY subscription_id, at DESC) e USING (subscription_id)"
			       " ORDER BY subscription_id", &w, &rc);
	pg_give(c);
	if (counts) {
		out->new_count = pg_get_int(counts, 0, 0);
		out->retrying_count = pg_get_int(counts, 0, 2);
		out->dead_count = pg_get_int(counts, 0, 3);
		if (count_processed) /* the statuses there are */
			out->processed_count = pg_get_int(counts, 0, 1) - out->new_count -
					       out->retrying_count - out->dead_count;
		out->in_flight = pg_get_int(counts, 0, 4);
		out->due_count = pg_get_int(counts, 0, 5);
		out->oldest_due_at = pg_get_int(counts, 0, 6);
		out->oldest_dead_at = pg_get_int(counts, 0, 7);
		out->blocked_count = pg_get_int(counts, 0, 8);
		out->blocked_keys = pg_get_int(counts, 0, 9);
		out->oldest_failing_since = pg_get_int(counts, 0, 10);
	}
	if (subs && PQntuples(subs) > 0) {
		size_t count = (size_t)PQntuples(subs);

		out->subs = calloc(count, sizeof(*out->subs));
		if (!out->subs)
			rc = STORE_ERROR;
		for (size_t i = 0; out->subs && i < count; i++) {
			struct store_sub_stats *x = &out->subs[i];
			int r = (int)i;

			out->n_subs = i + 1;
			pg_get_id(subs, r, 0, x->subscription_id);
			x->attempts = pg_get_int(subs, r, 1);
			x->successes = pg_get_int(subs, r, 2);
			x->last_code = (int)pg_get_int(subs, r, 3);
			x->last_error_at = pg_get_int(subs, r, 5);
			if (pg_get_dup(subs, r, 4, &x->last_message)) {
				rc = STORE_ERROR;
				break;
			}
		}
	}
	PQclear(counts);
	PQclear(subs);
	if (rc != STORE_OK)
		store_stats_free(out);
	return rc;
}
