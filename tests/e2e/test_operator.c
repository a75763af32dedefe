/* test_operator.c: the operator's surface during an incident — every filter, keyset
 * pagination while rows arrive, dry runs that match what replays do, paced replay jobs
 * (200/s really takes ~5 s), cancel, restart-safe jobs, purge that never touches NEW,
 * the audit log and stats. */
#include "e2e.h"

#include <time.h>

static struct receiver rcv;
static struct daemon dmn;
static char dead_sub[64], ok_sub[64], off_sub[64];

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void send_batch(const char *type, int n, const char *source)
{
	char *body = malloc((size_t)n * 128 + 64);
	size_t off = (size_t)sprintf(body, "{\"events\":[");
	for (int i = 0; i < n; i++)
		off += (size_t)sprintf(body + off, "%s{\"event_type\":\"%s\",\"source\":\"%s\",\"payload\":{\"i\":%d}}",
				       i ? "," : "", type, source, i);
	sprintf(body + off, "]}");
	json_t *r = api_call(&dmn, "POST", "/v1/events", body, 202);
	free(body);
	json_decref(r);
}

static long count(const char *fmt, ...)
{
	char path[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	long total = 0;
	char page[1400];
	snprintf(page, sizeof(page), "%s%slimit=1000", path, strchr(path, '?') ? "&" : "?");
	for (;;) {
		json_t *r = api_call(&dmn, "GET", page, NULL, 200);
		total += (long)json_array_size(json_object_get(r, "items"));
		json_t *next = json_object_get(r, "next_cursor");
		if (!json_is_string(next)) {
			json_decref(r);
			return total;
		}
		snprintf(page, sizeof(page), "%s%slimit=1000&cursor=%s", path,
			 strchr(path, '?') ? "&" : "?", json_string_value(next));
		json_decref(r);
	}
}

/* Polls count(path) every 100 ms until it reaches want, up to timeout_ms; fails the test
 * when it does not. */
static void wait_count(const char *path, long want, int timeout_ms)
{
	int64_t end = now_ms() + timeout_ms;
	long n;
	while ((n = count("%s", path)) < want && now_ms() < end)
		usleep(100 * 1000);
	if (n < want)
		fprintf(stderr, "%s: %ld rows, want %ld\n", path, n, want);
	assert_true(n >= want);
}

/* GET /v1/jobs/id every 50 ms until its replayed count reaches at_least or it is no longer
 * running, up to timeout_ms; returns the last job seen (caller frees). */
static json_t *wait_replayed(const char *id, long at_least, int timeout_ms)
{
	int64_t end = now_ms() + timeout_ms;
	json_t *j = NULL;
	for (;;) {
		json_decref(j);
		j = e2e_get(&dmn, "/v1/jobs/%s", id);
		if (json_integer_value(json_object_get(j, "replayed")) >= at_least ||
		    strcmp(json_string_value(json_object_get(j, "state")), "running") != 0 ||
		    now_ms() >= end)
			return j;
		usleep(50 * 1000);
	}
}

static int setup(void **state)
{
	assert_int_equal(receiver_start(&rcv), 0);
	memset(&dmn, 0, sizeof(dmn));
	const char *env[] = {"OUTBOXD_RETRY_INTERVAL=100ms", "OUTBOXD_SHUTDOWN_GRACE=500ms", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	/* A subscriber that never answers in time keeps its deliveries NEW and in flight. */
	assert_int_equal(receiver_script(&rcv, "/hang",
					 "{\"path\":\"/hang\",\"default\":{\"status\":200,\"delay_ms\":60000}}"),
			 0);
	int port = harness_free_port();
	/* 2,000 failed rounds in seconds would open its circuit breaker (more than 1,000
	 * within 3 minutes) and delay the rest: this test wants them all dead at once. */
	e2e_create_sub(&dmn, dead_sub,
		       "{\"name\":\"dead-end\",\"event_types\":[\"order.*\"],"
		       "\"endpoint\":\"http://127.0.0.1:%d/\",\"retry\":{\"immediate\":1,"
		       "\"max_retries\":1,\"interval\":\"100ms\"},"
		       "\"circuit_breaker\":{\"enabled\":false}}", port);
	e2e_create_sub(&dmn, ok_sub, "{\"name\":\"fine\",\"event_types\":[\"user.*\"],"
				     "\"endpoint\":\"%s/ok\"}", rcv.url);
	e2e_create_sub(&dmn, off_sub, "{\"name\":\"stuck\",\"event_types\":[\"audit.*\"],"
				      "\"endpoint\":\"%s/hang\",\"timeout\":\"60s\"}", rcv.url);
	/* 1,000 orders die (refused: 503), 20 users succeed, 5 audit events hang (NEW). */
	send_batch("order.created", 600, "shop");
	send_batch("order.paid", 400, "billing");
	send_batch("user.created", 20, "crm");
	send_batch("audit.logged", 5, "sec");
	wait_count("/v1/dlq", 1000, 60000);
	assert_int_equal(count("/v1/dlq"), 1000);
	assert_int_equal(receiver_wait_count(&rcv, "/ok", 20, 30000), 0);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

static void test_filters(void **state)
{
	assert_int_equal(count("/v1/deliveries?status=FAILED"), 1000);
	assert_int_equal(count("/v1/deliveries?status=PROCESSED"), 20);
	assert_int_equal(count("/v1/deliveries?status=NEW"), 5);
	assert_int_equal(count("/v1/dlq?subscription_id=%s", dead_sub), 1000);
	assert_int_equal(count("/v1/dlq?name=dead-end"), 1000);
	assert_int_equal(count("/v1/deliveries?name=fine"), 20);
	assert_int_equal(count("/v1/dlq?event_type=order.paid"), 400);
	assert_int_equal(count("/v1/dlq?event_type=order.*"), 1000);
	assert_int_equal(count("/v1/deliveries?event_type=*.created"), 620);
	assert_int_equal(count("/v1/dlq?code=503"), 1000);
	assert_int_equal(count("/v1/dlq?code=504"), 0);
	assert_int_equal(count("/v1/dlq?q=refused"), 1000);
	assert_int_equal(count("/v1/dlq?q=Refused"), 0); /* case-sensitive substring */
	assert_int_equal(count("/v1/deliveries?source=billing"), 400);
	assert_int_equal(count("/v1/dlq?source=billing&event_type=order.*&code=503&name=dead-end"), 400);
	assert_int_equal(count("/v1/dlq?from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z"), 1000);
	assert_int_equal(count("/v1/dlq?to=2000-01-01T00:00:00Z"), 0);

	/* event_id: the deliveries of one event. */
	json_t *one = e2e_get(&dmn, "/v1/deliveries?name=fine&limit=1");
	const char *ev = json_string_value(json_object_get(json_array_get(json_object_get(one, "items"), 0), "event_id"));
	assert_int_equal(count("/v1/deliveries?event_id=%s", ev), 1);
	json_decref(one);

	/* Sorting by attempt_count, descending: non-increasing across pages. */
	char path[512] = "/v1/deliveries?sort=attempt_count&order=desc&limit=300";
	long last = 1 << 30, seen = 0;
	for (;;) {
		json_t *r = e2e_get(&dmn, "%s", path);
		json_t *d;
		size_t i;
		json_array_foreach(json_object_get(r, "items"), i, d) {
			long a = (long)json_integer_value(json_object_get(d, "attempt_count"));
			assert_true(a <= last);
			last = a;
			seen++;
		}
		json_t *next = json_object_get(r, "next_cursor");
		if (!json_is_string(next)) {
			json_decref(r);
			break;
		}
		snprintf(path, sizeof(path), "/v1/deliveries?sort=attempt_count&order=desc&limit=300&cursor=%s",
			 json_string_value(next));
		json_decref(r);
	}
	assert_int_equal(seen, 1025);

	/* An unknown name is a 404 naming the field. */
	json_t *e = api_call(&dmn, "GET", "/v1/dlq?name=nobody", NULL, 404);
	assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "field")), "name");
	json_decref(e);
}

static void test_stats(void **state)
{
	json_t *x;
	size_t i;
	json_t *s = e2e_get(&dmn, "/v1/stats");
	json_t *by = json_object_get(s, "deliveries");
	assert_int_equal(json_integer_value(json_object_get(by, "PROCESSED")), 20);
	assert_int_equal(json_integer_value(json_object_get(by, "NEW")), 5);
	assert_int_equal(json_integer_value(json_object_get(by, "FAILED_DEAD")), 1000);
	assert_int_equal(json_integer_value(json_object_get(s, "dlq_depth")), 1000);
	assert_int_equal(json_integer_value(json_object_get(s, "in_flight")), 5);
	/* a number (null only when nothing is dead, and json_integer_value reads null as 0) */
	assert_true(json_is_integer(json_object_get(s, "oldest_dead_age_ms")));
	assert_true(json_integer_value(json_object_get(s, "oldest_dead_age_ms")) >= 0);
	json_t *subs = json_object_get(s, "subscriptions");
	assert_int_equal(json_array_size(subs), 3);
	json_array_foreach(subs, i, x) {
		const char *name = json_string_value(json_object_get(x, "name"));
		if (strcmp(name, "fine") == 0) {
			assert_true(json_real_value(json_object_get(x, "success_rate")) > 0.99);
		} else if (strcmp(name, "dead-end") == 0) {
			assert_true(json_real_value(json_object_get(x, "success_rate")) < 0.01);
			assert_int_equal(json_integer_value(json_object_get(json_object_get(x, "last_error"), "code")),
					 503);
		}
	}
	json_decref(s);
}

/* Pages keep their place while new rows arrive: nothing skipped, nothing repeated. */
static void test_pagination_while_rows_arrive(void **state)
{
	char path[512] = "/v1/deliveries?name=dead-end&limit=97";
	json_t *ids = json_object();
	int pages = 0;
	for (;;) {
		json_t *r = e2e_get(&dmn, "%s", path);
		json_t *d;
		size_t i;
		json_array_foreach(json_object_get(r, "items"), i, d) {
			const char *id = json_string_value(json_object_get(d, "id"));
			assert_null(json_object_get(ids, id)); /* never twice */
			json_object_set_new(ids, id, json_true());
		}
		if (++pages % 3 == 0)
			send_batch("order.late", 7, "shop"); /* new rows during the walk */
		json_t *next = json_object_get(r, "next_cursor");
		if (!json_is_string(next)) {
			json_decref(r);
			break;
		}
		snprintf(path, sizeof(path), "/v1/deliveries?name=dead-end&limit=97&cursor=%s",
			 json_string_value(next));
		json_decref(r);
	}
	/* Every row that existed at the start was seen; late rows (newer) may be too. */
	assert_true(json_object_size(ids) >= 1000);
	long now_total = count("/v1/deliveries?name=dead-end");
	assert_true((long)json_object_size(ids) <= now_total);
	json_decref(ids);
	/* Let the late ones die too, so the DLQ holds only what the next tests expect. */
	wait_count("/v1/dlq?event_type=order.late", now_total - 1000, 30000);
	char body[256];
	snprintf(body, sizeof(body), "{\"filter\":{\"event_type\":\"order.late\"}}");
	json_t *p = api_call(&dmn, "POST", "/v1/dlq/purge", body, 200);
	assert_int_equal(json_integer_value(json_object_get(p, "purged")), now_total - 1000);
	json_decref(p);
}

static json_t *wait_job(const char *id, const char *state, int timeout_ms)
{
	json_t *j = NULL;
	int64_t end = now_ms() + timeout_ms;
	while (now_ms() < end) {
		json_decref(j);
		j = e2e_get(&dmn, "/v1/jobs/%s", id);
		if (strcmp(json_string_value(json_object_get(j, "state")), state) == 0)
			return j;
		usleep(50 * 1000);
	}
	return j;
}

static void test_dry_run_then_paced_replay(void **state)
{
	json_t *dry = api_call(&dmn, "POST", "/v1/dlq/replay",
			       "{\"filter\":{\"name\":\"dead-end\"},\"dry_run\":true}", 200);
	long matched = (long)json_integer_value(json_object_get(dry, "matched"));
	json_decref(dry);
	assert_int_equal(matched, 1000);
	assert_int_equal(count("/v1/dlq"), 1000); /* a dry run changes nothing */

	int64_t t0 = now_ms();
	json_t *r = api_call(&dmn, "POST", "/v1/dlq/replay",
			     "{\"filter\":{\"name\":\"dead-end\"},\"rate\":200}", 202);
	char job[64];
	snprintf(job, sizeof(job), "%s", json_string_value(json_object_get(r, "job_id")));
	assert_int_equal(json_integer_value(json_object_get(r, "matched")), 1000);
	json_decref(r);

	/* Half way or so, the job is running and has kept to its pace: the pacer starts with
	 * one and adds 200 a second, so by any time t after t0 at most 1 + 200 t are
	 * replayed however late the test looks (t is measured after the answer). */
	json_t *mid = wait_replayed(job, 300, 30000);
	int64_t mid_ms = now_ms() - t0;
	long done_mid = (long)json_integer_value(json_object_get(mid, "replayed"));
	fprintf(stderr, "replay at 200/s: %ld replayed after %lld ms\n", done_mid,
		(long long)mid_ms);
	assert_string_equal(json_string_value(json_object_get(mid, "state")), "running");
	assert_true(done_mid >= 300 && done_mid < 1000);
	assert_true(done_mid <= 1 + 200 * mid_ms / 1000);
	assert_int_equal(json_integer_value(json_object_get(mid, "remaining")), 1000 - done_mid);
	json_decref(mid);

	json_t *j = wait_job(job, "done", 30000);
	int64_t took = now_ms() - t0;
	assert_string_equal(json_string_value(json_object_get(j, "state")), "done");
	assert_int_equal(json_integer_value(json_object_get(j, "replayed")), matched);
	assert_int_equal(json_integer_value(json_object_get(j, "remaining")), 0);
	fprintf(stderr, "replay of 1000 at 200/s took %lld ms\n", (long long)took);
	/* never faster than the rate (1,000 at 200/s: 5 s); the upper bound only says the
	 * job kept going, with room for a busy machine's late ticks */
	assert_true(took >= 4500);
	assert_true(took <= 15000);
	json_decref(j);
	/* They went through the pipeline again: a manual attempt each, then back (still
	 * refused) to the DLQ. */
	wait_count("/v1/dlq", 1000, 30000);
	json_t *some = e2e_get(&dmn, "/v1/dlq?limit=1");
	const char *id = json_string_value(json_object_get(json_array_get(json_object_get(some, "items"), 0), "id"));
	json_t *d = e2e_get(&dmn, "/v1/deliveries/%s", id);
	json_t *attempts = json_object_get(d, "attempts");
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(attempts, json_array_size(attempts) - 1), "kind")),
			    "manual");
	json_decref(d);
	json_decref(some);
}

static void test_cancel_and_restart(void **state)
{
	json_t *r = api_call(&dmn, "POST", "/v1/dlq/replay",
			     "{\"filter\":{\"event_type\":\"order.created\"},\"rate\":50}", 202);
	char job[64];
	snprintf(job, sizeof(job), "%s", json_string_value(json_object_get(r, "job_id")));
	json_decref(r);

	/* A restart in the middle (600 at 50/s take 12 s): the job resumes where it was. */
	json_t *started = wait_replayed(job, 10, 30000);
	long before_stop = (long)json_integer_value(json_object_get(started, "replayed"));
	assert_string_equal(json_string_value(json_object_get(started, "state")), "running");
	assert_true(before_stop >= 10);
	json_decref(started);
	assert_int_equal(daemon_stop(&dmn), 0);
	json_t *before = NULL;
	const char *env[] = {"OUTBOXD_RETRY_INTERVAL=100ms", "OUTBOXD_SHUTDOWN_GRACE=500ms", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	before = e2e_get(&dmn, "/v1/jobs/%s", job);
	long at_restart = (long)json_integer_value(json_object_get(before, "replayed"));
	assert_string_equal(json_string_value(json_object_get(before, "state")), "running");
	assert_true(at_restart >= before_stop); /* its progress was kept, not started over */
	json_decref(before);
	json_t *after = wait_replayed(job, at_restart + 1, 30000);
	long progressed = (long)json_integer_value(json_object_get(after, "replayed"));
	json_decref(after);
	assert_true(progressed > at_restart);

	/* Cancel stops it: no progress afterwards. */
	char path[128];
	snprintf(path, sizeof(path), "/v1/jobs/%s/cancel", job);
	json_t *c = api_call(&dmn, "POST", path, "{}", 200);
	assert_string_equal(json_string_value(json_object_get(c, "state")), "cancelled");
	long at_cancel = (long)json_integer_value(json_object_get(c, "replayed"));
	json_decref(c);
	assert_true(at_cancel < 600);
	/* nothing to wait for but time: six of its 100 ms ticks, with no progress */
	usleep(600 * 1000);
	json_t *later = e2e_get(&dmn, "/v1/jobs/%s", job);
	assert_string_equal(json_string_value(json_object_get(later, "state")), "cancelled");
	assert_true((long)json_integer_value(json_object_get(later, "replayed")) <= at_cancel + 10);
	json_decref(later);
	/* Cancelling twice is fine; an unknown job is 404. */
	json_decref(api_call(&dmn, "POST", path, "{}", 200));
	json_decref(api_call(&dmn, "GET", "/v1/jobs/01890a5d-ac96-774b-bcce-b302099a8057", NULL, 404));

	/* A cancelled job tells what it left undone. */
	later = e2e_get(&dmn, "/v1/jobs/%s", job);
	long matched = (long)json_integer_value(json_object_get(later, "matched"));
	long replayed = (long)json_integer_value(json_object_get(later, "replayed"));
	assert_true(matched > replayed);
	assert_int_equal(json_integer_value(json_object_get(later, "remaining")), matched - replayed);
	json_decref(later);

	/* GET /v1/jobs: newest first (this one, then the previous test's done job), who
	 * started them, one page at a time, by state. */
	json_t *list = e2e_get(&dmn, "/v1/jobs?limit=1");
	json_t *items = json_object_get(list, "items");
	assert_int_equal(json_array_size(items), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(items, 0), "id")), job);
	assert_string_equal(json_string_value(json_object_get(json_array_get(items, 0), "actor")),
			    "admin");
	assert_int_equal(json_integer_value(json_object_get(json_array_get(items, 0), "remaining")),
			 matched - replayed);
	const char *cursor = json_string_value(json_object_get(list, "next_cursor"));
	assert_non_null(cursor);
	json_t *page2 = e2e_get(&dmn, "/v1/jobs?limit=1&cursor=%s", cursor);
	json_t *older = json_array_get(json_object_get(page2, "items"), 0);
	assert_string_equal(json_string_value(json_object_get(older, "state")), "done");
	assert_int_equal(json_integer_value(json_object_get(older, "remaining")), 0);
	assert_true(json_is_null(json_object_get(page2, "next_cursor")));
	json_decref(page2);
	json_decref(list);
	list = e2e_get(&dmn, "/v1/jobs?state=cancelled");
	assert_int_equal(json_array_size(json_object_get(list, "items")), 1);
	json_decref(list);
	json_decref(api_call(&dmn, "GET", "/v1/jobs?state=paused", NULL, 400));
	json_decref(api_call(&dmn, "GET", "/v1/jobs?cursor=nonsense", NULL, 400));
	/* The same through the CLI. */
	char out[8192];
	assert_int_equal(e2e_cli(&dmn, out, sizeof(out), "jobs list"), 0);
	assert_non_null(strstr(out, job));
	assert_non_null(strstr(out, "cancelled"));
	assert_non_null(strstr(out, "2 jobs"));
}

static void test_purge_never_touches_new(void **state)
{
	/* the cancelled job's replays are refused again, back in the DLQ */
	wait_count("/v1/dlq", 1000, 30000);
	long new_before = count("/v1/deliveries?status=NEW");
	assert_int_equal(new_before, 5);
	json_t *dry = api_call(&dmn, "POST", "/v1/dlq/purge", "{\"filter\":{},\"dry_run\":true}", 200);
	long matched = (long)json_integer_value(json_object_get(dry, "matched"));
	json_decref(dry);
	assert_int_equal(matched, count("/v1/dlq"));
	json_t *p = api_call(&dmn, "POST", "/v1/dlq/purge", "{\"filter\":{}}", 200);
	assert_int_equal(json_integer_value(json_object_get(p, "purged")), matched);
	json_decref(p);
	assert_int_equal(count("/v1/dlq"), 0);
	assert_int_equal(count("/v1/deliveries?status=NEW"), new_before);
	assert_int_equal(count("/v1/deliveries?status=PROCESSED"), 20);
	json_decref(api_call(&dmn, "POST", "/v1/dlq/purge",
			     "{\"filter\":{\"status\":\"NEW\"}}", 422));
}

static void test_audit(void **state)
{
	json_t *a = e2e_get(&dmn, "/v1/audit?limit=1000");
	json_t *items = json_object_get(a, "items"), *x;
	size_t i;
	int saw_job = 0, saw_cancel = 0, saw_purge = 0, saw_create = 0;
	json_array_foreach(items, i, x) {
		const char *action = json_string_value(json_object_get(x, "action"));
		assert_string_equal(json_string_value(json_object_get(x, "actor")), "admin");
		assert_non_null(json_string_value(json_object_get(x, "at")));
		saw_job |= strcmp(action, "dlq.replay_job") == 0 &&
			   json_integer_value(json_object_get(x, "count")) == 1000;
		saw_cancel |= strcmp(action, "job.cancel") == 0;
		saw_purge |= strcmp(action, "dlq.purge_filter") == 0;
		saw_create |= strcmp(action, "subscription.create") == 0;
	}
	assert_true(saw_job && saw_cancel && saw_purge && saw_create);
	json_decref(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_filters),
		cmocka_unit_test(test_stats),
		cmocka_unit_test(test_pagination_while_rows_arrive),
		cmocka_unit_test(test_dry_run_then_paced_replay),
		cmocka_unit_test(test_cancel_and_restart),
		cmocka_unit_test(test_purge_never_touches_new),
		cmocka_unit_test(test_audit),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
