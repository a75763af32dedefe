/* envelope.h: the OutboxEvent envelope of the Kafka topics
 * (proto/outboxd/v1/outbox_event.proto, a contract: docs/contracts.md) between
 * bytes and plain structs.
 *
 * Only envelope.c sees protobuf-c's generated types. Reading accepts plain protobuf and
 * the Schema Registry wire format (a protobuf message never starts with byte 0); writing
 * frames as the caller asks. envelope_subscription_doc turns the target an envelope names
 * (endpoint, auth, payload type, timeout, headers) into the subscription document through
 * which outboxd delivers it, with an id derived from the document itself. */
#ifndef OUTBOXD_KAFKA_ENVELOPE_H
#define OUTBOXD_KAFKA_ENVELOPE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model.h"

enum envelope_wire { ENVELOPE_WIRE_PLAIN = 0, ENVELOPE_WIRE_CONFLUENT = 1 };

/* AuthType and PayloadType values of the .proto (the contract's numbers). */
enum {
	ENVELOPE_AUTH_NONE = 0, ENVELOPE_AUTH_BASIC = 1, ENVELOPE_AUTH_OAUTH = 2,
	ENVELOPE_AUTH_HEADER_TOKEN = 3, ENVELOPE_AUTH_JWT_HEADER = 4,
	ENVELOPE_AUTH_QUERY_PARAMETER = 5, ENVELOPE_AUTH_API_KEY = 6,
};
enum { ENVELOPE_PAYLOAD_UNSPECIFIED = 0, ENVELOPE_PAYLOAD_JSON = 1, ENVELOPE_PAYLOAD_BINARY = 2 };
enum { ENVELOPE_PROTOCOL_UNSPECIFIED = 0, ENVELOPE_PROTOCOL_HTTP = 1, ENVELOPE_PROTOCOL_KAFKA = 2 };

/* A decoded envelope. Every string is owned and NUL-terminated ("" when the field was
 * empty, as proto3 cannot tell); payload is owned (NULL when empty). */
struct envelope {
	char *id, *type, *source, *source_event_id, *partition_key;
	void *payload;
	size_t payload_len;
	int64_t created_at_ms;
	char *endpoint;
	int protocol;              /* as sent, unknown values kept */
	int has_auth;
	int auth_type;             /* as sent, unknown values kept */
	char *username, *password, *token, *param, *header, *grant_type, *token_url,
		*client_id, *client_secret, *scope, *audience;
	int payload_type;          /* as sent */
	uint32_t timeout_ms;
	struct header_kv *headers; /* owned */
	size_t n_headers;
	char *subscription_id, *traceparent;
};

/* Decodes a Kafka message value (borrowed) into out (members returned; envelope_free).
 * Returns 0, or -1 with a one-line reason in why and out zeroed. An envelope without an
 * event or with an empty event.type is refused. */
int envelope_decode(const void *data, size_t len, struct envelope *out, char *why, size_t whylen);
void envelope_free(struct envelope *e);   /* frees members, zeroes e */

/* What envelope_encode writes (all borrowed; NULL strings are empty fields). */
struct envelope_out {
	const char *id, *type, *source, *source_event_id, *partition_key;
	const void *payload;
	size_t payload_len;
	int64_t created_at_ms;
	const char *endpoint;
	int protocol;
	int payload_type;
	uint32_t timeout_ms;
	const struct header_kv *headers;
	size_t n_headers;
	const char *traceparent, *subscription_id;
	const struct subscription *auth_from; /* its auth goes in the envelope; NULL: none */
};

/* The place of OutboxEvent among the top-level messages of outbox_event.proto (Event,
 * Auth, OutboxEvent): what a Schema Registry frame's message-index list names, so that
 * a reader holding the registered schema decodes the right message. A unit test checks
 * it against the .proto text (tests/unit/kafka/test_registry.c). */
#define ENVELOPE_OUTBOX_EVENT_INDEX 2

/* Encodes in with the framing wire (confluent: byte 0, schema_id big-endian, then the
 * message-index list naming message_index, the place of OutboxEvent among the schema's
 * top-level messages: [0] as one 0 byte, else the zig-zag varints of count 1 and the
 * index). *out is returned (free it). Returns 0, or -1 (memory). */
int envelope_encode(const struct envelope_out *in, enum envelope_wire wire, uint32_t schema_id,
		    uint32_t message_index, void **out, size_t *len);

/* The subscription document (returned) for the target e names: endpoint (protocol KAFKA:
 * kafka://endpoint), auth, timeout, headers, event_types [], origin
 * "kafka_envelope", name "envelope:" + 16 hex digits of the id. The id, written to id_out,
 * is a SHA-256 of the canonical document shaped as a UUID (version 8), so one target maps
 * to one subscription and a changed credential to another. NULL with why set when the
 * target cannot be a subscription (an unknown auth type, a missing credential); the
 * caller still validates the document (sub_codec_parse) for the rest (the URL). */
json_t *envelope_subscription_doc(const struct envelope *e, char id_out[UUID_STR_LEN], char *why,
				  size_t whylen);

/* A UUID-shaped id (version 8, RFC 9562 custom) from a SHA-256 of len bytes of data. */
void envelope_hash_id(const void *data, size_t len, char out[UUID_STR_LEN]);

/* What an envelope shows in place of a credential. */
#define ENVELOPE_MASK "********"

/* The credentials of an envelope are auth.password, auth.token, auth.client_secret and
 * the value of a header named Authorization (any case): what a subscription's read masks.
 * envelope_redact writes to *out (returned, free it) a copy of the message value data
 * (borrowed) with each credential that is set and not already ENVELOPE_MASK replaced by
 * it, framed as data was (plain, or the same Schema Registry frame). Returns 1 when it
 * wrote one; 0 when data holds no credential to mask or is not an OutboxEvent (*out
 * NULL: keep data as it is); -1 when memory ran out. */
int envelope_redact(const void *data, size_t len, void **out, size_t *out_len);

/* 1 when the decoded envelope e (borrowed) carries a credential (masked or not): the
 * message it came from is then worth envelope_redact. */
int envelope_has_credentials(const struct envelope *e);

/* The JSON view (returned) of an OutboxEvent message value (borrowed), as the API shows
 * the envelope of a delivery:
 *   {"raw_base64": the value, credentials masked (envelope_redact),
 *    "wire_format": "plain" | "confluent" (a Schema Registry frame; "schema_id" then),
 *    "redacted": whether the envelope carries credentials (shown masked),
 *    "parsed": the OutboxEvent's fields (envelope_to_json) or null,
 *    "parse_error": why it could not be parsed, or null}.
 * NULL when memory ran out. */
json_t *envelope_view(const void *data, size_t len);

/* The fields of a decoded envelope (borrowed) as JSON (returned), under the .proto's
 * field names: {"event": {"id", "type", "source", "source_event_id", "partition_key",
 * "payload" (the JSON value when payload_type is not BINARY and the bytes are JSON) or
 * "payload_base64", "created_at_ms"}, "endpoint", "protocol", "auth" (null, or its type
 * and the fields that are set, credentials ENVELOPE_MASK), "payload_type", "timeout_ms",
 * "headers" (an object; an Authorization value ENVELOPE_MASK), "subscription_id",
 * "traceparent"}. Enum values by their .proto names, unknown ones as numbers. NULL when
 * memory ran out. */
json_t *envelope_to_json(const struct envelope *e);

#endif
