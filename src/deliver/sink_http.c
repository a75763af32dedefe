/* sink_http.c: the HTTP member of the sink family (sink.h) — webhooks over libcurl.
 *
 * Owns everything HTTP about an attempt: the request (Standard Webhooks headers, signature,
 * auth, query credential), the libcurl multi handle and its sockets (an epoll set of its
 * own, which the dispatcher watches as one fd), OAuth2 tokens (one request per
 * subscription however many deliveries wait for it; oauth2.h has the cache rules; a
 * subscriber's 401 gets one new token and one resend within the same attempt), the
 * mapping of transport errors (core/errmap.h), and redaction: credentials never reach a
 * cause. It decides nothing about retries: each attempt ends with env->done.
 *
 * A round's HTTP state (struct http_round: the easy handle, header buffers) lives as long as
 * the dispatcher's round slot, so a kept-alive connection and the buffers are reused from
 * delivery to delivery without allocations.
 *
 * This file: the sink interface, libcurl's multi handle and its sockets, completions;
 * requests are built in http_request.c and sent by the lean client of http_wire.c (TLS:
 * http_tls.c) when it can, OAuth2 tokens fetched in http_token.c, and everything goes
 * through the egress proxy with http_proxy.c when one is set. */
#include "deliver/sink_http_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "core/concurrency.h"
#include "core/config.h"
#include "core/metrics.h"
#include "core/retry.h"
#include "core/trace.h"
#include "deliver/sign.h"
#include "util/clock.h"
#include "util/fmt.h"
#include "util/log.h"

/* ---- small helpers ------------------------------------------------------------------ */

void http_flying_add(struct http_round *h)
{
	struct http_sink *hs = h->hs;
	h->fly_prev = NULL;
	h->fly_next = hs->flying;
	if (hs->flying)
		hs->flying->fly_prev = h;
	hs->flying = h;
}

void http_flying_remove(struct http_round *h)
{
	if (h->fly_prev)
		h->fly_prev->fly_next = h->fly_next;
	else
		h->hs->flying = h->fly_next;
	if (h->fly_next)
		h->fly_next->fly_prev = h->fly_prev;
	h->fly_prev = h->fly_next = NULL;
}

/* The attempt's request went out twice (struct http_round.resent): said in its cause,
 * after what the cause holds (a success keeps none), so the history shows the request a
 * receiver may have had twice (outboxd_http_resent_total counts them too). */
static void note_resent(char *cause)
{
	static const char note[] =
		"the request was written again on a new connection: the kept-alive one it went out "
		"on first closed before any byte of an answer (a receiver that had read it got it "
		"twice)";
	size_t len = strlen(cause);
	if (len && len + 2 + sizeof(note) > SINK_CAUSE_LEN)
		return; /* a whole KiB of body: the metric counts it */
	if (len) {
		memcpy(cause + len, "; ", 2);
		len += 2;
	}
	memcpy(cause + len, note, sizeof(note));
}

void http_resent(struct http_round *h)
{
	h->resent = 1;
	metrics_http_resend();
}

/* The attempt is over: hand it to the dispatcher. */
void http_report(struct http_round *h)
{
	struct sink_round *sj = h->sj;
	h->state = HTTP_IDLE;
	/* a request written to a connection that closed may have been read before it did */
	sj->sent = h->wrote || h->resent;
	if (h->resent)
		note_resent(sj->cause);
	sj->local = h->local;
	if (h->answer_real_us > h->start_real_us && h->start_real_us)
		sj->latency_us = h->answer_real_us - h->start_real_us;
	else if (h->start_us)
		sj->latency_us = clock_mono_us() - h->start_us;
	h->hs->env.done(h->hs->env.ctx, sj);
}

/* The attempt failed before a request was answered (no token, a failed token request):
 * the usual retries follow. */
void http_failed(struct http_round *h, int code, const char *message, const char *cause)
{
	struct sink_round *sj = h->sj;
	sj->code = code;
	sj->retry_after_ms = -1;
	snprintf(sj->message, SINK_MSG_LEN, "%s", message);
	snprintf(sj->cause, SINK_CAUSE_LEN, "%s", cause ? cause : "");
	http_redact(h, sj->cause, SINK_CAUSE_LEN);
	http_report(h);
}

/* The request could not even be built: the round ends (another try would fail alike). */
void http_fail_local(struct http_round *h, const char *why)
{
	struct sink_round *sj = h->sj;
	sj->code = errmap_code(TRANSPORT_OTHER);
	sj->retry_after_ms = -1;
	sj->end_round = 1;
	snprintf(sj->message, SINK_MSG_LEN, "request could not be built");
	snprintf(sj->cause, SINK_CAUSE_LEN, "%s", why);
	http_report(h);
}

/* The request must never be made as the subscription or event stands (a header value
 * with a control character, a TLS file outside tls_dir): no retry can change that, so
 * the delivery goes to the dead-letter queue at once. */
void http_fail_refused(struct http_round *h, const char *why)
{
	h->sj->permanent = 1;
	http_fail_local(h, why);
}

/* errbuf: curl's message, which tells a TLS alert after the handshake (a TLS 1.3 server
 * refusing our client certificate) from other receive errors. */
enum transport_error http_classify(CURLcode rc, const char *errbuf)
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

size_t http_body_cb(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct http_round *h = ctx;
	size_t len = size * nmemb;
	size_t room = SINK_CAUSE_LEN - 1 - h->body_len;
	size_t take = len < room ? len : room;
	memcpy(h->sj->cause + h->body_len, data, take);
	h->body_len += take;
	h->sj->cause[h->body_len] = '\0';
	return len; /* keep reading: the connection stays reusable */
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
	ev.data.u64 = CURL_EVENT_TAG(s);
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

void http_transfer_done(struct http_round *h)
{
	h->hs->in_flight--;
	http_flying_remove(h);
	dheap_remove(&h->hs->answers, &h->answer_by);
}

/* What an ended transfer says of the receiver's capacity (core/concurrency.h): an answer
 * by its status; a timeout after the request was written, the strongest sign of a
 * receiver that queues; a refused connection, or one that could not be made in time, the
 * sign of a full accept queue; the rest, nothing. */
static enum concurrency_outcome flow_of(const struct http_round *h, enum transport_error te,
					long status)
{
	if (h->local || h->guard.refused[0])
		return CONCURRENCY_NOT_SENT;
	switch (te) {
	case TRANSPORT_OK:
		return concurrency_classify_status(status);
	case TRANSPORT_TIMEOUT:
		return h->wrote ? CONCURRENCY_TIMEOUT : CONCURRENCY_REFUSED;
	case TRANSPORT_REFUSED:
		return CONCURRENCY_REFUSED;
	default:
		return CONCURRENCY_NEUTRAL;
	}
}

void http_finish(struct http_round *h, enum transport_error te, long status, const char *errtext)
{
	struct sink_round *sj = h->sj;

	/* A refused token (revoked, rotated early, clock skew): one new token and one resend
	 * within the same attempt; a second 401 is the attempt's answer. */
	if (te == TRANSPORT_OK && status == 401 && sj->sub->auth_type == AUTH_OAUTH2 &&
	    !h->reauthed) {
		h->reauthed = 1;
		oauth2_cache_invalidate(&h->oauth->cache, h->token_gen);
		http_authorize(h);
		return;
	}
	sj->flow = flow_of(h, te, status);
	if (te != TRANSPORT_OK && h->guard.refused[0]) {
		/* Permanent: the address will not change by retrying; ssrf_allow would. */
		sj->code = SSRF_REFUSED_CODE;
		sj->permanent = 1;
		snprintf(sj->message, SINK_MSG_LEN, "refused by the SSRF guard");
		snprintf(sj->cause, SINK_CAUSE_LEN,
			 "the SSRF guard refused to connect to %s (%s); an operator can allow it "
			 "with the ssrf_allow setting", h->guard.refused, sj->sub->endpoint);
	} else if (te == TRANSPORT_OK) {
		sj->code = (int)status;
		if (h->reauthed || status < 0) {
			snprintf(sj->message, SINK_MSG_LEN, "HTTP %ld%s", status,
				 h->reauthed ? " (with a new oauth2 token after HTTP 401)" : "");
		} else { /* every answer: without printf */
			char num[FMT_U64_LEN];
			const char *d = fmt_u64((uint64_t)status, num);
			memcpy(sj->message, "HTTP ", 5);
			memcpy(sj->message + 5, d, (size_t)(num + FMT_U64_LEN - d)); /* NUL too */
		}
		if (retry_is_success(sj->code))
			sj->cause[0] = '\0'; /* keep no body for successes */
	} else {
		sj->code = errmap_code(te);
		snprintf(sj->message, SINK_MSG_LEN, "%s", errmap_message(te));
		snprintf(sj->cause, SINK_CAUSE_LEN, "%s", errtext ? errtext : "");
	}
	http_redact(h, sj->cause, SINK_CAUSE_LEN);
	http_report(h);
}

/* libcurl's request finished. */
static void http_completed(struct http_round *h, CURLcode rc)
{
	struct http_sink *hs = h->hs;
	long status = 0;

	curl_multi_remove_handle(hs->multi, h->easy);
	http_transfer_done(h);
	enum transport_error te = http_classify(rc, h->errbuf);
	if (rc == CURLE_COULDNT_CONNECT) {
		long os_errno = 0;
		curl_easy_getinfo(h->easy, CURLINFO_OS_ERRNO, &os_errno);
		h->local = errno_is_local((int)os_errno);
	}
	if (te == TRANSPORT_OK) {
		curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &status);
		if (hs->wire)
			wire_learn(hs->wire, h->url ? h->url : h->sj->sub->endpoint, h->sj->sub,
				   h->easy);
	}
	http_finish(h, te, status, h->errbuf[0] ? h->errbuf : curl_easy_strerror(rc));
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
		enum transfer_kind kind = *(enum transfer_kind *)owner;
		if (kind == TRANSFER_TOKEN)
			http_token_done(hs, owner, rc);
		else if (kind == TRANSFER_LOOKUP)
			http_proxy_lookup_done(hs, owner, rc);
		else
			http_completed(owner, rc);
	}
}

/* ---- the sink interface ------------------------------------------------------------------- */

static void http_attach(void *priv, const struct sink_env *env)
{
	struct http_sink *hs = priv;
	hs->env = *env;
}

/* The round's HTTP state, made on its first HTTP attempt; NULL when out of memory. */
static struct http_round *http_round_get(struct http_sink *hs, struct sink_round *sj)
{
	struct http_round *h = sj->state[hs->env.slot];
	if (!h) {
		if (!(h = calloc(1, sizeof(*h))))
			return NULL;
		h->transfer = TRANSFER_DELIVERY;
		h->hs = hs;
		/* A slot keeps its pool: its connections are reused by its next deliveries. */
		h->pool = hs->pools[hs->next_pool];
		hs->next_pool = (hs->next_pool + 1) % hs->n_pools;
		h->sj = sj;
		sj->state[hs->env.slot] = h;
	}
	return h;
}

static void http_send(void *priv, struct sink_round *sj)
{
	struct http_sink *hs = priv;
	struct http_round *h = http_round_get(hs, sj);
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
	h->resent = 0;
	h->start_us = 0;
	h->start_real_us = h->answer_real_us = 0;
	h->wrote = 0;
	h->local = 0;
	sj->flow = CONCURRENCY_NOT_SENT; /* until a transfer says otherwise */
	sj->retry_after_ms = -1;
	sj->end_round = 0;
	sj->cause[0] = '\0';
	http_authorize(h);
}

static int http_fd(void *priv)
{
	return ((struct http_sink *)priv)->epfd;
}

/* libcurl requests connected longer ago than their timeout without a complete answer:
 * they end as timeouts (libcurl's own timer covers connect and answer together, so the
 * answer's is kept here). */
static void answers_expire(struct http_sink *hs, int64_t now_us)
{
	struct dheap_node *top;
	while ((top = dheap_top(&hs->answers)) && top->at_us <= now_us) {
		struct http_round *h =
			(struct http_round *)((char *)top - offsetof(struct http_round, answer_by));
		char text[160];
		snprintf(text, sizeof(text), "Operation timed out after %lld milliseconds waiting "
			 "for the answer", (long long)h->sj->timeout_ms);
		curl_multi_remove_handle(hs->multi, h->easy);
		http_transfer_done(h);
		http_finish(h, TRANSPORT_TIMEOUT, 0, text);
	}
}

/* Hands curl the sockets that are ready, then its timeout when due, then reads what
 * finished. */
static void http_run(void *priv)
{
	struct http_sink *hs = priv;
	int running = 0;
	if (hs->wire)
		wire_reap(hs->wire);
	int n = epoll_wait(hs->epfd, hs->events, EPOLL_EVENTS, 0);
	for (int i = 0; i < n; i++) {
		const struct epoll_event *ev = &hs->events[i];
		if (ev->data.u64 & 1) {
			wire_ready(hs->wire, (struct wire_conn *)(uintptr_t)(ev->data.u64 & ~(uint64_t)1),
				   ev->events);
			continue;
		}
		int fd = (int)(ev->data.u64 >> 1);
		if ((size_t)fd < hs->fd_state_cap && hs->fd_state[fd] == FD_PARKED) {
			/* curl does not wait on it: stop hearing about it */
			epoll_ctl(hs->epfd, EPOLL_CTL_DEL, fd, NULL);
			hs->fd_state[fd] = FD_UNKNOWN;
			continue;
		}
		int mask = 0;
		if (ev->events & EPOLLIN)
			mask |= CURL_CSELECT_IN;
		if (ev->events & EPOLLOUT)
			mask |= CURL_CSELECT_OUT;
		if (ev->events & (EPOLLERR | EPOLLHUP))
			mask |= CURL_CSELECT_ERR;
		curl_multi_socket_action(hs->multi, fd, mask, &running);
	}
	if (hs->wire && wire_due_us(hs->wire) >= 0)
		wire_expire(hs->wire, clock_mono_us());
	answers_expire(hs, clock_mono_us());
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
	int64_t due = hs->curl_due_us;
	int64_t answer_due = dheap_due_us(&hs->answers);
	if (answer_due >= 0 && (due < 0 || answer_due < due))
		due = answer_due;
	int64_t wire_due = hs->wire ? wire_due_us(hs->wire) : -1;
	if (wire_due >= 0 && (due < 0 || wire_due < due))
		due = wire_due;
	if (due < 0)
		return -1;
	return due > now_us ? due - now_us : 0;
}

static int http_busy(void *priv)
{
	struct http_sink *hs = priv;
	return hs->in_flight + hs->token_fetches + http_proxy_busy(hs);
}

/* Stops every running request and token request; the deliveries in them and those
 * waiting for a token are handed back undecided. */
static void http_abort(void *priv)
{
	struct http_sink *hs = priv;
	for (struct oauth2_entry *e = hs->oauth; e; e = e->next) {
		http_token_abort(hs, e);
		struct http_round *w = e->waiters;
		e->waiters = NULL;
		while (w) {
			struct http_round *next = w->next;
			w->state = HTTP_IDLE;
			hs->env.abandoned(hs->env.ctx, w->sj);
			w = next;
		}
	}
	while (hs->flying) {
		struct http_round *h = hs->flying;
		if (h->conn)
			wire_cancel(hs->wire, h);
		else if (h->state == HTTP_RESOLVING)
			http_proxy_wait_cancel(hs, &h->pwait);
		else
			curl_multi_remove_handle(hs->multi, h->easy);
		http_transfer_done(h);
		h->state = HTTP_IDLE;
		hs->env.abandoned(hs->env.ctx, h->sj);
	}
}

/* The round is over: forget its query URL and token cache, wipe its header lines. */
static void http_round_end(void *priv, struct sink_round *sj)
{
	struct http_sink *hs = priv;
	struct http_round *h = sj->state[hs->env.slot];
	if (!h)
		return;
	http_headers_clear(h);
	free(h->url);
	h->url = NULL;
	h->oauth = NULL;
}

static void http_round_free(void *priv, struct sink_round *sj)
{
	struct http_sink *hs = priv;
	struct http_round *h = sj->state[hs->env.slot];
	if (!h)
		return;
	if (h->state == HTTP_IN_FLIGHT || h->state == HTTP_RESOLVING) {
		if (h->conn)
			wire_cancel(hs->wire, h);
		else if (h->state == HTTP_RESOLVING)
			http_proxy_wait_cancel(hs, &h->pwait);
		else
			curl_multi_remove_handle(hs->multi, h->easy);
		http_transfer_done(h);
	}
	curl_slist_free_all(h->connect_to);
	wire_round_free(h);
	if (h->easy)
		curl_easy_cleanup(h->easy);
	http_headers_clear(h);
	free(h->url);
	free(h->hbuf);
	free(h->hnodes);
	free(h);
	sj->state[hs->env.slot] = NULL;
}

static void http_prune(void *priv, int64_t now_ms)
{
	struct http_sink *hs = priv;
	http_tokens_prune(hs, now_ms);
	if (hs->wire)
		wire_prune(hs->wire, now_ms);
}

static void http_close(void *priv)
{
	struct http_sink *hs = priv;
	while (hs->oauth) {
		struct oauth2_entry *e = hs->oauth;
		hs->oauth = e->next;
		http_token_abort(hs, e); /* a refresh ahead may outlive the last delivery */
		oauth2_cache_clear(&e->cache);
		free(e);
	}
	/* The round slots are freed (dispatcher_stop): no handle uses a pool any more, and
	 * the pools close their connections. */
	http_proxy_close(hs); /* its lookups' handles leave the multi */
	for (int i = 0; i < hs->n_pools; i++)
		curl_share_cleanup(hs->pools[i]);
	free(hs->pools);
	curl_multi_cleanup(hs->multi); /* may still call curl_socket_cb: epfd closes after */
	wire_close(hs->wire);
	dheap_free(&hs->answers);
	close(hs->epfd);
	free(hs->fd_state);
	free(hs);
}

static const struct sink_methods http_methods = {
	.attach = http_attach,
	.send = http_send,
	.fd = http_fd,
	.run = http_run,
	.wait_us = http_wait_us,
	.busy = http_busy,
	.abort = http_abort,
	.round_end = http_round_end,
	.slot_free = http_round_free,
	.prune = http_prune,
	.close = http_close,
};

/* From the settings max_in_flight (kept-alive connections at most), lean_http (http://
 * and https:// over the lean client when it can), connect_timeout (a connect may take this
 * before the attempt's own timeout starts), ssrf_allow (the SSRF guard's allowlist,
 * core/ssrf.h), tls_dir (where a subscription's TLS files may be) and egress_proxy
 * (every request through its CONNECT tunnels, over libcurl). */
static void *http_open(const struct config *cfg, char *err, size_t errlen)
{
	struct http_sink *hs = calloc(1, sizeof(*hs));
	int max_connections = cfg->max_in_flight > 0 ? cfg->max_in_flight : 1;
	int lean = cfg->lean_http;
	if (!hs)
		goto fail;
	/* The SSRF guard: private, loopback, link-local and metadata addresses are refused
	 * unless ssrf_allow lets them through. */
	if (ssrf_policy_parse(cfg->ssrf_allow, &hs->ssrf_policy, err, errlen)) {
		free(hs);
		return NULL;
	}
	if (hs->ssrf_policy.n_allow)
		log_info("SSRF guard: deliveries may also go to %s (ssrf_allow)", cfg->ssrf_allow);
	hs->ssrf = &hs->ssrf_policy;
	/* behind a proxy every request goes through libcurl's CONNECT tunnel */
	if (cfg->egress_proxy && *cfg->egress_proxy) {
		if (!(hs->proxy = http_proxy_open(cfg->egress_proxy)))
			goto fail;
		char *shown = config_mask_value("egress_proxy", cfg->egress_proxy);
		log_info("deliveries and OAuth2 token requests go through the egress proxy %s "
			 "(CONNECT to addresses the SSRF guard checked)", shown ? shown : "");
		free(shown);
		lean = 0;
	}
	hs->tls_dir = cfg->tls_dir;
	hs->connect_timeout_ms = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : 3000;
	hs->curl_due_us = -1;
	hs->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (hs->epfd < 0 || !(hs->multi = curl_multi_init()))
		goto fail;
	if (lean) {
		/* https:// over the lean client trusts what libcurl trusts by default */
		CURL *probe = curl_easy_init();
		char *ca_file = NULL, *ca_path = NULL;
		if (!probe)
			goto fail;
		curl_easy_getinfo(probe, CURLINFO_CAINFO, &ca_file);
		curl_easy_getinfo(probe, CURLINFO_CAPATH, &ca_path);
		hs->wire = wire_open(hs, max_connections, ca_file, ca_path);
		curl_easy_cleanup(probe);
		if (!hs->wire)
			goto fail;
	}
	curl_multi_setopt(hs->multi, CURLMOPT_MAXCONNECTS, (long)max_connections);
	hs->n_pools = max_connections > CONN_POOL_ROUNDS
			      ? (max_connections + CONN_POOL_ROUNDS - 1) / CONN_POOL_ROUNDS : 1;
	if (!(hs->pools = calloc((size_t)hs->n_pools, sizeof(*hs->pools))))
		goto fail;
	for (int i = 0; i < hs->n_pools; i++) {
		/* One thread uses them all: no lock callbacks. */
		if (!(hs->pools[i] = curl_share_init()) ||
		    curl_share_setopt(hs->pools[i], CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT) != CURLSHE_OK)
			goto fail;
	}
	curl_multi_setopt(hs->multi, CURLMOPT_SOCKETFUNCTION, curl_socket_cb);
	curl_multi_setopt(hs->multi, CURLMOPT_SOCKETDATA, hs);
	curl_multi_setopt(hs->multi, CURLMOPT_TIMERFUNCTION, curl_timer_cb);
	curl_multi_setopt(hs->multi, CURLMOPT_TIMERDATA, hs);
	return hs;
fail:
	snprintf(err, errlen, "http sink: cannot set up curl multi, shares or epoll (errno %d)", errno);
	if (hs && hs->pools) {
		for (int i = 0; i < hs->n_pools; i++)
			if (hs->pools[i])
				curl_share_cleanup(hs->pools[i]);
		free(hs->pools);
	}
	if (hs && hs->proxy)
		http_proxy_close(hs);
	if (hs && hs->multi)
		curl_multi_cleanup(hs->multi);
	if (hs)
		wire_close(hs->wire);
	if (hs && hs->epfd > 0)
		close(hs->epfd);
	free(hs);
	return NULL;
}

/* Every webhook feature but TLS files, which only https:// has (core/sink_caps.c says
 * the same: sink_type_check). */
#define HTTP_CAN                                                                              \
	(SINK_CAN_TIMEOUT | SINK_CAN_HEADERS | SINK_CAN_SIGN | SINK_CAN_ORDERING |            \
	 SINK_CAN_AUTH_ANY)

const struct sink_type sink_type_http = {
	.name = "http",
	.schemes = {{"http", HTTP_CAN}, {"https", HTTP_CAN | SINK_CAN_TLS}},
	.open = http_open,
	.methods = &http_methods,
};
