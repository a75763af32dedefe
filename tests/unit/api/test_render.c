/* test_render.c: api/render.c — the JSON a client reads for an event (JSON payloads
 * inline, anything else as payload_base64 with its exact bytes), a delivery (dead only
 * when FAILED without a next attempt, last_error or null, times in RFC 3339 UTC with
 * milliseconds) and an attempt. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "api/render.h"

#define T0 1763719455123LL /* 2025-11-21T10:04:15.123Z */

static const char *str(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

static void test_time(void **state)
{
	json_t *t = render_time(T0);
	assert_string_equal(json_string_value(t), "2025-11-21T10:04:15.123Z");
	json_decref(t);
	t = render_time(0);
	assert_true(json_is_null(t));
	json_decref(t);
}

static void test_event_json_and_binary(void **state)
{
	struct store_event ev = {.event_type = "order.created", .source = "shop",
				 .content_type = "application/json", .payload = "{\"id\":7}",
				 .payload_len = 8, .created_at = T0};
	memcpy(ev.id, "0190a0b0-0000-7000-8000-000000000001", UUID_STR_LEN);
	json_t *o = render_event(&ev);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(o, "payload"), "id")), 7);
	assert_null(json_object_get(o, "payload_base64"));
	assert_string_equal(str(o, "created_at"), "2025-11-21T10:04:15.123Z");
	assert_string_equal(str(o, "webhook_id"), ev.id); /* no id upstream: its own */
	json_decref(o);
	ev.webhook_id = "upstream-7";
	o = render_event(&ev);
	assert_string_equal(str(o, "webhook_id"), "upstream-7");
	json_decref(o);
	ev.webhook_id = NULL;

	/* bytes that are not JSON (a NUL, 0xff) travel as base64, byte for byte */
	static const unsigned char bin[] = {0x00, 0xff, 'a', 0x10};
	ev.content_type = "application/octet-stream";
	ev.payload = (void *)bin;
	ev.payload_len = sizeof(bin);
	o = render_event(&ev);
	assert_null(json_object_get(o, "payload"));
	assert_string_equal(str(o, "payload_base64"), "AP9hEA==");
	json_decref(o);

	/* declared JSON that does not parse is shown as base64 too, not dropped */
	ev.content_type = "application/json";
	ev.payload = "{not json";
	ev.payload_len = 9;
	o = render_event(&ev);
	assert_string_equal(str(o, "payload_base64"), "e25vdCBqc29u");
	json_decref(o);
}

static void test_delivery_states(void **state)
{
	struct store_delivery d = {.event_type = "order.created", .status = DELIVERY_FAILED,
				   .attempt_count = 6, .retry_count = 3, .created_at = T0,
				   .updated_at = T0 + 1000, .last_code = 503,
				   .last_message = "Service Unavailable", .last_cause = "busy"};
	json_t *o = render_delivery(&d);
	assert_true(json_is_true(json_object_get(o, "dead")));
	assert_true(json_is_null(json_object_get(o, "next_attempt_at")));
	json_t *e = json_object_get(o, "last_error");
	assert_int_equal(json_integer_value(json_object_get(e, "code")), 503);
	assert_string_equal(str(e, "message"), "Service Unavailable");
	assert_string_equal(str(e, "cause"), "busy");
	assert_false(json_is_true(json_object_get(o, "in_flight")));
	json_decref(o);

	/* a scheduled retry is FAILED but not dead */
	d.next_attempt_at = T0 + 3000;
	o = render_delivery(&d);
	assert_true(json_is_false(json_object_get(o, "dead")));
	assert_string_equal(str(o, "next_attempt_at"), "2025-11-21T10:04:18.123Z");
	json_decref(o);

	/* processed: no next attempt shown, no error */
	d.status = DELIVERY_PROCESSED;
	d.last_code = 0;
	d.processed_at = T0 + 50;
	o = render_delivery(&d);
	assert_string_equal(str(o, "status"), "PROCESSED");
	assert_true(json_is_null(json_object_get(o, "next_attempt_at")));
	assert_true(json_is_null(json_object_get(o, "last_error")));
	assert_string_equal(str(o, "processed_at"), "2025-11-21T10:04:15.173Z");
	json_decref(o);
}

static void test_attempt(void **state)
{
	struct store_attempt_row a = {.n = 4, .kind = ATTEMPT_SCHEDULED, .started_at = T0,
				      .duration_ms = 1002, .code = 504, .message = "timeout"};
	json_t *o = render_attempt(&a);
	assert_int_equal(json_integer_value(json_object_get(o, "n")), 4);
	assert_string_equal(str(o, "kind"), "scheduled");
	assert_int_equal(json_integer_value(json_object_get(o, "duration_ms")), 1002);
	assert_string_equal(str(o, "message"), "timeout");
	assert_true(json_is_null(json_object_get(o, "cause")));
	json_decref(o);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_time),
		cmocka_unit_test(test_event_json_and_binary),
		cmocka_unit_test(test_delivery_states),
		cmocka_unit_test(test_attempt),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
