/* test_auth.c: what a subscriber that authenticates us sees — every auth type against a
 * real local server, OAuth2 tokens (one token request for many deliveries, expiry, the
 * 401 refresh, a failing token endpoint), Standard Webhooks signatures verified here
 * (generated secrets, rotation), TLS with a CA, a certificate and a client certificate made
 * by this test with the openssl CLI (inside tls_dir; files outside it refused alike
 * whether they exist or not), and credentials that never show up in the API, in attempt
 * causes or in the log. Real daemon, real receivers: `sub` plays the subscribers,
 * `idp` a token endpoint. */
#include "e2e.h"

#include <time.h>

#include "util/clock.h"

static struct receiver sub, idp;
static struct daemon dmn;
static char *pki; /* CA, server and client certificates */

/* Every credential used below: none may appear in an API read, a cause or the log. */
static const char *const secrets[] = {
	"b4sic-pw!", "bearer-t0ken-xyz", "k3y-value-777", "q v&l=ue/ü", "q%20v%26l%3Due%2F",
	"client-s3cret-1", "client-s3cret-2", "usr-passw0rd", "client-s3cret-down", NULL,
};

static int setup(void **state)
{
	pki = harness_tmpdir("outboxd-pki");
	assert_non_null(pki);
	e2e_make_pki(pki);
	assert_int_equal(receiver_start(&sub), 0);
	assert_int_equal(receiver_start(&idp), 0);
	/* the TLS files of subscriptions must lie in tls_dir: this test's own. A try waits
	 * up to 10 s for its answer (token request included), so a busy machine never turns
	 * an answered request into one more try: the counts below are exact. */
	char tls_dir[600];
	snprintf(tls_dir, sizeof(tls_dir), "OUTBOXD_TLS_DIR=%s", pki);
	const char *env[] = {"OUTBOXD_RETRY_INTERVAL=200ms", "OUTBOXD_DELIVERY_TIMEOUT=10s", tls_dir,
			     NULL};
	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, env), 0);
	return 0;
}

static int teardown(void **state)
{
	assert_int_equal(daemon_stop(&dmn), 0);
	daemon_cleanup(&dmn);
	receiver_stop(&sub);
	receiver_stop(&idp);
	harness_rmrf(pki);
	free(pki);
	return 0;
}

static const char *header(json_t *req, const char *name)
{
	return json_string_value(json_object_get(json_object_get(req, "headers"), name));
}

static const char *str(json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

static void assert_no_secret(const char *where, const char *text)
{
	for (const char *const *s = secrets; *s; s++) {
		if (text && strstr(text, *s)) {
			fprintf(stderr, "%s shows the credential \"%s\":\n%s\n", where, *s, text);
			fail();
		}
	}
}

/* Waits until delivery of the event's only delivery is dead (FAILED, no next attempt);
 * returns it (caller frees). */
static json_t *wait_dead(const char *event_id, int timeout_ms)
{
	char ids[2][64];
	assert_int_equal(e2e_deliveries_of(&dmn, event_id, ids, 2), 1);
	json_t *d = NULL;
	for (int waited = 0; waited < timeout_ms; waited += 50) {
		json_decref(d);
		d = e2e_get(&dmn, "/v1/deliveries/%s", ids[0]);
		if (json_is_true(json_object_get(d, "dead")))
			return d;
		usleep(50 * 1000);
	}
	char *dump = json_dumps(d, JSON_INDENT(2));
	fprintf(stderr, "never dead:\n%s\n", dump);
	free(dump);
	fail();
	return NULL;
}

static json_t *wait_processed(const char *event_id)
{
	char ids[2][64];
	assert_int_equal(e2e_deliveries_of(&dmn, event_id, ids, 2), 1);
	return e2e_wait_status(&dmn, ids[0], "PROCESSED", 10000);
}

static const char *token_json(const char *token, int expires_in)
{
	static char buf[512];
	snprintf(buf, sizeof(buf),
		 "{\"status\":200,\"headers\":{\"Content-Type\":\"application/json\"},"
		 "\"body\":\"{\\\"access_token\\\":\\\"%s\\\",\\\"token_type\\\":\\\"Bearer\\\","
		 "\\\"expires_in\\\":%d}\"}", token, expires_in);
	return buf;
}

/* ---- static credentials ----------------------------------------------------------------- */

static void test_basic_bearer_api_key_query(void **state)
{
	char id[64], ev[64];
	e2e_create_sub(&dmn, id, "{\"name\":\"basic\",\"event_types\":[\"simple.auth\"],"
				 "\"endpoint\":\"%s/basic\",\"auth\":{\"type\":\"basic\","
				 "\"username\":\"ann\",\"password\":\"b4sic-pw!\"}}", sub.url);
	e2e_create_sub(&dmn, id, "{\"name\":\"bearer\",\"event_types\":[\"simple.auth\"],"
				 "\"endpoint\":\"%s/bearer\",\"auth\":{\"type\":\"bearer\","
				 "\"token\":\"bearer-t0ken-xyz\"}}", sub.url);
	e2e_create_sub(&dmn, id, "{\"name\":\"api_key\",\"event_types\":[\"simple.auth\"],"
				 "\"endpoint\":\"%s/key\",\"auth\":{\"type\":\"api_key\","
				 "\"header\":\"X-Api-Key\",\"value\":\"k3y-value-777\"}}", sub.url);
	e2e_create_sub(&dmn, id, "{\"name\":\"query\",\"event_types\":[\"simple.auth\"],"
				 "\"endpoint\":\"%s/query?v=1\",\"auth\":{\"type\":\"query\","
				 "\"param\":\"api key\",\"value\":\"q v&l=ue/ü\"}}", sub.url);
	e2e_send(&dmn, ev, "{\"event_type\":\"simple.auth\",\"payload\":{\"a\":1}}");
	const char *paths[] = {"/basic", "/bearer", "/key", "/query"};
	for (int i = 0; i < 4; i++)
		assert_int_equal(receiver_wait_count(&sub, paths[i], 1, 5000), 0);

	json_t *r = receiver_requests(&sub, "/basic");
	/* base64("ann:b4sic-pw!") */
	assert_string_equal(header(json_array_get(r, 0), "authorization"), "Basic YW5uOmI0c2ljLXB3IQ==");
	json_decref(r);
	r = receiver_requests(&sub, "/bearer");
	assert_string_equal(header(json_array_get(r, 0), "authorization"), "Bearer bearer-t0ken-xyz");
	json_decref(r);
	r = receiver_requests(&sub, "/key");
	assert_string_equal(header(json_array_get(r, 0), "x-api-key"), "k3y-value-777");
	assert_null(header(json_array_get(r, 0), "authorization"));
	json_decref(r);
	r = receiver_requests(&sub, "/query");
	/* appended to the endpoint's own query, name and value URL-encoded */
	assert_string_equal(str(json_array_get(r, 0), "path"),
			    "/query?v=1&api%20key=q%20v%26l%3Due%2F%C3%BC");
	json_decref(r);
}

static void test_query_credential_not_in_causes(void **state)
{
	char id[64], ev[64];
	/* A subscriber that echoes the request line, credential and all, in its error. */
	assert_int_equal(receiver_script(&sub, "/echo",
					 "{\"default\":{\"status\":500,\"body\":\"no route for "
					 "POST /echo?k=q%20v%26l%3Due%2F%C3%BC, value q v&l=ue/\u00fc\"}}"),
			 0);
	e2e_create_sub(&dmn, id, "{\"name\":\"echo\",\"event_types\":[\"echo.auth\"],"
				 "\"endpoint\":\"%s/echo\",\"auth\":{\"type\":\"query\","
				 "\"param\":\"k\",\"value\":\"q v&l=ue/ü\"},\"retry\":{\"immediate\":1,"
				 "\"max_retries\":1,\"interval\":\"100ms\"}}", sub.url);
	e2e_send(&dmn, ev, "{\"event_type\":\"echo.auth\",\"payload\":{}}");
	json_t *d = wait_dead(ev, 10000);
	char *text = json_dumps(d, 0);
	assert_no_secret("the delivery", text);
	/* the rest of the subscriber's answer is kept */
	const char *cause = str(json_array_get(json_object_get(d, "attempts"), 0), "cause");
	assert_string_equal(cause, "no route for POST /echo?k=********, value ********");
	free(text);
	json_decref(d);
	/* and the error search does not find it either */
	d = e2e_get(&dmn, "/v1/deliveries?q=l%%3Due");
	assert_int_equal(json_array_size(json_object_get(d, "items")), 0);
	json_decref(d);
}

/* ---- OAuth2 ------------------------------------------------------------------------------ */

static void test_oauth2_one_token_for_many(void **state)
{
	char id[64], script[1024];
	/* A slow token endpoint: every delivery is waiting for the one token request. */
	snprintf(script, sizeof(script), "{\"default\":%s}", token_json("tok-A", 3600));
	json_t *s = json_loads(script, 0, NULL);
	json_object_set_new(json_object_get(s, "default"), "delay_ms", json_integer(300));
	char *text = json_dumps(s, JSON_COMPACT);
	assert_int_equal(receiver_script(&idp, "/token", text), 0);
	free(text);
	json_decref(s);

	e2e_create_sub(&dmn, id, "{\"name\":\"oauth-many\",\"event_types\":[\"oauth.many\"],"
				 "\"endpoint\":\"%s/many\",\"auth\":{\"type\":\"oauth2\","
				 "\"token_url\":\"%s/token\",\"client_id\":\"cid-1\","
				 "\"client_secret\":\"client-s3cret-1\",\"scope\":\"events write\","
				 "\"audience\":\"https://hooks.example\"}}", sub.url, idp.url);
	enum { N = 25 };
	char batch[N * 80 + 32];
	int o = snprintf(batch, sizeof(batch), "{\"events\":[");
	for (int i = 0; i < N; i++)
		o += snprintf(batch + o, sizeof(batch) - (size_t)o,
			      "%s{\"event_type\":\"oauth.many\",\"payload\":{\"i\":%d}}",
			      i ? "," : "", i);
	snprintf(batch + o, sizeof(batch) - (size_t)o, "]}");
	json_decref(api_call(&dmn, "POST", "/v1/events", batch, 202));

	assert_int_equal(receiver_wait_count(&sub, "/many", N, 10000), 0);
	assert_int_equal(receiver_count(&idp, "/token"), 1);
	json_t *reqs = receiver_requests(&sub, "/many");
	for (size_t i = 0; i < N; i++)
		assert_string_equal(header(json_array_get(reqs, i), "authorization"), "Bearer tok-A");
	json_decref(reqs);

	/* The token request: a form POST, the client in HTTP Basic (the default). */
	reqs = receiver_requests(&idp, "/token");
	json_t *t = json_array_get(reqs, 0);
	assert_string_equal(str(t, "method"), "POST");
	assert_string_equal(header(t, "content-type"), "application/x-www-form-urlencoded");
	/* base64("cid-1:client-s3cret-1") */
	assert_string_equal(header(t, "authorization"), "Basic Y2lkLTE6Y2xpZW50LXMzY3JldC0x");
	assert_string_equal(str(t, "body"), "grant_type=client_credentials&scope=events%20write"
					    "&audience=https%3A%2F%2Fhooks.example");
	json_decref(reqs);

	/* Later deliveries reuse the cached token. */
	char ev[64];
	e2e_send(&dmn, ev, "{\"event_type\":\"oauth.many\",\"payload\":{\"late\":true}}");
	assert_int_equal(receiver_wait_count(&sub, "/many", N + 1, 5000), 0);
	assert_int_equal(receiver_count(&idp, "/token"), 1);
}

/* A manual replay goes through the same delivery pipeline as every other try,
 * authentication included: a delivery with basic auth and one with OAuth2 fail into the
 * dead-letter queue; once the subscriber answers again, the replay's requests carry the
 * password and a token fetched for them. */
static void test_replay_authenticates(void **state)
{
	char basic[64], oauth[64], ev[64], ids[2][64], body[256], script[1024];
	(void)state;
	snprintf(script, sizeof(script), "{\"default\":%s}", token_json("tok-replay", 3600));
	assert_int_equal(receiver_script(&idp, "/token-replay", script), 0);
	assert_int_equal(receiver_script(&sub, "/replay-basic", "{\"default\":{\"status\":503}}"), 0);
	assert_int_equal(receiver_script(&sub, "/replay-oauth", "{\"default\":{\"status\":503}}"), 0);
	e2e_create_sub(&dmn, basic, "{\"name\":\"replay-basic\",\"event_types\":[\"replay.auth\"],"
				    "\"endpoint\":\"%s/replay-basic\",\"auth\":{\"type\":\"basic\","
				    "\"username\":\"ann\",\"password\":\"b4sic-pw!\"},"
				    "\"retry\":{\"immediate\":1,\"max_retries\":1}}", sub.url);
	e2e_create_sub(&dmn, oauth, "{\"name\":\"replay-oauth\",\"event_types\":[\"replay.auth\"],"
				    "\"endpoint\":\"%s/replay-oauth\",\"auth\":{\"type\":\"oauth2\","
				    "\"token_url\":\"%s/token-replay\",\"client_id\":\"cid-replay\","
				    "\"client_secret\":\"client-s3cret-1\"},"
				    "\"retry\":{\"immediate\":1,\"max_retries\":1}}", sub.url, idp.url);
	e2e_send(&dmn, ev, "{\"event_type\":\"replay.auth\",\"payload\":{\"r\":1}}");
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 2), 2);
	json_decref(e2e_wait_dead(&dmn, ids[0], 15000));
	json_decref(e2e_wait_dead(&dmn, ids[1], 15000));
	assert_int_equal(receiver_count(&sub, "/replay-basic"), 2); /* immediate + scheduled */
	assert_int_equal(receiver_count(&sub, "/replay-oauth"), 2);

	/* the subscriber is back; the operator replays the event */
	assert_int_equal(receiver_script(&sub, "/replay-basic", "{\"default\":{\"status\":200}}"), 0);
	assert_int_equal(receiver_script(&sub, "/replay-oauth", "{\"default\":{\"status\":200}}"), 0);
	snprintf(body, sizeof(body), "{\"event_ids\":[\"%s\"]}", ev);
	json_t *r = api_call(&dmn, "POST", "/v1/dlq/replay", body, 200);
	assert_int_equal(json_integer_value(json_object_get(r, "replayed")), 2);
	json_decref(r);
	for (int i = 0; i < 2; i++) {
		json_t *d = e2e_wait_status(&dmn, ids[i], "PROCESSED", 10000);
		json_t *attempts = json_object_get(d, "attempts");
		assert_int_equal(json_array_size(attempts), 3);
		json_t *last = json_array_get(attempts, 2);
		assert_string_equal(str(last, "kind"), "manual");
		assert_int_equal(json_integer_value(json_object_get(last, "code")), 200);
		json_decref(d);
	}
	json_t *reqs = receiver_requests(&sub, "/replay-basic");
	assert_int_equal(json_array_size(reqs), 3);
	for (size_t i = 0; i < 3; i++) /* base64("ann:b4sic-pw!"), the replay's too */
		assert_string_equal(header(json_array_get(reqs, i), "authorization"),
				    "Basic YW5uOmI0c2ljLXB3IQ==");
	json_decref(reqs);
	reqs = receiver_requests(&sub, "/replay-oauth");
	assert_int_equal(json_array_size(reqs), 3);
	for (size_t i = 0; i < 3; i++)
		assert_string_equal(header(json_array_get(reqs, i), "authorization"),
				    "Bearer tok-replay");
	json_decref(reqs);
	assert_true(receiver_count(&idp, "/token-replay") >= 1);
}

static void test_oauth2_expiry_refresh(void **state)
{
	char id[64], ev[64], script[1024];
	snprintf(script, sizeof(script), "[%s,", token_json("tok-short", 1));
	snprintf(script + strlen(script), sizeof(script) - strlen(script), "%s]",
		 token_json("tok-next", 3600));
	assert_int_equal(receiver_script(&idp, "/token2", script), 0);
	/* password grant, client credentials in the form body */
	e2e_create_sub(&dmn, id, "{\"name\":\"oauth-expiry\",\"event_types\":[\"oauth.expiry\"],"
				 "\"endpoint\":\"%s/expiry\",\"auth\":{\"type\":\"oauth2\","
				 "\"grant_type\":\"password\",\"token_url\":\"%s/token2\","
				 "\"client_id\":\"cid-2\",\"client_secret\":\"client-s3cret-2\","
				 "\"username\":\"ann\",\"password\":\"usr-passw0rd\","
				 "\"client_auth\":\"body\"}}", sub.url, idp.url);
	e2e_send(&dmn, ev, "{\"event_type\":\"oauth.expiry\",\"payload\":1}");
	assert_int_equal(receiver_wait_count(&sub, "/expiry", 1, 5000), 0);
	/* expires_in 1: the token is gone 1 s after outboxd got it, which was before the
	 * request that carried it arrived (the receiver's clock is this machine's) */
	json_t *first = receiver_requests(&sub, "/expiry");
	int64_t used_ms = json_integer_value(json_object_get(json_array_get(first, 0),
							     "received_at_us")) / 1000;
	json_decref(first);
	assert_true(used_ms > 0);
	while (clock_now_ms() <= used_ms + 1000 + 1)
		usleep(20 * 1000);
	e2e_send(&dmn, ev, "{\"event_type\":\"oauth.expiry\",\"payload\":2}");
	assert_int_equal(receiver_wait_count(&sub, "/expiry", 2, 5000), 0);

	assert_int_equal(receiver_count(&idp, "/token2"), 2);
	json_t *reqs = receiver_requests(&sub, "/expiry");
	assert_string_equal(header(json_array_get(reqs, 0), "authorization"), "Bearer tok-short");
	assert_string_equal(header(json_array_get(reqs, 1), "authorization"), "Bearer tok-next");
	json_decref(reqs);
	reqs = receiver_requests(&idp, "/token2");
	json_t *t = json_array_get(reqs, 0);
	assert_null(header(t, "authorization"));
	assert_string_equal(str(t, "body"), "grant_type=password&username=ann&password=usr-passw0rd"
					    "&client_id=cid-2&client_secret=client-s3cret-2");
	json_decref(reqs);
}

static void test_oauth2_refresh_on_401(void **state)
{
	char id[64], ev[64], script[1024];
	snprintf(script, sizeof(script), "[%s,", token_json("tok-revoked", 3600));
	snprintf(script + strlen(script), sizeof(script) - strlen(script), "%s]",
		 token_json("tok-fresh", 3600));
	assert_int_equal(receiver_script(&idp, "/token3", script), 0);
	assert_int_equal(receiver_script(&sub, "/r401",
					 "[{\"status\":401,\"body\":\"token revoked\"},{\"status\":200}]"),
			 0);
	e2e_create_sub(&dmn, id, "{\"name\":\"oauth-401\",\"event_types\":[\"oauth.401\"],"
				 "\"endpoint\":\"%s/r401\",\"auth\":{\"type\":\"oauth2\","
				 "\"token_url\":\"%s/token3\",\"client_id\":\"c\","
				 "\"client_secret\":\"client-s3cret-1\"}}", sub.url, idp.url);
	e2e_send(&dmn, ev, "{\"event_type\":\"oauth.401\",\"payload\":{}}");
	json_t *d = wait_processed(ev);
	/* One attempt: the 401 got one new token and one resend, inside that attempt. */
	json_t *attempts = json_object_get(d, "attempts");
	assert_int_equal(json_array_size(attempts), 1);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(attempts, 0), "code")), 200);
	assert_non_null(strstr(str(json_array_get(attempts, 0), "message"), "new oauth2 token"));
	json_decref(d);
	assert_int_equal(receiver_count(&idp, "/token3"), 2);
	json_t *reqs = receiver_requests(&sub, "/r401");
	assert_int_equal(json_array_size(reqs), 2);
	assert_string_equal(header(json_array_get(reqs, 0), "authorization"), "Bearer tok-revoked");
	assert_string_equal(header(json_array_get(reqs, 1), "authorization"), "Bearer tok-fresh");
	json_decref(reqs);

	/* A subscriber that refuses every token: one refresh per attempt, no loop. */
	assert_int_equal(receiver_script(&idp, "/token4",
					 "{\"default\":{\"status\":200,\"body\":\"{\\\"access_token\\\":"
					 "\\\"tok-any\\\",\\\"expires_in\\\":3600}\"}}"), 0);
	assert_int_equal(receiver_script(&sub, "/never", "{\"default\":{\"status\":401}}"), 0);
	e2e_create_sub(&dmn, id, "{\"name\":\"oauth-never\",\"event_types\":[\"oauth.never\"],"
				 "\"endpoint\":\"%s/never\",\"auth\":{\"type\":\"oauth2\","
				 "\"token_url\":\"%s/token4\",\"client_id\":\"c\","
				 "\"client_secret\":\"client-s3cret-1\"},\"retry\":{\"immediate\":1,"
				 "\"max_retries\":1,\"interval\":\"100ms\"}}", sub.url, idp.url);
	e2e_send(&dmn, ev, "{\"event_type\":\"oauth.never\",\"payload\":{}}");
	d = wait_dead(ev, 10000);
	attempts = json_object_get(d, "attempts");
	assert_int_equal(json_array_size(attempts), 2);
	for (size_t i = 0; i < 2; i++)
		assert_int_equal(json_integer_value(json_object_get(json_array_get(attempts, i), "code")),
				 401);
	json_decref(d);
	assert_int_equal(receiver_count(&sub, "/never"), 4);  /* 2 attempts x (send + resend) */
	assert_int_equal(receiver_count(&idp, "/token4"), 3); /* first token + one per 401 */
}

static void test_oauth2_token_endpoint_failing(void **state)
{
	char id[64], ev[64];
	int port = harness_free_port(); /* nothing listens there */
	e2e_create_sub(&dmn, id, "{\"name\":\"oauth-down\",\"event_types\":[\"oauth.down\"],"
				 "\"endpoint\":\"%s/down\",\"auth\":{\"type\":\"oauth2\","
				 "\"token_url\":\"http://127.0.0.1:%d/oauth/token\",\"client_id\":\"c\","
				 "\"client_secret\":\"client-s3cret-down\"},\"retry\":{\"immediate\":2,"
				 "\"max_retries\":1,\"interval\":\"100ms\"}}", sub.url, port);
	e2e_send(&dmn, ev, "{\"event_type\":\"oauth.down\",\"payload\":{}}");
	json_t *d = wait_dead(ev, 10000);
	json_t *attempts = json_object_get(d, "attempts");
	assert_int_equal(json_array_size(attempts), 3);
	for (size_t i = 0; i < 3; i++) {
		json_t *a = json_array_get(attempts, i);
		assert_int_equal(json_integer_value(json_object_get(a, "code")), 520);
		assert_string_equal(str(a, "message"), "oauth2 token request failed");
		assert_non_null(strstr(str(a, "cause"), "/oauth/token: connection refused"));
	}
	char *text = json_dumps(d, 0);
	assert_no_secret("the delivery", text);
	free(text);
	json_decref(d);
	assert_int_equal(receiver_count(&sub, "/down"), 0); /* nothing sent without a token */

	/* An endpoint that refuses us: its RFC 6749 error is in the cause. */
	assert_int_equal(receiver_script(&idp, "/token-bad",
					 "{\"default\":{\"status\":401,\"body\":\"{\\\"error\\\":"
					 "\\\"invalid_client\\\",\\\"error_description\\\":"
					 "\\\"unknown client\\\"}\"}}"), 0);
	/* ... and one too slow: the attempt's timeout bounds the token request. */
	assert_int_equal(receiver_script(&idp, "/token-slow",
					 "{\"default\":{\"status\":200,\"delay_ms\":3000}}"), 0);
	const char *names[] = {"bad", "slow"};
	const char *want[] = {"token endpoint answered HTTP 401: invalid_client (unknown client)",
			      "timeout"};
	for (int i = 0; i < 2; i++) {
		e2e_create_sub(&dmn, id, "{\"name\":\"oauth-%s\",\"event_types\":[\"oauth.%s\"],"
					 "\"endpoint\":\"%s/x\",\"timeout\":\"300ms\",\"auth\":{\"type\":"
					 "\"oauth2\",\"token_url\":\"%s/token-%s\",\"client_id\":\"c\","
					 "\"client_secret\":\"client-s3cret-down\"},\"retry\":{"
					 "\"immediate\":1,\"max_retries\":1,\"interval\":\"100ms\","
					 "\"timeout\":\"300ms\"}}", names[i], names[i], sub.url, idp.url,
			       names[i]);
		char body[128];
		snprintf(body, sizeof(body), "{\"event_type\":\"oauth.%s\",\"payload\":{}}", names[i]);
		e2e_send(&dmn, ev, body);
		d = wait_dead(ev, 10000);
		json_t *last = json_object_get(d, "last_error");
		assert_int_equal(json_integer_value(json_object_get(last, "code")), 520);
		assert_string_equal(str(last, "message"), "oauth2 token request failed");
		if (!strstr(str(last, "cause"), want[i]))
			fprintf(stderr, "cause: %s\n", str(last, "cause"));
		assert_non_null(strstr(str(last, "cause"), want[i]));
		json_decref(d);
	}
}

/* ---- signatures ------------------------------------------------------------------------- */

/* The i-th request on path, returned to the caller (json_decref it). */
static json_t *nth_request(const char *path, size_t i)
{
	json_t *reqs = receiver_requests(&sub, path);
	json_t *r = json_incref(json_array_get(reqs, i));
	assert_non_null(r);
	json_decref(reqs);
	return r;
}

/* Which of the signatures of request r (0 = the first) secret made; fails the test when
 * none. *count gets how many the header holds. */
static int signed_as(json_t *r, const char *secret, int *count)
{
	struct standard_webhooks_match m;
	e2e_assert_signed(r, secret, &m);
	*count = m.count;
	return m.index;
}

static void test_generated_secret_and_rotation(void **state)
{
	char first[64], second[64], id[64], ev[64], path[128];
	json_t *r;
	int count;

	/* "generate": the secret is shown in this response, and never again. */
	char req[512];
	snprintf(req, sizeof(req), "{\"name\":\"signed\",\"event_types\":[\"signed.*\"],"
				   "\"endpoint\":\"%s/signed\",\"secret\":\"generate\"}", sub.url);
	json_t *created = api_call(&dmn, "POST", "/v1/subscriptions", req, 201);
	snprintf(first, sizeof(first), "%s", str(created, "secret"));
	snprintf(id, sizeof(id), "%s", str(created, "id"));
	json_decref(created);
	assert_int_equal(strlen(first), strlen("whsec_") + 44); /* base64 of 32 bytes */
	assert_memory_equal(first, "whsec_", 6);
	json_t *s = e2e_get(&dmn, "/v1/subscriptions/%s", id);
	assert_string_equal(str(s, "secret"), "whsec_********");
	assert_null(json_object_get(s, "previous_secret"));
	json_decref(s);

	e2e_send(&dmn, ev, "{\"event_type\":\"signed.one\",\"payload\":{\"n\":1}}");
	assert_int_equal(receiver_wait_count(&sub, "/signed", 1, 5000), 0);
	r = nth_request("/signed", 0);
	assert_string_equal(header(r, "webhook-id"), ev);
	assert_int_equal(signed_as(r, first, &count), 0);
	assert_int_equal(count, 1);
	json_decref(r);

	/* Rotation: a new generated secret; the old one signs too during the grace period. */
	snprintf(path, sizeof(path), "/v1/subscriptions/%s", id);
	json_t *patched = api_call(&dmn, "PATCH", path, "{\"secret\":\"generate\"}", 200);
	snprintf(second, sizeof(second), "%s", str(patched, "secret"));
	assert_string_not_equal(second, first);
	assert_memory_equal(second, "whsec_", 6);
	assert_string_equal(str(patched, "previous_secret"), "whsec_********");
	/* default grace: 24 hours from now */
	int64_t now = (int64_t)time(NULL);
	struct tm tm = {0};
	assert_non_null(strptime(str(patched, "previous_secret_expires_at"), "%Y-%m-%dT%H:%M:%S", &tm));
	int64_t until = (int64_t)timegm(&tm);
	assert_true(until >= now + 86400 - 60 && until <= now + 86400 + 60);
	json_decref(patched);
	s = e2e_get(&dmn, "%s", path);
	assert_string_equal(str(s, "secret"), "whsec_********");
	char *view = json_dumps(s, 0);
	assert_null(strstr(view, first + 6));
	assert_null(strstr(view, second + 6));
	free(view);
	json_decref(s);

	e2e_send(&dmn, ev, "{\"event_type\":\"signed.two\",\"payload\":{\"n\":2}}");
	assert_int_equal(receiver_wait_count(&sub, "/signed", 2, 5000), 0);
	/* the new secret's signature first, then the old one's */
	r = nth_request("/signed", 1);
	assert_int_equal(signed_as(r, second, &count), 0);
	assert_int_equal(signed_as(r, first, &count), 1);
	assert_int_equal(count, 2);
	json_decref(r);

	/* Ending the grace period early: only the new signature. */
	json_decref(api_call(&dmn, "PATCH", path, "{\"previous_secret\":null}", 200));
	e2e_send(&dmn, ev, "{\"event_type\":\"signed.three\",\"payload\":{\"n\":3}}");
	assert_int_equal(receiver_wait_count(&sub, "/signed", 3, 5000), 0);
	r = nth_request("/signed", 2);
	assert_int_equal(signed_as(r, second, &count), 0);
	assert_int_equal(count, 1);
	json_decref(r);
}

/* ---- TLS ---------------------------------------------------------------------------------- */

static void pki_path(char *out, const char *file)
{
	snprintf(out, 512, "%s/%s", pki, file);
}

static void test_tls_untrusted_then_trusted(void **state)
{
	struct receiver tls;
	char cert[512], key[512], ca[512], id[64], ev[64];
	pki_path(cert, "server.pem");
	pki_path(key, "server.key");
	pki_path(ca, "ca.pem");
	assert_int_equal(receiver_start_tls(&tls, cert, key, NULL), 0);

	/* Verification is on by default: our own CA is not trusted by the system. */
	e2e_create_sub(&dmn, id, "{\"name\":\"tls-untrusted\",\"event_types\":[\"tls.untrusted\"],"
				 "\"endpoint\":\"%s/t\",\"retry\":{\"immediate\":1,\"max_retries\":1,"
				 "\"interval\":\"100ms\"}}", tls.url);
	e2e_send(&dmn, ev, "{\"event_type\":\"tls.untrusted\",\"payload\":{}}");
	json_t *d = wait_dead(ev, 10000);
	assert_string_equal(str(d, "status"), "FAILED");
	json_t *attempts = json_object_get(d, "attempts");
	assert_int_equal(json_array_size(attempts), 2);
	for (size_t i = 0; i < 2; i++) {
		json_t *a = json_array_get(attempts, i);
		assert_int_equal(json_integer_value(json_object_get(a, "code")), 525);
		assert_string_equal(str(a, "message"), "tls handshake failed");
		assert_non_null(strstr(str(a, "cause"), "certificate")); /* curl's own text */
	}
	json_decref(d);
	assert_int_equal(receiver_count(&tls, NULL), 0);

	/* With the CA named, over the IP and over the DNS name of the certificate. */
	e2e_create_sub(&dmn, id, "{\"name\":\"tls-trusted\",\"event_types\":[\"tls.trusted\"],"
				 "\"endpoint\":\"%s/t\",\"tls\":{\"ca_file\":\"%s\"}}", tls.url, ca);
	e2e_create_sub(&dmn, id, "{\"name\":\"tls-localhost\",\"event_types\":[\"tls.trusted\"],"
				 "\"endpoint\":\"https://localhost:%d/l\",\"tls\":{\"ca_file\":\"%s\"}}",
		       tls.port, ca);
	e2e_send(&dmn, ev, "{\"event_type\":\"tls.trusted\",\"payload\":{\"ok\":1}}");
	assert_int_equal(receiver_wait_count(&tls, "/t", 1, 5000), 0);
	assert_int_equal(receiver_wait_count(&tls, "/l", 1, 5000), 0);
	json_t *reqs = receiver_requests(&tls, "/t");
	assert_true(json_is_true(json_object_get(json_array_get(reqs, 0), "tls")));
	json_decref(reqs);

	/* A CA file outboxd cannot read, or one outside tls_dir, is refused when the
	 * subscription is made — with one answer whether or not the file exists, so the API
	 * tells nothing of paths outside tls_dir. */
	char outside[4][600], first[512] = "";
	snprintf(outside[0], 600, "/nonexistent/ca.pem");
	snprintf(outside[1], 600, "/etc/passwd");          /* exists, readable, outside */
	snprintf(outside[2], 600, "%s/../../etc/passwd", pki);
	snprintf(outside[3], 600, "%s/passwd-link.pem", pki);
	assert_int_equal(symlink("/etc/passwd", outside[3]), 0);
	for (int i = 0; i < 4; i++) {
		char body[1024];
		snprintf(body, sizeof(body), "{\"name\":\"tls-bad\",\"event_types\":[\"x\"],"
					     "\"endpoint\":\"https://127.0.0.1:1/\",\"tls\":{"
					     "\"ca_file\":\"%s\"}}", outside[i]);
		json_t *err = api_call(&dmn, "POST", "/v1/subscriptions", body, 422);
		json_t *e = json_object_get(err, "error");
		assert_string_equal(str(e, "field"), "tls.ca_file");
		if (!first[0])
			snprintf(first, sizeof(first), "%s", str(e, "message"));
		assert_string_equal(str(e, "message"), first);
		assert_null(strstr(first, "passwd"));
		json_decref(err);
	}
	unlink(outside[3]);

	/* A file that leaves tls_dir after the subscription was made (here: replaced by a
	 * link to a file outside) is not used: its attempts end for good, nothing sent. */
	char moved[600];
	snprintf(moved, sizeof(moved), "%s/moved-ca.pem", pki);
	e2e_sh("cp %s %s", ca, moved);
	e2e_create_sub(&dmn, id, "{\"name\":\"tls-moved\",\"event_types\":[\"tls.moved\"],"
				 "\"endpoint\":\"%s/moved\",\"tls\":{\"ca_file\":\"%s\"}}", tls.url,
		       moved);
	unlink(moved);
	assert_int_equal(symlink("/etc/passwd", moved), 0);
	e2e_send(&dmn, ev, "{\"event_type\":\"tls.moved\",\"payload\":{}}");
	d = wait_dead(ev, 10000);
	json_t *last = json_object_get(d, "last_error");
	assert_int_equal(json_integer_value(json_object_get(last, "code")), 520);
	assert_non_null(strstr(str(last, "cause"), "tls_dir"));
	assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), 1);
	json_decref(d);
	assert_int_equal(receiver_count(&tls, "/moved"), 0);
	unlink(moved);
	receiver_stop(&tls);
}

static void test_mtls_accepted_and_refused(void **state)
{
	struct receiver tls;
	char cert[512], key[512], ca[512], ccert[512], ckey[512], scert[512], skey[512];
	char id[64], ev[64];
	pki_path(cert, "server.pem");
	pki_path(key, "server.key");
	pki_path(ca, "ca.pem");
	pki_path(ccert, "client.pem");
	pki_path(ckey, "client.key");
	pki_path(scert, "stranger.pem");
	pki_path(skey, "stranger.key");
	assert_int_equal(receiver_start_tls(&tls, cert, key, ca), 0);

	e2e_create_sub(&dmn, id, "{\"name\":\"mtls-ok\",\"event_types\":[\"mtls.ok\"],"
				 "\"endpoint\":\"%s/m\",\"tls\":{\"ca_file\":\"%s\","
				 "\"client_cert\":\"%s\",\"client_key\":\"%s\"}}", tls.url, ca, ccert, ckey);
	e2e_send(&dmn, ev, "{\"event_type\":\"mtls.ok\",\"payload\":{}}");
	json_decref(wait_processed(ev));
	json_t *reqs = receiver_requests(&tls, "/m");
	assert_int_equal(json_array_size(reqs), 1);
	assert_string_equal(str(json_array_get(reqs, 0), "client_cert"), "CN=outboxd-client");
	json_decref(reqs);

	/* No client certificate, or one the subscriber does not trust: refused in the
	 * handshake, so 525 with the TLS alert as cause. */
	const char *names[] = {"none", "stranger"};
	for (int i = 0; i < 2; i++) {
		char tls_obj[1700];
		if (i == 0)
			snprintf(tls_obj, sizeof(tls_obj), "{\"ca_file\":\"%s\"}", ca);
		else
			snprintf(tls_obj, sizeof(tls_obj), "{\"ca_file\":\"%s\",\"client_cert\":\"%s\","
							  "\"client_key\":\"%s\"}", ca, scert, skey);
		e2e_create_sub(&dmn, id, "{\"name\":\"mtls-%s\",\"event_types\":[\"mtls.%s\"],"
					 "\"endpoint\":\"%s/r\",\"tls\":%s,\"retry\":{\"immediate\":1,"
					 "\"max_retries\":1,\"interval\":\"100ms\"}}",
			       names[i], names[i], tls.url, tls_obj);
		char body[128];
		snprintf(body, sizeof(body), "{\"event_type\":\"mtls.%s\",\"payload\":{}}", names[i]);
		e2e_send(&dmn, ev, body);
		json_t *d = wait_dead(ev, 10000);
		json_t *last = json_object_get(d, "last_error");
		assert_int_equal(json_integer_value(json_object_get(last, "code")), 525);
		assert_non_null(strstr(str(last, "cause"), "alert"));
		json_decref(d);
	}
	assert_int_equal(receiver_count(&tls, "/r"), 0);
	receiver_stop(&tls);
}

/* ---- at rest ------------------------------------------------------------------------------ */

static void test_credentials_never_shown(void **state)
{
	json_t *list = e2e_get(&dmn, "/v1/subscriptions");
	char *text = json_dumps(list, 0);
	assert_no_secret("GET /v1/subscriptions", text);
	assert_non_null(strstr(text, "\"client_secret\": \"********\""));
	free(text);
	json_decref(list);
	list = e2e_get(&dmn, "/v1/deliveries?limit=1000");
	text = json_dumps(list, 0);
	assert_no_secret("GET /v1/deliveries", text);
	free(text);
	json_decref(list);

	char *buf = e2e_daemon_log(&dmn);
	assert_no_secret("daemon.log", buf);
	/* the token endpoint failures were logged, once per outage, without credentials */
	assert_non_null(strstr(buf, "oauth2 token request failed"));
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_basic_bearer_api_key_query),
		cmocka_unit_test(test_query_credential_not_in_causes),
		cmocka_unit_test(test_oauth2_one_token_for_many),
		cmocka_unit_test(test_replay_authenticates),
		cmocka_unit_test(test_oauth2_expiry_refresh),
		cmocka_unit_test(test_oauth2_refresh_on_401),
		cmocka_unit_test(test_oauth2_token_endpoint_failing),
		cmocka_unit_test(test_generated_secret_and_rotation),
		cmocka_unit_test(test_tls_untrusted_then_trusted),
		cmocka_unit_test(test_mtls_accepted_and_refused),
		cmocka_unit_test(test_credentials_never_shown),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
