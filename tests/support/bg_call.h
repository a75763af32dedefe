/* bg_call.h: a call made on a thread of its own, so that a test can tell one that waits
 * (for a lock, a connection, a reader) from one that returns: start it, ask whether it
 * has returned within some seconds, join it. Header-only.
 *
 *	static int ping(void *arg) { return store_ping(arg); }
 *	struct bg_call c;
 *	bg_call_start(&c, ping, st);
 *	if (!bg_call_done(&c, 30)) ... it waited;
 *	bg_call_join(&c); c.rc is what ping returned */
#ifndef OUTBOXD_TESTS_BG_CALL_H
#define OUTBOXD_TESTS_BG_CALL_H

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

struct bg_call {
	int (*fn)(void *arg);
	void *arg;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done;
	int rc; /* fn's answer, once done */
};

static void *bg_call_main(void *p)
{
	struct bg_call *c = p;
	int rc = c->fn(c->arg);

	pthread_mutex_lock(&c->mu);
	c->rc = rc;
	c->done = 1;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* Starts fn(arg) on a new thread. 0, or -1 when no thread could be made. */
static inline int bg_call_start(struct bg_call *c, int (*fn)(void *arg), void *arg)
{
	memset(c, 0, sizeof(*c));
	c->fn = fn;
	c->arg = arg;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	return pthread_create(&c->thread, NULL, bg_call_main, c) == 0 ? 0 : -1;
}

/* 1 when the call has returned, waiting up to seconds for it (0: just looks). */
static inline int bg_call_done(struct bg_call *c, int seconds)
{
	struct timespec until;
	int done;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += seconds;
	pthread_mutex_lock(&c->mu);
	while (!c->done && pthread_cond_timedwait(&c->cv, &c->mu, &until) != ETIMEDOUT)
		;
	done = c->done;
	pthread_mutex_unlock(&c->mu);
	return done;
}

/* Waits for the call to return, however long, and frees what the call held. */
static inline void bg_call_join(struct bg_call *c)
{
	pthread_join(c->thread, NULL);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
}

#endif
