/* pem.h: the PEM files of a server's TLS (tls_cert, tls_key), read whole into memory for
 * a library that takes them as text: the HTTP API's and the gRPC ingest's. */
#ifndef OUTBOXD_UTIL_PEM_H
#define OUTBOXD_UTIL_PEM_H

#include <stddef.h>

/* Reads the PEM file at path (at most 1 MiB) into a NUL-terminated string, returned to
 * the caller (pem_free). NULL with err set, naming what (the setting) and the path, when
 * it cannot be read, is too large or holds no PEM block. */
char *pem_read(const char *what, const char *path, char *err, size_t errlen);

/* Wipes (it may hold a private key) and frees text from pem_read; NULL is fine. */
void pem_free(char *text);

#endif
