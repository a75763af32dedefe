/* jsonspan.c: walk the members of a JSON object (or elements of an array) and report the
 * byte span of each value, so payloads can be stored exactly as the producer wrote them.
 *
 * The spans are trusted only for text a JSON parser validates (see jsonspan.h), so a
 * structural scan is enough to find where a value ends: a string ends at the first '"'
 * preceded by an even number of backslashes, a container at the bracket that brings the
 * depth back to zero (brackets inside strings skipped), a scalar (number, true, false, null) at
 * the first byte that cannot be part of one. This replaced a jansson parse of every
 * value, which made ingest parse each payload three times (json_loadb was 16% of the
 * daemon's CPU in the throughput bench).
 *
 * Choices worth knowing:
 *  - values are never checked or converted: numbers beyond int64 or double range keep
 *    their text, and the caller's parser decides whether they are acceptable;
 *  - keys are reported decoded. Most have no backslash and are their bytes between the
 *    quotes (valid JSON strings hold no raw control characters); the rare escaped key
 *    ("pay\u006coad") is decoded by jansson, without JSON_ALLOW_NUL so "a\u0000b" is
 *    refused rather than passed as a key that contains a NUL byte;
 *  - bracket kinds are counted, not matched ("[}" closes): valid input never mismatches,
 *    and the scan needs no stack, so any depth is fine;
 *  - nothing is read outside text[0, len), text need not be NUL-terminated, and running
 *    out of text mid-value is reported as -1;
 *  - the walk is single-pass: members before an error have already been reported when -1
 *    comes back, so callers discard what they collected on failure. */
#include "util/jsonspan.h"

#include <stdbool.h>
#include <string.h>

#include <jansson.h>

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

/* Moves past the string whose opening quote is at s->pos. A quote closes the string
 * when the run of backslashes before it (which cannot reach back past the opening quote)
 * has even length. False when the text ends first. */
static bool scan_string(struct scan *s)
{
	size_t open = s->pos, from = s->pos + 1;

	for (;;) {
		const char *quote = memchr(s->text + from, '"', s->len - from);
		size_t at, backslashes = 0;

		if (!quote)
			return false;
		at = (size_t)(quote - s->text);
		while (at - backslashes - 1 > open && s->text[at - backslashes - 1] == '\\')
			backslashes++;
		if (backslashes % 2 == 0) {
			s->pos = at + 1;
			return true;
		}
		from = at + 1;
	}
}

/* Moves past the object or array whose opening bracket is at s->pos. */
static bool scan_container(struct scan *s)
{
	size_t depth = 0;

	while (s->pos < s->len) {
		switch (s->text[s->pos]) {
		case '"':
			if (!scan_string(s))
				return false;
			continue;
		case '{':
		case '[':
			depth++;
			break;
		case '}':
		case ']':
			if (--depth == 0) {
				s->pos++;
				return true;
			}
			break;
		}
		s->pos++;
	}
	return false;
}

/* Moves past a number, true, false or null: letters, digits, '+', '-' and '.'. Stopping
 * at any other byte (rather than only at ',' '}' ']' and whitespace) costs nothing and
 * lets a stray ':' or '"' show up as broken structure. */
static bool scan_scalar(struct scan *s)
{
	size_t start = s->pos;

	while (s->pos < s->len) {
		char c = s->text[s->pos];

		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      c == '+' || c == '-' || c == '.'))
			break;
		s->pos++;
	}
	return s->pos > start;
}

/* Moves past one value (after whitespace) and gives its span. */
static bool scan_value(struct scan *s, size_t *start, size_t *end)
{
	bool ok;

	scan_skip_ws(s);
	if (s->pos >= s->len)
		return false;
	*start = s->pos;
	switch (s->text[s->pos]) {
	case '"':
		ok = scan_string(s);
		break;
	case '{':
	case '[':
		ok = scan_container(s);
		break;
	default:
		ok = scan_scalar(s);
		break;
	}
	*end = s->pos;
	return ok;
}

/* After the closing bracket only whitespace may follow. */
static int scan_finish(struct scan *s)
{
	scan_skip_ws(s);
	return s->pos == s->len ? 0 : -1;
}

/* Hands one member to cb with its key decoded; the key string spans text[key_start,
 * key_end), quotes included. */
static int report_member(const char *text, size_t key_start, size_t key_end, size_t start,
			 size_t end, jsonspan_member_cb cb, void *ctx)
{
	const char *key = text + key_start + 1;
	size_t key_len = key_end - key_start - 2;
	json_t *decoded;
	int rc;

	if (!memchr(key, '\\', key_len))
		return cb ? cb(ctx, key, key_len, start, end) : 0;
	decoded = json_loadb(text + key_start, key_end - key_start, JSON_DECODE_ANY, NULL);
	if (!json_is_string(decoded)) {
		json_decref(decoded);
		return -1;
	}
	rc = cb ? cb(ctx, json_string_value(decoded), json_string_length(decoded), start, end)
		: 0;
	json_decref(decoded);
	return rc;
}

int jsonspan_object(const char *text, size_t len, jsonspan_member_cb cb, void *ctx)
{
	struct scan s = {text, len, 0};

	if (!text || !scan_accept(&s, '{'))
		return -1;
	if (scan_accept(&s, '}'))
		return scan_finish(&s);
	for (;;) {
		size_t key_start, key_end, start, end;
		int rc;

		scan_skip_ws(&s);
		if (s.pos >= s.len || text[s.pos] != '"')
			return -1;
		key_start = s.pos;
		if (!scan_string(&s))
			return -1;
		key_end = s.pos;
		if (!scan_accept(&s, ':') || !scan_value(&s, &start, &end))
			return -1;
		rc = report_member(text, key_start, key_end, start, end, cb, ctx);
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
	struct scan s = {text, len, 0};

	if (!text || !scan_accept(&s, '['))
		return -1;
	if (scan_accept(&s, ']'))
		return scan_finish(&s);
	for (size_t index = 0;; index++) {
		size_t start, end;
		int rc;

		if (!scan_value(&s, &start, &end))
			return -1;
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
