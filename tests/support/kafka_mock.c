/* kafka_mock.c: librdkafka's mock cluster as a Kafka server on local TCP ports, for the
 * end-to-end tests and the Kafka benchmark.
 *
 * The mock speaks the real Kafka protocol (produce with idempotence, fetch, consumer
 * groups with offset commits), so outboxd and kcat talk to it like to a broker. It keeps
 * everything in memory, so it outlives the daemons a test kills and restarts, committed
 * offsets included.
 *
 *   kafka_mock [--brokers N] [--topic NAME:PARTITIONS ...]
 *
 * prints `bootstrap=HOST:PORT,...` on stdout once it listens, then reads one command per
 * line on stdin and answers `ok` or `error: ...`:
 *   topic NAME PARTITIONS   create a topic (replication factor 1)
 *   down ID / up ID         take broker ID (1..N) down or bring it back: down closes its
 *                           connections and refuses new ones, so clients see transport
 *                           errors until `up`
 *   produce-error CODE [N]  the next N (1) Produce requests fail with Kafka error CODE
 *                           (45, OUT_OF_ORDER_SEQUENCE_NUMBER: fatal to an idempotent
 *                           producer whose first request in flight it answers)
 *   quit                    exit (so does EOF on stdin, and SIGTERM)
 * Topics not created first are created on first use by a producer or a consumer's
 * metadata request, with the mock's default partition count. With KAFKA_MOCK_DEBUG set
 * (librdkafka debug contexts, e.g. `mock`) the cluster logs every request and every
 * consumer group change on stderr, to see what a client did. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int create_topic(rd_kafka_mock_cluster_t *mc, const char *name, int partitions)
{
	rd_kafka_resp_err_t err = rd_kafka_mock_topic_create(mc, name, partitions, 1);
	if (err) {
		printf("error: topic %s: %s\n", name, rd_kafka_err2str(err));
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int brokers = 3;
	char errstr[512], line[512];
	rd_kafka_conf_t *conf = rd_kafka_conf_new();

	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], "--brokers") == 0 && i + 1 < argc)
			brokers = atoi(argv[++i]);
	if (brokers < 1 || brokers > 9) {
		fprintf(stderr, "kafka_mock: --brokers must be 1 to 9\n");
		return 2;
	}
	/* the handle only hosts the cluster: it sends nothing itself */
	rd_kafka_conf_set(conf, "log_level", "3", errstr, sizeof(errstr));
	if (getenv("KAFKA_MOCK_DEBUG")) {
		rd_kafka_conf_set(conf, "debug", getenv("KAFKA_MOCK_DEBUG"), errstr, sizeof(errstr));
		rd_kafka_conf_set(conf, "log_level", "7", errstr, sizeof(errstr));
	}
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (!rk) {
		fprintf(stderr, "kafka_mock: %s\n", errstr);
		return 1;
	}
	rd_kafka_mock_cluster_t *mc = rd_kafka_mock_cluster_new(rk, brokers);
	if (!mc) {
		fprintf(stderr, "kafka_mock: cannot create the mock cluster\n");
		rd_kafka_destroy(rk);
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--topic") == 0 && i + 1 < argc) {
			char name[256];
			int parts = 1;
			const char *spec = argv[++i], *colon = strchr(spec, ':');
			snprintf(name, sizeof(name), "%.*s", colon ? (int)(colon - spec) : 255, spec);
			if (colon)
				parts = atoi(colon + 1);
			if (create_topic(mc, name, parts > 0 ? parts : 1))
				return 1;
		}
	}
	printf("bootstrap=%s\n", rd_kafka_mock_cluster_bootstraps(mc));

	while (!stop && fgets(line, sizeof(line), stdin)) {
		char name[256];
		int a = 0, count = 1;
		line[strcspn(line, "\r\n")] = '\0';
		if (strcmp(line, "quit") == 0)
			break;
		if (sscanf(line, "topic %255s %d", name, &a) == 2) {
			if (create_topic(mc, name, a > 0 ? a : 1) == 0)
				printf("ok\n");
		} else if (sscanf(line, "down %d", &a) == 1 && a >= 1 && a <= brokers) {
			rd_kafka_resp_err_t err = rd_kafka_mock_broker_set_down(mc, a);
			printf(err ? "error: %s\n" : "ok\n", rd_kafka_err2str(err));
		} else if (sscanf(line, "produce-error %d %d", &a, &count) >= 1 && a > 0) {
			rd_kafka_resp_err_t errs[16];
			if (count < 1 || count > 16)
				count = 1;
			for (int i = 0; i < count; i++)
				errs[i] = (rd_kafka_resp_err_t)a;
			rd_kafka_mock_push_request_errors_array(mc, 0 /* Produce */, (size_t)count,
								errs);
			printf("ok\n");
		} else if (sscanf(line, "up %d", &a) == 1 && a >= 1 && a <= brokers) {
			rd_kafka_resp_err_t err = rd_kafka_mock_broker_set_up(mc, a);
			printf(err ? "error: %s\n" : "ok\n", rd_kafka_err2str(err));
		} else {
			printf("error: unknown command \"%s\" (topic NAME N, down ID, up ID, "
			       "produce-error CODE [N], quit)\n",
			       line);
		}
	}
	rd_kafka_mock_cluster_destroy(mc);
	rd_kafka_destroy(rk);
	return 0;
}
