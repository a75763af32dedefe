/* test_routes.c: the route table against docs/openapi.json (every route the server
 * answers is documented, and nothing documented is missing a route), and routing
 * decisions that need no store: 404, 405, 401, 403, health, and what api_begin decides
 * from a request's head before its body (401, 413, 415). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <cmocka.h>

#include <jansson.h>

#include "api/api.h"

extern const unsigned char openapi_json[];
extern const unsigned long openapi_json_len;

static json_t *openapi(void)
{
	json_error_t err;
	json_t *doc = json_loadb((const char *)openapi_json, openapi_json_len, 0, &err);
	if (!doc)
		fprintf(stderr, "docs/openapi.json: %s (line %d)\n", err.text, err.line);
	assert_non_null(doc);
	return doc;
}

static void test_every_route_documented(void **state)
{
	json_t *doc = openapi(), *paths = json_object_get(doc, "paths");
	size_t n;
	const struct api_route *r = api_routes(&n);
	size_t documented = 0;
	for (size_t i = 0; i < n; i++) {
		char method[16];
		size_t k;
		for (k = 0; r[i].method[k] && k < sizeof(method) - 1; k++)
			method[k] = (char)(r[i].method[k] | 0x20); /* lower case */
		method[k] = '\0';
		json_t *op = json_object_get(json_object_get(paths, r[i].pattern), method);
		if (!op)
			fprintf(stderr, "%s %s is not in docs/openapi.json\n", r[i].method, r[i].pattern);
		assert_non_null(op);
		assert_non_null(json_object_get(op, "responses"));
	}
	/* And the other way: every documented /v1 operation has a route. */
	const char *path;
	json_t *item;
	json_object_foreach(paths, path, item) {
		const char *method;
		json_t *op;
		json_object_foreach(item, method, op) {
			if (strncmp(path, "/v1/", 4) != 0)
				continue;
			int found = 0;
			for (size_t i = 0; i < n && !found; i++)
				found = strcmp(r[i].pattern, path) == 0 && strcasecmp(r[i].method, method) == 0;
			if (!found)
				fprintf(stderr, "documented %s %s has no route\n", method, path);
			assert_true(found);
			documented++;
		}
	}
	assert_int_equal(documented, n);
	json_decref(doc);
}

static const char *no_query(void *ctx, const char *name)
{
	return NULL;
}

static struct api_response call(const char *method, const char *path, const char *auth)
{
	struct api api = {.admin_token = "adm", .ingest_token = "ing", .max_request = 1024};
	struct api_request req = {.method = method, .path = path, .query = no_query,
				  .authorization = auth};
	struct api_response res = {0};
	api_handle(&api, &req, &res);
	return res;
}

static void expect(const char *method, const char *path, const char *auth, int status,
		   const char *code)
{
	struct api_response res = call(method, path, auth);
	if (res.status != status)
		fprintf(stderr, "%s %s: %d %s\n", method, path, res.status, res.body ? res.body : "");
	assert_int_equal(res.status, status);
	if (code) {
		json_t *j = json_loads(res.body, 0, NULL);
		assert_string_equal(json_string_value(json_object_get(json_object_get(j, "error"), "code")),
				    code);
		json_decref(j);
	}
	free(res.body);
}

static void test_routing(void **state)
{
	expect("GET", "/healthz", NULL, 200, NULL);
	expect("GET", "/nope", "Bearer adm", 404, "not_found");
	expect("GET", "/v1/subscriptions/a/b", "Bearer adm", 404, "not_found");
	expect("GET", "/v1/deliveries", NULL, 401, "unauthenticated");
	expect("GET", "/v1/deliveries", "Bearer wrong", 401, "unauthenticated");
	expect("GET", "/v1/deliveries", "Basic adm", 401, "unauthenticated");
	expect("PUT", "/v1/events", "Bearer adm", 405, "method_not_allowed");
	expect("GET", "/v1/subscriptions", "Bearer ing", 403, "forbidden");
	expect("GET", "/v1/deliveries/not-a-uuid", "Bearer adm", 400, "invalid_argument");
	expect("DELETE", "/v1/dlq/123", "Bearer adm", 400, "invalid_argument");
	expect("GET", "/v1/openapi.json", "Bearer adm", 200, NULL);
}

/* The console: static files without a token, a strict CSP, ETag revalidation; and
 * GET /v1/whoami answers any valid token, whatever its scopes. */
static void test_console(void **state)
{
	struct api api = {.admin_token = "adm", .ingest_token = "ing", .max_request = 1024};
	struct api_request req = {.method = "GET", .path = "/console", .query = no_query};
	struct api_response res = {0};

	api_handle(&api, &req, &res);
	assert_int_equal(res.status, 200);
	assert_non_null(res.static_body);
	assert_string_equal(res.content_type, "text/html; charset=utf-8");
	assert_non_null(strstr(res.csp, "default-src 'self'"));
	assert_non_null(strstr(res.csp, "script-src 'self';"));
	assert_null(strstr(res.csp, "unsafe"));
	assert_non_null(strstr((const char *)res.static_body, "/console/app.js"));
	const char *etag = res.etag;
	assert_non_null(etag);

	struct api_response again = {0};
	req.path = "/console/";
	req.if_none_match = etag;
	api_handle(&api, &req, &again);
	assert_int_equal(again.status, 304);
	assert_null(again.static_body);

	struct api_response js = {0};
	req.path = "/console/vendor/htm-preact.js";
	req.if_none_match = NULL;
	api_handle(&api, &req, &js);
	assert_int_equal(js.status, 200);
	assert_string_equal(js.content_type, "text/javascript; charset=utf-8");
	assert_true(js.static_len > 1000);

	expect("GET", "/console/nope.js", NULL, 404, "not_found");
	expect("POST", "/console/app.js", NULL, 405, "method_not_allowed");
	expect("GET", "/consolex", NULL, 404, "not_found");

	struct api_response me = call("GET", "/v1/whoami", "Bearer ing");
	assert_int_equal(me.status, 200);
	assert_string_equal(me.body, "{\"name\":\"ingest\",\"scopes\":[\"ingest\"],\"grants\":[\"ingest\"]}");
	free(me.body);
	expect("GET", "/v1/whoami", NULL, 401, "unauthenticated");
	expect("GET", "/v1/stats/series", "Bearer ing", 403, "forbidden");
	expect("GET", "/v1/events", "Bearer ing", 403, "forbidden");
}

/* api_begin decides from the head alone: the body is never looked at for a request it
 * answers, and a request it admits has its route, id and caller. */
static void test_begin_from_the_head(void **state)
{
	struct api api = {.admin_token = "adm", .ingest_token = "ing", .max_request = 1024};
	static const struct {
		const char *method, *path, *auth, *type;
		int64_t length;
		int status;                 /* 0: admitted */
	} cases[] = {
		{"POST", "/v1/events", NULL, "application/json", 1 << 30, 401},
		{"POST", "/v1/events", "Bearer nope", "application/json", 1 << 30, 401},
		{"POST", "/v1/events", "Bearer ing", "application/json", 1025, 413},
		{"POST", "/v1/events", "Bearer ing", "text/plain", 10, 415},
		{"POST", "/v1/subscriptions", "Bearer ing", "application/json", 10, 403},
		{"POST", "/v1/nowhere", "Bearer adm", "application/json", 10, 404},
		{"POST", "/v1/events", "Bearer ing", "application/json", 1024, 0},
		{"POST", "/v1/events", "Bearer ing", NULL, -1, 0},
		{"GET", "/v1/deliveries/0190d3e4-0000-7000-8000-000000000000", "Bearer adm", NULL, -1,
		 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct api_request req = {.method = cases[i].method, .path = cases[i].path,
					  .query = no_query, .authorization = cases[i].auth,
					  .content_type = cases[i].type,
					  .content_length = cases[i].length};
		struct api_response res = {0};
		struct api_head head;
		int answered = api_begin(&api, &req, &head, &res);
		if (answered != (cases[i].status != 0) || (answered && res.status != cases[i].status))
			fprintf(stderr, "case %zu: %d %s\n", i, res.status, res.body ? res.body : "");
		assert_int_equal(answered, cases[i].status != 0);
		if (answered)
			assert_int_equal(res.status, cases[i].status);
		else
			assert_non_null(head.route);
		free(res.body);
	}
	struct api_request get = {.method = "GET", .path =
				  "/v1/deliveries/0190d3e4-0000-7000-8000-000000000000/request",
				  .query = no_query, .authorization = "Bearer adm", .content_length = -1};
	struct api_response res = {0};
	struct api_head head;
	assert_int_equal(api_begin(&api, &get, &head, &res), 0);
	assert_string_equal(head.id, "0190d3e4-0000-7000-8000-000000000000");
	assert_string_equal(head.who.name, "admin");
	assert_false(head.wants_body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_route_documented),
		cmocka_unit_test(test_routing),
		cmocka_unit_test(test_console),
		cmocka_unit_test(test_begin_from_the_head),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
