/* cli.c: `outboxd <group> <command>` — the operator CLI over the HTTP API.
 *
 * Each command builds one API call (list commands follow next_cursor for every page),
 * prints a table or, with --json, the API's JSON, and exits with enum cli_exit. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#define MAX_OPTS 32
#define MAX_ARGS 1024

/* Flags that take no value. */
static const char *const bool_flags[] = {"--json", "--force", "--all", "--help", "-h",
					 "--dry-run", "--no-wait", "--failing", NULL};

struct opts {
	const char *keys[MAX_OPTS];
	const char *values[MAX_OPTS];
	int n;
	const char *args[MAX_ARGS];      /* positional arguments */
	int nargs;
};

struct cli {
	char url[512];
	char *token;
	int json;
};

static int is_bool_flag(const char *a)
{
	for (const char *const *f = bool_flags; *f; f++)
		if (strcmp(*f, a) == 0)
			return 1;
	return 0;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	memset(o, 0, sizeof(*o));
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (strncmp(a, "--", 2) != 0 && strcmp(a, "-h") != 0) {
			if (o->nargs == MAX_ARGS)
				return -1;
			o->args[o->nargs++] = a;
			continue;
		}
		if (o->n == MAX_OPTS)
			return -1;
		const char *eq = strchr(a, '=');
		if (eq) {
			char *key = strndup(a, (size_t)(eq - a));
			o->keys[o->n] = key; /* leaked deliberately: lives until exit */
			o->values[o->n++] = eq + 1;
		} else if (is_bool_flag(a)) {
			o->keys[o->n] = a;
			o->values[o->n++] = "true";
		} else if (i + 1 < argc) {
			o->keys[o->n] = a;
			o->values[o->n++] = argv[++i];
		} else {
			fprintf(stderr, "outboxd: %s needs a value\n", a);
			return -1;
		}
	}
	return 0;
}

static const char *opt(const struct opts *o, const char *key)
{
	for (int i = o->n - 1; i >= 0; i--)
		if (strcmp(o->keys[i], key) == 0)
			return o->values[i];
	return NULL;
}

/* Fails on options the command does not know, so typos are not silently ignored. */
static int check_opts(const struct opts *o, const char *const *allowed)
{
	static const char *const global[] = {"--url", "--token", "--json", "--help", "-h", NULL};
	for (int i = 0; i < o->n; i++) {
		int ok = 0;
		for (const char *const *a = global; *a && !ok; a++)
			ok = strcmp(*a, o->keys[i]) == 0;
		for (const char *const *a = allowed; a && *a && !ok; a++)
			ok = strcmp(*a, o->keys[i]) == 0;
		if (!ok) {
			fprintf(stderr, "outboxd: unknown option %s (see --help)\n", o->keys[i]);
			return -1;
		}
	}
	return 0;
}

/* ---- HTTP ------------------------------------------------------------------------------ */

struct body {
	char *data;
	size_t len;
};

static size_t write_cb(char *p, size_t size, size_t n, void *ctx)
{
	struct body *b = ctx;
	size_t len = size * n;
	char *grown = realloc(b->data, b->len + len + 1);
	if (!grown)
		return 0;
	memcpy(grown + b->len, p, len);
	b->data = grown;
	b->len += len;
	b->data[b->len] = '\0';
	return len;
}

/* One API call. *out receives the parsed JSON answer (NULL for none). Returns CLI_OK,
 * CLI_API_ERROR (after printing the API's error) or CLI_UNREACHABLE. */
static int call(struct cli *c, const char *method, const char *path, const char *body,
		json_t **out)
{
	char url[2048], auth[1024];
	struct body resp = {0};
	struct curl_slist *h = NULL;
	long status = 0;
	int rc = CLI_OK;

	*out = NULL;
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
	free(resp.data);
	curl_slist_free_all(h);
	curl_easy_cleanup(e);
	return rc;
}

static void print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_ENCODE_ANY);
	if (s)
		printf("%s\n", s);
	free(s);
}

/* GET path's {"items":[...]}: the JSON with --json, else header and a row each. */
static int print_list(struct cli *c, const char *path, const char *header, void (*row)(json_t *))
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
static int list_pages(struct cli *c, const char *path, int all, void (*header)(void),
		      void (*row)(json_t *), size_t *shown);

/* ---- tables ---------------------------------------------------------------------------- */

static const char *str(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	return json_is_string(v) ? json_string_value(v) : "-";
}

static void print_delivery_row(json_t *d)
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

static void print_delivery_header(void)
{
	printf("%-36s  %-10s  %4s  %-24s  %-24s  %s\n", "ID", "STATUS", "TRY", "EVENT TYPE",
	       "UPDATED", "LAST ERROR");
}

/* ---- commands ------------------------------------------------------------------------------ */

static void append_query(char *q, size_t len, const char *key, const char *value)
{
	if (!value)
		return;
	char *esc = curl_easy_escape(NULL, value, 0);
	size_t used = strlen(q);
	snprintf(q + used, len - used, "%s%s=%s", strchr(q, '?') ? "&" : "?", key, esc ? esc : "");
	curl_free(esc);
}

static const char *const list_opts[] = {"--status", "--subscription", "--name", "--type", "--q",
					"--code", "--source", "--event-id", "--from", "--to",
					"--min-attempts", "--failing-since", "--failing",
					"--sort", "--order", "--limit", "--all", NULL};

/* Command-line filter options and the API's filter names. */
static const char *const filter_map[][2] = {
	{"--status", "status"}, {"--subscription", "subscription_id"}, {"--name", "name"},
	{"--type", "event_type"}, {"--q", "q"}, {"--code", "code"}, {"--source", "source"},
	{"--event-id", "event_id"}, {"--from", "from"}, {"--to", "to"},
	{"--min-attempts", "min_attempts"}, {"--failing-since", "failing_since"},
};

/* deliveries list / dlq list: one page, or every page with --all or --json. */
static int list_deliveries(struct cli *c, const struct opts *o, const char *base)
{
	char path[2048];
	if (check_opts(o, list_opts))
		return CLI_USAGE;
	snprintf(path, sizeof(path), "%s", base);
	for (size_t i = 0; i < sizeof(filter_map) / sizeof(filter_map[0]); i++)
		append_query(path, sizeof(path), filter_map[i][1], opt(o, filter_map[i][0]));
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
	int rc = list_pages(c, path, all, print_delivery_header, print_delivery_row, &shown);
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
static int list_pages(struct cli *c, const char *path, int all, void (*header)(void),
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

static int show_delivery(struct cli *c, const char *id)
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

/* Prints the usage lines of one group (from the table below) and returns CLI_USAGE. */
static int group_usage(const char *name);

static int cmd_events(struct cli *c, const char *cmd, const struct opts *o)
{
	static const char *const send_opts[] = {"--type", "--source", "--source-event-id",
						"--partition-key", "--data", "--data-file",
						"--base64", NULL};
	json_t *r;
	int rc;

	if (strcmp(cmd, "send") == 0) {
		if (check_opts(o, send_opts))
			return CLI_USAGE;
		const char *type = opt(o, "--type"), *data = opt(o, "--data");
		const char *file = opt(o, "--data-file"), *b64 = opt(o, "--base64");
		if (!type || (!!data + !!file + !!b64) != 1) {
			return group_usage("events");
		}
		char *text = NULL;
		if (file) {
			FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "r");
			if (!f) {
				perror(file);
				return CLI_USAGE;
			}
			size_t len = 0;
			FILE *m = open_memstream(&text, &len);
			char chunk[4096];
			size_t n;
			while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
				fwrite(chunk, 1, n, m);
			fclose(m);
			if (f != stdin)
				fclose(f);
			data = text;
		}
		json_t *payload = NULL;
		if (data && !(payload = json_loads(data, JSON_DECODE_ANY, NULL))) {
			fprintf(stderr, "outboxd: --data is not valid JSON\n");
			free(text);
			return CLI_USAGE;
		}
		json_t *ev = json_pack("{s:s}", "event_type", type);
		if (payload)
			json_object_set_new(ev, "payload", payload);
		else
			json_object_set_new(ev, "payload_base64", json_string(b64));
		if (opt(o, "--source"))
			json_object_set_new(ev, "source", json_string(opt(o, "--source")));
		if (opt(o, "--source-event-id"))
			json_object_set_new(ev, "source_event_id", json_string(opt(o, "--source-event-id")));
		if (opt(o, "--partition-key"))
			json_object_set_new(ev, "partition_key", json_string(opt(o, "--partition-key")));
		char *body = json_dumps(ev, JSON_COMPACT);
		json_decref(ev);
		free(text);
		rc = call(c, "POST", "/v1/events", body, &r);
		free(body);
		if (rc)
			return rc;
		if (c->json)
			print_json(r);
		else
			printf("%s%s\n", json_string_value(json_array_get(json_object_get(r, "ids"), 0)),
			       json_is_true(json_object_get(r, "duplicate")) ? " (duplicate: already stored)" : "");
		json_decref(r);
		return CLI_OK;
	}
	if (strcmp(cmd, "show") == 0 && o->nargs == 1) {
		char path[256];
		snprintf(path, sizeof(path), "/v1/events/%s", o->args[0]);
		if ((rc = call(c, "GET", path, NULL, &r)))
			return rc;
		if (c->json) {
			print_json(r);
		} else {
			printf("event    %s\ntype     %s\nsource   %s\ncreated  %s\n\n", str(r, "id"),
			       str(r, "event_type"), str(r, "source"), str(r, "created_at"));
			print_delivery_header();
			json_t *d;
			size_t i;
			json_array_foreach(json_object_get(r, "deliveries"), i, d)
				print_delivery_row(d);
		}
		json_decref(r);
		return CLI_OK;
	}
	return group_usage("events");
}

static void print_sub_row(json_t *s)
{
	char types[128] = "";
	json_t *t;
	size_t i;
	json_array_foreach(json_object_get(s, "event_types"), i, t) {
		size_t used = strlen(types);
		snprintf(types + used, sizeof(types) - used, "%s%s", i ? "," : "", json_string_value(t));
	}
	printf("%-36s  %-20.20s  %-7s  %-24.24s  %s\n", str(s, "id"), str(s, "name"),
	       json_is_true(json_object_get(s, "enabled")) ? "yes" : "no", types, str(s, "endpoint"));
}

/* Every user of the machine can read a process's arguments (/proc/PID/cmdline, ps): a
 * secret given as flag is named in a warning with the form that keeps it out. */
static void warn_secret_flag(const char *flag, const char *instead)
{
	fprintf(stderr, "outboxd: warning: %s holds a secret, and arguments are visible to every "
			"user of this machine in /proc/%d/cmdline (ps); use %s instead\n", flag,
		(int)getpid(), instead);
}

/* Reads a JSON document from --body (inline, @FILE, or - for stdin). */
static json_t *read_body(const struct opts *o)
{
	const char *b = opt(o, "--body");
	if (!b)
		return NULL;
	json_error_t err;
	json_t *doc;
	int inline_body = 0;
	if (strcmp(b, "-") == 0) {
		doc = json_loadf(stdin, 0, &err);
	} else if (b[0] == '@') {
		doc = json_load_file(b + 1, 0, &err);
	} else {
		doc = json_loads(b, 0, &err);
		inline_body = 1;
	}
	if (!doc)
		fprintf(stderr, "outboxd: --body is not valid JSON: %s\n", err.text);
	else if (inline_body && (json_object_get(doc, "auth") || json_object_get(doc, "secret") ||
				 json_object_get(doc, "previous_secret")))
		warn_secret_flag("--body", "--body @FILE or --body - (standard input)");
	return doc;
}

static int cmd_subs(struct cli *c, const char *cmd, const struct opts *o)
{
	static const char *const create_opts[] = {"--name", "--endpoint", "--types", "--secret",
						  "--format", "--body", NULL};
	static const char *const update_opts[] = {"--name", "--endpoint", "--types", "--secret",
						  "--format", "--body", "--enabled", NULL};
	char path[256];
	json_t *r = NULL;
	int rc;

	if (strcmp(cmd, "list") == 0) {
		char header[160];
		snprintf(header, sizeof(header), "%-36s  %-20s  %-7s  %-24s  %s\n", "ID", "NAME",
			 "ENABLED", "EVENT TYPES", "ENDPOINT");
		return print_list(c, "/v1/subscriptions", header, print_sub_row);
	}
	if ((strcmp(cmd, "enable") == 0 || strcmp(cmd, "disable") == 0) && o->nargs == 1) {
		int on = strcmp(cmd, "enable") == 0;
		snprintf(path, sizeof(path), "/v1/subscriptions/%s", o->args[0]);
		if ((rc = call(c, "PATCH", path, on ? "{\"enabled\":true}" : "{\"enabled\":false}",
			       &r)))
			return rc;
		if (c->json)
			print_json(r);
		else
			printf("%s %s\n", on ? "enabled" : "disabled", o->args[0]);
		json_decref(r);
		return CLI_OK;
	}
	if ((strcmp(cmd, "show") == 0 || strcmp(cmd, "delete") == 0) && o->nargs == 1) {
		snprintf(path, sizeof(path), "/v1/subscriptions/%s", o->args[0]);
		int del = strcmp(cmd, "delete") == 0;
		if ((rc = call(c, del ? "DELETE" : "GET", path, NULL, &r)))
			return rc;
		if (del)
			printf("deleted %s\n", o->args[0]);
		else
			print_json(r);
		json_decref(r);
		return CLI_OK;
	}
	if (strcmp(cmd, "create") == 0 || (strcmp(cmd, "update") == 0 && o->nargs == 1)) {
		int create = strcmp(cmd, "create") == 0;
		if (check_opts(o, create ? create_opts : update_opts))
			return CLI_USAGE;
		json_t *doc = read_body(o);
		if (opt(o, "--body") && !doc)
			return CLI_USAGE;
		if (!doc)
			doc = json_object();
		if (opt(o, "--name"))
			json_object_set_new(doc, "name", json_string(opt(o, "--name")));
		if (opt(o, "--endpoint"))
			json_object_set_new(doc, "endpoint", json_string(opt(o, "--endpoint")));
		if (opt(o, "--secret")) {
			if (strcmp(opt(o, "--secret"), "generate") != 0)
				warn_secret_flag("--secret", "--secret generate, or \"secret\" in "
						 "--body @FILE");
			json_object_set_new(doc, "secret", json_string(opt(o, "--secret")));
		}
		if (opt(o, "--format"))
			json_object_set_new(doc, "payload_format", json_string(opt(o, "--format")));
		if (opt(o, "--enabled"))
			json_object_set_new(doc, "enabled", json_boolean(strcmp(opt(o, "--enabled"), "true") == 0));
		if (opt(o, "--types")) {
			json_t *types = json_array();
			char *copy = strdup(opt(o, "--types")), *save = NULL;
			for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
				json_array_append_new(types, json_string(t));
			free(copy);
			json_object_set_new(doc, "event_types", types);
		}
		char *body = json_dumps(doc, JSON_COMPACT);
		json_decref(doc);
		if (create)
			snprintf(path, sizeof(path), "/v1/subscriptions");
		else
			snprintf(path, sizeof(path), "/v1/subscriptions/%s", o->args[0]);
		rc = call(c, create ? "POST" : "PATCH", path, body, &r);
		free(body);
		if (rc)
			return rc;
		if (c->json) {
			print_json(r);
		} else {
			printf("%s\n", create ? "created" : "updated");
			print_sub_row(r);
		}
		json_decref(r);
		return CLI_OK;
	}
	return group_usage("subs");
}

static int cmd_deliveries(struct cli *c, const char *cmd, const struct opts *o)
{
	if (strcmp(cmd, "list") == 0)
		return list_deliveries(c, o, "/v1/deliveries");
	if (strcmp(cmd, "show") == 0 && o->nargs == 1)
		return show_delivery(c, o->args[0]);
	return group_usage("deliveries");
}

/* The filter object of a replay or purge from the command-line filter options. */
static json_t *filter_from_opts(const struct opts *o)
{
	json_t *f = json_object();
	for (size_t i = 0; i < sizeof(filter_map) / sizeof(filter_map[0]); i++)
		if (opt(o, filter_map[i][0]))
			json_object_set_new(f, filter_map[i][1], json_string(opt(o, filter_map[i][0])));
	return f;
}

static void print_job_line(json_t *j, int tty)
{
	long long matched = json_integer_value(json_object_get(j, "matched"));
	long long done = json_integer_value(json_object_get(j, "replayed"));
	int pct = matched ? (int)(done * 100 / matched) : 100;
	printf("%sjob %s %-9s %lld/%lld replayed (%d%%), %lld/s%s", tty ? "\r" : "", str(j, "id"),
	       str(j, "state"), done, matched, pct,
	       (long long)json_integer_value(json_object_get(j, "rate")), tty ? "   " : "\n");
	fflush(stdout);
}

/* Follows a job until it ends, redrawing one progress line on a terminal. */
static int follow_job(struct cli *c, const char *id)
{
	char path[128];
	int tty = isatty(STDOUT_FILENO);
	snprintf(path, sizeof(path), "/v1/jobs/%s", id);
	for (;;) {
		json_t *j;
		int rc = call(c, "GET", path, NULL, &j);
		if (rc)
			return rc;
		int running = strcmp(str(j, "state"), "running") == 0;
		if (tty || !running)
			print_job_line(j, tty);
		int failed = strcmp(str(j, "state"), "failed") == 0;
		json_decref(j);
		if (!running) {
			if (tty)
				printf("\n");
			return failed ? CLI_API_ERROR : CLI_OK;
		}
		usleep(tty ? 250000 : 1000000);
	}
}

static int dlq_replay(struct cli *c, const struct opts *o)
{
	static const char *const replay_opts[] = {"--status", "--subscription", "--name", "--type",
						  "--q", "--code", "--source", "--event-id",
						  "--from", "--to", "--min-attempts",
						  "--failing-since", "--force", "--dry-run", "--rate",
						  "--no-wait", NULL};
	json_t *r;
	if (check_opts(o, replay_opts))
		return CLI_USAGE;
	json_t *req = json_object();
	if (o->nargs) {
		json_t *ids = json_array();
		for (int i = 0; i < o->nargs; i++)
			json_array_append_new(ids, json_string(o->args[i]));
		json_object_set_new(req, "ids", ids);
	} else {
		json_object_set_new(req, "filter", filter_from_opts(o));
		if (opt(o, "--dry-run"))
			json_object_set_new(req, "dry_run", json_true());
		if (opt(o, "--rate"))
			json_object_set_new(req, "rate", json_integer(atoi(opt(o, "--rate"))));
	}
	if (opt(o, "--force"))
		json_object_set_new(req, "force", json_true());
	char *body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	int rc = call(c, "POST", "/v1/dlq/replay", body, &r);
	free(body);
	if (rc)
		return rc;
	if (c->json) {
		print_json(r);
	} else if (json_object_get(r, "job_id")) {
		printf("replay job %s started: %lld deliveries at %lld/s\n", str(r, "job_id"),
		       (long long)json_integer_value(json_object_get(r, "matched")),
		       (long long)json_integer_value(json_object_get(r, "rate")));
	} else if (json_object_get(r, "matched")) {
		printf("would replay %lld (dry run)\n",
		       (long long)json_integer_value(json_object_get(r, "matched")));
	} else {
		printf("replayed %lld\n", (long long)json_integer_value(json_object_get(r, "replayed")));
		json_t *x;
		size_t i;
		json_array_foreach(json_object_get(r, "results"), i, x)
			if (strcmp(str(x, "outcome"), "replayed") != 0)
				printf("  %s: %s\n", str(x, "id"), str(x, "outcome"));
	}
	char job[64] = "";
	if (json_is_string(json_object_get(r, "job_id")))
		snprintf(job, sizeof(job), "%s", str(r, "job_id"));
	json_decref(r);
	if (job[0] && !opt(o, "--no-wait") && !c->json)
		return follow_job(c, job);
	return CLI_OK;
}

static int dlq_purge_filter(struct cli *c, const struct opts *o)
{
	static const char *const purge_opts[] = {"--subscription", "--name", "--type", "--q",
						 "--code", "--source", "--event-id", "--from", "--to",
						 "--min-attempts", "--failing-since", "--dry-run", "--all",
						 NULL};
	json_t *r;
	if (check_opts(o, purge_opts))
		return CLI_USAGE;
	json_t *f = filter_from_opts(o);
	if (json_object_size(f) == 0 && !opt(o, "--all") && !opt(o, "--dry-run")) {
		fprintf(stderr, "outboxd: give filters, or --all to purge the whole dead-letter queue\n");
		json_decref(f);
		return CLI_USAGE;
	}
	json_t *req = json_pack("{s:o}", "filter", f);
	if (opt(o, "--dry-run"))
		json_object_set_new(req, "dry_run", json_true());
	char *body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	int rc = call(c, "POST", "/v1/dlq/purge", body, &r);
	free(body);
	if (rc)
		return rc;
	if (c->json)
		print_json(r);
	else if (json_object_get(r, "matched"))
		printf("would purge %lld (dry run)\n",
		       (long long)json_integer_value(json_object_get(r, "matched")));
	else
		printf("purged %lld\n", (long long)json_integer_value(json_object_get(r, "purged")));
	json_decref(r);
	return CLI_OK;
}

static void print_job_header(void)
{
	printf("%-36s  %-9s  %9s  %9s  %9s  %6s  %-16s  %s\n", "ID", "STATE", "REPLAYED",
	       "MATCHED", "REMAINING", "RATE", "STARTED BY", "CREATED");
}

static void print_job_row(json_t *j)
{
	printf("%-36s  %-9s  %9lld  %9lld  %9lld  %6lld  %-16.16s  %s\n", str(j, "id"),
	       str(j, "state"), (long long)json_integer_value(json_object_get(j, "replayed")),
	       (long long)json_integer_value(json_object_get(j, "matched")),
	       (long long)json_integer_value(json_object_get(j, "remaining")),
	       (long long)json_integer_value(json_object_get(j, "rate")), str(j, "actor"),
	       str(j, "created_at"));
}

/* jobs list: newest first, one page, or every page with --all or --json. */
static int list_jobs(struct cli *c, const struct opts *o)
{
	static const char *const jobs_opts[] = {"--state", "--limit", "--all", NULL};
	char path[512] = "/v1/jobs";
	int all = c->json || opt(o, "--all");
	size_t shown = 0;

	if (check_opts(o, jobs_opts))
		return CLI_USAGE;
	append_query(path, sizeof(path), "state", opt(o, "--state"));
	append_query(path, sizeof(path), "limit", opt(o, "--limit") ? opt(o, "--limit")
							: all ? "1000" : "50");
	int rc = list_pages(c, path, all, print_job_header, print_job_row, &shown);
	if (rc)
		return rc;
	if (!c->json)
		printf("%zu jobs\n", shown);
	return CLI_OK;
}

static int cmd_jobs(struct cli *c, const char *cmd, const struct opts *o)
{
	char path[160];
	json_t *r;
	int rc;

	if (strcmp(cmd, "list") == 0)
		return list_jobs(c, o);
	if ((strcmp(cmd, "show") == 0 || strcmp(cmd, "cancel") == 0 || strcmp(cmd, "wait") == 0) &&
	    o->nargs == 1) {
		if (strcmp(cmd, "wait") == 0)
			return follow_job(c, o->args[0]);
		int cancel = strcmp(cmd, "cancel") == 0;
		snprintf(path, sizeof(path), "/v1/jobs/%s%s", o->args[0], cancel ? "/cancel" : "");
		if ((rc = call(c, cancel ? "POST" : "GET", path, cancel ? "{}" : NULL, &r)))
			return rc;
		if (c->json)
			print_json(r);
		else
			print_job_line(r, 0);
		json_decref(r);
		return CLI_OK;
	}
	return group_usage("jobs");
}

static int cmd_stats(struct cli *c, const struct opts *o)
{
	json_t *r;
	int rc = call(c, "GET", "/v1/stats", NULL, &r);
	if (rc)
		return rc;
	if (c->json) {
		print_json(r);
		json_decref(r);
		return CLI_OK;
	}
	json_t *by = json_object_get(r, "deliveries");
	printf("deliveries   NEW %lld   PROCESSED %lld   FAILED retrying %lld   dead %lld\n",
	       (long long)json_integer_value(json_object_get(by, "NEW")),
	       (long long)json_integer_value(json_object_get(by, "PROCESSED")),
	       (long long)json_integer_value(json_object_get(by, "FAILED_RETRYING")),
	       (long long)json_integer_value(json_object_get(by, "FAILED_DEAD")));
	printf("in flight    %lld   due backlog %lld   oldest dead %s\n",
	       (long long)json_integer_value(json_object_get(r, "in_flight")),
	       (long long)json_integer_value(json_object_get(r, "due_backlog")), str(r, "oldest_dead_at"));
	json_t *fl = json_object_get(r, "failing");
	if (json_is_string(json_object_get(fl, "oldest_since")))
		printf("failing      %lld deliveries still retried, the oldest failing since %s "
		       "(%lld s)\n",
		       (long long)json_integer_value(json_object_get(fl, "deliveries")),
		       str(fl, "oldest_since"),
		       (long long)json_integer_value(json_object_get(fl, "oldest_age_ms")) / 1000);
	json_t *bl = json_object_get(r, "blocked"), *ops = json_object_get(r, "ops_events");
	printf("blocked      %lld deliveries behind dead ones, %lld keys   ops events stored %lld, "
	       "held back %lld, dropped %lld (this instance)\n\n",
	       (long long)json_integer_value(json_object_get(bl, "deliveries")),
	       (long long)json_integer_value(json_object_get(bl, "keys")),
	       (long long)json_integer_value(json_object_get(ops, "stored")),
	       (long long)json_integer_value(json_object_get(ops, "suppressed")),
	       (long long)json_integer_value(json_object_get(ops, "dropped")));
	printf("%-20s  %-7s  %8s  %8s  %s\n", "SUBSCRIPTION", "ENABLED", "ATTEMPTS", "SUCCESS",
	       "LAST ERROR");
	json_t *x;
	size_t i;
	json_array_foreach(json_object_get(r, "subscriptions"), i, x) {
		char rate[16] = "-", last[80] = "-";
		json_t *sr = json_object_get(x, "success_rate"), *le = json_object_get(x, "last_error");
		if (json_is_number(sr))
			snprintf(rate, sizeof(rate), "%.1f%%", json_number_value(sr) * 100);
		if (json_is_object(le))
			snprintf(last, sizeof(last), "%lld %.60s",
				 (long long)json_integer_value(json_object_get(le, "code")), str(le, "message"));
		printf("%-20.20s  %-7s  %8lld  %8s  %s\n", str(x, "name"),
		       json_is_true(json_object_get(x, "enabled")) ? "yes" : "no",
		       (long long)json_integer_value(json_object_get(x, "attempts")), rate, last);
		if (json_is_string(json_object_get(x, "disabled_reason")))
			printf("%-20s  disabled by outboxd: %s\n", "", str(x, "disabled_reason"));
	}
	/* flow control: each endpoint's adaptive limit in this instance */
	json_t *eps = json_object_get(r, "endpoints");
	if (json_array_size(eps)) {
		printf("\n%-40s  %6s  %9s  %6s  %10s  %10s\n", "ENDPOINT (this instance)", "LIMIT",
		       "IN FLIGHT", "QUEUED", "LATENCY", "UNLOADED");
		json_array_foreach(eps, i, x)
			printf("%-40.40s  %6lld  %9lld  %6lld  %8.1fms  %8.1fms\n", str(x, "endpoint"),
			       (long long)json_integer_value(json_object_get(x, "limit")),
			       (long long)json_integer_value(json_object_get(x, "in_flight")),
			       (long long)json_integer_value(json_object_get(x, "queued")),
			       json_number_value(json_object_get(x, "latency_ms")),
			       json_number_value(json_object_get(x, "latency_min_ms")));
	}
	json_decref(r);
	return CLI_OK;
}

static int cmd_dlq(struct cli *c, const char *cmd, const struct opts *o)
{
	json_t *r;
	int rc;

	if (strcmp(cmd, "list") == 0)
		return list_deliveries(c, o, "/v1/dlq");
	if (strcmp(cmd, "purge") == 0 && o->nargs == 1) {
		char path[256];
		snprintf(path, sizeof(path), "/v1/dlq/%s", o->args[0]);
		if ((rc = call(c, "DELETE", path, NULL, &r)))
			return rc;
		printf("purged %s\n", o->args[0]);
		json_decref(r);
		return CLI_OK;
	}
	if (strcmp(cmd, "replay") == 0)
		return dlq_replay(c, o);
	if (strcmp(cmd, "purge") == 0 && o->nargs == 0)
		return dlq_purge_filter(c, o);
	return group_usage("dlq");
}

static void print_token_row(json_t *t)
{
	char scopes[64] = "";
	json_t *s;
	size_t i;
	json_array_foreach(json_object_get(t, "scopes"), i, s) {
		size_t used = strlen(scopes);
		snprintf(scopes + used, sizeof(scopes) - used, "%s%s", i ? "," : "",
			 json_string_value(s));
	}
	json_t *expires = json_object_get(t, "expires_at"), *used = json_object_get(t, "last_used_at");
	printf("%-36s  %-20s  %-22s  %-8s  %-24s  %-24s  %s%s\n", str(t, "id"), str(t, "name"),
	       scopes, str(t, "prefix"), str(t, "created_at"),
	       json_is_string(expires) ? json_string_value(expires) : "never",
	       json_is_string(used) ? json_string_value(used) : "never",
	       json_is_true(json_object_get(t, "expired")) ? "  (expired)" : "");
}

/* tokens create NAME --scopes a,b [--ttl D | --expires-at T] | list | revoke ID */
static int cmd_tokens(struct cli *c, const char *cmd, const struct opts *o)
{
	static const char *const create_opts[] = {"--scopes", "--ttl", "--expires-at", NULL};
	char path[128];
	json_t *r = NULL;
	int rc;

	if (strcmp(cmd, "list") == 0) {
		char header[256];
		snprintf(header, sizeof(header), "%-36s  %-20s  %-22s  %-8s  %-24s  %-24s  %s\n",
			 "ID", "NAME", "SCOPES", "PREFIX", "CREATED", "EXPIRES", "LAST USED");
		return print_list(c, "/v1/tokens", header, print_token_row);
	}
	if (strcmp(cmd, "revoke") == 0 && o->nargs == 1) {
		snprintf(path, sizeof(path), "/v1/tokens/%s", o->args[0]);
		if ((rc = call(c, "DELETE", path, NULL, &r)))
			return rc;
		printf("revoked %s\n", o->args[0]);
		json_decref(r);
		return CLI_OK;
	}
	if (strcmp(cmd, "create") == 0 && o->nargs == 1 && opt(o, "--scopes")) {
		if (check_opts(o, create_opts))
			return CLI_USAGE;
		json_t *scopes = json_array();
		char *copy = strdup(opt(o, "--scopes")), *save = NULL;
		for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save))
			json_array_append_new(scopes, json_string(t));
		free(copy);
		json_t *doc = json_pack("{s:s, s:o}", "name", o->args[0], "scopes", scopes);
		/* the API checks them and names the field at fault */
		if (opt(o, "--ttl"))
			json_object_set_new(doc, "ttl", json_string(opt(o, "--ttl")));
		if (opt(o, "--expires-at"))
			json_object_set_new(doc, "expires_at", json_string(opt(o, "--expires-at")));
		char *body = json_dumps(doc, JSON_COMPACT);
		json_decref(doc);
		rc = call(c, "POST", "/v1/tokens", body, &r);
		free(body);
		if (rc)
			return rc;
		if (c->json) {
			print_json(r);
		} else {
			print_token_row(r);
			printf("\ntoken (shown this once; only its hash is kept):\n%s\n",
			       str(r, "token"));
		}
		json_decref(r);
		return CLI_OK;
	}
	return group_usage("tokens");
}

static int cmd_stats_show(struct cli *c, const char *cmd, const struct opts *o)
{
	return cmd_stats(c, o);
}

/* The command groups: the one list that dispatch, the usage text, cli_is_group and
 * `outboxd help` (cli_print_groups) read. */
static const struct cli_group {
	const char *name;
	const char *summary;   /* one line for `outboxd help` */
	const char *usage;     /* the group's lines in the usage text */
	int (*run)(struct cli *c, const char *cmd, const struct opts *o);
} groups[] = {
	{"events", "send and show events",
	 "  events send --type TYPE (--data JSON | --data-file FILE | --base64 B64)\n"
	 "              [--source S] [--source-event-id ID] [--partition-key K]\n"
	 "  events show ID\n",
	 cmd_events},
	{"subs", "manage subscriptions",
	 "  subs create --name N --endpoint URL --types a.*,b [--secret whsec_...|generate]\n"
	 "              [--format json|binary] [--body JSON|@FILE|-]\n"
	 "  subs list | show ID | delete ID | enable ID | disable ID\n"
	 "  subs update ID [--name N] [--endpoint URL] [--types ...] [--enabled true|false]\n"
	 "              [--body JSON|@FILE|-]\n",
	 cmd_subs},
	{"deliveries", "list and inspect deliveries",
	 "  deliveries list [filters] [--sort created_at|updated_at|attempt_count]\n"
	 "              [--order asc|desc] [--limit N] [--all]\n"
	 "  deliveries list --failing [filters]\n"
	 "                              what is failing now, dead or still retried\n"
	 "                              (with max_retries 0 retries never run out: what\n"
	 "                              keeps failing shows here, not in the DLQ)\n"
	 "  deliveries show ID          one delivery with every attempt\n",
	 cmd_deliveries},
	{"dlq", "the dead-letter queue: list, replay, purge",
	 "  dlq list [filters as above] dead-lettered deliveries\n"
	 "  dlq replay ID...            replay these deliveries at once\n"
	 "  dlq replay [filters] [--rate N] [--dry-run] [--force] [--no-wait]\n"
	 "                              replay every dead delivery that matches, paced (a job;\n"
	 "                              progress is shown until it ends unless --no-wait)\n"
	 "  dlq purge ID                delete one dead delivery and its history\n"
	 "  dlq purge [filters] [--dry-run] | --all\n"
	 "                              delete every dead delivery that matches\n",
	 cmd_dlq},
	{"jobs", "list, follow or cancel replay jobs",
	 "  jobs list [--state running|done|cancelled|failed] [--limit N] [--all]\n"
	 "                              replay jobs, newest first: progress, who started them\n"
	 "  jobs show|wait|cancel ID    a replay job's progress; follow it; stop it\n", cmd_jobs},
	{"tokens", "named API tokens with scopes: create, list, revoke",
	 "  tokens create NAME --scopes ingest,read,operate,admin [--ttl 90d | --expires-at T]\n"
	 "                              a named token (printed once; the audit log's actor),\n"
	 "                              refused once it expires (never unless asked)\n"
	 "  tokens list | revoke ID\n",
	 cmd_tokens},
	{"stats", "counts, DLQ depth, per-subscription health",
	 "  stats                       counts, DLQ depth, per-subscription success rate\n",
	 cmd_stats_show},
};
#define N_GROUPS (sizeof(groups) / sizeof(groups[0]))

static const struct cli_group *group_find(const char *name)
{
	for (size_t i = 0; i < N_GROUPS; i++)
		if (strcmp(groups[i].name, name) == 0)
			return &groups[i];
	return NULL;
}

static void usage_print(FILE *out)
{
	fputs("usage: outboxd [--url URL] [--token TOKEN] [--json] <group> <command> [options]\n\n",
	      out);
	for (size_t i = 0; i < N_GROUPS; i++)
		fputs(groups[i].usage, out);
	fputs("\n"
	      "filters: --status S --subscription ID --name NAME --type T (glob ok) --q TEXT\n"
	      "         --code N --source S --event-id ID --from RFC3339 --to RFC3339\n"
	      "         --min-attempts N --failing-since RFC3339|DURATION (failing at least since\n"
	      "         then, or for that long: 1h)\n"
	      "\n"
	      "The API is found at --url, OUTBOXD_URL or http://127.0.0.1:8080 (an https:// API with\n"
	      "a private CA: OUTBOXD_CA_FILE names the CA); the token is --token,\n"
	      "OUTBOXD_TOKEN, or ./var/admin.token. --json prints the API's JSON (every page for\n"
	      "list commands). Exit codes: 0 ok, 1 the API answered with an error, 2 bad usage,\n"
	      "3 the API cannot be reached.\n",
	      out);
}

static int group_usage(const char *name)
{
	const struct cli_group *g = group_find(name);
	fprintf(stderr, "usage: outboxd [--url URL] [--token TOKEN] [--json] ...\n%s",
		g ? g->usage : "");
	return CLI_USAGE;
}

int cli_is_group(const char *name)
{
	return group_find(name) != NULL;
}

void cli_print_groups(FILE *out)
{
	for (size_t i = 0; i < N_GROUPS; i++)
		fprintf(out, "  %-12s %s\n", groups[i].name, groups[i].summary);
}

static char *token_from_file(const char *path)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return NULL;
	char buf[256];
	char *t = fgets(buf, sizeof(buf), f) ? strdup(buf) : NULL;
	fclose(f);
	if (t)
		t[strcspn(t, "\r\n")] = '\0';
	return t;
}

int cli_main(int argc, char **argv)
{
	struct opts o;
	struct cli c = {0};
	int rc;

	if (argc < 1 || parse_opts(argc - 1, argv + 1, &o))
		return CLI_USAGE;
	const char *group = argv[0];
	if (strcmp(group, "stats") == 0 && !opt(&o, "--help") && !opt(&o, "-h"))
		o.args[o.nargs++] = "show"; /* `outboxd stats` has no sub-command */
	if (opt(&o, "--help") || opt(&o, "-h") || o.nargs == 0) {
		usage_print(o.nargs == 0 && !opt(&o, "--help") && !opt(&o, "-h") ? stderr : stdout);
		return opt(&o, "--help") || opt(&o, "-h") ? CLI_OK : CLI_USAGE;
	}
	const char *url = opt(&o, "--url");
	if (!url)
		url = getenv("OUTBOXD_URL");
	snprintf(c.url, sizeof(c.url), "%s", url ? url : "http://127.0.0.1:8080");
	size_t ul = strlen(c.url);
	if (ul && c.url[ul - 1] == '/')
		c.url[ul - 1] = '\0';
	const char *tok = opt(&o, "--token");
	if (tok)
		warn_secret_flag("--token", "OUTBOXD_TOKEN in the environment");
	else
		tok = getenv("OUTBOXD_TOKEN");
	c.token = tok ? strdup(tok) : token_from_file("var/admin.token");
	c.json = opt(&o, "--json") != NULL;

	/* The command is the first positional argument; the rest are its arguments. */
	const char *cmd = o.args[0];
	memmove(o.args, o.args + 1, (size_t)(o.nargs - 1) * sizeof(o.args[0]));
	o.nargs--;

	curl_global_init(CURL_GLOBAL_DEFAULT);
	const struct cli_group *g = group_find(group);
	rc = g ? g->run(&c, cmd, &o) : CLI_USAGE;
	curl_global_cleanup();
	free(c.token);
	return rc;
}
