/* copy.c: the SQLite backend's side of a copy between backends (store/copy.h): pages of
 * a table's rows in primary-key order on the reader connection, batches inserted in one
 * transaction on the writer, rows found by key, and the check of the file's tables and
 * columns against the copy's description.
 *
 * SQL is made from the description's table and column names only (fixed names, never a
 * value). Must not: change a row it reads, or write outside one transaction per batch. */
#include "store/sqlite/sqlite_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* Binds value v (of batch b, column type type) to parameter i. */
static void bind_value(sqlite3_stmt *s, int i, const struct copy_batch *b,
		       const struct copy_value *v, enum copy_type type)
{
	const char *p = copy_value_bytes(b, v);

	if (v->null)
		sqlite3_bind_null(s, i);
	else if (type == COPY_INT)
		sqlite3_bind_int64(s, i, v->i);
	else if (type == COPY_TEXT)
		sqlite3_bind_text64(s, i, p, v->len, SQLITE_TRANSIENT, SQLITE_UTF8);
	else /* the batch outlives the statement's steps */
		sq_bind_payload(s, i, p, v->len);
}

/* Appends the current row of s (the description's columns, in order) to out. */
static int read_row(sqlite3_stmt *s, struct copy_batch *out)
{
	const struct copy_table *t = out->t;
	struct copy_value *row = copy_batch_add(out);

	if (!row)
		return SQLITE_NOMEM;
	for (size_t c = 0; c < t->n_cols; c++) {
		int i = (int)c;
		const void *p;

		if (sqlite3_column_type(s, i) == SQLITE_NULL)
			continue;
		if (t->cols[c].type == COPY_INT) {
			copy_batch_set_int(row, c, sqlite3_column_int64(s, i));
			continue;
		}
		p = t->cols[c].type == COPY_TEXT ? (const void *)sqlite3_column_text(s, i)
						 : sqlite3_column_blob(s, i);
		if (!p && sqlite3_errcode(sqlite3_db_handle(s)) == SQLITE_NOMEM)
			return sq_log_nomem();
		if (copy_batch_set_bytes(out, row, c, p, (size_t)sqlite3_column_bytes(s, i)))
			return SQLITE_NOMEM;
	}
	return SQLITE_OK;
}

/* Prepares sql (a statement made here) on db. SQLITE_OK or the error, logged. */
static int prepare(sqlite3 *db, const struct buf *sql, sqlite3_stmt **s)
{
	int rc = sqlite3_prepare_v2(db, sql->data, -1, s, NULL);

	if (rc != SQLITE_OK)
		log_error("sqlite: %s (in: %.80s)", sqlite3_errmsg(db), sql->data);
	return rc;
}

int sq_copy_read(store *st, const struct copy_table *t, const struct copy_batch *after,
			size_t limit, struct copy_batch *out)
{
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	struct buf sql;
	int rc, bad;

	buf_init(&sql, 4096);
	bad = buf_appendf(&sql, "SELECT ") || copy_names_sql(&sql, t, t->n_cols) ||
	      buf_appendf(&sql, " FROM %s", t->name);
	if (after) {
		bad |= buf_appendf(&sql, " WHERE (") || copy_names_sql(&sql, t, t->n_key) ||
		       buf_appendf(&sql, ") > (");
		for (size_t k = 0; k < t->n_key; k++)
			bad |= buf_appendf(&sql, "%s?%zu", k ? ", " : "", k + 1);
		bad |= buf_appendf(&sql, ")");
	}
	bad |= buf_appendf(&sql, " ORDER BY ") || copy_names_sql(&sql, t, t->n_key) ||
	       buf_appendf(&sql, " LIMIT %zu", limit);
	if (bad) {
		buf_free(&sql);
		return STORE_ERROR;
	}
	struct sq_reader *rd = sq_read_lock(sq);
	rc = prepare(rd->db, &sql, &s);
	for (size_t k = 0; rc == SQLITE_OK && after && k < t->n_key; k++)
		bind_value(s, (int)k + 1, after, copy_batch_row(after, 0) + k, t->cols[k].type);
	while (rc == SQLITE_OK) {
		rc = sqlite3_step(s);
		if (rc == SQLITE_DONE) {
			rc = SQLITE_OK;
			break;
		}
		if (rc != SQLITE_ROW) {
			sq_log_stmt_error(s, rc);
			break;
		}
		rc = read_row(s, out);
		if (out->arena.len >= COPY_BATCH_BYTES)
			break;
	}
	sqlite3_finalize(s);
	sq_read_unlock(rd);
	buf_free(&sql);
	return sq_store_code(rc);
}

int sq_copy_write(store *st, const struct copy_batch *rows)
{
	const struct copy_table *t = rows->t;
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	int conflict = 0, rc, bad;
	struct buf sql;

	buf_init(&sql, 4096);
	bad = buf_appendf(&sql, "INSERT INTO %s(", t->name) || copy_names_sql(&sql, t, t->n_cols) ||
	      buf_appendf(&sql, ") VALUES (");
	for (size_t c = 0; c < t->n_cols; c++)
		bad |= buf_appendf(&sql, "%s?%zu", c ? ", " : "", c + 1);
	if (bad || buf_appendf(&sql, ")")) {
		buf_free(&sql);
		return STORE_ERROR;
	}
	/* A copy's batch is acknowledged to nobody, but the copy is only as good as its last
	 * commit: at synchronous=FULL like ingest. */
	rc = sq_wlock(sq);
	if (rc == SQLITE_OK)
		rc = prepare(sq->wdb, &sql, &s);
	if (rc == SQLITE_OK)
		rc = sq_tx_begin(sq);
	for (size_t r = 0; rc == SQLITE_OK && r < rows->n_rows; r++) {
		const struct copy_value *row = copy_batch_row(rows, r);

		for (size_t c = 0; c < t->n_cols; c++) {
			if (t->cols[c].flags & COPY_LEASE)
				sqlite3_bind_null(s, (int)c + 1);
			else
				bind_value(s, (int)c + 1, rows, &row[c], t->cols[c].type);
		}
		rc = sqlite3_step(s);
		if (rc == SQLITE_DONE) {
			rc = SQLITE_OK;
		} else {
			conflict = rc == SQLITE_CONSTRAINT_PRIMARYKEY || rc == SQLITE_CONSTRAINT_UNIQUE;
			sq_log_stmt_error(s, rc);
		}
		sqlite3_reset(s);
	}
	sqlite3_finalize(s);
	rc = sq_tx_end(sq, rc);
	pthread_mutex_unlock(&sq->wmu);
	buf_free(&sql);
	return conflict ? STORE_CONFLICT : rc;
}

int sq_copy_find(store *st, const struct copy_batch *keys, struct copy_batch *found)
{
	const struct copy_table *t = keys->t;
	struct sq *sq = sq_of(st);
	sqlite3_stmt *s = NULL;
	struct buf sql;
	int rc, bad;

	buf_init(&sql, 4096);
	bad = buf_appendf(&sql, "SELECT ") || copy_names_sql(&sql, t, t->n_cols) ||
	      buf_appendf(&sql, " FROM %s WHERE ", t->name);
	for (size_t k = 0; k < t->n_key; k++)
		bad |= buf_appendf(&sql, "%s%s = ?%zu", k ? " AND " : "", t->cols[k].name, k + 1);
	if (bad) {
		buf_free(&sql);
		return STORE_ERROR;
	}
	struct sq_reader *rd = sq_read_lock(sq);
	rc = prepare(rd->db, &sql, &s);
	for (size_t r = 0; rc == SQLITE_OK && r < keys->n_rows; r++) {
		for (size_t k = 0; k < t->n_key; k++)
			bind_value(s, (int)k + 1, keys, copy_batch_row(keys, r) + k, t->cols[k].type);
		while ((rc = sqlite3_step(s)) == SQLITE_ROW && (rc = read_row(s, found)) == SQLITE_OK)
			;
		if (rc == SQLITE_DONE)
			rc = SQLITE_OK;
		else
			sq_log_stmt_error(s, rc);
		sqlite3_reset(s);
	}
	sqlite3_finalize(s);
	sq_read_unlock(rd);
	buf_free(&sql);
	return sq_store_code(rc);
}

/* Every (table, column) of the file's tables but SQLite's own and schema_migrations. */
static int schema_pairs(sqlite3 *db, char ***names, size_t *n)
{
	static const char sql[] =
		"SELECT m.name, p.name FROM sqlite_master m, pragma_table_info(m.name) p"
		" WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite!_%' ESCAPE '!'"
		" AND m.name <> 'schema_migrations' ORDER BY m.name, p.cid";
	sqlite3_stmt *s = NULL;
	size_t cap = 0;
	int rc;

	*names = NULL;
	*n = 0;
	rc = sqlite3_prepare_v2(db, sql, -1, &s, NULL);
	while (rc == SQLITE_OK && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		char **grown = sq_grow(*names, &cap, 2 * *n + 1, sizeof(char *));

		if (!grown) {
			rc = sq_log_nomem();
			break;
		}
		*names = grown;
		(*names)[2 * *n] = strdup((const char *)sqlite3_column_text(s, 0));
		(*names)[2 * *n + 1] = strdup((const char *)sqlite3_column_text(s, 1));
		(*n)++;
		if (!(*names)[2 * *n - 2] || !(*names)[2 * *n - 1])
			rc = sq_log_nomem();
		else
			rc = SQLITE_OK;
	}
	if (rc == SQLITE_DONE)
		rc = SQLITE_OK;
	else if (s)
		sq_log_stmt_error(s, rc);
	sqlite3_finalize(s);
	return rc;
}

int sq_copy_check(store *st, char *err, size_t errlen)
{
	struct sq *sq = sq_of(st);
	int64_t version = -1;
	char **names = NULL;
	size_t n = 0;
	int rc;

	struct sq_reader *rd = sq_read_lock(sq);
	rc = schema_pairs(rd->db, &names, &n);
	if (rc == SQLITE_OK)
		rc = sq_schema_version(rd->db, &version);
	sq_read_unlock(rd);
	if (rc != SQLITE_OK) {
		snprintf(err, errlen, "sqlite: cannot read the schema: %s", sqlite3_errstr(rc));
		rc = STORE_ERROR;
	} else if (version != (int64_t)sqlite_migrations_n) {
		snprintf(err, errlen, "sqlite: schema version %lld, this outboxd's latest is %zu",
			 (long long)version, sqlite_migrations_n);
		rc = STORE_ERROR;
	} else {
		/* SQLite's tables are exactly the description: no column is skipped. */
		rc = store_copy_schema_compare((const char *const *)names, n, NULL, 0, err, errlen);
	}
	for (size_t i = 0; i < 2 * n; i++)
		free(names[i]);
	free(names);
	return rc;
}
