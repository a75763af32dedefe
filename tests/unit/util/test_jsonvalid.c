/* test_jsonvalid.c: the conservative JSON value check (util/jsonvalid.c) against jansson.
 *
 * The promise: jsonvalid_value never says 1 for a value jansson (json_loadb with
 * JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL, the flags of ingest) refuses. Checked
 * on a list of hand-picked values and on generated ones (random sequences of JSON's
 * pieces, mutated); the common payload shapes must also be answered 1, or ingest would
 * gain nothing. Inputs are copied into heap blocks of exactly their length, so
 * AddressSanitizer catches a read past the span. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonvalid.h"

static int jansson_accepts(const char *text, size_t len)
{
	json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_INT_AS_REAL |
				       JSON_DECODE_ANY, NULL);
	json_decref(v);
	return v != NULL;
}

static int check(const char *text, size_t len)
{
	char *copy = malloc(len ? len : 1);
	memcpy(copy, text, len);
	int ok = jsonvalid_value(copy, len);
	free(copy);
	if (ok && !jansson_accepts(text, len))
		fail_msg("jsonvalid_value accepts what jansson refuses: \"%.*s\"", (int)len, text);
	return ok;
}

static int valid(const char *text)
{
	return check(text, strlen(text));
}

/* What payloads look like: answered 1 (the point of the check). */
static void test_common_payloads(void **state)
{
	static const char *const yes[] = {
		"{}", "[]", "0", "-1", "1.5", "2e10", "-0.25E-3", "true", "false", "null", "\"\"",
		"{\"n\":1,\"pad\":\"000000\"}",
		"{\"order\":{\"id\":\"o-1\",\"total\":12.5,\"items\":[1,2,3],\"paid\":true,\"note\":null}}",
		"[{\"a\":1},{\"a\":2}]", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"",
		"\"tab\\tquote\\\"slash\\/back\\\\nl\\n\\u00e9\\u20ac\"",
		"{ \"a\" : [ 1 , 2 ] , \"b\" : { } }", "18446744073709551615",
		"{\"a\":1,\"b\":2,\"ab\":3,\"ba\":4}",
	};
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		if (!valid(yes[i]))
			fail_msg("not accepted: %s", yes[i]);
}

/* Invalid, or where the check must leave the answer to jansson: answered 0. */
static void test_refused_or_unsure(void **state)
{
	static const char *const no[] = {
		"", " {}", "{} ", "{", "}", "[1,]", "[,1]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}",
		"{\"a\":1,\"a\":2}",                   /* a duplicate key */
		"{\"a\":1,\"\\u0061\":2}",             /* an escaped key: not sure */
		"01", "1.", ".5", "-", "+1", "1e", "1e+", "0x10", "1e400", "-1e400",
		"1e99999",                              /* exponent too long to be sure */
		"\"\\u0000\"", "\"\\ud83d\\ude00\"", "\"\\ud800\"", "\"\\x41\"", "\"\\u12G4\"",
		"\"a\x01\"", "\"unterminated", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"",
		"\"\xe2\x82\"", "\"\x80\"", "tru", "nul", "nulll", "True", "[1 2]", "{\"a\":1 \"b\":2}",
		"1 2", "[]]", "[[]", "\"a\"\"b\"",
	};
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (valid(no[i]))
			fail_msg("accepted: %s", no[i]);
	/* a NUL byte inside a string, and nesting deeper than the check goes */
	assert_false(check("\"a\0b\"", 5));
	char deep[200];
	memset(deep, '[', 100);
	memset(deep + 100, ']', 100);
	assert_false(check(deep, sizeof(deep)));
	assert_true(check(deep + 40, 120)); /* 60 deep is fine */
}

static unsigned next(unsigned *seed)
{
	*seed = *seed * 1103515245u + 12345u;
	return *seed >> 16;
}

/* Random texts from JSON's pieces, then mutated: whatever the check accepts, jansson
 * accepts (check() fails the test otherwise), and a fair share is accepted. */
static void test_generated(void **state)
{
	static const char *const pieces[] = {
		"{", "}", "[", "]", ",", ":", "\"a\"", "\"b\"", "\"a\"", "1", "-0", "2.5e3", "1e400",
		"true", "null", "\"\\u0041\"", "\"\\ud800\"", "\"\xc3\xa9\"", "\"\xc3\"", " ", "0",
		"\"\\n\"", "\"k\":", "\"k\":", "\"\\u0000\"", "01", "\"\\\"\"",
	};
	const size_t n_pieces = sizeof(pieces) / sizeof(pieces[0]);
	unsigned seed = 12345;
	long accepted = 0;
	char text[256];

	for (int round = 0; round < 200000; round++) {
		size_t len = 0;
		int k = 1 + (int)(next(&seed) % 12);
		for (int i = 0; i < k; i++) {
			const char *p = pieces[next(&seed) % n_pieces];
			size_t pl = strlen(p);
			if (len + pl >= sizeof(text))
				break;
			memcpy(text + len, p, pl);
			len += pl;
		}
		if (len && next(&seed) % 4 == 0) {
			size_t at = next(&seed) % len;
			text[at] = (char)next(&seed);
		}
		accepted += check(text, len);
	}
	/* the generator is not a vacuous one: some of its texts are values */
	assert_true(accepted > 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_common_payloads),
		cmocka_unit_test(test_refused_or_unsure),
		cmocka_unit_test(test_generated),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
