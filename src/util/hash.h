/* hash.h: FNV-1a over a NUL-terminated string, for the small in-memory tables keyed by
 * subscription id (dispatcher state, metrics). Not for anything an attacker chooses. */
#ifndef OUTBOXD_UTIL_HASH_H
#define OUTBOXD_UTIL_HASH_H

#include <stdint.h>

static inline uint32_t hash_fnv1a(const char *s)
{
	uint32_t h = 2166136261u;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 16777619u;
	return h;
}

#endif
