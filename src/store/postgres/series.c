/* series.c: the PostgreSQL backend's attempt series (store_methods.attempt_series): the
 * attempts of a time range grouped by bucket and duration, on the API connection through
 * the attempts_started index; store/series.c folds the groups into buckets. Must not
 * write. */
#include "store/postgres/pg_int.h"

/* The groups, with every attempt of their bucket counted beside them (a window over the
 * groups); with a subscription, only its deliveries' attempts. */
#define SERIES_SQL(JOIN)                                                                  \
	"SELECT (a.started_at - $1::bigint) / $2::bigint, a.duration_ms,"                  \
	" count(*) FILTER (WHERE a.code BETWEEN 200 AND 299),"                             \
	" count(*) FILTER (WHERE a.code BETWEEN 400 AND 499),"                             \
	" count(*) FILTER (WHERE a.code NOT BETWEEN 200 AND 299"                           \
	"   AND a.code NOT BETWEEN 400 AND 499),"                                          \
	" (sum(count(*)) OVER (PARTITION BY (a.started_at - $1::bigint) / $2::bigint))"    \
	"::bigint"                                                                         \
	" FROM outboxd.attempts a" JOIN                                                    \
	" WHERE a.started_at >= $1::bigint AND a.started_at < $3::bigint"                  \
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
			subscription_id ? SERIES_SQL(" JOIN outboxd.deliveries d"
						     " ON d.id = a.delivery_id"
						     " AND d.subscription_id = $4::text")
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
