/* test_local_secrets.c: what outboxd leaves of its secrets on the machine it runs on.
 *
 *  - under umask 022, the data directory outboxd creates is 0700 and every file of the
 *    SQLite store (the database, -wal, -shm, the lock), the generated admin token and the
 *    generated secret key are 0600;
 *  - a generated admin token is printed only to a terminal: with stderr to a file (as
 *    under journald) the log names where it is kept, never the token; with stderr on a
 *    pseudo-terminal the token is shown once;
 *  - a secret given as a flag (serve's settings, the CLI's --token, rotate-key's
 *    --new-secret-key) is warned about, naming /proc/PID/cmdline and the environment
 *    variable to use instead, and the warning never repeats the value.
 * The store files are checked on SQLite; the rest runs on both backends. */
#include "e2e.h"
#include "harness_pg.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

static struct daemon dmn;

static int teardown(void **state)
{
	e2e_teardown(NULL, &dmn);
	return 0;
}

static unsigned mode_of(const char *path)
{
	struct stat sb;
	if (stat(path, &sb) != 0) {
		fprintf(stderr, "cannot stat %s\n", path);
		fail();
	}
	return (unsigned)(sb.st_mode & 0777);
}

/* The first line of a file (at most len - 1 bytes) into out. */
static void first_line(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(out, (int)len, f));
	fclose(f);
	out[strcspn(out, "\r\n")] = '\0';
}

static void test_files_private_under_umask_022(void **state)
{
	char data[512], db[600], file[700], env_db[700], env_data[600], log[512], token[80];
	int sqlite = !harness_pg_wanted();

	memset(&dmn, 0, sizeof(dmn));
	char *dir = harness_tmpdir("local-secrets");
	assert_non_null(dir);
	snprintf(dmn.dir, sizeof(dmn.dir), "%s", dir);
	free(dir);
	/* a data directory outboxd makes itself: the SQLite file's folder (with the folder
	 * above it), or a new one */
	snprintf(data, sizeof(data), sqlite ? "%s/new/state" : "%s/state", dmn.dir);
	snprintf(db, sizeof(db), "%s/outboxd.db", data);
	snprintf(env_db, sizeof(env_db), "OUTBOXD_DB=sqlite:%s", db);
	snprintf(env_data, sizeof(env_data), "OUTBOXD_DATA_DIR=%s", data);
	const char *env_sqlite[] = {env_db, "OUTBOXD_DATA_DIR", "OUTBOXD_ADMIN_TOKEN", NULL};
	const char *env_pg[] = {env_data, "OUTBOXD_ADMIN_TOKEN", NULL};

	mode_t was = umask(022);
	int started = daemon_start(&dmn, sqlite ? env_sqlite : env_pg);
	umask(was);
	assert_int_equal(started, 0);

	snprintf(file, sizeof(file), "%s/admin.token", data);
	first_line(file, token, sizeof(token));
	assert_int_equal(strlen(token), 52);
	snprintf(dmn.token, sizeof(dmn.token), "%s", token);
	/* some writes, so that the WAL and its index exist */
	json_decref(api_call(&dmn, "POST", "/v1/events",
			     "{\"event_type\":\"files.x\",\"payload\":{}}", 202));
	json_decref(api_call(&dmn, "GET", "/v1/stats", NULL, 200));

	assert_int_equal(mode_of(data), 0700);
	assert_int_equal(mode_of(file), 0600);
	snprintf(file, sizeof(file), "%s/secret.key", data);
	assert_int_equal(mode_of(file), 0600);
	if (sqlite) {
		snprintf(file, sizeof(file), "%s/new", dmn.dir);
		assert_int_equal(mode_of(file), 0700);
		static const char *const suffixes[] = {"", "-wal", "-shm", ".lock"};
		for (size_t i = 0; i < 4; i++) {
			snprintf(file, sizeof(file), "%s%s", db, suffixes[i]);
			if (mode_of(file) != 0600)
				fprintf(stderr, "%s: mode %03o\n", file, mode_of(file));
			assert_int_equal(mode_of(file), 0600);
		}
	}

	/* stderr is a file here: the token is not in it, where it is kept is */
	daemon_log_path(&dmn, log, sizeof(log));
	assert_false(e2e_file_contains(log, token));
	assert_true(e2e_file_contains(log, "generated an admin token into"));
}

/* Reads the pseudo-terminal's master side until needle shows (or timeout_ms pass); the
 * text into out. 1 when it showed. */
static int read_until(int master, char *out, size_t len, const char *needle, int timeout_ms)
{
	size_t have = 0;
	int64_t until = harness_now_ms() + timeout_ms;
	out[0] = '\0';
	while (harness_now_ms() < until) {
		struct pollfd p = {.fd = master, .events = POLLIN};
		if (poll(&p, 1, 200) <= 0)
			continue;
		ssize_t n = read(master, out + have, len - 1 - have);
		if (n <= 0)
			break;
		have += (size_t)n;
		out[have] = '\0';
		if (strstr(out, needle) && strstr(strstr(out, needle), "obx_"))
			return 1;
		if (have == len - 1)
			break;
	}
	return 0;
}

static void test_token_shown_on_a_terminal(void **state)
{
	char listen[64], env_dir[600], env_db[700], file[700], token[128];
	static char out[65536];
	char *dir = harness_tmpdir("local-tty");
	assert_non_null(dir);

	/* serve on SQLite in dir, stderr a pseudo-terminal, no admin token configured */
	int master = posix_openpt(O_RDWR | O_NOCTTY);
	assert_true(master >= 0);
	assert_int_equal(grantpt(master), 0);
	assert_int_equal(unlockpt(master), 0);
	int slave = open(ptsname(master), O_RDWR | O_NOCTTY);
	assert_true(slave >= 0);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", harness_free_port());
	snprintf(env_db, sizeof(env_db), "sqlite:%s/outboxd.db", dir);
	snprintf(env_dir, sizeof(env_dir), "%s", dir);
	setenv("OUTBOXD_DB", env_db, 1);
	setenv("OUTBOXD_LISTEN", listen, 1);
	setenv("OUTBOXD_DATA_DIR", env_dir, 1);
	unsetenv("OUTBOXD_ADMIN_TOKEN");
	char *argv[] = {getenv("OUTBOXD_BIN"), "serve", NULL};
	pid_t pid = harness_spawn(argv[0], argv, slave, slave);
	close(slave);
	unsetenv("OUTBOXD_DB");
	unsetenv("OUTBOXD_LISTEN");
	unsetenv("OUTBOXD_DATA_DIR");
	assert_true(pid > 0);

	int shown = read_until(master, out, sizeof(out), "Generated an admin token", 20000);
	close(master);
	harness_stop(pid, SIGTERM, 15000);
	if (!shown)
		fprintf(stderr, "the terminal showed:\n%s\n", out);
	assert_true(shown);
	snprintf(file, sizeof(file), "%s/admin.token", dir);
	first_line(file, token, sizeof(token));
	assert_non_null(strstr(out, token));
	harness_rmrf(dir);
	free(dir);
}

/* Runs `$OUTBOXD_BIN args` with stderr and stdout into out; returns the exit code. */
static int run(char *out, size_t len, const char *args)
{
	char cmd[4096];
	snprintf(cmd, sizeof(cmd), "env -u OUTBOXD_DB -u OUTBOXD_TOKEN %s %s 2>&1",
		 getenv("OUTBOXD_BIN"), args);
	return e2e_run(cmd, out, len);
}

static void test_secret_flags_warn(void **state)
{
	static char out[65536];
	char args[1024];
	char *dir = harness_tmpdir("local-flags");
	assert_non_null(dir);

	snprintf(args, sizeof(args), "check-config --db sqlite:%s/x.db --listen 127.0.0.1:1 "
		 "--admin-token adm-on-argv-1 --ingest-token ing-on-argv-2 --secret-key "
		 "5ec4e7c1a55e5ec4e7c1a55e5ec4e7c1a55e5ec4e7c1a55e5ec4e7c1a55e5ec4 "
		 "--otlp-endpoint http://127.0.0.1:4318 --otlp-headers X-Api-Key=hdr-on-argv-3",
		 dir);
	assert_int_equal(run(out, sizeof(out), args), 0);
	static const char *const warned[] = {"--admin-token", "--ingest-token", "--secret-key",
					     "--otlp-headers"};
	for (size_t i = 0; i < 4; i++) {
		char line[128];
		snprintf(line, sizeof(line), "%s holds a secret", warned[i]);
		if (!strstr(out, line))
			fprintf(stderr, "no warning for %s in:\n%s\n", warned[i], out);
		assert_non_null(strstr(out, line));
	}
	assert_non_null(strstr(out, "/cmdline"));
	assert_non_null(strstr(out, "OUTBOXD_ADMIN_TOKEN"));
	assert_null(strstr(out, "--listen holds"));
	assert_null(strstr(out, "--db holds"));
	assert_null(strstr(out, "--otlp-endpoint holds"));
	assert_null(strstr(out, "adm-on-argv-1"));
	assert_null(strstr(out, "ing-on-argv-2"));
	assert_null(strstr(out, "hdr-on-argv-3"));
	assert_null(strstr(out, "5ec4e7c1a55e"));

	/* a password in a PostgreSQL URL is a secret too; one without is not */
	snprintf(args, sizeof(args), "check-config --db postgres://u:pw-on-argv-4@127.0.0.1:1/x");
	run(out, sizeof(out), args);
	assert_non_null(strstr(out, "--db holds a secret"));
	assert_null(strstr(out, "pw-on-argv-4"));

	/* the CLI's token and rotate-key's new key */
	assert_int_equal(run(out, sizeof(out), "--url http://127.0.0.1:1 --token cli-on-argv-5 "
				 "stats"), 3);
	assert_non_null(strstr(out, "--token holds a secret"));
	assert_non_null(strstr(out, "OUTBOXD_TOKEN"));
	assert_null(strstr(out, "cli-on-argv-5"));
	run(out, sizeof(out), "rotate-key --db sqlite:/proc/nonexistent/x.db --new-secret-key "
			      "6ec4e7c1a55e5ec4e7c1a55e5ec4e7c1a55e5ec4e7c1a55e5ec4e7c1a55e5ec4");
	assert_non_null(strstr(out, "--new-secret-key holds a secret"));
	assert_non_null(strstr(out, "OUTBOXD_NEW_SECRET_KEY"));
	assert_null(strstr(out, "6ec4e7c1a55e"));
	harness_rmrf(dir);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_files_private_under_umask_022, teardown),
		cmocka_unit_test(test_token_shown_on_a_terminal),
		cmocka_unit_test(test_secret_flags_warn),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
