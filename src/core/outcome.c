/* outcome.c: the next state of a delivery after an attempt, a refused round or a round
 * handed back, and what the round does to its subscription's breaker and health (see
 * outcome.h for the rules). Pure: composes core/retry.c's delays and core/breaker.c's
 * state machine on a copy; must not read a clock, log or allocate. */
#include "core/outcome.h"

#include <string.h>

static void at(struct outcome *out, enum outcome_next next, int64_t now_ms, int64_t delay_ms)
{
	if (delay_ms < 0)
		delay_ms = 0;
	if (delay_ms > OUTCOME_DELAY_MAX_MS)
		delay_ms = OUTCOME_DELAY_MAX_MS;
	out->next = next;
	out->delay_ms = delay_ms;
	out->at_ms = now_ms + delay_ms;
}

static void dead(struct outcome *out, enum outcome_why why)
{
	out->next = OUTCOME_DLQ;
	out->why = why;
	out->at_ms = 0;
	out->delay_ms = 0;
}

/* The delivery's part of the decision (out->next and what goes with it). */
static void decide_delivery(const struct retry_policy *p, const struct circuit_breaker_config *breaker,
			    const struct outcome_in *in, retry_rand_cb rnd, void *rnd_ctx,
			    struct outcome *out)
{
	if (in->refused) {
		/* No request was made: attempts and retries are not counted. */
		if (in->delay_actions >= breaker->max_delay_actions) {
			dead(out, OUTCOME_WHY_CIRCUIT_OPEN);
			return;
		}
		out->delay_actions = in->delay_actions + 1;
		at(out, OUTCOME_DELAY, in->now_ms, retry_requeue_delay(p, rnd, rnd_ctx));
		return;
	}

	if (in->kind == ATTEMPT_SCHEDULED)
		out->retry_count = in->retry_count + 1;
	if (retry_is_success(in->code)) {
		out->next = OUTCOME_DONE;
		return;
	}
	if (in->permanent) {
		dead(out, OUTCOME_WHY_PERMANENT);
		return;
	}
	/* A half-open probe is one request: its outcome alone moves the breaker. */
	int max_tries = in->tracked && in->probe ? 1 : in->max_tries;
	if (!in->end_round &&
	    retry_immediate_continue(p, in->tries, max_tries, in->code, in->retry_after_ms)) {
		int64_t delay = retry_immediate_delay(p, in->tries + 1);
		/* A round of tries stays within a minute, the tries' own time included: a try
		 * that could end past it is left to the next layer. */
		if (!in->round_started_ms || !in->try_max_ms ||
		    in->now_ms + delay + in->try_max_ms - in->round_started_ms <=
			    RETRY_IMMEDIATE_ROUND_CAP_MS) {
			at(out, OUTCOME_TRY, in->now_ms, delay);
			return;
		}
	}
	/* The round is over and failed: the scheduled layer, or the dead-letter queue. */
	if (retry_is_permanent(p, in->code)) {
		dead(out, OUTCOME_WHY_PERMANENT);
		return;
	}
	if (in->kind == ATTEMPT_MANUAL) {
		dead(out, OUTCOME_WHY_MANUAL);
		return;
	}
	int64_t delay = retry_next_delay(p, in->kind, out->retry_count, in->code,
					 in->retry_after_ms, rnd, rnd_ctx);
	if (delay < 0) {
		dead(out, OUTCOME_WHY_EXHAUSTED);
		return;
	}
	at(out, OUTCOME_RETRY, in->now_ms, delay);
}

/* The round ended with attempts: it counts once for the subscription's breaker and for
 * its endpoint health (the failing streak, disable_after, a recovery). */
static void count_round(const struct circuit_breaker_config *c, const struct outcome_in *in,
			bool success, struct outcome *out)
{
	struct outcome_sub_state *s = &out->sub;
	enum breaker_state before = in->sub.breaker.state, after;
	int64_t now = in->now_ms;
	int64_t disable_after = in->disable_after_ms >= 0 ? in->disable_after_ms
							  : in->disable_after_default_ms;

	out->counted = true;
	/* Endpoint health: how long every attempt has failed (this instance's view). */
	if (success) {
		if (s->failing_since_ms && now - s->failing_since_ms >= c->failure_window_ms) {
			out->recovery.now = true;
			out->recovery.failing_since_ms = s->failing_since_ms;
			out->recovery.failing_ms = now - s->failing_since_ms;
		}
		s->failing_since_ms = 0;
		s->disable_asked = false;
	} else {
		if (!s->failing_since_ms)
			s->failing_since_ms = now;
		if (disable_after > 0 && !s->disable_asked &&
		    now - s->failing_since_ms >= disable_after) {
			s->disable_asked = true;
			out->disable.now = true;
			out->disable.why = OUTCOME_DISABLE_FAILING;
			out->disable.after_ms = disable_after;
			out->disable.failing_since_ms = s->failing_since_ms;
		}
	}
	breaker_record(&s->breaker, c, now, success, in->probe);
	after = s->breaker.state;
	/* A probe's failure opens the breaker again even though it was OPEN in the struct
	 * before (half-open is only a state in time until a round is admitted). */
	if (after == BREAKER_OPEN && in->probe)
		out->breaker = OUTCOME_BREAKER_REOPENED;
	else if (after == BREAKER_OPEN && before != BREAKER_OPEN)
		out->breaker = OUTCOME_BREAKER_OPENED;
	else if (after == BREAKER_CLOSED && before != BREAKER_CLOSED)
		out->breaker = OUTCOME_BREAKER_CLOSED;
}

void outcome_decide(const struct retry_policy *p, const struct circuit_breaker_config *breaker,
		    const struct outcome_in *in, retry_rand_cb rnd, void *rnd_ctx,
		    struct outcome *out)
{
	memset(out, 0, sizeof(*out));
	out->retry_count = in->retry_count;
	out->delay_actions = in->delay_actions;
	out->sub = in->sub;

	decide_delivery(p, breaker, in, rnd, rnd_ctx, out);
	if (in->key_ordered && (out->next == OUTCOME_DONE || out->next == OUTCOME_DLQ))
		out->release_key = true;
	if (in->tracked && !in->refused && in->tries > 0 && out->next != OUTCOME_TRY)
		count_round(breaker, in, out->next == OUTCOME_DONE, out);
}

void outcome_release(const struct outcome_in *in, int64_t delay_ms, struct outcome *out)
{
	memset(out, 0, sizeof(*out));
	out->retry_count = in->retry_count;
	out->delay_actions = in->delay_actions;
	out->sub = in->sub;
	at(out, OUTCOME_RELEASE, in->now_ms, delay_ms);
	if (in->tracked && in->probe) {
		breaker_probe_abandoned(&out->sub.breaker);
		out->breaker = OUTCOME_BREAKER_PROBE_ABANDONED;
	}
}

const char *outcome_next_name(enum outcome_next next)
{
	static const char *const names[] = {"try", "processed", "retry", "delay", "dead",
					    "released"};
	return (unsigned)next < sizeof(names) / sizeof(names[0]) ? names[next] : "?";
}

const char *outcome_why_name(enum outcome_why why)
{
	static const char *const names[] = {"", "permanent", "manual", "exhausted", "circuit_open"};
	return (unsigned)why < sizeof(names) / sizeof(names[0]) ? names[why] : "?";
}

const char *outcome_breaker_name(enum outcome_breaker b)
{
	static const char *const names[] = {"same", "opened", "reopened", "closed",
					    "probe_abandoned"};
	return (unsigned)b < sizeof(names) / sizeof(names[0]) ? names[b] : "?";
}
