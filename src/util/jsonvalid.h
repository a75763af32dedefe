/* jsonvalid.h: is a byte span one JSON value that jansson would accept?
 *
 * Ingest stores an event's payload as the producer's bytes (util/jsonspan.h finds them),
 * so building jansson's tree of a payload only validated it, at ~150 instructions per
 * byte: most of the API's work per event. This check walks the bytes without building
 * anything. It is conservative: 1 means jansson (json_loadb with JSON_REJECT_DUPLICATES |
 * JSON_DECODE_INT_AS_REAL) accepts the value; 0 means it is invalid *or* the check is not
 * sure (numbers near a double's range, \u0000 and surrogate escapes, escaped keys, very
 * wide or deep objects), and the caller must ask jansson. Never the other way round: a
 * value jansson refuses is never answered 1 (tests/unit/util/test_jsonvalid.c compares the
 * two on generated inputs). */
#ifndef OUTBOXD_UTIL_JSONVALID_H
#define OUTBOXD_UTIL_JSONVALID_H

#include <stddef.h>

/* 1 when text[0, len) is exactly one JSON value jansson accepts (no surrounding
 * whitespace), 0 when it is not or the check cannot tell. */
int jsonvalid_value(const char *text, size_t len);

#endif
