/* deadline.c: request deadlines of the API's connections (see deadline.h).
 *
 * A fixed table of places, one per connection, handed out from a free list under a
 * mutex; a place's deadline is an atomic the server's threads set without the mutex.
 * The checking thread shuts a connection down under the mutex, and deadline_forget takes
 * the mutex too, so a shutdown never reaches an fd that has been closed and reused. */
#include "api/deadline.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/metrics.h"
#include "util/clock.h"

#define CHECK_EVERY_MS 250

struct place {
	int fd;                          /* -1 when free */
	_Atomic int64_t deadline_ms;     /* monotonic; 0 while none runs */
};

struct deadlines {
	pthread_mutex_t mu;
	pthread_cond_t wake;
	pthread_t thread;
	int stopping;
	int64_t timeout_ms;
	int n;
	struct place *places;
	int *free_list;                  /* indexes of free places */
	int n_free;
};

static void *check_loop(void *arg)
{
	struct deadlines *d = arg;
	pthread_setname_np(pthread_self(), "api-deadline");
	pthread_mutex_lock(&d->mu);
	while (!d->stopping) {
		int64_t now = clock_mono_ms();
		for (int i = 0; i < d->n; i++) {
			struct place *p = &d->places[i];
			int64_t due = atomic_load_explicit(&p->deadline_ms, memory_order_relaxed);
			if (p->fd < 0 || !due || now < due)
				continue;
			atomic_store_explicit(&p->deadline_ms, 0, memory_order_relaxed);
			shutdown(p->fd, SHUT_RDWR);
			metrics_api_refused(METRICS_API_DEADLINE);
		}
		struct timespec until;
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += CHECK_EVERY_MS * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&d->wake, &d->mu, &until);
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

struct deadlines *deadlines_start(int max_connections, int64_t timeout_ms)
{
	struct deadlines *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->n = max_connections > 0 ? max_connections : 1;
	d->timeout_ms = timeout_ms;
	d->places = calloc((size_t)d->n, sizeof(*d->places));
	d->free_list = calloc((size_t)d->n, sizeof(*d->free_list));
	if (!d->places || !d->free_list)
		goto fail;
	for (int i = 0; i < d->n; i++) {
		d->places[i].fd = -1;
		d->free_list[d->n_free++] = d->n - 1 - i;
	}
	pthread_mutex_init(&d->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->wake, &ca);
	pthread_condattr_destroy(&ca);
	if (pthread_create(&d->thread, NULL, check_loop, d) != 0) {
		pthread_cond_destroy(&d->wake);
		pthread_mutex_destroy(&d->mu);
		goto fail;
	}
	return d;
fail:
	free(d->places);
	free(d->free_list);
	free(d);
	return NULL;
}

void deadlines_stop(struct deadlines *d)
{
	if (!d)
		return;
	pthread_mutex_lock(&d->mu);
	d->stopping = 1;
	pthread_cond_signal(&d->wake);
	pthread_mutex_unlock(&d->mu);
	pthread_join(d->thread, NULL);
	pthread_cond_destroy(&d->wake);
	pthread_mutex_destroy(&d->mu);
	free(d->places);
	free(d->free_list);
	free(d);
}

int deadline_watch(struct deadlines *d, int fd)
{
	int h = -1;
	pthread_mutex_lock(&d->mu);
	if (d->n_free) {
		h = d->free_list[--d->n_free];
		d->places[h].fd = fd;
		atomic_store(&d->places[h].deadline_ms, clock_mono_ms() + d->timeout_ms);
	}
	pthread_mutex_unlock(&d->mu);
	return h;
}

void deadline_pause(struct deadlines *d, int handle)
{
	if (handle >= 0 && handle < d->n)
		atomic_store(&d->places[handle].deadline_ms, 0);
}

void deadline_restart(struct deadlines *d, int handle)
{
	if (handle >= 0 && handle < d->n)
		atomic_store(&d->places[handle].deadline_ms, clock_mono_ms() + d->timeout_ms);
}

void deadline_forget(struct deadlines *d, int handle)
{
	if (handle < 0 || handle >= d->n)
		return;
	pthread_mutex_lock(&d->mu);
	d->places[handle].fd = -1;
	atomic_store(&d->places[handle].deadline_ms, 0);
	d->free_list[d->n_free++] = handle;
	pthread_mutex_unlock(&d->mu);
}
