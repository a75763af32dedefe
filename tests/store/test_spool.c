/* test_spool.c: the catastrophic-failure spool file (src/store/spool.h): records come back
 * in order and intact, and a damaged or truncated tail is reported and moved aside,
 * never replayed; the read-only scan of outboxd spool resumes after damage and changes
 * nothing. Plus store_ingest_replay, the idempotent ingest the spool is replayed
 * with, on SQLite and PostgreSQL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness_pg.h"
#include "store/spool.h"
#include "store/store.h"
#include "util/log.h"
#include "util/uuid.h"

struct fixture {
	char dir[64];
	char path[128];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/outboxd-spool-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->path, sizeof(f->path), "%s/spool", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	DIR *d = opendir(f->dir);
	struct dirent *e;
	char p[512];

	while (d && (e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(p, sizeof(p), "%s/%s", f->dir, e->d_name);
		unlink(p);
	}
	if (d)
		closedir(d);
	rmdir(f->dir);
	free(f);
	return 0;
}

/* Collects what a replay hands over. */
struct seen {
	size_t n;
	uint8_t types[2000];
	size_t lens[2000];
	char first[64];
	int stop_after;   /* > 0: stop when this many were seen */
};

static int collect_cb(void *ctx, uint8_t type, const void *data, size_t len)
{
	struct seen *s = ctx;

	if (s->stop_after && s->n == (size_t)s->stop_after)
		return 1;
	if (s->n < 2000) {
		s->types[s->n] = type;
		s->lens[s->n] = len;
	}
	if (s->n == 0)
		snprintf(s->first, sizeof(s->first), "%.*s", (int)len, (const char *)data);
	s->n++;
	return 0;
}

static off_t size_of(const char *path)
{
	struct stat st;
	return stat(path, &st) ? -1 : st.st_size;
}

static int count_corrupt_files(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	while (d && (e = readdir(d)))
		if (strstr(e->d_name, ".corrupt-"))
			n++;
	closedir(d);
	return n;
}

static void append_str(struct spool *sp, uint8_t type, const char *s)
{
	assert_int_equal(spool_append(sp, type, s, strlen(s)), SPOOL_OK);
}

static void test_round_trip(void **state)
{
	struct fixture *f = *state;
	struct spool_report rep;
	struct seen seen = {0};
	struct spool *sp;

	assert_int_equal(spool_open(f->path, &sp, &rep), SPOOL_OK);
	assert_int_equal(rep.corrupt, 0);
	assert_int_equal(spool_size(sp), 0);
	append_str(sp, 7, "hello spool");
	assert_int_equal(spool_size(sp), SPOOL_HEADER_LEN + 11);
	assert_int_equal(spool_replay(sp, collect_cb, &seen, &rep), SPOOL_OK);
	assert_int_equal(seen.n, 1);
	assert_int_equal(seen.types[0], 7);
	assert_string_equal(seen.first, "hello spool");
	assert_int_equal(rep.good, 1);
	assert_int_equal(rep.corrupt, 0);
	/* A successful replay empties the spool. */
	assert_int_equal(spool_size(sp), 0);
	assert_int_equal(size_of(f->path), 0);
	spool_close(sp);
}

static void test_many_records(void **state)
{
	struct fixture *f = *state;
	struct spool_report rep;
	struct seen seen = {0};
	struct spool *sp;
	char buf[1200];

	assert_int_equal(spool_open(f->path, &sp, NULL), SPOOL_OK);
	for (int i = 0; i < 1000; i++) {
		memset(buf, 'a' + i % 26, sizeof(buf));
		assert_int_equal(spool_append(sp, (uint8_t)(i % 3), buf, (size_t)i), SPOOL_OK);
	}
	/* An empty record is a record too. */
	assert_int_equal(spool_replay(sp, collect_cb, &seen, &rep), SPOOL_OK);
	assert_int_equal(seen.n, 1000);
	for (size_t i = 0; i < 1000; i++) {
		assert_int_equal(seen.types[i], i % 3);
		assert_int_equal(seen.lens[i], i);
	}
	assert_int_equal(rep.good, 1000);
	assert_int_equal(spool_size(sp), 0);
	spool_close(sp);
}

static void test_stopped_replay_keeps_everything(void **state)
{
	struct fixture *f = *state;
	struct seen seen = {.stop_after = 2};
	struct spool *sp;

	assert_int_equal(spool_open(f->path, &sp, NULL), SPOOL_OK);
	append_str(sp, 1, "one");
	append_str(sp, 1, "two");
	append_str(sp, 1, "three");
	off_t before = size_of(f->path);
	assert_int_equal(spool_replay(sp, collect_cb, &seen, NULL), SPOOL_STOPPED);
	assert_int_equal(size_of(f->path), before);
	seen = (struct seen){0};
	assert_int_equal(spool_replay(sp, collect_cb, &seen, NULL), SPOOL_OK);
	assert_int_equal(seen.n, 3);
	assert_string_equal(seen.first, "one");
	spool_close(sp);
}

/* Cuts the file at len bytes. */
static void cut_file(const char *path, off_t len)
{
	assert_int_equal(truncate(path, len), 0);
}

static void flip_byte(const char *path, off_t at)
{
	int fd = open(path, O_RDWR);
	unsigned char c;

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &c, 1, at), 1);
	c ^= 0x40;
	assert_int_equal(pwrite(fd, &c, 1, at), 1);
	close(fd);
}

static void test_truncated_tail(void **state)
{
	struct fixture *f = *state;
	struct spool_report rep;
	struct seen seen = {0};
	struct spool *sp;

	assert_int_equal(spool_open(f->path, &sp, NULL), SPOOL_OK);
	append_str(sp, 1, "first record");
	append_str(sp, 1, "second record");
	off_t good = size_of(f->path);
	append_str(sp, 1, "third record, torn by the crash");
	cut_file(f->path, good + SPOOL_HEADER_LEN + 5);

	assert_int_equal(spool_replay(sp, collect_cb, &seen, &rep), SPOOL_OK);
	assert_int_equal(seen.n, 2);
	assert_int_equal(rep.good, 2);
	assert_int_equal(rep.corrupt, 1);
	assert_int_equal(rep.bad_offset, (uint64_t)good);
	assert_string_equal(rep.reason, "truncated record");
	assert_non_null(strstr(rep.moved_to, ".corrupt-"));
	assert_int_equal(size_of(rep.moved_to), SPOOL_HEADER_LEN + 5);
	assert_int_equal(count_corrupt_files(f->dir), 1);
	assert_int_equal(spool_size(sp), 0);
	spool_close(sp);
}

static void test_truncated_header(void **state)
{
	struct fixture *f = *state;
	struct spool_report rep;
	struct spool *sp;

	assert_int_equal(spool_open(f->path, &sp, NULL), SPOOL_OK);
	append_str(sp, 1, "kept");
	off_t good = size_of(f->path);
	append_str(sp, 1, "lost");
	spool_close(sp);
	cut_file(f->path, good + 3);
	/* Opening finds it already, so nothing is appended after the torn header. */
	assert_int_equal(spool_open(f->path, &sp, &rep), SPOOL_OK);
	assert_int_equal(rep.corrupt, 1);
	assert_int_equal(rep.good, 1);
	assert_int_equal(rep.bad_offset, (uint64_t)good);
	assert_string_equal(rep.reason, "truncated header");
	assert_int_equal(size_of(f->path), good);
	spool_close(sp);
}

static void test_flipped_byte(void **state)
{
	struct fixture *f = *state;
	struct spool_report rep;
	struct seen seen = {0};
	struct spool *sp;

	assert_int_equal(spool_open(f->path, &sp, NULL), SPOOL_OK);
	append_str(sp, 1, "alpha");
	off_t second = size_of(f->path);
	append_str(sp, 1, "bravo");
	append_str(sp, 1, "charlie");
	/* One bit in the second record's payload: the third one is not replayed either. */
	flip_byte(f->path, second + SPOOL_HEADER_LEN + 2);

	assert_int_equal(spool_replay(sp, collect_cb, &seen, &rep), SPOOL_OK);
	assert_int_equal(seen.n, 1);
	assert_string_equal(seen.first, "alpha");
	assert_int_equal(rep.corrupt, 1);
	assert_int_equal(rep.good, 1);
	assert_int_equal(rep.bad_offset, (uint64_t)second);
	assert_string_equal(rep.reason, "crc mismatch");
	assert_int_equal(size_of(rep.moved_to), 2 * SPOOL_HEADER_LEN + 5 + 7);
	spool_close(sp);

	/* A damaged magic is caught as well. */
	assert_int_equal(spool_open(f->path, &sp, NULL), SPOOL_OK);
	append_str(sp, 1, "delta");
	flip_byte(f->path, 1);
	seen = (struct seen){0};
	assert_int_equal(spool_replay(sp, collect_cb, &seen, &rep), SPOOL_OK);
	assert_int_equal(seen.n, 0);
	assert_int_equal(rep.bad_offset, 0);
	assert_string_equal(rep.reason, "bad magic");
	spool_close(sp);
}

static void test_empty_file(void **state)
{
	struct fixture *f = *state;
	struct spool_report rep;
	struct seen seen = {0};
	struct spool *sp;
	int fd = open(f->path, O_CREAT | O_WRONLY, 0600);

	close(fd);
	assert_int_equal(spool_open(f->path, &sp, &rep), SPOOL_OK);
	assert_int_equal(rep.corrupt, 0);
	assert_int_equal(rep.good, 0);
	assert_int_equal(spool_replay(sp, collect_cb, &seen, &rep), SPOOL_OK);
	assert_int_equal(seen.n, 0);
	assert_int_equal(rep.corrupt, 0);
	assert_int_equal(count_corrupt_files(f->dir), 0);
	spool_close(sp);
}

static void test_reopen_after_crash(void **state)
{
	struct fixture *f = *state;
	struct spool_report rep;
	struct seen seen = {0};
	struct spool *sp;

	assert_int_equal(spool_open(f->path, &sp, NULL), SPOOL_OK);
	append_str(sp, 2, "before the crash");
	append_str(sp, 2, "also before");
	spool_close(sp); /* the process dies without replaying */

	assert_int_equal(spool_open(f->path, &sp, &rep), SPOOL_OK);
	assert_int_equal(rep.corrupt, 0);
	assert_int_equal(rep.good, 2);
	append_str(sp, 3, "after the restart");
	assert_int_equal(spool_replay(sp, collect_cb, &seen, &rep), SPOOL_OK);
	assert_int_equal(seen.n, 3);
	assert_string_equal(seen.first, "before the crash");
	assert_int_equal(seen.types[2], 3);
	assert_int_equal(seen.lens[2], strlen("after the restart"));
	assert_int_equal(spool_size(sp), 0);
	spool_close(sp);
}

/* ---- reading a file without changing it (outboxd spool inspect / replay) ------------- */

struct scanned {
	size_t n, n_damage;
	uint64_t offsets[16];
	char texts[16][64];
	struct spool_damage damage[8];
};

static int scan_record_cb(void *ctx, uint64_t offset, uint8_t type, const void *data, size_t len)
{
	struct scanned *s = ctx;

	assert_true(s->n < 16);
	s->offsets[s->n] = offset;
	snprintf(s->texts[s->n], sizeof(s->texts[0]), "%.*s", (int)len, (const char *)data);
	s->n++;
	(void)type;
	return 0;
}

static void scan_damage_cb(void *ctx, const struct spool_damage *d)
{
	struct scanned *s = ctx;

	assert_true(s->n_damage < 8);
	s->damage[s->n_damage++] = *d;
}

static const struct spool_scan_handlers scan_handlers = {scan_record_cb, scan_damage_cb};

/* The whole file (returned, free it) and its length. */
static char *slurp(const char *path, size_t *len)
{
	FILE *fp = fopen(path, "rb");
	char *buf = malloc(1 << 16);

	assert_non_null(fp);
	*len = fread(buf, 1, 1 << 16, fp);
	fclose(fp);
	return buf;
}

/* Damage in the middle: the scan resumes at the next whole record, reports each stretch
 * (offset, length, reason) and leaves the file exactly as it was. */
static void test_scan_resyncs_past_damage(void **state)
{
	struct fixture *f = *state;
	struct spool_scan_summary sum;
	struct scanned seen = {0};
	struct spool *sp;
	off_t at[5];
	size_t before_len, after_len;

	assert_int_equal(spool_open(f->path, &sp, NULL), SPOOL_OK);
	const char *texts[5] = {"alpha", "bravo holds OBSP in its payload", "charlie", "delta",
				"echo"};
	for (int i = 0; i < 5; i++) {
		at[i] = size_of(f->path);
		append_str(sp, 1, texts[i]);
	}
	spool_close(sp);
	/* bravo: a flipped payload byte (its "OBSP" must not pass for a record); delta: a
	 * broken magic. */
	flip_byte(f->path, at[1] + SPOOL_HEADER_LEN + 1);
	flip_byte(f->path, at[3]);
	char *before = slurp(f->path, &before_len);

	assert_int_equal(spool_scan_file(f->path, &scan_handlers, &seen, &sum), SPOOL_OK);
	assert_int_equal(seen.n, 3);
	assert_string_equal(seen.texts[0], "alpha");
	assert_string_equal(seen.texts[1], "charlie");
	assert_string_equal(seen.texts[2], "echo");
	assert_int_equal(seen.offsets[0], 0);
	assert_int_equal(seen.offsets[1], (uint64_t)at[2]);
	assert_int_equal(seen.offsets[2], (uint64_t)at[4]);
	assert_int_equal(seen.n_damage, 2);
	assert_int_equal(seen.damage[0].offset, (uint64_t)at[1]);
	assert_int_equal(seen.damage[0].bytes, (uint64_t)(at[2] - at[1]));
	assert_string_equal(seen.damage[0].reason, "crc mismatch");
	assert_int_equal(seen.damage[1].offset, (uint64_t)at[3]);
	assert_int_equal(seen.damage[1].bytes, (uint64_t)(at[4] - at[3]));
	assert_string_equal(seen.damage[1].reason, "bad magic");
	assert_int_equal(sum.records, 3);
	assert_int_equal(sum.damaged, 2);
	assert_int_equal(sum.bytes_skipped, (uint64_t)(at[2] - at[1] + at[4] - at[3]));
	assert_int_equal(sum.size, (uint64_t)size_of(f->path));

	/* Read-only: same bytes, nothing moved aside. */
	char *after = slurp(f->path, &after_len);
	assert_int_equal(after_len, before_len);
	assert_memory_equal(after, before, before_len);
	assert_int_equal(count_corrupt_files(f->dir), 0);
	free(before);
	free(after);
}

/* A .corrupt-* copy starts at the bad record: its good records after the damage are
 * found; a torn record at its end is damage up to the end of the file. */
static void test_scan_corrupt_copy(void **state)
{
	struct fixture *f = *state;
	struct spool_report rep;
	struct scanned seen = {0};
	struct spool_scan_summary sum;
	struct seen replayed = {0};
	struct spool *sp;

	assert_int_equal(spool_open(f->path, &sp, NULL), SPOOL_OK);
	append_str(sp, 1, "one");
	off_t bad = size_of(f->path);
	append_str(sp, 1, "two");
	off_t third = size_of(f->path);
	append_str(sp, 2, "three");
	off_t fourth = size_of(f->path);
	append_str(sp, 1, "four, torn");
	flip_byte(f->path, bad + SPOOL_HEADER_LEN);
	cut_file(f->path, fourth + SPOOL_HEADER_LEN + 4);
	assert_int_equal(spool_replay(sp, collect_cb, &replayed, &rep), SPOOL_OK);
	assert_int_equal(replayed.n, 1);
	assert_int_equal(rep.corrupt, 1);
	spool_close(sp);

	assert_int_equal(spool_scan_file(rep.moved_to, &scan_handlers, &seen, &sum), SPOOL_OK);
	assert_int_equal(seen.n, 1);
	assert_string_equal(seen.texts[0], "three");
	assert_int_equal(seen.offsets[0], (uint64_t)(third - bad));
	assert_int_equal(seen.n_damage, 2);
	assert_int_equal(seen.damage[0].offset, 0);
	assert_int_equal(seen.damage[0].bytes, (uint64_t)(third - bad));
	assert_string_equal(seen.damage[0].reason, "crc mismatch");
	assert_int_equal(seen.damage[1].offset, (uint64_t)(fourth - bad));
	assert_int_equal(seen.damage[1].bytes, SPOOL_HEADER_LEN + 4);
	assert_string_equal(seen.damage[1].reason, "truncated record");
	assert_int_equal(sum.bytes_skipped, (uint64_t)(third - bad) + SPOOL_HEADER_LEN + 4);
}

static void test_scan_missing_file(void **state)
{
	struct fixture *f = *state;
	struct scanned seen = {0};
	struct spool_scan_summary sum;

	assert_int_equal(spool_scan_file(f->path, &scan_handlers, &seen, &sum), SPOOL_IO);
	assert_int_equal(seen.n, 0);
	assert_int_equal(size_of(f->path), -1); /* not created either */
}

/* What GET /v1/stats shows: records and bytes waiting, and the damage found at open. */
static void test_status_counts_records_and_damage(void **state)
{
	struct fixture *f = *state;
	struct spool_status ss;
	struct spool *sp;

	assert_int_equal(spool_open(f->path, &sp, NULL), SPOOL_OK);
	spool_status_read(sp, &ss);
	assert_int_equal(ss.records, 0);
	assert_int_equal(ss.damaged, 0);
	assert_null(ss.damage_reason);
	append_str(sp, 1, "first");
	append_str(sp, 1, "second");
	off_t bad = size_of(f->path);
	append_str(sp, 1, "third");
	spool_status_read(sp, &ss);
	assert_int_equal(ss.records, 3);
	assert_int_equal(ss.bytes, (uint64_t)size_of(f->path));
	spool_close(sp);

	flip_byte(f->path, bad + SPOOL_HEADER_LEN + 1);
	off_t end = size_of(f->path);
	assert_int_equal(spool_open(f->path, &sp, NULL), SPOOL_OK);
	spool_status_read(sp, &ss);
	assert_int_equal(ss.records, 2);
	assert_int_equal(ss.bytes, (uint64_t)bad);
	assert_int_equal(ss.damaged, 1);
	assert_true(ss.damage_at_ms > 0);
	assert_int_equal(ss.damage_offset, (uint64_t)bad);
	assert_int_equal(ss.damage_bytes, (uint64_t)(end - bad));
	assert_string_equal(ss.damage_reason, "crc mismatch");
	assert_non_null(strstr(ss.damage_moved_to, "/spool.corrupt-"));
	assert_int_equal(spool_replay(sp, NULL, NULL, NULL), SPOOL_OK);
	spool_status_read(sp, &ss);
	assert_int_equal(ss.records, 0);
	assert_int_equal(ss.bytes, 0);
	assert_int_equal(ss.damaged, 1); /* since start: the count stays */
	spool_close(sp);
}

/* ---- record codecs ------------------------------------------------------------------- */

static void test_codec_events(void **state)
{
	char subs[2][UUID_STR_LEN] = {"0190a000-0000-7000-8000-00000000000a",
				      "0190a000-0000-7000-8000-00000000000b"};
	struct store_event_in in[2] = {0}, *out = NULL;
	void *rec = NULL;
	size_t len = 0, n = 0;

	snprintf(in[0].id, UUID_STR_LEN, "0190a000-0000-7000-8000-000000000001");
	in[0].event_type = "order.created";
	in[0].source = "shop";
	in[0].source_event_id = "o-1";
	in[0].partition_key = "customer-7";
	in[0].traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
	in[0].content_type = "application/json";
	in[0].payload = "{\"a\":1}";
	in[0].payload_len = 7;
	in[0].created_at = 1700000000123;
	in[0].subscription_ids = (const char(*)[UUID_STR_LEN])subs;
	in[0].n_subscriptions = 2;
	snprintf(in[1].id, UUID_STR_LEN, "0190a000-0000-7000-8000-000000000002");
	in[1].event_type = "bin";
	in[1].source = "";
	in[1].content_type = "application/octet-stream";
	in[1].payload = "\0\1\2";
	in[1].payload_len = 3;
	in[1].created_at = -1;

	assert_int_equal(spool_encode_events(in, 2, &rec, &len), 0);
	assert_int_equal(spool_decode_events(rec, len, &out, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(out[0].id, in[0].id);
	assert_string_equal(out[0].event_type, "order.created");
	assert_string_equal(out[0].source, "shop");
	assert_string_equal(out[0].source_event_id, "o-1");
	assert_string_equal(out[0].partition_key, "customer-7");
	assert_string_equal(out[0].traceparent, in[0].traceparent);
	assert_string_equal(out[0].content_type, "application/json");
	assert_int_equal(out[0].payload_len, 7);
	assert_memory_equal(out[0].payload, "{\"a\":1}", 7);
	assert_int_equal(out[0].created_at, 1700000000123);
	assert_int_equal(out[0].n_subscriptions, 2);
	assert_string_equal(out[0].subscription_ids[1], subs[1]);
	assert_null(out[1].source_event_id);
	assert_null(out[1].partition_key);
	assert_null(out[1].traceparent);
	assert_int_equal(out[1].payload_len, 3);
	assert_memory_equal(out[1].payload, "\0\1\2", 3);
	assert_int_equal(out[1].created_at, -1);
	assert_int_equal(out[1].n_subscriptions, 0);
	free(out);
	/* Cut short anywhere, it is refused rather than read past its end. */
	for (size_t cut = 0; cut < len; cut += 7)
		assert_int_equal(spool_decode_events(rec, cut, &out, &n), -1);
	free(rec);
}

static void test_codec_results(void **state)
{
	struct store_attempt atts[2] = {
		{.n = 1, .kind = ATTEMPT_IMMEDIATE, .started_at = 5, .duration_ms = 12, .code = 503,
		 .message = "service unavailable", .cause = "upstream down"},
		{.n = 2, .kind = ATTEMPT_IMMEDIATE, .started_at = 9, .duration_ms = 3, .code = 200},
	};
	struct store_result in[2] = {
		{.delivery_id = "0190a000-0000-7000-8000-000000000003", .status = DELIVERY_PROCESSED,
		 .attempt_count = 2, .retry_count = 0, .delay_actions = 1, .processed_at = 10,
		 .last_code = -1, .attempts = atts, .n_attempts = 2},
		{.delivery_id = "0190a000-0000-7000-8000-000000000004", .status = DELIVERY_FAILED,
		 .replay = 1, .attempt_count = 7, .retry_count = 3, .next_attempt_at = 1700000000000,
		 .last_code = 410, .last_message = "gone", .dead_letter = 1},
	};
	struct store_result *out = NULL;
	void *rec = NULL;
	size_t len = 0, n = 0;

	assert_int_equal(spool_encode_results(in, 2, &rec, &len), 0);
	assert_int_equal(spool_decode_results(rec, len, &out, &n), 0);
	assert_int_equal(n, 2);
	assert_string_equal(out[0].delivery_id, in[0].delivery_id);
	assert_int_equal(out[0].status, DELIVERY_PROCESSED);
	assert_int_equal(out[0].attempt_count, 2);
	assert_int_equal(out[0].delay_actions, 1);
	assert_int_equal(out[0].processed_at, 10);
	assert_int_equal(out[0].last_code, -1);
	assert_null(out[0].last_message);
	assert_int_equal(out[0].n_attempts, 2);
	assert_int_equal(out[0].attempts[0].code, 503);
	assert_string_equal(out[0].attempts[0].message, "service unavailable");
	assert_string_equal(out[0].attempts[0].cause, "upstream down");
	assert_int_equal(out[0].attempts[1].duration_ms, 3);
	assert_null(out[0].attempts[1].message);
	assert_int_equal(out[0].dead_letter, 0);
	assert_int_equal(out[1].status, DELIVERY_FAILED);
	assert_int_equal(out[1].dead_letter, 1);
	assert_int_equal(out[1].replay, 1);
	assert_int_equal(out[1].retry_count, 3);
	assert_int_equal(out[1].next_attempt_at, 1700000000000);
	assert_int_equal(out[1].last_code, 410);
	assert_string_equal(out[1].last_message, "gone");
	assert_null(out[1].last_cause);
	assert_int_equal(out[1].n_attempts, 0);
	spool_results_free(out, n);
	for (size_t cut = 0; cut < len; cut += 5)
		assert_int_equal(spool_decode_results(rec, cut, &out, &n), -1);
	free(rec);
}

/* ---- store_ingest_replay ---------------------------------------------------------- */

static void fill_event(struct store_event_in *ev, const char *event_type, const char *key,
		       const char (*subs)[UUID_STR_LEN], size_t n_subs)
{
	memset(ev, 0, sizeof(*ev));
	ev->event_type = event_type;
	ev->source = "spool-test";
	ev->source_event_id = key;
	ev->content_type = "application/json";
	ev->payload = "{}";
	ev->payload_len = 2;
	ev->created_at = 1700000000000;
	ev->subscription_ids = subs;
	ev->n_subscriptions = n_subs;
}

static size_t deliveries_of(store *st, const char *event_id)
{
	struct store_delivery *items = NULL;
	size_t n = 0;

	assert_int_equal(store_event_deliveries(st, event_id, &items, &n), STORE_OK);
	store_deliveries_free(items, n);
	return n;
}

/* An event whose id is stored is a duplicate in a replay (its deliveries are not
 * inserted again); a new one is stored; a repeated idempotency key still resolves to the
 * first event. */
static void check_ingest_replay(const char *dsn)
{
	char subs[2][UUID_STR_LEN], err[256];
	struct store_event_in first[2], again[3];
	store *st;

	assert_int_equal(store_open(dsn, "spool-test:1", &st, err, sizeof(err)), STORE_OK);
	uuid_v7(subs[0]);
	uuid_v7(subs[1]);
	fill_event(&first[0], "a", NULL, (const char(*)[UUID_STR_LEN])subs, 2);
	fill_event(&first[1], "b", "key-1", (const char(*)[UUID_STR_LEN])subs, 1);
	assert_int_equal(store_ingest(st, first, 2), STORE_OK);
	assert_int_equal(deliveries_of(st, first[0].id), 2);

	/* The replay of a group whose commit had succeeded, plus one that had not. */
	fill_event(&again[0], "a", NULL, (const char(*)[UUID_STR_LEN])subs, 2);
	memcpy(again[0].id, first[0].id, UUID_STR_LEN);
	fill_event(&again[1], "c", NULL, (const char(*)[UUID_STR_LEN])subs, 2);
	uuid_v7(again[1].id);
	fill_event(&again[2], "b", "key-1", (const char(*)[UUID_STR_LEN])subs, 1);
	uuid_v7(again[2].id); /* spooled under a new id, same idempotency key */
	assert_int_equal(store_ingest_replay(st, again, 3), STORE_OK);
	assert_int_equal(again[0].duplicate, 1);
	assert_string_equal(again[0].id, first[0].id);
	assert_int_equal(again[1].duplicate, 0);
	assert_int_equal(again[2].duplicate, 1);
	assert_string_equal(again[2].id, first[1].id);
	assert_int_equal(deliveries_of(st, first[0].id), 2);
	assert_int_equal(deliveries_of(st, again[1].id), 2);
	assert_int_equal(deliveries_of(st, first[1].id), 1);

	/* A replay needs the ids the spool kept. */
	fill_event(&again[0], "d", NULL, (const char(*)[UUID_STR_LEN])subs, 1);
	assert_int_equal(store_ingest_replay(st, again, 1), STORE_INVALID);
	store_close(st);
}

static void test_ingest_replay_sqlite(void **state)
{
	struct fixture *f = *state;
	char dsn[200];

	snprintf(dsn, sizeof(dsn), "sqlite:%s/store.db", f->dir);
	check_ingest_replay(dsn);
}

static void test_ingest_replay_postgres(void **state)
{
	char dsn[300];

	if (!harness_pg()) {
		/* The conformance suite fails loudly without PostgreSQL; here too. */
		fail_msg("no PostgreSQL server could be started");
	}
	assert_int_equal(harness_pg_fresh_db(dsn, sizeof(dsn)), 0);
	check_ingest_replay(dsn);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
		cmocka_unit_test_setup_teardown(test_many_records, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stopped_replay_keeps_everything, setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncated_tail, setup, teardown),
		cmocka_unit_test_setup_teardown(test_truncated_header, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flipped_byte, setup, teardown),
		cmocka_unit_test_setup_teardown(test_empty_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reopen_after_crash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scan_resyncs_past_damage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scan_corrupt_copy, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scan_missing_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_status_counts_records_and_damage, setup,
						teardown),
		cmocka_unit_test(test_codec_events),
		cmocka_unit_test(test_codec_results),
		cmocka_unit_test_setup_teardown(test_ingest_replay_sqlite, setup, teardown),
		cmocka_unit_test(test_ingest_replay_postgres),
	};
	log_set_level(LOG_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
