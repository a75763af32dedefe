/* secret_key.c: where the key that seals subscription credentials comes from, and
 * `outboxd rotate-key` (see secret_key.h). Files are written whole or not at all: a
 * temporary file in the same folder, fsync, then link (never replacing) or rename
 * (replacing), then fsync of the folder. Must not print, log or leave a key in memory
 * it no longer needs. */
#include "cli/secret_key.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/secretbox.h"
#include "util/log.h"

#define KEY_FILE_MAX 256 /* 64 hex digits and a line end, or base64, with room to spare */

enum key_source { KEY_SETTING, KEY_FILE, KEY_GENERATED };

static int is_set(const char *s)
{
	return s && *s;
}

/* "<dir>/<name>" into out; -1 when it does not fit. */
static int path_in(const char *dir, const char *name, char *out, size_t len)
{
	return snprintf(out, len, "%s/%s", dir, name) < (int)len ? 0 : -1;
}

/* Reads the key file at path. 0 with *key set; 1 when there is no such file; -1 with
 * err set. */
static int key_file_read(const char *path, struct secretbox_key *key, char *err,
			 size_t errlen)
{
	char text[KEY_FILE_MAX + 1], why[160];
	struct stat sb;
	ssize_t n;
	int fd, rc = -1;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0 && errno == ENOENT)
		return 1;
	if (fd < 0) {
		snprintf(err, errlen, "cannot read the key file %s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &sb) == 0 && (sb.st_mode & 077))
		log_warn("the key file %s can be read by others (mode %03o): chmod 600 it", path,
			 (unsigned)(sb.st_mode & 0777));
	n = read(fd, text, KEY_FILE_MAX + 1);
	if (n < 0) {
		snprintf(err, errlen, "cannot read the key file %s: %s", path, strerror(errno));
		goto out;
	}
	if (n > KEY_FILE_MAX) {
		snprintf(err, errlen, "the key file %s is not a key: longer than %d bytes", path,
			 KEY_FILE_MAX);
		goto out;
	}
	text[n] = '\0';
	if (secretbox_key_parse(text, key, why, sizeof(why))) {
		snprintf(err, errlen, "the key file %s %s", path, why);
		goto out;
	}
	rc = 0;
out:
	explicit_bzero(text, sizeof(text));
	close(fd);
	return rc;
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int rc = fd >= 0 && fsync(fd) == 0 ? 0 : -1;
	if (fd >= 0)
		close(fd);
	return rc;
}

/* Writes key into dir/name (mode 0600) through a synced temporary file. With replace 0
 * an existing file is kept and 1 returned (someone else wrote it first); otherwise 0, or
 * -1 with err set. */
static int key_file_write(const char *dir, const char *name, const struct secretbox_key *key,
			  int replace, char *err, size_t errlen)
{
	char tmp[4096], path[4096], text[2 * SECRETBOX_KEY_LEN + 2];
	int fd = -1, rc = -1;

	if (path_in(dir, name, path, sizeof(path)) ||
	    snprintf(tmp, sizeof(tmp), "%s/.%s.tmp-%d", dir, name, (int)getpid()) >= (int)sizeof(tmp)) {
		snprintf(err, errlen, "the data directory's path is too long: %s", dir);
		return -1;
	}
	secretbox_key_hex(key, text);
	strcat(text, "\n");
	unlink(tmp); /* left by a run of ours that had this pid and was killed */
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text) || fsync(fd) != 0) {
		snprintf(err, errlen, "cannot write the key file %.900s: %s", tmp, strerror(errno));
		goto out;
	}
	close(fd);
	fd = -1;
	if (replace ? rename(tmp, path) : link(tmp, path)) {
		if (!replace && errno == EEXIST) {
			rc = 1;
			goto out;
		}
		snprintf(err, errlen, "cannot write the key file %.900s: %s", path, strerror(errno));
		goto out;
	}
	if (fsync_dir(dir)) {
		snprintf(err, errlen, "cannot sync the folder %s of the key file: %s", dir,
			 strerror(errno));
		goto out;
	}
	rc = 0;
out:
	explicit_bzero(text, sizeof(text));
	if (fd >= 0)
		close(fd);
	if (rc != 0 || !replace)
		unlink(tmp); /* after link, or a failed write: the temporary name goes */
	return rc;
}

/* The key file dir/name: read, or (create) generated once. *generated is set when this
 * call made it. 0, 1 (no file and not create), or -1 with err set. */
static int key_file_load(const char *dir, const char *name, int create,
			 struct secretbox_key *key, int *generated, char *err, size_t errlen)
{
	char path[4096];
	int rc;

	*generated = 0;
	if (path_in(dir, name, path, sizeof(path))) {
		snprintf(err, errlen, "the data directory's path is too long: %s", dir);
		return -1;
	}
	rc = key_file_read(path, key, err, errlen);
	if (rc != 1 || !create)
		return rc;
	if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
		snprintf(err, errlen, "cannot create the data directory %s: %s", dir, strerror(errno));
		return -1;
	}
	if (secretbox_key_generate(key)) {
		snprintf(err, errlen, "cannot generate a secret key: no randomness");
		return -1;
	}
	rc = key_file_write(dir, name, key, 0, err, errlen);
	if (rc == 1) /* another process generated it first: use that one */
		return key_file_read(path, key, err, errlen);
	*generated = rc == 0;
	return rc;
}

/* cfg's key: the setting, else DATA_DIR/secret.key (generated when create is set). */
static int key_load(const struct config *cfg, const char *dir, int create,
		    struct secretbox_key *key, enum key_source *source, char *err, size_t errlen)
{
	char why[160];
	int generated = 0, rc;

	if (is_set(cfg->secret_key)) {
		*source = KEY_SETTING;
		if (secretbox_key_parse(cfg->secret_key, key, why, sizeof(why))) {
			snprintf(err, errlen, "secret_key %s", why);
			return -1;
		}
		return 0;
	}
	rc = key_file_load(dir, SECRET_KEY_FILE, create, key, &generated, err, errlen);
	if (rc == 1)
		snprintf(err, errlen, "no secret key: secret_key is unset and %s/%s does not exist",
			 dir, SECRET_KEY_FILE);
	*source = generated ? KEY_GENERATED : KEY_FILE;
	return rc ? -1 : 0;
}

int secret_key_serve(const struct config *cfg, store *st)
{
	struct secretbox_key key = {0};
	enum key_source source = KEY_FILE;
	char err[1024], path[4096] = "", pending[4096] = "";
	char *dir = config_data_dir(cfg);
	size_t migrated = 0;
	int rc = -1;

	if (!dir || path_in(dir, SECRET_KEY_FILE, path, sizeof(path)) ||
	    path_in(dir, SECRET_KEY_PENDING, pending, sizeof(pending))) {
		log_error("the data directory's path is too long, or out of memory");
		goto out;
	}
	if (key_load(cfg, dir, 1, &key, &source, err, sizeof(err))) {
		log_error("%s", err);
		goto out;
	}
	if (store_set_secret_key(st, &key) != STORE_OK) {
		log_error("out of memory");
		goto out;
	}
	int prc = store_secrets_prepare(st, &migrated, err, sizeof(err));
	if (prc != STORE_OK) {
		log_error("%s", err);
		if (prc == STORE_CONFLICT)
			rc = 2;
		/* A key made a moment ago that sealed nothing must not become this instance's
		 * key: the next start would fail the same way with a less helpful message. */
		if (source == KEY_GENERATED && migrated == 0 && unlink(path) == 0)
			log_error("this start had generated a new key into %s because neither "
				  "secret_key nor that file existed; it was removed again: give this "
				  "instance the store's key", path);
		goto out;
	}
	if (source == KEY_GENERATED)
		log_warn("generated the key that seals subscription credentials into %s (mode 0600, "
			 "key id %s): back it up apart from the database — without it the "
			 "subscriptions' credentials cannot be read", path, key.id);
	if (migrated)
		log_info("sealed %zu subscriptions that were stored in clear (key id %s)", migrated,
			 key.id);
	if (source != KEY_SETTING && access(pending, F_OK) == 0)
		log_warn("%s exists: an `outboxd rotate-key` was interrupted; run it again to finish "
			 "it", pending);
	log_info("subscription credentials are sealed with key id %s (%s)", key.id,
		 source == KEY_SETTING ? "secret_key" : path);
	rc = 0;
out:
	secretbox_key_clear(&key);
	free(dir);
	return rc;
}

/* ---- outboxd rotate-key ----------------------------------------------------------------- */

void secret_key_rotate_usage(FILE *out)
{
	fprintf(out,
		"usage: outboxd rotate-key [--new-secret-key KEY] [serve's settings: --db, "
		"--secret-key, --data-dir, --config]\n\n"
		"Re-seals the credentials of every subscription under a new key. Stop outboxd first\n"
		"(on PostgreSQL: every instance), then start it (all of them) with the new key.\n\n"
		"  the old key     secret_key (--secret-key, OUTBOXD_SECRET_KEY, the config file),\n"
		"                  else DATA_DIR/" SECRET_KEY_FILE "\n"
		"  the new key     --new-secret-key or OUTBOXD_NEW_SECRET_KEY (64 hex digits or the\n"
		"                  base64 of 32 bytes); with the key in DATA_DIR/" SECRET_KEY_FILE
		" it may be\n"
		"                  left out: a new one is generated, and the file is replaced by it\n"
		"                  once every subscription is re-sealed\n\n"
		"Safe to run again after an interruption: rows already under the new key are left\n"
		"as they are. Keys are never printed; key ids (SHA-256 of the key, 8 hex digits) are.\n");
}

/* The new key of a rotation from a key file: kept in DATA_DIR/secret.key.new from before
 * the first row changes (given, generated, or found there from an interrupted run). */
static int pending_key(const char *dir, const struct secretbox_key *given,
		       struct secretbox_key *key, char *err, size_t errlen)
{
	int generated = 0, rc;

	if (!given)
		return key_file_load(dir, SECRET_KEY_PENDING, 1, key, &generated, err, errlen);
	rc = key_file_load(dir, SECRET_KEY_PENDING, 0, key, &generated, err, errlen);
	if (rc == 1) {
		*key = *given;
		rc = key_file_write(dir, SECRET_KEY_PENDING, key, 0, err, errlen);
		if (rc == 1) /* written by a rotation running at the same time */
			rc = key_file_load(dir, SECRET_KEY_PENDING, 0, key, &generated, err, errlen);
	}
	if (rc == 0 && strcmp(key->id, given->id) != 0) {
		snprintf(err, errlen, "%s/%s holds another new key (key id %s) from an interrupted "
			 "rotation: finish that one first (run rotate-key again without "
			 "--new-secret-key), then rotate to yours", dir, SECRET_KEY_PENDING, key->id);
		rc = -1;
	}
	return rc;
}

int secret_key_rotate(const struct config *cfg, const char *new_text)
{
	struct secretbox_key old = {0}, fresh = {0}, given = {0};
	enum key_source source = KEY_FILE;
	char err[1024], why[160], owner[192], host[128] = "localhost", from[4096], to[4096];
	char *dir = config_data_dir(cfg);
	size_t resealed = 0, skipped = 0;
	store *st = NULL;
	int rc = 1;

	if (!dir || path_in(dir, SECRET_KEY_PENDING, from, sizeof(from)) ||
	    path_in(dir, SECRET_KEY_FILE, to, sizeof(to))) {
		fprintf(stderr, "outboxd: the data directory's path is too long, or out of memory\n");
		goto out;
	}
	if (key_load(cfg, dir, 0, &old, &source, err, sizeof(err))) {
		fprintf(stderr, "outboxd: %s: nothing to rotate from (give the key in use with "
			"--secret-key)\n", err);
		goto out;
	}
	if (new_text && secretbox_key_parse(new_text, &given, why, sizeof(why))) {
		fprintf(stderr, "outboxd: --new-secret-key %s\n", why);
		rc = 2;
		goto out;
	}
	if (new_text && strcmp(given.id, old.id) == 0) {
		fprintf(stderr, "outboxd: the new key is the old one (key id %s)\n", old.id);
		rc = 2;
		goto out;
	}
	/* The store first (on SQLite its lock says outboxd is stopped), then the new key:
	 * a pending key file is written only for a rotation that can go ahead. */
	gethostname(host, sizeof(host) - 1);
	snprintf(owner, sizeof(owner), "rotate-key@%s:%d", host, (int)getpid());
	int src = store_open(cfg->db, owner, &st, err, sizeof(err));
	if (src != STORE_OK) {
		fprintf(stderr, "outboxd: cannot open the store: %s%s\n", err,
			src == STORE_LOCKED ? " (stop outboxd first)" : "");
		goto out;
	}
	if (source == KEY_SETTING) {
		if (!new_text) {
			fprintf(stderr, "outboxd: the key comes from the secret_key setting, which "
				"rotate-key cannot change: give the new key with --new-secret-key\n");
			rc = 2;
			goto out;
		}
		fresh = given;
	} else if (pending_key(dir, new_text ? &given : NULL, &fresh, err, sizeof(err))) {
		fprintf(stderr, "outboxd: %s\n", err);
		goto out;
	}
	if (strcmp(old.id, fresh.id) == 0) {
		fprintf(stderr, "outboxd: the new key is the old one (key id %s)\n", old.id);
		rc = 2;
		goto out;
	}

	if (store_set_secret_key(st, &old) != STORE_OK ||
	    store_secrets_rotate(st, &fresh, &resealed, &skipped, err, sizeof(err)) != STORE_OK) {
		fprintf(stderr, "outboxd: %s\n", err);
		if (resealed)
			fprintf(stderr, "outboxd: %zu subscriptions are sealed under the new key (id %s) "
				"already: run rotate-key again to finish\n", resealed, fresh.id);
		goto out;
	}
	/* Every row is under the new key: only now may it replace the old one. */
	if (source != KEY_SETTING && (rename(from, to) != 0 || fsync_dir(dir) != 0)) {
		fprintf(stderr, "outboxd: every subscription is sealed under the new key, but %s "
			"cannot replace %s: %s. Rename it by hand before starting outboxd\n", from, to,
			strerror(errno));
		goto out;
	}
	printf("Re-sealed %zu subscriptions under key id %s (%zu were already).\n", resealed,
	       fresh.id, skipped);
	if (source == KEY_SETTING)
		printf("Set secret_key to the new key on every instance, then start outboxd: "
		       "with the old key (id %s) it no longer starts.\n", old.id);
	else
		printf("%s holds the new key; the old one (id %s) is gone. Back the new key up apart "
		       "from the database, then start outboxd%s.\n", to, old.id,
		       strcmp(store_backend_name(st), "postgres") == 0
			       ? " (every instance, each with this key)" : "");
	rc = 0;
out:
	store_close(st);
	secretbox_key_clear(&old);
	secretbox_key_clear(&fresh);
	secretbox_key_clear(&given);
	free(dir);
	return rc;
}
