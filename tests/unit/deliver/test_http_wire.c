/* test_http_wire.c: the HTTP sink's lean HTTP/1.1 client (deliver/http_wire.c), driven
 * through the sink's ops against a scripted raw TCP server on 127.0.0.1: the request it
 * writes (request line, Host, Content-Length, the webhook headers, no Expect, the body),
 * keep-alive reuse, chunked and read-until-close bodies (the cause keeps the first KiB),
 * an interim 100 before the answer, Retry-After (also on a reused connection), a stale
 * kept-alive connection retried once on a fresh one, empty and malformed replies, the
 * timeout, a refused connection, the SSRF guard, abort, and lean=0 (libcurl) alike; and
 * the lean client's allocation budget (none per request, a signature's own).
 *
 * The server answers the Nth request it reads, whatever the connection, with the Nth
 * scripted reply; it must not answer anything the client did not ask for. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "alloc_count.h"
#include "harness.h"
#include "core/config.h"
#include "deliver/sink.h"

#define PAYLOAD "{\"order\":42,\"items\":[\"a\",\"b\"]}"
#define EVENT_ID "0190f7a8-1111-7000-8000-000000000001"
#define TEST_DEADLINE_MS 5000
#define MAX_CONNS 8
#define MAX_SEEN 16
#define URL "http://127.0.0.1:%d/path?q=1"

static int64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

/* ---- the scripted server --------------------------------------------------------------- */

struct reply {
	const char *parts[6];   /* written in turn, gap_ms apart; NULL ends */
	const char *text;       /* or this, in slices of piece bytes, gap_ms apart */
	size_t piece;
	int gap_ms;
	int close_after;        /* the server closes the connection once it has answered */
	int hang;               /* never answers; the connection stays open */
};

struct seen {
	char *bytes;            /* the raw request, NUL-terminated */
	size_t len;
	int conn;               /* the number of the accept it came on */
};

struct server {
	int lfd, port;
	pthread_t thread;
	atomic_int stop;
	const struct reply *replies;
	size_t n_replies;
	atomic_int stall_ms;    /* a new connection is not read from for this long */
	pthread_mutex_t mu;     /* guards what follows */
	struct seen seen[MAX_SEEN];
	int n_seen, accepts, closes;
};

struct sconn {
	int fd, id, hung;
	int64_t read_from_ms;   /* stall_ms after its accept */
	char *buf;
	size_t len, cap;
};

static void send_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
		if (n <= 0)
			return; /* the client went away: its test says so */
		p += n;
		len -= (size_t)n;
	}
}

/* The length of the first complete request in c's buffer, 0 when not all there yet. */
static size_t request_len(const struct sconn *c)
{
	const char *end = memmem(c->buf, c->len, "\r\n\r\n", 4);
	if (!end)
		return 0;
	size_t head = (size_t)(end - c->buf) + 4;
	size_t body = 0;
	char saved = c->buf[head - 1];
	c->buf[head - 1] = '\0';
	const char *cl = strcasestr(c->buf, "\r\nContent-Length:");
	if (cl)
		body = strtoul(cl + 17, NULL, 10);
	c->buf[head - 1] = saved;
	return c->len >= head + body ? head + body : 0;
}

/* Answers with r; 1 when the connection is to be closed. */
static int answer(struct sconn *c, const struct reply *r)
{
	if (r->hang) {
		c->hung = 1;
		return 0;
	}
	for (int i = 0; i < 6 && r->parts[i]; i++) {
		if (i && r->gap_ms)
			sleep_ms(r->gap_ms);
		send_all(c->fd, r->parts[i], strlen(r->parts[i]));
	}
	if (r->text) {
		size_t len = strlen(r->text);
		for (size_t o = 0; o < len; o += r->piece) {
			if (o && r->gap_ms)
				sleep_ms(r->gap_ms);
			send_all(c->fd, r->text + o, len - o < r->piece ? len - o : r->piece);
		}
	}
	return r->close_after;
}

/* Reads what c has; records and answers each complete request. 1 when c is to close. */
static int serve(struct server *s, struct sconn *c)
{
	if (c->cap - c->len < 4096) {
		size_t cap = c->cap ? c->cap * 2 : 8192;
		char *grown = realloc(c->buf, cap + 1);
		if (!grown || cap > (16u << 20))
			abort(); /* no cmocka asserts off the test's thread */
		c->buf = grown;
		c->cap = cap;
	}
	ssize_t n = recv(c->fd, c->buf + c->len, c->cap - c->len, 0);
	if (n <= 0)
		return 1;
	c->len += (size_t)n;
	size_t rl;
	while (!c->hung && (rl = request_len(c))) {
		pthread_mutex_lock(&s->mu);
		int k = s->n_seen;
		if (k < MAX_SEEN) {
			struct seen *sn = &s->seen[s->n_seen++];
			sn->bytes = malloc(rl + 1);
			memcpy(sn->bytes, c->buf, rl);
			sn->bytes[rl] = '\0';
			sn->len = rl;
			sn->conn = c->id;
		}
		pthread_mutex_unlock(&s->mu);
		memmove(c->buf, c->buf + rl, c->len - rl);
		c->len -= rl;
		if ((size_t)k >= s->n_replies) /* nothing scripted: a failure the test sees */
			return 1;
		if (answer(c, &s->replies[k])) {
			pthread_mutex_lock(&s->mu);
			s->closes++;
			pthread_mutex_unlock(&s->mu);
			return 1;
		}
	}
	return 0;
}

static void *server_main(void *arg)
{
	struct server *s = arg;
	struct sconn conns[MAX_CONNS];
	int n = 0;

	while (!atomic_load(&s->stop)) {
		struct pollfd pfd[MAX_CONNS + 1] = {{.fd = s->lfd, .events = POLLIN}};
		for (int i = 0; i < n; i++)
			pfd[i + 1] = (struct pollfd){.fd = conns[i].fd,
						     .events = mono_ms() >= conns[i].read_from_ms ? POLLIN : 0};
		if (poll(pfd, (nfds_t)n + 1, 20) <= 0)
			continue;
		for (int i = n - 1; i >= 0; i--) {
			if (!pfd[i + 1].revents || !serve(s, &conns[i]))
				continue;
			close(conns[i].fd);
			free(conns[i].buf);
			conns[i] = conns[--n];
		}
		if ((pfd[0].revents & POLLIN) && n < MAX_CONNS) {
			int fd = accept(s->lfd, NULL, NULL);
			if (fd < 0)
				continue;
			int one = 1;
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			pthread_mutex_lock(&s->mu);
			conns[n++] = (struct sconn){.fd = fd, .id = s->accepts++,
						    .read_from_ms = mono_ms() + atomic_load(&s->stall_ms)};
			pthread_mutex_unlock(&s->mu);
		}
	}
	for (int i = 0; i < n; i++) {
		close(conns[i].fd);
		free(conns[i].buf);
	}
	return NULL;
}

/* A listening socket on 127.0.0.1 and a free port; *port_out gets the port. */
static int listen_local(int *port_out)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	*port_out = ntohs(a.sin_port);
	return fd;
}

static void server_start(struct server *s, const struct reply *replies, size_t n)
{
	memset(s, 0, sizeof(*s));
	s->lfd = listen_local(&s->port);
	assert_int_equal(listen(s->lfd, 16), 0);
	s->replies = replies;
	s->n_replies = n;
	pthread_mutex_init(&s->mu, NULL);
	assert_int_equal(pthread_create(&s->thread, NULL, server_main, s), 0);
}

static void server_stop(struct server *s)
{
	atomic_store(&s->stop, 1);
	pthread_join(s->thread, NULL);
	close(s->lfd);
	for (int i = 0; i < s->n_seen; i++)
		free(s->seen[i].bytes);
	pthread_mutex_destroy(&s->mu);
}

static int server_get(struct server *s, const int *field)
{
	pthread_mutex_lock(&s->mu);
	int v = *field;
	pthread_mutex_unlock(&s->mu);
	return v;
}

/* ---- the client: the HTTP sink, driven as the dispatcher drives it ---------------------- */

struct client {
	struct sink *s;
	struct config cfg;           /* borrowed by the sink: lives as long */
	struct store_claim claim;
	struct subscription sub;
	struct sink_round r;
	char url[128];
	char message[SINK_MSG_LEN], cause[SINK_CAUSE_LEN];
	uint64_t rng;
	int done, abandoned;
};

static void done_cb(void *ctx, struct sink_round *j)
{
	struct client *c = ctx;
	if (j == &c->r)
		c->done++;
}

static void abandoned_cb(void *ctx, struct sink_round *j)
{
	struct client *c = ctx;
	if (j == &c->r)
		c->abandoned++;
}

/* allow: the SSRF allowlist; url: printf format taking the port. */
static void client_open(struct client *c, int lean, const char *allow, const char *url, int port)
{
	char err[256];
	memset(c, 0, sizeof(*c));
	c->cfg.max_in_flight = 8;
	c->cfg.lean_http = lean;
	c->cfg.connect_timeout_ms = 3000;
	c->cfg.ssrf_allow = (char *)allow;
	c->s = sink_open(sink_type_by_name("http"), &c->cfg, err, sizeof(err));
	assert_non_null(c->s);
	struct sink_env env = {.done = done_cb, .abandoned = abandoned_cb, .ctx = c, .slot = 0};
	sink_attach(c->s, &env);

	snprintf(c->url, sizeof(c->url), url, port);
	snprintf(c->claim.delivery_id, UUID_STR_LEN, "0190f7a8-2222-7000-8000-000000000002");
	snprintf(c->claim.event_id, UUID_STR_LEN, EVENT_ID);
	c->claim.event_type = "order.created";
	c->claim.content_type = "application/json";
	c->claim.payload = PAYLOAD;
	c->claim.payload_len = strlen(PAYLOAD);
	c->sub.endpoint = c->url;
	c->sub.auth_type = AUTH_NONE;
	c->sub.payload_format = PAYLOAD_JSON;
	c->sub.enabled = 1;
	c->rng = 0x9e3779b97f4a7c15ull;
	c->r.claim = &c->claim;
	c->r.sub = &c->sub;
	c->r.attempt_no = 1;
	c->r.timeout_ms = 5000;
	c->r.rng = &c->rng;
	c->r.span_id = 0x1234;
	c->r.message = c->message;
	c->r.cause = c->cause;
}

static void client_close(struct client *c)
{
	sink_slot_free(c->s, &c->r);
	sink_close(c->s);
}

/* One turn of the dispatcher's loop: wait on the sink's fd (at most max_ms), then run. */
static void pump(struct client *c, int max_ms)
{
	int64_t wait = sink_wait_us(c->s, mono_ms() * 1000);
	int ms = wait < 0 ? max_ms : (int)((wait + 999) / 1000);
	struct pollfd p = {.fd = sink_fd(c->s), .events = POLLIN};
	poll(&p, 1, ms < max_ms ? ms : max_ms);
	sink_run(c->s);
}

/* Sends one attempt and runs the sink until it is reported; returns how long it took. */
static int64_t client_send(struct client *c, int64_t timeout_ms)
{
	int64_t start = mono_ms();
	c->done = 0;
	c->r.timeout_ms = timeout_ms;
	c->r.code = 0;
	c->r.permanent = 0;
	c->message[0] = c->cause[0] = '\0';
	sink_send(c->s, &c->r);
	while (!c->done && mono_ms() - start < TEST_DEADLINE_MS)
		pump(c, 50);
	assert_int_equal(c->done, 1);
	sink_round_end(c->s, &c->r);
	return mono_ms() - start;
}

/* What a case started, so teardown frees it even when an assert ended the case early. */
struct fixture {
	struct server srv;
	struct client c;
	int srv_on, c_on;
	void *mem[2];
};

static int setup(void **state)
{
	*state = calloc(1, sizeof(struct fixture));
	return *state ? 0 : -1;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	if (f->c_on)
		client_close(&f->c);
	if (f->srv_on)
		server_stop(&f->srv);
	free(f->mem[0]);
	free(f->mem[1]);
	free(f);
	return 0;
}

/* The server with its script, and a client of it (lean: the lean client on). */
static void start(struct fixture *f, const struct reply *replies, size_t n, int lean,
		  const char *allow)
{
	server_start(&f->srv, replies, n);
	f->srv_on = 1;
	client_open(&f->c, lean, allow, URL, f->srv.port);
	f->c_on = 1;
}

/* A counter's value from GET /metrics: key is its name with labels (asserted rendered). */
static long metric(const char *key)
{
	double v = harness_metric(key);
	assert_true(v >= 0);
	return (long)v;
}

/* The requests sent so far by lean (1) or libcurl (0). */
static long http_requests(int lean)
{
	return metric(lean ? "outboxd_http_requests_total{client=\"lean\"}"
			   : "outboxd_http_requests_total{client=\"libcurl\"}");
}

static void assert_ok_outputs(const struct client *c, int code)
{
	char msg[32];
	snprintf(msg, sizeof(msg), "HTTP %d", code);
	assert_int_equal(c->r.code, code);
	assert_string_equal(c->message, msg);
	assert_int_equal(c->r.end_round, 0);
	assert_int_equal(c->r.permanent, 0);
}

/* Waits (at most TEST_DEADLINE_MS) until the server's counter *field reaches n, running the
 * client's sink meanwhile when c is given. */
static void wait_server(struct server *srv, const int *field, int n, struct client *c)
{
	int64_t start = mono_ms();
	while (server_get(srv, field) < n && mono_ms() - start < TEST_DEADLINE_MS) {
		if (c)
			pump(c, 20);
		else
			sleep_ms(5);
	}
}

/* What every request must carry, by either client: the request line, the event's id, no
 * Expect, the payload as the body. */
static void assert_request_basics(const char *req)
{
	assert_true(strncmp(req, "POST /path?q=1 HTTP/1.1\r\n", 25) == 0);
	assert_non_null(strstr(req, "\r\nwebhook-id: " EVENT_ID "\r\n"));
	assert_null(strcasestr(req, "\r\nExpect:"));
	assert_string_equal(strstr(req, "\r\n\r\n") + 4, PAYLOAD);
}

#define OK_200 "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
#define OK_204 "HTTP/1.1 204 No Content\r\n\r\n"

/* ---- the cases ------------------------------------------------------------------------- */

/* The request as libcurl would write it, and the 200 it gets. */
static void test_plain_200(void **state)
{
	static const struct reply replies[] = {{.parts = {OK_200}}};
	struct fixture *f = *state;
	struct server *srv = &f->srv;
	struct client *c = &f->c;
	start(f, replies, 1, 1, "127.0.0.0/8");
	long lean = http_requests(1), curl = http_requests(0);

	client_send(c, 5000);
	assert_ok_outputs(c, 200);
	assert_string_equal(c->cause, "");
	assert_int_equal(c->r.retry_after_ms, -1);
	assert_int_equal(http_requests(1), lean + 1);
	assert_int_equal(http_requests(0), curl);

	assert_int_equal(server_get(srv, &srv->n_seen), 1);
	const char *req = srv->seen[0].bytes;
	char line[64];
	assert_request_basics(req);
	snprintf(line, sizeof(line), "\r\nHost: 127.0.0.1:%d\r\n", srv->port);
	assert_non_null(strstr(req, line));
	snprintf(line, sizeof(line), "\r\nContent-Length: %zu\r\n", strlen(PAYLOAD));
	assert_non_null(strstr(req, line));
	assert_non_null(strstr(req, "\r\nContent-Type: application/json\r\n"));
	assert_non_null(strstr(req, "\r\nUser-Agent: outboxd/0.1\r\n"));
}

/* A body larger than the socket buffers while the server does not read yet: the client
 * waits for the socket to drain (EPOLLOUT) and writes the rest; the server gets it all. */
static void test_large_body_waits_for_room(void **state)
{
	enum { BIG = 4 << 20 };
	static const struct reply replies[] = {{.parts = {OK_200}}};
	struct fixture *f = *state;
	struct server *srv = &f->srv;
	struct client *c = &f->c;
	char *big = f->mem[0] = malloc(BIG);
	assert_non_null(big);
	for (size_t i = 0; i < BIG; i++)
		big[i] = (char)('a' + i % 26);
	start(f, replies, 1, 1, "127.0.0.0/8");
	atomic_store(&srv->stall_ms, 300); /* read at the first accept, which follows */
	c->claim.payload = big;
	c->claim.payload_len = BIG;

	int64_t took = client_send(c, 5000);
	assert_ok_outputs(c, 200);
	assert_true(took >= 250); /* it did wait for the server to read */
	assert_int_equal(server_get(srv, &srv->n_seen), 1);
	const char *req = srv->seen[0].bytes;
	const char *body = strstr(req, "\r\n\r\n") + 4;
	assert_int_equal(srv->seen[0].len - (size_t)(body - req), BIG);
	assert_memory_equal(body, big, BIG);
}

static void test_keep_alive(void **state)
{
	static const struct reply replies[] = {{.parts = {OK_200}}, {.parts = {OK_204}}};
	struct fixture *f = *state;
	struct server *srv = &f->srv;
	struct client *c = &f->c;
	start(f, replies, 2, 1, "127.0.0.0/8");

	client_send(c, 5000);
	assert_ok_outputs(c, 200);
	client_send(c, 5000);
	assert_ok_outputs(c, 204);
	assert_int_equal(server_get(srv, &srv->n_seen), 2);
	assert_int_equal(server_get(srv, &srv->accepts), 1);
	assert_int_equal(srv->seen[1].conn, srv->seen[0].conn);
}

/* A 70,000-byte chunked body in many writes: the cause keeps its first 1023 bytes, the
 * rest is read all the same (the connection serves the next request). */
#define BIG_BODY 70000
#define BIG_CHUNK 1000
static void test_chunked_500(void **state)
{
	static const char head[] = "HTTP/1.1 500 Internal Server Error\r\n"
				   "Transfer-Encoding: chunked\r\n\r\n";
	struct fixture *f = *state;
	char *body = f->mem[0] = malloc(BIG_BODY);
	char *text = f->mem[1] = malloc(sizeof(head) + BIG_BODY + (BIG_BODY / BIG_CHUNK) * 16 + 16);
	assert_non_null(body);
	assert_non_null(text);
	for (size_t i = 0; i < BIG_BODY; i++)
		body[i] = (char)('a' + (i * 7 + i / 26) % 26);
	char *p = text + sprintf(text, "%s", head);
	for (size_t o = 0; o < BIG_BODY; o += BIG_CHUNK) {
		p += sprintf(p, "%x\r\n", BIG_CHUNK);
		memcpy(p, body + o, BIG_CHUNK);
		p += BIG_CHUNK;
		p += sprintf(p, "\r\n");
	}
	sprintf(p, "0\r\n\r\n");
	/* static: the server thread still reads a reply after the client has its answer,
	 * maybe after this function returned */
	static struct reply replies[2];
	replies[0] = (struct reply){.text = text, .piece = 1500, .gap_ms = 1};
	replies[1] = (struct reply){.parts = {OK_200}};
	struct server *srv = &f->srv;
	struct client *c = &f->c;
	start(f, replies, 2, 1, "127.0.0.0/8");

	client_send(c, 5000);
	assert_ok_outputs(c, 500);
	assert_int_equal(strlen(c->cause), SINK_CAUSE_LEN - 1);
	assert_memory_equal(c->cause, body, SINK_CAUSE_LEN - 1);
	client_send(c, 5000);
	assert_ok_outputs(c, 200);
	assert_int_equal(server_get(srv, &srv->accepts), 1);
}

/* No Content-Length: the body ends where the server closes (HTTP/1.1 with Connection:
 * close, then HTTP/1.0). */
static void test_read_until_close(void **state)
{
	static const struct reply replies[] = {
		{.parts = {"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\n\r\n", "upstream gone"},
		 .gap_ms = 20, .close_after = 1},
		{.parts = {"HTTP/1.0 404 Not Found\r\n\r\nno such hook"}, .close_after = 1},
	};
	struct fixture *f = *state;
	struct server *srv = &f->srv;
	struct client *c = &f->c;
	start(f, replies, 2, 1, "127.0.0.0/8");

	client_send(c, 5000);
	assert_ok_outputs(c, 502);
	assert_string_equal(c->cause, "upstream gone");
	client_send(c, 5000);
	assert_ok_outputs(c, 404);
	assert_string_equal(c->cause, "no such hook");
	assert_int_equal(server_get(srv, &srv->accepts), 2);
}

/* An interim 100 is skipped; the header name Retry-After arrives in two writes. */
static void test_interim_100_retry_after(void **state)
{
	static const struct reply replies[] = {
		{.parts = {"HTTP/1.1 100 Continue\r\n\r\n",
			   "HTTP/1.1 503 Service Unavailable\r\nRetry-",
			   "After: 7\r\nContent-Length: 4\r\n\r\nbusy"},
		 .gap_ms = 30},
	};
	struct fixture *f = *state;
	struct client *c = &f->c;
	start(f, replies, 1, 1, "127.0.0.0/8");

	client_send(c, 5000);
	assert_ok_outputs(c, 503);
	assert_string_equal(c->cause, "busy");
	assert_in_range(c->r.retry_after_ms, 6000, 7000);
}

/* Retry-After as the first header of an answer on a kept-alive connection: the header
 * parser must start each answer afresh, whatever the previous answer's last header was. */
static void test_retry_after_on_reused_connection(void **state)
{
	static const struct reply replies[] = {
		{.parts = {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"}},
		{.parts = {"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\n"
			   "Content-Length: 4\r\n\r\nslow"}},
	};
	struct fixture *f = *state;
	struct server *srv = &f->srv;
	struct client *c = &f->c;
	start(f, replies, 2, 1, "127.0.0.0/8");

	client_send(c, 5000);
	assert_ok_outputs(c, 200);
	client_send(c, 5000);
	assert_ok_outputs(c, 429);
	assert_string_equal(c->cause, "slow");
	assert_int_equal(server_get(srv, &srv->accepts), 1);
	assert_in_range(c->r.retry_after_ms, 6000, 7000);
}

/* The server closes a kept-alive connection while it is idle (the client has not run
 * since): the next request dies on it and goes once more on a fresh connection, the
 * attempt's cause saying so. */
static void test_stale_keep_alive(void **state)
{
	static const struct reply replies[] = {
		{.parts = {"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"}, .close_after = 1},
		{.parts = {OK_200}},
	};
	struct fixture *f = *state;
	struct server *srv = &f->srv;
	struct client *c = &f->c;
	start(f, replies, 2, 1, "127.0.0.0/8");

	client_send(c, 5000);
	assert_ok_outputs(c, 200);
	wait_server(srv, &srv->closes, 1, NULL);
	sleep_ms(20); /* the FIN reaches the client's socket */
	long resent = metric("outboxd_http_resent_total");
	client_send(c, 5000);
	assert_ok_outputs(c, 200);
	/* the history says so: a server that had read the first would have it twice */
	assert_non_null(strstr(c->cause, "written again on a new connection"));
	assert_int_equal(server_get(srv, &srv->accepts), 2);
	assert_int_equal(server_get(srv, &srv->n_seen), 2);
	assert_int_equal(metric("outboxd_http_resent_total") - resent, 1);
}

/* A fresh connection closed without a byte of an answer is not retried. */
static void test_empty_reply(void **state)
{
	static const struct reply replies[] = {{.close_after = 1}};
	struct fixture *f = *state;
	struct server *srv = &f->srv;
	struct client *c = &f->c;
	start(f, replies, 1, 1, "127.0.0.0/8");

	client_send(c, 5000);
	assert_int_equal(c->r.code, 520);
	assert_string_equal(c->message, "transport error");
	assert_non_null(strstr(c->cause, "Empty reply from server"));
	assert_int_equal(c->r.permanent, 0);
	assert_int_equal(c->r.end_round, 0);
	assert_int_equal(server_get(srv, &srv->accepts), 1);
	assert_int_equal(server_get(srv, &srv->n_seen), 1);
}

static void test_garbage_reply(void **state)
{
	static const struct reply replies[] = {{.parts = {"garbage\r\n\r\n"}}};
	struct fixture *f = *state;
	struct client *c = &f->c;
	start(f, replies, 1, 1, "127.0.0.0/8");

	client_send(c, 5000);
	assert_int_equal(c->r.code, 520);
	assert_int_equal(strncmp(c->cause, "Weird server reply", 18), 0);
	assert_int_equal(c->r.retry_after_ms, -1);
	assert_int_equal(c->r.permanent, 0);
}

static void test_timeout(void **state)
{
	static const struct reply replies[] = {{.hang = 1}};
	struct fixture *f = *state;
	struct client *c = &f->c;
	start(f, replies, 1, 1, "127.0.0.0/8");

	int64_t took = client_send(c, 300);
	assert_int_equal(c->r.code, 504);
	assert_string_equal(c->message, "timeout");
	assert_non_null(strstr(c->cause, "timed out"));
	assert_in_range(took, 250, 3000);
	assert_int_equal(sink_busy(c->s), 0);
}

static void test_refused(void **state)
{
	int port;
	close(listen_local(&port)); /* bound once, nobody listens there now */
	struct fixture *f = *state;
	struct client *c = &f->c;
	client_open(c, 1, "127.0.0.0/8", URL, port);
	f->c_on = 1;

	client_send(c, 5000);
	assert_int_equal(c->r.code, 503);
	assert_string_equal(c->message, "connection refused");
	assert_non_null(strstr(c->cause, "Failed to connect"));
	assert_int_equal(c->r.permanent, 0);
	assert_int_equal(sink_busy(c->s), 0);
}

static void test_ssrf_refused(void **state)
{
	static const struct reply replies[] = {{.parts = {OK_200}}};
	struct fixture *f = *state;
	struct server *srv = &f->srv;
	struct client *c = &f->c;
	start(f, replies, 1, 1, "");

	client_send(c, 5000);
	assert_int_equal(c->r.code, 403);
	assert_int_equal(c->r.permanent, 1);
	assert_string_equal(c->message, "refused by the SSRF guard");
	assert_non_null(strstr(c->cause, "SSRF guard refused to connect to loopback address 127.0.0.1"));
	assert_int_equal(sink_busy(c->s), 0);
	sleep_ms(50);
	assert_int_equal(server_get(srv, &srv->accepts), 0);
}

static void test_abort(void **state)
{
	static const struct reply replies[] = {{.hang = 1}};
	struct fixture *f = *state;
	struct server *srv = &f->srv;
	struct client *c = &f->c;
	start(f, replies, 1, 1, "127.0.0.0/8");

	sink_send(c->s, &c->r);
	wait_server(srv, &srv->n_seen, 1, c);
	assert_int_equal(server_get(srv, &srv->n_seen), 1);
	assert_int_equal(sink_busy(c->s), 1);
	sink_abort(c->s);
	assert_int_equal(c->abandoned, 1);
	assert_int_equal(sink_busy(c->s), 0);
	for (int i = 0; i < 5; i++) /* nothing more is reported for it */
		pump(c, 10);
	assert_int_equal(c->abandoned, 1);
	assert_int_equal(c->done, 0);
}

/* lean=0: everything over libcurl, the same request on the wire. */
static void test_libcurl(void **state)
{
	static const struct reply replies[] = {{.parts = {OK_200}}, {.parts = {OK_200}}};
	struct fixture *f = *state;
	struct server *srv = &f->srv;
	struct client *c = &f->c;
	start(f, replies, 2, 0, "127.0.0.0/8");
	long lean = http_requests(1), curl = http_requests(0);

	for (int i = 0; i < 2; i++) {
		client_send(c, 5000);
		assert_ok_outputs(c, 200);
		assert_string_equal(c->cause, "");
	}
	assert_int_equal(http_requests(1), lean);
	assert_int_equal(http_requests(0), curl + 2);
	assert_int_equal(server_get(srv, &srv->n_seen), 2);
	assert_request_basics(srv->seen[0].bytes);
}

/* An address spelt another way than libcurl writes it (127.1 is 127.0.0.1) is left to
 * libcurl, every time: the two clients send the same Host. */
static void test_other_spellings_to_libcurl(void **state)
{
	static const struct reply replies[] = {{.parts = {OK_200}}, {.parts = {OK_200}}};
	struct fixture *f = *state;
	struct server *srv = &f->srv;
	struct client *c = &f->c;
	server_start(srv, replies, 2);
	f->srv_on = 1;
	client_open(c, 1, "127.0.0.0/8", "http://127.1:%d/path?q=1", srv->port);
	f->c_on = 1;
	long lean = http_requests(1), curl = http_requests(0);

	for (int i = 0; i < 2; i++) {
		client_send(c, 5000);
		assert_ok_outputs(c, 200);
	}
	assert_int_equal(http_requests(1), lean);
	assert_int_equal(http_requests(0), curl + 2);
	char line[64];
	snprintf(line, sizeof(line), "\r\nHost: 127.0.0.1:%d\r\n", srv->port);
	for (int i = 0; i < 2; i++)
		assert_non_null(strstr(srv->seen[i].bytes, line));
}

/* n requests answered 200, and the allocations this thread made for them. */
static long counted_sends(struct client *c, int n)
{
	alloc_count_reset();
	for (int i = 0; i < n; i++) {
		alloc_count_begin();
		client_send(c, 5000);
		alloc_count_end();
		assert_ok_outputs(c, 200);
	}
	return alloc_count_end();
}

/* The lean client allocates nothing per request on a kept-alive connection: the request
 * head is written into the connection's buffer, the answer read into it, the headers
 * parsed in place; a signed request adds what OpenSSL's HMAC allocates. Counted on this
 * thread (the dispatcher's, here; the server's thread is not counted) over 200 requests
 * after 4 that set the connection and its buffers up. */
#define LEAN_ALLOCS_PER_REQUEST 0 /* the budget this test holds the lean client to */
/* OpenSSL 3's HMAC allocates on every HMAC_Init_ex, even of a kept context (it frees and
 * makes its digests' provider contexts again): a signature's share of the budget */
#define SIGNATURE_ALLOCS 6
static void test_lean_allocation_budget(void **state)
{
	enum { WARM = 4, COUNTED = 200 };
	static struct reply replies[MAX_SEEN + 1]; /* past MAX_SEEN the last one answers */
	struct fixture *f = *state;
	struct client *c = &f->c;

	if (!alloc_count_available())
		skip();
	for (int i = 0; i <= MAX_SEEN; i++)
		replies[i] = (struct reply){.parts = {OK_200}};
	start(f, replies, MAX_SEEN + 1, 1, "127.0.0.0/8");
	for (int i = 0; i < WARM; i++)
		client_send(c, 5000);
	long allocs = counted_sends(c, COUNTED);
	fprintf(stderr, "lean client: %ld allocations for %d requests\n", allocs, COUNTED);
	assert_true(allocs <= LEAN_ALLOCS_PER_REQUEST * COUNTED);

	/* signed (Standard Webhooks, HMAC-SHA256) the same */
	c->sub.secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
	client_send(c, 5000);
	allocs = counted_sends(c, COUNTED);
	fprintf(stderr, "lean client, signed: %ld allocations for %d requests\n", allocs, COUNTED);
	assert_true(allocs <= (LEAN_ALLOCS_PER_REQUEST + SIGNATURE_ALLOCS) * COUNTED);
	assert_int_equal(server_get(&f->srv, &f->srv.accepts), 1);
}

int main(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_plain_200, setup, teardown),
		cmocka_unit_test_setup_teardown(test_large_body_waits_for_room, setup, teardown),
		cmocka_unit_test_setup_teardown(test_keep_alive, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chunked_500, setup, teardown),
		cmocka_unit_test_setup_teardown(test_read_until_close, setup, teardown),
		cmocka_unit_test_setup_teardown(test_interim_100_retry_after, setup, teardown),
		cmocka_unit_test_setup_teardown(test_retry_after_on_reused_connection, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stale_keep_alive, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_reply, setup, teardown),
		cmocka_unit_test_setup_teardown(test_garbage_reply, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ssrf_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_abort, setup, teardown),
		cmocka_unit_test_setup_teardown(test_libcurl, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_spellings_to_libcurl, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lean_allocation_budget, setup, teardown),
	};
	int failed = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return failed;
}
