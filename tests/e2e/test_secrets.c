/* test_secrets.c: subscription credentials sealed at rest, seen from outside.
 *
 *  - a basic password, an OAuth2 client secret, a bearer token, an API key, a query
 *    value and a signing secret are nowhere in the database's bytes (SQLite: the file
 *    and its WAL; PostgreSQL: the rows, the table's file and the WAL), while every
 *    delivery still carries the right credential (the receiver records the headers);
 *  - a restart with another key, or with a malformed one, stops with a message that
 *    names the row and both key ids (and never the key); on PostgreSQL a second
 *    instance without the key refuses too, and drops the key it generated;
 *  - `outboxd rotate-key` re-seals every row under a new key and replaces the key file,
 *    the daemon starts with it and deliveries still authenticate; a rotation that was
 *    interrupted after re-sealing but before replacing the key file is finished by
 *    running it again (rows already under the new key are skipped);
 *  - a row written in clear (an older outboxd) is sealed at start, and delivers.
 * Real daemon, real receivers: `sub` plays the subscribers, `idp` a token endpoint. */
#include "e2e.h"
#include "harness_pg.h"

#include <dirent.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <openssl/evp.h>

static struct receiver sub, idp;
static struct daemon dmn;

/* base64 of the 32 bytes "s1gning-s3cret-0123456789abcdefX" */
#define SIGNING "whsec_czFnbmluZy1zM2NyZXQtMDEyMzQ1Njc4OWFiY2RlZlg="
#define LEGACY_TOKEN "l3gacy-t0ken-cl34r"

/* Every credential of the subscriptions below: none may appear at rest or in the log. */
static const char *const secrets[] = {
	"b4sic-pw-s3cr3t", "cl1ent-s3cret-oo", "bearer-t0k3n-qq", "k3y-v4lue-ww",
	"qu3ry-v4lue-ee", SIGNING + 6, LEGACY_TOKEN, NULL,
};

static const char *const paths[] = {"/basic", "/oauth", "/bearer", "/key", "/query", "/signed"};
#define N_PATHS 6

static int setup(void **state)
{
	assert_int_equal(receiver_start(&sub), 0);
	assert_int_equal(receiver_start(&idp), 0);
	assert_int_equal(receiver_script(&idp, "/token",
					 "{\"default\":{\"status\":200,\"headers\":{\"Content-Type\":"
					 "\"application/json\"},\"body\":\"{\\\"access_token\\\":"
					 "\\\"tok-sec\\\",\\\"token_type\\\":\\\"Bearer\\\","
					 "\\\"expires_in\\\":3600}\"}}"), 0);
	memset(&dmn, 0, sizeof(dmn));
	assert_int_equal(daemon_start(&dmn, NULL), 0);
	return 0;
}

static int teardown(void **state)
{
	daemon_cleanup(&dmn);
	receiver_stop(&sub);
	receiver_stop(&idp);
	return 0;
}

static const char *header(json_t *req, const char *name)
{
	return json_string_value(json_object_get(json_object_get(req, "headers"), name));
}

static const char *str(json_t *obj, const char *key)
{
	return json_string_value(json_object_get(obj, key));
}

/* The whole file (returned, *len bytes); NULL when it does not exist. */
static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	size_t cap = 0, n;

	*len = 0;
	if (!f)
		return NULL;
	for (;;) {
		if (*len + 65536 > cap) {
			cap = cap ? cap * 2 : 1 << 20;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		n = fread(buf + *len, 1, cap - *len, f);
		if (n == 0)
			break;
		*len += n;
	}
	fclose(f);
	return buf;
}

/* Fails when any credential (or the extra string, may be NULL) is in the file's bytes. */
static void assert_file_clean(const char *path, const char *extra)
{
	for (const char *const *s = secrets; *s; s++) {
		if (e2e_file_contains(path, *s)) {
			fprintf(stderr, "%s holds the credential \"%s\" in clear\n", path, *s);
			fail();
		}
	}
	if (extra && e2e_file_contains(path, extra)) {
		fprintf(stderr, "%s holds \"%s\"\n", path, extra);
		fail();
	}
}

/* 64 hex digits of the key file into hex (65 bytes). */
static void key_file(const char *name, char *hex)
{
	char path[512];
	size_t len;
	snprintf(path, sizeof(path), "%s/%s", dmn.dir, name);
	char *text = slurp(path, &len);
	assert_non_null(text);
	assert_true(len >= 64);
	memcpy(hex, text, 64);
	hex[64] = '\0';
	free(text);
	struct stat sb;
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
}

/* The documented key id: the first 8 hex digits of SHA-256 of the key's 32 bytes. */
static void key_id(const char *hex, char id[9])
{
	unsigned char raw[32], md[32];
	unsigned int n = 0;
	for (int i = 0; i < 32; i++)
		sscanf(hex + 2 * i, "%2hhx", &raw[i]);
	EVP_Digest(raw, sizeof(raw), md, &n, EVP_sha256(), NULL);
	snprintf(id, 9, "%02x%02x%02x%02x", md[0], md[1], md[2], md[3]);
}

static char *daemon_log(size_t *len)
{
	char path[512];
	char *text = slurp(daemon_log_path(&dmn, path, sizeof(path)), len);
	assert_non_null(text);
	text = realloc(text, *len + 1);
	text[*len] = '\0';
	return text;
}

/* The log has needle, written since offset from (bytes of the log seen before). */
static int log_has(size_t from, const char *needle)
{
	size_t len;
	char *text = daemon_log(&len);
	int found = from <= len && strstr(text + from, needle) != NULL;
	free(text);
	return found;
}

static size_t log_size(void)
{
	size_t len;
	free(daemon_log(&len));
	return len;
}

/* No credential and no key in the daemon's log. */
static void assert_log_clean(const char *key_hex)
{
	char path[512];
	assert_file_clean(daemon_log_path(&dmn, path, sizeof(path)), key_hex);
}

/* Runs `outboxd rotate-key ARGS` on dmn's store and data directory; the exit code, the
 * output (stdout and stderr) in out. */
static int rotate(char *out, size_t len, const char *args)
{
	char cmd[2048];
	snprintf(cmd, sizeof(cmd), "OUTBOXD_DB='%s' OUTBOXD_DATA_DIR='%s' %s rotate-key %s 2>&1",
		 dmn.db, dmn.dir, getenv("OUTBOXD_BIN"), args);
	return e2e_run(cmd, out, len);
}

/* ---- the raw bytes ---------------------------------------------------------------------- */

static PGconn *pg_connect(void)
{
	PGconn *c = PQconnectdb(dmn.db);
	if (PQstatus(c) != CONNECTION_OK)
		fail_msg("%s", PQerrorMessage(c));
	return c;
}

static PGresult *pg_exec(PGconn *c, const char *sql)
{
	PGresult *r = PQexec(c, sql);
	if (PQresultStatus(r) != PGRES_TUPLES_OK && PQresultStatus(r) != PGRES_COMMAND_OK)
		fail_msg("%s: %s", sql, PQerrorMessage(c));
	return r;
}

/* No credential at rest. SQLite: the database file and its WAL, byte by byte.
 * PostgreSQL: every config is sealed, and after a CHECKPOINT neither the table's file nor
 * (with_wal) the server's WAL holds a credential. */
static void assert_at_rest_clean(int with_wal)
{
	char path[1024];

	if (!harness_pg_wanted()) {
		snprintf(path, sizeof(path), "%s", e2e_db_path(&dmn));
		assert_file_clean(path, NULL);
		snprintf(path, sizeof(path), "%s-wal", e2e_db_path(&dmn));
		assert_file_clean(path, NULL);
		return;
	}
	PGconn *c = pg_connect();
	PGresult *r = pg_exec(c, "SELECT id, config FROM outboxd.subscriptions");
	assert_true(PQntuples(r) > 0);
	for (int i = 0; i < PQntuples(r); i++) {
		const char *config = PQgetvalue(r, i, 1);
		if (strncmp(config, "obx1:", 5) != 0)
			fail_msg("subscription %s is not sealed: %.40s", PQgetvalue(r, i, 0), config);
		for (const char *const *s = secrets; *s; s++)
			assert_null(strstr(config, *s));
	}
	PQclear(r);
	PQclear(pg_exec(c, "CHECKPOINT"));
	r = pg_exec(c, "SELECT current_setting('data_directory'),"
		       " pg_relation_filepath('outboxd.subscriptions')");
	snprintf(path, sizeof(path), "%s/%s", PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1));
	assert_int_equal(access(path, R_OK), 0);
	assert_file_clean(path, NULL);
	if (with_wal) {
		char wal[600];
		snprintf(wal, sizeof(wal), "%s/pg_wal", PQgetvalue(r, 0, 0));
		DIR *d = opendir(wal);
		int segments = 0;
		assert_non_null(d);
		for (struct dirent *e; (e = readdir(d));) {
			if (strlen(e->d_name) != 24)
				continue; /* segments only */
			snprintf(path, sizeof(path), "%s/%s", wal, e->d_name);
			assert_file_clean(path, NULL);
			segments++;
		}
		closedir(d);
		assert_true(segments > 0);
	}
	PQclear(r);
	PQfinish(c);
}

/* ---- deliveries ---------------------------------------------------------------------- */


/* Sends one event to the six subscriptions (the round-th) and checks the credential each
 * delivery carried. */
static void deliver_and_check(int round)
{
	char ev[64], body[128];
	snprintf(body, sizeof(body), "{\"event_type\":\"sec.ev\",\"payload\":{\"round\":%d}}", round);
	e2e_send(&dmn, ev, body);
	for (int i = 0; i < N_PATHS; i++)
		assert_int_equal(receiver_wait_count(&sub, paths[i], round, 10000), 0);
	for (int i = 0; i < N_PATHS; i++) {
		json_t *reqs = receiver_requests(&sub, paths[i]), *r = NULL;
		/* this event's request (a restart may have sent an earlier one twice) */
		for (size_t k = 0; k < json_array_size(reqs) && !r; k++) {
			const char *id = header(json_array_get(reqs, k), "webhook-id");
			if (id && strcmp(id, ev) == 0)
				r = json_array_get(reqs, k);
		}
		if (!r)
			fail_msg("%s never got event %s", paths[i], ev);
		switch (i) {
		case 0: /* base64("ann:b4sic-pw-s3cr3t") */
			assert_string_equal(header(r, "authorization"), "Basic YW5uOmI0c2ljLXB3LXMzY3IzdA==");
			break;
		case 1:
			assert_string_equal(header(r, "authorization"), "Bearer tok-sec");
			break;
		case 2:
			assert_string_equal(header(r, "authorization"), "Bearer bearer-t0k3n-qq");
			break;
		case 3:
			assert_string_equal(header(r, "x-api-key"), "k3y-v4lue-ww");
			break;
		case 4:
			assert_string_equal(str(r, "path"), "/query?k=qu3ry-v4lue-ee");
			break;
		case 5: {
			struct standard_webhooks_match m;
			e2e_assert_signed(r, SIGNING, &m);
			assert_int_equal(m.count, 1);
			break;
		}
		}
		json_decref(reqs);
	}
	/* The token endpoint got the client secret: base64("cid:cl1ent-s3cret-oo") */
	json_t *t = receiver_requests(&idp, "/token");
	assert_string_equal(header(json_array_get(t, json_array_size(t) - 1), "authorization"),
			    "Basic Y2lkOmNsMWVudC1zM2NyZXQtb28=");
	json_decref(t);
}

/* ---- tests ------------------------------------------------------------------------------ */

static void test_sealed_at_rest(void **state)
{
	char id[64];
	e2e_create_sub(&dmn, id, "{\"name\":\"basic\",\"event_types\":[\"sec.*\"],"
				 "\"endpoint\":\"%s/basic\",\"auth\":{\"type\":\"basic\","
				 "\"username\":\"ann\",\"password\":\"b4sic-pw-s3cr3t\"}}", sub.url);
	e2e_create_sub(&dmn, id, "{\"name\":\"oauth\",\"event_types\":[\"sec.ev\"],"
				 "\"endpoint\":\"%s/oauth\",\"auth\":{\"type\":\"oauth2\","
				 "\"token_url\":\"%s/token\",\"client_id\":\"cid\","
				 "\"client_secret\":\"cl1ent-s3cret-oo\"}}", sub.url, idp.url);
	e2e_create_sub(&dmn, id, "{\"name\":\"bearer\",\"event_types\":[\"sec.ev\"],"
				 "\"endpoint\":\"%s/bearer\",\"auth\":{\"type\":\"bearer\","
				 "\"token\":\"bearer-t0k3n-qq\"}}", sub.url);
	e2e_create_sub(&dmn, id, "{\"name\":\"key\",\"event_types\":[\"sec.ev\"],"
				 "\"endpoint\":\"%s/key\",\"auth\":{\"type\":\"api_key\","
				 "\"header\":\"X-Api-Key\",\"value\":\"k3y-v4lue-ww\"}}", sub.url);
	e2e_create_sub(&dmn, id, "{\"name\":\"query\",\"event_types\":[\"sec.ev\"],"
				 "\"endpoint\":\"%s/query\",\"auth\":{\"type\":\"query\","
				 "\"param\":\"k\",\"value\":\"qu3ry-v4lue-ee\"}}", sub.url);
	e2e_create_sub(&dmn, id, "{\"name\":\"signed\",\"event_types\":[\"sec.ev\"],"
				 "\"endpoint\":\"%s/signed\",\"secret\":\"" SIGNING "\"}", sub.url);
	/* A PATCH is sealed too (auth sent back masked keeps the stored credential). */
	json_t *s = e2e_get(&dmn, "/v1/subscriptions");
	json_t *basic = json_array_get(json_object_get(s, "items"), 0);
	char patch_path[128];
	snprintf(patch_path, sizeof(patch_path), "/v1/subscriptions/%s", str(basic, "id"));
	json_decref(api_call(&dmn, "PATCH", patch_path,
			     "{\"auth\":{\"type\":\"basic\",\"username\":\"ann\","
			     "\"password\":\"********\"},\"headers\":{\"X-Patched\":\"1\"}}", 200));
	json_decref(s);

	deliver_and_check(1);
	assert_at_rest_clean(1);
	char hex[65];
	key_file("secret.key", hex);
	assert_log_clean(hex);
}

static void test_wrong_key_refused(void **state)
{
	char hex[65], ours[9], theirs[9];
	const char *other = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0";
	char env_key[128];

	key_file("secret.key", hex);
	key_id(hex, ours);
	key_id(other, theirs);
	assert_int_equal(daemon_stop(&dmn), 0);

	size_t from = log_size();
	snprintf(env_key, sizeof(env_key), "OUTBOXD_SECRET_KEY=%s", other);
	const char *wrong[] = {env_key, NULL};
	assert_int_equal(daemon_start(&dmn, wrong), -1);
	assert_true(log_has(from, "is sealed with key id"));
	assert_true(log_has(from, ours));
	assert_true(log_has(from, theirs));
	assert_true(log_has(from, "Nothing was changed"));
	assert_false(log_has(from, "listening"));

	/* A key that is not one: the setting is named, the value is not repeated. */
	from = log_size();
	const char *bad[] = {"OUTBOXD_SECRET_KEY=not-a-key-at-all", NULL};
	assert_int_equal(daemon_start(&dmn, bad), -1);
	assert_true(log_has(from, "secret_key must be 64 hex digits"));
	assert_false(log_has(from, "not-a-key-at-all"));

	/* PostgreSQL: another instance with no key configured generates one, finds the
	 * subscriptions sealed with ours, refuses, and does not keep the key it made. */
	if (harness_pg_wanted()) {
		struct daemon second = {0};
		char db[400], log[600], key[600];
		snprintf(db, sizeof(db), "OUTBOXD_DB=%s", dmn.db);
		const char *env[] = {db, NULL};
		assert_int_equal(daemon_start(&second, env), -1);
		daemon_log_path(&second, log, sizeof(log));
		assert_true(e2e_file_contains(log, "was removed again"));
		assert_true(e2e_file_contains(log, ours));
		snprintf(key, sizeof(key), "%s/secret.key", second.dir);
		assert_int_equal(access(key, F_OK), -1);
		second.db[0] = '\0'; /* dmn's database */
		daemon_cleanup(&second);
	}

	/* The rows were left alone: with the right key it starts and delivers. */
	assert_int_equal(daemon_start(&dmn, NULL), 0);
	deliver_and_check(2);
	assert_log_clean(hex);
	assert_log_clean(other);
}

static void test_rotate_key(void **state)
{
	char out[8192], old_hex[65], new_hex[65], old_id[9], new_id[9], path[600];

	key_file("secret.key", old_hex);
	key_id(old_hex, old_id);
	/* On SQLite the running daemon holds the store: rotate-key refuses to run. */
	if (!harness_pg_wanted()) {
		assert_int_equal(rotate(out, sizeof(out), ""), 1);
		assert_non_null(strstr(out, "stop outboxd first"));
	}
	assert_int_equal(daemon_stop(&dmn), 0);

	/* File based, no new key given: one is generated, every row re-sealed, the file
	 * replaced. */
	assert_int_equal(rotate(out, sizeof(out), ""), 0);
	assert_non_null(strstr(out, "Re-sealed 6 subscriptions"));
	key_file("secret.key", new_hex);
	key_id(new_hex, new_id);
	assert_string_not_equal(new_hex, old_hex);
	assert_non_null(strstr(out, new_id));
	assert_null(strstr(out, new_hex));
	assert_null(strstr(out, old_hex));
	snprintf(path, sizeof(path), "%s/secret.key.new", dmn.dir);
	assert_int_equal(access(path, F_OK), -1);
	assert_int_equal(daemon_start(&dmn, NULL), 0);
	deliver_and_check(3);
	assert_int_equal(daemon_stop(&dmn), 0);

	/* A rotation interrupted after the last row but before the key file was replaced:
	 * the rows are under a third key, secret.key still holds the second, and
	 * secret.key.new the third (as rotate-key writes it before touching a row). */
	const char *third = "a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0";
	char third_id[9], args[256];
	key_id(third, third_id);
	snprintf(args, sizeof(args), "--secret-key %s --new-secret-key %s", new_hex, third);
	assert_int_equal(rotate(out, sizeof(out), args), 0);
	assert_non_null(strstr(out, "Set secret_key to the new key"));
	size_t from = log_size();
	assert_int_equal(daemon_start(&dmn, NULL), -1);
	assert_true(log_has(from, third_id));
	assert_true(log_has(from, "rotate-key` again"));
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, third, 64), 64);
	close(fd);
	assert_int_equal(rotate(out, sizeof(out), ""), 0);
	assert_non_null(strstr(out, "Re-sealed 0 subscriptions"));
	assert_non_null(strstr(out, "6 were already"));
	key_file("secret.key", new_hex);
	assert_string_equal(new_hex, third);
	assert_int_equal(access(path, F_OK), -1);

	/* Refused, nothing changed: an old key that sealed none of the rows, the same key
	 * twice, no new key with a configured one, a new key that is not a key. */
	const char *fourth = "c0c1c2c3c4c5c6c7c8c9cacbcccdcecfd0d1d2d3d4d5d6d7d8d9dadbdcdddedf";
	snprintf(args, sizeof(args), "--secret-key %s --new-secret-key %s", old_hex, fourth);
	assert_int_equal(rotate(out, sizeof(out), args), 1);
	assert_non_null(strstr(out, "neither the old key"));
	assert_non_null(strstr(out, third_id));
	snprintf(args, sizeof(args), "--secret-key %s --new-secret-key %s", third, third);
	assert_int_equal(rotate(out, sizeof(out), args), 2);
	snprintf(args, sizeof(args), "--secret-key %s", third);
	assert_int_equal(rotate(out, sizeof(out), args), 2);
	assert_int_equal(rotate(out, sizeof(out), "--new-secret-key short"), 2);
	assert_non_null(strstr(out, "--new-secret-key must be 64 hex digits"));
	key_file("secret.key", new_hex);
	assert_string_equal(new_hex, third);
	assert_int_equal(access(path, F_OK), -1);

	assert_int_equal(daemon_start(&dmn, NULL), 0);
	deliver_and_check(4);
	assert_at_rest_clean(0);
	assert_log_clean(third);
	assert_log_clean(old_hex);
}

/* A row an older outboxd wrote in clear, put there with SQL while the daemon is stopped. */
static void insert_clear_row(void)
{
	char config[512], id[64];
	long long now = (long long)time(NULL) * 1000;
	snprintf(id, sizeof(id), "01900000-0000-7000-8000-%012lld", now % 1000000000000LL);
	snprintf(config, sizeof(config),
		 "{\"name\":\"legacy\",\"event_types\":[\"sec.legacy\"],\"endpoint\":\"%s/legacy\","
		 "\"auth\":{\"type\":\"bearer\",\"token\":\"" LEGACY_TOKEN "\"}}", sub.url);
	if (!harness_pg_wanted()) {
		sqlite3 *db;
		sqlite3_stmt *s;
		assert_int_equal(sqlite3_open(e2e_db_path(&dmn), &db), SQLITE_OK);
		assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO subscriptions(id, name, config,"
						    " enabled, created_at, updated_at)"
						    " VALUES (?1, 'legacy', ?2, 1, ?3, ?3)", -1, &s,
						    NULL), SQLITE_OK);
		sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, config, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 3, now);
		assert_int_equal(sqlite3_step(s), SQLITE_DONE);
		sqlite3_finalize(s);
		assert_int_equal(sqlite3_close(db), SQLITE_OK);
		return;
	}
	PGconn *c = pg_connect();
	char nows[32];
	snprintf(nows, sizeof(nows), "%lld", now);
	const char *params[] = {id, config, nows};
	PGresult *r = PQexecParams(c, "INSERT INTO outboxd.subscriptions(id, name, config, enabled,"
				   " created_at, updated_at) VALUES ($1, 'legacy', $2, true, $3, $3)",
				   3, NULL, params, NULL, NULL, 0);
	if (PQresultStatus(r) != PGRES_COMMAND_OK)
		fail_msg("%s", PQerrorMessage(c));
	PQclear(r);
	PQfinish(c);
}

static void test_clear_rows_migrated(void **state)
{
	char ev[64], hex[65];

	assert_int_equal(daemon_stop(&dmn), 0);
	insert_clear_row();
	size_t from = log_size();
	assert_int_equal(daemon_start(&dmn, NULL), 0);
	assert_true(log_has(from, "sealed 1 subscriptions that were stored in clear"));
	e2e_send(&dmn, ev, "{\"event_type\":\"sec.legacy\",\"payload\":{}}");
	assert_int_equal(receiver_wait_count(&sub, "/legacy", 1, 10000), 0);
	json_t *reqs = receiver_requests(&sub, "/legacy");
	assert_string_equal(header(json_array_get(reqs, 0), "authorization"), "Bearer " LEGACY_TOKEN);
	json_decref(reqs);
	/* the API masks it like any other */
	json_t *list = e2e_get(&dmn, "/v1/subscriptions");
	char *text = json_dumps(list, 0);
	assert_null(strstr(text, LEGACY_TOKEN));
	free(text);
	json_decref(list);
	/* Gone from the files too (SQLite: overwritten in the page, the WAL truncated;
	 * PostgreSQL: the table rewritten). PostgreSQL's WAL keeps the INSERT of this test,
	 * as it keeps any history: docs/operations.md. */
	assert_at_rest_clean(0);
	key_file("secret.key", hex);
	assert_log_clean(hex);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sealed_at_rest),
		cmocka_unit_test(test_wrong_key_refused),
		cmocka_unit_test(test_rotate_key),
		cmocka_unit_test(test_clear_rows_migrated),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
