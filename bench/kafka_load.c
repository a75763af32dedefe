/* kafka_load.c: bench_kafka, the producer of bench/kafka.sh — N OutboxEvent envelopes
 * (plain protobuf, proto/outboxd/v1/outbox_event.proto) addressed to one HTTP endpoint, produced as fast as
 * librdkafka takes them, then flushed. Uses protobuf-c's code for the .proto directly,
 * not outboxd's encoder.
 *
 *   bench_kafka produce --brokers B --topic T --count N --endpoint URL [--payload-bytes 200]
 *
 * prints {"produced":N,"seconds":S} on stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <librdkafka/rdkafka.h>

#include "outboxd/v1/outbox_event.pb-c.h"

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long failed;

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	(void)rk;
	(void)opaque;
	if (m->err)
		failed++;
}

int main(int argc, char **argv)
{
	const char *brokers = NULL, *topic = NULL, *endpoint = NULL;
	long count = 0, payload_bytes = 200;
	char errstr[512];

	for (int i = 2; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--brokers") == 0)
			brokers = argv[i + 1];
		else if (strcmp(argv[i], "--topic") == 0)
			topic = argv[i + 1];
		else if (strcmp(argv[i], "--endpoint") == 0)
			endpoint = argv[i + 1];
		else if (strcmp(argv[i], "--count") == 0)
			count = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--payload-bytes") == 0)
			payload_bytes = atol(argv[i + 1]);
	}
	if (argc < 2 || strcmp(argv[1], "produce") != 0 || !brokers || !topic || !endpoint ||
	    count < 1 || payload_bytes < 16 || payload_bytes > 65536) {
		fprintf(stderr, "usage: bench_kafka produce --brokers B --topic T --count N "
				"--endpoint URL [--payload-bytes 200]\n");
		return 2;
	}
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	if (rd_kafka_conf_set(conf, "bootstrap.servers", brokers, errstr, sizeof(errstr)) ||
	    rd_kafka_conf_set(conf, "linger.ms", "5", errstr, sizeof(errstr)) ||
	    rd_kafka_conf_set(conf, "queue.buffering.max.messages", "1000000", errstr,
			      sizeof(errstr))) {
		fprintf(stderr, "bench_kafka: %s\n", errstr);
		return 1;
	}
	rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
	rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (!rk) {
		fprintf(stderr, "bench_kafka: %s\n", errstr);
		return 1;
	}
	char *payload = malloc((size_t)payload_bytes + 1), id[64];
	int head = snprintf(payload, (size_t)payload_bytes + 1, "{\"n\":%ld,\"pad\":\"", 0L);
	memset(payload + head, 'x', (size_t)(payload_bytes - head - 2));
	memcpy(payload + payload_bytes - 2, "\"}", 2);
	size_t cap = 4096 + (size_t)payload_bytes;
	unsigned char *buf = malloc(cap);
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
	double t0 = now_s();
	for (long i = 0; i < count; i++) {
		Outboxd__V1__Event ev = OUTBOXD__V1__EVENT__INIT;
		Outboxd__V1__OutboxEvent m = OUTBOXD__V1__OUTBOX_EVENT__INIT;
		snprintf(id, sizeof(id), "bench-%ld-%ld", (long)t0, i);
		ev.id = id;
		ev.type = "bench.kafka";
		ev.payload.data = (uint8_t *)payload;
		ev.payload.len = (size_t)payload_bytes;
		m.event = &ev;
		m.endpoint = (char *)endpoint;
		m.payload_type = OUTBOXD__V1__PAYLOAD_TYPE__PAYLOAD_TYPE_JSON;
		size_t len = outboxd__v1__outbox_event__pack(&m, buf);
		while (rd_kafka_produce(rkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, buf, len,
					id, strlen(id), NULL) == -1) {
			if (rd_kafka_last_error() != RD_KAFKA_RESP_ERR__QUEUE_FULL) {
				fprintf(stderr, "bench_kafka: %s\n", rd_kafka_err2str(rd_kafka_last_error()));
				return 1;
			}
			rd_kafka_poll(rk, 10);
		}
		rd_kafka_poll(rk, 0);
	}
	rd_kafka_flush(rk, 60000);
	double t1 = now_s();
	printf("{\"produced\":%ld,\"failed\":%ld,\"seconds\":%.3f}\n", count - failed, failed, t1 - t0);
	rd_kafka_topic_destroy(rkt);
	rd_kafka_destroy(rk);
	free(payload);
	free(buf);
	return failed ? 1 : 0;
}
