/* counts.c: the SQLite backend's per-minute attempt counts (attempt_minutes) and newest
 * failures (attempt_errors), kept as results are recorded so that /v1/stats and the
 * console's series read a few rows per minute instead of every attempt of their range.
 *
 * A results batch folds its attempts here (sq_counts_add), then writes one row per
 * (minute, subscription, duration) and one per subscription with a failure, in the
 * batch's transaction (sq_counts_write, with the write connection's W_COUNTS_* statements
 * of conn.c): the counts commit with the attempts they count. Must not read: the batch
 * already knows every value it writes. */
#include "store/sqlite/sqlite_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The outcome class of a code: 0 succeeded (2xx), 1 client error (4xx), 2 any other. */
static int outcome(int code)
{
	return code >= 200 && code <= 299 ? 0 : code >= 400 && code <= 499 ? 1 : 2;
}

int sq_counts_add(struct sq_counts *c, const char *sub, const struct store_attempt *a)
{
	int64_t minute = store_minute_start(a->started_at);
	int k = outcome(a->code);
	struct count_minute *m = NULL;

	/* A batch has few groups (one per distinct duration): the newest first, as a
	 * batch's attempts come roughly in time order. */
	for (size_t i = c->n_m; i-- > 0;)
		if (c->m[i].duration_ms == a->duration_ms && c->m[i].minute == minute &&
		    strcmp(c->m[i].sub, sub) == 0) {
			m = &c->m[i];
			break;
		}
	if (!m) {
		struct count_minute *more = sq_grow(c->m, &c->cap_m, c->n_m, sizeof(*more));
		if (!more)
			return sq_log_nomem();
		c->m = more;
		m = &c->m[c->n_m++];
		memset(m, 0, sizeof(*m));
		m->minute = minute;
		m->duration_ms = a->duration_ms;
		snprintf(m->sub, sizeof(m->sub), "%s", sub);
	}
	m->n[k]++;
	if (k == 0)
		return SQLITE_OK;

	struct count_error *e = NULL;
	for (size_t i = 0; i < c->n_e && !e; i++)
		if (strcmp(c->e[i].sub, sub) == 0)
			e = &c->e[i];
	if (!e) {
		struct count_error *more = sq_grow(c->e, &c->cap_e, c->n_e, sizeof(*more));
		if (!more)
			return sq_log_nomem();
		c->e = more;
		e = &c->e[c->n_e++];
		memset(e, 0, sizeof(*e));
		snprintf(e->sub, sizeof(e->sub), "%s", sub);
		e->at = INT64_MIN;
	}
	if (a->started_at >= e->at) {
		e->at = a->started_at;
		e->code = a->code;
		e->message = a->message;
	}
	return SQLITE_OK;
}

int sq_counts_write(struct sq *sq, const char *owner)
{
	const struct sq_counts *c = &sq->counts;
	int rc = SQLITE_OK;

	for (size_t i = 0; rc == SQLITE_OK && i < c->n_m; i++) {
		sqlite3_stmt *s = sq->w[W_COUNTS_MINUTE];
		const struct count_minute *m = &c->m[i];
		sqlite3_bind_int64(s, 1, m->minute);
		sqlite3_bind_text(s, 2, m->sub, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 3, m->duration_ms);
		sqlite3_bind_text(s, 4, owner, -1, SQLITE_STATIC);
		for (int k = 0; k < 3; k++)
			sqlite3_bind_int64(s, 5 + k, m->n[k]);
		rc = sq_step_done(s);
	}
	for (size_t i = 0; rc == SQLITE_OK && i < c->n_e; i++) {
		sqlite3_stmt *s = sq->w[W_COUNTS_ERROR];
		const struct count_error *e = &c->e[i];
		sqlite3_bind_text(s, 1, e->sub, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, owner, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 3, e->at);
		sqlite3_bind_int(s, 4, e->code);
		sq_bind_error_text(s, 5, e->message);
		rc = sq_step_done(s);
	}
	return rc;
}

void sq_counts_free(struct sq *sq)
{
	free(sq->counts.m);
	free(sq->counts.e);
}

int sq_attempt_counts_prune(store *st, int64_t before_ms)
{
	struct sq *sq = sq_of(st);
	int rc;

	sq_wlock(sq);
	rc = sq_tx_begin(sq);
	for (int k = W_COUNTS_PRUNE_MINUTES; rc == SQLITE_OK && k <= W_COUNTS_PRUNE_ERRORS; k++) {
		sqlite3_bind_int64(sq->w[k], 1, before_ms);
		rc = sq_step_done(sq->w[k]);
	}
	rc = sq_tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	return rc;
}
