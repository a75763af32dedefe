/* clock.h: wall and monotonic time in milliseconds (and finer where a protocol wants it),
 * RFC 3339 formatting. */
#ifndef OUTBOXD_UTIL_CLOCK_H
#define OUTBOXD_UTIL_CLOCK_H

#include <stddef.h>
#include <stdint.h>

#define RFC3339_LEN 32

int64_t clock_now_ms(void);      /* CLOCK_REALTIME, ms since the epoch */
int64_t clock_mono_ms(void);     /* CLOCK_MONOTONIC, ms */
int64_t clock_mono_us(void);     /* CLOCK_MONOTONIC, µs */
int64_t clock_now_us(void);      /* CLOCK_REALTIME, µs since the epoch (the clock of the
                                    kernel's socket timestamps, SO_TIMESTAMP) */
int64_t clock_now_ns(void);      /* CLOCK_REALTIME, ns since the epoch (OTLP span times) */
int64_t clock_mono_ns(void);     /* CLOCK_MONOTONIC, ns */

/* "2026-11-21T23:04:15.123Z" into buf (at least RFC3339_LEN bytes). Returns buf. */
char *clock_format_rfc3339(int64_t ms, char *buf);

/* Parses RFC 3339 ("2026-11-21T23:04:15Z", optional fraction, 'Z' or ±hh:mm) into ms
 * since the epoch. Returns 0 on success, -1 otherwise. */
int clock_parse_rfc3339(const char *text, int64_t *out_ms);

#endif
