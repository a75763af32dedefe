/* test_grpc_publish.c: the gRPC ingest's messages — an OutboxEvent into an event by the
 * rules of POST /v1/events, errors naming the field (and the message of a stream), the
 * limits of a call, and the PublishReply read back with protobuf-c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "intake/grpc_publish.h"
#include "outboxd/v1/ingest.pb-c.h"
#include "outboxd/v1/outbox_event.pb-c.h"
#include "util/uuid.h"

static const struct publish_limits limits = {64, 1024, 3};

/* An OutboxEvent with the event's type, source_event_id and payload; packed into buf. */
struct msg {
	Outboxd__V1__OutboxEvent m;
	Outboxd__V1__Event e;
	Outboxd__V1__Auth auth;
	unsigned char buf[4096];
	size_t len;
};

static void msg_init(struct msg *x, const char *type, const char *key, const char *payload)
{
	outboxd__v1__outbox_event__init(&x->m);
	outboxd__v1__event__init(&x->e);
	outboxd__v1__auth__init(&x->auth);
	x->e.type = (char *)type;
	x->e.source = "shop";
	x->e.source_event_id = (char *)key;
	x->e.payload.data = (uint8_t *)payload;
	x->e.payload.len = strlen(payload);
	x->m.event = &x->e;
}

static void msg_pack(struct msg *x)
{
	x->len = outboxd__v1__outbox_event__pack(&x->m, x->buf);
}

static void expect_error(struct msg *x, long index, int status, const char *field,
			 const char *in_message)
{
	struct publish_batch b = {0};
	struct input_error err;
	msg_pack(x);
	if (publish_add(&b, x->buf, x->len, &limits, index, &err) != -1)
		fail_msg("taken, although %s is at fault", field);
	assert_int_equal(err.status, status);
	assert_string_equal(err.field, field);
	if (!strstr(err.message, in_message))
		fail_msg("\"%s\" not in \"%s\"", in_message, err.message);
	assert_int_equal(b.in.n, 0);
	publish_batch_free(&b);
}

static void test_event_as_http_ingest_takes_it(void **state)
{
	struct msg x;
	struct publish_batch b = {0};
	struct input_error err;
	msg_init(&x, "order.paid", "o-1", "{\"total\": 0.10}");
	x.e.partition_key = "cust-7";
	x.m.traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
	msg_pack(&x);
	if (publish_add(&b, x.buf, x.len, &limits, -1, &err))
		fail_msg("%s", err.message);
	assert_int_equal(b.in.n, 1);
	const struct store_event_in *ev = &b.in.events[0];
	assert_string_equal(ev->event_type, "order.paid");
	assert_string_equal(ev->source, "shop");
	assert_string_equal(ev->source_event_id, "o-1");
	assert_string_equal(ev->partition_key, "cust-7");
	assert_string_equal(ev->content_type, "application/json");
	assert_string_equal(ev->traceparent, x.m.traceparent);
	assert_int_equal(ev->payload_len, strlen("{\"total\": 0.10}"));
	assert_memory_equal(ev->payload, "{\"total\": 0.10}", ev->payload_len); /* as sent */
	assert_true(uuid_valid(ev->id));
	assert_true(ev->created_at > 0);

	/* binary bytes, no key, an invalid trace context (ignored) */
	msg_init(&x, "blob.put", "", "\x01\x02");
	x.m.payload_type = OUTBOXD__V1__PAYLOAD_TYPE__PAYLOAD_TYPE_BINARY;
	x.m.traceparent = "not-a-trace";
	msg_pack(&x);
	assert_int_equal(publish_add(&b, x.buf, x.len, &limits, 1, &err), 0);
	ev = &b.in.events[1];
	assert_string_equal(ev->content_type, "application/octet-stream");
	assert_null(ev->source_event_id);
	assert_null(ev->partition_key);
	assert_null(ev->traceparent);
	assert_memory_equal(ev->payload, "\x01\x02", 2);
	assert_true(b.bytes > (int64_t)x.len);
	publish_batch_free(&b);
}

static void test_errors_name_the_field(void **state)
{
	struct msg x;
	msg_init(&x, "", "k", "{}");
	expect_error(&x, -1, 400, "event.type", "event.type is required");
	msg_init(&x, "has space", "k", "{}");
	expect_error(&x, -1, 400, "event.type", "printable");
	msg_init(&x, "outboxd.subscription.disabled", "k", "{}");
	expect_error(&x, -1, 400, "event.type", "operational");
	msg_init(&x, "a.b", "k", "{\"a\":1,\"a\":2}");
	expect_error(&x, -1, 400, "event.payload", "not JSON");
	msg_init(&x, "a.b", "k", "");
	expect_error(&x, -1, 400, "event.payload", "not JSON");
	msg_init(&x, "a.b", "k", "\"01234567890123456789012345678901234567890123456789012345678901234567890\"");
	expect_error(&x, -1, 413, "event.payload", "more than the limit of 64");
	msg_init(&x, "a.b", "\xff\xfe", "{}");
	expect_error(&x, -1, 400, "event.source_event_id", "UTF-8");
	msg_init(&x, "a.b", "k", "{}");
	x.e.id = "0190a0b0-0000-7000-8000-000000000001";
	expect_error(&x, -1, 400, "event.id", "event.source_event_id");
	msg_init(&x, "a.b", "k", "{}");
	x.m.endpoint = "https://hooks.example.com/";
	expect_error(&x, -1, 400, "endpoint", "fans each event out");
	msg_init(&x, "a.b", "k", "{}");
	x.m.auth = &x.auth;
	expect_error(&x, -1, 400, "auth", "must be unset");
	msg_init(&x, "a.b", "k", "{}");
	x.m.payload_type = 9;
	expect_error(&x, -1, 400, "payload_type", "got 9");
	/* in a stream, the message is named too */
	msg_init(&x, "", "k", "{}");
	expect_error(&x, 7, 400, "event.type", "message 7 of the stream: event.type is required");
	msg_init(&x, "a.b", "k", "{}");
	x.m.event = NULL;
	expect_error(&x, -1, 400, "event", "event is required");
}

static void test_not_an_envelope(void **state)
{
	struct publish_batch b = {0};
	struct input_error err;
	const unsigned char junk[] = {0xff, 0xff, 0xff, 0xff};
	assert_int_equal(publish_add(&b, junk, sizeof(junk), &limits, -1, &err), -1);
	assert_int_equal(err.status, 400);
	assert_non_null(strstr(err.message, "not an outboxd.v1.OutboxEvent"));
	publish_batch_free(&b);
}

static void test_limits_of_a_call(void **state)
{
	struct msg x;
	struct publish_batch b = {0};
	struct input_error err;
	msg_init(&x, "a.b", "k", "{}");
	msg_pack(&x);
	for (int i = 0; i < 3; i++)
		assert_int_equal(publish_add(&b, x.buf, x.len, &limits, i, &err), 0);
	/* a fourth event is over max_events; nothing of the batch is lost */
	assert_int_equal(publish_add(&b, x.buf, x.len, &limits, 3, &err), -1);
	assert_int_equal(err.status, 400);
	assert_non_null(strstr(err.message, "message 3 of the stream"));
	assert_int_equal(b.in.n, 3);
	publish_batch_free(&b);

	/* messages over max_request together */
	struct publish_limits small = {64, 50, 100};
	int rc = 0;
	for (int i = 0; i < 10 && rc == 0; i++)
		rc = publish_add(&b, x.buf, x.len, &small, i, &err);
	assert_int_equal(rc, -1);
	assert_int_equal(err.status, 413);
	assert_true(b.bytes <= 50);
	publish_batch_free(&b);
}

static void test_reply(void **state)
{
	struct msg x;
	struct publish_batch b = {0};
	struct input_error err;
	void *out;
	size_t len;
	msg_init(&x, "a.b", "k", "{}");
	msg_pack(&x);
	for (int i = 0; i < 3; i++)
		assert_int_equal(publish_add(&b, x.buf, x.len, &limits, i, &err), 0);
	/* what the writer writes back: the second was stored before */
	b.in.events[1].duplicate = 1;
	assert_int_equal(publish_reply(&b, &out, &len), 0);
	Outboxd__V1__PublishReply *r = outboxd__v1__publish_reply__unpack(NULL, len, out);
	assert_non_null(r);
	assert_int_equal(r->n_ids, 3);
	for (size_t i = 0; i < 3; i++)
		assert_string_equal(r->ids[i], b.in.events[i].id);
	assert_int_equal(r->n_duplicates, 1);
	assert_int_equal(r->duplicates[0], 1);
	outboxd__v1__publish_reply__free_unpacked(r, NULL);
	free(out);
	publish_batch_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_event_as_http_ingest_takes_it),
		cmocka_unit_test(test_errors_name_the_field),
		cmocka_unit_test(test_not_an_envelope),
		cmocka_unit_test(test_limits_of_a_call),
		cmocka_unit_test(test_reply),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
