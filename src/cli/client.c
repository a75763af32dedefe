/* client.c: the CLI's side of the HTTP API: one call (call: the token, the answer's
 * JSON, exit codes for API errors and unreachable servers), lists followed page by page,
 * a subscription's or token's name resolved to its id, and the delivery lists and
 * delivery view that several command groups print. The commands are in cli.c. */
#include "cli/cli_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "core/model.h"
#include "util/buf.h"
#include "util/duration.h"
#include "util/uuid.h"

/* ---- HTTP ------------------------------------------------------------------------------ */

static size_t write_cb(char *p, size_t size, size_t n, void *ctx)
{
	return buf_append(ctx, p, size * n) ? 0 : size * n;
}

/* One API call. *out receives the parsed JSON answer (NULL for none). Returns CLI_OK,
 * CLI_API_ERROR (after printing the API's error) or CLI_UNREACHABLE. */
int call(struct cli *c, const char *method, const char *path, const char *body,
		json_t **out)
{
	char url[2048], auth[1024];
	struct buf resp;
	struct curl_slist *h = NULL;
	long status = 0;
	int rc = CLI_OK;

	*out = NULL;
	buf_init(&resp, SIZE_MAX);
	snprintf(url, sizeof(url), "%s%s", c->url, path);
	CURL *e = curl_easy_init();
	if (!e)
		return CLI_UNREACHABLE;
	if (c->token) {
		snprintf(auth, sizeof(auth), "Authorization: Bearer %s", c->token);
		h = curl_slist_append(h, auth);
	}
	if (body)
		h = curl_slist_append(h, "Content-Type: application/json");
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, write_cb);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &resp);
	curl_easy_setopt(e, CURLOPT_TIMEOUT, 120L);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	/* An API serving a certificate of a private CA (tls_cert): OUTBOXD_CA_FILE names it;
	 * verification stays on. */
	if (getenv("OUTBOXD_CA_FILE"))
		curl_easy_setopt(e, CURLOPT_CAINFO, getenv("OUTBOXD_CA_FILE"));
	if (body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
	}
	CURLcode cc = curl_easy_perform(e);
	if (cc != CURLE_OK) {
		fprintf(stderr, "outboxd: cannot reach %s: %s\n", c->url, curl_easy_strerror(cc));
		rc = CLI_UNREACHABLE;
		goto done;
	}
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
	json_t *j = resp.len ? json_loadb(resp.data, resp.len, 0, NULL) : NULL;
	if (status >= 400) {
		json_t *err = json_object_get(j, "error");
		const char *msg = json_string_value(json_object_get(err, "message"));
		const char *field = json_string_value(json_object_get(err, "field"));
		if (c->json && resp.data)
			printf("%s\n", resp.data);
		fprintf(stderr, "outboxd: %ld %s%s%s%s\n", status,
			msg ? msg : (resp.data ? resp.data : ""), field ? " (field " : "",
			field ? field : "", field ? ")" : "");
		json_decref(j);
		rc = CLI_API_ERROR;
		goto done;
	}
	*out = j;
done:
	buf_free(&resp);
	curl_slist_free_all(h);
	curl_easy_cleanup(e);
	return rc;
}

void print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_ENCODE_ANY);
	if (s)
		printf("%s\n", s);
	free(s);
}

/* GET path's {"items":[...]}: the JSON with --json, else header and a row each. */
int print_list(struct cli *c, const char *path, const char *header, void (*row)(json_t *))
{
	json_t *r, *item;
	size_t i;
	int rc = call(c, "GET", path, NULL, &r);
	if (rc)
		return rc;
	if (c->json) {
		print_json(r);
	} else {
		fputs(header, stdout);
		json_array_foreach(json_object_get(r, "items"), i, item)
			row(item);
	}
	json_decref(r);
	return CLI_OK;
}

/* Every page of a list (defined with the list commands below). */
int list_pages(struct cli *c, const char *path, int all, void (*header)(void),
		      void (*row)(json_t *), size_t *shown);

/* ---- tables ---------------------------------------------------------------------------- */


void print_delivery_row(json_t *d)
{
	json_t *err = json_object_get(d, "last_error");
	char last[64] = "-";
	if (json_is_object(err))
		snprintf(last, sizeof(last), "%lld %.50s",
			 (long long)json_integer_value(json_object_get(err, "code")),
			 str(err, "message"));
	const char *status = str(d, "status");
	char shown[16];
	snprintf(shown, sizeof(shown), "%s%s", status, json_is_true(json_object_get(d, "dead")) ? "*" : "");
	printf("%-36s  %-10s  %4lld  %-24.24s  %-24.24s  %s\n", str(d, "id"), shown,
	       (long long)json_integer_value(json_object_get(d, "attempt_count")), str(d, "event_type"),
	       str(d, "updated_at"), last);
}

void print_delivery_header(void)
{
	printf("%-36s  %-10s  %4s  %-24s  %-24s  %s\n", "ID", "STATUS", "TRY", "EVENT TYPE",
	       "UPDATED", "LAST ERROR");
}

/* ---- commands ------------------------------------------------------------------------------ */

void append_query(char *q, size_t len, const char *key, const char *value)
{
	if (!value)
		return;
	char *esc = curl_easy_escape(NULL, value, 0);
	size_t used = strlen(q);
	snprintf(q + used, len - used, "%s%s=%s", strchr(q, '?') ? "&" : "?", key, esc ? esc : "");
	curl_free(esc);
}


/* Looks for the item of r's "items" named exactly arg: its id into id (CLI_OK), else
 * CLI_API_ERROR with the names seen added to names (pointing into r). */
static int match_name(json_t *r, const char *arg, char *id, const char **names, size_t *n,
		      size_t cap)
{
	json_t *item;
	size_t i;

	json_array_foreach(json_object_get(r, "items"), i, item) {
		const char *name = json_string_value(json_object_get(item, "name"));
		const char *item_id = json_string_value(json_object_get(item, "id"));
		if (!name || !item_id)
			continue;
		if (strcmp(name, arg) == 0) {
			snprintf(id, UUID_STR_LEN, "%s", item_id);
			return CLI_OK;
		}
		if (*n < cap)
			names[(*n)++] = name;
	}
	return CLI_API_ERROR;
}

/* The id of what arg names among GET list's items ("/v1/subscriptions", "/v1/tokens"):
 * arg itself when it is a UUID, else the item whose name is exactly arg, asked for with
 * list?name=arg (one row however many there are, where the list takes the filter; a list
 * that ignores it answers with every item, matched here all the same). Names are unique
 * in the store, so a name is one item or none; an unknown one is reported with the
 * closest name when there is a close one (the whole list is read for that when the
 * filtered answer was empty). id[UUID_STR_LEN] receives the id. Returns CLI_OK,
 * CLI_API_ERROR (no such name) or the failed call's code. */
int resolve_name(struct cli *c, const char *list, const char *what, const char *arg,
		 char *id)
{
	json_t *r = NULL, *all = NULL;
	const char *names[256];
	char path[600];
	size_t n = 0;
	int rc;

	if (uuid_valid(arg)) {
		snprintf(id, UUID_STR_LEN, "%s", arg);
		return CLI_OK;
	}
	snprintf(path, sizeof(path), "%s", list);
	append_query(path, sizeof(path), "name", arg);
	if ((rc = call(c, "GET", path, NULL, &r)))
		return rc;
	rc = match_name(r, arg, id, names, &n, sizeof(names) / sizeof(names[0]));
	if (rc && json_array_size(json_object_get(r, "items")) == 0 &&
	    call(c, "GET", list, NULL, &all) == CLI_OK)
		rc = match_name(all, arg, id, names, &n, sizeof(names) / sizeof(names[0]));
	if (rc) {
		const char *close = cli_suggest(arg, names, n);
		fprintf(stderr, "outboxd: no %s is named \"%s\"%s%s%s\n", what, arg,
			close ? "; did you mean \"" : "", close ? close : "", close ? "\"?" : "");
	}
	json_decref(all); /* names point into both */
	json_decref(r);
	return rc;
}

int subscription_id(struct cli *c, const char *arg, char *id)
{
	return resolve_name(c, "/v1/subscriptions", "subscription", arg, id);
}

/* The API's value of filter i in o (NULL when not given); sub_id is --subscription's
 * value resolved to an id. */
const char *filter_value(const struct cli_args *o, size_t i, const char *sub_id)
{
	if (!opt(o, filter_map[i][0]))
		return NULL;
	return strcmp(filter_map[i][0], "--subscription") == 0 ? sub_id : opt(o, filter_map[i][0]);
}

/* Resolves --subscription (an id or a name) into sub_id[UUID_STR_LEN]; nothing to do
 * without it. Returns CLI_OK or resolve_name's code. */
int filter_subscription(struct cli *c, const struct cli_args *o, char *sub_id)
{
	const char *sub = opt(o, "--subscription");
	sub_id[0] = '\0';
	return sub ? subscription_id(c, sub, sub_id) : CLI_OK;
}

/* True when o gives any of the delivery filters. */
int has_filters(const struct cli_args *o)
{
	for (size_t i = 0; i < N_FILTERS; i++)
		if (opt(o, filter_map[i][0]))
			return 1;
	return 0;
}

/* deliveries list / dlq list: one page, or every page with --all or --json. */
int list_deliveries(struct cli *c, const struct cli_args *o, const char *base)
{
	char path[2048], sub_id[UUID_STR_LEN];
	int rc = filter_subscription(c, o, sub_id);
	if (rc)
		return rc;
	snprintf(path, sizeof(path), "%s", base);
	for (size_t i = 0; i < N_FILTERS; i++)
		append_query(path, sizeof(path), filter_map[i][1], filter_value(o, i, sub_id));
	/* --failing: everything failing now, dead or still retried, oldest first (with
	 * max_retries 0 retries never run out: what keeps failing shows here, not in the DLQ) */
	if (opt(o, "--failing") && !opt(o, "--failing-since"))
		append_query(path, sizeof(path), "failing_since", "0s");
	append_query(path, sizeof(path), "sort", opt(o, "--sort"));
	append_query(path, sizeof(path), "order", opt(o, "--order"));
	int all = c->json || opt(o, "--all");
	append_query(path, sizeof(path), "limit", opt(o, "--limit") ? opt(o, "--limit")
							: all ? "1000" : "50");
	size_t shown = 0;
	rc = list_pages(c, path, all, print_delivery_header, print_delivery_row, &shown);
	if (rc)
		return rc;
	if (!c->json)
		printf("%zu deliveries%s\n", shown, strcmp(base, "/v1/dlq") == 0 ? " dead" : "");
	return CLI_OK;
}

/* GET path (its filters and limit in it) page after page, following next_cursor: rows
 * printed with row() after header() once the first page is in, or with --json one
 * {"items":[...]} of every page at the end. Only the first page unless all. *shown
 * counts the items. Returns CLI_OK or the failed call's code. */
int list_pages(struct cli *c, const char *path, int all, void (*header)(void),
		      void (*row)(json_t *), size_t *shown)
{
	json_t *items = json_array();
	char *cursor = NULL;
	int first = 1;

	*shown = 0;
	for (;;) {
		char page[2600];
		json_t *r;
		snprintf(page, sizeof(page), "%s", path);
		append_query(page, sizeof(page), "cursor", cursor);
		int rc = call(c, "GET", page, NULL, &r);
		free(cursor);
		cursor = NULL;
		if (rc) {
			json_decref(items);
			return rc;
		}
		if (first && !c->json)
			header();
		first = 0;
		json_t *list = json_object_get(r, "items"), *d;
		size_t i;
		json_array_foreach(list, i, d) {
			if (c->json)
				json_array_append(items, d);
			else
				row(d);
			(*shown)++;
		}
		json_t *next = json_object_get(r, "next_cursor");
		if (json_is_string(next))
			cursor = strdup(json_string_value(next));
		json_decref(r);
		if (!cursor)
			break;
		if (!all) {
			fprintf(stderr, "(more: use --all, or --json for every page)\n");
			free(cursor);
			break;
		}
	}
	if (c->json) {
		json_t *all_items = json_pack("{s:o}", "items", items);
		print_json(all_items);
		json_decref(all_items);
	} else {
		json_decref(items);
	}
	return CLI_OK;
}

int show_delivery(struct cli *c, const char *id)
{
	char path[256];
	json_t *d;
	snprintf(path, sizeof(path), "/v1/deliveries/%s", id);
	int rc = call(c, "GET", path, NULL, &d);
	if (rc)
		return rc;
	if (c->json) {
		print_json(d);
		json_decref(d);
		return CLI_OK;
	}
	printf("delivery      %s\nevent         %s (%s)\nsubscription  %s\nstatus        %s%s\n"
	       "attempts      %lld (scheduled retries %lld)\nnext attempt  %s\ncreated       %s\n"
	       "updated       %s\nprocessed     %s\n",
	       str(d, "id"), str(d, "event_id"), str(d, "event_type"), str(d, "subscription_id"),
	       str(d, "status"), json_is_true(json_object_get(d, "dead")) ? " (dead-lettered)" : "",
	       (long long)json_integer_value(json_object_get(d, "attempt_count")),
	       (long long)json_integer_value(json_object_get(d, "retry_count")),
	       str(d, "next_attempt_at"), str(d, "created_at"), str(d, "updated_at"),
	       str(d, "processed_at"));
	json_t *attempts = json_object_get(d, "attempts"), *a;
	size_t i;
	printf("\n%3s  %-9s  %-24s  %7s  %4s  %s\n", "N", "KIND", "STARTED", "MS", "CODE", "MESSAGE / CAUSE");
	json_array_foreach(attempts, i, a) {
		printf("%3lld  %-9s  %-24s  %7lld  %4lld  %s%s%.120s\n",
		       (long long)json_integer_value(json_object_get(a, "n")), str(a, "kind"),
		       str(a, "started_at"), (long long)json_integer_value(json_object_get(a, "duration_ms")),
		       (long long)json_integer_value(json_object_get(a, "code")), str(a, "message"),
		       json_is_string(json_object_get(a, "cause")) ? " / " : "",
		       json_is_string(json_object_get(a, "cause")) ? str(a, "cause") : "");
	}
	json_decref(d);
	return CLI_OK;
}
