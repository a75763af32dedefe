/* dispatcher.h: the delivery engine.
 *
 * One thread claims due deliveries in batches, hands each attempt to the sink its
 * endpoint belongs to (sink.h: HTTP over libcurl multi, Kafka), runs the immediate-retry
 * round, decides the next state with core/outcome, and hands results to the store's
 * writer (store/writer.h), which writes them in groups. */
#ifndef OUTBOXD_DELIVER_DISPATCHER_H
#define OUTBOXD_DELIVER_DISPATCHER_H

#include <stdint.h>

#include "core/subscriptions.h"
#include "core/ops_event.h"
#include "deliver/sink.h"
#include "store/store.h"
#include "store/writer.h"

struct dispatcher_config {
	int max_in_flight;        /* concurrent deliveries of this instance */
	int batch;                /* deliveries per claim */
	int64_t lease_ms;
	int64_t connect_timeout_ms; /* an attempt may take this to connect before its own
	                             timeout starts: its lease must cover both */
	int64_t shutdown_grace_ms;
	int64_t disabled_delay_ms; /* how long a disabled subscription's deliveries wait */
	const struct sink_set *sinks; /* borrowed, opened by the caller (sink_set_open) and
	                             closed after dispatcher_stop: the delivery targets, each
	                             endpoint to the member of its scheme (sink.h); they also
	                             say which dead deliveries are marked for a dead-letter
	                             topic (sink_set_dead_letter) */
	/* Endpoint health: disable_after when a subscription sets none (0 =
	 * never); disable is called on the dispatcher's thread, once per failure streak, to
	 * disable a subscription whose every attempt failed that long (reason borrowed). */
	int64_t disable_after_ms;
	void (*disable)(void *ctx, const char *subscription_id, const char *reason);
	void *disable_ctx;
	/* Operational events (core/ops_event.h): dead deliveries, circuits opened and
	 * closed, subscriptions disabled and recovered. */
	struct ops_event_hook ops;
	/* log_deliveries: one audit log line per round outcome once it is written,
	 * EXECUTED, FAILED (a retry follows) or DEAD. */
	int log_deliveries;
};

struct dispatcher;

/* Starts the dispatcher thread. w and reg are borrowed and must outlive it: claims and
 * result writes go through the writer (store/writer.h), one client at a time. */
struct dispatcher *dispatcher_start(struct writer *w, struct sub_registry *reg,
				    const struct dispatcher_config *cfg);

/* Asks the dispatcher to look for due work now (new events, a replay). Thread-safe,
 * cheap, callable from any thread. */
void dispatcher_wake(struct dispatcher *d);

/* Stops claiming, lets in-flight requests finish within the grace period, releases what
 * is left back to the store, writes every result, and frees d. */
void dispatcher_stop(struct dispatcher *d);

/* When the dispatcher's loop last turned (monotonic µs; it turns at least about once a
 * second, IDLE_POLL_MS): what the service watchdog checks. Any thread. */
int64_t dispatcher_beat_us(struct dispatcher *d);

/* log_deliveries on or off from now on (a SIGHUP reload). Any thread. */
void dispatcher_set_log_deliveries(struct dispatcher *d, int on);

#endif
