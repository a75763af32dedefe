/* sub_codec.h: subscriptions between JSON and struct subscription.
 *
 * The stored configuration is the JSON document the API accepted; this file validates it
 * (every field named in the error), turns it into the struct the dispatcher uses, and
 * renders the public view with credentials masked. */
#ifndef OUTBOXD_API_SUB_CODEC_H
#define OUTBOXD_API_SUB_CODEC_H

#include <jansson.h>

#include "core/input_error.h"
#include "core/model.h"
#include "core/subscriptions.h"

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
