/* admin.c: the PostgreSQL backend's operator writes: replays, purges, cleanup, counts
 * and purges by filter, operator jobs, the audit log and subscriptions. */
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

/* ---- operator actions ---------------------------------------------------- */

static int replay_row_cmp(const void *a, const void *b)
{
	return strcmp(((const struct replay_row *)a)->id, ((const struct replay_row *)b)->id);
}

int pg_replay(store *st, const char (*ids)[UUID_STR_LEN], size_t n, int force,
		     enum store_replay_outcome *outcomes, size_t *replayed)
{
	struct pg *pg = pg_of(st);
	int64_t now = clock_now_ms();
	struct replay_row *rows = NULL;
	struct pgarr all, chosen;
	struct params p = {0}, q = {0};
	PGresult *res = NULL;
	struct pgconn *c;
	size_t count = 0, done = 0;
	int rc;

	pg_arr_init(&all, OID_TEXT);
	pg_arr_init(&chosen, OID_TEXT);
	for (size_t i = 0; i < n; i++)
		pg_arr_text(&all, ids[i]);
	pg_p_arr(&p, &all);
	if (all.failed) {
		pg_arr_free(&all);
		return STORE_ERROR;
	}
	if (!(c = pg_take(pg, ROLE_API, &rc))) {
		pg_arr_free(&all);
		return rc;
	}
	rc = pg_tx_begin(pg, c);
	if (rc == STORE_OK)
		res = pg_run(pg, c, S_REPLAY_CHECK, &p, &rc);
	if (res) {
		count = (size_t)PQntuples(res);
		rows = calloc(count ? count : 1, sizeof(*rows));
		if (!rows)
			rc = STORE_ERROR;
		for (size_t i = 0; rows && i < count; i++) {
			enum delivery_status status = DELIVERY_NEW;

			pg_get_id(res, (int)i, 0, rows[i].id);
			delivery_status_parse(PQgetvalue(res, (int)i, 1), &status);
			rows[i].status = status;
			rows[i].lease_until = PQgetisnull(res, (int)i, 2) ? -1 : pg_get_int(res, (int)i, 2);
		}
		if (rows)
			qsort(rows, count, sizeof(*rows), replay_row_cmp);
	}
	for (size_t i = 0; rc == STORE_OK && i < n; i++) {
		enum store_replay_outcome outcome = REPLAY_NOT_FOUND;
		struct replay_row key, *row;

		snprintf(key.id, sizeof(key.id), "%s", ids[i]);
		row = bsearch(&key, rows, count, sizeof(*rows), replay_row_cmp);
		if (row) {
			outcome = REPLAY_NOT_FAILED;
			if (row->lease_until >= now)
				outcome = REPLAY_IN_FLIGHT;
			else if (!row->taken && (row->status == DELIVERY_FAILED ||
						 (row->status == DELIVERY_PROCESSED && force)))
				outcome = REPLAY_DONE;
		}
		if (outcome == REPLAY_DONE) {
			row->taken = 1;
			pg_arr_text(&chosen, ids[i]);
			done++;
		}
		if (outcomes)
			outcomes[i] = outcome;
	}
	if (rc == STORE_OK && done) {
		pg_p_arr(&q, &chosen);
		pg_p_i64(&q, now);
		rc = chosen.failed ? STORE_ERROR : pg_run_done(pg, c, S_REPLAY_SET, &q, NULL);
		/* Other instances' dispatchers learn of it at once. */
		if (rc == STORE_OK)
			rc = pg_run_done(pg, c, S_NOTIFY, NULL, NULL);
	}
	rc = pg_tx_end(pg, c, rc);
	pg_give(c);
	PQclear(res);
	free(rows);
	pg_arr_free(&all);
	pg_arr_free(&chosen);
	if (rc == STORE_OK)
		*replayed = done;
	return rc;
}

int pg_dlq_purge(store *st, const char *delivery_id)
{
	struct pg *pg = pg_of(st);
	char event_id[UUID_STR_LEN];
	struct params p = {0}, q = {0};
	PGresult *res = NULL;
	struct pgconn *c;
	int result = STORE_OK;
	int rc;

	if (!(c = pg_take(pg, ROLE_API, &rc)))
		return rc;
	pg_p_text(&p, delivery_id);
	rc = pg_tx_begin(pg, c);
	if (rc == STORE_OK)
		res = pg_run(pg, c, S_PURGE_CHECK, &p, &rc);
	if (res && PQntuples(res) == 0) {
		result = STORE_NOT_FOUND;
	} else if (res) {
		/* Dead means FAILED with no attempt pending and no lease. */
		if (strcmp(PQgetvalue(res, 0, 0), "FAILED") != 0 || !PQgetisnull(res, 0, 1) ||
		    !PQgetisnull(res, 0, 2)) {
			result = STORE_CONFLICT;
		} else {
			pg_get_id(res, 0, 3, event_id);
			rc = pg_run_done(pg, c, S_DELIVERY_DELETE, &p, NULL);
			pg_p_text(&q, event_id);
			if (rc == STORE_OK)
				rc = pg_run_done(pg, c, S_EVENT_DELETE_ORPHAN, &q, NULL);
		}
	}
	PQclear(res);
	rc = pg_tx_end(pg, c, rc);
	pg_give(c);
	return rc != STORE_OK ? rc : result;
}

int pg_dlq_purge_matching(store *st, const struct delivery_filter *f, size_t limit,
				 size_t *purged)
{
	struct pg *pg = pg_of(st);
	struct delivery_filter dead = *f;
	struct store_delivery *items = NULL;
	struct pgconn *c;
	char *next = NULL;
	size_t n = 0, done = 0;
	int rc;

	dead.dead_only = 1;
	dead.cursor = NULL;
	dead.limit = limit;
	rc = pg_deliveries_list(st, &dead, &items, &n, &next);
	free(next);
	if (rc != STORE_OK)
		return rc;
	if (!(c = pg_take(pg, ROLE_API, &rc))) {
		store_deliveries_free(items, n);
		return rc;
	}
	rc = pg_tx_begin(pg, c);
	for (size_t i = 0; rc == STORE_OK && i < n; i++) {
		struct params p = {0}, q = {0};
		PGresult *res;

		/* Still dead and unleased: it may have changed since the listing. */
		pg_p_text(&p, items[i].id);
		res = pg_run_sql(pg, c, "WITH dead AS (SELECT id FROM outboxd.queue WHERE id = $1"
			      " AND status = 'FAILED' AND next_attempt_at IS NULL"
			      " AND lease_until IS NULL FOR UPDATE)"
			      " DELETE FROM outboxd.deliveries d USING dead WHERE d.id = dead.id",
			      &p, &rc);
		if (res && strtoull(PQcmdTuples(res), NULL, 10) == 1) {
			done++;
			pg_p_text(&q, items[i].event_id);
			rc = pg_run_done(pg, c, S_EVENT_DELETE_ORPHAN, &q, NULL);
		}
		PQclear(res);
	}
	rc = pg_tx_end(pg, c, rc);
	pg_give(c);
	store_deliveries_free(items, n);
	if (rc == STORE_OK)
		*purged = done;
	return rc;
}

/* Deletes up to limit (at most CLEANUP_BATCH) PROCESSED deliveries processed at or before
 * before_ms (attempts cascade) and the events they leave without deliveries, in one
 * transaction. *deleted = deliveries removed. */
static int cleanup_chunk(struct pg *pg, int64_t before_ms, size_t limit, size_t *deleted)
{
	struct params p = {0}, q = {0};
	struct pgarr events;
	PGresult *res = NULL;
	struct pgconn *c;
	size_t count = 0;
	int rc;

	if (!(c = pg_take(pg, ROLE_JANITOR, &rc)))
		return rc;
	pg_arr_init(&events, OID_TEXT);
	rc = pg_tx_begin(pg, c);
	pg_p_i64(&p, (int64_t)limit);
	pg_p_i64(&p, before_ms);
	pg_p_i64(&p, pg->cleanup_at);
	pg_p_text(&p, pg->cleanup_id);
	if (rc == STORE_OK)
		res = pg_run(pg, c, S_CLEANUP_CHUNK, &p, &rc);
	int64_t at = pg->cleanup_at;
	char id[UUID_STR_LEN];
	snprintf(id, sizeof(id), "%s", pg->cleanup_id);
	if (res) {
		count = (size_t)PQntuples(res);
		for (size_t i = 0; i < count; i++) {
			int64_t created = pg_get_int(res, (int)i, 1);
			const char *did = PQgetvalue(res, (int)i, 2);
			pg_arr_text(&events, PQgetvalue(res, (int)i, 0));
			if (created > at || (created == at && strcmp(did, id) > 0)) {
				at = created;
				snprintf(id, sizeof(id), "%s", did);
			}
		}
		pg_p_arr(&q, &events);
		rc = events.failed ? STORE_ERROR :
				     pg_run_done(pg, c, S_EVENTS_DELETE_ORPHANS, &q, NULL);
	}
	rc = pg_tx_end(pg, c, rc);
	if (rc == STORE_OK) { /* the cursor moves with what was deleted, under the role's lock */
		pg->cleanup_at = at;
		snprintf(pg->cleanup_id, sizeof(pg->cleanup_id), "%s", id);
	}
	pg_give(c);
	PQclear(res);
	pg_arr_free(&events);
	if (rc == STORE_OK)
		*deleted = count;
	return rc;
}

int pg_cleanup_batch(store *st, int64_t before_ms, size_t limit, int from_start,
		     size_t *deleted)
{
	struct pg *pg = pg_of(st);

	if (from_start) {
		pg->cleanup_at = 0;
		pg->cleanup_id[0] = '\0';
	}
	return cleanup_chunk(pg, before_ms, limit, deleted);
}

/* In statements of CLEANUP_CHUNK events from pg->sweep_after. */
int pg_cleanup_sweep(store *st, int64_t before_ms, int from_start, int all, int *done)
{
	struct pg *pg = pg_of(st);
	size_t looked = 0;
	int rc = STORE_OK;

	*done = 0;
	if (from_start)
		pg->sweep_after[0] = '\0';
	while (rc == STORE_OK && (all || looked < CLEANUP_SWEEP)) {
		struct params p = {0};
		struct pgconn *c;
		PGresult *res;

		pg_p_i64(&p, CLEANUP_CHUNK);
		pg_p_text(&p, pg->sweep_after);
		pg_p_i64(&p, before_ms);
		if (!(c = pg_take(pg, ROLE_JANITOR, &rc)))
			break;
		res = pg_run(pg, c, S_SWEEP_ORPHANS, &p, &rc);
		pg_give(c);
		if (!res)
			break;
		size_t n = (size_t)pg_get_int(res, 0, 1);
		if (n)
			pg_get_id(res, 0, 0, pg->sweep_after);
		PQclear(res);
		looked += n;
		if (n < CLEANUP_CHUNK) {
			*done = 1;
			break;
		}
	}
	return rc;
}

/* Both tables in one statement (one transaction): a day's counts are a few rows per
 * minute and subscription. */
int pg_attempt_counts_prune(store *st, int64_t before_ms)
{
	struct pg *pg = pg_of(st);
	struct params p = {0};
	struct pgconn *c;
	PGresult *res;
	int rc;

	pg_p_i64(&p, before_ms);
	if (!(c = pg_take(pg, ROLE_JANITOR, &rc)))
		return rc;
	res = pg_run_sql(pg, c,
			 "WITH m AS (DELETE FROM outboxd.attempt_minutes WHERE minute < $1)"
			 " DELETE FROM outboxd.attempt_errors WHERE at < $1", &p, &rc);
	pg_give(c);
	PQclear(res);
	return rc;
}

/* ---- jobs and audit ------------------------------------------------------ */

static void job_params(struct params *p, const struct store_job *j)
{
	pg_p_text(p, j->id);
	pg_p_text(p, j->kind);
	pg_p_text(p, j->state);
	pg_p_text(p, j->filter);
	pg_p_bool(p, j->force);
	pg_p_i64(p, j->rate);
	pg_p_i64(p, j->matched);
	pg_p_i64(p, j->done);
	pg_p_text(p, j->cursor);
	pg_p_text(p, j->actor);
	pg_p_text(p, j->error);
	pg_p_i64(p, j->created_at);
	pg_p_i64(p, j->updated_at ? j->updated_at : clock_now_ms());
}

/* A write on the API connection; STORE_NOT_FOUND when it touched no row. */
static int api_write(struct pg *pg, const char *sql, const struct params *p)
{
	struct pgconn *c;
	PGresult *res;
	int rc;

	if (!(c = pg_take(pg, ROLE_API, &rc)))
		return rc;
	res = pg_run_sql(pg, c, sql, p, &rc);
	pg_give(c);
	if (res && strtoull(PQcmdTuples(res), NULL, 10) == 0)
		rc = STORE_NOT_FOUND;
	PQclear(res);
	return rc;
}

int pg_job_create(store *st, const struct store_job *job)
{
	struct params p = {0};

	job_params(&p, job);
	return api_write(pg_of(st), "INSERT INTO outboxd.jobs(" JOB_COLUMNS ") VALUES ($1, $2, $3,"
			 " $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)", &p);
}

int pg_job_update(store *st, const struct store_job *job)
{
	struct params p = {0};

	pg_p_text(&p, job->id);
	pg_p_text(&p, job->kind);
	pg_p_text(&p, job->state);
	pg_p_i64(&p, job->matched);
	pg_p_i64(&p, job->done);
	pg_p_text(&p, job->cursor);
	pg_p_text(&p, job->error);
	pg_p_i64(&p, job->updated_at ? job->updated_at : clock_now_ms());
	/* Only a running job changes: a cancel that lands between a replay's batches is not
	 * overwritten by the replay's next progress write (which then finds nothing and
	 * stops), as on SQLite. */
	return api_write(pg_of(st), "UPDATE outboxd.jobs SET state = $3, matched = $4, done = $5,"
			 " cursor = $6, error = $7, updated_at = $8 WHERE id = $1 AND kind = $2"
			 " AND state = 'running'",
			 &p);
}

/* Runs a one-off query on the API connection and reads its rows (see pg_read_rows). */
static int query_rows(struct pg *pg, const char *sql, const struct params *p, size_t size,
		      pg_row_cb read, void **items, size_t *n)
{
	struct pgconn *c;
	PGresult *res = NULL;
	int rc;

	*items = NULL;
	*n = 0;
	if ((c = pg_take(pg, ROLE_API, &rc))) {
		res = pg_run_sql(pg, c, sql, p, &rc);
		pg_give(c);
	}
	if (!res)
		return rc;
	rc = pg_read_rows(res, size, read, items, n);
	PQclear(res);
	return rc;
}

/* A pg_row_cb for struct store_job (JOB_COLUMNS). */
static int read_job(const PGresult *res, int r, void *out)
{
	struct store_job *j = out;

	memset(j, 0, sizeof(*j));
	pg_get_id(res, r, 0, j->id);
	snprintf(j->kind, sizeof(j->kind), "%s", PQgetvalue(res, r, 1));
	snprintf(j->state, sizeof(j->state), "%s", PQgetvalue(res, r, 2));
	j->force = (int)pg_get_int(res, r, 4);
	j->rate = (int)pg_get_int(res, r, 5);
	j->matched = pg_get_int(res, r, 6);
	j->done = pg_get_int(res, r, 7);
	j->created_at = pg_get_int(res, r, 11);
	j->updated_at = pg_get_int(res, r, 12);
	if (pg_get_dup(res, r, 3, &j->filter) || pg_get_dup(res, r, 8, &j->cursor) ||
	    pg_get_dup(res, r, 9, &j->actor) || pg_get_dup(res, r, 10, &j->error)) {
		store_job_free(j);
		return -1;
	}
	return 0;
}

static int jobs_query(store *st, const char *sql, const char *one_id, struct store_job **items,
		      size_t *n)
{
	struct params p = {0};
	int rc;

	if (one_id)
		pg_p_text(&p, one_id);
	rc = query_rows(pg_of(st), sql, &p, sizeof(**items), read_job, (void **)items, n);
	if (rc != STORE_OK) {
		store_jobs_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return rc;
}

int pg_job_get(store *st, const char *id, struct store_job *out)
{
	struct store_job *rows = NULL;
	size_t n = 0;
	int rc = jobs_query(st, "SELECT " JOB_COLUMNS " FROM outboxd.jobs WHERE id = $1", id,
			    &rows, &n);
	return rc == STORE_OK ? store_take_one(rows, n, sizeof(*rows), out) : rc;
}

int pg_jobs_running(store *st, struct store_job **items, size_t *n)
{
	return jobs_query(st, "SELECT " JOB_COLUMNS " FROM outboxd.jobs WHERE state = 'running'"
			  " ORDER BY created_at", NULL, items, n);
}

int pg_jobs_list(store *st, const char *state, int64_t before_at, const char *before_id,
		 size_t limit, struct store_job **items, size_t *n)
{
	struct params p = {0};
	int rc;

	pg_p_text(&p, state);
	pg_p_text(&p, before_id);
	pg_p_i64(&p, before_at);
	pg_p_i64(&p, (int64_t)limit);
	rc = query_rows(pg_of(st), "SELECT " JOB_COLUMNS " FROM outboxd.jobs"
			" WHERE ($1::text IS NULL OR state = $1)"
			" AND ($2::text IS NULL OR (created_at, id) < ($3::bigint, $2::text))"
			" ORDER BY created_at DESC, id DESC LIMIT $4",
			&p, sizeof(**items), read_job, (void **)items, n);
	if (rc != STORE_OK) {
		store_jobs_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return rc;
}

int pg_audit_append(store *st, const struct store_audit *a)
{
	struct params p = {0};

	pg_p_text(&p, a->id);
	pg_p_i64(&p, a->at ? a->at : clock_now_ms());
	pg_p_text(&p, a->actor);
	pg_p_text(&p, a->action);
	pg_p_text(&p, a->target);
	pg_p_i64(&p, a->count);
	pg_p_text(&p, a->detail);
	return api_write(pg_of(st), "INSERT INTO outboxd.audit(id, at, actor, action, target,"
			 " count, detail) VALUES ($1, $2, $3, $4, $5, $6, $7)", &p);
}

/* A pg_row_cb for struct store_audit. */
static int read_audit(const PGresult *res, int r, void *out)
{
	struct store_audit *a = out;

	memset(a, 0, sizeof(*a));
	pg_get_id(res, r, 0, a->id);
	a->at = pg_get_int(res, r, 1);
	a->count = pg_get_int(res, r, 5);
	if (pg_get_dup(res, r, 2, &a->actor) || pg_get_dup(res, r, 3, &a->action) ||
	    pg_get_dup(res, r, 4, &a->target) || pg_get_dup(res, r, 6, &a->detail)) {
		free(a->actor);
		free(a->action);
		free(a->target);
		return -1;
	}
	return 0;
}

int pg_audit_list(store *st, const char *before_id, size_t limit,
		  struct store_audit **items, size_t *n)
{
	struct params p = {0};
	int rc;

	pg_p_text(&p, before_id);
	pg_p_i64(&p, (int64_t)limit);
	rc = query_rows(pg_of(st), "SELECT id, at, actor, action, target, count, detail"
			" FROM outboxd.audit WHERE ($1::text IS NULL OR id < $1)"
			" ORDER BY id DESC LIMIT $2", &p, sizeof(**items), read_audit,
			(void **)items, n);
	if (rc != STORE_OK) {
		store_audits_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return rc;
}

/* ---- subscriptions ------------------------------------------------------- */

static int sub_write(struct pg *pg, enum stmt k, const struct params *p)
{
	struct pgconn *c;
	size_t changed = 0;
	int rc;

	if (!(c = pg_take(pg, ROLE_API, &rc)))
		return rc;
	rc = pg_run_done(pg, c, k, p, &changed);
	pg_give(c);
	if (rc == STORE_OK && changed == 0)
		rc = STORE_NOT_FOUND;
	return rc;
}

int pg_sub_create(store *st, const struct sub_row *sub)
{
	int64_t now = clock_now_ms();
	struct params p = {0};

	pg_p_text(&p, sub->id);
	pg_p_text(&p, sub->name);
	pg_p_text(&p, sub->config);
	pg_p_bool(&p, sub->enabled);
	pg_p_i64(&p, sub->created_at ? sub->created_at : now);
	pg_p_i64(&p, sub->updated_at ? sub->updated_at : now);
	pg_p_i64(&p, sub->ordering);
	return sub_write(pg_of(st), S_SUB_INSERT, &p);
}

int pg_sub_update(store *st, const struct sub_row *sub)
{
	struct params p = {0};

	pg_p_text(&p, sub->id);
	pg_p_text(&p, sub->name);
	pg_p_text(&p, sub->config);
	pg_p_bool(&p, sub->enabled);
	pg_p_i64(&p, sub->updated_at ? sub->updated_at : clock_now_ms());
	pg_p_i64(&p, sub->ordering);
	return sub_write(pg_of(st), S_SUB_UPDATE, &p);
}

int pg_sub_delete(store *st, const char *id)
{
	struct params p = {0};

	pg_p_text(&p, id);
	return sub_write(pg_of(st), S_SUB_DELETE, &p);
}

/* The sealing rewrite (store/secrets.c): a compare-and-swap on the config alone. The
 * table's trigger tells the other instances, which reload. */
int pg_sub_config_swap(store *st, const char *id, const char *old_config,
		       const char *new_config)
{
	struct pg *pg = pg_of(st);
	struct params p = {0};
	struct pgconn *c;
	PGresult *res;
	int rc;

	pg_p_text(&p, id);
	pg_p_text(&p, old_config);
	pg_p_text(&p, new_config);
	if (!(c = pg_take(pg, ROLE_API, &rc)))
		return rc;
	res = pg_run_sql(pg, c, "UPDATE outboxd.subscriptions SET config = $3"
			 " WHERE id = $1 AND config = $2", &p, &rc);
	if (res && strtoull(PQcmdTuples(res), NULL, 10) == 0)
		rc = STORE_CONFLICT;
	PQclear(res);
	pg_give(c);
	return rc;
}

/* An UPDATE leaves the former row version (with the clear config) in the table's pages
 * until VACUUM; VACUUM FULL writes the table anew and drops the old files. The table is
 * small, so its exclusive lock is brief. PostgreSQL's own WAL and backups keep the old
 * values until they expire (docs/operations.md). */
void pg_sub_scrub(store *st)
{
	struct pg *pg = pg_of(st);
	struct pgconn *c;
	int rc;

	if (!(c = pg_take(pg, ROLE_API, &rc)))
		return;
	PQclear(pg_run_sql(pg, c, "VACUUM FULL outboxd.subscriptions", NULL, &rc));
	pg_give(c);
	if (rc != STORE_OK)
		log_warn("store: postgres: VACUUM FULL outboxd.subscriptions failed after sealing "
			 "subscriptions: former row versions keep their old config until the next "
			 "VACUUM");
}

/* A pg_row_cb for struct sub_row. */
static int read_sub(const PGresult *r, int row, void *out)
{
	struct sub_row *sub = out;

	memset(sub, 0, sizeof(*sub));
	pg_get_id(r, row, 0, sub->id);
	sub->enabled = (int)pg_get_int(r, row, 3);
	sub->created_at = pg_get_int(r, row, 4);
	sub->updated_at = pg_get_int(r, row, 5);
	sub->ordering = (int)pg_get_int(r, row, 6);
	if (pg_get_dup(r, row, 1, &sub->name) || pg_get_dup(r, row, 2, &sub->config)) {
		store_sub_free(sub);
		return -1;
	}
	return 0;
}

int pg_sub_get(store *st, const char *id, struct sub_row *out)
{
	return pg_get_one(pg_of(st), S_SUB_GET, id, read_sub, out);
}

int pg_sub_list(store *st, struct sub_row **items, size_t *n)
{
	struct sub_row *subs = NULL;
	PGresult *res;
	size_t count = 0;
	int rc;

	res = pg_read_run(pg_of(st), S_SUB_LIST, NULL, &rc);
	if (!res)
		return rc;
	rc = pg_read_rows(res, sizeof(*subs), read_sub, (void **)&subs, &count);
	PQclear(res);
	if (rc != STORE_OK) {
		store_subs_free(subs, count);
		return rc;
	}
	*items = subs;
	*n = count;
	return STORE_OK;
}

int pg_sub_page(store *st, int64_t after_at, const char *after_id, const char *name,
		const char *like, size_t limit, struct sub_row **items, size_t *n)
{
	struct params p = {0};
	int rc;

	pg_p_text(&p, after_id);
	pg_p_i64(&p, after_at);
	pg_p_i64(&p, (int64_t)limit);
	pg_p_text(&p, name);
	pg_p_text(&p, like);
	rc = query_rows(pg_of(st), "SELECT id, name, config, enabled, created_at, updated_at,"
			" ordering FROM outboxd.subscriptions"
			" WHERE ($1::text IS NULL OR (created_at, id) > ($2::bigint, $1::text))"
			" AND ($4::text IS NULL OR name = $4)"
			" AND ($5::text IS NULL OR name ILIKE $5)"
			" ORDER BY created_at, id LIMIT $3",
			&p, sizeof(**items), read_sub, (void **)items, n);
	if (rc != STORE_OK) {
		store_subs_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return rc;
}

/* ---- event types --------------------------------------------------------- */

static int read_type(const PGresult *r, int row, void *out)
{
	struct store_event_type *t = out;

	memset(t, 0, sizeof(*t));
	t->last_seen = pg_get_int(r, row, 1);
	return pg_get_dup(r, row, 0, &t->event_type) ? -1 : 0;
}

/* The distinct types by skipping through events_type (text_pattern_ops: byte order, the
 * ~>~ and ~<~ operators) — one seek for the next type and one for its newest event each,
 * not a scan of the events. */
int pg_event_types(store *st, const char *after, size_t limit, struct store_event_type **items,
		   size_t *n)
{
	struct params p = {0};

	pg_p_text(&p, after ? after : "");
	pg_p_i64(&p, (int64_t)limit);
	return query_rows(pg_of(st),
			  "WITH RECURSIVE t(et) AS ("
			  " SELECT (SELECT event_type FROM outboxd.events WHERE event_type ~>~ $1"
			  "  ORDER BY event_type USING ~<~ LIMIT 1)"
			  " UNION ALL"
			  " SELECT (SELECT event_type FROM outboxd.events WHERE event_type ~>~ t.et"
			  "  ORDER BY event_type USING ~<~ LIMIT 1) FROM t WHERE t.et IS NOT NULL)"
			  " SELECT et, (SELECT created_at FROM outboxd.events WHERE event_type = t.et"
			  "  ORDER BY created_at DESC LIMIT 1) FROM t WHERE et IS NOT NULL LIMIT $2",
			  &p, sizeof(**items), read_type, (void **)items, n);
}

/* ---- API tokens ---------------------------------------------------------- */

int pg_token_create(store *st, const struct store_token *t)
{
	struct params p = {0};

	pg_p_text(&p, t->id);
	pg_p_text(&p, t->name);
	pg_p_text(&p, t->scopes);
	pg_p_text(&p, t->hash);
	pg_p_text(&p, t->prefix);
	pg_p_text(&p, t->actor);
	pg_p_i64(&p, t->created_at ? t->created_at : clock_now_ms());
	if (t->expires_at)
		pg_p_i64(&p, t->expires_at);
	else
		pg_p_text(&p, NULL);
	return api_write(pg_of(st), "INSERT INTO outboxd.tokens(id, name, scopes, hash, prefix,"
			 " actor, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
			 &p);
}

int pg_token_touch(store *st, const char *id, int64_t at_ms)
{
	struct params p = {0};

	pg_p_text(&p, id);
	pg_p_i64(&p, at_ms);
	return api_write(pg_of(st), "UPDATE outboxd.tokens SET last_used_at ="
			 " GREATEST(last_used_at, $2::bigint) WHERE id = $1", &p);
}

int pg_token_delete(store *st, const char *id)
{
	struct params p = {0};

	pg_p_text(&p, id);
	return api_write(pg_of(st), "DELETE FROM outboxd.tokens WHERE id = $1", &p);
}

/* A pg_row_cb for struct store_token. */
static int read_token(const PGresult *res, int r, void *out)
{
	struct store_token *t = out;

	memset(t, 0, sizeof(*t));
	pg_get_id(res, r, 0, t->id);
	snprintf(t->hash, sizeof(t->hash), "%s", PQgetvalue(res, r, 3));
	snprintf(t->prefix, sizeof(t->prefix), "%s", PQgetvalue(res, r, 4));
	t->created_at = pg_get_int(res, r, 6);
	t->expires_at = pg_get_int(res, r, 7);          /* NULL reads as 0 */
	t->last_used_at = pg_get_int(res, r, 8);
	if (pg_get_dup(res, r, 1, &t->name) || pg_get_dup(res, r, 2, &t->scopes) ||
	    pg_get_dup(res, r, 5, &t->actor)) {
		free(t->name);
		free(t->scopes);
		return -1;
	}
	return 0;
}

int pg_token_list(store *st, struct store_token **items, size_t *n)
{
	struct params p = {0};
	int rc = query_rows(pg_of(st), "SELECT id, name, scopes, hash, prefix, actor, created_at,"
			    " expires_at, last_used_at FROM outboxd.tokens ORDER BY created_at, id", &p,
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

/* STORE_NOT_FOUND when the fact was not expect (store.c reads what it is). */
int pg_meta_swap(store *st, const char *name, const char *expect, const char *value)
{
	struct params p = {0};

	pg_p_text(&p, name);
	pg_p_text(&p, value);
	if (expect)
		pg_p_text(&p, expect);
	return api_write(pg_of(st), expect ?
			 "UPDATE outboxd.store_meta SET value = $2 WHERE name = $1 AND value = $3" :
			 "INSERT INTO outboxd.store_meta(name, value) VALUES ($1, $2)"
			 " ON CONFLICT (name) DO NOTHING", &p);
}

/* A pg_row_cb for struct store_meta_value. */
static int read_meta(const PGresult *res, int r, void *out)
{
	struct store_meta_value *v = out;
	snprintf(v->value, sizeof(v->value), "%s", PQgetvalue(res, r, 0));
	return 0;
}

int pg_meta_get(store *st, const char *name, struct store_meta_value *out)
{
	struct store_meta_value *rows = NULL;
	struct params p = {0};
	size_t n = 0;

	pg_p_text(&p, name);
	int rc = query_rows(pg_of(st), "SELECT value FROM outboxd.store_meta WHERE name = $1", &p,
			    sizeof(*rows), read_meta, (void **)&rows, &n);
	if (rc == STORE_OK)
		return store_take_one(rows, n, sizeof(*out), out);
	free(rows);
	return rc;
}
