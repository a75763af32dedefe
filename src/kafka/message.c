/* message.c: what outboxd publishes of a delivery (see message.h). */
#include "kafka/message.h"

#include <strings.h>

#include "core/trace.h"

const char *kafka_message_key(const struct store_claim *c)
{
	return c->partition_key ? c->partition_key : c->event_id;
}

rd_kafka_headers_t *kafka_message_headers(const struct store_claim *c,
					  const struct subscription *s, uint64_t span)
{
	rd_kafka_headers_t *h = rd_kafka_headers_new(8 + (s ? s->n_headers : 0));
	char trace[TRACEPARENT_LEN];
	trace_child(c->traceparent, c->event_id, span, trace);
	rd_kafka_header_add(h, "webhook-id", -1, store_claim_webhook_id(c), -1);
	rd_kafka_header_add(h, "outboxd-event-type", -1, c->event_type, -1);
	rd_kafka_header_add(h, "outboxd-source", -1, c->source ? c->source : "", -1);
	rd_kafka_header_add(h, "outboxd-delivery-id", -1, c->delivery_id, -1);
	rd_kafka_header_add(h, "traceparent", -1, trace, -1);
	rd_kafka_header_add(h, "content-type", -1, c->content_type, -1);
	for (size_t i = 0; s && i < s->n_headers; i++)
		rd_kafka_header_add(h, s->headers[i].name, -1, s->headers[i].value, -1);
	return h;
}

int kafka_claim_envelope(const struct store_claim *c, const struct subscription *target,
			 const struct kafka_settings *st, uint32_t schema_id, uint32_t message_index,
			 void **out, size_t *len)
{
	struct envelope_out e = {
		.id = store_claim_webhook_id(c), /* the event keeps its id at every hop */
		.type = c->event_type,
		.source = c->source,
		.source_event_id = c->source_event_id,
		.partition_key = c->partition_key,
		.payload = c->payload,
		.payload_len = c->payload_len,
		.created_at_ms = c->event_created_at,
		.traceparent = c->traceparent[0] ? c->traceparent : NULL,
		.auth_from = target,
	};
	if (target) {
		e.endpoint = target->endpoint;
		if (strncasecmp(e.endpoint, "kafka://", 8) == 0) {
			e.endpoint += 8;
			e.protocol = ENVELOPE_PROTOCOL_KAFKA;
		}
		e.payload_type = target->payload_format == PAYLOAD_BINARY ? ENVELOPE_PAYLOAD_BINARY
									  : ENVELOPE_PAYLOAD_JSON;
		e.headers = target->headers;
		e.n_headers = target->n_headers;
		e.subscription_id = target->id;
	}
	return envelope_encode(&e, st->wire, schema_id, message_index, out, len);
}
