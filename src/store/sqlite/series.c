/* series.c: the SQLite backend's attempt series (store_methods.attempt_series): the attempts
 * of a time range grouped by bucket and duration, read on the reader connection through
 * the attempts_started index; store/series.c folds the groups into buckets. Must not
 * write. */
#include "store/sqlite/sqlite_int.h"

#include "util/log.h"

/* The groups, with every attempt of their bucket counted beside them (a window over the
 * groups). With a subscription, each attempt of the range finds its delivery by primary
 * key: CROSS JOIN keeps the attempts the outer loop (attempts_started), so a subscription
 * with a long history is never walked delivery by delivery. */
#define SERIES_SQL(JOIN)                                                                  \
	"SELECT (a.started_at - ?1) / ?2, a.duration_ms,"                                  \
	" sum(a.code BETWEEN 200 AND 299),"                                                \
	" sum(a.code BETWEEN 400 AND 499),"                                                \
	" sum(NOT (a.code BETWEEN 200 AND 299) AND NOT (a.code BETWEEN 400 AND 499)),"     \
	" sum(count(*)) OVER (PARTITION BY (a.started_at - ?1) / ?2)"                      \
	" FROM attempts a" JOIN                                                            \
	" WHERE a.started_at >= ?1 AND a.started_at < ?3"                                  \
	" GROUP BY 1, 2 ORDER BY 1, 2"

int sq_attempt_series(store *st, const char *subscription_id, int64_t from_ms,
		      int64_t bucket_ms, size_t n_buckets, store_series_group_cb group, void *ctx)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	int rc;

	pthread_mutex_lock(&sq->rmu);
	rc = sqlite3_prepare_v2(sq->rdb,
				subscription_id ? SERIES_SQL(" CROSS JOIN deliveries d"
							     " ON d.id = a.delivery_id"
							     " AND d.subscription_id = ?4")
						: SERIES_SQL(""),
				-1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s", sqlite3_errmsg(sq->rdb));
		goto out;
	}
	sqlite3_bind_int64(s, 1, from_ms);
	sqlite3_bind_int64(s, 2, bucket_ms);
	sqlite3_bind_int64(s, 3, from_ms + bucket_ms * (int64_t)n_buckets);
	if (subscription_id)
		sqlite3_bind_text(s, 4, subscription_id, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_series_group g = {
			.bucket = sqlite3_column_int64(s, 0),
			.duration_ms = sqlite3_column_int64(s, 1),
			.succeeded = sqlite3_column_int64(s, 2),
			.client_error = sqlite3_column_int64(s, 3),
			.server_error = sqlite3_column_int64(s, 4),
			.bucket_total = sqlite3_column_int64(s, 5),
		};
		if (group(ctx, &g)) {
			rc = SQLITE_NOMEM;
			goto out;
		}
	}
	if (rc == SQLITE_DONE)
		rc = SQLITE_OK;
	else
		sq_log_stmt_error(s, rc);
out:
	sqlite3_finalize(s);
	pthread_mutex_unlock(&sq->rmu);
	return rc == SQLITE_OK ? STORE_OK : sq_store_code(rc);
}
