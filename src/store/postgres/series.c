/* series.c: the PostgreSQL backend's attempt series (store_methods.attempt_series): the
 * attempts of a time range grouped by bucket and duration, on the API connection, read
 * from the per-minute counts results keep (attempt_minutes); store/series.c folds the
 * groups into buckets. Must not write. */
#include "store/postgres/pg_int.h"

/* The groups from the per-minute counts results keep, summed over the instances that
 * recorded them, with every attempt of their bucket counted beside them (a window over
 * the groups); with a subscription, only its own. The primary key (minute first) gives
 * the range. */
#define SERIES_SQL(WHERE)                                                                 \
	"SELECT (minute - $1::bigint) / $2::bigint, duration_ms, sum(succeeded)::bigint,"  \
	" sum(client_error)::bigint, sum(server_error)::bigint,"                          \
	" (sum(sum(succeeded + client_error + server_error))"                             \
	"  OVER (PARTITION BY (minute - $1::bigint) / $2::bigint))::bigint"              \
	" FROM outboxd.attempt_minutes"                                                    \
	" WHERE minute >= $1::bigint AND minute < $3::bigint" WHERE                        \
	" GROUP BY 1, 2 ORDER BY 1, 2"

int pg_attempt_series(store *st, const char *subscription_id, int64_t from_ms,
		      int64_t bucket_ms, size_t n_buckets, store_series_group_cb group, void *ctx)
{
	struct params p = {0};
	PGresult *r;
	int rc;

	pg_p_i64(&p, from_ms);
	pg_p_i64(&p, bucket_ms);
	pg_p_i64(&p, from_ms + bucket_ms * (int64_t)n_buckets);
	if (subscription_id)
		pg_p_text(&p, subscription_id);
	r = pg_read_sql(pg_of(st),
			subscription_id ? SERIES_SQL(" AND subscription_id = $4::text")
					: SERIES_SQL(""),
			&p, &rc);
	if (!r)
		return rc;
	for (int row = 0; row < PQntuples(r) && rc == STORE_OK; row++) {
		struct store_series_group g = {
			.bucket = pg_get_int(r, row, 0),
			.duration_ms = pg_get_int(r, row, 1),
			.succeeded = pg_get_int(r, row, 2),
			.client_error = pg_get_int(r, row, 3),
			.server_error = pg_get_int(r, row, 4),
			.bucket_total = pg_get_int(r, row, 5),
		};
		if (group(ctx, &g))
			rc = STORE_ERROR;
	}
	PQclear(r);
	return rc;
}
