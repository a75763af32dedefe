/* retry.h: the retry decision after a failed attempt (docs/retries.md; the defaults'
 * origin in docs/reference.md).
 * Pure: no clock and no I/O; the random source and the current time are passed in, so
 * tests are deterministic. docs/retries.md describes the rules for users. */
#ifndef OUTBOXD_CORE_RETRY_H
#define OUTBOXD_CORE_RETRY_H

#include <stdint.h>
#include <stdbool.h>

#include "core/model.h"

/* ---- the policy's own rules (one parser for subscriptions and settings) ---------------- */

/* "fixed", "linear" or "exponential" into *kind. 0, or -1 for another name (or NULL). */
int retry_policy_kind_parse(const char *name, enum retry_policy_kind *kind);

enum retry_rule {
	RETRY_RULE_KEPT = 0,
	RETRY_RULE_RANGE,   /* a value outside its range (factor 1..10, jitter 0..1) */
	RETRY_RULE_ORDER,   /* min_delay above max_delay */
};

/* Checks the rules every policy keeps, wherever it was read from (a subscription's
 * "retry" object, the retry_* settings): factor from 1 to 10, jitter from 0 to 1,
 * min_delay not above max_delay. On a broken rule, field names the field with prefix
 * ("retry." in the API, "retry_" in settings) and msg says the rule with the same names. */
enum retry_rule retry_policy_check(const struct retry_policy *p, const char *prefix, char *field,
				   size_t fieldlen, char *msg, size_t msglen);

/* Random number source: returns a uniformly distributed value in [0, 1). */
typedef double (*retry_rand_cb)(void *ctx);

/* The immediate round, every stagger included, fits in one minute (endpoint retry
 * staggers "inside an interval of 1 minute or less": docs/reference.md). */
#define RETRY_IMMEDIATE_ROUND_CAP_MS 60000

/* Delay before immediate try number `next_try` (2 = the second try of the round):
 * immediate_delay_ms * (next_try - 1), the whole round capped to 60 s. */
int64_t retry_immediate_delay(const struct retry_policy *p, int next_try);

/* Delay before scheduled retry number `retry_no` (1 = first scheduled retry).
 *  fixed:       interval_ms
 *  linear:      interval_ms * retry_no, capped at max(max_delay_ms, interval_ms)
 *  exponential: a random value drawn in [min_delay_ms, min(max_delay_ms,
 *               min_delay_ms * factor^retry_no)] (a random re-queue window,
 *               growing with the retry); factor 1: [min_delay_ms, max_delay_ms]
 * fixed and linear then lose a random part of up to jitter * delay: the result is drawn
 * in [delay * (1 - jitter), delay], so jitter spreads retries out but never makes one
 * later than the policy says. */
int64_t retry_scheduled_delay(const struct retry_policy *p, int retry_no,
			      retry_rand_cb rnd, void *rnd_ctx);

/* True when another scheduled retry may follow `retries_done` scheduled retries
 * (max_retries 0 means forever). */
bool retry_may_schedule(const struct retry_policy *p, int retries_done);

/* True when an HTTP status counts as success (2xx). */
bool retry_is_success(int code);

/* True when code is one of the policy's `permanent` statuses: the delivery goes to the
 * dead-letter queue at once, with no further immediate or scheduled try. */
bool retry_is_permanent(const struct retry_policy *p, int code);

/* Adds code to the permanent set. Returns 0, or -1 when code is outside 400..599. */
int retry_permanent_add(struct retry_policy *p, int code);

/* True when a response with this status has its Retry-After honoured (429 and 503). */
bool retry_after_applies(int code);

/* Parses a Retry-After header value (RFC 9110 §10.2.3): delta-seconds, or an HTTP-date
 * in any of the three formats a recipient must accept (IMF-fixdate, RFC 850, asctime).
 * Sets *delay_ms to the wait from now_ms (a date in the past waits 0; huge values
 * saturate). value is borrowed. Returns 0, or -1 when the value is not one of those. */
int retry_after_parse(const char *value, int64_t now_ms, int64_t *delay_ms);

/* The wait before the next scheduled try after a failed round, or -1 when there is none
 * and the delivery goes to the dead-letter queue.
 *  kind:          the round that just failed (immediate, scheduled or manual);
 *  retries_done:  scheduled retries made so far, this round included;
 *  code:          the last attempt's status (or mapped code);
 *  retry_after_ms: that attempt's Retry-After as a delay, -1 when it sent none.
 * Rules: a permanent code, a manual round, or exhausted max_retries: -1. Otherwise the
 * policy's delay; on 429/503 with a Retry-After the wait is
 *     max(policy delay, min(Retry-After, retry_after_max))
 * so the header can postpone a retry up to retry_after_max, never bring it forward. */
int64_t retry_next_delay(const struct retry_policy *p, enum attempt_kind kind, int retries_done,
			 int code, int64_t retry_after_ms, retry_rand_cb rnd, void *rnd_ctx);

/* Whether the immediate round goes on after try number `tries_done` (of max_tries)
 * failed with code: not after a success, a permanent code, the last try, or a 429/503
 * whose Retry-After asks for more than the next stagger (the scheduled retry then
 * honours it). */
bool retry_immediate_continue(const struct retry_policy *p, int tries_done, int max_tries,
			      int code, int64_t retry_after_ms);

/* A random wait in [min_delay_ms, max_delay_ms]: the re-queue window of a circuit
 * breaker's delay action (Connxio ReQueueMin/MaxDelaySeconds, 10-60 s). */
int64_t retry_requeue_delay(const struct retry_policy *p, retry_rand_cb rnd, void *rnd_ctx);

/* ---- slot filling of the re-queue window ----------------------------------------------
 * Connxio's backoff: "Messages are queued randomly within the interval until all slots
 * are used then the process repeats if necessary." The window is cut into slots of about
 * a second (RETRY_SLOT_MS; at most RETRY_SLOTS_MAX); each draw takes a slot not taken
 * yet in this cycle, at random, and a random point inside it; when every slot has been
 * taken, all are free again. So n re-queues of one subscription in a window of n seconds
 * fall one per second, where independent draws would put a third of the seconds empty
 * and some doubled. A struct retry_slots is a random source (retry_slots_draw) for the
 * functions above: the windows of delay actions and exponential retries are filled this
 * way, and a window that grows with the retry is cut into the same number of slots.
 * The owner keeps one per subscription; nothing is allocated. */
#define RETRY_SLOT_MS 1000
#define RETRY_SLOTS_MAX 256

struct retry_slots {
	uint64_t taken[RETRY_SLOTS_MAX / 64];
	int n;               /* slots of the cycle, 0 = not set up */
	int n_taken;
	retry_rand_cb rnd;   /* the uniform source the slots and points are drawn from */
	void *rnd_ctx;
};

/* The number of slots for the policy's window [min_delay, max_delay]: one per
 * RETRY_SLOT_MS, at least 1, at most RETRY_SLOTS_MAX. */
int retry_slots_for(const struct retry_policy *p);

/* Sets s up for n slots (clamped to 1..RETRY_SLOTS_MAX), every one free, drawing from
 * rnd. When s already has n slots only the source changes: the cycle goes on. */
void retry_slots_setup(struct retry_slots *s, int n, retry_rand_cb rnd, void *rnd_ctx);

/* A retry_rand_cb over a struct retry_slots (ctx): a value in [k/n, (k+1)/n) for a slot
 * k not taken yet in this cycle. */
double retry_slots_draw(void *ctx);

#endif
