/* admin.c: `outboxd check-config` and `outboxd migrate` (see admin.h). They read the
 * settings and the store directly; they never start the daemon's threads. */
#include "cli/admin.h"

#include <errno.h>
#include <libgen.h>
#include <netdb.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kafka/check.h"
#include "store/store.h"
#include "util/log.h"

int admin_settings_check(const struct config *cfg, char *err, size_t errlen)
{
	enum log_level level;
	enum log_format format;

	if (log_level_parse(cfg->log_level, &level)) {
		snprintf(err, errlen, "log_level must be debug, info, warn or error, got \"%s\"",
			 cfg->log_level);
		return -1;
	}
	if (log_format_parse(cfg->log_format, &format)) {
		snprintf(err, errlen, "log_format must be json, text or auto, got \"%s\"",
			 cfg->log_format);
		return -1;
	}
	if (strncmp(cfg->db, "sqlite:", 7) != 0 && strncmp(cfg->db, "postgres://", 11) != 0 &&
	    strncmp(cfg->db, "postgresql://", 13) != 0) {
		snprintf(err, errlen, "db must be sqlite:PATH or postgres://..., got \"%s\"",
			 strncmp(cfg->db, "sqlite", 6) == 0 ? cfg->db
							    : "(not shown: may hold a password)");
		return -1;
	}
	/* listen: the address serve will bind, resolved as it will be (binding itself is
	 * left to serve: the port may be taken now and free then) */
	char host[256], port[8];
	if (config_listen_split(cfg->listen, host, sizeof(host), port, sizeof(port), err, errlen))
		return -1;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = AI_PASSIVE | AI_NUMERICSERV}, *ai = NULL;
	int gai = getaddrinfo(host, port, &hints, &ai);
	if (gai) {
		snprintf(err, errlen, "listen: cannot resolve \"%s\": %s", cfg->listen,
			 gai_strerror(gai));
		return -1;
	}
	freeaddrinfo(ai);
	const char *files[][2] = {{"tls_cert", cfg->tls_cert}, {"tls_key", cfg->tls_key}};
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		if (files[i][1] && *files[i][1] && access(files[i][1], R_OK) != 0) {
			snprintf(err, errlen, "%s: cannot read %s: %s", files[i][0], files[i][1],
				 strerror(errno));
			return -1;
		}
	}
	if (cfg->kafka_brokers && *cfg->kafka_brokers &&
	    kafka_properties_check(cfg->kafka_brokers, cfg->kafka_config, err, errlen))
		return -1;
	return 0;
}

int admin_check_config(const struct config *cfg, FILE *out)
{
	char err[512];
	if (admin_settings_check(cfg, err, sizeof(err))) {
		fprintf(stderr, "outboxd: %s\n", err);
		return 1;
	}
	config_print_effective(out, cfg);
	return 0;
}

/* The owner of path (or of its folder, when it does not exist yet): 0 when root or
 * unknown, else its uid. */
static uid_t owner_of(const char *path)
{
	struct stat sb;
	if (stat(path, &sb) == 0)
		return sb.st_uid;
	char *copy = strdup(path);
	uid_t uid = copy && stat(dirname(copy), &sb) == 0 ? sb.st_uid : 0;
	free(copy);
	return uid;
}

int admin_store_owner_check(const struct config *cfg, const char *command, char *err,
			    size_t errlen)
{
	if (geteuid() != 0)
		return 0;
	char *data_dir = config_data_dir(cfg);
	const char *paths[2] = {data_dir, NULL};
	char sqlite_path[4096] = "";
	if (strncmp(cfg->db, "sqlite:", 7) == 0) {
		snprintf(sqlite_path, sizeof(sqlite_path), "%s", cfg->db + 7);
		sqlite_path[strcspn(sqlite_path, "?")] = '\0';
		paths[1] = sqlite_path;
	}
	int rc = 0;
	for (size_t i = 0; i < 2 && !rc; i++) {
		if (!paths[i] || !*paths[i])
			continue;
		uid_t uid = owner_of(paths[i]);
		if (uid == 0)
			continue;
		struct passwd *pw = getpwuid(uid);
		char user[64];
		if (pw)
			snprintf(user, sizeof(user), "%s", pw->pw_name);
		else
			snprintf(user, sizeof(user), "#%u", (unsigned)uid);
		snprintf(err, errlen, "%s belongs to the user %s, and files root made there could "
			 "not be opened by outboxd running as %s: run it as that user, e.g. "
			 "`sudo -u %s outboxd %s`", paths[i], user, user, pw ? user : "#uid",
			 command);
		rc = -1;
	}
	free(data_dir);
	return rc;
}

int admin_migrate(const struct config *cfg)
{
	char err[512], host[128] = "localhost", owner[192];
	store *st = NULL;

	gethostname(host, sizeof(host) - 1);
	snprintf(owner, sizeof(owner), "%s:%d:migrate", host, (int)getpid());
	int rc = store_open(cfg->db, owner, &st, err, sizeof(err));
	if (rc == STORE_LOCKED) {
		fprintf(stderr, "outboxd migrate: another outboxd holds this SQLite store; stop it "
				"first (it applies its migrations itself when it starts)\n");
		return 1;
	}
	if (rc != STORE_OK) {
		fprintf(stderr, "outboxd migrate: cannot open the store: %s\n", err);
		return 1;
	}
	printf("outboxd migrate: the %s store's schema is current\n", store_backend_name(st));
	store_close(st);
	return 0;
}

void admin_check_config_usage(FILE *out)
{
	fputs("usage: outboxd check-config [--config FILE] [--setting value ...]\n\n"
	      "Loads the settings as `outboxd serve` would (flags > environment > config file >\n"
	      "defaults), checks them, and prints the effective value of every setting as\n"
	      "config-file lines, secrets masked (tokens, secret_key, passwords in db,\n"
	      "otlp_endpoint and kafka_config, otlp_headers). Exit 0 when valid; 2 with a\n"
	      "message naming the bad setting otherwise, exactly where serve would exit 2.\n"
	      "Nothing is opened but the config file and the TLS files (to see that they can\n"
	      "be read); listen is resolved, not bound.\n",
	      out);
}

void admin_migrate_usage(FILE *out)
{
	fputs("usage: outboxd migrate [--config FILE] [--db URL] [--setting value ...]\n\n"
	      "Applies the schema migrations the store (db) lacks, then exits without serving:\n"
	      "for deployments that migrate before rolling out new instances. outboxd serve\n"
	      "applies them too when it starts. On PostgreSQL, instances and migrate take turns on\n"
	      "an advisory lock; on SQLite, migrate refuses while outboxd runs on the store.\n"
	      "Exit 0 when the schema is current, 1 when it could not be brought there.\n", out);
}
