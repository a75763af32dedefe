/* pacing.h: when the dispatcher asks the writer for a claim of due deliveries, and for
 * how many. Pure: the clock and the dispatcher's counts come in, a decision goes out, so
 * tests/unit/core/test_pacing.c walks the rules as a table.
 *
 * The rules:
 *   - room is max_in_flight less the rounds active and a claim asked and not answered;
 *     a claim asks for min(room, batch)
 *   - a claim is worth asking for when nothing is active, when a whole batch fits, or
 *     when a quarter of max_in_flight is free: under load, claims stay large batches
 *     instead of one small transaction per finished round
 *   - after an answer: the store failed -> the next claim in store_down_us (a probe);
 *     it found as many as asked -> at once (more may be due); fewer -> at the idle poll,
 *     remembered as a short claim
 *   - the store's hint of when the next delivery is due brings the next claim forward
 *   - a wake-up (an ingest commit, a replay) brings it forward to now, but not sooner than
 *     gap_us after a short claim: a steady stream of commits is claimed in batches
 *   - while a subscription's queue in the dispatcher is full (saturated), no claim: it
 *     would bring more of that queue's deliveries, oldest first, only to hand them back;
 *     and a claim asks for no more than such queues have room for (claim_max)
 *   - a scheduled retry written just now that is due (retry_due) is claimed now
 *   - never while stopping, nor while a claim is asked */
#ifndef OUTBOXD_CORE_PACING_H
#define OUTBOXD_CORE_PACING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pacing_config {
	int max_in_flight;       /* rounds at once */
	int batch;               /* the most a claim asks for (retry_batch) */
	int64_t idle_poll_us;    /* after a short claim: look again this much later */
	int64_t gap_us;          /* after a short claim, a wake-up waits this long */
	int64_t store_down_us;   /* after a failed claim: probe again this much later */
};

/* What pacing keeps between the dispatcher's turns (monotonic microseconds). */
struct pacing {
	int64_t next_claim_us;   /* the next claim is not asked before this */
	int64_t short_claim_us;  /* the last claim that found fewer than it asked */
};

/* A claim of asked deliveries was answered with got of them (ok: the store answered). */
void pacing_answered(struct pacing *p, const struct pacing_config *c, int64_t now_us, bool ok,
		     size_t asked, size_t got);

/* The store says the next delivery is due in wait_ms (0 or less: due now). */
void pacing_due_hint(struct pacing *p, int64_t now_us, int64_t wait_ms);

/* New work was committed (the dispatcher was woken), while the store is up. */
void pacing_woken(struct pacing *p, const struct pacing_config *c, int64_t now_us);

/* The dispatcher's turn. */
struct pacing_turn {
	int active;              /* rounds in progress */
	size_t asked;            /* deliveries of a claim asked and not answered, 0: none */
	bool stopping;
	bool retry_due;          /* a retry written just now is due */
	bool saturated;          /* a full queue waits to drain (the dispatcher bounds how
	                            long it may hold claims back) */
	size_t claim_max;        /* a claim asks for at most this many (the room left in
	                            queues that overflowed), 0 = no such bound */
};

struct pacing_decision {
	size_t claim;            /* deliveries to ask for now; 0: no claim this turn */
	bool worth;              /* a claim would be worth its transaction now */
	int64_t wait_us;         /* until the next claim may be asked (-1: not before an
	                            answer or free room; the dispatcher waits on those) */
};

struct pacing_decision pacing_decide(const struct pacing *p, const struct pacing_config *c,
				     const struct pacing_turn *t, int64_t now_us);

/* Claims yield to producers waiting for an acknowledgement. A claim brings the backlog
 * (due deliveries in the store, oldest first); fresh events reach the dispatcher through
 * the hand-off at ingest, without a claim. While a backlog drains at full speed the
 * machine is busy with it, and a producer sending single events waits longer for each
 * 202. So the writer spaces its claims by a gap: each time it takes small ingest
 * requests (at most YIELD_SMALL_EVENTS events each: latency-sensitive producers, not
 * bulk loads) it tells the longest wait among them; a wait over YIELD_TARGET_US doubles
 * the gap (from YIELD_GAP_MIN_US, up to YIELD_GAP_MAX_US), a wait under it takes an
 * eighth off; once no small request came for YIELD_IDLE_US the gap is 0 again. The
 * backlog then drains as fast as the acknowledgements allow. The cap keeps a floor under
 * the claims however long producers wait: one claim (retry_batch, 100 by default) per
 * 10 ms, 10,000 deliveries/s, so deliveries the hand-off had no room for (a slow
 * subscriber holding max_in_flight) are never starved by a steady stream of events. */
#define YIELD_SMALL_EVENTS 16
#define YIELD_TARGET_US 1000
#define YIELD_GAP_MIN_US 500
#define YIELD_GAP_MAX_US 10000
#define YIELD_IDLE_US (200 * 1000)

struct claim_yield {
	int64_t gap_us;          /* between the end of a claim and the next one */
	int64_t small_us;        /* when the last small request was taken, 0 = never */
};

/* Small ingest requests were taken at now_us; the longest had waited waited_us. */
void claim_yield_observe(struct claim_yield *y, int64_t now_us, int64_t waited_us);

/* The gap now (0 once small requests stopped coming). */
int64_t claim_yield_gap(struct claim_yield *y, int64_t now_us);

#endif
