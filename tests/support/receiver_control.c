/* receiver_control.c: test_receiver's JSON control API under /_control/: scripts, the
 * recorded requests, counters, receipts (--timestamps), chaos weights and draws, ack
 * tallies (--acks), reset. Tests drive the receiver only through these endpoints
 * (tests/support/harness.h); every read takes rx.lock and copies before answering. */
#include "receiver.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

enum MHD_Result reply_error(struct MHD_Connection *conn, unsigned int status,
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

/* GET /_control/timestamps: one "webhook-id received_at_us" line per receipt ("path
 * webhook-id received_at_us" with --unique-per-path), in arrival
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

enum MHD_Result control_dispatch(struct MHD_Connection *conn, const char *method,
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
