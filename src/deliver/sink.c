/* sink.c: the registry of the sink family (see sink.h) — which members there are, which
 * one delivers to an endpoint, and the daemon's set of open ones.
 *
 * It knows members only by their struct sink_type: what they do is theirs, what the
 * subscription rules allow is core/sink_caps.c's, and the two are compared here before
 * anything opens. It never sends. */
#include "deliver/sink.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/config.h"
#include "core/sink_caps.h"

/* Every member, in the order a scheme is looked up (schemes are distinct, so the order
 * only orders the dispatcher's state slots). A new member is one line here. */
static const struct sink_type *const sink_types[] = {
	&sink_type_http,
	&sink_type_kafka,
};
#define SINK_TYPES_N (sizeof(sink_types) / sizeof(sink_types[0]))
_Static_assert(SINK_TYPES_N <= SINKS_MAX, "SINKS_MAX holds every member");

const struct sink_type *sink_type_at(size_t i)
{
	return i < SINK_TYPES_N ? sink_types[i] : NULL;
}

const struct sink_type *sink_type_by_name(const char *name)
{
	for (size_t i = 0; name && i < SINK_TYPES_N; i++)
		if (strcmp(sink_types[i]->name, name) == 0)
			return sink_types[i];
	return NULL;
}

/* The scheme of t that endpoint has ("scheme://..."), NULL when none. */
static const struct sink_type_scheme *scheme_of(const struct sink_type *t, const char *endpoint)
{
	for (int k = 0; k < SINK_SCHEMES_MAX && t->schemes[k].scheme; k++) {
		size_t n = strlen(t->schemes[k].scheme);
		if (strncasecmp(endpoint, t->schemes[k].scheme, n) == 0 &&
		    strncmp(endpoint + n, "://", 3) == 0)
			return &t->schemes[k];
	}
	return NULL;
}

const struct sink_type *sink_type_for(const char *endpoint, unsigned *supports)
{
	for (size_t i = 0; endpoint && i < SINK_TYPES_N; i++) {
		const struct sink_type_scheme *ts = scheme_of(sink_types[i], endpoint);
		if (ts) {
			if (supports)
				*supports = ts->supports;
			return sink_types[i];
		}
	}
	return NULL;
}

int sink_type_check(const struct sink_type *t, char *why, size_t whylen)
{
	size_t mine = 0;
	for (int k = 0; k < SINK_SCHEMES_MAX && t->schemes[k].scheme; k++, mine++) {
		const struct sink_type_scheme *ts = &t->schemes[k];
		const struct sink_scheme *row = sink_scheme_named(ts->scheme);
		if (!row || strcmp(row->member, t->name) != 0) {
			snprintf(why, whylen, "sink %s delivers to %s://, which the subscription rules "
				 "(core/sink_caps.c) give to %s", t->name, ts->scheme,
				 row ? row->member : "no member");
			return -1;
		}
		if (row->supports != ts->supports) {
			snprintf(why, whylen, "sink %s supports 0x%x at %s://, the subscription rules "
				 "(core/sink_caps.c) say 0x%x", t->name, ts->supports, ts->scheme,
				 row->supports);
			return -1;
		}
	}
	size_t theirs = 0;
	for (size_t i = 0; i < sink_schemes_n; i++)
		theirs += strcmp(sink_schemes[i].member, t->name) == 0;
	if (theirs != mine) {
		snprintf(why, whylen, "sink %s declares %zu schemes, the subscription rules "
			 "(core/sink_caps.c) give it %zu", t->name, mine, theirs);
		return -1;
	}
	return 0;
}

struct sink *sink_open(const struct sink_type *t, const struct config *cfg, char *err,
		       size_t errlen)
{
	struct sink *s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "sink %s: out of memory", t->name);
		return NULL;
	}
	s->type = t;
	if (!(s->priv = t->open(cfg, err, errlen))) {
		free(s);
		return NULL;
	}
	return s;
}

void sink_close(struct sink *s)
{
	if (!s)
		return;
	s->type->methods->close(s->priv);
	free(s);
}

int sink_set_open(struct sink_set *set, const struct config *cfg, char *err, size_t errlen)
{
	memset(set, 0, sizeof(*set));
	for (size_t i = 0; i < SINK_TYPES_N; i++) {
		const struct sink_type *t = sink_types[i];
		if (sink_type_check(t, err, errlen))
			goto fail;
		if (t->configured && !t->configured(cfg))
			continue;
		if (!(set->members[set->n] = sink_open(t, cfg, err, errlen)))
			goto fail;
		set->n++;
	}
	return 0;
fail:
	sink_set_close(set);
	return -1;
}

void sink_set_close(struct sink_set *set)
{
	for (int i = 0; i < set->n; i++)
		sink_close(set->members[i]);
	memset(set, 0, sizeof(*set));
}

struct sink *sink_set_find(const struct sink_set *set, const char *endpoint)
{
	for (int i = 0; endpoint && i < set->n; i++)
		if (scheme_of(set->members[i]->type, endpoint))
			return set->members[i];
	return NULL;
}

int sink_set_ready(const struct sink_set *set, char *why, size_t whylen)
{
	for (int i = 0; i < set->n; i++)
		if (sink_ready(set->members[i], why, whylen))
			return -1;
	return 0;
}

int sink_set_dead_letter(const struct sink_set *set, const struct store_claim *c)
{
	for (int i = 0; i < set->n; i++)
		if (sink_dead_letter(set->members[i], c))
			return 1;
	return 0;
}
