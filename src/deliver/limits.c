/* limits.c: per-subscription circuit breakers and limits for the dispatcher (see
 * limits.h). Must not block, allocate per attempt, touch a round, or decide what a
 * round's outcome does to the breaker (core/outcome.c does). */
#include "deliver/limits.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"
#include "util/clock.h"
#include "util/duration.h"
#include "util/hash.h"
#include "util/log.h"

#define IDLE_MS (3600 * 1000LL)  /* state unused this long is dropped */
#define PARKED_MIN_CAP 32        /* rounds a subscription may park at least (pool allowing) */

static struct sub_limits *limits_of(struct hc_node *n)
{
	return (struct sub_limits *)((char *)n - offsetof(struct sub_limits, link));
}

struct sub_limits *limits_get(struct limits_table *t, const struct subscription *s)
{
	uint32_t h = hash_fnv1a(s->id);
	struct sub_limits *x = NULL;

	for (struct hc_node *n = hc_chain(&t->subs, h); n && !x; n = n->next)
		if (n->hash == h && strcmp(limits_of(n)->sub_id, s->id) == 0)
			x = limits_of(n);
	if (!x) {
		if (!(x = calloc(1, sizeof(*x))) || hc_add(&t->subs, &x->link, h)) {
			log_error("dispatcher: out of memory: subscription %s runs without its "
				  "circuit breaker and limits", s->id);
			free(x);
			return NULL;
		}
		memcpy(x->sub_id, s->id, UUID_STR_LEN);
		breaker_init(&x->state.breaker);
	}
	x->window_ms = s->breaker.failure_window_ms;
	x->last_used_ms = clock_mono_ms();
	return x;
}

/* hc_sweep visitors: every state dropped; one idle too long (ctx: now, monotonic ms). */
static int drop(struct hc_node *n, void *ctx)
{
	struct sub_limits *x = limits_of(n);
	(void)ctx;
	if (x->published && x->published_state != 0) /* its breaker goes with it */
		metrics_circuit(x->sub_id, 0, 0);
	free(x->ep_for);
	free(x);
	return 1;
}

static int drop_idle(struct hc_node *n, void *ctx)
{
	struct sub_limits *x = limits_of(n);
	int64_t now_mono_ms = *(const int64_t *)ctx;
	int64_t idle = x->window_ms > IDLE_MS ? x->window_ms : IDLE_MS;
	if (x->refs || x->parked || now_mono_ms - x->last_used_ms <= idle)
		return 0;
	if (x->ep)
		x->ep->refs--;
	return drop(n, NULL);
}

void limits_prune(struct limits_table *t, int64_t now_mono_ms)
{
	hc_sweep(&t->subs, drop_idle, &now_mono_ms);
}

void limits_free_all(struct limits_table *t)
{
	hc_sweep(&t->subs, drop, NULL);
	hc_free(&t->subs);
}

/* The breaker's state for GET /v1/stats and the metrics, when it changed since last
 * published (admissions run once per delivery; changes are rare). */
static void publish(struct sub_limits *x)
{
	int state = (int)x->state.breaker.state;
	int64_t until = x->state.breaker.open_until_ms;
	if (x->published && x->published_state == state && x->published_until == until)
		return;
	metrics_circuit(x->sub_id, state, until);
	x->published = 1;
	x->published_state = state;
	x->published_until = until;
}

enum breaker_admission limits_admit(struct sub_limits *x, const struct subscription *s,
				    const char *delivery_id, int *probe)
{
	enum breaker_admission a = breaker_admit(&x->state.breaker, &s->breaker, clock_now_ms());

	if (a == BREAKER_PROBE) {
		*probe = 1;
		log_info("subscription %s: circuit half-open: delivery %s is the probe", x->sub_id,
			 delivery_id);
	}
	publish(x);
	return a;
}

void limits_apply(struct sub_limits *x, const struct subscription *s, const struct outcome *o)
{
	const struct circuit_breaker_config *c = &s->breaker;
	char window[32], left[32];

	x->state = o->sub;
	if (o->breaker == OUTCOME_BREAKER_OPENED || o->breaker == OUTCOME_BREAKER_REOPENED)
		log_warn("subscription %s: circuit open%s: deliveries take delay actions for %s "
			 "(%d failed deliveries within %s)", x->sub_id,
			 o->breaker == OUTCOME_BREAKER_REOPENED ? " again: the probe failed" : "",
			 duration_format(x->state.breaker.open_until_ms - clock_now_ms(), left,
					 sizeof(left)),
			 c->max_errors, duration_format(c->failure_window_ms, window, sizeof(window)));
	else if (o->breaker == OUTCOME_BREAKER_CLOSED)
		log_info("subscription %s: circuit closed: the probe succeeded", x->sub_id);
	if (o->counted)
		publish(x);
}

static void bucket_sync(struct sub_limits *x, const struct subscription *s, int64_t now_us)
{
	if (x->bucket_rate == s->rate_limit)
		return;
	double burst = token_bucket_burst_for(s->rate_limit);
	if (x->bucket_rate == 0)
		token_bucket_init(&x->bucket, s->rate_limit, burst, now_us);
	else
		token_bucket_configure(&x->bucket, s->rate_limit, burst, now_us);
	x->bucket_rate = s->rate_limit;
}

int limits_cap(const struct subscription *s)
{
	if (s->concurrency > 0 && (s->max_in_flight <= 0 || s->concurrency < s->max_in_flight))
		return s->concurrency;
	return s->max_in_flight > 0 ? s->max_in_flight : 0;
}

struct endpoint *limits_endpoint(struct sub_limits *x, const struct subscription *s,
				 struct endpoint_table *t, int64_t now_us)
{
	if (s->concurrency > 0)
		return NULL; /* pinned: limits_cap holds it */
	if (!x->ep_for || strcmp(x->ep_for, s->endpoint) != 0) {
		if (x->ep)
			x->ep->refs--;
		free(x->ep_for);
		x->ep_for = strdup(s->endpoint);
		x->ep = x->ep_for ? endpoints_get(t, s->endpoint, now_us) : NULL;
		if (x->ep)
			x->ep->refs++;
	} else if (x->ep) {
		x->ep->last_used_ms = now_us / 1000;
	}
	return x->ep;
}

int limits_take(struct sub_limits *x, const struct subscription *s, int64_t now_us)
{
	int cap = limits_cap(s);
	if (cap > 0 && x->in_flight >= cap)
		return 0;
	if (s->rate_limit > 0) {
		bucket_sync(x, s, now_us);
		if (token_bucket_take(&x->bucket, now_us) > 0)
			return 0;
	}
	x->in_flight++;
	return 1;
}

void limits_put(struct sub_limits *x)
{
	x->in_flight--;
}

int64_t limits_wait(struct sub_limits *x, const struct subscription *s, int64_t now_us)
{
	int cap = limits_cap(s);
	if (cap > 0 && x->in_flight >= cap)
		return -1;
	if (s->rate_limit > 0) {
		struct token_bucket peek;
		bucket_sync(x, s, now_us);
		peek = x->bucket;
		return token_bucket_take(&peek, now_us);
	}
	return 0;
}

int limits_parked_cap(int pool_size, const struct subscription *s, int ep_limit)
{
	int cap = PARKED_MIN_CAP, share = pool_size / 4, held = limits_cap(s);

	if (ep_limit > 0)
		cap = share = pool_size / 2;
	if (held > 0 && held < INT32_MAX / 4 && held * 4 > cap)
		cap = held * 4;
	if (s->rate_limit * 2 > cap)
		cap = s->rate_limit * 2 < INT32_MAX ? (int)(s->rate_limit * 2) : INT32_MAX;
	if (share < 1)
		share = 1;
	return cap < share ? cap : share;
}
