/* http.h: the HTTP server of the API (libmicrohttpd), a thin shell around api_handle. */
#ifndef OUTBOXD_API_HTTP_H
#define OUTBOXD_API_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "api/api.h"

struct http_server;

/* How the server protects itself from slow, idle, many or large clients. */
struct http_limits {
	int threads;               /* worker threads */
	int max_connections;       /* open connections at most (more are refused at accept) */
	int max_connections_per_ip; /* of which one client address may hold; 0 = no limit */
	int64_t idle_timeout_ms;   /* a connection silent this long is closed */
	int64_t request_timeout_ms; /* a request (headers and body) not whole this long after
	                               its connection was ready for it: the connection is
	                               closed, however steadily it trickles in */
	int64_t body_memory;       /* request bodies held at once by requests in progress,
	                              bytes; a request that needs more is answered 503 */
};

/* HTTPS for the API: PEM files, read once at start. */
struct http_tls {
	const char *cert_file;     /* certificate, with its chain */
	const char *key_file;      /* its private key */
	const char *priorities;    /* GnuTLS priority string: versions and ciphers offered */
};

/* Listens on listen ("host:port", host may be a name or address), with TLS when tls is
 * not NULL. api, limits and tls are borrowed. Returns NULL with a message in err on
 * failure (an unreadable or mismatched certificate or key included). */
struct http_server *http_server_start(struct api *api, const char *listen,
				      const struct http_limits *limits,
				      const struct http_tls *tls, char *err, size_t errlen);
/* Stops accepting, waits for running handlers, frees s. */
void http_server_stop(struct http_server *s);

#endif
