/* kafka_intake.c: the Kafka intake (see kafka_intake.h).
 *
 * The loop: poll a batch of messages (up to BATCH_MAX, or what came within BATCH_WAIT_MS),
 * turn each into a store_event_in (decoding its envelope, deriving the subscription of
 * its target, or marking it undecodable), store them all in one transaction, and commit
 * the batch's offsets only after that. A store outage keeps the batch and tries again;
 * nothing is committed before it is durable. The consumer's poll is the only place this
 * thread waits, so stopping is prompt. */
#include "intake/kafka_intake.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/sub_codec.h"
#include "core/metrics.h"
#include "core/trace.h"
#include "intake/ingest.h"
#include "kafka/envelope.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

#define BATCH_MAX 500          /* messages per store transaction at most */
#define BATCH_WAIT_MS 20       /* a batch waits this long for company */
#define PROBE_EVERY_MS 3000    /* broker reachability and lag, this often */
#define PROBE_DOWN_EVERY_MS 1000 /* ... and this often while the brokers do not answer, so
                                    readiness follows a broker's return within seconds */
#define PROBE_TIMEOUT_MS 1000  /* a metadata request waits this long for an answer */
#define IDLE_POLL_MS 200       /* with no message, the loop turns this often: the probe
                                  and the backlog check run on idle topics and while
                                  paused (a paused partition yields no message) */
#define BACKLOG_EVERY_MS 1000  /* kafka_max_backlog is checked this often */
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
	char why[512];
	char dlt_message[128];
	int fanned;                            /* its subscription ids are in the batch's fan */
	size_t fan_start;                      /* ... from here */
	size_t ev_index;                       /* its event in the batch */
};

struct kafka_intake {
	store *st;
	struct sub_registry *reg;
	struct kafka_intake_config cfg;
	rd_kafka_t *rk;
	struct topic_conf topics[TOPICS_MAX];
	size_t n_topics;
	pthread_t thread;
	atomic_int stop;
	atomic_int reachable;                  /* the last probe answered */
	pthread_mutex_t why_mu;
	char why[256];                         /* why not reachable */
	int paused;
	/* derived subscriptions known to exist (ids), so a batch asks the store once */
	char (*known)[UUID_STR_LEN];
	size_t n_known, cap_known;
};

static int parse_topics(struct kafka_intake *ki, const char *list, char *err, size_t errlen)
{
	char *copy = strdup(list), *save = NULL;
	if (!copy) {
		snprintf(err, errlen, "kafka_intake: out of memory");
		return -1;
	}
	for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		while (*t == ' ')
			t++;
		if (!*t)
			continue;
		if (ki->n_topics == TOPICS_MAX) {
			snprintf(err, errlen, "kafka_intake: at most %d topics", TOPICS_MAX);
			free(copy);
			return -1;
		}
		struct topic_conf *tc = &ki->topics[ki->n_topics++];
		char *colon = strchr(t, ':');
		tc->format = FORMAT_ENVELOPE;
		if (colon) {
			*colon = '\0';
			if (strcmp(colon + 1, "dlt") == 0)
				tc->format = FORMAT_DLT;
			else if (strcmp(colon + 1, "event") == 0)
				tc->format = FORMAT_EVENT;
		}
		snprintf(tc->name, sizeof(tc->name), "%s", t);
		snprintf(tc->source, sizeof(tc->source), "kafka:%s", t);
		char key[300];
		snprintf(key, sizeof(key), "kafka-intake:%s", t);
		envelope_hash_id(key, strlen(key), tc->undecodable_sub);
	}
	free(copy);
	return ki->n_topics ? 0 : (snprintf(err, errlen, "kafka_intake names no topic"), -1);
}

static const struct topic_conf *topic_of(const struct kafka_intake *ki, const char *name)
{
	for (size_t i = 0; i < ki->n_topics; i++)
		if (strcmp(ki->topics[i].name, name) == 0)
			return &ki->topics[i];
	return NULL;
}

/* ---- derived subscriptions -------------------------------------------------------------- */

static int known_has(const struct kafka_intake *ki, const char *id)
{
	for (size_t i = 0; i < ki->n_known; i++)
		if (strcmp(ki->known[i], id) == 0)
			return 1;
	return 0;
}

static void known_add(struct kafka_intake *ki, const char *id)
{
	if (ki->n_known == ki->cap_known) {
		size_t cap = ki->cap_known ? ki->cap_known * 2 : 64;
		void *grown = realloc(ki->known, cap * sizeof(*ki->known));
		if (!grown)
			return; /* only a cache: the store is asked again next time */
		ki->known = grown;
		ki->cap_known = cap;
	}
	snprintf(ki->known[ki->n_known++], UUID_STR_LEN, "%s", id);
}

/* Makes sure the subscription of an envelope's target exists: the document (borrowed) is
 * validated like an API request, then created unless it is there already. Returns 0,
 * STORE_UNAVAILABLE (try the batch again), or -1 with why set (the target cannot be a
 * subscription: the message is undecodable). *created is set when a row was added. */
static int derived_ensure(struct kafka_intake *ki, json_t *doc, const char *id, char *why,
			  size_t whylen, int *created)
{
	struct input_error ierr = {0};
	struct sub_row row = {0};
	if (known_has(ki, id))
		return 0;
	struct sub_set *set = sub_registry_acquire(ki->reg);
	int present = sub_set_find(set, id) != NULL;
	sub_registry_release(ki->reg, set);
	if (present) {
		known_add(ki, id);
		return 0;
	}
	if (sub_codec_parse(doc, &ki->cfg.defaults, NULL, &ierr)) {
		snprintf(why, whylen, "the envelope's target cannot be delivered to: %s%s%s",
			 ierr.field[0] ? ierr.field : "", ierr.field[0] ? ": " : "", ierr.message);
		return -1;
	}
	char *text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
	if (!text) {
		snprintf(why, whylen, "out of memory");
		return STORE_UNAVAILABLE;
	}
	snprintf(row.id, sizeof(row.id), "%s", id);
	row.name = (char *)json_string_value(json_object_get(doc, "name"));
	row.config = text;
	row.enabled = 1;
	row.created_at = row.updated_at = clock_now_ms();
	int rc = store_sub_create(ki->st, &row);
	free(text);
	if (rc == STORE_OK)
		*created = 1;
	if (rc == STORE_OK || rc == STORE_CONFLICT) { /* CONFLICT: another instance made it */
		known_add(ki, id);
		return 0;
	}
	snprintf(why, whylen, "%s", store_strerror(rc));
	return STORE_UNAVAILABLE;
}

/* ---- one message -------------------------------------------------------------------------- */

/* 1 when an envelope's event.id can be the webhook-id of its requests: a header value,
 * so visible ASCII only (a UUID, as the envelope's contract says), and bounded. (Also
 * whether a subscription_id can be part of a key as it is.) */
static int upstream_id_valid(const char *id)
{
	size_t n = 0;
	for (; id[n]; n++)
		if (id[n] < 0x21 || id[n] > 0x7e)
			return 0;
	return n <= UPSTREAM_ID_MAX;
}

static void item_clear(struct item *it)
{
	if (it->has_env)
		envelope_free(&it->env);
	if (it->has_json)
		ingest_batch_free(&it->json);
	it->has_env = it->has_json = 0;
	free(it->event_keys);
	it->event_keys = NULL;
}

/* The idempotency key of an envelope (its source is "kafka:TOPIC") into it->key: its
 * event.id and its target, so each copy of one event is its own delivery and only a
 * re-read of the same copy is dropped (a producer sends one envelope per subscriber with
 * the same event id; a dead-letter topic holds one copy per failed subscriber). The
 * target is the envelope's subscription_id when it names one ("ID/sub:SUBSCRIPTION"),
 * else the subscription outboxd derived from its endpoint and auth ("ID/to:DERIVED");
 * an envelope that fans out and names neither is keyed by its id alone. Without an id,
 * the message's place ("PARTITION/OFFSET") is the key: a re-read is the same place. */
static const char *key_of(const struct envelope *e, struct item *it)
{
	if (!e->id[0])
		return it->source_event_id;
	if (e->subscription_id[0]) {
		char hashed[UUID_STR_LEN];
		const char *sub = e->subscription_id;
		if (strlen(sub) > 64 || !upstream_id_valid(sub)) {
			envelope_hash_id(sub, strlen(sub), hashed); /* kept short and printable */
			sub = hashed;
		}
		snprintf(it->key, sizeof(it->key), "%s/sub:%s", e->id, sub);
	} else if (e->endpoint[0]) {
		snprintf(it->key, sizeof(it->key), "%s/to:%s", e->id, it->sub_id);
	} else {
		return e->id;
	}
	return it->key;
}

/* The Kafka header value named name, copied into out ("" when absent). */
static void header_text(const rd_kafka_message_t *m, const char *name, char *out, size_t outlen)
{
	rd_kafka_headers_t *h = NULL;
	const void *v = NULL;
	size_t len = 0;
	out[0] = '\0';
	if (rd_kafka_message_headers(m, &h) == RD_KAFKA_RESP_ERR_NO_ERROR &&
	    rd_kafka_header_get_last(h, name, &v, &len) == RD_KAFKA_RESP_ERR_NO_ERROR && v)
		snprintf(out, outlen, "%.*s", (int)(len < outlen ? len : outlen - 1), (const char *)v);
}

/* Fills ev as an undecodable message: a dead delivery with the raw bytes. */
static void as_undecodable(const struct topic_conf *tc, struct item *it, struct store_event_in *ev)
{
	item_clear(it);
	memset(ev, 0, sizeof(*ev));
	uuid_v7(ev->id);
	ev->event_type = "kafka.undecodable";
	ev->source = tc->source;
	ev->source_event_id = it->source_event_id;
	ev->content_type = "application/octet-stream";
	ev->payload = it->msg->payload ? it->msg->payload : "";
	ev->payload_len = it->msg->len;
	ev->created_at = clock_now_ms();
	snprintf(it->sub_id, sizeof(it->sub_id), "%s", tc->undecodable_sub);
	ev->subscription_ids = (const char (*)[UUID_STR_LEN])it->sub_id;
	ev->n_subscriptions = 1;
	ev->initial_status = DELIVERY_FAILED;
	ev->initial_code = 422;
	ev->initial_message = "undecodable";
	ev->initial_cause = it->why;
}

/* An envelope (formats envelope and dlt) into ev. Returns 0, -1 when the message is
 * undecodable (it->why set), STORE_UNAVAILABLE when the store could not be asked. */
static int from_envelope(struct kafka_intake *ki, const struct topic_conf *tc, struct item *it,
			 struct store_event_in *ev, const struct sub_set *set, int *created,
			 char (**fan)[UUID_STR_LEN], size_t *fan_cap, size_t *fan_used)
{
	struct envelope *e = &it->env;
	if (envelope_decode(it->msg->payload, it->msg->len, e, it->why, sizeof(it->why)))
		return -1;
	it->has_env = 1;
	if (e->id[0] && !upstream_id_valid(e->id)) {
		snprintf(it->why, sizeof(it->why), "event.id must be at most %d visible ASCII "
			 "characters (a UUID): it is the webhook-id of the event's requests",
			 UPSTREAM_ID_MAX);
		return -1;
	}
	if ((int64_t)e->payload_len > ki->cfg.max_payload) {
		/* as POST /v1/events would answer 413: kept whole, but not delivered */
		snprintf(it->why, sizeof(it->why), "event.payload is %zu bytes, over max_payload "
			 "(%lld)", e->payload_len, (long long)ki->cfg.max_payload);
		return -1;
	}
	memset(ev, 0, sizeof(*ev));
	uuid_v7(ev->id);
	ev->event_type = e->type;
	ev->source = tc->source;
	/* the event keeps its id at every hop: its deliveries' webhook-id (and the id of
	 * the envelopes outboxd publishes of it) is the envelope's event.id */
	ev->webhook_id = e->id[0] ? e->id : NULL;
	ev->partition_key = e->partition_key[0] ? e->partition_key : NULL;
	ev->traceparent = e->traceparent[0] && trace_valid(e->traceparent) ? e->traceparent : NULL;
	ev->content_type = e->payload_type == 2 ? "application/octet-stream" : "application/json";
	ev->payload = e->payload ? e->payload : "";
	ev->payload_len = e->payload_len;
	ev->created_at = clock_now_ms();
	if (e->endpoint[0]) {
		json_t *doc = envelope_subscription_doc(e, it->sub_id, it->why, sizeof(it->why));
		if (!doc)
			return -1;
		int rc = derived_ensure(ki, doc, it->sub_id, it->why, sizeof(it->why), created);
		json_decref(doc);
		if (rc)
			return rc;
		ev->subscription_ids = (const char (*)[UUID_STR_LEN])it->sub_id;
		ev->n_subscriptions = 1;
		ev->source_event_id = key_of(e, it);
	} else {
		ev->source_event_id = key_of(e, it);
		/* fan out: the ids go to the shared array, appended after the earlier items' */
		char(*ids)[UUID_STR_LEN] = NULL;
		size_t cap = 0;
		long n = sub_set_match(set, e->type, &ids, &cap);
		if (n < 0) {
			free(ids);
			snprintf(it->why, sizeof(it->why), "out of memory");
			return STORE_UNAVAILABLE;
		}
		if (*fan_used + (size_t)n > *fan_cap) {
			size_t ncap = (*fan_used + (size_t)n) * 2 + 64;
			void *grown = realloc(*fan, ncap * UUID_STR_LEN);
			if (!grown) {
				free(ids);
				return STORE_UNAVAILABLE;
			}
			*fan = grown;
			*fan_cap = ncap;
		}
		if (n)
			memcpy(*fan + *fan_used, ids, (size_t)n * UUID_STR_LEN);
		/* pointed at once the array stops moving (store_batch) */
		it->fanned = 1;
		it->fan_start = *fan_used;
		ev->n_subscriptions = (size_t)n;
		*fan_used += (size_t)n;
		free(ids);
	}
	if (tc->format == FORMAT_DLT) {
		/* A dead-letter processor stores the message as NEW and leaves its first try to
		 * the scheduled layer, after retry_interval: the immediate tries were spent
		 * upstream. The upstream error is its last error until then. */
		char code[16];
		header_text(it->msg, "outboxd-error-code", code, sizeof(code));
		header_text(it->msg, "outboxd-error-message", it->dlt_message, sizeof(it->dlt_message));
		ev->initial_status = DELIVERY_NEW;
		ev->starts_scheduled = 1;
		ev->first_due_at = ev->created_at + ki->cfg.retry_interval_ms;
		ev->initial_code = atoi(code) > 0 ? atoi(code) : 0;
		ev->initial_message = "dead-lettered upstream";
		snprintf(it->why, sizeof(it->why), "consumed from dead-letter topic %s%s%s", tc->name,
			 it->dlt_message[0] ? "; upstream error: " : "", it->dlt_message);
		ev->initial_cause = it->why;
	}
	return 0;
}

/* ---- the loop ----------------------------------------------------------------------------- */

static void set_reachable(struct kafka_intake *ki, int ok, const char *why)
{
	int was = atomic_exchange(&ki->reachable, ok);
	pthread_mutex_lock(&ki->why_mu);
	snprintf(ki->why, sizeof(ki->why), "%s", why ? why : "");
	pthread_mutex_unlock(&ki->why_mu);
	if (was && !ok)
		log_error("kafka intake: brokers %s not reachable: %s", ki->cfg.settings->brokers, why);
	else if (!was && ok)
		log_info("kafka intake: brokers %s reachable; consuming %zu topics",
			 ki->cfg.settings->brokers, ki->n_topics);
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
	for (size_t i = 0; i < ki->n_topics; i++) {
		struct delivery_filter f = {.has_status = 1, .status = DELIVERY_NEW,
						  .source = ki->topics[i].source, .limit = 1};
		size_t n = 0;
		if (store_deliveries_count(ki->st, &f, &n) != STORE_OK)
			return;
		total += n;
	}
	int over = total > (size_t)ki->cfg.settings->max_backlog;
	int under = total < (size_t)ki->cfg.settings->max_backlog / 2;
	if ((!ki->paused && !over) || (ki->paused && !under))
		return;
	rd_kafka_topic_partition_list_t *parts = NULL;
	if (rd_kafka_assignment(ki->rk, &parts) || !parts)
		return;
	if (!ki->paused) {
		rd_kafka_pause_partitions(ki->rk, parts);
		log_warn("kafka intake: %zu deliveries not yet sent (kafka_max_backlog %d): pausing",
			 total, ki->cfg.settings->max_backlog);
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

/* Turns the batch into events and stores them; returns STORE_OK, or an error when the
 * store is unavailable (the caller tries the same batch again). */
static int store_batch(struct kafka_intake *ki, struct item *items, size_t n, int *undecodable)
{
	struct store_event_in *evs = calloc(n * 2 + 1, sizeof(*evs));
	char(*fan)[UUID_STR_LEN] = NULL;
	size_t fan_cap = 0, fan_used = 0, n_ev = 0;
	int rc = STORE_OK, created = 0;
	struct sub_set *set = sub_registry_acquire(ki->reg);

	*undecodable = 0;
	if (!evs) {
		rc = STORE_UNAVAILABLE;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct item *it = &items[i];
		const rd_kafka_message_t *m = it->msg;
		const struct topic_conf *tc = topic_of(ki, rd_kafka_topic_name(m->rkt));
		item_clear(it);
		it->why[0] = '\0';
		it->fanned = 0;
		it->ev_index = n_ev;
		snprintf(it->source_event_id, sizeof(it->source_event_id), "%d/%lld",
			 (int)m->partition, (long long)m->offset);
		if (!tc)
			continue;
		if (tc->format == FORMAT_EVENT) {
			struct input_error ierr = {0};
			if (ingest_parse(m->payload ? m->payload : "", m->len, ki->cfg.max_payload,
					 &it->json, &ierr) == 0) {
				it->has_json = 1;
				if (ingest_fanout(&it->json, set)) {
					rc = STORE_UNAVAILABLE;
					goto out;
				}
				/* a batch message may hold several events: room grows as needed */
				if (it->json.n > 1) {
					void *grown = realloc(evs, (n * 2 + it->json.n + n_ev + 1) * sizeof(*evs));
					if (!grown) {
						rc = STORE_UNAVAILABLE;
						goto out;
					}
					evs = grown;
				}
				if (it->json.n > 1 &&
				    !(it->event_keys = calloc(it->json.n, sizeof(*it->event_keys)))) {
					rc = STORE_UNAVAILABLE;
					goto out;
				}
				for (size_t k = 0; k < it->json.n; k++) {
					struct store_event_in *ev = &evs[n_ev++];
					*ev = it->json.events[k];
					if (ev->source_event_id)
						continue;
					/* idempotent on re-reads: an event without a key of its own
					 * is keyed by its place, the message's and its index in it */
					ev->source = tc->source;
					if (it->json.n == 1) {
						ev->source_event_id = it->source_event_id;
						continue;
					}
					snprintf(it->event_keys[k], sizeof(it->event_keys[k]), "%s/%zu",
						 it->source_event_id, k);
					ev->source_event_id = it->event_keys[k];
				}
				continue;
			}
			snprintf(it->why, sizeof(it->why), "%s%s%s", ierr.field,
				 ierr.field[0] ? ": " : "", ierr.message);
			as_undecodable(tc, it, &evs[n_ev++]);
			(*undecodable)++;
			continue;
		}
		int r = from_envelope(ki, tc, it, &evs[n_ev], set, &created, &fan, &fan_cap,
				      &fan_used);
		if (r == STORE_UNAVAILABLE) {
			rc = r;
			goto out;
		}
		if (r) {
			as_undecodable(tc, it, &evs[n_ev]);
			(*undecodable)++;
		}
		n_ev++;
	}
	/* fan-out ids were appended to fan while it grew: point at them now */
	for (size_t i = 0; i < n; i++)
		if (items[i].fanned && evs[items[i].ev_index].n_subscriptions)
			evs[items[i].ev_index].subscription_ids =
				(const char (*)[UUID_STR_LEN])fan[items[i].fan_start];
	if (created) /* the dispatcher must know them before it claims their deliveries */
		store_subs_load(ki->st, ki->reg, &ki->cfg.defaults);
	rc = n_ev ? writer_ingest(ki->cfg.writer, evs, n_ev) : STORE_OK;
out:
	sub_registry_release(ki->reg, set);
	free(evs);
	free(fan);
	return rc;
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
		while ((rc = store_batch(ki, items, n, &undecodable)) != STORE_OK &&
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
			if (ki->cfg.wake)
				ki->cfg.wake(ki->cfg.wake_ctx);
			commit_batch(ki, items, n);
		}
		for (size_t i = 0; i < n; i++) {
			item_clear(&items[i]);
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
	ki->st = st;
	ki->reg = reg;
	ki->cfg = *cfg;
	pthread_mutex_init(&ki->why_mu, NULL);
	snprintf(ki->why, sizeof(ki->why), "not probed yet");
	if (parse_topics(ki, cfg->settings->intake, err, errlen))
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
	subs = rd_kafka_topic_partition_list_new((int)ki->n_topics);
	for (size_t i = 0; i < ki->n_topics; i++)
		rd_kafka_topic_partition_list_add(subs, ki->topics[i].name, RD_KAFKA_PARTITION_UA);
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
	free(ki->known);
	free(ki);
}
