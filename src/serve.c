/* serve.c: `outboxd serve`, the daemon assembled from its parts in four steps (serve.h):
 *
 *   serve_open   what can fail before a thread runs: the store (its migrations), the
 *                sealing key, the admin token, the subscriptions, the spool, the sinks
 *   serve_start  the threads, each after what it uses: OpenTelemetry, the writer,
 *                operational events, the dispatcher, the dead-letter relay, the Kafka
 *                intake, the janitor, then the API and the gRPC ingest (ready from here on)
 *   serve_wait   signals: SIGHUP reloads what can change live, SIGTERM or SIGINT ends
 *                the wait; the systemd watchdog is fed while the dispatcher turns
 *   serve_stop   the reverse: no new requests or rows, in-flight work finished or
 *                handed back through the writer, then the writer, sinks and store
 *
 * docs/ARCHITECTURE.md names the threads; docs/deployment.md the signals and exit codes. */
#include "serve.h"

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
#include "cli/secret_key.h"
#include "cli/service.h"
#include "cli/settings.h"
#include "core/authlimit.h"
#include "core/config.h"
#include "core/metrics.h"
#include "core/subscriptions.h"
#include "core/token.h"
#include "deliver/dispatcher.h"
#include "deliver/sink.h"
#include "intake/grpc_intake.h"
#include "intake/kafka_intake.h"
#include "intake/ops_events.h"
#include "janitor/janitor.h"
#include "kafka/dead_letter.h"
#include "otel/otlp.h"
#include "store/store.h"
#include "store/writer.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

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

/* Readiness beyond the store: the Kafka intake's brokers answer, and no sink or relay is
 * recreating its client after a fatal error (each says why not). */
struct readiness {
	struct kafka_intake *intake;          /* NULL: none */
	const struct sink_set *sinks;         /* the open sinks */
	struct kafka_dead_letter *dead_letter; /* NULL: none */
};

static int daemon_ready(void *ctx, char *why, size_t whylen)
{
	const struct readiness *k = ctx;
	if (k->intake && kafka_intake_ready(k->intake, why, whylen))
		return -1;
	if (sink_set_ready(k->sinks, why, whylen))
		return -1;
	if (k->dead_letter && kafka_dead_letter_ready(k->dead_letter, why, whylen))
		return -1;
	return 0;
}

static void wake_dispatcher(void *ctx)
{
	dispatcher_wake(ctx);
}

/* Subscriptions changed (PostgreSQL: any instance, this one included): those named are
 * read again one by one, all of them when none is named. */
struct subs_reload {
	store *st;
	struct sub_registry *reg;
	struct retry_policy defaults;
};

static void subscriptions_changed(void *ctx, const char (*ids)[UUID_STR_LEN], size_t n)
{
	struct subs_reload *r = ctx;
	int was_current = sub_registry_current(r->reg, NULL, 0);
	int rc = STORE_OK;

	if (!n)
		rc = store_subs_load(r->st, r->reg, &r->defaults);
	/* each falls back to reading them all when its row cannot be read */
	for (size_t i = 0; i < n && rc == STORE_OK; i++)
		rc = store_subs_load_one(r->st, r->reg, &r->defaults, ids[i]);
	/* said when it changes whether ingest is served */
	if (rc != STORE_OK && was_current)
		log_error("cannot reload the subscriptions (%s): ingest answers 503 "
			  "subscriptions_unavailable until they are read again (tried every second)",
			  store_strerror(rc));
	else if (rc == STORE_OK && !was_current)
		log_info("subscriptions read again: ingest accepts events");
}

/* The janitor's retry while the set is stale: all of them. */
static void reload_subscriptions(void *ctx)
{
	subscriptions_changed(ctx, NULL, 0);
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
	if ((rc = store_subs_load_one(r->st, r->reg, &r->defaults, id)) != STORE_OK)
		log_error("subscription %s: disabled, but the subscriptions cannot be read again "
			  "(%s): ingest answers 503 subscriptions_unavailable until they are (tried "
			  "every second)", id, store_strerror(rc));
}

static void wake_jobs(void *ctx)
{
	janitor_wake(ctx);
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

/* Everything serve runs, from open to stop. Settings structs the threads keep pointers
 * to (the API's, the dispatcher's, Kafka's, the SSRF policy) live here too. */
struct server {
	const char *version;
	int argc;
	char **argv;
	struct config cfg;
	sigset_t sigs;
	char owner[192];             /* host:pid, the store's lease owner */
	char *token;                 /* the admin token */
	store *st;
	struct sub_registry reg;
	struct retry_policy defaults;
	struct subs_reload reload;   /* reloads the set when another instance changed it, or
	                                after a disable */
	struct spool *spool;
	struct sink_set sinks;       /* every member of the sink family whose settings are set */
	struct kafka_settings kafka; /* the intake's and the dead-letter relay's */
	int kafka_on;
	char *kafka_instance;
	struct dispatcher_config dcfg;
	struct writer *writer;
	struct ops_events *ops;
	struct dispatcher *disp;
	struct kafka_dead_letter *dead_letter;
	struct kafka_intake *intake;
	struct janitor *janitor;
	struct api_tokens *tokens;
	struct authlimit *authlimit;
	struct readiness readiness;
	struct api api;
	struct http_server *http;
	struct grpc_intake *grpc;    /* the gRPC ingest, NULL: grpc_listen is off */
	const char *scheme;
};

/* The sinks (deliver/sink.h): every member of the family whose settings are present
 * (HTTP always, Kafka with kafka_brokers), and the Kafka settings the intake and the
 * dead-letter relay share. 0, or 1 after logging. */
static int open_sinks(struct server *s)
{
	char err[512];
	const struct config *cfg = &s->cfg;
	if (sink_set_open(&s->sinks, cfg, err, sizeof(err))) {
		log_error("%s", err);
		return 1;
	}
	/* Kafka (docs/kafka.md): the sink publishes kafka:// subscriptions, the relay
	 * dead-letter topics, the intake consumes kafka_intake. Off unless kafka_brokers is
	 * set. */
	kafka_settings_from_config(cfg, &s->kafka);
	s->kafka_on = kafka_settings_on(&s->kafka);
	if (s->kafka_on && cfg->kafka_intake && *cfg->kafka_intake &&
	    !(s->kafka.instance_id = s->kafka_instance = instance_id(cfg)))
		return 1;
	return 0;
}

/* What can fail before a thread runs. 0; 2 when a restart cannot help (the key is not
 * the store's); 1 otherwise, after logging why. */
static int serve_open(struct server *s)
{
	char err[512];
	const struct config *cfg = &s->cfg;

	/* Signals are taken by sigwait in serve_wait; every thread started after this
	 * inherits the mask, so none of them is interrupted. */
	sigemptyset(&s->sigs);
	sigaddset(&s->sigs, SIGTERM);
	sigaddset(&s->sigs, SIGINT);
	sigaddset(&s->sigs, SIGHUP); /* reload (cli/service.h) */
	pthread_sigmask(SIG_BLOCK, &s->sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit(cfg);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	sub_registry_init(&s->reg);

	char host[128] = "localhost";
	gethostname(host, sizeof(host) - 1);
	snprintf(s->owner, sizeof(s->owner), "%s:%d", host, (int)getpid());
	if (store_open(cfg->db, s->owner, &s->st, err, sizeof(err))) {
		log_error("cannot open the store: %s", err);
		return 1;
	}
	if (strcmp(store_backend_name(s->st), "sqlite") == 0) {
		/* One outboxd owns an SQLite store (the lock says so): leases left by an
		 * earlier run of it are stale now. */
		size_t n = 0;
		if (store_release_all(s->st, &n) == STORE_OK && n)
			log_warn("returned %zu deliveries left in flight by the previous run", n);
	}
	/* Subscription credentials are sealed in the store: the key first, before anything
	 * reads a subscription (cli/secret_key.h). 2: this key is not the store's, a restart
	 * cannot help. */
	int rc = secret_key_serve(cfg, s->st);
	if (rc != 0)
		return rc == 2 ? 2 : 1;
	if (!(s->token = admin_token(cfg)))
		return 1;
	config_retry_defaults(cfg, &s->defaults);
	if (store_subs_load(s->st, &s->reg, &s->defaults)) {
		log_error("cannot load subscriptions");
		return 1;
	}
	s->reload = (struct subs_reload){s->st, &s->reg, s->defaults};
	if (cfg->spool && *cfg->spool) {
		/* The spool for when the store is down: opened (and checked) before any
		 * request is accepted; what an earlier run left is replayed soon after. */
		struct spool_report rep;
		int src = spool_open(cfg->spool, &s->spool, &rep);
		if (src != SPOOL_OK) {
			log_error("cannot open the spool %s: %s", cfg->spool, spool_strerror(src));
			return 1;
		}
		spool_log_report(s->spool, &rep);
		if (rep.good)
			log_warn("spool: %s holds %zu records from an earlier run; replaying them",
				 cfg->spool, rep.good);
	}
	return open_sinks(s);
}

/* The API, after every thread it hands work to; serve_start tells systemd the daemon is
 * ready once the gRPC ingest listens too. 0, or 1 after logging why. */
static int start_api(struct server *s)
{
	char err[512];
	const struct config *cfg = &s->cfg;
	if (!(s->tokens = api_tokens_new(s->st)))
		return 1;
	uint32_t hash_key;
	if (RAND_bytes((unsigned char *)&hash_key, sizeof(hash_key)) != 1 ||
	    !(s->authlimit = authlimit_new(hash_key))) {
		log_error("cannot set up the API's limit of failed authentications");
		return 1;
	}
	s->readiness = (struct readiness){s->intake, &s->sinks, s->dead_letter};
	s->api = (struct api){
		.st = s->st,
		.reg = &s->reg,
		.writer = s->writer,
		.spool = s->spool,
		.wake = wake_dispatcher,
		.wake_ctx = s->disp,
		.wake_jobs = wake_jobs,
		.wake_jobs_ctx = s->janitor,
		.replay_rate = cfg->replay_rate,
		.metrics_private = !cfg->metrics_public,
		.stats_window_ms = cfg->stats_window_ms,
		.kafka_wire = s->kafka.wire,
		.kafka_schema_id = s->kafka.schema_id,
		.admin_token = s->token,
		.ingest_token = cfg->ingest_token,
		.tokens = s->tokens,
		.authlimit = s->authlimit,
		.max_payload = cfg->max_payload,
		.max_request = cfg->max_request,
		.retry_defaults = s->defaults,
		.tls_dir = cfg->tls_dir,
		.ready = daemon_ready,
		.ready_ctx = &s->readiness,
	};
	struct http_limits limits = {
		.threads = cfg->api_threads,
		.max_connections = cfg->api_max_connections,
		.max_connections_per_ip = cfg->api_max_connections_per_ip,
		.idle_timeout_ms = cfg->api_idle_timeout_ms,
		.request_timeout_ms = cfg->api_request_timeout_ms,
		.body_memory = cfg->api_body_memory,
	};
	struct http_tls tls = {cfg->tls_cert, cfg->tls_key, cfg->tls_priorities};
	int tls_on = cfg->tls_cert && *cfg->tls_cert;
	s->scheme = tls_on ? "https" : "http";
	if (!(s->http = http_server_start(&s->api, cfg->listen, &limits, tls_on ? &tls : NULL,
					  err, sizeof(err)))) {
		log_error("%s", err);
		return 1;
	}
	log_info("outboxd %s listening on %s://%s (store: %s)", s->version, s->scheme,
		 cfg->listen, store_backend_name(s->st));
	if (isatty(STDERR_FILENO))
		fprintf(stderr,
			"\nSend a first event (the token is the admin token%s):\n"
			"  curl -X POST %s://%s/v1/events -H \"Authorization: Bearer $TOKEN\" \\\n"
			"    -H 'Content-Type: application/json' \\\n"
			"    -d '{\"event_type\":\"user.created\",\"payload\":{\"id\":1}}'\n"
			"Create a subscription first to have it delivered: see README.md, Quickstart.\n\n",
			cfg->admin_token ? "" : ", kept in the data folder as admin.token", s->scheme,
			cfg->listen);
	return 0;
}

/* The gRPC ingest (docs/grpc.md) when grpc_listen is set, after the API: its calls are
 * authorized by the API's token rules (api_ingest_authorize), with the API's limits.
 * 0, or 1 after logging why. */
static int start_grpc(struct server *s)
{
	char err[512];
	const struct config *cfg = &s->cfg;
	if (!cfg->grpc_listen || !*cfg->grpc_listen)
		return 0;
	struct grpc_intake_config gcfg = {
		.listen = cfg->grpc_listen,
		.tls_cert = cfg->tls_cert,
		.tls_key = cfg->tls_key,
		.threads = cfg->api_threads,
		.max_payload = cfg->max_payload,
		.max_request = cfg->max_request,
		.body_memory = cfg->api_body_memory,
		.shutdown_grace_ms = cfg->shutdown_grace_ms,
		.writer = s->writer,
		.reg = &s->reg,
		.authorize = api_ingest_authorize,
		.authorize_ctx = &s->api,
	};
	if (!(s->grpc = grpc_intake_start(&gcfg, err, sizeof(err)))) {
		log_error("%s", err);
		return 1;
	}
	log_info("gRPC ingest (outboxd.v1.Ingest) listening on %s, port %d, %s", cfg->grpc_listen,
		 grpc_intake_port(s->grpc), cfg->tls_cert && *cfg->tls_cert ? "TLS" : "plaintext");
	return 0;
}

/* The threads, each after what it uses, then the API. 0, or 1 after logging why. */
static int serve_start(struct server *s)
{
	char err[512];
	const struct config *cfg = &s->cfg;
	s->dcfg = (struct dispatcher_config){
		.max_in_flight = cfg->max_in_flight,
		.batch = cfg->retry_batch,
		.lease_ms = cfg->lease_ms,
		.connect_timeout_ms = cfg->connect_timeout_ms,
		.shutdown_grace_ms = cfg->shutdown_grace_ms,
		.disabled_delay_ms = 5000,
		.sinks = &s->sinks,
		.disable_after_ms = cfg->disable_after_ms,
		.disable = disable_subscription,
		.disable_ctx = &s->reload,
		.log_deliveries = cfg->log_deliveries,
	};
	/* OpenTelemetry (otel/otlp.h): a span per attempt and the counters, when asked for;
	 * started before the dispatcher reports to it, stopped after. */
	if (cfg->otlp_endpoint && *cfg->otlp_endpoint) {
		if (otlp_start(cfg->otlp_endpoint, cfg->otlp_headers, cfg->otlp_protocol,
			       cfg->otlp_compression, s->owner, s->version, cfg->otlp_interval_ms,
			       err, sizeof(err))) {
			log_error("%s", err);
			return 1;
		}
		char *shown = config_mask_value("otlp_endpoint", cfg->otlp_endpoint);
		log_info("OpenTelemetry: exporting attempt spans and counters to %s (otlp_endpoint), "
			 "%s, compression %s", shown ? shown : "the collector", cfg->otlp_protocol,
			 cfg->otlp_compression);
		free(shown);
	}
	/* The one writer of ingest, claims and results (store/writer.h), and the
	 * dispatcher, its client. */
	if (!(s->writer = writer_start(s->st, s->spool)))
		return 1;
	/* outboxd's own operational events, stored through the writer like any event */
	if (!(s->ops = ops_events_start(s->writer, &s->reg, cfg->ops_events_limit,
					cfg->ops_events_window_ms)))
		return 1;
	s->dcfg.ops = (struct ops_event_hook){ops_events_emit, s->ops};
	if (!(s->disp = dispatcher_start(s->writer, &s->reg, &s->dcfg)))
		return 1;
	writer_on_commit(s->writer, wake_dispatcher, s->disp);
	/* Work made due by other instances or producers (PostgreSQL NOTIFY) wakes the
	 * dispatcher at once; polling stays the fallback. Subscriptions whose change any
	 * instance announces are read again. */
	store_on_subscriptions_changed(s->st, subscriptions_changed, &s->reload);
	store_on_work(s->st, wake_dispatcher, s->disp);
	/* dead deliveries marked for their dead-letter topic: published by their own relay */
	if (s->kafka_on && cfg->kafka_dead_letter && *cfg->kafka_dead_letter &&
	    !(s->dead_letter = kafka_dead_letter_start(s->st, &s->reg, &s->kafka, err,
						       sizeof(err)))) {
		log_error("%s", err);
		return 1;
	}
	if (s->kafka_on && cfg->kafka_intake && *cfg->kafka_intake) {
		struct kafka_intake_config kcfg = {
			.settings = &s->kafka,
			.defaults = s->defaults,
			.retry_interval_ms = cfg->retry_interval_ms,
			.max_payload = cfg->max_payload,
			.writer = s->writer,
			.wake = wake_dispatcher,
			.wake_ctx = s->disp,
		};
		if (!(s->intake = kafka_intake_start(s->st, &s->reg, &kcfg, err, sizeof(err)))) {
			log_error("%s", err);
			return 1;
		}
	}
	struct janitor_config jcfg = {
		.relay_interval_ms = cfg->relay_interval_ms,
		.relay_batch = (size_t)cfg->relay_batch,
		.reap_interval_ms = cfg->reap_interval_ms,
		.cleanup_enabled = cfg->cleanup_enabled,
		.cleanup_interval_ms = cfg->cleanup_interval_ms,
		.cleanup_after_ms = cfg->cleanup_after_ms,
		.stats_window_ms = cfg->stats_window_ms,
		.ops = {ops_events_emit, s->ops},
		.reload_subs = reload_subscriptions,
		.reload_ctx = &s->reload,
	};
	if (!(s->janitor = janitor_start(s->st, &s->reg, &jcfg, wake_dispatcher, s->disp)))
		return 1;
	if (start_api(s))
		return 1;
	if (start_grpc(s))
		return 1;
	/* Under systemd (Type=notify): ready now that the store is open and every way in
	 * listens. */
	service_ready(s->scheme, cfg->listen, store_backend_name(s->st));
	return 0;
}

/* Until SIGTERM or SIGINT (returned); SIGHUP reloads the settings that can change live. */
static int serve_wait(struct server *s)
{
	/* The watchdog is fed from this loop, and checks that the dispatcher turns;
	 * SIGHUP reloads what can change without a restart (cli/service.h). */
	int64_t watchdog_us = service_watchdog_interval_us();
	int sig = 0;
	for (;;) {
		if (watchdog_us) {
			struct timespec every = {(time_t)(watchdog_us / 1000000),
						 (long)(watchdog_us % 1000000) * 1000};
			sig = sigtimedwait(&s->sigs, NULL, &every);
			service_watchdog(s->disp);
			if (sig < 0)
				continue; /* the interval passed (or EINTR) */
		} else if (sigwait(&s->sigs, &sig) != 0) {
			continue;
		}
		if (sig != SIGHUP)
			break;
		service_reloading();
		log_info("received SIGHUP: reloading the settings%s%s",
			 s->cfg.config_file ? " from " : "",
			 s->cfg.config_file ? s->cfg.config_file : "");
		struct config fresh;
		if (settings_load(s->argc, s->argv, &fresh) == 0) {
			service_reload(&s->cfg, &fresh, s->ops, s->disp);
			config_free(&fresh);
		} else {
			log_error("reload: the settings do not load (see above); keeping the running ones");
		}
		service_ready(s->scheme, s->cfg.listen, store_backend_name(s->st));
	}
	return sig;
}

/* Order: no new requests, no new relayed rows (what was accepted is committed: ingest
 * callers wait for their commit), then let the dispatcher finish or hand back its work
 * through the writer, then stop the writer. Safe after a serve_open or serve_start that
 * stopped half way (what was not made is NULL). */
static void serve_stop(struct server *s)
{
	http_server_stop(s->http);
	grpc_intake_stop(s->grpc); /* streams still sending refused, stores finished */
	kafka_intake_stop(s->intake); /* stored batches are committed, the rest is read again */
	janitor_stop(s->janitor);
	if (s->writer)
		writer_on_commit(s->writer, NULL, NULL); /* no wake-up may reach a stopped dispatcher */
	store_on_work(s->st, NULL, NULL);
	store_on_subscriptions_changed(s->st, NULL, NULL);
	dispatcher_stop(s->disp);
	otlp_stop(); /* after the dispatcher, which reports attempts to it */
	ops_events_stop(s->ops); /* after what emits them, before the writer that stores them */
	writer_stop(s->writer);
	kafka_dead_letter_stop(s->dead_letter); /* after the last results (and marks) are written */
	sink_set_close(&s->sinks); /* after the dispatcher, whose rounds they served */
	spool_close(s->spool); /* after the dispatcher, which may spool its last results */
	store_close(s->st);
	sub_registry_destroy(&s->reg);
	curl_global_cleanup();
	api_tokens_free(s->tokens);
	authlimit_free(s->authlimit);
	free(s->token);
	free(s->kafka_instance);
	config_free(&s->cfg);
}

int serve_main(int argc, char **argv, const char *version)
{
	char err[512];
	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			printf("usage: outboxd serve [--setting value ...]\n\n");
			config_print_help(stdout);
			return 0;
		}
	}
	struct server *s = calloc(1, sizeof(*s));
	if (!s) {
		fprintf(stderr, "outboxd: out of memory\n");
		return 1;
	}
	s->version = version;
	s->argc = argc;
	s->argv = argv;
	if (settings_load_for_store(argc, argv, &s->cfg, "serve")) {
		free(s);
		return 2;
	}
	/* the checks check-config makes: a setting that fails them exits 2, which the unit's
	 * RestartPreventExitStatus keeps from a restart loop */
	if (admin_settings_check(&s->cfg, err, sizeof(err))) {
		fprintf(stderr, "outboxd: %s\n", err);
		config_free(&s->cfg);
		free(s);
		return 2;
	}
	enum log_level level;
	log_level_parse(s->cfg.log_level, &level);
	log_set_level(level);
	enum log_format format;
	log_format_parse(s->cfg.log_format, &format);
	log_set_format(format);

	int rc = serve_open(s);
	if (rc == 0)
		rc = serve_start(s);
	if (rc == 0) {
		int sig = serve_wait(s);
		service_stopping();
		log_info("received %s: stopping intake, finishing in-flight deliveries",
			 sig == SIGTERM ? "SIGTERM" : "SIGINT");
	}
	serve_stop(s);
	if (rc == 0)
		log_info("stopped cleanly");
	free(s);
	return rc;
}
