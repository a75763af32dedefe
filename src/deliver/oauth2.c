/* oauth2.c: token cache, expiry arithmetic, token request and response (see oauth2.h). */
#include "deliver/oauth2.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <openssl/crypto.h>

#include "util/base64.h"

#define WHY_DETAIL_MAX 200 /* characters of an error_description or body quoted in a cause */

/* ---- the cache ------------------------------------------------------------------------ */

static void token_wipe(struct oauth2_cache *c)
{
	if (c->token) {
		OPENSSL_cleanse(c->token, strlen(c->token));
		free(c->token);
		c->token = NULL;
	}
	c->refresh_at_ms = c->expires_at_ms = 0;
}

void oauth2_cache_clear(struct oauth2_cache *c)
{
	token_wipe(c);
	memset(c, 0, sizeof(*c));
}

enum oauth2_step oauth2_cache_next(struct oauth2_cache *c, int64_t now_ms)
{
	int usable = c->token && now_ms < c->expires_at_ms;

	if (usable && now_ms < c->refresh_at_ms)
		return OAUTH2_USE;
	if (c->fetching)
		return usable ? OAUTH2_USE : OAUTH2_WAIT;
	/* A failure is not retried at once: many deliveries failing together would turn an
	 * identity provider's outage into a request storm. */
	if (now_ms < c->failed_until_ms)
		return usable ? OAUTH2_USE : OAUTH2_FAILED;
	c->fetching = 1;
	return usable ? OAUTH2_USE_AND_FETCH : OAUTH2_FETCH;
}

/* The margin keeps a token from expiring on its way to the subscriber and gives the
 * refresh ahead time to finish while the old token still works: 10% of short lifetimes,
 * 30 s of long ones. */
static int64_t margin_ms(int64_t lifetime_ms)
{
	int64_t m = lifetime_ms * OAUTH2_MARGIN_PERCENT / 100;
	return m < OAUTH2_MARGIN_MAX_MS ? m : OAUTH2_MARGIN_MAX_MS;
}

static int64_t lifetime_ms(int64_t expires_in_s)
{
	if (expires_in_s < 0)
		expires_in_s = OAUTH2_DEFAULT_LIFETIME_S;
	if (expires_in_s > 10LL * 365 * 86400) /* a decade: no overflow below */
		expires_in_s = 10LL * 365 * 86400;
	return expires_in_s * 1000;
}

int64_t oauth2_refresh_at(int64_t now_ms, int64_t expires_in_s)
{
	int64_t life = lifetime_ms(expires_in_s);
	return now_ms + life - margin_ms(life);
}

uint64_t oauth2_cache_store(struct oauth2_cache *c, char *token, int64_t expires_in_s,
			    int64_t now_ms)
{
	token_wipe(c);
	c->token = token;
	c->expires_at_ms = now_ms + lifetime_ms(expires_in_s);
	c->refresh_at_ms = oauth2_refresh_at(now_ms, expires_in_s);
	c->generation++;
	c->fetching = 0;
	c->failed_until_ms = 0;
	c->failure[0] = '\0';
	return c->generation;
}

void oauth2_cache_fail(struct oauth2_cache *c, const char *cause, int64_t now_ms)
{
	c->fetching = 0;
	c->failed_until_ms = now_ms + OAUTH2_FAILURE_HOLD_MS;
	snprintf(c->failure, sizeof(c->failure), "%s", cause ? cause : "");
}

int oauth2_cache_invalidate(struct oauth2_cache *c, uint64_t gen)
{
	if (!c->token || c->generation != gen)
		return 0;
	token_wipe(c);
	return 1;
}

uint64_t oauth2_params_fingerprint(const struct oauth2_params *p)
{
	const char *fields[] = {p->token_url, p->client_id, p->client_secret, p->scope,
				p->audience,  p->username,  p->password};
	uint64_t h = 1469598103934665603ull; /* FNV-1a: equality in-process, not security */

	h = (h ^ (uint64_t)p->grant) * 1099511628211ull;
	h = (h ^ (uint64_t)p->client_auth) * 1099511628211ull;
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		/* 0x1e marks NULL, 0x1f ends a field: ("ab", NULL) never equals ("a", "b") */
		const char *s = fields[i] ? fields[i] : "\x1e";
		for (; *s; s++)
			h = (h ^ (unsigned char)*s) * 1099511628211ull;
		h = (h ^ 0x1f) * 1099511628211ull;
	}
	return h;
}

/* ---- the request ------------------------------------------------------------------------ */

/* application/x-www-form-urlencoded: unreserved characters as they are, the rest %XX. */
static int form_escape(struct buf *b, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		char esc[3] = {'%', hex[*p >> 4], hex[*p & 15]};
		int plain = isalnum(*p) || *p == '-' || *p == '.' || *p == '_' || *p == '~';
		if (buf_append(b, plain ? (const char *)p : esc, plain ? 1 : 3))
			return -1;
	}
	return 0;
}

static int form_add(struct buf *b, const char *key, const char *value)
{
	if (!value)
		return 0;
	if ((b->len && buf_append(b, "&", 1)) || form_escape(b, key) || buf_append(b, "=", 1) ||
	    form_escape(b, value))
		return -1;
	return 0;
}

int oauth2_uses_basic(const struct oauth2_params *p)
{
	return p->client_auth == OAUTH2_AUTH_BASIC && p->client_secret;
}

int oauth2_request_body(const struct oauth2_params *p, struct buf *out)
{
	int basic = oauth2_uses_basic(p);
	int password = p->grant == OAUTH2_PASSWORD;

	if (form_add(out, "grant_type", password ? "password" : "client_credentials") ||
	    (password && (form_add(out, "username", p->username) ||
			  form_add(out, "password", p->password))) ||
	    form_add(out, "scope", p->scope) || form_add(out, "audience", p->audience) ||
	    (!basic && (form_add(out, "client_id", p->client_id) ||
			form_add(out, "client_secret", p->client_secret))))
		return -1;
	return 0;
}

int oauth2_basic_header_value(const struct oauth2_params *p, char *out, size_t size)
{
	struct buf plain;
	int rc = -1;

	buf_init(&plain, 4096);
	if (form_escape(&plain, p->client_id ? p->client_id : "") || buf_append(&plain, ":", 1) ||
	    form_escape(&plain, p->client_secret ? p->client_secret : ""))
		goto out;
	size_t need = 6 + 4 * ((plain.len + 2) / 3) + 1;
	if (need > size)
		goto out;
	memcpy(out, "Basic ", 6);
	base64_encode(plain.data, plain.len, out + 6);
	rc = 0;
out:
	if (plain.data)
		OPENSSL_cleanse(plain.data, plain.len);
	buf_free(&plain);
	return rc;
}

/* ---- the response ----------------------------------------------------------------------- */

/* Appends up to WHY_DETAIL_MAX characters of s to why, control characters as spaces. */
static void why_append(char *why, size_t why_len, const char *s, size_t n)
{
	size_t at = strlen(why);
	if (n > WHY_DETAIL_MAX)
		n = WHY_DETAIL_MAX;
	for (size_t i = 0; i < n && at + 1 < why_len; i++)
		why[at++] = (unsigned char)s[i] < ' ' || s[i] == 0x7f ? ' ' : s[i];
	why[at] = '\0';
}

/* RFC 6750 b64token is stricter; this keeps what can travel in a header line. */
static int token_printable(const char *t)
{
	for (; *t; t++)
		if ((unsigned char)*t <= ' ' || (unsigned char)*t >= 0x7f)
			return 0;
	return 1;
}

/* A lifetime longer than this (ten years) is taken as this: it keeps the expiry time
 * (now + expires_in, in milliseconds) far from overflowing, whatever the provider sends
 * (6e20 once reached a float-to-integer conversion that C leaves undefined). */
#define EXPIRES_IN_MAX_S (3650LL * 86400)

static int64_t expires_clamp(long double s)
{
	if (!(s > 0)) /* negative, zero or NaN */
		return 0;
	return s > EXPIRES_IN_MAX_S ? EXPIRES_IN_MAX_S : (int64_t)s;
}

static int64_t expires_in_value(const json_t *v)
{
	if (json_is_integer(v))
		return expires_clamp((long double)json_integer_value(v));
	if (json_is_real(v))
		return expires_clamp((long double)json_real_value(v));
	if (json_is_string(v)) { /* some providers send "3600" */
		const char *s = json_string_value(v);
		char *end;
		errno = 0;
		long long n = strtoll(s, &end, 10);
		if (end != s && !*end)
			return errno == ERANGE && n > 0 ? EXPIRES_IN_MAX_S : expires_clamp((long double)n);
	}
	return -1;
}

int oauth2_parse_response(long status, const char *body, size_t len, char **token,
			  int64_t *expires_in_s, char *why, size_t why_len)
{
	json_error_t jerr;
	json_t *doc = len ? json_loadb(body, len, 0, &jerr) : NULL;
	json_t *v;
	int rc = -1;

	*token = NULL;
	*expires_in_s = -1;
	why[0] = '\0';
	if (status < 200 || status > 299) {
		snprintf(why, why_len, "token endpoint answered HTTP %ld", status);
		json_t *err = json_object_get(doc, "error");
		json_t *desc = json_object_get(doc, "error_description");
		if (json_is_string(err)) {
			why_append(why, why_len, ": ", 2);
			why_append(why, why_len, json_string_value(err), json_string_length(err));
			if (json_is_string(desc)) {
				why_append(why, why_len, " (", 2);
				why_append(why, why_len, json_string_value(desc),
					   json_string_length(desc));
				why_append(why, why_len, ")", 1);
			}
		} else if (len) {
			why_append(why, why_len, ": ", 2);
			why_append(why, why_len, body, len);
		}
		goto out;
	}
	if (!doc) {
		snprintf(why, why_len, "token response is not JSON: %s",
			 len ? jerr.text : "empty body");
		goto out;
	}
	if (!json_is_object(doc)) {
		snprintf(why, why_len, "token response is not a JSON object");
		goto out;
	}
	v = json_object_get(doc, "access_token");
	if (!json_is_string(v) || json_string_length(v) == 0) {
		snprintf(why, why_len, "token response has no access_token");
		goto out;
	}
	if (json_string_length(v) > OAUTH2_TOKEN_MAX || !token_printable(json_string_value(v)) ||
	    strlen(json_string_value(v)) != json_string_length(v)) {
		snprintf(why, why_len,
			 "access_token is longer than %d characters or has spaces or control "
			 "characters", OAUTH2_TOKEN_MAX);
		goto out;
	}
	json_t *type = json_object_get(doc, "token_type");
	if (type && !(json_is_string(type) && strcasecmp(json_string_value(type), "bearer") == 0)) {
		snprintf(why, why_len, "token_type ");
		if (json_is_string(type))
			why_append(why, why_len, json_string_value(type), json_string_length(type));
		else
			why_append(why, why_len, "(not a string)", 14);
		why_append(why, why_len, " is not supported (only Bearer)", 31);
		goto out;
	}
	*expires_in_s = expires_in_value(json_object_get(doc, "expires_in"));
	*token = strdup(json_string_value(v));
	if (!*token) {
		snprintf(why, why_len, "out of memory");
		goto out;
	}
	rc = 0;
out:
	json_decref(doc);
	return rc;
}
