/* registry.h: the Schema Registry client of the Kafka sink (kafka_schema_registry,
 * docs/kafka.md "The Schema Registry"). With kafka_wire_format confluent, the schema id
 * written in each OutboxEvent's frame is the one a Confluent-compatible registry gives the
 * envelope's .proto (proto/outboxd/v1/outbox_event.proto, embedded at build time) under
 * the subject TOPIC-value.
 *
 * One registration per subject for the life of the process: the id is cached in memory
 * and asked again only after a failure (at most once a second per subject), so a
 * published message never costs an HTTP call once its subject is known. The REST calls
 * use libcurl (this file's glue) on a thread of the client's own, so the caller (the
 * dispatcher's thread, which serves every sink) never waits for the registry: a subject
 * not known yet answers REGISTRY_PENDING, and a byte written to the caller's notify fd
 * says an answer came.
 *
 * The pure halves (the request body, the answers, the message index, the URL shown in
 * messages) are exported for tests/unit/kafka/test_registry.c. registry_schema_id may be
 * called from any thread. Credentials (a URL's userinfo) never appear in a message or a
 * log line. */
#ifndef OUTBOXD_KAFKA_REGISTRY_H
#define OUTBOXD_KAFKA_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

typedef struct schema_registry schema_registry;

enum registry_err {
	REGISTRY_OK = 0,
	REGISTRY_UNREACHABLE,  /* no answer: connection refused, timeout, DNS, TLS */
	REGISTRY_REFUSED,      /* an HTTP error answer (4xx, 5xx) */
	REGISTRY_BAD_ANSWER,   /* a 2xx answer without a usable id */
	REGISTRY_NOMEM,
	REGISTRY_PENDING,      /* a registration is under way: ask again after a notify */
};

/* "schema registry unreachable", ...: the message of an attempt that failed for it. */
const char *registry_strerror(enum registry_err e);

/* Opens a client of the registry at url (http:// or https://, optionally with
 * user:password@ for basic auth; borrowed, copied) and starts its thread, which writes
 * one byte to notify_fd (borrowed; non-blocking; -1: none) after each answer. NULL with
 * err set on failure. */
schema_registry *registry_open(const char *url, int notify_fd, char *err, size_t errlen);
/* Stops the thread (a registration under way is abandoned) and frees r. NULL: no-op. */
void registry_close(schema_registry *r);

/* The schema id of topic's OutboxEvent messages, without waiting: REGISTRY_OK with *id
 * from the cache; REGISTRY_PENDING while its registration (POST
 * /subjects/TOPIC-value/versions, 5 s at most) is under way, started by this call when
 * none was; or the last registration's failure with a one-line cause in why (the
 * subject, the registry's address without credentials, curl's or the registry's text),
 * answered for a second after it before the subject is asked again. */
enum registry_err registry_schema_id(schema_registry *r, const char *topic, uint32_t *id,
				     char *why, size_t whylen);

/* The index of OutboxEvent among the top-level messages of the registered schema: what
 * the frame's message-index list names (its readers decode that message). */
uint32_t registry_message_index(const schema_registry *r);

/* Registrations answered with an id (a counter for logs and tests). */
uint64_t registry_registrations(schema_registry *r);

/* ---- pure parts ------------------------------------------------------------------------ */

/* The JSON body of a registration: {"schemaType":"PROTOBUF","schema":schema}. Returned
 * (free it), NULL when out of memory. */
char *registry_request_body(const char *schema);

/* The id of a registration's 2xx answer ({"id":N}, 0 <= N <= 2^31-1; other members
 * ignored). 0, or -1 with why set. body borrowed, len bytes (need not be NUL-terminated). */
int registry_parse_id(const char *body, size_t len, uint32_t *id, char *why, size_t whylen);

/* The text of an error answer: "HTTP STATUS: message (error_code N)" from the registry's
 * {"error_code":N,"message":"..."}, else "HTTP STATUS" and the start of the body, control
 * characters replaced by spaces; always NUL-terminated in out. */
void registry_error_text(long status, const char *body, size_t len, char *out, size_t outlen);

/* The 0-based position of message name among the top-level message declarations of the
 * .proto text proto (comments and nested messages skipped). 0, or -1 when absent. */
int registry_proto_message_index(const char *proto, const char *name, uint32_t *index);

/* url with its userinfo (user:password@) removed, into out (truncated to fit). */
void registry_url_shown(const char *url, char *out, size_t outlen);

/* The subject of topic's values: TOPIC-value (the registry's TopicNameStrategy). 0, or
 * -1 when it does not fit out. */
int registry_subject(const char *topic, char *out, size_t outlen);

#endif
