/* dispatcher.c: the delivery loop (see dispatcher.h). One thread asks the store's writer
 * (store/writer.h) for due deliveries, starts each one's round (round.c), runs the sinks
 * (sink.h: HTTP, Kafka) through one fd each in its epoll set, and hands finished rounds
 * back to the writer, which writes their results in groups and returns them for reuse.
 *
 * Nothing here blocks: the store calls run on the writer's thread; the sinks do their
 * I/O on this thread. Nothing here knows a transport (requests, tokens and redaction are
 * the sinks') or a retry rule (core/outcome.h decides, in round.c).
 *
 * Per subscription (struct sub_limits, limits.h) the dispatcher keeps its circuit breaker
 * and its limits. A round that max_in_flight or rate_limit holds back waits (parked, in
 * its subscription's queue, in order) without a store write, so a slow subscriber never
 * holds up the others; a queue longer than its share of the round pool, or older than
 * half a lease, goes back to the store instead.
 *
 * Leases: a round that runs long (slow answers, many immediate tries, a stagger) keeps
 * its delivery by renewing the lease through the writer, so at most one round of a
 * delivery runs at any time across instances (round.c starts an attempt only when the
 * lease outlasts its timeout). */
#include "deliver/dispatcher_int.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "core/metrics.h"
#include "util/clock.h"
#include "util/log.h"

/* ---- the loop ------------------------------------------------------------------------------ */

void dispatcher_claims_start(struct dispatcher *d, struct store_claim *claims, size_t n)
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
	for (size_t i = 0; i < n; i++) {
		if (!d->free_list) {
			/* More than asked for (a store that leased past its limit): the rest
			 * keep their leases until they expire, then the reaper returns them
			 * and they are claimed again. Sent later, never lost. */
			log_error("dispatcher: the store handed over %zu deliveries with room for "
				  "%zu; the other %zu go back to the pool when their leases expire",
				  n, i, n - i);
			b->live -= n - i;
			break;
		}
		round_start(d, b, &claims[i]);
	}
	batch_release(d, b);
}

/* The round a writer_result belongs to. */
static struct round *round_of(struct writer_result *wr)
{
	return (struct round *)((char *)wr - offsetof(struct round, wr));
}

/* Recycles the rounds of a writer_result list — those the writer wrote, or at shutdown
 * those it could not — and returns how many. *keyed is set when one was of a key-ordered
 * subscription and had a partition key: the next delivery of that key may be claimable
 * now. */
static size_t recycle_list(struct dispatcher *d, struct writer_result *l, int *keyed)
{
	size_t n = 0;
	*keyed = 0;
	while (l) {
		struct round *r = round_of(l);
		l = l->next;
		if (r->claim && r->claim->partition_key && r->sub &&
		    r->sub->ordering != ORDERING_NONE)
			*keyed = 1;
		round_recycle(d, r);
		n++;
	}
	return n;
}

/* ---- leases ------------------------------------------------------------------------------ */

/* Asks the writer to renew the leases that will soon be too short for the next attempt
 * (or are past half their term), every RENEW_EVERY_MS, or at once when a round waits for
 * one. A renewal runs to max(lease, the attempt's need and a few turns more), so a round
 * with a timeout longer than the lease is not starved. */
static void leases_renew(struct dispatcher *d, int64_t now_ms)
{
	if (d->renew_asked || (!d->renew_soon && now_ms < d->next_renew_ms))
		return;
	d->next_renew_ms = now_ms + RENEW_EVERY_MS;
	d->renew_soon = 0;
	size_t n = 0;
	for (int i = 0; i < d->cfg.max_in_flight; i++) {
		struct round *r = &d->rounds[i];
		if (r->state == ROUND_FREE || r->state == ROUND_DONE || r->lease_lost)
			continue;
		int64_t need = round_lease_need_ms(r), ahead = d->cfg.lease_ms / 2;
		if (need + 2 * RENEW_EVERY_MS > ahead)
			ahead = need + 2 * RENEW_EVERY_MS;
		if (r->lease_until_ms - now_ms >= ahead)
			continue;
		int64_t term = d->cfg.lease_ms;
		if (need + 4 * RENEW_EVERY_MS > term)
			term = need + 4 * RENEW_EVERY_MS;
		memcpy(d->renew_ids[n], r->claim->delivery_id, UUID_STR_LEN);
		d->renew_until[n] = now_ms + term;
		d->renew_rounds[n] = r;
		d->renew_seq[n] = r->seq;
		n++;
	}
	if (!n)
		return;
	d->renewal = (struct writer_renewal){
		.ids = (const char (*)[UUID_STR_LEN])d->renew_ids,
		.until = d->renew_until,
		.renewed = d->renew_ok,
		.n = n,
	};
	writer_renew(d->writer, &d->renewal);
	d->renew_asked = 1;
}

/* The writer answered a renewal: the rounds still there take their new term, or learn
 * that their lease is gone (another round may hold the delivery now: round.c makes no
 * more attempts and hands it back, recording the attempts made). A store error changes
 * nothing; the next turn tries again. */
static void leases_renewed(struct dispatcher *d, const struct writer_renewal *rn)
{
	long renewed = 0, lost = 0;
	d->renew_asked = 0;
	for (size_t i = 0; i < rn->n; i++) {
		struct round *r = d->renew_rounds[i];
		if (r->seq != d->renew_seq[i] || r->state == ROUND_FREE || r->state == ROUND_DONE)
			continue; /* that round is over; the slot may hold another */
		if (rn->renewed[i]) {
			r->lease_until_ms = rn->until[i];
			renewed++;
		} else if (rn->rc == STORE_OK) {
			r->lease_lost = 1;
			lost++;
			log_warn("delivery %s: its lease ran out before it could be renewed; this "
				 "round makes no more attempts (docs/reliability.md, \"Leases\")",
				 r->claim->delivery_id);
		}
	}
	metrics_leases(renewed, lost);
}

/* The writer has news (results written, a claim answered): wake the loop. */
static void writer_ready_cb(void *ctx);

/* Clears the wake-up eventfd. Done before the writer's news is taken, never after: a
 * wake-up that arrives between taking the news and clearing it would be lost, and the
 * loop would sleep on news it has not seen (up to its poll interval). */
static void wake_drain(struct dispatcher *d)
{
	uint64_t v;
	for (int i = 0; i < d->n_events; i++) {
		if (d->events[i].data.u32 == 0) {
			while (read(d->evfd, &v, sizeof(v)) == (ssize_t)sizeof(v))
				;
			return;
		}
	}
}

/* Runs the sinks whose fd epoll found ready or whose timer is due. An event's data is 0
 * for the wake-up eventfd (drained by wake_drain), else the sink's index + 1. */
static void sinks_run(struct dispatcher *d)
{
	int ready[SINKS_MAX] = {0};
	for (int i = 0; i < d->n_events; i++) {
		uint32_t tag = d->events[i].data.u32;
		if (tag > 0 && tag <= (uint32_t)d->sinks.n)
			ready[tag - 1] = 1;
	}
	d->n_events = 0;
	int64_t now_us = clock_mono_us();
	for (int i = 0; i < d->sinks.n; i++)
		if (ready[i] || sink_wait_us(d->sinks.members[i], now_us) == 0)
			sink_run(d->sinks.members[i]);
}

/* How long the turn may sleep: until a sink's fd is ready, a claim, a retry's claim, a
 * lease renewal, a stagger, a parked round or the endpoints' stats are due, or a wake-up
 * (the writer answering is one); 100 ms at most while waiting on room or an answer. */
static int64_t turn_wait_us(struct dispatcher *d, int64_t now_us, bool worth, int stopping,
			    int64_t publish_ms, int64_t parked_wait_us)
{
	int64_t claim_us = d->pace.next_claim_us;
	if (d->claim_at_ms) {
		int64_t at_us = now_us + (d->claim_at_ms - clock_now_ms()) * 1000;
		if (at_us < claim_us)
			claim_us = at_us;
	}
	int64_t wait_us = claim_us > now_us ? claim_us - now_us : 0;
	if (d->active >= d->cfg.max_in_flight || stopping || !worth || d->claim_asked)
		wait_us = 100 * 1000;
	if (!stopping && d->active && !d->renew_asked) {
		int64_t renew_us = (d->next_renew_ms - clock_now_ms()) * 1000;
		if (renew_us < wait_us)
			wait_us = renew_us > 0 ? renew_us : 0;
	}
	if (publish_ms >= 0 && publish_ms * 1000 < wait_us)
		wait_us = publish_ms * 1000; /* stats of the endpoints stay fresh */
	int64_t stagger_us = rounds_wait_us(d, now_us);
	if (stagger_us >= 0 && stagger_us < wait_us)
		wait_us = stagger_us;
	if (parked_wait_us >= 0 && parked_wait_us < wait_us)
		wait_us = parked_wait_us;
	for (int i = 0; i < d->sinks.n; i++) {
		int64_t w = sink_wait_us(d->sinks.members[i], now_us);
		if (w >= 0 && w < wait_us)
			wait_us = w;
	}
	return wait_us;
}

/* The queues that overflowed and have not emptied since, but for stuck ones: *room is
 * the least room left in them (INT_MAX when none), and the answer 1 when one of them has
 * no room for a claim (of batch deliveries, or half its cap when that is less: a small
 * queue, a pinned concurrency's, would otherwise never have room). A claim brings the
 * oldest due deliveries first, so it may bring any queue's. A queue without that room
 * that started fewer than half a claim's rounds in SATURATED_CLAIM_WAIT_US becomes stuck
 * and is left out from then on. */
static int queues_full(struct dispatcher *d, int batch, int64_t now_us, int *room)
{
	int full = 0;
	*room = INT_MAX;
	if (!d->n_saturated)
		return 0;
	for (struct sub_limits *x = d->parked_subs; x; x = x->next_parked) {
		if (!x->saturated || x->stuck)
			continue;
		int left = x->saturated > x->parked ? x->saturated - x->parked : 0;
		int need = batch < x->saturated / 2 ? batch : x->saturated / 2;
		if (left >= need && left > 0) {
			x->full_since_us = 0;
		} else if (!x->full_since_us) {
			x->full_since_us = now_us;
			x->started_then = x->started;
		} else if (now_us - x->full_since_us >= SATURATED_CLAIM_WAIT_US) {
			if (x->started - x->started_then < (uint64_t)(need / 2 > 1 ? need / 2 : 1)) {
				x->stuck = 1; /* it hardly moved: claims stop waiting for it */
				continue;
			}
			x->full_since_us = now_us; /* it moves: wait on */
			x->started_then = x->started;
		}
		if (left < *room)
			*room = left;
		if (x->full_since_us)
			full = 1;
	}
	return full;
}

/* The dispatcher's thread. One turn of its loop takes the writer's news, claims, renews
 * leases, runs the staggers, the sinks and the parked rounds, hands finished rounds to
 * the writer and sleeps until something is due: longer than a function should be, kept
 * whole so that the order of a turn, on which the wake-ups and the shutdown depend, reads
 * top to bottom (each step's rules are in the function it calls). */
static void *dispatcher_main(void *arg)
{
	struct dispatcher *d = arg;
	int64_t stop_deadline_us = 0, next_prune_us = 0;

	pthread_setname_np(pthread_self(), "dispatch");

	for (;;) {
		int64_t now_us = clock_mono_us();
		int stopping = atomic_load(&d->stopping);

		atomic_store_explicit(&d->beat_us, now_us, memory_order_relaxed);
		d->turn++;

		if (stopping && !stop_deadline_us)
			stop_deadline_us = now_us + d->cfg.shutdown_grace_ms * 1000;
		if (stopping && now_us >= stop_deadline_us && d->in_flight)
			for (int i = 0; i < d->sinks.n; i++)
				sink_abort(d->sinks.members[i]);
		if (now_us >= next_prune_us) {
			for (int i = 0; i < d->sinks.n; i++)
				sink_prune(d->sinks.members[i], now_us / 1000);
			limits_prune(&d->limits, now_us / 1000);
			next_prune_us = now_us + PRUNE_US;
		}

		/* Take back what the writer finished: written rounds, and the answer to a
		 * claim, whose deliveries start now. */
		struct writer_answer ans;
		wake_drain(d);
		writer_take(d->writer, &ans);
		d->store_down = ans.down;
		if (ans.renewal)
			leases_renewed(d, ans.renewal);
		int keyed = 0;
		size_t written = recycle_list(d, ans.written, &keyed);
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
		/* Per-key ordering: the next delivery of a key written just now waited for it
		 * (the store's next-due hint leaves waiting ones out): claim at once. */
		if (keyed)
			d->claim_at_ms = clock_now_ms();
		if (answered) {
			pacing_answered(&d->pace, &d->pace_cfg, now_us, claim_rc == STORE_OK,
					d->claim_asked, got);
			d->claim_asked = 0;
			dispatcher_claims_start(d, claims, got);
			metrics_started((long)got, 0);
		}
		/* the hand-off: deliveries leased at ingest start like claimed ones */
		if (ans.n_handed) {
			dispatcher_claims_start(d, ans.handed, ans.n_handed);
			metrics_started(0, (long)ans.n_handed);
		}
		if (due_hint_ms > 0)
			pacing_due_hint(&d->pace, now_us, due_hint_ms - clock_now_ms());
		if (atomic_exchange(&d->woken, 0) && !d->store_down)
			pacing_woken(&d->pace, &d->pace_cfg, now_us);

		/* Claim when the pacing rules say so (core/pacing.h): asked right after an
		 * answer, so the writer claims the next batch while this one is sent; a claim
		 * asked counts as taken room until answered. */
		int gate;
		int saturated = queues_full(d, d->pace_cfg.batch, now_us, &gate);
		struct pacing_turn turn = {
			.active = d->active,
			.asked = d->claim_asked,
			.stopping = stopping,
			.retry_due = d->claim_at_ms && clock_now_ms() >= d->claim_at_ms,
			.saturated = saturated,
			.claim_max = gate < INT_MAX ? (size_t)(gate > 0 ? gate : 1) : 0,
		};
		struct pacing_decision pace = pacing_decide(&d->pace, &d->pace_cfg, &turn, now_us);
		if (pace.claim) {
			writer_claim(d->writer, pace.claim, d->cfg.lease_ms);
			d->claim_asked = pace.claim;
			if (turn.retry_due)
				d->claim_at_ms = 0;
		}

		if (!stopping)
			leases_renew(d, clock_now_ms());
		rounds_run_timers(d, now_us);
		metrics_in_flight(d->active);
		int64_t publish_ms = endpoints_tick(&d->endpoints, now_us / 1000);

		sinks_run(d);
		/* after the completions, which free places under max_in_flight */
		int64_t parked_wait_us = rounds_run_parked(d, clock_mono_us());

		/* What finished in this round goes to the writer at once: it writes while
		 * the sinks work, and groups whatever queued up meanwhile. */
		now_us = clock_mono_us();
		if (d->done_count) {
			writer_results(d->writer, &d->done_head->wr, &d->done_tail->wr, d->done_count);
			d->done_head = d->done_tail = NULL;
			d->done_count = 0;
		}

		/* the room the writer may fill with fresh deliveries of the next ingest
		 * commits (the hand-off), none once stopping */
		int free_rounds = d->cfg.max_in_flight - d->active - (int)d->claim_asked;
		if (saturated && free_rounds > gate)
			free_rounds = gate; /* like a claim: more for a full queue, handed back */
		writer_handoff_room(d->writer, !stopping && free_rounds > 0 ? (size_t)free_rounds : 0,
				    stopping ? 0 : (size_t)d->cfg.max_in_flight, d->cfg.lease_ms);

		if (stopping && d->active == 0 && !d->claim_asked && !d->renew_asked)
			break;
		if (stopping && d->store_down && d->in_flight == 0 &&
		    !d->n_waiting && now_us >= stop_deadline_us) {
			log_error("dispatcher: store unavailable at shutdown; %zu results not written "
				  "(their deliveries will be sent again after the lease expires)",
				  writer_unwritten(d->writer));
			break;
		}

		/* Sleep until something is due, or a wake-up. */
		int64_t wait_us = turn_wait_us(d, now_us, pace.worth, stopping, publish_ms,
					       parked_wait_us);
		/* epoll_wait even when something is due now: the sockets ready meanwhile */
		int n = epoll_wait(d->epfd, d->events, EPOLL_EVENTS,
				   wait_us > 0 ? (int)((wait_us + 999) / 1000) : 0);
		d->n_events = n > 0 ? n : 0;
	}

	/* Whatever is still done but unwritten could not be written; free it all. */
	int keyed;
	recycle_list(d, writer_detach(d->writer), &keyed);
	if (d->done_head)
		recycle_list(d, &d->done_head->wr, &keyed);
	d->done_head = d->done_tail = NULL;
	return NULL;
}

/* Frees d and its arrays (its fds are closed by the caller). */
static void dispatcher_free(struct dispatcher *d)
{
	free(d->rounds);
	free(d->waiting);
	free(d->renew_ids);
	free(d->renew_until);
	free(d->renew_ok);
	free(d->renew_rounds);
	free(d->renew_seq);
	free(d);
}

struct dispatcher *dispatcher_new(struct sub_registry *reg, const struct dispatcher_config *cfg)
{
	struct dispatcher *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->reg = reg;
	d->cfg = *cfg;
	d->pace_cfg = (struct pacing_config){
		.max_in_flight = cfg->max_in_flight,
		.batch = cfg->batch,
		.idle_poll_us = IDLE_POLL_MS * 1000,
		.gap_us = CLAIM_GAP_US,
		.store_down_us = STORE_DOWN_CLAIM_US,
	};
	atomic_init(&d->log_deliveries, cfg->log_deliveries);
	d->rng = (uint64_t)clock_mono_us() * 0x9E3779B97F4A7C15ULL | 1;
	endpoints_init(&d->endpoints, cfg->max_in_flight);
	size_t pool = (size_t)cfg->max_in_flight;
	d->rounds = calloc(pool, sizeof(*d->rounds));
	d->waiting = calloc(pool, sizeof(*d->waiting));
	d->renew_ids = calloc(pool, sizeof(*d->renew_ids));
	d->renew_until = calloc(pool, sizeof(*d->renew_until));
	d->renew_ok = calloc(pool, sizeof(*d->renew_ok));
	d->renew_rounds = calloc(pool, sizeof(*d->renew_rounds));
	d->renew_seq = calloc(pool, sizeof(*d->renew_seq));
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	d->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!d->rounds || !d->waiting || !d->renew_ids || !d->renew_until || !d->renew_ok ||
	    !d->renew_rounds || !d->renew_seq || d->epfd < 0 || d->evfd < 0)
		goto fail;
	struct epoll_event wev = {.events = EPOLLIN, .data.u32 = 0};
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->evfd, &wev))
		goto fail;
	d->sinks = *cfg->sinks;
	for (int i = 0; i < d->sinks.n; i++) {
		struct sink_env env = {.done = round_attempt_done_cb, .abandoned = round_attempt_abandoned_cb,
				       .ctx = d, .slot = i};
		struct sink *s = d->sinks.members[i];
		sink_attach(s, &env);
		int fd = sink_fd(s);
		struct epoll_event sev = {.events = EPOLLIN, .data.u32 = (uint32_t)i + 1};
		if (fd >= 0 && epoll_ctl(d->epfd, EPOLL_CTL_ADD, fd, &sev)) {
			log_error("dispatcher: cannot watch the %s sink (errno %d)", s->type->name, errno);
			goto fail;
		}
	}
	for (int i = cfg->max_in_flight - 1; i >= 0; i--) {
		d->rounds[i].d = d;
		d->rounds[i].sj.rng = &d->rng;
		d->rounds[i].next = d->free_list;
		d->free_list = &d->rounds[i];
	}
	return d;
fail:
	if (d->epfd >= 0)
		close(d->epfd);
	if (d->evfd >= 0)
		close(d->evfd);
	dispatcher_free(d);
	return NULL;
}

void dispatcher_delete(struct dispatcher *d)
{
	for (int i = 0; i < d->cfg.max_in_flight; i++) {
		for (int k = 0; k < d->sinks.n; k++)
			sink_slot_free(d->sinks.members[k], &d->rounds[i].sj);
		round_causes_free(&d->rounds[i]);
	}
	limits_free_all(&d->limits);
	endpoints_free_all(&d->endpoints);
	close(d->epfd);
	close(d->evfd);
	dispatcher_free(d);
}

struct dispatcher *dispatcher_start(struct writer *w, struct sub_registry *reg,
				    const struct dispatcher_config *cfg)
{
	struct dispatcher *d = dispatcher_new(reg, cfg);
	if (!d)
		return NULL;
	d->writer = w;
	writer_attach(w, writer_ready_cb, d);
	if (pthread_create(&d->thread, NULL, dispatcher_main, d)) {
		log_error("dispatcher: cannot start thread");
		writer_detach(w);
		dispatcher_delete(d);
		return NULL;
	}
	return d;
}

/* Interrupts the dispatcher's epoll_wait (any thread; async-signal-safe). */
static void wake_fd(struct dispatcher *d)
{
	uint64_t one = 1;
	ssize_t n = write(d->evfd, &one, sizeof(one)); /* EAGAIN: already pending */
	(void)n;
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
	dispatcher_delete(d);
}

int64_t dispatcher_beat_us(struct dispatcher *d)
{
	return atomic_load_explicit(&d->beat_us, memory_order_relaxed);
}

void dispatcher_set_log_deliveries(struct dispatcher *d, int on)
{
	atomic_store_explicit(&d->log_deliveries, on, memory_order_relaxed);
}
