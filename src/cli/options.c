/* options.c: the operator CLI's argument parser and help texts, read from the command
 * tables (see options.h). Must not know any command or talk to the API: what an option
 * means is its handler's business; here it is only known or unknown, flag or value. */
#include "cli/options.h"

#include <stdarg.h>
#include <string.h>

const struct cli_option cli_global_options[] = {
	{"--url", "URL", "the API (else OUTBOXD_URL, else http://127.0.0.1:8080)"},
	{"--token", "TOKEN", "the API token (else OUTBOXD_TOKEN, else ./var/admin.token)"},
	{"--json", NULL, "print the API's JSON (every page of a list)"},
	{"--help", NULL, "this help (also -h)"},
	{NULL, NULL, NULL},
};

static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	if (!errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/* "subs list", or "stats" for a single-command group, into buf. */
static const char *label(const struct cli_group *g, const struct cli_command *cmd, char *buf,
			 size_t len)
{
	snprintf(buf, len, "%s%s%s", g->name, cmd->name ? " " : "", cmd->name ? cmd->name : "");
	return buf;
}

/* The option spelled name[0..len) among the global ones and cmd's; NULL when none. */
static const struct cli_option *option_find(const struct cli_command *cmd, const char *name,
					    size_t len)
{
	for (const struct cli_option *o = cli_global_options; o->name; o++)
		if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
			return o;
	for (int i = 0; cmd && i < CLI_OPTION_LISTS && cmd->options[i]; i++)
		for (const struct cli_option *o = cmd->options[i]; o->name; o++)
			if (strlen(o->name) == len && strncmp(o->name, name, len) == 0)
				return o;
	return NULL;
}

/* Optimal string alignment distance: insertions, deletions, substitutions and swaps of
 * two neighbours cost one each. Names are short; longer ones count as far apart. */
static size_t edit_distance(const char *a, const char *b)
{
	enum { MAX = 64 };
	size_t la = strlen(a), lb = strlen(b);
	size_t d[MAX + 1][MAX + 1];

	if (la > MAX || lb > MAX)
		return (size_t)-1;
	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++) {
		for (size_t j = 1; j <= lb; j++) {
			size_t cost = a[i - 1] != b[j - 1];
			size_t best = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < best)
				best = d[i][j - 1] + 1;
			if (d[i - 1][j - 1] + cost < best)
				best = d[i - 1][j - 1] + cost;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	}
	return d[la][lb];
}

static const char *undashed(const char *s)
{
	while (*s == '-')
		s++;
	return s;
}

const char *cli_suggest(const char *typed, const char *const *candidates, size_t n)
{
	const char *t = undashed(typed), *best = NULL, *prefixed = NULL;
	size_t tl = strlen(t), best_d = (size_t)-1;
	/* one edit in a short name, two in a longer one: "--stauts" is --status, "--bogus"
	 * is nothing */
	size_t close = tl <= 2 ? 0 : tl <= 5 ? 1 : 2;

	for (size_t i = 0; i < n; i++) {
		const char *c = undashed(candidates[i]);
		size_t d = edit_distance(t, c);
		if (d <= close && d < best_d) {
			best = candidates[i];
			best_d = d;
		}
		/* the start of a longer name ("--sub" for --subscription): the shortest such */
		if (tl >= 3 && strncmp(c, t, tl) == 0 &&
		    (!prefixed || strlen(c) < strlen(undashed(prefixed))))
			prefixed = candidates[i];
	}
	return best ? best : prefixed;
}

/* The closest option name of cmd (global ones included) to typed, or NULL. */
static const char *suggest_option(const struct cli_command *cmd, const char *typed)
{
	const char *names[CLI_MAX_OPTS];
	size_t n = 0;

	for (const struct cli_option *o = cli_global_options; o->name && n < CLI_MAX_OPTS; o++)
		names[n++] = o->name;
	for (int i = 0; i < CLI_OPTION_LISTS && cmd->options[i]; i++)
		for (const struct cli_option *o = cmd->options[i]; o->name && n < CLI_MAX_OPTS; o++)
			names[n++] = o->name;
	return cli_suggest(typed, names, n);
}

const struct cli_command *cli_command_find(const struct cli_group *g, int argc,
					   char *const *argv, int *at, char *err, size_t errlen)
{
	*at = -1;
	set_err(err, errlen, "%s", "");
	if (!g->commands[0].name)
		return &g->commands[0];
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		if (a[0] == '-' && a[1]) {
			if (strcmp(a, "-h") == 0)
				continue;
			const char *eq = strchr(a, '=');
			size_t len = eq ? (size_t)(eq - a) : strlen(a);
			const struct cli_option *o = option_find(NULL, a, len);
			if (!o) {
				/* whether it takes a value is the command's to say: unknown yet */
				set_err(err, errlen, "%.*s before the command: `outboxd %s <command> "
					"%.*s ...` (outboxd %s --help lists the commands)", (int)len, a,
					g->name, (int)len, a, g->name);
				return NULL;
			}
			if (o->value && !eq)
				i++;
			continue;
		}
		*at = i;
		const char *names[64];
		size_t n = 0;
		for (const struct cli_command *c = g->commands; c->run; c++) {
			if (strcmp(c->name, a) == 0)
				return c;
			if (n < 64)
				names[n++] = c->name;
		}
		const char *close = cli_suggest(a, names, n);
		if (close)
			set_err(err, errlen, "unknown command `%s %s`; did you mean `%s %s`?", g->name,
				a, g->name, close);
		else
			set_err(err, errlen, "unknown command `%s %s` (outboxd %s --help lists the "
				"commands)", g->name, a, g->name);
		return NULL;
	}
	return NULL;
}

enum cli_parse_result cli_args_parse(const struct cli_group *g, const struct cli_command *cmd,
				     int argc, char *const *argv, struct cli_args *out,
				     char *err, size_t errlen)
{
	char what[96];
	int failed = 0, ended = 0;

	memset(out, 0, sizeof(*out));
	out->group = g;
	out->command = cmd;
	set_err(err, errlen, "%s", "");
	label(g, cmd, what, sizeof(what));
	/* The first error is kept, but every word is read: --help anywhere wins. */
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i], *value;
		if (!ended && strcmp(a, "--") == 0) {
			ended = 1;
			continue;
		}
		if (ended || a[0] != '-' || a[1] == '\0') { /* "-" alone is an argument (stdin) */
			if (out->nargs == CLI_MAX_ARGS) {
				if (!failed++)
					set_err(err, errlen, "more than %d arguments", CLI_MAX_ARGS);
				continue;
			}
			out->args[out->nargs++] = a;
			continue;
		}
		if (strcmp(a, "-h") == 0) {
			out->help = 1;
			continue;
		}
		const char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
		size_t len = eq ? (size_t)(eq - a) : strlen(a);
		const struct cli_option *o = a[1] == '-' ? option_find(cmd, a, len) : NULL;
		if (!o) {
			if (failed++)
				continue;
			char name[128];
			snprintf(name, sizeof(name), "%.*s", (int)len, a);
			const char *close = suggest_option(cmd, name);
			if (close)
				set_err(err, errlen, "unknown option %s for `%s`; did you mean %s?", name,
					what, close);
			else
				set_err(err, errlen, "unknown option %s for `%s` (outboxd %s --help "
					"lists its options)", name, what, what);
			continue;
		}
		if (strcmp(o->name, "--help") == 0) {
			out->help = 1;
			continue;
		}
		if (!o->value) {
			if (eq) {
				if (!failed++)
					set_err(err, errlen, "%s takes no value (`%s`, not `%s`)", o->name,
						o->name, a);
				continue;
			}
			value = "true";
		} else if (eq) {
			value = eq + 1;
		} else if (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0 &&
			   strcmp(argv[i + 1], "-h") != 0) {
			value = argv[++i];
		} else {
			/* the next word is an option: a value starting with "--" is --name=--value */
			if (!failed++)
				set_err(err, errlen, "%s needs a value: %s %s", o->name, o->name, o->value);
			continue;
		}
		if (out->n == CLI_MAX_OPTS) {
			if (!failed++)
				set_err(err, errlen, "more than %d options", CLI_MAX_OPTS);
			continue;
		}
		out->names[out->n] = o->name;
		out->values[out->n++] = value;
	}
	if (out->help)
		return CLI_PARSE_HELP;
	if (failed)
		return CLI_PARSE_ERROR;
	if (out->nargs < cmd->min_args) {
		char usage[256];
		set_err(err, errlen, "`%s` needs %d argument%s: %s", what, cmd->min_args,
			cmd->min_args == 1 ? "" : "s", cli_command_usage(g, cmd, usage, sizeof(usage)));
		return CLI_PARSE_ERROR;
	}
	if (cmd->max_args >= 0 && out->nargs > cmd->max_args) {
		set_err(err, errlen, "unexpected argument \"%s\" for `%s`", out->args[cmd->max_args],
			what);
		return CLI_PARSE_ERROR;
	}
	return CLI_PARSE_OK;
}

const char *cli_args_get(const struct cli_args *a, const char *name)
{
	for (int i = a->n - 1; i >= 0; i--)
		if (strcmp(a->names[i], name) == 0)
			return a->values[i];
	return NULL;
}

static int has_options(const struct cli_command *cmd)
{
	return cmd->options[0] != NULL;
}

char *cli_command_usage(const struct cli_group *g, const struct cli_command *cmd, char *buf,
			size_t len)
{
	char what[96];
	const char *rest = cmd->usage ? cmd->usage : has_options(cmd) ? "[options]" : "";
	snprintf(buf, len, "outboxd %s%s%s", label(g, cmd, what, sizeof(what)), *rest ? " " : "",
		 rest);
	return buf;
}

/* "  LEFT   help" with help in column width, or on the next line when LEFT is wider. */
static void print_row(FILE *out, const char *left, const char *help, int width)
{
	if ((int)strlen(left) + 2 > width)
		fprintf(out, "  %s\n  %*s%s\n", left, width, "", help);
	else
		fprintf(out, "  %-*s%s\n", width, left, help);
}

static void print_options(FILE *out, const struct cli_option *list)
{
	for (const struct cli_option *o = list; o->name; o++) {
		char left[96];
		snprintf(left, sizeof(left), "%s%s%s", o->name, o->value ? " " : "",
			 o->value ? o->value : "");
		print_row(out, left, o->help, 28);
	}
}

void cli_print_command_help(FILE *out, const struct cli_group *g, const struct cli_command *cmd)
{
	char usage[256];
	fprintf(out, "usage: %s\n\n%s\n", cli_command_usage(g, cmd, usage, sizeof(usage)),
		cmd->summary);
	if (has_options(cmd)) {
		fputs("\noptions:\n", out);
		for (int i = 0; i < CLI_OPTION_LISTS && cmd->options[i]; i++)
			print_options(out, cmd->options[i]);
	}
	fputs("\nglobal options (before or after the command):\n", out);
	print_options(out, cli_global_options);
}

void cli_print_group_help(FILE *out, const struct cli_group *g)
{
	if (!g->commands[0].name) {
		cli_print_command_help(out, g, &g->commands[0]);
		return;
	}
	fprintf(out, "usage: outboxd [--url URL] [--token TOKEN] [--json] %s <command> [options]\n\n"
		     "%s\n\n", g->name, g->summary);
	for (const struct cli_command *c = g->commands; c->run; c++) {
		char usage[256];
		/* the usage line without the leading "outboxd " */
		print_row(out, cli_command_usage(g, c, usage, sizeof(usage)) + 8, c->summary, 30);
	}
	fprintf(out, "\noutboxd %s <command> --help shows a command's options.\n", g->name);
}
