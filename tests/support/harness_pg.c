/* harness_pg.c: a throwaway PostgreSQL server for tests (see harness_pg.h).
 *
 * The postmaster is a direct child of the test process (no pg_ctl daemonising), so the
 * parent-death signal and waitpid both reach it. */
#include "harness_pg.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "harness.h"

#define START_MS 30000
#define STOP_MS 30000
#define MAX_SERVERS 8
#define LOG_TAIL 4096
#define TEST_USER "outboxd-test"

/* ---- the servers to stop at exit ------------------------------------------------------ */

static struct pg_server *running[MAX_SERVERS];
static int atexit_done;

static void stop_all(void)
{
	for (int i = 0; i < MAX_SERVERS; i++)
		if (running[i])
			pg_server_stop(running[i]);
}

static void track(struct pg_server *s)
{
	if (!atexit_done) {
		atexit(stop_all);
		atexit_done = 1;
	}
	for (int i = 0; i < MAX_SERVERS; i++)
		if (running[i] == s)
			return;
	for (int i = 0; i < MAX_SERVERS; i++) {
		if (!running[i]) {
			running[i] = s;
			return;
		}
	}
	fprintf(stderr, "harness_pg: more than %d servers; one is not tracked\n", MAX_SERVERS);
}

static void untrack(struct pg_server *s)
{
	for (int i = 0; i < MAX_SERVERS; i++)
		if (running[i] == s)
			running[i] = NULL;
}

/* ---- setup ------------------------------------------------------------------------------ */

static void sleep_ms(long ms)
{
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};

	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* The newest /usr/lib/postgresql/<version>/bin holding postgres and initdb. */
static int find_bindir(char *out, size_t size)
{
	const char *env = getenv("OUTBOXD_TEST_PG_BIN");
	glob_t g;
	long best = -1;

	if (env && *env) {
		snprintf(out, size, "%s", env);
		return 0;
	}
	if (glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) != 0) {
		fprintf(stderr, "harness_pg: no /usr/lib/postgresql/*/bin/initdb; install the "
				"postgresql package (scripts/deps.sh does)\n");
		return -1;
	}
	for (size_t i = 0; i < g.gl_pathc; i++) {
		const char *v = g.gl_pathv[i] + strlen("/usr/lib/postgresql/");
		long version = strtol(v, NULL, 10);

		if (version > best) {
			best = version;
			snprintf(out, size, "%.*s", (int)(strlen(g.gl_pathv[i]) - strlen("/initdb")),
				 g.gl_pathv[i]);
		}
	}
	globfree(&g);
	return best >= 0 ? 0 : -1;
}

/* As root, the unprivileged user the server runs as. */
static int pick_user(struct pg_server *s)
{
	struct passwd *pw;

	if (geteuid() != 0)
		return 0;
	pw = getpwnam(TEST_USER);
	if (!pw)
		pw = getpwnam("nobody");
	if (!pw) {
		int rc = system("useradd --system --no-create-home --shell /usr/sbin/nologin "
				TEST_USER " >/dev/null 2>&1");

		(void)rc;
		pw = getpwnam(TEST_USER);
	}
	if (!pw) {
		fprintf(stderr, "harness_pg: running as root and no user to run PostgreSQL as "
				"(tried %s, nobody, useradd)\n", TEST_USER);
		return -1;
	}
	s->uid = pw->pw_uid;
	s->gid = pw->pw_gid;
	s->run_as = 1;
	return 0;
}

/* Removes /tmp/outboxd-pg-* directories whose test process is gone. */
static void sweep_stale(void)
{
	DIR *d = opendir("/tmp");
	struct dirent *e;

	if (!d)
		return;
	while ((e = readdir(d))) {
		char path[512], owner[600];
		FILE *f;
		int pid = 0;

		if (strncmp(e->d_name, "outboxd-pg-", 11) != 0)
			continue;
		snprintf(path, sizeof(path), "/tmp/%s", e->d_name);
		snprintf(owner, sizeof(owner), "%s/owner.pid", path);
		f = fopen(owner, "r");
		if (!f)
			continue;
		if (fscanf(f, "%d", &pid) != 1)
			pid = 0;
		fclose(f);
		if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH)
			harness_rmrf(path);
	}
	closedir(d);
}

/* fork + exec of a PostgreSQL binary as the server user, stdout and stderr appended to
 * log. pdeathsig (0 = none) is delivered to the child when this process dies. */
static pid_t spawn(const struct pg_server *s, char *const argv[], const char *log, int pdeathsig)
{
	static char *const envp[] = {"PATH=/usr/bin:/bin", "LC_ALL=C", NULL};
	pid_t parent = getpid();
	int log_fd, null_fd;
	pid_t pid;

	log_fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (log_fd < 0 || null_fd < 0) {
		fprintf(stderr, "harness_pg: %s: %s\n", log, strerror(errno));
		if (log_fd >= 0)
			close(log_fd);
		if (null_fd >= 0)
			close(null_fd);
		return -1;
	}
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid == 0) {
		/* Only async-signal-safe calls from here to execve. The parent-death signal
		 * is set after the user change, which would clear it. */
		if (s->run_as && (setgroups(0, NULL) != 0 || setgid(s->gid) != 0 ||
				  setuid(s->uid) != 0))
			_exit(126);
		if (pdeathsig)
			prctl(PR_SET_PDEATHSIG, pdeathsig);
		if (getppid() != parent)
			_exit(127);
		if (chdir(s->dir) != 0)
			_exit(125);
		dup2(null_fd, 0);
		dup2(log_fd, 1);
		dup2(log_fd, 2);
		close_range(3, ~0u, 0);
		execve(argv[0], argv, envp);
		_exit(127);
	}
	close(log_fd);
	close(null_fd);
	if (pid < 0)
		perror("harness_pg: fork");
	return pid;
}

static void log_path(const struct pg_server *s, const char *name, char *buf, size_t size)
{
	snprintf(buf, size, "%s/%s", s->dir, name);
}

static int run_and_wait(struct pg_server *s, char *const argv[], const char *what)
{
	char log[320];
	int status = 0;
	pid_t pid;

	log_path(s, "initdb.log", log, sizeof(log));
	pid = spawn(s, argv, log, SIGKILL);
	if (pid < 0)
		return -1;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "harness_pg: %s failed (status %d)\n", what, status);
		harness_print_tail(log, LOG_TAIL);
		return -1;
	}
	return 0;
}

/* The cluster initdb makes is the same for every server of one PostgreSQL installation
 * and server user, and initdb costs about a second of CPU (its bootstrap and single-user
 * backends), against a fifth of a second to copy its 40 MB: the first server makes one
 * and keeps a copy in /tmp as the template of the next ones (the name tells the binaries
 * and the user; "v1" the options of run_initdb, to be raised when they change). The copy
 * is made aside and renamed into place, so a template is whole or absent. */
static void template_path(const struct pg_server *s, char *out, size_t size)
{
	char bin[256];

	snprintf(bin, sizeof(bin), "%s", s->bindir);
	for (char *p = bin; *p; p++)
		if (*p == '/')
			*p = '_';
	snprintf(out, size, "/tmp/outboxd-pginit%s-%u-v1", bin,
		 (unsigned)(s->run_as ? s->uid : geteuid()));
}

static void template_keep(struct pg_server *s, const char *tpl)
{
	char *aside = harness_tmpdir("outboxd-pg");
	char owner[320], from[320], to[320];
	char *argv[] = {"/bin/cp", "-a", from, to, NULL};
	FILE *f;

	if (!aside)
		return;
	/* owner.pid: a copy left half-made by a test process that died is swept like its
	 * server directories (sweep_stale) */
	snprintf(owner, sizeof(owner), "%s/owner.pid", aside);
	f = fopen(owner, "w");
	if (f) {
		fprintf(f, "%d\n", (int)getpid());
		fclose(f);
	}
	snprintf(from, sizeof(from), "%s/data", s->dir);
	snprintf(to, sizeof(to), "%s/data", aside);
	if ((!s->run_as || chown(aside, s->uid, s->gid) == 0) &&
	    run_and_wait(s, argv, "copying the initdb template") == 0 && unlink(owner) == 0 &&
	    rename(aside, tpl) == 0) {
		free(aside);
		return;
	}
	harness_rmrf(aside); /* another test process kept one first, or the copy failed */
	free(aside);
}

static int run_initdb(struct pg_server *s)
{
	char bin[320], data[320], tpl[320], tpl_data[400];
	char *initdb[] = {bin, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8",
			  "--locale=C", "--no-sync", NULL};
	char *copy[] = {"/bin/cp", "-a", tpl_data, data, NULL};
	struct stat st;

	snprintf(bin, sizeof(bin), "%s/initdb", s->bindir);
	snprintf(data, sizeof(data), "%s/data", s->dir);
	template_path(s, tpl, sizeof(tpl));
	snprintf(tpl_data, sizeof(tpl_data), "%s/data", tpl);
	if (stat(tpl_data, &st) == 0 && run_and_wait(s, copy, "copying the initdb template") == 0)
		return 0;
	harness_rmrf(data); /* what a failed copy left */
	if (run_and_wait(s, initdb, "initdb") != 0)
		return -1;
	template_keep(s, tpl);
	return 0;
}

static int make_dir(struct pg_server *s)
{
	char *dir = harness_tmpdir("outboxd-pg");
	char owner[320];
	FILE *f;

	if (!dir)
		return -1;
	snprintf(s->dir, sizeof(s->dir), "%s", dir);
	free(dir);
	snprintf(owner, sizeof(owner), "%s/owner.pid", s->dir);
	f = fopen(owner, "w");
	if (f) {
		fprintf(f, "%d\n", (int)getpid());
		fclose(f);
	}
	if (s->run_as && chown(s->dir, s->uid, s->gid) != 0) {
		fprintf(stderr, "harness_pg: chown %s: %s\n", s->dir, strerror(errno));
		return -1;
	}
	return 0;
}

/* Polls until the server accepts connections, the child exits, or START_MS pass. */
static int wait_ready(struct pg_server *s)
{
	char conninfo[300];
	int64_t deadline = harness_now_ms() + START_MS;
	int status;

	snprintf(conninfo, sizeof(conninfo),
		 "host=127.0.0.1 port=%d user=postgres dbname=postgres connect_timeout=2", s->port);
	while (harness_now_ms() < deadline) {
		if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
			fprintf(stderr, "harness_pg: postgres exited during start (status %d)\n",
				status);
			s->pid = 0;
			return -1;
		}
		if (PQping(conninfo) == PQPING_OK)
			return 0;
		sleep_ms(20);
	}
	fprintf(stderr, "harness_pg: postgres not ready within %d ms\n", START_MS);
	return -1;
}

static int start_postmaster(struct pg_server *s)
{
	char bin[320], data[320], log[320], port[16], sock[300];
	char *argv[] = {bin, "-D", data, "-p", port, "-k", sock,
			"-c", "listen_addresses=127.0.0.1",
			"-c", "shared_buffers=32MB",
			"-c", "max_connections=200",
			"-c", "logging_collector=off",
			NULL};

	snprintf(bin, sizeof(bin), "%s/postgres", s->bindir);
	snprintf(data, sizeof(data), "%s/data", s->dir);
	snprintf(port, sizeof(port), "%d", s->port);
	snprintf(sock, sizeof(sock), "%s", s->dir);
	log_path(s, "postgres.log", log, sizeof(log));
	/* SIGQUIT is an immediate shutdown: the postmaster ends its backends and exits. */
	s->pid = spawn(s, argv, log, SIGQUIT);
	if (s->pid < 0) {
		s->pid = 0;
		return -1;
	}
	track(s);
	if (wait_ready(s) != 0) {
		harness_print_tail(log, LOG_TAIL);
		pg_server_halt(s);
		return -1;
	}
	return 0;
}

int pg_server_start(struct pg_server *s)
{
	if (s->pid > 0)
		return 0;
	if (s->dir[0]) /* a halted cluster: same data, same port */
		return start_postmaster(s);
	sweep_stale();
	if (find_bindir(s->bindir, sizeof(s->bindir)) != 0 || pick_user(s) != 0 ||
	    make_dir(s) != 0 || run_initdb(s) != 0)
		goto fail;
	/* A free port can be taken between the probe and the bind: try again. */
	for (int attempt = 0; attempt < 3; attempt++) {
		s->port = harness_free_port();
		snprintf(s->admin_dsn, sizeof(s->admin_dsn),
			 "postgres://postgres@127.0.0.1:%d/postgres", s->port);
		if (s->port > 0 && start_postmaster(s) == 0)
			return 0;
	}
fail:
	pg_server_stop(s);
	return -1;
}

int pg_server_halt(struct pg_server *s)
{
	int64_t deadline = harness_now_ms() + STOP_MS;
	int status;

	if (s->pid <= 0)
		return 0;
	kill(s->pid, SIGINT); /* fast shutdown */
	while (harness_now_ms() < deadline) {
		if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
			s->pid = 0;
			return 0;
		}
		sleep_ms(10);
	}
	fprintf(stderr, "harness_pg: postgres ignored a fast shutdown; killed\n");
	kill(s->pid, SIGQUIT);
	sleep_ms(500);
	kill(s->pid, SIGKILL);
	waitpid(s->pid, &status, 0);
	s->pid = 0;
	return -1;
}

int pg_server_restart(struct pg_server *s, int down_ms)
{
	if (pg_server_halt(s) != 0)
		return -1;
	sleep_ms(down_ms);
	return start_postmaster(s);
}

void pg_server_stop(struct pg_server *s)
{
	pg_server_halt(s);
	untrack(s);
	harness_dir_done("harness_pg", s->dir);
}

int pg_server_create_db(struct pg_server *s, const char *name, char *dsn, size_t dsnlen)
{
	char sql[128];
	PGconn *conn;
	PGresult *r;
	int rc = -1;

	if (!*name || strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(name) ||
	    strlen(name) > 60) {
		fprintf(stderr, "harness_pg: bad database name %s\n", name);
		return -1;
	}
	snprintf(sql, sizeof(sql), "CREATE DATABASE %s", name);
	conn = PQconnectdb(s->admin_dsn);
	r = PQexec(conn, sql);
	if (PQresultStatus(r) == PGRES_COMMAND_OK)
		rc = 0;
	else
		fprintf(stderr, "harness_pg: %s: %s", sql, PQerrorMessage(conn));
	PQclear(r);
	PQfinish(conn);
	if (rc == 0)
		snprintf(dsn, dsnlen, "postgres://postgres@127.0.0.1:%d/%s", s->port, name);
	return rc;
}

/* ---- for end-to-end tests ---------------------------------------------------------- */

static struct pg_server shared;
static int shared_failed;

int harness_pg_wanted(void)
{
	const char *b = getenv("OUTBOXD_TEST_BACKEND");

	return b && (strcmp(b, "postgres") == 0 || strcmp(b, "postgresql") == 0);
}

struct pg_server *harness_pg(void)
{
	if (shared.pid > 0)
		return &shared;
	if (shared_failed)
		return NULL;
	if (shared.dir[0] ? start_postmaster(&shared) != 0 : pg_server_start(&shared) != 0) {
		shared_failed = 1;
		return NULL;
	}
	return &shared;
}

int harness_pg_fresh_db(char *dsn, size_t dsnlen)
{
	static int seq;
	struct pg_server *s = harness_pg();
	char name[64];

	if (!s)
		return -1;
	snprintf(name, sizeof(name), "outboxd_%d_%d", (int)getpid(), ++seq);
	return pg_server_create_db(s, name, dsn, dsnlen);
}
