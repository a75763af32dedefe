/* copy.h: the store's tables as plain rows, for moving a store from one backend to
 * another (`outboxd store copy` and `outboxd store verify`, cli/store_copy.c).
 *
 * Every table of the data model is described once here (store_copy_tables: its columns
 * by name with a neutral type, its primary key), and each backend reads and writes rows
 * of that description with its own SQL (copy.c in store/sqlite/ and store/postgres/):
 * rows are read in primary-key order a page at a time and written a batch per
 * transaction, ids, timestamps and sealed texts exactly as stored. Nothing here opens a
 * sealed subscription config: it is ciphertext under the store's key and moves as text.
 *
 * Values are neutral: an integer (booleans are 0 or 1), a text or a byte string, or
 * NULL. A backend's own column types (PostgreSQL's boolean, smallint, bytea; SQLite's
 * INTEGER, BLOB) are its copy.c's business.
 *
 * Must not: be used on a store an outboxd serves (the copy assumes nothing changes under
 * it; store_copy_in_use says when another instance is connected). */
#ifndef OUTBOXD_STORE_COPY_H
#define OUTBOXD_STORE_COPY_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "util/buf.h"

enum copy_type {
	COPY_INT,               /* integers and booleans (0/1) */
	COPY_TEXT,              /* UTF-8 text */
	COPY_BLOB,              /* bytes */
};

/* Column flags. */
#define COPY_LEASE   1u     /* a lease column: written as NULL, so any instance may claim
                               the row at once (a lease names an instance of the old store) */
#define COPY_ERRTEXT 2u     /* an error text taken from a receiver's answer: stored as it
                               came on SQLite, as valid UTF-8 on PostgreSQL (invalid bytes
                               become '?', the PostgreSQL backend's own rule for it) */

struct copy_column {
	const char *name;
	enum copy_type type;
	unsigned flags;
};

struct copy_table {
	const char *name;
	const struct copy_column *cols;
	size_t n_cols;
	size_t n_key;           /* the first n_key columns are the primary key, in its order */
	int serial_key;         /* the key is a counter the database hands out (outbox.id):
	                           the target's counter is moved past the copied ids */
	int same_ok;            /* a copy into a store that has rows already: a row there
	                           with this key and the same values is no collision, and
	                           is not written again (store_meta: the sealing key's id) */
};

/* The tables in the order a copy writes them (a row's foreign keys point at tables
 * before it). schema_migrations is not among them: each store keeps its own backend's
 * migration record, and both are at their latest version (store_copy_check). */
extern const struct copy_table store_copy_tables[];
extern const size_t store_copy_tables_n;

/* Columns one backend has and the description leaves out, each for a stated reason (a
 * backend's copy_check accepts these and no other column it does not know). */
struct copy_skipped {
	const char *table, *column;
};

/* One value of a row. Text and bytes live in the batch's arena (copy_value_bytes). */
struct copy_value {
	int null;
	int64_t i;              /* COPY_INT */
	size_t off, len;        /* COPY_TEXT, COPY_BLOB: arena offset and length (the arena
	                           keeps a NUL after each, so a text is a C string too) */
};

/* Rows of one table: n_rows * t->n_cols values, row-major. */
struct copy_batch {
	const struct copy_table *t;
	size_t n_rows, cap_rows;
	struct copy_value *v;
	struct buf arena;
};

/* A page of rows stops at COPY_BATCH_BYTES of text and bytes (at least one row is read
 * whatever its size): a page of large payloads stays bounded in memory. */
#define COPY_BATCH_ROWS 1000
#define COPY_BATCH_BYTES (16u << 20)

void copy_batch_init(struct copy_batch *b, const struct copy_table *t);
void copy_batch_reset(struct copy_batch *b);      /* no rows; keeps memory */
void copy_batch_free(struct copy_batch *b);
/* Appends a row of NULLs; returns its values (valid until the next add), or NULL when
 * memory runs out (logged). */
struct copy_value *copy_batch_add(struct copy_batch *b);
/* Sets value col of row (from copy_batch_add) to the len bytes at p (copied). 0, or -1
 * when memory runs out or the arena's cap is reached (logged). */
int copy_batch_set_bytes(struct copy_batch *b, struct copy_value *row, size_t col,
			 const void *p, size_t len);
static inline void copy_batch_set_int(struct copy_value *row, size_t col, int64_t i)
{
	row[col].null = 0;
	row[col].i = i;
}
/* Row r's values (borrowed). */
static inline const struct copy_value *copy_batch_row(const struct copy_batch *b, size_t r)
{
	return b->v + r * b->t->n_cols;
}
/* The bytes of a text or byte value (borrowed; NUL-terminated). */
static inline const char *copy_value_bytes(const struct copy_batch *b, const struct copy_value *v)
{
	return b->arena.data ? b->arena.data + v->off : "";
}
/* Appends row r of src to dst (same table). 0, or -1 when memory runs out. */
int copy_batch_take(struct copy_batch *dst, const struct copy_batch *src, size_t r);
/* 1 when row a of x and row b of y hold the same values (copy_rows_equal), or the same
 * primary key (copy_keys_equal). */
int copy_rows_equal(const struct copy_batch *x, size_t a, const struct copy_batch *y, size_t b);
int copy_keys_equal(const struct copy_batch *x, size_t a, const struct copy_batch *y, size_t b);

/* An error text made valid UTF-8: each byte that does not start a valid character
 * becomes '?' (COPY_ERRTEXT). Returns a copy (free it), or NULL when memory runs out. */
char *copy_text_fix(const char *t, size_t len);

/* ---- reading, writing, checking ------------------------------------------------------ */

/* Where a table's reading has got to: the primary key of the last row read. */
struct copy_cursor {
	struct copy_batch last;     /* 0 rows at the start, then 1 */
	int done;                   /* the last page has been read */
};

void copy_cursor_init(struct copy_cursor *c, const struct copy_table *t);
void copy_cursor_free(struct copy_cursor *c);

/* The next page of t's rows in primary-key order (at most limit rows, fewer at
 * COPY_BATCH_BYTES) into out (reset first); 0 rows and c->done when the table is read.
 * Returns a store code. */
int store_copy_read(store *st, struct copy_cursor *c, size_t limit, struct copy_batch *out);

/* Inserts every row of rows in one transaction, lease columns as NULL; a serial key's
 * counter moves past the largest id. STORE_CONFLICT when a key exists already (nothing of
 * the batch is written). */
int store_copy_write(store *st, const struct copy_batch *rows);

/* The rows of st whose primary keys are those of keys' rows, appended to found (reset
 * first), in no particular order. Returns a store code. */
int store_copy_find(store *st, const struct copy_batch *keys, struct copy_batch *found);

/* Checks that st's tables and columns are those of store_copy_tables (plus the columns
 * its backend skips, each for a stated reason) and that its schema is at the latest
 * version this outboxd knows. STORE_OK, or STORE_ERROR with err saying what differs. */
int store_copy_check(store *st, char *err, size_t errlen);

/* Whether another outboxd is connected to st's database (PostgreSQL: other sessions
 * named outboxd on the same database). STORE_OK when none: *in_use 0; else *in_use is the
 * number of sessions. SQLite answers 0: the owner lock store_open takes already refuses
 * a store a daemon holds. */
int store_copy_in_use(store *st, int *in_use);

/* Appends "c1, c2, ..." (the names of t's first n columns) to b, for the backends' SQL.
 * 0, or -1 when memory runs out. */
int copy_names_sql(struct buf *b, const struct copy_table *t, size_t n);

/* ---- checksums --------------------------------------------------------------------- */

/* A table's content as a count and a SHA-256 over each row's canonical text, in the
 * order the rows are added (primary-key order): every column in the description's order
 * as "N;" (NULL), "I<decimal>;", "T<length>:<bytes>;" or "B<length>:<bytes>;", then
 * "\n". Lease columns count as NULL and error texts as copy_text_fix makes them: the
 * form of the row as a copy writes it, so a source and its copy sum the same. */
struct copy_sum {
	int64_t rows;
	void *ctx;                  /* the digest in progress */
	char hex[65];               /* after copy_sum_final */
};

int copy_sum_init(struct copy_sum *s);           /* 0, or -1 (logged) */
int copy_sum_add(struct copy_sum *s, const struct copy_batch *b);   /* every row of b */
int copy_sum_final(struct copy_sum *s);          /* fills hex; frees the digest */
void copy_sum_free(struct copy_sum *s);          /* after a failure */

#endif
