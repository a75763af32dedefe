/* jsonspan.h: byte spans of JSON values inside a request body.
 *
 * outboxd delivers payloads exactly as the producer sent them (a contract: the payload
 * as-is, no transformation); re-encoding with jansson would change numbers such as 0.1.
 * These walkers report where each member or element value starts and ends.
 *
 * They follow the structure only, and do not check values. On text that is not valid
 * JSON they still never read outside text[0, len) and always end, but they may report
 * spans of garbage instead of -1. Never use them to validate: ingest either walks a body
 * jansson has validated, or (fast_load in intake/ingest.c) walks it first and then
 * validates every span reported and the body around them. */
#ifndef OUTBOXD_UTIL_JSONSPAN_H
#define OUTBOXD_UTIL_JSONSPAN_H

#include <stddef.h>

/* Called for each member of an object: its decoded key, key_len bytes at key (borrowed
 * for the call only, not NUL-terminated; "\u0000" in a key fails the walk, so a key of
 * valid text holds no NUL byte), and the span [start, end) of its value, offsets into
 * the text given to the walker. Return 0 to go on, non-zero to stop the walk (the walker
 * then returns that value). */
typedef int (*jsonspan_member_cb)(void *ctx, const char *key, size_t key_len, size_t start,
				  size_t end);
/* Called for each element of an array with its index and span. */
typedef int (*jsonspan_element_cb)(void *ctx, size_t index, size_t start, size_t end);

/* Walks the members of the JSON object in text[0, len) (leading/trailing whitespace
 * allowed), which must be valid JSON (see above). Returns 0 when the walk completed, -1
 * when text is not an object or its structure is broken (e.g. truncated), or the
 * callback's non-zero value. */
int jsonspan_object(const char *text, size_t len, jsonspan_member_cb cb, void *ctx);

/* Same for the elements of a JSON array. */
int jsonspan_array(const char *text, size_t len, jsonspan_element_cb cb, void *ctx);

#endif
