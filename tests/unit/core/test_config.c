/* test_config.c: settings precedence (flags > environment > file > defaults), value
 * parsing, and errors that name the key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "core/config.h"
#include "core/model.h"

static void test_defaults(void **state)
{
	struct config c;
	char err[256];
	char *envp[] = {NULL};
	assert_int_equal(config_load(&c, NULL, envp, 0, NULL, err, sizeof(err)), 0);
	assert_string_equal(c.db, "sqlite:./var/outboxd.db");
	assert_string_equal(c.listen, "127.0.0.1:8080");
	assert_int_equal(c.retry_interval_ms, 3000);
	assert_int_equal(c.max_retries, -1); /* unset: each policy's own default */
	assert_int_equal(c.retry_batch, 100);
	assert_int_equal(c.retry_timeout_ms, 5000);
	assert_int_equal(c.delivery_timeout_ms, 1000);
	assert_int_equal(c.immediate_tries, 4);
	assert_int_equal(c.cleanup_enabled, 0);
	assert_int_equal(c.cleanup_interval_ms, 3600000);
	assert_int_equal(c.max_payload, 1048576);
	assert_null(c.admin_token);
	config_free(&c);
}

static void test_precedence(void **state)
{
	struct config c;
	char err[256];
	const char *file = "# comment\nretry_interval = 10s\nmax_retries = 7\nlisten = \"0.0.0.0:1\"\n"
			   "cleanup_enabled = true\n";
	char *envp[] = {"OUTBOXD_MAX_RETRIES=8", "OUTBOXD_LISTEN=1.2.3.4:5", "HOME=/x", NULL};
	char *argv[] = {"--listen", "9.9.9.9:9", "--max-payload=2KiB", "--cleanup-enabled", "false"};
	assert_int_equal(config_load(&c, file, envp, 5, argv, err, sizeof(err)), 0);
	assert_int_equal(c.retry_interval_ms, 10000); /* file */
	assert_int_equal(c.max_retries, 8);           /* env beats file */
	assert_string_equal(c.listen, "9.9.9.9:9");   /* flag beats env */
	assert_int_equal(c.max_payload, 2048);
	assert_int_equal(c.cleanup_enabled, 0);
	config_free(&c);
}

/* A '#' inside a quoted value is part of it; outside quotes it starts a comment. */
static void test_hash_in_quotes(void **state)
{
	struct config c;
	char err[256];
	const char *file = "db = \"postgres://u:p#ss@db/outboxd\" # the store\n"
			   "admin_token = \"ab#cd\"\nlisten = 127.0.0.1:9 # unquoted: a comment\n";
	assert_int_equal(config_load(&c, file, NULL, 0, NULL, err, sizeof(err)), 0);
	assert_string_equal(c.db, "postgres://u:p#ss@db/outboxd");
	assert_string_equal(c.admin_token, "ab#cd");
	assert_string_equal(c.listen, "127.0.0.1:9");
	config_free(&c);
}

static void expect_error(const char *file, char **envp, int argc, char **argv, const char *needle)
{
	struct config c;
	char err[256] = "";
	assert_int_equal(config_load(&c, file, envp, argc, argv, err, sizeof(err)), -1);
	if (!strstr(err, needle))
		fprintf(stderr, "error \"%s\" lacks \"%s\"\n", err, needle);
	assert_non_null(strstr(err, needle));
	config_free(&c);
}

static void test_errors(void **state)
{
	char *none[] = {NULL};
	char *bad_env[] = {"OUTBOXD_RETRY_INTERVAL=3", NULL};
	char *bad_flag[] = {"--nope=1"};
	char *bad_int[] = {"--max-retries", "many"};
	expect_error("colour = red\n", none, 0, NULL, "colour");
	expect_error("retry_interval\n", none, 0, NULL, "line 1");
	expect_error(NULL, bad_env, 0, NULL, "OUTBOXD_RETRY_INTERVAL");
	expect_error(NULL, none, 1, bad_flag, "--nope");
	expect_error(NULL, none, 2, bad_int, "max_retries");
}

/* The default retry policy: every retry setting in its three forms, and the policy
 * subscriptions start from. */
static void test_retry_policy_settings(void **state)
{
	struct config c;
	struct retry_policy p;
	char err[256];
	char *none[] = {NULL};

	assert_int_equal(config_load(&c, NULL, none, 0, NULL, err, sizeof(err)), 0);
	assert_string_equal(c.retry_policy, "fixed");
	assert_int_equal(c.retry_min_delay_ms, 10000);
	assert_int_equal(c.retry_max_delay_ms, 60000);
	assert_true(c.retry_factor == 2.0);
	assert_true(c.retry_jitter == 0.0);
	assert_int_equal(c.retry_after_max_ms, 3600000);
	config_retry_defaults(&c, &p);
	assert_int_equal(p.policy, RETRY_FIXED);
	assert_int_equal(p.immediate, 4);
	assert_int_equal(p.interval_ms, 3000);
	assert_int_equal(p.min_delay_ms, 10000);
	assert_int_equal(p.max_delay_ms, 60000);
	assert_int_equal(p.retry_after_max_ms, 3600000);
	config_free(&c);

	const char *file = "retry_policy = linear\nretry_jitter = 0.5\nretry_min_delay = 1s\n";
	char *envp[] = {"OUTBOXD_RETRY_POLICY=exponential", "OUTBOXD_RETRY_FACTOR=3", NULL};
	char *argv[] = {"--retry-max-delay", "2m", "--retry-after-max=10m", "--retry-jitter=0.25"};
	assert_int_equal(config_load(&c, file, envp, 4, argv, err, sizeof(err)), 0);
	config_retry_defaults(&c, &p);
	assert_int_equal(p.policy, RETRY_EXPONENTIAL); /* env beats file */
	assert_int_equal(p.max_retries, 5);            /* unset: exponential's default */
	assert_true(p.factor == 3.0);
	assert_true(p.jitter == 0.25);                 /* flag beats file */
	assert_int_equal(p.min_delay_ms, 1000);
	assert_int_equal(p.max_delay_ms, 120000);
	assert_int_equal(p.retry_after_max_ms, 600000);
	config_free(&c);

	char *bad_policy[] = {"--retry-policy", "random"};
	char *bad_jitter[] = {"--retry-jitter", "1.5"};
	char *bad_number[] = {"--retry-factor", "two"};
	char *bad_factor[] = {"--retry-factor", "0.5"};
	char *bad_window[] = {"--retry-min-delay", "2m"};
	expect_error(NULL, none, 2, bad_policy, "retry_policy");
	expect_error(NULL, none, 2, bad_jitter, "retry_jitter");
	expect_error(NULL, none, 2, bad_number, "retry_factor");
	expect_error(NULL, none, 2, bad_factor, "retry_factor");
	expect_error(NULL, none, 2, bad_window, "retry_min_delay");
}

/* secret_key in its three forms: 64 hex digits or base64 of 32 bytes; a bad one names
 * the key and never repeats the value. */
static void test_secret_key(void **state)
{
	struct config c;
	char err[256];
	char *none[] = {NULL};
	const char *hex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
	char env[128];
	snprintf(env, sizeof(env), "OUTBOXD_SECRET_KEY=%s", hex);
	char *envp[] = {env, NULL};
	assert_int_equal(config_load(&c, NULL, none, 0, NULL, err, sizeof(err)), 0);
	assert_null(c.secret_key);
	config_free(&c);
	assert_int_equal(config_load(&c, NULL, envp, 0, NULL, err, sizeof(err)), 0);
	assert_string_equal(c.secret_key, hex);
	config_free(&c);
	char *argv[] = {"--secret-key", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="};
	assert_int_equal(config_load(&c, "secret_key = nope\n", none, 2, argv, err, sizeof(err)), 0);
	config_free(&c);

	char *bad_flag[] = {"--secret-key", "hunter2hunter2"};
	expect_error(NULL, none, 2, bad_flag, "secret_key must be 64 hex digits");
	assert_int_equal(config_load(&c, NULL, none, 2, bad_flag, err, sizeof(err)), -1);
	assert_null(strstr(err, "hunter2"));
	config_free(&c);
	expect_error("secret_key = 0011\n", none, 0, NULL, "secret_key");
}

static void test_data_dir(void **state)
{
	struct config c;
	char err[256];
	char *none[] = {NULL};
	char *sqlite[] = {"--db", "sqlite:/srv/outboxd/o.db"};
	char *pg[] = {"--db", "postgres://h/db"};
	char *dir[] = {"--db", "postgres://h/db", "--data-dir", "/etc/outboxd"};
	char *d;
	assert_int_equal(config_load(&c, NULL, none, 2, sqlite, err, sizeof(err)), 0);
	assert_string_equal(d = config_data_dir(&c), "/srv/outboxd");
	free(d);
	config_free(&c);
	assert_int_equal(config_load(&c, NULL, none, 2, pg, err, sizeof(err)), 0);
	assert_string_equal(d = config_data_dir(&c), "./var");
	free(d);
	config_free(&c);
	assert_int_equal(config_load(&c, NULL, none, 4, dir, err, sizeof(err)), 0);
	assert_string_equal(d = config_data_dir(&c), "/etc/outboxd");
	free(d);
	config_free(&c);
}

static void test_config_path(void **state)
{
	char *envp[] = {"OUTBOXD_CONFIG=/etc/a.conf", NULL};
	char *argv[] = {"--config", "/etc/b.conf"};
	assert_string_equal(config_file_path(envp, 0, NULL), "/etc/a.conf");
	assert_string_equal(config_file_path(envp, 2, argv), "/etc/b.conf");
	/* a development build has no default file: ./var and the defaults */
	char *none[] = {NULL};
	assert_null(config_default_file());
	assert_null(config_file_path(none, 0, none));
}

static void assert_masked(const char *key, const char *value, const char *want)
{
	char *m = config_mask_value(key, value);
	assert_non_null(m);
	assert_string_equal(m, want);
	free(m);
}

/* check-config never shows a secret: whole-value secrets, URL and keyword passwords,
 * secret-looking Kafka properties. */
static void test_mask(void **state)
{
	assert_masked("admin_token", "t0k", "********");
	assert_masked("ingest_token", "t1k", "********");
	assert_masked("secret_key", "00ff", "********");
	assert_masked("db", "postgres://app:s3cr3t@db.example:5432/outboxd?sslmode=require",
		      "postgres://app:********@db.example:5432/outboxd?sslmode=require");
	assert_masked("db", "postgres://app@db/x", "postgres://app@db/x");
	assert_masked("db", "postgres:///x?host=/run&password=s3cr3t&sslmode=disable",
		      "postgres:///x?host=/run&password=********&sslmode=disable");
	assert_masked("db", "sqlite:/var/lib/outboxd/outboxd.db", "sqlite:/var/lib/outboxd/outboxd.db");
	assert_masked("kafka_config",
		      "security.protocol=SASL_SSL;sasl.username=u;sasl.password=p;ssl.key.pem=K;"
		      "sasl.oauthbearer.client.secret=c",
		      "security.protocol=SASL_SSL;sasl.username=u;sasl.password=********;"
		      "ssl.key.pem=********;sasl.oauthbearer.client.secret=********");
	assert_masked("otlp_endpoint", "https://u:p@otel:4318", "https://u:********@otel:4318");
	assert_masked("egress_proxy", "http://u:pw@proxy:3128", "http://u:********@proxy:3128");
	assert_masked("kafka_schema_registry", "https://sr:pw@registry:8081",
		      "https://sr:********@registry:8081");
	assert_masked("otlp_headers", "X-Api-Key=k1,X-Tenant=t", "X-Api-Key=********,X-Tenant=********");
	assert_masked("listen", "127.0.0.1:8080", "127.0.0.1:8080");
}

/* The effective settings read back as a config file to the same values, and no secret
 * is in them. */
static void test_effective_round_trip(void **state)
{
	struct config a, b;
	char err[256], *text = NULL;
	size_t len = 0;
	char *argv[] = {"--retry-interval", "750ms", "--max-payload", "2MiB", "--retry-factor",
			"1.5", "--cleanup-enabled", "--admin-token", "hunter2", "--db",
			"postgres://u:hunter3@h/d", "--otlp-endpoint", "http://otel:4318"};
	assert_int_equal(config_load(&a, NULL, NULL, 13, argv, err, sizeof(err)), 0);
	FILE *f = open_memstream(&text, &len);
	config_print_effective(f, &a);
	fclose(f);
	assert_null(strstr(text, "hunter2"));
	assert_null(strstr(text, "hunter3"));
	assert_non_null(strstr(text, "otlp_endpoint = \"http://otel:4318\"\n"));
	/* durations as a config file writes them, not in milliseconds */
	assert_non_null(strstr(text, "retry_interval = 750ms\n"));
	assert_non_null(strstr(text, "disable_after = 5d\n"));
	assert_non_null(strstr(text, "retry_after_max = 1h\n"));
	assert_non_null(strstr(text, "cleanup_after = 0s\n"));
	assert_int_equal(config_load(&b, text, NULL, 0, NULL, err, sizeof(err)), 0);
	assert_int_equal(b.retry_interval_ms, 750);
	assert_int_equal(b.max_payload, 2 * 1048576);
	assert_true(b.retry_factor == 1.5);
	assert_int_equal(b.cleanup_enabled, 1);
	assert_int_equal(b.otlp_interval_ms, 10000);
	assert_non_null(strstr(text, "# max_retries = (unset)\n")); /* the policy's default */
	assert_int_equal(b.max_retries, a.max_retries);
	assert_string_equal(b.admin_token, "********");
	free(text);
	config_free(&a);
	config_free(&b);
}

/* The flags that give a secret: tokens and keys whatever their value, the rest when
 * their value holds a password or a key; each named once. */
/* relay_batch: 100 by default (batches of a hundred rows), 1 to 10000. */
static void test_relay_batch(void **state)
{
	struct config c;
	char err[256];
	char *none[] = {NULL};
	assert_int_equal(config_load(&c, NULL, none, 0, none, err, sizeof(err)), 0);
	assert_int_equal(c.relay_batch, 100);
	config_free(&c);
	char *ok[] = {"--relay-batch", "10000"};
	assert_int_equal(config_load(&c, NULL, none, 2, ok, err, sizeof(err)), 0);
	assert_int_equal(c.relay_batch, 10000);
	config_free(&c);
	char *zero[] = {"--relay-batch", "0"}, *big[] = {"--relay-batch", "10001"};
	assert_int_equal(config_load(&c, NULL, none, 2, zero, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "relay_batch"));
	config_free(&c); /* a failed load leaves what it had set to the caller */
	assert_int_equal(config_load(&c, NULL, none, 2, big, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "relay_batch"));
	config_free(&c);
}

/* listen: host:port or [v6]:port, a port from 0 to 65535, nothing else. */
static void test_listen_split(void **state)
{
	char host[64], port[8], err[256];
	assert_int_equal(config_listen_split("127.0.0.1:8080", host, sizeof(host), port,
					     sizeof(port), err, sizeof(err)), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_string_equal(port, "8080");
	assert_int_equal(config_listen_split("[::1]:65535", host, sizeof(host), port,
					     sizeof(port), err, sizeof(err)), 0);
	assert_string_equal(host, "::1");
	assert_string_equal(port, "65535");
	assert_int_equal(config_listen_split("localhost:0", host, sizeof(host), port,
					     sizeof(port), err, sizeof(err)), 0);
	static const char *const bad[] = {"nope", ":8080", "127.0.0.1:", "127.0.0.1:65536",
					  "127.0.0.1:99999", "127.0.0.1:8o80", "::1:8080",
					  "[::1:8080", "[]:80", "127.0.0.1:-1", "127.0.0.1:000008080"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(config_listen_split(bad[i], host, sizeof(host), port, sizeof(port),
						     err, sizeof(err)), -1);
		assert_non_null(strstr(err, "listen"));
	}
}

static void test_secret_flags(void **state)
{
	char *argv[] = {"--admin-token", "a", "--listen", "127.0.0.1:1", "--db=postgres://u:p@h/d",
			"--kafka-config", "security.protocol=SSL", "--otlp-headers", "K=v",
			"--secret-key=00", "--admin-token", "b", "--kafka-brokers", "k:9092",
			"--ingest-token"};
	const struct config_setting *s[8];
	size_t n = config_secret_flags(15, argv, s, 8);
	assert_int_equal(n, 4);
	assert_string_equal(s[0]->key, "admin_token");
	assert_string_equal(s[1]->key, "db");
	assert_string_equal(s[2]->key, "otlp_headers");
	assert_string_equal(s[3]->key, "secret_key");
	char *plain[] = {"--db", "sqlite:/var/lib/outboxd/outboxd.db", "--kafka-config",
			 "sasl.password=p", "--otlp-endpoint", "http://otel:4318"};
	n = config_secret_flags(6, plain, s, 8);
	assert_int_equal(n, 1);
	assert_string_equal(s[0]->key, "kafka_config");
}

static void test_otlp_settings(void **state)
{
	struct config c;
	char err[256];
	char *bad_url[] = {"--otlp-endpoint", "otel:4318"};
	assert_int_equal(config_load(&c, NULL, NULL, 2, bad_url, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "otlp_endpoint"));
	config_free(&c);
	char *bad_interval[] = {"--otlp-interval", "10ms"};
	assert_int_equal(config_load(&c, NULL, NULL, 2, bad_interval, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "otlp_interval"));
	config_free(&c);
	char *bad_headers[] = {"--otlp-headers", "Authorization: Bearer x"};
	assert_int_equal(config_load(&c, NULL, NULL, 2, bad_headers, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "otlp_headers"));
	config_free(&c);
	char *bad_protocol[] = {"--otlp-protocol", "grpc"};
	assert_int_equal(config_load(&c, NULL, NULL, 2, bad_protocol, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "otlp_protocol must be http/protobuf or http/json"));
	config_free(&c);
	char *bad_compression[] = {"--otlp-compression", "zstd"};
	assert_int_equal(config_load(&c, NULL, NULL, 2, bad_compression, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "otlp_compression must be none or gzip"));
	config_free(&c);
	char *gzip[] = {"--otlp-compression", "gzip"};
	assert_int_equal(config_load(&c, NULL, NULL, 2, gzip, err, sizeof(err)), 0);
	assert_string_equal(c.otlp_compression, "gzip");
	config_free(&c);
	char *json[] = {"--otlp-protocol", "http/json"};
	assert_int_equal(config_load(&c, NULL, NULL, 2, json, err, sizeof(err)), 0);
	assert_string_equal(c.otlp_protocol, "http/json");
	config_free(&c);
	assert_int_equal(config_load(&c, NULL, NULL, 0, NULL, err, sizeof(err)), 0);
	assert_null(c.otlp_endpoint); /* off by default */
	assert_string_equal(c.otlp_protocol, "http/protobuf"); /* the Collector's default */
	assert_string_equal(c.otlp_compression, "none"); /* OpenTelemetry's default */
	config_free(&c);
}

/* egress_proxy: an http:// URL or nothing; tls_dir: an absolute path, /etc/outboxd by
 * default. */
static void test_egress_proxy_and_tls_dir(void **state)
{
	struct config c;
	char err[256];
	static const char *const bad[] = {"proxy:3128", "https://proxy:3128", "socks5://p:1080",
					  "http://proxy :3128"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char *argv[] = {"--egress-proxy", (char *)bad[i]};
		assert_int_equal(config_load(&c, NULL, NULL, 2, argv, err, sizeof(err)), -1);
		assert_non_null(strstr(err, "egress_proxy"));
		config_free(&c);
	}
	char *ok[] = {"--egress-proxy", "http://proxy.internal:3128", "--tls-dir", "/srv/tls"};
	assert_int_equal(config_load(&c, NULL, NULL, 4, ok, err, sizeof(err)), 0);
	assert_string_equal(c.egress_proxy, "http://proxy.internal:3128");
	assert_string_equal(c.tls_dir, "/srv/tls");
	config_free(&c);
	char *relative[] = {"--tls-dir", "etc/outboxd"};
	assert_int_equal(config_load(&c, NULL, NULL, 2, relative, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "tls_dir"));
	config_free(&c);
	assert_int_equal(config_load(&c, NULL, NULL, 0, NULL, err, sizeof(err)), 0);
	assert_null(c.egress_proxy); /* direct by default */
	assert_string_equal(c.tls_dir, "/etc/outboxd");
	config_free(&c);
}

/* SIGHUP: which settings changed, and which of them a running daemon can take. */
static void test_reload_classes(void **state)
{
	struct config a, b;
	char err[256];
	char *before[] = {"--log-level", "info", "--max-in-flight", "10"};
	char *after[] = {"--log-level", "debug", "--max-in-flight", "20"};
	assert_int_equal(config_load(&a, NULL, NULL, 4, before, err, sizeof(err)), 0);
	assert_int_equal(config_load(&b, NULL, NULL, 4, after, err, sizeof(err)), 0);
	int changed = 0;
	for (const struct config_setting *s = config_settings; s->key; s++) {
		if (config_setting_equal(&a, &b, s))
			continue;
		changed++;
		if (strcmp(s->key, "log_level") == 0)
			assert_true(config_setting_reloadable(s));
		else
			assert_string_equal(s->key, "max_in_flight");
	}
	assert_int_equal(changed, 2);
	for (const struct config_setting *s = config_settings; s->key; s++) {
		if (!strcmp(s->key, "max_in_flight") || !strcmp(s->key, "db") ||
		    !strcmp(s->key, "ssrf_allow"))
			assert_false(config_setting_reloadable(s));
		if (!strcmp(s->key, "ops_events_window"))
			assert_true(config_setting_reloadable(s));
	}
	config_free(&a);
	config_free(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_precedence),
		cmocka_unit_test(test_hash_in_quotes),
		cmocka_unit_test(test_errors),
		cmocka_unit_test(test_retry_policy_settings),
		cmocka_unit_test(test_config_path),
		cmocka_unit_test(test_secret_key),
		cmocka_unit_test(test_data_dir),
		cmocka_unit_test(test_mask),
		cmocka_unit_test(test_effective_round_trip),
		cmocka_unit_test(test_otlp_settings),
		cmocka_unit_test(test_secret_flags),
		cmocka_unit_test(test_listen_split),
		cmocka_unit_test(test_relay_batch),
		cmocka_unit_test(test_egress_proxy_and_tls_dir),
		cmocka_unit_test(test_reload_classes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
