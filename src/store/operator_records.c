/* operator_records.c: the storage interface's operator records, backend-independent:
 * replay and purge jobs, the audit log, API tokens and the store's facts about itself
 * (store_meta). Checks arguments once for every backend and frees what the readers
 * return, as store.c does for deliveries. No SQL here. */
#include "store/backend.h"

#include <stdlib.h>
#include <string.h>

/* ---- operator jobs and audit -------------------------------------------------------------- */

int store_job_create(store *st, const struct store_job *job)
{
	if (!st || !job || !job->id[0] || !job->filter)
		return STORE_INVALID;
	OPTIONAL_OP(st, job_create);
	return st->methods->job_create(st, job);
}

int store_job_update(store *st, const struct store_job *job)
{
	if (!st || !job || !job->id[0])
		return STORE_INVALID;
	OPTIONAL_OP(st, job_update);
	return st->methods->job_update(st, job);
}

int store_job_get(store *st, const char *id, struct store_job *out)
{
	if (out)
		memset(out, 0, sizeof(*out));
	if (!st || !id || !out)
		return STORE_INVALID;
	OPTIONAL_OP(st, job_get);
	return st->methods->job_get(st, id, out);
}

int store_jobs_running(store *st, struct store_job **items, size_t *n)
{
	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (!st || !items || !n)
		return STORE_INVALID;
	OPTIONAL_OP(st, jobs_running);
	return st->methods->jobs_running(st, items, n);
}

/* Job cursors: "j:<created_at>:<id>" of the last job of the previous page. */
int store_jobs_list(store *st, const char *state, const char *cursor, size_t limit,
		    struct store_job **items, size_t *n, char **next_cursor)
{
	char before_id[UUID_STR_LEN] = "";
	long long before_at = 0;
	int rc;

	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (next_cursor)
		*next_cursor = NULL;
	if (!st || !items || !n || !next_cursor || limit < 1 || limit > STORE_MAX_PAGE)
		return STORE_INVALID;
	if (cursor && store_newest_cursor_parse(cursor, 'j', &before_at, before_id))
		return STORE_INVALID;
	OPTIONAL_OP(st, jobs_list);
	/* One more than asked: whether a next page exists. */
	rc = st->methods->jobs_list(st, state, before_at, cursor ? before_id : NULL, limit + 1, items,
				n);
	if (rc != STORE_OK || *n <= limit)
		return rc;
	const struct store_job *last = &(*items)[limit - 1];
	if (!(*next_cursor = store_newest_cursor('j', last->created_at, last->id))) {
		store_jobs_free(*items, *n);
		*items = NULL;
		*n = 0;
		return STORE_ERROR;
	}
	store_job_free(&(*items)[limit]);
	*n = limit;
	return STORE_OK;
}

void store_job_free(struct store_job *job)
{
	if (!job)
		return;
	free(job->filter);
	free(job->cursor);
	free(job->actor);
	free(job->error);
	memset(job, 0, sizeof(*job));
}

void store_jobs_free(struct store_job *items, size_t n)
{
	if (!items)
		return;
	for (size_t i = 0; i < n; i++)
		store_job_free(&items[i]);
	free(items);
}

int store_audit_append(store *st, const struct store_audit *a)
{
	if (!st || !a || !a->id[0] || !a->actor || !a->action)
		return STORE_INVALID;
	OPTIONAL_OP(st, audit_append);
	return st->methods->audit_append(st, a);
}

int store_audit_list(store *st, const char *before_id, size_t limit, struct store_audit **items,
		     size_t *n)
{
	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (!st || !items || !n || limit < 1 || limit > STORE_MAX_PAGE + 1)
		return STORE_INVALID;
	OPTIONAL_OP(st, audit_list);
	return st->methods->audit_list(st, before_id, limit, items, n);
}

void store_audits_free(struct store_audit *items, size_t n)
{
	if (!items)
		return;
	for (size_t i = 0; i < n; i++) {
		free(items[i].actor);
		free(items[i].action);
		free(items[i].target);
		free(items[i].detail);
	}
	free(items);
}

/* ---- API tokens --------------------------------------------------------------------------- */

int store_token_create(store *st, const struct store_token *t)
{
	if (!st || !t || !t->id[0] || !t->name || !t->scopes || strlen(t->hash) != 64 ||
	    t->expires_at < 0)
		return STORE_INVALID;
	OPTIONAL_OP(st, token_create);
	return st->methods->token_create(st, t);
}

int store_token_delete(store *st, const char *id)
{
	if (!st || !id)
		return STORE_INVALID;
	OPTIONAL_OP(st, token_delete);
	return st->methods->token_delete(st, id);
}

int store_token_touch(store *st, const char *id, int64_t at_ms)
{
	if (!st || !id || at_ms <= 0)
		return STORE_INVALID;
	OPTIONAL_OP(st, token_touch);
	return st->methods->token_touch(st, id, at_ms);
}

int store_meta_get(store *st, const char *name, struct store_meta_value *out)
{
	if (!st || !name || !out)
		return STORE_INVALID;
	OPTIONAL_OP(st, meta_get);
	return st->methods->meta_get(st, name, out);
}

int store_meta_swap(store *st, const char *name, const char *expect, const char *value,
		    struct store_meta_value *found)
{
	struct store_meta_value now;

	if (!st || !name || !value || strlen(value) >= sizeof(now.value))
		return STORE_INVALID;
	OPTIONAL_OP(st, meta_swap);
	int rc = st->methods->meta_swap(st, name, expect, value);
	if (rc != STORE_NOT_FOUND)
		return rc;
	/* not what was expected: say what it is (absent reads as "") */
	rc = store_meta_get(st, name, &now);
	if (rc == STORE_NOT_FOUND) {
		now.value[0] = '\0';
		rc = STORE_OK;
	}
	if (rc != STORE_OK)
		return rc;
	if (found)
		*found = now;
	return STORE_CONFLICT;
}

int store_token_list(store *st, struct store_token **items, size_t *n)
{
	if (items)
		*items = NULL;
	if (n)
		*n = 0;
	if (!st || !items || !n)
		return STORE_INVALID;
	OPTIONAL_OP(st, token_list);
	return st->methods->token_list(st, items, n);
}

void store_tokens_free(struct store_token *items, size_t n)
{
	if (!items)
		return;
	for (size_t i = 0; i < n; i++) {
		free(items[i].name);
		free(items[i].scopes);
		free(items[i].actor);
	}
	free(items);
}
