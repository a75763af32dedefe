/* errmap.c: transport failure classes to their codes and messages.
 * The codes are a contract (DNS 502, refused 503, timeout 504, TLS 525, other 520:
 * docs/contracts.md); the messages are stable strings that land in
 * attempt history and the DLQ search, so do not reword them casually. */
#include "core/errmap.h"

int errmap_code(enum transport_error e)
{
	switch (e) {
	case TRANSPORT_OK:
		return 0;
	case TRANSPORT_DNS:
		return 502;
	case TRANSPORT_REFUSED:
		return 503;
	case TRANSPORT_TIMEOUT:
		return 504;
	case TRANSPORT_TLS:
		return 525;
	case TRANSPORT_OTHER:
		break;
	}
	return 520; /* TRANSPORT_OTHER and any value outside the enum */
}

const char *errmap_message(enum transport_error e)
{
	switch (e) {
	case TRANSPORT_OK:
		return "ok";
	case TRANSPORT_DNS:
		return "dns resolution failed";
	case TRANSPORT_REFUSED:
		return "connection refused";
	case TRANSPORT_TIMEOUT:
		return "timeout";
	case TRANSPORT_TLS:
		return "tls handshake failed";
	case TRANSPORT_OTHER:
		break;
	}
	return "transport error";
}
