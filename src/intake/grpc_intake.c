/* grpc_intake.c: the gRPC ingest's server on gRPC's C core (see grpc_intake.h), the only
 * file that includes grpc/. It owns the server, its completion queue and the threads
 * that take its events, and each call's life: the token, the messages, the store, the
 * status. It must not decide what an event may hold (grpc_publish.c does) nor answer
 * before the writer made a call's events durable.
 *
 * One completion queue, served by every thread: each completion moves one call a step
 * (its request matched, a message received, its status sent). A step that stores events
 * hands them to the writer (writer_ingest_start) and the thread goes on; the writer
 * groups what arrives meanwhile into one commit, as it does for the HTTP API, and sends
 * the call's status from its callback (stored). Both methods ask for their messages only
 * after the token was accepted, so a refused caller's messages are never read. A call is
 * freed when its last operation completed: `ops` counts those outstanding, under the
 * intake's lock. */
#include "intake/grpc_intake.h"

#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/alloc.h>
#include <grpc/support/log.h>
#include <grpc/support/time.h>

#include "core/metrics.h"
#include "core/trace.h"
#include "intake/grpc_publish.h"
#include "util/log.h"
#include "util/pem.h"

/* An OutboxEvent's fields around its payload, at most: gRPC refuses a bigger message
 * itself (RESOURCE_EXHAUSTED) before it is read whole. */
#define ENVELOPE_OVERHEAD (64 * 1024)
#define HEADER_MAX 4096       /* an authorization or traceparent value we read */

enum method { METHOD_PUBLISH, METHOD_STREAM, METHOD_OTHER, N_METHODS };

enum tag_kind { TAG_NEW, TAG_RECV, TAG_DONE, TAG_SHUTDOWN };

struct call;

/* What a completion is about: the call (NULL for the server's shutdown) and the step. */
struct tag {
	struct call *call;
	enum tag_kind kind;
};

enum call_state {
	CALL_REQUESTED,           /* waiting for a client to call */
	CALL_RECEIVING,           /* a message is asked for */
	CALL_WORKING,             /* a thread checks or stores its events */
	CALL_FINISHING,           /* its status is being sent */
};

struct call {
	struct grpc_intake *g;
	enum method method;
	enum call_state state;
	int ops;                          /* batches outstanding (under g->lock) */
	grpc_call *call;
	gpr_timespec deadline;
	grpc_call_details details;        /* METHOD_OTHER: the method called */
	grpc_metadata_array metadata;
	grpc_byte_buffer *message;        /* the message a receive brought (NULL: the end) */
	struct tag t_new, t_recv, t_done;
	struct publish_batch batch;
	struct sub_set *set;              /* the fan-out's subscriptions while it is stored */
	int64_t held;                     /* bytes of body_memory its messages hold */
	char traceparent[TRACEPARENT_LEN]; /* the call's metadata, "" when absent or invalid */
	/* the status being sent, alive until its batch completes */
	grpc_byte_buffer *reply;
	grpc_slice status_details;
	grpc_metadata trailing[2];
	int cancelled;
	int headers_sent;                 /* its initial metadata went out (a stream's do early) */
	struct call *prev, *next;         /* in g->calls while a client holds it */
};

struct grpc_intake {
	grpc_server *server;
	grpc_completion_queue *cq;
	void *registered[2];              /* METHOD_PUBLISH, METHOD_STREAM */
	int port;
	struct publish_limits limits;
	int64_t body_memory;
	int64_t shutdown_grace_ms;
	struct writer *writer;
	struct sub_registry *reg;
	grpc_intake_authorize_cb authorize;
	void *authorize_ctx;
	pthread_t *threads;
	int n_threads;
	pthread_mutex_t lock;
	pthread_cond_t shut_cond;
	int stopping;                     /* grpc_intake_stop began: no new call is taken */
	int shut_down;                    /* the server's shutdown completed */
	int64_t held;                     /* body memory held by every call */
	int storing;                      /* calls with the writer: it calls stored() back */
	struct call *calls;
	struct tag t_shutdown;
};

static const char *const method_paths[N_METHODS] = {
	GRPC_PUBLISH_PATH, GRPC_PUBLISH_STREAM_PATH, NULL,
};

/* ---- the library's log --------------------------------------------------------------- */

static void grpc_log_cb(gpr_log_func_args *args)
{
	enum log_level level = args->severity == GPR_LOG_SEVERITY_ERROR ? LOG_ERROR :
			       args->severity == GPR_LOG_SEVERITY_INFO ? LOG_INFO : LOG_DEBUG;
	log_msg(level, "grpc: %s", args->message);
}

/* ---- calls ------------------------------------------------------------------------------- */

/* Asks the server for the next call of method m. 0, or -1 (out of memory, or refused). */
static int request_call(struct grpc_intake *g, enum method m)
{
	struct call *c = calloc(1, sizeof(*c));
	grpc_call_error rc;

	if (!c)
		return -1;
	c->g = g;
	c->method = m;
	c->state = CALL_REQUESTED;
	c->t_new = (struct tag){c, TAG_NEW};
	c->t_recv = (struct tag){c, TAG_RECV};
	c->t_done = (struct tag){c, TAG_DONE};
	grpc_metadata_array_init(&c->metadata);
	if (m == METHOD_OTHER) {
		grpc_call_details_init(&c->details);
		rc = grpc_server_request_call(g->server, &c->call, &c->details, &c->metadata, g->cq,
					      g->cq, &c->t_new);
	} else {
		rc = grpc_server_request_registered_call(g->server, g->registered[m], &c->call,
							 &c->deadline, &c->metadata, NULL, g->cq,
							 g->cq, &c->t_new);
	}
	if (rc != GRPC_CALL_OK) {
		log_error("grpc: cannot ask for the next call of %s: error %d",
			  method_paths[m] ? method_paths[m] : "other methods", (int)rc);
		grpc_metadata_array_destroy(&c->metadata);
		if (m == METHOD_OTHER)
			grpc_call_details_destroy(&c->details);
		free(c);
		return -1;
	}
	return 0;
}

static void call_free(struct call *c)
{
	struct grpc_intake *g = c->g;

	pthread_mutex_lock(&g->lock);
	if (c->prev)
		c->prev->next = c->next;
	else if (g->calls == c)
		g->calls = c->next;
	if (c->next)
		c->next->prev = c->prev;
	g->held -= c->held;
	pthread_mutex_unlock(&g->lock);
	publish_batch_free(&c->batch);
	if (c->message)
		grpc_byte_buffer_destroy(c->message);
	if (c->reply)
		grpc_byte_buffer_destroy(c->reply);
	if (c->state == CALL_FINISHING) {
		grpc_slice_unref(c->status_details);
		for (size_t i = 0; i < 2; i++) {
			grpc_slice_unref(c->trailing[i].key);
			grpc_slice_unref(c->trailing[i].value);
		}
	}
	grpc_metadata_array_destroy(&c->metadata);
	if (c->method == METHOD_OTHER)
		grpc_call_details_destroy(&c->details);
	if (c->call)
		grpc_call_unref(c->call);
	free(c);
}

/* Sends the call's status (with reply, consumed, as its one message when the status is
 * OK), and reads the client's close: the call's last batch. err names what went wrong
 * (NULL for OK): its code and field travel as trailing metadata outboxd-error-code and
 * outboxd-error-field, so a program can tell them apart as it can in the HTTP API's
 * error body. The (empty) initial metadata goes first whatever the status: without it,
 * a refusal reached grpc-js clients of this libgrpc (1.51) only as their own deadline.
 * Caller holds g->lock. */
static void finish_locked(struct call *c, grpc_status_code code, const char *message,
			  const struct input_error *err, grpc_byte_buffer *reply)
{
	grpc_op ops[4];
	size_t n = 0;

	memset(ops, 0, sizeof(ops));
	c->state = CALL_FINISHING;
	c->reply = reply;
	c->status_details = grpc_slice_from_copied_string(message ? message : "");
	c->trailing[0].key = grpc_slice_from_static_string("outboxd-error-code");
	c->trailing[0].value = grpc_slice_from_copied_string(err ? err->code : "");
	c->trailing[1].key = grpc_slice_from_static_string("outboxd-error-field");
	c->trailing[1].value = grpc_slice_from_copied_string(err ? err->field : "");
	if (!c->headers_sent) {
		ops[n].op = GRPC_OP_SEND_INITIAL_METADATA;
		n++;
		c->headers_sent = 1;
	}
	if (reply) {
		ops[n].op = GRPC_OP_SEND_MESSAGE;
		ops[n].data.send_message.send_message = reply;
		n++;
	}
	ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
	ops[n].data.send_status_from_server.status = code;
	ops[n].data.send_status_from_server.status_details = &c->status_details;
	/* an empty value is not sent: only what went wrong is named */
	ops[n].data.send_status_from_server.trailing_metadata = c->trailing;
	ops[n].data.send_status_from_server.trailing_metadata_count =
		!err ? 0 : err->field[0] ? 2 : 1;
	n++;
	ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
	ops[n].data.recv_close_on_server.cancelled = &c->cancelled;
	n++;
	grpc_call_error rc = grpc_call_start_batch(c->call, ops, n, &c->t_done, NULL);
	if (rc == GRPC_CALL_OK)
		c->ops++;
	else
		log_error("grpc: cannot end a call: error %d", (int)rc);
}

static void finish(struct call *c, grpc_status_code code, const char *message,
		   const struct input_error *err, grpc_byte_buffer *reply)
{
	pthread_mutex_lock(&c->g->lock);
	finish_locked(c, code, message, err, reply);
	int done = c->ops == 0;
	pthread_mutex_unlock(&c->g->lock);
	if (done)
		call_free(c);
}

/* The gRPC status of a refusal by the HTTP API's status for the same (docs/grpc.md). */
static grpc_status_code status_of(int http_status)
{
	switch (http_status) {
	case 400:
	case 413:
	case 422:
		return GRPC_STATUS_INVALID_ARGUMENT;
	case 401:
		return GRPC_STATUS_UNAUTHENTICATED;
	case 403:
		return GRPC_STATUS_PERMISSION_DENIED;
	case 429:
		return GRPC_STATUS_RESOURCE_EXHAUSTED;
	case 503:
		return GRPC_STATUS_UNAVAILABLE;
	default:
		return GRPC_STATUS_INTERNAL;
	}
}

static void refuse(struct call *c, const struct input_error *err)
{
	finish(c, status_of(err->status), err->message, err, NULL);
}

static void refuse_stopping(struct call *c, int locked)
{
	struct input_error err;
	input_error_set(&err, 503, "unavailable", "",
			"outboxd is stopping: nothing of this call was stored; send it again");
	if (locked)
		finish_locked(c, GRPC_STATUS_UNAVAILABLE, err.message, &err, NULL);
	else
		refuse(c, &err);
}

/* Asks for the call's next message. Caller holds g->lock. 0, or -1 (the call is broken;
 * the caller ends it). */
static int receive_locked(struct call *c)
{
	grpc_op ops[2];
	size_t n = 0;
	memset(ops, 0, sizeof(ops));
	/* A stream's client learns its call was taken (token accepted) before it has sent
	 * everything: its headers go out with the first receive. A stop refuses such a call
	 * UNAVAILABLE; one that reached the server in the instant the server stopped is
	 * cancelled by the gRPC library without headers (nothing of it stored either). */
	int headers = c->method == METHOD_STREAM && !c->headers_sent;
	if (headers)
		ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[n].op = GRPC_OP_RECV_MESSAGE;
	ops[n++].data.recv_message.recv_message = &c->message;
	c->state = CALL_RECEIVING;
	if (grpc_call_start_batch(c->call, ops, n, &c->t_recv, NULL) != GRPC_CALL_OK)
		return -1;
	c->headers_sent |= headers;
	c->ops++;
	return 0;
}

/* The next message, unless the intake is stopping (then the call is refused). */
static void receive_next(struct call *c)
{
	struct grpc_intake *g = c->g;
	int failed = 0;

	pthread_mutex_lock(&g->lock);
	if (g->stopping)
		refuse_stopping(c, 1);
	else
		failed = receive_locked(c) != 0;
	int done = c->ops == 0;
	pthread_mutex_unlock(&g->lock);
	if (failed) {
		finish(c, GRPC_STATUS_INTERNAL, "cannot read the call's messages", NULL, NULL);
		return;
	}
	if (done)
		call_free(c);
}

/* A metadata value of the call as a string (cut at out's size), or NULL when absent. */
static const char *metadata_value(const struct call *c, const char *key, char *out,
				  size_t size)
{
	for (size_t i = 0; i < c->metadata.count; i++) {
		const grpc_metadata *m = &c->metadata.metadata[i];
		if (grpc_slice_str_cmp(m->key, key) != 0)
			continue;
		size_t len = GRPC_SLICE_LENGTH(m->value);
		if (len >= size)
			len = size - 1;
		memcpy(out, GRPC_SLICE_START_PTR(m->value), len);
		out[len] = '\0';
		return out;
	}
	return NULL;
}

/* The client's address from gRPC's peer text ("ipv4:192.0.2.7:5000",
 * "ipv6:[2001:db8::1]:5000", the brackets maybe percent-encoded) into out: what the
 * HTTP API counts failed authentications by. NULL when it is neither. */
static const char *peer_address(const struct call *c, char *out, size_t size)
{
	char *peer = grpc_call_get_peer(c->call);
	const char *p = peer, *end;
	const char *result = NULL;

	if (!peer)
		return NULL;
	if (strncmp(p, "ipv4:", 5) == 0) {
		p += 5;
		end = strrchr(p, ':');
	} else if (strncmp(p, "ipv6:", 5) == 0) {
		p += 5;
		if (*p == '[')
			p++;
		else if (strncmp(p, "%5B", 3) == 0 || strncmp(p, "%5b", 3) == 0)
			p += 3;
		end = strrchr(p, ']');
		if (!end) {
			end = strstr(p, "%5D");
			if (!end)
				end = strstr(p, "%5d");
		}
	} else {
		end = NULL;
	}
	if (end && end > p && (size_t)(end - p) < size) {
		memcpy(out, p, (size_t)(end - p));
		out[end - p] = '\0';
		result = out;
	}
	gpr_free(peer);
	return result;
}

/* A call just matched: the token first, then its first message. */
static void call_started(struct call *c)
{
	struct grpc_intake *g = c->g;
	struct input_error err;
	char auth[HEADER_MAX], addr[64], trace[HEADER_MAX];

	pthread_mutex_lock(&g->lock);
	c->next = g->calls;
	if (g->calls)
		g->calls->prev = c;
	g->calls = c;
	c->state = CALL_WORKING;
	int stopping = g->stopping;
	pthread_mutex_unlock(&g->lock);

	if (stopping) {
		refuse_stopping(c, 0);
		return;
	}
	if (c->method == METHOD_OTHER) {
		char message[300];
		char *method = grpc_slice_to_c_string(c->details.method);
		snprintf(message, sizeof(message), "no method %.200s: outboxd serves %s and %s",
			 method ? method : "?", GRPC_PUBLISH_PATH, GRPC_PUBLISH_STREAM_PATH);
		gpr_free(method);
		finish(c, GRPC_STATUS_UNIMPLEMENTED, message, NULL, NULL);
		return;
	}
	const char *authorization = metadata_value(c, "authorization", auth, sizeof(auth));
	if (g->authorize(g->authorize_ctx, authorization, peer_address(c, addr, sizeof(addr)),
			 method_paths[c->method], &err)) {
		refuse(c, &err);
		return;
	}
	/* the trace context of the call travels with its events that have none of their
	 * own; an invalid one is ignored, as W3C asks of a receiver */
	const char *tp = metadata_value(c, "traceparent", trace, sizeof(trace));
	if (tp && trace_valid(tp) && strlen(tp) < sizeof(c->traceparent))
		memcpy(c->traceparent, tp, strlen(tp) + 1); /* a valid one is 55 characters */
	receive_next(c);
}

/* The writer's answer for a call's events (any thread, the writer's mostly): the status. */
static void stored(void *ctx, int rc)
{
	struct call *c = ctx;
	struct grpc_intake *g = c->g;
	struct publish_batch *b = &c->batch;
	struct input_error err;
	void *packed;
	size_t len;

	sub_registry_release(g->reg, c->set);
	c->set = NULL;
	if (rc != STORE_OK) {
		/* Nothing is acknowledged that is not durable: OK means committed and synced
		 * (or in the spool). */
		metrics_ingest_rejected(INGEST_GRPC, 503);
		metrics_store_error();
		input_error_set(&err, 503, "unavailable", "",
				"the store is unavailable; nothing was stored, retry later");
		refuse(c, &err);
	} else {
		metrics_ingested(INGEST_GRPC, (long)b->in.n);
		if (publish_reply(b, &packed, &len)) {
			finish(c, GRPC_STATUS_INTERNAL, "out of memory for the reply (the events are "
			       "stored: sending them again stores nothing new)", NULL, NULL);
		} else {
			grpc_slice slice = grpc_slice_new(packed, len, free);
			grpc_byte_buffer *reply = grpc_raw_byte_buffer_create(&slice, 1);
			grpc_slice_unref(slice);
			finish(c, GRPC_STATUS_OK, NULL, NULL, reply);
		}
	}
	/* the last touch of g: a stop waits for this before it frees it */
	pthread_mutex_lock(&g->lock);
	if (--g->storing == 0)
		pthread_cond_broadcast(&g->shut_cond);
	pthread_mutex_unlock(&g->lock);
}

/* The events of the call are all there: store them, then answer (stored). */
static void store_events(struct call *c)
{
	struct grpc_intake *g = c->g;
	struct publish_batch *b = &c->batch;
	struct input_error err;
	char why[256];

	/* A fan-out from a set that may not be the store's could leave out a subscription:
	 * refused, so the producer retries, rather than acknowledged without it. */
	if (!sub_registry_current(g->reg, why, sizeof(why))) {
		metrics_ingest_rejected(INGEST_GRPC, 503);
		input_error_set(&err, 503, "subscriptions_unavailable", "", "%s", why);
		refuse(c, &err);
		return;
	}
	for (size_t i = 0; i < b->in.n; i++)
		if (!b->in.events[i].traceparent && c->traceparent[0])
			b->in.events[i].traceparent = c->traceparent;
	pthread_mutex_lock(&g->lock);
	g->storing++;
	pthread_mutex_unlock(&g->lock);
	c->set = sub_registry_acquire(g->reg);
	if (ingest_fanout(&b->in, c->set)) {
		stored(c, STORE_ERROR);
		return;
	}
	writer_ingest_start(g->writer, b->in.events, b->in.n, stored, c);
}

/* A message arrived (or the end of the client's messages). */
static void message_received(struct call *c, int ok)
{
	struct grpc_intake *g = c->g;
	struct input_error err;

	pthread_mutex_lock(&g->lock);
	c->ops--;
	if (c->state != CALL_RECEIVING) {
		/* refused meanwhile by grpc_intake_stop: its status is on the way */
		int done = c->ops == 0;
		pthread_mutex_unlock(&g->lock);
		if (done)
			call_free(c);
		return;
	}
	c->state = CALL_WORKING;
	pthread_mutex_unlock(&g->lock);

	grpc_byte_buffer *message = c->message;
	c->message = NULL;
	if (!ok || (!message && grpc_call_failed_before_recv_message(c->call))) {
		/* the client cancelled, or its connection broke: nothing was stored, and the
		 * status is for nobody but ends the call */
		if (message)
			grpc_byte_buffer_destroy(message);
		finish(c, GRPC_STATUS_CANCELLED, "the call ended before its last message", NULL,
		       NULL);
		return;
	}
	if (!message) {
		/* the client's half-close: every message is there */
		if (c->batch.in.n == 0) {
			metrics_ingest_rejected(INGEST_GRPC, 400);
			input_error_set(&err, 400, "invalid_argument", "",
					"%s takes %s; the call sent none", method_paths[c->method],
					c->method == METHOD_PUBLISH ? "one event" : "1 to 10000 events");
			refuse(c, &err);
			return;
		}
		store_events(c);
		return;
	}

	grpc_byte_buffer_reader reader;
	if (!grpc_byte_buffer_reader_init(&reader, message)) {
		grpc_byte_buffer_destroy(message);
		finish(c, GRPC_STATUS_INTERNAL, "cannot read the message", NULL, NULL);
		return;
	}
	grpc_slice bytes = grpc_byte_buffer_reader_readall(&reader);
	grpc_byte_buffer_reader_destroy(&reader);
	grpc_byte_buffer_destroy(message);
	size_t len = GRPC_SLICE_LENGTH(bytes);

	/* The messages of every call in progress hold at most body_memory, as the HTTP
	 * API's request bodies do: past it a call is told to come back (UNAVAILABLE). */
	pthread_mutex_lock(&g->lock);
	int over = g->held + (int64_t)len > g->body_memory;
	if (!over) {
		g->held += (int64_t)len;
		c->held += (int64_t)len;
	}
	pthread_mutex_unlock(&g->lock);
	if (over) {
		grpc_slice_unref(bytes);
		metrics_ingest_rejected(INGEST_GRPC, 503);
		input_error_set(&err, 503, "unavailable", "",
				"the calls in progress hold all the memory the ingest gives messages "
				"(api_body_memory); nothing was stored, retry");
		refuse(c, &err);
		return;
	}
	long index = c->method == METHOD_STREAM ? (long)c->batch.in.n : -1;
	int bad = publish_add(&c->batch, GRPC_SLICE_START_PTR(bytes), len, &g->limits, index,
			      &err);
	grpc_slice_unref(bytes);
	if (bad) {
		metrics_ingest_rejected(INGEST_GRPC, err.status);
		refuse(c, &err);
		return;
	}
	if (c->method == METHOD_PUBLISH)
		store_events(c); /* one message: the client has half-closed already */
	else
		receive_next(c);
}

static void call_done(struct call *c)
{
	pthread_mutex_lock(&c->g->lock);
	int done = --c->ops == 0;
	pthread_mutex_unlock(&c->g->lock);
	if (done)
		call_free(c);
}

/* ---- the threads --------------------------------------------------------------------- */

static void *serve_cb(void *arg)
{
	struct grpc_intake *g = arg;
	for (;;) {
		grpc_event ev = grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
							   NULL);
		if (ev.type == GRPC_QUEUE_SHUTDOWN)
			break;
		if (ev.type != GRPC_OP_COMPLETE)
			continue;
		struct tag *t = ev.tag;
		struct call *c = t->call;
		switch (t->kind) {
		case TAG_NEW:
			if (!ev.success) {
				/* the server is shutting down: no client got this one */
				call_free(c);
				break;
			}
			/* the next call of the method is asked for under the lock, so a stop
			 * either sees it (and the server's shutdown cancels it) or prevents it */
			pthread_mutex_lock(&g->lock);
			if (!g->stopping)
				request_call(g, c->method);
			pthread_mutex_unlock(&g->lock);
			call_started(c);
			break;
		case TAG_RECV:
			message_received(c, ev.success);
			break;
		case TAG_DONE:
			call_done(c);
			break;
		case TAG_SHUTDOWN:
			pthread_mutex_lock(&g->lock);
			g->shut_down = 1;
			pthread_cond_broadcast(&g->shut_cond);
			pthread_mutex_unlock(&g->lock);
			break;
		}
	}
	return NULL;
}

/* ---- start and stop ---------------------------------------------------------------------- */

static grpc_server_credentials *credentials(const struct grpc_intake_config *cfg, char *err,
					     size_t errlen)
{
	if (!cfg->tls_cert || !*cfg->tls_cert)
		return grpc_insecure_server_credentials_create();
	char *cert = pem_read("tls_cert", cfg->tls_cert, err, errlen);
	char *key = cert ? pem_read("tls_key", cfg->tls_key, err, errlen) : NULL;
	grpc_server_credentials *creds = NULL;
	if (cert && key) {
		grpc_ssl_pem_key_cert_pair pair = {key, cert};
		creds = grpc_ssl_server_credentials_create_ex(
			NULL, &pair, 1, GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE, NULL);
		if (!creds)
			snprintf(err, errlen, "grpc_listen: tls_cert and tls_key do not make a usable "
				 "pair for gRPC's TLS");
	}
	pem_free(cert);
	pem_free(key);
	return creds;
}

static void intake_free(struct grpc_intake *g)
{
	if (g->server)
		grpc_server_destroy(g->server);
	if (g->cq)
		grpc_completion_queue_destroy(g->cq);
	pthread_mutex_destroy(&g->lock);
	pthread_cond_destroy(&g->shut_cond);
	free(g->threads);
	free(g);
	grpc_shutdown_blocking();
}

/* Drains a completion queue nobody else serves (a start that failed half way). */
static void drain(struct grpc_intake *g)
{
	for (;;) {
		grpc_event ev = grpc_completion_queue_next(g->cq, gpr_inf_future(GPR_CLOCK_REALTIME),
							   NULL);
		if (ev.type == GRPC_QUEUE_SHUTDOWN)
			return;
		struct tag *t = ev.tag;
		if (ev.type == GRPC_OP_COMPLETE && t->kind == TAG_NEW)
			call_free(t->call);
	}
}

struct grpc_intake *grpc_intake_start(const struct grpc_intake_config *cfg, char *err,
				      size_t errlen)
{
	struct grpc_intake *g = calloc(1, sizeof(*g));
	if (!g) {
		snprintf(err, errlen, "grpc_listen: out of memory");
		return NULL;
	}
	gpr_set_log_function(grpc_log_cb);
	gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
	grpc_init();
	pthread_mutex_init(&g->lock, NULL);
	pthread_cond_init(&g->shut_cond, NULL);
	g->limits = (struct publish_limits){cfg->max_payload, cfg->max_request, INGEST_MAX_BATCH};
	g->body_memory = cfg->body_memory;
	g->shutdown_grace_ms = cfg->shutdown_grace_ms;
	g->writer = cfg->writer;
	g->reg = cfg->reg;
	g->authorize = cfg->authorize;
	g->authorize_ctx = cfg->authorize_ctx;
	g->t_shutdown = (struct tag){NULL, TAG_SHUTDOWN};

	int64_t max_message = cfg->max_payload + ENVELOPE_OVERHEAD;
	grpc_arg args[] = {
		{.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
		 .value.integer = max_message > INT_MAX ? INT_MAX : (int)max_message},
		/* gRPC sets SO_REUSEPORT by default: a second outboxd on the same port would
		 * share it silently instead of failing to start */
		{.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_ALLOW_REUSEPORT, .value.integer = 0},
	};
	grpc_channel_args channel_args = {sizeof(args) / sizeof(args[0]), args};
	g->cq = grpc_completion_queue_create_for_next(NULL);
	g->server = grpc_server_create(&channel_args, NULL);
	for (int m = METHOD_PUBLISH; m <= METHOD_STREAM; m++)
		g->registered[m] = grpc_server_register_method(g->server, method_paths[m], NULL,
							       GRPC_SRM_PAYLOAD_NONE, 0);
	grpc_server_register_completion_queue(g->server, g->cq, NULL);
	grpc_server_credentials *creds = credentials(cfg, err, errlen);
	if (!creds)
		goto fail;
	g->port = grpc_server_add_http2_port(g->server, cfg->listen, creds);
	grpc_server_credentials_release(creds);
	if (g->port == 0) {
		snprintf(err, errlen, "grpc_listen: cannot listen on %s (in use, or not an address "
			 "of this host)", cfg->listen);
		goto fail;
	}
	grpc_server_start(g->server);
	/* as many calls asked for as there are threads to take them, per method */
	g->n_threads = cfg->threads > 0 ? cfg->threads : 1;
	for (int m = METHOD_PUBLISH; m < N_METHODS; m++)
		for (int i = 0; i < (m == METHOD_OTHER ? 1 : g->n_threads); i++)
			if (request_call(g, (enum method)m)) {
				snprintf(err, errlen, "grpc_listen: cannot ask gRPC for calls");
				goto fail_started;
			}
	if (!(g->threads = calloc((size_t)g->n_threads, sizeof(*g->threads)))) {
		snprintf(err, errlen, "grpc_listen: out of memory");
		goto fail_started;
	}
	for (int i = 0; i < g->n_threads; i++) {
		if (pthread_create(&g->threads[i], NULL, serve_cb, g) != 0) {
			snprintf(err, errlen, "grpc_listen: cannot start a thread");
			g->n_threads = i;
			if (i == 0)
				goto fail_started;
			grpc_intake_stop(g); /* the threads started serve the stop */
			return NULL;
		}
	}
	return g;

fail_started:
	grpc_server_shutdown_and_notify(g->server, g->cq, &g->t_shutdown);
	grpc_server_cancel_all_calls(g->server);
	grpc_completion_queue_shutdown(g->cq);
	drain(g);
	intake_free(g);
	return NULL;
fail:
	/* a server never started has nothing to shut down but its queue */
	grpc_server_destroy(g->server);
	g->server = NULL;
	grpc_completion_queue_shutdown(g->cq);
	drain(g);
	intake_free(g);
	return NULL;
}

int grpc_intake_port(const struct grpc_intake *g)
{
	return g->port;
}

void grpc_intake_stop(struct grpc_intake *g)
{
	if (!g)
		return;
	/* Streams still sending are refused now (nothing of them is stored yet); the calls
	 * storing their events are answered when the writer is done with them. */
	pthread_mutex_lock(&g->lock);
	g->stopping = 1;
	for (struct call *c = g->calls; c; c = c->next)
		if (c->state == CALL_RECEIVING)
			refuse_stopping(c, 1);
	pthread_mutex_unlock(&g->lock);
	grpc_server_shutdown_and_notify(g->server, g->cq, &g->t_shutdown);

	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	int64_t ns = until.tv_nsec + (g->shutdown_grace_ms % 1000) * 1000000;
	until.tv_sec += (time_t)(g->shutdown_grace_ms / 1000 + ns / 1000000000);
	until.tv_nsec = (long)(ns % 1000000000);
	pthread_mutex_lock(&g->lock);
	while (!g->shut_down &&
	       pthread_cond_timedwait(&g->shut_cond, &g->lock, &until) == 0)
		;
	int late = !g->shut_down;
	pthread_mutex_unlock(&g->lock);
	if (late) {
		log_warn("grpc: calls still open after shutdown_grace are cancelled");
		grpc_server_cancel_all_calls(g->server);
		pthread_mutex_lock(&g->lock);
		while (!g->shut_down)
			pthread_cond_wait(&g->shut_cond, &g->lock);
		pthread_mutex_unlock(&g->lock);
	}
	/* the writer's last callbacks (it runs until the intakes have stopped) */
	pthread_mutex_lock(&g->lock);
	while (g->storing)
		pthread_cond_wait(&g->shut_cond, &g->lock);
	pthread_mutex_unlock(&g->lock);
	grpc_completion_queue_shutdown(g->cq);
	for (int i = 0; i < g->n_threads; i++)
		pthread_join(g->threads[i], NULL);
	intake_free(g);
}
