/* test_http_head.c: what the lean client writes (deliver/http_head.c) for http:// and
 * https:// URLs: the scheme's default port, the Host header as libcurl writes it (without
 * an explicit default port), the URLs left to libcurl, and the request head, with the
 * body in the same buffer over TLS (one SSL_write per request). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "deliver/http_head.h"

static void test_schemes_and_ports(void **state)
{
	(void)state;
	struct url_parts u;
	assert_int_equal(wire_url_split("https://example.com/hook", &u), 0);
	assert_true(u.tls);
	assert_int_equal(u.port, 443);
	assert_int_equal(u.host_hdr_len, strlen("example.com"));

	assert_int_equal(wire_url_split("https://example.com:443/hook", &u), 0);
	assert_int_equal(u.port, 443);
	assert_int_equal(u.auth_len, strlen("example.com:443"));
	assert_int_equal(u.host_hdr_len, strlen("example.com"));

	assert_int_equal(wire_url_split("https://127.0.0.1:8443/hook", &u), 0);
	assert_int_equal(u.port, 8443);
	assert_int_equal(u.host_hdr_len, strlen("127.0.0.1:8443"));

	assert_int_equal(wire_url_split("http://[::1]:80/", &u), 0);
	assert_false(u.tls);
	assert_int_equal(u.port, 80);
	assert_int_equal(u.host_len, 3);
	assert_int_equal(u.host_hdr_len, strlen("[::1]"));

	/* left to libcurl */
	assert_int_equal(wire_url_split("ftp://example.com/", &u), -1);
	assert_int_equal(wire_url_split("https://user@example.com/", &u), -1);
	assert_int_equal(wire_url_split("https://example.com:0/", &u), -1);
	assert_int_equal(wire_url_split("https://127.1/", &u), -1);
}

static void test_head_over_tls_carries_the_body(void **state)
{
	(void)state;
	struct url_parts u;
	struct wire_head wh = {0};
	const char lines[] = "Content-Type: application/json\0webhook-id: msg_1\0Expect:\0";
	const char body[] = "{\"a\":1}";
	assert_int_equal(wire_url_split("https://example.com:443/in?x=1", &u), 0);
	assert_int_equal(wire_head_build(&wh, &u, lines, sizeof(lines) - 1, body, strlen(body)), 0);
	const char want[] = "POST /in?x=1 HTTP/1.1\r\nHost: example.com\r\nAccept: */*\r\n"
			    "Content-Length: 7\r\nContent-Type: application/json\r\n"
			    "webhook-id: msg_1\r\n\r\n{\"a\":1}";
	assert_int_equal(wh.len, sizeof(want) - 1);
	assert_memory_equal(wh.buf, want, wh.len);

	/* plain http: the head only, the body goes beside it in the same sendmsg */
	assert_int_equal(wire_url_split("http://10.0.0.1:8080/", &u), 0);
	assert_int_equal(wire_head_build(&wh, &u, lines, sizeof(lines) - 1, body, strlen(body)), 0);
	const char plain[] = "POST / HTTP/1.1\r\nHost: 10.0.0.1:8080\r\nAccept: */*\r\n"
			     "Content-Length: 7\r\nContent-Type: application/json\r\n"
			     "webhook-id: msg_1\r\n\r\n";
	assert_int_equal(wh.len, sizeof(plain) - 1);
	assert_memory_equal(wh.buf, plain, wh.len);
	free(wh.buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_schemes_and_ports),
		cmocka_unit_test(test_head_over_tls_carries_the_body),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
