/* harness_pg.h: a throwaway PostgreSQL server for tests.
 *
 * pg_server_start makes a cluster in a fresh /tmp/outboxd-pg-XXXXXX (initdb once per
 * installation and server user; later servers copy that first cluster, kept as
 * /tmp/outboxd-pginit-*), then runs the postmaster on a free 127.0.0.1 port with its
 * socket in that directory, trust authentication for user postgres, and the default
 * durability (fsync and synchronous_commit on; only initdb's own flush of the template
 * files is skipped). The binaries are the newest
 * /usr/lib/postgresql/<version>/bin, or $OUTBOXD_TEST_PG_BIN. PostgreSQL refuses to run
 * as root: as root, the server runs as user outboxd-test if it exists, else nobody, else
 * a user outboxd-test created with useradd; the directory is handed to that user.
 *
 * No test leaves a server behind: an atexit handler stops every server still running
 * (fast shutdown) and removes its directory, the postmaster gets PR_SET_PDEATHSIG=SIGQUIT
 * (an immediate shutdown when the test process dies; start servers from the main thread),
 * and the next start removes directories left by test processes that no longer exist.
 *
 * Not thread-safe: one test thread drives it. */
#ifndef OUTBOXD_TESTS_HARNESS_PG_H
#define OUTBOXD_TESTS_HARNESS_PG_H

#include <stddef.h>
#include <sys/types.h>

struct pg_server {
	pid_t pid;              /* the postmaster; 0 when not running */
	int port;
	char dir[256];          /* data/, the socket, postgres.log */
	char bindir[256];
	char admin_dsn[160];    /* postgres://postgres@127.0.0.1:<port>/postgres */
	uid_t uid;              /* who the server runs as (when run_as is set) */
	gid_t gid;
	int run_as;
};

/* Zero-initialise s, then start: initdb and a running server, ready for connections,
 * within 30 s. After pg_server_halt, starts the same cluster again on the same port.
 * Returns 0, or -1 (the log tail printed to stderr; nothing left running). */
int pg_server_start(struct pg_server *s);

/* Fast shutdown (pg_ctl stop -m fast); the data directory stays for pg_server_start. */
int pg_server_halt(struct pg_server *s);

/* An outage: halt, stay down for down_ms, start again. Returns 0, or -1. */
int pg_server_restart(struct pg_server *s, int down_ms);

/* Fast shutdown, then removes the directory (kept when HARNESS_KEEP is set). */
void pg_server_stop(struct pg_server *s);

/* CREATE DATABASE name (letters, digits, '_') and its DSN into dsn. Returns 0, or -1. */
int pg_server_create_db(struct pg_server *s, const char *name, char *dsn, size_t dsnlen);

/* ---- for end-to-end tests ---------------------------------------------------------- */

/* Whether daemons of this test process run on PostgreSQL: OUTBOXD_TEST_BACKEND=postgres. */
int harness_pg_wanted(void);

/* The test process's own server, started on first use and stopped at exit; NULL when it
 * cannot start. */
struct pg_server *harness_pg(void);

/* A fresh database on harness_pg() and its DSN. Returns 0, or -1. */
int harness_pg_fresh_db(char *dsn, size_t dsnlen);

#endif
