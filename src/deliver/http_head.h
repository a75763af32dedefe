/* http_head.h: what the lean HTTP/1.1 client (http_wire.c) writes, as libcurl would
 * write it: an endpoint URL split into the parts a request needs (or refused when libcurl
 * would rewrite it, so libcurl takes it), and the request head. Pure: no I/O, no
 * libcurl, no state. */
#ifndef OUTBOXD_DELIVER_HTTP_HEAD_H
#define OUTBOXD_DELIVER_HTTP_HEAD_H

#include <stddef.h>
#include <sys/socket.h>

#include "core/model.h"

/* The parts of an http:// or https:// URL this client sends as libcurl would: 0 and the
 * authority, host and path spans, or -1 when libcurl should take it (another scheme,
 * user info, a byte libcurl would escape, a dot segment it would remove, a bad port, a
 * host it would decode or an address it would rewrite). host_hdr_len: the part of the
 * authority the Host header carries (libcurl leaves out the scheme's own port). */
struct url_parts {
	const char *auth, *host, *path;
	size_t auth_len, host_len, path_len, host_hdr_len;
	int port;
	int tls;                      /* https:// */
};

/* A request head being written: a buffer that grows and is reused from attempt to
 * attempt. It may hold credentials: wiped before it is freed or replaced. */
struct wire_head {
	char *buf;
	size_t cap, len;
};

/* Splits url (borrowed; the spans point into it) into u: 0, or -1 for libcurl. */
int wire_url_split(const char *url, struct url_parts *u);
/* The socket address of IP text (v4 or v6) and port: 0, or -1 when ip is not an
 * address. */
int wire_addr_from_text(const char *ip, int port, struct sockaddr_storage *out,
			socklen_t *len);
/* A subscription that sets a header the lean client writes itself (its headers, an
 * api-key auth's name) goes through libcurl, which replaces its own: 1 for such a one. */
int wire_sub_sets_own_header(const struct subscription *s);
/* Writes into wh the request head of u: request line, Host, Accept, Content-Length,
 * then the header lines of hbuf (hbuf_len bytes of NUL-terminated lines, borrowed); over
 * TLS (u->tls) the body follows in the same buffer, so one write sends the request.
 * -1 when memory ran out. */
int wire_head_build(struct wire_head *wh, const struct url_parts *u, const char *hbuf,
		    size_t hbuf_len, const char *body, size_t body_len);

#endif
