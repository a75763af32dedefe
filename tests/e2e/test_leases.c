/* test_leases.c: a round that runs longer than the lease keeps its delivery. With a
 * lease shorter than a round of four slow tries and a reaper that returns expired leases
 * every 200 ms, the subscriber must see each delivery's tries once each, in order
 * (outboxd-attempt 1, 2, 3, 4: never two rounds of one delivery interleaved), and every
 * request it received must be in the delivery's attempt history. Real daemon, real
 * receiver, on each store. */
#include "e2e.h"

#define EVENTS 3
#define TRIES 4

static struct receiver rcv;
static struct daemon dmn;

static int setup(void **state)
{
	/* the lease (2 s) is shorter than one round: 4 tries of 1.5 s each, 6 s and more */
	const char *env[] = {"OUTBOXD_LEASE=2s", "OUTBOXD_REAP_INTERVAL=200ms",
			     "OUTBOXD_SHUTDOWN_GRACE=2s", NULL};
	e2e_setup(&rcv, &dmn, env);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

static int64_t header_int(json_t *req, const char *name)
{
	const char *v = json_string_value(json_object_get(json_object_get(req, "headers"), name));
	return v ? strtoll(v, NULL, 10) : -1;
}

static void test_long_round_keeps_its_lease(void **state)
{
	char sub[64], ev[EVENTS][64], del[EVENTS][64], body[4096];

	/* every answer comes after the try's timeout: each delivery makes all its tries and
	 * then waits for a scheduled retry (an hour away) */
	assert_int_equal(receiver_script(&rcv, "/slow",
					 "{\"responses\":[],\"default\":{\"status\":200,"
					 "\"delay_ms\":2500}}"), 0);
	e2e_create_sub(&dmn, sub,
		       "{\"name\":\"slow\",\"event_types\":[\"lease.*\"],\"endpoint\":\"%s/slow\","
		       "\"timeout\":\"1500ms\",\"concurrency\":8,\"retry\":{\"immediate\":%d,"
		       "\"immediate_delay\":\"100ms\",\"interval\":\"1h\"}}", rcv.url, TRIES);
	for (int i = 0; i < EVENTS; i++) {
		snprintf(body, sizeof(body), "{\"event_type\":\"lease.test\",\"payload\":{\"n\":%d}}", i);
		e2e_send(&dmn, ev[i], body);
		char ids[2][64];
		assert_int_equal(e2e_deliveries_of(&dmn, ev[i], ids, 2), 1);
		snprintf(del[i], sizeof(del[i]), "%s", ids[0]);
	}
	/* each round ends FAILED with a retry scheduled, after its four tries */
	for (int i = 0; i < EVENTS; i++) {
		json_t *d = NULL;
		for (int waited = 0; waited < 40000; waited += 200) {
			json_decref(d);
			d = e2e_get(&dmn, "/v1/deliveries/%s", del[i]);
			if (json_integer_value(json_object_get(d, "attempt_count")) >= TRIES &&
			    json_is_string(json_object_get(d, "next_attempt_at")))
				break;
			usleep(200 * 1000);
		}
		assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), TRIES);
		assert_string_equal(json_string_value(json_object_get(d, "status")), "FAILED");
		json_decref(d);
	}
	/* the last answers the receiver still owes arrive before we count */
	usleep(1200 * 1000);

	json_t *reqs = receiver_requests(&rcv, "/slow");
	assert_non_null(reqs);
	for (int i = 0; i < EVENTS; i++) {
		/* what the subscriber saw of this event: its tries, in arrival order */
		int64_t seen[32];
		size_t n = 0;
		for (size_t k = 0; k < json_array_size(reqs); k++) {
			json_t *r = json_array_get(reqs, k);
			const char *id = json_string_value(
				json_object_get(json_object_get(r, "headers"), "webhook-id"));
			if (id && strcmp(id, ev[i]) == 0 && n < 32)
				seen[n++] = header_int(r, "outboxd-attempt");
		}
		json_t *d = e2e_get(&dmn, "/v1/deliveries/%s", del[i]);
		json_t *attempts = json_object_get(d, "attempts");
		if (n != json_array_size(attempts)) {
			fprintf(stderr, "event %s: %zu requests received, %zu attempts recorded:",
				ev[i], n, json_array_size(attempts));
			for (size_t k = 0; k < n; k++)
				fprintf(stderr, " %lld", (long long)seen[k]);
			fprintf(stderr, "\n");
		}
		/* every request received is an attempt recorded, one round at a time */
		assert_int_equal(n, json_array_size(attempts));
		assert_int_equal(n, TRIES);
		for (size_t k = 0; k < n; k++) {
			assert_int_equal(seen[k], (int64_t)k + 1);
			assert_int_equal(json_integer_value(json_object_get(
						 json_array_get(attempts, k), "n")), (json_int_t)k + 1);
		}
		json_decref(d);
	}
	json_decref(reqs);
	/* the rounds outlived their first lease: renewals kept them */
	assert_true(e2e_metric(&dmn, "outboxd_lease_renewals_total") > 0);
	assert_true(e2e_metric(&dmn, "outboxd_leases_lost_total") == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_long_round_keeps_its_lease, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
