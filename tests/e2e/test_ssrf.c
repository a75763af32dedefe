/* test_ssrf.c: the SSRF guard as a user sees it. With the default settings (nothing
 * allowed), a subscription to each refused address class — loopback, private, link-local
 * (the cloud metadata address), CGNAT, multicast, unspecified, IPv6 loopback and
 * unique-local, IPv4-mapped IPv6, NAT64 and 6to4 forms of refused IPv4 addresses,
 * IPv4-compatible, local-use NAT64 and Teredo addresses, and a name that resolves to
 * loopback — gets one attempt,
 * dead at once, with a message saying the SSRF guard refused it and the address; the
 * receiver on loopback sees nothing. ssrf_allow lets one address through (delivered)
 * while its neighbours stay refused, and an OAuth2 token request to a refused address is
 * refused the same way. */
#include "e2e.h"

static struct receiver rcv;
static struct daemon dmn;

static int setup(void **state)
{
	assert_int_equal(receiver_start(&rcv), 0);
	memset(&dmn, 0, sizeof(dmn));
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

static json_t *wait_dead(const char *id)
{
	json_t *d = e2e_wait_dead(&dmn, id, 10000);
	if (!json_is_true(json_object_get(d, "dead"))) {
		char *dump = json_dumps(d, JSON_INDENT(2));
		fprintf(stderr, "delivery %s not dead:\n%s\n", id, dump ? dump : "");
		free(dump);
	}
	return d;
}

/* Creates a subscription to endpoint for event type `type`, sends one event of that type
 * and returns its delivery id in out. */
static void deliver_to(const char *name, const char *endpoint, const char *extra, char out[64])
{
	char sub[64], ev[64], body[256], ids[1][64];

	e2e_create_sub(&dmn, sub, "{\"name\":\"%s\",\"event_types\":[\"%s.*\"],"
				  "\"endpoint\":\"%s\"%s}", name, name, endpoint, extra ? extra : "");
	snprintf(body, sizeof(body), "{\"event_type\":\"%s.event\",\"payload\":{}}", name);
	e2e_send(&dmn, ev, body);
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 1), 1);
	snprintf(out, 64, "%s", ids[0]);
}

/* The delivery is dead after one attempt refused by the guard, naming class and address. */
static void expect_refused(const char *id, const char *class, const char *address)
{
	json_t *d = wait_dead(id);
	assert_true(json_is_true(json_object_get(d, "dead")));
	assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), 1);
	json_t *err = json_object_get(d, "last_error");
	assert_int_equal(json_integer_value(json_object_get(err, "code")), 403);
	assert_string_equal(json_string_value(json_object_get(err, "message")),
			    "refused by the SSRF guard");
	const char *cause = json_string_value(json_object_get(err, "cause"));
	assert_non_null(cause);
	char want[128];
	snprintf(want, sizeof(want), "%s address %s", class, address);
	if (!strstr(cause, want))
		fail_msg("cause \"%s\" does not say \"%s\"", cause, want);
	assert_non_null(strstr(cause, "ssrf_allow"));
	json_decref(d);
}

static void test_refused_by_default(void **state)
{
	static const struct {
		const char *name, *url_fmt, *class, *address;
	} cases[] = {
		{"loopback", "http://127.0.0.1:%d/hook", "loopback", "127.0.0.1"},
		{"private", "http://10.0.0.1:%d/hook", "private", "10.0.0.1"},
		{"metadata", "http://169.254.169.254:%d/latest/meta-data", "link-local",
		 "169.254.169.254"},
		{"cgnat", "http://100.64.0.1:%d/hook", "cgnat", "100.64.0.1"},
		{"multicast", "http://224.0.0.1:%d/hook", "multicast", "224.0.0.1"},
		{"unspecified", "http://0.0.0.0:%d/hook", "unspecified", "0.0.0.0"},
		{"v6loopback", "http://[::1]:%d/hook", "loopback", "::1"},
		{"v6private", "http://[fd00::1]:%d/hook", "private", "fd00::1"},
		{"mapped", "http://[::ffff:127.0.0.1]:%d/hook", "loopback", "::ffff:127.0.0.1"},
		/* IPv6 forms that reach an IPv4 address, or tunnel to one outboxd cannot tell */
		{"nat64", "http://[64:ff9b::7f00:1]:%d/hook", "loopback", "64:ff9b::7f00:1"},
		{"sixtofour", "http://[2002:a9fe:a9fe::1]:%d/hook", "link-local", "2002:a9fe:a9fe::1"},
		{"v4compat", "http://[::7f00:1]:%d/hook", "reserved", "::127.0.0.1"},
		{"nat64local", "http://[64:ff9b:1::1]:%d/hook", "reserved", "64:ff9b:1::1"},
		{"teredo", "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]:%d/hook", "reserved",
		 "2001:0:4136:e378:8000:63bf:3fff:fdd2"},
		{"localname", "http://localhost:%d/hook", "loopback", ""},
	};
	const char *env[] = {"OUTBOXD_SSRF_ALLOW=", NULL};
	char ids[sizeof(cases) / sizeof(cases[0])][64];

	assert_int_equal(daemon_start(&dmn, env), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char url[128];
		snprintf(url, sizeof(url), cases[i].url_fmt, rcv.port);
		deliver_to(cases[i].name, url, NULL, ids[i]);
	}
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_refused(ids[i], cases[i].class, cases[i].address);
	/* nothing reached the receiver on loopback */
	assert_int_equal(receiver_count(&rcv, "/hook"), 0);
}

static void test_allowlist_lets_one_through(void **state)
{
	const char *env[] = {"OUTBOXD_SSRF_ALLOW=127.0.0.1/32", NULL};
	char url[128], ok[64], still[64], token[64];

	assert_int_equal(daemon_start(&dmn, env), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/hook", rcv.port);
	deliver_to("allowed", url, NULL, ok);
	json_t *d = e2e_wait_status(&dmn, ok, "PROCESSED", 10000);
	json_decref(d);
	assert_int_equal(receiver_count(&rcv, "/hook"), 1);

	/* the rest of loopback stays refused */
	snprintf(url, sizeof(url), "http://127.0.0.2:%d/hook", rcv.port);
	deliver_to("neighbour", url, NULL, still);
	expect_refused(still, "loopback", "127.0.0.2");

	/* an OAuth2 token request goes through the guard too: the endpoint is allowed, the
	 * token URL is not */
	char extra[256];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/hook", rcv.port);
	snprintf(extra, sizeof(extra),
		 ",\"auth\":{\"type\":\"oauth2\",\"token_url\":\"http://127.0.0.3:%d/token\","
		 "\"client_id\":\"c\",\"client_secret\":\"s3cret\"}", rcv.port);
	deliver_to("token", url, extra, token);
	d = wait_dead(token);
	assert_true(json_is_true(json_object_get(d, "dead")));
	assert_int_equal(json_integer_value(json_object_get(d, "attempt_count")), 1);
	const char *cause =
		json_string_value(json_object_get(json_object_get(d, "last_error"), "cause"));
	assert_non_null(cause);
	assert_non_null(strstr(cause, "SSRF guard refused to connect to loopback address 127.0.0.3"));
	assert_null(strstr(cause, "s3cret"));
	json_decref(d);
	assert_int_equal(receiver_count(&rcv, "/token"), 0);
	assert_int_equal(receiver_count(&rcv, "/hook"), 1);
}

static int log_has(const char *text)
{
	char path[512], line[4096];
	int found = 0;
	FILE *f = fopen(daemon_log_path(&dmn, path, sizeof(path)), "r");

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, text) != NULL;
	if (f)
		fclose(f);
	return found;
}

static void test_bad_allowlist_stops_the_start(void **state)
{
	const char *env[] = {"OUTBOXD_SSRF_ALLOW=localhost", NULL};
	assert_int_not_equal(daemon_start(&dmn, env), 0);
	assert_true(log_has("ssrf_allow: \"localhost\" is not an address or CIDR"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_refused_by_default, setup, teardown),
		cmocka_unit_test_setup_teardown(test_allowlist_lets_one_through, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_allowlist_stops_the_start, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
