/* test_writer_lanes.c: store/writer.c's lanes on a backend whose writes run side by side
 * (PostgreSQL, on a server the test starts itself: tests/support/harness_pg.h). The
 * store's call hook holds the results lane inside a result group; meanwhile an ingest
 * request is stored and a claim is answered, each on its own lane, and the held group is
 * written once let go. With claims and results on one lane, the claim would wait for the
 * group. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness_pg.h"
#include "store/store.h"
#include "store/writer.h"
#include "util/clock.h"
#include "util/uuid.h"

struct fixture {
	store *st;
	struct writer *w;
	char sub[UUID_STR_LEN];
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int held;                     /* a result group is held in the hook */
	int release;
};

static void ready_cb(void *ctx)
{
	(void)ctx;
}

/* Holds the first result group until released; lets every other call through. */
static void hold_results(void *ctx, unsigned op)
{
	struct fixture *f = ctx;
	if (op != STORE_FAULT_RESULTS)
		return;
	pthread_mutex_lock(&f->mu);
	if (!f->held) {
		f->held = 1;
		pthread_cond_broadcast(&f->cv);
		while (!f->release)
			pthread_cond_wait(&f->cv, &f->mu);
	}
	pthread_mutex_unlock(&f->mu);
}

static int setup(void **state)
{
	static int n;
	struct fixture *f = calloc(1, sizeof(*f));
	char name[32], dsn[256], err[256];
	struct pg_server *srv = harness_pg();

	if (!f || !srv)
		return -1;
	snprintf(name, sizeof(name), "writer_lanes_%d", ++n);
	if (pg_server_create_db(srv, name, dsn, sizeof(dsn)))
		return -1;
	if (store_open(dsn, "lanes-test", &f->st, err, sizeof(err)) != STORE_OK) {
		fprintf(stderr, "store_open: %s\n", err);
		return -1;
	}
	uuid_v7(f->sub);
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	if (!(f->w = writer_start(f->st, NULL)))
		return -1;
	writer_attach(f->w, ready_cb, f);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	writer_detach(f->w);
	writer_stop(f->w);
	store_close(f->st);
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->mu);
	free(f);
	return 0;
}

static void ingest(struct fixture *f, int n)
{
	struct store_event_in ev[4];
	for (int i = 0; i < n; i++) {
		memset(&ev[i], 0, sizeof(ev[i]));
		uuid_v7(ev[i].id);
		ev[i].event_type = "lanes.test";
		ev[i].source = "";
		ev[i].content_type = "application/json";
		ev[i].payload = "{}";
		ev[i].payload_len = 2;
		ev[i].created_at = clock_now_ms() - 1000;
		ev[i].subscription_ids = (const char (*)[UUID_STR_LEN])f->sub;
		ev[i].n_subscriptions = 1;
	}
	assert_int_equal(writer_ingest(f->w, ev, (size_t)n), STORE_OK);
}

/* Asks for a claim and waits up to wait_ms for its answer; *written gets what the
 * writer returned meanwhile. Returns the deliveries claimed, or -1 when unanswered. */
static long claim_within(struct fixture *f, size_t want, int64_t wait_ms,
			 struct store_claim **claims)
{
	int64_t deadline = clock_mono_ms() + wait_ms;
	writer_claim(f->w, want, 60000);
	while (clock_mono_ms() < deadline) {
		struct writer_answer a;
		writer_take(f->w, &a);
		if (a.claimed) {
			assert_int_equal(a.claim_rc, STORE_OK);
			*claims = a.claims;
			return (long)a.n_claims;
		}
		usleep(2000);
	}
	return -1;
}

static void test_claim_and_ingest_do_not_wait_for_results(void **state)
{
	struct fixture *f = *state;
	struct store_claim *first = NULL, *second = NULL;
	struct writer_result r;

	assert_int_equal(store_concurrent_writers(f->st), 3);
	ingest(f, 2);
	assert_int_equal(claim_within(f, 10, 10000, &first), 2);

	/* the result of the first, held inside its group */
	memset(&r, 0, sizeof(r));
	r.result.delivery_id = first[0].delivery_id;
	r.result.subscription_id = first[0].subscription_id;
	r.result.status = DELIVERY_PROCESSED;
	r.result.attempt_count = 1;
	r.result.processed_at = clock_now_ms();
	store_call_hook_set(f->st, hold_results, f);
	writer_results(f->w, &r, &r, 1);
	pthread_mutex_lock(&f->mu);
	while (!f->held)
		pthread_cond_wait(&f->cv, &f->mu);
	pthread_mutex_unlock(&f->mu);

	/* meanwhile: stored, and claimed */
	ingest(f, 3);
	assert_int_equal(claim_within(f, 10, 10000, &second), 3);

	/* let go: the group is written and comes back */
	pthread_mutex_lock(&f->mu);
	f->release = 1;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
	int64_t deadline = clock_mono_ms() + 10000;
	size_t written = 0;
	while (!written && clock_mono_ms() < deadline) {
		struct writer_answer a;
		writer_take(f->w, &a);
		written = a.n_written;
		if (!written)
			usleep(2000);
	}
	assert_int_equal(written, 1);
	store_call_hook_set(f->st, NULL, NULL);
	struct store_delivery d;
	assert_int_equal(store_delivery_get(f->st, first[0].delivery_id, &d), STORE_OK);
	assert_int_equal(d.status, DELIVERY_PROCESSED);
	store_delivery_free(&d);
	store_claims_free(first, 2);
	store_claims_free(second, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_claim_and_ingest_do_not_wait_for_results,
						setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
