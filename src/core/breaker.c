/* breaker.c: the circuit breaker state machine (see breaker.h). Pure: no clock, no I/O,
 * no allocation. */
#include "core/breaker.h"

#include <string.h>

const char *breaker_state_name(enum breaker_state s)
{
	switch (s) {
	case BREAKER_CLOSED:
		return "closed";
	case BREAKER_OPEN:
		return "open";
	case BREAKER_HALF_OPEN:
		return "half_open";
	}
	return "unknown";
}

void breaker_init(struct breaker *b)
{
	memset(b, 0, sizeof(*b));
	b->state = BREAKER_CLOSED;
}

static int64_t window_of(const struct circuit_breaker_config *c)
{
	return c->failure_window_ms > 0 ? c->failure_window_ms : 1;
}

enum breaker_state breaker_state_at(const struct breaker *b, const struct circuit_breaker_config *c,
				    int64_t now_ms)
{
	if (!c->enabled)
		return BREAKER_CLOSED;
	if (b->state == BREAKER_OPEN && now_ms >= b->open_until_ms)
		return BREAKER_HALF_OPEN;
	return b->state;
}

static void close_breaker(struct breaker *b)
{
	b->state = BREAKER_CLOSED;
	b->window_start_ms = 0;
	b->failures = 0;
	b->open_until_ms = 0;
	b->probing = 0;
}

enum breaker_admission breaker_admit(struct breaker *b, const struct circuit_breaker_config *c,
				     int64_t now_ms)
{
	if (!c->enabled) {
		if (b->state != BREAKER_CLOSED)
			close_breaker(b); /* switched off while open: forget it */
		return BREAKER_PASS;
	}
	switch (breaker_state_at(b, c, now_ms)) {
	case BREAKER_CLOSED:
		return BREAKER_PASS;
	case BREAKER_OPEN:
		return BREAKER_DELAY;
	case BREAKER_HALF_OPEN:
		b->state = BREAKER_HALF_OPEN;
		if (b->probing)
			return BREAKER_DELAY;
		b->probing = 1;
		return BREAKER_PROBE;
	}
	return BREAKER_PASS;
}

static void open_breaker(struct breaker *b, int64_t now_ms, int64_t until_ms)
{
	b->state = BREAKER_OPEN;
	b->open_until_ms = until_ms > now_ms ? until_ms : now_ms + 1;
	b->opened_at_ms = now_ms;
	b->probing = 0;
	b->failures = 0;
	b->window_start_ms = 0;
}

void breaker_record(struct breaker *b, const struct circuit_breaker_config *c, int64_t now_ms,
		    bool success, bool probe)
{
	int64_t window = window_of(c);

	if (!c->enabled)
		return;
	if (probe) {
		if (success)
			close_breaker(b);
		else
			open_breaker(b, now_ms, now_ms + window);
		return;
	}
	if (b->state != BREAKER_CLOSED || success)
		return; /* only the probe speaks for an open breaker; successes count nothing */
	/* Fixed windows (Connxio: count for FailureCountIntervalMinutes, then reset). */
	if (b->failures == 0 || now_ms >= b->window_start_ms + window ||
	    now_ms < b->window_start_ms) {
		b->window_start_ms = now_ms;
		b->failures = 0;
	}
	if (b->failures < INT32_MAX)
		b->failures++;
	/* Connxio: it starts delaying when MaxErrorsPerInterval "is hit", so reaching
	 * max_errors opens it. */
	if (b->failures >= (c->max_errors > 0 ? c->max_errors : 1))
		open_breaker(b, now_ms, b->window_start_ms + window);
}

void breaker_probe_abandoned(struct breaker *b)
{
	b->probing = 0;
}
