/* main.c: outboxd's commands, from argv. The daemon itself is serve.c.
 *
 *   outboxd serve [settings]   run the daemon (outboxd serve --help lists settings)
 *   outboxd rotate-key [...]   re-seal subscription credentials under a new key
 *   outboxd check-config [...] validate the settings, print them (secrets masked)
 *   outboxd migrate [...]      apply the store's schema migrations, then exit
 *   outboxd spool ...          inspect or re-insert a spool file (cli/spool_cmd.h)
 *   outboxd store ...          copy a store to another backend, verify a copy
 *                              (cli/store_copy.h)
 *   outboxd version            print the version */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/admin.h"
#include "cli/cli.h"
#include "cli/secret_key.h"
#include "cli/settings.h"
#include "cli/spool_cmd.h"
#include "cli/store_copy.h"
#include "serve.h"
#include "util/log.h"

#define OUTBOXD_VERSION "0.1.0"

static void usage(FILE *out)
{
	fprintf(out, "usage: outboxd <command> [options]\n\n"
		     "commands:\n"
		     "  serve        run the delivery daemon (outboxd serve --help for settings)\n"
		     "  rotate-key   re-seal subscription credentials under a new key (outboxd stopped)\n"
		     "  check-config validate the settings and print them, secrets masked\n"
		     "  migrate      apply the store's schema migrations without serving\n"
		     "  spool        inspect a spool file, or re-insert it into the store (outboxd spool --help)\n"
		     "  store        copy the store to another backend (SQLite <-> PostgreSQL) and\n"
		     "               verify the copy, outboxd stopped (outboxd store --help)\n");
	cli_print_groups(out);
	fprintf(out, "  version      print the version\n\n"
		     "outboxd <group> --help lists a group's commands, outboxd <group> <command>\n"
		     "--help a command's options.\n");
}

static int spool_replay_settings(int argc, char **argv, struct config *cfg)
{
	return settings_load_for_store(argc, argv, cfg, "spool replay");
}

static int wants_help(int argc, char **argv)
{
	for (int i = 0; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return 1;
	return 0;
}

/* outboxd check-config and outboxd migrate (cli/admin.h): serve's settings. */
static int check_config(int argc, char **argv)
{
	struct config cfg;
	if (wants_help(argc, argv)) {
		admin_check_config_usage(stdout);
		return 0;
	}
	if (settings_load(argc, argv, &cfg))
		return 2;
	int rc = admin_check_config(&cfg, stdout);
	config_free(&cfg);
	return rc ? 2 : 0;
}

static int migrate(int argc, char **argv)
{
	struct config cfg;
	if (wants_help(argc, argv)) {
		admin_migrate_usage(stdout);
		return 0;
	}
	if (settings_load_for_store(argc, argv, &cfg, "migrate"))
		return 2;
	enum log_level level;
	if (log_level_parse(cfg.log_level, &level) == 0)
		log_set_level(level);
	int rc = admin_migrate(&cfg);
	config_free(&cfg);
	return rc;
}

/* outboxd rotate-key: serve's settings (the store, the old key) plus --new-secret-key
 * (or OUTBOXD_NEW_SECRET_KEY, which keeps it out of the process list). */
static int rotate_key(int argc, char **argv)
{
	const char *new_key = getenv("OUTBOXD_NEW_SECRET_KEY");
	struct config cfg;
	int n = 0, from_flag = 0;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			secret_key_rotate_usage(stdout);
			return 0;
		} else if (strcmp(argv[i], "--new-secret-key") == 0 && i + 1 < argc) {
			new_key = argv[++i];
			from_flag = 1;
		} else if (strncmp(argv[i], "--new-secret-key=", 17) == 0) {
			new_key = argv[i] + 17;
			from_flag = 1;
		} else if (strcmp(argv[i], "--new-secret-key") == 0) {
			fprintf(stderr, "outboxd: --new-secret-key needs a value\n");
			return 2;
		} else {
			argv[n++] = argv[i];
		}
	}
	if (from_flag)
		log_warn("--new-secret-key holds a secret, and flags are visible to every user of "
			 "this machine in /proc/%d/cmdline (ps): set OUTBOXD_NEW_SECRET_KEY in the "
			 "environment instead", (int)getpid());
	if (settings_load_for_store(n, argv, &cfg, "rotate-key"))
		return 2;
	int rc = secret_key_rotate(&cfg, new_key && *new_key ? new_key : NULL);
	config_free(&cfg);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "serve") == 0)
		return serve_main(argc - 2, argv + 2, OUTBOXD_VERSION);
	if (strcmp(argv[1], "rotate-key") == 0)
		return rotate_key(argc - 2, argv + 2);
	if (strcmp(argv[1], "check-config") == 0)
		return check_config(argc - 2, argv + 2);
	if (strcmp(argv[1], "migrate") == 0)
		return migrate(argc - 2, argv + 2);
	if (strcmp(argv[1], "spool") == 0)
		return spool_cmd_main(argc - 2, argv + 2, spool_replay_settings);
	if (strcmp(argv[1], "store") == 0)
		return store_cmd_main(argc - 2, argv + 2);
	/* CLI: the group may follow global options (outboxd --url U dlq list). */
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--url") == 0 || strcmp(argv[i], "--token") == 0) {
			i++;
			continue;
		}
		if (strncmp(argv[i], "--", 2) == 0)
			continue;
		if (!cli_is_group(argv[i]))
			break;
		char *group = argv[i];
		memmove(argv + 2, argv + 1, (size_t)(i - 1) * sizeof(*argv));
		argv[1] = group;
		return cli_main(argc - 1, argv + 1);
	}
	if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
		printf("outboxd %s\n", OUTBOXD_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0) {
		usage(stdout);
		return 0;
	}
	fprintf(stderr, "outboxd: unknown command \"%s\"\n", argv[1]);
	usage(stderr);
	return 2;
}
