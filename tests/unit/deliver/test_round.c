/* test_round.c: one delivery's round in the dispatcher (deliver/round.c), driven by hand
 * without the loop's thread, a store or a socket: claims go to round_start through
 * dispatcher_claims_start, attempts end as the fake sink's script says
 * (tests/support/fake_sink.h), staggers pass at once (rounds_run_timers with a far time),
 * and each finished round's result is read off the done list, where the writer would take
 * it. What is checked is what the writer would store and what the subscription's state,
 * operational events and disable callback show: an immediate round ending in success, in
 * a scheduled retry, in the DLQ; the breaker opening after max_errors failed rounds, a
 * refused round's delay action and its DLQ, the half-open probe; disable_after and a
 * recovery; a lost lease; per-key ordering's release of a key; and the allocation budget
 * of successful rounds (none per delivery). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/metrics.h"
#include "core/subscriptions.h"
#include "deliver/dispatcher_int.h"
#include "alloc_count.h"
#include "fake_sink.h"
#include "util/clock.h"

#define SUB_ID "01900000-0000-7000-8000-000000000001"
#define KINDS_MAX 32

/* What a finished round's result said (copied: the round is recycled at once). */
struct got {
	enum delivery_status status;
	int replay;
	int attempt_count, retry_count, delay_actions;
	int64_t next_attempt_at, processed_at;
	int last_code;
	char last_message[SINK_MSG_LEN], last_cause[SINK_CAUSE_LEN];
	size_t n_attempts;
	int codes[MAX_TRIES];
	enum attempt_kind kinds[MAX_TRIES];
	int ordered_key, dead_letter;
};

struct fixture {
	struct sub_registry reg;
	struct subscription *sub;    /* in the published set; a test changes it before claims */
	struct fake_sink fake;
	struct dispatcher *d;
	int n_claims;
	/* the disable callback and the operational events, as they came */
	int disabled;
	char disabled_reason[256];
	char kinds[KINDS_MAX][40];
	int n_kinds;
};

static void disable_cb(void *ctx, const char *subscription_id, const char *reason)
{
	struct fixture *t = ctx;
	assert_string_equal(subscription_id, SUB_ID);
	t->disabled++;
	snprintf(t->disabled_reason, sizeof(t->disabled_reason), "%s", reason);
}

static void ops_cb(void *ctx, const char *kind, const char *subscription_id, json_t *payload)
{
	struct fixture *t = ctx;
	if (t->n_kinds < KINDS_MAX)
		snprintf(t->kinds[t->n_kinds++], sizeof(t->kinds[0]), "%s", kind);
	json_decref(payload);
}

static int ops_seen(const struct fixture *t, const char *kind)
{
	int n = 0;
	for (int i = 0; i < t->n_kinds; i++)
		n += strcmp(t->kinds[i], kind) == 0;
	return n;
}

/* One subscription to fake://, the defaults of a subscription that sets nothing: 3
 * immediate tries 100 ms apart, fixed 3 s retries, 3 of them, the default breaker. */
static int setup(void **state)
{
	struct fixture *t = calloc(1, sizeof(*t));
	struct subscription *s = calloc(1, sizeof(*s));
	struct sub_set *set = sub_set_new();

	assert_non_null(t);
	assert_non_null(s);
	memcpy(s->id, SUB_ID, UUID_STR_LEN);
	s->name = strdup("orders");
	s->endpoint = strdup("fake://orders");
	retry_policy_defaults(&s->retry);
	retry_policy_settle(&s->retry);
	circuit_breaker_defaults(&s->breaker);
	s->enabled = 1;
	s->disable_after_ms = -1;
	assert_int_equal(sub_set_add(set, s), 0);
	set->loaded_at_ms = clock_now_ms();
	sub_registry_init(&t->reg);
	sub_registry_publish(&t->reg, set);
	t->sub = s;

	fake_sink_init(&t->fake);
	struct dispatcher_config cfg = {
		.max_in_flight = 16,
		.batch = 16,
		.lease_ms = 60000,
		.connect_timeout_ms = 1000,
		.shutdown_grace_ms = 1000,
		.disabled_delay_ms = 5000,
		.sinks = &t->fake.set,
		.disable = disable_cb,
		.disable_ctx = t,
		.ops = {.emit = ops_cb, .ctx = t},
	};
	t->d = dispatcher_new(&t->reg, &cfg);
	assert_non_null(t->d);
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *t = *state;
	dispatcher_delete(t->d);
	sub_registry_destroy(&t->reg);
	free(t);
	return 0;
}

/* A claim as the store hands it out, of a fresh delivery (NEW, nothing tried yet) with a
 * lease of a minute; the caller changes what its case needs, then starts it. */
static struct store_claim *claim_new(struct fixture *t)
{
	static const char text[] = "order.created\0\0key-1";
	struct store_claim *c = calloc(1, sizeof(*c));
	char *block = malloc(sizeof(text));

	assert_non_null(c);
	assert_non_null(block);
	memcpy(block, text, sizeof(text));
	snprintf(c->delivery_id, sizeof(c->delivery_id), "01900000-0000-7000-8000-1000000000%02d",
		 ++t->n_claims);
	snprintf(c->event_id, sizeof(c->event_id), "01900000-0000-7000-8000-2000000000%02d",
		 t->n_claims);
	memcpy(c->subscription_id, SUB_ID, UUID_STR_LEN);
	c->status = DELIVERY_NEW;
	c->lease_until = clock_now_ms() + 60000;
	c->event_created_at = clock_now_ms() - 1000;
	c->event_type = block;       /* one allocation, as store_claims_free frees it */
	c->source = block + 14;      /* "" */
	return c;
}

static void with_key(struct store_claim *c)
{
	c->partition_key = c->event_type + 15; /* "key-1" */
}

/* Runs the dispatcher's work by hand until nothing moves: the sink's answers, the
 * staggers (their time passes at once), the parked rounds. */
static void drive(struct fixture *t)
{
	for (int turn = 0; turn < 50; turn++) {
		size_t ended = fake_sink_run(&t->fake);
		size_t waiting = t->d->n_waiting;
		rounds_run_timers(t->d, INT64_MAX / 2);
		rounds_run_parked(t->d, clock_mono_us());
		if (!ended && !waiting && !t->fake.n_pending)
			return;
	}
	fail_msg("the rounds did not settle");
}

/* Starts claim c and drives its round to its end. */
static void run_claim(struct fixture *t, struct store_claim *c)
{
	dispatcher_claims_start(t->d, c, 1);
	drive(t);
}

/* Takes the oldest finished round off the done list, as the writer would, and recycles
 * it; 0 when none is finished. */
static int take(struct fixture *t, struct got *g)
{
	struct round *r = t->d->done_head;
	if (!r)
		return 0;
	t->d->done_head = r->wr.next ? (struct round *)((char *)r->wr.next -
							offsetof(struct round, wr))
				     : NULL;
	if (!t->d->done_head)
		t->d->done_tail = NULL;
	t->d->done_count--;

	const struct store_result *res = &r->wr.result;
	memset(g, 0, sizeof(*g));
	assert_string_equal(res->delivery_id, r->claim->delivery_id);
	g->status = res->status;
	g->replay = res->replay;
	g->attempt_count = res->attempt_count;
	g->retry_count = res->retry_count;
	g->delay_actions = res->delay_actions;
	g->next_attempt_at = res->next_attempt_at;
	g->processed_at = res->processed_at;
	g->last_code = res->last_code;
	snprintf(g->last_message, sizeof(g->last_message), "%s",
		 res->last_message ? res->last_message : "");
	snprintf(g->last_cause, sizeof(g->last_cause), "%s", res->last_cause ? res->last_cause : "");
	g->n_attempts = res->n_attempts;
	for (size_t i = 0; i < res->n_attempts && i < MAX_TRIES; i++) {
		g->codes[i] = res->attempts[i].code;
		g->kinds[i] = res->attempts[i].kind;
	}
	g->ordered_key = res->ordered_key;
	g->dead_letter = res->dead_letter;
	round_recycle(t->d, r);
	return 1;
}

static void take_one(struct fixture *t, struct got *g)
{
	assert_int_equal(take(t, g), 1);
	assert_null(t->d->done_head);
}

/* The subscription's state as the dispatcher keeps it (limits.h). */
static struct sub_limits *sub_state(struct fixture *t)
{
	struct sub_limits *x = limits_get(&t->d->limits, t->sub);
	assert_non_null(x);
	return x;
}

/* ---- the immediate round --------------------------------------------------------------- */

static void test_immediate_tries_end_in_success(void **state)
{
	struct fixture *t = *state;
	const struct fake_step steps[] = {
		{.code = 500, .cause = "upstream down"},
		{.code = 503, .not_sent = true, .message = "connection refused"},
		{.code = 200},
	};
	struct got g;

	fake_sink_script(&t->fake, steps, 3);
	dispatcher_claims_start(t->d, claim_new(t), 1);
	/* the first try is out; its failure puts the round in its stagger, not in the DLQ */
	assert_int_equal(t->fake.n_pending, 1);
	assert_int_equal(fake_sink_run(&t->fake), 1);
	assert_int_equal(t->d->n_waiting, 1);
	assert_null(t->d->done_head);
	drive(t);
	take_one(t, &g);

	assert_int_equal(t->fake.n_sent, 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(t->fake.sent[i].attempt_no, i + 1);
		assert_int_equal(t->fake.sent[i].timeout_ms, t->sub->retry.immediate_timeout_ms);
	}
	assert_int_equal(g.status, DELIVERY_PROCESSED);
	assert_true(g.processed_at > 0);
	assert_int_equal(g.next_attempt_at, 0);
	assert_int_equal(g.attempt_count, 3);
	assert_int_equal(g.retry_count, 0);
	assert_int_equal(g.last_code, 0); /* the error it showed is gone */
	assert_int_equal(g.n_attempts, 3);
	assert_int_equal(g.codes[0], 500);
	assert_int_equal(g.codes[1], 503);
	assert_int_equal(g.codes[2], 200);
	assert_int_equal(g.kinds[2], ATTEMPT_IMMEDIATE);
	assert_int_equal(g.ordered_key, 0);
	assert_int_equal(t->d->active, 0);
	assert_int_equal(t->d->in_flight, 0);
}

static void test_immediate_tries_end_in_retry(void **state)
{
	struct fixture *t = *state;
	const struct fake_step steps[] = {
		{.code = 500}, {.code = 502}, {.code = 503},
		{.code = 500, .cause = "upstream down"},
	};
	struct got g;

	fake_sink_script(&t->fake, steps, 4);
	int64_t before = clock_now_ms();
	run_claim(t, claim_new(t));
	int64_t after = clock_now_ms();
	take_one(t, &g);

	/* the defaults: the first try and 3 immediate retries */
	assert_int_equal(t->fake.n_sent, 4);
	assert_int_equal(g.status, DELIVERY_FAILED);
	assert_true(g.next_attempt_at >= before + 3000 && g.next_attempt_at <= after + 3000);
	assert_int_equal(g.attempt_count, 4);
	assert_int_equal(g.retry_count, 0);
	assert_int_equal(g.last_code, 500);
	assert_string_equal(g.last_message, "HTTP 500");
	assert_string_equal(g.last_cause, "upstream down");
	assert_int_equal(g.n_attempts, 4);
	/* the retry is due soon: the loop claims at its time, not at the idle poll */
	assert_int_equal(t->d->soonest_retry_ms, g.next_attempt_at);
}

/* A scheduled round is one try with retry.timeout; a 429's Retry-After postpones the
 * next. */
static void test_scheduled_round_is_one_try(void **state)
{
	struct fixture *t = *state;
	const struct fake_step steps[] = {{.code = 429, .retry_after_ms = 20000}};
	struct store_claim *c = claim_new(t);
	struct got g;

	fake_sink_script(&t->fake, steps, 1);
	c->status = DELIVERY_FAILED;
	c->attempt_count = 3;
	c->retry_count = 1;
	int64_t before = clock_now_ms();
	run_claim(t, c);
	take_one(t, &g);

	assert_int_equal(t->fake.n_sent, 1);
	assert_int_equal(t->fake.sent[0].attempt_no, 4);
	assert_int_equal(t->fake.sent[0].timeout_ms, t->sub->retry.timeout_ms);
	assert_int_equal(g.status, DELIVERY_FAILED);
	assert_int_equal(g.kinds[0], ATTEMPT_SCHEDULED);
	assert_int_equal(g.attempt_count, 4);
	assert_int_equal(g.retry_count, 2);
	assert_true(g.next_attempt_at >= before + 20000);
}

/* ---- the dead-letter queue --------------------------------------------------------------- */

static void test_immediate_round_ends_in_dlq(void **state)
{
	struct fixture *t = *state;
	const struct fake_step steps[] = {
		{.code = 403, .permanent = true, .not_sent = true, .message = "refused",
		 .cause = "refused by the SSRF guard"},
	};
	struct got g;

	fake_sink_script(&t->fake, steps, 1);
	run_claim(t, claim_new(t));
	take_one(t, &g);

	assert_int_equal(t->fake.n_sent, 1); /* a permanent failure ends the round at once */
	assert_int_equal(g.status, DELIVERY_FAILED);
	assert_int_equal(g.next_attempt_at, 0);
	assert_int_equal(g.last_code, 403);
	assert_string_equal(g.last_cause, "refused by the SSRF guard");
	assert_int_equal(g.dead_letter, 0);
	assert_int_equal(ops_seen(t, "delivery.dead"), 1);
}

/* The last scheduled retry fails: dead, and marked for the Kafka dead-letter topic when
 * its event came from an intake topic. */
static void test_retries_exhausted_to_dlq(void **state)
{
	struct fixture *t = *state;
	const struct fake_step steps[] = {{.code = 500}};
	struct store_claim *c = claim_new(t);
	struct got g;

	t->fake.dead_letter = true;
	fake_sink_script(&t->fake, steps, 1);
	c->status = DELIVERY_FAILED;
	c->attempt_count = 5;
	c->retry_count = 2;
	c->source = "kafka:orders"; /* static: the claim's block is freed on its own */
	run_claim(t, c);
	take_one(t, &g);

	assert_int_equal(g.status, DELIVERY_FAILED);
	assert_int_equal(g.next_attempt_at, 0);
	assert_int_equal(g.retry_count, 3);
	assert_int_equal(g.attempt_count, 6);
	assert_int_equal(g.dead_letter, 1);
	assert_true(g.processed_at > 0); /* processing ended, in failure */
	assert_int_equal(ops_seen(t, "delivery.dead"), 1);
}

/* ---- the circuit breaker ------------------------------------------------------------------ */

/* Fails one round of one fresh delivery (immediate 1: one try a round). */
static void fail_round(struct fixture *t)
{
	const struct fake_step steps[] = {{.code = 500}};
	struct got g;

	fake_sink_script(&t->fake, steps, 1);
	run_claim(t, claim_new(t));
	take_one(t, &g);
	assert_int_equal(g.status, DELIVERY_FAILED);
}

static void test_breaker_opens_then_delays(void **state)
{
	struct fixture *t = *state;
	struct got g;

	t->sub->retry.immediate = 1;
	t->sub->breaker.max_errors = 2;
	fail_round(t);
	assert_int_equal(sub_state(t)->state.breaker.state, BREAKER_CLOSED);
	assert_int_equal(sub_state(t)->state.breaker.failures, 1);
	fail_round(t); /* the max_errors-th failed round in the window */
	assert_int_equal(sub_state(t)->state.breaker.state, BREAKER_OPEN);
	assert_int_equal(ops_seen(t, "circuit.opened"), 1);
	assert_int_equal(metrics_circuit_state(SUB_ID, clock_now_ms()), 1);

	/* the next delivery is refused: no request, a delay action in [10 s, 60 s] */
	size_t sent = t->fake.n_sent;
	struct store_claim *c = claim_new(t);
	c->attempt_count = 2;
	c->delay_actions = 1;
	int64_t before = clock_now_ms();
	run_claim(t, c);
	int64_t after = clock_now_ms();
	take_one(t, &g);
	assert_int_equal(t->fake.n_sent, sent);
	assert_int_equal(g.status, DELIVERY_NEW); /* as it was */
	assert_int_equal(g.attempt_count, 2);
	assert_int_equal(g.delay_actions, 2);
	assert_int_equal(g.n_attempts, 0);
	assert_true(g.next_attempt_at >= before + t->sub->retry.min_delay_ms &&
		    g.next_attempt_at <= after + t->sub->retry.max_delay_ms);
	assert_int_equal(g.last_code, OUTCOME_CIRCUIT_OPEN_CODE);
	assert_string_equal(g.last_message, OUTCOME_CIRCUIT_OPEN_MESSAGE);
	assert_non_null(strstr(g.last_cause, "delay action 2 of 5"));
	/* the delay action took a slot of the subscription's 10-60 s window (slot filling,
	 * core/test_retry.c checks the spread): 50 slots of a second, one taken */
	assert_int_equal(sub_state(t)->requeue_slots.n, 50);
	assert_int_equal(sub_state(t)->requeue_slots.n_taken, 1);
	/* a refused round counts nothing: the breaker stays as it opened */
	assert_int_equal(sub_state(t)->state.breaker.state, BREAKER_OPEN);
	assert_int_equal(ops_seen(t, "circuit.opened"), 1);

	/* after max_delay_actions of them: the DLQ, still without a request */
	c = claim_new(t);
	c->delay_actions = 5;
	run_claim(t, c);
	take_one(t, &g);
	assert_int_equal(t->fake.n_sent, sent);
	assert_int_equal(g.status, DELIVERY_FAILED);
	assert_int_equal(g.next_attempt_at, 0);
	assert_int_equal(g.delay_actions, 5);
	assert_int_equal(g.last_code, OUTCOME_CIRCUIT_OPEN_CODE);
	assert_non_null(strstr(g.last_cause, "after 5 delay actions"));
	assert_int_equal(ops_seen(t, "delivery.dead"), 1);
}

/* The window is over: the next delivery is the probe, one request whatever
 * retry.immediate says. Its failure opens the breaker again; the next probe's success
 * closes it. */
static void test_half_open_probe(void **state)
{
	struct fixture *t = *state;
	const struct fake_step fail[] = {{.code = 500}}, ok[] = {{.code = 200}};
	struct got g;

	t->sub->breaker.max_errors = 1;
	t->sub->retry.immediate = 1;
	fail_round(t);
	assert_int_equal(sub_state(t)->state.breaker.state, BREAKER_OPEN);
	t->sub->retry.immediate = 3;

	sub_state(t)->state.breaker.open_until_ms = clock_now_ms() - 1; /* the window passed */
	size_t sent = t->fake.n_sent;
	fake_sink_script(&t->fake, fail, 1);
	run_claim(t, claim_new(t));
	take_one(t, &g);
	assert_int_equal(t->fake.n_sent, sent + 1);
	assert_int_equal(g.status, DELIVERY_FAILED);
	assert_true(g.next_attempt_at > 0); /* a scheduled retry, as any failed round */
	assert_int_equal(g.processed_at, 0); /* not over yet */
	assert_int_equal(sub_state(t)->state.breaker.state, BREAKER_OPEN);
	assert_true(sub_state(t)->state.breaker.open_until_ms >=
		    clock_now_ms() + t->sub->breaker.failure_window_ms - 1000);
	assert_int_equal(ops_seen(t, "circuit.opened"), 2);

	sub_state(t)->state.breaker.open_until_ms = clock_now_ms() - 1;
	fake_sink_script(&t->fake, ok, 1);
	run_claim(t, claim_new(t));
	take_one(t, &g);
	assert_int_equal(g.status, DELIVERY_PROCESSED);
	assert_int_equal(sub_state(t)->state.breaker.state, BREAKER_CLOSED);
	assert_int_equal(ops_seen(t, "circuit.closed"), 1);
	assert_int_equal(metrics_circuit_state(SUB_ID, clock_now_ms()), 0);
}

/* A probe that ends undecided (outboxd's own failure: not a try) is handed back, and the
 * next delivery asking becomes the probe. */
static void test_probe_handed_back(void **state)
{
	struct fixture *t = *state;
	const struct fake_step local[] = {{.code = 0, .local = true, .cause = "no descriptors"}};
	const struct fake_step ok[] = {{.code = 204}};
	struct got g;

	t->sub->breaker.max_errors = 1;
	t->sub->retry.immediate = 1;
	fail_round(t);
	sub_state(t)->state.breaker.open_until_ms = clock_now_ms() - 1;

	fake_sink_script(&t->fake, local, 1);
	struct store_claim *c = claim_new(t);
	run_claim(t, c);
	take_one(t, &g);
	assert_int_equal(g.status, DELIVERY_NEW);
	assert_int_equal(g.attempt_count, 0);
	assert_int_equal(g.last_code, -1); /* keeps the error it showed */
	assert_true(g.next_attempt_at > 0);
	assert_int_equal(sub_state(t)->state.breaker.state, BREAKER_HALF_OPEN);
	assert_int_equal(sub_state(t)->state.breaker.probing, 0);

	fake_sink_script(&t->fake, ok, 1);
	run_claim(t, claim_new(t));
	take_one(t, &g);
	assert_int_equal(g.status, DELIVERY_PROCESSED);
	assert_int_equal(sub_state(t)->state.breaker.state, BREAKER_CLOSED);
}

/* ---- endpoint health ----------------------------------------------------------------------- */

static void test_disable_after_reached(void **state)
{
	struct fixture *t = *state;
	const struct fake_step ok[] = {{.code = 200}};
	struct got g;

	t->sub->retry.immediate = 1;
	t->sub->disable_after_ms = 60000;
	fail_round(t);
	int64_t since = sub_state(t)->state.failing_since_ms;
	assert_true(since > 0);
	assert_int_equal(t->disabled, 0);

	/* every attempt has failed for a minute now */
	sub_state(t)->state.failing_since_ms = since - 60000;
	fail_round(t);
	assert_int_equal(t->disabled, 1);
	assert_non_null(strstr(t->disabled_reason, "(disable_after)"));
	assert_non_null(strstr(t->disabled_reason, "the last: 500 HTTP 500"));
	assert_int_equal(ops_seen(t, "subscription.disabled"), 1);
	/* once per streak */
	fail_round(t);
	assert_int_equal(t->disabled, 1);

	/* a success after a streak of a failure window (3 min) at least is a recovery */
	sub_state(t)->state.failing_since_ms = clock_now_ms() - 4 * 60000;
	fake_sink_script(&t->fake, ok, 1);
	run_claim(t, claim_new(t));
	take_one(t, &g);
	assert_int_equal(ops_seen(t, "subscription.recovered"), 1);
	assert_int_equal(sub_state(t)->state.failing_since_ms, 0);
	assert_false(sub_state(t)->state.disable_asked);
}

/* disable_after -1 takes the instance's setting; without one, never. */
static void test_disable_after_default(void **state)
{
	struct fixture *t = *state;

	t->sub->retry.immediate = 1;
	fail_round(t);
	sub_state(t)->state.failing_since_ms -= 10 * 24 * 3600 * 1000LL;
	fail_round(t);
	assert_int_equal(t->disabled, 0);

	t->d->cfg.disable_after_ms = 3600 * 1000;
	fail_round(t);
	assert_int_equal(t->disabled, 1);
}

/* ---- leases ------------------------------------------------------------------------------ */

/* The lease was found gone while the round waited for its next try: no more attempts;
 * the delivery goes back as it was, with the attempt it made recorded. */
static void test_lost_lease(void **state)
{
	struct fixture *t = *state;
	const struct fake_step steps[] = {{.code = 500}};
	struct store_claim *c = claim_new(t);
	struct got g;

	fake_sink_script(&t->fake, steps, 1);
	dispatcher_claims_start(t->d, c, 1);
	fake_sink_run(&t->fake);
	assert_int_equal(t->d->n_waiting, 1);
	struct round *r = t->d->waiting[0];
	/* what a renewal answer that found the lease gone does (dispatcher.c) */
	r->lease_lost = 1;
	r->lease_until_ms = clock_now_ms();
	int64_t before = clock_now_ms();
	drive(t);
	take_one(t, &g);

	assert_int_equal(t->fake.n_sent, 1);
	assert_int_equal(g.status, DELIVERY_NEW);
	assert_int_equal(g.attempt_count, 1);
	assert_int_equal(g.n_attempts, 1);
	assert_int_equal(g.retry_count, 0);
	assert_int_equal(g.last_code, 500);
	assert_true(g.next_attempt_at >= before && g.next_attempt_at <= clock_now_ms());
}

/* ---- per-key ordering ---------------------------------------------------------------------- */

/* A keyed delivery of a key-ordered subscription lets the next of its key go with its
 * final result only. */
static void test_key_released_by_final_results(void **state)
{
	struct fixture *t = *state;
	const struct fake_step fail[] = {{.code = 500}}, ok[] = {{.code = 200}};
	struct store_claim *c;
	struct got g;

	t->sub->retry.immediate = 1;
	t->sub->ordering = ORDERING_KEY_BLOCK;
	fake_sink_script(&t->fake, fail, 1);
	with_key(c = claim_new(t));
	run_claim(t, c);
	take_one(t, &g);
	assert_true(g.next_attempt_at > 0);
	assert_int_equal(g.ordered_key, 0);

	fake_sink_script(&t->fake, ok, 1);
	with_key(c = claim_new(t));
	run_claim(t, c);
	take_one(t, &g);
	assert_int_equal(g.ordered_key, 1);

	fake_sink_script(&t->fake, ok, 1);
	run_claim(t, claim_new(t)); /* no key: nothing to release */
	take_one(t, &g);
	assert_int_equal(g.ordered_key, 0);
}

/* ---- the allocation budget --------------------------------------------------------------- */

/* n claims in one array, as a store's claim hands them out (each one's texts in one block
 * of its own). */
static struct store_claim *claims_new(struct fixture *t, size_t n)
{
	struct store_claim *a = calloc(n, sizeof(*a));
	assert_non_null(a);
	for (size_t i = 0; i < n; i++) {
		struct store_claim *c = claim_new(t);
		t->n_claims %= 90; /* the ids' two digits */
		a[i] = *c;
		free(c);
	}
	return a;
}

/* Successful rounds in the steady state allocate nothing per delivery: the rounds, their
 * results and attempt records come from the dispatcher's pools and the claims are the
 * store's; a batch of claims costs its one bookkeeping record. Counted on this thread
 * (the dispatcher's, here) from the batch's start to its rounds' recycling, after a first
 * batch that fills the pools; the claims the test makes are not counted. */
#define ALLOC_BATCH 16
#define ALLOC_BATCHES 20
#define ROUND_ALLOCS_PER_DELIVERY 0 /* the budget this test holds the round path to */
#define ROUND_ALLOCS_PER_BATCH 1
static void test_round_allocation_budget(void **state)
{
	struct fixture *t = *state;
	struct fake_step ok[ALLOC_BATCH];
	struct got g;

	if (!alloc_count_available())
		skip();
	for (int i = 0; i < ALLOC_BATCH; i++)
		ok[i] = (struct fake_step){.code = 200};
	for (int batch = 0; batch <= ALLOC_BATCHES; batch++) {
		t->fake.n_script = t->fake.next_step = t->fake.n_sent = 0;
		fake_sink_script(&t->fake, ok, ALLOC_BATCH);
		struct store_claim *claims = claims_new(t, ALLOC_BATCH);
		if (batch == 1)
			alloc_count_reset(); /* the first batch filled the pools */
		alloc_count_begin();
		dispatcher_claims_start(t->d, claims, ALLOC_BATCH);
		drive(t);
		for (int i = 0; i < ALLOC_BATCH; i++) {
			assert_int_equal(take(t, &g), 1);
			assert_int_equal(g.status, DELIVERY_PROCESSED);
		}
		alloc_count_end();
	}
	long allocs = alloc_count_end(), delivered = ALLOC_BATCHES * ALLOC_BATCH;
	fprintf(stderr, "round path: %ld allocations for %ld deliveries in %d batches\n", allocs,
		delivered, ALLOC_BATCHES);
	assert_true(allocs <= ROUND_ALLOCS_PER_DELIVERY * delivered +
			      ROUND_ALLOCS_PER_BATCH * ALLOC_BATCHES);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_immediate_tries_end_in_success, setup, teardown),
		cmocka_unit_test_setup_teardown(test_immediate_tries_end_in_retry, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scheduled_round_is_one_try, setup, teardown),
		cmocka_unit_test_setup_teardown(test_immediate_round_ends_in_dlq, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retries_exhausted_to_dlq, setup, teardown),
		cmocka_unit_test_setup_teardown(test_breaker_opens_then_delays, setup, teardown),
		cmocka_unit_test_setup_teardown(test_half_open_probe, setup, teardown),
		cmocka_unit_test_setup_teardown(test_probe_handed_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disable_after_reached, setup, teardown),
		cmocka_unit_test_setup_teardown(test_disable_after_default, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lost_lease, setup, teardown),
		cmocka_unit_test_setup_teardown(test_key_released_by_final_results, setup, teardown),
		cmocka_unit_test_setup_teardown(test_round_allocation_budget, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
