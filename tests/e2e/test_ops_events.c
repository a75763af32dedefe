/* test_ops_events.c: outboxd's operational events as a subscriber sees them.
 *
 * An operations subscription ("outboxd.*", with a signing secret) receives, signed like any
 * delivery: outboxd.delivery.dead for each dead delivery of a failing subscription, then
 * outboxd.subscription.disabled when disable_after ends it, and after it is enabled and
 * succeeds, outboxd.subscription.recovered. A catch-all "*" subscription gets none of them.
 * An operations subscription that itself fails dead-letters its events without making new
 * ones about them (no loop). Past ops_events_limit in a window the rest come as one
 * summary event. Clients cannot send outboxd.* event types. */
#include "e2e.h"

static struct receiver rcv;
static struct daemon dmn;

static int setup(void **state)
{
	assert_int_equal(receiver_start(&rcv), 0);
	memset(&dmn, 0, sizeof(dmn));
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

#define SECRET "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

/* The requests on path whose outboxd-event-type is type, each checked for a valid
 * signature on /ops (the subscription with the secret). Returns the count; *last (when
 * not NULL) gets the newest body parsed. */
static int received(const char *path, const char *type, json_t **last)
{
	json_t *reqs = receiver_requests(&rcv, path), *r;
	size_t i;
	int n = 0;
	if (last)
		*last = NULL;
	json_array_foreach(reqs, i, r) {
		json_t *h = json_object_get(r, "headers");
		const char *t = json_string_value(json_object_get(h, "outboxd-event-type"));
		if (!t || strcmp(t, type) != 0)
			continue;
		if (strcmp(path, "/ops") == 0)
			e2e_assert_signed(r, SECRET, NULL);
		n++;
		if (last) {
			json_decref(*last);
			*last = json_loads(json_string_value(json_object_get(r, "body")), 0, NULL);
		}
	}
	json_decref(reqs);
	return n;
}

struct all_ctx {
	int want;
	int distinct;
};

/* 1 once the requests on /all carry want distinct webhook-ids (c->distinct: how many). */
static int all_distinct(void *arg)
{
	struct all_ctx *c = arg;
	json_t *reqs = receiver_requests(&rcv, "/all");
	size_t n = json_array_size(reqs);
	c->distinct = 0;
	for (size_t i = 0; i < n; i++) {
		const char *id = json_string_value(json_object_get(
			json_object_get(json_array_get(reqs, i), "headers"), "webhook-id"));
		size_t k = 0;
		while (k < i && strcmp(id, json_string_value(json_object_get(json_object_get(
					json_array_get(reqs, k), "headers"), "webhook-id"))) != 0)
			k++;
		c->distinct += k == i;
	}
	json_decref(reqs);
	return c->distinct >= c->want;
}

struct want {
	const char *path;
	const char *type;
	int n;
};

static int has(void *arg)
{
	struct want *w = arg;
	return received(w->path, w->type, NULL) >= w->n;
}

static void wait_for(const char *path, const char *type, int n)
{
	struct want w = {path, type, n};
	if (harness_wait(has, &w, 30000) != 0)
		fprintf(stderr, "waited for %d %s on %s, got %d\n", n, type, path,
			received(path, type, NULL));
	assert_int_equal(harness_wait(has, &w, 1), 0);
}

static void test_ops_events(void **state)
{
	/* The window is wide enough for the five deaths below to fall in one on any machine.
	 * A try waits up to 10 s for its answer, so a busy machine never sends an answered
	 * operational event twice: the counts below are exact. */
	const char *env[] = {"OUTBOXD_OPS_EVENTS_LIMIT=3", "OUTBOXD_OPS_EVENTS_WINDOW=5s",
			     "OUTBOXD_DELIVERY_TIMEOUT=10s", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	assert_int_equal(receiver_script(&rcv, "/down", "{\"default\":{\"status\":500}}"), 0);
	assert_int_equal(receiver_script(&rcv, "/ops-broken", "{\"default\":{\"status\":503}}"), 0);
	char flaky[64], burst[64], ops[64], broken[64], all[64], ev[64];
	e2e_create_sub(&dmn, ops, "{\"name\":\"ops\",\"event_types\":[\"outboxd.*\"],"
				  "\"endpoint\":\"%s/ops\",\"secret\":\"" SECRET "\"}", rcv.url);
	e2e_create_sub(&dmn, broken, "{\"name\":\"ops-broken\",\"event_types\":"
				     "[\"outboxd.delivery.*\"],\"endpoint\":\"%s/ops-broken\","
				     "\"retry\":{\"immediate\":1,\"max_retries\":1,"
				     "\"interval\":\"100ms\"}}", rcv.url);
	e2e_create_sub(&dmn, all, "{\"name\":\"all\",\"event_types\":[\"*\"],"
				  "\"endpoint\":\"%s/all\"}", rcv.url);
	e2e_create_sub(&dmn, burst, "{\"name\":\"burst\",\"event_types\":[\"b.*\"],"
				    "\"endpoint\":\"%s/down\",\"disable_after\":\"0s\","
				    "\"retry\":{\"immediate\":1,\"max_retries\":1,"
				    "\"interval\":\"100ms\"}}", rcv.url);
	e2e_create_sub(&dmn, flaky, "{\"name\":\"flaky\",\"event_types\":[\"f.*\"],"
				    "\"endpoint\":\"%s/down\",\"disable_after\":\"1500ms\","
				    "\"retry\":{\"immediate\":1,\"max_retries\":1,"
				    "\"interval\":\"100ms\"},"
				    "\"circuit_breaker\":{\"failure_window\":\"500ms\"}}", rcv.url);

	/* clients cannot send outboxd's own types */
	json_t *r = api_call(&dmn, "POST", "/v1/events",
			     "{\"event_type\":\"outboxd.delivery.dead\",\"payload\":{}}", 400);
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "error"),
							       "field")), "event_type");
	json_decref(r);

	/* a burst of five dead deliveries: three delivery.dead events (the limit), then one
	 * summary of the two held back when the window ends */
	char *batch = malloc(1024);
	assert_non_null(batch);
	snprintf(batch, 1024, "{\"events\":[");
	for (int i = 0; i < 5; i++)
		snprintf(batch + strlen(batch), 1024 - strlen(batch),
			 "%s{\"event_type\":\"b.e\",\"payload\":{\"i\":%d}}", i ? "," : "", i);
	strcat(batch, "]}");
	json_decref(api_call(&dmn, "POST", "/v1/events", batch, 202));
	free(batch);

	/* meanwhile the flaky subscription fails for longer than its disable_after */
	int sent = 0;
	for (; sent < 20 && received("/ops", "outboxd.subscription.disabled", NULL) == 0; sent++) {
		char body[96];
		snprintf(body, sizeof(body), "{\"event_type\":\"f.e\",\"payload\":{\"i\":%d}}",
			 sent);
		e2e_send(&dmn, ev, body);
		usleep(300 * 1000);
	}
	wait_for("/ops", "outboxd.subscription.disabled", 1);
	json_t *body = NULL;
	assert_int_equal(received("/ops", "outboxd.subscription.disabled", &body), 1);
	assert_string_equal(json_string_value(json_object_get(body, "subscription_id")), flaky);
	assert_string_equal(json_string_value(json_object_get(body, "subscription_name")), "flaky");
	assert_non_null(strstr(json_string_value(json_object_get(body, "reason")), "disable_after"));
	json_decref(body);

	int dead = 0, summaries = 0;
	for (int64_t until = harness_now_ms() + 30000; summaries == 0 && harness_now_ms() < until;) {
		json_t *reqs = receiver_requests(&rcv, "/ops"), *q;
		size_t i;
		dead = summaries = 0;
		json_array_foreach(reqs, i, q) {
			const char *type = json_string_value(json_object_get(
				json_object_get(q, "headers"), "outboxd-event-type"));
			json_t *b = json_loads(json_string_value(json_object_get(q, "body")), 0, NULL);
			const char *about = json_string_value(json_object_get(b, "subscription_id"));
			if (type && strcmp(type, "outboxd.delivery.dead") == 0 && about &&
			    strcmp(about, burst) == 0) {
				if (json_is_true(json_object_get(b, "summary"))) {
					summaries++;
					assert_int_equal(json_integer_value(json_object_get(
								 b, "suppressed")), 2);
				} else {
					dead++;
					assert_string_equal(json_string_value(json_object_get(
								    b, "event_type")), "b.e");
					assert_int_equal(json_integer_value(json_object_get(
								 json_object_get(b, "last_error"),
								 "code")), 500);
					assert_non_null(json_string_value(json_object_get(
						b, "delivery_id")));
				}
			}
			json_decref(b);
		}
		json_decref(reqs);
		if (!summaries)
			usleep(100 * 1000);
	}
	assert_int_equal(dead, 3);
	assert_int_equal(summaries, 1);
	json_t *stats = e2e_get(&dmn, "/v1/stats");
	json_t *ops_counts = json_object_get(stats, "ops_events");
	assert_true(json_integer_value(json_object_get(ops_counts, "suppressed")) >= 2);
	assert_true(json_integer_value(json_object_get(ops_counts, "stored")) >= 4);
	json_decref(stats);

	/* the catch-all subscription got the user events, each (by webhook-id), and none of
	 * outboxd's */
	struct all_ctx all_events = {5 + sent, 0};
	if (harness_wait(all_distinct, &all_events, 30000) != 0)
		fprintf(stderr, "/all: %d distinct events, want %d\n", all_events.distinct,
			all_events.want);
	assert_int_equal(all_events.distinct, 5 + sent);
	json_t *all_reqs = receiver_requests(&rcv, "/all"), *q;
	size_t i;
	json_array_foreach(all_reqs, i, q) {
		const char *type = json_string_value(json_object_get(json_object_get(q, "headers"),
								     "outboxd-event-type"));
		assert_non_null(type);
		assert_true(strncmp(type, "outboxd.", 8) != 0);
	}
	json_decref(all_reqs);
	/* the broken operations subscription: its events died, with no events about them */
	wait_for("/ops-broken", "outboxd.delivery.dead", 1);
	json_t *dlq = e2e_get(&dmn, "/v1/dlq?subscription_id=%s", broken);
	assert_true(json_array_size(json_object_get(dlq, "items")) >= 1);
	json_decref(dlq);
	/* nothing to wait for but time: what must not come has 1.5 s to show up */
	usleep(1500 * 1000);
	json_t *reqs = receiver_requests(&rcv, "/ops");
	json_array_foreach(reqs, i, q) {
		json_t *b = json_loads(json_string_value(json_object_get(q, "body")), 0, NULL);
		const char *about = json_string_value(json_object_get(b, "subscription_id"));
		assert_true(!about || strcmp(about, broken) != 0);
		json_decref(b);
	}
	json_decref(reqs);

	/* enabled and succeeding again: recovered */
	assert_int_equal(receiver_script(&rcv, "/down", "{\"default\":{\"status\":200}}"), 0);
	char path[128];
	snprintf(path, sizeof(path), "/v1/subscriptions/%s", flaky);
	json_decref(api_call(&dmn, "PATCH", path, "{\"enabled\":true}", 200));
	e2e_send(&dmn, ev, "{\"event_type\":\"f.e\",\"payload\":{\"i\":99}}");
	wait_for("/ops", "outboxd.subscription.recovered", 1);
	assert_int_equal(received("/ops", "outboxd.subscription.recovered", &body), 1);
	assert_string_equal(json_string_value(json_object_get(body, "subscription_id")), flaky);
	assert_true(json_integer_value(json_object_get(body, "failing_ms")) >= 500);
	json_decref(body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ops_events, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
