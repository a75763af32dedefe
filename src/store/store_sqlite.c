/* store_sqlite.c: the embedded SQLite backend of the storage interface.
 *
 * One process owns a database file (an flock on PATH.lock); other processes may only
 * INSERT into the producer `outbox` table. Two connections: one writer behind a mutex
 * (every transaction is BEGIN IMMEDIATE, so SQLite never has to upgrade a read lock) and
 * one reader behind another (WAL lets it read while the writer commits). The hot-path
 * statements are prepared once at open and reset after each use; a statement is never
 * left mid-step, so the reader's snapshot never pins the WAL.
 *
 * Must not: interpolate values into SQL, hold the writer across calls, or return
 * SQLite codes to callers (they get enum store_err). */
#include "store/backend.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/buf.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

/* Cleanup deletes in chunks so ingest never waits long behind it. */
#define CLEANUP_CHUNK 10000
/* Stored error text (attempt message and cause, last_message/last_cause) is bounded. */
#define ERROR_TEXT_MAX 1024

/* ---- schema ------------------------------------------------------------------------ */

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

/* The migration whose SQL file (006_checks_without_in.sql) only explains: its work is
 * rewrite_checks above. */
#define CHECKS_MIGRATION 6

#define DELIVERY_COLUMNS                                                             \
	"id, event_id, subscription_id, event_type, status, replay, attempt_count, "  \
	"retry_count, next_attempt_at, created_at, updated_at, processed_at, "        \
	"last_code, last_message, last_cause, lease_owner, lease_until"

/* ---- prepared statements ----------------------------------------------------------- */

/* On the write connection. */
enum wstmt {
	W_BEGIN,
	W_COMMIT,
	W_ROLLBACK,
	W_EVENT_FIND,
	W_EVENT_FIND_ID,
	W_EVENT_INSERT,
	W_DELIVERY_INSERT,
	W_DELIVERY_INSERT_STATE,
	W_CLAIM,
	W_CLAIM_EVENT,
	W_RESULT,
	W_ATTEMPT_INSERT,
	W_REAP,
	W_RELEASE_ALL,
	W_OUTBOX_SELECT,
	W_OUTBOX_DELETE,
	W_DELIVERY_STATE,
	W_REPLAY_SET,
	W_DELIVERY_DELETE,
	W_EVENT_DELETE_ORPHAN,
	W_CLEANUP_CHUNK,
	W_SUB_INSERT,
	W_SUB_UPDATE,
	W_SUB_DELETE,
	W_COUNT
};

static const char *const wsql[W_COUNT] = {
	[W_BEGIN] = "BEGIN IMMEDIATE",
	[W_COMMIT] = "COMMIT",
	[W_ROLLBACK] = "ROLLBACK",
	[W_EVENT_FIND] = "SELECT id FROM events WHERE source = ?1 AND source_event_id = ?2",
	[W_EVENT_FIND_ID] = "SELECT id FROM events WHERE id = ?1",
	[W_EVENT_INSERT] =
		"INSERT INTO events(id, event_type, source, source_event_id, partition_key,"
		" content_type, payload, created_at, traceparent)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
	[W_DELIVERY_INSERT] =
		"INSERT INTO deliveries(id, event_id, subscription_id, event_type, status,"
		" next_attempt_at, created_at, updated_at)"
		" VALUES (?1, ?2, ?3, ?4, 'NEW', ?5, ?5, ?5)",
	/* a delivery that starts in another state (store_event_in.initial_status) */
	[W_DELIVERY_INSERT_STATE] =
		"INSERT INTO deliveries(id, event_id, subscription_id, event_type, status,"
		" next_attempt_at, last_code, last_message, last_cause, created_at, updated_at)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10)",
	[W_CLAIM] =
		"UPDATE deliveries SET lease_owner = ?1, lease_until = ?2"
		" WHERE rowid IN (SELECT rowid FROM deliveries"
		"  WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL"
		"  AND next_attempt_at <= ?3 ORDER BY next_attempt_at LIMIT ?4)"
		" RETURNING id, event_id, subscription_id, status, replay, attempt_count,"
		" retry_count, next_attempt_at, delay_actions",
	[W_CLAIM_EVENT] =
		"SELECT event_type, content_type, payload, created_at, traceparent, source,"
		" source_event_id, partition_key FROM events WHERE id = ?1",
	[W_RESULT] =
		"UPDATE deliveries SET status = ?2, replay = ?3, attempt_count = ?4,"
		" retry_count = ?5, next_attempt_at = ?6, processed_at = ?7,"
		" last_code = CASE WHEN ?13 THEN last_code ELSE ?8 END,"
		" last_message = CASE WHEN ?13 THEN last_message ELSE ?9 END,"
		" last_cause = CASE WHEN ?13 THEN last_cause ELSE ?10 END,"
		" lease_owner = NULL, lease_until = NULL, delay_actions = ?14,"
		" updated_at = ?11 WHERE id = ?1 AND lease_owner = ?12",
	[W_ATTEMPT_INSERT] =
		"INSERT INTO attempts(delivery_id, n, kind, started_at, duration_ms, code,"
		" message, cause) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
		" ON CONFLICT (delivery_id, n) DO NOTHING",
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
		" updated_at = ?2"
		" WHERE id = ?1",
	[W_DELIVERY_DELETE] = "DELETE FROM deliveries WHERE id = ?1",
	[W_EVENT_DELETE_ORPHAN] =
		"DELETE FROM events WHERE id = ?1"
		" AND NOT EXISTS (SELECT 1 FROM deliveries WHERE event_id = ?1)",
	[W_CLEANUP_CHUNK] =
		"DELETE FROM deliveries WHERE rowid IN (SELECT rowid FROM deliveries"
		"  WHERE status = 'PROCESSED' AND lease_until IS NULL LIMIT ?1)"
		" RETURNING event_id",
	[W_SUB_INSERT] =
		"INSERT INTO subscriptions(id, name, config, enabled, created_at, updated_at)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
	[W_SUB_UPDATE] =
		"UPDATE subscriptions SET name = ?2, config = ?3, enabled = ?4, updated_at = ?5"
		" WHERE id = ?1",
	[W_SUB_DELETE] = "DELETE FROM subscriptions WHERE id = ?1",
};

/* On the read connection. */
enum rstmt {
	R_PING,
	R_NEXT_DUE,
	R_EVENT_GET,
	R_EVENT_DELIVERIES,
	R_DELIVERY_GET,
	R_ATTEMPTS,
	R_EVENT_SCAN,
	R_SUB_GET,
	R_SUB_LIST,
	R_COUNT
};

static const char *const rsql[R_COUNT] = {
	[R_PING] = "SELECT 1",
	[R_NEXT_DUE] =
		"SELECT MIN(next_attempt_at) FROM deliveries"
		" WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL",
	[R_EVENT_GET] =
		"SELECT id, event_type, source, source_event_id, partition_key, content_type,"
		" payload, created_at FROM events WHERE id = ?1",
	[R_EVENT_DELIVERIES] =
		"SELECT " DELIVERY_COLUMNS " FROM deliveries WHERE event_id = ?1"
		" ORDER BY created_at, id",
	[R_DELIVERY_GET] = "SELECT " DELIVERY_COLUMNS " FROM deliveries WHERE id = ?1",
	[R_ATTEMPTS] =
		"SELECT n, kind, started_at, duration_ms, code, message, cause FROM attempts"
		" WHERE delivery_id = ?1 ORDER BY n",
	/* A bounded slice of events, flagging those left without deliveries. */
	[R_EVENT_SCAN] =
		"SELECT e.rowid, e.id,"
		" NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_id = e.id)"
		" FROM events e WHERE e.rowid > ?1 ORDER BY e.rowid LIMIT ?2",
	[R_SUB_GET] =
		"SELECT id, name, config, enabled, created_at, updated_at FROM subscriptions"
		" WHERE id = ?1",
	[R_SUB_LIST] =
		"SELECT id, name, config, enabled, created_at, updated_at FROM subscriptions"
		" ORDER BY created_at, id",
};

struct sq {
	char *path;
	int lock_fd;
	sqlite3 *wdb;
	sqlite3 *rdb;
	pthread_mutex_t wmu;        /* guards wdb and w[] */
	pthread_mutex_t rmu;        /* guards rdb and r[] */
	int relaxed;                /* wdb runs with synchronous=NORMAL (guarded by wmu) */
	int64_t busy_until_ms;      /* in an outage: writes fail fast until then, 0 = none
	                               (tx_begin; guarded by wmu) */
	sqlite3_stmt *w[W_COUNT];
	sqlite3_stmt *r[R_COUNT];
	sqlite3_stmt *event_rows;   /* INGEST_ROWS events in one INSERT (guarded by wmu) */
	sqlite3_stmt *delivery_rows; /* INGEST_ROWS new deliveries in one INSERT (wmu) */
};

static struct sq *sq_of(store *st)
{
	return st->priv;
}

/* ---- small helpers ----------------------------------------------------------------- */

/* Busy, full disk, I/O trouble: the caller should answer "try again later". */
static int store_code(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_DONE:
	case SQLITE_ROW:
		return STORE_OK;
	case SQLITE_BUSY:
	case SQLITE_FULL:
	case SQLITE_IOERR:
	case SQLITE_CANTOPEN:
		return STORE_UNAVAILABLE;
	default:
		return STORE_ERROR;
	}
}

static int log_stmt_error(sqlite3_stmt *s, int rc)
{
	log_error("sqlite: %s (in: %.60s)", sqlite3_errmsg(sqlite3_db_handle(s)),
		  sqlite3_sql(s));
	return rc;
}

static int log_nomem(void)
{
	log_error("store: out of memory");
	return SQLITE_NOMEM;
}

static void stmt_end(sqlite3_stmt *s)
{
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
}

/* Steps a statement that returns no rows and resets it. SQLITE_OK or the error. */
static int step_done(sqlite3_stmt *s)
{
	int rc = sqlite3_step(s);

	if (rc == SQLITE_DONE)
		rc = SQLITE_OK;
	else
		log_stmt_error(s, rc);
	stmt_end(s);
	return rc;
}

/* Steps a statement expected to return at most one row: SQLITE_ROW (the statement is
 * left on the row; the caller calls stmt_end), SQLITE_DONE (reset) or the error. */
static int step_row(sqlite3_stmt *s)
{
	int rc = sqlite3_step(s);

	if (rc != SQLITE_ROW) {
		if (rc != SQLITE_DONE)
			log_stmt_error(s, rc);
		stmt_end(s);
	}
	return rc;
}

static void bind_text(sqlite3_stmt *s, int i, const char *t)
{
	if (t)
		sqlite3_bind_text(s, i, t, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, i);
}

/* Text of at most ERROR_TEXT_MAX bytes, cut on a UTF-8 character boundary. */
static void bind_error_text(sqlite3_stmt *s, int i, const char *t)
{
	size_t len;

	if (!t) {
		sqlite3_bind_null(s, i);
		return;
	}
	len = strnlen(t, ERROR_TEXT_MAX + 1);
	if (len > ERROR_TEXT_MAX) {
		len = ERROR_TEXT_MAX;
		while (len > 0 && ((unsigned char)t[len] & 0xc0) == 0x80)
			len--;
	}
	sqlite3_bind_text(s, i, t, (int)len, SQLITE_STATIC);
}

static void bind_payload(sqlite3_stmt *s, int i, const void *p, size_t len)
{
	/* A zero-length blob bound from NULL would be SQL NULL; the column is NOT NULL. */
	if (!len)
		sqlite3_bind_zeroblob(s, i, 0);
	else
		sqlite3_bind_blob64(s, i, p, len, SQLITE_STATIC);
}

/* 0 means "none" in the interface and NULL in the table. */
static void bind_time(sqlite3_stmt *s, int i, int64_t v)
{
	if (v)
		sqlite3_bind_int64(s, i, v);
	else
		sqlite3_bind_null(s, i);
}

static void col_id(sqlite3_stmt *s, int i, char dst[UUID_STR_LEN])
{
	const unsigned char *t = sqlite3_column_text(s, i);
	size_t len = t ? (size_t)sqlite3_column_bytes(s, i) : 0;

	if (len >= UUID_STR_LEN)
		len = UUID_STR_LEN - 1;
	if (len)
		memcpy(dst, t, len);
	dst[len] = '\0';
}

/* Copies a text column into *out (NULL for SQL NULL). SQLITE_OK or SQLITE_NOMEM. */
static int col_dup(sqlite3_stmt *s, int i, char **out)
{
	const unsigned char *t;
	int len;

	*out = NULL;
	if (sqlite3_column_type(s, i) == SQLITE_NULL)
		return SQLITE_OK;
	t = sqlite3_column_text(s, i);
	len = sqlite3_column_bytes(s, i);
	if (!t || !(*out = malloc((size_t)len + 1)))
		return log_nomem();
	memcpy(*out, t, (size_t)len);
	(*out)[len] = '\0';
	return SQLITE_OK;
}

/* Makes room for element n of an array of size-byte elements: returns the array (maybe
 * moved), or NULL when memory runs out (the old array is then untouched). */
static void *grow(void *arr, size_t *cap, size_t n, size_t size)
{
	size_t ncap;
	void *q;

	if (n < *cap)
		return arr;
	ncap = *cap ? *cap * 2 : 16;
	q = realloc(arr, ncap * size);
	if (!q) {
		log_nomem();
		return NULL;
	}
	*cap = ncap;
	return q;
}

/* Another process holding the write lock past the busy timeout (BUSY_WAIT_MS) is an
 * outage. The writer that waited it out latches it for BUSY_LATCH_MS: the writers queued
 * behind it on wmu (committer, dispatcher, jobs) then fail at once — ingest goes to the
 * spool — instead of each waiting its own timeout in turn. Until a write gets through
 * again, the one that tries after each latch waits only BUSY_PROBE_MS, so the others are
 * not held up behind it either. */
#define BUSY_WAIT_MS 5000
#define BUSY_PROBE_MS 200
#define BUSY_LATCH_MS 1000

static int tx_begin(struct sq *sq)
{
	if (sq->busy_until_ms && clock_mono_ms() < sq->busy_until_ms)
		return SQLITE_BUSY;
	int rc = step_done(sq->w[W_BEGIN]);
	if ((rc & 0xff) == SQLITE_BUSY) {
		if (!sq->busy_until_ms)
			sqlite3_busy_timeout(sq->wdb, BUSY_PROBE_MS);
		sq->busy_until_ms = clock_mono_ms() + BUSY_LATCH_MS;
	} else if (sq->busy_until_ms) {
		sqlite3_busy_timeout(sq->wdb, BUSY_WAIT_MS); /* the lock is ours again */
		sq->busy_until_ms = 0;
	}
	return rc;
}

/* Claims and results are written with synchronous=NORMAL: losing the last few to a
 * power cut only means those deliveries are sent again (at-least-once), and the next
 * FULL commit (every ingest) syncs them anyway. Events are never acknowledged from a
 * relaxed commit: every other writer takes the lock with wlock(), which puts the
 * connection back to FULL first. The level is switched only when it changes (a PRAGMA
 * takes effect when it is compiled, so it cannot be kept prepared), so a busy
 * dispatcher claiming and recording back to back parses no PRAGMA at all. */
static int sync_set(struct sq *sq, int relaxed)
{
	int rc;

	if (sq->relaxed == relaxed)
		return SQLITE_OK;
	rc = sqlite3_exec(sq->wdb, relaxed ? "PRAGMA synchronous = NORMAL" :
					     "PRAGMA synchronous = FULL", NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		sq->relaxed = relaxed;
	return rc;
}

/* Takes the writer lock with the connection at synchronous=FULL. SQLITE_OK, or the
 * error that left it relaxed (the lock is held either way). */
static int wlock(struct sq *sq)
{
	pthread_mutex_lock(&sq->wmu);
	return sync_set(sq, 0);
}

/* Takes the writer lock for claims and results, at synchronous=NORMAL when it can (a
 * failure only means a stricter commit). */
static void wlock_relaxed(struct sq *sq)
{
	pthread_mutex_lock(&sq->wmu);
	sync_set(sq, 1);
}

static int tx_commit(struct sq *sq)
{
	return step_done(sq->w[W_COMMIT]);
}

/* Rolls back if a transaction is still open (SQLite may have ended it already, e.g.
 * on SQLITE_FULL). */
static void tx_rollback(struct sq *sq)
{
	if (!sqlite3_get_autocommit(sq->wdb))
		step_done(sq->w[W_ROLLBACK]);
}

/* Ends a write transaction: commit on success, rollback otherwise. Returns the
 * store code. */
static int tx_end(struct sq *sq, int rc)
{
	if (rc == SQLITE_OK)
		rc = tx_commit(sq);
	if (rc == SQLITE_OK)
		return STORE_OK;
	tx_rollback(sq);
	/* Rolled back is never OK, whatever code led here (a stray SQLITE_DONE too). */
	rc = store_code(rc);
	return rc == STORE_OK ? STORE_ERROR : rc;
}

static int read_delivery(sqlite3_stmt *s, struct store_delivery *d)
{
	const char *status = (const char *)sqlite3_column_text(s, 4);
	enum delivery_status st = DELIVERY_FAILED;

	memset(d, 0, sizeof(*d));
	col_id(s, 0, d->id);
	col_id(s, 1, d->event_id);
	col_id(s, 2, d->subscription_id);
	if (status && delivery_status_parse(status, &st) != 0)
		log_warn("store: delivery %s has unknown status %s", d->id, status);
	d->status = st;
	d->replay = sqlite3_column_int(s, 5);
	d->attempt_count = sqlite3_column_int(s, 6);
	d->retry_count = sqlite3_column_int(s, 7);
	d->next_attempt_at = sqlite3_column_int64(s, 8);
	d->created_at = sqlite3_column_int64(s, 9);
	d->updated_at = sqlite3_column_int64(s, 10);
	d->processed_at = sqlite3_column_int64(s, 11);
	d->last_code = sqlite3_column_int(s, 12);
	d->lease_until = sqlite3_column_int64(s, 16);
	if (col_dup(s, 3, &d->event_type) || col_dup(s, 13, &d->last_message) ||
	    col_dup(s, 14, &d->last_cause) || col_dup(s, 15, &d->lease_owner)) {
		store_delivery_free(d);
		return SQLITE_NOMEM;
	}
	return SQLITE_OK;
}

/* Steps s to the end, appending every row as a delivery, then resets it. */
static int read_deliveries(sqlite3_stmt *s, struct store_delivery **items, size_t *n,
			   size_t *cap)
{
	int rc;

	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_delivery *more = grow(*items, cap, *n, sizeof(**items));

		if (!more) {
			rc = SQLITE_NOMEM;
			goto out;
		}
		*items = more;
		rc = read_delivery(s, &(*items)[*n]);
		if (rc != SQLITE_OK)
			goto out;
		(*n)++;
	}
	if (rc == SQLITE_DONE)
		rc = SQLITE_OK;
	else
		log_stmt_error(s, rc);
out:
	stmt_end(s);
	return rc;
}

/* ---- open and close ---------------------------------------------------------------- */

static void set_db_err(char *err, size_t errlen, sqlite3 *db, const char *what)
{
	snprintf(err, errlen, "sqlite: %s: %s", what, db ? sqlite3_errmsg(db) : "out of memory");
}

/* mkdir -p of the directory part of path. */
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
		if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
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
		return store_code(rc);
	}
	sqlite3_extended_result_codes(*db, 1);
	/* Producers insert into outbox from other processes: wait for them, briefly. */
	sqlite3_busy_timeout(*db, BUSY_WAIT_MS);
	/* WAL: readers never block the writer. synchronous=FULL: a commit is on disk when
	 * it returns, so an acknowledged event survives a power cut (DESIGN §3). */
	snprintf(pragmas, sizeof(pragmas),
		 "PRAGMA journal_mode = WAL;"
		 "PRAGMA synchronous = FULL;"
		 "PRAGMA foreign_keys = ON;"
		 "PRAGMA temp_store = MEMORY;"
		 "PRAGMA journal_size_limit = 67108864;"
		 "PRAGMA cache_size = -%d;", cache_kib);
	rc = sqlite3_exec(*db, pragmas, NULL, NULL, &msg);
	if (rc != SQLITE_OK) {
		snprintf(err, errlen, "sqlite: %s: %s", path, msg ? msg : sqlite3_errstr(rc));
		sqlite3_free(msg);
		return store_code(rc);
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

static int schema_version(sqlite3 *db, int64_t *version)
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
		rc = schema_version(db, &version);
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
	return store_code(rc);
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

/* Ingest writes in groups of INGEST_ROWS rows: one statement execution per group instead
 * of one per row (per execution SQLite opens a cursor on the table and on each index it
 * touches; the group pays that once). Measured (callgrind, 20,000 events of one
 * subscription in batches of 100): 60,500 -> 38,600 instructions per delivery. The texts
 * are made here, with numbered parameters, *_COLS per row. */
#define INGEST_ROWS 32
#define EVENT_COLS 9
#define DELIVERY_COLS 5

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

static int prepare_rows(struct sq *sq, char *err, size_t errlen)
{
	static const char events_head[] =
		"INSERT INTO events(id, event_type, source, source_event_id, partition_key,"
		" content_type, payload, created_at, traceparent) VALUES ";
	static const char deliveries_head[] =
		"INSERT INTO deliveries(id, event_id, subscription_id, event_type, next_attempt_at,"
		" status, created_at, updated_at)"
		" SELECT column1, column2, column3, column4, column5, 'NEW', column5, column5"
		" FROM (VALUES ";
	struct buf b;
	int rc = STORE_OK, bad;

	buf_init(&b, 1 << 16);
	bad = buf_appendf(&b, "%s", events_head) || values_rows(&b, 1, INGEST_ROWS, EVENT_COLS);
	if (bad || sqlite3_prepare_v3(sq->wdb, b.data, -1, SQLITE_PREPARE_PERSISTENT,
				      &sq->event_rows, NULL) != SQLITE_OK)
		rc = STORE_ERROR;
	buf_reset(&b);
	bad = buf_appendf(&b, "%s", deliveries_head) ||
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
	for (int i = 0; i < R_COUNT; i++)
		sqlite3_finalize(sq->r[i]);
	sqlite3_close(sq->rdb);
	sqlite3_close(sq->wdb);
	/* Closing the descriptor releases the owner lock. */
	if (sq->lock_fd >= 0)
		close(sq->lock_fd);
	pthread_mutex_destroy(&sq->wmu);
	pthread_mutex_destroy(&sq->rmu);
	free(sq->path);
	free(sq);
	st->priv = NULL;
}

static int sq_open(store *st, const char *dsn, char *err, size_t errlen)
{
	const char *path = dsn + strlen(store_sqlite_ops.dsn_prefix);
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
	pthread_mutex_init(&sq->wmu, NULL);
	pthread_mutex_init(&sq->rmu, NULL);
	st->priv = sq;

	rc = make_parent_dirs(sq->path, err, errlen);
	if (rc == STORE_OK)
		rc = take_owner_lock(sq, err, errlen);
	if (rc == STORE_OK)
		rc = open_conn(sq->path, &sq->wdb, 16384, err, errlen);
	if (rc == STORE_OK)
		rc = check_wal(sq->wdb, err, errlen);
	if (rc == STORE_OK)
		rc = migrate(sq->wdb, err, errlen);
	/* The reader opens after the migrations so it sees the final schema. */
	if (rc == STORE_OK)
		rc = open_conn(sq->path, &sq->rdb, 8192, err, errlen);
	if (rc == STORE_OK && sqlite3_exec(sq->rdb, "PRAGMA query_only = ON", NULL, NULL,
					   NULL) != SQLITE_OK) {
		set_db_err(err, errlen, sq->rdb, "query_only");
		rc = STORE_ERROR;
	}
	if (rc == STORE_OK)
		rc = prepare_all(sq->wdb, wsql, sq->w, W_COUNT, err, errlen);
	if (rc == STORE_OK)
		rc = prepare_rows(sq, err, errlen);
	if (rc == STORE_OK)
		rc = prepare_all(sq->rdb, rsql, sq->r, R_COUNT, err, errlen);
	if (rc != STORE_OK)
		sq_close(st);
	return rc;
}

static int sq_ping(store *st)
{
	struct sq *sq = sq_of(st);
	int rc;

	pthread_mutex_lock(&sq->rmu);
	rc = step_row(sq->r[R_PING]);
	stmt_end(sq->r[R_PING]);
	pthread_mutex_unlock(&sq->rmu);
	if (rc == SQLITE_ROW)
		return STORE_OK;
	return rc == SQLITE_DONE ? STORE_ERROR : store_code(rc);
}

/* ---- ingest and relay -------------------------------------------------------------- */

/* Inserts one event and its deliveries (created and due at due_at) inside the open
 * transaction, or marks it duplicate when its (source, source_event_id) is already
 * stored — including earlier in the same transaction. */
static int insert_event(struct sq *sq, struct store_event_in *ev, int64_t due_at)
{
	const char *source = ev->source ? ev->source : "";
	sqlite3_stmt *s;
	int rc;

	ev->duplicate = 0;
	if (ev->dedupe_by_id) {
		/* A spool replay: this very event may have been committed already. */
		s = sq->w[W_EVENT_FIND_ID];
		sqlite3_bind_text(s, 1, ev->id, -1, SQLITE_STATIC);
		rc = step_row(s);
		if (rc == SQLITE_ROW) {
			ev->duplicate = 1;
			stmt_end(s);
			return SQLITE_OK;
		}
		if (rc != SQLITE_DONE)
			return rc;
	}
	if (ev->source_event_id) {
		s = sq->w[W_EVENT_FIND];
		sqlite3_bind_text(s, 1, source, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, ev->source_event_id, -1, SQLITE_STATIC);
		rc = step_row(s);
		if (rc == SQLITE_ROW) {
			col_id(s, 0, ev->id);
			ev->duplicate = 1;
			stmt_end(s);
			return SQLITE_OK;
		}
		if (rc != SQLITE_DONE)
			return rc;
	}

	s = sq->w[W_EVENT_INSERT];
	sqlite3_bind_text(s, 1, ev->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, ev->event_type, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, source, -1, SQLITE_STATIC);
	bind_text(s, 4, ev->source_event_id);
	bind_text(s, 5, ev->partition_key);
	sqlite3_bind_text(s, 6, ev->content_type, -1, SQLITE_STATIC);
	bind_payload(s, 7, ev->payload, ev->payload_len);
	sqlite3_bind_int64(s, 8, ev->created_at);
	bind_text(s, 9, ev->traceparent);
	rc = step_done(s);
	if (rc != SQLITE_OK)
		return rc;

	int initial = store_event_initial(ev);
	s = sq->w[initial ? W_DELIVERY_INSERT_STATE : W_DELIVERY_INSERT];
	for (size_t i = 0; i < ev->n_subscriptions; i++) {
		char id[UUID_STR_LEN];

		uuid_v7(id);
		sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, ev->id, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 3, ev->subscription_ids[i], -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 4, ev->event_type, -1, SQLITE_STATIC);
		if (initial) {
			int64_t next = store_event_first_due(ev, due_at);
			sqlite3_bind_text(s, 5, delivery_status_name(ev->initial_status), -1,
					  SQLITE_STATIC);
			if (next)
				sqlite3_bind_int64(s, 6, next);
			else
				sqlite3_bind_null(s, 6);
			if (ev->initial_code)
				sqlite3_bind_int(s, 7, ev->initial_code);
			else
				sqlite3_bind_null(s, 7);
			bind_text(s, 8, ev->initial_message);
			bind_text(s, 9, ev->initial_cause);
			sqlite3_bind_int64(s, 10, due_at);
		} else {
			sqlite3_bind_int64(s, 5, due_at);
		}
		rc = step_done(s);
		if (rc != SQLITE_OK)
			return rc;
	}
	return SQLITE_OK;
}

/* New deliveries waiting to be inserted INGEST_ROWS at a time. */
struct delivery_group {
	char ids[INGEST_ROWS][UUID_STR_LEN]; /* bound, so they live until the group runs */
	const struct store_event_in *ev[INGEST_ROWS];
	size_t sub[INGEST_ROWS];
	int rows;
};

/* Runs the delivery group: a full one as one INSERT, a partial one row by row. */
static int delivery_group_run(struct sq *sq, struct delivery_group *g)
{
	int rc = SQLITE_OK;

	if (g->rows == INGEST_ROWS) {
		sqlite3_stmt *s = sq->delivery_rows;

		for (int r = 0; r < INGEST_ROWS; r++) {
			int base = 1 + r * DELIVERY_COLS;

			sqlite3_bind_text(s, base, g->ids[r], -1, SQLITE_STATIC);
			sqlite3_bind_text(s, base + 1, g->ev[r]->id, -1, SQLITE_STATIC);
			sqlite3_bind_text(s, base + 2, g->ev[r]->subscription_ids[g->sub[r]], -1,
					  SQLITE_STATIC);
			sqlite3_bind_text(s, base + 3, g->ev[r]->event_type, -1, SQLITE_STATIC);
			sqlite3_bind_int64(s, base + 4, g->ev[r]->created_at);
		}
		rc = step_done(s);
	} else {
		sqlite3_stmt *s = sq->w[W_DELIVERY_INSERT];

		for (int r = 0; rc == SQLITE_OK && r < g->rows; r++) {
			sqlite3_bind_text(s, 1, g->ids[r], -1, SQLITE_STATIC);
			sqlite3_bind_text(s, 2, g->ev[r]->id, -1, SQLITE_STATIC);
			sqlite3_bind_text(s, 3, g->ev[r]->subscription_ids[g->sub[r]], -1,
					  SQLITE_STATIC);
			sqlite3_bind_text(s, 4, g->ev[r]->event_type, -1, SQLITE_STATIC);
			sqlite3_bind_int64(s, 5, g->ev[r]->created_at);
			rc = step_done(s);
		}
	}
	g->rows = 0;
	return rc;
}

/* Inserts INGEST_ROWS events that need no key check with one INSERT, and queues their
 * deliveries (created and due at the event's created_at, as insert_event does). */
static int event_group_run(struct sq *sq, struct store_event_in **evs, struct delivery_group *g)
{
	sqlite3_stmt *s = sq->event_rows;
	int rc;

	for (int r = 0; r < INGEST_ROWS; r++) {
		struct store_event_in *ev = evs[r];
		int base = 1 + r * EVENT_COLS;

		ev->duplicate = 0;
		sqlite3_bind_text(s, base, ev->id, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, base + 1, ev->event_type, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, base + 2, ev->source ? ev->source : "", -1, SQLITE_STATIC);
		sqlite3_bind_null(s, base + 3);
		bind_text(s, base + 4, ev->partition_key);
		sqlite3_bind_text(s, base + 5, ev->content_type, -1, SQLITE_STATIC);
		bind_payload(s, base + 6, ev->payload, ev->payload_len);
		sqlite3_bind_int64(s, base + 7, ev->created_at);
		bind_text(s, base + 8, ev->traceparent);
	}
	if ((rc = step_done(s)) != SQLITE_OK)
		return rc;
	for (int r = 0; r < INGEST_ROWS; r++) {
		for (size_t k = 0; k < evs[r]->n_subscriptions; k++) {
			uuid_v7(g->ids[g->rows]);
			g->ev[g->rows] = evs[r];
			g->sub[g->rows] = k;
			if (++g->rows == INGEST_ROWS && (rc = delivery_group_run(sq, g)) != SQLITE_OK)
				return rc;
		}
	}
	return SQLITE_OK;
}

/* Events with an idempotency key (or replayed from the spool) are checked and inserted
 * one by one, in order, so a key repeated within the batch is found; the others go in
 * groups. A partial group at the end goes one by one too. */
static int sq_ingest(store *st, struct store_event_in *events, size_t n)
{
	struct sq *sq = sq_of(st);
	int64_t now = clock_now_ms();
	struct store_event_in *group[INGEST_ROWS];
	struct delivery_group *g = malloc(sizeof(*g));
	int rows = 0;
	int rc;

	if (!g)
		return STORE_ERROR;
	g->rows = 0;
	rc = wlock(sq);
	if (rc == SQLITE_OK)
		rc = tx_begin(sq);
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
		struct store_event_in *ev = &events[i];

		if (!ev->created_at)
			ev->created_at = now;
		if (ev->source_event_id || ev->dedupe_by_id || store_event_initial(ev)) {
			rc = insert_event(sq, ev, ev->created_at);
			continue;
		}
		group[rows++] = ev;
		if (rows == INGEST_ROWS) {
			rows = 0;
			rc = event_group_run(sq, group, g);
		}
	}
	for (int r = 0; rc == SQLITE_OK && r < rows; r++)
		rc = insert_event(sq, group[r], group[r]->created_at);
	if (rc == SQLITE_OK)
		rc = delivery_group_run(sq, g);
	rc = tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	free(g);
	return rc;
}

static int sq_relay_outbox(store *st, size_t limit, store_fanout_cb fanout, void *ctx,
			   size_t *relayed)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->w[W_OUTBOX_SELECT];
	int64_t now = clock_now_ms();
	int64_t last_id = 0;
	size_t count = 0;
	int rc;

	rc = wlock(sq);
	if (rc == SQLITE_OK)
		rc = tx_begin(sq);
	if (rc != SQLITE_OK)
		goto out;
	sqlite3_bind_int64(s, 1, (int64_t)limit);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_event_in ev = {0};
		const char (*ids)[UUID_STR_LEN] = NULL;
		size_t n_ids = 0;

		/* Every column is read once: a later conversion would invalidate the
		 * pointers. The payload may have been inserted as TEXT or BLOB. */
		last_id = sqlite3_column_int64(s, 0);
		uuid_v7(ev.id);
		ev.event_type = (const char *)sqlite3_column_text(s, 1);
		ev.source = (const char *)sqlite3_column_text(s, 2);
		ev.source_event_id = (const char *)sqlite3_column_text(s, 3);
		ev.partition_key = (const char *)sqlite3_column_text(s, 4);
		ev.payload = sqlite3_column_blob(s, 5);
		ev.payload_len = (size_t)sqlite3_column_bytes(s, 5);
		ev.content_type = (const char *)sqlite3_column_text(s, 6);
		ev.created_at = sqlite3_column_int64(s, 7);
		if (!ev.event_type || !ev.content_type) {
			rc = log_nomem();
			goto out;
		}
		if (ev.created_at <= 0)
			ev.created_at = now;
		fanout(ctx, ev.event_type, &ids, &n_ids);
		ev.subscription_ids = ids;
		ev.n_subscriptions = ids ? n_ids : 0;
		rc = insert_event(sq, &ev, now);
		if (rc != SQLITE_OK)
			goto out;
		if (ev.duplicate)
			log_debug("store: outbox row %lld duplicates event %s, dropped",
				  (long long)last_id, ev.id);
		count++;
	}
	if (rc != SQLITE_DONE) {
		log_stmt_error(s, rc);
		goto out;
	}
	stmt_end(s);
	rc = SQLITE_OK;
	if (count) {
		/* The writer lock was held since the SELECT, and AUTOINCREMENT ids grow in
		 * commit order, so every id up to last_id was just relayed. */
		sqlite3_bind_int64(sq->w[W_OUTBOX_DELETE], 1, last_id);
		rc = step_done(sq->w[W_OUTBOX_DELETE]);
	}
out:
	stmt_end(s);
	rc = tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	if (rc == STORE_OK)
		*relayed = count;
	return rc;
}

/* ---- claim and results ------------------------------------------------------------- */

struct claim_row {
	int64_t due;
	struct store_claim c;
};

static int claim_row_cmp(const void *a, const void *b)
{
	const struct claim_row *x = a, *y = b;

	if (x->due != y->due)
		return x->due < y->due ? -1 : 1;
	return strcmp(x->c.delivery_id, y->c.delivery_id);
}

/* Fills the event part of a claim: one allocation holding event_type, content_type
 * and the payload (NUL-terminated for convenience; payload_len excludes it). */
static int load_claim_event(struct sq *sq, struct store_claim *c)
{
	sqlite3_stmt *s = sq->w[W_CLAIM_EVENT];
	const char *type, *ctype, *source, *seid, *pkey;
	size_t type_len, ctype_len, source_len, seid_len, pkey_len;
	const void *payload;
	char *block, *at;
	int rc;

	sqlite3_bind_text(s, 1, c->event_id, -1, SQLITE_STATIC);
	rc = step_row(s);
	if (rc == SQLITE_DONE) {
		log_error("store: delivery %s refers to missing event %s", c->delivery_id,
			  c->event_id);
		return SQLITE_CORRUPT;
	}
	if (rc != SQLITE_ROW)
		return rc;
	type = (const char *)sqlite3_column_text(s, 0);
	type_len = (size_t)sqlite3_column_bytes(s, 0);
	ctype = (const char *)sqlite3_column_text(s, 1);
	ctype_len = (size_t)sqlite3_column_bytes(s, 1);
	payload = sqlite3_column_blob(s, 2);
	c->payload_len = (size_t)sqlite3_column_bytes(s, 2);
	c->event_created_at = sqlite3_column_int64(s, 3);
	c->traceparent[0] = '\0';
	if (sqlite3_column_type(s, 4) == SQLITE_TEXT)
		snprintf(c->traceparent, sizeof(c->traceparent), "%s",
			 (const char *)sqlite3_column_text(s, 4));
	source = (const char *)sqlite3_column_text(s, 5);
	source_len = (size_t)sqlite3_column_bytes(s, 5);
	seid = (const char *)sqlite3_column_text(s, 6);
	seid_len = seid ? (size_t)sqlite3_column_bytes(s, 6) : 0;
	pkey = (const char *)sqlite3_column_text(s, 7);
	pkey_len = pkey ? (size_t)sqlite3_column_bytes(s, 7) : 0;
	block = malloc(type_len + 1 + ctype_len + 1 + source_len + 1 + seid_len + 1 + pkey_len + 1 +
		       c->payload_len + 1);
	if (!type || !ctype || !block) {
		free(block);
		stmt_end(s);
		return log_nomem();
	}
	at = block;
	c->event_type = at;
	memcpy(at, type, type_len + 1);
	at += type_len + 1;
	c->content_type = at;
	memcpy(at, ctype, ctype_len + 1);
	at += ctype_len + 1;
	c->source = at;
	if (source_len)
		memcpy(at, source, source_len);
	at[source_len] = '\0';
	at += source_len + 1;
	c->source_event_id = seid ? at : NULL;
	if (seid)
		memcpy(at, seid, seid_len + 1);
	at += seid_len + 1;
	c->partition_key = pkey ? at : NULL;
	if (pkey)
		memcpy(at, pkey, pkey_len + 1);
	at += pkey_len + 1;
	c->payload = at;
	if (c->payload_len)
		memcpy(c->payload, payload, c->payload_len);
	((char *)c->payload)[c->payload_len] = '\0';
	stmt_end(s);
	return SQLITE_OK;
}

static int sq_claim_due(store *st, int64_t now_ms, int64_t lease_ms, size_t limit,
			struct store_claim **items, size_t *n)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->w[W_CLAIM];
	struct claim_row *rows = NULL;
	struct store_claim *out = NULL;
	size_t count = 0, cap = 0;
	int rc;

	wlock_relaxed(sq);
	rc = tx_begin(sq);
	if (rc != SQLITE_OK)
		goto out;
	sqlite3_bind_text(s, 1, st->owner, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, now_ms + lease_ms);
	sqlite3_bind_int64(s, 3, now_ms);
	sqlite3_bind_int64(s, 4, (int64_t)limit);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_claim *c;
		enum delivery_status status = DELIVERY_NEW;
		const char *name = (const char *)sqlite3_column_text(s, 3);
		struct claim_row *more = grow(rows, &cap, count, sizeof(*rows));

		if (!more) {
			rc = SQLITE_NOMEM;
			goto out;
		}
		rows = more;
		c = &rows[count].c;
		memset(c, 0, sizeof(*c));
		col_id(s, 0, c->delivery_id);
		col_id(s, 1, c->event_id);
		col_id(s, 2, c->subscription_id);
		if (name)
			delivery_status_parse(name, &status);
		c->status = status;
		c->replay = sqlite3_column_int(s, 4);
		c->attempt_count = sqlite3_column_int(s, 5);
		c->retry_count = sqlite3_column_int(s, 6);
		rows[count].due = sqlite3_column_int64(s, 7);
		c->delay_actions = sqlite3_column_int(s, 8);
		count++;
	}
	if (rc != SQLITE_DONE) {
		log_stmt_error(s, rc);
		goto out;
	}
	stmt_end(s);
	rc = SQLITE_OK;
	/* RETURNING yields rows in no particular order. */
	if (!count)
		goto out;
	qsort(rows, count, sizeof(*rows), claim_row_cmp);
	out = calloc(count, sizeof(*out));
	if (!out) {
		rc = log_nomem();
		goto out;
	}
	for (size_t i = 0; i < count; i++) {
		out[i] = rows[i].c;
		rc = load_claim_event(sq, &out[i]);
		if (rc != SQLITE_OK)
			goto out;
	}
out:
	stmt_end(s);
	free(rows);
	rc = tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	if (rc != STORE_OK) {
		store_claims_free(out, count);
		return rc;
	}
	*items = out;
	*n = count;
	return STORE_OK;
}

static int sq_next_due(store *st, int64_t *at_ms)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->r[R_NEXT_DUE];
	int rc;

	pthread_mutex_lock(&sq->rmu);
	rc = step_row(s);
	if (rc == SQLITE_ROW) {
		*at_ms = sqlite3_column_int64(s, 0);
		stmt_end(s);
		rc = SQLITE_OK;
	}
	pthread_mutex_unlock(&sq->rmu);
	return store_code(rc);
}

/* Inserts one attempt row. A numbering clash must not throw away the whole batch of
 * results: the first row is kept, with a warning. */
static int record_attempt(struct sq *sq, const char *delivery_id, const struct store_attempt *a)
{
	sqlite3_stmt *s = sq->w[W_ATTEMPT_INSERT];
	int rc;

	sqlite3_bind_text(s, 1, delivery_id, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 2, a->n);
	sqlite3_bind_text(s, 3, attempt_kind_name(a->kind), -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 4, a->started_at);
	sqlite3_bind_int64(s, 5, a->duration_ms);
	sqlite3_bind_int(s, 6, a->code);
	bind_error_text(s, 7, a->message);
	bind_error_text(s, 8, a->cause);
	rc = step_done(s);
	if (rc == SQLITE_OK && sqlite3_changes(sq->wdb) == 0)
		log_warn("store: attempt %d of delivery %s already recorded, kept the first", a->n,
			 delivery_id);
	return rc;
}

static int record_one(struct sq *sq, const char *owner, const struct store_result *r,
		      int64_t now)
{
	sqlite3_stmt *s = sq->w[W_RESULT];
	int rc;

	sqlite3_bind_text(s, 1, r->delivery_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, delivery_status_name(r->status), -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 3, r->replay ? 1 : 0);
	sqlite3_bind_int(s, 4, r->attempt_count);
	sqlite3_bind_int(s, 5, r->retry_count);
	bind_time(s, 6, r->next_attempt_at);
	bind_time(s, 7, r->processed_at);
	/* No error code means no error: message and cause are not kept either; -1 keeps
	 * whatever error the delivery shows already. */
	sqlite3_bind_int(s, 13, r->last_code == -1);
	if (r->last_code > 0) {
		sqlite3_bind_int(s, 8, r->last_code);
		bind_error_text(s, 9, r->last_message);
		bind_error_text(s, 10, r->last_cause);
	} else {
		sqlite3_bind_null(s, 8);
		sqlite3_bind_null(s, 9);
		sqlite3_bind_null(s, 10);
	}
	sqlite3_bind_int64(s, 11, now);
	sqlite3_bind_text(s, 12, owner, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 14, r->delay_actions);
	rc = step_done(s);
	if (rc != SQLITE_OK)
		return rc;
	if (sqlite3_changes(sq->wdb) == 0) {
		log_warn("store: result for delivery %s ignored: its lease was lost",
			 r->delivery_id);
		return SQLITE_OK;
	}

	for (size_t i = 0; i < r->n_attempts; i++)
		if ((rc = record_attempt(sq, r->delivery_id, &r->attempts[i])) != SQLITE_OK)
			return rc;
	return SQLITE_OK;
}

/* Results are written one statement each: grouping them 32 to an UPDATE ... FROM
 * (VALUES ...) was measured (bench: claim and record 20,000 deliveries under callgrind)
 * at 82,200 against 81,100 instructions per delivery, the b-tree work of the update and
 * the attempt row being nearly all of it; not worth the code. */
static int sq_record_results(store *st, const struct store_result *results, size_t n)
{
	struct sq *sq = sq_of(st);
	int64_t now = clock_now_ms();
	int rc;

	wlock_relaxed(sq);
	rc = tx_begin(sq);
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++)
		rc = record_one(sq, st->owner, &results[i], now);
	rc = tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	return rc;
}

/* Clears leases with the given statement; now_ms is bound when the statement takes it. */
static int clear_leases(struct sq *sq, sqlite3_stmt *s, int64_t now_ms, size_t *n)
{
	int rc;

	wlock(sq);
	if (sqlite3_bind_parameter_count(s) > 0)
		sqlite3_bind_int64(s, 1, now_ms);
	rc = step_done(s);
	if (rc == SQLITE_OK)
		*n = (size_t)sqlite3_changes(sq->wdb);
	pthread_mutex_unlock(&sq->wmu);
	return store_code(rc);
}

static int sq_reap_leases(store *st, int64_t now_ms, size_t *n)
{
	struct sq *sq = sq_of(st);

	return clear_leases(sq, sq->w[W_REAP], now_ms, n);
}

static int sq_release_all(store *st, size_t *n)
{
	struct sq *sq = sq_of(st);

	/* The owner lock makes this process the only one with leases to lose. */
	return clear_leases(sq, sq->w[W_RELEASE_ALL], 0, n);
}

/* ---- reading ------------------------------------------------------------------------ */

static int sq_event_get(store *st, const char *id, struct store_event *ev)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->r[R_EVENT_GET];
	const void *payload;
	int rc;

	pthread_mutex_lock(&sq->rmu);
	sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
	rc = step_row(s);
	if (rc != SQLITE_ROW) {
		rc = rc == SQLITE_DONE ? STORE_NOT_FOUND : store_code(rc);
		goto out;
	}
	col_id(s, 0, ev->id);
	ev->created_at = sqlite3_column_int64(s, 7);
	payload = sqlite3_column_blob(s, 6);
	ev->payload_len = (size_t)sqlite3_column_bytes(s, 6);
	ev->payload = malloc(ev->payload_len + 1);
	if (!ev->payload || col_dup(s, 1, &ev->event_type) || col_dup(s, 2, &ev->source) ||
	    col_dup(s, 3, &ev->source_event_id) || col_dup(s, 4, &ev->partition_key) ||
	    col_dup(s, 5, &ev->content_type)) {
		if (!ev->payload)
			log_nomem();
		store_event_free(ev);
		rc = STORE_ERROR;
		goto out;
	}
	if (ev->payload_len)
		memcpy(ev->payload, payload, ev->payload_len);
	((char *)ev->payload)[ev->payload_len] = '\0';
	rc = STORE_OK;
out:
	stmt_end(s);
	pthread_mutex_unlock(&sq->rmu);
	return rc;
}

static int sq_event_deliveries(store *st, const char *event_id,
			       struct store_delivery **items, size_t *n)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->r[R_EVENT_DELIVERIES];
	size_t cap = 0;
	int rc;

	pthread_mutex_lock(&sq->rmu);
	sqlite3_bind_text(s, 1, event_id, -1, SQLITE_STATIC);
	rc = read_deliveries(s, items, n, &cap);
	pthread_mutex_unlock(&sq->rmu);
	if (rc != SQLITE_OK) {
		store_deliveries_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return store_code(rc);
}

static int sq_delivery_get(store *st, const char *id, struct store_delivery *d)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->r[R_DELIVERY_GET];
	int rc;

	pthread_mutex_lock(&sq->rmu);
	sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
	rc = step_row(s);
	if (rc == SQLITE_ROW)
		rc = read_delivery(s, d) == SQLITE_OK ? STORE_OK : STORE_ERROR;
	else
		rc = rc == SQLITE_DONE ? STORE_NOT_FOUND : store_code(rc);
	stmt_end(s);
	pthread_mutex_unlock(&sq->rmu);
	return rc;
}

static int sq_delivery_attempts(store *st, const char *id, struct store_attempt_row **items,
				size_t *n)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->r[R_ATTEMPTS];
	struct store_attempt_row *rows = NULL;
	size_t count = 0, cap = 0;
	int rc;

	pthread_mutex_lock(&sq->rmu);
	sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_attempt_row *a, *more = grow(rows, &cap, count, sizeof(*rows));

		if (!more) {
			rc = SQLITE_NOMEM;
			goto out;
		}
		rows = more;
		a = &rows[count];
		memset(a, 0, sizeof(*a));
		a->n = sqlite3_column_int(s, 0);
		a->kind = attempt_kind_parse((const char *)sqlite3_column_text(s, 1));
		a->started_at = sqlite3_column_int64(s, 2);
		a->duration_ms = sqlite3_column_int64(s, 3);
		a->code = sqlite3_column_int(s, 4);
		count++;
		rc = col_dup(s, 5, &a->message);
		if (rc == SQLITE_OK)
			rc = col_dup(s, 6, &a->cause);
		if (rc != SQLITE_OK)
			goto out;
	}
	if (rc == SQLITE_DONE)
		rc = SQLITE_OK;
	else
		log_stmt_error(s, rc);
out:
	stmt_end(s);
	pthread_mutex_unlock(&sq->rmu);
	if (rc != SQLITE_OK) {
		store_attempts_free(rows, count);
		return store_code(rc);
	}
	*items = rows;
	*n = count;
	return STORE_OK;
}

/* Appends a constant SQL fragment; the buffer is sized for every fragment at once. */
static void sql_add(char *sql, size_t size, const char *fragment)
{
	size_t len = strlen(sql);

	snprintf(sql + len, size - len, "%s", fragment);
}

/* The WHERE conditions of a delivery filter, appended to sql (constant fragments only);
 * filter_bind binds their values in the same order. */
static void filter_sql(const struct delivery_filter *f, char *sql, size_t size)
{
	if (f->has_status)
		sql_add(sql, size, " AND status = ?");
	if (f->dead_only)
		sql_add(sql, size, " AND status = 'FAILED' AND next_attempt_at IS NULL");
	if (f->subscription_id)
		sql_add(sql, size, " AND subscription_id = ?");
	if (f->event_type)
		sql_add(sql, size, f->event_type_glob ? " AND event_type GLOB ?" : " AND event_type = ?");
	/* instr(), not LIKE: '%' and '_' in the search text match themselves. */
	if (f->q && *f->q)
		sql_add(sql, size, " AND (instr(last_message, ?) > 0 OR instr(last_cause, ?) > 0)");
	if (f->has_code)
		sql_add(sql, size, " AND last_code = ?");
	if (f->source)
		sql_add(sql, size, " AND EXISTS (SELECT 1 FROM events e WHERE e.id = deliveries.event_id"
				   " AND e.source = ?)");
	if (f->event_id)
		sql_add(sql, size, " AND event_id = ?");
	if (f->from_ms)
		sql_add(sql, size, " AND created_at >= ?");
	if (f->to_ms)
		sql_add(sql, size, " AND created_at < ?");
}

static void filter_bind(sqlite3_stmt *s, const struct delivery_filter *f, int *b)
{
	if (f->has_status)
		sqlite3_bind_text(s, (*b)++, delivery_status_name(f->status), -1, SQLITE_STATIC);
	if (f->subscription_id)
		sqlite3_bind_text(s, (*b)++, f->subscription_id, -1, SQLITE_STATIC);
	if (f->event_type)
		sqlite3_bind_text(s, (*b)++, f->event_type, -1, SQLITE_STATIC);
	if (f->q && *f->q) {
		sqlite3_bind_text(s, (*b)++, f->q, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, (*b)++, f->q, -1, SQLITE_STATIC);
	}
	if (f->has_code)
		sqlite3_bind_int(s, (*b)++, f->code);
	if (f->source)
		sqlite3_bind_text(s, (*b)++, f->source, -1, SQLITE_STATIC);
	if (f->event_id)
		sqlite3_bind_text(s, (*b)++, f->event_id, -1, SQLITE_STATIC);
	if (f->from_ms)
		sqlite3_bind_int64(s, (*b)++, f->from_ms);
	if (f->to_ms)
		sqlite3_bind_int64(s, (*b)++, f->to_ms);
}

static int sq_deliveries_list(store *st, const struct delivery_filter *f,
			      struct store_delivery **items, size_t *n, char **next_cursor)
{
	struct sq *sq = sq_of(st);
	const char *col = store_sort_column(f->sort);
	const char *dir = f->descending ? "DESC" : "ASC";
	char cursor_id[UUID_STR_LEN];
	int64_t cursor_value = 0;
	sqlite3_stmt *s = NULL;
	size_t count = 0, cap = 0;
	char sql[1536], frag[192];
	int rc, b = 1;

	if (f->cursor && store_cursor_parse(f, &cursor_value, cursor_id) != 0)
		return STORE_INVALID;

	/* Only constant fragments and column names from a fixed table go into the SQL;
	 * every value is bound. */
	snprintf(sql, sizeof(sql), "SELECT " DELIVERY_COLUMNS " FROM deliveries WHERE 1");
	filter_sql(f, sql, sizeof(sql));
	if (f->cursor) {
		snprintf(frag, sizeof(frag), " AND (%s, id) %s (?, ?)", col,
			 f->descending ? "<" : ">");
		sql_add(sql, sizeof(sql), frag);
	}
	snprintf(frag, sizeof(frag), " ORDER BY %s %s, id %s LIMIT ?", col, dir, dir);
	sql_add(sql, sizeof(sql), frag);

	pthread_mutex_lock(&sq->rmu);
	rc = sqlite3_prepare_v2(sq->rdb, sql, -1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s (in: %.60s)", sqlite3_errmsg(sq->rdb), sql);
		goto out;
	}
	filter_bind(s, f, &b);
	if (f->cursor) {
		sqlite3_bind_int64(s, b++, cursor_value);
		sqlite3_bind_text(s, b++, cursor_id, -1, SQLITE_STATIC);
	}
	/* One row more than asked tells whether there is a next page. */
	sqlite3_bind_int64(s, b++, (int64_t)f->limit + 1);
	rc = read_deliveries(s, items, &count, &cap);
out:
	sqlite3_finalize(s);
	pthread_mutex_unlock(&sq->rmu);
	if (rc == SQLITE_OK && count > f->limit) {
		*next_cursor = store_cursor_after(f, &(*items)[f->limit - 1]);
		if (!*next_cursor)
			rc = log_nomem();
		store_delivery_free(&(*items)[f->limit]);
		count = f->limit;
	}
	if (rc != SQLITE_OK) {
		store_deliveries_free(*items, count);
		*items = NULL;
		return store_code(rc);
	}
	*n = count;
	return STORE_OK;
}

/* ---- operator actions --------------------------------------------------------------- */

static int sq_replay(store *st, const char (*ids)[UUID_STR_LEN], size_t n, int force,
		     enum store_replay_outcome *outcomes, size_t *replayed)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *check = sq->w[W_DELIVERY_STATE];
	int64_t now = clock_now_ms();
	size_t done = 0;
	int rc;

	wlock(sq);
	rc = tx_begin(sq);
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
		enum store_replay_outcome outcome = REPLAY_NOT_FAILED;
		enum delivery_status status = DELIVERY_NEW;
		const char *name;

		sqlite3_bind_text(check, 1, ids[i], -1, SQLITE_STATIC);
		rc = step_row(check);
		if (rc == SQLITE_DONE) {
			outcome = REPLAY_NOT_FOUND;
			rc = SQLITE_OK;
		} else if (rc == SQLITE_ROW) {
			name = (const char *)sqlite3_column_text(check, 0);
			if (name)
				delivery_status_parse(name, &status);
			if (sqlite3_column_type(check, 2) != SQLITE_NULL &&
			    sqlite3_column_int64(check, 2) >= now)
				outcome = REPLAY_IN_FLIGHT;
			else if (status == DELIVERY_FAILED ||
				 (status == DELIVERY_PROCESSED && force))
				outcome = REPLAY_DONE;
			stmt_end(check);
			rc = SQLITE_OK;
		}
		if (rc == SQLITE_OK && outcome == REPLAY_DONE) {
			sqlite3_bind_text(sq->w[W_REPLAY_SET], 1, ids[i], -1, SQLITE_STATIC);
			sqlite3_bind_int64(sq->w[W_REPLAY_SET], 2, now);
			rc = step_done(sq->w[W_REPLAY_SET]);
			done++;
		}
		if (outcomes)
			outcomes[i] = outcome;
	}
	rc = tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	if (rc == STORE_OK)
		*replayed = done;
	return rc;
}

static int delete_if_orphan(struct sq *sq, const char *event_id)
{
	sqlite3_bind_text(sq->w[W_EVENT_DELETE_ORPHAN], 1, event_id, -1, SQLITE_STATIC);
	return step_done(sq->w[W_EVENT_DELETE_ORPHAN]);
}

static int sq_dlq_purge(store *st, const char *delivery_id)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *check = sq->w[W_DELIVERY_STATE];
	char event_id[UUID_STR_LEN];
	int result = STORE_OK;
	int rc;

	wlock(sq);
	rc = tx_begin(sq);
	if (rc != SQLITE_OK)
		goto out;
	sqlite3_bind_text(check, 1, delivery_id, -1, SQLITE_STATIC);
	rc = step_row(check);
	if (rc == SQLITE_DONE) {
		result = STORE_NOT_FOUND;
		rc = SQLITE_OK;
		goto out;
	}
	if (rc != SQLITE_ROW)
		goto out;
	rc = SQLITE_OK;
	/* Dead means FAILED with no attempt pending and no lease. */
	if (strcmp((const char *)sqlite3_column_text(check, 0), "FAILED") != 0 ||
	    sqlite3_column_type(check, 1) != SQLITE_NULL ||
	    sqlite3_column_type(check, 2) != SQLITE_NULL) {
		result = STORE_CONFLICT;
		stmt_end(check);
		goto out;
	}
	col_id(check, 3, event_id);
	stmt_end(check);
	sqlite3_bind_text(sq->w[W_DELIVERY_DELETE], 1, delivery_id, -1, SQLITE_STATIC);
	rc = step_done(sq->w[W_DELIVERY_DELETE]);
	if (rc == SQLITE_OK)
		rc = delete_if_orphan(sq, event_id);
out:
	rc = tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	return rc != STORE_OK ? rc : result;
}

/* Deletes up to CLEANUP_CHUNK PROCESSED deliveries (attempts cascade) and the events
 * they leave without deliveries, in one transaction. *deleted = deliveries removed. */
static int cleanup_chunk(struct sq *sq, size_t *deleted)
{
	sqlite3_stmt *s = sq->w[W_CLEANUP_CHUNK];
	char (*events)[UUID_STR_LEN] = NULL;
	size_t count = 0, cap = 0;
	int rc;

	wlock(sq);
	rc = tx_begin(sq);
	if (rc != SQLITE_OK)
		goto out;
	sqlite3_bind_int(s, 1, CLEANUP_CHUNK);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		char (*more)[UUID_STR_LEN] = grow(events, &cap, count, sizeof(*events));

		if (!more) {
			rc = SQLITE_NOMEM;
			goto out;
		}
		events = more;
		col_id(s, 0, events[count++]);
	}
	if (rc != SQLITE_DONE) {
		log_stmt_error(s, rc);
		goto out;
	}
	stmt_end(s);
	rc = SQLITE_OK;
	for (size_t i = 0; rc == SQLITE_OK && i < count; i++)
		rc = delete_if_orphan(sq, events[i]);
out:
	stmt_end(s);
	rc = tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	free(events);
	if (rc == STORE_OK)
		*deleted = count;
	return rc;
}

/* Events that never had a delivery (no subscription wanted them) are found by a scan on
 * the reader, a bounded slice at a time, so the writer is only taken to delete. */
static int sweep_orphan_events(struct sq *sq)
{
	sqlite3_stmt *s = sq->r[R_EVENT_SCAN];
	char (*events)[UUID_STR_LEN] = NULL;
	size_t count, cap = 0, scanned;
	int64_t after = 0;
	int rc = SQLITE_OK, err = STORE_OK;

	do {
		count = 0;
		scanned = 0;
		pthread_mutex_lock(&sq->rmu);
		sqlite3_bind_int64(s, 1, after);
		sqlite3_bind_int(s, 2, CLEANUP_CHUNK);
		while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
			char (*more)[UUID_STR_LEN];

			scanned++;
			after = sqlite3_column_int64(s, 0);
			if (!sqlite3_column_int(s, 2))
				continue;
			more = grow(events, &cap, count, sizeof(*events));
			if (!more) {
				rc = SQLITE_NOMEM;
				break;
			}
			events = more;
			col_id(s, 1, events[count++]);
		}
		if (rc == SQLITE_DONE)
			rc = SQLITE_OK;
		else if (rc != SQLITE_NOMEM)
			log_stmt_error(s, rc);
		stmt_end(s);
		pthread_mutex_unlock(&sq->rmu);
		if (rc != SQLITE_OK)
			break;
		if (!count)
			continue;

		wlock(sq);
		rc = tx_begin(sq);
		for (size_t i = 0; rc == SQLITE_OK && i < count; i++)
			rc = delete_if_orphan(sq, events[i]);
		err = tx_end(sq, rc);
		pthread_mutex_unlock(&sq->wmu);
		rc = SQLITE_OK;
	} while (err == STORE_OK && scanned == CLEANUP_CHUNK);
	free(events);
	return rc != SQLITE_OK ? store_code(rc) : err;
}

static int sq_cleanup(store *st, size_t *deleted)
{
	struct sq *sq = sq_of(st);
	size_t chunk;
	int rc;

	do {
		chunk = 0;
		rc = cleanup_chunk(sq, &chunk);
		*deleted += chunk;
	} while (rc == STORE_OK && chunk == CLEANUP_CHUNK);
	if (rc == STORE_OK)
		rc = sweep_orphan_events(sq);
	return rc;
}

/* ---- subscriptions ------------------------------------------------------------------ */

static int sub_write(struct sq *sq, sqlite3_stmt *s)
{
	int rc;

	rc = sqlite3_step(s);
	if (rc == SQLITE_DONE) {
		rc = sqlite3_changes(sq->wdb) ? STORE_OK : STORE_NOT_FOUND;
	} else if ((rc & 0xff) == SQLITE_CONSTRAINT) {
		rc = STORE_CONFLICT;
	} else {
		log_stmt_error(s, rc);
		rc = store_code(rc);
	}
	stmt_end(s);
	return rc;
}

static int sq_sub_create(store *st, const struct sub_row *sub)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->w[W_SUB_INSERT];
	int64_t now = clock_now_ms();
	int rc;

	wlock(sq);
	sqlite3_bind_text(s, 1, sub->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, sub->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, sub->config, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 4, sub->enabled ? 1 : 0);
	sqlite3_bind_int64(s, 5, sub->created_at ? sub->created_at : now);
	sqlite3_bind_int64(s, 6, sub->updated_at ? sub->updated_at : now);
	rc = sub_write(sq, s);
	pthread_mutex_unlock(&sq->wmu);
	return rc;
}

static int sq_sub_update(store *st, const struct sub_row *sub)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->w[W_SUB_UPDATE];
	int rc;

	wlock(sq);
	sqlite3_bind_text(s, 1, sub->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, sub->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 3, sub->config, -1, SQLITE_STATIC);
	sqlite3_bind_int(s, 4, sub->enabled ? 1 : 0);
	sqlite3_bind_int64(s, 5, sub->updated_at ? sub->updated_at : clock_now_ms());
	rc = sub_write(sq, s);
	pthread_mutex_unlock(&sq->wmu);
	return rc;
}

static int sq_sub_delete(store *st, const char *id)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->w[W_SUB_DELETE];
	int rc;

	wlock(sq);
	sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
	rc = sub_write(sq, s);
	pthread_mutex_unlock(&sq->wmu);
	return rc;
}

static int read_sub(sqlite3_stmt *s, struct sub_row *sub)
{
	memset(sub, 0, sizeof(*sub));
	col_id(s, 0, sub->id);
	sub->enabled = sqlite3_column_int(s, 3);
	sub->created_at = sqlite3_column_int64(s, 4);
	sub->updated_at = sqlite3_column_int64(s, 5);
	if (col_dup(s, 1, &sub->name) || col_dup(s, 2, &sub->config)) {
		store_sub_free(sub);
		return SQLITE_NOMEM;
	}
	return SQLITE_OK;
}

static int sq_sub_get(store *st, const char *id, struct sub_row *out)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->r[R_SUB_GET];
	int rc;

	pthread_mutex_lock(&sq->rmu);
	sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
	rc = step_row(s);
	if (rc == SQLITE_ROW)
		rc = read_sub(s, out) == SQLITE_OK ? STORE_OK : STORE_ERROR;
	else
		rc = rc == SQLITE_DONE ? STORE_NOT_FOUND : store_code(rc);
	stmt_end(s);
	pthread_mutex_unlock(&sq->rmu);
	return rc;
}

static int sq_sub_list(store *st, struct sub_row **items, size_t *n)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = sq->r[R_SUB_LIST];
	struct sub_row *subs = NULL;
	size_t count = 0, cap = 0;
	int rc;

	pthread_mutex_lock(&sq->rmu);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct sub_row *more = grow(subs, &cap, count, sizeof(*subs));

		if (!more) {
			rc = SQLITE_NOMEM;
			goto out;
		}
		subs = more;
		rc = read_sub(s, &subs[count]);
		if (rc != SQLITE_OK)
			goto out;
		count++;
	}
	if (rc == SQLITE_DONE)
		rc = SQLITE_OK;
	else
		log_stmt_error(s, rc);
out:
	stmt_end(s);
	pthread_mutex_unlock(&sq->rmu);
	if (rc != SQLITE_OK) {
		store_subs_free(subs, count);
		return store_code(rc);
	}
	*items = subs;
	*n = count;
	return STORE_OK;
}

/* ---- counts, purge by filter ---------------------------------------------------------- */

static int sq_deliveries_count(store *st, const struct delivery_filter *f, size_t *n)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	char sql[1024] = "SELECT count(*) FROM deliveries WHERE 1";
	int rc, b = 1;

	filter_sql(f, sql, sizeof(sql));
	pthread_mutex_lock(&sq->rmu);
	rc = sqlite3_prepare_v2(sq->rdb, sql, -1, &s, NULL);
	if (rc == SQLITE_OK) {
		filter_bind(s, f, &b);
		rc = sqlite3_step(s);
		if (rc == SQLITE_ROW) {
			*n = (size_t)sqlite3_column_int64(s, 0);
			rc = SQLITE_OK;
		} else {
			log_stmt_error(s, rc);
		}
	} else {
		log_error("sqlite: %s", sqlite3_errmsg(sq->rdb));
	}
	sqlite3_finalize(s);
	pthread_mutex_unlock(&sq->rmu);
	return store_code(rc);
}

static int sq_dlq_purge_matching(store *st, const struct delivery_filter *f, size_t limit,
				 size_t *purged)
{
	struct sq *sq = sq_of(st);
	struct delivery_filter dead = *f;
	struct store_delivery *items = NULL;
	char *next = NULL;
	size_t n = 0;
	sqlite3_stmt *del = NULL;
	int rc;

	dead.dead_only = 1;
	dead.cursor = NULL;
	dead.limit = limit;
	rc = sq_deliveries_list(st, &dead, &items, &n, &next);
	free(next);
	if (rc != STORE_OK)
		return rc;
	wlock(sq);
	rc = tx_begin(sq);
	if (rc == SQLITE_OK)
		rc = sqlite3_prepare_v2(sq->wdb,
					"DELETE FROM deliveries WHERE id = ?1 AND status = 'FAILED'"
					" AND next_attempt_at IS NULL AND lease_until IS NULL",
					-1, &del, NULL);
	for (size_t i = 0; rc == SQLITE_OK && i < n; i++) {
		sqlite3_bind_text(del, 1, items[i].id, -1, SQLITE_STATIC);
		rc = step_done(del);
		if (rc == SQLITE_OK && sqlite3_changes(sq->wdb) == 1) {
			(*purged)++;
			rc = delete_if_orphan(sq, items[i].event_id);
		}
	}
	sqlite3_finalize(del);
	rc = tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	store_deliveries_free(items, n);
	if (rc != STORE_OK)
		*purged = 0;
	return rc;
}

/* ---- jobs ------------------------------------------------------------------------------- */

#define JOB_COLUMNS "id, kind, state, filter, force, rate, matched, done, cursor, actor, error," \
		    " created_at, updated_at"

static void bind_text_or_null(sqlite3_stmt *s, int i, const char *v)
{
	if (v)
		sqlite3_bind_text(s, i, v, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, i);
}

/* Runs one write statement with the job's fields bound as ?1..?13 (JOB_COLUMNS order). */
static int job_write(store *st, const char *sql, const struct store_job *j)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	int rc;

	wlock(sq);
	rc = sqlite3_prepare_v2(sq->wdb, sql, -1, &s, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(s, 1, j->id, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 2, j->kind, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 3, j->state, -1, SQLITE_STATIC);
		bind_text_or_null(s, 4, j->filter);
		sqlite3_bind_int(s, 5, j->force);
		sqlite3_bind_int(s, 6, j->rate);
		sqlite3_bind_int64(s, 7, j->matched);
		sqlite3_bind_int64(s, 8, j->done);
		bind_text_or_null(s, 9, j->cursor);
		bind_text_or_null(s, 10, j->actor);
		bind_text_or_null(s, 11, j->error);
		sqlite3_bind_int64(s, 12, j->created_at);
		sqlite3_bind_int64(s, 13, j->updated_at ? j->updated_at : clock_now_ms());
		rc = step_done(s);
		if (rc == SQLITE_OK && sqlite3_changes(sq->wdb) == 0)
			rc = SQLITE_NOTFOUND;
	} else {
		log_error("sqlite: %s", sqlite3_errmsg(sq->wdb));
	}
	sqlite3_finalize(s);
	pthread_mutex_unlock(&sq->wmu);
	return rc == SQLITE_NOTFOUND ? STORE_NOT_FOUND : store_code(rc);
}

static int sq_job_create(store *st, const struct store_job *job)
{
	return job_write(st, "INSERT INTO jobs(" JOB_COLUMNS ") VALUES (?1, ?2, ?3, ?4, ?5, ?6,"
			     " ?7, ?8, ?9, ?10, ?11, ?12, ?13)", job);
}

static int sq_job_update(store *st, const struct store_job *job)
{
	return job_write(st, "UPDATE jobs SET state = ?3, matched = ?7, done = ?8, cursor = ?9,"
			     " error = ?11, updated_at = ?13 WHERE id = ?1 AND kind = ?2"
			     " AND state = 'running'", job);
}

static int read_job(sqlite3_stmt *s, struct store_job *j)
{
	int rc;
	memset(j, 0, sizeof(*j));
	col_id(s, 0, j->id);
	snprintf(j->kind, sizeof(j->kind), "%s", (const char *)sqlite3_column_text(s, 1));
	snprintf(j->state, sizeof(j->state), "%s", (const char *)sqlite3_column_text(s, 2));
	j->force = sqlite3_column_int(s, 4);
	j->rate = sqlite3_column_int(s, 5);
	j->matched = sqlite3_column_int64(s, 6);
	j->done = sqlite3_column_int64(s, 7);
	j->created_at = sqlite3_column_int64(s, 11);
	j->updated_at = sqlite3_column_int64(s, 12);
	if ((rc = col_dup(s, 3, &j->filter)) || (rc = col_dup(s, 8, &j->cursor)) ||
	    (rc = col_dup(s, 9, &j->actor)) || (rc = col_dup(s, 10, &j->error)))
		return rc;
	return SQLITE_OK;
}

/* Reads jobs with a one-off query on the reader; one_id binds ?1 when not NULL. */
static int jobs_query(store *st, const char *sql, const char *one_id, struct store_job **items,
		      size_t *n)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	struct store_job *rows = NULL;
	size_t count = 0, cap = 0;
	int rc;

	pthread_mutex_lock(&sq->rmu);
	rc = sqlite3_prepare_v2(sq->rdb, sql, -1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s", sqlite3_errmsg(sq->rdb));
		goto out;
	}
	if (one_id)
		sqlite3_bind_text(s, 1, one_id, -1, SQLITE_STATIC);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_job *more = grow(rows, &cap, count, sizeof(*rows));
		if (!more) {
			rc = SQLITE_NOMEM;
			goto out;
		}
		rows = more;
		rc = read_job(s, &rows[count++]);
		if (rc != SQLITE_OK)
			goto out;
	}
	rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
out:
	sqlite3_finalize(s);
	pthread_mutex_unlock(&sq->rmu);
	if (rc != SQLITE_OK) {
		store_jobs_free(rows, count);
		return store_code(rc);
	}
	*items = rows;
	*n = count;
	return STORE_OK;
}

static int sq_job_get(store *st, const char *id, struct store_job *out)
{
	struct store_job *rows = NULL;
	size_t n = 0;
	int rc = jobs_query(st, "SELECT " JOB_COLUMNS " FROM jobs WHERE id = ?1", id, &rows, &n);
	if (rc != STORE_OK)
		return rc;
	if (n == 0) {
		free(rows);
		return STORE_NOT_FOUND;
	}
	*out = rows[0];
	free(rows);
	return STORE_OK;
}

static int sq_jobs_running(store *st, struct store_job **items, size_t *n)
{
	return jobs_query(st, "SELECT " JOB_COLUMNS " FROM jobs WHERE state = 'running'"
			      " ORDER BY created_at", NULL, items, n);
}

/* ---- audit -------------------------------------------------------------------------------- */

static int sq_audit_append(store *st, const struct store_audit *a)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	int rc;

	wlock(sq);
	rc = sqlite3_prepare_v2(sq->wdb, "INSERT INTO audit(id, at, actor, action, target, count,"
				" detail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", -1, &s, NULL);
	if (rc == SQLITE_OK) {
		sqlite3_bind_text(s, 1, a->id, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, a->at ? a->at : clock_now_ms());
		sqlite3_bind_text(s, 3, a->actor, -1, SQLITE_STATIC);
		sqlite3_bind_text(s, 4, a->action, -1, SQLITE_STATIC);
		bind_text_or_null(s, 5, a->target);
		sqlite3_bind_int64(s, 6, a->count);
		bind_text_or_null(s, 7, a->detail);
		rc = step_done(s);
	} else {
		log_error("sqlite: %s", sqlite3_errmsg(sq->wdb));
	}
	sqlite3_finalize(s);
	pthread_mutex_unlock(&sq->wmu);
	return store_code(rc);
}

static int sq_audit_list(store *st, const char *before_id, size_t limit,
			 struct store_audit **items, size_t *n)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	struct store_audit *rows = NULL;
	size_t count = 0, cap = 0;
	int rc;

	pthread_mutex_lock(&sq->rmu);
	rc = sqlite3_prepare_v2(sq->rdb, "SELECT id, at, actor, action, target, count, detail"
				" FROM audit WHERE (?1 IS NULL OR id < ?1) ORDER BY id DESC LIMIT ?2",
				-1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s", sqlite3_errmsg(sq->rdb));
		goto out;
	}
	bind_text_or_null(s, 1, before_id);
	sqlite3_bind_int64(s, 2, (int64_t)limit);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_audit *a, *more = grow(rows, &cap, count, sizeof(*rows));
		if (!more) {
			rc = SQLITE_NOMEM;
			goto out;
		}
		rows = more;
		a = &rows[count++];
		memset(a, 0, sizeof(*a));
		col_id(s, 0, a->id);
		a->at = sqlite3_column_int64(s, 1);
		a->count = sqlite3_column_int64(s, 5);
		if ((rc = col_dup(s, 2, &a->actor)) || (rc = col_dup(s, 3, &a->action)) ||
		    (rc = col_dup(s, 4, &a->target)) || (rc = col_dup(s, 6, &a->detail)))
			goto out;
	}
	rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
out:
	sqlite3_finalize(s);
	pthread_mutex_unlock(&sq->rmu);
	if (rc != SQLITE_OK) {
		store_audits_free(rows, count);
		return store_code(rc);
	}
	*items = rows;
	*n = count;
	return STORE_OK;
}

/* ---- stats -------------------------------------------------------------------------------- */

/* Runs a query whose single row holds int64 columns into out[0..ncols). */
static int int_row(struct sq *sq, const char *sql, int64_t bind1, int64_t *out, int ncols)
{
	sqlite3_stmt *s = NULL;
	int rc = sqlite3_prepare_v2(sq->rdb, sql, -1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s", sqlite3_errmsg(sq->rdb));
		return rc;
	}
	if (sqlite3_bind_parameter_count(s) > 0)
		sqlite3_bind_int64(s, 1, bind1);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		for (int i = 0; i < ncols; i++)
			out[i] = sqlite3_column_int64(s, i);
		rc = SQLITE_OK;
	} else if (rc == SQLITE_DONE) {
		rc = SQLITE_OK;
	} else {
		log_stmt_error(s, rc);
	}
	sqlite3_finalize(s);
	return rc;
}

static struct store_sub_stats *sub_stats_for(struct store_stats *out, const char *id, size_t *cap)
{
	for (size_t i = 0; i < out->n_subs; i++)
		if (strcmp(out->subs[i].subscription_id, id) == 0)
			return &out->subs[i];
	struct store_sub_stats *more = grow(out->subs, cap, out->n_subs, sizeof(*more));
	if (!more)
		return NULL;
	out->subs = more;
	struct store_sub_stats *x = &out->subs[out->n_subs++];
	memset(x, 0, sizeof(*x));
	snprintf(x->subscription_id, sizeof(x->subscription_id), "%s", id);
	return x;
}

static int sq_stats(store *st, int64_t now_ms, int64_t window_ms, struct store_stats *out)
{
	struct sq *sq = sq_of(st);
	int64_t v[4] = {0};
	sqlite3_stmt *s = NULL;
	size_t cap = 0;
	int rc;

	pthread_mutex_lock(&sq->rmu);
	rc = int_row(sq, "SELECT"
		     " (SELECT count(*) FROM deliveries WHERE status = 'NEW'),"
		     " (SELECT count(*) FROM deliveries WHERE status = 'PROCESSED'),"
		     " (SELECT count(*) FROM deliveries WHERE status = 'FAILED'"
		     "   AND next_attempt_at IS NOT NULL),"
		     " (SELECT count(*) FROM deliveries WHERE status = 'FAILED'"
		     "   AND next_attempt_at IS NULL)", 0, v, 4);
	if (rc != SQLITE_OK)
		goto out;
	out->new_count = v[0];
	out->processed_count = v[1];
	out->retrying_count = v[2];
	out->dead_count = v[3];
	memset(v, 0, sizeof(v));
	rc = int_row(sq, "SELECT"
		     " (SELECT count(*) FROM deliveries WHERE lease_until IS NOT NULL),"
		     " (SELECT count(*) FROM deliveries WHERE lease_until IS NULL"
		     "   AND next_attempt_at IS NOT NULL AND next_attempt_at <= ?1),"
		     " (SELECT COALESCE(MIN(next_attempt_at), 0) FROM deliveries"
		     "   WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL"
		     "   AND next_attempt_at <= ?1),"
		     " (SELECT COALESCE(MIN(created_at), 0) FROM deliveries"
		     "   WHERE status = 'FAILED' AND next_attempt_at IS NULL)", now_ms, v, 4);
	if (rc != SQLITE_OK)
		goto out;
	out->in_flight = v[0];
	out->due_count = v[1];
	out->oldest_due_at = v[2];
	out->oldest_dead_at = v[3];

	/* Per subscription over the window: attempts, successes, and the newest failure
	 * (SQLite returns the row of max() for the bare columns). */
	rc = sqlite3_prepare_v2(sq->rdb,
				"SELECT d.subscription_id, count(*),"
				" sum(a.code BETWEEN 200 AND 299),"
				" max(CASE WHEN a.code BETWEEN 200 AND 299 THEN 0 ELSE a.started_at END)"
				" FROM attempts a JOIN deliveries d ON d.id = a.delivery_id"
				" WHERE a.started_at >= ?1 GROUP BY d.subscription_id",
				-1, &s, NULL);
	if (rc != SQLITE_OK) {
		log_error("sqlite: %s", sqlite3_errmsg(sq->rdb));
		goto out;
	}
	sqlite3_bind_int64(s, 1, now_ms - window_ms);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_sub_stats *x =
			sub_stats_for(out, (const char *)sqlite3_column_text(s, 0), &cap);
		if (!x) {
			rc = SQLITE_NOMEM;
			goto out;
		}
		x->attempts = sqlite3_column_int64(s, 1);
		x->successes = sqlite3_column_int64(s, 2);
		x->last_error_at = sqlite3_column_int64(s, 3);
	}
	rc = rc == SQLITE_DONE ? SQLITE_OK : rc;
	sqlite3_finalize(s);
	s = NULL;
	if (rc != SQLITE_OK)
		goto out;
	rc = sqlite3_prepare_v2(sq->rdb,
				"SELECT a.code, a.message FROM attempts a"
				" JOIN deliveries d ON d.id = a.delivery_id"
				" WHERE d.subscription_id = ?1 AND a.started_at = ?2"
				" AND NOT (a.code BETWEEN 200 AND 299) LIMIT 1",
				-1, &s, NULL);
	for (size_t i = 0; rc == SQLITE_OK && i < out->n_subs; i++) {
		struct store_sub_stats *x = &out->subs[i];
		if (!x->last_error_at)
			continue;
		sqlite3_bind_text(s, 1, x->subscription_id, -1, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, x->last_error_at);
		if (sqlite3_step(s) == SQLITE_ROW) {
			x->last_code = sqlite3_column_int(s, 0);
			rc = col_dup(s, 1, &x->last_message);
		}
		sqlite3_reset(s);
	}
out:
	sqlite3_finalize(s);
	pthread_mutex_unlock(&sq->rmu);
	if (rc != SQLITE_OK) {
		store_stats_free(out);
		return store_code(rc);
	}
	return STORE_OK;
}


const struct store_ops store_sqlite_ops = {
	.name = "sqlite",
	.dsn_prefix = "sqlite:",
	.open = sq_open,
	.close = sq_close,
	.ping = sq_ping,
	.ingest = sq_ingest,
	.relay_outbox = sq_relay_outbox,
	.claim_due = sq_claim_due,
	.next_due = sq_next_due,
	.record_results = sq_record_results,
	.reap_leases = sq_reap_leases,
	.release_all = sq_release_all,
	.event_get = sq_event_get,
	.event_deliveries = sq_event_deliveries,
	.delivery_get = sq_delivery_get,
	.delivery_attempts = sq_delivery_attempts,
	.deliveries_list = sq_deliveries_list,
	.replay = sq_replay,
	.dlq_purge = sq_dlq_purge,
	.cleanup = sq_cleanup,
	.deliveries_count = sq_deliveries_count,
	.dlq_purge_matching = sq_dlq_purge_matching,
	.job_create = sq_job_create,
	.job_update = sq_job_update,
	.job_get = sq_job_get,
	.jobs_running = sq_jobs_running,
	.audit_append = sq_audit_append,
	.audit_list = sq_audit_list,
	.stats = sq_stats,
	.sub_create = sq_sub_create,
	.sub_update = sq_sub_update,
	.sub_delete = sq_sub_delete,
	.sub_get = sq_sub_get,
	.sub_list = sq_sub_list,
};
