/* kafka_intake_int.h: what the two files of the Kafka intake share — kafka_intake.c (the
 * consumer: its loop, offsets, readiness and backpressure) and kafka_batch.c (a batch of
 * messages into events and deliveries, stored through the writer). Nobody else includes
 * it. */
#ifndef OUTBOXD_INTAKE_KAFKA_INTAKE_INT_H
#define OUTBOXD_INTAKE_KAFKA_INTAKE_INT_H

#include "intake/ingest.h"
#include "intake/kafka_intake.h"
#include "kafka/client_rdkafka.h"
#include "kafka/envelope.h"

#define BATCH_MAX 500          /* messages per store transaction at most */
#define TOPICS_MAX 64
#define SOURCE_MAX 272         /* "kafka:" + a topic (at most 249) */
#define UPSTREAM_ID_MAX 255    /* an envelope's event.id, kept as the webhook-id */

enum intake_format { FORMAT_ENVELOPE, FORMAT_DLT, FORMAT_EVENT };

struct topic_conf {
	char name[256];
	enum intake_format format;
	char source[SOURCE_MAX];               /* "kafka:" + name */
	char undecodable_sub[UUID_STR_LEN];    /* the id undecodable messages are filed under */
};

/* One message of a batch turned into what the store takes. Strings point into the
 * message, the decoded envelope, or the small buffers here. */
struct item {
	rd_kafka_message_t *msg;
	struct envelope env;
	int has_env;
	struct ingest_batch json;              /* FORMAT_EVENT */
	int has_json;
	char source_event_id[48];              /* "PARTITION/OFFSET": the message's place */
	char key[UPSTREAM_ID_MAX + 64];        /* an envelope's idempotency key (key_of) */
	char (*event_keys)[72];                /* FORMAT_EVENT: the keys of a batch message's
	                                          events without one ("P/O/INDEX"), owned */
	char sub_id[UUID_STR_LEN];
	void *masked;                          /* the message with its credentials masked,
	                                          owned (the event's envelope), or NULL */
	size_t masked_len;
	char why[512];
	char dlt_message[128];
	int fanned;                            /* its subscription ids are in the batch's fan */
	size_t fan_start;                      /* ... from here */
	size_t ev_index;                       /* its event in the batch */
};


/* What turning a batch into events needs: the topics, the store and its writer, and
 * the derived subscriptions known to exist (ids), so a batch asks the store once. Used by
 * the intake's thread only. */
struct kafka_batch {
	store *st;
	struct sub_registry *reg;
	struct kafka_intake_config cfg;
	struct topic_conf topics[TOPICS_MAX];
	size_t n_topics;
	char (*known)[UUID_STR_LEN];
	size_t n_known, cap_known;
};

/* Reads kafka_intake ("TOPIC[:FORMAT],...") into b's topics. 0, or -1 with err set. */
int kafka_batch_topics(struct kafka_batch *b, const char *list, char *err, size_t errlen);

/* Turns the n messages of items into events and stores them through the writer, in one
 * transaction; *undecodable counts those stored as dead deliveries. STORE_OK, or an
 * error when the store is unavailable (the caller tries the same batch again). */
int kafka_batch_store(struct kafka_batch *b, struct item *items, size_t n, int *undecodable);

/* Frees what an item holds besides its message. */
void kafka_batch_item_clear(struct item *it);

#endif
