/* http_tls.h: TLS for the lean HTTP/1.1 client (http_wire.c), over OpenSSL, non-blocking,
 * on the dispatcher's thread.
 *
 * Two things live here: the TLS configurations (one SSL_CTX per distinct set of a
 * subscription's TLS files — CA file, client certificate and key — built once and rebuilt
 * only when one of the files changes, so renewed files are picked up by new connections
 * as libcurl picks them up), and the TLS side of one connection (struct tls_link: the
 * handshake, reads and writes that report what they wait for, the close). Certificate
 * and host name verification are always on; the texts of failures are libcurl's (7.88,
 * OpenSSL backend) for the same failure, so an attempt's cause does not depend on which
 * client made it. Nothing here logs: failures go back as text into the attempt, and no
 * key material is ever written anywhere.
 *
 * The HTTP side (requests, parsing, deadlines, epoll) stays in http_wire.c. */
#ifndef OUTBOXD_DELIVER_HTTP_TLS_H
#define OUTBOXD_DELIVER_HTTP_TLS_H

#include <stddef.h>
#include <stdint.h>

#include "core/errmap.h"

struct tls_confs;
struct tls_conf;
struct tls_link;
struct ssl_session_st;

#define TLS_ERR_LEN 256

/* The last session of a target under one configuration, for resumption: set by the
 * link's handshake (TLS 1.2) or by the tickets a TLS 1.3 server sends after it. gen: the
 * configuration's generation it was made with (a session made before a CA file changed
 * must not skip the new verification). */
struct tls_resume {
	struct ssl_session_st *session;
	unsigned gen;
};

/* What a step of a link waits for, or how it ended. */
enum tls_step {
	TLS_DONE,        /* the handshake is over / bytes were read or written */
	TLS_WANT_READ,   /* call again when the socket is readable */
	TLS_WANT_WRITE,  /* ... writable (a read may need to write, a write to read) */
	TLS_EOF,         /* the peer closed (close_notify or a plain end of stream) */
	TLS_SYSCALL,     /* the socket failed: *sys_errno says how */
	TLS_FAILED,      /* a TLS failure: *te and err say what */
};

/* The configurations, with the CA bundle file and directory used when a subscription
 * names none (libcurl's own defaults, so both clients trust the same authorities;
 * borrowed strings, copied; either may be NULL). NULL when out of memory. */
struct tls_confs *tls_confs_open(const char *default_ca_file, const char *default_ca_path);
/* Frees every configuration (the links made with them must be closed first). */
void tls_confs_close(struct tls_confs *cs);
/* The configuration of these files (borrowed, copied; NULL for none), made on first use,
 * without reading any file: the pointer stays the same until tls_confs_close. hint (may
 * be NULL): the caller's last answer, returned at once when it is still the one (every
 * request asks; the list is walked only when the files changed). NULL when out of
 * memory. */
struct tls_conf *tls_conf_get(struct tls_confs *cs, struct tls_conf *hint, const char *ca_file,
			      const char *client_cert,
			      const char *client_key);

/* A new TLS link over the connected socket fd (borrowed: closed by the caller; read with
 * recvmsg, its SO_TIMESTAMP taken when set) to host (borrowed: must outlive the link)
 * (a name: SNI and its name verified; an IP address: its address verified), resuming
 * resume's session when it has one of the configuration's current generation; later
 * sessions go into *resume, which must outlive the link. Reads the configuration's files
 * first when one changed. NULL with err (te TRANSPORT_TLS: libcurl's text for a file it
 * could not use; TRANSPORT_OTHER: out of memory) when it cannot be made. */
struct tls_link *tls_link_new(struct tls_conf *conf, int fd, const char *host,
			      struct tls_resume *resume, enum transport_error *te, char *err,
			      size_t errlen);
/* One step of the handshake: TLS_DONE, a TLS_WANT_*, or TLS_FAILED with *te and err
 * (port: for the message, as libcurl writes it). */
enum tls_step tls_link_handshake(struct tls_link *l, int port, enum transport_error *te,
				 char *err, size_t errlen);
/* Whether the handshake resumed a session. */
int tls_link_resumed(const struct tls_link *l);
/* Writes up to len bytes of buf (*done: how many; the same bytes must be offered again
 * after a TLS_WANT_*). TLS_FAILED: err holds libcurl's text, *te its class. */
enum tls_step tls_link_write(struct tls_link *l, const void *buf, size_t len, size_t *done,
			     int *sys_errno, enum transport_error *te, char *err, size_t errlen);
/* Reads up to cap bytes into buf (*got: how many, TLS_DONE only). */
enum tls_step tls_link_read(struct tls_link *l, void *buf, size_t cap, size_t *got,
			    int *sys_errno, enum transport_error *te, char *err, size_t errlen);
/* Bytes the link took from the socket and has not handed out yet (epoll does not see
 * them): a read would find them without waiting. */
int tls_link_pending(const struct tls_link *l);
/* When the kernel received the bytes of the link's last read from the socket (wall
 * clock, µs; SO_TIMESTAMP on the socket), 0 when not known. */
int64_t tls_link_stamp_us(const struct tls_link *l);
/* Sends close_notify when the socket takes it at once (never waits) and frees the link;
 * broken: the link failed, nothing is sent. NULL is ignored. */
void tls_link_close(struct tls_link *l, int broken);
/* Frees the session kept in r. */
void tls_resume_clear(struct tls_resume *r);

#endif
