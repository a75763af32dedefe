/* receiver_record.c: what test_receiver keeps of the requests it gets: one JSON record per
 * request (method, raw path, lowercased headers, body as UTF-8 text and base64, TLS
 * details), the receipts of --timestamps, the per-path 2xx tallies of --acks, and the
 * reset of all of it. It records what came, and never interprets a payload. */
#include "receiver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/evp.h>

#define RECEIPTS_MAX      (8u << 20)   /* --timestamps keeps at most 8 Mi receipts (128 MiB) */

int64_t now_us(void)
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

/* The record of one request, without its seq and time (set under the lock). Returned to
 * the caller; NULL when out of memory. */
json_t *record_build(struct MHD_Connection *conn, const char *method,
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

void stats_reset_locked(void)
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
void receipt_add_locked(const char *id, int64_t t)
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

/* Caller holds rx.lock. --acks: one more completed 2xx for id on the request's path. An id
 * the tally no longer knows (a reset came in between) is not counted. */
void ack_record_locked(const char *uri, const char *id)
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
