/* filter.h: which deliveries an operator means — the filter of GET /v1/deliveries,
 * GET /v1/dlq, filter replays, purges and replay jobs — and its one parser, from a query
 * string or a JSON object; and which events (the search of GET /v1/events), from a query
 * string. The store answers a filter (store_deliveries_list, store_events_list); this
 * file only reads and checks one. Pure: no I/O. */
#ifndef OUTBOXD_CORE_FILTER_H
#define OUTBOXD_CORE_FILTER_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/input_error.h"
#include "core/model.h"
#include "core/subscriptions.h"

enum delivery_sort { DELIVERY_SORT_CREATED = 0, DELIVERY_SORT_UPDATED, DELIVERY_SORT_ATTEMPTS };

struct delivery_filter {
	int has_status;
	enum delivery_status status;
	int dead_only;              /* FAILED with no next attempt (the DLQ) */
	const char *subscription_id;
	const char *event_type;     /* exact, or a glob ('*', '?') when event_type_glob */
	int event_type_glob;
	const char *q;              /* substring of last_message or last_cause */
	int has_code;
	int code;                   /* last error code */
	const char *source;         /* the event's source */
	const char *event_id;
	int64_t from_ms, to_ms;     /* created_at range, 0 = unbounded; to is exclusive */
	int min_attempts;           /* attempt_count at least this, 0 = any */
	int64_t failing_since_ms;   /* FAILED, failing since this time or earlier; 0 = any */
	enum delivery_sort sort;
	int descending;
	const char *cursor;         /* from a previous page, NULL for the first */
	size_t limit;               /* 1..1000 */
};


/* Storage for values the filter points to that are not in the input (a subscription id
 * found by name). Lives as long as the filter. */
struct filter_buf {
	char subscription_id[UUID_STR_LEN];
};

/* Looks up a parameter by name; NULL when absent. */
typedef const char *(*filter_get_cb)(const void *ctx, const char *name);

/* Fills f from the parameters (status, subscription_id, name, event_type — a glob when
 * it holds '*' or '?' —, q, code, from, to, source, event_id, min_attempts,
 * failing_since — an RFC 3339 time, or a duration meaning that long before now_ms —,
 * and with sortable also sort and order). reg resolves `name`. prefix names fields in errors ("filter.").
 * Returns 0, or -1 with err naming the field. */
int filter_parse(filter_get_cb get, const void *ctx, int sortable, struct sub_registry *reg,
		 const char *prefix, int64_t now_ms, struct delivery_filter *f,
		 struct filter_buf *buf, struct input_error *err);

/* Same from a JSON object; unknown keys and non-string values are errors. */
int filter_parse_json(const json_t *obj, struct sub_registry *reg, const char *prefix,
		      int64_t now_ms, struct delivery_filter *f, struct filter_buf *buf,
		      struct input_error *err);

/* The events an operator searches for (GET /v1/events), newest first. Every string points
 * into the parameters it was parsed from. */
struct event_filter {
	const char *event_type;     /* exact, or a glob ('*', '?') when event_type_glob */
	int event_type_glob;
	const char *source;         /* exact ("" is the events sent without one) */
	const char *source_event_id;
	const char *id;             /* one event */
	int64_t from_ms, to_ms;     /* created_at range, 0 = unbounded; to is exclusive */
	const char *cursor;         /* from a previous page, NULL for the first */
	size_t limit;               /* 1..1000 */
	int with_payload;           /* the events' payloads too (the payload search) */
};

/* Fills f's conditions from the parameters event_type (a glob when it holds '*' or '?'),
 * source, source_event_id, id, from and to, read the way filter_parse reads the
 * deliveries' (cursor and limit are the caller's). Returns 0, or -1 with err naming the
 * field (400). */
int event_filter_parse(filter_get_cb get, const void *ctx, struct event_filter *f,
		       struct input_error *err);

#endif
