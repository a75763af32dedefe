/* ops_event.h: outboxd's own operational events — the hook the dispatcher and
 * the janitor thread report through, and the rules every layer shares: their event types
 * start with "outboxd.", only patterns starting with "outboxd." match them (so "*" does
 * not), and clients may not send such types. intake/ops_events.c stores them. */
#ifndef OUTBOXD_CORE_OPS_EVENT_H
#define OUTBOXD_CORE_OPS_EVENT_H

#include <jansson.h>
#include <string.h>

#define OPS_EVENT_PREFIX "outboxd."

/* kind: "delivery.dead", "subscription.disabled", ...; subscription_id (borrowed) is the
 * one the event is about, for per-subscription rate limits (may be ""); payload is
 * consumed. */
typedef void (*ops_event_cb)(void *ctx, const char *kind, const char *subscription_id,
			     json_t *payload);

struct ops_event_hook {
	ops_event_cb emit;     /* NULL: operational events are off */
	void *ctx;
};

static inline void ops_event_emit(const struct ops_event_hook *h, const char *kind,
				  const char *subscription_id, json_t *payload)
{
	if (h && h->emit)
		h->emit(h->ctx, kind, subscription_id ? subscription_id : "", payload);
	else
		json_decref(payload);
}

/* 1 when event_type is one of outboxd's own. */
static inline int ops_event_type(const char *event_type)
{
	return strncmp(event_type, OPS_EVENT_PREFIX, strlen(OPS_EVENT_PREFIX)) == 0;
}

#endif
