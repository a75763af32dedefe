/* envelope.c: the OutboxEvent codec, the subscription of an envelope's target, and the
 * envelope's view for the API with its credentials masked (see envelope.h). The only file
 * that includes protobuf-c's generated code. Must not let a credential of an envelope
 * into a view. */
#include "kafka/envelope.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/evp.h>

#include "outboxd/v1/outbox_event.pb-c.h"
#include "util/base64.h"

#define INDEXES_MAX 64   /* message-index list entries accepted in the wire format */

/* ---- reading ------------------------------------------------------------------------------ */

/* A base-128 varint at *p (< end); advances *p. Returns 0, or -1 when truncated or longer
 * than 10 bytes. */
static int read_varint(const unsigned char **p, const unsigned char *end, uint64_t *out)
{
	uint64_t v = 0;
	for (int shift = 0; shift < 70; shift += 7) {
		if (*p >= end)
			return -1;
		unsigned char b = *(*p)++;
		v |= (uint64_t)(b & 0x7f) << shift;
		if (!(b & 0x80)) {
			*out = v;
			return 0;
		}
	}
	return -1;
}

/* Skips the Schema Registry frame: magic 0, 4-byte schema id, then the message-index list
 * (zig-zag varints: a count, then that many indexes; a count of 0 means [0]). */
static int skip_confluent(const unsigned char **p, const unsigned char *end, char *why,
			  size_t whylen)
{
	uint64_t count, index;
	if (end - *p < 6) {
		snprintf(why, whylen, "Schema Registry framing: %zu bytes are too few for the magic "
			 "byte, schema id and message indexes", (size_t)(end - *p));
		return -1;
	}
	*p += 5;
	if (read_varint(p, end, &count)) {
		snprintf(why, whylen, "Schema Registry framing: message index list is truncated");
		return -1;
	}
	count = (count >> 1) ^ (~(count & 1) + 1); /* zig-zag */
	if (count > INDEXES_MAX) {
		snprintf(why, whylen, "Schema Registry framing: %llu message indexes is not a "
			 "plausible list", (unsigned long long)count);
		return -1;
	}
	for (uint64_t i = 0; i < count; i++) {
		if (read_varint(p, end, &index)) {
			snprintf(why, whylen, "Schema Registry framing: message index list is truncated");
			return -1;
		}
	}
	return 0;
}

static char *dup_or_empty(const char *s)
{
	return strdup(s ? s : "");
}

int envelope_decode(const void *data, size_t len, struct envelope *out, char *why, size_t whylen)
{
	const unsigned char *p = data, *end = p + len;
	Outboxd__V1__OutboxEvent *m = NULL;
	int ok = 0;

	memset(out, 0, sizeof(*out));
	if (len == 0) {
		snprintf(why, whylen, "empty message");
		return -1;
	}
	if (p[0] == 0 && skip_confluent(&p, end, why, whylen))
		return -1;
	m = outboxd__v1__outbox_event__unpack(NULL, (size_t)(end - p), p);
	if (!m) {
		snprintf(why, whylen, "not an OutboxEvent: protobuf-c could not unpack %zu bytes",
			 (size_t)(end - p));
		return -1;
	}
	if (!m->event) {
		snprintf(why, whylen, "the envelope has no event");
		goto out;
	}
	if (!m->event->type || !m->event->type[0]) {
		snprintf(why, whylen, "event.type is empty");
		goto out;
	}
	const Outboxd__V1__Event *ev = m->event;
	out->id = dup_or_empty(ev->id);
	out->type = dup_or_empty(ev->type);
	out->source = dup_or_empty(ev->source);
	out->source_event_id = dup_or_empty(ev->source_event_id);
	out->partition_key = dup_or_empty(ev->partition_key);
	out->created_at_ms = ev->created_at_ms;
	if (ev->payload.len) {
		if (!(out->payload = malloc(ev->payload.len)))
			goto nomem;
		memcpy(out->payload, ev->payload.data, ev->payload.len);
		out->payload_len = ev->payload.len;
	}
	out->endpoint = dup_or_empty(m->endpoint);
	out->protocol = (int)m->protocol;
	out->payload_type = (int)m->payload_type;
	out->timeout_ms = m->timeout_ms;
	out->subscription_id = dup_or_empty(m->subscription_id);
	out->traceparent = dup_or_empty(m->traceparent);
	const Outboxd__V1__Auth *a = m->auth;
	out->has_auth = a != NULL;
	out->auth_type = a ? (int)a->type : 0;
	out->username = dup_or_empty(a ? a->username : NULL);
	out->password = dup_or_empty(a ? a->password : NULL);
	out->token = dup_or_empty(a ? a->token : NULL);
	out->param = dup_or_empty(a ? a->param : NULL);
	out->header = dup_or_empty(a ? a->header : NULL);
	out->grant_type = dup_or_empty(a ? a->grant_type : NULL);
	out->token_url = dup_or_empty(a ? a->token_url : NULL);
	out->client_id = dup_or_empty(a ? a->client_id : NULL);
	out->client_secret = dup_or_empty(a ? a->client_secret : NULL);
	out->scope = dup_or_empty(a ? a->scope : NULL);
	out->audience = dup_or_empty(a ? a->audience : NULL);
	if (m->n_headers) {
		if (!(out->headers = calloc(m->n_headers, sizeof(*out->headers))))
			goto nomem;
		for (size_t i = 0; i < m->n_headers; i++) {
			out->headers[i].name = dup_or_empty(m->headers[i]->key);
			out->headers[i].value = dup_or_empty(m->headers[i]->value);
			out->n_headers++;
			if (!out->headers[i].name || !out->headers[i].value)
				goto nomem;
		}
	}
	if (!out->id || !out->type || !out->source || !out->source_event_id ||
	    !out->partition_key || !out->endpoint || !out->subscription_id || !out->traceparent ||
	    !out->username || !out->password || !out->token || !out->param || !out->header ||
	    !out->grant_type || !out->token_url || !out->client_id || !out->client_secret ||
	    !out->scope || !out->audience)
		goto nomem;
	ok = 1;
	goto out;
nomem:
	snprintf(why, whylen, "out of memory");
out:
	outboxd__v1__outbox_event__free_unpacked(m, NULL);
	if (!ok) {
		envelope_free(out);
		return -1;
	}
	return 0;
}

static void free_secret(char *s)
{
	if (s) {
		OPENSSL_cleanse(s, strlen(s));
		free(s);
	}
}

void envelope_free(struct envelope *e)
{
	free(e->id);
	free(e->type);
	free(e->source);
	free(e->source_event_id);
	free(e->partition_key);
	free(e->payload);
	free(e->endpoint);
	free(e->username);
	free_secret(e->password);
	free_secret(e->token);
	free(e->param);
	free(e->header);
	free(e->grant_type);
	free(e->token_url);
	free(e->client_id);
	free_secret(e->client_secret);
	free(e->scope);
	free(e->audience);
	for (size_t i = 0; i < e->n_headers; i++) {
		free(e->headers[i].name);
		free(e->headers[i].value);
	}
	free(e->headers);
	free(e->subscription_id);
	free(e->traceparent);
	memset(e, 0, sizeof(*e));
}

/* ---- writing ------------------------------------------------------------------------------ */

static char *field(const char *s)
{
	return (char *)(s ? s : protobuf_c_empty_string);
}

/* The Auth of a subscription (s borrowed) into a (its strings borrowed from s). */
static void auth_from_subscription(const struct subscription *s, Outboxd__V1__Auth *a)
{
	switch (s->auth_type) {
	case AUTH_BASIC:
		a->type = OUTBOXD__V1__AUTH_TYPE__BASIC_AUTH;
		a->username = field(s->auth_user);
		a->password = field(s->auth_secret);
		break;
	case AUTH_BEARER:
		a->type = OUTBOXD__V1__AUTH_TYPE__HEADER_TOKEN;
		a->token = field(s->auth_secret);
		break;
	case AUTH_API_KEY:
		a->type = OUTBOXD__V1__AUTH_TYPE__API_KEY;
		a->header = field(s->auth_name);
		a->token = field(s->auth_secret);
		break;
	case AUTH_QUERY:
		a->type = OUTBOXD__V1__AUTH_TYPE__QUERY_PARAMETER;
		a->param = field(s->auth_name);
		a->token = field(s->auth_secret);
		break;
	case AUTH_OAUTH2:
		a->type = OUTBOXD__V1__AUTH_TYPE__OAUTH;
		a->grant_type = s->oauth2.grant == OAUTH2_PASSWORD ? "password" : "client_credentials";
		a->token_url = field(s->oauth2.token_url);
		a->client_id = field(s->oauth2.client_id);
		a->client_secret = field(s->oauth2.client_secret);
		a->scope = field(s->oauth2.scope);
		a->audience = field(s->oauth2.audience);
		a->username = field(s->oauth2.username);
		a->password = field(s->oauth2.password);
		break;
	default:
		a->type = OUTBOXD__V1__AUTH_TYPE__AUTH_TYPE_NONE;
		break;
	}
}

/* Writes v as a base-128 varint at p; returns the bytes written (at most 10). */
static size_t write_varint(unsigned char *p, uint64_t v)
{
	size_t n = 0;
	while (v >= 0x80) {
		p[n++] = (unsigned char)(v | 0x80);
		v >>= 7;
	}
	p[n++] = (unsigned char)v;
	return n;
}

int envelope_encode(const struct envelope_out *in, enum envelope_wire wire, uint32_t schema_id,
		    uint32_t message_index, void **out, size_t *len)
{
	Outboxd__V1__Event ev = OUTBOXD__V1__EVENT__INIT;
	Outboxd__V1__Auth auth = OUTBOXD__V1__AUTH__INIT;
	Outboxd__V1__OutboxEvent m = OUTBOXD__V1__OUTBOX_EVENT__INIT;
	Outboxd__V1__OutboxEvent__HeadersEntry *entries = NULL, **list = NULL;
	int rc = -1;

	ev.id = field(in->id);
	ev.type = field(in->type);
	ev.source = field(in->source);
	ev.source_event_id = field(in->source_event_id);
	ev.partition_key = field(in->partition_key);
	ev.payload.data = (uint8_t *)in->payload;
	ev.payload.len = in->payload_len;
	ev.created_at_ms = in->created_at_ms;
	m.event = &ev;
	m.endpoint = field(in->endpoint);
	m.protocol = (Outboxd__V1__Protocol)in->protocol;
	m.payload_type = (Outboxd__V1__PayloadType)in->payload_type;
	m.timeout_ms = in->timeout_ms;
	m.traceparent = field(in->traceparent);
	m.subscription_id = field(in->subscription_id);
	if (in->auth_from && in->auth_from->auth_type != AUTH_NONE) {
		auth_from_subscription(in->auth_from, &auth);
		m.auth = &auth;
	}
	if (in->n_headers) {
		entries = calloc(in->n_headers, sizeof(*entries));
		list = calloc(in->n_headers, sizeof(*list));
		if (!entries || !list)
			goto out;
		for (size_t i = 0; i < in->n_headers; i++) {
			Outboxd__V1__OutboxEvent__HeadersEntry init =
				OUTBOXD__V1__OUTBOX_EVENT__HEADERS_ENTRY__INIT;
			entries[i] = init;
			entries[i].key = field(in->headers[i].name);
			entries[i].value = field(in->headers[i].value);
			list[i] = &entries[i];
		}
		m.n_headers = in->n_headers;
		m.headers = list;
	}
	/* magic byte, schema id, message-index list (count and index: 11 bytes at most) */
	unsigned char head[5 + 11];
	size_t frame = 0;
	if (wire == ENVELOPE_WIRE_CONFLUENT) {
		head[0] = 0;
		head[1] = (unsigned char)(schema_id >> 24);
		head[2] = (unsigned char)(schema_id >> 16);
		head[3] = (unsigned char)(schema_id >> 8);
		head[4] = (unsigned char)schema_id;
		frame = 5;
		if (message_index == 0) {
			head[frame++] = 0; /* [0], the first message of the schema, as one byte */
		} else {
			frame += write_varint(head + frame, 2);  /* zig-zag of the count, 1 */
			frame += write_varint(head + frame, (uint64_t)message_index << 1);
		}
	}
	size_t body = outboxd__v1__outbox_event__get_packed_size(&m);
	unsigned char *buf = malloc(frame + body + 1);
	if (!buf)
		goto out;
	memcpy(buf, head, frame);
	outboxd__v1__outbox_event__pack(&m, buf + frame);
	*out = buf;
	*len = frame + body;
	rc = 0;
out:
	free(entries);
	free(list);
	return rc;
}

/* ---- the subscription of an envelope's target ---------------------------------------------- */

void envelope_hash_id(const void *data, size_t len, char out[UUID_STR_LEN])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int n = 0;
	EVP_Digest(data, len, md, &n, EVP_sha256(), NULL);
	md[6] = (unsigned char)((md[6] & 0x0f) | 0x80); /* version 8 */
	md[8] = (unsigned char)((md[8] & 0x3f) | 0x80); /* RFC 9562 variant */
	snprintf(out, UUID_STR_LEN,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", md[0],
		 md[1], md[2], md[3], md[4], md[5], md[6], md[7], md[8], md[9], md[10], md[11],
		 md[12], md[13], md[14], md[15]);
}

static int set_if(json_t *obj, const char *key, const char *value)
{
	return value && *value ? json_object_set_new(obj, key, json_string(value)) : 0;
}

/* The auth object of e, NULL for none (with *bad = 1 and why set when it cannot be). */
static json_t *auth_doc(const struct envelope *e, int *bad, char *why, size_t whylen)
{
	json_t *a;
	*bad = 0;
	if (!e->has_auth || e->auth_type == ENVELOPE_AUTH_NONE)
		return NULL;
	a = json_object();
	switch (e->auth_type) {
	case ENVELOPE_AUTH_BASIC:
		if (!*e->username) {
			snprintf(why, whylen, "auth.username is required with BASIC_AUTH");
			goto bad;
		}
		json_object_set_new(a, "type", json_string("basic"));
		set_if(a, "username", e->username);
		json_object_set_new(a, "password", json_string(e->password));
		break;
	case ENVELOPE_AUTH_OAUTH:
		json_object_set_new(a, "type", json_string("oauth2"));
		set_if(a, "grant_type", *e->grant_type ? e->grant_type : "client_credentials");
		set_if(a, "token_url", e->token_url);
		set_if(a, "client_id", e->client_id);
		set_if(a, "client_secret", e->client_secret);
		set_if(a, "scope", e->scope);
		set_if(a, "audience", e->audience);
		set_if(a, "username", e->username);
		set_if(a, "password", e->password);
		break;
	case ENVELOPE_AUTH_HEADER_TOKEN:
	case ENVELOPE_AUTH_JWT_HEADER:
		if (!*e->token) {
			snprintf(why, whylen, "auth.token is required with %s",
				 e->auth_type == ENVELOPE_AUTH_JWT_HEADER ? "JWT_HEADER" : "HEADER_TOKEN");
			goto bad;
		}
		json_object_set_new(a, "type", json_string("bearer"));
		set_if(a, "token", e->token);
		break;
	case ENVELOPE_AUTH_QUERY_PARAMETER:
		if (!*e->token) {
			snprintf(why, whylen, "auth.token is required with QUERY_PARAMETER");
			goto bad;
		}
		json_object_set_new(a, "type", json_string("query"));
		set_if(a, "param", *e->param ? e->param : "token");
		set_if(a, "value", e->token);
		break;
	case ENVELOPE_AUTH_API_KEY:
		if (!*e->token) {
			snprintf(why, whylen, "auth.token is required with API_KEY");
			goto bad;
		}
		json_object_set_new(a, "type", json_string("api_key"));
		set_if(a, "header", *e->header ? e->header : "X-API-Key");
		set_if(a, "value", e->token);
		break;
	default:
		snprintf(why, whylen, "auth.type %d is not a known AuthType", e->auth_type);
		goto bad;
	}
	return a;
bad:
	json_decref(a);
	*bad = 1;
	return NULL;
}

json_t *envelope_subscription_doc(const struct envelope *e, char id_out[UUID_STR_LEN], char *why,
				  size_t whylen)
{
	int bad = 0;
	json_t *auth = auth_doc(e, &bad, why, whylen);
	if (bad)
		return NULL;
	json_t *doc = json_object();
	char url[2100], timeout[32], name[32];
	if (e->protocol == ENVELOPE_PROTOCOL_KAFKA)
		snprintf(url, sizeof(url), "kafka://%s", e->endpoint);
	else
		snprintf(url, sizeof(url), "%s", e->endpoint);
	json_object_set_new(doc, "endpoint", json_string(url));
	json_object_set_new(doc, "event_types", json_array());
	json_object_set_new(doc, "origin", json_string("kafka_envelope"));
	/* no payload_format: each event carries its content type (the envelope's
	 * payload_type), so JSON and binary envelopes to one target share one subscription,
	 * its breaker and its token cache */
	if (auth)
		json_object_set_new(doc, "auth", auth);
	if (e->timeout_ms) {
		snprintf(timeout, sizeof(timeout), "%ums", e->timeout_ms);
		json_object_set_new(doc, "timeout", json_string(timeout));
	}
	if (e->n_headers) {
		json_t *h = json_object();
		for (size_t i = 0; i < e->n_headers; i++)
			json_object_set_new(h, e->headers[i].name, json_string(e->headers[i].value));
		json_object_set_new(doc, "headers", h);
	}
	/* the id is the document's: same target, same subscription */
	char *text = json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS);
	if (!text) {
		json_decref(doc);
		snprintf(why, whylen, "the envelope's target is not valid UTF-8 or out of memory");
		return NULL;
	}
	envelope_hash_id(text, strlen(text), id_out);
	OPENSSL_cleanse(text, strlen(text));
	free(text);
	snprintf(name, sizeof(name), "envelope:%.8s%.4s%.4s", id_out, id_out + 9, id_out + 14);
	json_object_set_new(doc, "name", json_string(name));
	return doc;
}

/* ---- the view: credentials masked, fields as JSON ------------------------------------------ */

/* A credential that is set and not masked yet. */
static int credential_set(const char *s)
{
	return s && *s && strcmp(s, ENVELOPE_MASK) != 0;
}

int envelope_redact(const void *data, size_t len, void **out, size_t *out_len)
{
	const unsigned char *start = data, *p = data, *end = p + len;
	Outboxd__V1__OutboxEvent *m = NULL;
	char why[160], ***slots = NULL, **saved = NULL;
	size_t n = 0;
	int rc = 0;

	*out = NULL;
	*out_len = 0;
	if (len == 0 || (p[0] == 0 && skip_confluent(&p, end, why, sizeof(why))))
		return 0;
	if (!(m = outboxd__v1__outbox_event__unpack(NULL, (size_t)(end - p), p)))
		return 0; /* not an OutboxEvent: nothing can be told apart in it */
	slots = calloc(m->n_headers + 3, sizeof(*slots));
	saved = calloc(m->n_headers + 3, sizeof(*saved));
	if (!slots || !saved) {
		rc = -1;
		goto out;
	}
	if (m->auth) {
		char **auth[] = {&m->auth->password, &m->auth->token, &m->auth->client_secret};
		for (size_t i = 0; i < 3; i++)
			if (credential_set(*auth[i]))
				slots[n++] = auth[i];
	}
	for (size_t i = 0; i < m->n_headers; i++)
		if (m->headers[i]->key && strcasecmp(m->headers[i]->key, "authorization") == 0 &&
		    credential_set(m->headers[i]->value))
			slots[n++] = &m->headers[i]->value;
	if (!n)
		goto out;
	/* the mask goes in for the packing only: free_unpacked frees what unpack made */
	for (size_t i = 0; i < n; i++) {
		saved[i] = *slots[i];
		*slots[i] = (char *)ENVELOPE_MASK;
	}
	size_t frame = (size_t)(p - start), body = outboxd__v1__outbox_event__get_packed_size(m);
	unsigned char *buf = malloc(frame + body + 1);
	if (buf) {
		memcpy(buf, start, frame);
		outboxd__v1__outbox_event__pack(m, buf + frame);
		*out = buf;
		*out_len = frame + body;
		rc = 1;
	} else {
		rc = -1;
	}
	for (size_t i = 0; i < n; i++)
		*slots[i] = saved[i];
out:
	free(slots);
	free(saved);
	outboxd__v1__outbox_event__free_unpacked(m, NULL);
	return rc;
}

/* An enum value by its .proto name, or its number when the .proto has none for it. */
static json_t *enum_json(int v, const char *const *names, int n)
{
	return v >= 0 && v < n ? json_string(names[v]) : json_integer(v);
}

static void set_str(json_t *o, const char *key, const char *s)
{
	json_object_set_new(o, key, json_string(s ? s : ""));
}

/* An auth field that is set: a credential as ENVELOPE_MASK. */
static void set_auth(json_t *a, const char *key, const char *s, int credential)
{
	if (s && *s)
		json_object_set_new(a, key, json_string(credential ? ENVELOPE_MASK : s));
}

json_t *envelope_to_json(const struct envelope *e)
{
	static const char *const payload_types[] = {"PAYLOAD_TYPE_UNSPECIFIED", "PAYLOAD_TYPE_JSON",
						    "PAYLOAD_TYPE_BINARY"};
	static const char *const protocols[] = {"PROTOCOL_UNSPECIFIED", "PROTOCOL_HTTP",
						"PROTOCOL_KAFKA"};
	static const char *const auth_types[] = {"AUTH_TYPE_NONE", "BASIC_AUTH", "OAUTH",
						 "HEADER_TOKEN", "JWT_HEADER", "QUERY_PARAMETER",
						 "API_KEY"};
	json_t *o = json_object(), *ev = json_object(), *h = json_object(), *payload = NULL;
	if (!o || !ev || !h) {
		json_decref(o);
		json_decref(ev);
		json_decref(h);
		return NULL;
	}
	set_str(ev, "id", e->id);
	set_str(ev, "type", e->type);
	set_str(ev, "source", e->source);
	set_str(ev, "source_event_id", e->source_event_id);
	set_str(ev, "partition_key", e->partition_key);
	/* as GET /v1/events/{id} shows a payload: JSON as JSON, other bytes in base64 */
	if (e->payload_type != ENVELOPE_PAYLOAD_BINARY && e->payload_len)
		payload = json_loadb(e->payload, e->payload_len, JSON_DECODE_ANY, NULL);
	if (payload) {
		json_object_set_new(ev, "payload", payload);
	} else {
		char *b64 = malloc(base64_encoded_size(e->payload_len));
		if (b64) {
			base64_encode(e->payload ? e->payload : "", e->payload_len, b64);
			json_object_set_new(ev, "payload_base64", json_string(b64));
			free(b64);
		}
	}
	json_object_set_new(ev, "created_at_ms", json_integer(e->created_at_ms));
	json_object_set_new(o, "event", ev);
	set_str(o, "endpoint", e->endpoint);
	json_object_set_new(o, "protocol", enum_json(e->protocol, protocols, 3));
	if (e->has_auth) {
		json_t *a = json_object();
		json_object_set_new(a, "type", enum_json(e->auth_type, auth_types, 7));
		set_auth(a, "username", e->username, 0);
		set_auth(a, "password", e->password, 1);
		set_auth(a, "token", e->token, 1);
		set_auth(a, "param", e->param, 0);
		set_auth(a, "header", e->header, 0);
		set_auth(a, "grant_type", e->grant_type, 0);
		set_auth(a, "token_url", e->token_url, 0);
		set_auth(a, "client_id", e->client_id, 0);
		set_auth(a, "client_secret", e->client_secret, 1);
		set_auth(a, "scope", e->scope, 0);
		set_auth(a, "audience", e->audience, 0);
		json_object_set_new(o, "auth", a);
	} else {
		json_object_set_new(o, "auth", json_null());
	}
	json_object_set_new(o, "payload_type", enum_json(e->payload_type, payload_types, 3));
	json_object_set_new(o, "timeout_ms", json_integer(e->timeout_ms));
	for (size_t i = 0; i < e->n_headers; i++)
		json_object_set_new(h, e->headers[i].name,
				    json_string(strcasecmp(e->headers[i].name, "authorization") == 0 &&
							*e->headers[i].value
						? ENVELOPE_MASK
						: e->headers[i].value));
	json_object_set_new(o, "headers", h);
	set_str(o, "subscription_id", e->subscription_id);
	set_str(o, "traceparent", e->traceparent);
	return o;
}

int envelope_has_credentials(const struct envelope *e)
{
	if (e->has_auth && (*e->password || *e->token || *e->client_secret))
		return 1;
	for (size_t i = 0; i < e->n_headers; i++)
		if (strcasecmp(e->headers[i].name, "authorization") == 0 && *e->headers[i].value)
			return 1;
	return 0;
}

json_t *envelope_view(const void *data, size_t len)
{
	const unsigned char *bytes = data;
	void *masked = NULL;
	size_t masked_len = 0;
	struct envelope e;
	char why[512];
	int r = envelope_redact(data, len, &masked, &masked_len);
	if (r < 0)
		return NULL;
	const void *shown = r ? masked : data;
	size_t shown_len = r ? masked_len : len;
	json_t *o = json_object();
	char *b64 = malloc(base64_encoded_size(shown_len));
	if (!o || !b64) {
		json_decref(o);
		free(b64);
		free(masked);
		return NULL;
	}
	base64_encode(shown_len ? shown : "", shown_len, b64);
	json_object_set_new(o, "raw_base64", json_string(b64));
	free(b64);
	/* a protobuf message never starts with byte 0: the Schema Registry's magic byte */
	if (len >= 5 && bytes[0] == 0) {
		json_object_set_new(o, "wire_format", json_string("confluent"));
		json_object_set_new(o, "schema_id",
				    json_integer((json_int_t)((uint32_t)bytes[1] << 24 |
							      (uint32_t)bytes[2] << 16 |
							      (uint32_t)bytes[3] << 8 | bytes[4])));
	} else {
		json_object_set_new(o, "wire_format", json_string("plain"));
	}
	if (envelope_decode(shown, shown_len, &e, why, sizeof(why)) == 0) {
		json_t *parsed = envelope_to_json(&e);
		json_object_set_new(o, "redacted",
				    json_boolean(r == 1 || envelope_has_credentials(&e)));
		json_object_set_new(o, "parsed", parsed ? parsed : json_null());
		json_object_set_new(o, "parse_error", parsed ? json_null()
							      : json_string("out of memory"));
		envelope_free(&e);
	} else {
		json_object_set_new(o, "redacted", json_false());
		json_object_set_new(o, "parsed", json_null());
		json_object_set_new(o, "parse_error", json_string(why));
	}
	free(masked);
	return o;
}
