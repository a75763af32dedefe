/* test_crash.c: nothing acknowledged is lost — kill -9 in the middle of deliveries and a
 * restart delivers every event (none stuck in flight); a second outboxd on the same
 * SQLite file refuses to start, while on PostgreSQL it joins in; SIGTERM exits cleanly. */
#include "e2e.h"
#include "harness_pg.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define EVENTS 300

static struct receiver rcv;
static struct daemon dmn;

static int setup(void **state)
{
	assert_int_equal(receiver_start(&rcv), 0);
	memset(&dmn, 0, sizeof(dmn));
	return 0;
}

static int teardown(void **state)
{
	daemon_cleanup(&dmn);
	receiver_stop(&rcv);
	return 0;
}

static void test_kill9_mid_delivery(void **state)
{
	char sub[64];
	/* Slow answers keep many deliveries in flight when the daemon dies. */
	assert_int_equal(receiver_script(&rcv, "/slow",
					 "{\"path\":\"/slow\",\"default\":{\"status\":200,\"delay_ms\":200}}"),
			 0);
	/* On PostgreSQL the restarted outboxd is a new instance: the dead one's leases are
	 * not released at start (other instances may hold live ones) but reclaimed when they
	 * expire, which a short lease makes quick here. */
	const char *env[6];
	size_t n_env = 0;
	env[n_env++] = "OUTBOXD_MAX_IN_FLIGHT=64";
	env[n_env++] = "OUTBOXD_DELIVERY_TIMEOUT=5s";
	env[n_env++] = "OUTBOXD_REAP_INTERVAL=500ms";
	if (harness_pg_wanted()) /* appended, not a NULL in the middle that ends the list */
		env[n_env++] = "OUTBOXD_LEASE=3s";
	env[n_env] = NULL;
	assert_int_equal(daemon_start(&dmn, env), 0);
	e2e_create_sub(&dmn, sub, "{\"name\":\"slow\",\"event_types\":[\"*\"],\"endpoint\":\"%s/slow\"}",
		       rcv.url);

	/* 300 events in three batches. */
	for (int b = 0; b < 3; b++) {
		char body[16384];
		size_t off = (size_t)snprintf(body, sizeof(body), "{\"events\":[");
		for (int i = 0; i < EVENTS / 3; i++)
			off += (size_t)snprintf(body + off, sizeof(body) - off,
						"%s{\"event_type\":\"crash.test\",\"payload\":{\"i\":%d}}",
						i ? "," : "", b * 100 + i);
		snprintf(body + off, sizeof(body) - off, "]}");
		json_t *r = api_call(&dmn, "POST", "/v1/events", body, 202);
		assert_int_equal(json_array_size(json_object_get(r, "ids")), EVENTS / 3);
		json_decref(r);
	}
	assert_int_equal(receiver_wait_count(&rcv, "/slow", 20, 10000), 0);
	daemon_kill9(&dmn);
	long at_kill = receiver_count(&rcv, "/slow");
	assert_true(at_kill < EVENTS);

	/* Restart on the same store: the leases of the dead process are returned at once. */
	assert_int_equal(daemon_start(&dmn, env), 0);

	/* Every event arrives; duplicates only for what was in flight at the kill. */
	long unique = 0, dups = 0;
	for (int i = 0; i < 300 && unique < EVENTS; i++) {
		json_t *st = receiver_stats(&rcv, NULL);
		unique = (long)json_integer_value(json_object_get(st, "unique_ids"));
		dups = (long)json_integer_value(json_object_get(st, "duplicates"));
		json_decref(st);
		if (unique < EVENTS)
			usleep(100 * 1000);
	}
	assert_int_equal(unique, EVENTS);
	assert_true(dups <= 64);
	fprintf(stderr, "kill -9: %ld received before the kill, %ld duplicates after restart\n",
		at_kill, dups);

	/* None stuck: no NEW and no FAILED delivery is left once things settle. */
	for (int i = 0; i < 100; i++) {
		json_t *n = e2e_get(&dmn, "/v1/deliveries?status=NEW&limit=1");
		json_t *f = e2e_get(&dmn, "/v1/deliveries?status=FAILED&limit=1");
		size_t left = json_array_size(json_object_get(n, "items")) +
			      json_array_size(json_object_get(f, "items"));
		json_decref(n);
		json_decref(f);
		if (left == 0)
			break;
		assert_true(i < 99);
		usleep(100 * 1000);
	}
	assert_int_equal(daemon_stop(&dmn), 0);
}

static void test_second_instance_refused(void **state)
{
	if (harness_pg_wanted())
		skip(); /* PostgreSQL: test_pg_second_instance_joins */
	const char *env[] = {NULL};
	daemon_stop(&dmn);
	assert_int_equal(daemon_start(&dmn, env), 0);

	/* Same database file, another port: it must refuse and say why. */
	char db[400], listen[64], log[512];
	snprintf(db, sizeof(db), "OUTBOXD_DB=%s", dmn.db);
	snprintf(listen, sizeof(listen), "OUTBOXD_LISTEN=127.0.0.1:%d", harness_free_port());
	snprintf(log, sizeof(log), "%s/second.log", dmn.dir);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		FILE *f = freopen(log, "w", stderr);
		(void)f;
		setenv("OUTBOXD_DB", db + 11, 1);
		setenv("OUTBOXD_LISTEN", listen + 15, 1);
		setenv("OUTBOXD_ADMIN_TOKEN", "x", 1);
		execl(getenv("OUTBOXD_BIN"), "outboxd", "serve", (char *)NULL);
		_exit(127);
	}
	int status = 0;
	waitpid(pid, &status, 0);
	assert_true(WIFEXITED(status));
	assert_int_not_equal(WEXITSTATUS(status), 0);
	FILE *f = fopen(log, "r");
	assert_non_null(f);
	char text[4096] = "";
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = '\0';
	fclose(f);
	assert_non_null(strstr(text, "another outboxd"));

	/* The first one is unaffected and stops cleanly on SIGTERM. */
	json_decref(e2e_get(&dmn, "/v1/subscriptions"));
	assert_int_equal(daemon_stop(&dmn), 0);
}

/* On PostgreSQL a second outboxd on the same database starts and shares the work; either
 * stops cleanly without disturbing the other. */
static void test_pg_second_instance_joins(void **state)
{
	if (!harness_pg_wanted())
		skip(); /* SQLite: test_second_instance_refused */
	char sub[64], db[400], data_dir[400];
	struct daemon second = {0};
	daemon_stop(&dmn);
	assert_int_equal(daemon_start(&dmn, NULL), 0);
	snprintf(db, sizeof(db), "OUTBOXD_DB=%s", dmn.db);
	/* The first one's data directory: its key file, which seals the subscriptions. */
	snprintf(data_dir, sizeof(data_dir), "OUTBOXD_DATA_DIR=%s", dmn.dir);
	const char *env[] = {db, data_dir, NULL};
	assert_int_equal(daemon_start(&second, env), 0);
	e2e_create_sub(&second, sub, "{\"name\":\"both\",\"event_types\":[\"join.*\"],"
			     "\"endpoint\":\"%s/join\"}", rcv.url);
	/* The first learns of the subscription on its next reload; events sent to the
	 * second are fanned out by it and delivered by either. */
	json_decref(api_call(&second, "POST", "/v1/events",
			     "{\"events\":[{\"event_type\":\"join.a\",\"payload\":1},"
			     "{\"event_type\":\"join.b\",\"payload\":2}]}", 202));
	assert_int_equal(receiver_wait_count(&rcv, "/join", 2, 10000), 0);
	json_decref(e2e_get(&dmn, "/v1/subscriptions/%s", sub));
	assert_int_equal(daemon_stop(&second), 0);
	json_decref(e2e_get(&dmn, "/v1/subscriptions"));
	assert_int_equal(daemon_stop(&dmn), 0);
	second.db[0] = '\0'; /* shared with dmn: not the second's to keep */
	daemon_cleanup(&second);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kill9_mid_delivery),
		cmocka_unit_test(test_second_instance_refused),
		cmocka_unit_test(test_pg_second_instance_joins),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
