/* render.h: store rows as the API's JSON (names and statuses are a contract,
 * docs/contracts.md; RFC 3339 UTC times). */
#ifndef OUTBOXD_API_RENDER_H
#define OUTBOXD_API_RENDER_H

#include <jansson.h>

#include "store/store.h"

json_t *render_time(int64_t ms);                 /* null for 0 */
json_t *render_event(const struct store_event *ev);
json_t *render_event_summary(const struct store_event_summary *e);
json_t *render_delivery(const struct store_delivery *d);
json_t *render_attempt(const struct store_attempt_row *a);

#endif
