/* routes_deliveries.c: deliveries and the dead-letter queue — list with filters, detail
 * with the full attempt history, replay (by ids, by filter with a dry run, or as a paced
 * job), purge (one, or by filter with a dry run). Every change is audited. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "core/filter.h"
#include "api/render.h"
#include "kafka/envelope.h"
#include "util/clock.h"
#include "util/uuid.h"

#define LIST_DEFAULT 100
#define LIST_MAX 1000
#define REPLAY_MAX_IDS 1000
#define PURGE_CHUNK 1000

void api_deliveries_list(struct api *api, const struct api_request *req, int dead_only,
			 struct api_response *res)
{
	struct delivery_filter f = {0};
	struct filter_buf fb;
	struct input_error err;
	struct store_delivery *items = NULL;
	char *next = NULL;
	size_t n = 0;

	f.limit = LIST_DEFAULT;
	if (filter_parse(api_query_get, req, 1, api->reg, "", clock_now_ms(), &f, &fb, &err)) {
		api_reply_error(res, &err);
		return;
	}
	long limit;
	if (api_query_int(req, "limit", LIST_DEFAULT, 1, LIST_MAX, &limit, res))
		return;
	f.limit = (size_t)limit;
	f.cursor = api_query_get(req, "cursor");
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

/* The OutboxEvent of delivery d of event ev (borrowed), as bytes and parsed
 * (envelope_view), or NULL when it has none. "origin" says which: "received", the Kafka
 * message its event came as (kept at ingest); else "published", the one the Kafka sink
 * publishes of it when d's subscription is a kafka:// one of payload_format envelope.
 * That one is built again here as the sink builds each attempt's (kafka_claim_envelope
 * without a target: the event's fields under its webhook-id, no endpoint, no auth), with
 * the framing of kafka_wire_format, from the subscription as it is now. */
static json_t *render_envelope(struct api *api, const struct store_delivery *d,
			       const struct store_event *ev)
{
	json_t *o = NULL;
	void *built = NULL;
	size_t len = 0;
	if (ev->envelope) {
		o = envelope_view(ev->envelope, ev->envelope_len);
		if (o)
			json_object_set_new(o, "origin", json_string("received"));
		return o;
	}
	struct sub_set *set = sub_registry_acquire(api->reg);
	const struct subscription *s = sub_set_find(set, d->subscription_id);
	int published = s && s->payload_format == PAYLOAD_ENVELOPE &&
			 strncasecmp(s->endpoint, "kafka://", 8) == 0;
	sub_registry_release(api->reg, set);
	if (!published)
		return NULL;
	struct envelope_out e = {
		.id = ev->webhook_id ? ev->webhook_id : ev->id,
		.type = ev->event_type,
		.source = ev->source,
		.source_event_id = ev->source_event_id,
		.partition_key = ev->partition_key,
		.payload = ev->payload,
		.payload_len = ev->payload_len,
		.created_at_ms = ev->created_at,
		.traceparent = ev->traceparent[0] ? ev->traceparent : NULL,
	};
	/* framed with the static kafka_schema_id; with a Schema Registry the published frame
	 * carries the registry's id instead (docs/api.md) */
	if (envelope_encode(&e, api->kafka_wire, api->kafka_schema_id, ENVELOPE_OUTBOX_EVENT_INDEX,
			    &built, &len))
		return NULL;
	o = envelope_view(built, len);
	if (o)
		json_object_set_new(o, "origin", json_string("published"));
	free(built);
	return o;
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
	json_t *envelope = NULL;
	if (store_event_get(api->st, d.event_id, &ev) == STORE_OK) {
		json_object_set_new(out, "event", render_event(&ev));
		envelope = render_envelope(api, &d, &ev);
		store_event_free(&ev);
	}
	json_object_set_new(out, "envelope", envelope ? envelope : json_null());
	store_attempts_free(attempts, n);
	store_delivery_free(&d);
	api_reply_json(res, 200, out);
}

/* A replayed or purged dead delivery may have held up later ones of its key (per-key
 * ordering): the janitor thread's full sweep lets them go now, not at reap_interval. */
static void keys_may_unblock(struct api *api)
{
	if (api->wake_jobs)
		api->wake_jobs(api->wake_jobs_ctx);
}

static const char *const outcome_names[] = {"replayed", "not_found", "not_failed", "in_flight"};

/* Reads a JSON object body; replies 400 and returns NULL when it is not one. */
static json_t *object_body(const struct api_request *req, struct api_response *res,
			   const char *const *keys)
{
	json_error_t jerr;
	json_t *doc = json_loadb(req->body ? req->body : "", req->body_len, 0, &jerr);
	if (!doc || !json_is_object(doc)) {
		api_reply_errorf(res, 400, "invalid_json", NULL, "the body must be a JSON object%s%s",
				 doc ? "" : ": ", doc ? "" : jerr.text);
		json_decref(doc);
		return NULL;
	}
	const char *key;
	json_t *v;
	json_object_foreach(doc, key, v) {
		int ok = 0;
		for (const char *const *k = keys; *k; k++)
			ok |= strcmp(*k, key) == 0;
		if (!ok) {
			api_reply_errorf(res, 400, "invalid_argument", key, "unknown field \"%s\"", key);
			json_decref(doc);
			return NULL;
		}
	}
	return doc;
}

static int get_bool(json_t *doc, const char *key, int *out, struct api_response *res)
{
	json_t *v = json_object_get(doc, key);
	if (v && !json_is_boolean(v)) {
		api_reply_errorf(res, 400, "invalid_argument", key, "%s must be true or false", key);
		return -1;
	}
	*out = json_is_true(v);
	return 0;
}

/* The filter of a replay or purge: the dead-letter queue unless a status is given. */
static int body_filter(struct api *api, json_t *filter, int force, struct delivery_filter *f,
		       struct filter_buf *fb, struct api_response *res)
{
	struct input_error err;
	if (filter_parse_json(filter, api->reg, "filter.", clock_now_ms(), f, fb, &err)) {
		api_reply_error(res, &err);
		return -1;
	}
	f->dead_only = !f->has_status;
	if (f->has_status && f->status == DELIVERY_PROCESSED && !force) {
		api_reply_errorf(res, 422, "invalid_argument", "force",
				 "replaying PROCESSED deliveries re-sends them; set \"force\": true");
		return -1;
	}
	if (f->has_status && f->status == DELIVERY_NEW) {
		api_reply_errorf(res, 422, "invalid_argument", "filter.status",
				 "NEW deliveries are already pending");
		return -1;
	}
	return 0;
}

/* A filter replay becomes a job that replays at `rate` deliveries per second; only
 * deliveries created before the job starts are taken, so the count it reports is the
 * count a dry run gave. */
static void replay_job(struct api *api, const struct api_request *req, json_t *filter,
		       const struct delivery_filter *f, int force, int rate,
		       struct api_response *res)
{
	struct store_job job = {0};
	size_t matched = 0;
	int64_t now = clock_now_ms();
	struct delivery_filter counted = *f;

	if (!counted.to_ms || counted.to_ms > now + 1)
		counted.to_ms = now + 1;
	int rc = store_deliveries_count(api->st, &counted, &matched);
	if (rc) {
		api_reply_store_error(res, rc, "replay");
		return;
	}
	json_t *saved = json_deep_copy(filter);
	if (!counted.has_status)
		json_object_set_new(saved, "dead", json_true());
	json_object_set_new(saved, "before_ms", json_integer(counted.to_ms));
	uuid_v7(job.id);
	snprintf(job.kind, sizeof(job.kind), "replay");
	snprintf(job.state, sizeof(job.state), "running");
	job.filter = json_dumps(saved, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(saved);
	job.force = force;
	job.rate = rate;
	job.matched = (int64_t)matched;
	job.actor = (char *)req->actor;
	job.created_at = job.updated_at = now;
	rc = job.filter ? store_job_create(api->st, &job) : STORE_ERROR;
	if (rc) {
		free(job.filter);
		api_reply_store_error(res, rc, "replay job");
		return;
	}
	api_audit(api, req, "dlq.replay_job", job.filter, (long long)matched, NULL);
	free(job.filter);
	if (api->wake_jobs)
		api->wake_jobs(api->wake_jobs_ctx);
	api_reply_json(res, 202, json_pack("{s:s, s:I, s:i}", "job_id", job.id, "matched",
					   (json_int_t)matched, "rate", rate));
}

/* Replays the dead deliveries listed in ids (with force, delivered ones too); extra, when
 * not NULL, is appended to the results (replay_events: events without a delivery). */
static void replay_ids(struct api *api, const struct api_request *req, json_t *ids, int force,
		       json_t *extra, struct api_response *res)
{
	if (!json_is_array(ids) || json_array_size(ids) == 0 ||
	    json_array_size(ids) > REPLAY_MAX_IDS) {
		api_reply_errorf(res, 400, "invalid_argument", "ids",
				 "ids must be an array of 1 to %d delivery ids", REPLAY_MAX_IDS);
		return;
	}
	size_t n = json_array_size(ids);
	char (*list)[UUID_STR_LEN] = calloc(n, sizeof(*list));
	enum store_replay_outcome *outcomes = calloc(n, sizeof(*outcomes));
	if (!list || !outcomes) {
		api_reply_errorf(res, 500, "internal", NULL, "out of memory");
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		json_t *id = json_array_get(ids, i);
		if (!json_is_string(id) || !uuid_valid(json_string_value(id))) {
			char field[32];
			snprintf(field, sizeof(field), "ids[%zu]", i);
			api_reply_errorf(res, 400, "invalid_argument", field, "%s must be a UUID", field);
			goto out;
		}
		memcpy(list[i], json_string_value(id), UUID_STR_LEN);
	}
	size_t replayed = 0;
	int rc = store_replay(api->st, (const char(*)[UUID_STR_LEN])list, n, force, outcomes,
			      &replayed);
	if (rc) {
		api_reply_store_error(res, rc, "replay");
		goto out;
	}
	json_t *results = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(results, json_pack("{s:s, s:s}", "id", list[i], "outcome",
							 outcome_names[outcomes[i]]));
	if (extra)
		json_array_extend(results, extra);
	if (replayed && api->wake)
		api->wake(api->wake_ctx);
	if (replayed)
		keys_may_unblock(api);
	char *target = json_dumps(ids, JSON_COMPACT);
	api_audit(api, req, force ? "dlq.replay_forced" : "dlq.replay", target, (long long)replayed,
		  NULL);
	free(target);
	api_reply_json(res, 200, json_pack("{s:I, s:o}", "replayed", (json_int_t)replayed,
					   "results", results));
out:
	free(list);
	free(outcomes);
}

/* Replay by event (the reference's replay takes event ids): the dead deliveries of each
 * event, with force its delivered ones too, replayed like a list of delivery ids (at most
 * REPLAY_MAX_IDS in all). An event with none of those answers outcome "no_delivery". */
static void replay_events(struct api *api, const struct api_request *req, json_t *event_ids,
			  int force, struct api_response *res)
{
	if (!json_is_array(event_ids) || json_array_size(event_ids) == 0 ||
	    json_array_size(event_ids) > REPLAY_MAX_IDS) {
		api_reply_errorf(res, 400, "invalid_argument", "event_ids",
				 "event_ids must be an array of 1 to %d event ids", REPLAY_MAX_IDS);
		return;
	}
	json_t *ids = json_array(), *none = json_array();
	for (size_t i = 0; i < json_array_size(event_ids); i++) {
		json_t *id = json_array_get(event_ids, i);
		if (!json_is_string(id) || !uuid_valid(json_string_value(id))) {
			char field[40];
			snprintf(field, sizeof(field), "event_ids[%zu]", i);
			api_reply_errorf(res, 400, "invalid_argument", field, "%s must be a UUID",
					 field);
			goto out;
		}
		struct delivery_filter f = {.event_id = json_string_value(id), .limit = REPLAY_MAX_IDS,
					    .dead_only = !force};
		struct store_delivery *items = NULL;
		size_t n = 0;
		char *next = NULL;
		int rc = store_deliveries_list(api->st, &f, &items, &n, &next);
		free(next);
		if (rc) {
			api_reply_store_error(res, rc, "replay");
			goto out;
		}
		size_t taken = 0;
		for (size_t k = 0; k < n; k++) {
			/* with force: what is dead or delivered; pending ones are not replayed */
			if (force && !(items[k].status == DELIVERY_PROCESSED ||
				       items[k].status == DELIVERY_FAILED))
				continue;
			json_array_append_new(ids, json_string(items[k].id));
			taken++;
		}
		store_deliveries_free(items, n);
		if (!taken)
			json_array_append_new(none, json_pack("{s:s, s:s}", "event_id",
							      json_string_value(id), "outcome",
							      "no_delivery"));
		if (json_array_size(ids) > REPLAY_MAX_IDS) {
			api_reply_errorf(res, 422, "invalid_argument", "event_ids",
					 "these events have more than %d deliveries to replay: replay "
					 "them by filter (filter.event_id) as a paced job",
					 REPLAY_MAX_IDS);
			goto out;
		}
	}
	if (json_array_size(ids) == 0) {
		api_reply_json(res, 200, json_pack("{s:i, s:O}", "replayed", 0, "results", none));
		goto out;
	}
	replay_ids(api, req, ids, force, none, res);
out:
	json_decref(ids);
	json_decref(none);
}

void api_dlq_replay(struct api *api, const struct api_request *req, struct api_response *res)
{
	static const char *const keys[] = {"ids", "event_ids", "filter", "force", "dry_run", "rate",
					   NULL};
	struct delivery_filter f = {0};
	struct filter_buf fb;
	int force, dry_run;

	json_t *doc = object_body(req, res, keys);
	if (!doc)
		return;
	json_t *ids = json_object_get(doc, "ids"), *filter = json_object_get(doc, "filter");
	json_t *event_ids = json_object_get(doc, "event_ids");
	json_t *rate_v = json_object_get(doc, "rate");
	if (get_bool(doc, "force", &force, res) || get_bool(doc, "dry_run", &dry_run, res))
		goto out;
	if ((ids != NULL) + (event_ids != NULL) + (filter != NULL) != 1) {
		api_reply_errorf(res, 400, "invalid_argument", "ids",
				 "give exactly one of ids, event_ids and filter");
		goto out;
	}
	if (ids || event_ids) {
		if (dry_run || rate_v) {
			api_reply_errorf(res, 400, "invalid_argument", dry_run ? "dry_run" : "rate",
					 "dry_run and rate apply to filter replays");
			goto out;
		}
		if (ids)
			replay_ids(api, req, ids, force, NULL, res);
		else
			replay_events(api, req, event_ids, force, res);
		goto out;
	}
	int rate = api->replay_rate;
	if (rate_v) {
		if (!json_is_integer(rate_v) || json_integer_value(rate_v) < 1 ||
		    json_integer_value(rate_v) > 100000) {
			api_reply_errorf(res, 400, "invalid_argument", "rate",
					 "rate must be an integer from 1 to 100000 deliveries per second");
			goto out;
		}
		rate = (int)json_integer_value(rate_v);
	}
	if (body_filter(api, filter, force, &f, &fb, res))
		goto out;
	if (dry_run) {
		size_t matched = 0;
		int rc = store_deliveries_count(api->st, &f, &matched);
		if (rc)
			api_reply_store_error(res, rc, "replay");
		else
			api_reply_json(res, 200, json_pack("{s:I, s:b}", "matched", (json_int_t)matched,
							   "dry_run", 1));
		goto out;
	}
	replay_job(api, req, filter, &f, force, rate, res);
out:
	json_decref(doc);
}

void api_dlq_purge(struct api *api, const char *id, const struct api_request *req,
		   struct api_response *res)
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
	keys_may_unblock(api);
	api_audit(api, req, "dlq.purge", id, 1, NULL);
	res->status = 204;
	res->body = NULL;
}

/* POST /v1/dlq/purge {"filter":{...},"dry_run":true}: only dead deliveries, never NEW
 * or in-flight work. */
void api_dlq_purge_filter(struct api *api, const struct api_request *req,
			  struct api_response *res)
{
	static const char *const keys[] = {"filter", "dry_run", NULL};
	struct delivery_filter f = {0};
	struct filter_buf fb;
	struct input_error err;
	int dry_run;

	json_t *doc = object_body(req, res, keys);
	if (!doc)
		return;
	json_t *filter = json_object_get(doc, "filter");
	if (get_bool(doc, "dry_run", &dry_run, res))
		goto out;
	if (!filter) {
		api_reply_errorf(res, 400, "invalid_argument", "filter",
				 "filter is required ({} purges the whole dead-letter queue)");
		goto out;
	}
	if (filter_parse_json(filter, api->reg, "filter.", clock_now_ms(), &f, &fb, &err)) {
		api_reply_error(res, &err);
		goto out;
	}
	if (f.has_status && f.status != DELIVERY_FAILED) {
		api_reply_errorf(res, 422, "invalid_argument", "filter.status",
				 "only dead-lettered (FAILED) deliveries can be purged");
		goto out;
	}
	f.has_status = 0;
	f.dead_only = 1;
	size_t total = 0;
	int rc;
	if (dry_run) {
		rc = store_deliveries_count(api->st, &f, &total);
		if (rc)
			api_reply_store_error(res, rc, "purge");
		else
			api_reply_json(res, 200, json_pack("{s:I, s:b}", "matched", (json_int_t)total,
							   "dry_run", 1));
		goto out;
	}
	for (;;) {
		size_t purged = 0;
		rc = store_dlq_purge_matching(api->st, &f, PURGE_CHUNK, &purged);
		if (rc || purged == 0)
			break;
		total += purged;
	}
	if (rc) {
		api_reply_store_error(res, rc, "purge");
		goto out;
	}
	if (total)
		keys_may_unblock(api);
	char *target = json_dumps(filter, JSON_COMPACT | JSON_SORT_KEYS);
	api_audit(api, req, "dlq.purge_filter", target, (long long)total, NULL);
	free(target);
	api_reply_json(res, 200, json_pack("{s:I}", "purged", (json_int_t)total));
out:
	json_decref(doc);
}
