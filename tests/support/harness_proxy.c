/* harness_proxy.c: tinyproxy as the egress proxy of end-to-end tests (harness_proxy.h). */
#include "harness_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"

#define TINYPROXY "/usr/bin/tinyproxy"

static int accepting(void *ctx)
{
	const struct egress_proxy *p = ctx;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)p->port)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
	int ok = fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
	if (fd >= 0)
		close(fd);
	return ok;
}

int egress_proxy_start(struct egress_proxy *p)
{
	char conf[600];
	memset(p, 0, sizeof(*p));
	if (access(TINYPROXY, X_OK) != 0) {
		fprintf(stderr, "harness: %s is missing (bash scripts/deps.sh installs it)\n",
			TINYPROXY);
		return -1;
	}
	if ((p->port = harness_free_port()) < 0 || !(p->dir = harness_tmpdir("outboxd-proxy")))
		return -1;
	snprintf(conf, sizeof(conf), "%s/tinyproxy.conf", p->dir);
	FILE *f = fopen(conf, "w");
	if (!f)
		return -1;
	/* no ConnectPort line: tunnels to any port (the receivers' are ephemeral) */
	fprintf(f, "Port %d\nListen 127.0.0.1\nTimeout 60\nMaxClients 64\nAllow 127.0.0.1\n"
		   "LogLevel Info\nLogFile \"%s/tinyproxy.log\"\nDisableViaHeader Yes\n",
		p->port, p->dir);
	fclose(f);
	char *argv[] = {"tinyproxy", "-d", "-c", conf, NULL};
	if ((p->pid = harness_spawn(TINYPROXY, argv, -1, -1)) < 0) {
		p->pid = 0;
		return -1;
	}
	snprintf(p->url, sizeof(p->url), "http://127.0.0.1:%d", p->port);
	if (harness_wait(accepting, p, 5000) != 0) {
		fprintf(stderr, "harness: tinyproxy does not accept on port %d\n", p->port);
		egress_proxy_stop(p);
		return -1;
	}
	return 0;
}

void egress_proxy_stop(struct egress_proxy *p)
{
	if (p->pid > 0)
		harness_stop(p->pid, SIGTERM, 5000);
	p->pid = 0;
	if (p->dir) {
		harness_rmrf(p->dir);
		free(p->dir);
		p->dir = NULL;
	}
}

long egress_proxy_connects(const struct egress_proxy *p, const char *target)
{
	char path[600], line[2048], want[300];
	snprintf(path, sizeof(path), "%s/tinyproxy.log", p->dir);
	snprintf(want, sizeof(want), "): CONNECT %s%s", target ? target : "", target ? " " : "");
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	long n = 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, want) != NULL;
	fclose(f);
	return n;
}
