/* sub_prepare.c: the subscription document around its parse (see sub_codec.h): reads with
 * every credential masked (sub_codec_public), what a create or PATCH does before it is
 * parsed (sub_codec_prepare: generated secrets, credentials sent back masked kept, but
 * not for a moved endpoint or token_url) and the JSON merge patch (sub_codec_merge). The
 * field table and the parse are in sub_codec.c. */
#include "core/sub_codec.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/header.h"
#include "core/pattern.h"
#include "core/sink_caps.h"
#include "core/whsec.h"
#include "core/retry.h"
#include "core/subscriptions.h"
#include "util/clock.h"
#include "util/duration.h"
#include "util/log.h"
#include "util/path.h"

#include "core/sub_codec_int.h"

static void mask_key(json_t *obj, const char *key)
{
	if (json_is_object(obj) && json_object_get(obj, key))
		json_object_set_new(obj, key, json_string(MASK));
}

/* Is the rotation's previous secret in doc over (or unreadable)? */
static int previous_expired(const json_t *doc, int64_t now_ms)
{
	int64_t until;
	json_t *v = json_object_get(doc, "previous_secret_expires_at");
	return !json_is_string(v) || clock_parse_rfc3339(json_string_value(v), &until) ||
	       until <= now_ms;
}

json_t *sub_codec_public(const struct sub_row *row)
{
	json_error_t jerr;
	char ts[RFC3339_LEN];
	json_t *doc = json_loads(row->config, 0, &jerr);
	if (!doc)
		doc = json_object();
	json_t *auth = json_object_get(doc, "auth");
	for (const char *const *k = sub_auth_secret_keys; *k; k++)
		mask_key(auth, *k);
	const char *name;
	json_t *hv, *headers = json_object_get(doc, "headers");
	json_object_foreach(headers, name, hv) {
		/* replacing the value of the current key leaves the iteration alone */
		if (!sub_header_is_secret(name, hv))
			continue;
		if (json_is_object(hv))
			json_object_set_new(hv, "value", json_string(MASK));
		else
			json_object_set_new(headers, name, json_string(MASK));
	}
	for (size_t i = 0; i < sub_fields_n; i++)
		if (sub_fields[i].mask && json_object_get(doc, sub_fields[i].key))
			json_object_set_new(doc, sub_fields[i].key, json_string(sub_fields[i].mask));
	/* a rotated-out secret shows only while it still signs */
	if (json_object_get(doc, "previous_secret") && previous_expired(doc, clock_now_ms())) {
		json_object_del(doc, "previous_secret");
		json_object_del(doc, "previous_secret_expires_at");
	}
	json_object_set_new(doc, "id", json_string(row->id));
	json_object_set_new(doc, "enabled", json_boolean(row->enabled));
	json_object_set_new(doc, "created_at", json_string(clock_format_rfc3339(row->created_at, ts)));
	json_object_set_new(doc, "updated_at", json_string(clock_format_rfc3339(row->updated_at, ts)));
	return doc;
}

/* "whsec_" + base64 of GENERATED_SECRET_BYTES random bytes (returned), NULL on failure. */
static char *secret_generate(void)
{
	char *out = whsec_generate(GENERATED_SECRET_BYTES);
	if (!out)
		log_error("subscriptions: no secret generated (random source or memory failed)");
	return out;
}


/* The origin of an http(s):// URL (scheme, host and port, lowercased, the default port
 * filled in) into out[ORIGIN_LEN]; "" for anything else. A credential is sent to an
 * origin: a change of any of the three sends it to someone else. */
#define ORIGIN_LEN 2100
static void url_origin(const char *url, char out[ORIGIN_LEN])
{
	out[0] = '\0';
	if (!url || strlen(url) > 2048)
		return;
	int https = strncasecmp(url, "https://", 8) == 0;
	if (!https && strncasecmp(url, "http://", 7) != 0)
		return;
	const char *a = url + (https ? 8 : 7);
	size_t alen = strcspn(a, "/?#");
	for (size_t i = alen; i > 0; i--) { /* user info is not the host */
		if (a[i - 1] == '@') {
			alen -= i;
			a += i;
			break;
		}
	}
	size_t hlen = alen;
	const char *port = NULL;
	const char *close = a[0] == '[' ? memchr(a, ']', alen) : NULL;
	const char *colon = memchr(close ? close : a, ':', alen - (size_t)((close ? close : a) - a));
	if (colon) {
		hlen = (size_t)(colon - a);
		port = colon + 1;
	}
	int n = snprintf(out, ORIGIN_LEN, "%s://%.*s:%.*s", https ? "https" : "http", (int)hlen, a,
			 port ? (int)(alen - hlen - 1) : 3, port ? port : (https ? "443" : "80"));
	for (int i = 0; i < n && i < ORIGIN_LEN; i++)
		out[i] = (char)tolower((unsigned char)out[i]);
}

/* Does in, a credential's value in the request (NULL when absent), give it in clear: not
 * masked, not left out? */
static int given_in_clear(const json_t *in)
{
	return in && !json_is_null(in) && !sub_header_masked(in);
}

/* A credential kept from the stored document (sent back masked, or left out) must not
 * follow endpoint or auth.token_url to another origin: a PATCH that moves either sends
 * the credentials they carry again, in clear. 0, or -1 with err naming the first one
 * missing. */
static int credentials_stay(const json_t *doc, const json_t *input, const json_t *stored,
			    struct input_error *err)
{
	static const char *const token_secrets[] = {"client_secret", "password", NULL};
	char before[ORIGIN_LEN], after[ORIGIN_LEN], field[160];
	const json_t *auth = json_object_get(doc, "auth"), *in_auth = json_object_get(input, "auth");
	const char *key;
	json_t *v;

	if (!stored)
		return 0;
	url_origin(json_string_value(json_object_get(stored, "endpoint")), before);
	url_origin(json_string_value(json_object_get(doc, "endpoint")), after);
	if (strcmp(before, after) != 0) {
		for (const char *const *k = sub_auth_secret_keys; json_is_object(auth) && *k; k++) {
			if (json_object_get(auth, *k) &&
			    !given_in_clear(json_object_get(in_auth, *k))) {
				snprintf(field, sizeof(field), "auth.%s", *k);
				goto moved;
			}
		}
		json_object_foreach(json_object_get(doc, "headers"), key, v) {
			if (sub_header_is_secret(key, v) &&
			    !given_in_clear(json_object_get(json_object_get(input, "headers"), key))) {
				snprintf(field, sizeof(field), "headers.%s", key);
				goto moved;
			}
		}
	}
	url_origin(json_string_value(json_object_get(json_object_get(stored, "auth"), "token_url")),
		   before);
	url_origin(json_string_value(json_object_get(auth, "token_url")), after);
	if (before[0] && strcmp(before, after) != 0) {
		for (const char *const *k = token_secrets; json_is_object(auth) && *k; k++) {
			if (json_object_get(auth, *k) &&
			    !given_in_clear(json_object_get(in_auth, *k))) {
				snprintf(field, sizeof(field), "auth.%s", *k);
				return input_error_set(err, 422, "invalid_argument", field,
						       "%s must be sent again in clear: auth.token_url "
						       "moves to another host, and a kept credential "
						       "(masked or left out) does not follow it", field);
			}
		}
	}
	return 0;
moved:
	return input_error_set(err, 422, "invalid_argument", field,
			       "%s must be sent again in clear: endpoint moves to another scheme, "
			       "host or port, and a kept credential (masked or left out) does not "
			       "follow it", field);
}

int sub_codec_prepare(json_t *doc, const json_t *input, const json_t *stored, int64_t now_ms,
		      const char *tls_dir, char **generated, struct input_error *err)
{
	const char *old = stored ? json_string_value(json_object_get(stored, "secret")) : NULL;
	json_t *v;

	*generated = NULL;
	/* The fields outboxd writes: each row says who (sub_codec.h, enum sub_field_writer). */
	for (size_t i = 0; i < sub_fields_n; i++) {
		const struct sub_field *f = &sub_fields[i];
		v = json_object_get(input, f->key);
		if (!v || f->writer == SF_BY_USER)
			continue;
		if (f->writer == SF_BY_DERIVATION)
			return input_error_set(err, 400, "invalid_argument", f->key,
					       "%s is set by outboxd", f->key);
		if (f->writer == SF_BY_DISABLING && !json_is_null(v))
			return input_error_set(err, 400, "invalid_argument", f->key,
					       "%s is set by outboxd when it disables a failing "
					       "subscription; enable it to clear it", f->key);
		if (f->writer == SF_BY_ROTATION && !(json_is_null(v) && stored))
			return input_error_set(err, 400, "invalid_argument", f->key,
					       "%s is kept by outboxd while a secret is rotated; "
					       "a PATCH may only remove it (null)", f->key);
		if (f->writer == SF_BY_ROTATION) { /* null: end the grace period now */
			json_object_del(doc, "previous_secret");
			json_object_del(doc, "previous_secret_expires_at");
		}
	}
	if (credentials_stay(doc, input, stored, err))
		return -1;
	if (json_is_true(json_object_get(input, "enabled")) || json_object_get(input, "disabled_reason")) {
		json_object_del(doc, "disabled_reason");
		json_object_del(doc, "disabled_at");
	}
	/* The masked value a read returned, sent back unchanged, keeps the secret. */
	if (sub_string_is(json_object_get(input, "secret"), SECRET_MASK) && old)
		json_object_set_new(doc, "secret", json_string(old));

	if (sub_string_is(json_object_get(doc, "secret"), "generate")) {
		if (!(*generated = secret_generate()))
			return input_error_set(err, 500, "internal", "secret",
					       "no random secret could be generated");
		json_object_set_new(doc, "secret", json_string(*generated));
	}

	/* Rotation: the secret before a change keeps signing for secret_grace, so receivers
	 * can switch to the new one without a window in which they refuse our requests. */
	const char *now_secret = json_string_value(json_object_get(doc, "secret"));
	if (old && (!now_secret || strcmp(now_secret, old) != 0)) {
		int64_t grace = SECRET_GRACE_DEFAULT_MS;
		v = json_object_get(doc, "secret_grace");
		if (json_is_string(v) && duration_parse(json_string_value(v), &grace))
			grace = SECRET_GRACE_DEFAULT_MS; /* invalid: sub_codec_parse reports it */
		if (now_secret && grace > 0) {
			char ts[RFC3339_LEN];
			json_object_set_new(doc, "previous_secret", json_string(old));
			json_object_set_new(doc, "previous_secret_expires_at",
					    json_string(clock_format_rfc3339(now_ms + grace, ts)));
		} else {
			json_object_del(doc, "previous_secret");
			json_object_del(doc, "previous_secret_expires_at");
		}
	}
	if (json_object_get(doc, "previous_secret") && previous_expired(doc, now_ms)) {
		json_object_del(doc, "previous_secret");
		json_object_del(doc, "previous_secret_expires_at");
	}

	/* TLS files are read when a request is made; refusing an unreadable one now beats a
	 * 525 on every delivery. They must lie inside tls_dir, so the API cannot point
	 * outboxd at its own files or anyone else's; the answer is the same for a file that
	 * is missing, unreadable or outside, so it tells nothing of other paths. */
	json_t *tls = json_object_get(doc, "tls");
	for (const char *const *k = sub_tls_keys; json_is_object(tls) && *k; k++) {
		v = json_object_get(tls, *k);
		if (json_is_string(v) && json_string_value(v)[0] == '/' &&
		    !path_readable_inside(tls_dir, json_string_value(v))) {
			char field[32];
			snprintf(field, sizeof(field), "tls.%s", *k);
			free(*generated);
			*generated = NULL;
			return input_error_set(err, 422, "invalid_argument", field,
					       "%s must name a file outboxd can read inside the "
					       "tls_dir directory (%s)", field,
					       tls_dir && *tls_dir ? tls_dir : "not set");
		}
	}
	return 0;
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
	if (auth && !json_is_null(auth)) {
		json_t *copy = json_deep_copy(auth);
		json_t *old = json_object_get(stored, "auth");
		/* A credential sent back masked, as a read showed it, keeps the stored one
		 * when the type is the same. */
		if (json_is_object(copy) && json_is_object(old) &&
		    json_equal(json_object_get(copy, "type"), json_object_get(old, "type"))) {
			for (const char *const *k = sub_auth_secret_keys; *k; k++)
				if (sub_string_is(json_object_get(copy, *k), MASK) &&
				    json_object_get(old, *k))
					json_object_set(copy, *k, json_object_get(old, *k));
		}
		json_object_set_new(out, "auth", copy);
	}
	/* a filter is one expression: replaced whole, never merged path by path */
	json_t *filter = json_object_get(patch, "filter");
	if (filter && !json_is_null(filter))
		json_object_set_new(out, "filter", json_deep_copy(filter));
	/* A secret header sent back masked keeps its stored value (and shape). */
	const char *name;
	json_t *v, *sent = json_object_get(patch, "headers");
	json_t *had = json_object_get(stored, "headers"), *now = json_object_get(out, "headers");
	json_object_foreach(sent, name, v) {
		json_t *old = json_object_get(had, name);
		if (old && sub_header_is_secret(name, old) && sub_header_masked(v) && json_is_object(now))
			json_object_set(now, name, old);
	}
	return out;
}
