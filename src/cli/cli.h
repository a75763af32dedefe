/* cli.h: the operator command line — `outboxd <group> <command>` calls the HTTP API.
 *
 * Everything an operator does in an incident (find failures, look at one, replay,
 * purge) works from a terminal: readable tables by default, the API's own JSON with
 * --json, and exit codes scripts can rely on (see cli_main). */
#ifndef OUTBOXD_CLI_CLI_H
#define OUTBOXD_CLI_CLI_H

#include <stdio.h>

/* Exit codes. */
enum cli_exit {
	CLI_OK = 0,
	CLI_API_ERROR = 1,      /* the API answered with an error (4xx/5xx) */
	CLI_USAGE = 2,          /* bad command line */
	CLI_UNREACHABLE = 3,    /* no answer from the API */
};

/* Runs the command in argv[0..argc) (argv[0] is the group, e.g. "dlq"). Returns one of
 * enum cli_exit. */
int cli_main(int argc, char **argv);

/* True when name is a command group the CLI handles. */
int cli_is_group(const char *name);

/* One line per command group ("  dlq          the dead-letter queue: ..."), for the
 * daemon's own usage text. */
void cli_print_groups(FILE *out);

#endif
