/* http.c: libmicrohttpd glue. Decides each request from its head first (api_begin: a
 * caller without a valid token, or a body declared over max_request, is answered before a
 * byte of the body is read, and the connection closed), then reads the body (bounded by
 * max_request, and with every request in progress together by api_body_memory), builds a
 * struct api_request, calls api_finish, sends the JSON answer. Each connection has a
 * request deadline (deadline.h) besides the idle timeout, and each client address a
 * connection limit. Serves HTTPS when tls_cert/tls_key are set (MHD's GnuTLS, with the
 * tls_priorities it is given). An ingest waits for its commit with its connection
 * suspended, not its thread (struct api_defer): a few threads serve many producers, and
 * their events share group commits. The only file that includes microhttpd.h. */
#include "api/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <time.h>

#include <microhttpd.h>

#include "api/deadline.h"
#include "core/config.h"
#include "core/metrics.h"
#include "util/buf.h"
#include "util/log.h"
#include "util/pem.h"

/* What a body without a Content-Length (chunked) is first given of api_body_memory; it
 * takes more, doubling, as it grows. */
#define BODY_STEP 65536
/* How long a stop waits for the answers of requests that were suspended */
#define STOP_ANSWERS_S 2

struct http_server {
	struct MHD_Daemon *mhd;
	struct api *api;
	char *tls_cert;     /* PEM text handed to MHD, kept while it runs */
	char *tls_key;      /* cleansed before it is freed */
	struct deadlines *deadlines;
	int64_t body_memory;            /* api_body_memory */
	_Atomic int64_t body_held;      /* what requests in progress have been given of it */
	/* Requests whose answer is prepared elsewhere (api_defer), suspended until it is
	 * ready, then answered. MHD must not be stopped with a connection suspended, so
	 * http_server_stop waits for them to be resumed, and for their answers to go. */
	pthread_mutex_t mu;
	pthread_cond_t changed;
	int suspended;                  /* suspended now */
	int deferred;                   /* suspended or resumed, not answered yet */
	int stopping;                   /* no more suspensions */
};

/* One request in progress (MHD's per-request pointer). */
struct conn_ctx {
	int begun;          /* api_begin has decided (the first call of the request) */
	struct api_head head;
	char remote_addr[INET6_ADDRSTRLEN];
	int64_t content_length;
	struct buf body;
	int64_t charged;    /* bytes of api_body_memory this request holds: its body may
	                       grow to that (its buffer holds one byte more, the NUL) */
	int too_large;      /* past max_request: the rest is read and dropped, then 413 */
	int over_memory;    /* api_body_memory ran out: the rest is dropped, then 503 */
	int decided;        /* answer holds what api_begin answered, sent at the end */
	struct api_response answer;
	/* An answer that comes later (api_defer): the connection is suspended until then. */
	struct http_server *server;
	struct MHD_Connection *conn;
	struct api_defer defer;
	struct api_pending *pending;
	int deferred;       /* counted in server->deferred */
};

/* Takes n bytes of api_body_memory; 0, or -1 when that would go past it. */
static int body_memory_take(struct http_server *s, int64_t n)
{
	int64_t held = atomic_load(&s->body_held);
	do {
		if (held + n > s->body_memory)
			return -1;
	} while (!atomic_compare_exchange_weak(&s->body_held, &held, held + n));
	return 0;
}

static void body_memory_give_back(struct http_server *s, int64_t n)
{
	if (n)
		atomic_fetch_sub(&s->body_held, n);
}

static const char *query_cb(void *ctx, const char *name)
{
	return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, name);
}

/* The deadline handle of conn (deadline.h), or -1. */
static int deadline_handle(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	return ci && ci->socket_context ? (int)(intptr_t)ci->socket_context - 1 : -1;
}

static void remote_address(struct MHD_Connection *conn, char *out, size_t outlen)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	const struct sockaddr *sa = ci ? ci->client_addr : NULL;
	out[0] = '\0';
	if (sa && sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)outlen);
	else if (sa && sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out,
			  (socklen_t)outlen);
}

/* The Content-Length header, -1 when absent (or not a number: MHD refuses those). */
static int64_t content_length(struct MHD_Connection *conn)
{
	const char *v = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
	char *end;
	if (!v)
		return -1;
	long long n = strtoll(v, &end, 10);
	return end != v && !*end && n >= 0 ? (int64_t)n : -1;
}

static enum MHD_Result send_answer(struct MHD_Connection *conn, struct api_response *res)
{
	struct MHD_Response *r;
	if (res->static_body) {
		free(res->body);
		res->body = NULL;
		r = MHD_create_response_from_buffer(res->static_len, (void *)res->static_body,
						    MHD_RESPMEM_PERSISTENT);
	} else if (res->body)
		r = MHD_create_response_from_buffer(strlen(res->body), res->body,
						    MHD_RESPMEM_MUST_FREE);
	else
		r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(res->body);
		return MHD_NO;
	}
	if (res->body || res->static_body)
		MHD_add_response_header(r, "Content-Type",
					res->content_type ? res->content_type : "application/json");
	if (res->etag)
		MHD_add_response_header(r, "ETag", res->etag);
	if (res->cache_control)
		MHD_add_response_header(r, "Cache-Control", res->cache_control);
	if (res->csp) {
		MHD_add_response_header(r, "Content-Security-Policy", res->csp);
		MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
		MHD_add_response_header(r, "X-Frame-Options", "DENY");
		MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
	}
	if (res->status == 401)
		MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
	if (res->retry_after > 0) {
		char secs[16];
		snprintf(secs, sizeof(secs), "%d", res->retry_after);
		MHD_add_response_header(r, "Retry-After", secs);
	}
	enum MHD_Result ok = MHD_queue_response(conn, (unsigned)res->status, r);
	MHD_destroy_response(r);
	return ok;
}

/* api_defer's suspend: from the request's own thread, in MHD's access handler. */
static int suspend_cb(void *ctx)
{
	struct conn_ctx *c = ctx;
	struct http_server *s = c->server;
	pthread_mutex_lock(&s->mu);
	int ok = !s->stopping;
	if (ok) {
		MHD_suspend_connection(c->conn);
		s->suspended++;
		s->deferred++;
		c->deferred = 1;
	}
	pthread_mutex_unlock(&s->mu);
	return ok ? 0 : -1;
}

/* api_defer's resume: any thread, the writer's mostly. MHD calls access_cb again for the
 * connection, on its own thread, which may free c at once: nothing of c is read after. */
static void resume_cb(void *ctx)
{
	struct conn_ctx *c = ctx;
	struct http_server *s = c->server;
	struct MHD_Connection *conn = c->conn;
	pthread_mutex_lock(&s->mu);
	MHD_resume_connection(conn);
	if (--s->suspended == 0)
		pthread_cond_broadcast(&s->changed);
	pthread_mutex_unlock(&s->mu);
}

static void request_of(struct MHD_Connection *conn, const char *url, const char *method,
		       const struct conn_ctx *c, struct api_request *req)
{
	*req = (struct api_request){
		.method = method,
		.path = url,
		.query = query_cb,
		.query_ctx = conn,
		.authorization = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"),
		.content_type = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type"),
		.traceparent = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "traceparent"),
		.if_none_match = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-None-Match"),
		.remote_addr = c->remote_addr[0] ? c->remote_addr : NULL,
		.content_length = c->content_length,
		.body = c->body.data,
		.body_len = c->body.len,
		.defer = &c->defer,
		.body_too_large = c->too_large,
	};
}

/* The head of a request: answered from it, or admitted with the memory its declared body
 * needs. An answer to a request with a body to come is sent at once: the body is never
 * read, and MHD closes the connection after the answer. One without a body is kept for
 * the end of the request, as any answer, so the connection stays alive for the next. */
static enum MHD_Result begin_request(struct http_server *s, struct MHD_Connection *conn,
				     const char *url, const char *method, struct conn_ctx *c)
{
	struct api_request req;
	struct api_response res = {0};

	remote_address(conn, c->remote_addr, sizeof(c->remote_addr));
	c->content_length = content_length(conn);
	request_of(conn, url, method, c, &req);
	if (api_begin(s->api, &req, &c->head, &res))
		goto answer;
	if (!c->head.wants_body)
		return MHD_YES;
	/* the whole declared body at once (api_begin refused it over max_request), or a
	 * first step of one of unknown length */
	int64_t first = c->content_length >= 0 ? c->content_length :
			s->api->max_request < BODY_STEP ? s->api->max_request : BODY_STEP;
	if (body_memory_take(s, first) == 0) {
		c->charged = first;
		c->body.max = (size_t)first;
		return MHD_YES;
	}
	metrics_api_refused(METRICS_API_MEMORY);
	res.retry_after = 1;
	api_reply_errorf(&res, 503, "unavailable", NULL,
			 "the requests in progress hold all the memory the API gives request "
			 "bodies (api_body_memory); retry");
answer:
	if (c->content_length > 0 ||
	    MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Transfer-Encoding")) {
		deadline_pause(s->deadlines, deadline_handle(conn));
		return send_answer(conn, &res);
	}
	c->decided = 1;
	c->answer = res;
	return MHD_YES;
}

/* Appends a piece of a body: within what the request was given of api_body_memory,
 * taking more (doubling, up to max_request) when a body of unknown length grows. */
static void body_append(struct http_server *s, struct conn_ctx *c, const char *data, size_t n)
{
	if (c->too_large || c->over_memory || buf_append(&c->body, data, n) == 0)
		return;
	int64_t max_request = s->api->max_request;
	int64_t need = (int64_t)c->body.len + (int64_t)n;
	if (c->content_length >= 0 || need > max_request) {
		c->too_large = 1;
		return;
	}
	int64_t want = c->charged * 2 > need ? c->charged * 2 : need;
	if (want > max_request)
		want = max_request;
	if (body_memory_take(s, want - c->charged)) {
		c->over_memory = 1;
		metrics_api_refused(METRICS_API_MEMORY);
		return;
	}
	c->charged = want;
	c->body.max = (size_t)want;
	if (buf_append(&c->body, data, n))
		c->too_large = 1; /* out of memory: answered as too large */
}

/* A request line arrived: the request's context is made here, and its deadline runs
 * from now (the time a kept-alive connection sat idle before it does not count). */
static void *request_line_cb(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct http_server *s = cls;
	struct conn_ctx *c = calloc(1, sizeof(*c));
	if (c)
		buf_init(&c->body, 0);
	deadline_restart(s->deadlines, deadline_handle(conn));
	return c;
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url,
				 const char *method, const char *version,
				 const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct http_server *s = cls;
	struct conn_ctx *c = *con_cls;

	if (!c || !c->begun) {
		if (!c && !(c = calloc(1, sizeof(*c))))
			return MHD_NO;
		c->begun = 1;
		*con_cls = c;
		return begin_request(s, conn, url, method, c);
	}
	if (*upload_data_size) {
		/* Past a limit the rest is read and dropped, so the 413 or 503 can be sent; a
		 * body the route does not read is dropped whole. */
		if (c->head.wants_body && !c->decided)
			body_append(s, c, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}

	deadline_pause(s->deadlines, deadline_handle(conn));
	struct api_response res = {0};
	if (c->pending) { /* resumed: the writer has answered */
		struct api_pending *pd = c->pending;
		c->pending = NULL;
		api_complete(pd, &res);
	} else if (c->decided) {
		res = c->answer;
		c->decided = 0;
	} else if (c->over_memory) {
		res.retry_after = 1;
		api_reply_errorf(&res, 503, "unavailable", NULL,
				 "the requests in progress hold all the memory the API gives "
				 "request bodies (api_body_memory); retry");
	} else {
		struct api_request req;
		c->server = s;
		c->conn = conn;
		c->defer = (struct api_defer){suspend_cb, resume_cb, c};
		request_of(conn, url, method, c, &req);
		api_finish(s->api, &req, &c->head, &res);
		if (res.pending) {
			c->pending = res.pending; /* suspended: called again once resumed */
			return MHD_YES;
		}
	}
	return send_answer(conn, &res);
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct http_server *s = cls;
	struct conn_ctx *c = *con_cls;
	if (!c)
		return;
	api_pending_free(c->pending); /* resumed, but the connection went before its answer */
	if (c->deferred) {
		pthread_mutex_lock(&s->mu);
		if (--s->deferred == 0)
			pthread_cond_broadcast(&s->changed);
		pthread_mutex_unlock(&s->mu);
	}
	body_memory_give_back(s, c->charged);
	buf_free(&c->body);
	if (c->decided)
		free(c->answer.body); /* the connection went before the answer */
	free(c);
	*con_cls = NULL;
	/* the next request on a kept-alive connection: until its line arrives */
	deadline_restart(s->deadlines, deadline_handle(conn));
}

/* Connections start and end: their request deadline (deadline.h). */
static void connection_cb(void *cls, struct MHD_Connection *conn, void **socket_context,
			  enum MHD_ConnectionNotificationCode toe)
{
	struct http_server *s = cls;
	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
		int h = ci ? deadline_watch(s->deadlines, ci->connect_fd) : -1;
		*socket_context = h >= 0 ? (void *)(intptr_t)(h + 1) : NULL;
	} else if (*socket_context) {
		deadline_forget(s->deadlines, (int)(intptr_t)*socket_context - 1);
		*socket_context = NULL;
	}
}

static void mhd_log_cb(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	log_warn("http: %s", line);
}

static void server_free(struct http_server *s)
{
	pthread_cond_destroy(&s->changed);
	pthread_mutex_destroy(&s->mu);
	deadlines_stop(s->deadlines);
	pem_free(s->tls_cert);
	pem_free(s->tls_key);
	free(s);
}

struct http_server *http_server_start(struct api *api, const char *listen,
				      const struct http_limits *limits,
				      const struct http_tls *tls, char *err, size_t errlen)
{
	char host[256], port[8];
	struct addrinfo hints = {0}, *ai = NULL;

	if (config_listen_split(listen, host, sizeof(host), port, sizeof(port), err, errlen))
		return NULL;
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	int gai = getaddrinfo(host, port, &hints, &ai);
	if (gai) {
		snprintf(err, errlen, "listen: cannot resolve \"%s\": %s", listen, gai_strerror(gai));
		return NULL;
	}
	struct http_server *s = calloc(1, sizeof(*s));
	if (!s) {
		freeaddrinfo(ai);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->api = api;
	s->body_memory = limits->body_memory;
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->changed, NULL);
	if (!(s->deadlines = deadlines_start(limits->max_connections, limits->request_timeout_ms))) {
		snprintf(err, errlen, "cannot start the API's request deadlines: out of memory or "
			 "threads");
		goto fail;
	}
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG |
			 MHD_ALLOW_SUSPEND_RESUME;
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* MHD takes its options from a varargs list; TLS adds three, or none (the list ends
	 * early with MHD_OPTION_END standing in for them). */
	enum MHD_OPTION cert_opt = MHD_OPTION_END, key_opt = MHD_OPTION_END;
	enum MHD_OPTION prio_opt = MHD_OPTION_END;
	if (tls) {
		if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
			snprintf(err, errlen, "tls_cert: this libmicrohttpd has no TLS support");
			goto fail;
		}
		if (!(s->tls_cert = pem_read("tls_cert", tls->cert_file, err, errlen)) ||
		    !(s->tls_key = pem_read("tls_key", tls->key_file, err, errlen)))
			goto fail;
		flags |= MHD_USE_TLS;
		/* without tls_priorities GnuTLS's "NORMAL" would accept TLS 1.0 and 1.1 too */
		prio_opt = MHD_OPTION_HTTPS_PRIORITIES;
		cert_opt = MHD_OPTION_HTTPS_MEM_CERT;
		key_opt = MHD_OPTION_HTTPS_MEM_KEY;
	}
	s->mhd = MHD_start_daemon(flags, 0, NULL, NULL, access_cb, s,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log_cb, s,
				  MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				  MHD_OPTION_THREAD_POOL_SIZE, (unsigned)limits->threads,
				  MHD_OPTION_NOTIFY_COMPLETED, completed_cb, s,
				  MHD_OPTION_NOTIFY_CONNECTION, connection_cb, s,
				  MHD_OPTION_URI_LOG_CALLBACK, request_line_cb, s,
				  /* Slow or half-open clients cost a connection slot and a little
				   * memory until this timeout (or their request deadline), never a
				   * thread (epoll); one address holds at most its share of slots. */
				  MHD_OPTION_CONNECTION_TIMEOUT,
				  (unsigned)((limits->idle_timeout_ms + 999) / 1000),
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)limits->max_connections,
				  MHD_OPTION_PER_IP_CONNECTION_LIMIT,
				  (unsigned)limits->max_connections_per_ip,
				  prio_opt, tls ? tls->priorities : NULL, cert_opt, s->tls_cert,
				  key_opt, s->tls_key, MHD_OPTION_END);
	if (!s->mhd) {
		snprintf(err, errlen, tls ? "cannot listen on %s with TLS (address in use, "
					    "tls_cert and tls_key do not make a usable pair, or "
					    "tls_priorities is not a GnuTLS priority string: see "
					    "the warning above)"
					  : "cannot listen on %s (address in use or not allowed)",
			 listen);
		goto fail;
	}
	freeaddrinfo(ai);
	return s;
fail:
	freeaddrinfo(ai);
	server_free(s);
	return NULL;
}

void http_server_stop(struct http_server *s)
{
	if (!s)
		return;
	/* The requests handed to the writer are answered first (the writer runs until the
	 * API has stopped); a request that comes meanwhile waits on its thread instead. Their
	 * answers are given STOP_ANSWERS_S to go out: a client that does not read its answer
	 * does not hold the stop up longer. */
	pthread_mutex_lock(&s->mu);
	s->stopping = 1;
	while (s->suspended)
		pthread_cond_wait(&s->changed, &s->mu);
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += STOP_ANSWERS_S;
	while (s->deferred && pthread_cond_timedwait(&s->changed, &s->mu, &until) == 0)
		;
	pthread_mutex_unlock(&s->mu);
	MHD_stop_daemon(s->mhd); /* every connection closed: none is watched any more */
	server_free(s);
}
