/* sink_http.c: the HTTP member of the sink family (sink.h) — webhooks over libcurl.
 *
 * Owns everything HTTP about an attempt: the request (DESIGN §3 headers, signature,
 * auth, query credential), the libcurl multi handle and its sockets (an epoll set of its
 * own, which the dispatcher watches as one fd), OAuth2 tokens (one request per
 * subscription however many deliveries wait for it; oauth2.h has the cache rules; a
 * subscriber's 401 gets one new token and one resend within the same attempt), the
 * mapping of transport errors (core/errmap.h), and redaction: credentials never reach a
 * cause. It decides nothing about retries: each attempt ends with env->done.
 *
 * A job's HTTP state (struct http_job: the easy handle, header buffers) lives as long as
 * the dispatcher's job slot, so a kept-alive connection and the buffers are reused from
 * delivery to delivery without allocations. */
#include "deliver/sink.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/evp.h>

#include "core/errmap.h"
#include "core/retry.h"
#include "core/trace.h"
#include "deliver/oauth2.h"
#include "deliver/sign.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/log.h"

#define TOKEN_FORM_MAX 16384  /* token request bodies (credentials, scope, audience) */
#define OAUTH_IDLE_MS (3600 * 1000LL) /* a token cache unused this long is dropped */
#define REDACTED "********"
#define EPOLL_EVENTS 256      /* ready sockets taken per epoll_wait */

/* What CURLOPT_PRIVATE of an easy handle points at: the first member of either struct. */
enum transfer_kind { TRANSFER_DELIVERY, TRANSFER_TOKEN };

enum http_state { HTTP_IDLE, HTTP_IN_FLIGHT, HTTP_TOKEN_WAIT };

struct http_sink;
struct oauth2_entry;

/* One job slot's HTTP state (sink_job.state[slot]). */
struct http_job {
	enum transfer_kind transfer; /* TRANSFER_DELIVERY */
	struct http_sink *hs;
	struct sink_job *sj;         /* the job it belongs to */
	enum http_state state;
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
	size_t body_len;             /* response bytes kept in sj->cause */
	struct oauth2_entry *oauth;  /* oauth2: the subscription's token cache */
	uint64_t token_gen;          /* oauth2: generation of the token sent */
	int reauthed;                /* oauth2: this attempt got a new token after a 401 */
	struct http_job *next;       /* in an oauth2 entry's waiters */
	struct http_job *fly_prev, *fly_next; /* in http_sink.flying while HTTP_IN_FLIGHT */
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
 * gets a new entry, so no token outlives the credentials that obtained it). */
struct oauth2_entry {
	char sub_id[UUID_STR_LEN];
	uint64_t fingerprint;        /* oauth2_params_fingerprint */
	struct oauth2_cache cache;
	struct token_fetch *fetch;   /* in flight, or NULL */
	struct http_job *waiters;    /* HTTP_TOKEN_WAIT jobs; non-empty only while fetch runs */
	int64_t last_used_ms;        /* monotonic */
	int failing;                 /* the last request failed (logged once) */
	struct oauth2_entry *next;
};

struct http_sink {
	struct sink_env env;
	CURLM *multi;
	int epfd;                    /* curl's sockets */
	int64_t curl_due_us;         /* curl's timer (monotonic), -1 = none */
	int curl_timer_set;          /* the timer callback ran (see http_run) */
	struct epoll_event events[EPOLL_EVENTS];
	int n_events;
	uint8_t *fd_state;           /* FD_* by socket number (curl_socket_cb) */
	size_t fd_state_cap;
	int in_flight;               /* requests running */
	struct oauth2_entry *oauth;  /* token caches, few: one per oauth2 subscription */
	int token_fetches;           /* token requests in flight */
	struct http_job *flying;     /* the jobs with a request running (for abort) */
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

static void flying_add(struct http_job *h)
{
	struct http_sink *hs = h->hs;
	h->fly_prev = NULL;
	h->fly_next = hs->flying;
	if (hs->flying)
		hs->flying->fly_prev = h;
	hs->flying = h;
}

static void flying_remove(struct http_job *h)
{
	if (h->fly_prev)
		h->fly_prev->fly_next = h->fly_next;
	else
		h->hs->flying = h->fly_next;
	if (h->fly_next)
		h->fly_next->fly_prev = h->fly_prev;
	h->fly_prev = h->fly_next = NULL;
}

/* The attempt is over: hand it to the dispatcher. */
static void http_report(struct http_job *h)
{
	h->state = HTTP_IDLE;
	h->hs->env.done(h->hs->env.ctx, h->sj);
}

/* redact() with every credential the job's request carried. */
static void job_redact(const struct http_job *h, char *text, size_t size);

/* The attempt failed before a request was answered (no token, a failed token request):
 * the usual retries follow. */
static void http_failed(struct http_job *h, int code, const char *message, const char *cause)
{
	struct sink_job *sj = h->sj;
	sj->code = code;
	sj->retry_after_ms = -1;
	snprintf(sj->message, SINK_MSG_LEN, "%s", message);
	snprintf(sj->cause, SINK_CAUSE_LEN, "%s", cause ? cause : "");
	job_redact(h, sj->cause, SINK_CAUSE_LEN);
	http_report(h);
}

/* The request could not even be built: the round ends (another try would fail alike). */
static void http_fail_local(struct http_job *h, const char *why)
{
	struct sink_job *sj = h->sj;
	sj->code = errmap_code(TRANSPORT_OTHER);
	sj->retry_after_ms = -1;
	sj->end_round = 1;
	snprintf(sj->message, SINK_MSG_LEN, "request could not be built");
	snprintf(sj->cause, SINK_CAUSE_LEN, "%s", why);
	http_report(h);
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
	struct http_job *h = ctx;
	size_t len = size * nmemb;
	size_t room = SINK_CAUSE_LEN - 1 - h->body_len;
	size_t take = len < room ? len : room;
	memcpy(h->sj->cause + h->body_len, data, take);
	h->body_len += take;
	h->sj->cause[h->body_len] = '\0';
	return len; /* keep reading: the connection stays reusable */
}

/* Header lines are written into the job's own buffer and list nodes, reused from attempt
 * to attempt (curl reads CURLOPT_HTTPHEADER as a plain list and copies nothing), so an
 * attempt costs no allocation once a job has seen its largest headers. A line is at most
 * HEADER_LINE_MAX - 1 bytes. */
#define HEADER_LINE_MAX 8448

/* Wipes the header lines (they may carry credentials) and empties the list. */
static void headers_clear(struct http_job *h)
{
	if (h->hbuf_len)
		OPENSSL_cleanse(h->hbuf, h->hbuf_len);
	h->hbuf_len = 0;
	h->headers = NULL;
}

/* Makes room for need more bytes in hbuf. The old buffer is wiped: it may hold
 * credentials. */
static int hbuf_grow(struct http_job *h, size_t need)
{
	size_t cap = h->hbuf_cap ? h->hbuf_cap * 2 : 2048;
	while (cap < h->hbuf_len + need)
		cap *= 2;
	char *nb = malloc(cap);
	if (!nb)
		return -1;
	if (h->hbuf_len) {
		memcpy(nb, h->hbuf, h->hbuf_len);
		OPENSSL_cleanse(h->hbuf, h->hbuf_len);
	}
	free(h->hbuf);
	h->hbuf = nb;
	h->hbuf_cap = cap;
	return 0;
}

static int append_header(struct http_job *h, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int append_header(struct http_job *h, const char *fmt, ...)
{
	for (;;) {
		size_t room = h->hbuf_cap - h->hbuf_len;
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(room ? h->hbuf + h->hbuf_len : NULL, room, fmt, ap);
		va_end(ap);
		if (n < 0 || n >= HEADER_LINE_MAX)
			return -1;
		if ((size_t)n < room) {
			h->hbuf_len += (size_t)n + 1;
			return 0;
		}
		if (hbuf_grow(h, (size_t)n + 1))
			return -1;
	}
}

/* Appends "name: value" (value NULL: "name:", which tells curl to send no such header)
 * with plain copies: vsnprintf costs about a microsecond per call, and every attempt
 * sends ten lines. */
static int append_line(struct http_job *h, const char *name, const char *value)
{
	size_t nlen = strlen(name), vlen = value ? strlen(value) : 0;
	size_t need = nlen + 1 + (value ? 1 + vlen : 0) + 1;

	if (need - 1 >= HEADER_LINE_MAX) /* as append_header: the line without its NUL */
		return -1;
	if (h->hbuf_cap - h->hbuf_len < need && hbuf_grow(h, need))
		return -1;
	char *p = h->hbuf + h->hbuf_len;
	memcpy(p, name, nlen);
	p += nlen;
	*p++ = ':';
	if (value) {
		*p++ = ' ';
		memcpy(p, value, vlen);
		p += vlen;
	}
	*p = '\0';
	h->hbuf_len += need;
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

/* Links the lines of hbuf into hnodes: h->headers. */
static int headers_link(struct http_job *h)
{
	size_t lines = 0;
	for (size_t o = 0; o < h->hbuf_len; o += strlen(h->hbuf + o) + 1)
		lines++;
	if (lines > h->hnodes_cap) {
		size_t cap = lines < 16 ? 16 : lines * 2;
		struct curl_slist *nn = realloc(h->hnodes, cap * sizeof(*nn));
		if (!nn)
			return -1;
		h->hnodes = nn;
		h->hnodes_cap = cap;
	}
	size_t i = 0;
	for (size_t o = 0; o < h->hbuf_len; o += strlen(h->hbuf + o) + 1, i++) {
		h->hnodes[i].data = h->hbuf + o;
		h->hnodes[i].next = i + 1 < lines ? &h->hnodes[i + 1] : NULL;
	}
	h->headers = lines ? h->hnodes : NULL;
	return 0;
}

/* Replaces every occurrence of each of the n secrets (NULL and "" skipped) in text (a
 * NUL-terminated string in a buffer of size <= SINK_CAUSE_LEN bytes) with REDACTED, truncating
 * if the text grows. Subscribers echo requests in error bodies, and curl's messages may
 * quote a URL: whatever lands in a cause goes through here. */
static void redact(char *text, size_t size, const char *const *secrets, size_t n)
{
	char tmp[SINK_CAUSE_LEN];
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
static void job_redact(const struct http_job *h, char *text, size_t size)
{
	const struct subscription *s = h->sj->sub;
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
	for (const struct curl_slist *l = h->headers; l && n < 8; l = l->next) {
		if (strncasecmp(l->data, "Authorization:", 14) == 0) {
			const char *cred = strrchr(l->data, ' ');
			if (cred && strlen(cred + 1) >= 4)
				list[n++] = cred + 1;
		}
	}
	redact(text, size, list, n);
	curl_free(escaped);
}

/* The request headers of DESIGN §3 for the job's next attempt. bearer (borrowed) is the
 * oauth2 access token, NULL for other auth types. */
static int build_headers(struct http_job *h, int attempt_no, int64_t now_ms, const char *bearer)
{
	const struct subscription *s = h->sj->sub;
	const struct store_claim *c = h->sj->claim;
	int64_t ts = now_ms / 1000;
	char trace[TRACEPARENT_LEN];

	headers_clear(h);

	/* The producer's trace when it sent one, else one made from the event id; a new
	 * span for each attempt. */
	trace_child(c->traceparent, c->event_id,
		    (uint64_t)(rng_next(h->sj->rng) * 18446744073709551615.0), trace);

	const char *ctype = s->payload_format == PAYLOAD_BINARY ? "application/octet-stream"
								  : c->content_type;
	char ts_text[21], attempt_text[21];
	if (append_line(h, "Content-Type", ctype) || append_line(h, "webhook-id", c->event_id) ||
	    append_line(h, "webhook-timestamp", decimal(ts, ts_text)) ||
	    append_line(h, "outboxd-event-type", c->event_type) ||
	    append_line(h, "outboxd-delivery-id", c->delivery_id) ||
	    append_line(h, "outboxd-attempt", decimal(attempt_no, attempt_text)) ||
	    append_line(h, "traceparent", trace) || append_line(h, "User-Agent", "outboxd/0.1") ||
	    append_line(h, "Expect", NULL))
		goto fail;
	if (s->secret) {
		/* During a rotation's grace period the old secret signs too (DESIGN §3). */
		const char *prev = s->previous_secret && now_ms < s->previous_secret_until
					   ? s->previous_secret : NULL;
		char sig[SIGN_HEADER_LEN];
		if (sign_webhook_signature(s->secret, prev, c->event_id, ts, c->payload,
					   c->payload_len, sig) ||
		    append_line(h, "webhook-signature", sig))
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
		if (append_header(h, "Authorization: Basic %s", enc))
			goto fail;
		break;
	}
	case AUTH_BEARER:
		if (append_header(h, "Authorization: Bearer %s", s->auth_secret))
			goto fail;
		break;
	case AUTH_API_KEY:
		if (append_header(h, "%s: %s", s->auth_name, s->auth_secret))
			goto fail;
		break;
	case AUTH_OAUTH2:
		if (!bearer || append_header(h, "Authorization: Bearer %s", bearer))
			goto fail;
		break;
	default:
		break;
	}
	for (size_t i = 0; i < s->n_headers; i++)
		if (append_header(h, "%s: %s", s->headers[i].name, s->headers[i].value))
			goto fail;
	if (headers_link(h))
		goto fail;
	return 0;
fail:
	headers_clear(h);
	return -1;
}

/* The URL to call: the endpoint, plus ?param=value for query auth (URL-encoded). */
static const char *build_url(struct http_job *h)
{
	const struct subscription *s = h->sj->sub;
	if (s->auth_type != AUTH_QUERY)
		return s->endpoint;
	if (h->url)
		return h->url;
	char *name = curl_easy_escape(NULL, s->auth_name, 0);
	char *value = curl_easy_escape(NULL, s->auth_secret, 0);
	if (name && value) {
		size_t len = strlen(s->endpoint) + strlen(name) + strlen(value) + 3;
		h->url = malloc(len);
		if (h->url)
			snprintf(h->url, len, "%s%c%s=%s", s->endpoint,
				 strchr(s->endpoint, '?') ? '&' : '?', name, value);
	}
	curl_free(name);
	curl_free(value);
	return h->url;
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
	struct http_job *h = ctx;
	size_t len = size * nmemb;
	char value[64];
	int64_t ms;

	if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
		h->sj->retry_after_ms = -1;
	} else if (len > 12 && strncasecmp(data, "Retry-After:", 12) == 0 && len - 12 < sizeof(value)) {
		memcpy(value, data + 12, len - 12);
		value[len - 12] = '\0';
		if (retry_after_parse(value, clock_now_ms(), &ms) == 0)
			h->sj->retry_after_ms = ms;
	}
	return len;
}

/* Sends the attempt's request. bearer (borrowed, copied into the headers): the oauth2
 * access token, NULL for other auth types. */
static void http_send_request(struct http_job *h, const char *bearer)
{
	struct http_sink *hs = h->hs;
	const struct store_claim *c = h->sj->claim;
	const struct subscription *s = h->sj->sub;
	const char *url;

	if (build_headers(h, h->sj->attempt_no, clock_now_ms(), bearer)) {
		http_fail_local(h, "a header is too long or memory ran out");
		return;
	}
	if (!(url = build_url(h))) {
		http_fail_local(h, "the URL with the query credential could not be built");
		return;
	}
	if (!h->easy && !(h->easy = curl_easy_init())) {
		http_fail_local(h, "curl_easy_init failed");
		return;
	}
	CURL *e = h->easy;
	int tls = s->tls_ca_file || s->tls_client_cert;
	h->errbuf[0] = '\0';
	h->body_len = 0;
	h->sj->retry_after_ms = -1;
	h->sj->cause[0] = '\0';
	/* The options every request shares are set once per handle: a reset and a full
	 * set cost about as much as a small request's own work in curl. Only a handle
	 * that has carried or will carry per-subscription TLS files starts over. */
	if (!h->easy_ready || tls || h->easy_tls) {
		curl_easy_reset(e);
		easy_common(e, h, h->errbuf, body_cb);
		curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
		curl_easy_setopt(e, CURLOPT_HEADERDATA, h);
		curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
		h->easy_ready = 1;
		h->easy_tls = tls;
	}
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->payload);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->payload_len);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h->headers);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)h->sj->timeout_ms);
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
	CURLMcode mrc = curl_multi_add_handle(hs->multi, e);
	if (mrc != CURLM_OK) {
		http_fail_local(h, curl_multi_strerror(mrc));
		return;
	}
	h->state = HTTP_IN_FLIGHT;
	hs->in_flight++;
	flying_add(h);
}

/* ---- oauth2 tokens ------------------------------------------------------------------------ */

static struct oauth2_entry *oauth_entry_get(struct http_sink *hs, const struct subscription *s)
{
	uint64_t fp = oauth2_params_fingerprint(&s->oauth2);
	for (struct oauth2_entry *e = hs->oauth; e; e = e->next)
		if (e->fingerprint == fp && strcmp(e->sub_id, s->id) == 0)
			return e;
	struct oauth2_entry *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	memcpy(e->sub_id, s->id, UUID_STR_LEN);
	e->fingerprint = fp;
	e->next = hs->oauth;
	hs->oauth = e;
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
static void token_fetch_abort(struct http_sink *hs, struct oauth2_entry *e)
{
	if (!e->fetch)
		return;
	curl_multi_remove_handle(hs->multi, e->fetch->easy);
	token_fetch_free(e->fetch);
	e->fetch = NULL;
	e->cache.fetching = 0;
	hs->token_fetches--;
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
static void token_fetch_start(struct http_sink *hs, struct oauth2_entry *e,
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
	CURLMcode mrc = curl_multi_add_handle(hs->multi, c);
	if (mrc != CURLM_OK) {
		why = curl_multi_strerror(mrc);
		goto fail;
	}
	e->fetch = f;
	hs->token_fetches++;
	return;
fail:
	snprintf(cause, sizeof(cause), "%s: %s", f ? f->url_shown : "token request", why);
	token_fetch_free(f);
	oauth2_cache_fail(&e->cache, cause, clock_mono_ms());
}

static void http_token_failed(struct http_job *h, const char *cause)
{
	http_failed(h, errmap_code(TRANSPORT_OTHER), OAUTH2_FAILED_MESSAGE, cause);
}

/* Gets the attempt its credentials: at once for every auth type but oauth2, whose
 * deliveries use the cached token, start the one token request, or wait for it. */
static void http_authorize(struct http_job *h)
{
	struct http_sink *hs = h->hs;
	if (h->sj->sub->auth_type != AUTH_OAUTH2) {
		http_send_request(h, NULL);
		return;
	}
	struct oauth2_entry *e = h->oauth = oauth_entry_get(hs, h->sj->sub);
	if (!e) {
		http_token_failed(h, "out of memory");
		return;
	}
	int64_t now = clock_mono_ms();
	e->last_used_ms = now;
	enum oauth2_step step = oauth2_cache_next(&e->cache, now);
	if (step == OAUTH2_FETCH || step == OAUTH2_USE_AND_FETCH)
		token_fetch_start(hs, e, h->sj->sub, h->sj->timeout_ms);
	switch (step) {
	case OAUTH2_USE:
	case OAUTH2_USE_AND_FETCH:
		h->token_gen = e->cache.generation;
		http_send_request(h, e->cache.token);
		return;
	case OAUTH2_FETCH:
		if (!e->fetch) { /* it could not even start */
			http_token_failed(h, e->cache.failure);
			return;
		}
		/* fall through */
	case OAUTH2_WAIT:
		h->state = HTTP_TOKEN_WAIT;
		h->next = e->waiters;
		e->waiters = h;
		return;
	case OAUTH2_FAILED:
		http_token_failed(h, e->cache.failure);
		return;
	}
}

/* A token request finished: cache the token or the failure, then every delivery that
 * waited for it goes on. */
static void token_fetch_done(struct http_sink *hs, struct token_fetch *f, CURLcode rc)
{
	struct oauth2_entry *e = f->entry;
	char why[OAUTH2_FAILURE_LEN], detail[512];
	char *token = NULL;
	int64_t expires_in = -1;
	long status = 0;

	curl_multi_remove_handle(hs->multi, f->easy);
	hs->token_fetches--;
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

	struct http_job *w = e->waiters;
	e->waiters = NULL;
	while (w) {
		struct http_job *next = w->next;
		if (token) {
			/* straight from the cache, even when expires_in made it not reusable */
			w->token_gen = e->cache.generation;
			http_send_request(w, e->cache.token);
		} else {
			http_token_failed(w, e->cache.failure);
		}
		w = next;
	}
}

/* Drops token caches nobody used for OAUTH_IDLE_MS (deleted or changed subscriptions). A
 * job holds its entry for one request at most (timeouts <= 5 min), far less than that. */
static void oauth_entries_prune(struct http_sink *hs, int64_t now_ms)
{
	struct oauth2_entry **pp = &hs->oauth;
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
/* ---- curl's socket interface: curl's sockets in the sink's epoll set ---------------- */

/* What the epoll set holds for a socket: curl_socket_cb keeps a kept-alive connection
 * registered between requests (curl says REMOVE after each response and IN again for
 * the next request on it), so a request costs one epoll_ctl instead of three. */
enum { FD_UNKNOWN = 0, FD_WATCHED, FD_PARKED };

static int fd_state_grow(struct http_sink *hs, curl_socket_t s)
{
	if ((size_t)s < hs->fd_state_cap)
		return 0;
	size_t cap = hs->fd_state_cap ? hs->fd_state_cap : 256;
	while (cap <= (size_t)s)
		cap *= 2;
	uint8_t *grown = realloc(hs->fd_state, cap);
	if (!grown)
		return -1;
	memset(grown + hs->fd_state_cap, FD_UNKNOWN, cap - hs->fd_state_cap);
	hs->fd_state = grown;
	hs->fd_state_cap = cap;
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
	struct http_sink *hs = ctx;
	if (s < 0 || fd_state_grow(hs, s)) {
		log_error("http sink: no room to track connection %d", (int)s);
		return -1;
	}
	if (what == CURL_POLL_REMOVE) {
		if (hs->fd_state[s] == FD_WATCHED)
			hs->fd_state[s] = FD_PARKED;
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
	int op = hs->fd_state[s] == FD_UNKNOWN ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
	if (epoll_ctl(hs->epfd, op, s, &ev) == 0 ||
	    (op == EPOLL_CTL_MOD && errno == ENOENT && epoll_ctl(hs->epfd, EPOLL_CTL_ADD, s, &ev) == 0) ||
	    (op == EPOLL_CTL_ADD && errno == EEXIST && epoll_ctl(hs->epfd, EPOLL_CTL_MOD, s, &ev) == 0)) {
		hs->fd_state[s] = FD_WATCHED;
		return 0;
	}
	hs->fd_state[s] = FD_UNKNOWN;
	log_error("http sink: epoll_ctl on a connection failed (errno %d)", errno);
	return -1; /* curl fails the transfers on this socket */
}

/* CURLMOPT_TIMERFUNCTION: curl wants curl_multi_socket_action(CURL_SOCKET_TIMEOUT) in
 * timeout_ms (0: at once), or no timeout (-1). */
static int curl_timer_cb(CURLM *multi, long timeout_ms, void *ctx)
{
	(void)multi;
	struct http_sink *hs = ctx;
	hs->curl_due_us = timeout_ms < 0 ? -1 : clock_mono_us() + (int64_t)timeout_ms * 1000;
	hs->curl_timer_set = 1;
	return 0;
}


/* ---- completions ----------------------------------------------------------------------------- */

/* A request finished: the attempt's outputs, or a resend with a new token. */
static void http_completed(struct http_job *h, CURLcode rc)
{
	struct http_sink *hs = h->hs;
	struct sink_job *sj = h->sj;
	long status = 0;

	curl_multi_remove_handle(hs->multi, h->easy);
	hs->in_flight--;
	flying_remove(h);
	enum transport_error te = classify(rc, h->errbuf);
	if (te == TRANSPORT_OK)
		curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &status);
	/* A refused token (revoked, rotated early, clock skew): one new token and one resend
	 * within the same attempt; a second 401 is the attempt's answer. */
	if (status == 401 && sj->sub->auth_type == AUTH_OAUTH2 && !h->reauthed) {
		h->reauthed = 1;
		oauth2_cache_invalidate(&h->oauth->cache, h->token_gen);
		http_authorize(h);
		return;
	}
	if (te == TRANSPORT_OK) {
		sj->code = (int)status;
		snprintf(sj->message, SINK_MSG_LEN, "HTTP %ld%s", status,
			 h->reauthed ? " (with a new oauth2 token after HTTP 401)" : "");
		if (retry_is_success(sj->code))
			sj->cause[0] = '\0'; /* keep no body for successes */
	} else {
		sj->code = errmap_code(te);
		snprintf(sj->message, SINK_MSG_LEN, "%s", errmap_message(te));
		snprintf(sj->cause, SINK_CAUSE_LEN, "%s",
			 h->errbuf[0] ? h->errbuf : curl_easy_strerror(rc));
	}
	job_redact(h, sj->cause, SINK_CAUSE_LEN);
	http_report(h);
}

static void read_completions(struct http_sink *hs)
{
	CURLMsg *m;
	int left;
	while ((m = curl_multi_info_read(hs->multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		void *owner = NULL;
		CURLcode rc = m->data.result;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&owner);
		/* m is invalid once its handle is removed: rc is read before */
		if (*(enum transfer_kind *)owner == TRANSFER_TOKEN)
			token_fetch_done(hs, owner, rc);
		else
			http_completed(owner, rc);
	}
}

/* ---- the sink interface ------------------------------------------------------------------- */

static int http_accepts(const char *endpoint)
{
	return strncasecmp(endpoint, "http://", 7) == 0 || strncasecmp(endpoint, "https://", 8) == 0;
}

static void http_attach(void *priv, const struct sink_env *env)
{
	struct http_sink *hs = priv;
	hs->env = *env;
}

/* The job's HTTP state, made on its first HTTP attempt; NULL when out of memory. */
static struct http_job *http_job_get(struct http_sink *hs, struct sink_job *sj)
{
	struct http_job *h = sj->state[hs->env.slot];
	if (!h) {
		if (!(h = calloc(1, sizeof(*h))))
			return NULL;
		h->transfer = TRANSFER_DELIVERY;
		h->hs = hs;
		h->sj = sj;
		sj->state[hs->env.slot] = h;
	}
	return h;
}

static void http_send(void *priv, struct sink_job *sj)
{
	struct http_sink *hs = priv;
	struct http_job *h = http_job_get(hs, sj);
	if (!h) {
		sj->code = errmap_code(TRANSPORT_OTHER);
		sj->retry_after_ms = -1;
		sj->end_round = 1;
		snprintf(sj->message, SINK_MSG_LEN, "request could not be built");
		snprintf(sj->cause, SINK_CAUSE_LEN, "out of memory");
		hs->env.done(hs->env.ctx, sj);
		return;
	}
	h->reauthed = 0;
	sj->retry_after_ms = -1;
	sj->end_round = 0;
	sj->cause[0] = '\0';
	http_authorize(h);
}

static int http_fd(void *priv)
{
	return ((struct http_sink *)priv)->epfd;
}

/* Hands curl the sockets that are ready, then its timeout when due, then reads what
 * finished. */
static void http_run(void *priv)
{
	struct http_sink *hs = priv;
	int running = 0;
	int n = epoll_wait(hs->epfd, hs->events, EPOLL_EVENTS, 0);
	for (int i = 0; i < n; i++) {
		const struct epoll_event *ev = &hs->events[i];
		if ((size_t)ev->data.fd < hs->fd_state_cap && hs->fd_state[ev->data.fd] == FD_PARKED) {
			/* curl does not wait on it: stop hearing about it */
			epoll_ctl(hs->epfd, EPOLL_CTL_DEL, ev->data.fd, NULL);
			hs->fd_state[ev->data.fd] = FD_UNKNOWN;
			continue;
		}
		int mask = 0;
		if (ev->events & EPOLLIN)
			mask |= CURL_CSELECT_IN;
		if (ev->events & EPOLLOUT)
			mask |= CURL_CSELECT_OUT;
		if (ev->events & (EPOLLERR | EPOLLHUP))
			mask |= CURL_CSELECT_ERR;
		curl_multi_socket_action(hs->multi, ev->data.fd, mask, &running);
	}
	if (hs->curl_due_us >= 0 && clock_mono_us() >= hs->curl_due_us) {
		hs->curl_due_us = -1;
		hs->curl_timer_set = 0;
		curl_multi_socket_action(hs->multi, CURL_SOCKET_TIMEOUT, 0, &running);
		/* curl calls the timer function only when its next timeout changed: if it did
		 * not (we were early by its clock), ask it. */
		if (!hs->curl_timer_set) {
			long ms = -1;
			if (curl_multi_timeout(hs->multi, &ms) == CURLM_OK && ms >= 0)
				hs->curl_due_us = clock_mono_us() + (int64_t)ms * 1000;
		}
	}
	read_completions(hs);
}

static int64_t http_wait_us(void *priv, int64_t now_us)
{
	struct http_sink *hs = priv;
	if (hs->curl_due_us < 0)
		return -1;
	return hs->curl_due_us > now_us ? hs->curl_due_us - now_us : 0;
}

static int http_busy(void *priv)
{
	struct http_sink *hs = priv;
	return hs->in_flight + hs->token_fetches;
}

/* Stops every running request and token request; the deliveries in them and those
 * waiting for a token are handed back undecided. */
static void http_abort(void *priv)
{
	struct http_sink *hs = priv;
	for (struct oauth2_entry *e = hs->oauth; e; e = e->next) {
		token_fetch_abort(hs, e);
		struct http_job *w = e->waiters;
		e->waiters = NULL;
		while (w) {
			struct http_job *next = w->next;
			w->state = HTTP_IDLE;
			hs->env.abandoned(hs->env.ctx, w->sj);
			w = next;
		}
	}
	while (hs->flying) {
		struct http_job *h = hs->flying;
		flying_remove(h);
		curl_multi_remove_handle(hs->multi, h->easy);
		hs->in_flight--;
		h->state = HTTP_IDLE;
		hs->env.abandoned(hs->env.ctx, h->sj);
	}
}

/* The round is over: forget its query URL and token cache, wipe its header lines. */
static void http_round_end(void *priv, struct sink_job *sj)
{
	struct http_sink *hs = priv;
	struct http_job *h = sj->state[hs->env.slot];
	if (!h)
		return;
	headers_clear(h);
	free(h->url);
	h->url = NULL;
	h->oauth = NULL;
}

static void http_job_free(void *priv, struct sink_job *sj)
{
	struct http_sink *hs = priv;
	struct http_job *h = sj->state[hs->env.slot];
	if (!h)
		return;
	if (h->state == HTTP_IN_FLIGHT) {
		curl_multi_remove_handle(hs->multi, h->easy);
		flying_remove(h);
	}
	if (h->easy)
		curl_easy_cleanup(h->easy);
	headers_clear(h);
	free(h->url);
	free(h->hbuf);
	free(h->hnodes);
	free(h);
	sj->state[hs->env.slot] = NULL;
}

static void http_prune(void *priv, int64_t now_ms)
{
	oauth_entries_prune(priv, now_ms);
}

static void http_close(void *priv)
{
	struct http_sink *hs = priv;
	while (hs->oauth) {
		struct oauth2_entry *e = hs->oauth;
		hs->oauth = e->next;
		token_fetch_abort(hs, e); /* a refresh ahead may outlive the last delivery */
		oauth2_cache_clear(&e->cache);
		free(e);
	}
	curl_multi_cleanup(hs->multi); /* may still call curl_socket_cb: epfd closes after */
	close(hs->epfd);
	free(hs->fd_state);
	free(hs);
}

static const struct sink_ops http_ops = {
	.name = "http",
	.accepts = http_accepts,
	.attach = http_attach,
	.send = http_send,
	.fd = http_fd,
	.run = http_run,
	.wait_us = http_wait_us,
	.busy = http_busy,
	.abort = http_abort,
	.round_end = http_round_end,
	.job_free = http_job_free,
	.prune = http_prune,
	.close = http_close,
};

struct sink *sink_http_open(int max_connections, char *err, size_t errlen)
{
	struct sink *s = calloc(1, sizeof(*s));
	struct http_sink *hs = calloc(1, sizeof(*hs));
	if (!s || !hs)
		goto fail;
	hs->curl_due_us = -1;
	hs->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (hs->epfd < 0 || !(hs->multi = curl_multi_init()))
		goto fail;
	curl_multi_setopt(hs->multi, CURLMOPT_MAXCONNECTS, (long)max_connections);
	curl_multi_setopt(hs->multi, CURLMOPT_SOCKETFUNCTION, curl_socket_cb);
	curl_multi_setopt(hs->multi, CURLMOPT_SOCKETDATA, hs);
	curl_multi_setopt(hs->multi, CURLMOPT_TIMERFUNCTION, curl_timer_cb);
	curl_multi_setopt(hs->multi, CURLMOPT_TIMERDATA, hs);
	s->ops = &http_ops;
	s->priv = hs;
	return s;
fail:
	snprintf(err, errlen, "http sink: cannot set up curl multi or epoll (errno %d)", errno);
	if (hs && hs->epfd > 0)
		close(hs->epfd);
	free(hs);
	free(s);
	return NULL;
}

void sink_close(struct sink *s)
{
	if (!s)
		return;
	s->ops->close(s->priv);
	free(s);
}
