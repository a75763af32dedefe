/* metrics.c: atomic counters and their Prometheus rendering (see metrics.h). */
#include "core/metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/model.h"
#include "util/hash.h"
#include "util/clock.h"

#define SUB_SLOTS 1024 /* subscriptions tracked by label; more are counted as "other" */

static const double buckets[] = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
#define N_BUCKETS (sizeof(buckets) / sizeof(buckets[0]))

/* A histogram of durations: per bound, the observations at or below it (cumulative, as
 * Prometheus renders them), their count and their sum. bounds is one of the arrays here;
 * hist_add and hist_render are given it and its length. */
struct hist {
	_Atomic long le[N_BUCKETS];
	_Atomic long count;
	_Atomic long long us_sum;
};

/* The writer's times (store calls, an ingest request's wait) run from a fraction of a
 * millisecond (SQLite, a small group) to seconds (a stalled disk, a database failing
 * over). */
static const double writer_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
				       0.1, 0.25, 1, 5};
#define N_WRITER_BUCKETS (sizeof(writer_buckets) / sizeof(writer_buckets[0]))
_Static_assert(N_WRITER_BUCKETS <= N_BUCKETS, "struct hist holds N_BUCKETS bounds");

/* Each family's HELP and TYPE lines spelt out, like every other family's here: a
 * dashboard's check (tests/install/grafana.sh) finds a family by its "# TYPE" line. */
static const struct {
	const char *name, *head;
} writer_time_family[METRICS_WRITER_TIMES] = {
	[METRICS_STORE_INGEST] = {"outboxd_store_ingest_seconds",
		"# HELP outboxd_store_ingest_seconds Wall time of the writer's store calls that "
		"store a group of ingested events.\n"
		"# TYPE outboxd_store_ingest_seconds histogram\n"},
	[METRICS_STORE_CLAIM] = {"outboxd_store_claim_seconds",
		"# HELP outboxd_store_claim_seconds Wall time of the writer's store calls that "
		"claim due deliveries.\n# TYPE outboxd_store_claim_seconds histogram\n"},
	[METRICS_STORE_RESULTS] = {"outboxd_store_results_seconds",
		"# HELP outboxd_store_results_seconds Wall time of the writer's store calls that "
		"record a group of delivery results.\n"
		"# TYPE outboxd_store_results_seconds histogram\n"},
	[METRICS_STORE_RENEW] = {"outboxd_store_renew_seconds",
		"# HELP outboxd_store_renew_seconds Wall time of the writer's store calls that "
		"renew the leases of deliveries in progress.\n"
		"# TYPE outboxd_store_renew_seconds histogram\n"},
	[METRICS_INGEST_QUEUED] = {"outboxd_ingest_queued_seconds",
		"# HELP outboxd_ingest_queued_seconds Time ingest requests waited for the writer "
		"to take them into a group.\n# TYPE outboxd_ingest_queued_seconds histogram\n"},
	[METRICS_INGEST_ANSWERED] = {"outboxd_ingest_answered_seconds",
		"# HELP outboxd_ingest_answered_seconds Time from an ingest request queued for "
		"the writer to its caller having the answer (the writer's share of an "
		"acknowledgement).\n# TYPE outboxd_ingest_answered_seconds histogram\n"},
};

static const char *const outcome_names[METRICS_OUTCOMES] = {"processed", "retrying", "dead",
							 "released", "delayed"};
static const char *const auth_failure_names[METRICS_AUTH_FAILURES] = {"missing", "invalid",
								      "expired", "limited"};
static const char *const api_refusal_names[METRICS_API_REFUSALS] = {"too_large", "memory",
								    "deadline"};

struct sub_slot {
	_Atomic int used;                 /* 0 free, 1 claiming, 2 ready */
	char id[UUID_STR_LEN];
	_Atomic long outcomes[METRICS_OUTCOMES];
	_Atomic int circuit_known;        /* a breaker state was ever published (its state:
	                                     metrics_circuit_state) */
};

static struct {
	struct sub_slot subs[SUB_SLOTS];
	_Atomic long other[METRICS_OUTCOMES];
	_Atomic long attempts_by_class[6]; /* 1xx..5xx by hundreds; [0] = other */
	struct hist attempts;
	_Atomic long in_flight;
	_Atomic long ingested[INGEST_PROTOCOLS];
	_Atomic long claimed, handed;
	_Atomic long leases_renewed, leases_lost;
	_Atomic long http_lean, http_curl, http_reconnects, http_resent;
	_Atomic long http_tls_full, http_tls_resumed;
	_Atomic long rejected_4xx[INGEST_PROTOCOLS], rejected_5xx[INGEST_PROTOCOLS];
	_Atomic long store_errors;
	_Atomic long subs_disabled;
	_Atomic long ops_stored, ops_suppressed, ops_dropped;
	_Atomic long otlp_exported, otlp_dropped, otlp_failed;
	_Atomic long subs_recovered;
	_Atomic long kafka_produce_errors;
	_Atomic long kafka_fatal_producer, kafka_fatal_intake, kafka_fatal_dead_letter;
	_Atomic long kafka_dead_lettered;
	_Atomic long kafka_consumed;
	_Atomic long kafka_undecodable;
	_Atomic int kafka_paused;
	_Atomic long auth_failures[METRICS_AUTH_FAILURES];
	_Atomic long api_refused[METRICS_API_REFUSALS];
	struct hist writer_times[METRICS_WRITER_TIMES];
} m;

/* Consumer lag by topic and partition: written by the intake thread only, read by the
 * renderer under lag_mu. Each probe of the intake's assignment is a round: what it does
 * not name again (partitions that went to another instance) is swept at its end. */
#define LAG_SLOTS 256
static pthread_mutex_t lag_mu = PTHREAD_MUTEX_INITIALIZER;
static struct {
	char topic[256];             /* a Kafka topic name has at most 249 characters */
	int partition;
	long long lag;
	unsigned round;              /* the last round that named it */
} lags[LAG_SLOTS];
static int n_lags;
static unsigned lag_round;

/* Endpoints' flow control: written by the dispatcher every 100 ms at most, read by the
 * renderer and GET /v1/stats, all under ep_mu. Sorted by key, any number of them (a
 * platform may deliver to thousands); the /metrics series stop at ENDPOINT_SERIES, to
 * keep a scrape's size bounded. */
#define ENDPOINT_SERIES 256
static pthread_mutex_t ep_mu = PTHREAD_MUTEX_INITIALIZER;
static struct metrics_endpoint_view *eps;
static size_t n_eps, cap_eps;

/* Where key is in the n items of size bytes at items, sorted by their first member, a
 * NUL-terminated key (*found 1), or where it would go. */
static size_t sorted_pos(const void *items, size_t n, size_t size, const char *key, int *found)
{
	size_t lo = 0, hi = n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp((const char *)items + mid * size, key);
		if (c == 0) {
			*found = 1;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = 0;
	return lo;
}

/* Room for a new item at pos in a sorted table of *n items of size bytes, *cap allocated
 * (doubled as needed, from 16): the items from pos on move up one. Returns the new
 * slot, or NULL when out of memory (the table unchanged). */
static void *sorted_insert(void **items, size_t *n, size_t *cap, size_t size, size_t pos)
{
	if (*n == *cap) {
		size_t more_cap = *cap ? *cap * 2 : 16;
		void *more = realloc(*items, more_cap * size);
		if (!more)
			return NULL;
		*items = more;
		*cap = more_cap;
	}
	char *at = (char *)*items + pos * size;
	memmove(at + size, at, (*n - pos) * size);
	(*n)++;
	return at;
}

/* Removes the item at pos of a sorted table of *n items of size bytes. */
static void sorted_remove(void *items, size_t *n, size_t size, size_t pos)
{
	char *at = (char *)items + pos * size;
	memmove(at, at + size, (*n - pos - 1) * size);
	(*n)--;
}

/* Where the endpoint with that key is (*found 1), or would go. Under ep_mu. */
static size_t ep_pos(const char *key, int *found)
{
	return sorted_pos(eps, n_eps, sizeof(*eps), key, found);
}

static struct sub_slot *slot_for(const char *id)
{
	uint32_t h = hash_fnv1a(id);
	for (int probe = 0; probe < 16; probe++) {
		struct sub_slot *s = &m.subs[(h + (uint32_t)probe) % SUB_SLOTS];
		int state = atomic_load(&s->used);
		if (state == 2 && strcmp(s->id, id) == 0)
			return s;
		if (state == 0) {
			int expected = 0;
			if (atomic_compare_exchange_strong(&s->used, &expected, 1)) {
				snprintf(s->id, sizeof(s->id), "%s", id);
				atomic_store(&s->used, 2);
				return s;
			}
			state = atomic_load(&s->used);
		}
		while (state == 1) /* another thread is writing the id: a few instructions */
			state = atomic_load(&s->used);
		if (strcmp(s->id, id) == 0)
			return s;
	}
	return NULL;
}

void metrics_delivery(const char *subscription_id, enum metrics_outcome outcome)
{
	if ((unsigned)outcome >= METRICS_OUTCOMES)
		return;
	struct sub_slot *s = subscription_id ? slot_for(subscription_id) : NULL;
	atomic_fetch_add_explicit(s ? &s->outcomes[outcome] : &m.other[outcome], 1,
				  memory_order_relaxed);
}

static void hist_add(struct hist *h, const double *bounds, size_t n, int64_t duration_us)
{
	double sec = (double)duration_us / 1e6;
	for (size_t i = 0; i < n; i++)
		if (sec <= bounds[i])
			atomic_fetch_add_explicit(&h->le[i], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&h->us_sum, duration_us, memory_order_relaxed);
}

void metrics_writer_time(enum metrics_writer_time what, int64_t duration_us)
{
	if ((unsigned)what < METRICS_WRITER_TIMES)
		hist_add(&m.writer_times[what], writer_buckets, N_WRITER_BUCKETS, duration_us);
}

void metrics_attempt(int code, int64_t duration_us)
{
	int cls = code >= 100 && code < 600 ? code / 100 : 0;
	atomic_fetch_add_explicit(&m.attempts_by_class[cls], 1, memory_order_relaxed);
	hist_add(&m.attempts, buckets, N_BUCKETS, duration_us);
}

void metrics_in_flight(long n)
{
	atomic_store_explicit(&m.in_flight, n, memory_order_relaxed);
}

/* The breakers not closed, sorted by subscription id: each subscription's circuit is
 * read here, whatever the number of subscriptions (the labelled slots above stop at
 * SUB_SLOTS, and a subscription beyond them would read as closed). Written only when a
 * breaker changes state. */
struct open_circuit {
	char id[UUID_STR_LEN];
	int state;                        /* 1 open, 2 half-open */
	int64_t open_until_ms;
};

static struct {
	pthread_mutex_t mu;
	struct open_circuit *items;
	size_t n, cap;
} circuits = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* Where id is in circuits (*found 1), or where it would go. Under circuits.mu. */
static size_t circuit_pos(const char *id, int *found)
{
	return sorted_pos(circuits.items, circuits.n, sizeof(*circuits.items), id, found);
}

void metrics_circuit(const char *subscription_id, int state, int64_t open_until_ms)
{
	if (!subscription_id)
		return;
	struct sub_slot *s = slot_for(subscription_id);
	if (s)
		atomic_store_explicit(&s->circuit_known, 1, memory_order_relaxed);

	int found;
	pthread_mutex_lock(&circuits.mu);
	size_t i = circuit_pos(subscription_id, &found);
	if (state == 0 && found) {
		sorted_remove(circuits.items, &circuits.n, sizeof(*circuits.items), i);
	} else if (state != 0) {
		/* NULL, out of memory: the breaker works on; GET /v1/stats reads it closed */
		struct open_circuit *c = found ? &circuits.items[i]
					       : sorted_insert((void **)&circuits.items, &circuits.n,
							       &circuits.cap, sizeof(*circuits.items), i);
		if (c && !found)
			snprintf(c->id, sizeof(c->id), "%s", subscription_id);
		if (c) {
			c->state = state;
			c->open_until_ms = open_until_ms;
		}
	}
	pthread_mutex_unlock(&circuits.mu);
}

int metrics_circuit_state(const char *subscription_id, int64_t now_ms)
{
	int found, state = 0;
	int64_t until = 0;
	if (!subscription_id)
		return 0;
	pthread_mutex_lock(&circuits.mu);
	size_t i = circuit_pos(subscription_id, &found);
	if (found) {
		state = circuits.items[i].state;
		until = circuits.items[i].open_until_ms;
	}
	pthread_mutex_unlock(&circuits.mu);
	if (state == 1 && now_ms >= until)
		state = 2; /* the window is over: the next delivery is the probe */
	return state;
}

void metrics_started(long claimed, long handed)
{
	atomic_fetch_add_explicit(&m.claimed, claimed, memory_order_relaxed);
	atomic_fetch_add_explicit(&m.handed, handed, memory_order_relaxed);
}

void metrics_leases(long renewed, long lost)
{
	atomic_fetch_add_explicit(&m.leases_renewed, renewed, memory_order_relaxed);
	atomic_fetch_add_explicit(&m.leases_lost, lost, memory_order_relaxed);
}

void metrics_http_request(int lean)
{
	atomic_fetch_add_explicit(lean ? &m.http_lean : &m.http_curl, 1, memory_order_relaxed);
}

void metrics_http_reconnect(void)
{
	atomic_fetch_add_explicit(&m.http_reconnects, 1, memory_order_relaxed);
}

void metrics_http_resend(void)
{
	atomic_fetch_add_explicit(&m.http_resent, 1, memory_order_relaxed);
}

void metrics_http_tls_handshake(int resumed)
{
	atomic_fetch_add_explicit(resumed ? &m.http_tls_resumed : &m.http_tls_full, 1,
				  memory_order_relaxed);
}

static int protocol_index(enum ingest_protocol p)
{
	return p == INGEST_GRPC ? INGEST_GRPC : INGEST_HTTP;
}

void metrics_ingested(enum ingest_protocol protocol, long events)
{
	atomic_fetch_add_explicit(&m.ingested[protocol_index(protocol)], events,
				  memory_order_relaxed);
}

void metrics_ingest_rejected(enum ingest_protocol protocol, int status)
{
	int i = protocol_index(protocol);
	atomic_fetch_add_explicit(status >= 500 ? &m.rejected_5xx[i] : &m.rejected_4xx[i], 1,
				  memory_order_relaxed);
}

void metrics_store_error(void)
{
	atomic_fetch_add_explicit(&m.store_errors, 1, memory_order_relaxed);
}

void metrics_subscription_disabled(void)
{
	atomic_fetch_add_explicit(&m.subs_disabled, 1, memory_order_relaxed);
}

void metrics_ops_events(long stored, long suppressed, long dropped)
{
	atomic_fetch_add_explicit(&m.ops_stored, stored, memory_order_relaxed);
	atomic_fetch_add_explicit(&m.ops_suppressed, suppressed, memory_order_relaxed);
	atomic_fetch_add_explicit(&m.ops_dropped, dropped, memory_order_relaxed);
}

void metrics_api_auth_failure(enum metrics_auth_failure why)
{
	if (why < METRICS_AUTH_FAILURES)
		atomic_fetch_add_explicit(&m.auth_failures[why], 1, memory_order_relaxed);
}

void metrics_api_refused(enum metrics_api_refusal why)
{
	if (why < METRICS_API_REFUSALS)
		atomic_fetch_add_explicit(&m.api_refused[why], 1, memory_order_relaxed);
}

void metrics_otlp_spans(long exported, long dropped, long failed)
{
	atomic_fetch_add_explicit(&m.otlp_exported, exported, memory_order_relaxed);
	atomic_fetch_add_explicit(&m.otlp_dropped, dropped, memory_order_relaxed);
	atomic_fetch_add_explicit(&m.otlp_failed, failed, memory_order_relaxed);
}

void metrics_ops_events_read(long *stored, long *suppressed, long *dropped)
{
	*stored = atomic_load(&m.ops_stored);
	*suppressed = atomic_load(&m.ops_suppressed);
	*dropped = atomic_load(&m.ops_dropped);
}

void metrics_subscription_recovered(void)
{
	atomic_fetch_add_explicit(&m.subs_recovered, 1, memory_order_relaxed);
}

void metrics_kafka_produce_error(const char *topic)
{
	(void)topic;
	atomic_fetch_add_explicit(&m.kafka_produce_errors, 1, memory_order_relaxed);
}

void metrics_kafka_fatal_error(const char *client)
{
	_Atomic long *c = strcmp(client, "intake") == 0	   ? &m.kafka_fatal_intake
			  : strcmp(client, "dead-letter") == 0 ? &m.kafka_fatal_dead_letter
							       : &m.kafka_fatal_producer;
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

void metrics_kafka_dead_lettered(void)
{
	atomic_fetch_add_explicit(&m.kafka_dead_lettered, 1, memory_order_relaxed);
}

void metrics_kafka_consumed(long messages, long undecodable)
{
	atomic_fetch_add_explicit(&m.kafka_consumed, messages, memory_order_relaxed);
	atomic_fetch_add_explicit(&m.kafka_undecodable, undecodable, memory_order_relaxed);
}

void metrics_kafka_paused(int paused)
{
	atomic_store(&m.kafka_paused, paused);
}

/* The slot of (topic, partition), made when there is room; n_lags when none. Under
 * lag_mu. */
static int lag_slot(const char *topic, int partition, int make)
{
	int i;
	for (i = 0; i < n_lags; i++)
		if (lags[i].partition == partition && strcmp(lags[i].topic, topic) == 0)
			return i;
	if (make && n_lags < LAG_SLOTS) {
		snprintf(lags[i].topic, sizeof(lags[i].topic), "%s", topic);
		lags[i].partition = partition;
		lags[i].lag = 0;
		n_lags++;
	}
	return i;
}

void metrics_kafka_lag_round(void)
{
	pthread_mutex_lock(&lag_mu);
	lag_round++;
	pthread_mutex_unlock(&lag_mu);
}

void metrics_kafka_lag(const char *topic, int partition, long long lag)
{
	pthread_mutex_lock(&lag_mu);
	int i = lag_slot(topic, partition, 1);
	if (i < n_lags) {
		lags[i].lag = lag;
		lags[i].round = lag_round;
	}
	pthread_mutex_unlock(&lag_mu);
}

void metrics_kafka_lag_keep(const char *topic, int partition)
{
	pthread_mutex_lock(&lag_mu);
	int i = lag_slot(topic, partition, 0);
	if (i < n_lags)
		lags[i].round = lag_round;
	pthread_mutex_unlock(&lag_mu);
}

void metrics_kafka_lag_sweep(void)
{
	pthread_mutex_lock(&lag_mu);
	int kept = 0;
	for (int i = 0; i < n_lags; i++)
		if (lags[i].round == lag_round)
			lags[kept++] = lags[i];
	n_lags = kept;
	pthread_mutex_unlock(&lag_mu);
}

void metrics_endpoint(const char *key, int limit, int in_flight, int queued,
		      int64_t latency_min_us, int64_t latency_us, long cuts)
{
	int found;
	pthread_mutex_lock(&ep_mu);
	size_t i = ep_pos(key, &found);
	/* NULL, out of memory: the endpoint's flow control works on, unseen */
	struct metrics_endpoint_view *e =
		found ? &eps[i] : sorted_insert((void **)&eps, &n_eps, &cap_eps, sizeof(*eps), i);
	if (e && !found)
		snprintf(e->key, sizeof(e->key), "%s", key);
	if (e) {
		e->limit = limit;
		e->in_flight = in_flight;
		e->queued = queued;
		e->latency_min_us = latency_min_us;
		e->latency_us = latency_us;
		e->cuts = cuts;
	}
	pthread_mutex_unlock(&ep_mu);
}

void metrics_endpoint_gone(const char *key)
{
	int found;
	pthread_mutex_lock(&ep_mu);
	size_t i = ep_pos(key, &found);
	if (found)
		sorted_remove(eps, &n_eps, sizeof(*eps), i);
	pthread_mutex_unlock(&ep_mu);
}

/* Busiest first: the most requests open and waiting, ties by key (the index in the
 * table, which is sorted by key). Under ep_mu. */
static int ep_index_busier(const void *a, const void *b)
{
	size_t i = *(const size_t *)a, k = *(const size_t *)b;
	int li = eps[i].in_flight + eps[i].queued, lk = eps[k].in_flight + eps[k].queued;
	return li != lk ? (li > lk ? -1 : 1) : (i > k) - (i < k);
}

size_t metrics_endpoints(struct metrics_endpoint_view *out, size_t max)
{
	pthread_mutex_lock(&ep_mu);
	size_t n = n_eps < max ? n_eps : max;
	size_t *idx = n ? malloc(n_eps * sizeof(*idx)) : NULL;
	if (idx) {
		for (size_t i = 0; i < n_eps; i++)
			idx[i] = i;
		qsort(idx, n_eps, sizeof(*idx), ep_index_busier);
		for (size_t i = 0; i < n; i++)
			out[i] = eps[idx[i]];
		free(idx);
	} else if (n) { /* out of memory: the first by key */
		memcpy(out, eps, n * sizeof(*out));
	}
	pthread_mutex_unlock(&ep_mu);
	return n;
}

int metrics_endpoint_get(const char *key, struct metrics_endpoint_view *out)
{
	int found;
	pthread_mutex_lock(&ep_mu);
	size_t i = ep_pos(key, &found);
	if (found)
		*out = eps[i];
	pthread_mutex_unlock(&ep_mu);
	return found ? 0 : -1;
}

size_t metrics_endpoint_count(void)
{
	pthread_mutex_lock(&ep_mu);
	size_t n = n_eps;
	pthread_mutex_unlock(&ep_mu);
	return n;
}

static int appendf(char **out, size_t *len, size_t *cap, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static int appendf(char **out, size_t *len, size_t *cap, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(*out + *len, *cap - *len, fmt, ap);
		va_end(ap);
		if (n < 0)
			return -1;
		if ((size_t)n < *cap - *len) {
			*len += (size_t)n;
			return 0;
		}
		size_t ncap = *cap * 2 + (size_t)n;
		char *grown = realloc(*out, ncap);
		if (!grown)
			return -1;
		*out = grown;
		*cap = ncap;
	}
}

#define A(...)                                          \
	do {                                            \
		if (appendf(out, len, cap, __VA_ARGS__))  \
			return -1;                      \
	} while (0)

/* The histogram h as the family name, after head (its HELP and TYPE lines): a line per
 * bound, +Inf, sum, count. */
static int hist_render(char **out, size_t *len, size_t *cap, const char *name,
		       const char *head, struct hist *h, const double *bounds, size_t n)
{
	long count = atomic_load(&h->count);

	A("%s", head);
	for (size_t i = 0; i < n; i++)
		A("%s_bucket{le=\"%g\"} %ld\n", name, bounds[i], atomic_load(&h->le[i]));
	A("%s_bucket{le=\"+Inf\"} %ld\n%s_sum %.6f\n%s_count %ld\n", name, count, name,
	  (double)atomic_load(&h->us_sum) / 1e6, name, count);
	return 0;
}

/* The per-subscription round outcomes, attempts by class and duration, circuit states,
 * rounds in flight and started, and leases. */
static int render_rounds(char **out, size_t *len, size_t *cap)
{
	A("# HELP outboxd_deliveries_total Delivery rounds by outcome and subscription.\n"
	  "# TYPE outboxd_deliveries_total counter\n");
	for (int i = 0; i < SUB_SLOTS; i++) {
		struct sub_slot *s = &m.subs[i];
		if (atomic_load(&s->used) != 2)
			continue;
		for (int o = 0; o < METRICS_OUTCOMES; o++)
			A("outboxd_deliveries_total{subscription_id=\"%s\",outcome=\"%s\"} %ld\n", s->id,
			  outcome_names[o], atomic_load(&s->outcomes[o]));
	}
	for (int o = 0; o < METRICS_OUTCOMES; o++)
		if (atomic_load(&m.other[o]))
			A("outboxd_deliveries_total{subscription_id=\"other\",outcome=\"%s\"} %ld\n",
			  outcome_names[o], atomic_load(&m.other[o]));
	A("# HELP outboxd_attempts_total HTTP attempts by status class (mapped transport errors "
	  "count as 5xx).\n# TYPE outboxd_attempts_total counter\n");
	static const char *const classes[] = {"other", "1xx", "2xx", "3xx", "4xx", "5xx"};
	for (int c = 0; c < 6; c++)
		A("outboxd_attempts_total{class=\"%s\"} %ld\n", classes[c],
		  atomic_load(&m.attempts_by_class[c]));
	if (hist_render(out, len, cap, "outboxd_attempt_duration_seconds",
			"# HELP outboxd_attempt_duration_seconds Duration of HTTP attempts.\n"
			"# TYPE outboxd_attempt_duration_seconds histogram\n",
			&m.attempts, buckets, N_BUCKETS))
		return -1;
	for (int i = 0; i < METRICS_WRITER_TIMES; i++)
		if (hist_render(out, len, cap, writer_time_family[i].name,
				writer_time_family[i].head, &m.writer_times[i], writer_buckets,
				N_WRITER_BUCKETS))
			return -1;
	A("# HELP outboxd_circuit_state Circuit breaker of a subscription in this instance: "
	  "0 closed, 1 open, 2 half-open.\n# TYPE outboxd_circuit_state gauge\n");
	int64_t now_ms = clock_now_ms();
	for (int i = 0; i < SUB_SLOTS; i++) {
		struct sub_slot *s = &m.subs[i];
		if (atomic_load(&s->used) != 2 || !atomic_load(&s->circuit_known))
			continue;
		A("outboxd_circuit_state{subscription_id=\"%s\"} %d\n", s->id,
		  metrics_circuit_state(s->id, now_ms));
	}
	A("# HELP outboxd_in_flight Deliveries being worked on by this instance.\n"
	  "# TYPE outboxd_in_flight gauge\noutboxd_in_flight %ld\n", atomic_load(&m.in_flight));
	A("# HELP outboxd_rounds_started_total Delivery rounds started, by how this instance "
	  "got the delivery: claimed from the store, or handed over by the ingest commit that "
	  "leased it (no claim).\n# TYPE outboxd_rounds_started_total counter\n"
	  "outboxd_rounds_started_total{via=\"claim\"} %ld\n"
	  "outboxd_rounds_started_total{via=\"handoff\"} %ld\n",
	  atomic_load(&m.claimed), atomic_load(&m.handed));
	A("# HELP outboxd_lease_renewals_total Leases of deliveries in progress extended because "
	  "their round ran long.\n# TYPE outboxd_lease_renewals_total counter\n"
	  "outboxd_lease_renewals_total %ld\n"
	  "# HELP outboxd_leases_lost_total Rounds whose lease ran out before it could be "
	  "renewed (the store was unreachable): they stop before another attempt.\n"
	  "# TYPE outboxd_leases_lost_total counter\noutboxd_leases_lost_total %ld\n",
	  atomic_load(&m.leases_renewed), atomic_load(&m.leases_lost));
	return 0;
}

/* The instance's clients and queues: HTTP clients, ingest, the API's refusals,
 * subscriptions disabled and recovered, operational events, OTLP spans, store errors. */
static int render_instance(char **out, size_t *len, size_t *cap)
{
	A("# HELP outboxd_http_requests_total Delivery requests sent, by client: outboxd's lean "
	  "HTTP/1.1 client (http:// and https:// to a known address) or libcurl (the rest).\n"
	  "# TYPE outboxd_http_requests_total counter\n"
	  "outboxd_http_requests_total{client=\"lean\"} %ld\n"
	  "outboxd_http_requests_total{client=\"libcurl\"} %ld\n",
	  atomic_load(&m.http_lean), atomic_load(&m.http_curl));
	A("# HELP outboxd_http_reconnects_total Connects the lean client abandoned and made again "
	  "because the first took many times the endpoint's usual connect time (a SYN lost to a "
	  "full accept queue, which the kernel would resend only a second later).\n"
	  "# TYPE outboxd_http_reconnects_total counter\noutboxd_http_reconnects_total %ld\n",
	  atomic_load(&m.http_reconnects));
	A("# HELP outboxd_http_resent_total Requests sent again (by either HTTP client) on a "
	  "new connection because the kept-alive one they went out on closed before any byte of an "
	  "answer (a receiver closing idle connections; one that read the request and closed "
	  "without answering gets it twice).\n"
	  "# TYPE outboxd_http_resent_total counter\noutboxd_http_resent_total %ld\n",
	  atomic_load(&m.http_resent));
	A("# HELP outboxd_http_tls_handshakes_total TLS handshakes of the lean client's https:// "
	  "connections, by session: resumed (the target's last session) or full.\n"
	  "# TYPE outboxd_http_tls_handshakes_total counter\n"
	  "outboxd_http_tls_handshakes_total{session=\"full\"} %ld\n"
	  "outboxd_http_tls_handshakes_total{session=\"resumed\"} %ld\n",
	  atomic_load(&m.http_tls_full), atomic_load(&m.http_tls_resumed));
	A("# HELP outboxd_ingested_events_total Events accepted (202), by the protocol they came "
	  "with (http: POST /v1/events; grpc: the gRPC ingest).\n"
	  "# TYPE outboxd_ingested_events_total counter\n"
	  "outboxd_ingested_events_total{protocol=\"http\"} %ld\n"
	  "outboxd_ingested_events_total{protocol=\"grpc\"} %ld\n",
	  atomic_load(&m.ingested[INGEST_HTTP]), atomic_load(&m.ingested[INGEST_GRPC]));
	A("# HELP outboxd_ingest_rejected_total Ingest requests (gRPC: calls and streamed "
	  "messages) refused, by protocol and class.\n"
	  "# TYPE outboxd_ingest_rejected_total counter\n"
	  "outboxd_ingest_rejected_total{protocol=\"http\",class=\"4xx\"} %ld\n"
	  "outboxd_ingest_rejected_total{protocol=\"http\",class=\"5xx\"} %ld\n"
	  "outboxd_ingest_rejected_total{protocol=\"grpc\",class=\"4xx\"} %ld\n"
	  "outboxd_ingest_rejected_total{protocol=\"grpc\",class=\"5xx\"} %ld\n",
	  atomic_load(&m.rejected_4xx[INGEST_HTTP]), atomic_load(&m.rejected_5xx[INGEST_HTTP]),
	  atomic_load(&m.rejected_4xx[INGEST_GRPC]), atomic_load(&m.rejected_5xx[INGEST_GRPC]));
	static const struct {
		const char *name, *help;
		const char *const *reasons;
		_Atomic long *counts;
		int n;
	} by_reason[] = {
		{"outboxd_api_auth_failures_total",
		 "API requests refused for their token: none (missing), unknown (invalid), "
		 "expired; limited: answered 429 because the address failed too often.",
		 auth_failure_names, m.auth_failures, METRICS_AUTH_FAILURES},
		{"outboxd_api_refused_total",
		 "API requests refused to protect the server: a declared body over max_request "
		 "(too_large), requests in progress holding api_body_memory (memory), a request "
		 "not whole within api_request_timeout (deadline: its connection closed).",
		 api_refusal_names, m.api_refused, METRICS_API_REFUSALS},
	};
	for (size_t f = 0; f < sizeof(by_reason) / sizeof(by_reason[0]); f++) {
		A("# HELP %s %s\n# TYPE %s counter\n", by_reason[f].name, by_reason[f].help,
		  by_reason[f].name);
		for (int r = 0; r < by_reason[f].n; r++)
			A("%s{reason=\"%s\"} %ld\n", by_reason[f].name, by_reason[f].reasons[r],
			  atomic_load(&by_reason[f].counts[r]));
	}
	A("# HELP outboxd_subscriptions_disabled_total Subscriptions this instance disabled "
	  "after failing for disable_after.\n"
	  "# TYPE outboxd_subscriptions_disabled_total counter\n"
	  "outboxd_subscriptions_disabled_total %ld\n", atomic_load(&m.subs_disabled));
	A("# HELP outboxd_subscriptions_recovered_total Subscriptions that succeeded again after "
	  "failing for at least their failure window.\n"
	  "# TYPE outboxd_subscriptions_recovered_total counter\n"
	  "outboxd_subscriptions_recovered_total %ld\n", atomic_load(&m.subs_recovered));
	A("# HELP outboxd_ops_events_total Operational events (outboxd.*): stored for their "
	  "subscribers, held back by ops_events_limit (counted in summaries), dropped (queue "
	  "full).\n# TYPE outboxd_ops_events_total counter\n"
	  "outboxd_ops_events_total{outcome=\"stored\"} %ld\n"
	  "outboxd_ops_events_total{outcome=\"suppressed\"} %ld\n"
	  "outboxd_ops_events_total{outcome=\"dropped\"} %ld\n", atomic_load(&m.ops_stored),
	  atomic_load(&m.ops_suppressed), atomic_load(&m.ops_dropped));
	A("# HELP outboxd_otlp_spans_total Delivery-attempt spans for otlp_endpoint: exported, "
	  "dropped (export queue full), failed (the collector did not take them).\n"
	  "# TYPE outboxd_otlp_spans_total counter\n"
	  "outboxd_otlp_spans_total{outcome=\"exported\"} %ld\n"
	  "outboxd_otlp_spans_total{outcome=\"dropped\"} %ld\n"
	  "outboxd_otlp_spans_total{outcome=\"failed\"} %ld\n", atomic_load(&m.otlp_exported),
	  atomic_load(&m.otlp_dropped), atomic_load(&m.otlp_failed));
	A("# HELP outboxd_store_errors_total Store calls that failed.\n"
	  "# TYPE outboxd_store_errors_total counter\noutboxd_store_errors_total %ld\n",
	  atomic_load(&m.store_errors));
	return 0;
}

/* Kafka: produce and fatal errors, dead-lettered, consumed, the intake's pause and lag. */
static int render_kafka(char **out, size_t *len, size_t *cap)
{
	A("# HELP outboxd_kafka_produce_errors_total Kafka messages not acknowledged (attempts "
	  "and dead-letter publishes).\n# TYPE outboxd_kafka_produce_errors_total counter\n"
	  "outboxd_kafka_produce_errors_total %ld\n", atomic_load(&m.kafka_produce_errors));
	A("# HELP outboxd_kafka_fatal_errors_total Fatal errors of a Kafka client (librdkafka), "
	  "after which it was recreated, by client.\n"
	  "# TYPE outboxd_kafka_fatal_errors_total counter\n"
	  "outboxd_kafka_fatal_errors_total{client=\"producer\"} %ld\n"
	  "outboxd_kafka_fatal_errors_total{client=\"intake\"} %ld\n"
	  "outboxd_kafka_fatal_errors_total{client=\"dead-letter\"} %ld\n",
	  atomic_load(&m.kafka_fatal_producer), atomic_load(&m.kafka_fatal_intake),
	  atomic_load(&m.kafka_fatal_dead_letter));
	A("# HELP outboxd_kafka_dead_lettered_total Dead deliveries published to their Kafka "
	  "dead-letter topic (acknowledged).\n"
	  "# TYPE outboxd_kafka_dead_lettered_total counter\n"
	  "outboxd_kafka_dead_lettered_total %ld\n", atomic_load(&m.kafka_dead_lettered));
	A("# HELP outboxd_kafka_consumed_total Messages stored from kafka_intake topics.\n"
	  "# TYPE outboxd_kafka_consumed_total counter\noutboxd_kafka_consumed_total %ld\n"
	  "# HELP outboxd_kafka_undecodable_total Intake messages stored as dead deliveries "
	  "(undecodable).\n# TYPE outboxd_kafka_undecodable_total counter\n"
	  "outboxd_kafka_undecodable_total %ld\n"
	  "# HELP outboxd_kafka_intake_paused 1 while the intake waits for its backlog to "
	  "drain (kafka_max_backlog).\n# TYPE outboxd_kafka_intake_paused gauge\n"
	  "outboxd_kafka_intake_paused %d\n",
	  atomic_load(&m.kafka_consumed), atomic_load(&m.kafka_undecodable),
	  atomic_load(&m.kafka_paused));
	A("# HELP outboxd_kafka_consumer_lag Messages in a partition after the intake's "
	  "position.\n# TYPE outboxd_kafka_consumer_lag gauge\n");
	pthread_mutex_lock(&lag_mu);
	for (int i = 0; i < n_lags; i++) {
		if (appendf(out, len, cap, "outboxd_kafka_consumer_lag{topic=\"%s\",partition=\"%d\"} %lld\n",
			    lags[i].topic, lags[i].partition, lags[i].lag)) {
			pthread_mutex_unlock(&lag_mu);
			return -1;
		}
	}
	pthread_mutex_unlock(&lag_mu);
	return 0;
}

/* Each endpoint's flow control (docs/flow-control.md): limit, in flight, queued, latency,
 * cuts. */
static int render_endpoints(char **out, size_t *len, size_t *cap)
{
	static const char *const ep_series[] = {
		"# HELP outboxd_endpoint_concurrency_limit Requests this instance may have open to "
		"the endpoint at once: its adaptive limit (docs/flow-control.md).\n"
		"# TYPE outboxd_endpoint_concurrency_limit gauge\n",
		"# HELP outboxd_endpoint_in_flight Requests open to the endpoint now.\n"
		"# TYPE outboxd_endpoint_in_flight gauge\n",
		"# HELP outboxd_endpoint_queued Deliveries waiting for room under the endpoint's "
		"limit.\n# TYPE outboxd_endpoint_queued gauge\n",
		"# HELP outboxd_endpoint_latency_seconds Smoothed latency of the endpoint's recent "
		"answers.\n# TYPE outboxd_endpoint_latency_seconds gauge\n",
		"# HELP outboxd_endpoint_latency_min_seconds The endpoint's lowest smoothed latency "
		"seen: how fast it answers unloaded.\n"
		"# TYPE outboxd_endpoint_latency_min_seconds gauge\n",
		"# HELP outboxd_endpoint_limit_cuts_total Times the endpoint's limit was cut "
		"(timeouts, 429/503, refused connections, rising latency).\n"
		"# TYPE outboxd_endpoint_limit_cuts_total counter\n",
	};
	static const char *const ep_names[] = {
		"outboxd_endpoint_concurrency_limit", "outboxd_endpoint_in_flight",
		"outboxd_endpoint_queued", "outboxd_endpoint_latency_seconds",
		"outboxd_endpoint_latency_min_seconds", "outboxd_endpoint_limit_cuts_total",
	};
	pthread_mutex_lock(&ep_mu);
	int bad = 0;
	for (int k = 0; k < 6 && !bad; k++) {
		bad |= appendf(out, len, cap, "%s", ep_series[k]);
		for (size_t i = 0; i < n_eps && i < ENDPOINT_SERIES && !bad; i++) {
			const struct metrics_endpoint_view *e = &eps[i];
			if (k == 3 || k == 4) /* seconds */
				bad |= appendf(out, len, cap, "%s{endpoint=\"%s\"} %.6f\n", ep_names[k],
					       e->key, (k == 3 ? e->latency_us : e->latency_min_us) / 1e6);
			else /* counts, exact however large */
				bad |= appendf(out, len, cap, "%s{endpoint=\"%s\"} %lld\n", ep_names[k],
					       e->key, (long long)(k == 0 ? e->limit : k == 1 ? e->in_flight :
								   k == 2 ? e->queued : e->cuts));
		}
	}
	pthread_mutex_unlock(&ep_mu);
	return bad ? -1 : 0;
}

int metrics_render(char **out, size_t *len)
{
	size_t cap = 4096;
	*len = 0;
	*out = malloc(cap);
	if (!*out)
		return -1;
	(*out)[0] = '\0';
	if (render_rounds(out, len, &cap) || render_instance(out, len, &cap) ||
	    render_kafka(out, len, &cap) || render_endpoints(out, len, &cap))
		return -1;
	return 0;
}
