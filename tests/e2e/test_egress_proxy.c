/* test_egress_proxy.c: deliveries through a real egress proxy (Debian's tinyproxy,
 * tests/support/harness_proxy.h), seen from outside: with egress_proxy set, a delivery
 * to an IP address and one to a name reach the receiver through CONNECT tunnels the
 * proxy's log shows — to the checked address, never to the name — and an OAuth2 token
 * request goes the same way; a refused address is dead at once and the proxy is never
 * asked for it; the lean client stays off. ssrf_allow lets 127.0.0.1 through, not the
 * rest of loopback: the proxy's own address (127.0.0.1 too) is the operator's and
 * unchecked. */
#include "e2e.h"
#include "harness_proxy.h"

static struct receiver rcv;
static struct egress_proxy proxy;
static struct daemon dmn;

static int setup(void **state)
{
	char env_proxy[128];
	assert_int_equal(receiver_start(&rcv), 0);
	assert_int_equal(egress_proxy_start(&proxy), 0);
	snprintf(env_proxy, sizeof(env_proxy), "OUTBOXD_EGRESS_PROXY=%s", proxy.url);
	const char *env[] = {env_proxy, "OUTBOXD_SSRF_ALLOW=127.0.0.1/32", NULL};
	e2e_setup(NULL, &dmn, env);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	egress_proxy_stop(&proxy);
	return 0;
}

/* Creates a subscription (name, endpoint, extra fields) and sends it one event; returns
 * the delivery's id in out. */
static void deliver(const char *name, const char *endpoint, const char *extra, char out[64])
{
	char sub[64], ev[64], body[256], ids[1][64];
	e2e_create_sub(&dmn, sub, "{\"name\":\"%s\",\"event_types\":[\"%s.*\"],\"endpoint\":"
				  "\"%s\"%s}", name, name, endpoint, extra ? extra : "");
	snprintf(body, sizeof(body), "{\"event_type\":\"%s.event\",\"payload\":{\"to\":\"%s\"}}",
		 name, name);
	e2e_send(&dmn, ev, body);
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 1), 1);
	snprintf(out, 64, "%s", ids[0]);
}

static void test_through_the_proxy(void **state)
{
	char url[128], id[64], target[64], host[64];
	snprintf(target, sizeof(target), "127.0.0.1:%d", rcv.port);
	assert_int_equal(egress_proxy_connects(&proxy, NULL), 0);

	/* an address in the URL: a tunnel to it */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/by-ip", rcv.port);
	deliver("byip", url, NULL, id);
	json_decref(e2e_wait_status(&dmn, id, "PROCESSED", 10000));
	assert_int_equal(receiver_count(&rcv, "/by-ip"), 1);
	assert_true(egress_proxy_connects(&proxy, target) >= 1);

	/* a name: outboxd resolves it, the guard checks 127.0.0.1 (allowed) and ::1 (not),
	 * and the proxy is asked for the checked address, not for the name */
	long before = egress_proxy_connects(&proxy, target);
	snprintf(url, sizeof(url), "http://localhost:%d/by-name", rcv.port);
	deliver("byname", url, NULL, id);
	json_decref(e2e_wait_status(&dmn, id, "PROCESSED", 10000));
	assert_true(egress_proxy_connects(&proxy, target) > before);
	snprintf(host, sizeof(host), "localhost:%d", rcv.port);
	assert_int_equal(egress_proxy_connects(&proxy, host), 0);
	json_t *r = receiver_requests(&rcv, "/by-name");
	assert_int_equal(json_array_size(r), 1);
	/* the request itself still names the host it was written for */
	assert_string_equal(json_string_value(json_object_get(
				    json_object_get(json_array_get(r, 0), "headers"), "host")),
			    host);
	json_decref(r);

	/* an OAuth2 token request goes through it too */
	assert_int_equal(receiver_script(&rcv, "/token",
					 "{\"default\":{\"status\":200,\"headers\":{\"Content-Type\":"
					 "\"application/json\"},\"body\":\"{\\\"access_token\\\":"
					 "\\\"tok-via-proxy\\\",\\\"token_type\\\":\\\"Bearer\\\"}\"}}"), 0);
	char extra[256];
	snprintf(extra, sizeof(extra), ",\"auth\":{\"type\":\"oauth2\",\"token_url\":"
				       "\"http://localhost:%d/token\",\"client_id\":\"c\","
				       "\"client_secret\":\"s\"}", rcv.port);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/with-token", rcv.port);
	before = egress_proxy_connects(&proxy, target);
	deliver("withtoken", url, extra, id);
	json_decref(e2e_wait_status(&dmn, id, "PROCESSED", 10000));
	/* the token request's tunnel (the delivery may reuse one kept alive) */
	assert_true(egress_proxy_connects(&proxy, target) > before);
	r = receiver_requests(&rcv, "/with-token");
	assert_string_equal(json_string_value(json_object_get(
				    json_object_get(json_array_get(r, 0), "headers"), "authorization")),
			    "Bearer tok-via-proxy");
	json_decref(r);

	/* behind a proxy, everything went over libcurl */
	assert_true(e2e_metric(&dmn, "outboxd_http_requests_total{client=\"lean\"}") <= 0);
}

static void test_refused_before_the_proxy(void **state)
{
	char url[128], id[64], target[64];
	long before = egress_proxy_connects(&proxy, NULL);

	/* the rest of loopback is refused, by address and by a name that has no other */
	snprintf(url, sizeof(url), "http://127.0.0.2:%d/refused", rcv.port);
	deliver("refused", url, NULL, id);
	json_t *d = e2e_wait_dead(&dmn, id, 10000);
	json_t *err = json_object_get(d, "last_error");
	assert_int_equal(json_integer_value(json_object_get(err, "code")), 403);
	assert_string_equal(json_string_value(json_object_get(err, "message")),
			    "refused by the SSRF guard");
	assert_non_null(strstr(json_string_value(json_object_get(err, "cause")),
			       "loopback address 127.0.0.2"));
	assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), 1);
	json_decref(d);
	snprintf(url, sizeof(url), "http://[::1]:%d/refused", rcv.port);
	deliver("refused6", url, NULL, id);
	d = e2e_wait_dead(&dmn, id, 10000);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(d, "last_error"),
							    "code")), 403);
	json_decref(d);
	/* the proxy was never asked */
	snprintf(target, sizeof(target), "127.0.0.2:%d", rcv.port);
	assert_int_equal(egress_proxy_connects(&proxy, target), 0);
	assert_int_equal(egress_proxy_connects(&proxy, NULL), before);
	assert_int_equal(receiver_count(&rcv, "/refused"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_through_the_proxy),
		cmocka_unit_test(test_refused_before_the_proxy),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
