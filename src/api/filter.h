/* filter.h: delivery filters from a query string or a JSON object, one parser for
 * GET /v1/deliveries, GET /v1/dlq, filter replays, purges and replay jobs. */
#ifndef OUTBOXD_API_FILTER_H
#define OUTBOXD_API_FILTER_H

#include <jansson.h>

#include "core/input_error.h"
#include "core/subscriptions.h"
#include "store/store.h"

/* Storage for values the filter points to that are not in the input (a subscription id
 * found by name). Lives as long as the filter. */
struct filter_buf {
	char subscription_id[UUID_STR_LEN];
};

/* Looks up a parameter by name; NULL when absent. */
typedef const char *(*filter_get_cb)(const void *ctx, const char *name);

/* Fills f from the parameters (status, subscription_id, name, event_type — a glob when
 * it holds '*' or '?' —, q, code, from, to, source, event_id, and with sortable also
 * sort and order). reg resolves `name`. prefix names fields in errors ("filter.").
 * Returns 0, or -1 with err naming the field. */
int filter_parse(filter_get_cb get, const void *ctx, int sortable, struct sub_registry *reg,
		 const char *prefix, struct store_delivery_filter *f, struct filter_buf *buf,
		 struct input_error *err);

/* Same from a JSON object; unknown keys and non-string values are errors. */
int filter_parse_json(const json_t *obj, struct sub_registry *reg, const char *prefix,
		      struct store_delivery_filter *f, struct filter_buf *buf,
		      struct input_error *err);

#endif
