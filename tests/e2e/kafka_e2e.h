/* kafka_e2e.h: what the Kafka end-to-end tests share (on top of e2e.h and
 * harness_kafka.h): OutboxEvent envelopes encoded with protobuf-c's code for
 * proto/outboxd/v1/outbox_event.proto (not with outboxd's own encoder, so both sides of
 * the contract are checked), and small readers of what the receiver recorded. */
#ifndef OUTBOXD_TESTS_KAFKA_E2E_H
#define OUTBOXD_TESTS_KAFKA_E2E_H

#include "e2e.h"
#include "harness_kafka.h"

#include <openssl/evp.h>

#include "outboxd/v1/outbox_event.pb-c.h"

/* The fixture of a Kafka test file: the mock cluster (one broker), a receiver, and n
 * daemons zeroed; kafka_e2e_teardown removes them all (daemons that still run are
 * stopped). */
static inline void kafka_e2e_setup(struct kafka_mock **mock, struct receiver *rcv,
				   struct daemon *daemons, size_t n)
{
	assert_non_null(*mock = kafka_mock_start(1));
	assert_int_equal(receiver_start(rcv), 0);
	memset(daemons, 0, n * sizeof(*daemons));
}

static inline void kafka_e2e_teardown(struct kafka_mock **mock, struct receiver *rcv,
				      struct daemon *daemons, size_t n)
{
	for (size_t i = 0; i < n; i++)
		daemon_cleanup(&daemons[i]);
	receiver_stop(rcv);
	kafka_mock_stop(*mock);
	*mock = NULL;
}

/* Polls GET path of d every 100 ms until its "items" has want entries, up to timeout_ms;
 * returns the last page (json_decref it), whatever it holds. */
static inline json_t *kafka_e2e_wait_items(struct daemon *d, size_t want, int timeout_ms,
					   const char *path)
{
	json_t *page = NULL;
	for (int waited = 0;; waited += 100) {
		json_decref(page);
		page = e2e_get(d, "%s", path);
		if (json_array_size(json_object_get(page, "items")) == want || waited >= timeout_ms)
			return page;
		usleep(100 * 1000);
	}
}

/* One envelope to encode (every string borrowed; NULL or 0 leaves the field empty). */
struct env_spec {
	const char *id;
	const char *type;
	const char *endpoint;
	const void *payload;
	size_t payload_len;
	int binary;
	Outboxd__V1__AuthType auth;
	const char *user, *pass, *token_url, *client_id, *client_secret;
	const char *token;          /* HEADER_TOKEN, API_KEY, ... */
	const char *header_value;   /* of the header X-Envelope; NULL: "yes" */
	const char *subscription_id;
	int confluent;      /* Schema Registry framing: 0, schema id 7, index list [0] */
};

/* Encodes s with the header X-Envelope (yes, or s->header_value); returned (free it),
 * *len set. */
static inline void *kafka_e2e_encode(const struct env_spec *s, size_t *len)
{
	Outboxd__V1__Event ev = OUTBOXD__V1__EVENT__INIT;
	Outboxd__V1__Auth auth = OUTBOXD__V1__AUTH__INIT;
	Outboxd__V1__OutboxEvent oe = OUTBOXD__V1__OUTBOX_EVENT__INIT;
	Outboxd__V1__OutboxEvent__HeadersEntry hdr = OUTBOXD__V1__OUTBOX_EVENT__HEADERS_ENTRY__INIT;
	Outboxd__V1__OutboxEvent__HeadersEntry *hdrs[1] = {&hdr};

	ev.id = (char *)(s->id ? s->id : "");
	ev.type = (char *)s->type;
	ev.source = "billing";
	ev.payload.data = (uint8_t *)s->payload;
	ev.payload.len = s->payload_len;
	oe.event = &ev;
	oe.endpoint = (char *)(s->endpoint ? s->endpoint : "");
	oe.payload_type = s->binary ? OUTBOXD__V1__PAYLOAD_TYPE__PAYLOAD_TYPE_BINARY
				    : OUTBOXD__V1__PAYLOAD_TYPE__PAYLOAD_TYPE_JSON;
	if (s->subscription_id)
		oe.subscription_id = (char *)s->subscription_id;
	hdr.key = "X-Envelope";
	hdr.value = (char *)(s->header_value ? s->header_value : "yes");
	oe.n_headers = 1;
	oe.headers = hdrs;
	if (s->auth) {
		auth.type = s->auth;
		if (s->user)
			auth.username = (char *)s->user;
		if (s->pass)
			auth.password = (char *)s->pass;
		if (s->token_url)
			auth.token_url = (char *)s->token_url;
		if (s->client_id)
			auth.client_id = (char *)s->client_id;
		if (s->client_secret)
			auth.client_secret = (char *)s->client_secret;
		if (s->token)
			auth.token = (char *)s->token;
		if (s->auth == OUTBOXD__V1__AUTH_TYPE__OAUTH)
			auth.grant_type = "client_credentials";
		oe.auth = &auth;
	}
	size_t plen = outboxd__v1__outbox_event__get_packed_size(&oe), off = s->confluent ? 6 : 0;
	uint8_t *out = malloc(plen + off);
	assert_non_null(out);
	if (s->confluent) {
		out[0] = 0;
		out[1] = out[2] = out[3] = 0;
		out[4] = 7;  /* schema id 7, big-endian */
		out[5] = 0;  /* message indexes: [0] */
	}
	outboxd__v1__outbox_event__pack(&oe, out + off);
	*len = plen + off;
	return out;
}

/* Produces the envelope s to topic (one message). */
static inline void kafka_e2e_produce(struct kafka_mock *mock, const char *topic,
				     const struct env_spec *s)
{
	size_t len = 0;
	void *v = kafka_e2e_encode(s, &len);
	assert_int_equal(kcat_produce(kafka_mock_bootstrap(mock), topic, NULL, v, len, NULL), 0);
	free(v);
}

/* base64 of len bytes (returned; free it). */
static inline char *kafka_e2e_b64(const void *data, size_t len)
{
	char *out = malloc(4 * ((len + 2) / 3) + 1);
	assert_non_null(out);
	EVP_EncodeBlock((unsigned char *)out, data, (int)len);
	return out;
}

/* A request header the receiver recorded (borrowed from req), NULL when absent. */
static inline const char *kafka_e2e_header(json_t *req, const char *name)
{
	return json_string_value(json_object_get(json_object_get(req, "headers"), name));
}

/* "OUTBOXD_KAFKA_BROKERS=<the mock>" into brokers. */
static inline void kafka_e2e_brokers(struct kafka_mock *mock, char brokers[256])
{
	snprintf(brokers, 256, "OUTBOXD_KAFKA_BROKERS=%s", kafka_mock_bootstrap(mock));
}

/* GET /readyz of d: its status (0 when it did not answer). */
static inline long kafka_e2e_readyz(const struct daemon *d)
{
	struct http_resp r = {0};
	char url[128];
	snprintf(url, sizeof(url), "%s/readyz", d->url);
	http_do("GET", url, NULL, NULL, NULL, 0, &r);
	long status = r.status;
	http_resp_free(&r);
	return status;
}

/* Polls GET /readyz of d every 100 ms until it answers want; returns the milliseconds
 * waited, or -1 when timeout_ms passed first. */
static inline long kafka_e2e_wait_readyz(const struct daemon *d, long want, int timeout_ms)
{
	int64_t start = harness_now_ms();
	for (;;) {
		if (kafka_e2e_readyz(d) == want)
			return (long)(harness_now_ms() - start);
		if (harness_now_ms() - start > timeout_ms)
			return -1;
		usleep(100 * 1000);
	}
}

/* 1 when the daemon's log holds needle. */
static inline int kafka_e2e_log_has(const struct daemon *d, const char *needle)
{
	char path[512];
	return e2e_file_contains(daemon_log_path(d, path, sizeof(path)), needle);
}

#endif
