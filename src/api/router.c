/* router.c: authentication, routing and error bodies of the API (docs/api.md). A request
 * is decided from its head first (api_begin): nothing but health, readiness, metrics and
 * the console's files answers without a valid token, and a body is read only for a caller
 * the route admits. */
#include "api/api.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "core/authlimit.h"
#include "core/metrics.h"
#include "core/token.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

void api_reply_json(struct api_response *res, int status, json_t *body)
{
	res->status = status;
	res->body = body ? json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
	json_decref(body);
}

void api_reply_error(struct api_response *res, const struct input_error *err)
{
	json_t *e = json_pack("{s:s, s:s}", "code", err->code, "message", err->message);
	if (err->field[0])
		json_object_set_new(e, "field", json_string(err->field));
	api_reply_json(res, err->status, json_pack("{s:o}", "error", e));
}

void api_reply_errorf(struct api_response *res, int status, const char *code, const char *field,
		      const char *fmt, ...)
{
	struct input_error err;
	va_list ap;
	err.status = status;
	snprintf(err.code, sizeof(err.code), "%s", code);
	snprintf(err.field, sizeof(err.field), "%s", field ? field : "");
	va_start(ap, fmt);
	vsnprintf(err.message, sizeof(err.message), fmt, ap);
	va_end(ap);
	api_reply_error(res, &err);
}

const char *api_query_get(const void *ctx, const char *name)
{
	const struct api_request *req = ctx;
	return req->query ? req->query(req->query_ctx, name) : NULL;
}

int api_query_int(const struct api_request *req, const char *name, long def, long min,
		  long max, long *out, struct api_response *res)
{
	const char *v = api_query_get(req, name);
	char *end;

	*out = def;
	if (!v)
		return 0;
	*out = strtol(v, &end, 10);
	if (!*v || *end || *out < min || *out > max) {
		api_reply_errorf(res, 400, "invalid_argument", name,
				 "%s must be an integer from %ld to %ld", name, min, max);
		return -1;
	}
	return 0;
}

int api_query_ids(const struct api_request *req, const char *name, size_t max,
		  char (**ids)[UUID_STR_LEN], size_t *n, struct api_response *res)
{
	const char *v = api_query_get(req, name);
	*ids = NULL;
	*n = 0;
	if (!v)
		return 0;
	*ids = calloc(max, sizeof(**ids));
	if (!*ids) {
		api_reply_errorf(res, 500, "internal", NULL, "out of memory");
		return -1;
	}
	for (const char *p = v;;) {
		size_t len = strcspn(p, ",");
		if (*n == max) {
			api_reply_errorf(res, 400, "invalid_argument", name,
					 "%s names at most %zu ids", name, max);
			goto bad;
		}
		if (len != UUID_STR_LEN - 1)
			goto not_ids;
		memcpy((*ids)[*n], p, len);
		(*ids)[*n][len] = '\0';
		if (!uuid_valid((*ids)[*n]))
			goto not_ids;
		(*n)++;
		if (!p[len])
			break;
		p += len + 1;
	}
	return 0;
not_ids:
	api_reply_errorf(res, 400, "invalid_argument", name, "%s must be ids, separated by commas",
			 name);
bad:
	free(*ids);
	*ids = NULL;
	*n = 0;
	return -1;
}

void api_reply_store_error(struct api_response *res, int rc, const char *what)
{
	if (rc == STORE_UNAVAILABLE || rc == STORE_ERROR)
		metrics_store_error();
	switch (rc) {
	case STORE_NOT_FOUND:
		api_reply_errorf(res, 404, "not_found", NULL, "%s not found", what);
		break;
	case STORE_CONFLICT:
		api_reply_errorf(res, 409, "conflict", NULL, "%s conflicts with the current state",
				 what);
		break;
	case STORE_INVALID:
		api_reply_errorf(res, 400, "invalid_argument", NULL, "invalid %s", what);
		break;
	case STORE_UNAVAILABLE:
		api_reply_errorf(res, 503, "unavailable", NULL,
				 "the store is unavailable; nothing was changed, retry later");
		break;
	case STORE_TIMEOUT:
		api_reply_errorf(res, 503, "timeout", NULL,
				 "the %s request read the store for more than %d s and was stopped; "
				 "narrow it (status, subscription_id, from and to, a smaller limit)",
				 what, STORE_READ_TIMEOUT_MS / 1000);
		break;
	default:
		api_reply_errorf(res, 500, "internal", NULL, "store error: %s", store_strerror(rc));
		break;
	}
}

static int token_equal(const char *given, size_t len, const char *want)
{
	return want && strlen(want) == len && CRYPTO_memcmp(given, want, len) == 0;
}

enum auth_result { AUTH_OK, AUTH_MISSING, AUTH_INVALID, AUTH_EXPIRED };

/* Fills who from the Authorization header: the configured admin token (every scope), the
 * configured ingest token, or a named token that has not expired (who->name and
 * who->expires_at say which one did). */
static enum auth_result authenticate(const struct api *api, const char *header,
				     struct api_caller *who)
{
	memset(who, 0, sizeof(*who));
	if (!header)
		return AUTH_MISSING;
	if (strncasecmp(header, "Bearer ", 7) != 0)
		return AUTH_INVALID;
	const char *tok = header + 7;
	size_t len = strlen(tok);
	if (token_equal(tok, len, api->admin_token)) {
		who->scopes = TOKEN_SCOPE_ALL;
		strcpy(who->name, "admin");
		return AUTH_OK;
	}
	if (token_equal(tok, len, api->ingest_token)) {
		who->scopes = TOKEN_SCOPE_INGEST;
		strcpy(who->name, "ingest");
		return AUTH_OK;
	}
	int rc = api_tokens_lookup(api->tokens, tok, len, clock_now_ms(), who);
	return rc == 0 ? AUTH_OK : rc == API_TOKEN_EXPIRED ? AUTH_EXPIRED : AUTH_INVALID;
}

/* A failed authentication: counted, audited and logged within core/authlimit.h's bounds
 * (with the source address, never the token), answered 401 — or 429 with Retry-After
 * while the address is over its limit. what names the resource for the message. */
static void refuse_caller(struct api *api, const struct api_request *req, enum auth_result why,
			  const struct api_caller *who, const char *what, struct api_response *res)
{
	static const char *const reasons[] = {"", "missing_token", "invalid_token",
					      "expired_token"};
	struct authlimit_verdict v = {0};
	const char *addr = req->remote_addr ? req->remote_addr : "unknown";
	int64_t now = clock_now_ms();

	metrics_api_auth_failure(why == AUTH_MISSING ? METRICS_AUTH_MISSING :
				 why == AUTH_EXPIRED ? METRICS_AUTH_EXPIRED : METRICS_AUTH_INVALID);
	if (api->authlimit)
		authlimit_fail(api->authlimit, addr, now, &v);
	if (v.unaudited)
		log_warn("api: %ld failed authentications in the last minute were not audited "
			 "(at most %d a minute are; outboxd_api_auth_failures_total counts them all)",
			 v.unaudited, AUTHLIMIT_AUDIT_PER_MINUTE);
	if (v.limited) {
		metrics_api_auth_failure(METRICS_AUTH_LIMITED);
		if (v.started && v.audit) {
			char detail[160];
			snprintf(detail, sizeof(detail), "{\"failures\":%d,\"window_ms\":%d,"
				 "\"retry_after_s\":%d}", AUTHLIMIT_FAILURES + 1, AUTHLIMIT_WINDOW_MS,
				 v.retry_after_s);
			log_warn("api: %s failed to authenticate %d times within %d s: its failing "
				 "requests are answered 429 for %d s", addr, AUTHLIMIT_FAILURES + 1,
				 AUTHLIMIT_WINDOW_MS / 1000, v.retry_after_s);
			api_audit_as(api, "unauthenticated", "auth.rate_limited", addr, detail);
		}
		res->retry_after = v.retry_after_s;
		api_reply_errorf(res, 429, "too_many_requests", NULL,
				 "too many failed authentications from %s; retry in %d s with a valid "
				 "token", addr, v.retry_after_s);
		return;
	}
	if (v.audit && why != AUTH_MISSING) {
		/* The token itself, or any part of it, is never written: it may be a secret
		 * pasted in the wrong place. An expired token is named (its name is no secret:
		 * GET /v1/tokens lists it). */
		json_t *d = json_pack("{s:s, s:s, s:s}", "reason", reasons[why], "method",
				      req->method, "path", req->path);
		if (why == AUTH_EXPIRED)
			json_object_set_new(d, "token", json_string(who->name));
		char *detail = json_dumps(d, JSON_COMPACT);
		json_decref(d);
		log_warn("api: failed authentication from %s: %s on %s %.128s%s%s", addr,
			 reasons[why], req->method, req->path, why == AUTH_EXPIRED ? ", token " : "",
			 why == AUTH_EXPIRED ? who->name : "");
		api_audit_as(api, "unauthenticated", "auth.failed", addr, detail);
		free(detail);
	}
	if (why == AUTH_EXPIRED) {
		char at[RFC3339_LEN];
		clock_format_rfc3339(who->expires_at, at);
		api_reply_errorf(res, 401, "token_expired", NULL,
				 "the token \"%s\" expired at %s; an admin can make a new one "
				 "(POST /v1/tokens)", who->name, at);
	} else if (why == AUTH_MISSING) {
		api_reply_errorf(res, 401, "unauthenticated", NULL,
				 "%s needs Authorization: Bearer <token>", what);
	} else {
		api_reply_errorf(res, 401, "unauthenticated", NULL, "invalid bearer token");
	}
}

/* 403 naming the scope the route needs (as a member too, for programs) and those the
 * token has. */
static void reply_scope(struct api_response *res, const struct api_request *req,
			const struct api_route *route, const struct api_caller *who)
{
	char have[64], message[256];
	token_scopes_to_text(who->scopes, have, sizeof(have));
	const char *need = token_scope_name(route->scope);
	snprintf(message, sizeof(message), "%s %s needs the %s scope; the token \"%s\" has %s",
		 req->method, route->pattern, need, who->name, have);
	api_reply_json(res, 403, json_pack("{s:{s:s, s:s, s:s}}", "error", "code", "forbidden",
					   "message", message, "scope", need));
}

/* The declared body of a POST or PATCH: its size (413 over max_request, before a byte of
 * it is read) and its type (415). Returns 1 when it may be read. */
static int body_acceptable(const struct api *api, const struct api_request *req,
			   struct api_response *res)
{
	if (req->content_length > api->max_request) {
		metrics_api_refused(METRICS_API_TOO_LARGE);
		api_reply_errorf(res, 413, "payload_too_large", NULL,
				 "the request body (Content-Length %lld) is larger than %lld bytes "
				 "(max_request)", (long long)req->content_length,
				 (long long)api->max_request);
		return 0;
	}
	if (req->content_type) {
		size_t n = strcspn(req->content_type, ";");
		while (n && req->content_type[n - 1] == ' ')
			n--;
		if (!(n == 16 && strncasecmp(req->content_type, "application/json", 16) == 0)) {
			api_reply_errorf(res, 415, "unsupported_media_type", NULL,
					 "Content-Type must be application/json, got %.100s",
					 req->content_type);
			return 0;
		}
	}
	return 1;
}

static int check_id(const char *id, const char *what, struct api_response *res)
{
	if (uuid_valid(id))
		return 1;
	api_reply_errorf(res, 400, "invalid_argument", "id", "%s id must be a UUID, got \"%.64s\"",
			 what, id);
	return 0;
}

static int is(const struct api_request *req, const char *method)
{
	return strcmp(req->method, method) == 0;
}

/* ---- routes ------------------------------------------------------------------------------ */

static void h_events_post(struct api *api, const struct api_request *req, const char *id,
			  struct api_response *res)
{
	api_events_post(api, req, res);
}

static void h_events_get(struct api *api, const struct api_request *req, const char *id,
			 struct api_response *res)
{
	if (check_id(id, "event", res))
		api_events_get(api, id, res);
}

static void h_events_list(struct api *api, const struct api_request *req, const char *id,
			  struct api_response *res)
{
	api_events_list(api, req, res);
}

static void h_event_types(struct api *api, const struct api_request *req, const char *id,
			  struct api_response *res)
{
	api_event_types(api, req, res);
}

static void h_subs_create(struct api *api, const struct api_request *req, const char *id,
			  struct api_response *res)
{
	api_subs_create(api, req, res);
}

static void h_subs_list(struct api *api, const struct api_request *req, const char *id,
			struct api_response *res)
{
	api_subs_list(api, req, res);
}

static void h_subs_get(struct api *api, const struct api_request *req, const char *id,
		       struct api_response *res)
{
	if (check_id(id, "subscription", res))
		api_subs_get(api, id, res);
}

static void h_subs_patch(struct api *api, const struct api_request *req, const char *id,
			 struct api_response *res)
{
	if (check_id(id, "subscription", res))
		api_subs_patch(api, id, req, res);
}

static void h_subs_test(struct api *api, const struct api_request *req, const char *id,
			struct api_response *res)
{
	if (check_id(id, "subscription", res))
		api_events_test(api, id, req, res);
}

static void h_subs_delete(struct api *api, const struct api_request *req, const char *id,
			  struct api_response *res)
{
	if (check_id(id, "subscription", res))
		api_subs_delete(api, id, req, res);
}

static void h_deliveries_list(struct api *api, const struct api_request *req, const char *id,
			      struct api_response *res)
{
	api_deliveries_list(api, req, 0, res);
}

static void h_dlq_list(struct api *api, const struct api_request *req, const char *id,
		       struct api_response *res)
{
	api_deliveries_list(api, req, 1, res);
}

static void h_deliveries_get(struct api *api, const struct api_request *req, const char *id,
			     struct api_response *res)
{
	if (check_id(id, "delivery", res))
		api_deliveries_get(api, id, res);
}

static void h_dlq_replay(struct api *api, const struct api_request *req, const char *id,
			 struct api_response *res)
{
	api_dlq_replay(api, req, res);
}

static void h_dlq_purge(struct api *api, const struct api_request *req, const char *id,
			struct api_response *res)
{
	if (check_id(id, "delivery", res))
		api_dlq_purge(api, id, req, res);
}

static void h_dlq_purge_filter(struct api *api, const struct api_request *req, const char *id,
			       struct api_response *res)
{
	api_dlq_purge_filter(api, req, res);
}

static void h_jobs_get(struct api *api, const struct api_request *req, const char *id,
		       struct api_response *res)
{
	if (check_id(id, "job", res))
		api_jobs_get(api, id, res);
}

static void h_jobs_list(struct api *api, const struct api_request *req, const char *id,
			struct api_response *res)
{
	api_jobs_list(api, req, res);
}

static void h_jobs_cancel(struct api *api, const struct api_request *req, const char *id,
			  struct api_response *res)
{
	if (check_id(id, "job", res))
		api_jobs_cancel(api, id, req, res);
}

static void h_audit(struct api *api, const struct api_request *req, const char *id,
		    struct api_response *res)
{
	api_audit_list(api, req, res);
}

static void h_stats(struct api *api, const struct api_request *req, const char *id,
		    struct api_response *res)
{
	api_stats(api, req, res);
}

extern const unsigned char openapi_json[];
extern const unsigned long openapi_json_len;

static void h_openapi(struct api *api, const struct api_request *req, const char *id,
		      struct api_response *res)
{
	res->status = 200;
	res->body = strndup((const char *)openapi_json, openapi_json_len);
}

static void h_tokens_create(struct api *api, const struct api_request *req, const char *id,
			    struct api_response *res)
{
	api_tokens_create(api, req, res);
}

static void h_tokens_list(struct api *api, const struct api_request *req, const char *id,
			  struct api_response *res)
{
	api_tokens_list(api, res);
}

static void h_tokens_delete(struct api *api, const struct api_request *req, const char *id,
			    struct api_response *res)
{
	if (check_id(id, "token", res))
		api_tokens_delete(api, id, req, res);
}

static void h_whoami(struct api *api, const struct api_request *req, const char *id,
		     struct api_response *res)
{
	api_whoami(api, req, res);
}

static void h_stats_series(struct api *api, const struct api_request *req, const char *id,
			   struct api_response *res)
{
	api_stats_series(api, req, res);
}

static void h_delivery_request(struct api *api, const struct api_request *req, const char *id,
			       struct api_response *res)
{
	if (check_id(id, "delivery", res))
		api_delivery_request(api, id, res);
}

/* Every route the API answers, with the scope it needs (core/token.h: ingest, read,
 * operate, admin); docs/openapi.json must describe each (a unit test checks).
 * "{id}" matches one path segment. Order matters only for readability. */
static const struct api_route routes[] = {
	{"POST", "/v1/events", h_events_post, TOKEN_SCOPE_INGEST},
	{"GET", "/v1/events", h_events_list, TOKEN_SCOPE_READ},
	{"GET", "/v1/event-types", h_event_types, TOKEN_SCOPE_READ},
	{"GET", "/v1/events/{id}", h_events_get, TOKEN_SCOPE_READ},
	{"POST", "/v1/subscriptions", h_subs_create, TOKEN_SCOPE_ADMIN},
	{"GET", "/v1/subscriptions", h_subs_list, TOKEN_SCOPE_READ},
	{"GET", "/v1/subscriptions/{id}", h_subs_get, TOKEN_SCOPE_READ},
	{"PATCH", "/v1/subscriptions/{id}", h_subs_patch, TOKEN_SCOPE_ADMIN},
	{"DELETE", "/v1/subscriptions/{id}", h_subs_delete, TOKEN_SCOPE_ADMIN},
	{"POST", "/v1/subscriptions/{id}/test", h_subs_test, TOKEN_SCOPE_OPERATE},
	{"GET", "/v1/deliveries", h_deliveries_list, TOKEN_SCOPE_READ},
	{"GET", "/v1/deliveries/{id}", h_deliveries_get, TOKEN_SCOPE_READ},
	{"GET", "/v1/dlq", h_dlq_list, TOKEN_SCOPE_READ},
	{"POST", "/v1/dlq/replay", h_dlq_replay, TOKEN_SCOPE_OPERATE},
	{"DELETE", "/v1/dlq/{id}", h_dlq_purge, TOKEN_SCOPE_OPERATE},
	{"POST", "/v1/dlq/purge", h_dlq_purge_filter, TOKEN_SCOPE_OPERATE},
	{"GET", "/v1/jobs", h_jobs_list, TOKEN_SCOPE_READ},
	{"GET", "/v1/jobs/{id}", h_jobs_get, TOKEN_SCOPE_READ},
	{"POST", "/v1/jobs/{id}/cancel", h_jobs_cancel, TOKEN_SCOPE_OPERATE},
	{"GET", "/v1/audit", h_audit, TOKEN_SCOPE_READ},
	{"GET", "/v1/stats", h_stats, TOKEN_SCOPE_READ},
	{"GET", "/v1/openapi.json", h_openapi, TOKEN_SCOPE_READ},
	{"POST", "/v1/tokens", h_tokens_create, TOKEN_SCOPE_ADMIN},
	{"GET", "/v1/tokens", h_tokens_list, TOKEN_SCOPE_ADMIN},
	{"DELETE", "/v1/tokens/{id}", h_tokens_delete, TOKEN_SCOPE_ADMIN},
	/* the operator console's reads (routes_overview.c); whoami needs only a valid token */
	{"GET", "/v1/whoami", h_whoami, 0},
	{"GET", "/v1/stats/series", h_stats_series, TOKEN_SCOPE_READ},
	{"GET", "/v1/deliveries/{id}/request", h_delivery_request, TOKEN_SCOPE_READ},
};

const struct api_route *api_routes(size_t *n)
{
	*n = sizeof(routes) / sizeof(routes[0]);
	return routes;
}

/* Matches path against pattern; *id receives the {id} segment (pointing into path). */
static int route_match(const char *pattern, const char *path, const char **id)
{
	const char *brace = strstr(pattern, "{id}");
	if (!brace)
		return strcmp(pattern, path) == 0;
	size_t pre = (size_t)(brace - pattern);
	const char *rest = brace + 4;
	if (strncmp(pattern, path, pre) != 0)
		return 0;
	const char *seg = path + pre;
	size_t seglen = strcspn(seg, "/");
	if (seglen == 0 || strcmp(seg + seglen, rest) != 0)
		return 0;
	*id = seg;
	return 1;
}

int api_begin(struct api *api, const struct api_request *req, struct api_head *head,
	      struct api_response *res)
{
	const char *path = req->path;
	memset(head, 0, sizeof(*head));
	res->status = 500;
	res->body = NULL;

	if (strcmp(path, "/healthz") == 0) {
		api_reply_json(res, 200, json_pack("{s:s}", "status", "ok"));
		return 1;
	}
	if (strcmp(path, "/readyz") == 0) {
		int rc = store_ping(api->st);
		char why[256] = "";
		if (rc != STORE_OK)
			api_reply_errorf(res, 503, "unavailable", NULL, "store not reachable: %s",
					 store_strerror(rc));
		else if (!sub_registry_current(api->reg, why, sizeof(why)))
			api_reply_errorf(res, 503, "subscriptions_unavailable", NULL, "%s", why);
		else if (api->ready && api->ready(api->ready_ctx, why, sizeof(why)))
			api_reply_errorf(res, 503, "unavailable", NULL, "kafka brokers not reachable: %s",
					 why);
		else
			api_reply_json(res, 200, json_pack("{s:s, s:s}", "status", "ready", "store",
							   store_backend_name(api->st)));
		return 1;
	}

	if (api_console(req, res))
		return 1;

	if (strcmp(path, "/metrics") == 0) {
		struct api_caller who;
		enum auth_result ar = api->metrics_private ?
			authenticate(api, req->authorization, &who) : AUTH_OK;
		if (ar != AUTH_OK) {
			refuse_caller(api, req, ar, &who, "/metrics (metrics_public = false)", res);
		} else if (api->metrics_private &&
			   !(token_scope_grants(who.scopes) & TOKEN_SCOPE_READ)) {
			/* metrics_public = false: /metrics answers like a read route */
			static const struct api_route metrics_route = {"GET", "/metrics", NULL,
								       TOKEN_SCOPE_READ};
			reply_scope(res, req, &metrics_route, &who);
		} else {
			api_metrics(api, res);
		}
		return 1;
	}

	/* Find the route first, so unknown paths are 404 and known ones with another
	 * method 405, both before authentication says anything about the caller. */
	const struct api_route *hit = NULL;
	char allowed[64] = "";
	int known = 0;
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
		const char *seg = NULL;
		if (!route_match(routes[i].pattern, path, &seg))
			continue;
		known = 1;
		size_t used = strlen(allowed);
		snprintf(allowed + used, sizeof(allowed) - used, "%s%s", used ? ", " : "",
			 routes[i].method);
		if (strcmp(routes[i].method, req->method) == 0) {
			hit = &routes[i];
			head->id = NULL;
			if (seg) {
				/* The {id} segment alone, without what follows it. */
				snprintf(head->id_buf, sizeof(head->id_buf), "%.*s",
					 (int)strcspn(seg, "/"), seg);
				head->id = head->id_buf;
			}
		}
	}
	if (!known) {
		api_reply_errorf(res, 404, "not_found", NULL, "no route %s %.200s", req->method, path);
		return 1;
	}

	enum auth_result ar = authenticate(api, req->authorization, &head->who);
	if (ar != AUTH_OK) {
		refuse_caller(api, req, ar, &head->who, "this route", res);
		return 1;
	}
	if (!hit) {
		api_reply_errorf(res, 405, "method_not_allowed", NULL, "allowed methods: %s", allowed);
		return 1;
	}
	if (hit->scope && !(token_scope_grants(head->who.scopes) & hit->scope)) {
		reply_scope(res, req, hit, &head->who);
		return 1;
	}
	head->wants_body = is(req, "POST") || is(req, "PATCH");
	if (head->wants_body && !body_acceptable(api, req, res))
		return 1;
	head->route = hit;
	return 0;
}

void api_finish(struct api *api, const struct api_request *req, const struct api_head *head,
		struct api_response *res)
{
	if (head->wants_body && req->body_too_large) {
		api_reply_errorf(res, 413, "payload_too_large", NULL,
				 "the request body is larger than %lld bytes (max_request)",
				 (long long)api->max_request);
		return;
	}
	struct api_request named = *req;
	named.actor = head->who.name;
	named.scopes = head->who.scopes;
	head->route->handler(api, &named, head->id, res);
}

void api_handle(struct api *api, const struct api_request *req, struct api_response *res)
{
	struct api_head head;
	struct api_request whole = *req;

	/* a body already in memory declares its own size */
	if (whole.content_length <= 0 && whole.body_len)
		whole.content_length = (int64_t)whole.body_len;
	if (!api_begin(api, &whole, &head, res))
		api_finish(api, &whole, &head, res);
}

/* The API's error body in res (its own JSON) as err: the code and message a caller
 * outside HTTP is told. */
static void error_of_response(const struct api_response *res, struct input_error *err)
{
	json_t *doc = res->body ? json_loads(res->body, 0, NULL) : NULL;
	json_t *e = json_object_get(doc, "error");
	const char *code = json_string_value(json_object_get(e, "code"));
	const char *message = json_string_value(json_object_get(e, "message"));
	input_error_set(err, res->status, code ? code : "internal", "", "%s",
			message ? message : "refused");
	json_decref(doc);
}

int api_ingest_authorize(void *ctx, const char *authorization, const char *remote_addr,
			 const char *path, struct input_error *err)
{
	struct api *api = ctx;
	struct api_request req = {
		.method = "POST",
		.path = path,
		.authorization = authorization,
		.remote_addr = remote_addr,
		.content_length = -1,
	};
	struct api_route route = {"POST", path, NULL, TOKEN_SCOPE_INGEST};
	struct api_response res = {0};
	struct api_caller who;

	enum auth_result ar = authenticate(api, authorization, &who);
	if (ar != AUTH_OK)
		refuse_caller(api, &req, ar, &who, path, &res);
	else if (!(token_scope_grants(who.scopes) & TOKEN_SCOPE_INGEST))
		reply_scope(&res, &req, &route, &who);
	else
		return 0;
	error_of_response(&res, err);
	free(res.body);
	return -1;
}
