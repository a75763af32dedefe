/* receiver.h: what the files of test_receiver share (tests/support/receiver*.c).
 *
 * test_receiver is a program, not a library: its interface to tests and benchmarks is its
 * command line and the JSON control API under /_control/ (receiver.c says both; the
 * harness drives them, tests/support/harness.h). This header only ties its files together:
 *   receiver.c          the HTTP server loop: options, the MHD daemons, data requests
 *   receiver_record.c   recorded requests, webhook-id counters, receipts and ack tallies
 *   receiver_script.c   behaviours: per-path scripts of answers, echo, chaos draws
 *   receiver_control.c  the control API's endpoints
 *   receiver_tls.c      HTTPS: client certificates checked in the handshake, PEM files
 *   receiver_table.c    the arena and hash table the records are kept in
 * All mutable state is in rx, under rx.lock; a function whose name ends in _locked (or
 * says "caller holds rx.lock") must be called with it held. */
#ifndef OUTBOXD_TESTS_RECEIVER_H
#define OUTBOXD_TESTS_RECEIVER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>
#include <microhttpd.h>

#define DELAY_MAX_MS      600000       /* a scripted delay longer than 10 min is a typo */
#define CONTROL_PREFIX    "/_control/"

/* ---- small containers (receiver_table.c) --------------------------------------------- */

/* Append-only string storage: one allocation per MiB instead of one per webhook-id, so a
 * million ids cost tens of MiB, not a million malloc headers. */
struct arena_block {
	struct arena_block *next;
	size_t used;
	size_t size;
	char data[];
};

struct arena {
	struct arena_block *head;
};

/* Open-addressing hash table (linear probing, power-of-two capacity, load <= 1/2). It does
 * not own its keys: the caller keeps them alive for as long as they are in the table. */
struct table_entry {
	uint64_t hash;
	const char *key;        /* NULL = empty slot */
	void *value;
};

struct table {
	struct table_entry *slots;
	size_t cap;
	size_t len;
};

/* A copy of s in the arena (lives until arena_free); NULL when out of memory. */
const char *arena_strdup(struct arena *a, const char *s);
void arena_free(struct arena *a);

uint64_t hash_string(const char *s);

/* The slot holding key, or the empty slot where it would go. cap must be non-zero. */
struct table_entry *table_slot(const struct table *t, const char *key, uint64_t hash);

/* The value of key; *found says whether it is there (a value may be NULL). */
void *table_get(const struct table *t, const char *key, bool *found);

/* Doubles the capacity (64 at first). Returns 0, or -1 when out of memory (t unchanged). */
int table_grow(struct table *t);

/* Inserts key (borrowed, must outlive the entry) if absent. Returns 1 if inserted, 0 if
 * it was already there, -1 when out of memory. */
int table_put(struct table *t, const char *key, void *value);

/* Frees the slots, not the keys or values. */
void table_free(struct table *t);

/* ---- the receiver's state ------------------------------------------------------------ */

/* One receipt kept by --timestamps. id points into rx.id_arena, so a reset frees both. */
struct receipt {
	const char *id;
	int64_t received_at_us;
};

/* One scripted answer. An empty FIFO falls back to the path's default, then to 200 "ok". */
struct scripted_response {
	int status;
	int delay_ms;
	bool drop;
	int echo;               /* 1: the body is the request as received (request line,
	                           headers, blank line, body), 2: the request's body alone;
	                           an endpoint that quotes what it got in its error,
	                           credentials and all */
	char *body;             /* owned; NULL means "ok" */
	size_t body_len;
	json_t *headers;        /* owned reference, or NULL */
};

/* Chaos mode of a path: each request draws one outcome by weight, unless the path's
 * script FIFO still holds answers (a script wins). */
enum chaos_outcome {
	CHAOS_OK,               /* 200 at once */
	CHAOS_SLOW,             /* 200 after a delay in slow_ms */
	CHAOS_ERROR,            /* 500, 502, 503 or 504 */
	CHAOS_THROTTLE,         /* 429 with Retry-After in retry_after_s */
	CHAOS_RESET,            /* the connection reset (RST), no answer */
	CHAOS_TIMEOUT,          /* 503 after timeout_ms: later than the caller waits */
	CHAOS_N
};

struct chaos {
	bool on;
	unsigned weight[CHAOS_N];
	unsigned total_weight;
	int slow_ms[2];         /* [min, max] */
	int retry_after_s[2];
	int timeout_ms;
	long drawn[CHAOS_N];    /* kept across changes of the weights; a reset clears them */
};

struct path_state {
	char *path;             /* owned; also the key in rx.paths */
	long count;             /* recorded requests on this path */
	struct scripted_response *fifo;
	size_t fifo_len;
	size_t fifo_head;       /* next response to hand out */
	bool has_default;
	struct scripted_response fallback;
	struct chaos chaos;
	struct table acks;      /* --acks: webhook-id (in rx.id_arena) -> 2xx answers sent */
	long ack_total;
};

/* Per-request state, created by the URI log callback (which sees the raw URI, query
 * string included) and freed by the request-completed callback. */
struct request_ctx {
	char *uri;              /* raw request target, owned */
	bool started;           /* access handler has seen the headers */
	bool too_big;
	bool ack;               /* --acks: a 2xx with a webhook-id is being answered */
	char *ack_id;           /* its webhook-id, owned */
	char *body;
	size_t len;
	size_t cap;
};

/* Everything the control API reports; one mutex guards it all. */
struct receiver_state {
	pthread_mutex_t lock;
	bool keep_bodies;
	bool print;             /* --print: one line per request on stdout */
	bool timestamps;        /* --timestamps: keep a receipt per webhook-id request */
	bool acks;              /* --acks: count completed 2xx answers per path and webhook-id */
	bool per_path;          /* --unique-per-path: ids, duplicates and receipts keyed by
				 * "path webhook-id" (one event to N subscriptions is N deliveries) */
	uint64_t rng;           /* chaos draws (xorshift64*), under the lock */
	long total;
	long duplicates;
	int64_t first_us;
	int64_t last_us;
	json_t *requests;       /* array of records; stays empty with --no-bodies */
	struct table ids;       /* distinct webhook-id values (--unique-per-path: "path id"),
				 * keys in id_arena */
	struct arena id_arena;
	struct table paths;     /* path (no query) -> struct path_state */
	struct receipt *receipts;   /* --timestamps, in arrival order */
	size_t receipts_len;
	size_t receipts_cap;
	long receipts_dropped;      /* past RECEIPTS_MAX or out of memory */
};

extern struct receiver_state rx;     /* receiver.c */

/* ---- recorded requests (receiver_record.c) ------------------------------------------- */

/* CLOCK_REALTIME in microseconds: receipt times that bench scripts join with others. */
int64_t now_us(void);

/* The record of one request, without its seq and time (set under the lock). Returned to
 * the caller; NULL when out of memory. */
json_t *record_build(struct MHD_Connection *conn, const char *method,
		     const struct request_ctx *ctx);

/* Caller holds rx.lock. Forgets every request, counter, receipt, script and tally. */
void stats_reset_locked(void);

/* Caller holds rx.lock. Keeps (id, t); id is borrowed from the arena, NULL when the
 * arena ran out of memory (then the receipt is counted as dropped). */
void receipt_add_locked(const char *id, int64_t t);

/* Caller holds rx.lock. --acks: one more completed 2xx for id on the request's path. */
void ack_record_locked(const char *uri, const char *id);

/* ---- behaviours (receiver_script.c) -------------------------------------------------- */

extern const char *const chaos_names[CHAOS_N];

void response_clear(struct scripted_response *r);

/* Frees the path's script FIFO and default answer. */
void script_clear(struct path_state *ps);
void path_state_free(struct path_state *ps);

/* Parses one response object into out (zeroed first). Returns 0, or -1 with a message in
 * err. The headers object is deep-copied, so j stays the caller's. */
int response_parse(json_t *j, struct scripted_response *out, char *err, size_t errlen);

/* Caller holds rx.lock. Returns the path's state, creating it; NULL when out of memory. */
struct path_state *path_state_get(const char *path, size_t path_len);

/* Caller holds rx.lock. Pops the next scripted answer for path (or draws one in chaos
 * mode) and turns it into a response (returned to the caller), or sets *drop (and
 * *reset: end the connection with an RST). rec: the request's record (NULL when bodies
 * are not kept: an echo then answers "ok"). */
struct MHD_Response *script_next(struct path_state *ps, json_t *rec, int *status,
				 int *delay_ms, bool *drop, bool *reset);

/* ---- the control API (receiver_control.c) -------------------------------------------- */

/* Answers a request under CONTROL_PREFIX (ctx->body holds its whole body). */
enum MHD_Result control_dispatch(struct MHD_Connection *conn, const char *method,
				 const struct request_ctx *ctx);

/* Queues status with {"ok":false,"error":message}. */
enum MHD_Result reply_error(struct MHD_Connection *conn, unsigned int status,
			    const char *message);

/* ---- TLS (receiver_tls.c) ------------------------------------------------------------ */

extern bool tls_require_client_cert;    /* --client-ca given */

/* MHD_OPTION_NOTIFY_CONNECTION: on a new TLS connection, before its handshake, offers
 * session tickets, and asks for a client certificate and checks it in the handshake when
 * tls_require_client_cert. */
void notify_connection_cb(void *cls, struct MHD_Connection *conn, void **socket_ctx,
			  enum MHD_ConnectionNotificationCode code);

/* Adds "tls": true, "tls_resumed" (the session was resumed) and "client_cert" (subject DN
 * or null) to a record of a TLS request. */
void record_tls(struct MHD_Connection *conn, json_t *rec);

/* The whole file at path (returned to the caller, NUL-terminated), or NULL (printed). */
char *read_pem(const char *path);

#endif
