/* redact.c: credentials out of causes and log lines (see redact.h). */
#include "deliver/redact.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/crypto.h>

#include "deliver/oauth2.h"
#include "util/base64.h"

#define MASK_LEN (sizeof(REDACT_MASK) - 1)

void redact_init(struct redact_set *r)
{
	memset(r, 0, sizeof(*r));
}

void redact_clear(struct redact_set *r)
{
	for (size_t i = 0; i < r->n; i++) {
		OPENSSL_cleanse(r->text[i], r->len[i]);
		free(r->text[i]);
	}
	free(r->text);
	free(r->len);
	redact_init(r);
}

int redact_add_exact(struct redact_set *r, const char *text, size_t len)
{
	if (!text || !len)
		return 0;
	for (size_t i = 0; i < r->n; i++)
		if (r->len[i] == len && memcmp(r->text[i], text, len) == 0)
			return 0;
	if (r->n == r->cap) {
		size_t cap = r->cap ? r->cap * 2 : 16;
		char **texts = realloc(r->text, cap * sizeof(*texts));
		if (texts)
			r->text = texts;
		size_t *lens = texts ? realloc(r->len, cap * sizeof(*lens)) : NULL;
		if (!lens)
			return -1;
		r->len = lens;
		r->cap = cap;
	}
	char *copy = malloc(len + 1);
	if (!copy)
		return -1;
	memcpy(copy, text, len);
	copy[len] = '\0';
	r->text[r->n] = copy;
	r->len[r->n] = len;
	r->n++;
	return 0;
}

/* Percent-encoding as outboxd writes URLs and forms (letters, digits and -._~ as they
 * are), with hex digits in hex[16], spaces as '+' when plus; into out (3 * strlen(s) + 1
 * bytes). */
static void percent_encode(const char *s, const char *hex, int plus, char *out)
{
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
		    *p == '-' || *p == '.' || *p == '_' || *p == '~') {
			*out++ = (char)*p;
		} else if (*p == ' ' && plus) {
			*out++ = '+';
		} else {
			*out++ = '%';
			*out++ = hex[*p >> 4];
			*out++ = hex[*p & 15];
		}
	}
	*out = '\0';
}

/* secret as the inside of a JSON string written with flags (jansson's escapes). */
static int add_json(struct redact_set *r, const char *secret, size_t flags)
{
	json_t *s = json_string(secret); /* NULL when secret is not UTF-8: nothing to add */
	char *text = s ? json_dumps(s, JSON_ENCODE_ANY | flags) : NULL;
	int rc = 0;
	if (text) {
		size_t n = strlen(text);
		if (n >= 2)
			rc = redact_add_exact(r, text + 1, n - 2); /* without the quotes */
		/* jansson writes \u00FC, Python and Go \u00fc */
		for (char *u = strstr(text, "\\u"); u && u + 6 <= text + n; u = strstr(u + 2, "\\u"))
			for (int i = 2; i < 6; i++)
				if (u[i] >= 'A' && u[i] <= 'F')
					u[i] = (char)(u[i] - 'A' + 'a');
		if (n >= 2)
			rc |= redact_add_exact(r, text + 1, n - 2);
		OPENSSL_cleanse(text, n);
	}
	free(text);
	json_decref(s);
	return rc;
}

int redact_add_secret(struct redact_set *r, const char *secret)
{
	static const char upper[] = "0123456789ABCDEF", lower[] = "0123456789abcdef";
	if (!secret || !*secret)
		return 0;
	size_t n = strlen(secret);
	char *enc = malloc(3 * n + 1);
	int rc = redact_add_exact(r, secret, n);
	if (!enc)
		return -1;
	for (int variant = 0; variant < 4; variant++) {
		percent_encode(secret, variant & 1 ? lower : upper, variant & 2, enc);
		rc |= redact_add_exact(r, enc, strlen(enc));
	}
	OPENSSL_cleanse(enc, 3 * n + 1);
	free(enc);
	/* jansson's own, Python's json.dumps (ASCII only), and with "\/" */
	rc |= add_json(r, secret, 0);
	rc |= add_json(r, secret, JSON_ENSURE_ASCII);
	rc |= add_json(r, secret, JSON_ENSURE_ASCII | JSON_ESCAPE_SLASH);
	rc |= add_json(r, secret, JSON_ESCAPE_SLASH);
	return rc ? -1 : 0;
}

int redact_add_oauth2(struct redact_set *r, const struct oauth2_params *p)
{
	char basic[6200];
	int rc = redact_add_secret(r, p->client_secret) | redact_add_secret(r, p->password);
	if (oauth2_uses_basic(p) && oauth2_basic_header_value(p, basic, sizeof(basic)) == 0) {
		/* "Basic " + base64 */
		rc |= redact_add_exact(r, basic + 6, strlen(basic + 6));
		OPENSSL_cleanse(basic, sizeof(basic));
	}
	return rc ? -1 : 0;
}

int redact_add_subscription(struct redact_set *r, const struct subscription *s)
{
	int rc = 0;
	switch (s->auth_type) {
	case AUTH_BASIC: {
		size_t n = strlen(s->auth_user) + 1 + strlen(s->auth_secret);
		char *plain = malloc(n + 1), *enc = malloc(base64_encoded_size(n));
		if (plain && enc) {
			snprintf(plain, n + 1, "%s:%s", s->auth_user, s->auth_secret);
			rc |= redact_add_exact(r, enc, base64_encode(plain, n, enc));
			OPENSSL_cleanse(plain, n);
			OPENSSL_cleanse(enc, base64_encoded_size(n));
		} else {
			rc = -1;
		}
		free(plain);
		free(enc);
		rc |= redact_add_secret(r, s->auth_secret);
		break;
	}
	case AUTH_BEARER:
	case AUTH_API_KEY:
	case AUTH_QUERY:
		rc |= redact_add_secret(r, s->auth_secret);
		break;
	case AUTH_OAUTH2:
		rc |= redact_add_oauth2(r, &s->oauth2);
		break;
	default:
		break;
	}
	for (size_t i = 0; i < s->n_headers; i++)
		if (s->headers[i].secret)
			rc |= redact_add_secret(r, s->headers[i].value);
	return rc ? -1 : 0;
}

/* The length of the longest start of a text of r, REDACT_TAIL_MIN or more characters
 * and shorter than the whole text, that text (len bytes) ends with; 0 when none. */
static size_t cut_off_start(const struct redact_set *r, const char *text, size_t len)
{
	size_t best = 0;
	for (size_t i = 0; i < r->n; i++) {
		size_t k = r->len[i] - 1 < len ? r->len[i] - 1 : len;
		for (; k >= REDACT_TAIL_MIN && k > best; k--) {
			if (memcmp(text + len - k, r->text[i], k) == 0) {
				best = k;
				break;
			}
		}
	}
	return best;
}

size_t redact_copy(const struct redact_set *r, const char *in, size_t len, char *out, size_t size)
{
	size_t o = 0, covered_to = 0;
	int masked = 0;
	if (!size)
		return 0;
	/* Every byte inside any occurrence of any text is covered, and a run of covered
	 * bytes becomes one mask: occurrences that overlap (one credential's end being
	 * another's start) leave nothing of either behind. */
	for (size_t i = 0; i < len && o + 1 < size; i++) {
		for (size_t k = 0; k < r->n; k++) {
			if (i + r->len[k] > covered_to && r->len[k] <= len - i &&
			    in[i] == r->text[k][0] && memcmp(in + i, r->text[k], r->len[k]) == 0)
				covered_to = i + r->len[k];
		}
		if (i >= covered_to) {
			out[o++] = in[i];
			masked = 0;
		} else if (!masked) {
			if (o + MASK_LEN + 1 > size)
				break; /* no room for the mask: the text ends before the credential */
			memcpy(out + o, REDACT_MASK, MASK_LEN);
			o += MASK_LEN;
			masked = 1;
		}
	}
	/* cut short (by len or by size): a credential may begin at the end */
	size_t tail = masked ? 0 : cut_off_start(r, out, o);
	if (tail) {
		o -= tail;
		size_t room = size - 1 - o;
		size_t m = room < MASK_LEN ? room : MASK_LEN;
		memcpy(out + o, REDACT_MASK, m);
		o += m;
	}
	out[o] = '\0';
	return o;
}

void redact_apply(const struct redact_set *r, char *text, size_t size)
{
	size_t len = strlen(text);
	if (!r->n || !len)
		return;
	char stack[2048], *copy = len < sizeof(stack) ? stack : malloc(len + 1);
	if (!copy) {
		text[0] = '\0'; /* nothing shown beats a credential shown */
		return;
	}
	memcpy(copy, text, len + 1);
	redact_copy(r, copy, len, text, size);
	OPENSSL_cleanse(copy, len);
	if (copy != stack)
		free(copy);
}
