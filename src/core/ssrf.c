/* ssrf.c: the SSRF guard's address rule (see ssrf.h). */
#include "core/ssrf.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The refused ranges, in the 128-bit form (IPv4 as ::ffff:a.b.c.d); the first match
 * names the class, so a range inside another comes first. */
static const struct range {
	const char *cidr;
	const char *class;
} refused[] = {
	{"0.0.0.0/8", "unspecified"},       {"10.0.0.0/8", "private"},
	{"100.64.0.0/10", "cgnat"},         {"127.0.0.0/8", "loopback"},
	{"169.254.0.0/16", "link-local"},   {"172.16.0.0/12", "private"},
	{"192.0.0.0/24", "reserved"},       {"192.168.0.0/16", "private"},
	{"198.18.0.0/15", "reserved"},      {"224.0.0.0/4", "multicast"},
	{"255.255.255.255/32", "broadcast"}, {"240.0.0.0/4", "reserved"},
	{"::/128", "unspecified"},          {"::1/128", "loopback"},
	/* IPv4-compatible (deprecated: RFC 4291 §2.5.5.1), local-use NAT64 (RFC 8215: what
	 * it reaches is the site's choice), Teredo (RFC 4380: a tunnel to anywhere) */
	{"::/96", "reserved"},              {"64:ff9b:1::/48", "reserved"},
	{"2001::/32", "reserved"},          {"100::/64", "reserved"},
	{"fc00::/7", "private"},            {"fe80::/10", "link-local"},
	{"fec0::/10", "private"},           {"ff00::/8", "multicast"},
};

static int cidr_parse(const char *text, struct ssrf_cidr *c)
{
	char host[64];
	const char *slash = strchr(text, '/');
	size_t len = slash ? (size_t)(slash - text) : strlen(text);
	struct in_addr a4;
	int max;

	if (len == 0 || len >= sizeof(host))
		return -1;
	memcpy(host, text, len);
	host[len] = '\0';
	memset(c->addr, 0, sizeof(c->addr));
	if (inet_pton(AF_INET, host, &a4) == 1) {
		c->addr[10] = c->addr[11] = 0xff;
		memcpy(c->addr + 12, &a4, 4);
		max = 32;
	} else if (inet_pton(AF_INET6, host, c->addr) == 1) {
		max = 128;
	} else {
		return -1;
	}
	c->bits = max;
	if (slash) {
		char *end;
		long bits = strtol(slash + 1, &end, 10);
		if (end == slash + 1 || *end || bits < 0 || bits > max)
			return -1;
		c->bits = (int)bits;
	}
	if (max == 32)
		c->bits += 96;
	return 0;
}

static int cidr_contains(const struct ssrf_cidr *c, const uint8_t addr[16])
{
	int full = c->bits / 8, rest = c->bits % 8;

	if (memcmp(c->addr, addr, (size_t)full) != 0)
		return 0;
	if (rest) {
		uint8_t mask = (uint8_t)(0xff << (8 - rest));
		if ((c->addr[full] & mask) != (addr[full] & mask))
			return 0;
	}
	return 1;
}

int ssrf_policy_parse(const char *list, struct ssrf_policy *p, char *err, size_t errlen)
{
	char buf[2048], *save = NULL;

	memset(p, 0, sizeof(*p));
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]) && i < SSRF_REFUSED_MAX; i++) {
		if (cidr_parse(refused[i].cidr, &p->refused[i]))
			abort(); /* a typo in the table above */
		p->refused_class[i] = refused[i].class;
		p->n_refused++;
	}
	if (!list || !*list)
		return 0;
	if (strlen(list) >= sizeof(buf)) {
		snprintf(err, errlen, "ssrf_allow is longer than %zu characters", sizeof(buf) - 1);
		return -1;
	}
	snprintf(buf, sizeof(buf), "%s", list);
	for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		while (*tok == ' ' || *tok == '\t')
			tok++;
		char *end = tok + strlen(tok);
		while (end > tok && (end[-1] == ' ' || end[-1] == '\t'))
			*--end = '\0';
		if (!*tok)
			continue;
		if (p->n_allow == SSRF_ALLOW_MAX) {
			snprintf(err, errlen, "ssrf_allow: at most %d entries", SSRF_ALLOW_MAX);
			return -1;
		}
		if (cidr_parse(tok, &p->allow[p->n_allow])) {
			snprintf(err, errlen,
				 "ssrf_allow: \"%.64s\" is not an address or CIDR such as 10.1.0.0/16 "
				 "or fd00::/8", tok);
			return -1;
		}
		p->n_allow++;
	}
	return 0;
}

/* sa as a 16-byte address (IPv4 as IPv4-mapped); -1 for another family. */
static int to_v6(const struct sockaddr *sa, uint8_t out[16])
{
	memset(out, 0, 16);
	if (sa->sa_family == AF_INET) {
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return 0;
	}
	return -1;
}

/* The IPv4 address an IPv6 address carries and reaches, as IPv4-mapped, into v4: the
 * well-known NAT64 prefix 64:ff9b::/96 (RFC 6052: its last 32 bits) and 6to4 2002::/16
 * (RFC 3056: the 32 bits after the prefix). 1 when a carries one, else 0. */
static int embedded_v4(const uint8_t a[16], uint8_t v4[16])
{
	static const uint8_t nat64[12] = {0x00, 0x64, 0xff, 0x9b};
	const uint8_t *in;

	if (memcmp(a, nat64, sizeof(nat64)) == 0)
		in = a + 12;
	else if (a[0] == 0x20 && a[1] == 0x02)
		in = a + 2;
	else
		return 0;
	memset(v4, 0, 16);
	v4[10] = v4[11] = 0xff;
	memcpy(v4 + 12, in, 4);
	return 1;
}

/* The rule over the 16-byte form: the allowlist first, then the refused ranges; an
 * address that carries an IPv4 address is judged as that address too. */
static const char *refused_v6(const struct ssrf_policy *p, const uint8_t a[16])
{
	uint8_t v4[16];

	for (int i = 0; i < p->n_allow; i++)
		if (cidr_contains(&p->allow[i], a))
			return NULL;
	for (int i = 0; i < p->n_refused; i++)
		if (cidr_contains(&p->refused[i], a))
			return p->refused_class[i];
	return embedded_v4(a, v4) ? refused_v6(p, v4) : NULL;
}

const char *ssrf_refused(const struct ssrf_policy *p, const struct sockaddr *sa)
{
	uint8_t a[16];

	if (to_v6(sa, a))
		return "unsupported";
	return refused_v6(p, a);
}

const char *ssrf_address_text(const struct sockaddr *sa, char *buf, size_t size)
{
	const void *src = sa->sa_family == AF_INET
				  ? (const void *)&((const struct sockaddr_in *)sa)->sin_addr
				  : (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
	if (!inet_ntop(sa->sa_family, src, buf, (socklen_t)size))
		snprintf(buf, size, "?");
	return buf;
}
