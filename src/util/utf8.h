/* utf8.h: how much of a byte string is valid UTF-8, for text that must be UTF-8 where it
 * goes (PostgreSQL's text columns, protobuf's strings) but comes from outside. */
#ifndef OUTBOXD_UTIL_UTF8_H
#define OUTBOXD_UTIL_UTF8_H

#include <stddef.h>

/* Length of the longest prefix of t[0..len) that is valid UTF-8: no overlong two-byte
 * form, no sequence cut short, no stray continuation byte. */
size_t utf8_valid_prefix(const unsigned char *t, size_t len);

#endif
