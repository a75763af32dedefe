/* header.h: what may go into an HTTP header line — the one check for every value outboxd
 * writes into the head of a request: a subscription's headers and credentials, an
 * event's content type and type, the target of a Kafka envelope.
 *
 * A CR or LF inside a value would end its line early and let the text after it become
 * headers of its own (request smuggling toward receivers, past the list of headers a
 * subscription may not set); NUL and the other control characters are refused with
 * them (RFC 9110 §5.5: a field value is visible characters, spaces and tabs, and bytes
 * from 0x80 up). Pure: no I/O, no allocation. */
#ifndef OUTBOXD_CORE_HEADER_H
#define OUTBOXD_CORE_HEADER_H

#include <stddef.h>

/* 1 when the len bytes at value may be a header value: no byte below 0x20 but the tab,
 * and no DEL (0x7f); 0 otherwise. */
int header_value_valid(const char *value, size_t len);

/* 1 when name (NUL-terminated) may be a header name outboxd writes: 1 to
 * HEADER_NAME_MAX letters, digits, '-' and '_'; 0 otherwise. */
#define HEADER_NAME_MAX 128
int header_name_valid(const char *name);

/* 1 when the content type ct says JSON: application/json or a +json type (RFC 6839),
 * parameters after ';' aside, letters' case ignored. How an event's payload is shown
 * (JSON or base64) and whether a payload filter can read it. */
int header_is_json_type(const char *ct);

/* What a refused value's error message says, after the field's name. */
#define HEADER_VALUE_RULE "must not contain control characters (CR, LF, NUL, ...)"

#endif
