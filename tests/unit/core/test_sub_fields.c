/* test_sub_fields.c: the table of subscription fields (core/sub_codec.c, sub_fields[])
 * against itself and against the docs: its order rules, docs/openapi.json (every field a
 * property of SubscriptionIn or Subscription, every property a field, the required ones),
 * docs/api.md's table of fields (every field a client writes has a row, every row names a
 * field) and its table of what each endpoint takes (every field that needs a capability
 * is there, and its yes/no per scheme is core/sink_caps.c's). A new field fails here
 * until the docs have it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sink_caps.h"
#include "core/sub_codec.h"

static size_t index_of(const char *key)
{
	const struct sub_field *f = sub_field_named(key);
	assert_non_null(f);
	return (size_t)(f - sub_fields);
}

/* The order parse_doc depends on, and what each kind needs. */
static void test_table_rules(void **state)
{
	(void)state;
	for (size_t i = 0; i < sub_fields_n; i++) {
		const struct sub_field *f = &sub_fields[i];
		assert_ptr_equal(sub_field_named(f->key), f); /* unique */
		if (f->cap)
			assert_true(i > index_of("endpoint"));
		if (f->kind == SF_PARSED)
			assert_non_null(f->parse);
		if (f->kind == SF_INSIDE) {
			char parent[64];
			snprintf(parent, sizeof(parent), "%.*s", (int)strcspn(f->key, "."), f->key);
			assert_non_null(strchr(f->key, '.'));
			assert_int_equal(sub_field_named(parent)->kind, SF_PARSED);
		}
		if (f->column)
			assert_true(f->member != 0);
	}
	assert_true(index_of("origin") < index_of("event_types"));
	assert_true(index_of("ordering") < index_of("ordering_on_dead"));
	assert_true(index_of("previous_secret") < index_of("previous_secret_expires_at"));
	assert_null(sub_field_named("nope"));
}

static char *read_file(const char *rel)
{
	char path[1024];
	snprintf(path, sizeof(path), "%s/%s", SOURCE_DIR, rel);
	FILE *f = fopen(path, "r");
	if (!f)
		fail_msg("cannot read %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *text = calloc(1, (size_t)n + 1);
	assert_int_equal(fread(text, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return text;
}

static void test_openapi_has_every_field(void **state)
{
	(void)state;
	char *text = read_file("docs/openapi.json");
	json_t *doc = json_loads(text, 0, NULL);
	assert_non_null(doc);
	json_t *schemas = json_object_get(json_object_get(doc, "components"), "schemas");
	json_t *in = json_object_get(json_object_get(schemas, "SubscriptionIn"), "properties");
	json_t *out = json_object_get(json_array_get(json_object_get(json_object_get(schemas,
		"Subscription"), "allOf"), 1), "properties");
	assert_non_null(in);
	assert_non_null(out);
	for (size_t i = 0; i < sub_fields_n; i++) {
		const struct sub_field *f = &sub_fields[i];
		if (f->kind == SF_INSIDE)
			continue;
		if (!json_object_get(in, f->key) && !json_object_get(out, f->key))
			fail_msg("docs/openapi.json: field %s is neither in SubscriptionIn nor in "
				 "Subscription", f->key);
		if (f->writer == SF_BY_USER && !json_object_get(in, f->key))
			fail_msg("docs/openapi.json: field %s is not in SubscriptionIn", f->key);
	}
	const char *key;
	json_t *v;
	json_object_foreach(in, key, v)
		if (!sub_field_named(key))
			fail_msg("docs/openapi.json: SubscriptionIn has %s, no field", key);
	json_object_foreach(out, key, v)
		if (!sub_field_named(key) && strcmp(key, "id") != 0 &&
		    strcmp(key, "created_at") != 0 && strcmp(key, "updated_at") != 0)
			fail_msg("docs/openapi.json: Subscription has %s, no field", key);
	json_t *required = json_object_get(json_object_get(schemas, "SubscriptionIn"), "required");
	size_t n_required = 0;
	for (size_t i = 0; i < sub_fields_n; i++) {
		if (!(sub_fields[i].flags & SF_REQUIRED))
			continue;
		n_required++;
		int found = 0;
		for (size_t k = 0; k < json_array_size(required); k++)
			found |= strcmp(json_string_value(json_array_get(required, k)),
					sub_fields[i].key) == 0;
		if (!found)
			fail_msg("docs/openapi.json: %s is required", sub_fields[i].key);
	}
	assert_int_equal(json_array_size(required), n_required);
	json_decref(doc);
	free(text);
}

/* The `names` of a markdown table's first cell ("`retry.min_delay`, `retry.max_delay`"),
 * each cut at its first ':' or ' ' ("payload_format: envelope"), into names[] (at most
 * max, 64 bytes each); their count. */
static int first_cell_names(const char *line, char names[][64], int max)
{
	int n = 0;
	const char *end = strchr(line + 1, '|');
	for (const char *p = line + 1; p && p < end && n < max; ) {
		const char *open = strchr(p, '`');
		if (!open || open > end)
			break;
		const char *close = strchr(open + 1, '`');
		if (!close || close > end)
			break;
		size_t len = strcspn(open + 1, "`: ");
		snprintf(names[n++], 64, "%.*s", (int)len, open + 1);
		p = close + 1;
	}
	return n;
}

/* The lines of the table under the header line starting with head, NULL-terminated
 * (pointers into text, each line NUL-ended in place). */
static char **table_lines(char *text, const char *head)
{
	static char *lines[256];
	int n = 0;
	char *at = strstr(text, head);
	if (!at)
		fail_msg("docs/api.md: no table \"%s\"", head);
	at = strchr(at, '\n') + 1;  /* the header */
	at = strchr(at, '\n') + 1;  /* |---| */
	while (*at == '|' && n < 255) {
		char *nl = strchr(at, '\n');
		if (nl)
			*nl = '\0';
		lines[n++] = at;
		if (!nl)
			break;
		at = nl + 1;
	}
	lines[n] = NULL;
	return lines;
}

static void test_api_md_has_every_field(void **state)
{
	(void)state;
	char *text = read_file("docs/api.md");
	char **lines = table_lines(text, "| field | default |");
	char names[256][64];
	int n = 0;
	for (char **l = lines; *l; l++)
		n += first_cell_names(*l, names + n, 256 - n);
	for (int k = 0; k < n; k++) {
		char top[64];
		snprintf(top, sizeof(top), "%.*s", (int)strcspn(names[k], "."), names[k]);
		if (!sub_field_named(top))
			fail_msg("docs/api.md: the fields table has %s, no field", names[k]);
	}
	for (size_t i = 0; i < sub_fields_n; i++) {
		const struct sub_field *f = &sub_fields[i];
		int found = 0;
		if (f->writer != SF_BY_USER)
			continue;
		for (int k = 0; k < n && !found; k++)
			found = strcmp(names[k], f->key) == 0 ||
				(f->kind != SF_INSIDE && strncmp(names[k], f->key, strlen(f->key)) == 0 &&
				 names[k][strlen(f->key)] == '.');
		if (!found)
			fail_msg("docs/api.md: field %s has no row in the fields table", f->key);
	}
	free(text);
}

/* "What each endpoint takes": every field with a capability has a row, and its cell per
 * scheme says yes exactly when core/sink_caps.c's row for that scheme has the
 * capability. */
static void test_api_md_says_what_each_scheme_takes(void **state)
{
	(void)state;
	char *text = read_file("docs/api.md");
	char *head = strstr(text, "| option |");
	assert_non_null(head);
	char schemes[8][16];
	int n_schemes = 0;
	for (char *p = strchr(head + 1, '|'); p && *p != '\n' && n_schemes < 8; p = strchr(p + 1, '|')) {
		char *tick = strchr(p, '`');
		if (!tick || tick > strchr(p, '\n'))
			break;
		snprintf(schemes[n_schemes++], 16, "%.*s", (int)strcspn(tick + 1, ":"), tick + 1);
	}
	assert_int_equal(n_schemes, (int)sink_schemes_n);
	char **lines = table_lines(text, "| option |");
	for (size_t i = 0; i < sub_fields_n; i++) {
		const struct sub_field *f = &sub_fields[i];
		if (!f->cap)
			continue;
		char **line = NULL;
		for (char **l = lines; *l && !line; l++) {
			char names[8][64];
			int n = first_cell_names(*l, names, 8);
			for (int k = 0; k < n; k++)
				if (strcmp(names[k], f->key) == 0)
					line = l;
		}
		if (!line)
			fail_msg("docs/api.md: %s needs a capability and has no row in \"What each "
				 "endpoint takes\"", f->key);
		const char *cell = strchr(*line + 1, '|');
		for (int k = 0; k < n_schemes; k++) {
			assert_non_null(cell);
			cell += strspn(cell + 1, " ") + 1;
			int yes = strncmp(cell, "yes", 3) == 0;
			if (!yes && strncmp(cell, "no", 2) != 0)
				fail_msg("docs/api.md: %s at %s:// is neither yes nor no", f->key,
					 schemes[k]);
			const struct sink_scheme *row = sink_scheme_named(schemes[k]);
			assert_non_null(row);
			if (yes != ((row->supports & f->cap) == f->cap))
				fail_msg("docs/api.md: %s at %s:// says %s, core/sink_caps.c the "
					 "opposite", f->key, schemes[k], yes ? "yes" : "no");
			cell = strchr(cell, '|');
		}
	}
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_rules),
		cmocka_unit_test(test_openapi_has_every_field),
		cmocka_unit_test(test_api_md_has_every_field),
		cmocka_unit_test(test_api_md_says_what_each_scheme_takes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
