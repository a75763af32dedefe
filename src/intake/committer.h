/* committer.h: group commit of ingested events.
 *
 * API threads hand their parsed batches to one committer thread, which stores everything
 * that is waiting in one transaction (one fsync for many requests) and wakes the
 * submitters. An event is acknowledged only after that commit (DESIGN §3: durability).
 *
 * With a spool (seed 004's catastrophic-failure layer, opt-in), a group the store answers
 * STORE_UNAVAILABLE for is written to the spool instead, fsynced, and acknowledged: it is
 * durable there. A replay thread then puts spooled groups into the store every 500 ms
 * until the spool is empty (store_ingest_replay: an event already stored is not stored
 * twice). */
#ifndef OUTBOXD_INTAKE_COMMITTER_H
#define OUTBOXD_INTAKE_COMMITTER_H

#include <stddef.h>

#include "store/spool.h"
#include "store/store.h"

struct committer;


/* Called after each successful commit, from the committer thread (e.g. to wake the
 * dispatcher). */
typedef void (*committer_done_cb)(void *ctx);

/* Starts the committer thread, and the replay thread when spool (borrowed, may be NULL:
 * no spooling) is given; it must outlive the committer. done also runs after a replay
 * that stored something. Returns NULL when a thread cannot start. */
struct committer *committer_start(store *st, struct spool *spool, committer_done_cb done,
				  void *ctx);

/* Stores events (borrowed; ids and duplicate flags are written back) and returns the
 * store's result once they are durable. Blocks the calling thread. Spooled events come
 * back STORE_OK with duplicate = 0 (a repeated idempotency key is only found when the
 * spool is replayed; the replay then keeps the first event). */
int committer_submit(struct committer *c, struct store_event_in *events, size_t n);

/* Commits what is queued, then stops the threads and frees c. The spool is left as it
 * is: what it holds is replayed after the next start. */
void committer_stop(struct committer *c);

#endif
