/* sink_caps.c: the endpoint schemes, what each one's member supports and the form of its
 * address (see sink_caps.h). Adding a member with a new scheme adds its row here; the
 * member's own declaration (deliver/sink_NAME.c) must say the same, or the registry
 * refuses to start and tests/unit/deliver/test_sink.c fails. */
#include "core/sink_caps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* http(s)://host[:port][/path][?query]: a host is required, no spaces or controls, and
 * (strict: new input) no user info. address is what follows "scheme://". */
static int http_address_valid(const char *address, int strict, const char **why)
{
	const char *rest = address;
	for (const char *p = address; *p; p++) {
		if ((unsigned char)*p <= ' ' || *p == 0x7f) {
			*why = "endpoint must not contain spaces or control characters";
			return 0;
		}
	}
	size_t host;
	if (rest[0] == '[') {
		/* an IPv6 literal, http://[::1]:8080/ (RFC 3986 §3.2.2) */
		const char *close = strchr(rest, ']');
		if (!close || close == rest + 1 ||
		    strspn(rest + 1, "0123456789abcdefABCDEF:.") != (size_t)(close - rest - 1)) {
			*why = "endpoint has an invalid IPv6 address (write it as [2001:db8::1])";
			return 0;
		}
		host = (size_t)(close - rest) + 1;
	} else {
		host = strcspn(rest, "/?#:");
	}
	if (host == 0) {
		*why = "endpoint must name a host";
		return 0;
	}
	/* user:password@host would be a credential in clear, in every read and cause */
	if (strict && memchr(rest, '@', strcspn(rest, "/?#"))) {
		*why = "endpoint must not carry user info (user:password@): credentials go in auth";
		return 0;
	}
	if (strchr(address, '#')) {
		*why = "endpoint must not contain a fragment";
		return 0;
	}
	if (rest[host] == ':') {
		const char *port = rest + host + 1;
		size_t digits = strspn(port, "0123456789");
		if (digits == 0 || digits > 5 || (port[digits] && port[digits] != '/' &&
						   port[digits] != '?') || atoi(port) > 65535) {
			*why = "endpoint has an invalid port";
			return 0;
		}
	}
	return 1;
}

/* A Kafka topic name: 1 to 249 of [A-Za-z0-9._-], not "." or "..". */
static int kafka_address_valid(const char *t, int strict, const char **why)
{
	(void)strict;
	size_t n = strlen(t);
	if (n == 0 || n > 249 || strcmp(t, ".") == 0 || strcmp(t, "..") == 0 ||
	    strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != n) {
		*why = "a kafka:// endpoint names one topic: 1 to 249 letters, digits, '.', '_' "
		       "or '-' (kafka://orders.events)";
		return 0;
	}
	return 1;
}

/* What the HTTP member does with every request, TLS aside (https:// only). */
#define HTTP_SUPPORTS                                                                         \
	(SINK_CAN_TIMEOUT | SINK_CAN_HEADERS | SINK_CAN_SIGN | SINK_CAN_ORDERING |            \
	 SINK_CAN_AUTH_ANY)

const struct sink_scheme sink_schemes[] = {
	{
		.scheme = "http",
		.member = "http",
		.supports = HTTP_SUPPORTS,
		.instead = "TLS files are for https:// endpoints",
		.instead_for = SINK_CAN_TLS,
		.address_valid = http_address_valid,
	},
	{
		.scheme = "https",
		.member = "http",
		.supports = HTTP_SUPPORTS | SINK_CAN_TLS,
		.address_valid = http_address_valid,
	},
	{
		/* a message has headers and a timeout for its acknowledgement, but no auth, TLS
		 * or signature of its own: the producer's connection has them for all */
		.scheme = "kafka",
		.member = "kafka",
		.supports = SINK_CAN_TIMEOUT | SINK_CAN_HEADERS | SINK_CAN_ORDERING |
			    SINK_CAN_ENVELOPE,
		.instead = "Kafka credentials and TLS go in the kafka_config setting",
		.instead_for = SINK_CAN_AUTH_ANY | SINK_CAN_TLS,
		.address_valid = kafka_address_valid,
	},
};
const size_t sink_schemes_n = sizeof(sink_schemes) / sizeof(sink_schemes[0]);

const struct sink_scheme *sink_scheme_of(const char *endpoint)
{
	const char *sep = endpoint ? strstr(endpoint, "://") : NULL;
	if (!sep)
		return NULL;
	size_t n = (size_t)(sep - endpoint);
	for (size_t i = 0; i < sink_schemes_n; i++)
		if (strlen(sink_schemes[i].scheme) == n &&
		    strncasecmp(endpoint, sink_schemes[i].scheme, n) == 0)
			return &sink_schemes[i];
	return NULL;
}

const struct sink_scheme *sink_scheme_named(const char *scheme)
{
	for (size_t i = 0; scheme && i < sink_schemes_n; i++)
		if (strcasecmp(scheme, sink_schemes[i].scheme) == 0)
			return &sink_schemes[i];
	return NULL;
}

unsigned sink_cap_of_auth(enum auth_type type)
{
	switch (type) {
	case AUTH_BASIC: return SINK_CAN_AUTH_BASIC;
	case AUTH_BEARER: return SINK_CAN_AUTH_BEARER;
	case AUTH_API_KEY: return SINK_CAN_AUTH_API_KEY;
	case AUTH_QUERY: return SINK_CAN_AUTH_QUERY;
	case AUTH_OAUTH2: return SINK_CAN_AUTH_OAUTH2;
	case AUTH_NONE: break;
	}
	return 0;
}

/* What each capability is called in a refusal, and the advice when the row has none. */
static const struct {
	unsigned cap;
	const char *what;
	const char *advice;
} cap_words[] = {
	{SINK_CAN_TIMEOUT, "timeout", "remove it"},
	{SINK_CAN_HEADERS, "headers", "remove them"},
	{SINK_CAN_SIGN, "signing secret", "remove secret and secret_grace"},
	{SINK_CAN_TLS, "tls", "remove it"},
	{SINK_CAN_ORDERING, "ordering", "remove it (or set it to none)"},
	{SINK_CAN_ENVELOPE, "payload_format envelope", "use json or binary"},
	{SINK_CAN_AUTH_BASIC, "auth of type basic", NULL},
	{SINK_CAN_AUTH_BEARER, "auth of type bearer", NULL},
	{SINK_CAN_AUTH_API_KEY, "auth of type api_key", NULL},
	{SINK_CAN_AUTH_QUERY, "auth of type query", NULL},
	{SINK_CAN_AUTH_OAUTH2, "auth of type oauth2", NULL},
};

void sink_caps_refusal(const struct sink_scheme *row, unsigned cap, char *out, size_t outlen)
{
	const char *what = "this option", *advice = "remove it";
	for (size_t i = 0; i < sizeof(cap_words) / sizeof(cap_words[0]); i++) {
		if (cap_words[i].cap == cap) {
			what = cap_words[i].what;
			if (cap_words[i].advice)
				advice = cap_words[i].advice;
		}
	}
	if (cap & SINK_CAN_AUTH_ANY) {
		if (!(row->supports & SINK_CAN_AUTH_ANY))
			what = "auth"; /* none at all: the type does not matter */
		advice = "remove auth or set its type to none";
	}
	if (row->instead && (cap & row->instead_for))
		advice = row->instead;
	snprintf(out, outlen, "%s:// endpoints take no %s; %s", row->scheme, what, advice);
}

void sink_schemes_list(char *out, size_t outlen)
{
	size_t len = 0;
	out[0] = '\0';
	for (size_t i = 0; i < sink_schemes_n && len < outlen; i++) {
		const char *sep = i == 0 ? "" : i + 1 == sink_schemes_n ? " or " : ", ";
		int n = snprintf(out + len, outlen - len, "%s%s://", sep, sink_schemes[i].scheme);
		if (n < 0)
			break;
		len += (size_t)n;
	}
}
