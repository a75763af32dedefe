/* ingest.h: turning a POST /v1/events body into events to store.
 *
 * Parsing validates everything before anything is stored (a batch is all or nothing),
 * and keeps each JSON payload as the exact bytes the producer sent. */
#ifndef OUTBOXD_INTAKE_INGEST_H
#define OUTBOXD_INTAKE_INGEST_H

#include <stddef.h>
#include <stdint.h>

#include "core/input_error.h"
#include "core/subscriptions.h"
#include "store/store.h"

#define INGEST_MAX_BATCH 10000

struct ingest_batch {
	void *root;                   /* the parsed document (json_t), owns the strings */
	struct store_event_in *events;
	size_t n;
	int is_batch;                 /* {"events":[...]} rather than one event */
	void **decoded;               /* base64-decoded payloads, owned, n of them */
	char (*sub_ids)[UUID_STR_LEN]; /* fan-out targets of all events, owned */
	size_t sub_cap;
};

/* Parses body (borrowed: payloads point into it, so it must outlive the batch) into b.
 * Event ids are assigned (UUIDv7) and created_at set to now. Returns 0, or -1 with err
 * naming the field (e.g. "events[3].event_type"). */
int ingest_parse(const char *body, size_t len, int64_t max_payload, struct ingest_batch *b,
		 struct input_error *err);

/* The rule of an event type, whichever way the event came in: 1 to 255 printable ASCII
 * characters without spaces, '*' or '?', not one of outboxd's own (outboxd.*). type NULL
 * means absent; len is its length (a NUL inside makes it shorter than len: refused).
 * Returns 0, or -1 with err (400 invalid_argument) naming field (borrowed). */
int ingest_check_event_type(const char *type, size_t len, const char *field,
			    struct input_error *err);

/* Fills each event's subscriptions from set. Returns 0 or -1 when out of memory. */
int ingest_fanout(struct ingest_batch *b, const struct sub_set *set);

void ingest_batch_free(struct ingest_batch *b);

#endif
