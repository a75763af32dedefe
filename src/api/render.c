/* render.c: JSON views of events, deliveries and attempts. */
#include "api/render.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>


#include "core/header.h"
#include "util/base64.h"
#include "util/clock.h"

json_t *render_time(int64_t ms)
{
	char buf[RFC3339_LEN];
	return ms ? json_string(clock_format_rfc3339(ms, buf)) : json_null();
}

static json_t *str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* An event without its payload. */
static json_t *event_head(const struct store_event *ev)
{
	json_t *o = json_pack("{s:s, s:s, s:s, s:o, s:o, s:s, s:o}", "id", ev->id, "event_type",
			      ev->event_type, "source", ev->source ? ev->source : "",
			      "source_event_id", str_or_null(ev->source_event_id), "partition_key",
			      str_or_null(ev->partition_key), "content_type", ev->content_type,
			      "created_at", render_time(ev->created_at));
	/* the webhook-id its deliveries carry: its id upstream, else its own */
	json_object_set_new(o, "webhook_id", json_string(ev->webhook_id ? ev->webhook_id : ev->id));
	return o;
}

json_t *render_event(const struct store_event *ev)
{
	json_t *o = event_head(ev);
	json_t *payload = NULL;
	if (header_is_json_type(ev->content_type))
		payload = json_loadb(ev->payload, ev->payload_len, JSON_DECODE_ANY, NULL);
	if (payload) {
		json_object_set_new(o, "payload", payload);
	} else {
		char *b64 = malloc(base64_encoded_size(ev->payload_len));
		if (b64) {
			base64_encode(ev->payload, ev->payload_len, b64);
			json_object_set_new(o, "payload_base64", json_string(b64));
			free(b64);
		}
	}
	return o;
}

/* An event of the search (GET /v1/events): render_event without the payload, with its
 * deliveries counted by state (the names of GET /v1/stats). */
json_t *render_event_summary(const struct store_event_summary *e)
{
	json_t *o = event_head(&e->event);
	json_object_set_new(o, "delivery_counts",
			    json_pack("{s:I, s:I, s:I, s:I}", "NEW", (json_int_t)e->new_count,
				      "PROCESSED", (json_int_t)e->processed_count,
				      "FAILED_RETRYING", (json_int_t)e->retrying_count,
				      "FAILED_DEAD", (json_int_t)e->dead_count));
	return o;
}

json_t *render_delivery(const struct store_delivery *d)
{
	int dead = d->status == DELIVERY_FAILED && d->next_attempt_at == 0;
	json_t *o = json_pack("{s:s, s:s, s:s, s:s, s:s, s:b, s:b, s:i, s:i}", "id", d->id,
			      "event_id", d->event_id, "subscription_id", d->subscription_id,
			      "event_type", d->event_type ? d->event_type : "", "status",
			      delivery_status_name(d->status), "dead", dead, "replay", d->replay,
			      "attempt_count", d->attempt_count, "retry_count", d->retry_count);
	json_object_set_new(o, "next_attempt_at",
			    d->status == DELIVERY_PROCESSED ? json_null() : render_time(d->next_attempt_at));
	if (d->last_code)
		json_object_set_new(o, "last_error",
				    json_pack("{s:i, s:o, s:o}", "code", d->last_code, "message",
					      str_or_null(d->last_message), "cause",
					      str_or_null(d->last_cause)));
	else
		json_object_set_new(o, "last_error", json_null());
	json_object_set_new(o, "created_at", render_time(d->created_at));
	json_object_set_new(o, "updated_at", render_time(d->updated_at));
	json_object_set_new(o, "processed_at", render_time(d->processed_at));
	/* when its current run of failures began (FAILED only): how what keeps failing is
	 * found when max_retries 0 keeps it out of the DLQ */
	json_object_set_new(o, "failing_since", d->status == DELIVERY_FAILED ?
							render_time(d->failing_since) : json_null());
	json_object_set_new(o, "in_flight", json_boolean(d->lease_owner != NULL));
	/* per-key ordering: parked behind a dead delivery of the same partition_key */
	json_object_set_new(o, "blocked", json_boolean(d->blocked));
	return o;
}

json_t *render_attempt(const struct store_attempt_row *a)
{
	return json_pack("{s:i, s:s, s:o, s:I, s:i, s:o, s:o, s:b}", "n", a->n, "kind",
			 attempt_kind_name(a->kind), "started_at", render_time(a->started_at),
			 "duration_ms", (json_int_t)a->duration_ms, "code", a->code, "message",
			 str_or_null(a->message), "cause", str_or_null(a->cause), "sent",
			 !a->not_sent);
}
