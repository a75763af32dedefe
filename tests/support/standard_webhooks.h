/* standard_webhooks.h: the tests' one check of a Standard Webhooks signature, made the way
 * a subscriber verifies a request it received.
 *
 * A request is genuine when its webhook-signature header (space-separated entries
 * "v1,<base64>") holds the base64 of HMAC-SHA256(key, "<webhook-id>.<webhook-timestamp>.
 * <body>"), key being the base64-decoded part of the "whsec_..." secret, and its
 * webhook-timestamp is Unix seconds within a tolerance of now (a replay window). It is
 * written from the specification alone and shares no code with outboxd's signer
 * (src/deliver/sign.c), so a mistake there cannot hide itself here. */
#ifndef OUTBOXD_TESTS_STANDARD_WEBHOOKS_H
#define OUTBOXD_TESTS_STANDARD_WEBHOOKS_H

#include <stddef.h>
#include <stdint.h>

/* The tolerance Standard Webhooks' reference libraries use. */
#define STANDARD_WEBHOOKS_TOLERANCE_S 300

enum standard_webhooks_result {
	SWH_OK = 0,
	SWH_BAD_SECRET,         /* not base64 (after an optional whsec_), or an empty key */
	SWH_MISSING_HEADER,     /* no webhook-id, webhook-timestamp or webhook-signature */
	SWH_BAD_TIMESTAMP,      /* not Unix seconds in decimal digits */
	SWH_STALE_TIMESTAMP,    /* further from now than the tolerance, either way */
	SWH_NO_SIGNATURE,       /* no v1 entry in webhook-signature */
	SWH_MISMATCH,           /* no v1 entry is the signature of this request */
	SWH_NO_MEMORY,
};

/* A request as received; every field borrowed. id, timestamp and signature are the
 * header values (NULL when absent); body is the raw body, any length. */
struct standard_webhooks_request {
	const char *id;
	const char *timestamp;
	const char *signature;
	const void *body;
	size_t body_len;
};

/* What the header held, filled by a verification whatever its result. */
struct standard_webhooks_match {
	int index;              /* which entry matched (0 = the first), -1 when none */
	int count;              /* how many entries the header holds (any version) */
};

/* Checks req against secret ("whsec_<base64>", or the base64 alone) at now_s (Unix
 * seconds), allowing tolerance_s either way. Compares in constant time; every v1 entry is
 * tried, any base64 padding of the secret accepted. match may be NULL. Returns SWH_OK or
 * the first rule broken, in the order of the enum. */
enum standard_webhooks_result standard_webhooks_verify(const struct standard_webhooks_request *req,
						       const char *secret, int64_t now_s,
						       int64_t tolerance_s,
						       struct standard_webhooks_match *match);

/* A short English description of r, for a failing assertion's message. */
const char *standard_webhooks_strerror(enum standard_webhooks_result r);

#endif
