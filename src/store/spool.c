/* spool.c: the append-only, checksummed spool file (see spool.h for the format).
 *
 * Must not interpret records, and the daemon's replay must not go past the first bad
 * byte: a record after a damaged one cannot be trusted to be where its predecessor's
 * length says. Only spool_scan_file (the operator's read-only look, outboxd spool) looks
 * further, for the next place holding a whole record whose checksum matches. */
#include "store/spool.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "util/buf.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/logburst.h"

static const unsigned char spool_magic[4] = {'O', 'B', 'S', 'P'};
#define SPOOL_VERSION 1

struct spool {
	char *path;
	int fd;
	pthread_mutex_t mu;
	/* for spool_status_read (under mu once open) */
	size_t records;               /* good records in the file */
	size_t damaged;               /* bad tails found since open */
	int64_t damage_at_ms;         /* the last one: when, where, how long, why */
	uint64_t damage_offset, damage_bytes;
	const char *damage_reason;
	char damage_moved_to[4096];
	/* failed appends (a full disk fails every request's), logged as a burst */
	struct log_burst append_failures;
};

const char *spool_strerror(int err)
{
	switch (err) {
	case SPOOL_OK: return "ok";
	case SPOOL_IO: return "spool i/o error";
	case SPOOL_TOO_BIG: return "spool record too big";
	case SPOOL_STOPPED: return "spool replay stopped";
	case SPOOL_NOMEM: return "out of memory";
	}
	return "unknown spool error";
}

static void le_put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)v;
	p[1] = (unsigned char)(v >> 8);
	p[2] = (unsigned char)(v >> 16);
	p[3] = (unsigned char)(v >> 24);
}

static uint32_t le_get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t payload_crc(const void *data, size_t len)
{
	return (uint32_t)crc32(crc32(0L, Z_NULL, 0), data, (uInt)len);
}

static int read_full(int fd, void *buf, size_t len, uint64_t off)
{
	unsigned char *p = buf;

	while (len) {
		ssize_t r = pread(fd, p, len, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p += r;
		len -= (size_t)r;
		off += (uint64_t)r;
	}
	return 0;
}

static int write_full(int fd, const void *buf, size_t len)
{
	const unsigned char *p = buf;

	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

static uint64_t file_size(int fd)
{
	struct stat st;

	return fstat(fd, &st) ? 0 : (uint64_t)st.st_size;
}

/* Copies [off, end) of the spool to `<path>.corrupt-<UTC time>` (a new file, synced),
 * then cuts the spool back to off. The copy is kept for an operator to look at. */
static int move_tail_aside(struct spool *sp, uint64_t off, uint64_t end, struct spool_report *rep)
{
	char name[sizeof(rep->moved_to)];
	char stamp[32];
	time_t now = time(NULL);
	struct tm tm;
	unsigned char buf[65536];
	int out = -1, rc = SPOOL_IO;

	rep->moved_to[0] = '\0';
	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	for (int i = 0; i < 100 && out < 0; i++) {
		if (i == 0)
			snprintf(name, sizeof(name), "%s.corrupt-%s", sp->path, stamp);
		else
			snprintf(name, sizeof(name), "%s.corrupt-%s.%d", sp->path, stamp, i);
		out = open(name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (out < 0 && errno != EEXIST)
			break;
	}
	if (out < 0) {
		log_error("spool: cannot create %s: %s", name, strerror(errno));
		goto cut;
	}
	for (uint64_t at = off; at < end;) {
		size_t chunk = end - at < sizeof(buf) ? (size_t)(end - at) : sizeof(buf);
		if (read_full(sp->fd, buf, chunk, at) || write_full(out, buf, chunk)) {
			log_error("spool: cannot copy the bad tail to %s: %s", name, strerror(errno));
			goto cut;
		}
		at += chunk;
	}
	if (fsync(out)) {
		log_error("spool: fsync %s: %s", name, strerror(errno));
		goto cut;
	}
	snprintf(rep->moved_to, sizeof(rep->moved_to), "%s", name);
cut:
	if (out >= 0)
		close(out);
	/* Even when the copy failed the tail must go: appending after it would bury good
	 * records behind garbage. */
	if (ftruncate(sp->fd, (off_t)off) || fdatasync(sp->fd)) {
		log_error("spool: cannot truncate %s: %s", sp->path, strerror(errno));
		return SPOOL_IO;
	}
	rc = SPOOL_OK;
	return rc;
}

/* Remembers a bad tail of bytes bytes for spool_status_read. */
static void note_damage(struct spool *sp, const struct spool_report *rep, uint64_t bytes)
{
	sp->damaged++;
	sp->damage_at_ms = clock_now_ms();
	sp->damage_offset = rep->bad_offset;
	sp->damage_bytes = bytes;
	sp->damage_reason = rep->reason;
	snprintf(sp->damage_moved_to, sizeof(sp->damage_moved_to), "%s", rep->moved_to);
}

/* Checks the record whose header starts at off in a file of size bytes: on success the
 * header is in hdr and the payload in *data (grown as needed, *cap its size) and NULL is
 * returned; otherwise the static reason it is not a good record. *nomem is set when the
 * payload could not be held. */
static const char *check_record(int fd, uint64_t off, uint64_t size,
				unsigned char hdr[SPOOL_HEADER_LEN], unsigned char **data,
				size_t *cap, int *nomem)
{
	uint32_t len;

	*nomem = 0;
	if (size - off < SPOOL_HEADER_LEN)
		return "truncated header";
	if (read_full(fd, hdr, SPOOL_HEADER_LEN, off))
		return "unreadable header";
	if (memcmp(hdr, spool_magic, 4))
		return "bad magic";
	if (hdr[4] != SPOOL_VERSION)
		return "unknown version";
	if (hdr[6] || hdr[7])
		return "bad header";
	if ((len = le_get32(hdr + 8)) > SPOOL_MAX_RECORD)
		return "bad length";
	if (size - off - SPOOL_HEADER_LEN < len)
		return "truncated record";
	if (len > *cap) {
		unsigned char *d = realloc(*data, len);
		if (!d) {
			*nomem = 1;
			return "out of memory";
		}
		*data = d;
		*cap = len;
	}
	if (read_full(fd, *data, len, off + SPOOL_HEADER_LEN))
		return "unreadable record";
	if (payload_crc(*data, len) != le_get32(hdr + 12))
		return "crc mismatch";
	return NULL;
}

/* Walks the records from the start, calling cb (may be NULL) for each good one. A bad
 * record stops the walk and is moved aside. Called with the lock held. */
static int walk(struct spool *sp, spool_record_cb cb, void *ctx, struct spool_report *rep)
{
	uint64_t size = file_size(sp->fd), off = 0;
	unsigned char hdr[SPOOL_HEADER_LEN];
	unsigned char *data = NULL;
	size_t cap = 0;
	int rc = SPOOL_OK;

	memset(rep, 0, sizeof(*rep));
	while (off < size) {
		int nomem;
		const char *bad = check_record(sp->fd, off, size, hdr, &data, &cap, &nomem);
		uint32_t len;

		if (nomem) {
			rc = SPOOL_NOMEM;
			goto out;
		}
		if (bad) {
			rep->corrupt = 1;
			rep->bad_offset = off;
			rep->reason = bad;
			rc = move_tail_aside(sp, off, size, rep);
			note_damage(sp, rep, size - off);
			sp->records = rep->good;
			goto out;
		}
		len = le_get32(hdr + 8);
		if (cb && cb(ctx, hdr[5], data, len)) {
			rc = SPOOL_STOPPED;
			goto out;
		}
		rep->good++;
		off += SPOOL_HEADER_LEN + (uint64_t)len;
		rep->good_bytes = off;
	}
	sp->records = rep->good;
out:
	free(data);
	return rc;
}

int spool_open(const char *path, struct spool **out, struct spool_report *report)
{
	struct spool_report scratch;
	struct spool *sp;
	int rc;

	*out = NULL;
	if (!report)
		report = &scratch;
	memset(report, 0, sizeof(*report));
	if (!(sp = calloc(1, sizeof(*sp))) || !(sp->path = strdup(path))) {
		free(sp);
		return SPOOL_NOMEM;
	}
	sp->fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (sp->fd < 0) {
		log_error("spool: cannot open %s: %s", path, strerror(errno));
		free(sp->path);
		free(sp);
		return SPOOL_IO;
	}
	pthread_mutex_init(&sp->mu, NULL);
	rc = walk(sp, NULL, NULL, report);
	if (rc != SPOOL_OK) {
		spool_close(sp);
		return rc;
	}
	*out = sp;
	return SPOOL_OK;
}

void spool_close(struct spool *sp)
{
	if (!sp)
		return;
	close(sp->fd);
	pthread_mutex_destroy(&sp->mu);
	free(sp->path);
	free(sp);
}

const char *spool_path(const struct spool *sp)
{
	return sp->path;
}

int spool_append(struct spool *sp, uint8_t type, const void *data, size_t len)
{
	unsigned char hdr[SPOOL_HEADER_LEN] = {0};
	uint64_t before;
	int rc = SPOOL_OK;

	if (len > SPOOL_MAX_RECORD)
		return SPOOL_TOO_BIG;
	memcpy(hdr, spool_magic, 4);
	hdr[4] = SPOOL_VERSION;
	hdr[5] = type;
	le_put32(hdr + 8, (uint32_t)len);
	le_put32(hdr + 12, payload_crc(data, len));

	pthread_mutex_lock(&sp->mu);
	before = file_size(sp->fd);
	if (write_full(sp->fd, hdr, sizeof(hdr)) || write_full(sp->fd, data, len) ||
	    fdatasync(sp->fd)) {
		int err = errno;
		long n;
		int64_t span_ms;
		enum log_burst_say say = log_burst_hit(&sp->append_failures, clock_mono_ms(),
						       LOG_BURST_EVERY_MS, &n, &span_ms);
		if (say == LOG_BURST_START)
			log_error("spool: cannot append to %s: %s (logged again once a minute while "
				  "appends fail)", sp->path, strerror(err));
		else if (say == LOG_BURST_STILL)
			log_error("spool: still cannot append to %s: %s (%ld appends failed in the "
				  "last %.0f s)", sp->path, strerror(err), n, (double)span_ms / 1000.0);
		if (ftruncate(sp->fd, (off_t)before) && say == LOG_BURST_START)
			log_error("spool: cannot cut %s back: %s", sp->path, strerror(errno));
		rc = SPOOL_IO;
	} else {
		long n;
		int64_t span_ms;
		sp->records++;
		if ((n = log_burst_over(&sp->append_failures, clock_mono_ms(), 0, &span_ms)))
			log_info("spool: appends to %s succeed again, after %ld failed over %.1f s",
				 sp->path, n, (double)span_ms / 1000.0);
	}
	pthread_mutex_unlock(&sp->mu);
	return rc;
}

int spool_replay(struct spool *sp, spool_record_cb cb, void *ctx, struct spool_report *report)
{
	struct spool_report scratch;
	int rc;

	if (!report)
		report = &scratch;
	pthread_mutex_lock(&sp->mu);
	rc = walk(sp, cb, ctx, report);
	if (rc == SPOOL_OK && (ftruncate(sp->fd, 0) || fdatasync(sp->fd))) {
		log_error("spool: cannot truncate %s: %s", sp->path, strerror(errno));
		rc = SPOOL_IO;
	} else if (rc == SPOOL_OK) {
		sp->records = 0;
	}
	pthread_mutex_unlock(&sp->mu);
	return rc;
}

void spool_log_report(const struct spool *sp, const struct spool_report *rep)
{
	if (!rep->corrupt)
		return;
	log_error("spool: %s is corrupt at byte %llu (%s) after %zu good records; the tail "
		  "was moved to %s and will not be replayed",
		  sp->path, (unsigned long long)rep->bad_offset, rep->reason, rep->good,
		  rep->moved_to[0] ? rep->moved_to : "(nowhere: it could not be copied)");
}

uint64_t spool_size(struct spool *sp)
{
	uint64_t n;

	pthread_mutex_lock(&sp->mu);
	n = file_size(sp->fd);
	pthread_mutex_unlock(&sp->mu);
	return n;
}

void spool_status_read(struct spool *sp, struct spool_status *out)
{
	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&sp->mu);
	out->bytes = file_size(sp->fd);
	out->records = sp->records;
	out->damaged = sp->damaged;
	out->damage_at_ms = sp->damage_at_ms;
	out->damage_offset = sp->damage_offset;
	out->damage_bytes = sp->damage_bytes;
	out->damage_reason = sp->damage_reason;
	snprintf(out->damage_moved_to, sizeof(out->damage_moved_to), "%s", sp->damage_moved_to);
	pthread_mutex_unlock(&sp->mu);
}

/* ---- reading a file without changing it ------------------------------------------- */

/* The first offset after from (up to size) where a good record starts, or size when
 * there is none: candidates are the places holding the magic, each checked in full
 * (header and crc), so a stray "OBSP" inside damaged bytes is not taken for a record. */
static uint64_t resync(int fd, uint64_t from, uint64_t size, unsigned char **data, size_t *cap,
		       int *nomem)
{
	unsigned char buf[65536 + 3];
	unsigned char hdr[SPOOL_HEADER_LEN];
	uint64_t at = from;

	*nomem = 0;
	while (at + 4 <= size) {
		size_t want = size - at < sizeof(buf) ? (size_t)(size - at) : sizeof(buf);
		if (read_full(fd, buf, want, at))
			return size;
		for (size_t i = 0; i + 4 <= want; i++) {
			if (memcmp(buf + i, spool_magic, 4))
				continue;
			if (!check_record(fd, at + i, size, hdr, data, cap, nomem))
				return at + i;
			if (*nomem)
				return size;
		}
		/* the last 3 bytes start the next window, so a magic across two is seen */
		at += want - 3;
	}
	return size;
}

int spool_scan_file(const char *path, const struct spool_scan_handlers *on, void *ctx,
		    struct spool_scan_summary *sum)
{
	unsigned char hdr[SPOOL_HEADER_LEN];
	unsigned char *data = NULL;
	size_t cap = 0;
	uint64_t off = 0, size;
	int fd, rc = SPOOL_OK, nomem;

	memset(sum, 0, sizeof(*sum));
	errno = 0;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		log_error("spool: cannot open %s: %s", path, strerror(errno));
		return SPOOL_IO;
	}
	struct stat st;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		log_error("spool: %s: %s", path, errno ? strerror(errno) : "not a regular file");
		close(fd);
		return SPOOL_IO;
	}
	sum->size = size = (uint64_t)st.st_size;
	while (off < size) {
		const char *bad = check_record(fd, off, size, hdr, &data, &cap, &nomem);

		if (nomem) {
			rc = SPOOL_NOMEM;
			break;
		}
		if (bad) {
			struct spool_damage d = {.offset = off, .reason = bad};
			uint64_t next = resync(fd, off + 1, size, &data, &cap, &nomem);

			if (nomem) {
				rc = SPOOL_NOMEM;
				break;
			}
			d.bytes = next - off;
			sum->damaged++;
			sum->bytes_skipped += d.bytes;
			if (on->damage)
				on->damage(ctx, &d);
			off = next;
			continue;
		}
		uint32_t len = le_get32(hdr + 8);
		if (on->record && on->record(ctx, off, hdr[5], data, len)) {
			rc = SPOOL_STOPPED;
			break;
		}
		sum->records++;
		off += SPOOL_HEADER_LEN + (uint64_t)len;
	}
	free(data);
	close(fd);
	return rc;
}

/* ---- record codecs ------------------------------------------------------------------ */

/* Events (little-endian): u32 count, then per event: id (UUID_STR_LEN bytes),
 * six optional strings (u8 present, then the text and its NUL), u32 payload length and
 * the payload, i64 created_at, u32 subscription count and UUID_STR_LEN bytes each. */

static int put(struct buf *b, const void *p, size_t n)
{
	return buf_append(b, p, n);
}

static int put_u32(struct buf *b, uint32_t v)
{
	unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8),
			      (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
	return put(b, x, 4);
}

static int put_u64(struct buf *b, uint64_t v)
{
	return put_u32(b, (uint32_t)v) || put_u32(b, (uint32_t)(v >> 32));
}

static int put_str(struct buf *b, const char *s)
{
	unsigned char present = s != NULL;

	if (put(b, &present, 1))
		return -1;
	return s ? put(b, s, strlen(s) + 1) : 0;
}

int spool_encode_events(const struct store_event_in *events, size_t n, void **out,
			    size_t *len)
{
	struct buf b;
	int rc = -1;

	buf_init(&b, SPOOL_MAX_RECORD);
	if (n > UINT32_MAX || put_u32(&b, (uint32_t)n))
		goto out;
	for (size_t i = 0; i < n; i++) {
		const struct store_event_in *ev = &events[i];
		uint64_t at = (uint64_t)ev->created_at;
		unsigned char at_le[8];

		for (int k = 0; k < 8; k++)
			at_le[k] = (unsigned char)(at >> (8 * k));
		if (put(&b, ev->id, UUID_STR_LEN) || put_str(&b, ev->event_type) ||
		    put_str(&b, ev->source) || put_str(&b, ev->source_event_id) ||
		    put_str(&b, ev->partition_key) || put_str(&b, ev->traceparent) ||
		    put_str(&b, ev->content_type) || ev->payload_len > UINT32_MAX ||
		    put_u32(&b, (uint32_t)ev->payload_len) ||
		    put(&b, ev->payload, ev->payload_len) || put(&b, at_le, 8) ||
		    put_u32(&b, (uint32_t)ev->n_subscriptions) ||
		    put(&b, ev->subscription_ids, ev->n_subscriptions * UUID_STR_LEN))
			goto out;
	}
	*len = b.len;
	*out = b.data;
	b.data = NULL;
	rc = 0;
out:
	buf_free(&b);
	return rc;
}

struct reader {
	const unsigned char *p;
	size_t left;
};

static const void *take(struct reader *r, size_t n)
{
	const void *at = r->p;

	if (r->left < n)
		return NULL;
	r->p += n;
	r->left -= n;
	return at;
}

static int take_u32(struct reader *r, uint32_t *v)
{
	const unsigned char *x = take(r, 4);

	if (!x)
		return -1;
	*v = (uint32_t)x[0] | (uint32_t)x[1] << 8 | (uint32_t)x[2] << 16 | (uint32_t)x[3] << 24;
	return 0;
}

static int take_u64(struct reader *r, uint64_t *v)
{
	uint32_t lo, hi;

	if (take_u32(r, &lo) || take_u32(r, &hi))
		return -1;
	*v = (uint64_t)hi << 32 | lo;
	return 0;
}

static int take_i32(struct reader *r, int *v)
{
	uint32_t u;

	if (take_u32(r, &u))
		return -1;
	*v = (int)(int32_t)u;
	return 0;
}

static int take_i64(struct reader *r, int64_t *v)
{
	uint64_t u;

	if (take_u64(r, &u))
		return -1;
	*v = (int64_t)u;
	return 0;
}

static int take_str(struct reader *r, const char **s)
{
	const unsigned char *present = take(r, 1);
	const unsigned char *end;

	if (!present || *present > 1)
		return -1;
	*s = NULL;
	if (!*present)
		return 0;
	if (!(end = memchr(r->p, '\0', r->left)))
		return -1;
	*s = (const char *)r->p;
	return take(r, (size_t)(end - r->p) + 1) ? 0 : -1;
}

int spool_decode_events(const void *data, size_t len, struct store_event_in **events,
			    size_t *n)
{
	struct reader r = {data, len};
	struct store_event_in *evs = NULL;
	uint32_t count;

	*events = NULL;
	*n = 0;
	if (take_u32(&r, &count) || count > len)
		return -1;
	if (count && !(evs = calloc(count, sizeof(*evs))))
		return -1;
	for (uint32_t i = 0; i < count; i++) {
		struct store_event_in *ev = &evs[i];
		const char *id = take(&r, UUID_STR_LEN);
		const unsigned char *at;
		uint32_t plen, nsubs;
		uint64_t created = 0;

		if (!id || id[UUID_STR_LEN - 1] || take_str(&r, &ev->event_type) ||
		    take_str(&r, &ev->source) || take_str(&r, &ev->source_event_id) ||
		    take_str(&r, &ev->partition_key) || take_str(&r, &ev->traceparent) ||
		    take_str(&r, &ev->content_type) || take_u32(&r, &plen) ||
		    (plen && !(ev->payload = take(&r, plen))) || !(at = take(&r, 8)) ||
		    take_u32(&r, &nsubs) || nsubs > r.left / UUID_STR_LEN ||
		    (nsubs && !(ev->subscription_ids = take(&r, (size_t)nsubs * UUID_STR_LEN))))
			goto bad;
		memcpy(ev->id, id, UUID_STR_LEN);
		ev->payload_len = plen;
		if (!ev->payload)
			ev->payload = "";
		for (int k = 0; k < 8; k++)
			created |= (uint64_t)at[k] << (8 * k);
		ev->created_at = (int64_t)created;
		ev->n_subscriptions = nsubs;
		for (uint32_t k = 0; k < nsubs; k++)
			if (ev->subscription_ids[k][UUID_STR_LEN - 1])
				goto bad;
	}
	if (r.left)
		goto bad;
	*events = evs;
	*n = count;
	return 0;
bad:
	free(evs);
	return -1;
}

#define SPOOL_DEAD_LETTER_BIT 0x100 /* a result's dead_letter, beside its status */
#define SPOOL_NOT_SENT_BIT 0x100    /* an attempt's not_sent, beside its kind */

/* Results: u32 count, then per result: delivery id (UUID_STR_LEN bytes, NUL-padded), i32
 * status (bit 8: dead_letter, absent from spools written before it), replay, attempt_count, retry_count, delay_actions, i64 next_attempt_at,
 * processed_at, i32 last_code, two optional strings (last_message, last_cause), u32
 * attempt count, and per attempt: i32 n, kind (bit 8: not_sent, absent from spools
 * written before it), i64 started_at, duration_ms, i32 code, two optional strings
 * (message, cause). */

int spool_encode_results(const struct store_result *results, size_t n, void **out, size_t *len)
{
	struct buf b;
	int rc = -1;

	buf_init(&b, SPOOL_MAX_RECORD);
	if (n > UINT32_MAX || put_u32(&b, (uint32_t)n))
		goto out;
	for (size_t i = 0; i < n; i++) {
		const struct store_result *r = &results[i];
		char id[UUID_STR_LEN] = {0};

		if (!r->delivery_id || strlen(r->delivery_id) >= UUID_STR_LEN)
			goto out;
		memcpy(id, r->delivery_id, strlen(r->delivery_id));
		uint32_t status = (uint32_t)r->status | (r->dead_letter ? SPOOL_DEAD_LETTER_BIT : 0);
		if (put(&b, id, UUID_STR_LEN) || put_u32(&b, status) ||
		    put_u32(&b, (uint32_t)r->replay) || put_u32(&b, (uint32_t)r->attempt_count) ||
		    put_u32(&b, (uint32_t)r->retry_count) ||
		    put_u32(&b, (uint32_t)r->delay_actions) ||
		    put_u64(&b, (uint64_t)r->next_attempt_at) ||
		    put_u64(&b, (uint64_t)r->processed_at) || put_u32(&b, (uint32_t)r->last_code) ||
		    put_str(&b, r->last_message) || put_str(&b, r->last_cause) ||
		    r->n_attempts > UINT32_MAX || put_u32(&b, (uint32_t)r->n_attempts))
			goto out;
		for (size_t k = 0; k < r->n_attempts; k++) {
			const struct store_attempt *a = &r->attempts[k];

			uint32_t kind = (uint32_t)a->kind | (a->not_sent ? SPOOL_NOT_SENT_BIT : 0);
			if (put_u32(&b, (uint32_t)a->n) || put_u32(&b, kind) ||
			    put_u64(&b, (uint64_t)a->started_at) ||
			    put_u64(&b, (uint64_t)a->duration_ms) || put_u32(&b, (uint32_t)a->code) ||
			    put_str(&b, a->message) || put_str(&b, a->cause))
				goto out;
		}
	}
	*len = b.len;
	*out = b.data;
	b.data = NULL;
	rc = 0;
out:
	buf_free(&b);
	return rc;
}

void spool_results_free(struct store_result *results, size_t n)
{
	for (size_t i = 0; results && i < n; i++)
		free((void *)results[i].attempts);
	free(results);
}

int spool_decode_results(const void *data, size_t len, struct store_result **results,
			 size_t *n)
{
	struct reader r = {data, len};
	struct store_result *rs = NULL;
	uint32_t count;

	*results = NULL;
	*n = 0;
	if (take_u32(&r, &count) || count > len)
		return -1;
	if (count && !(rs = calloc(count, sizeof(*rs))))
		return -1;
	for (uint32_t i = 0; i < count; i++) {
		struct store_result *res = &rs[i];
		const char *id = take(&r, UUID_STR_LEN);
		int status;
		uint32_t n_att;

		if (!id || id[UUID_STR_LEN - 1] || take_i32(&r, &status) ||
		    take_i32(&r, &res->replay) || take_i32(&r, &res->attempt_count) ||
		    take_i32(&r, &res->retry_count) || take_i32(&r, &res->delay_actions) ||
		    take_i64(&r, &res->next_attempt_at) || take_i64(&r, &res->processed_at) ||
		    take_i32(&r, &res->last_code) || take_str(&r, &res->last_message) ||
		    take_str(&r, &res->last_cause) || take_u32(&r, &n_att) || n_att > r.left)
			goto bad;
		res->delivery_id = id;
		res->dead_letter = (status & SPOOL_DEAD_LETTER_BIT) != 0;
		res->status = (enum delivery_status)(status & ~SPOOL_DEAD_LETTER_BIT);
		if (n_att) {
			struct store_attempt *atts = calloc(n_att, sizeof(*atts));

			if (!atts)
				goto bad;
			res->attempts = atts;
			res->n_attempts = n_att;
			for (uint32_t k = 0; k < n_att; k++) {
				int kind;

				if (take_i32(&r, &atts[k].n) || take_i32(&r, &kind) ||
				    take_i64(&r, &atts[k].started_at) ||
				    take_i64(&r, &atts[k].duration_ms) ||
				    take_i32(&r, &atts[k].code) || take_str(&r, &atts[k].message) ||
				    take_str(&r, &atts[k].cause))
					goto bad;
				atts[k].not_sent = (kind & SPOOL_NOT_SENT_BIT) != 0;
				atts[k].kind = (enum attempt_kind)(kind & ~SPOOL_NOT_SENT_BIT);
			}
		}
	}
	if (r.left)
		goto bad;
	*results = rs;
	*n = count;
	return 0;
bad:
	spool_results_free(rs, count);
	return -1;
}
