/* test_ingest.c: parsing of POST /v1/events bodies — exact payload bytes, batches,
 * field-named errors, limits, and fan-out. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "intake/ingest.h"
#include "util/uuid.h"

static void test_payload_bytes_kept(void **state)
{
	const char *body = "{\"event_type\":\"a.b\",\"payload\": {\"x\" : 0.1, \"big\":12345678901234567} ,"
			   "\"source\":\"s\",\"source_event_id\":\"k\"}";
	struct ingest_batch b;
	struct input_error err;
	assert_int_equal(ingest_parse(body, strlen(body), 1024, &b, &err), 0);
	assert_int_equal(b.n, 1);
	assert_false(b.is_batch);
	const char *want = "{\"x\" : 0.1, \"big\":12345678901234567}";
	assert_int_equal(b.events[0].payload_len, strlen(want));
	assert_memory_equal(b.events[0].payload, want, strlen(want));
	assert_string_equal(b.events[0].content_type, "application/json");
	assert_string_equal(b.events[0].source, "s");
	assert_string_equal(b.events[0].source_event_id, "k");
	assert_true(uuid_valid(b.events[0].id));
	ingest_batch_free(&b);
}

static void test_batch_spans(void **state)
{
	const char *body = "{\"events\":[{\"payload\":\"a,b]}\",\"event_type\":\"t.1\"},"
			   "{\"event_type\":\"t.2\",\"payload_base64\":\"AAE=\"},"
			   "{\"event_type\":\"t.3\",\"payload\":[1, {\"k\":\"}\"}]}]}";
	struct ingest_batch b;
	struct input_error err;
	assert_int_equal(ingest_parse(body, strlen(body), 1024, &b, &err), 0);
	assert_int_equal(b.n, 3);
	assert_true(b.is_batch);
	assert_int_equal(b.events[0].payload_len, strlen("\"a,b]}\""));
	assert_memory_equal(b.events[0].payload, "\"a,b]}\"", 7);
	assert_int_equal(b.events[1].payload_len, 2);
	assert_memory_equal(b.events[1].payload, "\x00\x01", 2);
	assert_string_equal(b.events[1].content_type, "application/octet-stream");
	assert_memory_equal(b.events[2].payload, "[1, {\"k\":\"}\"}]", b.events[2].payload_len);
	ingest_batch_free(&b);
}

static void expect_error(const char *body, int status, const char *field)
{
	struct ingest_batch b;
	struct input_error err;
	assert_int_equal(ingest_parse(body, strlen(body), 16, &b, &err), -1);
	assert_int_equal(err.status, status);
	assert_string_equal(err.field, field);
	assert_true(strlen(err.message) > 0);
}

static void test_errors_name_the_field(void **state)
{
	expect_error("{", 400, "");
	expect_error("{\"payload\":1}", 400, "event_type");
	expect_error("{\"event_type\":\"a b\",\"payload\":1}", 400, "event_type");
	expect_error("{\"event_type\":\"a*\",\"payload\":1}", 400, "event_type");
	expect_error("{\"event_type\":\"a\"}", 400, "payload");
	expect_error("{\"event_type\":\"a\",\"payload\":1,\"x\":2}", 400, "x");
	expect_error("{\"event_type\":\"a\",\"payload\":\"01234567890123456789\"}", 413, "payload");
	expect_error("{\"event_type\":\"a\",\"payload_base64\":\"!!!!\"}", 400, "payload_base64");
	expect_error("{\"event_type\":\"a\",\"source\":3,\"payload\":1}", 400, "source");
	expect_error("{\"events\":[]}", 400, "events");
	expect_error("{\"events\":[{\"event_type\":\"a\",\"payload\":1},{\"payload\":1}]}", 400,
		     "events[1].event_type");
	expect_error("{\"events\":[1]}", 400, "events[0]");
	expect_error("{\"events\":[],\"more\":1}", 400, "more");
	expect_error("{\"event_type\":\"a\",\"payload\":1,\"payload\":2}", 400, "");
}

static void test_fanout(void **state)
{
	struct sub_set *set = sub_set_new();
	const char *patterns[][2] = {{"user.*", NULL}, {"*", NULL}, {"order.paid", NULL}};
	for (int i = 0; i < 3; i++) {
		struct subscription *s = calloc(1, sizeof(*s));
		snprintf(s->id, sizeof(s->id), "00000000-0000-7000-8000-00000000000%d", i);
		s->event_types = calloc(1, sizeof(char *));
		s->event_types[0] = strdup(patterns[i][0]);
		s->n_event_types = 1;
		s->enabled = 1;
		assert_int_equal(sub_set_add(set, s), 0);
	}
	set->items[1]->enabled = 0; /* a disabled subscription gets nothing */
	const char *body = "{\"events\":[{\"event_type\":\"user.created\",\"payload\":1},"
			   "{\"event_type\":\"order.paid\",\"payload\":2},"
			   "{\"event_type\":\"misc\",\"payload\":3}]}";
	struct ingest_batch b;
	struct input_error err;
	assert_int_equal(ingest_parse(body, strlen(body), 1024, &b, &err), 0);
	assert_int_equal(ingest_fanout(&b, set), 0);
	assert_int_equal(b.events[0].n_subscriptions, 1);
	assert_string_equal(b.events[0].subscription_ids[0], set->items[0]->id);
	assert_int_equal(b.events[1].n_subscriptions, 1);
	assert_string_equal(b.events[1].subscription_ids[0], set->items[2]->id);
	assert_int_equal(b.events[2].n_subscriptions, 0);
	ingest_batch_free(&b);
	struct sub_registry reg;
	sub_registry_init(&reg);
	sub_registry_publish(&reg, set);
	sub_registry_destroy(&reg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_payload_bytes_kept),
		cmocka_unit_test(test_batch_spans),
		cmocka_unit_test(test_errors_name_the_field),
		cmocka_unit_test(test_fanout),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
