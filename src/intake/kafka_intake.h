/* kafka_intake.h: the Kafka intake — the reference architecture's Outbox Processor and
 * DLT Processor (docs/reference.md, "Kafka: the three roles").
 *
 * One consumer thread reads the kafka_intake topics in the consumer group kafka_group
 * (earliest offset, manual commit). Each batch of messages becomes events and deliveries
 * in one store transaction; only then are the offsets committed, so a crash or a
 * rebalance re-reads, and the store's idempotency on (source "kafka:TOPIC", a key made of
 * the envelope's event id and its target, or of the message's place) drops the repeats
 * while each copy of one event for another target is its own delivery
 * (docs/kafka.md, "The idempotency key"). Formats per topic:
 *  - envelope: an OutboxEvent. With an endpoint it is delivered there with its own auth,
 *    through a subscription outboxd derives from the envelope's target (origin
 *    "kafka_envelope": same target, same subscription; never matched by fan-out); without
 *    one it fans out to the subscriptions that want its type.
 *  - dlt: the same, but the delivery starts at the scheduled layer: stored NEW, due
 *    after retry_interval, its first round a scheduled retry (store_event_in
 *    starts_scheduled), as a dead-letter processor does.
 *  - event: a JSON object or batch as POST /v1/events takes it, fanned out.
 * A message that cannot be decoded (or names a target that cannot be a subscription) is
 * stored as a dead delivery (422 undecodable, the reason as cause, the raw bytes as the
 * event's payload) and its offset committed: it never blocks its partition. */
#ifndef OUTBOXD_INTAKE_KAFKA_INTAKE_H
#define OUTBOXD_INTAKE_KAFKA_INTAKE_H

#include <stddef.h>

#include "core/subscriptions.h"
#include "kafka/client.h"
#include "store/store.h"
#include "store/writer.h"

struct kafka_intake;

struct kafka_intake_config {
	const struct kafka_settings *settings;  /* borrowed, outlives the intake */
	struct retry_policy defaults;           /* for the derived subscriptions */
	int64_t retry_interval_ms;              /* when a dlt message's first retry is due */
	int64_t max_payload;                    /* event format: as POST /v1/events */
	struct writer *writer;                  /* borrowed: stores each batch (store/writer.h) */
	void (*wake)(void *ctx);                /* new deliveries are due (the dispatcher) */
	void *wake_ctx;
};

/* Starts the consumer thread (st, reg borrowed). A broker that cannot be reached is not
 * an error: the intake keeps trying and kafka_intake_ready says so. NULL with a message
 * in err when the settings are refused. */
struct kafka_intake *kafka_intake_start(store *st, struct sub_registry *reg,
					const struct kafka_intake_config *cfg, char *err,
					size_t errlen);

/* 0 when the brokers answered the last probe (every few seconds); -1 with the reason in
 * why otherwise. Any thread. */
int kafka_intake_ready(void *intake, char *why, size_t whylen);

/* Stops reading; what was stored is committed, what was not is read again next time. */
void kafka_intake_stop(struct kafka_intake *ki);

#endif
