/* trace.h: W3C trace context (traceparent: 00-<trace id>-<parent id>-<flags>).
 * A producer's traceparent on POST /v1/events is kept with the event, and every
 * delivery attempt carries the same trace id with a span id of its own, so a trace runs
 * producer -> outboxd -> subscriber. Pure functions. */
#ifndef OUTBOXD_CORE_TRACE_H
#define OUTBOXD_CORE_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#define TRACEPARENT_LEN 56 /* 55 characters and the NUL */

/* True when text is a valid version-00 traceparent (lowercase hex, ids not all zero). */
bool trace_valid(const char *text);

/* Writes the traceparent of one attempt into out: the trace id and flags of parent when
 * it is valid, else a trace id made from the 32 hex digits of event_id (a UUID) and
 * flags 01; span is the attempt's span id (0 is replaced by 1). */
void trace_child(const char *parent, const char *event_id, uint64_t span,
		 char out[TRACEPARENT_LEN]);

#endif
