/* test_tokens.c: named API tokens with scopes, as an operator sees them.
 *
 * The admin creates a token per scope; each token's allowed routes answer and its refused
 * ones answer 403 with the scope named; the audit log's actor is the token's name; a
 * revoked token is refused at once; GET /v1/tokens never shows a token and the store keeps
 * only hashes (the raw SQLite file is searched); tokens survive a restart; bad input is
 * refused naming the field; the CLI creates, lists and revokes. Failed authentications
 * are audited with the client's address and limited per address. A token may expire; its
 * last use is kept, written at most once a minute. On PostgreSQL, a read of the tokens
 * that waits (another session holds their table) holds up only the request that reads
 * them: the others are authenticated with the set in hand meanwhile. */
#include <libpq-fe.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bg_call.h"
#include "e2e.h"

static struct receiver rcv;
static struct daemon dmn;

static int setup(void **state)
{
	e2e_setup(&rcv, &dmn, NULL);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

struct token {
	char id[64];
	char value[80];
};

static void create_token(const char *name, const char *scopes_json, struct token *out)
{
	char body[256];
	snprintf(body, sizeof(body), "{\"name\":\"%s\",\"scopes\":%s}", name, scopes_json);
	json_t *t = api_call(&dmn, "POST", "/v1/tokens", body, 201);
	const char *value = json_string_value(json_object_get(t, "token"));
	assert_non_null(value);
	assert_int_equal(strlen(value), 52);
	assert_memory_equal(value, "obx_", 4);
	/* the prefix shown in lists is the token's beginning */
	assert_memory_equal(json_string_value(json_object_get(t, "prefix")), value, 8);
	assert_string_equal(json_string_value(json_object_get(t, "name")), name);
	assert_string_equal(json_string_value(json_object_get(t, "created_by")), "admin");
	snprintf(out->id, sizeof(out->id), "%s", json_string_value(json_object_get(t, "id")));
	snprintf(out->value, sizeof(out->value), "%s", value);
	json_decref(t);
}

/* The call answers 403 naming scope, in the error's scope member and its message. */
static void expect_forbidden(const struct token *t, const char *method, const char *path,
			     const char *body, const char *scope)
{
	json_t *r = api_call_as(&dmn, t->value, method, path, body, 403);
	json_t *err = json_object_get(r, "error");
	assert_string_equal(json_string_value(json_object_get(err, "code")), "forbidden");
	assert_string_equal(json_string_value(json_object_get(err, "scope")), scope);
	assert_non_null(strstr(json_string_value(json_object_get(err, "message")), scope));
	json_decref(r);
}

static void allowed(const struct token *t, const char *method, const char *path,
		    const char *body, long status)
{
	json_decref(api_call_as(&dmn, t->value, method, path, body, status));
}

/* The newest audit entry's actor and action. */
static void expect_audit(const char *actor, const char *action)
{
	json_t *a = e2e_get(&dmn, "/v1/audit?limit=1");
	json_t *item = json_array_get(json_object_get(a, "items"), 0);
	assert_string_equal(json_string_value(json_object_get(item, "actor")), actor);
	assert_string_equal(json_string_value(json_object_get(item, "action")), action);
	json_decref(a);
}

/* A dead delivery for the replay and purge routes: its endpoint refuses connections. */
static void dead_delivery(const char *name, char out[64])
{
	char sub[64], ev[64], body[128], ids[1][64];
	int port = harness_free_port();
	e2e_create_sub(&dmn, sub, "{\"name\":\"%s\",\"event_types\":[\"%s.*\"],"
				  "\"endpoint\":\"http://127.0.0.1:%d/\",\"retry\":{\"immediate\":1,"
				  "\"max_retries\":1,\"interval\":\"100ms\"}}", name, name, port);
	snprintf(body, sizeof(body), "{\"event_type\":\"%s.x\",\"payload\":1}", name);
	e2e_send(&dmn, ev, body);
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 1), 1);
	json_t *d = e2e_wait_dead(&dmn, ids[0], 10000);
	assert_true(json_is_true(json_object_get(d, "dead")));
	json_decref(d);
	snprintf(out, 64, "%s", ids[0]);
}

static void test_scopes(void **state)
{
	struct token ingest, viewer, ops, root, multi;
	char dead[64], path[160], body[160];

	create_token("ingest-bot", "[\"ingest\"]", &ingest);
	create_token("viewer", "[\"read\"]", &viewer);
	create_token("ops-bot", "[\"operate\"]", &ops);
	create_token("root-bot", "[\"admin\"]", &root);
	create_token("multi", "[\"ingest\",\"read\"]", &multi);
	dead_delivery("scoped", dead);
	snprintf(path, sizeof(path), "/v1/dlq/%s", dead);
	snprintf(body, sizeof(body), "{\"ids\":[\"%s\"]}", dead);
	const char *event = "{\"event_type\":\"scoped.y\",\"payload\":2}";
	const char *sub = "{\"name\":\"by-token\",\"event_types\":[\"t.*\"],"
			  "\"endpoint\":\"http://127.0.0.1:9/\"}";

	/* ingest: POST /v1/events only */
	allowed(&ingest, "POST", "/v1/events", event, 202);
	expect_forbidden(&ingest, "GET", "/v1/deliveries", NULL, "read");
	expect_forbidden(&ingest, "GET", "/v1/stats", NULL, "read");
	expect_forbidden(&ingest, "POST", "/v1/dlq/replay", body, "operate");
	expect_forbidden(&ingest, "POST", "/v1/subscriptions", sub, "admin");
	expect_forbidden(&ingest, "GET", "/v1/tokens", NULL, "admin");

	/* read: every GET, nothing else */
	allowed(&viewer, "GET", "/v1/deliveries", NULL, 200);
	allowed(&viewer, "GET", "/v1/dlq", NULL, 200);
	allowed(&viewer, "GET", "/v1/stats", NULL, 200);
	allowed(&viewer, "GET", "/v1/subscriptions", NULL, 200);
	allowed(&viewer, "GET", "/v1/audit", NULL, 200);
	expect_forbidden(&viewer, "POST", "/v1/events", event, "ingest");
	expect_forbidden(&viewer, "POST", "/v1/dlq/replay", body, "operate");
	expect_forbidden(&viewer, "DELETE", path, NULL, "operate");
	expect_forbidden(&viewer, "POST", "/v1/dlq/purge", "{\"filter\":{}}", "operate");
	expect_forbidden(&viewer, "POST", "/v1/subscriptions", sub, "admin");
	expect_forbidden(&viewer, "GET", "/v1/tokens", NULL, "admin");

	/* operate: read + replay, purge, jobs; the audit log names the token */
	allowed(&ops, "GET", "/v1/dlq", NULL, 200);
	allowed(&ops, "POST", "/v1/dlq/replay", body, 200);
	expect_audit("ops-bot", "dlq.replay");
	expect_forbidden(&ops, "POST", "/v1/events", event, "ingest");
	expect_forbidden(&ops, "POST", "/v1/subscriptions", sub, "admin");
	expect_forbidden(&ops, "POST", "/v1/tokens", "{\"name\":\"x\",\"scopes\":[\"admin\"]}",
			 "admin");
	json_t *d = e2e_wait_dead(&dmn, dead, 10000);
	json_decref(d);
	allowed(&ops, "DELETE", path, NULL, 204);
	expect_audit("ops-bot", "dlq.purge");

	/* admin: everything, tokens and subscriptions included */
	allowed(&root, "POST", "/v1/subscriptions", sub, 201);
	expect_audit("root-bot", "subscription.create");
	allowed(&root, "POST", "/v1/events", event, 202);
	allowed(&root, "GET", "/v1/tokens", NULL, 200);
	json_t *t = api_call_as(&dmn, root.value, "POST", "/v1/tokens",
				"{\"name\":\"made-by-root\",\"scopes\":[\"read\"]}", 201);
	assert_string_equal(json_string_value(json_object_get(t, "created_by")), "root-bot");
	json_decref(t);
	expect_audit("root-bot", "token.create");

	/* several scopes add up */
	allowed(&multi, "POST", "/v1/events", event, 202);
	allowed(&multi, "GET", "/v1/deliveries", NULL, 200);
	expect_forbidden(&multi, "POST", "/v1/dlq/replay", body, "operate");

	/* the configured ingest token keeps working as before */
	json_decref(api_call_as(&dmn, "test-ingest-token", "POST", "/v1/events", event, 202));
	json_t *r = api_call_as(&dmn, "test-ingest-token", "GET", "/v1/stats", NULL, 403);
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "error"),
							       "scope")), "read");
	json_decref(r);

	/* a near miss of a real token is no token */
	struct token wrong = viewer;
	wrong.value[10] = wrong.value[10] == 'a' ? 'b' : 'a';
	json_decref(api_call_as(&dmn, wrong.value, "GET", "/v1/stats", NULL, 401));
}

static void test_list_revoke_restart(void **state)
{
	struct token keep, gone;
	create_token("keeper", "[\"read\"]", &keep);
	create_token("short-lived", "[\"read\",\"ingest\"]", &gone);

	/* the list shows names, scopes and prefixes, never a token or its hash */
	json_t *list = e2e_get(&dmn, "/v1/tokens");
	json_t *items = json_object_get(list, "items");
	assert_int_equal(json_array_size(items), 2);
	char *text = json_dumps(list, 0);
	assert_null(strstr(text, keep.value));
	assert_null(strstr(text, gone.value));
	assert_null(strstr(text, "hash"));
	free(text);
	json_t *second = json_array_get(items, 1);
	assert_string_equal(json_string_value(json_object_get(second, "name")), "short-lived");
	assert_string_equal(json_string_value(json_array_get(json_object_get(second, "scopes"), 0)),
			    "ingest");
	assert_string_equal(json_string_value(json_array_get(json_object_get(second, "scopes"), 1)),
			    "read");
	json_decref(list);

	/* revoked: refused at once, audited, and a second revoke is 404 */
	allowed(&gone, "GET", "/v1/stats", NULL, 200);
	char path[128];
	snprintf(path, sizeof(path), "/v1/tokens/%s", gone.id);
	json_decref(api_call(&dmn, "DELETE", path, NULL, 204));
	expect_audit("admin", "token.revoke");
	json_decref(api_call_as(&dmn, gone.value, "GET", "/v1/stats", NULL, 401));
	expect_audit("unauthenticated", "auth.failed");
	json_decref(api_call(&dmn, "DELETE", path, NULL, 404));

	/* tokens are kept in the store: they work after a restart */
	assert_int_equal(daemon_stop(&dmn), 0);
	assert_int_equal(daemon_start(&dmn, NULL), 0);
	allowed(&keep, "GET", "/v1/stats", NULL, 200);
	json_decref(api_call_as(&dmn, gone.value, "GET", "/v1/stats", NULL, 401));

	/* the store holds a hash, not the token (SQLite: the raw file and its WAL) */
	if (strncmp(dmn.db, "sqlite:", 7) == 0) {
		const char *suffixes[] = {"", "-wal"};
		for (size_t i = 0; i < 2; i++) {
			char file[400];
			snprintf(file, sizeof(file), "%s%s", e2e_db_path(&dmn), suffixes[i]);
			FILE *f = fopen(file, "rb");
			if (!f)
				continue;
			static char raw[64 << 20];
			size_t n = fread(raw, 1, sizeof(raw), f);
			fclose(f);
			assert_null(memmem(raw, n, keep.value, strlen(keep.value)));
			assert_null(memmem(raw, n, gone.value, strlen(gone.value)));
		}
	}
}

static void test_bad_input(void **state)
{
	static const struct {
		const char *body;
		long status;
		const char *field;
	} cases[] = {
		{"{\"name\":\"x\",\"scopes\":[\"superuser\"]}", 400, "scopes[0]"},
		{"{\"name\":\"x\",\"scopes\":[\"read\",7]}", 400, "scopes[1]"},
		{"{\"name\":\"x\",\"scopes\":[]}", 400, "scopes"},
		{"{\"name\":\"x\"}", 400, "scopes"},
		{"{\"name\":\"bad name!\",\"scopes\":[\"read\"]}", 400, "name"},
		{"{\"name\":\"\",\"scopes\":[\"read\"]}", 400, "name"},
		{"{\"scopes\":[\"read\"]}", 400, "name"},
		{"{\"name\":\"admin\",\"scopes\":[\"read\"]}", 400, "name"},
		{"{\"name\":\"x\",\"scopes\":[\"read\"],\"token\":\"mine\"}", 400, "token"},
		{"{\"name\":\"x\",\"scopes\":[\"read\"],\"ttl\":\"0s\"}", 400, "ttl"},
		{"{\"name\":\"x\",\"scopes\":[\"read\"],\"ttl\":\"soon\"}", 400, "ttl"},
		{"{\"name\":\"x\",\"scopes\":[\"read\"],\"ttl\":3600}", 400, "ttl"},
		{"{\"name\":\"x\",\"scopes\":[\"read\"],\"ttl\":\"3651d\"}", 400, "ttl"},
		{"{\"name\":\"x\",\"scopes\":[\"read\"],\"expires_at\":\"2001-01-01T00:00:00Z\"}",
		 400, "expires_at"},
		{"{\"name\":\"x\",\"scopes\":[\"read\"],\"expires_at\":\"tomorrow\"}", 400,
		 "expires_at"},
		{"{\"name\":\"x\",\"scopes\":[\"read\"],\"ttl\":\"1h\","
		 "\"expires_at\":\"2099-01-01T00:00:00Z\"}", 400, "ttl"},
		{"[1]", 400, NULL},
		{"{\"name\":", 400, NULL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *r = api_call(&dmn, "POST", "/v1/tokens", cases[i].body, cases[i].status);
		json_t *field = json_object_get(json_object_get(r, "error"), "field");
		if (cases[i].field)
			assert_string_equal(json_string_value(field), cases[i].field);
		json_decref(r);
	}
	struct token first;
	create_token("twice", "[\"read\"]", &first);
	json_t *r = api_call(&dmn, "POST", "/v1/tokens", "{\"name\":\"twice\",\"scopes\":[\"read\"]}",
			     409);
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "error"), "field")),
			    "name");
	json_decref(r);
	json_decref(api_call(&dmn, "DELETE", "/v1/tokens/not-a-uuid", NULL, 400));
}

/* The token named name in GET /v1/tokens (returned; json_decref it). */
static json_t *listed(const char *name)
{
	json_t *list = e2e_get(&dmn, "/v1/tokens"), *found = NULL, *t;
	size_t i;
	json_array_foreach(json_object_get(list, "items"), i, t)
		if (strcmp(json_string_value(json_object_get(t, "name")), name) == 0)
			found = json_incref(t);
	json_decref(list);
	assert_non_null(found);
	return found;
}

/* RFC 3339 of now + seconds, in UTC. */
static void time_from_now(int seconds, char *out, size_t len)
{
	time_t at = time(NULL) + seconds;
	struct tm tm;
	gmtime_r(&at, &tm);
	strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

struct refused {
	struct token *t;
	json_t *answer;
};

static int refused_expired(void *arg)
{
	struct refused *r = arg;
	struct http_resp resp;
	char url[160];
	snprintf(url, sizeof(url), "%s/v1/stats", dmn.url);
	http_do("GET", url, r->t->value, NULL, NULL, 0, &resp);
	int done = resp.status == 401;
	if (done)
		r->answer = json_incref(resp.json);
	http_resp_free(&resp);
	return done;
}

/* A token may expire (ttl or expires_at at creation): until then it works, after it is
 * refused with 401 token_expired naming it, audited and counted; the list shows the
 * expiry and the last use, which is written at most once a minute, not per request. */
static void test_expiry_and_last_use(void **state)
{
	struct token lasting, brief, unused;
	char body[256], at[64];

	json_t *t = api_call(&dmn, "POST", "/v1/tokens",
			     "{\"name\":\"lasting\",\"scopes\":[\"read\"],\"ttl\":\"90d\"}", 201);
	snprintf(lasting.value, sizeof(lasting.value), "%s",
		 json_string_value(json_object_get(t, "token")));
	assert_true(json_is_string(json_object_get(t, "expires_at")));
	assert_true(json_is_null(json_object_get(t, "last_used_at")));
	json_decref(t);
	time_from_now(3, at, sizeof(at));
	snprintf(body, sizeof(body), "{\"name\":\"brief\",\"scopes\":[\"read\"],"
		 "\"expires_at\":\"%s\"}", at);
	t = api_call(&dmn, "POST", "/v1/tokens", body, 201);
	snprintf(brief.value, sizeof(brief.value), "%s", json_string_value(json_object_get(t, "token")));
	json_decref(t);
	create_token("unused", "[\"read\"]", &unused);

	/* used: the list says when; used again within the minute: the same time (no write) */
	allowed(&lasting, "GET", "/v1/stats", NULL, 200);
	json_t *l = listed("lasting");
	const char *first = json_string_value(json_object_get(l, "last_used_at"));
	assert_non_null(first);
	char first_use[64];
	snprintf(first_use, sizeof(first_use), "%s", first);
	assert_false(json_is_true(json_object_get(l, "expired")));
	json_decref(l);
	usleep(1100 * 1000); /* past the token cache's reload */
	for (int i = 0; i < 20; i++)
		allowed(&lasting, "GET", "/v1/stats", NULL, 200);
	l = listed("lasting");
	assert_string_equal(json_string_value(json_object_get(l, "last_used_at")), first_use);
	json_decref(l);
	l = listed("unused");
	assert_true(json_is_null(json_object_get(l, "last_used_at")));
	assert_true(json_is_null(json_object_get(l, "expires_at")));
	json_decref(l);

	/* past its expiry the brief token is refused, with a message that says so */
	struct refused r = {&brief, NULL};
	assert_int_equal(harness_wait(refused_expired, &r, 20000), 0);
	json_t *err = json_object_get(r.answer, "error");
	assert_string_equal(json_string_value(json_object_get(err, "code")), "token_expired");
	assert_non_null(strstr(json_string_value(json_object_get(err, "message")), "\"brief\" expired"));
	json_decref(r.answer);
	l = listed("brief");
	assert_true(json_is_true(json_object_get(l, "expired")));
	json_decref(l);
	expect_audit("unauthenticated", "auth.failed");
	json_t *a = e2e_get(&dmn, "/v1/audit?limit=1");
	json_t *detail = json_object_get(json_array_get(json_object_get(a, "items"), 0), "detail");
	assert_string_equal(json_string_value(json_object_get(detail, "reason")), "expired_token");
	assert_string_equal(json_string_value(json_object_get(detail, "token")), "brief");
	json_decref(a);
	assert_true(e2e_metric(&dmn, "outboxd_api_auth_failures_total{reason=\"expired\"}") >= 1);
	/* the others are not touched */
	allowed(&lasting, "GET", "/v1/stats", NULL, 200);
	allowed(&unused, "GET", "/v1/stats", NULL, 200);
}

/* GET /v1/stats from the loopback address src with token (NULL: none); the whole answer
 * into out. Returns its status. */
static int stats_from(const char *src, const char *token, char *out, size_t len)
{
	char req[256];
	int closed, fd = e2e_connect_from(src, dmn.port, 0);
	int n = snprintf(req, sizeof(req), "GET /v1/stats HTTP/1.1\r\nHost: x\r\n%s%s%s"
			 "Connection: close\r\n\r\n", token ? "Authorization: Bearer " : "",
			 token ? token : "", token ? "\r\n" : "");
	assert_int_equal(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
	e2e_read_answer(fd, out, len, 10000, &closed);
	close(fd);
	return e2e_answer_status(out);
}

/* Failed authentications are counted, audited with the address (never the token) and,
 * past 10 a minute from one address, answered 429 for that address only; a valid token
 * from it is still served. */
static void test_failed_authentications(void **state)
{
	static const char wrong[] = "obx_0000000000000000000000000000000000000000deadbeef";
	char answer[4096], log[512];

	for (int i = 0; i < 10; i++)
		assert_int_equal(stats_from("127.0.0.5", wrong, answer, sizeof(answer)), 401);
	assert_int_equal(stats_from("127.0.0.5", wrong, answer, sizeof(answer)), 429);
	assert_non_null(strcasestr(answer, "\r\nRetry-After: "));
	assert_int_equal(stats_from("127.0.0.5", NULL, answer, sizeof(answer)), 429);
	/* the right token from the same address, and a wrong one from another, as usual */
	assert_int_equal(stats_from("127.0.0.5", HARNESS_ADMIN_TOKEN, answer, sizeof(answer)),
			 200);
	assert_int_equal(stats_from("127.0.0.6", wrong, answer, sizeof(answer)), 401);

	json_t *a = e2e_get(&dmn, "/v1/audit?limit=20");
	size_t i;
	json_t *item;
	int failed = 0, limited = 0;
	json_array_foreach(json_object_get(a, "items"), i, item) {
		const char *action = json_string_value(json_object_get(item, "action"));
		const char *target = json_string_value(json_object_get(item, "target"));
		if (strcmp(action, "auth.failed") == 0 && strcmp(target, "127.0.0.5") == 0) {
			json_t *detail = json_object_get(item, "detail");
			assert_string_equal(json_string_value(json_object_get(detail, "reason")),
					    "invalid_token");
			assert_string_equal(json_string_value(json_object_get(detail, "path")),
					    "/v1/stats");
			assert_string_equal(json_string_value(json_object_get(item, "actor")),
					    "unauthenticated");
			failed++;
		}
		limited += strcmp(action, "auth.rate_limited") == 0 &&
			   strcmp(target, "127.0.0.5") == 0;
	}
	assert_int_equal(failed, 10);
	assert_int_equal(limited, 1);
	char *text = json_dumps(a, 0);
	assert_null(strstr(text, "deadbeef"));
	free(text);
	json_decref(a);
	assert_true(e2e_metric(&dmn, "outboxd_api_auth_failures_total{reason=\"invalid\"}") >= 12);
	assert_true(e2e_metric(&dmn, "outboxd_api_auth_failures_total{reason=\"limited\"}") >= 2);
	/* the log says who failed, never with what */
	assert_false(e2e_file_contains(daemon_log_path(&dmn, log, sizeof(log)), "deadbeef"));
	assert_true(e2e_file_contains(log, "failed authentication from 127.0.0.5"));
}

static int run_cli(char *out, size_t len, const char *args)
{
	return e2e_cli(&dmn, out, len, args);
}

static void revoke_named(const char *name)
{
	char path[128];
	json_t *t = listed(name);
	snprintf(path, sizeof(path), "/v1/tokens/%s", json_string_value(json_object_get(t, "id")));
	json_decref(t);
	json_decref(api_call(&dmn, "DELETE", path, NULL, 204));
}

static void test_cli(void **state)
{
	static char out[65536];
	assert_int_equal(run_cli(out, sizeof(out), "tokens create cli-bot --scopes read,operate"), 0);
	/* the table row shows the prefix; the token follows the "shown this once" line */
	char *once = strstr(out, "shown this once");
	assert_non_null(once);
	char *tok = strstr(once, "obx_");
	assert_non_null(tok);
	struct token cli = {0};
	snprintf(cli.value, 53, "%s", tok);
	allowed(&cli, "GET", "/v1/dlq", NULL, 200);
	expect_forbidden(&cli, "POST", "/v1/events", "{\"event_type\":\"a\",\"payload\":1}",
			 "ingest");

	assert_int_equal(run_cli(out, sizeof(out), "tokens create cli-brief --scopes read --ttl 90d"),
			 0);
	assert_int_equal(run_cli(out, sizeof(out), "tokens create cli-bad --scopes read --ttl x"),
			 1);
	assert_int_equal(run_cli(out, sizeof(out), "tokens list"), 0);
	assert_non_null(strstr(out, "cli-bot"));
	assert_non_null(strstr(out, "LAST USED"));
	char *brief = strstr(out, "cli-brief");
	assert_non_null(brief);
	assert_null(strstr(brief, "never  never")); /* it expires */
	revoke_named("cli-brief");
	assert_non_null(strstr(out, "operate,read") ? strstr(out, "operate,read")
						    : strstr(out, "read,operate"));
	assert_null(strstr(out, cli.value));

	json_t *list = e2e_get(&dmn, "/v1/tokens");
	const char *id = json_string_value(json_object_get(json_array_get(json_object_get(list,
										  "items"), 0), "id"));
	char args[128];
	snprintf(args, sizeof(args), "tokens revoke %s", id);
	assert_int_equal(run_cli(out, sizeof(out), args), 0);
	json_decref(list);
	json_decref(api_call_as(&dmn, cli.value, "GET", "/v1/dlq", NULL, 401));
	/* bad usage exits 2, an API refusal 1 */
	assert_int_equal(run_cli(out, sizeof(out), "tokens create nameless"), 2);
	assert_int_equal(run_cli(out, sizeof(out), "tokens create x --scopes root"), 1);
}

/* One ingest with token (a named one): its HTTP status, 0 when no answer came. Run on a
 * thread of its own through bg_call.h. */
static int ingest_with(void *token)
{
	struct http_resp r = {0};
	static const char body[] = "{\"event_type\":\"held.read\",\"payload\":{}}";
	char url[128];
	int status = 0;

	snprintf(url, sizeof(url), "%s/v1/events", dmn.url);
	if (http_do("POST", url, token, NULL, body, strlen(body), &r) == 0)
		status = (int)r.status;
	http_resp_free(&r);
	return status;
}

static long long sessions_waiting_for_a_lock(PGconn *conn)
{
	PGresult *res = PQexec(conn, "SELECT count(*) FROM pg_stat_activity"
				     " WHERE datname = current_database() AND wait_event_type = 'Lock'");
	long long n = PQresultStatus(res) == PGRES_TUPLES_OK ? atoll(PQgetvalue(res, 0, 0)) : -1;
	PQclear(res);
	return n;
}

static void test_held_token_read_holds_up_one_request(void **state)
{
	struct token tok;
	struct bg_call reader;

	if (strncmp(dmn.db, "postgres", 8) != 0)
		skip(); /* another session cannot hold up SQLite's reads (WAL) */
	create_token("held-read", "[\"ingest\"]", &tok);
	/* the set, read with the token in it */
	assert_int_equal(ingest_with(tok.value), 202);

	PGconn *holder = PQconnectdb(dmn.db), *watch = PQconnectdb(dmn.db);
	assert_int_equal(PQstatus(holder), CONNECTION_OK);
	assert_int_equal(PQstatus(watch), CONNECTION_OK);
	PGresult *res = PQexec(holder, "BEGIN; LOCK TABLE outboxd.tokens IN ACCESS EXCLUSIVE MODE");
	assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
	PQclear(res);
	sleep(2); /* the set is more than a second old: the next request reads it again */
	assert_int_equal(bg_call_start(&reader, ingest_with, tok.value), 0);
	int waiting = 0;
	for (int i = 0; i < 300 && !waiting; i++) {
		waiting = sessions_waiting_for_a_lock(watch) > 0;
		if (!waiting)
			usleep(100 * 1000);
	}
	/* the reader waits for the tokens' table; another request goes on meanwhile */
	int other = waiting ? ingest_with(tok.value) : 0;
	int reader_answered = bg_call_done(&reader, 0);
	PQfinish(holder); /* the lock goes with its session */
	bg_call_join(&reader);
	PQfinish(watch);
	assert_true(waiting);
	assert_int_equal(other, 202);
	assert_false(reader_answered); /* still waiting when the other was answered */
	assert_int_equal(reader.rc, 202);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_scopes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_list_revoke_restart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cli, setup, teardown),
		cmocka_unit_test_setup_teardown(test_failed_authentications, setup, teardown),
		cmocka_unit_test_setup_teardown(test_expiry_and_last_use, setup, teardown),
		cmocka_unit_test_setup_teardown(test_held_token_read_holds_up_one_request, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
