/* test_kafka_registry.c: publishing envelopes with a Schema Registry (kafka_schema_registry,
 * docs/kafka.md "The Schema Registry"), seen from outside.
 *
 * librdkafka's mock cluster over TCP with kcat as the outside consumer, the real daemon,
 * and a Confluent-compatible registry written with Python's http.server
 * (tests/support/schema_registry.py, harness_registry.h) that requires basic auth:
 *
 *  - every message a kafka:// envelope subscription publishes carries, in its 5-byte
 *    Schema Registry header, the id the registry gave (not kafka_schema_id), and the
 *    message index of OutboxEvent in the registered schema, which is the contract's
 *    .proto text; the subject TOPIC-value is registered once for all the messages; the
 *    registry's password is in no log line;
 *  - with the registry stopped, the attempts fail with 503 "schema registry unreachable"
 *    and the subject in their cause, nothing reaches the topic, and once the registry is
 *    back every event is published with its id: none lost;
 *  - with a registry that does not answer, a Kafka attempt ends at its own timeout while
 *    the same event's HTTP delivery is made meanwhile (the registration does not hold the
 *    dispatcher), and the event is published once the registry answers;
 *  - a dead delivery from an intake topic reaches its dead-letter topic with the id the
 *    registry gave that topic's subject. */
#include "kafka_e2e.h"
#include "harness_registry.h"

#define FIRST_ID      41          /* the registry's first id: not kafka_schema_id (7) */
#define REGISTRY_USER "sr-user"
#define REGISTRY_PASS "sr-pass-9f3a"
#define EVENTS        30
#define OUTAGE_EVENTS 12

static struct kafka_mock *mock;
static struct receiver rcv;
static struct daemon dmn;
static struct test_registry reg;

static int setup(void **state)
{
	(void)state;
	kafka_e2e_setup(&mock, &rcv, &dmn, 1);
	assert_int_equal(test_registry_start(&reg, 0, FIRST_ID, REGISTRY_USER ":" REGISTRY_PASS), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	kafka_e2e_teardown(&mock, &rcv, &dmn, 1);
	test_registry_stop(&reg);
	return 0;
}

/* The setting naming reg, its credentials in the URL, into out. */
static void registry_setting(char out[256])
{
	snprintf(out, 256, "OUTBOXD_KAFKA_SCHEMA_REGISTRY=http://" REGISTRY_USER ":" REGISTRY_PASS
		 "@127.0.0.1:%d", reg.port);
}

/* Starts the daemon publishing in the Schema Registry framing with the registry of reg
 * (credentials in its URL), scheduled retries every 500 ms, never exhausted. */
static void start_daemon(void)
{
	char brokers[256], registry[256];
	kafka_e2e_brokers(mock, brokers);
	registry_setting(registry);
	const char *env[] = {brokers, registry, "OUTBOXD_KAFKA_WIRE_FORMAT=confluent",
			     "OUTBOXD_KAFKA_SCHEMA_ID=7", "OUTBOXD_RETRY_INTERVAL=500ms",
			     "OUTBOXD_MAX_RETRIES=0", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
}

/* A kafka:// subscription of every event type, publishing OutboxEvents to topic. */
static void create_envelope_sub(const char *topic)
{
	char sub[64];
	e2e_create_sub(&dmn, sub, "{\"name\":\"%s\",\"event_types\":[\"*\"],"
				  "\"endpoint\":\"kafka://%s\",\"payload_format\":\"envelope\","
				  "\"timeout\":\"10s\"}", topic, topic);
}

/* POSTs events first..first+n-1 ({"n":i}); the first delivery id of each event into dids. */
static void post_events(int first, int n, char dids[][64])
{
	char *body = e2e_batch_body(first, n);
	json_t *r = api_call(&dmn, "POST", "/v1/events", body, 202);
	free(body);
	json_t *ids = json_object_get(r, "ids");
	assert_int_equal(json_array_size(ids), (size_t)n);
	for (int i = 0; i < n; i++)
		assert_int_equal(e2e_deliveries_of(&dmn, json_string_value(json_array_get(ids, (size_t)i)),
						   &dids[i], 1), 1);
	json_decref(r);
}

/* Reads want messages of topic and checks each: magic byte 0, schema id FIRST_ID,
 * message indexes [2] (OutboxEvent, after Event and Auth), then an OutboxEvent of type
 * load.event whose payload is {"n":N} with first <= N < first + n. Every N is seen. */
static void check_published(const char *topic, size_t want, int first, int n)
{
	struct kcat_msg *msgs = NULL;
	size_t got = 0;
	int *seen = calloc((size_t)n, sizeof(*seen));
	assert_non_null(seen);
	assert_int_equal(kcat_consume(kafka_mock_bootstrap(mock), topic, want, 30000, &msgs, &got), 0);
	assert_true(got >= want);
	for (size_t i = 0; i < got; i++) {
		const unsigned char *b = (const unsigned char *)msgs[i].value;
		assert_true(msgs[i].len > 7);
		assert_int_equal(b[0], 0);
		uint32_t id = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
		assert_int_equal(id, FIRST_ID);
		assert_int_equal(b[5], 2);  /* zig-zag: one index */
		assert_int_equal(b[6], 4);  /* zig-zag: index 2 */
		Outboxd__V1__OutboxEvent *m =
			outboxd__v1__outbox_event__unpack(NULL, msgs[i].len - 7, b + 7);
		assert_non_null(m);
		assert_non_null(m->event);
		assert_string_equal(m->event->type, "load.event");
		int v = -1;
		char payload[64];
		snprintf(payload, sizeof(payload), "%.*s", (int)m->event->payload.len,
			 (const char *)m->event->payload.data);
		assert_int_equal(sscanf(payload, "{\"n\":%d}", &v), 1);
		assert_true(v >= first && v < first + n);
		seen[v - first] = 1;
		outboxd__v1__outbox_event__free_unpacked(m, NULL);
	}
	for (int i = 0; i < n; i++)
		assert_int_equal(seen[i], 1);
	kcat_msgs_free(msgs, got);
	free(seen);
}

static void test_registered_id_in_every_message(void **state)
{
	(void)state;
	char dids[EVENTS][64];
	assert_int_equal(kafka_mock_command(mock, "topic registered 1"), 0);
	start_daemon();
	create_envelope_sub("registered");
	post_events(0, EVENTS / 2, dids);
	for (int i = 0; i < EVENTS / 2; i++)
		json_decref(e2e_wait_status(&dmn, dids[i], "PROCESSED", 30000));
	post_events(EVENTS / 2, EVENTS / 2, dids + EVENTS / 2);
	for (int i = EVENTS / 2; i < EVENTS; i++)
		json_decref(e2e_wait_status(&dmn, dids[i], "PROCESSED", 30000));
	check_published("registered", EVENTS, 0, EVENTS);

	/* one registration for every message of the subject */
	assert_int_equal(test_registry_registrations(&reg, "registered-value"), 1);

	/* what was registered is the contract's .proto, as text */
	struct http_resp r = {0};
	char url[192];
	const char *auth[] = {"Authorization: Basic c3ItdXNlcjpzci1wYXNzLTlmM2E=", NULL};
	snprintf(url, sizeof(url), "%s/schemas/ids/%d", reg.url, FIRST_ID);
	struct http_req req = {.method = "GET", .url = url, .headers = auth};
	http_do_ex(&req, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(json_string_value(json_object_get(r.json, "schemaType")), "PROTOBUF");
	const char *schema = json_string_value(json_object_get(r.json, "schema"));
	assert_non_null(schema);
	assert_non_null(strstr(schema, "package outboxd.v1;"));
	assert_non_null(strstr(schema, "message OutboxEvent {"));
	http_resp_free(&r);

	/* the registry's id is in the log, its password nowhere */
	assert_true(kafka_e2e_log_has(&dmn, "subject registered-value has schema id 41"));
	assert_false(kafka_e2e_log_has(&dmn, REGISTRY_PASS));
}

static void test_registry_down_then_back(void **state)
{
	(void)state;
	char dids[OUTAGE_EVENTS][64];
	assert_int_equal(kafka_mock_command(mock, "topic outage 1"), 0);
	test_registry_halt(&reg);
	start_daemon();
	create_envelope_sub("outage");
	post_events(0, OUTAGE_EVENTS, dids);

	/* while the registry is down, attempts fail with its message and take their retries */
	json_t *d = e2e_wait_status(&dmn, dids[0], "FAILED", 20000);
	json_t *err = json_object_get(d, "last_error");
	assert_int_equal(json_integer_value(json_object_get(err, "code")), 503);
	assert_string_equal(json_string_value(json_object_get(err, "message")),
			    "schema registry unreachable");
	assert_non_null(json_object_get(d, "next_attempt_at"));
	json_decref(d);
	/* wait for a retry: the history holds more than one attempt, each with the cause */
	json_t *att = NULL;
	for (int waited = 0; waited < 20000; waited += 100) {
		d = e2e_get(&dmn, "/v1/deliveries/%s", dids[0]);
		att = json_object_get(d, "attempts");
		if (json_array_size(att) >= 2)
			break;
		json_decref(d);
		d = NULL;
		usleep(100 * 1000);
	}
	assert_non_null(d);
	for (size_t i = 0; i < json_array_size(att); i++) {
		json_t *a = json_array_get(att, i);
		assert_int_equal(json_integer_value(json_object_get(a, "code")), 503);
		assert_string_equal(json_string_value(json_object_get(a, "message")),
				    "schema registry unreachable");
		const char *cause = json_string_value(json_object_get(a, "cause"));
		assert_non_null(cause);
		assert_non_null(strstr(cause, "outage-value"));
		assert_null(strstr(cause, REGISTRY_PASS));
	}
	json_decref(d);
	/* nothing was published without an id */
	struct kcat_msg *msgs = NULL;
	size_t got = 0;
	assert_int_equal(kcat_consume(kafka_mock_bootstrap(mock), "outage", 1, 2000, &msgs, &got), 0);
	assert_int_equal(got, 0);
	kcat_msgs_free(msgs, got);

	/* the registry is back: every event is published with its id, none lost */
	assert_int_equal(test_registry_restart(&reg), 0);
	for (int i = 0; i < OUTAGE_EVENTS; i++)
		json_decref(e2e_wait_status(&dmn, dids[i], "PROCESSED", 30000));
	check_published("outage", OUTAGE_EVENTS, 0, OUTAGE_EVENTS);
	assert_int_equal(test_registry_registrations(&reg, "outage-value"), 1);
	assert_false(kafka_e2e_log_has(&dmn, REGISTRY_PASS));
}

static void test_registry_not_answering(void **state)
{
	(void)state;
	char sub[64], did_kafka[1][64], did_http[64];
	assert_int_equal(kafka_mock_command(mock, "topic slow 1"), 0);
	assert_int_equal(test_registry_hold(&reg, 1), 0);
	start_daemon();
	e2e_create_sub(&dmn, sub, "{\"name\":\"slow\",\"event_types\":[\"load.*\"],"
				  "\"endpoint\":\"kafka://slow\",\"payload_format\":\"envelope\","
				  "\"timeout\":\"1s\",\"retry\":{\"timeout\":\"1s\"}}");
	e2e_create_sub(&dmn, sub, "{\"name\":\"hook\",\"event_types\":[\"load.*\"],"
				  "\"endpoint\":\"%s/hook\"}", rcv.url);
	char *body = e2e_batch_body(0, 1);
	json_t *r = api_call(&dmn, "POST", "/v1/events", body, 202);
	free(body);
	char dids[2][64];
	assert_int_equal(e2e_deliveries_of(&dmn, json_string_value(json_array_get(json_object_get(r, "ids"), 0)),
					   dids, 2), 2);
	json_decref(r);
	json_t *one = e2e_get(&dmn, "/v1/deliveries/%s", dids[0]);
	int first_is_kafka = strcmp(json_string_value(json_object_get(one, "subscription_id")), sub) != 0;
	json_decref(one);
	snprintf(did_kafka[0], 64, "%s", dids[first_is_kafka ? 0 : 1]);
	snprintf(did_http, sizeof(did_http), "%s", dids[first_is_kafka ? 1 : 0]);

	/* the HTTP delivery is made while the registration is held */
	json_decref(e2e_wait_status(&dmn, did_http, "PROCESSED", 20000));
	/* the Kafka attempt ended at its timeout, waiting for the schema id */
	json_t *d = e2e_wait_status(&dmn, did_kafka[0], "FAILED", 20000);
	json_t *a = json_array_get(json_object_get(d, "attempts"), 0);
	assert_int_equal(json_integer_value(json_object_get(a, "code")), 503);
	assert_string_equal(json_string_value(json_object_get(a, "message")),
			    "schema registry unreachable");
	assert_non_null(strstr(json_string_value(json_object_get(a, "cause")),
			       "no schema id from the registry within the attempt's timeout"));
	json_decref(d);

	assert_int_equal(test_registry_hold(&reg, 0), 0);
	json_decref(e2e_wait_status(&dmn, did_kafka[0], "PROCESSED", 30000));
	check_published("slow", 1, 0, 1);
}

/* A delivery from an intake topic that dies is published to its dead-letter topic in the
 * same framing, with the id the registry gave that topic's subject (TOPIC-value), not
 * kafka_schema_id: a dead-letter processor reading it with the registry decodes it. */
static void test_dead_letter_relay_uses_the_registry(void **state)
{
	(void)state;
	char brokers[256], registry[256], url[128];
	size_t len = 0;
	assert_int_equal(receiver_script(&rcv, "/gone", "{\"default\":{\"status\":500}}"), 0);
	assert_int_equal(kafka_mock_command(mock, "topic rjobs 1"), 0);
	assert_int_equal(kafka_mock_command(mock, "topic rjobs.dlt 1"), 0);
	snprintf(url, sizeof(url), "%s/gone", rcv.url);
	struct env_spec spec = {.id = "0190a0b0-0000-7000-8009-000000000001", .type = "job.done",
				.endpoint = url, .payload = "{\"job\":1}", .payload_len = 9};
	void *v = kafka_e2e_encode(&spec, &len);
	assert_int_equal(kcat_produce(kafka_mock_bootstrap(mock), "rjobs", NULL, v, len, NULL), 0);
	free(v);

	kafka_e2e_brokers(mock, brokers);
	registry_setting(registry);
	const char *env[] = {brokers, registry, "OUTBOXD_KAFKA_WIRE_FORMAT=confluent",
			     "OUTBOXD_KAFKA_SCHEMA_ID=7", "OUTBOXD_KAFKA_INTAKE=rjobs",
			     "OUTBOXD_KAFKA_DEAD_LETTER={topic}.dlt", "OUTBOXD_IMMEDIATE_TRIES=1",
			     "OUTBOXD_MAX_RETRIES=1", "OUTBOXD_RETRY_INTERVAL=500ms", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);

	struct kcat_msg *msgs = NULL;
	size_t got = 0;
	assert_int_equal(kcat_consume(kafka_mock_bootstrap(mock), "rjobs.dlt", 1, 30000, &msgs,
				      &got), 0);
	assert_int_equal(got, 1);
	const unsigned char *b = (const unsigned char *)msgs[0].value;
	assert_true(msgs[0].len > 7);
	assert_int_equal(b[0], 0);
	uint32_t id = (uint32_t)b[1] << 24 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 8 | b[4];
	assert_int_equal(id, FIRST_ID); /* the registry's, not 7 */
	assert_int_equal(b[5], 2);  /* zig-zag: one index */
	assert_int_equal(b[6], 4);  /* zig-zag: index 2, OutboxEvent */
	Outboxd__V1__OutboxEvent *m = outboxd__v1__outbox_event__unpack(NULL, msgs[0].len - 7, b + 7);
	assert_non_null(m);
	assert_string_equal(m->event->type, "job.done");
	outboxd__v1__outbox_event__free_unpacked(m, NULL);
	assert_non_null(strstr(msgs[0].headers, "outboxd-error-code=500"));
	kcat_msgs_free(msgs, got);
	assert_int_equal(test_registry_registrations(&reg, "rjobs.dlt-value"), 1);
	assert_false(kafka_e2e_log_has(&dmn, REGISTRY_PASS));
}

/* The registry's settings are checked at start. */
static void test_bad_settings(void **state)
{
	(void)state;
	char brokers[256];
	kafka_e2e_brokers(mock, brokers);
	const char *plain[] = {brokers, "OUTBOXD_KAFKA_SCHEMA_REGISTRY=http://127.0.0.1:1", NULL};
	assert_int_equal(daemon_start(&dmn, plain), -1);
	assert_true(kafka_e2e_log_has(&dmn, "kafka_schema_registry needs kafka_wire_format confluent"));
	daemon_cleanup(&dmn);
	const char *scheme[] = {brokers, "OUTBOXD_KAFKA_WIRE_FORMAT=confluent",
				"OUTBOXD_KAFKA_SCHEMA_REGISTRY=ftp://127.0.0.1:1", NULL};
	assert_int_equal(daemon_start(&dmn, scheme), -1);
	assert_true(kafka_e2e_log_has(&dmn, "kafka_schema_registry must be an http:// or https:// URL"));
}

int main(void)
{
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_registered_id_in_every_message, setup, teardown),
		cmocka_unit_test_setup_teardown(test_registry_down_then_back, setup, teardown),
		cmocka_unit_test_setup_teardown(test_registry_not_answering, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_letter_relay_uses_the_registry, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_bad_settings, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
