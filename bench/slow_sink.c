/* slow_sink.c: bench_slow_sink, the subscriber of the "slow receivers" row of `make bench`
 * (bench/run.sh): an HTTP/1.1 server that answers every POST with 200 after a
 * fixed delay (--delay-ms, default 1000) and holds thousands of such requests at once.
 *
 * One thread, one epoll set, non-blocking sockets, keep-alive. Since the delay is the same
 * for every request, the requests waiting for their answer form a FIFO ordered by due
 * time: the loop sleeps until the head is due (epoll_wait's timeout) and answers from the
 * head. Nothing sleeps per request, so the number held is bounded by file descriptors
 * only (RLIMIT_NOFILE is raised to its hard limit at start), not by threads as in
 * tests/support/receiver.c.
 *
 * It parses just enough HTTP/1.1 for a benchmark: the request line, headers up to the
 * blank line (Content-Length, Connection: close, Expect: 100-continue), and a
 * Content-Length body, which it discards. No chunked bodies (411), no TLS.
 *
 *   GET  /_count   at once: {"count":N,"first_us":..,"last_us":..,"max_pending":..,
 *                  "pending":..,"connections":..,"max_connections":..}
 *                  count: POSTs answered; first_us/last_us: CLOCK_REALTIME µs of the first
 *                  and last answer (the clock bench_loadgen stamps ingest with);
 *                  max_pending: the most requests waiting for their answer at once.
 *   POST /_reset   at once: zeroes the counters.
 *   POST anything  200 "ok" after the delay.
 *
 * It plays a slow subscriber and nothing else: no outboxd code, no dependencies beyond
 * libc, and it must not look at bodies.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define HEAD_MAX   (64u << 10)  /* request line + headers; longer: 431 and close */
#define IN_FIRST   2048         /* first size of a connection's input buffer */
#define EVENTS     1024         /* ready sockets taken per epoll_wait */
#define BACKLOG    65535        /* the kernel caps it at net.core.somaxconn */

/* One client connection. At most one request at a time is being answered (clients that
 * pipeline wait: what follows stays in the buffer until the answer is written). */
struct conn {
	int fd;
	char *in;                    /* bytes read, not yet consumed */
	size_t in_len, in_cap;
	size_t body_left;            /* body bytes of the current request still to discard */
	int have_head;               /* the current request's head is parsed */
	int is_post;                 /* the current request gets the delayed 200 */
	int close_after;             /* Connection: close */
	int pending;                 /* in the FIFO, waiting for its due time */
	int ends;                    /* what is being written ends the request */
	char path[64];               /* the current request's path, truncated (only the
	                                control paths matter) */
	int64_t due_us;              /* monotonic */
	struct conn *pnext, *pprev;  /* the FIFO */
	const char *out;             /* what is being written (static or out_owned) */
	size_t out_len;
	char *out_owned;
	int want_out;                /* EPOLLOUT is on */
};

static struct {
	int epfd, lfd;
	int64_t delay_us;
	struct conn **conns;         /* by fd */
	size_t conns_cap;
	struct conn *head, *tail;    /* the FIFO of requests waiting for their answer */
	uint64_t count;              /* POSTs answered */
	int64_t first_us, last_us;   /* realtime of the first and last answer */
	long pending, max_pending;
	long connections, max_connections;
} S;

static const char OK_RESPONSE[] =
	"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
static const char OK_CLOSE_RESPONSE[] =
	"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n"
	"Connection: close\r\n\r\nok";
static const char CONTINUE_RESPONSE[] = "HTTP/1.1 100 Continue\r\n\r\n";

static int64_t mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static int64_t realtime_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		S.conns_cap = (size_t)rl.rlim_cur;
	if (S.conns_cap < 1024)
		S.conns_cap = 1024;
}

/* ---- the FIFO ----------------------------------------------------------------------- */

static void fifo_push(struct conn *c)
{
	c->pending = 1;
	c->due_us = mono_us() + S.delay_us;
	c->pnext = NULL;
	c->pprev = S.tail;
	if (S.tail)
		S.tail->pnext = c;
	else
		S.head = c;
	S.tail = c;
	if (++S.pending > S.max_pending)
		S.max_pending = S.pending;
}

static void fifo_unlink(struct conn *c)
{
	if (!c->pending)
		return;
	if (c->pprev)
		c->pprev->pnext = c->pnext;
	else
		S.head = c->pnext;
	if (c->pnext)
		c->pnext->pprev = c->pprev;
	else
		S.tail = c->pprev;
	c->pnext = c->pprev = NULL;
	c->pending = 0;
	S.pending--;
}

/* ---- connections -------------------------------------------------------------------- */

static void conn_close(struct conn *c)
{
	fifo_unlink(c);
	S.conns[c->fd] = NULL;
	close(c->fd); /* leaves the epoll set with it */
	free(c->in);
	free(c->out_owned);
	free(c);
	S.connections--;
}

static void conn_watch(struct conn *c, int want_out)
{
	if (want_out == c->want_out)
		return;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (want_out ? EPOLLOUT : 0),
				 .data.fd = c->fd};
	epoll_ctl(S.epfd, EPOLL_CTL_MOD, c->fd, &ev);
	c->want_out = want_out;
}

static void handle_input(struct conn *c);

/* Writes what is left of c->out; 0 when all of it is written (or the connection is
 * closed: *closed), 1 when the socket is full (EPOLLOUT will say when to go on). */
static int conn_flush(struct conn *c, int *closed)
{
	*closed = 0;
	while (c->out_len) {
		ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			conn_watch(c, 1);
			return 1;
		}
		if (n <= 0) {
			conn_close(c);
			*closed = 1;
			return 0;
		}
		c->out += n;
		c->out_len -= (size_t)n;
	}
	free(c->out_owned);
	c->out_owned = NULL;
	c->out = NULL;
	conn_watch(c, 0);
	return 0;
}

/* Writes what is queued; once it is all out, a response that ended its request lets the
 * next request in the buffer be looked at (or closes, on Connection: close). */
static void conn_progress(struct conn *c)
{
	int closed;
	if (conn_flush(c, &closed) || closed)
		return;
	if (c->ends) {
		c->ends = 0;
		c->have_head = 0;
		if (c->close_after) {
			conn_close(c);
			return;
		}
	}
	handle_input(c);
}

/* Queues text (static, or owned: freed when written) and writes what the socket takes. */
static void conn_send(struct conn *c, const char *text, size_t len, char *owned, int ends)
{
	c->out = text;
	c->out_len = len;
	c->out_owned = owned;
	c->ends = ends;
	conn_progress(c);
}

static void answer_now(struct conn *c, int status, const char *reason, const char *body)
{
	char *r = NULL;
	int n = asprintf(&r, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s\r\n%s",
			 status, reason, body[0] == '{' ? "application/json" : "text/plain",
			 strlen(body), c->close_after ? "Connection: close\r\n" : "", body);
	if (n < 0) {
		conn_close(c);
		return;
	}
	conn_send(c, r, (size_t)n, r, 1);
}

/* The request's head and body are in: a POST waits in the FIFO, control paths answer. */
static void request_complete(struct conn *c)
{
	const char *path = c->path;
	if (!c->is_post) {
		if (strcmp(path, "/_count") == 0) {
			char body[320];
			snprintf(body, sizeof(body),
				 "{\"count\":%" PRIu64 ",\"first_us\":%" PRId64 ",\"last_us\":%" PRId64
				 ",\"max_pending\":%ld,\"pending\":%ld,\"connections\":%ld,"
				 "\"max_connections\":%ld,\"delay_ms\":%" PRId64 "}",
				 S.count, S.first_us, S.last_us, S.max_pending, S.pending,
				 S.connections, S.max_connections, S.delay_us / 1000);
			answer_now(c, 200, "OK", body);
		} else {
			answer_now(c, 404, "Not Found", "not found");
		}
		return;
	}
	if (strcmp(path, "/_reset") == 0) {
		S.count = 0;
		S.first_us = S.last_us = 0;
		S.max_pending = S.pending;
		S.max_connections = S.connections;
		answer_now(c, 200, "OK", "{\"reset\":true}");
		return;
	}
	fifo_push(c);
}

/* Looks for a header (name with its colon, lowercase) in the head; its value or NULL. */
static const char *header_value(const char *head, size_t head_len, const char *name,
				size_t *vlen)
{
	size_t nlen = strlen(name);
	const char *p = memchr(head, '\n', head_len);   /* skip the request line */
	const char *end = head + head_len;
	while (p && p + 1 < end) {
		p++;
		const char *eol = memchr(p, '\n', (size_t)(end - p));
		if (!eol)
			break;
		if ((size_t)(eol - p) > nlen && strncasecmp(p, name, nlen) == 0) {
			const char *v = p + nlen;
			while (v < eol && (*v == ' ' || *v == '\t'))
				v++;
			const char *ve = eol;
			while (ve > v && (ve[-1] == '\r' || ve[-1] == ' '))
				ve--;
			*vlen = (size_t)(ve - v);
			return v;
		}
		p = eol;
	}
	return NULL;
}

/* Parses what the buffer holds: a head, then discards the body; a complete request is
 * answered (control) or queued (POST). Does nothing while a request is being answered. */
static void handle_input(struct conn *c)
{
	if (c->pending || c->out_len)
		return;
	if (!c->have_head) {
		char *end = c->in_len >= 4 ? memmem(c->in, c->in_len, "\r\n\r\n", 4) : NULL;
		if (!end) {
			if (c->in_len >= HEAD_MAX) {
				c->close_after = 1;
				answer_now(c, 431, "Request Header Fields Too Large", "too large");
			}
			return;
		}
		size_t head_len = (size_t)(end - c->in) + 4;
		char method[16] = "";
		const char *sp1 = memchr(c->in, ' ', head_len);
		const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', head_len - (size_t)(sp1 + 1 - c->in)) : NULL;
		if (!sp1 || !sp2 || sp1 - c->in >= (long)sizeof(method)) {
			c->close_after = 1;
			answer_now(c, 400, "Bad Request", "bad request line");
			return;
		}
		memcpy(method, c->in, (size_t)(sp1 - c->in));
		size_t plen = (size_t)(sp2 - sp1 - 1);
		if (plen >= sizeof(c->path))
			plen = sizeof(c->path) - 1;
		memcpy(c->path, sp1 + 1, plen);
		c->path[plen] = '\0';
		char *q = strchr(c->path, '?');
		if (q)
			*q = '\0';
		size_t vlen = 0;
		const char *v;
		c->close_after = (v = header_value(c->in, head_len, "connection:", &vlen)) &&
				 vlen == 5 && strncasecmp(v, "close", 5) == 0;
		if ((v = header_value(c->in, head_len, "transfer-encoding:", &vlen)) &&
		    !(vlen == 8 && strncasecmp(v, "identity", 8) == 0)) {
			c->close_after = 1;
			answer_now(c, 411, "Length Required", "chunked bodies are not supported");
			return;
		}
		c->body_left = (v = header_value(c->in, head_len, "content-length:", &vlen))
				       ? strtoull(v, NULL, 10) : 0;
		int expect = (v = header_value(c->in, head_len, "expect:", &vlen)) &&
			     vlen == 12 && strncasecmp(v, "100-continue", 12) == 0;
		c->is_post = strcmp(method, "POST") == 0;
		c->have_head = 1;
		memmove(c->in, c->in + head_len, c->in_len - head_len);
		c->in_len -= head_len;
		if (c->in_len < c->body_left && expect) {
			/* the client waits for this before it sends the body */
			conn_send(c, CONTINUE_RESPONSE, sizeof(CONTINUE_RESPONSE) - 1, NULL, 0);
			return; /* conn_send went on with the buffer once it was written */
		}
	}
	size_t take = c->in_len < c->body_left ? c->in_len : c->body_left;
	memmove(c->in, c->in + take, c->in_len - take);
	c->in_len -= take;
	c->body_left -= take;
	if (c->body_left)
		return;
	request_complete(c);
	/* a control answer went on with the buffer itself (conn_send); a POST waits */
}

/* Reads what the socket has; closes on EOF or an error. */
static void conn_read(struct conn *c)
{
	for (;;) {
		if (c->in_len == c->in_cap) {
			if (c->in_cap >= HEAD_MAX + 4096) {
				/* A client sending far ahead of its answers: stop reading it until
				 * the buffer drains (level-triggered epoll would spin otherwise). */
				if (c->pending || c->out_len)
					return;
				c->close_after = 1;
				answer_now(c, 431, "Request Header Fields Too Large", "too large");
				return;
			}
			size_t cap = c->in_cap ? c->in_cap * 2 : IN_FIRST;
			char *grown = realloc(c->in, cap);
			if (!grown) {
				conn_close(c);
				return;
			}
			c->in = grown;
			c->in_cap = cap;
		}
		ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			break;
		if (n <= 0) {
			conn_close(c); /* EOF (a client that timed out) or reset */
			return;
		}
		c->in_len += (size_t)n;
		if (c->in_len < c->in_cap)
			break;
	}
	handle_input(c);
}

static void accept_all(void)
{
	for (;;) {
		int fd = accept4(S.lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EMFILE || errno == ENFILE)
				fprintf(stderr, "slow_sink: out of file descriptors at %ld connections\n",
					S.connections);
			return; /* EAGAIN: all taken */
		}
		if ((size_t)fd >= S.conns_cap) {
			close(fd);
			continue;
		}
		struct conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		c->fd = fd;
		struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.fd = fd};
		if (epoll_ctl(S.epfd, EPOLL_CTL_ADD, fd, &ev)) {
			close(fd);
			free(c);
			continue;
		}
		S.conns[fd] = c;
		if (++S.connections > S.max_connections)
			S.max_connections = S.connections;
	}
}

/* Answers every request whose time has come (the FIFO is in due order). */
static void answer_due(void)
{
	int64_t now = mono_us();
	while (S.head && S.head->due_us <= now) {
		struct conn *c = S.head;
		fifo_unlink(c);
		int64_t t = realtime_us();
		if (!S.count)
			S.first_us = t;
		S.last_us = t;
		S.count++;
		if (c->close_after)
			conn_send(c, OK_CLOSE_RESPONSE, sizeof(OK_CLOSE_RESPONSE) - 1, NULL, 1);
		else
			conn_send(c, OK_RESPONSE, sizeof(OK_RESPONSE) - 1, NULL, 1);
	}
}

static void on_event(const struct epoll_event *ev)
{
	struct conn *c = (size_t)ev->data.fd < S.conns_cap ? S.conns[ev->data.fd] : NULL;
	if (!c)
		return;
	if (ev->events & EPOLLOUT) {
		conn_progress(c);
		if (S.conns[ev->data.fd] != c)
			return; /* closed */
	}
	if (ev->events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
		conn_read(c);
}

static void usage(void)
{
	fprintf(stderr, "usage: bench_slow_sink --port PORT [--host 127.0.0.1] [--delay-ms 1000]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int port = 0;
	const char *host = "127.0.0.1";
	long delay_ms = 1000;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--port") && i + 1 < argc)
			port = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--host") && i + 1 < argc)
			host = argv[++i];
		else if (!strcmp(argv[i], "--delay-ms") && i + 1 < argc)
			delay_ms = atol(argv[++i]);
		else
			usage();
	}
	if (port <= 0 || port > 65535 || delay_ms < 0)
		usage();
	S.delay_us = (int64_t)delay_ms * 1000;
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();
	if (!(S.conns = calloc(S.conns_cap, sizeof(*S.conns)))) {
		perror("slow_sink: calloc");
		return 1;
	}

	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
		fprintf(stderr, "slow_sink: --host must be an IPv4 address\n");
		return 2;
	}
	int one = 1;
	S.lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (S.lfd < 0 || setsockopt(S.lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(S.lfd, (struct sockaddr *)&addr, sizeof(addr)) || listen(S.lfd, BACKLOG)) {
		fprintf(stderr, "slow_sink: cannot listen on %s:%d: %s\n", host, port, strerror(errno));
		return 1;
	}
	S.epfd = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event lev = {.events = EPOLLIN, .data.fd = S.lfd};
	if (S.epfd < 0 || epoll_ctl(S.epfd, EPOLL_CTL_ADD, S.lfd, &lev)) {
		perror("slow_sink: epoll");
		return 1;
	}
	fprintf(stderr, "slow_sink: %s:%d, answers POSTs after %ld ms, up to %zu descriptors\n",
		host, port, delay_ms, S.conns_cap);

	static struct epoll_event events[EVENTS];
	for (;;) {
		int timeout = -1;
		if (S.head) {
			int64_t wait = S.head->due_us - mono_us();
			timeout = wait <= 0 ? 0 : (int)((wait + 999) / 1000);
		}
		int n = epoll_wait(S.epfd, events, EVENTS, timeout);
		if (n < 0 && errno != EINTR) {
			perror("slow_sink: epoll_wait");
			return 1;
		}
		for (int i = 0; i < n; i++) {
			if (events[i].data.fd == S.lfd)
				accept_all();
			else
				on_event(&events[i]);
		}
		answer_due();
	}
}
