/* receiver.c: test_receiver, a real HTTP subscriber for end-to-end tests and benchmarks.
 *
 * It records every request it gets (method, raw path with query, lowercased headers, body)
 * together with webhook-id deduplication counters, and answers from a per-path script of
 * responses (status, delay, dropped connection, body, headers, or an echo of the request
 * as received). Tests drive it through the
 * JSON control API under /_control/; the benchmark runs it with --no-bodies --threads N as
 * a sink that only counts, plus --timestamps to keep (webhook-id, receipt time) pairs for
 * the latency join, read back as text from GET /_control/timestamps.
 *
 * With --tls-cert/--tls-key it speaks HTTPS (--client-ca: and requires a client
 * certificate signed by that CA, refusing others in the TLS handshake, as an mTLS
 * subscriber does); --control-port then adds a plain-HTTP listener for the control API,
 * so tests need no certificates to drive it. Records of TLS requests carry "tls": true
 * and "client_cert" (the subject DN, or null).
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
 */
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>
#include <jansson.h>
#include <microhttpd.h>
#include <openssl/evp.h>
#include <sys/socket.h>
#include <unistd.h>

#define BODY_MAX          (16u << 20)  /* request bodies, data and control alike */
#define DELAY_MAX_MS      600000       /* a scripted delay longer than 10 min is a typo */
#define DELAY_SLICE_MS    10           /* delays sleep in slices so SIGTERM ends them */
#define CONTROL_PREFIX    "/_control/"
#define CONNECTION_LIMIT  4096
#define ARENA_BLOCK       (1u << 20)
#define PEM_MAX           (1u << 20)   /* certificate, key and CA files */
#define RECEIPTS_MAX      (8u << 20)   /* --timestamps keeps at most 8 Mi receipts (128 MiB) */

/* ---- small containers ---------------------------------------------------------------- */

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

static const char *const chaos_names[CHAOS_N] = {
	"ok", "slow", "error", "throttle", "reset", "timeout",
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
static struct {
	pthread_mutex_t lock;
	bool keep_bodies;
	bool print;             /* --print: one line per request on stdout */
	bool timestamps;        /* --timestamps: keep a receipt per webhook-id request */
	bool acks;              /* --acks: count completed 2xx answers per path and webhook-id */
	uint64_t rng;           /* chaos draws (xorshift64*), under the lock */
	long total;
	long duplicates;
	int64_t first_us;
	int64_t last_us;
	json_t *requests;       /* array of records; stays empty with --no-bodies */
	struct table ids;       /* distinct webhook-id values, keys in id_arena */
	struct arena id_arena;
	struct table paths;     /* path (no query) -> struct path_state */
	struct receipt *receipts;   /* --timestamps, in arrival order */
	size_t receipts_len;
	size_t receipts_cap;
	long receipts_dropped;      /* past RECEIPTS_MAX or out of memory */
} rx = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.keep_bodies = true,
};

/* Set once SIGTERM/SIGINT arrives; scripted delays cut short so shutdown stays quick. */
static atomic_int stopping;

static const char *arena_strdup(struct arena *a, const char *s)
{
	size_t n = strlen(s) + 1;
	struct arena_block *b = a->head;

	if (!b || b->size - b->used < n) {
		size_t size = n > ARENA_BLOCK ? n : ARENA_BLOCK;

		b = malloc(sizeof(*b) + size);
		if (!b)
			return NULL;
		b->next = a->head;
		b->used = 0;
		b->size = size;
		a->head = b;
	}
	memcpy(b->data + b->used, s, n);
	b->used += n;
	return b->data + b->used - n;
}

static void arena_free(struct arena *a)
{
	while (a->head) {
		struct arena_block *next = a->head->next;

		free(a->head);
		a->head = next;
	}
}

static uint64_t hash_string(const char *s)
{
	uint64_t h = 1469598103934665603ull;    /* FNV-1a */

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ull;
	}
	return h;
}

/* The slot holding key, or the empty slot where it would go. cap must be non-zero. */
static struct table_entry *table_slot(const struct table *t, const char *key, uint64_t hash)
{
	size_t mask = t->cap - 1;
	size_t i = (size_t)hash & mask;

	for (;;) {
		struct table_entry *e = &t->slots[i];

		if (!e->key || (e->hash == hash && strcmp(e->key, key) == 0))
			return e;
		i = (i + 1) & mask;
	}
}

static void *table_get(const struct table *t, const char *key, bool *found)
{
	struct table_entry *e;

	*found = false;
	if (t->cap == 0)
		return NULL;
	e = table_slot(t, key, hash_string(key));
	if (!e->key)
		return NULL;
	*found = true;
	return e->value;
}

static int table_grow(struct table *t)
{
	size_t cap = t->cap ? t->cap * 2 : 64;
	struct table old = *t;

	t->slots = calloc(cap, sizeof(*t->slots));
	if (!t->slots) {
		*t = old;
		return -1;
	}
	t->cap = cap;
	for (size_t i = 0; i < old.cap; i++) {
		if (old.slots[i].key)
			*table_slot(t, old.slots[i].key, old.slots[i].hash) = old.slots[i];
	}
	free(old.slots);
	return 0;
}

/* Inserts key (borrowed, must outlive the entry) if absent. Returns 1 if inserted, 0 if
 * it was already there, -1 when out of memory. */
static int table_put(struct table *t, const char *key, void *value)
{
	uint64_t hash = hash_string(key);
	struct table_entry *e;

	if ((t->len + 1) * 2 > t->cap && table_grow(t) != 0)
		return -1;
	e = table_slot(t, key, hash);
	if (e->key)
		return 0;
	e->hash = hash;
	e->key = key;
	e->value = value;
	t->len++;
	return 1;
}

static void table_free(struct table *t)
{
	free(t->slots);
	t->slots = NULL;
	t->cap = 0;
	t->len = 0;
}

/* ---- scripts ------------------------------------------------------------------------- */

static void response_clear(struct scripted_response *r)
{
	free(r->body);
	json_decref(r->headers);
	memset(r, 0, sizeof(*r));
}

static void script_clear(struct path_state *ps)
{
	for (size_t i = 0; i < ps->fifo_len; i++)
		response_clear(&ps->fifo[i]);
	free(ps->fifo);
	ps->fifo = NULL;
	ps->fifo_len = 0;
	ps->fifo_head = 0;
	if (ps->has_default)
		response_clear(&ps->fallback);
	ps->has_default = false;
}

static void path_state_free(struct path_state *ps)
{
	script_clear(ps);
	table_free(&ps->acks);
	free(ps->path);
	free(ps);
}

/* Parses one response object into out (zeroed first). Returns 0, or -1 with a message in
 * err. The headers object is deep-copied, so j stays the caller's. */
static int response_parse(json_t *j, struct scripted_response *out, char *err, size_t errlen)
{
	json_t *v;

	memset(out, 0, sizeof(*out));
	out->status = 200;
	if (!json_is_object(j)) {
		snprintf(err, errlen, "a response must be an object");
		return -1;
	}
	v = json_object_get(j, "status");
	if (v) {
		if (!json_is_integer(v) || json_integer_value(v) < 100 ||
		    json_integer_value(v) > 999) {
			snprintf(err, errlen, "status must be an integer in 100..999");
			return -1;
		}
		out->status = (int)json_integer_value(v);
	}
	v = json_object_get(j, "delay_ms");
	if (v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > DELAY_MAX_MS) {
			snprintf(err, errlen, "delay_ms must be an integer in 0..%d", DELAY_MAX_MS);
			return -1;
		}
		out->delay_ms = (int)json_integer_value(v);
	}
	v = json_object_get(j, "drop");
	if (v) {
		if (!json_is_boolean(v)) {
			snprintf(err, errlen, "drop must be a boolean");
			return -1;
		}
		out->drop = json_is_true(v);
	}
	v = json_object_get(j, "echo");
	if (v) {
		if (!json_is_boolean(v) && !(json_is_string(v) &&
					     strcmp(json_string_value(v), "body") == 0)) {
			snprintf(err, errlen, "echo must be true or \"body\"");
			return -1;
		}
		out->echo = json_is_string(v) ? 2 : json_is_true(v);
	}
	v = json_object_get(j, "body");
	if (v) {
		if (!json_is_string(v)) {
			snprintf(err, errlen, "body must be a string");
			return -1;
		}
		out->body_len = json_string_length(v);
		out->body = malloc(out->body_len + 1);
		if (!out->body)
			goto oom;
		memcpy(out->body, json_string_value(v), out->body_len + 1);
	}
	v = json_object_get(j, "headers");
	if (v) {
		const char *name;
		json_t *value;

		if (!json_is_object(v)) {
			snprintf(err, errlen, "headers must be an object");
			goto fail;
		}
		json_object_foreach(v, name, value) {
			if (!json_is_string(value)) {
				snprintf(err, errlen, "header %s must be a string", name);
				goto fail;
			}
		}
		out->headers = json_deep_copy(v);
		if (!out->headers)
			goto oom;
	}
	return 0;
oom:
	snprintf(err, errlen, "out of memory");
fail:
	response_clear(out);
	return -1;
}

/* Caller holds rx.lock. Returns the path's state, creating it; NULL when out of memory. */
static struct path_state *path_state_get(const char *path, size_t path_len)
{
	struct path_state *ps;
	char *key = strndup(path, path_len);
	bool found;

	if (!key)
		return NULL;
	ps = table_get(&rx.paths, key, &found);
	if (found) {
		free(key);
		return ps;
	}
	ps = calloc(1, sizeof(*ps));
	if (!ps) {
		free(key);
		return NULL;
	}
	ps->path = key;
	if (table_put(&rx.paths, ps->path, ps) != 1) {
		path_state_free(ps);
		return NULL;
	}
	return ps;
}

/* The response a scripted answer turns into. Returns NULL when out of memory. */
static struct MHD_Response *response_build(const struct scripted_response *r)
{
	static const char ok[] = "ok";
	struct MHD_Response *resp;
	const char *name;
	json_t *value;
	bool has_type = false;

	if (r && r->body)
		resp = MHD_create_response_from_buffer(r->body_len, r->body,
						       MHD_RESPMEM_MUST_COPY);
	else
		resp = MHD_create_response_from_buffer(sizeof(ok) - 1, (void *)ok,
						       MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return NULL;
	if (r && r->headers) {
		json_object_foreach(r->headers, name, value) {
			if (strcasecmp(name, "content-type") == 0)
				has_type = true;
			MHD_add_response_header(resp, name, json_string_value(value));
		}
	}
	if (!has_type)
		MHD_add_response_header(resp, "Content-Type", "text/plain");
	return resp;
}

/* ---- chaos --------------------------------------------------------------------------- */

/* Caller holds rx.lock. A draw in [0, n) (xorshift64*; n > 0). */
static uint64_t rng_below(uint64_t n)
{
	uint64_t x = rx.rng ? rx.rng : 0x9e3779b97f4a7c15ull;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rx.rng = x;
	return (x * 0x2545f4914f6cdd1dull) % n;
}

/* Caller holds rx.lock. A draw in [range[0], range[1]]. */
static int rng_between(const int range[2])
{
	return range[0] + (int)rng_below((uint64_t)(range[1] - range[0]) + 1);
}

/* Caller holds rx.lock. Draws the path's next outcome and turns it into a response
 * (returned to the caller), or sets *drop and *reset (no answer, an RST). */
static struct MHD_Response *chaos_next(struct path_state *ps, int *status, int *delay_ms,
				       bool *drop, bool *reset)
{
	static const int errors[] = {500, 502, 503, 504};
	struct chaos *c = &ps->chaos;
	uint64_t pick = rng_below(c->total_weight);
	struct MHD_Response *resp;
	char text[64], retry_after[16] = "";
	int o;

	for (o = 0; o < CHAOS_N - 1; o++) {
		if (pick < c->weight[o])
			break;
		pick -= c->weight[o];
	}
	c->drawn[o]++;
	*status = 200;
	*delay_ms = 0;
	switch (o) {
	case CHAOS_SLOW:
		*delay_ms = rng_between(c->slow_ms);
		break;
	case CHAOS_ERROR:
		*status = errors[rng_below(4)];
		break;
	case CHAOS_THROTTLE:
		*status = 429;
		snprintf(retry_after, sizeof(retry_after), "%d", rng_between(c->retry_after_s));
		break;
	case CHAOS_RESET:
		*drop = true;
		*reset = true;
		return NULL;
	case CHAOS_TIMEOUT:
		/* Not a 2xx: however late it comes, it can never count as delivered. */
		*status = 503;
		*delay_ms = c->timeout_ms;
		break;
	default:
		break;
	}
	snprintf(text, sizeof(text), "chaos: %s", chaos_names[o]);
	resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return NULL;
	MHD_add_response_header(resp, "Content-Type", "text/plain");
	if (retry_after[0])
		MHD_add_response_header(resp, "Retry-After", retry_after);
	return resp;
}

/* The answer r with the request rec (its record) as body: "METHOD PATH HTTP/1.1", each
 * header as "name: value", a blank line, the body, lines ending in CRLF (echo 1); or the
 * request's body alone (echo 2). Returned to the caller; NULL when out of memory. */
static struct MHD_Response *echo_build(const struct scripted_response *r, json_t *rec)
{
	struct scripted_response e = *r;
	const char *name;
	json_t *value;
	size_t cap = 256, len;
	char *text;

	json_object_foreach(json_object_get(rec, "headers"), name, value)
		cap += strlen(name) + json_string_length(value) + 4;
	json_t *body = json_object_get(rec, "body");
	cap += strlen(json_string_value(json_object_get(rec, "path"))) + json_string_length(body);
	if (!(text = malloc(cap)))
		return NULL;
	len = 0;
	if (r->echo == 1) {
		len = (size_t)snprintf(text, cap, "%s %s HTTP/1.1\r\n",
				       json_string_value(json_object_get(rec, "method")),
				       json_string_value(json_object_get(rec, "path")));
		json_object_foreach(json_object_get(rec, "headers"), name, value)
			len += (size_t)snprintf(text + len, cap - len, "%s: %s\r\n", name,
						json_string_value(value));
		len += (size_t)snprintf(text + len, cap - len, "\r\n");
	}
	len += (size_t)snprintf(text + len, cap - len, "%s",
				json_is_string(body) ? json_string_value(body) : "");
	e.body = text;
	e.body_len = len;
	struct MHD_Response *resp = response_build(&e);
	free(text);
	return resp;
}

/* Caller holds rx.lock. Pops the next scripted answer for path (or draws one in chaos
 * mode) and turns it into a response (returned to the caller), or sets *drop (and
 * *reset: end the connection with an RST). rec: the request's record (NULL when bodies
 * are not kept: an echo then answers "ok"). */
static struct MHD_Response *script_next(struct path_state *ps, json_t *rec, int *status,
					int *delay_ms, bool *drop, bool *reset)
{
	struct scripted_response *r = NULL;

	*drop = false;
	*reset = false;
	if (ps && ps->fifo_head < ps->fifo_len)
		r = &ps->fifo[ps->fifo_head++];
	else if (ps && ps->chaos.on)
		return chaos_next(ps, status, delay_ms, drop, reset);
	else if (ps && ps->has_default)
		r = &ps->fallback;
	*status = r ? r->status : 200;
	*delay_ms = r ? r->delay_ms : 0;
	*drop = r ? r->drop : false;
	if (*drop)
		return NULL;
	if (r && r->echo && rec)
		return echo_build(r, rec);
	return response_build(r);
}

/* ---- recording ----------------------------------------------------------------------- */

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static enum MHD_Result header_collect_cb(void *cls, enum MHD_ValueKind kind,
					 const char *key, const char *value)
{
	json_t *headers = cls;
	json_t *prev;
	char *name = strdup(key);

	if (!name)
		return MHD_YES;
	for (char *p = name; *p; p++) {
		if (*p >= 'A' && *p <= 'Z')
			*p = (char)(*p - 'A' + 'a');
	}
	if (!value)
		value = "";
	prev = json_object_get(headers, name);
	if (json_is_string(prev)) {
		/* A repeated header reads as one comma-joined value (RFC 9110 5.3). */
		size_t n = json_string_length(prev) + 2 + strlen(value) + 1;
		char *joined = malloc(n);

		if (joined) {
			snprintf(joined, n, "%s, %s", json_string_value(prev), value);
			json_object_set_new(headers, name, json_string(joined));
			free(joined);
		}
	} else {
		json_object_set_new(headers, name, json_string(value));
	}
	free(name);
	return MHD_YES;
}

static json_t *base64_string(const char *data, size_t len)
{
	size_t n = 4 * ((len + 2) / 3) + 1;
	char *out = malloc(n);
	json_t *s;

	if (!out)
		return NULL;
	EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)data, (int)len);
	s = json_string(out);
	free(out);
	return s;
}

/* ---- TLS ----------------------------------------------------------------------------- */

static bool tls_require_client_cert;    /* --client-ca given */

static gnutls_session_t tls_session_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);

	return ci ? (gnutls_session_t)ci->tls_session : NULL;
}

/* Runs inside the handshake: no client certificate, or one the --client-ca trust list
 * does not verify, ends the handshake with a fatal alert, as a server with mandatory
 * client certificates does (MHD would close without one, which clients report as a mere
 * dropped connection). In TLS 1.3 the client sees its handshake done before we judge its
 * certificate and sends its request at once: the pause lets it read the alert before our
 * close (a reset, with that request unread) could discard it. */
static int client_cert_verify_cb(gnutls_session_t session)
{
	const struct timespec pause = {.tv_sec = 0, .tv_nsec = 200 * 1000000L};
	unsigned int status = 0, n = 0;
	int alert;

	if (!gnutls_certificate_get_peers(session, &n) || n == 0)
		alert = GNUTLS_A_CERTIFICATE_REQUIRED;
	else if (gnutls_certificate_verify_peers2(session, &status) < 0 || status != 0)
		alert = GNUTLS_A_UNKNOWN_CA;
	else
		return 0;
	gnutls_alert_send(session, GNUTLS_AL_FATAL, (gnutls_alert_description_t)alert);
	nanosleep(&pause, NULL);
	return GNUTLS_E_CERTIFICATE_ERROR;
}

/* On a new connection, before its handshake: ask for a client certificate and check it
 * in the handshake (MHD alone would only ask). */
static void notify_connection_cb(void *cls, struct MHD_Connection *conn, void **socket_ctx,
				 enum MHD_ConnectionNotificationCode code)
{
	gnutls_session_t session;

	if (code != MHD_CONNECTION_NOTIFY_STARTED || !tls_require_client_cert)
		return;
	session = tls_session_of(conn);
	if (!session)
		return;
	gnutls_certificate_server_set_request(session, GNUTLS_CERT_REQUEST);
	gnutls_session_set_verify_function(session, client_cert_verify_cb);
}

/* Adds "tls": true and "client_cert" (subject DN or null) to a record of a TLS request. */
static void record_tls(struct MHD_Connection *conn, json_t *rec)
{
	gnutls_session_t session = tls_session_of(conn);
	const gnutls_datum_t *peers;
	unsigned int n = 0;
	gnutls_x509_crt_t crt;
	gnutls_datum_t dn = {NULL, 0};

	if (!session)
		return;
	json_object_set_new(rec, "tls", json_true());
	peers = gnutls_certificate_get_peers(session, &n);
	if (peers && n > 0 && gnutls_x509_crt_init(&crt) == 0) {
		if (gnutls_x509_crt_import(crt, &peers[0], GNUTLS_X509_FMT_DER) == 0 &&
		    gnutls_x509_crt_get_dn3(crt, &dn, 0) == 0) {
			json_object_set_new(rec, "client_cert", json_stringn((char *)dn.data, dn.size));
			gnutls_free(dn.data);
		}
		gnutls_x509_crt_deinit(crt);
	}
	if (!json_object_get(rec, "client_cert"))
		json_object_set_new(rec, "client_cert", json_null());
}

/* The whole file at path (returned to the caller, NUL-terminated), or NULL (printed). */
static char *read_pem(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *data = NULL;
	size_t len = 0;

	if (!f) {
		fprintf(stderr, "test_receiver: %s: %s\n", path, strerror(errno));
		return NULL;
	}
	data = malloc(PEM_MAX + 1);
	if (data) {
		len = fread(data, 1, PEM_MAX + 1, f);
		if (len > PEM_MAX || ferror(f)) {
			fprintf(stderr, "test_receiver: %s: unreadable or over 1 MiB\n", path);
			free(data);
			data = NULL;
		} else {
			data[len] = '\0';
		}
	}
	fclose(f);
	return data;
}

/* The record of one request, without its seq and time (set under the lock). Returned to
 * the caller; NULL when out of memory. */
static json_t *record_build(struct MHD_Connection *conn, const char *method,
			    const struct request_ctx *ctx)
{
	json_t *rec = json_object();
	json_t *headers = json_object();
	json_t *body;

	if (!rec || !headers)
		goto fail;
	MHD_get_connection_values(conn, MHD_HEADER_KIND, header_collect_cb, headers);
	json_object_set_new(rec, "method", json_string(method));
	json_object_set_new(rec, "path", json_string(ctx->uri));
	json_object_set(rec, "headers", headers);
	body = json_stringn(ctx->body ? ctx->body : "", ctx->len);   /* NULL unless UTF-8 */
	json_object_set_new(rec, "body", body ? body : json_null());
	json_object_set_new(rec, "body_base64", base64_string(ctx->body ? ctx->body : "",
							      ctx->len));
	record_tls(conn, rec);
	json_decref(headers);
	return rec;
fail:
	json_decref(headers);
	json_decref(rec);
	return NULL;
}

static void stats_reset_locked(void)
{
	for (size_t i = 0; i < rx.paths.cap; i++) {
		if (rx.paths.slots[i].key)
			path_state_free(rx.paths.slots[i].value);
	}
	table_free(&rx.paths);
	table_free(&rx.ids);
	arena_free(&rx.id_arena);
	free(rx.receipts);
	rx.receipts = NULL;
	rx.receipts_len = 0;
	rx.receipts_cap = 0;
	rx.receipts_dropped = 0;
	json_array_clear(rx.requests);
	rx.total = 0;
	rx.duplicates = 0;
	rx.first_us = 0;
	rx.last_us = 0;
}

/* Caller holds rx.lock. Keeps (id, t); id is borrowed from the arena, NULL when the
 * arena ran out of memory (then the receipt is counted as dropped). */
static void receipt_add_locked(const char *id, int64_t t)
{
	if (!id || rx.receipts_len >= RECEIPTS_MAX) {
		rx.receipts_dropped++;
		return;
	}
	if (rx.receipts_len == rx.receipts_cap) {
		size_t cap = rx.receipts_cap ? rx.receipts_cap * 2 : 65536;
		struct receipt *p = realloc(rx.receipts, cap * sizeof(*p));

		if (!p) {
			rx.receipts_dropped++;
			return;
		}
		rx.receipts = p;
		rx.receipts_cap = cap;
	}
	rx.receipts[rx.receipts_len].id = id;
	rx.receipts[rx.receipts_len].received_at_us = t;
	rx.receipts_len++;
}

/* ---- control API --------------------------------------------------------------------- */

static enum MHD_Result reply_json(struct MHD_Connection *conn, unsigned int status,
				  json_t *body)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;
	char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;

	json_decref(body);
	if (!text)
		return MHD_NO;
	resp = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", "application/json");
	ret = MHD_queue_response(conn, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *conn, unsigned int status,
				   const char *message)
{
	return reply_json(conn, status, json_pack("{s:b,s:s}", "ok", 0, "error", message));
}

static enum MHD_Result control_script(struct MHD_Connection *conn,
				      const struct request_ctx *ctx)
{
	json_error_t jerr;
	json_t *doc = json_loadb(ctx->body ? ctx->body : "", ctx->len, 0, &jerr);
	json_t *path, *list, *fallback, *item;
	struct scripted_response *fifo = NULL;
	struct scripted_response def;
	struct path_state *ps;
	size_t n = 0, i;
	char err[256];

	memset(&def, 0, sizeof(def));
	if (!doc) {
		snprintf(err, sizeof(err), "invalid JSON: %s", jerr.text);
		return reply_error(conn, MHD_HTTP_BAD_REQUEST, err);
	}
	path = json_object_get(doc, "path");
	list = json_object_get(doc, "responses");
	fallback = json_object_get(doc, "default");
	if (!json_is_string(path) || json_string_value(path)[0] != '/') {
		snprintf(err, sizeof(err), "path must be a string starting with /");
		goto bad;
	}
	if (list && !json_is_array(list)) {
		snprintf(err, sizeof(err), "responses must be an array");
		goto bad;
	}
	n = json_array_size(list);
	if (n) {
		fifo = calloc(n, sizeof(*fifo));
		if (!fifo) {
			snprintf(err, sizeof(err), "out of memory");
			goto bad;
		}
	}
	json_array_foreach(list, i, item) {
		if (response_parse(item, &fifo[i], err, sizeof(err)) != 0) {
			n = i;
			goto bad;
		}
	}
	if (fallback && !json_is_null(fallback) &&
	    response_parse(fallback, &def, err, sizeof(err)) != 0)
		goto bad;

	pthread_mutex_lock(&rx.lock);
	ps = path_state_get(json_string_value(path), json_string_length(path));
	if (ps) {
		script_clear(ps);
		ps->fifo = fifo;
		ps->fifo_len = n;
		ps->has_default = fallback && !json_is_null(fallback);
		ps->fallback = def;
	}
	pthread_mutex_unlock(&rx.lock);
	if (!ps) {
		snprintf(err, sizeof(err), "out of memory");
		goto bad;
	}
	json_decref(doc);
	return reply_json(conn, MHD_HTTP_OK, json_pack("{s:b}", "ok", 1));
bad:
	for (i = 0; i < n; i++)
		response_clear(&fifo[i]);
	free(fifo);
	response_clear(&def);
	json_decref(doc);
	return reply_error(conn, MHD_HTTP_BAD_REQUEST, err);
}

/* Does the recorded path (query string included) have exactly this path part? */
static bool path_matches(const char *recorded, const char *want)
{
	size_t n = strcspn(recorded, "?");

	return strlen(want) == n && memcmp(recorded, want, n) == 0;
}

static enum MHD_Result control_requests(struct MHD_Connection *conn)
{
	const char *filter = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "path");
	json_t *list = json_array();
	json_t *rec;
	size_t i;

	if (!list)
		return MHD_NO;
	pthread_mutex_lock(&rx.lock);
	json_array_foreach(rx.requests, i, rec) {
		const char *p = json_string_value(json_object_get(rec, "path"));

		if (!filter || (p && path_matches(p, filter))) {
			/* Deep copy: the record may be freed by a reset once we unlock. */
			json_array_append_new(list, json_deep_copy(rec));
		}
	}
	pthread_mutex_unlock(&rx.lock);
	return reply_json(conn, MHD_HTTP_OK, json_pack("{s:o}", "requests", list));
}

static enum MHD_Result control_stats(struct MHD_Connection *conn)
{
	const char *filter = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "path");
	json_int_t count, unique, dups, first, last;

	pthread_mutex_lock(&rx.lock);
	count = rx.total;
	if (filter) {
		bool found;
		struct path_state *ps = table_get(&rx.paths, filter, &found);

		count = found ? ps->count : 0;
	}
	unique = (json_int_t)rx.ids.len;
	dups = rx.duplicates;
	first = rx.first_us;
	last = rx.last_us;
	pthread_mutex_unlock(&rx.lock);
	return reply_json(conn, MHD_HTTP_OK,
			  json_pack("{s:I,s:I,s:I,s:I,s:I}", "count", count, "unique_ids", unique,
				    "duplicates", dups, "first_us", first, "last_us", last));
}

/* Answers 200 with the text of a closed memstream (text and len from open_memstream;
 * fclose_rc its fclose), taking text; header names a second header to add (NULL: none). */
static enum MHD_Result reply_text(struct MHD_Connection *conn, int fclose_rc, char *text,
				  size_t len, const char *header, const char *value)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;

	if (fclose_rc != 0 ||
	    !(resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE))) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", "text/plain");
	if (header)
		MHD_add_response_header(resp, header, value);
	ret = MHD_queue_response(conn, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* GET /_control/timestamps: one "webhook-id received_at_us" line per receipt, in arrival
 * order (text, so a shell script can join it with awk); X-Receipts-Dropped says how many
 * were not kept. Empty unless the receiver runs with --timestamps. */
static enum MHD_Result control_timestamps(struct MHD_Connection *conn)
{
	char dropped[32];
	char *text = NULL;
	size_t len = 0;
	FILE *out = open_memstream(&text, &len);

	if (!out)
		return MHD_NO;
	pthread_mutex_lock(&rx.lock);
	for (size_t i = 0; i < rx.receipts_len; i++)
		fprintf(out, "%s %lld\n", rx.receipts[i].id,
			(long long)rx.receipts[i].received_at_us);
	snprintf(dropped, sizeof(dropped), "%ld", rx.receipts_dropped);
	pthread_mutex_unlock(&rx.lock);
	int rc = fclose(out);
	return reply_text(conn, rc, text, len, "X-Receipts-Dropped", dropped);
}

/* Reads an optional [lo, hi] pair of integers within [min, max] into out. */
static int range_parse(json_t *doc, const char *name, int min, int max, int out[2],
		       char *err, size_t errlen)
{
	json_t *v = json_object_get(doc, name);
	json_t *lo = json_array_get(v, 0), *hi = json_array_get(v, 1);

	if (!v)
		return 0;
	if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(lo) ||
	    !json_is_integer(hi) || json_integer_value(lo) < min ||
	    json_integer_value(hi) > max || json_integer_value(lo) > json_integer_value(hi)) {
		snprintf(err, errlen, "%s must be [lo, hi], integers in %d..%d", name, min, max);
		return -1;
	}
	out[0] = (int)json_integer_value(lo);
	out[1] = (int)json_integer_value(hi);
	return 0;
}

/* POST /_control/chaos {"path":"/p","weights":{"ok":70,"error":10,...},"slow_ms":[lo,hi],
 * "retry_after_s":[lo,hi],"timeout_ms":n,"seed":n}: the path draws its answers at random
 * from now on; no weights (or all zero) turns chaos off. The drawn counters stay. */
static enum MHD_Result control_chaos_set(struct MHD_Connection *conn,
					 const struct request_ctx *ctx)
{
	json_error_t jerr;
	json_t *doc = json_loadb(ctx->body ? ctx->body : "", ctx->len, 0, &jerr);
	json_t *path, *weights, *v;
	struct chaos c = {.slow_ms = {200, 1000}, .retry_after_s = {1, 2}, .timeout_ms = 5000};
	struct path_state *ps;
	char err[256];

	if (!doc) {
		snprintf(err, sizeof(err), "invalid JSON: %s", jerr.text);
		return reply_error(conn, MHD_HTTP_BAD_REQUEST, err);
	}
	path = json_object_get(doc, "path");
	weights = json_object_get(doc, "weights");
	if (!json_is_string(path) || json_string_value(path)[0] != '/') {
		snprintf(err, sizeof(err), "path must be a string starting with /");
		goto bad;
	}
	if (weights && !json_is_object(weights)) {
		snprintf(err, sizeof(err), "weights must be an object");
		goto bad;
	}
	if (weights) {
		const char *name;

		json_object_foreach(weights, name, v) {
			int o = 0;

			while (o < CHAOS_N && strcmp(name, chaos_names[o]) != 0)
				o++;
			if (o == CHAOS_N || !json_is_integer(v) || json_integer_value(v) < 0 ||
			    json_integer_value(v) > 1000000) {
				snprintf(err, sizeof(err), "weights.%s: not an outcome, or not an "
					 "integer in 0..1000000", name);
				goto bad;
			}
			c.weight[o] = (unsigned)json_integer_value(v);
			c.total_weight += c.weight[o];
		}
	}
	if (range_parse(doc, "slow_ms", 0, DELAY_MAX_MS, c.slow_ms, err, sizeof(err)) ||
	    range_parse(doc, "retry_after_s", 0, 86400, c.retry_after_s, err, sizeof(err)))
		goto bad;
	v = json_object_get(doc, "timeout_ms");
	if (v) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > DELAY_MAX_MS) {
			snprintf(err, sizeof(err), "timeout_ms must be an integer in 0..%d",
				 DELAY_MAX_MS);
			goto bad;
		}
		c.timeout_ms = (int)json_integer_value(v);
	}
	v = json_object_get(doc, "seed");
	if (v && !json_is_integer(v)) {
		snprintf(err, sizeof(err), "seed must be an integer");
		goto bad;
	}
	c.on = c.total_weight > 0;

	pthread_mutex_lock(&rx.lock);
	ps = path_state_get(json_string_value(path), json_string_length(path));
	if (ps) {
		memcpy(c.drawn, ps->chaos.drawn, sizeof(c.drawn));
		ps->chaos = c;
		if (v)
			rx.rng = (uint64_t)json_integer_value(v) | 1;
	}
	pthread_mutex_unlock(&rx.lock);
	json_decref(doc);
	if (!ps)
		return reply_error(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
	return reply_json(conn, MHD_HTTP_OK, json_pack("{s:b,s:b}", "ok", 1, "chaos", c.on));
bad:
	json_decref(doc);
	return reply_error(conn, MHD_HTTP_BAD_REQUEST, err);
}

/* GET /_control/chaos?path=/p: the path's weights, how often each outcome was drawn, its
 * request count, and (with --acks) its distinct acknowledged webhook-ids and 2xx total. */
static enum MHD_Result control_chaos_get(struct MHD_Connection *conn)
{
	const char *path = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "path");
	json_t *weights = json_object(), *drawn = json_object(), *doc;
	struct path_state *ps;
	bool found = false;

	if (!weights || !drawn || !path) {
		json_decref(weights);
		json_decref(drawn);
		return reply_error(conn, MHD_HTTP_BAD_REQUEST, "path is required");
	}
	pthread_mutex_lock(&rx.lock);
	ps = table_get(&rx.paths, path, &found);
	for (int o = 0; o < CHAOS_N; o++) {
		json_object_set_new(weights, chaos_names[o],
				    json_integer(found ? ps->chaos.weight[o] : 0));
		json_object_set_new(drawn, chaos_names[o],
				    json_integer(found ? ps->chaos.drawn[o] : 0));
	}
	doc = json_pack("{s:b,s:o,s:o,s:I,s:I,s:I}", "on", found && ps->chaos.on, "weights",
			weights, "drawn", drawn, "count", (json_int_t)(found ? ps->count : 0),
			"acked_ids", (json_int_t)(found ? ps->acks.len : 0), "ack_total",
			(json_int_t)(found ? ps->ack_total : 0));
	pthread_mutex_unlock(&rx.lock);
	return reply_json(conn, MHD_HTTP_OK, doc);
}

/* GET /_control/acks?path=/p: one "webhook-id count" line per id the path answered with
 * a completely written 2xx, count being how many such answers it got (text, for awk).
 * Empty unless the receiver runs with --acks. */
static enum MHD_Result control_acks(struct MHD_Connection *conn)
{
	const char *path = MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "path");
	struct path_state *ps;
	bool found = false;
	char *text = NULL;
	size_t len = 0;
	FILE *out;

	if (!path)
		return reply_error(conn, MHD_HTTP_BAD_REQUEST, "path is required");
	out = open_memstream(&text, &len);
	if (!out)
		return MHD_NO;
	pthread_mutex_lock(&rx.lock);
	ps = table_get(&rx.paths, path, &found);
	for (size_t i = 0; found && i < ps->acks.cap; i++) {
		if (ps->acks.slots[i].key)
			fprintf(out, "%s %lu\n", ps->acks.slots[i].key,
				(unsigned long)(uintptr_t)ps->acks.slots[i].value);
	}
	pthread_mutex_unlock(&rx.lock);
	int rc = fclose(out);
	return reply_text(conn, rc, text, len, NULL, NULL);
}

static enum MHD_Result control_dispatch(struct MHD_Connection *conn, const char *method,
					const struct request_ctx *ctx)
{
	const char *what = ctx->uri + strlen(CONTROL_PREFIX);
	size_t n = strcspn(what, "?");
	bool get = strcmp(method, "GET") == 0;
	bool post = strcmp(method, "POST") == 0;

	if (n == 6 && memcmp(what, "script", 6) == 0 && post)
		return control_script(conn, ctx);
	if (n == 8 && memcmp(what, "requests", 8) == 0 && get)
		return control_requests(conn);
	if (n == 5 && memcmp(what, "stats", 5) == 0 && get)
		return control_stats(conn);
	if (n == 10 && memcmp(what, "timestamps", 10) == 0 && get)
		return control_timestamps(conn);
	if (n == 5 && memcmp(what, "chaos", 5) == 0 && post)
		return control_chaos_set(conn, ctx);
	if (n == 5 && memcmp(what, "chaos", 5) == 0 && get)
		return control_chaos_get(conn);
	if (n == 4 && memcmp(what, "acks", 4) == 0 && get)
		return control_acks(conn);
	if (n == 5 && memcmp(what, "reset", 5) == 0 && post) {
		pthread_mutex_lock(&rx.lock);
		stats_reset_locked();
		pthread_mutex_unlock(&rx.lock);
		return reply_json(conn, MHD_HTTP_OK, json_pack("{s:b}", "ok", 1));
	}
	return reply_error(conn, MHD_HTTP_NOT_FOUND, "unknown control endpoint or method");
}

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

/* Caller holds rx.lock. --acks: one more completed 2xx for id on the request's path. An id
 * the tally no longer knows (a reset came in between) is not counted. */
static void ack_record_locked(const char *uri, const char *id)
{
	struct path_state *ps = path_state_get(uri, strcspn(uri, "?"));
	struct table_entry *e;
	const char *key;
	bool found;

	key = table_get(&rx.ids, id, &found);
	if (!ps || !found)
		return;
	if ((ps->acks.len + 1) * 2 > ps->acks.cap && table_grow(&ps->acks) != 0)
		return;
	e = table_slot(&ps->acks, key, hash_string(key));
	if (!e->key) {
		e->key = key;
		e->hash = hash_string(key);
		e->value = NULL;
		ps->acks.len++;
	}
	e->value = (void *)((uintptr_t)e->value + 1);
	ps->ack_total++;
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
		/* The table maps each id to its own arena copy, which a receipt then shares. */
		const char *key = table_get(&rx.ids, id, &found);

		if (found) {
			rx.duplicates++;
		} else {
			key = arena_strdup(&rx.id_arena, id);
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
			" [--timestamps] [--acks]\n"
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
	if (!port || !tls_cert != !tls_key || (client_ca && !tls_cert)) {
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
