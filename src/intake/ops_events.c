/* ops_events.c: outboxd's operational events into its own store (see ops_events.h). */
#include "intake/ops_events.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/metrics.h"
#include "core/ops_event.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

#define QUEUE_MAX 256   /* events waiting for the writer; more are dropped and counted */
#define RATES_MAX 512   /* (subscription, kind) windows tracked at once */
#define BATCH 32

struct queued {
	char type[64];
	char *payload;      /* JSON text, malloc'd */
	int64_t at_ms;
};

struct rate {
	char sub_id[UUID_STR_LEN];
	char kind[40];
	int64_t window_start_ms;
	int sent;
	int suppressed;
};

struct ops_events {
	struct writer *w;
	struct sub_registry *reg;
	int limit;
	int64_t window_ms;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int stopping;
	struct queued queue[QUEUE_MAX];
	size_t head, n;
	long dropped;
	struct rate rates[RATES_MAX];
	size_t n_rates;
};

/* Called with mu held. Takes payload (consumed). */
static void enqueue(struct ops_events *o, const char *kind, json_t *payload, int64_t now)
{
	char *text = json_dumps(payload, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(payload);
	if (!text || o->n == QUEUE_MAX) {
		metrics_ops_events(0, 0, 1);
		if (!o->dropped++)
			log_warn("operational events: queue full; outboxd.%s and later ones dropped "
				 "(the store is slow or down)", kind);
		free(text);
		return;
	}
	struct queued *q = &o->queue[(o->head + o->n++) % QUEUE_MAX];
	snprintf(q->type, sizeof(q->type), OPS_EVENT_PREFIX "%s", kind);
	q->payload = text;
	q->at_ms = now;
	pthread_cond_signal(&o->cv);
}

/* Called with mu held: a window that ended with events held back yields one summary. */
static void window_close(struct ops_events *o, struct rate *r, int64_t now)
{
	if (r->suppressed)
		enqueue(o, r->kind,
			json_pack("{s:b, s:s, s:i, s:I}", "summary", 1, "subscription_id",
				  r->sub_id, "suppressed", r->suppressed, "window_ms",
				  (json_int_t)o->window_ms), now);
	r->window_start_ms = now;
	r->sent = r->suppressed = 0;
}

void ops_events_emit(void *ctx, const char *kind, const char *subscription_id,
		     json_t *payload)
{
	struct ops_events *o = ctx;
	int64_t now = clock_now_ms();
	struct rate *r = NULL;

	pthread_mutex_lock(&o->mu);
	for (size_t i = 0; i < o->n_rates && !r; i++)
		if (strcmp(o->rates[i].sub_id, subscription_id) == 0 &&
		    strcmp(o->rates[i].kind, kind) == 0)
			r = &o->rates[i];
	if (!r && o->n_rates < RATES_MAX) {
		r = &o->rates[o->n_rates++];
		memset(r, 0, sizeof(*r));
		snprintf(r->sub_id, sizeof(r->sub_id), "%s", subscription_id);
		snprintf(r->kind, sizeof(r->kind), "%s", kind);
		r->window_start_ms = now;
	}
	if (r && now - r->window_start_ms >= o->window_ms)
		window_close(o, r, now);
	if (r && r->sent >= o->limit) {
		r->suppressed++;
		metrics_ops_events(0, 1, 0);
		json_decref(payload);
	} else {
		if (r)
			r->sent++;
		enqueue(o, kind, payload, now);
	}
	pthread_mutex_unlock(&o->mu);
}

/* Writes up to BATCH queued events; returns how many were taken off the queue (0 when
 * the store refused them: they stay for the next try). */
static size_t write_batch(struct ops_events *o)
{
	struct queued batch[BATCH];
	struct store_event_in evs[BATCH];
	char (*ids[BATCH])[UUID_STR_LEN];
	size_t caps[BATCH], n;

	pthread_mutex_lock(&o->mu);
	n = o->n < BATCH ? o->n : BATCH;
	for (size_t i = 0; i < n; i++)
		batch[i] = o->queue[(o->head + i) % QUEUE_MAX];
	pthread_mutex_unlock(&o->mu);
	if (!n)
		return 0;

	/* An event no subscription wants is not stored. */
	struct sub_set *set = sub_registry_acquire(o->reg);
	size_t k = 0;
	memset(evs, 0, sizeof(evs));
	for (size_t i = 0; i < n; i++) {
		ids[k] = NULL;
		caps[k] = 0;
		long m = sub_set_match(set, batch[i].type, NULL, batch[i].payload,
				       strlen(batch[i].payload), &ids[k], &caps[k]);
		if (m <= 0) {
			free(ids[k]);
			continue;
		}
		uuid_v7(evs[k].id);
		evs[k].event_type = batch[i].type;
		evs[k].source = "outboxd";
		evs[k].content_type = "application/json";
		evs[k].payload = batch[i].payload;
		evs[k].payload_len = strlen(batch[i].payload);
		evs[k].created_at = batch[i].at_ms;
		evs[k].subscription_ids = (const char (*)[UUID_STR_LEN])ids[k];
		evs[k].n_subscriptions = (size_t)m;
		k++;
	}
	sub_registry_release(o->reg, set);
	int rc = k ? writer_ingest(o->w, evs, k) : STORE_OK;
	for (size_t i = 0; i < k; i++)
		free(ids[i]);
	if (rc != STORE_OK) {
		log_warn("operational events: not stored yet (%s); trying again",
			 store_strerror(rc));
		return 0;
	}
	metrics_ops_events((long)k, 0, 0);
	pthread_mutex_lock(&o->mu);
	for (size_t i = 0; i < n; i++) {
		free(o->queue[o->head].payload);
		o->head = (o->head + 1) % QUEUE_MAX;
		o->n--;
	}
	pthread_mutex_unlock(&o->mu);
	return n;
}

static void *ops_main(void *arg)
{
	struct ops_events *o = arg;
	pthread_setname_np(pthread_self(), "ops-events");
	for (;;) {
		while (write_batch(o) == BATCH)
			;
		pthread_mutex_lock(&o->mu);
		/* windows that ended with events held back: their summaries */
		int64_t now = clock_now_ms();
		for (size_t i = 0; i < o->n_rates; i++)
			if (o->rates[i].suppressed && now - o->rates[i].window_start_ms >= o->window_ms)
				window_close(o, &o->rates[i], now);
		if (o->stopping) {
			pthread_mutex_unlock(&o->mu);
			break;
		}
		if (!o->n) {
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 1;
			pthread_cond_timedwait(&o->cv, &o->mu, &ts);
		}
		int more = o->n > 0;
		pthread_mutex_unlock(&o->mu);
		if (more && !write_batch(o))
			sleep(1); /* the store refused: not in a tight loop */
	}
	write_batch(o);
	return NULL;
}

void ops_events_set_limits(struct ops_events *o, int limit, int64_t window_ms)
{
	pthread_mutex_lock(&o->mu);
	o->limit = limit;
	o->window_ms = window_ms;
	pthread_mutex_unlock(&o->mu);
}

struct ops_events *ops_events_start(struct writer *w, struct sub_registry *reg, int limit,
				    int64_t window_ms)
{
	struct ops_events *o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	o->w = w;
	o->reg = reg;
	o->limit = limit;
	o->window_ms = window_ms;
	pthread_mutex_init(&o->mu, NULL);
	pthread_cond_init(&o->cv, NULL);
	if (pthread_create(&o->thread, NULL, ops_main, o)) {
		log_error("operational events: cannot start their thread");
		free(o);
		return NULL;
	}
	return o;
}

void ops_events_stop(struct ops_events *o)
{
	if (!o)
		return;
	pthread_mutex_lock(&o->mu);
	o->stopping = 1;
	pthread_cond_signal(&o->cv);
	pthread_mutex_unlock(&o->mu);
	pthread_join(o->thread, NULL);
	while (o->n) {
		free(o->queue[o->head].payload);
		o->head = (o->head + 1) % QUEUE_MAX;
		o->n--;
	}
	if (o->dropped)
		log_warn("operational events: %ld dropped in all (queue full)", o->dropped);
	pthread_cond_destroy(&o->cv);
	pthread_mutex_destroy(&o->mu);
	free(o);
}
