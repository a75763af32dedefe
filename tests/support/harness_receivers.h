/* harness_receivers.h: webhook receivers from real stacks for end-to-end tests, and wrk as
 * the yardstick of what each can carry.
 *
 * The receivers are the programs of tests/support/receivers/, started as child processes
 * on free ports: Python's http.server as a user writes it (HTTP/1.0, listen backlog 5, a
 * thread per connection), a queueing app server (W workers x a fixed work time, requests
 * waiting in the accept queue, like gunicorn's sync workers or Puma), Node's http module
 * (asynchronous, answers at once), and nginx from Debian in front of the app server (its
 * own prefix, temporary directories and port, as the current user). Each records every
 * request's webhook-id and outboxd-attempt and serves the record on a control port of its
 * own (nginx: the app server's), so reading it never waits behind the load.
 *
 * Children are registered with the harness (harness.h): killed at exit and when the test
 * process dies. Nothing here links daemon code. Not thread-safe: one test thread drives it.
 */
#ifndef OUTBOXD_TESTS_HARNESS_RECEIVERS_H
#define OUTBOXD_TESTS_HARNESS_RECEIVERS_H

#include <stddef.h>
#include <sys/types.h>

enum real_receiver_kind {
	REAL_PYTHON_HTTP_SERVER = 0, /* receivers/python_http_server.py */
	REAL_APP_SERVER,             /* receivers/app_server.py */
	REAL_NODE_HTTP,              /* receivers/node_server.js */
	REAL_NGINX_APP,              /* nginx proxying to receivers/app_server.py */
};

/* "python http.server", "app server", "node http", "nginx + app server". */
const char *real_receiver_name(enum real_receiver_kind kind);

/* Where the receivers' programs are (tests/support/receivers in the source tree), for a
 * test that starts one of the single-purpose ones itself. */
const char *real_receivers_dir(void);

/* The app server's shape (REAL_APP_SERVER, and the one behind REAL_NGINX_APP). */
struct real_receiver_opts {
	int workers;   /* 0 = 4 */
	int work_ms;   /* 0 = 20; < 0 = no work at all */
};

struct real_receiver {
	enum real_receiver_kind kind;
	pid_t pid;              /* the server (nginx's one process); 0 when not running */
	pid_t upstream_pid;     /* REAL_NGINX_APP: the app server behind it; else 0 */
	int port;
	int control_port;       /* the record's (REAL_NGINX_APP: the app server's) */
	char url[64];           /* "http://127.0.0.1:<port>": where deliveries go */
	char control_url[64];   /* "http://127.0.0.1:<control_port>" */
	char dir[256];          /* scratch directory: logs, nginx's prefix and temp dirs */
};

/* Starts a receiver of kind (opts NULL = defaults) and waits up to 10 s until it
 * answers. Overwrites *r. Returns 0, or -1 (its log tail printed; nothing left running).
 * The programs are found on PATH (python3, node, nginx; nginx also in /usr/sbin). */
int real_receiver_start(struct real_receiver *r, enum real_receiver_kind kind,
			const struct real_receiver_opts *opts);

/* SIGTERM and wait (SIGKILL after 5 s), then its directory goes (kept and named on
 * stderr when HARNESS_KEEP is set). Safe to call twice. */
void real_receiver_stop(struct real_receiver *r);

/* What a receiver recorded since it started or was reset. */
struct real_receiver_stats {
	long requests;            /* every request, with or without a webhook-id */
	long unique_ids;          /* distinct webhook-ids */
	long duplicates;          /* requests beyond the first of their webhook-id */
	long duplicates_retried;  /* of those, the ones whose outboxd-attempt no earlier
				   * request of the same id had: another try, which outboxd
				   * records (tries may arrive out of order) */
	long without_id;          /* requests without a webhook-id */
	long max_in_progress;     /* most requests its handlers held at once */
	long work_ms;             /* the app server's work per request; -1 for the others */
};

/* Reads the record. Returns 0, or -1 (printed). */
int real_receiver_stats(struct real_receiver *r, struct real_receiver_stats *out);

/* Clears the record. Returns 0, or -1. */
int real_receiver_reset(struct real_receiver *r);

/* The app server (also behind nginx): work_ms per request from the next request on (a
 * capacity drop mid-run, and its return). Returns 0, or -1 (other kinds, or refused). */
int real_receiver_set_work(struct real_receiver *r, int work_ms);

/* ---- wrk: the yardstick ---------------------------------------------------------------- */

#define WRK_RUNS_MAX 8

struct wrk_run {
	int connections;
	long requests;      /* answered (any status) */
	long non_2xx;       /* of which not 2xx */
	long socket_errors; /* connect, read, write errors and timeouts (not answered) */
	double seconds;     /* wrk's own measured duration */
	double rate;        /* 2xx answers per second */
};

struct wrk_best {
	struct wrk_run runs[WRK_RUNS_MAX];
	size_t n;
	double best_rate;     /* the highest rate of the runs */
	int best_connections; /* and its connection count */
};

/* Runs `wrk -t2 -c<n> -d<seconds>s --timeout 2s` with receivers/wrk_post.lua (POSTs of a
 * ~200-byte JSON body with an outboxd delivery's header set, each with its own webhook-id
 * and outboxd-attempt 1) against url,
 * once per connection count (NULL = 4, 16, 64, 256, 512; at most WRK_RUNS_MAX), one after
 * the other. *out (overwritten) holds each run and the best rate: what the receiver
 * carries at best on this machine now, the yardstick for outboxd's goodput measured in
 * the same test. Returns 0 when every run gave figures, -1 otherwise (printed). */
int wrk_best_rate(const char *url, const int *connections, size_t n, int seconds,
		  struct wrk_best *out);

#endif
