/* model.c: names of statuses and kinds, the default retry policy and circuit breaker, and
 * freeing model structs. */
#include "core/model.h"
#include "core/payload_filter.h"

#include <stdlib.h>
#include <string.h>

static const char *const status_names[] = {"NEW", "PROCESSED", "FAILED"};
static const char *const kind_names[] = {"immediate", "scheduled", "manual"};

const char *delivery_status_name(enum delivery_status s)
{
	return (unsigned)s < 3 ? status_names[s] : "UNKNOWN";
}

int delivery_status_parse(const char *name, enum delivery_status *out)
{
	for (int i = 0; i < 3; i++) {
		if (strcmp(name, status_names[i]) == 0) {
			*out = (enum delivery_status)i;
			return 0;
		}
	}
	return -1;
}

const char *attempt_kind_name(enum attempt_kind k)
{
	return (unsigned)k < 3 ? kind_names[k] : "unknown";
}

enum attempt_kind attempt_kind_parse(const char *name)
{
	for (int i = 0; i < 3; i++)
		if (name && strcmp(name, kind_names[i]) == 0)
			return (enum attempt_kind)i;
	return ATTEMPT_SCHEDULED;
}

void retry_policy_defaults(struct retry_policy *p)
{
	/* The reference architecture's (docs/reference.md), which counts retries after the
	 * first try: the first try and 3 immediate retries (4 tries) with a 1 s timeout; a
	 * scheduled retry every 3 s, at most 3, with a 5 s timeout; a backoff window of
	 * 10–60 s. A delivery that always fails is tried 1 + 3 + 3 = 7 times. */
	p->immediate = 4;
	p->immediate_delay_ms = 100;
	p->immediate_timeout_ms = 1000;
	p->policy = RETRY_FIXED;
	p->interval_ms = 3000;
	p->min_delay_ms = 10000;
	p->max_delay_ms = 60000;
	p->factor = 2.0;
	p->max_retries = RETRY_DEFAULT_MAX_RETRIES;
	p->max_retries_auto = 1;
	p->timeout_ms = 5000;
	p->jitter = 0.0;
	p->retry_after_max_ms = 3600 * 1000LL;
	for (int i = 0; i < 4; i++)
		p->permanent[i] = 0; /* every non-2xx is retried */
}

void retry_policy_settle(struct retry_policy *p)
{
	if (p->max_retries_auto)
		p->max_retries = p->policy == RETRY_EXPONENTIAL ? RETRY_DEFAULT_MAX_RETRIES_EXPONENTIAL
								: RETRY_DEFAULT_MAX_RETRIES;
}

int retry_policy_same(const struct retry_policy *a, const struct retry_policy *b)
{
	return a->immediate == b->immediate && a->immediate_delay_ms == b->immediate_delay_ms &&
	       a->immediate_timeout_ms == b->immediate_timeout_ms && a->policy == b->policy &&
	       a->interval_ms == b->interval_ms && a->min_delay_ms == b->min_delay_ms &&
	       a->max_delay_ms == b->max_delay_ms && a->factor == b->factor &&
	       a->max_retries == b->max_retries && a->max_retries_auto == b->max_retries_auto &&
	       a->timeout_ms == b->timeout_ms && a->jitter == b->jitter &&
	       a->retry_after_max_ms == b->retry_after_max_ms &&
	       memcmp(a->permanent, b->permanent, sizeof(a->permanent)) == 0;
}

void circuit_breaker_defaults(struct circuit_breaker_config *c)
{
	/* Connxio's backoff variables (docs/reference.md): MaxErrorsPerInterval
	 * 1000, FailureCountIntervalMinutes 3, MaxDelayActions 5. */
	c->enabled = 1;
	c->max_errors = 1000;
	c->failure_window_ms = 3 * 60 * 1000LL;
	c->max_delay_actions = 5;
}

void oauth2_params_free(struct oauth2_params *p)
{
	free(p->token_url);
	free(p->client_id);
	free(p->client_secret);
	free(p->scope);
	free(p->audience);
	free(p->username);
	free(p->password);
	memset(p, 0, sizeof(*p));
}

void subscription_free(struct subscription *s)
{
	if (!s)
		return;
	subscription_clear(s);
	free(s);
}

void subscription_hold(struct subscription *s)
{
	__atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
}

void subscription_put(struct subscription *s)
{
	/* refs counts the holders besides the first: it was 0, so this one was the last */
	if (s && __atomic_fetch_sub(&s->refs, 1, __ATOMIC_ACQ_REL) == 0)
		subscription_free(s);
}

void subscription_clear(struct subscription *s)
{
	if (s->stored) /* a clear config (the store has no key) holds credentials */
		explicit_bzero(s->stored, strlen(s->stored));
	free(s->stored);
	free(s->name);
	for (size_t i = 0; i < s->n_event_types; i++)
		free(s->event_types[i]);
	free(s->event_types);
	free(s->endpoint);
	free(s->origin);
	free(s->auth_user);
	free(s->auth_secret);
	free(s->auth_name);
	oauth2_params_free(&s->oauth2);
	for (size_t i = 0; i < s->n_headers; i++) {
		free(s->headers[i].name);
		free(s->headers[i].value);
	}
	free(s->headers);
	free(s->secret);
	free(s->previous_secret);
	free(s->tls_ca_file);
	free(s->tls_client_cert);
	free(s->tls_client_key);
	free(s->disabled_reason);
	payload_filter_free(s->filter);
	memset(s, 0, sizeof(*s));
}
