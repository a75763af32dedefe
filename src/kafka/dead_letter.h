/* dead_letter.h: the dead-letter relay — exhausted deliveries that came from a Kafka
 * intake topic, published to their dead-letter topic (kafka_dead_letter).
 *
 * The dispatcher marks such a delivery in the same write that makes it dead
 * (store_result.dead_letter); this thread publishes what is marked, as an OutboxEvent
 * with the delivery's endpoint and auth (what a dead-letter processor needs to deliver
 * it) and the last error in headers, waits for the broker's acknowledgement, and only then
 * clears the mark (store_dead_letters_done). So a publish that fails, a broker that is
 * down or a crash (kill -9) leaves the mark, and the publish is made again (at least
 * once: a dead-letter processor drops a second copy of the same target as a duplicate).
 * It looks for marks every half second. Its own idempotent producer; a fatal error
 * recreates it. With kafka_schema_registry, each dead-letter topic's schema id comes from
 * the registry (the subject TOPIC-value, registered by the relay's own registry client);
 * while the registry gives none, the marks stay and the publish waits for it. */
#ifndef OUTBOXD_KAFKA_DEAD_LETTER_H
#define OUTBOXD_KAFKA_DEAD_LETTER_H

#include <stddef.h>

#include "core/subscriptions.h"
#include "kafka/client.h"
#include "store/store.h"

struct kafka_dead_letter;

/* Starts the relay (st, reg and ks borrowed, outliving it; ks->dead_letter set). NULL
 * with a message in err when its producer cannot be made. */
struct kafka_dead_letter *kafka_dead_letter_start(store *st, struct sub_registry *reg,
						  const struct kafka_settings *ks, char *err,
						  size_t errlen);

/* 0 when the producer can publish; -1 with the reason in why while it is recreated after
 * a fatal error. Any thread. */
int kafka_dead_letter_ready(void *relay, char *why, size_t whylen);

/* Stops the relay: what is not acknowledged yet keeps its mark for the next start. */
void kafka_dead_letter_stop(struct kafka_dead_letter *dl);

#endif
