/* routes_operator.c: what operators watch — replay jobs, the audit log, stats. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/render.h"
#include "core/metrics.h"
#include "core/breaker.h"
#include "deliver/endpoints.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

/* One audit row by actor (borrowed, like the rest). */
static void audit_row(struct api *api, const char *actor, const char *action,
		      const char *target, long long count, const char *detail)
{
	struct store_audit a = {0};
	uuid_v7(a.id);
	a.at = clock_now_ms();
	a.actor = (char *)actor;
	a.action = (char *)action;
	a.target = (char *)target;
	a.count = count;
	a.detail = (char *)detail;
	int rc = store_audit_append(api->st, &a);
	if (rc)
		log_error("audit: cannot record %s by %s: %s", action, a.actor, store_strerror(rc));
}

void api_audit(struct api *api, const struct api_request *req, const char *action,
	       const char *target, long long count, const char *detail)
{
	audit_row(api, req->actor ? req->actor : "unknown", action, target, count, detail);
}

void api_audit_as(struct api *api, const char *actor, const char *action, const char *target,
		  const char *detail)
{
	audit_row(api, actor, action, target, 0, detail);
}

static json_t *render_job(const struct store_job *j)
{
	/* What was matched and not replayed: still to do while running, left undone by a
	 * cancel or a failure; a job that is done has nothing left (deliveries it did not
	 * replay were no longer dead by their turn). */
	int64_t remaining = j->matched - j->done;
	if (remaining < 0 || strcmp(j->state, "done") == 0)
		remaining = 0;
	json_t *o = json_pack("{s:s, s:s, s:s, s:I, s:I, s:I, s:i, s:b, s:o, s:o}", "id", j->id,
			      "kind", j->kind, "state", j->state, "matched", (json_int_t)j->matched,
			      "replayed", (json_int_t)j->done, "remaining", (json_int_t)remaining,
			      "rate", j->rate, "force", j->force, "created_at",
			      render_time(j->created_at), "updated_at", render_time(j->updated_at));
	json_t *filter = j->filter ? json_loads(j->filter, 0, NULL) : NULL;
	if (filter) {
		json_object_del(filter, "dead");
		json_object_del(filter, "before_ms");
		json_object_set_new(o, "filter", filter);
	}
	if (j->actor)
		json_object_set_new(o, "actor", json_string(j->actor));
	if (j->error)
		json_object_set_new(o, "error", json_string(j->error));
	return o;
}

void api_jobs_get(struct api *api, const char *id, struct api_response *res)
{
	struct store_job j;
	int rc = store_job_get(api->st, id, &j);
	if (rc) {
		api_reply_store_error(res, rc, "job");
		return;
	}
	api_reply_json(res, 200, render_job(&j));
	store_job_free(&j);
}

#define JOBS_LIST_DEFAULT 50
#define JOBS_LIST_MAX 1000

void api_jobs_list(struct api *api, const struct api_request *req, struct api_response *res)
{
	const char *state = req->query ? req->query(req->query_ctx, "state") : NULL;
	const char *cursor = req->query ? req->query(req->query_ctx, "cursor") : NULL;
	static const char *const states[] = {"running", "done", "cancelled", "failed"};
	long limit;
	int known = !state;

	for (size_t i = 0; state && i < sizeof(states) / sizeof(states[0]); i++)
		known |= strcmp(state, states[i]) == 0;
	if (!known) {
		api_reply_errorf(res, 400, "invalid_argument", "state",
				 "state must be running, done, cancelled or failed");
		return;
	}
	if (api_query_int(req, "limit", JOBS_LIST_DEFAULT, 1, JOBS_LIST_MAX, &limit, res))
		return;
	struct store_job *items = NULL;
	size_t n = 0;
	char *next = NULL;
	int rc = store_jobs_list(api->st, state, cursor, (size_t)limit, &items, &n, &next);
	if (rc == STORE_INVALID) {
		api_reply_errorf(res, 400, "invalid_argument", "cursor",
				 "cursor is not one this server returned for /v1/jobs");
		return;
	}
	if (rc) {
		api_reply_store_error(res, rc, "jobs");
		return;
	}
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(list, render_job(&items[i]));
	store_jobs_free(items, n);
	api_reply_json(res, 200, json_pack("{s:o, s:o}", "items", list, "next_cursor",
					   next ? json_string(next) : json_null()));
	free(next);
}

void api_jobs_cancel(struct api *api, const char *id, const struct api_request *req,
		     struct api_response *res)
{
	struct store_job j;
	int rc = store_job_get(api->st, id, &j);
	if (rc) {
		api_reply_store_error(res, rc, "job");
		return;
	}
	if (strcmp(j.state, "running") == 0) {
		snprintf(j.state, sizeof(j.state), "cancelled");
		j.updated_at = clock_now_ms();
		rc = store_job_update(api->st, &j);
		if (rc) {
			store_job_free(&j);
			api_reply_store_error(res, rc, "job");
			return;
		}
		api_audit(api, req, "job.cancel", j.id, (long long)j.done, NULL);
	} else if (strcmp(j.state, "cancelled") != 0) {
		api_reply_errorf(res, 409, "conflict", "id", "job %s is %s, not running", j.id, j.state);
		store_job_free(&j);
		return;
	}
	api_reply_json(res, 200, render_job(&j));
	store_job_free(&j);
}

void api_audit_list(struct api *api, const struct api_request *req, struct api_response *res)
{
	const char *before = req->query ? req->query(req->query_ctx, "before") : NULL;
	long limit;
	if (api_query_int(req, "limit", 100, 1, 1000, &limit, res))
		return;
	if (before && !uuid_valid(before)) {
		api_reply_errorf(res, 400, "invalid_argument", "before",
				 "before must be an audit entry id");
		return;
	}
	struct store_audit *items = NULL;
	size_t n = 0;
	int rc = store_audit_list(api->st, before, (size_t)limit + 1, &items, &n);
	if (rc) {
		api_reply_store_error(res, rc, "audit");
		return;
	}
	json_t *list = json_array();
	size_t shown = n > (size_t)limit ? (size_t)limit : n;
	for (size_t i = 0; i < shown; i++) {
		const struct store_audit *a = &items[i];
		json_t *o = json_pack("{s:s, s:o, s:s, s:s, s:I}", "id", a->id, "at", render_time(a->at),
				      "actor", a->actor, "action", a->action, "count",
				      (json_int_t)a->count);
		if (a->target) {
			json_t *t = json_loads(a->target, JSON_DECODE_ANY, NULL);
			json_object_set_new(o, "target", t ? t : json_string(a->target));
		}
		json_t *detail = a->detail ? json_loads(a->detail, 0, NULL) : NULL;
		if (detail)
			json_object_set_new(o, "detail", detail);
		json_array_append_new(list, o);
	}
	json_t *next = n > (size_t)limit ? json_string(items[shown - 1].id) : json_null();
	store_audits_free(items, n);
	api_reply_json(res, 200, json_pack("{s:o, s:o}", "items", list, "next_before", next));
}

/* The spool of this instance (store/spool.h: accepted work kept while the store cannot be
 * written): what waits in it,
 * and the damaged tails found since start, the last one's details. */
static json_t *render_spool(struct api *api)
{
	struct spool_status ss;

	if (!api->spool)
		return json_pack("{s:b}", "enabled", 0);
	spool_status_read(api->spool, &ss);
	json_t *last = json_null();
	if (ss.damaged)
		last = json_pack("{s:o, s:I, s:I, s:s?, s:s?}", "at", render_time(ss.damage_at_ms),
				 "offset", (json_int_t)ss.damage_offset, "bytes",
				 (json_int_t)ss.damage_bytes, "reason", ss.damage_reason, "moved_to",
				 ss.damage_moved_to[0] ? ss.damage_moved_to : NULL);
	return json_pack("{s:b, s:s, s:I, s:I, s:{s:I, s:o}}", "enabled", 1, "path",
			 spool_path(api->spool), "bytes", (json_int_t)ss.bytes, "records",
			 (json_int_t)ss.records, "corrupt", "count", (json_int_t)ss.damaged, "last",
			 last);
}

#define STATS_ENDPOINTS_MAX 256 /* the endpoints of an answer that names no subscription */

/* One endpoint's flow control (deliver/endpoints.h, published through the metrics): its
 * adaptive limit, what is open and waiting, and the latency it judges by. Instance-local,
 * like the circuit breakers. */
static json_t *render_endpoint(const struct metrics_endpoint_view *v)
{
	return json_pack("{s:s, s:i, s:i, s:i, s:f, s:f, s:I}", "endpoint", v->key, "limit",
			 v->limit, "in_flight", v->in_flight, "queued", v->queued, "latency_ms",
			 (double)v->latency_us / 1000.0, "latency_min_ms",
			 (double)v->latency_min_us / 1000.0, "cuts", (json_int_t)v->cuts);
}

/* The subscription's side of it: its endpoint, and whether its limit adapts there or is
 * the fixed concurrency it pins. The endpoint's figures go into shown (by key, when not
 * NULL) when this instance has them. */
static json_t *render_sub_flow(const struct subscription *sub, json_t *shown)
{
	char key[ENDPOINT_KEY_MAX];
	struct metrics_endpoint_view v;
	if (sub->concurrency > 0)
		return json_pack("{s:s, s:i}", "mode", "fixed", "limit", sub->concurrency);
	if (endpoint_key(sub->endpoint, key))
		return json_null(); /* not an http(s) endpoint */
	json_t *o = json_pack("{s:s, s:s}", "mode", "adaptive", "endpoint", key);
	if (metrics_endpoint_get(key, &v) == 0) {
		json_object_set_new(o, "limit", json_integer(v.limit));
		if (shown && !json_object_get(shown, key))
			json_object_set_new(shown, key, render_endpoint(&v));
	}
	return o;
}

/* Subscription ids: NUL-terminated arrays of UUID_STR_LEN, or a key pointing to one. */
static int id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* One subscription's line of GET /v1/stats: what it is rendered from, and its rank for
 * "failing first". */
struct stats_line {
	const struct subscription *sub;
	const struct store_sub_stats *x;
	int circuit;
	double rank;
};

/* Failing first: an open circuit, then a half-open one, then disabled by outboxd, then
 * by success rate in the window (lowest first), then the healthy and the idle. */
static double failing_rank(int circuit, const struct subscription *sub,
			   const struct store_sub_stats *x)
{
	if (circuit == 1)
		return 0;
	if (circuit == 2)
		return 1;
	if (!sub->enabled && sub->disabled_reason)
		return 2;
	if (x && x->attempts && x->successes < x->attempts)
		return 3 + (double)x->successes / (double)x->attempts;
	return 5;
}

static int stats_line_cmp(const void *a, const void *b)
{
	const struct stats_line *x = a, *y = b;
	if (x->rank != y->rank)
		return x->rank < y->rank ? -1 : 1;
	return strcmp(x->sub->name, y->sub->name);
}

#define STATS_IDS_MAX 100 /* subscription_id= of GET /v1/stats: a console page (3.7 KB) */

/* One subscription's line: its figures in the window, its circuit in this instance, its
 * flow control. */
static json_t *render_sub_line(const struct stats_line *l, json_t *shown_eps)
{
	const struct subscription *sub = l->sub;
	const struct store_sub_stats *x = l->x;
	json_t *o = json_pack("{s:s, s:s, s:b, s:I, s:I}", "id", sub->id, "name", sub->name,
			      "enabled", sub->enabled, "attempts", (json_int_t)(x ? x->attempts : 0),
			      "successes", (json_int_t)(x ? x->successes : 0));
	if (x && x->attempts)
		json_object_set_new(o, "success_rate",
				    json_real((double)x->successes / (double)x->attempts));
	else
		json_object_set_new(o, "success_rate", json_null());
	if (x && x->last_code)
		json_object_set_new(o, "last_error",
				    json_pack("{s:i, s:s?, s:o}", "code", x->last_code, "message",
					      x->last_message, "at", render_time(x->last_error_at)));
	else
		json_object_set_new(o, "last_error", json_null());
	json_object_set_new(o, "circuit", json_string(breaker_state_name(l->circuit)));
	if (sub->disabled_reason) /* disabled by outboxd after disable_after */
		json_object_set_new(o, "disabled_reason", json_string(sub->disabled_reason));
	json_object_set_new(o, "concurrency", render_sub_flow(sub, shown_eps));
	return o;
}

/* The per-subscription lines of GET /v1/stats: every subscription, the ones ids names
 * (n_ids > 0), or the limit ones to look at first (limit >= 0); *total counts them all,
 * and shown_eps gets their endpoints' figures. */
static json_t *render_sub_stats(struct api *api, struct store_stats *s,
				const char (*ids)[UUID_STR_LEN], size_t n_ids, long limit,
				json_t *shown_eps, size_t *total)
{
	json_t *subs = json_array();
	int64_t now = clock_now_ms();
	struct sub_set *set = sub_registry_acquire(api->reg);
	struct stats_line *lines = calloc(set->n ? set->n : 1, sizeof(*lines));
	size_t n_lines = 0;

	*total = set->n;
	for (size_t i = 0; lines && i < set->n; i++) {
		const struct subscription *sub = set->items[i];
		if (n_ids && !bsearch(sub->id, ids, n_ids, sizeof(*ids), id_cmp))
			continue;
		struct stats_line *l = &lines[n_lines++];
		l->sub = sub;
		/* in log n: a linear search per subscription took 10,000 subscriptions'
		 * answer to a third of a second */
		l->x = store_sub_stats_find(s->subs, s->n_subs, sub->id);
		/* The breaker lives in this instance's dispatcher (per subscription), which
		 * publishes its state to the metrics. */
		l->circuit = metrics_circuit_state(sub->id, now);
		l->rank = failing_rank(l->circuit, sub, l->x);
	}
	if (limit >= 0 && n_lines) {
		qsort(lines, n_lines, sizeof(*lines), stats_line_cmp);
		if (n_lines > (size_t)limit)
			n_lines = (size_t)limit;
	}
	for (size_t i = 0; i < n_lines; i++)
		json_array_append_new(subs, render_sub_line(&lines[i], shown_eps));
	free(lines);
	sub_registry_release(api->reg, set);
	return subs;
}

void api_stats(struct api *api, const struct api_request *req, struct api_response *res)
{
	struct store_stats s;
	int64_t now = clock_now_ms();
	char (*ids)[UUID_STR_LEN];
	size_t n_ids, total;
	long limit = -1;
	if (api_query_get(req, "subscriptions_limit") &&
	    api_query_int(req, "subscriptions_limit", 0, 0, 1000, &limit, res))
		return;
	if (api_query_ids(req, "subscription_id", STATS_IDS_MAX, &ids, &n_ids, res))
		return;
	if (n_ids) /* for bsearch */
		qsort(ids, n_ids, sizeof(*ids), id_cmp);
	int rc = store_stats(api->st, now, api->stats_window_ms, &s);
	if (rc) {
		free(ids);
		api_reply_store_error(res, rc, "stats");
		return;
	}
	json_t *shown_eps = n_ids || limit >= 0 ? json_object() : NULL;
	json_t *subs = render_sub_stats(api, &s, (const char (*)[UUID_STR_LEN])ids, n_ids, limit,
					shown_eps, &total);
	free(ids);
	json_t *out = json_pack(
		"{s:{s:I, s:I, s:I, s:I}, s:I, s:I, s:I, s:o, s:o, s:o, s:o, s:o}", "deliveries",
		"NEW", (json_int_t)s.new_count, "PROCESSED", (json_int_t)s.processed_count,
		"FAILED_RETRYING", (json_int_t)s.retrying_count, "FAILED_DEAD",
		(json_int_t)s.dead_count, "dlq_depth", (json_int_t)s.dead_count, "in_flight",
		(json_int_t)s.in_flight, "due_backlog", (json_int_t)s.due_count,
		"oldest_due_age_ms",
		s.oldest_due_at ? json_integer(now - s.oldest_due_at) : json_null(),
		"oldest_dead_at", render_time(s.oldest_dead_at), "oldest_dead_age_ms",
		s.oldest_dead_at ? json_integer(now - s.oldest_dead_at) : json_null(), "window",
		json_pack("{s:I}", "ms", (json_int_t)api->stats_window_ms), "subscriptions", subs);
	json_object_set_new(out, "subscriptions_total", json_integer((json_int_t)total));
	long ops_stored, ops_suppressed, ops_dropped;
	metrics_ops_events_read(&ops_stored, &ops_suppressed, &ops_dropped);
	json_object_set_new(out, "ops_events",
			    json_pack("{s:I, s:I, s:I}", "stored", (json_int_t)ops_stored,
				      "suppressed", (json_int_t)ops_suppressed, "dropped",
				      (json_int_t)ops_dropped));
	/* Deliveries still being retried, and how long the one failing longest has been
	 * failing: with max_retries 0 retries never run out, so this, not the DLQ's depth,
	 * shows a subscriber that stays down. */
	json_object_set_new(out, "failing",
			    json_pack("{s:I, s:o, s:o}", "deliveries", (json_int_t)s.retrying_count,
				      "oldest_since", render_time(s.oldest_failing_since),
				      "oldest_age_ms",
				      s.oldest_failing_since ?
					      json_integer(now - s.oldest_failing_since) :
					      json_null()));
	/* per-key ordering: deliveries parked behind a dead one of their key */
	json_object_set_new(out, "blocked", json_pack("{s:I, s:I}", "deliveries",
						      (json_int_t)s.blocked_count, "keys",
						      (json_int_t)s.blocked_keys));
	json_object_set_new(out, "spool", render_spool(api));
	/* The endpoints of the subscriptions shown, or with every subscription the
	 * STATS_ENDPOINTS_MAX busiest (a platform may deliver to thousands) */
	json_t *endpoints = json_array();
	if (shown_eps) {
		const char *key;
		json_t *v;
		json_object_foreach(shown_eps, key, v)
			json_array_append(endpoints, v);
	} else {
		struct metrics_endpoint_view *eps = calloc(STATS_ENDPOINTS_MAX, sizeof(*eps));
		size_t n_eps = eps ? metrics_endpoints(eps, STATS_ENDPOINTS_MAX) : 0;
		for (size_t i = 0; i < n_eps; i++)
			json_array_append_new(endpoints, render_endpoint(&eps[i]));
		free(eps);
	}
	json_decref(shown_eps);
	json_object_set_new(out, "endpoints", endpoints);
	json_object_set_new(out, "endpoints_total",
			    json_integer((json_int_t)metrics_endpoint_count()));
	store_stats_free(&s);
	api_reply_json(res, 200, out);
}

void api_metrics(struct api *api, struct api_response *res)
{
	char *text = NULL;
	size_t len = 0;
	struct store_stats s;
	int64_t now = clock_now_ms();

	if (metrics_render(&text, &len)) {
		free(text);
		api_reply_errorf(res, 500, "internal", NULL, "out of memory");
		return;
	}
	/* Gauges of the shared store: what every instance sees. */
	int rc = store_stats(api->st, now, 0, &s);
	FILE *f = open_memstream(&res->body, &len);
	if (!f) {
		free(text);
		api_reply_errorf(res, 500, "internal", NULL, "out of memory");
		return;
	}
	fputs(text, f);
	free(text);
	if (rc == STORE_OK) {
		fprintf(f, "# HELP outboxd_store_deliveries Deliveries in the store by status.\n"
			   "# TYPE outboxd_store_deliveries gauge\n"
			   "outboxd_store_deliveries{status=\"NEW\"} %lld\n"
			   "outboxd_store_deliveries{status=\"PROCESSED\"} %lld\n"
			   "outboxd_store_deliveries{status=\"FAILED\",dead=\"false\"} %lld\n"
			   "outboxd_store_deliveries{status=\"FAILED\",dead=\"true\"} %lld\n",
			(long long)s.new_count, (long long)s.processed_count,
			(long long)s.retrying_count, (long long)s.dead_count);
		fprintf(f, "# HELP outboxd_dlq_depth Dead-lettered deliveries.\n"
			   "# TYPE outboxd_dlq_depth gauge\noutboxd_dlq_depth %lld\n",
			(long long)s.dead_count);
		fprintf(f, "# HELP outboxd_due_backlog Deliveries due now and not yet claimed.\n"
			   "# TYPE outboxd_due_backlog gauge\noutboxd_due_backlog %lld\n"
			   "# HELP outboxd_due_backlog_age_seconds Age of the oldest due delivery.\n"
			   "# TYPE outboxd_due_backlog_age_seconds gauge\n"
			   "outboxd_due_backlog_age_seconds %.3f\n",
			(long long)s.due_count,
			s.oldest_due_at ? (double)(now - s.oldest_due_at) / 1000.0 : 0.0);
		fprintf(f, "# HELP outboxd_blocked_deliveries Deliveries waiting behind a dead "
			   "delivery of their partition key (ordering).\n"
			   "# TYPE outboxd_blocked_deliveries gauge\noutboxd_blocked_deliveries %lld\n"
			   "# HELP outboxd_blocked_keys Partition keys blocked by a dead delivery.\n"
			   "# TYPE outboxd_blocked_keys gauge\noutboxd_blocked_keys %lld\n",
			(long long)s.blocked_count, (long long)s.blocked_keys);
		fprintf(f, "# HELP outboxd_oldest_failing_age_seconds How long the delivery failing "
			   "longest (still retried) has been failing; 0 when none.\n"
			   "# TYPE outboxd_oldest_failing_age_seconds gauge\n"
			   "outboxd_oldest_failing_age_seconds %.3f\n",
			s.oldest_failing_since ?
				(double)(now - s.oldest_failing_since) / 1000.0 : 0.0);
		store_stats_free(&s);
	}
	if (api->spool) {
		struct spool_status ss;
		spool_status_read(api->spool, &ss);
		fprintf(f, "# HELP outboxd_spool_bytes Bytes in the spool, waiting to be replayed "
			   "into the store.\n# TYPE outboxd_spool_bytes gauge\noutboxd_spool_bytes %llu\n"
			   "# HELP outboxd_spool_records Records in the spool.\n"
			   "# TYPE outboxd_spool_records gauge\noutboxd_spool_records %zu\n"
			   "# HELP outboxd_spool_corrupt_total Damaged spool tails found and moved "
			   "aside (.corrupt-*) since start.\n"
			   "# TYPE outboxd_spool_corrupt_total counter\noutboxd_spool_corrupt_total %zu\n"
			   "# HELP outboxd_spool_last_corrupt_timestamp_seconds When the last damaged "
			   "tail was found (0: none since start).\n"
			   "# TYPE outboxd_spool_last_corrupt_timestamp_seconds gauge\n"
			   "outboxd_spool_last_corrupt_timestamp_seconds %.3f\n",
			(unsigned long long)ss.bytes, ss.records, ss.damaged,
			(double)ss.damage_at_ms / 1000.0);
	}
	fprintf(f, "# HELP outboxd_store_up Whether the store answered this scrape.\n"
		   "# TYPE outboxd_store_up gauge\noutboxd_store_up %d\n", rc == STORE_OK);
	fclose(f);
	res->status = 200;
	res->content_type = "text/plain; version=0.0.4";
}
