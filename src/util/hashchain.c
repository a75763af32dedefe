/* hashchain.c: chained hash tables that grow (see the header). */
#include "util/hashchain.h"

#include <stdlib.h>
#include <string.h>

#define FIRST_CHAINS 64

/* Moves every node into n chains (a power of two). -1 when out of memory (unchanged). */
static int rechain(struct hc_table *t, size_t n)
{
	struct hc_node **chains = calloc(n, sizeof(*chains));
	if (!chains)
		return -1;
	for (size_t i = 0; t->chains && i <= t->mask; i++) {
		struct hc_node *x = t->chains[i];
		while (x) {
			struct hc_node *next = x->next;
			struct hc_node **head = &chains[x->hash & (n - 1)];
			x->next = *head;
			*head = x;
			x = next;
		}
	}
	free(t->chains);
	t->chains = chains;
	t->mask = n - 1;
	return 0;
}

int hc_add(struct hc_table *t, struct hc_node *x, uint32_t hash)
{
	if (!t->chains && rechain(t, FIRST_CHAINS))
		return -1;
	if (t->count >= 2 * (t->mask + 1))
		(void)rechain(t, 2 * (t->mask + 1)); /* out of memory: longer chains, still right */
	struct hc_node **head = &t->chains[hash & t->mask];
	x->hash = hash;
	x->next = *head;
	*head = x;
	t->count++;
	return 0;
}

void hc_sweep(struct hc_table *t, int (*visit)(struct hc_node *x, void *ctx), void *ctx)
{
	for (size_t i = 0; t->chains && i <= t->mask; i++) {
		struct hc_node **pp = &t->chains[i];
		while (*pp) {
			struct hc_node *x = *pp;
			struct hc_node *next = x->next; /* x may be freed by visit */
			if (visit(x, ctx)) {
				*pp = next;
				t->count--;
			} else {
				pp = &x->next;
			}
		}
	}
}

void hc_free(struct hc_table *t)
{
	free(t->chains);
	memset(t, 0, sizeof(*t));
}
