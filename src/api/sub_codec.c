/* sub_codec.c: subscription validation, parsing and masking (see sub_codec.h). */
#include "api/sub_codec.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "core/pattern.h"
#include "core/subscriptions.h"
#include "util/clock.h"
#include "util/duration.h"
#include "util/log.h"

#define MASK "********"

static const char *const top_keys[] = {
	"name", "event_types", "endpoint", "payload_format", "auth", "headers", "secret",
	"timeout", "retry", "enabled", NULL,
};

static const char *const retry_keys[] = {
	"immediate", "immediate_delay", "policy", "interval", "min_delay", "max_delay",
	"factor", "max_retries", "timeout", NULL,
};

/* Headers a subscription may not set: hop-by-hop ones and the ones outboxd owns. */
static const char *const denied_headers[] = {
	"host", "content-length", "content-type", "transfer-encoding", "connection",
	"keep-alive", "te", "trailer", "upgrade", "expect", "traceparent", NULL,
};

static int in_list(const char *const *list, const char *s)
{
	for (; *list; list++)
		if (strcmp(*list, s) == 0)
			return 1;
	return 0;
}

static int check_keys(const json_t *obj, const char *const *allowed, const char *prefix,
		      struct input_error *err)
{
	const char *key;
	json_t *v;
	char field[128];
	json_object_foreach((json_t *)obj, key, v) {
		if (!in_list(allowed, key)) {
			snprintf(field, sizeof(field), "%s%s", prefix, key);
			return input_error_set(err, 400, "invalid_argument", field,
					       "unknown field \"%s\"", field);
		}
	}
	return 0;
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

/* A string field: required or optional; *out borrowed from the document. */
static int get_string(const json_t *obj, const char *key, const char *field, int required,
		      size_t max, const char **out, struct input_error *err)
{
	json_t *v = json_object_get(obj, key);
	*out = NULL;
	if (!v || json_is_null(v)) {
		if (required)
			return input_error_set(err, 400, "invalid_argument", field,
					       "%s is required", field);
		return 0;
	}
	if (!json_is_string(v))
		return input_error_set(err, 400, "invalid_argument", field,
				       "%s must be a string", field);
	size_t len = json_string_length(v);
	if ((required && len == 0) || len > max)
		return input_error_set(err, 400, "invalid_argument", field,
				       "%s must be 1 to %zu characters", field, max);
	if (strlen(json_string_value(v)) != len)
		return input_error_set(err, 400, "invalid_argument", field,
				       "%s must not contain NUL characters", field);
	*out = json_string_value(v);
	return 0;
}

static int get_duration(const json_t *obj, const char *key, const char *field, int64_t min,
			int64_t max, int64_t *out, struct input_error *err)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return 0;
	int64_t ms;
	if (!json_is_string(v) || duration_parse(json_string_value(v), &ms))
		return input_error_set(err, 400, "invalid_argument", field,
				       "%s must be a duration with a unit, such as \"500ms\" or \"3s\"",
				       field);
	if (ms < min || ms > max) {
		char a[32], b[32];
		return input_error_set(err, 422, "invalid_argument", field,
				       "%s must be between %s and %s", field,
				       duration_format(min, a, sizeof(a)),
				       duration_format(max, b, sizeof(b)));
	}
	*out = ms;
	return 0;
}

static int get_int(const json_t *obj, const char *key, const char *field, long long min,
		   long long max, int *out, struct input_error *err)
{
	json_t *v = json_object_get(obj, key);
	if (!v)
		return 0;
	if (!json_is_integer(v))
		return input_error_set(err, 400, "invalid_argument", field,
				       "%s must be an integer", field);
	long long x = json_integer_value(v);
	if (x < min || x > max)
		return input_error_set(err, 422, "invalid_argument", field,
				       "%s must be between %lld and %lld", field, min, max);
	*out = (int)x;
	return 0;
}

/* http(s)://host[:port][/path][?query]: a host is required, no spaces or controls. */
static int endpoint_valid(const char *url, const char **why)
{
	const char *rest;
	if (strncasecmp(url, "http://", 7) == 0) {
		rest = url + 7;
	} else if (strncasecmp(url, "https://", 8) == 0) {
		rest = url + 8;
	} else if (strncasecmp(url, "kafka://", 8) == 0) {
		*why = "kafka:// endpoints are not available in this build of outboxd";
		return 0;
	} else {
		*why = "endpoint must start with http:// or https://";
		return 0;
	}
	for (const char *p = url; *p; p++) {
		if ((unsigned char)*p <= ' ' || *p == 0x7f) {
			*why = "endpoint must not contain spaces or control characters";
			return 0;
		}
	}
	size_t host = strcspn(rest, "/?#:");
	if (host == 0) {
		*why = "endpoint must name a host";
		return 0;
	}
	if (strchr(url, '#')) {
		*why = "endpoint must not contain a fragment";
		return 0;
	}
	if (rest[host] == ':') {
		const char *port = rest + host + 1;
		size_t digits = strspn(port, "0123456789");
		if (digits == 0 || digits > 5 || (port[digits] && port[digits] != '/' &&
						   port[digits] != '?') || atoi(port) > 65535) {
			*why = "endpoint has an invalid port";
			return 0;
		}
	}
	return 1;
}

/* whsec_ followed by base64 of 16 to 128 bytes (Standard Webhooks). */
static int secret_valid(const char *s)
{
	if (strncmp(s, "whsec_", 6) != 0)
		return 0;
	const char *b64 = s + 6;
	size_t len = strlen(b64);
	if (len < 4 || len > 256 || len % 4)
		return 0;
	unsigned char out[256];
	int n = EVP_DecodeBlock(out, (const unsigned char *)b64, (int)len);
	if (n < 0)
		return 0;
	size_t pad = (b64[len - 1] == '=') + (b64[len - 2] == '=');
	return (size_t)n - pad >= 16;
}

static int parse_auth(const json_t *auth, struct subscription *out, struct input_error *err)
{
	static const char *const keys_none[] = {"type", NULL};
	static const char *const keys_basic[] = {"type", "username", "password", NULL};
	static const char *const keys_bearer[] = {"type", "token", NULL};
	static const char *const keys_api_key[] = {"type", "header", "value", NULL};
	static const char *const keys_query[] = {"type", "param", "value", NULL};
	const char *type, *a = NULL, *b = NULL;

	if (!json_is_object(auth))
		return input_error_set(err, 400, "invalid_argument", "auth",
				       "auth must be an object with a \"type\"");
	if (get_string(auth, "type", "auth.type", 1, 32, &type, err))
		return -1;
	if (strcmp(type, "none") == 0) {
		out->auth_type = AUTH_NONE;
		return check_keys(auth, keys_none, "auth.", err);
	}
	if (strcmp(type, "basic") == 0) {
		if (check_keys(auth, keys_basic, "auth.", err) ||
		    get_string(auth, "username", "auth.username", 1, 256, &a, err) ||
		    get_string(auth, "password", "auth.password", 1, 1024, &b, err))
			return -1;
		if (strchr(a, ':'))
			return input_error_set(err, 400, "invalid_argument", "auth.username",
					       "auth.username must not contain ':'");
		out->auth_type = AUTH_BASIC;
		out->auth_user = strdup(a);
		out->auth_secret = strdup(b);
		return 0;
	}
	if (strcmp(type, "bearer") == 0) {
		if (check_keys(auth, keys_bearer, "auth.", err) ||
		    get_string(auth, "token", "auth.token", 1, 8192, &b, err))
			return -1;
		out->auth_type = AUTH_BEARER;
		out->auth_secret = strdup(b);
		return 0;
	}
	if (strcmp(type, "api_key") == 0) {
		if (check_keys(auth, keys_api_key, "auth.", err) ||
		    get_string(auth, "header", "auth.header", 1, 128, &a, err) ||
		    get_string(auth, "value", "auth.value", 1, 8192, &b, err))
			return -1;
		for (const char *p = a; *p; p++)
			if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_')
				return input_error_set(err, 400, "invalid_argument", "auth.header",
						       "auth.header must be a header name (letters, digits, '-', '_')");
		out->auth_type = AUTH_API_KEY;
		out->auth_name = strdup(a);
		out->auth_secret = strdup(b);
		return 0;
	}
	if (strcmp(type, "query") == 0) {
		if (check_keys(auth, keys_query, "auth.", err) ||
		    get_string(auth, "param", "auth.param", 1, 128, &a, err) ||
		    get_string(auth, "value", "auth.value", 1, 8192, &b, err))
			return -1;
		out->auth_type = AUTH_QUERY;
		out->auth_name = strdup(a);
		out->auth_secret = strdup(b);
		return 0;
	}
	if (strcmp(type, "oauth2") == 0)
		return input_error_set(err, 422, "unsupported", "auth.type",
				       "auth.type oauth2 is not available in this build of outboxd");
	return input_error_set(err, 400, "invalid_argument", "auth.type",
			       "auth.type must be one of none, basic, bearer, api_key, query, oauth2");
}

static int parse_headers(const json_t *headers, const struct subscription *partial,
			 struct subscription *out, struct input_error *err)
{
	const char *key;
	json_t *v;
	char field[160];

	if (!json_is_object(headers))
		return input_error_set(err, 400, "invalid_argument", "headers",
				       "headers must be an object of strings");
	size_t n = json_object_size(headers);
	if (n > 64)
		return input_error_set(err, 422, "invalid_argument", "headers",
				       "at most 64 headers");
	if (out) {
		out->headers = calloc(n ? n : 1, sizeof(*out->headers));
		if (!out->headers)
			return input_error_set(err, 500, "internal", "", "out of memory");
	}
	json_object_foreach((json_t *)headers, key, v) {
		snprintf(field, sizeof(field), "headers.%s", key);
		size_t kl = strlen(key);
		if (kl == 0 || kl > 128)
			return input_error_set(err, 400, "invalid_argument", field,
					       "header names must be 1 to 128 characters");
		for (const char *p = key; *p; p++)
			if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_')
				return input_error_set(err, 400, "invalid_argument", field,
						       "%s is not a valid header name", field);
		char lower[129];
		for (size_t i = 0; i <= kl; i++)
			lower[i] = (char)tolower((unsigned char)key[i]);
		if (in_list(denied_headers, lower) || strncmp(lower, "webhook-", 8) == 0 ||
		    strncmp(lower, "outboxd-", 8) == 0 || strncmp(lower, "proxy-", 6) == 0 ||
		    (strcmp(lower, "authorization") == 0 && partial->auth_type != AUTH_NONE))
			return input_error_set(err, 422, "invalid_argument", field,
					       "header %s is set by outboxd and cannot be overridden",
					       key);
		if (!json_is_string(v) || json_string_length(v) > 4096)
			return input_error_set(err, 400, "invalid_argument", field,
					       "%s must be a string of at most 4096 characters", field);
		for (const char *p = json_string_value(v); *p; p++)
			if ((unsigned char)*p < ' ' && *p != '\t')
				return input_error_set(err, 400, "invalid_argument", field,
						       "%s must not contain control characters", field);
		if (out) {
			out->headers[out->n_headers].name = strdup(key);
			out->headers[out->n_headers].value = strdup(json_string_value(v));
			out->n_headers++;
		}
	}
	return 0;
}

static int parse_retry(const json_t *retry, struct retry_policy *p, struct input_error *err)
{
	const char *policy = NULL;
	json_t *factor;

	if (!json_is_object(retry))
		return input_error_set(err, 400, "invalid_argument", "retry",
				       "retry must be an object");
	if (check_keys(retry, retry_keys, "retry.", err) ||
	    get_int(retry, "immediate", "retry.immediate", 1, 10, &p->immediate, err) ||
	    get_duration(retry, "immediate_delay", "retry.immediate_delay", 0, 20000,
			 &p->immediate_delay_ms, err) ||
	    get_string(retry, "policy", "retry.policy", 0, 32, &policy, err) ||
	    get_duration(retry, "interval", "retry.interval", 1, 7 * 86400000LL,
			 &p->interval_ms, err) ||
	    get_duration(retry, "min_delay", "retry.min_delay", 0, 7 * 86400000LL,
			 &p->min_delay_ms, err) ||
	    get_duration(retry, "max_delay", "retry.max_delay", 1, 7 * 86400000LL,
			 &p->max_delay_ms, err) ||
	    get_int(retry, "max_retries", "retry.max_retries", 0, 1000000, &p->max_retries, err) ||
	    get_duration(retry, "timeout", "retry.timeout", 1, 300000, &p->timeout_ms, err))
		return -1;
	if (policy) {
		if (strcmp(policy, "fixed") == 0)
			p->policy = RETRY_FIXED;
		else if (strcmp(policy, "linear") == 0)
			p->policy = RETRY_LINEAR;
		else if (strcmp(policy, "exponential") == 0)
			p->policy = RETRY_EXPONENTIAL;
		else
			return input_error_set(err, 400, "invalid_argument", "retry.policy",
					       "retry.policy must be fixed, linear or exponential");
	}
	if ((factor = json_object_get(retry, "factor"))) {
		if (!json_is_number(factor) || json_number_value(factor) < 1.0 ||
		    json_number_value(factor) > 10.0)
			return input_error_set(err, 400, "invalid_argument", "retry.factor",
					       "retry.factor must be a number from 1 to 10");
		p->factor = json_number_value(factor);
	}
	if (p->min_delay_ms > p->max_delay_ms)
		return input_error_set(err, 422, "invalid_argument", "retry.min_delay",
				       "retry.min_delay must not exceed retry.max_delay");
	return 0;
}

int sub_codec_parse(const json_t *doc, const struct retry_policy *defaults,
		    struct subscription *out, struct input_error *err)
{
	struct subscription tmp;
	struct subscription *s = out ? out : &tmp;
	const char *name, *endpoint, *format = NULL, *secret = NULL, *why = "";
	json_t *types, *v;

	memset(s, 0, sizeof(*s));
	s->retry = *defaults;
	s->enabled = 1;

	if (!json_is_object(doc))
		return input_error_set(err, 400, "invalid_argument", "",
				       "the body must be a JSON object");
	if (check_keys(doc, top_keys, "", err) ||
	    get_string(doc, "name", "name", 1, 200, &name, err) ||
	    get_string(doc, "endpoint", "endpoint", 1, 2048, &endpoint, err) ||
	    get_string(doc, "payload_format", "payload_format", 0, 16, &format, err) ||
	    get_string(doc, "secret", "secret", 0, 300, &secret, err))
		goto fail;
	if (!endpoint_valid(endpoint, &why)) {
		input_error_set(err, 400, "invalid_argument", "endpoint", "%s", why);
		goto fail;
	}
	types = json_object_get(doc, "event_types");
	if (!types) {
		input_error_set(err, 400, "invalid_argument", "event_types",
				"event_types is required (an array of patterns such as \"user.*\")");
		goto fail;
	}
	if (!json_is_array(types) || json_array_size(types) == 0 || json_array_size(types) > 100) {
		input_error_set(err, 400, "invalid_argument", "event_types",
				"event_types must be an array of 1 to 100 patterns");
		goto fail;
	}
	if (out) {
		s->event_types = calloc(json_array_size(types), sizeof(char *));
		if (!s->event_types)
			goto oom;
	}
	for (size_t i = 0; i < json_array_size(types); i++) {
		json_t *t = json_array_get(types, i);
		if (!json_is_string(t) || !pattern_valid(json_string_value(t))) {
			char field[48];
			snprintf(field, sizeof(field), "event_types[%zu]", i);
			input_error_set(err, 400, "invalid_argument", field,
					"%s must be a pattern of printable characters without spaces",
					field);
			goto fail;
		}
		if (out)
			s->event_types[s->n_event_types++] = strdup(json_string_value(t));
	}
	if (format) {
		if (strcmp(format, "json") == 0) {
			s->payload_format = PAYLOAD_JSON;
		} else if (strcmp(format, "binary") == 0) {
			s->payload_format = PAYLOAD_BINARY;
		} else {
			input_error_set(err, 400, "invalid_argument", "payload_format",
					"payload_format must be json or binary");
			goto fail;
		}
	}
	if ((v = json_object_get(doc, "auth")) && !json_is_null(v) && parse_auth(v, s, err))
		goto fail;
	if ((v = json_object_get(doc, "headers")) && !json_is_null(v) &&
	    parse_headers(v, s, out, err))
		goto fail;
	if (secret && !secret_valid(secret)) {
		input_error_set(err, 400, "invalid_argument", "secret",
				"secret must be \"whsec_\" followed by base64 of at least 16 bytes");
		goto fail;
	}
	if (get_duration(doc, "timeout", "timeout", 1, 300000, &s->retry.immediate_timeout_ms,
			 err))
		goto fail;
	if ((v = json_object_get(doc, "retry")) && !json_is_null(v) &&
	    parse_retry(v, &s->retry, err))
		goto fail;
	if ((v = json_object_get(doc, "enabled"))) {
		if (!json_is_boolean(v)) {
			input_error_set(err, 400, "invalid_argument", "enabled",
					"enabled must be true or false");
			goto fail;
		}
		s->enabled = json_is_true(v);
	}
	if (!out) {
		free(s->auth_user);
		free(s->auth_secret);
		free(s->auth_name);
		return 0;
	}
	s->name = strdup(name);
	s->endpoint = strdup(endpoint);
	s->secret = dup_or_null(secret);
	if (!s->name || !s->endpoint || (secret && !s->secret))
		goto oom;
	return 0;
oom:
	input_error_set(err, 500, "internal", "", "out of memory");
fail:
	if (out) {
		/* free members but keep the struct itself, which the caller owns */
		struct subscription *heap = malloc(sizeof(*heap));
		if (heap) {
			*heap = *s;
			subscription_free(heap);
		}
		memset(s, 0, sizeof(*s));
	} else {
		free(s->auth_user);
		free(s->auth_secret);
		free(s->auth_name);
	}
	return -1;
}

struct subscription *sub_codec_from_row(const struct store_sub *row,
					const struct retry_policy *defaults)
{
	json_error_t jerr;
	struct input_error err;
	json_t *doc = json_loads(row->config, 0, &jerr);
	if (!doc) {
		log_error("subscription %s: stored configuration is not JSON: %s", row->id,
			  jerr.text);
		return NULL;
	}
	struct subscription *s = calloc(1, sizeof(*s));
	if (!s || sub_codec_parse(doc, defaults, s, &err)) {
		if (s)
			log_error("subscription %s: stored configuration is invalid: %s", row->id,
				  err.message);
		free(s);
		json_decref(doc);
		return NULL;
	}
	json_decref(doc);
	memcpy(s->id, row->id, UUID_STR_LEN);
	s->enabled = row->enabled;
	s->created_at = row->created_at;
	s->updated_at = row->updated_at;
	return s;
}

static void mask_key(json_t *obj, const char *key)
{
	if (json_is_object(obj) && json_object_get(obj, key))
		json_object_set_new(obj, key, json_string(MASK));
}

json_t *sub_codec_public(const struct store_sub *row)
{
	json_error_t jerr;
	char ts[RFC3339_LEN];
	json_t *doc = json_loads(row->config, 0, &jerr);
	if (!doc)
		doc = json_object();
	json_t *auth = json_object_get(doc, "auth");
	mask_key(auth, "password");
	mask_key(auth, "token");
	mask_key(auth, "value");
	mask_key(auth, "client_secret");
	if (json_object_get(doc, "secret"))
		json_object_set_new(doc, "secret", json_string("whsec_" MASK));
	json_object_set_new(doc, "id", json_string(row->id));
	json_object_set_new(doc, "enabled", json_boolean(row->enabled));
	json_object_set_new(doc, "created_at", json_string(clock_format_rfc3339(row->created_at, ts)));
	json_object_set_new(doc, "updated_at", json_string(clock_format_rfc3339(row->updated_at, ts)));
	return doc;
}

static json_t *merge(const json_t *target, const json_t *patch)
{
	if (!json_is_object(patch))
		return json_deep_copy(patch);
	json_t *out = json_is_object(target) ? json_deep_copy(target) : json_object();
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)patch, key, v) {
		if (json_is_null(v)) {
			json_object_del(out, key);
		} else {
			json_t *merged = merge(json_object_get(out, key), v);
			json_object_set_new(out, key, merged);
		}
	}
	return out;
}

json_t *sub_codec_merge(const json_t *stored, const json_t *patch, struct input_error *err)
{
	if (!json_is_object(patch)) {
		input_error_set(err, 400, "invalid_argument", "", "the body must be a JSON object");
		return NULL;
	}
	/* auth is replaced whole: merging a new type into old credentials would mix them */
	json_t *out = merge(stored, patch);
	json_t *auth = json_object_get(patch, "auth");
	if (auth && !json_is_null(auth))
		json_object_set(out, "auth", auth);
	return out;
}

int sub_codec_reload(struct sub_registry *reg, store *st, const struct retry_policy *defaults)
{
	struct store_sub *rows = NULL;
	size_t n = 0;
	int rc = store_sub_list(st, &rows, &n);
	if (rc)
		return rc;
	struct sub_set *set = sub_set_new();
	for (size_t i = 0; i < n; i++) {
		struct subscription *s = sub_codec_from_row(&rows[i], defaults);
		if (s && sub_set_add(set, s))
			log_error("subscriptions: out of memory loading %s", rows[i].id);
	}
	store_subs_free(rows, n);
	sub_registry_publish(reg, set);
	return STORE_OK;
}
