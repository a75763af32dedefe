/* count_cache.h: a count that grows with the store, taken afresh only as often as its
 * size makes worth it.
 *
 * GET /v1/stats, /metrics and the console (every 5 s) show how many deliveries are
 * PROCESSED. Every other count there reads a small partial index; that one is the table's
 * whole row count less the others, and a store that keeps its delivered deliveries
 * (cleanup is off by default) grows without bound: counting a million rows took 150-190
 * ms of PostgreSQL's CPU, ten million ten times that, on every scrape and every console
 * refresh. So a count of N is reused for N / COUNT_CACHE_ROWS_PER_S seconds (at most
 * COUNT_CACHE_MAX_MS): the counting then takes at most ~2% of one core however often it is
 * asked for and however large the store. A count under COUNT_CACHE_ROWS_PER_S is never
 * reused (a small store always shows the exact figure). docs/operations.md says what an
 * operator sees. Thread-safe. */
#ifndef OUTBOXD_STORE_COUNT_CACHE_H
#define OUTBOXD_STORE_COUNT_CACHE_H

#include <pthread.h>
#include <stdint.h>

#define COUNT_CACHE_ROWS_PER_S 100000
#define COUNT_CACHE_MAX_MS 300000

struct count_cache {
	pthread_mutex_t mu;
	int64_t value;              /* the last count, -1 before the first */
	int64_t until_ms;           /* it may be reused until then */
	int counting;               /* a caller is counting afresh */
};

void count_cache_init(struct count_cache *c);
void count_cache_destroy(struct count_cache *c);

/* 1 and *value when a count may serve at now_ms: the last one while it is fresh enough,
 * or while another caller is counting afresh. 0 when the caller is to count: it must then
 * call count_cache_put with the count or count_cache_fail. */
int count_cache_get(struct count_cache *c, int64_t now_ms, int64_t *value);
void count_cache_put(struct count_cache *c, int64_t now_ms, int64_t value);
void count_cache_fail(struct count_cache *c);

#endif
