/* test_kafka_chain.c: the reference Kafka deployment with one outboxd per role, seen from
 * outside (docs/kafka.md): a hub publishing envelopes, a processor delivering them and
 * dead-lettering what it cannot, a dead-letter processor retrying on its schedule, each
 * its own daemon with its own store, librdkafka's mock cluster between them
 * (tests/support/kafka_mock.c) and the test receiver as the one subscriber.
 *
 *  - one event, one webhook-id: every request the subscriber receives, from the processor
 *    and from the dead-letter processor, carries the hub's event id;
 *  - each hop's delivery shows its OutboxEvent, the exact bytes on the topic: published
 *    by the hub, received by the processor and by the dead-letter processor;
 *  - a fatal error of the hub's idempotent producer: recreated, counted, and every event
 *    still published without a restart;
 *  - a dead-letter publish waiting for a broker that is down survives a kill -9 of the
 *    processor: published after the restart. */
#include "kafka_e2e.h"

static struct kafka_mock *mock;
static struct receiver rcv;
static struct daemon daemons[3];
#define hub (daemons[0])
#define processor (daemons[1])
#define dlt_processor (daemons[2])

static int setup(void **state)
{
	(void)state;
	kafka_e2e_setup(&mock, &rcv, daemons, 3);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	kafka_e2e_teardown(&mock, &rcv, daemons, 3);
	return 0;
}

/* Hub (a kafka:// subscription with payload_format envelope) -> processor (intake
 * outbox.user, kafka_dead_letter) -> dead-letter processor (intake outbox.user.dlt:dlt).
 * The subscriber fails the processor's two tries, so the delivery is dead-lettered, and
 * answers the dead-letter processor's scheduled retry. */
static void test_one_webhook_id_from_hub_to_dead_letter_processor(void **state)
{
	(void)state;
	char brokers[256], sub[64], event_id[64], url[128];
	assert_int_equal(kafka_mock_command(mock, "topic outbox.user 1"), 0);
	assert_int_equal(kafka_mock_command(mock, "topic outbox.user.dlt 1"), 0);
	assert_int_equal(receiver_script(&rcv, "/hook",
					 "{\"responses\":[{\"status\":500},{\"status\":500}],"
					 "\"default\":{\"status\":200}}"), 0);
	snprintf(url, sizeof(url), "%s/hook", rcv.url);
	kafka_e2e_brokers(mock, brokers);

	const char *hub_env[] = {brokers, NULL};
	const char *processor_env[] = {brokers, "OUTBOXD_KAFKA_INTAKE=outbox.user",
				       "OUTBOXD_KAFKA_GROUP=processor",
				       "OUTBOXD_KAFKA_DEAD_LETTER={topic}.dlt",
				       "OUTBOXD_IMMEDIATE_TRIES=1", "OUTBOXD_MAX_RETRIES=1",
				       "OUTBOXD_RETRY_INTERVAL=500ms", NULL};
	const char *dlt_env[] = {brokers, "OUTBOXD_KAFKA_INTAKE=outbox.user.dlt:dlt",
				 "OUTBOXD_KAFKA_GROUP=dlt-processor",
				 "OUTBOXD_RETRY_INTERVAL=500ms", NULL};
	assert_int_equal(daemon_start(&dlt_processor, dlt_env), 0);
	assert_int_equal(daemon_start(&processor, processor_env), 0);
	e2e_create_sub(&processor, sub, "{\"name\":\"users\",\"event_types\":[\"user.*\"],"
					"\"endpoint\":\"%s\"}", url);
	assert_int_equal(daemon_start(&hub, hub_env), 0);
	e2e_create_sub(&hub, sub, "{\"name\":\"hub\",\"event_types\":[\"user.*\"],"
				  "\"endpoint\":\"kafka://outbox.user\",\"payload_format\":\"envelope\"}");
	e2e_send(&hub, event_id, "{\"event_type\":\"user.created\",\"payload\":{\"user\":7}}");

	assert_int_equal(receiver_wait_count(&rcv, "/hook", 3, 60000), 0);
	json_t *reqs = receiver_requests(&rcv, "/hook");
	assert_int_equal(json_array_size(reqs), 3);
	for (size_t i = 0; i < 3; i++) {
		json_t *req = json_array_get(reqs, i);
		assert_string_equal(kafka_e2e_header(req, "webhook-id"), event_id);
		assert_string_equal(json_string_value(json_object_get(req, "body")),
				    "{\"user\":7}");
	}
	json_decref(reqs);

	/* the dead-letter processor's copy: its first try was the scheduled one, it
	 * succeeded, and its event shows the hub's id as the webhook-id */
	json_t *page = kafka_e2e_wait_items(
		&dlt_processor, 1, 10000,
		"/v1/deliveries?source=kafka:outbox.user.dlt&status=PROCESSED");
	json_t *items = json_object_get(page, "items");
	assert_int_equal(json_array_size(items), 1);
	json_t *d = e2e_get(&dlt_processor, "/v1/deliveries/%s",
			    json_string_value(json_object_get(json_array_get(items, 0), "id")));
	json_t *att = json_array_get(json_object_get(d, "attempts"), 0);
	assert_string_equal(json_string_value(json_object_get(att, "kind")), "scheduled");
	json_t *ev = e2e_get(&dlt_processor, "/v1/events/%s",
			     json_string_value(json_object_get(d, "event_id")));
	assert_string_equal(json_string_value(json_object_get(ev, "webhook_id")), event_id);
	json_decref(ev);
	json_decref(d);
	json_decref(page);

	/* each hop shows the OutboxEvent of its delivery (GET /v1/deliveries/{id}), exactly
	 * the bytes on the topic: the hub the one it published, the processor that one as it
	 * consumed it (its dead delivery), the dead-letter processor the one the processor
	 * dead-lettered */
	const char *bootstrap = kafka_mock_bootstrap(mock);
	struct kcat_msg *msgs = NULL;
	size_t got = 0;
	assert_int_equal(kcat_consume(bootstrap, "outbox.user", 1, 20000, &msgs, &got), 0);
	assert_int_equal(got, 1);
	char *published = kafka_e2e_b64(msgs[0].value, msgs[0].len);
	kcat_msgs_free(msgs, got);
	assert_int_equal(kcat_consume(bootstrap, "outbox.user.dlt", 1, 20000, &msgs, &got), 0);
	assert_int_equal(got, 1);
	char *dead_lettered = kafka_e2e_b64(msgs[0].value, msgs[0].len);
	kcat_msgs_free(msgs, got);
	struct {
		struct daemon *d;
		const char *list, *origin, *raw;
	} hops[3] = {
		{&hub, "/v1/deliveries?status=PROCESSED", "published", published},
		{&processor, "/v1/dlq?source=kafka:outbox.user", "received", published},
		{&dlt_processor, "/v1/deliveries?source=kafka:outbox.user.dlt", "received",
		 dead_lettered},
	};
	for (int h = 0; h < 3; h++) {
		page = kafka_e2e_wait_items(hops[h].d, 1, 10000, hops[h].list);
		items = json_object_get(page, "items");
		assert_int_equal(json_array_size(items), 1);
		d = e2e_get(hops[h].d, "/v1/deliveries/%s",
			    json_string_value(json_object_get(json_array_get(items, 0), "id")));
		json_t *v = json_object_get(d, "envelope");
		assert_string_equal(json_string_value(json_object_get(v, "origin")), hops[h].origin);
		assert_string_equal(json_string_value(json_object_get(v, "raw_base64")), hops[h].raw);
		json_t *e = json_object_get(json_object_get(v, "parsed"), "event");
		assert_string_equal(json_string_value(json_object_get(e, "id")), event_id);
		assert_string_equal(json_string_value(json_object_get(e, "type")), "user.created");
		assert_int_equal(json_integer_value(json_object_get(json_object_get(e, "payload"),
								    "user")), 7);
		json_decref(d);
		json_decref(page);
	}
	free(published);
	free(dead_lettered);
	assert_int_equal(daemon_stop(&hub), 0);
	assert_int_equal(daemon_stop(&processor), 0);
	assert_int_equal(daemon_stop(&dlt_processor), 0);
}

static int producer_fatal_counted(void *ctx)
{
	return e2e_metric(ctx, "outboxd_kafka_fatal_errors_total{client=\"producer\"}") >= 1;
}

/* A fatal error of the idempotent producer (the broker answers its first request in
 * flight with OUT_OF_ORDER_SEQUENCE_NUMBER: librdkafka can no longer keep the sequence)
 * is counted, the producer recreated, and every event still reaches the topic: the
 * attempts it failed are retried, no restart needed. */
static void test_fatal_producer_error_recovers(void **state)
{
	(void)state;
	char brokers[256], sub[64];
	assert_int_equal(kafka_mock_command(mock, "topic fatal 1"), 0);
	kafka_e2e_brokers(mock, brokers);
	const char *env[] = {brokers, "OUTBOXD_RETRY_INTERVAL=500ms", "OUTBOXD_MAX_RETRIES=0",
			     NULL};
	assert_int_equal(daemon_start(&hub, env), 0);
	e2e_create_sub(&hub, sub, "{\"name\":\"bus\",\"event_types\":[\"*\"],"
				  "\"endpoint\":\"kafka://fatal\"}");
	char *body = e2e_batch_body(0, 5);
	json_decref(api_call(&hub, "POST", "/v1/events", body, 202));
	free(body);
	struct kcat_msg *msgs = NULL;
	size_t got = 0;
	assert_int_equal(kcat_consume(kafka_mock_bootstrap(mock), "fatal", 5, 20000, &msgs, &got), 0);
	assert_int_equal(got, 5);
	kcat_msgs_free(msgs, got);

	assert_int_equal(kafka_mock_command(mock, "produce-error 45 1"), 0);
	body = e2e_batch_body(5, 10);
	json_decref(api_call(&hub, "POST", "/v1/events", body, 202));
	free(body);
	assert_int_equal(harness_wait(producer_fatal_counted, &hub, 30000), 0);

	/* every event is on the topic (a retried publish may add a copy: at least once) */
	assert_int_equal(kcat_consume(kafka_mock_bootstrap(mock), "fatal", 15, 30000, &msgs, &got), 0);
	int seen[15] = {0};
	for (size_t i = 0; i < got; i++) {
		int n = -1;
		if (sscanf(msgs[i].value, "{\"n\":%d}", &n) == 1 && n >= 0 && n < 15)
			seen[n] = 1;
	}
	for (int i = 0; i < 15; i++)
		assert_int_equal(seen[i], 1);
	kcat_msgs_free(msgs, got);
	assert_true(kafka_e2e_log_has(&hub, "recreated after a fatal error"));
	assert_true(kafka_e2e_wait_readyz(&hub, 200, 10000) >= 0);
	json_t *page = e2e_get(&hub, "/v1/deliveries?status=PROCESSED&limit=100");
	size_t processed = json_array_size(json_object_get(page, "items"));
	json_decref(page);
	for (int i = 0; i < 100 && processed < 15; i++) {
		usleep(100 * 1000);
		page = e2e_get(&hub, "/v1/deliveries?status=PROCESSED&limit=100");
		processed = json_array_size(json_object_get(page, "items"));
		json_decref(page);
	}
	assert_int_equal(processed, 15);
	assert_int_equal(daemon_stop(&hub), 0);
}

/* A dead delivery's publish to its dead-letter topic survives a kill -9: the broker is
 * down when the delivery dies, so the publish waits for its acknowledgement; the
 * processor is killed meanwhile; after the broker's return and a restart the message is
 * on the dead-letter topic, with the event's id. */
static void test_dead_letter_publish_survives_kill9(void **state)
{
	(void)state;
	char brokers[256], url[128];
	const char *id = "0190a0b0-0000-7000-8007-000000000001";
	assert_int_equal(kafka_mock_command(mock, "topic orders 1"), 0);
	assert_int_equal(kafka_mock_command(mock, "topic orders.dlt 1"), 0);
	assert_int_equal(receiver_script(&rcv, "/down", "{\"default\":{\"status\":500}}"), 0);
	snprintf(url, sizeof(url), "%s/down", rcv.url);
	struct env_spec s = {.id = id, .type = "order.paid", .endpoint = url, .payload = "{}",
			     .payload_len = 2};
	kafka_e2e_produce(mock, "orders", &s);
	kafka_e2e_brokers(mock, brokers);
	const char *env[] = {brokers, "OUTBOXD_KAFKA_INTAKE=orders",
			     "OUTBOXD_KAFKA_DEAD_LETTER={topic}.dlt", "OUTBOXD_IMMEDIATE_TRIES=1",
			     "OUTBOXD_MAX_RETRIES=1", "OUTBOXD_RETRY_INTERVAL=2s", NULL};
	assert_int_equal(daemon_start(&processor, env), 0);
	/* the first try failed; the broker goes down before the second, the last */
	assert_int_equal(receiver_wait_count(&rcv, "/down", 1, 30000), 0);
	assert_int_equal(kafka_mock_command(mock, "down 1"), 0);
	assert_int_equal(receiver_wait_count(&rcv, "/down", 2, 30000), 0);
	json_t *page = kafka_e2e_wait_items(&processor, 1, 10000, "/v1/dlq?source=kafka:orders");
	assert_int_equal(json_array_size(json_object_get(page, "items")), 1);
	json_decref(page);
	sleep(1); /* the relay has tried, and waits for the acknowledgement */
	daemon_kill9(&processor);

	assert_int_equal(kafka_mock_command(mock, "up 1"), 0);
	assert_int_equal(daemon_start(&processor, env), 0);
	struct kcat_msg *msgs = NULL;
	size_t got = 0;
	assert_int_equal(kcat_consume(kafka_mock_bootstrap(mock), "orders.dlt", 1, 30000, &msgs,
				      &got), 0);
	assert_true(got >= 1);
	char want[128];
	snprintf(want, sizeof(want), "webhook-id=%s", id);
	assert_non_null(strstr(msgs[0].headers, want));
	assert_non_null(strstr(msgs[0].headers, "outboxd-error-code=500"));
	kcat_msgs_free(msgs, got);
	assert_int_equal(receiver_count(&rcv, "/down"), 2); /* no try after it died */
	assert_int_equal(daemon_stop(&processor), 0);
}

int main(void)
{
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_one_webhook_id_from_hub_to_dead_letter_processor,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_fatal_producer_error_recovers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_letter_publish_survives_kill9, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
