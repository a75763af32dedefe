/* test_sub_codec.c: subscription validation (every field named in errors), defaults,
 * masking of credentials, and PATCH merging. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <jansson.h>

#include "api/sub_codec.h"

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
	assert_int_equal(s.retry.immediate, 3);
	assert_int_equal(s.retry.interval_ms, 3000);
	assert_int_equal(s.retry.immediate_timeout_ms, 1000);
	assert_int_equal(s.retry.timeout_ms, 5000);
	assert_true(s.enabled);
	struct subscription *heap = malloc(sizeof(*heap));
	*heap = s;
	subscription_free(heap);
	json_decref(doc);
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
	expect_field("{" BASE ",\"auth\":{\"type\":\"magic\"}}", 400, "auth.type");
	expect_field("{" BASE ",\"auth\":{\"type\":\"basic\",\"username\":\"u\"}}", 400, "auth.password");
	expect_field("{" BASE ",\"auth\":{\"type\":\"bearer\",\"token\":\"t\",\"x\":1}}", 400, "auth.x");
	expect_field("{" BASE ",\"auth\":{\"type\":\"oauth2\"}}", 422, "auth.type");
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
	struct store_sub row = {
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid_with_defaults),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_public_view_masks),
		cmocka_unit_test(test_merge),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
