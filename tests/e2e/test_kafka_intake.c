/* test_kafka_intake.c: what the Kafka intake promises while it runs (docs/kafka.md),
 * seen from outside: the real daemon consuming librdkafka's mock cluster
 * (tests/support/kafka_mock.c), kcat as the producer, the test receiver as subscriber.
 *
 *  - backpressure: above kafka_max_backlog the intake pauses; once the backlog drained
 *    it resumes by itself, and messages produced after that are consumed;
 *  - readiness and lag with an idle topic: /readyz answers 503 while the broker is down
 *    and 200 again within seconds of its return; the lag gauge is there for a partition
 *    no message ever came through (on SQLite only: no store changes it);
 *  - the broker restarted while the intake reads: every message delivered once, those
 *    produced after the restart too;
 *  - the idempotency key includes the target: each copy of one event is delivered once,
 *    a re-read of a copy (or of an event-format message without keys) is dropped;
 *  - a dead-letter topic's message is stored NEW, due after retry_interval;
 *  - a dead delivery shows the envelope its message was: the bytes produced and parsed,
 *    credentials masked, and a message that is no envelope with why. */
#include "kafka_e2e.h"
#include "harness_pg.h"

static struct kafka_mock *mock;
static struct receiver rcv;
static struct daemon dmn;

static int setup(void **state)
{
	(void)state;
	kafka_e2e_setup(&mock, &rcv, &dmn, 1);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	kafka_e2e_teardown(&mock, &rcv, &dmn, 1);
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

/* Distinct webhook-ids the receiver saw, on any path. */
static long unique_received(void)
{
	json_t *st = receiver_stats(&rcv, NULL);
	long unique = (long)json_integer_value(json_object_get(st, "unique_ids"));
	json_decref(st);
	return unique;
}

/* Polls until the receiver saw want distinct webhook-ids; returns the last count. */
static long wait_unique(long want, int timeout_ms)
{
	long got = 0;
	for (int64_t end = harness_now_ms() + timeout_ms; harness_now_ms() < end;) {
		if ((got = unique_received()) >= want)
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
	assert_int_equal(wait_unique(30, 60000), 30);

	produce_items("backlog", url, 30, 9);
	assert_int_equal(wait_unique(39, 60000), 39);
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
	/* the broker's part of readiness, which no store changes: SQLite only (12 s) */
	if (harness_pg_wanted())
		skip();
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

/* Sends one envelope of type copy.item (id, endpoint path, subscription_id may be NULL). */
static void produce_copy(const char *topic, const char *id, const char *path,
			 const char *subscription_id)
{
	char url[128];
	snprintf(url, sizeof(url), "%s%s", rcv.url, path);
	struct env_spec s = {.id = id, .type = "copy.item", .endpoint = url, .payload = "{}",
			     .payload_len = 2, .subscription_id = subscription_id};
	kafka_e2e_produce(mock, topic, &s);
}

static void produce_event(const char *json)
{
	assert_int_equal(kcat_produce(kafka_mock_bootstrap(mock), "events", NULL, json,
				      strlen(json), NULL), 0);
}

/* Every request on path carries webhook-id id. */
static void assert_all_ids(const char *path, const char *id)
{
	json_t *reqs = receiver_requests(&rcv, path);
	for (size_t i = 0; i < json_array_size(reqs); i++)
		assert_string_equal(kafka_e2e_header(json_array_get(reqs, i), "webhook-id"), id);
	json_decref(reqs);
}

static size_t deliveries_from(const char *topic)
{
	json_t *page = e2e_get(&dmn, "/v1/deliveries?source=kafka:%s&limit=100", topic);
	size_t n = json_array_size(json_object_get(page, "items"));
	json_decref(page);
	return n;
}

/* The broker goes down while the intake works through a topic and comes back with its
 * messages and committed offsets, as a restarted broker does: every message is stored and
 * delivered once (the intake commits an offset only once its events are stored, and what
 * it reads again after the outage is dropped by its idempotency key), and the messages
 * produced after the restart follow. */
static void test_broker_restart_mid_intake(void **state)
{
	(void)state;
	char brokers[256], url[128];
	snprintf(url, sizeof(url), "%s/restart", rcv.url);
	assert_int_equal(kafka_mock_command(mock, "topic restart 2"), 0);
	for (int i = 0; i < 4; i++)
		produce_items("restart", url, i * 50, 50);
	kafka_e2e_brokers(mock, brokers);
	const char *env[] = {brokers, "OUTBOXD_KAFKA_INTAKE=restart", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	assert_true(wait_unique(1, 30000) >= 1); /* the intake reads */
	assert_int_equal(kafka_mock_command(mock, "down 1"), 0);
	fprintf(stderr, "broker down with %ld of the first 200 delivered\n", unique_received());
	sleep(4); /* the intake, its group and its offset commits see no broker */
	assert_int_equal(kafka_mock_command(mock, "up 1"), 0);
	for (int i = 4; i < 6; i++)
		produce_items("restart", url, i * 50, 50);
	assert_int_equal(wait_unique(300, 60000), 300);
	sleep(1); /* a message stored twice would be a request more by now */
	assert_int_equal(receiver_count(&rcv, "/restart"), 300);
	assert_int_equal(daemon_stop(&dmn), 0);
}

/* The idempotency key of a message includes its target: one event id sent to two
 * endpoints is two deliveries, a dead-letter topic's two copies of one event (two failed
 * subscribers) are two deliveries, and only a re-read of the same copy is dropped. An
 * event-format message without keys is keyed by its place, each event of a batch message
 * by its index too: all of it read again by another consumer group (as after a crash
 * between the store and the offset commit) gives no new delivery. A marker sent after
 * each re-read shows the partition went past it. */
static void test_each_copy_once(void **state)
{
	(void)state;
	char brokers[256], sub[64];
	const char *X = "0190a0b0-0000-7000-8005-000000000001";
	const char *Z = "0190a0b0-0000-7000-8005-000000000002";
	assert_int_equal(kafka_mock_command(mock, "topic copies 1"), 0);
	assert_int_equal(kafka_mock_command(mock, "topic copies.dlt 1"), 0);
	assert_int_equal(kafka_mock_command(mock, "topic events 1"), 0);
	produce_copy("copies", X, "/a", NULL);
	produce_copy("copies", X, "/b", NULL);
	produce_copy("copies", X, "/a", NULL);                /* the first copy read again */
	produce_copy("copies", "0190a0b0-0000-7000-8005-00000000000c", "/c", NULL);
	produce_copy("copies.dlt", Z, "/d", "subscriber-1");
	produce_copy("copies.dlt", Z, "/d", "subscriber-2");
	produce_copy("copies.dlt", Z, "/d", "subscriber-1"); /* the first copy read again */
	produce_copy("copies.dlt", "0190a0b0-0000-7000-8005-00000000000f", "/f", "x");
	produce_event("{\"event_type\":\"user.created\",\"payload\":{\"n\":1}}");
	produce_event("{\"events\":[{\"event_type\":\"user.created\",\"payload\":{\"n\":2}},"
		      "{\"event_type\":\"user.created\",\"payload\":{\"n\":3}}]}");

	kafka_e2e_brokers(mock, brokers);
	const char *env[] = {brokers, "OUTBOXD_KAFKA_INTAKE=copies,copies.dlt:dlt,events:event",
			     "OUTBOXD_RETRY_INTERVAL=300ms", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	char url[128];
	snprintf(url, sizeof(url), "%s/e", rcv.url);
	e2e_create_sub(&dmn, sub, "{\"name\":\"users\",\"event_types\":[\"user.*\"],"
				  "\"endpoint\":\"%s\"}", url);
	assert_int_equal(receiver_wait_count(&rcv, "/c", 1, 30000), 0);
	assert_int_equal(receiver_wait_count(&rcv, "/f", 1, 30000), 0);
	assert_int_equal(receiver_wait_count(&rcv, "/b", 1, 30000), 0);
	assert_int_equal(receiver_wait_count(&rcv, "/d", 2, 30000), 0);
	assert_int_equal(receiver_wait_count(&rcv, "/e", 3, 30000), 0);
	assert_int_equal(receiver_count(&rcv, "/a"), 1);
	assert_all_ids("/a", X);
	assert_all_ids("/b", X);
	assert_all_ids("/d", Z);
	assert_int_equal(deliveries_from("copies"), 3);
	assert_int_equal(deliveries_from("copies.dlt"), 3);
	assert_int_equal(deliveries_from("events"), 3);

	/* Everything read again from the start by another group; then one more of each */
	assert_int_equal(daemon_stop(&dmn), 0);
	const char *again[] = {brokers, "OUTBOXD_KAFKA_INTAKE=copies,copies.dlt:dlt,events:event",
			       "OUTBOXD_RETRY_INTERVAL=300ms", "OUTBOXD_KAFKA_GROUP=again", NULL};
	assert_int_equal(daemon_start(&dmn, again), 0);
	produce_copy("copies", "0190a0b0-0000-7000-8005-0000000000c2", "/c", NULL);
	produce_copy("copies.dlt", "0190a0b0-0000-7000-8005-0000000000f2", "/f", "x");
	produce_event("{\"event_type\":\"user.created\",\"payload\":{\"n\":4}}");
	assert_int_equal(receiver_wait_count(&rcv, "/c", 2, 30000), 0);
	assert_int_equal(receiver_wait_count(&rcv, "/f", 2, 30000), 0);
	assert_int_equal(receiver_wait_count(&rcv, "/e", 4, 30000), 0);
	assert_int_equal(receiver_count(&rcv, "/a"), 1);
	assert_int_equal(receiver_count(&rcv, "/b"), 1);
	assert_int_equal(receiver_count(&rcv, "/d"), 2);
	assert_int_equal(receiver_count(&rcv, "/e"), 4);
	json_t *reqs = receiver_requests(&rcv, "/e");
	for (size_t i = 0; i < json_array_size(reqs); i++)
		for (size_t k = 0; k < i; k++)
			assert_string_not_equal(
				kafka_e2e_header(json_array_get(reqs, i), "webhook-id"),
				kafka_e2e_header(json_array_get(reqs, k), "webhook-id"));
	json_decref(reqs);
	assert_int_equal(deliveries_from("copies"), 4);
	assert_int_equal(deliveries_from("copies.dlt"), 4);
	assert_int_equal(deliveries_from("events"), 4);
	assert_int_equal(daemon_stop(&dmn), 0);
}

/* A dead-letter topic's message is stored NEW (as a dead-letter processor does), its
 * first try left to the scheduled layer after retry_interval, with the upstream error as
 * its last error until then. */
static void test_dead_letter_message_stored_new(void **state)
{
	(void)state;
	char brokers[256], url[128];
	size_t len = 0;
	assert_int_equal(kafka_mock_command(mock, "topic later.dlt 1"), 0);
	snprintf(url, sizeof(url), "%s/later", rcv.url);
	struct env_spec s = {.id = "0190a0b0-0000-7000-8006-000000000001", .type = "later.item",
			     .endpoint = url, .payload = "{}", .payload_len = 2,
			     .subscription_id = "upstream-sub"};
	void *v = kafka_e2e_encode(&s, &len);
	const char *headers[] = {"outboxd-error-code=503",
				 "outboxd-error-message=HTTP 503", NULL};
	assert_int_equal(kcat_produce(kafka_mock_bootstrap(mock), "later.dlt", NULL, v, len,
				      headers), 0);
	free(v);
	kafka_e2e_brokers(mock, brokers);
	const char *env[] = {brokers, "OUTBOXD_KAFKA_INTAKE=later.dlt:dlt",
			     "OUTBOXD_RETRY_INTERVAL=1h", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	json_t *page = kafka_e2e_wait_items(&dmn, 1, 30000, "/v1/deliveries?source=kafka:later.dlt");
	json_t *d = json_array_get(json_object_get(page, "items"), 0);
	assert_non_null(d);
	assert_string_equal(json_string_value(json_object_get(d, "status")), "NEW");
	assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), 0);
	json_t *err = json_object_get(d, "last_error");
	assert_int_equal(json_integer_value(json_object_get(err, "code")), 503);
	assert_string_equal(json_string_value(json_object_get(err, "message")),
			    "dead-lettered upstream");
	assert_non_null(strstr(json_string_value(json_object_get(err, "cause")), "HTTP 503"));
	/* due one retry_interval after it was stored: an hour, not now */
	assert_non_null(json_string_value(json_object_get(d, "next_attempt_at")));
	assert_string_not_equal(json_string_value(json_object_get(d, "next_attempt_at")),
				json_string_value(json_object_get(d, "created_at")));
	json_decref(page);
	assert_int_equal(receiver_count(&rcv, "/later"), 0);
	assert_int_equal(daemon_stop(&dmn), 0);
}

/* The bytes of view's raw_base64 (returned, free it), *len set. */
static unsigned char *raw_of(json_t *view, size_t *len)
{
	const char *b64 = json_string_value(json_object_get(view, "raw_base64"));
	assert_non_null(b64);
	size_t n = strlen(b64);
	unsigned char *out = malloc(n / 4 * 3 + 1);
	assert_non_null(out);
	int got = EVP_DecodeBlock(out, (const unsigned char *)b64, (int)n);
	assert_true(got >= 0);
	*len = (size_t)got - (n >= 1 && b64[n - 1] == '=') - (n >= 2 && b64[n - 2] == '=');
	return out;
}

/* A message whose delivery dead-letters shows the OutboxEvent it came as in
 * GET /v1/deliveries/{id}: the bytes produced and their parsed fields; one that carries
 * a credential shows it masked in both (its frame kept); one that is no envelope shows
 * its bytes, parsed null and why. */
static void test_dead_letter_shows_the_envelope(void **state)
{
	(void)state;
	char brokers[256], url[128];
	const char *payload = "{\"refund\":42,\"currency\":\"EUR\"}";
	const char *garbage = "not an envelope \x01\x02";
	assert_int_equal(receiver_script(&rcv, "/refunds", "{\"default\":{\"status\":500}}"), 0);
	assert_int_equal(kafka_mock_command(mock, "topic refunds 1"), 0);
	snprintf(url, sizeof(url), "%s/refunds", rcv.url);
	struct env_spec plain = {.id = "0190a0b0-0000-7000-8007-000000000001",
				 .type = "refund.issued", .endpoint = url, .payload = payload,
				 .payload_len = strlen(payload)};
	struct env_spec secret = plain;
	secret.id = "0190a0b0-0000-7000-8007-000000000002";
	secret.auth = OUTBOXD__V1__AUTH_TYPE__BASIC_AUTH;
	secret.user = "refunds";
	secret.pass = "refund-s3cret";
	secret.confluent = 1;
	size_t lens[3];
	void *values[3];
	values[0] = kafka_e2e_encode(&plain, &lens[0]);
	values[1] = kafka_e2e_encode(&secret, &lens[1]);
	values[2] = (void *)garbage;
	lens[2] = strlen(garbage);
	assert_int_equal(kcat_produce_many(kafka_mock_bootstrap(mock), "refunds", 3,
					   (const void *const *)values, lens, NULL), 0);
	kafka_e2e_brokers(mock, brokers);
	const char *env[] = {brokers, "OUTBOXD_KAFKA_INTAKE=refunds", "OUTBOXD_IMMEDIATE_TRIES=1",
			     "OUTBOXD_MAX_RETRIES=1", "OUTBOXD_RETRY_INTERVAL=300ms", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);

	json_t *page = kafka_e2e_wait_items(&dmn, 3, 30000, "/v1/dlq?source=kafka:refunds");
	json_t *items = json_object_get(page, "items");
	assert_int_equal(json_array_size(items), 3);
	int seen = 0;
	for (size_t i = 0; i < 3; i++) {
		const char *id = json_string_value(json_object_get(json_array_get(items, i), "id"));
		json_t *d = e2e_get(&dmn, "/v1/deliveries/%s", id);
		json_t *v = json_object_get(d, "envelope");
		assert_true(json_is_object(v));
		assert_string_equal(json_string_value(json_object_get(v, "origin")), "received");
		char *text = json_dumps(d, JSON_COMPACT);
		assert_null(strstr(text, "refund-s3cret"));
		free(text);
		size_t n = 0;
		unsigned char *raw = raw_of(v, &n);
		json_t *parsed = json_object_get(v, "parsed");
		json_t *ev = json_object_get(parsed, "event");
		const char *type = json_string_value(json_object_get(d, "event_type"));
		if (strcmp(type, "kafka.undecodable") == 0) {
			/* the bytes as they came, and why they are no envelope */
			seen |= 4;
			assert_int_equal(n, lens[2]);
			assert_memory_equal(raw, garbage, n);
			assert_true(json_is_null(parsed));
			assert_non_null(strstr(json_string_value(json_object_get(v, "parse_error")),
					       "not an OutboxEvent"));
		} else if (strcmp(json_string_value(json_object_get(ev, "id")), plain.id) == 0) {
			/* exactly the bytes produced, and the event in them */
			seen |= 1;
			assert_int_equal(n, lens[0]);
			assert_memory_equal(raw, values[0], n);
			assert_true(json_is_null(json_object_get(v, "parse_error")));
			assert_true(json_is_false(json_object_get(v, "redacted")));
			assert_string_equal(json_string_value(json_object_get(v, "wire_format")),
					    "plain");
			assert_string_equal(json_string_value(json_object_get(ev, "type")),
					    "refund.issued");
			json_t *want = json_loads(payload, 0, NULL);
			assert_true(json_equal(json_object_get(ev, "payload"), want));
			json_decref(want);
			assert_string_equal(json_string_value(json_object_get(parsed, "endpoint")), url);
			assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), 2);
		} else {
			/* the same message with its password masked, framed as it came */
			seen |= 2;
			assert_string_equal(json_string_value(json_object_get(ev, "id")), secret.id);
			assert_true(json_is_true(json_object_get(v, "redacted")));
			assert_string_equal(json_string_value(json_object_get(v, "wire_format")),
					    "confluent");
			assert_int_equal(json_integer_value(json_object_get(v, "schema_id")), 7);
			assert_memory_equal(raw, values[1], 6);
			assert_null(memmem(raw, n, "refund-s3cret", 13));
			assert_non_null(memmem(raw, n, "refund.issued", 13));
			json_t *auth = json_object_get(parsed, "auth");
			assert_string_equal(json_string_value(json_object_get(auth, "type")),
					    "BASIC_AUTH");
			assert_string_equal(json_string_value(json_object_get(auth, "username")),
					    "refunds");
			assert_string_equal(json_string_value(json_object_get(auth, "password")),
					    "********");
		}
		free(raw);
		json_decref(d);
	}
	assert_int_equal(seen, 7);
	json_decref(page);
	/* the credential itself still went to the subscriber */
	json_t *reqs = receiver_requests(&rcv, "/refunds");
	int with_auth = 0;
	for (size_t i = 0; i < json_array_size(reqs); i++)
		with_auth += kafka_e2e_header(json_array_get(reqs, i), "authorization") != NULL;
	assert_int_equal(with_auth, 2);
	json_decref(reqs);
	free(values[0]);
	free(values[1]);
	assert_int_equal(daemon_stop(&dmn), 0);
}

int main(void)
{
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_backlog_pause_resume, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readiness_follows_the_broker, setup, teardown),
		cmocka_unit_test_setup_teardown(test_each_copy_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_broker_restart_mid_intake, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_letter_message_stored_new, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_letter_shows_the_envelope, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
