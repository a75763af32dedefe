/* result.c: times one SQLite statement as outboxd's writer runs a delivery's result: on
 * a store migrated by outboxd itself, N leased deliveries, the statement once per
 * delivery, BEGIN IMMEDIATE / COMMIT around groups of 128. Not part of outboxd.
 *
 *   result STORE fill N           N events, each with one delivery leased to OWNER
 *   result STORE run N 'SQL'      the statement for deliveries 0..N-1; prints the
 *                                 process CPU µs per delivery of the loop alone
 *
 * The statement's parameters are bound as outboxd binds its result statement
 * (src/store/sqlite/conn.c, W_RESULT) for a first success: ?1 the delivery id,
 * ?2 'PROCESSED', ?4 attempt_count 1, ?7 and ?11 now, ?8 200, ?9 'HTTP 200', ?12 the
 * owner; the others 0 or NULL. */
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OWNER "e3b0c44298fc:123456" /* host:pid, as outboxd's lease owner */
#define GROUP 128

static void exec_or_die(sqlite3 *db, const char *sql)
{
	char *err = NULL;
	if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) {
		fprintf(stderr, "result: %s: %s\n", sql, err);
		exit(1);
	}
}

static void fill(sqlite3 *db, int n)
{
	sqlite3_stmt *e, *d;
	char id[32];
	exec_or_die(db, "INSERT INTO subscriptions(id, name, config, enabled, created_at,"
			" updated_at) VALUES ('s1', 's1', '{}', 1, 0, 0)");
	exec_or_die(db, "BEGIN");
	if (sqlite3_prepare_v2(db, "INSERT INTO events(id, event_type, source, content_type,"
			       " payload, created_at) VALUES (?1, 't', 'src', 'application/json',"
			       " '{}', ?2)", -1, &e, NULL) ||
	    sqlite3_prepare_v2(db, "INSERT INTO deliveries(id, event_id, subscription_id,"
			       " event_type, status, next_attempt_at, created_at, updated_at,"
			       " lease_owner, lease_until) VALUES (?1, ?1, 's1', 't', 'NEW', ?2,"
			       " ?2, ?2, '" OWNER "', ?2 + 30000)", -1, &d, NULL)) {
		fprintf(stderr, "result: %s\n", sqlite3_errmsg(db));
		exit(1);
	}
	for (int i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "d%08d", i);
		sqlite3_stmt *s[2] = {e, d};
		for (int k = 0; k < 2; k++) {
			sqlite3_bind_text(s[k], 1, id, -1, SQLITE_TRANSIENT);
			sqlite3_bind_int64(s[k], 2, 1000 + i);
			if (sqlite3_step(s[k]) != SQLITE_DONE) {
				fprintf(stderr, "result: %s\n", sqlite3_errmsg(db));
				exit(1);
			}
			sqlite3_reset(s[k]);
		}
	}
	exec_or_die(db, "COMMIT");
	sqlite3_finalize(e);
	sqlite3_finalize(d);
}

/* The loop alone, so that callgrind can count it (--toggle-collect=run_results). */
__attribute__((noinline)) static void run_results(sqlite3 *db, sqlite3_stmt *u, int n)
{
	char id[32];
	int np = sqlite3_bind_parameter_count(u);
	for (int i = 0; i < n; i++) {
		if (i % GROUP == 0)
			exec_or_die(db, "BEGIN IMMEDIATE");
		snprintf(id, sizeof(id), "d%08d", i);
		sqlite3_clear_bindings(u);
		for (int k = 2; k <= np; k++)
			sqlite3_bind_int(u, k, 0);
		sqlite3_bind_text(u, 1, id, -1, SQLITE_TRANSIENT);
		if (np >= 2)
			sqlite3_bind_text(u, 2, "PROCESSED", -1, SQLITE_STATIC);
		if (np >= 4)
			sqlite3_bind_int(u, 4, 1);
		if (np >= 6)
			sqlite3_bind_null(u, 6);
		if (np >= 7)
			sqlite3_bind_int64(u, 7, 5000 + i);
		if (np >= 8)
			sqlite3_bind_int(u, 8, 200);
		if (np >= 9)
			sqlite3_bind_text(u, 9, "HTTP 200", -1, SQLITE_STATIC);
		if (np >= 10)
			sqlite3_bind_null(u, 10);
		if (np >= 11)
			sqlite3_bind_int64(u, 11, 5000 + i);
		if (np >= 12)
			sqlite3_bind_text(u, 12, OWNER, -1, SQLITE_STATIC);
		if (sqlite3_step(u) != SQLITE_DONE || sqlite3_changes(db) != 1) {
			fprintf(stderr, "result: delivery %d: %s\n", i, sqlite3_errmsg(db));
			exit(1);
		}
		sqlite3_reset(u);
		if (i % GROUP == GROUP - 1 || i == n - 1)
			exec_or_die(db, "COMMIT");
	}
}

int main(int argc, char **argv)
{
	sqlite3 *db;
	if (argc < 4 || (strcmp(argv[2], "fill") && (strcmp(argv[2], "run") || argc < 5))) {
		fprintf(stderr, "usage: result STORE fill N | result STORE run N SQL\n");
		return 2;
	}
	int n = atoi(argv[3]);
	if (sqlite3_open(argv[1], &db) != SQLITE_OK)
		return 1;
	/* as outboxd's writer: WAL, results committed without a sync (rows.c) */
	exec_or_die(db, "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
			" PRAGMA temp_store = MEMORY; PRAGMA cache_size = -65536");
	if (!strcmp(argv[2], "fill")) {
		fill(db, n);
	} else {
		sqlite3_stmt *u;
		struct timespec a, b;
		if (sqlite3_prepare_v2(db, argv[4], -1, &u, NULL) != SQLITE_OK) {
			fprintf(stderr, "result: %s\n", sqlite3_errmsg(db));
			return 1;
		}
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
		run_results(db, u, n);
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
		printf("%.2f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / n);
		sqlite3_finalize(u);
	}
	sqlite3_close(db);
	return 0;
}
