/* count_cache.c: a count that grows with the store, taken afresh only as often as its
 * size makes worth it (count_cache.h says why). */
#include "store/count_cache.h"

void count_cache_init(struct count_cache *c)
{
	pthread_mutex_init(&c->mu, NULL);
	c->value = -1;
	c->until_ms = 0;
	c->counting = 0;
}

void count_cache_destroy(struct count_cache *c)
{
	pthread_mutex_destroy(&c->mu);
}

int count_cache_get(struct count_cache *c, int64_t now_ms, int64_t *value)
{
	int reuse;

	pthread_mutex_lock(&c->mu);
	/* a small count is not reused while another caller counts either: it is quick */
	reuse = c->value >= 0 &&
		(now_ms < c->until_ms || (c->counting && c->value >= COUNT_CACHE_ROWS_PER_S));
	if (reuse)
		*value = c->value;
	else
		c->counting = 1;
	pthread_mutex_unlock(&c->mu);
	return reuse;
}

void count_cache_put(struct count_cache *c, int64_t now_ms, int64_t value)
{
	int64_t keep_ms = 0;

	if (value >= COUNT_CACHE_ROWS_PER_S) {
		keep_ms = value / (COUNT_CACHE_ROWS_PER_S / 1000);
		if (keep_ms > COUNT_CACHE_MAX_MS)
			keep_ms = COUNT_CACHE_MAX_MS;
	}
	pthread_mutex_lock(&c->mu);
	c->value = value;
	c->until_ms = now_ms + keep_ms;
	c->counting = 0;
	pthread_mutex_unlock(&c->mu);
}

void count_cache_fail(struct count_cache *c)
{
	pthread_mutex_lock(&c->mu);
	c->counting = 0;
	pthread_mutex_unlock(&c->mu);
}
