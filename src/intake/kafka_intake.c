/* kafka_intake.c: the Kafka intake's consumer (see kafka_intake.h).
 *
 * The loop: poll a batch of messages (up to BATCH_MAX, or what came within BATCH_WAIT_MS),
 * have kafka_batch.c turn it into events and store it in one transaction, and commit the
 * batch's offsets only after that. A store outage keeps the batch and tries again;
 * nothing is committed before it is durable. The consumer's poll is the only place this
 * thread waits, so stopping is prompt; with no message the loop still turns, for the
 * broker probe (readiness, lag) and the backlog check.
 *
 * The consumer is a static member of its group (group.instance.id from the data
 * directory's instance id): restarted, it gets its partitions back at once instead of
 * waiting out its former self's session. Rebalances go through rebalance_cb on this
 * thread: before partitions are taken away, the batch gathered so far is stored and its
 * offsets committed (with any whose commit failed), so the next owner does not read it
 * again; partitions assigned while paused for the backlog start paused. A fatal error
 * (librdkafka: another consumer took this group.instance.id) makes the consumer
 * unusable: it is destroyed and opened again a second later, and the intake is not ready
 * meanwhile. */
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
#define REOPEN_AFTER_MS 1000   /* a consumer destroyed after a fatal error is opened again */
#define REVOKE_STORE_TRIES 6   /* storing the batch before a revocation: tries, 0.5 s apart */
#define STORE_RETRY_US (500 * 1000) /* a store outage: the batch is tried again this often */

struct kafka_intake {
	struct kafka_client client;            /* first: librdkafka's opaque (kafka/client.h) */
	struct kafka_batch b;                  /* topics, store, settings (kafka_batch.c) */
	rd_kafka_t *rk;                        /* NULL between a fatal error and its reopening */
	int64_t reopen_at_ms;                  /* ... when to open it again (monotonic) */
	struct item items[BATCH_MAX];          /* the batch being gathered */
	size_t n_items;
	rd_kafka_topic_partition_list_t *uncommitted; /* stored, commit failed: tried again
	                                          with the next commit and before a revocation */
	int store_down;                        /* the last store attempt failed (log once) */
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
	metrics_kafka_lag_round();
	for (int i = 0; i < parts->cnt; i++) {
		const rd_kafka_topic_partition_t *p = &parts->elems[i];
		int64_t lo = 0, hi = 0, pos = p->offset;
		int unknown;
		if (ki->paused) {
			int left = (int)(budget_end - clock_mono_ms());
			unknown = left <= 0 || rd_kafka_query_watermark_offsets(
						       ki->rk, p->topic, p->partition, &lo, &hi, left);
		} else {
			unknown = rd_kafka_get_watermark_offsets(ki->rk, p->topic, p->partition, &lo,
								 &hi) != 0;
		}
		if (unknown) {
			metrics_kafka_lag_keep(p->topic, p->partition);
			continue;
		}
		if (pos < 0)
			pos = lo;
		metrics_kafka_lag(p->topic, p->partition, hi > pos ? hi - pos : 0);
	}
	/* partitions revoked since (another instance of the group has them) */
	metrics_kafka_lag_sweep();
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

/* Commits the offsets after the n messages of items (the store has them), with those
 * whose commit failed before. A failed commit is kept for the next one. */
static void commit_offsets(struct kafka_intake *ki, struct item *items, size_t n)
{
	rd_kafka_topic_partition_list_t *list = rd_kafka_topic_partition_list_new((int)n + 1);
	for (size_t i = 0; i < n; i++) {
		const rd_kafka_message_t *m = items[i].msg;
		const char *topic = rd_kafka_topic_name(m->rkt);
		rd_kafka_topic_partition_t *p = rd_kafka_topic_partition_list_find(list, topic, m->partition);
		if (!p)
			p = rd_kafka_topic_partition_list_add(list, topic, m->partition);
		if (m->offset + 1 > p->offset)
			p->offset = m->offset + 1;
	}
	for (int i = 0; ki->uncommitted && i < ki->uncommitted->cnt; i++) {
		const rd_kafka_topic_partition_t *u = &ki->uncommitted->elems[i];
		rd_kafka_topic_partition_t *p = rd_kafka_topic_partition_list_find(list, u->topic,
										      u->partition);
		if (!p)
			rd_kafka_topic_partition_list_add(list, u->topic, u->partition)->offset = u->offset;
		else if (u->offset > p->offset)
			p->offset = u->offset;
	}
	if (ki->uncommitted)
		rd_kafka_topic_partition_list_destroy(ki->uncommitted);
	ki->uncommitted = NULL;
	if (!list->cnt) {
		rd_kafka_topic_partition_list_destroy(list);
		return;
	}
	rd_kafka_resp_err_t err = rd_kafka_commit(ki->rk, list, 0);
	if (err) {
		/* after a rebalance another member re-reads them: idempotency drops them */
		log_warn("kafka intake: offset commit failed (%s); the messages may be read again",
			 rd_kafka_err2str(err));
		ki->uncommitted = list;
		return;
	}
	rd_kafka_topic_partition_list_destroy(list);
}

/* Drops the gathered batch: its messages are read again (nothing of it was committed). */
static void batch_drop(struct kafka_intake *ki)
{
	for (size_t i = 0; i < ki->n_items; i++) {
		kafka_batch_item_clear(&ki->items[i]);
		rd_kafka_message_destroy(ki->items[i].msg);
		ki->items[i].msg = NULL;
	}
	ki->n_items = 0;
}

/* Stores the gathered batch and commits its offsets. A store outage keeps the batch and
 * tries again every 0.5 s: tries times (0: until it goes through or the intake stops);
 * what is not stored in the end is dropped, to be read again, never committed. */
static void batch_flush(struct kafka_intake *ki, int tries)
{
	size_t n = ki->n_items;
	int undecodable = 0, rc = STORE_OK;
	for (int i = 0; n; i++) {
		rc = kafka_batch_store(&ki->b, ki->items, n, &undecodable);
		if (rc == STORE_OK || atomic_load(&ki->stop) || (tries && i + 1 >= tries))
			break;
		if (!ki->store_down)
			log_error("kafka intake: cannot store %zu messages (%s); holding them", n,
				  store_strerror(rc));
		ki->store_down = 1;
		usleep(STORE_RETRY_US);
	}
	if (n && rc == STORE_OK) {
		if (ki->store_down)
			log_info("kafka intake: storing again");
		ki->store_down = 0;
		metrics_kafka_consumed((long)n, undecodable);
		if (ki->b.cfg.wake)
			ki->b.cfg.wake(ki->b.cfg.wake_ctx);
	}
	if (n && rc == STORE_OK)
		commit_offsets(ki, ki->items, n);
	else if (n)
		log_warn("kafka intake: %zu messages were not stored; they are read again", n);
	batch_drop(ki);
}

/* librdkafka's rebalance callback, served by the consumer poll on the intake's thread
 * (and by rd_kafka_consumer_close at stop). Either protocol: eager (assign the whole
 * set) or cooperative (incremental). */
static void rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
			 rd_kafka_topic_partition_list_t *parts, void *opaque)
{
	struct kafka_intake *ki = opaque;
	int cooperative = strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE") == 0;
	rd_kafka_error_t *e = NULL;
	rd_kafka_resp_err_t r = RD_KAFKA_RESP_ERR_NO_ERROR;

	if (err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS) {
		if (cooperative)
			e = rd_kafka_incremental_assign(rk, parts);
		else
			r = rd_kafka_assign(rk, parts);
		/* paused for the backlog: what comes in now waits with the rest */
		if (ki->paused)
			rd_kafka_pause_partitions(rk, parts);
		log_info("kafka intake: %d partitions assigned%s", parts->cnt,
			 ki->paused ? ", paused (kafka_max_backlog)" : "");
	} else {
		if (err != RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS)
			log_error("kafka intake: rebalance failed: %s", rd_kafka_err2str(err));
		/* what is durable is committed while the partitions are still ours, so their
		 * next owner starts after it (lost partitions: the commit fails, and the next
		 * owner's reads are dropped as duplicates) */
		batch_flush(ki, REVOKE_STORE_TRIES);
		if (ki->uncommitted)
			commit_offsets(ki, NULL, 0);
		if (ki->uncommitted) {
			rd_kafka_topic_partition_list_destroy(ki->uncommitted);
			ki->uncommitted = NULL;
		}
		if (cooperative)
			e = rd_kafka_incremental_unassign(rk, parts);
		else
			r = rd_kafka_assign(rk, NULL);
	}
	if (e) {
		log_error("kafka intake: rebalance: %s", rd_kafka_error_string(e));
		rd_kafka_error_destroy(e);
	} else if (r) {
		log_error("kafka intake: rebalance: %s", rd_kafka_err2str(r));
	}
}

/* Opens the consumer and subscribes it to the topics. 0, or -1 with err set. */
static int consumer_open(struct kafka_intake *ki, char *err, size_t errlen)
{
	const struct kafka_settings *ks = ki->b.cfg.settings;
	rd_kafka_topic_partition_list_t *subs = NULL;
	rd_kafka_conf_t *conf;
	char why[512], instance[8] = "";
	size_t len = sizeof(instance);
	/* Earliest offset (a new group reads what is already there), manual commit (after
	 * the store's). A 10 s session with a heartbeat a second: a member that died
	 * without leaving is out of the group 10 s after its last heartbeat (librdkafka's
	 * 45 s held its partitions that long). group.instance.id (last: absent when there
	 * is none) makes it a static member. */
	const char *const defaults[] = {
		"group.id", ks->group, "enable.auto.commit", "false",
		"auto.offset.reset", "earliest", "enable.partition.eof", "false",
		"session.timeout.ms", "10000", "heartbeat.interval.ms", "1000",
		ks->instance_id ? "group.instance.id" : NULL, ks->instance_id, NULL,
	};
	if (!(conf = kafka_conf_new(ks, &ki->client, defaults, err, errlen)))
		return -1;
	/* group.instance.id= (empty) in kafka_config: no static membership */
	if (rd_kafka_conf_get(conf, "group.instance.id", instance, &len) == RD_KAFKA_CONF_OK &&
	    !instance[0])
		rd_kafka_conf_set(conf, "group.instance.id", NULL, why, sizeof(why));
	rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
	if (!(ki->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, why, sizeof(why)))) {
		snprintf(err, errlen, "kafka intake: %s", why);
		rd_kafka_conf_destroy(conf);
		return -1;
	}
	rd_kafka_poll_set_consumer(ki->rk);
	subs = rd_kafka_topic_partition_list_new((int)ki->b.n_topics);
	for (size_t i = 0; i < ki->b.n_topics; i++)
		rd_kafka_topic_partition_list_add(subs, ki->b.topics[i].name, RD_KAFKA_PARTITION_UA);
	rd_kafka_resp_err_t e = rd_kafka_subscribe(ki->rk, subs);
	rd_kafka_topic_partition_list_destroy(subs);
	if (e) {
		snprintf(err, errlen, "kafka intake: cannot subscribe: %s", rd_kafka_err2str(e));
		rd_kafka_destroy(ki->rk);
		ki->rk = NULL;
		return -1;
	}
	return 0;
}

/* The consumer raised a fatal error: destroyed now (what was gathered is dropped, to be
 * read again), opened again after REOPEN_AFTER_MS; not ready meanwhile. */
static void consumer_fatal(struct kafka_intake *ki)
{
	char why[400], text[512];
	kafka_client_fatal(ki->rk, why, sizeof(why));
	snprintf(text, sizeof(text), "kafka intake: recreating the consumer after a fatal error: %s",
		 why);
	set_reachable(ki, 0, text);
	batch_drop(ki);
	if (ki->uncommitted)
		rd_kafka_topic_partition_list_destroy(ki->uncommitted);
	ki->uncommitted = NULL;
	rd_kafka_destroy_flags(ki->rk, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	ki->rk = NULL;
	ki->reopen_at_ms = clock_mono_ms() + REOPEN_AFTER_MS;
}

/* Opens the consumer again once it is time; 0 when there is one. */
static int consumer_reopen(struct kafka_intake *ki)
{
	char err[512];
	if (ki->rk)
		return 0;
	if (clock_mono_ms() < ki->reopen_at_ms)
		return -1;
	if (consumer_open(ki, err, sizeof(err))) {
		log_error("%s; trying again in %d ms", err, REOPEN_AFTER_MS);
		ki->reopen_at_ms = clock_mono_ms() + REOPEN_AFTER_MS;
		return -1;
	}
	log_info("kafka intake: consumer recreated; consuming again");
	return 0;
}

static void *intake_main(void *arg)
{
	struct kafka_intake *ki = arg;
	int64_t next_probe = 0, next_backlog = 0;

	pthread_setname_np(pthread_self(), "kafka-intake");
	while (!atomic_load(&ki->stop)) {
		if (consumer_reopen(ki)) {
			usleep(100 * 1000);
			continue;
		}
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
		/* gather a batch (a rebalance served by the poll may store it meanwhile) */
		int64_t until = clock_mono_ms() + BATCH_WAIT_MS;
		while (ki->n_items < BATCH_MAX && !atomic_load(&ki->stop)) {
			int wait = ki->n_items ? (int)(until - clock_mono_ms()) : IDLE_POLL_MS;
			if (wait < 0)
				break;
			rd_kafka_message_t *m = rd_kafka_consumer_poll(ki->rk, wait);
			if (!m)
				break; /* back to the probe and the backlog check */
			if (m->err) {
				if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF &&
				    m->err != RD_KAFKA_RESP_ERR__FATAL)
					log_warn("kafka intake: %s%s%s", m->rkt ? rd_kafka_topic_name(m->rkt) : "",
						 m->rkt ? ": " : "", rd_kafka_message_errstr(m));
				rd_kafka_message_destroy(m);
				if (kafka_client_fatal(ki->rk, NULL, 0))
					break;
				continue;
			}
			ki->items[ki->n_items++].msg = m;
		}
		if (kafka_client_fatal(ki->rk, NULL, 0)) {
			consumer_fatal(ki);
			continue;
		}
		/* store it; a store outage keeps the batch until it goes through or we stop */
		batch_flush(ki, 0);
	}
	return NULL;
}

struct kafka_intake *kafka_intake_start(store *st, struct sub_registry *reg,
					const struct kafka_intake_config *cfg, char *err,
					size_t errlen)
{
	struct kafka_intake *ki = calloc(1, sizeof(*ki));

	if (!ki) {
		snprintf(err, errlen, "kafka intake: out of memory");
		return NULL;
	}
	kafka_client_init(&ki->client, "intake");
	ki->b.st = st;
	ki->b.reg = reg;
	ki->b.cfg = *cfg;
	pthread_mutex_init(&ki->why_mu, NULL);
	snprintf(ki->why, sizeof(ki->why), "not probed yet");
	if (kafka_batch_topics(&ki->b, cfg->settings->intake, err, errlen) ||
	    consumer_open(ki, err, errlen))
		goto fail;
	if (pthread_create(&ki->thread, NULL, intake_main, ki)) {
		snprintf(err, errlen, "kafka intake: cannot start its thread");
		goto fail;
	}
	log_info("kafka intake: consuming %s as group %s%s%s", cfg->settings->intake,
		 cfg->settings->group, cfg->settings->instance_id ? ", static member " : "",
		 cfg->settings->instance_id ? cfg->settings->instance_id : "");
	return ki;
fail:
	if (ki->rk)
		rd_kafka_destroy(ki->rk);
	pthread_mutex_destroy(&ki->why_mu);
	kafka_client_destroy(&ki->client);
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
	if (ki->rk) {
		/* the last revocation (rebalance_cb, on this thread now) commits what failed */
		rd_kafka_consumer_close(ki->rk);
		rd_kafka_destroy(ki->rk);
	}
	if (ki->uncommitted)
		rd_kafka_topic_partition_list_destroy(ki->uncommitted);
	pthread_mutex_destroy(&ki->why_mu);
	kafka_client_destroy(&ki->client);
	free(ki->b.known);
	free(ki);
}
