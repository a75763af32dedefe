/* committer.c: one thread turning many ingest requests into one transaction. */
#include "intake/committer.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

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
};

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
	if (rc == STORE_OK && c->done_cb)
		c->done_cb(c->done_ctx);
}

static void *committer_main(void *arg)
{
	struct committer *c = arg;

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

struct committer *committer_start(store *st, committer_done_cb done, void *ctx)
{
	struct committer *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->st = st;
	c->done_cb = done;
	c->done_ctx = ctx;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->work, NULL);
	pthread_cond_init(&c->finished, NULL);
	if (pthread_create(&c->thread, NULL, committer_main, c)) {
		log_error("committer: cannot start thread");
		free(c);
		return NULL;
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
	pthread_cond_destroy(&c->work);
	pthread_cond_destroy(&c->finished);
	pthread_mutex_destroy(&c->mu);
	free(c->group);
	free(c);
}
