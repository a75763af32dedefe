/* test_https.c: https:// deliveries over outboxd's own HTTP/1.1 client, as a user sees
 * them. Two daemons run side by side: one with the defaults (the lean client takes
 * https:// to a known address) and one with lean_http=false (libcurl for everything),
 * against the same receivers: test_receiver speaking HTTPS (GnuTLS; session tickets;
 * with --client-ca an mTLS subscriber) with certificates this test makes, and a raw TCP
 * server that breaks the handshake. A user must not be able to tell the clients apart by
 * outcome: every failure (untrusted certificate, host name mismatch, a refused or missing
 * client certificate, a reset or an end of stream in the handshake) gets the same code,
 * message and cause from both, and nothing reaches the receiver. What only the lean
 * client shows is in /metrics: its requests (outboxd_http_requests_total{client="lean"})
 * and its handshakes (outboxd_http_tls_handshakes_total{session}): many deliveries over
 * few handshakes on kept-alive connections, and resumed sessions when a receiver closes
 * its connections (the receiver records the resumption too). A kept-alive connection
 * that dies under the next request, before a byte of answer, gets that request once more
 * on a fresh connection, within the same attempt, from both clients alike. */
#include "e2e.h"
#include "harness_receivers.h"

#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>

static struct daemon lean, curl;
static char *pki;

static void pki_path(char out[512], const char *file)
{
	snprintf(out, 512, "%s/%s", pki, file);
}

static int setup(void **state)
{
	pki = harness_tmpdir("outboxd-https");
	assert_non_null(pki);
	e2e_make_pki(pki);
	char tls_dir[600];
	snprintf(tls_dir, sizeof(tls_dir), "OUTBOXD_TLS_DIR=%s", pki);
	const char *env_lean[] = {"OUTBOXD_RETRY_INTERVAL=200ms", tls_dir, NULL};
	const char *env_curl[] = {"OUTBOXD_RETRY_INTERVAL=200ms", "OUTBOXD_LEAN_HTTP=false",
				  tls_dir, NULL};
	memset(&lean, 0, sizeof(lean));
	memset(&curl, 0, sizeof(curl));
	assert_int_equal(daemon_start(&lean, env_lean), 0);
	assert_int_equal(daemon_start(&curl, env_curl), 0);
	return 0;
}

static int teardown(void **state)
{
	assert_int_equal(daemon_stop(&lean), 0);
	daemon_cleanup(&lean);
	assert_int_equal(daemon_stop(&curl), 0);
	daemon_cleanup(&curl);
	harness_rmrf(pki);
	free(pki);
	return 0;
}

static const char *str(json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

static long metric(struct daemon *d, const char *series)
{
	double v = e2e_metric(d, series);
	return v < 0 ? 0 : (long)v;
}

#define LEAN_REQUESTS "outboxd_http_requests_total{client=\"lean\"}"
#define CURL_REQUESTS "outboxd_http_requests_total{client=\"libcurl\"}"
#define FULL_HANDSHAKES "outboxd_http_tls_handshakes_total{session=\"full\"}"
#define RESUMED_HANDSHAKES "outboxd_http_tls_handshakes_total{session=\"resumed\"}"
#define RESENT "outboxd_http_resent_total"

/* Sends one event of type to d; its only delivery's id into delivery. */
static void send_one(struct daemon *d, const char *type, char delivery[64])
{
	char ev[64], body[160], ids[2][64];
	snprintf(body, sizeof(body), "{\"event_type\":\"%s\",\"payload\":{\"k\":1}}", type);
	e2e_send(d, ev, body);
	assert_int_equal(e2e_deliveries_of(d, ev, ids, 2), 1);
	snprintf(delivery, 64, "%s", ids[0]);
}

/* ---- the happy paths ------------------------------------------------------------------- */

static void test_https_lean_keeps_connections(void **state)
{
	struct receiver tls;
	char cert[512], key[512], ca[512], id[64];
	pki_path(cert, "server.pem");
	pki_path(key, "server.key");
	pki_path(ca, "ca.pem");
	assert_int_equal(receiver_start_tls(&tls, cert, key, NULL), 0);
	e2e_create_sub(&lean, id, "{\"name\":\"https-many\",\"event_types\":[\"load.event\"],"
				  "\"endpoint\":\"%s/many\",\"tls\":{\"ca_file\":\"%s\"}}", tls.url, ca);
	long lean0 = metric(&lean, LEAN_REQUESTS), curl0 = metric(&lean, CURL_REQUESTS);
	long hs0 = metric(&lean, FULL_HANDSHAKES) + metric(&lean, RESUMED_HANDSHAKES);

	/* four bursts of ten: the second and later ones find the first one's connections */
	for (int b = 0; b < 4; b++) {
		char *body = e2e_batch_body(b * 10, 10);
		json_decref(api_call(&lean, "POST", "/v1/events", body, 202));
		free(body);
		assert_int_equal(receiver_wait_count(&tls, "/many", (b + 1) * 10, 10000), 0);
	}
	json_t *reqs = receiver_requests(&tls, "/many");
	assert_int_equal(json_array_size(reqs), 40);
	for (size_t i = 0; i < 40; i++)
		assert_true(json_is_true(json_object_get(json_array_get(reqs, i), "tls")));
	json_decref(reqs);
	assert_true(metric(&lean, LEAN_REQUESTS) - lean0 >= 40);
	assert_int_equal(metric(&lean, CURL_REQUESTS), curl0);
	long handshakes = metric(&lean, FULL_HANDSHAKES) + metric(&lean, RESUMED_HANDSHAKES) - hs0;
	if (handshakes < 1 || handshakes > 20)
		fail_msg("%ld TLS handshakes for 40 deliveries", handshakes);
	receiver_stop(&tls);
}

static void test_https_resumes_sessions(void **state)
{
	struct receiver tls;
	char cert[512], key[512], ca[512], id[64], del[64];
	pki_path(cert, "server.pem");
	pki_path(key, "server.key");
	pki_path(ca, "ca.pem");
	assert_int_equal(receiver_start_tls(&tls, cert, key, NULL), 0);
	/* a receiver that closes every connection after its answer */
	assert_int_equal(receiver_script(&tls, "/close", "{\"default\":{\"status\":200,"
							"\"headers\":{\"Connection\":\"close\"}}}"), 0);
	e2e_create_sub(&lean, id, "{\"name\":\"https-close\",\"event_types\":[\"close.event\"],"
				  "\"endpoint\":\"%s/close\",\"tls\":{\"ca_file\":\"%s\"}}", tls.url, ca);
	long resumed0 = metric(&lean, RESUMED_HANDSHAKES);
	for (int i = 0; i < 4; i++) {
		send_one(&lean, "close.event", del);
		json_decref(e2e_wait_status(&lean, del, "PROCESSED", 10000));
	}
	/* every connection after the first resumed the session of the one before */
	json_t *reqs = receiver_requests(&tls, "/close");
	assert_int_equal(json_array_size(reqs), 4);
	for (size_t i = 1; i < 4; i++)
		assert_true(json_is_true(json_object_get(json_array_get(reqs, i), "tls_resumed")));
	json_decref(reqs);
	assert_true(metric(&lean, RESUMED_HANDSHAKES) - resumed0 >= 3);
	receiver_stop(&tls);
}

static void test_https_mtls_and_host_names(void **state)
{
	struct receiver tls;
	char cert[512], key[512], ca[512], ccert[512], ckey[512], id[64], del[64];
	pki_path(cert, "server.pem");
	pki_path(key, "server.key");
	pki_path(ca, "ca.pem");
	pki_path(ccert, "client.pem");
	pki_path(ckey, "client.key");
	assert_int_equal(receiver_start_tls(&tls, cert, key, ca), 0);
	/* a host name: the first request learns its address through libcurl, the next
	 * ones go lean, with SNI and the name verified */
	e2e_create_sub(&lean, id, "{\"name\":\"mtls-name\",\"event_types\":[\"mtls.name\"],"
				  "\"endpoint\":\"https://localhost:%d/m\",\"tls\":{\"ca_file\":\"%s\","
				  "\"client_cert\":\"%s\",\"client_key\":\"%s\"}}", tls.port, ca, ccert,
		       ckey);
	long lean0 = metric(&lean, LEAN_REQUESTS);
	for (int i = 0; i < 3; i++) {
		send_one(&lean, "mtls.name", del);
		json_decref(e2e_wait_status(&lean, del, "PROCESSED", 10000));
	}
	assert_true(metric(&lean, LEAN_REQUESTS) - lean0 >= 2);
	json_t *reqs = receiver_requests(&tls, "/m");
	assert_int_equal(json_array_size(reqs), 3);
	for (size_t i = 0; i < 3; i++)
		assert_string_equal(str(json_array_get(reqs, i), "client_cert"), "CN=outboxd-client");
	json_decref(reqs);
	receiver_stop(&tls);
}

/* ---- failures: the same as libcurl's ------------------------------------------------ */

/* A TCP server that breaks every TLS handshake: it reads the client's hello, then resets
 * the connection (reset) or ends it cleanly (an end of stream). */
struct breaker {
	int fd, port, reset;
	atomic_int stop;
	pthread_t thread;
};

static void *breaker_main(void *arg)
{
	struct breaker *b = arg;
	while (!atomic_load(&b->stop)) {
		struct pollfd p = {.fd = b->fd, .events = POLLIN};
		if (poll(&p, 1, 100) <= 0)
			continue;
		int c = accept(b->fd, NULL, NULL);
		if (c < 0)
			continue;
		char buf[8192];
		struct pollfd pc = {.fd = c, .events = POLLIN};
		if (poll(&pc, 1, 2000) > 0 && recv(c, buf, sizeof(buf), 0) > 0) {
			if (b->reset) {
				struct linger lg = {.l_onoff = 1, .l_linger = 0};
				setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
			} else {
				shutdown(c, SHUT_WR);
				while (poll(&pc, 1, 2000) > 0 && recv(c, buf, sizeof(buf), 0) > 0)
					;
			}
		}
		close(c);
	}
	return NULL;
}

static void breaker_start(struct breaker *b, int reset)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	memset(b, 0, sizeof(*b));
	b->reset = reset;
	b->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(b->fd >= 0);
	assert_int_equal(bind(b->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(b->fd, 16), 0);
	assert_int_equal(getsockname(b->fd, (struct sockaddr *)&a, &len), 0);
	b->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&b->thread, NULL, breaker_main, b), 0);
}

static void breaker_stop(struct breaker *b)
{
	atomic_store(&b->stop, 1);
	pthread_join(b->thread, NULL);
	close(b->fd);
}

/* Delivers one event of a new subscription (name; endpoint; tls: a JSON object or NULL)
 * on d, tried twice then dead; returns the dead delivery's last error (caller frees). */
static json_t *dead_error(struct daemon *d, const char *name, const char *endpoint,
			  const char *tls)
{
	char id[64], del[64], type[96];
	snprintf(type, sizeof(type), "%s.event", name);
	e2e_create_sub(d, id, "{\"name\":\"%s\",\"event_types\":[\"%s\"],\"endpoint\":\"%s\","
			      "\"tls\":%s,\"retry\":{\"immediate\":1,\"max_retries\":1,"
			      "\"interval\":\"100ms\"}}", name, type, endpoint, tls ? tls : "{}");
	send_one(d, type, del);
	json_t *dl = e2e_wait_dead(d, del, 15000);
	assert_true(json_is_true(json_object_get(dl, "dead")));
	assert_int_equal(json_integer_value(json_object_get(dl, "attempt_count")), 2);
	json_t *err = json_deep_copy(json_object_get(dl, "last_error"));
	json_decref(dl);
	return err;
}

/* The case on the lean daemon and on the libcurl one: the same code, message and cause,
 * 525 and "tls handshake failed" unless want_code says otherwise, the cause containing
 * want; the lean daemon's attempts went over the lean client. */
static void same_failure(const char *name, const char *endpoint, const char *tls, int want_code,
			 const char *want)
{
	long lean0 = metric(&lean, LEAN_REQUESTS), curl0 = metric(&lean, CURL_REQUESTS);
	json_t *a = dead_error(&lean, name, endpoint, tls);
	json_t *b = dead_error(&curl, name, endpoint, tls);
	assert_int_equal(metric(&lean, LEAN_REQUESTS) - lean0, 2);
	assert_int_equal(metric(&lean, CURL_REQUESTS), curl0);
	const char *ca = str(a, "cause"), *cb = str(b, "cause");
	if (!ca || !cb || strcmp(ca, cb) != 0 || !strstr(ca, want))
		fail_msg("%s: lean cause \"%s\", libcurl cause \"%s\", wanted \"%s\"", name,
			 ca ? ca : "(null)", cb ? cb : "(null)", want);
	assert_int_equal(json_integer_value(json_object_get(a, "code")), want_code);
	assert_int_equal(json_integer_value(json_object_get(b, "code")), want_code);
	assert_string_equal(str(a, "message"), str(b, "message"));
	json_decref(a);
	json_decref(b);
}

static void test_https_failures_as_libcurl(void **state)
{
	struct receiver plain_tls, wrong, mtls;
	char cert[512], key[512], ca[512], wcert[512], wkey[512], scert[512], skey[512];
	char endpoint[128], tls[1800], want[160];
	pki_path(cert, "server.pem");
	pki_path(key, "server.key");
	pki_path(ca, "ca.pem");
	pki_path(wcert, "wrong.pem");
	pki_path(wkey, "wrong.key");
	pki_path(scert, "stranger.pem");
	pki_path(skey, "stranger.key");
	assert_int_equal(receiver_start_tls(&plain_tls, cert, key, NULL), 0);
	assert_int_equal(receiver_start_tls(&wrong, wcert, wkey, NULL), 0);
	assert_int_equal(receiver_start_tls(&mtls, cert, key, ca), 0);

	/* our CA is not among the system's */
	snprintf(endpoint, sizeof(endpoint), "%s/untrusted", plain_tls.url);
	same_failure("untrusted", endpoint, NULL, 525,
		     "SSL certificate problem: unable to get local issuer certificate");
	/* trusted, for another name */
	snprintf(endpoint, sizeof(endpoint), "%s/mismatch", wrong.url);
	snprintf(tls, sizeof(tls), "{\"ca_file\":\"%s\"}", ca);
	same_failure("mismatch", endpoint, tls, 525, "SSL: no alternative certificate subject "
						     "name matches target host name '127.0.0.1'");
	/* an mTLS subscriber: no client certificate, or one it does not trust */
	snprintf(endpoint, sizeof(endpoint), "%s/mtls", mtls.url);
	same_failure("nocert", endpoint, tls, 525, "alert certificate required");
	snprintf(tls, sizeof(tls), "{\"ca_file\":\"%s\",\"client_cert\":\"%s\","
				   "\"client_key\":\"%s\"}", ca, scert, skey);
	same_failure("stranger", endpoint, tls, 525, "alert");
	assert_int_equal(receiver_count(&plain_tls, NULL), 0);
	assert_int_equal(receiver_count(&wrong, NULL), 0);
	assert_int_equal(receiver_count(&mtls, NULL), 0);
	receiver_stop(&plain_tls);
	receiver_stop(&wrong);
	receiver_stop(&mtls);

	/* a handshake reset, and one the server ends */
	snprintf(tls, sizeof(tls), "{\"ca_file\":\"%s\"}", ca);
	struct breaker br;
	breaker_start(&br, 1);
	snprintf(endpoint, sizeof(endpoint), "https://127.0.0.1:%d/reset", br.port);
	same_failure("reset", endpoint, tls, 525, "Recv failure: Connection reset by peer");
	breaker_stop(&br);
	breaker_start(&br, 0);
	snprintf(endpoint, sizeof(endpoint), "https://127.0.0.1:%d/eof", br.port);
	snprintf(want, sizeof(want), "OpenSSL SSL_connect: SSL_ERROR_SYSCALL in connection to "
				     "127.0.0.1:%d ", br.port);
	same_failure("eof", endpoint, tls, 525, want);
	breaker_stop(&br);
}

/* ---- a kept-alive connection closed under a request --------------------------------- */

static int listening(int port)
{
	for (int i = 0; i < 100; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
					.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
		if (fd >= 0)
			close(fd);
		if (ok)
			return 1;
		usleep(50 * 1000);
	}
	return 0;
}

static void test_https_stale_connection_resent(void **state)
{
	char cert[512], key[512], ca[512], log[600], script[600], port_s[16], endpoint[128];
	char tls[700], del[64];
	pki_path(cert, "server.pem");
	pki_path(key, "server.key");
	pki_path(ca, "ca.pem");
	snprintf(log, sizeof(log), "%s/drop-second.log", pki);
	snprintf(script, sizeof(script), "%s/tls_drop_second.py", real_receivers_dir());
	int port = harness_free_port();
	assert_true(port > 0);
	snprintf(port_s, sizeof(port_s), "%d", port);
	char *argv[] = {"python3", "-B", script, port_s, cert, key, log, NULL};
	pid_t pid = harness_spawn("/usr/bin/python3", argv, -1, -1);
	assert_true(pid > 0);
	assert_true(listening(port));
	snprintf(endpoint, sizeof(endpoint), "https://127.0.0.1:%d/stale", port);
	snprintf(tls, sizeof(tls), "{\"ca_file\":\"%s\"}", ca);

	struct daemon *daemons[] = {&lean, &curl};
	for (int i = 0; i < 2; i++) {
		struct daemon *d = daemons[i];
		char id[64];
		long lean0 = metric(d, LEAN_REQUESTS), curl0 = metric(d, CURL_REQUESTS);
		long resent0 = metric(d, RESENT);
		e2e_create_sub(d, id, "{\"name\":\"stale-%d\",\"event_types\":[\"stale.event\"],"
				      "\"endpoint\":\"%s\",\"tls\":%s}", i, endpoint, tls);
		/* the first opens a connection and leaves it idle; the second dies on it */
		for (int n = 0; n < 2; n++) {
			send_one(d, "stale.event", del);
			json_t *dl = e2e_wait_status(d, del, "PROCESSED", 10000);
			assert_int_equal(json_integer_value(json_object_get(dl, "attempt_count")), 1);
			/* the receiver read the second request before it dropped the connection:
			 * its history says the request went out twice, whichever client resent
			 * it (libcurl does so on its own; its second pre-request call tells) */
			json_t *a = json_array_get(json_object_get(dl, "attempts"), 0);
			const char *cause = json_string_value(json_object_get(a, "cause"));
			if (n == 1) {
				assert_non_null(cause);
				assert_non_null(strstr(cause, "written again on a new connection"));
				assert_true(json_is_true(json_object_get(a, "sent")));
			} else {
				assert_null(cause);
			}
			json_decref(dl);
		}
		if (d == &lean) {
			assert_int_equal(metric(d, LEAN_REQUESTS) - lean0, 2);
			assert_int_equal(metric(d, CURL_REQUESTS), curl0);
		}
		assert_int_equal(metric(d, RESENT) - resent0, 1);
	}
	harness_stop(pid, SIGTERM, 2000);

	/* per daemon: the first request on connection A; the second on A (dropped), then on
	 * a new connection B */
	FILE *f = fopen(log, "r");
	assert_non_null(f);
	int conns[6];
	char ids[6][64];
	int lines = 0;
	while (lines < 6 && fscanf(f, "%d %63s", &conns[lines], ids[lines]) == 2)
		lines++;
	assert_int_equal(fscanf(f, "%*d %*s"), EOF);
	fclose(f);
	assert_int_equal(lines, 6);
	for (int i = 0; i < 6; i += 3) {
		assert_int_equal(conns[i], conns[i + 1]);
		assert_true(conns[i + 2] != conns[i]);
		assert_string_not_equal(ids[i], ids[i + 1]);
		assert_string_equal(ids[i + 1], ids[i + 2]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_https_lean_keeps_connections),
		cmocka_unit_test(test_https_resumes_sessions),
		cmocka_unit_test(test_https_mtls_and_host_names),
		cmocka_unit_test(test_https_failures_as_libcurl),
		cmocka_unit_test(test_https_stale_connection_resent),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
