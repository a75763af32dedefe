/* test_sub_codec.c: subscription validation (every field named in errors), defaults,
 * masking of credentials and secret headers, PATCH merging, and what outboxd does itself
 * before storing a document (generated secrets, secret rotation, credentials that may
 * not follow a moved endpoint, TLS files inside tls_dir). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>

#include "core/sub_codec.h"
#include "core/retry.h"
#include "util/clock.h"

static struct retry_policy defaults;

static int setup(void **state)
{
	retry_policy_defaults(&defaults);
	return 0;
}

static void expect_field(const char *doc_text, int status, const char *field)
{
	json_t *doc = json_loads(doc_text, 0, NULL);
	assert_non_null(doc);
	struct input_error err;
	struct subscription s;
	assert_int_equal(sub_codec_parse(doc, &defaults, &s, &err), -1);
	if (strcmp(err.field, field) != 0)
		fprintf(stderr, "%s: field %s, want %s (%s)\n", doc_text, err.field, field, err.message);
	assert_string_equal(err.field, field);
	assert_int_equal(err.status, status);
	json_decref(doc);
}

#define BASE "\"name\":\"n\",\"event_types\":[\"*\"],\"endpoint\":\"https://h.example/x\""

static void test_valid_with_defaults(void **state)
{
	json_t *doc = json_loads("{" BASE ",\"auth\":{\"type\":\"api_key\",\"header\":\"X-Key\","
				 "\"value\":\"v\"},\"retry\":{\"policy\":\"exponential\",\"max_retries\":0}}",
				 0, NULL);
	struct subscription s;
	struct input_error err;
	assert_int_equal(sub_codec_parse(doc, &defaults, &s, &err), 0);
	assert_string_equal(s.name, "n");
	assert_string_equal(s.endpoint, "https://h.example/x");
	assert_int_equal(s.auth_type, AUTH_API_KEY);
	assert_string_equal(s.auth_name, "X-Key");
	assert_int_equal(s.retry.policy, RETRY_EXPONENTIAL);
	assert_int_equal(s.retry.max_retries, 0);
	assert_int_equal(s.retry.immediate, 4);
	assert_int_equal(s.retry.interval_ms, 3000);
	assert_int_equal(s.retry.immediate_timeout_ms, 1000);
	assert_int_equal(s.retry.timeout_ms, 5000);
	assert_true(s.enabled);
	struct subscription *heap = malloc(sizeof(*heap));
	*heap = s;
	subscription_free(heap);
	json_decref(doc);
}

/* max_retries left unset follows the policy: 3, or 5 for exponential (backoff's
 * MaxNumberOfRetries); set anywhere (subscription or setting), it is kept as given. */
static void test_max_retries_follows_policy(void **state)
{
	static const struct {
		const char *retry;
		int auto_defaults; /* the max_retries setting left unset */
		int want;
	} cases[] = {
		{"{}", 1, 3},
		{"{\"policy\":\"fixed\"}", 1, 3},
		{"{\"policy\":\"linear\"}", 1, 3},
		{"{\"policy\":\"exponential\"}", 1, 5},
		{"{\"policy\":\"exponential\",\"max_retries\":2}", 1, 2},
		{"{\"policy\":\"exponential\",\"max_retries\":0}", 1, 0},
		{"{\"policy\":\"exponential\"}", 0, 7},  /* the setting said 7 */
		{"{\"policy\":\"fixed\"}", 0, 7},
	};
	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char text[256];
		struct retry_policy d;
		struct subscription s;
		struct input_error err;
		retry_policy_defaults(&d);
		if (!cases[i].auto_defaults) {
			d.max_retries = 7;
			d.max_retries_auto = 0;
		}
		snprintf(text, sizeof(text), "{" BASE ",\"retry\":%s}", cases[i].retry);
		json_t *doc = json_loads(text, 0, NULL);
		assert_int_equal(sub_codec_parse(doc, &d, &s, &err), 0);
		if (s.retry.max_retries != cases[i].want)
			fprintf(stderr, "%s: max_retries %d, want %d\n", text, s.retry.max_retries,
				cases[i].want);
		assert_int_equal(s.retry.max_retries, cases[i].want);
		subscription_clear(&s);
		json_decref(doc);
	}
}

/* IPv6 literal hosts (RFC 3986 §3.2.2) are endpoints like any other; broken ones are not. */
static void test_ipv6_endpoints(void **state)
{
	static const char *const good[] = {"http://[::1]:8080/hook", "https://[2001:db8::1]/x",
					   "http://[::ffff:10.1.2.3]:9000"};
	static const char *const bad[] = {"http://[::1/hook", "http://[]/x", "http://[::g]/x",
					  "http://[::1]:99999/"};
	char doc[256];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct subscription s;
		struct input_error err;
		snprintf(doc, sizeof(doc), "{\"name\":\"n\",\"event_types\":[\"*\"],\"endpoint\":\"%s\"}",
			 good[i]);
		json_t *j = json_loads(doc, 0, NULL);
		if (sub_codec_parse(j, &defaults, &s, &err) != 0)
			fail_msg("%s refused: %s", good[i], err.message);
		subscription_clear(&s);
		json_decref(j);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(doc, sizeof(doc), "{\"name\":\"n\",\"event_types\":[\"*\"],\"endpoint\":\"%s\"}",
			 bad[i]);
		expect_field(doc, 400, "endpoint");
	}
}

static void test_errors(void **state)
{
	expect_field("{\"event_types\":[\"*\"],\"endpoint\":\"http://h/\"}", 400, "name");
	expect_field("{" BASE ",\"extra\":1}", 400, "extra");
	expect_field("{\"name\":\"n\",\"event_types\":[\"*\"],\"endpoint\":\"mailto:x\"}", 400, "endpoint");
	expect_field("{\"name\":\"n\",\"event_types\":[\"*\"],\"endpoint\":\"http://h:99999/\"}", 400,
		     "endpoint");
	expect_field("{\"name\":\"n\",\"event_types\":[],\"endpoint\":\"http://h/\"}", 400, "event_types");
	expect_field("{\"name\":\"n\",\"event_types\":[\"a b\"],\"endpoint\":\"http://h/\"}", 400,
		     "event_types[0]");
	expect_field("{" BASE ",\"payload_format\":\"xml\"}", 400, "payload_format");
	/* the values of a field of a few, named in its message */
	struct input_error err;
	json_t *bad = json_loads("{" BASE ",\"payload_format\":\"xml\",\"ordering\":\"no\"}", 0,
				 NULL);
	assert_int_equal(sub_codec_parse(bad, &defaults, NULL, &err), -1);
	assert_string_equal(err.message, "payload_format must be json, binary or envelope "
					 "(envelope for kafka:// endpoints)");
	json_object_del(bad, "payload_format");
	assert_int_equal(sub_codec_parse(bad, &defaults, NULL, &err), -1);
	assert_string_equal(err.message, "ordering must be none or partition_key");
	json_decref(bad);
	expect_field("{" BASE ",\"auth\":{\"type\":\"magic\"}}", 400, "auth.type");
	expect_field("{" BASE ",\"auth\":{\"type\":\"basic\",\"username\":\"u\"}}", 400, "auth.password");
	expect_field("{" BASE ",\"auth\":{\"type\":\"bearer\",\"token\":\"t\",\"x\":1}}", 400, "auth.x");
	expect_field("{" BASE ",\"auth\":{\"type\":\"oauth2\"}}", 400, "auth.token_url");
	expect_field("{" BASE ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"ftp://x\","
		     "\"client_id\":\"c\",\"client_secret\":\"s\"}}", 400, "auth.token_url");
	expect_field("{" BASE ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"https://i/t\"}}", 400,
		     "auth.client_id");
	expect_field("{" BASE ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"https://i/t\","
		     "\"client_id\":\"c\"}}", 400, "auth.client_secret");
	expect_field("{" BASE ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"https://i/t\","
		     "\"client_id\":\"c\",\"client_secret\":\"s\",\"username\":\"u\"}}", 400,
		     "auth.username");
	expect_field("{" BASE ",\"auth\":{\"type\":\"oauth2\",\"grant_type\":\"password\","
		     "\"token_url\":\"https://i/t\",\"client_id\":\"c\",\"username\":\"u\"}}", 400,
		     "auth.password");
	expect_field("{" BASE ",\"auth\":{\"type\":\"oauth2\",\"grant_type\":\"implicit\","
		     "\"token_url\":\"https://i/t\",\"client_id\":\"c\"}}", 400, "auth.grant_type");
	expect_field("{" BASE ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"https://i/t\","
		     "\"client_id\":\"c\",\"client_secret\":\"s\",\"client_auth\":\"jwt\"}}", 400,
		     "auth.client_auth");
	expect_field("{" BASE ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"https://i/t\","
		     "\"client_id\":\"c\",\"client_secret\":\"s\",\"scope\":\"\"}}", 400, "auth.scope");
	expect_field("{" BASE ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"https://i/t\","
		     "\"client_id\":\"c\",\"client_secret\":\"s\",\"extra\":1}}", 400, "auth.extra");
	expect_field("{" BASE ",\"tls\":{\"ca_file\":\"relative.pem\"}}", 400, "tls.ca_file");
	expect_field("{" BASE ",\"tls\":{\"client_key\":\"/k.pem\"}}", 400, "tls.client_key");
	expect_field("{" BASE ",\"tls\":{\"insecure_skip_verify\":true}}", 400,
		     "tls.insecure_skip_verify");
	expect_field("{" BASE ",\"tls\":\"on\"}", 400, "tls");
	expect_field("{\"name\":\"n\",\"event_types\":[\"*\"],\"endpoint\":\"http://h/\","
		     "\"tls\":{\"ca_file\":\"/ca.pem\"}}", 422, "tls");
	expect_field("{" BASE ",\"secret_grace\":\"31d\"}", 422, "secret_grace");
	expect_field("{" BASE ",\"secret_grace\":24}", 400, "secret_grace");
	expect_field("{" BASE ",\"secret\":\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\","
		     "\"previous_secret\":\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"}", 400,
		     "previous_secret_expires_at");
	expect_field("{" BASE ",\"headers\":{\"Content-Type\":\"x\"}}", 422, "headers.Content-Type");
	expect_field("{" BASE ",\"headers\":{\"webhook-id\":\"x\"}}", 422, "headers.webhook-id");
	expect_field("{" BASE ",\"headers\":{\"X-A\":1}}", 400, "headers.X-A");
	expect_field("{" BASE ",\"secret\":\"plain\"}", 400, "secret");
	expect_field("{" BASE ",\"timeout\":\"1\"}", 400, "timeout");
	expect_field("{" BASE ",\"timeout\":\"10m\"}", 422, "timeout");
	expect_field("{" BASE ",\"retry\":{\"immediate\":0}}", 422, "retry.immediate");
	expect_field("{" BASE ",\"retry\":{\"max_retries\":-1}}", 422, "retry.max_retries");
	expect_field("{" BASE ",\"retry\":{\"min_delay\":\"1m\",\"max_delay\":\"1s\"}}", 422,
		     "retry.min_delay");
	expect_field("{" BASE ",\"retry\":{\"factor\":0.5}}", 400, "retry.factor");
	expect_field("{" BASE ",\"retry\":{\"bogus\":1}}", 400, "retry.bogus");
	expect_field("{" BASE ",\"enabled\":\"yes\"}", 400, "enabled");
}

static void test_public_view_masks(void **state)
{
	struct sub_row row = {
		.id = "01890a5d-ac96-774b-bcce-b302099a8057",
		.name = "n",
		.config = "{" BASE ",\"auth\":{\"type\":\"basic\",\"username\":\"u\",\"password\":\"pw\"},"
			  "\"secret\":\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"}",
		.enabled = 1,
		.created_at = 1,
		.updated_at = 2,
	};
	json_t *v = sub_codec_public(&row);
	char *text = json_dumps(v, 0);
	assert_null(strstr(text, "pw\""));
	assert_null(strstr(text, "MfKQ9r8"));
	assert_non_null(strstr(text, "\"username\": \"u\""));
	assert_string_equal(json_string_value(json_object_get(v, "id")), row.id);
	free(text);
	json_decref(v);
}

static void test_merge(void **state)
{
	json_t *stored = json_loads("{" BASE ",\"auth\":{\"type\":\"basic\",\"username\":\"u\","
				    "\"password\":\"p\"},\"retry\":{\"immediate\":2},\"headers\":{\"A\":\"1\"}}",
				    0, NULL);
	json_t *patch = json_loads("{\"auth\":{\"type\":\"bearer\",\"token\":\"t\"},"
				   "\"retry\":{\"max_retries\":5},\"headers\":{\"A\":null,\"B\":\"2\"}}",
				   0, NULL);
	struct input_error err;
	json_t *m = sub_codec_merge(stored, patch, &err);
	assert_non_null(m);
	json_t *auth = json_object_get(m, "auth");
	assert_null(json_object_get(auth, "username")); /* auth replaced whole */
	assert_string_equal(json_string_value(json_object_get(auth, "token")), "t");
	json_t *retry = json_object_get(m, "retry");
	assert_int_equal(json_integer_value(json_object_get(retry, "immediate")), 2);
	assert_int_equal(json_integer_value(json_object_get(retry, "max_retries")), 5);
	assert_null(json_object_get(json_object_get(m, "headers"), "A"));
	assert_int_equal(sub_codec_parse(m, &defaults, NULL, &err), 0);
	json_decref(m);
	json_decref(stored);
	json_decref(patch);
}

static void test_oauth2_and_tls_parsed(void **state)
{
	json_t *doc = json_loads("{" BASE ",\"auth\":{\"type\":\"oauth2\",\"grant_type\":\"password\","
				 "\"token_url\":\"https://idp.example/token?x=1\",\"client_id\":\"cid\","
				 "\"client_secret\":\"cs\",\"scope\":\"a b\",\"audience\":\"aud\","
				 "\"username\":\"u\",\"password\":\"p\",\"client_auth\":\"body\"},"
				 "\"tls\":{\"ca_file\":\"/etc/ca.pem\",\"client_cert\":\"/c.pem\","
				 "\"client_key\":\"/k.pem\"}}", 0, NULL);
	struct subscription s;
	struct input_error err;
	assert_int_equal(sub_codec_parse(doc, &defaults, &s, &err), 0);
	assert_int_equal(s.auth_type, AUTH_OAUTH2);
	assert_int_equal(s.oauth2.grant, OAUTH2_PASSWORD);
	assert_int_equal(s.oauth2.client_auth, OAUTH2_AUTH_BODY);
	assert_string_equal(s.oauth2.token_url, "https://idp.example/token?x=1");
	assert_string_equal(s.oauth2.client_id, "cid");
	assert_string_equal(s.oauth2.client_secret, "cs");
	assert_string_equal(s.oauth2.scope, "a b");
	assert_string_equal(s.oauth2.audience, "aud");
	assert_string_equal(s.oauth2.username, "u");
	assert_string_equal(s.oauth2.password, "p");
	assert_string_equal(s.tls_ca_file, "/etc/ca.pem");
	assert_string_equal(s.tls_client_cert, "/c.pem");
	assert_string_equal(s.tls_client_key, "/k.pem");
	subscription_clear(&s);
	json_decref(doc);

	/* the defaults: client_credentials, HTTP Basic client authentication */
	doc = json_loads("{" BASE ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"http://127.0.0.1:1/t\","
			 "\"client_id\":\"cid\",\"client_secret\":\"cs\"}}", 0, NULL);
	assert_int_equal(sub_codec_parse(doc, &defaults, &s, &err), 0);
	assert_int_equal(s.oauth2.grant, OAUTH2_CLIENT_CREDENTIALS);
	assert_int_equal(s.oauth2.client_auth, OAUTH2_AUTH_BASIC);
	assert_null(s.oauth2.scope);
	subscription_clear(&s);
	/* validation only (out NULL) frees what it allocated: ASan checks */
	assert_int_equal(sub_codec_parse(doc, &defaults, NULL, &err), 0);
	json_decref(doc);
}

static void test_public_masks_oauth2_and_previous(void **state)
{
	char until[RFC3339_LEN], config[1024];
	clock_format_rfc3339(clock_now_ms() + 60000, until);
	snprintf(config, sizeof(config),
		 "{" BASE ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"https://i/t\","
		 "\"client_id\":\"cid\",\"client_secret\":\"topsecret\"},"
		 "\"secret\":\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\","
		 "\"previous_secret\":\"whsec_AAAAAAAAAAAAAAAAAAAAAAAA\","
		 "\"previous_secret_expires_at\":\"%s\"}", until);
	struct sub_row row = {.id = "01890a5d-ac96-774b-bcce-b302099a8057", .name = "n",
				.config = config, .enabled = 1};
	json_t *v = sub_codec_public(&row);
	char *text = json_dumps(v, 0);
	assert_null(strstr(text, "topsecret"));
	assert_null(strstr(text, "MfKQ9r8"));
	assert_null(strstr(text, "AAAAAAAA"));
	assert_string_equal(json_string_value(json_object_get(v, "previous_secret")),
			    "whsec_********");
	assert_string_equal(json_string_value(json_object_get(v, "previous_secret_expires_at")),
			    until);
	assert_string_equal(json_string_value(json_object_get(json_object_get(v, "auth"),
							      "client_id")), "cid");
	free(text);
	json_decref(v);

	/* an expired previous secret is not shown at all */
	snprintf(config, sizeof(config),
		 "{" BASE ",\"secret\":\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\","
		 "\"previous_secret\":\"whsec_AAAAAAAAAAAAAAAAAAAAAAAA\","
		 "\"previous_secret_expires_at\":\"2001-01-01T00:00:00Z\"}");
	v = sub_codec_public(&row);
	assert_null(json_object_get(v, "previous_secret"));
	assert_null(json_object_get(v, "previous_secret_expires_at"));
	json_decref(v);
}

#define OLD_SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
#define NEW_SECRET "whsec_BBBBBBBBBBBBBBBBBBBBBBBB"

/* Runs prepare as a PATCH would: merge, prepare, validate. Returns the merged document. */
static json_t *patch_doc(const char *stored_text, const char *patch_text, int64_t now,
			 char **generated, int expect_rc, const char *expect_field)
{
	json_t *stored = json_loads(stored_text, 0, NULL);
	json_t *patch = json_loads(patch_text, 0, NULL);
	struct input_error err;
	assert_non_null(stored);
	assert_non_null(patch);
	json_t *merged = sub_codec_merge(stored, patch, &err);
	assert_non_null(merged);
	int rc = sub_codec_prepare(merged, patch, stored, now, NULL, generated, &err);
	if (rc == 0)
		rc = sub_codec_parse(merged, &defaults, NULL, &err);
	if (rc != expect_rc)
		fprintf(stderr, "%s: %s\n", patch_text, err.message);
	assert_int_equal(rc, expect_rc);
	if (expect_field)
		assert_string_equal(err.field, expect_field);
	json_decref(stored);
	json_decref(patch);
	return merged;
}

static const char *str(json_t *doc, const char *key)
{
	return json_string_value(json_object_get(doc, key));
}

static void test_generate_secret(void **state)
{
	json_t *doc = json_loads("{" BASE ",\"secret\":\"generate\"}", 0, NULL);
	struct input_error err;
	char *gen = NULL;
	assert_int_equal(sub_codec_prepare(doc, doc, NULL, 1000, NULL, &gen, &err), 0);
	assert_non_null(gen);
	/* whsec_ + base64 of 32 bytes */
	assert_int_equal(strlen(gen), 6 + 44);
	assert_memory_equal(gen, "whsec_", 6);
	assert_string_equal(str(doc, "secret"), gen);
	assert_int_equal(sub_codec_parse(doc, &defaults, NULL, &err), 0);
	char *gen2 = NULL;
	json_t *doc2 = json_loads("{" BASE ",\"secret\":\"generate\"}", 0, NULL);
	assert_int_equal(sub_codec_prepare(doc2, doc2, NULL, 1000, NULL, &gen2, &err), 0);
	assert_string_not_equal(gen, gen2);
	free(gen);
	free(gen2);
	json_decref(doc);
	json_decref(doc2);

	/* without "generate", nothing is generated; a create may not set rotation fields */
	doc = json_loads("{" BASE ",\"secret\":\"" OLD_SECRET "\",\"previous_secret\":null}", 0, NULL);
	assert_int_equal(sub_codec_prepare(doc, doc, NULL, 1000, NULL, &gen, &err), -1);
	assert_null(gen);
	assert_string_equal(err.field, "previous_secret");
	json_decref(doc);
}

static void test_rotation(void **state)
{
	const int64_t now = 1700000000000LL;
	char *gen = NULL;
	char want[RFC3339_LEN];

	/* A new secret keeps the old one for the default 24 hours. */
	json_t *m = patch_doc("{" BASE ",\"secret\":\"" OLD_SECRET "\"}",
			      "{\"secret\":\"" NEW_SECRET "\"}", now, &gen, 0, NULL);
	assert_null(gen);
	assert_string_equal(str(m, "secret"), NEW_SECRET);
	assert_string_equal(str(m, "previous_secret"), OLD_SECRET);
	assert_string_equal(str(m, "previous_secret_expires_at"),
			    clock_format_rfc3339(now + 86400000LL, want));
	struct subscription s;
	struct input_error err;
	assert_int_equal(sub_codec_parse(m, &defaults, &s, &err), 0);
	assert_string_equal(s.previous_secret, OLD_SECRET);
	assert_int_equal(s.previous_secret_until, now + 86400000LL);
	subscription_clear(&s);

	/* Rotating again within the grace keeps the latest old one; secret_grace applies. */
	char *stored = json_dumps(m, JSON_COMPACT);
	json_decref(m);
	m = patch_doc(stored, "{\"secret\":\"generate\",\"secret_grace\":\"10m\"}", now + 1000, &gen,
		      0, NULL);
	assert_non_null(gen);
	assert_string_equal(str(m, "secret"), gen);
	assert_string_equal(str(m, "previous_secret"), NEW_SECRET);
	assert_string_equal(str(m, "previous_secret_expires_at"),
			    clock_format_rfc3339(now + 1000 + 600000, want));
	free(gen);
	gen = NULL;
	free(stored);
	stored = json_dumps(m, JSON_COMPACT);
	json_decref(m);

	/* Other changes leave the rotation alone; the masked secret sent back keeps it. */
	m = patch_doc(stored, "{\"name\":\"renamed\",\"secret\":\"whsec_********\"}", now + 2000, &gen,
		      0, NULL);
	assert_string_equal(str(m, "previous_secret"), NEW_SECRET);
	assert_string_not_equal(str(m, "secret"), "whsec_********");
	json_decref(m);

	/* null ends the grace period now; other values are refused */
	m = patch_doc(stored, "{\"previous_secret\":null}", now + 2000, &gen, 0, NULL);
	assert_null(json_object_get(m, "previous_secret"));
	assert_null(json_object_get(m, "previous_secret_expires_at"));
	json_decref(m);
	m = patch_doc(stored, "{\"previous_secret\":\"" OLD_SECRET "\"}", now, &gen, -1,
		      "previous_secret");
	json_decref(m);
	m = patch_doc(stored, "{\"previous_secret_expires_at\":\"2099-01-01T00:00:00Z\"}", now, &gen,
		      -1, "previous_secret_expires_at");
	json_decref(m);

	/* Past the grace period the previous secret is dropped at the next write. */
	m = patch_doc(stored, "{\"enabled\":false}", now + 3600000, &gen, 0, NULL);
	assert_null(json_object_get(m, "previous_secret"));
	json_decref(m);

	/* Removing the secret removes the rotation; "0s" keeps no old secret. */
	m = patch_doc(stored, "{\"secret\":null}", now + 2000, &gen, 0, NULL);
	assert_null(json_object_get(m, "secret"));
	assert_null(json_object_get(m, "previous_secret"));
	json_decref(m);
	m = patch_doc("{" BASE ",\"secret\":\"" OLD_SECRET "\"}",
		      "{\"secret\":\"" NEW_SECRET "\",\"secret_grace\":\"0s\"}", now, &gen, 0, NULL);
	assert_null(json_object_get(m, "previous_secret"));
	json_decref(m);
	free(stored);
}

static void test_masked_auth_kept_on_patch(void **state)
{
	char *gen = NULL;
	json_t *m = patch_doc("{" BASE ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"https://i/t\","
			      "\"client_id\":\"cid\",\"client_secret\":\"real\"}}",
			      "{\"auth\":{\"type\":\"oauth2\",\"token_url\":\"https://i/t2\","
			      "\"client_id\":\"cid\",\"client_secret\":\"********\"}}", 0, &gen, 0, NULL);
	json_t *auth = json_object_get(m, "auth");
	assert_string_equal(str(auth, "client_secret"), "real");
	assert_string_equal(str(auth, "token_url"), "https://i/t2");
	json_decref(m);
	/* another type: the mask is not a stored credential, and stays what was sent */
	m = patch_doc("{" BASE ",\"auth\":{\"type\":\"basic\",\"username\":\"u\",\"password\":\"real\"}}",
		      "{\"auth\":{\"type\":\"bearer\",\"token\":\"********\"}}", 0, &gen, 0, NULL);
	assert_string_equal(str(json_object_get(m, "auth"), "token"), "********");
	json_decref(m);
}

/* tls_dir/NAME's TLS document. */
static json_t *tls_doc(const char *path)
{
	char text[1024];
	snprintf(text, sizeof(text), "{" BASE ",\"tls\":{\"ca_file\":\"%s\"}}", path);
	json_t *doc = json_loads(text, 0, NULL);
	assert_non_null(doc);
	return doc;
}

/* prepare's answer for a document naming path, with tls_dir dir: 0, or -1 with the
 * message in msg. */
static int tls_prepare(const char *dir, const char *path, char msg[256])
{
	json_t *doc = tls_doc(path);
	struct input_error err;
	char *gen = NULL;
	int rc = sub_codec_prepare(doc, doc, NULL, 0, dir, &gen, &err);
	json_decref(doc);
	msg[0] = '\0';
	if (rc) {
		assert_string_equal(err.field, "tls.ca_file");
		assert_int_equal(err.status, 422);
		snprintf(msg, 256, "%s", err.message);
	}
	return rc;
}

static void test_tls_files_inside_tls_dir(void **state)
{
	char base[] = "/tmp/outboxd-tlsdir-XXXXXX", dir[128], out[128], path[256], other[256];
	char msg[256], first[256];
	assert_non_null(mkdtemp(base));
	snprintf(dir, sizeof(dir), "%s/conf", base);
	snprintf(out, sizeof(out), "%s/elsewhere", base);
	assert_int_equal(mkdir(dir, 0700), 0);
	assert_int_equal(mkdir(out, 0700), 0);
	snprintf(path, sizeof(path), "%s/ca.pem", dir);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fclose(f);
	snprintf(other, sizeof(other), "%s/secret.pem", out);
	f = fopen(other, "w");
	assert_non_null(f);
	fclose(f);

	/* inside, readable: taken; with tls_dir unset, nothing is */
	assert_int_equal(tls_prepare(dir, path, msg), 0);
	assert_int_equal(tls_prepare(NULL, path, msg), -1);
	assert_int_equal(tls_prepare("", path, msg), -1);

	/* a file outside that exists, one that does not, one inside that does not, a
	 * ".." out of the directory, a symbolic link inside that leads out, and a
	 * directory next to it whose name starts alike: one answer for all, naming no path
	 * but tls_dir */
	assert_int_equal(tls_prepare(dir, other, first), -1);
	assert_null(strstr(first, other));
	assert_non_null(strstr(first, dir));
	char cases[6][256];
	snprintf(cases[0], 256, "%s/missing.pem", out);
	snprintf(cases[1], 256, "%s/missing.pem", dir);
	snprintf(cases[2], 256, "%s/../elsewhere/secret.pem", dir);
	snprintf(cases[3], 256, "%s/link.pem", dir);
	assert_int_equal(symlink(other, cases[3]), 0);
	snprintf(cases[4], 256, "%s2/ca.pem", dir);
	snprintf(cases[5], 256, "%s", dir); /* the directory itself is no file */
	char sibling[160];
	snprintf(sibling, sizeof(sibling), "%s2", dir);
	assert_int_equal(mkdir(sibling, 0700), 0);
	f = fopen(cases[4], "w");
	assert_non_null(f);
	fclose(f);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(tls_prepare(dir, cases[i], msg), -1);
		assert_string_equal(msg, first);
	}
	/* a link inside to a file inside, and ".." that stays inside, are fine */
	char inner[256];
	snprintf(inner, sizeof(inner), "%s/inner.pem", dir);
	assert_int_equal(symlink(path, inner), 0);
	assert_int_equal(tls_prepare(dir, inner, msg), 0);
	snprintf(inner, sizeof(inner), "%s/../conf/ca.pem", dir);
	assert_int_equal(tls_prepare(dir, inner, msg), 0);

	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
	assert_int_equal(system(cmd), 0);
}

/* Every value that ends up in a header line (credentials, headers) refuses CR, LF, NUL
 * and the other control characters, naming the field. */
static void test_header_injection_refused(void **state)
{
#define INJ "abc\\r\\nX-Injected: 1\\r\\nHost: evil"
	static const struct {
		const char *json;
		const char *field;
	} cases[] = {
		{"{" BASE ",\"auth\":{\"type\":\"bearer\",\"token\":\"" INJ "\"}}", "auth.token"},
		{"{" BASE ",\"auth\":{\"type\":\"api_key\",\"header\":\"X-K\",\"value\":\"" INJ "\"}}",
		 "auth.value"},
		{"{" BASE ",\"auth\":{\"type\":\"query\",\"param\":\"k\",\"value\":\"a\\nb\"}}",
		 "auth.value"},
		{"{" BASE ",\"auth\":{\"type\":\"basic\",\"username\":\"u\\r\",\"password\":\"p\"}}",
		 "auth.username"},
		{"{" BASE ",\"auth\":{\"type\":\"basic\",\"username\":\"u\",\"password\":\"p\\n\"}}",
		 "auth.password"},
		{"{" BASE ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"https://i/t\","
		 "\"client_id\":\"c\\r\\nX: 1\",\"client_secret\":\"s\"}}", "auth.client_id"},
		{"{" BASE ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"https://i/t\","
		 "\"client_id\":\"c\",\"client_secret\":\"s\\u0001\"}}", "auth.client_secret"},
		{"{" BASE ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"https://i/t\","
		 "\"client_id\":\"c\",\"client_secret\":\"s\",\"scope\":\"a\\rb\"}}", "auth.scope"},
		{"{" BASE ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"https://i/t\","
		 "\"client_id\":\"c\",\"client_secret\":\"s\",\"audience\":\"a\\u007f\"}}",
		 "auth.audience"},
		{"{" BASE ",\"auth\":{\"type\":\"oauth2\",\"grant_type\":\"password\",\"token_url\":"
		 "\"https://i/t\",\"client_id\":\"c\",\"username\":\"u\\n\",\"password\":\"p\"}}",
		 "auth.username"},
		{"{" BASE ",\"auth\":{\"type\":\"oauth2\",\"grant_type\":\"password\",\"token_url\":"
		 "\"https://i/t\",\"client_id\":\"c\",\"username\":\"u\",\"password\":\"" INJ "\"}}",
		 "auth.password"},
		{"{" BASE ",\"headers\":{\"X-A\":\"" INJ "\"}}", "headers.X-A"},
		{"{" BASE ",\"headers\":{\"X-A\":{\"value\":\"" INJ "\",\"secret\":true}}}",
		 "headers.X-A"},
		{"{" BASE ",\"headers\":{\"X-A\":\"a\\u007f\"}}", "headers.X-A"},
		{"{" BASE ",\"headers\":{\"X-A\\r\\nHost\":\"v\"}}", "headers.X-A\r\nHost"},
		{"{" BASE ",\"auth\":{\"type\":\"api_key\",\"header\":\"X-K\\r\\nHost\",\"value\":\"v\"}}",
		 "auth.header"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_field(cases[i].json, 400, cases[i].field);
	/* a NUL, in a document a parser let through (the API's refuses it) */
	json_t *nul = json_loads("{" BASE ",\"auth\":{\"type\":\"bearer\",\"token\":"
				 "\"a\\u0000b\"}}", JSON_ALLOW_NUL, NULL);
	struct input_error nul_err;
	assert_non_null(nul);
	assert_int_equal(sub_codec_parse(nul, &defaults, NULL, &nul_err), -1);
	assert_string_equal(nul_err.field, "auth.token");
	json_decref(nul);
	/* a tab and UTF-8 are fine */
	json_t *doc = json_loads("{" BASE ",\"auth\":{\"type\":\"bearer\",\"token\":\"a\\tb\"},"
				 "\"headers\":{\"X-A\":\"caf\\u00e9\"}}", 0, NULL);
	struct input_error err;
	assert_int_equal(sub_codec_parse(doc, &defaults, NULL, &err), 0);
	json_decref(doc);
#undef INJ
}

/* A row stored before the rules on new input (control characters in credentials, user
 * info in URLs) still loads, so the set of subscriptions keeps loading; new input with
 * the same document is refused. */
static void test_stored_rows_load_under_older_rules(void **state)
{
	const char *text = "{\"name\":\"old\",\"event_types\":[\"*\"],\"endpoint\":"
			   "\"https://u@h.example/x\",\"auth\":{\"type\":\"bearer\",\"token\":"
			   "\"a\\r\\nX-Injected: 1\"},\"headers\":{\"X-A\":\"b\\u007f\"}}";
	struct sub_row row = {.id = "01890a5d-ac96-774b-bcce-b302099a8057", .name = "old",
			      .config = (char *)text, .enabled = 1};
	struct subscription *s = sub_codec_from_row(&row, &defaults);
	assert_non_null(s);
	assert_string_equal(s->auth_secret, "a\r\nX-Injected: 1");
	subscription_free(s);
	json_t *doc = json_loads(text, 0, NULL);
	struct input_error err;
	assert_int_equal(sub_codec_parse(doc, &defaults, NULL, &err), -1);
	assert_string_equal(err.field, "endpoint");
	json_decref(doc);
}

/* "headers": {"X-Key": {"value": "...", "secret": true}}: parsed as a secret, masked in the
 * public view in the same shape, and kept by a PATCH that sends the mask back; an
 * Authorization header is a secret written either way. */
static void test_secret_headers(void **state)
{
	const char *stored_text = "{" BASE ",\"headers\":{\"X-Key\":{\"value\":\"k-s3cret\","
				  "\"secret\":true},\"X-Plain\":\"p\",\"authorization\":\"Bearer az\","
				  "\"X-Not\":{\"value\":\"n\",\"secret\":false}}}";
	json_t *doc = json_loads(stored_text, 0, NULL);
	struct subscription s;
	struct input_error err;
	assert_int_equal(sub_codec_parse(doc, &defaults, &s, &err), 0);
	assert_int_equal(s.n_headers, 4);
	for (size_t i = 0; i < s.n_headers; i++) {
		int want = strcmp(s.headers[i].name, "X-Key") == 0 ||
			   strcmp(s.headers[i].name, "authorization") == 0;
		assert_int_equal(s.headers[i].secret, want);
	}
	assert_string_equal(s.headers[0].value, "k-s3cret");
	subscription_clear(&s);
	json_decref(doc);

	struct sub_row row = {.id = "01890a5d-ac96-774b-bcce-b302099a8057", .name = "n",
			      .config = (char *)stored_text, .enabled = 1};
	json_t *v = sub_codec_public(&row);
	json_t *h = json_object_get(v, "headers");
	assert_string_equal(str(json_object_get(h, "X-Key"), "value"), "********");
	assert_true(json_is_true(json_object_get(json_object_get(h, "X-Key"), "secret")));
	assert_string_equal(str(h, "authorization"), "********");
	assert_string_equal(str(h, "X-Plain"), "p");
	assert_string_equal(str(json_object_get(h, "X-Not"), "value"), "n");
	char *text = json_dumps(v, 0);
	assert_null(strstr(text, "k-s3cret"));
	assert_null(strstr(text, "Bearer az"));
	free(text);

	/* what a read showed, sent back: the stored values stay */
	char *gen = NULL;
	json_t *sent = json_pack("{s:O}", "headers", h);
	char *patch = json_dumps(sent, JSON_COMPACT);
	json_decref(sent);
	json_t *m = patch_doc(stored_text, patch, 0, &gen, 0, NULL);
	json_t *mh = json_object_get(m, "headers");
	assert_string_equal(str(json_object_get(mh, "X-Key"), "value"), "k-s3cret");
	assert_true(json_is_true(json_object_get(json_object_get(mh, "X-Key"), "secret")));
	assert_string_equal(str(mh, "authorization"), "Bearer az");
	json_decref(m);
	free(patch);
	json_decref(v);
	/* the bare mask keeps it too; a new value replaces it */
	m = patch_doc(stored_text, "{\"headers\":{\"X-Key\":\"********\"}}", 0, &gen, 0, NULL);
	assert_string_equal(str(json_object_get(json_object_get(m, "headers"), "X-Key"), "value"),
			    "k-s3cret");
	json_decref(m);
	m = patch_doc(stored_text, "{\"headers\":{\"X-Key\":{\"value\":\"new\"}}}", 0, &gen, 0, NULL);
	assert_string_equal(str(json_object_get(json_object_get(m, "headers"), "X-Key"), "value"),
			    "new");
	json_decref(m);
	/* a plain header's mask is just a value */
	m = patch_doc(stored_text, "{\"headers\":{\"X-Plain\":\"********\"}}", 0, &gen, 0, NULL);
	assert_string_equal(str(json_object_get(m, "headers"), "X-Plain"), "********");
	json_decref(m);
	expect_field("{" BASE ",\"headers\":{\"X-A\":{\"value\":\"v\",\"secret\":1}}}", 400,
		     "headers.X-A");
	expect_field("{" BASE ",\"headers\":{\"X-A\":{\"value\":\"v\",\"other\":1}}}", 400,
		     "headers.X-A.other");
	expect_field("{" BASE ",\"headers\":{\"X-A\":{\"secret\":true}}}", 400, "headers.X-A");
}

/* A stored credential does not follow endpoint or auth.token_url to another origin: the
 * PATCH that moves one sends the credentials again. */
static void test_credentials_do_not_move(void **state)
{
	const char *bearer = "{" BASE ",\"auth\":{\"type\":\"bearer\",\"token\":\"t0k\"},"
			     "\"headers\":{\"X-K\":{\"value\":\"hk\",\"secret\":true},\"X-P\":\"p\"}}";
	static const struct {
		const char *patch;
		const char *field; /* NULL: accepted */
	} cases[] = {
		{"{\"endpoint\":\"https://evil.example/x\"}", "auth.token"},
		{"{\"endpoint\":\"https://evil.example/x\",\"auth\":{\"type\":\"bearer\","
		 "\"token\":\"********\"}}", "auth.token"},
		{"{\"endpoint\":\"https://evil.example/x\",\"auth\":{\"type\":\"bearer\","
		 "\"token\":\"new\"}}", "headers.X-K"},
		{"{\"endpoint\":\"https://evil.example/x\",\"auth\":{\"type\":\"bearer\","
		 "\"token\":\"new\"},\"headers\":{\"X-K\":{\"value\":\"********\",\"secret\":true}}}",
		 "headers.X-K"},
		{"{\"endpoint\":\"https://evil.example/x\",\"auth\":{\"type\":\"bearer\","
		 "\"token\":\"new\"},\"headers\":{\"X-K\":{\"value\":\"hk2\",\"secret\":true}}}", NULL},
		{"{\"endpoint\":\"https://evil.example/x\",\"auth\":null,\"headers\":{\"X-K\":null}}",
		 NULL},
		{"{\"endpoint\":\"http://h.example/x\"}", "auth.token"},          /* scheme */
		{"{\"endpoint\":\"https://h.example:8443/x\"}", "auth.token"},    /* port */
		{"{\"endpoint\":\"https://h.example@evil.example/x\"}", "auth.token"},
		{"{\"endpoint\":\"https://h.example.evil.example/x\"}", "auth.token"},
		{"{\"endpoint\":\"https://h.example/other?q=1\"}", NULL},         /* path only */
		{"{\"endpoint\":\"https://H.Example:443/y\"}", NULL},             /* same origin */
		{"{\"name\":\"renamed\"}", NULL},
	};
	char *gen = NULL;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *m = patch_doc(bearer, cases[i].patch, 0, &gen, cases[i].field ? -1 : 0,
				      cases[i].field);
		json_decref(m);
	}
	/* the status is 422 */
	json_t *stored = json_loads(bearer, 0, NULL);
	json_t *patch = json_loads(cases[0].patch, 0, NULL);
	struct input_error err;
	json_t *m = sub_codec_merge(stored, patch, &err);
	assert_int_equal(sub_codec_prepare(m, patch, stored, 0, NULL, &gen, &err), -1);
	assert_int_equal(err.status, 422);
	assert_non_null(strstr(err.message, "again"));
	json_decref(m);
	json_decref(patch);
	json_decref(stored);

	/* token_url moves: client_secret (and password) again; endpoint moves: all of them */
	const char *oauth = "{" BASE ",\"auth\":{\"type\":\"oauth2\",\"grant_type\":\"password\","
			    "\"token_url\":\"https://idp.example/t\",\"client_id\":\"c\","
			    "\"client_secret\":\"cs\",\"username\":\"u\",\"password\":\"pw\"}}";
	m = patch_doc(oauth, "{\"auth\":{\"type\":\"oauth2\",\"grant_type\":\"password\","
			     "\"token_url\":\"https://evil.example/t\",\"client_id\":\"c\","
			     "\"client_secret\":\"********\",\"username\":\"u\",\"password\":\"pw2\"}}",
		      0, &gen, -1, "auth.client_secret");
	json_decref(m);
	m = patch_doc(oauth, "{\"auth\":{\"type\":\"oauth2\",\"grant_type\":\"password\","
			     "\"token_url\":\"https://evil.example/t\",\"client_id\":\"c\","
			     "\"client_secret\":\"cs2\",\"username\":\"u\",\"password\":\"********\"}}",
		      0, &gen, -1, "auth.password");
	json_decref(m);
	m = patch_doc(oauth, "{\"auth\":{\"type\":\"oauth2\",\"grant_type\":\"password\","
			     "\"token_url\":\"https://evil.example/t\",\"client_id\":\"c\","
			     "\"client_secret\":\"cs2\",\"username\":\"u\",\"password\":\"pw2\"}}",
		      0, &gen, 0, NULL);
	json_decref(m);
	m = patch_doc(oauth, "{\"auth\":{\"type\":\"oauth2\",\"grant_type\":\"password\","
			     "\"token_url\":\"https://idp.example/t2\",\"client_id\":\"c\","
			     "\"client_secret\":\"********\",\"username\":\"u\",\"password\":\"********\"}}",
		      0, &gen, 0, NULL);
	json_decref(m);
	m = patch_doc(oauth, "{\"endpoint\":\"https://evil.example/x\"}", 0, &gen, -1,
		      "auth.password");
	json_decref(m);
}

/* The retry fields (policy, jitter, permanent codes, retry_after_max), the circuit breaker
 * and the limits, parsed with their defaults. */
static void test_retry_breaker_limits_parsed(void **state)
{
	json_t *doc = json_loads("{" BASE ",\"retry\":{\"policy\":\"linear\",\"jitter\":0.25,"
				 "\"permanent\":[400,410,422],\"retry_after_max\":\"10m\"},"
				 "\"circuit_breaker\":{\"max_errors\":5,\"failure_window\":\"30s\","
				 "\"max_delay_actions\":2},\"max_in_flight\":4,\"rate_limit\":2.5,"
				 "\"concurrency\":16}",
				 0, NULL);
	struct subscription s;
	struct input_error err;
	assert_int_equal(sub_codec_parse(doc, &defaults, &s, &err), 0);
	assert_int_equal(s.retry.policy, RETRY_LINEAR);
	assert_true(s.retry.jitter == 0.25);
	assert_int_equal(s.retry.retry_after_max_ms, 600000);
	assert_true(retry_is_permanent(&s.retry, 400));
	assert_true(retry_is_permanent(&s.retry, 410));
	assert_true(retry_is_permanent(&s.retry, 422));
	assert_false(retry_is_permanent(&s.retry, 404));
	assert_int_equal(s.breaker.enabled, 1);
	assert_int_equal(s.breaker.max_errors, 5);
	assert_int_equal(s.breaker.failure_window_ms, 30000);
	assert_int_equal(s.breaker.max_delay_actions, 2);
	assert_int_equal(s.max_in_flight, 4);
	assert_int_equal(s.concurrency, 16);
	assert_true(s.rate_limit == 2.5);
	subscription_clear(&s);
	json_decref(doc);

	/* defaults: 1000 errors in 3 min, 5 delay actions; no limits, nothing permanent,
	 * Retry-After up to 1 h */
	doc = json_loads("{" BASE ",\"max_in_flight\":null,\"rate_limit\":null,"
			 "\"circuit_breaker\":{\"enabled\":false}}", 0, NULL);
	assert_int_equal(sub_codec_parse(doc, &defaults, &s, &err), 0);
	assert_int_equal(s.breaker.enabled, 0);
	assert_int_equal(s.breaker.max_errors, 1000);
	assert_int_equal(s.breaker.failure_window_ms, 180000);
	assert_int_equal(s.breaker.max_delay_actions, 5);
	assert_int_equal(s.max_in_flight, 0);
	assert_int_equal(s.concurrency, 0); /* adaptive */
	assert_true(s.rate_limit == 0.0);
	assert_true(s.retry.jitter == 0.0);
	assert_int_equal(s.retry.retry_after_max_ms, 3600000);
	for (int code = 400; code < 600; code++)
		assert_false(retry_is_permanent(&s.retry, code));
	subscription_clear(&s);
	json_decref(doc);
}

static void test_retry_breaker_limits_errors(void **state)
{
	expect_field("{" BASE ",\"retry\":{\"jitter\":1.5}}", 400, "retry.jitter");
	expect_field("{" BASE ",\"retry\":{\"jitter\":\"0.5\"}}", 400, "retry.jitter");
	expect_field("{" BASE ",\"retry\":{\"permanent\":410}}", 400, "retry.permanent");
	expect_field("{" BASE ",\"retry\":{\"permanent\":[410,200]}}", 422, "retry.permanent[1]");
	expect_field("{" BASE ",\"retry\":{\"permanent\":[600]}}", 422, "retry.permanent[0]");
	expect_field("{" BASE ",\"retry\":{\"permanent\":[\"410\"]}}", 422, "retry.permanent[0]");
	expect_field("{" BASE ",\"retry\":{\"retry_after_max\":\"1\"}}", 400, "retry.retry_after_max");
	expect_field("{" BASE ",\"circuit_breaker\":true}", 400, "circuit_breaker");
	expect_field("{" BASE ",\"circuit_breaker\":{\"max_errors\":0}}", 422,
		     "circuit_breaker.max_errors");
	expect_field("{" BASE ",\"circuit_breaker\":{\"failure_window\":\"10ms\"}}", 422,
		     "circuit_breaker.failure_window");
	expect_field("{" BASE ",\"circuit_breaker\":{\"max_delay_actions\":-1}}", 422,
		     "circuit_breaker.max_delay_actions");
	expect_field("{" BASE ",\"circuit_breaker\":{\"enabled\":1}}", 400,
		     "circuit_breaker.enabled");
	expect_field("{" BASE ",\"circuit_breaker\":{\"open\":1}}", 400, "circuit_breaker.open");
	expect_field("{" BASE ",\"max_in_flight\":0}", 422, "max_in_flight");
	expect_field("{" BASE ",\"max_in_flight\":1.5}", 400, "max_in_flight");
	expect_field("{" BASE ",\"concurrency\":0}", 422, "concurrency");
	expect_field("{" BASE ",\"concurrency\":\"16\"}", 400, "concurrency");
	expect_field("{" BASE ",\"rate_limit\":0}", 400, "rate_limit");
	expect_field("{" BASE ",\"rate_limit\":-2}", 400, "rate_limit");
	expect_field("{" BASE ",\"rate_limit\":\"5/s\"}", 400, "rate_limit");
	expect_field("{" BASE ",\"rate_limit\":1e9}", 400, "rate_limit");
}

#define KAFKA "\"name\":\"k\",\"event_types\":[\"*\"],\"endpoint\":\"kafka://orders.events\""

/* kafka://TOPIC: a topic name, no HTTP-only fields, payload_format envelope allowed. */
static void test_kafka_endpoints(void **state)
{
	json_t *doc = json_loads("{" KAFKA ",\"payload_format\":\"envelope\","
				 "\"headers\":{\"x-team\":\"growth\"}}", 0, NULL);
	struct subscription s;
	struct input_error err;
	assert_int_equal(sub_codec_parse(doc, &defaults, &s, &err), 0);
	assert_int_equal(s.payload_format, PAYLOAD_ENVELOPE);
	assert_null(s.origin);
	subscription_clear(&s);
	json_decref(doc);

	expect_field("{\"name\":\"k\",\"event_types\":[\"*\"],\"endpoint\":\"kafka://\"}", 400,
		     "endpoint");
	expect_field("{\"name\":\"k\",\"event_types\":[\"*\"],\"endpoint\":\"kafka://a/b\"}", 400,
		     "endpoint");
	expect_field("{\"name\":\"k\",\"event_types\":[\"*\"],\"endpoint\":\"kafka://..\"}", 400,
		     "endpoint");
	expect_field("{" KAFKA ",\"auth\":{\"type\":\"basic\",\"username\":\"u\",\"password\":\"p\"}}",
		     422, "auth");
	expect_field("{" KAFKA ",\"secret\":\"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"}", 422, "secret");
	expect_field("{" BASE ",\"payload_format\":\"envelope\"}", 422, "payload_format");
	expect_field("{" BASE ",\"payload_format\":\"xml\"}", 400, "payload_format");
	/* origin: only outboxd's own value, and only then may event_types be empty */
	expect_field("{" BASE ",\"origin\":\"mine\"}", 400, "origin");
	expect_field("{\"name\":\"k\",\"event_types\":[],\"endpoint\":\"https://h.example/\"}", 400,
		     "event_types");
	doc = json_loads("{\"name\":\"envelope:1\",\"event_types\":[],\"origin\":\"kafka_envelope\","
			 "\"endpoint\":\"https://h.example/\"}", 0, NULL);
	assert_int_equal(sub_codec_parse(doc, &defaults, &s, &err), 0);
	assert_string_equal(s.origin, "kafka_envelope");
	subscription_clear(&s);
	json_decref(doc);
}

/* An option the endpoint's member does not support is a 422 naming the field and what the
 * member takes instead (core/sink_caps.c), never stored and ignored; what it supports
 * passes. */
static void test_options_by_capability(void **state)
{
	static const struct {
		const char *json;
		const char *field;
		const char *message; /* NULL: not checked */
	} refused[] = {
		{"{" KAFKA ",\"auth\":{\"type\":\"bearer\",\"token\":\"t\"}}", "auth",
		 "auth: kafka:// endpoints take no auth; Kafka credentials and TLS go in the "
		 "kafka_config setting"},
		{"{" KAFKA ",\"auth\":{\"type\":\"oauth2\"}}", "auth", NULL},
		{"{" KAFKA ",\"tls\":{\"ca_file\":\"/ca.pem\"}}", "tls", NULL},
		{"{" KAFKA ",\"secret\":\"generate\"}", "secret",
		 "secret: kafka:// endpoints take no signing secret; remove secret and "
		 "secret_grace"},
		{"{" KAFKA ",\"secret_grace\":\"1h\"}", "secret_grace", NULL},
		{"{\"name\":\"n\",\"event_types\":[\"*\"],\"endpoint\":\"http://h.example/\","
		 "\"tls\":{\"ca_file\":\"/ca.pem\"}}", "tls",
		 "tls: http:// endpoints take no tls; TLS files are for https:// endpoints"},
		{"{" BASE ",\"payload_format\":\"envelope\"}", "payload_format",
		 "payload_format: https:// endpoints take no payload_format envelope; use json or "
		 "binary"},
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		json_t *doc = json_loads(refused[i].json, 0, NULL);
		struct input_error err;
		assert_non_null(doc);
		assert_int_equal(sub_codec_parse(doc, &defaults, NULL, &err), -1);
		assert_int_equal(err.status, 422);
		assert_string_equal(err.field, refused[i].field);
		if (refused[i].message)
			assert_string_equal(err.message, refused[i].message);
		json_decref(doc);
	}
	/* what Kafka takes: a timeout for its acknowledgement, headers, ordering, the
	 * envelope, auth of type none */
	static const char *const taken[] = {
		"{" KAFKA ",\"timeout\":\"10s\",\"retry\":{\"timeout\":\"20s\"}}",
		"{" KAFKA ",\"headers\":{\"x-team\":\"growth\"},\"payload_format\":\"envelope\"}",
		"{" KAFKA ",\"ordering\":\"partition_key\",\"ordering_on_dead\":\"skip\"}",
		"{" KAFKA ",\"auth\":{\"type\":\"none\"},\"tls\":{},\"headers\":{}}",
		"{" BASE ",\"tls\":{\"ca_file\":\"/ca.pem\"},\"secret_grace\":\"1h\"}",
	};
	for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++) {
		json_t *doc = json_loads(taken[i], 0, NULL);
		struct input_error err;
		if (sub_codec_parse(doc, &defaults, NULL, &err))
			fail_msg("%s: %s", taken[i], err.message);
		json_decref(doc);
	}
}

/* The capability rules bind new input only: a stored row with an option its member does
 * not take (stored before the rule, or by an outboxd that took it) still loads, so
 * the set of subscriptions keeps loading. */
static void test_stored_rows_load_with_unsupported_options(void **state)
{
	const char *text = "{" KAFKA ",\"secret_grace\":\"1h\",\"timeout\":\"3s\"}";
	struct sub_row row = {.id = "01890a5d-ac96-774b-bcce-b302099a8057", .name = "k",
			      .config = (char *)text, .enabled = 1};
	struct subscription *s = sub_codec_from_row(&row, &defaults);
	assert_non_null(s);
	assert_int_equal(s->retry.immediate_timeout_ms, 3000);
	subscription_free(s);
	text = "{\"name\":\"h\",\"event_types\":[\"*\"],\"endpoint\":\"http://h.example/\","
	       "\"tls\":{\"ca_file\":\"/ca.pem\"}}";
	row.config = (char *)text;
	assert_non_null(s = sub_codec_from_row(&row, &defaults));
	subscription_free(s);
	expect_field(text, 422, "tls");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kafka_endpoints),
		cmocka_unit_test(test_options_by_capability),
		cmocka_unit_test(test_stored_rows_load_with_unsupported_options),
		cmocka_unit_test(test_valid_with_defaults),
		cmocka_unit_test(test_max_retries_follows_policy),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_ipv6_endpoints),
		cmocka_unit_test(test_public_view_masks),
		cmocka_unit_test(test_merge),
		cmocka_unit_test(test_oauth2_and_tls_parsed),
		cmocka_unit_test(test_public_masks_oauth2_and_previous),
		cmocka_unit_test(test_generate_secret),
		cmocka_unit_test(test_rotation),
		cmocka_unit_test(test_masked_auth_kept_on_patch),
		cmocka_unit_test(test_tls_files_inside_tls_dir),
		cmocka_unit_test(test_header_injection_refused),
		cmocka_unit_test(test_stored_rows_load_under_older_rules),
		cmocka_unit_test(test_secret_headers),
		cmocka_unit_test(test_credentials_do_not_move),
		cmocka_unit_test(test_retry_breaker_limits_parsed),
		cmocka_unit_test(test_retry_breaker_limits_errors),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
