/* client.h: what every Kafka client of outboxd shares — the kafka_* settings
 * (docs/kafka.md) and each client's readiness — without librdkafka's types, so that
 * serve.c and the headers of the intake, the sink and the dead-letter relay can name them
 * without including librdkafka. The librdkafka half (configurations, producers, error
 * mapping) is kafka/client_rdkafka.h, for the glue files only (scripts/check-layers.sh
 * lists them). */
#ifndef OUTBOXD_KAFKA_CLIENT_H
#define OUTBOXD_KAFKA_CLIENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

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
	const char *schema_registry; /* with ENVELOPE_WIRE_CONFLUENT: the registry whose ids the
	                                sink writes instead of schema_id (kafka/registry.h);
	                                NULL or "" = none. May hold credentials */
	int max_backlog;            /* intake pause threshold */
	const char *instance_id;    /* the intake's group.instance.id (static membership: this
	                               outboxd's id, kept in its data directory); NULL: none */
};

struct config;

/* The Kafka settings of cfg (borrowed: out points into it, so cfg must outlive out; no
 * instance_id, which only the intake has). Kafka is on when out->brokers is not empty:
 * kafka_settings_on. */
void kafka_settings_from_config(const struct config *cfg, struct kafka_settings *out);
int kafka_settings_on(const struct kafka_settings *ks);
/* The Schema Registry whose ids the envelopes carry: its URL with the Schema Registry
 * framing and kafka_schema_registry set, else NULL. */
static inline const char *kafka_settings_registry(const struct kafka_settings *ks)
{
	return ks->wire == ENVELOPE_WIRE_CONFLUENT && ks->schema_registry && *ks->schema_registry
		       ? ks->schema_registry
		       : NULL;
}

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
/* c's client was recreated after a fatal error (kafka_client_down): up again. Owner's
 * thread. */
void kafka_client_up(struct kafka_client *c);
/* 0 when c is up; -1 with the reason in why while it is down. Any thread. */
int kafka_client_ready(struct kafka_client *c, char *why, size_t whylen);

/* The dead-letter topic for a source topic: pattern with {topic} replaced. Returns 0, or
 * -1 when it does not fit out. */
int kafka_dead_letter_topic(const char *pattern, const char *source_topic, char *out,
			    size_t outlen);

#endif
