/* routes_deliveries.c: deliveries and the dead-letter queue — list, detail with the full
 * attempt history, replay (by ids or by filter), purge. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/render.h"
#include "util/clock.h"
#include "util/uuid.h"

#define LIST_DEFAULT 100
#define LIST_MAX 1000
#define REPLAY_MAX_IDS 1000

static const char *qp(const struct api_request *req, const char *name)
{
	return req->query ? req->query(req->query_ctx, name) : NULL;
}

/* Reads the list filters shared by GET /v1/deliveries, GET /v1/dlq and filter replay.
 * get(ctx, name) returns a parameter's text or NULL. */
static int read_filter(const char *(*get)(const void *ctx, const char *name), const void *ctx,
		       struct store_delivery_filter *f, struct input_error *err)
{
	const char *v;

	if ((v = get(ctx, "status"))) {
		if (delivery_status_parse(v, &f->status))
			return input_error_set(err, 400, "invalid_argument", "status",
					       "status must be NEW, PROCESSED or FAILED");
		f->has_status = 1;
	}
	if ((v = get(ctx, "subscription_id"))) {
		if (!uuid_valid(v))
			return input_error_set(err, 400, "invalid_argument", "subscription_id",
					       "subscription_id must be a UUID");
		f->subscription_id = v;
	}
	if ((v = get(ctx, "event_type")))
		f->event_type = v;
	if ((v = get(ctx, "q"))) {
		if (strlen(v) > 256)
			return input_error_set(err, 400, "invalid_argument", "q",
					       "q must be at most 256 characters");
		f->q = v;
	}
	if ((v = get(ctx, "from")) && clock_parse_rfc3339(v, &f->from_ms))
		return input_error_set(err, 400, "invalid_argument", "from",
				       "from must be an RFC 3339 time such as 2026-11-21T10:00:00Z");
	if ((v = get(ctx, "to")) && clock_parse_rfc3339(v, &f->to_ms))
		return input_error_set(err, 400, "invalid_argument", "to",
				       "to must be an RFC 3339 time such as 2026-11-21T11:00:00Z");
	if ((v = get(ctx, "sort"))) {
		if (strcmp(v, "created_at") == 0)
			f->sort = STORE_SORT_CREATED;
		else if (strcmp(v, "updated_at") == 0)
			f->sort = STORE_SORT_UPDATED;
		else if (strcmp(v, "attempt_count") == 0)
			f->sort = STORE_SORT_ATTEMPTS;
		else
			return input_error_set(err, 400, "invalid_argument", "sort",
					       "sort must be created_at, updated_at or attempt_count");
	}
	if ((v = get(ctx, "order"))) {
		if (strcmp(v, "asc") == 0)
			f->descending = 0;
		else if (strcmp(v, "desc") == 0)
			f->descending = 1;
		else
			return input_error_set(err, 400, "invalid_argument", "order",
					       "order must be asc or desc");
	}
	return 0;
}

static const char *query_get(const void *ctx, const char *name)
{
	return qp(ctx, name);
}

void api_deliveries_list(struct api *api, const struct api_request *req, int dead_only,
			 struct api_response *res)
{
	struct store_delivery_filter f = {0};
	struct input_error err;
	struct store_delivery *items = NULL;
	char *next = NULL;
	size_t n = 0;
	const char *v;

	f.limit = LIST_DEFAULT;
	if (read_filter(query_get, req, &f, &err)) {
		api_reply_error(res, &err);
		return;
	}
	if ((v = qp(req, "limit"))) {
		char *end;
		long l = strtol(v, &end, 10);
		if (*end || l < 1 || l > LIST_MAX) {
			api_reply_errorf(res, 400, "invalid_argument", "limit",
					 "limit must be an integer from 1 to %d", LIST_MAX);
			return;
		}
		f.limit = (size_t)l;
	}
	f.cursor = qp(req, "cursor");
	f.dead_only = dead_only;
	int rc = store_deliveries_list(api->st, &f, &items, &n, &next);
	if (rc == STORE_INVALID) {
		api_reply_errorf(res, 400, "invalid_argument", "cursor",
				 "cursor is not one this server returned for the same sort");
		return;
	}
	if (rc) {
		api_reply_store_error(res, rc, "deliveries");
		return;
	}
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(list, render_delivery(&items[i]));
	store_deliveries_free(items, n);
	api_reply_json(res, 200, json_pack("{s:o, s:o}", "items", list, "next_cursor",
					   next ? json_string(next) : json_null()));
	free(next);
}

void api_deliveries_get(struct api *api, const char *id, struct api_response *res)
{
	struct store_delivery d;
	struct store_event ev;
	struct store_attempt_row *attempts = NULL;
	size_t n = 0;

	int rc = store_delivery_get(api->st, id, &d);
	if (rc) {
		api_reply_store_error(res, rc, "delivery");
		return;
	}
	rc = store_delivery_attempts(api->st, id, &attempts, &n);
	if (rc) {
		store_delivery_free(&d);
		api_reply_store_error(res, rc, "delivery");
		return;
	}
	json_t *out = render_delivery(&d);
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(list, render_attempt(&attempts[i]));
	json_object_set_new(out, "attempts", list);
	if (store_event_get(api->st, d.event_id, &ev) == STORE_OK) {
		json_object_set_new(out, "event", render_event(&ev));
		store_event_free(&ev);
	}
	store_attempts_free(attempts, n);
	store_delivery_free(&d);
	api_reply_json(res, 200, out);
}

static const char *const outcome_names[] = {"replayed", "not_found", "not_failed", "in_flight"};

static const char *filter_get(const void *ctx, const char *name)
{
	json_t *v = json_object_get(ctx, name);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Replays every dead delivery matching the filter, a page at a time. */
static void replay_filter(struct api *api, json_t *filter, int force, struct api_response *res)
{
	static const char *const keys[] = {"status", "subscription_id", "event_type", "q",
					   "from", "to", NULL};
	struct store_delivery_filter f = {0};
	struct input_error err;
	const char *key;
	json_t *v;
	size_t total = 0;
	char *cursor = NULL;

	if (!json_is_object(filter)) {
		api_reply_errorf(res, 400, "invalid_argument", "filter", "filter must be an object");
		return;
	}
	json_object_foreach(filter, key, v) {
		int ok = 0;
		for (const char *const *k = keys; *k; k++)
			ok |= strcmp(*k, key) == 0;
		if (!ok || !json_is_string(v)) {
			api_reply_errorf(res, 400, "invalid_argument", "filter", "filter.%s %s", key,
					 ok ? "must be a string" : "is not a known filter");
			return;
		}
	}
	if (read_filter(filter_get, filter, &f, &err)) {
		char field[sizeof(err.field)];
		snprintf(field, sizeof(field), "%s", err.field);
		snprintf(err.field, sizeof(err.field), "filter.%.100s", field);
		api_reply_error(res, &err);
		return;
	}
	/* Without an explicit status, a filter replay takes the dead-letter queue. */
	f.dead_only = !f.has_status;
	if (f.has_status && f.status == DELIVERY_PROCESSED && !force) {
		api_reply_errorf(res, 422, "invalid_argument", "force",
				 "replaying PROCESSED deliveries re-sends them; set \"force\": true");
		return;
	}
	f.limit = LIST_MAX;
	for (;;) {
		struct store_delivery *items = NULL;
		size_t n = 0;
		char *next = NULL;
		f.cursor = cursor;
		int rc = store_deliveries_list(api->st, &f, &items, &n, &next);
		free(cursor);
		cursor = next;
		if (rc) {
			free(cursor);
			api_reply_store_error(res, rc, "deliveries");
			return;
		}
		char (*ids)[UUID_STR_LEN] = calloc(n ? n : 1, sizeof(*ids));
		for (size_t i = 0; ids && i < n; i++)
			memcpy(ids[i], items[i].id, UUID_STR_LEN);
		size_t done = 0;
		rc = ids ? store_replay(api->st, (const char(*)[UUID_STR_LEN])ids, n, force, NULL, &done)
			 : STORE_ERROR;
		free(ids);
		store_deliveries_free(items, n);
		if (rc) {
			free(cursor);
			api_reply_store_error(res, rc, "replay");
			return;
		}
		total += done;
		if (!cursor)
			break;
	}
	if (total && api->wake)
		api->wake(api->wake_ctx);
	api_reply_json(res, 200, json_pack("{s:I}", "replayed", (json_int_t)total));
}

void api_dlq_replay(struct api *api, const struct api_request *req, struct api_response *res)
{
	json_error_t jerr;
	json_t *doc = json_loadb(req->body ? req->body : "", req->body_len, 0, &jerr);
	if (!doc || !json_is_object(doc)) {
		api_reply_errorf(res, 400, "invalid_json", NULL,
				 "the body must be a JSON object {\"ids\":[...]} or {\"filter\":{...}}");
		json_decref(doc);
		return;
	}
	json_t *ids = json_object_get(doc, "ids"), *filter = json_object_get(doc, "filter");
	json_t *force_v = json_object_get(doc, "force");
	const char *key;
	json_t *v;
	json_object_foreach(doc, key, v) {
		if (strcmp(key, "ids") && strcmp(key, "filter") && strcmp(key, "force")) {
			api_reply_errorf(res, 400, "invalid_argument", key, "unknown field \"%s\"", key);
			goto out;
		}
	}
	if (force_v && !json_is_boolean(force_v)) {
		api_reply_errorf(res, 400, "invalid_argument", "force", "force must be true or false");
		goto out;
	}
	int force = json_is_true(force_v);
	if (!ids == !filter) {
		api_reply_errorf(res, 400, "invalid_argument", "ids",
				 "give exactly one of ids and filter");
		goto out;
	}
	if (filter) {
		replay_filter(api, filter, force, res);
		goto out;
	}
	if (!json_is_array(ids) || json_array_size(ids) == 0 ||
	    json_array_size(ids) > REPLAY_MAX_IDS) {
		api_reply_errorf(res, 400, "invalid_argument", "ids",
				 "ids must be an array of 1 to %d delivery ids", REPLAY_MAX_IDS);
		goto out;
	}
	size_t n = json_array_size(ids);
	char (*list)[UUID_STR_LEN] = calloc(n, sizeof(*list));
	enum store_replay_outcome *outcomes = calloc(n, sizeof(*outcomes));
	if (!list || !outcomes) {
		free(list);
		free(outcomes);
		api_reply_errorf(res, 500, "internal", NULL, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *id = json_array_get(ids, i);
		if (!json_is_string(id) || !uuid_valid(json_string_value(id))) {
			char field[32];
			snprintf(field, sizeof(field), "ids[%zu]", i);
			api_reply_errorf(res, 400, "invalid_argument", field, "%s must be a UUID", field);
			free(list);
			free(outcomes);
			goto out;
		}
		memcpy(list[i], json_string_value(id), UUID_STR_LEN);
	}
	size_t replayed = 0;
	int rc = store_replay(api->st, (const char(*)[UUID_STR_LEN])list, n, force, outcomes,
			      &replayed);
	if (rc) {
		api_reply_store_error(res, rc, "replay");
	} else {
		json_t *results = json_array();
		for (size_t i = 0; i < n; i++)
			json_array_append_new(results, json_pack("{s:s, s:s}", "id", list[i], "outcome",
								 outcome_names[outcomes[i]]));
		if (replayed && api->wake)
			api->wake(api->wake_ctx);
		api_reply_json(res, 200, json_pack("{s:I, s:o}", "replayed", (json_int_t)replayed,
						   "results", results));
	}
	free(list);
	free(outcomes);
out:
	json_decref(doc);
}

void api_dlq_purge(struct api *api, const char *id, struct api_response *res)
{
	int rc = store_dlq_purge(api->st, id);
	if (rc == STORE_CONFLICT) {
		api_reply_errorf(res, 409, "conflict", "id",
				 "delivery %s is not in the dead-letter queue (only FAILED deliveries "
				 "with no retry pending can be purged)", id);
		return;
	}
	if (rc) {
		api_reply_store_error(res, rc, "delivery");
		return;
	}
	res->status = 204;
	res->body = NULL;
}
