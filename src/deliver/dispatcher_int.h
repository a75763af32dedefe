/* dispatcher_int.h: what the two files of the dispatcher share — dispatcher.c (the loop:
 * claims, the sinks' fds, the writer) and round.c (the life of one delivery's round:
 * attempts, outcomes, limits, parking). Nobody else includes it but the dispatcher's unit
 * tests (tests/unit/deliver/), which drive rounds without the loop's thread or a store. */
#ifndef OUTBOXD_DELIVER_DISPATCHER_INT_H
#define OUTBOXD_DELIVER_DISPATCHER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/epoll.h>

#include "core/outcome.h"
#include "core/pacing.h"
#include "deliver/dispatcher.h"
#include "deliver/limits.h"
#include "deliver/sink.h"
#include "store/writer.h"

#define MAX_TRIES 10          /* most tries in one round (retry.immediate <= 10) */
#define MSG_LEN SINK_MSG_LEN
#define CAUSE_LEN SINK_CAUSE_LEN
#define IDLE_POLL_MS 1000     /* look for due work at least this often */
#define CLAIM_GAP_US 2000     /* after a short claim, new work waits this long to batch */
#define STORE_DOWN_CLAIM_US 500000 /* after a failed claim, the next one probes this late */
#define PRUNE_US (60 * 1000000LL) /* caches are pruned this often */
#define RELEASE_MIN_MS 500    /* a round handed back for a limit is due again after 0.5-1.5 s */
#define RELEASE_FULL_MS 100   /* ... for a full queue after 0.1-0.3 s (the claims that would
                                 bring it back wait for room in that queue) */
/* Once a queue overflowed, claims (and the ingest hand-off) wait for it to have room for
 * a whole claim (a claim now would bring more of its deliveries, oldest first, only to
 * hand them back: a write each), and then ask for no more than its room; but a queue
 * that started fewer than half a claim's rounds in this long is "stuck" (its receiver
 * takes too little for the wait to pay: the other subscriptions' deliveries come with
 * claims too), and claims go on without it until it empties. */
#define SATURATED_CLAIM_WAIT_US (250 * 1000)
#define EPOLL_EVENTS 256      /* ready sockets taken per epoll_wait */
/* Leases (docs/reliability.md, "Leases"): an attempt starts only when the lease outlasts
 * its connect and its timeout by LEASE_MARGIN_MS (clock differences between instances,
 * the result's way to the store); rounds are looked at every RENEW_EVERY_MS and renewed
 * well before that stops being true. */
#define LEASE_MARGIN_MS 1000
#define RENEW_EVERY_MS 500
#define LEASE_WAIT_US (100 * 1000) /* a round waiting for its renewal looks again */

/* A claimed batch; freed when its last round is written back. */
struct batch {
	struct store_claim *claims;
	size_t n;
	size_t live;                 /* rounds not yet written */
	struct sub_set *subs;        /* the subscriptions as they were at claim time */
};

enum round_state { ROUND_FREE, ROUND_IN_FLIGHT, ROUND_WAITING, ROUND_PARKED, ROUND_DONE };


struct round {
	struct sink_round sj;        /* what the sink sees: first, so a sink_round is a round */
	struct dispatcher *d;
	enum round_state state;
	struct batch *batch;
	struct store_claim *claim;
	const struct subscription *sub;
	struct sink *sink;           /* the sink of sub's endpoint, NULL when none */
	enum attempt_kind kind;
	int max_tries;
	int64_t timeout_ms;
	int tries;                   /* attempts made in this round */
	struct store_attempt attempts[MAX_TRIES];
	char messages[MAX_TRIES][MSG_LEN];
	char cause_buf[CAUSE_LEN];   /* the attempt in flight writes its cause here */
	char *causes[MAX_TRIES];     /* the causes kept for the history (heap, only those
	                                not empty), until the result is written */
	struct writer_result wr;     /* the round's result, queued to the writer when done */
	int64_t started_mono_ns;     /* monotonic start of the current attempt */
	int64_t started_wall_ns;     /* ... and on the wall clock, ns since the epoch (its span) */
	int64_t wake_us;             /* ROUND_WAITING: when to send again */
	struct sub_limits *limits;   /* the subscription's breaker and limits, or NULL */
	struct endpoint *ep;         /* its endpoint's flow control, NULL: none (pinned,
	                                not http(s)) */
	int holds_ep;                /* the attempt counts in ep->in_flight (as ep_req) */
	struct endpoint_req ep_req;
	int ep_queued;               /* parked, counted in ep->queued */
	int probe;                   /* this round is the half-open breaker's probe */
	int holds_slot;              /* the attempt counts in limits->in_flight */
	int64_t retry_after_ms;      /* Retry-After of the last response, -1 when none */
	int64_t parked_us;           /* ROUND_PARKED: since when */
	int64_t lease_until_ms;      /* the delivery's lease as last taken or renewed */
	int lease_lost;              /* a renewal found the lease gone: no more attempts */
	uint64_t seq;                /* which round this slot holds (renewal answers) */
	const char *audit;           /* the round's final outcome for log_deliveries
	                                ("EXECUTED", "FAILED", "DEAD"), NULL when none */
	struct round *next;          /* in the free or parked list */
};

struct dispatcher {
	struct sub_registry *reg;
	struct dispatcher_config cfg;
	pthread_t thread;
	struct sink_set sinks;       /* a copy of cfg's (the members borrowed): where
	                                deliveries go, member i in state slot i */
	int epfd;                    /* the sinks' fds and the wake-up eventfd */
	int evfd;                    /* dispatcher_wake() writes here */
	struct epoll_event events[EPOLL_EVENTS];
	int n_events;                /* ready, not yet handled */
	atomic_int stopping;
	atomic_int woken;
	_Atomic int64_t beat_us;     /* monotonic: the loop's last turn (dispatcher_beat_us) */
	uint64_t turn;               /* the loop's turns so far: requests begun in one turn
	                                went out together (deliver/endpoints.h) */
	atomic_int log_deliveries;   /* cfg.log_deliveries, changed by SIGHUP (any thread) */
	struct round *rounds;        /* max_in_flight of them */
	struct round *free_list;
	struct round **waiting;      /* rounds in their stagger: a min-heap on wake_us, room
	                                for max_in_flight (a turn of the loop looks at the
	                                soonest only, however many wait) */
	size_t n_waiting;
	struct round *done_head, *done_tail;
	size_t done_count;
	int active;                  /* rounds not free */
	int in_flight;               /* rounds with an attempt in a sink */
	uint64_t rng;
	int store_down;              /* as the writer last found it */
	struct writer *writer;       /* borrowed: claims and result writes (store/writer.h) */
	size_t claim_asked;          /* deliveries asked of the writer, not yet answered */
	int64_t claim_at_ms;         /* a written retry is due then: claim, 0 = none */
	struct pacing pace;          /* when the next claim may go (core/pacing.h) */
	struct pacing_config pace_cfg;
	int64_t soonest_retry_ms;    /* earliest next_attempt_at not yet written, 0 = none */
	struct limits_table limits;  /* per subscription: breaker, limits, parked rounds */
	struct endpoint_table endpoints; /* per endpoint: adaptive concurrency */
	uint64_t round_seq;          /* the last round started */
	/* lease renewal: one outstanding writer_renew at a time, over these arrays (room
	 * for max_in_flight) */
	struct writer_renewal renewal;
	char (*renew_ids)[UUID_STR_LEN];
	int64_t *renew_until;
	unsigned char *renew_ok;
	struct round **renew_rounds;
	uint64_t *renew_seq;
	int renew_asked;
	int renew_soon;              /* a round waits for its renewal: renew at the next turn */
	int64_t next_renew_ms;
	struct sub_limits *parked_subs; /* those with parked rounds */
	int n_saturated;             /* queues that overflowed and have not emptied since */
};

/* What an attempt of r needs of its lease: its connect, its timeout and the margin. */
static inline int64_t round_lease_need_ms(const struct round *r)
{
	return r->d->cfg.connect_timeout_ms + r->timeout_ms + LEASE_MARGIN_MS;
}

/* ---- dispatcher.c ----------------------------------------------------------------------- */

/* A dispatcher with its round pool, sinks attached and no thread: what dispatcher_start
 * runs, and what the unit tests drive by hand (round_start, the sinks' completions,
 * rounds_run_timers; finished rounds wait on the done list). cfg is copied, reg borrowed.
 * NULL when out of memory or descriptors. */
struct dispatcher *dispatcher_new(struct sub_registry *reg, const struct dispatcher_config *cfg);

/* Frees a dispatcher whose thread is not running (never started, or joined). */
void dispatcher_delete(struct dispatcher *d);

/* Starts the claimed deliveries (claims consumed): one batch, freed when its last round
 * is written. */
void dispatcher_claims_start(struct dispatcher *d, struct store_claim *claims, size_t n);

/* ---- round.c -------------------------------------------------------------------------- */

/* The dispatcher's random source (xorshift64; ctx is a uint64_t state). */
double dispatcher_rng_next(void *ctx);

/* Starts the round of claim c (of batch b) on a free round slot: checks the subscription,
 * the sink and the breaker, then sends the first attempt or parks it. */
void round_start(struct dispatcher *d, struct batch *b, struct store_claim *c);

/* Frees the causes a round kept for its result. */
void round_causes_free(struct round *r);

/* The writer wrote the round's result: the slot goes back to the free list. */
void round_recycle(struct dispatcher *d, struct round *r);

/* Drops one reference to b; the last one frees its claims. */
void batch_release(struct dispatcher *d, struct batch *b);

/* Starts the parked rounds their limits let go, oldest first; hands back the ones parked
 * for half a lease and, when stopping, all. Returns the wait in µs until a rate-limited
 * queue can move, or -1 when only a completion can move one. */
int64_t rounds_run_parked(struct dispatcher *d, int64_t now_us);

/* Starts the waiting rounds whose stagger is over. */
void rounds_run_timers(struct dispatcher *d, int64_t now_us);

/* µs from now_us until the soonest waiting round is due (0 when due), -1 when none. */
int64_t rounds_wait_us(const struct dispatcher *d, int64_t now_us);

/* sink_env.done and sink_env.abandoned (ctx is the dispatcher). */
void round_attempt_done_cb(void *ctx, struct sink_round *sj);
void round_attempt_abandoned_cb(void *ctx, struct sink_round *sj);

#endif
