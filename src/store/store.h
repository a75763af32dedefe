/* store.h: the storage interface of outboxd.
 *
 * One opaque handle, one `const struct store_methods` per backend (store/sqlite/,
 * store/postgres/), reached only through the store_* wrappers below. Callers never see SQL
 * or library types. Every function is safe to call from any thread.
 *
 * What a backend must guarantee (the conformance suite in tests/store/ checks it):
 *  - store_ingest is atomic: an event and all its deliveries, or nothing; durable when it
 *    returns STORE_OK (SQLite: WAL + synchronous=FULL; PostgreSQL: a synchronous commit).
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

#include "core/filter.h"
#include "core/model.h"
#include "core/subscriptions.h"

typedef struct store store;

enum store_err {
	STORE_OK = 0,
	STORE_NOT_FOUND,    /* no such row */
	STORE_CONFLICT,     /* state does not allow the change (e.g. purge of a live delivery) */
	STORE_UNAVAILABLE,  /* the database cannot be reached or written now: retry later */
	STORE_LOCKED,       /* another outboxd owns this store (SQLite) */
	STORE_INVALID,      /* bad argument (e.g. malformed cursor) */
	STORE_ERROR,        /* anything else; the backend logged the cause */
	STORE_TIMEOUT,      /* a read ran longer than the store's read timeout and was stopped
	                       (store_set_read_timeout) */
};

const char *store_strerror(int err);

/* ---- lifecycle ------------------------------------------------------------------ */

/* Opens the store named by dsn ("sqlite:PATH" or "postgres://..."), applies migrations
 * and, for SQLite, takes the exclusive owner lock (STORE_LOCKED when another outboxd
 * holds it). owner (borrowed, copied) identifies this process in leases. On failure a
 * message is written to err. */
int store_open(const char *dsn, const char *owner, store **out, char *err, size_t errlen);
/* store_open for a tool that works beside a running outboxd (outboxd spool replay): the
 * same, except that SQLite's owner lock is not taken. Such a handle must not claim
 * deliveries nor release leases (store_claim_due, store_release_all): the daemon owns
 * them. Its writes wait for the daemon's (SQLite: busy timeout). */
int store_open_shared(const char *dsn, const char *owner, store **out, char *err,
		      size_t errlen);
/* Makes owner (borrowed, copied) the lease owner st acts as from now on: a tool applying
 * spooled results on behalf of the instance that held their leases (store_record_results
 * applies a result only where st's owner holds the lease). Not thread-safe: only for a
 * handle used by one thread. STORE_INVALID when owner is empty or too long. */
int store_set_owner(store *st, const char *owner);
void store_close(store *st);
const char *store_backend_name(const store *st);
const char *store_owner(const store *st);
/* STORE_OK when the database answers a trivial query. */
int store_ping(store *st);

/* How long a read may run before the store stops it and answers STORE_TIMEOUT: the reads
 * of SQLite's read connections, and every statement of PostgreSQL's API sessions (the
 * HTTP API's lists, searches, counts and operator actions). A search over millions of
 * deliveries that no index serves otherwise holds a read connection for as long as it
 * runs, even after its client gave up. STORE_READ_TIMEOUT_MS from store_open; 0: none.
 * Thread-safe; sessions take a new value at their next call. */
#define STORE_READ_TIMEOUT_MS 30000
void store_set_read_timeout(store *st, int64_t ms);

/* Asks to be told when work may have become due elsewhere: another instance or a
 * producer stored events, or an operator replayed deliveries (PostgreSQL: LISTEN on
 * channel outboxd_work; bursts are coalesced). cb(ctx) runs on a backend thread and must
 * be cheap and thread-safe (e.g. dispatcher_wake). A no-op for backends without such a
 * signal (SQLite: one process, which wakes itself). Passing cb = NULL stops the calls:
 * when it returns, no call is running and none will be made. Not reentrant: call it from
 * one thread (the one that wires the daemon). */
void store_on_work(store *st, void (*cb)(void *ctx), void *ctx);

/* The same for subscriptions: cb(ctx, ids, n) runs when any instance (this one included)
 * created, changed or deleted subscriptions (PostgreSQL: LISTEN on channel
 * outboxd_subs), so each instance updates its in-memory set; without it, an instance
 * would fan out without another's new subscription. ids (borrowed for the call) are the
 * n that changed; n 0 means any may have: read them all. That is the call after every
 * (re)connection of the listener, since a change may have been missed meanwhile, and
 * after a burst naming more than STORE_SUBS_CHANGED_MAX. Same rules as store_on_work. */
#define STORE_SUBS_CHANGED_MAX 64
typedef void (*store_subs_changed_cb)(void *ctx, const char (*ids)[UUID_STR_LEN], size_t n);
void store_on_subscriptions_changed(store *st, store_subs_changed_cb cb, void *ctx);

/* ---- ingest and fan-out ---------------------------------------------------------- */

/* One event to store, with the subscriptions it fans out to (computed by the caller). */
struct store_event_in {
	char id[UUID_STR_LEN];        /* in: new id; out: the stored id (the first one
	                                 when duplicate) */
	const char *event_type;       /* borrowed, required */
	const char *source;           /* borrowed, "" when absent */
	const char *source_event_id;  /* borrowed, NULL when absent; unique per source */
	const char *partition_key;    /* borrowed, NULL when absent */
	const char *traceparent;      /* borrowed, W3C trace context of the ingest request
	                                 (validated), NULL when absent */
	const char *webhook_id;       /* borrowed, the event's id upstream (an envelope's
	                                 event.id): the webhook-id its deliveries carry;
	                                 NULL: the event's own id */
	const char *content_type;     /* borrowed, required */
	const void *payload;          /* borrowed */
	size_t payload_len;
	const void *envelope;         /* borrowed, NULL when none: the Kafka message the
	                                 event came as (an OutboxEvent, its credentials
	                                 masked; an undecodable one as it came), kept for
	                                 the API's view of its deliveries */
	size_t envelope_len;
	int64_t created_at;           /* ms since the epoch */
	const char (*subscription_ids)[UUID_STR_LEN]; /* borrowed, n_subscriptions of them */
	size_t n_subscriptions;
	int duplicate;                /* out: 1 when (source, source_event_id) existed; then
	                                 nothing was inserted for this event */
	/* Initial state of this event's deliveries; all zero is the usual: NEW, due at
	 * created_at. DELIVERY_FAILED with first_due_at > 0: a scheduled retry is pending
	 * then; with first_due_at 0: dead at once (an undecodable Kafka message). NEW with
	 * first_due_at > 0: due then (a dead-letter topic's message, with
	 * starts_scheduled). The deliveries carry initial_code/message/cause (borrowed, may
	 * be NULL) as their last error (a dead-letter topic's message: the upstream error).
	 * The spool never carries these: only the Kafka intake sets them, and it never
	 * spools (Kafka keeps what is not committed). */
	enum delivery_status initial_status;
	int64_t first_due_at;
	int initial_code;
	const char *initial_message;
	const char *initial_cause;
	/* 1: the first round of this event's deliveries is a scheduled retry, not an
	 * immediate round (a dead-letter topic's message: NEW, due at first_due_at, first
	 * tried by the scheduled layer). Carried in the claim (store_claim). */
	int starts_scheduled;
	int dedupe_by_id;             /* set by the wrappers, not the caller: 1 during
	                                 store_ingest_replay */
	/* The hand-off (writer.h): with lease_until > 0 this event's deliveries are inserted
	 * leased to this store's owner until then, so the caller delivers them at once,
	 * without a claim; their ids are written to delivery_ids (the caller's room for
	 * n_subscriptions). Only for an event that starts in the usual state (not
	 * store_event_initial) and is not replayed from the spool. */
	int64_t lease_until;
	char (*delivery_ids)[UUID_STR_LEN];
};

/* 1 when ev's deliveries start in another state than NEW-due-at-created_at, for an
 * immediate round. */
static inline int store_event_initial(const struct store_event_in *ev)
{
	return ev->initial_status != DELIVERY_NEW || ev->first_due_at != 0 || ev->starts_scheduled;
}

/* next_attempt_at of ev's new deliveries (0 = none: dead at once), created at created. */
static inline int64_t store_event_first_due(const struct store_event_in *ev, int64_t created)
{
	if (ev->first_due_at)
		return ev->first_due_at;
	return ev->initial_status == DELIVERY_FAILED ? 0 : created;
}

/* Stores n events and their deliveries (status NEW, due at created_at, unless the event
 * asks for another initial state) in one transaction. All or nothing. */
int store_ingest(store *st, struct store_event_in *events, size_t n);

/* store_ingest for work replayed from the spool (spool.h): ids are given, and an event
 * whose id is already stored counts as a duplicate too (the first attempt may have
 * committed when only its answer was lost), so its deliveries are not inserted twice. */
int store_ingest_replay(store *st, struct store_event_in *events, size_t n);

/* Fan-out callback for the relay: sets *ids and *n to the subscriptions that want the
 * event (its type, and its payload for those with a payload filter). The array stays
 * valid until the next call with the same ctx. */
typedef void (*store_fanout_cb)(void *ctx, const struct store_event_in *ev,
				const char (**ids)[UUID_STR_LEN], size_t *n);

/* Moves up to limit rows from the producer `outbox` table into events and deliveries,
 * and deletes them, in one transaction (the transactional outbox: a crash leaves either
 * the rows or the events, never both or neither). New event ids are
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
	int starts_scheduled;        /* 1: a NEW delivery whose first round is a scheduled
	                                retry (store_event_in.starts_scheduled) */
	int attempt_count;           /* HTTP attempts so far */
	int retry_count;             /* scheduled retries so far */
	int delay_actions;           /* circuit-breaker delay actions so far */
	int64_t lease_until;         /* ms since the epoch: when the lease taken with this
	                                claim runs out unless renewed (store_leases_renew) */
	int64_t event_created_at;
	char traceparent[56];        /* the event's W3C trace context, "" when none */
	char *event_type;            /* these point into one allocation per claim */
	char *source;                /* the event's source ("" when none) */
	char *source_event_id;       /* NULL when absent */
	char *partition_key;         /* NULL when absent */
	char *webhook_id;            /* the event's id upstream, NULL: event_id is the
	                                webhook-id (store_event_in.webhook_id) */
	char *content_type;
	void *payload;
	size_t payload_len;
};

/* The webhook-id of a claimed delivery's requests and publishes: the event's id
 * upstream when it has one, else its own id. */
static inline const char *store_claim_webhook_id(const struct store_claim *c)
{
	return c->webhook_id ? c->webhook_id : c->event_id;
}

/* Leases up to limit due deliveries (next_attempt_at <= now, no live lease), oldest
 * due first, for lease_ms. Returns them in *items (returned; free with
 * store_claims_free). */
int store_claim_due(store *st, int64_t now_ms, int64_t lease_ms, size_t limit,
		    struct store_claim **items, size_t *n);
void store_claims_free(struct store_claim *items, size_t n);
/* Frees what one claim holds (its event part, made by store_claim_fill), not the claim:
 * for a backend's claims kept in its own rows until they are handed out. */
void store_claim_release(struct store_claim *c);

/* The claim of delivery k of ev as a claim would return it, for a delivery the caller
 * leased at ingest (store_event_in.lease_until): NEW, no attempt yet, the event's fields
 * copied into one allocation. Returns 0, or -1 when out of memory. */
int store_claim_of_event(const struct store_event_in *ev, size_t k, struct store_claim *out);

/* Extends the leases this store's owner holds on n deliveries: ids[i] until until[i] (ms
 * since the epoch), in one transaction. renewed[i] is set to 1 where the lease was still
 * this owner's and now runs until until[i], 0 where it is not (lost: it expired and was
 * returned to the pool, or a result cleared it). A round that runs longer than a lease
 * keeps its delivery this way, so no other instance (or a claim of this one) starts a
 * second round of it meanwhile. */
int store_leases_renew(store *st, const char (*ids)[UUID_STR_LEN], const int64_t *until,
		       size_t n, unsigned char *renewed);

/* Earliest next_attempt_at among unleased deliveries, or 0 when none is pending. */
int store_next_due(store *st, int64_t *at_ms);

/* One attempt, as the delivery's retry history keeps it. */
struct store_attempt {
	int n;                      /* 1-based attempt number of the delivery */
	enum attempt_kind kind;
	int64_t started_at;         /* ms since the epoch */
	int64_t duration_ms;
	int code;                   /* HTTP status or mapped code (502/503/504/525/520) */
	const char *message;        /* borrowed, short description */
	const char *cause;          /* borrowed, library error or first KiB of the body */
	int not_sent;               /* 1: it failed before the request reached the receiver
	                               (refused, connect timeout, SSRF) */
};

/* The outcome of a claimed delivery. Applied only while this store's owner still holds
 * the lease; the lease is cleared. A result whose lease was lost changes nothing but its
 * attempts, which are still recorded (every request sent is in the history), numbered
 * after the delivery's last recorded one. */
struct store_result {
	const char *delivery_id;    /* borrowed */
	const char *subscription_id; /* borrowed: the delivery's, which its attempts are
	                               counted for (SQLite counts by it; PostgreSQL's
	                               results statement takes it from the rows it updates);
	                               NULL (a result read back from a spool): looked up */
	enum delivery_status status;
	int replay;                 /* new value of the replay flag */
	int attempt_count;          /* new totals */
	int retry_count;
	int delay_actions;          /* new total of circuit-breaker delay actions */
	int64_t next_attempt_at;    /* 0 = none: with FAILED this is the dead-letter queue */
	int64_t processed_at;       /* 0 = none */
	int last_code;              /* 0 = no error; -1 = keep the current last error */
	const char *last_message;   /* borrowed, may be NULL */
	const char *last_cause;     /* borrowed, may be NULL */
	const struct store_attempt *attempts; /* borrowed, attempts made in this round */
	size_t n_attempts;
	int ordered_key;            /* a delivery of a key-ordered subscription with a key: a
	                               final result lets the next one of its key go at once */
	int dead_letter;            /* 1: the delivery is dead and to be published to its
	                               Kafka dead-letter topic: marked in the same write,
	                               until store_dead_letters_done (store_dead_letters) */
};

/* Writes n results and their attempt rows in one transaction (group commit). */
int store_record_results(store *st, const struct store_result *results, size_t n);

/* A dead delivery marked for its Kafka dead-letter topic (store_result.dead_letter):
 * what a claim has of it (its event; attempt_count) and its last error. */
struct store_dead_letter {
	struct store_claim claim;
	int last_code;              /* 0 = none */
	char *last_message;         /* NULL when none */
	char *last_cause;
};

/* Up to limit marked deliveries, oldest first (returned; store_dead_letters_free). The
 * mark stays until store_dead_letters_done: a crash before that returns them again. */
int store_dead_letters(store *st, size_t limit, struct store_dead_letter **items, size_t *n);
/* Clears the mark of n deliveries (published: the topic acknowledged them). */
int store_dead_letters_done(store *st, const char (*ids)[UUID_STR_LEN], size_t n);
void store_dead_letters_free(struct store_dead_letter *items, size_t n);

/* Clears leases that expired before now_ms (crash recovery). *n = leases cleared. */
int store_reap_leases(store *st, int64_t now_ms, size_t *n);

/* Per-key ordering: the claim already keeps a delivery of an ordered
 * subscription waiting while an earlier one of its key is not done, so this is about
 * cost, not correctness. Due deliveries that wait their turn behind an unfinished one of
 * their key are parked — no next_attempt_at — so claims stop scanning them (a final
 * result of that one lets the next go at once, see store_result.ordered_key). With full
 * set also: pending ones behind a dead one of their key (ORDERING_KEY_BLOCK) are parked
 * as blocked (*parked counts them), and parked ones whose reason is gone (replayed,
 * purged, done, or the subscription's ordering changed) are due again at now
 * (*unparked). The janitor thread runs it every second, full at reap_interval and after a
 * replay or purge. */
int store_order_sweep(store *st, int64_t now_ms, int full, size_t *parked, size_t *unparked);
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
	char *webhook_id;           /* the id upstream, NULL when none (store_event_in) */
	char *content_type;
	void *payload;
	size_t payload_len;
	void *envelope;             /* the Kafka message it came as (store_event_in.envelope);
	                               NULL when none, and always in store_events_list */
	size_t envelope_len;
	char traceparent[56];       /* its W3C trace context, "" when none (and always in
	                               store_events_list) */
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
	int blocked;                /* parked behind a dead delivery of its key (ordering) */
	int64_t failing_since;      /* FAILED: when its run of failures began; 0 = none */
};

struct store_attempt_row {
	int n;
	enum attempt_kind kind;
	int64_t started_at;
	int64_t duration_ms;
	int code;
	int not_sent;               /* it failed before its request reached the receiver */
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

/* One page of deliveries. *next_cursor is returned (NULL on the last page). */
int store_deliveries_list(store *st, const struct delivery_filter *f,
			  struct store_delivery **items, size_t *n, char **next_cursor);

/* How many deliveries match the filter (cursor and limit are ignored). */
int store_deliveries_count(store *st, const struct delivery_filter *f, size_t *n);

/* One event as the event search lists it: the event without its payload (payload is
 * "", payload_len 0), and how many of its deliveries are in each state (the states of
 * store_stats). */
struct store_event_summary {
	struct store_event event;
	int64_t new_count;          /* its deliveries NEW */
	int64_t processed_count;    /* PROCESSED */
	int64_t retrying_count;     /* FAILED with a next attempt */
	int64_t dead_count;         /* FAILED with none: in the DLQ */
};

/* One page of the events matching f (GET /v1/events), newest first: by created_at, then
 * id, both descending. f->cursor (borrowed, NULL = the first page) is a *next_cursor of
 * an earlier call, STORE_INVALID otherwise; f->limit 1..1000. *items is returned
 * (store_event_summaries_free), *next_cursor too (NULL on the last page). */
int store_events_list(store *st, const struct event_filter *f,
		      struct store_event_summary **items, size_t *n, char **next_cursor);
void store_event_summaries_free(struct store_event_summary *items, size_t n);
/* The cursor of the page that starts after event e of a store_events_list page
 * (returned), or NULL when out of memory: a search that reads events itself (the payload
 * search) resumes there. */
char *store_event_cursor(const struct store_event_summary *e);

/* An event type the store holds events of (GET /v1/event-types). */
struct store_event_type {
	char *event_type;
	int64_t last_seen;          /* created_at of its newest event, ms since the epoch */
};

/* Up to limit (1..1000) of the event types of the stored events, in byte order, after
 * cursor (a *next_cursor of an earlier call; NULL: from the first); each found with two
 * index seeks, however many events it has. *items is returned (store_event_types_free),
 * *next_cursor too (NULL on the last page). */
int store_event_types(store *st, const char *cursor, size_t limit,
		      struct store_event_type **items, size_t *n, char **next_cursor);
void store_event_types_free(struct store_event_type *items, size_t n);

/* ---- operator actions --------------------------------------------------------------- */

enum store_replay_outcome {
	REPLAY_DONE = 0,        /* put back as NEW with the replay flag, due now, with no
	                           delay actions counted */
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

/* Deletes up to limit dead deliveries matching f (dead_only is implied) after cursor
 * order, like store_dlq_purge each. *purged = deleted. */
int store_dlq_purge_matching(store *st, const struct delivery_filter *f, size_t limit,
			     size_t *purged);

/* The cleanup job (before_ms applies cleanup_after): deletes PROCESSED deliveries
 * processed at or before before_ms (and their attempts), then the events created at or
 * before before_ms that have no delivery (an event no subscription wanted stays as long
 * as a delivered one, for an operator to look up). Works in transactions of at most
 * CLEANUP_BATCH deliveries, so writers wait at most one batch. max 0 does it all in one
 * call. Otherwise a call does a slice — up to
 * max deliveries, or when they are done, a part of the sweep of the events (up to
 * CLEANUP_SWEEP events looked at) — and sets *more when the run is not over: a caller with
 * other work (the janitor) calls again after it, and the run goes on where it stopped.
 * *deleted = deliveries removed; more may be NULL. */
int store_cleanup(store *st, int64_t before_ms, size_t max, size_t *deleted, int *more);

/* ---- operator jobs and audit ------------------------------------------------------------ */

/* A long-running operator action (a paced filter replay) that survives restarts. */
struct store_job {
	char id[UUID_STR_LEN];
	char kind[16];              /* "replay" */
	char state[16];             /* running, done, cancelled, failed */
	char *filter;               /* JSON text of the request's filter */
	int force;
	int rate;                   /* deliveries per second */
	int64_t matched;
	int64_t done;               /* replayed so far */
	char *cursor;               /* where the next page starts (NULL at the start) */
	char *actor;                /* token name */
	char *error;                /* why it failed, or NULL */
	int64_t created_at;
	int64_t updated_at;
};

int store_job_create(store *st, const struct store_job *job);
/* Writes state, counts, cursor and error of a job that is still running; STORE_NOT_FOUND
 * when it is not (a cancel is never overwritten by a late progress update). */
int store_job_update(store *st, const struct store_job *job);
int store_job_get(store *st, const char *id, struct store_job *out);
/* Jobs in state "running", oldest first (returned array). */
int store_jobs_running(store *st, struct store_job **items, size_t *n);
/* One page of jobs, newest first (created_at, then id), for GET /v1/jobs: state
 * (borrowed, NULL = any) keeps those in it; cursor (borrowed, NULL = the first page) is a
 * *next_cursor of an earlier call; limit 1..1000. *items is returned, *next_cursor too
 * (NULL on the last page). STORE_INVALID for a cursor this function did not make. */
int store_jobs_list(store *st, const char *state, const char *cursor, size_t limit,
		    struct store_job **items, size_t *n, char **next_cursor);
void store_job_free(struct store_job *job);                    /* frees members only */
void store_jobs_free(struct store_job *items, size_t n);

/* One operator action, for GET /v1/audit. */
struct store_audit {
	char id[UUID_STR_LEN];
	int64_t at;
	char *actor;                /* token name: admin, ingest */
	char *action;               /* e.g. dlq.replay, dlq.purge, subscription.create */
	char *target;               /* an id, or a JSON filter */
	int64_t count;              /* how many deliveries or rows it touched */
	char *detail;               /* JSON text or NULL */
};

int store_audit_append(store *st, const struct store_audit *a);
/* Newest first; before_id (or NULL) continues a previous page. */
int store_audit_list(store *st, const char *before_id, size_t limit, struct store_audit **items,
		     size_t *n);
void store_audits_free(struct store_audit *items, size_t n);

/* ---- API tokens --------------------------------------------------------------------------- */

/* A named API token (POST /v1/tokens). The token itself is never stored: hash is the
 * hex SHA-256 of it (core/token.h), prefix its first characters for telling tokens apart. */
struct store_token {
	char id[UUID_STR_LEN];
	char *name;
	char *scopes;               /* "read,operate": core/token.h parses it */
	char hash[65];
	char prefix[16];
	char *actor;                /* who created it, or NULL */
	int64_t created_at;
	int64_t expires_at;         /* refused from then on (ms); 0 = never */
	int64_t last_used_at;       /* last recorded use (ms), 0 = never (store_token_touch) */
};

int store_token_create(store *st, const struct store_token *t);  /* CONFLICT: same name */
int store_token_delete(store *st, const char *id);                 /* NOT_FOUND */
/* Records a use of token id at at_ms: last_used_at becomes at_ms unless it is later
 * already. One write: callers record a token's use at most once a minute, not per
 * request. NOT_FOUND when the token is gone. */
int store_token_touch(store *st, const char *id, int64_t at_ms);
/* All tokens ordered by created_at (returned array). */
int store_token_list(store *st, struct store_token **items, size_t *n);
void store_tokens_free(struct store_token *items, size_t n);

/* ---- stats ------------------------------------------------------------------------------- */

struct store_sub_stats {
	char subscription_id[UUID_STR_LEN];
	int64_t attempts;           /* in the window */
	int64_t successes;
	int last_code;              /* newest failed attempt in the window, 0 if none */
	char *last_message;
	int64_t last_error_at;
};

struct store_stats {
	int64_t new_count;
	int64_t processed_count;
	int64_t retrying_count;     /* FAILED with a next attempt */
	int64_t dead_count;         /* FAILED with none: the DLQ */
	int64_t in_flight;          /* leased */
	int64_t due_count;          /* next_attempt_at <= now, not leased: the backlog */
	int64_t oldest_due_at;      /* 0 when none */
	int64_t oldest_dead_at;     /* created_at of the oldest dead delivery, 0 when none */
	int64_t blocked_count;      /* parked behind a dead delivery of their key (ordering) */
	int64_t blocked_keys;       /* (subscription, key) pairs with parked deliveries */
	int64_t oldest_failing_since; /* the earliest failing_since of a retrying delivery, 0 */
	struct store_sub_stats *subs; /* returned array, sorted by subscription_id (strcmp) */
	size_t n_subs;
};

/* Attempts are counted per minute as they are recorded (the per-subscription figures and
 * the series read those counts, not the attempts): a minute starts at a multiple of this
 * many ms since the epoch. */
#define STORE_MINUTE_MS 60000

/* The start of the minute ms falls in. */
static inline int64_t store_minute_start(int64_t ms)
{
	return ms - ms % STORE_MINUTE_MS;
}

/* Counts, and per-subscription outcomes of the attempts started in the minutes from the
 * one now - window_ms falls in through the current one; the newest failure only when it
 * started after now - window_ms. */
int store_stats(store *st, int64_t now_ms, int64_t window_ms, struct store_stats *out);
void store_stats_free(struct store_stats *s);
/* The figures of subscription id among the n of subs sorted by subscription_id (as
 * store_stats returns them), or NULL: a binary search. */
struct store_sub_stats *store_sub_stats_find(const struct store_sub_stats *subs, size_t n,
					     const char *id);

/* Attempts per time bucket by outcome, and how long they took (the console's charts):
 * bucket i counts the attempts started in [from_ms + i * bucket_ms, from_ms + (i + 1) *
 * bucket_ms); from_ms and bucket_ms are whole minutes (STORE_MINUTE_MS: STORE_INVALID
 * otherwise). subscription_id (borrowed; NULL = every subscription) keeps only the
 * attempts of that subscription's deliveries. out is borrowed: n_buckets entries the
 * caller owns, zeroed and filled here (store/series.c). */
#define STORE_SERIES_MAX 1440     /* buckets at most: a day of minutes */
struct store_series_bucket {
	int64_t succeeded;          /* 2xx */
	int64_t client_error;       /* 400-499 (the SSRF guard's 403 included) */
	int64_t server_error;       /* everything else: 5xx, mapped transport errors, 3xx */
	/* The bucket's attempt durations (duration_ms, whatever the outcome) at the 50th and
	 * 99th percentile, exact: the nearest-rank percentile, the smallest duration at least
	 * p% of the bucket's attempts did not exceed. -1 when the bucket has no attempt. */
	int64_t p50_ms;
	int64_t p99_ms;
};
int store_attempt_series(store *st, const char *subscription_id, int64_t from_ms,
			 int64_t bucket_ms, size_t n_buckets, struct store_series_bucket *out);

/* Deletes the attempt counts of the minutes before before_ms and the newest failures
 * that started before it (the janitor keeps a day: the series' reach). The attempts
 * themselves are untouched. */
int store_attempt_counts_prune(store *st, int64_t before_ms);

/* ---- subscriptions ------------------------------------------------------------------ */


int store_sub_create(store *st, const struct sub_row *sub);  /* CONFLICT: same name */
int store_sub_update(store *st, const struct sub_row *sub);  /* NOT_FOUND, CONFLICT */
int store_sub_delete(store *st, const char *id);               /* NOT_FOUND */
/* Disables subscription id, noting why and when in its document (disabled_reason,
 * disabled_at: endpoint health); its pending deliveries wait. */
int store_sub_disable(store *st, const char *id, const char *reason, int64_t at_ms);
int store_sub_get(store *st, const char *id, struct sub_row *out);
/* All subscriptions ordered by created_at (returned array). */
int store_sub_list(store *st, struct sub_row **items, size_t *n);
/* Up to limit (1..1000) subscriptions ordered by created_at, then id, after the page that
 * cursor (NULL: from the first) ended; when name is not NULL only the one named name, or,
 * when name holds '*' (any run) or '?' (one character), those whose name matches it as a
 * glob, letters' case ignored;
 * *next_cursor (free it) is the cursor of the page after this one, NULL on the last.
 * STORE_INVALID for a cursor this did not make. */
int store_sub_page(store *st, const char *cursor, const char *name, size_t limit,
		   struct sub_row **items, size_t *n, char **next_cursor);
void store_sub_free(struct sub_row *sub);                    /* frees members only */
void store_subs_free(struct sub_row *items, size_t n);

/* ---- subscription credentials at rest (store/secrets.c) ----------------------------- */

/* Subscription configs hold credentials and signing secrets: with a key, the store keeps
 * them sealed (core/secretbox.h, AES-256-GCM bound to the row's id). store_sub_create
 * and store_sub_update seal, store_sub_get and store_sub_list open: nothing above the
 * store sees a sealed text. Without a key (tests of the store alone) configs are
 * written in clear, and a sealed row reads as STORE_ERROR. A row still in clear reads
 * as it is: store_secrets_prepare seals it at start. */
struct secretbox_key;

/* Gives st its key (borrowed, copied; overwritten at store_close). Call it once after
 * store_open, before other threads use st. STORE_OK, or STORE_ERROR (out of memory). */
int store_set_secret_key(store *st, const struct secretbox_key *key);

/* At start, with the key set: every sealed subscription must open with it, else nothing
 * is changed and err says which row, under which key id, against ours, and what to do
 * (STORE_ERROR); then the rows still in clear are sealed in place (*migrated of them).
 * Returns a store error code. */
int store_secrets_prepare(store *st, size_t *migrated, char *err, size_t errlen);

/* `outboxd rotate-key`: re-seals every subscription under new_key (borrowed). Rows under
 * st's key or in clear are sealed with new_key (*resealed); rows already under new_key
 * are left (*skipped), so a run interrupted half way is finished by running it again. A
 * row under any other key, or one that does not open, stops it before any row changed
 * (STORE_ERROR, err says which). Returns a store error code. */
int store_secrets_rotate(store *st, const struct secretbox_key *new_key, size_t *resealed,
			 size_t *skipped, char *err, size_t errlen);

/* ---- facts about the store itself ---------------------------------------------------- */

/* Names of the facts store_meta keeps. */
#define STORE_META_SEALING_KEY "sealing_key_id" /* the key id the store's rows are sealed
                                                   with (core/secretbox.h) */

struct store_meta_value {
	char value[128];
};

/* The fact name into *out; STORE_NOT_FOUND when it was never set. */
int store_meta_get(store *st, const char *name, struct store_meta_value *out);

/* Sets the fact name (borrowed) to value while it is expect (NULL: while it is not set),
 * atomically against every other instance. STORE_OK when set; STORE_CONFLICT when it was
 * something else, which *found (may be NULL) then holds. */
int store_meta_swap(store *st, const char *name, const char *expect, const char *value,
		    struct store_meta_value *found);

/* How many of the writer's group writes (an ingest group, a claim, a result group) the
 * backend runs side by side to advantage: 1 for SQLite (one write lock), 3 for PostgreSQL
 * (one connection each). store/writer.c runs that many lanes (at most 3). */
int store_concurrent_writers(store *st);

/* ---- fault injection (tests) --------------------------------------------------------- */

/* The operations store_fault_set can make fail: the pipeline's group writes and claims. */
enum store_fault_op {
	STORE_FAULT_INGEST = 1,   /* store_ingest, store_ingest_replay */
	STORE_FAULT_RESULTS = 2,  /* store_record_results */
	STORE_FAULT_CLAIM = 4,    /* store_claim_due */
};

/* The next count calls of the operations in calls (a mask of enum store_fault_op) answer
 * rc without reaching the backend, the way SQLite's os.c lets its tests fail I/O: unit
 * tests reach the outage paths of the writer and the spool without stopping a database.
 * count 0 clears. Any thread; costs one atomic load per call when unused. */
void store_fault_set(store *st, unsigned calls, int rc, int count);

/* hook(ctx, op) is called at the start of every call of the operations above (op one of
 * enum store_fault_op; lease renewals count as claims), on the caller's thread, before
 * any fault: a test can hold a writer inside a claim and see the order of its group
 * writes. NULL clears. Set it while the store is idle. */
typedef void (*store_call_hook)(void *ctx, unsigned op);
void store_call_hook_set(store *st, store_call_hook hook, void *ctx);

/* Rebuilds reg's set from the subscriptions in the store (core/sub_codec.h decodes each
 * row) and publishes it. A row unchanged since the set in use (the same stored config,
 * enabled and times) keeps its decoded subscription, shared by both sets, when the
 * defaults are the same. When the store cannot be read or a row cannot be opened or
 * decoded, the set in use stays and the registry is marked stale (sub_registry_stale)
 * until a reload succeeds. Returns a store error code. */
int store_subs_load(store *st, struct sub_registry *reg, const struct retry_policy *defaults);
/* After subscription id was changed, created or deleted (by this process, or by any
 * instance as store_on_subscriptions_changed tells): reads that row again and publishes
 * the set in use with it (sub_registry_apply), without reading the others. Falls back to
 * store_subs_load when the row cannot be read or decoded, or the set in use was decoded
 * with other defaults. Returns a store error code. */
int store_subs_load_one(store *st, struct sub_registry *reg,
			const struct retry_policy *defaults, const char *id);

#endif
