/* test_real_receivers.c: the receivers from real stacks (tests/support/receivers/) and
 * their harness (harness_receivers.h), tested on their own.
 *
 * Later end-to-end tests judge outboxd by these receivers' records (duplicates, retries)
 * and by wrk's best rate against them, so this suite checks both over real sockets: each
 * receiver starts, answers POSTs, counts requests, webhook-ids and duplicates (telling a
 * retry with a higher outboxd-attempt from a plain repeat), resets; the app server's work
 * time changes on command, directly and behind nginx; wrk measures a rate. No daemon
 * here. Nothing asserts a speed: only lower bounds that no load can break.
 */
#include "harness.h"
#include "harness_receivers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* POSTs a small JSON body to url with the webhook-id (NULL: none) and outboxd-attempt
 * headers; returns the status (0: no answer). */
static long post(const char *url, const char *webhook_id, int attempt)
{
	char id_header[128], attempt_header[64];
	const char *headers[] = {attempt_header, id_header, NULL};
	struct http_req req = {
		.method = "POST",
		.url = url,
		.body = "{\"n\":1}",
		.len = 7,
		.headers = headers,
	};
	struct http_resp resp;
	long status;

	snprintf(attempt_header, sizeof(attempt_header), "outboxd-attempt: %d", attempt);
	if (webhook_id)
		snprintf(id_header, sizeof(id_header), "webhook-id: %s", webhook_id);
	else
		headers[1] = NULL;
	http_do_ex(&req, &resp);
	status = resp.status;
	http_resp_free(&resp);
	return status;
}

static struct real_receiver_stats stats_of(struct real_receiver *r)
{
	struct real_receiver_stats st;

	assert_int_equal(real_receiver_stats(r, &st), 0);
	return st;
}

/* The record every receiver keeps: 3 ids, a repeat of one with the same attempt, a
 * retry of another with a higher attempt, and a request without an id. */
static void check_record(enum real_receiver_kind kind)
{
	struct real_receiver r;
	struct real_receiver_stats st;
	char url[128];

	if (real_receiver_start(&r, kind, NULL) != 0)
		fail_msg("%s did not start", real_receiver_name(kind));
	snprintf(url, sizeof(url), "%s/hooks/orders", r.url);
	assert_int_equal(post(url, "msg_a", 1), 200);
	assert_int_equal(post(url, "msg_b", 1), 200);
	assert_int_equal(post(url, "msg_c", 1), 200);
	assert_int_equal(post(url, "msg_a", 1), 200);   /* a duplicate, not a retry */
	assert_int_equal(post(url, "msg_b", 2), 200);   /* a duplicate that is a retry */
	assert_int_equal(post(url, NULL, 1), 200);

	st = stats_of(&r);
	assert_int_equal(st.requests, 6);
	assert_int_equal(st.unique_ids, 3);
	assert_int_equal(st.duplicates, 2);
	assert_int_equal(st.duplicates_retried, 1);
	assert_int_equal(st.without_id, 1);
	assert_true(st.max_in_progress >= 1);

	/* a retry counts once as retried: a third request of msg_b at attempt 2 is not */
	assert_int_equal(post(url, "msg_b", 2), 200);
	st = stats_of(&r);
	assert_int_equal(st.duplicates, 3);
	assert_int_equal(st.duplicates_retried, 1);
	/* tries out of order (the first waited in the accept queue): still two tries */
	assert_int_equal(post(url, "msg_c", 3), 200);
	assert_int_equal(post(url, "msg_c", 2), 200);
	st = stats_of(&r);
	assert_int_equal(st.duplicates, 5);
	assert_int_equal(st.duplicates_retried, 3);

	assert_int_equal(real_receiver_reset(&r), 0);
	st = stats_of(&r);
	assert_int_equal(st.requests, 0);
	assert_int_equal(st.unique_ids, 0);
	assert_int_equal(st.duplicates, 0);
	/* after a reset, msg_a is new again */
	assert_int_equal(post(url, "msg_a", 3), 200);
	st = stats_of(&r);
	assert_int_equal(st.unique_ids, 1);
	assert_int_equal(st.duplicates, 0);
	real_receiver_stop(&r);
	real_receiver_stop(&r); /* twice is harmless */
}

static void test_python_http_server_records(void **state)
{
	check_record(REAL_PYTHON_HTTP_SERVER);
}

static void test_app_server_records(void **state)
{
	check_record(REAL_APP_SERVER);
}

static void test_node_http_records(void **state)
{
	check_record(REAL_NODE_HTTP);
}

static void test_nginx_app_records(void **state)
{
	check_record(REAL_NGINX_APP);
}

/* The app server's work time changes on command, mid-run: the stats say so, and a
 * request takes at least the new work time (a lower bound, safe on a busy machine). */
static void check_work_changes(enum real_receiver_kind kind)
{
	struct real_receiver_opts opts = {.workers = 2, .work_ms = 5};
	struct real_receiver r;
	char url[128];
	int64_t start;

	if (real_receiver_start(&r, kind, &opts) != 0)
		fail_msg("%s did not start", real_receiver_name(kind));
	snprintf(url, sizeof(url), "%s/hook", r.url);
	assert_int_equal(stats_of(&r).work_ms, 5);
	assert_int_equal(post(url, "w1", 1), 200);

	assert_int_equal(real_receiver_set_work(&r, 300), 0);
	assert_int_equal(stats_of(&r).work_ms, 300);
	start = harness_now_ms();
	assert_int_equal(post(url, "w2", 1), 200);
	assert_true(harness_now_ms() - start >= 300);

	assert_int_equal(real_receiver_set_work(&r, 5), 0);
	assert_int_equal(stats_of(&r).work_ms, 5);
	assert_int_equal(post(url, "w3", 1), 200);
	assert_int_equal(stats_of(&r).requests, 3);
	real_receiver_stop(&r);
}

static void test_app_server_work_changes(void **state)
{
	check_work_changes(REAL_APP_SERVER);
}

static void test_nginx_app_work_changes(void **state)
{
	check_work_changes(REAL_NGINX_APP);
}

/* Receivers without a work time refuse to set one; their stats say -1. */
static void test_work_only_for_app_server(void **state)
{
	struct real_receiver r;

	assert_int_equal(real_receiver_start(&r, REAL_NODE_HTTP, NULL), 0);
	assert_int_equal(real_receiver_set_work(&r, 100), -1);
	assert_int_equal(stats_of(&r).work_ms, -1);
	real_receiver_stop(&r);
}

/* wrk's best rate: one figure per connection count, the best of them, and every answer
 * wrk counted reached the receiver, each with its own webhook-id. */
static void check_wrk(enum real_receiver_kind kind)
{
	static const int conns[] = {4, 32};
	struct real_receiver r;
	struct real_receiver_stats st;
	struct wrk_best best;
	long answered = 0;

	if (real_receiver_start(&r, kind, NULL) != 0)
		fail_msg("%s did not start", real_receiver_name(kind));
	assert_int_equal(wrk_best_rate(r.url, conns, 2, 1, &best), 0);
	assert_int_equal(best.n, 2);
	for (size_t i = 0; i < best.n; i++) {
		assert_int_equal(best.runs[i].connections, conns[i]);
		assert_true(best.runs[i].rate <= best.best_rate);
		answered += best.runs[i].requests - best.runs[i].non_2xx;
	}
	assert_true(best.best_rate > 0);
	assert_true(best.best_connections == 4 || best.best_connections == 32);
	st = stats_of(&r);
	assert_true(st.requests >= answered);
	assert_true(st.unique_ids >= answered);
	assert_int_equal(st.without_id, 0);
	printf("wrk against %s: best %.0f requests/s at %d connections\n",
	       real_receiver_name(kind), best.best_rate, best.best_connections);
	real_receiver_stop(&r);
}

static void test_wrk_python_http_server(void **state)
{
	check_wrk(REAL_PYTHON_HTTP_SERVER);
}

static void test_wrk_node_http(void **state)
{
	check_wrk(REAL_NODE_HTTP);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_python_http_server_records),
		cmocka_unit_test(test_app_server_records),
		cmocka_unit_test(test_node_http_records),
		cmocka_unit_test(test_nginx_app_records),
		cmocka_unit_test(test_app_server_work_changes),
		cmocka_unit_test(test_nginx_app_work_changes),
		cmocka_unit_test(test_work_only_for_app_server),
		cmocka_unit_test(test_wrk_python_http_server),
		cmocka_unit_test(test_wrk_node_http),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
