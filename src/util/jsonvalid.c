/* jsonvalid.c: a conservative check that a byte span is one JSON value jansson would
 * accept (see jsonvalid.h for the contract and why).
 *
 * Recursive descent over RFC 8259's grammar. Where jansson's acceptance depends on more
 * than the grammar, the check answers "not sure" (0) instead of reproducing jansson:
 *  - a number whose magnitude could leave a double's range (jansson refuses an overflow:
 *    more than 300 digits before the point plus exponent, either way);
 *  - \u0000 (refused without JSON_ALLOW_NUL) and any \u escape of a surrogate (jansson
 *    checks that pairs are whole);
 *  - a key with any escape (jansson compares keys decoded, for duplicates), an object of
 *    more than KEYS_MAX members, nesting deeper than DEPTH_MAX.
 * Strings are checked as jansson checks them: no byte below 0x20, valid escapes, and
 * strict UTF-8 (RFC 3629: no overlong form, no surrogate, nothing above U+10FFFF). */
#include "util/jsonvalid.h"

#include <string.h>

#define DEPTH_MAX 64
#define KEYS_MAX 32

struct cur {
	const unsigned char *p, *end;
};

static void skip_ws(struct cur *c)
{
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t'))
		c->p++;
}

/* The continuation bytes of a UTF-8 sequence led by lead at c->p - 1, RFC 3629's table. */
static int utf8_rest(struct cur *c, unsigned char lead)
{
	unsigned char lo = 0x80, hi = 0xbf;
	int n;

	if (lead >= 0xc2 && lead <= 0xdf)
		n = 1;
	else if (lead >= 0xe0 && lead <= 0xef)
		n = 2;
	else if (lead >= 0xf0 && lead <= 0xf4)
		n = 3;
	else
		return 0;
	if (lead == 0xe0)
		lo = 0xa0;
	else if (lead == 0xed)
		hi = 0x9f;
	else if (lead == 0xf0)
		lo = 0x90;
	else if (lead == 0xf4)
		hi = 0x8f;
	if (c->end - c->p < n)
		return 0;
	if (c->p[0] < lo || c->p[0] > hi)
		return 0;
	for (int i = 1; i < n; i++)
		if ((c->p[i] & 0xc0) != 0x80)
			return 0;
	c->p += n;
	return 1;
}

static int hexval(unsigned char h)
{
	if (h >= '0' && h <= '9')
		return h - '0';
	if (h >= 'a' && h <= 'f')
		return h - 'a' + 10;
	if (h >= 'A' && h <= 'F')
		return h - 'A' + 10;
	return -1;
}

/* A string from its opening quote at c->p; *escaped: it holds a backslash. */
static int string(struct cur *c, int *escaped)
{
	c->p++;
	while (c->p < c->end) {
		unsigned char ch = *c->p++;
		if (ch == '"')
			return 1;
		if (ch < 0x20)
			return 0;
		if (ch >= 0x80) {
			if (!utf8_rest(c, ch))
				return 0;
		} else if (ch == '\\') {
			*escaped = 1;
			if (c->p >= c->end)
				return 0;
			ch = *c->p++;
			if (ch == 'u') {
				int v = 0;
				if (c->end - c->p < 4)
					return 0;
				for (int i = 0; i < 4; i++) {
					int h = hexval(c->p[i]);
					if (h < 0)
						return 0;
					v = v * 16 + h;
				}
				if (v == 0 || (v >= 0xd800 && v <= 0xdfff))
					return 0;
				c->p += 4;
			} else if (!strchr("\"\\/bfnrt", ch) || ch == '\0') {
				return 0;
			}
		}
	}
	return 0;
}

static int digits(struct cur *c)
{
	const unsigned char *from = c->p;
	while (c->p < c->end && *c->p >= '0' && *c->p <= '9')
		c->p++;
	return (int)(c->p - from);
}

static int number(struct cur *c)
{
	long whole, exp = 0;
	int neg_exp = 0;

	if (*c->p == '-')
		c->p++;
	if (c->p >= c->end)
		return 0;
	if (*c->p == '0') {
		c->p++;
		whole = 1;
	} else if (*c->p >= '1' && *c->p <= '9') {
		whole = digits(c);
	} else {
		return 0;
	}
	if (c->p < c->end && *c->p == '.') {
		c->p++;
		if (digits(c) == 0)
			return 0;
	}
	if (c->p < c->end && (*c->p == 'e' || *c->p == 'E')) {
		c->p++;
		if (c->p < c->end && (*c->p == '+' || *c->p == '-'))
			neg_exp = *c->p++ == '-';
		const unsigned char *from = c->p;
		int n = digits(c);
		if (n == 0 || n > 4)
			return 0; /* none, or too long to be sure */
		for (const unsigned char *d = from; d < c->p; d++)
			exp = exp * 10 + (*d - '0');
	}
	long magnitude = whole + (neg_exp ? -exp : exp);
	return magnitude <= 300 && magnitude >= -300;
}

static int literal(struct cur *c, const char *word)
{
	size_t n = strlen(word);
	if ((size_t)(c->end - c->p) < n || memcmp(c->p, word, n) != 0)
		return 0;
	c->p += n;
	return 1;
}

static int value(struct cur *c, int depth);

/* After a member or an element: 1 when close ends the container, 2 when a ',' says another
 * follows (whitespace after it skipped), 0 otherwise. */
static int after_item(struct cur *c, unsigned char close)
{
	skip_ws(c);
	if (c->p >= c->end)
		return 0;
	if (*c->p == close) {
		c->p++;
		return 1;
	}
	if (*c->p++ != ',')
		return 0;
	skip_ws(c);
	return 2;
}

/* Steps over a container's opening bracket and the whitespace after it; 1 when close
 * follows at once (stepped over too: the container is empty). */
static int opens_empty(struct cur *c, unsigned char close)
{
	c->p++;
	skip_ws(c);
	if (c->p < c->end && *c->p == close) {
		c->p++;
		return 1;
	}
	return 0;
}

static int object(struct cur *c, int depth)
{
	const unsigned char *key[KEYS_MAX];
	size_t key_len[KEYS_MAX], n = 0;

	if (opens_empty(c, '}'))
		return 1;
	for (;;) {
		int escaped = 0;
		if (c->p >= c->end || *c->p != '"' || n == KEYS_MAX)
			return 0;
		const unsigned char *k = c->p + 1;
		if (!string(c, &escaped) || escaped)
			return 0;
		size_t len = (size_t)(c->p - 1 - k);
		for (size_t i = 0; i < n; i++)
			if (key_len[i] == len && memcmp(key[i], k, len) == 0)
				return 0; /* a duplicate: jansson refuses it */
		key[n] = k;
		key_len[n++] = len;
		skip_ws(c);
		if (c->p >= c->end || *c->p++ != ':')
			return 0;
		skip_ws(c);
		int next = value(c, depth + 1) ? after_item(c, '}') : 0;
		if (next != 2)
			return next;
	}
}

static int array(struct cur *c, int depth)
{
	if (opens_empty(c, ']'))
		return 1;
	for (;;) {
		int next = value(c, depth + 1) ? after_item(c, ']') : 0;
		if (next != 2)
			return next;
	}
}

static int value(struct cur *c, int depth)
{
	int escaped = 0;

	if (depth > DEPTH_MAX || c->p >= c->end)
		return 0;
	switch (*c->p) {
	case '{':
		return object(c, depth);
	case '[':
		return array(c, depth);
	case '"':
		return string(c, &escaped);
	case 't':
		return literal(c, "true");
	case 'f':
		return literal(c, "false");
	case 'n':
		return literal(c, "null");
	default:
		return (*c->p == '-' || (*c->p >= '0' && *c->p <= '9')) && number(c);
	}
}

int jsonvalid_value(const char *text, size_t len)
{
	struct cur c = {(const unsigned char *)text, (const unsigned char *)text + len};

	if (!value(&c, 0))
		return 0;
	/* a number must end where the span does; so must everything else */
	return c.p == c.end;
}
