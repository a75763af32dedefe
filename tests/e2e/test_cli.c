/* test_cli.c: the operator CLI as a script or a person uses it — readable tables,
 * --json with every page, exit codes 0/1/2/3, replay and purge from the command line,
 * unknown options refused with a suggestion, help per group and per command, names
 * wherever ids are asked for, durations printed as they are written. */
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

/* The same with stderr after stdout in out: what a person sees. */
static int run_seen(char *out, size_t len, const char *fmt, ...)
{
	char args[2048], cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "OUTBOXD_URL=%s OUTBOXD_TOKEN=%s %s %s 2>&1", dmn.url, dmn.token,
		 getenv("OUTBOXD_BIN"), args);
	return e2e_run(cmd, out, len);
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

	/* The event search: a table with the deliveries counted, and every page as JSON. */
	assert_int_equal(run(out, sizeof(out), "events list --type cli.one"), 0);
	assert_non_null(strstr(out, "DELIVERIES"));
	assert_non_null(strstr(out, "cli.one"));
	assert_non_null(strstr(out, "1 dead"));
	assert_non_null(strstr(out, "1 events"));
	assert_int_equal(run(out, sizeof(out), "--json events list --type 'cli.*' --limit 50"), 0);
	json_t *events = json_loads(out, 0, NULL);
	assert_int_equal(json_array_size(json_object_get(events, "items")), 121);
	json_decref(events);
	assert_int_equal(run(out, sizeof(out), "events list --id nope"), 1);

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
	assert_null(strstr(out, "subscriptions shown"));
	/* --top 0: none of them, and how many there are */
	assert_int_equal(run(out, sizeof(out), "stats --top 0"), 0);
	assert_non_null(strstr(out, "0 of "));
	assert_non_null(strstr(out, "subscriptions shown, failing first"));
	assert_int_equal(run(out, sizeof(out), "stats --top x"), 1); /* the API's 400 */
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

/* Every command reads its options from one table: an option it does not know is an
 * error naming it (with the closest known one when it is close), never ignored. */
static void test_cli_unknown_options(void **state)
{
	assert_int_equal(run_seen(out, sizeof(out), "subs list --bogus x"), 2);
	assert_non_null(strstr(out, "unknown option --bogus for `subs list`"));
	assert_null(strstr(out, "ENDPOINT")); /* nothing listed */
	assert_int_equal(run_seen(out, sizeof(out), "subs list --bogus=1"), 2);
	assert_non_null(strstr(out, "unknown option --bogus for `subs list`"));
	assert_int_equal(run_seen(out, sizeof(out), "dlq list --stauts FAILED"), 2);
	assert_non_null(strstr(out, "unknown option --stauts for `dlq list`; did you mean --status?"));
	assert_int_equal(run_seen(out, sizeof(out), "deliveries list --subscriptoin x"), 2);
	assert_non_null(strstr(out, "did you mean --subscription?"));
	/* a flag it does not know is not taken for an option waiting for its value */
	assert_int_equal(run_seen(out, sizeof(out), "stats --verbose"), 2);
	assert_non_null(strstr(out, "unknown option --verbose for `stats`"));
	assert_null(strstr(out, "needs a value"));
	/* a flag never takes the next word; a value option without one says so */
	assert_int_equal(run_seen(out, sizeof(out), "subs list --json extra"), 2);
	assert_non_null(strstr(out, "unexpected argument \"extra\""));
	assert_int_equal(run_seen(out, sizeof(out), "dlq list --status"), 2);
	assert_non_null(strstr(out, "--status needs a value"));
	assert_int_equal(run_seen(out, sizeof(out), "dlq list --all=1"), 2);
	assert_non_null(strstr(out, "--all takes no value"));
	assert_int_equal(run_seen(out, sizeof(out), "subs lst"), 2);
	assert_non_null(strstr(out, "did you mean `subs list`?"));
	assert_int_equal(run_seen(out, sizeof(out), "subs show"), 2);
	assert_int_equal(run_seen(out, sizeof(out), "subs show a b"), 2);
	/* the global options go before the group, after it, or after the command */
	assert_int_equal(run(out, sizeof(out), "--json subs list"), 0);
	assert_int_equal(run(out, sizeof(out), "subs --json list"), 0);
	assert_int_equal(run(out, sizeof(out), "subs list --json"), 0);
	assert_non_null(strstr(out, "\"items\""));
}

/* outboxd --help lists the groups, outboxd GROUP --help that group's commands only,
 * outboxd GROUP COMMAND --help that command's options. */
static void test_cli_help(void **state)
{
	assert_int_equal(run(out, sizeof(out), "--help"), 0);
	assert_non_null(strstr(out, "  subs "));
	assert_non_null(strstr(out, "  dlq "));
	assert_int_equal(run(out, sizeof(out), "subs --help"), 0);
	assert_non_null(strstr(out, "subs create"));
	assert_non_null(strstr(out, "subs enable ID|NAME"));
	assert_null(strstr(out, "dlq replay"));
	assert_null(strstr(out, "events send"));
	assert_null(strstr(out, "--endpoint URL  ")); /* options are each command's help */
	assert_non_null(strstr(out, "Exit codes"));
	assert_int_equal(run(out, sizeof(out), "subs create --help"), 0);
	assert_non_null(strstr(out, "usage: outboxd subs create"));
	assert_non_null(strstr(out, "--endpoint URL"));
	assert_non_null(strstr(out, "--url URL"));
	assert_null(strstr(out, "subs delete"));
	assert_int_equal(run(out, sizeof(out), "dlq replay -h"), 0);
	assert_non_null(strstr(out, "--rate N"));
	assert_non_null(strstr(out, "--subscription ID|NAME"));
	assert_int_equal(run(out, sizeof(out), "stats --help"), 0);
	assert_non_null(strstr(out, "usage: outboxd stats"));
	/* help wins over what else is wrong on the line */
	assert_int_equal(run(out, sizeof(out), "subs list --bogus --help"), 0);
	/* a group without a command: its help, on stderr, exit 2 */
	assert_int_equal(run_seen(out, sizeof(out), "jobs"), 2);
	assert_non_null(strstr(out, "jobs wait ID"));
	assert_null(strstr(out, "tokens create"));
}

/* A subscription's name does wherever its id does; a token's for revoke. */
static void test_cli_names(void **state)
{
	int port = harness_free_port();
	assert_int_equal(run(out, sizeof(out),
			     "subs create --name by-name --endpoint http://127.0.0.1:%d/x "
			     "--types 'named.*'", port), 0);
	assert_int_equal(run(out, sizeof(out), "--json subs show by-name"), 0);
	json_t *sub = json_loads(out, 0, NULL);
	assert_non_null(sub);
	char id[64];
	snprintf(id, sizeof(id), "%s", json_string_value(json_object_get(sub, "id")));
	json_decref(sub);

	assert_int_equal(run(out, sizeof(out), "subs disable by-name"), 0);
	assert_non_null(strstr(out, "disabled by-name"));
	assert_non_null(strstr(out, id));
	json_t *got = e2e_get(&dmn, "/v1/subscriptions/%s", id);
	assert_true(json_is_false(json_object_get(got, "enabled")));
	json_decref(got);
	assert_int_equal(run(out, sizeof(out), "subs enable by-name"), 0);
	got = e2e_get(&dmn, "/v1/subscriptions/%s", id);
	assert_true(json_is_true(json_object_get(got, "enabled")));
	json_decref(got);
	assert_int_equal(run(out, sizeof(out), "subs update by-name --types 'named.*,other'"), 0);
	assert_non_null(strstr(out, "named.*,other"));

	/* a payload filter set and removed; a glob lists by name, case ignored */
	assert_int_equal(run(out, sizeof(out),
			     "subs update by-name --filter '{\"n\":{\"$gte\":1}}'"), 0);
	got = e2e_get(&dmn, "/v1/subscriptions/%s", id);
	assert_int_equal(json_integer_value(json_object_get(json_object_get(json_object_get(
				 got, "filter"), "n"), "$gte")), 1);
	json_decref(got);
	assert_int_equal(run_seen(out, sizeof(out), "subs update by-name --filter '{\"n\":'"), 2);
	assert_non_null(strstr(out, "--filter is not JSON"));
	assert_int_equal(run(out, sizeof(out), "subs update by-name --filter none"), 0);
	got = e2e_get(&dmn, "/v1/subscriptions/%s", id);
	assert_null(json_object_get(got, "filter"));
	json_decref(got);
	assert_int_equal(run(out, sizeof(out), "subs list --name 'BY-*'"), 0);
	assert_non_null(strstr(out, id));
	assert_int_equal(run(out, sizeof(out), "subs list --name 'zz*'"), 0);
	assert_null(strstr(out, id));

	/* the --subscription filter: one event for it, listed by name */
	assert_int_equal(run(out, sizeof(out), "events send --type named.one --data '{}'"), 0);
	assert_int_equal(run(out, sizeof(out), "events types"), 0);
	assert_non_null(strstr(out, "named.one"));
	assert_non_null(strstr(out, "event types"));
	assert_int_equal(run(out, sizeof(out), "events send --type unsubscribed.two --data '{\"k\":7}'"), 0);
	assert_int_equal(run(out, sizeof(out), "events list --filter '{\"k\":7}'"), 0);
	assert_non_null(strstr(out, "unsubscribed.two"));
	assert_null(strstr(out, "named.one"));
	for (int i = 0; i < 100; i++) {
		assert_int_equal(run(out, sizeof(out), "--json deliveries list --subscription by-name"), 0);
		json_t *l = json_loads(out, 0, NULL);
		size_t n = json_array_size(json_object_get(l, "items"));
		const char *sid = json_string_value(
			json_object_get(json_array_get(json_object_get(l, "items"), 0), "subscription_id"));
		int found = n == 1 && sid && strcmp(sid, id) == 0;
		json_decref(l);
		if (found)
			break;
		assert_true(i < 99);
		usleep(100 * 1000);
	}
	assert_int_equal(run(out, sizeof(out), "dlq replay --subscription by-name --dry-run"), 0);
	assert_non_null(strstr(out, "(dry run)"));

	/* an unknown name: exit 1, named, with the close one */
	assert_int_equal(run_seen(out, sizeof(out), "subs show by-nam"), 1);
	assert_non_null(strstr(out, "no subscription is named \"by-nam\"; did you mean \"by-name\"?"));
	assert_int_equal(run_seen(out, sizeof(out), "dlq list --subscription nobody"), 1);
	assert_non_null(strstr(out, "no subscription is named \"nobody\""));

	assert_int_equal(run(out, sizeof(out), "tokens create cli-reader --scopes read"), 0);
	assert_int_equal(run(out, sizeof(out), "tokens revoke cli-reader"), 0);
	assert_non_null(strstr(out, "revoked cli-reader"));
	assert_int_equal(run(out, sizeof(out), "tokens revoke cli-reader"), 1);

	assert_int_equal(run(out, sizeof(out), "subs delete by-name"), 0);
	assert_int_equal(run(out, sizeof(out), "subs show %s", id), 1); /* 404 */
}

/* Durations as they are written: a subscription shows what it was given, check-config
 * the settings in the largest exact unit, not in milliseconds. */
static void test_cli_durations(void **state)
{
	int port = harness_free_port();
	assert_int_equal(run(out, sizeof(out),
			     "subs create --name timed --endpoint http://127.0.0.1:%d/x --types t "
			     "--body '{\"disable_after\":\"5d\",\"retry\":{\"interval\":\"90s\"}}'",
			     port), 0);
	assert_int_equal(run(out, sizeof(out), "subs show timed"), 0);
	assert_non_null(strstr(out, "\"5d\""));
	assert_non_null(strstr(out, "\"90s\""));
	assert_int_equal(run(out, sizeof(out), "subs delete timed"), 0);

	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "env -u OUTBOXD_DB %s check-config --retry-after-max 90m "
		 "--retry-interval 250ms --delivery-timeout 90s 2>&1", getenv("OUTBOXD_BIN"));
	assert_int_equal(e2e_run(cmd, out, sizeof(out)), 0);
	assert_non_null(strstr(out, "disable_after = 5d\n"));
	assert_non_null(strstr(out, "retry_after_max = 90m\n"));
	assert_non_null(strstr(out, "retry_interval = 250ms\n"));
	assert_non_null(strstr(out, "delivery_timeout = 90s\n"));
	assert_non_null(strstr(out, "lease = 2m\n"));
	assert_null(strstr(out, "000ms\n"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cli_flow),
		cmocka_unit_test(test_cli_unknown_options),
		cmocka_unit_test(test_cli_help),
		cmocka_unit_test(test_cli_names),
		cmocka_unit_test(test_cli_durations),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
