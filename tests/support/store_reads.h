/* store_reads.h: the store's reads that tests run on threads of their own (bg_call.h) to
 * tell one that waits from one that returns: /readyz's ping, a listing of deliveries,
 * the stats. Each takes the store handle and returns the store's answer. Header-only. */
#ifndef OUTBOXD_TESTS_STORE_READS_H
#define OUTBOXD_TESTS_STORE_READS_H

#include <stdlib.h>
#include <string.h>

#include "store/store.h"
#include "util/clock.h"

static inline int read_ping(void *st)
{
	return store_ping(st);
}

/* The first page of ten deliveries, unfiltered. */
static inline int read_list_some(void *st)
{
	struct delivery_filter f;
	struct store_delivery *items = NULL;
	size_t n = 0;
	char *cursor = NULL;

	memset(&f, 0, sizeof(f));
	f.limit = 10;
	int rc = store_deliveries_list(st, &f, &items, &n, &cursor);
	store_deliveries_free(items, n);
	free(cursor);
	return rc;
}

static inline int read_stats(void *st)
{
	struct store_stats s;

	memset(&s, 0, sizeof(s));
	int rc = store_stats(st, clock_now_ms(), 60000, &s);
	if (rc == STORE_OK)
		store_stats_free(&s);
	return rc;
}

#endif
