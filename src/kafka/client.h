/* client.h: what every Kafka client of outboxd shares — the kafka_* settings
 * (docs/kafka.md) and the librdkafka configuration built from them (the intake's
 * consumer, the sink's producer).
 *
 * Only src/kafka, intake/kafka_intake.c and deliver/sink_kafka.c include librdkafka. */
#ifndef OUTBOXD_KAFKA_CLIENT_H
#define OUTBOXD_KAFKA_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "kafka/envelope.h"

/* The Kafka settings (borrowed strings from struct config). */
struct kafka_settings {
	const char *brokers;        /* bootstrap servers; NULL or "" = Kafka off */
	const char *properties;     /* "k=v;k=v": extra librdkafka properties (may hold secrets) */
	const char *group;          /* consumer group of the intake */
	const char *intake;         /* TOPIC[:FORMAT],... */
	const char *dead_letter;    /* topic pattern, {topic} = the source topic; NULL = off */
	enum envelope_wire wire;    /* framing of the envelopes outboxd writes */
	uint32_t schema_id;         /* with ENVELOPE_WIRE_CONFLUENT */
	int max_backlog;            /* intake pause threshold */
	const char *instance_id;    /* the intake's group.instance.id (static membership: this
	                               outboxd's id, kept in its data directory); NULL: none */
};

/* What the owner of an outboxd Kafka client puts first in the struct it hands librdkafka
 * as its opaque (kafka_conf_new): the shared error callback finds the client's role
 * there, and readiness whether the client is being recreated after a fatal error. */
struct kafka_client {
	const char *role;           /* "producer", "intake" or "dead-letter": in client.id,
	                               log lines and outboxd_kafka_fatal_errors_total */
	atomic_int down;            /* 1 from a fatal error until the owner recreated it */
	pthread_mutex_t mu;         /* guards why */
	char why[512];
};

void kafka_client_init(struct kafka_client *c, const char *role);
void kafka_client_destroy(struct kafka_client *c);
/* rk (c's handle) raised a fatal error: c is down, with the reason, until
 * kafka_client_up. Owner's thread. */
void kafka_client_down(struct kafka_client *c, rd_kafka_t *rk);
void kafka_client_up(struct kafka_client *c);
/* 0 when c is up; -1 with the reason in why while it is down. Any thread. */
int kafka_client_ready(struct kafka_client *c, char *why, size_t whylen);

/* A new librdkafka configuration with bootstrap.servers, client.id, the log callback
 * (librdkafka's lines go to outboxd's log), the error callback (errors logged; a fatal
 * one logged once and counted: its owner must recreate the client, see
 * kafka_client_fatal), client as the opaque (borrowed, outlives the handle; the owner's
 * struct may extend it), then defaults (NULL-terminated name, value pairs: outboxd's
 * choices for this client), then the operator's kafka_config, which may override any of
 * them (returned; owned by the caller until rd_kafka_new takes it). NULL with a message
 * in err when a property is refused: the message names the property, never its value. */
rd_kafka_conf_t *kafka_conf_new(const struct kafka_settings *ks, struct kafka_client *client,
				const char *const *defaults, char *err, size_t errlen);

/* A producer (outboxd's producer choices: idempotence, acks=all; kafka_config on top)
 * for client, whose delivery reports go to dr_msg_cb (served by rd_kafka_poll). NULL with
 * a message in err. */
rd_kafka_t *kafka_producer_new(const struct kafka_settings *ks, struct kafka_client *client,
			       void (*dr_msg_cb)(rd_kafka_t *rk, const rd_kafka_message_t *m,
						 void *opaque),
			       char *err, size_t errlen);

/* 1 when rk raised a fatal error (librdkafka: the handle can do nothing more; an
 * idempotent producer that lost its sequence, a consumer fenced by another with its
 * group.instance.id), with its reason in why; its owner destroys and recreates it. */
int kafka_client_fatal(rd_kafka_t *rk, char *why, size_t whylen);

/* Sets one property on conf; -1 with err naming it when librdkafka refuses it. */
int kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *err,
		   size_t errlen);

/* The status code an attempt records for a librdkafka error (the mapped codes of
 * docs/kafka.md: 503 brokers unreachable or the producer being recreated after a fatal
 * error, 504 timed out, 404 unknown topic, 413 too large, 403 not authorized, 520
 * anything else). */
int kafka_error_code(rd_kafka_resp_err_t err);

/* The dead-letter topic for a source topic: pattern with {topic} replaced. Returns 0, or
 * -1 when it does not fit out. */
int kafka_dead_letter_topic(const char *pattern, const char *source_topic, char *out,
			    size_t outlen);

#endif
