/* test_envelope.c: the OutboxEvent codec (src/kafka/envelope.c) — plain and Schema Registry
 * framing, interop with the reference encoder (protoc), bad input, and the subscription
 * document of an envelope's target. No broker, no daemon. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/sub_codec.h"
#include "kafka/envelope.h"

/* Made by the reference encoder:
 *   protoc --encode=outboxd.v1.OutboxEvent --proto_path=proto \
 *          proto/outboxd/v1/outbox_event.proto < env.txt
 * with env.txt:
 *   event { id: "0190a0b0-0000-7000-8000-000000000001" type: "user.created"
 *           source: "accounts" partition_key: "user-1" payload: "{\"id\":1}"
 *           created_at_ms: 1700000000000 }
 *   endpoint: "https://hooks.example.com/users"
 *   auth { type: OAUTH grant_type: "client_credentials"
 *          token_url: "https://idp.example.com/token" client_id: "outboxd"
 *          client_secret: "s3cret" scope: "events" }
 *   payload_type: PAYLOAD_TYPE_JSON
 *   timeout_ms: 1500
 *   headers { key: "X-Team" value: "growth" }
 *   traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" */
static const unsigned char protoc_bytes[] = {
	  0x0a, 0x57, 0x0a, 0x24, 0x30, 0x31, 0x39, 0x30, 0x61, 0x30, 0x62, 0x30,
	  0x2d, 0x30, 0x30, 0x30, 0x30, 0x2d, 0x37, 0x30, 0x30, 0x30, 0x2d, 0x38,
	  0x30, 0x30, 0x30, 0x2d, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
	  0x30, 0x30, 0x30, 0x31, 0x12, 0x0c, 0x75, 0x73, 0x65, 0x72, 0x2e, 0x63,
	  0x72, 0x65, 0x61, 0x74, 0x65, 0x64, 0x1a, 0x08, 0x61, 0x63, 0x63, 0x6f,
	  0x75, 0x6e, 0x74, 0x73, 0x2a, 0x06, 0x75, 0x73, 0x65, 0x72, 0x2d, 0x31,
	  0x32, 0x08, 0x7b, 0x22, 0x69, 0x64, 0x22, 0x3a, 0x31, 0x7d, 0x38, 0x80,
	  0xd0, 0x95, 0xff, 0xbc, 0x31, 0x12, 0x1f, 0x68, 0x74, 0x74, 0x70, 0x73,
	  0x3a, 0x2f, 0x2f, 0x68, 0x6f, 0x6f, 0x6b, 0x73, 0x2e, 0x65, 0x78, 0x61,
	  0x6d, 0x70, 0x6c, 0x65, 0x2e, 0x63, 0x6f, 0x6d, 0x2f, 0x75, 0x73, 0x65,
	  0x72, 0x73, 0x22, 0x4e, 0x08, 0x02, 0x3a, 0x12, 0x63, 0x6c, 0x69, 0x65,
	  0x6e, 0x74, 0x5f, 0x63, 0x72, 0x65, 0x64, 0x65, 0x6e, 0x74, 0x69, 0x61,
	  0x6c, 0x73, 0x42, 0x1d, 0x68, 0x74, 0x74, 0x70, 0x73, 0x3a, 0x2f, 0x2f,
	  0x69, 0x64, 0x70, 0x2e, 0x65, 0x78, 0x61, 0x6d, 0x70, 0x6c, 0x65, 0x2e,
	  0x63, 0x6f, 0x6d, 0x2f, 0x74, 0x6f, 0x6b, 0x65, 0x6e, 0x4a, 0x07, 0x6f,
	  0x75, 0x74, 0x62, 0x6f, 0x78, 0x64, 0x52, 0x06, 0x73, 0x33, 0x63, 0x72,
	  0x65, 0x74, 0x5a, 0x06, 0x65, 0x76, 0x65, 0x6e, 0x74, 0x73, 0x28, 0x01,
	  0x30, 0xdc, 0x0b, 0x3a, 0x10, 0x0a, 0x06, 0x58, 0x2d, 0x54, 0x65, 0x61,
	  0x6d, 0x12, 0x06, 0x67, 0x72, 0x6f, 0x77, 0x74, 0x68, 0x4a, 0x37, 0x30,
	  0x30, 0x2d, 0x30, 0x61, 0x66, 0x37, 0x36, 0x35, 0x31, 0x39, 0x31, 0x36,
	  0x63, 0x64, 0x34, 0x33, 0x64, 0x64, 0x38, 0x34, 0x34, 0x38, 0x65, 0x62,
	  0x32, 0x31, 0x31, 0x63, 0x38, 0x30, 0x33, 0x31, 0x39, 0x63, 0x2d, 0x62,
	  0x37, 0x61, 0x64, 0x36, 0x62, 0x37, 0x31, 0x36, 0x39, 0x32, 0x30, 0x33,
	  0x33, 0x33, 0x31, 0x2d, 0x30, 0x31
};

static void test_decodes_the_reference_encoding(void **state)
{
	(void)state;
	struct envelope e;
	char why[256];
	assert_int_equal(envelope_decode(protoc_bytes, sizeof(protoc_bytes), &e, why, sizeof(why)), 0);
	assert_string_equal(e.id, "0190a0b0-0000-7000-8000-000000000001");
	assert_string_equal(e.type, "user.created");
	assert_string_equal(e.source, "accounts");
	assert_string_equal(e.partition_key, "user-1");
	assert_int_equal(e.payload_len, 8);
	assert_memory_equal(e.payload, "{\"id\":1}", 8);
	assert_true(e.created_at_ms == 1700000000000LL);
	assert_string_equal(e.endpoint, "https://hooks.example.com/users");
	assert_int_equal(e.auth_type, ENVELOPE_AUTH_OAUTH);
	assert_string_equal(e.client_secret, "s3cret");
	assert_string_equal(e.scope, "events");
	assert_int_equal(e.payload_type, ENVELOPE_PAYLOAD_JSON);
	assert_int_equal(e.timeout_ms, 1500);
	assert_int_equal(e.n_headers, 1);
	assert_string_equal(e.headers[0].name, "X-Team");
	assert_string_equal(e.traceparent, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
	envelope_free(&e);
}

/* The Schema Registry frame: magic 0, schema id, then the message-index list. */
static void test_decodes_schema_registry_frames(void **state)
{
	(void)state;
	unsigned char buf[sizeof(protoc_bytes) + 16];
	struct envelope e;
	char why[256];
	/* index list [0] written as the single byte 0 */
	static const unsigned char short_frame[] = {0, 0, 0, 0, 42, 0};
	memcpy(buf, short_frame, sizeof(short_frame));
	memcpy(buf + sizeof(short_frame), protoc_bytes, sizeof(protoc_bytes));
	assert_int_equal(envelope_decode(buf, sizeof(short_frame) + sizeof(protoc_bytes), &e, why,
					 sizeof(why)), 0);
	assert_string_equal(e.type, "user.created");
	envelope_free(&e);
	/* index list [1, 0]: count 2, then 1 and 0, zig-zag encoded (4, 2, 0) */
	static const unsigned char long_frame[] = {0, 0, 0, 1, 0, 4, 2, 0};
	memcpy(buf, long_frame, sizeof(long_frame));
	memcpy(buf + sizeof(long_frame), protoc_bytes, sizeof(protoc_bytes));
	assert_int_equal(envelope_decode(buf, sizeof(long_frame) + sizeof(protoc_bytes), &e, why,
					 sizeof(why)), 0);
	assert_string_equal(e.endpoint, "https://hooks.example.com/users");
	envelope_free(&e);
	/* truncated: the list says two indexes and stops */
	static const unsigned char cut[] = {0, 0, 0, 0, 1, 4, 0x82};
	assert_int_equal(envelope_decode(cut, sizeof(cut), &e, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "Schema Registry"));
}

static void test_refuses_what_is_not_an_envelope(void **state)
{
	(void)state;
	struct envelope e;
	char why[256];
	const char *garbage = "this is not protobuf \x01\x02";
	assert_int_equal(envelope_decode(garbage, strlen(garbage), &e, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "not an OutboxEvent"));
	assert_int_equal(envelope_decode("", 0, &e, why, sizeof(why)), -1);
	/* a valid OutboxEvent without an event type */
	struct envelope_out out = {.endpoint = "https://x.example/"};
	void *bytes;
	size_t len;
	assert_int_equal(envelope_encode(&out, ENVELOPE_WIRE_PLAIN, 0, 0, &bytes, &len), 0);
	assert_int_equal(envelope_decode(bytes, len, &e, why, sizeof(why)), -1);
	assert_string_equal(why, "event.type is empty");
	free(bytes);
}

/* What outboxd writes reads back the same, in both framings, every byte of the payload
 * included. */
static void test_round_trip(void **state)
{
	(void)state;
	unsigned char payload[256];
	for (int i = 0; i < 256; i++)
		payload[i] = (unsigned char)i;
	struct header_kv hdr = {"x-k", "v", 0};
	struct subscription basic = {.auth_type = AUTH_BASIC, .auth_user = "alice",
				     .auth_secret = "pw"};
	struct envelope_out out = {
		.id = "id-1", .type = "blob.saved", .source = "kafka:blobs", .partition_key = "k",
		.payload = payload, .payload_len = sizeof(payload), .created_at_ms = 5,
		.endpoint = "https://r.example/in", .payload_type = ENVELOPE_PAYLOAD_BINARY,
		.headers = &hdr, .n_headers = 1, .auth_from = &basic,
	};
	for (int wire = 0; wire < 2; wire++) {
		void *bytes;
		size_t len;
		struct envelope e;
		char why[256];
		assert_int_equal(envelope_encode(&out, wire, 77, ENVELOPE_OUTBOX_EVENT_INDEX, &bytes,
						 &len), 0);
		if (wire == ENVELOPE_WIRE_CONFLUENT) {
			const unsigned char *b = bytes;
			assert_int_equal(b[0], 0);
			assert_int_equal(b[4], 77);
			assert_int_equal(b[5], 2); /* the list [2]: count 1, index 2, zig-zag */
			assert_int_equal(b[6], 4);
		}
		assert_int_equal(envelope_decode(bytes, len, &e, why, sizeof(why)), 0);
		assert_int_equal(e.payload_len, sizeof(payload));
		assert_memory_equal(e.payload, payload, sizeof(payload));
		assert_string_equal(e.partition_key, "k");
		assert_int_equal(e.auth_type, ENVELOPE_AUTH_BASIC);
		assert_string_equal(e.username, "alice");
		assert_string_equal(e.password, "pw");
		assert_string_equal(e.headers[0].value, "v");
		envelope_free(&e);
		free(bytes);
	}
}

/* Decodes an envelope with endpoint and the given auth fields (NULL: unset). */
static void make(struct envelope *e, int auth_type, const char *user, const char *pass,
		 const char *token)
{
	struct envelope_out out = {.id = "x", .type = "t", .endpoint = "https://r.example/hook"};
	void *bytes;
	size_t len;
	char why[128];
	assert_int_equal(envelope_encode(&out, ENVELOPE_WIRE_PLAIN, 0, 0, &bytes, &len), 0);
	assert_int_equal(envelope_decode(bytes, len, e, why, sizeof(why)), 0);
	free(bytes);
	e->has_auth = auth_type >= 0;
	e->auth_type = auth_type;
	if (user) {
		free(e->username);
		e->username = strdup(user);
	}
	if (pass) {
		free(e->password);
		e->password = strdup(pass);
	}
	if (token) {
		free(e->token);
		e->token = strdup(token);
	}
}

static const char *auth_type_of(json_t *doc)
{
	return json_string_value(json_object_get(json_object_get(doc, "auth"), "type"));
}

static void test_subscription_of_each_auth_type(void **state)
{
	(void)state;
	static const struct {
		int type;
		const char *want;
	} rows[] = {
		{ENVELOPE_AUTH_BASIC, "basic"},         {ENVELOPE_AUTH_HEADER_TOKEN, "bearer"},
		{ENVELOPE_AUTH_JWT_HEADER, "bearer"},   {ENVELOPE_AUTH_QUERY_PARAMETER, "query"},
		{ENVELOPE_AUTH_API_KEY, "api_key"},
	};
	struct retry_policy defaults;
	retry_policy_defaults(&defaults);
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct envelope e;
		char id[UUID_STR_LEN], why[256];
		struct input_error err;
		make(&e, rows[i].type, "u", "p", "tok");
		json_t *doc = envelope_subscription_doc(&e, id, why, sizeof(why));
		assert_non_null(doc);
		assert_string_equal(auth_type_of(doc), rows[i].want);
		assert_string_equal(json_string_value(json_object_get(doc, "origin")), "kafka_envelope");
		assert_int_equal(json_array_size(json_object_get(doc, "event_types")), 0);
		/* what outboxd derives, its own API codec accepts */
		assert_int_equal(sub_codec_parse(doc, &defaults, NULL, &err), 0);
		json_decref(doc);
		envelope_free(&e);
	}
}

static void test_subscription_id_follows_the_target(void **state)
{
	(void)state;
	struct envelope a, b, c;
	char ida[UUID_STR_LEN], idb[UUID_STR_LEN], idc[UUID_STR_LEN], why[256];
	make(&a, ENVELOPE_AUTH_BASIC, "u", "p1", NULL);
	make(&b, ENVELOPE_AUTH_BASIC, "u", "p1", NULL);
	make(&c, ENVELOPE_AUTH_BASIC, "u", "p2", NULL);
	json_t *da = envelope_subscription_doc(&a, ida, why, sizeof(why));
	json_t *db = envelope_subscription_doc(&b, idb, why, sizeof(why));
	json_t *dc = envelope_subscription_doc(&c, idc, why, sizeof(why));
	assert_string_equal(ida, idb);       /* same target, same subscription */
	assert_string_not_equal(ida, idc);   /* a changed credential is another */
	assert_int_equal(ida[14], '8');      /* UUID version 8 */
	json_decref(da);
	json_decref(db);
	json_decref(dc);
	envelope_free(&a);
	envelope_free(&b);
	envelope_free(&c);
}

static void test_targets_that_cannot_be_subscriptions(void **state)
{
	(void)state;
	struct envelope e;
	char id[UUID_STR_LEN], why[256];
	make(&e, 9, NULL, NULL, NULL);
	assert_null(envelope_subscription_doc(&e, id, why, sizeof(why)));
	assert_string_equal(why, "auth.type 9 is not a known AuthType");
	envelope_free(&e);
	make(&e, ENVELOPE_AUTH_BASIC, NULL, NULL, NULL);
	assert_null(envelope_subscription_doc(&e, id, why, sizeof(why)));
	assert_non_null(strstr(why, "auth.username"));
	envelope_free(&e);
	/* an endpoint the API would refuse: the doc is made, sub_codec_parse says why */
	make(&e, -1, NULL, NULL, NULL);
	free(e.endpoint);
	e.endpoint = strdup("ftp://files.example");
	json_t *doc = envelope_subscription_doc(&e, id, why, sizeof(why));
	struct retry_policy defaults;
	struct input_error err;
	retry_policy_defaults(&defaults);
	assert_int_equal(sub_codec_parse(doc, &defaults, NULL, &err), -1);
	assert_string_equal(err.field, "endpoint");
	json_decref(doc);
	envelope_free(&e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decodes_the_reference_encoding),
		cmocka_unit_test(test_decodes_schema_registry_frames),
		cmocka_unit_test(test_refuses_what_is_not_an_envelope),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_subscription_of_each_auth_type),
		cmocka_unit_test(test_subscription_id_follows_the_target),
		cmocka_unit_test(test_targets_that_cannot_be_subscriptions),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
