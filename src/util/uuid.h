/* uuid.h: UUIDv7 identifiers (RFC 9562), time-ordered so ids sort by creation. */
#ifndef OUTBOXD_UTIL_UUID_H
#define OUTBOXD_UTIL_UUID_H

#include <stdbool.h>
#include <stdint.h>

/* Writes a new UUIDv7 (36 characters, lowercase, and the NUL) into out[37]. Thread-safe;
 * ids made by one process are strictly increasing. */
void uuid_v7(char out[37]);

/* True when text is a canonical 36-character UUID (any version, either case). */
bool uuid_valid(const char *text);

#endif
