/* test_registry.c: the pure parts of the Schema Registry client (src/kafka/registry.c) —
 * the registration's body, the answers (an id, an error), the place of OutboxEvent in the
 * schema, the address shown without credentials, the subject — and the frame an envelope
 * gets with a registered schema's id and message index. No registry, no broker. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <poll.h>
#include <unistd.h>

#include "kafka/envelope.h"
#include "kafka/registry.h"

/* The file's text, NUL-terminated (returned; free it). */
static char *read_text(const char *path)
{
	FILE *f = fopen(path, "rb");
	assert_non_null(f);
	char *buf = calloc(1, 64 * 1024);
	assert_non_null(buf);
	size_t n = fread(buf, 1, 64 * 1024 - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

static void test_request_body(void **state)
{
	(void)state;
	const char *schema = "syntax = \"proto3\";\nmessage A { string s = 1; } // \"quoted\"\n";
	char *body = registry_request_body(schema);
	assert_non_null(body);
	json_t *o = json_loads(body, 0, NULL);
	assert_non_null(o);
	assert_string_equal(json_string_value(json_object_get(o, "schemaType")), "PROTOBUF");
	assert_string_equal(json_string_value(json_object_get(o, "schema")), schema);
	assert_int_equal(json_object_size(o), 2);
	json_decref(o);
	free(body);
}

static void test_parse_id(void **state)
{
	(void)state;
	uint32_t id = 0;
	char why[200];
	const char *ok = "{\"id\":42}";
	assert_int_equal(registry_parse_id(ok, strlen(ok), &id, why, sizeof(why)), 0);
	assert_int_equal(id, 42);
	/* other members are ignored; the body need not be NUL-terminated */
	const char *more = "{\"id\":7,\"version\":3}xxxx";
	assert_int_equal(registry_parse_id(more, strlen(more) - 4, &id, why, sizeof(why)), 0);
	assert_int_equal(id, 7);

	const char *bad[] = {"", "nope", "{}", "{\"id\":\"1\"}", "{\"id\":-1}",
			     "{\"id\":2147483648}", "{\"id\":1.5}", "[1]"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		id = 99;
		why[0] = '\0';
		assert_int_equal(registry_parse_id(bad[i], strlen(bad[i]), &id, why, sizeof(why)), -1);
		assert_int_equal(id, 99);
		assert_true(why[0] != '\0');
	}
}

static void test_error_text(void **state)
{
	(void)state;
	char out[300];
	const char *confluent = "{\"error_code\":409,\"message\":\"Schema being registered is "
				"incompatible\\nwith an earlier schema\"}";
	registry_error_text(409, confluent, strlen(confluent), out, sizeof(out));
	assert_string_equal(out, "HTTP 409: Schema being registered is incompatible with an "
				 "earlier schema (error_code 409)");
	const char *html = "<html>\r\nBad Gateway</html>";
	registry_error_text(502, html, strlen(html), out, sizeof(out));
	assert_string_equal(out, "HTTP 502: <html>  Bad Gateway</html>");
	registry_error_text(500, NULL, 0, out, sizeof(out));
	assert_string_equal(out, "HTTP 500");
	/* bounded by out */
	char big[2000];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	char small[32];
	registry_error_text(503, big, strlen(big), small, sizeof(small));
	assert_int_equal(strlen(small), sizeof(small) - 1);
}

static void test_message_index(void **state)
{
	(void)state;
	uint32_t index = 99;
	const char *proto =
		"syntax = \"proto3\";\n"
		"// message Commented { }\n"
		"/* message Blocked { } */\n"
		"enum E { A = 0; }\n"
		"message First { message Nested { } string s = 1 [default = \"message Fake {\"]; }\n"
		"message Second{}\n"
		"message   Third {\n  map<string, string> m = 1;\n}\n";
	assert_int_equal(registry_proto_message_index(proto, "First", &index), 0);
	assert_int_equal(index, 0);
	assert_int_equal(registry_proto_message_index(proto, "Second", &index), 0);
	assert_int_equal(index, 1);
	assert_int_equal(registry_proto_message_index(proto, "Third", &index), 0);
	assert_int_equal(index, 2);
	assert_int_equal(registry_proto_message_index(proto, "Nested", &index), -1);
	assert_int_equal(registry_proto_message_index(proto, "Commented", &index), -1);
	assert_int_equal(registry_proto_message_index(proto, "Blocked", &index), -1);
	assert_int_equal(registry_proto_message_index(proto, "Fake", &index), -1);
	assert_int_equal(registry_proto_message_index(proto, "Thi", &index), -1);

	/* the contract's file: Event and Auth come first */
	char *text = read_text(SOURCE_DIR "/proto/outboxd/v1/outbox_event.proto");
	assert_int_equal(registry_proto_message_index(text, "OutboxEvent", &index), 0);
	assert_int_equal(index, ENVELOPE_OUTBOX_EVENT_INDEX); /* what static framing writes */
	free(text);
}

static void test_url_shown(void **state)
{
	(void)state;
	char out[256];
	registry_url_shown("http://user:p%40ss@registry:8081/base", out, sizeof(out));
	assert_string_equal(out, "http://registry:8081/base");
	registry_url_shown("https://key:se@cret@registry", out, sizeof(out));
	assert_string_equal(out, "https://registry");
	registry_url_shown("http://registry:8081/a@b", out, sizeof(out));
	assert_string_equal(out, "http://registry:8081/a@b");
	registry_url_shown("http://registry:8081", out, sizeof(out));
	assert_string_equal(out, "http://registry:8081");
}

static void test_subject(void **state)
{
	(void)state;
	char out[16];
	assert_int_equal(registry_subject("orders", out, sizeof(out)), 0);
	assert_string_equal(out, "orders-value");
	assert_int_equal(registry_subject("orders.events", out, sizeof(out)), -1);
}

/* The frame of a registered schema: magic 0, the id big-endian, the index list [2] as
 * zig-zag varints (count 1 -> 2, index 2 -> 4); what envelope_decode reads back. */
static void test_frame_with_message_index(void **state)
{
	(void)state;
	struct envelope_out out = {.id = "id-1", .type = "t.x", .payload = "{}", .payload_len = 2};
	void *bytes;
	size_t len;
	struct envelope e;
	char why[256];
	assert_int_equal(envelope_encode(&out, ENVELOPE_WIRE_CONFLUENT, 0x01020304, 2, &bytes,
					 &len), 0);
	const unsigned char *b = bytes;
	const unsigned char head[] = {0, 1, 2, 3, 4, 2, 4};
	assert_memory_equal(b, head, sizeof(head));
	assert_int_equal(envelope_decode(bytes, len, &e, why, sizeof(why)), 0);
	assert_string_equal(e.type, "t.x");
	envelope_free(&e);
	free(bytes);
	/* a large index takes a multi-byte varint */
	assert_int_equal(envelope_encode(&out, ENVELOPE_WIRE_CONFLUENT, 9, 100, &bytes, &len), 0);
	b = bytes;
	assert_int_equal(b[5], 2);
	assert_int_equal(b[6], 0xc8);  /* 200 = 0xc8 0x01 */
	assert_int_equal(b[7], 0x01);
	assert_int_equal(envelope_decode(bytes, len, &e, why, sizeof(why)), 0);
	envelope_free(&e);
	free(bytes);
}

/* Waits up to 10 s for a byte on fd. 1 when one came. */
static int notified(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char byte;
	if (poll(&p, 1, 10000) != 1)
		return 0;
	return read(fd, &byte, 1) == 1;
}

/* The client without a registry: the first ask starts a registration and does not wait;
 * its thread says when it failed; the failure (with its cause, without credentials) is
 * then answered from memory for a second, and nothing was registered. */
static void test_unreachable_without_credentials(void **state)
{
	(void)state;
	char err[256], why[1024], again[1024];
	uint32_t id = 0;
	int fds[2];
	assert_int_equal(pipe(fds), 0);
	/* port 1 on loopback: nothing listens there */
	schema_registry *r = registry_open("http://alice:hunter2@127.0.0.1:1/", fds[1], err,
					   sizeof(err));
	assert_non_null(r);
	assert_int_equal(registry_message_index(r), 2);
	assert_int_equal(registry_schema_id(r, "orders", &id, why, sizeof(why)), REGISTRY_PENDING);
	/* asked again: still under way, or already refused (a refused connection on loopback
	 * takes microseconds: the thread may be done before this second ask) */
	int again_rc = registry_schema_id(r, "orders", &id, why, sizeof(why));
	assert_true(again_rc == REGISTRY_PENDING || again_rc == REGISTRY_UNREACHABLE);
	assert_true(notified(fds[0]));
	assert_int_equal(registry_schema_id(r, "orders", &id, why, sizeof(why)),
			 REGISTRY_UNREACHABLE);
	assert_non_null(strstr(why, "orders-value"));
	assert_non_null(strstr(why, "http://127.0.0.1:1"));
	assert_null(strstr(why, "hunter2"));
	assert_null(strstr(why, "alice"));
	assert_string_equal(registry_strerror(REGISTRY_UNREACHABLE), "schema registry unreachable");
	assert_int_equal(registry_schema_id(r, "orders", &id, again, sizeof(again)),
			 REGISTRY_UNREACHABLE);
	assert_string_equal(again, why);
	assert_int_equal(registry_registrations(r), 0);
	/* closing with a registration under way (another subject) does not wait for it */
	assert_int_equal(registry_schema_id(r, "other", &id, why, sizeof(why)), REGISTRY_PENDING);
	registry_close(r);
	close(fds[0]);
	close(fds[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_request_body),
		cmocka_unit_test(test_parse_id),
		cmocka_unit_test(test_error_text),
		cmocka_unit_test(test_message_index),
		cmocka_unit_test(test_url_shown),
		cmocka_unit_test(test_subject),
		cmocka_unit_test(test_frame_with_message_index),
		cmocka_unit_test(test_unreachable_without_credentials),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
