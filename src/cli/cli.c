/* cli.c: `outboxd <group> <command>` — the operator CLI over the HTTP API.
 *
 * Each command builds one API call (list commands follow next_cursor for every page),
 * prints a table or, with --json, the API's JSON (the calls and paging: client.c), and
 * exits with enum cli_exit. Every
 * command is one row of the tables at the end of this file (cli/options.h): its options,
 * its arguments and its handler; the parser checks a command line against the row before
 * the handler runs, so a handler reads only options its row names. */
#include "cli/cli_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "cli/options.h"
#include "core/model.h"
#include "util/duration.h"
#include "util/file.h"
#include "util/uuid.h"

static int run_events_send(struct cli *c, const struct cli_args *o)
{
	json_t *r;
	int rc;
	const char *type = opt(o, "--type"), *data = opt(o, "--data");
	const char *file = opt(o, "--data-file"), *b64 = opt(o, "--base64");

	if (!type || (!!data + !!file + !!b64) != 1)
		return usage_error(o, "events send needs --type and one of --data, --data-file "
				   "and --base64");
	char *text = NULL;
	if (file) {
		FILE *f = strcmp(file, "-") == 0 ? stdin : fopen(file, "r");
		if (!f) {
			perror(file);
			return CLI_USAGE;
		}
		text = file_read_stream(f, NULL);
		if (f != stdin)
			fclose(f);
		if (!text) {
			fprintf(stderr, "outboxd: cannot read %s\n", file);
			return CLI_USAGE;
		}
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

static int run_events_show(struct cli *c, const struct cli_args *o)
{
	char path[256];
	json_t *r;
	int rc;

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

static void print_event_header(void)
{
	printf("%-36s  %-24s  %-16s  %-16s  %-24s  %s\n", "ID", "EVENT TYPE", "SOURCE",
	       "SOURCE EVENT ID", "CREATED", "DELIVERIES");
}

/* An event of the search with its deliveries by state, the states it has only. */
static void print_event_row(json_t *e)
{
	static const char *const states[][2] = {{"PROCESSED", "processed"}, {"NEW", "new"},
		{"FAILED_RETRYING", "retrying"}, {"FAILED_DEAD", "dead"}};
	json_t *counts = json_object_get(e, "delivery_counts");
	char by[128] = "";
	for (size_t i = 0; i < sizeof(states) / sizeof(states[0]); i++) {
		long long n = (long long)json_integer_value(json_object_get(counts, states[i][0]));
		size_t used = strlen(by);
		if (n)
			snprintf(by + used, sizeof(by) - used, "%s%lld %s", used ? ", " : "", n,
				 states[i][1]);
	}
	printf("%-36s  %-24.24s  %-16.16s  %-16.16s  %-24s  %s\n", str(e, "id"),
	       str(e, "event_type"), str(e, "source"), str(e, "source_event_id"),
	       str(e, "created_at"), by[0] ? by : "none");
}

static void print_type_header(void)
{
	printf("%-48s  %-24s  %s\n", "EVENT TYPE", "LAST SEEN", "SUBSCRIPTIONS");
}

static void print_type_row(json_t *t)
{
	json_int_t subs = json_integer_value(json_object_get(t, "subscriptions"));
	printf("%-48s  %-24s  ", json_string_value(json_object_get(t, "event_type")),
	       json_string_value(json_object_get(t, "last_seen")));
	if (subs)
		printf("%lld\n", (long long)subs);
	else
		printf("none (stored, delivered to nobody)\n");
}

/* events types: every type of the stored events (every page). */
static int run_events_types(struct cli *c, const struct cli_args *o)
{
	size_t shown = 0;
	int rc = list_pages(c, "/v1/event-types?limit=1000", 1, print_type_header,
			    print_type_row, &shown);
	if (rc == CLI_OK && !c->json)
		printf("%zu event types\n", shown);
	return rc;
}

/* events list: the event search, newest first, one page, or every page with --all or
 * --json. */
static int run_events_list(struct cli *c, const struct cli_args *o)
{
	static const char *const search_map[][2] = {
		{"--type", "event_type"}, {"--source", "source"},
		{"--source-event-id", "source_event_id"}, {"--id", "id"}, {"--from", "from"},
		{"--to", "to"}, {"--filter", "filter"},
	};
	char path[2048] = "/v1/events";
	int all = c->json || opt(o, "--all");
	size_t shown = 0;

	for (size_t i = 0; i < sizeof(search_map) / sizeof(search_map[0]); i++)
		append_query(path, sizeof(path), search_map[i][1], opt(o, search_map[i][0]));
	append_query(path, sizeof(path), "limit", opt(o, "--limit") ? opt(o, "--limit")
							: all ? "1000" : "50");
	int rc = list_pages(c, path, all, print_event_header, print_event_row, &shown);
	if (rc)
		return rc;
	if (!c->json)
		printf("%zu events\n", shown);
	return CLI_OK;
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
static json_t *read_body(const struct cli_args *o)
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

static void sub_header(char *buf, size_t len)
{
	snprintf(buf, len, "%-36s  %-20s  %-7s  %-24s  %s\n", "ID", "NAME", "ENABLED",
		 "EVENT TYPES", "ENDPOINT");
}

static void print_sub_header(void)
{
	char header[160];
	sub_header(header, sizeof(header));
	fputs(header, stdout);
}

/* subs list: every subscription, or with --name those of that name or glob (every page
 * of them). */
static int run_subs_list(struct cli *c, const struct cli_args *o)
{
	char path[1200] = "/v1/subscriptions";
	size_t shown;

	if (!opt(o, "--name")) {
		char header[160];
		sub_header(header, sizeof(header));
		return print_list(c, path, header, print_sub_row);
	}
	append_query(path, sizeof(path), "name", opt(o, "--name"));
	append_query(path, sizeof(path), "limit", "1000");
	int rc = list_pages(c, path, 1, print_sub_header, print_sub_row, &shown);
	if (rc == CLI_OK && !c->json && shown == 0)
		fprintf(stderr, "no subscription's name matches %s\n", opt(o, "--name"));
	return rc;
}

/* "billing (01a2...)" for a subscription named on the command line, its id alone for one
 * given by id. */
static const char *named(const char *arg, const char *id, char *buf, size_t len)
{
	if (strcmp(arg, id) == 0)
		snprintf(buf, len, "%s", id);
	else
		snprintf(buf, len, "%s (%s)", arg, id);
	return buf;
}

static int subs_enable(struct cli *c, const struct cli_args *o, int on)
{
	char path[256], id[UUID_STR_LEN], shown[320];
	json_t *r = NULL;
	int rc = subscription_id(c, o->args[0], id);
	if (rc)
		return rc;
	snprintf(path, sizeof(path), "/v1/subscriptions/%s", id);
	if ((rc = call(c, "PATCH", path, on ? "{\"enabled\":true}" : "{\"enabled\":false}", &r)))
		return rc;
	if (c->json)
		print_json(r);
	else
		printf("%s %s\n", on ? "enabled" : "disabled", named(o->args[0], id, shown, sizeof(shown)));
	json_decref(r);
	return CLI_OK;
}

static int run_subs_enable(struct cli *c, const struct cli_args *o)
{
	return subs_enable(c, o, 1);
}

static int run_subs_disable(struct cli *c, const struct cli_args *o)
{
	return subs_enable(c, o, 0);
}

static int run_subs_show(struct cli *c, const struct cli_args *o)
{
	char path[256], id[UUID_STR_LEN];
	json_t *r = NULL;
	int rc = subscription_id(c, o->args[0], id);
	if (rc)
		return rc;
	snprintf(path, sizeof(path), "/v1/subscriptions/%s", id);
	if ((rc = call(c, "GET", path, NULL, &r)))
		return rc;
	print_json(r);
	json_decref(r);
	return CLI_OK;
}

static int run_subs_delete(struct cli *c, const struct cli_args *o)
{
	char path[256], id[UUID_STR_LEN], shown[320];
	json_t *r = NULL;
	int rc = subscription_id(c, o->args[0], id);
	if (rc)
		return rc;
	snprintf(path, sizeof(path), "/v1/subscriptions/%s", id);
	if ((rc = call(c, "DELETE", path, NULL, &r)))
		return rc;
	printf("deleted %s\n", named(o->args[0], id, shown, sizeof(shown)));
	json_decref(r);
	return CLI_OK;
}

/* subs create, and subs update of the subscription the first argument names. */
static int subs_write(struct cli *c, const struct cli_args *o, int create)
{
	char path[256], id[UUID_STR_LEN];
	json_t *r = NULL;
	int rc;

	if (!create && (rc = subscription_id(c, o->args[0], id)))
		return rc;
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
	if (opt(o, "--filter")) {
		json_error_t jerr;
		json_t *filter = strcmp(opt(o, "--filter"), "none") == 0
					 ? json_null()
					 : json_loads(opt(o, "--filter"), 0, &jerr);
		if (!filter) {
			fprintf(stderr, "outboxd: --filter is not JSON: %s\n", jerr.text);
			json_decref(doc);
			return CLI_USAGE;
		}
		json_object_set_new(doc, "filter", filter);
	}
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
		snprintf(path, sizeof(path), "/v1/subscriptions/%s", id);
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

static int run_subs_create(struct cli *c, const struct cli_args *o)
{
	return subs_write(c, o, 1);
}

static int run_subs_update(struct cli *c, const struct cli_args *o)
{
	return subs_write(c, o, 0);
}

static int run_deliveries_list(struct cli *c, const struct cli_args *o)
{
	return list_deliveries(c, o, "/v1/deliveries");
}

static int run_deliveries_show(struct cli *c, const struct cli_args *o)
{
	return show_delivery(c, o->args[0]);
}

/* The filter object of a replay or purge from the command-line filter options, into
 * *out (returned to the caller). Returns CLI_OK, or the code of resolving --subscription. */
static int filter_from_opts(struct cli *c, const struct cli_args *o, json_t **out)
{
	char sub_id[UUID_STR_LEN];
	int rc = filter_subscription(c, o, sub_id);
	*out = NULL;
	if (rc)
		return rc;
	json_t *f = json_object();
	for (size_t i = 0; i < N_FILTERS; i++)
		if (filter_value(o, i, sub_id))
			json_object_set_new(f, filter_map[i][1], json_string(filter_value(o, i, sub_id)));
	*out = f;
	return CLI_OK;
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

/* dlq replay ID... (at once) or dlq replay [filters] (a paced job, followed unless
 * --no-wait). */
static int run_dlq_replay(struct cli *c, const struct cli_args *o)
{
	json_t *r, *filter;
	int rc;
	/* ids and a filter are two kinds of replay: one must not quietly drop the other */
	if (o->nargs && (has_filters(o) || opt(o, "--dry-run") || opt(o, "--rate")))
		return usage_error(o, "dlq replay takes ids or filters (with --dry-run, --rate), "
				   "not both");
	json_t *req = json_object();
	if (o->nargs) {
		json_t *ids = json_array();
		for (int i = 0; i < o->nargs; i++)
			json_array_append_new(ids, json_string(o->args[i]));
		json_object_set_new(req, "ids", ids);
	} else {
		if ((rc = filter_from_opts(c, o, &filter))) {
			json_decref(req);
			return rc;
		}
		json_object_set_new(req, "filter", filter);
		if (opt(o, "--dry-run"))
			json_object_set_new(req, "dry_run", json_true());
		if (opt(o, "--rate"))
			json_object_set_new(req, "rate", json_integer(atoi(opt(o, "--rate"))));
	}
	if (opt(o, "--force"))
		json_object_set_new(req, "force", json_true());
	char *body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	rc = call(c, "POST", "/v1/dlq/replay", body, &r);
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

/* dlq purge ID (one dead delivery) or dlq purge [filters] | --all. */
static int run_dlq_purge(struct cli *c, const struct cli_args *o)
{
	json_t *r, *f;
	int rc;

	if (o->nargs == 1) {
		char path[256];
		if (has_filters(o) || opt(o, "--dry-run") || opt(o, "--all"))
			return usage_error(o, "dlq purge takes an id or filters (with --dry-run, "
					   "--all), not both");
		snprintf(path, sizeof(path), "/v1/dlq/%s", o->args[0]);
		if ((rc = call(c, "DELETE", path, NULL, &r)))
			return rc;
		printf("purged %s\n", o->args[0]);
		json_decref(r);
		return CLI_OK;
	}
	if (!has_filters(o) && !opt(o, "--all") && !opt(o, "--dry-run"))
		return usage_error(o, "give filters, or --all to purge the whole dead-letter queue");
	if ((rc = filter_from_opts(c, o, &f)))
		return rc;
	json_t *req = json_pack("{s:o}", "filter", f);
	if (opt(o, "--dry-run"))
		json_object_set_new(req, "dry_run", json_true());
	char *body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	rc = call(c, "POST", "/v1/dlq/purge", body, &r);
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
static int run_jobs_list(struct cli *c, const struct cli_args *o)
{
	char path[512] = "/v1/jobs";
	int all = c->json || opt(o, "--all");
	size_t shown = 0;

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

/* jobs show ID, jobs cancel ID: the job's line after the call. */
static int job_call(struct cli *c, const struct cli_args *o, int cancel)
{
	char path[160];
	json_t *r;
	int rc;

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

static int run_jobs_show(struct cli *c, const struct cli_args *o)
{
	return job_call(c, o, 0);
}

static int run_jobs_cancel(struct cli *c, const struct cli_args *o)
{
	return job_call(c, o, 1);
}

static int run_jobs_wait(struct cli *c, const struct cli_args *o)
{
	return follow_job(c, o->args[0]);
}

/* An age for a person: whole seconds under an hour, whole minutes under two days, whole
 * hours beyond, written as a duration ("45s", "62m", "3d"). Returns buf. */
static const char *age_text(long long ms, char *buf, size_t len)
{
	long long unit = ms < 3600000 ? 1000 : ms < 2 * 86400000LL ? 60000 : 3600000;
	return duration_format(ms < 0 ? 0 : ms / unit * unit, buf, len);
}

static int run_stats(struct cli *c, const struct cli_args *o)
{
	json_t *r;
	char path[64] = "/v1/stats";
	append_query(path, sizeof(path), "subscriptions_limit", opt(o, "--top"));
	int rc = call(c, "GET", path, NULL, &r);
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
	char age[32];
	if (json_is_string(json_object_get(fl, "oldest_since")))
		printf("failing      %lld deliveries still retried, the oldest failing since %s "
		       "(%s)\n",
		       (long long)json_integer_value(json_object_get(fl, "deliveries")),
		       str(fl, "oldest_since"),
		       age_text(json_integer_value(json_object_get(fl, "oldest_age_ms")), age,
				sizeof(age)));
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
	json_int_t total = json_integer_value(json_object_get(r, "subscriptions_total"));
	if ((size_t)total > json_array_size(json_object_get(r, "subscriptions")))
		printf("%zu of %lld subscriptions shown, failing first\n",
		       json_array_size(json_object_get(r, "subscriptions")), (long long)total);
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

static int run_dlq_list(struct cli *c, const struct cli_args *o)
{
	return list_deliveries(c, o, "/v1/dlq");
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

static int run_tokens_list(struct cli *c, const struct cli_args *o)
{
	char header[256];
	snprintf(header, sizeof(header), "%-36s  %-20s  %-22s  %-8s  %-24s  %-24s  %s\n", "ID",
		 "NAME", "SCOPES", "PREFIX", "CREATED", "EXPIRES", "LAST USED");
	return print_list(c, "/v1/tokens", header, print_token_row);
}

/* tokens revoke ID|NAME (token names are unique like subscription names) */
static int run_tokens_revoke(struct cli *c, const struct cli_args *o)
{
	char path[128], id[UUID_STR_LEN], shown[320];
	json_t *r = NULL;
	int rc = resolve_name(c, "/v1/tokens", "token", o->args[0], id);
	if (rc)
		return rc;
	snprintf(path, sizeof(path), "/v1/tokens/%s", id);
	if ((rc = call(c, "DELETE", path, NULL, &r)))
		return rc;
	printf("revoked %s\n", named(o->args[0], id, shown, sizeof(shown)));
	json_decref(r);
	return CLI_OK;
}

/* tokens create NAME --scopes a,b [--ttl D | --expires-at T] */
static int run_tokens_create(struct cli *c, const struct cli_args *o)
{
	json_t *r = NULL;
	int rc;

	if (!opt(o, "--scopes"))
		return usage_error(o, "tokens create needs --scopes");
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
		printf("\ntoken (shown this once; only its hash is kept):\n%s\n", str(r, "token"));
	}
	json_decref(r);
	return CLI_OK;
}

/* ---- the command tables ------------------------------------------------------------------ */

#define END {NULL, NULL, NULL}

static const struct cli_option status_option[] = {
	{"--status", "S", "NEW, PROCESSED or FAILED"},
	END,
};

/* The delivery filters of lists, replays and purges (filter_map gives their API names). */
static const struct cli_option filter_options[] = {
	{"--subscription", "ID|NAME", "one subscription, by id or name"},
	{"--name", "NAME", "one subscription, by name"},
	{"--type", "T", "the event type, or a glob (order.*)"},
	{"--q", "TEXT", "text in the last error's message or cause"},
	{"--code", "N", "the last error's code (503)"},
	{"--source", "S", "the event's source"},
	{"--event-id", "ID", "the deliveries of one event"},
	{"--from", "RFC3339", "created at or after"},
	{"--to", "RFC3339", "created before"},
	{"--min-attempts", "N", "tried at least N times"},
	{"--failing-since", "RFC3339|DURATION", "failing at least since then, or that long (1h)"},
	END,
};

static const struct cli_option event_search_options[] = {
	{"--type", "T", "the event type, or a glob (order.*)"},
	{"--source", "S", "the event's source"},
	{"--source-event-id", "ID", "the producer's idempotency key"},
	{"--id", "ID", "one event"},
	{"--from", "RFC3339", "created at or after"},
	{"--to", "RFC3339", "created before"},
	{"--filter", "JSON", "only those whose payload matches ({\"order\":1042}; reads at most 10,000 a page)"},
	END,
};

static const struct cli_option list_options[] = {
	{"--failing", NULL, "what is failing now, dead or still retried"},
	{"--sort", "created_at|updated_at|attempt_count", "the order (default created_at)"},
	{"--order", "asc|desc", "ascending (default) or descending"},
	END,
};

/* The pages of a list: one, or every page (--json gathers every page anyway). */
static const struct cli_option paging_options[] = {
	{"--limit", "N", "rows per page (default 50)"},
	{"--all", NULL, "every page"},
	END,
};

static const struct cli_option replay_options[] = {
	{"--rate", "N", "deliveries per second of a filter replay (replay_rate)"},
	{"--dry-run", NULL, "count what a filter replay would take; change nothing"},
	{"--force", NULL, "also PROCESSED deliveries: a deliberate re-send"},
	{"--no-wait", NULL, "start the job, do not follow it"},
	END,
};

static const struct cli_option purge_options[] = {
	{"--dry-run", NULL, "count what would be purged; delete nothing"},
	{"--all", NULL, "the whole dead-letter queue (without filters)"},
	END,
};

static const struct cli_option send_options[] = {
	{"--type", "TYPE", "the event type"},
	{"--data", "JSON", "the payload"},
	{"--data-file", "FILE", "the payload from a file (- for standard input)"},
	{"--base64", "B64", "a binary payload, base64"},
	{"--source", "S", "who produced it"},
	{"--source-event-id", "ID", "the producer's id: sent again, it is a duplicate"},
	{"--partition-key", "K", "the key deliveries are ordered by"},
	END,
};

static const struct cli_option sub_options[] = {
	{"--name", "N", "its name, unique"},
	{"--endpoint", "URL", "where its deliveries go"},
	{"--types", "a.*,b", "the event types it takes (globs)"},
	{"--secret", "whsec_...|generate", "the signing secret (generate: outboxd makes one)"},
	{"--format", "json|binary", "the payload format"},
	{"--filter", "JSON|none", "its payload filter ({\"data.amount\":{\"$gte\":100}}); none removes it"},
	{"--body", "JSON|@FILE|-", "the API's JSON (@FILE, - for stdin); options override it"},
	END,
};

static const struct cli_option subs_list_options[] = {
	{"--name", "N|GLOB", "that name, or the names a glob (* any run, ? one) matches, case ignored"},
	END,
};

static const struct cli_option enabled_option[] = {
	{"--enabled", "true|false", "enable or disable it"},
	END,
};

static const struct cli_option jobs_options[] = {
	{"--state", "running|done|cancelled|failed", "only jobs in this state"},
	END,
};

static const struct cli_option token_options[] = {
	{"--scopes", "LIST", "ingest,read,operate,admin: what it may do"},
	{"--ttl", "DURATION", "it expires after this long (90d)"},
	{"--expires-at", "TIME", "it expires then (RFC 3339)"},
	END,
};

#define NO_OPTIONS {NULL}
#define LAST {NULL, NULL, NULL, 0, 0, NO_OPTIONS, NULL}

static const struct cli_command events_commands[] = {
	{"send", "--type TYPE (--data JSON | --data-file FILE | --base64 B64) [options]",
	 "send one event", 0, 0, {send_options}, run_events_send},
	{"list", "[filters] [options]", "events newest first, their deliveries counted", 0, 0,
	 {event_search_options, paging_options}, run_events_list},
	{"show", "ID", "an event and its deliveries", 1, 1, NO_OPTIONS, run_events_show},
	{"types", NULL, "the types of the stored events: last seen, subscriptions taking each", 0,
	 0, NO_OPTIONS, run_events_types},
	LAST,
};

static const struct cli_command subs_commands[] = {
	{"create", "--name N --endpoint URL --types a.*,b [options]",
	 "create a subscription (options, a JSON body, or both)", 0, 0, {sub_options},
	 run_subs_create},
	{"list", "[--name N|GLOB]", "every subscription, or those of a name or glob (acme-*)", 0, 0,
	 {subs_list_options}, run_subs_list},
	{"show", "ID|NAME", "one subscription's JSON (credentials masked)", 1, 1, NO_OPTIONS,
	 run_subs_show},
	{"update", "ID|NAME [options]", "change a subscription (a JSON merge patch)",
	 1, 1, {sub_options, enabled_option}, run_subs_update},
	{"enable", "ID|NAME", "enable one (also after outboxd disabled it)", 1, 1,
	 NO_OPTIONS, run_subs_enable},
	{"disable", "ID|NAME", "disable one; its deliveries wait", 1, 1,
	 NO_OPTIONS, run_subs_disable},
	{"delete", "ID|NAME", "delete one; its pending deliveries go to the DLQ",
	 1, 1, NO_OPTIONS, run_subs_delete},
	LAST,
};

static const struct cli_command deliveries_commands[] = {
	{"list", "[filters] [options]", "deliveries, one page (every page: --all)", 0, 0,
	 {status_option, filter_options, list_options, paging_options}, run_deliveries_list},
	{"show", "ID", "one delivery with every attempt", 1, 1, NO_OPTIONS, run_deliveries_show},
	LAST,
};

static const struct cli_command dlq_commands[] = {
	{"list", "[filters] [options]", "dead-lettered deliveries", 0, 0,
	 {status_option, filter_options, list_options, paging_options}, run_dlq_list},
	{"replay", "ID... | [filters] [options]",
	 "replay deliveries now, or by filter as a paced job", 0, -1,
	 {status_option, filter_options, replay_options}, run_dlq_replay},
	{"purge", "ID | [filters] [--dry-run] | --all",
	 "delete dead deliveries and their history", 0, 1,
	 {filter_options, purge_options}, run_dlq_purge},
	LAST,
};

static const struct cli_command jobs_commands[] = {
	{"list", NULL, "replay jobs, newest first: progress, who started them", 0, 0,
	 {jobs_options, paging_options}, run_jobs_list},
	{"show", "ID", "a replay job's progress", 1, 1, NO_OPTIONS, run_jobs_show},
	{"wait", "ID", "follow a replay job until it ends", 1, 1, NO_OPTIONS, run_jobs_wait},
	{"cancel", "ID", "stop a replay job", 1, 1, NO_OPTIONS, run_jobs_cancel},
	LAST,
};

static const struct cli_command tokens_commands[] = {
	{"create", "NAME --scopes LIST [--ttl DURATION | --expires-at TIME]",
	 "a named token, printed once (expires only if asked)", 1, 1,
	 {token_options}, run_tokens_create},
	{"list", NULL, "named tokens with their scopes, expiry and last use", 0, 0, NO_OPTIONS,
	 run_tokens_list},
	{"revoke", "ID|NAME", "revoke one", 1, 1, NO_OPTIONS, run_tokens_revoke},
	LAST,
};

static const struct cli_option stats_options[] = {
	{"--top", "N", "only the N subscriptions to look at first (failing first)"},
	END,
};

/* `outboxd stats` is the group's only command: no command word. */
static const struct cli_command stats_commands[] = {
	{NULL, NULL, "counts, DLQ depth, per-subscription success, endpoints", 0,
	 0, {stats_options}, run_stats},
	LAST,
};

/* The command groups: what dispatch, the help texts, cli_is_group and `outboxd help`
 * (cli_print_groups) read. */
static const struct cli_group groups[] = {
	{"events", "send, search and show events", events_commands},
	{"subs", "manage subscriptions", subs_commands},
	{"deliveries", "list and inspect deliveries", deliveries_commands},
	{"dlq", "the dead-letter queue: list, replay, purge", dlq_commands},
	{"jobs", "list, follow or cancel replay jobs", jobs_commands},
	{"tokens", "named API tokens with scopes: create, list, revoke", tokens_commands},
	{"stats", "counts, DLQ depth, per-subscription health", stats_commands},
};
#define N_GROUPS (sizeof(groups) / sizeof(groups[0]))

static const struct cli_group *group_find(const char *name)
{
	for (size_t i = 0; i < N_GROUPS; i++)
		if (strcmp(groups[i].name, name) == 0)
			return &groups[i];
	return NULL;
}

/* What the help texts end with: where the API and the token are found (the group's
 * help), and the exit codes (every help). */
static void help_footer(FILE *out, int group)
{
	if (group)
		fputs("\n"
		      "The API is found at --url, OUTBOXD_URL or http://127.0.0.1:8080 (an https:// API\n"
		      "with a private CA: OUTBOXD_CA_FILE names the CA); the token is --token,\n"
		      "OUTBOXD_TOKEN, or ./var/admin.token. A subscription's name will do wherever its\n"
		      "ID is asked for, and a token's for tokens revoke.\n",
		      out);
	fputs(group ? "" : "\n", out);
	fputs("Exit codes: 0 ok, 1 the API answered with an error, 2 bad usage, 3 the API cannot\n"
	      "be reached.\n", out);
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

static int wants_help(int argc, char *const *argv)
{
	for (int i = 0; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return 1;
	return 0;
}

int cli_main(int argc, char **argv)
{
	static struct cli_args o; /* large; one per process */
	struct cli c = {0};
	char err[512];
	int at, n = 0, rc;

	const struct cli_group *g = argc >= 1 ? group_find(argv[0]) : NULL;
	if (!g)
		return CLI_USAGE;
	const struct cli_command *cmd = cli_command_find(g, argc - 1, argv + 1, &at, err,
							 sizeof(err));
	if (!cmd) {
		int help = wants_help(argc - 1, argv + 1);
		if (err[0] && !help) {
			fprintf(stderr, "outboxd: %s\n", err);
			return CLI_USAGE;
		}
		cli_print_group_help(help ? stdout : stderr, g);
		help_footer(help ? stdout : stderr, 1);
		return help ? CLI_OK : CLI_USAGE;
	}
	/* the command's words: all but the group and the command's own name */
	char **words = calloc((size_t)argc, sizeof(*words));
	if (!words)
		return CLI_USAGE;
	for (int i = 1; i < argc; i++)
		if (i - 1 != at)
			words[n++] = argv[i];
	enum cli_parse_result parsed = cli_args_parse(g, cmd, n, words, &o, err, sizeof(err));
	free(words); /* o keeps pointers to the strings, which are argv's */
	switch (parsed) {
	case CLI_PARSE_HELP:
		cli_print_command_help(stdout, g, cmd);
		help_footer(stdout, !cmd->name); /* stats: the group's help */
		return CLI_OK;
	case CLI_PARSE_ERROR:
		fprintf(stderr, "outboxd: %s\n", err);
		return CLI_USAGE;
	case CLI_PARSE_OK:
		break;
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

	curl_global_init(CURL_GLOBAL_DEFAULT);
	rc = cmd->run(&c, &o);
	curl_global_cleanup();
	free(c.token);
	return rc;
}
