/* test_metrics_state.c: what core/metrics keeps for GET /v1/stats beyond its labelled
 * series: circuit states (metrics_circuit, metrics_circuit_state) for any number of
 * subscriptions, beyond the 1,024 with series in /metrics, an open circuit reading
 * half-open once its window is over, a closed one forgotten; and the endpoints' flow
 * control (metrics_endpoint, _get, _gone) for any number of endpoints, /metrics showing
 * the first 256; the Kafka intake's lag per partition, a revoked partition's gone at the
 * next look. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/metrics.h"

#define SUBS 3000

static void sub_id(int i, char out[40])
{
	snprintf(out, 40, "0190a0b0-0000-7000-8000-%012d", i);
}

/* 3,000 subscriptions publish a breaker each (more than the metrics' 1,024 labelled
 * slots); every third is open: each reads back as published, in any order. */
static void test_many_subscriptions(void **state)
{
	char id[40];
	int64_t now = 1000000;

	for (int i = SUBS - 1; i >= 0; i--) {
		sub_id(i, id);
		metrics_circuit(id, i % 3 == 0 ? 1 : 0, i % 3 == 0 ? now + 60000 : 0);
	}
	for (int i = 0; i < SUBS; i++) {
		sub_id(i, id);
		assert_int_equal(metrics_circuit_state(id, now), i % 3 == 0 ? 1 : 0);
	}
	/* the last one published, far beyond the labelled slots, closes and reopens */
	sub_id(SUBS - 1, id);
	metrics_circuit(id, 1, now + 1000);
	assert_int_equal(metrics_circuit_state(id, now), 1);
	assert_int_equal(metrics_circuit_state(id, now + 1000), 2); /* its window is over */
	metrics_circuit(id, 2, 0);
	assert_int_equal(metrics_circuit_state(id, now), 2);
	metrics_circuit(id, 0, 0);
	assert_int_equal(metrics_circuit_state(id, now), 0);
	/* closing every open one leaves none open */
	for (int i = 0; i < SUBS; i += 3) {
		sub_id(i, id);
		metrics_circuit(id, 0, 0);
	}
	for (int i = 0; i < SUBS; i++) {
		sub_id(i, id);
		assert_int_equal(metrics_circuit_state(id, now), 0);
	}
}

static void ep_key(int i, char out[64])
{
	snprintf(out, 64, "host%04d.example:443#%08x", i, (unsigned)i * 2654435761u);
}

/* 1,000 endpoints, published in reverse: each read back; gone ones are gone; the list
 * copies the first by key; /metrics has series for 256 of them. */
static void test_many_endpoints(void **state)
{
	char key[64];
	struct metrics_endpoint_view v;

	for (int i = 999; i >= 0; i--) {
		ep_key(i, key);
		metrics_endpoint(key, i + 1, i % 7, i % 5, 1000, 2000 + i, i);
	}
	assert_int_equal(metrics_endpoint_count(), 1000);
	for (int i = 0; i < 1000; i++) {
		ep_key(i, key);
		assert_int_equal(metrics_endpoint_get(key, &v), 0);
		assert_string_equal(v.key, key);
		assert_int_equal(v.limit, i + 1);
		assert_int_equal(v.latency_us, 2000 + i);
	}
	ep_key(999, key);
	metrics_endpoint(key, 5, 0, 0, 1000, 1000, 1); /* an update, not a second one */
	assert_int_equal(metrics_endpoint_count(), 1000);
	assert_int_equal(metrics_endpoint_get(key, &v), 0);
	assert_int_equal(v.limit, 5);

	/* the busiest first: 6 open and 4 waiting is the most (i = 34 mod 35), ties by key;
	 * then one far down the keys gets busier than all */
	struct metrics_endpoint_view *first = calloc(10, sizeof(*first));
	assert_int_equal(metrics_endpoints(first, 10), 10);
	for (int i = 0; i < 10; i++) {
		ep_key(34 + 35 * i, key);
		assert_string_equal(first[i].key, key);
		assert_int_equal(first[i].in_flight + first[i].queued, 10);
	}
	ep_key(997, key);
	metrics_endpoint(key, 64, 40, 3, 1000, 2000, 0);
	assert_int_equal(metrics_endpoints(first, 10), 10);
	assert_string_equal(first[0].key, key);
	ep_key(34, key);
	assert_string_equal(first[1].key, key);
	free(first);

	char *text = NULL;
	size_t len = 0;
	assert_int_equal(metrics_render(&text, &len), 0);
	int series = 0;
	for (const char *p = text; (p = strstr(p, "outboxd_endpoint_in_flight{")); p++)
		series++;
	free(text);
	assert_int_equal(series, 256);

	for (int i = 0; i < 1000; i += 2) {
		ep_key(i, key);
		metrics_endpoint_gone(key);
	}
	assert_int_equal(metrics_endpoint_count(), 500);
	for (int i = 0; i < 1000; i++) {
		ep_key(i, key);
		assert_int_equal(metrics_endpoint_get(key, &v), i % 2 ? 0 : -1);
	}
	for (int i = 1; i < 1000; i += 2) {
		ep_key(i, key);
		metrics_endpoint_gone(key);
	}
	assert_int_equal(metrics_endpoint_count(), 0);
	metrics_endpoint_gone("never.example:443#0"); /* nothing to remove */
}

/* The value of the lag series of (topic, partition) in a /metrics render, -1: none. */
static long long lag_of(const char *topic, int partition)
{
	char *text = NULL, series[320];
	size_t len = 0;
	long long v = -1;
	assert_int_equal(metrics_render(&text, &len), 0);
	snprintf(series, sizeof(series), "outboxd_kafka_consumer_lag{topic=\"%s\",partition=\"%d\"} ",
		 topic, partition);
	const char *p = strstr(text, series);
	if (p)
		v = atoll(p + strlen(series));
	free(text);
	return v;
}

/* Each look at the assignment names its partitions; one it does not name again (revoked)
 * has no lag any more; one whose lag could not be read keeps its last. */
static void test_lag_follows_the_assignment(void **state)
{
	char long_topic[250];
	memset(long_topic, 't', sizeof(long_topic) - 1);
	long_topic[sizeof(long_topic) - 1] = '\0';

	metrics_kafka_lag_round();
	metrics_kafka_lag("orders", 0, 5);
	metrics_kafka_lag("orders", 1, 7);
	metrics_kafka_lag(long_topic, 3, 2); /* a name of 249 characters, whole */
	metrics_kafka_lag_sweep();
	assert_int_equal(lag_of("orders", 0), 5);
	assert_int_equal(lag_of("orders", 1), 7);
	assert_int_equal(lag_of(long_topic, 3), 2);

	metrics_kafka_lag_round();
	metrics_kafka_lag("orders", 0, 6);
	metrics_kafka_lag_keep("orders", 1); /* not read this time: stays */
	metrics_kafka_lag_sweep();
	assert_int_equal(lag_of("orders", 0), 6);
	assert_int_equal(lag_of("orders", 1), 7);
	assert_int_equal(lag_of(long_topic, 3), -1); /* revoked */

	metrics_kafka_lag_round();
	metrics_kafka_lag("orders", 0, 1);
	metrics_kafka_lag_sweep();
	assert_int_equal(lag_of("orders", 0), 1);
	assert_int_equal(lag_of("orders", 1), -1);

	metrics_kafka_lag_round(); /* nothing assigned */
	metrics_kafka_lag_sweep();
	assert_int_equal(lag_of("orders", 0), -1);
}

static void test_unknown_and_null(void **state)
{
	assert_int_equal(metrics_circuit_state("0190a0b0-0000-7000-8000-999999999999", 0), 0);
	assert_int_equal(metrics_circuit_state(NULL, 0), 0);
	metrics_circuit(NULL, 1, 0); /* ignored */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_many_subscriptions),
		cmocka_unit_test(test_many_endpoints),
		cmocka_unit_test(test_lag_follows_the_assignment),
		cmocka_unit_test(test_unknown_and_null),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
