/* settings.c: the settings of the commands that take serve's (see settings.h). */
#include "cli/settings.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/admin.h"
#include "util/file.h"
#include "util/log.h"

extern char **environ;

static char *read_file(const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		snprintf(err, errlen, "config file %s: %s", path, strerror(errno));
		return NULL;
	}
	char *text = file_read_stream(f, NULL);
	if (!text)
		snprintf(err, errlen, "config file %s: cannot read it", path);
	fclose(f);
	return text;
}

/* A secret given as a flag is in /proc/PID/cmdline, which every local user can read (ps):
 * say so, and which form keeps it out. Once per process (SIGHUP reads argv again). */
static void warn_secret_flags(int argc, char **argv)
{
	static int warned;
	const struct config_setting *s[16];
	size_t n = config_secret_flags(argc, argv, s, sizeof(s) / sizeof(s[0]));

	if (warned)
		return;
	warned = 1;
	for (size_t i = 0; i < n && i < sizeof(s) / sizeof(s[0]); i++)
		log_warn("%s holds a secret, and flags are visible to every user of this machine in "
			 "/proc/%d/cmdline (ps): set %s in the environment, or %s in a config file "
			 "only outboxd's user can read, instead", s[i]->flag, (int)getpid(), s[i]->env,
			 s[i]->key);
}

int settings_load(int argc, char **argv, struct config *cfg)
{
	char err[512], *file_text = NULL;
	const char *path = config_file_path(environ, argc, argv);

	warn_secret_flags(argc, argv);

	if (path && !(file_text = read_file(path, err, sizeof(err)))) {
		fprintf(stderr, "outboxd: %s\n", err);
		return -1;
	}
	int rc = config_load(cfg, file_text, environ, argc, argv, err, sizeof(err));
	free(file_text);
	if (rc) {
		fprintf(stderr, "outboxd: %s\n", err);
		config_free(cfg);
	} else if (path && !(cfg->config_file = strdup(path))) {
		config_free(cfg);
		return -1;
	}
	return rc;
}

int settings_load_for_store(int argc, char **argv, struct config *cfg, const char *command)
{
	char err[768];
	if (settings_load(argc, argv, cfg))
		return -1;
	if (admin_store_owner_check(cfg, command, err, sizeof(err))) {
		fprintf(stderr, "outboxd %s: %s\n", command, err);
		config_free(cfg);
		return -1;
	}
	return 0;
}
