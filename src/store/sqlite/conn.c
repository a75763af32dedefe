/* conn.c: the embedded SQLite backend of the storage interface: opening a database,
 * its schema migrations (schema/NNN_*.sql), the two connections and their prepared
 * statements, and the backend's table of functions (store_sqlite_methods).
 *
 * One process owns a database file (an flock on PATH.lock); other processes may only
 * INSERT into the producer `outbox` table. Two connections: one writer behind a mutex
 * (every transaction is BEGIN IMMEDIATE, so SQLite never has to upgrade a read lock) and
 * one reader behind another (WAL lets it read while the writer commits). The hot-path
 * statements are prepared once at open and reset after each use; a statement is never
 * left mid-step, so the reader's snapshot never pins the WAL.
 *
 * The other files: rows.c (binding, reading rows, transactions), write.c (ingest, relay,
 * claims, results), read.c (gets, lists, stats), admin.c (operator actions,
 * subscriptions, jobs, audit), copy.c (the rows of a copy between backends).
 *
 * Must not: interpolate values into SQL, hold the writer across calls, or return
 * SQLite codes to callers (they get enum store_err). */
#include "store/sqlite/sqlite_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

/* ---- schema -------------------------------------------------------------- */

/* The migrations are src/store/sqlite/schema/NNN_*.sql (store/backend.h). */

/* Migration 6. SQLite evaluates `x IN ('a', 'b', 'c')` (three or more constants) by
 * building a temporary b-tree of the list on every execution: the status and kind CHECKs
 * did so for every delivery inserted, every result written and every attempt recorded,
 * a third of the store's instructions per delivery (callgrind). The same checks written
 * with OR compile to plain comparisons. Every stored row satisfies both forms, so the
 * schema text is replaced in place as SQLite documents for changing CHECK constraints
 * (https://sqlite.org/lang_altertable.html, "otheralter": writable_schema, then a new
 * schema_version), in the migration's transaction. */
static const struct check_rewrite {
	const char *table, *from, *to;
} check_rewrites[] = {
	{"deliveries", "CHECK (status IN ('NEW', 'PROCESSED', 'FAILED'))",
	 "CHECK (status = 'NEW' OR status = 'PROCESSED' OR status = 'FAILED')"},
	{"attempts", "CHECK (kind IN ('immediate', 'scheduled', 'manual'))",
	 "CHECK (kind = 'immediate' OR kind = 'scheduled' OR kind = 'manual')"},
};

static int rewrite_checks(sqlite3 *db, char **msg)
{
	sqlite3_stmt *s = NULL;
	int64_t schema = 0;
	int rc;

	rc = sqlite3_prepare_v2(db, "PRAGMA schema_version", -1, &s, NULL);
	if (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		schema = sqlite3_column_int64(s, 0);
		rc = SQLITE_OK;
	}
	sqlite3_finalize(s);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, "PRAGMA writable_schema = ON", NULL, NULL, NULL);
	for (size_t i = 0; rc == SQLITE_OK && i < sizeof(check_rewrites) / sizeof(check_rewrites[0]);
	     i++) {
		const struct check_rewrite *w = &check_rewrites[i];

		rc = sqlite3_prepare_v2(db, "UPDATE sqlite_master SET sql = replace(sql, ?2, ?3)"
					    " WHERE type = 'table' AND name = ?1"
					    " AND instr(sql, ?2) > 0",
					-1, &s, NULL);
		if (rc != SQLITE_OK)
			break;
		sqlite3_bind_text(s, 1, w->table, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, w->from, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 3, w->to, -1, SQLITE_STATIC);
		rc = sqlite3_step(s);
		sqlite3_finalize(s);
		/* Exactly one table, or the schema is not the one migration 1 made. */
		if (rc == SQLITE_DONE && sqlite3_changes(db) != 1) {
			*msg = sqlite3_mprintf("table %s lacks the expected %s", w->table, w->from);
			rc = SQLITE_CORRUPT;
		} else if (rc == SQLITE_DONE) {
			rc = SQLITE_OK;
		}
	}
	if (rc == SQLITE_OK) {
		char sql[64];

		snprintf(sql, sizeof(sql), "PRAGMA schema_version = %lld", (long long)schema + 1);
		rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
	}
	sqlite3_exec(db, "PRAGMA writable_schema = OFF", NULL, NULL, NULL);
	return rc;
}

/* ---- prepared statements ------------------------------------------------- */

static const char *const wsql[W_COUNT] = {
	[W_BEGIN] = "BEGIN IMMEDIATE",
	[W_COMMIT] = "COMMIT",
	[W_ROLLBACK] = "ROLLBACK",
	[W_EVENT_FIND] = "SELECT id FROM events WHERE source = ?1 AND source_event_id = ?2",
	[W_EVENT_FIND_ID] = "SELECT id FROM events WHERE id = ?1",
	[W_EVENT_INSERT] =
		"INSERT INTO events(id, event_type, source, source_event_id, partition_key,"
		" content_type, payload, created_at, traceparent, webhook_id, envelope)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
	[W_DELIVERY_INSERT] =
		"INSERT INTO deliveries(id, event_id, subscription_id, event_type, status,"
		" next_attempt_at, created_at, updated_at, order_key, lease_owner, lease_until)"
		" VALUES (?1, ?2, ?3, ?4, 'NEW', ?5, ?5, ?5, ?6, ?7, ?8)",
	/* a delivery that starts in another state (store_event_in.initial_status) */
	[W_DELIVERY_INSERT_STATE] =
		"INSERT INTO deliveries(id, event_id, subscription_id, event_type, status,"
		" next_attempt_at, last_code, last_message, last_cause, created_at, updated_at,"
		" order_key, starts_scheduled)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10, ?11, ?12)",
	/* The due deliveries with their events, oldest first; a delivery of an ordered
	 * subscription waits while an earlier one of its key is not done (ORDERING_SQL,
	 * sqlite_int.h). The claim leases them one by one (W_CLAIM_LEASE) in the same
	 * transaction, under the write lock: nothing else writes in between. */
	[W_CLAIM] =
		"SELECT d.rowid, d.id, d.event_id, d.subscription_id, d.status, d.replay,"
		" d.attempt_count, d.retry_count, d.next_attempt_at, d.delay_actions,"
		" d.starts_scheduled, e.event_type, e.content_type, e.payload, e.created_at,"
		" e.traceparent, e.source, e.source_event_id, e.partition_key, e.webhook_id"
		" FROM deliveries d LEFT JOIN events e ON e.id = d.event_id"
		" WHERE d.lease_until IS NULL AND d.next_attempt_at IS NOT NULL"
		" AND d.next_attempt_at <= ?1 AND " ORDERING_SQL
		" ORDER BY d.next_attempt_at LIMIT ?2",
	[W_CLAIM_LEASE] =
		"UPDATE deliveries SET lease_owner = ?1, lease_until = ?2 WHERE rowid = ?3",
	[W_RESULT] =
		"UPDATE deliveries SET status = ?2, replay = ?3, attempt_count = ?4,"
		" retry_count = ?5, next_attempt_at = ?6, processed_at = ?7,"
		" last_code = CASE WHEN ?13 THEN last_code ELSE ?8 END,"
		" last_message = CASE WHEN ?13 THEN last_message ELSE ?9 END,"
		" last_cause = CASE WHEN ?13 THEN last_cause ELSE ?10 END,"
		" lease_owner = NULL, lease_until = NULL, delay_actions = ?14,"
		" failing_since = CASE WHEN ?2 = 'FAILED' THEN COALESCE(failing_since, ?11) END,"
		" dead_letter_pending = CASE WHEN ?15 THEN 1 ELSE dead_letter_pending END,"
		" updated_at = ?11 WHERE id = ?1 AND lease_owner = ?12",
	/* the subscription of a delivery whose result does not name it (from a spool) */
	[W_DELIVERY_SUB] = "SELECT subscription_id FROM deliveries WHERE id = ?1",
	/* Per-key ordering: delivery ?1 is done (delivered or dead); the next one of its
	 * key, when it is parked waiting its turn, is due at ?2. */
	[W_PROMOTE] =
		"UPDATE deliveries SET blocked = 0, next_attempt_at = ?2 WHERE blocked = 2"
		" AND id = (SELECT w.id FROM deliveries u JOIN deliveries w"
		"  ON w.subscription_id = u.subscription_id AND w.order_key = u.order_key"
		"  WHERE u.id = ?1 AND w.id > u.id AND w.status <> 'PROCESSED'"
		"  ORDER BY w.id LIMIT 1)",
	[W_ATTEMPT_INSERT] =
		"INSERT INTO attempts(delivery_id, n, kind, started_at, duration_ms, code,"
		" message, cause, not_sent) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
		" ON CONFLICT (delivery_id, n) DO NOTHING",
	/* an attempt of a round whose lease was lost: recorded after the last one */
	[W_ATTEMPT_APPEND] =
		"INSERT INTO attempts(delivery_id, n, kind, started_at, duration_ms, code,"
		" message, cause, not_sent) SELECT ?1,"
		" (SELECT COALESCE(MAX(n), 0) + 1 FROM attempts WHERE delivery_id = ?1),"
		" ?3, ?4, ?5, ?6, ?7, ?8, ?9 WHERE ?2 > 0"
		" AND EXISTS (SELECT 1 FROM deliveries WHERE id = ?1)",
	[W_LEASE_RENEW] =
		"UPDATE deliveries SET lease_until = ?2 WHERE id = ?1 AND lease_owner = ?3",
	[W_REAP] =
		"UPDATE deliveries SET lease_owner = NULL, lease_until = NULL"
		" WHERE lease_until IS NOT NULL AND lease_until < ?1",
	[W_RELEASE_ALL] =
		"UPDATE deliveries SET lease_owner = NULL, lease_until = NULL"
		" WHERE lease_until IS NOT NULL",
	[W_OUTBOX_SELECT] =
		"SELECT id, event_type, source, source_event_id, partition_key, payload,"
		" content_type, created_at FROM outbox ORDER BY id LIMIT ?1",
	[W_OUTBOX_DELETE] = "DELETE FROM outbox WHERE id <= ?1",
	[W_DELIVERY_STATE] =
		"SELECT status, next_attempt_at, lease_until, event_id FROM deliveries"
		" WHERE id = ?1",
	[W_REPLAY_SET] =
		"UPDATE deliveries SET status = 'NEW', replay = 1, next_attempt_at = ?2,"
		" processed_at = NULL, lease_owner = NULL, lease_until = NULL, delay_actions = 0,"
		" blocked = 0, updated_at = ?2"
		" WHERE id = ?1",
	[W_DELIVERY_DELETE] = "DELETE FROM deliveries WHERE id = ?1",
	[W_EVENT_DELETE_ORPHAN] =
		"DELETE FROM events WHERE id = ?1"
		" AND NOT EXISTS (SELECT 1 FROM deliveries WHERE event_id = ?1)",
	[W_CLEANUP_CHUNK] =
		"DELETE FROM deliveries WHERE rowid IN (SELECT rowid FROM deliveries"
		"  WHERE status = 'PROCESSED' AND lease_until IS NULL AND processed_at <= ?2"
		"  LIMIT ?1)"
		" RETURNING event_id",
	[W_SUB_INSERT] =
		"INSERT INTO subscriptions(id, name, config, enabled, created_at, updated_at,"
		" ordering) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	[W_SUB_UPDATE] =
		"UPDATE subscriptions SET name = ?2, config = ?3, enabled = ?4, updated_at = ?5,"
		" ordering = ?6 WHERE id = ?1",
	[W_SUB_DELETE] = "DELETE FROM subscriptions WHERE id = ?1",
	/* counts.c: a results batch's attempts added to their minute's counts, and a
	 * subscription's newest failure (the newer wins, whichever batch wrote first) */
	[W_COUNTS_MINUTE] =
		"INSERT INTO attempt_minutes(minute, subscription_id, duration_ms, owner,"
		" succeeded, client_error, server_error) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
		" ON CONFLICT (minute, subscription_id, duration_ms, owner) DO UPDATE SET"
		" succeeded = succeeded + excluded.succeeded,"
		" client_error = client_error + excluded.client_error,"
		" server_error = server_error + excluded.server_error",
	[W_COUNTS_ERROR] =
		"INSERT INTO attempt_errors(subscription_id, owner, at, code, message)"
		" VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (subscription_id, owner) DO UPDATE SET"
		" at = excluded.at, code = excluded.code, message = excluded.message"
		" WHERE excluded.at >= at",
	[W_COUNTS_PRUNE_MINUTES] = "DELETE FROM attempt_minutes WHERE minute < ?1",
	[W_COUNTS_PRUNE_ERRORS] = "DELETE FROM attempt_errors WHERE at < ?1",
	/* Deliveries waiting for an earlier one of their key do not count: the claim
	 * would not take them (one row, NULL when nothing is pending). On the writer's
	 * connection: the writer asks it after a claim, and must not wait behind a read. */
	[W_NEXT_DUE] =
		"SELECT (SELECT next_attempt_at FROM deliveries d"
		" WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL AND " ORDERING_SQL
		" ORDER BY next_attempt_at LIMIT 1)",
};

static const char *const rsql[R_COUNT] = {
	[R_PING] = "SELECT 1",
	[R_EVENT_GET] =
		"SELECT id, event_type, source, source_event_id, partition_key, content_type,"
		" payload, created_at, webhook_id, envelope, traceparent FROM events WHERE id = ?1",
	[R_EVENT_DELIVERIES] =
		"SELECT " DELIVERY_COLUMNS " FROM deliveries WHERE event_id = ?1"
		" ORDER BY created_at, id",
	[R_DELIVERY_GET] = "SELECT " DELIVERY_COLUMNS " FROM deliveries WHERE id = ?1",
	[R_ATTEMPTS] =
		"SELECT n, kind, started_at, duration_ms, code, message, cause, not_sent"
		" FROM attempts WHERE delivery_id = ?1 ORDER BY n",
	/* A bounded slice of events, flagging those created by ?3 left without deliveries. */
	[R_EVENT_SCAN] =
		"SELECT e.rowid, e.id,"
		" e.created_at <= ?3"
		" AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id)"
		" FROM events e WHERE e.rowid > ?1 ORDER BY e.rowid LIMIT ?2",
	[R_SUB_GET] =
		"SELECT id, name, config, enabled, created_at, updated_at, ordering"
		" FROM subscriptions WHERE id = ?1",
	[R_SUB_LIST] =
		"SELECT id, name, config, enabled, created_at, updated_at, ordering"
		" FROM subscriptions ORDER BY created_at, id",
};

struct sq *sq_of(store *st)
{
	return st->priv;
}

/* ---- open and close ------------------------------------------------------ */

static void set_db_err(char *err, size_t errlen, sqlite3 *db, const char *what)
{
	snprintf(err, errlen, "sqlite: %s: %s", what, db ? sqlite3_errmsg(db) : "out of memory");
}

/* mkdir -p of the directory part of path; what it creates is the owner's alone (0700: the
 * store's folder is also the default data directory, which holds the admin token and the
 * secret key). */
static int make_parent_dirs(const char *path, char *err, size_t errlen)
{
	char *dir = strdup(path);
	int rc = STORE_OK;

	if (!dir) {
		snprintf(err, errlen, "out of memory");
		return STORE_ERROR;
	}
	for (char *p = dir + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
			snprintf(err, errlen, "cannot create directory %s: %s", dir,
				 strerror(errno));
			rc = STORE_UNAVAILABLE;
			goto out;
		}
		*p = '/';
	}
out:
	free(dir);
	return rc;
}

/* The database file, created 0600 before SQLite opens it: SQLite would create it 0644
 * less the umask, and gives its -wal and -shm files the database's own mode. A file that
 * exists keeps its mode (an operator may share it with a producer's group); one others
 * can read is named in a warning. */
static int create_private(const char *path, char *err, size_t errlen)
{
	struct stat sb;
	int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);

	if (fd >= 0) {
		close(fd);
		return STORE_OK;
	}
	if (errno != EEXIST) {
		snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
		return STORE_UNAVAILABLE;
	}
	if (stat(path, &sb) == 0 && (sb.st_mode & 007))
		log_warn("sqlite: %s can be read by every user of this machine (mode %03o): chmod "
			 "600 it and its -wal and -shm files (outboxd creates them 0600)", path,
			 (unsigned)(sb.st_mode & 0777));
	return STORE_OK;
}

static int take_owner_lock(struct sq *sq, char *err, size_t errlen)
{
	size_t len = strlen(sq->path) + sizeof(".lock");
	char *lock_path = malloc(len);
	int rc = STORE_OK;

	if (!lock_path) {
		snprintf(err, errlen, "out of memory");
		return STORE_ERROR;
	}
	snprintf(lock_path, len, "%s.lock", sq->path);
	sq->lock_fd = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (sq->lock_fd < 0) {
		snprintf(err, errlen, "cannot open %s: %s", lock_path, strerror(errno));
		rc = STORE_UNAVAILABLE;
		goto out;
	}
	if (flock(sq->lock_fd, LOCK_EX | LOCK_NB) != 0) {
		if (errno == EWOULDBLOCK) {
			snprintf(err, errlen,
				 "another outboxd is already using %s (lock %s is held)",
				 sq->path, lock_path);
			rc = STORE_LOCKED;
		} else {
			snprintf(err, errlen, "cannot lock %s: %s", lock_path, strerror(errno));
			rc = STORE_UNAVAILABLE;
		}
		close(sq->lock_fd);
		sq->lock_fd = -1;
	}
out:
	free(lock_path);
	return rc;
}

/* Nothing reads SQLite's memory statistics; keeping them costs a global mutex on every
 * allocation. Only possible before the library initializes (otherwise SQLITE_MISUSE,
 * harmless). */
static pthread_once_t config_once = PTHREAD_ONCE_INIT;

static void config_library(void)
{
	sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

static int open_conn(const char *path, sqlite3 **db, int cache_kib, char *err, size_t errlen)
{
	char pragmas[256];
	char *msg = NULL;
	int rc;

	pthread_once(&config_once, config_library);

	rc = sqlite3_open_v2(path, db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
				       SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		set_db_err(err, errlen, *db, "open");
		return sq_store_code(rc);
	}
	sqlite3_extended_result_codes(*db, 1);
	/* Producers insert into outbox from other processes: wait for them, briefly. */
	sqlite3_busy_timeout(*db, BUSY_WAIT_MS);
	/* WAL: readers never block the writer. synchronous=FULL: a commit is on disk when
	 * it returns, so an acknowledged event survives a power cut. The schema's foreign
	 * keys are not enforced: the writes keep them, and a trigger deletes a delivery's
	 * attempts with it (migration 18 says why). */
	snprintf(pragmas, sizeof(pragmas),
		 "PRAGMA journal_mode = WAL;"
		 "PRAGMA synchronous = FULL;"
		 "PRAGMA foreign_keys = OFF;"
		 "PRAGMA temp_store = MEMORY;"
		 "PRAGMA journal_size_limit = 67108864;"
		 "PRAGMA cache_size = -%d;", cache_kib);
	rc = sqlite3_exec(*db, pragmas, NULL, NULL, &msg);
	if (rc != SQLITE_OK) {
		snprintf(err, errlen, "sqlite: %s: %s", path, msg ? msg : sqlite3_errstr(rc));
		sqlite3_free(msg);
		return sq_store_code(rc);
	}
	return STORE_OK;
}

static int check_wal(sqlite3 *db, char *err, size_t errlen)
{
	sqlite3_stmt *s = NULL;
	int rc = STORE_OK;

	if (sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &s, NULL) != SQLITE_OK ||
	    sqlite3_step(s) != SQLITE_ROW) {
		set_db_err(err, errlen, db, "journal_mode");
		rc = STORE_ERROR;
		goto out;
	}
	if (strcmp((const char *)sqlite3_column_text(s, 0), "wal") != 0) {
		snprintf(err, errlen, "sqlite: cannot use WAL mode (journal_mode is %s)",
			 sqlite3_column_text(s, 0));
		rc = STORE_ERROR;
	}
out:
	sqlite3_finalize(s);
	return rc;
}

int sq_schema_version(sqlite3 *db, int64_t *version)
{
	sqlite3_stmt *s = NULL;
	int rc;

	rc = sqlite3_prepare_v2(db, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
				-1, &s, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		*version = sqlite3_column_int64(s, 0);
		rc = SQLITE_OK;
	}
	sqlite3_finalize(s);
	return rc;
}

static int record_migration(sqlite3 *db, int64_t version)
{
	sqlite3_stmt *s = NULL;
	int rc;

	rc = sqlite3_prepare_v2(db, "INSERT INTO schema_migrations(version, applied_at)"
				" VALUES (?1, ?2)", -1, &s, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(s, 1, version);
		sqlite3_bind_int64(s, 2, clock_now_ms());
		rc = sqlite3_step(s);
		if (rc == SQLITE_DONE)
			rc = SQLITE_OK;
	}
	sqlite3_finalize(s);
	return rc;
}

/* Applies the migrations the database lacks, each in its own transaction. */
static int migrate(sqlite3 *db, char *err, size_t errlen)
{
	int64_t version = 0;
	char *msg = NULL;
	size_t v = 0;
	int rc;

	rc = sqlite3_exec(db, "CREATE TABLE IF NOT EXISTS schema_migrations ("
			  " version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)",
			  NULL, NULL, &msg);
	if (rc == SQLITE_OK)
		rc = sq_schema_version(db, &version);
	if (rc != SQLITE_OK)
		goto out;
	if (version > (int64_t)sqlite_migrations_n) {
		snprintf(err, errlen,
			 "database schema version %lld is newer than this outboxd knows (%zu)",
			 (long long)version, sqlite_migrations_n);
		return STORE_ERROR;
	}
	for (v = (size_t)version + 1; rc == SQLITE_OK && v <= sqlite_migrations_n; v++) {
		rc = sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, &msg);
		if (rc == SQLITE_OK)
			rc = sqlite3_exec(db, sqlite_migrations[v - 1].sql, NULL, NULL, &msg);
		if (rc == SQLITE_OK && v == CHECKS_MIGRATION)
			rc = rewrite_checks(db, &msg);
		if (rc == SQLITE_OK)
			rc = record_migration(db, (int64_t)v);
		if (rc == SQLITE_OK)
			rc = sqlite3_exec(db, "COMMIT", NULL, NULL, &msg);
		if (rc == SQLITE_OK)
			log_info("store: applied schema migration %zu (%s)", v, sqlite_migrations[v - 1].name);
		else
			break;
	}
out:
	if (rc == SQLITE_OK)
		return STORE_OK;
	snprintf(err, errlen, "sqlite: migration %zu: %s", v, msg ? msg : sqlite3_errmsg(db));
	sqlite3_free(msg);
	if (!sqlite3_get_autocommit(db))
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	return sq_store_code(rc);
}

static int prepare_all(sqlite3 *db, const char *const *sql, sqlite3_stmt **out, int n,
		       char *err, size_t errlen)
{
	for (int i = 0; i < n; i++) {
		int rc = sqlite3_prepare_v3(db, sql[i], -1, SQLITE_PREPARE_PERSISTENT,
					    &out[i], NULL);

		if (rc != SQLITE_OK) {
			snprintf(err, errlen, "sqlite: prepare \"%.60s\": %s", sql[i],
				 sqlite3_errmsg(db));
			return STORE_ERROR;
		}
	}
	return STORE_OK;
}

/* Appends "(?a,?a+1,...)" rows: the VALUES list of a grouped statement. */
static int values_rows(struct buf *b, int first, int rows, int cols)
{
	int bad = 0;

	for (int r = 0; r < rows; r++) {
		bad |= buf_appendf(b, "%s", r ? ",(" : "(");
		for (int c = 0; c < cols; c++)
			bad |= buf_appendf(b, c ? ",?%d" : "?%d", first + r * cols + c);
		bad |= buf_appendf(b, ")");
	}
	return bad;
}

/* OR FAIL: a statement of many rows that may fail a constraint otherwise runs in a
 * statement transaction, SQLite copying every page it changes to a statement journal so
 * it can undo just that statement (15% of these inserts' instructions). Nothing here
 * needs that: sq_ingest rolls back the whole transaction on any error. */
static int prepare_rows(struct sq *sq, char *err, size_t errlen)
{
	static const char events_head[] =
		"INSERT OR FAIL INTO events(id, event_type, source, source_event_id, partition_key,"
		" content_type, payload, created_at, traceparent) VALUES ";
	/* column7: the hand-off's lease_until (NULL: not leased); the owner is the last
	 * parameter, after the rows' */
	static const char deliveries_head[] =
		"INSERT OR FAIL INTO deliveries(id, event_id, subscription_id, event_type,"
		" next_attempt_at, status, created_at, updated_at, order_key, lease_until,"
		" lease_owner)"
		" SELECT column1, column2, column3, column4, column5, 'NEW', column5, column5,"
		" column6, column7, CASE WHEN column7 IS NULL THEN NULL ELSE ?%d END"
		" FROM (VALUES ";
	struct buf b;
	int rc = STORE_OK, bad;

	buf_init(&b, 1 << 16);
	bad = buf_appendf(&b, "%s", events_head) || values_rows(&b, 1, INGEST_ROWS, EVENT_COLS);
	if (bad || sqlite3_prepare_v3(sq->wdb, b.data, -1, SQLITE_PREPARE_PERSISTENT,
				      &sq->event_rows, NULL) != SQLITE_OK)
		rc = STORE_ERROR;
	buf_reset(&b);
	bad = buf_appendf(&b, deliveries_head, INGEST_ROWS * DELIVERY_COLS + 1) ||
	      values_rows(&b, 1, INGEST_ROWS, DELIVERY_COLS) || buf_appendf(&b, ")");
	if (rc == STORE_OK && (bad || sqlite3_prepare_v3(sq->wdb, b.data, -1,
							 SQLITE_PREPARE_PERSISTENT,
							 &sq->delivery_rows, NULL) != SQLITE_OK))
		rc = STORE_ERROR;
	buf_free(&b);
	if (rc != STORE_OK)
		snprintf(err, errlen, "sqlite: prepare the grouped inserts: %s",
			 sqlite3_errmsg(sq->wdb));
	return rc;
}

static void sq_close(store *st)
{
	struct sq *sq = sq_of(st);

	if (!sq)
		return;
	for (int i = 0; i < W_COUNT; i++)
		sqlite3_finalize(sq->w[i]);
	sqlite3_finalize(sq->event_rows);
	sqlite3_finalize(sq->delivery_rows);
	sq_counts_free(sq);
	for (int k = 0; k < SQ_READERS; k++) {
		for (int i = 0; i < R_COUNT; i++)
			sqlite3_finalize(sq->readers[k].r[i]);
		sqlite3_close(sq->readers[k].db);
		pthread_mutex_destroy(&sq->readers[k].mu);
	}
	sqlite3_close(sq->wdb);
	/* Closing the descriptor releases the owner lock. */
	if (sq->lock_fd >= 0)
		close(sq->lock_fd);
	pthread_mutex_destroy(&sq->wmu);
	free(sq->path);
	free(sq);
	st->priv = NULL;
}

/* The page cache of the first reader, and of the others, opened only when reads
 * overlap (KiB). */
#define READER_CACHE_KIB 8192
#define EXTRA_READER_CACHE_KIB 2048

/* SQLite's progress handler of a reader: nonzero (interrupt) once its deadline passed. */
static int reader_past_deadline(void *arg)
{
	const struct sq_reader *rd = arg;
	return rd->deadline_ms && clock_mono_ms() > rd->deadline_ms;
}

/* Opens reader rd (rd->mu held, or the store being opened): a read-only connection with
 * its statements. On failure rd is left closed. */
static int reader_open(struct sq *sq, struct sq_reader *rd, int cache_kib, char *err,
		       size_t errlen)
{
	int rc = open_conn(sq->path, &rd->db, cache_kib, err, errlen);

	if (rc == STORE_OK &&
	    sqlite3_exec(rd->db, "PRAGMA query_only = ON", NULL, NULL, NULL) != SQLITE_OK) {
		set_db_err(err, errlen, rd->db, "query_only");
		rc = STORE_ERROR;
	}
	if (rc == STORE_OK)
		rc = prepare_all(rd->db, rsql, rd->r, R_COUNT, err, errlen);
	/* every 10,000 virtual machine steps (tens of microseconds) it looks at the clock */
	if (rc == STORE_OK)
		sqlite3_progress_handler(rd->db, 10000, reader_past_deadline, rd);
	if (rc != STORE_OK) {
		for (int i = 0; i < R_COUNT; i++) {
			sqlite3_finalize(rd->r[i]);
			rd->r[i] = NULL;
		}
		sqlite3_close(rd->db);
		rd->db = NULL;
	}
	return rc;
}

static int sq_open(store *st, const char *dsn, char *err, size_t errlen)
{
	const char *path = dsn + strlen(store_sqlite_methods.dsn_prefix);
	struct sq *sq;
	int rc;

	if (!*path) {
		snprintf(err, errlen, "sqlite: empty path in %s", dsn);
		return STORE_INVALID;
	}
	sq = calloc(1, sizeof(*sq));
	if (!sq || !(sq->path = strdup(path))) {
		free(sq);
		snprintf(err, errlen, "out of memory");
		return STORE_ERROR;
	}
	sq->lock_fd = -1;
	sq->st = st;
	pthread_mutex_init(&sq->wmu, NULL);
	for (int k = 0; k < SQ_READERS; k++)
		pthread_mutex_init(&sq->readers[k].mu, NULL);
	st->priv = sq;

	rc = make_parent_dirs(sq->path, err, errlen);
	if (rc == STORE_OK && strcmp(sq->path, ":memory:") != 0)
		rc = create_private(sq->path, err, errlen);
	/* A tool beside the daemon (store_open_shared) leaves the lock to it. */
	if (rc == STORE_OK && !st->shared)
		rc = take_owner_lock(sq, err, errlen);
	if (rc == STORE_OK)
		rc = open_conn(sq->path, &sq->wdb, 16384, err, errlen);
	if (rc == STORE_OK)
		rc = check_wal(sq->wdb, err, errlen);
	if (rc == STORE_OK)
		rc = migrate(sq->wdb, err, errlen);
	/* The first reader opens after the migrations so it sees the final schema. */
	if (rc == STORE_OK)
		rc = reader_open(sq, &sq->readers[0], READER_CACHE_KIB, err, errlen);
	if (rc == STORE_OK)
		rc = prepare_all(sq->wdb, wsql, sq->w, W_COUNT, err, errlen);
	if (rc == STORE_OK)
		rc = prepare_rows(sq, err, errlen);
	if (rc != STORE_OK)
		sq_close(st);
	return rc;
}

/* Locks a free reader (opening it if need be), or waits for one. */
static struct sq_reader *read_lock(struct sq *sq)
{
	char err[256];

	for (int k = 0; k < SQ_READERS; k++) {
		struct sq_reader *rd = &sq->readers[k];
		if (pthread_mutex_trylock(&rd->mu) != 0)
			continue;
		if (rd->db || reader_open(sq, rd, EXTRA_READER_CACHE_KIB, err, sizeof(err)) ==
				      STORE_OK)
			return rd;
		log_warn("%s", err); /* the others serve meanwhile */
		pthread_mutex_unlock(&rd->mu);
	}
	/* All busy: wait for one that is open, a different one each time. */
	unsigned k = atomic_fetch_add(&sq->reader_next, 1) % SQ_READERS;
	struct sq_reader *rd = &sq->readers[k];
	pthread_mutex_lock(&rd->mu);
	if (rd->db)
		return rd;
	pthread_mutex_unlock(&rd->mu);
	rd = &sq->readers[0];
	pthread_mutex_lock(&rd->mu);
	return rd;
}

struct sq_reader *sq_read_lock(struct sq *sq)
{
	struct sq_reader *rd = read_lock(sq);
	int64_t timeout = atomic_load(&sq->st->read_timeout_ms);

	rd->deadline_ms = timeout ? clock_mono_ms() + timeout : 0;
	return rd;
}

void sq_read_unlock(struct sq_reader *rd)
{
	rd->deadline_ms = 0;
	pthread_mutex_unlock(&rd->mu);
}

static int sq_ping(store *st)
{
	struct sq *sq = sq_of(st);
	int rc;

	struct sq_reader *rd = sq_read_lock(sq);
	rc = sq_step_row(rd->r[R_PING]);
	sq_stmt_end(rd->r[R_PING]);
	sq_read_unlock(rd);
	if (rc == SQLITE_ROW)
		return STORE_OK;
	return rc == SQLITE_DONE ? STORE_ERROR : sq_store_code(rc);
}

/* ---- stats --------------------------------------------------------------- */

const struct store_methods store_sqlite_methods = {
	.name = "sqlite",
	.dsn_prefix = "sqlite:",
	.concurrent_writers = 1,
	.open = sq_open,
	.close = sq_close,
	.ping = sq_ping,
	.ingest = sq_ingest,
	.relay_outbox = sq_relay_outbox,
	.claim_due = sq_claim_due,
	.next_due = sq_next_due,
	.record_results = sq_record_results,
	.attempt_counts_prune = sq_attempt_counts_prune,
	.dead_letters = sq_dead_letters,
	.dead_letters_done = sq_dead_letters_done,
	.reap_leases = sq_reap_leases,
	.order_sweep = sq_order_sweep,
	.release_all = sq_release_all,
	.event_get = sq_event_get,
	.event_deliveries = sq_event_deliveries,
	.delivery_get = sq_delivery_get,
	.delivery_attempts = sq_delivery_attempts,
	.deliveries_list = sq_deliveries_list,
	.replay = sq_replay,
	.dlq_purge = sq_dlq_purge,
	.cleanup_batch = sq_cleanup_batch,
	.cleanup_sweep = sq_cleanup_sweep,
	.deliveries_count = sq_deliveries_count,
	.events_list = sq_events_list,
	.dlq_purge_matching = sq_dlq_purge_matching,
	.job_create = sq_job_create,
	.job_update = sq_job_update,
	.job_get = sq_job_get,
	.jobs_running = sq_jobs_running,
	.jobs_list = sq_jobs_list,
	.audit_append = sq_audit_append,
	.audit_list = sq_audit_list,
	.token_create = sq_token_create,
	.token_delete = sq_token_delete,
	.token_list = sq_token_list,
	.token_touch = sq_token_touch,
	.stats = sq_stats,
	.attempt_series = sq_attempt_series,
	.sub_create = sq_sub_create,
	.sub_update = sq_sub_update,
	.sub_delete = sq_sub_delete,
	.sub_get = sq_sub_get,
	.sub_list = sq_sub_list,
	.sub_page = sq_sub_page,
	.event_types = sq_event_types,
	.sub_config_swap = sq_sub_config_swap,
	.sub_scrub = sq_sub_scrub,
	.meta_swap = sq_meta_swap,
	.leases_renew = sq_leases_renew,
	.meta_get = sq_meta_get,
	.copy_read = sq_copy_read,
	.copy_write = sq_copy_write,
	.copy_find = sq_copy_find,
	.copy_check = sq_copy_check,
};
