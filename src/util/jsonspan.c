/* jsonspan.c: walk the members of a JSON object (or elements of an array) and report the
 * byte span of each value, so payloads can be stored exactly as the producer wrote them.
 *
 * Only the structure between values is scanned here: whitespace, '{' '}' '[' ']' ','
 * ':'. Every key and value is parsed by jansson, starting at its first byte, with
 * JSON_DISABLE_EOF_CHECK: jansson then stops after one value and leaves the number of
 * bytes it consumed in error.position (byte offsets, multi-byte UTF-8 included; checked
 * against jansson 2.14). Nothing is read outside text[0, len), and text need not be
 * NUL-terminated.
 *
 * Choices worth knowing:
 *  - values are parsed with JSON_DECODE_INT_AS_REAL: without it jansson rejects integers
 *    beyond int64 ("too big integer"), yet 18446744073709551615 is valid JSON a producer
 *    may send, and we only need its span. Numbers beyond double range (1e400) are still
 *    rejected by jansson;
 *  - values may contain \u0000 (JSON_ALLOW_NUL); keys may not, because the callback gets
 *    a NUL-terminated key and "a\u0000b" must not pass for "a";
 *  - the walk is single-pass: members before a syntax error have already been reported
 *    when -1 comes back, so callers discard what they collected on failure;
 *  - jansson limits nesting to 2048 levels; deeper values are malformed here. */
#include "util/jsonspan.h"

#include <limits.h>
#include <stdbool.h>

#include <jansson.h>

#define KEY_FLAGS (JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK)
#define VALUE_FLAGS \
	(JSON_DECODE_ANY | JSON_DISABLE_EOF_CHECK | JSON_DECODE_INT_AS_REAL | JSON_ALLOW_NUL)

struct scan {
	const char *text;
	size_t len;
	size_t pos;
};

static void scan_skip_ws(struct scan *s)
{
	while (s->pos < s->len) {
		char c = s->text[s->pos];

		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			return;
		s->pos++;
	}
}

/* Skips whitespace; true (and consumes c) when the next byte is c. */
static bool scan_accept(struct scan *s, char c)
{
	scan_skip_ws(s);
	if (s->pos < s->len && s->text[s->pos] == c) {
		s->pos++;
		return true;
	}
	return false;
}

/* Parses one JSON value at the current position (after whitespace) with jansson.
 * Returns the parsed value (returned to caller) and its span, or NULL when malformed. */
static json_t *scan_value(struct scan *s, size_t flags, size_t *start, size_t *end)
{
	json_error_t err;
	json_t *v;

	scan_skip_ws(s);
	if (s->pos >= s->len)
		return NULL;
	v = json_loadb(s->text + s->pos, s->len - s->pos, flags, &err);
	if (!v)
		return NULL;
	if (err.position <= 0 || (size_t)err.position > s->len - s->pos) {
		json_decref(v); /* cannot happen with jansson 2.14; never trust a bad span */
		return NULL;
	}
	*start = s->pos;
	s->pos += (size_t)err.position;
	*end = s->pos;
	return v;
}

/* Parses a member key: a JSON string. KEY_FLAGS lacks JSON_ALLOW_NUL on purpose, so
 * jansson refuses "\u0000" and the key is a proper C string. Returned to caller. */
static json_t *scan_key(struct scan *s)
{
	size_t start, end;
	json_t *key;

	scan_skip_ws(s);
	if (s->pos >= s->len || s->text[s->pos] != '"')
		return NULL;
	key = scan_value(s, KEY_FLAGS, &start, &end);
	if (!key)
		return NULL;
	if (!json_is_string(key)) {
		json_decref(key);
		return NULL;
	}
	return key;
}

/* After the closing bracket only whitespace may follow. */
static int scan_finish(struct scan *s)
{
	scan_skip_ws(s);
	return s->pos == s->len ? 0 : -1;
}

static bool scan_init(struct scan *s, const char *text, size_t len)
{
	/* jansson reports positions as int. */
	if (!text || len > INT_MAX)
		return false;
	s->text = text;
	s->len = len;
	s->pos = 0;
	return true;
}

int jsonspan_object(const char *text, size_t len, jsonspan_member_cb cb, void *ctx)
{
	struct scan s;

	if (!scan_init(&s, text, len) || !scan_accept(&s, '{'))
		return -1;
	if (scan_accept(&s, '}'))
		return scan_finish(&s);
	for (;;) {
		size_t start, end;
		json_t *key, *value;
		int rc;

		key = scan_key(&s);
		if (!key)
			return -1;
		if (!scan_accept(&s, ':')) {
			json_decref(key);
			return -1;
		}
		value = scan_value(&s, VALUE_FLAGS, &start, &end);
		if (!value) {
			json_decref(key);
			return -1;
		}
		json_decref(value);
		rc = cb ? cb(ctx, json_string_value(key), start, end) : 0;
		json_decref(key);
		if (rc != 0)
			return rc;
		if (scan_accept(&s, ','))
			continue;
		if (scan_accept(&s, '}'))
			return scan_finish(&s);
		return -1;
	}
}

int jsonspan_array(const char *text, size_t len, jsonspan_element_cb cb, void *ctx)
{
	struct scan s;

	if (!scan_init(&s, text, len) || !scan_accept(&s, '['))
		return -1;
	if (scan_accept(&s, ']'))
		return scan_finish(&s);
	for (size_t index = 0;; index++) {
		size_t start, end;
		json_t *value;
		int rc;

		value = scan_value(&s, VALUE_FLAGS, &start, &end);
		if (!value)
			return -1;
		json_decref(value);
		rc = cb ? cb(ctx, index, start, end) : 0;
		if (rc != 0)
			return rc;
		if (scan_accept(&s, ','))
			continue;
		if (scan_accept(&s, ']'))
			return scan_finish(&s);
		return -1;
	}
}
