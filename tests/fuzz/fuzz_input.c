/* fuzz_input.c: libFuzzer target for what outboxd parses from the network — ingest
 * bodies (intake/ingest.c with util/jsonspan.c) and subscription documents
 * (core/sub_codec.c) — under AddressSanitizer and UndefinedBehaviorSanitizer.
 *
 * Besides "no crash, no leak, no undefined behaviour", it checks what ingest promises:
 * a payload handed to the store is a span of the body, byte for byte, and is itself
 * valid JSON (the structural scan in jsonspan.c must end a value where jansson would); a
 * body ingest accepts is one jansson accepts whole (ingest parses it without its payloads'
 * trees, util/jsonvalid.c checking those); and util/jsonvalid.c never accepts a value
 * jansson refuses.
 * Run with `make fuzz` (scripts/fuzz.sh). */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/sub_codec.h"
#include "intake/ingest.h"
#include "util/jsonvalid.h"

/* Three subscriptions for the fan-out: every type, a.* ones, and every type whose payload
 * passes a filter (the fuzzed payloads go through core/payload_filter.c). */
static const struct sub_set *subs(void)
{
	static struct sub_set *set;
	static const char *const docs[] = {
		"{\"name\":\"all\",\"event_types\":[\"*\"],\"endpoint\":\"http://127.0.0.1:9/\"}",
		"{\"name\":\"a\",\"event_types\":[\"a.*\",\"b.?\"],"
		"\"endpoint\":\"http://127.0.0.1:9/\"}",
		"{\"name\":\"f\",\"event_types\":[\"*\"],\"endpoint\":\"http://127.0.0.1:9/\","
		"\"filter\":{\"n\":{\"$gte\":1},\"a.0.b\":{\"$nin\":[\"x\",null]},"
		"\"$or\":[{\"s\":{\"$startsWith\":\"p\"}},{\"t\":{\"$exists\":false}}]}}",
	};

	if (set)
		return set;
	set = sub_set_new();
	for (size_t i = 0; set && i < sizeof(docs) / sizeof(docs[0]); i++) {
		struct input_error err;
		struct retry_policy p;
		struct subscription *s = calloc(1, sizeof(*s));
		json_t *doc = json_loads(docs[i], 0, NULL);

		retry_policy_defaults(&p);
		if (!s || !doc || sub_codec_parse(doc, &p, s, &err) != 0)
			abort();
		json_decref(doc);
		snprintf(s->id, sizeof(s->id), "0190aaaa-bbbb-7ccc-8ddd-%012zu", i);
		if (sub_set_add(set, s) != 0)
			abort();
	}
	return set;
}

static void check_ingest(const char *body, size_t size)
{
	struct ingest_batch b;
	struct input_error err;

	if (ingest_parse(body, size, 1 << 20, &b, &err) != 0)
		return;
	json_t *whole = json_loadb(body, size, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL,
				   NULL);
	if (!whole)
		abort(); /* accepted a body jansson refuses */
	json_decref(whole);
	for (size_t i = 0; i < b.n; i++) {
		const struct store_event_in *ev = &b.events[i];
		const char *p = ev->payload;

		if (b.decoded[i])
			continue; /* payload_base64: decoded bytes, not a span */
		if (p < body || p + ev->payload_len > body + size)
			abort(); /* a payload outside the body */
		json_t *v = json_loadb(p, ev->payload_len,
				       JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL, NULL);
		if (!v)
			abort(); /* the span is not exactly one JSON value */
		json_decref(v);
	}
	ingest_fanout(&b, subs());
	ingest_batch_free(&b);
}

static void check_subscription(const char *body, size_t size)
{
	struct input_error err;
	struct retry_policy p;
	struct subscription s;
	json_t *doc = json_loadb(body, size, 0, NULL);

	if (!doc)
		return;
	retry_policy_defaults(&p);
	if (sub_codec_parse(doc, &p, &s, &err) == 0) {
		struct subscription *h = malloc(sizeof(*h));
		if (h) {
			*h = s;
			subscription_free(h);
		}
	}
	json_decref(doc);
}

/* jsonvalid_value's promise: never 1 for a value jansson refuses. */
static void check_jsonvalid(const char *body, size_t size)
{
	if (!jsonvalid_value(body, size))
		return;
	json_t *v = json_loadb(body, size, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL |
				       JSON_DECODE_ANY, NULL);
	if (!v)
		abort();
	json_decref(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_jsonvalid((const char *)data, size);
	check_ingest((const char *)data, size);
	check_subscription((const char *)data, size);
	return 0;
}
