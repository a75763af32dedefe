/* harness_registry.c: starts, reads and stops tests/support/schema_registry.py (see
 * harness_registry.h). It only spawns the script and speaks HTTP to it: it must never
 * link daemon code nor change how the registry answers. */
#include "harness_registry.h"

#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#ifndef SUPPORT_DIR
#error "SUPPORT_DIR (tests/support) is set by CMakeLists.txt"
#endif

#define START_MS 10000
#define STOP_MS  5000
#define PROBE_MS 300
#define POLL_MS  20

/* GET /_control/stats: the parsed record (returned), or NULL. */
static json_t *stats_get(const struct test_registry *r, long timeout_ms, int quiet)
{
	struct http_req req = {.method = "GET", .timeout_ms = timeout_ms};
	struct http_resp resp;
	char url[192];
	json_t *j = NULL;

	snprintf(url, sizeof(url), "%s/_control/stats", r->url);
	req.url = url;
	http_do_ex(&req, &resp);
	if (resp.status == 200 && resp.json) {
		j = resp.json;
		resp.json = NULL;
	} else if (!quiet) {
		fprintf(stderr, "harness_registry: GET %s: %ld %s\n", url, resp.status,
			resp.status ? resp.body : resp.error);
	}
	http_resp_free(&resp);
	return j;
}

static void log_tail(const struct test_registry *r)
{
	char path[320];
	snprintf(path, sizeof(path), "%s/registry.log", r->dir);
	harness_print_tail(path, 4096);
}

/* Spawns the script with r's settings and waits until it answers. 0 or -1. */
static int spawn_and_wait(struct test_registry *r)
{
	char path[512], log[320], port_s[16], first_s[16];
	char *argv[10];
	size_t n = 0;
	int fd, code;

	snprintf(path, sizeof(path), "%s/schema_registry.py", SUPPORT_DIR);
	snprintf(log, sizeof(log), "%s/registry.log", r->dir);
	snprintf(port_s, sizeof(port_s), "%d", r->port);
	snprintf(first_s, sizeof(first_s), "%d", r->first_id);
	argv[n++] = "/usr/bin/python3";
	argv[n++] = path;
	argv[n++] = "--port";
	argv[n++] = port_s;
	argv[n++] = "--first-id";
	argv[n++] = first_s;
	if (r->basic_auth[0]) {
		argv[n++] = "--basic-auth";
		argv[n++] = r->basic_auth;
	}
	argv[n] = NULL;
	fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "harness_registry: %s: %s\n", log, strerror(errno));
		return -1;
	}
	r->pid = harness_spawn(argv[0], argv, fd, fd);
	close(fd);
	if (r->pid <= 0) {
		r->pid = 0;
		return -1;
	}
	for (int64_t deadline = harness_now_ms() + START_MS; harness_now_ms() < deadline;) {
		if (harness_exited(r->pid, &code)) {
			fprintf(stderr, "harness_registry: exited with %d during start\n", code);
			r->pid = 0;
			log_tail(r);
			return -1;
		}
		json_t *stats = stats_get(r, PROBE_MS, 1);
		if (stats) {
			json_decref(stats);
			return 0;
		}
		usleep(POLL_MS * 1000);
	}
	fprintf(stderr, "harness_registry: no answer within %d ms\n", START_MS);
	log_tail(r);
	test_registry_halt(r);
	return -1;
}

int test_registry_start(struct test_registry *r, int port, int first_id,
			const char *basic_auth)
{
	char *dir = harness_tmpdir("outboxd-registry");

	memset(r, 0, sizeof(*r));
	if (!dir)
		return -1;
	snprintf(r->dir, sizeof(r->dir), "%s", dir);
	free(dir);
	r->port = port > 0 ? port : harness_free_port();
	r->first_id = first_id;
	if (basic_auth)
		snprintf(r->basic_auth, sizeof(r->basic_auth), "%s", basic_auth);
	snprintf(r->url, sizeof(r->url), "http://127.0.0.1:%d", r->port);
	if (r->port <= 0 || spawn_and_wait(r)) {
		test_registry_stop(r);
		return -1;
	}
	return 0;
}

void test_registry_halt(struct test_registry *r)
{
	if (r->pid > 0)
		harness_stop(r->pid, SIGTERM, STOP_MS);
	r->pid = 0;
}

int test_registry_restart(struct test_registry *r)
{
	test_registry_halt(r);
	return spawn_and_wait(r);
}

void test_registry_stop(struct test_registry *r)
{
	test_registry_halt(r);
	harness_dir_done("harness_registry", r->dir);
}

int test_registry_hold(struct test_registry *r, int on)
{
	struct http_req req = {.method = "POST", .body = "{}", .len = 2, .timeout_ms = 10000};
	struct http_resp resp;
	char url[192];
	snprintf(url, sizeof(url), "%s/_control/%s", r->url, on ? "hold" : "release");
	req.url = url;
	http_do_ex(&req, &resp);
	int ok = resp.status == 200;
	if (!ok)
		fprintf(stderr, "harness_registry: POST %s: %ld %s\n", url, resp.status,
			resp.status ? resp.body : resp.error);
	http_resp_free(&resp);
	return ok ? 0 : -1;
}

long test_registry_registrations(struct test_registry *r, const char *subject)
{
	json_t *stats = stats_get(r, 10000, 0);
	if (!stats)
		return -1;
	json_t *v = json_object_get(json_object_get(stats, "registrations"), subject);
	long n = json_is_integer(v) ? (long)json_integer_value(v) : 0;
	json_decref(stats);
	return n;
}
