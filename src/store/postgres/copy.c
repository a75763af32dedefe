/* copy.c: the PostgreSQL backend's side of a copy between backends (store/copy.h): pages
 * of a table's rows in primary-key order (single-row mode, so a page of large payloads
 * stops at COPY_BATCH_BYTES without the rest of the page in memory), batches inserted as
 * multi-row INSERTs in one transaction, rows found by key, the check of the schema's
 * tables and columns against the copy's description, and the other outboxd sessions on
 * the database. Everything runs on the janitor connection, the one store_open opened.
 *
 * SQL is made from the description's table and column names only (fixed names, never a
 * value). Must not: change a row it reads, or write outside one transaction per batch. */
#include "store/postgres/pg_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* Columns this backend has that a copy leaves out.
 *
 * attempts.instance: the lease owner that made the attempt (which instance of a
 * cluster). SQLite has no such column (one instance owns the file) and no statement reads
 * it back (it is for an operator's own SQL), so a copy into PostgreSQL leaves it NULL
 * (unknown) and a copy out of PostgreSQL drops it; it is not in the checksums either. */
static const struct copy_skipped pg_copy_skipped[] = {
	{"attempts", "instance"},
};

/* PostgreSQL's limit on a statement's parameters. */
#define PG_MAX_PARAMS 65535

/* Appends row `row` of a binary result (the description's columns, in order) to out. */
static int read_row(const PGresult *res, int row, struct copy_batch *out)
{
	const struct copy_table *t = out->t;
	struct copy_value *v = copy_batch_add(out);

	if (!v)
		return -1;
	for (size_t c = 0; c < t->n_cols; c++) {
		int col = (int)c;

		if (PQgetisnull(res, row, col))
			continue;
		if (t->cols[c].type == COPY_INT)
			copy_batch_set_int(v, c, pg_get_int(res, row, col));
		else if (copy_batch_set_bytes(out, v, c, PQgetvalue(res, row, col),
					      (size_t)PQgetlength(res, row, col)))
			return -1;
	}
	return 0;
}

int pg_copy_read(store *st, const struct copy_table *t, const struct copy_batch *after,
		 size_t limit, struct copy_batch *out)
{
	const char *values[8] = {0};
	struct pg *pg = pg_of(st);
	char num[8][24];
	struct pgconn *c;
	struct buf sql;
	PGresult *res;
	int rc, bad, full = 0;

	if (t->n_key > 8)
		return STORE_INVALID;
	buf_init(&sql, 4096);
	bad = buf_appendf(&sql, "SELECT ") || copy_names_sql(&sql, t, t->n_cols) ||
	      buf_appendf(&sql, " FROM outboxd.%s", t->name);
	if (after) {
		bad |= buf_appendf(&sql, " WHERE (") || copy_names_sql(&sql, t, t->n_key) ||
		       buf_appendf(&sql, ") > (");
		for (size_t k = 0; k < t->n_key; k++) {
			const struct copy_value *v = copy_batch_row(after, 0) + k;

			bad |= buf_appendf(&sql, "%s$%zu", k ? ", " : "", k + 1);
			if (t->cols[k].type == COPY_INT) {
				snprintf(num[k], sizeof(num[k]), "%lld", (long long)v->i);
				values[k] = num[k];
			} else {
				values[k] = copy_value_bytes(after, v);
			}
		}
		bad |= buf_appendf(&sql, ")");
	}
	bad |= buf_appendf(&sql, " ORDER BY ") || copy_names_sql(&sql, t, t->n_key) ||
	       buf_appendf(&sql, " LIMIT %zu", limit);
	if (bad) {
		buf_free(&sql);
		return STORE_ERROR;
	}
	if (!(c = pg_take(pg, ROLE_JANITOR, &rc))) {
		buf_free(&sql);
		return rc;
	}
	if (!PQsendQueryParams(c->conn, sql.data, after ? (int)t->n_key : 0, NULL, values, NULL,
			       NULL, 1) || !PQsetSingleRowMode(c->conn)) {
		rc = pg_fail_code(pg, c, NULL, sql.data);
		goto out;
	}
	/* Every result is read to the end, also past an error or a full page: the
	 * connection is only free again then. */
	while ((res = PQgetResult(c->conn))) {
		ExecStatusType status = PQresultStatus(res);

		if (status == PGRES_SINGLE_TUPLE && rc == STORE_OK && !full) {
			if (read_row(res, 0, out))
				rc = STORE_ERROR;
			full = out->arena.len >= COPY_BATCH_BYTES;
		} else if (status != PGRES_SINGLE_TUPLE && status != PGRES_TUPLES_OK &&
			   rc == STORE_OK) {
			rc = pg_fail_code(pg, c, res, sql.data);
		}
		PQclear(res);
	}
out:
	pg_give(c);
	buf_free(&sql);
	return rc;
}

/* Inserts rows [first, first + n) of rows as one statement on c (in a transaction). */
static int insert_rows(struct pg *pg, struct pgconn *c, const struct copy_batch *rows,
		       size_t first, size_t n)
{
	const struct copy_table *t = rows->t;
	size_t np = n * t->n_cols, p = 0;
	const char **values = calloc(np, sizeof(*values));
	int *lengths = calloc(np, sizeof(*lengths));
	int *formats = calloc(np, sizeof(*formats));
	char (*num)[24] = calloc(np, sizeof(*num));
	char **fixed = calloc(np, sizeof(*fixed));
	int rc = STORE_ERROR, bad;
	struct buf sql;
	PGresult *res;

	buf_init(&sql, (size_t)64 << 20);
	if (!values || !lengths || !formats || !num || !fixed) {
		log_error("store: out of memory");
		goto out;
	}
	bad = buf_appendf(&sql, "INSERT INTO outboxd.%s(", t->name) || copy_names_sql(&sql, t, t->n_cols) ||
	      buf_appendf(&sql, ") VALUES ");
	for (size_t r = first; r < first + n; r++) {
		const struct copy_value *row = copy_batch_row(rows, r);

		bad |= buf_appendf(&sql, "%s(", r > first ? "," : "");
		for (size_t col = 0; col < t->n_cols; col++, p++) {
			const struct copy_column *cd = &t->cols[col];
			const struct copy_value *v = &row[col];

			bad |= buf_appendf(&sql, "%s$%zu", col ? "," : "", p + 1);
			if (v->null || (cd->flags & COPY_LEASE))
				continue;
			if (cd->type == COPY_INT) {
				/* text form: PostgreSQL takes "0"/"1" for a boolean as well */
				snprintf(num[p], sizeof(num[p]), "%lld", (long long)v->i);
				values[p] = num[p];
			} else if (cd->type == COPY_BLOB) {
				values[p] = copy_value_bytes(rows, v);
				lengths[p] = (int)v->len;
				formats[p] = 1;
			} else if (cd->flags & COPY_ERRTEXT) {
				if (!(fixed[p] = copy_text_fix(copy_value_bytes(rows, v), v->len)))
					goto out;
				values[p] = fixed[p];
			} else {
				values[p] = copy_value_bytes(rows, v);
			}
		}
		bad |= buf_appendf(&sql, ")");
	}
	if (bad) {
		log_error("store: a copy batch of %s does not fit one statement", t->name);
		goto out;
	}
	res = PQexecParams(c->conn, sql.data, (int)np, NULL, values, lengths, formats, 1);
	if (PQresultStatus(res) == PGRES_COMMAND_OK) {
		rc = STORE_OK;
	} else {
		rc = pg_fail_code(pg, c, res, sql.data);
		if (rc == STORE_CONFLICT)
			log_error("postgres: %s: %s", t->name, PQresultErrorField(res,
									 PG_DIAG_MESSAGE_PRIMARY));
	}
	PQclear(res);
out:
	for (size_t i = 0; fixed && i < np; i++)
		free(fixed[i]);
	free(fixed);
	free(num);
	free(formats);
	free(lengths);
	free(values);
	buf_free(&sql);
	return rc;
}

/* The counter behind a serial key moves past the largest id now in the table (never
 * back: a target with rows of its own keeps its higher counter). */
static int advance_serial(struct pg *pg, struct pgconn *c, const struct copy_table *t)
{
	struct buf sql;
	int rc = STORE_ERROR;

	buf_init(&sql, 1024);
	if (!buf_appendf(&sql,
			 "SELECT setval(q.s::regclass, GREATEST(q.m,"
			 " COALESCE(pg_sequence_last_value(q.s::regclass), 0)))"
			 " FROM (SELECT pg_get_serial_sequence('outboxd.%s', '%s') AS s,"
			 " (SELECT max(%s) FROM outboxd.%s) AS m) q WHERE q.m IS NOT NULL",
			 t->name, t->cols[0].name, t->cols[0].name, t->name))
		PQclear(pg_run_sql(pg, c, sql.data, NULL, &rc));
	buf_free(&sql);
	return rc;
}

int pg_copy_write(store *st, const struct copy_batch *rows)
{
	const struct copy_table *t = rows->t;
	size_t per = PG_MAX_PARAMS / t->n_cols;
	struct pg *pg = pg_of(st);
	struct pgconn *c;
	int rc;

	if (!(c = pg_take(pg, ROLE_JANITOR, &rc)))
		return rc;
	rc = pg_tx_begin(pg, c);
	for (size_t first = 0; rc == STORE_OK && first < rows->n_rows; first += per)
		rc = insert_rows(pg, c, rows, first,
				 rows->n_rows - first < per ? rows->n_rows - first : per);
	if (rc == STORE_OK && t->serial_key)
		rc = advance_serial(pg, c, t);
	rc = pg_tx_end(pg, c, rc);
	pg_give(c);
	return rc;
}

int pg_copy_find(store *st, const struct copy_batch *keys, struct copy_batch *found)
{
	const struct copy_table *t = keys->t;
	struct pgarr arr[8];
	struct pg *pg = pg_of(st);
	struct params p = {0};
	struct pgconn *c;
	struct buf sql;
	PGresult *res;
	int rc = STORE_OK, bad;

	if (t->n_key > 8)
		return STORE_INVALID;
	buf_init(&sql, 4096);
	bad = buf_appendf(&sql, "SELECT ") || copy_names_sql(&sql, t, t->n_cols) ||
	      buf_appendf(&sql, " FROM outboxd.%s WHERE (", t->name) || copy_names_sql(&sql, t, t->n_key) ||
	      buf_appendf(&sql, ") IN (SELECT * FROM unnest(");
	for (size_t k = 0; k < t->n_key; k++) {
		int is_int = t->cols[k].type == COPY_INT;

		pg_arr_init(&arr[k], is_int ? OID_INT8 : OID_TEXT);
		bad |= buf_appendf(&sql, "%s$%zu::%s[]", k ? ", " : "", k + 1,
				   is_int ? "int8" : "text");
		for (size_t r = 0; r < keys->n_rows; r++) {
			const struct copy_value *v = copy_batch_row(keys, r) + k;

			if (is_int)
				pg_arr_i64(&arr[k], v->i);
			else
				pg_arr_add(&arr[k], copy_value_bytes(keys, v), v->len);
		}
		bad |= arr[k].failed;
		pg_p_arr(&p, &arr[k]);
	}
	bad |= buf_appendf(&sql, "))");
	if (bad)
		rc = STORE_ERROR;
	else if ((c = pg_take(pg, ROLE_JANITOR, &rc))) {
		if ((res = pg_run_sql(pg, c, sql.data, &p, &rc))) {
			for (int r = 0; rc == STORE_OK && r < PQntuples(res); r++)
				if (read_row(res, r, found))
					rc = STORE_ERROR;
			PQclear(res);
		}
		pg_give(c);
	}
	for (size_t k = 0; k < t->n_key; k++)
		pg_arr_free(&arr[k]);
	buf_free(&sql);
	return rc;
}

int pg_copy_check(store *st, char *err, size_t errlen)
{
	struct pg *pg = pg_of(st);
	const char **names = NULL;
	PGresult *cols = NULL, *ver = NULL;
	struct pgconn *c;
	int rc, n = 0;

	if (!(c = pg_take(pg, ROLE_JANITOR, &rc))) {
		snprintf(err, errlen, "postgres: %s", store_strerror(rc));
		return rc;
	}
	/* queue is not copied: it is derived from deliveries (schema/020_queue.sql), its
	 * rows made by the trigger on the deliveries a copy inserts. */
	cols = pg_run_sql(pg, c,
			  "SELECT table_name::text, column_name::text FROM information_schema.columns"
			  " WHERE table_schema = 'outboxd'"
			  " AND table_name NOT IN ('schema_migrations', 'queue')"
			  " ORDER BY table_name, ordinal_position", NULL, &rc);
	if (cols)
		ver = pg_run_sql(pg, c, "SELECT COALESCE(MAX(version), 0)::int8"
				 " FROM outboxd.schema_migrations", NULL, &rc);
	pg_give(c);
	if (!cols || !ver) {
		snprintf(err, errlen, "postgres: cannot read the schema: %s", store_strerror(rc));
		rc = STORE_ERROR;
		goto out;
	}
	if (pg_get_int(ver, 0, 0) != (int64_t)postgres_migrations_n) {
		snprintf(err, errlen, "postgres: schema version %lld, this outboxd's latest is %zu",
			 (long long)pg_get_int(ver, 0, 0), postgres_migrations_n);
		rc = STORE_ERROR;
		goto out;
	}
	n = PQntuples(cols);
	if (!(names = calloc((size_t)n * 2 + 1, sizeof(*names)))) {
		snprintf(err, errlen, "out of memory");
		rc = STORE_ERROR;
		goto out;
	}
	for (int i = 0; i < n; i++) {
		names[2 * i] = PQgetvalue(cols, i, 0);
		names[2 * i + 1] = PQgetvalue(cols, i, 1);
	}
	rc = store_copy_schema_compare(names, (size_t)n, pg_copy_skipped,
				       sizeof(pg_copy_skipped) / sizeof(pg_copy_skipped[0]), err,
				       errlen);
out:
	free(names);
	PQclear(cols);
	PQclear(ver);
	return rc;
}

/* Every outboxd names its sessions application_name "outboxd" (pg_connect_dsn), this
 * process's copy included, whose one session is left out. */
int pg_copy_in_use(store *st, int *in_use)
{
	struct pg *pg = pg_of(st);
	struct pgconn *c;
	PGresult *res;
	int rc;

	if (!(c = pg_take(pg, ROLE_JANITOR, &rc)))
		return rc;
	res = pg_run_sql(pg, c,
			 "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
			 " AND application_name = 'outboxd' AND pid <> pg_backend_pid()", NULL, &rc);
	if (res)
		*in_use = (int)pg_get_int(res, 0, 0);
	PQclear(res);
	pg_give(c);
	return rc;
}
