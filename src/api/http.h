/* http.h: the HTTP server of the API (libmicrohttpd), a thin shell around api_handle. */
#ifndef OUTBOXD_API_HTTP_H
#define OUTBOXD_API_HTTP_H

#include <stddef.h>

#include "api/api.h"

struct http_server;

/* Listens on listen ("host:port", host may be a name or address) with threads worker
 * threads. api is borrowed. Returns NULL with a message in err on failure. */
struct http_server *http_server_start(struct api *api, const char *listen, int threads,
				      char *err, size_t errlen);
/* Stops accepting, waits for running handlers, frees s. */
void http_server_stop(struct http_server *s);

#endif
