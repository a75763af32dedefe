/* pem.c: PEM files read whole (see pem.h). Must not parse the certificates: the TLS
 * library that takes them says whether they make a usable pair. */
#include "util/pem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "util/buf.h"

char *pem_read(const char *what, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		snprintf(err, errlen, "%s: cannot read %s: %s", what, path, strerror(errno));
		return NULL;
	}
	struct buf b;
	char chunk[4096];
	size_t n;
	int too_big = 0;
	buf_init(&b, 1 << 20);
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0 && !too_big)
		too_big = buf_append(&b, chunk, n) != 0;
	fclose(f);
	if (too_big || buf_append(&b, "", 1)) {
		snprintf(err, errlen, "%s: %s is larger than 1 MiB", what, path);
		if (b.data)
			OPENSSL_cleanse(b.data, b.len);
		buf_free(&b);
		return NULL;
	}
	if (!strstr(b.data, "-----BEGIN ")) {
		snprintf(err, errlen, "%s: %s is not a PEM file", what, path);
		OPENSSL_cleanse(b.data, b.len);
		buf_free(&b);
		return NULL;
	}
	return b.data;
}

void pem_free(char *text)
{
	if (!text)
		return;
	OPENSSL_cleanse(text, strlen(text));
	free(text);
}
