/* client.c: the librdkafka configuration every outboxd Kafka client starts from (see
 * client.h, client_rdkafka.h and check.h). Property values are never logged: kafka_config may
 * carry SASL passwords. */
#include "kafka/client_rdkafka.h"
#include "kafka/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/metrics.h"
#include "util/log.h"

/* librdkafka's own log lines (broker down, metadata errors) at outboxd's levels. They
 * name brokers and topics, never property values. */
static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	(void)rk;
	if (strcmp(fac, "FATAL") == 0)
		return; /* the error callback logs it, once, with what follows */
	if (level <= 3)
		log_error("kafka: %s: %s", fac, buf);
	else if (level <= 4)
		log_warn("kafka: %s: %s", fac, buf);
	else if (level <= 6)
		log_info("kafka: %s: %s", fac, buf);
	else
		log_debug("kafka: %s: %s", fac, buf);
}

/* librdkafka's errors (with an error callback set it no longer logs them itself): a
 * broker down is a warning, librdkafka keeps reconnecting; a fatal error is logged once
 * and counted, and the client's owner recreates it (kafka_client_fatal). Reasons name
 * brokers and topics, never property values. */
static void error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	const struct kafka_client *c = opaque;
	const char *role = c ? c->role : "client";
	if (err == RD_KAFKA_RESP_ERR__FATAL) {
		char why[512];
		rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, why, sizeof(why));
		log_error("kafka %s: fatal error %s: %s; the client is recreated", role,
			  rd_kafka_err2name(orig), why);
		metrics_kafka_fatal_error(role);
		return;
	}
	log_warn("kafka %s: %s: %s", role, rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
}

void kafka_client_init(struct kafka_client *c, const char *role)
{
	c->role = role;
	atomic_store(&c->down, 0);
	pthread_mutex_init(&c->mu, NULL);
	c->why[0] = '\0';
}

void kafka_client_destroy(struct kafka_client *c)
{
	pthread_mutex_destroy(&c->mu);
}

void kafka_client_down(struct kafka_client *c, rd_kafka_t *rk)
{
	char why[400] = "";
	if (rk)
		kafka_client_fatal(rk, why, sizeof(why));
	pthread_mutex_lock(&c->mu);
	snprintf(c->why, sizeof(c->why), "kafka %s: recreating it after a fatal error: %s",
		 c->role, why);
	pthread_mutex_unlock(&c->mu);
	atomic_store(&c->down, 1);
}

void kafka_client_up(struct kafka_client *c)
{
	if (atomic_exchange(&c->down, 0))
		log_info("kafka %s: recreated after a fatal error; working again", c->role);
}

int kafka_client_ready(struct kafka_client *c, char *why, size_t whylen)
{
	if (!atomic_load(&c->down))
		return 0;
	pthread_mutex_lock(&c->mu);
	snprintf(why, whylen, "%s", c->why);
	pthread_mutex_unlock(&c->mu);
	return -1;
}

int kafka_client_fatal(rd_kafka_t *rk, char *why, size_t whylen)
{
	return rd_kafka_fatal_error(rk, why, why ? whylen : 0) != RD_KAFKA_RESP_ERR_NO_ERROR;
}

int kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *err,
		   size_t errlen)
{
	char why[256];
	if (rd_kafka_conf_set(conf, name, value, why, sizeof(why)) != RD_KAFKA_CONF_OK) {
		/* why may quote the value: say only which property and that it was refused */
		snprintf(err, errlen, "kafka: property %s was refused by librdkafka", name);
		return -1;
	}
	return 0;
}

/* Applies "k=v;k=v" (spaces around keys trimmed). */
static int apply_properties(rd_kafka_conf_t *conf, const char *text, char *err, size_t errlen)
{
	char *copy = strdup(text), *save = NULL;
	int rc = 0;
	if (!copy) {
		snprintf(err, errlen, "kafka: out of memory");
		return -1;
	}
	for (char *item = strtok_r(copy, ";", &save); item && !rc; item = strtok_r(NULL, ";", &save)) {
		while (*item == ' ')
			item++;
		if (!*item)
			continue;
		char *eq = strchr(item, '=');
		if (!eq || eq == item) {
			snprintf(err, errlen, "kafka_config: \"key=value\" expected in each ;-separated item");
			rc = -1;
			break;
		}
		*eq = '\0';
		for (char *e = eq - 1; e > item && *e == ' '; e--)
			*e = '\0';
		rc = kafka_conf_set(conf, item, eq + 1, err, errlen);
	}
	memset(copy, 0, strlen(text)); /* may hold a password */
	free(copy);
	return rc;
}

rd_kafka_conf_t *kafka_conf_new(const struct kafka_settings *ks, struct kafka_client *client,
				const char *const *defaults, char *err, size_t errlen)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char client_id[96], host[64] = "localhost";
	gethostname(host, sizeof(host) - 1);
	snprintf(client_id, sizeof(client_id), "outboxd-%s-%s", client->role, host);
	/* reconnect.backoff.max.ms: librdkafka backs off up to 10 s between attempts to
	 * reach a broker that went down; 1 s lets the clients (and readiness) follow its
	 * return within seconds, for one connection attempt a second while it is away */
	if (kafka_conf_set(conf, "bootstrap.servers", ks->brokers, err, errlen) ||
	    kafka_conf_set(conf, "client.id", client_id, err, errlen) ||
	    kafka_conf_set(conf, "reconnect.backoff.max.ms", "1000", err, errlen)) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	for (const char *const *d = defaults; d && d[0]; d += 2) {
		if (kafka_conf_set(conf, d[0], d[1], err, errlen)) {
			rd_kafka_conf_destroy(conf);
			return NULL;
		}
	}
	if ((ks->properties && *ks->properties &&
	     apply_properties(conf, ks->properties, err, errlen))) {
		rd_kafka_conf_destroy(conf);
		return NULL;
	}
	rd_kafka_conf_set_log_cb(conf, log_cb);
	rd_kafka_conf_set_error_cb(conf, error_cb);
	rd_kafka_conf_set_opaque(conf, client);
	return conf;
}

int kafka_properties_check(const char *brokers, const char *properties, char *err,
			   size_t errlen)
{
	struct kafka_settings ks = {.brokers = brokers, .properties = properties};
	struct kafka_client client;
	kafka_client_init(&client, "check");
	rd_kafka_conf_t *conf = kafka_conf_new(&ks, &client, NULL, err, errlen);
	if (conf)
		rd_kafka_conf_destroy(conf);
	kafka_client_destroy(&client);
	return conf ? 0 : -1;
}

rd_kafka_t *kafka_producer_new(const struct kafka_settings *ks, struct kafka_client *client,
			       void (*dr_msg_cb)(rd_kafka_t *rk, const rd_kafka_message_t *m,
						 void *opaque),
			       char *err, size_t errlen)
{
	/* acks=all and idempotence: a message is acknowledged once, by every in-sync
	 * replica; message.timeout.ms bounds how long librdkafka keeps trying one */
	static const char *const defaults[] = {
		"enable.idempotence", "true", "acks", "all", "linger.ms", "2",
		"message.timeout.ms", "30000", NULL,
	};
	char why[512];
	rd_kafka_conf_t *conf = kafka_conf_new(ks, client, defaults, err, errlen);
	if (!conf)
		return NULL;
	rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, why, sizeof(why));
	if (!rk) {
		snprintf(err, errlen, "kafka %s: %s", client->role, why);
		rd_kafka_conf_destroy(conf);
	}
	return rk; /* the handle owns conf */
}

int kafka_error_code(rd_kafka_resp_err_t err)
{
	switch (err) {
	case RD_KAFKA_RESP_ERR_NO_ERROR:
		return 200;
	case RD_KAFKA_RESP_ERR__TRANSPORT:
	case RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN:
	case RD_KAFKA_RESP_ERR__RESOLVE:
	case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
	case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
	case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS:
	case RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND:
	case RD_KAFKA_RESP_ERR__FATAL:         /* the producer is recreated: try again */
	case RD_KAFKA_RESP_ERR__PURGE_QUEUE:   /* ... its messages were purged */
	case RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
		return 503;
	case RD_KAFKA_RESP_ERR__MSG_TIMED_OUT:
	case RD_KAFKA_RESP_ERR__TIMED_OUT:
	case RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT:
		return 504;
	case RD_KAFKA_RESP_ERR__UNKNOWN_TOPIC:
	case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
	case RD_KAFKA_RESP_ERR__UNKNOWN_PARTITION:
		return 404;
	case RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE:
		return 413;
	case RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED:
	case RD_KAFKA_RESP_ERR_CLUSTER_AUTHORIZATION_FAILED:
	case RD_KAFKA_RESP_ERR__AUTHENTICATION:
	case RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED:
		return 403;
	case RD_KAFKA_RESP_ERR__SSL:
		return 525;
	default:
		return 520;
	}
}

int kafka_dead_letter_topic(const char *pattern, const char *source_topic, char *out,
			    size_t outlen)
{
	const char *mark = strstr(pattern, "{topic}");
	int n = mark ? snprintf(out, outlen, "%.*s%s%s", (int)(mark - pattern), pattern,
				source_topic, mark + 7)
		     : snprintf(out, outlen, "%s", pattern);
	return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

void kafka_settings_from_config(const struct config *cfg, struct kafka_settings *out)
{
	*out = (struct kafka_settings){
		.brokers = cfg->kafka_brokers,
		.properties = cfg->kafka_config,
		.group = cfg->kafka_group,
		.intake = cfg->kafka_intake,
		.dead_letter = cfg->kafka_dead_letter,
		.wire = cfg->kafka_wire_format && strcmp(cfg->kafka_wire_format, "confluent") == 0
				? ENVELOPE_WIRE_CONFLUENT : ENVELOPE_WIRE_PLAIN,
		.schema_id = (uint32_t)cfg->kafka_schema_id,
		.schema_registry = cfg->kafka_schema_registry,
		.max_backlog = cfg->kafka_max_backlog,
	};
}

int kafka_settings_on(const struct kafka_settings *ks)
{
	return ks->brokers && *ks->brokers;
}
