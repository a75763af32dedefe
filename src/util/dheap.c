/* dheap.c: deadlines in a binary min-heap (see dheap.h). */
#include "util/dheap.h"

#include <stdlib.h>

static void swap(struct dheap *h, size_t a, size_t b)
{
	struct dheap_node *t = h->v[a];
	h->v[a] = h->v[b];
	h->v[b] = t;
	h->v[a]->i = a;
	h->v[b]->i = b;
}

/* Restores the heap's order around place i, up or down. */
static void fix(struct dheap *h, size_t i)
{
	while (i > 0 && h->v[(i - 1) / 2]->at_us > h->v[i]->at_us) {
		swap(h, i, (i - 1) / 2);
		i = (i - 1) / 2;
	}
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		if (l < h->n && h->v[l]->at_us < h->v[m]->at_us)
			m = l;
		if (r < h->n && h->v[r]->at_us < h->v[m]->at_us)
			m = r;
		if (m == i)
			return;
		swap(h, i, m);
		i = m;
	}
}

int dheap_set(struct dheap *h, struct dheap_node *x, int64_t at_us)
{
	if (x->at_us) {
		x->at_us = at_us;
		fix(h, x->i);
		return 0;
	}
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 256;
		struct dheap_node **grown = realloc(h->v, cap * sizeof(*grown));
		if (!grown)
			return -1;
		h->v = grown;
		h->cap = cap;
	}
	x->at_us = at_us;
	x->i = h->n;
	h->v[h->n++] = x;
	fix(h, x->i);
	return 0;
}

void dheap_remove(struct dheap *h, struct dheap_node *x)
{
	if (!x->at_us)
		return;
	size_t i = x->i;
	x->at_us = 0;
	if (i != --h->n) {
		h->v[i] = h->v[h->n];
		h->v[i]->i = i;
		fix(h, i);
	}
}

void dheap_free(struct dheap *h)
{
	free(h->v);
	h->v = NULL;
	h->n = h->cap = 0;
}
