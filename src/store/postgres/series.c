/* series.c: the PostgreSQL backend's attempts-per-bucket series (store_attempt_series),
 * on the API connection through the attempts_started index. Must not write. */
#include "store/postgres/pg_int.h"

int pg_attempt_series(store *st, int64_t from_ms, int64_t bucket_ms, size_t n_buckets,
		      struct store_series_bucket *out)
{
	struct pg *pg = pg_of(st);
	struct params p = {0};
	struct pgconn *c;
	PGresult *r;
	int rc;

	pg_p_i64(&p, from_ms);
	pg_p_i64(&p, bucket_ms);
	pg_p_i64(&p, from_ms + bucket_ms * (int64_t)n_buckets);
	if (!(c = pg_take(pg, ROLE_API, &rc)))
		return rc;
	r = pg_run_sql(pg, c,
		       "SELECT (started_at - $1::bigint) / $2::bigint,"
		       " count(*) FILTER (WHERE code BETWEEN 200 AND 299),"
		       " count(*) FILTER (WHERE code BETWEEN 400 AND 499),"
		       " count(*) FILTER (WHERE code NOT BETWEEN 200 AND 299"
		       "   AND code NOT BETWEEN 400 AND 499)"
		       " FROM outboxd.attempts WHERE started_at >= $1::bigint"
		       " AND started_at < $3::bigint GROUP BY 1",
		       &p, &rc);
	pg_give(c);
	if (!r)
		return rc;
	for (int row = 0; row < PQntuples(r); row++) {
		int64_t i = pg_get_int(r, row, 0);
		if (i < 0 || (size_t)i >= n_buckets)
			continue;
		out[i].succeeded = pg_get_int(r, row, 1);
		out[i].client_error = pg_get_int(r, row, 2);
		out[i].server_error = pg_get_int(r, row, 3);
	}
	PQclear(r);
	return STORE_OK;
}
