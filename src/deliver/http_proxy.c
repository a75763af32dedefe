/* http_proxy.c: deliveries and OAuth2 token requests through the egress proxy (setting
 * egress_proxy) — libcurl opens a CONNECT tunnel through it for every request, plain
 * http:// included, and the SSRF guard still decides where the tunnel leads.
 *
 * Behind a proxy, curl's open-socket hook sees only the proxy's address, and a proxy
 * that resolved a name itself could be led anywhere by DNS. So the target's address is
 * found and checked here, before the proxy is asked: an IP in the URL as it is; a name
 * through a lookup, a libcurl transfer in the sink's own multi that only resolves it
 * (its open-socket hook judges each address and opens nothing), so no DNS call blocks
 * the dispatcher; the answer is kept PROXY_DNS_TTL_MS, as libcurl keeps its own. The
 * request then asks the proxy for a tunnel to that checked address (CURLOPT_CONNECT_TO:
 * "CONNECT 203.0.113.7:443"), while the URL's name stays what TLS verifies and Host
 * says. Requests waiting for a lookup are listed in it (struct proxy_wait) and resumed,
 * or failed, when it ends.
 *
 * Must not: let the proxy resolve a name, let a lookup connect anywhere, or take the
 * proxy's own address to the guard (the operator chose it). */
#include "deliver/sink_http_int.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/clock.h"

#define PROXY_DNS_TTL_MS (60 * 1000LL) /* libcurl's CURLOPT_DNS_CACHE_TIMEOUT default */
#define PROXY_HOSTS_MAX 256            /* names whose checked address is kept */
#define ADDR_TEXT_LEN (INET6_ADDRSTRLEN + 2) /* an IPv6 address goes in brackets */

/* A name's address as the guard judged it. */
struct proxy_host {
	char *name;
	char addr[ADDR_TEXT_LEN];    /* the first address the guard let through, or "" */
	char refused[128];           /* "" or why it refused the first one (all were) */
	int64_t at_ms;               /* when it was looked up (monotonic) */
	struct proxy_host *next;
};

/* A lookup in flight (CURLOPT_PRIVATE of its handle). */
struct proxy_lookup {
	enum transfer_kind transfer; /* TRANSFER_LOOKUP */
	char *name;
	CURL *easy;
	char errbuf[CURL_ERROR_SIZE];
	const struct ssrf_policy *policy;
	char addr[ADDR_TEXT_LEN];
	char refused[128];
	struct proxy_wait *waiters;
	struct proxy_lookup *next;
};

struct http_proxy {
	char *url;
	struct proxy_host *hosts;    /* newest first */
	size_t n_hosts;
	struct proxy_lookup *lookups;
	int n_lookups;
};

struct http_proxy *http_proxy_open(const char *url)
{
	struct http_proxy *p = calloc(1, sizeof(*p));
	if (p && !(p->url = strdup(url))) {
		free(p);
		p = NULL;
	}
	return p;
}

static void lookup_free(struct proxy_lookup *l)
{
	if (l->easy)
		curl_easy_cleanup(l->easy);
	free(l->name);
	free(l);
}

void http_proxy_close(struct http_sink *hs)
{
	struct http_proxy *p = hs->proxy;
	if (!p)
		return;
	while (p->lookups) {
		struct proxy_lookup *l = p->lookups;
		p->lookups = l->next;
		curl_multi_remove_handle(hs->multi, l->easy);
		lookup_free(l);
	}
	while (p->hosts) {
		struct proxy_host *h = p->hosts;
		p->hosts = h->next;
		free(h->name);
		free(h);
	}
	free(p->url);
	free(p);
	hs->proxy = NULL;
}

int http_proxy_busy(const struct http_sink *hs)
{
	return hs->proxy ? hs->proxy->n_lookups : 0;
}

void http_proxy_options(const struct http_sink *hs, CURL *e, struct http_guard *guard)
{
	guard->via_proxy = hs->proxy != NULL;
	if (!hs->proxy)
		return;
	curl_easy_setopt(e, CURLOPT_PROXY, hs->proxy->url);
	curl_easy_setopt(e, CURLOPT_PROXYTYPE, (long)CURLPROXY_HTTP);
	/* a tunnel for plain http:// too: the proxy forwards bytes to the address checked,
	 * and never reads a URL it could resolve */
	curl_easy_setopt(e, CURLOPT_HTTPPROXYTUNNEL, 1L);
	curl_easy_setopt(e, CURLOPT_NOPROXY, ""); /* no exceptions, whatever no_proxy says */
}

/* The host of url as libcurl reads it (returned, curl_free it; an IPv6 address in
 * brackets), or NULL. */
static char *url_host(const char *url)
{
	CURLU *u = curl_url();
	char *host = NULL;
	if (u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK)
		curl_url_get(u, CURLUPART_HOST, &host, 0);
	curl_url_cleanup(u);
	return host;
}

/* The address text (v6 in brackets) of sa into out[ADDR_TEXT_LEN]. */
static void addr_text(const struct sockaddr *sa, char *out)
{
	char ip[INET6_ADDRSTRLEN];
	ssrf_address_text(sa, ip, sizeof(ip));
	snprintf(out, ADDR_TEXT_LEN, sa->sa_family == AF_INET6 ? "[%s]" : "%s", ip);
}

/* host an IP address (v6 in brackets): 1 and *sa filled, else 0. */
static int host_literal(const char *host, struct sockaddr_storage *sa)
{
	char ip[INET6_ADDRSTRLEN];
	size_t n = strlen(host);
	memset(sa, 0, sizeof(*sa));
	if (n >= 2 && host[0] == '[' && n - 2 < sizeof(ip)) {
		memcpy(ip, host + 1, n - 2);
		ip[n - 2] = '\0';
		struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)sa;
		v6->sin6_family = AF_INET6;
		return inet_pton(AF_INET6, ip, &v6->sin6_addr) == 1;
	}
	struct sockaddr_in *v4 = (struct sockaddr_in *)sa;
	v4->sin_family = AF_INET;
	return inet_pton(AF_INET, host, &v4->sin_addr) == 1;
}

static struct proxy_host *host_find(struct http_proxy *p, const char *name, int64_t now_ms)
{
	for (struct proxy_host *h = p->hosts; h; h = h->next)
		if (strcmp(h->name, name) == 0)
			return now_ms - h->at_ms < PROXY_DNS_TTL_MS ? h : NULL;
	return NULL;
}

/* Keeps what lookup l found out (the oldest entry makes room). */
static void host_store(struct http_proxy *p, const struct proxy_lookup *l)
{
	struct proxy_host **pp = &p->hosts, *h = NULL;
	for (; *pp; pp = &(*pp)->next) {
		if (strcmp((*pp)->name, l->name) == 0) {
			h = *pp;
			*pp = h->next;
			p->n_hosts--;
			break;
		}
	}
	if (!h && p->n_hosts >= PROXY_HOSTS_MAX) {
		for (pp = &p->hosts; (*pp)->next; pp = &(*pp)->next)
			;
		h = *pp; /* the oldest, reused */
		*pp = NULL;
		p->n_hosts--;
		free(h->name);
		h->name = NULL;
	}
	if (!h && !(h = calloc(1, sizeof(*h))))
		return;
	if (!h->name && !(h->name = strdup(l->name))) {
		free(h);
		return;
	}
	snprintf(h->addr, sizeof(h->addr), "%s", l->addr);
	snprintf(h->refused, sizeof(h->refused), "%s", l->refused);
	h->at_ms = clock_mono_ms();
	h->next = p->hosts;
	p->hosts = h;
	p->n_hosts++;
}

/* CURLOPT_OPENSOCKETFUNCTION of a lookup: judges each address libcurl resolved and
 * opens nothing (libcurl then tries the next, and ends with COULDNT_CONNECT). */
static curl_socket_t lookup_open_cb(void *ctx, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct proxy_lookup *l = ctx;
	(void)purpose;
	const char *class = ssrf_refused(l->policy, &a->addr);
	char text[ADDR_TEXT_LEN], ip[INET6_ADDRSTRLEN];
	if (class && !l->refused[0])
		snprintf(l->refused, sizeof(l->refused), "%s address %s", class,
			 ssrf_address_text(&a->addr, ip, sizeof(ip)));
	else if (!class && !l->addr[0]) {
		addr_text(&a->addr, text);
		snprintf(l->addr, sizeof(l->addr), "%s", text);
	}
	return CURL_SOCKET_BAD;
}

/* Starts the lookup of name: 0, or -1 (memory, curl). */
static int lookup_start(struct http_sink *hs, const char *name, struct proxy_lookup **out)
{
	struct http_proxy *p = hs->proxy;
	struct proxy_lookup *l = calloc(1, sizeof(*l));
	char url[600];
	if (!l || !(l->name = strdup(name)) || !(l->easy = curl_easy_init()) ||
	    snprintf(url, sizeof(url), "http://%s/", name) >= (int)sizeof(url)) {
		if (l)
			lookup_free(l);
		return -1;
	}
	l->transfer = TRANSFER_LOOKUP;
	l->policy = hs->ssrf;
	CURL *e = l->easy;
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_CONNECT_ONLY, 1L);
	curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, lookup_open_cb);
	curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, l);
	curl_easy_setopt(e, CURLOPT_NOPROXY, "*"); /* resolved here, not by a proxy */
	curl_easy_setopt(e, CURLOPT_PRIVATE, l);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, l->errbuf);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)hs->connect_timeout_ms);
	if (curl_multi_add_handle(hs->multi, e) != CURLM_OK) {
		lookup_free(l);
		return -1;
	}
	l->next = p->lookups;
	p->lookups = l;
	p->n_lookups++;
	*out = l;
	return 0;
}

enum proxy_step http_proxy_prepare(struct http_sink *hs, CURL *e, const char *url,
				   struct http_guard *guard, struct curl_slist **connect_to,
				   struct proxy_wait *w, char *why, size_t whylen)
{
	struct http_proxy *p = hs->proxy;
	struct sockaddr_storage sa;
	char line[ADDR_TEXT_LEN + 8], ip[INET6_ADDRSTRLEN];
	enum proxy_step step = PROXY_FAILED;

	curl_slist_free_all(*connect_to);
	*connect_to = NULL;
	curl_easy_setopt(e, CURLOPT_CONNECT_TO, NULL);
	guard->refused[0] = '\0';
	char *host = url_host(url);
	if (!host) {
		snprintf(why, whylen, "the URL has no host libcurl can read");
		return PROXY_FAILED;
	}
	if (host_literal(host, &sa)) { /* the proxy is asked for this very address */
		const char *class = ssrf_refused(hs->ssrf, (const struct sockaddr *)&sa);
		if (class)
			snprintf(guard->refused, sizeof(guard->refused), "%s address %s", class,
				 ssrf_address_text((const struct sockaddr *)&sa, ip, sizeof(ip)));
		step = class ? PROXY_REFUSED : PROXY_GO;
		goto out;
	}
	struct proxy_host *known = host_find(p, host, clock_mono_ms());
	if (known && known->addr[0]) {
		/* any host, any port: to the checked address, the URL's port */
		snprintf(line, sizeof(line), "::%s:", known->addr);
		if (!(*connect_to = curl_slist_append(NULL, line))) {
			snprintf(why, whylen, "out of memory");
			goto out;
		}
		curl_easy_setopt(e, CURLOPT_CONNECT_TO, *connect_to);
		step = PROXY_GO;
		goto out;
	}
	if (known) {
		snprintf(guard->refused, sizeof(guard->refused), "%s", known->refused);
		step = PROXY_REFUSED;
		goto out;
	}
	struct proxy_lookup *l = p->lookups;
	while (l && strcmp(l->name, host) != 0)
		l = l->next;
	if (!l && lookup_start(hs, host, &l)) {
		snprintf(why, whylen, "the lookup of %s could not start", host);
		goto out;
	}
	w->lookup = l;
	w->next = l->waiters;
	l->waiters = w;
	step = PROXY_WAIT;
out:
	curl_free(host);
	return step;
}

void http_proxy_wait_cancel(struct http_sink *hs, struct proxy_wait *w)
{
	(void)hs;
	if (!w->lookup)
		return;
	for (struct proxy_wait **pp = &w->lookup->waiters; *pp; pp = &(*pp)->next) {
		if (*pp == w) {
			*pp = w->next;
			break;
		}
	}
	w->lookup = NULL;
	w->next = NULL;
}

void http_proxy_lookup_done(struct http_sink *hs, struct proxy_lookup *l, CURLcode rc)
{
	struct http_proxy *p = hs->proxy;
	char why[CURL_ERROR_SIZE + 64];

	curl_multi_remove_handle(hs->multi, l->easy);
	for (struct proxy_lookup **pp = &p->lookups; *pp; pp = &(*pp)->next) {
		if (*pp == l) {
			*pp = l->next;
			break;
		}
	}
	p->n_lookups--;
	/* addresses judged: kept; none (no such name, DNS down): each waiter fails now */
	int found = l->addr[0] || l->refused[0];
	enum transport_error te = found ? TRANSPORT_OK : http_classify(rc, l->errbuf);
	if (found)
		host_store(p, l);
	else
		snprintf(why, sizeof(why), "%s", l->errbuf[0] ? l->errbuf : curl_easy_strerror(rc));
	struct proxy_wait *w = l->waiters;
	l->waiters = NULL;
	while (w) {
		struct proxy_wait *next = w->next;
		w->lookup = NULL;
		w->next = NULL;
		w->resume(hs, w, te, found ? NULL : why);
		w = next;
	}
	lookup_free(l);
}
