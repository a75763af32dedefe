/* test_filter.c: core/filter.c as a table — each row a query string, with what the filter
 * must hold afterwards or the field and status its error must name; then the JSON form
 * (filter replays, purges) with its own rules: unknown keys, non-string values; and the
 * event search's filter (GET /v1/events) as a table of its own. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/filter.h"

#define SUB_ID "0190a0b0-0000-7000-8000-00000000000a"
#define OTHER_ID "0190a0b0-0000-7000-8000-00000000000b"

/* "k=v&k=v" without escapes: enough for the table. */
struct query {
	char text[256];
	char *keys[16], *values[16];
	int n;
};

static void query_parse(struct query *q, const char *text)
{
	char *save = NULL;
	snprintf(q->text, sizeof(q->text), "%s", text);
	q->n = 0;
	for (char *kv = strtok_r(q->text, "&", &save); kv && q->n < 16;
	     kv = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(kv, '=');
		*eq = '\0';
		q->keys[q->n] = kv;
		q->values[q->n++] = eq + 1;
	}
}

static const char *query_get(const void *ctx, const char *name)
{
	const struct query *q = ctx;
	for (int i = 0; i < q->n; i++)
		if (strcmp(q->keys[i], name) == 0)
			return q->values[i];
	return NULL;
}

static struct sub_registry reg;

static int setup(void **state)
{
	struct sub_set *set = sub_set_new();
	struct subscription *s = calloc(1, sizeof(*s));
	memcpy(s->id, SUB_ID, sizeof(SUB_ID));
	s->name = strdup("orders");
	sub_registry_init(&reg);
	if (sub_set_add(set, s))
		return -1;
	sub_registry_publish(&reg, set);
	return 0;
}

static int teardown(void **state)
{
	sub_registry_destroy(&reg);
	return 0;
}

enum check { C_NONE, C_STATUS_FAILED, C_SUB, C_GLOB, C_EXACT_TYPE, C_CODE_503, C_RANGE,
	     C_SORT_ATTEMPTS_DESC, C_Q, C_MIN_ATTEMPTS_5, C_FAILING_HOUR, C_FAILING_AT };

static const struct row {
	const char *query;
	int status;          /* 0: parses */
	const char *field;   /* the field the error names */
	enum check check;
} rows[] = {
	{"", 0, NULL, C_NONE},
	{"status=FAILED", 0, NULL, C_STATUS_FAILED},
	{"status=failed", 400, "status", C_NONE},
	{"status=DEAD", 400, "status", C_NONE},
	{"subscription_id=" SUB_ID, 0, NULL, C_SUB},
	{"subscription_id=42", 400, "subscription_id", C_NONE},
	{"name=orders", 0, NULL, C_SUB},
	{"name=orders&subscription_id=" SUB_ID, 0, NULL, C_SUB},
	{"name=orders&subscription_id=" OTHER_ID, 400, "name", C_NONE},
	{"name=nobody", 404, "name", C_NONE},
	{"event_type=order.*", 0, NULL, C_GLOB},
	{"event_type=order.create?", 0, NULL, C_GLOB},
	{"event_type=order.created", 0, NULL, C_EXACT_TYPE},
	{"event_type=", 400, "event_type", C_NONE},
	{"code=503", 0, NULL, C_CODE_503},
	{"code=50", 400, "code", C_NONE},
	{"code=5O3", 400, "code", C_NONE},
	{"code=1000", 400, "code", C_NONE},
	{"from=2026-11-21T10:00:00Z&to=2026-11-21T11:00:00Z", 0, NULL, C_RANGE},
	{"from=yesterday", 400, "from", C_NONE},
	{"to=2026-13-01T00:00:00Z", 400, "to", C_NONE},
	{"event_id=nope", 400, "event_id", C_NONE},
	{"sort=attempt_count&order=desc", 0, NULL, C_SORT_ATTEMPTS_DESC},
	{"sort=size", 400, "sort", C_NONE},
	{"order=up", 400, "order", C_NONE},
	{"q=timeout", 0, NULL, C_Q},
	{"min_attempts=5", 0, NULL, C_MIN_ATTEMPTS_5},
	{"min_attempts=0", 400, "min_attempts", C_NONE},
	{"min_attempts=many", 400, "min_attempts", C_NONE},
	{"failing_since=1h", 0, NULL, C_FAILING_HOUR},
	{"failing_since=2026-11-21T10:00:00Z", 0, NULL, C_FAILING_AT},
	{"failing_since=long", 400, "failing_since", C_NONE},
	{"failing_since=-1h", 400, "failing_since", C_NONE},
};

static void check_filter(const struct row *r, const struct delivery_filter *f)
{
	switch (r->check) {
	case C_NONE:
		break;
	case C_STATUS_FAILED:
		assert_true(f->has_status);
		assert_int_equal(f->status, DELIVERY_FAILED);
		break;
	case C_SUB:
		assert_string_equal(f->subscription_id, SUB_ID);
		break;
	case C_GLOB:
		assert_true(f->event_type_glob);
		break;
	case C_EXACT_TYPE:
		assert_false(f->event_type_glob);
		assert_string_equal(f->event_type, "order.created");
		break;
	case C_CODE_503:
		assert_true(f->has_code);
		assert_int_equal(f->code, 503);
		break;
	case C_RANGE:
		assert_int_equal(f->to_ms - f->from_ms, 3600 * 1000);
		break;
	case C_SORT_ATTEMPTS_DESC:
		assert_int_equal(f->sort, DELIVERY_SORT_ATTEMPTS);
		assert_true(f->descending);
		break;
	case C_Q:
		assert_string_equal(f->q, "timeout");
		break;
	case C_MIN_ATTEMPTS_5:
		assert_int_equal(f->min_attempts, 5);
		break;
	case C_FAILING_HOUR: /* a duration counts back from now (NOW_MS in the tests) */
		assert_int_equal(f->failing_since_ms, 1000000000000LL - 3600 * 1000);
		break;
	case C_FAILING_AT:
		assert_int_equal(f->failing_since_ms, 1795255200000LL);
		break;
	}
}

static void test_query_table(void **state)
{
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		struct query q;
		struct delivery_filter f = {0};
		struct filter_buf buf;
		struct input_error err = {0};

		query_parse(&q, r->query);
		int rc = filter_parse(query_get, &q, 1, &reg, "", 1000000000000LL, &f, &buf, &err);
		if (r->status == 0) {
			if (rc != 0)
				fail_msg("\"%s\": refused: %s", r->query, err.message);
			check_filter(r, &f);
		} else {
			if (rc == 0)
				fail_msg("\"%s\": accepted", r->query);
			assert_int_equal(err.status, r->status);
			assert_string_equal(err.field, r->field);
		}
	}
}

static void test_prefix_and_unsortable(void **state)
{
	struct query q;
	struct delivery_filter f = {0};
	struct filter_buf buf;
	struct input_error err = {0};

	query_parse(&q, "code=x");
	assert_int_equal(filter_parse(query_get, &q, 1, &reg, "filter.", 1000000000000LL, &f, &buf, &err), -1);
	assert_string_equal(err.field, "filter.code");
	/* a filter that cannot sort ignores sort and order */
	query_parse(&q, "sort=size&order=up");
	assert_int_equal(filter_parse(query_get, &q, 0, &reg, "", 1000000000000LL, &f, &buf, &err), 0);
}

static void test_json_form(void **state)
{
	struct delivery_filter f = {0};
	struct filter_buf buf;
	struct input_error err = {0};
	json_t *obj = json_pack("{s:s, s:i, s:s}", "status", "FAILED", "code", 502, "name", "orders");

	assert_int_equal(filter_parse_json(obj, &reg, "filter.", 1000000000000LL, &f, &buf, &err), 0);
	assert_int_equal(f.code, 502);
	assert_string_equal(f.subscription_id, SUB_ID);
	json_decref(obj);

	obj = json_pack("{s:i, s:s}", "min_attempts", 3, "failing_since", "10m");
	memset(&f, 0, sizeof(f));
	assert_int_equal(filter_parse_json(obj, &reg, "filter.", 1000000000000LL, &f, &buf, &err), 0);
	assert_int_equal(f.min_attempts, 3);
	assert_int_equal(f.failing_since_ms, 1000000000000LL - 600 * 1000);
	json_decref(obj);
	obj = json_pack("{s:i}", "min_attempts", 0);
	assert_int_equal(filter_parse_json(obj, &reg, "filter.", 1000000000000LL, &f, &buf, &err), -1);
	assert_string_equal(err.field, "filter.min_attempts");
	json_decref(obj);

	obj = json_pack("{s:s}", "colour", "red");
	assert_int_equal(filter_parse_json(obj, &reg, "filter.", 1000000000000LL, &f, &buf, &err), -1);
	assert_string_equal(err.field, "filter.colour");
	json_decref(obj);

	obj = json_pack("[]");
	assert_int_equal(filter_parse_json(obj, &reg, "filter.", 1000000000000LL, &f, &buf, &err), -1);
	assert_string_equal(err.field, "filter");
	json_decref(obj);
}

/* The event search: each row a query string, with the field its error names (NULL:
 * accepted). */
static void test_event_filter(void **state)
{
	static const struct {
		const char *query;
		const char *field;
	} table[] = {
		{"", NULL},
		{"event_type=order.*&source=crm&source_event_id=u-1", NULL},
		{"source=", NULL},
		{"id=" SUB_ID, NULL},
		{"from=2026-11-21T10:00:00Z&to=2026-11-21T11:00:00Z", NULL},
		{"event_type=", "event_type"},
		{"source_event_id=", "source_event_id"},
		{"id=42", "id"},
		{"from=yesterday", "from"},
		{"to=2026-13-01T00:00:00Z", "to"},
	};
	for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		struct query q;
		struct event_filter f = {0};
		struct input_error err = {0};

		query_parse(&q, table[i].query);
		int rc = event_filter_parse(query_get, &q, &f, &err);
		if (!table[i].field && rc != 0)
			fail_msg("\"%s\": refused: %s", table[i].query, err.message);
		if (table[i].field) {
			if (rc == 0)
				fail_msg("\"%s\": accepted", table[i].query);
			assert_int_equal(err.status, 400);
			assert_string_equal(err.field, table[i].field);
		}
	}

	struct query q;
	struct event_filter f = {0};
	struct input_error err = {0};
	query_parse(&q, "event_type=order.*&source=crm&source_event_id=u-1&id=" SUB_ID
		    "&from=2026-11-21T10:00:00Z&to=2026-11-21T11:00:00Z");
	assert_int_equal(event_filter_parse(query_get, &q, &f, &err), 0);
	assert_string_equal(f.event_type, "order.*");
	assert_true(f.event_type_glob);
	assert_string_equal(f.source, "crm");
	assert_string_equal(f.source_event_id, "u-1");
	assert_string_equal(f.id, SUB_ID);
	assert_int_equal(f.to_ms - f.from_ms, 3600 * 1000);
	memset(&f, 0, sizeof(f));
	query_parse(&q, "event_type=order.created&source=");
	assert_int_equal(event_filter_parse(query_get, &q, &f, &err), 0);
	assert_false(f.event_type_glob);
	assert_string_equal(f.source, "");
	assert_null(f.source_event_id);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_query_table),
		cmocka_unit_test(test_event_filter),
		cmocka_unit_test(test_prefix_and_unsortable),
		cmocka_unit_test(test_json_form),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
