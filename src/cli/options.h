/* options.h: the operator CLI's command tables and the one parser that reads every
 * command's arguments against them.
 *
 * Each `outboxd <group> <command>` is one row: its options (name, whether it takes a
 * value, one line of help), how many positional arguments it takes, and its handler. The
 * parser refuses an option the row does not name (suggesting the closest one), a value
 * option without its value and a value given to a flag, the same way for every command;
 * the group and command help texts are printed from the same rows. Nothing here talks to
 * the API or knows what a command does: it only reads argv and writes to the FILE given. */
#ifndef OUTBOXD_CLI_OPTIONS_H
#define OUTBOXD_CLI_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

struct cli;       /* the API connection of the handlers (cli.c) */
struct cli_args;

struct cli_option {
	const char *name;   /* "--status" */
	const char *value;  /* the value's placeholder ("S", "URL"); NULL: a flag, no value */
	const char *help;   /* one line */
};

/* Lists of options a command takes; each list ends with a {NULL} row, and lists are
 * shared between commands (the delivery filters). */
#define CLI_OPTION_LISTS 4

struct cli_command {
	const char *name;     /* "list"; NULL for a group that is a single command (stats) */
	const char *usage;    /* what follows the command on its usage line ("ID|NAME [options]");
				 NULL: "[options]" when it has options */
	const char *summary;  /* one line for the group's help */
	int min_args;         /* positional arguments */
	int max_args;         /* -1: no limit */
	const struct cli_option *options[CLI_OPTION_LISTS]; /* NULL after the last list */
	int (*run)(struct cli *c, const struct cli_args *a);
};

struct cli_group {
	const char *name;
	const char *summary;                 /* one line for `outboxd help` */
	const struct cli_command *commands;  /* ended by a row whose run is NULL */
};

/* The options every command takes: --url URL, --token TOKEN, --json, --help (and -h). */
extern const struct cli_option cli_global_options[];

#define CLI_MAX_OPTS 64
#define CLI_MAX_ARGS 1024

/* A parsed command line. Every string is borrowed from argv or from the tables. */
struct cli_args {
	const struct cli_group *group;
	const struct cli_command *command;
	const char *names[CLI_MAX_OPTS];   /* the options given, as the table spells them */
	const char *values[CLI_MAX_OPTS];  /* their values; "true" for a flag */
	int n;
	const char *args[CLI_MAX_ARGS];    /* positional arguments, in order */
	int nargs;
	int help;                          /* --help or -h was given */
};

enum cli_parse_result {
	CLI_PARSE_OK = 0,
	CLI_PARSE_HELP = 1,    /* --help or -h given: print help, whatever else is wrong */
	CLI_PARSE_ERROR = -1,  /* err says what, naming the option or argument */
};

/* The command of group g that argv[0..argc) (the words after the group's name) names:
 * the first word that is neither a global option nor a global option's value. *at
 * receives its index in argv, or -1 when g is a single nameless command (returned
 * whatever argv holds). NULL with err empty when argv names no command; NULL with err
 * set for an unknown command (with the closest one when it is close) or an option other
 * than a global one before the command. */
const struct cli_command *cli_command_find(const struct cli_group *g, int argc,
					   char *const *argv, int *at, char *err, size_t errlen);

/* Reads argv[0..argc) (the command's words, the command's own name left out) against
 * cmd of group g into *out. Options may come before, between or after the positional
 * arguments; "--name=value" and "--name value" are the same; a flag never takes the next
 * word; "--" ends the options. The last of a repeated option counts. */
enum cli_parse_result cli_args_parse(const struct cli_group *g, const struct cli_command *cmd,
				     int argc, char *const *argv, struct cli_args *out,
				     char *err, size_t errlen);

/* The value of option name ("--status") in a, the last one given; NULL when absent. */
const char *cli_args_get(const struct cli_args *a, const char *name);

/* The candidate closest to typed by edit distance (a swap of two neighbours counts as one
 * edit), or that typed begins, when it is close enough to be a likely typo; NULL when
 * none is. Candidates are compared without leading dashes. */
const char *cli_suggest(const char *typed, const char *const *candidates, size_t n);

/* `outboxd <group> --help`: the group's commands, a usage line and a summary each. */
void cli_print_group_help(FILE *out, const struct cli_group *g);

/* `outboxd <group> <command> --help`: the command's usage line, summary, its options
 * and the global ones, one line of help each. */
void cli_print_command_help(FILE *out, const struct cli_group *g, const struct cli_command *cmd);

/* "outboxd subs show ID|NAME" (the usage line without "usage: ") into buf. Returns buf. */
char *cli_command_usage(const struct cli_group *g, const struct cli_command *cmd, char *buf,
			size_t len);

#endif
