/* kafka_batch.c: a batch of Kafka messages into events and deliveries (see
 * kafka_intake.h for the formats): each message decoded (an OutboxEvent envelope, a JSON
 * event or batch), the subscription of an envelope's target derived and created once,
 * the idempotency key made (docs/kafka.md, "The idempotency key"), a message that cannot
 * be decoded turned into a dead delivery; then the whole batch stored through the writer
 * in one transaction. Must not commit offsets or poll: kafka_intake.c does, after this
 * returns STORE_OK. */
#include "intake/kafka_intake_int.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/header.h"
#include "core/sub_codec.h"
#include "core/trace.h"
#include "util/clock.h"
#include "util/uuid.h"

int kafka_batch_topics(struct kafka_batch *b, const char *list, char *err, size_t errlen)
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
		if (b->n_topics == TOPICS_MAX) {
			snprintf(err, errlen, "kafka_intake: at most %d topics", TOPICS_MAX);
			free(copy);
			return -1;
		}
		struct topic_conf *tc = &b->topics[b->n_topics++];
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
	return b->n_topics ? 0 : (snprintf(err, errlen, "kafka_intake names no topic"), -1);
}

static const struct topic_conf *topic_of(const struct kafka_batch *b, const char *name)
{
	for (size_t i = 0; i < b->n_topics; i++)
		if (strcmp(b->topics[i].name, name) == 0)
			return &b->topics[i];
	return NULL;
}

/* ---- derived subscriptions -------------------------------------------------------------- */

static int known_has(const struct kafka_batch *b, const char *id)
{
	for (size_t i = 0; i < b->n_known; i++)
		if (strcmp(b->known[i], id) == 0)
			return 1;
	return 0;
}

static void known_add(struct kafka_batch *b, const char *id)
{
	if (b->n_known == b->cap_known) {
		size_t cap = b->cap_known ? b->cap_known * 2 : 64;
		void *grown = realloc(b->known, cap * sizeof(*b->known));
		if (!grown)
			return; /* only a cache: the store is asked again next time */
		b->known = grown;
		b->cap_known = cap;
	}
	snprintf(b->known[b->n_known++], UUID_STR_LEN, "%s", id);
}

/* Makes sure the subscription of an envelope's target exists: the document (borrowed) is
 * validated like an API request, then created unless it is there already. Returns 0,
 * STORE_UNAVAILABLE (try the batch again), or -1 with why set (the target cannot be a
 * subscription: the message is undecodable). *created is set when a row was added. */
static int derived_ensure(struct kafka_batch *b, json_t *doc, const char *id, char *why,
			  size_t whylen, int *created)
{
	struct input_error ierr = {0};
	struct sub_row row = {0};
	if (known_has(b, id))
		return 0;
	struct sub_set *set = sub_registry_acquire(b->reg);
	int present = sub_set_find(set, id) != NULL;
	sub_registry_release(b->reg, set);
	if (present) {
		known_add(b, id);
		return 0;
	}
	if (sub_codec_parse(doc, &b->cfg.defaults, NULL, &ierr)) {
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
	int rc = store_sub_create(b->st, &row);
	free(text);
	if (rc == STORE_OK)
		*created = 1;
	if (rc == STORE_OK || rc == STORE_CONFLICT) { /* CONFLICT: another instance made it */
		known_add(b, id);
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

void kafka_batch_item_clear(struct item *it)
{
	if (it->has_env)
		envelope_free(&it->env);
	if (it->has_json)
		ingest_batch_free(&it->json);
	it->has_env = it->has_json = 0;
	free(it->event_keys);
	it->event_keys = NULL;
	free(it->masked);
	it->masked = NULL;
	it->masked_len = 0;
}

/* Keeps the message as ev's envelope, for the API's view of its deliveries: as it came,
 * or with its credentials masked when it carries any (they belong to the subscription
 * derived from its target, sealed at rest with it; the events table is not sealed).
 * may_hold_credentials 0 says the decoded envelope has none: the message is kept without
 * being unpacked again. Returns 0, or -1 when memory ran out. */
static int keep_envelope(struct item *it, struct store_event_in *ev, int may_hold_credentials)
{
	int r = !may_hold_credentials ? 0
		: envelope_redact(it->msg->payload ? it->msg->payload : "", it->msg->len,
				  &it->masked, &it->masked_len);
	if (r < 0)
		return -1;
	ev->envelope = r ? it->masked : (it->msg->payload ? it->msg->payload : "");
	ev->envelope_len = r ? it->masked_len : it->msg->len;
	return 0;
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
	kafka_batch_item_clear(it);
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
	/* a message of an envelope topic is shown as one, with why it could not be read;
	 * without memory it is shown by its payload alone */
	if (tc->format != FORMAT_EVENT && keep_envelope(it, ev, 1))
		ev->envelope = NULL;
}

/* An envelope (formats envelope and dlt) into ev. Returns 0, -1 when the message is
 * undecodable (it->why set), STORE_UNAVAILABLE when the store could not be asked. */
static int from_envelope(struct kafka_batch *b, const struct topic_conf *tc, struct item *it,
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
	if (!header_value_valid(e->type, strlen(e->type))) {
		snprintf(it->why, sizeof(it->why), "event.type " HEADER_VALUE_RULE ": it is the "
			 "outboxd-event-type header of the event's requests");
		return -1;
	}
	if ((int64_t)e->payload_len > b->cfg.max_payload) {
		/* as POST /v1/events would answer 413: kept whole, but not delivered */
		snprintf(it->why, sizeof(it->why), "event.payload is %zu bytes, over max_payload "
			 "(%lld)", e->payload_len, (long long)b->cfg.max_payload);
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
	if (keep_envelope(it, ev, envelope_has_credentials(e))) {
		snprintf(it->why, sizeof(it->why), "out of memory");
		return STORE_UNAVAILABLE;
	}
	if (e->endpoint[0]) {
		json_t *doc = envelope_subscription_doc(e, it->sub_id, it->why, sizeof(it->why));
		if (!doc)
			return -1;
		int rc = derived_ensure(b, doc, it->sub_id, it->why, sizeof(it->why), created);
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
		long n = sub_set_match(set, e->type, ev->content_type, ev->payload, ev->payload_len,
				       &ids, &cap);
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
		ev->first_due_at = ev->created_at + b->cfg.retry_interval_ms;
		ev->initial_code = atoi(code) > 0 ? atoi(code) : 0;
		ev->initial_message = "dead-lettered upstream";
		snprintf(it->why, sizeof(it->why), "consumed from dead-letter topic %s%s%s", tc->name,
			 it->dlt_message[0] ? "; upstream error: " : "", it->dlt_message);
		ev->initial_cause = it->why;
	}
	return 0;
}

/* Turns the batch into events and stores them; returns STORE_OK, or an error when the
 * store is unavailable (the caller tries the same batch again). */
int kafka_batch_store(struct kafka_batch *b, struct item *items, size_t n, int *undecodable)
{
	struct store_event_in *evs = calloc(n * 2 + 1, sizeof(*evs));
	char(*fan)[UUID_STR_LEN] = NULL;
	size_t fan_cap = 0, fan_used = 0, n_ev = 0;
	int rc = STORE_OK, created = 0;
	struct sub_set *set = sub_registry_acquire(b->reg);

	*undecodable = 0;
	/* A set that may not be the store's could leave a subscription out of the fan-out:
	 * nothing is stored or committed until it is read again (the batch is kept). */
	if (!evs || !sub_registry_current(b->reg, NULL, 0)) {
		rc = STORE_UNAVAILABLE;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct item *it = &items[i];
		const rd_kafka_message_t *m = it->msg;
		const struct topic_conf *tc = topic_of(b, rd_kafka_topic_name(m->rkt));
		kafka_batch_item_clear(it);
		it->why[0] = '\0';
		it->fanned = 0;
		it->ev_index = n_ev;
		snprintf(it->source_event_id, sizeof(it->source_event_id), "%d/%lld",
			 (int)m->partition, (long long)m->offset);
		if (!tc)
			continue;
		if (tc->format == FORMAT_EVENT) {
			struct input_error ierr = {0};
			if (ingest_parse(m->payload ? m->payload : "", m->len, b->cfg.max_payload,
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
		int r = from_envelope(b, tc, it, &evs[n_ev], set, &created, &fan, &fan_cap,
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
		store_subs_load(b->st, b->reg, &b->cfg.defaults);
	/* never the spool: Kafka keeps the messages until their offsets are committed */
	rc = n_ev ? writer_ingest_stored(b->cfg.writer, evs, n_ev) : STORE_OK;
out:
	sub_registry_release(b->reg, set);
	free(evs);
	free(fan);
	return rc;
}

