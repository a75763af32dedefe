/* otlp_json.c: the OTLP JSON encoding of any message of the OTLP definitions, read
 * through protobuf-c's descriptors, so the JSON says exactly what the protobuf does.
 *
 * proto3's JSON mapping: keys are the field names in lowerCamelCase, a singular field at
 * its default value is left out (a member of a oneof that is set is not), 64-bit integers
 * are decimal strings, bytes base64. OTLP's deviations (its specification, "JSON Protobuf
 * Encoding"): trace and span ids are hex, enums are integers. Pure: no I/O. */
#include "otel/otlp_int.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "util/base64.h"

static json_t *message_json(const ProtobufCMessage *m);

static json_t *int64_json(int64_t v)
{
	char text[24];
	snprintf(text, sizeof(text), "%" PRId64, v);
	return json_string(text);
}

static json_t *uint64_json(uint64_t v)
{
	char text[24];
	snprintf(text, sizeof(text), "%" PRIu64, v);
	return json_string(text);
}

/* proto3 JSON writes the IEEE specials as strings; JSON has no numbers for them. */
static json_t *double_json(double v)
{
	if (isnan(v))
		return json_string("NaN");
	if (isinf(v))
		return json_string(v > 0 ? "Infinity" : "-Infinity");
	return json_real(v);
}

/* Trace and span ids (trace_id, span_id, parent_span_id, in every OTLP message that has
 * them) are hex in OTLP JSON; other bytes are base64. */
static int is_id_field(const char *name)
{
	size_t n = strlen(name);
	return (n >= 8 && strcmp(name + n - 8, "trace_id") == 0) ||
	       (n >= 7 && strcmp(name + n - 7, "span_id") == 0);
}

static json_t *bytes_json(const ProtobufCFieldDescriptor *f, const ProtobufCBinaryData *b)
{
	static const char digits[] = "0123456789abcdef";
	char *text = malloc(is_id_field(f->name) ? 2 * b->len + 1 : base64_encoded_size(b->len));
	json_t *out;

	if (!text)
		return NULL;
	if (is_id_field(f->name)) {
		for (size_t i = 0; i < b->len; i++) {
			text[2 * i] = digits[b->data[i] >> 4];
			text[2 * i + 1] = digits[b->data[i] & 0xf];
		}
		text[2 * b->len] = '\0';
	} else {
		base64_encode(b->data, b->len, text);
	}
	out = json_string(text);
	free(text);
	return out;
}

/* The value at p of field f's type (one element of a repeated field). */
static json_t *value_json(const ProtobufCFieldDescriptor *f, const void *p)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_ENUM:
		return json_integer(*(const int32_t *)p);
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32:
		return json_integer(*(const uint32_t *)p);
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
		return int64_json(*(const int64_t *)p);
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		return uint64_json(*(const uint64_t *)p);
	case PROTOBUF_C_TYPE_FLOAT:
		return double_json(*(const float *)p);
	case PROTOBUF_C_TYPE_DOUBLE:
		return double_json(*(const double *)p);
	case PROTOBUF_C_TYPE_BOOL:
		return json_boolean(*(const protobuf_c_boolean *)p);
	case PROTOBUF_C_TYPE_STRING:
		return json_string(*(char *const *)p ? *(char *const *)p : "");
	case PROTOBUF_C_TYPE_BYTES:
		return bytes_json(f, p);
	case PROTOBUF_C_TYPE_MESSAGE:
		return message_json(*(ProtobufCMessage *const *)p);
	}
	return NULL;
}

static size_t value_size(const ProtobufCFieldDescriptor *f)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
		return 8;
	case PROTOBUF_C_TYPE_DOUBLE:
		return sizeof(double);
	case PROTOBUF_C_TYPE_BOOL:
		return sizeof(protobuf_c_boolean);
	case PROTOBUF_C_TYPE_STRING:
		return sizeof(char *);
	case PROTOBUF_C_TYPE_BYTES:
		return sizeof(ProtobufCBinaryData);
	case PROTOBUF_C_TYPE_MESSAGE:
		return sizeof(ProtobufCMessage *);
	default:
		return 4;
	}
}

/* True when the singular field at p holds its proto3 default (0, false, "", no bytes, no
 * message): such a field is not written. */
static int is_default(const ProtobufCFieldDescriptor *f, const void *p)
{
	switch (f->type) {
	case PROTOBUF_C_TYPE_STRING:
		return !*(char *const *)p || !**(char *const *)p;
	case PROTOBUF_C_TYPE_BYTES:
		return ((const ProtobufCBinaryData *)p)->len == 0;
	case PROTOBUF_C_TYPE_MESSAGE:
		return !*(ProtobufCMessage *const *)p;
	case PROTOBUF_C_TYPE_DOUBLE:
		return *(const double *)p == 0 && !signbit(*(const double *)p);
	case PROTOBUF_C_TYPE_FLOAT:
		return *(const float *)p == 0 && !signbit(*(const float *)p);
	case PROTOBUF_C_TYPE_BOOL:
		return !*(const protobuf_c_boolean *)p;
	default: {
		static const unsigned char zero[8];
		return memcmp(p, zero, value_size(f)) == 0;
	}
	}
}

/* "start_time_unix_nano" -> "startTimeUnixNano" into out (size bytes). */
static void camel(const char *name, char *out, size_t size)
{
	size_t o = 0;
	int upper = 0;
	for (; *name && o + 1 < size; name++) {
		if (*name == '_') {
			upper = 1;
			continue;
		}
		out[o++] = upper && *name >= 'a' && *name <= 'z' ? (char)(*name - 'a' + 'A') : *name;
		upper = 0;
	}
	out[o] = '\0';
}

static json_t *message_json(const ProtobufCMessage *m)
{
	const ProtobufCMessageDescriptor *d = m->descriptor;
	json_t *obj = json_object();

	for (unsigned i = 0; obj && i < d->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &d->fields[i];
		const char *base = (const char *)m;
		const void *p = base + f->offset;
		char key[64];
		json_t *v = NULL;

		if (f->label == PROTOBUF_C_LABEL_REPEATED) {
			size_t n = *(const size_t *)(base + f->quantifier_offset);
			const char *items = *(const char *const *)p;
			if (!n)
				continue;
			v = json_array();
			for (size_t k = 0; v && k < n; k++)
				if (json_array_append_new(v, value_json(f, items + k * value_size(f)))) {
					json_decref(v);
					v = NULL;
				}
		} else if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
			/* the member the oneof's case names is written even at its default */
			if (*(const uint32_t *)(base + f->quantifier_offset) != f->id)
				continue;
			v = value_json(f, p);
		} else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->type != PROTOBUF_C_TYPE_STRING &&
			   f->type != PROTOBUF_C_TYPE_MESSAGE) {
			/* a field with presence (protobuf-c's has_ flag) */
			if (!*(const protobuf_c_boolean *)(base + f->quantifier_offset))
				continue;
			v = value_json(f, p);
		} else {
			if (is_default(f, p))
				continue;
			v = value_json(f, p);
		}
		camel(f->name, key, sizeof(key));
		if (json_object_set_new(obj, key, v)) {
			json_decref(obj);
			obj = NULL;
		}
	}
	return obj;
}

int otlp_json_encode(const ProtobufCMessage *m, char **out, size_t *len)
{
	json_t *root = message_json(m);
	*out = root ? json_dumps(root, JSON_COMPACT) : NULL;
	json_decref(root);
	*len = *out ? strlen(*out) : 0;
	return *out ? 0 : -1;
}
