/* input_error.h: what went wrong with a user's input, in the shape of the API's error
 * body {"error":{"code","message","field"}} (a contract: docs/contracts.md).
 * Filled by validators in intake/ and api/; turned into JSON only by the API. */
#ifndef OUTBOXD_CORE_INPUT_ERROR_H
#define OUTBOXD_CORE_INPUT_ERROR_H

#include <stdarg.h>
#include <stdio.h>

struct input_error {
	int status;          /* HTTP status: 400, 404, 409, 413, 415, 422, 503 ... */
	char code[32];       /* invalid_argument, not_found, payload_too_large ... */
	char message[256];
	char field[128];     /* "" when no single field is at fault */
};

static inline int input_error_set(struct input_error *e, int status, const char *code,
				  const char *field, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* Fills e and returns -1, so validators can `return input_error_set(...)`. */
static inline int input_error_set(struct input_error *e, int status, const char *code,
				  const char *field, const char *fmt, ...)
{
	va_list ap;
	e->status = status;
	snprintf(e->code, sizeof(e->code), "%s", code);
	snprintf(e->field, sizeof(e->field), "%s", field ? field : "");
	va_start(ap, fmt);
	vsnprintf(e->message, sizeof(e->message), fmt, ap);
	va_end(ap);
	return -1;
}

#endif
