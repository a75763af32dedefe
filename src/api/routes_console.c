/* routes_console.c: serves the operator console (docs/console.md) from the files
 * embedded at build time (console_assets.h): /console and /console/ are index.html,
 * /console/PATH one file. No token: these are static files; every API call the console
 * makes carries the operator's bearer token.
 *
 * Each answer carries a strict Content-Security-Policy (nothing but this origin, no
 * inline script or style, no eval), an ETag with Cache-Control: no-cache (the browser
 * revalidates, so an upgrade is seen at once; an unchanged file costs a 304). Must not
 * read the store or the request body. */
#include <string.h>

#include "api/api.h"
#include "api/console_assets.h"

#define CONSOLE_CSP \
	"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " \
	"font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; " \
	"form-action 'self'; frame-ancestors 'none'"

static const struct console_asset *find_asset(const char *rel)
{
	for (unsigned long i = 0; i < console_assets_n; i++)
		if (strcmp(console_assets[i].path, rel) == 0)
			return &console_assets[i];
	return NULL;
}

/* If-None-Match may list several tags, or be "*". */
static int etag_matches(const char *header, const char *etag)
{
	if (!header)
		return 0;
	if (strcmp(header, "*") == 0)
		return 1;
	size_t len = strlen(etag);
	for (const char *p = header; (p = strstr(p, etag)); p += len) {
		char after = p[len];
		if (after == '\0' || after == ',' || after == ' ')
			return 1;
	}
	return 0;
}

int api_console(const struct api_request *req, struct api_response *res)
{
	const char *path = req->path;
	const char *rel;

	if (strcmp(path, "/console") == 0 || strcmp(path, "/console/") == 0)
		rel = "index.html";
	else if (strncmp(path, "/console/", 9) == 0)
		rel = path + 9;
	else
		return 0;

	res->csp = CONSOLE_CSP;
	res->body = NULL;
	if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0) {
		api_reply_errorf(res, 405, "method_not_allowed", NULL, "allowed methods: GET, HEAD");
		return 1;
	}
	const struct console_asset *a = find_asset(rel);
	if (!a) {
		api_reply_errorf(res, 404, "not_found", NULL, "no console file %s", path);
		return 1;
	}
	res->etag = a->etag;
	res->cache_control = "no-cache";
	if (etag_matches(req->if_none_match, a->etag)) {
		res->status = 304;
		return 1;
	}
	res->status = 200;
	res->content_type = a->content_type;
	res->static_body = a->data;
	res->static_len = a->len;
	return 1;
}
