/* secret_key.h: the key that seals subscription credentials in the store
 * (core/secretbox.h, store/secrets.c), on the operator's side: where `outboxd serve`
 * finds it — the secret_key setting, else DATA_DIR/secret.key, generated on the first
 * start — and `outboxd rotate-key`, which re-seals every subscription under a new key.
 * Unlike the rest of cli/, both work on the store directly, not through the API: a
 * rotation runs while outboxd is stopped. No key is ever printed or logged; messages
 * name key ids (the first 8 hex digits of SHA-256 of the key). */
#ifndef OUTBOXD_CLI_SECRET_KEY_H
#define OUTBOXD_CLI_SECRET_KEY_H

#include <stdio.h>

#include "core/config.h"
#include "store/store.h"

#define SECRET_KEY_FILE "secret.key"
/* The new key of a rotation, kept here from before the first row is re-sealed until
 * the last one is, then renamed over SECRET_KEY_FILE: an interrupted rotation never
 * loses the key that part of the rows are sealed with. */
#define SECRET_KEY_PENDING "secret.key.new"

/* For `outboxd serve`, with st open and nothing started yet: finds cfg's key (creating
 * the key file on the first start, mode 0600, synced), gives it to st, checks that every
 * sealed subscription opens with it and seals those still in clear
 * (store_secrets_prepare), and logs what it did. Returns 0, or -1 after logging why the
 * daemon must not start. */
int secret_key_serve(const struct config *cfg, store *st);

/* `outboxd rotate-key`: cfg holds serve's settings (db, secret_key, data_dir), new_key
 * (borrowed) the --new-secret-key text or NULL. Prints what it did and what the operator
 * does next. Returns the exit code: 0, 1 (failed: nothing is lost, says why), 2 (bad
 * arguments). */
int secret_key_rotate(const struct config *cfg, const char *new_key);

/* The usage text of `outboxd rotate-key`. */
void secret_key_rotate_usage(FILE *out);

#endif
