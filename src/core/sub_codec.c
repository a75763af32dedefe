/* sub_codec.c: subscription validation, parsing and masking (see sub_codec.h).
 *
 * A document's fields are one table, sub_fields[] below: a row names a field's kind and
 * bounds (the generic parse of the scalar kinds), its member of struct subscription, the
 * capability a sink needs to take it (core/sink_caps.h), its mask in reads, who writes it
 * and its store column; fields with an object or a rule of their own (event_types,
 * auth, headers, tls, retry, circuit_breaker, ordering_on_dead...) have a parse function
 * of their own, named in their row. No I/O. Reads with their masks, the preparation of a
 * create or PATCH and the merge patch are in sub_prepare.c. */
#include "core/sub_codec.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "core/header.h"
#include "core/pattern.h"
#include "core/payload_filter.h"
#include "core/sink_caps.h"
#include "core/whsec.h"
#include "core/retry.h"
#include "core/subscriptions.h"
#include "util/clock.h"
#include "util/duration.h"
#include "util/log.h"
#include "util/path.h"

#include "core/sub_codec_int.h"

const char *const sub_tls_keys[] = {"ca_file", "client_cert", "client_key", NULL};

/* auth fields that hold credentials: masked on every read */
const char *const sub_auth_secret_keys[] = {"password", "token", "value", "client_secret",
					       NULL};

static const char *const retry_keys[] = {
	"immediate", "immediate_delay", "policy", "interval", "min_delay", "max_delay",
	"factor", "max_retries", "timeout", "jitter", "permanent", "retry_after_max", NULL,
};

static const char *const breaker_keys[] = {
	"enabled", "max_errors", "failure_window", "max_delay_actions", NULL,
};

/* A rate above this is no limit worth the name (and keeps the bucket arithmetic sane). */
#define RATE_LIMIT_MAX 100000.0

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

int sub_string_is(const json_t *v, const char *s)
{
	return json_is_string(v) && strcmp(json_string_value(v), s) == 0;
}

/* The endpoint's scheme has a member (core/sink_caps.h) and its address that member's
 * form (strict: new input; a stored one loads under the rules it was written with).
 * 0 with why filled when not. */
static int endpoint_valid(const char *url, int strict, char *why, size_t whylen)
{
	const char *reason = "";
	const struct sink_scheme *row = sink_scheme_of(url);
	if (!row) {
		char list[128];
		sink_schemes_list(list, sizeof(list));
		snprintf(why, whylen, "endpoint must start with %s", list);
		return 0;
	}
	if (!row->address_valid(url + strlen(row->scheme) + 3, strict, &reason)) {
		snprintf(why, whylen, "%s", reason);
		return 0;
	}
	return 1;
}

/* A URL the HTTP member could request (auth.token_url): http:// or https://, in the form
 * endpoint_valid holds an HTTP endpoint to. */
static int http_url_valid(const char *url, int strict)
{
	char why[256];
	const struct sink_scheme *row = sink_scheme_of(url);
	return row && strcmp(row->member, "http") == 0 && endpoint_valid(url, strict, why, sizeof(why));
}

/* whsec_ followed by base64 of 16 to 192 bytes (Standard Webhooks; core/whsec.h). */
static int secret_valid(const char *s)
{
	unsigned char key[WHSEC_KEY_MAX];
	size_t len;
	int ok = whsec_decode(s, key, &len) == 0;
	OPENSSL_cleanse(key, sizeof(key));
	return ok;
}

/* An optional string that, when given, must not be empty. */
static int get_optional(const json_t *obj, const char *key, const char *field, size_t max,
			const char **out, struct input_error *err)
{
	if (get_string(obj, key, field, 0, max, out, err))
		return -1;
	if (*out && !**out)
		return input_error_set(err, 400, "invalid_argument", field,
				       "%s must not be empty", field);
	return 0;
}

/* Every credential and header value goes into a header line (or, for a query credential,
 * a URL): none may hold a control character that could end the line early. values[] and
 * fields[] pair up, n of them; NULL values are skipped. Only new input (strict) is held
 * to it: a stored document from before the rule still loads (a subscription that fails
 * to load would stop ingest for all), and the HTTP sink refuses to send such a line. */
static int check_header_texts(int strict, const char *const *fields, const char *const *values,
			      size_t n, struct input_error *err)
{
	for (size_t i = 0; strict && i < n; i++)
		if (values[i] && !header_value_valid(values[i], strlen(values[i])))
			return input_error_set(err, 400, "invalid_argument", fields[i],
					       "%s " HEADER_VALUE_RULE, fields[i]);
	return 0;
}

static int parse_oauth2(const json_t *auth, int strict, struct subscription *out,
			struct input_error *err)
{
	static const char *const keys[] = {
		"type", "grant_type", "token_url", "client_id", "client_secret", "scope",
		"audience", "username", "password", "client_auth", NULL,
	};
	const char *grant, *url, *id, *secret, *scope, *audience, *user, *pass, *client_auth;
	struct oauth2_params *p = &out->oauth2;

	if (check_keys(auth, keys, "auth.", err) ||
	    get_optional(auth, "grant_type", "auth.grant_type", 32, &grant, err) ||
	    get_string(auth, "token_url", "auth.token_url", 1, 2048, &url, err) ||
	    get_string(auth, "client_id", "auth.client_id", 1, 256, &id, err) ||
	    get_optional(auth, "client_secret", "auth.client_secret", 1024, &secret, err) ||
	    get_optional(auth, "scope", "auth.scope", 1024, &scope, err) ||
	    get_optional(auth, "audience", "auth.audience", 1024, &audience, err) ||
	    get_optional(auth, "username", "auth.username", 256, &user, err) ||
	    get_optional(auth, "password", "auth.password", 1024, &pass, err) ||
	    get_optional(auth, "client_auth", "auth.client_auth", 16, &client_auth, err))
		return -1;
	static const char *const fields[] = {"auth.client_id", "auth.client_secret",
					     "auth.scope",     "auth.audience",
					     "auth.username",  "auth.password"};
	const char *const values[] = {id, secret, scope, audience, user, pass};
	if (check_header_texts(strict, fields, values, 6, err))
		return -1;
	if (!http_url_valid(url, strict))
		return input_error_set(err, 400, "invalid_argument", "auth.token_url",
				       "auth.token_url must be an http:// or https:// URL without "
				       "user info");
	if (!grant || strcmp(grant, "client_credentials") == 0) {
		p->grant = OAUTH2_CLIENT_CREDENTIALS;
		if (!secret)
			return input_error_set(err, 400, "invalid_argument", "auth.client_secret",
					       "auth.client_secret is required with grant_type "
					       "client_credentials");
		if (user || pass)
			return input_error_set(err, 400, "invalid_argument",
					       user ? "auth.username" : "auth.password",
					       "auth.%s is only used with grant_type password",
					       user ? "username" : "password");
	} else if (strcmp(grant, "password") == 0) {
		p->grant = OAUTH2_PASSWORD;
		if (!user || !pass)
			return input_error_set(err, 400, "invalid_argument",
					       user ? "auth.password" : "auth.username",
					       "auth.%s is required with grant_type password",
					       user ? "password" : "username");
	} else {
		return input_error_set(err, 400, "invalid_argument", "auth.grant_type",
				       "auth.grant_type must be client_credentials or password");
	}
	if (!client_auth || strcmp(client_auth, "basic") == 0)
		p->client_auth = OAUTH2_AUTH_BASIC;
	else if (strcmp(client_auth, "body") == 0)
		p->client_auth = OAUTH2_AUTH_BODY;
	else
		return input_error_set(err, 400, "invalid_argument", "auth.client_auth",
				       "auth.client_auth must be basic or body");
	out->auth_type = AUTH_OAUTH2;
	p->token_url = strdup(url);
	p->client_id = strdup(id);
	p->client_secret = dup_or_null(secret);
	p->scope = dup_or_null(scope);
	p->audience = dup_or_null(audience);
	p->username = dup_or_null(user);
	p->password = dup_or_null(pass);
	if (!p->token_url || !p->client_id || (secret && !p->client_secret) ||
	    (scope && !p->scope) || (audience && !p->audience) || (user && !p->username) ||
	    (pass && !p->password))
		return input_error_set(err, 500, "internal", "", "out of memory");
	return 0;
}

static int parse_tls(const json_t *tls, struct subscription *s, struct input_error *err)
{
	const char *ca, *cert, *key;
	char field[32];

	if (!json_is_object(tls))
		return input_error_set(err, 400, "invalid_argument", "tls",
				       "tls must be an object with ca_file, client_cert, client_key");
	if (check_keys(tls, sub_tls_keys, "tls.", err) ||
	    get_optional(tls, "ca_file", "tls.ca_file", 4096, &ca, err) ||
	    get_optional(tls, "client_cert", "tls.client_cert", 4096, &cert, err) ||
	    get_optional(tls, "client_key", "tls.client_key", 4096, &key, err))
		return -1;
	const char *paths[] = {ca, cert, key};
	for (int i = 0; i < 3; i++) {
		snprintf(field, sizeof(field), "tls.%s", sub_tls_keys[i]);
		if (paths[i] && paths[i][0] != '/')
			return input_error_set(err, 400, "invalid_argument", field,
					       "%s must be an absolute file path", field);
	}
	if (key && !cert)
		return input_error_set(err, 400, "invalid_argument", "tls.client_key",
				       "tls.client_key needs tls.client_cert");
	s->tls_ca_file = dup_or_null(ca);
	s->tls_client_cert = dup_or_null(cert);
	s->tls_client_key = dup_or_null(key);
	if ((ca && !s->tls_ca_file) || (cert && !s->tls_client_cert) || (key && !s->tls_client_key))
		return input_error_set(err, 500, "internal", "", "out of memory");
	return 0;
}

static int parse_auth(const json_t *auth, int strict, struct subscription *out,
		      struct input_error *err)
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
		static const char *const fields[] = {"auth.username", "auth.password"};
		const char *const values[] = {a, b};
		if (check_header_texts(strict, fields, values, 2, err))
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
		    get_string(auth, "token", "auth.token", 1, 8192, &b, err) ||
		    check_header_texts(strict, (const char *const[]){"auth.token"}, &b, 1, err))
			return -1;
		out->auth_type = AUTH_BEARER;
		out->auth_secret = strdup(b);
		return 0;
	}
	if (strcmp(type, "api_key") == 0) {
		if (check_keys(auth, keys_api_key, "auth.", err) ||
		    get_string(auth, "header", "auth.header", 1, 128, &a, err) ||
		    get_string(auth, "value", "auth.value", 1, 8192, &b, err) ||
		    check_header_texts(strict, (const char *const[]){"auth.value"}, &b, 1, err))
			return -1;
		if (!header_name_valid(a))
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
		    get_string(auth, "value", "auth.value", 1, 8192, &b, err) ||
		    check_header_texts(strict, (const char *const[]){"auth.value"}, &b, 1, err))
			return -1;
		out->auth_type = AUTH_QUERY;
		out->auth_name = strdup(a);
		out->auth_secret = strdup(b);
		return 0;
	}
	if (strcmp(type, "oauth2") == 0)
		return parse_oauth2(auth, strict, out, err);
	return input_error_set(err, 400, "invalid_argument", "auth.type",
			       "auth.type must be one of none, basic, bearer, api_key, query, oauth2");
}

/* Is the header name "Authorization" (any case)? Its value is a credential however it
 * is written, so it is handled as a secret header even as a plain string. */
static int name_is_authorization(const char *name)
{
	return strcasecmp(name, "authorization") == 0;
}

/* A headers entry: "value", or {"value": "...", "secret": true|false}. Sets *value
 * (borrowed) and *secret; -1 with err filled when v is neither. */
static int header_entry(const char *name, const json_t *v, const char *field, int strict,
			const char **value, int *secret, struct input_error *err)
{
	json_t *sv = NULL;
	*secret = name_is_authorization(name);
	if (json_is_object(v)) {
		static const char *const keys[] = {"value", "secret", NULL};
		char prefix[176];
		snprintf(prefix, sizeof(prefix), "%s.", field);
		if (check_keys(v, keys, prefix, err))
			return -1;
		sv = json_object_get(v, "secret");
		if (sv && !json_is_boolean(sv))
			return input_error_set(err, 400, "invalid_argument", field,
					       "%s.secret must be true or false", field);
		*secret |= json_is_true(sv);
		v = json_object_get(v, "value");
	}
	if (!json_is_string(v) || json_string_length(v) > 4096 ||
	    strlen(json_string_value(v)) != json_string_length(v))
		return input_error_set(err, 400, "invalid_argument", field,
				       "%s must be a string of at most 4096 characters, or "
				       "{\"value\": \"...\", \"secret\": true}", field);
	*value = json_string_value(v);
	if (strict && !header_value_valid(*value, json_string_length(v)))
		return input_error_set(err, 400, "invalid_argument", field,
				       "%s " HEADER_VALUE_RULE, field);
	return 0;
}

/* Whether the headers entry v of name is a secret one (masked in reads). */
int sub_header_is_secret(const char *name, const json_t *v)
{
	return name_is_authorization(name) ||
	       (json_is_object(v) && json_is_true(json_object_get(v, "secret")));
}

/* Whether a headers entry is the masked value a read shows: "********" or
 * {"value": "********", ...}. */
int sub_header_masked(const json_t *v)
{
	return sub_string_is(v, MASK) || (json_is_object(v) && sub_string_is(json_object_get(v, "value"), MASK));
}

static int parse_headers(const json_t *headers, int strict, const struct subscription *partial,
			 struct subscription *out, struct input_error *err)
{
	const char *key, *value = NULL;
	json_t *v;
	char field[160];
	int secret;

	if (!json_is_object(headers))
		return input_error_set(err, 400, "invalid_argument", "headers",
				       "headers must be an object of header names and values");
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
		if (kl == 0 || kl > HEADER_NAME_MAX)
			return input_error_set(err, 400, "invalid_argument", field,
					       "header names must be 1 to %d characters",
					       HEADER_NAME_MAX);
		if (!header_name_valid(key))
			return input_error_set(err, 400, "invalid_argument", field,
					       "%s is not a valid header name (letters, digits, "
					       "'-', '_')", field);
		char lower[HEADER_NAME_MAX + 1];
		for (size_t i = 0; i <= kl; i++)
			lower[i] = (char)tolower((unsigned char)key[i]);
		if (in_list(denied_headers, lower) || strncmp(lower, "webhook-", 8) == 0 ||
		    strncmp(lower, "outboxd-", 8) == 0 || strncmp(lower, "proxy-", 6) == 0 ||
		    (strcmp(lower, "authorization") == 0 && partial->auth_type != AUTH_NONE))
			return input_error_set(err, 422, "invalid_argument", field,
					       "header %s is set by outboxd and cannot be overridden",
					       key);
		if (header_entry(key, v, field, strict, &value, &secret, err))
			return -1;
		if (out) {
			struct header_kv *h = &out->headers[out->n_headers];
			h->name = strdup(key);
			h->value = strdup(value);
			h->secret = secret;
			out->n_headers++;
			if (!h->name || !h->value)
				return input_error_set(err, 500, "internal", "", "out of memory");
		}
	}
	return 0;
}

static int parse_retry(const json_t *retry, struct retry_policy *p, struct input_error *err)
{
	const char *policy = NULL;
	json_t *factor, *v;

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
	if (policy && retry_policy_kind_parse(policy, &p->policy))
		return input_error_set(err, 400, "invalid_argument", "retry.policy",
				       "retry.policy must be fixed, linear or exponential");
	if (json_object_get(retry, "max_retries"))
		p->max_retries_auto = 0;
	retry_policy_settle(p);
	if ((factor = json_object_get(retry, "factor"))) {
		if (!json_is_number(factor))
			return input_error_set(err, 400, "invalid_argument", "retry.factor",
					       "retry.factor must be a number from 1 to 10");
		p->factor = json_number_value(factor);
	}
	if ((v = json_object_get(retry, "jitter"))) {
		if (!json_is_number(v))
			return input_error_set(err, 400, "invalid_argument", "retry.jitter",
					       "retry.jitter must be a number from 0 to 1");
		p->jitter = json_number_value(v);
	}
	if (get_duration(retry, "retry_after_max", "retry.retry_after_max", 0, 7 * 86400000LL,
			 &p->retry_after_max_ms, err))
		return -1;
	if ((v = json_object_get(retry, "permanent"))) {
		size_t i;
		json_t *code;
		if (!json_is_array(v) || json_array_size(v) > 200)
			return input_error_set(err, 400, "invalid_argument", "retry.permanent",
					       "retry.permanent must be an array of HTTP status codes "
					       "from 400 to 599");
		memset(p->permanent, 0, sizeof(p->permanent)); /* replaces the defaults' list */
		json_array_foreach(v, i, code) {
			json_int_t c = json_is_integer(code) ? json_integer_value(code) : 0;
			if (c < 400 || c > 599 || retry_permanent_add(p, (int)c)) {
				char field[48];
				snprintf(field, sizeof(field), "retry.permanent[%zu]", i);
				return input_error_set(err, 422, "invalid_argument", field,
						       "%s must be an HTTP status code from 400 to 599",
						       field);
			}
		}
	}
	char field[32], msg[96];
	enum retry_rule rule = retry_policy_check(p, "retry.", field, sizeof(field), msg, sizeof(msg));
	if (rule != RETRY_RULE_KEPT)
		return input_error_set(err, rule == RETRY_RULE_ORDER ? 422 : 400, "invalid_argument",
				       field, "%s", msg);
	return 0;
}

static int parse_breaker(const json_t *cb, struct circuit_breaker_config *c,
			 struct input_error *err)
{
	json_t *v;

	if (!json_is_object(cb))
		return input_error_set(err, 400, "invalid_argument", "circuit_breaker",
				       "circuit_breaker must be an object");
	if (check_keys(cb, breaker_keys, "circuit_breaker.", err) ||
	    get_int(cb, "max_errors", "circuit_breaker.max_errors", 1, 100000000, &c->max_errors,
		    err) ||
	    get_duration(cb, "failure_window", "circuit_breaker.failure_window", 100,
			 7 * 86400000LL, &c->failure_window_ms, err) ||
	    get_int(cb, "max_delay_actions", "circuit_breaker.max_delay_actions", 0, 1000,
		    &c->max_delay_actions, err))
		return -1;
	if ((v = json_object_get(cb, "enabled"))) {
		if (!json_is_boolean(v))
			return input_error_set(err, 400, "invalid_argument", "circuit_breaker.enabled",
					       "circuit_breaker.enabled must be true or false");
		c->enabled = json_is_true(v);
	}
	return 0;
}

/* ---- the rows' own parsers ----------------------------------------------------------- */

/* Each takes the document, its field's value v (NULL when absent; null counts as absent
 * for a row flagged SF_NULLABLE), strict (new input) and the subscription being filled,
 * whose members it owns. For a row of another kind, it checks what the row's kind did not
 * (v present then). */

static int check_endpoint(const json_t *doc, const json_t *v, int strict,
			  struct subscription *s, struct input_error *err)
{
	char why[256];
	if (!endpoint_valid(s->endpoint, strict, why, sizeof(why)))
		return input_error_set(err, 400, "invalid_argument", "endpoint", "%s", why);
	return 0;
}

static int check_origin(const json_t *doc, const json_t *v, int strict,
			struct subscription *s, struct input_error *err)
{
	if (strcmp(s->origin, "kafka_envelope") != 0)
		return input_error_set(err, 400, "invalid_argument", "origin",
				       "origin must be kafka_envelope (it is set by outboxd)");
	return 0;
}

static int parse_event_types(const json_t *doc, const json_t *types, int strict,
			     struct subscription *s, struct input_error *err)
{
	if (!types)
		return input_error_set(err, 400, "invalid_argument", "event_types",
				       "event_types is required (an array of patterns such as "
				       "\"user.*\")");
	/* an envelope's subscription matches no event type: fan-out never picks it */
	if (!json_is_array(types) || (json_array_size(types) == 0 && !s->origin) ||
	    json_array_size(types) > 100)
		return input_error_set(err, 400, "invalid_argument", "event_types",
				       "event_types must be an array of 1 to 100 patterns");
	if (!(s->event_types = calloc(json_array_size(types) + 1, sizeof(char *))))
		return input_error_set(err, 500, "internal", "", "out of memory");
	for (size_t i = 0; i < json_array_size(types); i++) {
		json_t *t = json_array_get(types, i);
		if (!json_is_string(t) || !pattern_valid(json_string_value(t))) {
			char field[48];
			snprintf(field, sizeof(field), "event_types[%zu]", i);
			return input_error_set(err, 400, "invalid_argument", field,
					       "%s must be a pattern of printable characters "
					       "without spaces", field);
		}
		if (!(s->event_types[s->n_event_types] = strdup(json_string_value(t))))
			return input_error_set(err, 500, "internal", "", "out of memory");
		s->n_event_types++;
	}
	return 0;
}

static int parse_filter_row(const json_t *doc, const json_t *v, int strict,
			     struct subscription *s, struct input_error *err)
{
	return v && !json_is_null(v) ? payload_filter_parse(v, &s->filter, err) : 0;
}

static int parse_auth_row(const json_t *doc, const json_t *v, int strict,
			  struct subscription *s, struct input_error *err)
{
	return v ? parse_auth(v, strict, s, err) : 0;
}

static int parse_headers_row(const json_t *doc, const json_t *v, int strict,
			     struct subscription *s, struct input_error *err)
{
	return v ? parse_headers(v, strict, s, s, err) : 0;
}

static int check_secret(const json_t *doc, const json_t *v, int strict,
			struct subscription *s, struct input_error *err)
{
	if (!secret_valid(s->secret))
		return input_error_set(err, 400, "invalid_argument", "secret",
				       "secret must be \"whsec_\" followed by base64 of at least "
				       "16 bytes, or \"generate\"");
	return 0;
}

static int check_previous_secret(const json_t *doc, const json_t *v, int strict,
				 struct subscription *s, struct input_error *err)
{
	if (!secret_valid(s->previous_secret))
		return input_error_set(err, 400, "invalid_argument", "previous_secret",
				       "previous_secret must be a whsec_ secret");
	return 0;
}

/* Until when the previous secret signs too: required with previous_secret. */
static int parse_previous_until(const json_t *doc, const json_t *v, int strict,
				struct subscription *s, struct input_error *err)
{
	const char *until;
	if (get_string(doc, "previous_secret_expires_at", "previous_secret_expires_at", 0, 64,
		       &until, err))
		return -1;
	if (s->previous_secret &&
	    (!until || clock_parse_rfc3339(until, &s->previous_secret_until)))
		return input_error_set(err, 400, "invalid_argument", "previous_secret_expires_at",
				       "previous_secret_expires_at must be an RFC 3339 time");
	return 0;
}

static int parse_tls_row(const json_t *doc, const json_t *v, int strict,
			 struct subscription *s, struct input_error *err)
{
	return v ? parse_tls(v, s, err) : 0;
}

static int parse_retry_row(const json_t *doc, const json_t *v, int strict,
			   struct subscription *s, struct input_error *err)
{
	return v ? parse_retry(v, &s->retry, err) : 0;
}

static int parse_breaker_row(const json_t *doc, const json_t *v, int strict,
			     struct subscription *s, struct input_error *err)
{
	return v ? parse_breaker(v, &s->breaker, err) : 0;
}

/* ordering_on_dead: with ordering partition_key (its row, before this one), a dead
 * delivery blocks its key's later ones ("block", the default) or is passed over ("skip"). */
static int parse_ordering_on_dead(const json_t *doc, const json_t *v, int strict,
				  struct subscription *s, struct input_error *err)
{
	const char *on_dead;
	if (get_string(doc, "ordering_on_dead", "ordering_on_dead", 0, 32, &on_dead, err))
		return -1;
	if (on_dead && strcmp(on_dead, "block") != 0 && strcmp(on_dead, "skip") != 0)
		return input_error_set(err, 400, "invalid_argument", "ordering_on_dead",
				       "ordering_on_dead must be block or skip");
	if (s->ordering == ORDERING_KEY_BLOCK && on_dead && strcmp(on_dead, "skip") == 0)
		s->ordering = ORDERING_KEY_SKIP;
	return 0;
}

/* The capability an option's value v needs of the endpoint's member (core/sink_caps.h),
 * given the row's own (cap); 0 when this value needs none. */
static unsigned cap_of_auth(const json_t *v, unsigned cap)
{
	static const char *const types[] = {"basic", "bearer", "api_key", "query", "oauth2", NULL};
	static const enum auth_type enums[] = {AUTH_BASIC, AUTH_BEARER, AUTH_API_KEY, AUTH_QUERY,
					       AUTH_OAUTH2};
	const char *type = json_string_value(json_object_get(v, "type"));
	(void)cap;
	for (int i = 0; type && types[i]; i++)
		if (strcmp(type, types[i]) == 0)
			return sink_cap_of_auth(enums[i]);
	return 0; /* none, or a type parse_auth refuses */
}
static unsigned cap_if_nonempty(const json_t *v, unsigned cap)
{
	return json_is_object(v) && json_object_size(v) == 0 ? 0 : cap;
}
static unsigned cap_if_not_none(const json_t *v, unsigned cap)
{
	return sub_string_is(v, "none") ? 0 : cap;
}
static unsigned cap_if_envelope(const json_t *v, unsigned cap)
{
	return sub_string_is(v, "envelope") ? cap : 0;
}

/* ---- the table ----------------------------------------------------------------------- */

/* 1-based, so that a row that names none (0) is no member and no column */
#define MEMBER(m) (offsetof(struct subscription, m) + 1)
_Static_assert(sizeof(enum payload_format) == sizeof(int) &&
	       sizeof(enum delivery_ordering) == sizeof(int), "SF_ENUM members are ints");
#define COLUMN(c) (offsetof(struct sub_row, c) + 1)

/* In the order a document is checked (the first error is the one reported): endpoint
 * before every row with a capability, origin before event_types, ordering before
 * ordering_on_dead, previous_secret before its expiry (tests/unit/core/test_sub_fields.c
 * checks the order). */
const struct sub_field sub_fields[] = {
	{.key = "name", .kind = SF_STRING, .flags = SF_REQUIRED, .max = 200,
	 .member = MEMBER(name), .column = COLUMN(name)},
	{.key = "endpoint", .kind = SF_STRING, .flags = SF_REQUIRED, .max = 2048,
	 .member = MEMBER(endpoint), .parse = check_endpoint},
	{.key = "origin", .kind = SF_STRING, .writer = SF_BY_DERIVATION, .max = 32,
	 .member = MEMBER(origin), .parse = check_origin},
	{.key = "event_types", .kind = SF_PARSED, .flags = SF_REQUIRED, .parse = parse_event_types},
	{.key = "filter", .kind = SF_PARSED, .flags = SF_NULLABLE, .parse = parse_filter_row},
	{.key = "payload_format", .kind = SF_ENUM, .member = MEMBER(payload_format),
	 .values = (const char *const[]){"json", "binary", "envelope", NULL},
	 .what = "envelope for kafka:// endpoints", .cap = SINK_CAN_ENVELOPE,
	 .cap_of = cap_if_envelope},
	{.key = "auth", .kind = SF_PARSED, .flags = SF_NULLABLE, .parse = parse_auth_row,
	 .cap = SINK_CAN_AUTH_ANY, .cap_of = cap_of_auth},
	{.key = "headers", .kind = SF_PARSED, .flags = SF_NULLABLE, .parse = parse_headers_row,
	 .cap = SINK_CAN_HEADERS, .cap_of = cap_if_nonempty},
	{.key = "secret", .kind = SF_STRING, .max = 300, .member = MEMBER(secret),
	 .parse = check_secret, .cap = SINK_CAN_SIGN, .mask = SECRET_MASK},
	{.key = "secret_grace", .kind = SF_DURATION, .min = 0, .max = SECRET_GRACE_MAX_MS,
	 .cap = SINK_CAN_SIGN},
	{.key = "previous_secret", .kind = SF_STRING, .writer = SF_BY_ROTATION, .max = 300,
	 .member = MEMBER(previous_secret), .parse = check_previous_secret, .mask = SECRET_MASK},
	{.key = "previous_secret_expires_at", .kind = SF_PARSED, .writer = SF_BY_ROTATION,
	 .parse = parse_previous_until},
	{.key = "tls", .kind = SF_PARSED, .flags = SF_NULLABLE, .parse = parse_tls_row,
	 .cap = SINK_CAN_TLS, .cap_of = cap_if_nonempty},
	{.key = "timeout", .kind = SF_DURATION, .min = 1, .max = 300000,
	 .member = MEMBER(retry.immediate_timeout_ms), .cap = SINK_CAN_TIMEOUT},
	{.key = "retry.timeout", .kind = SF_INSIDE, .cap = SINK_CAN_TIMEOUT},
	{.key = "retry", .kind = SF_PARSED, .flags = SF_NULLABLE, .parse = parse_retry_row},
	{.key = "circuit_breaker", .kind = SF_PARSED, .flags = SF_NULLABLE,
	 .parse = parse_breaker_row},
	/* absent or null: no limit */
	{.key = "max_in_flight", .kind = SF_INT, .flags = SF_NULLABLE, .min = 1, .max = 100000,
	 .member = MEMBER(max_in_flight)},
	/* absent or null: the endpoint's adaptive limit */
	{.key = "concurrency", .kind = SF_INT, .flags = SF_NULLABLE, .min = 1, .max = 100000,
	 .member = MEMBER(concurrency)},
	/* absent or null: no limit; above RATE_LIMIT_MAX is no limit worth the name (and the
	 * bucket arithmetic stays sane) */
	{.key = "rate_limit", .kind = SF_NUMBER, .flags = SF_NULLABLE,
	 .max = (int64_t)RATE_LIMIT_MAX, .what = "a number of requests per second",
	 .member = MEMBER(rate_limit)},
	/* "partition_key": ORDERING_KEY_BLOCK, made ORDERING_KEY_SKIP by ordering_on_dead */
	{.key = "ordering", .kind = SF_ENUM, .member = MEMBER(ordering),
	 .values = (const char *const[]){"none", "partition_key", NULL},
	 .column = COLUMN(ordering), .cap = SINK_CAN_ORDERING, .cap_of = cap_if_not_none},
	{.key = "ordering_on_dead", .kind = SF_PARSED, .parse = parse_ordering_on_dead,
	 .cap = SINK_CAN_ORDERING},
	/* "0s": never; absent: the setting disable_after (-1) */
	{.key = "disable_after", .kind = SF_DURATION, .min = 0, .max = DISABLE_AFTER_MAX_MS,
	 .member = MEMBER(disable_after_ms)},
	{.key = "disabled_reason", .kind = SF_STRING, .writer = SF_BY_DISABLING, .max = 512,
	 .member = MEMBER(disabled_reason)},
	{.key = "disabled_at", .kind = SF_STRING, .writer = SF_BY_DISABLING, .max = 64},
	{.key = "enabled", .kind = SF_BOOL, .member = MEMBER(enabled), .column = COLUMN(enabled)},
};
const size_t sub_fields_n = sizeof(sub_fields) / sizeof(sub_fields[0]);

const struct sub_field *sub_field_named(const char *key)
{
	for (size_t i = 0; key && i < sub_fields_n; i++)
		if (strcmp(sub_fields[i].key, key) == 0)
			return &sub_fields[i];
	return NULL;
}

/* A top-level field (not one inside an object another row parses). */
static int field_top_level(const struct sub_field *f)
{
	return f->kind != SF_INSIDE;
}

static int check_top_keys(const json_t *doc, struct input_error *err)
{
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)doc, key, v) {
		const struct sub_field *f = sub_field_named(key);
		if (!f || !field_top_level(f))
			return input_error_set(err, 400, "invalid_argument", key,
					       "unknown field \"%s\"", key);
	}
	return 0;
}

/* The value of f in doc: for an SF_INSIDE row ("retry.timeout"), inside its object. NULL
 * when absent (or null). */
static const json_t *field_value(const json_t *doc, const struct sub_field *f)
{
	const char *dot = strchr(f->key, '.');
	const json_t *in = doc;
	const json_t *v;
	if (dot) {
		char parent[64];
		snprintf(parent, sizeof(parent), "%.*s", (int)(dot - f->key), f->key);
		in = json_object_get(doc, parent);
		if (!json_is_object(in))
			return NULL;
		v = json_object_get(in, dot + 1);
	} else {
		v = json_object_get(in, f->key);
	}
	return v && json_is_null(v) ? NULL : v;
}

/* 0 when row's member (core/sink_caps.h) supports what v of f needs; else a 422 naming
 * the field ("auth: kafka:// endpoints take no auth; ..."). */
static int field_supported(const struct sub_field *f, const json_t *v,
			   const struct sink_scheme *row, struct input_error *err)
{
	char why[256];
	unsigned need = f->cap_of ? f->cap_of(v, f->cap) : f->cap;
	if (!row || !need || (row->supports & need) == need)
		return 0;
	sink_caps_refusal(row, need, why, sizeof(why));
	return input_error_set(err, 422, "invalid_argument", f->key, "%s: %s", f->key, why);
}

/* Parses f's value v (present, not null) into s by f's kind. */
static int field_parse_scalar(const struct sub_field *f, const json_t *doc, const json_t *v,
			      struct subscription *s, struct input_error *err)
{
	char *at = f->member ? (char *)s + f->member - 1 : NULL;
	switch (f->kind) {
	case SF_STRING: {
		const char *str;
		if (get_string(doc, f->key, f->key, (f->flags & SF_REQUIRED) != 0, (size_t)f->max,
			       &str, err))
			return -1;
		if (at && str && !(*(char **)at = strdup(str)))
			return input_error_set(err, 500, "internal", "", "out of memory");
		return 0;
	}
	case SF_DURATION: {
		int64_t ms = 0;
		if (get_duration(doc, f->key, f->key, f->min, f->max, &ms, err))
			return -1;
		if (at)
			*(int64_t *)at = ms;
		return 0;
	}
	case SF_INT: {
		int x = 0;
		if (get_int(doc, f->key, f->key, f->min, f->max, &x, err))
			return -1;
		if (at)
			*(int *)at = x;
		return 0;
	}
	case SF_NUMBER:
		if (!json_is_number(v) || !(json_number_value(v) > 0.0) ||
		    json_number_value(v) > (double)f->max)
			return input_error_set(err, 400, "invalid_argument", f->key,
					       "%s must be %s, above 0 and at most %lld", f->key,
					       f->what, (long long)f->max);
		if (at)
			*(double *)at = json_number_value(v);
		return 0;
	case SF_BOOL:
		if (!json_is_boolean(v))
			return input_error_set(err, 400, "invalid_argument", f->key,
					       "%s must be true or false", f->key);
		if (at)
			*(int *)at = json_is_true(v);
		return 0;
	case SF_ENUM: {
		const char *str;
		if (get_string(doc, f->key, f->key, 0, 32, &str, err))
			return -1;
		for (int k = 0; str && f->values[k]; k++) {
			if (strcmp(str, f->values[k]) == 0) {
				*(int *)at = k;
				return 0;
			}
		}
		char list[128] = "";
		for (int k = 0; f->values[k]; k++)
			snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
				 k == 0 ? "" : f->values[k + 1] ? ", " : " or ", f->values[k]);
		return input_error_set(err, 400, "invalid_argument", f->key, "%s must be %s%s%s%s",
				       f->key, list, f->what ? " (" : "", f->what ? f->what : "",
				       f->what ? ")" : "");
	}
	case SF_PARSED:
	case SF_INSIDE:
		break;
	}
	return 0;
}

/* sub_codec_parse, with strict 0 for a stored document: the rules on new input only
 * (control characters, user info, what the endpoint's member takes) are skipped. */
static int parse_doc(const json_t *doc, const struct retry_policy *defaults, int strict,
		     struct subscription *out, struct input_error *err)
{
	struct subscription tmp;
	struct subscription *s = out ? out : &tmp;
	const struct sink_scheme *scheme = NULL;

	memset(s, 0, sizeof(*s));
	s->retry = *defaults;
	circuit_breaker_defaults(&s->breaker);
	s->enabled = 1;
	s->disable_after_ms = -1;

	if (!json_is_object(doc))
		return input_error_set(err, 400, "invalid_argument", "",
				       "the body must be a JSON object");
	if (check_top_keys(doc, err))
		goto fail;
	for (size_t i = 0; i < sub_fields_n; i++) {
		const struct sub_field *f = &sub_fields[i];
		const json_t *v = f->kind == SF_INSIDE ? field_value(doc, f)
						       : json_object_get(doc, f->key);
		if (v && json_is_null(v) && (f->flags & SF_NULLABLE))
			v = NULL; /* null is absent (a PATCH's null removed it) */
		/* an option the endpoint's member would ignore is refused, not stored; a stored
		 * document loads under the rules it was written with */
		if (strict && v && !json_is_null(v) && field_supported(f, v, scheme, err))
			goto fail;
		if (f->kind == SF_PARSED) {
			if (f->parse(doc, v, strict, s, err))
				goto fail;
			continue;
		}
		if (f->kind == SF_INSIDE || !(v || (f->flags & SF_REQUIRED)))
			continue;
		if (field_parse_scalar(f, doc, v, s, err))
			goto fail;
		if (f->parse && v && !json_is_null(v) && f->parse(doc, v, strict, s, err))
			goto fail;
		if (strcmp(f->key, "endpoint") == 0)
			scheme = sink_scheme_of(s->endpoint);
	}
	if (!out)
		subscription_clear(s);
	return 0;
fail:
	/* free members but keep the struct itself, which the caller owns */
	subscription_clear(s);
	return -1;
}

void sub_codec_columns(const struct subscription *s, struct sub_row *row)
{
	for (size_t i = 0; i < sub_fields_n; i++) {
		const struct sub_field *f = &sub_fields[i];
		if (!f->column)
			continue;
		const char *from = (const char *)s + f->member - 1;
		char *to = (char *)row + f->column - 1;
		if (f->kind == SF_STRING)
			*(char **)to = *(char *const *)from; /* borrowed */
		else
			*(int *)to = *(const int *)from; /* a flag or an enum */
	}
}

int sub_codec_parse(const json_t *doc, const struct retry_policy *defaults,
		    struct subscription *out, struct input_error *err)
{
	return parse_doc(doc, defaults, 1, out, err);
}

struct subscription *sub_codec_from_row(const struct sub_row *row,
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
	if (!s || parse_doc(doc, defaults, 0, s, &err)) {
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

