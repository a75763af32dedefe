/* fake_sink.c: the scripted sink of the dispatcher's unit tests (see fake_sink.h). Must
 * not open a socket or a file: its attempts are the script's. */
#include "fake_sink.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "core/concurrency.h"

static void fake_attach(void *priv, const struct sink_env *env)
{
	struct fake_sink *f = priv;
	f->env = *env;
}

static void fake_send(void *priv, struct sink_round *j)
{
	struct fake_sink *f = priv;

	if (f->n_pending == FAKE_SINK_PENDING)
		fail_msg("fake sink: more than %d attempts at once", FAKE_SINK_PENDING);
	f->pending[f->n_pending++] = j;
	if (f->n_sent < FAKE_SINK_STEPS) {
		struct fake_sent *s = &f->sent[f->n_sent++];
		snprintf(s->delivery_id, sizeof(s->delivery_id), "%s", j->claim->delivery_id);
		s->attempt_no = j->attempt_no;
		s->timeout_ms = j->timeout_ms;
	}
}

/* Ends attempt j with step st, as a real sink reports an answer or a failure. */
static void fake_end(struct fake_sink *f, struct sink_round *j, const struct fake_step *st)
{
	if (st->abandon) {
		f->env.abandoned(f->env.ctx, j);
		return;
	}
	j->code = st->code;
	if (st->message)
		snprintf(j->message, SINK_MSG_LEN, "%s", st->message);
	else
		snprintf(j->message, SINK_MSG_LEN, "HTTP %d", st->code);
	snprintf(j->cause, SINK_CAUSE_LEN, "%s", st->cause ? st->cause : "");
	j->retry_after_ms = st->retry_after_ms > 0 ? st->retry_after_ms : -1;
	j->sent = !st->not_sent;
	j->permanent = st->permanent;
	j->end_round = st->end_round;
	j->local = st->local;
	if (st->latency_us > 0)
		j->latency_us = st->latency_us;
	j->flow = CONCURRENCY_NEUTRAL;
	f->env.done(f->env.ctx, j);
}

size_t fake_sink_run(struct fake_sink *f)
{
	size_t n = f->n_pending;
	struct sink_round *now[FAKE_SINK_PENDING];

	/* the attempts waiting now; those their ends start wait for the next run */
	memcpy(now, f->pending, n * sizeof(now[0]));
	f->n_pending = 0;
	for (size_t i = 0; i < n; i++) {
		if (f->next_step == f->n_script)
			fail_msg("fake sink: attempt %d of delivery %s has no step in the script",
				 now[i]->attempt_no, now[i]->claim->delivery_id);
		fake_end(f, now[i], &f->script[f->next_step++]);
	}
	return n;
}

static void fake_run(void *priv)
{
	fake_sink_run(priv);
}

static int fake_busy(void *priv)
{
	struct fake_sink *f = priv;
	return (int)f->n_pending;
}

static void fake_abort(void *priv)
{
	struct fake_sink *f = priv;
	size_t n = f->n_pending;

	f->n_pending = 0;
	for (size_t i = 0; i < n; i++)
		f->env.abandoned(f->env.ctx, f->pending[i]);
}

static int fake_dead_letter(void *priv, const struct store_claim *c)
{
	struct fake_sink *f = priv;
	return f->dead_letter && c->source && strncmp(c->source, "kafka:", 6) == 0;
}

static const struct sink_methods fake_methods = {
	.dead_letter = fake_dead_letter,
	.attach = fake_attach,
	.send = fake_send,
	.run = fake_run,
	.busy = fake_busy,
	.abort = fake_abort,
};

/* "fake://" endpoints, with every capability a subscription may ask for */
static const struct sink_type fake_type = {
	.name = "fake",
	.schemes = {{"fake", SINK_CAN_TIMEOUT | SINK_CAN_HEADERS | SINK_CAN_SIGN |
				     SINK_CAN_ORDERING | SINK_CAN_AUTH_ANY}},
	.methods = &fake_methods,
};

void fake_sink_init(struct fake_sink *f)
{
	memset(f, 0, sizeof(*f));
	f->sink.type = &fake_type;
	f->sink.priv = f;
	f->set.members[0] = &f->sink;
	f->set.n = 1;
}

void fake_sink_script(struct fake_sink *f, const struct fake_step *steps, size_t n)
{
	if (f->n_script + n > FAKE_SINK_STEPS)
		fail_msg("fake sink: a script longer than %d steps", FAKE_SINK_STEPS);
	memcpy(&f->script[f->n_script], steps, n * sizeof(*steps));
	f->n_script += n;
}
