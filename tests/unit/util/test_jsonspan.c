/* test_jsonspan.c: value spans inside JSON objects and arrays (util/jsonspan.c).
 *
 * jsonspan trusts its input to be valid JSON; the valid documents here check the spans,
 * the broken ones only that the walk ends, stays within len and reports what it can see
 * (a truncation, a missing ':' or ','). Every input is copied into a heap block of
 * exactly its length with no NUL after it, so AddressSanitizer catches any read past
 * len. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonspan.h"

#define MAX_ITEMS 16
#define MAX_TEXT 256

struct collected {
	const char *text;
	size_t len;
	int n;
	char keys[MAX_ITEMS][MAX_TEXT];
	char values[MAX_ITEMS][MAX_TEXT];
	size_t indexes[MAX_ITEMS];
	int stop_at;   /* return stop_rc from this call (1-based), 0 = never */
	int stop_rc;
};

static void copy_span(char *dst, const struct collected *c, size_t start, size_t end)
{
	const char *text = c->text;
	size_t n = end - start;

	assert_true(start <= end);
	assert_true(end <= c->len);
	assert_true(n < MAX_TEXT);
	memcpy(dst, text + start, n);
	dst[n] = '\0';
}

static int member_cb(void *ctx, const char *key, size_t key_len, size_t start, size_t end)
{
	struct collected *c = ctx;

	assert_true(c->n < MAX_ITEMS);
	assert_true(key_len < MAX_TEXT);
	assert_null(memchr(key, '\0', key_len));
	memcpy(c->keys[c->n], key, key_len);
	c->keys[c->n][key_len] = '\0';
	copy_span(c->values[c->n], c, start, end);
	c->n++;
	return c->n == c->stop_at ? c->stop_rc : 0;
}

static int element_cb(void *ctx, size_t index, size_t start, size_t end)
{
	struct collected *c = ctx;

	assert_true(c->n < MAX_ITEMS);
	c->indexes[c->n] = index;
	copy_span(c->values[c->n], c, start, end);
	c->n++;
	return c->n == c->stop_at ? c->stop_rc : 0;
}

/* Walks text[0, len) from an exact-size heap copy. */
static int walk_object_n(const char *text, size_t len, struct collected *c)
{
	char *copy = malloc(len ? len : 1);
	int rc;

	assert_non_null(copy);
	memcpy(copy, text, len);
	c->text = copy;
	c->len = len;
	rc = jsonspan_object(copy, len, member_cb, c);
	free(copy);
	c->text = NULL;
	return rc;
}

static int walk_object(const char *text, struct collected *c)
{
	return walk_object_n(text, strlen(text), c);
}

static int walk_array_n(const char *text, size_t len, struct collected *c)
{
	char *copy = malloc(len ? len : 1);
	int rc;

	assert_non_null(copy);
	memcpy(copy, text, len);
	c->text = copy;
	c->len = len;
	rc = jsonspan_array(copy, len, element_cb, c);
	free(copy);
	c->text = NULL;
	return rc;
}

static int walk_array(const char *text, struct collected *c)
{
	return walk_array_n(text, strlen(text), c);
}

static void test_flat_object(void **state)
{
	struct collected c = {0};

	assert_int_equal(walk_object("{\"a\":1,\"b\":\"x\",\"c\":true,\"d\":null}", &c), 0);
	assert_int_equal(c.n, 4);
	assert_string_equal(c.keys[0], "a");
	assert_string_equal(c.values[0], "1");
	assert_string_equal(c.keys[1], "b");
	assert_string_equal(c.values[1], "\"x\"");
	assert_string_equal(c.keys[2], "c");
	assert_string_equal(c.values[2], "true");
	assert_string_equal(c.keys[3], "d");
	assert_string_equal(c.values[3], "null");
}

static void test_empty_object(void **state)
{
	struct collected c = {0};

	assert_int_equal(walk_object("{}", &c), 0);
	assert_int_equal(c.n, 0);
	assert_int_equal(walk_object(" \n{ \t}\r\n ", &c), 0);
	assert_int_equal(c.n, 0);
}

static void test_nested(void **state)
{
	struct collected c = {0};
	const char *text =
		"{\"event_type\":\"user.created\","
		"\"payload\":{\"user\":{\"id\":7,\"tags\":[\"a\",{\"b\":[[]]}]},\"n\":[1,2,3]},"
		"\"after\":{}}";

	assert_int_equal(walk_object(text, &c), 0);
	assert_int_equal(c.n, 3);
	assert_string_equal(c.keys[1], "payload");
	assert_string_equal(c.values[1],
			    "{\"user\":{\"id\":7,\"tags\":[\"a\",{\"b\":[[]]}]},\"n\":[1,2,3]}");
	assert_string_equal(c.keys[2], "after");
	assert_string_equal(c.values[2], "{}");
}

/* Braces, brackets, commas, colons and quotes inside strings are not structure. */
static void test_strings_with_structure(void **state)
{
	struct collected c = {0};
	const char *text = "{\"s\":\"}{][,:\\\"\\\\\",\"t\":{\"u\":\"\\\"}\"},"
			   "\"v\":\"\\u00e9\\n\\t\\/\"}";

	assert_int_equal(walk_object(text, &c), 0);
	assert_int_equal(c.n, 3);
	assert_string_equal(c.values[0], "\"}{][,:\\\"\\\\\"");
	assert_string_equal(c.values[1], "{\"u\":\"\\\"}\"}");
	assert_string_equal(c.values[2], "\"\\u00e9\\n\\t\\/\""); /* escapes kept as written */

	/* a string ending in an escaped backslash ends at the next quote; an escaped
	 * backslash before an escaped quote does not end it */
	memset(&c, 0, sizeof(c));
	text = "{\"a\":\"x\\\\\",\"b\":\"\\\\\\\"]\\\\\\\\\",\"c\":[\"\\\\\",\"]\"]}";
	assert_int_equal(walk_object(text, &c), 0);
	assert_int_equal(c.n, 3);
	assert_string_equal(c.values[0], "\"x\\\\\"");
	assert_string_equal(c.values[1], "\"\\\\\\\"]\\\\\\\\\"");
	assert_string_equal(c.values[2], "[\"\\\\\",\"]\"]");
}

/* Keys are decoded: escapes resolved, UTF-8 passed through. */
static void test_escaped_keys(void **state)
{
	struct collected c = {0};
	const char *text = "{\"k\\\"ey\":1,\"\\u00e9t\\u00e9\":2,\"a\\\\b\":3,\"\xe2\x82\xac\":4,"
			   "\"\":5,\"\\ud83d\\ude00\":6}";

	assert_int_equal(walk_object(text, &c), 0);
	assert_int_equal(c.n, 6);
	assert_string_equal(c.keys[0], "k\"ey");
	assert_string_equal(c.keys[1], "\xc3\xa9t\xc3\xa9");
	assert_string_equal(c.keys[2], "a\\b");
	assert_string_equal(c.keys[3], "\xe2\x82\xac");
	assert_string_equal(c.keys[4], "");
	assert_string_equal(c.keys[5], "\xf0\x9f\x98\x80");
	assert_string_equal(c.values[5], "6");

	/* an escaped key is recognised by its decoded value */
	memset(&c, 0, sizeof(c));
	assert_int_equal(walk_object("{\"pay\\u006coad\":{\"x\":1},\"\\u0070ayload\":[]}", &c), 0);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.keys[0], "payload");
	assert_string_equal(c.values[0], "{\"x\":1}");
	assert_string_equal(c.keys[1], "payload");
	assert_string_equal(c.values[1], "[]");
}

/* Numbers keep their exact text: the reason this module exists. */
static void test_numbers(void **state)
{
	struct collected c = {0};
	const char *text = "{\"a\":0.1,\"b\":12345678901234567890,\"c\":-0,\"d\":1e-7,"
			   "\"e\":-1.50E+10,\"f\":-12345678901234567890123456789}";

	assert_int_equal(walk_object(text, &c), 0);
	assert_int_equal(c.n, 6);
	assert_string_equal(c.values[0], "0.1");
	assert_string_equal(c.values[1], "12345678901234567890"); /* beyond int64 */
	assert_string_equal(c.values[2], "-0");
	assert_string_equal(c.values[3], "1e-7");
	assert_string_equal(c.values[4], "-1.50E+10");
	assert_string_equal(c.values[5], "-12345678901234567890123456789");

	/* values are not converted: whether 1e400 is acceptable is the parser's call */
	memset(&c, 0, sizeof(c));
	assert_int_equal(walk_object("{\"a\":1e400,\"b\":-0.0E-0}", &c), 0);
	assert_string_equal(c.values[0], "1e400");
	assert_string_equal(c.values[1], "-0.0E-0");
}

static void test_whitespace(void **state)
{
	struct collected c = {0};
	const char *text = " \r\n\t{ \"a\" :\n1 ,\t\"b\"\r\n:[ 1 , 2 ] ,\"c\": { } } \n";

	assert_int_equal(walk_object(text, &c), 0);
	assert_int_equal(c.n, 3);
	assert_string_equal(c.values[0], "1");
	assert_string_equal(c.values[1], "[ 1 , 2 ]");
	assert_string_equal(c.values[2], "{ }");
}

static void test_value_with_nul(void **state)
{
	struct collected c = {0};

	/* \u0000 is valid in a value; a key must not pass for "a" */
	assert_int_equal(walk_object("{\"a\":\"x\\u0000y\"}", &c), 0);
	assert_string_equal(c.values[0], "\"x\\u0000y\"");
	memset(&c, 0, sizeof(c));
	assert_int_equal(walk_object("{\"a\\u0000b\":1}", &c), -1);
	assert_int_equal(c.n, 0);
	/* a raw NUL byte ends a scalar like any byte that cannot be part of one */
	assert_int_equal(walk_object_n("{\"a\":1\0}", 8, &c), -1);
}

static void test_duplicate_keys(void **state)
{
	struct collected c = {0};

	assert_int_equal(walk_object("{\"a\":1,\"a\":2}", &c), 0);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.values[0], "1");
	assert_string_equal(c.values[1], "2");
}

static void test_callback_stops(void **state)
{
	struct collected c = {.stop_at = 2, .stop_rc = 7};

	assert_int_equal(walk_object("{\"a\":1,\"b\":2,\"c\":3}", &c), 7);
	assert_int_equal(c.n, 2);

	memset(&c, 0, sizeof(c));
	c.stop_at = 1;
	c.stop_rc = -5;
	assert_int_equal(walk_array("[1,2,3]", &c), -5);
	assert_int_equal(c.n, 1);

	assert_int_equal(jsonspan_object("{\"a\":1}", 7, NULL, NULL), 0);
}

/* Broken structure that the scan meets on its way is reported. */
static void test_malformed_object(void **state)
{
	static const char *const bad[] = {
		"", "   ", "{", "}", "{\"a\"", "{\"a\":", "{\"a\":1", "{\"a\":1,",
		"{\"a\" 1}",            /* missing colon */
		"{\"a\"::1}",
		"{\"a\":1,}",           /* trailing comma */
		"{,}", "{,\"a\":1}", "{\"a\":1,,\"b\":2}",
		"{\"a\":1}x",           /* garbage after the object */
		"{\"a\":1} {}", "{\"a\":1}}",
		"{\"a\":1 \"b\":2}",    /* missing comma */
		"{a:1}", "{'a':1}", "{1:2}", "{null:1}", "{\"a\":}", "{\"a\":\"unterminated}",
		"{\"a\":\"esc\\\"}", "{\"a\":[1,2}", "{\"a\":{\"b\":1}", "{\"a\":[[]}",
		"[1,2]", "\"str\"", "1", "null",
		"\xef\xbb\xbf{}",       /* byte order mark */
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct collected c = {0};

		if (walk_object(bad[i], &c) != -1)
			fail_msg("accepted malformed object: %s", bad[i]);
	}
}

/* Invalid values are not looked at (the caller's parser has refused them already): the
 * walk only has to end and stay within the text, whatever it returns. */
static void test_invalid_values_stay_in_bounds(void **state)
{
	static const char *const garbage[] = {
		"{\"a\":tru}", "{\"a\":truex}", "{\"a\":1x}", "{\"a\":01}", "{\"a\":1.}",
		"{\"a\":.5}", "{\"a\":+1}", "{\"a\":NaN}", "{\"a\":\"bad \\x escape\"}",
		"{\"a\":\"\\ud800\"}", "{\"a\":\"\xff\"}", "{\"a\":\"tab\there\"}",
		"{\"a\":[1}", "{\"a\":{]}", "{\"a\":[}}", "{\"a\":[\"]\"}", "{\"a\":{\"b\"}}",
		"{\"a\":[1,]}", "{\"a\\q\":1}", "{\"a\":]", "{\"a\":}}}}", "{\"\\", "{\"\\\"",
	};

	for (size_t i = 0; i < sizeof(garbage) / sizeof(garbage[0]); i++) {
		struct collected c = {0};
		int rc = walk_object(garbage[i], &c);

		assert_true(rc == 0 || rc == -1);
		memset(&c, 0, sizeof(c));
		rc = walk_array(garbage[i], &c);
		assert_true(rc == 0 || rc == -1);
	}
}

/* The shapes a producer's payload takes, each found at its exact bytes inside an event
 * object, with and without whitespace around every token. */
static void test_payload_shapes(void **state)
{
	static const char *const payloads[] = {
		"{}", "[]", "{ }", "[ ]", "true", "false", "null", "0", "-0", "0.1", "-12.5e-3",
		"1E+2", "12345678901234567890123", "\"\"", "\"plain\"",
		"\"[{]}:,\"", "\"quote \\\" inside\"", "\"ends in backslash \\\\\"",
		"\"\\u00e9\\ud83d\\ude00\\n\"", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"",
		"{\"a\":{\"b\":{\"c\":[1,[2,[3,{\"d\":null}]]]}}}",
		"[{\"k\":\"}\"},{\"k\":\"]\"},[\"{\",\"[\"],true,false,null,-1.5]",
		"{\"s\":\"\\\"}\\\\\",\"t\":[\"\\\\\",\"\\\\\\\\\"]}",
		"{ \"x\" : [ 1 ,\n2\t, { \"y\" :\r\n\"z\" } ] , \"n\" : null }",
		"{\"\xc3\xa9\":\"\xe2\x82\xac\",\"pay\\u006coad\":0.10}",
	};
	static const char *const layouts[] = {
		"{\"event_type\":\"a.b\",\"payload\":%s,\"source\":\"s\"}",
		" \r\n{ \"payload\" :\t%s\n,\n\"event_type\" : \"a.b\" }\t",
		"{\"pay\\u006coad\":%s}",
		"{\"x\":[%s,{\"y\":%s}],\"payload\":%s}",
	};
	char text[1024];

	for (size_t l = 0; l < sizeof(layouts) / sizeof(layouts[0]); l++) {
		for (size_t p = 0; p < sizeof(payloads) / sizeof(payloads[0]); p++) {
			struct collected c = {0};
			int found = 0;

			snprintf(text, sizeof(text), layouts[l], payloads[p], payloads[p], payloads[p]);
			if (walk_object(text, &c) != 0)
				fail_msg("refused %s", text);
			for (int i = 0; i < c.n; i++) {
				if (strcmp(c.keys[i], "payload") != 0)
					continue;
				found++;
				if (strcmp(c.values[i], payloads[p]) != 0)
					fail_msg("payload span \"%s\", want \"%s\" in %s", c.values[i],
						 payloads[p], text);
			}
			assert_int_equal(found, 1);
		}
	}
}

/* Property: every proper prefix of a valid document is malformed, and walking it reads
 * nothing past its end. */
static void test_truncated_prefixes(void **state)
{
	const char *object = " {\"id\":\"0192f1e2\",\"n\":-12.5e3,\"s\":\"a\\\"}\\u00e9\","
			     "\"o\":{\"k\":[true,false,null,{}]},\"big\":12345678901234567890} ";
	const char *array = "[1, \"t\\\"w]o\", {\"3\":[4]}, null, 0.1]";
	size_t olen = strlen(object), alen = strlen(array);
	struct collected c = {0};

	assert_int_equal(walk_object_n(object, olen, &c), 0);
	assert_int_equal(c.n, 5);
	for (size_t len = 0; len < olen - 1; len++) {
		memset(&c, 0, sizeof(c));
		if (walk_object_n(object, len, &c) != -1)
			fail_msg("accepted a %zu-byte prefix", len);
	}
	memset(&c, 0, sizeof(c));
	assert_int_equal(walk_array_n(array, alen, &c), 0);
	assert_int_equal(c.n, 5);
	for (size_t len = 0; len < alen; len++) {
		memset(&c, 0, sizeof(c));
		if (walk_array_n(array, len, &c) != -1)
			fail_msg("accepted a %zu-byte prefix", len);
	}
}

/* A len shorter than the string: the walker stops at len, even mid-buffer. */
static void test_len_bounds_the_walk(void **state)
{
	struct collected c = {0};
	const char *text = "{\"a\":12}garbage";

	assert_int_equal(walk_object_n(text, 8, &c), 0);
	assert_string_equal(c.values[0], "12");
	memset(&c, 0, sizeof(c));
	/* cut inside the number: "1" is a complete value, then the '}' is missing */
	assert_int_equal(walk_object_n(text, 6, &c), -1);
}

/* The span of member "a", for values longer than struct collected holds. */
struct span_of_a {
	size_t start, end;
};

static int span_of_a_cb(void *ctx, const char *key, size_t key_len, size_t start, size_t end)
{
	struct span_of_a *a = ctx;

	assert_int_equal(key_len, 1);
	assert_memory_equal(key, "a", 1);
	a->start = start;
	a->end = end;
	return 0;
}

static void test_deep_nesting(void **state)
{
	size_t depth = 100, len = 5 + 2 * depth + 1;
	char *text = malloc(5000 * 2 + 16);
	struct collected c = {0};
	size_t o = 0;

	assert_non_null(text);
	o += (size_t)sprintf(text, "{\"a\":");
	for (size_t i = 0; i < depth; i++)
		text[o++] = '[';
	for (size_t i = 0; i < depth; i++)
		text[o++] = ']';
	text[o++] = '}';
	assert_int_equal(o, len);
	assert_int_equal(walk_object_n(text, len, &c), 0);
	assert_int_equal(c.n, 1);

	/* the scan keeps a depth count, not a stack: deeper than jansson's parser allows
	 * (2048) is no stack overflow either */
	depth = 5000;
	o = 5;
	for (size_t i = 0; i < depth; i++)
		text[o++] = '[';
	for (size_t i = 0; i < depth; i++)
		text[o++] = ']';
	text[o++] = '}';
	struct span_of_a a = {0};
	assert_int_equal(jsonspan_object(text, o, span_of_a_cb, &a), 0);
	assert_int_equal(a.start, 5);
	assert_int_equal(a.end, o - 1);
	/* and one bracket short of closing is still seen */
	memset(&c, 0, sizeof(c));
	assert_int_equal(walk_object_n(text, o - 2, &c), -1);
	free(text);
}

static void test_array(void **state)
{
	struct collected c = {0};

	assert_int_equal(walk_array(" [1, \"two\" ,{\"3\":[4]},null,\n0.1 ] ", &c), 0);
	assert_int_equal(c.n, 5);
	for (int i = 0; i < 5; i++)
		assert_int_equal(c.indexes[i], i);
	assert_string_equal(c.values[0], "1");
	assert_string_equal(c.values[1], "\"two\"");
	assert_string_equal(c.values[2], "{\"3\":[4]}");
	assert_string_equal(c.values[3], "null");
	assert_string_equal(c.values[4], "0.1");

	memset(&c, 0, sizeof(c));
	assert_int_equal(walk_array("[]", &c), 0);
	assert_int_equal(walk_array("[ \n ]", &c), 0);
	assert_int_equal(c.n, 0);

	/* the shape of an ingest batch */
	assert_int_equal(walk_array("[{\"event_type\":\"a\",\"payload\":{\"x\":0.10}},"
				    "{\"event_type\":\"b\",\"payload\":[]}]", &c), 0);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.values[0], "{\"event_type\":\"a\",\"payload\":{\"x\":0.10}}");
}

static void test_malformed_array(void **state)
{
	static const char *const bad[] = {
		"", "[", "]", "[1", "[1,", "[1,]", "[,1]", "[,]", "[1 2]", "[1,,2]", "[1]]",
		"[1] x", "[1]x", "{}", "[\"a]", "[[1]", "[{]", "[:]", "[1:2]", "[\"a\" \"b\"]",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct collected c = {0};

		if (walk_array(bad[i], &c) != -1)
			fail_msg("accepted malformed array: %s", bad[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_flat_object),
		cmocka_unit_test(test_empty_object),
		cmocka_unit_test(test_nested),
		cmocka_unit_test(test_strings_with_structure),
		cmocka_unit_test(test_escaped_keys),
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_whitespace),
		cmocka_unit_test(test_value_with_nul),
		cmocka_unit_test(test_duplicate_keys),
		cmocka_unit_test(test_callback_stops),
		cmocka_unit_test(test_malformed_object),
		cmocka_unit_test(test_invalid_values_stay_in_bounds),
		cmocka_unit_test(test_payload_shapes),
		cmocka_unit_test(test_truncated_prefixes),
		cmocka_unit_test(test_len_bounds_the_walk),
		cmocka_unit_test(test_deep_nesting),
		cmocka_unit_test(test_array),
		cmocka_unit_test(test_malformed_array),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
