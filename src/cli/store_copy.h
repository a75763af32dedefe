/* store_copy.h: `outboxd store copy` and `outboxd store verify` — moving a store from one
 * backend to the other (the embedded SQLite file to PostgreSQL as a deployment grows to
 * several instances, or back), with outboxd stopped.
 *
 * copy opens both stores as the daemon would (the target gets its backend's migrations),
 * refuses a target that holds rows unless told to add to it (and then any key both hold),
 * copies every table a transaction per batch keeping ids, times, statuses, attempt
 * histories, sealed subscription configs (ciphertext: the same secret key opens them),
 * token hashes, audit entries and jobs, clears leases so any instance may claim, and ends
 * with verify. verify compares each table's row count and a SHA-256 of its rows read back
 * through each backend, prints them and fails on any difference. Like spool_cmd.c, this
 * works on the stores directly, not through the API. */
#ifndef OUTBOXD_CLI_STORE_COPY_H
#define OUTBOXD_CLI_STORE_COPY_H

#include <stdio.h>

/* Runs `outboxd store <argv...>` (argv[0] is copy or verify). Returns the exit code: 0
 * copied and verified (or verified), 1 refused, failed, or a table differs, 2 bad usage. */
int store_cmd_main(int argc, char **argv);

/* The usage text of `outboxd store`. */
void store_cmd_usage(FILE *out);

#endif
