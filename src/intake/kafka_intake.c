/* kafka_intake.c: the Kafka intake's consumer (see kafka_intake.h).
 *
 * The loop: poll a batch of messages (up to BATCH_MAX, or what came within BATCH_WAIT_MS),
 * have kafka_batch.c turn it into events and store it in one transaction, and commit the
 * batch's offsets only after that. A store outage keeps the batch and tries again;
 * nothing is committed before it is durable. The consumer's poll is the only place this
 * thread waits, so stopping is prompt; with no message the loop still turns, for the
 * broker probe (readiness, lag) and the backlog check. */
#include "intake/kafka_intake_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/metrics.h"
#include "util/clock.h"
#include "util/log.h"

#define BATCH_WAIT_MS 20       /* a batch waits this long for company */
#define PROBE_EVERY_MS 3000    /* broker reachability and lag, this often */
#define PROBE_DOWN_EVERY_MS 1000 /* ... and this often while the brokers do not answer, so
                                    readiness follows a broker's return within seconds */
#define PROBE_TIMEOUT_MS 1000  /* a metadata request waits this long for an answer */
#define IDLE_POLL_MS 200       /* with no message, the loop turns this often: the probe
                                  and the backlog check run on idle topics and while
                                  paused (a paused partition yields no message) */
#define BACKLOG_EVERY_MS 1000  /* kafka_max_backlog is checked this often */

struct kafka_intake {
	struct kafka_batch b;                  /* topics, store, settings (kafka_batch.c) */
	rd_kafka_t *rk;
	pthread_t thread;
	atomic_int stop;
	atomic_int reachable;                  /* the last probe answered */
	pthread_mutex_t why_mu;
	char why[256];                         /* why not reachable */
	int paused;
};

/* ---- the loop ----------------------------------------------------------------------------- */

static void set_reachable(struct kafka_intake *ki, int ok, const char *why)
{
	int was = atomic_exchange(&ki->reachable, ok);
	pthread_mutex_lock(&ki->why_mu);
	snprintf(ki->why, sizeof(ki->why), "%s", why ? why : "");
	pthread_mutex_unlock(&ki->why_mu);
	if (was && !ok)
		log_error("kafka intake: brokers %s not reachable: %s", ki->b.cfg.settings->brokers, why);
	else if (!was && ok)
		log_info("kafka intake: brokers %s reachable; consuming %zu topics",
			 ki->b.cfg.settings->brokers, ki->b.n_topics);
}

/* The intake's position in each of parts (an offset, or below 0 when unknown): the
 * position of the last message consumed, else the group's committed offset (after an
 * assignment nothing was consumed yet, and an idle partition stays so). */
static void positions(struct kafka_intake *ki, rd_kafka_topic_partition_list_t *parts)
{
	int unknown = 0;
	rd_kafka_position(ki->rk, parts);
	for (int i = 0; i < parts->cnt; i++)
		unknown |= parts->elems[i].offset < 0;
	if (!unknown)
		return;
	rd_kafka_topic_partition_list_t *committed = rd_kafka_topic_partition_list_copy(parts);
	if (rd_kafka_committed(ki->rk, committed, PROBE_TIMEOUT_MS) == RD_KAFKA_RESP_ERR_NO_ERROR)
		for (int i = 0; i < parts->cnt; i++)
			if (parts->elems[i].offset < 0 && !committed->elems[i].err)
				parts->elems[i].offset = committed->elems[i].offset;
	rd_kafka_topic_partition_list_destroy(committed);
}

/* Asks the cluster for metadata (reachability) and records each assigned partition's
 * lag. The high watermark comes from the fetcher, which keeps it current on an idle
 * partition; a paused partition is not fetched, so while paused it is asked of the
 * broker. */
static void probe(struct kafka_intake *ki)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_resp_err_t err = rd_kafka_metadata(ki->rk, 0, NULL, &md, PROBE_TIMEOUT_MS);
	if (err) {
		set_reachable(ki, 0, rd_kafka_err2str(err));
		return;
	}
	rd_kafka_metadata_destroy(md);
	set_reachable(ki, 1, NULL);
	rd_kafka_topic_partition_list_t *parts = NULL;
	if (rd_kafka_assignment(ki->rk, &parts) || !parts)
		return;
	positions(ki, parts);
	int64_t budget_end = clock_mono_ms() + PROBE_TIMEOUT_MS;
	for (int i = 0; i < parts->cnt; i++) {
		const rd_kafka_topic_partition_t *p = &parts->elems[i];
		int64_t lo = 0, hi = 0, pos = p->offset;
		if (ki->paused) {
			int left = (int)(budget_end - clock_mono_ms());
			if (left <= 0 || rd_kafka_query_watermark_offsets(ki->rk, p->topic, p->partition,
									  &lo, &hi, left))
				continue;
		} else if (rd_kafka_get_watermark_offsets(ki->rk, p->topic, p->partition, &lo, &hi)) {
			continue;
		}
		if (pos < 0)
			pos = lo;
		metrics_kafka_lag(p->topic, p->partition, hi > pos ? hi - pos : 0);
	}
	rd_kafka_topic_partition_list_destroy(parts);
}

/* kafka_max_backlog: deliveries of the intake's topics still NEW. Pauses the assigned
 * partitions above the limit, resumes below half. */
static void backlog_check(struct kafka_intake *ki)
{
	size_t total = 0;
	for (size_t i = 0; i < ki->b.n_topics; i++) {
		struct delivery_filter f = {.has_status = 1, .status = DELIVERY_NEW,
						  .source = ki->b.topics[i].source, .limit = 1};
		size_t n = 0;
		if (store_deliveries_count(ki->b.st, &f, &n) != STORE_OK)
			return;
		total += n;
	}
	int over = total > (size_t)ki->b.cfg.settings->max_backlog;
	int under = total < (size_t)ki->b.cfg.settings->max_backlog / 2;
	if ((!ki->paused && !over) || (ki->paused && !under))
		return;
	rd_kafka_topic_partition_list_t *parts = NULL;
	if (rd_kafka_assignment(ki->rk, &parts) || !parts)
		return;
	if (!ki->paused) {
		rd_kafka_pause_partitions(ki->rk, parts);
		log_warn("kafka intake: %zu deliveries not yet sent (kafka_max_backlog %d): pausing",
			 total, ki->b.cfg.settings->max_backlog);
	} else {
		rd_kafka_resume_partitions(ki->rk, parts);
		log_info("kafka intake: backlog down to %zu: resuming", total);
	}
	ki->paused = !ki->paused;
	metrics_kafka_paused(ki->paused);
	rd_kafka_topic_partition_list_destroy(parts);
}

/* Commits the offsets after the batch's messages (the store has them). */
static void commit_batch(struct kafka_intake *ki, struct item *items, size_t n)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)n);
	for (size_t i = 0; i < n; i++) {
		const rd_kafka_message_t *m = items[i].msg;
		const char *topic = rd_kafka_topic_name(m->rkt);
		rd_kafka_topic_partition_t *p = rd_kafka_topic_partition_list_find(list, topic, m->partition);
		if (!p)
			p = rd_kafka_topic_partition_list_add(list, topic, m->partition);
		if (m->offset + 1 > p->offset)
			p->offset = m->offset + 1;
	}
	rd_kafka_resp_err_t err = rd_kafka_commit(ki->rk, list, 0);
	if (err)
		/* after a rebalance another member re-reads them: idempotency drops them */
		log_warn("kafka intake: offset commit failed (%s); the messages may be read again",
			 rd_kafka_err2str(err));
	rd_kafka_topic_partition_list_destroy(list);
}

static void *intake_main(void *arg)
{
	struct kafka_intake *ki = arg;
	struct item *items = calloc(BATCH_MAX, sizeof(*items));
	int64_t next_probe = 0, next_backlog = 0;
	int store_down = 0;

	pthread_setname_np(pthread_self(), "kafka-intake");
	if (!items) {
		log_error("kafka intake: out of memory");
		return NULL;
	}
	while (!atomic_load(&ki->stop)) {
		int64_t now = clock_mono_ms();
		if (now >= next_probe) {
			probe(ki);
			next_probe = now + (atomic_load(&ki->reachable) ? PROBE_EVERY_MS
								      : PROBE_DOWN_EVERY_MS);
		}
		if (now >= next_backlog) {
			backlog_check(ki);
			next_backlog = now + BACKLOG_EVERY_MS;
		}
		/* gather a batch */
		size_t n = 0;
		int64_t until = clock_mono_ms() + BATCH_WAIT_MS;
		while (n < BATCH_MAX && !atomic_load(&ki->stop)) {
			int wait = n ? (int)(until - clock_mono_ms()) : IDLE_POLL_MS;
			if (wait < 0)
				break;
			rd_kafka_message_t *m = rd_kafka_consumer_poll(ki->rk, wait);
			if (!m)
				break; /* back to the probe and the backlog check */
			if (m->err) {
				if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
					log_warn("kafka intake: %s%s%s", m->rkt ? rd_kafka_topic_name(m->rkt) : "",
						 m->rkt ? ": " : "", rd_kafka_message_errstr(m));
				rd_kafka_message_destroy(m);
				continue;
			}
			items[n++].msg = m;
		}
		if (!n)
			continue;
		/* store it; a store outage keeps the batch until it goes through or we stop */
		int undecodable = 0, rc;
		while ((rc = kafka_batch_store(&ki->b, items, n, &undecodable)) != STORE_OK &&
		       !atomic_load(&ki->stop)) {
			if (!store_down)
				log_error("kafka intake: cannot store %zu messages (%s); holding them",
					  n, store_strerror(rc));
			store_down = 1;
			usleep(500 * 1000);
		}
		if (rc == STORE_OK) {
			if (store_down)
				log_info("kafka intake: storing again");
			store_down = 0;
			metrics_kafka_consumed((long)n, undecodable);
			if (ki->b.cfg.wake)
				ki->b.cfg.wake(ki->b.cfg.wake_ctx);
			commit_batch(ki, items, n);
		}
		for (size_t i = 0; i < n; i++) {
			kafka_batch_item_clear(&items[i]);
			rd_kafka_message_destroy(items[i].msg);
			items[i].msg = NULL;
		}
	}
	free(items);
	return NULL;
}

struct kafka_intake *kafka_intake_start(store *st, struct sub_registry *reg,
					const struct kafka_intake_config *cfg, char *err,
					size_t errlen)
{
	struct kafka_intake *ki = calloc(1, sizeof(*ki));
	rd_kafka_conf_t *conf = NULL;
	rd_kafka_topic_partition_list_t *subs = NULL;
	char why[512];

	if (!ki) {
		snprintf(err, errlen, "kafka intake: out of memory");
		return NULL;
	}
	ki->b.st = st;
	ki->b.reg = reg;
	ki->b.cfg = *cfg;
	pthread_mutex_init(&ki->why_mu, NULL);
	snprintf(ki->why, sizeof(ki->why), "not probed yet");
	if (kafka_batch_topics(&ki->b, cfg->settings->intake, err, errlen))
		goto fail;
	/* the seeds' consumer: earliest offset, manual commit (after the store's) */
	const char *const defaults[] = {
		"group.id", cfg->settings->group, "enable.auto.commit", "false",
		"auto.offset.reset", "earliest", "enable.partition.eof", "false", NULL,
	};
	if (!(conf = kafka_conf_new(cfg->settings, "intake", defaults, err, errlen)))
		goto fail;
	if (!(ki->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof(why)))) {
		snprintf(err, errlen, "kafka intake: %s", why);
		goto fail;
	}
	conf = NULL;
	rd_kafka_poll_set_consumer(ki->rk);
	subs = rd_kafka_topic_partition_list_new((int)ki->b.n_topics);
	for (size_t i = 0; i < ki->b.n_topics; i++)
		rd_kafka_topic_partition_list_add(subs, ki->b.topics[i].name, RD_KAFKA_PARTITION_UA);
	rd_kafka_resp_err_t e = rd_kafka_subscribe(ki->rk, subs);
	rd_kafka_topic_partition_list_destroy(subs);
	if (e) {
		snprintf(err, errlen, "kafka intake: cannot subscribe: %s", rd_kafka_err2str(e));
		goto fail;
	}
	if (pthread_create(&ki->thread, NULL, intake_main, ki)) {
		snprintf(err, errlen, "kafka intake: cannot start its thread");
		goto fail;
	}
	log_info("kafka intake: consuming %s as group %s", cfg->settings->intake,
		 cfg->settings->group);
	return ki;
fail:
	if (conf)
		rd_kafka_conf_destroy(conf);
	if (ki->rk)
		rd_kafka_destroy(ki->rk);
	pthread_mutex_destroy(&ki->why_mu);
	free(ki);
	return NULL;
}

int kafka_intake_ready(void *intake, char *why, size_t whylen)
{
	struct kafka_intake *ki = intake;
	if (atomic_load(&ki->reachable))
		return 0;
	pthread_mutex_lock(&ki->why_mu);
	snprintf(why, whylen, "%s", ki->why);
	pthread_mutex_unlock(&ki->why_mu);
	return -1;
}

void kafka_intake_stop(struct kafka_intake *ki)
{
	if (!ki)
		return;
	atomic_store(&ki->stop, 1);
	pthread_join(ki->thread, NULL);
	rd_kafka_consumer_close(ki->rk);
	rd_kafka_destroy(ki->rk);
	pthread_mutex_destroy(&ki->why_mu);
	free(ki->b.known);
	free(ki);
}
