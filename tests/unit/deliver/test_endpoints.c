/* test_endpoints.c: the dispatcher's per-endpoint flow control state (deliver/endpoints.h):
 * which URLs share an endpoint and how its key shows them (a path, which may hold a token,
 * only as a hash), the requests open to it in the order they began, and a request that
 * stays open far longer than answers take cutting the limit at once. No sockets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "deliver/endpoints.h"

static void expect_key(const char *url, const char *want)
{
	char key[ENDPOINT_KEY_MAX];
	if (!want) {
		assert_int_equal(endpoint_key(url, key), -1);
		return;
	}
	assert_int_equal(endpoint_key(url, key), 0);
	assert_string_equal(key, want);
}

static void test_keys(void **state)
{
	char a[ENDPOINT_KEY_MAX], b[ENDPOINT_KEY_MAX];

	expect_key("http://Example.COM/", "example.com:80");
	expect_key("http://example.com", "example.com:80");
	expect_key("https://example.com?x=1", "example.com:443");
	expect_key("http://u:p@127.0.0.1:8080/", "127.0.0.1:8080");
	expect_key("http://[::1]:9000/", "[::1]:9000");
	expect_key("kafka://orders", NULL);
	expect_key("http://:80/", NULL);
	expect_key("http://h:99999/", NULL);

	/* a path is part of the endpoint, but only as a hash: it may be a credential */
	assert_int_equal(endpoint_key("https://hooks.example.com/services/T0/B0/s3cr3t", a), 0);
	assert_null(strstr(a, "s3cr3t"));
	assert_int_equal(strncmp(a, "hooks.example.com:443#", 22), 0);
	assert_int_equal(strlen(a), 22 + 8);
	/* the query and the fragment are not: one endpoint */
	assert_int_equal(endpoint_key("https://hooks.example.com/services/T0/B0/s3cr3t?a=1#f", b), 0);
	assert_string_equal(a, b);
	/* another path is another endpoint */
	assert_int_equal(endpoint_key("https://hooks.example.com/services/T0/B0/other", b), 0);
	assert_string_not_equal(a, b);
}

static void test_table_shares_one_endpoint(void **state)
{
	struct endpoint_table t;
	endpoints_init(&t, 512);
	struct endpoint *x = endpoints_get(&t, "http://127.0.0.1:9/a?k=1", 0);
	struct endpoint *y = endpoints_get(&t, "http://127.0.0.1:9/a?k=2", 0);
	struct endpoint *z = endpoints_get(&t, "http://127.0.0.1:9/b", 0);
	assert_non_null(x);
	assert_ptr_equal(x, y);
	assert_ptr_not_equal(x, z);
	assert_null(endpoints_get(&t, "kafka://topic", 0));
	assert_int_equal(concurrency_limit(&x->conc), 4); /* a new endpoint starts small */
	endpoints_free_all(&t);
}

/* Requests open in the order they began; one stuck far longer than the others' answers
 * (a connection in a full accept queue) is an overload signal as soon as an answer shows
 * it, once. */
static void test_stall_cuts_at_once(void **state)
{
	struct endpoint_table t;
	struct endpoint_req r[8];
	endpoints_init(&t, 512);
	struct endpoint *e = endpoints_get(&t, "http://127.0.0.1:9/x", 0);
	int64_t now = 1000000;

	/* a few fast answers: the limit learns a 1 ms latency and grows */
	for (int round = 0; round < 40; round++) {
		int n = concurrency_limit(&e->conc) < 8 ? concurrency_limit(&e->conc) : 8;
		for (int i = 0; i < n; i++)
			endpoint_begin(e, &r[i], now, (uint64_t)now);
		now += 1000;
		for (int i = 0; i < n; i++) {
			endpoint_end(e, &r[i]);
			endpoint_record(e, now, 1000, CONCURRENCY_SUCCESS, n);
		}
		now += 10000;
	}
	assert_int_equal(e->in_flight, 0);
	assert_null(e->oldest);
	int before = concurrency_limit(&e->conc);
	uint64_t cuts = e->conc.cuts;
	assert_true(before >= 8);

	/* r[0] hangs; the others answer in 1 ms, well after its stall threshold */
	endpoint_begin(e, &r[0], now, (uint64_t)now);
	for (int i = 1; i < 4; i++)
		endpoint_begin(e, &r[i], now, (uint64_t)now);
	assert_ptr_equal(e->oldest, &r[0]);
	now += concurrency_stalled_after(&e->conc) + 1000;
	for (int i = 1; i < 4; i++) {
		endpoint_end(e, &r[i]);
		endpoint_record(e, now, 1000, CONCURRENCY_SUCCESS, 4);
	}
	assert_true(r[0].stalled);
	assert_int_equal(e->conc.cuts, cuts + 1); /* once, not once per answer */
	assert_true(concurrency_limit(&e->conc) < before);
	endpoint_end(e, &r[0]);
	assert_int_equal(e->in_flight, 0);
	endpoints_free_all(&t);
}

/* Requests begun in one dispatcher turn went out together: each counts the whole burst
 * as open, the first of it too (it began with 1 open, microseconds before the others),
 * while the turn goes on and once a later turn closed it; a later turn's requests count
 * what was open when they began. */
static void test_burst_seen_together(void **state)
{
	(void)state;
	struct endpoint_table t;
	struct endpoint_req r[8];
	endpoints_init(&t, 512);
	struct endpoint *e = endpoints_get(&t, "http://127.0.0.1:9/burst", 0);
	int64_t now = 1000000;

	for (int i = 0; i < 5; i++)
		assert_int_equal(endpoint_begin(e, &r[i], now, 7), i + 1);
	assert_int_equal(endpoint_seen(e, &r[0]), 5); /* the turn goes on */
	assert_int_equal(endpoint_seen(e, &r[4]), 5);
	endpoint_end(e, &r[1]);                       /* one answered early */
	assert_int_equal(endpoint_begin(e, &r[5], now + 10, 8), 5); /* the next turn */
	assert_int_equal(endpoint_seen(e, &r[0]), 5); /* closed: the burst's peak */
	assert_int_equal(endpoint_seen(e, &r[4]), 5);
	assert_int_equal(endpoint_seen(e, &r[5]), 5);
	assert_int_equal(endpoint_begin(e, &r[6], now + 10, 8), 6);
	assert_int_equal(endpoint_seen(e, &r[5]), 6);
	for (int i = 0; i < 7; i++)
		if (i != 1)
			endpoint_end(e, &r[i]);
	assert_int_equal(e->in_flight, 0);
	endpoints_free_all(&t);
}

/* Thousands of endpoints (each subscription its own): each found again as the table
 * grows; a tick publishes only what changed and then has nothing to wait for; an
 * endpoint nobody used for an hour is dropped, one still referred to is kept. */
static void test_many_endpoints(void **state)
{
	struct endpoint_table t;
	char url[64];
	struct endpoint *kept = NULL;
	endpoints_init(&t, 512);
	for (int i = 0; i < 5000; i++) {
		snprintf(url, sizeof(url), "http://127.0.0.1:9/hook/%d", i);
		struct endpoint *e = endpoints_get(&t, url, 0);
		assert_non_null(e);
		assert_ptr_equal(endpoints_get(&t, url, 0), e);
		if (i == 1234)
			kept = e;
	}
	assert_int_equal(t.eps.count, 5000);
	assert_true(t.eps.mask + 1 >= 2500);
	assert_int_equal(endpoints_tick(&t, 1000000), -1); /* all new: published */
	assert_null(t.dirty);
	endpoint_changed(kept);
	endpoint_changed(kept); /* listed once */
	assert_ptr_equal(t.dirty, kept);
	assert_null(kept->next_dirty);
	assert_int_equal(endpoints_tick(&t, 1000040), 60); /* due when 100 ms are up */
	assert_int_equal(endpoints_tick(&t, 1000100), -1);
	assert_int_equal(kept->dirty, 0);
	kept->refs = 1;
	assert_int_equal(endpoints_tick(&t, 1000000 + 2 * 3600 * 1000LL), -1);
	assert_int_equal(t.eps.count, 1);
	snprintf(url, sizeof(url), "http://127.0.0.1:9/hook/%d", 1234);
	assert_ptr_equal(endpoints_get(&t, url, 0), kept);
	kept->refs = 0;
	endpoints_free_all(&t);
	assert_int_equal(t.eps.count, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_burst_seen_together),
		cmocka_unit_test(test_keys),
		cmocka_unit_test(test_table_shares_one_endpoint),
		cmocka_unit_test(test_many_endpoints),
		cmocka_unit_test(test_stall_cuts_at_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
