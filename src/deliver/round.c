/* round.c: the life of one delivery's round in the dispatcher (see dispatcher.c for the
 * loop around it):
 *
 *   claimed -> checks: subscription, sink, circuit breaker (limits.h)
 *     -> refused by an open breaker -> a delay action or the DLQ (core/outcome.h)
 *     -> held back by max_in_flight / rate_limit -> parked in its subscription's queue
 *     -> an attempt in its sink -> attempt over (sink_env.done)
 *        -> core/outcome.h decides: another try after a stagger (waiting), or the round
 *           is over -> its result goes on the done list, for the writer
 *
 * Must not block or touch the store: results leave through the done list only. */
#include "deliver/dispatcher_int.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"
#include "core/ops_event.h"
#include "otel/otlp.h"
#include "util/clock.h"
#include "util/duration.h"
#include "util/log.h"

/* ---- small helpers ------------------------------------------------------------------ */

double dispatcher_rng_next(void *ctx)
{
	uint64_t *s = ctx;
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (double)(*s >> 11) / 9007199254740992.0;
}

/* ---- per-subscription state: breaker and limits (limits.h) ---------------------------- */

/* Takes what the round's next attempt needs: room under its endpoint's adaptive limit,
 * then its subscription's limits. 1 when it may go now, 0 otherwise (nothing taken). */
static int round_limits_take(struct round *j, int64_t now_us)
{
	if (j->ep && !endpoint_has_room(j->ep))
		return 0;
	if (j->limits && !limits_take(j->limits, j->sub, now_us))
		return 0;
	j->holds_slot = j->limits != NULL;
	if (j->ep) {
		j->ep_in_flight = endpoint_begin(j->ep, &j->ep_req, now_us);
		j->holds_ep = 1;
	}
	return 1;
}

/* The attempt is over: its places under the limits go back. */
static void round_slot_put(struct round *j)
{
	if (j->holds_slot) {
		limits_put(j->limits);
		j->holds_slot = 0;
	}
	if (j->holds_ep) {
		endpoint_end(j->ep, &j->ep_req);
		j->holds_ep = 0;
	}
}

/* The round waits in its subscription's queue (parked) or leaves it: counted in its
 * endpoint's queue length for stats. */
static void round_queued(struct round *j, int queued)
{
	if (!j->ep || j->ep_queued == queued)
		return;
	j->ep->queued += queued ? 1 : -1;
	j->ep->dirty = 1;
	j->ep_queued = queued;
}

/* Operational events about s are not made when s only takes outboxd's own events: a
 * failing operations endpoint must not feed itself (core/ops_event.h). */
static int ops_only(const struct subscription *s)
{
	for (size_t i = 0; i < s->n_event_types; i++)
		if (!ops_event_type(s->event_types[i]))
			return 0;
	return s->n_event_types > 0;
}

/* An operational event about j's subscription, with its id and name in the payload
 * (consumed). */
static void ops_about_sub(struct round *j, const char *kind, json_t *payload)
{
	if (ops_only(j->sub)) {
		json_decref(payload);
		return;
	}
	json_object_set_new(payload, "subscription_id", json_string(j->sub->id));
	json_object_set_new(payload, "subscription_name", json_string(j->sub->name));
	ops_event_emit(&j->d->cfg.ops, kind, j->sub->id, payload);
}

static json_t *time_json(int64_t ms)
{
	char ts[RFC3339_LEN];
	return json_string(clock_format_rfc3339(ms, ts));
}

/* A round with attempts ended: the breaker counts it, and the subscription's health
 * follows (disabled after disable_after of nothing but failures; a recovery is noted),
 * each change also an operational event. */
static void circuit_record(struct round *j, int success)
{
	struct dispatcher *d = j->d;
	if (!j->limits)
		return;
	int64_t after = j->sub->disable_after_ms >= 0 ? j->sub->disable_after_ms
						       : d->cfg.disable_after_ms;
	int64_t failing_since = j->limits->failing_since_ms, now = clock_now_ms();
	unsigned h = limits_record(j->limits, j->sub, success, &j->probe, after);
	char span[32], reason[160];
	if (h & LIMITS_CIRCUIT_OPENED)
		ops_about_sub(j, "circuit.opened",
			      json_pack("{s:o, s:i, s:I}", "open_until",
					time_json(j->limits->breaker.open_until_ms), "max_errors",
					j->sub->breaker.max_errors, "failure_window_ms",
					(json_int_t)j->sub->breaker.failure_window_ms));
	if (h & LIMITS_CIRCUIT_CLOSED)
		ops_about_sub(j, "circuit.closed", json_pack("{s:o}", "closed_at", time_json(now)));
	if ((h & LIMITS_DISABLE) && d->cfg.disable) {
		snprintf(reason, sizeof(reason), "every attempt failed for %s (disable_after); "
			 "the last: %d %s", duration_format(after, span, sizeof(span)),
			 j->tries ? j->attempts[j->tries - 1].code : 0,
			 j->tries && j->attempts[j->tries - 1].message ?
				 j->attempts[j->tries - 1].message : "");
		log_warn("subscription %s (%s): disabled: %s; its deliveries wait until it is "
			 "enabled again", j->sub->id, j->sub->name, reason);
		d->cfg.disable(d->cfg.disable_ctx, j->sub->id, reason);
		ops_about_sub(j, "subscription.disabled",
			      json_pack("{s:s, s:o, s:o}", "reason", reason, "disabled_at",
					time_json(now), "failing_since", time_json(failing_since)));
	}
	if (h & LIMITS_RECOVERED) {
		log_info("subscription %s (%s): recovered: an attempt succeeded after a failure "
			 "streak of at least %s", j->sub->id, j->sub->name,
			 duration_format(j->sub->breaker.failure_window_ms, span, sizeof(span)));
		metrics_subscription_recovered();
		ops_about_sub(j, "subscription.recovered",
			      json_pack("{s:o, s:o, s:I}", "recovered_at", time_json(now),
					"failing_since", time_json(failing_since), "failing_ms",
					(json_int_t)(now - failing_since)));
	}
}

/* ---- the life of a round ----------------------------------------------------------------- */

static void done_push(struct dispatcher *d, struct round *j)
{
	j->state = ROUND_DONE;
	j->wr.next = NULL;
	if (d->done_tail)
		d->done_tail->wr.next = &j->wr;
	else
		d->done_head = j;
	d->done_tail = j;
	d->done_count++;
}

/* A retry or delay action is due at at_ms: the loop claims then, not at the idle poll. */
static void note_due(struct dispatcher *d, int64_t at_ms)
{
	if (at_ms && (!d->soonest_retry_ms || at_ms < d->soonest_retry_ms))
		d->soonest_retry_ms = at_ms;
}

static void set_last_error(struct store_result *r, const struct round *j)
{
	if (j->tries == 0) {
		r->last_code = 0;
		r->last_message = r->last_cause = NULL;
		return;
	}
	const struct store_attempt *a = &j->attempts[j->tries - 1];
	r->last_code = a->code;
	r->last_message = a->message;
	r->last_cause = a->cause;
}

/* The rounds in their stagger, a binary min-heap on wake_us (room for max_in_flight, so a
 * push never fails). */
static void waiting_push(struct dispatcher *d, struct round *j)
{
	size_t i = d->n_waiting++;
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (d->waiting[parent]->wake_us <= j->wake_us)
			break;
		d->waiting[i] = d->waiting[parent];
		i = parent;
	}
	d->waiting[i] = j;
}

static struct round *waiting_pop(struct dispatcher *d)
{
	struct round *top = d->waiting[0], *last = d->waiting[--d->n_waiting];
	size_t i = 0, n = d->n_waiting;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && d->waiting[c + 1]->wake_us < d->waiting[c]->wake_us)
			c++;
		if (last->wake_us <= d->waiting[c]->wake_us)
			break;
		d->waiting[i] = d->waiting[c];
		i = c;
	}
	if (n)
		d->waiting[i] = last;
	return top;
}

/* Keeps cause text (may be empty: kept as NULL) as the cause of try i until the round's
 * result is written: a round holds a KiB for the attempt in flight, not for all ten. */
static const char *keep_cause(struct round *j, int i, const char *text)
{
	free(j->causes[i]);
	j->causes[i] = text && *text ? strdup(text) : NULL;
	return j->causes[i];
}

/* Frees the kept causes (the result that pointed to them is written, or dropped). */
void round_causes_free(struct round *j)
{
	for (int i = 0; i < MAX_TRIES; i++) {
		free(j->causes[i]);
		j->causes[i] = NULL;
	}
}

/* The delivery just went to the dead-letter queue (its result is filled): marked for a
 * dead-letter topic when a sink owns its event's source (the Kafka sink: an intake topic,
 * with kafka_dead_letter; the relay publishes it after the result is written,
 * kafka/dead_letter.h), and made an operational event of unless it was one (no loops). */
static void dead_lettered(struct round *j)
{
	const struct dispatcher_config *cfg = &j->d->cfg;
	struct store_result *r = &j->wr.result;
	r->dead_letter = j->sub && j->sub->endpoint && sink_set_dead_letter(&j->d->sinks, j->claim);
	if (ops_event_type(j->claim->event_type))
		return;
	json_t *p = json_pack("{s:s, s:s, s:s, s:s, s:i, s:o, s:o}", "delivery_id",
			      j->claim->delivery_id, "event_id", j->claim->event_id, "event_type",
			      j->claim->event_type, "subscription_id", j->claim->subscription_id,
			      "attempt_count", r->attempt_count, "last_error",
			      json_pack("{s:i, s:s?}", "code", r->last_code, "message",
					r->last_message),
			      "dead_at", time_json(clock_now_ms()));
	if (j->sub)
		json_object_set_new(p, "subscription_name", json_string(j->sub->name));
	ops_event_emit(&cfg->ops, "delivery.dead", j->claim->subscription_id, p);
}

/* The delivery waits its turn among its key's (per-key ordering). */
static int key_ordered(const struct round *j)
{
	return j->claim->partition_key && j->sub && j->sub->ordering != ORDERING_NONE;
}

/* Fills the result of a round the outcome core decided (core/outcome.h). */
static void round_result(struct round *j, const struct outcome *o)
{
	struct store_result *r = &j->wr.result;

	memset(r, 0, sizeof(*r));
	r->delivery_id = j->claim->delivery_id;
	r->ordered_key = key_ordered(j);
	r->attempts = j->attempts;
	r->n_attempts = (size_t)j->tries;
	r->attempt_count = j->claim->attempt_count + j->tries;
	r->retry_count = o->retry_count;
	r->delay_actions = o->delay_actions;
	if (o->next == OUTCOME_DONE) {
		r->status = DELIVERY_PROCESSED;
		r->processed_at = clock_now_ms();
		return;
	}
	r->status = DELIVERY_FAILED;
	set_last_error(r, j);
	if (o->next == OUTCOME_RETRY)
		r->next_attempt_at = o->at_ms;
}

/* What outcome_decide needs to know of the round so far. */
static void outcome_input(const struct round *j, struct outcome_in *in)
{
	memset(in, 0, sizeof(*in));
	in->kind = j->kind;
	in->tries = j->tries;
	in->max_tries = j->max_tries;
	in->code = j->tries ? j->attempts[j->tries - 1].code : 0;
	in->retry_after_ms = j->retry_after_ms;
	in->permanent = j->tries && j->sj.permanent;
	in->retry_count = j->claim->retry_count;
	in->delay_actions = j->claim->delay_actions;
	in->now_ms = clock_now_ms();
}

/* The round is over with outcome o (not OUTCOME_TRY): the result goes to the writer. */
static void round_finish(struct round *j, const struct outcome *o)
{
	const char *sub_id = j->claim->subscription_id;

	round_slot_put(j);
	round_result(j, o);
	if (o->next == OUTCOME_DONE) {
		metrics_delivery(sub_id, METRICS_PROCESSED);
		j->audit = "EXECUTED";
	} else if (o->next == OUTCOME_RETRY) {
		metrics_delivery(sub_id, METRICS_RETRYING);
		note_due(j->d, o->at_ms);
		j->audit = "FAILED";
	} else {
		metrics_delivery(sub_id, METRICS_DEAD);
		dead_lettered(j);
		j->audit = "DEAD";
	}
	if (j->tries > 0)
		circuit_record(j, o->next == OUTCOME_DONE);
	done_push(j->d, j);
}

/* Ends the round after its last attempt, whatever the rules would say of another try
 * (the sink ended it, or a failure before any sink). */
static void round_stop(struct round *j)
{
	struct outcome_in in;
	struct outcome o;

	outcome_input(j, &in);
	in.end_round = true;
	outcome_decide(&j->sub->retry, &j->sub->breaker, &in, dispatcher_rng_next, &j->d->rng, &o);
	round_finish(j, &o);
}

/* The subscription's breaker is open: nothing is sent. The outcome core re-queues the
 * delivery at a random time in the retry policy's [min_delay, max_delay] window (a delay
 * action: no request, the delivery comes back later), or, once it has taken
 * max_delay_actions of them, dead-letters it with last_error {503, "circuit_open"}.
 * Attempts and retries are not counted: no request was made. */
static void round_delay_action(struct round *j)
{
	struct dispatcher *d = j->d;
	const struct subscription *s = j->sub;
	const struct store_claim *c = j->claim;
	struct store_result *r = &j->wr.result;
	struct outcome_in in;
	struct outcome o;
	char window[32], wait_text[32];

	outcome_input(j, &in);
	in.refused = true;
	outcome_decide(&s->retry, &s->breaker, &in, dispatcher_rng_next, &d->rng, &o);
	memset(r, 0, sizeof(*r));
	r->delivery_id = c->delivery_id;
	r->ordered_key = key_ordered(j);
	r->attempt_count = c->attempt_count;
	r->retry_count = c->retry_count;
	r->delay_actions = o.delay_actions;
	r->last_code = OUTCOME_CIRCUIT_OPEN_CODE;
	r->last_message = OUTCOME_CIRCUIT_OPEN_MESSAGE;
	duration_format(s->breaker.failure_window_ms, window, sizeof(window));
	if (o.next == OUTCOME_DLQ) {
		r->status = DELIVERY_FAILED; /* no next attempt: the dead-letter queue */
		snprintf(j->cause_buf, CAUSE_LEN,
			 "the circuit breaker of subscription %s is open (%d failed "
			 "deliveries within %s); after %d delay actions the delivery was stopped "
			 "without a request", s->id, s->breaker.max_errors, window, c->delay_actions);
		r->last_cause = keep_cause(j, 0, j->cause_buf);
		metrics_delivery(c->subscription_id, METRICS_DEAD);
		dead_lettered(j);
	} else {
		r->status = c->status;
		r->replay = c->replay;
		r->next_attempt_at = o.at_ms;
		snprintf(j->cause_buf, CAUSE_LEN,
			 "delay action %d of %d: the circuit breaker of subscription %s is open "
			 "(%d failed deliveries within %s); no request sent, due again "
			 "in %s", r->delay_actions, s->breaker.max_delay_actions, s->id,
			 s->breaker.max_errors, window,
			 duration_format(o.delay_ms, wait_text, sizeof(wait_text)));
		r->last_cause = keep_cause(j, 0, j->cause_buf);
		metrics_delivery(c->subscription_id, METRICS_DELAYED);
		note_due(d, r->next_attempt_at);
	}
	done_push(d, j);
}

/* Hands the delivery back untouched but for the attempts made (shutdown, disabled
 * subscription): due again at now + delay_ms. */
static void round_release(struct round *j, int64_t delay_ms)
{
	struct store_result *r = &j->wr.result;
	round_slot_put(j);
	limits_probe_abandoned(j->limits, &j->probe);
	memset(r, 0, sizeof(*r));
	r->delivery_id = j->claim->delivery_id;
	r->status = j->claim->status;
	r->replay = j->claim->replay;
	r->attempt_count = j->claim->attempt_count + j->tries;
	r->retry_count = j->claim->retry_count;
	r->delay_actions = j->claim->delay_actions;
	r->next_attempt_at = clock_now_ms() + delay_ms;
	r->attempts = j->attempts;
	r->n_attempts = (size_t)j->tries;
	set_last_error(r, j);
	if (j->tries == 0)
		r->last_code = -1; /* keep the error the delivery already shows */
	metrics_delivery(j->claim->subscription_id, METRICS_RELEASED);
	note_due(j->d, r->next_attempt_at);
	done_push(j->d, j);
}

/* Records a first attempt that failed here, before any sink (code, message, cause
 * borrowed), and ends the round; the retry policy decides what follows. */
static void round_fail_attempt(struct round *j, int code, const char *message, const char *cause)
{
	struct store_attempt *a = &j->attempts[0];
	memset(a, 0, sizeof(*a));
	a->n = j->claim->attempt_count + 1;
	a->kind = j->kind;
	a->started_at = clock_now_ms();
	a->code = code;
	snprintf(j->messages[0], MSG_LEN, "%s", message);
	a->message = j->messages[0];
	a->cause = keep_cause(j, 0, cause);
	otlp_attempt(j->claim, a, 0, clock_now_ns(), 0);
	j->tries = 1;
	j->retry_after_ms = -1;
	round_stop(j);
}

/* The attempt just recorded (j->tries - 1) is over: the outcome core says whether the
 * round goes on after a stagger or ends. */
static void round_after_attempt(struct round *j)
{
	struct dispatcher *d = j->d;
	struct outcome_in in;
	struct outcome o;

	round_slot_put(j);
	outcome_input(j, &in);
	outcome_decide(&j->sub->retry, &j->sub->breaker, &in, dispatcher_rng_next, &d->rng, &o);
	if (o.next != OUTCOME_TRY) {
		round_finish(j, &o);
	} else if (atomic_load(&d->stopping)) {
		round_release(j, 0); /* shutting down: hand the rest of the round back */
	} else {
		j->state = ROUND_WAITING;
		j->wake_us = clock_mono_us() + o.delay_ms * 1000;
		waiting_push(d, j);
	}
}

/* ---- attempts ------------------------------------------------------------------------------ */

/* Starts the next attempt of the round now (its limits are taken): the sink has it
 * until it calls round_attempt_done_cb or round_attempt_abandoned_cb. */
static void round_go(struct round *j)
{
	struct sink_round *sj = &j->sj;
	/* The attempt must end (its timeout) before the lease does, or another instance
	 * (or a claim of this one) could start a second round of the delivery while this one
	 * still sends: it waits for the lease's renewal (dispatcher.c), or stops if the
	 * lease is gone. */
	if (j->lease_until_ms - clock_now_ms() < round_lease_need_ms(j)) {
		round_slot_put(j);
		if (j->lease_lost) {
			round_release(j, 0);
			return;
		}
		j->d->renew_soon = 1;
		j->state = ROUND_WAITING;
		j->wake_us = clock_mono_us() + LEASE_WAIT_US;
		waiting_push(j->d, j);
		return;
	}
	j->started_wall_ns = clock_now_ns();
	j->attempts[j->tries].started_at = j->started_wall_ns / 1000000;
	j->started_mono_ns = clock_mono_ns();
	j->retry_after_ms = -1;
	sj->attempt_no = j->claim->attempt_count + j->tries + 1;
	sj->span_id = (uint64_t)(dispatcher_rng_next(&j->d->rng) * 18446744073709551615.0) | 1;
	sj->timeout_ms = j->timeout_ms;
	sj->message = j->messages[j->tries];
	sj->cause = j->cause_buf;
	sj->cause[0] = '\0';
	sj->message[0] = '\0';
	sj->code = 0;
	sj->end_round = 0;
	sj->permanent = 0;
	sj->retry_after_ms = -1;
	sj->sent = 1;
	sj->local = 0;
	sj->latency_us = 0;
	sj->flow = CONCURRENCY_NEUTRAL;
	j->state = ROUND_IN_FLIGHT;
	j->d->in_flight++;
	sink_send(j->sink, sj);
}

/* sink_env.done: the attempt is over; record it, then retry or end the round. */
void round_attempt_done_cb(void *ctx, struct sink_round *sj)
{
	struct dispatcher *d = ctx;
	struct round *j = (struct round *)sj;
	struct store_attempt *a = &j->attempts[j->tries];
	int64_t now_ns = clock_mono_ns(), took_ns = now_ns - j->started_mono_ns;
	int64_t now_us = now_ns / 1000, took_us = took_ns / 1000;

	d->in_flight--;
	if (sj->latency_us <= 0)
		sj->latency_us = took_us;
	if (j->holds_ep) {
		/* out of the endpoint's open requests first: the stall check looks at the
		 * others */
		endpoint_end(j->ep, &j->ep_req);
		j->holds_ep = 0;
		if (!sj->local)
			endpoint_record(j->ep, now_us, sj->latency_us,
					(enum concurrency_outcome)sj->flow, j->ep_in_flight);
	}
	if (sj->local) {
		/* outboxd ran out of something (descriptors, ports): not the subscriber's doing,
		 * so not a try; the delivery goes back and comes again in a moment */
		log_warn("delivery %s: not sent: %s (a resource of this outboxd; the try does not "
			 "count)", j->claim->delivery_id, sj->cause);
		round_release(j, RELEASE_MIN_MS + (int64_t)(dispatcher_rng_next(&d->rng) * 1000));
		return;
	}
	a->n = sj->attempt_no;
	a->kind = j->kind;
	a->duration_ms = took_us / 1000;
	a->code = sj->code;
	a->message = j->messages[j->tries];
	a->cause = keep_cause(j, j->tries, j->cause_buf);
	a->not_sent = !sj->sent;
	j->retry_after_ms = sj->retry_after_ms;
	metrics_attempt(a->code, took_us);
	otlp_attempt(j->claim, a, sj->span_id, j->started_wall_ns, took_ns);
	j->tries++;
	if (sj->end_round) {
		round_slot_put(j);
		round_stop(j);
		return;
	}
	round_after_attempt(j);
}

/* sink_env.abandoned: the sink stopped the attempt undecided (shutdown). */
void round_attempt_abandoned_cb(void *ctx, struct sink_round *sj)
{
	struct dispatcher *d = ctx;
	d->in_flight--;
	round_release((struct round *)sj, 0);
}

/* Holds the round back in its subscription's queue until its limits let it go, or hands
 * it back to the store when the queue has its share of the round pool already. */
static void round_park(struct round *j)
{
	struct dispatcher *d = j->d;
	struct sub_limits *x = j->limits;

	if (x->parked >= limits_parked_cap(d->cfg.max_in_flight, j->sub,
					   j->ep ? concurrency_limit(&j->ep->conc) : 0)) {
		round_release(j, RELEASE_MIN_MS + (int64_t)(dispatcher_rng_next(&d->rng) * 1000));
		return;
	}
	j->state = ROUND_PARKED;
	j->parked_us = clock_mono_us();
	round_queued(j, 1);
	j->next = NULL;
	if (x->parked_tail)
		x->parked_tail->next = j;
	else
		x->parked_head = j;
	x->parked_tail = j;
	x->parked++;
	if (!x->on_parked_list) {
		x->on_parked_list = 1;
		x->next_parked = d->parked_subs;
		d->parked_subs = x;
	}
}

/* Starts the next attempt of the round, or parks it behind its subscription's limits
 * (and behind the rounds parked there already: a queue keeps its order). */
static void round_begin(struct round *j)
{
	if (j->limits && (j->limits->parked_head || !round_limits_take(j, clock_mono_us()))) {
		round_park(j);
		return;
	}
	if (!j->limits && !round_limits_take(j, clock_mono_us())) {
		round_release(j, RELEASE_MIN_MS); /* no queue to wait in (out of memory) */
		return;
	}
	round_go(j);
}

/* Starts the parked rounds their limits let go, oldest first; hands back the ones parked
 * for half a lease (the lease must not run out under them) and, when stopping, all.
 * Returns the wait in µs until a rate-limited queue can move, or -1 when only a
 * completion can move one. */
int64_t rounds_run_parked(struct dispatcher *d, int64_t now_us)
{
	int stopping = atomic_load(&d->stopping);
	int64_t too_old_us = d->cfg.lease_ms * 1000 / 2, wait = -1;
	struct sub_limits **pp = &d->parked_subs;

	while (*pp) {
		struct sub_limits *x = *pp;
		while (x->parked_head) {
			struct round *j = x->parked_head;
			int old = stopping || now_us - j->parked_us >= too_old_us;
			if (!old && !round_limits_take(j, now_us)) {
				int64_t w = limits_wait(x, j->sub, now_us);
				if (w > 0 && (wait < 0 || w < wait))
					wait = w;
				break;
			}
			x->parked_head = j->next;
			if (!x->parked_head)
				x->parked_tail = NULL;
			x->parked--;
			j->next = NULL;
			round_queued(j, 0);
			if (old)
				round_release(j, stopping ? 0 : RELEASE_MIN_MS);
			else
				round_go(j);
		}
		if (!x->parked_head) {
			x->on_parked_list = 0;
			*pp = x->next_parked;
		} else {
			pp = &x->next_parked;
		}
	}
	return wait;
}

void round_start(struct dispatcher *d, struct batch *b, struct store_claim *c)
{
	struct round *j = d->free_list;
	d->free_list = j->next;
	d->active++;
	j->batch = b;
	j->claim = c;
	j->sj.claim = c;
	j->tries = 0;
	j->sink = NULL;
	j->limits = NULL;
	j->ep = NULL;
	j->holds_ep = 0;
	j->ep_queued = 0;
	j->probe = 0;
	j->holds_slot = 0;
	j->retry_after_ms = -1;
	j->lease_until_ms = c->lease_until;
	j->lease_lost = 0;
	j->seq = ++d->round_seq;
	j->sub = sub_set_find(b->subs, c->subscription_id);
	j->sj.sub = j->sub;
	/* The round's layer: an operator's replay is manual; a FAILED delivery is retried by
	 * the scheduled layer, and so is a NEW one stored to start there (a message of a
	 * dead-letter topic, whose immediate tries were spent upstream: it stays NEW until
	 * that first scheduled round, store_claim.starts_scheduled); else the immediate
	 * round. */
	if (c->replay)
		j->kind = ATTEMPT_MANUAL;
	else if (c->status == DELIVERY_FAILED || c->starts_scheduled)
		j->kind = ATTEMPT_SCHEDULED;
	else
		j->kind = ATTEMPT_IMMEDIATE;

	if (atomic_load(&d->stopping)) {
		/* Claimed as the shutdown began (the writer answered late): handed back
		 * untouched, due now, for whoever runs next. */
		round_release(j, 0);
		return;
	}
	if (!j->sub && b->subs->loaded_at_ms <= c->event_created_at + LEASE_MARGIN_MS) {
		/* Not in a set read before (or about when) the delivery was made: the
		 * subscription may be newer than this instance's set (created through another
		 * instance a moment ago). Read the set again and try later; only a set read
		 * after the delivery was made can say it is gone. */
		sub_registry_want_reload(d->reg);
		round_release(j, RELEASE_MIN_MS);
		return;
	}
	if (!j->sub) {
		/* The subscription was deleted: nothing to send to; keep the delivery visible
		 * in the dead-letter queue instead of dropping it. */
		static const struct subscription gone = {.retry = {.immediate = 1}};
		char cause[320];
		j->sub = &gone;
		j->kind = ATTEMPT_MANUAL; /* no scheduled retry for it */
		if (c->source && strncmp(c->source, "kafka:", 6) == 0 &&
		    strcmp(c->event_type, "kafka.undecodable") == 0) {
			/* a replayed undecodable Kafka message: still nowhere to send it */
			snprintf(cause, sizeof(cause), "the message from %s could not be decoded; its "
				 "raw bytes are the event's payload", c->source);
			round_fail_attempt(j, 422, "undecodable", cause);
			return;
		}
		snprintf(cause, sizeof(cause), "subscription %s no longer exists",
			 c->subscription_id);
		round_fail_attempt(j, 410, "subscription deleted", cause);
		return;
	}
	if (!j->sub->enabled) {
		round_release(j, d->cfg.disabled_delay_ms);
		return;
	}
	if (!(j->sink = sink_set_find(&d->sinks, j->sub->endpoint))) {
		/* kafka:// without kafka_brokers: a failed attempt like any other, so the
		 * delivery waits in the retries (and the DLQ) until the operator adds it. */
		round_fail_attempt(j, 503, "no delivery target",
				 "no sink of this outboxd delivers to this endpoint's scheme "
				 "(kafka:// endpoints need kafka_brokers)");
		return;
	}
	if ((j->limits = limits_get(&d->limits, j->sub))) {
		j->limits->refs++;
		j->ep = limits_endpoint(j->limits, j->sub, &d->endpoints, clock_mono_us());
	}
	if (j->limits && limits_admit(j->limits, j->sub, c->delivery_id, &j->probe) == BREAKER_DELAY) {
		round_delay_action(j);
		return;
	}
	if (j->kind == ATTEMPT_SCHEDULED) {
		j->max_tries = 1;
		j->timeout_ms = j->sub->retry.timeout_ms;
	} else {
		j->max_tries = j->sub->retry.immediate < MAX_TRIES ? j->sub->retry.immediate : MAX_TRIES;
		j->timeout_ms = j->kind == ATTEMPT_MANUAL ? j->sub->retry.timeout_ms
							  : j->sub->retry.immediate_timeout_ms;
	}
	if (j->probe)
		j->max_tries = 1; /* a half-open probe is one request */
	round_begin(j);
}

void batch_release(struct dispatcher *d, struct batch *b)
{
	if (--b->live)
		return;
	store_claims_free(b->claims, b->n);
	sub_registry_release(d->reg, b->subs);
	free(b);
}

/* log_deliveries: the audit line of a round whose outcome is written. Ids, type, code and
 * timings only: never the endpoint (its URL may hold a credential), headers or payload. */
static void audit_log(const struct round *j)
{
	const struct store_result *r = &j->wr.result;
	int64_t duration = 0;
	char at[RFC3339_LEN];

	for (int i = 0; i < j->tries; i++)
		duration += j->attempts[i].duration_ms;
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:I, s:s}", "delivery_id",
			      j->claim->delivery_id, "event_id", j->claim->event_id,
			      "subscription_id", j->claim->subscription_id, "event_type",
			      j->claim->event_type, "code", r->last_code > 0 ? r->last_code :
			      j->tries ? j->attempts[j->tries - 1].code : 0, "attempts", j->tries,
			      "attempt_count", r->attempt_count, "duration_ms", (json_int_t)duration,
			      "kind", attempt_kind_name(j->kind));
	if (!o)
		return;
	if (j->sub && j->sub->name)
		json_object_set_new(o, "subscription_name", json_string(j->sub->name));
	if (r->status != DELIVERY_PROCESSED && r->last_message)
		json_object_set_new(o, "message", json_string(r->last_message));
	if (r->next_attempt_at)
		json_object_set_new(o, "next_attempt_at",
				    json_string(clock_format_rfc3339(r->next_attempt_at, at)));
	char *fields = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (fields)
		log_record(j->audit, fields);
	free(fields);
}

void round_recycle(struct dispatcher *d, struct round *j)
{
	if (j->audit && atomic_load_explicit(&d->log_deliveries, memory_order_relaxed))
		audit_log(j);
	j->audit = NULL;
	round_causes_free(j);
	if (j->sink)
		sink_round_end(j->sink, &j->sj);
	j->sink = NULL;
	if (j->limits)
		j->limits->refs--;
	j->limits = NULL;
	j->ep = NULL;
	j->probe = 0;
	batch_release(d, j->batch);
	j->batch = NULL;
	j->claim = NULL;
	j->state = ROUND_FREE;
	j->next = d->free_list;
	d->free_list = j;
	d->active--;
}

/* Starts the waiting rounds whose stagger is over (all of them, handed back, when
 * stopping). */
void rounds_run_timers(struct dispatcher *d, int64_t now_us)
{
	while (d->n_waiting && (d->waiting[0]->wake_us <= now_us || atomic_load(&d->stopping))) {
		struct round *j = waiting_pop(d);
		if (atomic_load(&d->stopping))
			round_release(j, 0);
		else
			round_begin(j);
	}
}

int64_t rounds_wait_us(const struct dispatcher *d, int64_t now_us)
{
	if (!d->n_waiting)
		return -1;
	return d->waiting[0]->wake_us > now_us ? d->waiting[0]->wake_us - now_us : 0;
}

