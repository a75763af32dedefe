/* http_head.c: the lean client's request as libcurl would write it (http_head.h). Must
 * stay byte for byte what libcurl sends for the URLs it accepts: any URL libcurl would
 * normalize, escape or decode is refused here, so libcurl sends it itself. */
#include "deliver/http_head.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "util/fmt.h"

/* 0 when the len bytes at host are an IP address spelt another way than libcurl
 * writes it: IPv4 other than dotted-decimal (063.0.0.1, 127.1, 0x7f.0.0.1, 2130706433),
 * IPv6 (v6: between brackets) other than inet_ntop's form ([::0], [::FFFF:7f00:1]), or
 * with a zone. libcurl sends the address it reads in Host, so this client must leave
 * those to it. 1 for a canonical address or a name. */
static int ip_canonical(const char *host, size_t len, int v6)
{
	char ip[INET6_ADDRSTRLEN], back[INET6_ADDRSTRLEN];
	struct in6_addr a;

	if (!v6) {
		if (host[0] < '0' || host[0] > '9')
			return 1; /* a name: libcurl reads a number only from its first character */
		for (size_t i = 0; i < len; i++)
			if (!strchr("0123456789abcdefABCDEFxX.", host[i]))
				return 1;
	}
	if (len >= sizeof(ip))
		return 0;
	memcpy(ip, host, len);
	ip[len] = '\0';
	int af = v6 ? AF_INET6 : AF_INET;
	return inet_pton(af, ip, &a) == 1 && inet_ntop(af, &a, back, sizeof(back)) &&
	       strcmp(ip, back) == 0;
}

int wire_url_split(const char *url, struct url_parts *u)
{
	size_t scheme_len;
	if (strncasecmp(url, "http://", 7) == 0) {
		scheme_len = 7;
		u->tls = 0;
	} else if (strncasecmp(url, "https://", 8) == 0) {
		scheme_len = 8;
		u->tls = 1;
	} else {
		return -1;
	}
	for (const unsigned char *p = (const unsigned char *)url; *p; p++)
		if (*p <= 0x20 || *p >= 0x7f || *p == '\\')
			return -1;
	const char *a = url + scheme_len;
	size_t alen = strcspn(a, "/?#");
	if (!alen || memchr(a, '@', alen))
		return -1;
	u->auth = a;
	u->auth_len = alen;
	const char *port = NULL;
	if (a[0] == '[') {
		const char *close = memchr(a, ']', alen);
		if (!close)
			return -1;
		u->host = a + 1;
		u->host_len = (size_t)(close - a - 1);
		if (close + 1 < a + alen) {
			if (close[1] != ':')
				return -1;
			port = close + 2;
		}
	} else {
		const char *colon = memchr(a, ':', alen);
		u->host = a;
		u->host_len = colon ? (size_t)(colon - a) : alen;
		port = colon ? colon + 1 : NULL;
	}
	int default_port = u->tls ? 443 : 80;
	u->port = default_port;
	u->host_hdr_len = alen;
	if (port) {
		if (port == a + alen)
			return -1;
		long v = 0;
		for (const char *p = port; p < a + alen; p++) {
			if (*p < '0' || *p > '9' || (v = v * 10 + (*p - '0')) > 65535)
				return -1;
		}
		if (v < 1)
			return -1;
		u->port = (int)v;
		if (u->port == default_port)
			u->host_hdr_len = (size_t)(port - 1 - a);
	}
	/* libcurl decodes %XX in a host name */
	if (!u->host_len || memchr(u->host, '%', u->host_len) ||
	    !ip_canonical(u->host, u->host_len, a[0] == '['))
		return -1;
	const char *path = a + alen;
	u->path = path;
	u->path_len = strcspn(path, "#");
	if (strstr(path, "/.") || (u->path_len && path[0] == '?'))
		return -1; /* libcurl normalizes these: let it */
	return 0;
}

int wire_addr_from_text(const char *ip, int port, struct sockaddr_storage *out,
			socklen_t *len)
{
	struct sockaddr_in *v4 = (struct sockaddr_in *)out;
	struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)out;
	memset(out, 0, sizeof(*out));
	if (inet_pton(AF_INET, ip, &v4->sin_addr) == 1) {
		v4->sin_family = AF_INET;
		v4->sin_port = htons((uint16_t)port);
		*len = sizeof(*v4);
		return 0;
	}
	if (inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1) {
		v6->sin6_family = AF_INET6;
		v6->sin6_port = htons((uint16_t)port);
		*len = sizeof(*v6);
		return 0;
	}
	return -1;
}

/* Whether a header name is one this client writes itself. */
static int name_is_own(const char *name)
{
	static const char *const own[] = {"Host", "Content-Length", "Transfer-Encoding",
					  "Connection", "Accept"};
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
		if (strcasecmp(name, own[i]) == 0)
			return 1;
	return 0;
}

/* The lines every webhook request carries (Content-Type, webhook-*, outboxd-*,
 * traceparent) never are such a header. */
int wire_sub_sets_own_header(const struct subscription *s)
{
	if (s->auth_type == AUTH_API_KEY && s->auth_name && name_is_own(s->auth_name))
		return 1;
	for (size_t i = 0; i < s->n_headers; i++)
		if (name_is_own(s->headers[i].name))
			return 1;
	return 0;
}

int wire_head_build(struct wire_head *wh, const struct url_parts *u, const char *hbuf,
		    size_t hbuf_len, const char *body, size_t body_len)
{
	char cl_text[FMT_U64_LEN];
	const char *cl = fmt_u64(body_len, cl_text);
	size_t cl_len = (size_t)(cl_text + FMT_U64_LEN - 1 - cl);
	/* the fixed text, the spans, and each line of hbuf with CRLF for its NUL */
	size_t need = 64 + u->path_len + u->auth_len + cl_len + hbuf_len * 2 +
		      (u->tls ? body_len : 0);
	if (need > wh->cap) {
		size_t cap = wh->cap ? wh->cap : 1024;
		while (cap < need)
			cap *= 2;
		char *nb = malloc(cap);
		if (!nb)
			return -1;
		if (wh->buf) {
			OPENSSL_cleanse(wh->buf, wh->cap);
			free(wh->buf);
		}
		wh->buf = nb;
		wh->cap = cap;
	}
	char *p = wh->buf;
#define PUT(s, n) (memcpy(p, (s), (n)), p += (n))
#define PUTS(lit) PUT(lit, sizeof(lit) - 1)
	PUTS("POST ");
	if (u->path_len)
		PUT(u->path, u->path_len);
	else
		PUTS("/");
	PUTS(" HTTP/1.1\r\nHost: ");
	PUT(u->auth, u->host_hdr_len);
	PUTS("\r\nAccept: */*\r\nContent-Length: ");
	PUT(cl, cl_len);
	PUTS("\r\n");
	for (size_t o = 0; o < hbuf_len;) {
		const char *line = hbuf + o;
		size_t len = strlen(line);
		o += len + 1;
		const char *colon = memchr(line, ':', len);
		const char *v = colon ? colon + 1 : line + len;
		while (*v == ' ' || *v == '\t')
			v++;
		if (!*v)
			continue; /* "Name:" asks libcurl not to send the header (Expect) */
		PUT(line, len);
		PUTS("\r\n");
	}
	PUTS("\r\n");
	if (u->tls && body_len)
		PUT(body, body_len);
#undef PUTS
#undef PUT
	wh->len = (size_t)(p - wh->buf);
	return 0;
}
