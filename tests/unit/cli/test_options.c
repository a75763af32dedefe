/* test_options.c: the operator CLI's argument parser (cli/options.c) against a small
 * command table of its own: unknown options refused with the closest known one, flags
 * that never take the next word, values that must be there, positional counts, --help
 * winning over errors, and the help texts printed from the table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/options.h"

static int run_nothing(struct cli *c, const struct cli_args *a)
{
	(void)c;
	(void)a;
	return 0;
}

static const struct cli_option filters[] = {
	{"--status", "S", "a status"},
	{"--subscription", "ID|NAME", "one subscription"},
	{"--name", "NAME", "one subscription, by name"},
	{"--failing-since", "DURATION", "failing that long"},
	{NULL, NULL, NULL},
};

static const struct cli_option paging[] = {
	{"--failing", NULL, "failing now"},
	{"--all", NULL, "every page"},
	{"--limit", "N", "rows per page"},
	{NULL, NULL, NULL},
};

static const struct cli_command sample_commands[] = {
	{"list", NULL, "list things", 0, 0, {filters, paging}, run_nothing},
	{"show", "ID|NAME", "show one thing", 1, 1, {NULL}, run_nothing},
	{"replay", "ID...", "replay some", 0, -1, {filters}, run_nothing},
	{NULL, NULL, NULL, 0, 0, {NULL}, NULL},
};
static const struct cli_group sample = {"things", "manage things", sample_commands};

static const struct cli_command single_commands[] = {
	{NULL, NULL, "the counts", 0, 0, {NULL}, run_nothing},
	{NULL, NULL, NULL, 0, 0, {NULL}, NULL},
};
static const struct cli_group single = {"counts", "counts of things", single_commands};

static const struct cli_group other = {"other", "another group", sample_commands + 1};

static struct cli_args args;
static char err[512];

/* Parses the space-separated words of line against command name of sample. */
static enum cli_parse_result parse(const char *name, const char *line)
{
	static char copy[1024];
	char *words[64];
	int n = 0;
	const struct cli_command *cmd = NULL;

	for (const struct cli_command *c = sample_commands; c->run; c++)
		if (strcmp(c->name, name) == 0)
			cmd = c;
	assert_non_null(cmd);
	snprintf(copy, sizeof(copy), "%s", line);
	for (char *save = NULL, *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save))
		words[n++] = w;
	return cli_args_parse(&sample, cmd, n, words, &args, err, sizeof(err));
}

static void test_unknown_options(void **state)
{
	(void)state;
	assert_int_equal(parse("list", "--bogus x"), CLI_PARSE_ERROR);
	assert_string_equal(err, "unknown option --bogus for `things list` (outboxd things list "
				 "--help lists its options)");
	/* with a value attached the option is still named alone */
	assert_int_equal(parse("list", "--bogus=1"), CLI_PARSE_ERROR);
	assert_non_null(strstr(err, "unknown option --bogus for"));
	assert_null(strstr(err, "=1"));
	/* a typo gets the closest option */
	assert_int_equal(parse("list", "--stauts NEW"), CLI_PARSE_ERROR);
	assert_string_equal(err, "unknown option --stauts for `things list`; did you mean --status?");
	assert_int_equal(parse("list", "--limt 5"), CLI_PARSE_ERROR);
	assert_non_null(strstr(err, "did you mean --limit?"));
	/* the start of a longer name */
	assert_int_equal(parse("list", "--sub x"), CLI_PARSE_ERROR);
	assert_non_null(strstr(err, "did you mean --subscription?"));
	/* a global option is close too */
	assert_int_equal(parse("show", "x --jsn"), CLI_PARSE_ERROR);
	assert_non_null(strstr(err, "did you mean --json?"));
	/* an option of another command is unknown here */
	assert_int_equal(parse("show", "x --limit 5"), CLI_PARSE_ERROR);
	assert_non_null(strstr(err, "unknown option --limit for `things show`"));
	/* single-dash words other than -h and - are options, and unknown */
	assert_int_equal(parse("show", "x -v"), CLI_PARSE_ERROR);
	assert_non_null(strstr(err, "unknown option -v"));
}

static void test_flags_and_values(void **state)
{
	(void)state;
	/* a flag never takes the next word: x is an argument, so show gets exactly one */
	assert_int_equal(parse("show", "--json x"), CLI_PARSE_OK);
	assert_int_equal(args.nargs, 1);
	assert_string_equal(args.args[0], "x");
	assert_string_equal(cli_args_get(&args, "--json"), "true");
	assert_int_equal(parse("list", "--all x"), CLI_PARSE_ERROR);
	assert_string_equal(err, "unexpected argument \"x\" for `things list`");

	/* "--name value" and "--name=value" */
	assert_int_equal(parse("list", "--status FAILED --limit=5 --failing"), CLI_PARSE_OK);
	assert_string_equal(cli_args_get(&args, "--status"), "FAILED");
	assert_string_equal(cli_args_get(&args, "--limit"), "5");
	assert_string_equal(cli_args_get(&args, "--failing"), "true");
	assert_null(cli_args_get(&args, "--all"));
	assert_int_equal(parse("list", "--name="), CLI_PARSE_OK);
	assert_string_equal(cli_args_get(&args, "--name"), "");

	/* the last of a repeated option counts */
	assert_int_equal(parse("list", "--status NEW --status FAILED"), CLI_PARSE_OK);
	assert_string_equal(cli_args_get(&args, "--status"), "FAILED");

	/* a value option without its value: at the end, or followed by an option */
	assert_int_equal(parse("list", "--status"), CLI_PARSE_ERROR);
	assert_string_equal(err, "--status needs a value: --status S");
	assert_int_equal(parse("list", "--status --all"), CLI_PARSE_ERROR);
	assert_string_equal(err, "--status needs a value: --status S");
	/* a value that starts with "--" is given with = */
	assert_int_equal(parse("list", "--name=--odd"), CLI_PARSE_OK);
	assert_string_equal(cli_args_get(&args, "--name"), "--odd");
	/* a single dash starts a value: a negative number, standard input */
	assert_int_equal(parse("list", "--limit -1"), CLI_PARSE_OK);
	assert_string_equal(cli_args_get(&args, "--limit"), "-1");

	/* a flag given a value */
	assert_int_equal(parse("list", "--all=1"), CLI_PARSE_ERROR);
	assert_string_equal(err, "--all takes no value (`--all`, not `--all=1`)");

	/* the global options everywhere */
	assert_int_equal(parse("show", "x --url http://h:1 --token=t"), CLI_PARSE_OK);
	assert_string_equal(cli_args_get(&args, "--url"), "http://h:1");
	assert_string_equal(cli_args_get(&args, "--token"), "t");
}

static void test_arguments(void **state)
{
	(void)state;
	assert_int_equal(parse("show", ""), CLI_PARSE_ERROR);
	assert_string_equal(err, "`things show` needs 1 argument: outboxd things show ID|NAME");
	assert_int_equal(parse("show", "a b"), CLI_PARSE_ERROR);
	assert_string_equal(err, "unexpected argument \"b\" for `things show`");
	/* options before, between and after the arguments */
	assert_int_equal(parse("replay", "a --status NEW b --name n c"), CLI_PARSE_OK);
	assert_int_equal(args.nargs, 3);
	assert_string_equal(args.args[2], "c");
	/* "--" ends the options; "-" alone is an argument */
	assert_int_equal(parse("replay", "- -- --status"), CLI_PARSE_OK);
	assert_int_equal(args.nargs, 2);
	assert_string_equal(args.args[0], "-");
	assert_string_equal(args.args[1], "--status");
	assert_null(cli_args_get(&args, "--status"));
}

static void test_help_wins(void **state)
{
	(void)state;
	assert_int_equal(parse("list", "--help"), CLI_PARSE_HELP);
	assert_int_equal(parse("list", "--bogus --status -h"), CLI_PARSE_HELP);
	assert_int_equal(parse("show", "--help"), CLI_PARSE_HELP); /* its argument missing */
	assert_int_equal(args.help, 1);
}

static void test_command_find(void **state)
{
	char *argv1[] = {"--url", "http://h:1", "--json", "show", "x"};
	char *argv2[] = {"lst"};
	char *argv3[] = {"--status", "NEW", "list"};
	char *argv4[] = {"--token=t", "-h"};
	char *argv5[] = {"zzz"};
	int at;
	(void)state;

	assert_ptr_equal(cli_command_find(&sample, 5, argv1, &at, err, sizeof(err)),
			 &sample_commands[1]);
	assert_int_equal(at, 3);
	assert_null(cli_command_find(&sample, 1, argv2, &at, err, sizeof(err)));
	assert_string_equal(err, "unknown command `things lst`; did you mean `things list`?");
	assert_null(cli_command_find(&sample, 1, argv5, &at, err, sizeof(err)));
	assert_string_equal(err, "unknown command `things zzz` (outboxd things --help lists the "
				 "commands)");
	/* an option of a command before the command: whether it takes a value is unknown */
	assert_null(cli_command_find(&sample, 3, argv3, &at, err, sizeof(err)));
	assert_non_null(strstr(err, "--status before the command"));
	/* none given: NULL without an error (the caller prints the group's help) */
	assert_null(cli_command_find(&sample, 2, argv4, &at, err, sizeof(err)));
	assert_string_equal(err, "");
	/* a group that is one command has no command word */
	assert_ptr_equal(cli_command_find(&single, 1, argv5, &at, err, sizeof(err)),
			 &single_commands[0]);
	assert_int_equal(at, -1);
}

static void test_suggest(void **state)
{
	const char *names[] = {"--status", "--subscription", "--failing-since", "--failing",
			       "--json", "--help"};
	const size_t n = sizeof(names) / sizeof(names[0]);
	(void)state;

	assert_string_equal(cli_suggest("--stauts", names, n), "--status");
	assert_string_equal(cli_suggest("--statsu", names, n), "--status");
	assert_string_equal(cli_suggest("--fail", names, n), "--failing");
	assert_string_equal(cli_suggest("--failing-snce", names, n), "--failing-since");
	assert_null(cli_suggest("--bogus", names, n));
	assert_null(cli_suggest("--verbose", names, n));
	assert_null(cli_suggest("--x", names, n));
	assert_null(cli_suggest("--zz", names, n));
}

static char *capture(void (*print)(FILE *, const struct cli_group *), const struct cli_group *g)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);
	assert_non_null(f);
	print(f, g);
	fclose(f);
	return text;
}

static void print_list_help(FILE *out, const struct cli_group *g)
{
	cli_print_command_help(out, g, &g->commands[0]);
}

static void test_help_texts(void **state)
{
	(void)state;
	char *text = capture(cli_print_group_help, &sample);
	assert_non_null(strstr(text, "things <command> [options]"));
	assert_non_null(strstr(text, "  things list [options]"));
	assert_non_null(strstr(text, "  things show ID|NAME"));
	assert_non_null(strstr(text, "show one thing"));
	assert_null(strstr(text, "--status")); /* options are the command's help */
	assert_null(strstr(text, "other"));
	free(text);

	text = capture(print_list_help, &sample);
	assert_non_null(strstr(text, "usage: outboxd things list [options]\n"));
	assert_non_null(strstr(text, "  --status S"));
	assert_non_null(strstr(text, "  --failing "));
	assert_non_null(strstr(text, "rows per page"));
	assert_non_null(strstr(text, "  --url URL"));
	assert_non_null(strstr(text, "  --help"));
	free(text);

	/* a group that is one command: its help is the command's */
	text = capture(cli_print_group_help, &single);
	assert_non_null(strstr(text, "usage: outboxd counts\n"));
	assert_non_null(strstr(text, "the counts"));
	free(text);
	text = capture(cli_print_group_help, &other);
	assert_null(strstr(text, "other list"));
	assert_non_null(strstr(text, "other show ID|NAME"));
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unknown_options),
		cmocka_unit_test(test_flags_and_values),
		cmocka_unit_test(test_arguments),
		cmocka_unit_test(test_help_wins),
		cmocka_unit_test(test_command_find),
		cmocka_unit_test(test_suggest),
		cmocka_unit_test(test_help_texts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
