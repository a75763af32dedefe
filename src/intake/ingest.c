/* ingest.c: validation of ingested events and their fan-out (see ingest.h). */
#include "intake/ingest.h"

#include "core/header.h"
#include "core/ops_event.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>


#include "util/base64.h"
#include "util/clock.h"
#include "util/jsonspan.h"
#include "util/jsonvalid.h"
#include "util/uuid.h"

/* The members an event may have, looked up once per event. */
enum event_key {
	KEY_EVENT_TYPE, KEY_SOURCE, KEY_SOURCE_EVENT_ID, KEY_PARTITION_KEY, KEY_PAYLOAD,
	KEY_PAYLOAD_BASE64, KEY_CONTENT_TYPE, N_EVENT_KEYS
};

static const char *const event_keys[N_EVENT_KEYS] = {
	"event_type", "source", "source_event_id", "partition_key", "payload",
	"payload_base64", "content_type",
};

/* Byte span of one event's "payload" value, relative to the whole body. */
struct span {
	size_t start, end;
	int found;
};

/* Keys reach the span callbacks decoded but not NUL-terminated. */
static int key_is(const char *key, size_t key_len, const char *name)
{
	return key_len == strlen(name) && memcmp(key, name, key_len) == 0;
}

struct payload_walk {
	size_t base;           /* offset of the object being walked within the body */
	struct span *span;
};

static int payload_member_cb(void *ctx, const char *key, size_t key_len, size_t start,
			     size_t end)
{
	struct payload_walk *w = ctx;
	if (key_is(key, key_len, "payload")) {
		w->span->start = w->base + start;
		w->span->end = w->base + end;
		w->span->found = 1;
	}
	return 0;
}

struct events_walk {
	const char *body;
	size_t base;
	struct span *spans;
	size_t n;
};

static int event_element_cb(void *ctx, size_t index, size_t start, size_t end)
{
	struct events_walk *w = ctx;
	if (index >= w->n)
		return -1;
	struct payload_walk pw = {w->base + start, &w->spans[index]};
	/* an element that is not an object keeps found = 0; parse_event reports it */
	jsonspan_object(w->body + w->base + start, end - start, payload_member_cb, &pw);
	return 0;
}

static int events_member_cb(void *ctx, const char *key, size_t key_len, size_t start,
			    size_t end)
{
	struct events_walk *w = ctx;
	if (!key_is(key, key_len, "events"))
		return 0;
	w->base = start;
	return jsonspan_array(w->body + start, end - start, event_element_cb, w);
}

/* ---- the parse without the payloads' trees --------------------------------------------- */

/* The payload spans of a body not parsed yet (fast_load): one per event, growable. */
struct fast_walk {
	const char *body;
	size_t base;                  /* the "events" array's offset in the body */
	struct span *spans;
	size_t n, cap;
	int events, payload;          /* the body has members "events", "payload" */
};

static int fast_element_cb(void *ctx, size_t index, size_t start, size_t end)
{
	struct fast_walk *w = ctx;
	if (index != w->n || index >= INGEST_MAX_BATCH)
		return -1;
	if (w->n == w->cap) {
		size_t cap = w->cap ? w->cap * 2 : 128;
		struct span *more = realloc(w->spans, cap * sizeof(*more));
		if (!more)
			return -1;
		w->spans = more;
		w->cap = cap;
	}
	struct span *sp = &w->spans[w->n++];
	memset(sp, 0, sizeof(*sp));
	struct payload_walk pw = {w->base + start, sp};
	jsonspan_object(w->body + w->base + start, end - start, payload_member_cb, &pw);
	return 0;
}

static int fast_member_cb(void *ctx, const char *key, size_t key_len, size_t start,
			  size_t end)
{
	struct fast_walk *w = ctx;
	if (key_is(key, key_len, "events")) {
		w->events++;
		w->base = start;
		return jsonspan_array(w->body + start, end - start, fast_element_cb, w);
	}
	if (key_is(key, key_len, "payload")) {
		w->payload++;
		if (w->n == 0 && !(w->spans = calloc(1, sizeof(*w->spans))))
			return -1;
		w->n = w->cap = 1;
		w->spans[0] = (struct span){start, end, 1};
	}
	return 0;
}

/* The body parsed by jansson with every payload value replaced by "0 ", each payload
 * checked by jsonvalid_value instead: jansson built a tree of every payload only to
 * validate it (the bytes stored are the producer's), ~35,000 of the API's ~45,000
 * instructions per event of bench/quick.sh. Sound because a JSON value put in the place of
 * another in a valid document leaves it valid: the body is valid exactly when the document
 * with "0 " in the payloads' places is, and each payload is. A span starts after ':' or
 * whitespace; the space keeps the byte after it from continuing the 0 ("{}.5" must not
 * read as 0.5; the walk also refuses a member followed by anything but ',' or '}', and a
 * scalar's span takes every byte that could continue it). NULL when this way cannot tell (no span
 * found where one should be, a payload jsonvalid_value is not sure of, an invalid body):
 * the caller parses the body whole, which also gives jansson's error. On success, *spans
 * (n of them, one per event; the caller frees them) are the payloads' places in the
 * body. */
static json_t *fast_load(const char *body, size_t len, struct span **spans, size_t *n)
{
	struct fast_walk w = {.body = body};
	json_t *root = NULL;
	char *copy = NULL;
	size_t at = 0, out = 0;

	if (jsonspan_object(body, len, fast_member_cb, &w) != 0 || w.events + w.payload != 1 ||
	    (w.events && w.n == 0))
		goto out;
	for (size_t i = 0; i < w.n; i++) {
		const struct span *sp = &w.spans[i];
		if (!sp->found)
			continue;
		if (sp->start < at || sp->end <= sp->start || sp->end > len ||
		    !jsonvalid_value(body + sp->start, sp->end - sp->start))
			goto out;
		at = sp->end;
	}
	if (!(copy = malloc(len + 2 * w.n + 1)))
		goto out;
	at = 0;
	for (size_t i = 0; i < w.n; i++) {
		const struct span *sp = &w.spans[i];
		if (!sp->found)
			continue;
		memcpy(copy + out, body + at, sp->start - at);
		out += sp->start - at;
		copy[out++] = '0';
		copy[out++] = ' ';
		at = sp->end;
	}
	memcpy(copy + out, body + at, len - at);
	out += len - at;
	root = json_loadb(copy, out, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, NULL);
	if (root) {
		json_t *list = json_object_get(root, "events");
		/* the walk saw what jansson saw, or this way is not taken */
		if (!json_is_object(root) || (w.events ? json_array_size(list) != w.n : w.n != 1)) {
			json_decref(root);
			root = NULL;
		}
	}
out:
	free(copy);
	if (root) {
		*spans = w.spans;
		*n = w.n;
	} else {
		free(w.spans);
	}
	return root;
}

/* Which event is being parsed, to name fields in errors. */
struct event_at {
	int is_batch;
	size_t index;
};

/* Writes the error field of member name of an event into field: "events[3].name" in a
 * batch, "name" for a lone event; name "" gives the prefix "events[3].". Formatted only
 * when an error is reported, so a valid batch costs no formatting per event. */
static const char *event_field(char *field, size_t size, const struct event_at *at,
			       const char *name)
{
	char prefix[32] = "";
	if (at->is_batch)
		snprintf(prefix, sizeof(prefix), "events[%zu].", at->index);
	snprintf(field, size, "%s%s", prefix, name);
	return field;
}

static int valid_event_type(const char *s, size_t len)
{
	if (len == 0 || len > 255)
		return 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c <= ' ' || c >= 0x7f || c == '*' || c == '?')
			return 0;
	}
	return 1;
}

int ingest_check_event_type(const char *type, size_t len, const char *field,
			    struct input_error *err)
{
	if (!type)
		return input_error_set(err, 400, "invalid_argument", field, "%s is required", field);
	if (!valid_event_type(type, len))
		return input_error_set(err, 400, "invalid_argument", field,
				       "%s must be a string of 1 to 255 printable characters without spaces, '*' or '?'",
				       field);
	if (ops_event_type(type))
		return input_error_set(err, 400, "invalid_argument", field,
				       "%s: event types starting with \"outboxd.\" are outboxd's "
				       "own operational events", field);
	return 0;
}

/* The first member of obj (in document order) that is not an event field, or NULL. */
static const char *unknown_member(json_t *obj)
{
	const char *key;
	json_t *v;
	json_object_foreach(obj, key, v) {
		int known = 0;
		for (int k = 0; k < N_EVENT_KEYS; k++)
			known |= strcmp(event_keys[k], key) == 0;
		if (!known)
			return key;
	}
	return NULL;
}

/* An optional string member v (may be NULL) of at most max bytes; *out borrowed from the
 * document. */
static int opt_string(json_t *v, const struct event_at *at, enum event_key key, size_t max,
		      const char **out, struct input_error *err)
{
	*out = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v) || json_string_length(v) > max ||
	    strlen(json_string_value(v)) != json_string_length(v)) {
		char field[160];
		event_field(field, sizeof(field), at, event_keys[key]);
		return input_error_set(err, 400, "invalid_argument", field,
				       "%s must be a string of at most %zu characters", field, max);
	}
	*out = json_string_value(v);
	return 0;
}

static int parse_event(json_t *obj, const char *body, const struct span *span,
		       const struct event_at *at, int64_t max_payload, int64_t now,
		       struct store_event_in *ev, void **decoded, struct input_error *err)
{
	char field[160], prefix[32];
	const char *unknown, *type, *b64;
	json_t *member[N_EVENT_KEYS], *v;
	size_t known = 0;

	if (!json_is_object(obj)) {
		event_field(prefix, sizeof(prefix), at, "");
		snprintf(field, sizeof(field), "%.*s", (int)(strlen(prefix) ? strlen(prefix) - 1 : 0),
			 prefix);
		return input_error_set(err, 400, "invalid_argument", field,
				       "an event must be a JSON object");
	}
	/* Keys are unique (JSON_REJECT_DUPLICATES), so a member count above the known
	 * fields found means an unknown one; only then is it searched for by name. */
	for (int k = 0; k < N_EVENT_KEYS; k++)
		known += (member[k] = json_object_get(obj, event_keys[k])) != NULL;
	if (known != json_object_size(obj) && (unknown = unknown_member(obj))) {
		event_field(field, sizeof(field), at, unknown);
		return input_error_set(err, 400, "invalid_argument", field,
				       "unknown field \"%s\"", field);
	}

	v = member[KEY_EVENT_TYPE];
	/* a member that is not a string is refused like a bad one: "" has length 0 */
	type = !v ? NULL : json_is_string(v) ? json_string_value(v) : "";
	if (ingest_check_event_type(type, type && json_is_string(v) ? json_string_length(v) : 0,
				    event_field(field, sizeof(field), at, "event_type"), err))
		return -1;

	if (opt_string(member[KEY_SOURCE], at, KEY_SOURCE, 255, &ev->source, err) ||
	    opt_string(member[KEY_SOURCE_EVENT_ID], at, KEY_SOURCE_EVENT_ID, 255,
		       &ev->source_event_id, err) ||
	    opt_string(member[KEY_PARTITION_KEY], at, KEY_PARTITION_KEY, 255,
		       &ev->partition_key, err) ||
	    opt_string(member[KEY_CONTENT_TYPE], at, KEY_CONTENT_TYPE, 128, &ev->content_type,
		       err) ||
	    opt_string(member[KEY_PAYLOAD_BASE64], at, KEY_PAYLOAD_BASE64,
		       (size_t)max_payload * 4 / 3 + 4, &b64, err))
		return -1;
	/* the content type is the Content-Type header of the event's requests */
	if (ev->content_type && !header_value_valid(ev->content_type, strlen(ev->content_type))) {
		event_field(field, sizeof(field), at, "content_type");
		return input_error_set(err, 400, "invalid_argument", field,
				       "%s " HEADER_VALUE_RULE, field);
	}
	if (!ev->source)
		ev->source = "";
	if (ev->source_event_id && !*ev->source_event_id)
		ev->source_event_id = NULL;
	ev->event_type = type;

	int has_payload = member[KEY_PAYLOAD] != NULL;
	if (has_payload == (b64 != NULL)) {
		event_field(prefix, sizeof(prefix), at, "");
		event_field(field, sizeof(field), at, "payload");
		return input_error_set(err, 400, "invalid_argument", field,
				       "exactly one of %spayload and %spayload_base64 is required",
				       prefix, prefix);
	}
	if (has_payload) {
		if (!span->found) {
			event_field(field, sizeof(field), at, "payload");
			return input_error_set(err, 400, "invalid_argument", field,
					       "%s could not be located in the body", field);
		}
		ev->payload = body + span->start;
		ev->payload_len = span->end - span->start;
		if (!ev->content_type)
			ev->content_type = "application/json";
	} else {
		size_t len = strlen(b64), n = 0;
		unsigned char *out = malloc(base64_decoded_max(len) + 1);
		if (!out || base64_decode(b64, len, out, base64_decoded_max(len) + 1, &n)) {
			free(out);
			event_field(field, sizeof(field), at, "payload_base64");
			return input_error_set(err, 400, "invalid_argument", field,
					       "%s must be standard base64", field);
		}
		*decoded = out;
		ev->payload = out;
		ev->payload_len = n;
		if (!ev->content_type)
			ev->content_type = "application/octet-stream";
	}
	if ((int64_t)ev->payload_len > max_payload) {
		event_field(field, sizeof(field), at, has_payload ? "payload" : "payload_base64");
		return input_error_set(err, 413, "payload_too_large", field,
				       "%s is %zu bytes, more than the limit of %lld", field,
				       ev->payload_len, (long long)max_payload);
	}
	uuid_v7(ev->id);
	ev->created_at = now;
	return 0;
}

int ingest_parse(const char *body, size_t len, int64_t max_payload, struct ingest_batch *b,
		 struct input_error *err)
{
	json_error_t jerr;
	struct span *spans = NULL;
	json_t *root, *list;
	int64_t now;
	int rc = -1;

	memset(b, 0, sizeof(*b));
	/* Nearly always, jansson parses the body without its payloads (fast_load). Otherwise
	 * the one parse of the whole body: it validates everything and gives the fields; the
	 * payload spans are then found by jsonspan, which relies on this validation.
	 * JSON_DECODE_INT_AS_REAL: without it jansson refuses integers beyond int64, yet
	 * 18446744073709551615 is valid JSON (a uint64 id); no event field is a number, and
	 * payloads keep their text. */
	size_t n_fast = 0;
	root = fast_load(body, len, &spans, &n_fast);
	if (!root)
		root = json_loadb(body, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL,
				  &jerr);
	if (!root)
		return input_error_set(err, 400, "invalid_json", "",
				       "the body is not valid JSON: %s (line %d, column %d)", jerr.text,
				       jerr.line, jerr.column);
	b->root = root;
	if (!json_is_object(root)) {
		input_error_set(err, 400, "invalid_argument", "",
				"the body must be an event object or {\"events\":[...]}");
		goto out;
	}
	list = json_object_get(root, "events");
	b->is_batch = list != NULL;
	if (b->is_batch) {
		if (json_object_size(root) != 1) {
			const char *key;
			json_t *v;
			json_object_foreach(root, key, v) {
				if (strcmp(key, "events") != 0) {
					input_error_set(err, 400, "invalid_argument", key,
							"unknown field \"%s\" next to \"events\"", key);
					goto out;
				}
			}
		}
		if (!json_is_array(list) || json_array_size(list) == 0 ||
		    json_array_size(list) > INGEST_MAX_BATCH) {
			input_error_set(err, 400, "invalid_argument", "events",
					"events must be an array of 1 to %d events", INGEST_MAX_BATCH);
			goto out;
		}
		b->n = json_array_size(list);
	} else {
		b->n = 1;
	}
	b->events = calloc(b->n, sizeof(*b->events));
	b->decoded = calloc(b->n, sizeof(*b->decoded));
	if (!spans)
		spans = calloc(b->n, sizeof(*spans));
	if (!b->events || !b->decoded || !spans) {
		input_error_set(err, 500, "internal", "", "out of memory");
		goto out;
	}
	if (n_fast) {
		/* fast_load found them, for this very document */
	} else if (b->is_batch) {
		struct events_walk w = {body, 0, spans, b->n};
		jsonspan_object(body, len, events_member_cb, &w);
	} else {
		struct payload_walk pw = {0, &spans[0]};
		jsonspan_object(body, len, payload_member_cb, &pw);
	}
	now = clock_now_ms(); /* one "now" for the whole batch */
	for (size_t i = 0; i < b->n; i++) {
		struct event_at at = {b->is_batch, i};
		json_t *obj = b->is_batch ? json_array_get(list, i) : root;
		if (parse_event(obj, body, &spans[i], &at, max_payload, now, &b->events[i],
				&b->decoded[i], err))
			goto out;
	}
	rc = 0;
out:
	free(spans);
	if (rc)
		ingest_batch_free(b);
	return rc;
}

int ingest_fanout(struct ingest_batch *b, const struct sub_set *set)
{
	size_t total = 0;
	size_t *counts = calloc(b->n ? b->n : 1, sizeof(*counts));
	char (*tmp)[UUID_STR_LEN] = NULL;
	size_t tmp_cap = 0;

	if (!counts)
		return -1;
	/* First pass: collect every event's targets into one array, so the pointers given
	 * to the store stay valid (no realloc after they are set). */
	for (size_t i = 0; i < b->n; i++) {
		const struct store_event_in *ev = &b->events[i];
		long m = sub_set_match(set, ev->event_type, ev->content_type, ev->payload,
				       ev->payload_len, &tmp, &tmp_cap);
		if (m < 0)
			goto fail;
		size_t need = total + (size_t)m;
		if (need > b->sub_cap) {
			size_t cap = need * 2;
			char (*grown)[UUID_STR_LEN] = realloc(b->sub_ids, cap * sizeof(*grown));
			if (!grown)
				goto fail;
			b->sub_ids = grown;
			b->sub_cap = cap;
		}
		if (m > 0)
			memcpy(b->sub_ids + total, tmp, (size_t)m * sizeof(*tmp));
		counts[i] = (size_t)m;
		total = need;
	}
	size_t off = 0;
	for (size_t i = 0; i < b->n; i++) {
		b->events[i].subscription_ids = counts[i] ? (const char(*)[UUID_STR_LEN])(b->sub_ids + off)
							 : NULL;
		b->events[i].n_subscriptions = counts[i];
		off += counts[i];
	}
	free(tmp);
	free(counts);
	return 0;
fail:
	free(tmp);
	free(counts);
	return -1;
}

void ingest_batch_free(struct ingest_batch *b)
{
	if (b->decoded)
		for (size_t i = 0; i < b->n; i++)
			free(b->decoded[i]);
	free(b->decoded);
	free(b->events);
	free(b->sub_ids);
	json_decref(b->root);
	memset(b, 0, sizeof(*b));
}
