/* store.c: the backend-independent half of the storage interface.
 *
 * Picks a backend by DSN prefix, checks arguments once for every backend (so each
 * backend may assume sane input), initialises out-parameters so callers can always free
 * them, and frees what the readers return. No SQL and no library types here. */
#include "store/backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "core/secretbox.h"
#include "core/sub_codec.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

/* Hard caps on batch sizes: one transaction must stay short enough not to hold the
 * writer for long (ingest of other requests waits behind it). */
#define STORE_MAX_BATCH 10000
#define STORE_MAX_PAGE 1000

static const char *const err_names[] = {
	[STORE_OK] = "ok",
	[STORE_NOT_FOUND] = "not found",
	[STORE_CONFLICT] = "conflict",
	[STORE_UNAVAILABLE] = "store unavailable",
	[STORE_LOCKED] = "store locked by another process",
	[STORE_INVALID] = "invalid argument",
	[STORE_ERROR] = "store error",
	[STORE_TIMEOUT] = "read timed out",
};

const char *store_strerror(int err)
{
	if (err < 0 || (size_t)err >= sizeof(err_names) / sizeof(err_names[0]))
		return "unknown store error";
	return err_names[err];
}

static void set_err(char *err, size_t errlen, const char *msg)
{
	if (err && errlen)
		snprintf(err, errlen, "%s", msg);
}

static int has_prefix(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int open_store(const char *dsn, const char *owner, int shared, store **out, char *err,
		      size_t errlen)
{
	const struct store_methods *methods = NULL;
	struct store *st = NULL;
	int rc;

	if (out)
		*out = NULL;
	if (!dsn || !owner || !out || !*owner) {
		set_err(err, errlen, "store_open: dsn, owner and out are required");
		return STORE_INVALID;
	}
	if (strlen(owner) >= sizeof(st->owner)) {
		set_err(err, errlen, "store_open: owner name too long");
		return STORE_INVALID;
	}
	if (has_prefix(dsn, store_sqlite_methods.dsn_prefix)) {
		methods = &store_sqlite_methods;
	} else if (has_prefix(dsn, store_pg_methods.dsn_prefix) || has_prefix(dsn, "postgresql://")) {
		methods = &store_pg_methods;
	} else {
		set_err(err, errlen,
			"unknown database URL (expected sqlite:PATH or postgres://...)");
		return STORE_INVALID;
	}

	st = calloc(1, sizeof(*st));
	if (!st) {
		set_err(err, errlen, "out of memory");
		return STORE_ERROR;
	}
	st->methods = methods;
	st->shared = shared;
	strcpy(st->owner, owner);
	count_cache_init(&st->processed);
	atomic_store(&st->read_timeout_ms, STORE_READ_TIMEOUT_MS);
	set_err(err, errlen, "");
	rc = methods->open(st, dsn, err, errlen);
	if (rc != STORE_OK) {
		count_cache_destroy(&st->processed);
		free(st);
		return rc;
	}
	*out = st;
	return STORE_OK;
}

int store_open(const char *dsn, const char *owner, store **out, char *err, size_t errlen)
{
	return open_store(dsn, owner, 0, out, err, errlen);
}

int store_open_shared(const char *dsn, const char *owner, store **out, char *err,
		      size_t errlen)
{
	return open_store(dsn, owner, 1, out, err, errlen);
}

int store_set_owner(store *st, const char *owner)
{
	if (!st || !owner || !*owner || strlen(owner) >= sizeof(st->owner))
		return STORE_INVALID;
	strcpy(st->owner, owner);
	return STORE_OK;
}

void store_close(store *st)
{
	if (!st)
		return;
	st->methods->close(st);
	if (st->secret_key)
		secretbox_key_clear(st->secret_key);
	free(st->secret_key);
	count_cache_destroy(&st->processed);
	free(st);
}

const char *store_backend_name(const store *st)
{
	return st ? st->methods->name : "none";
}

const char *store_owner(const store *st)
{
	return st ? st->owner : "";
}

void store_set_read_timeout(store *st, int64_t ms)
{
	if (st)
		atomic_store(&st->read_timeout_ms, ms > 0 ? ms : 0);
}

int store_ping(store *st)
{
	if (!st)
		return STORE_INVALID;
	return st->methods->ping(st);
}

void store_on_work(store *st, void (*cb)(void *ctx), void *ctx)
{
	if (st && st->methods->on_work)
		st->methods->on_work(st, cb, ctx);
}

void store_on_subscriptions_changed(store *st, void (*cb)(void *ctx), void *ctx)
{
	if (st && st->methods->on_subscriptions_changed)
		st->methods->on_subscriptions_changed(st, cb, ctx);
}

/* ---- ingest and fan-out ------------------------------------------------------------ */

static int event_in_valid(const struct store_event_in *ev)
{
	if (!ev->event_type || !*ev->event_type || !ev->content_type)
		return 0;
	if (!ev->payload && ev->payload_len)
		return 0;
	if (!ev->subscription_ids && ev->n_subscriptions)
		return 0;
	if (strnlen(ev->id, UUID_STR_LEN) == UUID_STR_LEN)
		return 0;
	return 1;
}

int store_concurrent_writers(store *st)
{
	return st && st->methods->concurrent_writers > 1 ? st->methods->concurrent_writers : 1;
}

void store_fault_set(store *st, unsigned calls, int rc, int count)
{
	atomic_store(&st->fault_count, 0);
	st->fault_calls = calls;
	st->fault_rc = rc;
	atomic_store(&st->fault_count, count);
}

void store_call_hook_set(store *st, store_call_hook hook, void *ctx)
{
	st->call_hook_ctx = ctx;
	atomic_store(&st->call_hook, hook);
}

/* 1 with *rc set when a fault injected for op takes this call (after the call hook). */
static int fault_hit(store *st, unsigned op, int *rc)
{
	store_call_hook hook = atomic_load_explicit(&st->call_hook, memory_order_acquire);
	if (hook)
		hook(st->call_hook_ctx, op);
	int left = atomic_load_explicit(&st->fault_count, memory_order_relaxed);
	while (left > 0 && (st->fault_calls & op)) {
		if (atomic_compare_exchange_weak(&st->fault_count, &left, left - 1)) {
			*rc = st->fault_rc;
			return 1;
		}
	}
	return 0;
}

static int ingest(store *st, struct store_event_in *events, size_t n, int by_id)
{
	int frc;
	if (!st || (!events && n) || n > STORE_MAX_BATCH)
		return STORE_INVALID;
	for (size_t i = 0; i < n; i++) {
		if (!event_in_valid(&events[i]))
			return STORE_INVALID;
		if (by_id && !events[i].id[0])
			return STORE_INVALID;
		if (events[i].lease_until &&
		    (by_id || !events[i].delivery_ids || store_event_initial(&events[i])))
			return STORE_INVALID;
		/* An empty id means "make one": the caller then reads it back. */
		if (!events[i].id[0])
			uuid_v7(events[i].id);
		events[i].duplicate = 0;
		events[i].dedupe_by_id = by_id;
	}
	if (!n)
		return STORE_OK;
	if (fault_hit(st, STORE_FAULT_INGEST, &frc))
		return frc;
	return st->methods->ingest(st, events, n);
}

int store_ingest(store *st, struct store_event_in *events, size_t n)
{
	return ingest(st, events, n, 0);
}

int store_ingest_replay(store *st, struct store_event_in *events, size_t n)
{
	return ingest(st, events, n, 1);
}

int store_relay_outbox(store *st, size_t limit, store_fanout_cb fanout, void *ctx,
		       size_t *relayed)
{
	if (relayed)
		*relayed = 0;
	if (!st || !fanout || !relayed || limit < 1 || limit > STORE_MAX_BATCH)
		return STORE_INVALID;
	return st->methods->relay_outbox(st, limit, fanout, ctx, relayed);
}

/* ---- the dispatcher's side --------------------------------------------------------- */

int store_claim_due(store *st, int64_t now_ms, int64_t lease_ms, size_t limit,
		    struct store_claim **items, size_t *n)
{
	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (!st || !items || !n || lease_ms <= 0 || limit < 1 || limit > STORE_MAX_BATCH)
		return STORE_INVALID;
	int frc;
	if (fault_hit(st, STORE_FAULT_CLAIM, &frc))
		return frc;
	int rc = st->methods->claim_due(st, now_ms, lease_ms, limit, items, n);
	for (size_t i = 0; rc == STORE_OK && i < *n; i++)
		(*items)[i].lease_until = now_ms + lease_ms;
	return rc;
}

int store_leases_renew(store *st, const char (*ids)[UUID_STR_LEN], const int64_t *until,
		       size_t n, unsigned char *renewed)
{
	if (!st || (n && (!ids || !until || !renewed)) || n > STORE_MAX_BATCH)
		return STORE_INVALID;
	if (!n)
		return STORE_OK;
	memset(renewed, 0, n);
	int frc;
	if (fault_hit(st, STORE_FAULT_CLAIM, &frc))
		return frc;
	if (!st->methods->leases_renew)
		return STORE_ERROR;
	return st->methods->leases_renew(st, ids, until, n, renewed);
}

void store_claim_release(struct store_claim *c)
{
	/* event_type is the start of the claim's single allocation. */
	free(c->event_type);
	c->event_type = NULL;
}

void store_claims_free(struct store_claim *items, size_t n)
{
	if (!items)
		return;
	for (size_t i = 0; i < n; i++)
		store_claim_release(&items[i]);
	free(items);
}

int store_claim_fill(struct store_claim *c, const struct store_claim_event *e)
{
	char *at = malloc(e->type_len + e->ctype_len + e->source_len + e->seid_len + e->pkey_len +
			  e->wid_len + 6 + e->payload_len + 1);

	if (!at) {
		log_error("store: out of memory");
		return -1;
	}
	c->event_type = at;
	memcpy(at, e->event_type, e->type_len);
	at[e->type_len] = '\0';
	at += e->type_len + 1;
	c->content_type = at;
	memcpy(at, e->content_type, e->ctype_len);
	at[e->ctype_len] = '\0';
	at += e->ctype_len + 1;
	c->source = at;
	if (e->source_len)
		memcpy(at, e->source, e->source_len);
	at[e->source_len] = '\0';
	at += e->source_len + 1;
	c->source_event_id = e->source_event_id ? at : NULL;
	if (e->source_event_id)
		memcpy(at, e->source_event_id, e->seid_len);
	at[e->seid_len] = '\0';
	at += e->seid_len + 1;
	c->partition_key = e->partition_key ? at : NULL;
	if (e->partition_key)
		memcpy(at, e->partition_key, e->pkey_len);
	at[e->pkey_len] = '\0';
	at += e->pkey_len + 1;
	c->webhook_id = e->webhook_id ? at : NULL;
	if (e->webhook_id)
		memcpy(at, e->webhook_id, e->wid_len);
	at[e->wid_len] = '\0';
	at += e->wid_len + 1;
	c->payload = at;
	c->payload_len = e->payload_len;
	if (e->payload_len)
		memcpy(at, e->payload, e->payload_len);
	at[e->payload_len] = '\0';
	return 0;
}

int store_claim_of_event(const struct store_event_in *ev, size_t k, struct store_claim *out)
{
	const char *source = ev->source ? ev->source : "";
	struct store_claim_event e = {
		.event_type = ev->event_type,
		.type_len = strlen(ev->event_type),
		.content_type = ev->content_type,
		.ctype_len = strlen(ev->content_type),
		.source = source,
		.source_len = strlen(source),
		.source_event_id = ev->source_event_id,
		.seid_len = ev->source_event_id ? strlen(ev->source_event_id) : 0,
		.partition_key = ev->partition_key,
		.pkey_len = ev->partition_key ? strlen(ev->partition_key) : 0,
		.webhook_id = ev->webhook_id,
		.wid_len = ev->webhook_id ? strlen(ev->webhook_id) : 0,
		.payload = ev->payload,
		.payload_len = ev->payload_len,
	};

	memset(out, 0, sizeof(*out));
	memcpy(out->delivery_id, ev->delivery_ids[k], UUID_STR_LEN);
	memcpy(out->event_id, ev->id, UUID_STR_LEN);
	memcpy(out->subscription_id, ev->subscription_ids[k], UUID_STR_LEN);
	out->status = DELIVERY_NEW;
	out->lease_until = ev->lease_until;
	out->starts_scheduled = ev->starts_scheduled;
	out->event_created_at = ev->created_at;
	if (ev->traceparent)
		snprintf(out->traceparent, sizeof(out->traceparent), "%s", ev->traceparent);
	return store_claim_fill(out, &e);
}

int store_next_due(store *st, int64_t *at_ms)
{
	if (at_ms)
		*at_ms = 0;
	if (!st || !at_ms)
		return STORE_INVALID;
	return st->methods->next_due(st, at_ms);
}

static int result_valid(const struct store_result *r)
{
	if (!r->delivery_id || !*r->delivery_id)
		return 0;
	if ((unsigned)r->status > DELIVERY_FAILED)
		return 0;
	if (!r->attempts && r->n_attempts)
		return 0;
	for (size_t i = 0; i < r->n_attempts; i++)
		if ((unsigned)r->attempts[i].kind > ATTEMPT_MANUAL || r->attempts[i].n < 1)
			return 0;
	return 1;
}

int store_record_results(store *st, const struct store_result *results, size_t n)
{
	if (!st || (!results && n) || n > STORE_MAX_BATCH)
		return STORE_INVALID;
	for (size_t i = 0; i < n; i++)
		if (!result_valid(&results[i]))
			return STORE_INVALID;
	if (!n)
		return STORE_OK;
	int frc;
	if (fault_hit(st, STORE_FAULT_RESULTS, &frc))
		return frc;
	return st->methods->record_results(st, results, n);
}

int store_dead_letters(store *st, size_t limit, struct store_dead_letter **items, size_t *n)
{
	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (!st || !items || !n || limit < 1 || limit > STORE_MAX_BATCH)
		return STORE_INVALID;
	return st->methods->dead_letters(st, limit, items, n);
}

int store_dead_letters_done(store *st, const char (*ids)[UUID_STR_LEN], size_t n)
{
	if (!st || (!ids && n) || n > STORE_MAX_BATCH)
		return STORE_INVALID;
	return n ? st->methods->dead_letters_done(st, ids, n) : STORE_OK;
}

void store_dead_letters_free(struct store_dead_letter *items, size_t n)
{
	for (size_t i = 0; items && i < n; i++) {
		store_claim_release(&items[i].claim);
		free(items[i].last_message);
		free(items[i].last_cause);
	}
	free(items);
}

int store_order_sweep(store *st, int64_t now_ms, int full, size_t *parked, size_t *unparked)
{
	size_t ignored[2];
	if (!st)
		return STORE_INVALID;
	if (!st->methods->order_sweep)
		return STORE_ERROR;
	return st->methods->order_sweep(st, now_ms, full, parked ? parked : &ignored[0],
				    unparked ? unparked : &ignored[1]);
}

int store_reap_leases(store *st, int64_t now_ms, size_t *n)
{
	if (n)
		*n = 0;
	if (!st || !n)
		return STORE_INVALID;
	return st->methods->reap_leases(st, now_ms, n);
}

int store_release_all(store *st, size_t *n)
{
	if (n)
		*n = 0;
	if (!st || !n)
		return STORE_INVALID;
	return st->methods->release_all(st, n);
}

/* ---- reading ------------------------------------------------------------------------ */

int store_event_get(store *st, const char *id, struct store_event *ev)
{
	if (ev)
		memset(ev, 0, sizeof(*ev));
	if (!st || !id || !ev)
		return STORE_INVALID;
	return st->methods->event_get(st, id, ev);
}

void store_event_free(struct store_event *ev)
{
	if (!ev)
		return;
	free(ev->event_type);
	free(ev->source);
	free(ev->source_event_id);
	free(ev->partition_key);
	free(ev->webhook_id);
	free(ev->content_type);
	free(ev->payload);
	free(ev->envelope);
	memset(ev, 0, sizeof(*ev));
}

int store_event_deliveries(store *st, const char *event_id, struct store_delivery **items,
			   size_t *n)
{
	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (!st || !event_id || !items || !n)
		return STORE_INVALID;
	return st->methods->event_deliveries(st, event_id, items, n);
}

int store_delivery_get(store *st, const char *id, struct store_delivery *d)
{
	if (d)
		memset(d, 0, sizeof(*d));
	if (!st || !id || !d)
		return STORE_INVALID;
	return st->methods->delivery_get(st, id, d);
}

int store_delivery_attempts(store *st, const char *id, struct store_attempt_row **items,
			    size_t *n)
{
	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (!st || !id || !items || !n)
		return STORE_INVALID;
	return st->methods->delivery_attempts(st, id, items, n);
}

void store_delivery_free(struct store_delivery *d)
{
	if (!d)
		return;
	free(d->event_type);
	free(d->last_message);
	free(d->last_cause);
	free(d->lease_owner);
	memset(d, 0, sizeof(*d));
}

void store_deliveries_free(struct store_delivery *items, size_t n)
{
	if (!items)
		return;
	for (size_t i = 0; i < n; i++)
		store_delivery_free(&items[i]);
	free(items);
}

void store_attempts_free(struct store_attempt_row *items, size_t n)
{
	if (!items)
		return;
	for (size_t i = 0; i < n; i++) {
		free(items[i].message);
		free(items[i].cause);
	}
	free(items);
}

int store_deliveries_list(store *st, const struct delivery_filter *f,
			  struct store_delivery **items, size_t *n, char **next_cursor)
{
	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (next_cursor)
		*next_cursor = NULL;
	if (!st || !f || !items || !n || !next_cursor)
		return STORE_INVALID;
	if (f->limit < 1 || f->limit > STORE_MAX_PAGE)
		return STORE_INVALID;
	if ((unsigned)f->sort > DELIVERY_SORT_ATTEMPTS)
		return STORE_INVALID;
	if (f->has_status && (unsigned)f->status > DELIVERY_FAILED)
		return STORE_INVALID;
	if (f->from_ms < 0 || f->to_ms < 0)
		return STORE_INVALID;
	return st->methods->deliveries_list(st, f, items, n, next_cursor);
}

/* A backend that lacks an optional op answers STORE_ERROR (logged once by the caller). */
#define OPTIONAL_OP(st, op) \
	do { \
		if (!(st)->methods->op) \
			return STORE_ERROR; \
	} while (0)

int store_deliveries_count(store *st, const struct delivery_filter *f, size_t *n)
{
	if (n)
		*n = 0;
	if (!st || !f || !n)
		return STORE_INVALID;
	OPTIONAL_OP(st, deliveries_count);
	return st->methods->deliveries_count(st, f, n);
}

/* A cursor of a newest-first list ("<tag>:<created_at>:<id>", the last row of the
 * previous page) into *at and id. 0, or -1 when it is not one. */
static int newest_first_cursor_parse(const char *c, char tag, long long *at,
				     char id[UUID_STR_LEN])
{
	char *end;
	size_t len;

	if (c[0] != tag || c[1] != ':')
		return -1;
	errno = 0;
	*at = strtoll(c + 2, &end, 10);
	if (errno || end == c + 2 || *end != ':')
		return -1;
	len = strlen(end + 1);
	if (len == 0 || len >= UUID_STR_LEN || strspn(end + 1, "0123456789abcdefABCDEF-") != len)
		return -1;
	memcpy(id, end + 1, len + 1);
	return 0;
}

/* The cursor of the page after the row (at, id) of a newest-first list (returned), or
 * NULL when out of memory. */
static char *newest_first_cursor(char tag, int64_t at, const char *id)
{
	size_t len = 2 + 21 + 1 + UUID_STR_LEN;
	char *c = malloc(len);

	if (c)
		snprintf(c, len, "%c:%lld:%s", tag, (long long)at, id);
	return c;
}

/* Event cursors: "e:<created_at>:<id>" of the last event of the previous page. */
int store_events_list(store *st, const struct event_filter *f,
		      struct store_event_summary **items, size_t *n, char **next_cursor)
{
	char before_id[UUID_STR_LEN] = "";
	long long before_at = 0;
	int rc;

	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (next_cursor)
		*next_cursor = NULL;
	if (!st || !f || !items || !n || !next_cursor || f->limit < 1 ||
	    f->limit > STORE_MAX_PAGE || f->from_ms < 0 || f->to_ms < 0)
		return STORE_INVALID;
	if (f->cursor && newest_first_cursor_parse(f->cursor, 'e', &before_at, before_id))
		return STORE_INVALID;
	OPTIONAL_OP(st, events_list);
	/* One more than asked: whether a next page exists. */
	rc = st->methods->events_list(st, f, before_at, f->cursor ? before_id : NULL, f->limit + 1,
				  items, n);
	if (rc != STORE_OK || *n <= f->limit)
		return rc;
	const struct store_event_summary *last = &(*items)[f->limit - 1];
	if (!(*next_cursor = newest_first_cursor('e', last->event.created_at, last->event.id))) {
		store_event_summaries_free(*items, *n);
		*items = NULL;
		*n = 0;
		return STORE_ERROR;
	}
	for (size_t i = f->limit; i < *n; i++)
		store_event_free(&(*items)[i].event);
	*n = f->limit;
	return STORE_OK;
}

void store_event_summaries_free(struct store_event_summary *items, size_t n)
{
	if (!items)
		return;
	for (size_t i = 0; i < n; i++)
		store_event_free(&items[i].event);
	free(items);
}

/* ---- operator actions --------------------------------------------------------------- */

int store_replay(store *st, const char (*ids)[UUID_STR_LEN], size_t n, int force,
		 enum store_replay_outcome *outcomes, size_t *replayed)
{
	if (replayed)
		*replayed = 0;
	if (!st || (!ids && n) || !replayed || n > STORE_MAX_BATCH)
		return STORE_INVALID;
	if (!n)
		return STORE_OK;
	return st->methods->replay(st, ids, n, force, outcomes, replayed);
}

int store_dlq_purge(store *st, const char *delivery_id)
{
	if (!st || !delivery_id)
		return STORE_INVALID;
	return st->methods->dlq_purge(st, delivery_id);
}

int store_dlq_purge_matching(store *st, const struct delivery_filter *f, size_t limit,
			     size_t *purged)
{
	if (purged)
		*purged = 0;
	if (!st || !f || !purged || limit < 1 || limit > STORE_MAX_BATCH)
		return STORE_INVALID;
	OPTIONAL_OP(st, dlq_purge_matching);
	return st->methods->dlq_purge_matching(st, f, limit, purged);
}

/* The deliveries the cleanup's next batch deletes at most: CLEANUP_BATCH, or what is left
 * of max (0: no max) after deleted. */
static size_t cleanup_limit(size_t max, size_t deleted)
{
	size_t left = max ? max - deleted : CLEANUP_BATCH;
	return left < CLEANUP_BATCH ? left : CLEANUP_BATCH;
}

int store_cleanup(store *st, int64_t before_ms, size_t max, size_t *deleted, int *more)
{
	size_t chunk = 0, limit = 0;
	int rc = STORE_OK, done = 0;

	if (deleted)
		*deleted = 0;
	if (more)
		*more = 0;
	if (!st || !deleted)
		return STORE_INVALID;
	if (st->cleanup == CLEANUP_IDLE || st->cleanup == CLEANUP_DELETING) {
		do {
			limit = cleanup_limit(max, *deleted);
			chunk = 0;
			rc = st->methods->cleanup_batch(st, before_ms, limit,
							st->cleanup == CLEANUP_IDLE, &chunk);
			st->cleanup = CLEANUP_DELETING;
			*deleted += chunk;
		} while (rc == STORE_OK && chunk == limit && (!max || *deleted < max));
		if (rc != STORE_OK || chunk == limit) {
			/* more delivered deliveries may be left; after an error, a new run */
			st->cleanup = rc == STORE_OK ? CLEANUP_DELETING : CLEANUP_IDLE;
			if (more)
				*more = rc == STORE_OK;
			return rc;
		}
		st->cleanup = CLEANUP_SWEEP_START; /* the delivered ones are done */
	}
	rc = st->methods->cleanup_sweep(st, before_ms, st->cleanup == CLEANUP_SWEEP_START, !max,
					&done);
	st->cleanup = rc == STORE_OK && !done ? CLEANUP_SWEEPING : CLEANUP_IDLE;
	if (more)
		*more = st->cleanup == CLEANUP_SWEEPING;
	return rc;
}

int store_attempt_counts_prune(store *st, int64_t before_ms)
{
	if (!st)
		return STORE_INVALID;
	return st->methods->attempt_counts_prune(st, before_ms);
}

/* ---- operator jobs and audit -------------------------------------------------------------- */

int store_job_create(store *st, const struct store_job *job)
{
	if (!st || !job || !job->id[0] || !job->filter)
		return STORE_INVALID;
	OPTIONAL_OP(st, job_create);
	return st->methods->job_create(st, job);
}

int store_job_update(store *st, const struct store_job *job)
{
	if (!st || !job || !job->id[0])
		return STORE_INVALID;
	OPTIONAL_OP(st, job_update);
	return st->methods->job_update(st, job);
}

int store_job_get(store *st, const char *id, struct store_job *out)
{
	if (out)
		memset(out, 0, sizeof(*out));
	if (!st || !id || !out)
		return STORE_INVALID;
	OPTIONAL_OP(st, job_get);
	return st->methods->job_get(st, id, out);
}

int store_jobs_running(store *st, struct store_job **items, size_t *n)
{
	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (!st || !items || !n)
		return STORE_INVALID;
	OPTIONAL_OP(st, jobs_running);
	return st->methods->jobs_running(st, items, n);
}

/* Job cursors: "j:<created_at>:<id>" of the last job of the previous page. */
int store_jobs_list(store *st, const char *state, const char *cursor, size_t limit,
		    struct store_job **items, size_t *n, char **next_cursor)
{
	char before_id[UUID_STR_LEN] = "";
	long long before_at = 0;
	int rc;

	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (next_cursor)
		*next_cursor = NULL;
	if (!st || !items || !n || !next_cursor || limit < 1 || limit > STORE_MAX_PAGE)
		return STORE_INVALID;
	if (cursor && newest_first_cursor_parse(cursor, 'j', &before_at, before_id))
		return STORE_INVALID;
	OPTIONAL_OP(st, jobs_list);
	/* One more than asked: whether a next page exists. */
	rc = st->methods->jobs_list(st, state, before_at, cursor ? before_id : NULL, limit + 1, items,
				n);
	if (rc != STORE_OK || *n <= limit)
		return rc;
	const struct store_job *last = &(*items)[limit - 1];
	if (!(*next_cursor = newest_first_cursor('j', last->created_at, last->id))) {
		store_jobs_free(*items, *n);
		*items = NULL;
		*n = 0;
		return STORE_ERROR;
	}
	store_job_free(&(*items)[limit]);
	*n = limit;
	return STORE_OK;
}

void store_job_free(struct store_job *job)
{
	if (!job)
		return;
	free(job->filter);
	free(job->cursor);
	free(job->actor);
	free(job->error);
	memset(job, 0, sizeof(*job));
}

void store_jobs_free(struct store_job *items, size_t n)
{
	if (!items)
		return;
	for (size_t i = 0; i < n; i++)
		store_job_free(&items[i]);
	free(items);
}

int store_audit_append(store *st, const struct store_audit *a)
{
	if (!st || !a || !a->id[0] || !a->actor || !a->action)
		return STORE_INVALID;
	OPTIONAL_OP(st, audit_append);
	return st->methods->audit_append(st, a);
}

int store_audit_list(store *st, const char *before_id, size_t limit, struct store_audit **items,
		     size_t *n)
{
	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (!st || !items || !n || limit < 1 || limit > STORE_MAX_PAGE + 1)
		return STORE_INVALID;
	OPTIONAL_OP(st, audit_list);
	return st->methods->audit_list(st, before_id, limit, items, n);
}

void store_audits_free(struct store_audit *items, size_t n)
{
	if (!items)
		return;
	for (size_t i = 0; i < n; i++) {
		free(items[i].actor);
		free(items[i].action);
		free(items[i].target);
		free(items[i].detail);
	}
	free(items);
}

/* ---- API tokens --------------------------------------------------------------------------- */

int store_token_create(store *st, const struct store_token *t)
{
	if (!st || !t || !t->id[0] || !t->name || !t->scopes || strlen(t->hash) != 64 ||
	    t->expires_at < 0)
		return STORE_INVALID;
	OPTIONAL_OP(st, token_create);
	return st->methods->token_create(st, t);
}

int store_token_delete(store *st, const char *id)
{
	if (!st || !id)
		return STORE_INVALID;
	OPTIONAL_OP(st, token_delete);
	return st->methods->token_delete(st, id);
}

int store_token_touch(store *st, const char *id, int64_t at_ms)
{
	if (!st || !id || at_ms <= 0)
		return STORE_INVALID;
	OPTIONAL_OP(st, token_touch);
	return st->methods->token_touch(st, id, at_ms);
}

int store_meta_get(store *st, const char *name, struct store_meta_value *out)
{
	if (!st || !name || !out)
		return STORE_INVALID;
	OPTIONAL_OP(st, meta_get);
	return st->methods->meta_get(st, name, out);
}

int store_meta_swap(store *st, const char *name, const char *expect, const char *value,
		    struct store_meta_value *found)
{
	struct store_meta_value now;

	if (!st || !name || !value || strlen(value) >= sizeof(now.value))
		return STORE_INVALID;
	OPTIONAL_OP(st, meta_swap);
	int rc = st->methods->meta_swap(st, name, expect, value);
	if (rc != STORE_NOT_FOUND)
		return rc;
	/* not what was expected: say what it is (absent reads as "") */
	rc = store_meta_get(st, name, &now);
	if (rc == STORE_NOT_FOUND) {
		now.value[0] = '\0';
		rc = STORE_OK;
	}
	if (rc != STORE_OK)
		return rc;
	if (found)
		*found = now;
	return STORE_CONFLICT;
}

int store_token_list(store *st, struct store_token **items, size_t *n)
{
	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (!st || !items || !n)
		return STORE_INVALID;
	OPTIONAL_OP(st, token_list);
	return st->methods->token_list(st, items, n);
}

void store_tokens_free(struct store_token *items, size_t n)
{
	if (!items)
		return;
	for (size_t i = 0; i < n; i++) {
		free(items[i].name);
		free(items[i].scopes);
		free(items[i].actor);
	}
	free(items);
}

/* ---- stats ------------------------------------------------------------------------------- */

int store_stats(store *st, int64_t now_ms, int64_t window_ms, struct store_stats *out)
{
	if (out)
		memset(out, 0, sizeof(*out));
	if (!st || !out || window_ms < 0)
		return STORE_INVALID;
	OPTIONAL_OP(st, stats);
	/* The PROCESSED count grows with the store: a large one's is reused a while. */
	int64_t processed = 0;
	int reuse = count_cache_get(&st->processed, now_ms, &processed);
	int rc = st->methods->stats(st, now_ms, window_ms, !reuse, out);
	if (reuse)
		out->processed_count = processed;
	else if (rc == STORE_OK)
		count_cache_put(&st->processed, now_ms, out->processed_count);
	else
		count_cache_fail(&st->processed);
	return rc;
}

void store_stats_free(struct store_stats *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n_subs; i++)
		free(s->subs[i].last_message);
	free(s->subs);
	memset(s, 0, sizeof(*s));
}

/* ---- subscriptions ------------------------------------------------------------------ */

static int sub_valid(const struct sub_row *sub)
{
	return sub && sub->id[0] && strnlen(sub->id, UUID_STR_LEN) < UUID_STR_LEN &&
	       sub->name && *sub->name && sub->config;
}

/* A create or update with the config sealed (store/secrets.c) when the store has a key. */
static int sub_write(store *st, const struct sub_row *sub,
		     int (*write)(store *st, const struct sub_row *sub))
{
	struct sub_row row;
	char *sealed = NULL;
	int rc;

	if (!st || !sub_valid(sub))
		return STORE_INVALID;
	if ((rc = store_config_seal(st, sub, &sealed)) != STORE_OK)
		return rc;
	row = *sub;
	if (sealed)
		row.config = sealed;
	rc = write(st, &row);
	free(sealed);
	return rc;
}

int store_sub_create(store *st, const struct sub_row *sub)
{
	return sub_write(st, sub, st ? st->methods->sub_create : NULL);
}

int store_sub_update(store *st, const struct sub_row *sub)
{
	return sub_write(st, sub, st ? st->methods->sub_update : NULL);
}

int store_sub_disable(store *st, const char *id, const char *reason, int64_t at_ms)
{
	struct sub_row row;
	char ts[RFC3339_LEN];
	int rc = store_sub_get(st, id, &row);
	if (rc)
		return rc;
	json_t *doc = json_loads(row.config, 0, NULL);
	char *text = NULL;
	if (!doc) {
		rc = STORE_ERROR;
		goto out;
	}
	json_object_set_new(doc, "enabled", json_false());
	json_object_set_new(doc, "disabled_reason", json_string(reason));
	json_object_set_new(doc, "disabled_at", json_string(clock_format_rfc3339(at_ms, ts)));
	if (!(text = json_dumps(doc, JSON_COMPACT))) {
		rc = STORE_ERROR;
		goto out;
	}
	free(row.config);
	row.config = text;
	text = NULL;
	row.enabled = 0;
	row.updated_at = at_ms;
	rc = store_sub_update(st, &row);
out:
	json_decref(doc);
	free(text);
	store_sub_free(&row);
	return rc;
}

int store_sub_delete(store *st, const char *id)
{
	if (!st || !id)
		return STORE_INVALID;
	return st->methods->sub_delete(st, id);
}

int store_sub_get(store *st, const char *id, struct sub_row *out)
{
	if (out)
		memset(out, 0, sizeof(*out));
	if (!st || !id || !out)
		return STORE_INVALID;
	int rc = st->methods->sub_get(st, id, out);
	if (rc == STORE_OK && (rc = store_config_open(st, out)) != STORE_OK)
		store_sub_free(out);
	return rc;
}

int store_sub_list(store *st, struct sub_row **items, size_t *n)
{
	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (!st || !items || !n)
		return STORE_INVALID;
	int rc = st->methods->sub_list(st, items, n);
	/* One row that does not open fails the list: a set without it would silently stop
	 * delivering to it. */
	for (size_t i = 0; rc == STORE_OK && i < *n; i++)
		rc = store_config_open(st, &(*items)[i]);
	if (rc != STORE_OK) {
		store_subs_free(*items, *n);
		*items = NULL;
		*n = 0;
	}
	return rc;
}

void store_sub_free(struct sub_row *sub)
{
	if (!sub)
		return;
	free(sub->name);
	if (sub->config) /* it holds credentials in clear */
		explicit_bzero(sub->config, strlen(sub->config));
	free(sub->config);
	sub->name = NULL;
	sub->config = NULL;
}

void store_subs_free(struct sub_row *items, size_t n)
{
	if (!items)
		return;
	for (size_t i = 0; i < n; i++)
		store_sub_free(&items[i]);
	free(items);
}

/* ---- listing cursors (both backends) ------------------------------------------------- */

/* "<sort><order>:<value>:<id>", e.g. "ca:1732230255123:0193...", the sort key and id of
 * the last row of the previous page. The sort and order letters make a cursor from
 * another listing an error instead of a silently wrong page. */
static const char sort_letters[] = {'c', 'u', 'a'};

static const char *const sort_columns[] = {
	[DELIVERY_SORT_CREATED] = "created_at",
	[DELIVERY_SORT_UPDATED] = "updated_at",
	[DELIVERY_SORT_ATTEMPTS] = "attempt_count",
};

const char *store_sort_column(enum delivery_sort sort)
{
	return sort_columns[sort];
}

int store_cursor_parse(const struct delivery_filter *f, int64_t *value,
		       char id[UUID_STR_LEN])
{
	const char *c = f->cursor;
	char *end;
	size_t len;
	long long v;

	if (strlen(c) < 5 || c[0] != sort_letters[f->sort] ||
	    c[1] != (f->descending ? 'd' : 'a') || c[2] != ':')
		return -1;
	errno = 0;
	v = strtoll(c + 3, &end, 10);
	if (errno || end == c + 3 || *end != ':')
		return -1;
	len = strlen(end + 1);
	if (len == 0 || len >= UUID_STR_LEN || strspn(end + 1, "0123456789abcdefABCDEF-") != len)
		return -1;
	*value = v;
	memcpy(id, end + 1, len + 1);
	return 0;
}

char *store_cursor_after(const struct delivery_filter *f, const struct store_delivery *last)
{
	int64_t v = f->sort == DELIVERY_SORT_UPDATED    ? last->updated_at
		    : f->sort == DELIVERY_SORT_ATTEMPTS ? last->attempt_count
						     : last->created_at;
	size_t len = 3 + 21 + 1 + UUID_STR_LEN;
	char *c = malloc(len);

	if (c)
		snprintf(c, len, "%c%c:%lld:%s", sort_letters[f->sort], f->descending ? 'd' : 'a',
			 (long long)v, last->id);
	return c;
}

int store_take_one(void *rows, size_t n, size_t size, void *out)
{
	if (n == 0) {
		free(rows);
		return STORE_NOT_FOUND;
	}
	memcpy(out, rows, size);
	free(rows);
	return STORE_OK;
}

/* ---- subscriptions into the registry ---------------------------------------------- */

int store_subs_load(store *st, struct sub_registry *reg, const struct retry_policy *defaults)
{
	struct sub_row *rows = NULL;
	size_t n = 0;
	char why[256];
	int64_t now = clock_now_ms();
	unsigned long ticket = sub_registry_ticket(reg);
	int rc = store_sub_list(st, &rows, &n);
	if (rc) {
		/* a row that does not open was logged with its id by the wrappers */
		snprintf(why, sizeof(why), "the subscriptions cannot be read from the store (%s): "
			 "events cannot be fanned out", store_strerror(rc));
		sub_registry_stale(reg, now, why);
		return rc;
	}
	struct sub_set *set = sub_set_new();
	set->loaded_at_ms = now;
	set->read_ticket = ticket;
	for (size_t i = 0; i < n && rc == STORE_OK; i++) {
		struct subscription *s = sub_codec_from_row(&rows[i], defaults);
		if (!s) {
			snprintf(why, sizeof(why), "subscription %s cannot be decoded: events "
				 "cannot be fanned out", rows[i].id);
			rc = STORE_ERROR;
		} else if (sub_set_add(set, s)) {
			snprintf(why, sizeof(why), "out of memory loading subscription %s", rows[i].id);
			rc = STORE_ERROR;
		}
	}
	store_subs_free(rows, n);
	if (rc != STORE_OK) {
		/* keep the set there was: a partial one would fan out without that row */
		log_error("%s", why);
		sub_registry_release(reg, set);
		sub_registry_stale(reg, now, why);
		return rc;
	}
	sub_registry_publish(reg, set);
	return STORE_OK;
}
