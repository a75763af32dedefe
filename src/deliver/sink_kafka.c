/* sink_kafka.c: the Kafka member of the sink family (sink.h): publishes deliveries to
 * topics, the reference architecture's Event Hub relay (docs/reference.md).
 *
 * A subscription whose endpoint is kafka://TOPIC publishes each delivery to TOPIC with an
 * idempotent producer (acks=all). The attempt ends with librdkafka's delivery report: 200
 * and PROCESSED on the broker's acknowledgement, a mapped code (kafka_error_code,
 * kafka/client_rdkafka.h) with librdkafka's error name and text otherwise, so broker
 * errors take the normal retries, breaker and DLQ. Opened when kafka_brokers is set.
 * With kafka_dead_letter, it also says which dead deliveries go to a dead-letter topic:
 * those of events from an intake topic (dead_letter op); the relay of
 * kafka/dead_letter.h publishes them, with its own producer.
 *
 * One producer per process (enable.idempotence, acks=all). Each attempt is one message
 * with its own record (struct kafka_record) as librdkafka's opaque, so a delivery report
 * that arrives after its attempt was abandoned (shutdown, or its timeout) finds a record
 * without a round and is dropped. An attempt ends at the subscription's timeout for it
 * (sink_round.timeout_ms) with 504 when no report came by then, so a round lasts what its
 * tries and timeouts say however long librdkafka keeps the message (message.timeout.ms);
 * the message may still be published later (at least once: the retry sends a copy). librdkafka signals its main queue on a pipe that the dispatcher
 * watches; delivery reports are served by rd_kafka_poll on the dispatcher's thread.
 *
 * With kafka_schema_registry (and kafka_wire_format confluent), an envelope's frame carries
 * the schema id the registry gave its topic's subject (kafka/registry.h: registered once
 * on the registry's own thread, then cached). An attempt of a subject not known yet waits
 * for the registration (ks->waiting, within its timeout; the registry's answer wakes the
 * pipe); while the registry cannot give an id, the attempt fails with 503 before anything
 * is produced, and the delivery takes its retries: no message goes out without a valid
 * id.
 *
 * A fatal error (librdkafka: an idempotent producer that can no longer keep its
 * sequence) leaves the producer unusable: after the poll that reported it, the producer
 * is purged (the attempts waiting for a report end with 503 and take their retries),
 * destroyed and opened anew on the dispatcher's thread, and the sink answers "not ready"
 * (sink_ready) until it is. */
#include "deliver/sink.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/config.h"
#include "core/metrics.h"
#include "core/trace.h"
#include "kafka/client.h"
#include "kafka/client_rdkafka.h"
#include "kafka/envelope.h"
#include "kafka/message.h"
#include "kafka/registry.h"
#include "util/clock.h"
#include "util/log.h"

#define TOPIC_MAX 256
#define REOPEN_EVERY_MS 1000  /* a producer that could not be recreated is tried again */

struct kafka_sink;

/* One message handed to librdkafka, from producev to its delivery report; before that,
 * while its topic's schema id is being registered, an attempt waiting in ks->waiting.
 * sj is NULL once its attempt was abandoned (shutdown, its timeout). */
struct kafka_record {
	struct kafka_sink *ks;
	struct sink_round *sj;
	int64_t deadline_us;               /* sj: the attempt ends by then (monotonic) */
	char topic[TOPIC_MAX];
	struct kafka_record *prev, *next;  /* in ks->records until the report frees it (or
	                                      next in ks->waiting) */
};

struct kafka_sink {
	struct kafka_client client;  /* first: librdkafka's opaque (kafka/client.h) */
	struct sink_env env;
	struct kafka_settings settings_of; /* from the settings (strings borrowed from them) */
	const struct kafka_settings *settings; /* &settings_of */
	rd_kafka_t *rk;              /* NULL while a fatal error's recreation failed */
	rd_kafka_queue_t *mainq;
	int pipe_rd, pipe_wr;        /* librdkafka writes a byte when its main queue has work */
	int in_flight;               /* records with a round */
	int64_t next_deadline_us;    /* the soonest deadline of a record with a round, or
	                                later (0: none known) */
	struct kafka_record *records; /* every record librdkafka holds */
	int64_t reopen_at_ms;        /* rk NULL: when to try opening it again (monotonic) */
	schema_registry *registry;   /* kafka_schema_registry set; NULL: kafka_schema_id */
	struct kafka_record *waiting; /* attempts waiting for their topic's schema id (each
	                                 with a round; librdkafka has not seen them) */
};

static void record_link(struct kafka_record *r)
{
	struct kafka_sink *ks = r->ks;
	r->prev = NULL;
	r->next = ks->records;
	if (ks->records)
		ks->records->prev = r;
	ks->records = r;
}

static void record_unlink(struct kafka_record *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		r->ks->records = r->next;
	if (r->next)
		r->next->prev = r->prev;
	r->prev = r->next = NULL;
}

/* Ends the attempt of r's round with err (NO_ERROR: acknowledged at partition/offset). */
static void record_report(struct kafka_record *r, rd_kafka_resp_err_t err, int32_t partition,
			  int64_t offset)
{
	struct kafka_sink *ks = r->ks;
	struct sink_round *sj = r->sj;
	r->sj = NULL;
	ks->in_flight--;
	sj->code = kafka_error_code(err);
	sj->retry_after_ms = -1;
	if (!err) {
		snprintf(sj->message, SINK_MSG_LEN, "acknowledged by Kafka (partition %d, offset %lld)",
			 (int)partition, (long long)offset);
		sj->cause[0] = '\0';
	} else {
		snprintf(sj->message, SINK_MSG_LEN, "%s", rd_kafka_err2name(err));
		snprintf(sj->cause, SINK_CAUSE_LEN, "topic %s: %s", r->topic, rd_kafka_err2str(err));
		metrics_kafka_produce_error(r->topic);
	}
	ks->env.done(ks->env.ctx, sj);
}

/* librdkafka's delivery report, served by rd_kafka_poll on the dispatcher's thread. */
static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	(void)rk;
	(void)opaque;
	struct kafka_record *r = m->_private;
	if (!r)
		return;
	record_unlink(r);
	if (r->sj) {
		record_report(r, m->err, m->partition, m->offset);
	} else if (m->err) {
		/* an attempt that timed out, or was handed back at shutdown */
		log_debug("kafka: a message to %s of an attempt that ended was not acknowledged: "
			  "%s", r->topic, rd_kafka_err2str(m->err));
	}
	free(r);
}

/* Hands one message to librdkafka with r as its opaque (linked until its report), keyed
 * by the event's partition key, else its id. On failure (returned) the headers are
 * destroyed and r is unlinked, still the caller's. */
static rd_kafka_resp_err_t produce(struct kafka_sink *ks, struct kafka_record *r,
				   const struct store_claim *c, const void *value, size_t len,
				   rd_kafka_headers_t *hdrs)
{
	const char *key = kafka_message_key(c);
	record_link(r);
	rd_kafka_resp_err_t err = rd_kafka_producev(
		ks->rk, RD_KAFKA_V_TOPIC(r->topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
		RD_KAFKA_V_KEY(key, strlen(key)), RD_KAFKA_V_VALUE((void *)value, len),
		RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_OPAQUE(r), RD_KAFKA_V_END);
	if (err) {
		rd_kafka_headers_destroy(hdrs);
		record_unlink(r);
	}
	return err;
}

/* ---- the producer's life: opened, and recreated after a fatal error ------------------ */

/* Opens the producer on ks's pipe. 0, or -1 with err set. */
static int producer_open(struct kafka_sink *ks, char *err, size_t errlen)
{
	if (!(ks->rk = kafka_producer_new(ks->settings, &ks->client, dr_msg_cb, err, errlen)))
		return -1;
	ks->mainq = rd_kafka_queue_get_main(ks->rk);
	rd_kafka_queue_io_event_enable(ks->mainq, ks->pipe_wr, "1", 1);
	return 0;
}

/* Purges and destroys the producer: the reports of purged messages end their attempts
 * (503, tried again); an attempt whose message got no report at all ends the same way,
 * and every record is freed. */
static void producer_close(struct kafka_sink *ks)
{
	if (ks->rk) {
		rd_kafka_purge(ks->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
		rd_kafka_poll(ks->rk, 0);
		rd_kafka_queue_destroy(ks->mainq);
		rd_kafka_destroy(ks->rk);
		ks->rk = NULL;
		ks->mainq = NULL;
	}
	struct kafka_record *r = ks->records;
	ks->records = NULL; /* detached first: a report may start another attempt */
	while (r) {
		struct kafka_record *next = r->next;
		if (r->sj)
			record_report(r, RD_KAFKA_RESP_ERR__FATAL, -1, -1);
		free(r);
		r = next;
	}
}

/* Opens a producer when none is there (its recreation failed), at most once every
 * REOPEN_EVERY_MS. 0 when there is one. */
static int producer_reopen(struct kafka_sink *ks)
{
	char err[512];
	if (ks->rk)
		return 0;
	if (clock_mono_ms() < ks->reopen_at_ms)
		return -1;
	if (producer_open(ks, err, sizeof(err))) {
		ks->reopen_at_ms = clock_mono_ms() + REOPEN_EVERY_MS;
		log_error("kafka producer: %s; kafka:// attempts fail with 503 until it opens", err);
		return -1;
	}
	kafka_client_up(&ks->client);
	return 0;
}

/* The producer raised a fatal error: not ready until a new one is open. */
static void producer_recreate(struct kafka_sink *ks)
{
	kafka_client_down(&ks->client, ks->rk);
	producer_close(ks);
	ks->reopen_at_ms = 0;
	producer_reopen(ks);
}

static void kafka_attach(void *priv, const struct sink_env *env)
{
	((struct kafka_sink *)priv)->env = *env;
}

/* Ends the attempt of r, which librdkafka never got, before anything was produced: code,
 * message, cause; the round ends there (another immediate try would fail alike). r is
 * freed. */
static void record_fail(struct kafka_record *r, int code, const char *message,
			const char *cause)
{
	struct kafka_sink *ks = r->ks;
	struct sink_round *sj = r->sj;
	free(r);
	ks->in_flight--;
	sj->code = code;
	sj->end_round = 1;
	sj->sent = 0;
	snprintf(sj->message, SINK_MSG_LEN, "%s", message);
	snprintf(sj->cause, SINK_CAUSE_LEN, "%s", cause);
	ks->env.done(ks->env.ctx, sj);
}

/* Builds r's message and hands it to librdkafka; r waits in ks->waiting while its topic's
 * schema id is being registered. Otherwise r's attempt ends here when the message cannot
 * be built or produced (r freed). */
static void record_publish(struct kafka_sink *ks, struct kafka_record *r)
{
	struct sink_round *sj = r->sj;
	const struct store_claim *c = sj->claim;
	const struct subscription *s = sj->sub;
	void *value = c->payload, *envelope = NULL;
	size_t value_len = c->payload_len;
	rd_kafka_resp_err_t err;

	if (s->payload_format == PAYLOAD_ENVELOPE) {
		uint32_t id = ks->settings->schema_id, index = ENVELOPE_OUTBOX_EVENT_INDEX;
		if (ks->registry) {
			char why[SINK_CAUSE_LEN];
			enum registry_err rerr = registry_schema_id(ks->registry, r->topic, &id, why,
								    sizeof(why));
			if (rerr == REGISTRY_PENDING) {
				r->next = ks->waiting;
				ks->waiting = r;
				return;
			}
			if (rerr) { /* no message without a valid id: the retries ask again */
				record_fail(r, 503, registry_strerror(rerr), why);
				return;
			}
			index = registry_message_index(ks->registry);
		}
		/* never with credentials: the subscriber gets the event, not our secrets */
		if (kafka_claim_envelope(c, NULL, ks->settings, id, index, &envelope,
					 &value_len)) {
			record_fail(r, 520, "message could not be built",
				    "the OutboxEvent could not be encoded");
			return;
		}
		value = envelope;
	}
	if (!ks->rk && producer_reopen(ks)) {
		free(envelope);
		record_report(r, RD_KAFKA_RESP_ERR__FATAL, -1, -1);
		free(r);
		return;
	}
	err = produce(ks, r, c, value, value_len, kafka_message_headers(c, s, sj->span_id));
	free(envelope);
	if (err) { /* not queued: the record is still ours */
		record_report(r, err, -1, -1);
		free(r);
	}
}

/* The registry answered (or a run came): the records waiting for a schema id go on. The
 * list is detached first: an attempt that ends may start another one. */
static void waiting_resume(struct kafka_sink *ks)
{
	struct kafka_record *r = ks->waiting;
	ks->waiting = NULL;
	while (r) {
		struct kafka_record *next = r->next;
		r->next = NULL;
		record_publish(ks, r);
		r = next;
	}
}

static void kafka_send(void *priv, struct sink_round *sj)
{
	struct kafka_sink *ks = priv;
	struct kafka_record *r = calloc(1, sizeof(*r));

	sj->retry_after_ms = -1;
	sj->end_round = 0;
	if (!r) {
		sj->code = 520;
		sj->end_round = 1;
		snprintf(sj->message, SINK_MSG_LEN, "message could not be built");
		snprintf(sj->cause, SINK_CAUSE_LEN, "out of memory");
		ks->env.done(ks->env.ctx, sj);
		return;
	}
	r->ks = ks;
	r->sj = sj;
	snprintf(r->topic, sizeof(r->topic), "%s", sj->sub->endpoint + 8);
	ks->in_flight++;
	r->deadline_us = clock_mono_us() + (sj->timeout_ms > 0 ? sj->timeout_ms : 1000) * 1000;
	if (!ks->next_deadline_us || r->deadline_us < ks->next_deadline_us)
		ks->next_deadline_us = r->deadline_us;
	record_publish(ks, r);
}

/* Ends with 503 the attempts whose timeout passed while they waited for their topic's
 * schema id; returns the soonest deadline of those that still wait (0: none). */
static int64_t waiting_time_out(struct kafka_sink *ks, int64_t now_us)
{
	struct kafka_record *r = ks->waiting, *keep = NULL;
	int64_t next = 0;
	ks->waiting = NULL; /* detached: an attempt that ends may start another one */
	while (r) {
		struct kafka_record *following = r->next;
		if (now_us >= r->deadline_us) {
			char cause[SINK_CAUSE_LEN];
			snprintf(cause, sizeof(cause), "topic %s: no schema id from the registry within "
				 "the attempt's timeout (%lld ms); its registration goes on",
				 r->topic, (long long)r->sj->timeout_ms);
			record_fail(r, 503, registry_strerror(REGISTRY_UNREACHABLE), cause);
		} else {
			r->next = keep;
			keep = r;
		}
		r = following;
	}
	while (keep) { /* back, with those a new attempt may have added */
		struct kafka_record *following = keep->next;
		keep->next = ks->waiting;
		ks->waiting = keep;
		keep = following;
	}
	for (r = ks->waiting; r; r = r->next)
		if (!next || r->deadline_us < next)
			next = r->deadline_us;
	return next;
}

/* Ends with 504 the attempts whose timeout passed without a report; their records stay
 * with librdkafka, whose late report then finds no round and is dropped. */
static void attempts_time_out(struct kafka_sink *ks, int64_t now_us)
{
	if (!ks->next_deadline_us || now_us < ks->next_deadline_us)
		return;
	int64_t next = waiting_time_out(ks, now_us);
	struct kafka_record *r = ks->records;
	while (r) {
		struct kafka_record *following = r->next;
		struct sink_round *sj = r->sj;
		if (sj && now_us >= r->deadline_us) {
			r->sj = NULL;
			ks->in_flight--;
			sj->code = 504;
			sj->retry_after_ms = -1;
			snprintf(sj->message, SINK_MSG_LEN, "timed out");
			snprintf(sj->cause, SINK_CAUSE_LEN, "topic %s: no acknowledgement from Kafka "
				 "within the attempt's timeout (%lld ms); a later one is ignored",
				 r->topic, (long long)sj->timeout_ms);
			ks->env.done(ks->env.ctx, sj);
		} else if (sj && (!next || r->deadline_us < next)) {
			next = r->deadline_us;
		}
		r = following;
	}
	ks->next_deadline_us = next;
}

static int kafka_fd(void *priv)
{
	return ((struct kafka_sink *)priv)->pipe_rd;
}

static void kafka_run(void *priv)
{
	struct kafka_sink *ks = priv;
	char drain[64];
	while (read(ks->pipe_rd, drain, sizeof(drain)) > 0)
		;
	waiting_resume(ks); /* the registry writes to the pipe too when it answers */
	if (!ks->rk) {
		producer_reopen(ks);
		return;
	}
	rd_kafka_poll(ks->rk, 0);
	if (kafka_client_fatal(ks->rk, NULL, 0))
		producer_recreate(ks);
	else
		attempts_time_out(ks, clock_mono_us());
}

/* The pipe says when reports arrive; a slow poll besides keeps librdkafka's other
 * callbacks (errors, statistics) served while messages are out. Without a producer
 * (its recreation failed), run is due when the next try to open one is. */
static int64_t kafka_wait_us(void *priv, int64_t now_us)
{
	struct kafka_sink *ks = priv;
	(void)now_us;
	if (!ks->rk) {
		int64_t left = ks->reopen_at_ms - clock_mono_ms();
		return left > 0 ? left * 1000 : 0;
	}
	if (!ks->in_flight)
		return -1;
	int64_t wait = 100 * 1000;
	if (ks->next_deadline_us && ks->next_deadline_us - now_us < wait)
		wait = ks->next_deadline_us > now_us ? ks->next_deadline_us - now_us : 0;
	return wait;
}

static int kafka_busy(void *priv)
{
	return ((struct kafka_sink *)priv)->in_flight;
}

/* Shutdown: the attempts still waiting for a report are handed back; their records stay
 * with librdkafka (freed by the report, or at close). */
static void kafka_abort(void *priv)
{
	struct kafka_sink *ks = priv;
	struct kafka_record *w = ks->waiting;
	ks->waiting = NULL;
	while (w) { /* never handed to librdkafka: ours to free */
		struct kafka_record *next = w->next;
		ks->in_flight--;
		ks->env.abandoned(ks->env.ctx, w->sj);
		free(w);
		w = next;
	}
	for (struct kafka_record *r = ks->records; r; r = r->next) {
		struct sink_round *sj = r->sj;
		if (!sj)
			continue;
		r->sj = NULL;
		ks->in_flight--;
		ks->env.abandoned(ks->env.ctx, sj);
	}
}

static void kafka_close(void *priv)
{
	struct kafka_sink *ks = priv;
	/* the dispatcher stopped: the attempts still out were handed back (their deliveries
	 * are sent again), so what is left in the producer is purged, not waited for */
	producer_close(ks);
	registry_close(ks->registry); /* before the pipe its thread writes to */
	close(ks->pipe_rd);
	close(ks->pipe_wr);
	kafka_client_destroy(&ks->client);
	free(ks);
}

static int kafka_ready(void *priv, char *why, size_t whylen)
{
	return kafka_client_ready(&((struct kafka_sink *)priv)->client, why, whylen);
}

/* kafka_dead_letter set: a delivery of an event from an intake topic (source
 * "kafka:TOPIC") that goes dead is marked for that topic's dead-letter topic. */
static int kafka_dead_letter(void *priv, const struct store_claim *c)
{
	const struct kafka_sink *ks = priv;
	return ks->settings->dead_letter && *ks->settings->dead_letter && c->source &&
	       strncmp(c->source, "kafka:", 6) == 0;
}

static const struct sink_methods kafka_methods = {
	.attach = kafka_attach,
	.send = kafka_send,
	.fd = kafka_fd,
	.run = kafka_run,
	.wait_us = kafka_wait_us,
	.busy = kafka_busy,
	.abort = kafka_abort,
	.ready = kafka_ready,
	.dead_letter = kafka_dead_letter,
	.close = kafka_close,
};

static int kafka_configured(const struct config *cfg)
{
	return cfg->kafka_brokers && *cfg->kafka_brokers;
}

/* Opens the producer from the kafka_* settings. A broker that cannot be reached now is
 * not an error: librdkafka reconnects, attempts fail until it does. */
static void *kafka_open(const struct config *cfg, char *err, size_t errlen)
{
	struct kafka_sink *ks = calloc(1, sizeof(*ks));
	int fds[2] = {-1, -1};

	if (!ks || pipe2(fds, O_NONBLOCK | O_CLOEXEC)) {
		snprintf(err, errlen, "kafka producer: out of memory or pipes (errno %d)", errno);
		goto fail;
	}
	kafka_client_init(&ks->client, "producer");
	kafka_settings_from_config(cfg, &ks->settings_of);
	ks->settings = &ks->settings_of;
	ks->pipe_rd = fds[0];
	ks->pipe_wr = fds[1];
	if (kafka_settings_registry(ks->settings) &&
	    !(ks->registry = registry_open(kafka_settings_registry(ks->settings), ks->pipe_wr, err,
					   errlen))) {
		kafka_client_destroy(&ks->client);
		goto fail;
	}
	if (producer_open(ks, err, errlen)) {
		registry_close(ks->registry);
		kafka_client_destroy(&ks->client);
		goto fail;
	}
	return ks;
fail:
	if (fds[0] >= 0) {
		close(fds[0]);
		close(fds[1]);
	}
	free(ks);
	return NULL;
}

/* A message carries headers and waits for its acknowledgement as long as the attempt's
 * timeout; credentials, TLS and signatures belong to the producer's connection
 * (kafka_config), not to a subscription (core/sink_caps.c says the same). */
const struct sink_type sink_type_kafka = {
	.name = "kafka",
	.schemes = {{"kafka", SINK_CAN_TIMEOUT | SINK_CAN_HEADERS | SINK_CAN_ORDERING |
				      SINK_CAN_ENVELOPE}},
	.configured = kafka_configured,
	.open = kafka_open,
	.methods = &kafka_methods,
};
