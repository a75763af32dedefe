/* grpc_publish.c: OutboxEvent messages of the gRPC ingest into events, and the
 * PublishReply (see grpc_publish.h). The rules are POST /v1/events's, so an event is
 * refused or taken the same whichever way it comes; what an envelope can say that the
 * HTTP ingest cannot (a target of its own, an id) is refused, never dropped silently.
 * Must not touch gRPC or the store. */
#include "intake/grpc_publish.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "core/trace.h"
#include "outboxd/v1/ingest.pb-c.h"
#include "outboxd/v1/outbox_event.pb-c.h"
#include "util/clock.h"
#include "util/utf8.h"
#include "util/uuid.h"

#define STRING_MAX 255   /* source, source_event_id, partition_key: as POST /v1/events */

/* Names the message of a stream in err's message ("message 3: event.type is required");
 * a unary call's error stays as it is. Returns -1. */
static int in_stream(struct input_error *err, long index)
{
	if (index >= 0) {
		char message[sizeof(err->message) + 48];
		snprintf(message, sizeof(message), "message %ld of the stream: %s", index,
			 err->message);
		size_t len = strnlen(message, sizeof(err->message) - 1); /* cut to fit */
		memcpy(err->message, message, len);
		err->message[len] = '\0';
	}
	return -1;
}

/* protobuf-c gives "" for an unset proto3 string; NULL is taken as "" all the same */
static const char *text(const char *s)
{
	return s ? s : "";
}

static int valid_string(const char *s, size_t max)
{
	size_t len = strlen(s);
	return len <= max && utf8_valid_prefix((const unsigned char *)s, len) == len;
}

/* The members of an envelope that name a target of its own: the Kafka intake delivers
 * to it, POST /v1/events has no such thing. Returns the first one set, or NULL. */
static const char *own_target(const Outboxd__V1__OutboxEvent *m)
{
	if (*text(m->endpoint))
		return "endpoint";
	if (m->protocol != OUTBOXD__V1__PROTOCOL__PROTOCOL_UNSPECIFIED)
		return "protocol";
	if (m->auth)
		return "auth";
	if (m->timeout_ms)
		return "timeout_ms";
	if (m->n_headers)
		return "headers";
	if (*text(m->subscription_id))
		return "subscription_id";
	return NULL;
}

/* The checks of one decoded message, filling ev from it (its strings borrowed from m). */
static int check_event(const Outboxd__V1__OutboxEvent *m, const struct publish_limits *lim,
		       struct store_event_in *ev, struct input_error *err)
{
	const Outboxd__V1__Event *e = m->event;
	const char *target, *type, *source, *source_event_id, *partition_key;

	if (!e)
		return input_error_set(err, 400, "invalid_argument", "event", "event is required");
	type = text(e->type);
	source = text(e->source);
	source_event_id = text(e->source_event_id);
	partition_key = text(e->partition_key);
	if (*text(e->id))
		return input_error_set(err, 400, "invalid_argument", "event.id",
				       "event.id must be empty: outboxd gives each event its id "
				       "(PublishReply.ids); a producer's own id goes in "
				       "event.source_event_id, the idempotency key with event.source");
	if (ingest_check_event_type(*type ? type : NULL, strlen(type), "event.type", err))
		return -1;
	if (!valid_string(source, STRING_MAX))
		return input_error_set(err, 400, "invalid_argument", "event.source",
				       "event.source must be UTF-8 of at most %d bytes", STRING_MAX);
	if (!valid_string(source_event_id, STRING_MAX))
		return input_error_set(err, 400, "invalid_argument", "event.source_event_id",
				       "event.source_event_id must be UTF-8 of at most %d bytes",
				       STRING_MAX);
	if (!valid_string(partition_key, STRING_MAX))
		return input_error_set(err, 400, "invalid_argument", "event.partition_key",
				       "event.partition_key must be UTF-8 of at most %d bytes",
				       STRING_MAX);
	if ((target = own_target(m)))
		return input_error_set(err, 400, "invalid_argument", target,
				       "%s must be unset: the gRPC ingest fans each event out to the "
				       "subscriptions its type matches, as POST /v1/events does (an "
				       "envelope's own target is taken from Kafka intake topics only)",
				       target);
	int binary = m->payload_type == OUTBOXD__V1__PAYLOAD_TYPE__PAYLOAD_TYPE_BINARY;
	if (!binary && m->payload_type != OUTBOXD__V1__PAYLOAD_TYPE__PAYLOAD_TYPE_JSON &&
	    m->payload_type != OUTBOXD__V1__PAYLOAD_TYPE__PAYLOAD_TYPE_UNSPECIFIED)
		return input_error_set(err, 400, "invalid_argument", "payload_type",
				       "payload_type must be PAYLOAD_TYPE_JSON, PAYLOAD_TYPE_BINARY or "
				       "unset (JSON), got %d", (int)m->payload_type);
	if ((int64_t)e->payload.len > lim->max_payload)
		return input_error_set(err, 413, "payload_too_large", "event.payload",
				       "event.payload is %zu bytes, more than the limit of %lld",
				       e->payload.len, (long long)lim->max_payload);
	const char *payload = e->payload.len ? (const char *)e->payload.data : "";
	if (!binary) {
		/* A JSON payload is JSON, as POST /v1/events's payload is by construction, and
		 * read with the same flags (duplicate keys refused, any integer taken). */
		json_error_t jerr;
		json_t *doc = json_loadb(payload, e->payload.len, JSON_DECODE_ANY |
					 JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, &jerr);
		if (!doc)
			return input_error_set(err, 400, "invalid_argument", "event.payload",
					       "event.payload is not JSON (%s at byte %d); bytes of "
					       "any other kind need payload_type PAYLOAD_TYPE_BINARY",
					       jerr.text, jerr.position);
		json_decref(doc);
	}

	memset(ev, 0, sizeof(*ev));
	ev->event_type = type;
	ev->source = source;
	ev->source_event_id = *source_event_id ? source_event_id : NULL;
	ev->partition_key = *partition_key ? partition_key : NULL;
	/* an invalid trace context is ignored, as W3C asks of a receiver (POST /v1/events
	 * does the same with its header) */
	ev->traceparent = m->traceparent && trace_valid(m->traceparent) ? m->traceparent : NULL;
	ev->content_type = binary ? "application/octet-stream" : "application/json";
	ev->payload = payload;
	ev->payload_len = e->payload.len;
	ev->created_at = clock_now_ms();
	uuid_v7(ev->id);
	return 0;
}

int publish_add(struct publish_batch *b, const void *data, size_t len,
		const struct publish_limits *lim, long index, struct input_error *err)
{
	struct ingest_batch *in = &b->in;

	if (in->n >= lim->max_events) {
		input_error_set(err, 400, "invalid_argument", "",
				"a stream takes 1 to %zu events", lim->max_events);
		return in_stream(err, index);
	}
	if (b->bytes + (int64_t)len > lim->max_request) {
		input_error_set(err, 413, "payload_too_large", "",
				"the messages of one call are more than %lld bytes (max_request)",
				(long long)lim->max_request);
		return in_stream(err, index);
	}
	Outboxd__V1__OutboxEvent *m = outboxd__v1__outbox_event__unpack(NULL, len, data);
	if (!m) {
		input_error_set(err, 400, "invalid_argument", "",
				"the message is not an outboxd.v1.OutboxEvent (protobuf could not "
				"decode its %zu bytes)", len);
		return in_stream(err, index);
	}
	if (in->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 16;
		struct store_event_in *events = realloc(in->events, cap * sizeof(*events));
		if (events)
			in->events = events;
		void **messages = events ? realloc(b->messages, cap * sizeof(*messages)) : NULL;
		if (!messages) {
			outboxd__v1__outbox_event__free_unpacked(m, NULL);
			input_error_set(err, 500, "internal", "", "out of memory");
			return in_stream(err, index);
		}
		b->messages = messages;
		b->cap = cap;
	}
	if (check_event(m, lim, &in->events[in->n], err)) {
		outboxd__v1__outbox_event__free_unpacked(m, NULL);
		return in_stream(err, index);
	}
	b->messages[in->n++] = m;
	b->bytes += (int64_t)len;
	return 0;
}

int publish_reply(const struct publish_batch *b, void **out, size_t *len)
{
	Outboxd__V1__PublishReply reply = OUTBOXD__V1__PUBLISH_REPLY__INIT;
	const struct ingest_batch *in = &b->in;
	size_t n = in->n ? in->n : 1;
	char **ids = calloc(n, sizeof(*ids));
	uint32_t *dups = calloc(n, sizeof(*dups));
	int rc = -1;

	*out = NULL;
	if (!ids || !dups)
		goto out;
	for (size_t i = 0; i < in->n; i++) {
		ids[i] = (char *)in->events[i].id;
		if (in->events[i].duplicate)
			dups[reply.n_duplicates++] = (uint32_t)i;
	}
	reply.ids = ids;
	reply.n_ids = in->n;
	reply.duplicates = dups;
	*len = outboxd__v1__publish_reply__get_packed_size(&reply);
	if (!(*out = malloc(*len ? *len : 1)))
		goto out;
	outboxd__v1__publish_reply__pack(&reply, *out);
	rc = 0;
out:
	free(ids);
	free(dups);
	return rc;
}

void publish_batch_free(struct publish_batch *b)
{
	for (size_t i = 0; i < b->in.n; i++)
		outboxd__v1__outbox_event__free_unpacked(b->messages[i], NULL);
	free(b->messages);
	ingest_batch_free(&b->in);
	memset(b, 0, sizeof(*b));
}
