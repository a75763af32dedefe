/* test_token.c: scopes (what each grants, the API's and the store's forms), token names,
 * generated tokens and their hashes (core/token.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>

#include "core/token.h"

static void test_grants(void **state)
{
	assert_int_equal(token_scope_grants(TOKEN_SCOPE_ADMIN), TOKEN_SCOPE_ALL);
	assert_int_equal(token_scope_grants(TOKEN_SCOPE_OPERATE),
			 TOKEN_SCOPE_OPERATE | TOKEN_SCOPE_READ);
	assert_int_equal(token_scope_grants(TOKEN_SCOPE_READ), TOKEN_SCOPE_READ);
	assert_int_equal(token_scope_grants(TOKEN_SCOPE_INGEST), TOKEN_SCOPE_INGEST);
	/* read does not grant ingest, nor operate admin */
	assert_false(token_scope_grants(TOKEN_SCOPE_READ) & TOKEN_SCOPE_INGEST);
	assert_false(token_scope_grants(TOKEN_SCOPE_OPERATE) & TOKEN_SCOPE_ADMIN);
	assert_false(token_scope_grants(TOKEN_SCOPE_OPERATE) & TOKEN_SCOPE_INGEST);
	assert_string_equal(token_scope_name(TOKEN_SCOPE_OPERATE), "operate");
}

static void test_json_forms(void **state)
{
	struct input_error err;
	unsigned m = 0;
	json_t *v = json_loads("[\"read\",\"ingest\",\"read\"]", 0, NULL);
	assert_int_equal(token_scopes_from_json(v, &m, &err), 0);
	assert_int_equal(m, TOKEN_SCOPE_READ | TOKEN_SCOPE_INGEST);
	json_decref(v);

	static const struct {
		const char *json;
		const char *field;
	} bad[] = {
		{"[]", "scopes"}, {"\"read\"", "scopes"}, {"null", "scopes"},
		{"[\"read\",\"root\"]", "scopes[1]"}, {"[1]", "scopes[0]"}, {"[\"Read\"]", "scopes[0]"},
		{"[\"readx\"]", "scopes[0]"}, {"[\"rea\"]", "scopes[0]"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		v = json_loads(bad[i].json, JSON_DECODE_ANY, NULL);
		assert_int_equal(token_scopes_from_json(v, &m, &err), -1);
		assert_int_equal(err.status, 400);
		assert_string_equal(err.field, bad[i].field);
		json_decref(v);
	}
	json_t *a = token_scopes_json(TOKEN_SCOPE_ADMIN | TOKEN_SCOPE_INGEST);
	char *text = json_dumps(a, JSON_COMPACT);
	assert_string_equal(text, "[\"ingest\",\"admin\"]");
	free(text);
	json_decref(a);
}

static void test_text_forms(void **state)
{
	char buf[64];
	unsigned m = 0;
	token_scopes_to_text(TOKEN_SCOPE_ALL, buf, sizeof(buf));
	assert_string_equal(buf, "ingest,read,operate,admin");
	assert_int_equal(token_scopes_from_text(buf, &m), 0);
	assert_int_equal(m, TOKEN_SCOPE_ALL);
	assert_int_equal(token_scopes_from_text("read", &m), 0);
	assert_int_equal(m, TOKEN_SCOPE_READ);
	assert_int_equal(token_scopes_from_text("", &m), -1);
	assert_int_equal(token_scopes_from_text("read,sudo", &m), -1);
	/* a short buffer is cut, never overrun */
	token_scopes_to_text(TOKEN_SCOPE_ALL, buf, 10);
	assert_true(strlen(buf) < 10);
}

static void test_names(void **state)
{
	assert_true(token_name_valid("ci-deploy_2.prod"));
	assert_false(token_name_valid(""));
	assert_false(token_name_valid(NULL));
	assert_false(token_name_valid("has space"));
	assert_false(token_name_valid("quote\""));
	char long_name[TOKEN_NAME_MAX + 2];
	memset(long_name, 'a', sizeof(long_name) - 1);
	long_name[TOKEN_NAME_MAX + 1] = '\0';
	assert_false(token_name_valid(long_name));
	long_name[TOKEN_NAME_MAX] = '\0';
	assert_true(token_name_valid(long_name));
}

static void test_generate_and_hash(void **state)
{
	char a[TOKEN_LEN + 1], b[TOKEN_LEN + 1], h[65];
	assert_int_equal(token_generate(a), 0);
	assert_int_equal(token_generate(b), 0);
	assert_int_equal(strlen(a), TOKEN_LEN);
	assert_memory_equal(a, "obx_", 4);
	assert_string_not_equal(a, b);
	for (size_t i = 4; i < TOKEN_LEN; i++)
		assert_non_null(strchr("0123456789abcdef", a[i]));
	/* SHA-256("abc"), FIPS 180-2 */
	token_hash("abc", 3, h);
	assert_string_equal(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_grants),
		cmocka_unit_test(test_json_forms),
		cmocka_unit_test(test_text_forms),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_generate_and_hash),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
