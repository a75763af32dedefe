/* outcome.c: the next state of a delivery after an attempt or a refused round (see
 * outcome.h for the rules). Pure: composes core/retry.c's delays; must not read a clock,
 * log or allocate. */
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

void outcome_decide(const struct retry_policy *p, const struct circuit_breaker_config *breaker,
		    const struct outcome_in *in, retry_rand_cb rnd, void *rnd_ctx,
		    struct outcome *out)
{
	memset(out, 0, sizeof(*out));
	out->retry_count = in->retry_count;
	out->delay_actions = in->delay_actions;

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
	if (!in->end_round &&
	    retry_immediate_continue(p, in->tries, in->max_tries, in->code, in->retry_after_ms)) {
		at(out, OUTCOME_TRY, in->now_ms, retry_immediate_delay(p, in->tries + 1));
		return;
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

const char *outcome_next_name(enum outcome_next next)
{
	static const char *const names[] = {"try", "processed", "retry", "delay", "dead"};
	return (unsigned)next < sizeof(names) / sizeof(names[0]) ? names[next] : "?";
}

const char *outcome_why_name(enum outcome_why why)
{
	static const char *const names[] = {"", "permanent", "manual", "exhausted", "circuit_open"};
	return (unsigned)why < sizeof(names) / sizeof(names[0]) ? names[why] : "?";
}
