/* test_receiver_selftest.c: the test receiver and the harness, tested on their own.
 *
 * Every end-to-end test trusts the receiver's record of what arrived; this suite checks
 * that record (bodies, headers, webhook-id dedup counters) and the scripted answers
 * (statuses, delays, dropped connections, defaults) over real sockets, and the chaos mode
 * and --acks record of the soak. No daemon here.
 */
#include "harness.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct receiver rx;

static int group_setup(void **state)
{
	return receiver_start(&rx);
}

static int group_teardown(void **state)
{
	receiver_stop(&rx);
	return 0;
}

static int reset(void **state)
{
	return receiver_reset(&rx);
}

/* POST body to rx at path with an optional webhook-id; returns the status (0 when no
 * response arrived), with the response body in out_body when non-NULL (caller frees). */
static long post(const char *path, const char *webhook_id, const char *body, size_t len,
		 char **out_body)
{
	char url[256], id_header[128];
	const char *headers[] = {id_header, "X-Test: yes", NULL};
	struct http_req req = {
		.method = "POST",
		.url = url,
		.body = body,
		.len = len,
		.headers = webhook_id ? headers : headers + 1,
	};
	struct http_resp resp;
	long status;

	snprintf(url, sizeof(url), "%s%s", rx.url, path);
	snprintf(id_header, sizeof(id_header), "webhook-id: %s", webhook_id ? webhook_id : "");
	http_do_ex(&req, &resp);
	status = resp.status;
	if (out_body)
		*out_body = strdup(resp.body);
	http_resp_free(&resp);
	return status;
}

static long stat_field(const char *path, const char *field)
{
	json_t *stats = receiver_stats(&rx, path);
	long v;

	assert_non_null(stats);
	v = (long)json_integer_value(json_object_get(stats, field));
	json_decref(stats);
	return v;
}

static const char *rec_str(json_t *rec, const char *field)
{
	return json_string_value(json_object_get(rec, field));
}

static const char *rec_header(json_t *rec, const char *name)
{
	return json_string_value(json_object_get(json_object_get(rec, "headers"), name));
}

static void test_flaky_script(void **state)
{
	const char *bodies[] = {"{\"n\":1}", "{\"n\":2}", "{\"n\":3}"};
	const long expect[] = {503, 503, 200};
	json_t *reqs, *rec;
	char *reply;
	size_t i;

	assert_int_equal(receiver_script(&rx, "/flaky", "[{\"status\":503},"
					 "{\"status\":503},{\"status\":200}]"), 0);
	for (i = 0; i < 3; i++)
		assert_int_equal(post("/flaky", "evt-1", bodies[i], strlen(bodies[i]), NULL),
				 expect[i]);
	/* The FIFO is used up: the built-in default answers. */
	assert_int_equal(post("/flaky", "evt-1", "{}", 2, &reply), 200);
	assert_string_equal(reply, "ok");
	free(reply);

	reqs = receiver_requests(&rx, "/flaky");
	assert_non_null(reqs);
	assert_int_equal(json_array_size(reqs), 4);
	json_array_foreach(reqs, i, rec) {
		assert_int_equal(json_integer_value(json_object_get(rec, "seq")), i + 1);
		assert_string_equal(rec_str(rec, "method"), "POST");
		assert_string_equal(rec_str(rec, "path"), "/flaky");
		assert_string_equal(rec_header(rec, "webhook-id"), "evt-1");
		assert_string_equal(rec_header(rec, "content-type"), "application/json");
		assert_string_equal(rec_header(rec, "x-test"), "yes");
		assert_true(json_integer_value(json_object_get(rec, "received_at_us")) > 0);
		if (i < 3)
			assert_string_equal(rec_str(rec, "body"), bodies[i]);
	}
	assert_string_equal(rec_str(json_array_get(reqs, 0), "body_base64"), "eyJuIjoxfQ==");
	json_decref(reqs);

	assert_int_equal(stat_field(NULL, "count"), 4);
	assert_int_equal(stat_field(NULL, "unique_ids"), 1);
	assert_int_equal(stat_field(NULL, "duplicates"), 3);
}

static void test_dedup_stats(void **state)
{
	const char *ids[] = {"a", "b", "a", "c", NULL};
	long first, last;

	for (size_t i = 0; i < 5; i++)
		assert_int_equal(post(i < 2 ? "/one" : "/two", ids[i], "x", 1, NULL), 200);
	assert_int_equal(stat_field(NULL, "count"), 5);
	assert_int_equal(stat_field(NULL, "unique_ids"), 3);
	assert_int_equal(stat_field(NULL, "duplicates"), 1);
	assert_int_equal(stat_field("/one", "count"), 2);
	assert_int_equal(stat_field("/two", "count"), 3);
	assert_int_equal(stat_field("/none", "count"), 0);
	assert_int_equal(receiver_count(&rx, "/two"), 3);
	assert_int_equal(receiver_count(&rx, NULL), 5);
	first = stat_field(NULL, "first_us");
	last = stat_field(NULL, "last_us");
	assert_true(first > 0);
	assert_true(last >= first);
	assert_int_equal(receiver_wait_count(&rx, "/two", 3, 1000), 0);
	assert_int_equal(receiver_wait_count(&rx, "/two", 4, 100), -1);
}

static void test_drop(void **state)
{
	char url[128];
	struct http_resp resp;

	assert_int_equal(receiver_script(&rx, "/drop", "[{\"drop\":true}]"), 0);
	snprintf(url, sizeof(url), "%s/drop", rx.url);
	assert_int_equal(http_do("POST", url, NULL, NULL, "{}", 2, &resp), -1);
	assert_int_equal(resp.status, 0);
	assert_int_not_equal(resp.curl_code, 0);
	assert_true(resp.error[0] != '\0');
	http_resp_free(&resp);
	/* A dropped request was still received and recorded. */
	assert_int_equal(receiver_count(&rx, "/drop"), 1);
	assert_int_equal(post("/drop", NULL, "{}", 2, NULL), 200);
}

struct timed_post {
	const char *path;
	long status;
	int64_t elapsed_ms;
};

static void *timed_post_thread(void *arg)
{
	struct timed_post *t = arg;
	int64_t start = harness_now_ms();

	t->status = post(t->path, NULL, "{}", 2, NULL);
	t->elapsed_ms = harness_now_ms() - start;
	return NULL;
}

static void test_delay(void **state)
{
	struct timed_post slow = {.path = "/slow"}, fast = {.path = "/fast"};
	pthread_t th;

	assert_int_equal(receiver_script(&rx, "/slow",
					 "[{\"delay_ms\":300},{\"delay_ms\":1500,\"status\":201}]"),
			 0);
	timed_post_thread(&slow);
	assert_int_equal(slow.status, 200);
	assert_true(slow.elapsed_ms >= 300);

	/* A delayed answer holds its own connection only. */
	assert_int_equal(pthread_create(&th, NULL, timed_post_thread, &slow), 0);
	usleep(100 * 1000);
	timed_post_thread(&fast);
	assert_int_equal(pthread_join(th, NULL), 0);
	assert_int_equal(fast.status, 200);
	assert_true(fast.elapsed_ms < 1000);
	assert_int_equal(slow.status, 201);
	assert_true(slow.elapsed_ms >= 1500);
}

static void test_default_and_headers(void **state)
{
	char url[128];
	struct http_resp resp;

	assert_int_equal(receiver_script(&rx, "/d",
		"{\"responses\":[{\"status\":500,\"body\":\"boom\"}],"
		"\"default\":{\"status\":202,\"body\":\"{\\\"accepted\\\":true}\","
		"\"headers\":{\"X-Reply\":\"yes\",\"Content-Type\":\"application/json\","
		"\"Retry-After\":\"7\"}}}"), 0);
	snprintf(url, sizeof(url), "%s/d", rx.url);
	assert_int_equal(http_do("POST", url, NULL, NULL, "{}", 2, &resp), 0);
	assert_int_equal(resp.status, 500);
	assert_string_equal(resp.body, "boom");
	assert_null(resp.json);
	http_resp_free(&resp);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(http_do("POST", url, NULL, NULL, "{}", 2, &resp), 0);
		assert_int_equal(resp.status, 202);
		assert_non_null(resp.json);
		assert_true(json_is_true(json_object_get(resp.json, "accepted")));
		assert_string_equal(json_string_value(json_object_get(resp.headers, "x-reply")),
				    "yes");
		assert_string_equal(json_string_value(json_object_get(resp.headers,
								      "retry-after")), "7");
		assert_string_equal(json_string_value(json_object_get(resp.headers,
								      "content-type")),
				    "application/json");
		http_resp_free(&resp);
	}
}

static void test_bodies(void **state)
{
	static const char binary[] = {(char)0xff, 0x00, 0x01};
	static const char utf8[] = "h\xc3\xa9llo \xe2\x9c\x93";
	size_t big_len = 2u << 20;
	char *big = malloc(big_len + 1);
	json_t *reqs, *rec;

	assert_non_null(big);
	for (size_t i = 0; i < big_len; i++)
		big[i] = (char)('a' + i % 26);
	big[big_len] = '\0';

	assert_int_equal(post("/bin", "b1", binary, sizeof(binary), NULL), 200);
	assert_int_equal(post("/utf8", "u1", utf8, strlen(utf8), NULL), 200);
	assert_int_equal(post("/big", "g1", big, big_len, NULL), 200);
	assert_int_equal(post("/empty", "e1", "", 0, NULL), 200);

	reqs = receiver_requests(&rx, "/bin");
	assert_int_equal(json_array_size(reqs), 1);
	rec = json_array_get(reqs, 0);
	assert_true(json_is_null(json_object_get(rec, "body")));
	assert_string_equal(rec_str(rec, "body_base64"), "/wAB");
	json_decref(reqs);

	reqs = receiver_requests(&rx, "/utf8");
	assert_string_equal(rec_str(json_array_get(reqs, 0), "body"), utf8);
	json_decref(reqs);

	reqs = receiver_requests(&rx, "/big");
	rec = json_array_get(reqs, 0);
	assert_int_equal(json_string_length(json_object_get(rec, "body")), big_len);
	assert_memory_equal(rec_str(rec, "body"), big, big_len);
	assert_int_equal(strlen(rec_str(rec, "body_base64")), 4 * ((big_len + 2) / 3));
	json_decref(reqs);

	reqs = receiver_requests(&rx, "/empty");
	rec = json_array_get(reqs, 0);
	assert_string_equal(rec_str(rec, "body"), "");
	assert_string_equal(rec_str(rec, "body_base64"), "");
	json_decref(reqs);

	reqs = receiver_requests(&rx, NULL);
	assert_int_equal(json_array_size(reqs), 4);
	json_decref(reqs);
	free(big);
}

static void test_query_string(void **state)
{
	json_t *reqs;

	assert_int_equal(receiver_script(&rx, "/q", "[{\"status\":418}]"), 0);
	assert_int_equal(post("/q?key=1&name=a%20b", NULL, "{}", 2, NULL), 418);
	assert_int_equal(post("/q/deeper", NULL, "{}", 2, NULL), 200);
	reqs = receiver_requests(&rx, "/q");
	assert_int_equal(json_array_size(reqs), 1);
	assert_string_equal(rec_str(json_array_get(reqs, 0), "path"), "/q?key=1&name=a%20b");
	json_decref(reqs);
	assert_int_equal(receiver_count(&rx, "/q"), 1);
	assert_int_equal(receiver_count(&rx, "/q/deeper"), 1);
}

static void test_methods_and_control_errors(void **state)
{
	char url[128];
	struct http_resp resp;
	json_t *reqs;

	snprintf(url, sizeof(url), "%s/m", rx.url);
	assert_int_equal(http_do("PUT", url, NULL, "text/plain", "t", 1, &resp), 0);
	assert_int_equal(resp.status, 200);
	http_resp_free(&resp);
	assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &resp), 0);
	http_resp_free(&resp);
	assert_int_equal(http_do("DELETE", url, NULL, NULL, NULL, 0, &resp), 0);
	http_resp_free(&resp);
	reqs = receiver_requests(&rx, "/m");
	assert_int_equal(json_array_size(reqs), 3);
	assert_string_equal(rec_str(json_array_get(reqs, 0), "method"), "PUT");
	assert_string_equal(rec_header(json_array_get(reqs, 0), "content-type"), "text/plain");
	assert_string_equal(rec_str(json_array_get(reqs, 1), "method"), "GET");
	assert_string_equal(rec_str(json_array_get(reqs, 2), "method"), "DELETE");
	json_decref(reqs);

	/* Control requests are never recorded, and bad ones are refused. */
	assert_int_equal(receiver_script(&rx, "/m", "[{\"status\":\"x\"}]"), -1);
	assert_int_equal(receiver_script(&rx, "/m", "[{\"delay_ms\":-1}]"), -1);
	assert_int_equal(receiver_script(&rx, "/m", "[{\"drop\":1}]"), -1);
	snprintf(url, sizeof(url), "%s/_control/nope", rx.url);
	assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &resp), 0);
	assert_int_equal(resp.status, 404);
	http_resp_free(&resp);
	snprintf(url, sizeof(url), "%s/_control/script", rx.url);
	assert_int_equal(http_do("POST", url, NULL, NULL, "not json", 8, &resp), 0);
	assert_int_equal(resp.status, 400);
	assert_false(json_is_true(json_object_get(resp.json, "ok")));
	http_resp_free(&resp);
	assert_int_equal(receiver_count(&rx, NULL), 3);
}

static void test_reset(void **state)
{
	json_t *reqs;

	assert_int_equal(receiver_script(&rx, "/r", "{\"default\":{\"status\":500}}"), 0);
	assert_int_equal(post("/r", "r1", "x", 1, NULL), 500);
	assert_int_equal(post("/r", "r1", "x", 1, NULL), 500);
	assert_int_equal(receiver_reset(&rx), 0);
	assert_int_equal(stat_field(NULL, "count"), 0);
	assert_int_equal(stat_field(NULL, "unique_ids"), 0);
	assert_int_equal(stat_field(NULL, "duplicates"), 0);
	assert_int_equal(stat_field(NULL, "first_us"), 0);
	reqs = receiver_requests(&rx, NULL);
	assert_int_equal(json_array_size(reqs), 0);
	json_decref(reqs);
	/* The script went too; the id is new again; seq starts over. */
	assert_int_equal(post("/r", "r1", "x", 1, NULL), 200);
	assert_int_equal(stat_field(NULL, "duplicates"), 0);
	reqs = receiver_requests(&rx, NULL);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(reqs, 0), "seq")), 1);
	json_decref(reqs);
}

static void test_restart_same_port(void **state)
{
	int port = rx.port;
	pid_t pid = rx.pid;

	assert_int_equal(post("/before", "x", "x", 1, NULL), 200);
	assert_int_equal(receiver_restart(&rx), 0);
	assert_int_equal(rx.port, port);
	assert_int_not_equal(rx.pid, pid);
	assert_int_equal(receiver_count(&rx, NULL), 0);
	assert_int_equal(post("/after", "x", "x", 1, NULL), 200);
	assert_int_equal(receiver_count(&rx, NULL), 1);
}

static void test_sink_mode(void **state)
{
	static const char *const args[] = {"--no-bodies", "--threads", "2", NULL};
	struct receiver sink;
	struct receiver saved = rx;
	char id[32];
	json_t *reqs;

	assert_int_equal(receiver_start_args(&sink, args), 0);
	rx = sink;      /* post() and stat_field() talk to rx */
	assert_int_equal(receiver_script(&rx, "/s", "[{\"status\":503}]"), 0);
	for (int i = 0; i < 20; i++) {
		snprintf(id, sizeof(id), "id-%d", i % 5);
		assert_int_equal(post("/s", id, "payload", 7, NULL), i == 0 ? 503 : 200);
	}
	assert_int_equal(stat_field(NULL, "count"), 20);
	assert_int_equal(stat_field("/s", "count"), 20);
	assert_int_equal(stat_field(NULL, "unique_ids"), 5);
	assert_int_equal(stat_field(NULL, "duplicates"), 15);
	reqs = receiver_requests(&rx, NULL);
	assert_non_null(reqs);
	assert_int_equal(json_array_size(reqs), 0);
	json_decref(reqs);
	rx = saved;
	receiver_stop(&sink);
	assert_int_equal(sink.pid, 0);
}

/* POST /_control/chaos on rx; returns the status. */
static long chaos_set(const char *json)
{
	char url[256];
	struct http_resp resp;
	long status;

	snprintf(url, sizeof(url), "%s/_control/chaos", rx.url);
	http_do("POST", url, NULL, "application/json", json, strlen(json), &resp);
	status = resp.status;
	http_resp_free(&resp);
	return status;
}

/* Chaos mode (the soak's misbehaving subscriber) and --acks (its record of 2xx answers
 * by webhook-id), on a receiver of their own. */
static void test_chaos_and_acks(void **state)
{
	static const char *const args[] = {"--no-bodies", "--acks", NULL};
	struct receiver chaotic;
	struct receiver saved = rx;
	struct http_resp resp;
	char url[256];
	json_t *drawn;

	assert_int_equal(receiver_start_args(&chaotic, args), 0);
	rx = chaotic;   /* post() and chaos_set() talk to rx */
	assert_int_equal(chaos_set("{\"path\":\"/c\",\"weights\":{\"throttle\":1},"
				   "\"retry_after_s\":[2,2]}"), 200);
	snprintf(url, sizeof(url), "%s/c", rx.url);
	assert_int_equal(http_do("POST", url, NULL, NULL, "{}", 2, &resp), 0);
	assert_int_equal(resp.status, 429);
	assert_string_equal(json_string_value(json_object_get(resp.headers, "retry-after")), "2");
	http_resp_free(&resp);
	/* A reset is a transport error, not an answer. */
	assert_int_equal(chaos_set("{\"path\":\"/c\",\"weights\":{\"reset\":1}}"), 200);
	assert_int_equal(http_do("POST", url, NULL, NULL, "{}", 2, &resp), -1);
	assert_int_equal(resp.status, 0);
	http_resp_free(&resp);
	assert_int_equal(post("/c", "id-1", "{}", 2, NULL), 0);
	/* The timeout outcome answers late, and never with a 2xx. */
	assert_int_equal(chaos_set("{\"path\":\"/c\",\"weights\":{\"timeout\":1},"
				   "\"timeout_ms\":50}"), 200);
	assert_int_equal(post("/c", "id-1", "{}", 2, NULL), 503);
	/* Bad settings are refused; no weights turn chaos off. */
	assert_int_equal(chaos_set("{\"path\":\"/c\",\"weights\":{\"bogus\":1}}"), 400);
	assert_int_equal(chaos_set("{\"path\":\"/c\",\"slow_ms\":[5,1]}"), 400);
	assert_int_equal(chaos_set("{\"path\":\"/c\"}"), 200);
	assert_int_equal(post("/c", "id-1", "{}", 2, NULL), 200);
	assert_int_equal(post("/c", "id-1", "{}", 2, NULL), 200);
	assert_int_equal(post("/c", "id-2", "{}", 2, NULL), 200);
	assert_int_equal(post("/c", NULL, "{}", 2, NULL), 200);

	/* An answer is counted once MHD reports it completely written, which may come just
	 * after the client has read it. */
	snprintf(url, sizeof(url), "%s/_control/chaos?path=/c", rx.url);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &resp), 0);
		assert_non_null(resp.json);
		if (json_integer_value(json_object_get(resp.json, "ack_total")) == 3 || i == 99)
			break;
		http_resp_free(&resp);
		usleep(10000);
	}
	drawn = json_object_get(resp.json, "drawn");
	assert_int_equal(json_integer_value(json_object_get(drawn, "throttle")), 1);
	assert_int_equal(json_integer_value(json_object_get(drawn, "reset")), 2);
	assert_int_equal(json_integer_value(json_object_get(drawn, "timeout")), 1);
	assert_false(json_is_true(json_object_get(resp.json, "on")));
	assert_int_equal(json_integer_value(json_object_get(resp.json, "acked_ids")), 2);
	assert_int_equal(json_integer_value(json_object_get(resp.json, "ack_total")), 3);
	http_resp_free(&resp);
	/* Only the 2xx answers count, by webhook-id (the text's order is the table's). */
	snprintf(url, sizeof(url), "%s/_control/acks?path=/c", rx.url);
	assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &resp), 0);
	assert_non_null(strstr(resp.body, "id-1 2\n"));
	assert_non_null(strstr(resp.body, "id-2 1\n"));
	assert_int_equal(resp.len, strlen("id-1 2\nid-2 1\n"));
	http_resp_free(&resp);

	rx = saved;
	receiver_stop(&chaotic);
}

static void test_harness_helpers(void **state)
{
	char *dir = harness_tmpdir("harness-selftest");
	char path[512];
	struct stat st;
	FILE *f;
	int port = harness_free_port();

	assert_true(port > 0 && port < 65536);
	assert_non_null(dir);
	assert_int_equal(stat(dir, &st), 0);
	snprintf(path, sizeof(path), "%s/sub", dir);
	assert_int_equal(mkdir(path, 0700), 0);
	snprintf(path, sizeof(path), "%s/sub/file", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("x", f);
	fclose(f);
	assert_int_equal(harness_rmrf(dir), 0);
	assert_int_equal(stat(dir, &st), -1);
	assert_int_equal(harness_rmrf(dir), 0);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_flaky_script, reset),
		cmocka_unit_test_setup(test_dedup_stats, reset),
		cmocka_unit_test_setup(test_drop, reset),
		cmocka_unit_test_setup(test_delay, reset),
		cmocka_unit_test_setup(test_default_and_headers, reset),
		cmocka_unit_test_setup(test_bodies, reset),
		cmocka_unit_test_setup(test_query_string, reset),
		cmocka_unit_test_setup(test_methods_and_control_errors, reset),
		cmocka_unit_test_setup(test_reset, reset),
		cmocka_unit_test_setup(test_restart_same_port, reset),
		cmocka_unit_test_setup(test_sink_mode, reset),
		cmocka_unit_test_setup(test_chaos_and_acks, reset),
		cmocka_unit_test(test_harness_helpers),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
