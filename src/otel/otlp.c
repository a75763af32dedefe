/* otlp.c: the exporter thread of otlp.h — a bounded queue of attempt spans filled by
 * the dispatcher, emptied in batches to ENDPOINT/v1/traces, and the counters sent to
 * ENDPOINT/v1/metrics every interval, encoded by otlp_encode.c and sent with libcurl.
 * Must never make a delivery wait: the only thing otlp_attempt shares with this thread is
 * a short mutex around a copy. */
#include "otel/otlp.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>

#include "core/metrics.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/logburst.h"

#define OTLP_RETRIES 2             /* sends of an export again after a retryable answer */
#define EXPORT_TIMEOUT_MS 5000     /* one export request at most */
#define STOP_TIMEOUT_MS 2000       /* the last flush at shutdown */
#define RESPONSE_MAX 65536         /* bytes of a collector's answer read; the rest is dropped */

struct otlp {
	char *traces_url, *metrics_url;
	char *instance, *version;
	enum otlp_protocol protocol;
	int gzip;                     /* otlp_compression gzip: bodies compressed */
	int64_t metrics_interval_ms;
	int64_t start_ns;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct otlp_span *queue;      /* ring of OTLP_QUEUE_MAX */
	size_t head, count;
	int stopping;
	CURL *curl;
	struct curl_slist *headers;   /* Content-Type and otlp_headers, for every request */
	struct log_burst failures;    /* a failing collector: logged at most once a minute */
	char response[RESPONSE_MAX];  /* the answer to the last export, cut at RESPONSE_MAX */
	size_t response_len;
};

static struct otlp *_Atomic running;

void otlp_attempt(const struct store_claim *c, const struct store_attempt *a, uint64_t span_id,
		  int64_t start_ns, int64_t duration_ns)
{
	struct otlp *o = atomic_load_explicit(&running, memory_order_acquire);
	struct otlp_span s;

	if (!o)
		return;
	otlp_span_from_attempt(&s, c, a, span_id, start_ns, duration_ns);
	pthread_mutex_lock(&o->lock);
	if (o->count == OTLP_QUEUE_MAX) {
		pthread_mutex_unlock(&o->lock);
		metrics_otlp_spans(0, 1, 0);
		return;
	}
	o->queue[(o->head + o->count) % OTLP_QUEUE_MAX] = s;
	o->count++;
	if (o->count == OTLP_BATCH_MAX)
		pthread_cond_signal(&o->cond);
	pthread_mutex_unlock(&o->lock);
}

/* Keeps the first RESPONSE_MAX bytes of the answer: a partial success is small. */
static size_t response_cb(char *p, size_t size, size_t n, void *ctx)
{
	struct otlp *o = ctx;
	size_t room = RESPONSE_MAX - o->response_len, take = size * n < room ? size * n : room;
	memcpy(o->response + o->response_len, p, take);
	o->response_len += take;
	return size * n;
}

/* A warning about the collector, logged at most once a minute (util/logburst.h). */
static void log_limited(struct otlp *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void log_limited(struct otlp *o, const char *fmt, ...)
{
	char text[512];
	va_list ap;
	long n;
	int64_t span_ms;

	if (log_burst_hit(&o->failures, clock_mono_ms(), LOG_BURST_EVERY_MS, &n, &span_ms) ==
	    LOG_BURST_QUIET)
		return;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	log_warn("otlp: %s (logged at most once a minute)", text);
}

/* How many of what the last export sent the collector's 2xx answer says it rejected
 * (logged, rate-limited); spans 1 for a trace export, 0 for metrics. */
static int64_t rejected(struct otlp *o, const char *url, int spans)
{
	int64_t n = 0;
	char why[256];

	otlp_response_rejected(o->protocol, spans, o->response, o->response_len, &n, why,
			       sizeof(why));
	if (n)
		log_limited(o, "the collector at %s did not take %lld of the %s sent: %s", url,
			    (long long)n, spans ? "spans" : "data points", why[0] ? why : "(no message)");
	else if (why[0])
		log_limited(o, "the collector at %s took everything but warns: %s", url, why);
	return n;
}

/* POSTs body (borrowed, len bytes) to url; the answer is kept in o->response. 0 on a
 * 2xx; 1 when OTLP/HTTP says the same request may be sent again (no answer, 429, 502,
 * 503, 504); -1 otherwise (logged, rate-limited). */
static int post_once(struct otlp *o, const char *url, const char *body, size_t len,
		     long timeout_ms)
{
	long status = 0;

	curl_easy_reset(o->curl);
	curl_easy_setopt(o->curl, CURLOPT_URL, url);
	curl_easy_setopt(o->curl, CURLOPT_HTTPHEADER, o->headers);
	curl_easy_setopt(o->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	curl_easy_setopt(o->curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(o->curl, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(o->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(o->curl, CURLOPT_WRITEFUNCTION, response_cb);
	curl_easy_setopt(o->curl, CURLOPT_WRITEDATA, o);
	curl_easy_setopt(o->curl, CURLOPT_USERAGENT, "outboxd-otlp");
	o->response_len = 0;
	CURLcode rc = curl_easy_perform(o->curl);
	if (rc == CURLE_OK)
		curl_easy_getinfo(o->curl, CURLINFO_RESPONSE_CODE, &status);
	if (rc == CURLE_OK && status >= 200 && status < 300)
		return 0;
	if (rc != CURLE_OK)
		log_limited(o, "export to %s failed: %s", url, curl_easy_strerror(rc));
	else
		log_limited(o, "export to %s answered HTTP %ld", url, status);
	return rc != CURLE_OK || status == 429 || status == 502 || status == 503 || status == 504
		       ? 1 : -1;
}

/* post_once, and again after 1 s then 2 s while the collector answers that it may be
 * retried (OTLP/HTTP's retryable answers: a collector restarting or shedding load), unless
 * outboxd is stopping. 0 when a try was taken, -1 otherwise. The exporter thread waits
 * meanwhile; spans queued beyond OTLP_QUEUE_MAX are dropped and counted. */
static int post_tries(struct otlp *o, const char *url, const char *body, size_t len,
		      long timeout_ms)
{
	for (int attempt = 0;; attempt++) {
		int rc = post_once(o, url, body, len, timeout_ms);
		if (rc <= 0)
			return rc;
		pthread_mutex_lock(&o->lock);
		int stopping = o->stopping;
		pthread_mutex_unlock(&o->lock);
		if (stopping || attempt == OTLP_RETRIES)
			return -1;
		struct timespec wait = {1L << attempt, 0};
		nanosleep(&wait, NULL);
	}
}

/* post_tries with body as otlp_compression says: as it is, or gzip-compressed (the
 * Content-Encoding header is in o->headers). */
static int post(struct otlp *o, const char *url, const char *body, size_t len, long timeout_ms)
{
	char *packed = NULL;
	size_t packed_len = 0;

	if (!o->gzip)
		return post_tries(o, url, body, len, timeout_ms);
	if (otlp_gzip(body, len, &packed, &packed_len)) {
		log_limited(o, "export to %s not sent: out of memory compressing it", url);
		return -1;
	}
	int rc = post_tries(o, url, packed, packed_len, timeout_ms);
	free(packed);
	return rc;
}

/* Sends up to one batch of queued spans; returns how many were taken. */
static size_t flush_spans(struct otlp *o, long timeout_ms)
{
	static struct otlp_span batch[OTLP_BATCH_MAX]; /* only the exporter thread uses it */
	size_t n = 0;

	pthread_mutex_lock(&o->lock);
	while (n < OTLP_BATCH_MAX && o->count) {
		batch[n++] = o->queue[o->head];
		o->head = (o->head + 1) % OTLP_QUEUE_MAX;
		o->count--;
	}
	pthread_mutex_unlock(&o->lock);
	if (!n)
		return 0;
	char *body = NULL;
	size_t len = 0;
	if (otlp_encode_traces(o->protocol, batch, n, o->instance, o->version, &body, &len) == 0 &&
	    post(o, o->traces_url, body, len, timeout_ms) == 0) {
		/* a partial success: what the collector rejected counts as failed */
		int64_t lost = rejected(o, o->traces_url, 1);
		lost = lost < (int64_t)n ? lost : (int64_t)n;
		metrics_otlp_spans((long)n - (long)lost, 0, (long)lost);
	} else {
		metrics_otlp_spans(0, 0, (long)n);
	}
	free(body);
	return n;
}

static void export_metrics(struct otlp *o, long timeout_ms)
{
	char *text = NULL, *body = NULL;
	size_t len = 0;
	if (metrics_render(&text, &len) == 0 &&
	    otlp_encode_metrics(o->protocol, text, o->instance, o->version, o->start_ns,
				clock_now_ns(), &body, &len) == 0 &&
	    post(o, o->metrics_url, body, len, timeout_ms) == 0)
		rejected(o, o->metrics_url, 0);
	free(body);
	free(text);
}

static void *exporter_main(void *arg)
{
	struct otlp *o = arg;
	int64_t next_metrics = clock_mono_ms() + o->metrics_interval_ms;

	pthread_setname_np(pthread_self(), "otlp");

	for (;;) {
		pthread_mutex_lock(&o->lock);
		if (!o->stopping && o->count < OTLP_BATCH_MAX) {
			struct timespec until;
			clock_gettime(CLOCK_MONOTONIC, &until);
			until.tv_sec += OTLP_FLUSH_MS / 1000;
			until.tv_nsec += (OTLP_FLUSH_MS % 1000) * 1000000L;
			if (until.tv_nsec >= 1000000000L) {
				until.tv_sec++;
				until.tv_nsec -= 1000000000L;
			}
			pthread_cond_timedwait(&o->cond, &o->lock, &until);
		}
		int stopping = o->stopping;
		pthread_mutex_unlock(&o->lock);
		if (stopping)
			break;
		while (flush_spans(o, EXPORT_TIMEOUT_MS) == OTLP_BATCH_MAX)
			;
		if (clock_mono_ms() >= next_metrics) {
			export_metrics(o, EXPORT_TIMEOUT_MS);
			next_metrics = clock_mono_ms() + o->metrics_interval_ms;
		}
	}
	/* the last spans and counters, quickly: shutdown must not wait on a collector */
	while (flush_spans(o, STOP_TIMEOUT_MS) == OTLP_BATCH_MAX)
		;
	export_metrics(o, STOP_TIMEOUT_MS);
	return NULL;
}

static void otlp_free(struct otlp *o)
{
	if (!o)
		return;
	if (o->curl)
		curl_easy_cleanup(o->curl);
	curl_slist_free_all(o->headers);
	free(o->traces_url);
	free(o->metrics_url);
	free(o->instance);
	free(o->version);
	free(o->queue);
	free(o);
}

/* base + path, without a doubled slash. Returned (free it). */
static char *join(const char *base, const char *path)
{
	size_t bl = strlen(base);
	while (bl && base[bl - 1] == '/')
		bl--;
	char *url = malloc(bl + strlen(path) + 1);
	if (url) {
		memcpy(url, base, bl);
		strcpy(url + bl, path);
	}
	return url;
}

/* Content-Type of protocol p, Content-Encoding when gzip, then each Name=value of list
 * (checked by config_load) as "Name: value". NULL when out of memory. */
static struct curl_slist *header_list(enum otlp_protocol p, int gzip, const char *list)
{
	struct curl_slist *h = curl_slist_append(NULL, p == OTLP_JSON
							       ? "Content-Type: application/json"
							       : "Content-Type: application/x-protobuf");
	if (h && gzip) {
		struct curl_slist *more = curl_slist_append(h, "Content-Encoding: gzip");
		if (!more) {
			curl_slist_free_all(h);
			return NULL;
		}
		h = more;
	}
	while (h && list && *list) {
		size_t len = strcspn(list, ",");
		const char *eq = memchr(list, '=', len);
		if (eq) {
			char line[1024];
			snprintf(line, sizeof(line), "%.*s: %.*s", (int)(eq - list), list,
				 (int)(len - (size_t)(eq - list) - 1), eq + 1);
			struct curl_slist *more = curl_slist_append(h, line);
			if (!more) {
				curl_slist_free_all(h);
				return NULL;
			}
			h = more;
		}
		list = list[len] ? list + len + 1 : NULL;
	}
	return h;
}

int otlp_start(const char *endpoint, const char *headers, const char *protocol,
	       const char *compression, const char *service_instance, const char *version,
	       int64_t metrics_interval_ms, char *err, size_t errlen)
{
	enum otlp_protocol p;
	if (otlp_protocol_parse(protocol, &p)) {
		snprintf(err, errlen, "otlp: otlp_protocol must be http/protobuf or http/json, got "
			 "\"%s\"", protocol ? protocol : "");
		return -1;
	}
	int gzip = compression && strcmp(compression, "gzip") == 0;
	if (!gzip && compression && *compression && strcmp(compression, "none") != 0) {
		snprintf(err, errlen, "otlp: otlp_compression must be none or gzip, got \"%s\"",
			 compression);
		return -1;
	}
	struct otlp *o = calloc(1, sizeof(*o));
	if (!o || !(o->queue = calloc(OTLP_QUEUE_MAX, sizeof(*o->queue))) ||
	    !(o->traces_url = join(endpoint, "/v1/traces")) ||
	    !(o->metrics_url = join(endpoint, "/v1/metrics")) ||
	    !(o->instance = strdup(service_instance)) || !(o->version = strdup(version)) ||
	    !(o->headers = header_list(p, gzip, headers))) {
		snprintf(err, errlen, "otlp: out of memory");
		otlp_free(o);
		return -1;
	}
	if (!(o->curl = curl_easy_init())) {
		snprintf(err, errlen, "otlp: cannot make a curl handle");
		otlp_free(o);
		return -1;
	}
	o->protocol = p;
	o->gzip = gzip;
	o->metrics_interval_ms = metrics_interval_ms;
	o->start_ns = clock_now_ns();
	pthread_mutex_init(&o->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&o->cond, &ca);
	pthread_condattr_destroy(&ca);
	int rc = pthread_create(&o->thread, NULL, exporter_main, o);
	if (rc) {
		snprintf(err, errlen, "otlp: cannot start the exporter thread: %s", strerror(rc));
		pthread_cond_destroy(&o->cond);
		pthread_mutex_destroy(&o->lock);
		otlp_free(o);
		return -1;
	}
	atomic_store_explicit(&running, o, memory_order_release);
	return 0;
}

void otlp_stop(void)
{
	struct otlp *o = atomic_exchange(&running, NULL);
	if (!o)
		return;
	pthread_mutex_lock(&o->lock);
	o->stopping = 1;
	pthread_cond_signal(&o->cond);
	pthread_mutex_unlock(&o->lock);
	pthread_join(o->thread, NULL);
	pthread_cond_destroy(&o->cond);
	pthread_mutex_destroy(&o->lock);
	otlp_free(o);
}
