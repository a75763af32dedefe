/* otlp_encode.c: the export requests of otlp.h — attempt spans and the counters built as
 * the messages of the OTLP definitions (proto/opentelemetry, compiled with protoc-c), then
 * packed as binary protobuf or written as OTLP JSON (otlp_json.c). Both encodings come
 * from the one message, so they cannot say different things. Also the request's arena,
 * and what the collector's answer says it rejected. Pure: no I/O, no clock. */
#include "otel/otlp.h"
#include "otel/otlp_int.h"

#include <stdalign.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <zlib.h>

#include "core/model.h"
#include "core/trace.h"
#include "util/utf8.h"

#define CHUNK_MIN ((size_t)64 << 10)

/* Span.flags: the low 8 bits are the W3C trace flags; these say whether the parent span
 * context is remote (opentelemetry.proto.trace.v1.SpanFlags). */
#define SPAN_FLAGS_HAS_IS_REMOTE 0x100u
#define SPAN_FLAGS_IS_REMOTE 0x200u

/* ---- arena ------------------------------------------------------------------------------ */

struct otlp_arena_chunk {
	struct otlp_arena_chunk *next;
	size_t used, size;
	alignas(max_align_t) unsigned char data[];
};

void *otlp_alloc(struct otlp_arena *a, size_t n)
{
	const size_t align = alignof(max_align_t);
	struct otlp_arena_chunk *c = a->head;

	n = (n + align - 1) / align * align;
	if (!n)
		n = align;
	if (!c || c->size - c->used < n) {
		size_t size = n > CHUNK_MIN ? n : CHUNK_MIN;
		if (size > OTLP_ARENA_MAX || a->total > OTLP_ARENA_MAX - size)
			return NULL;
		c = malloc(sizeof(*c) + size);
		if (!c)
			return NULL;
		c->used = 0;
		c->size = size;
		c->next = a->head;
		a->head = c;
		a->total += size;
	}
	void *p = c->data + c->used;
	c->used += n;
	memset(p, 0, n);
	return p;
}

void otlp_arena_free(struct otlp_arena *a)
{
	while (a->head) {
		struct otlp_arena_chunk *next = a->head->next;
		free(a->head);
		a->head = next;
	}
	a->total = 0;
}

char *otlp_strdup(struct otlp_arena *a, const char *s)
{
	const unsigned char *t = (const unsigned char *)(s ? s : "");
	size_t len = strlen((const char *)t);
	char *out = otlp_alloc(a, len + 1);

	if (!out)
		return NULL;
	for (size_t i = 0; i < len;) {
		size_t ok = utf8_valid_prefix(t + i, len - i);
		memcpy(out + i, t + i, ok);
		i += ok;
		if (i < len)
			out[i++] = '?';
	}
	return out;
}

/* ---- common messages ---------------------------------------------------------------------- */

static otlp_kv *kv_new(struct otlp_arena *a, const char *key)
{
	otlp_kv *kv = otlp_alloc(a, sizeof(*kv));
	otlp_any *v = otlp_alloc(a, sizeof(*v));
	if (!kv || !v)
		return NULL;
	opentelemetry__proto__common__v1__key_value__init(kv);
	opentelemetry__proto__common__v1__any_value__init(v);
	if (!(kv->key = otlp_strdup(a, key)))
		return NULL;
	kv->value = v;
	return kv;
}

otlp_kv *otlp_kv_str(struct otlp_arena *a, const char *key, const char *value)
{
	otlp_kv *kv = kv_new(a, key);
	if (!kv || !(kv->value->string_value = otlp_strdup(a, value)))
		return NULL;
	kv->value->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_STRING_VALUE;
	return kv;
}

otlp_kv *otlp_kv_int(struct otlp_arena *a, const char *key, int64_t value)
{
	otlp_kv *kv = kv_new(a, key);
	if (!kv)
		return NULL;
	kv->value->value_case = OPENTELEMETRY__PROTO__COMMON__V1__ANY_VALUE__VALUE_INT_VALUE;
	kv->value->int_value = value;
	return kv;
}

otlp_resource *otlp_resource_new(struct otlp_arena *a, const char *service_instance,
				 const char *version)
{
	otlp_resource *r = otlp_alloc(a, sizeof(*r));
	otlp_kv **attrs = otlp_alloc(a, 3 * sizeof(*attrs));
	if (!r || !attrs)
		return NULL;
	opentelemetry__proto__resource__v1__resource__init(r);
	attrs[0] = otlp_kv_str(a, "service.name", "outboxd");
	attrs[1] = otlp_kv_str(a, "service.version", version);
	attrs[2] = otlp_kv_str(a, "service.instance.id", service_instance);
	if (!attrs[0] || !attrs[1] || !attrs[2])
		return NULL;
	r->attributes = attrs;
	r->n_attributes = 3;
	return r;
}

otlp_scope *otlp_scope_new(struct otlp_arena *a, const char *version)
{
	otlp_scope *s = otlp_alloc(a, sizeof(*s));
	if (!s)
		return NULL;
	opentelemetry__proto__common__v1__instrumentation_scope__init(s);
	s->name = otlp_strdup(a, "outboxd");
	s->version = otlp_strdup(a, version);
	return s->name && s->version ? s : NULL;
}

/* ---- spans -------------------------------------------------------------------------------- */

static void copy(char *dst, size_t size, const char *src)
{
	snprintf(dst, size, "%s", src ? src : "");
}

void otlp_span_from_attempt(struct otlp_span *s, const struct store_claim *c,
			    const struct store_attempt *a, uint64_t span_id, int64_t start_ns,
			    int64_t duration_ns)
{
	char tp[TRACEPARENT_LEN];

	memset(s, 0, sizeof(*s));
	/* the same trace id the attempt's traceparent header carried (core/trace.h) */
	trace_child(c->traceparent, c->event_id, span_id, tp);
	memcpy(s->trace_id, tp + 3, 32);
	memcpy(s->span_id, tp + 36, 16);
	s->trace_flags = (unsigned)strtoul(tp + 53, NULL, 16) & 0xffu;
	if (trace_valid(c->traceparent))
		memcpy(s->parent_span_id, c->traceparent + 36, 16);
	copy(s->delivery_id, sizeof(s->delivery_id), c->delivery_id);
	copy(s->event_id, sizeof(s->event_id), c->event_id);
	copy(s->subscription_id, sizeof(s->subscription_id), c->subscription_id);
	copy(s->event_type, sizeof(s->event_type), c->event_type);
	copy(s->kind, sizeof(s->kind), attempt_kind_name(a->kind));
	copy(s->message, sizeof(s->message), a->message);
	s->attempt = a->n;
	s->code = a->code;
	s->start_ns = start_ns;
	s->end_ns = start_ns + (duration_ns > 0 ? duration_ns : 0);
}

static int hex_value(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
	       c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The bytes of the hex text (2 * n digits) into an arena buffer: 0, or -1 when out of
 * memory or not hex. */
static int id_bytes(struct otlp_arena *a, const char *hex, size_t n, ProtobufCBinaryData *out)
{
	unsigned char *b = otlp_alloc(a, n);
	if (!b)
		return -1;
	for (size_t i = 0; i < n; i++) {
		int hi = hex_value(hex[2 * i]), lo = hi < 0 ? -1 : hex_value(hex[2 * i + 1]);
		if (lo < 0)
			return -1;
		b[i] = (unsigned char)(hi << 4 | lo);
	}
	out->data = b;
	out->len = n;
	return 0;
}

static otlp_pb_span *span_message(struct otlp_arena *a, const struct otlp_span *s)
{
	int ok = s->code >= 200 && s->code < 300;
	char name[128];
	otlp_pb_span *m = otlp_alloc(a, sizeof(*m));
	otlp_status *st = otlp_alloc(a, sizeof(*st));
	otlp_kv **attrs = otlp_alloc(a, 9 * sizeof(*attrs));
	size_t n = 0;

	if (!m || !st || !attrs)
		return NULL;
	opentelemetry__proto__trace__v1__span__init(m);
	opentelemetry__proto__trace__v1__status__init(st);
	if (id_bytes(a, s->trace_id, 16, &m->trace_id) || id_bytes(a, s->span_id, 8, &m->span_id) ||
	    (s->parent_span_id[0] && id_bytes(a, s->parent_span_id, 8, &m->parent_span_id)))
		return NULL;
	/* the parent, when there is one, is the producer's span: a remote one */
	m->flags = s->trace_flags | SPAN_FLAGS_HAS_IS_REMOTE |
		   (s->parent_span_id[0] ? SPAN_FLAGS_IS_REMOTE : 0);
	snprintf(name, sizeof(name), "deliver %s", s->event_type[0] ? s->event_type : "event");
	m->name = otlp_strdup(a, name);
	m->kind = OPENTELEMETRY__PROTO__TRACE__V1__SPAN__SPAN_KIND__SPAN_KIND_CLIENT;
	m->start_time_unix_nano = (uint64_t)s->start_ns;
	m->end_time_unix_nano = (uint64_t)s->end_ns;
	attrs[n++] = otlp_kv_str(a, "outboxd.delivery.id", s->delivery_id);
	attrs[n++] = otlp_kv_str(a, "outboxd.event.id", s->event_id);
	attrs[n++] = otlp_kv_str(a, "outboxd.event.type", s->event_type);
	attrs[n++] = otlp_kv_str(a, "outboxd.subscription.id", s->subscription_id);
	attrs[n++] = otlp_kv_str(a, "outboxd.attempt.kind", s->kind);
	attrs[n++] = otlp_kv_int(a, "outboxd.attempt.number", s->attempt);
	attrs[n++] = otlp_kv_int(a, "outboxd.attempt.code", s->code);
	attrs[n++] = otlp_kv_str(a, "outboxd.attempt.outcome", ok ? "success" : "failure");
	if (s->code >= 100 && s->code < 600)
		attrs[n++] = otlp_kv_int(a, "http.response.status_code", s->code);
	for (size_t i = 0; i < n; i++)
		if (!attrs[i])
			return NULL;
	m->attributes = attrs;
	m->n_attributes = n;
	st->code = ok ? OPENTELEMETRY__PROTO__TRACE__V1__STATUS__STATUS_CODE__STATUS_CODE_OK
		      : OPENTELEMETRY__PROTO__TRACE__V1__STATUS__STATUS_CODE__STATUS_CODE_ERROR;
	if (!ok && !(st->message = otlp_strdup(a, s->message)))
		return NULL;
	m->status = st;
	return m->name ? m : NULL;
}

/* ---- requests ------------------------------------------------------------------------------ */

int otlp_protocol_parse(const char *name, enum otlp_protocol *out)
{
	if (name && strcmp(name, "http/protobuf") == 0)
		*out = OTLP_PROTOBUF;
	else if (name && strcmp(name, "http/json") == 0)
		*out = OTLP_JSON;
	else
		return -1;
	return 0;
}

/* m in protocol p into *body (malloc'd) and *len. 0, or -1 when out of memory. */
static int encode(enum otlp_protocol p, const ProtobufCMessage *m, char **body, size_t *len)
{
	if (p == OTLP_JSON)
		return otlp_json_encode(m, body, len);
	*len = protobuf_c_message_get_packed_size(m);
	*body = malloc(*len ? *len : 1);
	if (!*body)
		return -1;
	protobuf_c_message_pack(m, (uint8_t *)*body);
	return 0;
}

int otlp_encode_traces(enum otlp_protocol p, const struct otlp_span *spans, size_t n,
		       const char *service_instance, const char *version, char **body,
		       size_t *len)
{
	struct otlp_arena a = {0};
	otlp_trace_request req =
		OPENTELEMETRY__PROTO__COLLECTOR__TRACE__V1__EXPORT_TRACE_SERVICE_REQUEST__INIT;
	otlp_resource_spans rs = OPENTELEMETRY__PROTO__TRACE__V1__RESOURCE_SPANS__INIT, *rsp = &rs;
	otlp_scope_spans ss = OPENTELEMETRY__PROTO__TRACE__V1__SCOPE_SPANS__INIT, *ssp = &ss;
	int rc = -1;

	*body = NULL;
	*len = 0;
	if (!(rs.resource = otlp_resource_new(&a, service_instance, version)) ||
	    !(ss.scope = otlp_scope_new(&a, version)) ||
	    !(ss.spans = otlp_alloc(&a, (n ? n : 1) * sizeof(*ss.spans))))
		goto out;
	for (ss.n_spans = 0; ss.n_spans < n; ss.n_spans++)
		if (!(ss.spans[ss.n_spans] = span_message(&a, &spans[ss.n_spans])))
			goto out;
	rs.scope_spans = &ssp;
	rs.n_scope_spans = 1;
	req.resource_spans = &rsp;
	req.n_resource_spans = 1;
	rc = encode(p, &req.base, body, len);
out:
	otlp_arena_free(&a);
	return rc;
}

int otlp_encode_metrics(enum otlp_protocol p, const char *prometheus_text,
			const char *service_instance, const char *version, int64_t start_ns,
			int64_t now_ns, char **body, size_t *len)
{
	struct otlp_arena a = {0};
	otlp_metrics_request req =
		OPENTELEMETRY__PROTO__COLLECTOR__METRICS__V1__EXPORT_METRICS_SERVICE_REQUEST__INIT;
	otlp_resource_metrics rm = OPENTELEMETRY__PROTO__METRICS__V1__RESOURCE_METRICS__INIT,
			      *rmp = &rm;
	otlp_scope_metrics sm = OPENTELEMETRY__PROTO__METRICS__V1__SCOPE_METRICS__INIT, *smp = &sm;
	int rc = -1;

	*body = NULL;
	*len = 0;
	if (!(rm.resource = otlp_resource_new(&a, service_instance, version)) ||
	    !(sm.scope = otlp_scope_new(&a, version)) ||
	    otlp_metrics_from_prometheus(&a, prometheus_text, start_ns, now_ns, &sm.metrics,
					 &sm.n_metrics))
		goto out;
	rm.scope_metrics = &smp;
	rm.n_scope_metrics = 1;
	req.resource_metrics = &rmp;
	req.n_resource_metrics = 1;
	rc = encode(p, &req.base, body, len);
out:
	otlp_arena_free(&a);
	return rc;
}

/* ---- the collector's answer ------------------------------------------------------------- */

/* The partial success of an OTLP JSON answer: rejectedSpans or rejectedDataPoints (a
 * decimal string, or a number) and errorMessage. */
static void json_rejected(const char *body, size_t len, const char *count_key, int64_t *rejected,
			  char *message, size_t msglen)
{
	json_t *root = json_loadb(body, len, 0, NULL);
	json_t *ps = json_object_get(root, "partialSuccess");
	json_t *count = json_object_get(ps, count_key);

	if (json_is_string(count))
		*rejected = strtoll(json_string_value(count), NULL, 10);
	else if (json_is_integer(count))
		*rejected = json_integer_value(count);
	if (json_is_string(json_object_get(ps, "errorMessage")))
		snprintf(message, msglen, "%s", json_string_value(json_object_get(ps, "errorMessage")));
	json_decref(root);
}

void otlp_response_rejected(enum otlp_protocol p, int spans, const char *body, size_t len,
			    int64_t *rejected, char *message, size_t msglen)
{
	*rejected = 0;
	if (msglen)
		message[0] = '\0';
	if (!len)
		return;
	if (p == OTLP_JSON) {
		json_rejected(body, len, spans ? "rejectedSpans" : "rejectedDataPoints", rejected,
			      message, msglen);
	} else if (spans) {
		Opentelemetry__Proto__Collector__Trace__V1__ExportTraceServiceResponse *r =
			opentelemetry__proto__collector__trace__v1__export_trace_service_response__unpack(
				NULL, len, (const uint8_t *)body);
		if (r && r->partial_success) {
			*rejected = r->partial_success->rejected_spans;
			snprintf(message, msglen, "%s", r->partial_success->error_message);
		}
		if (r)
			opentelemetry__proto__collector__trace__v1__export_trace_service_response__free_unpacked(
				r, NULL);
	} else {
		Opentelemetry__Proto__Collector__Metrics__V1__ExportMetricsServiceResponse *r =
			opentelemetry__proto__collector__metrics__v1__export_metrics_service_response__unpack(
				NULL, len, (const uint8_t *)body);
		if (r && r->partial_success) {
			*rejected = r->partial_success->rejected_data_points;
			snprintf(message, msglen, "%s", r->partial_success->error_message);
		}
		if (r)
			opentelemetry__proto__collector__metrics__v1__export_metrics_service_response__free_unpacked(
				r, NULL);
	}
	if (*rejected < 0)
		*rejected = 0;
}

int otlp_gzip(const void *body, size_t len, char **out, size_t *out_len)
{
	z_stream z = {0};

	*out = NULL;
	*out_len = 0;
	/* 15 + 16: a 32 KiB window with a gzip header and trailer instead of zlib's; level 1:
	 * export requests repeat their attribute names and ids, which the fastest level
	 * already shrinks several times, for the least CPU of the exporter thread */
	if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -1;
	size_t cap = deflateBound(&z, (uLong)len);
	char *buf = malloc(cap);
	if (!buf) {
		deflateEnd(&z);
		return -1;
	}
	z.next_in = (Bytef *)(uintptr_t)body;
	z.avail_in = (uInt)len;
	z.next_out = (Bytef *)buf;
	z.avail_out = (uInt)cap;
	int rc = deflate(&z, Z_FINISH);
	size_t n = cap - z.avail_out;
	deflateEnd(&z);
	if (rc != Z_STREAM_END) {
		free(buf);
		return -1;
	}
	*out = buf;
	*out_len = n;
	return 0;
}
