/* ops_events.h: outboxd's operational events go into its own store, like any
 * event: `outboxd.delivery.dead`, `outboxd.subscription.disabled`, `...recovered`,
 * `outboxd.circuit.opened`, `...closed`, `outboxd.replay_job.finished`. Subscriptions whose
 * patterns start with "outboxd." receive them, signed, retried and dead-lettered like any
 * delivery (core/ops_event.h has the matching rules).
 *
 * The dispatcher and the janitor thread hand events to ops_events_emit (any thread, never
 * blocks); a thread of this file writes them through the writer. Per subscription and
 * kind at most `limit` events go out in each `window`; the rest are counted and one
 * summary event ({"summary": true, "suppressed": n}) follows when the window ends. They
 * are best effort: events still queued when the process is killed are lost, and a storm
 * yields a summary, not a flood. */
#ifndef OUTBOXD_INTAKE_OPS_EVENTS_H
#define OUTBOXD_INTAKE_OPS_EVENTS_H

#include <jansson.h>
#include <stdint.h>

#include "core/subscriptions.h"
#include "store/writer.h"

struct ops_events;

/* w and reg are borrowed and outlive the emitter. limit >= 1, window_ms >= 1000. */
struct ops_events *ops_events_start(struct writer *w, struct sub_registry *reg, int limit,
				    int64_t window_ms);
/* An ops_event_cb (core/ops_event.h): ctx is the struct ops_events. payload consumed. */
void ops_events_emit(void *ctx, const char *kind, const char *subscription_id,
		     json_t *payload);
/* New limits for the windows (SIGHUP): limit >= 1, window_ms >= 1000; any thread. */
void ops_events_set_limits(struct ops_events *o, int limit, int64_t window_ms);
/* Writes what is queued (while the store answers), then stops the thread and frees. */
void ops_events_stop(struct ops_events *o);

#endif
