/* message.h: what outboxd publishes of a delivery, the same for the Kafka sink (an
 * attempt) and the dead-letter relay (a dead delivery): the message's key, its headers
 * and, as an OutboxEvent, its value.
 *
 * Pure building: no producing, no store. */
#ifndef OUTBOXD_KAFKA_MESSAGE_H
#define OUTBOXD_KAFKA_MESSAGE_H

#include <stdint.h>

#include "kafka/client_rdkafka.h"
#include "store/store.h"

/* The message key of c (borrowed from it): the event's partition key, else its id. */
const char *kafka_message_key(const struct store_claim *c);

/* The headers of every published message (docs/kafka.md): webhook-id (the event's
 * webhook_id), outboxd-event-type, outboxd-source, outboxd-delivery-id, traceparent (a
 * child span of the event's trace, span), content-type, then the headers of s (NULL:
 * none). Returned; librdkafka takes them with the message, else
 * rd_kafka_headers_destroy. */
rd_kafka_headers_t *kafka_message_headers(const struct store_claim *c,
					  const struct subscription *s, uint64_t span);

/* The OutboxEvent of c (returned in *out, framed per st: with the Schema Registry framing,
 * schema_id and message_index go in the frame: kafka_schema_id or a registered schema's
 * id, kafka/registry.h), its event.id the event's webhook_id; with target (NULL: none) its
 * endpoint (a kafka:// one as protocol KAFKA), payload type, headers, subscription id and
 * auth: what a dead-letter processor needs to deliver it. 0, or -1 (memory). */
int kafka_claim_envelope(const struct store_claim *c, const struct subscription *target,
			 const struct kafka_settings *st, uint32_t schema_id, uint32_t message_index,
			 void **out, size_t *len);

#endif
