/* routes_overview.c: the reads the operator console needs besides the lists — who the
 * caller is (GET /v1/whoami: a read-only token gets a read-only console), attempts per
 * minute by outcome with their latency, of every subscription or one
 * (GET /v1/stats/series), and the request outboxd sends for a delivery with its
 * credentials masked and its body exact (GET /v1/deliveries/{id}/request).
 *
 * Must not write, and must never put a credential in an answer. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/render.h"
#include "core/token.h"
#include "util/base64.h"
#include "util/clock.h"
#include "util/uuid.h"

#define MASK "********"
#define MINUTE_MS 60000
#define SERIES_DEFAULT_MINUTES 60

void api_whoami(struct api *api, const struct api_request *req, struct api_response *res)
{
	api_reply_json(res, 200, json_pack("{s:s, s:o, s:o}", "name", req->actor ? req->actor : "",
					   "scopes", token_scopes_json(req->scopes), "grants",
					   token_scopes_json(token_scope_grants(req->scopes))));
}

/* A percentile of a bucket's durations, null when the bucket has no attempt. */
static json_t *latency(int64_t ms)
{
	return ms < 0 ? json_null() : json_integer((json_int_t)ms);
}

void api_stats_series(struct api *api, const struct api_request *req, struct api_response *res)
{
	long minutes;
	if (api_query_int(req, "minutes", SERIES_DEFAULT_MINUTES, 1, STORE_SERIES_MAX, &minutes,
			  res))
		return;
	/* One subscription's attempts (a deleted one's history included), or everyone's. */
	const char *sub = api_query_get(req, "subscription_id");
	if (sub && !uuid_valid(sub)) {
		api_reply_errorf(res, 400, "invalid_argument", "subscription_id",
				 "subscription_id must be a UUID, got \"%.64s\"", sub);
		return;
	}
	/* Whole minutes, the last one the current (partial) minute. */
	int64_t now = clock_now_ms();
	int64_t from = (now / MINUTE_MS - (minutes - 1)) * MINUTE_MS;
	struct store_series_bucket *b = calloc((size_t)minutes, sizeof(*b));
	if (!b) {
		api_reply_errorf(res, 500, "internal", NULL, "out of memory");
		return;
	}
	int rc = store_attempt_series(api->st, sub, from, MINUTE_MS, (size_t)minutes, b);
	if (rc) {
		free(b);
		api_reply_store_error(res, rc, "stats");
		return;
	}
	json_t *points = json_array();
	for (long i = 0; i < minutes; i++)
		json_array_append_new(points, json_pack("{s:o, s:I, s:I, s:I, s:o, s:o}", "at",
							render_time(from + i * MINUTE_MS), "succeeded",
							(json_int_t)b[i].succeeded, "client_error",
							(json_int_t)b[i].client_error, "server_error",
							(json_int_t)b[i].server_error, "latency_p50_ms",
							latency(b[i].p50_ms), "latency_p99_ms",
							latency(b[i].p99_ms)));
	free(b);
	json_t *out = json_pack("{s:I, s:o, s:o, s:o}", "bucket_ms", (json_int_t)MINUTE_MS, "from",
				render_time(from), "to", render_time(from + minutes * MINUTE_MS),
				"points", points);
	if (sub)
		json_object_set_new(out, "subscription_id", json_string(sub));
	api_reply_json(res, 200, out);
}

static void add_header(json_t *list, const char *name, const char *value, const char *note)
{
	json_t *h = json_pack("{s:s, s:s}", "name", name, "value", value ? value : "");
	if (note)
		json_object_set_new(h, "note", json_string(note));
	json_array_append_new(list, h);
}

/* The headers as deliver/http_request.c builds them, for the subscription as it is now;
 * values that change with each attempt are described, credentials and secret headers
 * masked. */
static json_t *http_request(const struct subscription *s, const struct store_delivery *d,
			    const struct store_event *ev)
{
	const char *content_type = ev ? ev->content_type : NULL;
	json_t *h = json_array();
	char url[2048];
	if (s->auth_type == AUTH_QUERY)
		snprintf(url, sizeof(url), "%s%c%s=" MASK, s->endpoint,
			 strchr(s->endpoint, '?') ? '&' : '?', s->auth_name ? s->auth_name : "");
	else
		snprintf(url, sizeof(url), "%s", s->endpoint);
	add_header(h, "Content-Type",
		   s->payload_format == PAYLOAD_BINARY ? "application/octet-stream"
						       : (content_type ? content_type
								       : "application/json"),
		   NULL);
	add_header(h, "webhook-id", ev && ev->webhook_id ? ev->webhook_id : d->event_id,
		   ev && ev->webhook_id ? "the event's id upstream (its Kafka envelope's "
					  "event.id): the same on every attempt"
				      : "the event id: the same on every attempt");
	add_header(h, "webhook-timestamp", "", "Unix seconds when each attempt was sent");
	add_header(h, "outboxd-event-type", d->event_type, NULL);
	add_header(h, "outboxd-delivery-id", d->id, NULL);
	add_header(h, "outboxd-attempt", "", "the attempt's number");
	add_header(h, "traceparent", "", "W3C trace context, a new span per attempt");
	add_header(h, "User-Agent", "outboxd/0.1", NULL);
	if (s->secret)
		add_header(h, "webhook-signature", "v1," MASK,
			   s->previous_secret ? "HMAC-SHA256 with the secret, and with the "
						"previous one during its grace period"
					      : "HMAC-SHA256 with the subscription's secret");
	switch (s->auth_type) {
	case AUTH_BASIC:
		add_header(h, "Authorization", "Basic " MASK, NULL);
		break;
	case AUTH_BEARER:
		add_header(h, "Authorization", "Bearer " MASK, NULL);
		break;
	case AUTH_OAUTH2:
		add_header(h, "Authorization", "Bearer " MASK, "an OAuth2 access token");
		break;
	case AUTH_API_KEY:
		add_header(h, s->auth_name ? s->auth_name : "", MASK, NULL);
		break;
	default:
		break;
	}
	for (size_t i = 0; i < s->n_headers; i++)
		add_header(h, s->headers[i].name, s->headers[i].secret ? MASK : s->headers[i].value,
			   s->headers[i].secret ? "a secret header" : NULL);
	json_t *out = json_pack("{s:s, s:s, s:o}", "method", "POST", "url", url, "headers", h);
	/* The body is the payload byte for byte (no transformation): base64, so
	 * the console can show JSON exactly as sent (GET /v1/deliveries/{id} re-encodes it). */
	char *b64 = ev ? malloc(base64_encoded_size(ev->payload_len)) : NULL;
	if (b64) {
		base64_encode(ev->payload, ev->payload_len, b64);
		json_object_set_new(out, "body_base64", json_string(b64));
		free(b64);
	}
	return out;
}

void api_delivery_request(struct api *api, const char *id, struct api_response *res)
{
	struct store_delivery d;
	struct store_event ev;
	int rc = store_delivery_get(api->st, id, &d);
	if (rc) {
		api_reply_store_error(res, rc, "delivery");
		return;
	}
	int have_event = store_event_get(api->st, d.event_id, &ev) == STORE_OK;
	struct sub_set *set = sub_registry_acquire(api->reg);
	const struct subscription *s = sub_set_find(set, d.subscription_id);
	if (!s)
		api_reply_errorf(res, 404, "not_found", "subscription_id",
				 "subscription %s of delivery %s no longer exists", d.subscription_id,
				 d.id);
	else if (strncmp(s->endpoint, "kafka://", 8) == 0)
		api_reply_errorf(res, 422, "unsupported", "subscription_id",
				 "delivery %s is published to Kafka (%s), not sent over HTTP", d.id,
				 s->endpoint);
	else
		api_reply_json(res, 200, http_request(s, &d, have_event ? &ev : NULL));
	sub_registry_release(api->reg, set);
	if (have_event)
		store_event_free(&ev);
	store_delivery_free(&d);
}
