/* spool_cmd.h: `outboxd spool inspect FILE` and `outboxd spool replay FILE` — the
 * operator's side of the catastrophic-failure spool (store/spool.h): the daemon that
 * wrote a spool puts it into the store by itself once the store is back; these commands
 * do it by hand when the failure persists or that daemon will not run again
 * (docs/reference.md, "Catastrophic-failure retry: the spool").
 *
 * inspect lists what a spool, or a `.corrupt-*` copy of a damaged tail, holds, without
 * changing it; replay re-inserts its good records into the store named by serve's
 * settings, idempotently (events keep their ids: those already stored are skipped), and
 * may run beside a daemon on the same store, which then delivers what was inserted. Like
 * secret_key.c, this works on the store and the file directly, not through the API: the
 * file may come from a machine that is gone. Neither ever writes, moves or deletes the
 * file. */
#ifndef OUTBOXD_CLI_SPOOL_CMD_H
#define OUTBOXD_CLI_SPOOL_CMD_H

#include <stdio.h>

#include "core/config.h"

/* Loads serve's settings from argv's flags (the config file and environment too) into
 * cfg: 0, or -1 after printing why (cfg freed). cli/settings.h's settings_load_for_store. */
typedef int (*spool_cmd_settings_fn)(int argc, char **argv, struct config *cfg);

/* Runs `outboxd spool <argv...>` (argv[0] is inspect or replay). Returns the exit code:
 * 0 done; 1 the file cannot be read, or replay could not apply every good record (the
 * store failed, or a record cannot be decoded: says which); 2 bad usage. */
int spool_cmd_main(int argc, char **argv, spool_cmd_settings_fn load_settings);

/* The usage text of `outboxd spool`. */
void spool_cmd_usage(FILE *out);

#endif
