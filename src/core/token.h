/* token.h: API tokens and their scopes. One place for what a scope grants,
 * how scopes are written (JSON lists in the API, "a,b" text in the store) and how a token
 * is made and hashed; the router and the token routes only call these. */
#ifndef OUTBOXD_CORE_TOKEN_H
#define OUTBOXD_CORE_TOKEN_H

#include <jansson.h>
#include <stddef.h>

#include "core/input_error.h"

/* What a token may do; a route needs one of these (api/router.c's table). */
enum token_scope {
	TOKEN_SCOPE_INGEST = 1,   /* POST /v1/events */
	TOKEN_SCOPE_READ = 2,     /* every GET */
	TOKEN_SCOPE_OPERATE = 4,  /* read + replay, purge, jobs */
	TOKEN_SCOPE_ADMIN = 8,    /* everything, tokens and subscriptions included */
};
#define TOKEN_SCOPE_ALL 15u

#define TOKEN_LEN 52              /* "obx_" + 48 hex digits */
#define TOKEN_PREFIX_LEN 8        /* what GET /v1/tokens shows of a token: "obx_1a2b" */
#define TOKEN_NAME_MAX 64

/* The scopes a set of scopes grants: admin grants all, operate grants read too. */
unsigned token_scope_grants(unsigned scopes);

/* The name of one scope bit ("operate"), or "?" */
const char *token_scope_name(unsigned scope);

/* Parses the API's "scopes": a non-empty array of scope names. Returns 0 with *out set,
 * or -1 with err naming the field ("scopes", "scopes[2]"). */
int token_scopes_from_json(const json_t *v, unsigned *out, struct input_error *err);

/* The store's text form "ingest,read" <-> a mask. from_text returns -1 on an unknown
 * name or an empty list. */
void token_scopes_to_text(unsigned scopes, char *out, size_t outlen);
int token_scopes_from_text(const char *text, unsigned *out);

/* A JSON array of the scope names in scopes (returned). */
json_t *token_scopes_json(unsigned scopes);

/* A name is 1..TOKEN_NAME_MAX of [A-Za-z0-9._-]: it stands in the audit log as the actor.
 * Returns 1 when valid. */
int token_name_valid(const char *name);

/* A fresh token, "obx_" + 48 random hex digits, into out (TOKEN_LEN + 1 bytes). Returns 0,
 * or -1 when the random source fails. */
int token_generate(char out[TOKEN_LEN + 1]);

/* The hex SHA-256 of a token: what the store keeps instead of the token. */
void token_hash(const char *token, size_t len, char out[65]);

#endif
