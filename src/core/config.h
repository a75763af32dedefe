/* config.h: every setting of `outboxd serve`, with its three forms (their names are a
 * contract: docs/contracts.md).
 *
 * Precedence: command-line flag (--db) > environment (OUTBOXD_DB) > config file (db =)
 * > default. Parsing is pure: the caller hands over argv, the environment and the file
 * text; nothing here touches the file system. */
#ifndef OUTBOXD_CORE_CONFIG_H
#define OUTBOXD_CORE_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct config {
	char *db;                 /* sqlite:PATH or postgres://... */
	char *listen;             /* host:port of the API */
	char *grpc_listen;        /* host:port of the gRPC ingest; NULL or "" = off */
	char *data_dir;           /* where the generated admin token and secret key are kept */
	char *admin_token;
	char *ingest_token;
	char *secret_key;         /* seals subscription credentials; NULL = DATA_DIR/secret.key */
	char *log_level;
	char *log_format;
	int64_t max_payload;      /* bytes per event payload */
	int64_t max_request;      /* bytes per request body */
	int api_threads;
	int api_max_connections;    /* open API connections at most */
	int64_t api_idle_timeout_ms; /* an API connection silent this long is closed */
	int api_max_connections_per_ip; /* of which one client address holds; 0 = no limit */
	int64_t api_request_timeout_ms; /* a request must arrive whole within this */
	int64_t api_body_memory;    /* request bodies in memory at once, bytes */
	/* delivery and retries (the defaults of subscriptions) */
	int immediate_tries;
	int64_t immediate_delay_ms;
	int64_t delivery_timeout_ms;
	int64_t retry_interval_ms;
	int max_retries;
	int64_t retry_timeout_ms;
	char *retry_policy;       /* fixed, linear or exponential */
	int64_t retry_min_delay_ms;
	int64_t retry_max_delay_ms;
	double retry_factor;
	double retry_jitter;
	int64_t retry_after_max_ms;
	int retry_batch;
	int max_in_flight;
	int lean_http;            /* plain http:// over deliver/http_wire.c, not libcurl */
	int64_t connect_timeout_ms; /* a delivery's connect; its timeout starts after */
	int64_t lease_ms;
	/* jobs */
	int64_t relay_interval_ms;
	int relay_batch;
	int64_t reap_interval_ms;
	int cleanup_enabled;
	int64_t cleanup_interval_ms;
	int64_t cleanup_after_ms;   /* retention of PROCESSED deliveries */
	int64_t shutdown_grace_ms;
	/* operations */
	int replay_rate;          /* default pace of filter replays, deliveries/s */
	int metrics_public;       /* /metrics without a token */
	int64_t stats_window_ms;  /* window of per-subscription stats */
	char *spool;              /* catastrophic-failure spool file, NULL or "" = off */
	int64_t disable_after_ms; /* a subscription failing this long is disabled; 0 = never */
	int ops_events_limit;     /* operational events per subscription and kind a window */
	int64_t ops_events_window_ms;
	int log_deliveries;       /* an audit log line per delivery outcome */
	char *ssrf_allow;         /* CIDRs the SSRF guard lets through; NULL or "" = none */
	char *egress_proxy;       /* http://host:port of a CONNECT proxy for deliveries; NULL = none */
	char *tls_dir;            /* subscriptions' TLS files lie inside it; "" = none */
	char *tls_cert;           /* PEM certificate (chain) of the API; NULL = plain HTTP */
	char *tls_key;            /* its PEM private key; set with tls_cert or not at all */
	char *tls_priorities;     /* GnuTLS priority string of the API's HTTPS */
	/* Kafka (docs/kafka.md) */
	char *kafka_brokers;      /* NULL or "" = Kafka off */
	char *kafka_config;       /* extra librdkafka properties, "k=v;k=v" (secrets) */
	char *kafka_group;
	char *kafka_intake;       /* TOPIC[:FORMAT],... */
	char *kafka_dead_letter;  /* topic, {topic} = the source topic; NULL = off */
	char *kafka_wire_format;  /* plain or confluent */
	int kafka_schema_id;
	char *kafka_schema_registry; /* Schema Registry URL (confluent); NULL = kafka_schema_id */
	int kafka_max_backlog;
	/* OpenTelemetry (otel/otlp.h): off unless otlp_endpoint is set */
	char *otlp_endpoint;      /* base URL of an OTLP/HTTP collector, e.g. http://host:4318 */
	char *otlp_protocol;      /* http/protobuf or http/json */
	char *otlp_compression;   /* none or gzip */
	int64_t otlp_interval_ms; /* how often the counters are exported */
	char *otlp_headers;       /* Name=value,... sent with every export (secrets) */
	char *config_file;        /* the file that was read, if any */
};

enum config_type { CONFIG_STRING, CONFIG_INT, CONFIG_DURATION, CONFIG_BOOL, CONFIG_SIZE,
		   CONFIG_NUMBER /* a double, e.g. 2 or 0.25 */ };

struct config_setting {
	const char *key;          /* file key, e.g. "retry_interval" */
	const char *flag;         /* "--retry-interval" */
	const char *env;          /* "OUTBOXD_RETRY_INTERVAL" */
	enum config_type type;
	const char *def;          /* default, as text; NULL = unset */
	size_t offset;            /* into struct config */
	const char *help;
};

/* The table of settings, terminated by an entry with key == NULL. */
extern const struct config_setting config_settings[];

/* Fills cfg with defaults, then the file text (may be NULL), then envp, then argv
 * (argv[0..argc) holds only the flags after the subcommand). On error returns -1 and
 * writes a message naming the key to err. The config file path itself is found by the
 * caller with config_file_path(). */
int config_load(struct config *cfg, const char *file_text, char *const *envp, int argc,
		char *const *argv, char *err, size_t errlen);

/* Splits listen ("host:port", "[v6]:port") into host (brackets removed) and port
 * (decimal, 0 to 65535; 0 asks the system for a free port). 0, or -1 with a message in
 * err naming the setting. */
int config_listen_split(const char *listen, char *host, size_t hostlen, char *port,
			size_t portlen, char *err, size_t errlen);

/* The --config flag or OUTBOXD_CONFIG; without either, the installed default
 * (config_default_file); NULL when there is none or it was given empty (--config "").
 * Borrowed from argv/envp. */
const char *config_file_path(char *const *envp, int argc, char *const *argv);

/* The configuration file an installed outboxd reads when given none (fixed at build
 * time: /etc/outboxd/outboxd.conf for the package), or NULL for a development build. */
const char *config_default_file(void);

void config_free(struct config *cfg);

/* The default retry policy of subscriptions, from the retry settings of a loaded cfg
 * (config_load has validated them). */
struct retry_policy;
void config_retry_defaults(const struct config *cfg, struct retry_policy *p);

/* The folder for generated state (admin.token, secret.key): data_dir, or the SQLite
 * file's folder, or ./var. Returned (free it); NULL when out of memory. */
char *config_data_dir(const struct config *cfg);

/* Prints every setting with its flag, variable, default and help. */
void config_print_help(FILE *out);

/* 1 when setting s has the same value in a and b. */
int config_setting_equal(const struct config *a, const struct config *b,
			 const struct config_setting *s);

/* 1 when a running outboxd takes a new value of s on SIGHUP (log_level, log_format,
 * ops_events_limit, ops_events_window, log_deliveries); every other setting needs a
 * restart. */
int config_setting_reloadable(const struct config_setting *s);

/* Prints the effective value of every setting of cfg as config-file lines ("key = value";
 * an unset one as a comment), secrets masked: the tokens and secret_key as "********", the
 * password of a URL's user info (db, otlp_endpoint) and of a libpq "password=" keyword, and
 * the value of every kafka_config property whose name holds "password", "secret" or
 * "key" (ssl.key.pem, sasl.password, ...), and every value of otlp_headers. For `outboxd check-config`. */
void config_print_effective(FILE *out, const struct config *cfg);

/* The text of value with its secrets masked as config_print_effective does for the
 * setting key; returned (free it), NULL when out of memory. */
char *config_mask_value(const char *key, const char *value);

/* The settings argv (the flags after the command, as config_load takes them) gives a
 * secret value as a flag: a token or key, or a value config_mask_value would mask (a
 * password in db, a kafka_config secret, otlp_headers). Such a value is visible to every
 * user of the machine in /proc/PID/cmdline; the caller says so. Fills out with up to max
 * of them (borrowed from config_settings) and returns how many there are. */
size_t config_secret_flags(int argc, char *const *argv, const struct config_setting **out,
			   size_t max);

#endif
