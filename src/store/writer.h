/* writer.h: the one component that makes the delivery pipeline's writes to the store.
 *
 * The writer makes the pipeline's frequent writes, and group commit makes one sync serve
 * many of them (so durability does not cost throughput). Three kinds of work queue up
 * here and the writer takes them in cycles, each kind grouped into one store call (a
 * "round" is always a delivery's round of tries, never the writer's cycle):
 *   - ingest: parsed events from the API threads, the Kafka intake and outboxd's own
 *     operational events (writer_ingest blocks its caller until the events are durable:
 *     an event is acknowledged only once committed and synced);
 *   - results: finished delivery rounds from the dispatcher (writer_results hands them
 *     over and returns; written ones come back through writer_take, to be recycled);
 *   - claims: the dispatcher's requests for due deliveries (leases are writes too),
 *     and its renewals of the leases of rounds that run long (store_leases_renew).
 * The hand-off: an ingest group inserts the deliveries of its plain events (no partition
 * key, the usual initial state) leased to this instance, up to a cap of them waiting,
 * and hands them to the dispatcher with writer_take, as if claimed, as it has room:
 * fresh work needs no claim round trip. Claims remain for retries, the rest of a burst,
 * other instances' work and restarts; a handed delivery whose round never starts (a
 * crash) is claimed again when its lease expires.
 * A cycle does the claim first (new work waits on it), then the ingest group (callers
 * are blocked on it), then the results group (their items wait for company up to
 * WRITER_GROUP_WAIT_US, WRITER_GROUP_WAIT_LANES_US with lanes and no result of an ordered
 * key among them, and up to WRITER_RESULTS_MAX of them go in one transaction).
 *
 * Lanes: on SQLite (one write lock) one thread, "writer", takes all of it. A backend
 * whose group writes can run side by side (store_concurrent_writers: PostgreSQL, one
 * connection each) gets a thread per kind over the same queues, so that none waits for
 * another's statement: "writer" takes claims, "writer-results" result groups and lease
 * renewals (one after the other: both lock this instance's delivery rows),
 * "writer-ingest" ingest groups (measured in docs/performance.md: one thread for ingest
 * and the rest cost PostgreSQL about 15% of its deliveries/s while events arrived, results
 * on the claims' thread about 18%). A backend of two gets "writer" (claims and results)
 * and "writer-ingest".
 *
 * With a spool (the catastrophic-failure layer, opt-in: store/spool.h), a group the store
 * answers STORE_UNAVAILABLE for is written to the spool instead, fsynced, and counts as
 * durable. A second thread replays the spool into the store every 500 ms until it is
 * empty (store_ingest_replay: an event already stored is not stored twice).
 *
 * Other writes do not go through the writer: each is made on the thread that wants it,
 * in transactions of its own, beside the writer's:
 *   - the spool replay thread (above);
 *   - the janitor thread: the outbox relay (up to relay_batch outbox rows become events and
 *     deliveries, and are deleted, per transaction), the lease reaper, per-key
 *     ordering's sweep, cleanup (up to 1,000 deliveries per transaction) and the pages
 *     of paced replay jobs;
 *   - the API threads: operator actions (subscriptions, tokens, replays and purges by
 *     ids or by filter, replay jobs, audit rows);
 *   - the dispatcher's thread when it disables a failing subscription (serve.c's
 *     callback), and the Kafka dead-letter relay clearing the marks of what its topic
 *     acknowledged;
 *   - the start, before any of these threads runs: migrations, the leases an earlier
 *     run of an SQLite store's owner left, the sealing of clear subscription configs.
 * The relay in particular stays outside: its input is already durable (producers
 * committed the rows in their own transactions), so nobody waits on its commit and group
 * commit would save it nothing; and the rows it reads and deletes must be in the same
 * transaction as the events it makes of them, which the writer's queues of in-memory
 * groups do not carry. On SQLite it takes the one write lock between the writer's
 * groups, like every writer here; on PostgreSQL it runs on the jobs connection beside
 * the writer's.
 *
 * Must not acknowledge anything that is neither committed nor fsynced in the spool. */
#ifndef OUTBOXD_STORE_WRITER_H
#define OUTBOXD_STORE_WRITER_H

#include <stddef.h>
#include <stdint.h>

#include "store/spool.h"
#include "store/store.h"

#define WRITER_RESULTS_MAX 512      /* results in one transaction at most */
#define WRITER_GROUP_WAIT_US 1000   /* a result waits at most this long for company */
#define WRITER_GROUP_WAIT_LANES_US 10000 /* the same with lanes (PostgreSQL), no ordered key */
#define WRITER_INGEST_MAX 10000     /* events in one transaction (= STORE_MAX_BATCH) */

struct writer;

/* One delivery result in the writer's queue: embedded in the caller's own record (the
 * dispatcher's round), which stays the caller's memory; next links the queue. */
struct writer_result {
	struct store_result result;
	struct writer_result *next;
};

/* A renewal of leases the client asks for (writer_renew): its arrays stay the client's,
 * borrowed until the answer comes back through writer_take. */
struct writer_renewal {
	const char (*ids)[UUID_STR_LEN];
	const int64_t *until;
	unsigned char *renewed;        /* written by the writer: 1 = renewed, 0 = not (see
	                                  rc: lost, or not tried because the store failed) */
	size_t n;
	int rc;                        /* written by the writer: the store's answer */
};

/* What writer_take hands back to the dispatcher. */
struct writer_answer {
	struct writer_result *written; /* written (or spooled) results, in order: recycle */
	size_t n_written;
	int claimed;                   /* 1: the claim asked for is answered below */
	int claim_rc;                  /* STORE_OK or the store's error */
	struct store_claim *claims;    /* returned to the caller (store_claims_free) */
	size_t n_claims;
	int64_t next_due_ms;           /* after a short claim: when the next delivery is
	                                  due (0 = nothing pending); -1 = not known */
	int down;                      /* the last store call failed */
	struct store_claim *handed;    /* the hand-off: leased at ingest, to start as claims
	                                  (returned to the caller, store_claims_free) */
	size_t n_handed;
	struct writer_renewal *renewal; /* the renewal asked for, answered; NULL = none */
};

/* Starts the writer thread, and the spool replay thread when spool (borrowed, may be
 * NULL: no spooling) is given; st and spool must outlive the writer. Returns NULL when
 * a thread cannot start. */
struct writer *writer_start(store *st, struct spool *spool);

/* Called after each commit that stored events (ingest, or a spool replay), from the
 * writer's threads: wakes the dispatcher. cb NULL turns it off. Set it after the
 * dispatcher started, clear it before the dispatcher stops. */
void writer_on_commit(struct writer *w, void (*cb)(void *ctx), void *ctx);

/* Stores events (borrowed; ids and duplicate flags are written back) and returns the
 * store's result once they are durable. Blocks the calling thread. Spooled events come
 * back STORE_OK with duplicate = 0 (a repeated idempotency key is only found when the
 * spool is replayed; the replay then keeps the first event). STORE_UNAVAILABLE once
 * writer_stop began. */
int writer_ingest(struct writer *w, struct store_event_in *events, size_t n);

/* writer_ingest without blocking: done(ctx, rc) is called once with what writer_ingest
 * would return, from a writer thread when the events are durable or refused (keep
 * events until then), or from this call when the writer is stopping (STORE_UNAVAILABLE)
 * or memory ran out (STORE_ERROR). A thread that serves many callers (the HTTP API) takes
 * other requests meanwhile, and their events join the same group commit. */
void writer_ingest_start(struct writer *w, struct store_event_in *events, size_t n,
			 void (*done)(void *ctx, int rc), void *ctx);

/* writer_ingest for a caller whose source keeps what it was not told is stored (the
 * Kafka intake: a message stays in its topic until its offset is committed): never
 * spooled, STORE_UNAVAILABLE while the store cannot take the events (other requests of
 * the same group still go to the spool). Only what the store committed is STORE_OK, so
 * events that need what the spool does not carry (store_event_initial, webhook_id) are
 * never written there. */
int writer_ingest_stored(struct writer *w, struct store_event_in *events, size_t n);

/* The dispatcher's side. One client at a time: writer_attach before the first call,
 * ready(ctx) runs on the writer thread whenever writer_take has something new. */
void writer_attach(struct writer *w, void (*ready)(void *ctx), void *ctx);

/* Queues n results linked from head to tail (borrowed until writer_take returns them
 * as written, or writer_detach as unwritten). Never blocks on the store. */
void writer_results(struct writer *w, struct writer_result *head, struct writer_result *tail,
		    size_t n);

/* Asks for up to want due deliveries with a lease of lease_ms; the answer comes through
 * writer_take. At most one claim is outstanding. */
void writer_claim(struct writer *w, size_t want, int64_t lease_ms);

/* Asks for the leases of r (borrowed until answered) to be extended; the answer comes
 * through writer_take, before a claim asked at the same time. At most one outstanding. */
void writer_renew(struct writer *w, struct writer_renewal *r);

/* Takes what the writer finished since the last call (see struct writer_answer). */
void writer_take(struct writer *w, struct writer_answer *a);

/* The hand-off: writer_take may give the client up to room handed deliveries (room: the
 * rounds it can start besides an outstanding claim); up to cap may be leased and wait
 * for it, each leased for lease_ms. cap 0 turns the hand-off off. Cheap; call it
 * whenever the room changes. */
void writer_handoff_room(struct writer *w, size_t room, size_t cap, int64_t lease_ms);

/* Ingest requests queued and not taken by the writer yet. */
size_t writer_ingest_waiting(struct writer *w);

/* Results queued but not written yet (the store is down). */
size_t writer_unwritten(struct writer *w);

/* Ends the client's session: waits for a claim or result group in progress, frees an
 * answered claim nobody took (its leases expire), hands back to the store the deliveries
 * leased for the hand-off that were not taken, and returns the results still queued
 * (unwritten: the store is down) and the written ones not taken yet, in one list. */
struct writer_result *writer_detach(struct writer *w);

/* Commits the ingest that is queued, then stops the threads and frees w. The spool is
 * left as it is: what it holds is replayed after the next start. Call after the
 * dispatcher detached. */
void writer_stop(struct writer *w);

#endif
