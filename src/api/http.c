/* http.c: libmicrohttpd glue. Reads the body (bounded), builds a struct api_request,
 * calls api_handle, sends the JSON answer; serves HTTPS when tls_cert/tls_key are set
 * (MHD's GnuTLS). The only file that includes microhttpd.h. */
#include "api/http.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include <microhttpd.h>
#include <openssl/crypto.h>

#include "util/buf.h"
#include "util/log.h"

struct http_server {
	struct MHD_Daemon *mhd;
	struct api *api;
	char *tls_cert;     /* PEM text handed to MHD, kept while it runs */
	char *tls_key;      /* cleansed before it is freed */
};

struct conn_ctx {
	struct buf body;
	int too_large;
};

static const char *query_cb(void *ctx, const char *name)
{
	return MHD_lookup_connection_value(ctx, MHD_GET_ARGUMENT_KIND, name);
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url,
				 const char *method, const char *version,
				 const char *upload_data, size_t *upload_data_size, void **con_cls)
{
	struct http_server *s = cls;
	struct conn_ctx *c = *con_cls;

	if (!c) {
		c = calloc(1, sizeof(*c));
		if (!c)
			return MHD_NO;
		buf_init(&c->body, (size_t)s->api->max_request);
		*con_cls = c;
		return MHD_YES;
	}
	if (*upload_data_size) {
		/* Past the limit the rest is read and dropped so the 413 can be sent. */
		if (!c->too_large && buf_append(&c->body, upload_data, *upload_data_size))
			c->too_large = 1;
		*upload_data_size = 0;
		return MHD_YES;
	}

	struct api_request req = {
		.method = method,
		.path = url,
		.query = query_cb,
		.query_ctx = conn,
		.authorization = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization"),
		.content_type = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Type"),
		.traceparent = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "traceparent"),
		.if_none_match = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "If-None-Match"),
		.body = c->body.data,
		.body_len = c->body.len,
		.body_too_large = c->too_large,
	};
	struct api_response res = {0};
	api_handle(s->api, &req, &res);

	struct MHD_Response *r;
	if (res.static_body) {
		free(res.body);
		res.body = NULL;
		r = MHD_create_response_from_buffer(res.static_len, (void *)res.static_body,
						    MHD_RESPMEM_PERSISTENT);
	} else if (res.body)
		r = MHD_create_response_from_buffer(strlen(res.body), res.body, MHD_RESPMEM_MUST_FREE);
	else
		r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	if (!r) {
		free(res.body);
		return MHD_NO;
	}
	if (res.body || res.static_body)
		MHD_add_response_header(r, "Content-Type",
					res.content_type ? res.content_type : "application/json");
	if (res.etag)
		MHD_add_response_header(r, "ETag", res.etag);
	if (res.cache_control)
		MHD_add_response_header(r, "Cache-Control", res.cache_control);
	if (res.csp) {
		MHD_add_response_header(r, "Content-Security-Policy", res.csp);
		MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
		MHD_add_response_header(r, "X-Frame-Options", "DENY");
		MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
	}
	if (res.status == 401)
		MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
	enum MHD_Result ok = MHD_queue_response(conn, (unsigned)res.status, r);
	MHD_destroy_response(r);
	return ok;
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct conn_ctx *c = *con_cls;
	if (!c)
		return;
	buf_free(&c->body);
	free(c);
	*con_cls = NULL;
}

static void mhd_log_cb(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	vsnprintf(line, sizeof(line), fmt, ap);
	line[strcspn(line, "\n")] = '\0';
	log_warn("http: %s", line);
}

/* Reads a PEM file whole (at most 1 MiB) into a NUL-terminated string (returned). */
static char *read_pem(const char *what, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "%s: cannot read %s: %s", what, path, strerror(errno));
		return NULL;
	}
	struct buf b;
	char chunk[4096];
	size_t n;
	int too_big = 0;
	buf_init(&b, 1 << 20);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0 && !too_big)
		too_big = buf_append(&b, chunk, n) != 0;
	fclose(f);
	if (too_big || buf_append(&b, "", 1)) {
		snprintf(err, errlen, "%s: %s is larger than 1 MiB", what, path);
		buf_free(&b);
		return NULL;
	}
	if (!strstr(b.data, "-----BEGIN ")) {
		snprintf(err, errlen, "%s: %s is not a PEM file", what, path);
		OPENSSL_cleanse(b.data, b.len);
		buf_free(&b);
		return NULL;
	}
	return b.data;
}

static void server_free(struct http_server *s)
{
	free(s->tls_cert);
	if (s->tls_key) {
		OPENSSL_cleanse(s->tls_key, strlen(s->tls_key));
		free(s->tls_key);
	}
	free(s);
}

struct http_server *http_server_start(struct api *api, const char *listen,
				      const struct http_limits *limits,
				      const struct http_tls *tls, char *err, size_t errlen)
{
	char host[256];
	const char *colon = strrchr(listen, ':');
	struct addrinfo hints = {0}, *ai = NULL;

	if (!colon || colon == listen || (size_t)(colon - listen) >= sizeof(host)) {
		snprintf(err, errlen, "listen: expected host:port, got \"%s\"", listen);
		return NULL;
	}
	memcpy(host, listen, (size_t)(colon - listen));
	host[colon - listen] = '\0';
	if (host[0] == '[') { /* [::1]:8080 */
		memmove(host, host + 1, strlen(host));
		host[strcspn(host, "]")] = '\0';
	}
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	int gai = getaddrinfo(host, colon + 1, &hints, &ai);
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
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ERROR_LOG;
	if (ai->ai_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* MHD takes its options from a varargs list; TLS adds two, or none (the list ends
	 * early with MHD_OPTION_END standing in for them). */
	enum MHD_OPTION cert_opt = MHD_OPTION_END, key_opt = MHD_OPTION_END;
	if (tls) {
		if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
			snprintf(err, errlen, "tls_cert: this libmicrohttpd has no TLS support");
			goto fail;
		}
		if (!(s->tls_cert = read_pem("tls_cert", tls->cert_file, err, errlen)) ||
		    !(s->tls_key = read_pem("tls_key", tls->key_file, err, errlen)))
			goto fail;
		flags |= MHD_USE_TLS;
		cert_opt = MHD_OPTION_HTTPS_MEM_CERT;
		key_opt = MHD_OPTION_HTTPS_MEM_KEY;
	}
	s->mhd = MHD_start_daemon(flags, 0, NULL, NULL, access_cb, s,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log_cb, s,
				  MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				  MHD_OPTION_THREAD_POOL_SIZE, (unsigned)limits->threads,
				  MHD_OPTION_NOTIFY_COMPLETED, completed_cb, s,
				  /* Slow or half-open clients cost a connection slot and a little
				   * memory until this timeout, never a thread (epoll). */
				  MHD_OPTION_CONNECTION_TIMEOUT,
				  (unsigned)((limits->idle_timeout_ms + 999) / 1000),
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)limits->max_connections,
				  cert_opt, s->tls_cert, key_opt, s->tls_key, MHD_OPTION_END);
	if (!s->mhd) {
		snprintf(err, errlen, tls ? "cannot listen on %s with TLS (address in use, or "
					    "tls_cert and tls_key do not make a usable pair: see "
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
	MHD_stop_daemon(s->mhd);
	server_free(s);
}
