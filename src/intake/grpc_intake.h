/* grpc_intake.h: the gRPC ingest (docs/grpc.md): the service outboxd.v1.Ingest of
 * proto/outboxd/v1/ingest.proto on grpc_listen, served with gRPC's C core.
 *
 * A way in like POST /v1/events, with its rules: the caller's token (metadata
 * authorization: Bearer ..., the ingest scope) is checked before a message is read; each
 * OutboxEvent is checked by grpc_publish.h; the events of a call go through the writer
 * and the call is answered only once they are durable. Off unless grpc_listen is set. */
#ifndef OUTBOXD_INTAKE_GRPC_INTAKE_H
#define OUTBOXD_INTAKE_GRPC_INTAKE_H

#include <stddef.h>
#include <stdint.h>

#include "core/input_error.h"
#include "core/subscriptions.h"
#include "store/writer.h"

/* Decides whether a call may ingest, from its metadata's authorization value (NULL when
 * absent) and the caller's address (NULL when unknown); path is the method's. Returns 0
 * when it may; otherwise -1 with err holding the refusal the HTTP API would answer
 * (status 401, 403 or 429, code and message). Called on the intake's threads. */
typedef int (*grpc_intake_authorize_cb)(void *ctx, const char *authorization,
					 const char *peer, const char *path,
					 struct input_error *err);

struct grpc_intake_config {
	const char *listen;            /* host:port, [v6]:port; port 0: any free port */
	const char *tls_cert;          /* PEM files: TLS with them; NULL: plaintext */
	const char *tls_key;
	int threads;                   /* threads serving calls (each may wait for a commit) */
	int64_t max_payload;           /* an event's payload, bytes */
	int64_t max_request;           /* the messages of one call together, bytes */
	int64_t body_memory;           /* the messages of every call in progress together */
	int64_t shutdown_grace_ms;     /* how long grpc_intake_stop waits for calls in progress */
	struct writer *writer;         /* borrowed, outlives the intake */
	struct sub_registry *reg;      /* borrowed, outlives the intake */
	grpc_intake_authorize_cb authorize;
	void *authorize_ctx;
};

struct grpc_intake;

/* Listens on cfg->listen and starts the threads (cfg and what it points to are borrowed
 * for the call only, but writer, reg and authorize_ctx must outlive the intake). Returns
 * the intake, or NULL with err set (the address cannot be bound, a TLS file cannot be
 * read). */
struct grpc_intake *grpc_intake_start(const struct grpc_intake_config *cfg, char *err,
				      size_t errlen);

/* The port it listens on (the one the system chose for port 0). */
int grpc_intake_port(const struct grpc_intake *g);

/* Stops taking calls: a new call, or a stream still sending, is answered UNAVAILABLE
 * with nothing of it stored; a call whose events are being stored is answered when they
 * are (or are not). Calls still open after shutdown_grace_ms are cancelled. Then the
 * threads end and g is freed. NULL is fine. Call before the writer stops. */
void grpc_intake_stop(struct grpc_intake *g);

#endif
