/* copy.c: the description of the store's tables for a copy between backends, the rows
 * a copy moves (batches with their arena), the wrappers of the backends' copy methods,
 * and the content checksum both sides of a copy are compared by (copy.h).
 *
 * Must not: open a sealed subscription config, print a value, or write a store other
 * than through its backend's copy_write. */
#include "store/copy.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/backend.h"
#include "util/log.h"
#include "util/utf8.h"

/* ---- the tables ------------------------------------------------------------------------ */

#define COLS(a) a, sizeof(a) / sizeof(a[0])

static const struct copy_column events_cols[] = {
	{"id", COPY_TEXT, 0},
	{"event_type", COPY_TEXT, 0},
	{"source", COPY_TEXT, 0},
	{"source_event_id", COPY_TEXT, 0},
	{"partition_key", COPY_TEXT, 0},
	{"content_type", COPY_TEXT, 0},
	{"payload", COPY_BLOB, 0},
	{"created_at", COPY_INT, 0},
	{"traceparent", COPY_TEXT, 0},
	{"webhook_id", COPY_TEXT, 0},
	{"envelope", COPY_BLOB, 0},
};

static const struct copy_column deliveries_cols[] = {
	{"id", COPY_TEXT, 0},
	{"event_id", COPY_TEXT, 0},
	{"subscription_id", COPY_TEXT, 0},
	{"event_type", COPY_TEXT, 0},
	{"status", COPY_TEXT, 0},
	{"replay", COPY_INT, 0},
	{"attempt_count", COPY_INT, 0},
	{"retry_count", COPY_INT, 0},
	{"next_attempt_at", COPY_INT, 0},          /* a pending delivery keeps its due time */
	{"last_code", COPY_INT, 0},
	{"last_message", COPY_TEXT, COPY_ERRTEXT},
	{"last_cause", COPY_TEXT, COPY_ERRTEXT},
	{"lease_owner", COPY_TEXT, COPY_LEASE},
	{"lease_until", COPY_INT, COPY_LEASE},
	{"created_at", COPY_INT, 0},
	{"updated_at", COPY_INT, 0},
	{"processed_at", COPY_INT, 0},
	{"delay_actions", COPY_INT, 0},
	{"order_key", COPY_TEXT, 0},
	{"blocked", COPY_INT, 0},
	{"failing_since", COPY_INT, 0},
	{"starts_scheduled", COPY_INT, 0},
	{"dead_letter_pending", COPY_INT, 0},
};

static const struct copy_column attempts_cols[] = {
	{"delivery_id", COPY_TEXT, 0},
	{"n", COPY_INT, 0},
	{"kind", COPY_TEXT, 0},
	{"started_at", COPY_INT, 0},
	{"duration_ms", COPY_INT, 0},
	{"code", COPY_INT, 0},
	{"message", COPY_TEXT, COPY_ERRTEXT},
	{"cause", COPY_TEXT, COPY_ERRTEXT},
	{"not_sent", COPY_INT, 0},
};

/* The per-minute attempt counts and newest failures (/v1/stats, the console's series):
 * copied as they are, so the copy shows the same history. */
static const struct copy_column attempt_minutes_cols[] = {
	{"minute", COPY_INT, 0},
	{"subscription_id", COPY_TEXT, 0},
	{"duration_ms", COPY_INT, 0},
	{"owner", COPY_TEXT, 0},
	{"succeeded", COPY_INT, 0},
	{"client_error", COPY_INT, 0},
	{"server_error", COPY_INT, 0},
};

static const struct copy_column attempt_errors_cols[] = {
	{"subscription_id", COPY_TEXT, 0},
	{"owner", COPY_TEXT, 0},
	{"at", COPY_INT, 0},
	{"code", COPY_INT, 0},
	{"message", COPY_TEXT, COPY_ERRTEXT},
};

static const struct copy_column subscriptions_cols[] = {
	{"id", COPY_TEXT, 0},
	{"name", COPY_TEXT, 0},
	{"config", COPY_TEXT, 0},                  /* sealed: moved as the ciphertext it is */
	{"enabled", COPY_INT, 0},
	{"created_at", COPY_INT, 0},
	{"updated_at", COPY_INT, 0},
	{"ordering", COPY_INT, 0},
};

static const struct copy_column tokens_cols[] = {
	{"id", COPY_TEXT, 0},
	{"name", COPY_TEXT, 0},
	{"scopes", COPY_TEXT, 0},
	{"hash", COPY_TEXT, 0},                    /* SHA-256 of the token, never the token */
	{"prefix", COPY_TEXT, 0},
	{"actor", COPY_TEXT, 0},
	{"created_at", COPY_INT, 0},
	{"expires_at", COPY_INT, 0},
	{"last_used_at", COPY_INT, 0},
};

static const struct copy_column jobs_cols[] = {
	{"id", COPY_TEXT, 0},
	{"kind", COPY_TEXT, 0},
	{"state", COPY_TEXT, 0},
	{"filter", COPY_TEXT, 0},
	{"force", COPY_INT, 0},
	{"rate", COPY_INT, 0},
	{"matched", COPY_INT, 0},
	{"done", COPY_INT, 0},
	{"cursor", COPY_TEXT, 0},
	{"actor", COPY_TEXT, 0},
	{"error", COPY_TEXT, 0},
	{"created_at", COPY_INT, 0},
	{"updated_at", COPY_INT, 0},
};

static const struct copy_column audit_cols[] = {
	{"id", COPY_TEXT, 0},
	{"at", COPY_INT, 0},
	{"actor", COPY_TEXT, 0},
	{"action", COPY_TEXT, 0},
	{"target", COPY_TEXT, 0},
	{"count", COPY_INT, 0},
	{"detail", COPY_TEXT, 0},
};

/* The sealing key's id: the copy is opened with the same key, and an instance started
 * with another one refuses the copy as it would refuse the original. */
static const struct copy_column store_meta_cols[] = {
	{"name", COPY_TEXT, 0},
	{"value", COPY_TEXT, 0},
};

/* Rows a producer inserted that the relay has not moved into events yet: copied with
 * their ids (their order is the relay's order). */
static const struct copy_column outbox_cols[] = {
	{"id", COPY_INT, 0},
	{"event_type", COPY_TEXT, 0},
	{"source", COPY_TEXT, 0},
	{"source_event_id", COPY_TEXT, 0},
	{"partition_key", COPY_TEXT, 0},
	{"payload", COPY_BLOB, 0},
	{"content_type", COPY_TEXT, 0},
	{"created_at", COPY_INT, 0},
};

const struct copy_table store_copy_tables[] = {
	{"subscriptions", COLS(subscriptions_cols), 1, 0, 0},
	{"events", COLS(events_cols), 1, 0, 0},
	{"deliveries", COLS(deliveries_cols), 1, 0, 0},
	{"attempts", COLS(attempts_cols), 2, 0, 0},
	{"attempt_minutes", COLS(attempt_minutes_cols), 4, 0, 0},
	{"attempt_errors", COLS(attempt_errors_cols), 2, 0, 0},
	{"tokens", COLS(tokens_cols), 1, 0, 0},
	{"jobs", COLS(jobs_cols), 1, 0, 0},
	{"audit", COLS(audit_cols), 1, 0, 0},
	{"store_meta", COLS(store_meta_cols), 1, 0, 1},
	{"outbox", COLS(outbox_cols), 1, 1, 0},
};
const size_t store_copy_tables_n = sizeof(store_copy_tables) / sizeof(store_copy_tables[0]);

/* ---- batches ----------------------------------------------------------------------------- */

void copy_batch_init(struct copy_batch *b, const struct copy_table *t)
{
	memset(b, 0, sizeof(*b));
	b->t = t;
	/* a page stops at COPY_BATCH_BYTES after the row that crossed it: room for one more
	 * row of the largest size a field may have */
	buf_init(&b->arena, (size_t)COPY_BATCH_BYTES + ((size_t)1 << 30));
}

void copy_batch_reset(struct copy_batch *b)
{
	b->n_rows = 0;
	buf_reset(&b->arena);
}

void copy_batch_free(struct copy_batch *b)
{
	free(b->v);
	buf_free(&b->arena);
	b->v = NULL;
	b->n_rows = b->cap_rows = 0;
}

struct copy_value *copy_batch_add(struct copy_batch *b)
{
	size_t nc = b->t->n_cols;
	struct copy_value *row;

	if (b->n_rows == b->cap_rows) {
		size_t cap = b->cap_rows ? b->cap_rows * 2 : 64;
		struct copy_value *v = realloc(b->v, cap * nc * sizeof(*v));

		if (!v) {
			log_error("store: out of memory");
			return NULL;
		}
		b->v = v;
		b->cap_rows = cap;
	}
	row = b->v + b->n_rows++ * nc;
	for (size_t i = 0; i < nc; i++)
		row[i] = (struct copy_value){.null = 1};
	return row;
}

int copy_batch_set_bytes(struct copy_batch *b, struct copy_value *row, size_t col,
			 const void *p, size_t len)
{
	size_t off = b->arena.len;

	if ((len && buf_append(&b->arena, p, len)) || buf_append(&b->arena, "", 1)) {
		log_error("store: a copy batch is out of memory (%zu bytes)", b->arena.len);
		return -1;
	}
	row[col] = (struct copy_value){.off = off, .len = len};
	return 0;
}

int copy_batch_take(struct copy_batch *dst, const struct copy_batch *src, size_t r)
{
	const struct copy_value *from = copy_batch_row(src, r);
	struct copy_value *row = copy_batch_add(dst);

	if (!row)
		return -1;
	for (size_t c = 0; c < src->t->n_cols; c++) {
		if (from[c].null)
			continue;
		if (src->t->cols[c].type == COPY_INT)
			copy_batch_set_int(row, c, from[c].i);
		else if (copy_batch_set_bytes(dst, row, c, copy_value_bytes(src, &from[c]),
					      from[c].len))
			return -1;
	}
	return 0;
}

static int values_equal(const struct copy_batch *x, size_t a, const struct copy_batch *y,
			size_t b, size_t n_cols)
{
	const struct copy_value *u = copy_batch_row(x, a), *w = copy_batch_row(y, b);

	for (size_t c = 0; c < n_cols; c++) {
		if (u[c].null != w[c].null)
			return 0;
		if (u[c].null)
			continue;
		if (x->t->cols[c].type == COPY_INT ? u[c].i != w[c].i
		    : u[c].len != w[c].len || memcmp(copy_value_bytes(x, &u[c]),
						      copy_value_bytes(y, &w[c]), u[c].len) != 0)
			return 0;
	}
	return 1;
}

int copy_rows_equal(const struct copy_batch *x, size_t a, const struct copy_batch *y, size_t b)
{
	return values_equal(x, a, y, b, x->t->n_cols);
}

int copy_keys_equal(const struct copy_batch *x, size_t a, const struct copy_batch *y, size_t b)
{
	return values_equal(x, a, y, b, x->t->n_key);
}

char *copy_text_fix(const char *t, size_t len)
{
	const unsigned char *s = (const unsigned char *)t;
	char *out = malloc(len + 1);
	size_t i = 0;

	if (!out) {
		log_error("store: out of memory");
		return NULL;
	}
	while (i < len) {
		size_t ok = utf8_valid_prefix(s + i, len - i);

		memcpy(out + i, s + i, ok);
		i += ok;
		if (i < len)
			out[i++] = '?';
	}
	out[len] = '\0';
	return out;
}

/* ---- the backends' methods -------------------------------------------------------------- */

void copy_cursor_init(struct copy_cursor *c, const struct copy_table *t)
{
	copy_batch_init(&c->last, t);
	c->done = 0;
}

void copy_cursor_free(struct copy_cursor *c)
{
	copy_batch_free(&c->last);
}

int store_copy_read(store *st, struct copy_cursor *c, size_t limit, struct copy_batch *out)
{
	const struct copy_table *t = c->last.t;
	struct copy_batch key;
	int rc;

	copy_batch_reset(out);
	if (c->done)
		return STORE_OK;
	if (!limit || out->t != t)
		return STORE_INVALID;
	rc = st->methods->copy_read(st, t, c->last.n_rows ? &c->last : NULL, limit, out);
	if (rc != STORE_OK)
		return rc;
	if (out->n_rows == 0) {
		c->done = 1;
		return STORE_OK;
	}
	/* The next page starts after this page's last row: keep its key (the whole row, of
	 * which the backends read the first n_key values). */
	copy_batch_init(&key, t);
	if (copy_batch_take(&key, out, out->n_rows - 1)) {
		copy_batch_free(&key);
		return STORE_ERROR;
	}
	copy_batch_free(&c->last);
	c->last = key;
	return STORE_OK;
}

int store_copy_write(store *st, const struct copy_batch *rows)
{
	if (!rows->n_rows)
		return STORE_OK;
	return st->methods->copy_write(st, rows);
}

int store_copy_find(store *st, const struct copy_batch *keys, struct copy_batch *found)
{
	copy_batch_reset(found);
	if (found->t != keys->t)
		return STORE_INVALID;
	if (!keys->n_rows)
		return STORE_OK;
	return st->methods->copy_find(st, keys, found);
}

int store_copy_check(store *st, char *err, size_t errlen)
{
	return st->methods->copy_check(st, err, errlen);
}

int store_copy_in_use(store *st, int *in_use)
{
	*in_use = 0;
	if (!st->methods->copy_in_use)
		return STORE_OK;
	return st->methods->copy_in_use(st, in_use);
}

/* ---- checksums -------------------------------------------------------------------------- */

int copy_sum_init(struct copy_sum *s)
{
	memset(s, 0, sizeof(*s));
	s->ctx = EVP_MD_CTX_new();
	if (!s->ctx || EVP_DigestInit_ex(s->ctx, EVP_sha256(), NULL) != 1) {
		log_error("store: cannot start a SHA-256 digest");
		copy_sum_free(s);
		return -1;
	}
	return 0;
}

static int sum_bytes(struct copy_sum *s, char tag, const char *p, size_t len)
{
	char head[32];
	int n = snprintf(head, sizeof(head), "%c%zu:", tag, len);

	return EVP_DigestUpdate(s->ctx, head, (size_t)n) != 1 ||
	       EVP_DigestUpdate(s->ctx, p, len) != 1 || EVP_DigestUpdate(s->ctx, ";", 1) != 1;
}

int copy_sum_add(struct copy_sum *s, const struct copy_batch *b)
{
	const struct copy_table *t = b->t;
	int bad = 0;

	for (size_t r = 0; r < b->n_rows && !bad; r++) {
		const struct copy_value *row = copy_batch_row(b, r);

		for (size_t c = 0; c < t->n_cols && !bad; c++) {
			const struct copy_column *col = &t->cols[c];
			const struct copy_value *v = &row[c];
			char num[32];

			if (v->null || (col->flags & COPY_LEASE)) {
				bad = EVP_DigestUpdate(s->ctx, "N;", 2) != 1;
			} else if (col->type == COPY_INT) {
				int n = snprintf(num, sizeof(num), "I%lld;", (long long)v->i);
				bad = EVP_DigestUpdate(s->ctx, num, (size_t)n) != 1;
			} else if (col->flags & COPY_ERRTEXT) {
				char *fixed = copy_text_fix(copy_value_bytes(b, v), v->len);
				bad = !fixed || sum_bytes(s, 'T', fixed, v->len);
				free(fixed);
			} else {
				bad = sum_bytes(s, col->type == COPY_TEXT ? 'T' : 'B',
						copy_value_bytes(b, v), v->len);
			}
		}
		bad |= EVP_DigestUpdate(s->ctx, "\n", 1) != 1;
		s->rows++;
	}
	if (bad)
		log_error("store: the checksum of table %s failed", t->name);
	return bad ? -1 : 0;
}

int copy_sum_final(struct copy_sum *s)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int len = 0;
	int rc = EVP_DigestFinal_ex(s->ctx, md, &len) == 1 && len == 32 ? 0 : -1;

	for (unsigned int i = 0; rc == 0 && i < len; i++)
		snprintf(s->hex + 2 * i, 3, "%02x", md[i]);
	EVP_MD_CTX_free(s->ctx);
	s->ctx = NULL;
	return rc;
}

void copy_sum_free(struct copy_sum *s)
{
	EVP_MD_CTX_free(s->ctx);
	s->ctx = NULL;
}

/* ---- the schema a copy expects ------------------------------------------------------- */

static const struct copy_table *table_named(const char *name)
{
	for (size_t i = 0; i < store_copy_tables_n; i++)
		if (strcmp(store_copy_tables[i].name, name) == 0)
			return &store_copy_tables[i];
	return NULL;
}

static int described(const struct copy_table *t, const char *column)
{
	for (size_t c = 0; c < t->n_cols; c++)
		if (strcmp(t->cols[c].name, column) == 0)
			return 1;
	return 0;
}

static int skipped_column(const struct copy_skipped *skipped, size_t n_skipped,
			  const char *table, const char *column)
{
	for (size_t i = 0; i < n_skipped; i++)
		if (strcmp(skipped[i].table, table) == 0 && strcmp(skipped[i].column, column) == 0)
			return 1;
	return 0;
}

int store_copy_schema_compare(const char *const *names, size_t n,
			      const struct copy_skipped *skipped, size_t n_skipped, char *err,
			      size_t errlen)
{
	/* A table or column this outboxd's copy does not know would be left behind: a
	 * migration that adds one must add it to store_copy_tables too. */
	for (size_t i = 0; i < n; i++) {
		const char *table = names[2 * i], *column = names[2 * i + 1];
		const struct copy_table *t = table_named(table);

		if (!t) {
			snprintf(err, errlen, "table %s is not one the copy knows", table);
			return STORE_ERROR;
		}
		if (!described(t, column) && !skipped_column(skipped, n_skipped, table, column)) {
			snprintf(err, errlen, "column %s.%s is not one the copy knows", table, column);
			return STORE_ERROR;
		}
	}
	for (size_t k = 0; k < store_copy_tables_n; k++) {
		const struct copy_table *t = &store_copy_tables[k];

		for (size_t c = 0; c < t->n_cols; c++) {
			size_t i = 0;

			while (i < n && (strcmp(names[2 * i], t->name) != 0 ||
					 strcmp(names[2 * i + 1], t->cols[c].name) != 0))
				i++;
			if (i == n) {
				snprintf(err, errlen, "column %s.%s is missing", t->name,
					 t->cols[c].name);
				return STORE_ERROR;
			}
		}
	}
	return STORE_OK;
}

int copy_names_sql(struct buf *b, const struct copy_table *t, size_t n)
{
	int bad = 0;

	for (size_t c = 0; c < n && c < t->n_cols; c++)
		bad |= buf_appendf(b, "%s%s", c ? ", " : "", t->cols[c].name);
	return bad ? -1 : 0;
}
