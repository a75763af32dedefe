/* spool.h: an append-only local file of checksummed records: the catastrophic-failure
 * layer, which keeps accepted work while the store cannot be written.
 *
 * When the store cannot be written, work that was already accepted goes here instead and
 * is replayed into the store when it returns. Every record is fdatasync()ed before
 * spool_append returns, so a record that was appended survives a crash of the process or
 * the machine.
 *
 * On disk, each record is a 16-byte header followed by its payload:
 *   magic "OBSP" (4 bytes), version u8 (1), type u8, reserved u16 (0),
 *   length u32 little-endian, zlib crc32 of the payload u32 little-endian.
 *
 * A record whose header or checksum is wrong, or a truncated record at the end, is never
 * replayed: scanning stops there, the bad tail is moved aside to `<path>.corrupt-<time>`
 * and reported (how many good records precede it, its byte offset, the reason), so the
 * good prefix can still be consumed. The file layer knows nothing about what the records
 * mean; the codecs at the end of this header turn store batches into record payloads. */
#ifndef OUTBOXD_STORE_SPOOL_H
#define OUTBOXD_STORE_SPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "store/store.h"

#define SPOOL_HEADER_LEN 16
#define SPOOL_MAX_RECORD (256u * 1024 * 1024) /* a longer length field is corruption */

enum spool_err {
	SPOOL_OK = 0,
	SPOOL_IO,        /* a system call failed; logged with errno */
	SPOOL_TOO_BIG,   /* record longer than SPOOL_MAX_RECORD */
	SPOOL_STOPPED,   /* the replay callback asked to stop; nothing was truncated */
	SPOOL_NOMEM,
};

const char *spool_strerror(int err);

struct spool;

/* What a scan found. bad_offset and reason are meaningful only when corrupt is 1. */
struct spool_report {
	size_t good;            /* records before the bad one (or all, when none is bad) */
	uint64_t good_bytes;    /* where the good prefix ends */
	int corrupt;            /* 1 when a bad record or a truncated tail was found */
	uint64_t bad_offset;    /* byte offset of the bad record */
	const char *reason;     /* static text: "bad magic", "crc mismatch", ... */
	char moved_to[4096];    /* where the bad tail went ("" when it could not be moved) */
};

/* Opens (creating when absent) the spool file at path (borrowed, copied). An existing
 * file is scanned at once: a bad tail is moved aside and truncated away so new records
 * are never appended after garbage; *report (may be NULL) tells what was found and the
 * caller logs it. Returns SPOOL_OK and *out (free with spool_close). */
int spool_open(const char *path, struct spool **out, struct spool_report *report);
void spool_close(struct spool *sp);
const char *spool_path(const struct spool *sp);

/* Appends one record (data borrowed) and fdatasync()s the file before returning. On
 * failure the file is cut back to where it was, so a half-written record never stays in
 * front of later ones. Thread-safe. */
int spool_append(struct spool *sp, uint8_t type, const void *data, size_t len);

/* Called once per good record, in order; data is borrowed for the call. Return 0 to go
 * on, anything else to stop the replay (the spool is then left as it is). */
typedef int (*spool_record_cb)(void *ctx, uint8_t type, const void *data, size_t len);

/* Scans the spool (moving a bad tail aside as spool_open does, and filling *report, which
 * may be NULL), hands every good record to cb, and when cb accepted them all truncates
 * the spool to empty and syncs it. Holds the spool's lock throughout, so a record
 * appended meanwhile waits and is never lost to the truncation. SPOOL_STOPPED when cb
 * stopped it. */
int spool_replay(struct spool *sp, spool_record_cb cb, void *ctx, struct spool_report *report);

/* Logs a report that found corruption (an error naming the offset, the reason, how many
 * good records precede it and where the tail went); nothing when the spool was sound. */
void spool_log_report(const struct spool *sp, const struct spool_report *report);

/* Bytes in the spool (0 = nothing to replay). */
uint64_t spool_size(struct spool *sp);

/* What GET /v1/stats and /metrics show of an open spool. */
struct spool_status {
	uint64_t bytes;               /* the file's size now: work waiting to be replayed */
	size_t records;               /* good records in it */
	size_t damaged;               /* bad tails found (and moved aside) since it was opened */
	int64_t damage_at_ms;         /* the last of them: when (ms since the epoch, 0 = none), */
	uint64_t damage_offset;       /* at which byte, */
	uint64_t damage_bytes;        /* how many bytes were moved aside, */
	const char *damage_reason;    /* why (static text, NULL when none) */
	char damage_moved_to[4096];   /* and where they went ("" when they could not be copied) */
};

/* Fills *out. Thread-safe; costs an fstat. */
void spool_status_read(struct spool *sp, struct spool_status *out);

/* ---- reading a spool file without changing it (outboxd spool inspect, replay) --------- */

/* A stretch of a file that holds no good record: offset, length, and why the record that
 * should have started there is not good (static text, as in spool_report). */
struct spool_damage {
	uint64_t offset;
	uint64_t bytes;
	const char *reason;
};

struct spool_scan_handlers {
	/* A good record whose header starts at offset; data borrowed for the call. Return 0
	 * to go on, anything else to stop the scan (SPOOL_STOPPED). */
	int (*record)(void *ctx, uint64_t offset, uint8_t type, const void *data, size_t len);
	/* A damaged stretch (may be NULL). */
	void (*damage)(void *ctx, const struct spool_damage *d);
};

struct spool_scan_summary {
	uint64_t size;                /* the file's size when the scan began */
	size_t records;               /* good records handed to on->record */
	size_t damaged;               /* damaged stretches */
	uint64_t bytes_skipped;       /* their bytes */
};

/* Reads the file at path (a spool, or a `.corrupt-*` copy, which starts at a bad record)
 * read-only: it is never written, truncated or moved, so it may be the live spool of a
 * running daemon. Unlike spool_open, a bad record does not end the scan: it resumes at the
 * next offset holding a whole record (header and crc) and reports the stretch between
 * as damage, so the good records after damage can still be listed and re-inserted.
 * SPOOL_IO when it cannot be opened or is not a regular file (logged; a read error
 * later shows as damage, "unreadable ..."), SPOOL_STOPPED when
 * on->record stopped it; *sum is filled either way. */
int spool_scan_file(const char *path, const struct spool_scan_handlers *on, void *ctx,
		    struct spool_scan_summary *sum);

/* ---- record codecs ------------------------------------------------------------------ */

/* Record types. A reader stops at a type it does not know (written by a newer outboxd). */
#define SPOOL_REC_EVENTS 1   /* an ingest group: store_event_in[] for store_ingest_replay */
#define SPOOL_REC_RESULTS 2  /* delivery results and their attempts: store_record_results */

/* Serialises n events (borrowed), with their ids and created_at, into one record payload:
 * *out is returned (free()), *len its length. Returns 0, or -1 when out of memory or
 * over SPOOL_MAX_RECORD. */
int spool_encode_events(const struct store_event_in *events, size_t n, void **out, size_t *len);

/* The reverse: *events is returned (free()); its strings point into data, which must
 * outlive it. Returns 0, or -1 on a malformed payload. */
int spool_decode_events(const void *data, size_t len, struct store_event_in **events,
			size_t *n);

/* The same for n delivery results with their attempts. */
int spool_encode_results(const struct store_result *results, size_t n, void **out, size_t *len);

/* *results is returned: free it with spool_results_free (strings point into data). */
int spool_decode_results(const void *data, size_t len, struct store_result **results,
			 size_t *n);
void spool_results_free(struct store_result *results, size_t n);

#endif
