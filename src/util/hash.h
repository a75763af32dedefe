/* hash.h: FNV-1a over a NUL-terminated string or a span, for the small in-memory tables
 * keyed by subscription id (dispatcher state, metrics) or endpoint host:port (the lean HTTP
 * client's targets). Not for anything an attacker chooses freely. */
#ifndef OUTBOXD_UTIL_HASH_H
#define OUTBOXD_UTIL_HASH_H

#include <stddef.h>
#include <stdint.h>

/* The same over the n bytes at s (a span of a longer string). */
static inline uint32_t hash_fnv1a_n(const char *s, size_t n)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 16777619u;
	return h;
}

static inline uint32_t hash_fnv1a(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

#endif
