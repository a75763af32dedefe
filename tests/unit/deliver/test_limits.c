/* test_limits.c: what the dispatcher keeps per subscription (deliver/limits.c): the
 * breaker's admission before and after the state the outcome core returns is kept
 * (limits_apply: a breaker opened by max_errors failed rounds refuses rounds, its gauge
 * in the metrics), a probe handed back; max_in_flight and rate_limit taking and waiting;
 * the cap on a subscription's parked rounds; the endpoint a subscription shares; pruning
 * idle state. The clocks are passed in where limits.c takes them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "core/metrics.h"
#include "core/outcome.h"
#include "deliver/limits.h"
#include "util/clock.h"

#define SUB_ID "01900000-0000-7000-8000-0000000000aa"

static double rand_half_cb(void *ctx)
{
	(void)ctx;
	return 0.5;
}

static struct subscription sub_new(void)
{
	struct subscription s = {.enabled = 1, .disable_after_ms = -1};

	memcpy(s.id, SUB_ID, UUID_STR_LEN);
	s.endpoint = "http://127.0.0.1:9/hook";
	retry_policy_defaults(&s.retry);
	circuit_breaker_defaults(&s.breaker);
	return s;
}

/* One failed immediate round of s, decided by the outcome core on x's state and kept. */
static struct outcome fail_round(struct sub_limits *x, const struct subscription *s, int probe)
{
	struct outcome_in in = {.kind = ATTEMPT_IMMEDIATE, .tries = 3, .max_tries = 3,
				.code = 500, .retry_after_ms = -1, .tracked = true,
				.sub = x->state, .probe = probe, .now_ms = clock_now_ms()};
	struct outcome o;

	outcome_decide(&s->retry, &s->breaker, &in, rand_half_cb, NULL, &o);
	limits_apply(x, s, &o);
	return o;
}

static void test_breaker_admits_until_it_opens(void **state)
{
	struct limits_table t = {0};
	struct subscription s = sub_new();
	int probe = 0;

	s.breaker.max_errors = 3;
	struct sub_limits *x = limits_get(&t, &s);
	assert_non_null(x);
	assert_ptr_equal(limits_get(&t, &s), x); /* one state per subscription */
	for (int i = 1; i <= 2; i++) {
		assert_int_equal(limits_admit(x, &s, "d", &probe), BREAKER_PASS);
		assert_int_equal(fail_round(x, &s, 0).breaker, OUTCOME_BREAKER_SAME);
		assert_int_equal(x->state.breaker.failures, i);
	}
	assert_int_equal(limits_admit(x, &s, "d", &probe), BREAKER_PASS);
	assert_int_equal(fail_round(x, &s, 0).breaker, OUTCOME_BREAKER_OPENED);
	assert_int_equal(x->state.breaker.state, BREAKER_OPEN);
	assert_int_equal(metrics_circuit_state(SUB_ID, clock_now_ms()), 1);
	assert_int_equal(limits_admit(x, &s, "d", &probe), BREAKER_DELAY);
	assert_int_equal(probe, 0);

	/* the window is over: one probe, the others delayed; the probe handed back lets the
	 * next round probe */
	x->state.breaker.open_until_ms = clock_now_ms() - 1;
	assert_int_equal(limits_admit(x, &s, "p1", &probe), BREAKER_PROBE);
	assert_int_equal(probe, 1);
	int other = 0;
	assert_int_equal(limits_admit(x, &s, "d", &other), BREAKER_DELAY);
	struct outcome_in in = {.tracked = true, .sub = x->state, .probe = true,
				.now_ms = clock_now_ms()};
	struct outcome o;
	outcome_release(&in, 0, &o);
	limits_apply(x, &s, &o);
	assert_int_equal(limits_admit(x, &s, "p2", &other), BREAKER_PROBE);

	/* the probe fails: open again */
	assert_int_equal(fail_round(x, &s, 1).breaker, OUTCOME_BREAKER_REOPENED);
	assert_int_equal(limits_admit(x, &s, "d", &probe), BREAKER_DELAY);
	limits_free_all(&t);
}

/* A breaker turned off passes every round, and forgets that it was open. */
static void test_breaker_off(void **state)
{
	struct limits_table t = {0};
	struct subscription s = sub_new();
	int probe = 0;

	s.breaker.max_errors = 1;
	struct sub_limits *x = limits_get(&t, &s);
	fail_round(x, &s, 0);
	assert_int_equal(limits_admit(x, &s, "d", &probe), BREAKER_DELAY);
	s.breaker.enabled = 0;
	assert_int_equal(limits_admit(x, &s, "d", &probe), BREAKER_PASS);
	assert_int_equal(x->state.breaker.state, BREAKER_CLOSED);
	limits_free_all(&t);
}

static void test_max_in_flight(void **state)
{
	struct limits_table t = {0};
	struct subscription s = sub_new();

	s.max_in_flight = 2;
	struct sub_limits *x = limits_get(&t, &s);
	assert_int_equal(limits_take(x, &s, 0), 1);
	assert_int_equal(limits_take(x, &s, 0), 1);
	assert_int_equal(limits_take(x, &s, 0), 0);
	assert_int_equal(x->in_flight, 2);
	assert_int_equal(limits_wait(x, &s, 0), -1); /* only a completion frees a place */
	limits_put(x);
	assert_int_equal(limits_wait(x, &s, 0), 0);
	assert_int_equal(limits_take(x, &s, 0), 1);
	limits_free_all(&t);
}

/* rate_limit: a bucket of one second's worth, then the steady pace. */
static void test_rate_limit(void **state)
{
	struct limits_table t = {0};
	struct subscription s = sub_new();
	int64_t now = 1000000000;

	s.rate_limit = 10;
	struct sub_limits *x = limits_get(&t, &s);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(limits_take(x, &s, now), 1);
		limits_put(x);
	}
	assert_int_equal(limits_take(x, &s, now), 0);
	int64_t wait = limits_wait(x, &s, now);
	assert_true(wait > 0 && wait <= 100000);
	assert_int_equal(limits_take(x, &s, now + wait), 1);
	limits_free_all(&t);
}

static void test_cap_and_parked_cap(void **state)
{
	struct subscription s = sub_new();

	assert_int_equal(limits_cap(&s), 0);
	assert_int_equal(limits_parked_cap(512, &s, 0), 32);
	s.max_in_flight = 20;
	assert_int_equal(limits_cap(&s), 20);
	assert_int_equal(limits_parked_cap(512, &s, 0), 80); /* 4 x max_in_flight */
	s.concurrency = 5;
	assert_int_equal(limits_cap(&s), 5); /* the lower of the two */
	s.max_in_flight = 100;
	s.concurrency = 0;
	assert_int_equal(limits_parked_cap(512, &s, 0), 128); /* a quarter of the pool */
	s.max_in_flight = 0;
	s.rate_limit = 100;
	assert_int_equal(limits_parked_cap(512, &s, 0), 128);
	s.rate_limit = 0;
	/* an adaptive endpoint: half the pool, whatever its limit now */
	assert_int_equal(limits_parked_cap(512, &s, 4), 256);
	assert_int_equal(limits_parked_cap(512, &s, 40), 256);
	assert_int_equal(limits_parked_cap(2, &s, 0), 1);
}

/* Subscriptions to one endpoint share its flow control; a pinned concurrency has none. */
static void test_endpoint(void **state)
{
	struct limits_table t = {0};
	struct endpoint_table eps;
	struct subscription s = sub_new(), other = sub_new();

	endpoints_init(&eps, 64);
	memcpy(other.id, "01900000-0000-7000-8000-0000000000bb", UUID_STR_LEN);
	struct sub_limits *x = limits_get(&t, &s), *y = limits_get(&t, &other);
	assert_ptr_not_equal(x, y);
	struct endpoint *e = limits_endpoint(x, &s, &eps, 0);
	assert_non_null(e);
	assert_ptr_equal(limits_endpoint(y, &other, &eps, 0), e);
	assert_int_equal(e->refs, 2);
	other.concurrency = 4;
	assert_null(limits_endpoint(y, &other, &eps, 0));
	s.endpoint = "fake://orders"; /* not http(s): no adaptive limit */
	assert_null(limits_endpoint(x, &s, &eps, 0));
	limits_prune(&t, clock_mono_ms() + 2 * 3600 * 1000LL);
	endpoints_free_all(&eps);
	limits_free_all(&t);
}

/* Idle state goes after an hour, unless rounds still point at it; a new one is closed. */
static void test_prune(void **state)
{
	struct limits_table t = {0};
	struct subscription s = sub_new();

	s.breaker.max_errors = 1;
	struct sub_limits *x = limits_get(&t, &s);
	fail_round(x, &s, 0);
	x->refs = 1;
	limits_prune(&t, clock_mono_ms() + 2 * 3600 * 1000LL);
	assert_int_equal(limits_get(&t, &s)->state.breaker.state, BREAKER_OPEN);
	x->refs = 0;
	limits_prune(&t, clock_mono_ms() + 2 * 3600 * 1000LL);
	assert_int_equal(limits_get(&t, &s)->state.breaker.state, BREAKER_CLOSED);
	limits_free_all(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_breaker_admits_until_it_opens),
		cmocka_unit_test(test_breaker_off),
		cmocka_unit_test(test_max_in_flight),
		cmocka_unit_test(test_rate_limit),
		cmocka_unit_test(test_cap_and_parked_cap),
		cmocka_unit_test(test_endpoint),
		cmocka_unit_test(test_prune),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
