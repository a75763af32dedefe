/* sub_codec_int.h: what the subscription codec's two files share: sub_codec.c (the field
 * table, parsing, validation) and sub_prepare.c (reads with their masks, what a create or
 * PATCH does before parsing: generated secrets, kept credentials, the merge patch). */
#ifndef OUTBOXD_CORE_SUB_CODEC_INT_H
#define OUTBOXD_CORE_SUB_CODEC_INT_H

#include <jansson.h>

#define MASK "********"
#define SECRET_MASK "whsec_" MASK
#define SECRET_GRACE_DEFAULT_MS (24 * 3600 * 1000LL)
#define SECRET_GRACE_MAX_MS (30 * 24 * 3600 * 1000LL)
#define GENERATED_SECRET_BYTES 32

#define DISABLE_AFTER_MAX_MS (365 * 86400000LL)

/* the keys of tls and the auth fields that hold credentials (masked on every read) */
extern const char *const sub_tls_keys[];
extern const char *const sub_auth_secret_keys[];

int sub_string_is(const json_t *v, const char *s);
int sub_header_is_secret(const char *name, const json_t *v);
int sub_header_masked(const json_t *v);

#endif
