/* check.h: the Kafka settings checked without a broker, for `outboxd check-config` and
 * the start of `outboxd serve` (librdkafka stays behind this header). */
#ifndef OUTBOXD_KAFKA_CHECK_H
#define OUTBOXD_KAFKA_CHECK_H

#include <stddef.h>

/* 0 when librdkafka accepts bootstrap.servers = brokers and every property of
 * kafka_config ("k=v;k=v"); -1 with a message naming the refused property (never its
 * value, which may be a password) in err. Connects to nothing. */
int kafka_properties_check(const char *brokers, const char *properties, char *err,
			   size_t errlen);

#endif
