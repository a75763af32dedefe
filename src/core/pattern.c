/* pattern.c: event-type glob matching for subscriptions.
 *
 * Iterative matcher with a single backtrack point (the last '*' seen): a later star
 * supersedes an earlier one, so the work is O(len(pattern) * len(event_type)) at worst
 * and never recursive. No allocation, no I/O. */
#include "core/pattern.h"

#include <stddef.h>
#include <string.h>

#define PATTERN_MAX_LEN 255

bool pattern_match(const char *pattern, const char *event_type)
{
	const char *p = pattern;
	const char *s = event_type;
	const char *star = NULL;  /* position just after the last '*' in pattern */
	const char *resume = NULL; /* where in s that star's run currently ends */

	if (!pattern || !event_type)
		return false;

	while (*s) {
		if (*p == '*') {
			while (*p == '*')
				p++;
			if (!*p)
				return true; /* a trailing star swallows the rest */
			star = p;
			resume = s;
		} else if (*p == '?' || *p == *s) {
			p++;
			s++;
		} else if (star) {
			/* Let the last star absorb one more character and retry from there. */
			p = star;
			s = ++resume;
		} else {
			return false;
		}
	}
	while (*p == '*')
		p++;
	return *p == '\0';
}

bool pattern_valid(const char *pattern)
{
	size_t n;

	if (!pattern)
		return false;
	n = strnlen(pattern, PATTERN_MAX_LEN + 1);
	if (n == 0 || n > PATTERN_MAX_LEN)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)pattern[i];

		if (c <= 0x20 || c >= 0x7f)
			return false;
	}
	return true;
}
