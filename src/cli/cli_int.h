/* cli_int.h: what the CLI's files share (cli.c: the commands and their tables;
 * client.c: the HTTP calls to the API, pages, name lookup and the delivery lists both
 * sides print). Not for use outside src/cli/. */
#ifndef OUTBOXD_CLI_CLI_INT_H
#define OUTBOXD_CLI_CLI_INT_H

#include <stdarg.h>
#include <stdio.h>

#include <jansson.h>

#include "cli/cli.h"
#include "cli/options.h"

struct cli {
	char url[512];
	char *token;
	int json;
};

/* The value of option key ("--status") on the command line, NULL when not given. */
static inline const char *opt(const struct cli_args *o, const char *key)
{
	return cli_args_get(o, key);
}

/* A command line the parser let through that the command still cannot run (a required
 * option missing, two that exclude each other): says why on stderr with the command's
 * usage line. Returns CLI_USAGE. */
static inline int usage_error(const struct cli_args *o, const char *fmt, ...)
{
	char usage[256];
	va_list ap;
	va_start(ap, fmt);
	fputs("outboxd: ", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nusage: %s\n",
		cli_command_usage(o->group, o->command, usage, sizeof(usage)));
	return CLI_USAGE;
}

static inline const char *str(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	return json_is_string(v) ? json_string_value(v) : "-";
}

/* Command-line filter options and the API's filter names. */
static const char *const filter_map[][2] = {
	{"--status", "status"}, {"--subscription", "subscription_id"}, {"--name", "name"},
	{"--type", "event_type"}, {"--q", "q"}, {"--code", "code"}, {"--source", "source"},
	{"--event-id", "event_id"}, {"--from", "from"}, {"--to", "to"},
	{"--min-attempts", "min_attempts"}, {"--failing-since", "failing_since"},
};
#define N_FILTERS (sizeof(filter_map) / sizeof(filter_map[0]))

/* ---- client.c -------------------------------------------------------------------------- */

int call(struct cli *c, const char *method, const char *path, const char *body,
		json_t **out);

void print_json(json_t *j);

int print_list(struct cli *c, const char *path, const char *header, void (*row)(json_t *));

int list_pages(struct cli *c, const char *path, int all, void (*header)(void),
		      void (*row)(json_t *), size_t *shown);

/* ---- tables ---------------------------------------------------------------------------- */

static const char *str(json_t *obj, const char *key);

void print_delivery_row(json_t *d);

void print_delivery_header(void);

void append_query(char *q, size_t len, const char *key, const char *value);

int resolve_name(struct cli *c, const char *list, const char *what, const char *arg,
			char *id);

int subscription_id(struct cli *c, const char *arg, char *id);

const char *filter_value(const struct cli_args *o, size_t i, const char *sub_id);

int filter_subscription(struct cli *c, const struct cli_args *o, char *sub_id);

int has_filters(const struct cli_args *o);

int list_deliveries(struct cli *c, const struct cli_args *o, const char *base);

int show_delivery(struct cli *c, const char *id);

#endif
