/* admin.c: the SQLite backend's operator writes: replays, purges, cleanup, counts and
 * purges by filter, subscriptions, operator jobs and the audit log. */
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

/* ---- operator actions ---------------------------------------------------- */

int sq_replay(store *st, const char (*ids)[UUID_STR_LEN], size_t n, int force,
		     enum store_replay_outcome *outcomes, size_t *replayed)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *check = sq->w[W_DELIVERY_STATE];
	int64_t now = clock_now_ms();
	size_t done = 0;
	int rc;

	sq_wlock(sq);
	rc = sq_tx_begin(sq);
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
		enum store_replay_outcome outcome = REPLAY_NOT_FAILED;
		enum delivery_status status = DELIVERY_NEW;
		const char *name;

		sqlite3_bind_text(check, 1, ids[i], -1, SQLITE_STATIC);
		rc = sq_step_row(check);
		if (rc == SQLITE_DONE) {
			outcome = REPLAY_NOT_FOUND;
			rc = SQLITE_OK;
		} else if (rc == SQLITE_ROW) {
			name = (const char *)sqlite3_column_text(check, 0);
			if (name)
				delivery_status_parse(name, &status);
			if (sqlite3_column_type(check, 2) != SQLITE_NULL &&
			    sqlite3_column_int64(check, 2) >= now)
				outcome = REPLAY_IN_FLIGHT;
			else if (status == DELIVERY_FAILED ||
				 (status == DELIVERY_PROCESSED && force))
				outcome = REPLAY_DONE;
			sq_stmt_end(check);
			rc = SQLITE_OK;
		}
		if (rc == SQLITE_OK && outcome == REPLAY_DONE) {
			sqlite3_bind_text(sq->w[W_REPLAY_SET], 1, ids[i], -1, SQLITE_STATIC);
			sqlite3_bind_int64(sq->w[W_REPLAY_SET], 2, now);
			rc = sq_step_done(sq->w[W_REPLAY_SET]);
			done++;
		}
		if (outcomes)
			outcomes[i] = outcome;
	}
	rc = sq_tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	if (rc == STORE_OK)
		*replayed = done;
	return rc;
}

static int delete_if_orphan(struct sq *sq, const char *event_id)
{
	sqlite3_bind_text(sq->w[W_EVENT_DELETE_ORPHAN], 1, event_id, -1, SQLITE_STATIC);
	return sq_step_done(sq->w[W_EVENT_DELETE_ORPHAN]);
}

int sq_dlq_purge(store *st, const char *delivery_id)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *check = sq->w[W_DELIVERY_STATE];
	char event_id[UUID_STR_LEN];
	int result = STORE_OK;
	int rc;

	sq_wlock(sq);
	rc = sq_tx_begin(sq);
	if (rc != SQLITE_OK)
		goto out;
	sqlite3_bind_text(check, 1, delivery_id, -1, SQLITE_STATIC);
	rc = sq_step_row(check);
	if (rc == SQLITE_DONE) {
		result = STORE_NOT_FOUND;
		rc = SQLITE_OK;
		goto out;
	}
	if (rc != SQLITE_ROW)
		goto out;
	rc = SQLITE_OK;
	/* Dead means FAILED with no attempt pending and no lease. */
	if (strcmp((const char *)sqlite3_column_text(check, 0), "FAILED") != 0 ||
	    sqlite3_column_type(check, 1) != SQLITE_NULL ||
	    sqlite3_column_type(check, 2) != SQLITE_NULL) {
		result = STORE_CONFLICT;
		sq_stmt_end(check);
		goto out;
	}
	sq_col_id(check, 3, event_id);
	sq_stmt_end(check);
	sqlite3_bind_text(sq->w[W_DELIVERY_DELETE], 1, delivery_id, -1, SQLITE_STATIC);
	rc = sq_step_done(sq->w[W_DELIVERY_DELETE]);
	if (rc == SQLITE_OK)
		rc = delete_if_orphan(sq, event_id);
out:
	rc = sq_tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	return rc != STORE_OK ? rc : result;
}

/* Deletes up to limit (at most CLEANUP_BATCH) PROCESSED deliveries processed at or before
 * before_ms (their attempts with them) and the events they leave without deliveries, in
 * one transaction. *deleted = deliveries removed. */
static int cleanup_chunk(struct sq *sq, int64_t before_ms, size_t limit, size_t *deleted)
{
	sqlite3_stmt *s = sq->w[W_CLEANUP_CHUNK];
	char (*events)[UUID_STR_LEN] = NULL;
	size_t count = 0, cap = 0;
	int rc;

	sq_wlock(sq);
	rc = sq_tx_begin(sq);
	if (rc != SQLITE_OK)
		goto out;
	sqlite3_bind_int64(s, 1, (int64_t)limit);
	sqlite3_bind_int64(s, 2, before_ms);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		char (*more)[UUID_STR_LEN] = sq_grow(events, &cap, count, sizeof(*events));

		if (!more) {
			rc = SQLITE_NOMEM;
			goto out;
		}
		events = more;
		sq_col_id(s, 0, events[count++]);
	}
	if (rc != SQLITE_DONE) {
		sq_log_stmt_error(s, rc);
		goto out;
	}
	sq_stmt_end(s);
	rc = SQLITE_OK;
	for (size_t i = 0; rc == SQLITE_OK && i < count; i++)
		rc = delete_if_orphan(sq, events[i]);
out:
	sq_stmt_end(s);
	rc = sq_tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	free(events);
	if (rc == STORE_OK)
		*deleted = count;
	return rc;
}

/* Events created at or before before_ms that never had a delivery (no subscription
 * wanted them) are found by a scan on the reader, CLEANUP_CHUNK rows at a time from
 * sq->sweep_after, so the writer is only taken to delete: up to CLEANUP_SWEEP rows looked
 * at (all of them when all). *done when the scan reached the end. */
static int sweep_orphan_events(struct sq *sq, int64_t before_ms, int all, int *done)
{
	struct sq_reader *rd;
	sqlite3_stmt *s;
	char (*events)[UUID_STR_LEN] = NULL;
	size_t count, cap = 0, scanned, looked = 0;
	int64_t after = sq->sweep_after;
	int rc = SQLITE_OK, err = STORE_OK;

	*done = 0;
	do {
		count = 0;
		scanned = 0;
		rd = sq_read_lock(sq);
		s = rd->r[R_EVENT_SCAN];
		sqlite3_bind_int64(s, 1, after);
		sqlite3_bind_int(s, 2, CLEANUP_CHUNK);
		sqlite3_bind_int64(s, 3, before_ms);
		while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
			char (*more)[UUID_STR_LEN];

			scanned++;
			after = sqlite3_column_int64(s, 0);
			if (!sqlite3_column_int(s, 2))
				continue;
			more = sq_grow(events, &cap, count, sizeof(*events));
			if (!more) {
				rc = SQLITE_NOMEM;
				break;
			}
			events = more;
			sq_col_id(s, 1, events[count++]);
		}
		if (rc == SQLITE_DONE)
			rc = SQLITE_OK;
		else if (rc != SQLITE_NOMEM)
			sq_log_stmt_error(s, rc);
		sq_stmt_end(s);
		sq_read_unlock(rd);
		looked += scanned;
		if (rc != SQLITE_OK)
			break;
		if (!count)
			continue;

		sq_wlock(sq);
		rc = sq_tx_begin(sq);
		for (size_t i = 0; rc == SQLITE_OK && i < count; i++)
			rc = delete_if_orphan(sq, events[i]);
		err = sq_tx_end(sq, rc);
		pthread_mutex_unlock(&sq->wmu);
		rc = SQLITE_OK;
	} while (err == STORE_OK && scanned == CLEANUP_CHUNK && (all || looked < CLEANUP_SWEEP));
	free(events);
	if (rc == SQLITE_OK && err == STORE_OK) {
		sq->sweep_after = after;
		*done = scanned < CLEANUP_CHUNK;
	}
	return rc != SQLITE_OK ? sq_store_code(rc) : err;
}

int sq_cleanup_batch(store *st, int64_t before_ms, size_t limit, int from_start,
		     size_t *deleted)
{
	(void)from_start; /* rows deleted leave no trace to read past: each batch reads from
			   * the start of the table */
	return cleanup_chunk(sq_of(st), before_ms, limit, deleted);
}

int sq_cleanup_sweep(store *st, int64_t before_ms, int from_start, int all, int *done)
{
	struct sq *sq = sq_of(st);

	if (from_start)
		sq->sweep_after = 0;
	return sweep_orphan_events(sq, before_ms, all, done);
}

/* ---- subscriptions ------------------------------------------------------- */

static int sub_write(struct sq *sq, sqlite3_stmt *s)
{
	int rc;

	rc = sqlite3_step(s);
	if (rc == SQLITE_DONE) {
		rc = sqlite3_changes(sq->wdb) ? STORE_OK : STORE_NOT_FOUND;
	} else if ((rc & 0xff) == SQLITE_CONSTRAINT) {
		rc = STORE_CONFLICT;
	} else {
		sq_log_stmt_error(s, rc);
		rc = sq_store_code(rc);
	}
	sq_stmt_end(s);
	return rc;
}

int sq_sub_create(store *st, const struct sub_row *sub)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->w[W_SUB_INSERT];
	int64_t now = clock_now_ms();
	int rc;

	sq_wlock(sq);
	sqlite3_bind_text(s, 1, sub->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, sub->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, sub->config, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 4, sub->enabled ? 1 : 0);
	sqlite3_bind_int64(s, 5, sub->created_at ? sub->created_at : now);
	sqlite3_bind_int64(s, 6, sub->updated_at ? sub->updated_at : now);
	sqlite3_bind_int(s, 7, sub->ordering);
	rc = sub_write(sq, s);
	pthread_mutex_unlock(&sq->wmu);
	return rc;
}

int sq_sub_update(store *st, const struct sub_row *sub)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->w[W_SUB_UPDATE];
	int rc;

	sq_wlock(sq);
	sqlite3_bind_text(s, 1, sub->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, sub->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, sub->config, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 4, sub->enabled ? 1 : 0);
	sqlite3_bind_int64(s, 5, sub->updated_at ? sub->updated_at : clock_now_ms());
	sqlite3_bind_int(s, 6, sub->ordering);
	rc = sub_write(sq, s);
	pthread_mutex_unlock(&sq->wmu);
	return rc;
}

int sq_sub_delete(store *st, const char *id)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->w[W_SUB_DELETE];
	int rc;

	sq_wlock(sq);
	sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
	rc = sub_write(sq, s);
	pthread_mutex_unlock(&sq->wmu);
	return rc;
}

static int read_sub(sqlite3_stmt *s, void *row)
{
	struct sub_row *sub = row;

	memset(sub, 0, sizeof(*sub));
	sq_col_id(s, 0, sub->id);
	sub->enabled = sqlite3_column_int(s, 3);
	sub->created_at = sqlite3_column_int64(s, 4);
	sub->updated_at = sqlite3_column_int64(s, 5);
	sub->ordering = sqlite3_column_int(s, 6);
	if (sq_col_dup(s, 1, &sub->name) || sq_col_dup(s, 2, &sub->config)) {
		store_sub_free(sub);
		return SQLITE_NOMEM;
	}
	return SQLITE_OK;
}

int sq_sub_get(store *st, const char *id, struct sub_row *out)
{
	struct sq *sq = sq_of(st);
	return sq_get_one(sq, R_SUB_GET, id, read_sub, out);
}

int sq_sub_list(store *st, struct sub_row **items, size_t *n)
{
	struct sq *sq = sq_of(st);
	struct sq_reader *rd;
	sqlite3_stmt *s;
	struct sub_row *subs = NULL;
	size_t count = 0, cap = 0;
	int rc;

	rd = sq_read_lock(sq);
	s = rd->r[R_SUB_LIST];
	rc = sq_read_rows(s, sizeof(*subs), read_sub, (void **)&subs, &count, &cap);
	sq_stmt_end(s);
	sq_read_unlock(rd);
	if (rc != SQLITE_OK) {
		store_subs_free(subs, count);
		return sq_store_code(rc);
	}
	*items = subs;
	*n = count;
	return STORE_OK;
}

/* Sealing rewrites a row that held credentials in clear: with secure_delete the old
 * cell is overwritten with zeros in the page, so only the WAL still has it until
 * sq_sub_scrub. The setting is the connection's; it is put back as it was (Debian builds
 * SQLite with it on, others off). */
int sq_sub_config_swap(store *st, const char *id, const char *old_config,
		       const char *new_config)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL, *q = NULL;
	int secure = 1, rc;

	sq_wlock(sq);
	if (sqlite3_prepare_v2(sq->wdb, "PRAGMA secure_delete", -1, &q, NULL) == SQLITE_OK &&
	    sqlite3_step(q) == SQLITE_ROW)
		secure = sqlite3_column_int(q, 0);
	sqlite3_finalize(q);
	if (!secure)
		sqlite3_exec(sq->wdb, "PRAGMA secure_delete = ON", NULL, NULL, NULL);
	rc = sqlite3_prepare_v2(sq->wdb, "UPDATE subscriptions SET config = ?3"
				" WHERE id = ?1 AND config = ?2", -1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("store: sqlite: %s", sqlite3_errmsg(sq->wdb));
		rc = sq_store_code(rc);
		goto out;
	}
	sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, old_config, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, new_config, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	if (rc == SQLITE_DONE) {
		rc = sqlite3_changes(sq->wdb) ? STORE_OK : STORE_CONFLICT;
	} else {
		sq_log_stmt_error(s, rc);
		rc = sq_store_code(rc);
	}
out:
	sqlite3_finalize(s);
	if (!secure)
		sqlite3_exec(sq->wdb, "PRAGMA secure_delete = OFF", NULL, NULL, NULL);
	pthread_mutex_unlock(&sq->wmu);
	return rc;
}

/* The WAL keeps the pages as they were before the swaps until it is reset: copy it into
 * the database and truncate it to zero bytes. */
void sq_sub_scrub(store *st)
{
	struct sq *sq = sq_of(st);
	int log_frames = 0, done = 0, rc;

	sq_wlock(sq);
	rc = sqlite3_wal_checkpoint_v2(sq->wdb, NULL, SQLITE_CHECKPOINT_TRUNCATE, &log_frames,
				       &done);
	if (rc != SQLITE_OK)
		log_warn("store: sqlite: cannot truncate the WAL after sealing subscriptions (%s): "
			 "their former clear text stays in %s-wal until the next checkpoint",
			 sqlite3_errmsg(sq->wdb), sq->path);
	pthread_mutex_unlock(&sq->wmu);
}

/* ---- counts, purge by filter --------------------------------------------- */

int sq_deliveries_count(store *st, const struct delivery_filter *f, size_t *n)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	char sql[1024] = "SELECT count(*) FROM deliveries WHERE 1";
	int rc, b = 1;

	sq_filter_sql(f, sql, sizeof(sql));
	struct sq_reader *rd = sq_read_lock(sq);
	rc = sqlite3_prepare_v2(rd->db, sql, -1, &s, NULL);
	if (rc == SQLITE_OK) {
		sq_filter_bind(s, f, &b);
		rc = sqlite3_step(s);
		if (rc == SQLITE_ROW) {
			*n = (size_t)sqlite3_column_int64(s, 0);
			rc = SQLITE_OK;
		} else {
			sq_log_stmt_error(s, rc);
		}
	} else {
		log_error("sqlite: %s", sqlite3_errmsg(rd->db));
	}
	sqlite3_finalize(s);
	sq_read_unlock(rd);
	return sq_store_code(rc);
}

int sq_dlq_purge_matching(store *st, const struct delivery_filter *f, size_t limit,
				 size_t *purged)
{
	struct sq *sq = sq_of(st);
	struct delivery_filter dead = *f;
	struct store_delivery *items = NULL;
	char *next = NULL;
	size_t n = 0;
	sqlite3_stmt *del = NULL;
	int rc;

	dead.dead_only = 1;
	dead.cursor = NULL;
	dead.limit = limit;
	rc = sq_deliveries_list(st, &dead, &items, &n, &next);
	free(next);
	if (rc != STORE_OK)
		return rc;
	sq_wlock(sq);
	rc = sq_tx_begin(sq);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(sq->wdb,
					"DELETE FROM deliveries WHERE id = ?1 AND status = 'FAILED'"
					" AND next_attempt_at IS NULL AND lease_until IS NULL",
					-1, &del, NULL);
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
		sqlite3_bind_text(del, 1, items[i].id, -1, SQLITE_STATIC);
		rc = sq_step_done(del);
		if (rc == SQLITE_OK && sqlite3_changes(sq->wdb) == 1) {
			(*purged)++;
			rc = delete_if_orphan(sq, items[i].event_id);
		}
	}
	sqlite3_finalize(del);
	rc = sq_tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	store_deliveries_free(items, n);
	if (rc != STORE_OK)
		*purged = 0;
	return rc;
}

/* ---- jobs ---------------------------------------------------------------- */

static void bind_text_or_null(sqlite3_stmt *s, int i, const char *v)
{
	if (v)
		sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, i);
}

/* Runs one write statement with the job's fields bound as ?1..?13 (JOB_COLUMNS order). */
static int job_write(store *st, const char *sql, const struct store_job *j)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	int rc;

	sq_wlock(sq);
	rc = sqlite3_prepare_v2(sq->wdb, sql, -1, &s, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(s, 1, j->id, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, j->kind, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 3, j->state, -1, SQLITE_STATIC);
		bind_text_or_null(s, 4, j->filter);
		sqlite3_bind_int(s, 5, j->force);
		sqlite3_bind_int(s, 6, j->rate);
		sqlite3_bind_int64(s, 7, j->matched);
		sqlite3_bind_int64(s, 8, j->done);
		bind_text_or_null(s, 9, j->cursor);
		bind_text_or_null(s, 10, j->actor);
		bind_text_or_null(s, 11, j->error);
		sqlite3_bind_int64(s, 12, j->created_at);
		sqlite3_bind_int64(s, 13, j->updated_at ? j->updated_at : clock_now_ms());
		rc = sq_step_done(s);
		if (rc == SQLITE_OK && sqlite3_changes(sq->wdb) == 0)
			rc = SQLITE_NOTFOUND;
	} else {
		log_error("sqlite: %s", sqlite3_errmsg(sq->wdb));
	}
	sqlite3_finalize(s);
	pthread_mutex_unlock(&sq->wmu);
	return rc == SQLITE_NOTFOUND ? STORE_NOT_FOUND : sq_store_code(rc);
}

int sq_job_create(store *st, const struct store_job *job)
{
	return job_write(st, "INSERT INTO jobs(" JOB_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6,"
			     " ?7, ?8, ?9, ?10, ?11, ?12, ?13)", job);
}

int sq_job_update(store *st, const struct store_job *job)
{
	return job_write(st, "UPDATE jobs SET state = ?3, matched = ?7, done = ?8, cursor = ?9,"
			     " error = ?11, updated_at = ?13 WHERE id = ?1 AND kind = ?2"
			     " AND state = 'running'", job);
}

/* An sq_row_cb for struct store_job (JOB_COLUMNS). */
static int read_job(sqlite3_stmt *s, void *row)
{
	struct store_job *j = row;
	int rc;

	memset(j, 0, sizeof(*j));
	sq_col_id(s, 0, j->id);
	snprintf(j->kind, sizeof(j->kind), "%s", (const char *)sqlite3_column_text(s, 1));
	snprintf(j->state, sizeof(j->state), "%s", (const char *)sqlite3_column_text(s, 2));
	j->force = sqlite3_column_int(s, 4);
	j->rate = sqlite3_column_int(s, 5);
	j->matched = sqlite3_column_int64(s, 6);
	j->done = sqlite3_column_int64(s, 7);
	j->created_at = sqlite3_column_int64(s, 11);
	j->updated_at = sqlite3_column_int64(s, 12);
	if ((rc = sq_col_dup(s, 3, &j->filter)) || (rc = sq_col_dup(s, 8, &j->cursor)) ||
	    (rc = sq_col_dup(s, 9, &j->actor)) || (rc = sq_col_dup(s, 10, &j->error))) {
		store_job_free(j);
		return rc;
	}
	return SQLITE_OK;
}

/* Runs a one-off query on the reader: bind (may be NULL) binds its parameters, then
 * every row is read (see sq_read_rows). Returns a store code; on failure *items holds
 * the *n rows read so far, for the caller to free. */
static int query_rows(struct sq *sq, const char *sql,
		      void (*bind)(sqlite3_stmt *s, const void *ctx), const void *ctx, size_t size, sq_row_cb read, void **items, size_t *n)
{
	sqlite3_stmt *s = NULL;
	size_t cap = 0;
	int rc;

	*items = NULL;
	*n = 0;
	struct sq_reader *rd = sq_read_lock(sq);
	rc = sqlite3_prepare_v2(rd->db, sql, -1, &s, NULL);
	if (rc == SQLITE_OK) {
		if (bind)
			bind(s, ctx);
		rc = sq_read_rows(s, size, read, items, n, &cap);
	} else {
		log_error("sqlite: %s", sqlite3_errmsg(rd->db));
	}
	sqlite3_finalize(s);
	sq_read_unlock(rd);
	return sq_store_code(rc);
}

static void bind_id(sqlite3_stmt *s, const void *id)
{
	sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
}

/* Reads jobs with a one-off query on the reader; one_id binds ?1 when not NULL. */
static int jobs_query(store *st, const char *sql, const char *one_id, struct store_job **items,
		      size_t *n)
{
	int rc = query_rows(sq_of(st), sql, one_id ? bind_id : NULL, one_id, sizeof(**items),
			    read_job, (void **)items, n);
	if (rc != STORE_OK) {
		store_jobs_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return rc;
}

int sq_job_get(store *st, const char *id, struct store_job *out)
{
	struct store_job *rows = NULL;
	size_t n = 0;
	int rc = jobs_query(st, "SELECT " JOB_COLUMNS " FROM jobs WHERE id = ?1", id, &rows, &n);
	return rc == STORE_OK ? store_take_one(rows, n, sizeof(*rows), out) : rc;
}

int sq_jobs_running(store *st, struct store_job **items, size_t *n)
{
	return jobs_query(st, "SELECT " JOB_COLUMNS " FROM jobs WHERE state = 'running'"
			      " ORDER BY created_at", NULL, items, n);
}

struct jobs_page {
	const char *state, *before_id;
	int64_t before_at;
	size_t limit;
};

static void bind_jobs_page(sqlite3_stmt *s, const void *ctx)
{
	const struct jobs_page *pg = ctx;
	bind_text_or_null(s, 1, pg->state);
	bind_text_or_null(s, 2, pg->before_id);
	sqlite3_bind_int64(s, 3, pg->before_at);
	sqlite3_bind_int64(s, 4, (int64_t)pg->limit);
}

int sq_jobs_list(store *st, const char *state, int64_t before_at, const char *before_id,
		 size_t limit, struct store_job **items, size_t *n)
{
	struct jobs_page page = {state, before_id, before_at, limit};
	int rc = query_rows(sq_of(st), "SELECT " JOB_COLUMNS " FROM jobs"
			    " WHERE (?1 IS NULL OR state = ?1) AND (?2 IS NULL OR created_at < ?3"
			    " OR (created_at = ?3 AND id < ?2))"
			    " ORDER BY created_at DESC, id DESC LIMIT ?4",
			    bind_jobs_page, &page, sizeof(**items), read_job, (void **)items, n);
	if (rc != STORE_OK) {
		store_jobs_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return rc;
}

struct subs_page {
	const char *after_id, *name, *like;
	int64_t after_at;
	size_t limit;
};

static void bind_subs_page(sqlite3_stmt *s, const void *ctx)
{
	const struct subs_page *pg = ctx;
	bind_text_or_null(s, 1, pg->after_id);
	sqlite3_bind_int64(s, 2, pg->after_at);
	sqlite3_bind_int64(s, 3, (int64_t)pg->limit);
	bind_text_or_null(s, 4, pg->name);
	bind_text_or_null(s, 5, pg->like);
}

/* A name pattern: SQLite's LIKE ignores the case of ASCII letters (the connections leave
 * case_sensitive_like off), the other letters' only with the ICU extension, which
 * Debian's library is built without. */
int sq_sub_page(store *st, int64_t after_at, const char *after_id, const char *name,
		const char *like, size_t limit, struct sub_row **items, size_t *n)
{
	struct subs_page page = {after_id, name, like, after_at, limit};
	int rc = query_rows(sq_of(st), "SELECT id, name, config, enabled, created_at, updated_at,"
			    " ordering FROM subscriptions"
			    " WHERE (?1 IS NULL OR created_at > ?2 OR (created_at = ?2 AND id > ?1))"
			    " AND (?4 IS NULL OR name = ?4)"
			    " AND (?5 IS NULL OR name LIKE ?5 ESCAPE '\\')"
			    " ORDER BY created_at, id LIMIT ?3",
			    bind_subs_page, &page, sizeof(**items), read_sub, (void **)items, n);
	if (rc != STORE_OK) {
		store_subs_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return rc;
}

/* ---- event types --------------------------------------------------------- */

struct types_page {
	const char *after;
	size_t limit;
};

static void bind_types_page(sqlite3_stmt *s, const void *ctx)
{
	const struct types_page *pg = ctx;
	sqlite3_bind_text(s, 1, pg->after ? pg->after : "", -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, (int64_t)pg->limit);
}

static int read_type(sqlite3_stmt *s, void *row)
{
	struct store_event_type *t = row;

	memset(t, 0, sizeof(*t));
	t->last_seen = sqlite3_column_int64(s, 1);
	return sq_col_dup(s, 0, &t->event_type) ? SQLITE_NOMEM : SQLITE_OK;
}

/* The distinct types by skipping through events_type (event_type, created_at, id): one
 * seek for the next type and one for its newest event each, not a scan of the events. */
int sq_event_types(store *st, const char *after, size_t limit, struct store_event_type **items,
		   size_t *n)
{
	struct types_page page = {after, limit};
	return query_rows(sq_of(st),
			  "WITH RECURSIVE t(et) AS ("
			  " SELECT (SELECT event_type FROM events WHERE event_type > ?1"
			  "  ORDER BY event_type LIMIT 1)"
			  " UNION ALL"
			  " SELECT (SELECT event_type FROM events WHERE event_type > t.et"
			  "  ORDER BY event_type LIMIT 1) FROM t WHERE t.et IS NOT NULL LIMIT ?2)"
			  " SELECT et, (SELECT created_at FROM events WHERE event_type = t.et"
			  "  ORDER BY created_at DESC LIMIT 1) FROM t WHERE et IS NOT NULL",
			  bind_types_page, &page, sizeof(**items), read_type, (void **)items, n);
}

/* ---- audit --------------------------------------------------------------- */

/* A write outside the prepared set, under the write lock: sql prepared, bound by bind
 * (ctx), stepped; the answer as sub_write gives it (NOT_FOUND when nothing changed,
 * CONFLICT on a constraint). */
static int write_once(struct sq *sq, const char *sql, void (*bind)(sqlite3_stmt *s,
								      const void *ctx),
		      const void *ctx)
{
	sqlite3_stmt *s = NULL;
	int rc;

	sq_wlock(sq);
	rc = sqlite3_prepare_v2(sq->wdb, sql, -1, &s, NULL);
	if (rc == SQLITE_OK) {
		bind(s, ctx);
		rc = sub_write(sq, s);
	} else {
		log_error("sqlite: %s", sqlite3_errmsg(sq->wdb));
		rc = sq_store_code(rc);
	}
	sqlite3_finalize(s);
	pthread_mutex_unlock(&sq->wmu);
	return rc;
}

static void bind_audit(sqlite3_stmt *s, const void *ctx)
{
	const struct store_audit *a = ctx;
	sqlite3_bind_text(s, 1, a->id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, a->at ? a->at : clock_now_ms());
	sqlite3_bind_text(s, 3, a->actor, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 4, a->action, -1, SQLITE_STATIC);
	bind_text_or_null(s, 5, a->target);
	sqlite3_bind_int64(s, 6, a->count);
	bind_text_or_null(s, 7, a->detail);
}

int sq_audit_append(store *st, const struct store_audit *a)
{
	return write_once(sq_of(st), "INSERT INTO audit(id, at, actor, action, target, count,"
			  " detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", bind_audit, a);
}

/* An sq_row_cb for struct store_audit. */
static int read_audit(sqlite3_stmt *s, void *row)
{
	struct store_audit *a = row;
	int rc;

	memset(a, 0, sizeof(*a));
	sq_col_id(s, 0, a->id);
	a->at = sqlite3_column_int64(s, 1);
	a->count = sqlite3_column_int64(s, 5);
	if ((rc = sq_col_dup(s, 2, &a->actor)) || (rc = sq_col_dup(s, 3, &a->action)) ||
	    (rc = sq_col_dup(s, 4, &a->target)) || (rc = sq_col_dup(s, 6, &a->detail))) {
		free(a->actor);
		free(a->action);
		free(a->target);
		return rc;
	}
	return SQLITE_OK;
}

struct audit_page {
	const char *before_id;
	size_t limit;
};

static void bind_audit_page(sqlite3_stmt *s, const void *ctx)
{
	const struct audit_page *pg = ctx;
	bind_text_or_null(s, 1, pg->before_id);
	sqlite3_bind_int64(s, 2, (int64_t)pg->limit);
}

int sq_audit_list(store *st, const char *before_id, size_t limit,
		  struct store_audit **items, size_t *n)
{
	struct audit_page page = {before_id, limit};
	int rc = query_rows(sq_of(st), "SELECT id, at, actor, action, target, count, detail"
			    " FROM audit WHERE (?1 IS NULL OR id < ?1) ORDER BY id DESC LIMIT ?2",
			    bind_audit_page, &page, sizeof(**items), read_audit, (void **)items, n);
	if (rc != STORE_OK) {
		store_audits_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return rc;
}

/* ---- API tokens ---------------------------------------------------------- */

static void bind_token(sqlite3_stmt *s, const void *ctx)
{
	const struct store_token *t = ctx;
	sqlite3_bind_text(s, 1, t->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, t->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, t->scopes, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 4, t->hash, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 5, t->prefix, -1, SQLITE_STATIC);
	bind_text_or_null(s, 6, t->actor);
	sqlite3_bind_int64(s, 7, t->created_at ? t->created_at : clock_now_ms());
	sq_bind_time(s, 8, t->expires_at);
}

int sq_token_create(store *st, const struct store_token *t)
{
	return write_once(sq_of(st), "INSERT INTO tokens(id, name, scopes, hash, prefix, actor,"
			  " created_at, expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
			  bind_token, t);
}

struct token_use {
	const char *id;
	int64_t at;
};

static void bind_token_use(sqlite3_stmt *s, const void *ctx)
{
	const struct token_use *u = ctx;
	sqlite3_bind_text(s, 1, u->id, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, u->at);
}

int sq_token_touch(store *st, const char *id, int64_t at_ms)
{
	struct token_use u = {id, at_ms};
	return write_once(sq_of(st), "UPDATE tokens SET last_used_at ="
			  " max(coalesce(last_used_at, 0), ?2) WHERE id = ?1", bind_token_use, &u);
}

int sq_token_delete(store *st, const char *id)
{
	return write_once(sq_of(st), "DELETE FROM tokens WHERE id = ?1", bind_id, id);
}

/* An sq_row_cb for struct store_token. */
static int read_token(sqlite3_stmt *s, void *row)
{
	struct store_token *t = row;

	memset(t, 0, sizeof(*t));
	sq_col_id(s, 0, t->id);
	snprintf(t->hash, sizeof(t->hash), "%s", (const char *)sqlite3_column_text(s, 3));
	snprintf(t->prefix, sizeof(t->prefix), "%s", (const char *)sqlite3_column_text(s, 4));
	t->created_at = sqlite3_column_int64(s, 6);
	t->expires_at = sqlite3_column_int64(s, 7);     /* NULL reads as 0 */
	t->last_used_at = sqlite3_column_int64(s, 8);
	if (sq_col_dup(s, 1, &t->name) || sq_col_dup(s, 2, &t->scopes) ||
	    sq_col_dup(s, 5, &t->actor)) {
		free(t->name);
		free(t->scopes);
		return SQLITE_NOMEM;
	}
	return SQLITE_OK;
}

int sq_token_list(store *st, struct store_token **items, size_t *n)
{
	int rc = query_rows(sq_of(st), "SELECT id, name, scopes, hash, prefix, actor, created_at,"
			    " expires_at, last_used_at FROM tokens ORDER BY created_at, id", NULL, NULL,
			    sizeof(**items),
			    read_token, (void **)items, n);
	if (rc != STORE_OK) {
		store_tokens_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return rc;
}

/* ---- facts about the store (store_meta) ------------------------------------------------ */

struct meta_args {
	const char *name, *expect, *value;
};

static void bind_meta(sqlite3_stmt *s, const void *ctx)
{
	const struct meta_args *m = ctx;
	sqlite3_bind_text(s, 1, m->name, -1, SQLITE_STATIC);
	bind_text_or_null(s, 2, m->expect);
	sqlite3_bind_text(s, 3, m->value, -1, SQLITE_STATIC);
}

/* STORE_NOT_FOUND when the fact was not expect (store.c reads what it is). */
int sq_meta_swap(store *st, const char *name, const char *expect, const char *value)
{
	struct meta_args m = {name, expect, value};
	return write_once(sq_of(st), expect ?
			  "UPDATE store_meta SET value = ?3 WHERE name = ?1 AND value = ?2" :
			  "INSERT INTO store_meta(name, value) VALUES (?1, ?3)"
			  " ON CONFLICT(name) DO NOTHING", bind_meta, &m);
}

/* An sq_row_cb for struct store_meta_value. */
static int read_meta(sqlite3_stmt *s, void *row)
{
	struct store_meta_value *v = row;
	const unsigned char *text = sqlite3_column_text(s, 0);
	snprintf(v->value, sizeof(v->value), "%s", text ? (const char *)text : "");
	return 0;
}

int sq_meta_get(store *st, const char *name, struct store_meta_value *out)
{
	struct store_meta_value *rows = NULL;
	size_t n = 0;
	int rc = query_rows(sq_of(st), "SELECT value FROM store_meta WHERE name = ?1", bind_id,
			    name, sizeof(*rows), read_meta, (void **)&rows, &n);
	if (rc == STORE_OK)
		return store_take_one(rows, n, sizeof(*out), out);
	free(rows);
	return rc;
}
