/* client.h: what every Kafka client of outboxd shares — the settings of DESIGN §7 and the
 * librdkafka configuration built from them (the intake's consumer, the sink's producer).
 *
 * Only src/kafka, intake/kafka_intake.c and deliver/sink_kafka.c include librdkafka. */
#ifndef OUTBOXD_KAFKA_CLIENT_H
#define OUTBOXD_KAFKA_CLIENT_H

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
};

/* A new librdkafka configuration with bootstrap.servers, client.id, the log callback
 * (librdkafka's lines go to outboxd's log), then defaults (NULL-terminated name, value
 * pairs: outboxd's choices for this client), then the operator's kafka_config, which
 * may override any of them (returned; owned by the caller until rd_kafka_new takes it).
 * role names the client ("producer"). NULL with a message in err when a property is
 * refused: the message names the property, never its value. */
rd_kafka_conf_t *kafka_conf_new(const struct kafka_settings *ks, const char *role,
				const char *const *defaults, char *err, size_t errlen);

/* Sets one property on conf; -1 with err naming it when librdkafka refuses it. */
int kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *err,
		   size_t errlen);

/* The status code an attempt records for a librdkafka error (DESIGN §3's mapped codes:
 * 503 brokers unreachable, 504 timed out, 404 unknown topic, 413 too large, 403 not
 * authorized, 520 anything else). */
int kafka_error_code(rd_kafka_resp_err_t err);

/* The dead-letter topic for a source topic: pattern with {topic} replaced. Returns 0, or
 * -1 when it does not fit out. */
int kafka_dead_letter_topic(const char *pattern, const char *source_topic, char *out,
			    size_t outlen);

#endif
