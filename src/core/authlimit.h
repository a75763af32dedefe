/* authlimit.h: failed authentications on the API, per source address.
 *
 * The API counts every request whose token is missing, unknown or expired against the
 * address it came from. An address with AUTHLIMIT_FAILURES failures within
 * AUTHLIMIT_WINDOW_MS is limited for the next AUTHLIMIT_WINDOW_MS: its failed requests
 * are answered 429 with Retry-After instead of 401 (requests with a valid token are never
 * refused here, so clients sharing the address with a guesser keep working). This also
 * bounds what failures cost: at most AUTHLIMIT_FAILURES audit rows per address and window,
 * and AUTHLIMIT_AUDIT_PER_MINUTE for every address together; the metric counts them all.
 *
 * Pure: the caller passes the time (ms) and the address as text. Thread-safe (one mutex).
 * Memory is fixed: AUTHLIMIT_SLOTS addresses are remembered; when the table is full, the
 * address seen least recently among those it would share a place with is forgotten. */
#ifndef OUTBOXD_CORE_AUTHLIMIT_H
#define OUTBOXD_CORE_AUTHLIMIT_H

#include <stdint.h>

#define AUTHLIMIT_FAILURES 10
#define AUTHLIMIT_WINDOW_MS 60000
#define AUTHLIMIT_AUDIT_PER_MINUTE 60
#define AUTHLIMIT_SLOTS 4096

struct authlimit;

/* What one failure means for its address. */
struct authlimit_verdict {
	int limited;              /* answer 429: the address is over its limit */
	int retry_after_s;        /* with limited: seconds until it is not (>= 1) */
	int started;              /* this failure put the address over its limit */
	int audit;                /* write this failure (or the start of the limit) to the
	                             audit log and the log */
	long unaudited;           /* failures left out of the audit log in the minute that
	                             just ended (a new minute began with this failure): say
	                             so once; 0 otherwise */
};

/* A table with nothing recorded (returned; NULL when out of memory). hash_key keys the
 * table's hash: pass a random value, so that addresses cannot be chosen to push others
 * out. */
struct authlimit *authlimit_new(uint32_t hash_key);
void authlimit_free(struct authlimit *l);

/* Records one failed authentication from addr (borrowed; NULL or "" counts as one
 * unknown address) at now_ms and fills *v. */
void authlimit_fail(struct authlimit *l, const char *addr, int64_t now_ms,
		    struct authlimit_verdict *v);

#endif
