/* harness_receivers.c: starts, reads and stops the receivers of tests/support/receivers/
 * and runs wrk against them (see harness_receivers.h for each function's contract).
 *
 * It only spawns programs and speaks HTTP to them: it must never link daemon code nor
 * change how a receiver answers (the record is read on its own control port).
 */
#include "harness_receivers.h"

#include "harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#ifndef RECEIVERS_DIR
#error "RECEIVERS_DIR (tests/support/receivers) is set by CMakeLists.txt"
#endif

#define START_MS        10000
#define STOP_MS         5000
#define PROBE_MS        300
#define POLL_MS         20
#define LOG_TAIL        4096
#define DEFAULT_WORKERS 4
#define DEFAULT_WORK_MS 20
#define WRK_SLACK_S     30     /* beyond -d: wrk's start, its last timeouts, its report */

static const int wrk_default_connections[] = {4, 16, 64, 256, 512};

const char *real_receivers_dir(void)
{
	return RECEIVERS_DIR;
}

const char *real_receiver_name(enum real_receiver_kind kind)
{
	switch (kind) {
	case REAL_PYTHON_HTTP_SERVER: return "python http.server";
	case REAL_APP_SERVER: return "app server";
	case REAL_NODE_HTTP: return "node http";
	case REAL_NGINX_APP: return "nginx + app server";
	}
	return "unknown";
}

/* The path of program name: the first executable on PATH, else fallback (may be NULL).
 * Returns 0 with the path in out, or -1. */
static int program_find(const char *name, const char *fallback, char *out, size_t len)
{
	const char *path = getenv("PATH");

	while (path && *path) {
		size_t n = strcspn(path, ":");

		if (n > 0 && (size_t)snprintf(out, len, "%.*s/%s", (int)n, path, name) < len &&
		    access(out, X_OK) == 0)
			return 0;
		path += n + (path[n] == ':');
	}
	if (fallback && access(fallback, X_OK) == 0) {
		snprintf(out, len, "%s", fallback);
		return 0;
	}
	fprintf(stderr, "harness_receivers: %s is not installed (scripts/deps.sh installs it)\n",
		name);
	return -1;
}

/* A log file in dir, opened for the child's stdout and stderr. Returns the fd, or -1. */
static int log_open(const char *dir, const char *name)
{
	char path[320];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		fprintf(stderr, "harness_receivers: %s: %s\n", path, strerror(errno));
	return fd;
}

static void log_tail(const char *dir, const char *name)
{
	char path[320];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	harness_print_tail(path, LOG_TAIL);
}

static pid_t spawn_logged(const char *bin, char *const argv[], const char *dir,
			  const char *log_name)
{
	int fd = log_open(dir, log_name);
	pid_t pid;

	if (fd < 0)
		return -1;
	pid = harness_spawn(bin, argv, fd, fd);
	close(fd);
	return pid;
}

/* GET or POST <control_url><path>; the parsed JSON of a 200 answer (returned to the
 * caller), or NULL. quiet: no message on failure (while waiting for a start). */
static json_t *control_call(const struct real_receiver *r, const char *method,
			    const char *path, long timeout_ms, int quiet)
{
	struct http_req req = {.method = method, .timeout_ms = timeout_ms};
	struct http_resp resp;
	char url[256];
	json_t *j = NULL;

	snprintf(url, sizeof(url), "%s%s", r->control_url, path);
	req.url = url;
	if (strcmp(method, "POST") == 0) {
		req.body = "{}";
		req.len = 2;
	}
	http_do_ex(&req, &resp);
	if (resp.status == 200 && resp.json) {
		j = resp.json;
		resp.json = NULL;
	} else if (!quiet) {
		fprintf(stderr, "harness_receivers: %s %s: %ld %s\n", method, url, resp.status,
			resp.status ? resp.body : resp.error);
	}
	http_resp_free(&resp);
	return j;
}

/* Does something accept TCP connections on 127.0.0.1:port? */
static int port_listening(int port)
{
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok;

	if (fd < 0)
		return 0;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ok = connect(fd, (struct sockaddr *)&addr, sizeof(addr)) == 0;
	close(fd);
	return ok;
}

/* Waits until the recorder answers on the control port and, for nginx, until nginx
 * accepts connections; fails early when a child exits. Returns 0, or -1. */
static int wait_ready(struct real_receiver *r)
{
	int64_t deadline = harness_now_ms() + START_MS;
	int code;

	while (harness_now_ms() < deadline) {
		pid_t server = r->upstream_pid ? r->upstream_pid : r->pid;
		json_t *stats;

		if (harness_exited(r->pid, &code)) {
			fprintf(stderr, "harness_receivers: %s exited with %d during start\n",
				real_receiver_name(r->kind), code);
			r->pid = 0;
			return -1;
		}
		if (r->upstream_pid && harness_exited(r->upstream_pid, &code)) {
			fprintf(stderr, "harness_receivers: the app server behind nginx exited "
				"with %d during start\n", code);
			r->upstream_pid = 0;
			return -1;
		}
		stats = server > 0 ? control_call(r, "GET", "/_control/stats", PROBE_MS, 1) : NULL;
		json_decref(stats);
		if (stats && (r->kind != REAL_NGINX_APP || port_listening(r->port)))
			return 0;
		usleep(POLL_MS * 1000);
	}
	fprintf(stderr, "harness_receivers: %s did not answer within %d ms\n",
		real_receiver_name(r->kind), START_MS);
	return -1;
}

/* The app server (or another recorder script) on port with its control on cport. */
static pid_t script_spawn(const struct real_receiver *r, const char *script, int port,
			  int cport, const struct real_receiver_opts *opts)
{
	int node = strstr(script, ".js") != NULL;
	char bin[512], path[512], port_s[16], cport_s[16], workers_s[16], work_s[16];
	char *argv[14];
	size_t n = 0;

	if (program_find(node ? "node" : "python3", node ? "/usr/bin/node" : "/usr/bin/python3",
			 bin, sizeof(bin)) != 0)
		return -1;
	snprintf(path, sizeof(path), "%s/%s", RECEIVERS_DIR, script);
	snprintf(port_s, sizeof(port_s), "%d", port);
	snprintf(cport_s, sizeof(cport_s), "%d", cport);
	argv[n++] = bin;
	if (!node)
		argv[n++] = "-B"; /* no __pycache__ in the source tree */
	argv[n++] = path;
	argv[n++] = "--port";
	argv[n++] = port_s;
	argv[n++] = "--control-port";
	argv[n++] = cport_s;
	if (opts) {
		snprintf(workers_s, sizeof(workers_s), "%d",
			 opts->workers > 0 ? opts->workers : DEFAULT_WORKERS);
		snprintf(work_s, sizeof(work_s), "%d",
			 opts->work_ms == 0 ? DEFAULT_WORK_MS : opts->work_ms < 0 ? 0 : opts->work_ms);
		argv[n++] = "--workers";
		argv[n++] = workers_s;
		argv[n++] = "--work-ms";
		argv[n++] = work_s;
	}
	argv[n] = NULL;
	return spawn_logged(bin, argv, r->dir, node ? "node.log" : "python.log");
}

/* nginx as the current user: its own prefix, temp dirs, pid and error log in dir, one
 * process (master_process off: nothing outlives it when it is killed), proxying every
 * request to the app server on upstream_port, as nginx in front of gunicorn does. */
static pid_t nginx_spawn(const struct real_receiver *r, int upstream_port)
{
	char bin[512], conf[320], err_log[320], prefix[300];
	char *argv[] = {bin, "-p", prefix, "-c", conf, "-e", err_log, NULL};
	FILE *f;

	if (program_find("nginx", "/usr/sbin/nginx", bin, sizeof(bin)) != 0)
		return -1;
	snprintf(prefix, sizeof(prefix), "%s/", r->dir);
	snprintf(conf, sizeof(conf), "%s/nginx.conf", r->dir);
	snprintf(err_log, sizeof(err_log), "%s/nginx-error.log", r->dir);
	f = fopen(conf, "w");
	if (!f) {
		fprintf(stderr, "harness_receivers: %s: %s\n", conf, strerror(errno));
		return -1;
	}
	fprintf(f,
		"# written by tests/support/harness_receivers.c for one test run\n"
		"daemon off;\n"
		"master_process off;\n"
		"pid %s/nginx.pid;\n"
		"error_log %s warn;\n"
		"events { worker_connections 4096; }\n"
		"http {\n"
		"    access_log off;\n"
		"    client_body_temp_path %s/client_body;\n"
		"    proxy_temp_path %s/proxy;\n"
		"    fastcgi_temp_path %s/fastcgi;\n"
		"    uwsgi_temp_path %s/uwsgi;\n"
		"    scgi_temp_path %s/scgi;\n"
		"    upstream app { server 127.0.0.1:%d; }\n"
		"    server {\n"
		"        listen 127.0.0.1:%d;\n"
		"        location / { proxy_pass http://app; }\n"
		"    }\n"
		"}\n",
		r->dir, err_log, r->dir, r->dir, r->dir, r->dir, r->dir, upstream_port, r->port);
	if (fclose(f) != 0)
		return -1;
	return spawn_logged(bin, argv, r->dir, "nginx.log");
}

static void children_stop(struct real_receiver *r)
{
	if (r->pid > 0)
		harness_stop(r->pid, SIGTERM, STOP_MS);
	if (r->upstream_pid > 0)
		harness_stop(r->upstream_pid, SIGTERM, STOP_MS);
	r->pid = 0;
	r->upstream_pid = 0;
}

/* One try on fresh ports. Returns 0, or -1 with nothing left running. */
static int start_once(struct real_receiver *r, const struct real_receiver_opts *opts)
{
	struct real_receiver_opts app = opts ? *opts : (struct real_receiver_opts){0};
	int upstream_port = 0;

	r->port = harness_free_port();
	r->control_port = harness_free_port();
	if (r->kind == REAL_NGINX_APP)
		upstream_port = harness_free_port();
	if (r->port <= 0 || r->control_port <= 0 || r->port == r->control_port ||
	    (r->kind == REAL_NGINX_APP && (upstream_port <= 0 || upstream_port == r->port ||
					   upstream_port == r->control_port)))
		return -1;
	snprintf(r->url, sizeof(r->url), "http://127.0.0.1:%d", r->port);
	snprintf(r->control_url, sizeof(r->control_url), "http://127.0.0.1:%d", r->control_port);
	switch (r->kind) {
	case REAL_PYTHON_HTTP_SERVER:
		r->pid = script_spawn(r, "python_http_server.py", r->port, r->control_port, NULL);
		break;
	case REAL_APP_SERVER:
		r->pid = script_spawn(r, "app_server.py", r->port, r->control_port, &app);
		break;
	case REAL_NODE_HTTP:
		r->pid = script_spawn(r, "node_server.js", r->port, r->control_port, NULL);
		break;
	case REAL_NGINX_APP:
		r->upstream_pid = script_spawn(r, "app_server.py", upstream_port, r->control_port,
					       &app);
		if (r->upstream_pid > 0)
			r->pid = nginx_spawn(r, upstream_port);
		break;
	}
	if (r->pid <= 0 || (r->kind == REAL_NGINX_APP && r->upstream_pid <= 0) ||
	    wait_ready(r) != 0) {
		if (r->pid < 0)
			r->pid = 0;
		if (r->upstream_pid < 0)
			r->upstream_pid = 0;
		children_stop(r);
		return -1;
	}
	return 0;
}

int real_receiver_start(struct real_receiver *r, enum real_receiver_kind kind,
			const struct real_receiver_opts *opts)
{
	char *dir;

	memset(r, 0, sizeof(*r));
	r->kind = kind;
	dir = harness_tmpdir("outboxd-rx");
	if (!dir)
		return -1;
	snprintf(r->dir, sizeof(r->dir), "%s", dir);
	free(dir);
	/* A free port can be taken between our probe and the server's bind: try again. */
	for (int attempt = 0; attempt < 3; attempt++) {
		if (start_once(r, opts) == 0)
			return 0;
	}
	log_tail(r->dir, kind == REAL_NODE_HTTP ? "node.log" : "python.log");
	if (kind == REAL_NGINX_APP)
		log_tail(r->dir, "nginx-error.log");
	harness_rmrf(r->dir);
	r->dir[0] = '\0';
	return -1;
}

void real_receiver_stop(struct real_receiver *r)
{
	children_stop(r);
	harness_dir_done("harness_receivers", r->dir);
}

static long field_long(json_t *doc, const char *name, long missing)
{
	json_t *v = json_object_get(doc, name);

	return json_is_integer(v) ? (long)json_integer_value(v) : missing;
}

int real_receiver_stats(struct real_receiver *r, struct real_receiver_stats *out)
{
	json_t *doc = control_call(r, "GET", "/_control/stats", 10000, 0);

	memset(out, 0, sizeof(*out));
	if (!doc)
		return -1;
	out->requests = field_long(doc, "requests", -1);
	out->unique_ids = field_long(doc, "unique_ids", -1);
	out->duplicates = field_long(doc, "duplicates", -1);
	out->duplicates_retried = field_long(doc, "duplicates_retried", -1);
	out->without_id = field_long(doc, "without_id", -1);
	out->max_in_progress = field_long(doc, "max_in_progress", -1);
	out->work_ms = field_long(doc, "work_ms", -1);
	json_decref(doc);
	return out->requests < 0 ? -1 : 0;
}

int real_receiver_reset(struct real_receiver *r)
{
	json_t *doc = control_call(r, "POST", "/_control/reset", 10000, 0);

	json_decref(doc);
	return doc ? 0 : -1;
}

int real_receiver_set_work(struct real_receiver *r, int work_ms)
{
	char path[64];
	json_t *doc;
	int ok;

	if (r->kind != REAL_APP_SERVER && r->kind != REAL_NGINX_APP) {
		fprintf(stderr, "harness_receivers: %s has no work time to set\n",
			real_receiver_name(r->kind));
		return -1;
	}
	snprintf(path, sizeof(path), "/_control/work?ms=%d", work_ms < 0 ? 0 : work_ms);
	doc = control_call(r, "POST", path, 10000, 0);
	ok = doc && field_long(doc, "work_ms", -1) == (work_ms < 0 ? 0 : work_ms);
	json_decref(doc);
	return ok ? 0 : -1;
}

/* ---- wrk ---------------------------------------------------------------------------- */

/* One wrk run; its figures into *run. Returns 0, or -1 (printed). */
static int wrk_once(const char *wrk, const char *dir, const char *url, int connections,
		    int seconds, int serial, struct wrk_run *run)
{
	char script[512], conns_s[16], dur_s[16], tag[48], out_path[320], line[512] = "";
	char *argv[] = {(char *)wrk, "-t2", "-c", conns_s, "-d", dur_s, "--timeout", "2s",
			"-s", script, (char *)url, "--", tag, NULL};
	json_error_t err;
	json_t *doc;
	FILE *f;
	pid_t pid;
	int fd, code;

	snprintf(script, sizeof(script), "%s/wrk_post.lua", RECEIVERS_DIR);
	snprintf(conns_s, sizeof(conns_s), "%d", connections < 2 ? 2 : connections);
	snprintf(dur_s, sizeof(dur_s), "%ds", seconds);
	/* webhook-ids unique across runs of this process and across processes */
	snprintf(tag, sizeof(tag), "%d-%d-%d", (int)getpid(), serial, connections);
	snprintf(out_path, sizeof(out_path), "%s/wrk-%d.txt", dir, serial);
	fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		fprintf(stderr, "harness_receivers: %s: %s\n", out_path, strerror(errno));
		return -1;
	}
	pid = harness_spawn(wrk, argv, fd, fd);
	close(fd);
	if (pid < 0)
		return -1;
	code = harness_reap(pid, (seconds + WRK_SLACK_S) * 1000);
	f = fopen(out_path, "r");
	while (f && fgets(line, sizeof(line), f)) {
		if (line[0] == '{')
			break;
		line[0] = '\0';
	}
	if (f)
		fclose(f);
	doc = line[0] == '{' ? json_loads(line, 0, &err) : NULL;
	if (code != 0 || !doc) {
		fprintf(stderr, "harness_receivers: wrk -c%d %s: exit %d, no figures\n", connections,
			url, code);
		harness_print_tail(out_path, LOG_TAIL);
		json_decref(doc);
		return -1;
	}
	run->connections = connections;
	run->requests = field_long(doc, "requests", 0);
	run->non_2xx = field_long(doc, "status_errors", 0);
	run->socket_errors = field_long(doc, "socket_errors", 0);
	run->seconds = (double)field_long(doc, "duration_us", 0) / 1e6;
	run->rate = run->seconds > 0 ? (double)(run->requests - run->non_2xx) / run->seconds : 0;
	json_decref(doc);
	return 0;
}

int wrk_best_rate(const char *url, const int *connections, size_t n, int seconds,
		  struct wrk_best *out)
{
	static int serial;
	char wrk[512];
	char *dir;
	int ret = 0;

	memset(out, 0, sizeof(*out));
	if (!connections) {
		connections = wrk_default_connections;
		n = sizeof(wrk_default_connections) / sizeof(wrk_default_connections[0]);
	}
	if (n > WRK_RUNS_MAX)
		n = WRK_RUNS_MAX;
	if (program_find("wrk", "/usr/bin/wrk", wrk, sizeof(wrk)) != 0)
		return -1;
	dir = harness_tmpdir("outboxd-wrk");
	if (!dir)
		return -1;
	for (size_t i = 0; i < n; i++) {
		struct wrk_run *run = &out->runs[out->n];

		if (wrk_once(wrk, dir, url, connections[i], seconds < 1 ? 1 : seconds, ++serial,
			     run) != 0) {
			ret = -1;
			continue;
		}
		if (run->rate > out->best_rate) {
			out->best_rate = run->rate;
			out->best_connections = run->connections;
		}
		out->n++;
	}
	harness_rmrf(dir);
	free(dir);
	return ret;
}
