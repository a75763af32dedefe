/* sink_caps.h: what each endpoint scheme takes — the delivery targets as the subscription
 * rules see them.
 *
 * A subscription's endpoint scheme picks the member of the sink family that delivers to
 * it (deliver/sink.h: http:// and https:// the HTTP member, kafka:// the Kafka member).
 * Members differ in what a subscription may ask of them: a Kafka message has no TLS files
 * of its own, no auth and no signature. Each scheme has one row here, with the
 * capabilities (SINK_CAN_*) its member supports and the form of its address, so the
 * subscription codec (core/sub_codec.c) refuses an option the member would ignore (422
 * naming the field) instead of storing it.
 *
 * The rows are the subscription rules' copy of what the members declare themselves
 * (struct sink_type in deliver/sink.h): core cannot ask deliver, which sits above it, so
 * the registry (deliver/sink.c, sink_type_check) compares the two at start and
 * tests/unit/deliver/test_sink.c in every test run; neither passes while they differ.
 *
 * Pure: no I/O, no allocation. */
#ifndef OUTBOXD_CORE_SINK_CAPS_H
#define OUTBOXD_CORE_SINK_CAPS_H

#include <stddef.h>

#include "core/model.h"

/* What a member can do with a subscription's options. A subscription may set an option
 * only when its endpoint's member has the option's bit. */
enum sink_cap {
	SINK_CAN_TIMEOUT = 1u << 0,     /* timeout, retry.timeout: an attempt ends at its timeout */
	SINK_CAN_HEADERS = 1u << 1,     /* headers: sent with every attempt */
	SINK_CAN_SIGN = 1u << 2,        /* secret, secret_grace: Standard Webhooks signatures */
	SINK_CAN_TLS = 1u << 3,         /* tls: the subscription's CA bundle and client
	                                   certificate */
	SINK_CAN_ORDERING = 1u << 4,    /* ordering: a key's attempts reach the target one at a
	                                   time, each only after the one before ended */
	SINK_CAN_ENVELOPE = 1u << 5,    /* payload_format envelope: the event as an OutboxEvent */
	SINK_CAN_AUTH_BASIC = 1u << 8,  /* auth, one bit per type (auth type none needs none) */
	SINK_CAN_AUTH_BEARER = 1u << 9,
	SINK_CAN_AUTH_API_KEY = 1u << 10,
	SINK_CAN_AUTH_QUERY = 1u << 11,
	SINK_CAN_AUTH_OAUTH2 = 1u << 12,
};

#define SINK_CAN_AUTH_ANY                                                                     \
	(SINK_CAN_AUTH_BASIC | SINK_CAN_AUTH_BEARER | SINK_CAN_AUTH_API_KEY |                 \
	 SINK_CAN_AUTH_QUERY | SINK_CAN_AUTH_OAUTH2)

/* One endpoint scheme. */
struct sink_scheme {
	const char *scheme;     /* lowercase, without "://": "https" */
	const char *member;     /* the sink family member that delivers to it (sink_type.name) */
	unsigned supports;      /* SINK_CAN_* */
	const char *instead;    /* what to do instead, said when an option of instead_for is
	                           refused ("Kafka credentials go in the kafka_config setting");
	                           NULL: the option's usual advice */
	unsigned instead_for;
	/* 1 when address (the endpoint after "scheme://") is a valid one; strict: new input
	 * (a stored endpoint loads under the rules it was written with). Else 0 with why. */
	int (*address_valid)(const char *address, int strict, const char **why);
};

/* The schemes, in the order the API's messages list them; sink_schemes_n of them. */
extern const struct sink_scheme sink_schemes[];
extern const size_t sink_schemes_n;

/* The row of endpoint's scheme (case-insensitive, "scheme://..."), NULL when no member
 * delivers there. */
const struct sink_scheme *sink_scheme_of(const char *endpoint);

/* The row of a scheme given alone ("kafka"), NULL when none. */
const struct sink_scheme *sink_scheme_named(const char *scheme);

/* The capability an auth type needs (0 for AUTH_NONE). */
unsigned sink_cap_of_auth(enum auth_type type);

/* Why row's member refuses cap (one bit; for auth, the type's bit), as the text after
 * "FIELD: " of a 422: "kafka:// endpoints take no auth; Kafka credentials go in the
 * kafka_config setting". Written into out (outlen bytes). */
void sink_caps_refusal(const struct sink_scheme *row, unsigned cap, char *out, size_t outlen);

/* "http://, https:// or kafka://" into out: the schemes an endpoint may have. */
void sink_schemes_list(char *out, size_t outlen);

#endif
