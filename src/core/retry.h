/* retry.h: the retry decision after a failed attempt (DESIGN §3, seeds 000 and 004).
 * Pure: the random source is passed in so tests are deterministic. */
#ifndef OUTBOXD_CORE_RETRY_H
#define OUTBOXD_CORE_RETRY_H

#include <stdint.h>
#include <stdbool.h>

#include "core/model.h"

/* Random number source: returns a uniformly distributed value in [0, 1). */
typedef double (*retry_rand_cb)(void *ctx);

/* Delay before immediate try number `next_try` (2 = the second try of the round):
 * immediate_delay_ms * (next_try - 1), the whole round capped to 60 s (seed 004). */
int64_t retry_immediate_delay(const struct retry_policy *p, int next_try);

/* Delay before scheduled retry number `retry_no` (1 = first scheduled retry).
 *  fixed:       interval_ms
 *  linear:      interval_ms * retry_no
 *  exponential: min(max_delay_ms, min_delay_ms * factor^(retry_no-1)) with a random
 *               value drawn in [min_delay_ms, that] (seed 004's random re-queue window) */
int64_t retry_scheduled_delay(const struct retry_policy *p, int retry_no,
			      retry_rand_cb rnd, void *rnd_ctx);

/* True when another scheduled retry may follow `retries_done` scheduled retries
 * (max_retries 0 means forever). */
bool retry_may_schedule(const struct retry_policy *p, int retries_done);

/* True when an HTTP status counts as success (2xx). */
bool retry_is_success(int code);

#endif
