/* dispatcher.c: claims due deliveries, sends them over HTTP with libcurl multi, runs the
 * immediate retry round, and writes results in groups (see dispatcher.h).
 *
 * Life of a job (one delivery's round):
 *   claimed -> request in flight -> completed attempt
 *     -> success, or round over       -> done list -> written by the store side
 *     -> failed with tries left       -> waiting on its stagger timer -> in flight again
 * An oauth2 subscription's attempt may first wait for its token (JOB_TOKEN_WAIT): the token
 * request runs in the same curl multi, one per subscription however many deliveries need
 * it (oauth2.h has the cache rules); a subscriber's 401 gets one new token and one resend.
 * Nothing here blocks: the store calls (claims, result writes) run on the dispatcher's own
 * store side thread (struct store_side), which groups the results that finish meanwhile.
 * Credentials never reach a log line or an attempt's cause: causes are redacted.
 *
 * Per subscription (struct sub_state) the dispatcher keeps its circuit breaker
 * (core/breaker.h) and its limits. A claimed delivery whose breaker is open sends nothing:
 * it takes a delay action (re-queued in the retry policy's [min_delay, max_delay] window)
 * or, after max_delay_actions of them, goes to the dead-letter queue as circuit_open. An
 * attempt that max_in_flight or rate_limit holds back waits here (JOB_PARKED, in its
 * subscription's queue, in order) without a store write, so a slow subscriber never
 * holds up the others; a queue longer than its share of the job pool, or older than half
 * a lease, goes back to the store instead. Retry decisions come from core/retry.h, with
 * the Retry-After of 429 and 503 responses. */
#include "deliver/dispatcher.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "core/breaker.h"
#include "core/errmap.h"
#include "core/metrics.h"
#include "core/ratelimit.h"
#include "core/retry.h"
#include "core/trace.h"
#include "deliver/oauth2.h"
#include "deliver/sign.h"
#include "store/spool.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/hash.h"
#include "util/duration.h"
#include "util/log.h"

#define MAX_TRIES 10          /* most tries in one round (retry.immediate <= 10) */
#define MSG_LEN 128
#define CAUSE_LEN 1024        /* DESIGN §2: the first KiB of the response body */
#define FLUSH_MAX 512         /* results written per transaction at most */
#define GROUP_WAIT_US 1000    /* a result waits at most this long for company */
#define IDLE_POLL_MS 1000     /* look for due work at least this often */
#define TOKEN_FORM_MAX 16384  /* token request bodies (credentials, scope, audience) */
#define OAUTH_IDLE_MS (3600 * 1000LL) /* a token cache unused this long is dropped */
#define OAUTH_PRUNE_US (60 * 1000000LL)
#define REDACTED "********"
#define SS_BUCKETS 256        /* hash buckets of per-subscription state */
#define SS_IDLE_MS (3600 * 1000LL) /* per-subscription state unused this long is dropped */
#define PARKED_MIN_CAP 32     /* jobs a subscription may park at least (pool allowing) */
#define RELEASE_MIN_MS 500    /* a job handed back for a limit is due again after 0.5-1.5 s */
#define CIRCUIT_OPEN_CODE 503 /* last_error.code of a delivery the breaker dead-lettered */
#define CIRCUIT_OPEN_MESSAGE "circuit_open"
#define DELAY_MAX_MS (3650LL * 86400 * 1000) /* no retry is scheduled beyond 10 years */
#define EPOLL_EVENTS 256      /* ready sockets taken per epoll_wait */

/* A claimed batch; freed when its last job is written back. */
struct batch {
	struct store_claim *claims;
	size_t n;
	size_t live;                 /* jobs not yet written */
	struct sub_set *subs;        /* the subscriptions as they were at claim time */
};

enum job_state { JOB_FREE, JOB_IN_FLIGHT, JOB_WAITING, JOB_TOKEN_WAIT, JOB_PARKED, JOB_DONE };

/* What CURLOPT_PRIVATE of an easy handle points at: the first member of either struct. */
enum transfer_kind { TRANSFER_DELIVERY, TRANSFER_TOKEN };

struct oauth2_entry;
struct sub_state;

struct job {
	enum transfer_kind transfer; /* TRANSFER_DELIVERY */
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
	CURL *easy;
	int easy_ready;              /* easy carries the options all requests share */
	int easy_tls;                /* ... and a subscription's TLS files */
	struct curl_slist *headers;  /* into hnodes/hbuf: owned by the job, not by curl_slist */
	struct curl_slist *hnodes;   /* header list nodes, reused from attempt to attempt */
	size_t hnodes_cap;
	char *hbuf;                  /* the header lines, NUL-separated; may hold credentials */
	size_t hbuf_cap, hbuf_len;
	char *url;                   /* owned when query auth rewrote it, else NULL */
	char errbuf[CURL_ERROR_SIZE];
	size_t body_len;             /* response bytes kept in causes[tries] */
	struct oauth2_entry *oauth;  /* oauth2: the subscription's token cache */
	uint64_t token_gen;          /* oauth2: generation of the token sent */
	int reauthed;                /* oauth2: this attempt got a new token after a 401 */
	struct sub_state *ss;        /* the subscription's breaker and limits, or NULL */
	int probe;                   /* this round is the half-open breaker's probe */
	int holds_slot;              /* the attempt counts in ss->in_flight */
	int64_t retry_after_ms;      /* Retry-After of the last response, -1 when none */
	int64_t parked_us;           /* JOB_PARKED: since when */
	struct job *next;            /* in the free, waiting, token-wait, parked or done list */
};

/* What this dispatcher keeps per subscription: the circuit breaker (written on the
 * dispatcher thread under circuit_mu, read by snapshots from API threads) and the limits
 * with the jobs they hold back (dispatcher thread only). */
struct sub_state {
	char sub_id[UUID_STR_LEN];
	struct breaker breaker;
	struct circuit_breaker_config breaker_cfg; /* as last seen, for snapshots */
	struct token_bucket bucket;
	double bucket_rate;          /* the rate the bucket is set up for, 0 = none yet */
	int in_flight;               /* attempts running (a request, or waiting for a token) */
	int refs;                    /* jobs pointing here */
	struct job *parked_head, *parked_tail;
	int parked;
	int on_parked_list;
	int64_t last_used_ms;        /* monotonic */
	struct sub_state *next;      /* hash chain */
	struct sub_state *next_parked; /* in dispatcher.parked_subs */
};

/* A token request in flight (one per oauth2_entry at most). */
struct token_fetch {
	enum transfer_kind transfer; /* TRANSFER_TOKEN */
	struct oauth2_entry *entry;
	CURL *easy;
	struct curl_slist *headers;
	struct buf form;             /* the request body; wiped when freed */
	struct buf response;         /* capped at OAUTH2_RESPONSE_MAX */
	int too_big;
	char *secrets[2];            /* client_secret and password copies, to redact causes */
	char url_shown[256];         /* token_url without its query, for causes */
	char errbuf[CURL_ERROR_SIZE];
};

/* The token cache of one subscription's oauth2 configuration (a changed configuration
 * gets a new entry, so no token outlives the credentials that obtained it). Dispatcher
 * thread only. */
struct oauth2_entry {
	char sub_id[UUID_STR_LEN];
	uint64_t fingerprint;        /* oauth2_params_fingerprint */
	struct oauth2_cache cache;
	struct token_fetch *fetch;   /* in flight, or NULL */
	struct job *waiters;         /* JOB_TOKEN_WAIT jobs; non-empty only while fetch runs */
	int64_t last_used_ms;        /* monotonic */
	int failing;                 /* the last request failed (logged once) */
	struct oauth2_entry *next;
};

/* The store side: a thread of the dispatcher's own that makes its store calls, so the
 * loop never waits for the store (SQLite's lock and fsync, PostgreSQL's round trips) and
 * keeps curl busy meanwhile. The loop hands it finished jobs to write and asks it for
 * claims; it hands back written jobs (to recycle) and claims (to start). Everything here
 * is under mu; the jobs on its lists belong to the side until handed back. */
struct store_side {
	pthread_t thread;
	int started;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int quit;                    /* loop -> side: stop, leave what is unwritten */
	struct job *todo_head, *todo_tail; /* loop -> side: results to write, in order */
	size_t todo_count;
	int64_t todo_since_us;       /* when the first of them arrived */
	size_t claim_want;           /* loop -> side: claim up to this many, 0 = none */
	struct job *written_head, *written_tail; /* side -> loop: to recycle */
	int claim_done;              /* side -> loop: the answer below is ready */
	int claim_rc;
	struct store_claim *claims;
	size_t claim_n;
	int due_hint_set;            /* side -> loop: after a short claim, the next due */
	int64_t due_hint_ms;         /* time in the store (0 = nothing pending) */
	int down;                    /* the last store call failed */
	int64_t retry_at_us;         /* side: when to try an unwritten group again */
	struct store_result *results; /* side: write scratch, FLUSH_MAX of them */
	size_t results_spooled;      /* side: results written to the spool in this outage */
};

struct dispatcher {
	store *st;
	struct sub_registry *reg;
	struct dispatcher_config cfg;
	pthread_t thread;
	CURLM *multi;
	int epfd;                    /* curl's sockets and the wake-up eventfd */
	int evfd;                    /* dispatcher_wake() writes here */
	int64_t curl_due_us;         /* curl's timer (monotonic), -1 = none */
	int curl_timer_set;          /* the timer callback ran (see curl_run) */
	struct epoll_event events[EPOLL_EVENTS];
	int n_events;                /* ready, not yet handed to curl */
	uint8_t *fd_state;           /* FD_* by socket number (curl_socket_cb) */
	size_t fd_state_cap;
	atomic_int stopping;
	atomic_int woken;
	struct job *jobs;            /* max_in_flight of them */
	struct job *free_list;
	struct job *waiting;         /* unsorted; few at a time */
	struct job *done_head, *done_tail;
	size_t done_count;
	int active;                  /* jobs not free */
	int in_flight;               /* jobs with a request running */
	uint64_t rng;
	int store_down;              /* as the store side last found it */
	struct store_side side;      /* the thread that claims and writes results */
	size_t claim_asked;          /* deliveries asked of the side, not yet answered */
	int64_t claim_at_ms;         /* a written retry is due then: claim, 0 = none */
	struct oauth2_entry *oauth;  /* token caches, few: one per oauth2 subscription */
	int token_fetches;           /* token requests in flight */
	int64_t soonest_retry_ms;    /* earliest next_attempt_at not yet written, 0 = none */
	struct sub_state *ss[SS_BUCKETS];
	struct sub_state *parked_subs; /* those with parked jobs */
};

/* The snapshot of breaker states for GET /v1/stats: one dispatcher per process. */
static pthread_mutex_t circuit_mu = PTHREAD_MUTEX_INITIALIZER;
static struct dispatcher *circuit_owner;

/* ---- small helpers ------------------------------------------------------------------ */

static double rng_next(void *ctx)
{
	uint64_t *s = ctx;
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return (double)(*s >> 11) / 9007199254740992.0;
}

/* errbuf: curl's message, which tells a TLS alert after the handshake (a TLS 1.3 server
 * refusing our client certificate) from other receive errors. */
static enum transport_error classify(CURLcode rc, const char *errbuf)
{
	switch (rc) {
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
		return strstr(errbuf, "SSL") || strstr(errbuf, "TLS") ? TRANSPORT_TLS
								       : TRANSPORT_OTHER;
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
#if LIBCURL_VERSION_NUM >= 0x074d00
	case CURLE_SSL_CLIENTCERT: /* the server wanted a client certificate (7.77) */
#endif
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

/* Header lines are written into the job's own buffer and list nodes, reused from attempt
 * to attempt (curl reads CURLOPT_HTTPHEADER as a plain list and copies nothing), so an
 * attempt costs no allocation once a job has seen its largest headers. A line is at most
 * HEADER_LINE_MAX - 1 bytes, as before. */
#define HEADER_LINE_MAX 8448

/* Wipes the header lines (they may carry credentials) and empties the list. */
static void headers_clear(struct job *j)
{
	if (j->hbuf_len)
		OPENSSL_cleanse(j->hbuf, j->hbuf_len);
	j->hbuf_len = 0;
	j->headers = NULL;
}

/* Makes room for need more bytes in hbuf. The old buffer is wiped: it may hold
 * credentials. */
static int hbuf_grow(struct job *j, size_t need)
{
	size_t cap = j->hbuf_cap ? j->hbuf_cap * 2 : 2048;
	while (cap < j->hbuf_len + need)
		cap *= 2;
	char *nb = malloc(cap);
	if (!nb)
		return -1;
	if (j->hbuf_len) {
		memcpy(nb, j->hbuf, j->hbuf_len);
		OPENSSL_cleanse(j->hbuf, j->hbuf_len);
	}
	free(j->hbuf);
	j->hbuf = nb;
	j->hbuf_cap = cap;
	return 0;
}

static int append_header(struct job *j, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int append_header(struct job *j, const char *fmt, ...)
{
	for (;;) {
		size_t room = j->hbuf_cap - j->hbuf_len;
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(room ? j->hbuf + j->hbuf_len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0 || n >= HEADER_LINE_MAX)
			return -1;
		if ((size_t)n < room) {
			j->hbuf_len += (size_t)n + 1;
			return 0;
		}
		if (hbuf_grow(j, (size_t)n + 1))
			return -1;
	}
}

/* Appends "name: value" (value NULL: "name:", which tells curl to send no such header)
 * with plain copies: vsnprintf costs about a microsecond per call, and every attempt
 * sends ten lines. */
static int append_line(struct job *j, const char *name, const char *value)
{
	size_t nlen = strlen(name), vlen = value ? strlen(value) : 0;
	size_t need = nlen + 1 + (value ? 1 + vlen : 0) + 1;

	if (need - 1 >= HEADER_LINE_MAX) /* as append_header: the line without its NUL */
		return -1;
	if (j->hbuf_cap - j->hbuf_len < need && hbuf_grow(j, need))
		return -1;
	char *p = j->hbuf + j->hbuf_len;
	memcpy(p, name, nlen);
	p += nlen;
	*p++ = ':';
	if (value) {
		*p++ = ' ';
		memcpy(p, value, vlen);
		p += vlen;
	}
	*p = '\0';
	j->hbuf_len += need;
	return 0;
}

/* Decimal digits of v (v >= 0) into buf[21]. */
static const char *decimal(int64_t v, char buf[21])
{
	char *p = buf + 20;
	*p = '\0';
	do {
		*--p = (char)('0' + v % 10);
		v /= 10;
	} while (v > 0 && p > buf);
	return p;
}

/* Links the lines of hbuf into hnodes: j->headers. */
static int headers_link(struct job *j)
{
	size_t lines = 0;
	for (size_t o = 0; o < j->hbuf_len; o += strlen(j->hbuf + o) + 1)
		lines++;
	if (lines > j->hnodes_cap) {
		size_t cap = lines < 16 ? 16 : lines * 2;
		struct curl_slist *nn = realloc(j->hnodes, cap * sizeof(*nn));
		if (!nn)
			return -1;
		j->hnodes = nn;
		j->hnodes_cap = cap;
	}
	size_t i = 0;
	for (size_t o = 0; o < j->hbuf_len; o += strlen(j->hbuf + o) + 1, i++) {
		j->hnodes[i].data = j->hbuf + o;
		j->hnodes[i].next = i + 1 < lines ? &j->hnodes[i + 1] : NULL;
	}
	j->headers = lines ? j->hnodes : NULL;
	return 0;
}

/* Replaces every occurrence of each of the n secrets (NULL and "" skipped) in text (a
 * NUL-terminated string in a buffer of size <= CAUSE_LEN bytes) with REDACTED, truncating
 * if the text grows. Subscribers echo requests in error bodies, and curl's messages may
 * quote a URL: whatever lands in a cause goes through here. */
static void redact(char *text, size_t size, const char *const *secrets, size_t n)
{
	char tmp[CAUSE_LEN];
	for (size_t i = 0; i < n; i++) {
		const char *sec = secrets[i];
		size_t slen = sec ? strlen(sec) : 0;
		if (!slen || !strstr(text, sec))
			continue;
		size_t o = 0;
		const char *p = text, *hit;
		while ((hit = strstr(p, sec))) {
			size_t pre = (size_t)(hit - p);
			if (o + pre + sizeof(REDACTED) > sizeof(tmp))
				break;
			memcpy(tmp + o, p, pre);
			memcpy(tmp + o + pre, REDACTED, sizeof(REDACTED) - 1);
			o += pre + sizeof(REDACTED) - 1;
			p = hit + slen;
		}
		if (hit) /* out of room: cut the text before the secret */
			p = "";
		size_t rest = strlen(p);
		if (o + rest >= sizeof(tmp))
			rest = sizeof(tmp) - 1 - o;
		memcpy(tmp + o, p, rest);
		o += rest;
		if (o >= size)
			o = size - 1;
		memcpy(text, tmp, o);
		text[o] = '\0';
	}
}

/* redact() with every credential the job's request carried. */
static void job_redact(const struct job *j, char *text, size_t size)
{
	const struct subscription *s = j->sub;
	const char *list[8];
	size_t n = 0;
	char *escaped = NULL;

	if (!text[0])
		return;
	list[n++] = s->auth_secret;
	if (s->auth_type == AUTH_QUERY && s->auth_secret)
		list[n++] = escaped = curl_easy_escape(NULL, s->auth_secret, 0);
	list[n++] = s->oauth2.client_secret;
	list[n++] = s->oauth2.password;
	/* the credential part of Authorization (encoded Basic, a bearer token) */
	for (const struct curl_slist *h = j->headers; h && n < 8; h = h->next) {
		if (strncasecmp(h->data, "Authorization:", 14) == 0) {
			const char *cred = strrchr(h->data, ' ');
			if (cred && strlen(cred + 1) >= 4)
				list[n++] = cred + 1;
		}
	}
	redact(text, size, list, n);
	curl_free(escaped);
}

/* The request headers of DESIGN §3 for the job's next attempt. bearer (borrowed) is the
 * oauth2 access token, NULL for other auth types. */
static int build_headers(struct job *j, int attempt_no, int64_t now_ms, const char *bearer)
{
	const struct subscription *s = j->sub;
	const struct store_claim *c = j->claim;
	int64_t ts = now_ms / 1000;
	char trace[TRACEPARENT_LEN];

	headers_clear(j);

	/* The producer's trace when it sent one, else one made from the event id; a new
	 * span for each attempt. */
	trace_child(c->traceparent, c->event_id,
		    (uint64_t)(rng_next(&j->d->rng) * 18446744073709551615.0), trace);

	const char *ctype = s->payload_format == PAYLOAD_BINARY ? "application/octet-stream"
								  : c->content_type;
	char ts_text[21], attempt_text[21];
	if (append_line(j, "Content-Type", ctype) || append_line(j, "webhook-id", c->event_id) ||
	    append_line(j, "webhook-timestamp", decimal(ts, ts_text)) ||
	    append_line(j, "outboxd-event-type", c->event_type) ||
	    append_line(j, "outboxd-delivery-id", c->delivery_id) ||
	    append_line(j, "outboxd-attempt", decimal(attempt_no, attempt_text)) ||
	    append_line(j, "traceparent", trace) || append_line(j, "User-Agent", "outboxd/0.1") ||
	    append_line(j, "Expect", NULL))
		goto fail;
	if (s->secret) {
		/* During a rotation's grace period the old secret signs too (DESIGN §3). */
		const char *prev = s->previous_secret && now_ms < s->previous_secret_until
					   ? s->previous_secret : NULL;
		char sig[SIGN_HEADER_LEN];
		if (sign_webhook_signature(s->secret, prev, c->event_id, ts, c->payload,
					   c->payload_len, sig) ||
		    append_line(j, "webhook-signature", sig))
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
		if (append_header(j, "Authorization: Basic %s", enc))
			goto fail;
		break;
	}
	case AUTH_BEARER:
		if (append_header(j, "Authorization: Bearer %s", s->auth_secret))
			goto fail;
		break;
	case AUTH_API_KEY:
		if (append_header(j, "%s: %s", s->auth_name, s->auth_secret))
			goto fail;
		break;
	case AUTH_OAUTH2:
		if (!bearer || append_header(j, "Authorization: Bearer %s", bearer))
			goto fail;
		break;
	default:
		break;
	}
	for (size_t i = 0; i < s->n_headers; i++)
		if (append_header(j, "%s: %s", s->headers[i].name, s->headers[i].value))
			goto fail;
	if (headers_link(j))
		goto fail;
	return 0;
fail:
	headers_clear(j);
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

/* ---- per-subscription state: breaker and limits ----------------------------------------- */

static unsigned ss_hash(const char *id)
{
	return hash_fnv1a(id) % SS_BUCKETS;
}

static struct sub_state *ss_find(struct dispatcher *d, const char *id)
{
	for (struct sub_state *x = d->ss[ss_hash(id)]; x; x = x->next)
		if (strcmp(x->sub_id, id) == 0)
			return x;
	return NULL;
}

/* The state of s, made on first use; NULL when out of memory (the subscription then goes
 * without breaker and limits rather than without deliveries). */
static struct sub_state *ss_get(struct dispatcher *d, const struct subscription *s)
{
	struct sub_state *x = ss_find(d, s->id);
	if (!x) {
		unsigned h = ss_hash(s->id);
		if (!(x = calloc(1, sizeof(*x)))) {
			log_error("dispatcher: out of memory: subscription %s runs without its "
				  "circuit breaker and limits", s->id);
			return NULL;
		}
		memcpy(x->sub_id, s->id, UUID_STR_LEN);
		breaker_init(&x->breaker);
		x->breaker_cfg = s->breaker;
		pthread_mutex_lock(&circuit_mu);
		x->next = d->ss[h];
		d->ss[h] = x;
		pthread_mutex_unlock(&circuit_mu);
	}
	x->last_used_ms = clock_mono_ms();
	return x;
}

/* Drops the state of subscriptions nobody used for a while (deleted ones, mostly); an
 * open breaker is kept for at least its failure window. */
static void ss_prune(struct dispatcher *d, int64_t now_ms)
{
	pthread_mutex_lock(&circuit_mu);
	for (int i = 0; i < SS_BUCKETS; i++) {
		struct sub_state **pp = &d->ss[i];
		while (*pp) {
			struct sub_state *x = *pp;
			int64_t idle = x->breaker_cfg.failure_window_ms > SS_IDLE_MS
					       ? x->breaker_cfg.failure_window_ms : SS_IDLE_MS;
			if (!x->refs && !x->parked && now_ms - x->last_used_ms > idle) {
				*pp = x->next;
				free(x);
			} else {
				pp = &x->next;
			}
		}
	}
	pthread_mutex_unlock(&circuit_mu);
}

static void ss_free_all(struct dispatcher *d)
{
	pthread_mutex_lock(&circuit_mu);
	if (circuit_owner == d)
		circuit_owner = NULL;
	for (int i = 0; i < SS_BUCKETS; i++) {
		while (d->ss[i]) {
			struct sub_state *x = d->ss[i];
			d->ss[i] = x->next;
			free(x);
		}
	}
	pthread_mutex_unlock(&circuit_mu);
}

const char *dispatcher_circuit_state(const char *subscription_id)
{
	enum breaker_state state = BREAKER_CLOSED;

	pthread_mutex_lock(&circuit_mu);
	if (circuit_owner) {
		struct sub_state *x = ss_find(circuit_owner, subscription_id);
		if (x)
			state = breaker_state_at(&x->breaker, &x->breaker_cfg, clock_now_ms());
	}
	pthread_mutex_unlock(&circuit_mu);
	return breaker_state_name(state);
}

static void circuit_publish(const struct sub_state *x)
{
	metrics_circuit(x->sub_id, (int)x->breaker.state, x->breaker.open_until_ms);
}

/* May the job's round start? A BREAKER_PROBE answer makes it the half-open probe. */
static enum breaker_admission circuit_admit(struct job *j)
{
	struct sub_state *x = j->ss;
	enum breaker_admission a;

	pthread_mutex_lock(&circuit_mu);
	x->breaker_cfg = j->sub->breaker;
	a = breaker_admit(&x->breaker, &x->breaker_cfg, clock_now_ms());
	pthread_mutex_unlock(&circuit_mu);
	if (a == BREAKER_PROBE) {
		j->probe = 1;
		log_info("subscription %s: circuit half-open: delivery %s is the probe", x->sub_id,
			 j->claim->delivery_id);
	}
	circuit_publish(x);
	return a;
}

/* A round with attempts ended: the breaker counts it. */
static void circuit_record(struct job *j, int success)
{
	struct sub_state *x = j->ss;
	const struct circuit_breaker_config *c = &j->sub->breaker;
	enum breaker_state before, after;
	int64_t until;
	char window[32], left[32];

	if (!x)
		return;
	pthread_mutex_lock(&circuit_mu);
	before = x->breaker.state;
	breaker_record(&x->breaker, c, clock_now_ms(), success, j->probe);
	after = x->breaker.state;
	until = x->breaker.open_until_ms;
	pthread_mutex_unlock(&circuit_mu);
	if (after == BREAKER_OPEN && (before != BREAKER_OPEN || j->probe))
		log_warn("subscription %s: circuit open%s: deliveries take delay actions for %s "
			 "(more than %d failed deliveries within %s)", x->sub_id,
			 j->probe ? " again: the probe failed" : "",
			 duration_format(until - clock_now_ms(), left, sizeof(left)), c->max_errors,
			 duration_format(c->failure_window_ms, window, sizeof(window)));
	else if (after == BREAKER_CLOSED && before != BREAKER_CLOSED)
		log_info("subscription %s: circuit closed: the probe succeeded", x->sub_id);
	j->probe = 0;
	circuit_publish(x);
}

/* The probe ended undecided (handed back): the next delivery asking is the probe. */
static void circuit_probe_abandoned(struct job *j)
{
	if (!j->probe || !j->ss)
		return;
	pthread_mutex_lock(&circuit_mu);
	breaker_probe_abandoned(&j->ss->breaker);
	pthread_mutex_unlock(&circuit_mu);
	j->probe = 0;
}

static void bucket_sync(struct sub_state *x, const struct subscription *s, int64_t now_us)
{
	if (x->bucket_rate == s->rate_limit)
		return;
	double burst = token_bucket_burst_for(s->rate_limit);
	if (x->bucket_rate == 0)
		token_bucket_init(&x->bucket, s->rate_limit, burst, now_us);
	else
		token_bucket_configure(&x->bucket, s->rate_limit, burst, now_us);
	x->bucket_rate = s->rate_limit;
}

/* Takes what the job's next attempt needs from its subscription's limits: a place under
 * max_in_flight, then a rate_limit token. Returns 1 when it may go now, 0 otherwise
 * (nothing taken). */
static int limits_take(struct job *j, int64_t now_us)
{
	struct sub_state *x = j->ss;
	const struct subscription *s = j->sub;

	if (!x)
		return 1;
	if (s->max_in_flight > 0 && x->in_flight >= s->max_in_flight)
		return 0;
	if (s->rate_limit > 0) {
		bucket_sync(x, s, now_us);
		if (token_bucket_take(&x->bucket, now_us) > 0)
			return 0;
	}
	x->in_flight++;
	j->holds_slot = 1;
	return 1;
}

/* When a job of s held back by x's limits could go: a wait in µs for a token, or -1 when
 * it waits for a running attempt to end (a completion wakes the loop). */
static int64_t limits_wait(struct sub_state *x, const struct subscription *s, int64_t now_us)
{
	if (s->max_in_flight > 0 && x->in_flight >= s->max_in_flight)
		return -1;
	if (s->rate_limit > 0) {
		struct token_bucket peek;
		bucket_sync(x, s, now_us);
		peek = x->bucket;
		return token_bucket_take(&peek, now_us);
	}
	return 0;
}

/* The attempt is over: its place under max_in_flight goes back. */
static void job_slot_put(struct job *j)
{
	if (j->holds_slot) {
		j->ss->in_flight--;
		j->holds_slot = 0;
	}
}

/* How many jobs a subscription may keep parked: enough to keep its limits busy, never
 * more than a quarter of the job pool, so the other subscriptions always find room. */
static int parked_cap(const struct dispatcher *d, const struct subscription *s)
{
	int cap = PARKED_MIN_CAP, share = d->cfg.max_in_flight / 4;

	if (s->max_in_flight > 0 && s->max_in_flight < INT32_MAX / 4 && s->max_in_flight * 4 > cap)
		cap = s->max_in_flight * 4;
	if (s->rate_limit * 2 > cap)
		cap = s->rate_limit * 2 < INT32_MAX ? (int)(s->rate_limit * 2) : INT32_MAX;
	if (share < 1)
		share = 1;
	return cap < share ? cap : share;
}

/* ---- the life of a job ----------------------------------------------------------------- */

static void done_push(struct dispatcher *d, struct job *j)
{
	j->state = JOB_DONE;
	j->next = NULL;
	if (d->done_tail)
		d->done_tail->next = j;
	else
		d->done_head = j;
	d->done_tail = j;
	d->done_count++;
}

/* A retry or delay action is due at at_ms: the loop claims then, not at the idle poll. */
static void note_due(struct dispatcher *d, int64_t at_ms)
{
	if (at_ms && (!d->soonest_retry_ms || at_ms < d->soonest_retry_ms))
		d->soonest_retry_ms = at_ms;
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

	job_slot_put(j);
	memset(r, 0, sizeof(*r));
	r->delivery_id = j->claim->delivery_id;
	r->attempts = j->attempts;
	r->n_attempts = (size_t)j->tries;
	r->attempt_count = j->claim->attempt_count + j->tries;
	r->retry_count = j->claim->retry_count + (j->kind == ATTEMPT_SCHEDULED);
	r->delay_actions = j->claim->delay_actions;
	if (success) {
		r->status = DELIVERY_PROCESSED;
		r->processed_at = now;
		metrics_delivery(j->claim->subscription_id, OUTCOME_PROCESSED);
	} else {
		int code = j->tries ? j->attempts[j->tries - 1].code : 0;
		/* Manual rounds, permanent codes and exhausted retries get -1: the dead-letter
		 * queue. Retry-After (429/503) can only postpone the policy's delay. */
		int64_t delay = retry_next_delay(p, j->kind, r->retry_count, code, j->retry_after_ms,
						 rng_next, &j->d->rng);
		r->status = DELIVERY_FAILED;
		set_last_error(r, j);
		if (delay >= 0)
			r->next_attempt_at = now + (delay < DELAY_MAX_MS ? delay : DELAY_MAX_MS);
		metrics_delivery(j->claim->subscription_id,
				 r->next_attempt_at ? OUTCOME_RETRYING : OUTCOME_DEAD);
		note_due(j->d, r->next_attempt_at);
	}
	if (j->tries > 0)
		circuit_record(j, success);
	done_push(j->d, j);
}

/* The subscription's breaker is open: nothing is sent. The delivery is re-queued at a
 * random time in the retry policy's [min_delay, max_delay] window (a delay action,
 * seed 004), or, once it has taken max_delay_actions of them, dead-lettered with
 * last_error {503, "circuit_open"}. Attempts and retries are not counted: no request
 * was made. */
static void job_delay_action(struct job *j)
{
	struct dispatcher *d = j->d;
	const struct subscription *s = j->sub;
	const struct store_claim *c = j->claim;
	struct store_result *r = &j->result;
	char window[32], wait_text[32];

	memset(r, 0, sizeof(*r));
	r->delivery_id = c->delivery_id;
	r->attempt_count = c->attempt_count;
	r->retry_count = c->retry_count;
	r->last_code = CIRCUIT_OPEN_CODE;
	r->last_message = CIRCUIT_OPEN_MESSAGE;
	r->last_cause = j->causes[0];
	duration_format(s->breaker.failure_window_ms, window, sizeof(window));
	if (c->delay_actions >= s->breaker.max_delay_actions) {
		r->status = DELIVERY_FAILED; /* no next attempt: the dead-letter queue */
		r->delay_actions = c->delay_actions;
		snprintf(j->causes[0], CAUSE_LEN,
			 "the circuit breaker of subscription %s is open (more than %d failed "
			 "deliveries within %s); after %d delay actions the delivery was stopped "
			 "without a request", s->id, s->breaker.max_errors, window, c->delay_actions);
		metrics_delivery(c->subscription_id, OUTCOME_DEAD);
	} else {
		int64_t wait = retry_requeue_delay(&s->retry, rng_next, &d->rng);
		r->status = c->status;
		r->replay = c->replay;
		r->delay_actions = c->delay_actions + 1;
		r->next_attempt_at = clock_now_ms() + wait;
		snprintf(j->causes[0], CAUSE_LEN,
			 "delay action %d of %d: the circuit breaker of subscription %s is open "
			 "(more than %d failed deliveries within %s); no request sent, due again "
			 "in %s", r->delay_actions, s->breaker.max_delay_actions, s->id,
			 s->breaker.max_errors, window,
			 duration_format(wait, wait_text, sizeof(wait_text)));
		metrics_delivery(c->subscription_id, OUTCOME_DELAYED);
		note_due(d, r->next_attempt_at);
	}
	done_push(d, j);
}

/* Hands the delivery back untouched but for the attempts made (shutdown, disabled
 * subscription): due again at now + delay_ms. */
static void job_release(struct job *j, int64_t delay_ms)
{
	struct store_result *r = &j->result;
	job_slot_put(j);
	circuit_probe_abandoned(j);
	memset(r, 0, sizeof(*r));
	r->delivery_id = j->claim->delivery_id;
	r->status = j->claim->status;
	r->replay = j->claim->replay;
	r->attempt_count = j->claim->attempt_count + j->tries;
	r->retry_count = j->claim->retry_count;
	r->delay_actions = j->claim->delay_actions;
	r->next_attempt_at = clock_now_ms() + delay_ms;
	r->attempts = j->attempts;
	r->n_attempts = (size_t)j->tries;
	set_last_error(r, j);
	if (j->tries == 0)
		r->last_code = -1; /* keep the error the delivery already shows */
	metrics_delivery(j->claim->subscription_id, OUTCOME_RELEASED);
	note_due(j->d, r->next_attempt_at);
	done_push(j->d, j);
}

/* Fills the attempt being made with a local failure and ends the round. */
static void job_fail_local(struct job *j, const char *why)
{
	struct store_attempt *a = &j->attempts[j->tries];
	j->retry_after_ms = -1;
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

/* The attempt just recorded (j->tries - 1) is over: retry after the stagger, or end the
 * round. */
static void job_after_attempt(struct job *j)
{
	struct dispatcher *d = j->d;
	int code = j->attempts[j->tries - 1].code;

	job_slot_put(j);
	if (retry_is_success(code)) {
		job_finish(j, 1);
		return;
	}
	/* A permanent code, or a Retry-After longer than the next stagger, ends the round. */
	int more = retry_immediate_continue(&j->sub->retry, j->tries, j->max_tries, code,
					    j->retry_after_ms);
	if (more && !atomic_load(&d->stopping)) {
		j->state = JOB_WAITING;
		j->wake_us = clock_mono_us() + retry_immediate_delay(&j->sub->retry, j->tries + 1) * 1000;
		j->next = d->waiting;
		d->waiting = j;
	} else if (more) {
		job_release(j, 0); /* shutting down: hand the rest of the round back */
	} else {
		job_finish(j, 0);
	}
}

/* The attempt failed before a request was answered (no token): record it like any
 * failed attempt, so the usual retries follow. */
static void job_attempt_failed(struct job *j, int code, const char *message, const char *cause)
{
	struct store_attempt *a = &j->attempts[j->tries];
	j->retry_after_ms = -1;
	a->n = j->claim->attempt_count + j->tries + 1;
	a->kind = j->kind;
	a->duration_ms = (clock_mono_us() - j->started_us) / 1000;
	a->code = code;
	metrics_attempt(code, clock_mono_us() - j->started_us);
	snprintf(j->messages[j->tries], MSG_LEN, "%s", message);
	snprintf(j->causes[j->tries], CAUSE_LEN, "%s", cause ? cause : "");
	job_redact(j, j->causes[j->tries], CAUSE_LEN);
	a->message = j->messages[j->tries];
	a->cause = j->causes[j->tries][0] ? j->causes[j->tries] : NULL;
	j->tries++;
	job_after_attempt(j);
}

/* What every request of the dispatcher sets: a POST, no signals, no redirects, HTTP(S)
 * only, errors into errbuf, the body to write_cb; owner is CURLOPT_PRIVATE and the
 * write callback's data (a struct job or a struct token_fetch). */
static void easy_common(CURL *e, void *owner, char *errbuf, curl_write_callback write_cb)
{
	curl_easy_setopt(e, CURLOPT_PRIVATE, owner);
	curl_easy_setopt(e, CURLOPT_POST, 1L);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, owner);
}

/* Response headers: only Retry-After matters (on 429 and 503 it can postpone the next
 * scheduled try). A new status line (an interim response) forgets the one before. */
static size_t header_cb(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct job *j = ctx;
	size_t len = size * nmemb;
	char value[64];
	int64_t ms;

	if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
		j->retry_after_ms = -1;
	} else if (len > 12 && strncasecmp(data, "Retry-After:", 12) == 0 && len - 12 < sizeof(value)) {
		memcpy(value, data + 12, len - 12);
		value[len - 12] = '\0';
		if (retry_after_parse(value, clock_now_ms(), &ms) == 0)
			j->retry_after_ms = ms;
	}
	return len;
}

/* Sends the attempt's request. bearer (borrowed, copied into the headers): the oauth2
 * access token, NULL for other auth types. */
static void job_send(struct job *j, const char *bearer)
{
	struct dispatcher *d = j->d;
	const struct store_claim *c = j->claim;
	const struct subscription *s = j->sub;
	const char *url;

	if (build_headers(j, c->attempt_count + j->tries + 1, clock_now_ms(), bearer)) {
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
	int tls = s->tls_ca_file || s->tls_client_cert;
	j->errbuf[0] = '\0';
	j->body_len = 0;
	j->retry_after_ms = -1;
	j->causes[j->tries][0] = '\0';
	/* The options every request shares are set once per handle: a reset and a full
	 * set cost about as much as a small request's own work in curl. Only a handle
	 * that has carried or will carry per-subscription TLS files starts over. */
	if (!j->easy_ready || tls || j->easy_tls) {
		curl_easy_reset(e);
		easy_common(e, j, j->errbuf, body_cb);
		curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
		curl_easy_setopt(e, CURLOPT_HEADERDATA, j);
		curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
		j->easy_ready = 1;
		j->easy_tls = tls;
	}
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->payload);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->payload_len);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, j->headers);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)j->timeout_ms);
	/* Peer and host verification stay on (curl's default); a subscription can only name
	 * the CA that verifies its endpoint, and the certificate that proves who we are. */
	if (s->tls_ca_file)
		curl_easy_setopt(e, CURLOPT_CAINFO, s->tls_ca_file);
	if (s->tls_client_cert) {
		curl_easy_setopt(e, CURLOPT_SSLCERT, s->tls_client_cert);
		curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
		curl_easy_setopt(e, CURLOPT_SSLKEY, s->tls_client_key ? s->tls_client_key
								       : s->tls_client_cert);
	}
	CURLMcode mrc = curl_multi_add_handle(d->multi, e);
	if (mrc != CURLM_OK) {
		job_fail_local(j, curl_multi_strerror(mrc));
		return;
	}
	j->state = JOB_IN_FLIGHT;
	d->in_flight++;
}

/* ---- oauth2 tokens ------------------------------------------------------------------------ */

static struct oauth2_entry *oauth_entry_get(struct dispatcher *d, const struct subscription *s)
{
	uint64_t fp = oauth2_params_fingerprint(&s->oauth2);
	for (struct oauth2_entry *e = d->oauth; e; e = e->next)
		if (e->fingerprint == fp && strcmp(e->sub_id, s->id) == 0)
			return e;
	struct oauth2_entry *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	memcpy(e->sub_id, s->id, UUID_STR_LEN);
	e->fingerprint = fp;
	e->next = d->oauth;
	d->oauth = e;
	return e;
}

static void token_fetch_free(struct token_fetch *f)
{
	if (!f)
		return;
	if (f->easy)
		curl_easy_cleanup(f->easy);
	curl_slist_free_all(f->headers); /* the Basic line is wiped before this (start) */
	if (f->form.data)
		OPENSSL_cleanse(f->form.data, f->form.len);
	buf_free(&f->form);
	buf_free(&f->response);
	for (int i = 0; i < 2; i++) {
		if (f->secrets[i])
			OPENSSL_cleanse(f->secrets[i], strlen(f->secrets[i]));
		free(f->secrets[i]);
	}
	free(f);
}

/* Stops the entry's token request, if any (shutdown). */
static void token_fetch_abort(struct dispatcher *d, struct oauth2_entry *e)
{
	if (!e->fetch)
		return;
	curl_multi_remove_handle(d->multi, e->fetch->easy);
	token_fetch_free(e->fetch);
	e->fetch = NULL;
	e->cache.fetching = 0;
	d->token_fetches--;
}

static size_t token_body_cb(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct token_fetch *f = ctx;
	if (buf_append(&f->response, data, size * nmemb)) {
		f->too_big = 1;
		return 0; /* curl stops with CURLE_WRITE_ERROR */
	}
	return size * nmemb;
}

/* Starts the token request of e with the parameters of s (borrowed; everything needed
 * later is copied). On failure the cache records it and e->fetch stays NULL. */
static void token_fetch_start(struct dispatcher *d, struct oauth2_entry *e,
			      const struct subscription *s, int64_t timeout_ms)
{
	const struct oauth2_params *p = &s->oauth2;
	struct token_fetch *f = calloc(1, sizeof(*f));
	const char *why = "out of memory";
	char line[6200], cause[OAUTH2_FAILURE_LEN];
	struct curl_slist *h;

	if (!f)
		goto fail;
	f->transfer = TRANSFER_TOKEN;
	f->entry = e;
	buf_init(&f->form, TOKEN_FORM_MAX);
	buf_init(&f->response, OAUTH2_RESPONSE_MAX);
	snprintf(f->url_shown, sizeof(f->url_shown), "%.*s", (int)strcspn(p->token_url, "?#"),
		 p->token_url);
	if ((p->client_secret && !(f->secrets[0] = strdup(p->client_secret))) ||
	    (p->password && !(f->secrets[1] = strdup(p->password))))
		goto fail;
	if (oauth2_request_body(p, &f->form)) {
		why = "the token request body is too large";
		goto fail;
	}
	static const char *const fixed[] = {
		"Content-Type: application/x-www-form-urlencoded", "Accept: application/json",
		"User-Agent: outboxd/0.1", "Expect:", NULL,
	};
	for (const char *const *l = fixed; *l; l++) {
		if (!(h = curl_slist_append(f->headers, *l)))
			goto fail;
		f->headers = h;
	}
	if (oauth2_uses_basic(p)) {
		memcpy(line, "Authorization: ", 15);
		int bad = oauth2_basic_header_value(p, line + 15, sizeof(line) - 15);
		h = bad ? NULL : curl_slist_append(f->headers, line);
		OPENSSL_cleanse(line, sizeof(line));
		if (!h) {
			why = bad ? "client_id and client_secret are too long" : "out of memory";
			goto fail;
		}
		f->headers = h;
	}
	if (!(f->easy = curl_easy_init())) {
		why = "curl_easy_init failed";
		goto fail;
	}
	CURL *c = f->easy;
	curl_easy_setopt(c, CURLOPT_URL, p->token_url);
	easy_common(c, f, f->errbuf, token_body_cb);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, f->form.data);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)f->form.len);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, f->headers);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	CURLMcode mrc = curl_multi_add_handle(d->multi, c);
	if (mrc != CURLM_OK) {
		why = curl_multi_strerror(mrc);
		goto fail;
	}
	e->fetch = f;
	d->token_fetches++;
	return;
fail:
	snprintf(cause, sizeof(cause), "%s: %s", f ? f->url_shown : "token request", why);
	token_fetch_free(f);
	oauth2_cache_fail(&e->cache, cause, clock_mono_ms());
}

static void job_token_failed(struct job *j, const char *cause)
{
	job_attempt_failed(j, errmap_code(TRANSPORT_OTHER), OAUTH2_FAILED_MESSAGE, cause);
}

/* Gets the attempt its credentials: at once for every auth type but oauth2, whose
 * deliveries use the cached token, start the one token request, or wait for it. */
static void job_authorize(struct job *j)
{
	struct dispatcher *d = j->d;
	if (j->sub->auth_type != AUTH_OAUTH2) {
		job_send(j, NULL);
		return;
	}
	struct oauth2_entry *e = j->oauth = oauth_entry_get(d, j->sub);
	if (!e) {
		job_token_failed(j, "out of memory");
		return;
	}
	int64_t now = clock_mono_ms();
	e->last_used_ms = now;
	enum oauth2_step step = oauth2_cache_next(&e->cache, now);
	if (step == OAUTH2_FETCH || step == OAUTH2_USE_AND_FETCH)
		token_fetch_start(d, e, j->sub, j->timeout_ms);
	switch (step) {
	case OAUTH2_USE:
	case OAUTH2_USE_AND_FETCH:
		j->token_gen = e->cache.generation;
		job_send(j, e->cache.token);
		return;
	case OAUTH2_FETCH:
		if (!e->fetch) { /* it could not even start */
			job_token_failed(j, e->cache.failure);
			return;
		}
		/* fall through */
	case OAUTH2_WAIT:
		j->state = JOB_TOKEN_WAIT;
		j->next = e->waiters;
		e->waiters = j;
		return;
	case OAUTH2_FAILED:
		job_token_failed(j, e->cache.failure);
		return;
	}
}

/* A token request finished: cache the token or the failure, then every delivery that
 * waited for it goes on. */
static void token_fetch_done(struct dispatcher *d, struct token_fetch *f, CURLcode rc)
{
	struct oauth2_entry *e = f->entry;
	char why[OAUTH2_FAILURE_LEN], detail[512];
	char *token = NULL;
	int64_t expires_in = -1;
	long status = 0;

	curl_multi_remove_handle(d->multi, f->easy);
	d->token_fetches--;
	e->fetch = NULL;
	if (rc != CURLE_OK && f->too_big) {
		snprintf(why, sizeof(why), "%s: token response over %d bytes", f->url_shown,
			 OAUTH2_RESPONSE_MAX);
	} else if (rc != CURLE_OK) {
		enum transport_error te = classify(rc, f->errbuf);
		snprintf(why, sizeof(why), "%s: %s: %s", f->url_shown, errmap_message(te),
			 f->errbuf[0] ? f->errbuf : curl_easy_strerror(rc));
	} else {
		curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &status);
		if (oauth2_parse_response(status, f->response.data ? f->response.data : "",
					  f->response.len, &token, &expires_in, detail,
					  sizeof(detail)))
			snprintf(why, sizeof(why), "%s: %s", f->url_shown, detail);
	}
	int64_t now = clock_mono_ms();
	if (token) {
		oauth2_cache_store(&e->cache, token, expires_in, now);
		if (e->failing)
			log_info("subscription %s: oauth2 token request works again", e->sub_id);
		e->failing = 0;
	} else {
		redact(why, sizeof(why), (const char *const *)f->secrets, 2);
		oauth2_cache_fail(&e->cache, why, now);
		if (!e->failing)
			log_warn("subscription %s: oauth2 token request failed: %s", e->sub_id, why);
		e->failing = 1;
	}
	token_fetch_free(f);

	struct job *w = e->waiters;
	e->waiters = NULL;
	while (w) {
		struct job *next = w->next;
		if (token) {
			/* straight from the cache, even when expires_in made it not reusable */
			w->token_gen = e->cache.generation;
			job_send(w, e->cache.token);
		} else {
			job_token_failed(w, e->cache.failure);
		}
		w = next;
	}
}

/* Drops token caches nobody used for OAUTH_IDLE_MS (deleted or changed subscriptions). A
 * job holds its entry for one request at most (timeouts <= 5 min), far less than that. */
static void oauth_entries_prune(struct dispatcher *d, int64_t now_ms)
{
	struct oauth2_entry **pp = &d->oauth;
	while (*pp) {
		struct oauth2_entry *e = *pp;
		if (!e->fetch && !e->waiters && now_ms - e->last_used_ms > OAUTH_IDLE_MS) {
			*pp = e->next;
			oauth2_cache_clear(&e->cache);
			free(e);
		} else {
			pp = &e->next;
		}
	}
}

/* ---- attempts ------------------------------------------------------------------------------ */

/* Starts the next attempt of the round now (its limits are taken). */
static void job_go(struct job *j)
{
	j->attempts[j->tries].started_at = clock_now_ms();
	j->started_us = clock_mono_us();
	j->reauthed = 0;
	j->retry_after_ms = -1;
	job_authorize(j);
}

/* Holds the job back in its subscription's queue until its limits let it go, or hands
 * it back to the store when the queue has its share of the job pool already. */
static void job_park(struct job *j)
{
	struct dispatcher *d = j->d;
	struct sub_state *x = j->ss;

	if (x->parked >= parked_cap(d, j->sub)) {
		job_release(j, RELEASE_MIN_MS + (int64_t)(rng_next(&d->rng) * 1000));
		return;
	}
	j->state = JOB_PARKED;
	j->parked_us = clock_mono_us();
	j->next = NULL;
	if (x->parked_tail)
		x->parked_tail->next = j;
	else
		x->parked_head = j;
	x->parked_tail = j;
	x->parked++;
	if (!x->on_parked_list) {
		x->on_parked_list = 1;
		x->next_parked = d->parked_subs;
		d->parked_subs = x;
	}
}

/* Starts the next attempt of the round, or parks it behind its subscription's limits
 * (and behind the jobs parked there already: a queue keeps its order). */
static void job_begin(struct job *j)
{
	if (j->ss && (j->ss->parked_head || !limits_take(j, clock_mono_us()))) {
		job_park(j);
		return;
	}
	job_go(j);
}

/* Starts the parked jobs their limits let go, oldest first; hands back the ones parked
 * for half a lease (the lease must not run out under them) and, when stopping, all.
 * Returns the wait in µs until a rate-limited queue can move, or -1 when only a
 * completion can move one. */
static int64_t run_parked(struct dispatcher *d, int64_t now_us)
{
	int stopping = atomic_load(&d->stopping);
	int64_t too_old_us = d->cfg.lease_ms * 1000 / 2, wait = -1;
	struct sub_state **pp = &d->parked_subs;

	while (*pp) {
		struct sub_state *x = *pp;
		while (x->parked_head) {
			struct job *j = x->parked_head;
			int old = stopping || now_us - j->parked_us >= too_old_us;
			if (!old && !limits_take(j, now_us)) {
				int64_t w = limits_wait(x, j->sub, now_us);
				if (w > 0 && (wait < 0 || w < wait))
					wait = w;
				break;
			}
			x->parked_head = j->next;
			if (!x->parked_head)
				x->parked_tail = NULL;
			x->parked--;
			j->next = NULL;
			if (old)
				job_release(j, stopping ? 0 : RELEASE_MIN_MS);
			else
				job_go(j);
		}
		if (!x->parked_head) {
			x->on_parked_list = 0;
			*pp = x->next_parked;
		} else {
			pp = &x->next_parked;
		}
	}
	return wait;
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
	enum transport_error te = classify(rc, j->errbuf);
	if (te == TRANSPORT_OK)
		curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &status);
	/* A refused token (revoked, rotated early, clock skew): one new token and one resend
	 * within the same attempt; a second 401 is the attempt's answer. */
	if (status == 401 && j->sub->auth_type == AUTH_OAUTH2 && !j->reauthed &&
	    !atomic_load(&d->stopping)) {
		j->reauthed = 1;
		oauth2_cache_invalidate(&j->oauth->cache, j->token_gen);
		job_authorize(j);
		return;
	}
	a->n = j->claim->attempt_count + j->tries + 1;
	a->kind = j->kind;
	a->duration_ms = (clock_mono_us() - j->started_us) / 1000;
	if (te == TRANSPORT_OK) {
		a->code = (int)status;
		snprintf(msg, MSG_LEN, "HTTP %ld%s", status,
			 j->reauthed ? " (with a new oauth2 token after HTTP 401)" : "");
		if (retry_is_success(a->code))
			cause[0] = '\0'; /* keep no body for successes */
	} else {
		a->code = errmap_code(te);
		snprintf(msg, MSG_LEN, "%s", errmap_message(te));
		snprintf(cause, CAUSE_LEN, "%s", j->errbuf[0] ? j->errbuf : curl_easy_strerror(rc));
	}
	job_redact(j, cause, CAUSE_LEN);
	a->message = msg;
	a->cause = cause[0] ? cause : NULL;
	metrics_attempt(a->code, clock_mono_us() - j->started_us);
	j->tries++;
	job_after_attempt(j);
}

static void job_start(struct dispatcher *d, struct batch *b, struct store_claim *c)
{
	struct job *j = d->free_list;
	d->free_list = j->next;
	d->active++;
	j->batch = b;
	j->claim = c;
	j->transfer = TRANSFER_DELIVERY;
	j->tries = 0;
	j->headers = NULL;
	j->url = NULL;
	j->oauth = NULL;
	j->ss = NULL;
	j->probe = 0;
	j->holds_slot = 0;
	j->retry_after_ms = -1;
	j->sub = sub_set_find(b->subs, c->subscription_id);
	if (c->replay)
		j->kind = ATTEMPT_MANUAL;
	else if (c->status == DELIVERY_FAILED)
		j->kind = ATTEMPT_SCHEDULED;
	else
		j->kind = ATTEMPT_IMMEDIATE;

	if (atomic_load(&d->stopping)) {
		/* Claimed as the shutdown began (the store side answered late): handed back
		 * untouched, due now, for whoever runs next. */
		job_release(j, 0);
		return;
	}
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
	if ((j->ss = ss_get(d, j->sub)))
		j->ss->refs++;
	if (j->ss && circuit_admit(j) == BREAKER_DELAY) {
		job_delay_action(j);
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
	if (j->probe)
		j->max_tries = 1; /* a half-open probe is one request */
	job_begin(j);
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
	headers_clear(j);
	free(j->url);
	j->url = NULL;
	j->oauth = NULL;
	if (j->ss)
		j->ss->refs--;
	j->ss = NULL;
	j->probe = 0;
	batch_release(d, j->batch);
	j->batch = NULL;
	j->claim = NULL;
	j->state = JOB_FREE;
	j->next = d->free_list;
	d->free_list = j;
	d->active--;
}

/* ---- the loop ------------------------------------------------------------------------------ */

/* ---- the store side -------------------------------------------------------------------- */

static void wake_fd(struct dispatcher *d);

/* The store is unavailable: writes the results to the spool instead (fsynced). Returns 0
 * when they are durable there. The leases stay in the store until the replay applies the
 * results; a lease that expired first means one more delivery (at least once). */
static int spool_results(struct dispatcher *d, size_t n)
{
	struct store_side *sd = &d->side;
	void *rec = NULL;
	size_t len = 0;
	int rc;

	if (spool_encode_results(sd->results, n, &rec, &len)) {
		log_error("dispatcher: cannot encode %zu results for the spool", n);
		return -1;
	}
	rc = spool_append(d->cfg.spool, SPOOL_REC_RESULTS, rec, len);
	free(rec);
	if (rc != SPOOL_OK)
		return -1;
	if (!sd->results_spooled)
		log_warn("dispatcher: the store is unavailable; writing results to the spool %s",
			 spool_path(d->cfg.spool));
	sd->results_spooled += n;
	return 0;
}

/* Writes the results of the n jobs from head in one transaction (group commit), or to
 * the spool. Returns 0 when they are durable, -1 when the store refused (the caller
 * keeps them and tries again). Side thread. */
static int side_write(struct dispatcher *d, struct job *head, size_t n)
{
	struct store_side *sd = &d->side;
	size_t i = 0;
	for (struct job *j = head; i < n; j = j->next)
		sd->results[i++] = j->result;
	int rc = store_record_results(d->st, sd->results, n);
	if (rc == STORE_UNAVAILABLE && d->cfg.spool && spool_results(d, n) == 0)
		return 0; /* durable in the spool: the jobs are done, the outage goes on */
	if (rc != STORE_OK) {
		if (!sd->down)
			log_error("dispatcher: cannot write %zu results (%s); keeping them and retrying",
				  n, store_strerror(rc));
		return -1;
	}
	if (sd->down)
		log_info("dispatcher: store is writable again");
	if (sd->results_spooled)
		log_info("dispatcher: %zu results went to the spool during the outage",
			 sd->results_spooled);
	sd->results_spooled = 0;
	return 0;
}

/* Claims up to want due deliveries for the loop. Side thread; the answer is set under mu
 * by the caller. */
static void side_claim(struct dispatcher *d, size_t want, int *rc, struct store_claim **claims,
		       size_t *n)
{
	*claims = NULL;
	*n = 0;
	*rc = store_claim_due(d->st, clock_now_ms(), d->cfg.lease_ms, want, claims, n);
	if (*rc != STORE_OK) {
		if (!d->side.down)
			log_error("dispatcher: cannot claim deliveries: %s", store_strerror(*rc));
		*claims = NULL;
		*n = 0;
		return;
	}
	if (d->side.down)
		log_info("dispatcher: store is reachable again");
}

static void *side_main(void *arg)
{
	struct dispatcher *d = arg;
	struct store_side *sd = &d->side;

	pthread_setname_np(pthread_self(), "dispatch-store");
	pthread_mutex_lock(&sd->mu);
	for (;;) {
		int64_t now_us = clock_mono_us();
		int must_claim = sd->claim_want && !sd->claim_done;
		/* A group is written when it is full, when a claim goes with it, or when its
		 * first result has waited GROUP_WAIT_US for company; after a failure, not
		 * before retry_at_us. */
		int64_t write_at_us = sd->todo_since_us + GROUP_WAIT_US;
		if (sd->todo_count >= FLUSH_MAX || must_claim)
			write_at_us = now_us;
		if (write_at_us < sd->retry_at_us)
			write_at_us = sd->retry_at_us;
		int can_write = sd->todo_head && now_us >= write_at_us;
		if (sd->quit)
			break;
		if (!can_write && !must_claim) {
			if (sd->todo_head) {
				int64_t at_us = write_at_us;
				struct timespec ts;
				clock_gettime(CLOCK_REALTIME, &ts);
				int64_t ns = ts.tv_nsec + (at_us - now_us) * 1000;
				ts.tv_sec += ns / 1000000000;
				ts.tv_nsec = ns % 1000000000;
				pthread_cond_timedwait(&sd->cv, &sd->mu, &ts);
			} else {
				pthread_cond_wait(&sd->cv, &sd->mu);
			}
			continue;
		}
		/* Take a group of results (everything queued, up to FLUSH_MAX) and the claim
		 * request; the loop appends meanwhile. */
		struct job *head = NULL, *last = NULL;
		size_t n = 0;
		if (can_write) {
			head = sd->todo_head;
			for (last = head, n = 1; n < FLUSH_MAX && last->next; n++)
				last = last->next;
			sd->todo_head = last->next;
			if (!sd->todo_head)
				sd->todo_tail = NULL;
			sd->todo_count -= n;
			sd->todo_since_us = now_us; /* the rest has waited long enough too */
			last->next = NULL;
		}
		size_t want = must_claim ? sd->claim_want : 0;
		pthread_mutex_unlock(&sd->mu);

		/* The claim first: new work waits on it, results only on their group. The
		 * loop counts room itself, so writing first would not make more. */
		int claim_rc = STORE_OK;
		struct store_claim *claims = NULL;
		size_t got = 0;
		if (want) {
			side_claim(d, want, &claim_rc, &claims, &got);
			pthread_mutex_lock(&sd->mu);
			sd->claim_done = 1;
			sd->claim_rc = claim_rc;
			sd->claims = claims;
			sd->claim_n = got;
			sd->down = claim_rc != STORE_OK;
			wake_fd(d);
			pthread_mutex_unlock(&sd->mu);
		}
		/* A short claim: the answer went out first; now find when the next delivery
		 * is due, so the loop claims then rather than at the idle poll. */
		int64_t due = 0;
		if (want && claim_rc == STORE_OK && got < want &&
		    store_next_due(d->st, &due) == STORE_OK) {
			pthread_mutex_lock(&sd->mu);
			sd->due_hint_set = 1;
			sd->due_hint_ms = due;
			wake_fd(d);
			pthread_mutex_unlock(&sd->mu);
		}
		int wrote = head ? side_write(d, head, n) : 0;

		pthread_mutex_lock(&sd->mu);
		if (head && wrote == 0) {
			if (sd->written_tail)
				sd->written_tail->next = head;
			else
				sd->written_head = head;
			sd->written_tail = last;
		} else if (head) {
			/* back in front, in order; try again in a while */
			last->next = sd->todo_head;
			sd->todo_head = head;
			if (!sd->todo_tail)
				sd->todo_tail = last;
			sd->todo_count += n;
			sd->retry_at_us = clock_mono_us() + 500 * 1000;
		}
		if (head)
			sd->down = wrote != 0 || (want && claim_rc != STORE_OK);
		wake_fd(d);
	}
	pthread_mutex_unlock(&sd->mu);
	return NULL;
}

/* Starts the claimed deliveries: one batch, freed when its last job is written. */
static void claims_start(struct dispatcher *d, struct store_claim *claims, size_t n)
{
	if (n == 0) {
		store_claims_free(claims, 0);
		return;
	}
	struct batch *b = calloc(1, sizeof(*b));
	if (!b) {
		/* Leases expire and the work returns to the pool. */
		log_error("dispatcher: out of memory; %zu claimed deliveries will be retried", n);
		store_claims_free(claims, n);
		return;
	}
	b->claims = claims;
	b->n = n;
	b->live = n + 1; /* +1 held while starting, so an early finish cannot free it */
	b->subs = sub_registry_acquire(d->reg);
	for (size_t i = 0; i < n; i++)
		job_start(d, b, &claims[i]);
	batch_release(d, b);
}

/* Recycles the jobs of a list linked by next; returns how many. */
static size_t recycle_list(struct dispatcher *d, struct job *l)
{
	size_t n = 0;
	while (l) {
		struct job *j = l;
		l = j->next;
		job_recycle(d, j);
		n++;
	}
	return n;
}

/* Appends the done list to the side's, under sd->mu. Returns 1 when it moved any. */
static int done_to_side(struct dispatcher *d)
{
	struct store_side *sd = &d->side;
	if (!d->done_head)
		return 0;
	if (!sd->todo_head)
		sd->todo_since_us = clock_mono_us();
	if (sd->todo_tail)
		sd->todo_tail->next = d->done_head;
	else
		sd->todo_head = d->done_head;
	sd->todo_tail = d->done_tail;
	sd->todo_count += d->done_count;
	d->done_head = d->done_tail = NULL;
	d->done_count = 0;
	return 1;
}

/* Hands the finished jobs to the side to write. */
static void side_give_done(struct dispatcher *d)
{
	pthread_mutex_lock(&d->side.mu);
	if (done_to_side(d))
		pthread_cond_signal(&d->side.cv);
	pthread_mutex_unlock(&d->side.mu);
}

/* Loop side of the exchange: hands the done list to the side and takes back what the
 * side finished: written jobs are recycled (returns how many), an answered claim is
 * returned through the pointers (*answered = 1), and so is the next due time the side
 * found after a short claim (*due_hint_ms; -1 when none came, 0 when nothing is
 * pending). */
static size_t side_exchange(struct dispatcher *d, int *answered, int *claim_rc,
			    struct store_claim **claims, size_t *n, int64_t *due_hint_ms)
{
	struct store_side *sd = &d->side;
	struct job *written;
	int signal;

	*answered = 0;
	pthread_mutex_lock(&sd->mu);
	signal = done_to_side(d);
	if (sd->claim_done) {
		*answered = 1;
		*claim_rc = sd->claim_rc;
		*claims = sd->claims;
		*n = sd->claim_n;
		sd->claim_done = 0;
		sd->claim_want = 0;
		sd->claims = NULL;
	}
	*due_hint_ms = -1;
	if (sd->due_hint_set) {
		*due_hint_ms = sd->due_hint_ms;
		sd->due_hint_set = 0;
	}
	written = sd->written_head;
	sd->written_head = sd->written_tail = NULL;
	d->store_down = sd->down;
	if (signal)
		pthread_cond_signal(&sd->cv);
	pthread_mutex_unlock(&sd->mu);

	return recycle_list(d, written);
}

/* Asks the side to claim up to want deliveries (none may be asked already). */
static void side_ask(struct dispatcher *d, size_t want)
{
	pthread_mutex_lock(&d->side.mu);
	d->side.claim_want = want;
	pthread_cond_signal(&d->side.cv);
	pthread_mutex_unlock(&d->side.mu);
}

/* Unwritten results in the side's hands (store down at shutdown). */
static size_t side_unwritten(struct dispatcher *d)
{
	pthread_mutex_lock(&d->side.mu);
	size_t n = d->side.todo_count;
	pthread_mutex_unlock(&d->side.mu);
	return n;
}

/* Stops the side thread and takes back whatever it holds. */
static void side_stop(struct dispatcher *d)
{
	struct store_side *sd = &d->side;
	if (!sd->started)
		return;
	pthread_mutex_lock(&sd->mu);
	sd->quit = 1;
	pthread_cond_signal(&sd->cv);
	pthread_mutex_unlock(&sd->mu);
	pthread_join(sd->thread, NULL);
	sd->started = 0;
	recycle_list(d, sd->written_head);
	recycle_list(d, sd->todo_head);
	sd->written_head = sd->written_tail = sd->todo_head = sd->todo_tail = NULL;
	sd->todo_count = 0;
	if (sd->claim_done)
		store_claims_free(sd->claims, sd->claim_n); /* their leases expire */
	sd->claims = NULL;
	sd->claim_done = 0;
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
				job_begin(j);
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
		void *owner = NULL;
		CURLcode rc = m->data.result;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&owner);
		/* m is invalid once its handle is removed: rc is read before */
		if (*(enum transfer_kind *)owner == TRANSFER_TOKEN)
			token_fetch_done(d, owner, rc);
		else
			job_completed(owner, rc);
	}
}

/* Stops every running request (grace period over): they are handed back undecided, and
 * so are the deliveries waiting for a token. */
static void abort_in_flight(struct dispatcher *d)
{
	int n = d->cfg.max_in_flight;
	for (struct oauth2_entry *e = d->oauth; e; e = e->next) {
		token_fetch_abort(d, e);
		struct job *w = e->waiters;
		e->waiters = NULL;
		while (w) {
			struct job *next = w->next;
			job_release(w, 0);
			w = next;
		}
	}
	for (int i = 0; i < n; i++) {
		struct job *j = &d->jobs[i];
		if (j->state != JOB_IN_FLIGHT)
			continue;
		curl_multi_remove_handle(d->multi, j->easy);
		d->in_flight--;
		job_release(j, 0);
	}
}

/* ---- curl's socket interface: curl's sockets in the dispatcher's epoll set ---------------- */

/* What the epoll set holds for a socket: curl_socket_cb keeps a kept-alive connection
 * registered between requests (curl says REMOVE after each response and IN again for
 * the next request on it), so a request costs one epoll_ctl instead of three. */
enum { FD_UNKNOWN = 0, FD_WATCHED, FD_PARKED };

static int fd_state_grow(struct dispatcher *d, curl_socket_t s)
{
	if ((size_t)s < d->fd_state_cap)
		return 0;
	size_t cap = d->fd_state_cap ? d->fd_state_cap : 256;
	while (cap <= (size_t)s)
		cap *= 2;
	uint8_t *grown = realloc(d->fd_state, cap);
	if (!grown)
		return -1;
	memset(grown + d->fd_state_cap, FD_UNKNOWN, cap - d->fd_state_cap);
	d->fd_state = grown;
	d->fd_state_cap = cap;
	return 0;
}

/* CURLMOPT_SOCKETFUNCTION: watch s for what curl waits on, or stop watching it. A socket
 * curl stops watching stays in the epoll set, parked: closing it removes it (the kernel
 * does), and if it turns ready while parked (the server closed an idle connection)
 * curl_run takes it out then. */
static int curl_socket_cb(CURL *easy, curl_socket_t s, int what, void *ctx, void *socketp)
{
	(void)easy;
	(void)socketp;
	struct dispatcher *d = ctx;
	if (s < 0 || fd_state_grow(d, s)) {
		log_error("dispatcher: no room to track connection %d", (int)s);
		return -1;
	}
	if (what == CURL_POLL_REMOVE) {
		if (d->fd_state[s] == FD_WATCHED)
			d->fd_state[s] = FD_PARKED;
		return 0;
	}
	struct epoll_event ev = {0};
	if (what == CURL_POLL_IN || what == CURL_POLL_INOUT)
		ev.events |= EPOLLIN;
	if (what == CURL_POLL_OUT || what == CURL_POLL_INOUT)
		ev.events |= EPOLLOUT;
	ev.data.fd = s;
	/* The number may belong to a new socket since curl closed the parked one: MOD
	 * then fails with ENOENT, and ADD follows. */
	int op = d->fd_state[s] == FD_UNKNOWN ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
	if (epoll_ctl(d->epfd, op, s, &ev) == 0 ||
	    (op == EPOLL_CTL_MOD && errno == ENOENT && epoll_ctl(d->epfd, EPOLL_CTL_ADD, s, &ev) == 0) ||
	    (op == EPOLL_CTL_ADD && errno == EEXIST && epoll_ctl(d->epfd, EPOLL_CTL_MOD, s, &ev) == 0)) {
		d->fd_state[s] = FD_WATCHED;
		return 0;
	}
	d->fd_state[s] = FD_UNKNOWN;
	log_error("dispatcher: epoll_ctl on a connection failed (errno %d)", errno);
	return -1; /* curl fails the transfers on this socket */
}

/* CURLMOPT_TIMERFUNCTION: curl wants curl_multi_socket_action(CURL_SOCKET_TIMEOUT) in
 * timeout_ms (0: at once), or no timeout (-1). */
static int curl_timer_cb(CURLM *multi, long timeout_ms, void *ctx)
{
	(void)multi;
	struct dispatcher *d = ctx;
	d->curl_due_us = timeout_ms < 0 ? -1 : clock_mono_us() + (int64_t)timeout_ms * 1000;
	d->curl_timer_set = 1;
	return 0;
}

/* Hands curl the sockets epoll found ready (d->events), then its timeout when due; the
 * wake-up eventfd is drained on the way. Completions are read by the caller. */
static void curl_run(struct dispatcher *d)
{
	int running = 0;
	for (int i = 0; i < d->n_events; i++) {
		const struct epoll_event *ev = &d->events[i];
		if (ev->data.fd == d->evfd) {
			uint64_t v;
			while (read(d->evfd, &v, sizeof(v)) == (ssize_t)sizeof(v))
				;
			continue;
		}
		if ((size_t)ev->data.fd < d->fd_state_cap && d->fd_state[ev->data.fd] == FD_PARKED) {
			/* curl does not wait on it: stop hearing about it */
			epoll_ctl(d->epfd, EPOLL_CTL_DEL, ev->data.fd, NULL);
			d->fd_state[ev->data.fd] = FD_UNKNOWN;
			continue;
		}
		int mask = 0;
		if (ev->events & EPOLLIN)
			mask |= CURL_CSELECT_IN;
		if (ev->events & EPOLLOUT)
			mask |= CURL_CSELECT_OUT;
		if (ev->events & (EPOLLERR | EPOLLHUP))
			mask |= CURL_CSELECT_ERR;
		curl_multi_socket_action(d->multi, ev->data.fd, mask, &running);
	}
	d->n_events = 0;
	if (d->curl_due_us >= 0 && clock_mono_us() >= d->curl_due_us) {
		d->curl_due_us = -1;
		d->curl_timer_set = 0;
		curl_multi_socket_action(d->multi, CURL_SOCKET_TIMEOUT, 0, &running);
		/* curl calls the timer function only when its next timeout changed: if it did
		 * not (we were early by its clock), ask it. */
		if (!d->curl_timer_set) {
			long ms = -1;
			if (curl_multi_timeout(d->multi, &ms) == CURLM_OK && ms >= 0)
				d->curl_due_us = clock_mono_us() + (int64_t)ms * 1000;
		}
	}
}

static void *dispatcher_main(void *arg)
{
	struct dispatcher *d = arg;
	int64_t next_claim_us = 0, stop_deadline_us = 0, next_prune_us = 0;

	pthread_setname_np(pthread_self(), "dispatch");

	for (;;) {
		int64_t now_us = clock_mono_us();
		int stopping = atomic_load(&d->stopping);

		if (stopping && !stop_deadline_us)
			stop_deadline_us = now_us + d->cfg.shutdown_grace_ms * 1000;
		if (stopping && now_us >= stop_deadline_us && (d->in_flight || d->token_fetches))
			abort_in_flight(d);
		if (now_us >= next_prune_us) {
			oauth_entries_prune(d, now_us / 1000);
			ss_prune(d, now_us / 1000);
			next_prune_us = now_us + OAUTH_PRUNE_US;
		}

		/* Take back what the side finished: written jobs, and the answer to a claim,
		 * whose deliveries start now. */
		int answered = 0, claim_rc = STORE_OK;
		struct store_claim *claims = NULL;
		size_t got = 0;
		int64_t due_hint_ms = -1;
		size_t written = side_exchange(d, &answered, &claim_rc, &claims, &got, &due_hint_ms);
		/* Retries due before the next claim (short intervals) are in the store once
		 * written: claim at their time, not at the idle poll. */
		if (written && d->soonest_retry_ms) {
			if (!d->claim_at_ms || d->soonest_retry_ms < d->claim_at_ms)
				d->claim_at_ms = d->soonest_retry_ms;
			d->soonest_retry_ms = 0;
		}
		if (answered) {
			size_t asked = d->claim_asked;
			d->claim_asked = 0;
			if (claim_rc != STORE_OK) {
				next_claim_us = now_us + 500 * 1000; /* store down: probe again soon */
			} else if (got == asked) {
				next_claim_us = now_us; /* more may be due */
			} else {
				next_claim_us = now_us + IDLE_POLL_MS * 1000; /* or the hint's time */
			}
			claims_start(d, claims, got);
		}
		if (due_hint_ms > 0) {
			int64_t wait_ms = due_hint_ms - clock_now_ms();
			if (wait_ms < 0)
				wait_ms = 0;
			if (now_us + wait_ms * 1000 < next_claim_us)
				next_claim_us = now_us + wait_ms * 1000;
		}

		/* Claim when woken or when due work may be waiting, and when there is room
		 * for a worthwhile batch (keeps batches large under load). Asked right after
		 * an answer, so the side claims the next batch while this one is sent; a
		 * claim asked counts as taken room until answered. */
		int room = d->cfg.max_in_flight - d->active - (int)d->claim_asked;
		int want = room < d->cfg.batch ? room : d->cfg.batch;
		int worth = d->active == 0 || want == d->cfg.batch || room >= d->cfg.max_in_flight / 4;
		if (atomic_exchange(&d->woken, 0) && !d->store_down)
			next_claim_us = now_us;
		int retry_due = d->claim_at_ms && clock_now_ms() >= d->claim_at_ms;
		if (!stopping && !d->claim_asked && want > 0 && worth &&
		    (now_us >= next_claim_us || retry_due)) {
			side_ask(d, (size_t)want);
			d->claim_asked = (size_t)want;
			if (retry_due)
				d->claim_at_ms = 0;
		}

		run_timers(d, now_us);
		metrics_in_flight(d->active);

		curl_run(d);
		read_completions(d);
		/* after the completions, which free places under max_in_flight */
		int64_t parked_wait_us = run_parked(d, clock_mono_us());

		/* What finished in this round goes to the side at once: it writes while
		 * curl works, and groups whatever queued up meanwhile. */
		now_us = clock_mono_us();
		if (d->done_count)
			side_give_done(d);

		if (stopping && d->active == 0 && !d->claim_asked)
			break;
		if (stopping && d->store_down && d->in_flight == 0 && d->token_fetches == 0 &&
		    !d->waiting && now_us >= stop_deadline_us) {
			log_error("dispatcher: store unavailable at shutdown; %zu results not written "
				  "(their deliveries will be sent again after the lease expires)",
				  side_unwritten(d));
			break;
		}

		/* Sleep until a socket is ready, a timer or claim is due, or a wake-up (the
		 * side answering is one). */
		int64_t claim_us = next_claim_us;
		if (d->claim_at_ms) {
			int64_t at_us = now_us + (d->claim_at_ms - clock_now_ms()) * 1000;
			if (at_us < claim_us)
				claim_us = at_us;
		}
		int64_t wait_us = claim_us > now_us ? claim_us - now_us : 0;
		if (d->active >= d->cfg.max_in_flight || stopping || !worth || d->claim_asked)
			wait_us = 100 * 1000;
		for (struct job *j = d->waiting; j; j = j->next)
			if (j->wake_us - now_us < wait_us)
				wait_us = j->wake_us > now_us ? j->wake_us - now_us : 0;
		if (parked_wait_us >= 0 && parked_wait_us < wait_us)
			wait_us = parked_wait_us;
		if (d->curl_due_us >= 0 && d->curl_due_us - now_us < wait_us)
			wait_us = d->curl_due_us > now_us ? d->curl_due_us - now_us : 0;
		/* epoll_wait even when something is due now: the sockets ready meanwhile */
		int n = epoll_wait(d->epfd, d->events, EPOLL_EVENTS,
				   wait_us > 0 ? (int)((wait_us + 999) / 1000) : 0);
		d->n_events = n > 0 ? n : 0;
	}

	/* Whatever is still done but unwritten could not be written; free it all. */
	side_stop(d);
	recycle_list(d, d->done_head);
	d->done_head = d->done_tail = NULL;
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
	d->side.results = calloc(FLUSH_MAX, sizeof(*d->side.results));
	pthread_mutex_init(&d->side.mu, NULL);
	pthread_cond_init(&d->side.cv, NULL);
	d->multi = curl_multi_init();
	d->epfd = epoll_create1(EPOLL_CLOEXEC);
	d->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	d->curl_due_us = -1;
	if (!d->jobs || !d->side.results || !d->multi || d->epfd < 0 || d->evfd < 0)
		goto fail;
	struct epoll_event wev = {.events = EPOLLIN, .data.fd = d->evfd};
	if (epoll_ctl(d->epfd, EPOLL_CTL_ADD, d->evfd, &wev))
		goto fail;
	curl_multi_setopt(d->multi, CURLMOPT_MAXCONNECTS, (long)cfg->max_in_flight);
	curl_multi_setopt(d->multi, CURLMOPT_SOCKETFUNCTION, curl_socket_cb);
	curl_multi_setopt(d->multi, CURLMOPT_SOCKETDATA, d);
	curl_multi_setopt(d->multi, CURLMOPT_TIMERFUNCTION, curl_timer_cb);
	curl_multi_setopt(d->multi, CURLMOPT_TIMERDATA, d);
	for (int i = cfg->max_in_flight - 1; i >= 0; i--) {
		d->jobs[i].d = d;
		d->jobs[i].next = d->free_list;
		d->free_list = &d->jobs[i];
	}
	if (pthread_create(&d->side.thread, NULL, side_main, d)) {
		log_error("dispatcher: cannot start thread");
		goto fail;
	}
	d->side.started = 1;
	if (pthread_create(&d->thread, NULL, dispatcher_main, d)) {
		log_error("dispatcher: cannot start thread");
		side_stop(d);
		goto fail;
	}
	pthread_mutex_lock(&circuit_mu);
	circuit_owner = d;
	pthread_mutex_unlock(&circuit_mu);
	return d;
fail:
	if (d->multi)
		curl_multi_cleanup(d->multi);
	if (d->epfd >= 0)
		close(d->epfd);
	if (d->evfd >= 0)
		close(d->evfd);
	free(d->jobs);
	free(d->side.results);
	free(d);
	return NULL;
}

/* Interrupts the dispatcher's epoll_wait (any thread; async-signal-safe). */
static void wake_fd(struct dispatcher *d)
{
	uint64_t one = 1;
	ssize_t r = write(d->evfd, &one, sizeof(one)); /* EAGAIN: already pending */
	(void)r;
}

void dispatcher_wake(struct dispatcher *d)
{
	atomic_store(&d->woken, 1);
	wake_fd(d);
}

void dispatcher_stop(struct dispatcher *d)
{
	if (!d)
		return;
	atomic_store(&d->stopping, 1);
	wake_fd(d);
	pthread_join(d->thread, NULL);
	while (d->oauth) {
		struct oauth2_entry *e = d->oauth;
		d->oauth = e->next;
		token_fetch_abort(d, e); /* a refresh ahead may outlive the last delivery */
		oauth2_cache_clear(&e->cache);
		free(e);
	}
	for (int i = 0; i < d->cfg.max_in_flight; i++) {
		struct job *j = &d->jobs[i];
		if (j->easy)
			curl_easy_cleanup(j->easy);
		headers_clear(j);
		free(j->hbuf);
		free(j->hnodes);
	}
	ss_free_all(d);
	curl_multi_cleanup(d->multi); /* may still call curl_socket_cb: epfd closes after */
	close(d->epfd);
	close(d->evfd);
	free(d->fd_state);
	free(d->jobs);
	free(d->side.results);
	free(d);
}
