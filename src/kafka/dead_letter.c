/* dead_letter.c: the dead-letter relay (see dead_letter.h).
 *
 * A round: up to RELAY_BATCH marked deliveries from the store, each produced with a slot
 * of this round as librdkafka's opaque, then the producer polled until every slot has its
 * report (or RELAY_WAIT_MS passed, when the rest is purged and reported as failed), then
 * the acknowledged ones unmarked in one store call. Nothing outlives a round in the
 * producer, so a slot is never reported after its round. */
#include "kafka/dead_letter.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/metrics.h"
#include "kafka/client_rdkafka.h"
#include "kafka/message.h"
#include "kafka/registry.h"
#include "util/clock.h"
#include "util/hash.h"
#include "util/log.h"

#define RELAY_EVERY_MS 500     /* marks are looked for this often */
#define RELAY_BATCH 100        /* deliveries per round at most */
#define RELAY_WAIT_MS 35000    /* a round waits this long for its reports (librdkafka's
                                  message.timeout.ms, 30 s, ends each message before) */
#define RETRY_AFTER_MS 2000    /* after a round with a failure, the next one waits */
#define TOPIC_MAX 256

enum slot_state { SLOT_WAITING = 0, SLOT_ACKED, SLOT_FAILED };

struct kafka_dead_letter {
	struct kafka_client client;  /* first: librdkafka's opaque (kafka/client.h) */
	store *st;
	struct sub_registry *reg;
	const struct kafka_settings *ks;
	rd_kafka_t *rk;              /* NULL while its recreation failed */
	schema_registry *registry;   /* kafka_schema_registry set: the dead-letter topics'
	                                schema ids come from it (its own client and cache) */
	char registry_why[256];      /* the round's registry failure, logged once a round */
	pthread_t thread;
	pthread_mutex_t mu;          /* the stop wait */
	pthread_cond_t cv;
	atomic_int stop;
};

/* One message of a round: where its report goes. */
struct slot {
	enum slot_state state;
	int sent;                    /* librdkafka has it: its report sets state */
	char topic[TOPIC_MAX];
};

static void dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	(void)rk;
	(void)opaque;
	struct slot *slot = m->_private;
	if (!slot)
		return;
	slot->state = m->err ? SLOT_FAILED : SLOT_ACKED;
	if (m->err) {
		log_warn("kafka dead-letter: a message to %s was not acknowledged: %s; it is "
			 "published again", slot->topic, rd_kafka_err2str(m->err));
		metrics_kafka_produce_error(slot->topic);
	}
}

/* The frame's schema id and message index for topic: the registry's for its subject
 * with kafka_schema_registry, else kafka_schema_id and OutboxEvent's index. 0, or -1 while
 * the registry has none for it (registration under way or failing: the cause in
 * dl->registry_why, the next round asks again). */
static int frame_ids(struct kafka_dead_letter *dl, const char *topic, uint32_t *id,
		     uint32_t *index)
{
	char why[200];

	*id = dl->ks->schema_id;
	*index = ENVELOPE_OUTBOX_EVENT_INDEX;
	if (!dl->registry)
		return 0;
	enum registry_err rerr = registry_schema_id(dl->registry, topic, id, why, sizeof(why));
	if (rerr == REGISTRY_OK) {
		*index = registry_message_index(dl->registry);
		return 0;
	}
	/* a registration under way is no failure: the next round (2 s) finds its id */
	if (rerr != REGISTRY_PENDING && !dl->registry_why[0])
		snprintf(dl->registry_why, sizeof(dl->registry_why), "%s: %s",
			 registry_strerror(rerr), why);
	return -1;
}

/* Produces dead delivery x to its dead-letter topic with slot as its opaque. 0 when
 * queued; 1 when it cannot ever be (no such topic can be named: logged, to unmark); -1
 * when not now (slot failed). */
static int produce_one(struct kafka_dead_letter *dl, const struct store_dead_letter *x,
		       const struct sub_set *set, struct slot *slot)
{
	const struct store_claim *c = &x->claim;
	char code[16], attempts[16];
	void *value = NULL;
	size_t len = 0;

	if (!c->source || strncmp(c->source, "kafka:", 6) != 0 ||
	    kafka_dead_letter_topic(dl->ks->dead_letter, c->source + 6, slot->topic,
				    sizeof(slot->topic))) {
		log_error("kafka dead-letter: delivery %s has no dead-letter topic (source %s); "
			  "it stays in the dead-letter queue only", c->delivery_id,
			  c->source ? c->source : "");
		return 1;
	}
	/* its target as it is now: a dead-letter processor delivers with it */
	const struct subscription *target = sub_set_find(set, c->subscription_id);
	if (!target)
		log_warn("kafka dead-letter: subscription %s of delivery %s no longer exists: "
			 "published without its target", c->subscription_id, c->delivery_id);
	uint32_t schema_id, index;
	if (frame_ids(dl, slot->topic, &schema_id, &index)) {
		slot->state = SLOT_FAILED;
		return -1;
	}
	if (kafka_claim_envelope(c, target, dl->ks, schema_id, index, &value, &len)) {
		log_error("kafka dead-letter: delivery %s could not be encoded", c->delivery_id);
		slot->state = SLOT_FAILED;
		return -1;
	}
	snprintf(code, sizeof(code), "%d", x->last_code > 0 ? x->last_code : 0);
	snprintf(attempts, sizeof(attempts), "%d", c->attempt_count);
	/* a span id of its own: the dead-letter publish is no attempt */
	rd_kafka_headers_t *h = kafka_message_headers(c, NULL, hash_fnv1a(c->delivery_id) *
								  0x9E3779B97F4A7C15ULL | 1);
	rd_kafka_header_add(h, "outboxd-error-code", -1, code, -1);
	rd_kafka_header_add(h, "outboxd-error-message", -1, x->last_message ? x->last_message : "", -1);
	rd_kafka_header_add(h, "outboxd-error-cause", -1, x->last_cause ? x->last_cause : "", -1);
	rd_kafka_header_add(h, "outboxd-attempts", -1, attempts, -1);
	rd_kafka_header_add(h, "outboxd-source-topic", -1, c->source + 6, -1);
	const char *key = kafka_message_key(c);
	rd_kafka_resp_err_t err = rd_kafka_producev(
		dl->rk, RD_KAFKA_V_TOPIC(slot->topic), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
		RD_KAFKA_V_KEY(key, strlen(key)), RD_KAFKA_V_VALUE(value, len),
		RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_OPAQUE(slot), RD_KAFKA_V_END);
	free(value);
	if (err) {
		rd_kafka_headers_destroy(h);
		log_warn("kafka dead-letter: delivery %s could not be queued for %s: %s",
			 c->delivery_id, slot->topic, rd_kafka_err2str(err));
		metrics_kafka_produce_error(slot->topic);
		slot->state = SLOT_FAILED;
		return -1;
	}
	slot->sent = 1;
	return 0;
}

/* Messages of slots still waiting for their report. */
static size_t slots_waiting(const struct slot *slots, size_t n)
{
	size_t waiting = 0;
	for (size_t i = 0; i < n; i++)
		waiting += slots[i].sent && slots[i].state == SLOT_WAITING;
	return waiting;
}

/* Opens the producer. 0, or -1 with err set. */
static int producer_open(struct kafka_dead_letter *dl, char *err, size_t errlen)
{
	dl->rk = kafka_producer_new(dl->ks, &dl->client, dr_msg_cb, err, errlen);
	return dl->rk ? 0 : -1;
}

/* Purges what the producer still holds (its slots reported as failed) and destroys it. */
static void producer_close(struct kafka_dead_letter *dl)
{
	if (!dl->rk)
		return;
	rd_kafka_purge(dl->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
	rd_kafka_poll(dl->rk, 0);
	rd_kafka_destroy(dl->rk);
	dl->rk = NULL;
}

/* The producer raised a fatal error: not ready until a new one is open (the relay's
 * next turn opens it). */
static void producer_recreate(struct kafka_dead_letter *dl)
{
	kafka_client_down(&dl->client, dl->rk);
	producer_close(dl);
}

/* One round; returns 1 when something failed (the next round waits a little). */
static int relay_round(struct kafka_dead_letter *dl)
{
	struct store_dead_letter *items = NULL;
	size_t n = 0, n_done = 0;
	int failed = 0;

	if (store_dead_letters(dl->st, RELAY_BATCH, &items, &n) != STORE_OK || !n)
		return 0;
	struct slot *slots = calloc(n, sizeof(*slots));
	char(*done)[UUID_STR_LEN] = calloc(n, UUID_STR_LEN);
	if (!slots || !done) {
		failed = 1;
		goto out;
	}
	struct sub_set *set = sub_registry_acquire(dl->reg);
	dl->registry_why[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		int rc = produce_one(dl, &items[i], set, &slots[i]);
		if (rc > 0) /* it can never be published: unmarked, it stays in the DLQ */
			memcpy(done[n_done++], items[i].claim.delivery_id, UUID_STR_LEN);
		failed |= rc < 0;
	}
	sub_registry_release(dl->reg, set);
	if (dl->registry_why[0])
		log_warn("kafka dead-letter: no schema id from the registry (%s); published "
			 "after it answers", dl->registry_why);
	/* wait for every report; at the end, what is left is purged (reported as failed) */
	int64_t until = clock_mono_ms() + RELAY_WAIT_MS;
	while (slots_waiting(slots, n) && !atomic_load(&dl->stop) && clock_mono_ms() < until &&
	       !kafka_client_fatal(dl->rk, NULL, 0))
		rd_kafka_poll(dl->rk, 100);
	if (slots_waiting(slots, n)) {
		rd_kafka_purge(dl->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
		for (int i = 0; i < 10 && slots_waiting(slots, n); i++)
			rd_kafka_poll(dl->rk, 100);
	}
	if (slots_waiting(slots, n)) {
		/* no report may reach this round's slots once they are freed */
		producer_close(dl);
	}
	for (size_t i = 0; i < n; i++) {
		if (slots[i].state == SLOT_ACKED) {
			memcpy(done[n_done++], items[i].claim.delivery_id, UUID_STR_LEN);
			metrics_kafka_dead_lettered();
			log_info("kafka: delivery %s dead-lettered to %s", items[i].claim.delivery_id,
				 slots[i].topic);
		} else if (slots[i].sent) {
			failed = 1; /* still marked: published again next round */
		}
	}
	if (n_done && store_dead_letters_done(dl->st, (const char (*)[UUID_STR_LEN])done, n_done))
		/* published, still marked: published again after the store is back */
		failed = 1;
out:
	free(slots);
	free(done);
	store_dead_letters_free(items, n);
	return failed;
}

static void *relay_main(void *arg)
{
	struct kafka_dead_letter *dl = arg;
	int64_t pause_ms = RELAY_EVERY_MS;
	char err[512];

	pthread_setname_np(pthread_self(), "kafka-dlt");
	while (!atomic_load(&dl->stop)) {
		struct timespec at;
		clock_gettime(CLOCK_REALTIME, &at);
		at.tv_sec += pause_ms / 1000;
		at.tv_nsec += (pause_ms % 1000) * 1000000;
		if (at.tv_nsec >= 1000000000) {
			at.tv_sec++;
			at.tv_nsec -= 1000000000;
		}
		pthread_mutex_lock(&dl->mu);
		if (!atomic_load(&dl->stop))
			pthread_cond_timedwait(&dl->cv, &dl->mu, &at);
		pthread_mutex_unlock(&dl->mu);
		if (atomic_load(&dl->stop))
			break;
		if (!dl->rk) {
			if (producer_open(dl, err, sizeof(err))) {
				log_error("%s; trying again", err);
				pause_ms = RETRY_AFTER_MS;
				continue;
			}
			kafka_client_up(&dl->client);
		}
		int failed = relay_round(dl);
		if (kafka_client_fatal(dl->rk, NULL, 0))
			producer_recreate(dl);
		pause_ms = failed ? RETRY_AFTER_MS : RELAY_EVERY_MS;
	}
	return NULL;
}

struct kafka_dead_letter *kafka_dead_letter_start(store *st, struct sub_registry *reg,
						  const struct kafka_settings *ks, char *err,
						  size_t errlen)
{
	struct kafka_dead_letter *dl = calloc(1, sizeof(*dl));
	if (!dl) {
		snprintf(err, errlen, "kafka dead-letter: out of memory");
		return NULL;
	}
	kafka_client_init(&dl->client, "dead-letter");
	dl->st = st;
	dl->reg = reg;
	dl->ks = ks;
	pthread_mutex_init(&dl->mu, NULL);
	pthread_cond_init(&dl->cv, NULL);
	if (kafka_settings_registry(ks) &&
	    !(dl->registry = registry_open(kafka_settings_registry(ks), -1, err, errlen)))
		goto fail;
	if (producer_open(dl, err, errlen))
		goto fail;
	if (pthread_create(&dl->thread, NULL, relay_main, dl)) {
		snprintf(err, errlen, "kafka dead-letter: cannot start its thread");
		goto fail;
	}
	log_info("kafka: dead deliveries from intake topics are published to %s",
		 ks->dead_letter);
	return dl;
fail:
	producer_close(dl);
	registry_close(dl->registry);
	kafka_client_destroy(&dl->client);
	pthread_cond_destroy(&dl->cv);
	pthread_mutex_destroy(&dl->mu);
	free(dl);
	return NULL;
}

int kafka_dead_letter_ready(void *relay, char *why, size_t whylen)
{
	return kafka_client_ready(&((struct kafka_dead_letter *)relay)->client, why, whylen);
}

void kafka_dead_letter_stop(struct kafka_dead_letter *dl)
{
	if (!dl)
		return;
	pthread_mutex_lock(&dl->mu);
	atomic_store(&dl->stop, 1);
	pthread_cond_broadcast(&dl->cv);
	pthread_mutex_unlock(&dl->mu);
	pthread_join(dl->thread, NULL);
	producer_close(dl);
	registry_close(dl->registry);
	kafka_client_destroy(&dl->client);
	pthread_cond_destroy(&dl->cv);
	pthread_mutex_destroy(&dl->mu);
	free(dl);
}
