/* sub_codec.h: subscriptions between JSON and struct subscription.
 *
 * The stored configuration is the JSON document the API accepted; this file validates it
 * (every field named in the error), turns it into the struct the dispatcher uses, and
 * renders the public view with credentials masked. */
#ifndef OUTBOXD_API_SUB_CODEC_H
#define OUTBOXD_API_SUB_CODEC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/input_error.h"
#include "core/model.h"
#include "core/subscriptions.h"

/* The fields of a subscription document: one row each (sub_fields[], in sub_codec.c)
 * drives the field's parse (its kind, bounds and member of struct subscription), the
 * capability a sink needs to take it (core/sink_caps.h; 422 otherwise), how a read shows
 * it (mask), who may write it, and whether the store keeps it in a column too
 * (sub_codec_columns). tests/unit/core/test_sub_fields.c holds docs/api.md and
 * docs/openapi.json to the table. */
enum sub_field_kind {
	SF_STRING,     /* a string of at most max characters (min 1 when required) */
	SF_DURATION,   /* "500ms", "3s": milliseconds from min to max, into an int64_t */
	SF_INT,        /* an integer from min to max, into an int */
	SF_NUMBER,     /* a number above 0, at most max, into a double */
	SF_BOOL,       /* true or false, into an int */
	SF_ENUM,       /* one of values[], its index into an int (an enum counting from 0 in
	                  the same order) */
	SF_PARSED,     /* its own parse function does it all (v NULL when absent) */
	SF_INSIDE,     /* "retry.timeout": a field inside an object another row parses; a
	                  row for its capability and docs only */
};

/* Who writes a field. */
enum sub_field_writer {
	SF_BY_USER = 0,    /* the API's client */
	SF_BY_ROTATION,    /* outboxd while a secret is rotated: a PATCH may only remove it */
	SF_BY_DISABLING,   /* outboxd when it disables a failing subscription: input may not
	                      set it; enabling clears it */
	SF_BY_DERIVATION,  /* outboxd for a subscription it derives (the Kafka intake's): the
	                      API refuses it */
};

#define SF_REQUIRED 1u  /* absent (or null): 400 (an SF_PARSED row's parse says so) */
#define SF_NULLABLE 2u  /* null is absent (what a PATCH's null leaves) */

struct subscription;
struct sub_row;

struct sub_field {
	const char *key;            /* "timeout"; "retry.timeout" for an SF_INSIDE row */
	enum sub_field_kind kind;
	unsigned flags;             /* SF_REQUIRED, SF_NULLABLE */
	enum sub_field_writer writer;
	int64_t min, max;           /* bounds of its kind (string: max length) */
	const char *what;           /* SF_NUMBER: what it counts; SF_ENUM: a note after the
	                               values; for its message */
	const char *const *values;  /* SF_ENUM: the values, NULL-terminated */
	size_t member;              /* 1 + its offset in struct subscription, 0 = none (the
	                               scalar kinds write it there) */
	size_t column;              /* 1 + its offset in struct sub_row when the store keeps it
	                               in a column too (the claim's SQL reads it), 0 = none */
	unsigned cap;               /* SINK_CAN_* a sink needs to take it, 0 = every sink */
	unsigned (*cap_of)(const json_t *v, unsigned cap); /* the capability the value v
	                               needs, when it depends on the value (auth's type), or 0 */
	const char *mask;           /* a read shows this instead of the value; NULL: as stored */
	/* SF_PARSED: parses v (NULL when absent) into s; other kinds: checks a value their
	 * kind parsed (s has it). NULL: nothing more. 0, or -1 with err filled. */
	int (*parse)(const json_t *doc, const json_t *v, int strict, struct subscription *s,
		     struct input_error *err);
};

extern const struct sub_field sub_fields[];
extern const size_t sub_fields_n;

/* The row of key ("timeout", "retry.timeout"), NULL when none. */
const struct sub_field *sub_field_named(const char *key);

/* Sets row's columns (name, enabled, ordering: the rows with a column) from s; strings
 * borrowed from s. */
void sub_codec_columns(const struct subscription *s, struct sub_row *row);

/* Validates doc (borrowed) and, when out is not NULL, fills *out (members returned to
 * the caller; free with subscription_free semantics). defaults supplies the retry
 * fields the document leaves out. An option the endpoint's sink does not take (auth for
 * kafka://, tls for http://: core/sink_caps.h) is a 422 naming the field. Returns 0, or
 * -1 with err filled. */
int sub_codec_parse(const json_t *doc, const struct retry_policy *defaults,
		    struct subscription *out, struct input_error *err);

/* Builds the subscription struct of a stored row (returned, NULL on a corrupt row,
 * which is logged). A row stored before a rule on new input was added (no control
 * character in a credential or header value, no user info in a URL, no option its
 * endpoint's sink does not take) still loads: one that failed would stop ingest for
 * every subscription; the HTTP sink refuses to send a header line with a control
 * character, and a sink ignores an option it does not take. */
struct subscription *sub_codec_from_row(const struct sub_row *row,
					const struct retry_policy *defaults);

/* The API view of a stored row: the document with id, timestamps, enabled, and every
 * credential and secret masked (returned): auth's credentials, the signing secrets, and
 * the value of every secret header — one written {"value": "...", "secret": true}, and
 * Authorization however it is written. */
json_t *sub_codec_public(const struct sub_row *row);

/* What outboxd itself does to a document from the API before it is validated and stored.
 * Create: input == doc, stored NULL. Patch: input is the patch, doc the merged document,
 * stored the one before (all borrowed; doc is modified in place):
 *  - "secret": "generate" becomes a fresh random whsec_ secret (32 bytes), also put in
 *    *generated (returned to the caller, else NULL) for the one response that shows it;
 *  - a secret sent back masked ("whsec_********") keeps the stored one;
 *  - a changed secret keeps the one before as previous_secret until now_ms +
 *    secret_grace (default 24h; "0s" keeps none); removing the secret removes both;
 *  - previous_secret and previous_secret_expires_at belong to outboxd: input may only
 *    remove them (null in a patch); an expired one is dropped;
 *  - a patch that moves endpoint to another origin (scheme, host, port) gives every
 *    credential of auth and every secret header again in clear, and one that moves
 *    auth.token_url gives client_secret and password again (422 naming the first one
 *    masked or left out): a stored credential never follows a URL to another host;
 *  - tls files must be readable by outboxd and inside tls_dir (borrowed; NULL or "":
 *    none is accepted), symbolic links and ".." resolved (422 otherwise, the same answer
 *    for a missing, unreadable or outside file).
 * Returns 0, or -1 with err filled (and *generated NULL). */
int sub_codec_prepare(json_t *doc, const json_t *input, const json_t *stored, int64_t now_ms,
		      const char *tls_dir, char **generated, struct input_error *err);

/* Applies a PATCH document to a stored one (RFC 7396 merge for objects, null deletes a
 * key; auth is replaced whole, but a credential sent back masked ("********") with the
 * same auth.type keeps the stored one; so does a secret header sent back masked).
 * Returns the merged document (returned), or NULL with err filled. */
json_t *sub_codec_merge(const json_t *stored, const json_t *patch, struct input_error *err);


#endif
