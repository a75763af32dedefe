/* http_request.c: builds one attempt's HTTP request for the HTTP sink — the Standard
 * Webhooks headers (webhook-id, timestamp, signature) and traceparent, the subscription's headers
 * and auth (basic, bearer, api key, query credential, mutual TLS files), the URL — and
 * the redaction that keeps those credentials out of every cause.
 *
 * Must not allocate per attempt once a round slot's buffers have grown, nor decide
 * anything about retries. */
#include "deliver/sink_http_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/crypto.h>


#include "core/header.h"
#include "core/metrics.h"
#include "core/retry.h"
#include "core/trace.h"
#include "deliver/sign.h"
#include "util/base64.h"
#include "util/clock.h"
#include "util/fmt.h"
#include "util/log.h"
#include "util/path.h"

/* Header lines are written into the round's own buffer and list nodes, reused from attempt
 * to attempt (curl reads CURLOPT_HTTPHEADER as a plain list and copies nothing), so an
 * attempt costs no allocation once a round has seen its largest headers. A line is at most
 * HEADER_LINE_MAX - 1 bytes. */
#define HEADER_LINE_MAX 8448

/* Wipes the header lines (they may carry credentials) and empties the list. */
void http_headers_clear(struct http_round *h)
{
	if (h->hbuf_len)
		OPENSSL_cleanse(h->hbuf, h->hbuf_len);
	h->hbuf_len = 0;
	h->headers = NULL;
}

/* Makes room for need more bytes in hbuf. The old buffer is wiped: it may hold
 * credentials. */
static int hbuf_grow(struct http_round *h, size_t need)
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

static int append_header(struct http_round *h, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int append_header(struct http_round *h, const char *fmt, ...)
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
static int append_line(struct http_round *h, const char *name, const char *value)
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

/* Links the lines of hbuf into hnodes: h->headers. Returns 0, -1 when memory ran out,
 * or -2 when a line holds a control character (core/header.h): the API, the intake and
 * the Kafka envelopes refuse such values, and this keeps what came another way (a
 * producer's outbox row, a stored subscription older than that rule) from ever
 * reaching a receiver as a header of its own. */
static int headers_link(struct http_round *h)
{
	size_t lines = 0;
	for (size_t o = 0, len; o < h->hbuf_len; o += len + 1) {
		len = strlen(h->hbuf + o);
		if (!header_value_valid(h->hbuf + o, len))
			return -2;
		lines++;
	}
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

/* Replaces every credential the round's request carried, in every encoding it travels
 * in (redact.h), in text (size bytes): the subscription's and the access token of its
 * Authorization line. Subscribers echo requests in error bodies, and curl's messages may
 * quote a URL: whatever lands in a cause goes through here. */
void http_redact(const struct http_round *h, char *text, size_t size)
{
	struct redact_set r;

	if (!text[0])
		return;
	redact_init(&r);
	int rc = redact_add_subscription(&r, h->sj->sub);
	for (const struct curl_slist *l = h->headers; l; l = l->next) {
		if (strncasecmp(l->data, "Authorization:", 14) == 0) {
			const char *cred = strrchr(l->data, ' ');
			if (cred)
				rc |= redact_add_secret(&r, cred + 1);
		}
	}
	if (rc)
		text[0] = '\0'; /* out of memory: nothing shown beats a credential shown */
	else
		redact_apply(&r, text, size);
	redact_clear(&r);
}

/* The request headers for the round's next attempt: Standard Webhooks', outboxd's, the
 * auth and the subscription's own. bearer (borrowed) is the oauth2 access token, NULL for
 * other auth types. Returns 0, -1 (a line too long, or memory), or -2 (a control
 * character in a value: see headers_link). */
static int build_headers(struct http_round *h, int attempt_no, int64_t now_ms, const char *bearer)
{
	const struct subscription *s = h->sj->sub;
	const struct store_claim *c = h->sj->claim;
	int64_t ts = now_ms / 1000;
	char trace[TRACEPARENT_LEN];

	http_headers_clear(h);

	/* The producer's trace when it sent one, else one made from the event id; a new
	 * span for each attempt. */
	trace_child(c->traceparent, c->event_id, h->sj->span_id, trace);

	const char *ctype = s->payload_format == PAYLOAD_BINARY ? "application/octet-stream"
								  : c->content_type;
	char ts_text[FMT_U64_LEN], attempt_text[FMT_U64_LEN];
	/* webhook-id: the event's id upstream when it came with one (an envelope's
	 * event.id), so the receiver sees one id for one event across hops */
	const char *webhook_id = store_claim_webhook_id(c);
	const char *ts_digits = fmt_u64((uint64_t)(ts > 0 ? ts : 0), ts_text);
	const char *attempt_digits = fmt_u64((uint64_t)(attempt_no > 0 ? attempt_no : 0),
					     attempt_text);
	if (append_line(h, "Content-Type", ctype) || append_line(h, "webhook-id", webhook_id) ||
	    append_line(h, "webhook-timestamp", ts_digits) ||
	    append_line(h, "outboxd-event-type", c->event_type) ||
	    append_line(h, "outboxd-delivery-id", c->delivery_id) ||
	    append_line(h, "outboxd-attempt", attempt_digits) ||
	    append_line(h, "traceparent", trace) || append_line(h, "User-Agent", "outboxd/0.1") ||
	    append_line(h, "Expect", NULL))
		goto fail;
	if (s->secret) {
		/* During a rotation's grace period the old secret signs too. */
		const char *prev = s->previous_secret && now_ms < s->previous_secret_until
					   ? s->previous_secret : NULL;
		char sig[SIGN_HEADER_LEN];
		if (sign_webhook_signature(s->secret, prev, webhook_id, ts, c->payload,
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
		base64_encode(plain, (size_t)n, enc);
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
	int rc = headers_link(h);
	if (rc == 0)
		return 0;
	http_headers_clear(h);
	return rc;
fail:
	http_headers_clear(h);
	return -1;
}

/* The URL to call: the endpoint, plus ?param=value for query auth (URL-encoded). */
static const char *build_url(struct http_round *h)
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


/* CURLOPT_OPENSOCKETFUNCTION: every connection of a delivery or token request is opened
 * here, after DNS resolution, to the address checked (core/ssrf.h): no rebinding window.
 * Behind the egress proxy every socket goes to the proxy, and the target's address was
 * checked before (http_proxy.c). */
static curl_socket_t guard_open_cb(void *ctx, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct http_guard *g = ctx;
	const char *class = g->via_proxy ? NULL : ssrf_refused(g->policy, &a->addr);

	if (class) {
		char ip[64];
		snprintf(g->refused, sizeof(g->refused), "%s address %s", class,
			 ssrf_address_text(&a->addr, ip, sizeof(ip)));
		return CURL_SOCKET_BAD;
	}
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

/* What every request of the dispatcher sets: a POST, no signals, no redirects, HTTP(S)
 * only, errors into errbuf, the body to write_cb; owner is CURLOPT_PRIVATE and the
 * write callback's data (a struct round or a struct token_fetch). */
void http_easy_common(const struct http_sink *hs, CURL *e, void *owner, char *errbuf,
		      curl_write_callback write_cb, struct http_guard *guard)
{
	curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, guard_open_cb);
	curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, guard);
	/* A proxy from the environment would make the guard check the proxy, not the
	 * target: deliveries connect directly, or through the egress proxy set. */
	curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
	http_proxy_options(hs, e, guard);
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
	struct http_round *h = ctx;
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

/* CURLOPT_PREREQFUNCTION: connected (TLS done), the request is about to be written: it
 * has reached the receiver from here, and its timeout starts. A second call in the same
 * transfer is libcurl writing the request again on a new connection, which it does on
 * its own when a kept-alive one closed before any byte of an answer: the receiver may
 * have read the first copy, so the attempt says so (struct http_round.resent). */
static int prereq_cb(void *ctx, char *primary_ip, char *local_ip, int primary_port,
		     int local_port)
{
	struct http_round *h = ctx;
	(void)primary_ip;
	(void)local_ip;
	(void)primary_port;
	(void)local_port;
	h->wrote = 1;
	if (h->prereqs++)
		http_resent(h);
	if (h->sj->timeout_ms > 0 &&
	    dheap_set(&h->hs->answers, &h->answer_by, clock_mono_us() + h->sj->timeout_ms * 1000))
		log_warn("http: out of memory: an attempt keeps libcurl's own timeout");
	return CURL_PREREQFUNC_OK;
}

/* Hands the round's request to libcurl's multi; counted: it is in flight already
 * (it waited for the egress proxy's lookup). */
static void transfer_add(struct http_round *h, int counted)
{
	struct http_sink *hs = h->hs;
	CURLMcode mrc = curl_multi_add_handle(hs->multi, h->easy);
	if (mrc != CURLM_OK) {
		if (counted)
			http_transfer_done(h);
		http_fail_local(h, curl_multi_strerror(mrc));
		return;
	}
	metrics_http_request(0);
	h->prereqs = 0;
	h->state = HTTP_IN_FLIGHT;
	if (!counted) {
		hs->in_flight++;
		http_flying_add(h);
	}
}

/* The lookup the round waited for ended (proxy_wait.resume). */
static void proxy_resumed(struct http_sink *hs, struct proxy_wait *w, enum transport_error te,
			  const char *failure)
{
	struct http_round *h = (struct http_round *)((char *)w - offsetof(struct http_round, pwait));
	char why[160];
	if (failure) {
		http_transfer_done(h);
		http_finish(h, te, 0, failure);
		return;
	}
	switch (http_proxy_prepare(hs, h->easy, build_url(h), &h->guard, &h->connect_to, w, why,
				   sizeof(why))) {
	case PROXY_GO:
		transfer_add(h, 1);
		return;
	case PROXY_WAIT: /* what it found could not be kept: it looks again */
		return;
	case PROXY_REFUSED:
		http_transfer_done(h);
		http_finish(h, TRANSPORT_REFUSED, 0, "refused by the SSRF guard");
		return;
	case PROXY_FAILED:
		http_transfer_done(h);
		http_fail_local(h, why);
		return;
	}
}

/* The API refuses TLS files outside tls_dir (util/path.h), and a subscription stored
 * before the setting was set, or whose file moved out since, is held to it whenever a
 * connection reads its files: the resolution of every path costs a few system calls per
 * component, so it is made for a new connection, not for each request. */
int http_tls_files_inside(const struct http_round *h)
{
	const struct subscription *s = h->sj->sub;
	const char *files[] = {s->tls_ca_file, s->tls_client_cert, s->tls_client_key};
	for (size_t i = 0; i < 3; i++)
		if (files[i] && !path_readable_inside(h->hs->tls_dir, files[i]))
			return 0;
	return 1;
}

void http_fail_tls_outside(struct http_round *h)
{
	http_fail_refused(h, "a TLS file of the subscription (tls.ca_file, tls.client_cert, "
			     "tls.client_key) is not a file outboxd can read inside the tls_dir "
			     "directory");
}

/* Sends the attempt's request. bearer (borrowed, copied into the headers): the oauth2
 * access token, NULL for other auth types. */
void http_send_request(struct http_round *h, const char *bearer)
{
	struct http_sink *hs = h->hs;
	const struct store_claim *c = h->sj->claim;
	const struct subscription *s = h->sj->sub;
	const char *url;

	int built = build_headers(h, h->sj->attempt_no, clock_now_ms(), bearer);
	if (built == -2) {
		http_fail_refused(h, "a header value holds a control character (CR, LF, NUL, ...): "
				     "the event's type or content type, or the subscription's");
		return;
	}
	if (built) {
		http_fail_local(h, "a header is too long or memory ran out");
		return;
	}
	if (!(url = build_url(h))) {
		http_fail_local(h, "the URL with the query credential could not be built");
		return;
	}
	h->errbuf[0] = '\0';
	h->guard.refused[0] = '\0';
	h->body_len = 0;
	h->sj->retry_after_ms = -1;
	h->sj->cause[0] = '\0';
	if (hs->wire && wire_send(hs->wire, h, url))
		return; /* to a known address: the lean client (http_wire.c) checks the TLS
			 * files when it opens a connection */
	/* libcurl may open a connection for any request */
	if (!http_tls_files_inside(h)) {
		http_fail_tls_outside(h);
		return;
	}
	if (!h->easy && !(h->easy = curl_easy_init())) {
		http_fail_local(h, "curl_easy_init failed");
		return;
	}
	CURL *e = h->easy;
	int tls = s->tls_ca_file || s->tls_client_cert;
	/* The options every request shares are set once per handle: a reset and a full
	 * set cost about as much as a small request's own work in curl. Only a handle
	 * that has carried or will carry per-subscription TLS files starts over. */
	if (!h->easy_ready || tls || h->easy_tls) {
		curl_easy_reset(e);
		h->guard.policy = h->hs->ssrf;
		http_easy_common(hs, e, h, h->errbuf, http_body_cb, &h->guard);
		curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, header_cb);
		curl_easy_setopt(e, CURLOPT_HEADERDATA, h);
		curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
		curl_easy_setopt(e, CURLOPT_SHARE, h->pool);
		curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, prereq_cb);
		curl_easy_setopt(e, CURLOPT_PREREQDATA, h);
		h->easy_ready = 1;
		h->easy_tls = tls;
	}
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->payload);
	curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)c->payload_len);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h->headers);
	/* The connect (TLS included) has the sink's connect_timeout; the attempt's own
	 * timeout runs from when the request is written (prereq_cb arms it, sink_http.c
	 * enforces it); libcurl's total is only the sum of both, a backstop. */
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)hs->connect_timeout_ms);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(hs->connect_timeout_ms + h->sj->timeout_ms));
	/* Peer and host verification stay on (curl's default); a subscription can only name
	 * the CA that verifies its endpoint, and the certificate that proves who we are. Its
	 * CA file replaces the default authorities, the directory of them included, as the
	 * lean client's does (http_tls.c). */
	if (s->tls_ca_file) {
		curl_easy_setopt(e, CURLOPT_CAINFO, s->tls_ca_file);
		curl_easy_setopt(e, CURLOPT_CAPATH, NULL);
	}
	if (s->tls_client_cert) {
		curl_easy_setopt(e, CURLOPT_SSLCERT, s->tls_client_cert);
		curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
		curl_easy_setopt(e, CURLOPT_SSLKEY, s->tls_client_key ? s->tls_client_key
								       : s->tls_client_cert);
	}
	h->start_us = clock_mono_us();
	if (hs->proxy) {
		char why[160];
		switch (http_proxy_prepare(hs, e, url, &h->guard, &h->connect_to, &h->pwait, why,
					   sizeof(why))) {
		case PROXY_GO:
			break;
		case PROXY_WAIT: /* in flight already: abort and the slot's end find it */
			h->pwait.resume = proxy_resumed;
			h->state = HTTP_RESOLVING;
			hs->in_flight++;
			http_flying_add(h);
			return;
		case PROXY_REFUSED:
			http_finish(h, TRANSPORT_REFUSED, 0, "refused by the SSRF guard");
			return;
		case PROXY_FAILED:
			http_fail_local(h, why);
			return;
		}
	}
	transfer_add(h, 0);
}
