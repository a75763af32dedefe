/* harness_kafka.c: the mock cluster and kcat for end-to-end tests (see harness_kafka.h). */
#include "harness_kafka.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>


struct kafka_mock {
	pid_t pid;
	FILE *in;                  /* its stdin: commands */
	FILE *out;                 /* its stdout: answers */
	char bootstrap[512];
};

struct kafka_mock *kafka_mock_start(int brokers)
{
	const char *bin = getenv("KAFKA_MOCK_BIN");
	int to_child[2], from_child[2];
	char count[16], line[600];

	if (!bin) {
		fprintf(stderr, "harness_kafka: KAFKA_MOCK_BIN is not set\n");
		return NULL;
	}
	if (pipe2(to_child, O_CLOEXEC) || pipe2(from_child, O_CLOEXEC))
		return NULL;
	snprintf(count, sizeof(count), "%d", brokers);
	fflush(stdout);
	fflush(stderr);
	pid_t parent = getpid(), pid = fork();
	if (pid < 0)
		return NULL;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		dup2(to_child[0], 0);
		dup2(from_child[1], 1);
		execl(bin, "kafka_mock", "--brokers", count, (char *)NULL);
		_exit(127);
	}
	close(to_child[0]);
	close(from_child[1]);
	struct kafka_mock *k = calloc(1, sizeof(*k));
	k->pid = pid;
	k->in = fdopen(to_child[1], "w");
	k->out = fdopen(from_child[0], "r");
	setvbuf(k->in, NULL, _IOLBF, 0);
	if (!fgets(line, sizeof(line), k->out) || strncmp(line, "bootstrap=", 10) != 0) {
		fprintf(stderr, "harness_kafka: kafka_mock did not start\n");
		kafka_mock_stop(k);
		return NULL;
	}
	line[strcspn(line, "\r\n")] = '\0';
	snprintf(k->bootstrap, sizeof(k->bootstrap), "%s", line + 10);
	return k;
}

const char *kafka_mock_bootstrap(const struct kafka_mock *k)
{
	return k->bootstrap;
}

int kafka_mock_command(struct kafka_mock *k, const char *fmt, ...)
{
	char line[600];
	va_list ap;
	va_start(ap, fmt);
	vfprintf(k->in, fmt, ap);
	va_end(ap);
	fputc('\n', k->in);
	fflush(k->in);
	if (!fgets(line, sizeof(line), k->out)) {
		fprintf(stderr, "harness_kafka: kafka_mock gave no answer\n");
		return -1;
	}
	if (strncmp(line, "ok", 2) == 0)
		return 0;
	fprintf(stderr, "harness_kafka: kafka_mock: %s", line);
	return -1;
}

void kafka_mock_stop(struct kafka_mock *k)
{
	int status;
	if (!k)
		return;
	if (k->in)
		fclose(k->in); /* EOF: it exits */
	for (int i = 0; i < 100 && waitpid(k->pid, &status, WNOHANG) == 0; i++)
		usleep(50 * 1000);
	if (waitpid(k->pid, &status, WNOHANG) == 0) {
		kill(k->pid, SIGKILL);
		waitpid(k->pid, &status, 0);
	}
	if (k->out)
		fclose(k->out);
	free(k);
}

/* Runs argv (kcat) and waits; returns its exit status, or -1. */
static int run(char *const argv[], const char *stdout_path)
{
	fflush(stdout);
	fflush(stderr);
	pid_t parent = getpid(), pid = fork();
	int status;
	if (pid < 0)
		return -1;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		if (stdout_path) {
			int fd = open(stdout_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
			if (fd < 0)
				_exit(127);
			dup2(fd, 1);
		}
		execvp(argv[0], argv);
		_exit(127);
	}
	if (waitpid(pid, &status, 0) != pid)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static char *write_temp(const char *dir, size_t i, const void *data, size_t len)
{
	char *path = malloc(strlen(dir) + 32);
	sprintf(path, "%s/m%06zu", dir, i);
	FILE *f = fopen(path, "wb");
	if (!f || (len && fwrite(data, 1, len, f) != len)) {
		if (f)
			fclose(f);
		free(path);
		return NULL;
	}
	fclose(f);
	return path;
}

static int produce(const char *bootstrap, const char *topic, const char *key, size_t n,
		   const void *const *values, const size_t *lens, const char *const *headers)
{
	char dir[] = "/tmp/outboxd-kcat-XXXXXX";
	size_t nh = 0, argc = 0;
	int rc = -1;
	while (headers && headers[nh])
		nh++;
	char **argv = calloc(16 + 2 * nh + n, sizeof(char *));
	char **files = calloc(n + 1, sizeof(char *));
	if (!argv || !files || !mkdtemp(dir))
		goto out;
	argv[argc++] = "kcat";
	argv[argc++] = "-P";
	argv[argc++] = "-b";
	argv[argc++] = (char *)bootstrap;
	argv[argc++] = "-t";
	argv[argc++] = (char *)topic;
	argv[argc++] = "-X";
	argv[argc++] = "message.timeout.ms=20000";
	if (key) {
		argv[argc++] = "-k";
		argv[argc++] = (char *)key;
	}
	for (size_t i = 0; i < nh; i++) {
		argv[argc++] = "-H";
		argv[argc++] = (char *)headers[i];
	}
	for (size_t i = 0; i < n; i++) {
		if (!(files[i] = write_temp(dir, i, values[i], lens[i])))
			goto out;
		argv[argc++] = files[i];
	}
	int status = run(argv, NULL);
	if (status != 0)
		fprintf(stderr, "harness_kafka: kcat -P exited with %d\n", status);
	else
		rc = 0;
out:
	for (size_t i = 0; files && i < n; i++) {
		if (files[i])
			unlink(files[i]);
		free(files[i]);
	}
	rmdir(dir);
	free(files);
	free(argv);
	return rc;
}

int kcat_produce(const char *bootstrap, const char *topic, const char *key, const void *value,
		 size_t len, const char *const *headers)
{
	const void *values[1] = {value};
	size_t lens[1] = {len};
	return produce(bootstrap, topic, key, 1, values, lens, headers);
}

int kcat_produce_many(const char *bootstrap, const char *topic, size_t n,
		      const void *const *values, const size_t *lens, const char *const *keys)
{
	(void)keys;
	return produce(bootstrap, topic, NULL, n, values, lens, NULL);
}

/* Reads a decimal number followed by one space. */
static int read_num(FILE *f, long *out)
{
	return fscanf(f, "%ld", out) == 1 && fgetc(f) == ' ' ? 0 : -1;
}

/* Reads len bytes (len < 0: none) into a returned NUL-terminated string. */
static char *read_bytes(FILE *f, long len)
{
	char *s = calloc(1, (size_t)(len > 0 ? len : 0) + 1);
	if (s && len > 0 && fread(s, 1, (size_t)len, f) != (size_t)len) {
		free(s);
		return NULL;
	}
	return s;
}

/* One kcat run. Binary-safe: each message is written as "PARTITION OFFSET KEYLEN
 * VALUELEN " then the key and value bytes (lengths from kcat's %K and %S, -1 for none),
 * then the headers and a newline. */
static int consume_once(const char *bootstrap, const char *topic, size_t n, int timeout_ms,
			struct kcat_msg **out, size_t *got)
{
	char path[] = "/tmp/outboxd-kcat-out-XXXXXX", count[32], secs[32];
	int fd = mkstemp(path);
	*out = NULL;
	*got = 0;
	if (fd < 0)
		return -1;
	close(fd);
	snprintf(count, sizeof(count), "%zu", n);
	snprintf(secs, sizeof(secs), "%d", (timeout_ms + 999) / 1000);
	/* timeout(1) bounds it: -e alone waits for partitions that never see their end
	 * while a broker is unreachable */
	char *argv[] = {"timeout", secs, "kcat", "-C", "-b", (char *)bootstrap, "-t", (char *)topic,
			"-o", "beginning", "-c", count, "-e", "-q", "-f", "%p %o %K %S %k%s%h\n",
			NULL};
	int status = run(argv, path);
	if (status != 0 && status != 124)
		fprintf(stderr, "harness_kafka: kcat -C exited with %d\n", status);
	FILE *f = fopen(path, "r");
	struct kcat_msg *m = calloc(n + 1, sizeof(*m));
	while (f && m && *got < n) {
		long part, off, klen, vlen;
		if (read_num(f, &part) || read_num(f, &off) || read_num(f, &klen) || read_num(f, &vlen))
			break;
		struct kcat_msg *x = &m[*got];
		char *line = NULL;
		size_t cap = 0;
		x->partition = (int)part;
		x->offset = off;
		x->key = read_bytes(f, klen);
		x->value = read_bytes(f, vlen);
		x->len = vlen > 0 ? (size_t)vlen : 0;
		ssize_t hl = getline(&line, &cap, f);
		if (!x->key || !x->value || hl < 0) {
			free(line);
			break;
		}
		line[strcspn(line, "\n")] = '\0';
		x->headers = line;
		(*got)++;
	}
	if (f)
		fclose(f);
	unlink(path);
	*out = m;
	return m ? 0 : -1;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* kcat -e stops at the partitions' current end: while fewer than n messages are there
 * (a publish still on its way), read again until the deadline. */
int kcat_consume(const char *bootstrap, const char *topic, size_t n, int timeout_ms,
		 struct kcat_msg **out, size_t *got)
{
	int64_t deadline = now_ms() + timeout_ms;
	for (;;) {
		int left = (int)(deadline - now_ms());
		if (consume_once(bootstrap, topic, n, left > 1000 ? left : 1000, out, got))
			return -1;
		if (*got >= n || now_ms() >= deadline)
			return 0;
		kcat_msgs_free(*out, *got);
		*out = NULL;
		*got = 0;
		usleep(200 * 1000);
	}
}

void kcat_msgs_free(struct kcat_msg *m, size_t n)
{
	for (size_t i = 0; m && i < n; i++) {
		free(m[i].key);
		free(m[i].value);
		free(m[i].headers);
	}
	free(m);
}
