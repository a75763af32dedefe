/* series.c: the SQLite backend's attempts-per-bucket series (store_attempt_series), read
 * on the reader connection through the attempts_started index. Must not write. */
#include "store/sqlite/sqlite_int.h"

#include "util/log.h"

int sq_attempt_series(store *st, int64_t from_ms, int64_t bucket_ms, size_t n_buckets,
		      struct store_series_bucket *out)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	int rc;

	pthread_mutex_lock(&sq->rmu);
	rc = sqlite3_prepare_v2(sq->rdb,
				"SELECT (started_at - ?1) / ?2,"
				" sum(code BETWEEN 200 AND 299),"
				" sum(code BETWEEN 400 AND 499),"
				" sum(NOT (code BETWEEN 200 AND 299) AND NOT (code BETWEEN 400 AND 499))"
				" FROM attempts WHERE started_at >= ?1 AND started_at < ?3"
				" GROUP BY 1",
				-1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s", sqlite3_errmsg(sq->rdb));
		goto out;
	}
	sqlite3_bind_int64(s, 1, from_ms);
	sqlite3_bind_int64(s, 2, bucket_ms);
	sqlite3_bind_int64(s, 3, from_ms + bucket_ms * (int64_t)n_buckets);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		int64_t i = sqlite3_column_int64(s, 0);
		if (i < 0 || (size_t)i >= n_buckets)
			continue;
		out[i].succeeded = sqlite3_column_int64(s, 1);
		out[i].client_error = sqlite3_column_int64(s, 2);
		out[i].server_error = sqlite3_column_int64(s, 3);
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
