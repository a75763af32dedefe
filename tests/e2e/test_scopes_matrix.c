/* test_scopes_matrix.c: every documented API operation against every kind of caller, on
 * the real daemon.
 *
 * The operations and the scope each needs come from docs/openapi.json, read at run time
 * (each operation's x-scope: ingest, read, operate, admin, or "any valid token"), so a
 * route added to the document is walked without touching this file, and one documented
 * without a known x-scope fails here. Each /v1 operation is called with no Authorization
 * header, a wrong token, a named token of each scope, the configured ingest token and the
 * configured admin token:
 *   - no token or a wrong one: 401 (unauthenticated);
 *   - a token whose scopes do not grant the documented one: 403 (forbidden) whose
 *     error.scope names the documented scope;
 *   - a token that has it: neither 401 nor 403 (nor 405, 429 or 5xx): whatever the
 *     route answers an empty request (404 for an id that names nothing, 400 for "{}").
 * What a scope grants is the rule docs/api.md states, written out here rather than taken
 * from the daemon's code: admin grants every scope, operate grants read too, read and
 * ingest only themselves.
 *
 * Also: /healthz and /readyz answer without a token; /metrics with metrics_public = false
 * needs a token with the read scope, and without the setting (public by default) needs
 * none.
 *
 * Nothing here may change state: a POST or PATCH sends "{}", which every route refuses,
 * and {id} is a syntactically valid UUID that names nothing; DELETEs are walked last all
 * the same. Every broken row is printed (method, path, caller, status, body) before the
 * test fails. */
#include "e2e.h"

#ifndef OPENAPI_JSON_PATH
#error "OPENAPI_JSON_PATH (docs/openapi.json) is set by CMakeLists.txt"
#endif

/* A UUID of the right form that no resource has: the router checks the scope before the
 * handler checks the id, and a granted caller then gets 404. */
#define ABSENT_ID "0190d3e4-0000-7000-8000-00000000beef"

/* A token of the form outboxd makes ("obx_" + 48 hex digits) that it never issued. */
#define WRONG_TOKEN "obx_000000000000000000000000000000000000000000000000"

enum scope {
	SCOPE_INGEST = 1,
	SCOPE_READ = 2,
	SCOPE_OPERATE = 4,
	SCOPE_ADMIN = 8,
};
#define SCOPE_ALL (SCOPE_INGEST | SCOPE_READ | SCOPE_OPERATE | SCOPE_ADMIN)

static const struct {
	const char *name;
	unsigned bit;       /* 0: "any valid token" */
} scope_names[] = {
	{"ingest", SCOPE_INGEST},
	{"read", SCOPE_READ},
	{"operate", SCOPE_OPERATE},
	{"admin", SCOPE_ADMIN},
	{"any valid token", 0},
};

/* What a token made with one scope may do (docs/api.md, "Each route needs one scope"). */
static unsigned grants_of(unsigned scope)
{
	switch (scope) {
	case SCOPE_ADMIN:
		return SCOPE_ALL;
	case SCOPE_OPERATE:
		return SCOPE_OPERATE | SCOPE_READ;
	default:
		return scope;
	}
}

/* One caller of the matrix: token NULL sends no Authorization header; valid 0 means the
 * daemon must not accept the token at all. */
struct caller {
	char label[64];
	char token[80];
	int has_token;
	int valid;
	unsigned grants;
};

/* One documented operation. */
struct op {
	char method[8];         /* upper case */
	char pattern[128];      /* as documented, "/v1/subscriptions/{id}" */
	char path[160];         /* what is requested, {id} replaced */
	char scope_name[32];    /* x-scope */
	unsigned scope;         /* its bit, 0 for any valid token */
};

#define MAX_OPS 128
#define MAX_CALLERS 8

static struct daemon dmn;
static struct caller callers[MAX_CALLERS];
static size_t n_callers;

/* ---- requests from many source addresses ------------------------------------------------ */

/* The daemon answers 429 instead of 401 to an address after a few failed
 * authentications within a minute (core/authlimit.h). The matrix sends dozens on purpose,
 * so every request comes from an address of its own (127.0.0.0/8 is all this machine's):
 * each row then sees the answer a first-time caller gets. */
static unsigned next_source;

static void source_address(char out[INET_ADDRSTRLEN])
{
	unsigned n = next_source++;
	snprintf(out, INET_ADDRSTRLEN, "127.1.%u.%u", n / 250 % 250, n % 250 + 1);
}

struct answer {
	int status;             /* 0: no HTTP answer */
	char *raw;              /* the whole answer (head and body), owned */
	const char *body;       /* into raw */
	json_t *json;           /* the body as JSON, or NULL; owned */
};

static void answer_free(struct answer *a)
{
	json_decref(a->json);
	free(a->raw);
	memset(a, 0, sizeof(*a));
}

/* One HTTP/1.1 request to the daemon over a connection of its own from a fresh source
 * address; token NULL sends no Authorization header, body NULL none. The connection is
 * closed by the server after the answer (Connection: close), which ends the read. */
static void call(const char *method, const char *path, const char *token, const char *body,
		 struct answer *a)
{
	char src[INET_ADDRSTRLEN], auth[128] = "", length[96] = "";
	size_t cap = 4u << 20;
	int closed;

	memset(a, 0, sizeof(*a));
	source_address(src);
	if (token)
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s\r\n", token);
	if (body)
		snprintf(length, sizeof(length),
			 "Content-Type: application/json\r\nContent-Length: %zu\r\n", strlen(body));
	char *req = NULL;
	int len = asprintf(&req, "%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nConnection: close\r\n"
			   "%s%s\r\n%s", method, path, dmn.port, auth, length, body ? body : "");
	assert_true(len > 0);

	int fd = e2e_connect_from(src, dmn.port, 0);
	for (int sent = 0; sent < len;) {
		ssize_t n = send(fd, req + sent, (size_t)(len - sent), MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		sent += (int)n;
	}
	free(req);
	a->raw = malloc(cap);
	assert_non_null(a->raw);
	e2e_read_answer(fd, a->raw, cap, 10000, &closed);
	close(fd);
	a->status = e2e_answer_status(a->raw);
	const char *end = strstr(a->raw, "\r\n\r\n");
	a->body = end ? end + 4 : "";
	a->json = json_loads(a->body, JSON_DECODE_ANY, NULL);
}

static const char *error_member(const struct answer *a, const char *name)
{
	return json_string_value(json_object_get(json_object_get(a->json, "error"), name));
}

/* ---- the callers ------------------------------------------------------------------------ */

static void add_caller(const char *label, const char *token, int valid, unsigned grants)
{
	assert_true(n_callers < MAX_CALLERS);
	struct caller *c = &callers[n_callers++];
	snprintf(c->label, sizeof(c->label), "%s", label);
	c->has_token = token != NULL;
	snprintf(c->token, sizeof(c->token), "%s", token ? token : "");
	c->valid = valid;
	c->grants = grants;
}

/* A named token with one scope, made by the admin as an operator would
 * (POST /v1/tokens), added to the callers. */
static void add_named_token(const char *scope, unsigned bit)
{
	char body[128], label[64];
	snprintf(body, sizeof(body), "{\"name\":\"matrix-%s\",\"scopes\":[\"%s\"]}", scope, scope);
	json_t *t = api_call(&dmn, "POST", "/v1/tokens", body, 201);
	const char *value = json_string_value(json_object_get(t, "token"));
	assert_non_null(value);
	snprintf(label, sizeof(label), "named token matrix-%s", scope);
	add_caller(label, value, 1, grants_of(bit));
	json_decref(t);
}

static void make_callers(void)
{
	n_callers = 0;
	add_caller("no Authorization", NULL, 0, 0);
	add_caller("a wrong token", WRONG_TOKEN, 0, 0);
	add_named_token("ingest", SCOPE_INGEST);
	add_named_token("read", SCOPE_READ);
	add_named_token("operate", SCOPE_OPERATE);
	add_named_token("admin", SCOPE_ADMIN);
	/* the configured tokens: the ingest token may only ingest, the admin token anything */
	add_caller("configured ingest token", HARNESS_INGEST_TOKEN, 1, SCOPE_INGEST);
	add_caller("configured admin token", dmn.token, 1, SCOPE_ALL);
}

/* ---- the document ----------------------------------------------------------------------- */

static json_t *load_openapi(void)
{
	json_error_t err;
	json_t *doc = json_load_file(OPENAPI_JSON_PATH, 0, &err);
	if (!doc)
		fprintf(stderr, "%s: %s (line %d)\n", OPENAPI_JSON_PATH, err.text, err.line);
	assert_non_null(doc);
	assert_non_null(json_object_get(doc, "paths"));
	return doc;
}

static int is_http_method(const char *key)
{
	static const char *const methods[] = {"get", "put", "post", "delete", "options", "head",
					      "patch", "trace", NULL};
	for (size_t i = 0; methods[i]; i++)
		if (strcmp(key, methods[i]) == 0)
			return 1;
	return 0;
}

/* Reads, then changes nothing, then changes: a DELETE comes after everything else. */
static int method_rank(const char *method)
{
	return strcmp(method, "GET") == 0 ? 0 : strcmp(method, "DELETE") == 0 ? 2 : 1;
}

static int op_order(const void *a, const void *b)
{
	const struct op *x = a, *y = b;
	int d = method_rank(x->method) - method_rank(y->method);
	return d ? d : strcmp(x->pattern, y->pattern);
}

/* pattern with every {id} segment replaced by ABSENT_ID into out. Returns 0, or -1 for a
 * path parameter this test has no value for (the test then fails naming it). */
static int concrete_path(const char *pattern, char *out, size_t len)
{
	size_t o = 0;
	for (const char *p = pattern; *p;) {
		if (*p == '{') {
			if (strncmp(p, "{id}", 4) != 0)
				return -1;
			o += (size_t)snprintf(out + o, len - o, "%s", ABSENT_ID);
			p += 4;
		} else {
			if (o + 1 < len)
				out[o++] = *p;
			p++;
		}
		if (o >= len)
			return -1;
	}
	out[o] = '\0';
	return 0;
}

/* Every /v1 operation of doc into ops (sorted: GETs, then POST/PATCH, then DELETE).
 * Returns how many; fails the test on an operation without a known x-scope or with a
 * path parameter other than {id}. */
static size_t documented_ops(json_t *doc, struct op *ops, size_t max)
{
	const char *pattern, *key;
	json_t *item, *op;
	size_t n = 0;
	int bad = 0;

	json_object_foreach(json_object_get(doc, "paths"), pattern, item) {
		if (strncmp(pattern, "/v1/", 4) != 0)
			continue;
		json_object_foreach(item, key, op) {
			if (!is_http_method(key))
				continue;
			assert_true(n < max);
			struct op *o = &ops[n];
			memset(o, 0, sizeof(*o));
			for (size_t i = 0; key[i] && i < sizeof(o->method) - 1; i++)
				o->method[i] = (char)(key[i] & ~0x20); /* upper case */
			snprintf(o->pattern, sizeof(o->pattern), "%s", pattern);
			const char *scope = json_string_value(json_object_get(op, "x-scope"));
			int known = 0;
			for (size_t i = 0; scope && i < sizeof(scope_names) / sizeof(scope_names[0]);
			     i++)
				if (strcmp(scope, scope_names[i].name) == 0) {
					o->scope = scope_names[i].bit;
					known = 1;
				}
			if (!known) {
				fprintf(stderr, "%s %s: x-scope %s is not one of ingest, read, operate, "
					"admin, \"any valid token\"\n", o->method, pattern,
					scope ? scope : "(missing)");
				bad++;
				continue;
			}
			snprintf(o->scope_name, sizeof(o->scope_name), "%s", scope);
			if (concrete_path(pattern, o->path, sizeof(o->path)) != 0) {
				fprintf(stderr, "%s %s: a path parameter other than {id}: give this "
					"test a plausible value for it\n", o->method, pattern);
				bad++;
				continue;
			}
			n++;
		}
	}
	assert_int_equal(bad, 0);
	qsort(ops, n, sizeof(ops[0]), op_order);
	return n;
}

/* ---- the rows --------------------------------------------------------------------------- */

/* Calls op as c and checks the answer against the documented scope. Returns 0, or 1 after
 * printing the row when the answer is not the documented one. */
static int check_row(const struct op *o, const struct caller *c)
{
	int with_body = strcmp(o->method, "POST") == 0 || strcmp(o->method, "PATCH") == 0 ||
			strcmp(o->method, "PUT") == 0;
	struct answer a;
	char want[160];
	int ok;

	call(o->method, o->path, c->has_token ? c->token : NULL, with_body ? "{}" : NULL, &a);
	if (!c->valid) {
		snprintf(want, sizeof(want), "401 unauthenticated");
		ok = a.status == 401 && error_member(&a, "code") &&
		     strcmp(error_member(&a, "code"), "unauthenticated") == 0;
	} else if (o->scope && !(c->grants & o->scope)) {
		snprintf(want, sizeof(want), "403 forbidden with error.scope \"%s\"", o->scope_name);
		ok = a.status == 403 && error_member(&a, "code") && error_member(&a, "scope") &&
		     strcmp(error_member(&a, "code"), "forbidden") == 0 &&
		     strcmp(error_member(&a, "scope"), o->scope_name) == 0;
	} else {
		snprintf(want, sizeof(want), "an answer from the route itself (the caller has "
			 "scope %s): not 401, 403, 405, 429 or 5xx", o->scope_name);
		ok = a.status >= 200 && a.status < 500 && a.status != 401 && a.status != 403 &&
		     a.status != 405 && a.status != 429;
	}
	if (!ok)
		fprintf(stderr, "ROW BROKEN: %s %s (documented x-scope %s) as %s: got %d, want %s; "
			"body: %.300s\n", o->method, o->path, o->scope_name, c->label, a.status, want,
			a.body ? a.body : "");
	answer_free(&a);
	return !ok;
}

/* ---- fixture ---------------------------------------------------------------------------- */

static int setup(void **state)
{
	/* /metrics needs a token until the last test restarts the daemon without the setting */
	const char *env[] = {"OUTBOXD_METRICS_PUBLIC=false", NULL};
	e2e_setup(NULL, &dmn, env);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(NULL, &dmn);
	return 0;
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_every_operation_every_caller(void **state)
{
	static struct op ops[MAX_OPS];
	json_t *doc = load_openapi();
	size_t n_ops = documented_ops(doc, ops, MAX_OPS), rows = 0;
	int broken = 0;

	json_decref(doc);
	assert_true(n_ops > 0);
	make_callers();
	for (size_t i = 0; i < n_ops; i++)
		for (size_t k = 0; k < n_callers; k++) {
			broken += check_row(&ops[i], &callers[k]);
			rows++;
		}
	fprintf(stderr, "scopes matrix: %zu documented operations x %zu callers = %zu rows, "
		"%d broken\n", n_ops, n_callers, rows, broken);
	assert_int_equal(broken, 0);

	/* and the walk changed nothing: the four named tokens are still the only ones, and
	 * no subscription was made */
	json_t *tokens = e2e_get(&dmn, "/v1/tokens");
	assert_int_equal(json_array_size(json_object_get(tokens, "items")), 4);
	json_decref(tokens);
	json_t *subs = e2e_get(&dmn, "/v1/subscriptions");
	json_t *list = json_is_array(subs) ? subs : json_object_get(subs, "items");
	assert_int_equal(json_array_size(list), 0);
	json_decref(subs);
}

/* The documented paths outside /v1 are the health routes and /metrics, and each is walked
 * here: a new one fails until this test says what it must answer. */
static void test_paths_outside_v1(void **state)
{
	json_t *doc = load_openapi();
	const char *path;
	json_t *item;
	int unknown = 0;

	json_object_foreach(json_object_get(doc, "paths"), path, item) {
		if (strncmp(path, "/v1/", 4) == 0)
			continue;
		if (strcmp(path, "/healthz") && strcmp(path, "/readyz") && strcmp(path, "/metrics")) {
			fprintf(stderr, "documented %s is outside /v1 and not walked by this test\n",
				path);
			unknown++;
		}
	}
	json_decref(doc);
	assert_int_equal(unknown, 0);

	/* health and readiness need no token */
	static const char *const health[] = {"/healthz", "/readyz"};
	for (size_t i = 0; i < 2; i++) {
		struct answer a;
		call("GET", health[i], NULL, NULL, &a);
		if (a.status != 200)
			fprintf(stderr, "ROW BROKEN: GET %s as no Authorization: got %d, want 200; "
				"body: %.300s\n", health[i], a.status, a.body);
		assert_int_equal(a.status, 200);
		answer_free(&a);
	}
}

/* metrics_public = false: /metrics needs a token with the read scope (docs/api.md). */
static void test_private_metrics(void **state)
{
	int broken = 0;

	if (n_callers == 0)
		make_callers();
	for (size_t k = 0; k < n_callers; k++) {
		const struct caller *c = &callers[k];
		struct answer a;
		int want = !c->valid ? 401 : (c->grants & SCOPE_READ) ? 200 : 403;
		call("GET", "/metrics", c->has_token ? c->token : NULL, NULL, &a);
		int ok = a.status == want;
		if (ok && want == 403)
			ok = error_member(&a, "code") && strcmp(error_member(&a, "code"), "forbidden") == 0 &&
			     error_member(&a, "scope") && strcmp(error_member(&a, "scope"), "read") == 0;
		if (ok && want == 200)
			ok = strstr(a.body, "# TYPE ") != NULL;
		if (!ok) {
			fprintf(stderr, "ROW BROKEN: GET /metrics (metrics_public = false) as %s: got "
				"%d, want %d; body: %.300s\n", c->label, a.status, want, a.body);
			broken++;
		}
		answer_free(&a);
	}
	assert_int_equal(broken, 0);
}

/* Without the setting /metrics is public: no token, 200. */
static void test_public_metrics_by_default(void **state)
{
	struct answer a;

	assert_int_equal(daemon_stop(&dmn), 0);
	assert_int_equal(daemon_start(&dmn, NULL), 0);
	call("GET", "/metrics", NULL, NULL, &a);
	if (a.status != 200)
		fprintf(stderr, "ROW BROKEN: GET /metrics (metrics_public unset) as no "
			"Authorization: got %d, want 200; body: %.300s\n", a.status, a.body);
	assert_int_equal(a.status, 200);
	assert_non_null(strstr(a.body, "# TYPE "));
	answer_free(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_operation_every_caller),
		cmocka_unit_test(test_paths_outside_v1),
		cmocka_unit_test(test_private_metrics),
		cmocka_unit_test(test_public_metrics_by_default),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
