/* redact.h: the one redaction of the HTTP sink — every credential of a subscription, in
 * every encoding it travels in, replaced by "********" in any text that can reach an
 * attempt's cause, the API or the log: a subscriber's or a token endpoint's answer that
 * quotes the request, a library's message that quotes a URL.
 *
 * A credential is looked for as given (what an endpoint that decodes shows), percent-
 * encoded as outboxd sends it in a URL or a form (and with lower-case hex digits, and
 * '+' for a space, as other encoders write it), as a JSON string (escaped as jansson,
 * Python or Go write one), and as the base64 of the Basic credentials that carry it
 * (user:password, the OAuth2 client's form-encoded id:secret). Every byte of every
 * occurrence is covered, and a run of covered bytes becomes one mask, so occurrences
 * that overlap or nest leave nothing of either behind. A text cut short (a cause keeps the first KiB of a body) may end inside a credential: a tail
 * of REDACT_TAIL_MIN or more characters that begins one is replaced too.
 *
 * Pure: no I/O. A set owns copies of what it holds and wipes them when cleared. */
#ifndef OUTBOXD_DELIVER_REDACT_H
#define OUTBOXD_DELIVER_REDACT_H

#include <stddef.h>

#include "core/model.h"

#define REDACT_MASK "********"
#define REDACT_TAIL_MIN 4  /* shortest cut-off start of a credential replaced at the end */

struct redact_set {
	char **text;            /* owned */
	size_t *len;
	size_t n, cap;
};

/* An empty set (also what a zeroed struct is). */
void redact_init(struct redact_set *r);

/* Adds secret (borrowed; NULL or "" is ignored) in every encoding above but base64.
 * Returns 0, or -1 when memory ran out (what was added still counts). */
int redact_add_secret(struct redact_set *r, const char *secret);

/* Adds the len bytes at text as they are (a Basic header's base64). 0 or -1 as above. */
int redact_add_exact(struct redact_set *r, const char *text, size_t len);

/* Adds the credentials an OAuth2 token request carries: client_secret, password, and the
 * base64 of its Basic header. 0 or -1 as above. */
int redact_add_oauth2(struct redact_set *r, const struct oauth2_params *p);

/* Adds every credential of s: auth's (basic also as base64 of user:password; oauth2 as
 * redact_add_oauth2) and the values of its secret headers. 0 or -1 as above. */
int redact_add_subscription(struct redact_set *r, const struct subscription *s);

/* Writes the len bytes at in to out (size bytes, NUL-terminated, cut to fit) with every
 * text of r replaced by REDACT_MASK, and a cut-off start of one at the end. Returns the
 * length written. */
size_t redact_copy(const struct redact_set *r, const char *in, size_t len, char *out,
		   size_t size);

/* redact_copy of text (NUL-terminated, in a buffer of size bytes) onto itself. */
void redact_apply(const struct redact_set *r, char *text, size_t size);

/* Wipes and frees what r holds; r is empty again. */
void redact_clear(struct redact_set *r);

#endif
