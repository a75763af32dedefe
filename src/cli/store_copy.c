/* store_copy.c: `outboxd store copy|verify --from DSN --to DSN` (see store_copy.h).
 *
 * The order of a copy: both stores open (migrated) and checked against the copy's
 * description of the tables, neither in use by an outboxd, the target empty (or, with
 * --into-existing, holding none of the source's keys: checked over every table before
 * anything is written), then each table a page at a time, one transaction per page, then
 * the verification. An interrupted copy leaves the target partly filled: copy again into
 * a fresh database (or empty it), the source was never changed.
 *
 * Must not: print a DSN (it may hold a password), a value of a row (sealed configs, token
 * hashes), or write to the source. */
#include "cli/store_copy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/copy.h"
#include "store/store.h"
#include "util/clock.h"

#define COPY_OWNER "outboxd-store-copy" /* the lease owner the stores are opened as (no
                                           lease is taken) */

void store_cmd_usage(FILE *out)
{
	fputs("usage: outboxd store copy --from DSN --to DSN [--into-existing]\n"
	      "       outboxd store verify --from DSN --to DSN [--into-existing]\n\n"
	      "copy    copies every table of the store at --from into the store at --to, with\n"
	      "        outboxd stopped on both: DSN is sqlite:PATH or postgres://... (the\n"
	      "        settings' db). The target is migrated as outboxd serve would, must be\n"
	      "        empty (--into-existing: may hold rows, but none with a key of the\n"
	      "        source's), and gets ids, times, statuses, attempt histories, sealed\n"
	      "        subscription credentials (start it with the same secret key), token\n"
	      "        hashes, audit entries and jobs as they are; pending deliveries keep\n"
	      "        their due times, leases are cleared. One transaction per 1,000 rows;\n"
	      "        progress on stderr when it is a terminal. Ends with verify.\n"
	      "verify  compares each table on both sides: its row count and a SHA-256 of its\n"
	      "        rows read back through each backend in primary-key order\n"
	      "        (--into-existing: the target's rows with the source's keys only).\n\n"
	      "Exit codes: 0 copied and the same on both sides, 1 refused, failed or a table\n"
	      "differs, 2 bad usage.\n",
	      out);
}

struct opts {
	const char *from, *to;
	int into_existing;
};

struct side {
	const char *role;           /* "source", "target" */
	store *st;
};

static int progress_on;         /* stderr is a terminal */

/* ---- opening ----------------------------------------------------------------------------- */

/* Opens the store at dsn (its migrations applied, as serve would) and checks its tables
 * against the copy's description; with must_exist, a SQLite file that is not there is
 * refused rather than created. 0, or -1 after a message. */
static int side_open(struct side *s, const char *dsn, int must_exist)
{
	char err[512];
	int rc;

	/* store_open creates a missing SQLite file: a source (or a copy to verify) that is
	 * not there is a typo */
	if (must_exist && strncmp(dsn, "sqlite:", 7) == 0) {
		struct stat sb;

		if (stat(dsn + 7, &sb) != 0) {
			fprintf(stderr, "outboxd store: no SQLite store at %s: %s\n", dsn + 7,
				strerror(errno));
			return -1;
		}
	}
	rc = store_open(dsn, COPY_OWNER, &s->st, err, sizeof(err));
	if (rc == STORE_LOCKED) {
		fprintf(stderr, "outboxd store: the %s store is in use: %s; stop that outboxd "
			"first\n", s->role, err);
		return -1;
	}
	if (rc != STORE_OK) {
		fprintf(stderr, "outboxd store: cannot open the %s store: %s\n", s->role, err);
		return -1;
	}
	if (store_copy_check(s->st, err, sizeof(err)) != STORE_OK) {
		fprintf(stderr, "outboxd store: the %s store (%s) is not what this outboxd copies: "
			"%s\n", s->role, store_backend_name(s->st), err);
		return -1;
	}
	return 0;
}

/* ---- progress ---------------------------------------------------------------------------- */

static void progress(const char *what, const char *table, int64_t rows, int end)
{
	if (!progress_on)
		return;
	fprintf(stderr, "\r%s %-14s %12lld rows%s", what, table, (long long)rows,
		end ? "\n" : "");
	fflush(stderr);
}

/* ---- refusing a target with rows --------------------------------------------------------- */

/* 1 when row r of page is in found with the same values (a same_ok table's row the
 * target holds already). */
static int already_there(const struct copy_batch *page, size_t r, const struct copy_batch *found)
{
	for (size_t f = 0; f < found->n_rows; f++)
		if (copy_keys_equal(page, r, found, f))
			return copy_rows_equal(page, r, found, f);
	return 0;
}

/* Without --into-existing: every table of the target empty. With it: no key of the
 * source's in the target (but same_ok tables' identical rows). 0, or -1 after a
 * message. */
static int target_check(struct side *src, struct side *dst, int into_existing)
{
	int rc = STORE_OK, bad = 0;

	for (size_t i = 0; i < store_copy_tables_n && rc == STORE_OK && !bad; i++) {
		const struct copy_table *t = &store_copy_tables[i];
		struct copy_batch page, found;
		struct copy_cursor cur;

		copy_batch_init(&page, t);
		copy_batch_init(&found, t);
		if (!into_existing) {
			copy_cursor_init(&cur, t);
			rc = store_copy_read(dst->st, &cur, 1, &page);
			if (rc == STORE_OK && page.n_rows) {
				fprintf(stderr, "outboxd store: the target store is not empty (table %s "
					"has rows): copy into an empty database, or pass "
					"--into-existing to add to it\n", t->name);
				bad = 1;
			}
			copy_cursor_free(&cur);
			copy_batch_free(&page);
			copy_batch_free(&found);
			continue;
		}
		copy_cursor_init(&cur, t);
		while (rc == STORE_OK && !bad &&
		       (rc = store_copy_read(src->st, &cur, COPY_BATCH_ROWS, &page)) == STORE_OK &&
		       page.n_rows) {
			rc = store_copy_find(dst->st, &page, &found);
			for (size_t f = 0; rc == STORE_OK && f < found.n_rows && !bad; f++) {
				size_t r = 0;

				while (r < page.n_rows && !copy_keys_equal(&page, r, &found, f))
					r++;
				if (t->same_ok && r < page.n_rows && copy_rows_equal(&page, r, &found, f))
					continue;
				/* a key is an id, a name of store_meta or an outbox number: no
				 * secret */
				fprintf(stderr, "outboxd store: the target store already has a row of "
					"table %s with the key %s of a source row: nothing was copied\n",
					t->name, t->cols[0].type == COPY_INT ? "(a number)"
					: copy_value_bytes(&found, copy_batch_row(&found, f)));
				bad = 1;
			}
		}
		copy_cursor_free(&cur);
		copy_batch_free(&page);
		copy_batch_free(&found);
	}
	if (rc != STORE_OK)
		fprintf(stderr, "outboxd store: cannot read the stores: %s\n", store_strerror(rc));
	return rc == STORE_OK && !bad ? 0 : -1;
}

/* ---- copying ----------------------------------------------------------------------------- */

/* Drops from page the rows the target holds already with the same values (same_ok). */
static int drop_present(struct side *dst, struct copy_batch *page)
{
	struct copy_batch found, kept;
	int rc;

	copy_batch_init(&found, page->t);
	copy_batch_init(&kept, page->t);
	rc = store_copy_find(dst->st, page, &found);
	for (size_t r = 0; rc == STORE_OK && r < page->n_rows; r++)
		if (!already_there(page, r, &found) && copy_batch_take(&kept, page, r))
			rc = STORE_ERROR;
	if (rc == STORE_OK) {
		copy_batch_free(page);
		*page = kept;
	} else {
		copy_batch_free(&kept);
	}
	copy_batch_free(&found);
	return rc;
}

static int copy_table(struct side *src, struct side *dst, const struct copy_table *t,
		      int into_existing, int64_t *copied)
{
	struct copy_cursor cur;
	struct copy_batch page;
	int64_t rows = 0;
	int rc;

	copy_cursor_init(&cur, t);
	copy_batch_init(&page, t);
	progress("copy", t->name, 0, 0);
	while ((rc = store_copy_read(src->st, &cur, COPY_BATCH_ROWS, &page)) == STORE_OK &&
	       page.n_rows) {
		if (into_existing && t->same_ok && (rc = drop_present(dst, &page)) != STORE_OK)
			break;
		if ((rc = store_copy_write(dst->st, &page)) != STORE_OK)
			break;
		rows += (int64_t)page.n_rows;
		progress("copy", t->name, rows, 0);
	}
	progress("copy", t->name, rows, 1);
	if (rc == STORE_CONFLICT)
		fprintf(stderr, "outboxd store: a row of table %s collides with one the target "
			"store got meanwhile (a key, or a unique name or hash); the target holds "
			"the %lld rows copied before it\n", t->name, (long long)rows);
	else if (rc != STORE_OK)
		fprintf(stderr, "outboxd store: copying table %s failed after %lld rows: %s (the "
			"log line above says why)\n", t->name, (long long)rows, store_strerror(rc));
	*copied += rows;
	copy_batch_free(&page);
	copy_cursor_free(&cur);
	return rc;
}

/* ---- verifying --------------------------------------------------------------------------- */

/* The rows of found in the order of page's keys, into ordered (reset first). */
static int in_page_order(const struct copy_batch *page, const struct copy_batch *found,
			 struct copy_batch *ordered)
{
	copy_batch_reset(ordered);
	for (size_t r = 0; r < page->n_rows; r++)
		for (size_t f = 0; f < found->n_rows; f++)
			if (copy_keys_equal(page, r, found, f)) {
				if (copy_batch_take(ordered, found, f))
					return STORE_ERROR;
				break;
			}
	return STORE_OK;
}

/* Sums table t on both sides. With into_existing the target's sum is over its rows with
 * the source's keys, in the source's order. */
static int verify_table(struct side *src, struct side *dst, const struct copy_table *t,
			int into_existing, struct copy_sum *a, struct copy_sum *b)
{
	struct copy_batch page, found, ordered;
	struct copy_cursor cur;
	int rc = STORE_OK;

	if (copy_sum_init(a) || copy_sum_init(b)) {
		copy_sum_free(a);
		return STORE_ERROR;
	}
	copy_batch_init(&page, t);
	copy_batch_init(&found, t);
	copy_batch_init(&ordered, t);
	copy_cursor_init(&cur, t);
	while (rc == STORE_OK &&
	       (rc = store_copy_read(src->st, &cur, COPY_BATCH_ROWS, &page)) == STORE_OK &&
	       page.n_rows) {
		if (copy_sum_add(a, &page))
			rc = STORE_ERROR;
		if (into_existing && rc == STORE_OK &&
		    (rc = store_copy_find(dst->st, &page, &found)) == STORE_OK &&
		    (rc = in_page_order(&page, &found, &ordered)) == STORE_OK &&
		    copy_sum_add(b, &ordered))
			rc = STORE_ERROR;
		progress("verify source", t->name, a->rows, 0);
	}
	progress("verify source", t->name, a->rows, 1);
	copy_cursor_free(&cur);
	copy_cursor_init(&cur, t);
	while (rc == STORE_OK && !into_existing &&
	       (rc = store_copy_read(dst->st, &cur, COPY_BATCH_ROWS, &page)) == STORE_OK &&
	       page.n_rows) {
		if (copy_sum_add(b, &page))
			rc = STORE_ERROR;
		progress("verify target", t->name, b->rows, 0);
	}
	if (!into_existing)
		progress("verify target", t->name, b->rows, 1);
	copy_cursor_free(&cur);
	copy_batch_free(&ordered);
	copy_batch_free(&found);
	copy_batch_free(&page);
	if (rc == STORE_OK && (copy_sum_final(a) || copy_sum_final(b)))
		rc = STORE_ERROR;
	copy_sum_free(a);
	copy_sum_free(b);
	return rc;
}

/* Prints the table of counts and checksums to stdout. 0 when every table is the same on
 * both sides, 1 when one differs or cannot be read (said on stderr). */
static int verify(struct side *src, struct side *dst, int into_existing)
{
	int differ = 0;

	printf("%-14s %12s %12s  %-16s  %-16s  %s\n", "table", "source rows", "target rows",
	       "source sha256", "target sha256", "");
	for (size_t i = 0; i < store_copy_tables_n; i++) {
		const struct copy_table *t = &store_copy_tables[i];
		struct copy_sum a, b;
		int rc = verify_table(src, dst, t, into_existing, &a, &b);

		if (rc != STORE_OK) {
			fprintf(stderr, "outboxd store: cannot read table %s: %s\n", t->name,
				store_strerror(rc));
			return 1;
		}
		int same = a.rows == b.rows && strcmp(a.hex, b.hex) == 0;

		differ += !same;
		printf("%-14s %12lld %12lld  %.16s  %.16s  %s\n", t->name, (long long)a.rows,
		       (long long)b.rows, a.hex, b.hex, same ? "same" : "DIFFERENT");
	}
	fflush(stdout);
	if (differ) {
		fprintf(stderr, "outboxd store: %d table%s differ%s between the source and the "
			"target\n", differ, differ == 1 ? "" : "s", differ == 1 ? "s" : "");
		return 1;
	}
	printf("every table is the same on both sides%s\n",
	       into_existing ? " (the target's rows with the source's keys)" : "");
	return 0;
}

/* ---- the commands ------------------------------------------------------------------------ */

static int parse(int argc, char **argv, struct opts *o)
{
	memset(o, 0, sizeof(*o));
	for (int i = 1; i < argc; i++) {
		const char **dst = NULL;
		const char *a = argv[i];

		if (strcmp(a, "--into-existing") == 0) {
			o->into_existing = 1;
			continue;
		}
		if (strncmp(a, "--from", 6) == 0)
			dst = &o->from;
		else if (strncmp(a, "--to", 4) == 0)
			dst = &o->to;
		const char *flag = dst == &o->from ? "--from" : "--to";
		size_t fl = strlen(flag);
		if (dst && a[fl] == '=')
			*dst = a + fl + 1;
		else if (dst && a[fl] == '\0' && i + 1 < argc)
			*dst = argv[++i];
		else {
			fprintf(stderr, "outboxd store: unknown or incomplete option \"%s\"\n", a);
			return -1;
		}
	}
	if (!o->from || !*o->from || !o->to || !*o->to) {
		fprintf(stderr, "outboxd store: --from and --to are both needed\n");
		return -1;
	}
	if (strcmp(o->from, o->to) == 0) {
		fprintf(stderr, "outboxd store: --from and --to name the same store\n");
		return -1;
	}
	return 0;
}

/* Refuses a store another outboxd is connected to. 0, or -1 after a message. */
static int not_in_use(struct side *s)
{
	int n = 0, rc = store_copy_in_use(s->st, &n);

	if (rc != STORE_OK) {
		fprintf(stderr, "outboxd store: cannot ask the %s store who is connected: %s\n",
			s->role, store_strerror(rc));
		return -1;
	}
	if (n > 0) {
		fprintf(stderr, "outboxd store: the %s store is in use: %d other outboxd "
			"session%s connected to its database; stop every instance first\n",
			s->role, n, n == 1 ? " is" : "s are");
		return -1;
	}
	return 0;
}

int store_cmd_main(int argc, char **argv)
{
	struct side src = {"source", NULL}, dst = {"target", NULL};
	struct opts o;
	int copy, rc = 1;

	if (argc < 1 || strcmp(argv[0], "--help") == 0 || strcmp(argv[0], "-h") == 0) {
		store_cmd_usage(argc < 1 ? stderr : stdout);
		return argc < 1 ? 2 : 0;
	}
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			store_cmd_usage(stdout);
			return 0;
		}
	copy = strcmp(argv[0], "copy") == 0;
	if (!copy && strcmp(argv[0], "verify") != 0) {
		fprintf(stderr, "outboxd store: unknown command \"%s\"\n", argv[0]);
		store_cmd_usage(stderr);
		return 2;
	}
	if (parse(argc, argv, &o))
		return 2;
	progress_on = isatty(STDERR_FILENO);
	if (side_open(&src, o.from, 1) || side_open(&dst, o.to, !copy))
		goto out;
	if (copy) {
		int64_t t0 = clock_mono_ms(), rows = 0;

		if (not_in_use(&src) || not_in_use(&dst) ||
		    target_check(&src, &dst, o.into_existing))
			goto out;
		for (size_t i = 0; i < store_copy_tables_n; i++)
			if (copy_table(&src, &dst, &store_copy_tables[i], o.into_existing, &rows) !=
			    STORE_OK)
				goto out;
		printf("copied %lld rows from %s to %s in %.1f s\n", (long long)rows,
		       store_backend_name(src.st), store_backend_name(dst.st),
		       (double)(clock_mono_ms() - t0) / 1000.0);
	}
	rc = verify(&src, &dst, o.into_existing);
out:
	if (src.st)
		store_close(src.st);
	if (dst.st)
		store_close(dst.st);
	return rc;
}
