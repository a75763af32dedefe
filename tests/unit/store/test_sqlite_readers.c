/* test_sqlite_readers.c: the SQLite backend's read connections (struct sq_reader in
 * store/sqlite/sqlite_int.h), seen from inside: while a long read holds a reader (here the
 * test holds it, as an operator's search over a large store would for seconds), /readyz's
 * ping, the stats and a listing go on over another one, opened then; with every reader
 * held a read waits, and goes on as soon as one is free; the writer's look for the next
 * due delivery never waits for a reader; a read past the store's read timeout is stopped. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bg_call.h"
#include "store_reads.h"
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

/* The calls the test makes on threads of their own (bg_call.h), to tell one that waits:
 * store_reads.h's, and the writer's look for the next due delivery. */
static int next_due(void *st)
{
	int64_t at = 0;
	return store_next_due(st, &at);
}

/* Runs a call that must not wait: it returns within STUCK_S, with STORE_OK. */
static void call_at_once(store *st, int (*fn)(void *), const char *name)
{
	struct bg_call c;

	assert_int_equal(bg_call_start(&c, fn, st), 0);
	if (!bg_call_done(&c, STUCK_S))
		fail_msg("%s waited for a reader while another one was free", name);
	bg_call_join(&c);
	assert_int_equal(c.rc, STORE_OK);
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
	call_at_once(f->st, read_ping, "the ping");
	assert_non_null(sq->readers[1].db); /* opened for it */
	call_at_once(f->st, read_stats, "the stats");
	call_at_once(f->st, read_list_some, "a listing");

	/* a second long read: the third reader serves */
	struct sq_reader *held2 = sq_read_lock(sq);
	assert_ptr_not_equal(held2, held);
	call_at_once(f->st, read_ping, "the ping");
	assert_non_null(sq->readers[2].db);
	sq_read_unlock(held2);
	sq_read_unlock(held);
}

static void test_with_every_reader_held_a_read_waits_for_one(void **state)
{
	struct fixture *f = *state;
	struct sq *sq = sq_of(f->st);
	struct sq_reader *held[SQ_READERS];
	struct bg_call c;

	for (int k = 0; k < SQ_READERS; k++)
		held[k] = sq_read_lock(sq);
	for (int k = 0; k < SQ_READERS; k++)
		assert_non_null(held[k]->db);
	assert_int_equal(bg_call_start(&c, read_ping, f->st), 0);
	/* It cannot answer without a reader (on a slow machine it may not have started
	 * within the 100 ms: either way it is not done). */
	usleep(100 * 1000);
	assert_int_equal(bg_call_done(&c, 0), 0);
	/* the writer's look for the next due delivery is on the writer's connection */
	call_at_once(f->st, next_due, "the writer's next-due query");
	for (int k = 0; k < SQ_READERS; k++)
		sq_read_unlock(held[k]);
	if (!bg_call_done(&c, STUCK_S))
		fail_msg("the ping did not go on once the readers were free");
	bg_call_join(&c);
	assert_int_equal(c.rc, STORE_OK);
}

/* A read past the store's read timeout is interrupted (SQLITE_INTERRUPT: STORE_TIMEOUT),
 * and the reader serves the next read. The query here never ends by itself. */
static int endless_count(void *arg)
{
	struct sq *sq = arg;
	struct sq_reader *rd = sq_read_lock(sq);
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(rd->db, "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL"
				    " SELECT x + 1 FROM c) SELECT count(*) FROM c", -1, &s, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(s);
	sqlite3_finalize(s);
	sq_read_unlock(rd);
	return sq_store_code(rc);
}

static void test_a_read_past_the_timeout_is_stopped(void **state)
{
	struct fixture *f = *state;
	struct bg_call c;

	store_set_read_timeout(f->st, 200);
	assert_int_equal(bg_call_start(&c, endless_count, sq_of(f->st)), 0);
	if (!bg_call_done(&c, STUCK_S))
		fail_msg("the read ran past its timeout");
	bg_call_join(&c);
	assert_int_equal(c.rc, STORE_TIMEOUT);
	call_at_once(f->st, read_list_some, "a listing after the timeout");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_reads_go_on_while_a_reader_is_held, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_with_every_reader_held_a_read_waits_for_one,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_read_past_the_timeout_is_stopped, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
