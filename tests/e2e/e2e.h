/* e2e.h: small helpers shared by the end-to-end tests (on top of tests/support/harness.h). */
#ifndef OUTBOXD_TESTS_E2E_H
#define OUTBOXD_TESTS_E2E_H

#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <time.h>

#include "harness.h"
#include "standard_webhooks.h"

/* One secret key for instances that share a PostgreSQL database: each seals and opens the
 * subscriptions the others wrote (each has its own data directory, so none would share a
 * generated one). */
#define E2E_SHARED_SECRET_KEY \
	"OUTBOXD_SECRET_KEY=5ec4e7c1a55e5ec4e7c1a55e5ec4e7c1a55e5ec4e7c1a55e5ec4e7c1a55e5ec4"

/* The usual fixture of a test file: a receiver (r may be NULL: none) and a daemon started
 * with env (NULL-terminated extra settings, may be NULL). */
static inline void e2e_setup(struct receiver *r, struct daemon *d, const char *const *env)
{
	if (r)
		assert_int_equal(receiver_start(r), 0);
	memset(d, 0, sizeof(*d));
	assert_int_equal(daemon_start(d, env), 0);
}

/* Its end: a daemon still running must stop cleanly on SIGTERM (exit 0); then its files
 * and the receiver (NULL: none) go. */
static inline void e2e_teardown(struct receiver *r, struct daemon *d)
{
	assert_int_equal(daemon_stop(d), 0);
	daemon_cleanup(d);
	if (r)
		receiver_stop(r);
}

/* Runs a shell command; its stdout (NUL-terminated, cut at len - 1) into out. Returns the
 * exit code, or -1 when it did not exit. */
/* Runs a shell command built like printf; the test fails (with the command shown) when
 * it does not exit 0. */
static inline void e2e_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void e2e_sh(const char *fmt, ...)
{
	char cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	int rc = system(cmd);
	if (rc != 0)
		fprintf(stderr, "failed (%d): %s\n", rc, cmd);
	assert_int_equal(rc, 0);
}

/* Certificates for the TLS tests in dir, all ECDSA P-256 (fast to make), 2 days: a CA
 * (ca.pem, ca.key); server certificates it signed, server.pem/.key for 127.0.0.1 and
 * localhost, wrong.pem/.key for another name only; a client certificate it signed
 * (client.pem/.key, CN=outboxd-client); an unrelated self-signed one (stranger.pem/.key). */
static inline void e2e_make_pki(const char *dir)
{
	const char *key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
	e2e_sh("cd %s && openssl req -x509 %s -keyout ca.key -out ca.pem -days 2 "
	       "-subj '/CN=outboxd test CA' 2>/dev/null", dir, key);
	const char *servers[][2] = {{"server", "IP:127.0.0.1,DNS:localhost"},
				    {"wrong", "DNS:wrong.example"}};
	for (int i = 0; i < 2; i++)
		e2e_sh("cd %s && openssl req %s -keyout %s.key -out %s.csr -subj '/CN=%s' "
		       "2>/dev/null && printf 'subjectAltName=%s\\nextendedKeyUsage=serverAuth\\n' "
		       "> %s.ext && openssl x509 -req -in %s.csr -CA ca.pem -CAkey ca.key "
		       "-CAcreateserial -out %s.pem -days 2 -extfile %s.ext 2>/dev/null", dir, key,
		       servers[i][0], servers[i][0], servers[i][0], servers[i][1], servers[i][0],
		       servers[i][0], servers[i][0], servers[i][0]);
	e2e_sh("cd %s && openssl req %s -keyout client.key -out client.csr "
	       "-subj '/CN=outboxd-client' 2>/dev/null && printf 'extendedKeyUsage=clientAuth\\n' "
	       "> client.ext && openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key "
	       "-CAcreateserial -out client.pem -days 2 -extfile client.ext 2>/dev/null", dir, key);
	e2e_sh("cd %s && openssl req -x509 %s -keyout stranger.key -out stranger.pem -days 2 "
	       "-subj '/CN=stranger' 2>/dev/null", dir, key);
}

static inline int e2e_run(const char *cmd, char *out, size_t len)
{
	FILE *p = popen(cmd, "r");
	assert_non_null(p);
	size_t n = fread(out, 1, len - 1, p);
	out[n] = '\0';
	int status = pclose(p);
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Runs `$OUTBOXD_BIN args` as the CLI against d with its admin token (stderr dropped);
 * stdout into out. Returns the exit code. */
static inline int e2e_cli(const struct daemon *d, char *out, size_t len, const char *args)
{
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "OUTBOXD_URL=%s OUTBOXD_TOKEN=%s %s %s 2>/dev/null", d->url,
		 d->token, getenv("OUTBOXD_BIN"), args);
	return e2e_run(cmd, out, len);
}

/* A self-signed P-256 certificate for 127.0.0.1 (its subjectAltName too), valid 2 days,
 * written by openssl into dir as api.pem and api.key: a server's tls_cert and tls_key.
 * Their paths go into cert and key (512 bytes each). */
static inline void e2e_self_signed(const char *dir, char cert[512], char key[512])
{
	char cmd[2048];
	snprintf(cert, 512, "%s/api.pem", dir);
	snprintf(key, 512, "%s/api.key", dir);
	snprintf(cmd, sizeof(cmd), "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
		 "-nodes -keyout %s -out %s -days 2 -subj /CN=127.0.0.1 "
		 "-addext subjectAltName=IP:127.0.0.1 2>/dev/null", key, cert);
	assert_int_equal(system(cmd), 0);
}

/* The SQLite file of a daemon (d->db is the DSN "sqlite:PATH"). */
static inline const char *e2e_db_path(const struct daemon *d)
{
	return strncmp(d->db, "sqlite:", 7) == 0 ? d->db + 7 : d->db;
}

/* 1 when the file at path holds needle anywhere in its bytes, 0 when not (or when there
 * is no such file): what a database file or its WAL keeps, as a thief would read it. */
static inline int e2e_file_contains(const char *path, const char *needle)
{
	FILE *f = fopen(path, "rb");
	size_t nlen = strlen(needle), cap = 1 << 20, have = 0, n;
	char *buf;
	int found = 0;

	if (!f)
		return 0;
	buf = malloc(cap + nlen);
	assert_non_null(buf);
	/* chunks overlapping by the needle's length less one, so a match across two is seen */
	while (!found && nlen && (n = fread(buf + have, 1, cap, f)) > 0) {
		have += n;
		found = memmem(buf, have, needle, nlen) != NULL;
		size_t tail = have < nlen - 1 ? have : nlen - 1;
		memmove(buf, buf + have - tail, tail);
		have = tail;
	}
	fclose(f);
	free(buf);
	return found;
}

/* The daemon's log so far (its first MiB), returned (free it). */
static inline char *e2e_daemon_log(const struct daemon *d)
{
	char path[512];
	size_t cap = 1 << 20;
	char *buf = malloc(cap);
	FILE *f = fopen(daemon_log_path(d, path, sizeof(path)), "r");
	assert_non_null(buf);
	assert_non_null(f);
	size_t n = fread(buf, 1, cap - 1, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

/* Fails the current test at the caller's line, saying why, unless the request the
 * receiver recorded (req, borrowed) carries a Standard Webhooks signature made with secret
 * and a webhook-timestamp within 5 minutes of now (tests/support/standard_webhooks.h).
 * match (may be NULL) gets which of the header's signatures matched and how many it
 * holds. The body checked is the recorded text; a body that is not UTF-8 fails. */
#define e2e_assert_signed(req, secret, match) \
	e2e_assert_signed_at((req), (secret), (match), __FILE__, __LINE__)
static inline void e2e_assert_signed_at(json_t *req, const char *secret,
					struct standard_webhooks_match *match,
					const char *file, int line)
{
	json_t *h = json_object_get(req, "headers");
	json_t *body = json_object_get(req, "body");
	struct standard_webhooks_request r = {
		.id = json_string_value(json_object_get(h, "webhook-id")),
		.timestamp = json_string_value(json_object_get(h, "webhook-timestamp")),
		.signature = json_string_value(json_object_get(h, "webhook-signature")),
		.body = json_is_string(body) ? json_string_value(body) : "",
		.body_len = json_string_length(body),
	};
	enum standard_webhooks_result rc;

	rc = standard_webhooks_verify(&r, secret, (int64_t)time(NULL),
				      STANDARD_WEBHOOKS_TOLERANCE_S, match);
	if (rc != SWH_OK || !json_is_string(body)) {
		print_error("%s:%d: webhook-signature \"%s\" (webhook-id %s, webhook-timestamp %s): "
			    "%s\n", file, line, r.signature ? r.signature : "(none)",
			    r.id ? r.id : "(none)", r.timestamp ? r.timestamp : "(none)",
			    json_is_string(body) ? standard_webhooks_strerror(rc)
						 : "the recorded body is not UTF-8 text");
		_fail(file, line);
	}
}

/* A batch body of n events of type "load.event" with payloads {"n":first...}. Returned
 * (free it). */
static inline char *e2e_batch_body(int first, int n)
{
	size_t cap = (size_t)n * 96 + 32, off;
	char *body = malloc(cap);

	assert_non_null(body);
	off = (size_t)snprintf(body, cap, "{\"events\":[");
	for (int i = 0; i < n; i++)
		off += (size_t)snprintf(body + off, cap - off,
					"%s{\"event_type\":\"load.event\",\"payload\":{\"n\":%d}}",
					i ? "," : "", first + i);
	snprintf(body + off, cap - off, "]}");
	return body;
}

/* Creates a subscription from a JSON text made with printf formatting; returns its id
 * (static buffer per call site is not needed: copied into out). */
static inline void e2e_create_sub(struct daemon *d, char out[64], const char *fmt, ...)
{
	char body[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(body, sizeof(body), fmt, ap);
	va_end(ap);
	json_t *s = api_call(d, "POST", "/v1/subscriptions", body, 201);
	assert_non_null(s);
	snprintf(out, 64, "%s", json_string_value(json_object_get(s, "id")));
	json_decref(s);
}

/* Sends one event; returns its id in out. */
static inline void e2e_send(struct daemon *d, char out[64], const char *body)
{
	json_t *r = api_call(d, "POST", "/v1/events", body, 202);
	assert_non_null(r);
	snprintf(out, 64, "%s", json_string_value(json_array_get(json_object_get(r, "ids"), 0)));
	json_decref(r);
}

/* The value of one series of d's /metrics (a line "SERIES VALUE"; SERIES is a name, or
 * a name with its labels as outboxd writes them), or -1 when there is no such line. */
static inline double e2e_metric(struct daemon *d, const char *series)
{
	struct http_resp r;
	char url[128], needle[256];
	snprintf(url, sizeof(url), "%s/metrics", d->url);
	assert_int_equal(http_do("GET", url, d->token, NULL, NULL, 0, &r), 0);
	snprintf(needle, sizeof(needle), "\n%s ", series);
	const char *hit = strstr(r.body, needle);
	double v = hit ? atof(hit + strlen(needle)) : -1;
	http_resp_free(&r);
	return v;
}

/* GET path and return the JSON (asserting 200). */
static inline json_t *e2e_get(struct daemon *d, const char *fmt, ...)
{
	char path[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	return api_call(d, "GET", path, NULL, 200);
}

/* Polls GET path until the string at json key `field` of the first item (or of the
 * object) equals want, up to timeout_ms. Returns the last JSON seen (caller frees). */
struct e2e_wait_ctx {
	struct daemon *d;
	const char *path;
	const char *field;
	const char *want;
	json_t *last;
};

static inline int e2e_field_is(void *arg)
{
	struct e2e_wait_ctx *c = arg;
	json_decref(c->last);
	c->last = api_call(c->d, "GET", c->path, NULL, 200);
	json_t *v = json_object_get(c->last, c->field);
	return json_is_string(v) && strcmp(json_string_value(v), c->want) == 0;
}

/* Waits until delivery `id` has status want; returns the delivery JSON (caller frees). */
static inline json_t *e2e_wait_status(struct daemon *d, const char *delivery_id,
				      const char *want, int timeout_ms)
{
	char path[256];
	snprintf(path, sizeof(path), "/v1/deliveries/%s", delivery_id);
	struct e2e_wait_ctx c = {d, path, "status", want, NULL};
	int rc = harness_wait(e2e_field_is, &c, timeout_ms);
	if (rc != 0) {
		char *dump = json_dumps(c.last, JSON_INDENT(2));
		fprintf(stderr, "delivery %s never reached %s; last seen:\n%s\n", delivery_id, want,
			dump ? dump : "(null)");
		free(dump);
	}
	assert_int_equal(rc, 0);
	return c.last;
}

/* Polls delivery `id` every 100 ms until it is dead (in the DLQ), up to timeout_ms;
 * returns the last delivery JSON seen (caller frees), dead or not. */
static inline json_t *e2e_wait_dead(struct daemon *d, const char *id, int timeout_ms)
{
	json_t *del = NULL;
	for (int waited = 0; waited <= timeout_ms; waited += 100) {
		json_decref(del);
		del = e2e_get(d, "/v1/deliveries/%s", id);
		if (json_is_true(json_object_get(del, "dead")))
			return del;
		usleep(100 * 1000);
	}
	return del;
}

/* The ids of the deliveries of an event, in order, into ids[max]; returns the count. */
static inline size_t e2e_deliveries_of(struct daemon *d, const char *event_id, char ids[][64],
				       size_t max)
{
	json_t *ev = e2e_get(d, "/v1/events/%s", event_id);
	json_t *list = json_object_get(ev, "deliveries");
	size_t n = json_array_size(list);
	for (size_t i = 0; i < n && i < max; i++)
		snprintf(ids[i], 64, "%s",
			 json_string_value(json_object_get(json_array_get(list, i), "id")));
	json_decref(ev);
	return n;
}

/* A TCP connection to 127.0.0.1:port from the loopback address src ("127.0.0.2": every
 * 127.x address is this machine's, so a test can be several clients), non-blocking when
 * nonblock is set. Returns the fd; fails the test when it cannot connect. */
static inline int e2e_connect_from(const char *src, int port, int nonblock)
{
	struct sockaddr_in from = {.sin_family = AF_INET};
	struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	inet_pton(AF_INET, src, &from.sin_addr);
	inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
	assert_int_equal(bind(fd, (struct sockaddr *)&from, sizeof(from)), 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&to, sizeof(to)), 0);
	if (nonblock)
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	return fd;
}

/* What the server sends on fd until it closes the connection or timeout_ms pass, into
 * out (NUL-terminated, cut at len - 1). Returns the bytes read; *closed set when the
 * server closed (or reset) the connection. */
static inline size_t e2e_read_answer(int fd, char *out, size_t len, int timeout_ms,
				     int *closed)
{
	size_t have = 0;
	int64_t until = harness_now_ms() + timeout_ms;
	*closed = 0;
	for (;;) {
		int64_t left = until - harness_now_ms();
		struct pollfd p = {.fd = fd, .events = POLLIN};
		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			break;
		char chunk[4096];
		ssize_t n = recv(fd, chunk, sizeof(chunk), MSG_DONTWAIT);
		if (n <= 0) {
			if (n < 0 && (errno == EAGAIN || errno == EINTR))
				continue;
			*closed = 1;
			break;
		}
		size_t take = (size_t)n < len - 1 - have ? (size_t)n : len - 1 - have;
		memcpy(out + have, chunk, take);
		have += take;
	}
	out[have] = '\0';
	return have;
}

/* The status of an HTTP answer's first line ("HTTP/1.1 401 ..."), or 0. */
static inline int e2e_answer_status(const char *answer)
{
	return strncmp(answer, "HTTP/1.", 7) == 0 && strlen(answer) > 12 ? atoi(answer + 9) : 0;
}

#endif
