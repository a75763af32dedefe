/* test_ssrf.c: core/ssrf.c as a table — every address class the SSRF guard refuses, in
 * IPv4, IPv6 and IPv4-mapped form, the IPv6 ranges that carry or tunnel to an IPv4
 * address (IPv4-compatible, NAT64, local-use NAT64, 6to4, Teredo) at their edges, public
 * addresses let through, the allowlist's CIDRs (edges included), and the allowlists it
 * refuses to read. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "core/ssrf.h"

/* addr as a sockaddr (IPv4 or IPv6 by its text). */
static const struct sockaddr *sa_of(const char *addr, struct sockaddr_storage *ss)
{
	memset(ss, 0, sizeof(*ss));
	struct sockaddr_in *a4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)ss;
	if (inet_pton(AF_INET, addr, &a4->sin_addr) == 1) {
		a4->sin_family = AF_INET;
	} else {
		assert_int_equal(inet_pton(AF_INET6, addr, &a6->sin6_addr), 1);
		a6->sin6_family = AF_INET6;
	}
	return (const struct sockaddr *)ss;
}

static const struct {
	const char *addr;
	const char *class; /* NULL: allowed */
} no_allowlist[] = {
	{"127.0.0.1", "loopback"},        {"127.255.255.254", "loopback"},
	{"10.0.0.1", "private"},          {"172.16.0.1", "private"},
	{"172.31.255.255", "private"},    {"172.32.0.1", NULL},
	{"192.168.1.1", "private"},       {"169.254.169.254", "link-local"},
	{"100.64.0.1", "cgnat"},          {"100.127.255.255", "cgnat"},
	{"100.128.0.1", NULL},            {"224.0.0.1", "multicast"},
	{"239.255.255.250", "multicast"}, {"0.0.0.0", "unspecified"},
	{"255.255.255.255", "broadcast"}, {"240.0.0.1", "reserved"},
	{"8.8.8.8", NULL},                {"93.184.216.34", NULL},
	{"::1", "loopback"},              {"::", "unspecified"},
	{"fc00::1", "private"},           {"fd12:3456::1", "private"},
	{"fe80::1", "link-local"},        {"ff02::1", "multicast"},
	{"::ffff:127.0.0.1", "loopback"}, {"::ffff:169.254.169.254", "link-local"},
	{"::ffff:10.1.2.3", "private"},   {"::ffff:8.8.8.8", NULL},
	{"2606:4700::1111", NULL},
	/* IPv4-compatible ::/96: refused whole, whatever it carries */
	{"::7f00:1", "reserved"},         {"::808:808", "reserved"},
	{"::1:0:0", NULL},                /* past ::/96 */
	/* NAT64 64:ff9b::/96: judged as the IPv4 address it carries */
	{"64:ff9b::7f00:1", "loopback"},  {"64:ff9b::a00:1", "private"},
	{"64:ff9b::a9fe:a9fe", "link-local"}, {"64:ff9b::6440:1", "cgnat"},
	{"64:ff9b::808:808", NULL},       {"64:ff9b::1:0:0:1", NULL}, /* past the /96 */
	/* local-use NAT64 64:ff9b:1::/48: refused whole */
	{"64:ff9b:1::808:808", "reserved"}, {"64:ff9b:1:ffff:ffff::1", "reserved"},
	{"64:ff9b:2::1", NULL},
	/* 6to4 2002::/16: judged as the IPv4 address in its next 32 bits */
	{"2002:7f00:1::1", "loopback"},   {"2002:a00:1::1", "private"},
	{"2002:c0a8:101::1", "private"},  {"2002:a9fe:a9fe::", "link-local"},
	{"2002:e000:1::1", "multicast"},  {"2002:808:808::1", NULL},
	/* Teredo 2001::/32: refused whole; the rest of 2001::/16 is not */
	{"2001:0:4136:e378:8000:63bf:3fff:fdd2", "reserved"}, {"2001::1", "reserved"},
	{"2001:0:ffff:ffff:ffff:ffff:ffff:ffff", "reserved"}, {"2001:1::1", NULL},
	{"2001:4860:4860::8888", NULL},
};

static void test_refused_classes(void **state)
{
	struct ssrf_policy p;
	char err[128];
	struct sockaddr_storage ss;

	assert_int_equal(ssrf_policy_parse(NULL, &p, err, sizeof(err)), 0);
	for (size_t i = 0; i < sizeof(no_allowlist) / sizeof(no_allowlist[0]); i++) {
		const char *got = ssrf_refused(&p, sa_of(no_allowlist[i].addr, &ss));
		const char *want = no_allowlist[i].class;
		if ((got == NULL) != (want == NULL) || (got && strcmp(got, want) != 0))
			fail_msg("%s: got %s, want %s", no_allowlist[i].addr, got ? got : "allowed",
				 want ? want : "allowed");
	}
}

static void test_allowlist(void **state)
{
	struct ssrf_policy p;
	char err[128], text[64];
	struct sockaddr_storage ss;

	assert_int_equal(ssrf_policy_parse(" 127.0.0.0/8, 10.1.0.0/16 ,fd00::/8,192.168.1.7", &p,
					   err, sizeof(err)), 0);
	assert_int_equal(p.n_allow, 4);
	assert_null(ssrf_refused(&p, sa_of("127.0.0.1", &ss)));
	assert_null(ssrf_refused(&p, sa_of("::ffff:127.0.0.1", &ss))); /* mapped: the same */
	assert_null(ssrf_refused(&p, sa_of("10.1.255.255", &ss)));
	assert_string_equal(ssrf_refused(&p, sa_of("10.2.0.0", &ss)), "private");
	assert_null(ssrf_refused(&p, sa_of("fd00::5", &ss)));
	assert_null(ssrf_refused(&p, sa_of("192.168.1.7", &ss)));
	assert_string_equal(ssrf_refused(&p, sa_of("192.168.1.8", &ss)), "private");
	assert_string_equal(ssrf_refused(&p, sa_of("::1", &ss)), "loopback"); /* v4 range only */
	/* an allowed IPv4 range lets its NAT64 and 6to4 forms through, and only those */
	assert_null(ssrf_refused(&p, sa_of("64:ff9b::a01:203", &ss)));
	assert_null(ssrf_refused(&p, sa_of("2002:a01:203::1", &ss)));
	assert_string_equal(ssrf_refused(&p, sa_of("64:ff9b::a02:0", &ss)), "private");
	assert_string_equal(ssrf_refused(&p, sa_of("::a01:203", &ss)), "reserved");
	/* an allowed IPv6 range of those forms is taken as it is */
	assert_int_equal(ssrf_policy_parse("64:ff9b::/96, 2001::/32", &p, err, sizeof(err)), 0);
	assert_null(ssrf_refused(&p, sa_of("64:ff9b::7f00:1", &ss)));
	assert_null(ssrf_refused(&p, sa_of("2001::1", &ss)));
	assert_string_equal(ssrf_refused(&p, sa_of("2002:7f00:1::1", &ss)), "loopback");
	assert_string_equal(ssrf_address_text(sa_of("fd00::5", &ss), text, sizeof(text)), "fd00::5");
	assert_string_equal(ssrf_address_text(sa_of("10.1.2.3", &ss), text, sizeof(text)),
			    "10.1.2.3");
}

static void test_bad_allowlists(void **state)
{
	static const char *const bad[] = {"localhost", "10.0.0.0/33", "::1/129", "10.0.0.0/",
					  "10.0.0/8", "1.2.3.4/-1", "fd00::/x"};
	struct ssrf_policy p;
	char err[128];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		if (ssrf_policy_parse(bad[i], &p, err, sizeof(err)) == 0)
			fail_msg("\"%s\" was accepted", bad[i]);
		assert_non_null(strstr(err, "ssrf_allow"));
	}
	assert_int_equal(ssrf_policy_parse("", &p, err, sizeof(err)), 0);
	assert_int_equal(p.n_allow, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refused_classes),
		cmocka_unit_test(test_allowlist),
		cmocka_unit_test(test_bad_allowlists),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
