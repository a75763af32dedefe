/* http_token.c: OAuth2 token requests of the HTTP sink (oauth2.h has the cache rules):
 * one request per subscription however many deliveries wait for it, run in the sink's
 * own curl multi; the waiting rounds go on when it ends. A subscriber's 401 gets one new
 * token and one resend within the same attempt (http_authorize).
 *
 * Must not put a credential into a cause or a log line (the token request's form body
 * is wiped when freed). */
#include "deliver/sink_http_int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "core/retry.h"
#include "core/trace.h"
#include "deliver/sign.h"
#include "util/clock.h"
#include "util/log.h"

/* ---- oauth2 tokens ------------------------------------------------------------------------ */

static struct oauth2_entry *oauth_entry_get(struct http_sink *hs, const struct subscription *s)
{
	uint64_t fp = oauth2_params_fingerprint(&s->oauth2);
	for (struct oauth2_entry *e = hs->oauth; e; e = e->next)
		if (e->fingerprint == fp && strcmp(e->sub_id, s->id) == 0)
			return e;
	struct oauth2_entry *e = calloc(1, sizeof(*e));
	if (!e)
		return NULL;
	memcpy(e->sub_id, s->id, UUID_STR_LEN);
	e->fingerprint = fp;
	e->next = hs->oauth;
	hs->oauth = e;
	return e;
}

static void token_fetch_free(struct token_fetch *f)
{
	if (!f)
		return;
	if (f->easy)
		curl_easy_cleanup(f->easy);
	curl_slist_free_all(f->headers); /* the Basic line is wiped before this (start) */
	curl_slist_free_all(f->connect_to);
	if (f->form.data)
		OPENSSL_cleanse(f->form.data, f->form.len);
	buf_free(&f->form);
	if (f->response.data)
		OPENSSL_cleanse(f->response.data, f->response.len); /* may echo the request */
	buf_free(&f->response);
	redact_clear(&f->redact);
	free(f->entry_url);
	free(f);
}

/* Stops the entry's token request, if any (shutdown). */
void http_token_abort(struct http_sink *hs, struct oauth2_entry *e)
{
	if (!e->fetch)
		return;
	if (e->fetch->pwait.lookup)
		http_proxy_wait_cancel(hs, &e->fetch->pwait);
	else
		curl_multi_remove_handle(hs->multi, e->fetch->easy);
	token_fetch_free(e->fetch);
	e->fetch = NULL;
	e->cache.fetching = 0;
	hs->token_fetches--;
}

static size_t token_body_cb(char *data, size_t size, size_t nmemb, void *ctx)
{
	struct token_fetch *f = ctx;
	if (buf_append(&f->response, data, size * nmemb)) {
		f->too_big = 1;
		return 0; /* curl stops with CURLE_WRITE_ERROR */
	}
	return size * nmemb;
}

static void token_end(struct http_sink *hs, struct token_fetch *f, CURLcode rc);

/* The lookup a token request behind the egress proxy waited for ended
 * (proxy_wait.resume): it goes to the multi, or ends as a failed request. */
static void token_resumed(struct http_sink *hs, struct proxy_wait *w, enum transport_error te,
			  const char *failure)
{
	struct token_fetch *f = (struct token_fetch *)((char *)w - offsetof(struct token_fetch, pwait));
	char why[160];
	if (failure) {
		snprintf(f->errbuf, sizeof(f->errbuf), "%s", failure);
		token_end(hs, f, te == TRANSPORT_DNS ? CURLE_COULDNT_RESOLVE_HOST : CURLE_COULDNT_CONNECT);
		return;
	}
	switch (http_proxy_prepare(hs, f->easy, f->entry_url, &f->guard, &f->connect_to, w, why,
				   sizeof(why))) {
	case PROXY_GO:
		if (curl_multi_add_handle(hs->multi, f->easy) == CURLM_OK)
			return;
		snprintf(f->errbuf, sizeof(f->errbuf), "the token request could not be started");
		token_end(hs, f, CURLE_FAILED_INIT);
		return;
	case PROXY_WAIT:
		return;
	case PROXY_REFUSED:
		token_end(hs, f, CURLE_COULDNT_CONNECT); /* f->guard.refused says why */
		return;
	case PROXY_FAILED:
		snprintf(f->errbuf, sizeof(f->errbuf), "%s", why);
		token_end(hs, f, CURLE_FAILED_INIT);
		return;
	}
}

/* Starts the token request of e with the parameters of s (borrowed; everything needed
 * later is copied). On failure the cache records it and e->fetch stays NULL (and
 * e->refused is set when the SSRF guard refused the token endpoint). */
static void token_fetch_start(struct http_sink *hs, struct oauth2_entry *e,
			      const struct subscription *s, int64_t timeout_ms)
{
	const struct oauth2_params *p = &s->oauth2;
	struct token_fetch *f = calloc(1, sizeof(*f));
	const char *why = "out of memory";
	char line[6200], cause[OAUTH2_FAILURE_LEN];
	struct curl_slist *h;

	if (!f)
		goto fail;
	f->transfer = TRANSFER_TOKEN;
	f->entry = e;
	buf_init(&f->form, TOKEN_FORM_MAX);
	buf_init(&f->response, OAUTH2_RESPONSE_MAX);
	snprintf(f->url_shown, sizeof(f->url_shown), "%.*s", (int)strcspn(p->token_url, "?#"),
		 p->token_url);
	if (redact_add_oauth2(&f->redact, p))
		goto fail;
	if (oauth2_request_body(p, &f->form)) {
		why = "the token request body is too large";
		goto fail;
	}
	static const char *const fixed[] = {
		"Content-Type: application/x-www-form-urlencoded", "Accept: application/json",
		"User-Agent: outboxd/0.1", "Expect:", NULL,
	};
	for (const char *const *l = fixed; *l; l++) {
		if (!(h = curl_slist_append(f->headers, *l)))
			goto fail;
		f->headers = h;
	}
	if (oauth2_uses_basic(p)) {
		memcpy(line, "Authorization: ", 15);
		int bad = oauth2_basic_header_value(p, line + 15, sizeof(line) - 15);
		h = bad ? NULL : curl_slist_append(f->headers, line);
		OPENSSL_cleanse(line, sizeof(line));
		if (!h) {
			why = bad ? "client_id and client_secret are too long" : "out of memory";
			goto fail;
		}
		f->headers = h;
	}
	if (!(f->easy = curl_easy_init())) {
		why = "curl_easy_init failed";
		goto fail;
	}
	CURL *c = f->easy;
	if (!(f->entry_url = strdup(p->token_url)))
		goto fail;
	curl_easy_setopt(c, CURLOPT_URL, f->entry_url);
	f->guard.policy = hs->ssrf;
	http_easy_common(hs, c, f, f->errbuf, token_body_cb, &f->guard);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, f->form.data);
	curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)f->form.len);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, f->headers);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
	e->refused = 0;
	if (hs->proxy) {
		char pwhy[160];
		switch (http_proxy_prepare(hs, c, f->entry_url, &f->guard, &f->connect_to, &f->pwait,
					   pwhy, sizeof(pwhy))) {
		case PROXY_GO:
			break;
		case PROXY_WAIT:
			f->pwait.resume = token_resumed;
			e->fetch = f;
			hs->token_fetches++;
			return;
		case PROXY_REFUSED:
			snprintf(cause, sizeof(cause), "%s: the SSRF guard refused to connect to %s; "
				 "an operator can allow it with the ssrf_allow setting", f->url_shown,
				 f->guard.refused);
			e->refused = 1;
			token_fetch_free(f);
			oauth2_cache_fail(&e->cache, cause, clock_mono_ms());
			return;
		case PROXY_FAILED:
			snprintf(cause, sizeof(cause), "%s: %s", f->url_shown, pwhy);
			token_fetch_free(f);
			oauth2_cache_fail(&e->cache, cause, clock_mono_ms());
			return;
		}
	}
	CURLMcode mrc = curl_multi_add_handle(hs->multi, c);
	if (mrc != CURLM_OK) {
		why = curl_multi_strerror(mrc);
		goto fail;
	}
	e->fetch = f;
	hs->token_fetches++;
	return;
fail:
	snprintf(cause, sizeof(cause), "%s: %s", f ? f->url_shown : "token request", why);
	token_fetch_free(f);
	oauth2_cache_fail(&e->cache, cause, clock_mono_ms());
}

static void http_token_failed(struct http_round *h, const char *cause)
{
	http_failed(h, errmap_code(TRANSPORT_OTHER), OAUTH2_FAILED_MESSAGE, cause);
}

/* Gets the attempt its credentials: at once for every auth type but oauth2, whose
 * deliveries use the cached token, start the one token request, or wait for it. */
void http_authorize(struct http_round *h)
{
	struct http_sink *hs = h->hs;
	if (h->sj->sub->auth_type != AUTH_OAUTH2) {
		http_send_request(h, NULL);
		return;
	}
	struct oauth2_entry *e = h->oauth = oauth_entry_get(hs, h->sj->sub);
	if (!e) {
		http_token_failed(h, "out of memory");
		return;
	}
	int64_t now = clock_mono_ms();
	e->last_used_ms = now;
	enum oauth2_step step = oauth2_cache_next(&e->cache, now);
	if (step == OAUTH2_FETCH || step == OAUTH2_USE_AND_FETCH)
		token_fetch_start(hs, e, h->sj->sub, h->sj->timeout_ms);
	switch (step) {
	case OAUTH2_USE:
	case OAUTH2_USE_AND_FETCH:
		h->token_gen = e->cache.generation;
		http_send_request(h, e->cache.token);
		return;
	case OAUTH2_FETCH:
		if (!e->fetch) { /* it could not even start */
			h->sj->permanent = e->refused;
			http_token_failed(h, e->cache.failure);
			return;
		}
		/* fall through */
	case OAUTH2_WAIT:
		h->state = HTTP_TOKEN_WAIT;
		h->next = e->waiters;
		e->waiters = h;
		return;
	case OAUTH2_FAILED:
		http_token_failed(h, e->cache.failure);
		return;
	}
}

/* Why the token endpoint's answer (f->response, status) gave no token, into why. The
 * answer may quote the request (an endpoint that echoes it in its error): what is
 * quoted of it is taken from a copy with the request's credentials redacted first, so
 * no cut of the quote can leave a piece of one. */
static void answer_refused(struct token_fetch *f, long status, char *why, size_t whylen)
{
	char detail[512], *token = NULL;
	int64_t expires_in;
	size_t len = f->response.len, cap = 8 * len + 1; /* a mask may be 8 times a match */
	char *clean = malloc(cap);

	if (clean)
		len = redact_copy(&f->redact, f->response.data ? f->response.data : "", len, clean,
				  cap);
	if (!clean) {
		snprintf(why, whylen, "%s: token endpoint answered HTTP %ld (out of memory to "
			 "say more)", f->url_shown, status);
		return;
	}
	oauth2_parse_response(status, clean, len, &token, &expires_in, detail, sizeof(detail));
	snprintf(why, whylen, "%s: %s", f->url_shown, token ? "token response was refused" : detail);
	if (token) { /* the redacted copy parsed where the answer did not: keep neither */
		OPENSSL_cleanse(token, strlen(token));
		free(token);
	}
	OPENSSL_cleanse(clean, cap);
	free(clean);
}

void http_token_done(struct http_sink *hs, struct token_fetch *f, CURLcode rc)
{
	curl_multi_remove_handle(hs->multi, f->easy);
	token_end(hs, f, rc);
}

/* A token request ended (its handle out of the multi, or never in it): cache the token
 * or the failure, then every delivery that waited for it goes on. */
static void token_end(struct http_sink *hs, struct token_fetch *f, CURLcode rc)
{
	struct oauth2_entry *e = f->entry;
	char why[OAUTH2_FAILURE_LEN], detail[512];
	char *token = NULL;
	int64_t expires_in = -1;
	long status = 0;

	hs->token_fetches--;
	e->fetch = NULL;
	if (rc != CURLE_OK && f->too_big) {
		snprintf(why, sizeof(why), "%s: token response over %d bytes", f->url_shown,
			 OAUTH2_RESPONSE_MAX);
	} else if (rc != CURLE_OK && f->guard.refused[0]) {
		snprintf(why, sizeof(why), "%s: the SSRF guard refused to connect to %s; an "
			 "operator can allow it with the ssrf_allow setting", f->url_shown,
			 f->guard.refused);
	} else if (rc != CURLE_OK) {
		enum transport_error te = http_classify(rc, f->errbuf);
		snprintf(why, sizeof(why), "%s: %s: %s", f->url_shown, errmap_message(te),
			 f->errbuf[0] ? f->errbuf : curl_easy_strerror(rc));
	} else {
		curl_easy_getinfo(f->easy, CURLINFO_RESPONSE_CODE, &status);
		if (oauth2_parse_response(status, f->response.data ? f->response.data : "",
					  f->response.len, &token, &expires_in, detail,
					  sizeof(detail)))
			answer_refused(f, status, why, sizeof(why));
	}
	int64_t now = clock_mono_ms();
	if (token) {
		oauth2_cache_store(&e->cache, token, expires_in, now);
		if (e->failing)
			log_info("subscription %s: oauth2 token request works again", e->sub_id);
		e->failing = 0;
	} else {
		redact_apply(&f->redact, why, sizeof(why));
		oauth2_cache_fail(&e->cache, why, now);
		if (!e->failing)
			log_warn("subscription %s: oauth2 token request failed: %s", e->sub_id, why);
		e->failing = 1;
	}
	int ssrf_refused_token = f->guard.refused[0] != '\0';
	e->refused = !token && rc != CURLE_OK && ssrf_refused_token;
	token_fetch_free(f);

	struct http_round *w = e->waiters;
	e->waiters = NULL;
	while (w) {
		struct http_round *next = w->next;
		if (token) {
			/* straight from the cache, even when expires_in made it not reusable */
			w->token_gen = e->cache.generation;
			http_send_request(w, e->cache.token);
		} else {
			w->sj->permanent = rc != CURLE_OK && ssrf_refused_token;
			http_token_failed(w, e->cache.failure);
		}
		w = next;
	}
}

/* Drops token caches nobody used for OAUTH_IDLE_MS (deleted or changed subscriptions). A
 * round holds its entry for one request at most (timeouts <= 5 min), far less than that. */
void http_tokens_prune(struct http_sink *hs, int64_t now_ms)
{
	struct oauth2_entry **pp = &hs->oauth;
	while (*pp) {
		struct oauth2_entry *e = *pp;
		if (!e->fetch && !e->waiters && now_ms - e->last_used_ms > OAUTH_IDLE_MS) {
			*pp = e->next;
			oauth2_cache_clear(&e->cache);
			free(e);
		} else {
			pp = &e->next;
		}
	}
}