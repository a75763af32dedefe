/* test_pattern.c: event-type glob matching (core/pattern.c), including a randomized
 * cross-check against fnmatch(3) and inputs that would blow up a recursive matcher. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "core/pattern.h"

static void test_literal(void **state)
{
	assert_true(pattern_match("user.created", "user.created"));
	assert_false(pattern_match("user.created", "user.create"));
	assert_false(pattern_match("user.create", "user.created"));
	assert_false(pattern_match("user.created", "User.created"));
	assert_false(pattern_match("a", ""));
	assert_true(pattern_match("", ""));
	assert_false(pattern_match("", "a"));
}

static void test_star(void **state)
{
	assert_true(pattern_match("*", ""));
	assert_true(pattern_match("*", "anything.at.all"));
	assert_true(pattern_match("user.*", "user.created"));
	assert_true(pattern_match("user.*", "user.profile.updated")); /* crosses dots */
	assert_true(pattern_match("user.*", "user."));                 /* empty run */
	assert_false(pattern_match("user.*", "user"));
	assert_false(pattern_match("user.*", "users.created"));
	assert_true(pattern_match("*.created", "user.created"));
	assert_true(pattern_match("*.created", ".created"));
	assert_false(pattern_match("*.created", "user.created.v2"));
	assert_true(pattern_match("user.*.v1", "user.a.b.v1"));
	assert_false(pattern_match("user.*.v1", "user.v1"));
	assert_true(pattern_match("**", "x"));
	assert_true(pattern_match("a**b", "ab"));
	assert_true(pattern_match("*ab", "aab"));   /* needs a backtrack */
	assert_true(pattern_match("*a*b", "xaxxab"));
	assert_false(pattern_match("*a*b", "xaxxa"));
	assert_true(pattern_match("a*b*c", "abbbc"));
	assert_false(pattern_match("a*b*c", "acb"));
}

static void test_question(void **state)
{
	assert_true(pattern_match("user.?", "user.a"));
	assert_false(pattern_match("user.?", "user.ab"));
	assert_false(pattern_match("user.?", "user."));
	assert_true(pattern_match("???", "a.b"));
	assert_false(pattern_match("???", "ab"));
	assert_true(pattern_match("?*", "a"));
	assert_false(pattern_match("?*", ""));
	assert_true(pattern_match("*?", "ab"));
}

static void test_null(void **state)
{
	assert_false(pattern_match(NULL, "a"));
	assert_false(pattern_match("a", NULL));
	assert_false(pattern_valid(NULL));
}

/* A naive recursive matcher takes exponential time here; ours is O(n*m). */
static void test_pathological(void **state)
{
	char *text = malloc(20001);
	char pattern[64];

	assert_non_null(text);
	memset(text, 'a', 20000);
	text[20000] = '\0';
	strcpy(pattern, "*a*a*a*a*a*a*a*a*a*a*b");
	assert_false(pattern_match(pattern, text));
	text[19999] = 'b';
	assert_true(pattern_match(pattern, text));
	free(text);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng_next(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

/* fnmatch with no flags treats '*' and '?' the same way (no special '.' or '/'), so the
 * two must agree on an alphabet without '[', '\\' and '/'. */
static void test_agrees_with_fnmatch(void **state)
{
	static const char pat_chars[] = "ab.*?";
	static const char txt_chars[] = "ab.";
	char pattern[12], text[16];
	int matched = 0;

	for (int i = 0; i < 50000; i++) {
		size_t pl = rng_next() % sizeof(pattern);
		size_t tl = rng_next() % sizeof(text);
		bool want;

		for (size_t j = 0; j < pl; j++)
			pattern[j] = pat_chars[rng_next() % (sizeof(pat_chars) - 1)];
		pattern[pl] = '\0';
		for (size_t j = 0; j < tl; j++)
			text[j] = txt_chars[rng_next() % (sizeof(txt_chars) - 1)];
		text[tl] = '\0';
		want = fnmatch(pattern, text, 0) == 0;
		if (pattern_match(pattern, text) != want)
			fail_msg("pattern \"%s\" text \"%s\": want %d", pattern, text, want);
		matched += want;
	}
	/* the generator must exercise both outcomes */
	assert_true(matched > 1000);
	assert_true(matched < 49000);
}

static void test_valid(void **state)
{
	char longest[257];

	assert_true(pattern_valid("*"));
	assert_true(pattern_valid("user.*"));
	assert_true(pattern_valid("order.v?.created"));
	assert_true(pattern_valid("a~!@#$%^&()_+-={}[]|\\:;\"'<>,./"));
	assert_false(pattern_valid(""));
	assert_false(pattern_valid("user created"));
	assert_false(pattern_valid("user\tcreated"));
	assert_false(pattern_valid("user\ncreated"));
	assert_false(pattern_valid("user\x7f"));
	assert_false(pattern_valid("caf\xc3\xa9"));

	memset(longest, 'a', 255);
	longest[255] = '\0';
	assert_true(pattern_valid(longest));
	longest[255] = 'a';
	longest[256] = '\0';
	assert_false(pattern_valid(longest));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_literal),
		cmocka_unit_test(test_star),
		cmocka_unit_test(test_question),
		cmocka_unit_test(test_null),
		cmocka_unit_test(test_pathological),
		cmocka_unit_test(test_agrees_with_fnmatch),
		cmocka_unit_test(test_valid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
