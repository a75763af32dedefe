/* logburst.c: one log line for a burst of the same failure (logburst.h). */
#include "util/logburst.h"

enum log_burst_say log_burst_hit(struct log_burst *b, int64_t now_ms, int64_t interval_ms,
				 long *unlogged, int64_t *span_ms)
{
	/* none for an interval: whatever came before is over, this starts anew */
	if (atomic_load(&b->count) && now_ms - atomic_load(&b->last_ms) >= interval_ms)
		atomic_store(&b->count, 0);
	atomic_store(&b->last_ms, now_ms);
	if (atomic_fetch_add(&b->count, 1) == 0) {
		atomic_store(&b->first_ms, now_ms);
		atomic_store(&b->unlogged, 0);
		atomic_store(&b->logged_ms, now_ms);
		return LOG_BURST_START;
	}
	long n = atomic_fetch_add(&b->unlogged, 1) + 1;
	int64_t logged = atomic_load(&b->logged_ms);
	if (now_ms - logged < interval_ms ||
	    !atomic_compare_exchange_strong(&b->logged_ms, &logged, now_ms))
		return LOG_BURST_QUIET;
	atomic_fetch_sub(&b->unlogged, n);
	*unlogged = n;
	*span_ms = now_ms - logged;
	return LOG_BURST_STILL;
}

long log_burst_over(struct log_burst *b, int64_t now_ms, int64_t quiet_ms, int64_t *span_ms)
{
	if (!atomic_load_explicit(&b->count, memory_order_relaxed))
		return 0;
	int64_t last = atomic_load(&b->last_ms);
	if (now_ms - last < quiet_ms)
		return 0;
	long n = atomic_exchange(&b->count, 0);
	if (n)
		*span_ms = last - atomic_load(&b->first_ms);
	return n;
}
