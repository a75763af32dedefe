/* secretbox.h: sealing text at rest with AES-256-GCM (OpenSSL EVP) — the subscriptions'
 * credentials in the store. Pure: no files, no store, no logging; the key comes from the
 * caller (cli/secret_key.c finds it, store/secrets.c uses it).
 *
 * A sealed text is one line of ASCII:
 *
 *     obx1:<key id>:<base64(nonce | ciphertext | tag)>
 *
 * obx1 the format's version; key id the first 8 hex digits of SHA-256(key), so a row
 * names the key that sealed it (a wrong key is told apart from a damaged row, and a
 * rotation can be resumed row by row); nonce 12 random bytes, tag 16 bytes. The
 * additional authenticated data is the text before the base64 ("obx1:<key id>:")
 * followed by the caller's context (the subscription id): the version and key id cannot
 * be altered, and a ciphertext copied to another row does not open there. Random
 * 96-bit nonces are safe for far more than the 2^32 seals per key GCM allows; a
 * subscription is sealed once per write. */
#ifndef OUTBOXD_CORE_SECRETBOX_H
#define OUTBOXD_CORE_SECRETBOX_H

#include <stddef.h>

#define SECRETBOX_KEY_LEN 32      /* AES-256 */
#define SECRETBOX_KEY_ID_LEN 8    /* hex digits */
#define SECRETBOX_PREFIX "obx1:"
/* The largest text sealed or opened (a subscription document is bounded by the API's
 * max_request far below this); keeps every length inside OpenSSL's int. */
#define SECRETBOX_MAX_TEXT (64u << 20)

struct secretbox_key {
	unsigned char bytes[SECRETBOX_KEY_LEN];
	char id[SECRETBOX_KEY_ID_LEN + 1];  /* hex, NUL-terminated */
};

enum secretbox_err {
	SECRETBOX_OK = 0,
	SECRETBOX_MALFORMED,     /* looks sealed ("obxN:") but cannot be read */
	SECRETBOX_UNSUPPORTED,   /* sealed in a format version this outboxd does not read */
	SECRETBOX_OTHER_KEY,     /* sealed under another key id */
	SECRETBOX_AUTH_FAILED,   /* the tag does not verify: another key with the same id,
	                            a changed text, or a text moved from another row */
	SECRETBOX_ERROR,         /* out of memory, no randomness, or the library failed */
};

const char *secretbox_strerror(int err);

/* Reads a key: 64 hex digits, or standard base64 (padded) of 32 bytes; spaces and line
 * ends around it are ignored. Returns 0, or -1 with a message in err that says what is
 * wrong without repeating the text (it may be a key). */
int secretbox_key_parse(const char *text, struct secretbox_key *out, char *err, size_t errlen);

/* A key from 32 bytes (id computed). */
void secretbox_key_from_bytes(const unsigned char bytes[SECRETBOX_KEY_LEN],
			      struct secretbox_key *out);

/* A fresh random key. Returns 0, or -1 when the random source fails. */
int secretbox_key_generate(struct secretbox_key *out);

/* The key as 64 lowercase hex digits and a NUL (the key file's format). */
void secretbox_key_hex(const struct secretbox_key *key, char out[2 * SECRETBOX_KEY_LEN + 1]);

/* Overwrites the key (OPENSSL_cleanse). */
void secretbox_key_clear(struct secretbox_key *key);

/* 1 when text is in a sealed format ("obx" + version digits + ':'), of any version;
 * anything else (a JSON document) is clear text. */
int secretbox_is_sealed(const char *text);

/* The key id of a sealed text into id; 0, or -1 when text is not readable as sealed. */
int secretbox_sealed_key_id(const char *text, char id[SECRETBOX_KEY_ID_LEN + 1]);

/* Seals len bytes of plain under key, bound to context (borrowed, NUL-terminated; e.g.
 * the subscription id). *out is the sealed text (returned; free it). SECRETBOX_OK or
 * SECRETBOX_ERROR. */
int secretbox_seal(const struct secretbox_key *key, const char *context, const void *plain,
		   size_t len, char **out);

/* Opens a sealed text with key and the context it was sealed with. *plain receives the
 * clear text, NUL-terminated (returned; the caller frees it, after cleansing it if it
 * should not linger), *len its length (may be NULL). Returns one of enum secretbox_err;
 * nothing is returned unless the tag verified. */
int secretbox_open(const struct secretbox_key *key, const char *context, const char *sealed,
		   char **plain, size_t *len);

#endif
