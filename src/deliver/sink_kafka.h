/* sink_kafka.h: the Kafka member of the sink family (sink.h) — the seeds' Event Hub relay.
 *
 * A subscription whose endpoint is kafka://TOPIC publishes each delivery to TOPIC with an
 * idempotent producer (acks=all). The attempt ends with librdkafka's delivery report: 200
 * and PROCESSED on the broker's acknowledgement, a mapped code (kafka/client.h) with
 * librdkafka's error name and text otherwise, so broker errors take the normal retries,
 * breaker and DLQ. The same producer writes exhausted deliveries that came from a Kafka
 * intake topic to their dead-letter topic (kafka_dead_letter). */
#ifndef OUTBOXD_DELIVER_SINK_KAFKA_H
#define OUTBOXD_DELIVER_SINK_KAFKA_H

#include "deliver/sink.h"
#include "kafka/client.h"

/* Opens the producer (ks borrowed; it must outlive the sink). A broker that cannot be
 * reached now is not an error: librdkafka reconnects, attempts fail until it does. */
struct sink *sink_kafka_open(const struct kafka_settings *ks, char *err, size_t errlen);

/* 0 when the producer can publish; -1 with the reason in why while it is recreated after
 * a fatal error (librdkafka). sink is the struct sink of sink_kafka_open. Any thread. */
int sink_kafka_ready(void *sink, char *why, size_t whylen);

/* The dispatcher's dead-letter hook (dispatcher_config.dead_letter, ctx = the Kafka
 * sink): when kafka_dead_letter is set and the delivery's event came from an intake topic
 * (source "kafka:TOPIC"), publishes the delivery as an OutboxEvent, with its endpoint and
 * auth (the DLT Processor of seed 000 needs them to deliver) and the last error in
 * headers, to the dead-letter topic. Fire and forget: the delivery stays in outboxd's DLQ
 * whatever happens; a failed publish is logged and counted. Dispatcher thread. */
void sink_kafka_dead_letter(void *ctx, const struct store_claim *c, const struct subscription *s,
			    const struct store_result *r);

#endif
