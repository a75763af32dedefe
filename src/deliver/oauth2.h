/* oauth2.h: the OAuth2 client side of deliveries (RFC 6749 client_credentials and password
 * grants) — the per-subscription token cache, its expiry arithmetic, the token request
 * (form body, client authentication) and the token response.
 *
 * Pure logic: no sockets, no curl, no clock reads (callers pass the time). The dispatcher
 * does the I/O in its curl multi and drives the cache:
 *
 *   oauth2_cache_next() == OAUTH2_USE      send with c->token (generation c->generation)
 *                       == OAUTH2_USE_AND_FETCH  the same, and start the one token request
 *                                          (refresh ahead: the token is close to expiry)
 *                       == OAUTH2_FETCH    start the one token request, then wait for it
 *                       == OAUTH2_WAIT     a token request is in flight: wait for it
 *                       == OAUTH2_FAILED   the last request failed moments ago: fail the
 *                                          attempt with c->failure, without a new request
 *   request done  -> oauth2_cache_store() or oauth2_cache_fail(), then every waiter goes on
 *   subscriber 401 -> oauth2_cache_invalidate(generation used), once per attempt
 *
 * Must not: log, or put a credential into anything that can end up in an attempt's cause.
 */
#ifndef OUTBOXD_DELIVER_OAUTH2_H
#define OUTBOXD_DELIVER_OAUTH2_H

#include <stddef.h>
#include <stdint.h>

#include "core/model.h"
#include "util/buf.h"

#define OAUTH2_TOKEN_MAX          8192     /* longest access_token accepted */
#define OAUTH2_RESPONSE_MAX       65536    /* token responses larger than this are refused */
#define OAUTH2_FAILURE_LEN        1024     /* cause text of a failed token request */
#define OAUTH2_MARGIN_MAX_MS      30000    /* refresh at most this long before expiry ... */
#define OAUTH2_MARGIN_PERCENT     10       /* ... or this share of the lifetime, if less */
#define OAUTH2_DEFAULT_LIFETIME_S 300      /* when the response has no expires_in */
#define OAUTH2_FAILURE_HOLD_MS    1000     /* a failure answers attempts this long */

/* The message of an attempt that failed because no token could be had (with code 520). */
#define OAUTH2_FAILED_MESSAGE "oauth2 token request failed"

enum oauth2_step {
	OAUTH2_USE,
	OAUTH2_USE_AND_FETCH,
	OAUTH2_FETCH,
	OAUTH2_WAIT,
	OAUTH2_FAILED,
};

/* One subscription's token. Zero-initialised is a valid empty cache. */
struct oauth2_cache {
	char *token;              /* owned, NUL-terminated; NULL when none */
	int64_t refresh_at_ms;    /* caller's clock: a new token is fetched from then on ... */
	int64_t expires_at_ms;    /* ... and this one is used until then, not after */
	uint64_t generation;      /* of the current token; bumped by every store */
	int fetching;             /* a token request is in flight */
	int64_t failed_until_ms;  /* the failure below answers attempts until then */
	char failure[OAUTH2_FAILURE_LEN];
};

/* Frees and wipes the token; leaves an empty cache. */
void oauth2_cache_clear(struct oauth2_cache *c);

/* What a delivery needing a token does now (see the top of this file). OAUTH2_FETCH and
 * OAUTH2_USE_AND_FETCH set c->fetching: exactly one caller is told to fetch until the
 * result is stored or the failure recorded. While a fetch runs, a token that has not
 * expired yet is still used; only deliveries without one wait. */
enum oauth2_step oauth2_cache_next(struct oauth2_cache *c, int64_t now_ms);

/* When a token that expires in expires_in_s seconds is due for refresh: its lifetime
 * less min(OAUTH2_MARGIN_MAX_MS, OAUTH2_MARGIN_PERCENT % of it). expires_in_s < 0 means
 * the response had none (OAUTH2_DEFAULT_LIFETIME_S); 0 gives now_ms (never reused). */
int64_t oauth2_refresh_at(int64_t now_ms, int64_t expires_in_s);

/* A token arrived: stores token (consumed), ends the fetch, clears any failure. Returns
 * the new generation. */
uint64_t oauth2_cache_store(struct oauth2_cache *c, char *token, int64_t expires_in_s,
			    int64_t now_ms);

/* The token request failed: ends the fetch and keeps cause (borrowed, copied, truncated)
 * to answer attempts for OAUTH2_FAILURE_HOLD_MS. A token that has not expired is kept
 * and still used meanwhile. */
void oauth2_cache_fail(struct oauth2_cache *c, const char *cause, int64_t now_ms);

/* The subscriber refused the token of generation gen (HTTP 401): drops it, unless a newer
 * token has replaced it already. Returns 1 when dropped, 0 otherwise. */
int oauth2_cache_invalidate(struct oauth2_cache *c, uint64_t gen);

/* Equal for equal parameters: a changed token_url, client or credential gets a fresh
 * cache instead of a token obtained with the old ones. */
uint64_t oauth2_params_fingerprint(const struct oauth2_params *p);

/* Does the token request carry an Authorization: Basic header (client_auth "basic" and a
 * client_secret)? Otherwise the client identifies itself in the body. */
int oauth2_uses_basic(const struct oauth2_params *p);

/* The application/x-www-form-urlencoded body of the token request, appended to out
 * (borrowed; give it a cap of a few KiB): grant_type; username and password for the
 * password grant; scope and audience when set; client_id and client_secret unless they
 * travel in the Basic header. Returns 0, or -1 when out is full or memory ran out. */
int oauth2_request_body(const struct oauth2_params *p, struct buf *out);

/* "Basic base64(urlencode(client_id):urlencode(client_secret))" (RFC 6749 §2.3.1) into
 * out (size bytes). Returns 0, or -1 when out is too small. */
int oauth2_basic_header_value(const struct oauth2_params *p, char *out, size_t size);

/* Reads a token endpoint's answer. status is the HTTP status, body (borrowed, len bytes,
 * need not be NUL-terminated) its body. On a 2xx with a usable JSON
 * {"access_token", "token_type"?, "expires_in"?} returns 0 with *token (returned to the
 * caller) and *expires_in_s (-1 when absent). Otherwise returns -1 with a one-line
 * description in why (why_len bytes): the status, and RFC 6749 §5.2 error and
 * error_description when the body has them. */
int oauth2_parse_response(long status, const char *body, size_t len, char **token,
			  int64_t *expires_in_s, char *why, size_t why_len);

#endif
