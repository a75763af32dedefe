/* settings.h: the settings of the commands that take serve's (serve, check-config,
 * migrate, rotate-key, spool replay): defaults, then the configuration file (--config,
 * OUTBOXD_CONFIG, or the installed default), then the environment, then the flags after
 * the command (core/config.h). A secret given as a flag is warned about once. */
#ifndef OUTBOXD_CLI_SETTINGS_H
#define OUTBOXD_CLI_SETTINGS_H

#include "core/config.h"

/* The settings into cfg. 0, or -1 after printing why on stderr (cfg freed). */
int settings_load(int argc, char **argv, struct config *cfg);

/* settings_load for a command that writes the store (command names it in messages): as
 * root, refused on a store that belongs to another user, the service's
 * (admin_store_owner_check). 0, or -1 after printing why (cfg freed). */
int settings_load_for_store(int argc, char **argv, struct config *cfg, const char *command);

#endif
