/* test_dlq.c: the dead-letter queue as an operator sees it — a subscriber that is down
 * exhausts 3 immediate tries and 3 scheduled retries, lands in GET /v1/dlq with its full
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
	assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), 6);
	assert_int_equal(json_integer_value(json_object_get(d, "retry_count")), 3);
	json_t *attempts = json_object_get(d, "attempts");
	assert_int_equal(json_array_size(attempts), 6);
	const char *kinds[] = {"immediate", "immediate", "immediate", "scheduled", "scheduled",
			       "scheduled"};
	for (size_t i = 0; i < 6; i++) {
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
	assert_int_equal(json_array_size(attempts), 7);
	json_t *a = json_array_get(attempts, 6);
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
		cmocka_unit_test(test_purge_only_dead),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
