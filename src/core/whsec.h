/* whsec.h: Standard Webhooks signing secrets, "whsec_" followed by the base64 of the key.
 * One reader of the format for the subscription codec (validation) and the signer (the
 * key), one writer for generated secrets. */
#ifndef OUTBOXD_CORE_WHSEC_H
#define OUTBOXD_CORE_WHSEC_H

#include <stddef.h>

#define WHSEC_PREFIX "whsec_"
#define WHSEC_KEY_MIN 16   /* bytes: a shorter key is refused */
#define WHSEC_KEY_MAX 192  /* bytes: a longer key is refused */

/* Decodes secret's key into key (WHSEC_KEY_MAX bytes) and *len. Returns 0, or -1 when
 * secret is not "whsec_" + base64 of WHSEC_KEY_MIN..WHSEC_KEY_MAX bytes. The caller
 * cleanses key after use. */
int whsec_decode(const char *secret, unsigned char key[WHSEC_KEY_MAX], size_t *len);

/* A fresh secret of n random bytes (n <= WHSEC_KEY_MAX) into out (returned; malloc'd),
 * or NULL when the random source or memory fails. */
char *whsec_generate(size_t n);

#endif
