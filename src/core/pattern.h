/* pattern.h: event-type glob matching for subscriptions ("user.*"; "*" is all).
 * Pure: no allocation, no I/O. */
#ifndef OUTBOXD_CORE_PATTERN_H
#define OUTBOXD_CORE_PATTERN_H

#include <stdbool.h>

/* True when event_type matches pattern. '*' matches any run of characters (including
 * dots and the empty run), '?' any one character; everything else literally. */
bool pattern_match(const char *pattern, const char *event_type);

/* True when pattern is acceptable in a subscription: non-empty, at most 255 bytes,
 * printable ASCII without spaces. */
bool pattern_valid(const char *pattern);

#endif
