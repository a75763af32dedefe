/* api.h: the HTTP API of outboxd (docs/api.md), independent of the HTTP server.
 *
 * http.c (libmicrohttpd glue) turns each request into a struct api_request and sends
 * back the struct api_response; everything between is plain C, so handlers can be tested
 * without sockets. A request is decided in two halves: api_begin sees only its head
 * (method, path, headers, source address) and answers everything that needs no body —
 * authentication included — so the server reads a body only for a caller it knows;
 * api_finish runs the route's handler with the body. */
#ifndef OUTBOXD_API_API_H
#define OUTBOXD_API_API_H

#include <stddef.h>

#include "core/input_error.h"
#include "core/model.h"
#include "core/subscriptions.h"
#include "kafka/envelope.h"
#include "store/spool.h"
#include "store/writer.h"
#include "store/store.h"

/* How a server that serves many connections on a few threads lets a handler answer later
 * (http.c): POST /v1/events hands its events to the writer and returns, so the thread
 * takes other requests until they are durable. */
struct api_defer {
	/* Called by the handler before it hands the request over: 0 when the answer may
	 * come later (the connection is put aside); -1 when it may not (the server is
	 * stopping), and the handler answers before it returns. */
	int (*suspend)(void *ctx);
	/* Called once the answer is ready (from a writer thread, or the handler's own):
	 * the server then calls api_complete on its thread. */
	void (*resume)(void *ctx);
	void *ctx;
};

struct api_pending;

struct api_request {
	const char *method;
	const char *path;                  /* without the query string */
	/* Looks up a query parameter; NULL when absent. */
	const char *(*query)(void *ctx, const char *name);
	void *query_ctx;
	const char *authorization;         /* header value or NULL */
	const char *content_type;          /* header value or NULL */
	const char *traceparent;           /* W3C trace context header or NULL */
	const char *remote_addr;           /* the client's address as text ("192.0.2.7",
	                                      "2001:db8::1"), or NULL when unknown */
	int64_t content_length;            /* the Content-Length header, -1 when absent */
	const char *body;
	size_t body_len;
	int body_too_large;                /* the server stopped reading at the limit */
	const char *actor;                 /* set by the router: the token's name */
	unsigned scopes;                   /* set by the router: the token's scopes */
	const char *if_none_match;         /* header value or NULL (console assets) */
	const struct api_defer *defer;     /* NULL: handlers answer before they return */
};

struct api_response {
	int status;
	char *body;                        /* JSON text, malloc'd, or NULL for no body */
	const char *content_type;          /* NULL: application/json */
	/* The console's embedded assets (routes_console.c): a body that lives as long as the
	 * process (not freed; used instead of body when set) and the headers that go with it,
	 * each NULL when not sent. */
	const void *static_body;
	size_t static_len;
	const char *etag;
	const char *cache_control;
	const char *csp;                   /* Content-Security-Policy, with nosniff and
	                                      frame and referrer headers */
	int retry_after;                   /* seconds for a Retry-After header, 0 for none */
	/* Set (and nothing else) when the answer comes later, through req->defer: after its
	 * resume, api_complete gives it; api_pending_free drops it unanswered. */
	struct api_pending *pending;
};

typedef void (*api_wake_cb)(void *ctx);

/* Who sent a request: the scopes its token has (core/token.h) and the token's name, which
 * the audit log records as the actor. */
struct api_caller {
	unsigned scopes;
	char name[65];
	int64_t expires_at;                /* a named token's expiry (ms), 0 for none */
};

/* The named tokens the router authenticates against (routes_tokens.c). */
struct api_tokens;
struct api_tokens *api_tokens_new(store *st);   /* returned; NULL when out of memory */
void api_tokens_free(struct api_tokens *t);
/* Finds token among the named tokens at now_ms: 0 with *out filled; -1 when unknown;
 * API_TOKEN_EXPIRED when it expired (out->name and out->expires_at filled). A token found
 * has its last use recorded in the store at most once a minute. Any thread. */
#define API_TOKEN_EXPIRED (-2)
int api_tokens_lookup(struct api_tokens *t, const char *token, size_t len, int64_t now_ms,
		      struct api_caller *out);

struct authlimit;

/* What the handlers work with; all borrowed and alive while the API serves. */
struct api {
	store *st;
	struct sub_registry *reg;
	struct writer *writer;
	struct spool *spool;               /* the spool, or NULL when off (stats, metrics) */
	api_wake_cb wake;                  /* new due work (replay): wake the dispatcher */
	void *wake_ctx;
	api_wake_cb wake_jobs;             /* a new replay job: wake the janitor thread */
	void *wake_jobs_ctx;
	const char *admin_token;
	const char *ingest_token;          /* may be NULL */
	struct api_tokens *tokens;         /* named tokens (routes_tokens.c), or NULL */
	struct authlimit *authlimit;       /* failed authentications per address
	                                      (core/authlimit.h), or NULL: not limited */
	int64_t max_payload;
	int64_t max_request;
	struct retry_policy retry_defaults;
	const char *tls_dir;               /* subscriptions' TLS files must lie inside it */
	int replay_rate;                   /* default pace of filter replays */
	int metrics_private;               /* /metrics needs the admin token */
	int64_t stats_window_ms;
	/* The framing of the OutboxEvents the Kafka sink publishes (kafka_wire_format,
	 * kafka_schema_id): a delivery to a kafka:// subscription of payload_format
	 * envelope shows the one it is published as. */
	enum envelope_wire kafka_wire;
	uint32_t kafka_schema_id;
	/* Readiness of a component besides the store (the Kafka intake's brokers), or NULL:
	 * 0 when ready, else -1 with the reason in why. */
	int (*ready)(void *ctx, char *why, size_t whylen);
	void *ready_ctx;
};

/* What api_begin decided for a request that goes on to its handler. */
struct api_head {
	const struct api_route *route;
	const char *id;                    /* the {id} path segment (in id_buf), or NULL */
	char id_buf[64];
	struct api_caller who;
	int wants_body;                    /* POST or PATCH: read the body for the handler */
};

/* The first half of a request, from its head alone (req's body is not looked at):
 * health, readiness, metrics and the console's files, unknown routes (404), the
 * authentication (401, or 429 for an address over its failure limit), methods (405),
 * scopes (403), and for a body to come its declared size (413 over max_request) and type
 * (415). Returns 1 when res holds the answer; 0 when head is filled and api_finish is to
 * be called once the body is read. */
int api_begin(struct api *api, const struct api_request *req, struct api_head *head,
	      struct api_response *res);
/* The second half: a body the server stopped reading (413), then the route's handler.
 * head is what api_begin filled for the same request. */
void api_finish(struct api *api, const struct api_request *req, const struct api_head *head,
		struct api_response *res);
/* The answer of a request whose handler left res->pending, once req->defer's resume was
 * called; pending is consumed. */
void api_complete(struct api_pending *pending, struct api_response *res);
/* Drops a pending request whose answer cannot be sent any more (the connection went).
 * Only after its resume was called. */
void api_pending_free(struct api_pending *pending);
/* Both halves at once, for a request whose body is already there. res->body is returned
 * to the caller (free it). */
void api_handle(struct api *api, const struct api_request *req, struct api_response *res);

/* ---- shared by the route files ------------------------------------------------------------ */

struct json_t;
/* Sets res to status with the JSON value (consumed) as body. */
void api_reply_json(struct api_response *res, int status, struct json_t *body);
/* Sets res to the error body {"error":{"code","message","field"}}. */
void api_reply_error(struct api_response *res, const struct input_error *err);
/* Same, from pieces. */
void api_reply_errorf(struct api_response *res, int status, const char *code, const char *field,
		      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* Maps a store error to 404/409/503/500 with a message. */
void api_reply_store_error(struct api_response *res, int rc, const char *what);
/* The query parameter name of req (a const struct api_request *), NULL when absent: the
 * lookup core/filter.h's parsers take. */
const char *api_query_get(const void *req, const char *name);
/* The integer query parameter name into *out (def when absent). 0, or -1 with res set to
 * a 400 naming the parameter when it is not an integer from min to max. */
int api_query_int(const struct api_request *req, const char *name, long def, long min,
		  long max, long *out, struct api_response *res);
/* name=ID,ID,... (UUIDs, at most max): *ids in the order named (the caller frees it) and
 * *n, both empty when absent; 0, or -1 with the 400 answered. */
int api_query_ids(const struct api_request *req, const char *name, size_t max,
		  char (**ids)[UUID_STR_LEN], size_t *n, struct api_response *res);

/* One route of the API; pattern may hold one "{id}" segment. scope is the enum token_scope
 * a caller's token must grant (core/token.h). */
struct api_route {
	const char *method;
	const char *pattern;
	void (*handler)(struct api *api, const struct api_request *req, const char *id,
			struct api_response *res);
	unsigned scope;
};

/* The route table (for docs and tests). */
const struct api_route *api_routes(size_t *n);

/* Route handlers (routes_*.c). `id` is the path parameter or NULL. */
void api_events_post(struct api *api, const struct api_request *req, struct api_response *res);
void api_events_get(struct api *api, const char *id, struct api_response *res);
void api_events_list(struct api *api, const struct api_request *req, struct api_response *res);
void api_event_types(struct api *api, const struct api_request *req, struct api_response *res);
void api_events_test(struct api *api, const char *sub_id, const struct api_request *req,
		     struct api_response *res);
void api_subs_create(struct api *api, const struct api_request *req, struct api_response *res);
void api_subs_list(struct api *api, const struct api_request *req, struct api_response *res);
void api_subs_get(struct api *api, const char *id, struct api_response *res);
void api_subs_patch(struct api *api, const char *id, const struct api_request *req,
		    struct api_response *res);
void api_subs_delete(struct api *api, const char *id, const struct api_request *req,
		     struct api_response *res);
void api_deliveries_list(struct api *api, const struct api_request *req, int dead_only,
			 struct api_response *res);
void api_deliveries_get(struct api *api, const char *id, struct api_response *res);
void api_dlq_replay(struct api *api, const struct api_request *req, struct api_response *res);
void api_dlq_purge(struct api *api, const char *id, const struct api_request *req,
		   struct api_response *res);
void api_dlq_purge_filter(struct api *api, const struct api_request *req,
			  struct api_response *res);
void api_jobs_get(struct api *api, const char *id, struct api_response *res);
void api_jobs_list(struct api *api, const struct api_request *req, struct api_response *res);
void api_jobs_cancel(struct api *api, const char *id, const struct api_request *req,
		     struct api_response *res);
void api_audit_list(struct api *api, const struct api_request *req, struct api_response *res);
void api_stats(struct api *api, const struct api_request *req, struct api_response *res);
void api_tokens_create(struct api *api, const struct api_request *req, struct api_response *res);
void api_tokens_list(struct api *api, struct api_response *res);
void api_tokens_delete(struct api *api, const char *id, const struct api_request *req,
		       struct api_response *res);
/* routes_console.c: GET /console and /console/...: the operator console's embedded
 * assets. Returns 1 when path is the console's (res filled), 0 otherwise. */
int api_console(const struct api_request *req, struct api_response *res);
/* routes_overview.c: what the console reads besides the lists. */
void api_whoami(struct api *api, const struct api_request *req, struct api_response *res);
void api_stats_series(struct api *api, const struct api_request *req, struct api_response *res);
void api_delivery_request(struct api *api, const char *id, struct api_response *res);
/* GET /metrics: Prometheus text (res->content_type set). */
void api_metrics(struct api *api, struct api_response *res);

/* Decides whether a caller that did not come through the HTTP server (a gRPC ingest
 * call, path its method's path) may ingest, by the rules of POST /v1/events: the same
 * tokens (the admin and ingest tokens, named tokens with the ingest scope), and a failed
 * authentication counted, audited, logged and limited per address (remote_addr, NULL
 * when unknown) as api_begin does. authorization is the Bearer value as sent (NULL:
 * none); all borrowed; ctx is the struct api. Returns 0 when the caller may ingest;
 * otherwise -1 with err holding what the API would answer (status 401, 403 or 429, its
 * code and message). Any thread. */
int api_ingest_authorize(void *ctx, const char *authorization, const char *remote_addr,
			 const char *path, struct input_error *err);

/* Records an operator action in the audit log (failures are logged, not fatal). */
void api_audit(struct api *api, const struct api_request *req, const char *action,
	       const char *target, long long count, const char *detail);
/* The same for what no authenticated caller did (a failed authentication): actor names
 * who it was ("unauthenticated"), count is 0. All borrowed. */
void api_audit_as(struct api *api, const char *actor, const char *action, const char *target,
		  const char *detail);

#endif
