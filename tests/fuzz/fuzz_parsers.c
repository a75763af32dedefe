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
 *   FUZZ_WIRE      the lean client's answer parsing (deliver/http_wire.c's http_parser
 *                  callbacks: status line, headers, chunked and close-delimited bodies,
 *                  Retry-After, interim 1xx answers), fed in pieces as reads would bring
 *                  them: the kept body never overruns the cause, a Retry-After is never
 *                  negative, a final answer has a status from 100 to 999
 *   FUZZ_URL       wire_url_split (deliver/http_head.c), the lean client's URL parser, for
 *                  http:// and https://: a URL it takes must be one
 *                  libcurl reads to the same host, port and path (the two clients must
 *                  send the same request), its spans inside the URL
 *   FUZZ_OAUTH2    a token endpoint's answer (oauth2_parse_response: status, body), and
 *                  the redaction of such an answer (deliver/redact.c): no credential of
 *                  the set survives in any cut of the output
 *   FUZZ_MERGE     a PATCH on a stored subscription (sub_codec_merge, sub_codec_prepare,
 *                  sub_codec_parse): the first line is the stored document, the rest the
 *                  patch; a merged document that parses shows every credential and
 *                  secret header masked in its public view
 *   FUZZ_PUBLISH   the gRPC ingest's messages (intake/grpc_publish.c): the input as a
 *                  Publish call's OutboxEvent, then twice into one stream's batch; an
 *                  event taken keeps the limits (payload size, event type rule), and the
 *                  batch packs into a PublishReply
 * http_wire.c is included whole so its file-local parser can be reached. Under
 * AddressSanitizer and UndefinedBehaviorSanitizer: no crash, no leak, no undefined
 * behaviour. fuzz_input.c covers ingest bodies and subscription documents, fuzz_query.c
 * the API's request targets. */
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
#define FUZZ_WIRE 5
#define FUZZ_URL 6
#define FUZZ_OAUTH2 7
#define FUZZ_MERGE 8
#define FUZZ_PUBLISH 9

#if FUZZ_TARGET == FUZZ_WIRE || FUZZ_TARGET == FUZZ_URL
#include "../../src/deliver/http_wire.c"
#endif
#if FUZZ_TARGET == FUZZ_OAUTH2
#include "deliver/oauth2.h"
#include "deliver/redact.h"
#endif
#if FUZZ_TARGET == FUZZ_MERGE
#include "core/retry.h"
#endif
#if FUZZ_TARGET == FUZZ_PUBLISH
#include "intake/grpc_publish.h"
#endif

/* A NUL-terminated copy of the input (returned; free it). Not every target uses it. */
static __attribute__((unused)) char *text_of(const uint8_t *data, size_t size)
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
	struct spool_scan_handlers on = {scan_record, scan_damage};
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
	int rc = spool_scan_file(path, &on, &c, &sum);
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
#elif FUZZ_TARGET == FUZZ_WIRE
static struct wire *fuzz_wire(void)
{
	static struct http_sink hs;
	static struct wire *w;
	if (!w && !(w = wire_open(&hs, 4, NULL, NULL)))
		abort();
	return w;
}

/* The input is the answer; its first byte picks how reads split it. */
static void run(const uint8_t *data, size_t size)
{
	struct wire *w = fuzz_wire();
	struct wire_conn c;
	struct http_round h;
	struct sink_round sj;
	char cause[SINK_CAUSE_LEN], message[SINK_MSG_LEN];

	if (!size)
		return;
	size_t step = (size_t)data[0] % 61 + 1;
	data++;
	size--;
	memset(&c, 0, sizeof(c));
	memset(&h, 0, sizeof(h));
	memset(&sj, 0, sizeof(sj));
	cause[0] = message[0] = '\0';
	sj.cause = cause;
	sj.message = message;
	sj.retry_after_ms = -1;
	h.sj = &sj;
	c.h = &h;
	c.field_match = -1;
	http_parser_init(&c.parser, HTTP_RESPONSE);
	c.parser.data = &c;
	int failed = 0;
	for (size_t at = 0; at < size && !c.final && !failed; at += step) {
		size_t n = size - at < step ? size - at : step;
		http_parser_execute(&c.parser, &w->settings, (const char *)data + at, n);
		failed = HTTP_PARSER_ERRNO(&c.parser) != HPE_OK;
	}
	if (!c.final && !failed) /* the connection ends: a body read until close ends too */
		http_parser_execute(&c.parser, &w->settings, NULL, 0);
	if (h.body_len >= SINK_CAUSE_LEN || cause[h.body_len] != '\0')
		abort(); /* the kept body overran the cause */
	if (sj.retry_after_ms < -1)
		abort();
	if (c.final && (c.parser.status_code < 100 || c.parser.status_code > 999))
		abort();
}
#elif FUZZ_TARGET == FUZZ_URL
#include <strings.h>

/* The len bytes at a equal the NUL-terminated b, case aside. */
static int span_is(const char *a, size_t len, const char *b)
{
	return strlen(b) == len && strncasecmp(a, b, len) == 0;
}

static void run(const uint8_t *data, size_t size)
{
	char *url = malloc(size + 1);
	struct url_parts u;
	if (!url)
		abort();
	memcpy(url, data, size);
	url[size] = '\0';
	if (strlen(url) != size || wire_url_split(url, &u) != 0) {
		free(url);
		return;
	}
	const char *end = url + size;
	if (u.auth < url || u.auth + u.auth_len > end || u.host < u.auth ||
	    u.host + u.host_len > u.auth + u.auth_len || u.path < url || u.path + u.path_len > end ||
	    u.port < 1 || u.port > 65535 || !u.host_len)
		abort(); /* a span outside the URL, or a port out of range */
	/* what libcurl makes of the same URL, when it takes it */
	CURLU *cu = curl_url();
	char *host = NULL, *port = NULL, *path = NULL, *query = NULL;
	if (cu && curl_url_set(cu, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(cu, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
	    curl_url_get(cu, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK &&
	    curl_url_get(cu, CURLUPART_PATH, &path, 0) == CURLUE_OK) {
		curl_url_get(cu, CURLUPART_QUERY, &query, 0);
		/* libcurl writes an IPv6 host in brackets */
		size_t hl = strlen(host);
		const char *h = host;
		if (hl >= 2 && host[0] == '[') {
			h = host + 1;
			hl -= 2;
		}
		char want[8192];
		snprintf(want, sizeof(want), "%s%s%s", path, query ? "?" : "", query ? query : "");
		const char *ours = u.path_len ? u.path : "/";
		size_t ours_len = u.path_len ? u.path_len : 1;
		if (hl != u.host_len || strncasecmp(h, u.host, hl) != 0 || atoi(port) != u.port ||
		    !span_is(ours, ours_len, want)) {
			fprintf(stderr, "wire_url_split and libcurl disagree on %s: host %.*s/%s port %d/%s "
				"path %.*s/%s\n", url, (int)u.host_len, u.host, host, u.port, port,
				(int)ours_len, ours, want);
			abort();
		}
	}
	curl_free(host);
	curl_free(port);
	curl_free(path);
	curl_free(query);
	curl_url_cleanup(cu);
	free(url);
}
#elif FUZZ_TARGET == FUZZ_OAUTH2
/* Credentials without '*', so a mask next to text cannot spell one. */
static const char *const creds[] = {"client s3cret/1", "p@ss w0rd", "tok-XYZ-123", "ab"};

static struct redact_set *fuzz_set(void)
{
	static struct redact_set r;
	static int ready;
	if (!ready) {
		struct oauth2_params p = {.grant = OAUTH2_PASSWORD, .client_auth = OAUTH2_AUTH_BASIC,
					  .token_url = "https://idp/t", .client_id = "my client",
					  .client_secret = (char *)creds[0],
					  .password = (char *)creds[1]};
		redact_init(&r);
		if (redact_add_oauth2(&r, &p) || redact_add_secret(&r, creds[2]) ||
		    redact_add_secret(&r, creds[3]))
			abort();
		ready = 1;
	}
	return &r;
}

/* Two bytes of status, then the body. */
static void run(const uint8_t *data, size_t size)
{
	char why[512], *token = NULL;
	int64_t expires_in;
	if (size < 2)
		return;
	long status = (long)(data[0] << 8 | data[1]) % 700;
	const char *body = (const char *)data + 2;
	size_t len = size - 2;
	if (oauth2_parse_response(status, body, len, &token, &expires_in, why, sizeof(why)) == 0) {
		if (!token || !*token || strlen(token) > OAUTH2_TOKEN_MAX || expires_in < -1)
			abort();
		free(token);
	} else if (token || strlen(why) >= sizeof(why)) {
		abort();
	}
	/* the body redacted into outputs of every size: no credential in any of them */
	const struct redact_set *r = fuzz_set();
	size_t sizes[] = {1, 9, 64, 201, len * 8 + 1};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char *out = malloc(sizes[i]);
		if (!out)
			abort();
		size_t n = redact_copy(r, body, len, out, sizes[i]);
		if (n >= sizes[i] || out[n] != '\0')
			abort();
		for (size_t k = 0; k < r->n; k++)
			if (memmem(out, n, r->text[k], r->len[k]))
				abort(); /* a credential survived */
		free(out);
	}
}
#elif FUZZ_TARGET == FUZZ_MERGE
#define MASK "********"

/* The value of a headers entry (a string, or {"value": ...}). */
static const char *header_value(json_t *v)
{
	return json_string_value(json_is_object(v) ? json_object_get(v, "value") : v);
}

/* A parsed document's public view: every credential and secret header masked. */
static void check_masked(json_t *doc, const struct subscription *s)
{
	struct sub_row row = {.id = "0190aaaa-bbbb-7ccc-8ddd-000000000001", .name = "n",
			      .enabled = 1};
	row.config = json_dumps(doc, JSON_COMPACT);
	if (!row.config)
		return;
	json_t *view = sub_codec_public(&row);
	json_t *auth = json_object_get(view, "auth");
	static const char *const keys[] = {"password", "token", "value", "client_secret"};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		json_t *v = json_object_get(auth, keys[i]);
		if (v && !(json_is_string(v) && strcmp(json_string_value(v), MASK) == 0))
			abort(); /* a credential in clear */
	}
	json_t *headers = json_object_get(view, "headers");
	for (size_t i = 0; i < s->n_headers; i++) {
		const char *shown = header_value(json_object_get(headers, s->headers[i].name));
		if (s->headers[i].secret && (!shown || strcmp(shown, MASK) != 0))
			abort(); /* a secret header in clear */
	}
	json_decref(view);
	free(row.config);
}

static void run(const uint8_t *data, size_t size)
{
	const char *text = (const char *)data, *nl = memchr(text, '\n', size);
	struct input_error err;
	if (!nl)
		return;
	json_t *stored = json_loadb(text, (size_t)(nl - text), 0, NULL);
	json_t *patch = json_loadb(nl + 1, size - (size_t)(nl - text) - 1, JSON_REJECT_DUPLICATES,
				   NULL);
	if (stored && patch) {
		json_t *merged = sub_codec_merge(stored, patch, &err);
		char *generated = NULL;
		if (merged && sub_codec_prepare(merged, patch, stored, 1700000000000LL, NULL,
						&generated, &err) == 0) {
			struct retry_policy p;
			struct subscription s;
			retry_policy_defaults(&p);
			if (sub_codec_parse(merged, &p, &s, &err) == 0) {
				check_masked(merged, &s);
				subscription_clear(&s);
			}
		}
		free(generated);
		json_decref(merged);
	}
	json_decref(stored);
	json_decref(patch);
}
#elif FUZZ_TARGET == FUZZ_PUBLISH
static void run(const uint8_t *data, size_t size)
{
	static const struct publish_limits lim = {4096, 1 << 20, 10};
	struct publish_batch b = {0};
	struct input_error err;
	void *out;
	size_t len;

	for (long index = -1; index < 2; index++) {
		if (publish_add(&b, data, size, &lim, index, &err) != 0) {
			if (!err.message[0])
				abort(); /* a refusal always says why */
			continue;
		}
		const struct store_event_in *ev = &b.in.events[b.in.n - 1];
		if ((int64_t)ev->payload_len > lim.max_payload || !ev->event_type[0] ||
		    strlen(ev->event_type) > 255 || !ev->content_type)
			abort();
	}
	if (publish_reply(&b, &out, &len) != 0)
		abort();
	free(out);
	publish_batch_free(&b);
}
#else
#error "FUZZ_TARGET must be FUZZ_FILTER, FUZZ_CONFIG, FUZZ_ENVELOPE, FUZZ_SPOOL, FUZZ_WIRE, FUZZ_URL, FUZZ_OAUTH2, FUZZ_MERGE or FUZZ_PUBLISH"
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
