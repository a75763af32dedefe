/* model.h: the plain data of outboxd — events, subscriptions, deliveries, attempts.
 *
 * No I/O and no library types here: every layer (store, API, dispatcher) speaks in these
 * structs. Names and statuses are a contract (docs/contracts.md). */
#ifndef OUTBOXD_CORE_MODEL_H
#define OUTBOXD_CORE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#define UUID_STR_LEN 37 /* 36 characters and the NUL */

/* Delivery status: NEW, PROCESSED, FAILED. A FAILED delivery with no
 * next attempt is dead-lettered (in the DLQ). */
enum delivery_status {
	DELIVERY_NEW = 0,
	DELIVERY_PROCESSED = 1,
	DELIVERY_FAILED = 2,
};

const char *delivery_status_name(enum delivery_status s);
/* Returns 0 and sets *out when name is a status name, -1 otherwise. */
int delivery_status_parse(const char *name, enum delivery_status *out);

/* Which retry layer an attempt belongs to. */
enum attempt_kind {
	ATTEMPT_IMMEDIATE = 0,
	ATTEMPT_SCHEDULED = 1,
	ATTEMPT_MANUAL = 2,
};

const char *attempt_kind_name(enum attempt_kind k);
/* The kind named name ("immediate", "scheduled", "manual"), as the store keeps it; an
 * unknown or NULL name reads as scheduled (a stored row is never refused). */
enum attempt_kind attempt_kind_parse(const char *name);

/* Per-key ordering of a subscription's deliveries. With a key ordering, the
 * deliveries of events with the same partition_key go one at a time in ingest order; a
 * dead one blocks the later ones of its key (KEY_BLOCK) or is passed over (KEY_SKIP).
 * Stored as a column of the subscription, which the store's claim reads. */
enum delivery_ordering {
	ORDERING_NONE = 0,
	ORDERING_KEY_BLOCK = 1,
	ORDERING_KEY_SKIP = 2,
};

enum payload_format {
	PAYLOAD_JSON = 0,
	PAYLOAD_BINARY = 1,
	PAYLOAD_ENVELOPE = 2,
};

/* Scheduled retry policy: a fixed interval, a linear step, or exponential backoff. */
enum retry_policy_kind {
	RETRY_FIXED = 0,
	RETRY_LINEAR = 1,
	RETRY_EXPONENTIAL = 2,
};

struct retry_policy {
	int immediate;             /* tries in the first round, >= 1 (default 3) */
	int64_t immediate_delay_ms; /* stagger between immediate tries (grows linearly) */
	int64_t immediate_timeout_ms; /* per-try timeout in the first round (default 1 s) */
	enum retry_policy_kind policy;
	int64_t interval_ms;       /* fixed: the interval; linear: the step (default 3 s) */
	int64_t min_delay_ms;      /* exponential: random window's lower end (default 10 s) */
	int64_t max_delay_ms;      /* exponential: upper bound / cap (default 60 s) */
	double factor;             /* exponential growth factor */
	int max_retries;           /* scheduled retries; 0 = forever */
	int max_retries_auto;      /* 1: nobody set max_retries, so it follows the policy
	                              (retry_policy_settle): 3, or 5 for exponential */
	int64_t timeout_ms;        /* timeout of a scheduled or manual try (default 5 s) */
	double jitter;             /* fixed/linear: up to this fraction of a delay is drawn off
	                              at random, 0..1 (default 0) */
	int64_t retry_after_max_ms; /* longest Retry-After (429/503) honoured (default 1 h) */
	/* Statuses 400..599 that dead-letter at once (bit code - 400); a bitmap, so a
	 * policy stays a plain value that copies with '='. */
	uint64_t permanent[4];
	/* (a new field goes into retry_policy_same too) */
};

/* The default retry policy, the reference architecture's (docs/reference.md). */
void retry_policy_defaults(struct retry_policy *p);

/* Scheduled retries when nobody set max_retries: 3 for fixed and linear (the scheduled
 * retry's maximum), 5 for exponential (backoff's MaxNumberOfRetries): both the reference
 * architecture's, docs/reference.md. */
#define RETRY_DEFAULT_MAX_RETRIES 3
#define RETRY_DEFAULT_MAX_RETRIES_EXPONENTIAL 5

/* With max_retries_auto, sets max_retries to its policy's default (above). Called once
 * the policy is known, wherever a policy is read. */
void retry_policy_settle(struct retry_policy *p);

/* 1 when a and b are the same policy, field by field (never memcmp: padding). */
int retry_policy_same(const struct retry_policy *a, const struct retry_policy *b);

/* Circuit breaker of a subscription (error-rate breaking with delay actions;
 * core/breaker.h has the state machine). */
struct circuit_breaker_config {
	int enabled;               /* default 1 */
	int max_errors;            /* failed rounds within failure_window that open it (1000) */
	int64_t failure_window_ms; /* FailureCountIntervalMinutes (3 min) */
	int max_delay_actions;     /* delay actions a delivery takes before the DLQ (5) */
};

/* The default circuit breaker, the reference architecture's (docs/reference.md). */
void circuit_breaker_defaults(struct circuit_breaker_config *c);

enum auth_type {
	AUTH_NONE = 0,
	AUTH_BASIC,
	AUTH_BEARER,
	AUTH_API_KEY,
	AUTH_QUERY,
	AUTH_OAUTH2,
};

/* OAuth2 (RFC 6749) grant used to obtain the bearer token of an oauth2 subscription. */
enum oauth2_grant {
	OAUTH2_CLIENT_CREDENTIALS = 0,
	OAUTH2_PASSWORD = 1,
};

/* How the client authenticates to the token endpoint (RFC 6749 §2.3.1). */
enum oauth2_client_auth {
	OAUTH2_AUTH_BASIC = 0,   /* Authorization: Basic base64(id:secret) (the default) */
	OAUTH2_AUTH_BODY = 1,    /* client_id and client_secret in the form body */
};

/* auth.type oauth2: where and how to get a token. Strings owned; NULL when not set. */
struct oauth2_params {
	enum oauth2_grant grant;
	enum oauth2_client_auth client_auth;
	char *token_url;
	char *client_id;
	char *client_secret;
	char *scope;
	char *audience;
	char *username;          /* password grant */
	char *password;          /* password grant */
};

struct header_kv {
	char *name;
	char *value;
	int secret;   /* a credential: masked in reads, redacted from causes (sub_codec.h) */
};

struct payload_filter;

/* A subscription as the dispatcher and fan-out use it. Parsed from the stored JSON
 * configuration (see core/sub_codec.c); owns every string it points to. */
struct subscription {
	char id[UUID_STR_LEN];
	char *name;
	char **event_types; /* glob patterns, n_event_types of them */
	size_t n_event_types;
	struct payload_filter *filter; /* which events of those types it gets by their
	                                  payload (core/payload_filter.h); NULL: all */
	char *endpoint;
	enum payload_format payload_format;
	enum auth_type auth_type;
	char *auth_user;    /* basic: username */
	char *auth_secret;  /* basic: password; bearer: token; api_key/query: value */
	char *auth_name;    /* api_key: header name; query: parameter name */
	struct oauth2_params oauth2; /* oauth2 */
	struct header_kv *headers;
	size_t n_headers;
	char *secret;       /* Standard Webhooks signing secret (whsec_...) or NULL */
	char *previous_secret;         /* the secret before a rotation, or NULL ... */
	int64_t previous_secret_until; /* ... also signed with until then (ms since the epoch) */
	char *tls_ca_file;     /* CA bundle that verifies the endpoint instead of the system's */
	char *tls_client_cert; /* client certificate (PEM) for mutual TLS */
	char *tls_client_key;  /* its private key (PEM); NULL when in the certificate file */
	struct retry_policy retry;
	struct circuit_breaker_config breaker;
	int max_in_flight;     /* requests to this subscription at once, 0 = no limit */
	int concurrency;       /* a fixed number of its requests open at once, instead of the
	                          endpoint's adaptive limit (docs/flow-control.md); 0 = adapt */
	double rate_limit;     /* requests per second (token bucket), 0 = no limit */
	int enabled;
	enum delivery_ordering ordering;
	int64_t disable_after_ms;  /* failing this long without a success disables it;
	                              0 = never, -1 = the setting disable_after */
	char *disabled_reason;     /* why outboxd disabled it (disable_after), or NULL */
	char *origin;          /* NULL for an operator's subscription; "kafka_envelope" for
	                          one outboxd derived from an envelope's target: it matches
	                          no event type (fan-out never picks it) */
	int64_t created_at;
	int64_t updated_at;
	char *stored;          /* the config as the store holds it (sealed when it has a key),
	                          for a reload to tell an unchanged row from a changed one
	                          without opening and decoding it (store_subs_load); NULL
	                          when the subscription did not come from the store */
	int refs;              /* holders besides the first: sets share the subscriptions a
	                          reload found unchanged (subscription_hold/_put) */
};

void oauth2_params_free(struct oauth2_params *p); /* frees members, zeroes p */
void subscription_free(struct subscription *s);  /* frees members and s itself */
void subscription_clear(struct subscription *s); /* frees members, zeroes s */
/* One more holder of s; and one fewer, the last freeing it (subscription_free). Any
 * thread: sets that share a subscription are released on different threads. */
void subscription_hold(struct subscription *s);
void subscription_put(struct subscription *s);

/* A subscription as the store hands it out: the configuration is the JSON document the
 * API accepted (core/sub_codec.h turns it into a struct subscription). Secrets are in
 * clear here — the store seals config at rest and opens it on the way out
 * (store/secrets.c), the API masks them in its answers. Owns name and config. */
struct sub_row {
	char id[UUID_STR_LEN];
	char *name;
	char *config;               /* JSON text */
	int enabled;
	int ordering;               /* enum delivery_ordering, a column the claim reads */
	int64_t created_at;
	int64_t updated_at;
};

#endif
