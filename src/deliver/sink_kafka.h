/* sink_kafka.h: the Kafka member of the sink family (sink.h): publishes deliveries to
 * topics, the reference architecture's Event Hub relay (docs/design/reference.md).
 *
 * A subscription whose endpoint is kafka://TOPIC publishes each delivery to TOPIC with an
 * idempotent producer (acks=all). The attempt ends with librdkafka's delivery report: 200
 * and PROCESSED on the broker's acknowledgement, a mapped code (kafka_error_code,
 * kafka/client_rdkafka.h) with librdkafka's error name and text otherwise, so broker errors take the normal retries,
 * breaker and DLQ. (Dead-letter topics are written by the relay of kafka/dead_letter.h,
 * with its own producer.) */
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

#endif
