/* sign.h: Standard Webhooks signatures (webhook-signature: v1,<base64 HMAC-SHA256>). */
#ifndef OUTBOXD_DELIVER_SIGN_H
#define OUTBOXD_DELIVER_SIGN_H

#include <stddef.h>
#include <stdint.h>

#define SIGN_V1_LEN 64 /* "v1," + 44 base64 characters + NUL, rounded up */
#define SIGN_HEADER_LEN (2 * SIGN_V1_LEN) /* two signatures, space-separated */

/* Writes "v1,<base64(HMAC-SHA256(key, msg_id.timestamp.body))>" into out, where key is
 * the base64 part of secret ("whsec_..."), decoded. Returns 0, or -1 when the secret is
 * malformed. */
int sign_standard_v1(const char *secret, const char *msg_id, int64_t timestamp,
		     const void *body, size_t len, char out[SIGN_V1_LEN]);

/* The webhook-signature header value: the signature with secret, followed, when previous
 * is not NULL (a rotation's grace period), by a space and the signature with previous —
 * receivers accept the request when any one of them verifies. Returns 0, or -1 when a
 * secret is malformed. */
int sign_webhook_signature(const char *secret, const char *previous, const char *msg_id,
			   int64_t timestamp, const void *body, size_t len,
			   char out[SIGN_HEADER_LEN]);

#endif
