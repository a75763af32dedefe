/* store.c: the backend-independent half of the storage interface: opening a store,
 * events and deliveries (the subscription rows: subscriptions.c; jobs, audit, tokens:
 * operator_records.c).
 *
 * Picks a backend by DSN prefix, checks arguments once for every backend (so each
 * backend may assume sane input), initialises out-parameters so callers can always free
 * them, and frees what the readers return. No SQL and no library types here. */
#include "store/backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/secretbox.h"
#include "util/log.h"
#include "util/uuid.h"

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

void store_on_subscriptions_changed(store *st, store_subs_changed_cb cb, void *ctx)
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

int store_deliveries_count(store *st, const struct delivery_filter *f, size_t *n)
{
	if (n)
		*n = 0;
	if (!st || !f || !n)
		return STORE_INVALID;
	OPTIONAL_OP(st, deliveries_count);
	return st->methods->deliveries_count(st, f, n);
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
	if (f->cursor && store_newest_cursor_parse(f->cursor, 'e', &before_at, before_id))
		return STORE_INVALID;
	OPTIONAL_OP(st, events_list);
	/* One more than asked: whether a next page exists. */
	rc = st->methods->events_list(st, f, before_at, f->cursor ? before_id : NULL, f->limit + 1,
				  items, n);
	if (rc != STORE_OK || *n <= f->limit)
		return rc;
	const struct store_event_summary *last = &(*items)[f->limit - 1];
	if (!(*next_cursor = store_newest_cursor('e', last->event.created_at, last->event.id))) {
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

/* Event-type cursors: "t:<the last type of the previous page>". */
int store_event_types(store *st, const char *cursor, size_t limit,
		      struct store_event_type **items, size_t *n, char **next_cursor)
{
	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (next_cursor)
		*next_cursor = NULL;
	if (!st || !items || !n || !next_cursor || limit < 1 || limit > STORE_MAX_PAGE)
		return STORE_INVALID;
	if (cursor && (strncmp(cursor, "t:", 2) != 0 || !cursor[2] || strlen(cursor) > 2 + 255))
		return STORE_INVALID;
	OPTIONAL_OP(st, event_types);
	/* One more than asked: whether a next page exists. */
	int rc = st->methods->event_types(st, cursor ? cursor + 2 : NULL, limit + 1, items, n);
	if (rc != STORE_OK) { /* what a failed read left */
		store_event_types_free(*items, *n);
		*items = NULL;
		*n = 0;
		return rc;
	}
	if (*n <= limit)
		return rc;
	size_t len = strlen((*items)[limit - 1].event_type) + 3;
	if (!(*next_cursor = malloc(len))) {
		store_event_types_free(*items, *n);
		*items = NULL;
		*n = 0;
		return STORE_ERROR;
	}
	snprintf(*next_cursor, len, "t:%s", (*items)[limit - 1].event_type);
	for (size_t i = limit; i < *n; i++)
		free((*items)[i].event_type);
	*n = limit;
	return STORE_OK;
}

void store_event_types_free(struct store_event_type *items, size_t n)
{
	for (size_t i = 0; items && i < n; i++)
		free(items[i].event_type);
	free(items);
}

char *store_event_cursor(const struct store_event_summary *e)
{
	return store_newest_cursor('e', e->event.created_at, e->event.id);
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

/* ---- stats ------------------------------------------------------------------------------- */

static int sub_stats_cmp(const void *a, const void *b)
{
	return strcmp(((const struct store_sub_stats *)a)->subscription_id,
		      ((const struct store_sub_stats *)b)->subscription_id);
}

static int id_to_sub_stats(const void *id, const void *x)
{
	return strcmp(id, ((const struct store_sub_stats *)x)->subscription_id);
}

struct store_sub_stats *store_sub_stats_find(const struct store_sub_stats *subs, size_t n,
					     const char *id)
{
	return n ? bsearch(id, subs, n, sizeof(*subs), id_to_sub_stats) : NULL;
}

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
	/* sorted here, whatever order the backend read them in (PostgreSQL's collation
	 * need not be strcmp's), for store_sub_stats_find */
	if (rc == STORE_OK && out->n_subs)
		qsort(out->subs, out->n_subs, sizeof(*out->subs), sub_stats_cmp);
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

/* The "<value>:<id>" that ends every cursor into *value and id (left alone when it is
 * not one). 0, or -1. */
static int cursor_value_id(const char *p, long long *value, char id[UUID_STR_LEN])
{
	char *end;
	size_t len;
	long long v;

	errno = 0;
	v = strtoll(p, &end, 10);
	if (errno || end == p || *end != ':')
		return -1;
	len = strlen(end + 1);
	if (len == 0 || len >= UUID_STR_LEN || strspn(end + 1, "0123456789abcdefABCDEF-") != len)
		return -1;
	*value = v;
	memcpy(id, end + 1, len + 1);
	return 0;
}

const char *store_sort_column(enum delivery_sort sort)
{
	return sort_columns[sort];
}

int store_cursor_parse(const struct delivery_filter *f, int64_t *value,
		       char id[UUID_STR_LEN])
{
	const char *c = f->cursor;
	long long v;

	if (strlen(c) < 5 || c[0] != sort_letters[f->sort] ||
	    c[1] != (f->descending ? 'd' : 'a') || c[2] != ':' ||
	    cursor_value_id(c + 3, &v, id))
		return -1;
	*value = v;
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

int store_newest_cursor_parse(const char *c, char tag, long long *at,
			      char id[UUID_STR_LEN])
{
	if (c[0] != tag || c[1] != ':')
		return -1;
	return cursor_value_id(c + 2, at, id);
}

char *store_newest_cursor(char tag, int64_t at, const char *id)
{
	size_t len = 2 + 21 + 1 + UUID_STR_LEN;
	char *c = malloc(len);

	if (c)
		snprintf(c, len, "%c:%lld:%s", tag, (long long)at, id);
	return c;
}

void store_glob_to_like(const char *glob, char *out)
{
	for (; *glob; glob++) {
		if (*glob == '*') {
			*out++ = '%';
		} else if (*glob == '?') {
			*out++ = '_';
		} else {
			if (*glob == '%' || *glob == '_' || *glob == '\\')
				*out++ = '\\';
			*out++ = *glob;
		}
	}
	*out = '\0';
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
