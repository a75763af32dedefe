/* test_envelope_view.c: the API's view of an OutboxEvent (src/kafka/envelope.c:
 * envelope_view, envelope_to_json, envelope_redact) — the message as bytes and parsed,
 * its credentials masked in both, its framing kept, and a message that is no envelope
 * shown as bytes with why it could not be parsed. No broker, no daemon. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kafka/envelope.h"
#include "util/base64.h"

/* The bytes of raw_base64 in view v, into buf (cap bytes); returns their length. */
static size_t raw_of(const json_t *v, unsigned char *buf, size_t cap)
{
	const char *b64 = json_string_value(json_object_get(v, "raw_base64"));
	size_t n = 0;
	assert_non_null(b64);
	assert_int_equal(base64_decode(b64, strlen(b64), buf, cap, &n), 0);
	return n;
}

/* An envelope without credentials: the bytes exactly, and every field parsed. */
static void test_view_of_an_envelope(void **state)
{
	(void)state;
	struct header_kv hdr = {"X-Team", "growth", 0};
	const char *payload = "{\"id\":7,\"name\":\"ada\"}";
	struct envelope_out out = {
		.id = "0190a0b0-0000-7000-8000-000000000007", .type = "user.created",
		.source = "accounts", .source_event_id = "acc-7", .partition_key = "user-7",
		.payload = payload, .payload_len = strlen(payload), .created_at_ms = 1700000000000LL,
		.endpoint = "https://hooks.example.com/users", .payload_type = ENVELOPE_PAYLOAD_JSON,
		.timeout_ms = 1500, .headers = &hdr, .n_headers = 1, .subscription_id = "sub-9",
		.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	};
	void *bytes;
	size_t len;
	unsigned char raw[1024];
	assert_int_equal(envelope_encode(&out, ENVELOPE_WIRE_PLAIN, 0, 0, &bytes, &len), 0);
	void *masked = (void *)1;
	size_t masked_len = 1;
	assert_int_equal(envelope_redact(bytes, len, &masked, &masked_len), 0);
	assert_null(masked);

	json_t *v = envelope_view(bytes, len);
	assert_non_null(v);
	assert_int_equal(raw_of(v, raw, sizeof(raw)), len);
	assert_memory_equal(raw, bytes, len);
	assert_string_equal(json_string_value(json_object_get(v, "wire_format")), "plain");
	assert_null(json_object_get(v, "schema_id"));
	assert_true(json_is_false(json_object_get(v, "redacted")));
	assert_true(json_is_null(json_object_get(v, "parse_error")));
	json_t *p = json_object_get(v, "parsed");
	json_t *ev = json_object_get(p, "event");
	assert_string_equal(json_string_value(json_object_get(ev, "id")), out.id);
	assert_string_equal(json_string_value(json_object_get(ev, "type")), "user.created");
	assert_string_equal(json_string_value(json_object_get(ev, "source")), "accounts");
	assert_string_equal(json_string_value(json_object_get(ev, "source_event_id")), "acc-7");
	assert_string_equal(json_string_value(json_object_get(ev, "partition_key")), "user-7");
	assert_true(json_integer_value(json_object_get(ev, "created_at_ms")) == 1700000000000LL);
	/* a JSON payload is shown as JSON */
	json_t *want = json_loads(payload, 0, NULL);
	assert_true(json_equal(json_object_get(ev, "payload"), want));
	json_decref(want);
	assert_null(json_object_get(ev, "payload_base64"));
	assert_string_equal(json_string_value(json_object_get(p, "endpoint")), out.endpoint);
	assert_string_equal(json_string_value(json_object_get(p, "protocol")),
			    "PROTOCOL_UNSPECIFIED");
	assert_true(json_is_null(json_object_get(p, "auth")));
	assert_string_equal(json_string_value(json_object_get(p, "payload_type")),
			    "PAYLOAD_TYPE_JSON");
	assert_int_equal(json_integer_value(json_object_get(p, "timeout_ms")), 1500);
	assert_string_equal(json_string_value(json_object_get(json_object_get(p, "headers"),
							      "X-Team")), "growth");
	assert_string_equal(json_string_value(json_object_get(p, "subscription_id")), "sub-9");
	assert_string_equal(json_string_value(json_object_get(p, "traceparent")), out.traceparent);
	json_decref(v);
	free(bytes);
}

/* Credentials are masked in the bytes and in the parsed form, whatever the auth type, and
 * the Schema Registry frame stays as it came. */
static void test_view_masks_credentials(void **state)
{
	(void)state;
	struct subscription oauth = {.auth_type = AUTH_OAUTH2};
	oauth.oauth2.grant = OAUTH2_PASSWORD;
	oauth.oauth2.token_url = "https://idp.example.com/token";
	oauth.oauth2.client_id = "outboxd";
	oauth.oauth2.client_secret = "cl-s3cret";
	oauth.oauth2.username = "svc";
	oauth.oauth2.password = "pw-s3cret";
	struct subscription bearer = {.auth_type = AUTH_BEARER, .auth_secret = "tok-s3cret"};
	struct header_kv hdrs[2] = {{"authorization", "Bearer hdr-s3cret", 0},
				    {"X-Team", "growth", 0}};
	const struct subscription *auths[2] = {&oauth, &bearer};
	for (int k = 0; k < 2; k++) {
		struct envelope_out out = {
			.id = "e-1", .type = "user.created", .payload = "\x01\x02", .payload_len = 2,
			.payload_type = ENVELOPE_PAYLOAD_BINARY, .endpoint = "https://r.example/in",
			.headers = hdrs, .n_headers = 2, .auth_from = auths[k],
		};
		void *bytes, *masked;
		size_t len, masked_len;
		unsigned char raw[1024];
		struct envelope e;
		char why[256];
		assert_int_equal(envelope_encode(&out, ENVELOPE_WIRE_CONFLUENT, 513, 0, &bytes, &len), 0);
		assert_non_null(memmem(bytes, len, "s3cret", 6));

		/* the masked copy: same frame, credentials "********", the rest kept */
		assert_int_equal(envelope_redact(bytes, len, &masked, &masked_len), 1);
		assert_null(memmem(masked, masked_len, "s3cret", 6));
		assert_memory_equal(masked, bytes, 6);
		assert_int_equal(envelope_decode(masked, masked_len, &e, why, sizeof(why)), 0);
		assert_string_equal(e.headers[0].value, ENVELOPE_MASK);
		assert_string_equal(e.headers[1].value, "growth");
		if (k == 0) {
			assert_string_equal(e.client_secret, ENVELOPE_MASK);
			assert_string_equal(e.password, ENVELOPE_MASK);
			assert_string_equal(e.username, "svc");
			assert_string_equal(e.client_id, "outboxd");
		} else {
			assert_string_equal(e.token, ENVELOPE_MASK);
		}
		envelope_free(&e);
		/* masking what is masked changes nothing */
		void *again = NULL;
		size_t again_len = 0;
		assert_int_equal(envelope_redact(masked, masked_len, &again, &again_len), 0);
		assert_null(again);

		json_t *v = envelope_view(bytes, len);
		assert_non_null(v);
		size_t n = raw_of(v, raw, sizeof(raw));
		assert_int_equal(n, masked_len);
		assert_memory_equal(raw, masked, masked_len);
		assert_true(json_is_true(json_object_get(v, "redacted")));
		assert_string_equal(json_string_value(json_object_get(v, "wire_format")), "confluent");
		assert_int_equal(json_integer_value(json_object_get(v, "schema_id")), 513);
		json_t *p = json_object_get(v, "parsed");
		json_t *a = json_object_get(p, "auth");
		if (k == 0) {
			assert_string_equal(json_string_value(json_object_get(a, "type")), "OAUTH");
			assert_string_equal(json_string_value(json_object_get(a, "client_secret")),
					    ENVELOPE_MASK);
			assert_string_equal(json_string_value(json_object_get(a, "password")),
					    ENVELOPE_MASK);
			assert_string_equal(json_string_value(json_object_get(a, "grant_type")),
					    "password");
		} else {
			assert_string_equal(json_string_value(json_object_get(a, "type")),
					    "HEADER_TOKEN");
			assert_string_equal(json_string_value(json_object_get(a, "token")),
					    ENVELOPE_MASK);
		}
		assert_string_equal(json_string_value(json_object_get(json_object_get(p, "headers"),
								      "authorization")),
				    ENVELOPE_MASK);
		/* a binary payload is shown in base64 */
		assert_string_equal(json_string_value(json_object_get(json_object_get(p, "event"),
								      "payload_base64")), "AQI=");
		char *text = json_dumps(v, JSON_COMPACT);
		assert_null(strstr(text, "s3cret"));
		free(text);
		json_decref(v);
		free(masked);
		free(bytes);
	}
}

/* A message that is not an envelope: its bytes as they are, parsed null, and why. */
static void test_view_of_what_is_not_an_envelope(void **state)
{
	(void)state;
	const char *garbage = "this is not protobuf \x01\x02";
	unsigned char raw[256];
	json_t *v = envelope_view(garbage, strlen(garbage));
	assert_non_null(v);
	assert_int_equal(raw_of(v, raw, sizeof(raw)), strlen(garbage));
	assert_memory_equal(raw, garbage, strlen(garbage));
	assert_true(json_is_null(json_object_get(v, "parsed")));
	assert_non_null(strstr(json_string_value(json_object_get(v, "parse_error")),
			       "not an OutboxEvent"));
	assert_true(json_is_false(json_object_get(v, "redacted")));
	json_decref(v);

	/* an OutboxEvent the intake refuses (no event type): parsed null with the reason */
	struct envelope_out out = {.endpoint = "https://x.example/"};
	void *bytes;
	size_t len;
	assert_int_equal(envelope_encode(&out, ENVELOPE_WIRE_PLAIN, 0, 0, &bytes, &len), 0);
	v = envelope_view(bytes, len);
	assert_true(json_is_null(json_object_get(v, "parsed")));
	assert_string_equal(json_string_value(json_object_get(v, "parse_error")),
			    "event.type is empty");
	json_decref(v);
	free(bytes);

	/* no bytes at all */
	v = envelope_view("", 0);
	assert_string_equal(json_string_value(json_object_get(v, "raw_base64")), "");
	assert_string_equal(json_string_value(json_object_get(v, "parse_error")), "empty message");
	json_decref(v);
}

/* Enum values the .proto does not name are kept as numbers. */
static void test_unknown_enum_values(void **state)
{
	(void)state;
	struct envelope e = {0};
	e.id = e.type = e.source = e.source_event_id = e.partition_key = e.endpoint = "";
	e.subscription_id = e.traceparent = "";
	e.type = "t";
	e.protocol = 9;
	e.payload_type = 7;
	e.has_auth = 1;
	e.auth_type = 42;
	e.username = e.password = e.token = e.param = e.header = e.grant_type = "";
	e.token_url = e.client_id = e.client_secret = e.scope = e.audience = "";
	json_t *p = envelope_to_json(&e);
	assert_int_equal(json_integer_value(json_object_get(p, "protocol")), 9);
	assert_int_equal(json_integer_value(json_object_get(p, "payload_type")), 7);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(p, "auth"), "type")),
			 42);
	assert_string_equal(json_string_value(json_object_get(json_object_get(p, "event"),
							      "payload_base64")), "");
	json_decref(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_view_of_an_envelope),
		cmocka_unit_test(test_view_masks_credentials),
		cmocka_unit_test(test_view_of_what_is_not_an_envelope),
		cmocka_unit_test(test_unknown_enum_values),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
