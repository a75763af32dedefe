/* rows.c: the SQLite backend's small helpers: binding values, reading columns and
 * rows, growing result arrays, and the writer's transactions (BEGIN IMMEDIATE, the
 * synchronous level, COMMIT or ROLLBACK). Must not log a value it binds. */
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
#include "util/logburst.h"
#include "util/uuid.h"

/* ---- small helpers ------------------------------------------------------- */

/* Busy, full disk, I/O trouble: the caller should answer "try again later". */
int sq_store_code(int rc)
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
	case SQLITE_INTERRUPT: /* a reader's deadline (the store's read timeout) */
		return STORE_TIMEOUT;
	default:
		return STORE_ERROR;
	}
}

/* A store that cannot be written (a full disk, an I/O error) refuses writes until it can
 * again: a producer's every request, each group of results. Logged as a burst
 * (util/logburst.h): when it starts, once a minute while it goes on, and when a write
 * succeeds with none refused for REFUSALS_OVER_MS (a nearly full disk takes some writes
 * and refuses others). Process-wide: it is the disk's state, whichever connection saw
 * it. */
#define REFUSALS_OVER_MS 5000
static struct log_burst refusals;

static int refuses_writes(int rc)
{
	return (rc & 0xff) == SQLITE_FULL || (rc & 0xff) == SQLITE_IOERR;
}

int sq_log_stmt_error(sqlite3_stmt *s, int rc)
{
	const char *why = sqlite3_errmsg(sqlite3_db_handle(s));
	long n;
	int64_t span_ms;

	if (!refuses_writes(rc)) {
		log_error("sqlite: %s (in: %.60s)", why, sqlite3_sql(s));
		return rc;
	}
	switch (log_burst_hit(&refusals, clock_mono_ms(), LOG_BURST_EVERY_MS, &n, &span_ms)) {
	case LOG_BURST_START:
		log_error("sqlite: the store cannot be written: %s (in: %.60s). Until writes "
			  "succeed again (free space on the store's disk), ingest answers 503 "
			  "(or goes to the spool, when one is set) and delivery results wait in "
			  "memory; logged again once a minute while it lasts", why,
			  sqlite3_sql(s));
		break;
	case LOG_BURST_STILL:
		log_error("sqlite: the store still cannot be written: %s (%ld writes refused "
			  "in the last %.0f s)", why, n, (double)span_ms / 1000.0);
		break;
	case LOG_BURST_QUIET:
		break;
	}
	return rc;
}

/* A write was committed: the end of refusals before it, if any. */
static void writes_taken(void)
{
	int64_t span_ms;
	long n = log_burst_over(&refusals, clock_mono_ms(), REFUSALS_OVER_MS, &span_ms);
	if (n)
		log_info("sqlite: the store takes writes again: %ld refused over %.1f s", n,
			 (double)span_ms / 1000.0);
}

int sq_log_nomem(void)
{
	log_error("store: out of memory");
	return SQLITE_NOMEM;
}

void sq_stmt_end(sqlite3_stmt *s)
{
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
}

/* Steps a statement that returns no rows and resets it. SQLITE_OK or the error. */
int sq_step_done(sqlite3_stmt *s)
{
	int rc = sqlite3_step(s);

	if (rc == SQLITE_DONE)
		rc = SQLITE_OK;
	else
		sq_log_stmt_error(s, rc);
	sq_stmt_end(s);
	return rc;
}

/* Steps a statement expected to return at most one row: SQLITE_ROW (the statement is
 * left on the row; the caller calls sq_stmt_end), SQLITE_DONE (reset) or the error. */
int sq_step_row(sqlite3_stmt *s)
{
	int rc = sqlite3_step(s);

	if (rc != SQLITE_ROW) {
		if (rc != SQLITE_DONE)
			sq_log_stmt_error(s, rc);
		sq_stmt_end(s);
	}
	return rc;
}

void sq_bind_text(sqlite3_stmt *s, int i, const char *t)
{
	if (t)
		sqlite3_bind_text(s, i, t, -1, SQLITE_STATIC);
	else
		sqlite3_bind_null(s, i);
}

/* Text of at most ERROR_TEXT_MAX bytes, cut on a UTF-8 character boundary. */
void sq_bind_error_text(sqlite3_stmt *s, int i, const char *t)
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

void sq_bind_payload(sqlite3_stmt *s, int i, const void *p, size_t len)
{
	/* A zero-length blob bound from NULL would be SQL NULL; the column is NOT NULL. */
	if (!len)
		sqlite3_bind_zeroblob(s, i, 0);
	else
		sqlite3_bind_blob64(s, i, p, len, SQLITE_STATIC);
}

/* 0 means "none" in the interface and NULL in the table. */
void sq_bind_time(sqlite3_stmt *s, int i, int64_t v)
{
	if (v)
		sqlite3_bind_int64(s, i, v);
	else
		sqlite3_bind_null(s, i);
}

void sq_col_id(sqlite3_stmt *s, int i, char dst[UUID_STR_LEN])
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
int sq_col_dup(sqlite3_stmt *s, int i, char **out)
{
	const unsigned char *t;
	int len;

	*out = NULL;
	if (sqlite3_column_type(s, i) == SQLITE_NULL)
		return SQLITE_OK;
	t = sqlite3_column_text(s, i);
	len = sqlite3_column_bytes(s, i);
	if (!t || !(*out = malloc((size_t)len + 1)))
		return sq_log_nomem();
	memcpy(*out, t, (size_t)len);
	(*out)[len] = '\0';
	return SQLITE_OK;
}

/* Makes room for element n of an array of size-byte elements: returns the array (maybe
 * moved), or NULL when memory runs out (the old array is then untouched). */
void *sq_grow(void *arr, size_t *cap, size_t n, size_t size)
{
	size_t ncap;
	void *q;

	if (n < *cap)
		return arr;
	ncap = *cap ? *cap * 2 : 16;
	q = realloc(arr, ncap * size);
	if (!q) {
		sq_log_nomem();
		return NULL;
	}
	*cap = ncap;
	return q;
}

int sq_tx_begin(struct sq *sq)
{
	if (sq->busy_until_ms && clock_mono_ms() < sq->busy_until_ms)
		return SQLITE_BUSY;
	int rc = sq_step_done(sq->w[W_BEGIN]);
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
 * relaxed commit: every other writer takes the lock with sq_wlock(), which puts the
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
int sq_wlock(struct sq *sq)
{
	pthread_mutex_lock(&sq->wmu);
	return sync_set(sq, 0);
}

/* Takes the writer lock for claims and results, at synchronous=NORMAL when it can (a
 * failure only means a stricter commit). */
void sq_wlock_relaxed(struct sq *sq)
{
	pthread_mutex_lock(&sq->wmu);
	sync_set(sq, 1);
}

static int tx_commit(struct sq *sq)
{
	return sq_step_done(sq->w[W_COMMIT]);
}

/* Rolls back if a transaction is still open (SQLite may have ended it already, e.g.
 * on SQLITE_FULL). */
static void tx_rollback(struct sq *sq)
{
	if (!sqlite3_get_autocommit(sq->wdb))
		sq_step_done(sq->w[W_ROLLBACK]);
}

/* Ends a write transaction: commit on success, rollback otherwise. Returns the
 * store code. */
int sq_tx_end(struct sq *sq, int rc)
{
	if (rc == SQLITE_OK)
		rc = tx_commit(sq);
	if (rc == SQLITE_OK) {
		writes_taken();
		return STORE_OK;
	}
	tx_rollback(sq);
	/* Rolled back is never OK, whatever code led here (a stray SQLITE_DONE too). */
	rc = sq_store_code(rc);
	return rc == STORE_OK ? STORE_ERROR : rc;
}

int sq_read_delivery(sqlite3_stmt *s, void *row)
{
	struct store_delivery *d = row;
	const char *status = (const char *)sqlite3_column_text(s, 4);
	enum delivery_status st = DELIVERY_FAILED;

	memset(d, 0, sizeof(*d));
	sq_col_id(s, 0, d->id);
	sq_col_id(s, 1, d->event_id);
	sq_col_id(s, 2, d->subscription_id);
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
	d->blocked = sqlite3_column_int(s, 17) == 1; /* 2, waiting its turn, is not shown */
	d->failing_since = sqlite3_column_int64(s, 18);
	if (sq_col_dup(s, 3, &d->event_type) || sq_col_dup(s, 13, &d->last_message) ||
	    sq_col_dup(s, 14, &d->last_cause) || sq_col_dup(s, 15, &d->lease_owner)) {
		store_delivery_free(d);
		return SQLITE_NOMEM;
	}
	return SQLITE_OK;
}

int sq_read_rows(sqlite3_stmt *s, size_t size, sq_row_cb read, void **items, size_t *n,
		 size_t *cap)
{
	int rc;

	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		char *more = sq_grow(*items, cap, *n, size);
		if (!more)
			return sq_log_nomem();
		*items = more;
		rc = read(s, more + *n * size);
		if (rc != SQLITE_OK)
			return rc;
		(*n)++;
	}
	if (rc != SQLITE_DONE)
		return sq_log_stmt_error(s, rc);
	return SQLITE_OK;
}

int sq_get_one(struct sq *sq, enum rstmt k, const char *id, sq_row_cb read, void *out)
{
	struct sq_reader *rd = sq_read_lock(sq);
	sqlite3_stmt *s = rd->r[k];
	int rc;

	sqlite3_bind_text(s, 1, id, -1, SQLITE_STATIC);
	rc = sq_step_row(s);
	if (rc == SQLITE_ROW)
		rc = read(s, out) == SQLITE_OK ? STORE_OK : STORE_ERROR;
	else
		rc = rc == SQLITE_DONE ? STORE_NOT_FOUND : sq_store_code(rc);
	sq_stmt_end(s);
	sq_read_unlock(rd);
	return rc;
}
