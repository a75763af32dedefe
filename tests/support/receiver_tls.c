/* receiver_tls.c: test_receiver's HTTPS side (GnuTLS through libmicrohttpd): with
 * --client-ca, a client certificate required and verified in the handshake, refused with
 * a fatal alert as an mTLS subscriber does; session tickets (RFC 5077 / TLS 1.3), so a
 * client can resume its session on a new connection as with most HTTPS servers; the
 * certificate's subject and whether the session was resumed in each record; the PEM
 * files read at start. Nothing else here knows GnuTLS. */
#include "receiver.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <gnutls/gnutls.h>
#include <gnutls/x509.h>

#define PEM_MAX           (1u << 20)   /* certificate, key and CA files */

bool tls_require_client_cert;    /* --client-ca given */
static gnutls_datum_t ticket_key; /* the key of every session ticket (made once) */
static pthread_once_t ticket_key_once = PTHREAD_ONCE_INIT;

static void ticket_key_make(void)
{
	if (gnutls_session_ticket_key_generate(&ticket_key) != 0)
		ticket_key.data = NULL;
}

static gnutls_session_t tls_session_of(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(conn, MHD_CONNECTION_INFO_GNUTLS_SESSION);

	return ci ? (gnutls_session_t)ci->tls_session : NULL;
}

/* Runs inside the handshake: no client certificate, or one the --client-ca trust list
 * does not verify, ends the handshake with a fatal alert, as a server with mandatory
 * client certificates does (MHD would close without one, which clients report as a mere
 * dropped connection). In TLS 1.3 the client sees its handshake done before we judge its
 * certificate and sends its request at once: the pause lets it read the alert before our
 * close (a reset, with that request unread) could discard it. */
static int client_cert_verify_cb(gnutls_session_t session)
{
	const struct timespec pause = {.tv_sec = 0, .tv_nsec = 200 * 1000000L};
	unsigned int status = 0, n = 0;
	int alert;

	if (!gnutls_certificate_get_peers(session, &n) || n == 0)
		alert = GNUTLS_A_CERTIFICATE_REQUIRED;
	else if (gnutls_certificate_verify_peers2(session, &status) < 0 || status != 0)
		alert = GNUTLS_A_UNKNOWN_CA;
	else
		return 0;
	gnutls_alert_send(session, GNUTLS_AL_FATAL, (gnutls_alert_description_t)alert);
	nanosleep(&pause, NULL);
	return GNUTLS_E_CERTIFICATE_ERROR;
}

/* On a new connection, before its handshake: ask for a client certificate and check it
 * in the handshake (MHD alone would only ask). */
void notify_connection_cb(void *cls, struct MHD_Connection *conn, void **socket_ctx,
			  enum MHD_ConnectionNotificationCode code)
{
	gnutls_session_t session;

	if (code != MHD_CONNECTION_NOTIFY_STARTED)
		return;
	session = tls_session_of(conn);
	if (!session)
		return;
	pthread_once(&ticket_key_once, ticket_key_make);
	if (ticket_key.data)
		gnutls_session_ticket_enable_server(session, &ticket_key);
	if (!tls_require_client_cert)
		return;
	gnutls_certificate_server_set_request(session, GNUTLS_CERT_REQUEST);
	gnutls_session_set_verify_function(session, client_cert_verify_cb);
}

/* Adds "tls": true and "client_cert" (subject DN or null) to a record of a TLS request. */
void record_tls(struct MHD_Connection *conn, json_t *rec)
{
	gnutls_session_t session = tls_session_of(conn);
	const gnutls_datum_t *peers;
	unsigned int n = 0;
	gnutls_x509_crt_t crt;
	gnutls_datum_t dn = {NULL, 0};

	if (!session)
		return;
	json_object_set_new(rec, "tls", json_true());
	json_object_set_new(rec, "tls_resumed", json_boolean(gnutls_session_is_resumed(session)));
	peers = gnutls_certificate_get_peers(session, &n);
	if (peers && n > 0 && gnutls_x509_crt_init(&crt) == 0) {
		if (gnutls_x509_crt_import(crt, &peers[0], GNUTLS_X509_FMT_DER) == 0 &&
		    gnutls_x509_crt_get_dn3(crt, &dn, 0) == 0) {
			json_object_set_new(rec, "client_cert", json_stringn((char *)dn.data, dn.size));
			gnutls_free(dn.data);
		}
		gnutls_x509_crt_deinit(crt);
	}
	if (!json_object_get(rec, "client_cert"))
		json_object_set_new(rec, "client_cert", json_null());
}

/* The whole file at path (returned to the caller, NUL-terminated), or NULL (printed). */
char *read_pem(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *data = NULL;
	size_t len = 0;

	if (!f) {
		fprintf(stderr, "test_receiver: %s: %s\n", path, strerror(errno));
		return NULL;
	}
	data = malloc(PEM_MAX + 1);
	if (data) {
		len = fread(data, 1, PEM_MAX + 1, f);
		if (len > PEM_MAX || ferror(f)) {
			fprintf(stderr, "test_receiver: %s: unreadable or over 1 MiB\n", path);
			free(data);
			data = NULL;
		} else {
			data[len] = '\0';
		}
	}
	fclose(f);
	return data;
}
