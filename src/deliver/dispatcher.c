/* dispatcher.c: claims due deliveries, runs each one's round through the sink its
 * endpoint belongs to (sink.h: HTTP, Kafka), runs the immediate retry round, and writes
 * results in groups (see dispatcher.h).
 *
 * Life of a job (one delivery's round):
 *   claimed -> attempt in a sink -> attempt over (sink_env.done)
 *     -> success, or round over       -> done list -> written by the store side
 *     -> failed with tries left       -> waiting on its stagger timer -> in a sink again
 * Nothing here blocks: the store calls (claims, result writes) run on the dispatcher's own
 * store side thread (struct store_side), which groups the results that finish meanwhile;
 * the sinks do their I/O on this thread through one fd each in the dispatcher's epoll set.
 * Nothing here knows a transport: requests, tokens and redaction are the sinks'.
 *
 * Per subscription (struct sub_state) the dispatcher keeps its circuit breaker
 * (core/breaker.h) and its limits. A claimed delivery whose breaker is open sends nothing:
 * it takes a delay action (re-queued in the retry policy's [min_delay, max_delay] window)
 * or, after max_delay_actions of them, goes to the dead-letter queue as circuit_open. An
 * attempt that max_in_flight or rate_limit holds back waits here (JOB_PARKED, in its
 * subscription's queue, in order) without a store write, so a slow subscriber never
 * holds up the others; a queue longer than its share of the job pool, or older than half
 * a lease, goes back to the store instead. What an attempt makes of the delivery (try
 * again, retry later, delay action, dead-letter queue) is core/outcome.h's decision. */
#include "deliver/dispatcher.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/breaker.h"
#include "core/errmap.h"
#include "core/metrics.h"
#include "core/outcome.h"
#include "core/ratelimit.h"
#include "core/retry.h"
#include "deliver/sink.h"
#include "store/writer.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/hash.h"
#include "util/duration.h"
#include "util/log.h"

#define MAX_TRIES 10          /* most tries in one round (retry.immediate <= 10) */
#define MSG_LEN SINK_MSG_LEN
#define CAUSE_LEN SINK_CAUSE_LEN
#define IDLE_POLL_MS 1000     /* look for due work at least this often */
#define PRUNE_US (60 * 1000000LL) /* caches are pruned this often */
#define SS_BUCKETS 256        /* hash buckets of per-subscription state */
#define SS_IDLE_MS (3600 * 1000LL) /* per-subscription state unused this long is dropped */
#define PARKED_MIN_CAP 32     /* jobs a subscription may park at least (pool allowing) */
#define RELEASE_MIN_MS 500    /* a job handed back for a limit is due again after 0.5-1.5 s */
#define EPOLL_EVENTS 256      /* ready sockets taken per epoll_wait */

/* A claimed batch; freed when its last job is written back. */
struct batch {
	struct store_claim *claims;
	size_t n;
	size_t live;                 /* jobs not yet written */
	struct sub_set *subs;        /* the subscriptions as they were at claim time */
};

enum job_state { JOB_FREE, JOB_IN_FLIGHT, JOB_WAITING, JOB_PARKED, JOB_DONE };

struct sub_state;

struct job {
	struct sink_job sj;          /* what the sink sees: first, so a sink_job is a job */
	struct dispatcher *d;
	enum job_state state;
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
	char causes[MAX_TRIES][CAUSE_LEN];
	struct writer_result wr;     /* the round's result, queued to the writer when done */
	int64_t started_us;          /* monotonic start of the current attempt */
	int64_t wake_us;             /* JOB_WAITING: when to send again */
	struct sub_state *ss;        /* the subscription's breaker and limits, or NULL */
	int probe;                   /* this round is the half-open breaker's probe */
	int holds_slot;              /* the attempt counts in ss->in_flight */
	int64_t retry_after_ms;      /* Retry-After of the last response, -1 when none */
	int64_t parked_us;           /* JOB_PARKED: since when */
	struct job *next;            /* in the free, waiting, parked or done list */
};

/* What this dispatcher keeps per subscription: the circuit breaker (written on the
 * dispatcher thread under circuit_mu, read by snapshots from API threads) and the limits
 * with the jobs they hold back (dispatcher thread only). */
struct sub_state {
	char sub_id[UUID_STR_LEN];
	struct breaker breaker;
	struct circuit_breaker_config breaker_cfg; /* as last seen, for snapshots */
	struct token_bucket bucket;
	double bucket_rate;          /* the rate the bucket is set up for, 0 = none yet */
	int in_flight;               /* attempts running (a request, or waiting for a token) */
	int refs;                    /* jobs pointing here */
	struct job *parked_head, *parked_tail;
	int parked;
	int on_parked_list;
	int64_t last_used_ms;        /* monotonic */
	struct sub_state *next;      /* hash chain */
	struct sub_state *next_parked; /* in dispatcher.parked_subs */
};

struct dispatcher {
	struct sub_registry *reg;
	struct dispatcher_config cfg;
	pthread_t thread;
	struct sink *sinks[SINKS_MAX]; /* borrowed from cfg: where deliveries go */
	int n_sinks;
	int epfd;                    /* the sinks' fds and the wake-up eventfd */
	int evfd;                    /* dispatcher_wake() writes here */
	struct epoll_event events[EPOLL_EVENTS];
	int n_events;                /* ready, not yet handled */
	atomic_int stopping;
	atomic_int woken;
	struct job *jobs;            /* max_in_flight of them */
	struct job *free_list;
	struct job *waiting;         /* unsorted; few at a time */
	struct job *done_head, *done_tail;
	size_t done_count;
	int active;                  /* jobs not free */
	int in_flight;               /* jobs with an attempt in a sink */
	uint64_t rng;
	int store_down;              /* as the writer last found it */
	struct writer *writer;       /* borrowed: claims and result writes (store/writer.h) */
	size_t claim_asked;          /* deliveries asked of the writer, not yet answered */
	int64_t claim_at_ms;         /* a written retry is due then: claim, 0 = none */
	int64_t soonest_retry_ms;    /* earliest next_attempt_at not yet written, 0 = none */
	struct sub_state *ss[SS_BUCKETS];
	struct sub_state *parked_subs; /* those with parked jobs */
};

/* The snapshot of breaker states for GET /v1/stats: one dispatcher per process. */
static pthread_mutex_t circuit_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dispatcher *circuit_owner;

/* ---- small helpers ------------------------------------------------------------------ */

static double rng_next(void *ctx)
{
	uint64_t *s = ctx;
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (double)(*s >> 11) / 9007199254740992.0;
}

/* ---- per-subscription state: breaker and limits ----------------------------------------- */

static unsigned ss_hash(const char *id)
{
	return hash_fnv1a(id) % SS_BUCKETS;
}

static struct sub_state *ss_find(struct dispatcher *d, const char *id)
{
	for (struct sub_state *x = d->ss[ss_hash(id)]; x; x = x->next)
		if (strcmp(x->sub_id, id) == 0)
			return x;
	return NULL;
}

/* The state of s, made on first use; NULL when out of memory (the subscription then goes
 * without breaker and limits rather than without deliveries). */
static struct sub_state *ss_get(struct dispatcher *d, const struct subscription *s)
{
	struct sub_state *x = ss_find(d, s->id);
	if (!x) {
		unsigned h = ss_hash(s->id);
		if (!(x = calloc(1, sizeof(*x)))) {
			log_error("dispatcher: out of memory: subscription %s runs without its "
				  "circuit breaker and limits", s->id);
			return NULL;
		}
		memcpy(x->sub_id, s->id, UUID_STR_LEN);
		breaker_init(&x->breaker);
		x->breaker_cfg = s->breaker;
		pthread_mutex_lock(&circuit_mu);
		x->next = d->ss[h];
		d->ss[h] = x;
		pthread_mutex_unlock(&circuit_mu);
	}
	x->last_used_ms = clock_mono_ms();
	return x;
}

/* Drops the state of subscriptions nobody used for a while (deleted ones, mostly); an
 * open breaker is kept for at least its failure window. */
static void ss_prune(struct dispatcher *d, int64_t now_ms)
{
	pthread_mutex_lock(&circuit_mu);
	for (int i = 0; i < SS_BUCKETS; i++) {
		struct sub_state **pp = &d->ss[i];
		while (*pp) {
			struct sub_state *x = *pp;
			int64_t idle = x->breaker_cfg.failure_window_ms > SS_IDLE_MS
					       ? x->breaker_cfg.failure_window_ms : SS_IDLE_MS;
			if (!x->refs && !x->parked && now_ms - x->last_used_ms > idle) {
				*pp = x->next;
				free(x);
			} else {
				pp = &x->next;
			}
		}
	}
	pthread_mutex_unlock(&circuit_mu);
}

static void ss_free_all(struct dispatcher *d)
{
	pthread_mutex_lock(&circuit_mu);
	if (circuit_owner == d)
		circuit_owner = NULL;
	for (int i = 0; i < SS_BUCKETS; i++) {
		while (d->ss[i]) {
			struct sub_state *x = d->ss[i];
			d->ss[i] = x->next;
			free(x);
		}
	}
	pthread_mutex_unlock(&circuit_mu);
}

const char *dispatcher_circuit_state(const char *subscription_id)
{
	enum breaker_state state = BREAKER_CLOSED;

	pthread_mutex_lock(&circuit_mu);
	if (circuit_owner) {
		struct sub_state *x = ss_find(circuit_owner, subscription_id);
		if (x)
			state = breaker_state_at(&x->breaker, &x->breaker_cfg, clock_now_ms());
	}
	pthread_mutex_unlock(&circuit_mu);
	return breaker_state_name(state);
}

static void circuit_publish(const struct sub_state *x)
{
	metrics_circuit(x->sub_id, (int)x->breaker.state, x->breaker.open_until_ms);
}

/* May the job's round start? A BREAKER_PROBE answer makes it the half-open probe. */
static enum breaker_admission circuit_admit(struct job *j)
{
	struct sub_state *x = j->ss;
	enum breaker_admission a;

	pthread_mutex_lock(&circuit_mu);
	x->breaker_cfg = j->sub->breaker;
	a = breaker_admit(&x->breaker, &x->breaker_cfg, clock_now_ms());
	pthread_mutex_unlock(&circuit_mu);
	if (a == BREAKER_PROBE) {
		j->probe = 1;
		log_info("subscription %s: circuit half-open: delivery %s is the probe", x->sub_id,
			 j->claim->delivery_id);
	}
	circuit_publish(x);
	return a;
}

/* A round with attempts ended: the breaker counts it. */
static void circuit_record(struct job *j, int success)
{
	struct sub_state *x = j->ss;
	const struct circuit_breaker_config *c = &j->sub->breaker;
	enum breaker_state before, after;
	int64_t until;
	char window[32], left[32];

	if (!x)
		return;
	pthread_mutex_lock(&circuit_mu);
	before = x->breaker.state;
	breaker_record(&x->breaker, c, clock_now_ms(), success, j->probe);
	after = x->breaker.state;
	until = x->breaker.open_until_ms;
	pthread_mutex_unlock(&circuit_mu);
	if (after == BREAKER_OPEN && (before != BREAKER_OPEN || j->probe))
		log_warn("subscription %s: circuit open%s: deliveries take delay actions for %s "
			 "(more than %d failed deliveries within %s)", x->sub_id,
			 j->probe ? " again: the probe failed" : "",
			 duration_format(until - clock_now_ms(), left, sizeof(left)), c->max_errors,
			 duration_format(c->failure_window_ms, window, sizeof(window)));
	else if (after == BREAKER_CLOSED && before != BREAKER_CLOSED)
		log_info("subscription %s: circuit closed: the probe succeeded", x->sub_id);
	j->probe = 0;
	circuit_publish(x);
}

/* The probe ended undecided (handed back): the next delivery asking is the probe. */
static void circuit_probe_abandoned(struct job *j)
{
	if (!j->probe || !j->ss)
		return;
	pthread_mutex_lock(&circuit_mu);
	breaker_probe_abandoned(&j->ss->breaker);
	pthread_mutex_unlock(&circuit_mu);
	j->probe = 0;
}

static void bucket_sync(struct sub_state *x, const struct subscription *s, int64_t now_us)
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

/* Takes what the job's next attempt needs from its subscription's limits: a place under
 * max_in_flight, then a rate_limit token. Returns 1 when it may go now, 0 otherwise
 * (nothing taken). */
static int limits_take(struct job *j, int64_t now_us)
{
	struct sub_state *x = j->ss;
	const struct subscription *s = j->sub;

	if (!x)
		return 1;
	if (s->max_in_flight > 0 && x->in_flight >= s->max_in_flight)
		return 0;
	if (s->rate_limit > 0) {
		bucket_sync(x, s, now_us);
		if (token_bucket_take(&x->bucket, now_us) > 0)
			return 0;
	}
	x->in_flight++;
	j->holds_slot = 1;
	return 1;
}

/* When a job of s held back by x's limits could go: a wait in µs for a token, or -1 when
 * it waits for a running attempt to end (a completion wakes the loop). */
static int64_t limits_wait(struct sub_state *x, const struct subscription *s, int64_t now_us)
{
	if (s->max_in_flight > 0 && x->in_flight >= s->max_in_flight)
		return -1;
	if (s->rate_limit > 0) {
		struct token_bucket peek;
		bucket_sync(x, s, now_us);
		peek = x->bucket;
		return token_bucket_take(&peek, now_us);
	}
	return 0;
}

/* The attempt is over: its place under max_in_flight goes back. */
static void job_slot_put(struct job *j)
{
	if (j->holds_slot) {
		j->ss->in_flight--;
		j->holds_slot = 0;
	}
}

/* How many jobs a subscription may keep parked: enough to keep its limits busy, never
 * more than a quarter of the job pool, so the other subscriptions always find room. */
static int parked_cap(const struct dispatcher *d, const struct subscription *s)
{
	int cap = PARKED_MIN_CAP, share = d->cfg.max_in_flight / 4;

	if (s->max_in_flight > 0 && s->max_in_flight < INT32_MAX / 4 && s->max_in_flight * 4 > cap)
		cap = s->max_in_flight * 4;
	if (s->rate_limit * 2 > cap)
		cap = s->rate_limit * 2 < INT32_MAX ? (int)(s->rate_limit * 2) : INT32_MAX;
	if (share < 1)
		share = 1;
	return cap < share ? cap : share;
}

/* ---- the life of a job ----------------------------------------------------------------- */

static void done_push(struct dispatcher *d, struct job *j)
{
	j->state = JOB_DONE;
	j->wr.next = NULL;
	if (d->done_tail)
		d->done_tail->wr.next = &j->wr;
	else
		d->done_head = j;
	d->done_tail = j;
	d->done_count++;
}

/* A retry or delay action is due at at_ms: the loop claims then, not at the idle poll. */
static void note_due(struct dispatcher *d, int64_t at_ms)
{
	if (at_ms && (!d->soonest_retry_ms || at_ms < d->soonest_retry_ms))
		d->soonest_retry_ms = at_ms;
}

static void set_last_error(struct store_result *r, const struct job *j)
{
	if (j->tries == 0) {
		r->last_code = 0;
		r->last_message = r->last_cause = NULL;
		return;
	}
	const struct store_attempt *a = &j->attempts[j->tries - 1];
	r->last_code = a->code;
	r->last_message = a->message;
	r->last_cause = a->cause;
}

/* The delivery just went to the dead-letter queue: tell the hook (Kafka DLT topics). */
static void dead_lettered(struct job *j)
{
	const struct dispatcher_config *cfg = &j->d->cfg;
	if (cfg->dead_letter && j->sub && j->sub->endpoint)
		cfg->dead_letter(cfg->dead_letter_ctx, j->claim, j->sub, &j->wr.result);
}

/* Fills the result of a round the outcome core decided (core/outcome.h). */
static void job_result(struct job *j, const struct outcome *o)
{
	struct store_result *r = &j->wr.result;

	memset(r, 0, sizeof(*r));
	r->delivery_id = j->claim->delivery_id;
	r->attempts = j->attempts;
	r->n_attempts = (size_t)j->tries;
	r->attempt_count = j->claim->attempt_count + j->tries;
	r->retry_count = o->retry_count;
	r->delay_actions = o->delay_actions;
	if (o->next == OUTCOME_DONE) {
		r->status = DELIVERY_PROCESSED;
		r->processed_at = clock_now_ms();
		return;
	}
	r->status = DELIVERY_FAILED;
	set_last_error(r, j);
	if (o->next == OUTCOME_RETRY)
		r->next_attempt_at = o->at_ms;
}

/* What outcome_decide needs to know of the job's round so far. */
static void outcome_input(const struct job *j, struct outcome_in *in)
{
	memset(in, 0, sizeof(*in));
	in->kind = j->kind;
	in->tries = j->tries;
	in->max_tries = j->max_tries;
	in->code = j->tries ? j->attempts[j->tries - 1].code : 0;
	in->retry_after_ms = j->retry_after_ms;
	in->retry_count = j->claim->retry_count;
	in->delay_actions = j->claim->delay_actions;
	in->now_ms = clock_now_ms();
}

/* The round is over with outcome o (not OUTCOME_TRY): the result goes to the writer. */
static void job_finish(struct job *j, const struct outcome *o)
{
	const char *sub_id = j->claim->subscription_id;

	job_slot_put(j);
	job_result(j, o);
	if (o->next == OUTCOME_DONE) {
		metrics_delivery(sub_id, OUTCOME_PROCESSED);
	} else if (o->next == OUTCOME_RETRY) {
		metrics_delivery(sub_id, OUTCOME_RETRYING);
		note_due(j->d, o->at_ms);
	} else {
		metrics_delivery(sub_id, OUTCOME_DEAD);
		dead_lettered(j);
	}
	if (j->tries > 0)
		circuit_record(j, o->next == OUTCOME_DONE);
	done_push(j->d, j);
}

/* Ends the round after its last attempt, whatever the rules would say of another try
 * (the sink ended it, or a failure before any sink). */
static void job_end_round(struct job *j)
{
	struct outcome_in in;
	struct outcome o;

	outcome_input(j, &in);
	in.end_round = true;
	outcome_decide(&j->sub->retry, &j->sub->breaker, &in, rng_next, &j->d->rng, &o);
	job_finish(j, &o);
}

/* The subscription's breaker is open: nothing is sent. The outcome core re-queues the
 * delivery at a random time in the retry policy's [min_delay, max_delay] window (a delay
 * action, seed 004), or, once it has taken max_delay_actions of them, dead-letters it
 * with last_error {503, "circuit_open"}. Attempts and retries are not counted: no
 * request was made. */
static void job_delay_action(struct job *j)
{
	struct dispatcher *d = j->d;
	const struct subscription *s = j->sub;
	const struct store_claim *c = j->claim;
	struct store_result *r = &j->wr.result;
	struct outcome_in in;
	struct outcome o;
	char window[32], wait_text[32];

	outcome_input(j, &in);
	in.refused = true;
	outcome_decide(&s->retry, &s->breaker, &in, rng_next, &d->rng, &o);
	memset(r, 0, sizeof(*r));
	r->delivery_id = c->delivery_id;
	r->attempt_count = c->attempt_count;
	r->retry_count = c->retry_count;
	r->delay_actions = o.delay_actions;
	r->last_code = OUTCOME_CIRCUIT_OPEN_CODE;
	r->last_message = OUTCOME_CIRCUIT_OPEN_MESSAGE;
	r->last_cause = j->causes[0];
	duration_format(s->breaker.failure_window_ms, window, sizeof(window));
	if (o.next == OUTCOME_DLQ) {
		r->status = DELIVERY_FAILED; /* no next attempt: the dead-letter queue */
		snprintf(j->causes[0], CAUSE_LEN,
			 "the circuit breaker of subscription %s is open (more than %d failed "
			 "deliveries within %s); after %d delay actions the delivery was stopped "
			 "without a request", s->id, s->breaker.max_errors, window, c->delay_actions);
		metrics_delivery(c->subscription_id, OUTCOME_DEAD);
		dead_lettered(j);
	} else {
		r->status = c->status;
		r->replay = c->replay;
		r->next_attempt_at = o.at_ms;
		snprintf(j->causes[0], CAUSE_LEN,
			 "delay action %d of %d: the circuit breaker of subscription %s is open "
			 "(more than %d failed deliveries within %s); no request sent, due again "
			 "in %s", r->delay_actions, s->breaker.max_delay_actions, s->id,
			 s->breaker.max_errors, window,
			 duration_format(o.delay_ms, wait_text, sizeof(wait_text)));
		metrics_delivery(c->subscription_id, OUTCOME_DELAYED);
		note_due(d, r->next_attempt_at);
	}
	done_push(d, j);
}

/* Hands the delivery back untouched but for the attempts made (shutdown, disabled
 * subscription): due again at now + delay_ms. */
static void job_release(struct job *j, int64_t delay_ms)
{
	struct store_result *r = &j->wr.result;
	job_slot_put(j);
	circuit_probe_abandoned(j);
	memset(r, 0, sizeof(*r));
	r->delivery_id = j->claim->delivery_id;
	r->status = j->claim->status;
	r->replay = j->claim->replay;
	r->attempt_count = j->claim->attempt_count + j->tries;
	r->retry_count = j->claim->retry_count;
	r->delay_actions = j->claim->delay_actions;
	r->next_attempt_at = clock_now_ms() + delay_ms;
	r->attempts = j->attempts;
	r->n_attempts = (size_t)j->tries;
	set_last_error(r, j);
	if (j->tries == 0)
		r->last_code = -1; /* keep the error the delivery already shows */
	metrics_delivery(j->claim->subscription_id, OUTCOME_RELEASED);
	note_due(j->d, r->next_attempt_at);
	done_push(j->d, j);
}

/* Records a first attempt that failed here, before any sink (code, message, cause
 * borrowed), and ends the round; the retry policy decides what follows. */
static void job_fail_attempt(struct job *j, int code, const char *message, const char *cause)
{
	struct store_attempt *a = &j->attempts[0];
	memset(a, 0, sizeof(*a));
	a->n = j->claim->attempt_count + 1;
	a->kind = j->kind;
	a->started_at = clock_now_ms();
	a->code = code;
	snprintf(j->messages[0], MSG_LEN, "%s", message);
	snprintf(j->causes[0], CAUSE_LEN, "%s", cause);
	a->message = j->messages[0];
	a->cause = j->causes[0];
	j->tries = 1;
	j->retry_after_ms = -1;
	job_end_round(j);
}

/* The attempt just recorded (j->tries - 1) is over: the outcome core says whether the
 * round goes on after a stagger or ends. */
static void job_after_attempt(struct job *j)
{
	struct dispatcher *d = j->d;
	struct outcome_in in;
	struct outcome o;

	job_slot_put(j);
	outcome_input(j, &in);
	outcome_decide(&j->sub->retry, &j->sub->breaker, &in, rng_next, &d->rng, &o);
	if (o.next != OUTCOME_TRY) {
		job_finish(j, &o);
	} else if (atomic_load(&d->stopping)) {
		job_release(j, 0); /* shutting down: hand the rest of the round back */
	} else {
		j->state = JOB_WAITING;
		j->wake_us = clock_mono_us() + o.delay_ms * 1000;
		j->next = d->waiting;
		d->waiting = j;
	}
}

/* ---- attempts ------------------------------------------------------------------------------ */

/* Starts the next attempt of the round now (its limits are taken): the sink has it
 * until it calls attempt_done_cb or attempt_abandoned_cb. */
static void job_go(struct job *j)
{
	struct sink_job *sj = &j->sj;
	j->attempts[j->tries].started_at = clock_now_ms();
	j->started_us = clock_mono_us();
	j->retry_after_ms = -1;
	sj->attempt_no = j->claim->attempt_count + j->tries + 1;
	sj->timeout_ms = j->timeout_ms;
	sj->message = j->messages[j->tries];
	sj->cause = j->causes[j->tries];
	sj->cause[0] = '\0';
	sj->message[0] = '\0';
	sj->code = 0;
	sj->end_round = 0;
	sj->retry_after_ms = -1;
	j->state = JOB_IN_FLIGHT;
	j->d->in_flight++;
	sink_send(j->sink, sj);
}

/* sink_env.done: the attempt is over; record it, then retry or end the round. */
static void attempt_done_cb(void *ctx, struct sink_job *sj)
{
	struct dispatcher *d = ctx;
	struct job *j = (struct job *)sj;
	struct store_attempt *a = &j->attempts[j->tries];
	int64_t took_us = clock_mono_us() - j->started_us;

	d->in_flight--;
	a->n = sj->attempt_no;
	a->kind = j->kind;
	a->duration_ms = took_us / 1000;
	a->code = sj->code;
	a->message = j->messages[j->tries];
	a->cause = j->causes[j->tries][0] ? j->causes[j->tries] : NULL;
	j->retry_after_ms = sj->retry_after_ms;
	metrics_attempt(a->code, took_us);
	j->tries++;
	if (sj->end_round) {
		job_slot_put(j);
		job_end_round(j);
		return;
	}
	job_after_attempt(j);
}

/* sink_env.abandoned: the sink stopped the attempt undecided (shutdown). */
static void attempt_abandoned_cb(void *ctx, struct sink_job *sj)
{
	struct dispatcher *d = ctx;
	d->in_flight--;
	job_release((struct job *)sj, 0);
}

/* Holds the job back in its subscription's queue until its limits let it go, or hands
 * it back to the store when the queue has its share of the job pool already. */
static void job_park(struct job *j)
{
	struct dispatcher *d = j->d;
	struct sub_state *x = j->ss;

	if (x->parked >= parked_cap(d, j->sub)) {
		job_release(j, RELEASE_MIN_MS + (int64_t)(rng_next(&d->rng) * 1000));
		return;
	}
	j->state = JOB_PARKED;
	j->parked_us = clock_mono_us();
	j->next = NULL;
	if (x->parked_tail)
		x->parked_tail->next = j;
	else
		x->parked_head = j;
	x->parked_tail = j;
	x->parked++;
	if (!x->on_parked_list) {
		x->on_parked_list = 1;
		x->next_parked = d->parked_subs;
		d->parked_subs = x;
	}
}

/* Starts the next attempt of the round, or parks it behind its subscription's limits
 * (and behind the jobs parked there already: a queue keeps its order). */
static void job_begin(struct job *j)
{
	if (j->ss && (j->ss->parked_head || !limits_take(j, clock_mono_us()))) {
		job_park(j);
		return;
	}
	job_go(j);
}

/* Starts the parked jobs their limits let go, oldest first; hands back the ones parked
 * for half a lease (the lease must not run out under them) and, when stopping, all.
 * Returns the wait in µs until a rate-limited queue can move, or -1 when only a
 * completion can move one. */
static int64_t run_parked(struct dispatcher *d, int64_t now_us)
{
	int stopping = atomic_load(&d->stopping);
	int64_t too_old_us = d->cfg.lease_ms * 1000 / 2, wait = -1;
	struct sub_state **pp = &d->parked_subs;

	while (*pp) {
		struct sub_state *x = *pp;
		while (x->parked_head) {
			struct job *j = x->parked_head;
			int old = stopping || now_us - j->parked_us >= too_old_us;
			if (!old && !limits_take(j, now_us)) {
				int64_t w = limits_wait(x, j->sub, now_us);
				if (w > 0 && (wait < 0 || w < wait))
					wait = w;
				break;
			}
			x->parked_head = j->next;
			if (!x->parked_head)
				x->parked_tail = NULL;
			x->parked--;
			j->next = NULL;
			if (old)
				job_release(j, stopping ? 0 : RELEASE_MIN_MS);
			else
				job_go(j);
		}
		if (!x->parked_head) {
			x->on_parked_list = 0;
			*pp = x->next_parked;
		} else {
			pp = &x->next_parked;
		}
	}
	return wait;
}

static void job_start(struct dispatcher *d, struct batch *b, struct store_claim *c)
{
	struct job *j = d->free_list;
	d->free_list = j->next;
	d->active++;
	j->batch = b;
	j->claim = c;
	j->sj.claim = c;
	j->tries = 0;
	j->sink = NULL;
	j->ss = NULL;
	j->probe = 0;
	j->holds_slot = 0;
	j->retry_after_ms = -1;
	j->sub = sub_set_find(b->subs, c->subscription_id);
	j->sj.sub = j->sub;
	if (c->replay)
		j->kind = ATTEMPT_MANUAL;
	else if (c->status == DELIVERY_FAILED)
		j->kind = ATTEMPT_SCHEDULED;
	else
		j->kind = ATTEMPT_IMMEDIATE;

	if (atomic_load(&d->stopping)) {
		/* Claimed as the shutdown began (the writer answered late): handed back
		 * untouched, due now, for whoever runs next. */
		job_release(j, 0);
		return;
	}
	if (!j->sub) {
		/* The subscription was deleted: nothing to send to; keep the delivery visible
		 * in the dead-letter queue instead of dropping it. */
		static const struct subscription gone = {.retry = {.immediate = 1}};
		char cause[320];
		j->sub = &gone;
		j->kind = ATTEMPT_MANUAL; /* no scheduled retry for it */
		if (c->source && strncmp(c->source, "kafka:", 6) == 0 &&
		    strcmp(c->event_type, "kafka.undecodable") == 0) {
			/* a replayed undecodable Kafka message: still nowhere to send it */
			snprintf(cause, sizeof(cause), "the message from %s could not be decoded; its "
				 "raw bytes are the event's payload", c->source);
			job_fail_attempt(j, 422, "undecodable", cause);
			return;
		}
		snprintf(cause, sizeof(cause), "subscription %s no longer exists",
			 c->subscription_id);
		job_fail_attempt(j, 410, "subscription deleted", cause);
		return;
	}
	if (!j->sub->enabled) {
		job_release(j, d->cfg.disabled_delay_ms);
		return;
	}
	for (int i = 0; i < d->n_sinks && !j->sink; i++)
		if (sink_accepts(d->sinks[i], j->sub->endpoint))
			j->sink = d->sinks[i];
	if (!j->sink) {
		/* kafka:// without kafka_brokers: a failed attempt like any other, so the
		 * delivery waits in the retries (and the DLQ) until the operator adds it. */
		job_fail_attempt(j, 503, "no delivery target",
				 "no sink of this outboxd delivers to this endpoint's scheme "
				 "(kafka:// endpoints need kafka_brokers)");
		return;
	}
	if ((j->ss = ss_get(d, j->sub)))
		j->ss->refs++;
	if (j->ss && circuit_admit(j) == BREAKER_DELAY) {
		job_delay_action(j);
		return;
	}
	if (j->kind == ATTEMPT_SCHEDULED) {
		j->max_tries = 1;
		j->timeout_ms = j->sub->retry.timeout_ms;
	} else {
		j->max_tries = j->sub->retry.immediate < MAX_TRIES ? j->sub->retry.immediate : MAX_TRIES;
		j->timeout_ms = j->kind == ATTEMPT_MANUAL ? j->sub->retry.timeout_ms
							  : j->sub->retry.immediate_timeout_ms;
	}
	if (j->probe)
		j->max_tries = 1; /* a half-open probe is one request */
	job_begin(j);
}

static void batch_release(struct dispatcher *d, struct batch *b)
{
	if (--b->live)
		return;
	store_claims_free(b->claims, b->n);
	sub_registry_release(d->reg, b->subs);
	free(b);
}

static void job_recycle(struct dispatcher *d, struct job *j)
{
	if (j->sink)
		sink_round_end(j->sink, &j->sj);
	j->sink = NULL;
	if (j->ss)
		j->ss->refs--;
	j->ss = NULL;
	j->probe = 0;
	batch_release(d, j->batch);
	j->batch = NULL;
	j->claim = NULL;
	j->state = JOB_FREE;
	j->next = d->free_list;
	d->free_list = j;
	d->active--;
}

/* ---- the loop ------------------------------------------------------------------------------ */

/* Starts the claimed deliveries: one batch, freed when its last job is written. */
static void claims_start(struct dispatcher *d, struct store_claim *claims, size_t n)
{
	if (n == 0) {
		store_claims_free(claims, 0);
		return;
	}
	struct batch *b = calloc(1, sizeof(*b));
	if (!b) {
		/* Leases expire and the work returns to the pool. */
		log_error("dispatcher: out of memory; %zu claimed deliveries will be retried", n);
		store_claims_free(claims, n);
		return;
	}
	b->claims = claims;
	b->n = n;
	b->live = n + 1; /* +1 held while starting, so an early finish cannot free it */
	b->subs = sub_registry_acquire(d->reg);
	for (size_t i = 0; i < n; i++)
		job_start(d, b, &claims[i]);
	batch_release(d, b);
}

/* The job a writer_result belongs to. */
static struct job *job_of(struct writer_result *r)
{
	return (struct job *)((char *)r - offsetof(struct job, wr));
}

/* Recycles the jobs of a writer_result list; returns how many. */
static size_t recycle_list(struct dispatcher *d, struct writer_result *l)
{
	size_t n = 0;
	while (l) {
		struct job *j = job_of(l);
		l = l->next;
		job_recycle(d, j);
		n++;
	}
	return n;
}

/* The writer has news (results written, a claim answered): wake the loop. */
static void writer_ready_cb(void *ctx);

static void run_timers(struct dispatcher *d, int64_t now_us)
{
	struct job **pp = &d->waiting;
	while (*pp) {
		struct job *j = *pp;
		if (j->wake_us <= now_us || atomic_load(&d->stopping)) {
			*pp = j->next;
			if (atomic_load(&d->stopping))
				job_release(j, 0);
			else
				job_begin(j);
		} else {
			pp = &j->next;
		}
	}
}

/* Runs the sinks whose fd epoll found ready or whose timer is due; the wake-up
 * eventfd is drained on the way. An event's data is 0 for the eventfd, else the
 * sink's index + 1. */
static void sinks_run(struct dispatcher *d)
{
	int ready[SINKS_MAX] = {0};
	for (int i = 0; i < d->n_events; i++) {
		uint32_t tag = d->events[i].data.u32;
		if (tag == 0) {
			uint64_t v;
			while (read(d->evfd, &v, sizeof(v)) == (ssize_t)sizeof(v))
				;
		} else if (tag <= (uint32_t)d->n_sinks) {
			ready[tag - 1] = 1;
		}
	}
	d->n_events = 0;
	int64_t now_us = clock_mono_us();
	for (int i = 0; i < d->n_sinks; i++)
		if (ready[i] || sink_wait_us(d->sinks[i], now_us) == 0)
			sink_run(d->sinks[i]);
}

static void *dispatcher_main(void *arg)
{
	struct dispatcher *d = arg;
	int64_t next_claim_us = 0, stop_deadline_us = 0, next_prune_us = 0;

	pthread_setname_np(pthread_self(), "dispatch");

	for (;;) {
		int64_t now_us = clock_mono_us();
		int stopping = atomic_load(&d->stopping);

		if (stopping && !stop_deadline_us)
			stop_deadline_us = now_us + d->cfg.shutdown_grace_ms * 1000;
		if (stopping && now_us >= stop_deadline_us && d->in_flight)
			for (int i = 0; i < d->n_sinks; i++)
				sink_abort(d->sinks[i]);
		if (now_us >= next_prune_us) {
			for (int i = 0; i < d->n_sinks; i++)
				sink_prune(d->sinks[i], now_us / 1000);
			ss_prune(d, now_us / 1000);
			next_prune_us = now_us + PRUNE_US;
		}

		/* Take back what the writer finished: written jobs, and the answer to a
		 * claim, whose deliveries start now. */
		struct writer_answer ans;
		writer_take(d->writer, &ans);
		d->store_down = ans.down;
		size_t written = recycle_list(d, ans.written);
		int answered = ans.claimed, claim_rc = ans.claim_rc;
		struct store_claim *claims = ans.claims;
		size_t got = ans.n_claims;
		int64_t due_hint_ms = ans.next_due_ms;
		/* Retries due before the next claim (short intervals) are in the store once
		 * written: claim at their time, not at the idle poll. */
		if (written && d->soonest_retry_ms) {
			if (!d->claim_at_ms || d->soonest_retry_ms < d->claim_at_ms)
				d->claim_at_ms = d->soonest_retry_ms;
			d->soonest_retry_ms = 0;
		}
		if (answered) {
			size_t asked = d->claim_asked;
			d->claim_asked = 0;
			if (claim_rc != STORE_OK) {
				next_claim_us = now_us + 500 * 1000; /* store down: probe again soon */
			} else if (got == asked) {
				next_claim_us = now_us; /* more may be due */
			} else {
				next_claim_us = now_us + IDLE_POLL_MS * 1000; /* or the hint's time */
			}
			claims_start(d, claims, got);
		}
		if (due_hint_ms > 0) {
			int64_t wait_ms = due_hint_ms - clock_now_ms();
			if (wait_ms < 0)
				wait_ms = 0;
			if (now_us + wait_ms * 1000 < next_claim_us)
				next_claim_us = now_us + wait_ms * 1000;
		}

		/* Claim when woken or when due work may be waiting, and when there is room
		 * for a worthwhile batch (keeps batches large under load). Asked right after
		 * an answer, so the writer claims the next batch while this one is sent; a
		 * claim asked counts as taken room until answered. */
		int room = d->cfg.max_in_flight - d->active - (int)d->claim_asked;
		int want = room < d->cfg.batch ? room : d->cfg.batch;
		int worth = d->active == 0 || want == d->cfg.batch || room >= d->cfg.max_in_flight / 4;
		if (atomic_exchange(&d->woken, 0) && !d->store_down)
			next_claim_us = now_us;
		int retry_due = d->claim_at_ms && clock_now_ms() >= d->claim_at_ms;
		if (!stopping && !d->claim_asked && want > 0 && worth &&
		    (now_us >= next_claim_us || retry_due)) {
			writer_claim(d->writer, (size_t)want, d->cfg.lease_ms);
			d->claim_asked = (size_t)want;
			if (retry_due)
				d->claim_at_ms = 0;
		}

		run_timers(d, now_us);
		metrics_in_flight(d->active);

		sinks_run(d);
		/* after the completions, which free places under max_in_flight */
		int64_t parked_wait_us = run_parked(d, clock_mono_us());

		/* What finished in this round goes to the writer at once: it writes while
		 * the sinks work, and groups whatever queued up meanwhile. */
		now_us = clock_mono_us();
		if (d->done_count) {
			writer_results(d->writer, &d->done_head->wr, &d->done_tail->wr, d->done_count);
			d->done_head = d->done_tail = NULL;
			d->done_count = 0;
		}

		if (stopping && d->active == 0 && !d->claim_asked)
			break;
		if (stopping && d->store_down && d->in_flight == 0 &&
		    !d->waiting && now_us >= stop_deadline_us) {
			log_error("dispatcher: store unavailable at shutdown; %zu results not written "
				  "(their deliveries will be sent again after the lease expires)",
				  writer_unwritten(d->writer));
			break;
		}

		/* Sleep until a sink's fd is ready, a timer or claim is due, or a wake-up (the
		 * writer answering is one). */
		int64_t claim_us = next_claim_us;
		if (d->claim_at_ms) {
			int64_t at_us = now_us + (d->claim_at_ms - clock_now_ms()) * 1000;
			if (at_us < claim_us)
				claim_us = at_us;
		}
		int64_t wait_us = claim_us > now_us ? claim_us - now_us : 0;
		if (d->active >= d->cfg.max_in_flight || stopping || !worth || d->claim_asked)
			wait_us = 100 * 1000;
		for (struct job *j = d->waiting; j; j = j->next)
			if (j->wake_us - now_us < wait_us)
				wait_us = j->wake_us > now_us ? j->wake_us - now_us : 0;
		if (parked_wait_us >= 0 && parked_wait_us < wait_us)
			wait_us = parked_wait_us;
		for (int i = 0; i < d->n_sinks; i++) {
			int64_t w = sink_wait_us(d->sinks[i], now_us);
			if (w >= 0 && w < wait_us)
				wait_us = w;
		}
		/* epoll_wait even when something is due now: the sockets ready meanwhile */
		int n = epoll_wait(d->epfd, d->events, EPOLL_EVENTS,
				   wait_us > 0 ? (int)((wait_us + 999) / 1000) : 0);
		d->n_events = n > 0 ? n : 0;
	}

	/* Whatever is still done but unwritten could not be written; free it all. */
	recycle_list(d, writer_detach(d->writer));
	if (d->done_head)
		recycle_list(d, &d->done_head->wr);
	d->done_head = d->done_tail = NULL;
	return NULL;
}

struct dispatcher *dispatcher_start(struct writer *w, struct sub_registry *reg,
				    const struct dispatcher_config *cfg)
{
	struct dispatcher *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->writer = w;
	d->reg = reg;
	d->cfg = *cfg;
	d->rng = (uint64_t)clock_mono_us() * 0x9E3779B97F4A7C15ULL | 1;
	d->jobs = calloc((size_t)cfg->max_in_flight, sizeof(*d->jobs));
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	d->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!d->jobs || d->epfd < 0 || d->evfd < 0)
		goto fail;
	struct epoll_event wev = {.events = EPOLLIN, .data.u32 = 0};
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->evfd, &wev))
		goto fail;
	for (int i = 0; i < cfg->n_sinks && i < SINKS_MAX; i++) {
		struct sink_env env = {.done = attempt_done_cb, .abandoned = attempt_abandoned_cb,
				       .ctx = d, .slot = i};
		struct sink *s = cfg->sinks[i];
		d->sinks[d->n_sinks++] = s;
		sink_attach(s, &env);
		int fd = sink_fd(s);
		struct epoll_event sev = {.events = EPOLLIN, .data.u32 = (uint32_t)i + 1};
		if (fd >= 0 && epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &sev)) {
			log_error("dispatcher: cannot watch the %s sink (errno %d)", s->ops->name, errno);
			goto fail;
		}
	}
	for (int i = cfg->max_in_flight - 1; i >= 0; i--) {
		d->jobs[i].d = d;
		d->jobs[i].sj.rng = &d->rng;
		d->jobs[i].next = d->free_list;
		d->free_list = &d->jobs[i];
	}
	writer_attach(w, writer_ready_cb, d);
	if (pthread_create(&d->thread, NULL, dispatcher_main, d)) {
		log_error("dispatcher: cannot start thread");
		writer_detach(w);
		goto fail;
	}
	pthread_mutex_lock(&circuit_mu);
	circuit_owner = d;
	pthread_mutex_unlock(&circuit_mu);
	return d;
fail:
	if (d->epfd >= 0)
		close(d->epfd);
	if (d->evfd >= 0)
		close(d->evfd);
	free(d->jobs);
	free(d);
	return NULL;
}

/* Interrupts the dispatcher's epoll_wait (any thread; async-signal-safe). */
static void wake_fd(struct dispatcher *d)
{
	uint64_t one = 1;
	ssize_t r = write(d->evfd, &one, sizeof(one)); /* EAGAIN: already pending */
	(void)r;
}

static void writer_ready_cb(void *ctx)
{
	wake_fd(ctx);
}

void dispatcher_wake(struct dispatcher *d)
{
	atomic_store(&d->woken, 1);
	wake_fd(d);
}

void dispatcher_stop(struct dispatcher *d)
{
	if (!d)
		return;
	atomic_store(&d->stopping, 1);
	wake_fd(d);
	pthread_join(d->thread, NULL);
	for (int i = 0; i < d->cfg.max_in_flight; i++)
		for (int k = 0; k < d->n_sinks; k++)
			sink_job_free(d->sinks[k], &d->jobs[i].sj);
	ss_free_all(d);
	close(d->epfd);
	close(d->evfd);
	free(d->jobs);
	free(d);
}
