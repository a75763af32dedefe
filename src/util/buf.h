/* buf.h: a growing byte buffer with a hard cap (curl's dynbuf idea). */
#ifndef OUTBOXD_UTIL_BUF_H
#define OUTBOXD_UTIL_BUF_H

#include <stddef.h>

struct buf {
	char *data;     /* always NUL-terminated when non-NULL */
	size_t len;
	size_t cap;     /* allocated bytes */
	size_t max;     /* hard limit on len */
};

void buf_init(struct buf *b, size_t max);
void buf_free(struct buf *b);
void buf_reset(struct buf *b); /* len = 0, keeps memory */
/* Append; returns 0, or -1 when the cap would be exceeded or memory runs out (the
 * buffer is unchanged then). */
int buf_append(struct buf *b, const void *data, size_t len);
int buf_appendf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
