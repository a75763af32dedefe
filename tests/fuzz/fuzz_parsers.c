/* fuzz_parsers.c: libFuzzer targets for the other parsers a user can reach, one binary per
 * target (scripts/fuzz.sh builds it with -DFUZZ_TARGET=...):
 *   FUZZ_FILTER    delivery filters: a query string (k=v&k=v) and a JSON object
 *   FUZZ_CONFIG    the configuration file
 *   FUZZ_ENVELOPE  Kafka OutboxEvent envelopes (plain and Schema Registry framed), and the
 *                  subscription an envelope's target becomes
 *   FUZZ_SPOOL     spool records (events and results); a record that decodes must encode
 *                  and decode again to the same count. The input is also a whole spool
 *                  file for the read-only scan of `outboxd spool inspect|replay`, which
 *                  resumes after damage: its records and damaged stretches must lie inside
 *                  the file, in order, and account for every byte
 * Under AddressSanitizer and UndefinedBehaviorSanitizer: no crash, no leak, no undefined
 * behaviour. fuzz_input.c covers ingest bodies and subscription documents. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/config.h"
#include "core/filter.h"
#include "core/sub_codec.h"
#include "kafka/envelope.h"
#include "store/spool.h"
#include "util/log.h"

#define FUZZ_FILTER 1
#define FUZZ_CONFIG 2
#define FUZZ_ENVELOPE 3
#define FUZZ_SPOOL 4

/* A NUL-terminated copy of the input (returned; free it). */
static char *text_of(const uint8_t *data, size_t size)
{
	char *t = malloc(size + 1);
	if (!t)
		abort();
	memcpy(t, data, size);
	t[size] = '\0';
	return t;
}

#if FUZZ_TARGET == FUZZ_FILTER
struct query {
	char *keys[32], *values[32];
	int n;
};

static const char *query_get(const void *ctx, const char *name)
{
	const struct query *q = ctx;
	for (int i = 0; i < q->n; i++)
		if (strcmp(q->keys[i], name) == 0)
			return q->values[i];
	return NULL;
}

static struct sub_registry *registry(void)
{
	static struct sub_registry reg;
	static int ready;
	if (!ready) {
		sub_registry_init(&reg);
		ready = 1;
	}
	return &reg;
}

static void run(const uint8_t *data, size_t size)
{
	char *text = text_of(data, size), *save = NULL;
	struct query q = {0};
	struct delivery_filter f = {0};
	struct filter_buf buf;
	struct input_error err;

	for (char *kv = strtok_r(text, "&", &save); kv && q.n < 32; kv = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(kv, '=');
		q.keys[q.n] = kv;
		q.values[q.n++] = eq ? (*eq = '\0', eq + 1) : "";
	}
	filter_parse(query_get, &q, 1, registry(), "", 1000000000000LL, &f, &buf, &err);
	free(text);

	json_t *doc = json_loadb((const char *)data, size, 0, NULL);
	if (doc) {
		memset(&f, 0, sizeof(f));
		filter_parse_json(doc, registry(), "filter.", 1000000000000LL, &f, &buf, &err);
		json_decref(doc);
	}
}
#elif FUZZ_TARGET == FUZZ_CONFIG
static void run(const uint8_t *data, size_t size)
{
	char *text = text_of(data, size);
	char *const envp[] = {NULL};
	struct config cfg;
	char err[512];

	config_load(&cfg, text, envp, 0, NULL, err, sizeof(err));
	config_free(&cfg);
	free(text);
}
#elif FUZZ_TARGET == FUZZ_ENVELOPE
static void run(const uint8_t *data, size_t size)
{
	struct envelope e;
	char why[256], id[UUID_STR_LEN];

	if (envelope_decode(data, size, &e, why, sizeof(why)) != 0)
		return;
	json_t *doc = envelope_subscription_doc(&e, id, why, sizeof(why));
	if (doc) {
		struct retry_policy p;
		struct subscription s;
		struct input_error err;
		retry_policy_defaults(&p);
		if (sub_codec_parse(doc, &p, &s, &err) == 0)
			subscription_clear(&s);
		json_decref(doc);
	}
	envelope_free(&e);
}
#elif FUZZ_TARGET == FUZZ_SPOOL
#include <unistd.h>

struct scan_check {
	uint64_t next;     /* where the next record or damage may start */
	uint64_t covered;  /* bytes in records and damage */
};

static int scan_record(void *ctx, uint64_t offset, uint8_t type, const void *data, size_t len)
{
	struct scan_check *c = ctx;
	(void)type;
	(void)data;
	if (offset < c->next)
		abort(); /* out of order, or overlapping */
	c->next = offset + SPOOL_HEADER_LEN + len;
	c->covered += SPOOL_HEADER_LEN + len;
	return 0;
}

static void scan_damage(void *ctx, const struct spool_damage *d)
{
	struct scan_check *c = ctx;
	if (d->offset < c->next || !d->reason)
		abort();
	c->next = d->offset + d->bytes;
	c->covered += d->bytes;
}

/* The input as a whole spool file, scanned read-only. */
static void scan_file(const uint8_t *data, size_t size)
{
	static char path[64];
	struct spool_scan_ops ops = {scan_record, scan_damage};
	struct scan_check c = {0, 0};
	struct spool_scan_summary sum;
	FILE *f;

	if (!path[0])
		snprintf(path, sizeof(path), "/tmp/fuzz-spool-%d", (int)getpid());
	if (!(f = fopen(path, "wb")))
		return;
	if (size && fwrite(data, 1, size, f) != size) {
		fclose(f);
		return;
	}
	fclose(f);
	int rc = spool_scan_file(path, &ops, &c, &sum);
	unlink(path);
	if (rc == SPOOL_OK && (c.next > size || c.covered != size || sum.size != size))
		abort(); /* every byte is a record's or a damaged stretch's, and no more */
}

static void run(const uint8_t *data, size_t size)
{
	struct store_event_in *events;
	struct store_result *results;
	size_t n;

	if (spool_decode_events(data, size, &events, &n) == 0) {
		void *again = NULL;
		size_t len = 0, n2 = 0;
		struct store_event_in *events2;
		if (spool_encode_events(events, n, &again, &len) == 0) {
			if (spool_decode_events(again, len, &events2, &n2) != 0 || n2 != n)
				abort(); /* what decodes must survive a round trip */
			free(events2);
			free(again);
		}
		free(events);
	}
	if (spool_decode_results(data, size, &results, &n) == 0)
		spool_results_free(results, n);
	scan_file(data, size);
}
#else
#error "FUZZ_TARGET must be FUZZ_FILTER, FUZZ_CONFIG, FUZZ_ENVELOPE or FUZZ_SPOOL"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int quiet;
	if (!quiet) {
		log_set_level(LOG_ERROR + 1);
		quiet = 1;
	}
	run(data, size);
	return 0;
}
