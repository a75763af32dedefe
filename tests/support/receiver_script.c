/* receiver_script.c: test_receiver's behaviours: what a path answers. A per-path FIFO of
 * scripted answers (status, delay, dropped connection, body, headers, or an echo of the
 * request), then the path's default, then 200 "ok"; or, in chaos mode, an outcome drawn by
 * weight. It builds the answer; receiver.c sleeps, drops or sends it. Callers hold rx.lock
 * where a function says so. */
#include "receiver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const char *const chaos_names[CHAOS_N] = {
	"ok", "slow", "error", "throttle", "reset", "timeout",
};

void response_clear(struct scripted_response *r)
{
	free(r->body);
	json_decref(r->headers);
	memset(r, 0, sizeof(*r));
}

void script_clear(struct path_state *ps)
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

void path_state_free(struct path_state *ps)
{
	script_clear(ps);
	table_free(&ps->acks);
	free(ps->path);
	free(ps);
}

/* Parses one response object into out (zeroed first). Returns 0, or -1 with a message in
 * err. The headers object is deep-copied, so j stays the caller's. */
int response_parse(json_t *j, struct scripted_response *out, char *err, size_t errlen)
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
struct path_state *path_state_get(const char *path, size_t path_len)
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
struct MHD_Response *script_next(struct path_state *ps, json_t *rec, int *status,
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
