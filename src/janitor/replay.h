/* replay.h: runs paced replay jobs (POST /v1/dlq/replay with a filter). Each tick
 * replays as many matching deliveries as the job's rate allows since its last tick, and
 * saves its progress (count and cursor) so a restart resumes where it stopped. */
#ifndef OUTBOXD_JANITOR_REPLAY_H
#define OUTBOXD_JANITOR_REPLAY_H

#include <stdint.h>

#include "core/ops_event.h"
#include "core/subscriptions.h"
#include "store/store.h"

#define REPLAY_MAX_JOBS 64

struct replay_runner {
	store *st;
	struct sub_registry *reg;
	struct ops_event_hook ops;   /* a job that ends: outboxd.replay_job.finished */
	struct {
		char id[UUID_STR_LEN];
		int64_t last_ms;    /* monotonic time of its last tick */
		double credit;      /* deliveries it may still replay */
	} pace[REPLAY_MAX_JOBS];
};

/* Advances every running job. Returns how many deliveries were put back (the caller
 * wakes the dispatcher when > 0), or -1 when the store failed. *active = running jobs. */
long replay_tick(struct replay_runner *r, int64_t now_mono_ms, int *active);

#endif
