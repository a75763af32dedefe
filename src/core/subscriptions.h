/* subscriptions.h: the in-memory set of subscriptions that fan-out and the dispatcher read.
 *
 * A set is immutable once published and reference-counted: readers take the current set,
 * use it without locks, and release it. A change to any subscription publishes a new
 * set built from the store (store_subs_load, with core/sub_codec.c). */
#ifndef OUTBOXD_CORE_SUBSCRIPTIONS_H
#define OUTBOXD_CORE_SUBSCRIPTIONS_H

#include <pthread.h>
#include <stddef.h>

#include "core/model.h"

struct sub_set {
	int refs;                       /* guarded by the registry's mutex */
	struct subscription **items;    /* owned, sorted by id */
	size_t n;
};

struct sub_registry {
	pthread_mutex_t mu;
	struct sub_set *current;
	unsigned long generation;       /* bumped at every publish */
};

void sub_registry_init(struct sub_registry *reg);
void sub_registry_destroy(struct sub_registry *reg);

/* Returns the current set with a reference the caller must give back with
 * sub_registry_release. Never NULL. */
struct sub_set *sub_registry_acquire(struct sub_registry *reg);
void sub_registry_release(struct sub_registry *reg, struct sub_set *set);

/* Publishes set (consumed) as the current one. */
void sub_registry_publish(struct sub_registry *reg, struct sub_set *set);

/* An empty set with one reference (returned). */
struct sub_set *sub_set_new(void);
/* Adds s (consumed), keeping the set sorted by id. Returns 0, or -1 when out of memory
 * (s is freed then). */
int sub_set_add(struct sub_set *set, struct subscription *s);

/* The subscription with that id, or NULL (borrowed from the set). */
const struct subscription *sub_set_find(const struct sub_set *set, const char *id);

/* Ids of the enabled subscriptions whose patterns match event_type, written into *ids
 * (grown with realloc as needed; *cap tracks its size). Returns the count, or -1 when
 * out of memory. */
long sub_set_match(const struct sub_set *set, const char *event_type,
		   char (**ids)[UUID_STR_LEN], size_t *cap);

#endif
