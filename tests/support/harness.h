/* harness.h: what end-to-end tests build on: free ports and scratch directories, the
 * test receiver and the outboxd daemon as child processes, and small HTTP helpers.
 *
 * Tests see outboxd only from outside, as a user does: through its binary ($OUTBOXD_BIN),
 * its environment and its HTTP API. Nothing here links daemon code.
 *
 * Every child the harness starts is registered; an atexit handler SIGKILLs whatever is
 * still running, and each child also gets PR_SET_PDEATHSIG=SIGKILL, so neither a failed
 * assertion nor a killed test binary leaves processes behind. PR_SET_PDEATHSIG fires when
 * the thread that forked exits: start children from the test's main thread.
 *
 * Not thread-safe unless noted: one test thread drives the harness.
 */
#ifndef OUTBOXD_TESTS_HARNESS_H
#define OUTBOXD_TESTS_HARNESS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cmocka.h>
#include <jansson.h>

#define HARNESS_ADMIN_TOKEN  "test-admin-token"
#define HARNESS_INGEST_TOKEN "test-ingest-token"

/* ---- processes, ports, files --------------------------------------------------------- */

/* A TCP port on 127.0.0.1 that was free a moment ago (bind port 0, read it, close).
 * Returns the port, or -1. */
int harness_free_port(void);

/* mkdtemp("/tmp/<prefix>-XXXXXX"); prefix NULL means "outboxd-test". Returns the path,
 * malloc'd and returned to the caller, or NULL. */
char *harness_tmpdir(const char *prefix);

/* rm -rf path (borrowed), without following symlinks. Returns 0, or -1 with errno. */
int harness_rmrf(const char *path);

/* A scratch directory a harness piece is done with: removed, or kept and named on stderr
 * (as "<who>: keeping DIR") when HARNESS_KEEP is set; dir is emptied either way. Nothing
 * when dir is empty. */
void harness_dir_done(const char *who, char *dir);

/* Milliseconds on CLOCK_MONOTONIC, for measuring waits in tests. */
int64_t harness_now_ms(void);

/* The value of one series of this process's metrics (core/metrics.h, as GET /metrics
 * renders them): series is the name with its labels, e.g.
 * "outboxd_http_requests_total{client=\"lean\"}"; -1 when it is not rendered. */
double harness_metric(const char *series);

/* Calls pred(ctx) every 20 ms until it returns non-zero. Returns 0 when it did, -1 when
 * timeout_ms passed first (pred is always tried once more at the deadline). */
int harness_wait(int (*pred)(void *ctx), void *ctx, int timeout_ms);

/* Writes the last max_bytes of the file at path to stderr, framed by a title line. */
void harness_print_tail(const char *path, size_t max_bytes);

/* Spawns bin (a path; argv[0] included, NULL-terminated, all borrowed) with the test's
 * environment, stdin /dev/null, stdout to out_fd and stderr to err_fd (-1: inherited),
 * registered like the receiver and the daemon (killed at exit and when the test process
 * dies). Returns the pid, or -1. */
pid_t harness_spawn(const char *bin, char *const argv[], int out_fd, int err_fd);

/* Sends sig to pid (from harness_spawn) and waits up to timeout_ms, then SIGKILLs it.
 * Returns its exit code (128 + signal when a signal ended it), or -1 when it had to be
 * SIGKILLed. */
int harness_stop(pid_t pid, int sig, int timeout_ms);

/* Waits up to timeout_ms for pid (from harness_spawn) to exit by itself, then SIGKILLs
 * it. Returns its exit code, or -1 when it had to be killed. */
int harness_reap(pid_t pid, int timeout_ms);

/* 1 when pid (from harness_spawn) has exited (reaped; its exit code in *code), 0 while
 * it runs. */
int harness_exited(pid_t pid, int *code);

/* ---- HTTP ---------------------------------------------------------------------------- */

struct http_resp {
	long status;            /* HTTP status; 0 when no response (transport error) */
	char *body;             /* NUL-terminated, never NULL after http_do; owned */
	size_t len;
	json_t *json;           /* the body parsed as JSON, else NULL; owned */
	json_t *headers;        /* response headers, lowercased name -> value; owned */
	int curl_code;          /* CURLcode; 0 when a response arrived */
	char error[256];        /* curl's message when curl_code != 0 */
};

/* Everything http_do_ex can send. Zero-initialise and set what you need. */
struct http_req {
	const char *method;             /* NULL = GET, or POST when body is set */
	const char *url;
	const char *token;              /* NULL = no Authorization header */
	const char *content_type;       /* NULL = application/json when body is set */
	const char *body;               /* NULL = no body */
	size_t len;
	const char *const *headers;     /* NULL-terminated "Name: value" lines, or NULL */
	long timeout_ms;                /* 0 = 30 s */
};

/* One request with libcurl, no proxy, no redirects followed. Every argument borrowed;
 * out is filled (free it with http_resp_free) even on failure. Returns 0 when a response
 * arrived, whatever its status; -1 on a transport error (status 0, curl_code and error
 * set): a refused connection, a timeout, a connection closed without a response.
 * Response bodies are capped at 64 MiB. https:// URLs are verified against the CA file
 * named by HARNESS_CA_FILE in the environment when set (else the system's). Thread-safe. */
int http_do(const char *method, const char *url, const char *token, const char *content_type,
	    const char *body, size_t len, struct http_resp *out);
int http_do_ex(const struct http_req *req, struct http_resp *out);

/* Frees what out owns and zeroes it; safe to call twice. */
void http_resp_free(struct http_resp *r);

/* ---- the test receiver (tests/support/receiver.c) ------------------------------------ */

struct receiver {
	pid_t pid;              /* 0 when not running */
	int port;
	char url[64];           /* "http://127.0.0.1:<port>", no trailing slash */
	char control_url[64];   /* TLS receivers: "http://127.0.0.1:<control port>"; else "" */
};

/* Spawns $RECEIVER_BIN --port <free port> [extra_args...] (extra_args NULL-terminated, or
 * NULL), its stdout to /dev/null and its stderr inherited, and waits up to 5 s until
 * GET /_control/stats answers. Overwrites *r. Returns 0, or -1 (nothing left running). */
int receiver_start(struct receiver *r);
int receiver_start_args(struct receiver *r, const char *const *extra_args);

/* Spawns an HTTPS receiver ($RECEIVER_BIN --tls-cert cert --tls-key key [--client-ca
 * client_ca] --control-port <free port>): url is "https://127.0.0.1:<port>", and the
 * control API (every receiver_* helper below) goes to control_url over plain HTTP, so the
 * harness needs no certificate. With client_ca (all paths borrowed; NULL for none) the
 * receiver refuses, in the TLS handshake, clients without a certificate signed by it.
 * Returns 0, or -1 (nothing left running). */
int receiver_start_tls(struct receiver *r, const char *cert, const char *key,
		       const char *client_ca);

/* SIGTERM and wait (SIGKILL after 5 s). Keeps port and url for receiver_restart. */
void receiver_stop(struct receiver *r);

/* Stops if running, then starts again on the same port with empty state (and without
 * extra arguments: a TLS receiver comes back as plain HTTP). Returns 0, or -1. */
int receiver_restart(struct receiver *r);

/* Replaces the script of path. script_json (borrowed) is either a JSON array of responses,
 * or an object {"responses":[...],"default":{...}}; a response is {"status":int,
 * "delay_ms":int, "drop":bool, "body":string, "headers":{...}, "echo":true|"body"},
 * every field optional; "echo" answers with the request as received (request line,
 * headers, blank line, body), or with its body alone, as the body.
 * Returns 0, or -1 (printed to stderr). */
int receiver_script(struct receiver *r, const char *path, const char *script_json);

/* Clears requests, counters and scripts. Returns 0, or -1. */
int receiver_reset(struct receiver *r);

/* The recorded requests on path (exact path, query string ignored; NULL = all), in arrival
 * order: the "requests" array, returned to the caller (json_decref it); NULL on error. */
json_t *receiver_requests(struct receiver *r, const char *path);

/* {"count","unique_ids","duplicates","first_us","last_us"} with count restricted to path
 * when path is not NULL; returned to the caller; NULL on error. */
json_t *receiver_stats(struct receiver *r, const char *path);

/* Requests received on path (NULL = all), or -1 on error. */
long receiver_count(struct receiver *r, const char *path);

/* Polls every 20 ms until receiver_count(r, path) >= n. Returns 0, or -1 on timeout. */
int receiver_wait_count(struct receiver *r, const char *path, long n, int timeout_ms);

/* ---- the daemon under test ($OUTBOXD_BIN) -------------------------------------------- */

struct daemon {
	pid_t pid;              /* 0 when not running */
	int port;
	char url[64];           /* "http://127.0.0.1:<port>" */
	char dir[256];          /* data directory; daemon.log lives here */
	char db[300];           /* the OUTBOXD_DB in use */
	char token[80];         /* the admin token in use */
	int exit_code;          /* the exit code when the last daemon_start saw the process
	                           end during its start, -1 otherwise */
};

/* Starts `$OUTBOXD_BIN serve`. Zero-initialise d before the first call: it then creates
 * the data directory (unless d->dir is set) and picks a free port (unless d->port is set);
 * later calls restart on the same directory and port. The environment is the test's own
 * (ASan settings included), then OUTBOXD_DB=sqlite:<dir>/outboxd.db (with
 * OUTBOXD_TEST_BACKEND=postgres: a fresh database on the test process's PostgreSQL
 * server, see harness_pg.h, kept across restarts of d), OUTBOXD_LISTEN=127.0.0.1:<port>,
 * OUTBOXD_ADMIN_TOKEN=test-admin-token, OUTBOXD_INGEST_TOKEN=test-ingest-token,
 * OUTBOXD_DATA_DIR=<dir>, then env: a NULL-terminated list of "KEY=VALUE"
 * (borrowed, may be NULL) that overrides all of those (OUTBOXD_TLS_CERT makes d->url
 * https://), where a bare "KEY" removes KEY from
 * the environment; d->db, d->port and d->token follow the overrides (token "" when
 * OUTBOXD_ADMIN_TOKEN is removed). stdout and stderr are appended to <dir>/daemon.log.
 * Waits up to 10 s for GET /healthz to answer 200. Returns 0; -1 if the process exits or
 * does not get healthy in time (it is killed and the log tail printed to stderr). */
int daemon_start(struct daemon *d, const char *const *env);

/* SIGTERM, then waits up to 15 s. Returns the exit status (128 + signal if a signal ended
 * it, 0 if it was not running), or -1 when it had to be SIGKILLed. */
int daemon_stop(struct daemon *d);

/* SIGKILL and reap: a crash, as far as the daemon can tell. */
void daemon_kill9(struct daemon *d);

/* Stops the daemon if it runs and removes its directory (kept, and named on stderr, when
 * HARNESS_KEEP is set in the environment); d can be started afresh after a memset to
 * zero. */
void daemon_cleanup(struct daemon *d);

/* "<dir>/daemon.log" into buf (size bytes, truncated if short). Returns buf. */
char *daemon_log_path(const struct daemon *d, char *buf, size_t size);

/* One API call on d with its admin token (api_call) or with token, NULL for none
 * (api_call_as). body_json (borrowed) may be NULL. Fails the current cmocka test at the
 * caller's line, printing method, path, status and body, unless the status equals
 * expect_status. Returns the parsed body, returned to the caller (json_decref it); NULL
 * when the body is not JSON. */
#define api_call(d, method, path, body_json, expect_status) \
	api_call_at((d), true, NULL, (method), (path), (body_json), (expect_status), \
		    __FILE__, __LINE__)
#define api_call_as(d, token, method, path, body_json, expect_status) \
	api_call_at((d), false, (token), (method), (path), (body_json), (expect_status), \
		    __FILE__, __LINE__)
json_t *api_call_at(struct daemon *d, bool admin, const char *token, const char *method,
		    const char *path, const char *body_json, long expect_status,
		    const char *file, int line);

#endif
