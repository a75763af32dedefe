/* test_admin.c: the commands for deployments, on the store of each backend.
 * `outboxd migrate` brings a fresh store to the current schema without serving (and is a
 * no-op the second time), outboxd then serves on it; on SQLite, migrate refuses while
 * outboxd holds the store. `outboxd check-config` prints the effective settings with no
 * secret in them and exits 2 naming a bad setting. Runs on SQLite and PostgreSQL. */
#include "e2e.h"
#include "harness_pg.h"

#include <sys/stat.h>

static struct daemon dmn;
static char dir[256], dsn[300];

static int setup(void **state)
{
	char *tmp = harness_tmpdir("outboxd-admin");
	assert_non_null(tmp);
	snprintf(dir, sizeof(dir), "%s", tmp);
	free(tmp);
	if (harness_pg_wanted())
		assert_int_equal(harness_pg_fresh_db(dsn, sizeof(dsn)), 0);
	else
		snprintf(dsn, sizeof(dsn), "sqlite:%s/store.db", dir);
	return 0;
}

static int teardown(void **state)
{
	daemon_cleanup(&dmn);
	harness_rmrf(dir);
	return 0;
}

/* Runs `$OUTBOXD_BIN args` with stdout and stderr into out; returns the exit code. */
static int run(char *out, size_t len, const char *fmt, ...)
{
	char args[2048], cmd[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	snprintf(cmd, sizeof(cmd), "env -u OUTBOXD_DB %s %s 2>&1", getenv("OUTBOXD_BIN"), args);
	return e2e_run(cmd, out, len);
}

static void test_migrate_then_serve(void **state)
{
	char out[8192], env_db[320];

	assert_int_equal(run(out, sizeof(out), "migrate --db '%s'", dsn), 0);
	assert_non_null(strstr(out, "applied schema migration 1 "));
	assert_non_null(strstr(out, "schema is current"));
	/* the second time there is nothing to apply */
	assert_int_equal(run(out, sizeof(out), "migrate --db '%s'", dsn), 0);
	assert_null(strstr(out, "applied schema migration"));
	assert_non_null(strstr(out, "schema is current"));

	/* outboxd serves on the migrated store, and finds nothing to migrate */
	snprintf(env_db, sizeof(env_db), "OUTBOXD_DB=%s", dsn);
	const char *env[] = {env_db, NULL};
	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, env), 0);
	char path[512];
	assert_false(e2e_file_contains(daemon_log_path(&dmn, path, sizeof(path)),
				       "applied schema migration"));
	char ev[64];
	e2e_send(&dmn, ev, "{\"event_type\":\"admin.check\",\"payload\":{}}");
	if (!harness_pg_wanted()) {
		/* one outboxd owns an SQLite store: migrate says so and changes nothing */
		assert_int_equal(run(out, sizeof(out), "migrate --db '%s'", dsn), 1);
		assert_non_null(strstr(out, "another outboxd holds this SQLite store"));
	} else {
		/* PostgreSQL: migrate beside running instances (the advisory lock) */
		assert_int_equal(run(out, sizeof(out), "migrate --db '%s'", dsn), 0);
	}
	assert_int_equal(daemon_stop(&dmn), 0);
	assert_int_equal(run(out, sizeof(out), "migrate --db 'nosuch:x'"), 1);
	assert_non_null(strstr(out, "unknown database URL"));
}

static void test_check_config(void **state)
{
	char out[16384], conf[300];
	snprintf(conf, sizeof(conf), "%s/outboxd.conf", dir);
	FILE *f = fopen(conf, "w");
	assert_non_null(f);
	fprintf(f, "db = \"postgres://app:pg-s3cret@db.example/outboxd\"\n"
		   "admin_token = \"tok-s3cret\"\n"
		   "kafka_config = \"sasl.username=u;sasl.password=kafka-s3cret\"\n"
		   "retry_interval = 750ms\n");
	fclose(f);
	assert_int_equal(run(out, sizeof(out), "check-config --config %s --max-in-flight 9", conf), 0);
	assert_null(strstr(out, "s3cret"));
	assert_non_null(strstr(out, "db = \"postgres://app:********@db.example/outboxd\"\n"));
	assert_non_null(strstr(out, "admin_token = \"********\"\n"));
	assert_non_null(strstr(out, "kafka_config = \"sasl.username=u;sasl.password=********\"\n"));
	assert_non_null(strstr(out, "retry_interval = 750ms\n"));
	assert_non_null(strstr(out, "max_in_flight = 9\n"));
	assert_non_null(strstr(out, "# otlp_endpoint = (unset)\n"));

	/* a bad value: exit 2 and the setting named */
	assert_int_equal(run(out, sizeof(out), "check-config --config %s --retry-interval soon", conf), 2);
	assert_non_null(strstr(out, "retry_interval"));
	assert_int_equal(run(out, sizeof(out), "check-config --log-level loud"), 2);
	assert_non_null(strstr(out, "log_level"));
	assert_int_equal(run(out, sizeof(out), "check-config --config %s/missing.conf", dir), 2);
	assert_non_null(strstr(out, "missing.conf"));
}

/* check-config refuses what serve refuses, and serve exits 2 on it (a systemd unit's
 * RestartPreventExitStatus=2 stops there instead of restarting in a loop): a listen
 * that is not host:port, a port over 65535 (which the resolver would wrap into another
 * port), a host that does not resolve, a Kafka property librdkafka refuses. */
static void test_check_config_as_serve(void **state)
{
	char out[16384];
	static const struct {
		const char *flags;
		const char *named;
	} bad[] = {
		{"--listen nope", "listen"},
		{"--listen 127.0.0.1:99999", "65535"},
		{"--listen 127.0.0.1:80a", "port"},
		{"--listen ::1:8080", "brackets"},
		{"--listen no-such-host.invalid:8080", "cannot resolve"},
		{"--kafka-brokers 127.0.0.1:9 --kafka-config bogus.property=1", "bogus.property"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int check = run(out, sizeof(out), "check-config --db sqlite:%s/cc.db %s", dir,
				bad[i].flags);
		if (check != 2 || !strstr(out, bad[i].named))
			fprintf(stderr, "check-config %s: exit %d, %s\n", bad[i].flags, check, out);
		assert_int_equal(check, 2);
		assert_non_null(strstr(out, bad[i].named));
		int serve = run(out, sizeof(out), "serve --db sqlite:%s/cc.db %s", dir, bad[i].flags);
		if (serve != 2 || !strstr(out, bad[i].named))
			fprintf(stderr, "serve %s: exit %d, %s\n", bad[i].flags, serve, out);
		assert_int_equal(serve, 2);
		assert_non_null(strstr(out, bad[i].named));
	}
	/* the forms serve takes */
	assert_int_equal(run(out, sizeof(out), "check-config --listen [::1]:8080"), 0);
	assert_int_equal(run(out, sizeof(out), "check-config --listen localhost:0"), 0);
}

/* As root, the commands that write a store refuse one that belongs to another user (the
 * service's): files root made there could not be opened by the service. The owner itself
 * migrates it. Needs root (to own files as another user); skipped otherwise. */
static void test_root_refused_on_service_store(void **state)
{
	char out[16384], svc[300];
	if (geteuid() != 0) {
		skip();
		return;
	}
	snprintf(svc, sizeof(svc), "%s/service", dir);
	assert_int_equal(mkdir(svc, 0700), 0);
	assert_int_equal(chown(dir, 0, 0), 0);
	assert_int_equal(chmod(dir, 0755), 0);
	assert_int_equal(chown(svc, 65534, 65534), 0); /* nobody */
	static const char *const commands[] = {"migrate", "serve", "rotate-key"};
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		int rc = run(out, sizeof(out), "%s --db sqlite:%s/outboxd.db --data-dir %s",
			     commands[i], svc, svc);
		if (rc != 2 || !strstr(out, "belongs to the user"))
			fprintf(stderr, "%s as root on nobody's store: exit %d: %s\n", commands[i],
				rc, out);
		assert_int_equal(rc, 2);
		assert_non_null(strstr(out, "belongs to the user"));
		assert_non_null(strstr(out, commands[i]));
	}
	struct stat sb;
	assert_int_equal(stat(svc, &sb), 0);
	assert_int_equal(sb.st_uid, 65534);
	char path[400];
	snprintf(path, sizeof(path), "%s/outboxd.db", svc);
	assert_int_equal(access(path, F_OK), -1); /* root made nothing there */
	/* the owner migrates it */
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "env -u OUTBOXD_DB setpriv --reuid=65534 --regid=65534 "
		 "--clear-groups %s migrate --db sqlite:%s --data-dir %s 2>&1",
		 getenv("OUTBOXD_BIN"), path, svc);
	int rc = e2e_run(cmd, out, sizeof(out));
	if (rc != 0)
		fprintf(stderr, "migrate as nobody: exit %d: %s\n", rc, out);
	assert_int_equal(rc, 0);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_uid, 65534);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_migrate_then_serve),
		cmocka_unit_test(test_check_config),
		cmocka_unit_test(test_check_config_as_serve),
		cmocka_unit_test(test_root_refused_on_service_store),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
