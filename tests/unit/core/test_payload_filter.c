/* test_payload_filter.c: a subscription's payload filter (core/payload_filter.c) — each
 * operator on a present and a missing path, numbers equal by value, array indexes, $or and
 * $and, a payload that is not JSON passing nothing; every malformed filter refused with the
 * member at fault named; and fan-out (sub_set_match) leaving out a subscription whose
 * filter the payload fails, indexed or not, while one without a filter gets everything. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/header.h"
#include "core/payload_filter.h"
#include "core/subscriptions.h"

static struct payload_filter *parse_ok(const char *text)
{
	json_error_t jerr;
	json_t *v = json_loads(text, 0, &jerr);
	struct payload_filter *f = NULL;
	struct input_error err = {0};
	assert_non_null(v);
	if (payload_filter_parse(v, &f, &err) != 0)
		fail_msg("%s: refused: %s (%s)", text, err.message, err.field);
	json_decref(v);
	return f;
}

/* Whether the filter passes the payload (NULL: not JSON). */
static int passes(const char *filter, const char *payload)
{
	struct payload_filter *f = parse_ok(filter);
	json_t *doc = payload ? json_loads(payload, JSON_DECODE_ANY, NULL) : NULL;
	int m = payload_filter_match(f, doc);
	json_decref(doc);
	payload_filter_free(f);
	return m;
}

static void test_operators(void **state)
{
	static const char *order = "{\"data\":{\"amount\":150,\"currency\":\"EUR\",\"paid\":true,"
				   "\"note\":null,\"items\":[{\"sku\":\"A-1\"},{\"sku\":\"B-2\"}]},"
				   "\"type\":\"order\"}";
	static const struct {
		const char *filter;
		const char *payload; /* NULL: not JSON */
		int passes;
	} cases[] = {
		{"{\"type\":\"order\"}", NULL, 0},
		{"{\"type\":\"refund\"}", "", 0},
		{"{\"type\":\"order\"}", "", 1},
		{"{\"data.amount\":150.0}", "", 1}, /* numbers by value */
		{"{\"data.amount\":{\"$gte\":100,\"$lt\":200}}", "", 1},
		{"{\"data.amount\":{\"$gt\":150}}", "", 0},
		{"{\"data.amount\":{\"$lte\":150}}", "", 1},
		{"{\"data.amount\":{\"$gt\":\"100\"}}", "", 0}, /* a number is no string */
		{"{\"data.currency\":{\"$in\":[\"EUR\",\"USD\"]}}", "", 1},
		{"{\"data.currency\":{\"$nin\":[\"EUR\",\"USD\"]}}", "", 0},
		{"{\"data.currency\":{\"$neq\":\"GBP\"}}", "", 1},
		{"{\"data.currency\":{\"$startsWith\":\"EU\"}}", "", 1},
		{"{\"data.amount\":{\"$startsWith\":\"15\"}}", "", 0},
		{"{\"data.paid\":true,\"data.note\":null}", "", 1},
		{"{\"data.note\":{\"$exists\":true}}", "", 1}, /* null is there */
		{"{\"data.items.1.sku\":\"B-2\"}", "", 1},
		{"{\"data.items.2.sku\":{\"$exists\":true}}", "", 0},
		{"{\"data.currency\":{\"$gt\":\"AAA\"}}", "", 1}, /* strings by bytes */
		/* a missing path passes $exists: false, $neq and $nin, and nothing else */
		{"{\"data.coupon\":{\"$exists\":false}}", "", 1},
		{"{\"data.coupon\":{\"$neq\":\"X\"}}", "", 1},
		{"{\"data.coupon\":{\"$nin\":[\"X\"]}}", "", 1},
		{"{\"data.coupon\":{\"$in\":[\"X\"]}}", "", 0},
		{"{\"data.coupon\":{\"$lt\":5}}", "", 0},
		{"{\"data.amount.value\":150}", "", 0}, /* through a number */
		/* every member holds; $or any, $and all, nested */
		{"{\"type\":\"order\",\"data.currency\":\"USD\"}", "", 0},
		{"{\"$or\":[{\"data.currency\":\"USD\"},{\"data.amount\":{\"$gt\":100}}]}", "", 1},
		{"{\"$or\":[{\"data.currency\":\"USD\"},{\"data.amount\":{\"$gt\":500}}]}", "", 0},
		{"{\"$and\":[{\"type\":\"order\"},{\"data.paid\":false}]}", "", 0},
		{"{\"$and\":[{\"type\":\"order\"},{\"$or\":[{\"data.paid\":false},"
		 "{\"data.items.0.sku\":{\"$startsWith\":\"A\"}}]}]}", "", 1},
		/* not JSON passes nothing; a scalar has no paths */
		{"{\"type\":{\"$exists\":false}}", NULL, 0},
		{"{\"type\":\"order\"}", "42", 0},
		{"{\"type\":{\"$exists\":false}}", "42", 1},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *payload = cases[i].payload && !*cases[i].payload ? order : cases[i].payload;
		if (passes(cases[i].filter, payload) != cases[i].passes)
			fail_msg("%s on %s: want %s", cases[i].filter, payload ? payload : "(not JSON)",
				 cases[i].passes ? "passes" : "fails");
	}
}

static void expect_refused(const char *text, const char *field)
{
	json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
	struct payload_filter *f = NULL;
	struct input_error err = {0};
	assert_non_null(v);
	assert_int_equal(payload_filter_parse(v, &f, &err), -1);
	assert_null(f);
	assert_int_equal(err.status, 400);
	if (strcmp(err.field, field) != 0)
		fail_msg("%s: field %s, want %s (%s)", text, err.field, field, err.message);
	assert_non_null(strstr(err.message, field));
	json_decref(v);
}

static void test_refused(void **state)
{
	static const struct {
		const char *filter, *field;
	} cases[] = {
		{"[]", "filter"},
		{"{}", "filter"},
		{"\"paid\"", "filter"},
		{"{\"a..b\":1}", "filter.a..b"},
		{"{\".a\":1}", "filter..a"},
		{"{\"a.\":1}", "filter.a."},
		{"{\"a\":[1,2]}", "filter.a"},
		{"{\"a\":{}}", "filter.a"},
		{"{\"a\":{\"$regex\":\"x\"}}", "filter.a"},
		{"{\"a\":{\"$eq\":[1]}}", "filter.a"},
		{"{\"a\":{\"$gt\":true}}", "filter.a"},
		{"{\"a\":{\"$in\":[]}}", "filter.a"},
		{"{\"a\":{\"$in\":[{\"x\":1}]}}", "filter.a"},
		{"{\"a\":{\"$exists\":1}}", "filter.a"},
		{"{\"a\":{\"$startsWith\":1}}", "filter.a"},
		{"{\"$not\":{\"a\":1}}", "filter.$not"},
		{"{\"$or\":{\"a\":1}}", "filter.$or"},
		{"{\"$or\":[]}", "filter.$or"},
		{"{\"$or\":[{}]}", "filter"},
		{"{\"$or\":[{\"$or\":[{\"$or\":[{\"$or\":[{\"$or\":[{\"a\":1}]}]}]}]}]}", "filter.$or"},
		{"{\"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q\":1}", "filter.a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		expect_refused(cases[i].filter, cases[i].field);

	/* 64 paths at most, over every level */
	char text[4096] = "{";
	for (int i = 0; i < 65; i++)
		snprintf(text + strlen(text), sizeof(text) - strlen(text), "%s\"p%d\":1",
			 i ? "," : "", i);
	strcat(text, "}");
	expect_refused(text, "filter");
	text[strlen(text) - strlen(",\"p64\":1}")] = '\0';
	strcat(text, "}");
	payload_filter_free(parse_ok(text));
}

static struct subscription *sub(int k, const char *pattern, const char *filter)
{
	struct subscription *s = calloc(1, sizeof(*s));
	snprintf(s->id, sizeof(s->id), "01a20000-0000-7000-8000-%012d", k);
	s->event_types = calloc(1, sizeof(char *));
	s->event_types[0] = strdup(pattern);
	s->n_event_types = 1;
	s->enabled = 1;
	s->filter = filter ? parse_ok(filter) : NULL;
	return s;
}

static void test_fanout(void **state)
{
	for (int indexed = 0; indexed <= 1; indexed++) {
		struct sub_set *set = sub_set_new();
		assert_int_equal(sub_set_add(set, sub(1, "order.*", NULL)), 0);
		assert_int_equal(sub_set_add(set, sub(2, "order.*", "{\"amount\":{\"$gte\":100}}")), 0);
		assert_int_equal(sub_set_add(set, sub(3, "order.paid", "{\"currency\":\"EUR\"}")), 0);
		assert_int_equal(sub_set_add(set, sub(4, "user.*", "{\"amount\":{\"$gte\":0}}")), 0);
		if (indexed)
			sub_set_index(set);
		char (*ids)[UUID_STR_LEN] = NULL;
		size_t cap = 0;
		const char *big = "{\"amount\":150,\"currency\":\"EUR\"}";
		const char *small = "{\"amount\":5,\"currency\":\"EUR\"}";

		assert_int_equal(sub_set_match(set, "order.paid", NULL, big, strlen(big), &ids, &cap), 3);
		assert_string_equal(ids[1], "01a20000-0000-7000-8000-000000000002");
		assert_int_equal(sub_set_match(set, "order.paid", "application/json", small,
					       strlen(small), &ids, &cap), 2);
		assert_string_equal(ids[0], "01a20000-0000-7000-8000-000000000001");
		assert_string_equal(ids[1], "01a20000-0000-7000-8000-000000000003");
		/* not JSON: only the subscription without a filter, whatever the bytes */
		assert_int_equal(sub_set_match(set, "order.paid", NULL, "\x01\x02", 2, &ids, &cap), 1);
		assert_int_equal(sub_set_match(set, "order.paid", NULL, NULL, 0, &ids, &cap), 1);
		assert_int_equal(sub_set_match(set, "order.paid", "application/octet-stream", big,
					       strlen(big), &ids, &cap), 1);
		assert_int_equal(sub_set_match(set, "order.paid", "application/cloudevents+JSON", big,
					       strlen(big), &ids, &cap), 3);
		assert_int_equal(sub_set_match(set, "order.new", NULL, big, strlen(big), &ids, &cap), 2);
		free(ids);
		struct sub_registry reg; /* which frees the set with its last reference */
		sub_registry_init(&reg);
		sub_registry_publish(&reg, set);
		sub_registry_destroy(&reg);
	}
	assert_true(header_is_json_type("application/json"));
	assert_true(header_is_json_type("Application/JSON; charset=utf-8"));
	assert_true(header_is_json_type("application/cloudevents+json"));
	assert_false(header_is_json_type("application/octet-stream"));
	assert_false(header_is_json_type("text/plain; note=json"));
	assert_false(header_is_json_type("application/jsonl"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_operators),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_fanout),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
