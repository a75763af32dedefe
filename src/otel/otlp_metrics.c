/* otlp_metrics.c: the counters of GET /metrics (core/metrics.h renders them as Prometheus
 * text, the one place they are read) as OTLP metrics with OpenTelemetry's names and units:
 * a dotted name without the Prometheus _total and unit suffixes, a UCUM unit ("s", "1",
 * or a {annotation} for counts of things), counters as cumulative monotonic integer sums,
 * the histograms (attempt durations, store calls) as explicit-bucket histograms. Pure: no
 * I/O, no clock. */
#include "otel/otlp.h"
#include "otel/otlp_int.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LABELS_MAX 8       /* labels of one sample at most (outboxd's have two at most) */
#define BUCKETS_MAX 32     /* bounds of a histogram at most (outboxd's have 12 and 11) */

/* Every family core/metrics.c renders, by its Prometheus name (tests/unit/otel checks the
 * list is whole). gauge_double: the gauge's values are fractions (seconds), else whole
 * numbers; counters are always whole. */
static const struct {
	const char *prometheus, *otel, *unit;
	int gauge_double;
} names[] = {
	{"outboxd_deliveries_total", "outboxd.deliveries", "{delivery}", 0},
	{"outboxd_attempts_total", "outboxd.attempts", "{attempt}", 0},
	{"outboxd_attempt_duration_seconds", "outboxd.attempt.duration", "s", 0},
	{"outboxd_store_ingest_seconds", "outboxd.store.ingest.duration", "s", 0},
	{"outboxd_store_claim_seconds", "outboxd.store.claim.duration", "s", 0},
	{"outboxd_store_results_seconds", "outboxd.store.results.duration", "s", 0},
	{"outboxd_store_renew_seconds", "outboxd.store.renew.duration", "s", 0},
	{"outboxd_ingest_queued_seconds", "outboxd.ingest.queued.duration", "s", 0},
	{"outboxd_ingest_answered_seconds", "outboxd.ingest.answered.duration", "s", 0},
	{"outboxd_circuit_state", "outboxd.circuit.state", "1", 0},
	{"outboxd_in_flight", "outboxd.in_flight", "{delivery}", 0},
	{"outboxd_rounds_started_total", "outboxd.rounds.started", "{round}", 0},
	{"outboxd_lease_renewals_total", "outboxd.lease.renewals", "{renewal}", 0},
	{"outboxd_leases_lost_total", "outboxd.leases.lost", "{lease}", 0},
	{"outboxd_http_requests_total", "outboxd.http.requests", "{request}", 0},
	{"outboxd_http_reconnects_total", "outboxd.http.reconnects", "{connect}", 0},
	{"outboxd_http_resent_total", "outboxd.http.resent", "{request}", 0},
	{"outboxd_http_tls_handshakes_total", "outboxd.http.tls_handshakes", "{handshake}", 0},
	{"outboxd_ingested_events_total", "outboxd.events.ingested", "{event}", 0},
	{"outboxd_ingest_rejected_total", "outboxd.ingest.rejected", "{request}", 0},
	{"outboxd_api_auth_failures_total", "outboxd.api.auth_failures", "{request}", 0},
	{"outboxd_api_refused_total", "outboxd.api.refused", "{request}", 0},
	{"outboxd_subscriptions_disabled_total", "outboxd.subscriptions.disabled",
	 "{subscription}", 0},
	{"outboxd_subscriptions_recovered_total", "outboxd.subscriptions.recovered",
	 "{subscription}", 0},
	{"outboxd_ops_events_total", "outboxd.ops_events", "{event}", 0},
	{"outboxd_otlp_spans_total", "outboxd.otlp.spans", "{span}", 0},
	{"outboxd_store_errors_total", "outboxd.store.errors", "{error}", 0},
	{"outboxd_kafka_produce_errors_total", "outboxd.kafka.produce_errors", "{message}", 0},
	{"outboxd_kafka_fatal_errors_total", "outboxd.kafka.fatal_errors", "{error}", 0},
	{"outboxd_kafka_dead_lettered_total", "outboxd.kafka.dead_lettered", "{message}", 0},
	{"outboxd_kafka_consumed_total", "outboxd.kafka.consumed", "{message}", 0},
	{"outboxd_kafka_undecodable_total", "outboxd.kafka.undecodable", "{message}", 0},
	{"outboxd_kafka_intake_paused", "outboxd.kafka.intake_paused", "1", 0},
	{"outboxd_kafka_consumer_lag", "outboxd.kafka.consumer_lag", "{message}", 0},
	{"outboxd_endpoint_concurrency_limit", "outboxd.endpoint.concurrency_limit", "{request}",
	 0},
	{"outboxd_endpoint_in_flight", "outboxd.endpoint.in_flight", "{request}", 0},
	{"outboxd_endpoint_queued", "outboxd.endpoint.queued", "{delivery}", 0},
	{"outboxd_endpoint_latency_seconds", "outboxd.endpoint.latency", "s", 1},
	{"outboxd_endpoint_latency_min_seconds", "outboxd.endpoint.latency_min", "s", 1},
	{"outboxd_endpoint_limit_cuts_total", "outboxd.endpoint.limit_cuts", "{cut}", 0},
};

/* Labels whose attribute has a name of OpenTelemetry's semantic conventions, or the
 * name the attempt spans use; any other label L becomes outboxd.L. */
static const struct {
	const char *label, *attribute;
} attribute_names[] = {
	{"subscription_id", "outboxd.subscription.id"},
	{"topic", "messaging.destination.name"},
	{"partition", "messaging.destination.partition.id"},
	{"protocol", "network.protocol.name"},
};

const char *otlp_metric_name(const char *prometheus_family, const char **unit)
{
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(names[i].prometheus, prometheus_family) == 0) {
			*unit = names[i].unit;
			return names[i].otel;
		}
	}
	*unit = "";
	return NULL;
}

struct sample {
	char name[128];
	struct {
		char key[64], value[256];
	} labels[LABELS_MAX];
	size_t n_labels;
	double value;
};

/* name{k="v",...} value into s. 0, or -1 when the line is not a sample. */
static int parse_sample(const char *line, struct sample *s)
{
	size_t n = strcspn(line, "{ ");
	if (n == 0 || n >= sizeof(s->name))
		return -1;
	memcpy(s->name, line, n);
	s->name[n] = '\0';
	s->n_labels = 0;
	const char *p = line + n;
	if (*p == '{') {
		p++;
		while (*p && *p != '}') {
			if (s->n_labels == LABELS_MAX)
				return -1;
			char *key = s->labels[s->n_labels].key, *val = s->labels[s->n_labels].value;
			size_t kl = strcspn(p, "=");
			if (kl == 0 || kl >= sizeof(s->labels[0].key) || p[kl] != '=' || p[kl + 1] != '"')
				return -1;
			memcpy(key, p, kl);
			key[kl] = '\0';
			p += kl + 2;
			size_t vl = 0;
			while (*p && *p != '"' && vl < sizeof(s->labels[0].value) - 1) {
				if (*p == '\\' && p[1])
					p++;
				val[vl++] = *p++;
			}
			val[vl] = '\0';
			if (*p != '"')
				return -1;
			p++;
			s->n_labels++;
			if (*p == ',')
				p++;
		}
		if (*p != '}')
			return -1;
		p++;
	}
	char *end;
	s->value = strtod(p, &end);
	return end == p ? -1 : 0;
}

/* A growing array of pointers in the arena: a full one is copied into one twice its size
 * (the old one stays in the arena until the request is done). */
static int grow(struct otlp_arena *a, void ***items, size_t n, size_t *cap)
{
	if (n < *cap)
		return 0;
	size_t ncap = *cap ? *cap * 2 : 16;
	void **more = otlp_alloc(a, ncap * sizeof(*more));
	if (!more)
		return -1;
	if (n)
		memcpy(more, *items, n * sizeof(*more));
	*items = more;
	*cap = ncap;
	return 0;
}

/* The family being read: its metric and, for the histogram, what its lines said. */
struct family {
	char name[128], type[16], help[512];
	otlp_metric *m;                   /* NULL: a type outboxd does not export */
	int gauge_double;
	void **points;                    /* of the sum or the gauge */
	size_t n_points, cap_points;
	double bounds[BUCKETS_MAX];
	uint64_t cumulative[BUCKETS_MAX]; /* Prometheus buckets count everything below */
	size_t n_bounds;
	uint64_t count;
	double sum;
	int seen_count;
};

struct builder {
	struct otlp_arena *a;
	int64_t start_ns, now_ns;
	void **metrics;
	size_t n_metrics, cap_metrics;
	struct family f;
};

static otlp_kv **attributes(struct otlp_arena *a, const struct sample *s, const char *skip,
			    size_t *n)
{
	otlp_kv **attrs = otlp_alloc(a, (s->n_labels ? s->n_labels : 1) * sizeof(*attrs));
	*n = 0;
	if (!attrs)
		return NULL;
	for (size_t i = 0; i < s->n_labels; i++) {
		const char *key = s->labels[i].key;
		char own[80];
		if (skip && strcmp(key, skip) == 0)
			continue;
		size_t k;
		for (k = 0; k < sizeof(attribute_names) / sizeof(attribute_names[0]); k++)
			if (strcmp(attribute_names[k].label, key) == 0)
				break;
		if (k < sizeof(attribute_names) / sizeof(attribute_names[0])) {
			key = attribute_names[k].attribute;
		} else {
			snprintf(own, sizeof(own), "outboxd.%s", key);
			key = own;
		}
		if (!(attrs[*n] = otlp_kv_str(a, key, s->labels[i].value)))
			return NULL;
		(*n)++;
	}
	return attrs;
}

/* Starts family name of Prometheus type (counter, gauge, histogram; any other is not
 * exported). 0, or -1 when out of memory. */
static int family_start(struct builder *b, const char *name, const char *type)
{
	struct family *f = &b->f;
	const char *unit, *otel = otlp_metric_name(name, &unit);
	char made[160];

	snprintf(f->type, sizeof(f->type), "%s", type);
	f->m = NULL;
	f->gauge_double = 1;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(names[i].prometheus, name) == 0)
			f->gauge_double = names[i].gauge_double;
	if (strcmp(type, "counter") && strcmp(type, "gauge") && strcmp(type, "histogram"))
		return 0;
	if (!otel) {
		/* a family this file does not list yet: outboxd_foo_total as outboxd.foo */
		size_t len = strlen(name);
		if (len > 6 && strcmp(name + len - 6, "_total") == 0)
			len -= 6;
		if (strncmp(name, "outboxd_", 8) == 0)
			snprintf(made, sizeof(made), "outboxd.%.*s", (int)len - 8, name + 8);
		else
			snprintf(made, sizeof(made), "%.*s", (int)len, name);
		otel = made;
	}
	otlp_metric *m = otlp_alloc(b->a, sizeof(*m));
	if (!m)
		return -1;
	opentelemetry__proto__metrics__v1__metric__init(m);
	if (!(m->name = otlp_strdup(b->a, otel)) || !(m->unit = otlp_strdup(b->a, unit)) ||
	    !(m->description = otlp_strdup(b->a, f->help)))
		return -1;
	if (!strcmp(type, "counter")) {
		otlp_sum *s = otlp_alloc(b->a, sizeof(*s));
		if (!s)
			return -1;
		opentelemetry__proto__metrics__v1__sum__init(s);
		s->aggregation_temporality =
			OPENTELEMETRY__PROTO__METRICS__V1__AGGREGATION_TEMPORALITY__AGGREGATION_TEMPORALITY_CUMULATIVE;
		s->is_monotonic = 1;
		m->data_case = OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_SUM;
		m->sum = s;
	} else if (!strcmp(type, "gauge")) {
		otlp_gauge *g = otlp_alloc(b->a, sizeof(*g));
		if (!g)
			return -1;
		opentelemetry__proto__metrics__v1__gauge__init(g);
		m->data_case = OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_GAUGE;
		m->gauge = g;
	} else {
		otlp_histogram *h = otlp_alloc(b->a, sizeof(*h));
		if (!h)
			return -1;
		opentelemetry__proto__metrics__v1__histogram__init(h);
		h->aggregation_temporality =
			OPENTELEMETRY__PROTO__METRICS__V1__AGGREGATION_TEMPORALITY__AGGREGATION_TEMPORALITY_CUMULATIVE;
		m->data_case = OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_HISTOGRAM;
		m->histogram = h;
	}
	f->m = m;
	return 0;
}

/* A counter's or gauge's sample. 0, or -1 when out of memory. */
static int number_point(struct builder *b, const struct sample *s)
{
	struct family *f = &b->f;
	otlp_number_point *p = otlp_alloc(b->a, sizeof(*p));
	if (!p || grow(b->a, &f->points, f->n_points, &f->cap_points))
		return -1;
	opentelemetry__proto__metrics__v1__number_data_point__init(p);
	if (!(p->attributes = attributes(b->a, s, NULL, &p->n_attributes)))
		return -1;
	p->time_unix_nano = (uint64_t)b->now_ns;
	if (f->m->data_case == OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_SUM)
		p->start_time_unix_nano = (uint64_t)b->start_ns;
	if (f->m->data_case == OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_GAUGE &&
	    f->gauge_double) {
		p->value_case = OPENTELEMETRY__PROTO__METRICS__V1__NUMBER_DATA_POINT__VALUE_AS_DOUBLE;
		p->as_double = s->value;
	} else {
		p->value_case = OPENTELEMETRY__PROTO__METRICS__V1__NUMBER_DATA_POINT__VALUE_AS_INT;
		p->as_int = isfinite(s->value) ? llround(s->value) : 0;
	}
	f->points[f->n_points++] = p;
	return 0;
}

/* A line of the histogram family: NAME_bucket{le="x"}, NAME_sum, NAME_count. */
static void histogram_line(struct family *f, const struct sample *s)
{
	size_t len = strlen(f->name);
	const char *suffix = strncmp(s->name, f->name, len) == 0 ? s->name + len : "";
	uint64_t v = s->value > 0 && isfinite(s->value) ? (uint64_t)llround(s->value) : 0;

	if (strcmp(suffix, "_sum") == 0) {
		f->sum = s->value;
	} else if (strcmp(suffix, "_count") == 0) {
		f->count = v;
		f->seen_count = 1;
	} else if (strcmp(suffix, "_bucket") == 0) {
		for (size_t i = 0; i < s->n_labels; i++) {
			char *end;
			double le = strtod(s->labels[i].value, &end);
			if (strcmp(s->labels[i].key, "le") || end == s->labels[i].value || isinf(le) ||
			    f->n_bounds == BUCKETS_MAX)
				continue; /* +Inf is the count */
			f->bounds[f->n_bounds] = le;
			f->cumulative[f->n_bounds++] = v;
		}
	}
}

/* The histogram's one point. OTLP counts each bucket on its own where Prometheus counts
 * everything below a bound; a scrape races the counting (a bucket read before an attempt
 * was added, the next one after), so a difference below zero reads as zero and the
 * count is the sum of the buckets, which OTLP requires. 0, or -1 when out of memory. */
static int histogram_point(struct builder *b)
{
	struct family *f = &b->f;
	size_t n = f->n_bounds;
	otlp_histogram_point *p = otlp_alloc(b->a, sizeof(*p));
	void **one = otlp_alloc(b->a, sizeof(*one));
	uint64_t *counts = otlp_alloc(b->a, (n + 1) * sizeof(*counts));
	double *bounds = otlp_alloc(b->a, (n ? n : 1) * sizeof(*bounds));

	if (!p || !one || !counts || !bounds)
		return -1;
	opentelemetry__proto__metrics__v1__histogram_data_point__init(p);
	uint64_t below = 0, total = 0;
	for (size_t i = 0; i < n; i++) {
		counts[i] = f->cumulative[i] > below ? f->cumulative[i] - below : 0;
		below = f->cumulative[i] > below ? f->cumulative[i] : below;
		bounds[i] = f->bounds[i];
		total += counts[i];
	}
	counts[n] = f->count > below ? f->count - below : 0;
	total += counts[n];
	p->start_time_unix_nano = (uint64_t)b->start_ns;
	p->time_unix_nano = (uint64_t)b->now_ns;
	p->count = total;
	p->optional_sum_case = OPENTELEMETRY__PROTO__METRICS__V1__HISTOGRAM_DATA_POINT__OPTIONAL_SUM_SUM;
	p->sum = f->sum;
	p->bucket_counts = counts;
	p->n_bucket_counts = n + 1;
	p->explicit_bounds = bounds;
	p->n_explicit_bounds = n;
	one[0] = p;
	f->points = one;
	f->n_points = 1;
	return 0;
}

/* The family is read: its metric joins the list, with its points (none: left out). */
static int family_end(struct builder *b)
{
	struct family *f = &b->f;
	int rc = 0;

	if (f->m && f->m->data_case == OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_HISTOGRAM &&
	    f->seen_count)
		rc = histogram_point(b);
	if (!rc && f->m && f->n_points) {
		if (f->m->data_case == OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_SUM) {
			f->m->sum->data_points = (otlp_number_point **)f->points;
			f->m->sum->n_data_points = f->n_points;
		} else if (f->m->data_case == OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_GAUGE) {
			f->m->gauge->data_points = (otlp_number_point **)f->points;
			f->m->gauge->n_data_points = f->n_points;
		} else {
			f->m->histogram->data_points = (otlp_histogram_point **)f->points;
			f->m->histogram->n_data_points = f->n_points;
		}
		rc = grow(b->a, &b->metrics, b->n_metrics, &b->cap_metrics);
		if (!rc)
			b->metrics[b->n_metrics++] = f->m;
	}
	memset(f, 0, sizeof(*f));
	return rc;
}

/* One line of the exposition. 0, or -1 when out of memory. */
static int line(struct builder *b, const char *text)
{
	struct family *f = &b->f;
	char name[128], type[16];
	int skip = 0;

	if (sscanf(text, "# HELP %127s %n", name, &skip) == 1 && skip) {
		if (strcmp(name, f->name) != 0) {
			if (family_end(b))
				return -1;
			snprintf(f->name, sizeof(f->name), "%s", name);
		}
		snprintf(f->help, sizeof(f->help), "%s", text + skip);
		return 0;
	}
	if (sscanf(text, "# TYPE %127s %15s", name, type) == 2) {
		if (strcmp(name, f->name) != 0) {
			if (family_end(b))
				return -1;
			snprintf(f->name, sizeof(f->name), "%s", name);
		}
		return family_start(b, name, type);
	}
	struct sample s;
	if (text[0] == '#' || !f->m || parse_sample(text, &s))
		return 0;
	if (f->m->data_case == OPENTELEMETRY__PROTO__METRICS__V1__METRIC__DATA_HISTOGRAM)
		histogram_line(f, &s);
	else if (strcmp(s.name, f->name) == 0)
		return number_point(b, &s);
	return 0;
}

int otlp_metrics_from_prometheus(struct otlp_arena *a, const char *text, int64_t start_ns,
				 int64_t now_ns, otlp_metric ***out, size_t *n)
{
	struct builder *b = calloc(1, sizeof(*b));
	int rc = 0;

	if (!b)
		return -1;
	b->a = a;
	b->start_ns = start_ns;
	b->now_ns = now_ns;
	for (const char *p = text; !rc && p && *p;) {
		const char *eol = strchr(p, '\n');
		size_t len = eol ? (size_t)(eol - p) : strlen(p);
		char buf[1024];
		if (len < sizeof(buf)) {
			memcpy(buf, p, len);
			buf[len] = '\0';
			rc = line(b, buf);
		}
		p = eol ? eol + 1 : NULL;
	}
	if (!rc)
		rc = family_end(b);
	*out = (otlp_metric **)b->metrics;
	*n = b->n_metrics;
	free(b);
	return rc;
}
