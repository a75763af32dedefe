/* harness_kafka.h: a Kafka for end-to-end tests — tests/support/kafka_mock (librdkafka's
 * mock cluster on local TCP ports, path in $KAFKA_MOCK_BIN) and kcat as the outside
 * producer and consumer. Nothing here links librdkafka: tests reach Kafka only over the
 * protocol, as a user does.
 *
 * The mock is killed when the test process dies (PR_SET_PDEATHSIG). Not thread-safe. */
#ifndef OUTBOXD_TESTS_HARNESS_KAFKA_H
#define OUTBOXD_TESTS_HARNESS_KAFKA_H

#include <stddef.h>

struct kafka_mock;

/* Starts the mock with n brokers and waits until it listens. NULL on failure (printed). */
struct kafka_mock *kafka_mock_start(int brokers);
/* "127.0.0.1:PORT,..." (borrowed from k). */
const char *kafka_mock_bootstrap(const struct kafka_mock *k);
/* Sends one command line (printf format: "topic orders 3", "down 1", "up 1") and waits
 * for its answer. Returns 0 on "ok", -1 otherwise (printed). */
int kafka_mock_command(struct kafka_mock *k, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void kafka_mock_stop(struct kafka_mock *k);

/* Produces one message with kcat (key and headers optional: headers is a NULL-terminated
 * list of "name=value"). The value is binary-safe: kcat -P sends a file argument as one
 * message. Returns 0, or -1 (kcat's exit status printed). */
int kcat_produce(const char *bootstrap, const char *topic, const char *key, const void *value,
		 size_t len, const char *const *headers);
/* n messages in one kcat run, one file each (binary-safe), in order; keys not supported
 * (kcat -k applies to every file): pass NULL. */
int kcat_produce_many(const char *bootstrap, const char *topic, size_t n,
		      const void *const *values, const size_t *lens, const char *const *keys);

/* A message read back, bytes as they are. value is NUL-terminated (len excludes it);
 * headers is "name=value,name=value" (kcat's %h). */
struct kcat_msg {
	char *key;                 /* "" when none */
	char *value;
	size_t len;
	char *headers;
	int partition;
	long offset;
};
/* Reads up to n messages of topic from the beginning (kcat -C -J -e), again and again
 * until n are there or timeout_ms passed.
 * *out is returned (kcat_msgs_free). Returns 0
 * when kcat ran, whatever it found (*got says how many); -1 when it could not run. */
int kcat_consume(const char *bootstrap, const char *topic, size_t n, int timeout_ms,
		 struct kcat_msg **out, size_t *got);
void kcat_msgs_free(struct kcat_msg *m, size_t n);

#endif
