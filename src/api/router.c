/* router.c: authentication, routing and error bodies of the API (DESIGN §4). */
#include "api/api.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

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

void api_reply_store_error(struct api_response *res, int rc, const char *what)
{
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
	default:
		api_reply_errorf(res, 500, "internal", NULL, "store error: %s", store_strerror(rc));
		break;
	}
}

enum caller { CALLER_NONE, CALLER_INGEST, CALLER_ADMIN };

static int token_equal(const char *given, size_t len, const char *want)
{
	return want && strlen(want) == len && CRYPTO_memcmp(given, want, len) == 0;
}

static enum caller authenticate(const struct api *api, const char *header)
{
	if (!header || strncasecmp(header, "Bearer ", 7) != 0)
		return CALLER_NONE;
	const char *tok = header + 7;
	size_t len = strlen(tok);
	if (token_equal(tok, len, api->admin_token))
		return CALLER_ADMIN;
	if (token_equal(tok, len, api->ingest_token))
		return CALLER_INGEST;
	return CALLER_NONE;
}

/* "/v1/subscriptions/ID" with prefix "/v1/subscriptions/" -> "ID", or NULL. */
static const char *path_param(const char *path, const char *prefix)
{
	size_t n = strlen(prefix);
	if (strncmp(path, prefix, n) != 0 || !path[n] || strchr(path + n, '/'))
		return NULL;
	return path + n;
}

static int body_is_json(const struct api *api, const struct api_request *req,
			struct api_response *res)
{
	if (req->body_too_large) {
		api_reply_errorf(res, 413, "payload_too_large", NULL,
				 "the request body is larger than %lld bytes",
				 (long long)api->max_request);
		return 0;
	}
	if (req->content_type) {
		size_t n = strcspn(req->content_type, ";");
		while (n && req->content_type[n - 1] == ' ')
			n--;
		if (!(n == 16 && strncasecmp(req->content_type, "application/json", 16) == 0)) {
			api_reply_errorf(res, 415, "unsupported_media_type", NULL,
					 "Content-Type must be application/json, got %s",
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

static void method_not_allowed(struct api_response *res, const char *allowed)
{
	api_reply_errorf(res, 405, "method_not_allowed", NULL, "allowed methods: %s", allowed);
}

void api_handle(struct api *api, const struct api_request *req, struct api_response *res)
{
	const char *path = req->path, *id;
	res->status = 500;
	res->body = NULL;

	if (strcmp(path, "/healthz") == 0) {
		api_reply_json(res, 200, json_pack("{s:s}", "status", "ok"));
		return;
	}
	if (strcmp(path, "/readyz") == 0) {
		int rc = store_ping(api->st);
		if (rc == STORE_OK)
			api_reply_json(res, 200, json_pack("{s:s, s:s}", "status", "ready", "store",
							   store_backend_name(api->st)));
		else
			api_reply_errorf(res, 503, "unavailable", NULL, "store not reachable: %s",
					 store_strerror(rc));
		return;
	}
	if (strncmp(path, "/v1/", 4) != 0) {
		api_reply_errorf(res, 404, "not_found", NULL, "no route %s %s", req->method, path);
		return;
	}

	enum caller who = authenticate(api, req->authorization);
	if (who == CALLER_NONE) {
		api_reply_errorf(res, 401, "unauthenticated", NULL,
				 req->authorization ? "invalid bearer token"
						    : "missing Authorization: Bearer <token>");
		return;
	}
	int ingest_route = strcmp(path, "/v1/events") == 0 && is(req, "POST");
	if (who == CALLER_INGEST && !ingest_route) {
		api_reply_errorf(res, 403, "forbidden", NULL,
				 "the ingest token may only POST /v1/events");
		return;
	}
	if ((is(req, "POST") || is(req, "PATCH") || is(req, "PUT")) && !body_is_json(api, req, res))
		return;

	if (strcmp(path, "/v1/events") == 0) {
		if (is(req, "POST"))
			api_events_post(api, req, res);
		else
			method_not_allowed(res, "POST");
	} else if ((id = path_param(path, "/v1/events/"))) {
		if (!is(req, "GET"))
			method_not_allowed(res, "GET");
		else if (check_id(id, "event", res))
			api_events_get(api, id, res);
	} else if (strcmp(path, "/v1/subscriptions") == 0) {
		if (is(req, "POST"))
			api_subs_create(api, req, res);
		else if (is(req, "GET"))
			api_subs_list(api, res);
		else
			method_not_allowed(res, "GET, POST");
	} else if ((id = path_param(path, "/v1/subscriptions/"))) {
		if (!is(req, "GET") && !is(req, "PATCH") && !is(req, "DELETE"))
			method_not_allowed(res, "GET, PATCH, DELETE");
		else if (!check_id(id, "subscription", res))
			;
		else if (is(req, "GET"))
			api_subs_get(api, id, res);
		else if (is(req, "PATCH"))
			api_subs_patch(api, id, req, res);
		else
			api_subs_delete(api, id, res);
	} else if (strcmp(path, "/v1/deliveries") == 0 || strcmp(path, "/v1/dlq") == 0) {
		if (is(req, "GET"))
			api_deliveries_list(api, req, strcmp(path, "/v1/dlq") == 0, res);
		else
			method_not_allowed(res, "GET");
	} else if ((id = path_param(path, "/v1/deliveries/"))) {
		if (!is(req, "GET"))
			method_not_allowed(res, "GET");
		else if (check_id(id, "delivery", res))
			api_deliveries_get(api, id, res);
	} else if (strcmp(path, "/v1/dlq/replay") == 0) {
		if (is(req, "POST"))
			api_dlq_replay(api, req, res);
		else
			method_not_allowed(res, "POST");
	} else if ((id = path_param(path, "/v1/dlq/"))) {
		if (!is(req, "DELETE"))
			method_not_allowed(res, "DELETE");
		else if (check_id(id, "delivery", res))
			api_dlq_purge(api, id, res);
	} else {
		api_reply_errorf(res, 404, "not_found", NULL, "no route %s %s", req->method, path);
	}
}
