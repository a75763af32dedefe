/* buf.c: a growing byte buffer with a hard cap (curl's dynbuf idea).
 *
 * Growth doubles but never allocates beyond max + 1 (the NUL). A failed append leaves
 * len and the contents as they were, so callers can report "too large" and still use
 * what they have. */
#include "util/buf.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUF_MIN_ALLOC 64

void buf_init(struct buf *b, size_t max)
{
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	b->max = max;
}

void buf_free(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

/* Makes room for len + extra bytes and the NUL. The caller has checked the cap, so
 * len + extra <= max. */
static int buf_reserve(struct buf *b, size_t extra)
{
	size_t need = b->len + extra;
	size_t limit = b->max == SIZE_MAX ? SIZE_MAX : b->max + 1;
	size_t cap;
	char *p;

	if (need == SIZE_MAX)
		return -1; /* no room for the NUL */
	need++;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : BUF_MIN_ALLOC;
	while (cap < need)
		cap = cap > limit / 2 ? limit : cap * 2;
	if (cap > limit)
		cap = limit;
	p = realloc(b->data, cap);
	if (!p)
		return -1;
	if (!b->data)
		p[0] = '\0';
	b->data = p;
	b->cap = cap;
	return 0;
}

int buf_append(struct buf *b, const void *data, size_t len)
{
	if (len > b->max || b->len > b->max - len)
		return -1;
	if (buf_reserve(b, len) != 0)
		return -1;
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
	return 0;
}

int buf_appendf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -1;
	if ((size_t)n > b->max || b->len > b->max - (size_t)n)
		return -1;
	if (buf_reserve(b, (size_t)n) != 0)
		return -1;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}
