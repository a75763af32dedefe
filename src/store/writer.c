/* writer.c: the writer thread (ingest groups, result groups, claims) and the spool
 * replay thread (see writer.h).
 *
 * Must not acknowledge anything that is neither committed nor fsynced in the spool, and
 * must not block its callers on the store except writer_ingest (which waits for
 * durability by contract). */
#include "store/writer.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/metrics.h"
#include "core/pacing.h"
#include "util/clock.h"
#include "util/log.h"

#define REPLAY_INTERVAL_MS 500
#define RETRY_WRITE_US (500 * 1000) /* a result group the store refused waits this long */
/* A lane that takes ingest too writes result groups of at most WRITER_RESULTS_LIVE while
 * an ingest request came in the last WRITER_LIVE_US. */
#define WRITER_LIVE_US (100 * 1000)
#define WRITER_RESULTS_LIVE 128

/* An ingest request: its caller waits on w->finished until done, or (writer_ingest_start)
 * is called back with its result; the writer then frees it. */
struct pending {
	struct store_event_in *events;
	size_t n;
	int no_spool;                 /* writer_ingest_stored: never to the spool */
	int done;
	int rc;
	struct pending *next;
	int64_t queued_us;            /* when it was queued (monotonic) */
	void (*done_cb)(void *ctx, int rc); /* NULL: a caller waits */
	void *done_ctx;
	struct pending *next_called;  /* ingest_run's list of those to call back */
};

/* A thread of the writer and what it takes: with one lane it takes everything; with two
 * (a backend whose writes may run side by side), one takes ingest groups and the other
 * claims and results; with three, claims and results (with lease renewals) apart too. */
struct lane {
	struct writer *w;
	pthread_t thread;
	int started;
	int ingest;                   /* takes ingest groups */
	int claims;                   /* takes claims */
	int results;                  /* takes result groups and lease renewals */
};

struct writer {
	store *st;
	struct lane lanes[3];
	int n_lanes;
	pthread_mutex_t mu;
	pthread_cond_t work;          /* signalled when work is queued or on stop */
	pthread_cond_t finished;      /* broadcast after each cycle */
	int stopping;
	int busy;                     /* claims, renewals and result groups out of the lists */
	void (*commit_cb)(void *ctx); /* after a commit that stored events */
	void *commit_ctx;

	/* ingest: requests in order; the scratch array is reused across groups */
	struct pending *head, *tail;
	int64_t ingest_seen_us;       /* when the last request was queued */
	struct claim_yield yield;     /* claims spaced while small requests wait (pacing.h) */
	int64_t claim_end_us;         /* when the last claim was answered */
	struct store_event_in *group;
	size_t group_cap;

	/* results: client -> writer, in order */
	struct writer_result *todo_head, *todo_tail;
	size_t todo_count;
	size_t todo_ordered;          /* of them, results of ordered keys (ordered_key) */
	int64_t todo_since_us;        /* when the first of them arrived */
	int64_t retry_at_us;          /* after a refused group: not before then */
	struct store_result *scratch; /* WRITER_RESULTS_MAX of them, the group being written */
	size_t results_spooled;       /* written to the spool in this outage */
	/* results: writer -> client */
	struct writer_result *written_head, *written_tail;
	size_t written_count;

	/* claims */
	size_t claim_want;            /* client -> writer: claim up to this many, 0 = none */
	int64_t lease_ms;
	int claim_done;               /* writer -> client: the answer below is ready */
	int claim_rc;
	struct store_claim *claims;
	size_t claim_n;
	struct writer_renewal *renew; /* client -> writer: leases to renew, NULL = none */
	int renew_done;               /* writer -> client: renew is answered */
	int due_hint_set;             /* after a short claim: the next due time is known */
	int64_t due_hint_ms;
	int down;                     /* the last store call failed */

	/* the hand-off (writer.h): how many handed deliveries the client can start now, how
	 * many may wait for it, the part of those an ingest group in progress reserved, and
	 * the deliveries leased and not taken yet (oldest first) */
	size_t handoff_room;
	size_t handoff_cap;
	size_t handoff_reserved;
	int64_t handoff_lease_ms;
	struct store_claim *handed;
	size_t handed_n, handed_cap;
	char (*handoff_ids)[UUID_STR_LEN]; /* the ingest lane's room for their ids */
	size_t handoff_ids_cap;

	/* the client (the dispatcher) */
	void (*ready_cb)(void *ctx);
	void *ready_ctx;

	/* spool (NULL = off) and its replay thread; the counters are under mu */
	struct spool *spool;
	pthread_t replay_thread;
	int replay_started;
	int replay_stopping;
	pthread_cond_t replay_wake;
	int spooling;                 /* an ingest outage is being spooled (log once) */
	size_t spooled_events, spooled_records;
};

static void ready(struct writer *w)
{
	if (w->ready_cb)
		w->ready_cb(w->ready_ctx);
}

/* ---- ingest ---------------------------------------------------------------------- */

/* Writes an ingest group the store could not take to the spool. STORE_OK when it is
 * durable there; otherwise the store's answer stands. */
static int spool_events(struct writer *w, struct store_event_in *events, size_t n, int store_rc)
{
	void *rec = NULL;
	size_t len = 0;
	int64_t now = clock_now_ms();
	int rc;

	for (size_t i = 0; i < n; i++) {
		if (!events[i].created_at)
			events[i].created_at = now;
		events[i].duplicate = 0;
	}
	if (spool_encode_events(events, n, &rec, &len)) {
		log_error("spool: cannot encode %zu events (too big or out of memory)", n);
		return store_rc;
	}
	rc = spool_append(w->spool, SPOOL_REC_EVENTS, rec, len);
	free(rec);
	if (rc != SPOOL_OK)
		return store_rc;
	pthread_mutex_lock(&w->mu);
	if (!w->spooling) {
		w->spooling = 1;
		log_warn("spool: the store is unavailable (%s); accepting ingest into the spool %s",
			 store_strerror(store_rc), spool_path(w->spool));
	}
	w->spooled_events += n;
	w->spooled_records++;
	pthread_mutex_unlock(&w->mu);
	return STORE_OK;
}

/* ---- the hand-off ------------------------------------------------------------------ */

/* A delivery may skip the claim when nothing but its lease stands between it and its
 * first try: a plain event (per-key ordering's rule lives in the claim, and an event in
 * another initial state is not due now). */
static int handoff_eligible(const struct store_event_in *ev)
{
	return ev->n_subscriptions > 0 && !ev->partition_key && !store_event_initial(ev);
}

/* Leases the deliveries of the group's eligible events, in order, up to the room the
 * client has; returns how many were reserved (under mu: taken from handoff_room). */
static size_t handoff_plan(struct writer *w, struct store_event_in *events, size_t n)
{
	size_t want = 0, used = 0;

	for (size_t i = 0; i < n; i++) {
		events[i].lease_until = 0;
		events[i].delivery_ids = NULL;
	}
	pthread_mutex_lock(&w->mu);
	size_t pending = w->handed_n + w->handoff_reserved;
	size_t room = w->handoff_cap > pending ? w->handoff_cap - pending : 0;
	int64_t lease_ms = w->handoff_lease_ms;
	pthread_mutex_unlock(&w->mu);
	if (!room || lease_ms <= 0)
		return 0;
	for (size_t i = 0; i < n && want < room; i++)
		if (handoff_eligible(&events[i]) && want + events[i].n_subscriptions <= room)
			want += events[i].n_subscriptions;
	if (!want)
		return 0;
	if (want > w->handoff_ids_cap) {
		void *ids = realloc(w->handoff_ids, want * UUID_STR_LEN);
		if (!ids)
			return 0; /* claimed instead */
		w->handoff_ids = ids;
		w->handoff_ids_cap = want;
	}
	pthread_mutex_lock(&w->mu);
	pending = w->handed_n + w->handoff_reserved;
	room = w->handoff_cap > pending ? w->handoff_cap - pending : 0;
	if (want > room) /* the client lowered the cap meanwhile */
		want = room;
	w->handoff_reserved += want;
	pthread_mutex_unlock(&w->mu);
	int64_t until = clock_now_ms() + lease_ms;
	for (size_t i = 0; i < n && used < want; i++) {
		if (!handoff_eligible(&events[i]) || used + events[i].n_subscriptions > want)
			continue;
		events[i].lease_until = until;
		events[i].delivery_ids = w->handoff_ids + used;
		used += events[i].n_subscriptions;
	}
	return want;
}

/* After the group's commit (stored 1: in the store, not the spool): the leased
 * deliveries of the stored events become claims for the client (built outside the lock,
 * which the dispatcher takes every turn), and the reservation ends. Returns how many
 * were handed. */
static size_t handoff_done(struct writer *w, struct store_event_in *events, size_t n,
			   size_t reserved, int stored)
{
	struct store_claim *claims = NULL;
	size_t handed = 0;

	if (!reserved)
		return 0;
	if (stored && !(claims = malloc(reserved * sizeof(*claims))))
		log_error("writer: out of memory; deliveries leased at ingest are sent when their "
			  "lease expires");
	for (size_t i = 0; claims && i < n; i++) {
		struct store_event_in *ev = &events[i];
		if (!ev->lease_until || ev->duplicate)
			continue;
		for (size_t k = 0; k < ev->n_subscriptions; k++) {
			if (store_claim_of_event(ev, k, &claims[handed]))
				log_error("writer: delivery %s is sent when its lease expires",
					  ev->delivery_ids[k]);
			else
				handed++;
		}
	}
	pthread_mutex_lock(&w->mu);
	w->handoff_reserved -= reserved;
	if (handed && w->handed_n + handed > w->handed_cap) {
		size_t cap = w->handed_cap ? w->handed_cap : 256;
		while (cap < w->handed_n + handed)
			cap *= 2;
		struct store_claim *more = realloc(w->handed, cap * sizeof(*more));
		if (more) {
			w->handed = more;
			w->handed_cap = cap;
		}
	}
	if (handed && w->handed_n + handed <= w->handed_cap) {
		memcpy(w->handed + w->handed_n, claims, handed * sizeof(*claims));
		w->handed_n += handed;
		if (w->handoff_room)
			ready(w);
	} else if (handed) {
		log_error("writer: out of memory; deliveries leased at ingest are sent when their "
			  "lease expires");
		store_claims_free(claims, handed);
		claims = NULL;
		handed = 0;
	}
	pthread_mutex_unlock(&w->mu);
	free(claims);
	return handed;
}

/* Hands leased deliveries that no round will start back to the store: due now, no
 * attempt recorded, the error they show kept. */
static void handoff_release(struct writer *w, struct store_claim *claims, size_t n)
{
	struct store_result *r = calloc(n ? n : 1, sizeof(*r));
	int64_t now = clock_now_ms();

	for (size_t i = 0; r && i < n; i++) {
		r[i].delivery_id = claims[i].delivery_id;
		r[i].subscription_id = claims[i].subscription_id;
		r[i].status = claims[i].status;
		r[i].next_attempt_at = now;
		r[i].last_code = -1;
	}
	for (size_t off = 0; r && off < n; off += WRITER_RESULTS_MAX) {
		size_t k = n - off < WRITER_RESULTS_MAX ? n - off : WRITER_RESULTS_MAX;
		if (store_record_results(w->st, r + off, k) != STORE_OK)
			log_warn("writer: %zu leased deliveries are sent when their lease expires", k);
	}
	if (!r && n)
		log_warn("writer: %zu leased deliveries are sent when their lease expires", n);
	free(r);
	store_claims_free(claims, n);
}

/* Stores the requests first..last in one transaction; sets each one's rc. */
static void ingest_group(struct writer *w, struct pending *first, struct pending *last)
{
	size_t total = 0;
	for (struct pending *p = first;; p = p->next) {
		total += p->n;
		if (p == last)
			break;
	}
	if (total > w->group_cap) {
		struct store_event_in *g = realloc(w->group, total * sizeof(*g));
		if (!g) {
			log_error("writer: out of memory for %zu events", total);
			for (struct pending *p = first;; p = p->next) {
				p->rc = STORE_ERROR;
				if (p == last)
					break;
			}
			return;
		}
		w->group = g;
		w->group_cap = total;
	}
	size_t off = 0;
	for (struct pending *p = first;; p = p->next) {
		memcpy(w->group + off, p->events, p->n * sizeof(*p->events));
		off += p->n;
		if (p == last)
			break;
	}
	size_t reserved = handoff_plan(w, w->group, total);
	int64_t t0 = clock_mono_us();
	int rc = store_ingest(w->st, w->group, total);
	metrics_writer_time(METRICS_STORE_INGEST, clock_mono_us() - t0);
	size_t handed = handoff_done(w, w->group, total, reserved, rc == STORE_OK);
	/* The store refused the group: to the spool, but a request that must not be spooled
	 * (writer_ingest_stored) is answered with the store's error, and the others are
	 * spooled each on its own. */
	int spool_each = 0;
	for (struct pending *p = first; rc == STORE_UNAVAILABLE && w->spool; p = p->next) {
		spool_each |= p->no_spool;
		if (p == last)
			break;
	}
	if (rc == STORE_UNAVAILABLE && w->spool && !spool_each)
		rc = spool_events(w, w->group, total, rc);
	else if (rc == STORE_OK) {
		/* the commit callback makes the client claim: not needed when every new
		 * delivery was handed to it already */
		size_t stored = 0;
		for (size_t i = 0; i < total; i++)
			stored += w->group[i].duplicate ? 0 : w->group[i].n_subscriptions;
		pthread_mutex_lock(&w->mu);
		void (*cb)(void *) = stored > handed ? w->commit_cb : NULL;
		void *ctx = w->commit_ctx;
		pthread_mutex_unlock(&w->mu);
		if (cb)
			cb(ctx);
	}
	off = 0;
	for (struct pending *p = first;; p = p->next) {
		p->rc = rc;
		if (spool_each && !p->no_spool)
			p->rc = spool_events(w, w->group + off, p->n, rc);
		for (size_t i = 0; i < p->n; i++) {
			memcpy(p->events[i].id, w->group[off + i].id, UUID_STR_LEN);
			p->events[i].duplicate = w->group[off + i].duplicate;
		}
		off += p->n;
		if (p == last)
			break;
	}
}

/* ---- results and claims ------------------------------------------------------------ */

/* The store is unavailable: writes the group's results to the spool instead (fsynced).
 * Returns 0 when they are durable there. The leases stay in the store until the replay
 * applies the results; a lease that expired first means one more delivery (at least
 * once). */
static int spool_results(struct writer *w, size_t n)
{
	void *rec = NULL;
	size_t len = 0;
	int rc;

	if (spool_encode_results(w->scratch, n, &rec, &len)) {
		log_error("writer: cannot encode %zu results for the spool", n);
		return -1;
	}
	rc = spool_append(w->spool, SPOOL_REC_RESULTS, rec, len);
	free(rec);
	if (rc != SPOOL_OK)
		return -1;
	if (!w->results_spooled)
		log_warn("writer: the store is unavailable; writing results to the spool %s",
			 spool_path(w->spool));
	w->results_spooled += n;
	return 0;
}

/* Writes the n results from head in one transaction (group commit), or to the spool.
 * Returns 0 when they are durable, -1 when the store refused (they are queued again). */
static int results_group(struct writer *w, struct writer_result *head, size_t n, int was_down)
{
	size_t i = 0;
	for (struct writer_result *r = head; i < n; r = r->next)
		w->scratch[i++] = r->result;
	int64_t t0 = clock_mono_us();
	int rc = store_record_results(w->st, w->scratch, n);
	metrics_writer_time(METRICS_STORE_RESULTS, clock_mono_us() - t0);
	if (rc == STORE_UNAVAILABLE && w->spool && spool_results(w, n) == 0)
		return 0; /* durable in the spool: the rounds are done, the outage goes on */
	if (rc != STORE_OK) {
		if (!was_down)
			log_error("writer: cannot write %zu delivery results (%s); keeping them and "
				  "retrying", n, store_strerror(rc));
		return -1;
	}
	if (was_down)
		log_info("writer: store is writable again");
	if (w->results_spooled)
		log_info("writer: %zu delivery results went to the spool during the outage",
			 w->results_spooled);
	w->results_spooled = 0;
	return 0;
}

/* Claims up to want due deliveries. */
static int claim(struct writer *w, size_t want, int64_t lease_ms, int was_down,
		 struct store_claim **claims, size_t *n)
{
	*claims = NULL;
	*n = 0;
	int64_t t0 = clock_mono_us();
	int rc = store_claim_due(w->st, clock_now_ms(), lease_ms, want, claims, n);
	metrics_writer_time(METRICS_STORE_CLAIM, clock_mono_us() - t0);
	if (rc != STORE_OK) {
		if (!was_down)
			log_error("writer: cannot claim deliveries: %s", store_strerror(rc));
		*claims = NULL;
		*n = 0;
	} else if (was_down) {
		log_info("writer: store is reachable again");
	}
	return rc;
}

/* ---- the writer thread --------------------------------------------------------------- */

static void wait_until(struct writer *w, int64_t at_us, int64_t now_us)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t ns = ts.tv_nsec + (at_us - now_us) * 1000;
	ts.tv_sec += ns / 1000000000;
	ts.tv_nsec = ns % 1000000000;
	pthread_cond_timedwait(&w->work, &w->mu, &ts);
}

/* The lease renewal the dispatcher asked for, answered through renew. Unlocked. */
static void renew_leases(struct writer *w, struct writer_renewal *renew, int was_down)
{
	int64_t t0 = clock_mono_us();
	renew->rc = store_leases_renew(w->st, renew->ids, renew->until, renew->n, renew->renewed);
	metrics_writer_time(METRICS_STORE_RENEW, clock_mono_us() - t0);
	if (renew->rc != STORE_OK && !was_down)
		log_error("writer: cannot renew the leases of %zu deliveries in progress: %s",
			  renew->n, store_strerror(renew->rc));
	pthread_mutex_lock(&w->mu);
	w->renew_done = 1;
	ready(w);
	pthread_mutex_unlock(&w->mu);
}

/* The claim the dispatcher asked for, handed to it; after a short one, when the next
 * delivery is due (so the dispatcher claims then, not at its idle poll). Unlocked.
 * Returns the claim's store code. */
static int claim_and_hand(struct writer *w, size_t want, int64_t lease_ms, int was_down)
{
	struct store_claim *claims = NULL;
	size_t got = 0;
	int rc = claim(w, want, lease_ms, was_down, &claims, &got);
	pthread_mutex_lock(&w->mu);
	w->claim_done = 1;
	w->claim_end_us = clock_mono_us();
	w->claim_rc = rc;
	w->claims = claims;
	w->claim_n = got;
	w->down = rc != STORE_OK;
	ready(w);
	pthread_mutex_unlock(&w->mu);
	/* the answer went out first; the due time is a hint for later */
	int64_t due = 0;
	if (rc == STORE_OK && got < want && store_next_due(w->st, &due) == STORE_OK) {
		pthread_mutex_lock(&w->mu);
		w->due_hint_set = 1;
		w->due_hint_ms = due;
		ready(w);
		pthread_mutex_unlock(&w->mu);
	}
	return rc;
}

/* A run of ingest requests, first to last, stored in one group; their callers woken.
 * Unlocked. */
static void ingest_run(struct writer *w, struct pending *first, struct pending *last)
{
	struct pending *called = NULL, **tail = &called;

	ingest_group(w, first, last);
	pthread_mutex_lock(&w->mu);
	for (struct pending *p = first;; p = p->next) {
		if (p->done_cb) {
			*tail = p;
			tail = &p->next_called;
		} else {
			p->done = 1; /* its caller may free it once the lock is given back */
		}
		if (p == last)
			break;
	}
	*tail = NULL;
	pthread_cond_broadcast(&w->finished);
	pthread_mutex_unlock(&w->mu);
	/* unlocked: a callback may queue the caller's next request */
	for (struct pending *p = called, *next; p; p = next) {
		next = p->next_called;
		metrics_writer_time(METRICS_INGEST_ANSWERED, clock_mono_us() - p->queued_us);
		p->done_cb(p->done_ctx, p->rc);
		free(p);
	}
}

/* How many of the n results from head are of ordered keys. */
static size_t ordered_in(const struct writer_result *head, size_t n)
{
	size_t k = 0;
	for (size_t i = 0; i < n && head; i++, head = head->next)
		k += head->result.ordered_key != 0;
	return k;
}

/* How long the first result queued waits for company. On a backend with lanes of its own
 * (PostgreSQL) a result group is a statement whose fixed cost is several times a result's
 * (its CTEs, the attempts and per-minute counts it upserts): at a few hundred deliveries/s
 * each result went alone. They wait longer there, unless a result of an ordered key is
 * among them (the key's next delivery waits for it). Locked. */
static int64_t group_wait_us(const struct writer *w)
{
	return w->n_lanes > 1 && !w->todo_ordered ? WRITER_GROUP_WAIT_LANES_US
						  : WRITER_GROUP_WAIT_US;
}

/* A group of rn results (rhead..rlast) after its write: on the written list when ok, else
 * back in front of the queue, in order, for another try in a while. Locked. */
static void results_written(struct writer *w, struct writer_result *rhead,
			    struct writer_result *rlast, size_t rn, int ok)
{
	if (ok) {
		if (w->written_tail)
			w->written_tail->next = rhead;
		else
			w->written_head = rhead;
		w->written_tail = rlast;
		w->written_count += rn;
		return;
	}
	rlast->next = w->todo_head;
	w->todo_head = rhead;
	if (!w->todo_tail)
		w->todo_tail = rlast;
	w->todo_count += rn;
	w->todo_ordered += ordered_in(rhead, rn);
	w->retry_at_us = clock_mono_us() + RETRY_WRITE_US;
}

/* Takes the queued ingest requests off the queue, as many as one group holds (at least
 * the first); returns the first, *last the last. Locked. */
static struct pending *ingest_take(struct writer *w, struct pending **last)
{
	struct pending *first = w->head, *l = first;
	size_t n = first->n;
	while (l->next && n + l->next->n <= WRITER_INGEST_MAX) {
		l = l->next;
		n += l->n;
	}
	w->head = l->next;
	if (!w->head)
		w->tail = NULL;
	*last = l;
	/* how long the small ones waited: the claims' gap follows it */
	int64_t now_us = clock_mono_us(), waited = -1;
	for (struct pending *p = first;; p = p->next) {
		int64_t queued = now_us - p->queued_us;
		metrics_writer_time(METRICS_INGEST_QUEUED, queued);
		if (p->n <= YIELD_SMALL_EVENTS && queued > waited)
			waited = queued;
		if (p == l)
			break;
	}
	if (waited >= 0)
		claim_yield_observe(&w->yield, now_us, waited);
	return first;
}

static void *writer_main(void *arg)
{
	struct lane *ln = arg;
	struct writer *w = ln->w;

	pthread_setname_np(pthread_self(), ln->claims ? "writer"
					   : ln->results ? "writer-results" : "writer-ingest");
	pthread_mutex_lock(&w->mu);
	for (;;) {
		int64_t now_us = clock_mono_us();
		/* a claim asked waits for its gap after the last one while producers of
		 * single events wait for their acknowledgements (core/pacing.h) */
		int claim_asked = ln->claims && w->claim_want && !w->claim_done;
		int64_t claim_at_us = w->claim_end_us + claim_yield_gap(&w->yield, now_us);
		int must_claim = claim_asked && now_us >= claim_at_us;
		/* Lease renewals go with the result groups: both lock delivery rows of
		 * this instance (a round that ends while its renewal is under way is in
		 * both), and one after the other on one lane they cannot deadlock. */
		struct writer_renewal *renew = ln->results && w->renew && !w->renew_done ?
						       w->renew : NULL;
		struct pending *queued = ln->ingest ? w->head : NULL;
		/* A result group is written when it is full, when a claim goes with it (on a
		 * lane of its own: when the dispatcher asks for work, which the written results
		 * give back room for), or when its first result has waited
		 * WRITER_GROUP_WAIT_US for company; after a failure, not before retry_at_us. */
		int claim_wanted = ln->claims ? must_claim : w->claim_want && !w->claim_done;
		int64_t write_at_us = w->todo_since_us + group_wait_us(w);
		if (w->todo_count >= WRITER_RESULTS_MAX || claim_wanted || renew)
			write_at_us = now_us;
		if (write_at_us < w->retry_at_us)
			write_at_us = w->retry_at_us;
		int can_write = ln->results && w->todo_head && now_us >= write_at_us;
		if (w->stopping && !queued)
			break;
		if (!can_write && !must_claim && !renew && !queued) {
			int64_t at_us = ln->results && w->todo_head ? write_at_us : INT64_MAX;
			if (claim_asked && claim_at_us < at_us)
				at_us = claim_at_us;
			if (at_us != INT64_MAX)
				wait_until(w, at_us, now_us);
			else
				pthread_cond_wait(&w->work, &w->mu);
			continue;
		}

		/* Take this cycle's work: a run of ingest requests up to the group limit,
		 * a group of results, the claim request. Callers queue more meanwhile. */
		struct pending *last = NULL, *first = queued ? ingest_take(w, &last) : NULL;
		struct writer_result *rhead = NULL, *rlast = NULL;
		size_t rn = 0;
		/* One lane for everything (SQLite's one write lock): while producers send,
		 * smaller result groups, so that an ingest request that arrives meanwhile
		 * waits for less (a backlog draining must not hold up the acknowledgements of
		 * fresh events; SQLite's commits in WAL mode cost little). */
		size_t rmax = ln->ingest && now_us - w->ingest_seen_us < WRITER_LIVE_US
				      ? WRITER_RESULTS_LIVE : WRITER_RESULTS_MAX;
		if (can_write) {
			rhead = w->todo_head;
			size_t ordered = rhead->result.ordered_key != 0;
			for (rlast = rhead, rn = 1; rn < rmax && rlast->next; rn++) {
				rlast = rlast->next;
				ordered += rlast->result.ordered_key != 0;
			}
			w->todo_head = rlast->next;
			if (!w->todo_head)
				w->todo_tail = NULL;
			w->todo_count -= rn;
			w->todo_ordered -= ordered;
			w->todo_since_us = now_us; /* the rest has waited long enough too */
			rlast->next = NULL;
		}
		size_t want = must_claim ? w->claim_want : 0;
		int64_t lease_ms = w->lease_ms;
		int was_down = w->down;
		int took = rhead || want || renew;
		w->busy += took;
		pthread_mutex_unlock(&w->mu);

		/* Leases of rounds in progress first: their deliveries are being sent. Then
		 * the ingest requests: a producer waits on each for its acknowledgement. Then
		 * the claim: new work waits on it, results only on their group. */
		if (renew)
			renew_leases(w, renew, was_down);
		if (first)
			ingest_run(w, first, last);
		int claim_rc = want ? claim_and_hand(w, want, lease_ms, was_down) : STORE_OK;
		if (want && rhead && ln->ingest) {
			/* requests that came during the claim go before the results */
			pthread_mutex_lock(&w->mu);
			first = w->head ? ingest_take(w, &last) : NULL;
			pthread_mutex_unlock(&w->mu);
			if (first)
				ingest_run(w, first, last);
		}
		int wrote = rhead ? results_group(w, rhead, rn, was_down) : 0;

		pthread_mutex_lock(&w->mu);
		if (rhead)
			results_written(w, rhead, rlast, rn, wrote == 0);
		if (rhead)
			w->down = wrote != 0 || (want && claim_rc != STORE_OK);
		w->busy -= took;
		if (rhead)
			ready(w);
		pthread_cond_broadcast(&w->finished);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* ---- replay ---------------------------------------------------------------------- */

struct replay_run {
	struct writer *w;
	size_t records, events, duplicates, results;
	int store_rc;
};

/* Results the dispatcher spooled: applied where this owner still holds the lease (the
 * store ignores the others: those deliveries are sent again, at least once). */
static int replay_results(struct replay_run *run, const void *data, size_t len)
{
	struct store_result *results;
	size_t n;
	int rc;

	if (spool_decode_results(data, len, &results, &n)) {
		log_error("spool: record %zu (%zu bytes of results) cannot be decoded; skipped",
			  run->records, len);
		run->records++;
		return 0;
	}
	rc = store_record_results(run->w->st, results, n);
	spool_results_free(results, n);
	if (rc != STORE_OK) {
		run->store_rc = rc;
		return 1;
	}
	run->records++;
	run->results += n;
	return 0;
}

static int replay_record_cb(void *ctx, uint8_t type, const void *data, size_t len)
{
	struct replay_run *run = ctx;
	struct store_event_in *events;
	size_t n;
	int rc = STORE_OK;

	if (type == SPOOL_REC_RESULTS)
		return replay_results(run, data, len);
	if (type != SPOOL_REC_EVENTS) {
		/* Written by a newer outboxd: keep it for that version rather than drop it. */
		log_error("spool: record %zu has unknown type %u; replay stopped", run->records,
			  (unsigned)type);
		run->store_rc = STORE_ERROR;
		return 1;
	}
	if (spool_decode_events(data, len, &events, &n)) {
		/* The checksum was right, so this is a bug, not damage: it cannot be stored. */
		log_error("spool: record %zu (%zu bytes) cannot be decoded; skipped", run->records,
			  len);
		run->records++;
		return 0;
	}
	for (size_t off = 0; off < n && rc == STORE_OK; off += WRITER_INGEST_MAX) {
		size_t k = n - off < WRITER_INGEST_MAX ? n - off : WRITER_INGEST_MAX;

		rc = store_ingest_replay(run->w->st, events + off, k);
		for (size_t i = 0; rc == STORE_OK && i < k; i++)
			run->duplicates += (size_t)events[off + i].duplicate;
	}
	free(events);
	if (rc != STORE_OK) {
		run->store_rc = rc;
		return 1;
	}
	run->records++;
	run->events += n;
	return 0;
}

static void replay_once(struct writer *w, int *last_rc)
{
	struct replay_run run = {.w = w, .store_rc = STORE_OK};
	struct spool_report rep;
	int rc;

	rc = spool_replay(w->spool, replay_record_cb, &run, &rep);
	spool_log_report(w->spool, &rep);
	if (rc == SPOOL_STOPPED) {
		/* UNAVAILABLE is the expected answer during the outage; log other errors
		 * once per change. */
		if (run.store_rc != STORE_UNAVAILABLE && run.store_rc != *last_rc)
			log_error("spool: replay stopped: %s", store_strerror(run.store_rc));
		*last_rc = run.store_rc;
		return;
	}
	*last_rc = STORE_OK;
	if (rc != SPOOL_OK)
		return;
	pthread_mutex_lock(&w->mu);
	log_info("spool: drained %s: %zu records, %zu events replayed into the store (%zu "
		 "already stored), %zu delivery results; %zu events in %zu records were spooled "
		 "by ingest during this outage",
		 spool_path(w->spool), run.records, run.events, run.duplicates, run.results,
		 w->spooled_events, w->spooled_records);
	w->spooling = 0;
	w->spooled_events = 0;
	w->spooled_records = 0;
	void (*cb)(void *) = w->commit_cb;
	void *ctx = w->commit_ctx;
	pthread_mutex_unlock(&w->mu);
	if ((run.events || run.results) && cb)
		cb(ctx);
}

static void *replay_main(void *arg)
{
	struct writer *w = arg;

	pthread_setname_np(pthread_self(), "spool-replay");
	int last_rc = STORE_OK;

	pthread_mutex_lock(&w->mu);
	while (!w->replay_stopping) {
		if (spool_size(w->spool) > 0) {
			pthread_mutex_unlock(&w->mu);
			replay_once(w, &last_rc);
			pthread_mutex_lock(&w->mu);
		}
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += REPLAY_INTERVAL_MS * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		if (!w->replay_stopping)
			pthread_cond_timedwait(&w->replay_wake, &w->mu, &until);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}


/* ---- the interface ------------------------------------------------------------------ */

struct writer *writer_start(store *st, struct spool *spool)
{
	struct writer *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->st = st;
	w->spool = spool;
	w->scratch = calloc(WRITER_RESULTS_MAX, sizeof(*w->scratch));
	if (!w->scratch) {
		free(w);
		return NULL;
	}
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->work, NULL);
	pthread_cond_init(&w->finished, NULL);
	pthread_cond_init(&w->replay_wake, NULL);
	/* SQLite has one write lock: one lane. PostgreSQL takes ingest, claims and results
	 * on connections of their own side by side: three lanes, so that none waits for
	 * another's statement. */
	int lanes = store_concurrent_writers(st); /* at least 1 */
	w->n_lanes = lanes > 3 ? 3 : lanes;
	for (int i = 0; i < w->n_lanes; i++) {
		struct lane *ln = &w->lanes[i];
		ln->w = w;
		ln->claims = i == 0;
		ln->ingest = w->n_lanes == 1 || i == 1;
		ln->results = w->n_lanes < 3 ? i == 0 : i == 2;
		if (pthread_create(&ln->thread, NULL, writer_main, ln)) {
			log_error("writer: cannot start thread");
			writer_stop(w);
			return NULL;
		}
		ln->started = 1;
	}
	if (spool) {
		if (pthread_create(&w->replay_thread, NULL, replay_main, w)) {
			log_error("writer: cannot start the spool replay thread");
			writer_stop(w);
			return NULL;
		}
		w->replay_started = 1;
	}
	return w;
}

void writer_on_commit(struct writer *w, void (*cb)(void *ctx), void *ctx)
{
	pthread_mutex_lock(&w->mu);
	w->commit_cb = cb;
	w->commit_ctx = ctx;
	pthread_mutex_unlock(&w->mu);
}

/* Puts p at the end of the ingest queue. Locked; not while stopping. */
static void ingest_queue(struct writer *w, struct pending *p)
{
	if (w->tail)
		w->tail->next = p;
	else
		w->head = p;
	w->tail = p;
	w->ingest_seen_us = p->queued_us = clock_mono_us();
	pthread_cond_broadcast(&w->work);
}

/* Queues one ingest request and waits until it is done. */
static int ingest_wait(struct writer *w, struct store_event_in *events, size_t n, int no_spool)
{
	struct pending p = {.events = events, .n = n, .no_spool = no_spool, .rc = STORE_ERROR};

	pthread_mutex_lock(&w->mu);
	if (w->stopping) {
		pthread_mutex_unlock(&w->mu);
		return STORE_UNAVAILABLE;
	}
	ingest_queue(w, &p);
	while (!p.done)
		pthread_cond_wait(&w->finished, &w->mu);
	pthread_mutex_unlock(&w->mu);
	metrics_writer_time(METRICS_INGEST_ANSWERED, clock_mono_us() - p.queued_us);
	return p.rc;
}

void writer_ingest_start(struct writer *w, struct store_event_in *events, size_t n,
			 void (*done)(void *ctx, int rc), void *ctx)
{
	struct pending *p = calloc(1, sizeof(*p));
	if (!p) {
		done(ctx, STORE_ERROR);
		return;
	}
	*p = (struct pending){.events = events, .n = n, .rc = STORE_ERROR, .done_cb = done,
			      .done_ctx = ctx};
	pthread_mutex_lock(&w->mu);
	if (w->stopping) {
		pthread_mutex_unlock(&w->mu);
		free(p);
		done(ctx, STORE_UNAVAILABLE);
		return;
	}
	ingest_queue(w, p);
	pthread_mutex_unlock(&w->mu);
}

int writer_ingest(struct writer *w, struct store_event_in *events, size_t n)
{
	return ingest_wait(w, events, n, 0);
}

int writer_ingest_stored(struct writer *w, struct store_event_in *events, size_t n)
{
	return ingest_wait(w, events, n, 1);
}

void writer_attach(struct writer *w, void (*ready_cb)(void *ctx), void *ctx)
{
	pthread_mutex_lock(&w->mu);
	w->ready_cb = ready_cb;
	w->ready_ctx = ctx;
	pthread_mutex_unlock(&w->mu);
}

void writer_results(struct writer *w, struct writer_result *head, struct writer_result *tail,
		    size_t n)
{
	if (!head)
		return;
	tail->next = NULL;
	pthread_mutex_lock(&w->mu);
	if (!w->todo_head)
		w->todo_since_us = clock_mono_us();
	if (w->todo_tail)
		w->todo_tail->next = head;
	else
		w->todo_head = head;
	w->todo_tail = tail;
	w->todo_count += n;
	w->todo_ordered += ordered_in(head, n);
	pthread_cond_broadcast(&w->work);
	pthread_mutex_unlock(&w->mu);
}

void writer_claim(struct writer *w, size_t want, int64_t lease_ms)
{
	pthread_mutex_lock(&w->mu);
	w->claim_want = want;
	w->lease_ms = lease_ms;
	pthread_cond_broadcast(&w->work);
	pthread_mutex_unlock(&w->mu);
}

void writer_renew(struct writer *w, struct writer_renewal *r)
{
	pthread_mutex_lock(&w->mu);
	w->renew = r;
	w->renew_done = 0;
	pthread_cond_broadcast(&w->work);
	pthread_mutex_unlock(&w->mu);
}

void writer_take(struct writer *w, struct writer_answer *a)
{
	memset(a, 0, sizeof(*a));
	a->next_due_ms = -1;
	pthread_mutex_lock(&w->mu);
	if (w->renew_done) {
		a->renewal = w->renew;
		w->renew = NULL;
		w->renew_done = 0;
	}
	if (w->claim_done) {
		a->claimed = 1;
		a->claim_rc = w->claim_rc;
		a->claims = w->claims;
		a->n_claims = w->claim_n;
		w->claim_done = 0;
		w->claim_want = 0;
		w->claims = NULL;
		w->claim_n = 0;
	}
	if (w->due_hint_set) {
		a->next_due_ms = w->due_hint_ms;
		w->due_hint_set = 0;
	}
	a->written = w->written_head;
	a->n_written = w->written_count;
	w->written_head = w->written_tail = NULL;
	w->written_count = 0;
	a->down = w->down;
	/* handed deliveries, oldest first, as many as the client has room for */
	size_t k = w->handed_n < w->handoff_room ? w->handed_n : w->handoff_room;
	if (k && k == w->handed_n) {
		a->handed = w->handed;
		w->handed = NULL;
		w->handed_n = w->handed_cap = 0;
	} else if (k && (a->handed = malloc(k * sizeof(*a->handed)))) {
		memcpy(a->handed, w->handed, k * sizeof(*a->handed));
		memmove(w->handed, w->handed + k, (w->handed_n - k) * sizeof(*w->handed));
		w->handed_n -= k;
	} else {
		k = 0;
	}
	a->n_handed = k;
	w->handoff_room -= k;
	pthread_mutex_unlock(&w->mu);
}

void writer_handoff_room(struct writer *w, size_t room, size_t cap, int64_t lease_ms)
{
	pthread_mutex_lock(&w->mu);
	w->handoff_room = room;
	w->handoff_cap = cap;
	w->handoff_lease_ms = lease_ms;
	if (room && w->handed_n)
		ready(w); /* handed ones wait: the client takes them on its next turn */
	pthread_mutex_unlock(&w->mu);
}

size_t writer_ingest_waiting(struct writer *w)
{
	size_t n = 0;
	pthread_mutex_lock(&w->mu);
	for (struct pending *p = w->head; p; p = p->next)
		n++;
	pthread_mutex_unlock(&w->mu);
	return n;
}

size_t writer_unwritten(struct writer *w)
{
	pthread_mutex_lock(&w->mu);
	size_t n = w->todo_count;
	pthread_mutex_unlock(&w->mu);
	return n;
}

struct writer_result *writer_detach(struct writer *w)
{
	struct writer_result *l;

	pthread_mutex_lock(&w->mu);
	w->claim_want = 0; /* an unanswered claim is not started any more */
	if (!w->renew_done)
		w->renew = NULL; /* nor a renewal: its arrays go with the client */
	w->handoff_room = w->handoff_cap = 0;
	while (w->busy)
		pthread_cond_wait(&w->finished, &w->mu);
	struct store_claim *handed = w->handed;
	size_t n_handed = w->handed_n;
	w->handed = NULL;
	w->handed_n = w->handed_cap = 0;
	w->ready_cb = NULL;
	w->ready_ctx = NULL;
	if (w->claim_done)
		store_claims_free(w->claims, w->claim_n); /* their leases expire */
	w->claims = NULL;
	w->claim_n = 0;
	w->claim_done = 0;
	w->renew = NULL;
	w->renew_done = 0;
	w->due_hint_set = 0;
	l = w->written_head;
	if (w->written_tail)
		w->written_tail->next = w->todo_head;
	else
		l = w->todo_head;
	w->written_head = w->written_tail = NULL;
	w->written_count = 0;
	w->todo_head = w->todo_tail = NULL;
	w->todo_count = 0;
	w->todo_ordered = 0;
	pthread_mutex_unlock(&w->mu);
	if (n_handed)
		handoff_release(w, handed, n_handed);
	return l;
}

void writer_stop(struct writer *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stopping = 1;
	pthread_cond_broadcast(&w->work);
	pthread_mutex_unlock(&w->mu);
	for (int i = 0; i < w->n_lanes; i++)
		if (w->lanes[i].started)
			pthread_join(w->lanes[i].thread, NULL);
	if (w->replay_started) {
		pthread_mutex_lock(&w->mu);
		w->replay_stopping = 1;
		pthread_cond_signal(&w->replay_wake);
		pthread_mutex_unlock(&w->mu);
		pthread_join(w->replay_thread, NULL);
	}
	if (w->claim_done)
		store_claims_free(w->claims, w->claim_n);
	/* a group that committed after the client left */
	if (w->handed_n)
		handoff_release(w, w->handed, w->handed_n);
	else
		free(w->handed);
	free(w->handoff_ids);
	pthread_cond_destroy(&w->replay_wake);
	pthread_cond_destroy(&w->work);
	pthread_cond_destroy(&w->finished);
	pthread_mutex_destroy(&w->mu);
	free(w->group);
	free(w->scratch);
	free(w);
}
