/* test_pg_flow.c: three outboxd instances on one PostgreSQL database deliver to one small
 * receiver (PostgreSQL only; ctest runs it as e2e-pg/test_pg_flow). Each instance learns
 * its own limit for the endpoint (docs/flow-control.md), so together they must still not
 * flood it: Python's http.server and a queueing app server (4 workers x 20 ms) get every
 * event, none twice but as a recorded retry (under 2% for the app server), and nothing
 * is dead-lettered. */
#include "e2e.h"
#include "harness_pg.h"
#include "harness_receivers.h"

#define INSTANCES 3
#define EVENTS 2000

static struct daemon dmn[INSTANCES];
static struct real_receiver rr;
static char db_dsn[300];

static int setup(void **state)
{
	if (!harness_pg_wanted())
		return 0;
	memset(dmn, 0, sizeof(dmn));
	assert_int_equal(harness_pg_fresh_db(db_dsn, sizeof(db_dsn)), 0);
	char db[400];
	const char *env[] = {db, E2E_SHARED_SECRET_KEY, NULL};
	snprintf(db, sizeof(db), "OUTBOXD_DB=%s", db_dsn);
	for (int i = 0; i < INSTANCES; i++)
		assert_int_equal(daemon_start(&dmn[i], env), 0);
	return 0;
}

static int teardown(void **state)
{
	real_receiver_stop(&rr);
	for (int i = 0; i < INSTANCES; i++) {
		dmn[i].db[0] = '\0'; /* the database is shared: leave it to the server's end */
		daemon_cleanup(&dmn[i]);
	}
	return 0;
}

/* EVENTS events in batches of 100, round-robin over the instances. */
static void send_spread(const char *type)
{
	for (int sent = 0, k = 0; sent < EVENTS; sent += 100, k++) {
		char *body = malloc(100 * 80 + 32);
		size_t off = (size_t)sprintf(body, "{\"events\":[");
		for (int i = 0; i < 100; i++)
			off += (size_t)sprintf(body + off, "%s{\"event_type\":\"%s\",\"payload\":{\"n\":%d}}",
					       i ? "," : "", type, sent + i);
		sprintf(body + off, "]}");
		json_decref(api_call(&dmn[k % INSTANCES], "POST", "/v1/events", body, 202));
		free(body);
	}
}

static void run(enum real_receiver_kind kind, long max_dup)
{
	if (!harness_pg_wanted())
		skip();
	char sub[64];
	struct real_receiver_stats st;
	assert_int_equal(real_receiver_start(&rr, kind, NULL), 0);
	e2e_create_sub(&dmn[0], sub, "{\"name\":\"small\",\"event_types\":[\"small.*\"],"
				     "\"endpoint\":\"%s/hook\"}", rr.url);
	usleep(1000 * 1000); /* every instance has the subscription (docs/operations.md) */
	int64_t t0 = harness_now_ms();
	send_spread("small.event");
	for (;;) {
		assert_int_equal(real_receiver_stats(&rr, &st), 0);
		if (st.unique_ids >= EVENTS || harness_now_ms() - t0 > 90000)
			break;
		usleep(100 * 1000);
	}
	long took = (long)(harness_now_ms() - t0);
	usleep(500 * 1000);
	assert_int_equal(real_receiver_stats(&rr, &st), 0);
	fprintf(stderr, "%s, %d instances: %ld events in %ld ms, %ld requests, %ld duplicates "
		"(%ld as recorded retries), at most %ld at once in its handlers\n",
		real_receiver_name(kind), INSTANCES, st.unique_ids, took, st.requests,
		st.duplicates, st.duplicates_retried, st.max_in_progress);
	assert_int_equal(st.unique_ids, EVENTS);
	assert_int_equal(st.duplicates, st.duplicates_retried);
	assert_true(st.duplicates <= max_dup);
	json_t *dead = e2e_get(&dmn[0], "/v1/dlq?subscription_id=%s&limit=10", sub);
	assert_int_equal(json_array_size(json_object_get(dead, "items")), 0);
	json_decref(dead);
}

static void test_python_http_server_shared(void **state)
{
	run(REAL_PYTHON_HTTP_SERVER, EVENTS / 50);
}

static void test_queueing_app_server_shared(void **state)
{
	run(REAL_APP_SERVER, EVENTS / 50);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_python_http_server_shared, setup, teardown),
		cmocka_unit_test_setup_teardown(test_queueing_app_server_shared, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
