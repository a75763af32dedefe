/* store.h: the storage interface of outboxd.
 *
 * One opaque handle, one `const struct store_ops` per backend (store_sqlite.c, later
 * store_pg.c), reached only through the store_* wrappers below. Callers never see SQL
 * or library types. Every function is safe to call from any thread.
 *
 * What a backend must guarantee (the conformance suite in tests/store/ checks it):
 *  - store_ingest is atomic: an event and all its deliveries, or nothing; durable when it
 *    returns STORE_OK (SQLite: WAL + synchronous=FULL).
 *  - A claimed delivery carries this store's owner and a lease; it is not claimed again
 *    until its lease expires or a result clears it.
 *  - FAILED deliveries are never deleted by cleanup; only PROCESSED ones are.
 *
 * Memory: "returned" pointers belong to the caller and are freed with the matching
 * store_*_free function; "borrowed" inputs are only read during the call. */
#ifndef OUTBOXD_STORE_STORE_H
#define OUTBOXD_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/model.h"

typedef struct store store;

enum store_err {
	STORE_OK = 0,
	STORE_NOT_FOUND,    /* no such row */
	STORE_CONFLICT,     /* state does not allow the change (e.g. purge of a live delivery) */
	STORE_UNAVAILABLE,  /* the database cannot be reached or written now: retry later */
	STORE_LOCKED,       /* another outboxd owns this store (SQLite) */
	STORE_INVALID,      /* bad argument (e.g. malformed cursor) */
	STORE_ERROR,        /* anything else; the backend logged the cause */
};

const char *store_strerror(int err);

/* ---- lifecycle ------------------------------------------------------------------ */

/* Opens the store named by dsn ("sqlite:PATH" or "postgres://..."), applies migrations
 * and, for SQLite, takes the exclusive owner lock (STORE_LOCKED when another outboxd
 * holds it). owner (borrowed, copied) identifies this process in leases. On failure a
 * message is written to err. */
int store_open(const char *dsn, const char *owner, store **out, char *err, size_t errlen);
void store_close(store *st);
const char *store_backend_name(const store *st);
const char *store_owner(const store *st);
/* STORE_OK when the database answers a trivial query. */
int store_ping(store *st);

/* ---- ingest and fan-out ---------------------------------------------------------- */

/* One event to store, with the subscriptions it fans out to (computed by the caller). */
struct store_event_in {
	char id[UUID_STR_LEN];        /* in: new id; out: the stored id (the first one
	                                 when duplicate) */
	const char *event_type;       /* borrowed, required */
	const char *source;           /* borrowed, "" when absent */
	const char *source_event_id;  /* borrowed, NULL when absent; unique per source */
	const char *partition_key;    /* borrowed, NULL when absent */
	const char *content_type;     /* borrowed, required */
	const void *payload;          /* borrowed */
	size_t payload_len;
	int64_t created_at;           /* ms since the epoch */
	const char (*subscription_ids)[UUID_STR_LEN]; /* borrowed, n_subscriptions of them */
	size_t n_subscriptions;
	int duplicate;                /* out: 1 when (source, source_event_id) existed; then
	                                 nothing was inserted for this event */
};

/* Stores n events and their deliveries (status NEW, due at created_at) in one
 * transaction. All or nothing. */
int store_ingest(store *st, struct store_event_in *events, size_t n);

/* Fan-out callback for the relay: sets *ids and *n to the subscriptions that want
 * event_type. The array stays valid until the next call with the same ctx. */
typedef void (*store_fanout_cb)(void *ctx, const char *event_type,
				const char (**ids)[UUID_STR_LEN], size_t *n);

/* Moves up to limit rows from the producer `outbox` table into events and deliveries,
 * and deletes them, in one transaction (seed 003's outbox pattern). New event ids are
 * UUIDv7. *relayed is set to the number of rows moved. */
int store_relay_outbox(store *st, size_t limit, store_fanout_cb fanout, void *ctx,
		       size_t *relayed);

/* ---- the dispatcher's side -------------------------------------------------------- */

/* A delivery claimed for sending, with what the dispatcher needs to send it. */
struct store_claim {
	char delivery_id[UUID_STR_LEN];
	char event_id[UUID_STR_LEN];
	char subscription_id[UUID_STR_LEN];
	enum delivery_status status; /* NEW or FAILED at claim time */
	int replay;                  /* 1 when put back by an operator replay */
	int attempt_count;           /* HTTP attempts so far */
	int retry_count;             /* scheduled retries so far */
	int64_t event_created_at;
	char *event_type;            /* these four point into one allocation per claim */
	char *content_type;
	void *payload;
	size_t payload_len;
};

/* Leases up to limit due deliveries (next_attempt_at <= now, no live lease), oldest
 * due first, for lease_ms. Returns them in *items (returned; free with
 * store_claims_free). */
int store_claim_due(store *st, int64_t now_ms, int64_t lease_ms, size_t limit,
		    struct store_claim **items, size_t *n);
void store_claims_free(struct store_claim *items, size_t n);

/* Earliest next_attempt_at among unleased deliveries, or 0 when none is pending. */
int store_next_due(store *st, int64_t *at_ms);

/* One HTTP attempt for the history (retry history of seed 000). */
struct store_attempt {
	int n;                      /* 1-based attempt number of the delivery */
	enum attempt_kind kind;
	int64_t started_at;         /* ms since the epoch */
	int64_t duration_ms;
	int code;                   /* HTTP status or mapped code (502/503/504/525/520) */
	const char *message;        /* borrowed, short description */
	const char *cause;          /* borrowed, library error or first KiB of the body */
};

/* The outcome of a claimed delivery. Applied only while this store's owner still holds
 * the lease; the lease is cleared. */
struct store_result {
	const char *delivery_id;    /* borrowed */
	enum delivery_status status;
	int replay;                 /* new value of the replay flag */
	int attempt_count;          /* new totals */
	int retry_count;
	int64_t next_attempt_at;    /* 0 = none: with FAILED this is the dead-letter queue */
	int64_t processed_at;       /* 0 = none */
	int last_code;              /* 0 = no error; -1 = keep the current last error */
	const char *last_message;   /* borrowed, may be NULL */
	const char *last_cause;     /* borrowed, may be NULL */
	const struct store_attempt *attempts; /* borrowed, attempts made in this round */
	size_t n_attempts;
};

/* Writes n results and their attempt rows in one transaction (group commit). */
int store_record_results(store *st, const struct store_result *results, size_t n);

/* Clears leases that expired before now_ms (crash recovery). *n = leases cleared. */
int store_reap_leases(store *st, int64_t now_ms, size_t *n);
/* Clears every lease held by this store's owner or by anyone whose lease is stale;
 * used at start by the single owner of an SQLite store. */
int store_release_all(store *st, size_t *n);

/* ---- reading ------------------------------------------------------------------------ */

struct store_event {
	char id[UUID_STR_LEN];
	char *event_type;
	char *source;
	char *source_event_id;      /* NULL when absent */
	char *partition_key;        /* NULL when absent */
	char *content_type;
	void *payload;
	size_t payload_len;
	int64_t created_at;
};

struct store_delivery {
	char id[UUID_STR_LEN];
	char event_id[UUID_STR_LEN];
	char subscription_id[UUID_STR_LEN];
	char *event_type;
	enum delivery_status status;
	int replay;
	int attempt_count;
	int retry_count;
	int64_t next_attempt_at;    /* 0 = none */
	int64_t created_at;
	int64_t updated_at;
	int64_t processed_at;       /* 0 = none */
	int last_code;              /* 0 = none */
	char *last_message;         /* NULL when none */
	char *last_cause;
	char *lease_owner;          /* NULL when not leased */
	int64_t lease_until;
};

struct store_attempt_row {
	int n;
	enum attempt_kind kind;
	int64_t started_at;
	int64_t duration_ms;
	int code;
	char *message;
	char *cause;
};

int store_event_get(store *st, const char *id, struct store_event *ev);
void store_event_free(struct store_event *ev);          /* frees members only */

/* Deliveries of one event, oldest first (returned array). */
int store_event_deliveries(store *st, const char *event_id,
			   struct store_delivery **items, size_t *n);

int store_delivery_get(store *st, const char *id, struct store_delivery *d);
/* The full attempt history of a delivery, oldest first (returned array). */
int store_delivery_attempts(store *st, const char *id,
			    struct store_attempt_row **items, size_t *n);

void store_delivery_free(struct store_delivery *d);     /* frees members only */
void store_deliveries_free(struct store_delivery *items, size_t n);
void store_attempts_free(struct store_attempt_row *items, size_t n);

enum store_sort { STORE_SORT_CREATED = 0, STORE_SORT_UPDATED, STORE_SORT_ATTEMPTS };

struct store_delivery_filter {
	int has_status;
	enum delivery_status status;
	int dead_only;              /* FAILED with no next attempt (the DLQ) */
	const char *subscription_id;
	const char *event_type;     /* exact */
	const char *q;              /* substring of last_message or last_cause */
	int64_t from_ms, to_ms;     /* created_at range, 0 = unbounded; to is exclusive */
	enum store_sort sort;
	int descending;
	const char *cursor;         /* from a previous page, NULL for the first */
	size_t limit;               /* 1..1000 */
};

/* One page of deliveries. *next_cursor is returned (NULL on the last page). */
int store_deliveries_list(store *st, const struct store_delivery_filter *f,
			  struct store_delivery **items, size_t *n, char **next_cursor);

/* ---- operator actions --------------------------------------------------------------- */

enum store_replay_outcome {
	REPLAY_DONE = 0,        /* put back as NEW with the replay flag, due now */
	REPLAY_NOT_FOUND,
	REPLAY_NOT_FAILED,      /* PROCESSED without force, or NEW already pending */
	REPLAY_IN_FLIGHT,       /* leased right now */
};

/* Replays the given deliveries (FAILED; PROCESSED too when force). outcomes[i] (may be
 * NULL) receives each one's outcome; *replayed the number put back. One transaction. */
int store_replay(store *st, const char (*ids)[UUID_STR_LEN], size_t n, int force,
		 enum store_replay_outcome *outcomes, size_t *replayed);

/* Deletes one dead-lettered delivery (FAILED, no next attempt, not leased) and its
 * attempts; STORE_NOT_FOUND or STORE_CONFLICT (not dead) otherwise. An event left with
 * no delivery is deleted too. */
int store_dlq_purge(store *st, const char *delivery_id);

/* Deletes PROCESSED deliveries (and their attempts), then events left with no
 * deliveries (seed 000/002 cleanup job). *deleted = deliveries removed. */
int store_cleanup(store *st, size_t *deleted);

/* ---- subscriptions ------------------------------------------------------------------ */

/* A subscription row: the configuration is the JSON document the API accepted (with
 * secrets in clear: the API masks them on the way out). */
struct store_sub {
	char id[UUID_STR_LEN];
	char *name;
	char *config;               /* JSON text */
	int enabled;
	int64_t created_at;
	int64_t updated_at;
};

int store_sub_create(store *st, const struct store_sub *sub);  /* CONFLICT: same name */
int store_sub_update(store *st, const struct store_sub *sub);  /* NOT_FOUND, CONFLICT */
int store_sub_delete(store *st, const char *id);               /* NOT_FOUND */
int store_sub_get(store *st, const char *id, struct store_sub *out);
/* All subscriptions ordered by created_at (returned array). */
int store_sub_list(store *st, struct store_sub **items, size_t *n);
void store_sub_free(struct store_sub *sub);                    /* frees members only */
void store_subs_free(struct store_sub *items, size_t n);

#endif
