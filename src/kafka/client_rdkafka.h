/* client_rdkafka.h: the librdkafka half of kafka/client.h — configurations with the
 * shared callbacks, producers, fatal errors and the error mapping — for the files that
 * talk to librdkafka themselves: src/kafka's, intake/kafka_intake.c and kafka_batch.c,
 * deliver/sink_kafka.c (scripts/check-layers.sh holds the list). Everyone else includes
 * kafka/client.h, which has no librdkafka type. */
#ifndef OUTBOXD_KAFKA_CLIENT_RDKAFKA_H
#define OUTBOXD_KAFKA_CLIENT_RDKAFKA_H

#include <stddef.h>

#include <librdkafka/rdkafka.h>

#include "kafka/client.h"

/* rk (c's handle) raised a fatal error: c is down, with the reason, until
 * kafka_client_up. Owner's thread. */
void kafka_client_down(struct kafka_client *c, rd_kafka_t *rk);

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

#endif
