/* serve.h: `outboxd serve`, the daemon (serve.c: open, start, wait, stop). */
#ifndef OUTBOXD_SERVE_H
#define OUTBOXD_SERVE_H

/* Runs the daemon with the settings of argv (the flags after "serve"), the environment
 * and the configuration file until SIGTERM or SIGINT. Returns the exit status: 0 after a
 * clean stop, 2 for settings that a restart cannot fix (bad values, another key than the
 * store's, a store owned by another user while root), 1 for anything else. */
int serve_main(int argc, char **argv, const char *version);

#endif
