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
 * Every decision about a round's end is core/outcome.c's (what the delivery becomes, what
 * the round did to its subscription's breaker and health); this file gathers its inputs
 * (outcome_input) and applies its answer (round_finish), deciding nothing itself. Must
 * not block or touch the store: results leave through the done list only. */
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
static int round_limits_take(struct round *r, int64_t now_us)
{
	if (r->ep && !endpoint_has_room(r->ep))
		return 0;
	if (r->limits && !limits_take(r->limits, r->sub, now_us))
		return 0;
	r->holds_slot = r->limits != NULL;
	if (r->ep) {
		endpoint_begin(r->ep, &r->ep_req, now_us, r->d->turn);
		r->holds_ep = 1;
	}
	return 1;
}

/* The attempt is over: its places under the limits go back. */
static void round_slot_put(struct round *r)
{
	if (r->holds_slot) {
		limits_put(r->limits);
		r->holds_slot = 0;
	}
	if (r->holds_ep) {
		endpoint_end(r->ep, &r->ep_req);
		r->holds_ep = 0;
	}
}

/* The round waits in its subscription's queue (parked) or leaves it: counted in its
 * endpoint's queue length for stats. */
static void round_queued(struct round *r, int queued)
{
	if (!r->ep || r->ep_queued == queued)
		return;
	r->ep->queued += queued ? 1 : -1;
	endpoint_changed(r->ep);
	r->ep_queued = queued;
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

/* An operational event about r's subscription, with its id and name in the payload
 * (consumed). */
static void ops_about_sub(struct round *r, const char *kind, json_t *payload)
{
	if (ops_only(r->sub)) {
		json_decref(payload);
		return;
	}
	json_object_set_new(payload, "subscription_id", json_string(r->sub->id));
	json_object_set_new(payload, "subscription_name", json_string(r->sub->name));
	ops_event_emit(&r->d->cfg.ops, kind, r->sub->id, payload);
}

static json_t *time_json(int64_t ms)
{
	char ts[RFC3339_LEN];
	return json_string(clock_format_rfc3339(ms, ts));
}

/* What the outcome core said a round did to its subscription (o, counted or handed
 * back), applied: the state kept in limits.c, and each change made known — a breaker
 * opened or closed, the subscription disabled (disable_after), a recovery — as logs,
 * metrics and operational events. */
static void round_apply_sub(struct round *r, const struct outcome *o)
{
	struct dispatcher *d = r->d;
	char span[32], reason[160];
	int64_t now = clock_now_ms();

	r->probe = 0; /* the round was the probe, and its outcome (or abandon) is in o */
	if (!r->limits)
		return;
	limits_apply(r->limits, r->sub, o);
	if (o->breaker == OUTCOME_BREAKER_OPENED || o->breaker == OUTCOME_BREAKER_REOPENED)
		ops_about_sub(r, "circuit.opened",
			      json_pack("{s:o, s:i, s:I}", "open_until",
					time_json(o->sub.breaker.open_until_ms), "max_errors",
					r->sub->breaker.max_errors, "failure_window_ms",
					(json_int_t)r->sub->breaker.failure_window_ms));
	if (o->breaker == OUTCOME_BREAKER_CLOSED)
		ops_about_sub(r, "circuit.closed", json_pack("{s:o}", "closed_at", time_json(now)));
	if (o->disable.now && d->cfg.disable) {
		snprintf(reason, sizeof(reason), "every attempt failed for %s (disable_after); "
			 "the last: %d %s", duration_format(o->disable.after_ms, span, sizeof(span)),
			 r->tries ? r->attempts[r->tries - 1].code : 0,
			 r->tries && r->attempts[r->tries - 1].message ?
				 r->attempts[r->tries - 1].message : "");
		log_warn("subscription %s (%s): disabled: %s; its deliveries wait until it is "
			 "enabled again", r->sub->id, r->sub->name, reason);
		d->cfg.disable(d->cfg.disable_ctx, r->sub->id, reason);
		ops_about_sub(r, "subscription.disabled",
			      json_pack("{s:s, s:o, s:o}", "reason", reason, "disabled_at",
					time_json(now), "failing_since",
					time_json(o->disable.failing_since_ms)));
	}
	if (o->recovery.now) {
		log_info("subscription %s (%s): recovered: an attempt succeeded after a failure "
			 "streak of at least %s", r->sub->id, r->sub->name,
			 duration_format(r->sub->breaker.failure_window_ms, span, sizeof(span)));
		metrics_subscription_recovered();
		ops_about_sub(r, "subscription.recovered",
			      json_pack("{s:o, s:o, s:I}", "recovered_at", time_json(now),
					"failing_since", time_json(o->recovery.failing_since_ms),
					"failing_ms", (json_int_t)o->recovery.failing_ms));
	}
}

/* ---- the life of a round ----------------------------------------------------------------- */

static void done_push(struct dispatcher *d, struct round *r)
{
	r->state = ROUND_DONE;
	r->wr.next = NULL;
	if (d->done_tail)
		d->done_tail->wr.next = &r->wr;
	else
		d->done_head = r;
	d->done_tail = r;
	d->done_count++;
}

/* A retry or delay action is due at at_ms: the loop claims then, not at the idle poll. */
static void note_due(struct dispatcher *d, int64_t at_ms)
{
	if (at_ms && (!d->soonest_retry_ms || at_ms < d->soonest_retry_ms))
		d->soonest_retry_ms = at_ms;
}

/* The rounds in their stagger, a binary min-heap on wake_us (room for max_in_flight, so a
 * push never fails). */
static void waiting_push(struct dispatcher *d, struct round *r)
{
	size_t i = d->n_waiting++;
	while (i > 0) {
		size_t parent = (i - 1) / 2;
		if (d->waiting[parent]->wake_us <= r->wake_us)
			break;
		d->waiting[i] = d->waiting[parent];
		i = parent;
	}
	d->waiting[i] = r;
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
static const char *keep_cause(struct round *r, int i, const char *text)
{
	free(r->causes[i]);
	r->causes[i] = text && *text ? strdup(text) : NULL;
	return r->causes[i];
}

/* Frees the kept causes (the result that pointed to them is written, or dropped). */
void round_causes_free(struct round *r)
{
	for (int i = 0; i < MAX_TRIES; i++) {
		free(r->causes[i]);
		r->causes[i] = NULL;
	}
}

/* The delivery just went to the dead-letter queue (its result is filled): marked for a
 * dead-letter topic when a sink owns its event's source (the Kafka sink: an intake topic,
 * with kafka_dead_letter; the relay publishes it after the result is written,
 * kafka/dead_letter.h), and made an operational event of unless it was one (no loops). */
static void dead_lettered(struct round *r)
{
	struct store_result *res = &r->wr.result;
	res->dead_letter = r->sub && r->sub->endpoint && sink_set_dead_letter(&r->d->sinks, r->claim);
	if (ops_event_type(r->claim->event_type))
		return;
	json_t *p = json_pack("{s:s, s:s, s:s, s:s, s:i, s:o, s:o}", "delivery_id",
			      r->claim->delivery_id, "event_id", r->claim->event_id, "event_type",
			      r->claim->event_type, "subscription_id", r->claim->subscription_id,
			      "attempt_count", res->attempt_count, "last_error",
			      json_pack("{s:i, s:s?}", "code", res->last_code, "message",
					res->last_message),
			      "dead_at", time_json(clock_now_ms()));
	if (r->sub)
		json_object_set_new(p, "subscription_name", json_string(r->sub->name));
	ops_event_emit(&r->d->cfg.ops, "delivery.dead", r->claim->subscription_id, p);
}

/* The delivery waits its turn among its key's (per-key ordering). */
static int key_ordered(const struct round *r)
{
	return r->claim->partition_key && r->sub && r->sub->ordering != ORDERING_NONE;
}

/* The last error of a round the breaker refused (a delay action, or the DLQ after
 * max_delay_actions of them), which has no attempt to take it from: why nothing was sent.
 * Kept as the cause of try 0 until the result is written. */
static const char *circuit_cause(struct round *r, const struct outcome *o)
{
	const struct subscription *s = r->sub;
	char window[32], wait_text[32];

	duration_format(s->breaker.failure_window_ms, window, sizeof(window));
	if (o->next == OUTCOME_DLQ)
		snprintf(r->cause_buf, CAUSE_LEN,
			 "the circuit breaker of subscription %s is open (%d failed "
			 "deliveries within %s); after %d delay actions the delivery was stopped "
			 "without a request", s->id, s->breaker.max_errors, window,
			 r->claim->delay_actions);
	else
		snprintf(r->cause_buf, CAUSE_LEN,
			 "delay action %d of %d: the circuit breaker of subscription %s is open "
			 "(%d failed deliveries within %s); no request sent, due again "
			 "in %s", o->delay_actions, s->breaker.max_delay_actions, s->id,
			 s->breaker.max_errors, window,
			 duration_format(o->delay_ms, wait_text, sizeof(wait_text)));
	return keep_cause(r, 0, r->cause_buf);
}

/* The one place a round's result is made for the writer: from its claim, the attempts it
 * made and what the outcome core decided (o, any but OUTCOME_TRY). */
static void round_result(struct round *r, const struct outcome *o)
{
	const struct store_claim *c = r->claim;
	struct store_result *res = &r->wr.result;

	memset(res, 0, sizeof(*res));
	res->delivery_id = c->delivery_id;
	res->subscription_id = c->subscription_id;
	res->ordered_key = o->release_key;
	res->attempts = r->attempts;
	res->n_attempts = (size_t)r->tries;
	res->attempt_count = c->attempt_count + r->tries;
	res->retry_count = o->retry_count;
	res->delay_actions = o->delay_actions;
	if (o->next == OUTCOME_DONE) {
		res->status = DELIVERY_PROCESSED;
		res->processed_at = clock_now_ms();
		return; /* last_code 0: no error any more */
	}
	if (o->next == OUTCOME_DELAY || o->next == OUTCOME_RELEASE) {
		/* not decided by a request: the delivery stays as it was, due again */
		res->status = c->status;
		res->replay = c->replay;
		res->next_attempt_at = o->at_ms;
	} else {
		/* RETRY at at_ms, or the dead-letter queue: no next attempt, and its processing
		 * completed (processed_at: when processing ended, in success or failure; a
		 * replay clears it) */
		res->status = DELIVERY_FAILED;
		if (o->next == OUTCOME_RETRY)
			res->next_attempt_at = o->at_ms;
		else
			res->processed_at = clock_now_ms();
	}
	if (r->tries > 0) {
		const struct store_attempt *a = &r->attempts[r->tries - 1];
		res->last_code = a->code;
		res->last_message = a->message;
		res->last_cause = a->cause;
	} else if (o->next == OUTCOME_DELAY || o->why == OUTCOME_WHY_CIRCUIT_OPEN) {
		res->last_code = OUTCOME_CIRCUIT_OPEN_CODE;
		res->last_message = OUTCOME_CIRCUIT_OPEN_MESSAGE;
		res->last_cause = circuit_cause(r, o);
	} else {
		res->last_code = -1; /* handed back untried: keep the error it already shows */
	}
}

/* What the outcome core needs to know of the round so far, of its delivery and of its
 * subscription's state. */
static void outcome_input(const struct round *r, struct outcome_in *in)
{
	memset(in, 0, sizeof(*in));
	in->kind = r->kind;
	in->tries = r->tries;
	in->max_tries = r->max_tries;
	in->code = r->tries ? r->attempts[r->tries - 1].code : 0;
	in->retry_after_ms = r->retry_after_ms;
	in->permanent = r->tries && r->sj.permanent;
	in->round_started_ms = r->tries ? r->attempts[0].started_at : 0;
	in->try_max_ms = round_lease_need_ms(r) - LEASE_MARGIN_MS; /* connect + timeout */
	in->retry_count = r->claim->retry_count;
	in->delay_actions = r->claim->delay_actions;
	in->key_ordered = key_ordered(r);
	if (r->limits && r->sub) {
		in->tracked = true;
		in->sub = r->limits->state;
		in->probe = r->probe;
		in->disable_after_ms = r->sub->disable_after_ms;
		in->disable_after_default_ms = r->d->cfg.disable_after_ms;
	}
	in->now_ms = clock_now_ms();
}

/* The outcome core's decision for the round as it stands (in: outcome_input's, changed
 * by the caller where it knows more). */
static void round_decide(struct round *r, const struct outcome_in *in, struct outcome *o)
{
	retry_rand_cb rnd = dispatcher_rng_next;
	void *rnd_ctx = &r->d->rng;

	if (r->limits) {
		/* The subscription's re-queues (delay actions, exponential retries) fill the
		 * slots of its window in turn (core/retry.h, slot filling). */
		retry_slots_setup(&r->limits->requeue_slots, retry_slots_for(&r->sub->retry),
				  dispatcher_rng_next, &r->d->rng);
		rnd = retry_slots_draw;
		rnd_ctx = &r->limits->requeue_slots;
	}
	outcome_decide(&r->sub->retry, &r->sub->breaker, in, rnd, rnd_ctx, o);
}

/* The round is over with outcome o (any but OUTCOME_TRY): its result goes to the
 * writer, and every other consequence is applied — the counts, the audit line, the Kafka
 * dead-letter mark, the next claim's time, the subscription's state (round_apply_sub). */
static void round_finish(struct round *r, const struct outcome *o)
{
	const char *sub_id = r->claim->subscription_id;

	round_slot_put(r);
	round_result(r, o);
	if (o->next == OUTCOME_DONE) {
		metrics_delivery(sub_id, METRICS_PROCESSED);
		r->audit = "EXECUTED";
	} else if (o->next == OUTCOME_RETRY) {
		metrics_delivery(sub_id, METRICS_RETRYING);
		r->audit = "FAILED";
	} else if (o->next == OUTCOME_DELAY) {
		metrics_delivery(sub_id, METRICS_DELAYED);
	} else if (o->next == OUTCOME_RELEASE) {
		metrics_delivery(sub_id, METRICS_RELEASED);
	} else {
		metrics_delivery(sub_id, METRICS_DEAD);
		dead_lettered(r);
		/* a DEAD line for every delivery that reaches the dead-letter queue, one the
		 * open breaker sent there without a request too ("attempts": 0, its message
		 * circuit_open) */
		r->audit = "DEAD";
	}
	note_due(r->d, r->wr.result.next_attempt_at);
	round_apply_sub(r, o);
	done_push(r->d, r);
}

/* Ends the round after its last attempt, whatever the rules would say of another try
 * (the sink ended it, or a failure before any sink). */
static void round_stop(struct round *r)
{
	struct outcome_in in;
	struct outcome o;

	outcome_input(r, &in);
	in.end_round = true;
	round_decide(r, &in, &o);
	round_finish(r, &o);
}

/* The subscription's breaker is open: nothing is sent. The outcome core re-queues the
 * delivery at a random time in the retry policy's [min_delay, max_delay] window (a delay
 * action: no request, the delivery comes back later), or, once it has taken
 * max_delay_actions of them, dead-letters it with last_error {503, "circuit_open"}.
 * Attempts and retries are not counted: no request was made. */
static void round_delay_action(struct round *r)
{
	struct outcome_in in;
	struct outcome o;

	outcome_input(r, &in);
	in.refused = true;
	round_decide(r, &in, &o);
	round_finish(r, &o);
}

/* A hand-back's delay drawn in [min_ms, 3 x min_ms]: rounds handed back together are not
 * due back together. */
static int64_t release_spread_ms(struct dispatcher *d, int64_t min_ms)
{
	return min_ms + (int64_t)(dispatcher_rng_next(&d->rng) * 2.0 * (double)min_ms);
}

/* Hands the delivery back untouched but for the attempts made (shutdown, a lost lease,
 * a disabled subscription, a full queue): due again at now + delay_ms. */
static void round_release(struct round *r, int64_t delay_ms)
{
	struct outcome_in in;
	struct outcome o;

	outcome_input(r, &in);
	outcome_release(&in, delay_ms, &o);
	round_finish(r, &o);
}

/* Records a first attempt that failed here, before any sink (code, message, cause
 * borrowed), and ends the round; the retry policy decides what follows. */
static void round_fail_attempt(struct round *r, int code, const char *message, const char *cause)
{
	struct store_attempt *a = &r->attempts[0];
	memset(a, 0, sizeof(*a));
	a->n = r->claim->attempt_count + 1;
	a->kind = r->kind;
	a->started_at = clock_now_ms();
	a->code = code;
	snprintf(r->messages[0], MSG_LEN, "%s", message);
	a->message = r->messages[0];
	a->cause = keep_cause(r, 0, cause);
	otlp_attempt(r->claim, a, 0, clock_now_ns(), 0);
	r->tries = 1;
	r->retry_after_ms = -1;
	round_stop(r);
}

/* The attempt just recorded (r->tries - 1) is over: the outcome core says whether the
 * round goes on after a stagger or ends. */
static void round_after_attempt(struct round *r)
{
	struct dispatcher *d = r->d;
	struct outcome_in in;
	struct outcome o;

	round_slot_put(r);
	outcome_input(r, &in);
	round_decide(r, &in, &o);
	if (o.next != OUTCOME_TRY) {
		round_finish(r, &o);
	} else if (atomic_load(&d->stopping)) {
		round_release(r, 0); /* shutting down: hand the rest of the round back */
	} else {
		r->state = ROUND_WAITING;
		r->wake_us = clock_mono_us() + o.delay_ms * 1000;
		waiting_push(d, r);
	}
}

/* ---- attempts ------------------------------------------------------------------------------ */

/* Starts the next attempt of the round now (its limits are taken): the sink has it
 * until it calls round_attempt_done_cb or round_attempt_abandoned_cb. */
static void round_go(struct round *r)
{
	struct sink_round *sj = &r->sj;
	/* The attempt must end (its timeout) before the lease does, or another instance
	 * (or a claim of this one) could start a second round of the delivery while this one
	 * still sends: it waits for the lease's renewal (dispatcher.c), or stops if the
	 * lease is gone. */
	if (r->lease_until_ms - clock_now_ms() < round_lease_need_ms(r)) {
		round_slot_put(r);
		if (r->lease_lost) {
			round_release(r, 0);
			return;
		}
		r->d->renew_soon = 1;
		r->state = ROUND_WAITING;
		r->wake_us = clock_mono_us() + LEASE_WAIT_US;
		waiting_push(r->d, r);
		return;
	}
	r->started_wall_ns = clock_now_ns();
	r->attempts[r->tries].started_at = r->started_wall_ns / 1000000;
	r->started_mono_ns = clock_mono_ns();
	r->retry_after_ms = -1;
	sj->attempt_no = r->claim->attempt_count + r->tries + 1;
	sj->span_id = (uint64_t)(dispatcher_rng_next(&r->d->rng) * 18446744073709551615.0) | 1;
	sj->timeout_ms = r->timeout_ms;
	sj->message = r->messages[r->tries];
	sj->cause = r->cause_buf;
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
	sj->lost_syns = 0;
	r->state = ROUND_IN_FLIGHT;
	r->d->in_flight++;
	sink_send(r->sink, sj);
}

/* sink_env.done: the attempt is over; record it, then retry or end the round. */
void round_attempt_done_cb(void *ctx, struct sink_round *sj)
{
	struct dispatcher *d = ctx;
	struct round *r = (struct round *)sj;
	struct store_attempt *a = &r->attempts[r->tries];
	int64_t now_ns = clock_mono_ns(), took_ns = now_ns - r->started_mono_ns;
	int64_t now_us = now_ns / 1000, took_us = took_ns / 1000;

	d->in_flight--;
	if (sj->latency_us <= 0)
		sj->latency_us = took_us;
	if (r->holds_ep) {
		int seen = endpoint_seen(r->ep, &r->ep_req);
		/* out of the endpoint's open requests first: the stall check looks at the
		 * others */
		endpoint_end(r->ep, &r->ep_req);
		r->holds_ep = 0;
		/* a SYN the receiver's full accept queue dropped says it has more than it
		 * takes, even when the connect made again then went through */
		if (sj->lost_syns)
			endpoint_record(r->ep, now_us, sj->latency_us, CONCURRENCY_REFUSED,
					seen);
		if (!sj->local)
			endpoint_record(r->ep, now_us, sj->latency_us,
					(enum concurrency_outcome)sj->flow, seen);
	}
	if (sj->local) {
		/* outboxd ran out of something (descriptors, ports): not the subscriber's doing,
		 * so not a try; the delivery goes back and comes again in a moment */
		log_warn("delivery %s: not sent: %s (a resource of this outboxd; the try does not "
			 "count)", r->claim->delivery_id, sj->cause);
		round_release(r, release_spread_ms(d, RELEASE_MIN_MS));
		return;
	}
	a->n = sj->attempt_no;
	a->kind = r->kind;
	a->duration_ms = took_us / 1000;
	a->code = sj->code;
	a->message = r->messages[r->tries];
	a->cause = keep_cause(r, r->tries, r->cause_buf);
	a->not_sent = !sj->sent;
	r->retry_after_ms = sj->retry_after_ms;
	metrics_attempt(a->code, took_us);
	otlp_attempt(r->claim, a, sj->span_id, r->started_wall_ns, took_ns);
	r->tries++;
	if (sj->end_round) {
		round_slot_put(r);
		round_stop(r);
		return;
	}
	round_after_attempt(r);
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
static void round_park(struct round *r)
{
	struct dispatcher *d = r->d;
	struct sub_limits *x = r->limits;

	int cap = limits_parked_cap(d->cfg.max_in_flight, r->sub,
				    r->ep ? concurrency_limit(&r->ep->conc) : 0);
	if (x->parked >= cap) {
		if (!x->saturated) {
			x->saturated = cap;
			x->full_since_us = 0;
			x->stuck = 0;
			d->n_saturated++;
		}
		/* a queue claims wait for is due back soon; a stuck one's as before */
		round_release(r, release_spread_ms(d, x->stuck ? RELEASE_MIN_MS : RELEASE_FULL_MS));
		return;
	}
	r->state = ROUND_PARKED;
	r->parked_us = clock_mono_us();
	round_queued(r, 1);
	r->next = NULL;
	if (x->parked_tail)
		x->parked_tail->next = r;
	else
		x->parked_head = r;
	x->parked_tail = r;
	x->parked++;
	if (!x->on_parked_list) {
		x->on_parked_list = 1;
		x->next_parked = d->parked_subs;
		d->parked_subs = x;
	}
}

/* Starts the next attempt of the round, or parks it behind its subscription's limits
 * (and behind the rounds parked there already: a queue keeps its order). */
static void round_begin(struct round *r)
{
	if (r->limits && (r->limits->parked_head || !round_limits_take(r, clock_mono_us()))) {
		round_park(r);
		return;
	}
	if (!r->limits && !round_limits_take(r, clock_mono_us())) {
		round_release(r, RELEASE_MIN_MS); /* no queue to wait in (out of memory) */
		return;
	}
	round_go(r);
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
			struct round *r = x->parked_head;
			int old = stopping || now_us - r->parked_us >= too_old_us;
			if (!old && !round_limits_take(r, now_us)) {
				int64_t w = limits_wait(x, r->sub, now_us);
				if (w > 0 && (wait < 0 || w < wait))
					wait = w;
				break;
			}
			x->parked_head = r->next;
			if (!x->parked_head)
				x->parked_tail = NULL;
			x->parked--;
			r->next = NULL;
			round_queued(r, 0);
			if (old) {
				round_release(r, stopping ? 0 : RELEASE_MIN_MS);
			} else {
				x->started++;
				round_go(r);
			}
		}
		if (x->saturated && !x->parked_head) {
			x->saturated = 0; /* drained: claims bring its deliveries again */
			x->stuck = 0;
			x->full_since_us = 0;
			d->n_saturated--;
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
	struct round *r = d->free_list;
	d->free_list = r->next;
	d->active++;
	r->batch = b;
	r->claim = c;
	r->sj.claim = c;
	r->tries = 0;
	r->sink = NULL;
	r->limits = NULL;
	r->ep = NULL;
	r->holds_ep = 0;
	r->ep_queued = 0;
	r->probe = 0;
	r->holds_slot = 0;
	r->retry_after_ms = -1;
	r->lease_until_ms = c->lease_until;
	r->lease_lost = 0;
	r->seq = ++d->round_seq;
	r->sub = sub_set_find(b->subs, c->subscription_id);
	r->sj.sub = r->sub;
	/* The round's layer: an operator's replay is manual; a FAILED delivery is retried by
	 * the scheduled layer, and so is a NEW one stored to start there (a message of a
	 * dead-letter topic, whose immediate tries were spent upstream: it stays NEW until
	 * that first scheduled round, store_claim.starts_scheduled); else the immediate
	 * round. */
	if (c->replay)
		r->kind = ATTEMPT_MANUAL;
	else if (c->status == DELIVERY_FAILED || c->starts_scheduled)
		r->kind = ATTEMPT_SCHEDULED;
	else
		r->kind = ATTEMPT_IMMEDIATE;

	if (atomic_load(&d->stopping)) {
		/* Claimed as the shutdown began (the writer answered late): handed back
		 * untouched, due now, for whoever runs next. */
		round_release(r, 0);
		return;
	}
	if (!r->sub && b->subs->loaded_at_ms <= c->event_created_at + LEASE_MARGIN_MS) {
		/* Not in a set read before (or about when) the delivery was made: the
		 * subscription may be newer than this instance's set (created through another
		 * instance a moment ago). Read the set again and try later; only a set read
		 * after the delivery was made can say it is gone. */
		sub_registry_want_reload(d->reg);
		round_release(r, RELEASE_MIN_MS);
		return;
	}
	if (!r->sub) {
		/* The subscription was deleted: nothing to send to; keep the delivery visible
		 * in the dead-letter queue instead of dropping it. */
		static const struct subscription gone = {.retry = {.immediate = 1}};
		char cause[320];
		r->sub = &gone;
		r->kind = ATTEMPT_MANUAL; /* no scheduled retry for it */
		if (c->source && strncmp(c->source, "kafka:", 6) == 0 &&
		    strcmp(c->event_type, "kafka.undecodable") == 0) {
			/* a replayed undecodable Kafka message: still nowhere to send it */
			snprintf(cause, sizeof(cause), "the message from %s could not be decoded; its "
				 "raw bytes are the event's payload", c->source);
			round_fail_attempt(r, 422, "undecodable", cause);
			return;
		}
		snprintf(cause, sizeof(cause), "subscription %s no longer exists",
			 c->subscription_id);
		round_fail_attempt(r, 410, "subscription deleted", cause);
		return;
	}
	if (!r->sub->enabled) {
		round_release(r, d->cfg.disabled_delay_ms);
		return;
	}
	if (!(r->sink = sink_set_find(&d->sinks, r->sub->endpoint))) {
		/* kafka:// without kafka_brokers: a failed attempt like any other, so the
		 * delivery waits in the retries (and the DLQ) until the operator adds it. */
		round_fail_attempt(r, 503, "no delivery target",
				 "no sink of this outboxd delivers to this endpoint's scheme "
				 "(kafka:// endpoints need kafka_brokers)");
		return;
	}
	if ((r->limits = limits_get(&d->limits, r->sub))) {
		r->limits->refs++;
		r->ep = limits_endpoint(r->limits, r->sub, &d->endpoints, clock_mono_us());
	}
	if (r->limits && limits_admit(r->limits, r->sub, c->delivery_id, &r->probe) == BREAKER_DELAY) {
		round_delay_action(r);
		return;
	}
	int round_tries = r->sub->retry.immediate < MAX_TRIES ? r->sub->retry.immediate : MAX_TRIES;
	if (r->kind == ATTEMPT_SCHEDULED) {
		/* a linear retry runs the endpoint retry again: a round of retry.immediate
		 * tries, so linear retries x immediate tries in all (docs/retries.md); the
		 * other policies' retries are one try each */
		r->max_tries = r->sub->retry.policy != RETRY_LINEAR ? 1 : round_tries;
		r->timeout_ms = r->sub->retry.timeout_ms;
	} else {
		r->max_tries = round_tries;
		r->timeout_ms = r->kind == ATTEMPT_MANUAL ? r->sub->retry.timeout_ms
							  : r->sub->retry.immediate_timeout_ms;
	}
	round_begin(r);
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
static void audit_log(const struct round *r)
{
	const struct store_result *res = &r->wr.result;
	int64_t duration = 0;
	char at[RFC3339_LEN];

	for (int i = 0; i < r->tries; i++)
		duration += r->attempts[i].duration_ms;
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:I, s:s}", "delivery_id",
			      r->claim->delivery_id, "event_id", r->claim->event_id,
			      "subscription_id", r->claim->subscription_id, "event_type",
			      r->claim->event_type, "code", res->last_code > 0 ? res->last_code :
			      r->tries ? r->attempts[r->tries - 1].code : 0, "attempts", r->tries,
			      "attempt_count", res->attempt_count, "duration_ms", (json_int_t)duration,
			      "kind", attempt_kind_name(r->kind));
	if (!o)
		return;
	if (r->sub && r->sub->name)
		json_object_set_new(o, "subscription_name", json_string(r->sub->name));
	if (res->status != DELIVERY_PROCESSED && res->last_message)
		json_object_set_new(o, "message", json_string(res->last_message));
	if (res->next_attempt_at)
		json_object_set_new(o, "next_attempt_at",
				    json_string(clock_format_rfc3339(res->next_attempt_at, at)));
	char *fields = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (fields)
		log_record(r->audit, fields);
	free(fields);
}

void round_recycle(struct dispatcher *d, struct round *r)
{
	if (r->audit && atomic_load_explicit(&d->log_deliveries, memory_order_relaxed))
		audit_log(r);
	r->audit = NULL;
	round_causes_free(r);
	if (r->sink)
		sink_round_end(r->sink, &r->sj);
	r->sink = NULL;
	if (r->limits)
		r->limits->refs--;
	r->limits = NULL;
	r->ep = NULL;
	r->probe = 0;
	batch_release(d, r->batch);
	r->batch = NULL;
	r->claim = NULL;
	r->state = ROUND_FREE;
	r->next = d->free_list;
	d->free_list = r;
	d->active--;
}

/* Starts the waiting rounds whose stagger is over (all of them, handed back, when
 * stopping). */
void rounds_run_timers(struct dispatcher *d, int64_t now_us)
{
	while (d->n_waiting && (d->waiting[0]->wake_us <= now_us || atomic_load(&d->stopping))) {
		struct round *r = waiting_pop(d);
		if (atomic_load(&d->stopping))
			round_release(r, 0);
		else
			round_begin(r);
	}
}

int64_t rounds_wait_us(const struct dispatcher *d, int64_t now_us)
{
	if (!d->n_waiting)
		return -1;
	return d->waiting[0]->wake_us > now_us ? d->waiting[0]->wake_us - now_us : 0;
}

