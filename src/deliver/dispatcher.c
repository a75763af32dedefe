/* dispatcher.c: claims due deliveries, sends them over HTTP with libcurl multi, runs the
 * immediate retry round, and writes results in groups (see dispatcher.h).
 *
 * Life of a job (one delivery's round):
 *   claimed -> request in flight -> completed attempt
 *     -> success, or round over       -> done list -> written by the next flush
 *     -> failed with tries left       -> waiting on its stagger timer -> in flight again
 * Nothing here blocks on the network; the store calls (claim, flush) are the only waits. */
#include "deliver/dispatcher.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "core/errmap.h"
#include "core/retry.h"
#include "deliver/sign.h"
#include "util/clock.h"
#include "util/log.h"

#define MAX_TRIES 10          /* most tries in one round (retry.immediate <= 10) */
#define MSG_LEN 128
#define CAUSE_LEN 1024        /* DESIGN §2: the first KiB of the response body */
#define FLUSH_MAX 512         /* results written per transaction at most */
#define FLUSH_AGE_US 1000     /* a result waits at most this long for company */
#define IDLE_POLL_MS 1000     /* look for due work at least this often */

/* A claimed batch; freed when its last job is written back. */
struct batch {
	struct store_claim *claims;
	size_t n;
	size_t live;                 /* jobs not yet written */
	struct sub_set *subs;        /* the subscriptions as they were at claim time */
};

enum job_state { JOB_FREE, JOB_IN_FLIGHT, JOB_WAITING, JOB_DONE };

struct job {
	struct dispatcher *d;
	enum job_state state;
	struct batch *batch;
	struct store_claim *claim;
	const struct subscription *sub;
	enum attempt_kind kind;
	int max_tries;
	int64_t timeout_ms;
	int tries;                   /* attempts made in this round */
	struct store_attempt attempts[MAX_TRIES];
	char messages[MAX_TRIES][MSG_LEN];
	char causes[MAX_TRIES][CAUSE_LEN];
	struct store_result result;
	int64_t started_us;          /* monotonic start of the current attempt */
	int64_t wake_us;             /* JOB_WAITING: when to send again */
	int64_t done_us;             /* JOB_DONE: when it joined the done list */
	CURL *easy;
	struct curl_slist *headers;
	char *url;                   /* owned when query auth rewrote it, else NULL */
	char errbuf[CURL_ERROR_SIZE];
	size_t body_len;             /* response bytes kept in causes[tries] */
	struct job *next;            /* in the free, waiting or done list */
};

struct dispatcher {
	store *st;
	struct sub_registry *reg;
	struct dispatcher_config cfg;
	pthread_t thread;
	CURLM *multi;
	atomic_int stopping;
	atomic_int woken;
	struct job *jobs;            /* max_in_flight of them */
	struct job *free_list;
	struct job *waiting;         /* unsorted; few at a time */
	struct job *done_head, *done_tail;
	size_t done_count;
	int active;                  /* jobs not free */
	int in_flight;               /* jobs with a request running */
	struct store_result *results; /* flush scratch, FLUSH_MAX of them */
	uint64_t rng;
	int store_down;              /* logged once per outage */
};

/* ---- small helpers ------------------------------------------------------------------ */

static double rng_next(void *ctx)
{
	uint64_t *s = ctx;
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (double)(*s >> 11) / 9007199254740992.0;
}

static enum transport_error classify(CURLcode rc)
{
	switch (rc) {
	case CURLE_OK:
		return TRANSPORT_OK;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return TRANSPORT_DNS;
	case CURLE_COULDNT_CONNECT:
		return TRANSPORT_REFUSED;
	case CURLE_OPERATION_TIMEDOUT:
		return TRANSPORT_TIMEOUT;
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_SHUTDOWN_FAILED:
	case CURLE_SSL_ENGINE_NOTFOUND:
	case CURLE_SSL_ENGINE_SETFAILED:
	case CURLE_SSL_ENGINE_INITFAILED:
	case CURLE_USE_SSL_FAILED:
		return TRANSPORT_TLS;
	default:
		return TRANSPORT_OTHER;
	}
}

static size_t body_cb(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct job *j = ctx;
	size_t len = size * nmemb;
	size_t room = CAUSE_LEN - 1 - j->body_len;
	size_t take = len < room ? len : room;
	memcpy(j->causes[j->tries] + j->body_len, data, take);
	j->body_len += take;
	j->causes[j->tries][j->body_len] = '\0';
	return len; /* keep reading: the connection stays reusable */
}

static int append_header(struct curl_slist **list, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int append_header(struct curl_slist **list, const char *fmt, ...)
{
	char line[8448];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(line))
		return -1;
	struct curl_slist *l = curl_slist_append(*list, line);
	if (!l)
		return -1;
	*list = l;
	return 0;
}

/* The request headers of DESIGN §3 for the job's next attempt. */
static int build_headers(struct job *j, int attempt_no, int64_t now_ms)
{
	const struct subscription *s = j->sub;
	const struct store_claim *c = j->claim;
	struct curl_slist *h = NULL;
	int64_t ts = now_ms / 1000;
	char trace[33];
	int k = 0;

	for (const char *p = c->event_id; *p && k < 32; p++)
		if (*p != '-')
			trace[k++] = *p;
	trace[k] = '\0';
	uint64_t span = (uint64_t)(rng_next(&j->d->rng) * 18446744073709551615.0) | 1;

	const char *ctype = s->payload_format == PAYLOAD_BINARY ? "application/octet-stream"
								  : c->content_type;
	if (append_header(&h, "Content-Type: %s", ctype) ||
	    append_header(&h, "webhook-id: %s", c->event_id) ||
	    append_header(&h, "webhook-timestamp: %lld", (long long)ts) ||
	    append_header(&h, "outboxd-event-type: %s", c->event_type) ||
	    append_header(&h, "outboxd-delivery-id: %s", c->delivery_id) ||
	    append_header(&h, "outboxd-attempt: %d", attempt_no) ||
	    append_header(&h, "traceparent: 00-%s-%016llx-01", trace, (unsigned long long)span) ||
	    append_header(&h, "User-Agent: outboxd/0.1") || append_header(&h, "Expect:"))
		goto fail;
	if (s->secret) {
		char sig[SIGN_V1_LEN];
		if (sign_standard_v1(s->secret, c->event_id, ts, c->payload, c->payload_len, sig) ||
		    append_header(&h, "webhook-signature: %s", sig))
			goto fail;
	}
	switch (s->auth_type) {
	case AUTH_BASIC: {
		char plain[1300], enc[1800];
		int n = snprintf(plain, sizeof(plain), "%s:%s", s->auth_user, s->auth_secret);
		if (n < 0 || (size_t)n >= sizeof(plain))
			goto fail;
		EVP_EncodeBlock((unsigned char *)enc, (unsigned char *)plain, n);
		OPENSSL_cleanse(plain, sizeof(plain));
		if (append_header(&h, "Authorization: Basic %s", enc))
			goto fail;
		break;
	}
	case AUTH_BEARER:
		if (append_header(&h, "Authorization: Bearer %s", s->auth_secret))
			goto fail;
		break;
	case AUTH_API_KEY:
		if (append_header(&h, "%s: %s", s->auth_name, s->auth_secret))
			goto fail;
		break;
	default:
		break;
	}
	for (size_t i = 0; i < s->n_headers; i++)
		if (append_header(&h, "%s: %s", s->headers[i].name, s->headers[i].value))
			goto fail;
	j->headers = h;
	return 0;
fail:
	curl_slist_free_all(h);
	return -1;
}

/* The URL to call: the endpoint, plus ?param=value for query auth (URL-encoded). */
static const char *build_url(struct job *j)
{
	const struct subscription *s = j->sub;
	if (s->auth_type != AUTH_QUERY)
		return s->endpoint;
	if (j->url)
		return j->url;
	char *name = curl_easy_escape(NULL, s->auth_name, 0);
	char *value = curl_easy_escape(NULL, s->auth_secret, 0);
	if (name && value) {
		size_t len = strlen(s->endpoint) + strlen(name) + strlen(value) + 3;
		j->url = malloc(len);
		if (j->url)
			snprintf(j->url, len, "%s%c%s=%s", s->endpoint,
				 strchr(s->endpoint, '?') ? '&' : '?', name, value);
	}
	curl_free(name);
	curl_free(value);
	return j->url;
}

/* ---- the life of a job ----------------------------------------------------------------- */

static void done_push(struct dispatcher *d, struct job *j)
{
	j->state = JOB_DONE;
	j->done_us = clock_mono_us();
	j->next = NULL;
	if (d->done_tail)
		d->done_tail->next = j;
	else
		d->done_head = j;
	d->done_tail = j;
	d->done_count++;
}

static void set_last_error(struct store_result *r, const struct job *j)
{
	if (j->tries == 0) {
		r->last_code = 0;
		r->last_message = r->last_cause = NULL;
		return;
	}
	const struct store_attempt *a = &j->attempts[j->tries - 1];
	r->last_code = a->code;
	r->last_message = a->message;
	r->last_cause = a->cause;
}

/* The round is over: work out the delivery's next state (DESIGN §3 retry layers). */
static void job_finish(struct job *j, int success)
{
	const struct retry_policy *p = &j->sub->retry;
	struct store_result *r = &j->result;
	int64_t now = clock_now_ms();

	memset(r, 0, sizeof(*r));
	r->delivery_id = j->claim->delivery_id;
	r->attempts = j->attempts;
	r->n_attempts = (size_t)j->tries;
	r->attempt_count = j->claim->attempt_count + j->tries;
	r->retry_count = j->claim->retry_count + (j->kind == ATTEMPT_SCHEDULED);
	if (success) {
		r->status = DELIVERY_PROCESSED;
		r->processed_at = now;
	} else {
		r->status = DELIVERY_FAILED;
		set_last_error(r, j);
		if (j->kind == ATTEMPT_IMMEDIATE && retry_may_schedule(p, 0))
			r->next_attempt_at = now + retry_scheduled_delay(p, 1, rng_next, &j->d->rng);
		else if (j->kind == ATTEMPT_SCHEDULED && retry_may_schedule(p, r->retry_count))
			r->next_attempt_at =
				now + retry_scheduled_delay(p, r->retry_count + 1, rng_next, &j->d->rng);
		/* else: manual rounds and exhausted retries go to the dead-letter queue */
	}
	done_push(j->d, j);
}

/* Hands the delivery back untouched but for the attempts made (shutdown, disabled
 * subscription): due again at now + delay_ms. */
static void job_release(struct job *j, int64_t delay_ms)
{
	struct store_result *r = &j->result;
	memset(r, 0, sizeof(*r));
	r->delivery_id = j->claim->delivery_id;
	r->status = j->claim->status;
	r->replay = j->claim->replay;
	r->attempt_count = j->claim->attempt_count + j->tries;
	r->retry_count = j->claim->retry_count;
	r->next_attempt_at = clock_now_ms() + delay_ms;
	r->attempts = j->attempts;
	r->n_attempts = (size_t)j->tries;
	set_last_error(r, j);
	if (j->tries == 0)
		r->last_code = -1; /* keep the error the delivery already shows */
	done_push(j->d, j);
}

/* Fills the attempt being made with a local failure and ends the round. */
static void job_fail_local(struct job *j, const char *why)
{
	struct store_attempt *a = &j->attempts[j->tries];
	a->n = j->claim->attempt_count + j->tries + 1;
	a->kind = j->kind;
	a->started_at = clock_now_ms();
	a->duration_ms = 0;
	a->code = errmap_code(TRANSPORT_OTHER);
	snprintf(j->messages[j->tries], MSG_LEN, "request could not be built");
	snprintf(j->causes[j->tries], CAUSE_LEN, "%s", why);
	a->message = j->messages[j->tries];
	a->cause = j->causes[j->tries];
	j->tries++;
	job_finish(j, 0);
}

static void job_send(struct job *j)
{
	struct dispatcher *d = j->d;
	const struct store_claim *c = j->claim;
	int64_t now_ms = clock_now_ms();
	const char *url;

	curl_slist_free_all(j->headers);
	j->headers = NULL;
	if (build_headers(j, c->attempt_count + j->tries + 1, now_ms)) {
		job_fail_local(j, "a header is too long or memory ran out");
		return;
	}
	if (!(url = build_url(j))) {
		job_fail_local(j, "the URL with the query credential could not be built");
		return;
	}
	if (!j->easy && !(j->easy = curl_easy_init())) {
		job_fail_local(j, "curl_easy_init failed");
		return;
	}
	CURL *e = j->easy;
	curl_easy_reset(e);
	j->errbuf[0] = '\0';
	j->body_len = 0;
	j->causes[j->tries][0] = '\0';
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_PRIVATE, j);
	curl_easy_setopt(e, CURLOPT_POST, 1L);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->payload);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->payload_len);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, j->headers);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)j->timeout_ms);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, j->errbuf);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, body_cb);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, j);
	curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
	j->started_us = clock_mono_us();
	j->attempts[j->tries].started_at = now_ms;
	CURLMcode mrc = curl_multi_add_handle(d->multi, e);
	if (mrc != CURLM_OK) {
		job_fail_local(j, curl_multi_strerror(mrc));
		return;
	}
	j->state = JOB_IN_FLIGHT;
	d->in_flight++;
}

/* A request finished: record the attempt, then retry, or end the round. */
static void job_completed(struct job *j, CURLcode rc)
{
	struct dispatcher *d = j->d;
	struct store_attempt *a = &j->attempts[j->tries];
	long status = 0;
	char *msg = j->messages[j->tries], *cause = j->causes[j->tries];

	curl_multi_remove_handle(d->multi, j->easy);
	d->in_flight--;
	a->n = j->claim->attempt_count + j->tries + 1;
	a->kind = j->kind;
	a->duration_ms = (clock_mono_us() - j->started_us) / 1000;
	enum transport_error te = classify(rc);
	if (te == TRANSPORT_OK) {
		curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &status);
		a->code = (int)status;
		snprintf(msg, MSG_LEN, "HTTP %ld", status);
		if (retry_is_success(a->code))
			cause[0] = '\0'; /* keep no body for successes */
	} else {
		a->code = errmap_code(te);
		snprintf(msg, MSG_LEN, "%s", errmap_message(te));
		snprintf(cause, CAUSE_LEN, "%s", j->errbuf[0] ? j->errbuf : curl_easy_strerror(rc));
	}
	a->message = msg;
	a->cause = cause[0] ? cause : NULL;
	j->tries++;

	if (retry_is_success(a->code)) {
		job_finish(j, 1);
	} else if (j->tries < j->max_tries && !atomic_load(&d->stopping)) {
		j->state = JOB_WAITING;
		j->wake_us = clock_mono_us() + retry_immediate_delay(&j->sub->retry, j->tries + 1) * 1000;
		j->next = d->waiting;
		d->waiting = j;
	} else if (j->tries < j->max_tries) {
		job_release(j, 0); /* shutting down: hand the rest of the round back */
	} else {
		job_finish(j, 0);
	}
}

static void job_start(struct dispatcher *d, struct batch *b, struct store_claim *c)
{
	struct job *j = d->free_list;
	d->free_list = j->next;
	d->active++;
	j->batch = b;
	j->claim = c;
	j->tries = 0;
	j->headers = NULL;
	j->url = NULL;
	j->sub = sub_set_find(b->subs, c->subscription_id);
	if (c->replay)
		j->kind = ATTEMPT_MANUAL;
	else if (c->status == DELIVERY_FAILED)
		j->kind = ATTEMPT_SCHEDULED;
	else
		j->kind = ATTEMPT_IMMEDIATE;

	if (!j->sub) {
		/* The subscription was deleted: nothing to send to; keep the delivery visible
		 * in the dead-letter queue instead of dropping it. */
		static const struct subscription gone = {.retry = {.immediate = 1}};
		j->sub = &gone;
		struct store_attempt *a = &j->attempts[0];
		memset(a, 0, sizeof(*a));
		a->n = c->attempt_count + 1;
		a->kind = j->kind;
		a->started_at = clock_now_ms();
		a->code = 410;
		snprintf(j->messages[0], MSG_LEN, "subscription deleted");
		snprintf(j->causes[0], CAUSE_LEN, "subscription %s no longer exists",
			 c->subscription_id);
		a->message = j->messages[0];
		a->cause = j->causes[0];
		j->tries = 1;
		j->kind = ATTEMPT_MANUAL; /* no scheduled retry for it */
		job_finish(j, 0);
		return;
	}
	if (!j->sub->enabled) {
		job_release(j, d->cfg.disabled_delay_ms);
		return;
	}
	if (j->kind == ATTEMPT_SCHEDULED) {
		j->max_tries = 1;
		j->timeout_ms = j->sub->retry.timeout_ms;
	} else {
		j->max_tries = j->sub->retry.immediate < MAX_TRIES ? j->sub->retry.immediate : MAX_TRIES;
		j->timeout_ms = j->kind == ATTEMPT_MANUAL ? j->sub->retry.timeout_ms
							  : j->sub->retry.immediate_timeout_ms;
	}
	job_send(j);
}

static void batch_release(struct dispatcher *d, struct batch *b)
{
	if (--b->live)
		return;
	store_claims_free(b->claims, b->n);
	sub_registry_release(d->reg, b->subs);
	free(b);
}

static void job_recycle(struct dispatcher *d, struct job *j)
{
	curl_slist_free_all(j->headers);
	j->headers = NULL;
	free(j->url);
	j->url = NULL;
	batch_release(d, j->batch);
	j->batch = NULL;
	j->claim = NULL;
	j->state = JOB_FREE;
	j->next = d->free_list;
	d->free_list = j;
	d->active--;
}

/* ---- the loop ------------------------------------------------------------------------------ */

/* Writes up to FLUSH_MAX finished results in one transaction. Returns 0 when written
 * (or nothing to write), -1 when the store refused (results stay queued). */
static int flush_results(struct dispatcher *d)
{
	size_t n = 0;
	for (struct job *j = d->done_head; j && n < FLUSH_MAX; j = j->next)
		d->results[n++] = j->result;
	if (n == 0)
		return 0;
	int rc = store_record_results(d->st, d->results, n);
	if (rc != STORE_OK) {
		if (!d->store_down)
			log_error("dispatcher: cannot write %zu results (%s); keeping them and retrying",
				  n, store_strerror(rc));
		d->store_down = 1;
		return -1;
	}
	if (d->store_down)
		log_info("dispatcher: store is writable again");
	d->store_down = 0;
	for (size_t i = 0; i < n; i++) {
		struct job *j = d->done_head;
		d->done_head = j->next;
		job_recycle(d, j);
	}
	if (!d->done_head)
		d->done_tail = NULL;
	d->done_count -= n;
	return 0;
}

/* Claims a batch of due deliveries and starts them. Returns the number claimed, or -1
 * when the store failed. */
static long claim_batch(struct dispatcher *d, size_t limit)
{
	struct store_claim *claims = NULL;
	size_t n = 0;
	int rc = store_claim_due(d->st, clock_now_ms(), d->cfg.lease_ms, limit, &claims, &n);
	if (rc != STORE_OK) {
		if (!d->store_down)
			log_error("dispatcher: cannot claim deliveries: %s", store_strerror(rc));
		d->store_down = 1;
		return -1;
	}
	if (d->store_down)
		log_info("dispatcher: store is reachable again");
	d->store_down = 0;
	if (n == 0) {
		store_claims_free(claims, 0);
		return 0;
	}
	struct batch *b = calloc(1, sizeof(*b));
	if (!b) {
		/* Leases expire and the work returns to the pool. */
		log_error("dispatcher: out of memory; %zu claimed deliveries will be retried", n);
		store_claims_free(claims, n);
		return -1;
	}
	b->claims = claims;
	b->n = n;
	b->live = n + 1; /* +1 held while starting, so an early finish cannot free it */
	b->subs = sub_registry_acquire(d->reg);
	for (size_t i = 0; i < n; i++)
		job_start(d, b, &claims[i]);
	batch_release(d, b);
	return (long)n;
}

static void run_timers(struct dispatcher *d, int64_t now_us)
{
	struct job **pp = &d->waiting;
	while (*pp) {
		struct job *j = *pp;
		if (j->wake_us <= now_us || atomic_load(&d->stopping)) {
			*pp = j->next;
			if (atomic_load(&d->stopping))
				job_release(j, 0);
			else
				job_send(j);
		} else {
			pp = &j->next;
		}
	}
}

static void read_completions(struct dispatcher *d)
{
	CURLMsg *m;
	int left;
	while ((m = curl_multi_info_read(d->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		struct job *j = NULL;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&j);
		job_completed(j, m->data.result);
	}
}

/* Stops every running request (grace period over): they are handed back undecided. */
static void abort_in_flight(struct dispatcher *d)
{
	int n = d->cfg.max_in_flight;
	for (int i = 0; i < n; i++) {
		struct job *j = &d->jobs[i];
		if (j->state != JOB_IN_FLIGHT)
			continue;
		curl_multi_remove_handle(d->multi, j->easy);
		d->in_flight--;
		job_release(j, 0);
	}
}

static void *dispatcher_main(void *arg)
{
	struct dispatcher *d = arg;
	int64_t next_claim_us = 0, next_flush_us = 0, stop_deadline_us = 0;

	for (;;) {
		int64_t now_us = clock_mono_us();
		int stopping = atomic_load(&d->stopping);

		if (stopping && !stop_deadline_us)
			stop_deadline_us = now_us + d->cfg.shutdown_grace_ms * 1000;
		if (stopping && now_us >= stop_deadline_us && d->in_flight)
			abort_in_flight(d);

		/* Claim when woken or when due work may be waiting, and when there is room
		 * for a worthwhile batch (keeps batches large under load). */
		int room = d->cfg.max_in_flight - d->active;
		int want = room < d->cfg.batch ? room : d->cfg.batch;
		int worth = d->active == 0 || want == d->cfg.batch || room >= d->cfg.max_in_flight / 4;
		if (atomic_exchange(&d->woken, 0) && !d->store_down)
			next_claim_us = now_us;
		if (!stopping && want > 0 && worth && now_us >= next_claim_us) {
			long got = claim_batch(d, (size_t)want);
			if (got < 0) {
				next_claim_us = now_us + 500 * 1000; /* store down: probe again soon */
			} else if (got == want) {
				next_claim_us = now_us; /* more may be due */
			} else {
				int64_t due = 0;
				next_claim_us = now_us + IDLE_POLL_MS * 1000;
				if (store_next_due(d->st, &due) == STORE_OK && due) {
					int64_t wait_ms = due - clock_now_ms();
					if (wait_ms < 0)
						wait_ms = 0;
					if (wait_ms < IDLE_POLL_MS)
						next_claim_us = now_us + wait_ms * 1000;
				}
			}
		}

		run_timers(d, now_us);

		int running = 0;
		curl_multi_perform(d->multi, &running);
		read_completions(d);

		now_us = clock_mono_us();
		if (d->done_count && now_us >= next_flush_us &&
		    (d->done_count >= FLUSH_MAX || d->in_flight == 0 || stopping ||
		     now_us - d->done_head->done_us >= FLUSH_AGE_US)) {
			if (flush_results(d))
				next_flush_us = now_us + 500 * 1000; /* store down: retry soon */
			else
				next_flush_us = 0;
		}

		if (stopping && d->active == 0)
			break;
		if (stopping && d->store_down && d->in_flight == 0 && !d->waiting &&
		    now_us >= stop_deadline_us) {
			log_error("dispatcher: store unavailable at shutdown; %zu results not written "
				  "(their deliveries will be sent again after the lease expires)",
				  d->done_count);
			break;
		}

		/* Sleep until a socket is ready, a timer, claim or flush is due, or a wake-up. */
		int64_t wait_us = next_claim_us > now_us ? next_claim_us - now_us : 0;
		if (d->active >= d->cfg.max_in_flight || stopping || !worth)
			wait_us = 100 * 1000;
		for (struct job *j = d->waiting; j; j = j->next)
			if (j->wake_us - now_us < wait_us)
				wait_us = j->wake_us > now_us ? j->wake_us - now_us : 0;
		if (d->done_count) {
			int64_t flush_at = d->done_head->done_us + FLUSH_AGE_US;
			if (flush_at < next_flush_us)
				flush_at = next_flush_us;
			if (flush_at - now_us < wait_us)
				wait_us = flush_at > now_us ? flush_at - now_us : 0;
		}
		if (wait_us > 0)
			curl_multi_poll(d->multi, NULL, 0, (int)((wait_us + 999) / 1000), NULL);
	}

	/* Whatever is still done but unwritten could not be written; free it all. */
	while (d->done_head) {
		struct job *j = d->done_head;
		d->done_head = j->next;
		job_recycle(d, j);
	}
	return NULL;
}

struct dispatcher *dispatcher_start(store *st, struct sub_registry *reg,
				    const struct dispatcher_config *cfg)
{
	struct dispatcher *d = calloc(1, sizeof(*d));
	if (!d)
		return NULL;
	d->st = st;
	d->reg = reg;
	d->cfg = *cfg;
	d->rng = (uint64_t)clock_mono_us() * 0x9E3779B97F4A7C15ULL | 1;
	d->jobs = calloc((size_t)cfg->max_in_flight, sizeof(*d->jobs));
	d->results = calloc(FLUSH_MAX, sizeof(*d->results));
	d->multi = curl_multi_init();
	if (!d->jobs || !d->results || !d->multi)
		goto fail;
	curl_multi_setopt(d->multi, CURLMOPT_MAXCONNECTS, (long)cfg->max_in_flight);
	for (int i = cfg->max_in_flight - 1; i >= 0; i--) {
		d->jobs[i].d = d;
		d->jobs[i].next = d->free_list;
		d->free_list = &d->jobs[i];
	}
	if (pthread_create(&d->thread, NULL, dispatcher_main, d)) {
		log_error("dispatcher: cannot start thread");
		goto fail;
	}
	return d;
fail:
	if (d->multi)
		curl_multi_cleanup(d->multi);
	free(d->jobs);
	free(d->results);
	free(d);
	return NULL;
}

void dispatcher_wake(struct dispatcher *d)
{
	atomic_store(&d->woken, 1);
	curl_multi_wakeup(d->multi);
}

void dispatcher_stop(struct dispatcher *d)
{
	if (!d)
		return;
	atomic_store(&d->stopping, 1);
	curl_multi_wakeup(d->multi);
	pthread_join(d->thread, NULL);
	for (int i = 0; i < d->cfg.max_in_flight; i++)
		if (d->jobs[i].easy)
			curl_easy_cleanup(d->jobs[i].easy);
	curl_multi_cleanup(d->multi);
	free(d->jobs);
	free(d->results);
	free(d);
}
