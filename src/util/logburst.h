/* logburst.h: one log line for a burst of the same failure, not one per occurrence.
 *
 * A failure that every request meets while it lasts (a full disk refusing each ingest)
 * is logged when it starts, at most once per interval while it goes on, with the count
 * since the line before, and when it is over. Thread-safe without a lock; the counts are
 * for the log lines only (a line may be said twice or count one occurrence late when
 * threads race). Zero-initialised: no burst going on. */
#ifndef OUTBOXD_UTIL_LOGBURST_H
#define OUTBOXD_UTIL_LOGBURST_H

#include <stdatomic.h>
#include <stdint.h>

struct log_burst {
	_Atomic long count;           /* occurrences since it started; 0: none going on */
	_Atomic long unlogged;        /* occurrences since the last line about it */
	_Atomic int64_t first_ms;     /* when it started */
	_Atomic int64_t last_ms;      /* the latest occurrence */
	_Atomic int64_t logged_ms;    /* the last line about it */
};

/* The interval outboxd's bursts use: a line a minute while one goes on. */
#define LOG_BURST_EVERY_MS 60000

enum log_burst_say {
	LOG_BURST_QUIET,  /* say nothing */
	LOG_BURST_START,  /* it started: say so */
	LOG_BURST_STILL,  /* it goes on: say so, with *unlogged and *span_ms */
};

/* One occurrence at now_ms (monotonic). A pause of interval_ms without one starts a new
 * burst. For LOG_BURST_STILL, *unlogged gets the occurrences since the last line and
 * *span_ms the time since it. */
enum log_burst_say log_burst_hit(struct log_burst *b, int64_t now_ms, int64_t interval_ms,
				 long *unlogged, int64_t *span_ms);

/* A success at now_ms: when a burst is going on and none has occurred for quiet_ms, it is
 * over: returns its occurrences (say so) and *span_ms its length; else 0. One atomic
 * load when none is going on. */
long log_burst_over(struct log_burst *b, int64_t now_ms, int64_t quiet_ms, int64_t *span_ms);

#endif
