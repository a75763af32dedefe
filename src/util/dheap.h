/* dheap.h: deadlines in a binary min-heap, for I/O loops that wait on many timers and
 * only ever need the soonest (the HTTP sink's requests, the lean client's connections).
 *
 * The node is embedded in the owner's struct (its place in the heap is kept there, so
 * removing or moving one is O(log n) without a search); the owner gets back from a node
 * with offsetof. The heap's array grows as needed and never shrinks. Not thread-safe. */
#ifndef OUTBOXD_UTIL_DHEAP_H
#define OUTBOXD_UTIL_DHEAP_H

#include <stddef.h>
#include <stdint.h>

struct dheap_node {
	int64_t at_us;               /* the deadline; 0 = not in the heap */
	size_t i;                    /* its place while in the heap */
};

struct dheap {
	struct dheap_node **v;
	size_t n, cap;
};

/* Puts x in the heap at at_us (> 0), or moves it there when it is in already. 0, or -1
 * when memory ran out (x is then not in the heap). */
int dheap_set(struct dheap *h, struct dheap_node *x, int64_t at_us);
/* Takes x out (nothing when it is not in). */
void dheap_remove(struct dheap *h, struct dheap_node *x);
/* The soonest node, NULL when empty. */
static inline struct dheap_node *dheap_top(const struct dheap *h)
{
	return h->n ? h->v[0] : NULL;
}
/* The soonest deadline, -1 when empty. */
static inline int64_t dheap_due_us(const struct dheap *h)
{
	return h->n ? h->v[0]->at_us : -1;
}
void dheap_free(struct dheap *h);

#endif
