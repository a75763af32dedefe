/* model.h: the plain data of outboxd — events, subscriptions, deliveries, attempts.
 *
 * No I/O and no library types here: every layer (store, API, dispatcher) speaks in these
 * structs. Names and statuses follow DESIGN.md §2 (a contract). */
#ifndef OUTBOXD_CORE_MODEL_H
#define OUTBOXD_CORE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define UUID_STR_LEN 37 /* 36 characters and the NUL */

/* Delivery status (seed 000/002): NEW, PROCESSED, FAILED. A FAILED delivery with no
 * next attempt is dead-lettered (in the DLQ). */
enum delivery_status {
	DELIVERY_NEW = 0,
	DELIVERY_PROCESSED = 1,
	DELIVERY_FAILED = 2,
};

const char *delivery_status_name(enum delivery_status s);
/* Returns 0 and sets *out when name is a status name, -1 otherwise. */
int delivery_status_parse(const char *name, enum delivery_status *out);

/* Which retry layer an attempt belongs to (DESIGN §3). */
enum attempt_kind {
	ATTEMPT_IMMEDIATE = 0,
	ATTEMPT_SCHEDULED = 1,
	ATTEMPT_MANUAL = 2,
};

const char *attempt_kind_name(enum attempt_kind k);

enum payload_format {
	PAYLOAD_JSON = 0,
	PAYLOAD_BINARY = 1,
};

/* Scheduled retry policy (seed 000 fixed interval; seed 004 linear/backoff). */
enum retry_policy_kind {
	RETRY_FIXED = 0,
	RETRY_LINEAR = 1,
	RETRY_EXPONENTIAL = 2,
};

struct retry_policy {
	int immediate;             /* tries in the first round, >= 1 (seed 001: 3) */
	int64_t immediate_delay_ms; /* stagger between immediate tries (grows linearly) */
	int64_t immediate_timeout_ms; /* per-try timeout in the first round (seed 001: 1 s) */
	enum retry_policy_kind policy;
	int64_t interval_ms;       /* fixed: the interval; linear: the step (seed 000: 3 s) */
	int64_t min_delay_ms;      /* exponential: random window lower bound (seed 004: 10 s) */
	int64_t max_delay_ms;      /* exponential: upper bound / cap (seed 004: 60 s) */
	double factor;             /* exponential growth factor */
	int max_retries;           /* scheduled retries; 0 = forever (seed 002) */
	int64_t timeout_ms;        /* per-try timeout for scheduled and manual tries (seed 000: 5 s) */
};

/* Seed defaults for a retry policy. */
void retry_policy_defaults(struct retry_policy *p);

enum auth_type {
	AUTH_NONE = 0,
	AUTH_BASIC,
	AUTH_BEARER,
	AUTH_API_KEY,
	AUTH_QUERY,
	AUTH_OAUTH2,
};

struct header_kv {
	char *name;
	char *value;
};

/* A subscription as the dispatcher and fan-out use it. Parsed from the stored JSON
 * configuration (see api/subscription_codec.c); owns every string it points to. */
struct subscription {
	char id[UUID_STR_LEN];
	char *name;
	char **event_types; /* glob patterns, n_event_types of them */
	size_t n_event_types;
	char *endpoint;
	enum payload_format payload_format;
	enum auth_type auth_type;
	char *auth_user;    /* basic: username */
	char *auth_secret;  /* basic: password; bearer: token; api_key/query: value */
	char *auth_name;    /* api_key: header name; query: parameter name */
	struct header_kv *headers;
	size_t n_headers;
	char *secret;       /* Standard Webhooks signing secret (whsec_...) or NULL */
	struct retry_policy retry;
	int enabled;
	int64_t created_at;
	int64_t updated_at;
};

void subscription_free(struct subscription *s); /* frees members and s itself */

#endif
