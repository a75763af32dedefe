/* ratelimit.h: a token bucket, for a subscription's rate_limit (requests per second).
 *
 * Pure: the caller passes monotonic time in microseconds and keeps the struct (the
 * dispatcher keeps one per rate-limited subscription, on its own thread). The bucket
 * holds up to `burst` tokens and refills at `rate` tokens per second; a request takes
 * one. A full bucket lets a burst through at once, then the pace is the rate. */
#ifndef OUTBOXD_CORE_RATELIMIT_H
#define OUTBOXD_CORE_RATELIMIT_H

#include <stdint.h>

struct token_bucket {
	double rate;      /* tokens per second, > 0 */
	double burst;     /* capacity, >= 1 */
	double tokens;    /* available now (as of last_us) */
	int64_t last_us;  /* when tokens was last brought up to date */
};

/* The burst outboxd uses for a rate: one second's worth, at least one request. */
double token_bucket_burst_for(double rate);

/* A full bucket. rate <= 0 (or NaN) is treated as a very slow 1 per hour; burst < 1 as 1. */
void token_bucket_init(struct token_bucket *b, double rate, double burst, int64_t now_us);

/* Changes the rate and burst, keeping the tokens already there (capped at the new burst). */
void token_bucket_configure(struct token_bucket *b, double rate, double burst, int64_t now_us);

/* Takes one token when there is one: returns 0. Otherwise takes nothing and returns the
 * microseconds until one will be there (>= 1). A clock that went backwards refills
 * nothing. */
int64_t token_bucket_take(struct token_bucket *b, int64_t now_us);

#endif
