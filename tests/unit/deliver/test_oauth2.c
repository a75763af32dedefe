/* test_oauth2.c: the OAuth2 token cache (one fetch for many, refresh ahead, 401
 * invalidation, failures held briefly), the expiry margins, the token request body and
 * Basic header, and reading token responses. Pure logic: no sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "deliver/oauth2.h"

static char *dup(const char *s)
{
	char *p = strdup(s);
	assert_non_null(p);
	return p;
}

static void test_one_fetch_for_many(void **state)
{
	struct oauth2_cache c = {0};

	/* The first delivery fetches; every other one waits for that fetch. */
	assert_int_equal(oauth2_cache_next(&c, 1000), OAUTH2_FETCH);
	for (int i = 0; i < 100; i++)
		assert_int_equal(oauth2_cache_next(&c, 1000 + i), OAUTH2_WAIT);
	uint64_t gen = oauth2_cache_store(&c, dup("tok-1"), 3600, 1200);
	assert_int_equal(gen, 1);
	for (int i = 0; i < 100; i++)
		assert_int_equal(oauth2_cache_next(&c, 1300 + i), OAUTH2_USE);
	assert_string_equal(c.token, "tok-1");
	assert_int_equal(c.generation, 1);
	oauth2_cache_clear(&c);
	assert_null(c.token);
}

static void test_margins(void **state)
{
	/* 10% of short lifetimes, at most 30 s of long ones. */
	assert_int_equal(oauth2_refresh_at(0, 2), 1800);
	assert_int_equal(oauth2_refresh_at(0, 60), 54000);
	assert_int_equal(oauth2_refresh_at(0, 300), 270000);
	assert_int_equal(oauth2_refresh_at(0, 3600), 3570000);
	assert_int_equal(oauth2_refresh_at(5000, 86400), 5000 + 86370000);
	/* no expires_in: the default lifetime, with its margin */
	assert_int_equal(oauth2_refresh_at(0, -1), OAUTH2_DEFAULT_LIFETIME_S * 1000 - 30000);
	/* 0: not reused at all */
	assert_int_equal(oauth2_refresh_at(7, 0), 7);
	/* absurd lifetimes do not overflow */
	assert_true(oauth2_refresh_at(0, INT64_MAX / 1000) > 0);
}

static void test_refresh_ahead_and_expiry(void **state)
{
	struct oauth2_cache c = {0};

	assert_int_equal(oauth2_cache_next(&c, 0), OAUTH2_FETCH);
	oauth2_cache_store(&c, dup("old"), 10, 0); /* refresh at 9 s, expires at 10 s */
	assert_int_equal(oauth2_cache_next(&c, 8999), OAUTH2_USE);
	/* Inside the margin: one delivery uses the token and starts the refresh; the rest
	 * keep using the old token meanwhile, nobody waits. */
	assert_int_equal(oauth2_cache_next(&c, 9000), OAUTH2_USE_AND_FETCH);
	assert_int_equal(oauth2_cache_next(&c, 9500), OAUTH2_USE);
	assert_int_equal(oauth2_cache_next(&c, 9999), OAUTH2_USE);
	/* Past the real expiry the old token is not sent: wait for the refresh. */
	assert_int_equal(oauth2_cache_next(&c, 10000), OAUTH2_WAIT);
	assert_int_equal(oauth2_cache_store(&c, dup("new"), 10, 10100), 2);
	assert_int_equal(oauth2_cache_next(&c, 10100), OAUTH2_USE);
	assert_string_equal(c.token, "new");

	/* Expired with no fetch running: a plain fetch. */
	assert_int_equal(oauth2_cache_next(&c, 30000), OAUTH2_FETCH);
	oauth2_cache_clear(&c);
}

static void test_zero_lifetime_not_reused(void **state)
{
	struct oauth2_cache c = {0};

	assert_int_equal(oauth2_cache_next(&c, 0), OAUTH2_FETCH);
	oauth2_cache_store(&c, dup("once"), 0, 50);
	/* The dispatcher hands the token to the waiters directly; the next delivery fetches. */
	assert_int_equal(oauth2_cache_next(&c, 50), OAUTH2_FETCH);
	oauth2_cache_clear(&c);
}

static void test_invalidate_once_per_token(void **state)
{
	struct oauth2_cache c = {0};

	assert_int_equal(oauth2_cache_next(&c, 0), OAUTH2_FETCH);
	uint64_t g1 = oauth2_cache_store(&c, dup("a"), 3600, 0);
	/* Many deliveries got 401 with token a: only the first drops it. */
	assert_int_equal(oauth2_cache_invalidate(&c, g1), 1);
	assert_int_equal(oauth2_cache_invalidate(&c, g1), 0);
	assert_null(c.token);
	assert_int_equal(oauth2_cache_next(&c, 10), OAUTH2_FETCH);
	assert_int_equal(oauth2_cache_next(&c, 10), OAUTH2_WAIT);
	uint64_t g2 = oauth2_cache_store(&c, dup("b"), 3600, 20);
	/* A late 401 for token a must not drop token b. */
	assert_int_equal(oauth2_cache_invalidate(&c, g1), 0);
	assert_string_equal(c.token, "b");
	assert_int_equal(oauth2_cache_invalidate(&c, g2), 1);
	oauth2_cache_clear(&c);
}

static void test_failure_is_held_briefly(void **state)
{
	struct oauth2_cache c = {0};

	assert_int_equal(oauth2_cache_next(&c, 0), OAUTH2_FETCH);
	oauth2_cache_fail(&c, "token endpoint answered HTTP 503", 100);
	assert_int_equal(c.fetching, 0);
	assert_int_equal(oauth2_cache_next(&c, 100), OAUTH2_FAILED);
	assert_string_equal(c.failure, "token endpoint answered HTTP 503");
	assert_int_equal(oauth2_cache_next(&c, 100 + OAUTH2_FAILURE_HOLD_MS - 1), OAUTH2_FAILED);
	/* After the hold, one delivery tries again. */
	assert_int_equal(oauth2_cache_next(&c, 100 + OAUTH2_FAILURE_HOLD_MS), OAUTH2_FETCH);
	assert_int_equal(oauth2_cache_next(&c, 100 + OAUTH2_FAILURE_HOLD_MS), OAUTH2_WAIT);
	oauth2_cache_store(&c, dup("t"), 60, 2000);
	assert_int_equal(c.failure[0], '\0');
	assert_int_equal(oauth2_cache_next(&c, 2000), OAUTH2_USE);

	/* A failed refresh ahead keeps the token that still works. */
	assert_int_equal(oauth2_cache_next(&c, 2000 + 54000), OAUTH2_USE_AND_FETCH);
	oauth2_cache_fail(&c, "down", 2000 + 54000);
	assert_int_equal(oauth2_cache_next(&c, 2000 + 54001), OAUTH2_USE);
	assert_string_equal(c.token, "t");
	/* ... until it expires: then the held failure answers. */
	oauth2_cache_fail(&c, "down", 2000 + 59500);
	assert_int_equal(oauth2_cache_next(&c, 2000 + 60000), OAUTH2_FAILED);
	oauth2_cache_clear(&c);
}

static struct oauth2_params params(void)
{
	struct oauth2_params p = {
		.grant = OAUTH2_CLIENT_CREDENTIALS,
		.client_auth = OAUTH2_AUTH_BASIC,
		.token_url = "https://idp.example/token",
		.client_id = "outboxd",
		.client_secret = "s3cret:&=",
		.scope = "events write",
	};
	return p;
}

static char *body_of(const struct oauth2_params *p)
{
	struct buf b;
	buf_init(&b, 4096);
	assert_int_equal(oauth2_request_body(p, &b), 0);
	return b.data;
}

static void test_request_body_and_basic(void **state)
{
	struct oauth2_params p = params();
	char *body = body_of(&p);
	/* Basic client authentication: the credentials are not in the body. */
	assert_string_equal(body, "grant_type=client_credentials&scope=events%20write");
	free(body);
	char basic[256];
	assert_int_equal(oauth2_basic_header_value(&p, basic, sizeof(basic)), 0);
	/* base64("outboxd:s3cret%3A%26%3D"): the parts are form-encoded first (RFC 6749 2.3.1) */
	assert_string_equal(basic, "Basic b3V0Ym94ZDpzM2NyZXQlM0ElMjYlM0Q=");
	assert_int_equal(oauth2_basic_header_value(&p, basic, 10), -1);

	p.client_auth = OAUTH2_AUTH_BODY;
	p.audience = "https://api.example/";
	body = body_of(&p);
	assert_string_equal(body, "grant_type=client_credentials&scope=events%20write&audience="
				  "https%3A%2F%2Fapi.example%2F&client_id=outboxd&client_secret="
				  "s3cret%3A%26%3D");
	free(body);
	assert_false(oauth2_uses_basic(&p));

	p = params();
	p.grant = OAUTH2_PASSWORD;
	p.username = "ann@example.com";
	p.password = "p w";
	p.scope = NULL;
	body = body_of(&p);
	assert_string_equal(body, "grant_type=password&username=ann%40example.com&password=p%20w");
	free(body);
	assert_true(oauth2_uses_basic(&p));

	/* A public client (no secret) identifies itself in the body, whatever client_auth. */
	p.client_secret = NULL;
	assert_false(oauth2_uses_basic(&p));
	body = body_of(&p);
	assert_non_null(strstr(body, "&client_id=outboxd"));
	assert_null(strstr(body, "client_secret"));
	free(body);

	/* A full buffer is an error, not a truncated body. */
	struct buf small;
	buf_init(&small, 10);
	assert_int_equal(oauth2_request_body(&p, &small), -1);
	buf_free(&small);
}

static void test_fingerprint(void **state)
{
	struct oauth2_params a = params(), b = params();
	assert_true(oauth2_params_fingerprint(&a) == oauth2_params_fingerprint(&b));
	b.client_secret = "other";
	assert_true(oauth2_params_fingerprint(&a) != oauth2_params_fingerprint(&b));
	b = params();
	b.client_auth = OAUTH2_AUTH_BODY;
	assert_true(oauth2_params_fingerprint(&a) != oauth2_params_fingerprint(&b));
	/* field boundaries count: ("ab", NULL) differs from ("a", "b") */
	a.scope = "ab";
	a.audience = NULL;
	b = params();
	b.scope = "a";
	b.audience = "b";
	assert_true(oauth2_params_fingerprint(&a) != oauth2_params_fingerprint(&b));
}

static int parse(long status, const char *body, char **token, int64_t *exp, char *why)
{
	return oauth2_parse_response(status, body, strlen(body), token, exp, why, 512);
}

static void test_parse_response(void **state)
{
	char why[512], *token;
	int64_t exp;

	assert_int_equal(parse(200, "{\"access_token\":\"abc.def\",\"token_type\":\"Bearer\","
				    "\"expires_in\":3600,\"scope\":\"x\"}", &token, &exp, why), 0);
	assert_string_equal(token, "abc.def");
	assert_int_equal(exp, 3600);
	free(token);
	/* lowercase bearer, expires_in as a string, or absent */
	assert_int_equal(parse(200, "{\"access_token\":\"t\",\"token_type\":\"bearer\","
				    "\"expires_in\":\"60\"}", &token, &exp, why), 0);
	assert_int_equal(exp, 60);
	free(token);
	assert_int_equal(parse(201, "{\"access_token\":\"t\"}", &token, &exp, why), 0);
	assert_int_equal(exp, -1);
	free(token);
	/* lifetimes out of range: negative is expired, absurdly long is ten years (6e20 once
	 * reached an undefined float-to-integer conversion; found by make fuzz) */
	static const struct {
		const char *expires_in;
		int64_t want;
	} odd[] = {{"6e20", 3650LL * 86400}, {"-5", 0}, {"1e400", 3650LL * 86400},
		   {"\"99999999999999999999999\"", 3650LL * 86400}, {"9223372036854775807",
		   3650LL * 86400}, {"2.5", 2}};
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		char body[128];
		snprintf(body, sizeof(body), "{\"access_token\":\"t\",\"expires_in\":%s}",
			 odd[i].expires_in);
		int rc = parse(200, body, &token, &exp, why);
		if (rc == 0 && exp != odd[i].want)
			fprintf(stderr, "expires_in %s: %lld\n", odd[i].expires_in, (long long)exp);
		if (rc == 0) {
			assert_int_equal(exp, odd[i].want);
			free(token);
		}
	}

	assert_int_equal(parse(200, "not json", &token, &exp, why), -1);
	assert_null(token);
	assert_non_null(strstr(why, "token response is not JSON"));
	assert_int_equal(parse(200, "", &token, &exp, why), -1);
	assert_non_null(strstr(why, "empty body"));
	assert_int_equal(parse(200, "[1]", &token, &exp, why), -1);
	assert_string_equal(why, "token response is not a JSON object");
	assert_int_equal(parse(200, "{\"token_type\":\"Bearer\"}", &token, &exp, why), -1);
	assert_string_equal(why, "token response has no access_token");
	assert_int_equal(parse(200, "{\"access_token\":\"a b\"}", &token, &exp, why), -1);
	assert_non_null(strstr(why, "control characters"));
	assert_int_equal(parse(200, "{\"access_token\":\"a\\r\\nX-Evil: 1\"}", &token, &exp, why), -1);
	assert_int_equal(parse(200, "{\"access_token\":\"a\",\"token_type\":\"mac\"}", &token, &exp,
			       why), -1);
	assert_string_equal(why, "token_type mac is not supported (only Bearer)");

	/* RFC 6749 5.2 errors are quoted; other bodies too, shortened, on one line */
	assert_int_equal(parse(401, "{\"error\":\"invalid_client\",\"error_description\":"
				    "\"Client authentication failed\"}", &token, &exp, why), -1);
	assert_string_equal(why, "token endpoint answered HTTP 401: invalid_client (Client "
				 "authentication failed)");
	assert_int_equal(parse(503, "busy\nnow", &token, &exp, why), -1);
	assert_string_equal(why, "token endpoint answered HTTP 503: busy now");
	assert_int_equal(parse(500, "", &token, &exp, why), -1);
	assert_string_equal(why, "token endpoint answered HTTP 500");
	char big[2000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(parse(502, big, &token, &exp, why), -1);
	assert_true(strlen(why) < 300);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_one_fetch_for_many),
		cmocka_unit_test(test_margins),
		cmocka_unit_test(test_refresh_ahead_and_expiry),
		cmocka_unit_test(test_zero_lifetime_not_reused),
		cmocka_unit_test(test_invalidate_once_per_token),
		cmocka_unit_test(test_failure_is_held_briefly),
		cmocka_unit_test(test_request_body_and_basic),
		cmocka_unit_test(test_fingerprint),
		cmocka_unit_test(test_parse_response),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
