/* ssrf.h: the SSRF guard's rule — which addresses outboxd may connect to for a delivery
 * or an OAuth2 token request (Kafka brokers, set by the operator, are not subject to it).
 *
 * Refused unless an operator allows them (setting ssrf_allow: comma-separated CIDRs):
 * loopback, private (RFC 1918, IPv6 unique-local), link-local (which holds the cloud
 * metadata address 169.254.169.254), CGNAT (100.64.0.0/10), multicast, unspecified,
 * broadcast, the reserved 240.0.0.0/4, and the IPv6 forms of all of these. An IPv6
 * address that reaches an IPv4 one is judged as that one: IPv4-mapped ::ffff:a.b.c.d,
 * NAT64 64:ff9b::a.b.c.d and 6to4 2002:AABB:CCDD::/48; IPv4-compatible ::a.b.c.d,
 * local-use NAT64 64:ff9b:1::/48 and Teredo 2001::/32, whose target outboxd cannot tell,
 * are refused whole ("reserved"). The check runs on the address curl is about to
 * connect to, after DNS resolution, so a name that resolves to 127.0.0.1 is refused and
 * there is no window for DNS rebinding.
 *
 * Pure: no I/O, no allocation after ssrf_policy_parse. */
#ifndef OUTBOXD_CORE_SSRF_H
#define OUTBOXD_CORE_SSRF_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define SSRF_ALLOW_MAX 32  /* CIDRs in ssrf_allow */

struct ssrf_cidr {
	uint8_t addr[16];  /* IPv4 as IPv4-mapped IPv6 */
	int bits;          /* prefix length over the 128-bit form */
};

#define SSRF_REFUSED_MAX 24 /* the refused ranges (ssrf.c) */

struct ssrf_policy {
	struct ssrf_cidr allow[SSRF_ALLOW_MAX];
	int n_allow;
	struct ssrf_cidr refused[SSRF_REFUSED_MAX]; /* filled by ssrf_policy_parse */
	const char *refused_class[SSRF_REFUSED_MAX];
	int n_refused;
};

/* Makes p: the refused ranges, and the allowlist from a comma-separated list of CIDRs
 * ("127.0.0.0/8, ::1/128"; a bare address is a /32 or /128). NULL or "" allows nothing.
 * Returns 0, or -1 with err saying which entry is wrong. */
int ssrf_policy_parse(const char *list, struct ssrf_policy *p, char *err, size_t errlen);

/* The class of address sa that the guard refuses ("loopback", "private", "link-local",
 * "cgnat", "multicast", "unspecified", "broadcast", "reserved"), or NULL when outboxd may
 * connect to it: a public address, or one inside p's allowlist. A family other than
 * IPv4 and IPv6 is refused as "unsupported". */
const char *ssrf_refused(const struct ssrf_policy *p, const struct sockaddr *sa);

/* The address of sa as text, into buf (INET6_ADDRSTRLEN is enough). */
const char *ssrf_address_text(const struct sockaddr *sa, char *buf, size_t size);

#endif
