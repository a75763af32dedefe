/* config.c: the settings table and its parsing (flags > environment > file > defaults).
 * Unknown keys and bad values stop the start with a message naming the key. */
#include "core/config.h"

#include <ctype.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "core/model.h"
#include "core/retry.h"
#include "core/secretbox.h"
#include "core/ssrf.h"
#include "util/duration.h"

#define S(field) offsetof(struct config, field)

const struct config_setting config_settings[] = {
	{"db", "--db", "OUTBOXD_DB", CONFIG_STRING, "sqlite:./var/outboxd.db", S(db),
	 "store: sqlite:PATH (embedded) or postgres://..."},
	{"listen", "--listen", "OUTBOXD_LISTEN", CONFIG_STRING, "127.0.0.1:8080", S(listen),
	 "address of the HTTP API, host:port"},
	{"grpc_listen", "--grpc-listen", "OUTBOXD_GRPC_LISTEN", CONFIG_STRING, NULL,
	 S(grpc_listen), "address of the gRPC ingest (outboxd.v1.Ingest), host:port; TLS with "
	 "tls_cert and tls_key when they are set, else plaintext, for a private network or a "
	 "sidecar; empty = off"},
	{"data_dir", "--data-dir", "OUTBOXD_DATA_DIR", CONFIG_STRING, NULL, S(data_dir),
	 "where the generated admin token and secret key, and the instance id of the Kafka "
	 "intake, are kept (default: the SQLite file's folder, or ./var)"},
	{"admin_token", "--admin-token", "OUTBOXD_ADMIN_TOKEN", CONFIG_STRING, NULL,
	 S(admin_token), "bearer token for the whole API (generated on first start when unset)"},
	{"ingest_token", "--ingest-token", "OUTBOXD_INGEST_TOKEN", CONFIG_STRING, NULL,
	 S(ingest_token), "bearer token that may only POST /v1/events"},
	{"secret_key", "--secret-key", "OUTBOXD_SECRET_KEY", CONFIG_STRING, NULL, S(secret_key),
	 "key that seals subscription credentials in the store (AES-256-GCM): 64 hex digits "
	 "or the base64 of 32 bytes; unset: DATA_DIR/secret.key, generated on first start. "
	 "Every instance on one PostgreSQL database needs the same key; never logged"},
	{"log_level", "--log-level", "OUTBOXD_LOG_LEVEL", CONFIG_STRING, "info", S(log_level),
	 "debug, info, warn or error"},
	{"log_format", "--log-format", "OUTBOXD_LOG_FORMAT", CONFIG_STRING, "auto", S(log_format),
	 "json (JSON lines), text, or auto: text on a terminal, JSON otherwise"},
	{"max_payload", "--max-payload", "OUTBOXD_MAX_PAYLOAD", CONFIG_SIZE, "1MiB",
	 S(max_payload), "largest event payload accepted (bigger: 413)"},
	{"max_request", "--max-request", "OUTBOXD_MAX_REQUEST", CONFIG_SIZE, "16MiB",
	 S(max_request), "largest request body accepted (bigger: 413)"},
	{"api_threads", "--api-threads", "OUTBOXD_API_THREADS", CONFIG_INT, "8", S(api_threads),
	 "threads serving the HTTP API"},
	{"api_max_connections", "--api-max-connections", "OUTBOXD_API_MAX_CONNECTIONS", CONFIG_INT,
	 "1024", S(api_max_connections),
	 "open API connections at most; more are refused at accept, the open ones keep being served"},
	{"api_idle_timeout", "--api-idle-timeout", "OUTBOXD_API_IDLE_TIMEOUT", CONFIG_DURATION,
	 "30s", S(api_idle_timeout_ms),
	 "an API connection that sends nothing for this long (an idle keep-alive, or a client "
	 "that stalls mid-request) is closed"},
	{"api_max_connections_per_ip", "--api-max-connections-per-ip",
	 "OUTBOXD_API_MAX_CONNECTIONS_PER_IP", CONFIG_INT, "128", S(api_max_connections_per_ip),
	 "open API connections one client address may hold (more are refused at accept); "
	 "behind a reverse proxy every client has the proxy's address: raise it; 0 = no limit"},
	{"api_request_timeout", "--api-request-timeout", "OUTBOXD_API_REQUEST_TIMEOUT",
	 CONFIG_DURATION, "60s", S(api_request_timeout_ms),
	 "a request must arrive whole (headers and body) within this long of its first line, "
	 "and that line within this long of the connection being ready for it, however "
	 "steadily it trickles in; else its connection is closed"},
	{"api_body_memory", "--api-body-memory", "OUTBOXD_API_BODY_MEMORY", CONFIG_SIZE, "128MiB",
	 S(api_body_memory),
	 "request bodies held in memory at once by the requests in progress, together; a "
	 "request that would go past it is answered 503 (at least max_request)"},
	/* The retry and cleanup defaults are the reference architecture's, each quoted in
	 * docs/reference.md ("Immediate retries", "Scheduled retries", "Backoff retry
	 * and the circuit breaker", "Cleanup and retention"). */
	{"immediate_tries", "--immediate-tries", "OUTBOXD_IMMEDIATE_TRIES", CONFIG_INT, "4",
	 S(immediate_tries),
	 "default tries in the first (immediate) round: the first try and up to 3 retries"},
	{"immediate_delay", "--immediate-delay", "OUTBOXD_IMMEDIATE_DELAY", CONFIG_DURATION,
	 "100ms", S(immediate_delay_ms),
	 "default stagger between immediate tries (grows linearly; round capped at 1 minute)"},
	{"delivery_timeout", "--delivery-timeout", "OUTBOXD_DELIVERY_TIMEOUT", CONFIG_DURATION,
	 "1s", S(delivery_timeout_ms), "default timeout of an immediate try"},
	{"retry_interval", "--retry-interval", "OUTBOXD_RETRY_INTERVAL", CONFIG_DURATION, "3s",
	 S(retry_interval_ms), "default interval between scheduled retries"},
	{"max_retries", "--max-retries", "OUTBOXD_MAX_RETRIES", CONFIG_INT, NULL, S(max_retries),
	 "default scheduled retries before the DLQ; 0 = retry forever; unset: 3, or 5 when "
	 "the policy is exponential"},
	{"retry_timeout", "--retry-timeout", "OUTBOXD_RETRY_TIMEOUT", CONFIG_DURATION, "5s",
	 S(retry_timeout_ms), "default timeout of a scheduled or manual try"},
	{"retry_policy", "--retry-policy", "OUTBOXD_RETRY_POLICY", CONFIG_STRING, "fixed",
	 S(retry_policy), "default scheduled-retry policy: fixed, linear or exponential"},
	{"retry_min_delay", "--retry-min-delay", "OUTBOXD_RETRY_MIN_DELAY", CONFIG_DURATION, "10s",
	 S(retry_min_delay_ms),
	 "default lower end of the random re-queue window: exponential retries and delay "
	 "actions"},
	{"retry_max_delay", "--retry-max-delay", "OUTBOXD_RETRY_MAX_DELAY", CONFIG_DURATION, "60s",
	 S(retry_max_delay_ms),
	 "default upper end of that window, and the cap of linear retries"},
	{"retry_factor", "--retry-factor", "OUTBOXD_RETRY_FACTOR", CONFIG_NUMBER, "2",
	 S(retry_factor), "default growth factor of exponential retries, 1 to 10"},
	{"retry_jitter", "--retry-jitter", "OUTBOXD_RETRY_JITTER", CONFIG_NUMBER, "0",
	 S(retry_jitter),
	 "default jitter of fixed and linear retries: up to this fraction of a delay is drawn "
	 "off at random, 0 to 1"},
	{"retry_after_max", "--retry-after-max", "OUTBOXD_RETRY_AFTER_MAX", CONFIG_DURATION, "1h",
	 S(retry_after_max_ms),
	 "default longest Retry-After (on 429 and 503) that postpones a scheduled retry"},
	{"retry_batch", "--retry-batch", "OUTBOXD_RETRY_BATCH", CONFIG_INT, "100", S(retry_batch),
	 "deliveries claimed per batch"},
	{"max_in_flight", "--max-in-flight", "OUTBOXD_MAX_IN_FLIGHT", CONFIG_INT, "512",
	 S(max_in_flight), "deliveries being sent at once by this instance"},
	{"lean_http", "--lean-http", "OUTBOXD_LEAN_HTTP", CONFIG_BOOL, "true", S(lean_http),
	 "http:// and https:// deliveries go over outboxd's own HTTP/1.1 client (one write "
	 "per request, kept-alive connections, TLS sessions resumed); false sends them "
	 "through libcurl"},
	{"connect_timeout", "--connect-timeout", "OUTBOXD_CONNECT_TIMEOUT", CONFIG_DURATION, "3s",
	 S(connect_timeout_ms),
	 "how long a delivery may take to connect (TLS handshake included); a subscription's "
	 "timeout starts once the request is being written"},
	{"lease", "--lease", "OUTBOXD_LEASE", CONFIG_DURATION, "2m", S(lease_ms),
	 "how long a claimed delivery stays reserved before a crash returns it to the pool"},
	{"relay_interval", "--relay-interval", "OUTBOXD_RELAY_INTERVAL", CONFIG_DURATION,
	 "100ms", S(relay_interval_ms), "how often the producer outbox table is polled"},
	{"relay_batch", "--relay-batch", "OUTBOXD_RELAY_BATCH", CONFIG_INT, "100", S(relay_batch),
	 "outbox rows the relay moves per transaction (1 to 10000)"},
	{"reap_interval", "--reap-interval", "OUTBOXD_REAP_INTERVAL", CONFIG_DURATION, "10s",
	 S(reap_interval_ms), "how often expired leases are returned to the pool"},
	{"cleanup_enabled", "--cleanup-enabled", "OUTBOXD_CLEANUP_ENABLED", CONFIG_BOOL, "false",
	 S(cleanup_enabled), "delete PROCESSED deliveries periodically"},
	{"cleanup_interval", "--cleanup-interval", "OUTBOXD_CLEANUP_INTERVAL", CONFIG_DURATION,
	 "60m", S(cleanup_interval_ms), "how often the cleanup job runs"},
	{"cleanup_after", "--cleanup-after", "OUTBOXD_CLEANUP_AFTER", CONFIG_DURATION, "0s",
	 S(cleanup_after_ms),
	 "retention: the cleanup keeps PROCESSED deliveries at least this long after they "
	 "were delivered, and events without any delivery this long after they were stored; "
	 "0s deletes them at the next run"},
	{"shutdown_grace", "--shutdown-grace", "OUTBOXD_SHUTDOWN_GRACE", CONFIG_DURATION, "10s",
	 S(shutdown_grace_ms), "how long SIGTERM waits for in-flight requests"},
	{"replay_rate", "--replay-rate", "OUTBOXD_REPLAY_RATE", CONFIG_INT, "100", S(replay_rate),
	 "default pace of a filter replay job, deliveries per second"},
	{"metrics_public", "--metrics-public", "OUTBOXD_METRICS_PUBLIC", CONFIG_BOOL, "true",
	 S(metrics_public), "serve /metrics without a token (false: a token with the read scope is needed)"},
	{"stats_window", "--stats-window", "OUTBOXD_STATS_WINDOW", CONFIG_DURATION, "15m",
	 S(stats_window_ms), "window of the per-subscription success rate in /v1/stats"},
	{"spool", "--spool", "OUTBOXD_SPOOL", CONFIG_STRING, NULL, S(spool),
	 "local file that keeps accepted events and delivery results while the store is "
	 "unavailable, replayed when it returns; empty = off: ingest answers 503"},
	{"disable_after", "--disable-after", "OUTBOXD_DISABLE_AFTER", CONFIG_DURATION, "5d",
	 S(disable_after_ms),
	 "a subscription whose every attempt failed this long is disabled (its deliveries "
	 "wait until it is enabled again); a subscription's own disable_after wins; 0s = "
	 "never"},
	{"ops_events_limit", "--ops-events-limit", "OUTBOXD_OPS_EVENTS_LIMIT", CONFIG_INT, "10",
	 S(ops_events_limit),
	 "operational events (outboxd.*) per subscription and kind within ops_events_window; "
	 "more are counted into one summary event when the window ends"},
	{"ops_events_window", "--ops-events-window", "OUTBOXD_OPS_EVENTS_WINDOW",
	 CONFIG_DURATION, "1m", S(ops_events_window_ms),
	 "the window of ops_events_limit (at least 1s)"},
	{"log_deliveries", "--log-deliveries", "OUTBOXD_LOG_DELIVERIES", CONFIG_BOOL, "false",
	 S(log_deliveries),
	 "one audit log line per delivery outcome once it is stored: EXECUTED, FAILED (a retry "
	 "follows) or DEAD, with delivery, event, subscription, code and duration, whatever "
	 "log_level says; never a credential"},
	{"ssrf_allow", "--ssrf-allow", "OUTBOXD_SSRF_ALLOW", CONFIG_STRING, NULL, S(ssrf_allow),
	 "addresses deliveries and OAuth2 token requests may go to although the SSRF guard "
	 "refuses them (loopback, private, link-local, metadata, ...): comma-separated CIDRs, "
	 "e.g. 127.0.0.0/8,10.1.0.0/16; empty = none"},
	{"egress_proxy", "--egress-proxy", "OUTBOXD_EGRESS_PROXY", CONFIG_STRING, NULL,
	 S(egress_proxy), "HTTP proxy every delivery and OAuth2 token request goes through, as a "
	 "CONNECT tunnel to the address the SSRF guard checked (http://host:port, user info "
	 "allowed and never logged); plain http:// deliveries then go over libcurl too; "
	 "empty = connect directly"},
	{"tls_dir", "--tls-dir", "OUTBOXD_TLS_DIR", CONFIG_STRING, "/etc/outboxd", S(tls_dir),
	 "directory the TLS files of subscriptions (tls.ca_file, tls.client_cert, "
	 "tls.client_key) must lie in, symbolic links and .. resolved; empty = none accepted"},
	{"tls_cert", "--tls-cert", "OUTBOXD_TLS_CERT", CONFIG_STRING, NULL, S(tls_cert),
	 "PEM certificate (with its chain) the API serves HTTPS with; empty = plain HTTP"},
	{"tls_key", "--tls-key", "OUTBOXD_TLS_KEY", CONFIG_STRING, NULL, S(tls_key),
	 "PEM private key of tls_cert (read once at start)"},
	{"tls_priorities", "--tls-priorities", "OUTBOXD_TLS_PRIORITIES", CONFIG_STRING,
	 "SECURE:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2", S(tls_priorities),
	 "GnuTLS priority string of the API's HTTPS: protocol versions and ciphers; the "
	 "default accepts TLS 1.3 and 1.2 only"},
	/* Kafka (docs/kafka.md): off unless kafka_brokers is set. */
	{"kafka_brokers", "--kafka-brokers", "OUTBOXD_KAFKA_BROKERS", CONFIG_STRING, NULL,
	 S(kafka_brokers), "Kafka bootstrap servers, host:port,...; empty = Kafka off"},
	{"kafka_config", "--kafka-config", "OUTBOXD_KAFKA_CONFIG", CONFIG_STRING, NULL,
	 S(kafka_config), "extra librdkafka properties for every client, key=value;key=value "
	 "(security.protocol, sasl.*, ssl.*); never logged"},
	{"kafka_group", "--kafka-group", "OUTBOXD_KAFKA_GROUP", CONFIG_STRING, "outboxd",
	 S(kafka_group), "consumer group of the Kafka intake"},
	{"kafka_intake", "--kafka-intake", "OUTBOXD_KAFKA_INTAKE", CONFIG_STRING, NULL,
	 S(kafka_intake), "topics to consume, TOPIC[:FORMAT],...; FORMAT envelope (default), "
	 "dlt or event"},
	{"kafka_dead_letter", "--kafka-dead-letter", "OUTBOXD_KAFKA_DEAD_LETTER", CONFIG_STRING,
	 NULL, S(kafka_dead_letter), "topic for exhausted deliveries that came from an intake "
	 "topic ({topic} = the source topic, e.g. {topic}.dlt); empty = off"},
	{"kafka_wire_format", "--kafka-wire-format", "OUTBOXD_KAFKA_WIRE_FORMAT", CONFIG_STRING,
	 "plain", S(kafka_wire_format), "framing of the OutboxEvent messages outboxd writes: "
	 "plain or confluent (Schema Registry wire format)"},
	{"kafka_schema_id", "--kafka-schema-id", "OUTBOXD_KAFKA_SCHEMA_ID", CONFIG_INT, "1",
	 S(kafka_schema_id), "schema id written with kafka_wire_format confluent"},
	{"kafka_schema_registry", "--kafka-schema-registry", "OUTBOXD_KAFKA_SCHEMA_REGISTRY",
	 CONFIG_STRING, NULL, S(kafka_schema_registry), "Schema Registry (Confluent REST API), "
	 "http(s)://[user:password@]host:port: with kafka_wire_format confluent, the "
	 "OutboxEvent schema is registered under TOPIC-value and its id written instead of "
	 "kafka_schema_id; password never logged; empty = off"},
	{"kafka_max_backlog", "--kafka-max-backlog", "OUTBOXD_KAFKA_MAX_BACKLOG", CONFIG_INT,
	 "100000", S(kafka_max_backlog), "the intake pauses while more of its deliveries than "
	 "this are not final, and resumes below half"},
	/* OpenTelemetry (otel/otlp.h, docs/operations.md): off unless otlp_endpoint is set. */
	{"otlp_endpoint", "--otlp-endpoint", "OUTBOXD_OTLP_ENDPOINT", CONFIG_STRING, NULL,
	 S(otlp_endpoint), "OTLP/HTTP collector (http(s)://host:4318): a span per delivery "
	 "attempt goes to /v1/traces and the counters to /v1/metrics; set by the operator, so "
	 "the SSRF guard does not apply; empty = off"},
	{"otlp_protocol", "--otlp-protocol", "OUTBOXD_OTLP_PROTOCOL", CONFIG_STRING,
	 "http/protobuf", S(otlp_protocol), "encoding of the exports to otlp_endpoint: "
	 "http/protobuf (binary protobuf, the OpenTelemetry Collector's default) or http/json "
	 "(OTLP JSON), as OTEL_EXPORTER_OTLP_PROTOCOL"},
	{"otlp_compression", "--otlp-compression", "OUTBOXD_OTLP_COMPRESSION", CONFIG_STRING,
	 "none", S(otlp_compression), "compression of the exports to otlp_endpoint: none or "
	 "gzip (Content-Encoding: gzip), as OTEL_EXPORTER_OTLP_COMPRESSION"},
	{"otlp_interval", "--otlp-interval", "OUTBOXD_OTLP_INTERVAL", CONFIG_DURATION, "10s",
	 S(otlp_interval_ms), "how often the counters are exported to otlp_endpoint (at least "
	 "1s)"},
	{"otlp_headers", "--otlp-headers", "OUTBOXD_OTLP_HEADERS", CONFIG_STRING, NULL,
	 S(otlp_headers), "headers sent with every export to otlp_endpoint, Name=value,Name=value "
	 "(a collector's API key, as OTEL_EXPORTER_OTLP_HEADERS); values never logged"},
	{NULL, NULL, NULL, 0, NULL, 0, NULL},
};

static int fail(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -1;
}

static int is_set(const char *s)
{
	return s && *s;
}

/* The Kafka settings that can be checked without a broker: the intake list's formats,
 * the wire format, and that nothing Kafka is asked for without kafka_brokers. */
static int check_kafka(const struct config *cfg, char *err, size_t errlen)
{
	if (strcmp(cfg->kafka_wire_format, "plain") != 0 &&
	    strcmp(cfg->kafka_wire_format, "confluent") != 0)
		return fail(err, errlen, "kafka_wire_format must be plain or confluent, got \"%s\"",
			    cfg->kafka_wire_format);
	if (cfg->kafka_max_backlog < 1)
		return fail(err, errlen, "kafka_max_backlog must be at least 1");
	if (is_set(cfg->kafka_schema_registry)) {
		if (strncmp(cfg->kafka_schema_registry, "http://", 7) != 0 &&
		    strncmp(cfg->kafka_schema_registry, "https://", 8) != 0)
			return fail(err, errlen, "kafka_schema_registry must be an http:// or "
				    "https:// URL");
		/* the registry's ids only go into the Schema Registry framing */
		if (strcmp(cfg->kafka_wire_format, "confluent") != 0)
			return fail(err, errlen, "kafka_schema_registry needs kafka_wire_format "
				    "confluent");
	}
	if (!is_set(cfg->kafka_brokers) && (is_set(cfg->kafka_intake) ||
					    is_set(cfg->kafka_dead_letter) ||
					    is_set(cfg->kafka_schema_registry)))
		return fail(err, errlen, "%s needs kafka_brokers",
			    is_set(cfg->kafka_intake) ? "kafka_intake"
			    : is_set(cfg->kafka_dead_letter) ? "kafka_dead_letter"
			    : "kafka_schema_registry");
	if (!is_set(cfg->kafka_group))
		return fail(err, errlen, "kafka_group must not be empty");
	const char *p = is_set(cfg->kafka_intake) ? cfg->kafka_intake : NULL;
	while (p) {
		const char *end = strchr(p, ',');
		size_t len = end ? (size_t)(end - p) : strlen(p);
		const char *colon = memchr(p, ':', len);
		size_t topic = colon ? (size_t)(colon - p) : len;
		if (topic == 0)
			return fail(err, errlen, "kafka_intake: an entry has no topic (TOPIC[:FORMAT],...)");
		if (colon) {
			const char *f = colon + 1;
			size_t flen = len - topic - 1;
			if (!((flen == 8 && strncmp(f, "envelope", 8) == 0) ||
			      (flen == 3 && strncmp(f, "dlt", 3) == 0) ||
			      (flen == 5 && strncmp(f, "event", 5) == 0)))
				return fail(err, errlen, "kafka_intake: unknown format \"%.*s\" for topic "
					    "%.*s (envelope, dlt or event)", (int)flen, f, (int)topic, p);
		}
		p = end ? end + 1 : NULL;
	}
	return 0;
}

static int parse_int(const char *text, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(text, &end, 10);
	if (errno || end == text || *end)
		return -1;
	*out = v;
	return 0;
}

static int parse_size(const char *text, int64_t *out)
{
	static const struct { const char *suffix; int64_t mul; } units[] = {
		{"", 1}, {"B", 1}, {"KB", 1000}, {"KiB", 1024}, {"MB", 1000000},
		{"MiB", 1048576}, {"GB", 1000000000}, {"GiB", 1073741824},
	};
	char *end;
	errno = 0;
	long long v = strtoll(text, &end, 10);
	if (errno || end == text || v < 0)
		return -1;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].suffix) == 0) {
			if (v > INT64_MAX / units[i].mul)
				return -1;
			*out = v * units[i].mul;
			return 0;
		}
	}
	return -1;
}

static int parse_bool(const char *text, int *out)
{
	if (!strcmp(text, "true") || !strcmp(text, "1") || !strcmp(text, "yes") ||
	    !strcmp(text, "on")) {
		*out = 1;
		return 0;
	}
	if (!strcmp(text, "false") || !strcmp(text, "0") || !strcmp(text, "no") ||
	    !strcmp(text, "off")) {
		*out = 0;
		return 0;
	}
	return -1;
}

/* Sets one setting from text; where says which form it came from, for the message. */
static int set_value(struct config *cfg, const struct config_setting *s, const char *text,
		     const char *where, char *err, size_t errlen)
{
	char *base = (char *)cfg + s->offset;
	int64_t v;

	switch (s->type) {
	case CONFIG_STRING: {
		char **field = (char **)base;
		char *copy = strdup(text);
		if (!copy)
			return fail(err, errlen, "out of memory");
		free(*field);
		*field = copy;
		return 0;
	}
	case CONFIG_INT:
		if (parse_int(text, &v) || v < 0 || v > 1000000000)
			return fail(err, errlen, "%s: %s must be a non-negative integer, got \"%s\"",
				    where, s->key, text);
		*(int *)base = (int)v;
		return 0;
	case CONFIG_DURATION:
		if (duration_parse(text, &v))
			return fail(err, errlen,
				    "%s: %s must be a duration with a unit (500ms, 3s, 60m, 1h), got \"%s\"",
				    where, s->key, text);
		*(int64_t *)base = v;
		return 0;
	case CONFIG_SIZE:
		if (parse_size(text, &v))
			return fail(err, errlen,
				    "%s: %s must be a size (1048576, 512KiB, 1MiB), got \"%s\"",
				    where, s->key, text);
		*(int64_t *)base = v;
		return 0;
	case CONFIG_NUMBER: {
		char *end;
		errno = 0;
		double d = strtod(text, &end);
		if (errno || end == text || *end || !isfinite(d))
			return fail(err, errlen, "%s: %s must be a number, got \"%s\"", where,
				    s->key, text);
		*(double *)base = d;
		return 0;
	}
	case CONFIG_BOOL:
		if (parse_bool(text, (int *)base))
			return fail(err, errlen, "%s: %s must be true or false, got \"%s\"", where,
				    s->key, text);
		return 0;
	}
	return fail(err, errlen, "%s: %s has an unknown type", where, s->key);
}

static const struct config_setting *find_key(const char *key, size_t len)
{
	for (const struct config_setting *s = config_settings; s->key; s++)
		if (strlen(s->key) == len && strncmp(s->key, key, len) == 0)
			return s;
	return NULL;
}

static const struct config_setting *find_flag(const char *flag, size_t len)
{
	for (const struct config_setting *s = config_settings; s->key; s++)
		if (strlen(s->flag) == len && strncmp(s->flag, flag, len) == 0)
			return s;
	return NULL;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

/* The comment of a line: the first '#' outside double quotes (a quoted value may hold
 * one: a password in a DSN), or NULL. */
static char *comment_start(char *line)
{
	int quoted = 0;
	for (char *p = line; *p; p++) {
		if (*p == '"')
			quoted = !quoted;
		else if (*p == '#' && !quoted)
			return p;
	}
	return NULL;
}

/* "key = value" lines; '#' starts a comment outside quotes; values may be "quoted". */
static int load_file(struct config *cfg, const char *text, char *err, size_t errlen)
{
	char *copy = strdup(text);
	if (!copy)
		return fail(err, errlen, "out of memory");
	int rc = 0, lineno = 0;
	char *save = NULL;
	for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		lineno++;
		char *hash = comment_start(line);
		if (hash)
			*hash = '\0';
		char *l = trim(line);
		if (!*l)
			continue;
		char *eq = strchr(l, '=');
		char where[64];
		snprintf(where, sizeof(where), "config file line %d", lineno);
		if (!eq) {
			rc = fail(err, errlen, "%s: expected key = value", where);
			break;
		}
		*eq = '\0';
		char *key = trim(l), *val = trim(eq + 1);
		size_t vl = strlen(val);
		if (vl >= 2 && val[0] == '"' && val[vl - 1] == '"') {
			val[vl - 1] = '\0';
			val++;
		}
		const struct config_setting *s = find_key(key, strlen(key));
		if (!s) {
			rc = fail(err, errlen, "%s: unknown key \"%s\"", where, key);
			break;
		}
		if ((rc = set_value(cfg, s, val, where, err, errlen)))
			break;
	}
	free(copy);
	return rc;
}

/* The configuration file of an installed outboxd (make install, the Debian package set
 * it at build time); "" in a development build, which keeps everything under ./var. */
#ifndef OUTBOXD_DEFAULT_CONFIG
#define OUTBOXD_DEFAULT_CONFIG ""
#endif

const char *config_default_file(void)
{
	return OUTBOXD_DEFAULT_CONFIG[0] ? OUTBOXD_DEFAULT_CONFIG : NULL;
}

const char *config_file_path(char *const *envp, int argc, char *const *argv)
{
	const char *path = NULL;
	int given = 0;
	for (char *const *e = envp; e && *e; e++)
		if (strncmp(*e, "OUTBOXD_CONFIG=", 15) == 0)
			path = *e + 15, given = 1;
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
			path = argv[i + 1], given = 1;
		else if (strncmp(argv[i], "--config=", 9) == 0)
			path = argv[i] + 9, given = 1;
	}
	if (!given)
		path = config_default_file();
	return path && *path ? path : NULL; /* "" (given empty): no file */
}

int config_listen_split(const char *listen, char *host, size_t hostlen, char *port,
			size_t portlen, char *err, size_t errlen)
{
	const char *colon = listen ? strrchr(listen, ':') : NULL;
	if (!colon || colon == listen)
		return fail(err, errlen, "listen: expected host:port (127.0.0.1:8080, [::1]:8080), "
			    "got \"%s\"", listen ? listen : "");
	const char *h = listen, *h_end = colon;
	if (*h == '[') { /* [::1]:8080 */
		if (h_end[-1] != ']' || h_end - h < 3)
			return fail(err, errlen, "listen: an IPv6 address goes in brackets with the "
				    "port after them ([::1]:8080), got \"%s\"", listen);
		h++;
		h_end--;
	} else if (memchr(h, ':', (size_t)(h_end - h))) {
		return fail(err, errlen, "listen: an IPv6 address goes in brackets ([::1]:8080), "
			    "got \"%s\"", listen);
	}
	const char *p = colon + 1;
	size_t digits = strspn(p, "0123456789");
	if (digits == 0 || p[digits] != '\0' || digits > 5 || atol(p) > 65535)
		return fail(err, errlen, "listen: the port must be a number from 0 to 65535, got "
			    "\"%s\"", p);
	if ((size_t)(h_end - h) >= hostlen || digits >= portlen)
		return fail(err, errlen, "listen: the host is too long in \"%s\"", listen);
	memcpy(host, h, (size_t)(h_end - h));
	host[h_end - h] = '\0';
	memcpy(port, p, digits + 1);
	return 0;
}

/* The OUTBOXD_* variables of envp over cfg. 0, or -1 with err naming the variable. */
static int load_env(struct config *cfg, char *const *envp, char *err, size_t errlen)
{
	for (char *const *e = envp; e && *e; e++) {
		if (strncmp(*e, "OUTBOXD_", 8) != 0)
			continue;
		const char *eq = strchr(*e, '=');
		if (!eq)
			continue;
		size_t nl = (size_t)(eq - *e);
		for (const struct config_setting *s = config_settings; s->key; s++) {
			if (strlen(s->env) == nl && strncmp(s->env, *e, nl) == 0 &&
			    set_value(cfg, s, eq + 1, s->env, err, errlen))
				return -1;
		}
	}

	return 0;
}

/* The flags after the command (argv[0..argc)) over cfg; --config is skipped (read
 * before). 0, or -1 with err naming the flag. */
static int load_flags(struct config *cfg, int argc, char *const *argv, char *err, size_t errlen)
{
	for (int i = 0; i < argc; i++) {
		const char *arg = argv[i];
		if (strncmp(arg, "--", 2) != 0)
			return fail(err, errlen, "unexpected argument \"%s\"", arg);
		const char *eq = strchr(arg, '=');
		size_t fl = eq ? (size_t)(eq - arg) : strlen(arg);
		const char *value = eq ? eq + 1 : NULL;
		if (fl == 8 && strncmp(arg, "--config", 8) == 0) {
			if (!eq)
				i++;
			continue;
		}
		const struct config_setting *s = find_flag(arg, fl);
		if (!s)
			return fail(err, errlen, "unknown flag \"%.*s\" (see outboxd serve --help)",
				    (int)fl, arg);
		if (!value) {
			if (s->type == CONFIG_BOOL && (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)) {
				value = "true";
			} else if (i + 1 < argc) {
				value = argv[++i];
			} else {
				return fail(err, errlen, "%s needs a value", s->flag);
			}
		}
		if (set_value(cfg, s, value, s->flag, err, errlen))
			return -1;
	}

	return 0;
}

/* The values together: ranges, settings that need each other, formats of URLs and
 * headers, the retry policy they make, the Kafka settings. 0, or -1 with err naming the
 * setting. */
static int check_values(struct config *cfg, char *err, size_t errlen)
{
	if (cfg->immediate_tries < 1)
		return fail(err, errlen, "immediate_tries must be at least 1");
	enum retry_policy_kind kind;
	if (retry_policy_kind_parse(cfg->retry_policy, &kind))
		return fail(err, errlen, "retry_policy must be fixed, linear or exponential, got \"%s\"",
			    cfg->retry_policy);
	struct retry_policy policy;
	char field[32], msg[96];
	config_retry_defaults(cfg, &policy);
	if (retry_policy_check(&policy, "retry_", field, sizeof(field), msg, sizeof(msg)))
		return fail(err, errlen, "%s", msg);
	if (cfg->ops_events_limit < 1 || cfg->ops_events_window_ms < 1000)
		return fail(err, errlen, "ops_events_limit must be at least 1 and ops_events_window "
			    "at least 1s");
	if (cfg->api_max_connections < 16 || cfg->api_idle_timeout_ms < 1000)
		return fail(err, errlen, "api_max_connections must be at least 16 and api_idle_timeout "
			    "at least 1s");
	if (cfg->api_request_timeout_ms < 1000)
		return fail(err, errlen, "api_request_timeout must be at least 1s");
	if (cfg->api_body_memory < cfg->max_request)
		return fail(err, errlen, "api_body_memory (%lld) must be at least max_request (%lld): "
			    "a request of max_request bytes could never be read",
			    (long long)cfg->api_body_memory, (long long)cfg->max_request);
	if (cfg->retry_batch < 1 || cfg->max_in_flight < 1 || cfg->api_threads < 1 ||
	    cfg->replay_rate < 1)
		return fail(err, errlen, "retry_batch, max_in_flight, api_threads and replay_rate must be at least 1");
	if (cfg->relay_batch < 1 || cfg->relay_batch > 10000)
		return fail(err, errlen, "relay_batch must be from 1 to 10000, got %d", cfg->relay_batch);
	if (cfg->connect_timeout_ms < 100 || cfg->connect_timeout_ms > 300000)
		return fail(err, errlen, "connect_timeout must be from 100ms to 5m");
	char listen_host[256], listen_port[8];
	if (config_listen_split(cfg->listen, listen_host, sizeof(listen_host), listen_port,
				sizeof(listen_port), err, errlen))
		return -1;
	/* the same address rule as listen; its messages name listen, so they are renamed */
	if (is_set(cfg->grpc_listen) &&
	    config_listen_split(cfg->grpc_listen, listen_host, sizeof(listen_host), listen_port,
				sizeof(listen_port), err, errlen)) {
		char why[512];
		snprintf(why, sizeof(why), "%s", err);
		return fail(err, errlen, "grpc_%s", why);
	}
	struct ssrf_policy ssrf;
	if (ssrf_policy_parse(cfg->ssrf_allow, &ssrf, err, errlen))
		return -1;
	if (!is_set(cfg->tls_priorities))
		return fail(err, errlen, "tls_priorities must not be empty (default: "
			    "SECURE:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2)");
	if (is_set(cfg->egress_proxy) && (strncmp(cfg->egress_proxy, "http://", 7) != 0 ||
					  strpbrk(cfg->egress_proxy, " \t\r\n")))
		return fail(err, errlen, "egress_proxy must be an http:// URL such as "
			    "http://proxy.internal:3128");
	if (is_set(cfg->tls_dir) && cfg->tls_dir[0] != '/')
		return fail(err, errlen, "tls_dir must be an absolute path, got \"%s\"", cfg->tls_dir);
	if ((cfg->tls_cert && *cfg->tls_cert) != (cfg->tls_key && *cfg->tls_key))
		return fail(err, errlen, "%s is set without %s: the API's TLS needs both",
			    cfg->tls_cert && *cfg->tls_cert ? "tls_cert" : "tls_key",
			    cfg->tls_cert && *cfg->tls_cert ? "tls_key" : "tls_cert");
	if (is_set(cfg->secret_key)) {
		struct secretbox_key key;
		char why[160];
		int bad = secretbox_key_parse(cfg->secret_key, &key, why, sizeof(why));
		secretbox_key_clear(&key);
		if (bad)
			return fail(err, errlen, "secret_key %s", why);
	}
	if (is_set(cfg->otlp_endpoint) && strncmp(cfg->otlp_endpoint, "http://", 7) != 0 &&
	    strncmp(cfg->otlp_endpoint, "https://", 8) != 0)
		return fail(err, errlen, "otlp_endpoint must be an http:// or https:// URL, got \"%s\"",
			    cfg->otlp_endpoint);
	if (cfg->otlp_interval_ms < 1000)
		return fail(err, errlen, "otlp_interval must be at least 1s");
	if (strcmp(cfg->otlp_protocol, "http/protobuf") != 0 &&
	    strcmp(cfg->otlp_protocol, "http/json") != 0)
		return fail(err, errlen, "otlp_protocol must be http/protobuf or http/json, got \"%s\"",
			    cfg->otlp_protocol);
	if (strcmp(cfg->otlp_compression, "none") != 0 && strcmp(cfg->otlp_compression, "gzip") != 0)
		return fail(err, errlen, "otlp_compression must be none or gzip, got \"%s\"",
			    cfg->otlp_compression);
	for (const char *h = is_set(cfg->otlp_headers) ? cfg->otlp_headers : NULL; h;) {
		size_t len = strcspn(h, ",");
		const char *eq = memchr(h, '=', len);
		if (!eq || eq == h || memchr(h, '\r', len) || memchr(h, '\n', len) ||
		    memchr(h, ':', (size_t)(eq - h)))
			return fail(err, errlen, "otlp_headers must be Name=value pairs separated by "
				    "commas, e.g. X-Api-Key=...");
		h = h[len] ? h + len + 1 : NULL;
	}
	return check_kafka(cfg, err, errlen);
}

int config_load(struct config *cfg, const char *file_text, char *const *envp, int argc,
		char *const *argv, char *err, size_t errlen)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->max_retries = -1; /* unset: the retry policy's own default */
	for (const struct config_setting *s = config_settings; s->key; s++)
		if (s->def && set_value(cfg, s, s->def, "default", err, errlen))
			return -1;
	if (file_text && load_file(cfg, file_text, err, errlen))
		return -1;
	if (load_env(cfg, envp, err, errlen) || load_flags(cfg, argc, argv, err, errlen))
		return -1;
	return check_values(cfg, err, errlen);
}

void config_free(struct config *cfg)
{
	for (const struct config_setting *s = config_settings; s->key; s++) {
		if (s->type == CONFIG_STRING) {
			char **field = (char **)((char *)cfg + s->offset);
			free(*field);
			*field = NULL;
		}
	}
	free(cfg->config_file);
	cfg->config_file = NULL;
}

char *config_data_dir(const struct config *cfg)
{
	if (cfg->data_dir)
		return strdup(cfg->data_dir);
	if (strncmp(cfg->db, "sqlite:", 7) == 0) {
		char *copy = strdup(cfg->db + 7);
		char *dir = copy ? strdup(dirname(copy)) : NULL;
		free(copy);
		return dir;
	}
	return strdup("./var");
}

void config_retry_defaults(const struct config *cfg, struct retry_policy *p)
{
	retry_policy_defaults(p);
	p->immediate = cfg->immediate_tries;
	p->immediate_delay_ms = cfg->immediate_delay_ms;
	p->immediate_timeout_ms = cfg->delivery_timeout_ms;
	p->interval_ms = cfg->retry_interval_ms;
	if (cfg->max_retries >= 0) {
		p->max_retries = cfg->max_retries;
		p->max_retries_auto = 0;
	}
	p->timeout_ms = cfg->retry_timeout_ms;
	if (retry_policy_kind_parse(cfg->retry_policy, &p->policy))
		p->policy = RETRY_FIXED;
	p->min_delay_ms = cfg->retry_min_delay_ms;
	p->max_delay_ms = cfg->retry_max_delay_ms;
	p->factor = cfg->retry_factor;
	p->jitter = cfg->retry_jitter;
	p->retry_after_max_ms = cfg->retry_after_max_ms;
	retry_policy_settle(p);
}

void config_print_help(FILE *out)
{
	fprintf(out, "Settings (flag, environment variable, config file key = default):\n"
		     "  precedence: flags > environment > config file (--config FILE or "
		     "OUTBOXD_CONFIG) > defaults\n\n");
	for (const struct config_setting *s = config_settings; s->key; s++) {
		fprintf(out, "  %-20s %-26s %s = %s\n      %s\n", s->flag, s->env, s->key,
			s->def ? s->def : "(unset)", s->help);
	}
}

/* ---- reload on SIGHUP ----------------------------------------------------------------- */

/* What can change under a running daemon: each is read through an atomic or under its
 * owner's lock (util/log.c, intake/ops_events.c, deliver/dispatcher.c). The rest is copied or borrowed by the
 * threads at start (listen, store, tokens, limits, the SSRF policy of the HTTP sink, ...). */
static const char *const reloadable[] = {"log_level", "log_format", "ops_events_limit",
					 "ops_events_window", "log_deliveries", NULL};

int config_setting_reloadable(const struct config_setting *s)
{
	for (const char *const *k = reloadable; *k; k++)
		if (strcmp(*k, s->key) == 0)
			return 1;
	return 0;
}

int config_setting_equal(const struct config *a, const struct config *b,
			 const struct config_setting *s)
{
	const char *pa = (const char *)a + s->offset, *pb = (const char *)b + s->offset;
	switch (s->type) {
	case CONFIG_STRING: {
		const char *x = *(char *const *)pa, *y = *(char *const *)pb;
		return strcmp(x ? x : "", y ? y : "") == 0;
	}
	case CONFIG_INT:
	case CONFIG_BOOL:
		return *(const int *)pa == *(const int *)pb;
	case CONFIG_DURATION:
	case CONFIG_SIZE:
		return *(const int64_t *)pa == *(const int64_t *)pb;
	case CONFIG_NUMBER:
		return *(const double *)pa == *(const double *)pb;
	}
	return 0;
}

/* ---- the effective settings, secrets masked (outboxd check-config) ---------------- */

#define MASK "********"

/* The settings whose whole value is a secret. */
static int is_secret_key(const char *key)
{
	return !strcmp(key, "admin_token") || !strcmp(key, "ingest_token") ||
	       !strcmp(key, "secret_key");
}

/* Appends n bytes of s to the growing string *out (of *len); -1 when out of memory. */
static int append(char **out, size_t *len, const char *s, size_t n)
{
	char *grown = realloc(*out, *len + n + 1);
	if (!grown)
		return -1;
	memcpy(grown + *len, s, n);
	*len += n;
	grown[*len] = '\0';
	*out = grown;
	return 0;
}

/* scheme://user:PASSWORD@host...: the password masked. A libpq keyword string
 * ("host=h password=p") gets its password= value masked. */
static char *mask_url(const char *v)
{
	char *out = NULL;
	size_t len = 0;
	const char *scheme = strstr(v, "://");
	if (scheme) {
		const char *auth = scheme + 3;
		size_t hostpart = strcspn(auth, "/?#");
		const char *at = memchr(auth, '@', hostpart);
		const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
		if (colon) {
			if (append(&out, &len, v, (size_t)(colon + 1 - v)) ||
			    append(&out, &len, MASK, strlen(MASK)))
				goto oom;
			v = at;
		}
	}
	/* keyword form, and password= in a URL's query string */
	for (;;) {
		const char *p = strstr(v, "password=");
		if (!p)
			break;
		if (append(&out, &len, v, (size_t)(p + 9 - v)) || append(&out, &len, MASK, strlen(MASK)))
			goto oom;
		v = p + 9 + strcspn(p + 9, " &;");
	}
	if (append(&out, &len, v, strlen(v)))
		goto oom;
	return out;
oom:
	free(out);
	return NULL;
}

/* key=value<sep>key=value with the values of secret-looking keys masked (all of them
 * when all is set). */
static char *mask_pairs(const char *v, char sep, int all)
{
	char *out = NULL;
	size_t len = 0;
	while (*v) {
		size_t n = strcspn(v, (char[]){sep, 0});
		const char *eq = memchr(v, '=', n);
		int secret = 0;
		if (eq) {
			char name[128];
			size_t kl = (size_t)(eq - v) < sizeof(name) - 1 ? (size_t)(eq - v) : sizeof(name) - 1;
			for (size_t i = 0; i < kl; i++)
				name[i] = (char)tolower((unsigned char)v[i]);
			name[kl] = '\0';
			secret = all || strstr(name, "password") || strstr(name, "secret") ||
				 strstr(name, "key");
		}
		if (secret) {
			if (append(&out, &len, v, (size_t)(eq + 1 - v)) ||
			    append(&out, &len, MASK, strlen(MASK)))
				goto oom;
		} else if (append(&out, &len, v, n)) {
			goto oom;
		}
		v += n;
		if (*v == sep) {
			if (append(&out, &len, &sep, 1))
				goto oom;
			v++;
		}
	}
	if (!out)
		out = strdup("");
	return out;
oom:
	free(out);
	return NULL;
}

char *config_mask_value(const char *key, const char *value)
{
	if (is_secret_key(key))
		return strdup(MASK);
	if (!strcmp(key, "db") || !strcmp(key, "otlp_endpoint") || !strcmp(key, "egress_proxy") ||
	    !strcmp(key, "kafka_schema_registry"))
		return mask_url(value);
	if (!strcmp(key, "kafka_config"))
		return mask_pairs(value, ';', 0);
	if (!strcmp(key, "otlp_headers"))
		return mask_pairs(value, ',', 1);
	return strdup(value);
}

size_t config_secret_flags(int argc, char *const *argv, const struct config_setting **out,
			   size_t max)
{
	size_t n = 0;
	for (int i = 0; i < argc; i++) {
		const char *arg = argv[i], *eq = strchr(arg, '=');
		size_t fl = eq ? (size_t)(eq - arg) : strlen(arg);
		const struct config_setting *s = find_flag(arg, fl);
		if (!s || s->type != CONFIG_STRING)
			continue;
		const char *value = eq ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
		if (!value || !*value)
			continue;
		char *masked = config_mask_value(s->key, value);
		int secret = !masked || strcmp(masked, value) != 0;
		free(masked);
		for (size_t k = 0; k < n && k < max && secret; k++)
			secret = out[k] != s; /* named once */
		if (!secret)
			continue;
		if (n < max)
			out[n] = s;
		n++;
	}
	return n;
}

void config_print_effective(FILE *out, const struct config *cfg)
{
	fprintf(out, "# outboxd: effective settings (secrets masked)%s%s\n",
		cfg->config_file ? ", config file " : "", cfg->config_file ? cfg->config_file : "");
	for (const struct config_setting *s = config_settings; s->key; s++) {
		const char *base = (const char *)cfg + s->offset;
		switch (s->type) {
		case CONFIG_STRING: {
			const char *v = *(char *const *)base;
			if (!v || !*v) {
				fprintf(out, "# %s = (unset)\n", s->key);
				break;
			}
			char *masked = config_mask_value(s->key, v);
			fprintf(out, "%s = \"%s\"\n", s->key, masked ? masked : MASK);
			free(masked);
			break;
		}
		case CONFIG_INT:
			/* an integer without a default reads -1 while unset (max_retries) */
			if (!s->def && *(const int *)base < 0)
				fprintf(out, "# %s = (unset)\n", s->key);
			else
				fprintf(out, "%s = %d\n", s->key, *(const int *)base);
			break;
		case CONFIG_DURATION: {
			/* written as a config file takes it: "5d", not "432000000ms" */
			char text[32];
			fprintf(out, "%s = %s\n", s->key,
				duration_format(*(const int64_t *)base, text, sizeof(text)));
			break;
		}
		case CONFIG_SIZE:
			fprintf(out, "%s = %lld\n", s->key, (long long)*(const int64_t *)base);
			break;
		case CONFIG_NUMBER:
			fprintf(out, "%s = %g\n", s->key, *(const double *)base);
			break;
		case CONFIG_BOOL:
			fprintf(out, "%s = %s\n", s->key, *(const int *)base ? "true" : "false");
			break;
		}
	}
}
