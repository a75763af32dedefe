/* errmap.h: map transport failures to HTTP-like codes (DNS 502, refused 503, timeout 504,
 * TLS 525, other 520), as the reference architecture's delivery client does.
 * The dispatcher turns a libcurl result into one of these classes; this file knows no
 * curl. */
#ifndef OUTBOXD_CORE_ERRMAP_H
#define OUTBOXD_CORE_ERRMAP_H

enum transport_error {
	TRANSPORT_OK = 0,
	TRANSPORT_DNS,        /* name could not be resolved        -> 502 */
	TRANSPORT_REFUSED,    /* connection refused / unreachable  -> 503 */
	TRANSPORT_TIMEOUT,    /* no answer within the timeout      -> 504 */
	TRANSPORT_TLS,        /* TLS handshake or verification     -> 525 */
	TRANSPORT_OTHER,      /* anything else (reset, empty reply) -> 520 */
};

/* The mapped code for a transport failure (0 for TRANSPORT_OK). */
int errmap_code(enum transport_error e);

/* A short stable message for the failure class, e.g. "connection refused". */
const char *errmap_message(enum transport_error e);

#endif
