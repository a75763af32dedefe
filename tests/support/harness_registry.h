/* harness_registry.h: a Confluent-compatible Schema Registry for end-to-end tests —
 * tests/support/schema_registry.py (Python's http.server) as a child process on a local
 * port, started, stopped and started again on the same port, and what it recorded.
 *
 * Children are registered with the harness (harness.h): killed at exit and when the test
 * process dies. Nothing here links daemon code. Not thread-safe. */
#ifndef OUTBOXD_TESTS_HARNESS_REGISTRY_H
#define OUTBOXD_TESTS_HARNESS_REGISTRY_H

#include <sys/types.h>

struct test_registry {
	pid_t pid;            /* 0 when not running */
	int port;
	int first_id;         /* the id its first schema gets */
	char basic_auth[64];  /* "user:password" it requires; "" = none */
	char url[128];        /* "http://127.0.0.1:<port>" */
	char dir[256];        /* scratch directory: its log */
};

/* Starts the registry on port (0: a free one) giving ids from first_id, requiring
 * basic_auth ("user:password", NULL: none), and waits up to 10 s until it answers.
 * Overwrites *r. Returns 0, or -1 (its log tail printed; nothing left running). */
int test_registry_start(struct test_registry *r, int port, int first_id,
			const char *basic_auth);

/* Stops the process (SIGTERM, SIGKILL after 5 s); its port and settings stay in *r, so
 * test_registry_restart brings it back at the same address. */
void test_registry_halt(struct test_registry *r);

/* Starts it again on its port with its settings, its record empty. Returns 0 or -1. */
int test_registry_restart(struct test_registry *r);

/* test_registry_halt, then its directory goes. Safe to call twice. */
void test_registry_stop(struct test_registry *r);

/* on: registrations wait, unanswered (up to 60 s), until called again with off. Returns 0,
 * or -1 (printed). */
int test_registry_hold(struct test_registry *r, int on);

/* POST /subjects/SUBJECT/versions it answered with an id since it (re)started, or -1
 * when its record cannot be read (printed). */
long test_registry_registrations(struct test_registry *r, const char *subject);

#endif
