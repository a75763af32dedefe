/* api.h: the HTTP API of outboxd (DESIGN §4, contract), independent of the HTTP server.
 *
 * http.c (libmicrohttpd glue) turns each request into a struct api_request and sends
 * back the struct api_response; everything between is plain C, so handlers can be tested
 * without sockets. */
#ifndef OUTBOXD_API_API_H
#define OUTBOXD_API_API_H

#include <stddef.h>

#include "core/input_error.h"
#include "core/model.h"
#include "core/subscriptions.h"
#include "store/spool.h"
#include "store/writer.h"
#include "store/store.h"

struct api_request {
	const char *method;
	const char *path;                  /* without the query string */
	/* Looks up a query parameter; NULL when absent. */
	const char *(*query)(void *ctx, const char *name);
	void *query_ctx;
	const char *authorization;         /* header value or NULL */
	const char *content_type;          /* header value or NULL */
	const char *traceparent;           /* W3C trace context header or NULL */
	const char *body;
	size_t body_len;
	int body_too_large;                /* the server stopped reading at the limit */
	const char *actor;                 /* set by the router: the token's name */
	unsigned scopes;                   /* set by the router: the token's scopes */
	const char *if_none_match;         /* header value or NULL (console assets) */
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
};

typedef void (*api_wake_cb)(void *ctx);

/* Who sent a request: the scopes its token has (core/token.h) and the token's name, which
 * the audit log records as the actor. */
struct api_caller {
	unsigned scopes;
	char name[65];
};

/* The named tokens the router authenticates against (routes_tokens.c). */
struct api_tokens;
struct api_tokens *api_tokens_new(store *st);   /* returned; NULL when out of memory */
void api_tokens_free(struct api_tokens *t);
/* Finds token among the named tokens: 0 with *out filled, -1 when unknown. Any thread. */
int api_tokens_lookup(struct api_tokens *t, const char *token, size_t len,
		      struct api_caller *out);

/* What the handlers work with; all borrowed and alive while the API serves. */
struct api {
	store *st;
	struct sub_registry *reg;
	struct writer *writer;
	struct spool *spool;               /* the spool, or NULL when off (stats, metrics) */
	api_wake_cb wake;                  /* new due work (replay): wake the dispatcher */
	void *wake_ctx;
	api_wake_cb wake_jobs;             /* a new replay job: wake the jobs thread */
	void *wake_jobs_ctx;
	const char *admin_token;
	const char *ingest_token;          /* may be NULL */
	struct api_tokens *tokens;         /* named tokens (routes_tokens.c), or NULL */
	int64_t max_payload;
	int64_t max_request;
	struct retry_policy retry_defaults;
	const char *tls_dir;               /* subscriptions' TLS files must lie inside it */
	int replay_rate;                   /* default pace of filter replays */
	int metrics_private;               /* /metrics needs the admin token */
	int64_t stats_window_ms;
	/* Readiness of a component besides the store (the Kafka intake's brokers), or NULL:
	 * 0 when ready, else -1 with the reason in why. */
	int (*ready)(void *ctx, char *why, size_t whylen);
	void *ready_ctx;
};

/* Answers one request. res->body is returned to the caller (free it). */
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
/* The integer query parameter name into *out (def when absent). 0, or -1 with res set to
 * a 400 naming the parameter when it is not an integer from min to max. */
int api_query_int(const struct api_request *req, const char *name, long def, long min,
		  long max, long *out, struct api_response *res);

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
void api_subs_create(struct api *api, const struct api_request *req, struct api_response *res);
void api_subs_list(struct api *api, struct api_response *res);
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
void api_stats(struct api *api, struct api_response *res);
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

/* Records an operator action in the audit log (failures are logged, not fatal). */
void api_audit(struct api *api, const struct api_request *req, const char *action,
	       const char *target, long long count, const char *detail);

#endif
