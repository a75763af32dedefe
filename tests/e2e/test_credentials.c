/* test_credentials.c: the attacks on a subscription's credentials, seen from outside and
 * failing — real daemon, real receivers: `sub` plays the subscribers, `idp` a token
 * endpoint, both able to echo what they got.
 *
 *  - header injection: CR/LF in every value that becomes a header line (credentials,
 *    headers, an event's content type) is refused on create, on PATCH and at ingest,
 *    naming the field; a producer's outbox row that carries one never reaches a receiver;
 *  - echoes: a subscriber and a token endpoint that answer with the request they got
 *    (Basic, bearer, API key, query credential, OAuth2 access token and client secret,
 *    secret headers) leave no credential, in any encoding, in an API read or the log;
 *  - secret headers: {"value", "secret": true} and Authorization are sent in clear and
 *    shown masked (subscription reads, a delivery's request); the mask sent back keeps
 *    them;
 *  - moved hosts: a PATCH that points endpoint or token_url elsewhere while keeping a
 *    credential is refused (422 naming it). */
#include "e2e.h"

#include <libpq-fe.h>
#include <sqlite3.h>

#include <openssl/evp.h>

#include "harness_pg.h"

static struct receiver sub, idp;
static struct daemon dmn;

#define INJ "abc\\r\\nX-Injected: 1\\r\\nHost: evil"

static int setup(void **state)
{
	assert_int_equal(receiver_start(&idp), 0);
	e2e_setup(&sub, &dmn, NULL);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&sub, &dmn);
	receiver_stop(&idp);
	return 0;
}

static const char *str(json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

/* The error field of a refused request. */
static void expect_refused(const char *method, const char *path, const char *body, int status,
			   const char *field)
{
	json_t *err = api_call(&dmn, method, path, body, status);
	assert_non_null(err);
	const char *got = str(json_object_get(err, "error"), "field");
	if (!got || strcmp(got, field) != 0)
		fail_msg("%s %s %s: field %s, want %s", method, path, body, got ? got : "(none)",
			 field);
	json_decref(err);
}

/* ---- what must never show ---------------------------------------------------------- */

/* Every credential used below, as given. */
static const char *const secrets[] = {
	"b4sic-pw!", "bearer-t0ken-xyz", "k3y-value-777", "q v&l=ue/x", "ACCESS-tok-LEAK-42",
	"client s3cret/1", "usr-passw0rd", "hdr-s3cret-9", "Bearer plain-auth-hdr", NULL,
};

/* Percent-encoding of s as outboxd writes URLs and forms (returned; free it). */
static char *pct(const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = malloc(3 * strlen(s) + 1), *o = out;
	assert_non_null(out);
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    strchr("-._~", *p)) {
			*o++ = (char)*p;
		} else {
			*o++ = '%';
			*o++ = hex[*p >> 4];
			*o++ = hex[*p & 15];
		}
	}
	*o = '\0';
	return out;
}

/* Fails when text holds a credential as given, percent-encoded, or any 8 characters of
 * the base64 forms in b64s (a cut-off Basic header counts too). */
static void assert_no_credential(const char *where, const char *text, const char *const *b64s)
{
	for (const char *const *s = secrets; *s; s++) {
		char *esc = pct(*s);
		if (strstr(text, *s) || strstr(text, esc))
			fail_msg("%s shows the credential \"%s\":\n%s", where, *s, text);
		free(esc);
	}
	for (const char *const *b = b64s; b && *b; b++) {
		for (size_t i = 0; i + 8 <= strlen(*b); i++) {
			char piece[9];
			memcpy(piece, *b + i, 8);
			piece[8] = '\0';
			if (strstr(text, piece))
				fail_msg("%s shows 8 characters (%s) of the base64 \"%s\":\n%s",
					 where, piece, *b, text);
		}
	}
}


/* ---- header injection ------------------------------------------------------------------ */

static void test_header_injection_refused(void **state)
{
	static const struct {
		const char *fields; /* the subscription's auth and headers */
		const char *field;
	} attacks[] = {
		{"\"auth\":{\"type\":\"bearer\",\"token\":\"" INJ "\"}", "auth.token"},
		{"\"auth\":{\"type\":\"api_key\",\"header\":\"X-Key\",\"value\":\"" INJ "\"}",
		 "auth.value"},
		{"\"auth\":{\"type\":\"basic\",\"username\":\"u\",\"password\":\"" INJ "\"}",
		 "auth.password"},
		{"\"auth\":{\"type\":\"oauth2\",\"token_url\":\"http://127.0.0.1:1/t\","
		 "\"client_id\":\"c\",\"client_secret\":\"" INJ "\"}", "auth.client_secret"},
		{"\"headers\":{\"X-A\":\"" INJ "\"}", "headers.X-A"},
		{"\"headers\":{\"X-A\":{\"value\":\"" INJ "\",\"secret\":true}}", "headers.X-A"},
		{"\"headers\":{\"X-A\\r\\nHost\":\"v\"}", "headers.X-A\r\nHost"},
	};
	char body[1024], path[128], id[64], ev[64];

	e2e_create_sub(&dmn, id, "{\"name\":\"inj-ok\",\"event_types\":[\"inj.*\"],"
				 "\"endpoint\":\"%s/inj\",\"auth\":{\"type\":\"bearer\","
				 "\"token\":\"good-token\"}}", sub.url);
	snprintf(path, sizeof(path), "/v1/subscriptions/%s", id);
	for (size_t i = 0; i < sizeof(attacks) / sizeof(attacks[0]); i++) {
		snprintf(body, sizeof(body), "{\"name\":\"inj-%zu\",\"event_types\":[\"inj.*\"],"
					     "\"endpoint\":\"%s/inj\",%s}", i, sub.url,
			 attacks[i].fields);
		expect_refused("POST", "/v1/subscriptions", body, 400, attacks[i].field);
		snprintf(body, sizeof(body), "{%s}", attacks[i].fields);
		expect_refused("PATCH", path, body, 400, attacks[i].field);
	}
	/* the subscription is as it was, and nothing else was made */
	json_t *s = e2e_get(&dmn, "%s", path);
	assert_string_equal(str(json_object_get(s, "auth"), "type"), "bearer");
	assert_null(json_object_get(s, "headers"));
	json_decref(s);
	json_t *list = e2e_get(&dmn, "/v1/subscriptions");
	assert_int_equal(json_array_size(json_object_get(list, "items")), 1);
	json_decref(list);

	/* an event's content type is the Content-Type header of its requests */
	expect_refused("POST", "/v1/events",
		       "{\"event_type\":\"inj.one\",\"payload\":{},\"content_type\":"
		       "\"application/json" "\\r\\nX-Injected: 1\"}", 400, "content_type");
	e2e_send(&dmn, ev, "{\"event_type\":\"inj.one\",\"payload\":{}}");
	assert_int_equal(receiver_wait_count(&sub, "/inj", 1, 5000), 0);

	/* A producer's outbox row bypasses the API: its request is never made, and the
	 * delivery is dead at once with the reason. */
	const char *row = "INSERT INTO %soutbox(event_type, payload, content_type) VALUES "
			  "('inj.row', '{}', 'application/json' || char(13) || char(10) || "
			  "'X-Injected: 1')";
	char sql[512];
	if (harness_pg_wanted()) {
		snprintf(sql, sizeof(sql), row, "outboxd.");
		/* PostgreSQL has chr(), not char() */
		for (char *p = strstr(sql, "char("); p; p = strstr(p, "char("))
			memcpy(p, "chr( ", 5);
		PGconn *c = PQconnectdb(dmn.db);
		PGresult *r = PQexec(c, sql);
		if (PQresultStatus(r) != PGRES_COMMAND_OK)
			fail_msg("%s: %s", sql, PQerrorMessage(c));
		PQclear(r);
		PQfinish(c);
	} else {
		sqlite3 *db;
		snprintf(sql, sizeof(sql), row, "");
		assert_int_equal(sqlite3_open(e2e_db_path(&dmn), &db), SQLITE_OK);
		sqlite3_busy_timeout(db, 5000);
		assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
		sqlite3_close(db);
	}
	json_t *dead = NULL;
	for (int waited = 0; waited < 10000; waited += 100) {
		json_decref(dead);
		dead = e2e_get(&dmn, "/v1/dlq?event_type=inj.row");
		if (json_array_size(json_object_get(dead, "items")) == 1)
			break;
		usleep(100 * 1000);
	}
	json_t *d = json_array_get(json_object_get(dead, "items"), 0);
	assert_non_null(d);
	json_t *last = json_object_get(d, "last_error");
	assert_int_equal(json_integer_value(json_object_get(last, "code")), 520);
	assert_non_null(strstr(str(last, "cause"), "control character"));
	assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), 1);
	json_decref(dead);

	/* no request ever carried an injected header */
	json_t *reqs = receiver_requests(&sub, NULL);
	assert_int_equal(json_array_size(reqs), 1);
	for (size_t i = 0; i < json_array_size(reqs); i++)
		assert_null(json_object_get(json_object_get(json_array_get(reqs, i), "headers"),
					    "x-injected"));
	json_decref(reqs);
}

/* ---- echoes ------------------------------------------------------------------------------ */

/* base64 of text into out (512 bytes). */
static void b64(const char *text, char out[512])
{
	EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)text, (int)strlen(text));
}

static const char *token_json(const char *token)
{
	static char buf[512];
	snprintf(buf, sizeof(buf),
		 "{\"default\":{\"status\":200,\"headers\":{\"Content-Type\":\"application/json\"},"
		 "\"body\":\"{\\\"access_token\\\":\\\"%s\\\",\\\"token_type\\\":\\\"Bearer\\\"}\"}}",
		 token);
	return buf;
}

/* A subscriber and two token endpoints that answer with the request they got: every
 * credential reaches them, none comes back through the API or the log. */
static void test_echoes_redacted(void **state)
{
	char id[64], ev[64], basic_b64[512], client_b64[512], plain[256];
	assert_int_equal(receiver_script(&sub, "/echo/basic", "{\"default\":{\"status\":500,"
							     "\"echo\":true}}"), 0);
	const char *paths[] = {"/echo/bearer", "/echo/key", "/echo/query", "/echo/oauth",
			       "/echo/hdr"};
	for (int i = 0; i < 5; i++)
		assert_int_equal(receiver_script(&sub, paths[i], "{\"default\":{\"status\":500,"
								 "\"echo\":true}}"), 0);
	assert_int_equal(receiver_script(&idp, "/token", token_json("ACCESS-tok-LEAK-42")), 0);
	assert_int_equal(receiver_script(&idp, "/echo-basic", "{\"default\":{\"status\":401,"
							      "\"echo\":true}}"), 0);
	assert_int_equal(receiver_script(&idp, "/echo-body", "{\"default\":{\"status\":400,"
							     "\"echo\":\"body\"}}"), 0);
	/* each subscription: its path, and its auth or headers (%s: the token endpoint) */
	static const struct {
		const char *path, *fields;
	} subs[] = {
		{"/echo/basic", "\"auth\":{\"type\":\"basic\",\"username\":\"ann\","
				"\"password\":\"b4sic-pw!\"}"},
		{"/echo/bearer", "\"auth\":{\"type\":\"bearer\",\"token\":\"bearer-t0ken-xyz\"}"},
		{"/echo/key", "\"auth\":{\"type\":\"api_key\",\"header\":\"X-Api-Key\","
			      "\"value\":\"k3y-value-777\"}"},
		{"/echo/query", "\"auth\":{\"type\":\"query\",\"param\":\"k\","
				"\"value\":\"q v&l=ue/x\"}"},
		{"/echo/oauth", "\"auth\":{\"type\":\"oauth2\",\"token_url\":\"%s/token\","
				"\"client_id\":\"c\",\"client_secret\":\"client s3cret/1\"}"},
		{"/echo/hdr", "\"headers\":{\"X-Key\":{\"value\":\"hdr-s3cret-9\",\"secret\":true},"
			      "\"Authorization\":\"Bearer plain-auth-hdr\"}"},
		/* token endpoints that echo: the Basic header, and the form with the password
		 * and the client secret */
		{"/never", "\"auth\":{\"type\":\"oauth2\",\"token_url\":\"%s/echo-basic\","
			   "\"client_id\":\"c\",\"client_secret\":\"client s3cret/1\"}"},
		{"/never", "\"auth\":{\"type\":\"oauth2\",\"grant_type\":\"password\","
			   "\"client_auth\":\"body\",\"token_url\":\"%s/echo-body\","
			   "\"client_id\":\"c\",\"client_secret\":\"client s3cret/1\","
			   "\"username\":\"u\",\"password\":\"usr-passw0rd\"}"},
	};
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++) {
		char fields[512];
		snprintf(fields, sizeof(fields), subs[i].fields, idp.url);
		e2e_create_sub(&dmn, id, "{\"name\":\"e-%zu\",\"event_types\":[\"echo.all\"],"
					 "\"endpoint\":\"%s%s\",%s,\"retry\":{\"immediate\":1,"
					 "\"max_retries\":1,\"interval\":\"100ms\","
					 "\"permanent\":[500,520]}}", i, sub.url, subs[i].path, fields);
	}
	e2e_send(&dmn, ev, "{\"event_type\":\"echo.all\",\"payload\":{\"n\":1}}");

	char ids[8][64];
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 8), 8);
	b64("ann:b4sic-pw!", basic_b64);
	char *cs = pct("client s3cret/1");
	snprintf(plain, sizeof(plain), "c:%s", cs);
	free(cs);
	b64(plain, client_b64);
	const char *b64s[] = {basic_b64, client_b64, NULL};
	int echoed_basic = 0, echoed_form = 0, echoed_idp_basic = 0;
	for (int i = 0; i < 8; i++) {
		json_t *d = e2e_wait_dead(&dmn, ids[i], 10000);
		assert_true(json_is_true(json_object_get(d, "dead")));
		char *text = json_dumps(d, 0);
		assert_no_credential("a dead delivery", text, b64s);
		const char *cause = str(json_object_get(d, "last_error"), "cause");
		/* the echoes are there, with the credentials masked */
		echoed_basic |= strstr(cause, "authorization: Basic ********") != NULL;
		echoed_form |= strstr(cause, "password=********&client_id=c&client_secret=********") != NULL;
		echoed_idp_basic |= strstr(cause, "token endpoint answered HTTP 401: POST /echo-basic") != NULL;
		free(text);
		json_decref(d);
	}
	assert_true(echoed_basic && echoed_form && echoed_idp_basic);
	/* they were sent, in clear, to those they belong to */
	json_t *r = receiver_requests(&sub, "/echo/oauth");
	assert_string_equal(str(json_object_get(json_array_get(r, 0), "headers"), "authorization"),
			    "Bearer ACCESS-tok-LEAK-42");
	json_decref(r);
	r = receiver_requests(&sub, "/echo/hdr");
	assert_string_equal(str(json_object_get(json_array_get(r, 0), "headers"), "x-key"),
			    "hdr-s3cret-9");
	json_decref(r);

	json_t *page = e2e_get(&dmn, "/v1/deliveries?limit=100");
	char *text = json_dumps(page, 0);
	assert_no_credential("GET /v1/deliveries", text, b64s);
	free(text);
	json_decref(page);
	page = e2e_get(&dmn, "/v1/subscriptions");
	text = json_dumps(page, 0);
	assert_no_credential("GET /v1/subscriptions", text, b64s);
	free(text);
	json_decref(page);

	char *buf = e2e_daemon_log(&dmn);
	assert_no_credential("daemon.log", buf, b64s);
	assert_non_null(strstr(buf, "oauth2 token request failed"));
	free(buf);
}

/* ---- secret headers ------------------------------------------------------------------- */

static void test_secret_headers_masked(void **state)
{
	char id[64], ev[64], dids[1][64], path[128];
	e2e_create_sub(&dmn, id, "{\"name\":\"sh\",\"event_types\":[\"sh.*\"],"
				 "\"endpoint\":\"%s/sh\",\"headers\":{\"X-Key\":{\"value\":"
				 "\"hdr-s3cret-9\",\"secret\":true},\"Authorization\":"
				 "\"Bearer plain-auth-hdr\",\"X-Team\":\"growth\"}}", sub.url);
	e2e_send(&dmn, ev, "{\"event_type\":\"sh.one\",\"payload\":{}}");
	assert_int_equal(receiver_wait_count(&sub, "/sh", 1, 5000), 0);
	json_t *r = receiver_requests(&sub, "/sh");
	json_t *h = json_object_get(json_array_get(r, 0), "headers");
	assert_string_equal(str(h, "x-key"), "hdr-s3cret-9");
	assert_string_equal(str(h, "authorization"), "Bearer plain-auth-hdr");
	assert_string_equal(str(h, "x-team"), "growth");
	json_decref(r);

	/* reads: the subscription, and the request of one of its deliveries */
	snprintf(path, sizeof(path), "/v1/subscriptions/%s", id);
	json_t *s = e2e_get(&dmn, "%s", path);
	json_t *sh = json_object_get(s, "headers");
	assert_string_equal(str(json_object_get(sh, "X-Key"), "value"), "********");
	assert_true(json_is_true(json_object_get(json_object_get(sh, "X-Key"), "secret")));
	assert_string_equal(str(sh, "Authorization"), "********");
	assert_string_equal(str(sh, "X-Team"), "growth");
	char *text = json_dumps(s, 0);
	assert_no_credential("GET /v1/subscriptions/{id}", text, NULL);
	free(text);
	assert_int_equal(e2e_deliveries_of(&dmn, ev, dids, 1), 1);
	json_t *req = e2e_get(&dmn, "/v1/deliveries/%s/request", dids[0]);
	text = json_dumps(req, 0);
	assert_no_credential("GET /v1/deliveries/{id}/request", text, NULL);
	int masked = 0, team = 0;
	json_t *list = json_object_get(req, "headers");
	for (size_t i = 0; i < json_array_size(list); i++) {
		json_t *e = json_array_get(list, i);
		if (strcmp(str(e, "name"), "X-Key") == 0 || strcmp(str(e, "name"), "Authorization") == 0)
			masked += strcmp(str(e, "value"), "********") == 0;
		if (strcmp(str(e, "name"), "X-Team") == 0)
			team = strcmp(str(e, "value"), "growth") == 0;
	}
	assert_int_equal(masked, 2);
	assert_true(team);
	free(text);
	json_decref(req);

	/* what a read showed, sent back with a change: the headers keep their values */
	json_t *patch = json_pack("{s:s, s:O}", "name", "sh-renamed", "headers", sh);
	text = json_dumps(patch, JSON_COMPACT);
	json_decref(api_call(&dmn, "PATCH", path, text, 200));
	free(text);
	json_decref(patch);
	json_decref(s);
	e2e_send(&dmn, ev, "{\"event_type\":\"sh.two\",\"payload\":{}}");
	assert_int_equal(receiver_wait_count(&sub, "/sh", 2, 5000), 0);
	r = receiver_requests(&sub, "/sh");
	h = json_object_get(json_array_get(r, 1), "headers");
	assert_string_equal(str(h, "x-key"), "hdr-s3cret-9");
	assert_string_equal(str(h, "authorization"), "Bearer plain-auth-hdr");
	json_decref(r);
	/* sealed at rest like the credentials: not in the SQLite file's bytes */
	if (!harness_pg_wanted()) {
		char file[600];
		snprintf(file, sizeof(file), "%s", e2e_db_path(&dmn));
		assert_false(e2e_file_contains(file, "hdr-s3cret-9"));
		snprintf(file, sizeof(file), "%s-wal", e2e_db_path(&dmn));
		assert_false(e2e_file_contains(file, "hdr-s3cret-9"));
	}
}

/* ---- moved hosts ------------------------------------------------------------------------ */

static void test_moved_host_needs_credentials(void **state)
{
	char id[64], path[128], body[1024], elsewhere[128];
	e2e_create_sub(&dmn, id, "{\"name\":\"mv\",\"event_types\":[\"mv.*\"],"
				 "\"endpoint\":\"%s/mv\",\"auth\":{\"type\":\"bearer\","
				 "\"token\":\"bearer-t0ken-xyz\"},\"headers\":{\"X-Key\":{\"value\":"
				 "\"hdr-s3cret-9\",\"secret\":true}}}", sub.url);
	snprintf(path, sizeof(path), "/v1/subscriptions/%s", id);
	/* another host (127.0.0.2 is not 127.0.0.1), the same port */
	snprintf(elsewhere, sizeof(elsewhere), "http://127.0.0.2:%d/mv", sub.port);
	snprintf(body, sizeof(body), "{\"endpoint\":\"%s\"}", elsewhere);
	expect_refused("PATCH", path, body, 422, "auth.token");
	snprintf(body, sizeof(body), "{\"endpoint\":\"%s\",\"auth\":{\"type\":\"bearer\","
				     "\"token\":\"********\"}}", elsewhere);
	expect_refused("PATCH", path, body, 422, "auth.token");
	snprintf(body, sizeof(body), "{\"endpoint\":\"%s\",\"auth\":{\"type\":\"bearer\","
				     "\"token\":\"new-token\"}}", elsewhere);
	expect_refused("PATCH", path, body, 422, "headers.X-Key");
	snprintf(body, sizeof(body), "{\"endpoint\":\"https://127.0.0.1:%d/mv\"}", sub.port);
	expect_refused("PATCH", path, body, 422, "auth.token"); /* another scheme */
	json_t *s = e2e_get(&dmn, "%s", path);
	char want[128];
	snprintf(want, sizeof(want), "%s/mv", sub.url);
	assert_string_equal(str(s, "endpoint"), want);
	json_decref(s);
	/* another path on the same host keeps them; given again, they may move */
	snprintf(body, sizeof(body), "{\"endpoint\":\"%s/mv2\",\"auth\":{\"type\":\"bearer\","
				     "\"token\":\"********\"}}", sub.url);
	json_decref(api_call(&dmn, "PATCH", path, body, 200));
	snprintf(body, sizeof(body), "{\"endpoint\":\"%s\",\"auth\":{\"type\":\"bearer\","
				     "\"token\":\"new-token\"},\"headers\":{\"X-Key\":{\"value\":"
				     "\"new-hdr\",\"secret\":true}}}", elsewhere);
	json_decref(api_call(&dmn, "PATCH", path, body, 200));

	/* OAuth2: token_url to another host needs the client secret again */
	e2e_create_sub(&dmn, id, "{\"name\":\"mv-oauth\",\"event_types\":[\"mv.*\"],"
				 "\"endpoint\":\"%s/mv\",\"auth\":{\"type\":\"oauth2\","
				 "\"token_url\":\"%s/token\",\"client_id\":\"c\","
				 "\"client_secret\":\"client s3cret/1\"}}", sub.url, idp.url);
	snprintf(path, sizeof(path), "/v1/subscriptions/%s", id);
	snprintf(body, sizeof(body), "{\"auth\":{\"type\":\"oauth2\",\"token_url\":"
				     "\"http://127.0.0.2:%d/token\",\"client_id\":\"c\","
				     "\"client_secret\":\"********\"}}", idp.port);
	expect_refused("PATCH", path, body, 422, "auth.client_secret");
	snprintf(body, sizeof(body), "{\"auth\":{\"type\":\"oauth2\",\"token_url\":"
				     "\"%s/token2\",\"client_id\":\"c\","
				     "\"client_secret\":\"********\"}}", idp.url);
	json_decref(api_call(&dmn, "PATCH", path, body, 200));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_injection_refused),
		cmocka_unit_test(test_echoes_redacted),
		cmocka_unit_test(test_secret_headers_masked),
		cmocka_unit_test(test_moved_host_needs_credentials),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
