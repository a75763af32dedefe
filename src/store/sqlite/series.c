/* series.c: the SQLite backend's attempt series (store_methods.attempt_series): the attempts
 * of a time range grouped by bucket and duration, read on the reader connection from the
 * per-minute counts results keep (counts.c); store/series.c folds the groups into
 * buckets. Must not write. */
#include "store/sqlite/sqlite_int.h"

#include "util/log.h"

/* The groups from the per-minute counts (counts.c), with every attempt of their bucket
 * counted beside them (a window over the groups); the rows of every instance that
 * recorded some are summed. The primary key (minute first) gives the range. */
#define SERIES_SQL(WHERE)                                                                 \
	"SELECT (minute - ?1) / ?2, duration_ms, sum(succeeded), sum(client_error),"      \
	" sum(server_error), sum(sum(succeeded + client_error + server_error))"          \
	"  OVER (PARTITION BY (minute - ?1) / ?2)"                                         \
	" FROM attempt_minutes WHERE minute >= ?1 AND minute < ?3" WHERE                   \
	" GROUP BY 1, 2 ORDER BY 1, 2"

int sq_attempt_series(store *st, const char *subscription_id, int64_t from_ms,
		      int64_t bucket_ms, size_t n_buckets, store_series_group_cb group, void *ctx)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	int rc;

	struct sq_reader *rd = sq_read_lock(sq);
	rc = sqlite3_prepare_v2(rd->db,
				subscription_id ? SERIES_SQL(" AND subscription_id = ?4")
						: SERIES_SQL(""),
				-1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s", sqlite3_errmsg(rd->db));
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
	sq_read_unlock(rd);
	return rc == SQLITE_OK ? STORE_OK : sq_store_code(rc);
}
