/* receiver_table.c: test_receiver's containers: an append-only string arena and an
 * open-addressing hash table, so a million webhook-ids cost tens of MiB rather than a
 * million allocations. Plain data structures: no locking (callers hold rx.lock), no I/O. */
#include "receiver.h"

#include <stdlib.h>
#include <string.h>

#define ARENA_BLOCK       (1u << 20)

const char *arena_strdup(struct arena *a, const char *s)
{
	size_t n = strlen(s) + 1;
	struct arena_block *b = a->head;

	if (!b || b->size - b->used < n) {
		size_t size = n > ARENA_BLOCK ? n : ARENA_BLOCK;

		b = malloc(sizeof(*b) + size);
		if (!b)
			return NULL;
		b->next = a->head;
		b->used = 0;
		b->size = size;
		a->head = b;
	}
	memcpy(b->data + b->used, s, n);
	b->used += n;
	return b->data + b->used - n;
}

void arena_free(struct arena *a)
{
	while (a->head) {
		struct arena_block *next = a->head->next;

		free(a->head);
		a->head = next;
	}
}

uint64_t hash_string(const char *s)
{
	uint64_t h = 1469598103934665603ull;    /* FNV-1a */

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ull;
	}
	return h;
}

/* The slot holding key, or the empty slot where it would go. cap must be non-zero. */
struct table_entry *table_slot(const struct table *t, const char *key, uint64_t hash)
{
	size_t mask = t->cap - 1;
	size_t i = (size_t)hash & mask;

	for (;;) {
		struct table_entry *e = &t->slots[i];

		if (!e->key || (e->hash == hash && strcmp(e->key, key) == 0))
			return e;
		i = (i + 1) & mask;
	}
}

void *table_get(const struct table *t, const char *key, bool *found)
{
	struct table_entry *e;

	*found = false;
	if (t->cap == 0)
		return NULL;
	e = table_slot(t, key, hash_string(key));
	if (!e->key)
		return NULL;
	*found = true;
	return e->value;
}

int table_grow(struct table *t)
{
	size_t cap = t->cap ? t->cap * 2 : 64;
	struct table old = *t;

	t->slots = calloc(cap, sizeof(*t->slots));
	if (!t->slots) {
		*t = old;
		return -1;
	}
	t->cap = cap;
	for (size_t i = 0; i < old.cap; i++) {
		if (old.slots[i].key)
			*table_slot(t, old.slots[i].key, old.slots[i].hash) = old.slots[i];
	}
	free(old.slots);
	return 0;
}

/* Inserts key (borrowed, must outlive the entry) if absent. Returns 1 if inserted, 0 if
 * it was already there, -1 when out of memory. */
int table_put(struct table *t, const char *key, void *value)
{
	uint64_t hash = hash_string(key);
	struct table_entry *e;

	if ((t->len + 1) * 2 > t->cap && table_grow(t) != 0)
		return -1;
	e = table_slot(t, key, hash);
	if (e->key)
		return 0;
	e->hash = hash;
	e->key = key;
	e->value = value;
	t->len++;
	return 1;
}

void table_free(struct table *t)
{
	free(t->slots);
	t->slots = NULL;
	t->cap = 0;
	t->len = 0;
}
