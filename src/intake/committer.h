/* committer.h: group commit of ingested events.
 *
 * API threads hand their parsed batches to one committer thread, which stores everything
 * that is waiting in one transaction (one fsync for many requests) and wakes the
 * submitters. An event is acknowledged only after that commit (DESIGN §3: durability). */
#ifndef OUTBOXD_INTAKE_COMMITTER_H
#define OUTBOXD_INTAKE_COMMITTER_H

#include <stddef.h>

#include "store/store.h"

struct committer;

/* Called after each successful commit, from the committer thread (e.g. to wake the
 * dispatcher). */
typedef void (*committer_done_cb)(void *ctx);

/* Starts the committer thread. Returns NULL when the thread cannot start. */
struct committer *committer_start(store *st, committer_done_cb done, void *ctx);

/* Stores events (borrowed; ids and duplicate flags are written back) and returns the
 * store's result once they are durable. Blocks the calling thread. */
int committer_submit(struct committer *c, struct store_event_in *events, size_t n);

/* Commits what is queued, then stops the thread and frees c. */
void committer_stop(struct committer *c);

#endif
