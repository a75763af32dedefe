/* loadgen.c: bench_loadgen, the load generator of `make bench` (bench/run.sh).
 *
 * It speaks only outboxd's public ingest API (POST /v1/events) over keep-alive connections
 * driven by one libcurl multi handle, in two modes:
 *
 *   ingest  N events in batches of B over C connections, as fast as outboxd accepts them.
 *           Prints one JSON object: start/end wall-clock times (µs), events sent, accepted,
 *           errors. Request bodies are built before the clock starts.
 *   rate    R events/s for D seconds, B events per request (1 = single events), at most C
 *           requests in flight. Every request has an intended send time (start + k·B/R); one
 *           that cannot leave on time because all C are busy keeps its intended time, so a
 *           stall shows up in the latency instead of being hidden (no coordinated omission).
 *           Writes "event-id intended_us sent_us acked_us" per accepted event to --out, for
 *           the join with the receiver's receipts, and prints a JSON summary.
 *
 * Payloads are JSON objects of exactly --payload-bytes bytes (default 200). Times are
 * CLOCK_REALTIME µs, the clock the test receiver stamps receipts with. The summary's
 * "outcomes" counts events by what their request got: "HTTP 202", "HTTP 503", or the
 * transport error ("Couldn't connect to server" while nothing listens).
 *
 * It measures; it must not retry (a failed request is counted, not resent) and it must not
 * know anything about outboxd beyond the documented API.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <jansson.h>

#define RESPONSE_MAX   (8u << 20)   /* a batch of 10,000 ids is ~400 KiB */
#define CONNS_MAX      1024

enum mode { MODE_INGEST, MODE_RATE };

struct options {
	enum mode mode;
	const char *url;
	const char *token;
	const char *event_type;
	const char *out_path;        /* rate mode: the per-event record */
	long events;                 /* ingest mode */
	long batch;
	long conns;
	long payload_bytes;
	double rate;                 /* rate mode: events/s */
	double duration_s;           /* rate mode */
};

/* One prepared request: its body and, in rate mode, its schedule and outcome. */
struct request {
	char *body;                  /* owned */
	size_t body_len;
	long n_events;
	int64_t intended_us;         /* rate mode: when it should leave (realtime) */
	int64_t sent_us;
	int64_t acked_us;
	long status;
	CURLcode result;             /* the transport's outcome (CURLE_OK: an HTTP answer) */
	json_t *ids;                 /* owned: the "ids" array of a 202, or NULL */
};

/* One connection's easy handle, reused so its keep-alive connection is reused. */
struct slot {
	CURL *easy;
	struct request *req;         /* borrowed; NULL when idle */
	char *resp;                  /* response body, owned, capped at RESPONSE_MAX */
	size_t resp_len;
	size_t resp_cap;
	bool too_big;
};

static int64_t realtime_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: bench_loadgen ingest --url URL --token T --events N [--batch B] [--conns C]\n"
		"       bench_loadgen rate --url URL --token T --rate R --duration S --out FILE\n"
		"                          [--batch B] [--conns C]\n"
		"options: --payload-bytes N (200)  --event-type NAME (bench.event)\n");
}

static int parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int parse_double(const char *s, double lo, double hi, double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi))
		return -1;
	*out = v;
	return 0;
}

static int options_parse(int argc, char **argv, struct options *o)
{
	memset(o, 0, sizeof(*o));
	o->event_type = "bench.event";
	o->batch = 0;
	o->conns = 0;
	o->payload_bytes = 200;
	if (argc < 2)
		return -1;
	if (strcmp(argv[1], "ingest") == 0)
		o->mode = MODE_INGEST;
	else if (strcmp(argv[1], "rate") == 0)
		o->mode = MODE_RATE;
	else
		return -1;
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		int bad = 0;

		if (!v)
			return -1;
		if (strcmp(a, "--url") == 0)
			o->url = v;
		else if (strcmp(a, "--token") == 0)
			o->token = v;
		else if (strcmp(a, "--event-type") == 0)
			o->event_type = v;
		else if (strcmp(a, "--out") == 0)
			o->out_path = v;
		else if (strcmp(a, "--events") == 0)
			bad = parse_long(v, 1, 100000000, &o->events);
		else if (strcmp(a, "--batch") == 0)
			bad = parse_long(v, 1, 10000, &o->batch);
		else if (strcmp(a, "--conns") == 0)
			bad = parse_long(v, 1, CONNS_MAX, &o->conns);
		else if (strcmp(a, "--payload-bytes") == 0)
			bad = parse_long(v, 32, 1 << 20, &o->payload_bytes);
		else if (strcmp(a, "--rate") == 0)
			bad = parse_double(v, 0.1, 1e7, &o->rate);
		else if (strcmp(a, "--duration") == 0)
			bad = parse_double(v, 0.1, 86400, &o->duration_s);
		else
			return -1;
		if (bad) {
			fprintf(stderr, "bench_loadgen: bad %s %s\n", a, v);
			return -1;
		}
		i++;
	}
	if (!o->url || !o->token)
		return -1;
	if (o->mode == MODE_INGEST) {
		if (!o->events)
			return -1;
		if (!o->batch)
			o->batch = 1000;
		if (!o->conns)
			o->conns = 4;
	} else {
		if (!o->rate || !o->duration_s || !o->out_path)
			return -1;
		if (!o->batch)
			o->batch = 1;
		if (!o->conns)
			o->conns = 16;
	}
	return 0;
}

/* Appends one event whose payload, {"seq":N,"pad":"xxx..."}, is exactly payload_bytes
 * long to out. Returns the bytes written, or 0 when it does not fit. */
static size_t event_write(char *out, size_t room, const char *event_type, long seq,
			  long payload_bytes)
{
	char head[64];
	int head_len = snprintf(head, sizeof(head), "{\"seq\":%ld,\"pad\":\"", seq);
	long pad = payload_bytes - head_len - 2;   /* 2: the closing "} */
	int pre;
	size_t len;

	if (pad < 0)
		return 0;
	pre = snprintf(out, room, "{\"event_type\":\"%s\",\"payload\":%s", event_type, head);
	if (pre < 0 || (size_t)pre + (size_t)pad + 4 > room)
		return 0;
	len = (size_t)pre;
	memset(out + len, 'x', (size_t)pad);
	len += (size_t)pad;
	memcpy(out + len, "\"}}", 4);              /* with its NUL */
	return len + 3;
}

/* Builds the body of events [first, first + count). Returns 0 or -1 (out of memory). */
static int request_build(struct request *r, const struct options *o, long first, long count)
{
	size_t per = strlen(o->event_type) + (size_t)o->payload_bytes + 64;
	size_t cap = 16 + per * (size_t)count;
	size_t len = 0;
	char *b = malloc(cap);

	if (!b)
		return -1;
	len += (size_t)snprintf(b, cap, "{\"events\":[");
	for (long i = 0; i < count; i++) {
		size_t n;

		if (i)
			b[len++] = ',';
		n = event_write(b + len, cap - len, o->event_type, first + i, o->payload_bytes);
		if (!n) {
			free(b);
			return -1;
		}
		len += n;
	}
	len += (size_t)snprintf(b + len, cap - len, "]}");
	r->body = b;
	r->body_len = len;
	r->n_events = count;
	return 0;
}

static size_t write_cb(char *data, size_t size, size_t nmemb, void *userp)
{
	struct slot *s = userp;
	size_t n = size * nmemb;

	if (s->too_big || n > RESPONSE_MAX - s->resp_len) {
		s->too_big = true;
		return n;
	}
	if (s->resp_len + n + 1 > s->resp_cap) {
		size_t cap = s->resp_cap ? s->resp_cap : 4096;
		char *p;

		while (cap < s->resp_len + n + 1)
			cap *= 2;
		p = realloc(s->resp, cap);
		if (!p) {
			s->too_big = true;
			return n;
		}
		s->resp = p;
		s->resp_cap = cap;
	}
	memcpy(s->resp + s->resp_len, data, n);
	s->resp_len += n;
	s->resp[s->resp_len] = '\0';
	return n;
}

static void slot_start(CURLM *multi, struct slot *s, struct request *r)
{
	s->req = r;
	s->resp_len = 0;
	s->too_big = false;
	curl_easy_setopt(s->easy, CURLOPT_POSTFIELDS, r->body);
	curl_easy_setopt(s->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->body_len);
	r->sent_us = realtime_us();
	curl_multi_add_handle(multi, s->easy);
}

/* Records the outcome of the request on s (a 202 keeps its ids) and frees the slot. */
static void slot_finish(CURLM *multi, struct slot *s, CURLcode result, char *first_error,
			size_t errlen)
{
	struct request *r = s->req;

	r->acked_us = realtime_us();
	curl_multi_remove_handle(multi, s->easy);
	curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &r->status);
	r->result = result;
	if (result != CURLE_OK) {
		if (!first_error[0])
			snprintf(first_error, errlen, "curl: %s", curl_easy_strerror(result));
	} else if (r->status != 202 || s->too_big) {
		if (!first_error[0])
			snprintf(first_error, errlen, "HTTP %ld: %.200s", r->status,
				 s->resp ? s->resp : "");
	} else {
		json_t *doc = json_loadb(s->resp ? s->resp : "", s->resp_len, 0, NULL);
		json_t *ids = json_object_get(doc, "ids");

		if (json_is_array(ids) && (long)json_array_size(ids) == r->n_events) {
			r->ids = json_incref(ids);
		} else if (!first_error[0]) {
			snprintf(first_error, errlen, "202 without %ld ids: %.200s", r->n_events,
				 s->resp ? s->resp : "");
		}
		json_decref(doc);
	}
	s->req = NULL;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	struct options o;
	struct request *reqs = NULL;
	struct slot *slots = NULL;
	struct curl_slist *headers = NULL;
	CURLM *multi = NULL;
	long n_reqs, total_events, next = 0, done = 0, active = 0;
	long accepted = 0, failed_reqs = 0, failed_events = 0, late = 0;
	int64_t start_us, end_us, *ack_lat = NULL;
	char auth[512], first_error[512] = "";
	FILE *out = NULL;
	json_t *outcomes = NULL;
	int rc = 1;

	if (options_parse(argc, argv, &o) != 0) {
		usage();
		return 2;
	}
	total_events = o.mode == MODE_INGEST ? o.events : (long)(o.rate * o.duration_s + 0.5);
	if (total_events < 1)
		total_events = 1;
	n_reqs = (total_events + o.batch - 1) / o.batch;
	if (o.mode == MODE_RATE && !(out = fopen(o.out_path, "w"))) {
		fprintf(stderr, "bench_loadgen: %s: %s\n", o.out_path, strerror(errno));
		return 1;
	}

	curl_global_init(CURL_GLOBAL_DEFAULT);
	reqs = calloc((size_t)n_reqs, sizeof(*reqs));
	slots = calloc((size_t)o.conns, sizeof(*slots));
	ack_lat = calloc((size_t)n_reqs, sizeof(*ack_lat));
	if (!reqs || !slots || !ack_lat)
		goto oom;
	for (long k = 0; k < n_reqs; k++) {
		long first = k * o.batch;
		long count = first + o.batch <= total_events ? o.batch : total_events - first;

		if (request_build(&reqs[k], &o, first, count) != 0)
			goto oom;
	}

	snprintf(auth, sizeof(auth), "Authorization: Bearer %s", o.token);
	headers = curl_slist_append(headers, auth);
	headers = curl_slist_append(headers, "Content-Type: application/json");
	headers = curl_slist_append(headers, "Expect:");   /* no 100-continue round trip */
	multi = curl_multi_init();
	if (!headers || !multi)
		goto oom;
	curl_multi_setopt(multi, CURLMOPT_MAX_HOST_CONNECTIONS, o.conns);
	curl_multi_setopt(multi, CURLMOPT_MAXCONNECTS, o.conns);
	for (long i = 0; i < o.conns; i++) {
		CURL *e = curl_easy_init();

		if (!e)
			goto oom;
		slots[i].easy = e;
		curl_easy_setopt(e, CURLOPT_URL, o.url);
		curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
		curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
		curl_easy_setopt(e, CURLOPT_WRITEDATA, &slots[i]);
		curl_easy_setopt(e, CURLOPT_PRIVATE, &slots[i]);
		curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
		curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 60000L);
	}

	start_us = realtime_us();
	if (o.mode == MODE_RATE) {
		for (long k = 0; k < n_reqs; k++)
			reqs[k].intended_us = start_us +
				(int64_t)((double)k * (double)o.batch * 1e6 / o.rate);
	}

	while (done < n_reqs) {
		int still, numfds, left;
		CURLMsg *msg;
		int64_t now = realtime_us();
		int timeout_ms = 100;

		/* Start whatever is due on the idle slots. */
		for (long i = 0; i < o.conns && next < n_reqs; i++) {
			if (slots[i].req)
				continue;
			if (o.mode == MODE_RATE && reqs[next].intended_us > now)
				break;
			slot_start(multi, &slots[i], &reqs[next]);
			if (o.mode == MODE_RATE && reqs[next].sent_us - reqs[next].intended_us > 1000)
				late++;
			next++;
			active++;
		}
		curl_multi_perform(multi, &still);
		while ((msg = curl_multi_info_read(multi, &left))) {
			struct slot *s;

			if (msg->msg != CURLMSG_DONE)
				continue;
			curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
			slot_finish(multi, s, msg->data.result, first_error, sizeof(first_error));
			done++;
			active--;
		}
		if (done >= n_reqs)
			break;
		if (o.mode == MODE_RATE && next < n_reqs) {
			int64_t wait = reqs[next].intended_us - realtime_us();

			timeout_ms = wait <= 0 ? 0 : (int)((wait + 999) / 1000);
			if (timeout_ms > 100)
				timeout_ms = 100;
			/* Nothing idle to send on: wait for a completion instead. */
			if (active >= o.conns)
				timeout_ms = 100;
		} else if (next < n_reqs && active < o.conns) {
			timeout_ms = 0;
		}
		if (timeout_ms > 0)
			curl_multi_poll(multi, NULL, 0, timeout_ms, &numfds);
	}
	end_us = realtime_us();

	/* Tally, and in rate mode write one line per accepted event. */
	outcomes = json_object();
	if (!outcomes)
		goto oom;
	for (long k = 0; k < n_reqs; k++) {
		struct request *r = &reqs[k];
		char key[128];

		if (r->result != CURLE_OK)
			snprintf(key, sizeof(key), "%s", curl_easy_strerror(r->result));
		else
			snprintf(key, sizeof(key), "HTTP %ld", r->status);
		json_object_set_new(outcomes, key,
				    json_integer(json_integer_value(json_object_get(outcomes, key)) +
						 r->n_events));

		ack_lat[k] = r->acked_us - (o.mode == MODE_RATE ? r->intended_us : r->sent_us);
		if (!r->ids) {
			failed_reqs++;
			failed_events += r->n_events;
			continue;
		}
		accepted += r->n_events;
		if (out) {
			size_t i;
			json_t *id;

			json_array_foreach(r->ids, i, id)
				fprintf(out, "%s %" PRId64 " %" PRId64 " %" PRId64 "\n",
					json_string_value(id), r->intended_us, r->sent_us,
					r->acked_us);
		}
	}
	if (out && fclose(out) != 0) {
		out = NULL;
		fprintf(stderr, "bench_loadgen: %s: %s\n", o.out_path, strerror(errno));
		goto out;
	}
	out = NULL;
	qsort(ack_lat, (size_t)n_reqs, sizeof(*ack_lat), cmp_i64);

	{
		double secs = (double)(end_us - start_us) / 1e6;
		json_t *res = json_pack(
			"{s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:I,s:I,s:I}",
			"mode", o.mode == MODE_INGEST ? "ingest" : "rate",
			"start_us", (json_int_t)start_us, "end_us", (json_int_t)end_us,
			"events", (json_int_t)total_events, "accepted", (json_int_t)accepted,
			"errors", (json_int_t)failed_events, "failed_requests",
			(json_int_t)failed_reqs, "requests", (json_int_t)n_reqs,
			"batch", (json_int_t)o.batch, "events_per_s",
			secs > 0 ? (double)accepted / secs : 0.0, "ack_p50_us",
			(json_int_t)ack_lat[n_reqs / 2], "ack_p99_us",
			(json_int_t)ack_lat[(size_t)((double)(n_reqs - 1) * 0.99)], "ack_max_us",
			(json_int_t)ack_lat[n_reqs - 1]);

		if (!res)
			goto oom;
		json_object_set_new(res, "conns", json_integer(o.conns));
		json_object_set(res, "outcomes", outcomes);
		if (o.mode == MODE_RATE) {
			json_object_set_new(res, "rate", json_real(o.rate));
			json_object_set_new(res, "late_requests", json_integer(late));
		}
		if (first_error[0])
			json_object_set_new(res, "first_error", json_string(first_error));
		json_dumpf(res, stdout, JSON_COMPACT);
		fputc('\n', stdout);
		json_decref(res);
	}
	rc = failed_reqs ? 3 : 0;
	goto out;
oom:
	fprintf(stderr, "bench_loadgen: out of memory\n");
out:
	if (out)
		fclose(out);
	for (long i = 0; slots && i < o.conns; i++) {
		if (slots[i].easy) {
			if (slots[i].req)
				curl_multi_remove_handle(multi, slots[i].easy);
			curl_easy_cleanup(slots[i].easy);
		}
		free(slots[i].resp);
	}
	for (long k = 0; reqs && k < n_reqs; k++) {
		free(reqs[k].body);
		json_decref(reqs[k].ids);
	}
	if (multi)
		curl_multi_cleanup(multi);
	curl_slist_free_all(headers);
	json_decref(outcomes);
	free(slots);
	free(reqs);
	free(ack_lat);
	curl_global_cleanup();
	return rc;
}
