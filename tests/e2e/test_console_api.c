/* test_console_api.c: what the operator console (docs/console.md) reads from the daemon,
 * on each backend: the console's files over real HTTP (CSP, ETag and 304, no token),
 * GET /v1/whoami for each kind of token, GET /v1/stats/series counting a real failed
 * attempt in its minute (in its subscription's series too, with its latency), and GET /v1/deliveries/{id}/request showing the headers a
 * delivery is sent with, credentials masked, and its exact body; GET /v1/subscriptions in
 * pages. The browser test (tests/browser) drives the
 * console itself. */
#include "e2e.h"

static struct receiver rcv;
static struct daemon dmn;

static int setup(void **state)
{
	e2e_setup(&rcv, &dmn, NULL);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

static const char *header(const struct http_resp *r, const char *name)
{
	return json_string_value(json_object_get(r->headers, name));
}

static void test_console_files(void **state)
{
	char url[256];
	struct http_resp r = {0};

	snprintf(url, sizeof(url), "%s/console/", dmn.url);
	assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(header(&r, "content-type"), "text/html; charset=utf-8");
	assert_non_null(strstr(header(&r, "content-security-policy"), "default-src 'self'"));
	assert_non_null(strstr(header(&r, "content-security-policy"), "connect-src 'self'"));
	assert_string_equal(header(&r, "x-content-type-options"), "nosniff");
	assert_string_equal(header(&r, "cache-control"), "no-cache");
	assert_non_null(strstr(r.body, "<script type=\"module\" src=\"/console/app.js\">"));
	char etag[64], line[96];
	snprintf(etag, sizeof(etag), "%s", header(&r, "etag"));
	http_resp_free(&r);

	/* revalidation: 304, no body */
	snprintf(line, sizeof(line), "If-None-Match: %s", etag);
	const char *const hdrs[] = {line, NULL};
	struct http_req req = {.url = url, .headers = hdrs};
	assert_int_equal(http_do_ex(&req, &r), 0);
	assert_int_equal(r.status, 304);
	assert_int_equal(r.len, 0);
	http_resp_free(&r);

	/* the vendored library, byte for byte what npm ci installed (13 KB, no imports) */
	snprintf(url, sizeof(url), "%s/console/vendor/htm-preact.js", dmn.url);
	assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(header(&r, "content-type"), "text/javascript; charset=utf-8");
	assert_true(r.len > 10000);
	assert_null(strstr(r.body, "import "));
	assert_non_null(strstr(r.body, "export{"));
	http_resp_free(&r);

	snprintf(url, sizeof(url), "%s/console/../admin.token", dmn.url);
	assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &r), 0);
	assert_int_equal(r.status, 404);
	http_resp_free(&r);
}

static void test_whoami(void **state)
{
	json_t *me = e2e_get(&dmn, "/v1/whoami");
	assert_string_equal(json_string_value(json_object_get(me, "name")), "admin");
	assert_int_equal(json_array_size(json_object_get(me, "grants")), 4);
	json_decref(me);

	json_t *t = api_call(&dmn, "POST", "/v1/tokens", "{\"name\":\"wall\",\"scopes\":[\"read\"]}",
			     201);
	me = api_call_as(&dmn, json_string_value(json_object_get(t, "token")), "GET",
			 "/v1/whoami", NULL, 200);
	assert_string_equal(json_string_value(json_object_get(me, "name")), "wall");
	char *grants = json_dumps(json_object_get(me, "grants"), JSON_COMPACT);
	assert_string_equal(grants, "[\"read\"]");
	free(grants);
	json_decref(me);
	json_decref(t);

	/* the ingest token may ask who it is, and nothing else here */
	me = api_call_as(&dmn, "test-ingest-token", "GET", "/v1/whoami", NULL, 200);
	assert_string_equal(json_string_value(json_object_get(me, "name")), "ingest");
	json_decref(me);
	json_decref(api_call_as(&dmn, "test-ingest-token", "GET", "/v1/stats/series", NULL, 403));
	json_decref(api_call_as(&dmn, NULL, "GET", "/v1/whoami", NULL, 401));
}

static void test_series_and_request(void **state)
{
	char sub[64], ev[64], ids[1][64], path[128];

	assert_int_equal(receiver_script(&rcv, "/down", "{\"default\":{\"status\":503}}"), 0);
	e2e_create_sub(&dmn, sub,
		       "{\"name\":\"down\",\"event_types\":[\"acct.*\"],\"endpoint\":\"%s/down\","
		       "\"secret\":\"generate\",\"auth\":{\"type\":\"api_key\",\"header\":\"X-Key\","
		       "\"value\":\"k3y-s3cret\"},\"headers\":{\"X-Team\":\"growth\"},"
		       "\"retry\":{\"immediate\":1,\"permanent\":[503]}}",
		       rcv.url);
	e2e_send(&dmn, ev, "{\"event_type\":\"acct.closed\",\"payload\":{\"id\":7}}");
	assert_int_equal(e2e_deliveries_of(&dmn, ev, ids, 1), 1);
	json_decref(e2e_wait_dead(&dmn, ids[0], 10000));

	/* the failed attempt is in the series, in one of the last two minutes (the attempt
	 * and the request may straddle a minute) */
	json_t *s = e2e_get(&dmn, "/v1/stats/series?minutes=5");
	json_t *points = json_object_get(s, "points");
	assert_int_equal(json_array_size(points), 5);
	assert_int_equal(json_integer_value(json_object_get(s, "bucket_ms")), 60000);
	json_int_t failed = 0, other = 0;
	size_t i;
	json_t *p;
	json_array_foreach(points, i, p) {
		json_int_t f = json_integer_value(json_object_get(p, "server_error"));
		if (i < 3)
			other += f;
		failed += f;
		other += json_integer_value(json_object_get(p, "succeeded")) +
			 json_integer_value(json_object_get(p, "client_error"));
	}
	assert_int_equal(failed, 1);
	assert_int_equal(other, 0);
	json_decref(s);
	/* the subscription's own series has that attempt, with its latency; another's none */
	s = e2e_get(&dmn, "/v1/stats/series?minutes=5&subscription_id=%s", sub);
	assert_string_equal(json_string_value(json_object_get(s, "subscription_id")), sub);
	failed = 0;
	json_array_foreach(json_object_get(s, "points"), i, p) {
		json_t *p50 = json_object_get(p, "latency_p50_ms");
		json_t *p99 = json_object_get(p, "latency_p99_ms");
		failed += json_integer_value(json_object_get(p, "server_error"));
		if (json_integer_value(json_object_get(p, "server_error"))) {
			assert_true(json_is_integer(p50) && json_is_integer(p99));
			assert_true(json_integer_value(p99) >= json_integer_value(p50));
		} else {
			assert_true(json_is_null(p50) && json_is_null(p99));
		}
	}
	assert_int_equal(failed, 1);
	json_decref(s);
	s = e2e_get(&dmn, "/v1/stats/series?minutes=5&subscription_id=%s",
		    "0190a0b0-0000-7000-8000-000000000000");
	json_array_foreach(json_object_get(s, "points"), i, p)
		assert_int_equal(json_integer_value(json_object_get(p, "server_error")), 0);
	json_decref(s);
	json_decref(api_call(&dmn, "GET", "/v1/stats/series?subscription_id=down", NULL, 400));
	json_decref(api_call(&dmn, "GET", "/v1/stats/series?minutes=0", NULL, 400));
	json_decref(api_call(&dmn, "GET", "/v1/stats/series?minutes=1441", NULL, 400));

	/* the request, credentials masked */
	json_t *r = e2e_get(&dmn, "/v1/deliveries/%s/request", ids[0]);
	char *text = json_dumps(r, JSON_COMPACT);
	assert_null(strstr(text, "k3y-s3cret"));
	assert_null(strstr(text, "whsec_"));
	assert_non_null(strstr(text, "{\"name\":\"X-Key\",\"value\":\"********\"}"));
	assert_non_null(strstr(text, "{\"name\":\"X-Team\",\"value\":\"growth\"}"));
	assert_non_null(strstr(text, "\"name\":\"webhook-signature\",\"value\":\"v1,********\""));
	char want[128];
	snprintf(want, sizeof(want), "\"name\":\"webhook-id\",\"value\":\"%s\"", ev);
	assert_non_null(strstr(text, want));
	snprintf(want, sizeof(want), "%s/down", rcv.url);
	assert_string_equal(json_string_value(json_object_get(r, "url")), want);
	/* the body: the payload's bytes as sent, base64 of {"id":7} */
	assert_string_equal(json_string_value(json_object_get(r, "body_base64")), "eyJpZCI6N30=");
	free(text);
	json_decref(r);

	/* what the receiver really got carries the same names */
	json_t *got = receiver_requests(&rcv, "/down");
	json_t *h = json_object_get(json_array_get(got, 0), "headers");
	assert_string_equal(json_string_value(json_object_get(h, "x-key")), "k3y-s3cret");
	assert_string_equal(json_string_value(json_object_get(h, "webhook-id")), ev);
	json_decref(got);

	/* query auth: the credential is in the URL, masked there */
	char sub2[64], ev2[64], ids2[1][64];
	e2e_create_sub(&dmn, sub2,
		       "{\"name\":\"q\",\"event_types\":[\"q.*\"],\"endpoint\":\"%s/down?v=1\","
		       "\"auth\":{\"type\":\"query\",\"param\":\"key\",\"value\":\"qu3ry-s3cret\"},"
		       "\"retry\":{\"immediate\":1,\"permanent\":[503]}}",
		       rcv.url);
	e2e_send(&dmn, ev2, "{\"event_type\":\"q.x\",\"payload\":1}");
	assert_int_equal(e2e_deliveries_of(&dmn, ev2, ids2, 1), 1);
	r = e2e_get(&dmn, "/v1/deliveries/%s/request", ids2[0]);
	text = json_dumps(r, JSON_COMPACT);
	assert_null(strstr(text, "qu3ry-s3cret"));
	assert_null(strstr(text, "\"Authorization\""));
	free(text);
	snprintf(want, sizeof(want), "%s/down?v=1&key=********", rcv.url);
	assert_string_equal(json_string_value(json_object_get(r, "url")), want);
	json_decref(r);

	snprintf(path, sizeof(path), "/v1/deliveries/%s/request",
		 "01a21245-0000-7000-8000-000000000000");
	json_decref(api_call(&dmn, "GET", path, NULL, 404));
}

/* The error field of a 400 answer to GET path. */
static void expect_400(const char *path, const char *field)
{
	json_t *e = api_call(&dmn, "GET", path, NULL, 400);
	assert_string_equal(json_string_value(json_object_get(json_object_get(e, "error"), "field")),
			    field);
	json_decref(e);
}

/* GET /v1/subscriptions pages with limit and cursor, in creation order, every one once and
 * credentials masked as in the whole list; without either it is the whole list (next_cursor
 * null); name= gives that one or none, or with '*' or '?' those it matches (case
 * ignored), id= those named; a bad limit, cursor, name or id is 400 naming it. */
static void test_subscription_pages(void **state)
{
	char ids[7][64], path[600];
	for (int i = 0; i < 7; i++)
		e2e_create_sub(&dmn, ids[i], "{\"name\":\"paged-%d\",\"event_types\":[\"p.*\"],"
					     "\"endpoint\":\"%s/p\",\"auth\":{\"type\":\"basic\","
					     "\"username\":\"u\",\"password\":\"pw-paged\"}}", i, rcv.url);
	json_t *all = e2e_get(&dmn, "/v1/subscriptions");
	assert_int_equal(json_array_size(json_object_get(all, "items")), 7);
	assert_true(json_is_null(json_object_get(all, "next_cursor")));
	json_decref(all);

	int got = 0, pages = 0;
	const char *next = NULL;
	json_t *page = NULL;
	do {
		if (next)
			snprintf(path, sizeof(path), "/v1/subscriptions?limit=3&cursor=%s", next);
		else
			snprintf(path, sizeof(path), "/v1/subscriptions?limit=3");
		json_t *p = e2e_get(&dmn, "%s", path);
		json_decref(page);
		page = p;
		pages++;
		json_t *items = json_object_get(page, "items"), *x;
		size_t i;
		json_array_foreach(items, i, x) {
			assert_string_equal(json_string_value(json_object_get(x, "id")), ids[got]);
			char *text = json_dumps(x, JSON_COMPACT);
			assert_null(strstr(text, "pw-paged"));
			free(text);
			got++;
		}
		next = json_string_value(json_object_get(page, "next_cursor"));
	} while (next && pages < 10);
	json_decref(page);
	assert_int_equal(got, 7);
	assert_int_equal(pages, 3);

	/* by name: that one, or none */
	json_t *one = e2e_get(&dmn, "/v1/subscriptions?name=paged-4");
	assert_int_equal(json_array_size(json_object_get(one, "items")), 1);
	assert_string_equal(json_string_value(json_object_get(
		json_array_get(json_object_get(one, "items"), 0), "id")), ids[4]);
	assert_true(json_is_null(json_object_get(one, "next_cursor")));
	json_decref(one);
	json_t *none = e2e_get(&dmn, "/v1/subscriptions?name=paged");
	assert_int_equal(json_array_size(json_object_get(none, "items")), 0);
	json_decref(none);

	/* a glob: those whose name matches, letters' case ignored, in pages that keep it */
	json_t *g1 = e2e_get(&dmn, "/v1/subscriptions?name=PAGED-*&limit=4");
	json_t *g1_items = json_object_get(g1, "items");
	assert_int_equal(json_array_size(g1_items), 4);
	for (int i = 0; i < 4; i++)
		assert_string_equal(json_string_value(json_object_get(json_array_get(g1_items, i),
								      "id")), ids[i]);
	const char *g1_next = json_string_value(json_object_get(g1, "next_cursor"));
	assert_non_null(g1_next);
	json_t *g2 = e2e_get(&dmn, "/v1/subscriptions?name=PAGED-*&limit=4&cursor=%s", g1_next);
	json_t *g2_items = json_object_get(g2, "items");
	assert_int_equal(json_array_size(g2_items), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(g2_items, 2), "id")),
			    ids[6]);
	assert_true(json_is_null(json_object_get(g2, "next_cursor")));
	json_decref(g2);
	json_decref(g1);
	json_t *g3 = e2e_get(&dmn, "/v1/subscriptions?name=*GED-%%3F&limit=100");
	assert_int_equal(json_array_size(json_object_get(g3, "items")), 7);
	json_decref(g3);
	json_t *g4 = e2e_get(&dmn, "/v1/subscriptions?name=*ged-6");
	assert_int_equal(json_array_size(json_object_get(g4, "items")), 1);
	assert_string_equal(json_string_value(json_object_get(
		json_array_get(json_object_get(g4, "items"), 0), "id")), ids[6]);
	json_decref(g4);
	char long_name[1100] = "/v1/subscriptions?name=";
	memset(long_name + strlen(long_name), 'a', 1001);
	expect_400(long_name, "name");

	/* by id: those named, in the order named, each once; an id of none left out */
	snprintf(path, sizeof(path), "/v1/subscriptions?id=%s,%s,%s,%s", ids[5], ids[1], ids[5],
		 "0190a0b0-0000-7000-8000-000000000000");
	json_t *some = e2e_get(&dmn, "%s", path), *some_items = json_object_get(some, "items");
	assert_int_equal(json_array_size(some_items), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(some_items, 0), "id")),
			    ids[5]);
	assert_string_equal(json_string_value(json_object_get(json_array_get(some_items, 1), "id")),
			    ids[1]);
	char *some_text = json_dumps(some, JSON_COMPACT);
	assert_null(strstr(some_text, "pw-paged"));
	free(some_text);
	json_decref(some);
	expect_400("/v1/subscriptions?id=paged-1", "id");
	snprintf(path, sizeof(path), "/v1/subscriptions?id=%s&limit=3", ids[0]);
	expect_400(path, "id");

	expect_400("/v1/subscriptions?limit=0", "limit");
	expect_400("/v1/subscriptions?limit=1001", "limit");
	expect_400("/v1/subscriptions?limit=x", "limit");
	expect_400("/v1/subscriptions?cursor=e:1:0190a0b0-0000-7000-8000-000000000001", "cursor");
}

/* GET /v1/event-types: the stored events' types in byte order, each with its newest
 * event's time and the enabled subscriptions its patterns reach (a type nobody takes: 0),
 * in pages by cursor; a bad cursor or limit is 400 naming it. */
static void test_event_types(void **state)
{
	char one[64], all[64], off[64], ev[64];
	e2e_create_sub(&dmn, one, "{\"name\":\"et-one\",\"event_types\":[\"et.a\"],"
				  "\"endpoint\":\"%s/et\"}", rcv.url);
	e2e_create_sub(&dmn, all, "{\"name\":\"et-all\",\"event_types\":[\"et.*\"],"
				  "\"endpoint\":\"%s/et\",\"filter\":{\"n\":{\"$gt\":5}}}", rcv.url);
	e2e_create_sub(&dmn, off, "{\"name\":\"et-off\",\"event_types\":[\"et.*\"],"
				  "\"endpoint\":\"%s/et\",\"enabled\":false}", rcv.url);
	e2e_send(&dmn, ev, "{\"event_type\":\"et.a\",\"payload\":{\"n\":1}}");
	e2e_send(&dmn, ev, "{\"event_type\":\"zz.none\",\"payload\":{}}");
	e2e_send(&dmn, ev, "{\"event_type\":\"et.b\",\"payload\":{}}");
	e2e_send(&dmn, ev, "{\"event_type\":\"et.a\",\"payload\":{}}");

	json_t *page = e2e_get(&dmn, "/v1/event-types");
	json_t *items = json_object_get(page, "items");
	assert_int_equal(json_array_size(items), 3);
	static const struct {
		const char *type;
		int subs;
	} want[] = {{"et.a", 2}, {"et.b", 1}, {"zz.none", 0}};
	for (size_t i = 0; i < 3; i++) {
		json_t *x = json_array_get(items, i);
		assert_string_equal(json_string_value(json_object_get(x, "event_type")), want[i].type);
		assert_int_equal(json_integer_value(json_object_get(x, "subscriptions")), want[i].subs);
		assert_true(json_is_string(json_object_get(x, "last_seen")));
	}
	assert_true(json_is_null(json_object_get(page, "next_cursor")));
	json_decref(page);

	json_t *p1 = e2e_get(&dmn, "/v1/event-types?limit=2");
	assert_int_equal(json_array_size(json_object_get(p1, "items")), 2);
	const char *next = json_string_value(json_object_get(p1, "next_cursor"));
	assert_non_null(next);
	json_t *p2 = e2e_get(&dmn, "/v1/event-types?limit=2&cursor=%s", next);
	assert_int_equal(json_array_size(json_object_get(p2, "items")), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(json_object_get(p2,
				"items"), 0), "event_type")), "zz.none");
	assert_true(json_is_null(json_object_get(p2, "next_cursor")));
	json_decref(p2);
	json_decref(p1);
	expect_400("/v1/event-types?cursor=e:1:x", "cursor");
	expect_400("/v1/event-types?limit=0", "limit");
}

/* GET /v1/events?filter=: the events whose payload matches a filter (the subscriptions'
 * syntax), newest first, in pages that resume where the reading stopped, with how many
 * were read; other filters narrow what is read; a binary payload matches nothing; a bad
 * filter is 400 naming it or its member. */
static void test_event_payload_search(void **state)
{
	char ev[64], want[6][64];
	for (int i = 0; i < 30; i++) {
		char body[160];
		snprintf(body, sizeof(body), "{\"event_type\":\"%s\",\"payload\":{\"n\":%d,\"tag\":\"%s\"}}",
			 i % 2 ? "ps.odd" : "ps.even", i, i % 5 == 0 ? "five" : "other");
		e2e_send(&dmn, ev, body);
		if (i % 5 == 0)
			snprintf(want[i / 5], 64, "%s", ev);
	}
	e2e_send(&dmn, ev, "{\"event_type\":\"ps.even\",\"payload_base64\":\"AAE=\"}");

	/* the six tagged five, newest first, three at a time */
	json_t *p1 = e2e_get(&dmn, "/v1/events?limit=3&filter=%%7B%%22tag%%22:%%22five%%22%%7D");
	json_t *items = json_object_get(p1, "items");
	assert_int_equal(json_array_size(items), 3);
	for (int i = 0; i < 3; i++)
		assert_string_equal(json_string_value(json_object_get(json_array_get(items, i), "id")),
				    want[5 - i]);
	/* the binary one, then 29 down to 15 */
	assert_int_equal(json_integer_value(json_object_get(p1, "scanned")), 16);
	const char *next = json_string_value(json_object_get(p1, "next_cursor"));
	assert_non_null(next);
	json_t *p2 = e2e_get(&dmn, "/v1/events?limit=3&filter=%%7B%%22tag%%22:%%22five%%22%%7D"
				   "&cursor=%s", next);
	items = json_object_get(p2, "items");
	assert_int_equal(json_array_size(items), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(items, 2), "id")),
			    want[0]);
	json_decref(p2);
	json_decref(p1);

	/* with a type: only those read; and an operator */
	json_t *p3 = e2e_get(&dmn, "/v1/events?event_type=ps.odd"
				   "&filter=%%7B%%22n%%22:%%7B%%22$gte%%22:25%%7D%%7D");
	assert_int_equal(json_array_size(json_object_get(p3, "items")), 3); /* 25, 27, 29 */
	assert_int_equal(json_integer_value(json_object_get(p3, "scanned")), 15);
	assert_true(json_is_null(json_object_get(p3, "next_cursor")));
	json_decref(p3);

	/* $exists: false would pass a payload that is not JSON if it were read as one */
	json_t *p4 = e2e_get(&dmn, "/v1/events?event_type=ps.even"
				   "&filter=%%7B%%22n%%22:%%7B%%22$exists%%22:false%%7D%%7D");
	assert_int_equal(json_array_size(json_object_get(p4, "items")), 0);
	json_decref(p4);

	expect_400("/v1/events?filter=%7B%22n%22:", "filter");
	expect_400("/v1/events?filter=%7B%22n%22:%7B%22$regex%22:1%7D%7D", "filter.n");
	expect_400("/v1/events?filter=%7B%7D&cursor=x:1", "filter");
}

/* The ids of the "subscriptions" of a GET /v1/stats answer, in order, into out (n of
 * them); returns subscriptions_total. */
static long stats_subs(const char *query, char out[][64], size_t *n)
{
	json_t *st = e2e_get(&dmn, "/v1/stats%s", query), *x;
	size_t i;
	*n = 0;
	json_array_foreach(json_object_get(st, "subscriptions"), i, x)
		snprintf(out[(*n)++], 64, "%s", json_string_value(json_object_get(x, "id")));
	long total = (long)json_integer_value(json_object_get(st, "subscriptions_total"));
	json_decref(st);
	return total;
}

/* GET /v1/stats for a page of subscriptions (subscription_id=ID,ID) and for the ones to
 * look at first (subscriptions_limit=N: failing first); subscriptions_total counts all. */
static void test_stats_for_a_page(void **state)
{
	char ids[4][64], got[8][64], query[400];
	size_t n;

	assert_int_equal(receiver_script(&rcv, "/down", "{\"default\":{\"status\":503}}"), 0);
	for (int i = 0; i < 4; i++)
		e2e_create_sub(&dmn, ids[i], "{\"name\":\"st-%c\",\"event_types\":[\"st%d.*\"],"
					     "\"endpoint\":\"%s/%s\",\"retry\":{\"permanent\":[503]}}",
			       'a' + i, i, rcv.url, i == 2 ? "down" : "up");
	/* st-c fails (a 503 it treats as permanent: dead at once) */
	char ev[64], dids[1][64];
	e2e_send(&dmn, ev, "{\"event_type\":\"st2.x\",\"payload\":{}}");
	assert_int_equal(e2e_deliveries_of(&dmn, ev, dids, 1), 1);
	json_decref(e2e_wait_dead(&dmn, dids[0], 10000));

	assert_int_equal(stats_subs("", got, &n), 4);
	assert_int_equal(n, 4);
	snprintf(query, sizeof(query), "?subscription_id=%s,%s", ids[3], ids[0]);
	assert_int_equal(stats_subs(query, got, &n), 4);
	assert_int_equal(n, 2); /* the two named, in the list's order */
	assert_string_equal(got[0], ids[0]);
	assert_string_equal(got[1], ids[3]);
	snprintf(query, sizeof(query), "?subscription_id=%s", ids[2]);
	stats_subs(query, got, &n);
	assert_int_equal(n, 1);
	assert_string_equal(got[0], ids[2]);
	/* its endpoint's flow control comes with it (it was delivered to), and only that one:
	 * the dispatcher publishes an endpoint's figures on its next tick (within ~100 ms of
	 * the answer), so the first answers may not have them yet */
	json_t *st = NULL, *eps = NULL;
	for (int i = 0; i < 100; i++) {
		json_decref(st);
		st = e2e_get(&dmn, "/v1/stats?subscription_id=%s", ids[2]);
		eps = json_object_get(st, "endpoints");
		if (json_array_size(eps) > 0)
			break;
		usleep(50 * 1000);
	}
	const char *ep = json_string_value(json_object_get(json_object_get(
		json_array_get(json_object_get(st, "subscriptions"), 0), "concurrency"), "endpoint"));
	assert_non_null(ep);
	assert_int_equal(json_array_size(eps), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(eps, 0), "endpoint")),
			    ep);
	assert_true(json_integer_value(json_object_get(st, "endpoints_total")) >= 1);
	json_decref(st);
	/* an id of no subscription: none */
	stats_subs("?subscription_id=0190a0b0-0000-7000-8000-000000000000", got, &n);
	assert_int_equal(n, 0);
	/* the failing one first */
	assert_int_equal(stats_subs("?subscriptions_limit=1", got, &n), 4);
	assert_int_equal(n, 1);
	assert_string_equal(got[0], ids[2]);
	stats_subs("?subscriptions_limit=0", got, &n);
	assert_int_equal(n, 0);
	stats_subs("?subscriptions_limit=10", got, &n);
	assert_int_equal(n, 4);
	assert_string_equal(got[0], ids[2]);

	expect_400("/v1/stats?subscription_id=down", "subscription_id");
	snprintf(query, sizeof(query), "/v1/stats?subscription_id=%s,", ids[0]);
	expect_400(query, "subscription_id");
	expect_400("/v1/stats?subscriptions_limit=-1", "subscriptions_limit");
	expect_400("/v1/stats?subscriptions_limit=1001", "subscriptions_limit");
	expect_400("/v1/stats?subscriptions_limit=x", "subscriptions_limit");
	/* more than 100 ids */
	char *many = malloc(101 * 37 + 64);
	size_t off = (size_t)sprintf(many, "/v1/stats?subscription_id=");
	for (int i = 0; i < 101; i++)
		off += (size_t)sprintf(many + off, "%s%s", i ? "," : "", ids[i % 4]);
	expect_400(many, "subscription_id");
	free(many);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_console_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_whoami, setup, teardown),
		cmocka_unit_test_setup_teardown(test_series_and_request, setup, teardown),
		cmocka_unit_test_setup_teardown(test_subscription_pages, setup, teardown),
		cmocka_unit_test_setup_teardown(test_event_types, setup, teardown),
		cmocka_unit_test_setup_teardown(test_event_payload_search, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stats_for_a_page, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
