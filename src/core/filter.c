/* filter.c: parsing of delivery filters (see filter.h). */
#include "core/filter.h"

#include <stdlib.h>
#include <string.h>

#include "util/clock.h"
#include "util/duration.h"
#include "util/uuid.h"

static const char *const json_keys[] = {"status", "subscription_id", "name", "event_type", "q",
					"code", "from", "to", "source", "event_id", "min_attempts",
					"failing_since", NULL};

static int fail(struct input_error *err, const char *prefix, const char *key, const char *what)
{
	char field[128];
	snprintf(field, sizeof(field), "%s%s", prefix, key);
	return input_error_set(err, 400, "invalid_argument", field, "%s %s", field, what);
}

/* event_type: exact, or a glob when it holds '*' or '?' (deliveries and events alike). */
static int event_type_parse(filter_get_cb get, const void *ctx, const char *prefix,
			    const char **type, int *glob, struct input_error *err)
{
	const char *v = get(ctx, "event_type");

	if (!v)
		return 0;
	if (!*v || strlen(v) > 255)
		return fail(err, prefix, "event_type", "must be 1 to 255 characters");
	*type = v;
	*glob = strpbrk(v, "*?") != NULL;
	return 0;
}

/* from and to: a created_at range of RFC 3339 times, to exclusive. */
static int range_parse(filter_get_cb get, const void *ctx, const char *prefix,
		       int64_t *from_ms, int64_t *to_ms, struct input_error *err)
{
	const char *v;

	if ((v = get(ctx, "from")) && clock_parse_rfc3339(v, from_ms))
		return fail(err, prefix, "from", "must be an RFC 3339 time such as 2026-11-21T10:00:00Z");
	if ((v = get(ctx, "to")) && clock_parse_rfc3339(v, to_ms))
		return fail(err, prefix, "to", "must be an RFC 3339 time such as 2026-11-21T11:00:00Z");
	return 0;
}

int filter_parse(filter_get_cb get, const void *ctx, int sortable, struct sub_registry *reg,
		 const char *prefix, int64_t now_ms, struct delivery_filter *f,
		 struct filter_buf *buf, struct input_error *err)
{
	const char *v;

	if ((v = get(ctx, "status"))) {
		if (delivery_status_parse(v, &f->status))
			return fail(err, prefix, "status", "must be NEW, PROCESSED or FAILED");
		f->has_status = 1;
	}
	if ((v = get(ctx, "subscription_id"))) {
		if (!uuid_valid(v))
			return fail(err, prefix, "subscription_id", "must be a UUID");
		f->subscription_id = v;
	}
	if ((v = get(ctx, "name"))) {
		/* Names are unique: resolve to the id, so the store filters on an index. */
		struct sub_set *set = sub_registry_acquire(reg);
		const struct subscription *hit = NULL;
		for (size_t i = 0; i < set->n && !hit; i++)
			if (strcmp(set->items[i]->name, v) == 0)
				hit = set->items[i];
		if (hit)
			memcpy(buf->subscription_id, hit->id, UUID_STR_LEN);
		sub_registry_release(reg, set);
		if (!hit) {
			char field[128];
			snprintf(field, sizeof(field), "%sname", prefix);
			return input_error_set(err, 404, "not_found", field,
					       "no subscription is named \"%.100s\"", v);
		}
		if (f->subscription_id && strcmp(f->subscription_id, buf->subscription_id) != 0)
			return fail(err, prefix, "name", "names another subscription than subscription_id");
		f->subscription_id = buf->subscription_id;
	}
	if (event_type_parse(get, ctx, prefix, &f->event_type, &f->event_type_glob, err))
		return -1;
	if ((v = get(ctx, "q"))) {
		if (strlen(v) > 256)
			return fail(err, prefix, "q", "must be at most 256 characters");
		f->q = v;
	}
	if ((v = get(ctx, "code"))) {
		char *end;
		long code = strtol(v, &end, 10);
		if (*end || end == v || code < 100 || code > 999)
			return fail(err, prefix, "code", "must be a status code such as 503");
		f->has_code = 1;
		f->code = (int)code;
	}
	if ((v = get(ctx, "source")))
		f->source = v;
	if ((v = get(ctx, "event_id"))) {
		if (!uuid_valid(v))
			return fail(err, prefix, "event_id", "must be a UUID");
		f->event_id = v;
	}
	if (range_parse(get, ctx, prefix, &f->from_ms, &f->to_ms, err))
		return -1;
	if ((v = get(ctx, "min_attempts"))) {
		char *end;
		long n = strtol(v, &end, 10);
		if (*end || end == v || n < 1 || n > 1000000000)
			return fail(err, prefix, "min_attempts", "must be an integer from 1");
		f->min_attempts = (int)n;
	}
	/* What has been failing for at least this long, dead or still retried. */
	if ((v = get(ctx, "failing_since"))) {
		int64_t ago;
		if (clock_parse_rfc3339(v, &f->failing_since_ms) == 0) {
			/* an instant */
		} else if (duration_parse(v, &ago) == 0 && ago >= 0 && ago < now_ms) {
			f->failing_since_ms = now_ms - ago;
		} else {
			return fail(err, prefix, "failing_since",
				    "must be an RFC 3339 time such as 2026-11-21T10:00:00Z or a "
				    "duration such as 1h (that long ago)");
		}
		if (f->failing_since_ms <= 0)
			f->failing_since_ms = 1;
	}
	if (!sortable)
		return 0;
	if ((v = get(ctx, "sort"))) {
		if (strcmp(v, "created_at") == 0)
			f->sort = DELIVERY_SORT_CREATED;
		else if (strcmp(v, "updated_at") == 0)
			f->sort = DELIVERY_SORT_UPDATED;
		else if (strcmp(v, "attempt_count") == 0)
			f->sort = DELIVERY_SORT_ATTEMPTS;
		else
			return fail(err, prefix, "sort", "must be created_at, updated_at or attempt_count");
	}
	if ((v = get(ctx, "order"))) {
		if (strcmp(v, "asc") == 0)
			f->descending = 0;
		else if (strcmp(v, "desc") == 0)
			f->descending = 1;
		else
			return fail(err, prefix, "order", "must be asc or desc");
	}
	return 0;
}

static const char *json_get(const void *ctx, const char *name)
{
	json_t *v = json_object_get(ctx, name);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

int filter_parse_json(const json_t *obj, struct sub_registry *reg, const char *prefix,
		      int64_t now_ms, struct delivery_filter *f, struct filter_buf *buf,
		      struct input_error *err)
{
	const char *key;
	json_t *v;

	if (!json_is_object(obj)) {
		char field[64];
		snprintf(field, sizeof(field), "%.*s", (int)(strlen(prefix) ? strlen(prefix) - 1 : 0),
			 prefix);
		return input_error_set(err, 400, "invalid_argument", field,
				       "%s must be an object", field);
	}
	json_object_foreach((json_t *)obj, key, v) {
		int known = 0;
		for (const char *const *k = json_keys; *k; k++)
			known |= strcmp(*k, key) == 0;
		if (!known)
			return fail(err, prefix, key, "is not a known filter");
		if (strcmp(key, "min_attempts") == 0 && json_is_integer(v)) {
			json_int_t n = json_integer_value(v);
			if (n < 1 || n > 1000000000)
				return fail(err, prefix, key, "must be an integer from 1");
			f->min_attempts = (int)n;
			continue;
		}
		if (strcmp(key, "code") == 0 && json_is_integer(v)) {
			json_int_t code = json_integer_value(v);
			if (code < 100 || code > 999)
				return fail(err, prefix, key, "must be a status code such as 503");
			f->has_code = 1;
			f->code = (int)code;
			continue;
		}
		if (!json_is_string(v))
			return fail(err, prefix, key, "must be a string");
	}
	return filter_parse(json_get, obj, 0, reg, prefix, now_ms, f, buf, err);
}

int event_filter_parse(filter_get_cb get, const void *ctx, struct event_filter *f,
		       struct input_error *err)
{
	const char *v;

	if (event_type_parse(get, ctx, "", &f->event_type, &f->event_type_glob, err))
		return -1;
	if ((v = get(ctx, "source"))) {
		if (strlen(v) > 1024)
			return fail(err, "", "source", "must be at most 1024 characters");
		f->source = v;
	}
	if ((v = get(ctx, "source_event_id"))) {
		if (!*v || strlen(v) > 1024)
			return fail(err, "", "source_event_id", "must be 1 to 1024 characters");
		f->source_event_id = v;
	}
	if ((v = get(ctx, "id"))) {
		if (!uuid_valid(v))
			return fail(err, "", "id", "must be a UUID");
		f->id = v;
	}
	return range_parse(get, ctx, "", &f->from_ms, &f->to_ms, err);
}
