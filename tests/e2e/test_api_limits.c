/* test_api_limits.c: slow and half-open clients cannot starve the API. 300 connections
 * that each send half a request and then nothing hold no thread: the API still answers
 * a real client at once (long before the idle timeout could have freed anything), and a
 * connection that stays silent is closed after api_idle_timeout, and headers larger
 * than a connection's memory are refused with 431. With tls_cert/tls_key the API speaks
 * HTTPS only (a certificate made here with the openssl CLI): verified clients get
 * answers, plain HTTP and unverified clients do not, and a half-configured or unreadable
 * pair stops the start naming the setting. */
#include "e2e.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#define HALF_OPEN 300

static struct daemon dmn;

static int teardown(void **state)
{
	e2e_teardown(NULL, &dmn);
	return 0;
}

/* A connection to the daemon that sent the start of a request and stops there. */
static int half_open(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	static const char partial[] = "GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthoriz";
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(send(fd, partial, sizeof(partial) - 1, MSG_NOSIGNAL),
			 (ssize_t)sizeof(partial) - 1);
	return fd;
}

static void test_half_open_clients_do_not_starve_the_api(void **state)
{
	const char *env[] = {"OUTBOXD_API_THREADS=2", NULL};
	int fds[HALF_OPEN];

	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, env), 0);
	for (int i = 0; i < HALF_OPEN; i++)
		fds[i] = half_open(dmn.port);
	usleep(200 * 1000); /* the server has taken them all in */

	/* With 2 worker threads and 300 stalled requests, a thread per connection would
	 * answer only after the 30 s idle timeout; epoll answers now. */
	int64_t t0 = harness_now_ms();
	json_t *stats = api_call(&dmn, "GET", "/v1/stats", NULL, 200);
	int64_t took = harness_now_ms() - t0;
	json_decref(stats);
	fprintf(stderr, "api_limits: GET /v1/stats with %d half-open connections took %lld ms\n",
		HALF_OPEN, (long long)took);
	assert_true(took < 10000);
	/* and the half-open ones are all still open (nobody was dropped to make room) */
	int open = 0;
	for (int i = 0; i < HALF_OPEN; i++) {
		struct pollfd p = {.fd = fds[i], .events = POLLIN};
		open += poll(&p, 1, 0) == 0;
	}
	assert_int_equal(open, HALF_OPEN);
	for (int i = 0; i < HALF_OPEN; i++)
		close(fds[i]);
}

static void test_silent_connection_is_closed(void **state)
{
	const char *env[] = {"OUTBOXD_API_IDLE_TIMEOUT=2s", NULL};
	char buf[256];

	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, env), 0);
	int fd = half_open(dmn.port);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	/* closed by the server (EOF, or at most a 408-style answer first) within 2 s + slack */
	assert_int_equal(poll(&p, 1, 15000), 1);
	ssize_t n;
	while ((n = recv(fd, buf, sizeof(buf), 0)) > 0)
		;
	assert_true(n == 0 || n < 0);
	close(fd);
	/* the API itself is fine */
	json_t *stats = api_call(&dmn, "GET", "/v1/stats", NULL, 200);
	json_decref(stats);
}

/* Headers past the connection's memory pool (32 KiB) are refused with 431 and the
 * connection closed; the server goes on. */
static void test_oversized_headers_are_refused(void **state)
{
	char status[64] = "";
	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, NULL), 0);

	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)dmn.port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	size_t big = 100000;
	char *req = malloc(big + 200);
	assert_non_null(req);
	int n = snprintf(req, 200, "GET /v1/stats HTTP/1.1\r\nHost: x\r\nX-Big: ");
	memset(req + n, 'a', big);
	memcpy(req + n + big, "\r\n\r\n", 4);
	send(fd, req, (size_t)n + big + 4, MSG_NOSIGNAL); /* may be cut short by the close */
	free(req);
	ssize_t got = recv(fd, status, sizeof(status) - 1, 0);
	close(fd);
	assert_true(got > 12);
	status[got] = '\0';
	assert_int_equal(strncmp(status, "HTTP/1.1 431", 12), 0);
	json_t *stats = api_call(&dmn, "GET", "/v1/stats", NULL, 200);
	json_decref(stats);
}

/* The daemon's log, whole (at most 64 KiB). */
static void read_log(char *text, size_t len)
{
	char path[512];
	FILE *f = fopen(daemon_log_path(&dmn, path, sizeof(path)), "r");
	size_t got = f ? fread(text, 1, len - 1, f) : 0;
	text[got] = '\0';
	if (f)
		fclose(f);
}

static void test_tls(void **state)
{
	static char log[65536];
	char *dir = harness_tmpdir("api-tls");
	char cmd[2048], cert[512], key[512], env_cert[600], env_key[600], url[128];
	snprintf(cert, sizeof(cert), "%s/api.pem", dir);
	snprintf(key, sizeof(key), "%s/api.key", dir);
	snprintf(cmd, sizeof(cmd), "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 "
		 "-nodes -keyout %s -out %s -days 2 -subj /CN=127.0.0.1 "
		 "-addext subjectAltName=IP:127.0.0.1 2>/dev/null", key, cert);
	assert_int_equal(system(cmd), 0);
	snprintf(env_cert, sizeof(env_cert), "OUTBOXD_TLS_CERT=%s", cert);
	snprintf(env_key, sizeof(env_key), "OUTBOXD_TLS_KEY=%s", key);

	/* only one of the pair, or a file that is not there: no start, the setting named */
	memset(&dmn, 0, sizeof(dmn));
	const char *half[] = {env_cert, NULL};
	assert_int_equal(daemon_start(&dmn, half), -1);
	read_log(log, sizeof(log));
	assert_non_null(strstr(log, "tls_cert is set without tls_key"));
	const char *missing[] = {env_cert, "OUTBOXD_TLS_KEY=/nonexistent/api.key", NULL};
	assert_int_equal(daemon_start(&dmn, missing), -1);
	read_log(log, sizeof(log));
	assert_non_null(strstr(log, "tls_key: cannot read /nonexistent/api.key"));
	daemon_cleanup(&dmn);

	/* HTTPS with the certificate trusted: the API answers as usual */
	memset(&dmn, 0, sizeof(dmn));
	setenv("HARNESS_CA_FILE", cert, 1);
	const char *tls[] = {env_cert, env_key, NULL};
	assert_int_equal(daemon_start(&dmn, tls), 0);
	assert_int_equal(strncmp(dmn.url, "https://", 8), 0);
	json_decref(api_call(&dmn, "POST", "/v1/events",
			     "{\"event_type\":\"tls.event\",\"payload\":{}}", 202));
	json_decref(api_call(&dmn, "GET", "/v1/stats", NULL, 200));

	/* a client that does not trust the certificate stops at the handshake */
	unsetenv("HARNESS_CA_FILE");
	struct http_resp r;
	snprintf(url, sizeof(url), "%s/healthz", dmn.url);
	assert_int_equal(http_do("GET", url, NULL, NULL, NULL, 0, &r), -1);
	assert_int_equal(r.status, 0);
	http_resp_free(&r);
	/* plain HTTP on the same port gets no HTTP answer */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/healthz", dmn.port);
	http_do("GET", url, NULL, NULL, NULL, 0, &r);
	assert_int_not_equal(r.status, 200);
	http_resp_free(&r);
	setenv("HARNESS_CA_FILE", cert, 1);
	json_decref(api_call(&dmn, "GET", "/v1/stats", NULL, 200));
	unsetenv("HARNESS_CA_FILE");
	harness_rmrf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_half_open_clients_do_not_starve_the_api, teardown),
		cmocka_unit_test_teardown(test_silent_connection_is_closed, teardown),
		cmocka_unit_test_teardown(test_oversized_headers_are_refused, teardown),
		cmocka_unit_test_teardown(test_tls, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
