/* main.c: argv, signals and wiring of outboxd. No logic of its own lives here.
 *
 *   outboxd serve [settings]   run the daemon (outboxd serve --help lists settings)
 *   outboxd rotate-key [...]   re-seal subscription credentials under a new key
 *   outboxd check-config [...] validate the settings, print them (secrets masked)
 *   outboxd migrate [...]      apply the store's schema migrations, then exit
 *   outboxd spool ...          inspect or re-insert a spool file (cli/spool_cmd.h)
 *   outboxd version            print the version */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <openssl/rand.h>

#include "api/api.h"
#include "api/http.h"
#include "cli/admin.h"
#include "cli/cli.h"
#include "cli/secret_key.h"
#include "cli/service.h"
#include "cli/spool_cmd.h"
#include "core/authlimit.h"
#include "core/config.h"
#include "core/metrics.h"
#include "core/ssrf.h"
#include "core/token.h"
#include "core/subscriptions.h"
#include "deliver/dispatcher.h"
#include "deliver/sink_kafka.h"
#include "intake/kafka_intake.h"
#include "kafka/dead_letter.h"
#include "intake/ops_events.h"
#include "otel/otlp.h"
#include "jobs/jobs.h"
#include "store/store.h"
#include "store/writer.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

#define OUTBOXD_VERSION "0.1.0"

extern char **environ;

static void usage(FILE *out)
{
	fprintf(out, "usage: outboxd <command> [options]\n\n"
		     "commands:\n"
		     "  serve        run the delivery daemon (outboxd serve --help for settings)\n"
		     "  rotate-key   re-seal subscription credentials under a new key (outboxd stopped)\n"
		     "  check-config validate the settings and print them, secrets masked\n"
		     "  migrate      apply the store's schema migrations without serving\n"
		     "  spool        inspect a spool file, or re-insert it into the store (outboxd spool --help)\n");
	cli_print_groups(out);
	fprintf(out, "  version      print the version\n\n"
		     "outboxd <group> --help lists a group's commands, outboxd <group> <command>\n"
		     "--help a command's options.\n");
}

static char *read_file(const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "config file %s: %s", path, strerror(errno));
		return NULL;
	}
	char *text = NULL;
	size_t len = 0;
	FILE *mem = open_memstream(&text, &len);
	char chunk[4096];
	size_t n;
	while (mem && (n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		fwrite(chunk, 1, n, mem);
	if (mem)
		fclose(mem);
	fclose(f);
	return text;
}

/* The first line of the data directory's file name (what, for messages), or when there
 * is none, the value make writes into out (size bytes), kept there (mode, fsynced; *made
 * set). Returned (free it), path filled; NULL after logging why. */
static char *data_dir_value(const struct config *cfg, const char *name, const char *what,
			    mode_t mode, int (*make)(char *out, size_t size), int *made,
			    char path[4096])
{
	char *dir = config_data_dir(cfg);
	snprintf(path, 4096, "%s/%s", dir, name);
	mkdir(dir, 0700);
	free(dir);

	char value[128] = "";
	FILE *f = fopen(path, "r");
	if (f) {
		if (!fgets(value, sizeof(value), f))
			value[0] = '\0';
		fclose(f);
		value[strcspn(value, "\r\n")] = '\0';
		if (value[0])
			return strdup(value);
	}
	if (make(value, sizeof(value))) {
		log_error("cannot generate %s: no randomness", what);
		return NULL;
	}
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
	if (fd < 0 || write(fd, value, strlen(value)) != (ssize_t)strlen(value) || fsync(fd)) {
		log_error("cannot write %s to %s: %s", what, path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	close(fd);
	*made = 1;
	return strdup(value);
}

static int make_token(char *out, size_t size)
{
	return size > TOKEN_LEN ? token_generate(out) : -1;
}

/* The admin token: configured, or kept in DATA_DIR/admin.token, or generated there once.
 * A generated token is shown only on a terminal: a log (journald, a file) would keep it
 * where whoever reads the log finds it. Returns it (caller frees) or NULL. */
static char *admin_token(const struct config *cfg)
{
	char path[4096];
	struct stat sb;
	int made = 0;
	if (cfg->admin_token)
		return strdup(cfg->admin_token);
	char *token = data_dir_value(cfg, "admin.token", "an admin token", 0600, make_token,
				     &made, path);
	if (!token)
		return NULL;
	if (made && isatty(STDERR_FILENO))
		fprintf(stderr, "\nGenerated an admin token (shown once, kept in %s with mode "
				"0600):\n  %s\n\n", path, token);
	else if (made)
		log_info("generated an admin token into %s (mode 0600); read it there (it is "
			 "printed only on a terminal, never to a log)", path);
	else if (stat(path, &sb) == 0 && (sb.st_mode & 077))
		log_warn("the admin token file %s can be read by others (mode %03o): chmod 600 it",
			 path, (unsigned)(sb.st_mode & 0777));
	return token;
}

static int make_instance_id(char *out, size_t size)
{
	char id[UUID_STR_LEN];
	uuid_v7(id);
	return snprintf(out, size, "outboxd-%s", id) >= (int)size ? -1 : 0;
}

/* This outboxd's id, made once and kept in the data directory (instance.id): the Kafka
 * intake's group.instance.id, so a restarted instance is the same static member of its
 * consumer group and gets its partitions back at once (docs/kafka.md). Returned. */
static char *instance_id(const struct config *cfg)
{
	char path[4096];
	int made = 0;
	char *id = data_dir_value(cfg, "instance.id", "an instance id", 0644, make_instance_id,
				  &made, path);
	if (id && made)
		log_info("kafka intake: this instance is %s (kept in %s)", id, path);
	return id;
}

/* Readiness of the Kafka side: the intake's brokers answer, and no client is being
 * recreated after a fatal error (each says why not). */
struct kafka_readiness {
	struct kafka_intake *intake;          /* NULL: none */
	struct sink *sink;                    /* the Kafka sink, NULL: none */
	struct kafka_dead_letter *dead_letter; /* NULL: none */
};

static int kafka_ready(void *ctx, char *why, size_t whylen)
{
	const struct kafka_readiness *k = ctx;
	if (k->intake && kafka_intake_ready(k->intake, why, whylen))
		return -1;
	if (k->sink && sink_kafka_ready(k->sink, why, whylen))
		return -1;
	if (k->dead_letter && kafka_dead_letter_ready(k->dead_letter, why, whylen))
		return -1;
	return 0;
}

/* A secret given as a flag is in /proc/PID/cmdline, which every local user can read (ps):
 * say so, and which form keeps it out. Once per process (SIGHUP reads argv again). */
static void warn_secret_flags(int argc, char **argv)
{
	static int warned;
	const struct config_setting *s[16];
	size_t n = config_secret_flags(argc, argv, s, sizeof(s) / sizeof(s[0]));

	if (warned)
		return;
	warned = 1;
	for (size_t i = 0; i < n && i < sizeof(s) / sizeof(s[0]); i++)
		log_warn("%s holds a secret, and flags are visible to every user of this machine in "
			 "/proc/%d/cmdline (ps): set %s in the environment, or %s in a config file "
			 "only outboxd's user can read, instead", s[i]->flag, (int)getpid(), s[i]->env,
			 s[i]->key);
}

/* The settings of serve from the config file, the environment and argv (the flags
 * after the command) into cfg. 0, or -1 after printing why (cfg freed). */
static int load_settings(int argc, char **argv, struct config *cfg)
{
	char err[512], *file_text = NULL;
	const char *path = config_file_path(environ, argc, argv);

	warn_secret_flags(argc, argv);

	if (path && !(file_text = read_file(path, err, sizeof(err)))) {
		fprintf(stderr, "outboxd: %s\n", err);
		return -1;
	}
	int rc = config_load(cfg, file_text, environ, argc, argv, err, sizeof(err));
	free(file_text);
	if (rc) {
		fprintf(stderr, "outboxd: %s\n", err);
		config_free(cfg);
	} else if (path && !(cfg->config_file = strdup(path))) {
		config_free(cfg);
		return -1;
	}
	return rc;
}

static int wants_help(int argc, char **argv)
{
	for (int i = 0; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return 1;
	return 0;
}

/* outboxd check-config and outboxd migrate (cli/admin.h): serve's settings. */
static int check_config(int argc, char **argv)
{
	struct config cfg;
	if (wants_help(argc, argv)) {
		admin_check_config_usage(stdout);
		return 0;
	}
	if (load_settings(argc, argv, &cfg))
		return 2;
	int rc = admin_check_config(&cfg, stdout);
	config_free(&cfg);
	return rc ? 2 : 0;
}

static int migrate(int argc, char **argv)
{
	struct config cfg;
	if (wants_help(argc, argv)) {
		admin_migrate_usage(stdout);
		return 0;
	}
	if (load_settings(argc, argv, &cfg))
		return 2;
	enum log_level level;
	if (log_level_parse(cfg.log_level, &level) == 0)
		log_set_level(level);
	int rc = admin_migrate(&cfg);
	config_free(&cfg);
	return rc;
}

/* outboxd rotate-key: serve's settings (the store, the old key) plus --new-secret-key
 * (or OUTBOXD_NEW_SECRET_KEY, which keeps it out of the process list). */
static int rotate_key(int argc, char **argv)
{
	const char *new_key = getenv("OUTBOXD_NEW_SECRET_KEY");
	struct config cfg;
	int n = 0, from_flag = 0;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			secret_key_rotate_usage(stdout);
			return 0;
		} else if (strcmp(argv[i], "--new-secret-key") == 0 && i + 1 < argc) {
			new_key = argv[++i];
			from_flag = 1;
		} else if (strncmp(argv[i], "--new-secret-key=", 17) == 0) {
			new_key = argv[i] + 17;
			from_flag = 1;
		} else if (strcmp(argv[i], "--new-secret-key") == 0) {
			fprintf(stderr, "outboxd: --new-secret-key needs a value\n");
			return 2;
		} else {
			argv[n++] = argv[i];
		}
	}
	if (from_flag)
		log_warn("--new-secret-key holds a secret, and flags are visible to every user of "
			 "this machine in /proc/%d/cmdline (ps): set OUTBOXD_NEW_SECRET_KEY in the "
			 "environment instead", (int)getpid());
	if (load_settings(n, argv, &cfg))
		return 2;
	int rc = secret_key_rotate(&cfg, new_key && *new_key ? new_key : NULL);
	config_free(&cfg);
	return rc;
}

static void wake_dispatcher(void *ctx)
{
	dispatcher_wake(ctx);
}

/* Another instance changed the subscriptions (PostgreSQL): rebuild the in-memory set. */
struct subs_reload {
	store *st;
	struct sub_registry *reg;
	struct retry_policy defaults;
};

static void reload_subscriptions(void *ctx)
{
	struct subs_reload *r = ctx;
	int was_current = sub_registry_current(r->reg, NULL, 0);
	int rc = store_subs_load(r->st, r->reg, &r->defaults);

	if (rc != STORE_OK && was_current)
		log_error("cannot reload the subscriptions (%s): ingest answers 503 "
			  "subscriptions_unavailable until they are read again (tried every second)",
			  store_strerror(rc));
	else if (rc == STORE_OK && !was_current)
		log_info("subscriptions read again: ingest accepts events");
}

/* Endpoint health: the dispatcher found every attempt of a subscription failing for
 * disable_after. Its pending deliveries stay; an operator enables it again. */
static void disable_subscription(void *ctx, const char *id, const char *reason)
{
	struct subs_reload *r = ctx;
	int rc = store_sub_disable(r->st, id, reason, clock_now_ms());
	if (rc != STORE_OK) {
		log_error("subscription %s: cannot disable it: %s (it is asked again after its next "
			  "failure streak)", id, store_strerror(rc));
		return;
	}
	metrics_subscription_disabled();
	reload_subscriptions(r);
}

static void wake_jobs(void *ctx)
{
	jobs_wake(ctx);
}

/* Each delivery in flight holds a connection, each API client another: the soft limit of
 * file descriptors (often 1024) goes up to the hard one, and a limit still too low for the
 * settings is said at start rather than found as failed connections under load. */
static void raise_fd_limit(const struct config *cfg)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl))
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			log_warn("cannot raise the file descriptor limit: %s", strerror(errno));
		getrlimit(RLIMIT_NOFILE, &rl);
	}
	rlim_t need = (rlim_t)cfg->max_in_flight + (rlim_t)cfg->api_max_connections + 64;
	if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < need)
		log_warn("file descriptor limit %llu is below max_in_flight + api_max_connections "
			 "(%llu needed): raise it (ulimit -n, LimitNOFILE=)",
			 (unsigned long long)rl.rlim_cur, (unsigned long long)need);
}

static int serve(int argc, char **argv)
{
	struct config cfg;
	char err[512];
	char *token = NULL;
	store *st = NULL;
	struct sub_registry reg;
	struct dispatcher *disp = NULL;
	struct sink *http_sink = NULL, *kafka_sink = NULL;
	struct kafka_intake *intake = NULL;
	struct kafka_dead_letter *dead_letter = NULL;
	char *kafka_instance = NULL;
	struct writer *writer = NULL;
	struct spool *spool = NULL;
	struct jobs *jobs = NULL;
	struct http_server *http = NULL;
	struct api_tokens *tokens = NULL;
	struct authlimit *authlimit = NULL;
	struct ops_events *ops = NULL;
	int rc = 1;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			printf("usage: outboxd serve [--setting value ...]\n\n");
			config_print_help(stdout);
			return 0;
		}
	}
	if (load_settings(argc, argv, &cfg))
		return 2;
	enum log_level level;
	if (log_level_parse(cfg.log_level, &level)) {
		fprintf(stderr, "outboxd: log_level must be debug, info, warn or error\n");
		config_free(&cfg);
		return 2;
	}
	log_set_level(level);
	enum log_format format;
	if (log_format_parse(cfg.log_format, &format)) {
		fprintf(stderr, "outboxd: log_format must be json, text or auto\n");
		config_free(&cfg);
		return 2;
	}
	log_set_format(format);

	/* Signals are taken by sigwait below; every thread started after this inherits
	 * the mask, so none of them is interrupted. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGHUP); /* reload (cli/service.h) */
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit(&cfg);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	sub_registry_init(&reg);

	char host[128] = "localhost", owner[192];
	gethostname(host, sizeof(host) - 1);
	snprintf(owner, sizeof(owner), "%s:%d", host, (int)getpid());
	if (store_open(cfg.db, owner, &st, err, sizeof(err))) {
		log_error("cannot open the store: %s", err);
		goto out;
	}
	if (strcmp(store_backend_name(st), "sqlite") == 0) {
		/* One outboxd owns an SQLite store (the lock says so): leases left by an
		 * earlier run of it are stale now. */
		size_t n = 0;
		if (store_release_all(st, &n) == STORE_OK && n)
			log_warn("returned %zu deliveries left in flight by the previous run", n);
	}
	/* Subscription credentials are sealed in the store: the key first, before anything
	 * reads a subscription (cli/secret_key.h). */
	if ((rc = secret_key_serve(&cfg, st)) != 0) {
		rc = rc == 2 ? 2 : 1; /* 2: this key is not the store's; a restart cannot help */
		goto out;
	}
	rc = 1;
	if (!(token = admin_token(&cfg)))
		goto out;

	struct retry_policy defaults;
	config_retry_defaults(&cfg, &defaults);
	if (store_subs_load(st, &reg, &defaults)) {
		log_error("cannot load subscriptions");
		goto out;
	}

	if (cfg.spool && *cfg.spool) {
		/* Seed 004's catastrophic-failure spool: opened (and checked) before any
		 * request is accepted; what an earlier run left is replayed soon after. */
		struct spool_report rep;
		int src = spool_open(cfg.spool, &spool, &rep);
		if (src != SPOOL_OK) {
			log_error("cannot open the spool %s: %s", cfg.spool, spool_strerror(src));
			goto out;
		}
		spool_log_report(spool, &rep);
		if (rep.good)
			log_warn("spool: %s holds %zu records from an earlier run; replaying them",
				 cfg.spool, rep.good);
	}
	/* The SSRF guard (core/ssrf.h): private, loopback, link-local and metadata addresses
	 * are refused unless ssrf_allow lets them through. */
	struct ssrf_policy ssrf;
	if (ssrf_policy_parse(cfg.ssrf_allow, &ssrf, err, sizeof(err))) {
		log_error("%s", err);
		goto out;
	}
	if (ssrf.n_allow)
		log_info("SSRF guard: deliveries may also go to %s (ssrf_allow)", cfg.ssrf_allow);
	struct sink_http_settings http_set = {
		.max_connections = cfg.max_in_flight,
		.lean = cfg.lean_http,
		.connect_timeout_ms = cfg.connect_timeout_ms,
		.ssrf = &ssrf,
		.tls_dir = cfg.tls_dir,
		.egress_proxy = cfg.egress_proxy,
	};
	if (cfg.egress_proxy && *cfg.egress_proxy) {
		char *shown = config_mask_value("egress_proxy", cfg.egress_proxy);
		log_info("deliveries and OAuth2 token requests go through the egress proxy %s "
			 "(CONNECT to addresses the SSRF guard checked)", shown ? shown : "");
		free(shown);
	}
	if (!(http_sink = sink_http_open(&http_set, err, sizeof(err)))) {
		log_error("%s", err);
		goto out;
	}
	/* Kafka (DESIGN §7): the sink publishes kafka:// subscriptions and dead-letter
	 * topics; the intake consumes kafka_intake. Off unless kafka_brokers is set. */
	struct kafka_settings kafka = {
		.brokers = cfg.kafka_brokers,
		.properties = cfg.kafka_config,
		.group = cfg.kafka_group,
		.intake = cfg.kafka_intake,
		.dead_letter = cfg.kafka_dead_letter,
		.wire = strcmp(cfg.kafka_wire_format, "confluent") == 0 ? ENVELOPE_WIRE_CONFLUENT
									: ENVELOPE_WIRE_PLAIN,
		.schema_id = (uint32_t)cfg.kafka_schema_id,
		.max_backlog = cfg.kafka_max_backlog,
	};
	int kafka_on = cfg.kafka_brokers && *cfg.kafka_brokers;
	if (kafka_on && cfg.kafka_intake && *cfg.kafka_intake &&
	    !(kafka.instance_id = kafka_instance = instance_id(&cfg)))
		goto out;
	if (kafka_on && !(kafka_sink = sink_kafka_open(&kafka, err, sizeof(err)))) {
		log_error("%s", err);
		goto out;
	}
	/* reloads the set when another instance changed it, or after a disable */
	struct subs_reload reload = {st, &reg, defaults};
	struct dispatcher_config dcfg = {
		.max_in_flight = cfg.max_in_flight,
		.batch = cfg.retry_batch,
		.lease_ms = cfg.lease_ms,
		.connect_timeout_ms = cfg.connect_timeout_ms,
		.shutdown_grace_ms = cfg.shutdown_grace_ms,
		.disabled_delay_ms = 5000,
		.sinks = {http_sink, kafka_sink},
		.n_sinks = kafka_sink ? 2 : 1,
		.dead_letter_kafka = kafka_on && cfg.kafka_dead_letter && *cfg.kafka_dead_letter,
		.disable_after_ms = cfg.disable_after_ms,
		.disable = disable_subscription,
		.disable_ctx = &reload,
		.log_deliveries = cfg.log_deliveries,
	};
	/* OpenTelemetry (otel/otlp.h): a span per attempt and the counters, when asked for;
	 * started before the dispatcher reports to it, stopped after. */
	if (cfg.otlp_endpoint && *cfg.otlp_endpoint) {
		if (otlp_start(cfg.otlp_endpoint, cfg.otlp_headers, owner, OUTBOXD_VERSION,
			       cfg.otlp_interval_ms, err, sizeof(err))) {
			log_error("%s", err);
			goto out;
		}
		char *shown = config_mask_value("otlp_endpoint", cfg.otlp_endpoint);
		log_info("OpenTelemetry: exporting attempt spans and counters to %s (otlp_endpoint)",
			 shown ? shown : "the collector");
		free(shown);
	}
	/* The one writer of ingest, claims and results (store/writer.h), and the
	 * dispatcher, its client. */
	if (!(writer = writer_start(st, spool)))
		goto out;
	/* outboxd's own operational events, stored through the writer like any event */
	if (!(ops = ops_events_start(writer, &reg, cfg.ops_events_limit,
				     cfg.ops_events_window_ms)))
		goto out;
	dcfg.ops = (struct ops_event_hook){ops_events_emit, ops};
	if (!(disp = dispatcher_start(writer, &reg, &dcfg)))
		goto out;
	writer_on_commit(writer, wake_dispatcher, disp);
	/* Work made due by other instances or producers (PostgreSQL NOTIFY) wakes the
	 * dispatcher at once; polling stays the fallback. Subscriptions changed by another
	 * instance are reloaded. */
	store_on_subscriptions_changed(st, reload_subscriptions, &reload);
	store_on_work(st, wake_dispatcher, disp);
	/* dead deliveries marked for their dead-letter topic: published by their own relay */
	if (dcfg.dead_letter_kafka &&
	    !(dead_letter = kafka_dead_letter_start(st, &reg, &kafka, err, sizeof(err)))) {
		log_error("%s", err);
		goto out;
	}
	if (kafka_on && cfg.kafka_intake && *cfg.kafka_intake) {
		struct kafka_intake_config kcfg = {
			.settings = &kafka,
			.defaults = defaults,
			.retry_interval_ms = cfg.retry_interval_ms,
			.max_payload = cfg.max_payload,
			.writer = writer,
			.wake = wake_dispatcher,
			.wake_ctx = disp,
		};
		if (!(intake = kafka_intake_start(st, &reg, &kcfg, err, sizeof(err)))) {
			log_error("%s", err);
			goto out;
		}
	}
	struct jobs_config jcfg = {
		.relay_interval_ms = cfg.relay_interval_ms,
		.reap_interval_ms = cfg.reap_interval_ms,
		.cleanup_enabled = cfg.cleanup_enabled,
		.cleanup_interval_ms = cfg.cleanup_interval_ms,
		.cleanup_after_ms = cfg.cleanup_after_ms,
		.ops = {ops_events_emit, ops},
		.reload_subs = reload_subscriptions,
		.reload_ctx = &reload,
	};
	if (!(jobs = jobs_start(st, &reg, &jcfg, wake_dispatcher, disp)))
		goto out;

	if (!(tokens = api_tokens_new(st)))
		goto out;
	uint32_t hash_key;
	if (RAND_bytes((unsigned char *)&hash_key, sizeof(hash_key)) != 1 ||
	    !(authlimit = authlimit_new(hash_key))) {
		log_error("cannot set up the API's limit of failed authentications");
		goto out;
	}
	struct kafka_readiness kafka_readiness = {intake, kafka_sink, dead_letter};
	struct api api = {
		.st = st,
		.reg = &reg,
		.writer = writer,
		.spool = spool,
		.wake = wake_dispatcher,
		.wake_ctx = disp,
		.wake_jobs = wake_jobs,
		.wake_jobs_ctx = jobs,
		.replay_rate = cfg.replay_rate,
		.metrics_private = !cfg.metrics_public,
		.stats_window_ms = cfg.stats_window_ms,
		.admin_token = token,
		.ingest_token = cfg.ingest_token,
		.tokens = tokens,
		.authlimit = authlimit,
		.max_payload = cfg.max_payload,
		.max_request = cfg.max_request,
		.retry_defaults = defaults,
		.tls_dir = cfg.tls_dir,
		.ready = kafka_on ? kafka_ready : NULL,
		.ready_ctx = &kafka_readiness,
	};
	struct http_limits limits = {
		.threads = cfg.api_threads,
		.max_connections = cfg.api_max_connections,
		.max_connections_per_ip = cfg.api_max_connections_per_ip,
		.idle_timeout_ms = cfg.api_idle_timeout_ms,
		.request_timeout_ms = cfg.api_request_timeout_ms,
		.body_memory = cfg.api_body_memory,
	};
	struct http_tls tls = {cfg.tls_cert, cfg.tls_key, cfg.tls_priorities};
	int tls_on = cfg.tls_cert && *cfg.tls_cert;
	const char *scheme = tls_on ? "https" : "http";
	if (!(http = http_server_start(&api, cfg.listen, &limits, tls_on ? &tls : NULL, err,
				       sizeof(err)))) {
		log_error("%s", err);
		goto out;
	}
	log_info("outboxd %s listening on %s://%s (store: %s)", OUTBOXD_VERSION, scheme,
		 cfg.listen, store_backend_name(st));
	if (isatty(STDERR_FILENO))
		fprintf(stderr,
			"\nSend a first event (the token is the admin token%s):\n"
			"  curl -X POST %s://%s/v1/events -H \"Authorization: Bearer $TOKEN\" \\\n"
			"    -H 'Content-Type: application/json' \\\n"
			"    -d '{\"event_type\":\"user.created\",\"payload\":{\"id\":1}}'\n"
			"Create a subscription first to have it delivered: see README.md, Quickstart.\n\n",
			cfg.admin_token ? "" : ", kept in the data folder as admin.token", scheme,
			cfg.listen);

	/* Under systemd (Type=notify): ready now that the store is open and the API
	 * listens; then the watchdog from this loop, which checks that the dispatcher turns;
	 * SIGHUP reloads what can change without a restart (cli/service.h). */
	service_ready(scheme, cfg.listen, store_backend_name(st));
	int64_t watchdog_us = service_watchdog_interval_us();
	int sig = 0;
	for (;;) {
		if (watchdog_us) {
			struct timespec every = {(time_t)(watchdog_us / 1000000),
						 (long)(watchdog_us % 1000000) * 1000};
			sig = sigtimedwait(&sigs, NULL, &every);
			service_watchdog(disp);
			if (sig < 0)
				continue; /* the interval passed (or EINTR) */
		} else if (sigwait(&sigs, &sig) != 0) {
			continue;
		}
		if (sig != SIGHUP)
			break;
		service_reloading();
		log_info("received SIGHUP: reloading the settings%s%s",
			 cfg.config_file ? " from " : "", cfg.config_file ? cfg.config_file : "");
		struct config fresh;
		if (load_settings(argc, argv, &fresh) == 0) {
			service_reload(&cfg, &fresh, ops, disp);
			config_free(&fresh);
		} else {
			log_error("reload: the settings do not load (see above); keeping the running ones");
		}
		service_ready(scheme, cfg.listen, store_backend_name(st));
	}
	service_stopping();
	log_info("received %s: stopping intake, finishing in-flight deliveries",
		 sig == SIGTERM ? "SIGTERM" : "SIGINT");
	rc = 0;
out:
	/* Order: no new requests, no new relayed rows (what was accepted is committed:
	 * ingest callers wait for their commit), then let the dispatcher finish or hand
	 * back its work through the writer, then stop the writer. */
	http_server_stop(http);
	kafka_intake_stop(intake); /* stored batches are committed, the rest is read again */
	jobs_stop(jobs);
	if (writer)
		writer_on_commit(writer, NULL, NULL); /* no wake-up may reach a stopped dispatcher */
	store_on_work(st, NULL, NULL);
	store_on_subscriptions_changed(st, NULL, NULL);
	dispatcher_stop(disp);
	otlp_stop(); /* after the dispatcher, which reports attempts to it */
	ops_events_stop(ops); /* after what emits them, before the writer that stores them */
	writer_stop(writer);
	kafka_dead_letter_stop(dead_letter); /* after the last results (and marks) are written */
	sink_close(http_sink); /* after the dispatcher, whose jobs they served */
	sink_close(kafka_sink);
	spool_close(spool); /* after the dispatcher, which may spool its last results */
	store_close(st);
	sub_registry_destroy(&reg);
	curl_global_cleanup();
	api_tokens_free(tokens);
	authlimit_free(authlimit);
	free(token);
	free(kafka_instance);
	config_free(&cfg);
	if (rc == 0)
		log_info("stopped cleanly");
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "serve") == 0)
		return serve(argc - 2, argv + 2);
	if (strcmp(argv[1], "rotate-key") == 0)
		return rotate_key(argc - 2, argv + 2);
	if (strcmp(argv[1], "check-config") == 0)
		return check_config(argc - 2, argv + 2);
	if (strcmp(argv[1], "migrate") == 0)
		return migrate(argc - 2, argv + 2);
	if (strcmp(argv[1], "spool") == 0)
		return spool_cmd_main(argc - 2, argv + 2, load_settings);
	/* CLI: the group may follow global options (outboxd --url U dlq list). */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--url") == 0 || strcmp(argv[i], "--token") == 0) {
			i++;
			continue;
		}
		if (strncmp(argv[i], "--", 2) == 0)
			continue;
		if (!cli_is_group(argv[i]))
			break;
		char *group = argv[i];
		memmove(argv + 2, argv + 1, (size_t)(i - 1) * sizeof(*argv));
		argv[1] = group;
		return cli_main(argc - 1, argv + 1);
	}
	if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
		printf("outboxd %s\n", OUTBOXD_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "outboxd: unknown command \"%s\"\n", argv[1]);
	usage(stderr);
	return 2;
}
