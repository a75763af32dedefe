/* endpoints.h: what the dispatcher keeps per endpoint — the host, port and path an
 * http(s) subscription delivers to, shared by every subscription that delivers there: its
 * adaptive concurrency limit (core/concurrency.h: how many requests it takes at once,
 * learned from its answers), the requests open to it, and the rounds waiting for room.
 * Instance-local: each outboxd learns its own limit (docs/flow-control.md).
 *
 * The path is part of the endpoint because one host often serves handlers of very
 * different speeds: one limit for the host would read a slow handler's usual latency as
 * the fast one's queueing, and hold the fast one behind the slow one. The key shows the
 * path only as a hash ("host:port#1a2b3c4d"): webhook URLs often carry a token in their
 * path, and the key is a metric label.
 *
 * No locks: only the dispatcher's thread touches a table. What stats show is published to
 * core/metrics, where other threads read it. This file never looks inside a round. */
#ifndef OUTBOXD_DELIVER_ENDPOINTS_H
#define OUTBOXD_DELIVER_ENDPOINTS_H

#include <stdint.h>

#include "core/concurrency.h"
#include "util/hashchain.h"

#define ENDPOINT_KEY_MAX 280  /* "host:port#pathhash": a host of at most 255 bytes */

/* One request open to an endpoint (embedded in the dispatcher's round). */
struct endpoint_req {
	int64_t start_us;            /* monotonic */
	uint64_t turn;               /* the dispatcher's turn it began in */
	int seen;                    /* requests open to its endpoint when it began, itself
	                                and the others its turn began included */
	int stalled;                 /* reported as stalled once */
	struct endpoint_req *prev, *next; /* in its endpoint's list, oldest first */
};

struct endpoint_table;

struct endpoint {
	char key[ENDPOINT_KEY_MAX];
	struct concurrency conc;
	int in_flight;               /* requests open to it now */
	struct endpoint_req *oldest, *newest; /* those requests, in the order they began */
	uint64_t turn;               /* the dispatcher's turn of the latest begin ... */
	int turn_peak;               /* ... and the requests open after it */
	int queued;                  /* rounds parked because it had no room */
	int refs;                    /* subscriptions' states pointing here */
	int dirty;                   /* changed since last published (endpoint_changed) */
	int64_t last_used_ms;        /* monotonic */
	struct hc_node link;         /* in the table, by key */
	struct endpoint *next_dirty; /* in the table's list of those to publish */
	struct endpoint_table *table;
};

struct endpoint_table {
	struct hc_table eps;         /* struct endpoint by key */
	struct endpoint *dirty;      /* those changed since published, newest first */
	struct concurrency_params params;
	int64_t published_ms;        /* monotonic: the last publish */
	int64_t pruned_ms;           /* monotonic: the last drop of idle endpoints */
};

/* e changed: its metrics are published by the next endpoints_tick that is due (only the
 * changed ones are visited, however many endpoints there are). */
static inline void endpoint_changed(struct endpoint *e)
{
	if (!e->dirty) {
		e->dirty = 1;
		e->next_dirty = e->table->dirty;
		e->table->dirty = e;
	}
}

/* An empty table whose endpoints may open up to max_limit requests each (the instance's
 * max_in_flight). */
void endpoints_init(struct endpoint_table *t, int max_limit);

/* The key of an http:// or https:// URL's endpoint: lowercase host, port (default 80 or
 * 443) and, for a path other than "/", "#" and 8 hex digits of the path's FNV-1a hash
 * (no user info, query or fragment). 0, or -1 when url is not one (another scheme, no
 * host, a host over 255 bytes). */
int endpoint_key(const char *url, char key[ENDPOINT_KEY_MAX]);

/* The state of url's endpoint, made on first use; NULL when url has none (not http(s))
 * or memory ran out (its requests then go without the adaptive limit). */
struct endpoint *endpoints_get(struct endpoint_table *t, const char *url, int64_t now_us);

/* 1 when another request may open to e now. */
static inline int endpoint_has_room(const struct endpoint *e)
{
	return e->in_flight < concurrency_limit(&e->conc);
}

/* A request to e begins in the dispatcher's turn `turn` (r is the caller's, kept until
 * endpoint_end); returns the requests open to e now, itself included. */
int endpoint_begin(struct endpoint *e, struct endpoint_req *r, int64_t now_us, uint64_t turn);
/* The requests open to e when r began, itself included, and counting those begun in the
 * same dispatcher turn after it: a burst begun together is open together (the first of
 * a burst of 100 began with 1 open, yet was one of 100 microseconds later). Before
 * endpoint_end. */
int endpoint_seen(const struct endpoint *e, const struct endpoint_req *r);
/* It ended (answered or not). */
void endpoint_end(struct endpoint *e, struct endpoint_req *r);

/* A request to e ended after latency_us with outcome (core/concurrency.h); in_flight: the
 * requests open to e when it started (endpoint_seen). Also reports the oldest request
 * still open as stalled when it has been open far longer than answers take. */
void endpoint_record(struct endpoint *e, int64_t now_us, int64_t latency_us,
		     enum concurrency_outcome outcome, int in_flight);

/* Publishes what changed to core/metrics (at most every 100 ms), drops endpoints nobody
 * used for an hour (looked for once a minute). now_ms monotonic. Returns the ms until a change not published yet
 * is due, -1 when none waits. */
int64_t endpoints_tick(struct endpoint_table *t, int64_t now_ms);

void endpoints_free_all(struct endpoint_table *t);

#endif
