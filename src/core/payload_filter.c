/* payload_filter.c: parsing and matching a subscription's payload filter
 * (core/payload_filter.h). Owns the filter's tree; knows nothing of subscriptions or of
 * where a payload came from. */
#include "core/payload_filter.h"

#include <stdlib.h>
#include <string.h>

#include "core/header.h"

enum pf_op { PF_EQ, PF_NEQ, PF_GT, PF_GTE, PF_LT, PF_LTE, PF_IN, PF_NIN, PF_EXISTS, PF_PREFIX };

static const struct {
	const char *name;
	enum pf_op op;
} ops[] = {
	{"$eq", PF_EQ},   {"$neq", PF_NEQ}, {"$gt", PF_GT},         {"$gte", PF_GTE},
	{"$lt", PF_LT},   {"$lte", PF_LTE}, {"$in", PF_IN},         {"$nin", PF_NIN},
	{"$exists", PF_EXISTS},             {"$startsWith", PF_PREFIX},
};

struct pf_test {
	enum pf_op op;
	json_t *value; /* a reference: the literal, the list of $in / $nin, $exists' bool */
};

/* One path and what its value must pass. */
struct pf_cond {
	char **seg;
	size_t n_seg;
	struct pf_test *tests;
	size_t n_tests;
};

/* "$or" (any) or "$and" (all) of filters. */
struct pf_group {
	int any;
	struct payload_filter **subs;
	size_t n;
};

/* Every condition and every group must hold. */
struct payload_filter {
	struct pf_cond *conds;
	size_t n_conds;
	struct pf_group *groups;
	size_t n_groups;
};

void payload_filter_free(struct payload_filter *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->n_conds; i++) {
		for (size_t k = 0; k < f->conds[i].n_seg; k++)
			free(f->conds[i].seg[k]);
		free(f->conds[i].seg);
		for (size_t k = 0; k < f->conds[i].n_tests; k++)
			json_decref(f->conds[i].tests[k].value);
		free(f->conds[i].tests);
	}
	free(f->conds);
	for (size_t i = 0; i < f->n_groups; i++) {
		for (size_t k = 0; k < f->groups[i].n; k++)
			payload_filter_free(f->groups[i].subs[k]);
		free(f->groups[i].subs);
	}
	free(f->groups);
	free(f);
}

/* ---- parsing -------------------------------------------------------------------------- */

struct pf_parse {
	struct input_error *err;
	int conditions; /* counted over the whole filter */
};

static int bad(struct pf_parse *p, const char *path, const char *fmt, const char *what)
{
	char field[128];
	snprintf(field, sizeof(field), "filter%s%s", path && *path ? "." : "", path ? path : "");
	return input_error_set(p->err, 400, "invalid_argument", field, fmt, field, what);
}

static int oom(struct pf_parse *p)
{
	return input_error_set(p->err, 500, "internal", "", "out of memory");
}

static int is_literal(const json_t *v)
{
	return json_is_string(v) || json_is_number(v) || json_is_boolean(v) || json_is_null(v);
}

/* path "a.b.0" into c's segments: 1..PAYLOAD_FILTER_MAX_SEGMENTS non-empty names. */
static int parse_path(struct pf_parse *p, const char *path, struct pf_cond *c)
{
	size_t len = strlen(path);
	if (len == 0 || len > PAYLOAD_FILTER_MAX_PATH || path[0] == '.' || path[len - 1] == '.' ||
	    strstr(path, ".."))
		return bad(p, path, "%s: %s", "a path is 1 to 256 bytes of member names joined by "
					      "'.' (data.amount, items.0.sku)");
	size_t n = 1;
	for (const char *s = path; *s; s++)
		n += *s == '.';
	if (n > PAYLOAD_FILTER_MAX_SEGMENTS)
		return bad(p, path, "%s: %s", "a path has at most 16 segments");
	if (!(c->seg = calloc(n, sizeof(*c->seg))))
		return oom(p);
	for (const char *s = path; c->n_seg < n; s++) {
		const char *dot = strchr(s, '.');
		size_t l = dot ? (size_t)(dot - s) : strlen(s);
		if (!(c->seg[c->n_seg] = strndup(s, l)))
			return oom(p);
		c->n_seg++;
		s += l;
	}
	return 0;
}

static enum pf_op op_named(const char *name, int *found)
{
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		if (strcmp(ops[i].name, name) == 0) {
			*found = 1;
			return ops[i].op;
		}
	*found = 0;
	return PF_EQ;
}

/* One operator's value, checked for its kind. */
static int check_operand(struct pf_parse *p, const char *path, enum pf_op op, const json_t *v)
{
	switch (op) {
	case PF_EQ:
	case PF_NEQ:
		return is_literal(v) ? 0 : bad(p, path, "%s: %s", "$eq and $neq take a string, a "
								  "number, true, false or null");
	case PF_GT:
	case PF_GTE:
	case PF_LT:
	case PF_LTE:
		return json_is_number(v) || json_is_string(v)
			       ? 0
			       : bad(p, path, "%s: %s", "$gt, $gte, $lt and $lte take a number or a "
							"string");
	case PF_IN:
	case PF_NIN: {
		size_t n = json_is_array(v) ? json_array_size(v) : 0;
		int ok = n >= 1 && n <= PAYLOAD_FILTER_MAX_LIST;
		for (size_t i = 0; ok && i < n; i++)
			ok = is_literal(json_array_get(v, i));
		return ok ? 0 : bad(p, path, "%s: %s", "$in and $nin take an array of 1 to 100 "
							"strings, numbers, booleans or nulls");
	}
	case PF_EXISTS:
		return json_is_boolean(v) ? 0 : bad(p, path, "%s: %s", "$exists takes true or false");
	case PF_PREFIX:
		return json_is_string(v) ? 0 : bad(p, path, "%s: %s", "$startsWith takes a string");
	}
	return 0;
}

static int add_test(struct pf_parse *p, struct pf_cond *c, enum pf_op op, json_t *v)
{
	struct pf_test *more = realloc(c->tests, (c->n_tests + 1) * sizeof(*more));
	if (!more)
		return oom(p);
	c->tests = more;
	c->tests[c->n_tests++] = (struct pf_test){op, json_incref(v)};
	return 0;
}

static int parse_cond(struct pf_parse *p, const char *path, json_t *v, struct pf_cond *c)
{
	if (++p->conditions > PAYLOAD_FILTER_MAX_CONDITIONS)
		return bad(p, NULL, "%s: %s", "a filter tests at most 64 paths");
	if (parse_path(p, path, c))
		return -1;
	if (is_literal(v))
		return add_test(p, c, PF_EQ, v);
	if (!json_is_object(v) || json_object_size(v) == 0)
		return bad(p, path, "%s: %s", "a path takes a value to equal (a string, a number, "
					      "true, false or null) or an object of operators such as "
					      "{\"$gte\": 100}");
	const char *name;
	json_t *operand;
	json_object_foreach(v, name, operand) {
		int found;
		enum pf_op op = op_named(name, &found);
		if (!found)
			return bad(p, path, "%s: %s", "the operators are $eq, $neq, $gt, $gte, $lt, "
						      "$lte, $in, $nin, $exists and $startsWith");
		if (check_operand(p, path, op, operand) || add_test(p, c, op, operand))
			return -1;
	}
	return 0;
}

static int parse_filter(struct pf_parse *p, const json_t *v, int depth,
			struct payload_filter **out);

static int parse_group(struct pf_parse *p, const char *key, json_t *v, int depth,
		       struct pf_group *g)
{
	size_t n = json_is_array(v) ? json_array_size(v) : 0;
	if (n < 1 || n > PAYLOAD_FILTER_MAX_LIST)
		return bad(p, key, "%s: %s", "$or and $and take an array of 1 to 100 filters");
	if (depth >= PAYLOAD_FILTER_MAX_DEPTH)
		return bad(p, key, "%s: %s", "$or and $and nest at most 4 deep");
	g->any = strcmp(key, "$or") == 0;
	if (!(g->subs = calloc(n, sizeof(*g->subs))))
		return oom(p);
	for (size_t i = 0; i < n; i++) {
		g->n = i + 1; /* a filter that fails half-made is freed with the rest */
		if (parse_filter(p, json_array_get(v, i), depth + 1, &g->subs[i]))
			return -1;
	}
	return 0;
}

static int parse_filter(struct pf_parse *p, const json_t *v, int depth,
			struct payload_filter **out)
{
	struct payload_filter *f;
	size_t n = json_is_object(v) ? json_object_size(v) : 0;

	*out = NULL;
	if (n == 0)
		return bad(p, NULL, "%s: %s", "a filter is an object of at least one path, such as "
					      "{\"data.status\": \"paid\"}");
	if (!(f = calloc(1, sizeof(*f))) || !(f->conds = calloc(n, sizeof(*f->conds))) ||
	    !(f->groups = calloc(n, sizeof(*f->groups)))) {
		payload_filter_free(f);
		return oom(p);
	}
	*out = f;
	const char *key;
	json_t *member;
	json_object_foreach((json_t *)v, key, member) {
		int rc;
		if (strcmp(key, "$or") == 0 || strcmp(key, "$and") == 0)
			rc = parse_group(p, key, member, depth, &f->groups[f->n_groups++]);
		else if (key[0] == '$')
			rc = bad(p, key, "%s: %s", "a filter's members are paths, \"$or\" and "
						   "\"$and\"");
		else
			rc = parse_cond(p, key, member, &f->conds[f->n_conds++]);
		if (rc)
			return -1;
	}
	return 0;
}

int payload_filter_parse(const json_t *v, struct payload_filter **out, struct input_error *err)
{
	struct pf_parse p = {err, 0};
	if (parse_filter(&p, v, 0, out) == 0)
		return 0;
	payload_filter_free(*out);
	*out = NULL;
	return -1;
}

/* ---- matching ------------------------------------------------------------------------- */

json_t *payload_filter_doc(const char *content_type, const void *data, size_t len)
{
	if (!data || (content_type && !header_is_json_type(content_type)))
		return NULL;
	return json_loadb(data, len, JSON_DECODE_ANY, NULL);
}

static const json_t *resolve(const json_t *doc, const struct pf_cond *c)
{
	for (size_t i = 0; doc && i < c->n_seg; i++) {
		const char *s = c->seg[i];
		if (json_is_object(doc)) {
			doc = json_object_get(doc, s);
		} else if (json_is_array(doc) && s[0] && strspn(s, "0123456789") == strlen(s) &&
			   strlen(s) < 10) {
			doc = json_array_get(doc, (size_t)strtoul(s, NULL, 10));
		} else {
			doc = NULL;
		}
	}
	return doc;
}

/* Numbers by value (1 equals 1.0), the rest as jansson compares them. */
static int equal(const json_t *a, const json_t *b)
{
	if (json_is_number(a) && json_is_number(b))
		return json_number_value(a) == json_number_value(b);
	return json_equal((json_t *)a, (json_t *)b);
}

/* -1, 0, 1 for two numbers or two strings; 2 when they do not compare. */
static int compare(const json_t *a, const json_t *b)
{
	if (json_is_number(a) && json_is_number(b)) {
		double x = json_number_value(a), y = json_number_value(b);
		return x < y ? -1 : x > y;
	}
	if (json_is_string(a) && json_is_string(b)) {
		int c = strcmp(json_string_value(a), json_string_value(b));
		return c < 0 ? -1 : c > 0;
	}
	return 2;
}

static int in_list(const json_t *found, const json_t *list)
{
	for (size_t i = 0; i < json_array_size(list); i++)
		if (equal(found, json_array_get(list, i)))
			return 1;
	return 0;
}

/* A path that is not there passes only $exists: false, $neq and $nin. */
static int pass(const struct pf_test *t, const json_t *found)
{
	int c;
	switch (t->op) {
	case PF_EQ:
		return found && equal(found, t->value);
	case PF_NEQ:
		return !found || !equal(found, t->value);
	case PF_IN:
		return found && in_list(found, t->value);
	case PF_NIN:
		return !found || !in_list(found, t->value);
	case PF_EXISTS:
		return (found != NULL) == json_is_true(t->value);
	case PF_PREFIX:
		return found && json_is_string(found) &&
		       strncmp(json_string_value(found), json_string_value(t->value),
			       strlen(json_string_value(t->value))) == 0;
	case PF_GT:
		return found && (c = compare(found, t->value)) == 1;
	case PF_GTE:
		return found && ((c = compare(found, t->value)) == 1 || c == 0);
	case PF_LT:
		return found && (c = compare(found, t->value)) == -1;
	case PF_LTE:
		return found && ((c = compare(found, t->value)) == -1 || c == 0);
	}
	return 0;
}

int payload_filter_match(const struct payload_filter *f, const json_t *payload)
{
	if (!payload)
		return 0;
	for (size_t i = 0; i < f->n_conds; i++) {
		const json_t *found = resolve(payload, &f->conds[i]);
		for (size_t k = 0; k < f->conds[i].n_tests; k++)
			if (!pass(&f->conds[i].tests[k], found))
				return 0;
	}
	for (size_t i = 0; i < f->n_groups; i++) {
		const struct pf_group *g = &f->groups[i];
		int any = 0;
		for (size_t k = 0; k < g->n && (g->any ? !any : 1); k++) {
			int m = payload_filter_match(g->subs[k], payload);
			if (g->any)
				any = m;
			else if (!m)
				return 0;
		}
		if (g->any && !any)
			return 0;
	}
	return 1;
}
