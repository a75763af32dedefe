/* test_health.c: endpoint health as an operator sees it. A subscription whose
 * every attempt fails for disable_after is disabled, with the reason and time in the API;
 * nothing it had pending is dropped (no delivery goes to the dead-letter queue for it);
 * `outboxd subs enable` lets every waiting delivery through and the recovery (a success
 * after failing for at least the breaker's failure window) is noted.
 * disable_after "0s" never disables; the setting gives the default; outboxd's own fields
 * cannot be set through the API. */
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

static json_t *get_sub(const char *id)
{
	return e2e_get(&dmn, "/v1/subscriptions/%s", id);
}

static int is_disabled(void *arg)
{
	json_t *s = get_sub(arg);
	int off = json_is_false(json_object_get(s, "enabled"));
	json_decref(s);
	return off;
}

/* /v1/stats shows subscription arg disabled by outboxd, with its reason. The stats come
 * from the instance's copy of the subscriptions, which the disabling reaches right after
 * the store: the test waits for it rather than reading it once. */
static int stats_show_disabled(void *arg)
{
	json_t *stats = e2e_get(&dmn, "/v1/stats");
	json_t *x;
	size_t k;
	int shown = 0;
	json_array_foreach(json_object_get(stats, "subscriptions"), k, x)
		if (strcmp(json_string_value(json_object_get(x, "id")), arg) == 0)
			shown = json_is_string(json_object_get(x, "disabled_reason")) &&
				json_is_false(json_object_get(x, "enabled"));
	json_decref(stats);
	return shown;
}

static int cli(const char *args)
{
	char out[4096];
	return e2e_cli(&dmn, out, sizeof(out), args);
}

static void test_disable_and_recover(void **state)
{
	/* the default from the setting; one subscription opts out. A try waits up to 10 s
	 * for its answer, so a busy machine never turns an answered request into a retry. */
	const char *env[] = {"OUTBOXD_DISABLE_AFTER=1s", "OUTBOXD_DELIVERY_TIMEOUT=10s", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	assert_int_equal(receiver_script(&rcv, "/down", "{\"default\":{\"status\":500}}"), 0);
	assert_int_equal(receiver_script(&rcv, "/never", "{\"default\":{\"status\":500}}"), 0);
	char sub[64], never[64], ev[3][64];
	e2e_create_sub(&dmn, sub, "{\"name\":\"flaky\",\"event_types\":[\"h.*\"],"
				  "\"endpoint\":\"%s/down\",\"retry\":{\"immediate\":1,"
				  "\"interval\":\"200ms\",\"max_retries\":0},"
				  "\"circuit_breaker\":{\"failure_window\":\"500ms\"}}", rcv.url);
	e2e_create_sub(&dmn, never, "{\"name\":\"patient\",\"event_types\":[\"h.*\"],"
				    "\"endpoint\":\"%s/never\",\"disable_after\":\"0s\","
				    "\"retry\":{\"immediate\":1,\"interval\":\"200ms\","
				    "\"max_retries\":0}}", rcv.url);
	for (int i = 0; i < 3; i++) {
		char body[96];
		snprintf(body, sizeof(body), "{\"event_type\":\"h.e\",\"payload\":{\"i\":%d}}", i);
		e2e_send(&dmn, ev[i], body);
	}

	/* disabled, with why and when */
	assert_int_equal(harness_wait(is_disabled, sub, 20000), 0);
	json_t *s = get_sub(sub);
	const char *reason = json_string_value(json_object_get(s, "disabled_reason"));
	assert_non_null(reason);
	assert_non_null(strstr(reason, "disable_after"));
	assert_non_null(strstr(reason, "500"));
	assert_non_null(json_string_value(json_object_get(s, "disabled_at")));
	json_decref(s);
	/* stats and the CLI show it */
	assert_int_equal(harness_wait(stats_show_disabled, sub, 10000), 0);
	char out[8192];
	assert_int_equal(e2e_cli(&dmn, out, sizeof(out), "stats"), 0);
	assert_non_null(strstr(out, "disabled by outboxd: every attempt failed"));
	/* the one that opted out keeps trying, enabled */
	s = get_sub(never);
	assert_true(json_is_true(json_object_get(s, "enabled")));
	json_decref(s);

	/* nothing dropped: no dead delivery, every delivery of the disabled one waits */
	json_t *dlq = e2e_get(&dmn, "/v1/dlq");
	assert_int_equal(json_array_size(json_object_get(dlq, "items")), 0);
	json_decref(dlq);
	json_t *page = e2e_get(&dmn, "/v1/deliveries?subscription_id=%s", sub);
	assert_int_equal(json_array_size(json_object_get(page, "items")), 3);
	json_decref(page);

	/* outboxd's own fields cannot be written through the API */
	char path[128];
	snprintf(path, sizeof(path), "/v1/subscriptions/%s", sub);
	json_t *r = api_call(&dmn, "PATCH", path, "{\"disabled_reason\":\"mine\"}", 400);
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "error"),
							       "field")), "disabled_reason");
	json_decref(r);

	/* the endpoint is back; the operator enables it: every waiting delivery arrives */
	assert_int_equal(receiver_script(&rcv, "/down", "{\"default\":{\"status\":200}}"), 0);
	long before = receiver_count(&rcv, "/down");
	char args[128];
	snprintf(args, sizeof(args), "subs enable %s", sub);
	assert_int_equal(cli(args), 0);
	s = get_sub(sub);
	assert_true(json_is_true(json_object_get(s, "enabled")));
	assert_null(json_object_get(s, "disabled_reason"));
	assert_null(json_object_get(s, "disabled_at"));
	json_decref(s);
	assert_int_equal(receiver_wait_count(&rcv, "/down", before + 3, 20000), 0);
	for (int i = 0; i < 100; i++) {
		page = e2e_get(&dmn, "/v1/deliveries?subscription_id=%s&status=PROCESSED", sub);
		size_t done = json_array_size(json_object_get(page, "items"));
		json_decref(page);
		if (done == 3)
			break;
		usleep(100 * 1000);
	}
	page = e2e_get(&dmn, "/v1/deliveries?subscription_id=%s&status=PROCESSED", sub);
	assert_int_equal(json_array_size(json_object_get(page, "items")), 3);
	json_decref(page);
	/* ...each once: one request answered 200 per event (its webhook-id) */
	json_t *reqs = receiver_requests(&rcv, "/down");
	for (int i = 0; i < 3; i++) {
		json_t *q;
		size_t j;
		int ok = 0;
		json_array_foreach(reqs, j, q) {
			const char *id = json_string_value(
				json_object_get(json_object_get(q, "headers"), "webhook-id"));
			ok += id && strcmp(id, ev[i]) == 0 &&
			      json_integer_value(json_object_get(q, "status")) == 200;
		}
		assert_int_equal(ok, 1);
	}
	json_decref(reqs);

	/* the recovery is noted, in the log and the metrics */
	char log[512], text[65536] = "";
	FILE *f = fopen(daemon_log_path(&dmn, log, sizeof(log)), "r");
	assert_non_null(f);
	size_t got = fread(text, 1, sizeof(text) - 1, f);
	text[got] = '\0';
	fclose(f);
	assert_non_null(strstr(text, "recovered"));
	struct http_resp m;
	char url[128];
	snprintf(url, sizeof(url), "%s/metrics", dmn.url);
	assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &m), 0);
	assert_non_null(strstr(m.body, "outboxd_subscriptions_disabled_total 1"));
	assert_non_null(strstr(m.body, "outboxd_subscriptions_recovered_total 1"));
	http_resp_free(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_disable_and_recover, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
