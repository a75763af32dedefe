/* test_api_limits.c: slow, many, large and half-open clients cannot starve the API.
 *
 * At default settings, 1,100 connections from one address that send a header line every
 * few seconds, and unauthenticated uploads that stall, leave the API answering another
 * client's /v1/stats at once: one address holds at most api_max_connections_per_ip
 * connections (the rest are refused), a request without a valid token is answered 401
 * before a byte of its body is read (the daemon's memory does not grow with the uploads),
 * and a body declared over max_request is refused (413) unread. A request that keeps
 * trickling in is cut at api_request_timeout even though it is never idle; request bodies
 * in progress hold at most api_body_memory (503 beyond, with Retry-After). A connection
 * that stays silent is closed after api_idle_timeout, and headers larger than a
 * connection's memory are refused with 431. With tls_cert/tls_key the API speaks HTTPS
 * only (a certificate made here with the openssl CLI), TLS 1.2 and 1.3 (openssl s_client
 * with -tls1 or -tls1_1 is refused): verified clients get answers, plain HTTP and
 * unverified clients do not, and a half-configured or unreadable pair, or priorities
 * GnuTLS does not take, stop the start naming the setting.
 *
 * An ingest waits for its commit on its connection, not on an API thread: with one API
 * thread and the store's write lock held by another process, events sent meanwhile wait
 * while other clients are answered; once the lock goes they are acknowledged (202), also
 * one whose daemon was told to stop (SIGTERM) while it waited. */
#include "e2e.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <sys/resource.h>

#define SLOW_CLIENTS 1100   /* more than api_max_connections (1024) from one address */
#define PER_IP_DEFAULT 128  /* api_max_connections_per_ip's default */
#define UPLOADS 16

static struct daemon dmn;

static int teardown(void **state)
{
	e2e_teardown(NULL, &dmn);
	return 0;
}

/* A connection to the daemon that sent the start of a request and stops there. */
static int half_open(int port)
{
	static const char partial[] = "GET /v1/stats HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthoriz";
	int fd = e2e_connect_from("127.0.0.1", port, 0);
	assert_int_equal(send(fd, partial, sizeof(partial) - 1, MSG_NOSIGNAL),
			 (ssize_t)sizeof(partial) - 1);
	return fd;
}

/* A connection with an authenticated upload of 1,048,500 bytes declared and its first 13
 * sent: the daemon takes memory for the whole body when it reads the head. */
static int stalled_upload(int port)
{
	char head[512];
	int n = snprintf(head, sizeof(head), "POST /v1/events HTTP/1.1\r\nHost: x\r\n"
			 "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
			 "Content-Length: 1048500\r\n\r\n{\"event_type\"", HARNESS_ADMIN_TOKEN);
	int fd = e2e_connect_from("127.0.0.1", port, 0);
	assert_int_equal(send(fd, head, (size_t)n, MSG_NOSIGNAL), n);
	return fd;
}

/* Sends text on fd without waiting (a connection the server closed just fails). */
static ssize_t send_text(int fd, const char *text)
{
	return send(fd, text, strlen(text), MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* The daemon's resident memory, KiB (VmRSS). */
static long rss_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

/* 1 while the server keeps fd open (nothing to read, no end), 0 once it closed it. */
static int still_open(int fd)
{
	char c;
	ssize_t n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
	return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

/* An authenticated GET from another address answers promptly; returns how long it took. */
static int64_t timed_stats(void)
{
	int64_t t0 = harness_now_ms();
	json_decref(api_call(&dmn, "GET", "/v1/stats", NULL, 200));
	return harness_now_ms() - t0;
}

static void test_slow_clients_of_one_address(void **state)
{
	static int slow[SLOW_CLIENTS];
	int uploads[UPLOADS];
	char answer[4096];
	struct rlimit rl;

	/* this process holds every connection of the attack */
	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_cur < SLOW_CLIENTS + 256 && rl.rlim_max >= SLOW_CLIENTS + 256) {
		rl.rlim_cur = SLOW_CLIENTS + 256;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, NULL), 0);
	json_decref(api_call(&dmn, "GET", "/v1/stats", NULL, 200));
	long rss_before = rss_kib(dmn.pid);

	/* 1,100 connections from 127.0.0.2, each with the start of a request */
	for (int i = 0; i < SLOW_CLIENTS; i++) {
		slow[i] = e2e_connect_from("127.0.0.2", dmn.port, 1);
		send_text(slow[i], "GET /v1/stats HTTP/1.1\r\nHost: x\r\n");
	}
	/* 16 uploads without a token from 127.0.0.3: 16 MiB declared, 1 MiB sent, then
	 * nothing; each is answered 401 without its body being read */
	static char chunk[1 << 20];
	memset(chunk, 'x', sizeof(chunk));
	for (int i = 0; i < UPLOADS; i++) {
		char head[256];
		int n = snprintf(head, sizeof(head), "POST /v1/events HTTP/1.1\r\nHost: x\r\n"
				 "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n",
				 16 << 20);
		uploads[i] = e2e_connect_from("127.0.0.3", dmn.port, 1);
		send(uploads[i], head, (size_t)n, MSG_NOSIGNAL);
		send(uploads[i], chunk, sizeof(chunk), MSG_NOSIGNAL); /* as much as fits */
	}
	for (int i = 0; i < UPLOADS; i++) {
		int closed;
		e2e_read_answer(uploads[i], answer, sizeof(answer), 10000, &closed);
		/* 401, or 429 once the address failed too often (core/authlimit.h) */
		int status = e2e_answer_status(answer);
		assert_true(status == 401 || status == 429);
	}

	/* a header line every 2 s for 8 s; meanwhile another client's requests answer at
	 * once (the bound is generous: what must not happen is waiting for a slot) */
	int64_t worst = 0;
	for (int round = 0; round < 4; round++) {
		for (int i = 0; i < SLOW_CLIENTS; i++)
			send_text(slow[i], "X-Slow: 1\r\n");
		for (int k = 0; k < 4; k++) {
			int64_t took = timed_stats();
			worst = took > worst ? took : worst;
			json_decref(api_call_as(&dmn, NULL, "GET", "/healthz", NULL, 200));
			usleep(500 * 1000);
		}
	}
	fprintf(stderr, "api_limits: GET /v1/stats beside %d slow connections and %d stalled "
		"uploads: slowest %lld ms\n", SLOW_CLIENTS, UPLOADS, (long long)worst);
	assert_true(worst < 2000);

	/* the address holds at most its share; the rest were refused */
	int open = 0;
	for (int i = 0; i < SLOW_CLIENTS; i++)
		open += still_open(slow[i]);
	fprintf(stderr, "api_limits: %d of %d slow connections from one address still open\n",
		open, SLOW_CLIENTS);
	assert_true(open <= PER_IP_DEFAULT);
	assert_true(open > 0);

	/* the stalled uploads' bodies were never held */
	long grown = rss_kib(dmn.pid) - rss_before;
	fprintf(stderr, "api_limits: daemon RSS grew by %ld KiB during the attack\n", grown);
	assert_true(grown < 20 * 1024);
	for (int i = 0; i < SLOW_CLIENTS; i++)
		close(slow[i]);
	for (int i = 0; i < UPLOADS; i++)
		close(uploads[i]);
	json_decref(api_call(&dmn, "GET", "/v1/stats", NULL, 200));
}

/* A request is decided from its head: no token, a body declared too large, or one of the
 * wrong type is answered at once, its body never sent, and the connection closed. */
static void test_answered_before_the_body(void **state)
{
	static const struct {
		const char *auth;           /* "" for none */
		const char *length;
		const char *type;
		int status;
	} cases[] = {
		{"", "104857600", "application/json", 401},
		{"Authorization: Bearer wrong\r\n", "104857600", "application/json", 401},
		{"Authorization: Bearer " HARNESS_ADMIN_TOKEN "\r\n", "16777217",
		 "application/json", 413},
		{"Authorization: Bearer " HARNESS_ADMIN_TOKEN "\r\n", "100", "text/plain", 415},
	};
	char req[512], answer[4096];

	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, NULL), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int fd = e2e_connect_from("127.0.0.1", dmn.port, 0), closed;
		int n = snprintf(req, sizeof(req), "POST /v1/events HTTP/1.1\r\nHost: x\r\n%s"
				 "Content-Type: %s\r\nContent-Length: %s\r\n\r\n", cases[i].auth,
				 cases[i].type, cases[i].length);
		assert_int_equal(send(fd, req, (size_t)n, MSG_NOSIGNAL), n);
		e2e_read_answer(fd, answer, sizeof(answer), 10000, &closed);
		if (e2e_answer_status(answer) != cases[i].status)
			fprintf(stderr, "case %zu: %s\n", i, answer);
		assert_int_equal(e2e_answer_status(answer), cases[i].status);
		assert_true(closed); /* the body that never came is not waited for */
		close(fd);
	}
	assert_true(e2e_metric(&dmn, "outboxd_api_refused_total{reason=\"too_large\"}") >= 1);
}

/* A request that never stops arriving, a byte at a time, is cut at its deadline although
 * it is never idle (api_idle_timeout is 30 s here). */
static void test_request_deadline(void **state)
{
	const char *env[] = {"OUTBOXD_API_REQUEST_TIMEOUT=2s", NULL};
	static const char upload[] = "POST /v1/events HTTP/1.1\r\nHost: x\r\nAuthorization: "
				     "Bearer " HARNESS_ADMIN_TOKEN "\r\nContent-Type: "
				     "application/json\r\nContent-Length: 1000\r\n\r\n";

	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, env), 0);
	int headers = e2e_connect_from("127.0.0.1", dmn.port, 1);
	int body = e2e_connect_from("127.0.0.1", dmn.port, 1);
	send_text(headers, "GET /v1/stats HTTP/1.1\r\n");
	send(body, upload, sizeof(upload) - 1, MSG_NOSIGNAL);
	int headers_open = 1, body_open = 1;
	int64_t until = harness_now_ms() + 20000;
	while ((headers_open || body_open) && harness_now_ms() < until) {
		if (headers_open && send_text(headers, "X-Slow: 1\r\n") < 0)
			headers_open = 0;
		if (body_open && send(body, " ", 1, MSG_NOSIGNAL) < 0)
			body_open = 0;
		usleep(250 * 1000);
		headers_open = headers_open && still_open(headers);
		body_open = body_open && still_open(body);
	}
	assert_false(headers_open);
	assert_false(body_open);
	close(headers);
	close(body);
	assert_true(e2e_metric(&dmn, "outboxd_api_refused_total{reason=\"deadline\"}") >= 2);
	/* a request that arrives whole is not affected */
	json_decref(api_call(&dmn, "POST", "/v1/events",
			     "{\"event_type\":\"deadline.ok\",\"payload\":{}}", 202));
}

/* Bodies in progress hold at most api_body_memory together: the request that would go
 * past it is answered 503 with Retry-After at once, and served again once memory is free. */
static void test_body_memory(void **state)
{
	const char *env[] = {"OUTBOXD_MAX_REQUEST=1MiB", "OUTBOXD_API_BODY_MEMORY=2MiB", NULL};
	int stalled[2];

	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, env), 0);
	/* two authenticated uploads that stall, holding all but 150 bytes of the 2 MiB */
	for (int i = 0; i < 2; i++)
		stalled[i] = stalled_upload(dmn.port);
	struct http_resp r;
	char url[128];
	snprintf(url, sizeof(url), "%s/v1/events", dmn.url);
	char event[400];
	snprintf(event, sizeof(event), "{\"event_type\":\"memory.x\",\"payload\":\"%0300d\"}", 0);
	/* Once the daemon has read both heads, a third body is refused. Nothing outside shows
	 * when it has, so until then a 202 is fine; and when this body came between the two
	 * heads, its memory (held for a moment) had the second head refused: that upload
	 * starts again. Anything else, or no 503 beside two held uploads by the deadline,
	 * fails. */
	int64_t decided_by = harness_now_ms() + 20000;
	for (;;) {
		http_do("POST", url, HARNESS_ADMIN_TOKEN, NULL, event, strlen(event), &r);
		int held = still_open(stalled[0]) && still_open(stalled[1]);
		if ((r.status == 503 && held) || (r.status != 202 && r.status != 503) ||
		    harness_now_ms() >= decided_by)
			break;
		http_resp_free(&r);
		for (int i = 0; i < 2; i++) {
			if (!still_open(stalled[i])) { /* answered (refused) or closed */
				close(stalled[i]);
				stalled[i] = stalled_upload(dmn.port);
			}
		}
		usleep(50 * 1000);
	}
	assert_true(still_open(stalled[0]) && still_open(stalled[1]));
	assert_int_equal(r.status, 503);
	assert_non_null(json_object_get(r.headers, "retry-after"));
	assert_non_null(strstr(r.body, "api_body_memory"));
	http_resp_free(&r);
	assert_true(e2e_metric(&dmn, "outboxd_api_refused_total{reason=\"memory\"}") >= 1);
	/* a body of unknown length (chunked) is refused the same way */
	char chunked[1024], answer[4096];
	int closed, fd = e2e_connect_from("127.0.0.1", dmn.port, 0);
	int n = snprintf(chunked, sizeof(chunked), "POST /v1/events HTTP/1.1\r\nHost: x\r\n"
			 "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
			 "Transfer-Encoding: chunked\r\n\r\n%zx\r\n%s\r\n0\r\n\r\n",
			 HARNESS_ADMIN_TOKEN, strlen(event), event);
	assert_int_equal(send(fd, chunked, (size_t)n, MSG_NOSIGNAL), n);
	e2e_read_answer(fd, answer, sizeof(answer), 10000, &closed);
	assert_int_equal(e2e_answer_status(answer), 503);
	close(fd);

	/* one upload gives up: its memory is free again */
	close(stalled[0]);
	int64_t until = harness_now_ms() + 10000;
	long status = 0;
	while (status != 202 && harness_now_ms() < until) {
		http_do("POST", url, HARNESS_ADMIN_TOKEN, NULL, event, strlen(event), &r);
		status = r.status;
		http_resp_free(&r);
		if (status != 202)
			usleep(100 * 1000);
	}
	assert_int_equal(status, 202);
	close(stalled[1]);
}

static void test_silent_connection_is_closed(void **state)
{
	const char *env[] = {"OUTBOXD_API_IDLE_TIMEOUT=2s", NULL};
	char buf[256];

	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, env), 0);
	int fd = half_open(dmn.port), closed;
	/* closed by the server (EOF or a reset, at most a 408-style answer first) within 2 s
	 * and a generous slack; a connection still open at the deadline fails */
	e2e_read_answer(fd, buf, sizeof(buf), 15000, &closed);
	assert_true(closed);
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

/* 1 when `openssl s_client` completes a handshake with the daemon at protocol version
 * flag ("-tls1_1"); its own minimum lowered, so that a refusal is the daemon's. */
static int handshake(const char *flag)
{
	char cmd[512], out[16384];
	snprintf(cmd, sizeof(cmd), "openssl s_client -connect 127.0.0.1:%d %s -cipher "
		 "'DEFAULT:@SECLEVEL=0' </dev/null 2>&1", dmn.port, flag);
	int rc = e2e_run(cmd, out, sizeof(out));
	return rc == 0 && strstr(out, "Cipher is ") && !strstr(out, "Cipher is (NONE)");
}

static void test_tls(void **state)
{
	static char log[65536];
	char *dir = harness_tmpdir("api-tls");
	char cert[512], key[512], env_cert[600], env_key[600], url[128];
	e2e_self_signed(dir, cert, key);
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
	const char *bad_priorities[] = {env_cert, env_key, "OUTBOXD_TLS_PRIORITIES=NOT-A-PRIORITY",
					NULL};
	assert_int_equal(daemon_start(&dmn, bad_priorities), -1);
	read_log(log, sizeof(log));
	assert_non_null(strstr(log, "tls_priorities"));
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

	/* TLS 1.2 and 1.3 only: 1.0 and 1.1 are refused in the handshake */
	assert_false(handshake("-tls1"));
	assert_false(handshake("-tls1_1"));
	assert_true(handshake("-tls1_2"));
	assert_true(handshake("-tls1_3"));

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

/* ---- an ingest waiting for its commit ---------------------------------------------- */

struct waiting_ingest {
	pthread_t thread;
	long status;                    /* the answer's status, 0 for none */
	char id[64];                    /* the event's id from the answer */
	atomic_int answered;
};

static void *send_one(void *arg)
{
	struct waiting_ingest *w = arg;
	char url[128];
	struct http_resp r;
	snprintf(url, sizeof(url), "%s/v1/events", dmn.url);
	const char *body = "{\"event_type\":\"waiting.event\",\"payload\":{}}";
	http_do("POST", url, dmn.token, "application/json", body, strlen(body), &r);
	w->status = r.status;
	json_t *doc = r.body ? json_loads(r.body, 0, NULL) : NULL;
	const char *id = json_string_value(json_array_get(json_object_get(doc, "ids"), 0));
	snprintf(w->id, sizeof(w->id), "%s", id ? id : "");
	json_decref(doc);
	http_resp_free(&r);
	atomic_store(&w->answered, 1);
	return NULL;
}

/* Holds the store's write lock from another connection, as a backup tool could. */
static sqlite3 *hold_write_lock(void)
{
	sqlite3 *db;
	assert_int_equal(sqlite3_open_v2(e2e_db_path(&dmn), &db, SQLITE_OPEN_READWRITE, NULL),
			 SQLITE_OK);
	sqlite3_busy_timeout(db, 10000); /* the daemon may be writing right now */
	assert_int_equal(sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	return db;
}

static void release_write_lock(sqlite3 *db)
{
	assert_int_equal(sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
}

/* Until the writer has taken n ingest requests since the daemon started (the requests
 * then wait for the lock; outboxd waits 5 s for it before it answers 503). Each poll of
 * /metrics needs the API's one thread. */
static void until_writer_took(int n)
{
	for (int i = 0; i < 500; i++) {
		if (e2e_metric(&dmn, "outboxd_ingest_queued_seconds_count") >= n)
			return;
		usleep(10 * 1000);
	}
	fail_msg("the writer did not take the ingest request");
}

/* The senders' state outlives a failed assertion, which leaves the test function while
 * they still run. */
static struct waiting_ingest a, b;

/* outboxd answers an ingest 503 once it has waited this long for the write lock
 * (BUSY_WAIT_MS, 5 s), less a margin: a round that took longer proves nothing. */
#define LOCK_WAIT_CONCLUSIVE_MS 4500

static void test_ingest_waits_without_its_thread(void **state)
{
	const char *env[] = {"OUTBOXD_API_THREADS=1", NULL};

	e2e_setup(NULL, &dmn, env);
	/* While an event waits for its commit, the API's only thread answers other
	 * clients. A machine stalled for 5 s within a round would have the event answered
	 * 503 meanwhile (outboxd stops waiting for the lock): such a round is made again. */
	for (int round = 1;; round++) {
		memset(&a, 0, sizeof(a));
		memset(&b, 0, sizeof(b));
		double took = e2e_metric(&dmn, "outboxd_ingest_queued_seconds_count");
		sqlite3 *lock = hold_write_lock();
		int64_t t0 = harness_now_ms();
		assert_int_equal(pthread_create(&a.thread, NULL, send_one, &a), 0);
		until_writer_took((int)took + 1);
		json_decref(api_call(&dmn, "GET", "/v1/subscriptions", NULL, 200));
		assert_int_equal(pthread_create(&b.thread, NULL, send_one, &b), 0);
		json_decref(api_call(&dmn, "GET", "/v1/stats", NULL, 200));
		int conclusive = harness_now_ms() - t0 < LOCK_WAIT_CONCLUSIVE_MS;
		if (conclusive)
			assert_false(atomic_load(&a.answered));
		release_write_lock(lock);
		pthread_join(a.thread, NULL);
		pthread_join(b.thread, NULL);
		if (conclusive)
			break;
		fprintf(stderr, "round %d took over %d ms: made again\n", round,
			LOCK_WAIT_CONCLUSIVE_MS);
		assert_true(round < 3);
	}
	assert_int_equal(a.status, 202);
	assert_int_equal(b.status, 202);
	json_decref(e2e_get(&dmn, "/v1/events/%s", a.id));
	json_decref(e2e_get(&dmn, "/v1/events/%s", b.id));

	/* told to stop while an event waits: it is still answered, then the daemon exits */
	sqlite3 *lock = hold_write_lock();
	memset(&a, 0, sizeof(a));
	double took = e2e_metric(&dmn, "outboxd_ingest_queued_seconds_count");
	assert_int_equal(pthread_create(&a.thread, NULL, send_one, &a), 0);
	until_writer_took((int)took + 1);
	assert_int_equal(kill(dmn.pid, SIGTERM), 0);
	usleep(100 * 1000); /* the stop begins; it waits for the answer */
	assert_false(atomic_load(&a.answered));
	release_write_lock(lock);
	pthread_join(a.thread, NULL);
	assert_int_equal(a.status, 202);
	assert_int_equal(daemon_stop(&dmn), 0);
	assert_int_equal(daemon_start(&dmn, env), 0);
	json_decref(e2e_get(&dmn, "/v1/events/%s", a.id));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_slow_clients_of_one_address, teardown),
		cmocka_unit_test_teardown(test_answered_before_the_body, teardown),
		cmocka_unit_test_teardown(test_request_deadline, teardown),
		cmocka_unit_test_teardown(test_body_memory, teardown),
		cmocka_unit_test_teardown(test_silent_connection_is_closed, teardown),
		cmocka_unit_test_teardown(test_oversized_headers_are_refused, teardown),
		cmocka_unit_test_teardown(test_tls, teardown),
		cmocka_unit_test_teardown(test_ingest_waits_without_its_thread, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
