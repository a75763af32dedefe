/* test_ingest.c: parsing of POST /v1/events bodies — exact payload bytes, batches,
 * field-named errors, limits, and fan-out; and the allocations a batch's parse and
 * fan-out make, held to a budget per batch that does not grow with its events. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <stdio.h>

#include "alloc_count.h"
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
	/* the content type is a header of the event's requests: no line breaks in it */
	expect_error("{\"event_type\":\"a\",\"payload\":1,\"content_type\":"
		     "\"application/json\\r\\nX-Injected: 1\"}", 400, "content_type");
	expect_error("{\"events\":[{\"event_type\":\"a\",\"payload\":1,\"content_type\":"
		     "\"text/plain\\n\"}]}", 400, "events[0].content_type");
	expect_error("{\"events\":[],\"more\":1}", 400, "more");
	expect_error("{\"event_type\":\"a\",\"payload\":1,\"payload\":2}", 400, "");
}

/* The payload member is found by its decoded key, and its span survives whitespace
 * around every token and structure inside strings. */
static void test_payload_span_edge_cases(void **state)
{
	const char *body = " \n{ \"events\" : [ { \"event_type\" : \"a\" , \"pay\\u006coad\" :\t"
			   "[0.10, \"x\\\"]}\", {\"\\u00e9\":true}, \"caf\xc3\xa9\"] } ,\r\n"
			   "{\"p\\u0061yload\":null,\"event_type\":\"b\"},"
			   "{\"event_type\":\"c\",\"payload\":\"\\\\\"}] }\t";
	const char *want[] = {"[0.10, \"x\\\"]}\", {\"\\u00e9\":true}, \"caf\xc3\xa9\"]", "null",
			      "\"\\\\\""};
	struct ingest_batch b;
	struct input_error err;
	assert_int_equal(ingest_parse(body, strlen(body), 1024, &b, &err), 0);
	assert_int_equal(b.n, 3);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(b.events[i].payload_len, strlen(want[i]));
		assert_memory_equal(b.events[i].payload, want[i], strlen(want[i]));
	}
	ingest_batch_free(&b);
}

/* Integers beyond int64 (uint64 ids, say) are valid JSON and pass through as written;
 * only numbers beyond double range are refused, by jansson. */
static void test_big_integers_pass_through(void **state)
{
	const char *body = "{\"event_type\":\"a\",\"payload\":{\"id\":18446744073709551615,"
			   "\"n\":-99999999999999999999999}}";
	const char *want = "{\"id\":18446744073709551615,\"n\":-99999999999999999999999}";
	struct ingest_batch b;
	struct input_error err;
	assert_int_equal(ingest_parse(body, strlen(body), 1024, &b, &err), 0);
	assert_int_equal(b.events[0].payload_len, strlen(want));
	assert_memory_equal(b.events[0].payload, want, strlen(want));
	ingest_batch_free(&b);

	const char *huge = "{\"event_type\":\"a\",\"payload\":1e400}";
	assert_int_equal(ingest_parse(huge, strlen(huge), 1024, &b, &err), -1);
	assert_string_equal(err.code, "invalid_json");
}

/* Payloads are validated without building their tree (util/jsonvalid.h), and whatever
 * that check is not sure of goes to jansson: the outcome is jansson's either way. */
static void test_payload_checked_without_tree(void **state)
{
	static const char *const ok[] = {
		/* a surrogate pair and an escaped key: the check leaves them to jansson */
		"{\"event_type\":\"a\",\"payload\":{\"s\":\"\\ud83d\\ude00\",\"\\u0061\":1}}",
		/* a payload holding a "payload" member, and one that is null */
		"{\"events\":[{\"event_type\":\"a\",\"payload\":{\"payload\":[1,{\"payload\":2}]}},"
		"{\"payload\":null,\"event_type\":\"b\"}]}",
	};
	static const char *const want[][2] = {
		{"{\"s\":\"\\ud83d\\ude00\",\"\\u0061\":1}", NULL},
		{"{\"payload\":[1,{\"payload\":2}]}", "null"},
	};
	for (size_t i = 0; i < 2; i++) {
		struct ingest_batch b;
		struct input_error err;
		assert_int_equal(ingest_parse(ok[i], strlen(ok[i]), 1024, &b, &err), 0);
		for (size_t k = 0; k < b.n; k++) {
			assert_int_equal(b.events[k].payload_len, strlen(want[i][k]));
			assert_memory_equal(b.events[k].payload, want[i][k], strlen(want[i][k]));
		}
		ingest_batch_free(&b);
	}
	static const char *const bad[] = {
		"{\"event_type\":\"a\",\"payload\":{\"k\":1,\"k\":2}}",          /* duplicate key */
		"{\"event_type\":\"a\",\"payload\":{\"k\":1]}",                   /* mismatched bracket */
		"{\"event_type\":\"a\",\"payload\":\"\\u0000\"}",              /* NUL */
		"{\"event_type\":\"a\",\"payload\":\"\xc3\"}",                   /* cut UTF-8 */
		"{\"events\":[{\"event_type\":\"a\",\"payload\":1,\"payload\":2}]}", /* twice */
		"{\"event_type\":\"a\",\"payload\":01}",
		/* what follows a payload must not continue the value put in its place */
		"{\"event_type\":\"a\",\"payload\":{}.5}",
		"{\"event_type\":\"a\",\"payload\":\"x\"e5}",
		"{\"events\":[{\"event_type\":\"a\",\"payload\":[]1}]}",
		"{\"event_type\":\"a\",\"payload\":{}true}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct ingest_batch b;
		struct input_error err;
		assert_int_equal(ingest_parse(bad[i], strlen(bad[i]), 1024, &b, &err), -1);
		assert_string_equal(err.code, "invalid_json");
	}
}

static void expect_message(const char *body, int status, const char *field, const char *message)
{
	struct ingest_batch b;
	struct input_error err;
	assert_int_equal(ingest_parse(body, strlen(body), 4, &b, &err), -1);
	assert_int_equal(err.status, status);
	assert_string_equal(err.field, field);
	assert_string_equal(err.message, message);
}

/* Fields of a batch's events are named with their index, down to the message text. */
static void test_batch_error_messages(void **state)
{
	expect_message("{\"events\":[{\"event_type\":\"a\",\"payload\":1},2]}", 400, "events[1]",
		       "an event must be a JSON object");
	expect_message("{\"events\":[{\"event_type\":\"a\",\"payload\":1,\"zz\":1}]}", 400,
		       "events[0].zz", "unknown field \"events[0].zz\"");
	expect_message("{\"events\":[{\"event_type\":\"a\",\"payload\":1},{\"payload\":1}]}", 400,
		       "events[1].event_type", "events[1].event_type is required");
	expect_message("{\"events\":[{\"event_type\":\"a\",\"source\":[],\"payload\":1}]}", 400,
		       "events[0].source",
		       "events[0].source must be a string of at most 255 characters");
	expect_message("{\"events\":[{\"event_type\":\"a\",\"payload\":1},{\"event_type\":\"a\"}]}",
		       400, "events[1].payload",
		       "exactly one of events[1].payload and events[1].payload_base64 is required");
	expect_message("{\"event_type\":\"a\"}", 400, "payload",
		       "exactly one of payload and payload_base64 is required");
	expect_message("{\"events\":[{\"event_type\":\"a\",\"payload_base64\":\"AAECAwQ=\"}]}", 413,
		       "events[0].payload_base64",
		       "events[0].payload_base64 is 5 bytes, more than the limit of 4");
	expect_message("{\"events\":[{\"event_type\":\"a\",\"payload\":\"abcd\"}]}", 413,
		       "events[0].payload", "events[0].payload is 6 bytes, more than the limit of 4");
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

/* Allocations of one batch of n events (each with the field set producers send) through
 * ingest_parse and ingest_fanout to two subscriptions, and ingest_batch_free. */
static long batch_allocations(size_t n, const struct sub_set *set)
{
	size_t cap = n * 200 + 64, len = 0;
	char *body = malloc(cap);
	assert_non_null(body);
	len += (size_t)snprintf(body + len, cap - len, "{\"events\":[");
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(body + len, cap - len,
					"%s{\"event_type\":\"order.paid\",\"source\":\"shop\","
					"\"source_event_id\":\"o-%zu\",\"partition_key\":\"c-%zu\","
					"\"payload\":{\"order\":%zu,\"total\":12.5,\"items\":[1,2]}}",
					i ? "," : "", i, i % 7, i);
	len += (size_t)snprintf(body + len, cap - len, "]}");
	struct ingest_batch b;
	struct input_error err;
	alloc_count_reset();
	alloc_count_begin();
	int parsed = ingest_parse(body, len, 1024, &b, &err);
	int fanned = parsed ? -1 : ingest_fanout(&b, set);
	if (!parsed)
		ingest_batch_free(&b);
	long count = alloc_count_end();
	free(body);
	assert_int_equal(parsed, 0);
	assert_int_equal(fanned, 0);
	return count;
}

/* What grows with a batch's events is jansson's tree of the body (each event's object, its
 * keys and strings; the payloads are replaced by a placeholder, util/jsonspan.c): 21.0
 * allocations per event of this shape (21,033 for 1,000 events, 2,124 for 100), and 36
 * for a batch of one. The budget holds them near there: a change that allocates one more
 * per event (a copy of each payload, a tree of each payload, a string per subscription)
 * fails here. */
#define ALLOCS_PER_EVENT 22
#define ALLOCS_PER_BATCH 40
static void test_batch_allocation_budget(void **state)
{
	if (!alloc_count_available())
		skip(); /* a build without AddressSanitizer: nothing counts allocations */
	struct sub_set *set = sub_set_new();
	for (int i = 0; i < 2; i++) {
		struct subscription *s = calloc(1, sizeof(*s));
		snprintf(s->id, sizeof(s->id), "00000000-0000-7000-8000-00000000000%d", i);
		s->event_types = calloc(1, sizeof(char *));
		s->event_types[0] = strdup(i ? "order.*" : "*");
		s->n_event_types = 1;
		s->enabled = 1;
		assert_int_equal(sub_set_add(set, s), 0);
	}
	long one = batch_allocations(1, set);
	long hundred = batch_allocations(100, set);
	long thousand = batch_allocations(1000, set);
	struct sub_registry reg;
	sub_registry_init(&reg);
	sub_registry_publish(&reg, set);
	sub_registry_destroy(&reg);
	printf("allocations: 1 event %ld, 100 events %ld, 1000 events %ld\n", one, hundred,
	       thousand);
	assert_true(one <= ALLOCS_PER_BATCH);
	assert_true(hundred <= ALLOCS_PER_BATCH + 99 * ALLOCS_PER_EVENT);
	assert_true(thousand <= ALLOCS_PER_BATCH + 999 * ALLOCS_PER_EVENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_payload_bytes_kept),
		cmocka_unit_test(test_batch_spans),
		cmocka_unit_test(test_errors_name_the_field),
		cmocka_unit_test(test_payload_span_edge_cases),
		cmocka_unit_test(test_big_integers_pass_through),
		cmocka_unit_test(test_payload_checked_without_tree),
		cmocka_unit_test(test_batch_error_messages),
		cmocka_unit_test(test_fanout),
		cmocka_unit_test(test_batch_allocation_budget),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
