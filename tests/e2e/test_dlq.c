/* test_dlq.c: the dead-letter queue as an operator sees it — a subscriber that is down
 * exhausts its first try, 3 immediate retries and 3 scheduled ones, lands in GET /v1/dlq with its full
 * history, is replayed by id once it is back (a `manual` attempt), and purge. */
#include "e2e.h"

static struct receiver rcv;
static struct daemon dmn;

static int setup(void **state)
{
	const char *env[] = {"OUTBOXD_RETRY_INTERVAL=300ms", NULL};
	e2e_setup(&rcv, &dmn, env);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

static json_t *wait_dead(const char *id)
{
	return e2e_wait_dead(&dmn, id, 15000);
}

static void test_down_then_dlq_then_replay(void **state)
{
	char sub[64], ev[64], ids[2][64];
	e2e_create_sub(&dmn, sub, "{\"name\":\"down\",\"event_types\":[\"down.*\"],"
				  "\"endpoint\":\"%s/hook\"}", rcv.url);
	receiver_stop(&rcv); /* the subscriber goes down */

	e2e_send(&dmn, ev, "{\"event_type\":\"down.event\",\"payload\":{\"v\":42}}");
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 2), 1);

	json_t *d = wait_dead(ids[0]);
	assert_true(json_is_true(json_object_get(d, "dead")));
	assert_string_equal(json_string_value(json_object_get(d, "status")), "FAILED");
	assert_true(json_is_null(json_object_get(d, "next_attempt_at")));
	assert_true(json_is_string(json_object_get(d, "processed_at"))); /* ended, in failure */
	/* the defaults: the first try, 3 immediate retries, 3 scheduled ones (1 + 3 + 3) */
	assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), 7);
	assert_int_equal(json_integer_value(json_object_get(d, "retry_count")), 3);
	json_t *attempts = json_object_get(d, "attempts");
	assert_int_equal(json_array_size(attempts), 7);
	const char *kinds[] = {"immediate", "immediate", "immediate", "immediate", "scheduled",
			       "scheduled", "scheduled"};
	for (size_t i = 0; i < 7; i++) {
		json_t *a = json_array_get(attempts, i);
		assert_string_equal(json_string_value(json_object_get(a, "kind")), kinds[i]);
		assert_int_equal(json_integer_value(json_object_get(a, "code")), 503);
	}
	json_t *last = json_object_get(d, "last_error");
	assert_int_equal(json_integer_value(json_object_get(last, "code")), 503);
	assert_string_equal(json_string_value(json_object_get(last, "message")), "connection refused");
	json_decref(d);

	/* It is in the DLQ listing, filtered by subscription too. */
	json_t *dlq = e2e_get(&dmn, "/v1/dlq?subscription_id=%s", sub);
	json_t *items = json_object_get(dlq, "items");
	assert_int_equal(json_array_size(items), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(items, 0), "id")), ids[0]);
	json_decref(dlq);
	json_t *failed = e2e_get(&dmn, "/v1/deliveries?status=FAILED");
	assert_true(json_array_size(json_object_get(failed, "items")) >= 1);
	json_decref(failed);

	/* The subscriber comes back; the operator replays by id. */
	assert_int_equal(receiver_restart(&rcv), 0);
	char body[256];
	snprintf(body, sizeof(body), "{\"ids\":[\"%s\"]}", ids[0]);
	json_t *r = api_call(&dmn, "POST", "/v1/dlq/replay", body, 200);
	assert_int_equal(json_integer_value(json_object_get(r, "replayed")), 1);
	json_decref(r);

	d = e2e_wait_status(&dmn, ids[0], "PROCESSED", 5000);
	attempts = json_object_get(d, "attempts");
	assert_int_equal(json_array_size(attempts), 8);
	json_t *a = json_array_get(attempts, 7);
	assert_string_equal(json_string_value(json_object_get(a, "kind")), "manual");
	assert_int_equal(json_integer_value(json_object_get(a, "code")), 200);
	json_decref(d);
	assert_int_equal(receiver_count(&rcv, "/hook"), 1);

	/* No longer dead-lettered; a second replay without force is refused. */
	dlq = e2e_get(&dmn, "/v1/dlq?subscription_id=%s", sub);
	assert_int_equal(json_array_size(json_object_get(dlq, "items")), 0);
	json_decref(dlq);
	r = api_call(&dmn, "POST", "/v1/dlq/replay", body, 200);
	assert_int_equal(json_integer_value(json_object_get(r, "replayed")), 0);
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(json_object_get(r, "results"), 0), "outcome")),
			    "not_failed");
	json_decref(r);
}

/* Replay by event id: an event fanned out to two subscriptions that were both down gets
 * both its dead deliveries replayed; an event without a dead delivery says so; bad ids
 * are 400 naming the element. */
static void test_replay_by_event_id(void **state)
{
	char a[64], b[64], ev[64], other[64], ids[2][64], body[512];
	int port = harness_free_port(); /* nothing listens there yet: refused */
	e2e_create_sub(&dmn, a, "{\"name\":\"ev-a\",\"event_types\":[\"byevent.*\"],"
				"\"endpoint\":\"http://127.0.0.1:%d/a\"}", port);
	e2e_create_sub(&dmn, b, "{\"name\":\"ev-b\",\"event_types\":[\"byevent.*\"],"
				"\"endpoint\":\"http://127.0.0.1:%d/b\"}", port);
	e2e_send(&dmn, ev, "{\"event_type\":\"byevent.one\",\"payload\":{}}");
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 2), 2);
	json_decref(wait_dead(ids[0]));
	json_decref(wait_dead(ids[1]));
	/* an event none of the down subscriptions takes: nothing to replay */
	e2e_send(&dmn, other, "{\"event_type\":\"unrelated.one\",\"payload\":{}}");

	/* the subscriber is back (both endpoints on one receiver's port) */
	for (int i = 0; i < 2; i++) {
		char path[128];
		snprintf(path, sizeof(path), "/v1/subscriptions/%s", i ? b : a);
		snprintf(body, sizeof(body), "{\"endpoint\":\"%s/%s\"}", rcv.url, i ? "b" : "a");
		json_decref(api_call(&dmn, "PATCH", path, body, 200));
	}
	snprintf(body, sizeof(body), "{\"event_ids\":[\"%s\",\"%s\"]}", ev, other);
	json_t *r = api_call(&dmn, "POST", "/v1/dlq/replay", body, 200);
	assert_int_equal(json_integer_value(json_object_get(r, "replayed")), 2);
	json_t *results = json_object_get(r, "results");
	assert_int_equal(json_array_size(results), 3);
	int replayed = 0, none = 0;
	for (size_t i = 0; i < 3; i++) {
		json_t *x = json_array_get(results, i);
		const char *outcome = json_string_value(json_object_get(x, "outcome"));
		replayed += strcmp(outcome, "replayed") == 0;
		if (strcmp(outcome, "no_delivery") == 0) {
			none++;
			assert_string_equal(json_string_value(json_object_get(x, "event_id")), other);
		}
	}
	assert_int_equal(replayed, 2);
	assert_int_equal(none, 1);
	json_decref(r);
	json_decref(e2e_wait_status(&dmn, ids[0], "PROCESSED", 5000));
	json_decref(e2e_wait_status(&dmn, ids[1], "PROCESSED", 5000));

	/* bad input: 400 naming the element; ids and event_ids together refused */
	r = api_call(&dmn, "POST", "/v1/dlq/replay", "{\"event_ids\":[\"nope\"]}", 400);
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "error"), "field")),
			    "event_ids[0]");
	json_decref(r);
	snprintf(body, sizeof(body), "{\"event_ids\":[\"%s\"],\"ids\":[\"%s\"]}", ev, ids[0]);
	json_decref(api_call(&dmn, "POST", "/v1/dlq/replay", body, 400));
	json_decref(api_call(&dmn, "POST", "/v1/dlq/replay", "{\"event_ids\":[]}", 400));
}

static void test_purge_only_dead(void **state)
{
	char sub[64], ev[64], ids[2][64], path[128];
	int port = harness_free_port();
	e2e_create_sub(&dmn, sub, "{\"name\":\"purge\",\"event_types\":[\"purge.*\"],"
				  "\"endpoint\":\"http://127.0.0.1:%d/\",\"retry\":{\"immediate\":1,"
				  "\"max_retries\":1,\"interval\":\"100ms\"}}", port);
	e2e_send(&dmn, ev, "{\"event_type\":\"purge.me\",\"payload\":1}");
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 2), 1);
	json_t *d = wait_dead(ids[0]);
	assert_true(json_is_true(json_object_get(d, "dead")));
	json_decref(d);

	snprintf(path, sizeof(path), "/v1/dlq/%s", ids[0]);
	json_decref(api_call(&dmn, "DELETE", path, NULL, 204));
	snprintf(path, sizeof(path), "/v1/deliveries/%s", ids[0]);
	json_t *gone = api_call(&dmn, "GET", path, NULL, 404);
	assert_string_equal(json_string_value(json_object_get(json_object_get(gone, "error"), "code")),
			    "not_found");
	json_decref(gone);

	/* A PROCESSED delivery is not in the DLQ: purge refuses with 409. */
	char ok_sub[64], ok_ev[64], ok_ids[2][64];
	e2e_create_sub(&dmn, ok_sub, "{\"name\":\"fine\",\"event_types\":[\"fine.*\"],"
				     "\"endpoint\":\"%s/fine\"}", rcv.url);
	e2e_send(&dmn, ok_ev, "{\"event_type\":\"fine.one\",\"payload\":1}");
	assert_int_equal(e2e_deliveries_of(&dmn, ok_ev, ok_ids, 2), 1);
	json_decref(e2e_wait_status(&dmn, ok_ids[0], "PROCESSED", 5000));
	snprintf(path, sizeof(path), "/v1/dlq/%s", ok_ids[0]);
	json_decref(api_call(&dmn, "DELETE", path, NULL, 409));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_down_then_dlq_then_replay),
		cmocka_unit_test(test_replay_by_event_id),
		cmocka_unit_test(test_purge_only_dead),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
