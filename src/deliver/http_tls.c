/* http_tls.c: TLS of the lean HTTP/1.1 client over OpenSSL (http_tls.h says what it
 * holds). Must not block (the socket is non-blocking and every step says what it waits
 * for), log, or weaken verification: peer and host name verification are always on, as
 * libcurl's are for every delivery.
 *
 * Failure texts are libcurl 7.88's with its OpenSSL backend, word for word, and so is
 * their class (core/errmap.h: TLS 525 for what libcurl reports as a TLS error, the
 * plain client's texts for a socket that failed once the handshake is over), so an
 * attempt's message and cause are the same whichever client made it.
 *
 * OpenSSL writes to the socket itself (a socket BIO: one write per SSL_write of a
 * request) but reads from a memory BIO this file fills with one recvmsg whenever OpenSSL
 * wants more: OpenSSL's own socket reads take a record header and its body in two calls,
 * plus one that finds the socket empty, where this takes what arrived in one, and with
 * it the kernel's receive time of the bytes (SO_TIMESTAMP), which flow control wants. */
#include "deliver/http_tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

/* What one recvmsg may take: a whole TLS record (16 KiB of data and its overhead) with
 * room to spare. */
#define FILL_MAX (32 * 1024)

/* ALPN: HTTP/1.1 is all this client speaks. */
static const unsigned char alpn_http11[] = "\x08http/1.1";

/* What a file looked like when a configuration read it: a change means renewed files. */
struct file_stamp {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	int missing;
};

struct tls_conf {
	struct tls_confs *cs;
	char *ca_file, *client_cert, *client_key; /* NULL: none named */
	SSL_CTX *ctx;                 /* NULL until built, or when the files could not be used */
	unsigned gen;                 /* bumped at each build: sessions of older ones are stale */
	int built;                    /* ctx or err stands for the stamps */
	struct file_stamp stamps[3];  /* ca_file, client_cert, client_key */
	char err[1024];               /* libcurl's text for the file that could not be used */
	enum transport_error err_te;
	struct tls_conf *next;
};

struct tls_confs {
	char *default_ca_file, *default_ca_path;
	struct tls_conf *list;
};

struct tls_link {
	SSL *ssl;
	int fd;
	BIO *rbio;                    /* what arrived and OpenSSL has not read yet (owned by ssl) */
	int eof;                      /* the socket ended: rbio ends after what it holds */
	int64_t stamp_us;             /* when the kernel received the last bytes read (wall
	                                 clock, µs), 0 when not known */
	const char *host;             /* borrowed: the target's */
	struct tls_resume *resume;    /* borrowed: where new sessions go */
	unsigned gen;                 /* the configuration's generation it was made with */
};

/* SSL ex_data slot of a link's struct tls_link (for the new-session callback). */
static int link_index = -1;
static pthread_once_t link_index_once = PTHREAD_ONCE_INIT;

static void link_index_make(void)
{
	link_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL);
}

/* libcurl's ossl_strerror: the library and its version, then OpenSSL's own text. */
static void ossl_text(unsigned long e, char *out, size_t len)
{
	int n = snprintf(out, len, "OpenSSL/%s: ", OpenSSL_version(OPENSSL_VERSION_STRING));
	if (n < 0 || (size_t)n >= len)
		return;
	ERR_error_string_n(e, out + n, len - (size_t)n);
	if (!out[n])
		snprintf(out + n, len - (size_t)n, "%s", e ? "Unknown error" : "No error");
}

static const char *ssl_error_name(int e)
{
	switch (e) {
	case SSL_ERROR_NONE: return "SSL_ERROR_NONE";
	case SSL_ERROR_SSL: return "SSL_ERROR_SSL";
	case SSL_ERROR_WANT_READ: return "SSL_ERROR_WANT_READ";
	case SSL_ERROR_WANT_WRITE: return "SSL_ERROR_WANT_WRITE";
	case SSL_ERROR_WANT_X509_LOOKUP: return "SSL_ERROR_WANT_X509_LOOKUP";
	case SSL_ERROR_SYSCALL: return "SSL_ERROR_SYSCALL";
	case SSL_ERROR_ZERO_RETURN: return "SSL_ERROR_ZERO_RETURN";
	case SSL_ERROR_WANT_CONNECT: return "SSL_ERROR_WANT_CONNECT";
	case SSL_ERROR_WANT_ACCEPT: return "SSL_ERROR_WANT_ACCEPT";
	default: return "SSL_ERROR unknown";
	}
}

/* ---- configurations ------------------------------------------------------------------ */

struct tls_confs *tls_confs_open(const char *default_ca_file, const char *default_ca_path)
{
	pthread_once(&link_index_once, link_index_make);
	if (link_index < 0)
		return NULL;
	struct tls_confs *cs = calloc(1, sizeof(*cs));
	if (!cs)
		return NULL;
	if ((default_ca_file && !(cs->default_ca_file = strdup(default_ca_file))) ||
	    (default_ca_path && !(cs->default_ca_path = strdup(default_ca_path)))) {
		tls_confs_close(cs);
		return NULL;
	}
	return cs;
}

void tls_confs_close(struct tls_confs *cs)
{
	if (!cs)
		return;
	while (cs->list) {
		struct tls_conf *c = cs->list;
		cs->list = c->next;
		SSL_CTX_free(c->ctx);
		free(c->ca_file);
		free(c->client_cert);
		free(c->client_key);
		free(c);
	}
	free(cs->default_ca_file);
	free(cs->default_ca_path);
	free(cs);
}

static int same_name(const char *a, const char *b)
{
	return a == b || (a && b && strcmp(a, b) == 0);
}

static int conf_is(const struct tls_conf *c, const char *ca_file, const char *client_cert,
		   const char *client_key)
{
	return same_name(c->ca_file, ca_file) && same_name(c->client_cert, client_cert) &&
	       same_name(c->client_key, client_key);
}

struct tls_conf *tls_conf_get(struct tls_confs *cs, struct tls_conf *hint, const char *ca_file,
			      const char *client_cert, const char *client_key)
{
	/* libcurl reads the key from the certificate file when none is named */
	if (client_cert && !client_key)
		client_key = client_cert;
	if (!client_cert)
		client_key = NULL;
	if (hint && conf_is(hint, ca_file, client_cert, client_key))
		return hint;
	for (struct tls_conf *c = cs->list; c; c = c->next)
		if (conf_is(c, ca_file, client_cert, client_key))
			return c;
	struct tls_conf *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	if ((ca_file && !(c->ca_file = strdup(ca_file))) ||
	    (client_cert && !(c->client_cert = strdup(client_cert))) ||
	    (client_key && !(c->client_key = strdup(client_key)))) {
		free(c->ca_file);
		free(c->client_cert);
		free(c);
		return NULL;
	}
	c->cs = cs;
	c->next = cs->list;
	cs->list = c;
	return c;
}

static void stamp_of(const char *path, struct file_stamp *s)
{
	struct stat st;
	memset(s, 0, sizeof(*s));
	if (!path)
		return;
	if (stat(path, &st)) {
		s->missing = 1;
		return;
	}
	s->dev = st.st_dev;
	s->ino = st.st_ino;
	s->size = st.st_size;
	s->mtime = st.st_mtim;
}

static int stamp_same(const struct file_stamp *a, const struct file_stamp *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec &&
	       a->missing == b->missing;
}

/* TLS 1.2 sessions after the handshake, TLS 1.3 tickets whenever they arrive: the last
 * one is kept for the target's next connection. 1: the session is ours now. */
static int new_session_cb(SSL *ssl, SSL_SESSION *session)
{
	struct tls_link *l = SSL_get_ex_data(ssl, link_index);
	if (!l || !l->resume)
		return 0;
	tls_resume_clear(l->resume);
	l->resume->session = session;
	l->resume->gen = l->gen;
	return 1;
}

/* Builds c's SSL_CTX from its files: 0, or -1 with libcurl's text for what failed. */
static int conf_build(struct tls_conf *c)
{
	struct tls_confs *cs = c->cs;
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	unsigned long e;
	char detail[TLS_ERR_LEN];

	c->err_te = TRANSPORT_TLS;
	if (!ctx) {
		ossl_text(ERR_get_error(), c->err, sizeof(c->err));
		c->err_te = TRANSPORT_OTHER;
		return -1;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	/* An end of stream without close_notify is an end of stream, as libcurl reads it
	 * (a server that closes after its answer is common; HTTP's own framing says whether
	 * the answer was whole). */
	SSL_CTX_set_options(ctx, SSL_OP_IGNORE_UNEXPECTED_EOF);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	if (SSL_CTX_set_alpn_protos(ctx, alpn_http11, sizeof(alpn_http11) - 1) != 0)
		goto oom;
	/* Sessions are kept per target by new_session_cb, not in OpenSSL's cache. */
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
	SSL_CTX_sess_set_new_cb(ctx, new_session_cb);
	/* A subscription's CA file replaces the default authorities. */
	const char *ca_file = c->ca_file ? c->ca_file : cs->default_ca_file;
	const char *ca_path = c->ca_file ? NULL : cs->default_ca_path;
	if (ca_file && !SSL_CTX_load_verify_file(ctx, ca_file)) {
		snprintf(c->err, sizeof(c->err), "error setting certificate file: %s", ca_file);
		goto fail;
	}
	if (ca_path && !SSL_CTX_load_verify_dir(ctx, ca_path)) {
		snprintf(c->err, sizeof(c->err), "error setting certificate path: %s", ca_path);
		goto fail;
	}
	if (c->client_cert) {
		if (SSL_CTX_use_certificate_chain_file(ctx, c->client_cert) != 1) {
			ossl_text(ERR_get_error(), detail, sizeof(detail));
			snprintf(c->err, sizeof(c->err), "could not load PEM client certificate from "
				 "%s, OpenSSL error %s, (no key found, wrong pass phrase, or wrong file "
				 "format?)", c->client_cert, detail);
			goto fail;
		}
		if (SSL_CTX_use_PrivateKey_file(ctx, c->client_key, SSL_FILETYPE_PEM) != 1) {
			snprintf(c->err, sizeof(c->err), "unable to set private key file: '%s' type PEM",
				 c->client_key);
			goto fail;
		}
		if (SSL_CTX_check_private_key(ctx) != 1) {
			snprintf(c->err, sizeof(c->err),
				 "Private key does not match the certificate public key");
			goto fail;
		}
	}
	ERR_clear_error();
	SSL_CTX_free(c->ctx); /* links made with the old one hold their own reference */
	c->ctx = ctx;
	c->gen++;
	c->err[0] = '\0';
	return 0;
oom:
	snprintf(c->err, sizeof(c->err), "out of memory");
	c->err_te = TRANSPORT_OTHER;
fail:
	while ((e = ERR_get_error()))
		;
	SSL_CTX_free(ctx);
	SSL_CTX_free(c->ctx);
	c->ctx = NULL;
	c->gen++;
	return -1;
}

/* c ready for a new connection: built, and rebuilt when one of its files changed. */
static int conf_refresh(struct tls_conf *c)
{
	struct file_stamp now[3];
	const char *files[3] = {c->ca_file, c->client_cert, c->client_key};
	int same = c->built;
	for (int i = 0; i < 3; i++) {
		stamp_of(files[i], &now[i]);
		if (!stamp_same(&now[i], &c->stamps[i]))
			same = 0;
	}
	if (same)
		return c->ctx ? 0 : -1;
	memcpy(c->stamps, now, sizeof(now));
	c->built = 1;
	return conf_build(c);
}

/* ---- links --------------------------------------------------------------------------- */

static int is_ip_literal(const char *host)
{
	unsigned char a[16];
	return inet_pton(AF_INET, host, a) == 1 || inet_pton(AF_INET6, host, a) == 1;
}

void tls_resume_clear(struct tls_resume *r)
{
	if (r->session)
		SSL_SESSION_free(r->session);
	r->session = NULL;
}

struct tls_link *tls_link_new(struct tls_conf *conf, int fd, const char *host,
			      struct tls_resume *resume, enum transport_error *te, char *err,
			      size_t errlen)
{
	if (conf_refresh(conf)) {
		*te = conf->err_te;
		snprintf(err, errlen, "%s", conf->err);
		return NULL;
	}
	struct tls_link *l = calloc(1, sizeof(*l));
	if (!l || !(l->ssl = SSL_new(conf->ctx)))
		goto oom;
	l->host = host;
	l->resume = resume;
	l->gen = conf->gen;
	l->fd = fd;
	BIO *wbio = BIO_new_socket(fd, BIO_NOCLOSE);
	if (!wbio || !(l->rbio = BIO_new(BIO_s_mem()))) {
		BIO_free(wbio);
		goto oom;
	}
	SSL_set_bio(l->ssl, l->rbio, wbio); /* ssl owns both now */
	if (!SSL_set_ex_data(l->ssl, link_index, l))
		goto oom;
	SSL_set_connect_state(l->ssl);
	if (is_ip_literal(host)) {
		/* no SNI for an address (RFC 6066), the address itself verified */
		if (!X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(l->ssl), host))
			goto oom;
	} else {
		/* a wildcard stands for a whole leftmost label only, as libcurl matches it */
		SSL_set_hostflags(l->ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		if (!SSL_set_tlsext_host_name(l->ssl, host) || !SSL_set1_host(l->ssl, host))
			goto oom;
	}
	if (resume->session && resume->gen == conf->gen &&
	    SSL_SESSION_is_resumable(resume->session))
		SSL_set_session(l->ssl, resume->session);
	return l;
oom:
	ERR_clear_error();
	if (l)
		SSL_free(l->ssl);
	free(l);
	*te = TRANSPORT_OTHER;
	snprintf(err, errlen, "out of memory");
	return NULL;
}

/* One read of what the socket holds into the link's read BIO: 1 when something arrived
 * (or the socket ended: OpenSSL then finds the end after the bytes before it), 0 when it
 * holds nothing yet, -1 when it failed (*sys_errno). */
static int link_fill(struct tls_link *l, int *sys_errno)
{
	char buf[FILL_MAX];
	union {
		char buf[CMSG_SPACE(sizeof(struct timeval))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
			     .msg_controllen = sizeof(ctl.buf)};
	ssize_t n;
	do
		n = recvmsg(l->fd, &msg, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		*sys_errno = errno;
		return -1;
	}
	if (n == 0) {
		l->eof = 1;
		BIO_set_mem_eof_return(l->rbio, 0); /* reads past the end now say "end" */
		return 1;
	}
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMP) {
			struct timeval tv;
			memcpy(&tv, CMSG_DATA(cm), sizeof(tv));
			l->stamp_us = (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
		}
	}
	if (BIO_write(l->rbio, buf, (int)n) != (int)n) {
		*sys_errno = ENOMEM;
		return -1;
	}
	return 1;
}

/* libcurl checks the host name itself once the handshake is over, with its own words:
 * one text when the certificate has subject alternative names, another naming its
 * common name when it has none. */
static void host_mismatch_text(SSL *ssl, const char *host, char *err, size_t errlen)
{
	X509 *cert = SSL_get0_peer_certificate(ssl);
	GENERAL_NAMES *alt = cert ? X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL) : NULL;
	int dns_or_ip = 0;
	for (int i = 0; alt && i < sk_GENERAL_NAME_num(alt); i++) {
		const GENERAL_NAME *g = sk_GENERAL_NAME_value(alt, i);
		if (g->type == GEN_DNS || g->type == GEN_IPADD)
			dns_or_ip = 1;
	}
	GENERAL_NAMES_free(alt);
	char cn[256] = "";
	if (!dns_or_ip && cert)
		X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
	if (dns_or_ip || !cn[0])
		snprintf(err, errlen,
			 "SSL: no alternative certificate subject name matches target host name '%s'",
			 host);
	else
		snprintf(err, errlen, "SSL: certificate subject name '%s' does not match target host "
			 "name '%s'", cn, host);
}

enum tls_step tls_link_handshake(struct tls_link *l, int port, enum transport_error *te,
				 char *err, size_t errlen)
{
	int rc, e, saved_errno, fill_errno = 0;
	for (;;) {
		ERR_clear_error();
		rc = SSL_connect(l->ssl);
		if (rc == 1)
			return TLS_DONE;
		saved_errno = errno;
		e = SSL_get_error(l->ssl, rc);
		if (e == SSL_ERROR_WANT_WRITE)
			return TLS_WANT_WRITE;
		if (e != SSL_ERROR_WANT_READ || l->eof)
			break;
		int got = link_fill(l, &fill_errno);
		if (got == 0)
			return TLS_WANT_READ;
		if (got < 0)
			break;
	}
	if (fill_errno) {
		/* libcurl's socket layer names the failed call */
		ERR_clear_error();
		*te = TRANSPORT_TLS;
		snprintf(err, errlen, "Recv failure: %s", strerror(fill_errno));
		return TLS_FAILED;
	}
	unsigned long detail = ERR_get_error();
	ERR_clear_error();
	*te = TRANSPORT_TLS;
	int lib = ERR_GET_LIB(detail), reason = ERR_GET_REASON(detail);
	if (lib == ERR_LIB_SSL && (reason == SSL_R_CERTIFICATE_VERIFY_FAILED ||
				   reason == SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED)) {
		long v = SSL_get_verify_result(l->ssl);
		if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH)
			host_mismatch_text(l->ssl, l->host, err, errlen);
		else if (v != X509_V_OK)
			snprintf(err, errlen, "SSL certificate problem: %s",
				 X509_verify_cert_error_string(v));
		else
			snprintf(err, errlen, "SSL certificate verification failed");
	} else if (detail) {
		ossl_text(detail, err, errlen);
	} else if (e == SSL_ERROR_SYSCALL && saved_errno) {
		/* only writes reach the socket from inside OpenSSL */
		snprintf(err, errlen, "Send failure: %s", strerror(saved_errno));
	} else {
		/* the peer closed in the middle of the handshake */
		snprintf(err, errlen, "OpenSSL SSL_connect: %s in connection to %s:%d ",
			 ssl_error_name(e == SSL_ERROR_ZERO_RETURN ? SSL_ERROR_SYSCALL : e), l->host,
			 port);
	}
	return TLS_FAILED;
}

int tls_link_resumed(const struct tls_link *l)
{
	return SSL_session_reused(l->ssl);
}

enum tls_step tls_link_write(struct tls_link *l, const void *buf, size_t len, size_t *done,
			     int *sys_errno, enum transport_error *te, char *err, size_t errlen)
{
	size_t n = 0;
	int rc, e, saved_errno;
	*done = 0;
	for (;;) {
		ERR_clear_error();
		rc = SSL_write_ex(l->ssl, buf, len, &n);
		if (rc == 1) {
			*done = n;
			return TLS_DONE;
		}
		saved_errno = errno;
		e = SSL_get_error(l->ssl, rc);
		if (e == SSL_ERROR_WANT_WRITE)
			return TLS_WANT_WRITE;
		if (e != SSL_ERROR_WANT_READ)
			break;
		if (l->eof) {
			*sys_errno = EPIPE; /* the peer is gone: nothing it wanted will come */
			return TLS_SYSCALL;
		}
		int filled = link_fill(l, sys_errno);
		if (filled == 0)
			return TLS_WANT_READ;
		if (filled < 0)
			return TLS_SYSCALL;
	}
	unsigned long detail = ERR_get_error();
	ERR_clear_error();
	if (e == SSL_ERROR_SSL || detail) {
		char text[TLS_ERR_LEN];
		ossl_text(detail, text, sizeof(text));
		snprintf(err, errlen, "SSL_write() error: %s", text);
		*te = TRANSPORT_TLS;
		return TLS_FAILED;
	}
	*sys_errno = saved_errno ? saved_errno : EPIPE;
	return TLS_SYSCALL;
}

enum tls_step tls_link_read(struct tls_link *l, void *buf, size_t cap, size_t *got,
			    int *sys_errno, enum transport_error *te, char *err, size_t errlen)
{
	size_t n = 0;
	int rc, e, saved_errno;
	*got = 0;
	for (;;) {
		ERR_clear_error();
		errno = 0;
		rc = SSL_read_ex(l->ssl, buf, cap, &n);
		if (rc == 1) {
			*got = n;
			return TLS_DONE;
		}
		saved_errno = errno;
		e = SSL_get_error(l->ssl, rc);
		if (e != SSL_ERROR_WANT_READ || l->eof)
			break;
		int filled = link_fill(l, sys_errno);
		if (filled == 0)
			return TLS_WANT_READ;
		if (filled < 0)
			return TLS_SYSCALL;
	}
	switch (e) {
	case SSL_ERROR_WANT_READ: /* the socket ended inside a record */
	case SSL_ERROR_ZERO_RETURN:
		return TLS_EOF;
	case SSL_ERROR_WANT_WRITE:
		return TLS_WANT_WRITE;
	default:
		break;
	}
	unsigned long detail = ERR_get_error();
	ERR_clear_error();
	if (e == SSL_ERROR_SYSCALL && !detail)
		return saved_errno ? (*sys_errno = saved_errno, TLS_SYSCALL) : TLS_EOF;
	char text[TLS_ERR_LEN];
	if (detail)
		ossl_text(detail, text, sizeof(text));
	else
		snprintf(text, sizeof(text), "%s", ssl_error_name(e));
	snprintf(err, errlen, "OpenSSL SSL_read: %s, errno %d", text, saved_errno);
	*te = TRANSPORT_TLS;
	return TLS_FAILED;
}

int tls_link_pending(const struct tls_link *l)
{
	return SSL_pending(l->ssl) > 0 || BIO_ctrl_pending(l->rbio) > 0;
}

int64_t tls_link_stamp_us(const struct tls_link *l)
{
	return l->stamp_us;
}

void tls_link_close(struct tls_link *l, int broken)
{
	if (!l)
		return;
	/* OpenSSL must not send close_notify after a fatal error; otherwise one try, which
	 * the non-blocking socket either takes at once or drops. */
	if (!broken && SSL_is_init_finished(l->ssl))
		SSL_shutdown(l->ssl);
	ERR_clear_error();
	SSL_free(l->ssl);
	free(l);
}
