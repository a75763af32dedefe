/* sink_http_int.h: what the files of the HTTP sink share (sink_http.c: the sink and
 * libcurl's multi interface; http_request.c: building a request, redaction;
 * http_wire.c: the lean HTTP/1.1 client of http:// and https:// requests, with its TLS
 * in http_tls.c (which knows no libcurl and has its own header); http_token.c: OAuth2
 * token requests; http_proxy.c: requests through the egress proxy). Nobody else
 * includes it: the dispatcher sees the HTTP sink only through sink.h. */
#ifndef OUTBOXD_DELIVER_SINK_HTTP_INT_H
#define OUTBOXD_DELIVER_SINK_HTTP_INT_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/epoll.h>

#include <curl/curl.h>

#include "core/errmap.h"
#include "core/ssrf.h"
#include "deliver/oauth2.h"
#include "deliver/redact.h"
#include "deliver/sink.h"
#include "util/buf.h"
#include "util/dheap.h"

#define TOKEN_FORM_MAX 16384  /* token request bodies (credentials, scope, audience) */
#define OAUTH_IDLE_MS (3600 * 1000LL) /* a token cache unused this long is dropped */
#define EPOLL_EVENTS 256      /* ready sockets taken per epoll_wait */
/* libcurl 7.88 walks connections per request: every connection of its cache when a
 * finished transfer is removed (curl_multi_remove_handle's close_connect_only pass,
 * whenever the handle kept its connection), and every connection to the host when the
 * next request looks for one to reuse. With 8,192 requests in flight to one receiver
 * those walks took 40% of the dispatch thread (bench/run.sh, slow row). Connections
 * are therefore kept in pools, libcurl share handles with a connection cache each,
 * one pool per CONN_POOL_ROUNDS round slots, so a walk sees at most about that many
 * (64 measured better than 256; a pool costs one libcurl handle, ~6 KiB). */
#define CONN_POOL_ROUNDS 64

/* The epoll set holds libcurl's sockets (data.u64 = fd << 1) and http_wire.c's
 * connections (data.u64 = the connection's address | 1). */
#define CURL_EVENT_TAG(fd) ((uint64_t)(fd) << 1)
#define WIRE_EVENT_TAG(ptr) ((uint64_t)(ptr) | 1)

/* What CURLOPT_PRIVATE of an easy handle points at: the first member of each struct. */
enum transfer_kind { TRANSFER_DELIVERY, TRANSFER_TOKEN, TRANSFER_LOOKUP };

/* HTTP_RESOLVING: behind the egress proxy, waiting for its target's address (counted
 * in flight, in the flying list, no transfer in the multi). */
enum http_state { HTTP_IDLE, HTTP_IN_FLIGHT, HTTP_TOKEN_WAIT, HTTP_RESOLVING };

struct http_sink;
struct http_proxy;
struct proxy_lookup;
struct oauth2_entry;
struct wire;
struct wire_conn;
struct wire_target;
struct wire_url;

/* The SSRF guard of one transfer: curl's open-socket hook (http_guard_open_cb) checks the
 * address it is about to connect to and writes here why it refused one. */
#define SSRF_REFUSED_CODE 403   /* an attempt's code when the SSRF guard refused it */

struct http_guard {
	const struct ssrf_policy *policy;
	int via_proxy;               /* every socket goes to the egress proxy: its target was
	                                checked before (http_proxy.c), the proxy is not */
	char refused[128];           /* "" or "loopback address 127.0.0.1" */
};

/* A request behind the egress proxy waiting for its target's address (http_proxy.c):
 * resume is called once, with te TRANSPORT_OK and failure NULL when the address is
 * known (checked or refused: http_proxy_prepare says which), else with why it could not
 * be found. */
struct proxy_wait {
	struct proxy_wait *next;
	struct proxy_lookup *lookup; /* the one it waits for, NULL when none */
	void (*resume)(struct http_sink *hs, struct proxy_wait *w, enum transport_error te,
		       const char *failure);
};

/* One round slot's HTTP state (sink_round.state[slot]). */
struct http_round {
	enum transfer_kind transfer; /* TRANSFER_DELIVERY */
	struct http_sink *hs;
	struct sink_round *sj;         /* the round it belongs to */
	enum http_state state;
	CURL *easy;
	CURLSH *pool;                /* the connection cache its requests use (borrowed) */
	int easy_ready;              /* easy carries the options all requests share */
	int easy_tls;                /* ... and a subscription's TLS files */
	struct curl_slist *headers;  /* into hnodes/hbuf: owned by the round, not by curl_slist */
	struct curl_slist *hnodes;   /* header list nodes, reused from attempt to attempt */
	size_t hnodes_cap;
	char *hbuf;                  /* the header lines, NUL-separated; may hold credentials */
	size_t hbuf_cap, hbuf_len;
	char *url;                   /* owned when query auth rewrote it, else NULL */
	char errbuf[CURL_ERROR_SIZE];
	struct http_guard guard;       /* the SSRF guard of its connections */
	struct proxy_wait pwait;     /* behind the egress proxy: waiting for an address */
	struct curl_slist *connect_to; /* behind it: CURLOPT_CONNECT_TO, owned */
	size_t body_len;             /* response bytes kept in sj->cause */
	struct oauth2_entry *oauth;  /* oauth2: the subscription's token cache */
	uint64_t token_gen;          /* oauth2: generation of the token sent */
	int reauthed;                /* oauth2: this attempt got a new token after a 401 */
	int resent;                  /* this attempt's request was written twice: the kept-alive
	                                connection of the first closed before any byte of an
	                                answer (either client resends it on a new one) */
	int prereqs;                 /* libcurl: requests its transfer was about to write */
	struct http_round *next;       /* in an oauth2 entry's waiters */
	struct http_round *fly_prev, *fly_next; /* in http_sink.flying while HTTP_IN_FLIGHT */
	/* http_wire.c: the request when it goes over the lean client */
	struct wire_conn *conn;      /* its connection while in flight, else NULL */
	char *whead;                 /* the request head; may hold credentials, wiped after */
	size_t whead_cap, whead_len;
	struct wire_url *wurl;       /* the URL last looked up: its parts and target */
	/* the attempt's transfer, for the dispatcher's flow control (sink.h) */
	int64_t start_us;            /* when its transfer began (connect included) */
	int64_t start_real_us;       /* the same on the wall clock */
	int64_t answer_real_us;      /* when the first byte of the answer reached the kernel
	                                (lean client, SO_TIMESTAMP; 0 = not known): the
	                                receiver's latency without the time the answer
	                                waited for this thread */
	int wrote;                   /* a byte of the request was written */
	int local;                   /* it failed for want of a local resource */
	struct dheap_node answer_by; /* libcurl: the attempt's timeout, from when it was
	                                connected and about to write (http_sink.answers) */
};

/* 1 when connect or socket failed with errno e for want of a resource of this process or
 * host (descriptors, ephemeral ports, buffers), not because of the receiver. */
static inline int errno_is_local(int e)
{
	return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM || e == EADDRNOTAVAIL;
}

/* A token request in flight (one per oauth2_entry at most). */
struct token_fetch {
	enum transfer_kind transfer; /* TRANSFER_TOKEN */
	struct oauth2_entry *entry;
	CURL *easy;
	struct curl_slist *headers;
	struct buf form;             /* the request body; wiped when freed */
	struct buf response;         /* capped at OAUTH2_RESPONSE_MAX */
	int too_big;
	struct redact_set redact;    /* the request's credentials, to redact its failure */
	char *entry_url;             /* token_url (owned) */
	char url_shown[256];         /* token_url without its query, for causes */
	char errbuf[CURL_ERROR_SIZE];
	struct http_guard guard;     /* the SSRF guard of its connections */
	struct proxy_wait pwait;     /* behind the egress proxy: waiting for an address */
	struct curl_slist *connect_to; /* behind it: CURLOPT_CONNECT_TO, owned */
};

/* The token cache of one subscription's oauth2 configuration (a changed configuration
 * gets a new entry, so no token outlives the credentials that obtained it). */
struct oauth2_entry {
	char sub_id[UUID_STR_LEN];
	uint64_t fingerprint;        /* oauth2_params_fingerprint */
	struct oauth2_cache cache;
	struct token_fetch *fetch;   /* in flight, or NULL */
	struct http_round *waiters;    /* HTTP_TOKEN_WAIT rounds; non-empty only while fetch runs */
	int64_t last_used_ms;        /* monotonic */
	int failing;                 /* the last request failed (logged once) */
	int refused;                 /* ... and the SSRF guard refused its address */
	struct oauth2_entry *next;
};

struct http_sink {
	struct sink_env env;
	int64_t connect_timeout_ms;  /* a delivery's connect (TLS included) may take this */
	struct dheap answers;        /* libcurl requests connected: their answer deadlines */
	struct ssrf_policy ssrf_policy; /* which addresses may be connected to (ssrf_allow) */
	const struct ssrf_policy *ssrf; /* &ssrf_policy */
	const char *tls_dir;         /* borrowed: where a subscription's TLS files may be */
	CURLM *multi;
	int epfd;                    /* curl's sockets */
	int64_t curl_due_us;         /* curl's timer (monotonic), -1 = none */
	int curl_timer_set;          /* the timer callback ran (see http_run) */
	struct epoll_event events[EPOLL_EVENTS];
	int n_events;
	uint8_t *fd_state;           /* FD_* by socket number (curl_socket_cb) */
	size_t fd_state_cap;
	int in_flight;               /* requests running */
	struct oauth2_entry *oauth;  /* token caches, few: one per oauth2 subscription */
	int token_fetches;           /* token requests in flight */
	struct http_round *flying;     /* the rounds with a request running (for abort) */
	CURLSH **pools;              /* connection caches, see CONN_POOL_ROUNDS */
	int n_pools;
	int next_pool;               /* the pool of the next round made */
	struct wire *wire;           /* the lean client, NULL when off */
	struct http_proxy *proxy;    /* the egress proxy (http_proxy.c), NULL when none */
};

/* ---- sink_http.c ---------------------------------------------------------------------- */

/* Bookkeeping of rounds with a request running (for abort). */
void http_flying_add(struct http_round *h);
void http_flying_remove(struct http_round *h);
/* The attempt's request is being written again on a new connection (either client, when
 * the kept-alive one closed before any byte of an answer): its cause will say so, and
 * outboxd_http_resent_total counts it. */
void http_resent(struct http_round *h);
/* The attempt is over: hands it back to the dispatcher (env.done). */
void http_report(struct http_round *h);
/* A request (libcurl's or the lean client's) stopped running: bookkeeping. */
void http_transfer_done(struct http_round *h);
/* A request ended: te, the HTTP status when te is TRANSPORT_OK, else the transport's
 * own text (borrowed). Sets the attempt's outputs and reports it, or resends once with a
 * new OAuth2 token after a 401. */
void http_finish(struct http_round *h, enum transport_error te, long status, const char *errtext);
/* Ends the attempt with code, message and cause (borrowed; redacted here). */
void http_failed(struct http_round *h, int code, const char *message, const char *cause);
/* Ends the attempt with a local failure (no request was made): 520 with why. */
void http_fail_local(struct http_round *h, const char *why);
/* The same, and permanent: the request must never be made as things stand. */
void http_fail_refused(struct http_round *h, const char *why);
/* The transport error class of a failed transfer (core/errmap.h). */
enum transport_error http_classify(CURLcode rc, const char *errbuf);
/* CURLOPT_WRITEFUNCTION of deliveries: keeps the start of the response body. */
size_t http_body_cb(char *data, size_t size, size_t nmemb, void *ctx);

/* ---- http_request.c ------------------------------------------------------------------- */

/* Replaces every credential of the round's request in text (size bytes) with ********,
 * in every encoding (redact.h), so no cause or log line carries one. */
void http_redact(const struct http_round *h, char *text, size_t size);
/* Wipes the round's header lines (they may carry credentials) and empties the list. */
void http_headers_clear(struct http_round *h);
/* Options every transfer of hs shares (owner in CURLOPT_PRIVATE), the SSRF guard
 * (guard->policy set by the caller) and the egress proxy among them. */
void http_easy_common(const struct http_sink *hs, CURL *e, void *owner, char *errbuf,
		      curl_write_callback write_cb, struct http_guard *guard);
/* 1 when every TLS file of h's subscription is one outboxd can read inside tls_dir; a
 * request about to open a connection that reads them is refused otherwise, for good,
 * with http_fail_tls_outside. */
int http_tls_files_inside(const struct http_round *h);
void http_fail_tls_outside(struct http_round *h);
/* Builds the attempt's request (headers, signature, auth; bearer borrowed, may be NULL)
 * and adds it to the multi handle, or fails the attempt. */
void http_send_request(struct http_round *h, const char *bearer);

/* ---- http_wire.c ---------------------------------------------------------------------- */

/* The lean client; max_idle: kept-alive connections at most; ca_file, ca_path (borrowed,
 * copied, may be NULL): the authorities https:// trusts when a subscription names no CA
 * file (libcurl's own defaults). NULL when out of memory. */
struct wire *wire_open(struct http_sink *hs, int max_idle, const char *ca_file,
		       const char *ca_path);
void wire_close(struct wire *w);
/* Sends the attempt of h to url (its head built from h's header lines) when the lean
 * client can: 1 and the attempt is under way or reported; 0 and nothing happened when
 * libcurl must take it (an address not known, a header libcurl owns, a URL it rewrites). */
int wire_send(struct wire *w, struct http_round *h, const char *url);
/* libcurl's request to url for s (borrowed: its TLS files) succeeded: its address serves
 * the lean client for a while. */
void wire_learn(struct wire *w, const char *url, const struct subscription *s, CURL *easy);
/* A connection's epoll events. */
void wire_ready(struct wire *w, struct wire_conn *c, uint32_t events);
/* Fails the attempts whose deadline passed; wire_due_us: the soonest, -1 none. */
void wire_expire(struct wire *w, int64_t now_us);
int64_t wire_due_us(const struct wire *w);
/* Stops h's request without a report (abort, slot freed). */
void wire_cancel(struct wire *w, struct http_round *h);
/* Frees h's lean-client buffers (its slot goes away). */
void wire_round_free(struct http_round *h);
/* Frees connections closed since the last call: before epoll_wait, never during a batch. */
void wire_reap(struct wire *w);
/* Closes kept-alive connections unused for too long. */
void wire_prune(struct wire *w, int64_t now_ms);

/* ---- http_proxy.c --------------------------------------------------------------------- */

enum proxy_step {
	PROXY_GO,       /* e is set to reach the checked address through the proxy */
	PROXY_WAIT,     /* w waits for the lookup of the target's name */
	PROXY_REFUSED,  /* the SSRF guard refused the target: guard->refused says why */
	PROXY_FAILED,   /* why says why nothing can be asked */
};

/* The egress proxy at url (borrowed, copied); NULL when out of memory. */
struct http_proxy *http_proxy_open(const char *url);
/* Stops its lookups (their waiters must be gone: abort first) and frees it. */
void http_proxy_close(struct http_sink *hs);
/* Lookups in flight. */
int http_proxy_busy(const struct http_sink *hs);
/* The proxy's options on e (none without a proxy); guard->via_proxy follows. */
void http_proxy_options(const struct http_sink *hs, CURL *e, struct http_guard *guard);
/* Makes e (a delivery's or token request's, borrowed) reach url through the proxy, to an
 * address the SSRF guard checked: see enum proxy_step. *connect_to (owned by the caller,
 * replaced here) must outlive the transfer; w is the caller's place in a lookup's list. */
enum proxy_step http_proxy_prepare(struct http_sink *hs, CURL *e, const char *url,
				   struct http_guard *guard, struct curl_slist **connect_to,
				   struct proxy_wait *w, char *why, size_t whylen);
/* Takes w out of its lookup's list (abort, slot freed); nothing when it waits for none. */
void http_proxy_wait_cancel(struct http_sink *hs, struct proxy_wait *w);
/* A lookup ended with rc: its answer is kept, and every waiter resumed. */
void http_proxy_lookup_done(struct http_sink *hs, struct proxy_lookup *l, CURLcode rc);

/* ---- http_token.c --------------------------------------------------------------------- */

/* Sends the attempt with the subscription's OAuth2 token: at once when the cache has
 * one, else after the one token request in flight (the round waits). */
void http_authorize(struct http_round *h);
/* A token request finished with rc: store or fail the cache, then every waiter goes on. */
void http_token_done(struct http_sink *hs, struct token_fetch *f, CURLcode rc);
/* Stops e's token request (sink abort/close). */
void http_token_abort(struct http_sink *hs, struct oauth2_entry *e);
/* Drops token caches unused for an hour. */
void http_tokens_prune(struct http_sink *hs, int64_t now_ms);

#endif
