/* series.c: the attempt series of the console's charts (store_attempt_series): attempts
 * per bucket by outcome, and the 50th and 99th percentile of their durations, from the
 * groups a backend reads (store_methods.attempt_series: one per bucket and duration, in
 * order). The percentile rule lives here only, so both backends answer alike. Must not
 * touch a backend's state: it only folds what the backend hands it. */
#include "store/backend.h"

#include <string.h>

/* The nearest rank of percentile p (1..100) among total values: the smallest k (1-based)
 * with k >= p * total / 100, in integers so no rounding decides it. */
static int64_t nearest_rank(int p, int64_t total)
{
	int64_t k = (p * total + 99) / 100;
	return k < 1 ? 1 : k;
}

struct fold {
	struct store_series_bucket *out;
	size_t n_buckets;
	int64_t bucket;             /* the bucket being walked, -1 before the first */
	int64_t seen;               /* its attempts walked so far (the shorter durations) */
};

/* Groups come by bucket, then duration: the running count of a bucket's attempts reaches
 * a percentile's rank in the group that holds the attempt of that rank. */
static int fold_group(void *ctx, const struct store_series_group *g)
{
	struct fold *f = ctx;
	struct store_series_bucket *b;
	int64_t n = g->succeeded + g->client_error + g->server_error;

	if (g->bucket < 0 || (size_t)g->bucket >= f->n_buckets || n <= 0)
		return 0;
	if (g->bucket != f->bucket) {
		f->bucket = g->bucket;
		f->seen = 0;
	}
	b = &f->out[g->bucket];
	b->succeeded += g->succeeded;
	b->client_error += g->client_error;
	b->server_error += g->server_error;
	f->seen += n;
	if (b->p50_ms < 0 && f->seen >= nearest_rank(50, g->bucket_total))
		b->p50_ms = g->duration_ms;
	if (b->p99_ms < 0 && f->seen >= nearest_rank(99, g->bucket_total))
		b->p99_ms = g->duration_ms;
	return 0;
}

int store_attempt_series(store *st, const char *subscription_id, int64_t from_ms,
			 int64_t bucket_ms, size_t n_buckets, struct store_series_bucket *out)
{
	struct fold f = {.out = out, .n_buckets = n_buckets, .bucket = -1};

	if (!st || !out || bucket_ms <= 0 || bucket_ms % STORE_MINUTE_MS ||
	    from_ms % STORE_MINUTE_MS || n_buckets == 0 || n_buckets > STORE_SERIES_MAX ||
	    (subscription_id && !*subscription_id))
		return STORE_INVALID;
	memset(out, 0, n_buckets * sizeof(*out));
	for (size_t i = 0; i < n_buckets; i++)
		out[i].p50_ms = out[i].p99_ms = -1;
	if (!st->methods->attempt_series)
		return STORE_ERROR;
	return st->methods->attempt_series(st, subscription_id, from_ms, bucket_ms, n_buckets,
				       fold_group, &f);
}
