/* test_outcome.c: core/outcome.c as a table: every rule of docs/retries.md (immediate round,
 * scheduled layer, manual replay, permanent codes, Retry-After, the breaker's delay
 * actions, the dead-letter queue) with its edges (the last try of a round, max_retries
 * reached vs one left, retry forever, Retry-After longer than the stagger or than
 * retry_after_max, the 10-year cap); what a round does to its subscription (the breaker
 * opening at max_errors, the probe closing or reopening it, disable_after, a recovery);
 * per-key ordering (which results release a key); and a round handed back. Random draws
 * are fixed at 0.5; the breaker is the default one (max_errors 1000 within 3 min, 5 delay
 * actions) unless a row turns it off. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "core/outcome.h"

#define NOW 1700000000000LL
#define H (3600 * 1000LL)
#define MIN (60 * 1000LL)
#define WINDOW (3 * MIN) /* the default failure_window */

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

/* What a row expects of the decision; a field a row leaves out is expected to be 0
 * (false, OUTCOME_BREAKER_SAME, BREAKER_CLOSED). */
struct expect {
	/* the delivery */
	enum outcome_next next;
	enum outcome_why why;
	int64_t delay_ms;       /* at_ms is expected at NOW + delay_ms for TRY, RETRY and DELAY */
	int retry_count;
	int delay_actions;
	bool release_key;
	/* its subscription: the transition, then the state to keep */
	bool counted;
	enum outcome_breaker breaker;
	enum breaker_state breaker_state;
	int failures;
	int64_t open_until_ms;
	int64_t failing_since_ms;
	bool disable_asked;
	bool disable;           /* disable now, why OUTCOME_DISABLE_FAILING ... */
	int64_t disable_after_ms; /* ... with its disable_after, resolved */
	bool recovered;         /* a recovery ... */
	int64_t failing_ms;     /* ... after a streak this long */
};

struct row {
	const char *name;
	enum policy_change policy;  /* P_DEFAULT when left out */
	bool breaker_off;           /* circuit_breaker.enabled false */
	struct outcome_in in;       /* now_ms is set to NOW; a retry_after_ms left out (0) is
	                               read as none (-1): no row sends a Retry-After of 0 */
	struct expect want;
};

#define IMM ATTEMPT_IMMEDIATE
#define SCH ATTEMPT_SCHEDULED
#define MAN ATTEMPT_MANUAL

static const struct row rows[] = {
	/* the immediate round */
	{.name = "2xx on the first try",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 200},
	 .want = {.next = OUTCOME_DONE}},
	{.name = "204 is success too",
	 .in = {.kind = IMM, .tries = 2, .max_tries = 3, .code = 204},
	 .want = {.next = OUTCOME_DONE}},
	{.name = "500, first of 3 tries: stagger 100 ms",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 500},
	 .want = {.next = OUTCOME_TRY, .delay_ms = 100}},
	{.name = "500, second of 3: stagger grows to 200 ms",
	 .in = {.kind = IMM, .tries = 2, .max_tries = 3, .code = 500},
	 .want = {.next = OUTCOME_TRY, .delay_ms = 200}},
	{.name = "500, 57 s into the round, a try may take 4 s: it would end past the minute, "
		 "so the round ends and a scheduled retry follows",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 500,
		.round_started_ms = NOW - 57000, .try_max_ms = 4000},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000}},
	{.name = "500, 55 s into the round, a try may take 4 s: it fits (55 + 0.1 + 4 < 60)",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 500,
		.round_started_ms = NOW - 55000, .try_max_ms = 4000},
	 .want = {.next = OUTCOME_TRY, .delay_ms = 100}},
	{.name = "500 on the last try of the round: scheduled retry in 3 s",
	 .in = {.kind = IMM, .tries = 3, .max_tries = 3, .code = 500},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000}},
	{.name = "3xx is a failure (redirects are not followed)",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 301},
	 .want = {.next = OUTCOME_TRY, .delay_ms = 100}},
	{.name = "mapped transport code 504 is retried",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 504},
	 .want = {.next = OUTCOME_TRY, .delay_ms = 100}},
	{.name = "the sink ended the round early",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 500, .end_round = true},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000}},
	{.name = "immediate 1: one try, then the schedule",
	 .policy = P_ONE_TRY,
	 .in = {.kind = IMM, .tries = 1, .max_tries = 1, .code = 500},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000}},

	/* permanent codes, and failures a sink calls permanent */
	{.name = "SSRF guard refusal (sink: permanent) on the first try",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 403, .permanent = true},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_PERMANENT}},
	{.name = "SSRF guard refusal in a scheduled round",
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 403, .permanent = true,
		.retry_count = 1},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_PERMANENT, .retry_count = 2}},
	{.name = "400 is retried by default (every non-2xx is)",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 400},
	 .want = {.next = OUTCOME_TRY, .delay_ms = 100}},
	{.name = "permanent 400 dead-letters at once",
	 .policy = P_PERMANENT_400,
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 400},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_PERMANENT}},
	{.name = "permanent 400 in a scheduled round",
	 .policy = P_PERMANENT_400,
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 400, .retry_count = 1},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_PERMANENT, .retry_count = 2}},
	{.name = "permanent 400 in a manual round",
	 .policy = P_PERMANENT_400,
	 .in = {.kind = MAN, .tries = 1, .max_tries = 3, .code = 400, .retry_count = 3},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_PERMANENT, .retry_count = 3}},
	{.name = "401 with only 400 permanent is retried",
	 .policy = P_PERMANENT_400,
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 401},
	 .want = {.next = OUTCOME_TRY, .delay_ms = 100}},

	/* Retry-After (429 and 503 only) */
	{.name = "429 Retry-After 5 s > stagger: round ends, retry waits 5 s",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 429, .retry_after_ms = 5000},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 5000}},
	{.name = "429 Retry-After 50 ms < stagger: the round goes on",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 429, .retry_after_ms = 50},
	 .want = {.next = OUTCOME_TRY, .delay_ms = 100}},
	{.name = "503 Retry-After 1 s < the 3 s interval: the policy wins",
	 .in = {.kind = IMM, .tries = 3, .max_tries = 3, .code = 503, .retry_after_ms = 1000},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000}},
	{.name = "503 Retry-After 2 h is cut to retry_after_max 1 h",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 503, .retry_after_ms = 2 * H},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = H}},
	{.name = "500 with Retry-After: the header does not apply",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 500, .retry_after_ms = 5000},
	 .want = {.next = OUTCOME_TRY, .delay_ms = 100}},
	{.name = "429 Retry-After in a scheduled round",
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 429, .retry_after_ms = 9000},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 9000, .retry_count = 1}},

	/* the scheduled layer */
	{.name = "first scheduled retry fails, 2 of 3 left",
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 500},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .retry_count = 1}},
	{.name = "second scheduled retry fails, 1 left",
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 500, .retry_count = 1},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .retry_count = 2}},
	{.name = "third scheduled retry fails: max_retries reached, dead",
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 500, .retry_count = 2},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_EXHAUSTED, .retry_count = 3}},
	{.name = "beyond max_retries (policy lowered meanwhile): dead",
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 500, .retry_count = 7},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_EXHAUSTED, .retry_count = 8}},
	{.name = "scheduled retry succeeds: counted",
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 200, .retry_count = 2},
	 .want = {.next = OUTCOME_DONE, .retry_count = 3}},
	{.name = "retry forever (max_retries 0) after 1000 retries",
	 .policy = P_FOREVER,
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 500, .retry_count = 1000},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .retry_count = 1001}},
	{.name = "linear: the third retry waits 3 x 3 s",
	 .policy = P_LINEAR,
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 500, .retry_count = 1},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 9000, .retry_count = 2}},
	{.name = "exponential: retry 2 drawn in [10 s, 40 s] at 0.5",
	 .policy = P_EXPONENTIAL,
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 500},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 25000, .retry_count = 1}},
	{.name = "exponential: retry 1 drawn in [10 s, 20 s] at 0.5",
	 .policy = P_EXPONENTIAL,
	 .in = {.kind = IMM, .tries = 3, .max_tries = 3, .code = 500},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 15000}},
	{.name = "a 20-year interval is capped at 10 years",
	 .policy = P_HUGE_INTERVAL,
	 .in = {.kind = IMM, .tries = 3, .max_tries = 3, .code = 500},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = OUTCOME_DELAY_MAX_MS}},

	/* manual rounds (operator replay) */
	{.name = "replay, first of 3 tries fails: the round goes on",
	 .in = {.kind = MAN, .tries = 1, .max_tries = 3, .code = 500, .retry_count = 3},
	 .want = {.next = OUTCOME_TRY, .delay_ms = 100, .retry_count = 3}},
	{.name = "replay round fails: back to the DLQ, no schedule",
	 .in = {.kind = MAN, .tries = 3, .max_tries = 3, .code = 500, .retry_count = 3},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_MANUAL, .retry_count = 3}},
	{.name = "replay under retry-forever still ends in the DLQ",
	 .policy = P_FOREVER,
	 .in = {.kind = MAN, .tries = 3, .max_tries = 3, .code = 500, .retry_count = 3},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_MANUAL, .retry_count = 3}},
	{.name = "replay succeeds",
	 .in = {.kind = MAN, .tries = 2, .max_tries = 3, .code = 200, .retry_count = 3},
	 .want = {.next = OUTCOME_DONE, .retry_count = 3}},
	{.name = "deleted subscription: 410 in a manual round",
	 .policy = P_ONE_TRY,
	 .in = {.kind = MAN, .tries = 1, .max_tries = 1, .code = 410},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_MANUAL}},

	/* the circuit breaker's delay actions (max_delay_actions 5) */
	{.name = "breaker open: first delay action in [10 s, 60 s]",
	 .in = {.kind = IMM, .refused = true, .max_tries = 3},
	 .want = {.next = OUTCOME_DELAY, .delay_ms = 35000, .delay_actions = 1}},
	{.name = "breaker open: fifth delay action",
	 .in = {.kind = SCH, .refused = true, .max_tries = 1, .retry_count = 2, .delay_actions = 4},
	 .want = {.next = OUTCOME_DELAY, .delay_ms = 35000, .retry_count = 2, .delay_actions = 5}},
	{.name = "breaker open after 5 delay actions: dead, circuit_open",
	 .in = {.kind = SCH, .refused = true, .max_tries = 1, .retry_count = 2, .delay_actions = 5},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_CIRCUIT_OPEN, .retry_count = 2,
		  .delay_actions = 5}},

	/* the circuit breaker: a round that ended with attempts counts once */
	{.name = "a failed round counts: 1 of max_errors",
	 .in = {.kind = IMM, .tries = 3, .max_tries = 3, .code = 500, .tracked = true},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .counted = true, .failures = 1,
		  .failing_since_ms = NOW}},
	{.name = "a round that goes on counts nothing yet",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 500, .tracked = true,
		.sub = {.breaker = {.failures = 7, .window_start_ms = NOW - MIN}}},
	 .want = {.next = OUTCOME_TRY, .delay_ms = 100, .failures = 7}},
	{.name = "the max_errors-th failed round in the window opens the breaker",
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 500, .tracked = true,
		.sub = {.breaker = {.failures = 999, .window_start_ms = NOW - MIN},
			.failing_since_ms = NOW - MIN}},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .retry_count = 1, .counted = true,
		  .breaker = OUTCOME_BREAKER_OPENED, .breaker_state = BREAKER_OPEN,
		  .open_until_ms = NOW - MIN + WINDOW, .failing_since_ms = NOW - MIN}},
	{.name = "a dead round counts as a failure too",
	 .policy = P_PERMANENT_400,
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 400, .tracked = true,
		.sub = {.breaker = {.failures = 999, .window_start_ms = NOW - MIN},
			.failing_since_ms = NOW - MIN}},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_PERMANENT, .counted = true,
		  .breaker = OUTCOME_BREAKER_OPENED, .breaker_state = BREAKER_OPEN,
		  .open_until_ms = NOW - MIN + WINDOW, .failing_since_ms = NOW - MIN}},
	{.name = "failures of a window that ended: the count starts again",
	 .in = {.kind = IMM, .tries = 3, .max_tries = 3, .code = 500, .tracked = true,
		.sub = {.breaker = {.failures = 999, .window_start_ms = NOW - WINDOW},
			.failing_since_ms = NOW - WINDOW}},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .counted = true, .failures = 1,
		  .failing_since_ms = NOW - WINDOW}},
	{.name = "a success does not lower the count",
	 .in = {.kind = IMM, .tries = 2, .max_tries = 3, .code = 200, .tracked = true,
		.sub = {.breaker = {.failures = 5, .window_start_ms = NOW - MIN}}},
	 .want = {.next = OUTCOME_DONE, .counted = true, .failures = 5}},
	{.name = "the half-open probe succeeds: closed",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 200, .tracked = true,
		.probe = true,
		.sub = {.breaker = {.state = BREAKER_HALF_OPEN, .probing = 1,
				    .opened_at_ms = NOW - WINDOW}}},
	 .want = {.next = OUTCOME_DONE, .counted = true, .breaker = OUTCOME_BREAKER_CLOSED}},
	{.name = "the probe is one request: it fails, open again for a whole window",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 503, .tracked = true,
		.probe = true,
		.sub = {.breaker = {.state = BREAKER_HALF_OPEN, .probing = 1,
				    .opened_at_ms = NOW - WINDOW},
			.failing_since_ms = NOW - WINDOW}},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .counted = true,
		  .breaker = OUTCOME_BREAKER_REOPENED, .breaker_state = BREAKER_OPEN,
		  .open_until_ms = NOW + WINDOW, .failing_since_ms = NOW - WINDOW}},
	{.name = "a round under way when the breaker opened ends: only the probe moves it",
	 .in = {.kind = IMM, .tries = 3, .max_tries = 3, .code = 500, .tracked = true,
		.sub = {.breaker = {.state = BREAKER_OPEN, .open_until_ms = NOW + MIN,
				    .opened_at_ms = NOW - MIN},
			.failing_since_ms = NOW - MIN}},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .counted = true,
		  .breaker_state = BREAKER_OPEN, .open_until_ms = NOW + MIN,
		  .failing_since_ms = NOW - MIN}},
	{.name = "a refused round counts nothing",
	 .in = {.kind = IMM, .refused = true, .max_tries = 3, .tracked = true,
		.sub = {.breaker = {.state = BREAKER_OPEN, .open_until_ms = NOW + MIN}}},
	 .want = {.next = OUTCOME_DELAY, .delay_ms = 35000, .delay_actions = 1,
		  .breaker_state = BREAKER_OPEN, .open_until_ms = NOW + MIN}},
	{.name = "breaker turned off: failures are not counted",
	 .breaker_off = true,
	 .in = {.kind = IMM, .tries = 3, .max_tries = 3, .code = 500, .tracked = true,
		.sub = {.breaker = {.failures = 999, .window_start_ms = NOW - MIN}}},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .counted = true, .failures = 999,
		  .failing_since_ms = NOW}},
	{.name = "a deleted subscription (no state kept) counts nothing",
	 .policy = P_ONE_TRY,
	 .in = {.kind = MAN, .tries = 1, .max_tries = 1, .code = 410, .probe = true,
		.disable_after_ms = 1},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_MANUAL}},

	/* endpoint health: disable_after (the subscription's; -1 = the setting's) */
	{.name = "the first failure starts the failing streak",
	 .in = {.kind = IMM, .tries = 3, .max_tries = 3, .code = 500, .tracked = true,
		.disable_after_ms = H},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .counted = true, .failures = 1,
		  .failing_since_ms = NOW}},
	{.name = "failing for just under disable_after: not yet",
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 500, .tracked = true,
		.sub = {.failing_since_ms = NOW - H + 1}, .disable_after_ms = H},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .retry_count = 1, .counted = true,
		  .failures = 1, .failing_since_ms = NOW - H + 1}},
	{.name = "failing for disable_after: disable it",
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 500, .tracked = true,
		.sub = {.failing_since_ms = NOW - H}, .disable_after_ms = H},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .retry_count = 1, .counted = true,
		  .failures = 1, .failing_since_ms = NOW - H, .disable_asked = true,
		  .disable = true, .disable_after_ms = H}},
	{.name = "disable_after -1: the setting's applies",
	 .in = {.kind = IMM, .tries = 3, .max_tries = 3, .code = 500, .tracked = true,
		.sub = {.failing_since_ms = NOW - 2 * H}, .disable_after_ms = -1,
		.disable_after_default_ms = 2 * H},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .counted = true, .failures = 1,
		  .failing_since_ms = NOW - 2 * H, .disable_asked = true, .disable = true,
		  .disable_after_ms = 2 * H}},
	{.name = "disable_after 0 never disables, whatever the setting",
	 .in = {.kind = IMM, .tries = 3, .max_tries = 3, .code = 500, .tracked = true,
		.sub = {.failing_since_ms = NOW - 100 * H}, .disable_after_default_ms = H},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .counted = true, .failures = 1,
		  .failing_since_ms = NOW - 100 * H}},
	{.name = "disabled once per streak",
	 .in = {.kind = IMM, .tries = 3, .max_tries = 3, .code = 500, .tracked = true,
		.sub = {.failing_since_ms = NOW - 2 * H, .disable_asked = true},
		.disable_after_ms = H},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000, .counted = true, .failures = 1,
		  .failing_since_ms = NOW - 2 * H, .disable_asked = true}},
	{.name = "a refused round neither starts nor extends a streak",
	 .in = {.kind = IMM, .refused = true, .max_tries = 3, .tracked = true,
		.sub = {.breaker = {.state = BREAKER_OPEN, .open_until_ms = NOW + MIN},
			.failing_since_ms = NOW - 2 * H}, .disable_after_ms = H},
	 .want = {.next = OUTCOME_DELAY, .delay_ms = 35000, .delay_actions = 1,
		  .breaker_state = BREAKER_OPEN, .open_until_ms = NOW + MIN,
		  .failing_since_ms = NOW - 2 * H}},
	{.name = "a success after a streak of a failure window: recovered",
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 200, .tracked = true,
		.sub = {.failing_since_ms = NOW - WINDOW, .disable_asked = true},
		.disable_after_ms = H},
	 .want = {.next = OUTCOME_DONE, .retry_count = 1, .counted = true, .recovered = true,
		  .failing_ms = WINDOW}},
	{.name = "a success after a shorter streak ends it quietly",
	 .in = {.kind = IMM, .tries = 2, .max_tries = 3, .code = 204, .tracked = true,
		.sub = {.failing_since_ms = NOW - WINDOW + 1}},
	 .want = {.next = OUTCOME_DONE, .counted = true}},

	/* per-key ordering: a final result releases the key (block or skip alike: the store's
	 * claim rule holds a dead one's key or passes it over) */
	{.name = "key-ordered, delivered: the next of its key may go",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 200, .key_ordered = true},
	 .want = {.next = OUTCOME_DONE, .release_key = true}},
	{.name = "key-ordered, dead: released",
	 .in = {.kind = SCH, .tries = 1, .max_tries = 1, .code = 500, .retry_count = 2,
		.key_ordered = true},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_EXHAUSTED, .retry_count = 3,
		  .release_key = true}},
	{.name = "key-ordered, another try in the round: the key stays held",
	 .in = {.kind = IMM, .tries = 1, .max_tries = 3, .code = 500, .key_ordered = true},
	 .want = {.next = OUTCOME_TRY, .delay_ms = 100}},
	{.name = "key-ordered, a scheduled retry: the key stays held",
	 .in = {.kind = IMM, .tries = 3, .max_tries = 3, .code = 500, .key_ordered = true},
	 .want = {.next = OUTCOME_RETRY, .delay_ms = 3000}},
	{.name = "key-ordered, a delay action: the key stays held",
	 .in = {.kind = IMM, .refused = true, .max_tries = 3, .key_ordered = true},
	 .want = {.next = OUTCOME_DELAY, .delay_ms = 35000, .delay_actions = 1}},
	{.name = "key-ordered, dead after its delay actions: released",
	 .in = {.kind = SCH, .refused = true, .max_tries = 1, .delay_actions = 5,
		.key_ordered = true},
	 .want = {.next = OUTCOME_DLQ, .why = OUTCOME_WHY_CIRCUIT_OPEN, .delay_actions = 5,
		  .release_key = true}},
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
		const struct expect *w = &r->want;
		struct outcome out;

		policy_for(r->policy, &p);
		circuit_breaker_defaults(&b);
		b.enabled = !r->breaker_off;
		in.now_ms = NOW;
		if (in.retry_after_ms == 0)
			in.retry_after_ms = -1;
		outcome_decide(&p, &b, &in, rand_half_cb, NULL, &out);
		int64_t want_at = w->next == OUTCOME_TRY || w->next == OUTCOME_RETRY ||
						  w->next == OUTCOME_DELAY
					  ? NOW + w->delay_ms : 0;
		if (out.next != w->next || out.why != w->why || out.delay_ms != w->delay_ms ||
		    out.at_ms != want_at || out.retry_count != w->retry_count ||
		    out.delay_actions != w->delay_actions || out.release_key != w->release_key) {
			print_error("row %zu \"%s\": got %s/%s delay %lld retries %d delay actions %d "
				    "release %d; want %s/%s delay %lld retries %d delay actions %d "
				    "release %d\n", i, r->name, outcome_next_name(out.next),
				    outcome_why_name(out.why), (long long)out.delay_ms,
				    out.retry_count, out.delay_actions, out.release_key,
				    outcome_next_name(w->next), outcome_why_name(w->why),
				    (long long)w->delay_ms, w->retry_count, w->delay_actions,
				    w->release_key);
			failed++;
		}
		const struct breaker *k = &out.sub.breaker;
		if (out.counted != w->counted || out.breaker != w->breaker ||
		    k->state != w->breaker_state || k->failures != w->failures ||
		    k->open_until_ms != w->open_until_ms ||
		    out.sub.failing_since_ms != w->failing_since_ms ||
		    out.sub.disable_asked != w->disable_asked) {
			print_error("row %zu \"%s\": got counted %d, breaker %s, %s with %d failures "
				    "open until %lld, failing since %lld, disable asked %d; want "
				    "counted %d, breaker %s, %s with %d failures open until %lld, "
				    "failing since %lld, disable asked %d\n", i, r->name, out.counted,
				    outcome_breaker_name(out.breaker), breaker_state_name(k->state),
				    k->failures, (long long)k->open_until_ms,
				    (long long)out.sub.failing_since_ms, out.sub.disable_asked,
				    w->counted, outcome_breaker_name(w->breaker),
				    breaker_state_name(w->breaker_state), w->failures,
				    (long long)w->open_until_ms, (long long)w->failing_since_ms,
				    w->disable_asked);
			failed++;
		}
		/* the disable and the recovery, each with the streak it ends */
		int64_t since = r->in.sub.failing_since_ms;
		bool disable_ok = out.disable.now == w->disable &&
				  (!w->disable || (out.disable.why == OUTCOME_DISABLE_FAILING &&
						   out.disable.after_ms == w->disable_after_ms &&
						   out.disable.failing_since_ms == since));
		bool recovery_ok = out.recovery.now == w->recovered &&
				   (!w->recovered || (out.recovery.failing_ms == w->failing_ms &&
						      out.recovery.failing_since_ms == since));
		if (!disable_ok || !recovery_ok) {
			print_error("row %zu \"%s\": got disable %d (after %lld, since %lld), "
				    "recovered %d (%lld ms, since %lld); want disable %d (after %lld), "
				    "recovered %d (%lld ms), since %lld\n", i, r->name,
				    out.disable.now, (long long)out.disable.after_ms,
				    (long long)out.disable.failing_since_ms, out.recovery.now,
				    (long long)out.recovery.failing_ms,
				    (long long)out.recovery.failing_since_ms, w->disable,
				    (long long)w->disable_after_ms, w->recovered,
				    (long long)w->failing_ms, (long long)since);
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

/* A subscription whose every round fails, one round a second, with max_errors 5 within
 * a minute and disable_after 20 s: its state goes from one decision to the next as the
 * dispatcher keeps it. The 5th round opens the breaker, the 21st (20 s into the streak)
 * disables the subscription, and nothing else does either twice. */
static void test_walk_failing_subscription(void **state)
{
	struct retry_policy p;
	struct circuit_breaker_config b;
	struct outcome_sub_state sub = {0};
	int opened_at = 0, disabled_at = 0, opened = 0, disabled = 0;

	retry_policy_defaults(&p);
	circuit_breaker_defaults(&b);
	b.max_errors = 5;
	b.failure_window_ms = MIN;
	breaker_init(&sub.breaker);
	for (int round = 1; round <= 40; round++) {
		struct outcome_in in = {.kind = ATTEMPT_IMMEDIATE, .tries = 3, .max_tries = 3,
					.code = 500, .retry_after_ms = -1, .tracked = true,
					.sub = sub, .disable_after_ms = 20000,
					.now_ms = NOW + (round - 1) * 1000LL};
		struct outcome out;

		outcome_decide(&p, &b, &in, rand_half_cb, NULL, &out);
		assert_true(out.counted);
		if (out.breaker == OUTCOME_BREAKER_OPENED) {
			opened++;
			opened_at = round;
		}
		if (out.disable.now) {
			disabled++;
			disabled_at = round;
		}
		sub = out.sub;
	}
	assert_int_equal(opened, 1);
	assert_int_equal(opened_at, 5);
	assert_int_equal(sub.breaker.open_until_ms, NOW + MIN); /* the window of round 1 */
	assert_int_equal(disabled, 1);
	assert_int_equal(disabled_at, 21);
	assert_int_equal(sub.failing_since_ms, NOW);
}

/* A round handed back undecided: due at now + the delay, the delivery's counts as they
 * were, nothing counted; a probe handed back is abandoned (the next round asking is the
 * probe), any other round leaves the breaker alone. */
static void test_release(void **state)
{
	struct outcome_in in = {.kind = ATTEMPT_SCHEDULED, .tries = 1, .max_tries = 1,
				.code = 500, .retry_after_ms = -1, .retry_count = 2,
				.delay_actions = 1, .key_ordered = true, .tracked = true,
				.probe = true, .now_ms = NOW,
				.sub = {.breaker = {.state = BREAKER_HALF_OPEN, .probing = 1},
					.failing_since_ms = NOW - H}};
	struct outcome out;

	outcome_release(&in, 500, &out);
	assert_int_equal(out.next, OUTCOME_RELEASE);
	assert_int_equal(out.at_ms, NOW + 500);
	assert_int_equal(out.delay_ms, 500);
	assert_int_equal(out.retry_count, 2);
	assert_int_equal(out.delay_actions, 1);
	assert_false(out.release_key);
	assert_false(out.counted);
	assert_false(out.disable.now);
	assert_false(out.recovery.now);
	assert_int_equal(out.breaker, OUTCOME_BREAKER_PROBE_ABANDONED);
	assert_int_equal(out.sub.breaker.state, BREAKER_HALF_OPEN);
	assert_int_equal(out.sub.breaker.probing, 0);
	assert_int_equal(out.sub.failing_since_ms, NOW - H);

	in.probe = false;
	outcome_release(&in, 0, &out);
	assert_int_equal(out.at_ms, NOW);
	assert_int_equal(out.breaker, OUTCOME_BREAKER_SAME);
	assert_int_equal(out.sub.breaker.probing, 1);
}

static void test_names(void **state)
{
	assert_string_equal(outcome_next_name(OUTCOME_DLQ), "dead");
	assert_string_equal(outcome_next_name(OUTCOME_DONE), "processed");
	assert_string_equal(outcome_why_name(OUTCOME_WHY_CIRCUIT_OPEN), "circuit_open");
	assert_string_equal(outcome_why_name(OUTCOME_WHY_NONE), "");
	assert_string_equal(outcome_next_name(OUTCOME_RELEASE), "released");
	assert_string_equal(outcome_breaker_name(OUTCOME_BREAKER_REOPENED), "reopened");
	assert_string_equal(outcome_breaker_name(OUTCOME_BREAKER_PROBE_ABANDONED),
			    "probe_abandoned");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_walk_to_dlq),
		cmocka_unit_test(test_walk_failing_subscription),
		cmocka_unit_test(test_release),
		cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
