/* test_writer.c: store/writer.c on a real SQLite store in a temporary directory, with
 * no daemon and no sockets: concurrent ingest callers all get their events stored and
 * their ids back; a claim asked through the writer comes back through writer_take; the
 * results handed over are written (PROCESSED, FAILED with a retry, dead) and returned
 * for recycling in order; writer_detach hands back what was never taken; a writer
 * stopped and started again on the same store stores again. Outages come from the
 * store's fault injection (store_fault_set): refused result groups are kept and
 * retried, a refused claim is answered with the error, a refused ingest group is
 * acknowledged from the spool and replayed into the store (but one that must not be
 * spooled, writer_ingest_stored, hears the refusal). A producer waiting for its
 * acknowledgement goes first: the store's call hook holds the writer inside a result
 * group and then a claim while ingest requests queue, and sees them stored before the
 * claim and the results queued with them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "store/spool.h"
#include "store/store.h"
#include "store/writer.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

#define THREADS 8
#define PER_THREAD 50

struct fixture {
	char dir[64];
	store *st;
	struct writer *w;
	char sub[UUID_STR_LEN];
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int ready_calls;
	int commits;
};

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void ready_cb(void *ctx)
{
	struct fixture *f = ctx;
	pthread_mutex_lock(&f->mu);
	f->ready_calls++;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->mu);
}

static void commit_cb(void *ctx)
{
	struct fixture *f = ctx;
	pthread_mutex_lock(&f->mu);
	f->commits++;
	pthread_mutex_unlock(&f->mu);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char dsn[128], err[256];

	snprintf(f->dir, sizeof(f->dir), "/tmp/outboxd-writer-test-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(dsn, sizeof(dsn), "sqlite:%s/outboxd.db", f->dir);
	if (store_open(dsn, "writer-test", &f->st, err, sizeof(err)) != STORE_OK) {
		fprintf(stderr, "store_open: %s\n", err);
		return -1;
	}
	uuid_v7(f->sub);
	pthread_mutex_init(&f->mu, NULL);
	pthread_cond_init(&f->cv, NULL);
	f->w = writer_start(f->st, NULL);
	if (!f->w)
		return -1;
	writer_on_commit(f->w, commit_cb, f);
	writer_attach(f->w, ready_cb, f);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	if (f->w) {
		writer_detach(f->w);
		writer_stop(f->w);
	}
	store_close(f->st);
	nftw(f->dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

static void event_for(struct fixture *f, struct store_event_in *ev, const char *type)
{
	memset(ev, 0, sizeof(*ev));
	uuid_v7(ev->id);
	ev->event_type = type;
	ev->source = "";
	ev->content_type = "application/json";
	ev->payload = "{}";
	ev->payload_len = 2;
	ev->created_at = clock_now_ms() - 1000;
	ev->subscription_ids = (const char (*)[UUID_STR_LEN])f->sub;
	ev->n_subscriptions = 1;
}

struct ingester {
	struct fixture *f;
	int rc[PER_THREAD];
	struct store_event_in ev[PER_THREAD];
};

static void *ingest_main(void *arg)
{
	struct ingester *in = arg;
	for (int i = 0; i < PER_THREAD; i++) {
		event_for(in->f, &in->ev[i], "writer.test");
		in->rc[i] = writer_ingest(in->f->w, &in->ev[i], 1);
	}
	return NULL;
}

/* Takes from the writer until want claims arrived (or 5 s). */
static size_t take_claims(struct fixture *f, size_t want, struct store_claim **all)
{
	int64_t deadline = clock_mono_ms() + 5000;
	size_t got = 0;

	*all = NULL;
	writer_claim(f->w, want, 60000);
	while (clock_mono_ms() < deadline) {
		struct writer_answer a;
		writer_take(f->w, &a);
		assert_null(a.written);
		if (a.claimed) {
			assert_int_equal(a.claim_rc, STORE_OK);
			*all = a.claims;
			got = a.n_claims;
			break;
		}
		usleep(2000);
	}
	return got;
}

static void test_concurrent_ingest_is_stored(void **state)
{
	struct fixture *f = *state;
	static struct ingester in[THREADS];
	pthread_t th[THREADS];

	for (int i = 0; i < THREADS; i++) {
		in[i].f = f;
		assert_int_equal(pthread_create(&th[i], NULL, ingest_main, &in[i]), 0);
	}
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < THREADS; i++) {
		for (int k = 0; k < PER_THREAD; k++) {
			struct store_event ev;
			assert_int_equal(in[i].rc[k], STORE_OK);
			assert_int_equal(in[i].ev[k].duplicate, 0);
			assert_int_equal(store_event_get(f->st, in[i].ev[k].id, &ev), STORE_OK);
			store_event_free(&ev);
		}
	}
	/* every commit woke the dispatcher's hook; groups may hold several callers */
	assert_true(f->commits >= 1 && f->commits <= THREADS * PER_THREAD);

	struct store_claim *claims;
	size_t n = take_claims(f, THREADS * PER_THREAD + 10, &claims);
	assert_int_equal(n, THREADS * PER_THREAD);
	store_claims_free(claims, n);
}

/* writer_ingest_start: each request is called back once with its result, and its events
 * are stored by then. */
struct started {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int calls[64];
	int rc[64];
	int done;
};

struct started_one {
	struct started *st;
	int i;
};

static void started_done(void *ctx, int rc)
{
	struct started_one *one = ctx;
	pthread_mutex_lock(&one->st->mu);
	one->st->calls[one->i]++;
	one->st->rc[one->i] = rc;
	one->st->done++;
	pthread_cond_broadcast(&one->st->cv);
	pthread_mutex_unlock(&one->st->mu);
}

static void test_ingest_started_is_called_back(void **state)
{
	struct fixture *f = *state;
	static struct started st;
	static struct started_one one[64];
	static struct store_event_in ev[64];

	memset(&st, 0, sizeof(st));
	pthread_mutex_init(&st.mu, NULL);
	pthread_cond_init(&st.cv, NULL);
	for (int i = 0; i < 64; i++) {
		one[i] = (struct started_one){&st, i};
		event_for(f, &ev[i], "writer.started");
		writer_ingest_start(f->w, &ev[i], 1, started_done, &one[i]);
	}
	pthread_mutex_lock(&st.mu);
	while (st.done < 64)
		pthread_cond_wait(&st.cv, &st.mu);
	pthread_mutex_unlock(&st.mu);
	for (int i = 0; i < 64; i++) {
		struct store_event got;
		assert_int_equal(st.calls[i], 1);
		assert_int_equal(st.rc[i], STORE_OK);
		assert_int_equal(store_event_get(f->st, ev[i].id, &got), STORE_OK);
		store_event_free(&got);
	}
	pthread_mutex_destroy(&st.mu);
	pthread_cond_destroy(&st.cv);
}

static void test_results_are_written_and_returned(void **state)
{
	struct fixture *f = *state;
	struct store_event_in ev[3];
	struct writer_result r[3];
	struct store_claim *claims;
	const char *want_status[3] = {"PROCESSED", "FAILED", "FAILED"};

	double ingests = harness_metric("outboxd_store_ingest_seconds_count");
	double claims_before = harness_metric("outboxd_store_claim_seconds_count");
	double groups = harness_metric("outboxd_store_results_seconds_count");
	double queued = harness_metric("outboxd_ingest_queued_seconds_count");
	double answered = harness_metric("outboxd_ingest_answered_seconds_count");
	assert_true(ingests >= 0 && claims_before >= 0 && groups >= 0);
	assert_true(queued >= 0 && answered >= 0);

	for (int i = 0; i < 3; i++)
		event_for(f, &ev[i], "writer.result");
	assert_int_equal(writer_ingest(f->w, ev, 3), STORE_OK);
	size_t n = take_claims(f, 10, &claims);
	assert_int_equal(n, 3);
	/* the store calls are timed: one ingest group, at least one claim */
	assert_true(harness_metric("outboxd_store_ingest_seconds_count") >= ingests + 1);
	assert_true(harness_metric("outboxd_store_claim_seconds_count") >= claims_before + 1);
	assert_true(harness_metric("outboxd_store_ingest_seconds_bucket{le=\"+Inf\"}") ==
		    harness_metric("outboxd_store_ingest_seconds_count"));
	/* and the request's time in the writer: taken into a group, then answered */
	assert_true(harness_metric("outboxd_ingest_queued_seconds_count") == queued + 1);
	assert_true(harness_metric("outboxd_ingest_answered_seconds_count") == answered + 1);
	assert_true(harness_metric("outboxd_ingest_answered_seconds_sum") >=
		    harness_metric("outboxd_ingest_queued_seconds_sum"));

	int64_t now = clock_now_ms();
	memset(r, 0, sizeof(r));
	for (int i = 0; i < 3; i++) {
		r[i].result.delivery_id = claims[i].delivery_id;
		r[i].result.attempt_count = 1;
		r[i].next = i < 2 ? &r[i + 1] : NULL;
	}
	r[0].result.status = DELIVERY_PROCESSED;
	r[0].result.processed_at = now;
	r[1].result.status = DELIVERY_FAILED;
	r[1].result.next_attempt_at = now + 60000; /* a scheduled retry */
	r[1].result.last_code = 503;
	r[1].result.last_message = "Service Unavailable";
	r[2].result.status = DELIVERY_FAILED;        /* no next attempt: dead */
	r[2].result.last_code = 410;
	r[2].result.last_message = "Gone";
	writer_results(f->w, &r[0], &r[2], 3);

	/* They come back once written, in order, all three. */
	int64_t deadline = clock_mono_ms() + 5000;
	struct writer_result *back[3];
	size_t nback = 0;
	while (nback < 3 && clock_mono_ms() < deadline) {
		struct writer_answer a;
		writer_take(f->w, &a);
		for (struct writer_result *x = a.written; x; x = x->next)
			back[nback++] = x;
		if (nback < 3)
			usleep(2000);
	}
	assert_int_equal(nback, 3);
	for (int i = 0; i < 3; i++)
		assert_ptr_equal(back[i], &r[i]);
	assert_true(harness_metric("outboxd_store_results_seconds_count") >= groups + 1);

	for (int i = 0; i < 3; i++) {
		struct store_delivery d;
		assert_int_equal(store_delivery_get(f->st, claims[i].delivery_id, &d), STORE_OK);
		assert_string_equal(delivery_status_name(d.status), want_status[i]);
		assert_int_equal(d.attempt_count, 1);
		if (i == 1)
			assert_int_equal(d.next_attempt_at, now + 60000);
		if (i == 2)
			assert_int_equal(d.next_attempt_at, 0);
		store_delivery_free(&d);
	}
	pthread_mutex_lock(&f->mu);
	assert_true(f->ready_calls >= 2); /* the claim's answer and the written group */
	pthread_mutex_unlock(&f->mu);
	store_claims_free(claims, n);
}

static void test_detach_returns_what_was_not_taken(void **state)
{
	struct fixture *f = *state;
	struct store_event_in ev;
	struct writer_result r;
	struct store_claim *claims;

	event_for(f, &ev, "writer.detach");
	assert_int_equal(writer_ingest(f->w, &ev, 1), STORE_OK);
	assert_int_equal(take_claims(f, 1, &claims), 1);
	memset(&r, 0, sizeof(r));
	r.result.delivery_id = claims[0].delivery_id;
	r.result.status = DELIVERY_PROCESSED;
	r.result.attempt_count = 1;
	r.result.processed_at = clock_now_ms();
	writer_results(f->w, &r, &r, 1);
	/* Never taken: detach hands it back (written or not), exactly once. */
	struct writer_result *l = writer_detach(f->w);
	assert_ptr_equal(l, &r);
	assert_null(l->next);
	assert_int_equal(writer_unwritten(f->w), 0);
	store_claims_free(claims, 1);
}

/* Takes until the results come back written (or 10 s); returns how many did. */
static size_t take_written(struct fixture *f, size_t want, int *saw_down)
{
	int64_t deadline = clock_mono_ms() + 10000;
	size_t got = 0;

	while (got < want && clock_mono_ms() < deadline) {
		struct writer_answer a;
		writer_take(f->w, &a);
		if (a.down)
			*saw_down = 1;
		for (struct writer_result *x = a.written; x; x = x->next)
			got++;
		if (got < want)
			usleep(5000);
	}
	return got;
}

static void test_refused_results_are_kept_and_retried(void **state)
{
	struct fixture *f = *state;
	struct store_event_in ev;
	struct writer_result r;
	struct store_claim *claims;
	struct store_delivery d;
	int saw_down = 0;

	event_for(f, &ev, "writer.retry");
	assert_int_equal(writer_ingest(f->w, &ev, 1), STORE_OK);
	assert_int_equal(take_claims(f, 1, &claims), 1);
	memset(&r, 0, sizeof(r));
	r.result.delivery_id = claims[0].delivery_id;
	r.result.status = DELIVERY_PROCESSED;
	r.result.attempt_count = 1;
	r.result.processed_at = clock_now_ms();

	/* The store refuses the next two result groups (no spool): the writer keeps the
	 * result, says the store is down, and writes it when the store takes it. */
	store_fault_set(f->st, STORE_FAULT_RESULTS, STORE_UNAVAILABLE, 2);
	writer_results(f->w, &r, &r, 1);
	assert_int_equal(take_written(f, 1, &saw_down), 1);
	assert_true(saw_down);
	assert_int_equal(store_delivery_get(f->st, claims[0].delivery_id, &d), STORE_OK);
	assert_int_equal(d.status, DELIVERY_PROCESSED);
	store_delivery_free(&d);
	store_claims_free(claims, 1);
}

static void test_refused_claim_is_answered(void **state)
{
	struct fixture *f = *state;
	struct store_event_in ev;
	struct writer_answer a;
	int64_t deadline = clock_mono_ms() + 5000;

	event_for(f, &ev, "writer.claim");
	assert_int_equal(writer_ingest(f->w, &ev, 1), STORE_OK);
	store_fault_set(f->st, STORE_FAULT_CLAIM, STORE_UNAVAILABLE, 1);
	writer_claim(f->w, 10, 60000);
	do {
		usleep(2000);
		writer_take(f->w, &a);
	} while (!a.claimed && clock_mono_ms() < deadline);
	assert_true(a.claimed);
	assert_int_equal(a.claim_rc, STORE_UNAVAILABLE);
	assert_int_equal(a.n_claims, 0);
	assert_true(a.down);
	/* the next claim gets the delivery */
	struct store_claim *claims;
	assert_int_equal(take_claims(f, 10, &claims), 1);
	store_claims_free(claims, 1);
}

static void test_ingest_goes_to_the_spool_and_back(void **state)
{
	struct fixture *f = *state;
	struct spool_report rep;
	struct spool *sp;
	struct store_event_in ev;
	struct store_event got;
	char path[128];

	/* a writer with a spool instead of the fixture's */
	writer_detach(f->w);
	writer_stop(f->w);
	snprintf(path, sizeof(path), "%s/ingest.spool", f->dir);
	assert_int_equal(spool_open(path, &sp, &rep), SPOOL_OK);
	f->w = writer_start(f->st, sp);
	assert_non_null(f->w);

	/* The store refuses ingest groups: acknowledged from the spool (durable there); the
	 * spool thread's replays are refused too while the fault holds (so what follows does
	 * not race it), and once it clears the event reaches the store. */
	store_fault_set(f->st, STORE_FAULT_INGEST, STORE_UNAVAILABLE, 1000000);
	/* a caller whose source keeps its events (the Kafka intake) is never spooled: it
	 * hears the store's answer and keeps them */
	event_for(f, &ev, "writer.kept");
	assert_int_equal(writer_ingest_stored(f->w, &ev, 1), STORE_UNAVAILABLE);
	assert_int_equal(spool_size(sp), 0);
	event_for(f, &ev, "writer.spooled");
	assert_int_equal(writer_ingest(f->w, &ev, 1), STORE_OK);
	assert_true(spool_size(sp) > 0);
	assert_int_equal(store_event_get(f->st, ev.id, &got), STORE_NOT_FOUND);
	store_fault_set(f->st, STORE_FAULT_INGEST, STORE_OK, 0);
	int64_t deadline = clock_mono_ms() + 10000;
	int rc;
	while ((rc = store_event_get(f->st, ev.id, &got)) == STORE_NOT_FOUND &&
	       clock_mono_ms() < deadline)
		usleep(20000);
	assert_int_equal(rc, STORE_OK);
	assert_string_equal(got.event_type, "writer.spooled");
	store_event_free(&got);
	while (spool_size(sp) > 0 && clock_mono_ms() < deadline)
		usleep(20000);
	assert_int_equal(spool_size(sp), 0);
	writer_stop(f->w);
	f->w = NULL;
	spool_close(sp);
}

static void test_a_new_writer_on_the_same_store_stores(void **state)
{
	struct fixture *f = *state;
	struct store_event_in ev;

	writer_detach(f->w);
	writer_stop(f->w);
	f->w = writer_start(f->st, NULL);
	assert_non_null(f->w);
	event_for(f, &ev, "writer.restart");
	assert_int_equal(writer_ingest(f->w, &ev, 1), STORE_OK);
	struct store_event got;
	assert_int_equal(store_event_get(f->st, ev.id, &got), STORE_OK);
	store_event_free(&got);
}

/* The order test: the store's call hook records each group write and can hold the
 * writer inside one (the first call of op hold_op) until the test lets it go. */
struct order {
	struct fixture *f;
	unsigned ops[16];
	int n_ops;
	unsigned hold_op;
	int holds;                    /* calls held so far */
	int release;
};

static void order_hook(void *ctx, unsigned op)
{
	struct order *o = ctx;
	pthread_mutex_lock(&o->f->mu);
	if (o->n_ops < 16)
		o->ops[o->n_ops++] = op;

	if (op == o->hold_op) {
		o->hold_op = 0;
		o->holds++;
		o->release = 0;
		pthread_cond_broadcast(&o->f->cv);
		while (!o->release)
			pthread_cond_wait(&o->f->cv, &o->f->mu);
	}
	pthread_mutex_unlock(&o->f->mu);
}

/* Waits until the writer is held for the n-th time. */
static void order_wait_held(struct order *o, int n)
{
	pthread_mutex_lock(&o->f->mu);
	while (o->holds < n)
		pthread_cond_wait(&o->f->cv, &o->f->mu);
	pthread_mutex_unlock(&o->f->mu);
}

/* Lets the held call go on; the next call of op (0: none) is held in turn. */
static void order_release(struct order *o, unsigned next_hold)
{
	pthread_mutex_lock(&o->f->mu);
	o->hold_op = next_hold;
	o->release = 1;
	pthread_cond_broadcast(&o->f->cv);
	pthread_mutex_unlock(&o->f->mu);
}

struct one_ingest {
	struct fixture *f;
	struct store_event_in ev;
	int rc;
};

static void *one_ingest_main(void *arg)
{
	struct one_ingest *in = arg;
	in->rc = writer_ingest(in->f->w, &in->ev, 1);
	return NULL;
}

static void ingest_queued(struct fixture *f, struct one_ingest *in, pthread_t *t)
{
	in->f = f;
	event_for(f, &in->ev, "writer.order");
	assert_int_equal(pthread_create(t, NULL, one_ingest_main, in), 0);
	int64_t deadline = clock_mono_ms() + 10000;
	while (writer_ingest_waiting(f->w) < 1 && clock_mono_ms() < deadline)
		usleep(1000);
	assert_int_equal(writer_ingest_waiting(f->w), 1);
}

/* A producer waiting for its acknowledgement goes first: an ingest request queued while
 * the writer is busy is stored before the claim and the results that were queued with
 * it, and one queued during the claim before those results (one write lock: SQLite). */
static void test_ingest_goes_before_claims_and_results(void **state)
{
	struct fixture *f = *state;
	struct store_event_in ev[2];
	struct store_claim *claims;
	struct writer_result r[2];
	struct order o = {.f = f};
	struct one_ingest a, b;
	pthread_t ta, tb;

	assert_int_equal(store_concurrent_writers(f->st), 1);
	for (int i = 0; i < 2; i++)
		event_for(f, &ev[i], "writer.order");
	assert_int_equal(writer_ingest(f->w, ev, 2), STORE_OK);
	assert_int_equal(take_claims(f, 10, &claims), 2);
	memset(r, 0, sizeof(r));
	for (int i = 0; i < 2; i++) {
		r[i].result.delivery_id = claims[i].delivery_id;
		r[i].result.status = DELIVERY_PROCESSED;
		r[i].result.attempt_count = 1;
		r[i].result.processed_at = clock_now_ms();
	}

	/* the writer held inside a result group; meanwhile more results, a claim and an
	 * ingest request queue up */
	o.hold_op = STORE_FAULT_RESULTS;
	store_call_hook_set(f->st, order_hook, &o);
	writer_results(f->w, &r[0], &r[0], 1);
	order_wait_held(&o, 1);
	writer_results(f->w, &r[1], &r[1], 1);
	writer_claim(f->w, 10, 60000);
	ingest_queued(f, &a, &ta);
	/* the next cycle: held inside its claim, another ingest request queues up */
	order_release(&o, STORE_FAULT_CLAIM);
	order_wait_held(&o, 2);
	ingest_queued(f, &b, &tb);
	order_release(&o, 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	assert_int_equal(a.rc, STORE_OK);
	assert_int_equal(b.rc, STORE_OK);
	/* both result groups written, and the claim answered */
	size_t written = 0;
	int claimed = 0;
	int64_t deadline = clock_mono_ms() + 10000;
	while ((written < 2 || !claimed) && clock_mono_ms() < deadline) {
		struct writer_answer ans;
		writer_take(f->w, &ans);
		for (struct writer_result *x = ans.written; x; x = x->next)
			written++;
		if (ans.claimed) {
			claimed = 1;
			/* a's delivery was stored before the claim, b's after it */
			assert_int_equal(ans.n_claims, 1);
			store_claims_free(ans.claims, ans.n_claims);
		}
		usleep(2000);
	}
	assert_int_equal(written, 2);
	assert_true(claimed);
	store_call_hook_set(f->st, NULL, NULL);

	const unsigned want[] = {STORE_FAULT_RESULTS, STORE_FAULT_INGEST, STORE_FAULT_CLAIM,
				 STORE_FAULT_INGEST, STORE_FAULT_RESULTS};
	assert_int_equal(o.n_ops, 5);
	for (int i = 0; i < 5; i++)
		assert_int_equal(o.ops[i], want[i]);
	store_claims_free(claims, 2);
}

int main(void)
{
	log_set_level(LOG_WARN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_concurrent_ingest_is_stored, setup, teardown),
		cmocka_unit_test_setup_teardown(test_results_are_written_and_returned, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_detach_returns_what_was_not_taken, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_a_new_writer_on_the_same_store_stores, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_results_are_kept_and_retried, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_refused_claim_is_answered, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ingest_started_is_called_back, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_ingest_goes_to_the_spool_and_back, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_ingest_goes_before_claims_and_results, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
