/* http_wire.c: the HTTP sink's lean HTTP/1.1 client, for http:// and https:// deliveries.
 *
 * libcurl costs 20-30 µs of CPU and ~15 KiB of memory per request (docs/performance.md):
 * it formats every header byte by byte and keeps a handle and a connection object per
 * transfer. A webhook over plain HTTP needs far less: one write of a request head built
 * once per attempt plus the body, one read, a response parser (Debian's http_parser) and
 * a kept-alive connection (the URL split and the head written as libcurl would:
 * http_head.c). This file does exactly that and nothing else; libcurl keeps every case
 * it does not cover (a host name whose address is not known here, a URL or a header it
 * would rewrite, the egress proxy), so the two send the same request.
 *
 * https://: the same, with TLS between (http_tls.c: the handshake after the connect,
 * within connect_timeout, verification always on, one SSL_CTX per set of a subscription's
 * TLS files, the last session of each target kept for the next connection's
 * handshake); the request head and body go in one SSL_write. A target is its scheme,
 * host:port and TLS configuration, so a connection made with one client certificate or
 * CA never carries another subscription's request.
 *
 * Addresses: an IP literal is used as is; a host name's address is the one libcurl
 * connected to on its last successful request there (wire_learn), trusted for
 * DNS_TTL_MS as libcurl trusts its own DNS cache. Then one request every DNS_RETRY_MS
 * goes through libcurl, which resolves the name anew, while the others keep the old
 * address for up to DNS_STALE_MS more (so a whole max_in_flight of requests does not
 * fall back to libcurl at once). Every connection goes through the SSRF guard
 * (core/ssrf.h) before connect(), as libcurl's do.
 *
 * Connections: kept alive per target, newest first, at most max_idle in all, closed
 * after IDLE_MAX_MS unused or when the server closes them (over TLS, a session ticket
 * arriving on an idle connection is taken and the connection kept). A
 * request on a kept-alive connection that dies before any byte of the answer is sent
 * once more on a fresh one, as libcurl does. Timeouts: a connection being made (its TLS
 * handshake included) has the sink's connect_timeout, then the attempt's timeout runs
 * from when its request is written; the deadlines sit in a min-heap (util/dheap.h).
 *
 * Everything runs on the dispatcher's thread; a connection closed while the epoll batch
 * that may name it is being handled is freed only at the next http_run (wire_reap). */
#include "deliver/sink_http_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <http_parser.h>
#include <openssl/crypto.h>

#include "core/metrics.h"
#include "core/retry.h"
#include "deliver/http_head.h"
#include "deliver/http_tls.h"
#include "util/clock.h"
#include "util/dheap.h"
#include "util/hash.h"
#include "util/hashchain.h"

#define DNS_TTL_MS (60 * 1000LL)      /* libcurl's CURLOPT_DNS_CACHE_TIMEOUT default */
#define DNS_STALE_MS (30 * 1000LL)    /* how much longer an address serves while one
                                         request through libcurl resolves it anew */
#define DNS_RETRY_MS (5 * 1000LL)     /* between those requests */
#define IDLE_MAX_MS (118 * 1000LL)    /* libcurl's CURLOPT_MAXAGE_CONN default */
/* A connect that a target usually completes in C µs and has not completed after
 * CONNECT_RETRY_FACTOR x C (at least CONNECT_RETRY_MIN_US) lost its SYN, most often to a
 * full accept queue (Python's http.server listens with a backlog of 5), and the kernel
 * sends it again only a second later: a new connection is made at once instead,
 * doubling the wait each time, within connect_timeout. Nothing reached the receiver. */
#define CONNECT_RETRY_FACTOR 8
#define CONNECT_RETRY_MIN_US 10000
#define CONNECT_SMOOTHING 8           /* a new connect time weighs 1/8 in the average */
#define READ_BUF 65536

enum conn_state { CONN_CONNECTING, CONN_HANDSHAKE, CONN_SENDING, CONN_READING, CONN_IDLE,
		  CONN_DEAD };

/* Where requests go: host:port as the URL writes it, over plain TCP or over TLS with one
 * configuration. Targets live until the sink closes (one per distinct endpoint authority
 * and TLS configuration). */
struct wire_target {
	char *authority;              /* host:port as in the URL; with tls and tls_conf the key */
	int tls;                      /* https:// */
	struct tls_conf *tls_conf;    /* https://: the subscription's TLS files (borrowed) */
	struct tls_resume resume;     /* https://: the last session, for the next handshake */
	char *host;                   /* for messages: the host part */
	int port;
	struct sockaddr_storage addr;
	socklen_t addrlen;            /* 0 = not known */
	int literal;                  /* an IP address in the URL: never expires */
	int64_t learned_ms;           /* when libcurl connected there (monotonic) */
	int64_t refresh_ms;           /* when a request went to libcurl to resolve it anew */
	int64_t connect_us;           /* smoothed time its connects take, 0 = none made yet */
	struct wire_conn *idle;       /* kept-alive connections, newest first */
	struct hc_node link;          /* in wire.targets, by authority */
};

struct wire_conn {
	int fd;
	struct tls_link *tls;         /* https://: the TLS side, NULL for http:// */
	int tls_broken;               /* it failed: no close_notify */
	int write_wants_read;         /* the TLS write waits for the socket to be readable */
	enum conn_state state;
	struct wire_target *t;
	struct http_round *h;         /* the round whose request it carries, NULL when idle */
	uint32_t watching;            /* the epoll events registered */
	http_parser parser;
	size_t sent;                  /* bytes of head + body written */
	int reused;                   /* the request went on a kept-alive connection */
	size_t got_bytes;             /* bytes of the answer received */
	int final;                    /* the final (non-1xx) response is complete */
	int field_match;              /* the header being read is Retry-After (-1: unknown) */
	char field[12];
	size_t field_len;
	char ra[64];                  /* its value */
	size_t ra_len;
	int64_t start_us;             /* when the attempt started on this connection */
	int64_t connect_us;           /* when its current connect() was issued */
	int64_t connect_end_us;       /* connect_timeout from the first: the last moment */
	int64_t connect_retry_us;     /* the wait before the next new connect, 0 = none */
	struct dheap_node deadline;   /* in wire.deadlines while it has one */
	int64_t idle_since_ms;
	struct wire_conn *next, *prev; /* in its target's idle list, or the graveyard */
};

struct wire {
	struct http_sink *hs;
	struct hc_table targets;      /* struct wire_target by authority */
	struct dheap deadlines;       /* the connections with a deadline, soonest first */
	struct wire_conn *graveyard;  /* closed, freed at the next wire_reap */
	struct tls_confs *tls_confs;  /* https://: the TLS configurations in use */
	int n_idle, max_idle;
	http_parser_settings settings;
	char rbuf[READ_BUF];          /* every read lands here and is parsed at once */
};

/* ---- deadlines -------------------------------------------------------------------------- */

static struct wire_conn *conn_of_node(struct dheap_node *n)
{
	return (struct wire_conn *)((char *)n - offsetof(struct wire_conn, deadline));
}

/* c must be done by at_us (monotonic): connecting within the sink's connect_timeout,
 * then answered within the attempt's timeout from when its request is written. */
static int conn_deadline(struct wire *w, struct wire_conn *c, int64_t at_us)
{
	return dheap_set(&w->deadlines, &c->deadline, at_us);
}

/* ---- targets ------------------------------------------------------------------------- */

/* A round's last URL, split once: the parts point into url (a copy, which may carry a
 * query credential: wiped when it goes); conf: the TLS configuration it was looked up
 * with (a round's next delivery may be another subscription's, with other files). */
struct wire_url {
	char *url;
	struct url_parts u;
	struct tls_conf *conf;
	struct wire_target *t;
};

/* The target of u's scheme and authority with the TLS configuration conf (NULL for
 * http://); NULL when out of memory. */
static struct wire_target *target_of(struct hc_node *n)
{
	return (struct wire_target *)((char *)n - offsetof(struct wire_target, link));
}

static struct wire_target *target_get(struct wire *w, const struct url_parts *u,
				      struct tls_conf *conf)
{
	uint32_t hv = hash_fnv1a_n(u->auth, u->auth_len);
	for (struct hc_node *n = hc_chain(&w->targets, hv); n; n = n->next) {
		struct wire_target *t = target_of(n);
		if (n->hash == hv && t->tls == u->tls && t->tls_conf == conf &&
		    strlen(t->authority) == u->auth_len &&
		    memcmp(t->authority, u->auth, u->auth_len) == 0)
			return t;
	}
	struct wire_target *t = calloc(1, sizeof(*t));
	if (!t || !(t->authority = strndup(u->auth, u->auth_len)) ||
	    !(t->host = strndup(u->host, u->host_len)) || hc_add(&w->targets, &t->link, hv)) {
		if (t) {
			free(t->authority);
			free(t->host);
		}
		free(t);
		return NULL;
	}
	t->port = u->port;
	t->tls = u->tls;
	t->tls_conf = conf;
	t->literal = wire_addr_from_text(t->host, u->port, &t->addr, &t->addrlen) == 0;
	return t;
}

static int target_fresh(const struct wire_target *t, int64_t now_ms)
{
	return t->addrlen && (t->literal || now_ms - t->learned_ms < DNS_TTL_MS);
}

/* 1 when a request to t may go over the lean client now, 0 when libcurl takes it. */
static int target_usable(struct wire_target *t, int64_t now_ms)
{
	if (target_fresh(t, now_ms))
		return 1;
	if (!t->addrlen || now_ms - t->learned_ms >= DNS_TTL_MS + DNS_STALE_MS)
		return 0;
	if (now_ms - t->refresh_ms >= DNS_RETRY_MS) {
		t->refresh_ms = now_ms; /* this one resolves the name again */
		return 0;
	}
	return 1;
}

/* ---- connections --------------------------------------------------------------------- */

static void idle_unlink(struct wire *w, struct wire_conn *c)
{
	if (c->prev)
		c->prev->next = c->next;
	else
		c->t->idle = c->next;
	if (c->next)
		c->next->prev = c->prev;
	c->next = c->prev = NULL;
	w->n_idle--;
}

/* Closes c (the kernel takes it out of the epoll set); freed at the next wire_reap. */
static void conn_close(struct wire *w, struct wire_conn *c)
{
	if (c->state == CONN_IDLE)
		idle_unlink(w, c);
	dheap_remove(&w->deadlines, &c->deadline);
	tls_link_close(c->tls, c->tls_broken);
	c->tls = NULL;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->state = CONN_DEAD;
	c->h = NULL;
	c->next = w->graveyard;
	w->graveyard = c;
}

void wire_reap(struct wire *w)
{
	while (w->graveyard) {
		struct wire_conn *c = w->graveyard;
		w->graveyard = c->next;
		free(c);
	}
}

static int conn_watch(struct wire *w, struct wire_conn *c, uint32_t events)
{
	if (c->watching == events)
		return 0;
	struct epoll_event ev = {.events = events, .data.u64 = WIRE_EVENT_TAG((uintptr_t)c)};
	int op = c->watching ? EPOLL_CTL_MOD : EPOLL_CTL_ADD;
	if (epoll_ctl(w->hs->epfd, op, c->fd, &ev))
		return -1;
	c->watching = events;
	return 0;
}

/* The attempt on c ended: c goes back to its target's idle list (keep) or closes, and the
 * round gets its outcome. */
static void conn_finish(struct wire *w, struct wire_conn *c, enum transport_error te, long status,
			const char *errtext, int keep)
{
	struct http_round *h = c->h;
	dheap_remove(&w->deadlines, &c->deadline);
	c->h = NULL;
	h->conn = NULL;
	/* the head may carry credentials: wiped once the attempt is over */
	OPENSSL_cleanse(h->whead, h->whead_len);
	h->whead_len = 0;
	if (keep && w->n_idle < w->max_idle && c->state == CONN_READING) {
		c->state = CONN_IDLE;
		c->idle_since_ms = clock_mono_ms();
		c->prev = NULL;
		c->next = c->t->idle;
		if (c->next)
			c->next->prev = c;
		c->t->idle = c;
		w->n_idle++;
	} else {
		conn_close(w, c);
	}
	http_transfer_done(h);
	http_finish(h, te, status, errtext);
}

static void conn_fail(struct wire *w, struct wire_conn *c, enum transport_error te, const char *fmt,
		      ...) __attribute__((format(printf, 4, 5)));

static void conn_fail(struct wire *w, struct wire_conn *c, enum transport_error te, const char *fmt,
		      ...)
{
	char text[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	conn_finish(w, c, te, 0, text, 0);
}

static void conn_send(struct wire *w, struct wire_conn *c);
static void conn_connected(struct wire *w, struct wire_conn *c);
static void conn_reconnect(struct wire *w, struct wire_conn *c, int64_t now_us);
static int conn_start(struct wire *w, struct http_round *h, struct wire_target *t, int fresh);

/* The request on a kept-alive connection died before any byte of an answer: the server
 * had closed it. Once more on a fresh connection, within the same attempt. */
static void conn_retry_fresh(struct wire *w, struct wire_conn *c)
{
	struct http_round *h = c->h;
	struct wire_target *t = c->t;
	dheap_remove(&w->deadlines, &c->deadline);
	c->h = NULL;
	h->conn = NULL;
	conn_close(w, c);
	h->wrote = 0; /* the new connection's write is the one awaited */
	http_resent(h);
	conn_start(w, h, t, 1); /* reports a failure itself */
}

/* ---- the response --------------------------------------------------------------------- */

static struct wire_conn *conn_of(http_parser *p)
{
	return p->data;
}

static int on_message_begin(http_parser *p)
{
	struct wire_conn *c = conn_of(p);
	struct http_round *h = c->h;
	/* an interim (1xx) answer before may have set these */
	h->sj->retry_after_ms = -1;
	h->body_len = 0;
	h->sj->cause[0] = '\0';
	/* a new answer (the next on a kept-alive connection, or the final one after a 1xx):
	 * its first header name must not be appended to the last one read before */
	c->field_match = -1;
	c->field_len = 0;
	c->ra_len = 0;
	return 0;
}

/* Header names arrive in pieces; only Retry-After matters (core/retry.h). */
static int on_header_field(http_parser *p, const char *at, size_t len)
{
	struct wire_conn *c = conn_of(p);
	if (c->field_match != -1) { /* a new field after a value */
		c->field_len = 0;
		c->field_match = -1;
	}
	if (c->field_len + len <= sizeof(c->field)) {
		memcpy(c->field + c->field_len, at, len);
		c->field_len += len;
	} else {
		c->field_len = sizeof(c->field) + 1; /* too long to be Retry-After */
	}
	return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
	struct wire_conn *c = conn_of(p);
	if (c->field_match == -1) {
		c->field_match = c->field_len == 11 && strncasecmp(c->field, "Retry-After", 11) == 0;
		if (c->field_match)
			c->ra_len = 0;
	}
	if (c->field_match == 1) {
		size_t take = len < sizeof(c->ra) - 1 - c->ra_len ? len : sizeof(c->ra) - 1 - c->ra_len;
		memcpy(c->ra + c->ra_len, at, take);
		c->ra_len += take;
	}
	return 0;
}

static int on_headers_complete(http_parser *p)
{
	struct wire_conn *c = conn_of(p);
	int64_t ms;
	if (c->ra_len) {
		c->ra[c->ra_len] = '\0';
		if (retry_after_parse(c->ra, clock_now_ms(), &ms) == 0)
			c->h->sj->retry_after_ms = ms;
	}
	return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
	struct wire_conn *c = conn_of(p);
	http_body_cb((char *)at, 1, len, c->h); /* keeps the first SINK_CAUSE_LEN - 1 bytes */
	return 0;
}

static int on_message_complete(http_parser *p)
{
	struct wire_conn *c = conn_of(p);
	if (p->status_code >= 200) {
		c->final = 1;
		http_parser_pause(p, 1); /* anything after it is not ours */
	}
	return 0;
}

/* The bytes of c's request: the head, then the body (over TLS the head buffer holds
 * both, so one SSL_write sends the request). */
static size_t request_len(const struct wire_conn *c)
{
	return c->h->whead_len + (c->tls ? 0 : c->h->sj->claim->payload_len);
}

/* The answer of a finished exchange, from c->parser. A connection is kept only when the
 * answer ended cleanly after the whole request was written (a server may answer early). */
static void conn_answered(struct wire *w, struct wire_conn *c, int more_bytes)
{
	int keep = !more_bytes && c->sent == request_len(c) && http_should_keep_alive(&c->parser);
	conn_finish(w, c, TRANSPORT_OK, (long)c->parser.status_code, NULL, keep);
}

/* The connection ended (eof) or failed (err, an errno) while the answer was awaited. */
static void conn_lost(struct wire *w, struct wire_conn *c, int err)
{
	if (!err) {
		http_parser_execute(&c->parser, &w->settings, NULL, 0); /* the end of a body
		                                                         * read until close */
		if (c->final) {
			conn_answered(w, c, 1);
			return;
		}
	}
	if (c->reused && !c->got_bytes) {
		conn_retry_fresh(w, c);
		return;
	}
	c->tls_broken = err != 0;
	if (err)
		conn_fail(w, c, TRANSPORT_OTHER, "Recv failure: %s", strerror(err));
	else if (!c->got_bytes)
		conn_fail(w, c, TRANSPORT_OTHER, "Empty reply from server");
	else
		conn_fail(w, c, TRANSPORT_OTHER,
			  "transfer closed with outstanding read data remaining");
}

/* Reads into the wire's buffer; for the first bytes of an answer also when the kernel
 * received them (SO_TIMESTAMP), into the round. */
static ssize_t conn_recv(struct wire *w, struct wire_conn *c)
{
	if (c->got_bytes)
		return recv(c->fd, w->rbuf, sizeof(w->rbuf), 0);
	union {
		char buf[CMSG_SPACE(sizeof(struct timeval))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = w->rbuf, .iov_len = sizeof(w->rbuf)};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf)};
	ssize_t n = recvmsg(c->fd, &msg, 0);
	if (n <= 0 || !c->h)
		return n;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMP) {
			struct timeval tv;
			memcpy(&tv, CMSG_DATA(cm), sizeof(tv));
			c->h->answer_real_us = (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
		}
	}
	return n;
}

/* Parses n bytes just read: 1 when the exchange ended (answered or failed), else 0. */
static int conn_parse(struct wire *w, struct wire_conn *c, size_t n)
{
	c->got_bytes += n;
	size_t used = http_parser_execute(&c->parser, &w->settings, w->rbuf, n);
	if (c->final) {
		conn_answered(w, c, used < n || (c->tls && tls_link_pending(c->tls)));
		return 1;
	}
	enum http_errno e = HTTP_PARSER_ERRNO(&c->parser);
	if (e != HPE_OK) {
		conn_fail(w, c, TRANSPORT_OTHER, "Weird server reply: %s", http_errno_description(e));
		return 1;
	}
	return 0;
}

/* The TLS side of conn_read: records are read while the link holds bytes (epoll does
 * not see those), then epoll says when more arrived. The first bytes of an answer take
 * when the kernel received them from the link. */
static void conn_read_tls(struct wire *w, struct wire_conn *c)
{
	char err[TLS_ERR_LEN];
	enum transport_error te = TRANSPORT_TLS;
	int sys_errno = 0;
	for (;;) {
		size_t n = 0;
		switch (tls_link_read(c->tls, w->rbuf, sizeof(w->rbuf), &n, &sys_errno, &te, err,
				      sizeof(err))) {
		case TLS_DONE:
			if (!c->got_bytes && tls_link_stamp_us(c->tls))
				c->h->answer_real_us = tls_link_stamp_us(c->tls);
			if (conn_parse(w, c, n))
				return;
			if (!tls_link_pending(c->tls)) {
				if (conn_watch(w, c, EPOLLIN))
					conn_fail(w, c, TRANSPORT_OTHER, "epoll_ctl: %s",
						  strerror(errno));
				return;
			}
			continue;
		case TLS_WANT_READ:
			if (conn_watch(w, c, EPOLLIN))
				conn_fail(w, c, TRANSPORT_OTHER, "epoll_ctl: %s", strerror(errno));
			return;
		case TLS_WANT_WRITE: /* every event of a reading connection comes back here */
			if (conn_watch(w, c, EPOLLIN | EPOLLOUT))
				conn_fail(w, c, TRANSPORT_OTHER, "epoll_ctl: %s", strerror(errno));
			return;
		case TLS_EOF:
			conn_lost(w, c, 0);
			return;
		case TLS_SYSCALL:
			conn_lost(w, c, sys_errno);
			return;
		case TLS_FAILED:
			c->tls_broken = 1;
			if (c->reused && !c->got_bytes)
				conn_retry_fresh(w, c);
			else
				conn_fail(w, c, te, "%s", err);
			return;
		}
	}
}

static void conn_read(struct wire *w, struct wire_conn *c)
{
	if (c->tls) {
		conn_read_tls(w, c);
		return;
	}
	for (;;) {
		ssize_t n = conn_recv(w, c);
		if (n == 0) {
			conn_lost(w, c, 0);
			return;
		}
		if (n < 0) {
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			if (errno == EINTR)
				continue;
			conn_lost(w, c, errno);
			return;
		}
		if (conn_parse(w, c, (size_t)n))
			return;
		if ((size_t)n < sizeof(w->rbuf))
			return; /* level-triggered: more wakes us again */
	}
}

/* ---- the request ---------------------------------------------------------------------- */

/* The request is written: wait for the answer. */
static void conn_sent(struct wire *w, struct wire_conn *c)
{
	c->state = CONN_READING;
	if (conn_watch(w, c, EPOLLIN))
		conn_fail(w, c, TRANSPORT_OTHER, "epoll_ctl: %s", strerror(errno));
}

/* The TLS side of conn_send: what is left of the head buffer (head and body). */
static void conn_send_tls(struct wire *w, struct wire_conn *c)
{
	struct http_round *h = c->h;
	char err[TLS_ERR_LEN];
	enum transport_error te = TRANSPORT_TLS;
	int sys_errno = 0;
	c->write_wants_read = 0;
	while (c->sent < h->whead_len) {
		size_t n = 0;
		switch (tls_link_write(c->tls, h->whead + c->sent, h->whead_len - c->sent, &n,
				       &sys_errno, &te, err, sizeof(err))) {
		case TLS_DONE:
			c->sent += n;
			h->wrote = 1;
			continue;
		case TLS_WANT_WRITE: /* EPOLLIN too: an early answer or a reset */
			if (conn_watch(w, c, EPOLLIN | EPOLLOUT))
				conn_fail(w, c, TRANSPORT_OTHER, "epoll_ctl: %s", strerror(errno));
			return;
		case TLS_WANT_READ:
			c->write_wants_read = 1;
			if (conn_watch(w, c, EPOLLIN))
				conn_fail(w, c, TRANSPORT_OTHER, "epoll_ctl: %s", strerror(errno));
			return;
		case TLS_EOF:
		case TLS_SYSCALL:
			c->tls_broken = 1;
			if (c->reused && (sys_errno == EPIPE || sys_errno == ECONNRESET)) {
				conn_retry_fresh(w, c);
				return;
			}
			conn_fail(w, c, TRANSPORT_OTHER, "Send failure: %s", strerror(sys_errno));
			return;
		case TLS_FAILED:
			c->tls_broken = 1;
			conn_fail(w, c, te, "%s", err);
			return;
		}
	}
	conn_sent(w, c);
}

/* Writes what is left of the request; then waits for the answer. */
static void conn_send(struct wire *w, struct wire_conn *c)
{
	struct http_round *h = c->h;
	const struct store_claim *claim = h->sj->claim;
	size_t total = h->whead_len + claim->payload_len;

	if (c->tls) {
		conn_send_tls(w, c);
		return;
	}
	while (c->sent < total) {
		struct iovec iov[2];
		int n_iov = 0;
		if (c->sent < h->whead_len) {
			iov[n_iov].iov_base = h->whead + c->sent;
			iov[n_iov++].iov_len = h->whead_len - c->sent;
		}
		size_t body_off = c->sent > h->whead_len ? c->sent - h->whead_len : 0;
		if (claim->payload_len > body_off) {
			iov[n_iov].iov_base = (char *)claim->payload + body_off;
			iov[n_iov++].iov_len = claim->payload_len - body_off;
		}
		struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)n_iov};
		ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				if (conn_watch(w, c, EPOLLIN | EPOLLOUT))
					conn_fail(w, c, TRANSPORT_OTHER, "epoll_ctl: %s", strerror(errno));
				return;
			}
			if (c->reused && (errno == EPIPE || errno == ECONNRESET)) {
				conn_retry_fresh(w, c);
				return;
			}
			conn_fail(w, c, TRANSPORT_OTHER, "Send failure: %s", strerror(errno));
			return;
		}
		c->sent += (size_t)n;
		h->wrote = 1;
	}
	conn_sent(w, c);
}

/* c is connected (and over TLS, its handshake done): the attempt's timeout runs from
 * here, as its request is written (a slow connect is outboxd's wait, not the
 * receiver's answer). */
static void conn_ready(struct wire *w, struct wire_conn *c)
{
	int64_t timeout_ms = c->h->sj->timeout_ms;
	if (timeout_ms > 0 && conn_deadline(w, c, clock_mono_us() + timeout_ms * 1000)) {
		conn_fail(w, c, TRANSPORT_OTHER, "out of memory");
		return;
	} else if (timeout_ms <= 0) {
		dheap_remove(&w->deadlines, &c->deadline);
	}
	c->state = CONN_SENDING;
	conn_send(w, c);
}

/* One step of c's TLS handshake; conn_ready when it is over. */
static void conn_handshake(struct wire *w, struct wire_conn *c)
{
	char err[TLS_ERR_LEN];
	enum transport_error te = TRANSPORT_TLS;
	uint32_t want = 0;
	switch (tls_link_handshake(c->tls, c->t->port, &te, err, sizeof(err))) {
	case TLS_DONE:
		metrics_http_tls_handshake(tls_link_resumed(c->tls));
		conn_ready(w, c);
		return;
	case TLS_WANT_READ:
		want = EPOLLIN;
		break;
	case TLS_WANT_WRITE:
		want = EPOLLOUT;
		break;
	default:
		c->tls_broken = 1;
		conn_fail(w, c, te, "%s", err);
		return;
	}
	if (conn_watch(w, c, want))
		conn_fail(w, c, TRANSPORT_OTHER, "epoll_ctl: %s", strerror(errno));
}

/* The connect of c finished (writable or an error). */
static void conn_connected(struct wire *w, struct wire_conn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err) {
		conn_fail(w, c, TRANSPORT_REFUSED, "Failed to connect to %s port %d after %lld ms: %s",
			  c->t->host, c->t->port,
			  (long long)((clock_mono_us() - c->start_us) / 1000), strerror(err));
		return;
	}
	int64_t now_us = clock_mono_us(), took = now_us - c->connect_us;
	struct wire_target *t = c->t;
	t->connect_us = t->connect_us ? t->connect_us + (took - t->connect_us) / CONNECT_SMOOTHING
				      : (took > 0 ? took : 1);
	if (t->connect_us < 1)
		t->connect_us = 1;
	if (!t->tls) {
		conn_ready(w, c);
		return;
	}
	/* The handshake counts under connect_timeout, as the connect does. */
	char text[TLS_ERR_LEN];
	enum transport_error te = TRANSPORT_TLS;
	if (!(c->tls = tls_link_new(t->tls_conf, c->fd, t->host, &t->resume, &te, text,
				    sizeof(text)))) {
		conn_fail(w, c, te, "%s", text);
		return;
	}
	c->state = CONN_HANDSHAKE;
	if (w->hs->connect_timeout_ms > 0 && conn_deadline(w, c, c->connect_end_us)) {
		conn_fail(w, c, TRANSPORT_OTHER, "out of memory");
		return;
	}
	conn_handshake(w, c);
}

/* Opens c's socket and starts its connect, with the deadline of this connect: the next
 * new connect (connect_retry_us from now) or connect_timeout from the first, whichever
 * comes first. 0 when under way (or connected and sent), -1 when it failed (reported). */
static int conn_dial(struct wire *w, struct wire_conn *c, int64_t now_us)
{
	struct wire_target *t = c->t;
	struct http_round *h = c->h;
	int one = 1;

	c->fd = socket(t->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	c->watching = 0;
	if (c->fd < 0) {
		h->local = errno_is_local(errno);
		conn_fail(w, c, TRANSPORT_OTHER, "socket: %s", strerror(errno));
		return -1;
	}
	setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(c->fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
	/* when an answer reached the kernel: flow control judges the receiver, not how long
	 * the answer waited for this thread */
	setsockopt(c->fd, SOL_SOCKET, SO_TIMESTAMP, &one, sizeof(one));
	int64_t at_us = c->connect_end_us;
	if (c->connect_retry_us && now_us + c->connect_retry_us < at_us)
		at_us = now_us + c->connect_retry_us;
	if (w->hs->connect_timeout_ms > 0 && conn_deadline(w, c, at_us)) {
		conn_fail(w, c, TRANSPORT_OTHER, "out of memory");
		return -1;
	}
	c->connect_us = now_us;
	int rc = connect(c->fd, (const struct sockaddr *)&t->addr, t->addrlen);
	if (rc < 0 && errno != EINPROGRESS) {
		h->local = errno_is_local(errno);
		conn_fail(w, c, TRANSPORT_REFUSED, "Failed to connect to %s port %d after %lld ms: %s",
			  t->host, t->port, (long long)((now_us - c->start_us) / 1000), strerror(errno));
		return -1;
	}
	/* Over loopback the handshake is over before connect() returns, though it says
	 * EINPROGRESS: send at once rather than one turn of the loop later. */
	struct tcp_info ti;
	socklen_t ti_len = sizeof(ti);
	if (rc < 0 && getsockopt(c->fd, IPPROTO_TCP, TCP_INFO, &ti, &ti_len) == 0 &&
	    ti.tcpi_state == TCP_ESTABLISHED)
		rc = 0;
	if (rc == 0) {
		conn_connected(w, c);
		return 0;
	}
	if (conn_watch(w, c, EPOLLOUT)) {
		conn_fail(w, c, TRANSPORT_OTHER, "epoll_ctl: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* c's connect has taken connect_retry_us: its SYN was most likely dropped (see
 * CONNECT_RETRY_FACTOR). A new connection replaces it, and the next wait doubles. */
static void conn_reconnect(struct wire *w, struct wire_conn *c, int64_t now_us)
{
	close(c->fd); /* the kernel takes it out of the epoll set */
	c->fd = -1;
	c->connect_retry_us *= 2;
	c->h->sj->lost_syns++;
	metrics_http_reconnect();
	conn_dial(w, c, now_us);
}

/* Starts h's request on a kept-alive connection to t (unless fresh) or a new one. 0 when
 * under way (or answered already), -1 when it failed (reported through http_finish). */
static int conn_start(struct wire *w, struct http_round *h, struct wire_target *t, int fresh)
{
	int64_t now_ms = clock_mono_ms();
	struct wire_conn *c = NULL;

	while (!fresh && t->idle) {
		struct wire_conn *old = t->idle;
		idle_unlink(w, old);
		if (now_ms - old->idle_since_ms < IDLE_MAX_MS) {
			c = old;
			c->reused = 1;
			c->state = CONN_SENDING; /* off the idle list: conn_close must not unlink */
			break;
		}
		old->state = CONN_READING; /* not idle any more: conn_close must not unlink */
		conn_close(w, old);
	}
	if (!c) {
		const char *refused = ssrf_refused(w->hs->ssrf, (const struct sockaddr *)&t->addr);
		if (refused) {
			char ip[64];
			snprintf(h->guard.refused, sizeof(h->guard.refused), "%s address %s", refused,
				 ssrf_address_text((const struct sockaddr *)&t->addr, ip, sizeof(ip)));
			http_transfer_done(h);
			http_finish(h, TRANSPORT_REFUSED, 0, "refused by the SSRF guard");
			return -1;
		}
		if (t->tls && !http_tls_files_inside(h)) {
			http_transfer_done(h);
			http_fail_tls_outside(h);
			return -1;
		}
		if (!(c = calloc(1, sizeof(*c)))) {
			http_transfer_done(h);
			http_finish(h, TRANSPORT_OTHER, 0, "out of memory");
			return -1;
		}
		c->t = t;
		c->fd = -1;
		c->state = CONN_CONNECTING;
	}
	c->h = h;
	h->conn = c;
	c->sent = 0;
	c->got_bytes = 0;
	c->final = 0;
	c->start_us = clock_mono_us();
	http_parser_init(&c->parser, HTTP_RESPONSE);
	c->parser.data = c;
	if (c->state == CONN_CONNECTING) {
		c->connect_end_us = c->start_us + w->hs->connect_timeout_ms * 1000;
		c->connect_retry_us = t->connect_us > 0 ? t->connect_us * CONNECT_RETRY_FACTOR : 0;
		if (c->connect_retry_us && c->connect_retry_us < CONNECT_RETRY_MIN_US)
			c->connect_retry_us = CONNECT_RETRY_MIN_US;
		return conn_dial(w, c, c->start_us);
	}
	if (h->sj->timeout_ms > 0 && conn_deadline(w, c, c->start_us + h->sj->timeout_ms * 1000)) {
		conn_fail(w, c, TRANSPORT_OTHER, "out of memory");
		return -1;
	}
	c->state = CONN_SENDING;
	conn_send(w, c);
	return 0;
}

static void wire_round_free_url(struct http_round *h)
{
	struct wire_url *wu = h->wurl;
	if (!wu)
		return;
	if (wu->url) { /* may carry a query credential */
		OPENSSL_cleanse(wu->url, strlen(wu->url));
		free(wu->url);
	}
	free(wu);
	h->wurl = NULL;
}

/* The TLS configuration of s's files for an https:// URL (tls), NULL for http://; hint:
 * the one the round used last (tls_conf_get); *oom when one could not be made. */
static struct tls_conf *conf_of(struct wire *w, const struct subscription *s, int tls,
				struct tls_conf *hint, int *oom)
{
	struct tls_conf *conf = NULL;
	*oom = 0;
	if (tls && !(conf = tls_conf_get(w->tls_confs, hint, s->tls_ca_file, s->tls_client_cert,
					 s->tls_client_key)))
		*oom = 1;
	return conf;
}

int wire_send(struct wire *w, struct http_round *h, const char *url)
{
	const struct subscription *s = h->sj->sub;
	int oom;

	if (wire_sub_sets_own_header(s))
		return 0;
	/* the round remembers the last URL it split and its target */
	struct wire_url *wu = h->wurl;
	struct tls_conf *conf = wu ? conf_of(w, s, wu->u.tls, wu->conf, &oom) : NULL;
	if (!wu || strcmp(wu->url, url) != 0 || conf != wu->conf) {
		struct url_parts u;
		if (wire_url_split(url, &u))
			return 0;
		conf = conf_of(w, s, u.tls, wu ? wu->conf : NULL, &oom);
		if (oom)
			return 0;
		wire_round_free_url(h);
		if (!(wu = calloc(1, sizeof(*wu))) || !(wu->url = strdup(url))) {
			free(wu);
			return 0;
		}
		h->wurl = wu;
		wu->conf = conf;
		if (!(wu->t = target_get(w, &u, conf))) {
			wire_round_free_url(h);
			return 0;
		}
		/* the same spans, in the copy */
		wu->u = u;
		wu->u.auth = wu->url + (u.auth - url);
		wu->u.host = wu->url + (u.host - url);
		wu->u.path = wu->url + (u.path - url);
	}
	if (!target_usable(wu->t, clock_mono_ms()))
		return 0;
	struct wire_head wh = {h->whead, h->whead_cap, 0};
	int built = wire_head_build(&wh, &wu->u, h->hbuf, h->hbuf_len, h->sj->claim->payload,
				    h->sj->claim->payload_len);
	h->whead = wh.buf;
	h->whead_cap = wh.cap;
	h->whead_len = wh.len;
	if (built)
		return 0;
	metrics_http_request(1);
	h->state = HTTP_IN_FLIGHT;
	w->hs->in_flight++;
	http_flying_add(h);
	h->start_us = clock_mono_us();
	h->start_real_us = clock_now_us();
	conn_start(w, h, wu->t, 0);
	return 1;
}

/* ---- the sink's loop ------------------------------------------------------------------ */

void wire_ready(struct wire *w, struct wire_conn *c, uint32_t events)
{
	switch (c->state) {
	case CONN_DEAD:
		return; /* closed earlier in this epoll batch */
	case CONN_IDLE:
		/* the server closed it, or sent what nobody asked for; over TLS it may also
		 * be a session ticket, which OpenSSL takes without a byte for us */
		if (c->tls && !(events & (EPOLLERR | EPOLLHUP))) {
			char err[TLS_ERR_LEN];
			enum transport_error te;
			int sys_errno;
			size_t n;
			enum tls_step st = tls_link_read(c->tls, w->rbuf, sizeof(w->rbuf), &n,
							 &sys_errno, &te, err, sizeof(err));
			if (st == TLS_WANT_READ && !tls_link_pending(c->tls))
				return;
			c->tls_broken = st == TLS_FAILED || st == TLS_SYSCALL;
		} else {
			c->tls_broken = 1;
		}
		conn_close(w, c);
		return;
	case CONN_CONNECTING:
		conn_connected(w, c);
		return;
	case CONN_HANDSHAKE:
		conn_handshake(w, c);
		return;
	case CONN_SENDING:
		if (c->write_wants_read && (events & EPOLLIN)) {
			conn_send(w, c); /* the TLS write waited for this */
		} else if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) {
			/* an early answer (413 before the whole body) or a reset */
			c->state = CONN_READING;
			if (conn_watch(w, c, EPOLLIN))
				conn_fail(w, c, TRANSPORT_OTHER, "epoll_ctl: %s", strerror(errno));
			else
				conn_read(w, c);
		} else {
			conn_send(w, c);
		}
		return;
	case CONN_READING:
		conn_read(w, c);
		return;
	}
}

void wire_expire(struct wire *w, int64_t now_us)
{
	struct dheap_node *top;
	while ((top = dheap_top(&w->deadlines)) && top->at_us <= now_us) {
		struct wire_conn *c = conn_of_node(top);
		long long ms = (now_us - c->start_us) / 1000;
		if (c->state == CONN_CONNECTING && now_us < c->connect_end_us) {
			conn_reconnect(w, c, now_us);
			continue;
		}
		if (c->state == CONN_CONNECTING || c->state == CONN_HANDSHAKE)
			conn_fail(w, c, TRANSPORT_TIMEOUT, "Connection timed out after %lld milliseconds",
				  ms);
		else
			conn_fail(w, c, TRANSPORT_TIMEOUT,
				  "Operation timed out after %lld milliseconds with %zu bytes received",
				  ms, c->got_bytes);
	}
}

int64_t wire_due_us(const struct wire *w)
{
	return dheap_due_us(&w->deadlines);
}

void wire_cancel(struct wire *w, struct http_round *h)
{
	struct wire_conn *c = h->conn;
	if (!c)
		return;
	h->conn = NULL;
	OPENSSL_cleanse(h->whead, h->whead_len);
	h->whead_len = 0;
	conn_close(w, c);
}

void wire_round_free(struct http_round *h)
{
	wire_round_free_url(h);
	if (h->whead) {
		OPENSSL_cleanse(h->whead, h->whead_cap);
		free(h->whead);
	}
	h->whead = NULL;
	h->whead_cap = h->whead_len = 0;
}

void wire_learn(struct wire *w, const char *url, const struct subscription *s, CURL *easy)
{
	struct url_parts u;
	char *ip = NULL;
	long port = 0;
	int oom;
	if (wire_url_split(url, &u))
		return;
	struct tls_conf *conf = conf_of(w, s, u.tls, NULL, &oom);
	if (oom)
		return;
	struct wire_target *t = target_get(w, &u, conf);
	int64_t now_ms = clock_mono_ms();
	if (!t || t->literal || target_fresh(t, now_ms))
		return;
	if (curl_easy_getinfo(easy, CURLINFO_PRIMARY_IP, &ip) != CURLE_OK || !ip ||
	    curl_easy_getinfo(easy, CURLINFO_PRIMARY_PORT, &port) != CURLE_OK || port != t->port)
		return;
	struct sockaddr_storage addr;
	socklen_t addrlen = 0;
	if (wire_addr_from_text(ip, (int)port, &addr, &addrlen))
		return;
	if (t->addrlen != addrlen || memcmp(&t->addr, &addr, addrlen) != 0) {
		/* a new address: the connections to the old one go */
		while (t->idle) {
			conn_close(w, t->idle);
		}
		t->addr = addr;
		t->addrlen = addrlen;
	}
	t->learned_ms = now_ms;
}

struct prune_ctx {
	struct wire *w;
	int64_t now_ms;
};

/* hc_sweep visitor: closes the target's connections idle too long; keeps the target. */
static int prune_target(struct hc_node *n, void *arg)
{
	struct prune_ctx *p = arg;
	struct wire_conn *c = target_of(n)->idle;
	while (c) {
		struct wire_conn *next = c->next;
		if (p->now_ms - c->idle_since_ms >= IDLE_MAX_MS)
			conn_close(p->w, c);
		c = next;
	}
	return 0;
}

/* hc_sweep visitor: closes and frees the target (ctx: the wire). */
static int drop_target(struct hc_node *n, void *arg)
{
	struct wire *w = arg;
	struct wire_target *t = target_of(n);
	while (t->idle)
		conn_close(w, t->idle);
	tls_resume_clear(&t->resume);
	free(t->authority);
	free(t->host);
	free(t);
	return 1;
}

void wire_prune(struct wire *w, int64_t now_ms)
{
	struct prune_ctx p = {w, now_ms};
	hc_sweep(&w->targets, prune_target, &p);
}

struct wire *wire_open(struct http_sink *hs, int max_idle, const char *ca_file,
		       const char *ca_path)
{
	struct wire *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	if (!(w->tls_confs = tls_confs_open(ca_file, ca_path))) {
		free(w);
		return NULL;
	}
	w->hs = hs;
	w->max_idle = max_idle;
	http_parser_settings_init(&w->settings);
	w->settings.on_message_begin = on_message_begin;
	w->settings.on_header_field = on_header_field;
	w->settings.on_header_value = on_header_value;
	w->settings.on_headers_complete = on_headers_complete;
	w->settings.on_body = on_body;
	w->settings.on_message_complete = on_message_complete;
	return w;
}

void wire_close(struct wire *w)
{
	if (!w)
		return;
	hc_sweep(&w->targets, drop_target, w);
	hc_free(&w->targets);
	wire_reap(w);
	tls_confs_close(w->tls_confs);
	dheap_free(&w->deadlines);
	free(w);
}
