/* test_failing.c: the implicit dead-letter queue (max_retries 0) as an operator sees it.
 * With max_retries 0 a delivery's retries never run out (only a permanent code, an open
 * circuit or a failed replay still dead-letter it), so the operator finds
 * what keeps failing by how often (min_attempts) and how long (failing_since): in the
 * API, in /v1/stats and /metrics (the age of the oldest failing delivery, for alerting)
 * and in the CLI (`outboxd deliveries list --failing`, `outboxd stats`). When the
 * subscriber recovers, all of it clears. */
#include "e2e.h"

#include "util/clock.h"

static struct receiver rcv;
static struct daemon dmn;

static int setup(void **state)
{
	e2e_setup(&rcv, &dmn, NULL);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

static size_t count_items(const char *fmt, const char *arg)
{
	json_t *r = e2e_get(&dmn, fmt, arg);
	size_t n = json_array_size(json_object_get(r, "items"));
	json_decref(r);
	return n;
}

struct tries_ctx {
	const char *sub;
	int want;
};

static int all_tried(void *arg)
{
	struct tries_ctx *c = arg;
	char q[160];
	snprintf(q, sizeof(q), "%s&min_attempts=%d", c->sub, c->want);
	return count_items("/v1/deliveries?subscription_id=%s", q) == 3;
}

/* The metric's value, or -1 when it is missing. */
static double metric(const char *name)
{
	return e2e_metric(&dmn, name);
}

static void test_forever_failing_is_found(void **state)
{
	char forever[64], ok[64], ev[64], out[16384];
	assert_int_equal(receiver_script(&rcv, "/down", "{\"default\":{\"status\":500}}"), 0);
	e2e_create_sub(&dmn, forever,
		       "{\"name\":\"forever\",\"event_types\":[\"f.*\"],\"endpoint\":\"%s/down\","
		       "\"retry\":{\"immediate\":1,\"interval\":\"150ms\",\"max_retries\":0},"
		       "\"circuit_breaker\":{\"enabled\":false}}", rcv.url);
	e2e_create_sub(&dmn, ok,
		       "{\"name\":\"fine\",\"event_types\":[\"f.*\"],\"endpoint\":\"%s/up\"}", rcv.url);
	int64_t before = clock_now_ms();
	for (int i = 0; i < 3; i++)
		e2e_send(&dmn, ev, "{\"event_type\":\"f.thing\",\"payload\":{}}");
	assert_int_equal(receiver_wait_count(&rcv, "/up", 3, 5000), 0);

	/* each of the three has been tried at least 3 times; the delivered ones once */
	struct tries_ctx c = {forever, 3};
	assert_int_equal(harness_wait(all_tried, &c, 10000), 0);
	assert_int_equal(count_items("/v1/deliveries?min_attempts=%s", "3"), 3);
	assert_int_equal(count_items("/v1/deliveries?min_attempts=%s", "1"), 6);
	/* failing since the first attempt: yes; for an hour: no */
	char now[RFC3339_LEN];
	clock_format_rfc3339(clock_now_ms(), now);
	assert_int_equal(count_items("/v1/deliveries?failing_since=%s", now), 3);
	assert_int_equal(count_items("/v1/deliveries?failing_since=%s", "1h"), 0);
	assert_int_equal(count_items("/v1/deliveries?failing_since=%s", "0s"), 3);
	/* nothing is dead: the DLQ proper is empty */
	assert_int_equal(count_items("/v1/dlq?min_attempts=%s", "1"), 0);
	json_t *one = e2e_get(&dmn, "/v1/deliveries?subscription_id=%s&limit=1", forever);
	json_t *d = json_array_get(json_object_get(one, "items"), 0);
	int64_t since;
	assert_int_equal(clock_parse_rfc3339(json_string_value(json_object_get(d, "failing_since")),
					     &since), 0);
	assert_true(since >= before - 1000 && since <= clock_now_ms());
	assert_false(json_is_true(json_object_get(d, "dead")));
	json_decref(one);
	/* bad values name the field */
	json_t *bad = api_call(&dmn, "GET", "/v1/deliveries?failing_since=lately", NULL, 400);
	assert_string_equal(json_string_value(json_object_get(json_object_get(bad, "error"),
							       "field")), "failing_since");
	json_decref(bad);
	bad = api_call(&dmn, "GET", "/v1/deliveries?min_attempts=0", NULL, 400);
	assert_string_equal(json_string_value(json_object_get(json_object_get(bad, "error"),
							       "field")), "min_attempts");
	json_decref(bad);

	/* stats and metrics show how long the oldest has been failing */
	usleep(300 * 1000);
	json_t *st = e2e_get(&dmn, "/v1/stats");
	json_t *failing = json_object_get(st, "failing");
	assert_int_equal(json_integer_value(json_object_get(failing, "deliveries")), 3);
	assert_true(json_is_string(json_object_get(failing, "oldest_since")));
	assert_true(json_integer_value(json_object_get(failing, "oldest_age_ms")) >= 300);
	json_decref(st);
	assert_true(metric("outboxd_oldest_failing_age_seconds") >= 0.3);

	/* the CLI lists them and says so in its stats */
	assert_int_equal(e2e_cli(&dmn, out, sizeof(out), "deliveries list --failing"), 0);
	assert_non_null(strstr(out, "3 deliveries"));
	assert_int_equal(e2e_cli(&dmn, out, sizeof(out), "deliveries list --min-attempts 3 --json"), 0);
	json_t *listed = json_loads(out, 0, NULL);
	assert_int_equal(json_array_size(json_object_get(listed, "items")), 3);
	json_decref(listed);
	assert_int_equal(e2e_cli(&dmn, out, sizeof(out), "stats"), 0);
	assert_non_null(strstr(out, "failing      3 deliveries still retried"));
	/* the age written as a duration ("(1s)", "(62m)"), not as a count of seconds */
	char *age = strstr(out, "failing since ");
	assert_non_null(age);
	age = strchr(age, '(');
	assert_non_null(age);
	assert_true(age[1] >= '0' && age[1] <= '9');
	assert_null(strstr(out, " s)"));

	/* the subscriber recovers: nothing is failing any more */
	assert_int_equal(receiver_script(&rcv, "/down", "{\"default\":{\"status\":200}}"), 0);
	for (int i = 0; i < 100 && count_items("/v1/deliveries?failing_since=%s", "0s"); i++)
		usleep(100 * 1000);
	assert_int_equal(count_items("/v1/deliveries?failing_since=%s", "0s"), 0);
	st = e2e_get(&dmn, "/v1/stats");
	failing = json_object_get(st, "failing");
	assert_int_equal(json_integer_value(json_object_get(failing, "deliveries")), 0);
	assert_true(json_is_null(json_object_get(failing, "oldest_since")));
	json_decref(st);
	assert_true(metric("outboxd_oldest_failing_age_seconds") == 0.0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_forever_failing_is_found, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
