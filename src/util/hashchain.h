/* hashchain.h: chained hash tables that grow, for the dispatcher's state per subscription
 * and per endpoint, looked up on every delivery. With a fixed 256 chains, 10,000
 * subscriptions each to its own endpoint made every lookup walk ~40 nodes, a string
 * comparison each (docs/performance.md, "Many subscriptions").
 *
 * The node is embedded in the owner's struct (the owner gets back from it with offsetof)
 * and keeps its key's hash, so a lookup compares keys only where the hashes are equal.
 * The table doubles when it holds more than two nodes per chain on average; it never
 * shrinks. A zeroed table is an empty one. Not thread-safe. */
#ifndef OUTBOXD_UTIL_HASHCHAIN_H
#define OUTBOXD_UTIL_HASHCHAIN_H

#include <stddef.h>
#include <stdint.h>

struct hc_node {
	struct hc_node *next;
	uint32_t hash;
};

struct hc_table {
	struct hc_node **chains;     /* mask + 1 of them, NULL until the first add */
	size_t mask;
	size_t count;
};

/* The first node of the chain where nodes of that hash are (follow next; compare the
 * hash, then the key). */
static inline struct hc_node *hc_chain(const struct hc_table *t, uint32_t hash)
{
	return t->chains ? t->chains[hash & t->mask] : NULL;
}

/* Adds x with that hash (no check for a node with the same key). 0, or -1 when memory ran
 * out for the table's first chains (x is then not in it); out of memory to grow, the
 * table keeps its chains. */
int hc_add(struct hc_table *t, struct hc_node *x, uint32_t hash);

/* Calls visit(x, ctx) on every node; those it returns nonzero for are taken out of the
 * table (visit may free them: the walk has moved past). */
void hc_sweep(struct hc_table *t, int (*visit)(struct hc_node *x, void *ctx), void *ctx);

/* Frees the chains' array (the nodes are the caller's); the table is empty again. */
void hc_free(struct hc_table *t);

#endif
