/* test_retries.c: the retry layers as a subscriber sees them (docs/retries.md): each
 * policy's real schedule, as outboxd wrote it down (its audit lines) and as the receiver
 * saw it, Retry-After honoured, a permanent code dead-lettered at once, the circuit
 * breaker opening under a failure storm (delay actions, then circuit_open in the DLQ)
 * and closing after recovery, and head-of-line isolation with per-subscription
 * max_in_flight and rate_limit. Real daemon, real receiver; durations are small and set
 * per subscription. */
#include "e2e.h"

#include <time.h>

#include "util/clock.h"

static struct receiver rcv;
static struct daemon dmn;

static int setup(void **state)
{
	assert_int_equal(receiver_start(&rcv), 0);
	memset(&dmn, 0, sizeof(dmn));
	/* a short grace: the slow subscriber of the isolation test is still busy at the end;
	 * the audit lines (JSON) say when each failed round's retry was scheduled */
	const char *env[] = {"OUTBOXD_SHUTDOWN_GRACE=3s", "OUTBOXD_LOG_DELIVERIES=true",
			     "OUTBOXD_LOG_FORMAT=json", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

/* Receipt times (ms, receiver clock) of the requests on path, up to max; returns count. */
static size_t arrivals(const char *path, int64_t *out, size_t max)
{
	json_t *reqs = receiver_requests(&rcv, path);
	assert_non_null(reqs);
	size_t n = json_array_size(reqs);
	for (size_t i = 0; i < n && i < max; i++)
		out[i] = json_integer_value(json_object_get(json_array_get(reqs, i),
							    "received_at_us")) / 1000;
	json_decref(reqs);
	return n;
}

/* When (receiver clock, ms) the n-th distinct webhook-id arrived on path, or -1 when
 * fewer came: a request sent again does not count twice. */
static int64_t nth_distinct_at(const char *path, size_t n)
{
	json_t *reqs = receiver_requests(&rcv, path);
	size_t seen = 0;
	int64_t at = -1;
	assert_non_null(reqs);
	for (size_t i = 0; i < json_array_size(reqs) && at < 0; i++) {
		json_t *h = json_object_get(json_array_get(reqs, i), "headers");
		const char *id = json_string_value(json_object_get(h, "webhook-id"));
		size_t k = 0;
		while (k < i && strcmp(id, json_string_value(json_object_get(json_object_get(
					json_array_get(reqs, k), "headers"), "webhook-id"))) != 0)
			k++;
		if (k == i && ++seen == n)
			at = json_integer_value(json_object_get(json_array_get(reqs, i),
								"received_at_us")) / 1000;
	}
	json_decref(reqs);
	return at;
}

/* A subscriber with at most 2 requests at a time, answering each after slow_ms: a third
 * request arrives only once one of the two before it was answered. */
static void expect_two_at_a_time(const char *path, int64_t slow_ms)
{
	int64_t at[32];
	size_t n = arrivals(path, at, 32);
	assert_true(n >= 4);
	for (size_t i = 2; i < n && i < 32; i++) {
		if (at[i] - at[i - 2] < slow_ms - 50)
			fprintf(stderr, "%s: requests %zu and %zu %lld ms apart\n", path, i - 1, i + 1,
				(long long)(at[i] - at[i - 2]));
		assert_true(at[i] - at[i - 2] >= slow_ms - 50);
	}
}

struct dead_ctx {
	const char *id;
	json_t *last;
};

static int is_dead(void *arg)
{
	struct dead_ctx *c = arg;
	json_decref(c->last);
	c->last = e2e_get(&dmn, "/v1/deliveries/%s", c->id);
	return json_is_true(json_object_get(c->last, "dead"));
}

/* Waits until the delivery is in the dead-letter queue; returns it (caller frees). */
static json_t *wait_dead(const char *id, int timeout_ms)
{
	struct dead_ctx c = {id, NULL};
	int rc = harness_wait(is_dead, &c, timeout_ms);
	if (rc) {
		char *dump = json_dumps(c.last, JSON_INDENT(2));
		fprintf(stderr, "delivery %s never dead-lettered; last seen:\n%s\n", id, dump);
		free(dump);
	}
	assert_int_equal(rc, 0);
	return c.last;
}

/* Sends one event of type and returns its only delivery's id in out. */
static void send_one(const char *type, char out[64])
{
	char body[256], ev[64], ids[2][64];
	snprintf(body, sizeof(body), "{\"event_type\":\"%s\",\"payload\":{}}", type);
	e2e_send(&dmn, ev, body);
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 2), 1);
	snprintf(out, 64, "%s", ids[0]);
}

/* Sends n events of type to d in one batch request (one transaction: claimed together). */
static void send_many_to(struct daemon *d, const char *type, int n)
{
	json_t *batch = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(batch, json_pack("{s:s, s:{}}", "event_type", type, "payload"));
	json_t *doc = json_pack("{s:o}", "events", batch);
	char *body = json_dumps(doc, 0);
	json_decref(doc);
	json_decref(api_call(d, "POST", "/v1/events", body, 202));
	free(body);
}

static void send_many(const char *type, int n)
{
	send_many_to(&dmn, type, n);
}

/* The gaps between consecutive arrivals on path must lie in [lo[i], hi[i]]; each gap
 * less the scheduled delay sched[i] goes to late[*n_late] (not for sched[i] < 0: a try
 * of the immediate round, which no claim precedes). */
static void expect_gaps(const char *path, size_t n_gaps, const int64_t *lo, const int64_t *hi,
			const int64_t *sched, int64_t *late, size_t *n_late)
{
	int64_t at[16];
	size_t n = arrivals(path, at, 16);
	assert_int_equal(n, n_gaps + 1);
	for (size_t i = 0; i < n_gaps; i++) {
		int64_t gap = at[i + 1] - at[i];
		if (gap < lo[i] || gap > hi[i])
			fprintf(stderr, "%s: gap %zu is %lld ms, want %lld..%lld\n", path, i + 1,
				(long long)gap, (long long)lo[i], (long long)hi[i]);
		assert_true(gap >= lo[i]);
		assert_true(gap <= hi[i]);
		if (sched[i] >= 0)
			late[(*n_late)++] = gap - sched[i];
	}
}

/* A retry's request comes after its scheduled time by the claim and the request, which
 * a busy sanitized build can stretch: at most LATE_MS on any one gap, and less than
 * MEDIAN_LATE_MS on most of them. The latter is what tells a dispatcher that claims a
 * retry when it is due from one that waits for its idle poll (every second). */
#define LATE_MS 1500
#define MEDIAN_LATE_MS 300

/* outboxd decides a round's next attempt as its last attempt ends (no store, no request
 * in between): what it wrote down lies this close above the policy's delay. */
#define SCHEDULE_SLACK_MS 100

/* The daemon's log, whole (caller frees). */
static char *daemon_log_text(void)
{
	char path[512], buf[8192];
	char *text = NULL;
	size_t len = 0, n;
	FILE *fp = fopen(daemon_log_path(&dmn, path, sizeof(path)), "rb");
	FILE *mem = open_memstream(&text, &len);
	assert_non_null(fp);
	assert_non_null(mem);
	while ((n = fread(buf, 1, sizeof(buf), fp)) > 0)
		fwrite(buf, 1, n, mem);
	fclose(mem);
	fclose(fp);
	return text;
}

/* The delays outboxd scheduled after the failed rounds of delivery id, in round order:
 * each FAILED audit line's next_attempt_at less the end of the round's last attempt
 * (started_at + duration_ms in the history). Returns how many (at most max). */
static size_t scheduled_delays(const char *id, int64_t *out, size_t max)
{
	json_t *d = e2e_get(&dmn, "/v1/deliveries/%s", id);
	json_t *attempts = json_object_get(d, "attempts");
	char *text = daemon_log_text();
	size_t n = 0;
	for (const char *line = text; line && *line && n < max;) {
		const char *end = strchr(line, '\n');
		size_t len = end ? (size_t)(end - line) : strlen(line);
		json_t *o = json_loadb(line, len, 0, NULL);
		const char *msg = json_string_value(json_object_get(o, "msg"));
		const char *of = json_string_value(json_object_get(o, "delivery_id"));
		if (msg && of && strcmp(msg, "FAILED") == 0 && strcmp(of, id) == 0) {
			json_int_t count = json_integer_value(json_object_get(o, "attempt_count"));
			json_t *a = json_array_get(attempts, (size_t)count - 1);
			int64_t started = 0, next = 0;
			assert_non_null(a);
			assert_int_equal(clock_parse_rfc3339(json_string_value(json_object_get(
							     a, "started_at")), &started), 0);
			assert_int_equal(clock_parse_rfc3339(json_string_value(json_object_get(
							     o, "next_attempt_at")), &next), 0);
			out[n++] = next - started - json_integer_value(json_object_get(a, "duration_ms"));
		}
		json_decref(o);
		line = end ? end + 1 : NULL;
	}
	free(text);
	json_decref(d);
	return n;
}

/* Waits (audit lines are written once the result is stored, and may trail the API) for
 * the n scheduled delays of delivery id, and checks each lies in
 * [lo[i], hi[i] + SCHEDULE_SLACK_MS]; out gets them. */
static void expect_schedule(const char *id, size_t n, const int64_t *lo, const int64_t *hi,
			    int64_t *out)
{
	size_t got = 0;
	for (int64_t until = harness_now_ms() + 5000;;) {
		got = scheduled_delays(id, out, 16);
		if (got >= n || harness_now_ms() >= until)
			break;
		usleep(50 * 1000);
	}
	assert_int_equal(got, n);
	fprintf(stderr, "delivery %s: retries scheduled", id);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, " %lld", (long long)out[i]);
	fprintf(stderr, " ms after their rounds\n");
	for (size_t i = 0; i < n; i++) {
		if (out[i] < lo[i] || out[i] > hi[i] + SCHEDULE_SLACK_MS)
			fprintf(stderr, "delivery %s: retry %zu scheduled %lld ms after its round, "
				"want %lld..%lld\n", id, i + 1, (long long)out[i], (long long)lo[i],
				(long long)hi[i]);
		assert_true(out[i] >= lo[i]);
		assert_true(out[i] <= hi[i] + SCHEDULE_SLACK_MS);
	}
}

static int by_value(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* Each policy's schedule, the three side by side: fixed 300 ms after an immediate round
 * with a 150 ms stagger; linear 200 ms steps; exponential inside [200 ms, 600 ms]. */
static void test_policy_schedules(void **state)
{
	char fixed[64], linear[64], expo[64], dfixed[64], dlinear[64], dexpo[64];
	const char *err500 = "{\"default\":{\"status\":500}}";
	assert_int_equal(receiver_script(&rcv, "/fixed", err500), 0);
	assert_int_equal(receiver_script(&rcv, "/linear", err500), 0);
	assert_int_equal(receiver_script(&rcv, "/expo", err500), 0);
	e2e_create_sub(&dmn, fixed,
		       "{\"name\":\"fixed\",\"event_types\":[\"sched.fixed\"],\"endpoint\":\"%s/fixed\","
		       "\"retry\":{\"immediate\":2,\"immediate_delay\":\"150ms\",\"policy\":\"fixed\","
		       "\"interval\":\"300ms\",\"max_retries\":3}}", rcv.url);
	e2e_create_sub(&dmn, linear,
		       "{\"name\":\"linear\",\"event_types\":[\"sched.linear\"],\"endpoint\":\"%s/linear\","
		       "\"retry\":{\"immediate\":1,\"policy\":\"linear\",\"interval\":\"200ms\","
		       "\"max_retries\":3}}", rcv.url);
	e2e_create_sub(&dmn, expo,
		       "{\"name\":\"expo\",\"event_types\":[\"sched.expo\"],\"endpoint\":\"%s/expo\","
		       "\"retry\":{\"immediate\":1,\"policy\":\"exponential\",\"min_delay\":\"200ms\","
		       "\"max_delay\":\"600ms\",\"factor\":2,\"max_retries\":4}}", rcv.url);
	send_one("sched.fixed", dfixed);
	send_one("sched.linear", dlinear);
	send_one("sched.expo", dexpo);

	json_t *d = wait_dead(dfixed, 10000);
	assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), 5);
	assert_int_equal(json_integer_value(json_object_get(d, "retry_count")), 3);
	json_decref(d);
	json_decref(wait_dead(dlinear, 10000));
	json_decref(wait_dead(dexpo, 10000));

	/* What outboxd scheduled, exactly (load does not move it): fixed 300 ms; linear
	 * 200, 400, 600 ms; exponential retry k a random time in [200 ms, min(600 ms,
	 * 200 ms * 2^k)]. */
	int64_t fx[16], ln[16], ex[16];
	const int64_t fixed_sched[] = {300, 300, 300};
	expect_schedule(dfixed, 3, fixed_sched, fixed_sched, fx);
	const int64_t linear_sched[] = {200, 400, 600};
	expect_schedule(dlinear, 3, linear_sched, linear_sched, ln);
	const int64_t expo_lo[] = {200, 200, 200, 200};
	const int64_t expo_hi[] = {400, 600, 600, 600};
	expect_schedule(dexpo, 4, expo_lo, expo_hi, ex);

	/* What the receiver saw. Receipts are stamped as requests arrive; the next is
	 * scheduled from the end of the one before, so a gap is never shorter than the
	 * delay, and it is late by the claim and the request only. */
	int64_t late[16];
	size_t n_late = 0;
	const int64_t fixed_lo[] = {150, 300, 300, 300};
	const int64_t fixed_hi[] = {150 + LATE_MS, fx[0] + LATE_MS, fx[1] + LATE_MS,
				    fx[2] + LATE_MS};
	const int64_t fixed_at[] = {-1, fx[0], fx[1], fx[2]};
	expect_gaps("/fixed", 4, fixed_lo, fixed_hi, fixed_at, late, &n_late);
	const int64_t linear_hi[] = {ln[0] + LATE_MS, ln[1] + LATE_MS, ln[2] + LATE_MS};
	expect_gaps("/linear", 3, linear_sched, linear_hi, ln, late, &n_late);
	const int64_t expo_arrival_hi[] = {ex[0] + LATE_MS, ex[1] + LATE_MS, ex[2] + LATE_MS,
					   ex[3] + LATE_MS};
	expect_gaps("/expo", 4, expo_lo, expo_arrival_hi, ex, late, &n_late);
	qsort(late, n_late, sizeof(late[0]), by_value);
	fprintf(stderr, "retries: %zu scheduled, late at the receiver by %lld ms (median), "
		"%lld ms (most)\n", n_late, (long long)late[n_late / 2],
		(long long)late[n_late - 1]);
	assert_true(late[n_late / 2] < MEDIAN_LATE_MS);
}

/* 503 with Retry-After: 2 ends the immediate round, and the next try comes no sooner
 * than 2 s later even though the policy says 200 ms; a 429 with an HTTP-date works
 * the same way. */
static void test_retry_after(void **state)
{
	char sub[64], sub2[64], id[64], id2[64];
	char script[256], date[64];
	assert_int_equal(receiver_script(&rcv, "/busy",
					 "{\"responses\":[{\"status\":503,\"headers\":{\"Retry-After\":\"2\"}}],"
					 "\"default\":{\"status\":200}}"), 0);
	/* an HTTP-date 3 s ahead (whole seconds: 2 to 3 s from now) */
	time_t t = time(NULL) + 3;
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(date, sizeof(date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
	snprintf(script, sizeof(script),
		 "{\"responses\":[{\"status\":429,\"headers\":{\"Retry-After\":\"%s\"}}],"
		 "\"default\":{\"status\":200}}", date);
	assert_int_equal(receiver_script(&rcv, "/limited", script), 0);
	e2e_create_sub(&dmn, sub,
		       "{\"name\":\"busy\",\"event_types\":[\"ra.seconds\"],\"endpoint\":\"%s/busy\","
		       "\"retry\":{\"immediate\":3,\"interval\":\"200ms\"}}", rcv.url);
	e2e_create_sub(&dmn, sub2,
		       "{\"name\":\"limited\",\"event_types\":[\"ra.date\"],\"endpoint\":\"%s/limited\","
		       "\"retry\":{\"immediate\":3,\"interval\":\"200ms\"}}", rcv.url);
	send_one("ra.seconds", id);
	send_one("ra.date", id2);

	json_t *d = e2e_wait_status(&dmn, id, "PROCESSED", 8000);
	json_t *attempts = json_object_get(d, "attempts");
	assert_int_equal(json_array_size(attempts), 2); /* no immediate tries after the 503 */
	assert_int_equal(json_integer_value(json_object_get(json_array_get(attempts, 0), "code")), 503);
	assert_string_equal(json_string_value(json_object_get(json_array_get(attempts, 1), "kind")),
			    "scheduled");
	json_decref(d);
	/* scheduled 2 s after the 503, not the policy's 200 ms; and it came no sooner */
	int64_t sched[16];
	const int64_t two_s[] = {2000};
	expect_schedule(id, 1, two_s, two_s, sched);
	int64_t at[4];
	assert_int_equal(arrivals("/busy", at, 4), 2);
	if (at[1] - at[0] < 2000)
		fprintf(stderr, "Retry-After: 2 honoured after %lld ms only\n",
			(long long)(at[1] - at[0]));
	assert_true(at[1] - at[0] >= 2000);
	assert_true(at[1] - at[0] <= sched[0] + LATE_MS);

	d = e2e_wait_status(&dmn, id2, "PROCESSED", 8000);
	assert_int_equal(json_array_size(json_object_get(d, "attempts")), 2);
	json_decref(d);
	assert_int_equal(arrivals("/limited", at, 4), 2);
	assert_true(at[1] - at[0] >= 1000); /* the date is 2-3 s ahead, to the second */
}

/* A status listed in retry.permanent dead-letters at once: one request, no immediate
 * tries after it, no scheduled retry. */
static void test_permanent_410(void **state)
{
	char sub[64], id[64];
	assert_int_equal(receiver_script(&rcv, "/gone", "{\"default\":{\"status\":410,"
							"\"body\":\"gone for good\"}}"), 0);
	e2e_create_sub(&dmn, sub,
		       "{\"name\":\"gone\",\"event_types\":[\"perm.event\"],\"endpoint\":\"%s/gone\","
		       "\"retry\":{\"immediate\":3,\"interval\":\"100ms\",\"max_retries\":5,"
		       "\"permanent\":[404,410]}}", rcv.url);
	send_one("perm.event", id);
	json_t *d = wait_dead(id, 5000);
	assert_string_equal(json_string_value(json_object_get(d, "status")), "FAILED");
	assert_true(json_is_null(json_object_get(d, "next_attempt_at")));
	assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), 1);
	assert_int_equal(json_integer_value(json_object_get(d, "retry_count")), 0);
	json_t *err = json_object_get(d, "last_error");
	assert_int_equal(json_integer_value(json_object_get(err, "code")), 410);
	assert_string_equal(json_string_value(json_object_get(err, "cause")), "gone for good");
	json_decref(d);
	/* Dead, with no next attempt: nothing else comes, and every request of its one round
	 * arrived before the round's result was written. */
	assert_int_equal(receiver_count(&rcv, "/gone"), 1);
	json_t *dlq = e2e_get(&dmn, "/v1/dlq?subscription_id=%s", sub);
	assert_int_equal(json_array_size(json_object_get(dlq, "items")), 1);
	json_decref(dlq);
}

/* GET /v1/stats: the circuit of subscription id. */
static char *circuit_of(const char *id)
{
	static char state_buf[32];
	json_t *st = e2e_get(&dmn, "/v1/stats");
	json_t *subs = json_object_get(st, "subscriptions");
	state_buf[0] = '\0';
	for (size_t i = 0; i < json_array_size(subs); i++) {
		json_t *s = json_array_get(subs, i);
		if (strcmp(json_string_value(json_object_get(s, "id")), id) == 0)
			snprintf(state_buf, sizeof(state_buf), "%s",
				 json_string_value(json_object_get(s, "circuit")));
	}
	json_decref(st);
	return state_buf;
}

struct circuit_ctx {
	const char *id;
	const char *want;
};

static int circuit_is(void *arg)
{
	struct circuit_ctx *c = arg;
	return strcmp(circuit_of(c->id), c->want) == 0;
}

static void wait_circuit(const char *id, const char *want, int timeout_ms)
{
	struct circuit_ctx c = {id, want};
	int rc = harness_wait(circuit_is, &c, timeout_ms);
	if (rc)
		fprintf(stderr, "circuit of %s is %s, want %s\n", id, circuit_of(id), want);
	assert_int_equal(rc, 0);
}

/* The metrics line of the subscription's circuit, e.g. "... 1"; returns the value or -1. */
static int circuit_metric(const char *id)
{
	char series[128];
	snprintf(series, sizeof(series), "outboxd_circuit_state{subscription_id=\"%s\"}", id);
	return (int)e2e_metric(&dmn, series);
}

/* A failure storm: max_errors failed rounds within the window open the
 * breaker; deliveries then take delay actions without a request and, after
 * max_delay_actions, go to the DLQ as circuit_open. When the window is over, the first
 * delivery is the half-open probe; once the subscriber is back it closes the breaker. */
static void test_breaker_storm_and_recovery(void **state)
{
	char sub[64];
	assert_int_equal(receiver_script(&rcv, "/storm", "{\"default\":{\"status\":500}}"), 0);
	e2e_create_sub(&dmn, sub,
		       "{\"name\":\"storm\",\"event_types\":[\"storm.*\"],\"endpoint\":\"%s/storm\","
		       "\"retry\":{\"immediate\":1,\"interval\":\"100ms\",\"max_retries\":1,"
		       "\"min_delay\":\"200ms\",\"max_delay\":\"300ms\"},"
		       "\"circuit_breaker\":{\"max_errors\":2,\"failure_window\":\"1500ms\","
		       "\"max_delay_actions\":2}}", rcv.url);
	assert_string_equal(circuit_of(sub), "closed");
	send_many("storm.event", 10);

	/* Ten fail their first round together: the second failure opens the breaker. */
	wait_circuit(sub, "open", 5000);
	assert_true(circuit_metric(sub) >= 1); /* 1 open (2 if its window just ended) */

	/* Everything ends in the DLQ, most as circuit_open with no request made for it. */
	json_t *dlq = NULL;
	for (int i = 0; i < 150; i++) {
		json_decref(dlq);
		dlq = e2e_get(&dmn, "/v1/dlq?subscription_id=%s&limit=100", sub);
		if (json_array_size(json_object_get(dlq, "items")) == 10)
			break;
		usleep(50 * 1000);
	}
	json_t *items = json_object_get(dlq, "items");
	assert_int_equal(json_array_size(items), 10);
	int circuit_open = 0;
	for (size_t i = 0; i < 10; i++) {
		json_t *err = json_object_get(json_array_get(items, i), "last_error");
		const char *msg = json_string_value(json_object_get(err, "message"));
		if (msg && strcmp(msg, "circuit_open") == 0) {
			circuit_open++;
			assert_int_equal(json_integer_value(json_object_get(err, "code")), 503);
			const char *cause = json_string_value(json_object_get(err, "cause"));
			assert_non_null(strstr(cause, "after 2 delay actions"));
		}
	}
	json_decref(dlq);
	assert_true(circuit_open >= 5);
	/* without the breaker: 10 x (1 immediate + 1 scheduled) = 20 requests */
	long sent = receiver_count(&rcv, "/storm");
	if (sent > 14)
		fprintf(stderr, "storm: %ld requests despite the breaker\n", sent);
	assert_true(sent <= 14);
	json_t *found = e2e_get(&dmn, "/v1/dlq?q=circuit_open&subscription_id=%s", sub);
	assert_int_equal((int)json_array_size(json_object_get(found, "items")), circuit_open);
	json_decref(found);
	/* each has its DEAD audit line (log_deliveries), with no attempt and circuit_open;
	 * lines are written once results are stored, so wait for them */
	int dead_lines = 0;
	for (int i = 0; i < 100 && dead_lines < circuit_open; i++) {
		char *log = e2e_daemon_log(&dmn);
		dead_lines = 0;
		for (const char *p = log; p && (p = strstr(p, "\"msg\":\"DEAD\"")); p++) {
			const char *eol = strchr(p, '\n');
			size_t n = eol ? (size_t)(eol - p) : strlen(p);
			char line[2048];
			snprintf(line, sizeof(line), "%.*s", (int)(n < sizeof(line) ? n : sizeof(line) - 1), p);
			if (strstr(line, sub) && strstr(line, "\"message\":\"circuit_open\"") &&
			    strstr(line, "\"attempts\":0"))
				dead_lines++;
		}
		free(log);
		if (dead_lines < circuit_open)
			usleep(50 * 1000);
	}
	assert_int_equal(dead_lines, circuit_open);

	/* Recovery: the window passes (half-open); the next delivery is the probe, which
	 * succeeds and closes the breaker; the ones after it go straight through. */
	assert_int_equal(receiver_script(&rcv, "/storm", "{\"default\":{\"status\":200}}"), 0);
	wait_circuit(sub, "half_open", 5000);
	assert_int_equal(circuit_metric(sub), 2);
	char probe[64];
	long before = receiver_count(&rcv, "/storm");
	send_one("storm.probe", probe);
	json_decref(e2e_wait_status(&dmn, probe, "PROCESSED", 5000));
	assert_string_equal(circuit_of(sub), "closed");
	assert_int_equal(circuit_metric(sub), 0);
	send_many("storm.after", 5);
	assert_int_equal(receiver_wait_count(&rcv, "/storm", before + 6, 5000), 0);
}

/* Backoff: a burst of 200 failures is re-queued at random points of the window
 * (here the first retry's [10 s, 20 s]), so they do not come back at one instant: no
 * second of next_attempt_at holds more than 20% of them (an even spread puts 10% in
 * each; a fixed interval would put all 200 in one). An exponential policy that sets no max_retries makes 5 (MaxNumberOfRetries). */
static void test_exponential_burst_and_default_retries(void **state)
{
	char burst[64], five[64], one[64];
	const char *err500 = "{\"default\":{\"status\":500}}";
	assert_int_equal(receiver_script(&rcv, "/burst", err500), 0);
	assert_int_equal(receiver_script(&rcv, "/five", err500), 0);
	e2e_create_sub(&dmn, burst,
		       "{\"name\":\"burst\",\"event_types\":[\"burst.*\"],\"endpoint\":\"%s/burst\","
		       "\"retry\":{\"immediate\":1,\"policy\":\"exponential\"},"
		       "\"circuit_breaker\":{\"enabled\":false}}", rcv.url);
	send_many("burst.event", 200);

	json_t *page = NULL;
	size_t failed = 0;
	for (int64_t until = harness_now_ms() + 30000;;) {
		json_decref(page);
		page = e2e_get(&dmn, "/v1/deliveries?subscription_id=%s&status=FAILED&limit=200", burst);
		failed = json_array_size(json_object_get(page, "items"));
		if (failed >= 200 || harness_now_ms() >= until)
			break;
		usleep(50 * 1000);
	}
	assert_int_equal(failed, 200);
	int64_t lo = INT64_MAX, hi = 0;
	int slots[64] = {0}, most = 0;
	int64_t at[200];
	for (size_t i = 0; i < 200; i++) {
		json_t *d = json_array_get(json_object_get(page, "items"), i);
		const char *next = json_string_value(json_object_get(d, "next_attempt_at"));
		assert_non_null(next);
		assert_int_equal(clock_parse_rfc3339(next, &at[i]), 0);
		lo = at[i] < lo ? at[i] : lo;
		hi = at[i] > hi ? at[i] : hi;
	}
	for (size_t i = 0; i < 200; i++) {
		int s = (int)((at[i] - lo) / 1000);
		assert_true(s < 64);
		if (++slots[s] > most)
			most = slots[s];
	}
	/* Each one's retry is scheduled inside the first retry's window, [10 s, 20 s] after
	 * its own failed try ended (however long the burst's first tries took: flow control
	 * starts a new endpoint at a few requests at once, and a busy machine is slower). */
	int64_t least = INT64_MAX, longest = 0;
	for (size_t i = 0; i < 200; i++) {
		json_t *item = json_array_get(json_object_get(page, "items"), i);
		json_t *d = e2e_get(&dmn, "/v1/deliveries/%s",
				    json_string_value(json_object_get(item, "id")));
		json_t *a = json_array_get(json_object_get(d, "attempts"), 0);
		int64_t started = 0, next = 0;
		assert_int_equal(json_array_size(json_object_get(d, "attempts")), 1);
		assert_int_equal(clock_parse_rfc3339(json_string_value(json_object_get(
						     a, "started_at")), &started), 0);
		assert_int_equal(clock_parse_rfc3339(json_string_value(json_object_get(
						     d, "next_attempt_at")), &next), 0);
		int64_t delay = next - started - json_integer_value(json_object_get(a, "duration_ms"));
		least = delay < least ? delay : least;
		longest = delay > longest ? delay : longest;
		json_decref(d);
	}
	fprintf(stderr, "burst: 200 retries spread over %lld ms, at most %d in one second; "
		"each %lld..%lld ms after its try\n", (long long)(hi - lo), most, (long long)least,
		(long long)longest);
	assert_true(least >= 10000);
	assert_true(longest <= 20000 + SCHEDULE_SLACK_MS);
	/* spread over the 10 s window, not at one instant */
	assert_true(hi - lo >= 8000);
	assert_true(most <= 40);
	json_decref(page);

	/* No max_retries: 5 scheduled retries, then the DLQ (6 requests in all). */
	e2e_create_sub(&dmn, five,
		       "{\"name\":\"five\",\"event_types\":[\"five.*\"],\"endpoint\":\"%s/five\","
		       "\"retry\":{\"immediate\":1,\"policy\":\"exponential\",\"min_delay\":\"50ms\","
		       "\"max_delay\":\"100ms\"},\"circuit_breaker\":{\"enabled\":false}}", rcv.url);
	send_one("five.event", one);
	json_t *d = wait_dead(one, 15000);
	assert_int_equal(json_integer_value(json_object_get(d, "retry_count")), 5);
	assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), 6);
	json_decref(d);
	assert_int_equal(receiver_count(&rcv, "/five"), 6);
}

/* The breaker opens when max_errors failed rounds are reached within the window
 * (delaying starts when MaxErrorsPerInterval "is hit": docs/reference.md): after 2 of 3 it is closed,
 * the 3rd opens it. */
static void test_breaker_opens_at_max_errors(void **state)
{
	char sub[64], ids[3][64];
	assert_int_equal(receiver_script(&rcv, "/exact", "{\"default\":{\"status\":500}}"), 0);
	e2e_create_sub(&dmn, sub,
		       "{\"name\":\"exact\",\"event_types\":[\"exact.*\"],\"endpoint\":\"%s/exact\","
		       "\"retry\":{\"immediate\":1,\"interval\":\"1m\",\"max_retries\":1},"
		       "\"circuit_breaker\":{\"max_errors\":3,\"failure_window\":\"1m\"}}", rcv.url);
	for (int i = 0; i < 3; i++) {
		send_one("exact.event", ids[i]);
		json_decref(e2e_wait_status(&dmn, ids[i], "FAILED", 5000));
		/* the dispatcher counts a failed round before it writes the result: by the time
		 * the API shows FAILED, the breaker has seen it */
		if (i < 2)
			assert_string_equal(circuit_of(sub), "closed");
	}
	wait_circuit(sub, "open", 5000);
	assert_int_equal(receiver_count(&rcv, "/exact"), 3);
}

/* The 50 deliveries to fast all arrived within 2 s of the first request to slow (which
 * answers after 2 s: before its first answer), and slow never had more than 2 at once. */
static void expect_fast_before_slow(const char *label, const char *fast, const char *slow)
{
	int64_t fast_done = nth_distinct_at(fast, 50), at[32];
	assert_true(arrivals(slow, at, 32) >= 1);
	fprintf(stderr, "%s: the 50 fast deliveries arrived %lld ms after the first slow "
		"request\n", label, (long long)(fast_done - at[0]));
	assert_true(fast_done >= 0);
	assert_true(fast_done < at[0] + 2000);
	expect_two_at_a_time(slow, 2000);
}

/* Head-of-line isolation: a subscriber that takes 2 s per request, limited to 2 at a
 * time with 20 deliveries queued, does not hold up a fast one's 50 (they all arrive
 * before the first slow answer is given); a rate-limited one gets its requests at its
 * pace. */
static void test_head_of_line_isolation(void **state)
{
	char slow[64], fast[64], paced[64];
	assert_int_equal(receiver_script(&rcv, "/slow2s",
					 "{\"default\":{\"status\":200,\"delay_ms\":2000}}"), 0);
	e2e_create_sub(&dmn, slow,
		       "{\"name\":\"slow2s\",\"event_types\":[\"hol.slow\"],\"endpoint\":\"%s/slow2s\","
		       "\"timeout\":\"5s\",\"max_in_flight\":2}", rcv.url);
	e2e_create_sub(&dmn, fast,
		       "{\"name\":\"fast\",\"event_types\":[\"hol.fast\"],\"endpoint\":\"%s/fast\"}",
		       rcv.url);
	e2e_create_sub(&dmn, paced,
		       "{\"name\":\"paced\",\"event_types\":[\"hol.paced\"],\"endpoint\":\"%s/paced\","
		       "\"rate_limit\":10}", rcv.url);
	/* the slow ones first, so they are claimed ahead of the fast ones */
	send_many("hol.slow", 20);
	send_many("hol.fast", 50);
	send_many("hol.paced", 30);

	assert_int_equal(receiver_wait_count(&rcv, "/fast", 50, 20000), 0);
	assert_int_equal(receiver_wait_count(&rcv, "/slow2s", 4, 20000), 0);
	expect_fast_before_slow("isolation", "/fast", "/slow2s");

	/* 30 at 10/s with a burst of 10: the last one 2 s after the first, at least, and
	 * never more than burst + rate = 20 within 1 s (requests sent again included). */
	assert_int_equal(receiver_wait_count(&rcv, "/paced", 30, 20000), 0);
	int64_t at[32];
	size_t n = arrivals("/paced", at, 32);
	assert_true(n >= 30);
	assert_true(at[29] - at[0] >= 1800);
	for (size_t i = 20; i < n && i < 32; i++)
		assert_true(at[i] - at[i - 20] >= 900);
}

/* The same with a small job pool (16): the slow subscriber's queue is capped at a
 * quarter of it and the rest of its deliveries go back to the store for a while, so the
 * pool never fills with them and the fast subscriber still gets through at once. */
static void test_isolation_small_pool(void **state)
{
	struct daemon small;
	char slow[64], fast[64];
	const char *env[] = {"OUTBOXD_MAX_IN_FLIGHT=16", "OUTBOXD_SHUTDOWN_GRACE=3s", NULL};

	memset(&small, 0, sizeof(small));
	assert_int_equal(daemon_start(&small, env), 0);
	assert_int_equal(receiver_script(&rcv, "/slow-small",
					 "{\"default\":{\"status\":200,\"delay_ms\":2000}}"), 0);
	json_t *s;
	char body[512];
	snprintf(body, sizeof(body),
		 "{\"name\":\"slow-small\",\"event_types\":[\"small.slow\"],"
		 "\"endpoint\":\"%s/slow-small\",\"timeout\":\"5s\",\"max_in_flight\":2}", rcv.url);
	s = api_call(&small, "POST", "/v1/subscriptions", body, 201);
	snprintf(slow, sizeof(slow), "%s", json_string_value(json_object_get(s, "id")));
	json_decref(s);
	snprintf(body, sizeof(body),
		 "{\"name\":\"fast-small\",\"event_types\":[\"small.fast\"],"
		 "\"endpoint\":\"%s/fast-small\"}", rcv.url);
	s = api_call(&small, "POST", "/v1/subscriptions", body, 201);
	snprintf(fast, sizeof(fast), "%s", json_string_value(json_object_get(s, "id")));
	json_decref(s);

	send_many_to(&small, "small.slow", 20);
	send_many_to(&small, "small.fast", 50);
	assert_int_equal(receiver_wait_count(&rcv, "/fast-small", 50, 20000), 0);

	/* Handed back, not failed: no slow delivery has an attempt it did not make. */
	json_t *failed = api_call(&small, "GET", "/v1/deliveries?status=FAILED", NULL, 200);
	assert_int_equal(json_array_size(json_object_get(failed, "items")), 0);
	json_decref(failed);
	/* the fast ones all came before the first slow answer; still two at a time */
	assert_int_equal(receiver_wait_count(&rcv, "/slow-small", 4, 20000), 0);
	expect_fast_before_slow("small pool", "/fast-small", "/slow-small");

	/* and some of them really went back to the store (the queue's cap is 16 / 4 = 4) */
	struct http_resp r;
	char url[128], needle[160];
	snprintf(url, sizeof(url), "%s/metrics", small.url);
	assert_int_equal(http_do("GET", url, small.token, NULL, NULL, 0, &r), 0);
	snprintf(needle, sizeof(needle),
		 "outboxd_deliveries_total{subscription_id=\"%s\",outcome=\"released\"} ", slow);
	const char *hit = strstr(r.body, needle);
	assert_non_null(hit);
	assert_true(atol(hit + strlen(needle)) > 0);
	http_resp_free(&r);
	assert_int_equal(daemon_stop(&small), 0);
	daemon_cleanup(&small);
}

/* Linear retry: every scheduled retry runs the endpoint retry again (a round of
 * retry.immediate tries), so a delivery that always fails is tried (1 + max_retries) x
 * immediate times; and linear keeps max_retries from 3 to 10. */
static void test_linear_runs_the_endpoint_retry(void **state)
{
	char sub[64], del[64], body[512];
	(void)state;
	assert_int_equal(receiver_script(&rcv, "/linear-rounds", "{\"default\":{\"status\":500}}"),
			 0);
	e2e_create_sub(&dmn, sub,
		       "{\"name\":\"linear-rounds\",\"event_types\":[\"lin.rounds\"],"
		       "\"endpoint\":\"%s/linear-rounds\",\"retry\":{\"immediate\":2,"
		       "\"immediate_delay\":\"50ms\",\"policy\":\"linear\",\"interval\":\"100ms\","
		       "\"max_retries\":3}}", rcv.url);
	send_one("lin.rounds", del);
	json_t *d = wait_dead(del, 20000);
	assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), (1 + 3) * 2);
	assert_int_equal(json_integer_value(json_object_get(d, "retry_count")), 3);
	json_decref(d);
	/* every scheduled round has its two tries, marked scheduled */
	char path[128];
	snprintf(path, sizeof(path), "/v1/deliveries/%s", del);
	json_t *full = api_call(&dmn, "GET", path, NULL, 200);
	json_t *attempts = json_object_get(full, "attempts");
	assert_int_equal(json_array_size(attempts), 8);
	int scheduled = 0;
	for (size_t i = 0; i < json_array_size(attempts); i++)
		scheduled += strcmp(json_string_value(json_object_get(json_array_get(attempts, i),
								      "kind")), "scheduled") == 0;
	assert_int_equal(scheduled, 6);
	json_decref(full);
	/* outside 3..10 with linear: refused, naming the field */
	for (int n = 0; n < 2; n++) {
		snprintf(body, sizeof(body),
			 "{\"name\":\"linear-bad\",\"event_types\":[\"x\"],\"endpoint\":\"%s/x\","
			 "\"retry\":{\"policy\":\"linear\",\"max_retries\":%d}}", rcv.url,
			 n ? 11 : 2);
		json_t *e = api_call(&dmn, "POST", "/v1/subscriptions", body, 400);
		assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"),
								       "field")),
				    "retry.max_retries");
		json_decref(e);
	}
}

/* A subscriber that takes one delivery a second, with a backlog of 1,500 ahead of
 * everyone else's: its queue fills, and claims may wait for room in it only a moment.
 * After that they go on without it (its deliveries, oldest first, come back to the store
 * for a while), so 200 deliveries to a fast subscriber, stored right behind the backlog,
 * are not held up behind it. */
static void test_isolation_behind_a_backlog(void **state)
{
	struct daemon dd;
	char body[512];
	const char *env[] = {"OUTBOXD_SHUTDOWN_GRACE=3s", NULL};

	(void)state;
	memset(&dd, 0, sizeof(dd));
	assert_int_equal(daemon_start(&dd, env), 0);
	assert_int_equal(receiver_script(&rcv, "/slow-backlog",
					 "{\"default\":{\"status\":200,\"delay_ms\":2000}}"), 0);
	snprintf(body, sizeof(body),
		 "{\"name\":\"slow-backlog\",\"event_types\":[\"backlog.slow\"],"
		 "\"endpoint\":\"%s/slow-backlog\",\"timeout\":\"5s\",\"max_in_flight\":2}",
		 rcv.url);
	json_decref(api_call(&dd, "POST", "/v1/subscriptions", body, 201));
	snprintf(body, sizeof(body),
		 "{\"name\":\"fast-backlog\",\"event_types\":[\"backlog.fast\"],"
		 "\"endpoint\":\"%s/fast-backlog\"}", rcv.url);
	json_decref(api_call(&dd, "POST", "/v1/subscriptions", body, 201));

	for (int i = 0; i < 3; i++)
		send_many_to(&dd, "backlog.slow", 500);
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	send_many_to(&dd, "backlog.fast", 200);
	assert_int_equal(receiver_wait_count(&rcv, "/fast-backlog", 200, 30000), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long ms = (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000;
	fprintf(stderr, "behind a backlog: 200 fast deliveries in %ld ms\n", ms);
	assert_true(ms < 10000);
	/* the slow one still gets its deliveries, two at a time */
	assert_int_equal(receiver_wait_count(&rcv, "/slow-backlog", 4, 20000), 0);
	assert_int_equal(daemon_stop(&dd), 0);
	daemon_cleanup(&dd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_policy_schedules),
		cmocka_unit_test(test_retry_after),
		cmocka_unit_test(test_permanent_410),
		cmocka_unit_test(test_breaker_storm_and_recovery),
		cmocka_unit_test(test_exponential_burst_and_default_retries),
		cmocka_unit_test(test_breaker_opens_at_max_errors),
		cmocka_unit_test(test_head_of_line_isolation),
		cmocka_unit_test(test_isolation_small_pool),
		cmocka_unit_test(test_isolation_behind_a_backlog),
		cmocka_unit_test(test_linear_runs_the_endpoint_retry),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
