/* test_kafka.c: outboxd's three Kafka roles, seen from outside (docs/kafka.md).
 *
 * A real Kafka protocol peer: librdkafka's mock cluster served over TCP by
 * tests/support/kafka_mock.c, with kcat as the outside producer and consumer, the real
 * daemon and the test receiver as subscriber and OAuth2 token endpoint. Envelopes are
 * encoded with protobuf-c's code (kafka_e2e.h), not with outboxd's own encoder, so both
 * sides of the contract are checked.
 *
 *  - Outbox Processor: 40 envelopes (half in the Schema Registry wire format) with basic
 *    and OAuth2 auth, JSON and binary payloads, delivered byte for byte; a poison message
 *    is a dead delivery with its raw bytes while its partition keeps flowing.
 *  - Event Hub relay: a kafka:// subscription publishes 30 events that kcat reads back
 *    with their keys and headers.
 *  - kill -9 while consuming 300 envelopes: after a restart (the same static member of
 *    its group, its instance id kept in the data directory) consumption resumes and
 *    every one is delivered, and the 20 produced after the restart too.
 *  - a broker down mid-publish: failed attempts, retries, recovery, nothing lost.
 *  - the DLT round trip: exhausted -> DLT topic -> dlt intake -> scheduled retry ->
 *    PROCESSED.
 *  - bad input: an unknown intake format stops the start; an unreachable broker leaves
 *    outboxd up but not ready; oversized payloads, unknown auth types, an event.id that
 *    cannot be a webhook-id, and a token, header or event.type with CR/LF in it are dead
 *    deliveries with their reason, and the partition goes on (the next envelope's
 *    requests carry its event.id as webhook-id). */
#include "kafka_e2e.h"
#include "harness_pg.h"

#include <libpq-fe.h>

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

/* ---- Outbox Processor ---------------------------------------------------------------------- */

#define ENVELOPES 40

static void test_envelopes_delivered_with_their_auth(void **state)
{
	(void)state;
	char brokers[256], basic_url[128], oauth_url[128], token_url[128];
	void *values[ENVELOPES + 1];
	size_t lens[ENVELOPES + 1];
	unsigned char binary[256];
	char payloads[ENVELOPES][64], ids[ENVELOPES][40];

	for (int i = 0; i < 256; i++)
		binary[i] = (unsigned char)i;
	assert_int_equal(receiver_script(&rcv, "/token",
					 "{\"default\":{\"status\":200,\"headers\":{\"Content-Type\":"
					 "\"application/json\"},\"body\":\"{\\\"access_token\\\":"
					 "\\\"tok-kafka\\\",\\\"token_type\\\":\\\"Bearer\\\","
					 "\\\"expires_in\\\":3600}\"}}"), 0);
	assert_int_equal(kafka_mock_command(mock, "topic orders 1"), 0);
	snprintf(basic_url, sizeof(basic_url), "%s/basic", rcv.url);
	snprintf(oauth_url, sizeof(oauth_url), "%s/oauth", rcv.url);
	snprintf(token_url, sizeof(token_url), "%s/token", rcv.url);

	/* 40 envelopes on one partition: even ones basic, odd ones OAuth2; every fourth
	 * binary; half in the Schema Registry wire format. A poison message sits between
	 * envelope 19 and 20. */
	size_t k = 0;
	for (int i = 0; i < ENVELOPES; i++) {
		struct env_spec s = {0};
		snprintf(ids[i], sizeof(ids[i]), "0190a0b0-0000-7000-8000-%012d", i);
		snprintf(payloads[i], sizeof(payloads[i]), "{\"order\":%d,\"note\":\"caf\\u00e9\"}", i);
		s.id = ids[i];
		s.type = "order.created";
		s.binary = i % 4 == 3;
		s.payload = s.binary ? (const void *)binary : payloads[i];
		s.payload_len = s.binary ? sizeof(binary) : strlen(payloads[i]);
		s.confluent = i % 2;
		if (i % 2 == 0) {
			s.endpoint = basic_url;
			s.auth = OUTBOXD__V1__AUTH_TYPE__BASIC_AUTH;
			s.user = "alice";
			s.pass = "s3cret-basic";
		} else {
			s.endpoint = oauth_url;
			s.auth = OUTBOXD__V1__AUTH_TYPE__OAUTH;
			s.token_url = token_url;
			s.client_id = "outboxd";
			s.client_secret = "s3cret-client";
		}
		if (i == 20) {
			values[k] = strdup("this is not protobuf \x01\x02");
			lens[k] = strlen(values[k]);
			k++;
		}
		values[k] = kafka_e2e_encode(&s, &lens[k]);
		k++;
	}
	assert_int_equal(kcat_produce_many(kafka_mock_bootstrap(mock), "orders", k,
					   (const void *const *)values, lens, NULL), 0);

	kafka_e2e_brokers(mock, brokers);
	const char *env[] = {brokers, "OUTBOXD_KAFKA_INTAKE=orders", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	assert_int_equal(receiver_wait_count(&rcv, "/basic", ENVELOPES / 2, 30000), 0);
	assert_int_equal(receiver_wait_count(&rcv, "/oauth", ENVELOPES / 2, 30000), 0);

	/* Every body byte for byte, with its own auth and content type. Deliveries run
	 * concurrently, so requests are matched to envelopes by their webhook-id's event and
	 * body, not by arrival order. */
	json_t *basic = receiver_requests(&rcv, "/basic"), *oauth = receiver_requests(&rcv, "/oauth");
	char *expect_basic = kafka_e2e_b64("alice:s3cret-basic", 18);
	char want_basic[128];
	int matched[ENVELOPES] = {0};
	snprintf(want_basic, sizeof(want_basic), "Basic %s", expect_basic);
	assert_int_equal(json_array_size(basic), ENVELOPES / 2);
	assert_int_equal(json_array_size(oauth), ENVELOPES / 2);
	for (int list_no = 0; list_no < 2; list_no++) {
		json_t *list = list_no == 0 ? basic : oauth;
		for (size_t r = 0; r < json_array_size(list); r++) {
			json_t *req = json_array_get(list, r);
			const char *got = json_string_value(json_object_get(req, "body_base64"));
			assert_string_equal(kafka_e2e_header(req, "authorization"),
					    list_no == 0 ? want_basic : "Bearer tok-kafka");
			assert_string_equal(kafka_e2e_header(req, "x-envelope"), "yes");
			int hit = -1;
			for (int i = list_no; i < ENVELOPES && hit < 0; i += 2) {
				int bin = i % 4 == 3;
				char *want = bin ? kafka_e2e_b64(binary, sizeof(binary))
						 : kafka_e2e_b64(payloads[i], strlen(payloads[i]));
				if (!matched[i] && strcmp(got, want) == 0)
					hit = i;
				free(want);
			}
			assert_true(hit >= 0); /* a body that no envelope of this auth carried */
			matched[hit] = 1;
			assert_string_equal(kafka_e2e_header(req, "content-type"), hit % 4 == 3
					    ? "application/octet-stream" : "application/json");
		}
	}
	free(expect_basic);
	json_decref(basic);
	json_decref(oauth);
	/* one token for all the OAuth2 envelopes (same target: same cache) */
	assert_int_equal(receiver_count(&rcv, "/token"), 1);
	/* The envelopes' credentials are kept in the subscriptions derived from them, sealed:
	 * not in the database's bytes (SQLite), not in a row (PostgreSQL). */
	const char *creds[] = {"s3cret-basic", "s3cret-client"};
	for (int i = 0; i < 2; i++) {
		if (harness_pg_wanted()) {
			PGconn *c = PQconnectdb(dmn.db);
			const char *params[] = {creds[i]};
			PGresult *r = PQexecParams(c, "SELECT count(*) FROM outboxd.subscriptions WHERE"
						   " config NOT LIKE 'obx1:%' OR strpos(config, $1) > 0",
						   1, NULL, params, NULL, NULL, 0);
			assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
			assert_string_equal(PQgetvalue(r, 0, 0), "0");
			PQclear(r);
			PQfinish(c);
		} else {
			char path[600];
			snprintf(path, sizeof(path), "%s", e2e_db_path(&dmn));
			assert_false(e2e_file_contains(path, creds[i]));
			snprintf(path, sizeof(path), "%s-wal", e2e_db_path(&dmn));
			assert_false(e2e_file_contains(path, creds[i]));
		}
	}

	/* The poison message: a dead delivery, 422 undecodable, the raw bytes kept. */
	json_t *dlq = e2e_get(&dmn, "/v1/dlq?source=kafka:orders");
	json_t *items = json_object_get(dlq, "items");
	assert_int_equal(json_array_size(items), 1);
	json_t *dead = json_array_get(items, 0);
	json_t *err = json_object_get(dead, "last_error");
	assert_int_equal(json_integer_value(json_object_get(err, "code")), 422);
	assert_string_equal(json_string_value(json_object_get(err, "message")), "undecodable");
	assert_non_null(json_string_value(json_object_get(err, "cause")));
	json_t *ev = e2e_get(&dmn, "/v1/events/%s",
			     json_string_value(json_object_get(dead, "event_id")));
	char *raw = kafka_e2e_b64("this is not protobuf \x01\x02", 23);
	assert_string_equal(json_string_value(json_object_get(ev, "payload_base64")), raw);
	free(raw);
	json_decref(ev);
	json_decref(dlq);

	/* Credentials never come back in clear: the derived subscriptions are masked. */
	json_t *subs = e2e_get(&dmn, "/v1/subscriptions");
	char *text = json_dumps(subs, 0);
	assert_null(strstr(text, "s3cret-basic"));
	assert_null(strstr(text, "s3cret-client"));
	assert_non_null(strstr(text, "kafka_envelope"));
	free(text);
	json_decref(subs);
	for (size_t i = 0; i < k; i++)
		free(values[i]);
}

/* ---- Event Hub relay ---------------------------------------------------------------------- */

#define PUBLISHED 30

static void test_subscription_publishes_to_topic(void **state)
{
	(void)state;
	char brokers[256], sub[64];
	kafka_e2e_brokers(mock, brokers);
	const char *env[] = {brokers, NULL};
	assert_int_equal(kafka_mock_command(mock, "topic relay 3"), 0);
	assert_int_equal(daemon_start(&dmn, env), 0);
	/* a timeout well above the broker's ack on a busy machine: this test is about what is
	 * published (an attempt that times out may still publish: a second copy) */
	e2e_create_sub(&dmn, sub, "{\"name\":\"relay\",\"event_types\":[\"user.*\"],"
				  "\"endpoint\":\"kafka://relay\",\"timeout\":\"10s\","
				  "\"headers\":{\"x-team\":\"growth\"}}");
	char *body = malloc(PUBLISHED * 128);
	size_t off = (size_t)sprintf(body, "{\"events\":[");
	for (int i = 0; i < PUBLISHED; i++)
		off += (size_t)sprintf(body + off, "%s{\"event_type\":\"user.created\",\"partition_key\":"
					"\"user-%d\",\"payload\":{\"i\":%d}}", i ? "," : "", i % 5, i);
	sprintf(body + off, "]}");
	json_t *r = api_call(&dmn, "POST", "/v1/events", body, 202);
	free(body);
	json_t *ids = json_object_get(r, "ids");
	assert_int_equal(json_array_size(ids), PUBLISHED);

	/* PROCESSED on the broker's acknowledgement */
	char dids[1][64];
	assert_int_equal(e2e_deliveries_of(&dmn, json_string_value(json_array_get(ids, 0)), dids, 1), 1);
	json_t *d = e2e_wait_status(&dmn, dids[0], "PROCESSED", 20000);
	json_t *att = json_array_get(json_object_get(d, "attempts"), 0);
	assert_int_equal(json_integer_value(json_object_get(att, "code")), 200);
	assert_non_null(strstr(json_string_value(json_object_get(att, "message")), "acknowledged"));
	json_decref(d);

	struct kcat_msg *msgs = NULL;
	size_t got = 0;
	assert_int_equal(kcat_consume(kafka_mock_bootstrap(mock), "relay", PUBLISHED, 20000, &msgs, &got), 0);
	assert_int_equal(got, PUBLISHED);
	int seen[PUBLISHED] = {0};
	for (size_t i = 0; i < got; i++) {
		int n = -1;
		char want_key[32];
		assert_int_equal(sscanf((const char *)msgs[i].value, "{\"i\":%d}", &n), 1);
		assert_true(n >= 0 && n < PUBLISHED);
		seen[n]++;
		snprintf(want_key, sizeof(want_key), "user-%d", n % 5);
		assert_string_equal(msgs[i].key, want_key);
		const char *wid = json_string_value(json_array_get(ids, (size_t)n));
		assert_non_null(strstr(msgs[i].headers, wid));            /* webhook-id */
		assert_non_null(strstr(msgs[i].headers, "outboxd-event-type=user.created"));
		assert_non_null(strstr(msgs[i].headers, "traceparent="));
		assert_non_null(strstr(msgs[i].headers, "x-team=growth"));
	}
	for (int i = 0; i < PUBLISHED; i++)
		assert_int_equal(seen[i], 1);
	kcat_msgs_free(msgs, got);
	json_decref(r);
}

/* ---- kill -9 while consuming ----------------------------------------------------------------- */

#define BULK 300
#define AFTER 20

/* The first line of the file at path into out ("" when none). */
static void read_line(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "r");
	out[0] = '\0';
	if (f && fgets(out, (int)len, f))
		out[strcspn(out, "\r\n")] = '\0';
	if (f)
		fclose(f);
}

static void test_kill9_while_consuming(void **state)
{
	(void)state;
	char brokers[256], url[128];
	void *values[BULK];
	size_t lens[BULK];
	char payload[BULK][32], ids[BULK][40];

	assert_int_equal(kafka_mock_command(mock, "topic bulk 3"), 0);
	assert_int_equal(receiver_script(&rcv, "/bulk",
					 "{\"default\":{\"status\":200,\"delay_ms\":20}}"), 0);
	snprintf(url, sizeof(url), "%s/bulk", rcv.url);
	for (int i = 0; i < BULK; i++) {
		struct env_spec s = {0};
		snprintf(ids[i], sizeof(ids[i]), "0190a0b0-0000-7000-8001-%012d", i);
		snprintf(payload[i], sizeof(payload[i]), "{\"bulk\":%d}", i);
		s.id = ids[i];
		s.type = "bulk.item";
		s.endpoint = url;
		s.payload = payload[i];
		s.payload_len = strlen(payload[i]);
		values[i] = kafka_e2e_encode(&s, &lens[i]);
	}
	assert_int_equal(kcat_produce_many(kafka_mock_bootstrap(mock), "bulk", BULK,
					   (const void *const *)values, lens, NULL), 0);
	kafka_e2e_brokers(mock, brokers);
	/* outboxd's consumer settings as they come: the restarted instance must get its
	 * partitions back without the test shortening the group's session */
	const char *env[] = {brokers, "OUTBOXD_KAFKA_INTAKE=bulk", "OUTBOXD_MAX_IN_FLIGHT=16",
			     "OUTBOXD_REAP_INTERVAL=500ms",
			     harness_pg_wanted() ? "OUTBOXD_LEASE=3s" : NULL, NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	char instance_path[512], instance[128] = "", again[128] = "";
	snprintf(instance_path, sizeof(instance_path), "%s/instance.id", dmn.dir);
	read_line(instance_path, instance, sizeof(instance));
	assert_non_null(strstr(instance, "outboxd-"));
	assert_int_equal(receiver_wait_count(&rcv, "/bulk", 30, 20000), 0);
	daemon_kill9(&dmn);
	long at_kill = receiver_count(&rcv, "/bulk");
	assert_true(at_kill < BULK);
	assert_int_equal(daemon_start(&dmn, env), 0);
	int64_t restarted = harness_now_ms();
	read_line(instance_path, again, sizeof(again));
	assert_string_equal(again, instance); /* the same static member of the group */

	/* Consumption resumes: messages produced after the restart arrive. A generous
	 * deadline (the target is 10 s; librdkafka's defaults took about 100 s). */
	for (int i = 0; i < AFTER; i++) {
		struct env_spec s = {.type = "bulk.after", .endpoint = url};
		snprintf(ids[i], sizeof(ids[i]), "0190a0b0-0000-7000-8011-%012d", i);
		s.id = ids[i];
		s.payload = "{}";
		s.payload_len = 2;
		free(values[i]);
		values[i] = kafka_e2e_encode(&s, &lens[i]);
	}
	assert_int_equal(kcat_produce_many(kafka_mock_bootstrap(mock), "bulk", AFTER,
					   (const void *const *)values, lens, NULL), 0);
	long unique = 0;
	int64_t resumed = 0;
	for (int i = 0; i < 600 && unique < BULK + AFTER; i++) {
		json_t *st = receiver_stats(&rcv, "/bulk");
		unique = (long)json_integer_value(json_object_get(st, "unique_ids"));
		json_decref(st);
		json_t *reqs = resumed ? NULL : receiver_requests(&rcv, "/bulk");
		for (size_t k = 0; reqs && k < json_array_size(reqs) && !resumed; k++)
			if (strstr(json_string_value(json_object_get(json_array_get(reqs, k),
								     "body")), "{}"))
				resumed = harness_now_ms();
		json_decref(reqs);
		if (unique < BULK + AFTER)
			usleep(100 * 1000);
	}
	assert_int_equal(unique, BULK + AFTER);
	/* each envelope is one event, however often it was read */
	json_t *page = e2e_get(&dmn, "/v1/deliveries?source=kafka:bulk&limit=1000");
	assert_int_equal(json_array_size(json_object_get(page, "items")), BULK + AFTER);
	json_decref(page);
	fprintf(stderr, "kill -9 while consuming: %ld delivered before the kill; a message "
		"produced after the restart delivered %lld ms after it\n", at_kill,
		(long long)(resumed - restarted));
	for (int i = 0; i < BULK; i++)
		free(values[i]);
}

/* ---- a broker down mid-publish ----------------------------------------------------------- */

#define OUTAGE 20

static void test_broker_down_mid_publish(void **state)
{
	(void)state;
	char brokers[256], sub[64];
	kafka_e2e_brokers(mock, brokers);
	/* librdkafka keeps a message up to message.timeout.ms (30 s): each attempt still
	 * ends at the subscription's timeout, 1 s for the immediate tries */
	const char *env[] = {brokers, "OUTBOXD_RETRY_INTERVAL=500ms", "OUTBOXD_MAX_RETRIES=0",
			     NULL};
	assert_int_equal(kafka_mock_command(mock, "topic outage 1"), 0);
	assert_int_equal(daemon_start(&dmn, env), 0);
	e2e_create_sub(&dmn, sub, "{\"name\":\"outage\",\"event_types\":[\"*\"],"
				  "\"endpoint\":\"kafka://outage\"}");
	char *body = e2e_batch_body(0, OUTAGE / 2);
	json_t *r = api_call(&dmn, "POST", "/v1/events", body, 202);
	free(body);
	json_decref(r);
	assert_int_equal(kafka_mock_command(mock, "down 1"), 0);
	body = e2e_batch_body(OUTAGE / 2, OUTAGE / 2);
	r = api_call(&dmn, "POST", "/v1/events", body, 202);
	free(body);
	char dids[1][64];
	assert_int_equal(e2e_deliveries_of(&dmn, json_string_value(json_array_get(json_object_get(r, "ids"), 0)), dids, 1), 1);
	json_decref(r);
	/* while it is down the attempts fail and are retried */
	json_t *d = e2e_wait_status(&dmn, dids[0], "FAILED", 20000);
	json_t *err = json_object_get(d, "last_error");
	long code = (long)json_integer_value(json_object_get(err, "code"));
	assert_true(code == 503 || code == 504);
	assert_non_null(json_string_value(json_object_get(err, "message")));
	assert_non_null(json_object_get(d, "next_attempt_at"));
	json_decref(d);
	/* an attempt with no acknowledgement ends at its timeout, recorded as 504 */
	d = e2e_get(&dmn, "/v1/deliveries/%s", dids[0]);
	json_t *att = json_object_get(d, "attempts");
	int timed_out = 0;
	for (size_t i = 0; i < json_array_size(att); i++) {
		json_t *a = json_array_get(att, i);
		if (json_integer_value(json_object_get(a, "code")) != 504)
			continue;
		timed_out = 1;
		assert_non_null(strstr(json_string_value(json_object_get(a, "cause")),
				       "within the attempt's timeout"));
		assert_true(json_integer_value(json_object_get(a, "duration_ms")) < 10000);
	}
	assert_true(timed_out);
	json_decref(d);

	assert_int_equal(kafka_mock_command(mock, "up 1"), 0);
	d = e2e_wait_status(&dmn, dids[0], "PROCESSED", 30000);
	json_decref(d);
	struct kcat_msg *msgs = NULL;
	size_t got = 0;
	/* every event is on the topic (a retried send may add a copy: at least once) */
	assert_int_equal(kcat_consume(kafka_mock_bootstrap(mock), "outage", OUTAGE, 30000, &msgs, &got), 0);
	assert_true(got >= OUTAGE);
	int seen[OUTAGE] = {0};
	for (size_t i = 0; i < got; i++) {
		int n = -1;
		if (sscanf((const char *)msgs[i].value, "{\"n\":%d}", &n) == 1 && n >= 0 && n < OUTAGE)
			seen[n] = 1;
	}
	for (int i = 0; i < OUTAGE; i++)
		assert_int_equal(seen[i], 1);
	kcat_msgs_free(msgs, got);
}

/* ---- the DLT round trip ----------------------------------------------------------------------- */

static void test_dead_letter_topic_round_trip(void **state)
{
	(void)state;
	char brokers[256], url[128];
	size_t len = 0;
	/* the subscriber fails twice (the immediate try and the one scheduled retry), then
	 * recovers: by then the delivery went to jobs.dlt */
	assert_int_equal(receiver_script(&rcv, "/flaky",
					 "{\"responses\":[{\"status\":500},{\"status\":500}],"
					 "\"default\":{\"status\":200}}"), 0);
	assert_int_equal(kafka_mock_command(mock, "topic jobs 1"), 0);
	assert_int_equal(kafka_mock_command(mock, "topic jobs.dlt 1"), 0);
	snprintf(url, sizeof(url), "%s/flaky", rcv.url);
	struct env_spec s = {.id = "0190a0b0-0000-7000-8002-000000000001", .type = "job.done",
			     .endpoint = url, .payload = "{\"job\":1}", .payload_len = 9,
			     .auth = OUTBOXD__V1__AUTH_TYPE__BASIC_AUTH, .user = "u", .pass = "dlt-pass"};
	void *v = kafka_e2e_encode(&s, &len);
	assert_int_equal(kcat_produce(kafka_mock_bootstrap(mock), "jobs", NULL, v, len, NULL), 0);
	free(v);

	kafka_e2e_brokers(mock, brokers);
	const char *env[] = {brokers, "OUTBOXD_KAFKA_INTAKE=jobs,jobs.dlt:dlt",
			     "OUTBOXD_KAFKA_DEAD_LETTER={topic}.dlt", "OUTBOXD_IMMEDIATE_TRIES=1",
			     "OUTBOXD_MAX_RETRIES=1", "OUTBOXD_RETRY_INTERVAL=500ms", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);

	/* the first delivery is exhausted: dead in outboxd's DLQ */
	json_t *page = kafka_e2e_wait_items(&dmn, 1, 20000, "/v1/dlq?source=kafka:jobs");
	assert_int_equal(json_array_size(json_object_get(page, "items")), 1);
	json_decref(page);

	/* ... published to jobs.dlt with the last error in headers ... */
	struct kcat_msg *msgs = NULL;
	size_t got = 0;
	assert_int_equal(kcat_consume(kafka_mock_bootstrap(mock), "jobs.dlt", 1, 20000, &msgs, &got), 0);
	assert_int_equal(got, 1);
	assert_non_null(strstr(msgs[0].headers, "outboxd-error-code=500"));
	kcat_msgs_free(msgs, got);

	/* ... consumed by the dlt intake, retried on the schedule, and PROCESSED */
	json_t *dl = kafka_e2e_wait_items(&dmn, 1, 20000,
					  "/v1/deliveries?source=kafka:jobs.dlt&status=PROCESSED");
	assert_int_equal(json_array_size(json_object_get(dl, "items")), 1);
	const char *id = json_string_value(json_object_get(json_array_get(json_object_get(dl, "items"), 0), "id"));
	json_t *d = e2e_get(&dmn, "/v1/deliveries/%s", id);
	json_t *att = json_array_get(json_object_get(d, "attempts"), 0);
	assert_string_equal(json_string_value(json_object_get(att, "kind")), "scheduled");
	assert_int_equal(json_integer_value(json_object_get(att, "code")), 200);
	json_decref(d);
	json_decref(dl);
	/* the envelope's own auth went along all the way */
	json_t *reqs = receiver_requests(&rcv, "/flaky");
	assert_int_equal(json_array_size(reqs), 3);
	char *basic = kafka_e2e_b64("u:dlt-pass", 10), want[64];
	snprintf(want, sizeof(want), "Basic %s", basic);
	assert_string_equal(kafka_e2e_header(json_array_get(reqs, 2), "authorization"), want);
	free(basic);
	json_decref(reqs);
}

/* ---- bad settings, an unreachable broker, oversized and foreign messages ------------------ */

static void test_bad_input(void **state)
{
	(void)state;
	char brokers[256], url[128], log[512];
	/* an unknown intake format stops the start, naming it */
	kafka_e2e_brokers(mock, brokers);
	const char *bad[] = {brokers, "OUTBOXD_KAFKA_INTAKE=orders:xml", NULL};
	assert_int_equal(daemon_start(&dmn, bad), -1);
	FILE *f = fopen(daemon_log_path(&dmn, log, sizeof(log)), "r");
	char text[8192] = "";
	size_t got = f ? fread(text, 1, sizeof(text) - 1, f) : 0;
	text[got] = '\0';
	if (f)
		fclose(f);
	assert_non_null(strstr(text, "kafka_intake: unknown format \"xml\""));

	/* a broker nobody listens on: outboxd starts, and /readyz says why it is not ready */
	char nobody[128];
	snprintf(nobody, sizeof(nobody), "OUTBOXD_KAFKA_BROKERS=127.0.0.1:%d", harness_free_port());
	const char *down[] = {nobody, "OUTBOXD_KAFKA_INTAKE=orders", NULL};
	assert_int_equal(daemon_start(&dmn, down), 0);
	struct http_resp r = {0};
	char ready[128];
	snprintf(ready, sizeof(ready), "%s/readyz", dmn.url);
	long status = 0;
	for (int i = 0; i < 100 && status != 503; i++) {
		http_resp_free(&r);
		http_do("GET", ready, NULL, NULL, NULL, 0, &r);
		status = r.status;
		if (status != 503)
			usleep(100 * 1000);
	}
	assert_int_equal(status, 503);
	assert_non_null(strstr(r.body, "kafka"));
	http_resp_free(&r);
	assert_int_equal(daemon_stop(&dmn), 0);

	/* at the mock: a payload over max_payload and an unknown auth type are dead
	 * deliveries with their reason; the message after them is delivered */
	assert_int_equal(kafka_mock_command(mock, "topic odd 1"), 0);
	snprintf(url, sizeof(url), "%s/odd", rcv.url);
	static char big[2048];
	memset(big, 'x', sizeof(big));
	struct env_spec s = {.id = "0190a0b0-0000-7000-8003-000000000001", .type = "odd.big",
			     .endpoint = url, .payload = big, .payload_len = sizeof(big)};
	struct env_spec u = {.id = "0190a0b0-0000-7000-8003-000000000002", .type = "odd.auth",
			     .endpoint = url, .payload = "{}", .payload_len = 2,
			     .auth = (Outboxd__V1__AuthType)9};
	/* an event.id that could not be a webhook-id header (it would split the request) */
	struct env_spec h = {.id = "evil\r\nX-Injected: 1", .type = "odd.id", .endpoint = url,
			     .payload = "{}", .payload_len = 2};
	/* a target whose credential, header or the event's type would split the request */
	struct env_spec t = {.id = "0190a0b0-0000-7000-8003-000000000004", .type = "odd.token",
			     .endpoint = url, .payload = "{}", .payload_len = 2,
			     .auth = OUTBOXD__V1__AUTH_TYPE__HEADER_TOKEN,
			     .token = "abc\r\nX-Injected: 1\r\nHost: evil"};
	struct env_spec v = {.id = "0190a0b0-0000-7000-8003-000000000005", .type = "odd.header",
			     .endpoint = url, .payload = "{}", .payload_len = 2,
			     .header_value = "yes\r\nX-Injected: 1"};
	struct env_spec y = {.id = "0190a0b0-0000-7000-8003-000000000006",
			     .type = "odd.type\r\nX-Injected: 1", .endpoint = url, .payload = "{}",
			     .payload_len = 2};
	struct env_spec ok = {.id = "0190a0b0-0000-7000-8003-000000000003", .type = "odd.fine",
			      .endpoint = url, .payload = "{\"fine\":1}", .payload_len = 10};
	size_t lens[7];
	void *values[7] = {kafka_e2e_encode(&s, &lens[0]), kafka_e2e_encode(&u, &lens[1]),
			   kafka_e2e_encode(&h, &lens[2]), kafka_e2e_encode(&t, &lens[3]),
			   kafka_e2e_encode(&v, &lens[4]), kafka_e2e_encode(&y, &lens[5]),
			   kafka_e2e_encode(&ok, &lens[6])};
	assert_int_equal(kcat_produce_many(kafka_mock_bootstrap(mock), "odd", 7,
					   (const void *const *)values, lens, NULL), 0);
	const char *env[] = {brokers, "OUTBOXD_KAFKA_INTAKE=odd", "OUTBOXD_MAX_PAYLOAD=1024", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	assert_int_equal(receiver_wait_count(&rcv, "/odd", 1, 20000), 0);
	json_t *dlq = e2e_get(&dmn, "/v1/dlq?source=kafka:odd");
	json_t *items = json_object_get(dlq, "items");
	assert_int_equal(json_array_size(items), 6);
	int saw_big = 0, saw_auth = 0, saw_id = 0, saw_token = 0, saw_header = 0, saw_type = 0;
	for (size_t i = 0; i < 6; i++) {
		json_t *err = json_object_get(json_array_get(items, i), "last_error");
		const char *cause = json_string_value(json_object_get(err, "cause"));
		assert_int_equal(json_integer_value(json_object_get(err, "code")), 422);
		saw_big |= strstr(cause, "over max_payload") != NULL;
		saw_auth |= strstr(cause, "auth.type 9 is not a known AuthType") != NULL;
		saw_id |= strstr(cause, "event.id must be") != NULL;
		saw_token |= strstr(cause, "auth.token must not contain control characters") != NULL;
		saw_header |= strstr(cause, "headers.X-Envelope must not contain control") != NULL;
		saw_type |= strstr(cause, "event.type must not contain control characters") != NULL;
		/* the refused credential is not quoted back */
		assert_null(strstr(cause, "X-Injected"));
	}
	assert_true(saw_big && saw_auth && saw_id && saw_token && saw_header && saw_type);
	json_t *fine = receiver_requests(&rcv, "/odd");
	assert_int_equal(json_array_size(fine), 1);
	assert_string_equal(kafka_e2e_header(json_array_get(fine, 0), "webhook-id"), ok.id);
	assert_null(kafka_e2e_header(json_array_get(fine, 0), "x-injected"));
	json_decref(fine);
	json_decref(dlq);
	/* the subscriptions of envelopes are outboxd's own */
	json_decref(api_call(&dmn, "POST", "/v1/subscriptions",
			     "{\"name\":\"x\",\"event_types\":[],\"endpoint\":\"https://h.example/\","
			     "\"origin\":\"kafka_envelope\"}", 400));
	for (int i = 0; i < 7; i++)
		free(values[i]);
}

int main(void)
{
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_envelopes_delivered_with_their_auth, setup, teardown),
		cmocka_unit_test_setup_teardown(test_subscription_publishes_to_topic, setup, teardown),
		cmocka_unit_test_setup_teardown(test_kill9_while_consuming, setup, teardown),
		cmocka_unit_test_setup_teardown(test_broker_down_mid_publish, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dead_letter_topic_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_input, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
