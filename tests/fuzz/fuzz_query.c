/* fuzz_query.c: libFuzzer target of the API's reading of a request target — the router's
 * paths and every GET route's query parameters (limits, filters, times, cursors, ids) —
 * through api_handle as the HTTP server calls it, on a real SQLite store holding two
 * subscriptions and a few events and deliveries. The input is what follows the host in
 * a URL ("/v1/dlq?status=FAILED&limit=3"); its query is split and decoded as
 * libmicrohttpd does (& and =, %XX, + as a space; the first of a repeated name counts).
 * Every answer must have a status from 200 to 599, and a JSON body, none, or a body of
 * the content type it names.
 *
 * Built by scripts/fuzz.sh through CMake (option OUTBOXD_FUZZ) against the app library;
 * the store lives in a scratch directory removed at exit. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ftw.h>
#include <jansson.h>

#include "api/api.h"
#include "core/retry.h"
#include "store/writer.h"
#include "util/log.h"

#define PARAMS_MAX 64

static struct {
	char dir[64];
	store *st;
	struct writer *w;
	struct sub_registry reg;
	struct api api;
} fx;

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static void cleanup(void)
{
	if (fx.w)
		writer_stop(fx.w);
	if (fx.st)
		store_close(fx.st);
	nftw(fx.dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* One call to the API as admin; the status (the body is checked and dropped). */
static int call(const char *method, const char *path,
		const char *(*query)(void *ctx, const char *name), void *ctx, const char *body)
{
	struct api_request req = {
		.method = method,
		.path = path,
		.query = query,
		.query_ctx = ctx,
		.authorization = "Bearer adm",
		.content_type = body ? "application/json" : NULL,
		.body = body,
		.body_len = body ? strlen(body) : 0,
	};
	struct api_response res = {0};
	api_handle(&fx.api, &req, &res);
	if (res.status < 200 || res.status > 599)
		abort(); /* not an HTTP answer */
	if (res.body && !res.content_type) { /* JSON unless it says otherwise (/metrics) */
		json_t *doc = json_loads(res.body, 0, NULL);
		if (!doc) {
			fprintf(stderr, "%s %s: not JSON: %s\n", method, path, res.body);
			abort();
		}
		json_decref(doc);
	}
	free(res.body);
	return res.status;
}

static const char *no_query(void *ctx, const char *name)
{
	(void)ctx;
	(void)name;
	return NULL;
}

/* The store and a few rows in it, once. */
static void fixture(void)
{
	char dsn[128], err[256];
	if (fx.st)
		return;
	log_set_level(LOG_ERROR + 1);
	snprintf(fx.dir, sizeof(fx.dir), "/tmp/outboxd-fuzz-query-XXXXXX");
	if (!mkdtemp(fx.dir))
		abort();
	snprintf(dsn, sizeof(dsn), "sqlite:%s/outboxd.db", fx.dir);
	if (store_open(dsn, "fuzz-query", &fx.st, err, sizeof(err)) != STORE_OK ||
	    !(fx.w = writer_start(fx.st, NULL)))
		abort();
	sub_registry_init(&fx.reg);
	fx.api.st = fx.st;
	fx.api.reg = &fx.reg;
	fx.api.writer = fx.w;
	fx.api.admin_token = "adm";
	fx.api.max_payload = 65536;
	fx.api.max_request = 1 << 20;
	fx.api.replay_rate = 100;
	fx.api.stats_window_ms = 3600 * 1000;
	retry_policy_defaults(&fx.api.retry_defaults);
	if (store_subs_load(fx.st, &fx.reg, &fx.api.retry_defaults) != STORE_OK)
		abort();
	if (call("POST", "/v1/subscriptions", no_query, NULL,
		 "{\"name\":\"orders\",\"event_types\":[\"order.*\"],\"endpoint\":"
		 "\"http://127.0.0.1:9/o\",\"auth\":{\"type\":\"bearer\",\"token\":\"t\"}}") != 201 ||
	    call("POST", "/v1/subscriptions", no_query, NULL,
		 "{\"name\":\"all\",\"event_types\":[\"*\"],\"endpoint\":\"http://127.0.0.1:9/a\"}") !=
		    201 ||
	    call("POST", "/v1/events", no_query, NULL,
		 "{\"events\":[{\"event_type\":\"order.created\",\"payload\":{\"n\":1},"
		 "\"source\":\"shop\",\"source_event_id\":\"o-1\",\"partition_key\":\"k1\"},"
		 "{\"event_type\":\"order.paid\",\"payload\":{\"n\":2}},"
		 "{\"event_type\":\"user.created\",\"payload\":[1,2,3]}]}") != 202)
		abort();
	/* after OpenSSL's own exit handler, so this one runs first: the writer thread ends
	 * (and OpenSSL frees its state) before OpenSSL cleans up */
	atexit(cleanup);
}

struct params {
	char *name[PARAMS_MAX], *value[PARAMS_MAX];
	int n;
};

static const char *params_get(void *ctx, const char *name)
{
	const struct params *p = ctx;
	for (int i = 0; i < p->n; i++)
		if (strcmp(p->name[i], name) == 0)
			return p->value[i];
	return NULL;
}

static int hex(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* %XX and + decoded in place, as libmicrohttpd does for query arguments. */
static void unescape(char *s)
{
	char *o = s;
	for (; *s; s++) {
		if (*s == '+') {
			*o++ = ' ';
		} else if (*s == '%' && hex(s[1]) >= 0 && hex(s[2]) >= 0) {
			*o++ = (char)(hex(s[1]) * 16 + hex(s[2]));
			s += 2;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/* The fixture is made before any input runs: the writer thread's own OpenSSL state is
 * the process's, not an input's leak. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fixture();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct params p = {.n = 0};
	char *target = malloc(size + 1), *save = NULL;
	if (!target)
		abort();
	memcpy(target, data, size);
	target[size] = '\0';
	char *q = strchr(target, '?');
	if (q)
		*q++ = '\0';
	for (char *kv = q ? strtok_r(q, "&", &save) : NULL; kv && p.n < PARAMS_MAX;
	     kv = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(kv, '=');
		if (eq)
			*eq++ = '\0';
		unescape(kv);
		if (eq)
			unescape(eq);
		p.name[p.n] = kv;
		p.value[p.n++] = eq ? eq : "";
	}
	/* only reads: the store stays as the fixture made it */
	call("GET", target[0] ? target : "/", params_get, &p, NULL);
	free(target);
	return 0;
}
