/* rows.c: the PostgreSQL backend's parameters and results: text and binary
 * parameters, the binary arrays that batches travel as, reading columns and rows, and
 * running a prepared statement on a role's connection. Must not log a value it binds. */
#include "store/postgres/pg_int.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/clock.h"
#include "util/log.h"
#include "util/utf8.h"
#include "util/uuid.h"

/* ---- parameters and results ---------------------------------------------- */

void pg_p_text(struct params *p, const char *s)
{
	p->values[p->n] = s;
	p->lengths[p->n] = 0;
	p->formats[p->n++] = 0;
}

void pg_p_i64(struct params *p, int64_t v)
{
	snprintf(p->num[p->n], sizeof(p->num[0]), "%lld", (long long)v);
	pg_p_text(p, p->num[p->n]);
}

void pg_p_bool(struct params *p, int b)
{
	pg_p_text(p, b ? "t" : "f");
}

static void p_bin(struct params *p, const void *data, size_t len)
{
	p->values[p->n] = data;
	p->lengths[p->n] = (int)len;
	p->formats[p->n++] = 1;
}

void pg_arr_init(struct pgarr *a, uint32_t oid)
{
	memset(a, 0, sizeof(*a));
	a->oid = oid;
	a->len = ARR_HEADER;
}

void pg_arr_free(struct pgarr *a)
{
	free(a->buf);
	a->buf = NULL;
}

static int arr_reserve(struct pgarr *a, size_t more)
{
	size_t want = a->len + more;
	size_t ncap;
	char *q;

	if (a->failed)
		return -1;
	if (want > ARRAY_MAX) {
		log_error("postgres: a batch exceeds %u bytes", ARRAY_MAX);
		a->failed = 1;
		return -1;
	}
	if (want <= a->cap)
		return 0;
	ncap = a->cap ? a->cap * 2 : 1024;
	while (ncap < want)
		ncap *= 2;
	q = realloc(a->buf, ncap);
	if (!q) {
		log_error("store: out of memory");
		a->failed = 1;
		return -1;
	}
	a->buf = q;
	a->cap = ncap;
	return 0;
}

static void put32(char *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, 4);
}

void pg_arr_add(struct pgarr *a, const void *data, size_t len)
{
	if (arr_reserve(a, 4 + len))
		return;
	put32(a->buf + a->len, (uint32_t)len);
	if (len)
		memcpy(a->buf + a->len + 4, data, len);
	a->len += 4 + len;
	a->n++;
}

void pg_arr_null(struct pgarr *a)
{
	if (arr_reserve(a, 4))
		return;
	put32(a->buf + a->len, 0xffffffffu);
	a->len += 4;
	a->n++;
	a->has_null = 1;
}

void pg_arr_text(struct pgarr *a, const char *s)
{
	if (s)
		pg_arr_add(a, s, strlen(s));
	else
		pg_arr_null(a);
}

void pg_arr_i64(struct pgarr *a, int64_t v)
{
	uint64_t be = htobe64((uint64_t)v);

	pg_arr_add(a, &be, 8);
}

void pg_arr_time(struct pgarr *a, int64_t v)
{
	if (v)
		pg_arr_i64(a, v);
	else
		pg_arr_null(a);
}

void pg_arr_i32(struct pgarr *a, int32_t v)
{
	uint32_t be = htobe32((uint32_t)v);

	pg_arr_add(a, &be, 4);
}

void pg_arr_bool(struct pgarr *a, int b)
{
	char v = b ? 1 : 0;

	pg_arr_add(a, &v, 1);
}

/* Error text (attempt message and cause, last_message/last_cause): at most
 * ERROR_TEXT_MAX bytes cut on a character boundary, and valid UTF-8, which PostgreSQL
 * insists on where SQLite does not: a response body in another encoding must not make
 * a batch of results unwritable. Invalid bytes become '?'. */
void pg_arr_error_text(struct pgarr *a, const char *t)
{
	const unsigned char *s = (const unsigned char *)t;
	unsigned char out[ERROR_TEXT_MAX];
	size_t len, o = 0, i = 0;

	if (!t) {
		pg_arr_null(a);
		return;
	}
	len = strnlen(t, ERROR_TEXT_MAX);
	while (i < len) {
		size_t ok = utf8_valid_prefix(s + i, len - i);

		memcpy(out + o, s + i, ok);
		o += ok;
		i += ok;
		if (i < len) {
			/* A character cut by the length cap ends the text; anything else invalid
			 * is replaced. */
			if (len == ERROR_TEXT_MAX && len - i < 4 && (s[i] & 0xc0) == 0xc0 &&
			    utf8_valid_prefix(s + i, len - i) == 0) {
				int cut = 1;

				for (size_t j = i + 1; j < len; j++)
					cut &= (s[j] & 0xc0) == 0x80;
				if (cut)
					break;
			}
			out[o++] = '?';
			i++;
		}
	}
	pg_arr_add(a, out, o);
}

/* Finishes the header; the array is then passed with pg_p_arr. */
static void arr_finish(struct pgarr *a)
{
	if (arr_reserve(a, 0))
		return;
	if (!a->buf && arr_reserve(a, ARR_HEADER + 1))
		return;
	if (a->n == 0) {
		/* An empty array has no dimensions. */
		put32(a->buf, 0);
		put32(a->buf + 4, 0);
		put32(a->buf + 8, a->oid);
		a->len = 12;
		return;
	}
	put32(a->buf, 1);
	put32(a->buf + 4, a->has_null ? 1 : 0);
	put32(a->buf + 8, a->oid);
	put32(a->buf + 12, a->n);
	put32(a->buf + 16, 1);
}

void pg_p_arr(struct params *p, struct pgarr *a)
{
	arr_finish(a);
	p_bin(p, a->buf, a->len);
}

/* Integer of any width (bool, int2, int4, int8) from a binary result; 0 for NULL. */
int64_t pg_get_int(const PGresult *r, int row, int col)
{
	const char *v;
	int16_t i16;
	int32_t i32;
	int64_t i64;

	if (PQgetisnull(r, row, col))
		return 0;
	v = PQgetvalue(r, row, col);
	switch (PQgetlength(r, row, col)) {
	case 1:
		return (unsigned char)v[0];
	case 2:
		memcpy(&i16, v, 2);
		return (int16_t)be16toh((uint16_t)i16);
	case 4:
		memcpy(&i32, v, 4);
		return (int32_t)be32toh((uint32_t)i32);
	case 8:
		memcpy(&i64, v, 8);
		return (int64_t)be64toh((uint64_t)i64);
	default:
		return 0;
	}
}

void pg_get_id(const PGresult *r, int row, int col, char dst[UUID_STR_LEN])
{
	snprintf(dst, UUID_STR_LEN, "%s", PQgetisnull(r, row, col) ? "" : PQgetvalue(r, row, col));
}

/* Copies a text column into *out (NULL for SQL NULL). 0, or -1 when memory runs out. */
int pg_get_dup(const PGresult *r, int row, int col, char **out)
{
	int len;

	*out = NULL;
	if (PQgetisnull(r, row, col))
		return 0;
	len = PQgetlength(r, row, col);
	*out = malloc((size_t)len + 1);
	if (!*out) {
		log_error("store: out of memory");
		return -1;
	}
	memcpy(*out, PQgetvalue(r, row, col), (size_t)len);
	(*out)[len] = '\0';
	return 0;
}

/* Runs statement k on c (locked and connected), preparing it first if this connection
 * has not yet. Results come back in binary. Returns the result (PQclear it) or NULL with
 * *rc set to the store code. */
PGresult *pg_run(struct pg *pg, struct pgconn *c, enum stmt k, const struct params *p,
		     int *rc)
{
	char name[16];
	PGresult *res;

	snprintf(name, sizeof(name), "obx%d", (int)k);
	if (!(c->prepared & (1ull << k))) {
		res = PQprepare(c->conn, name, pg_sql_of[k], 0, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			*rc = pg_fail_code(pg, c, res, pg_sql_of[k]);
			PQclear(res);
			return NULL;
		}
		PQclear(res);
		c->prepared |= 1ull << k;
	}
	res = PQexecPrepared(c->conn, name, p ? p->n : 0, p ? p->values : NULL,
			     p ? p->lengths : NULL, p ? p->formats : NULL, 1);
	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
		*rc = pg_fail_code(pg, c, res, pg_sql_of[k]);
		PQclear(res);
		return NULL;
	}
	*rc = STORE_OK;
	return res;
}

/* pg_run() for statements whose rows are not needed; *changed (may be NULL) gets the
 * number of rows affected. */
int pg_run_done(struct pg *pg, struct pgconn *c, enum stmt k, const struct params *p,
		    size_t *changed)
{
	int rc;
	PGresult *res = pg_run(pg, c, k, p, &rc);

	if (res && changed)
		*changed = (size_t)strtoull(PQcmdTuples(res), NULL, 10);
	PQclear(res);
	return rc;
}

/* A statement outside the prepared set (BEGIN, COMMIT, dynamic SQL) with text
 * parameters, binary results. */
PGresult *pg_run_sql(struct pg *pg, struct pgconn *c, const char *sql,
			 const struct params *p, int *rc)
{
	PGresult *res = PQexecParams(c->conn, sql, p ? p->n : 0, NULL, p ? p->values : NULL,
				     p ? p->lengths : NULL, p ? p->formats : NULL, 1);

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
		*rc = pg_fail_code(pg, c, res, sql);
		PQclear(res);
		return NULL;
	}
	*rc = STORE_OK;
	return res;
}

static int exec_simple(struct pg *pg, struct pgconn *c, const char *sql)
{
	int rc;

	PQclear(pg_run_sql(pg, c, sql, NULL, &rc));
	return rc;
}

int pg_tx_begin(struct pg *pg, struct pgconn *c)
{
	return exec_simple(pg, c, "BEGIN");
}

/* Commits when rc is STORE_OK; pg_give() rolls back otherwise. Returns the final code. */
int pg_tx_end(struct pg *pg, struct pgconn *c, int rc)
{
	if (rc == STORE_OK)
		rc = exec_simple(pg, c, "COMMIT");
	return rc;
}
