/* jobs.h: the periodic work of outboxd, on one thread:
 *  - relay: moves rows producers inserted into the `outbox` table into events and
 *    deliveries, up to relay_batch rows per transaction, every relay_interval
 *    (the transactional outbox: producers insert in their own transactions);
 *  - lease reaper: returns deliveries whose lease expired to the pool (crash recovery);
 *  - cleanup: deletes PROCESSED deliveries when enabled (off by default), never FAILED
 *    ones;
 *  - replay jobs: paced filter replays started from the API (janitor/replay.c).
 * Scheduled retries need no job of their own: a FAILED delivery with next_attempt_at is
 * simply due work for the dispatcher. */
#ifndef OUTBOXD_JANITOR_JANITOR_H
#define OUTBOXD_JANITOR_JANITOR_H

#include <stdint.h>

#include "core/ops_event.h"
#include "core/subscriptions.h"
#include "store/store.h"

struct janitor_config {
	int64_t relay_interval_ms;
	size_t relay_batch;          /* outbox rows per transaction */
	int64_t reap_interval_ms;
	int cleanup_enabled;
	int64_t cleanup_interval_ms;
	int64_t cleanup_after_ms;   /* keep PROCESSED deliveries at least this long */
	int64_t stats_window_ms;    /* /v1/stats' window: attempt counts are kept at least
	                               this long, and at least a day (the series' reach) */
	struct ops_event_hook ops;   /* outboxd.replay_job.finished (core/ops_event.h) */
	/* Reads the subscriptions from the store again (store_subs_load with the daemon's
	 * defaults); called while the set is stale or a reload was asked for, at most every
	 * SUBS_RETRY_MS. NULL: never. */
	void (*reload_subs)(void *ctx);
	void *reload_ctx;
};

/* Called when a job created or returned due work (to wake the dispatcher). */
typedef void (*janitor_work_cb)(void *ctx);

struct janitor;

struct janitor *janitor_start(store *st, struct sub_registry *reg, const struct janitor_config *cfg,
			janitor_work_cb work, void *ctx);
/* Look at replay jobs now (one was just created). Thread-safe. */
void janitor_wake(struct janitor *j);
void janitor_stop(struct janitor *j);

#endif
