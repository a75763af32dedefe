/* breaker.h: the circuit breaker of one subscription: max_errors failed rounds within a
 * failure_window open it, deliveries then take delay actions (docs/retries.md, "The
 * circuit breaker"; Connxio's error-rate breaking, docs/reference.md).
 *
 * A pure state machine: the caller passes the time in and keeps the struct (the
 * dispatcher keeps one per subscription, on its own thread). It counts failed delivery
 * rounds, not HTTP attempts: a round that failed after its immediate tries is one error,
 * as a message that failed its endpoint retries is one error to Connxio.
 *
 *   CLOSED    failures are counted in fixed windows of failure_window, starting at the
 *             first failure; a window that ends resets the count. Reaching max_errors
 *             failures in one window opens the breaker until that window ends.
 *   OPEN      no round may start: each claimed delivery takes a delay action instead.
 *             Turns HALF_OPEN by itself when open_until passes.
 *   HALF_OPEN one round, the probe, may start; the others take delay actions. The
 *             probe's success closes the breaker (a new count begins); its failure opens
 *             it again for a whole failure_window.
 * While OPEN or HALF_OPEN only the probe's outcome counts: rounds that started before
 * the breaker opened finish without changing it. With enabled = 0 every round passes. */
#ifndef OUTBOXD_CORE_BREAKER_H
#define OUTBOXD_CORE_BREAKER_H

#include <stdbool.h>
#include <stdint.h>

#include "core/model.h"

enum breaker_state {
	BREAKER_CLOSED = 0,
	BREAKER_OPEN = 1,
	BREAKER_HALF_OPEN = 2,
};

/* "closed", "open", "half_open" (the names GET /v1/stats shows). */
const char *breaker_state_name(enum breaker_state s);

struct breaker {
	enum breaker_state state;  /* as of the last call (OPEN may be over: breaker_state_at) */
	int64_t window_start_ms;   /* CLOSED: start of the counting window (with failures > 0) */
	int failures;              /* CLOSED: failed rounds in the window */
	int64_t open_until_ms;     /* OPEN: when the probe may go */
	int probing;               /* HALF_OPEN: the probe round is out */
	int64_t opened_at_ms;      /* when it last opened, 0 = never */
};

/* What a round that wants to start may do. */
enum breaker_admission {
	BREAKER_PASS = 0,   /* closed (or disabled): go */
	BREAKER_PROBE = 1,  /* half-open: go, as the one probe; report with probe = true */
	BREAKER_DELAY = 2,  /* open: send nothing, take a delay action */
};

/* A closed breaker with no failures. */
void breaker_init(struct breaker *b);

/* The state at now_ms, time included (an OPEN breaker whose open_until passed is
 * HALF_OPEN). Does not change b. */
enum breaker_state breaker_state_at(const struct breaker *b, const struct circuit_breaker_config *c,
				    int64_t now_ms);

/* Asks whether a round may start now; a BREAKER_PROBE answer marks the probe as out. */
enum breaker_admission breaker_admit(struct breaker *b, const struct circuit_breaker_config *c,
				     int64_t now_ms);

/* A round ended with success or failure. probe: it was admitted with BREAKER_PROBE. */
void breaker_record(struct breaker *b, const struct circuit_breaker_config *c, int64_t now_ms,
		    bool success, bool probe);

/* The probe ended without an outcome (handed back at shutdown, subscription disabled):
 * the next round asking becomes the probe. */
void breaker_probe_abandoned(struct breaker *b);

#endif
