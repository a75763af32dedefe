/* harness.c: child processes (receiver, daemon), scratch files and HTTP helpers for
 * end-to-end tests. See harness.h for the contract of each function.
 *
 * It drives outboxd strictly from outside (binary, environment, HTTP) and must never link
 * daemon code, so a test cannot pass because of a shortcut the user does not have.
 */
#include "harness.h"
#include "harness_pg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "core/metrics.h"

#define MAX_CHILDREN        64
#define POLL_MS             20
#define RESPONSE_MAX        (64u << 20)
#define RECEIVER_START_MS   5000
#define RECEIVER_STOP_MS    5000
#define DAEMON_START_MS     10000
#define DAEMON_STOP_MS      15000
#define PROBE_TIMEOUT_MS    1000
#define MAX_EXTRA_ARGS      16
#define LOG_TAIL_BYTES      8192
#define DEFAULTS            6       /* settings daemon_defaults gives every daemon */

extern char **environ;

/* ---- child registry ------------------------------------------------------------------ */

static pthread_mutex_t children_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t children[MAX_CHILDREN];
static pthread_once_t children_once = PTHREAD_ONCE_INIT;

/* atexit: a test that failed half-way must not leave a daemon or receiver running. */
static void children_kill_all(void)
{
	pthread_mutex_lock(&children_lock);
	for (int i = 0; i < MAX_CHILDREN; i++) {
		if (children[i] > 0) {
			kill(children[i], SIGKILL);
			waitpid(children[i], NULL, 0);
			children[i] = 0;
		}
	}
	pthread_mutex_unlock(&children_lock);
}

static void children_init(void)
{
	atexit(children_kill_all);
}

static void children_add(pid_t pid)
{
	pthread_mutex_lock(&children_lock);
	for (int i = 0; i < MAX_CHILDREN; i++) {
		if (children[i] == 0) {
			children[i] = pid;
			pthread_mutex_unlock(&children_lock);
			return;
		}
	}
	pthread_mutex_unlock(&children_lock);
	fprintf(stderr, "harness: more than %d children; pid %d is not tracked\n",
		MAX_CHILDREN, (int)pid);
}

static void children_remove(pid_t pid)
{
	pthread_mutex_lock(&children_lock);
	for (int i = 0; i < MAX_CHILDREN; i++) {
		if (children[i] == pid)
			children[i] = 0;
	}
	pthread_mutex_unlock(&children_lock);
}

/* fork + execve. out_fd/err_fd become the child's stdout/stderr (-1 = inherit); stdin is
 * /dev/null. All arguments borrowed. Returns the pid, or -1. */
static pid_t child_spawn(const char *bin, char *const argv[], char *const envp[], int out_fd,
			 int err_fd)
{
	static const char exec_failed[] = "harness: execve failed\n";
	pid_t parent = getpid();
	int null_fd;
	pid_t pid;

	pthread_once(&children_once, children_init);
	null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null_fd < 0) {
		perror("harness: /dev/null");
		return -1;
	}
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		perror("harness: fork");
		close(null_fd);
		return -1;
	}
	if (pid == 0) {
		sigset_t none;

		/* Only async-signal-safe calls from here to execve. */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		dup2(null_fd, 0);
		if (out_fd >= 0)
			dup2(out_fd, 1);
		if (err_fd >= 0)
			dup2(err_fd, 2);
		close_range(3, ~0u, 0);
		execve(bin, argv, envp);
		if (write(2, exec_failed, sizeof(exec_failed) - 1) < 0)
			_exit(127);
		_exit(127);
	}
	close(null_fd);
	children_add(pid);
	return pid;
}

/* Reaps pid if it has exited. Returns 1 with *status set when it has, 0 while it runs. */
static int child_reaped(pid_t pid, int *status)
{
	pid_t r = waitpid(pid, status, WNOHANG);

	if (r == pid || (r < 0 && errno == ECHILD)) {
		if (r < 0)
			*status = 0;
		children_remove(pid);
		return 1;
	}
	return 0;
}

static void sleep_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* Sends sig and waits up to timeout_ms. Returns 1 with *status when it exited, 0 when it
 * had to be SIGKILLed (and reaped) after the timeout. */
static int child_stop(pid_t pid, int sig, int timeout_ms, int *status)
{
	int64_t deadline = harness_now_ms() + timeout_ms;

	kill(pid, sig);
	while (harness_now_ms() < deadline) {
		if (child_reaped(pid, status))
			return 1;
		sleep_ms(10);
	}
	if (child_reaped(pid, status))
		return 1;
	kill(pid, SIGKILL);
	waitpid(pid, status, 0);
	children_remove(pid);
	return 0;
}

static int exit_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return -1;
}

pid_t harness_spawn(const char *bin, char *const argv[], int out_fd, int err_fd)
{
	return child_spawn(bin, argv, environ, out_fd, err_fd);
}

int harness_exited(pid_t pid, int *code)
{
	int status;

	if (!child_reaped(pid, &status))
		return 0;
	*code = exit_code(status);
	return 1;
}

int harness_stop(pid_t pid, int sig, int timeout_ms)
{
	int status;

	if (!child_stop(pid, sig, timeout_ms, &status))
		return -1;
	return exit_code(status);
}

int harness_reap(pid_t pid, int timeout_ms)
{
	int64_t deadline = harness_now_ms() + timeout_ms;
	int status;

	while (harness_now_ms() < deadline) {
		if (child_reaped(pid, &status))
			return exit_code(status);
		sleep_ms(10);
	}
	harness_stop(pid, SIGKILL, 1000);
	return -1;
}

/* ---- ports, files, time -------------------------------------------------------------- */

int64_t harness_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

double harness_metric(const char *series)
{
	char *text = NULL, key[256];
	size_t len = 0;
	double v = -1;

	if (metrics_render(&text, &len) != 0)
		return -1;
	/* at the start of a line and followed by the value: not a longer name, not HELP */
	snprintf(key, sizeof(key), "\n%s ", series);
	const char *at = strstr(text, key);
	if (at)
		v = strtod(at + strlen(key), NULL);
	free(text);
	return v;
}

int harness_free_port(void)
{
	struct sockaddr_in addr;
	socklen_t len = sizeof(addr);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int port = -1;

	if (fd < 0) {
		perror("harness: socket");
		return -1;
	}
	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) != 0) {
		perror("harness: bind");
		goto out;
	}
	if (getsockname(fd, (struct sockaddr *)&addr, &len) != 0) {
		perror("harness: getsockname");
		goto out;
	}
	port = ntohs(addr.sin_port);
out:
	close(fd);
	return port;
}

char *harness_tmpdir(const char *prefix)
{
	char path[256];
	char *dir;

	if (snprintf(path, sizeof(path), "/tmp/%s-XXXXXX",
		     prefix ? prefix : "outboxd-test") >= (int)sizeof(path)) {
		fprintf(stderr, "harness: tmpdir prefix too long\n");
		return NULL;
	}
	if (!mkdtemp(path)) {
		perror("harness: mkdtemp");
		return NULL;
	}
	dir = strdup(path);
	if (!dir)
		rmdir(path);
	return dir;
}

static int rmrf_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

void harness_dir_done(const char *who, char *dir)
{
	if (!dir[0])
		return;
	if (getenv("HARNESS_KEEP"))
		fprintf(stderr, "%s: keeping %s (HARNESS_KEEP)\n", who, dir);
	else
		harness_rmrf(dir);
	dir[0] = '\0';
}

int harness_rmrf(const char *path)
{
	if (nftw(path, rmrf_cb, 16, FTW_DEPTH | FTW_PHYS) != 0) {
		int err = errno;

		if (err == ENOENT)
			return 0;
		fprintf(stderr, "harness: rm -rf %s: %s\n", path, strerror(err));
		errno = err;
		return -1;
	}
	return 0;
}

int harness_wait(int (*pred)(void *ctx), void *ctx, int timeout_ms)
{
	int64_t deadline = harness_now_ms() + timeout_ms;

	for (;;) {
		int64_t left;

		if (pred(ctx))
			return 0;
		left = deadline - harness_now_ms();
		if (left <= 0)
			return -1;
		sleep_ms(left < POLL_MS ? left : POLL_MS);
	}
}

void harness_print_tail(const char *path, size_t max_bytes)
{
	char buf[4096];
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		fprintf(stderr, "harness: %s: %s\n", path, strerror(errno));
		return;
	}
	if (fstat(fd, &st) == 0 && (size_t)st.st_size > max_bytes)
		lseek(fd, st.st_size - (off_t)max_bytes, SEEK_SET);
	fprintf(stderr, "---- tail of %s ----\n", path);
	while ((n = read(fd, buf, sizeof(buf))) > 0)
		fwrite(buf, 1, (size_t)n, stderr);
	fprintf(stderr, "---- end of %s ----\n", path);
	close(fd);
}

/* ---- HTTP ---------------------------------------------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;

static void curl_init_once(void)
{
	curl_global_init(CURL_GLOBAL_DEFAULT);
}

struct sink {
	char *data;
	size_t len;
	size_t cap;
};

static size_t body_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct sink *s = userdata;
	size_t n = size * nmemb;

	if (n > RESPONSE_MAX - s->len)
		return 0;       /* over the cap: curl fails with CURLE_WRITE_ERROR */
	if (s->len + n + 1 > s->cap) {
		size_t cap = s->cap ? s->cap : 4096;
		char *p;

		while (cap < s->len + n + 1)
			cap *= 2;
		p = realloc(s->data, cap);
		if (!p)
			return 0;
		s->data = p;
		s->cap = cap;
	}
	memcpy(s->data + s->len, ptr, n);
	s->len += n;
	s->data[s->len] = '\0';
	return n;
}

static size_t header_cb(char *buf, size_t size, size_t nitems, void *userdata)
{
	json_t *headers = userdata;
	size_t n = size * nitems;
	const char *colon = memchr(buf, ':', n);
	const char *v, *end = buf + n;
	char name[256];
	size_t name_len;
	json_t *prev, *value;

	if (n >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
		json_object_clear(headers);     /* a new response (after 100 Continue) */
		return n;
	}
	if (!colon)
		return n;
	name_len = (size_t)(colon - buf);
	if (name_len == 0 || name_len >= sizeof(name))
		return n;
	for (size_t i = 0; i < name_len; i++) {
		char c = buf[i];

		name[i] = (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
	}
	name[name_len] = '\0';
	for (v = colon + 1; v < end && (*v == ' ' || *v == '\t'); v++)
		;
	while (end > v && (end[-1] == '\r' || end[-1] == '\n' || end[-1] == ' '))
		end--;
	prev = json_object_get(headers, name);
	if (json_is_string(prev)) {
		size_t plen = json_string_length(prev);
		char *joined = malloc(plen + 2 + (size_t)(end - v) + 1);

		if (!joined)
			return n;
		memcpy(joined, json_string_value(prev), plen);
		memcpy(joined + plen, ", ", 2);
		memcpy(joined + plen + 2, v, (size_t)(end - v));
		value = json_stringn(joined, plen + 2 + (size_t)(end - v));
		free(joined);
	} else {
		value = json_stringn(v, (size_t)(end - v));
	}
	if (value)
		json_object_set_new(headers, name, value);
	return n;
}

int http_do_ex(const struct http_req *req, struct http_resp *out)
{
	const char *method = req->method ? req->method : (req->body ? "POST" : "GET");
	struct curl_slist *hdrs = NULL, *tmp;
	struct sink sink = {0};
	char line[512];
	CURL *c;
	CURLcode rc;
	int ret = -1;

	memset(out, 0, sizeof(*out));
	pthread_once(&curl_once, curl_init_once);
	out->headers = json_object();
	c = curl_easy_init();
	if (!c || !out->headers) {
		snprintf(out->error, sizeof(out->error), "out of memory");
		out->curl_code = CURLE_OUT_OF_MEMORY;
		goto out;
	}
	curl_easy_setopt(c, CURLOPT_URL, req->url);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, req->timeout_ms > 0 ? req->timeout_ms : 30000L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, body_cb);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_cb);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, out->headers);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, out->error);
	/* HTTPS daemons (tls_cert) serve a certificate of the test's own CA. */
	if (getenv("HARNESS_CA_FILE") && strncmp(req->url, "https://", 8) == 0)
		curl_easy_setopt(c, CURLOPT_CAINFO, getenv("HARNESS_CA_FILE"));

	if (strcmp(method, "HEAD") == 0) {
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	} else if (strcmp(method, "GET") != 0 || req->body) {
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
		if (req->body || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
		    strcmp(method, "PATCH") == 0) {
			curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body ? req->body : "");
			curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE,
					 (curl_off_t)(req->body ? req->len : 0));
		}
	}

	/* An empty "Name:" line removes a header curl would add on its own. */
	if (req->body)
		snprintf(line, sizeof(line), "Content-Type: %s",
			 req->content_type ? req->content_type : "application/json");
	else
		snprintf(line, sizeof(line), "Content-Type:");
	hdrs = curl_slist_append(hdrs, line);
	hdrs = curl_slist_append(hdrs, "Expect:");
	if (req->token) {
		snprintf(line, sizeof(line), "Authorization: Bearer %s", req->token);
		hdrs = curl_slist_append(hdrs, line);
	}
	for (size_t i = 0; req->headers && req->headers[i]; i++) {
		tmp = curl_slist_append(hdrs, req->headers[i]);
		if (!tmp)
			break;
		hdrs = tmp;
	}
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);

	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		out->curl_code = rc;
		if (!out->error[0])
			snprintf(out->error, sizeof(out->error), "%s", curl_easy_strerror(rc));
		goto out;
	}
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
	ret = 0;
out:
	if (ret != 0)
		out->status = 0;
	out->body = sink.data ? sink.data : strdup("");
	out->len = sink.data ? sink.len : 0;
	if (out->body && out->len)
		out->json = json_loadb(out->body, out->len, JSON_DECODE_ANY, NULL);
	if (!out->headers)
		out->headers = json_object();
	curl_slist_free_all(hdrs);
	if (c)
		curl_easy_cleanup(c);
	return ret;
}

int http_do(const char *method, const char *url, const char *token, const char *content_type,
	    const char *body, size_t len, struct http_resp *out)
{
	struct http_req req = {
		.method = method,
		.url = url,
		.token = token,
		.content_type = content_type,
		.body = body,
		.len = len,
	};

	return http_do_ex(&req, out);
}

void http_resp_free(struct http_resp *r)
{
	free(r->body);
	json_decref(r->json);
	json_decref(r->headers);
	memset(r, 0, sizeof(*r));
}

/* ---- receiver ------------------------------------------------------------------------ */

/* "?path=<percent-encoded path>" into buf, or "" when path is NULL. Returns 0, or -1 when
 * buf is too small. */
static int path_query(const char *path, char *buf, size_t size)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	if (!path) {
		buf[0] = '\0';
		return 0;
	}
	if (size < 7)
		return -1;
	memcpy(buf, "?path=", 6);
	o = 6;
	for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
		bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			     (*p >= '0' && *p <= '9') || strchr("/-._~", *p);

		if (o + (plain ? 1 : 3) >= size)
			return -1;
		if (plain) {
			buf[o++] = (char)*p;
		} else {
			buf[o++] = '%';
			buf[o++] = hex[*p >> 4];
			buf[o++] = hex[*p & 15];
		}
	}
	buf[o] = '\0';
	return 0;
}

/* GET or POST <receiver>/_control/<what><query>. Returns the parsed JSON of a 200 answer
 * (returned to the caller), or NULL. */
static json_t *receiver_control(struct receiver *r, const char *method, const char *what,
				const char *path, const char *body, long timeout_ms)
{
	struct http_req req = {.method = method, .body = body, .timeout_ms = timeout_ms};
	struct http_resp resp;
	char query[1024];
	char url[1200];
	json_t *j = NULL;

	if (path_query(path, query, sizeof(query)) != 0) {
		fprintf(stderr, "harness: receiver path too long\n");
		return NULL;
	}
	snprintf(url, sizeof(url), "%s/_control/%s%s", r->control_url[0] ? r->control_url : r->url,
		 what, query);
	req.url = url;
	req.len = body ? strlen(body) : 0;
	http_do_ex(&req, &resp);
	if (resp.status == 200) {
		j = resp.json;
		resp.json = NULL;
	} else if (timeout_ms > PROBE_TIMEOUT_MS || resp.status != 0) {
		fprintf(stderr, "harness: %s %s: %ld %s\n", method, url, resp.status,
			resp.status ? resp.body : resp.error);
	}
	http_resp_free(&resp);
	return j;
}

static int receiver_spawn(struct receiver *r, int port, const char *const *extra_args)
{
	const char *bin = getenv("RECEIVER_BIN");
	char *argv[4 + MAX_EXTRA_ARGS];
	char port_arg[16];
	int64_t deadline;
	int status, null_fd;
	size_t n = 0;

	if (!bin || !*bin) {
		fprintf(stderr, "harness: RECEIVER_BIN is not set\n");
		return -1;
	}
	snprintf(port_arg, sizeof(port_arg), "%d", port);
	argv[n++] = (char *)bin;
	argv[n++] = "--port";
	argv[n++] = port_arg;
	for (size_t i = 0; extra_args && extra_args[i]; i++) {
		if (i == MAX_EXTRA_ARGS) {
			fprintf(stderr, "harness: more than %d receiver arguments\n",
				MAX_EXTRA_ARGS);
			return -1;
		}
		argv[n++] = (char *)extra_args[i];
	}
	argv[n] = NULL;

	r->port = port;
	snprintf(r->url, sizeof(r->url), "http://127.0.0.1:%d", port);
	null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	r->pid = child_spawn(bin, argv, environ, null_fd, -1);
	if (null_fd >= 0)
		close(null_fd);
	if (r->pid < 0) {
		r->pid = 0;
		return -1;
	}

	deadline = harness_now_ms() + RECEIVER_START_MS;
	while (harness_now_ms() < deadline) {
		json_t *stats;

		if (child_reaped(r->pid, &status)) {
			fprintf(stderr, "harness: receiver on port %d exited (status %d)\n",
				port, exit_code(status));
			r->pid = 0;
			return -1;
		}
		stats = receiver_control(r, "GET", "stats", NULL, NULL, 200);
		if (stats) {
			json_decref(stats);
			return 0;
		}
		sleep_ms(POLL_MS);
	}
	fprintf(stderr, "harness: receiver on port %d did not answer within %d ms\n", port,
		RECEIVER_START_MS);
	child_stop(r->pid, SIGKILL, 1000, &status);
	r->pid = 0;
	return -1;
}

int receiver_start_args(struct receiver *r, const char *const *extra_args)
{
	memset(r, 0, sizeof(*r));
	/* A free port can be taken between our probe and the receiver's bind: try again. */
	for (int attempt = 0; attempt < 3; attempt++) {
		int port = harness_free_port();

		if (port > 0 && receiver_spawn(r, port, extra_args) == 0)
			return 0;
	}
	return -1;
}

int receiver_start_tls(struct receiver *r, const char *cert, const char *key,
		       const char *client_ca)
{
	char control_port[16];
	const char *args[] = {"--tls-cert", cert, "--tls-key", key, "--control-port", control_port,
			      client_ca ? "--client-ca" : NULL, client_ca, NULL};

	memset(r, 0, sizeof(*r));
	for (int attempt = 0; attempt < 3; attempt++) {
		int port = harness_free_port(), cport = harness_free_port();

		if (port <= 0 || cport <= 0 || port == cport)
			continue;
		snprintf(control_port, sizeof(control_port), "%d", cport);
		snprintf(r->control_url, sizeof(r->control_url), "http://127.0.0.1:%d", cport);
		if (receiver_spawn(r, port, args) == 0) {
			snprintf(r->url, sizeof(r->url), "https://127.0.0.1:%d", port);
			return 0;
		}
	}
	r->control_url[0] = '\0';
	return -1;
}

int receiver_start(struct receiver *r)
{
	return receiver_start_args(r, NULL);
}

void receiver_stop(struct receiver *r)
{
	int status;

	if (r->pid <= 0)
		return;
	if (child_stop(r->pid, SIGTERM, RECEIVER_STOP_MS, &status) && exit_code(status) != 0)
		fprintf(stderr, "harness: receiver exited with status %d\n", exit_code(status));
	r->pid = 0;
}

int receiver_restart(struct receiver *r)
{
	receiver_stop(r);
	r->control_url[0] = '\0';
	return receiver_spawn(r, r->port, NULL);
}

int receiver_script(struct receiver *r, const char *path, const char *script_json)
{
	json_error_t err;
	json_t *script = json_loads(script_json, JSON_DECODE_ANY, &err);
	json_t *doc = NULL, *ok;
	char *text = NULL;
	int ret = -1;

	if (!script) {
		fprintf(stderr, "harness: receiver script for %s: %s\n", path, err.text);
		return -1;
	}
	if (json_is_array(script)) {
		doc = json_pack("{s:s,s:O}", "path", path, "responses", script);
	} else if (json_is_object(script)) {
		doc = json_copy(script);
		if (doc)
			json_object_set_new(doc, "path", json_string(path));
	} else {
		fprintf(stderr, "harness: receiver script must be an array or an object\n");
		goto out;
	}
	text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	if (!text)
		goto out;
	ok = receiver_control(r, "POST", "script", NULL, text, 5000);
	if (ok)
		ret = 0;
	json_decref(ok);
out:
	free(text);
	json_decref(doc);
	json_decref(script);
	return ret;
}

int receiver_reset(struct receiver *r)
{
	json_t *ok = receiver_control(r, "POST", "reset", NULL, "{}", 5000);

	json_decref(ok);
	return ok ? 0 : -1;
}

json_t *receiver_requests(struct receiver *r, const char *path)
{
	json_t *doc = receiver_control(r, "GET", "requests", path, NULL, 30000);
	json_t *list = json_incref(json_object_get(doc, "requests"));

	json_decref(doc);
	if (!json_is_array(list)) {
		json_decref(list);
		return NULL;
	}
	return list;
}

json_t *receiver_stats(struct receiver *r, const char *path)
{
	return receiver_control(r, "GET", "stats", path, NULL, 5000);
}

long receiver_count(struct receiver *r, const char *path)
{
	json_t *stats = receiver_stats(r, path);
	json_t *count = json_object_get(stats, "count");
	long n = json_is_integer(count) ? (long)json_integer_value(count) : -1;

	json_decref(stats);
	return n;
}

struct count_wait {
	struct receiver *r;
	const char *path;
	long n;
};

static int count_reached(void *ctx)
{
	struct count_wait *w = ctx;

	return receiver_count(w->r, w->path) >= w->n;
}

int receiver_wait_count(struct receiver *r, const char *path, long n, int timeout_ms)
{
	struct count_wait w = {.r = r, .path = path, .n = n};

	return harness_wait(count_reached, &w, timeout_ms);
}

/* ---- daemon -------------------------------------------------------------------------- */

/* Do two "KEY=VALUE" strings (or a bare KEY) name the same variable? */
static bool env_same_key(const char *a, const char *b)
{
	size_t na = strcspn(a, "="), nb = strcspn(b, "=");

	return na == nb && memcmp(a, b, na) == 0;
}

static const char *env_find(const char *const *env, const char *key)
{
	for (size_t i = 0; env && env[i]; i++) {
		if (env_same_key(env[i], key) && env[i][strlen(key)] == '=')
			return env[i] + strlen(key) + 1;
	}
	return NULL;
}

/* Is kv's key among the first n entries of list (stops early at a NULL entry)? */
static bool env_listed(const char *const *list, size_t n, const char *kv)
{
	for (size_t i = 0; list && i < n && list[i]; i++) {
		if (env_same_key(list[i], kv))
			return true;
	}
	return false;
}

char *daemon_log_path(const struct daemon *d, char *buf, size_t size)
{
	snprintf(buf, size, "%s/daemon.log", d->dir);
	return buf;
}

/* The settings the harness gives every daemon, before the test's overrides. With
 * OUTBOXD_TEST_BACKEND=postgres the store is a fresh database on the test process's own
 * PostgreSQL server (one per daemon, kept across its restarts), unless env names one. */
static int daemon_defaults(struct daemon *d, const char *const *env, char kv[DEFAULTS][400])
{
	const char *v;

	if (harness_pg_wanted()) {
		if (strncmp(d->db, "postgres", 8) != 0 && !env_find(env, "OUTBOXD_DB") &&
		    harness_pg_fresh_db(d->db, sizeof(d->db)) != 0)
			return -1;
	} else if (snprintf(d->db, sizeof(d->db), "sqlite:%s/outboxd.db", d->dir) >=
		   (int)sizeof(d->db)) {
		return -1;
	}
	snprintf(d->token, sizeof(d->token), "%s", HARNESS_ADMIN_TOKEN);
	v = env_find(env, "OUTBOXD_DB");
	if (v)
		snprintf(d->db, sizeof(d->db), "%s", v);
	v = env_find(env, "OUTBOXD_ADMIN_TOKEN");
	if (v)
		snprintf(d->token, sizeof(d->token), "%s", v);
	else if (env_listed(env, SIZE_MAX, "OUTBOXD_ADMIN_TOKEN"))
		d->token[0] = '\0';     /* unset: the daemon generates one */
	v = env_find(env, "OUTBOXD_LISTEN");
	if (v && strrchr(v, ':') && atoi(strrchr(v, ':') + 1) > 0)
		d->port = atoi(strrchr(v, ':') + 1);
	snprintf(d->url, sizeof(d->url), "%s://127.0.0.1:%d",
		 env_find(env, "OUTBOXD_TLS_CERT") ? "https" : "http", d->port);

	if (harness_pg_wanted())
		snprintf(kv[0], sizeof(kv[0]), "OUTBOXD_DB=%s", d->db);
	else
		snprintf(kv[0], sizeof(kv[0]), "OUTBOXD_DB=sqlite:%s/outboxd.db", d->dir);
	snprintf(kv[1], sizeof(kv[1]), "OUTBOXD_LISTEN=127.0.0.1:%d", d->port);
	snprintf(kv[2], sizeof(kv[2]), "OUTBOXD_ADMIN_TOKEN=%s", HARNESS_ADMIN_TOKEN);
	snprintf(kv[3], sizeof(kv[3]), "OUTBOXD_INGEST_TOKEN=%s", HARNESS_INGEST_TOKEN);
	/* A generated admin token goes to the data directory on every backend. */
	snprintf(kv[4], sizeof(kv[4]), "OUTBOXD_DATA_DIR=%s", d->dir);
	/* The receivers listen on loopback, which the SSRF guard refuses by default: tests
	 * that exercise the guard set OUTBOXD_SSRF_ALLOW themselves. */
	snprintf(kv[5], sizeof(kv[5]), "OUTBOXD_SSRF_ALLOW=127.0.0.0/8,::1/128");
	return 0;
}

/* environ, minus what the harness or the test sets, + defaults, + env. The array is
 * returned to the caller (free it); its strings are borrowed from environ, kv and env. */
static char **daemon_environment(const char *const *env, char kv[DEFAULTS][400])
{
	const char *defaults[DEFAULTS] = {kv[0], kv[1], kv[2], kv[3], kv[4], kv[5]};
	size_t n_environ = 0, n_env = 0, k = 0;
	char **envp;

	while (environ[n_environ])
		n_environ++;
	while (env && env[n_env])
		n_env++;
	envp = calloc(n_environ + DEFAULTS + n_env + 1, sizeof(*envp));
	if (!envp)
		return NULL;
	for (size_t i = 0; i < n_environ; i++) {
		if (!env_listed(defaults, DEFAULTS, environ[i]) && !env_listed(env, n_env, environ[i]))
			envp[k++] = environ[i];
	}
	for (size_t i = 0; i < DEFAULTS; i++) {
		if (!env_listed(env, n_env, defaults[i]))
			envp[k++] = (char *)defaults[i];
	}
	for (size_t i = 0; i < n_env; i++) {
		if (strchr(env[i], '='))        /* a bare KEY only removes KEY */
			envp[k++] = (char *)env[i];
	}
	envp[k] = NULL;
	return envp;
}

static int daemon_healthy(struct daemon *d)
{
	struct http_req req = {.method = "GET", .timeout_ms = PROBE_TIMEOUT_MS};
	struct http_resp resp;
	char url[128];
	long status;

	snprintf(url, sizeof(url), "%s/healthz", d->url);
	req.url = url;
	http_do_ex(&req, &resp);
	status = resp.status;
	http_resp_free(&resp);
	return status == 200;
}

int daemon_start(struct daemon *d, const char *const *env)
{
	const char *bin = getenv("OUTBOXD_BIN");
	char *argv[] = {(char *)bin, "serve", NULL};
	char kv[DEFAULTS][400];
	char log[300];
	char **envp;
	int64_t deadline;
	int log_fd, status;

	if (!bin || !*bin) {
		fprintf(stderr, "harness: OUTBOXD_BIN is not set\n");
		return -1;
	}
	if (d->pid > 0) {
		fprintf(stderr, "harness: daemon_start: already running (pid %d)\n", (int)d->pid);
		return -1;
	}
	if (!d->dir[0]) {
		char *dir = harness_tmpdir("outboxd-e2e");

		if (!dir)
			return -1;
		snprintf(d->dir, sizeof(d->dir), "%s", dir);
		free(dir);
	}
	if (d->port <= 0)
		d->port = harness_free_port();
	if (d->port <= 0 || daemon_defaults(d, env, kv) != 0) {
		fprintf(stderr, "harness: daemon_start: no port, or directory name too long\n");
		return -1;
	}
	envp = daemon_environment(env, kv);
	if (!envp)
		return -1;

	daemon_log_path(d, log, sizeof(log));
	log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (log_fd < 0) {
		fprintf(stderr, "harness: %s: %s\n", log, strerror(errno));
		free(envp);
		return -1;
	}
	dprintf(log_fd, "---- harness: %s serve on %s ----\n", bin, d->url);
	d->pid = child_spawn(bin, argv, envp, log_fd, log_fd);
	close(log_fd);
	free(envp);
	if (d->pid < 0) {
		d->pid = 0;
		return -1;
	}

	d->exit_code = -1;
	deadline = harness_now_ms() + DAEMON_START_MS;
	while (harness_now_ms() < deadline) {
		if (child_reaped(d->pid, &status)) {
			d->exit_code = exit_code(status);
			fprintf(stderr, "harness: outboxd exited with status %d during start\n",
				exit_code(status));
			d->pid = 0;
			harness_print_tail(log, LOG_TAIL_BYTES);
			return -1;
		}
		if (daemon_healthy(d))
			return 0;
		sleep_ms(POLL_MS);
	}
	fprintf(stderr, "harness: outboxd not healthy within %d ms at %s\n", DAEMON_START_MS,
		d->url);
	child_stop(d->pid, SIGKILL, 1000, &status);
	d->pid = 0;
	harness_print_tail(log, LOG_TAIL_BYTES);
	return -1;
}

int daemon_stop(struct daemon *d)
{
	int status;
	int ret;

	if (d->pid <= 0)
		return 0;
	if (child_stop(d->pid, SIGTERM, DAEMON_STOP_MS, &status)) {
		ret = exit_code(status);
	} else {
		fprintf(stderr, "harness: outboxd ignored SIGTERM for %d ms; killed\n",
			DAEMON_STOP_MS);
		ret = -1;
	}
	d->pid = 0;
	return ret;
}

void daemon_kill9(struct daemon *d)
{
	int status;

	if (d->pid <= 0)
		return;
	child_stop(d->pid, SIGKILL, 5000, &status);
	d->pid = 0;
}

void daemon_cleanup(struct daemon *d)
{
	daemon_stop(d);
	harness_dir_done("harness", d->dir);
	d->db[0] = '\0'; /* the next start gets a fresh database */
}

json_t *api_call_at(struct daemon *d, bool admin, const char *token, const char *method,
		    const char *path, const char *body_json, long expect_status,
		    const char *file, int line)
{
	struct http_resp resp;
	char url[8192]; /* a query naming a hundred ids fits */
	json_t *j;

	if (snprintf(url, sizeof(url), "%s%s", d->url, path) >= (int)sizeof(url)) {
		print_error("%s:%d: api_call: path too long\n", file, line);
		_fail(file, line);
	}
	http_do(method, url, admin ? d->token : token, NULL, body_json,
		body_json ? strlen(body_json) : 0, &resp);
	if (resp.status != expect_status) {
		print_error("%s:%d: %s %s: expected HTTP %ld, got %ld%s%s\n%s\n", file, line,
			    method, path, expect_status, resp.status,
			    resp.status ? "" : ": ", resp.status ? "" : resp.error, resp.body);
		http_resp_free(&resp);
		_fail(file, line);
	}
	j = resp.json;
	resp.json = NULL;
	http_resp_free(&resp);
	return j;
}
