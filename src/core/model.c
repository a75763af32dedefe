/* model.c: names of statuses and kinds, the default retry policy and circuit breaker, and
 * freeing model structs. */
#include "core/model.h"

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

void subscription_clear(struct subscription *s)
{
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
	memset(s, 0, sizeof(*s));
}
