/* routes_events.c: POST /v1/events (ingest), the event search (GET /v1/events),
 * GET /v1/events/{id}, and POST /v1/subscriptions/{id}/test (one event for one
 * subscription). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/render.h"
#include "core/filter.h"
#include "core/metrics.h"
#include "core/payload_filter.h"
#include "core/trace.h"
#include "intake/ingest.h"
#include "util/clock.h"
#include "util/uuid.h"

/* The answer to an ingest without duplicates, {"ids":[...]}, written directly when every
 * id is plain text of a UUID (what outboxd makes): built with jansson, a string, an array
 * slot and their release cost ~3,000 instructions an event. NULL when the batch needs
 * the general path (an id of other characters) or memory ran out; the text is what
 * jansson writes for the same answer. */
static char *ids_body(const struct ingest_batch *b)
{
	static const char head[] = "{\"ids\":[", tail[] = "]}";
	size_t need = sizeof(head) + sizeof(tail) + b->n * (UUID_STR_LEN + 3);
	for (size_t i = 0; i < b->n; i++)
		if (!uuid_valid(b->events[i].id)) /* nothing to escape, and the length above */
			return NULL;
	char *out = malloc(need), *p = out;
	if (!out)
		return NULL;
	memcpy(p, head, sizeof(head) - 1);
	p += sizeof(head) - 1;
	for (size_t i = 0; i < b->n; i++) {
		size_t len = strlen(b->events[i].id);
		if (i)
			*p++ = ',';
		*p++ = '"';
		memcpy(p, b->events[i].id, len);
		p += len;
		*p++ = '"';
	}
	memcpy(p, tail, sizeof(tail)); /* with its NUL */
	return out;
}

/* The answer to an ingest once the writer returned rc for the batch. */
static void ingest_answer(int rc, struct ingest_batch *b, struct api_response *res)
{
	if (rc != STORE_OK) {
		/* Nothing is acknowledged that is not durable: a 202 means committed and
		 * synced. */
		if (rc == STORE_ERROR)
			rc = STORE_UNAVAILABLE;
		metrics_ingest_rejected(INGEST_HTTP, 503);
		api_reply_store_error(res, rc, "event");
		return;
	}
	metrics_ingested(INGEST_HTTP, (long)b->n);
	int any_dup = 0;
	for (size_t i = 0; i < b->n; i++)
		any_dup |= b->events[i].duplicate;
	if (!any_dup && (res->body = ids_body(b)) != NULL) {
		res->status = 202;
		return;
	}
	json_t *ids = json_array(), *dups = NULL;
	for (size_t i = 0; i < b->n; i++) {
		json_array_append_new(ids, json_string(b->events[i].id));
		if (b->events[i].duplicate) {
			if (!dups)
				dups = json_array();
			json_array_append_new(dups, json_integer((json_int_t)i));
		}
	}
	json_t *out = json_pack("{s:o}", "ids", ids);
	if (dups && !b->is_batch) {
		json_object_set_new(out, "duplicate", json_true());
		json_decref(dups);
	} else if (dups) {
		json_object_set_new(out, "duplicates", dups);
	}
	api_reply_json(res, 202, out);
}

/* An ingest handed to the writer without waiting (req->defer): what its answer is made
 * of once the events are durable. */
struct api_pending {
	struct api *api;
	struct ingest_batch b;
	struct sub_set *set;
	int rc;
	struct api_defer defer;
};

static void ingest_done(void *ctx, int rc)
{
	struct api_pending *pd = ctx;
	pd->rc = rc;
	pd->defer.resume(pd->defer.ctx); /* the server's thread may free pd from here on */
}

void api_pending_free(struct api_pending *pd)
{
	if (!pd)
		return;
	sub_registry_release(pd->api->reg, pd->set);
	ingest_batch_free(&pd->b);
	free(pd);
}

void api_complete(struct api_pending *pd, struct api_response *res)
{
	ingest_answer(pd->rc, &pd->b, res);
	api_pending_free(pd);
}

void api_events_post(struct api *api, const struct api_request *req, struct api_response *res)
{
	struct ingest_batch b;
	struct input_error err;

	if (ingest_parse(req->body ? req->body : "", req->body_len, api->max_payload, &b, &err)) {
		metrics_ingest_rejected(INGEST_HTTP, err.status);
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
		metrics_ingest_rejected(INGEST_HTTP, 503);
		api_reply_errorf(res, 503, "subscriptions_unavailable", NULL, "%s", why);
		ingest_batch_free(&b);
		return;
	}
	struct sub_set *set = sub_registry_acquire(api->reg);
	int rc = ingest_fanout(&b, set) ? STORE_ERROR : STORE_OK;
	struct api_pending *pd = NULL;
	if (rc == STORE_OK && req->defer && (pd = malloc(sizeof(*pd))) != NULL) {
		/* The request's body and headers, which the events point into, stay with the
		 * connection until its answer is sent. */
		if (req->defer->suspend(req->defer->ctx) == 0) {
			*pd = (struct api_pending){.api = api, .b = b, .set = set,
						   .defer = *req->defer};
			res->pending = pd;
			writer_ingest_start(api->writer, pd->b.events, pd->b.n, ingest_done, pd);
			return;
		}
		free(pd);
	}
	if (rc == STORE_OK)
		rc = writer_ingest(api->writer, b.events, b.n);
	sub_registry_release(api->reg, set);
	ingest_answer(rc, &b, res);
	ingest_batch_free(&b);
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

#define EVENTS_PAGE_DEFAULT 100
#define EVENTS_PAGE_MAX 1000

/* The payload search: the events matching f whose payload passes pf, read from the store
 * in pages of SEARCH_PAGE newest first, up to SEARCH_SCAN events or SEARCH_BYTES of
 * payloads per request (a page holds at most SEARCH_PAGE payloads in memory: 50 MiB at the
 * default max_payload); *next is where the reading stopped (NULL: every event read).
 * Returns the store's code. */
#define SEARCH_PAGE 50
#define SEARCH_SCAN 10000
#define SEARCH_BYTES ((size_t)64 << 20)

static int payload_search(struct api *api, struct event_filter *f,
			  const struct payload_filter *pf, json_t *list, size_t *scanned,
			  char **next)
{
	size_t want = f->limit, found = 0, bytes = 0;
	char *cursor = f->cursor ? strdup(f->cursor) : NULL;
	int rc = STORE_OK;

	*scanned = 0;
	*next = NULL;
	if (f->cursor && !cursor)
		return STORE_ERROR;
	f->with_payload = 1;
	while (found < want && *scanned < SEARCH_SCAN && bytes < SEARCH_BYTES) {
		struct store_event_summary *items = NULL;
		char *page_next = NULL;
		size_t n = 0, room = SEARCH_SCAN - *scanned;
		f->cursor = cursor;
		f->limit = room < SEARCH_PAGE ? room : SEARCH_PAGE;
		rc = store_events_list(api->st, f, &items, &n, &page_next);
		free(cursor);
		cursor = NULL;
		if (rc != STORE_OK)
			break;
		size_t i = 0;
		for (; i < n && found < want && bytes < SEARCH_BYTES; i++) {
			struct store_event *ev = &items[i].event;
			bytes += ev->payload_len;
			json_t *doc = payload_filter_doc(ev->content_type, ev->payload,
							 ev->payload_len);
			if (payload_filter_match(pf, doc)) {
				json_array_append_new(list, render_event_summary(&items[i]));
				found++;
			}
			json_decref(doc);
		}
		*scanned += i;
		/* resume after the last event read: the page's own cursor when it was read
		 * whole, else the one after that event (i >= 1: a page is left early only
		 * after reading an event) */
		if (i == n)
			cursor = page_next;
		else if (!(cursor = store_event_cursor(&items[i - 1])))
			rc = STORE_ERROR;
		if (i < n)
			free(page_next);
		store_event_summaries_free(items, n);
		if (rc != STORE_OK || !cursor)
			break;
	}
	*next = cursor;
	return rc;
}

/* The payload filter of ?filter= into *pf (NULL when none): 0, or -1 with the 400 sent. */
static int search_filter(const struct api_request *req, struct payload_filter **pf,
			 struct api_response *res)
{
	const char *text = api_query_get(req, "filter");
	struct input_error err;
	json_error_t jerr;

	*pf = NULL;
	if (!text)
		return 0;
	json_t *fj = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (!fj) {
		api_reply_errorf(res, 400, "invalid_argument", "filter", "filter is not JSON: %s",
				 jerr.text);
		return -1;
	}
	int bad = payload_filter_parse(fj, pf, &err);
	json_decref(fj);
	if (bad)
		api_reply_error(res, &err);
	return bad;
}

void api_events_list(struct api *api, const struct api_request *req, struct api_response *res)
{
	struct event_filter f = {0};
	struct payload_filter *pf;
	struct input_error err;
	char *next = NULL;
	size_t scanned = 0;
	long limit;
	int rc;

	if (event_filter_parse(api_query_get, req, &f, &err)) {
		api_reply_error(res, &err);
		return;
	}
	if (api_query_int(req, "limit", EVENTS_PAGE_DEFAULT, 1, EVENTS_PAGE_MAX, &limit, res) ||
	    search_filter(req, &pf, res))
		return;
	f.limit = (size_t)limit;
	f.cursor = api_query_get(req, "cursor");
	json_t *list = json_array();
	int searching = pf != NULL;
	if (searching) {
		rc = payload_search(api, &f, pf, list, &scanned, &next);
		payload_filter_free(pf);
	} else {
		struct store_event_summary *items = NULL;
		size_t n = 0;
		rc = store_events_list(api->st, &f, &items, &n, &next);
		for (size_t i = 0; rc == STORE_OK && i < n; i++)
			json_array_append_new(list, render_event_summary(&items[i]));
		store_event_summaries_free(items, n);
	}
	if (rc) {
		json_decref(list);
		free(next);
		if (rc == STORE_INVALID)
			api_reply_errorf(res, 400, "invalid_argument", "cursor",
					 "cursor is not one this server returned for the events");
		else
			api_reply_store_error(res, rc, "events");
		return;
	}
	json_t *out = json_pack("{s:o, s:o}", "items", list, "next_cursor",
				next ? json_string(next) : json_null());
	if (searching) /* a payload search says how much it read */
		json_object_set_new(out, "scanned", json_integer((json_int_t)scanned));
	api_reply_json(res, 200, out);
	free(next);
}

#define TYPES_PAGE_DEFAULT 100
#define TYPES_PAGE_MAX 1000

/* The event types of the stored events (GET /v1/event-types), each with its newest
 * event's time and the enabled subscriptions whose patterns take it (a payload filter may
 * still leave some of its events out): what exists, and what nobody subscribes to. */
void api_event_types(struct api *api, const struct api_request *req, struct api_response *res)
{
	struct store_event_type *items = NULL;
	char *next = NULL;
	size_t n = 0;
	long limit;

	if (api_query_int(req, "limit", TYPES_PAGE_DEFAULT, 1, TYPES_PAGE_MAX, &limit, res))
		return;
	int rc = store_event_types(api->st, api_query_get(req, "cursor"), (size_t)limit, &items,
				   &n, &next);
	if (rc == STORE_INVALID) {
		api_reply_errorf(res, 400, "invalid_argument", "cursor",
				 "cursor is not one this server returned for the event types");
		return;
	}
	if (rc) {
		api_reply_store_error(res, rc, "event types");
		return;
	}
	struct sub_set *set = sub_registry_acquire(api->reg);
	char (*ids)[UUID_STR_LEN] = NULL;
	size_t cap = 0;
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++) {
		/* no payload: counted by their patterns alone */
		long subs = sub_set_match_types(set, items[i].event_type, &ids, &cap);
		json_array_append_new(list, json_pack("{s:s, s:o, s:I}", "event_type",
						      items[i].event_type, "last_seen",
						      render_time(items[i].last_seen), "subscriptions",
						      (json_int_t)(subs > 0 ? subs : 0)));
	}
	free(ids);
	sub_registry_release(api->reg, set);
	store_event_types_free(items, n);
	api_reply_json(res, 200, json_pack("{s:o, s:o}", "items", list, "next_cursor",
					   next ? json_string(next) : json_null()));
	free(next);
}

/* A test event: an event like any other (stored, with its delivery, attempts and
 * history), given to this one subscription only, whatever its event_types match. The
 * body is one event as POST /v1/events takes it ({"events":[...]} is refused), or empty:
 * then event_type "test.ping" and a payload naming the subscription, the token that
 * sent it and when. A disabled subscription is refused (409): its delivery would only
 * wait. */
void api_events_test(struct api *api, const char *sub_id, const struct api_request *req,
		     struct api_response *res)
{
	struct ingest_batch b = {0};
	struct input_error err;
	char *made = NULL;
	const char *body = req->body;
	size_t len = req->body_len;
	char ids[1][UUID_STR_LEN];

	struct sub_set *set = sub_registry_acquire(api->reg);
	const struct subscription *s = sub_set_find(set, sub_id);
	if (!s) {
		api_reply_errorf(res, 404, "not_found", "id", "no subscription %s", sub_id);
		goto out;
	}
	if (!s->enabled) {
		api_reply_errorf(res, 409, "conflict", "enabled",
				 "subscription %s is disabled: a test event would wait until it is "
				 "enabled", s->name);
		goto out;
	}
	if (!body || len == 0 || strspn(body, " \t\r\n") == len) {
		json_t *doc = json_pack("{s:s, s:{s:b, s:s, s:s, s:s, s:o}}", "event_type",
					"test.ping", "payload", "test", 1, "subscription_id",
					s->id, "subscription", s->name, "sent_by",
					req->actor ? req->actor : "unknown", "sent_at",
					render_time(clock_now_ms()));
		made = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
		json_decref(doc);
		if (!made) {
			api_reply_errorf(res, 500, "internal", NULL, "out of memory");
			goto out;
		}
		body = made;
		len = strlen(made);
	}
	if (ingest_parse(body, len, api->max_payload, &b, &err)) {
		api_reply_error(res, &err);
		goto out;
	}
	if (b.is_batch) {
		api_reply_errorf(res, 400, "invalid_argument", "events",
				 "a test event is one event: events (a batch) is not taken here");
		goto out;
	}
	if (trace_valid(req->traceparent))
		b.events[0].traceparent = req->traceparent;
	memcpy(ids[0], s->id, UUID_STR_LEN);
	b.events[0].subscription_ids = (const char(*)[UUID_STR_LEN])ids;
	b.events[0].n_subscriptions = 1;
	int rc = writer_ingest(api->writer, b.events, 1);
	if (rc != STORE_OK) {
		api_reply_store_error(res, rc == STORE_ERROR ? STORE_UNAVAILABLE : rc, "event");
		goto out;
	}
	metrics_ingested(INGEST_HTTP, 1);
	api_audit(api, req, "subscription.test", s->id, 1, NULL);
	api_reply_json(res, 202, json_pack("{s:s, s:s, s:b}", "event_id", b.events[0].id,
					   "subscription_id", s->id, "duplicate",
					   b.events[0].duplicate));
out:
	sub_registry_release(api->reg, set);
	ingest_batch_free(&b);
	free(made);
}
