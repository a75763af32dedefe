/* test_service.c: outboxd under a service manager, as systemd sees it through
 * NOTIFY_SOCKET (a datagram socket of the test plays systemd): READY=1 once the API
 * answers, WATCHDOG=1 at half of WATCHDOG_USEC, SIGHUP -> RELOADING=1, the reloadable
 * settings applied and the others named as needing a restart, READY=1 again, and
 * STOPPING=1 on SIGTERM. Runs on SQLite and PostgreSQL. */
#include "e2e.h"

#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>

static struct daemon dmn;
static int sock = -1;
static char dir[256], conf[300];

static void write_conf(const char *text)
{
	FILE *f = fopen(conf, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Reads notifications until one holds want, up to timeout_ms; the last datagram into
 * out. Returns 0, or -1 on timeout. */
static int wait_notify(const char *want, int timeout_ms, char *out, size_t len)
{
	int64_t until = harness_now_ms() + timeout_ms;
	while (harness_now_ms() < until) {
		ssize_t n = recv(sock, out, len - 1, 0);
		if (n <= 0)
			continue;
		out[n] = '\0';
		if (strstr(out, want))
			return 0;
	}
	return -1;
}

/* Reads what the socket holds now. Like systemd, which raises the kernel's queue of a
 * datagram socket (net.unix.max_dgram_qlen, 10 by default) and reads at once: with ten
 * unread here, outboxd's next WATCHDOG=1 waits in sd_notify, and with it the thread that
 * takes SIGTERM. */
static void drain_notify(void)
{
	char buf[512];
	while (recv(sock, buf, sizeof(buf), MSG_DONTWAIT) > 0)
		;
}

static int log_has(const char *needle)
{
	char path[512];
	return e2e_file_contains(daemon_log_path(&dmn, path, sizeof(path)), needle);
}

static int setup(void **state)
{
	char *tmp = harness_tmpdir("outboxd-service");
	assert_non_null(tmp);
	snprintf(dir, sizeof(dir), "%s", tmp);
	free(tmp);
	snprintf(conf, sizeof(conf), "%s/outboxd.conf", dir);
	write_conf("log_level = info\nmax_in_flight = 64\n");

	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	assert_true(strlen(dir) + sizeof("/notify.sock") <= sizeof(addr.sun_path));
	memcpy(addr.sun_path, dir, strlen(dir));
	memcpy(addr.sun_path + strlen(dir), "/notify.sock", sizeof("/notify.sock"));
	sock = socket(AF_UNIX, SOCK_DGRAM, 0);
	assert_true(sock >= 0);
	assert_int_equal(bind(sock, (struct sockaddr *)&addr, sizeof(addr)), 0);
	struct timeval tv = {0, 200 * 1000};
	setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

	static char env_sock[300], env_conf[320];
	snprintf(env_sock, sizeof(env_sock), "NOTIFY_SOCKET=%s", addr.sun_path);
	snprintf(env_conf, sizeof(env_conf), "OUTBOXD_CONFIG=%s", conf);
	const char *env[] = {env_sock, env_conf, "WATCHDOG_USEC=1000000", "WATCHDOG_PID", NULL};
	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, env), 0);
	return 0;
}

static int teardown(void **state)
{
	char msg[512];
	drain_notify();
	assert_int_equal(daemon_stop(&dmn), 0);
	assert_int_equal(wait_notify("STOPPING=1", 2000, msg, sizeof(msg)), 0);
	daemon_cleanup(&dmn);
	close(sock);
	harness_rmrf(dir);
	return 0;
}

static void test_ready_and_watchdog(void **state)
{
	char msg[512];
	assert_int_equal(wait_notify("READY=1", 5000, msg, sizeof(msg)), 0);
	assert_non_null(strstr(msg, "STATUS=serving on http://127.0.0.1:"));
	/* WATCHDOG_USEC=1s: a ping every 0.5 s while the dispatcher turns */
	assert_int_equal(wait_notify("WATCHDOG=1", 3000, msg, sizeof(msg)), 0);
	assert_int_equal(wait_notify("WATCHDOG=1", 3000, msg, sizeof(msg)), 0);
}

static void test_sighup_reload(void **state)
{
	char msg[512];
	write_conf("log_level = debug\nmax_in_flight = 7\nops_events_limit = 3\n"
		   "log_deliveries = true\n");
	assert_int_equal(kill(dmn.pid, SIGHUP), 0);
	assert_int_equal(wait_notify("RELOADING=1", 5000, msg, sizeof(msg)), 0);
	assert_int_equal(wait_notify("READY=1", 5000, msg, sizeof(msg)), 0);
	assert_true(log_has("reload: log_level info -> debug"));
	assert_true(log_has("reload: ops_events_limit 10 -> 3"));
	assert_true(log_has("reload: log_deliveries false -> true"));
	assert_true(log_has("needs a restart, still running with the old value: max_in_flight"));
	/* log_deliveries is in force: a delivery now gets its audit line */
	struct receiver rcv;
	char sub[64], ev[64];
	assert_int_equal(receiver_start(&rcv), 0);
	e2e_create_sub(&dmn, sub, "{\"name\":\"audited\",\"event_types\":[\"audit.*\"],"
				  "\"endpoint\":\"%s/a\"}", rcv.url);
	e2e_send(&dmn, ev, "{\"event_type\":\"audit.one\",\"payload\":{}}");
	assert_int_equal(receiver_wait_count(&rcv, "/a", 1, 5000), 0);
	/* the audit line comes once the result is recorded, after the receiver answered; at
	 * debug level the event's id is in earlier lines too, so wait for the outcome — with
	 * the receiver still up: it counts a request before its answer has gone out, and
	 * stopped at once it could leave outboxd a refused connection instead */
	int64_t until = harness_now_ms() + 10000;
	while (!(log_has(ev) && log_has("EXECUTED")) && harness_now_ms() < until)
		usleep(50 * 1000);
	receiver_stop(&rcv);
	assert_true(log_has(ev));
	assert_true(log_has("EXECUTED"));

	/* a config that does not load is refused whole; the daemon keeps serving */
	write_conf("log_level = debug\nmax_in_flight = many\n");
	assert_int_equal(kill(dmn.pid, SIGHUP), 0);
	assert_int_equal(wait_notify("READY=1", 5000, msg, sizeof(msg)), 0);
	assert_true(log_has("max_in_flight must be a non-negative integer"));
	assert_true(log_has("keeping the running ones"));
	json_decref(api_call(&dmn, "GET", "/v1/stats", NULL, 200));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ready_and_watchdog),
		cmocka_unit_test(test_sighup_reload),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
