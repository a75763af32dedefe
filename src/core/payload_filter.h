/* payload_filter.h: a subscription's filter on the events' payloads — which events of its
 * types it gets (docs/api.md, "Payload filters"). A filter is a JSON object: each member
 * names a path into the payload (dot-separated member names; a segment of digits also
 * indexes an array) and what its value must be, a literal (equal to it) or an object of
 * operators ($eq, $neq, $gt, $gte, $lt, $lte, $in, $nin, $exists, $startsWith); "$or" and
 * "$and" take arrays of filters. Every member must hold. Parsed once when the
 * subscription is decoded; matched at fan-out against the payload parsed once per event.
 * Immutable after parsing: any thread may match. */
#ifndef OUTBOXD_CORE_PAYLOAD_FILTER_H
#define OUTBOXD_CORE_PAYLOAD_FILTER_H

#include <jansson.h>
#include <stddef.h>

#include "core/input_error.h"

#define PAYLOAD_FILTER_MAX_CONDITIONS 64 /* paths tested, over every level */
#define PAYLOAD_FILTER_MAX_DEPTH 4       /* nested $or / $and */
#define PAYLOAD_FILTER_MAX_SEGMENTS 16   /* of a path */
#define PAYLOAD_FILTER_MAX_PATH 256      /* bytes of a path */
#define PAYLOAD_FILTER_MAX_LIST 100      /* values of $in / $nin, filters of $or / $and */

struct payload_filter;

/* Parses v (the subscription's "filter") into *out: 0, or 400 in err naming the member at
 * fault as "filter.<path>" (or "filter" itself). */
int payload_filter_parse(const json_t *v, struct payload_filter **out,
			 struct input_error *err);
/* What a filter reads of a payload of len bytes at data with content type content_type
 * (NULL: JSON): the parsed JSON value (json_decref it), or NULL when its type is not
 * JSON (header_is_json_type) or the bytes do not parse. */
json_t *payload_filter_doc(const char *content_type, const void *data, size_t len);
/* Whether payload (a parsed JSON value; NULL when the event's payload is not JSON)
 * passes f. A payload that is not JSON passes no filter. */
int payload_filter_match(const struct payload_filter *f, const json_t *payload);
void payload_filter_free(struct payload_filter *f);

#endif
