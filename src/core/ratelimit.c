/* ratelimit.c: the token bucket (see ratelimit.h). Pure. */
#include "core/ratelimit.h"

#include <math.h>

#define SLOWEST_RATE (1.0 / 3600.0)
#define TOKEN_EPSILON 1e-6

double token_bucket_burst_for(double rate)
{
	return rate > 1.0 ? rate : 1.0;
}

static void sanitize(double *rate, double *burst)
{
	if (!(*rate > 0.0) || isinf(*rate))
		*rate = isinf(*rate) && *rate > 0 ? 1e9 : SLOWEST_RATE;
	if (!(*burst >= 1.0))
		*burst = 1.0;
	if (isinf(*burst))
		*burst = 1e9;
}

void token_bucket_init(struct token_bucket *b, double rate, double burst, int64_t now_us)
{
	sanitize(&rate, &burst);
	b->rate = rate;
	b->burst = burst;
	b->tokens = burst;
	b->last_us = now_us;
}

static void refill(struct token_bucket *b, int64_t now_us)
{
	if (now_us <= b->last_us)
		return; /* same instant, or the clock went backwards: nothing new */
	b->tokens += (double)(now_us - b->last_us) * b->rate / 1e6;
	if (b->tokens > b->burst)
		b->tokens = b->burst;
	b->last_us = now_us;
}

void token_bucket_configure(struct token_bucket *b, double rate, double burst, int64_t now_us)
{
	sanitize(&rate, &burst);
	refill(b, now_us);
	b->rate = rate;
	b->burst = burst;
	if (b->tokens > burst)
		b->tokens = burst;
}

int64_t token_bucket_take(struct token_bucket *b, int64_t now_us)
{
	refill(b, now_us);
	/* The epsilon forgives rounding: after the wait this function reported, a token is
	 * there even when the sum comes to 0.9999999. */
	if (b->tokens >= 1.0 - TOKEN_EPSILON) {
		b->tokens = b->tokens > 1.0 ? b->tokens - 1.0 : 0.0;
		return 0;
	}
	double wait = ceil((1.0 - b->tokens) * 1e6 / b->rate);
	if (!(wait >= 1.0))
		return 1;
	if (wait > 9e15)
		return (int64_t)9e15;
	return (int64_t)wait;
}
