/* listen.c: the PostgreSQL backend's listener thread: its own connection LISTENs on
 * outboxd_work (new due work: wakes the dispatcher) and outboxd_subs (subscriptions
 * changed by any instance, each notification naming one: reload those), reconnecting
 * after an outage. Must not write. */
#include "store/postgres/pg_int.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

/* ---- the listener -------------------------------------------------------- */

/* Waits up to ms for the stop pipe; 1 when asked to stop. */
static int wait_stop(struct pg *pg, int fd, int ms)
{
	struct pollfd fds[2] = {{pg->stop_pipe[0], POLLIN, 0}, {fd, POLLIN, 0}};
	int n = fd >= 0 ? 2 : 1;

	while (poll(fds, (nfds_t)n, ms) < 0 && errno == EINTR)
		;
	return (fds[0].revents & (POLLIN | POLLHUP)) != 0;
}

/* The subscriptions a burst of notifications named: up to STORE_SUBS_CHANGED_MAX ids,
 * each once; all set when there were more, or one named none (an older outboxd's
 * trigger), so everything is read again. Neither: no subscription changed. */
struct subs_changed {
	int all;
	size_t n;
	char ids[STORE_SUBS_CHANGED_MAX][UUID_STR_LEN];
};

static void subs_changed_add(struct subs_changed *c, const char *id)
{
	size_t len = strlen(id);

	if (c->all)
		return;
	if (len == 0 || len >= UUID_STR_LEN || c->n == STORE_SUBS_CHANGED_MAX) {
		c->all = 1;
		return;
	}
	for (size_t i = 0; i < c->n; i++)
		if (strcmp(c->ids[i], id) == 0)
			return;
	memcpy(c->ids[c->n++], id, len + 1);
}

static void listener_wake(struct pg *pg, int work, const struct subs_changed *subs)
{
	/* Subscriptions first: work that arrives with a new subscription needs it. */
	if ((subs->all || subs->n) && pg->subs_cb)
		pg->subs_cb(pg->subs_ctx, (const char (*)[UUID_STR_LEN])subs->ids,
			    subs->all ? 0 : subs->n);
	if (work && pg->work_cb)
		pg->work_cb(pg->work_ctx);
}

/* LISTENs on its own connection and calls the callbacks once per burst of
 * notifications. When the connection fails it reconnects with the same backoff as the
 * other roles, and calls both once after every reconnect: work may have become due, and
 * subscriptions may have changed, while nobody listened. */
static void *listener_main(void *arg)
{
	struct pg *pg = arg;

	pthread_setname_np(pthread_self(), "pg-listener");
	PGconn *conn = NULL;
	unsigned epoch = 0;
	int backoff = 0;

	for (;;) {
		if (!conn) {
			PGresult *r;

			conn = pg_connect_dsn(pg->dsn);
			if (PQstatus(conn) == CONNECTION_OK) {
				r = PQexec(conn, "LISTEN " NOTIFY_CHANNEL "; LISTEN " SUBS_CHANNEL);
				if (PQresultStatus(r) != PGRES_COMMAND_OK) {
					PQfinish(conn);
					conn = NULL;
				}
				PQclear(r);
			} else {
				pg_note_down(pg, "listen", PQerrorMessage(conn));
				PQfinish(conn);
				conn = NULL;
			}
			if (!conn) {
				backoff = backoff ? backoff * 2 : BACKOFF_MIN_MS;
				if (backoff > BACKOFF_MAX_MS)
					backoff = BACKOFF_MAX_MS;
				if (wait_stop(pg, -1, backoff))
					break;
				continue;
			}
			pg_note_up(pg);
			epoch = atomic_load(&pg->epoch);
			backoff = 0;
			struct subs_changed everything = {.all = 1};
			listener_wake(pg, 1, &everything);
		}
		if (wait_stop(pg, PQsocket(conn), -1))
			break;
		if (!PQconsumeInput(conn) || PQstatus(conn) != CONNECTION_OK) {
			if (epoch == atomic_load(&pg->epoch))
				pg_note_down(pg, "listen", PQerrorMessage(conn));
			PQfinish(conn);
			conn = NULL;
			continue;
		}
		struct subs_changed subs;
		int work = 0;
		PGnotify *note;

		subs.all = 0;
		subs.n = 0;
		while ((note = PQnotifies(conn))) {
			if (strcmp(note->relname, SUBS_CHANNEL) == 0)
				subs_changed_add(&subs, note->extra ? note->extra : "");
			else
				work = 1;
			PQfreemem(note);
		}
		listener_wake(pg, work, &subs);
	}
	if (conn)
		PQfinish(conn);
	return NULL;
}

/* listen_mu held. */
void pg_listener_stop(struct pg *pg)
{
	char c = 's';

	if (!pg->listening)
		return;
	if (write(pg->stop_pipe[1], &c, 1) < 0)
		log_warn("postgres: cannot signal the listener: %s", strerror(errno));
	pthread_join(pg->listener, NULL);
	close(pg->stop_pipe[0]);
	close(pg->stop_pipe[1]);
	pg->listening = 0;
}

/* Sets the work callback (subs 0) or the subscriptions' (subs 1: subs_cb); the listener
 * runs while either is set. Restarting it is cheap and happens only when the daemon
 * wires or unwires itself. */
static void listener_set(store *st, int subs, void (*work_cb)(void *ctx),
			 store_subs_changed_cb subs_cb, void *ctx)
{
	struct pg *pg = pg_of(st);

	pthread_mutex_lock(&pg->listen_mu);
	pg_listener_stop(pg);
	if (subs) {
		pg->subs_cb = subs_cb;
		pg->subs_ctx = ctx;
	} else {
		pg->work_cb = work_cb;
		pg->work_ctx = ctx;
	}
	if (pg->work_cb || pg->subs_cb) {
		if (pipe2(pg->stop_pipe, O_CLOEXEC) != 0) {
			log_error("postgres: cannot start the listener: %s", strerror(errno));
		} else if (pthread_create(&pg->listener, NULL, listener_main, pg) != 0) {
			log_error("postgres: cannot start the listener thread");
			close(pg->stop_pipe[0]);
			close(pg->stop_pipe[1]);
		} else {
			pg->listening = 1;
		}
	}
	pthread_mutex_unlock(&pg->listen_mu);
}

void pg_on_work(store *st, void (*cb)(void *ctx), void *ctx)
{
	listener_set(st, 0, cb, NULL, ctx);
}

void pg_on_subscriptions_changed(store *st, store_subs_changed_cb cb, void *ctx)
{
	listener_set(st, 1, NULL, cb, ctx);
}
