/* receiver.c: test_receiver, a real HTTP subscriber for end-to-end tests and benchmarks.
 *
 * It records every request it gets (method, raw path with query, lowercased headers, body)
 * together with webhook-id deduplication counters, and answers from a per-path script of
 * responses (status, delay, dropped connection, body, headers, or an echo of the request
 * as received). Tests drive it through the
 * JSON control API under /_control/; the benchmark runs it with --no-bodies --threads N as
 * a sink that only counts, plus --timestamps to keep (webhook-id, receipt time) pairs for
 * the latency join, read back as text from GET /_control/timestamps. With
 * --unique-per-path the distinct ids, the duplicates and the receipts are keyed by the
 * request's path and its webhook-id ("/sink/3 ID"): a fan-out sends one webhook-id to
 * several subscriptions, each a delivery of its own (not with --acks, which looks ids up
 * alone).
 *
 * With --tls-cert/--tls-key it speaks HTTPS (--client-ca: and requires a client
 * certificate signed by that CA, refusing others in the TLS handshake, as an mTLS
 * subscriber does); --control-port then adds a plain-HTTP listener for the control API,
 * so tests need no certificates to drive it. Records of TLS requests carry "tls": true,
 * "tls_resumed" (the client resumed a session: it offers session tickets) and
 * "client_cert" (the subject DN, or null).
 *
 * For the chaos soak (bench/soak.sh) a path can misbehave at random instead of following a
 * script: POST /_control/chaos sets weights for six outcomes (ok, slow, error, throttle,
 * reset, timeout) and GET /_control/chaos reports how often each was drawn. With --acks
 * it keeps, per path, how many 2xx answers each webhook-id got that were completely
 * written (MHD's "completed OK"), read back as text from GET /_control/acks?path=P:
 * the subscriber's own record of what was delivered, for the soak's accounting.
 *
 * It plays the subscriber and nothing else: it must not know outboxd's internals, and it
 * must not interpret payloads beyond "is this UTF-8".
 *
 * This file is the HTTP server loop: the options, the MHD daemons, and the path of a data
 * request from its first byte to its answer. receiver.h lists the other files.
 */
#include "receiver.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BODY_MAX          (16u << 20)  /* request bodies, data and control alike */
#define DELAY_SLICE_MS    10           /* delays sleep in slices so SIGTERM ends them */
#define CONNECTION_LIMIT  4096

struct receiver_state rx = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.keep_bodies = true,
};

/* Set once SIGTERM/SIGINT arrives; scripted delays cut short so shutdown stays quick. */
static atomic_int stopping;

/* ---- data requests ------------------------------------------------------------------- */

static void sleep_ms_interruptible(int ms)
{
	while (ms > 0 && !atomic_load(&stopping)) {
		int slice = ms < DELAY_SLICE_MS ? ms : DELAY_SLICE_MS;
		struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)slice * 1000000};

		nanosleep(&ts, NULL);
		ms -= slice;
	}
}

/* Resets the connection at once: connect() with AF_UNSPEC disconnects a TCP socket with
 * an RST (Linux), as a crashing subscriber's kernel would, and leaves MHD a valid
 * descriptor to close. SO_LINGER 0 alone would not do: MHD shuts the socket down for
 * writing first, so the client would read a FIN ("empty reply") before the RST. */
static void connection_reset(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	struct linger lg = {.l_onoff = 1, .l_linger = 0};
	struct sockaddr sa = {.sa_family = AF_UNSPEC};

	if (!ci)
		return;
	setsockopt(ci->connect_fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	if (connect(ci->connect_fd, &sa, sizeof(sa)) != 0) {
		/* Not supported: the linger-0 close still ends it with an RST. */
	}
}

static enum MHD_Result handle_data(struct MHD_Connection *conn, const char *method,
				   struct request_ctx *ctx)
{
	const char *id = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "webhook-id");
	size_t path_len = strcspn(ctx->uri, "?");
	json_t *rec = NULL;
	struct path_state *ps;
	struct MHD_Response *resp;
	int status, delay_ms;
	bool drop, reset;
	int64_t t;
	enum MHD_Result ret;

	if (rx.keep_bodies) {
		rec = record_build(conn, method, ctx);
		if (!rec)
			return MHD_NO;
	}

	pthread_mutex_lock(&rx.lock);
	t = now_us();
	rx.total++;
	if (rx.print) {
		const char *type = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
							       "outboxd-event-type");
		printf("%s %s webhook-id=%s event-type=%s body=%.*s\n", method, ctx->uri,
		       id ? id : "-", type ? type : "-",
		       ctx->len > 200 ? 200 : (int)ctx->len, ctx->body ? ctx->body : "");
		fflush(stdout);
	}
	if (rx.first_us == 0)
		rx.first_us = t;
	rx.last_us = t;
	if (id) {
		bool found;
		char both[1024];
		const char *lookup = id, *key;
		int w;

		/* --unique-per-path: "path id"; a key too long for the buffer (no benchmark
		 * path is) counts under the id alone. */
		if (rx.per_path) {
			w = snprintf(both, sizeof(both), "%.*s %s", (int)path_len, ctx->uri, id);
			if (w > 0 && (size_t)w < sizeof(both))
				lookup = both;
		}
		/* The table maps each id to its own arena copy, which a receipt then shares. */
		key = table_get(&rx.ids, lookup, &found);
		if (found) {
			rx.duplicates++;
		} else {
			key = arena_strdup(&rx.id_arena, lookup);
			if (key && table_put(&rx.ids, key, (void *)key) != 1)
				key = NULL;
		}
		if (rx.timestamps)
			receipt_add_locked(key, t);
	}
	if (rec) {
		json_object_set_new(rec, "seq", json_integer(rx.total));
		json_object_set_new(rec, "received_at_us", json_integer(t));
		json_array_append_new(rx.requests, rec);
	}
	ps = path_state_get(ctx->uri, path_len);
	if (ps)
		ps->count++;
	resp = script_next(ps, rec, &status, &delay_ms, &drop, &reset);
	if (rec) /* what the subscriber answered (0: the connection was dropped or reset) */
		json_object_set_new(rec, "status",
				    json_integer(drop || reset || !resp ? 0 : status));
	pthread_mutex_unlock(&rx.lock);

	/* --acks: counted once the answer is completely written (completed_cb). */
	if (rx.acks && id && resp && !drop && status >= 200 && status < 300) {
		ctx->ack_id = strdup(id);
		ctx->ack = ctx->ack_id != NULL;
	}
	sleep_ms_interruptible(delay_ms);
	if (reset)
		connection_reset(conn);
	if (drop || !resp)
		return MHD_NO;   /* MHD closes the connection without a response */
	ret = MHD_queue_response(conn, (unsigned int)status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* ---- MHD callbacks ------------------------------------------------------------------- */

static void *uri_log_cb(void *cls, const char *uri, struct MHD_Connection *conn)
{
	struct request_ctx *ctx = calloc(1, sizeof(*ctx));

	if (!ctx)
		return NULL;
	ctx->uri = strdup(uri ? uri : "/");
	if (!ctx->uri) {
		free(ctx);
		return NULL;
	}
	return ctx;
}

static void completed_cb(void *cls, struct MHD_Connection *conn, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct request_ctx *ctx = *con_cls;

	if (!ctx)
		return;
	if (ctx->ack && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
		pthread_mutex_lock(&rx.lock);
		ack_record_locked(ctx->uri, ctx->ack_id);
		pthread_mutex_unlock(&rx.lock);
	}
	free(ctx->ack_id);
	free(ctx->uri);
	free(ctx->body);
	free(ctx);
	*con_cls = NULL;
}

static int body_append(struct request_ctx *ctx, const char *data, size_t len)
{
	if (len > BODY_MAX - ctx->len)
		return -1;
	if (ctx->len + len + 1 > ctx->cap) {
		size_t cap = ctx->cap ? ctx->cap : 4096;
		char *p;

		while (cap < ctx->len + len + 1)
			cap *= 2;
		if (cap > BODY_MAX + 1)
			cap = BODY_MAX + 1;
		p = realloc(ctx->body, cap);
		if (!p)
			return -1;
		ctx->body = p;
		ctx->cap = cap;
	}
	memcpy(ctx->body + ctx->len, data, len);
	ctx->len += len;
	ctx->body[ctx->len] = '\0';
	return 0;
}

static enum MHD_Result access_cb(void *cls, struct MHD_Connection *conn, const char *url,
				 const char *method, const char *version,
				 const char *upload_data, size_t *upload_data_size,
				 void **con_cls)
{
	struct request_ctx *ctx = *con_cls;
	bool control;

	if (!ctx)
		return MHD_NO;   /* the URI log callback ran out of memory */
	control = strncmp(ctx->uri, CONTROL_PREFIX, strlen(CONTROL_PREFIX)) == 0;
	if (!ctx->started) {
		ctx->started = true;
		return MHD_YES;
	}
	if (*upload_data_size) {
		/* The --no-bodies sink never keeps data bodies: it only counts requests. */
		if ((control || rx.keep_bodies) && !ctx->too_big &&
		    body_append(ctx, upload_data, *upload_data_size) != 0)
			ctx->too_big = true;
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (ctx->too_big)
		return reply_error(conn, MHD_HTTP_CONTENT_TOO_LARGE, "body over 16 MiB");
	if (control)
		return control_dispatch(conn, method, ctx);
	return handle_data(conn, method, ctx);
}

/* ---- main ---------------------------------------------------------------------------- */

static void usage(void)
{
	fprintf(stderr, "usage: test_receiver --port N [--no-bodies] [--threads N] [--print]"
			" [--timestamps] [--acks | --unique-per-path]\n"
			"         [--tls-cert FILE --tls-key FILE [--client-ca FILE]"
			" [--control-port N]]\n");
}

static int parse_int(const char *s, long lo, long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* MHD's own diagnostics (a failed bind says why), minus the line it prints for every
 * scripted drop: a drop is the test asking for exactly that. */
static void mhd_log_cb(void *cls, const char *fmt, va_list ap)
{
	char line[512];

	vsnprintf(line, sizeof(line), fmt, ap);
	if (strstr(line, "Application reported internal error"))
		return;
	/* GnuTLS's words for every refused TLS handshake (an untrusted client certificate, a
	 * client that does not trust ours): also what the tests ask for. */
	if (strstr(line, "received handshake message out of context"))
		return;
	fprintf(stderr, "test_receiver: %s%s", line,
		line[0] && line[strlen(line) - 1] == '\n' ? "" : "\n");
}

/* A benchmark sink holds thousands of sockets; lift the soft fd limit to the hard one. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int main(int argc, char **argv)
{
	long port = 0, threads = 0, control_port = 0;
	struct sockaddr_in addr;
	struct MHD_Daemon *daemon, *control = NULL;
	const char *tls_cert = NULL, *tls_key = NULL, *client_ca = NULL;
	char *cert_pem = NULL, *key_pem = NULL, *ca_pem = NULL;
	struct MHD_OptionItem pool[] = {
		{MHD_OPTION_END, 0, NULL},
		{MHD_OPTION_END, 0, NULL},
		{MHD_OPTION_END, 0, NULL},
		{MHD_OPTION_END, 0, NULL},
		{MHD_OPTION_END, 0, NULL},
	};
	size_t n_opts;
	unsigned int flags;
	sigset_t set;
	int sig;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
			if (parse_int(argv[++i], 1, 65535, &port) != 0) {
				fprintf(stderr, "test_receiver: bad --port %s\n", argv[i]);
				return 2;
			}
		} else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
			if (parse_int(argv[++i], 0, 1024, &threads) != 0) {
				fprintf(stderr, "test_receiver: bad --threads %s\n", argv[i]);
				return 2;
			}
		} else if (strcmp(argv[i], "--print") == 0) {
			rx.print = true;
		} else if (strcmp(argv[i], "--no-bodies") == 0) {
			rx.keep_bodies = false;
		} else if (strcmp(argv[i], "--timestamps") == 0) {
			rx.timestamps = true;
		} else if (strcmp(argv[i], "--acks") == 0) {
			rx.acks = true;
		} else if (strcmp(argv[i], "--unique-per-path") == 0) {
			rx.per_path = true;
		} else if (strcmp(argv[i], "--tls-cert") == 0 && i + 1 < argc) {
			tls_cert = argv[++i];
		} else if (strcmp(argv[i], "--tls-key") == 0 && i + 1 < argc) {
			tls_key = argv[++i];
		} else if (strcmp(argv[i], "--client-ca") == 0 && i + 1 < argc) {
			client_ca = argv[++i];
		} else if (strcmp(argv[i], "--control-port") == 0 && i + 1 < argc) {
			if (parse_int(argv[++i], 1, 65535, &control_port) != 0) {
				fprintf(stderr, "test_receiver: bad --control-port %s\n", argv[i]);
				return 2;
			}
		} else {
			usage();
			return 2;
		}
	}
	if (!port || !tls_cert != !tls_key || (client_ca && !tls_cert) || (rx.acks && rx.per_path)) {
		usage();
		return 2;
	}
	if (tls_cert && (!(cert_pem = read_pem(tls_cert)) || !(key_pem = read_pem(tls_key)) ||
			 (client_ca && !(ca_pem = read_pem(client_ca)))))
		return 1;

	/* Block the stop signals before MHD starts its threads, so they inherit the mask and
	 * only the sigwait() below ever takes them. */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	raise_fd_limit();

	rx.rng = ((uint64_t)now_us() << 16) ^ (uint64_t)getpid() ^ 1;
	rx.requests = json_array();
	if (!rx.requests) {
		fprintf(stderr, "test_receiver: out of memory\n");
		return 1;
	}

	memset(&addr, 0, sizeof(addr));
	addr.sin_family = AF_INET;
	addr.sin_port = htons((uint16_t)port);
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

	if (threads > 0) {
		/* Benchmark mode: a fixed pool on epoll; a scripted delay holds a pool thread. */
		flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG;
		pool[0].option = MHD_OPTION_THREAD_POOL_SIZE;
		pool[0].value = threads;
	} else {
		/* One thread per connection, so one request's delay never holds up another.
		 * poll() rather than select() lifts the FD_SETSIZE ceiling. */
		flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
			MHD_USE_ERROR_LOG;
	}
	n_opts = threads > 0 ? 1 : 0;
	if (tls_cert) {
		flags |= MHD_USE_TLS;
		pool[n_opts++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, key_pem};
		pool[n_opts++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, cert_pem};
		if (ca_pem) {
			pool[n_opts++] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_TRUST, 0,
								 ca_pem};
			tls_require_client_cert = true;
		}
	}
	/* MHD sets SO_REUSEADDR (a restart binds through TIME_WAIT) but not SO_REUSEPORT,
	 * so a second receiver on a taken port fails instead of sharing it. */
	daemon = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, access_cb, NULL,
				  MHD_OPTION_EXTERNAL_LOGGER, mhd_log_cb, NULL,
				  MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
				  MHD_OPTION_URI_LOG_CALLBACK, uri_log_cb, NULL,
				  MHD_OPTION_NOTIFY_COMPLETED, completed_cb, NULL,
				  MHD_OPTION_NOTIFY_CONNECTION, notify_connection_cb, NULL,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned int)CONNECTION_LIMIT,
				  MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned int)1024,
				  MHD_OPTION_ARRAY, pool,
				  MHD_OPTION_END);
	if (!daemon) {
		fprintf(stderr, "test_receiver: cannot listen on 127.0.0.1:%ld\n", port);
		json_decref(rx.requests);
		return 1;
	}
	if (control_port) {
		addr.sin_port = htons((uint16_t)control_port);
		control = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION |
					   MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG,
					   (uint16_t)control_port, NULL, NULL, access_cb, NULL,
					   MHD_OPTION_EXTERNAL_LOGGER, mhd_log_cb, NULL,
					   MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
					   MHD_OPTION_URI_LOG_CALLBACK, uri_log_cb, NULL,
					   MHD_OPTION_NOTIFY_COMPLETED, completed_cb, NULL,
					   MHD_OPTION_END);
		if (!control) {
			fprintf(stderr, "test_receiver: cannot listen on 127.0.0.1:%ld\n",
				control_port);
			MHD_stop_daemon(daemon);
			json_decref(rx.requests);
			return 1;
		}
	}
	printf("listening on 127.0.0.1:%ld\n", port);
	fflush(stdout);

	while (sigwait(&set, &sig) != 0)
		;
	atomic_store(&stopping, 1);
	if (control)
		MHD_stop_daemon(control);
	MHD_stop_daemon(daemon);
	free(cert_pem);
	free(key_pem);
	free(ca_pem);

	pthread_mutex_lock(&rx.lock);
	stats_reset_locked();
	pthread_mutex_unlock(&rx.lock);
	json_decref(rx.requests);
	return 0;
}
