/* test_cli.c: the operator CLI as a script or a person uses it — readable tables,
 * --json with every page, exit codes 0/1/2/3, replay and purge from the command line. */
#include "e2e.h"

#include <sys/wait.h>

static struct receiver rcv;
static struct daemon dmn;

static int setup(void **state)
{
	assert_int_equal(receiver_start(&rcv), 0);
	memset(&dmn, 0, sizeof(dmn));
	const char *env[] = {"OUTBOXD_RETRY_INTERVAL=100ms", "OUTBOXD_MAX_RETRIES=1", NULL};
	assert_int_equal(daemon_start(&dmn, env), 0);
	return 0;
}

static int teardown(void **state)
{
	e2e_teardown(&rcv, &dmn);
	return 0;
}

/* Runs `outboxd <args>` against the daemon; returns the exit code, stdout in out. */
static int run(char *out, size_t len, const char *fmt, ...)
{
	char args[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	return e2e_cli(&dmn, out, len, args);
}

static char out[1 << 20];

static void test_cli_flow(void **state)
{
	int port = harness_free_port();
	assert_int_equal(run(out, sizeof(out),
			     "subs create --name cli --endpoint http://127.0.0.1:%d/down --types 'cli.*'",
			     port), 0);
	assert_non_null(strstr(out, "created"));
	assert_non_null(strstr(out, "cli.*"));

	/* 120 events through the CLI's batch-free path would be slow; use the API. */
	char body[65536];
	size_t off = (size_t)snprintf(body, sizeof(body), "{\"events\":[");
	for (int i = 0; i < 120; i++)
		off += (size_t)snprintf(body + off, sizeof(body) - off,
					"%s{\"event_type\":\"cli.test\",\"payload\":{\"i\":%d}}", i ? "," : "", i);
	snprintf(body + off, sizeof(body) - off, "]}");
	json_decref(api_call(&dmn, "POST", "/v1/events", body, 202));
	assert_int_equal(run(out, sizeof(out), "events send --type cli.one --data '{\"x\":1}'"), 0);
	assert_int_equal(strlen(out), 37); /* the event id and a newline */

	/* Wait until all 121 are dead (3 immediate + 1 scheduled retry each). */
	json_t *all = NULL;
	for (int64_t until = harness_now_ms() + 30000;;) {
		assert_int_equal(run(out, sizeof(out), "--json dlq list --limit 50"), 0);
		json_decref(all);
		all = json_loads(out, 0, NULL);
		assert_non_null(all);
		if (json_array_size(json_object_get(all, "items")) == 121 ||
		    harness_now_ms() >= until)
			break;
		usleep(100 * 1000);
	}
	/* --json gathers every page (three pages of 50 here). */
	assert_int_equal(json_array_size(json_object_get(all, "items")), 121);
	char first[64];
	snprintf(first, sizeof(first), "%s",
		 json_string_value(json_object_get(json_array_get(json_object_get(all, "items"), 0), "id")));
	json_decref(all);

	/* The table: a header, rows with the mapped error, and a count. */
	assert_int_equal(run(out, sizeof(out), "dlq list --limit 5"), 0);
	assert_non_null(strstr(out, "LAST ERROR"));
	assert_non_null(strstr(out, "503 connection refused"));
	assert_non_null(strstr(out, "FAILED*"));

	assert_int_equal(run(out, sizeof(out), "deliveries show %s", first), 0);
	assert_non_null(strstr(out, "dead-lettered"));
	assert_non_null(strstr(out, "scheduled"));

	/* Replay by id and by filter, then purge one. */
	assert_int_equal(run(out, sizeof(out), "dlq replay %s", first), 0);
	assert_non_null(strstr(out, "replayed 1"));
	assert_int_equal(run(out, sizeof(out), "dlq replay --type cli.one --dry-run"), 0);
	assert_non_null(strstr(out, "would replay 1 (dry run)"));
	/* A filter replay is a paced job; without a terminal the CLI prints its end state. */
	assert_int_equal(run(out, sizeof(out), "dlq replay --type cli.one --rate 50"), 0);
	assert_non_null(strstr(out, "replay job"));
	assert_non_null(strstr(out, "done"));
	assert_non_null(strstr(out, "1/1 replayed"));
	/* the replayed one dies again (its manual round failed too) before it is purged */
	int dead = 0;
	for (int64_t until = harness_now_ms() + 30000; !dead;) {
		json_t *d = e2e_get(&dmn, "/v1/deliveries/%s", first);
		dead = json_is_true(json_object_get(d, "dead")) &&
		       json_integer_value(json_object_get(d, "attempt_count")) > 4;
		json_decref(d);
		if (dead || harness_now_ms() >= until)
			break;
		usleep(100 * 1000);
	}
	assert_true(dead);
	assert_int_equal(run(out, sizeof(out), "dlq purge %s", first), 0);
	assert_int_equal(run(out, sizeof(out), "dlq purge"), 2); /* no filter, no --all */
	assert_int_equal(run(out, sizeof(out), "dlq purge --type cli.test --dry-run"), 0);
	assert_non_null(strstr(out, "would purge"));
	assert_int_equal(run(out, sizeof(out), "stats"), 0);
	assert_non_null(strstr(out, "SUBSCRIPTION"));
	assert_non_null(strstr(out, "cli"));
	assert_int_equal(run(out, sizeof(out), "deliveries show %s", first), 1); /* 404 */

	/* Exit codes: 1 the API said no, 2 usage, 3 unreachable. */
	assert_int_equal(run(out, sizeof(out), "deliveries list --status LOST"), 1);
	assert_int_equal(run(out, sizeof(out), "dlq list --no-such-option x"), 2);
	assert_int_equal(run(out, sizeof(out), "events send --type x"), 2);
	assert_int_equal(run(out, sizeof(out), "--url http://127.0.0.1:%d dlq list", harness_free_port()), 3);
	assert_int_equal(run(out, sizeof(out), "--token wrong subs list"), 1);
	assert_int_equal(run(out, sizeof(out), "dlq --help"), 0);
	assert_non_null(strstr(out, "Exit codes"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cli_flow),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
