/* test_retention.c: what outboxd keeps and what it writes down.
 * Retention (cleanup_after): the cleanup keeps a PROCESSED delivery at least
 * cleanup_after after it was delivered, deletes it at a run after that, and never deletes
 * a FAILED one. Audit records (log_deliveries): one log line per outcome
 * once it is stored, EXECUTED, FAILED (a retry follows) or DEAD, with delivery, event,
 * subscription, code and duration, and no credential. */
#include "e2e.h"

#include "util/clock.h"

static struct receiver rcv;
static struct daemon dmn;

#define KEEP_MS 3000

static int setup(void **state)
{
	assert_int_equal(receiver_start(&rcv), 0);
	memset(&dmn, 0, sizeof(dmn));
	const char *env[] = {"OUTBOXD_CLEANUP_ENABLED=true", "OUTBOXD_CLEANUP_INTERVAL=200ms",
			     "OUTBOXD_CLEANUP_AFTER=3s", "OUTBOXD_LOG_DELIVERIES=true",
			     "OUTBOXD_LOG_FORMAT=json", "OUTBOXD_LOG_LEVEL=warn", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

/* The only delivery of one event sent now: its id into out. */
static void send_one(const char *type, char out[64])
{
	char body[256], ev[64], ids[2][64];
	snprintf(body, sizeof(body), "{\"event_type\":\"%s\",\"payload\":{\"n\":1}}", type);
	e2e_send(&dmn, ev, body);
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 2), 1);
	snprintf(out, 64, "%s", ids[0]);
}

static int gone(void *arg)
{
	char path[128];
	snprintf(path, sizeof(path), "/v1/deliveries/%s", (const char *)arg);
	struct http_resp r;
	char url[256];
	snprintf(url, sizeof(url), "%s%s", dmn.url, path);
	int status = http_do("GET", url, dmn.token, NULL, NULL, 0, &r) == 0 ? r.status : 0;
	http_resp_free(&r);
	return status == 404;
}

static int64_t processed_at(const char *id)
{
	json_t *d = e2e_wait_status(&dmn, id, "PROCESSED", 5000);
	int64_t at = 0;
	assert_int_equal(clock_parse_rfc3339(json_string_value(json_object_get(d, "processed_at")),
					     &at), 0);
	json_decref(d);
	return at;
}

/* When the test first saw each of two deliveries gone (clock_now_ms; 0 while present). */
struct watch {
	char *old_id, *young_id;
	int64_t old_gone, young_gone;
};

static int both_gone(void *arg)
{
	struct watch *w = arg;
	if (!w->old_gone && gone(w->old_id))
		w->old_gone = clock_now_ms();
	if (!w->young_gone && gone(w->young_id))
		w->young_gone = clock_now_ms();
	return w->old_gone && w->young_gone;
}

static void test_cleanup_after_keeps_young(void **state)
{
	char old_id[64], young_id[64], failed_id[64], sub[64];
	e2e_create_sub(&dmn, sub, "{\"name\":\"kept\",\"event_types\":[\"keep.ok\"],"
				  "\"endpoint\":\"%s/ok\"}", rcv.url);
	assert_int_equal(receiver_script(&rcv, "/no", "{\"default\":{\"status\":500}}"), 0);
	e2e_create_sub(&dmn, sub, "{\"name\":\"broken\",\"event_types\":[\"keep.no\"],"
				  "\"endpoint\":\"%s/no\",\"retry\":{\"immediate\":1,\"max_retries\":0,"
				  "\"interval\":\"1h\"}}", rcv.url);
	send_one("keep.ok", old_id);
	int64_t old_at = processed_at(old_id);
	send_one("keep.no", failed_id);
	json_decref(e2e_wait_status(&dmn, failed_id, "FAILED", 5000));
	usleep(1500 * 1000); /* the young one is processed 1.5 s after the old one at least */
	send_one("keep.ok", young_id);
	int64_t young_at = processed_at(young_id);

	/* Both watched from here on: the cleanup runs every 200 ms and deletes each once it
	 * is 3 s old, not before. A delivery first seen gone at t was deleted at t or before,
	 * so a correct cleanup passes however late the test looks; one that deletes early,
	 * or the young one together with the old, shows a delivery gone younger than 3 s. */
	struct watch w = {old_id, young_id, 0, 0};
	assert_int_equal(harness_wait(both_gone, &w, 15000), 0);
	assert_true(w.old_gone - old_at >= KEEP_MS);
	assert_true(w.young_gone - young_at >= KEEP_MS);
	/* the failed one, older than both, is never deleted */
	json_t *f = e2e_get(&dmn, "/v1/deliveries/%s", failed_id);
	assert_string_equal(json_string_value(json_object_get(f, "status")), "FAILED");
	json_decref(f);
}

/* The daemon's log as one string (caller frees). */
static char *read_log(void)
{
	char path[512];
	daemon_log_path(&dmn, path, sizeof(path));
	FILE *fp = fopen(path, "rb");
	assert_non_null(fp);
	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	char buf[8192];
	size_t n;
	while ((n = fread(buf, 1, sizeof(buf), fp)) > 0)
		fwrite(buf, 1, n, mem);
	fclose(mem);
	fclose(fp);
	return text;
}

/* The audit line of delivery id with outcome word msg, parsed (caller frees), or NULL. */
static json_t *audit_line(const char *text, const char *msg, const char *id)
{
	for (const char *line = text; line && *line;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		json_t *o = json_loadb(line, len, 0, NULL);
		if (o && json_is_string(json_object_get(o, "msg")) &&
		    strcmp(json_string_value(json_object_get(o, "msg")), msg) == 0 &&
		    json_is_string(json_object_get(o, "delivery_id")) &&
		    strcmp(json_string_value(json_object_get(o, "delivery_id")), id) == 0)
			return o;
		json_decref(o);
		line = end ? end + 1 : NULL;
	}
	return NULL;
}

static void test_log_deliveries(void **state)
{
	char ok_id[64], dead_id[64], ok_sub[64], dead_sub[64];
	e2e_create_sub(&dmn, ok_sub,
		       "{\"name\":\"audited\",\"event_types\":[\"audit.ok\"],\"endpoint\":\"%s/ok\","
		       "\"auth\":{\"type\":\"api_key\",\"header\":\"X-Api-Key\","
		       "\"value\":\"key-that-must-not-be-logged\"}}", rcv.url);
	assert_int_equal(receiver_script(&rcv, "/dead", "{\"default\":{\"status\":503}}"), 0);
	e2e_create_sub(&dmn, dead_sub,
		       "{\"name\":\"doomed\",\"event_types\":[\"audit.dead\"],\"endpoint\":\"%s/dead\","
		       "\"retry\":{\"immediate\":1,\"interval\":\"100ms\",\"max_retries\":1}}",
		       rcv.url);
	send_one("audit.ok", ok_id);
	send_one("audit.dead", dead_id);
	json_decref(e2e_wait_status(&dmn, ok_id, "PROCESSED", 5000));
	json_decref(e2e_wait_dead(&dmn, dead_id, 5000));

	json_t *line = NULL;
	char *text = NULL;
	for (int i = 0; i < 50 && !line; i++) { /* written once stored: may trail the API */
		free(text);
		text = read_log();
		line = audit_line(text, "DEAD", dead_id);
		if (!line)
			usleep(100 * 1000);
	}
	assert_non_null(line);
	assert_int_equal(json_integer_value(json_object_get(line, "code")), 503);
	assert_string_equal(json_string_value(json_object_get(line, "subscription_id")), dead_sub);
	assert_string_equal(json_string_value(json_object_get(line, "subscription_name")), "doomed");
	assert_string_equal(json_string_value(json_object_get(line, "event_type")), "audit.dead");
	assert_int_equal(json_integer_value(json_object_get(line, "attempt_count")), 2);
	json_decref(line);

	line = audit_line(text, "FAILED", dead_id); /* the first round: a retry followed */
	assert_non_null(line);
	assert_true(json_is_string(json_object_get(line, "next_attempt_at")));
	assert_int_equal(json_integer_value(json_object_get(line, "code")), 503);
	json_decref(line);

	line = audit_line(text, "EXECUTED", ok_id);
	assert_non_null(line);
	assert_int_equal(json_integer_value(json_object_get(line, "code")), 200);
	assert_true(json_is_string(json_object_get(line, "event_id")));
	assert_true(json_is_integer(json_object_get(line, "duration_ms")));
	assert_true(json_integer_value(json_object_get(line, "duration_ms")) >= 0);
	assert_string_equal(json_string_value(json_object_get(line, "level")), "info");
	json_decref(line);
	/* written although log_level is warn; never a credential */
	assert_null(strstr(text, "key-that-must-not-be-logged"));
	assert_null(strstr(text, dmn.token));
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_cleanup_after_keeps_young, setup, teardown),
		cmocka_unit_test_setup_teardown(test_log_deliveries, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
