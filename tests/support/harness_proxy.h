/* harness_proxy.h: a real egress proxy for end-to-end tests — Debian's tinyproxy, an HTTP
 * proxy that opens CONNECT tunnels, started as the current user on a free port of
 * 127.0.0.1 with a configuration and a log of its own in a scratch directory, stopped
 * and removed by egress_proxy_stop (and killed with the test process, as every child of
 * the harness). Its log says what it was asked for. */
#ifndef OUTBOXD_TESTS_HARNESS_PROXY_H
#define OUTBOXD_TESTS_HARNESS_PROXY_H

#include <sys/types.h>

struct egress_proxy {
	pid_t pid;              /* 0 when not running */
	int port;
	char url[64];           /* "http://127.0.0.1:<port>" */
	char *dir;              /* its configuration and log (owned) */
};

/* Starts it and waits up to 5 s until it accepts connections. 0, or -1 (printed). */
int egress_proxy_start(struct egress_proxy *p);

/* Stops it and removes its directory. */
void egress_proxy_stop(struct egress_proxy *p);

/* The CONNECT requests its log shows for target ("host:port" as asked; NULL: any), or -1
 * when the log cannot be read. */
long egress_proxy_connects(const struct egress_proxy *p, const char *target);

#endif
