/* test_kafka_intake.c: what the Kafka intake promises while it runs (docs/kafka.md),
 * seen from outside: the real daemon consuming librdkafka's mock cluster
 * (tests/support/kafka_mock.c), kcat as the producer, the test receiver as subscriber.
 *
 *  - backpressure: above kafka_max_backlog the intake pauses; once the backlog drained
 *    it resumes by itself, and messages produced after that are consumed;
 *  - readiness and lag with an idle topic: /readyz answers 503 while the broker is down
 *    and 200 again within seconds of its return; the lag gauge is there for a partition
 *    no message ever came through. */
#include "kafka_e2e.h"

static struct kafka_mock *mock;
static struct receiver rcv;
static struct daemon dmn;

static int setup(void **state)
{
	(void)state;
	assert_non_null(mock = kafka_mock_start(1));
	assert_int_equal(receiver_start(&rcv), 0);
	memset(&dmn, 0, sizeof(dmn));
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	daemon_cleanup(&dmn);
	receiver_stop(&rcv);
	kafka_mock_stop(mock);
	mock = NULL;
	return 0;
}

/* Produces envelopes first..first+n-1 of type backlog.item to topic, for url. */
static void produce_items(const char *topic, const char *url, int first, int n)
{
	void **values = calloc((size_t)n, sizeof(*values));
	size_t *lens = calloc((size_t)n, sizeof(*lens));
	char ids[64][40], payloads[64][32];
	assert_true(n <= 64 && values && lens);
	for (int i = 0; i < n; i++) {
		struct env_spec s = {.type = "backlog.item", .endpoint = url};
		snprintf(ids[i], sizeof(ids[i]), "0190a0b0-0000-7000-8004-%012d", first + i);
		snprintf(payloads[i], sizeof(payloads[i]), "{\"item\":%d}", first + i);
		s.id = ids[i];
		s.payload = payloads[i];
		s.payload_len = strlen(payloads[i]);
		values[i] = kafka_e2e_encode(&s, &lens[i]);
	}
	assert_int_equal(kcat_produce_many(kafka_mock_bootstrap(mock), topic, (size_t)n,
					   (const void *const *)values, lens, NULL), 0);
	for (int i = 0; i < n; i++)
		free(values[i]);
	free(values);
	free(lens);
}

static long unique_received(const char *path)
{
	json_t *st = receiver_stats(&rcv, path);
	long unique = (long)json_integer_value(json_object_get(st, "unique_ids"));
	json_decref(st);
	return unique;
}

/* Polls until the receiver saw want distinct webhook-ids on path; returns the last count. */
static long wait_unique(const char *path, long want, int timeout_ms)
{
	long got = 0;
	for (int64_t end = harness_now_ms() + timeout_ms; harness_now_ms() < end;) {
		if ((got = unique_received(path)) >= want)
			break;
		usleep(100 * 1000);
	}
	return got;
}

static int log_says_pausing(void *ctx)
{
	(void)ctx;
	return kafka_e2e_log_has(&dmn, "(kafka_max_backlog 2): pausing");
}

/* kafka_max_backlog 2 and a subscriber that answers slowly: the first 30 messages are
 * stored at once and the intake pauses. Nothing more arrives while paused, so only the
 * poll loop itself can see the backlog drain: it resumes, and 9 messages produced after
 * the drain are consumed and delivered. */
static void test_backlog_pause_resume(void **state)
{
	(void)state;
	char brokers[256], url[128];
	assert_int_equal(kafka_mock_command(mock, "topic backlog 1"), 0);
	assert_int_equal(receiver_script(&rcv, "/slow",
					 "{\"default\":{\"status\":200,\"delay_ms\":150}}"), 0);
	snprintf(url, sizeof(url), "%s/slow", rcv.url);
	produce_items("backlog", url, 0, 30);
	kafka_e2e_brokers(mock, brokers);
	const char *env[] = {brokers, "OUTBOXD_KAFKA_INTAKE=backlog",
			     "OUTBOXD_KAFKA_MAX_BACKLOG=2", "OUTBOXD_MAX_IN_FLIGHT=2", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	assert_int_equal(harness_wait(log_says_pausing, NULL, 30000), 0);
	assert_int_equal(wait_unique("/slow", 30, 60000), 30);

	produce_items("backlog", url, 30, 9);
	assert_int_equal(wait_unique("/slow", 39, 60000), 39);
	assert_true(kafka_e2e_log_has(&dmn, "resuming"));
	json_t *page = e2e_get(&dmn, "/v1/deliveries?source=kafka:backlog&limit=100");
	assert_int_equal(json_array_size(json_object_get(page, "items")), 39);
	json_decref(page);
	assert_int_equal(daemon_stop(&dmn), 0);
}

/* An idle topic: readiness follows the broker down and up, and the lag gauge of its
 * partition is there although no message ever came. */
static void test_readiness_follows_the_broker(void **state)
{
	(void)state;
	char brokers[256];
	assert_int_equal(kafka_mock_command(mock, "topic quiet 1"), 0);
	kafka_e2e_brokers(mock, brokers);
	const char *env[] = {brokers, "OUTBOXD_KAFKA_INTAKE=quiet", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	assert_true(kafka_e2e_wait_readyz(&dmn, 200, 30000) >= 0);
	double lag = -1;
	for (int i = 0; i < 300 && lag < 0; i++) {
		lag = e2e_metric(&dmn, "outboxd_kafka_consumer_lag{topic=\"quiet\",partition=\"0\"}");
		if (lag < 0)
			usleep(100 * 1000);
	}
	assert_true(lag == 0);

	assert_int_equal(kafka_mock_command(mock, "down 1"), 0);
	long down_ms = kafka_e2e_wait_readyz(&dmn, 503, 30000);
	assert_true(down_ms >= 0);
	sleep(3); /* down for a while: the clients back off between connection attempts */
	assert_int_equal(kafka_mock_command(mock, "up 1"), 0);
	long up_ms = kafka_e2e_wait_readyz(&dmn, 200, 15000);
	fprintf(stderr, "readyz: 503 %ld ms after the broker went down, 200 %ld ms after it "
		"came back\n", down_ms, up_ms);
	assert_true(up_ms >= 0);
	assert_int_equal(daemon_stop(&dmn), 0);
}

int main(void)
{
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_backlog_pause_resume, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readiness_follows_the_broker, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
