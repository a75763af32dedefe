/* committer.c: one thread turning many ingest requests into one transaction, and (with
 * a spool) the thread that replays what was spooled while the store was down.
 *
 * Must not acknowledge anything that is neither committed nor fsynced in the spool. */
#include "intake/committer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/clock.h"
#include "util/log.h"

#define REPLAY_INTERVAL_MS 500

/* Most events one transaction takes; more wait for the next round. */
#define GROUP_MAX_EVENTS 10000 /* = STORE_MAX_BATCH: one store_ingest call */

struct pending {
	struct store_event_in *events;
	size_t n;
	int done;
	int rc;
	struct pending *next;
};

struct committer {
	store *st;
	committer_done_cb done_cb;
	void *done_ctx;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t work;      /* signalled when a request is queued or on stop */
	pthread_cond_t finished;  /* broadcast after each group */
	struct pending *head, *tail;
	int stopping;
	struct store_event_in *group; /* scratch array reused across groups */
	size_t group_cap;
	/* spool (NULL = off) and its replay thread; the counters are under mu */
	struct spool *spool;
	pthread_t replay_thread;
	int replay_started;
	int replay_stopping;
	pthread_cond_t replay_wake;
	int spooling;                 /* an outage is being spooled (for logging once) */
	size_t spooled_events, spooled_records;
};

/* Writes a group the store could not take to the spool. STORE_OK when it is durable
 * there; otherwise the store's answer stands. */
static int spool_group(struct committer *c, struct store_event_in *events, size_t n, int store_rc)
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
	rc = spool_append(c->spool, SPOOL_REC_EVENTS, rec, len);
	free(rec);
	if (rc != SPOOL_OK)
		return store_rc;
	pthread_mutex_lock(&c->mu);
	if (!c->spooling) {
		c->spooling = 1;
		log_warn("spool: the store is unavailable (%s); accepting ingest into the spool %s",
			 store_strerror(store_rc), spool_path(c->spool));
	}
	c->spooled_events += n;
	c->spooled_records++;
	pthread_mutex_unlock(&c->mu);
	return STORE_OK;
}

static void run_group(struct committer *c, struct pending *first, struct pending *last)
{
	size_t total = 0;
	for (struct pending *p = first;; p = p->next) {
		total += p->n;
		if (p == last)
			break;
	}
	if (total > c->group_cap) {
		struct store_event_in *g = realloc(c->group, total * sizeof(*g));
		if (!g) {
			for (struct pending *p = first;; p = p->next) {
				p->rc = STORE_ERROR;
				if (p == last)
					break;
			}
			return;
		}
		c->group = g;
		c->group_cap = total;
	}
	size_t off = 0;
	for (struct pending *p = first;; p = p->next) {
		memcpy(c->group + off, p->events, p->n * sizeof(*p->events));
		off += p->n;
		if (p == last)
			break;
	}
	int rc = store_ingest(c->st, c->group, total);
	if (rc == STORE_UNAVAILABLE && c->spool)
		rc = spool_group(c, c->group, total, rc);
	else if (rc == STORE_OK && c->done_cb)
		c->done_cb(c->done_ctx);
	off = 0;
	for (struct pending *p = first;; p = p->next) {
		for (size_t i = 0; i < p->n; i++) {
			memcpy(p->events[i].id, c->group[off + i].id, UUID_STR_LEN);
			p->events[i].duplicate = c->group[off + i].duplicate;
		}
		off += p->n;
		p->rc = rc;
		if (p == last)
			break;
	}
}

static void *committer_main(void *arg)
{
	struct committer *c = arg;

	pthread_setname_np(pthread_self(), "committer");

	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (!c->head && !c->stopping)
			pthread_cond_wait(&c->work, &c->mu);
		if (!c->head && c->stopping)
			break;
		/* Take a run of requests up to the group limit (at least one). */
		struct pending *first = c->head, *last = first;
		size_t n = first->n;
		while (last->next && n + last->next->n <= GROUP_MAX_EVENTS) {
			last = last->next;
			n += last->n;
		}
		c->head = last->next;
		if (!c->head)
			c->tail = NULL;
		pthread_mutex_unlock(&c->mu);

		run_group(c, first, last);

		pthread_mutex_lock(&c->mu);
		for (struct pending *p = first;; p = p->next) {
			p->done = 1;
			if (p == last)
				break;
		}
		pthread_cond_broadcast(&c->finished);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* ---- replay ---------------------------------------------------------------------- */

struct replay_run {
	struct committer *c;
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
	rc = store_record_results(run->c->st, results, n);
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
	for (size_t off = 0; off < n && rc == STORE_OK; off += GROUP_MAX_EVENTS) {
		size_t k = n - off < GROUP_MAX_EVENTS ? n - off : GROUP_MAX_EVENTS;

		rc = store_ingest_replay(run->c->st, events + off, k);
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

static void replay_once(struct committer *c, int *last_rc)
{
	struct replay_run run = {.c = c, .store_rc = STORE_OK};
	struct spool_report rep;
	int rc;

	rc = spool_replay(c->spool, replay_record_cb, &run, &rep);
	spool_log_report(c->spool, &rep);
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
	pthread_mutex_lock(&c->mu);
	log_info("spool: drained %s: %zu records, %zu events replayed into the store (%zu "
		 "already stored), %zu delivery results; %zu events in %zu records were spooled "
		 "by ingest during this outage",
		 spool_path(c->spool), run.records, run.events, run.duplicates, run.results,
		 c->spooled_events, c->spooled_records);
	c->spooling = 0;
	c->spooled_events = 0;
	c->spooled_records = 0;
	pthread_mutex_unlock(&c->mu);
	if ((run.events || run.results) && c->done_cb)
		c->done_cb(c->done_ctx);
}

static void *replay_main(void *arg)
{
	struct committer *c = arg;

	pthread_setname_np(pthread_self(), "spool-replay");
	int last_rc = STORE_OK;

	pthread_mutex_lock(&c->mu);
	while (!c->replay_stopping) {
		if (spool_size(c->spool) > 0) {
			pthread_mutex_unlock(&c->mu);
			replay_once(c, &last_rc);
			pthread_mutex_lock(&c->mu);
		}
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_nsec += REPLAY_INTERVAL_MS * 1000000L;
		until.tv_sec += until.tv_nsec / 1000000000L;
		until.tv_nsec %= 1000000000L;
		if (!c->replay_stopping)
			pthread_cond_timedwait(&c->replay_wake, &c->mu, &until);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

struct committer *committer_start(store *st, struct spool *spool, committer_done_cb done,
				  void *ctx)
{
	struct committer *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->st = st;
	c->spool = spool;
	c->done_cb = done;
	c->done_ctx = ctx;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->work, NULL);
	pthread_cond_init(&c->finished, NULL);
	pthread_cond_init(&c->replay_wake, NULL);
	if (pthread_create(&c->thread, NULL, committer_main, c)) {
		log_error("committer: cannot start thread");
		free(c);
		return NULL;
	}
	if (spool) {
		if (pthread_create(&c->replay_thread, NULL, replay_main, c)) {
			log_error("committer: cannot start the spool replay thread");
			committer_stop(c);
			return NULL;
		}
		c->replay_started = 1;
	}
	return c;
}

int committer_submit(struct committer *c, struct store_event_in *events, size_t n)
{
	struct pending p = {events, n, 0, STORE_ERROR, NULL};

	pthread_mutex_lock(&c->mu);
	if (c->stopping) {
		pthread_mutex_unlock(&c->mu);
		return STORE_UNAVAILABLE;
	}
	if (c->tail)
		c->tail->next = &p;
	else
		c->head = &p;
	c->tail = &p;
	pthread_cond_signal(&c->work);
	while (!p.done)
		pthread_cond_wait(&c->finished, &c->mu);
	pthread_mutex_unlock(&c->mu);
	return p.rc;
}

void committer_stop(struct committer *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	c->stopping = 1;
	pthread_cond_signal(&c->work);
	pthread_mutex_unlock(&c->mu);
	pthread_join(c->thread, NULL);
	if (c->replay_started) {
		pthread_mutex_lock(&c->mu);
		c->replay_stopping = 1;
		pthread_cond_signal(&c->replay_wake);
		pthread_mutex_unlock(&c->mu);
		pthread_join(c->replay_thread, NULL);
	}
	pthread_cond_destroy(&c->replay_wake);
	pthread_cond_destroy(&c->work);
	pthread_cond_destroy(&c->finished);
	pthread_mutex_destroy(&c->mu);
	free(c->group);
	free(c);
}
