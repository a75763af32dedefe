/* subscriptions.h: the in-memory set of subscriptions that fan-out and the dispatcher read.
 *
 * A set is immutable once published and reference-counted: readers take the current set,
 * use it without locks, and release it. A change to any subscription publishes a new
 * set built from the store (store_subs_load, with core/sub_codec.c).
 *
 * Fan-out is only as good as the set: the registry knows when its set may not be the
 * store's (a reload failed, a row could not be opened or decoded) and says so until a
 * reload succeeds, so ingest can refuse (503 subscriptions_unavailable) rather than
 * acknowledge an event with deliveries missing (docs/operations.md, "Subscriptions on
 * several instances"). */
#ifndef OUTBOXD_CORE_SUBSCRIPTIONS_H
#define OUTBOXD_CORE_SUBSCRIPTIONS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/model.h"

struct sub_match_index; /* subscriptions.c */

struct sub_set {
	int refs;                       /* guarded by the registry's mutex */
	int64_t loaded_at_ms;           /* wall clock when its rows were read (one changed in
	                                   place keeps its base's), 0 = unknown */
	unsigned long read_ticket;      /* sub_registry_ticket() taken before its rows were
	                                   read; 0: none (published whatever came before) */
	struct subscription **items;    /* sorted by id; a reference to each (a reload shares
	                                   the unchanged ones with the set before) */
	size_t n, cap;
	/* The retry defaults its subscriptions were decoded with (store_subs_load): the next
	 * reload keeps those whose rows did not change only when it decodes with the same.
	 * has_defaults 0: not known (a set built by hand). */
	struct retry_policy defaults;
	int has_defaults;
	/* The enabled subscriptions' event-type patterns, by shape, so that matching an
	 * event does not try every pattern of every subscription (sub_set_index); NULL
	 * until the set is indexed, or when that ran out of memory: sub_set_match then
	 * tries each. */
	struct sub_match_index *index;
};

/* A subscription changed in place (sub_registry_apply) while a read of the store that
 * began before it was still going: that read's set may not have it. */
struct sub_change {
	char id[UUID_STR_LEN];
	unsigned long ticket;        /* the read it came from */
	struct subscription *sub;    /* a reference; NULL: the subscription is gone */
};

struct sub_registry {
	pthread_mutex_t mu;
	struct sub_set *current;
	unsigned long generation;       /* bumped at every publish */
	unsigned long tickets;          /* the last sub_registry_ticket() given */
	unsigned long published_ticket; /* the read_ticket of the newest set published */
	int64_t stale_since_ms;         /* 0: the set is the store's; else (wall clock) since
	                                   when it may not be */
	char stale_why[256];
	int reload_wanted;              /* someone found a reason to read the store again */
	/* The tickets of the reads in flight (given, not yet published, applied or
	 * abandoned), and the changes applied in place that one of them began before: a set
	 * published from such a read gets them re-applied. A change is forgotten once no
	 * read in flight began before it. */
	unsigned long *reading;
	size_t n_reading, cap_reading;
	struct sub_change *changes;
	size_t n_changes, cap_changes;
	unsigned long changes_gen;      /* bumped when a change is kept */
};

void sub_registry_init(struct sub_registry *reg);
void sub_registry_destroy(struct sub_registry *reg);

/* Returns the current set with a reference the caller must give back with
 * sub_registry_release. Never NULL. */
struct sub_set *sub_registry_acquire(struct sub_registry *reg);
void sub_registry_release(struct sub_registry *reg, struct sub_set *set);

/* A number for a read of the store's subscriptions about to start, larger than any given
 * before: set it as the read's set's read_ticket. Reads run side by side (the API after a
 * change, the reload another instance's change asks for) and finish in any order. The
 * read is in flight until its set is published (sub_registry_publish), its subscription
 * applied (sub_registry_apply) or it is abandoned (sub_registry_abandon): one of the three
 * must follow. */
unsigned long sub_registry_ticket(struct sub_registry *reg);
/* A read that publishes nothing (it failed). */
void sub_registry_abandon(struct sub_registry *reg, unsigned long ticket);
/* Publishes set (consumed) as the current one: the set is the store's again. A set whose
 * read began before that of the set published last is dropped instead: the later read
 * may hold a change the earlier one missed (a subscription just created, which would
 * then get no events until the next reload). Changes applied in place from reads that
 * began after this one's are applied to it first (they may be missing from it). */
void sub_registry_publish(struct sub_registry *reg, struct sub_set *set);
/* One subscription read again from the store (the read's ticket) after this process
 * changed it: s (a reference, consumed) as it is now, NULL when it is gone. Publishes the
 * current set with it in place of the one with that id, without reading the others
 * again (a reload of thousands to change one made creating them one by one quadratic).
 * Dropped when a read that began later has been published, or has applied the same id:
 * that read knows better. Returns 0, or -1 when out of memory (nothing published: reload
 * the whole set). The set stays stale if it was: changes made elsewhere are not read. */
int sub_registry_apply(struct sub_registry *reg, const char *id, struct subscription *s,
		       unsigned long ticket);

/* The set may no longer be the store's, since now_ms (kept when it was so already), for
 * the reason why (copied): until the next publish, sub_registry_current says no. */
void sub_registry_stale(struct sub_registry *reg, int64_t now_ms, const char *why);

/* 1 when the set is the store's as far as this process knows; 0 when not, with the
 * reason and since when in why (may be NULL). Any thread. */
int sub_registry_current(struct sub_registry *reg, char *why, size_t whylen);

/* Asks whoever reloads the set (the janitor thread) to read the store again soon; and takes
 * that request (1 when there was one, cleared). Any thread. */
void sub_registry_want_reload(struct sub_registry *reg);
int sub_registry_take_reload(struct sub_registry *reg);

/* An empty set with one reference (returned). */
struct sub_set *sub_set_new(void);
/* Adds s (its reference consumed), keeping the set sorted by id. Returns 0, or -1 when
 * out of memory (the reference given back then). */
int sub_set_add(struct sub_set *set, struct subscription *s);
/* Room for n subscriptions in all, so that adding them does not grow the set each time.
 * Returns 0, or -1 when out of memory (the set unchanged). */
int sub_set_reserve(struct sub_set *set, size_t n);

/* The subscription with that id, or NULL (borrowed from the set). */
const struct subscription *sub_set_find(const struct sub_set *set, const char *id);
/* Its place in set->items, or set->n when the set has none with that id. */
size_t sub_set_place(const struct sub_set *set, const char *id);

/* Indexes the set's patterns for sub_set_match (sub_registry_publish does it): literal
 * ones by their text, those with only trailing stars ("user.*", "*") by their prefix,
 * the others (a '?', an inner '*') tried one by one. Then an event's match costs a few
 * binary searches, not a pattern match per subscription: with 10,000 subscriptions of
 * one pattern each, ingest spent ~370 µs more per event trying them all. Before the set
 * is shared; on running out of memory the set stays unindexed (and still matches). */
void sub_set_index(struct sub_set *set);

/* Ids of the enabled subscriptions whose patterns match event_type and whose payload
 * filter, if any, the event's payload passes (payload_len bytes; content_type its type:
 * one that is not JSON by header_is_json_type passes no filter, NULL counts as JSON),
 * written into *ids (grown with realloc as needed; *cap tracks its size), in the set's
 * order. The payload is looked at only when a subscription of a matching type has a
 * filter, and parsed once. Returns the count, or -1 when out of memory. */
long sub_set_match(const struct sub_set *set, const char *event_type, const char *content_type,
		   const void *payload, size_t payload_len, char (**ids)[UUID_STR_LEN],
		   size_t *cap);
/* The same by the patterns alone, whatever the subscriptions' payload filters. */
long sub_set_match_types(const struct sub_set *set, const char *event_type,
			 char (**ids)[UUID_STR_LEN], size_t *cap);

#endif
