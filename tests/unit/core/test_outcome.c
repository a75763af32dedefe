/* test_outcome.c: core/outcome.c as a table: every rule of docs/retries.md (immediate round,
 * scheduled layer, manual replay, permanent codes, Retry-After, the breaker's delay
 * actions, the dead-letter queue) with its edges (the last try of a round, max_retries
 * reached vs one left, retry forever, Retry-After longer than the stagger or than
 * retry_after_max, the 10-year cap). Random draws are fixed at 0.5. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "core/outcome.h"

#define NOW 1700000000000LL
#define H (3600 * 1000LL)

static double rand_half_cb(void *ctx)
{
	(void)ctx;
	return 0.5;
}

enum policy_change {
	P_DEFAULT = 0,   /* defaults: 3 immediate tries 100 ms apart, fixed 3 s, max 3 retries */
	P_PERMANENT_400, /* 400 is permanent */
	P_FOREVER,       /* max_retries 0 */
	P_LINEAR,        /* linear, 3 s steps */
	P_EXPONENTIAL,   /* exponential, window 10..60 s, factor 2 */
	P_HUGE_INTERVAL, /* fixed, 20 years */
	P_ONE_TRY,       /* immediate 1 */
};

struct row {
	const char *name;
	enum policy_change policy;
	struct outcome_in in;       /* now_ms is set to NOW */
	enum outcome_next next;
	enum outcome_why why;
	int64_t delay_ms;
	int retry_count;
	int delay_actions;
};

#define IMM ATTEMPT_IMMEDIATE
#define SCH ATTEMPT_SCHEDULED
#define MAN ATTEMPT_MANUAL
#define NO_RA -1

static const struct row rows[] = {
	/* the immediate round */
	{"2xx on the first try", P_DEFAULT, {IMM, 0, 1, 3, 200, NO_RA, 0, 0, 0, 0, 0},
	 OUTCOME_DONE, 0, 0, 0, 0},
	{"204 is success too", P_DEFAULT, {IMM, 0, 2, 3, 204, NO_RA, 0, 0, 0, 0, 0},
	 OUTCOME_DONE, 0, 0, 0, 0},
	{"500, first of 3 tries: stagger 100 ms", P_DEFAULT, {IMM, 0, 1, 3, 500, NO_RA, 0, 0, 0, 0, 0},
	 OUTCOME_TRY, 0, 100, 0, 0},
	{"500, second of 3: stagger grows to 200 ms", P_DEFAULT,
	 {IMM, 0, 2, 3, 500, NO_RA, 0, 0, 0, 0, 0}, OUTCOME_TRY, 0, 200, 0, 0},
	{"500 on the last try of the round: scheduled retry in 3 s", P_DEFAULT,
	 {IMM, 0, 3, 3, 500, NO_RA, 0, 0, 0, 0, 0}, OUTCOME_RETRY, 0, 3000, 0, 0},
	{"3xx is a failure (redirects are not followed)", P_DEFAULT,
	 {IMM, 0, 1, 3, 301, NO_RA, 0, 0, 0, 0, 0}, OUTCOME_TRY, 0, 100, 0, 0},
	{"mapped transport code 504 is retried", P_DEFAULT, {IMM, 0, 1, 3, 504, NO_RA, 0, 0, 0, 0, 0},
	 OUTCOME_TRY, 0, 100, 0, 0},
	{"the sink ended the round early", P_DEFAULT, {IMM, 0, 1, 3, 500, NO_RA, 1, 0, 0, 0, 0},
	 OUTCOME_RETRY, 0, 3000, 0, 0},
	{"immediate 1: one try, then the schedule", P_ONE_TRY, {IMM, 0, 1, 1, 500, NO_RA, 0, 0, 0, 0, 0},
	 OUTCOME_RETRY, 0, 3000, 0, 0},
	{"half-open probe (max_tries 1) fails", P_DEFAULT, {IMM, 0, 1, 1, 503, NO_RA, 0, 0, 0, 0, 0},
	 OUTCOME_RETRY, 0, 3000, 0, 0},

	/* permanent codes, and failures a sink calls permanent */
	{"SSRF guard refusal (sink: permanent) on the first try", P_DEFAULT,
	 {IMM, 0, 1, 3, 403, NO_RA, 0, 1, 0, 0, 0}, OUTCOME_DLQ, OUTCOME_WHY_PERMANENT, 0, 0, 0},
	{"SSRF guard refusal in a scheduled round", P_DEFAULT,
	 {SCH, 0, 1, 1, 403, NO_RA, 0, 1, 1, 0, 0}, OUTCOME_DLQ, OUTCOME_WHY_PERMANENT, 0, 2, 0},
	{"400 is retried by default (every non-2xx is)", P_DEFAULT,
	 {IMM, 0, 1, 3, 400, NO_RA, 0, 0, 0, 0, 0}, OUTCOME_TRY, 0, 100, 0, 0},
	{"permanent 400 dead-letters at once", P_PERMANENT_400,
	 {IMM, 0, 1, 3, 400, NO_RA, 0, 0, 0, 0, 0}, OUTCOME_DLQ, OUTCOME_WHY_PERMANENT, 0, 0, 0},
	{"permanent 400 in a scheduled round", P_PERMANENT_400,
	 {SCH, 0, 1, 1, 400, NO_RA, 0, 0, 1, 0, 0}, OUTCOME_DLQ, OUTCOME_WHY_PERMANENT, 0, 2, 0},
	{"permanent 400 in a manual round", P_PERMANENT_400, {MAN, 0, 1, 3, 400, NO_RA, 0, 0, 3, 0, 0},
	 OUTCOME_DLQ, OUTCOME_WHY_PERMANENT, 0, 3, 0},
	{"401 with only 400 permanent is retried", P_PERMANENT_400,
	 {IMM, 0, 1, 3, 401, NO_RA, 0, 0, 0, 0, 0}, OUTCOME_TRY, 0, 100, 0, 0},

	/* Retry-After (429 and 503 only) */
	{"429 Retry-After 5 s > stagger: round ends, retry waits 5 s", P_DEFAULT,
	 {IMM, 0, 1, 3, 429, 5000, 0, 0, 0, 0, 0}, OUTCOME_RETRY, 0, 5000, 0, 0},
	{"429 Retry-After 50 ms < stagger: the round goes on", P_DEFAULT,
	 {IMM, 0, 1, 3, 429, 50, 0, 0, 0, 0, 0}, OUTCOME_TRY, 0, 100, 0, 0},
	{"503 Retry-After 1 s < the 3 s interval: the policy wins", P_DEFAULT,
	 {IMM, 0, 3, 3, 503, 1000, 0, 0, 0, 0, 0}, OUTCOME_RETRY, 0, 3000, 0, 0},
	{"503 Retry-After 2 h is cut to retry_after_max 1 h", P_DEFAULT,
	 {IMM, 0, 1, 3, 503, 2 * H, 0, 0, 0, 0, 0}, OUTCOME_RETRY, 0, H, 0, 0},
	{"500 with Retry-After: the header does not apply", P_DEFAULT,
	 {IMM, 0, 1, 3, 500, 5000, 0, 0, 0, 0, 0}, OUTCOME_TRY, 0, 100, 0, 0},
	{"429 Retry-After in a scheduled round", P_DEFAULT, {SCH, 0, 1, 1, 429, 9000, 0, 0, 0, 0, 0},
	 OUTCOME_RETRY, 0, 9000, 1, 0},

	/* the scheduled layer */
	{"first scheduled retry fails, 2 of 3 left", P_DEFAULT, {SCH, 0, 1, 1, 500, NO_RA, 0, 0, 0, 0, 0},
	 OUTCOME_RETRY, 0, 3000, 1, 0},
	{"second scheduled retry fails, 1 left", P_DEFAULT, {SCH, 0, 1, 1, 500, NO_RA, 0, 0, 1, 0, 0},
	 OUTCOME_RETRY, 0, 3000, 2, 0},
	{"third scheduled retry fails: max_retries reached, dead", P_DEFAULT,
	 {SCH, 0, 1, 1, 500, NO_RA, 0, 0, 2, 0, 0}, OUTCOME_DLQ, OUTCOME_WHY_EXHAUSTED, 0, 3, 0},
	{"beyond max_retries (policy lowered meanwhile): dead", P_DEFAULT,
	 {SCH, 0, 1, 1, 500, NO_RA, 0, 0, 7, 0, 0}, OUTCOME_DLQ, OUTCOME_WHY_EXHAUSTED, 0, 8, 0},
	{"scheduled retry succeeds: counted", P_DEFAULT, {SCH, 0, 1, 1, 200, NO_RA, 0, 0, 2, 0, 0},
	 OUTCOME_DONE, 0, 0, 3, 0},
	{"retry forever (max_retries 0) after 1000 retries", P_FOREVER,
	 {SCH, 0, 1, 1, 500, NO_RA, 0, 0, 1000, 0, 0}, OUTCOME_RETRY, 0, 3000, 1001, 0},
	{"linear: the third retry waits 3 x 3 s", P_LINEAR, {SCH, 0, 1, 1, 500, NO_RA, 0, 0, 1, 0, 0},
	 OUTCOME_RETRY, 0, 9000, 2, 0},
	{"exponential: retry 2 drawn in [10 s, 40 s] at 0.5", P_EXPONENTIAL,
	 {SCH, 0, 1, 1, 500, NO_RA, 0, 0, 0, 0, 0}, OUTCOME_RETRY, 0, 25000, 1, 0},
	{"exponential: retry 1 drawn in [10 s, 20 s] at 0.5", P_EXPONENTIAL,
	 {IMM, 0, 3, 3, 500, NO_RA, 0, 0, 0, 0, 0}, OUTCOME_RETRY, 0, 15000, 0, 0},
	{"a 20-year interval is capped at 10 years", P_HUGE_INTERVAL,
	 {IMM, 0, 3, 3, 500, NO_RA, 0, 0, 0, 0, 0}, OUTCOME_RETRY, 0, OUTCOME_DELAY_MAX_MS, 0, 0},

	/* manual rounds (operator replay) */
	{"replay, first of 3 tries fails: the round goes on", P_DEFAULT,
	 {MAN, 0, 1, 3, 500, NO_RA, 0, 0, 3, 0, 0}, OUTCOME_TRY, 0, 100, 3, 0},
	{"replay round fails: back to the DLQ, no schedule", P_DEFAULT,
	 {MAN, 0, 3, 3, 500, NO_RA, 0, 0, 3, 0, 0}, OUTCOME_DLQ, OUTCOME_WHY_MANUAL, 0, 3, 0},
	{"replay under retry-forever still ends in the DLQ", P_FOREVER,
	 {MAN, 0, 3, 3, 500, NO_RA, 0, 0, 3, 0, 0}, OUTCOME_DLQ, OUTCOME_WHY_MANUAL, 0, 3, 0},
	{"replay succeeds", P_DEFAULT, {MAN, 0, 2, 3, 200, NO_RA, 0, 0, 3, 0, 0}, OUTCOME_DONE, 0, 0, 3, 0},
	{"deleted subscription: 410 in a manual round", P_ONE_TRY,
	 {MAN, 0, 1, 1, 410, NO_RA, 0, 0, 0, 0, 0}, OUTCOME_DLQ, OUTCOME_WHY_MANUAL, 0, 0, 0},

	/* the circuit breaker's delay actions (max_delay_actions 5) */
	{"breaker open: first delay action in [10 s, 60 s]", P_DEFAULT,
	 {IMM, 1, 0, 3, 0, NO_RA, 0, 0, 0, 0, 0}, OUTCOME_DELAY, 0, 35000, 0, 1},
	{"breaker open: fifth delay action", P_DEFAULT, {SCH, 1, 0, 1, 0, NO_RA, 0, 0, 2, 4, 0},
	 OUTCOME_DELAY, 0, 35000, 2, 5},
	{"breaker open after 5 delay actions: dead, circuit_open", P_DEFAULT,
	 {SCH, 1, 0, 1, 0, NO_RA, 0, 0, 2, 5, 0}, OUTCOME_DLQ, OUTCOME_WHY_CIRCUIT_OPEN, 0, 2, 5},
};

static void policy_for(enum policy_change c, struct retry_policy *p)
{
	retry_policy_defaults(p);
	switch (c) {
	case P_DEFAULT:
		break;
	case P_PERMANENT_400:
		assert_int_equal(retry_permanent_add(p, 400), 0);
		break;
	case P_FOREVER:
		p->max_retries = 0;
		break;
	case P_LINEAR:
		p->policy = RETRY_LINEAR;
		break;
	case P_EXPONENTIAL:
		p->policy = RETRY_EXPONENTIAL;
		break;
	case P_HUGE_INTERVAL:
		p->interval_ms = 20 * 3650LL * 86400 * 1000;
		break;
	case P_ONE_TRY:
		p->immediate = 1;
		break;
	}
}

static void test_table(void **state)
{
	int failed = 0;

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		struct retry_policy p;
		struct circuit_breaker_config b;
		struct outcome_in in = r->in;
		struct outcome out;

		policy_for(r->policy, &p);
		circuit_breaker_defaults(&b);
		in.now_ms = NOW;
		outcome_decide(&p, &b, &in, rand_half_cb, NULL, &out);
		int64_t want_at = r->next == OUTCOME_TRY || r->next == OUTCOME_RETRY ||
						  r->next == OUTCOME_DELAY
					  ? NOW + r->delay_ms : 0;
		if (out.next != r->next || out.why != r->why || out.delay_ms != r->delay_ms ||
		    out.at_ms != want_at || out.retry_count != r->retry_count ||
		    out.delay_actions != r->delay_actions) {
			print_error("row %zu \"%s\": got %s/%s delay %lld retries %d delay actions %d; "
				    "want %s/%s delay %lld retries %d delay actions %d\n", i, r->name,
				    outcome_next_name(out.next), outcome_why_name(out.why),
				    (long long)out.delay_ms, out.retry_count, out.delay_actions,
				    outcome_next_name(r->next), outcome_why_name(r->why),
				    (long long)r->delay_ms, r->retry_count, r->delay_actions);
			failed++;
		}
	}
	assert_int_equal(failed, 0);
}

/* Every scheduled round under the default policy: exactly max_retries retries follow
 * the immediate round, then the DLQ. */
static void test_walk_to_dlq(void **state)
{
	struct retry_policy p;
	struct circuit_breaker_config b;
	struct outcome out;
	struct outcome_in in = {.kind = ATTEMPT_IMMEDIATE, .max_tries = 3, .code = 500,
				.retry_after_ms = -1, .now_ms = NOW};
	int rounds = 0;

	retry_policy_defaults(&p);
	circuit_breaker_defaults(&b);
	for (in.tries = 1;; in.tries++) {
		outcome_decide(&p, &b, &in, rand_half_cb, NULL, &out);
		if (out.next != OUTCOME_TRY)
			break;
	}
	assert_int_equal(in.tries, 3);
	while (out.next == OUTCOME_RETRY) {
		struct outcome_in s = {.kind = ATTEMPT_SCHEDULED, .tries = 1, .max_tries = 1,
				       .code = 502, .retry_after_ms = -1,
				       .retry_count = out.retry_count, .now_ms = out.at_ms};
		outcome_decide(&p, &b, &s, rand_half_cb, NULL, &out);
		rounds++;
	}
	assert_int_equal(out.next, OUTCOME_DLQ);
	assert_int_equal(out.why, OUTCOME_WHY_EXHAUSTED);
	assert_int_equal(rounds, p.max_retries);
	assert_int_equal(out.retry_count, p.max_retries);
}

static void test_names(void **state)
{
	assert_string_equal(outcome_next_name(OUTCOME_DLQ), "dead");
	assert_string_equal(outcome_next_name(OUTCOME_DONE), "processed");
	assert_string_equal(outcome_why_name(OUTCOME_WHY_CIRCUIT_OPEN), "circuit_open");
	assert_string_equal(outcome_why_name(OUTCOME_WHY_NONE), "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_walk_to_dlq),
		cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
