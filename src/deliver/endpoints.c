/* endpoints.c: per-endpoint adaptive concurrency for the dispatcher (see endpoints.h).
 * Must not block, allocate per attempt, or touch a round. */
#include "deliver/endpoints.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/metrics.h"
#include "util/clock.h"
#include "util/hash.h"
#include "util/log.h"

#define IDLE_MS (3600 * 1000LL)   /* an endpoint unused this long is forgotten */
#define PUBLISH_MS 100            /* stats are at most this old */
#define PRUNE_MS (60 * 1000)      /* idle endpoints are looked for this often */

void endpoints_init(struct endpoint_table *t, int max_limit)
{
	memset(t, 0, sizeof(*t));
	concurrency_params_default(&t->params);
	if (max_limit > 0)
		t->params.max_limit = max_limit;
}

int endpoint_key(const char *url, char key[ENDPOINT_KEY_MAX])
{
	int port;
	const char *a;
	if (strncasecmp(url, "http://", 7) == 0) {
		a = url + 7;
		port = 80;
	} else if (strncasecmp(url, "https://", 8) == 0) {
		a = url + 8;
		port = 443;
	} else {
		return -1;
	}
	size_t alen = strcspn(a, "/?#");
	const char *at = memchr(a, '@', alen); /* user info is not part of the endpoint */
	if (at) {
		alen -= (size_t)(at + 1 - a);
		a = at + 1;
	}
	const char *host = a, *colon;
	size_t hlen = alen;
	if (a[0] == '[') { /* [v6]:port */
		const char *close = memchr(a, ']', alen);
		if (!close)
			return -1;
		hlen = (size_t)(close + 1 - a);
		colon = close + 1 < a + alen && close[1] == ':' ? close + 1 : NULL;
	} else {
		colon = memchr(a, ':', alen);
		if (colon)
			hlen = (size_t)(colon - a);
	}
	if (colon) {
		char *end;
		long p = strtol(colon + 1, &end, 10);
		if (end == colon + 1 || end != a + alen || p < 1 || p > 65535)
			return -1;
		port = (int)p;
	}
	if (!hlen || hlen > 255)
		return -1;
	for (size_t i = 0; i < hlen; i++)
		key[i] = (char)tolower((unsigned char)host[i]);
	const char *path = a + alen;
	size_t plen = strcspn(path, "?#");
	if (*path == '/' && plen > 1)
		snprintf(key + hlen, ENDPOINT_KEY_MAX - hlen, ":%d#%08x", port,
			 hash_fnv1a_n(path, plen));
	else
		snprintf(key + hlen, ENDPOINT_KEY_MAX - hlen, ":%d", port);
	return 0;
}

static struct endpoint *endpoint_of(struct hc_node *n)
{
	return (struct endpoint *)((char *)n - offsetof(struct endpoint, link));
}

struct endpoint *endpoints_get(struct endpoint_table *t, const char *url, int64_t now_us)
{
	char key[ENDPOINT_KEY_MAX];
	if (endpoint_key(url, key))
		return NULL;
	uint32_t h = hash_fnv1a(key);
	struct endpoint *e = NULL;
	for (struct hc_node *n = hc_chain(&t->eps, h); n && !e; n = n->next)
		if (n->hash == h && strcmp(endpoint_of(n)->key, key) == 0)
			e = endpoint_of(n);
	if (!e) {
		if (!(e = calloc(1, sizeof(*e))) || hc_add(&t->eps, &e->link, h)) {
			log_error("dispatcher: out of memory: endpoint %s goes without its adaptive "
				  "concurrency limit", key);
			free(e);
			return NULL;
		}
		memcpy(e->key, key, sizeof(key));
		concurrency_init(&e->conc, &t->params, now_us);
		e->table = t;
		endpoint_changed(e);
	}
	e->last_used_ms = now_us / 1000;
	return e;
}

/* The requests of e's latest turn (the newest of its list, begun one after the other)
 * saw every request open after it: they were open together. */
static void turn_close(struct endpoint *e)
{
	for (struct endpoint_req *q = e->newest; q && q->turn == e->turn; q = q->prev)
		if (q->seen < e->turn_peak)
			q->seen = e->turn_peak;
}

int endpoint_seen(const struct endpoint *e, const struct endpoint_req *r)
{
	return r->turn == e->turn && e->turn_peak > r->seen ? e->turn_peak : r->seen;
}

int endpoint_begin(struct endpoint *e, struct endpoint_req *r, int64_t now_us, uint64_t turn)
{
	if (e->turn != turn) {
		turn_close(e);
		e->turn = turn;
		e->turn_peak = 0;
	}
	r->turn = turn;
	r->start_us = now_us;
	r->stalled = 0;
	r->next = NULL;
	r->prev = e->newest;
	if (e->newest)
		e->newest->next = r;
	else
		e->oldest = r;
	e->newest = r;
	endpoint_changed(e);
	r->seen = ++e->in_flight;
	if (e->in_flight > e->turn_peak)
		e->turn_peak = e->in_flight;
	return r->seen;
}

void endpoint_end(struct endpoint *e, struct endpoint_req *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		e->oldest = r->next;
	if (r->next)
		r->next->prev = r->prev;
	else
		e->newest = r->prev;
	r->prev = r->next = NULL;
	e->in_flight--;
	endpoint_changed(e);
}

void endpoint_record(struct endpoint *e, int64_t now_us, int64_t latency_us,
		     enum concurrency_outcome outcome, int in_flight)
{
	int before = concurrency_limit(&e->conc);
	int after = concurrency_record(&e->conc, now_us, latency_us, outcome, in_flight);
	/* Answers come back while an older request is still open far longer than they take:
	 * it waits in the receiver's queue (or its connection in a full accept queue, to be
	 * retried by the kernel a second later). Said now, the limit stops growing into it. */
	struct endpoint_req *old = e->oldest;
	int64_t stall = concurrency_stalled_after(&e->conc);
	if (old && !old->stalled && stall > 0 && now_us - old->start_us > stall) {
		old->stalled = 1;
		after = concurrency_record(&e->conc, now_us, now_us - old->start_us,
					   CONCURRENCY_STALLED, e->in_flight);
	}
	endpoint_changed(e);
	if (after <= before / 2 && before >= 8)
		log_info("endpoint %s: concurrency limit %d -> %d after a %s answer (%lld ms)",
			 e->key, before, after, concurrency_outcome_name(outcome),
			 (long long)(latency_us / 1000));
}

static void publish(const struct endpoint *e)
{
	metrics_endpoint(e->key, concurrency_limit(&e->conc), e->in_flight, e->queued,
			 e->conc.latency_min_us, e->conc.latency_smooth_us, (long)e->conc.cuts);
}

/* hc_sweep visitors: every endpoint dropped; one nobody used for an hour (ctx: now,
 * monotonic ms), its metrics with it. */
static int drop(struct hc_node *n, void *ctx)
{
	(void)ctx;
	free(endpoint_of(n));
	return 1;
}

static int drop_idle(struct hc_node *n, void *ctx)
{
	struct endpoint *e = endpoint_of(n);
	int64_t now_ms = *(const int64_t *)ctx;
	if (e->refs || e->in_flight || e->queued || e->dirty || now_ms - e->last_used_ms <= IDLE_MS)
		return 0;
	metrics_endpoint_gone(e->key);
	return drop(n, NULL);
}

int64_t endpoints_tick(struct endpoint_table *t, int64_t now_ms)
{
	if (now_ms - t->published_ms < PUBLISH_MS)
		return t->dirty ? t->published_ms + PUBLISH_MS - now_ms : -1;
	t->published_ms = now_ms;
	while (t->dirty) {
		struct endpoint *e = t->dirty;
		t->dirty = e->next_dirty;
		e->next_dirty = NULL;
		e->dirty = 0;
		publish(e);
	}
	if (now_ms - t->pruned_ms >= PRUNE_MS) {
		t->pruned_ms = now_ms;
		hc_sweep(&t->eps, drop_idle, &now_ms);
	}
	return -1;
}

void endpoints_free_all(struct endpoint_table *t)
{
	hc_sweep(&t->eps, drop, NULL);
	hc_free(&t->eps);
	t->dirty = NULL;
}
