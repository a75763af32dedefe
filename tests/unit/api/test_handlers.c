/* test_handlers.c: API handlers called with a request struct (api_handle), the way h2o's
 * t/00unit drives its handlers: no sockets and no daemon, but a real SQLite store in a
 * temporary directory and the real writer behind POST /v1/events. What a client sees:
 * status codes, error bodies naming the field, events stored and readable, subscription
 * secrets masked on the way out, the DLQ filter parsed and answered, the event search
 * and its pages, one subscription's attempt series, a test event given to one
 * subscription; the gRPC ingest authorized by the rules of POST /v1/events; a delivery's
 * Kafka envelope, received or published. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "store/writer.h"
#include "util/log.h"
#include "util/uuid.h"

struct fixture {
	char dir[64];
	store *st;
	struct writer *w;
	struct sub_registry reg;
	struct api api;
};

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char dsn[128], err[256];

	snprintf(f->dir, sizeof(f->dir), "/tmp/outboxd-handlers-XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(dsn, sizeof(dsn), "sqlite:%s/outboxd.db", f->dir);
	if (store_open(dsn, "handler-test", &f->st, err, sizeof(err)) != STORE_OK) {
		fprintf(stderr, "store_open: %s\n", err);
		return -1;
	}
	if (!(f->w = writer_start(f->st, NULL)))
		return -1;
	sub_registry_init(&f->reg);
	f->api.st = f->st;
	f->api.reg = &f->reg;
	f->api.writer = f->w;
	f->api.admin_token = "adm";
	f->api.max_payload = 65536;
	f->api.max_request = 1 << 20;
	f->api.replay_rate = 100;
	f->api.stats_window_ms = 3600 * 1000;
	retry_policy_defaults(&f->api.retry_defaults);
	assert_int_equal(store_subs_load(f->st, &f->reg, &f->api.retry_defaults), STORE_OK);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	writer_stop(f->w);
	store_close(f->st);
	sub_registry_destroy(&f->reg);
	nftw(f->dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
	free(f);
	return 0;
}

static const char *no_query(void *ctx, const char *name)
{
	return NULL;
}

/* A query string of one "name=value" pair. */
static const char *one_param(void *ctx, const char *name)
{
	const char *const *kv = ctx;
	return strcmp(kv[0], name) == 0 ? kv[1] : NULL;
}

/* A query string of "name", "value" pairs ending with NULL. */
static const char *pairs(void *ctx, const char *name)
{
	const char *const *kv = ctx;
	for (; kv[0]; kv += 2)
		if (strcmp(kv[0], name) == 0)
			return kv[1];
	return NULL;
}

/* Calls the API with the query lookup q (ctx param); returns the status and the body
 * parsed (decref it), NULL for none. */
static int call_q(struct fixture *f, const char *method, const char *path, const char *body,
		  const char *(*q)(void *, const char *), const char *const *param,
		  json_t **out)
{
	struct api_request req = {
		.method = method,
		.path = path,
		.query = q,
		.query_ctx = (void *)param,
		.authorization = "Bearer adm",
		.content_type = body ? "application/json" : NULL,
		.body = body,
		.body_len = body ? strlen(body) : 0,
	};
	struct api_response res = {0};

	api_handle(&f->api, &req, &res);
	*out = res.body ? json_loads(res.body, 0, NULL) : NULL;
	if (res.body && !*out)
		fail_msg("%s %s: not JSON: %s", method, path, res.body);
	free(res.body);
	return res.status;
}

/* call_q with one "name=value" pair (param: {name, value}) or none (NULL). */
static int call(struct fixture *f, const char *method, const char *path, const char *body,
		const char *const *param, json_t **out)
{
	return call_q(f, method, path, body, param ? one_param : no_query, param, out);
}

static const char *error_field(json_t *body)
{
	return json_string_value(json_object_get(json_object_get(body, "error"), "field"));
}

static void test_bad_event_names_the_field(void **state)
{
	struct fixture *f = *state;
	json_t *body;

	assert_int_equal(call(f, "POST", "/v1/events", "{\"payload\":{}}", NULL, &body), 400);
	assert_string_equal(error_field(body), "event_type");
	json_decref(body);
	assert_int_equal(call(f, "POST", "/v1/events", "{\"event_type\":\"a.b\"", NULL, &body), 400);
	json_decref(body);
	assert_int_equal(call(f, "POST", "/v1/events",
			      "{\"event_type\":\"a.b\",\"payload_base64\":\"not base64!\"}", NULL,
			      &body), 400);
	assert_string_equal(error_field(body), "payload_base64");
	json_decref(body);
}

static void test_event_is_stored_and_fanned_out(void **state)
{
	struct fixture *f = *state;
	json_t *body;
	char path[128];

	assert_int_equal(call(f, "POST", "/v1/subscriptions",
			      "{\"name\":\"orders\",\"endpoint\":\"https://example.com/hook\","
			      "\"event_types\":[\"order.*\"],\"secret\":\"generate\"}",
			      NULL, &body), 201);
	/* the generated secret is shown once, at creation */
	const char *secret = json_string_value(json_object_get(body, "secret"));
	assert_non_null(secret);
	assert_int_equal(strncmp(secret, "whsec_", 6), 0);
	char sub_id[64];
	snprintf(sub_id, sizeof(sub_id), "%s", json_string_value(json_object_get(body, "id")));
	json_decref(body);

	/* ... and masked on every read after */
	snprintf(path, sizeof(path), "/v1/subscriptions/%s", sub_id);
	assert_int_equal(call(f, "GET", path, NULL, NULL, &body), 200);
	assert_string_equal(json_string_value(json_object_get(body, "secret")), "whsec_********");
	json_decref(body);

	assert_int_equal(call(f, "POST", "/v1/events",
			      "{\"event_type\":\"order.created\",\"payload\":{\"id\":7}}", NULL,
			      &body), 202);
	const char *event_id = json_string_value(json_array_get(json_object_get(body, "ids"), 0));
	assert_non_null(event_id);
	snprintf(path, sizeof(path), "/v1/events/%s", event_id);
	json_decref(body);

	assert_int_equal(call(f, "GET", path, NULL, NULL, &body), 200);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(body, "payload"), "id")),
			 7);
	json_t *deliveries = json_object_get(body, "deliveries");
	assert_int_equal(json_array_size(deliveries), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(deliveries, 0),
							      "subscription_id")), sub_id);
	assert_string_equal(json_string_value(json_object_get(json_array_get(deliveries, 0),
							      "status")), "NEW");
	json_decref(body);
}

/* The id of the one delivery of event_id to sub_id. */
static void delivery_of(struct fixture *f, const char *event_id, const char *sub_id,
			char out[64])
{
	struct store_delivery *items = NULL;
	size_t n = 0;
	out[0] = '\0';
	assert_int_equal(store_event_deliveries(f->st, event_id, &items, &n), STORE_OK);
	for (size_t i = 0; i < n; i++)
		if (strcmp(items[i].subscription_id, sub_id) == 0)
			snprintf(out, 64, "%s", items[i].id);
	store_deliveries_free(items, n);
	assert_true(out[0] != '\0');
}

/* GET /v1/deliveries/{id} shows a delivery's Kafka envelope: the one its event came as
 * (stored with the event), the one a kafka:// subscription of payload_format envelope
 * publishes (built with the configured framing), and null for the rest. */
static void test_delivery_shows_its_envelope(void **state)
{
	struct fixture *f = *state;
	json_t *body;
	char path[160], http_sub[64], bus_sub[64], id[64];

	f->api.kafka_wire = ENVELOPE_WIRE_CONFLUENT;
	f->api.kafka_schema_id = 9;
	assert_int_equal(call(f, "POST", "/v1/subscriptions",
			      "{\"name\":\"hook\",\"endpoint\":\"https://example.com/hook\","
			      "\"event_types\":[\"order.*\"]}", NULL, &body), 201);
	snprintf(http_sub, sizeof(http_sub), "%s", json_string_value(json_object_get(body, "id")));
	json_decref(body);
	assert_int_equal(call(f, "POST", "/v1/subscriptions",
			      "{\"name\":\"bus\",\"endpoint\":\"kafka://orders.bus\","
			      "\"payload_format\":\"envelope\",\"event_types\":[\"order.*\"]}",
			      NULL, &body), 201);
	snprintf(bus_sub, sizeof(bus_sub), "%s", json_string_value(json_object_get(body, "id")));
	json_decref(body);

	/* an event from POST /v1/events: published as an envelope to the bus only */
	assert_int_equal(call(f, "POST", "/v1/events",
			      "{\"event_type\":\"order.created\",\"payload\":{\"id\":7}}", NULL,
			      &body), 202);
	char event_id[64];
	snprintf(event_id, sizeof(event_id), "%s",
		 json_string_value(json_array_get(json_object_get(body, "ids"), 0)));
	json_decref(body);
	delivery_of(f, event_id, http_sub, id);
	snprintf(path, sizeof(path), "/v1/deliveries/%s", id);
	assert_int_equal(call(f, "GET", path, NULL, NULL, &body), 200);
	assert_true(json_is_null(json_object_get(body, "envelope")));
	json_decref(body);
	delivery_of(f, event_id, bus_sub, id);
	snprintf(path, sizeof(path), "/v1/deliveries/%s", id);
	assert_int_equal(call(f, "GET", path, NULL, NULL, &body), 200);
	json_t *v = json_object_get(body, "envelope");
	assert_string_equal(json_string_value(json_object_get(v, "origin")), "published");
	assert_string_equal(json_string_value(json_object_get(v, "wire_format")), "confluent");
	assert_int_equal(json_integer_value(json_object_get(v, "schema_id")), 9);
	json_t *p = json_object_get(v, "parsed");
	json_t *ev = json_object_get(p, "event");
	assert_string_equal(json_string_value(json_object_get(ev, "id")), event_id);
	assert_string_equal(json_string_value(json_object_get(ev, "type")), "order.created");
	assert_int_equal(json_integer_value(json_object_get(json_object_get(ev, "payload"), "id")), 7);
	assert_string_equal(json_string_value(json_object_get(p, "endpoint")), "");
	assert_true(json_is_null(json_object_get(p, "auth")));
	json_decref(body);

	/* an event that came as an envelope (as the Kafka intake stores one): shown as it
	 * came, to every subscription */
	static const unsigned char raw[] = {0x0a, 0x07, 0x12, 0x05, 'o', 'r', 'd', 'e', 'r'};
	char subs[1][UUID_STR_LEN];
	assert_true(strlen(bus_sub) == UUID_STR_LEN - 1);
	memcpy(subs[0], bus_sub, UUID_STR_LEN);
	struct store_event_in in = {
		.event_type = "order", .source = "kafka:orders", .source_event_id = "0/1",
		.content_type = "application/json", .payload = "{}", .payload_len = 2,
		.envelope = raw, .envelope_len = sizeof(raw),
		.subscription_ids = (const char (*)[UUID_STR_LEN])subs, .n_subscriptions = 1,
	};
	uuid_v7(in.id);
	assert_int_equal(store_ingest(f->st, &in, 1), STORE_OK);
	delivery_of(f, in.id, bus_sub, id);
	snprintf(path, sizeof(path), "/v1/deliveries/%s", id);
	assert_int_equal(call(f, "GET", path, NULL, NULL, &body), 200);
	v = json_object_get(body, "envelope");
	assert_string_equal(json_string_value(json_object_get(v, "origin")), "received");
	assert_string_equal(json_string_value(json_object_get(v, "raw_base64")), "CgcSBW9yZGVy");
	assert_string_equal(json_string_value(json_object_get(v, "wire_format")), "plain");
	assert_string_equal(json_string_value(json_object_get(
				    json_object_get(json_object_get(v, "parsed"), "event"), "type")),
			    "order");
	json_decref(body);
}

static void test_unknown_ids_are_404(void **state)
{
	struct fixture *f = *state;
	json_t *body;

	assert_int_equal(call(f, "GET", "/v1/deliveries/0190a0b0-0000-7000-8000-000000000000",
			      NULL, NULL, &body), 404);
	assert_string_equal(json_string_value(json_object_get(json_object_get(body, "error"), "code")),
			    "not_found");
	json_decref(body);
	assert_int_equal(call(f, "GET", "/v1/events/0190a0b0-0000-7000-8000-000000000000", NULL,
			      NULL, &body), 404);
	json_decref(body);
}

static void test_dlq_filter_is_checked(void **state)
{
	struct fixture *f = *state;
	json_t *body;
	const char *bad_code[] = {"code", "abc"};
	const char *good_code[] = {"code", "503"};

	assert_int_equal(call(f, "GET", "/v1/dlq", NULL, bad_code, &body), 400);
	assert_string_equal(error_field(body), "code");
	json_decref(body);
	assert_int_equal(call(f, "GET", "/v1/dlq", NULL, good_code, &body), 200);
	assert_int_equal(json_array_size(json_object_get(body, "items")), 0);
	json_decref(body);
}

/* GET /v1/events: the search by type, source and key finds the event with its
 * deliveries counted; pages follow next_cursor; a bad parameter is 400 naming it. */
static void test_event_search(void **state)
{
	struct fixture *f = *state;
	json_t *body;

	assert_int_equal(call(f, "POST", "/v1/subscriptions",
			      "{\"name\":\"orders\",\"endpoint\":\"https://example.com/hook\","
			      "\"event_types\":[\"order.*\"]}", NULL, &body), 201);
	json_decref(body);
	assert_int_equal(call(f, "POST", "/v1/events",
			      "{\"events\":[{\"event_type\":\"order.created\",\"source\":\"shop\","
			      "\"source_event_id\":\"o-1\",\"payload\":{}},"
			      "{\"event_type\":\"user.created\",\"payload\":{}},"
			      "{\"event_type\":\"order.paid\",\"source\":\"shop\",\"payload\":{}}]}",
			      NULL, &body), 202);
	char first[64];
	snprintf(first, sizeof(first), "%s",
		 json_string_value(json_array_get(json_object_get(body, "ids"), 0)));
	json_decref(body);

	const char *by_type[] = {"event_type", "order.*", "source", "shop", "source_event_id",
				 "o-1", NULL};
	assert_int_equal(call_q(f, "GET", "/v1/events", NULL, pairs, by_type, &body), 200);
	json_t *items = json_object_get(body, "items");
	assert_int_equal(json_array_size(items), 1);
	json_t *ev = json_array_get(items, 0);
	assert_string_equal(json_string_value(json_object_get(ev, "id")), first);
	assert_string_equal(json_string_value(json_object_get(ev, "event_type")), "order.created");
	assert_null(json_object_get(ev, "payload"));
	json_t *counts = json_object_get(ev, "delivery_counts");
	assert_int_equal(json_integer_value(json_object_get(counts, "NEW")), 1);
	assert_int_equal(json_integer_value(json_object_get(counts, "FAILED_DEAD")), 0);
	assert_true(json_is_null(json_object_get(body, "next_cursor")));
	json_decref(body);

	/* two pages of one, then two, then none left */
	const char *one[] = {"limit", "2", NULL};
	assert_int_equal(call_q(f, "GET", "/v1/events", NULL, pairs, one, &body), 200);
	assert_int_equal(json_array_size(json_object_get(body, "items")), 2);
	char cursor[128];
	snprintf(cursor, sizeof(cursor), "%s", json_string_value(json_object_get(body, "next_cursor")));
	json_decref(body);
	const char *next[] = {"limit", "2", "cursor", cursor, NULL};
	assert_int_equal(call_q(f, "GET", "/v1/events", NULL, pairs, next, &body), 200);
	assert_int_equal(json_array_size(json_object_get(body, "items")), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(
				    json_object_get(body, "items"), 0), "id")), first);
	assert_true(json_is_null(json_object_get(body, "next_cursor")));
	json_decref(body);

	static const char *const bad[][2] = {{"id", "nope"}, {"from", "yesterday"},
		{"to", "soon"}, {"event_type", ""}, {"limit", "0"}, {"limit", "1001"},
		{"cursor", "ca:1:0190a0b0-0000-7000-8000-000000000000"}};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(call(f, "GET", "/v1/events", NULL, bad[i], &body), 400);
		assert_string_equal(error_field(body), bad[i][0]);
		json_decref(body);
	}
}

/* GET /v1/stats/series: one subscription's minutes (echoed), no latency in a minute
 * without attempts; a subscription_id that is not a UUID is 400 naming it. */
static void test_series_of_one_subscription(void **state)
{
	struct fixture *f = *state;
	json_t *body;
	const char *bad[] = {"subscription_id", "orders"};
	const char *one[] = {"subscription_id", "0190a0b0-0000-7000-8000-000000000000", "minutes",
			     "3", NULL};

	assert_int_equal(call(f, "GET", "/v1/stats/series", NULL, bad, &body), 400);
	assert_string_equal(error_field(body), "subscription_id");
	json_decref(body);
	assert_int_equal(call_q(f, "GET", "/v1/stats/series", NULL, pairs, one, &body), 200);
	assert_string_equal(json_string_value(json_object_get(body, "subscription_id")), one[1]);
	json_t *points = json_object_get(body, "points");
	assert_int_equal(json_array_size(points), 3);
	json_t *p = json_array_get(points, 2);
	assert_int_equal(json_integer_value(json_object_get(p, "succeeded")), 0);
	assert_true(json_is_null(json_object_get(p, "latency_p50_ms")));
	assert_true(json_is_null(json_object_get(p, "latency_p99_ms")));
	json_decref(body);
}

/* Creates a subscription from doc; its id into id. */
static void create_sub(struct fixture *f, const char *doc, char id[64])
{
	json_t *body;
	assert_int_equal(call(f, "POST", "/v1/subscriptions", doc, NULL, &body), 201);
	snprintf(id, 64, "%s", json_string_value(json_object_get(body, "id")));
	json_decref(body);
}

/* POST /v1/subscriptions/{id}/test: an event stored with one delivery, to that
 * subscription only (another whose event_types match gets none, and the named one gets it
 * though its own do not match); the default event when the body is empty; errors naming
 * the field: a batch, a bad event, an unknown or a disabled subscription. */
static void test_test_event_goes_to_one_subscription(void **state)
{
	struct fixture *f = *state;
	json_t *body;
	char a[64], b[64], path[160], ev[160];

	create_sub(f, "{\"name\":\"a\",\"endpoint\":\"https://a.example/h\",\"event_types\":[\"order.*\"]}", a);
	create_sub(f, "{\"name\":\"b\",\"endpoint\":\"https://b.example/h\",\"event_types\":[\"*\"]}", b);

	snprintf(path, sizeof(path), "/v1/subscriptions/%s/test", a);
	assert_int_equal(call(f, "POST", path, "{\"event_type\":\"ping\",\"payload\":{\"n\":1}}", NULL,
			      &body), 202);
	assert_string_equal(json_string_value(json_object_get(body, "subscription_id")), a);
	snprintf(ev, sizeof(ev), "/v1/events/%s", json_string_value(json_object_get(body, "event_id")));
	json_decref(body);
	assert_int_equal(call(f, "GET", ev, NULL, NULL, &body), 200);
	json_t *ds = json_object_get(body, "deliveries");
	assert_int_equal(json_array_size(ds), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(ds, 0), "subscription_id")), a);
	assert_string_equal(json_string_value(json_object_get(body, "event_type")), "ping");
	json_decref(body);

	/* an empty body: the default event, naming the subscription */
	assert_int_equal(call(f, "POST", path, NULL, NULL, &body), 202);
	snprintf(ev, sizeof(ev), "/v1/events/%s", json_string_value(json_object_get(body, "event_id")));
	json_decref(body);
	assert_int_equal(call(f, "GET", ev, NULL, NULL, &body), 200);
	assert_string_equal(json_string_value(json_object_get(body, "event_type")), "test.ping");
	json_t *payload = json_object_get(body, "payload");
	assert_string_equal(json_string_value(json_object_get(payload, "subscription")), "a");
	assert_string_equal(json_string_value(json_object_get(payload, "sent_by")), "admin");
	assert_true(json_is_true(json_object_get(payload, "test")));
	assert_int_equal(json_array_size(json_object_get(body, "deliveries")), 1);
	json_decref(body);

	assert_int_equal(call(f, "POST", path, "{\"events\":[{\"event_type\":\"x\",\"payload\":1}]}",
			      NULL, &body), 400);
	assert_string_equal(error_field(body), "events");
	json_decref(body);
	assert_int_equal(call(f, "POST", path, "{\"payload\":{}}", NULL, &body), 400);
	assert_string_equal(error_field(body), "event_type");
	json_decref(body);
	assert_int_equal(call(f, "POST", "/v1/subscriptions/0190a0b0-0000-7000-8000-000000000000/test",
			      NULL, NULL, &body), 404);
	assert_string_equal(error_field(body), "id");
	json_decref(body);

	snprintf(path, sizeof(path), "/v1/subscriptions/%s", b);
	assert_int_equal(call(f, "PATCH", path, "{\"enabled\":false}", NULL, &body), 200);
	json_decref(body);
	snprintf(path, sizeof(path), "/v1/subscriptions/%s/test", b);
	assert_int_equal(call(f, "POST", path, NULL, NULL, &body), 409);
	assert_string_equal(error_field(body), "enabled");
	json_decref(body);
}

/* An option the endpoint's member does not take is a 422 naming the field, on create and
 * on a PATCH that moves the endpoint to such a member; nothing is stored. */
static void test_unsupported_option_is_422(void **state)
{
	struct fixture *f = *state;
	json_t *body;
	char id[64], path[128];

	assert_int_equal(call(f, "POST", "/v1/subscriptions",
			      "{\"name\":\"topic\",\"endpoint\":\"kafka://orders\",\"event_types\":"
			      "[\"*\"],\"auth\":{\"type\":\"bearer\",\"token\":\"t\"}}",
			      NULL, &body), 422);
	assert_string_equal(error_field(body), "auth");
	const char *message =
		json_string_value(json_object_get(json_object_get(body, "error"), "message"));
	assert_non_null(strstr(message, "auth: kafka:// endpoints take no auth"));
	json_decref(body);
	assert_int_equal(call(f, "GET", "/v1/subscriptions", NULL, NULL, &body), 200);
	assert_int_equal(json_array_size(json_object_get(body, "items")), 0);
	json_decref(body);

	create_sub(f, "{\"name\":\"hook\",\"endpoint\":\"https://example.com/hook\","
		      "\"event_types\":[\"*\"],\"tls\":{}}", id);
	snprintf(path, sizeof(path), "/v1/subscriptions/%s", id);
	assert_int_equal(call(f, "PATCH", path, "{\"endpoint\":\"kafka://orders\","
			      "\"secret_grace\":\"1h\"}", NULL, &body), 422);
	assert_string_equal(error_field(body), "secret_grace");
	json_decref(body);
	assert_int_equal(call(f, "PATCH", path, "{\"endpoint\":\"kafka://orders\","
			      "\"timeout\":\"5s\"}", NULL, &body), 200);
	json_decref(body);
}

/* The gRPC ingest's authorization (api_ingest_authorize): the tokens and scope of
 * POST /v1/events, and what it refuses as the API would answer it. */
/* The text of the answer to POST /v1/events (the caller frees it). */
static char *post_events_raw(struct fixture *f, const char *body, int *status)
{
	struct api_request req = {
		.method = "POST", .path = "/v1/events", .query = no_query,
		.authorization = "Bearer adm", .content_type = "application/json",
		.body = body, .body_len = strlen(body),
	};
	struct api_response res = {0};
	api_handle(&f->api, &req, &res);
	*status = res.status;
	return res.body;
}

/* The ingest answer lists the stored ids in order, written as jansson writes it (the
 * answer without duplicates is written directly), and a repeated key shows as
 * duplicates (a batch) or duplicate (one event), with the first event's id. */
static void test_ingest_answer_lists_ids(void **state)
{
	struct fixture *f = *state;
	int status;
	char *raw = post_events_raw(f,
				    "{\"events\":[{\"event_type\":\"a.b\",\"payload\":{}},"
				    "{\"event_type\":\"a.c\",\"payload\":[1]},"
				    "{\"event_type\":\"a.d\",\"source\":\"shop\","
				    "\"source_event_id\":\"k-1\",\"payload\":\"x\"}]}",
				    &status);
	assert_int_equal(status, 202);
	json_t *body = json_loads(raw, 0, NULL);
	assert_non_null(body);
	char *again = json_dumps(body, JSON_COMPACT);
	assert_string_equal(raw, again);
	free(again);
	json_t *ids = json_object_get(body, "ids");
	assert_int_equal(json_array_size(ids), 3);
	assert_int_equal(json_object_size(body), 1);
	char keyed[64];
	snprintf(keyed, sizeof(keyed), "%s", json_string_value(json_array_get(ids, 2)));
	for (size_t i = 0; i < 3; i++) {
		char path[128];
		json_t *ev;
		assert_int_equal(strlen(json_string_value(json_array_get(ids, i))), 36);
		snprintf(path, sizeof(path), "/v1/events/%s",
			 json_string_value(json_array_get(ids, i)));
		assert_int_equal(call(f, "GET", path, NULL, NULL, &ev), 200);
		json_decref(ev);
	}
	json_decref(body);
	free(raw);

	raw = post_events_raw(f,
			      "{\"events\":[{\"event_type\":\"a.d\",\"source\":\"shop\","
			      "\"source_event_id\":\"k-1\",\"payload\":\"x\"},"
			      "{\"event_type\":\"a.b\",\"payload\":{}}]}",
			      &status);
	assert_int_equal(status, 202);
	body = json_loads(raw, 0, NULL);
	assert_non_null(body);
	assert_string_equal(json_string_value(json_array_get(json_object_get(body, "ids"), 0)),
			    keyed);
	assert_int_equal(json_array_size(json_object_get(body, "duplicates")), 1);
	assert_int_equal(json_integer_value(json_array_get(json_object_get(body, "duplicates"), 0)),
			 0);
	json_decref(body);
	free(raw);

	raw = post_events_raw(f,
			      "{\"event_type\":\"a.d\",\"source\":\"shop\","
			      "\"source_event_id\":\"k-1\",\"payload\":\"x\"}",
			      &status);
	assert_int_equal(status, 202);
	body = json_loads(raw, 0, NULL);
	assert_non_null(body);
	assert_true(json_is_true(json_object_get(body, "duplicate")));
	assert_string_equal(json_string_value(json_array_get(json_object_get(body, "ids"), 0)),
			    keyed);
	json_decref(body);
	free(raw);
}

/* A server that suspends connections (http.c) gives POST /v1/events a struct api_defer:
 * the handler suspends before it hands the events over and leaves res->pending; resume
 * is called once, and api_complete then gives the answer a blocking call gives (the
 * duplicate flag included). A server that refuses to suspend (stopping) gets its answer
 * before the handler returns. */
struct defer_probe {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int suspends, resumes;
	int refuse;
};

static int probe_suspend(void *ctx)
{
	struct defer_probe *p = ctx;
	pthread_mutex_lock(&p->mu);
	p->suspends++;
	int refuse = p->refuse;
	pthread_mutex_unlock(&p->mu);
	return refuse ? -1 : 0;
}

static void probe_resume(void *ctx)
{
	struct defer_probe *p = ctx;
	pthread_mutex_lock(&p->mu);
	p->resumes++;
	pthread_cond_broadcast(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

static void post_deferred(struct fixture *f, struct defer_probe *p, const char *body,
			  struct api_response *res)
{
	struct api_defer defer = {probe_suspend, probe_resume, p};
	struct api_request req = {
		.method = "POST",
		.path = "/v1/events",
		.query = no_query,
		.authorization = "Bearer adm",
		.content_type = "application/json",
		.body = body,
		.body_len = strlen(body),
		.defer = &defer,
	};
	memset(res, 0, sizeof(*res));
	api_handle(&f->api, &req, res);
}

/* POSTs body with suspensions refused or not: the answer comes before the handler
 * returns, with status; suspends is the count of suspensions asked since the start. */
static void answered_at_once(struct fixture *f, struct defer_probe *p, int refuse,
			     const char *body, int status, int suspends)
{
	struct api_response res;
	p->refuse = refuse;
	post_deferred(f, p, body, &res);
	assert_null(res.pending);
	assert_int_equal(res.status, status);
	free(res.body);
	assert_int_equal(p->suspends, suspends);
}

static void test_ingest_answered_later(void **state)
{
	struct fixture *f = *state;
	struct defer_probe p = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};
	const char *body = "{\"event_type\":\"a.b\",\"source\":\"shop\","
			   "\"source_event_id\":\"later-1\",\"payload\":{}}";
	struct api_response res;

	for (int round = 0; round < 2; round++) {
		post_deferred(f, &p, body, &res);
		assert_non_null(res.pending);
		assert_null(res.body);
		pthread_mutex_lock(&p.mu);
		assert_int_equal(p.suspends, round + 1);
		while (p.resumes < round + 1)
			pthread_cond_wait(&p.cv, &p.mu);
		pthread_mutex_unlock(&p.mu);
		struct api_pending *pending = res.pending;
		memset(&res, 0, sizeof(res));
		api_complete(pending, &res);
		assert_int_equal(res.status, 202);
		json_t *doc = json_loads(res.body, 0, NULL);
		assert_non_null(doc);
		assert_int_equal(json_array_size(json_object_get(doc, "ids")), 1);
		/* the second time, the same idempotency key: the first event, marked */
		assert_int_equal(json_is_true(json_object_get(doc, "duplicate")), round == 1);
		json_decref(doc);
		free(res.body);
	}
	assert_int_equal(p.resumes, 2);

	/* the server cannot suspend: answered at once (one more suspend asked), no resume */
	answered_at_once(f, &p, 1, "{\"event_type\":\"a.b\",\"payload\":{}}", 202, 3);
	/* refused before the writer (a bad body): no suspension asked either */
	answered_at_once(f, &p, 0, "{\"payload\":{}}", 400, 3);
	assert_int_equal(p.resumes, 2);
}

static void test_ingest_authorize_as_post_events(void **state)
{
	struct fixture *f = *state;
	struct input_error err;
	const char *path = "/outboxd.v1.Ingest/Publish";
	json_t *tok;

	assert_non_null(f->api.tokens = api_tokens_new(f->st));
	f->api.ingest_token = "ing";
	assert_int_equal(api_ingest_authorize(&f->api, "Bearer adm", "192.0.2.7", path, &err), 0);
	assert_int_equal(api_ingest_authorize(&f->api, "Bearer ing", NULL, path, &err), 0);

	assert_int_equal(api_ingest_authorize(&f->api, "Bearer nope", "192.0.2.7", path, &err), -1);
	assert_int_equal(err.status, 401);
	assert_string_equal(err.code, "unauthenticated");
	assert_int_equal(api_ingest_authorize(&f->api, NULL, "192.0.2.7", path, &err), -1);
	assert_int_equal(err.status, 401);
	assert_non_null(strstr(err.message, path));

	/* named tokens: with the ingest scope it may, with read only it may not */
	assert_int_equal(call(f, "POST", "/v1/tokens", "{\"name\":\"producer\",\"scopes\":[\"ingest\"]}",
			      NULL, &tok), 201);
	char bearer[160];
	snprintf(bearer, sizeof(bearer), "Bearer %s", json_string_value(json_object_get(tok, "token")));
	json_decref(tok);
	assert_int_equal(api_ingest_authorize(&f->api, bearer, NULL, path, &err), 0);
	assert_int_equal(call(f, "POST", "/v1/tokens", "{\"name\":\"reader\",\"scopes\":[\"read\"]}",
			      NULL, &tok), 201);
	snprintf(bearer, sizeof(bearer), "Bearer %s", json_string_value(json_object_get(tok, "token")));
	json_decref(tok);
	assert_int_equal(api_ingest_authorize(&f->api, bearer, NULL, path, &err), -1);
	assert_int_equal(err.status, 403);
	assert_string_equal(err.code, "forbidden");
	assert_non_null(strstr(err.message, "needs the ingest scope; the token \"reader\" has read"));
	api_tokens_free(f->api.tokens);
	f->api.tokens = NULL;
}

int main(void)
{
	log_set_level(LOG_ERROR);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_bad_event_names_the_field, setup, teardown),
		cmocka_unit_test_setup_teardown(test_event_is_stored_and_fanned_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ingest_answer_lists_ids, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ingest_answered_later, setup, teardown),
		cmocka_unit_test_setup_teardown(test_delivery_shows_its_envelope, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_ids_are_404, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ingest_authorize_as_post_events, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_dlq_filter_is_checked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unsupported_option_is_422, setup, teardown),
		cmocka_unit_test_setup_teardown(test_event_search, setup, teardown),
		cmocka_unit_test_setup_teardown(test_series_of_one_subscription, setup, teardown),
		cmocka_unit_test_setup_teardown(test_test_event_goes_to_one_subscription, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
