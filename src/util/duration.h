/* duration.h: durations written with a unit ("500ms", "3s", "60m", "1h", "2d"). */
#ifndef OUTBOXD_UTIL_DURATION_H
#define OUTBOXD_UTIL_DURATION_H

#include <stddef.h>
#include <stdint.h>

/* Parses text into milliseconds. Accepts a non-negative integer followed by one of
 * ms, s, m, h, d; no spaces, no bare numbers. Returns 0 on success, -1 otherwise. */
int duration_parse(const char *text, int64_t *out_ms);

/* Writes the shortest exact form of ms ("1500ms", "3s", "60m" is written "1h") into
 * buf. Returns buf. */
char *duration_format(int64_t ms, char *buf, size_t len);

#endif
