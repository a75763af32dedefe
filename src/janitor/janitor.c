/* janitor.c: relay, lease reaper, per-key ordering's sweeps, cleanup (a slice at a time),
 * replay jobs and the reload of a stale subscription set, on one thread (janitor.h). */
#include "janitor/janitor.h"
#include "janitor/replay.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "util/clock.h"
#include "util/log.h"


struct janitor {
	store *st;
	struct sub_registry *reg;
	struct janitor_config cfg;
	janitor_work_cb work;
	void *ctx;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	int stopping;
	int woken;           /* janitor_wake: look at replay jobs now */
	int relay_failing;   /* logged once per outage */
	struct replay_runner replay;
};

#define REPLAY_TICK_MS 100    /* pacing granularity of running replay jobs */
#define SUBS_RETRY_MS 1000    /* a stale subscription set is read again this often */
#define REPLAY_POLL_MS 1000   /* how often to look for jobs when none runs */
/* The per-minute attempt counts (/v1/stats, the console's series) are pruned this often,
 * keeping a day and an hour (the series reaches back a day) or stats_window if longer. */
#define COUNTS_PRUNE_MS (10 * 60 * 1000)
/* The cleanup deletes a store's backlog of delivered deliveries this many at a time (two
 * transactions, ~0.1 s on PostgreSQL), then sweeps its events a slice at a time
 * (CLEANUP_SWEEP), the relay, the reaper, the sweeps and the replay jobs taking their
 * turns between: deleting 840,000 at once held the thread for 45-70 s, and producers'
 * outbox rows waited that long to be relayed. */
#define CLEANUP_SLICE 2000
#define COUNTS_KEEP_MS ((int64_t)25 * 3600 * 1000)

/* Fan-out for the relay: the subscriptions that want an event. */
struct relay_fanout {
	const struct sub_set *set;
	char (*ids)[UUID_STR_LEN];
	size_t cap;
};

static void relay_fanout_cb(void *ctx, const struct store_event_in *ev,
			    const char (**ids)[UUID_STR_LEN], size_t *n)
{
	struct relay_fanout *f = ctx;
	long m = sub_set_match(f->set, ev->event_type, ev->content_type, ev->payload,
			       ev->payload_len, &f->ids, &f->cap);
	if (m < 0) {
		/* Without targets the event would be stored with no delivery: stop instead. */
		log_error("relay: out of memory during fan-out");
		abort();
	}
	*ids = (const char(*)[UUID_STR_LEN])f->ids;
	*n = (size_t)m;
}

static void run_relay(struct janitor *j)
{
	struct relay_fanout f = {sub_registry_acquire(j->reg), NULL, 0};
	size_t moved;
	do {
		moved = 0;
		int rc = store_relay_outbox(j->st, j->cfg.relay_batch, relay_fanout_cb, &f, &moved);
		if (rc != STORE_OK) {
			if (!j->relay_failing)
				log_error("relay: cannot move outbox rows: %s", store_strerror(rc));
			j->relay_failing = 1;
			break;
		}
		if (j->relay_failing)
			log_info("relay: outbox table readable again");
		j->relay_failing = 0;
		if (moved && j->work)
			j->work(j->ctx);
	} while (moved == j->cfg.relay_batch);
	free(f.ids);
	sub_registry_release(j->reg, (struct sub_set *)f.set);
}

static void *janitor_main(void *arg)
{
	struct janitor *j = arg;

	pthread_setname_np(pthread_self(), "janitor");
	int64_t now = clock_mono_ms();
	int64_t next_relay = now, next_reap = now + j->cfg.reap_interval_ms;
	int64_t next_cleanup = now + j->cfg.cleanup_interval_ms;
	int64_t next_replay = now, next_subs = now;
	/* per-key ordering's sweep (store_order_sweep): every second, or reap_interval
	 * when shorter; the full one at reap_interval and when woken (a replay or purge
	 * may have unblocked a key) */
	int64_t sweep_ms = j->cfg.reap_interval_ms < 1000 ? j->cfg.reap_interval_ms : 1000;
	int64_t next_sweep = now + sweep_ms, next_full_sweep = now + j->cfg.reap_interval_ms;
	int64_t next_counts = now + COUNTS_PRUNE_MS;
	size_t cleaned = 0; /* by the cleanup run under way, over its slices */

	pthread_mutex_lock(&j->mu);
	while (!j->stopping) {
		if (j->woken)
			next_replay = next_sweep = next_full_sweep = 0;
		j->woken = 0;
		pthread_mutex_unlock(&j->mu);
		now = clock_mono_ms();
		if (now >= next_replay) {
			int active = 0;
			long replayed = replay_tick(&j->replay, now, &active);
			if (replayed > 0 && j->work)
				j->work(j->ctx);
			if (replayed > 0) /* keys blocked behind what it replayed may go on */
				next_full_sweep = 0;
			next_replay = clock_mono_ms() + (active ? REPLAY_TICK_MS : REPLAY_POLL_MS);
		}
		if (now >= next_relay) {
			/* A set that could not be made the store's (a failed reload, a row that
			 * does not open) is read again; meanwhile the relay leaves the outbox
			 * rows where they are rather than fan them out without it. */
			int stale = !sub_registry_current(j->reg, NULL, 0);
			if (j->cfg.reload_subs && now >= next_subs &&
			    (sub_registry_take_reload(j->reg) || stale)) {
				j->cfg.reload_subs(j->cfg.reload_ctx);
				next_subs = clock_mono_ms() + SUBS_RETRY_MS;
				stale = !sub_registry_current(j->reg, NULL, 0);
			}
			if (!stale)
				run_relay(j);
			next_relay = clock_mono_ms() + j->cfg.relay_interval_ms;
		}
		if (now >= next_reap) {
			size_t n = 0;
			if (store_reap_leases(j->st, clock_now_ms(), &n) == STORE_OK && n) {
				log_warn("lease reaper: %zu expired leases returned to the pool", n);
				if (j->work)
					j->work(j->ctx);
			}
			next_reap = clock_mono_ms() + j->cfg.reap_interval_ms;
		}
		if (now >= next_sweep) {
			size_t parked = 0, unparked = 0;
			int full = now >= next_full_sweep;
			if (full)
				next_full_sweep = clock_mono_ms() + j->cfg.reap_interval_ms;
			if (store_order_sweep(j->st, clock_now_ms(), full, &parked, &unparked) ==
			    STORE_OK) {
				if (parked)
					log_info("ordering: %zu deliveries blocked behind dead ones of "
						 "their key", parked);
				if (unparked && j->work)
					j->work(j->ctx);
			}
			next_sweep = clock_mono_ms() + sweep_ms;
		}
		if (j->cfg.cleanup_enabled && now >= next_cleanup) {
			size_t n = 0;
			int more = 0;
			int rc = store_cleanup(j->st, clock_now_ms() - j->cfg.cleanup_after_ms,
					       CLEANUP_SLICE, &n, &more);
			cleaned += n;
			if (more) {
				next_cleanup = clock_mono_ms(); /* more, after the others' turns */
			} else {
				if (rc == STORE_OK)
					log_info("cleanup: deleted %zu processed deliveries", cleaned);
				else
					log_error("cleanup: %s (%zu processed deliveries deleted)",
						  store_strerror(rc), cleaned);
				cleaned = 0;
				next_cleanup = clock_mono_ms() + j->cfg.cleanup_interval_ms;
			}
		}
		if (now >= next_counts) {
			int64_t keep = j->cfg.stats_window_ms > COUNTS_KEEP_MS ? j->cfg.stats_window_ms
									 : COUNTS_KEEP_MS;
			int rc = store_attempt_counts_prune(j->st, clock_now_ms() - keep);
			if (rc != STORE_OK)
				log_error("attempt counts: %s", store_strerror(rc));
			next_counts = clock_mono_ms() + COUNTS_PRUNE_MS;
		}

		int64_t wake = next_relay;
		if (next_replay < wake)
			wake = next_replay;
		if (next_reap < wake)
			wake = next_reap;
		if (next_sweep < wake)
			wake = next_sweep;
		if (j->cfg.cleanup_enabled && next_cleanup < wake)
			wake = next_cleanup;
		if (next_counts < wake)
			wake = next_counts;
		int64_t wait_ms = wake - clock_mono_ms();
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		if (wait_ms > 0) {
			ts.tv_sec += wait_ms / 1000;
			ts.tv_nsec += (wait_ms % 1000) * 1000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
		}
		pthread_mutex_lock(&j->mu);
		if (wait_ms > 0 && !j->stopping && !j->woken)
			pthread_cond_timedwait(&j->cond, &j->mu, &ts);
	}
	pthread_mutex_unlock(&j->mu);
	return NULL;
}

struct janitor *janitor_start(store *st, struct sub_registry *reg, const struct janitor_config *cfg,
			janitor_work_cb work, void *ctx)
{
	struct janitor *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	j->st = st;
	j->reg = reg;
	j->cfg = *cfg;
	j->work = work;
	j->ctx = ctx;
	j->replay.st = st;
	j->replay.reg = reg;
	j->replay.ops = cfg->ops;
	pthread_mutex_init(&j->mu, NULL);
	pthread_cond_init(&j->cond, NULL);
	if (pthread_create(&j->thread, NULL, janitor_main, j)) {
		log_error("janitor: cannot start thread");
		free(j);
		return NULL;
	}
	return j;
}

void janitor_wake(struct janitor *j)
{
	pthread_mutex_lock(&j->mu);
	j->woken = 1;
	pthread_cond_signal(&j->cond);
	pthread_mutex_unlock(&j->mu);
}

void janitor_stop(struct janitor *j)
{
	if (!j)
		return;
	pthread_mutex_lock(&j->mu);
	j->stopping = 1;
	pthread_cond_signal(&j->cond);
	pthread_mutex_unlock(&j->mu);
	pthread_join(j->thread, NULL);
	pthread_cond_destroy(&j->cond);
	pthread_mutex_destroy(&j->mu);
	free(j);
}
