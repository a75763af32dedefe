/* test_sqlite_readers.c: the SQLite backend's read connections (struct sq_reader in
 * store/sqlite/sqlite_int.h), seen from inside: while a long read holds a reader (here the
 * test holds it, as an operator's search over a large store would for seconds), /readyz's
 * ping, the stats and a listing go on over another one, opened then; with every reader
 * held a read waits, and goes on as soon as one is free; the writer's look for the next
 * due delivery never waits for a reader. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "store/sqlite/sqlite_int.h"
#include "store/store.h"
#include "util/clock.h"

/* How long a call that must not wait is given before the test calls it stuck: far more
 * than it takes on any machine, so only a call that waits for a held reader exceeds it. */
#define STUCK_S 30

struct fixture {
	char dir[64];
	store *st;
};

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char dsn[128], err[256];

	snprintf(f->dir, sizeof(f->dir), "/tmp/outboxd-readers-test-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(dsn, sizeof(dsn), "sqlite:%s/outboxd.db", f->dir);
	if (store_open(dsn, "readers-test", &f->st, err, sizeof(err)) != STORE_OK) {
		fprintf(stderr, "store_open: %s\n", err);
		return -1;
	}
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	store_close(f->st);
	nftw(f->dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

/* A store call on a thread of its own, so the test can tell one that waits. */
enum call { CALL_PING, CALL_STATS, CALL_LIST, CALL_NEXT_DUE };

struct pending_call {
	store *st;
	enum call what;
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int done;
	int rc;
};

static void *call_main(void *arg)
{
	struct pending_call *c = arg;
	int rc;

	if (c->what == CALL_PING) {
		rc = store_ping(c->st);
	} else if (c->what == CALL_STATS) {
		struct store_stats s;
		memset(&s, 0, sizeof(s));
		rc = store_stats(c->st, clock_now_ms(), 60000, &s);
		if (rc == STORE_OK)
			store_stats_free(&s);
	} else if (c->what == CALL_LIST) {
		struct delivery_filter f;
		struct store_delivery *items = NULL;
		size_t n = 0;
		char *cursor = NULL;
		memset(&f, 0, sizeof(f));
		f.limit = 10;
		rc = store_deliveries_list(c->st, &f, &items, &n, &cursor);
		store_deliveries_free(items, n);
		free(cursor);
	} else {
		int64_t at = 0;
		rc = store_next_due(c->st, &at);
	}
	pthread_mutex_lock(&c->mu);
	c->rc = rc;
	c->done = 1;
	pthread_cond_signal(&c->cv);
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

static void call_start(struct pending_call *c, store *st, enum call what)
{
	memset(c, 0, sizeof(*c));
	c->st = st;
	c->what = what;
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->cv, NULL);
	assert_int_equal(pthread_create(&c->thread, NULL, call_main, c), 0);
}

/* 1 when the call returned within seconds. */
static int call_done_within(struct pending_call *c, int seconds)
{
	struct timespec until;
	int done;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += seconds;
	pthread_mutex_lock(&c->mu);
	while (!c->done)
		if (pthread_cond_timedwait(&c->cv, &c->mu, &until) == ETIMEDOUT)
			break;
	done = c->done;
	pthread_mutex_unlock(&c->mu);
	return done;
}

/* Waits for the call (it must end: the test released what it waited for) and checks
 * its answer. */
static void call_finish(struct pending_call *c)
{
	pthread_join(c->thread, NULL);
	assert_int_equal(c->done, 1);
	assert_int_equal(c->rc, STORE_OK);
	pthread_cond_destroy(&c->cv);
	pthread_mutex_destroy(&c->mu);
}

/* Runs a call that must not wait: it returns within STUCK_S, with STORE_OK. */
static void call_at_once(store *st, enum call what, const char *name)
{
	struct pending_call c;

	call_start(&c, st, what);
	if (!call_done_within(&c, STUCK_S))
		fail_msg("%s waited for a reader while another one was free", name);
	call_finish(&c);
}

static void test_reads_go_on_while_a_reader_is_held(void **state)
{
	struct fixture *f = *state;
	struct sq *sq = sq_of(f->st);

	/* only the first reader is open until reads overlap */
	assert_non_null(sq->readers[0].db);
	assert_null(sq->readers[1].db);

	struct sq_reader *held = sq_read_lock(sq);
	assert_ptr_equal(held, &sq->readers[0]);
	call_at_once(f->st, CALL_PING, "the ping");
	assert_non_null(sq->readers[1].db); /* opened for it */
	call_at_once(f->st, CALL_STATS, "the stats");
	call_at_once(f->st, CALL_LIST, "a listing");

	/* a second long read: the third reader serves */
	struct sq_reader *held2 = sq_read_lock(sq);
	assert_ptr_not_equal(held2, held);
	call_at_once(f->st, CALL_PING, "the ping");
	assert_non_null(sq->readers[2].db);
	sq_read_unlock(held2);
	sq_read_unlock(held);
}

static void test_with_every_reader_held_a_read_waits_for_one(void **state)
{
	struct fixture *f = *state;
	struct sq *sq = sq_of(f->st);
	struct sq_reader *held[SQ_READERS];
	struct pending_call c;

	for (int k = 0; k < SQ_READERS; k++)
		held[k] = sq_read_lock(sq);
	for (int k = 0; k < SQ_READERS; k++)
		assert_non_null(held[k]->db);
	call_start(&c, f->st, CALL_PING);
	/* It cannot answer without a reader (on a slow machine it may not have started
	 * within the 100 ms: either way it is not done). */
	usleep(100 * 1000);
	assert_int_equal(call_done_within(&c, 0), 0);
	/* the writer's look for the next due delivery is on the writer's connection */
	call_at_once(f->st, CALL_NEXT_DUE, "the writer's next-due query");
	for (int k = 0; k < SQ_READERS; k++)
		sq_read_unlock(held[k]);
	if (!call_done_within(&c, STUCK_S))
		fail_msg("the ping did not go on once the readers were free");
	call_finish(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reads_go_on_while_a_reader_is_held, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_with_every_reader_held_a_read_waits_for_one,
						setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
