/* admin.h: the commands that work on the settings and the store themselves, not through
 * the API, for deployments and packaging:
 *
 *   outboxd check-config [settings]   validate, print the effective settings (secrets masked)
 *   outboxd migrate [settings]        apply the store's schema migrations, then exit
 *
 * Both take serve's settings (flags, environment, --config FILE), loaded by the caller. */
#ifndef OUTBOXD_CLI_ADMIN_H
#define OUTBOXD_CLI_ADMIN_H

#include <stddef.h>
#include <stdio.h>

#include "core/config.h"

/* What serve checks of its settings before it opens anything, beyond config_load:
 * log_level, log_format, the db URL's scheme, that listen's host resolves to an address
 * of this machine's kind, that the API's TLS files can be read, and that librdkafka
 * accepts kafka_config. serve and check-config both call it, so check-config is valid
 * exactly when serve would start past its settings. 0, or -1 with a message naming the
 * setting in err (never a secret). */
int admin_settings_check(const struct config *cfg, char *err, size_t errlen);

/* admin_settings_check, then the effective settings printed to out. Returns 0, or 1 after
 * a message on stderr naming the bad setting. cfg is borrowed. */
int admin_check_config(const struct config *cfg, FILE *out);

/* As root, refuses (-1, the reason and the command to run instead in err) to work on a
 * store that belongs to another user: the data directory, or the SQLite file or the
 * folder it would be created in, owned by that user. Files root made there (a migrated
 * store, its journal, secret.key) could not be opened by the service afterwards, and
 * the unit would restart in a loop. 0 when not root, or when root owns them. command
 * is the subcommand, for the message ("migrate"). */
int admin_store_owner_check(const struct config *cfg, const char *command, char *err,
			    size_t errlen);

/* Opens the store of cfg->db, which applies the migrations it lacks (each is logged),
 * and closes it: no thread is started, nothing is served. SQLite: refused while another
 * outboxd holds the store. Returns 0, or 1 after a message on stderr. */
int admin_migrate(const struct config *cfg);

void admin_check_config_usage(FILE *out);
void admin_migrate_usage(FILE *out);

#endif
