/* routes_events.c: POST /v1/events (ingest) and GET /v1/events/{id}. */
#include <jansson.h>
#include <stdlib.h>

#include "api/api.h"
#include "api/render.h"
#include "core/metrics.h"
#include "core/trace.h"
#include "intake/ingest.h"

void api_events_post(struct api *api, const struct api_request *req, struct api_response *res)
{
	struct ingest_batch b;
	struct input_error err;

	if (ingest_parse(req->body ? req->body : "", req->body_len, api->max_payload, &b, &err)) {
		metrics_ingest_rejected(err.status);
		api_reply_error(res, &err);
		return;
	}
	/* A valid trace context travels with the events to their subscribers; an invalid
	 * one is ignored, as W3C asks of a receiver. */
	if (trace_valid(req->traceparent))
		for (size_t i = 0; i < b.n; i++)
			b.events[i].traceparent = req->traceparent;
	/* A fan-out from a set that may not be the store's could leave out a subscription:
	 * refused, so the producer retries, rather than acknowledged without it. */
	char why[256];
	if (!sub_registry_current(api->reg, why, sizeof(why))) {
		metrics_ingest_rejected(503);
		api_reply_errorf(res, 503, "subscriptions_unavailable", NULL, "%s", why);
		ingest_batch_free(&b);
		return;
	}
	struct sub_set *set = sub_registry_acquire(api->reg);
	int rc = ingest_fanout(&b, set) ? STORE_ERROR : STORE_OK;
	if (rc == STORE_OK)
		rc = writer_ingest(api->writer, b.events, b.n);
	sub_registry_release(api->reg, set);
	if (rc != STORE_OK) {
		/* Nothing is acknowledged that is not durable: a 202 means committed and
		 * synced. */
		if (rc == STORE_ERROR)
			rc = STORE_UNAVAILABLE;
		metrics_ingest_rejected(503);
		api_reply_store_error(res, rc, "event");
		ingest_batch_free(&b);
		return;
	}
	metrics_ingested((long)b.n);
	json_t *ids = json_array(), *dups = NULL;
	for (size_t i = 0; i < b.n; i++) {
		json_array_append_new(ids, json_string(b.events[i].id));
		if (b.events[i].duplicate) {
			if (!dups)
				dups = json_array();
			json_array_append_new(dups, json_integer((json_int_t)i));
		}
	}
	json_t *out = json_pack("{s:o}", "ids", ids);
	if (dups && !b.is_batch) {
		json_object_set_new(out, "duplicate", json_true());
		json_decref(dups);
	} else if (dups) {
		json_object_set_new(out, "duplicates", dups);
	}
	ingest_batch_free(&b);
	api_reply_json(res, 202, out);
}

void api_events_get(struct api *api, const char *id, struct api_response *res)
{
	struct store_event ev;
	struct store_delivery *ds = NULL;
	size_t n = 0;

	int rc = store_event_get(api->st, id, &ev);
	if (rc) {
		api_reply_store_error(res, rc, "event");
		return;
	}
	rc = store_event_deliveries(api->st, id, &ds, &n);
	if (rc) {
		store_event_free(&ev);
		api_reply_store_error(res, rc, "event");
		return;
	}
	json_t *out = render_event(&ev);
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(list, render_delivery(&ds[i]));
	json_object_set_new(out, "deliveries", list);
	store_deliveries_free(ds, n);
	store_event_free(&ev);
	api_reply_json(res, 200, out);
}
