/* routes_subs.c: subscriptions — create, list, get, patch, delete. Credentials and
 * signing secrets are stored as given (sealed at rest by the store) and never returned in
 * clear (sub_codec_public), except a secret outboxd generated, shown once in the response
 * that created it. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "core/sub_codec.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/uuid.h"

static json_t *parse_body(const struct api_request *req, struct api_response *res)
{
	json_error_t jerr;
	json_t *doc = json_loadb(req->body ? req->body : "", req->body_len,
				 JSON_REJECT_DUPLICATES, &jerr);
	if (!doc)
		api_reply_errorf(res, 400, "invalid_json", NULL,
				 "the body is not valid JSON: %s (line %d, column %d)", jerr.text,
				 jerr.line, jerr.column);
	return doc;
}

/* After any change the in-memory set gets that subscription as stored now, so fan-out
 * and the dispatcher see it before the answer goes out. */
static void reload(struct api *api, const char *id)
{
	int rc = store_subs_load_one(api->st, api->reg, &api->retry_defaults, id);
	if (rc)
		log_error("subscriptions: reload failed: %s", store_strerror(rc));
}

/* generated (borrowed, may be NULL): a secret outboxd just generated, shown this once. */
static void reply_row(struct api *api, const char *id, int status, const char *generated,
		      struct api_response *res)
{
	struct sub_row row;
	int rc = store_sub_get(api->st, id, &row);
	if (rc) {
		api_reply_store_error(res, rc, "subscription");
		return;
	}
	json_t *view = sub_codec_public(&row);
	if (generated)
		json_object_set_new(view, "secret", json_string(generated));
	api_reply_json(res, status, view);
	store_sub_free(&row);
}

static int store_doc(struct api *api, json_t *doc, struct sub_row *row, int create,
		     struct api_response *res)
{
	struct input_error err;
	struct subscription parsed;
	if (sub_codec_parse(doc, &api->retry_defaults, &parsed, &err)) {
		api_reply_error(res, &err);
		return -1;
	}
	sub_codec_columns(&parsed, row);
	row->config = json_dumps(doc, JSON_COMPACT);
	row->updated_at = clock_now_ms();
	int rc = row->config ? (create ? store_sub_create(api->st, row) : store_sub_update(api->st, row))
			     : STORE_ERROR;
	if (rc == STORE_CONFLICT)
		api_reply_errorf(res, 409, "conflict", "name",
				 "a subscription named \"%s\" already exists", parsed.name);
	else if (rc)
		api_reply_store_error(res, rc, "subscription");
	free(row->config);
	row->config = NULL;
	row->name = NULL;
	struct subscription *heap = malloc(sizeof(*heap));
	if (heap) {
		*heap = parsed;
		subscription_free(heap);
	}
	return rc ? -1 : 0;
}

void api_subs_create(struct api *api, const struct api_request *req, struct api_response *res)
{
	json_t *doc = parse_body(req, res);
	if (!doc)
		return;
	struct sub_row row = {0};
	struct input_error err;
	char *generated = NULL;
	uuid_v7(row.id);
	row.created_at = clock_now_ms();
	if (sub_codec_prepare(doc, doc, NULL, row.created_at, api->tls_dir, &generated, &err)) {
		api_reply_error(res, &err);
	} else if (store_doc(api, doc, &row, 1, res) == 0) {
		reload(api, row.id);
		api_audit(api, req, "subscription.create", row.id, 1, NULL);
		reply_row(api, row.id, 201, generated, res);
	}
	free(generated);
	json_decref(doc);
}

#define SUBS_PAGE_DEFAULT 100
#define SUBS_PAGE_MAX 1000
#define SUBS_NAME_QUERY_MAX 1000 /* bytes of ?name= (exact or a glob) */

#define SUBS_IDS_MAX 100

/* id=ID,ID,...: those subscriptions (an id of none is left out), in the order named,
 * each once. */
static int subs_by_id(struct api *api, const struct api_request *req, struct api_response *res,
		      struct sub_row **rows, size_t *n)
{
	char (*ids)[UUID_STR_LEN];
	size_t n_ids;
	int rc = STORE_OK;

	if (api_query_ids(req, "id", SUBS_IDS_MAX, &ids, &n_ids, res))
		return -1;
	*rows = calloc(n_ids, sizeof(**rows));
	*n = 0;
	if (!*rows) {
		free(ids);
		api_reply_errorf(res, 500, "internal", NULL, "out of memory");
		return -1;
	}
	for (size_t i = 0; rc == STORE_OK && i < n_ids; i++) {
		int seen = 0;
		for (size_t k = 0; k < i && !seen; k++)
			seen = strcmp(ids[k], ids[i]) == 0;
		if (seen)
			continue;
		rc = store_sub_get(api->st, ids[i], &(*rows)[*n]);
		if (rc == STORE_OK)
			(*n)++;
		else if (rc == STORE_NOT_FOUND)
			rc = STORE_OK;
	}
	free(ids);
	if (rc) {
		store_subs_free(*rows, *n);
		*rows = NULL;
		*n = 0;
		api_reply_store_error(res, rc, "subscriptions");
		return -1;
	}
	return 0;
}

/* Every subscription when the request names neither limit, cursor, name nor id (as before
 * paging existed: scripts that read the whole list keep working), else one page, or the
 * subscriptions id= names. */
void api_subs_list(struct api *api, const struct api_request *req, struct api_response *res)
{
	const char *cursor = api_query_get(req, "cursor");
	const char *name = api_query_get(req, "name");
	struct sub_row *rows = NULL;
	size_t n = 0;
	char *next = NULL;
	long limit = 0;
	int rc;

	if (api_query_get(req, "id")) {
		if (cursor || name || api_query_get(req, "limit")) {
			api_reply_errorf(res, 400, "invalid_argument", "id",
					 "id does not combine with limit, cursor or name");
			return;
		}
		if (subs_by_id(api, req, res, &rows, &n))
			return;
		rc = STORE_OK;
	} else if (cursor || name || api_query_get(req, "limit")) {
		if (api_query_int(req, "limit", SUBS_PAGE_DEFAULT, 1, SUBS_PAGE_MAX, &limit, res))
			return;
		/* a name is at most 200 characters: 4 bytes each at most, and a glob's
		 * wildcards beside them */
		if (name && strlen(name) > SUBS_NAME_QUERY_MAX) {
			api_reply_errorf(res, 400, "invalid_argument", "name",
					 "name is longer than %d bytes, and no subscription's is",
					 SUBS_NAME_QUERY_MAX);
			return;
		}
		rc = store_sub_page(api->st, cursor, name, (size_t)limit, &rows, &n, &next);
		if (rc == STORE_INVALID && cursor) {
			api_reply_errorf(res, 400, "invalid_argument", "cursor",
					 "cursor is not one this server returned for /v1/subscriptions");
			return;
		}
	} else {
		rc = store_sub_list(api->st, &rows, &n);
	}
	if (rc) {
		api_reply_store_error(res, rc, "subscriptions");
		return;
	}
	json_t *items = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(items, sub_codec_public(&rows[i]));
	store_subs_free(rows, n);
	api_reply_json(res, 200, json_pack("{s:o, s:o}", "items", items, "next_cursor",
					   next ? json_string(next) : json_null()));
	free(next);
}

void api_subs_get(struct api *api, const char *id, struct api_response *res)
{
	reply_row(api, id, 200, NULL, res);
}

void api_subs_patch(struct api *api, const char *id, const struct api_request *req,
		    struct api_response *res)
{
	struct sub_row row;
	struct input_error err;
	json_error_t jerr;

	json_t *patch = parse_body(req, res);
	if (!patch)
		return;
	int rc = store_sub_get(api->st, id, &row);
	if (rc) {
		api_reply_store_error(res, rc, "subscription");
		json_decref(patch);
		return;
	}
	char *generated = NULL;
	json_t *stored = json_loads(row.config, 0, &jerr);
	json_t *merged = stored ? sub_codec_merge(stored, patch, &err) : NULL;
	if (!merged) {
		if (stored)
			api_reply_error(res, &err);
		else
			api_reply_errorf(res, 500, "internal", NULL, "stored subscription is corrupt");
	} else if (sub_codec_prepare(merged, patch, stored, clock_now_ms(), api->tls_dir,
				     &generated, &err)) {
		api_reply_error(res, &err);
	} else {
		char *keep_name = row.name;
		char *keep_config = row.config;
		if (store_doc(api, merged, &row, 0, res) == 0) {
			reload(api, id);
			api_audit(api, req, "subscription.update", id, 1, NULL);
			reply_row(api, id, 200, generated, res);
		}
		row.name = keep_name;
		row.config = keep_config;
	}
	free(generated);
	json_decref(merged);
	json_decref(stored);
	json_decref(patch);
	store_sub_free(&row);
}

void api_subs_delete(struct api *api, const char *id, const struct api_request *req,
		     struct api_response *res)
{
	int rc = store_sub_delete(api->st, id);
	if (rc) {
		api_reply_store_error(res, rc, "subscription");
		return;
	}
	reload(api, id);
	api_audit(api, req, "subscription.delete", id, 1, NULL);
	res->status = 204;
	res->body = NULL;
}
