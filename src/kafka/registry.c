/* registry.c: the Schema Registry client of the Kafka sink (see registry.h): one
 * registration per subject, its id cached for the life of the process, the HTTP calls on
 * a worker thread of its own. Must never make an HTTP call for a subject it knows, never
 * block its callers on the network, and never let a URL's credentials into a message or
 * a log line (curl's own error texts name the host, not the userinfo). */
#include "kafka/registry.h"

#include <ctype.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "util/buf.h"
#include "util/clock.h"
#include "util/log.h"

#define ANSWER_MAX      (64 * 1024) /* a registration's answer is a few bytes; errors short */
#define TIMEOUT_MS      5000        /* one registration, connect included */
#define CONNECT_MS      2000
#define RETRY_AFTER_MS  1000        /* a failed subject is asked again after this */
#define SUBJECT_MAX     300
#define WHY_MAX         1024

/* The generated copy of proto/outboxd/v1/outbox_event.proto (CMakeLists.txt), NUL-ended. */
extern const unsigned char outbox_event_proto[];
#define SCHEMA_TEXT ((const char *)outbox_event_proto)

enum entry_state {
	ENTRY_NEW = 0,   /* never asked */
	ENTRY_WANTED,    /* a caller is waiting: the worker takes it next */
	ENTRY_ASKING,    /* the worker's request is under way */
	ENTRY_KNOWN,     /* id holds for the life of the process */
	ENTRY_FAILED,    /* err and why until retry_at_ms, then asked again */
};

/* One subject: its id once known, else its last failure. Under mu. */
struct registry_entry {
	char subject[SUBJECT_MAX];
	enum entry_state state;
	uint32_t id;
	enum registry_err err;
	char why[WHY_MAX];
	int64_t retry_at_ms;        /* ENTRY_FAILED: asked again from then (monotonic) */
	struct registry_entry *next;
};

struct schema_registry {
	char *url;                  /* as configured: may hold user:password@ for curl */
	char shown[256];            /* url without its userinfo: what messages name */
	uint32_t message_index;     /* OutboxEvent's place in the schema */
	int notify_fd;              /* a byte after each answer; -1: none */
	CURL *curl;                 /* the worker's */
	pthread_t thread;
	int thread_started, sync_ready;
	atomic_int stopping;
	pthread_mutex_t mu;         /* guards entries, registrations */
	pthread_cond_t cv;          /* an entry became ENTRY_WANTED, or stopping */
	struct registry_entry *entries;
	uint64_t registrations;
};

struct answer {
	struct buf b;                /* at most ANSWER_MAX bytes of it */
	int truncated;               /* more came */
};

const char *registry_strerror(enum registry_err e)
{
	switch (e) {
	case REGISTRY_OK: return "ok";
	case REGISTRY_UNREACHABLE: return "schema registry unreachable";
	case REGISTRY_REFUSED: return "schema registry refused the schema";
	case REGISTRY_BAD_ANSWER: return "schema registry answer not understood";
	case REGISTRY_NOMEM: return "out of memory";
	case REGISTRY_PENDING: return "schema registry registration under way";
	}
	return "schema registry error";
}

/* ---- pure parts ----------------------------------------------------------------------- */

char *registry_request_body(const char *schema)
{
	json_t *o = json_pack("{s:s, s:s}", "schemaType", "PROTOBUF", "schema", schema);
	char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	return body;
}

int registry_parse_id(const char *body, size_t len, uint32_t *id, char *why, size_t whylen)
{
	json_error_t jerr;
	json_t *o = json_loadb(body, len, 0, &jerr);
	json_t *v = json_object_get(o, "id");
	int rc = -1;
	if (!o) {
		snprintf(why, whylen, "not JSON: %s", jerr.text);
	} else if (!json_is_integer(v)) {
		snprintf(why, whylen, "no integer \"id\" in the answer");
	} else if (json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX) {
		snprintf(why, whylen, "id %lld is not a schema id",
			 (long long)json_integer_value(v));
	} else {
		*id = (uint32_t)json_integer_value(v);
		rc = 0;
	}
	json_decref(o);
	return rc;
}

/* s into out (of outlen, NUL-terminated), control characters as spaces. */
static void copy_printable(const char *s, size_t len, char *out, size_t outlen)
{
	size_t n = 0;
	for (size_t i = 0; i < len && n + 1 < outlen; i++)
		out[n++] = (unsigned char)s[i] < 0x20 || s[i] == 0x7f ? ' ' : s[i];
	if (outlen)
		out[n] = '\0';
}

void registry_error_text(long status, const char *body, size_t len, char *out, size_t outlen)
{
	json_t *o = body && len ? json_loadb(body, len, 0, NULL) : NULL;
	const char *msg = json_string_value(json_object_get(o, "message"));
	json_t *code = json_object_get(o, "error_code");
	char text[256];
	if (msg) {
		copy_printable(msg, strlen(msg), text, sizeof(text));
		if (json_is_integer(code))
			snprintf(out, outlen, "HTTP %ld: %s (error_code %lld)", status, text,
				 (long long)json_integer_value(code));
		else
			snprintf(out, outlen, "HTTP %ld: %s", status, text);
	} else if (body && len) {
		copy_printable(body, len < 200 ? len : 200, text, sizeof(text));
		snprintf(out, outlen, "HTTP %ld: %s", status, text);
	} else {
		snprintf(out, outlen, "HTTP %ld", status);
	}
	json_decref(o);
}

/* Skips spaces and comments from p; returns the next significant character's place. */
static const char *proto_skip(const char *p)
{
	for (;;) {
		while (isspace((unsigned char)*p))
			p++;
		if (p[0] == '/' && p[1] == '/') {
			p += strcspn(p, "\n");
		} else if (p[0] == '/' && p[1] == '*') {
			const char *end = strstr(p + 2, "*/");
			p = end ? end + 2 : p + strlen(p);
		} else {
			return p;
		}
	}
}

static int ident_char(char c)
{
	return isalnum((unsigned char)c) || c == '_';
}

int registry_proto_message_index(const char *proto, const char *name, uint32_t *index)
{
	const char *p = proto;
	int depth = 0;
	uint32_t n = 0;
	size_t name_len = strlen(name);
	while (*(p = proto_skip(p))) {
		if (*p == '"' || *p == '\'') { /* a string: may hold braces or "message" */
			char quote = *p++;
			while (*p && *p != quote)
				p += p[0] == '\\' && p[1] ? 2 : 1;
			p += *p ? 1 : 0;
		} else if (*p == '{') {
			depth++;
			p++;
		} else if (*p == '}') {
			depth -= depth > 0;
			p++;
		} else if (ident_char(*p)) {
			const char *word = p;
			while (ident_char(*p))
				p++;
			if (depth || p - word != 7 || strncmp(word, "message", 7) != 0)
				continue;
			const char *id = proto_skip(p);
			const char *end = id;
			while (ident_char(*end))
				end++;
			if ((size_t)(end - id) == name_len && strncmp(id, name, name_len) == 0) {
				*index = n;
				return 0;
			}
			n++;
			p = end;
		} else {
			p++;
		}
	}
	return -1;
}

void registry_url_shown(const char *url, char *out, size_t outlen)
{
	const char *scheme = strstr(url, "://");
	const char *host = scheme ? scheme + 3 : url;
	size_t authority = strcspn(host, "/?#");
	const char *at = NULL;
	for (const char *c = host; c < host + authority; c++)
		if (*c == '@')
			at = c; /* the last @ ends the userinfo */
	if (at)
		snprintf(out, outlen, "%.*s%s", (int)(host - url), url, at + 1);
	else
		snprintf(out, outlen, "%s", url);
}

int registry_subject(const char *topic, char *out, size_t outlen)
{
	int n = snprintf(out, outlen, "%s-value", topic);
	return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

/* ---- the client ------------------------------------------------------------------------ */

static size_t answer_cb(char *p, size_t size, size_t n, void *ctx)
{
	struct answer *a = ctx;
	size_t len = size * n, room = a->b.max - a->b.len;
	if (len > room) {
		a->truncated = 1;
		len = room;
	}
	if (len && buf_append(&a->b, p, len))
		return 0; /* out of memory */
	return size * n;
}

/* curl's progress callback: a registration under way stops when the client closes. */
static int progress_cb(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	(void)dltotal;
	(void)dlnow;
	(void)ultotal;
	(void)ulnow;
	return atomic_load(&((schema_registry *)ctx)->stopping);
}

/* What one registration found (the worker's, outside the lock). */
struct registration {
	enum registry_err err;
	uint32_t id;
	char why[WHY_MAX];
};

/* POST /subjects/SUBJECT/versions of the worker thread: the id, or the failure. */
static void registry_register(schema_registry *r, const char *subject, struct registration *out)
{
	struct answer a = {0};
	struct curl_slist *headers = NULL;
	char url[1024], *body = registry_request_body(SCHEMA_TEXT);

	buf_init(&a.b, ANSWER_MAX);
	char *escaped = curl_easy_escape(r->curl, subject, 0);
	long status = 0;

	out->err = REGISTRY_NOMEM;
	snprintf(out->why, sizeof(out->why), "subject %s: out of memory", subject);
	if (!body || !escaped)
		goto out;
	headers = curl_slist_append(NULL, "Content-Type: application/vnd.schemaregistry.v1+json");
	if (!headers)
		goto out;
	snprintf(url, sizeof(url), "%s/subjects/%s/versions", r->url, escaped);
	curl_easy_reset(r->curl);
	curl_easy_setopt(r->curl, CURLOPT_URL, url);
	curl_easy_setopt(r->curl, CURLOPT_HTTPHEADER, headers);
	curl_easy_setopt(r->curl, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(r->curl, CURLOPT_TIMEOUT_MS, (long)TIMEOUT_MS);
	curl_easy_setopt(r->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)CONNECT_MS);
	curl_easy_setopt(r->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(r->curl, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(r->curl, CURLOPT_WRITEFUNCTION, answer_cb);
	curl_easy_setopt(r->curl, CURLOPT_WRITEDATA, &a);
	curl_easy_setopt(r->curl, CURLOPT_XFERINFOFUNCTION, progress_cb);
	curl_easy_setopt(r->curl, CURLOPT_XFERINFODATA, r);
	curl_easy_setopt(r->curl, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(r->curl, CURLOPT_USERAGENT, "outboxd");
	CURLcode rc = curl_easy_perform(r->curl);
	if (rc != CURLE_OK) {
		out->err = REGISTRY_UNREACHABLE;
		snprintf(out->why, sizeof(out->why), "subject %s at %s: %s", subject, r->shown,
			 curl_easy_strerror(rc));
		if (!atomic_load(&r->stopping)) /* else its own progress callback stopped it */
			log_warn("kafka: schema registry: %s", out->why);
		goto out;
	}
	curl_easy_getinfo(r->curl, CURLINFO_RESPONSE_CODE, &status);
	if (status < 200 || status > 299) {
		char text[300];
		registry_error_text(status, a.b.data, a.b.len, text, sizeof(text));
		out->err = REGISTRY_REFUSED;
		snprintf(out->why, sizeof(out->why), "subject %s at %s: %s", subject, r->shown, text);
		log_warn("kafka: schema registry: %s", out->why);
		goto out;
	}
	char why[200];
	if (a.truncated || registry_parse_id(a.b.data ? a.b.data : "", a.b.len, &out->id, why,
					     sizeof(why))) {
		out->err = REGISTRY_BAD_ANSWER;
		snprintf(out->why, sizeof(out->why), "subject %s at %s: HTTP %ld: %s", subject,
			 r->shown, status, a.truncated ? "answer too long" : why);
		log_warn("kafka: schema registry: %s", out->why);
		goto out;
	}
	out->err = REGISTRY_OK;
	out->why[0] = '\0';
	log_info("kafka: schema registry %s: subject %s has schema id %u", r->shown, subject,
		 out->id);
out:
	curl_slist_free_all(headers);
	curl_free(escaped);
	free(body);
	buf_free(&a.b);
}

/* The first subject a caller wants registered, under the lock; NULL: none. */
static struct registry_entry *wanted_entry(schema_registry *r)
{
	for (struct registry_entry *e = r->entries; e; e = e->next)
		if (e->state == ENTRY_WANTED)
			return e;
	return NULL;
}

/* The worker: registers the wanted subjects one at a time, then says so on notify_fd. */
static void *registry_thread(void *arg)
{
	schema_registry *r = arg;
	struct registration result;
	pthread_mutex_lock(&r->mu);
	for (;;) {
		struct registry_entry *e = NULL;
		while (!atomic_load(&r->stopping) && !(e = wanted_entry(r)))
			pthread_cond_wait(&r->cv, &r->mu);
		if (atomic_load(&r->stopping))
			break;
		char subject[SUBJECT_MAX];
		memcpy(subject, e->subject, sizeof(subject));
		e->state = ENTRY_ASKING; /* entries are freed only at close, after the join */
		pthread_mutex_unlock(&r->mu);
		registry_register(r, subject, &result);
		pthread_mutex_lock(&r->mu);
		if (result.err == REGISTRY_OK) {
			e->state = ENTRY_KNOWN;
			e->id = result.id;
			r->registrations++;
		} else {
			e->state = ENTRY_FAILED;
			e->err = result.err;
			memcpy(e->why, result.why, sizeof(e->why));
			e->retry_at_ms = clock_mono_ms() + RETRY_AFTER_MS;
		}
		if (r->notify_fd >= 0 && write(r->notify_fd, "r", 1) < 0) {
			/* EAGAIN: the pipe is full, which wakes its reader all the same */
		}
	}
	pthread_mutex_unlock(&r->mu);
	return NULL;
}

schema_registry *registry_open(const char *url, int notify_fd, char *err, size_t errlen)
{
	schema_registry *r = calloc(1, sizeof(*r));
	if (!r || !(r->url = strdup(url)) || !(r->curl = curl_easy_init())) {
		snprintf(err, errlen, "schema registry: out of memory");
		goto fail;
	}
	r->notify_fd = notify_fd;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->cv, NULL);
	r->sync_ready = 1;
	registry_url_shown(url, r->shown, sizeof(r->shown));
	/* a URL with a trailing slash names the same registry */
	size_t len = strlen(r->url);
	while (len && r->url[len - 1] == '/')
		r->url[--len] = '\0';
	len = strlen(r->shown);
	while (len && r->shown[len - 1] == '/')
		r->shown[--len] = '\0';
	if (registry_proto_message_index(SCHEMA_TEXT, "OutboxEvent", &r->message_index)) {
		snprintf(err, errlen, "schema registry: the embedded outbox_event.proto has no "
			 "message OutboxEvent");
		goto fail;
	}
	int rc = pthread_create(&r->thread, NULL, registry_thread, r);
	if (rc) {
		snprintf(err, errlen, "schema registry: its thread: %s", strerror(rc));
		goto fail;
	}
	r->thread_started = 1;
	return r;
fail:
	registry_close(r);
	return NULL;
}

void registry_close(schema_registry *r)
{
	if (!r)
		return;
	if (r->thread_started) {
		pthread_mutex_lock(&r->mu);
		atomic_store(&r->stopping, 1);
		pthread_cond_signal(&r->cv);
		pthread_mutex_unlock(&r->mu);
		pthread_join(r->thread, NULL);
	}
	while (r->entries) {
		struct registry_entry *next = r->entries->next;
		free(r->entries);
		r->entries = next;
	}
	if (r->sync_ready) {
		pthread_cond_destroy(&r->cv);
		pthread_mutex_destroy(&r->mu);
	}
	if (r->curl)
		curl_easy_cleanup(r->curl);
	free(r->url);
	free(r);
}

uint32_t registry_message_index(const schema_registry *r)
{
	return r->message_index;
}

uint64_t registry_registrations(schema_registry *r)
{
	pthread_mutex_lock(&r->mu);
	uint64_t n = r->registrations;
	pthread_mutex_unlock(&r->mu);
	return n;
}

enum registry_err registry_schema_id(schema_registry *r, const char *topic, uint32_t *id,
				     char *why, size_t whylen)
{
	char subject[SUBJECT_MAX];
	struct registry_entry *e;
	enum registry_err err = REGISTRY_PENDING;
	if (registry_subject(topic, subject, sizeof(subject))) {
		snprintf(why, whylen, "topic %.64s...: its subject is too long", topic);
		return REGISTRY_NOMEM;
	}
	pthread_mutex_lock(&r->mu);
	for (e = r->entries; e; e = e->next)
		if (strcmp(e->subject, subject) == 0)
			break;
	if (!e) {
		if (!(e = calloc(1, sizeof(*e)))) {
			pthread_mutex_unlock(&r->mu);
			snprintf(why, whylen, "subject %s: out of memory", subject);
			return REGISTRY_NOMEM;
		}
		memcpy(e->subject, subject, sizeof(subject));
		e->state = ENTRY_NEW;
		e->next = r->entries;
		r->entries = e;
	}
	if (e->state == ENTRY_KNOWN) {
		*id = e->id;
		err = REGISTRY_OK;
	} else if (e->state == ENTRY_FAILED && clock_mono_ms() < e->retry_at_ms) {
		snprintf(why, whylen, "%s", e->why);
		err = e->err;
	} else if (e->state == ENTRY_NEW || e->state == ENTRY_FAILED) {
		e->state = ENTRY_WANTED; /* the worker asks it (again) */
		pthread_cond_signal(&r->cv);
	}
	if (err == REGISTRY_PENDING)
		snprintf(why, whylen, "subject %s at %s: registration under way", subject, r->shown);
	pthread_mutex_unlock(&r->mu);
	return err;
}
