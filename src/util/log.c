/* log.c: one-line logs to stderr, "2026-11-21T23:04:15.123Z info message".
 *
 * Each line is assembled in a bounded stack buffer and written with a single fprintf, so
 * lines from different threads do not interleave. Control characters in the message are
 * replaced, so a line is always one line (a peer's error text cannot forge log lines).
 * Messages longer than the buffer are cut and end in "...". */
#include "util/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "util/clock.h"

#define LOG_LINE_MAX 4096

static _Atomic int log_threshold = LOG_INFO;
static _Atomic int log_fmt = LOG_FORMAT_TEXT;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void log_set_level(enum log_level l)
{
	if ((unsigned)l <= LOG_ERROR)
		atomic_store_explicit(&log_threshold, (int)l, memory_order_relaxed);
}

void log_set_format(enum log_format f)
{
	atomic_store_explicit(&log_fmt, (int)f, memory_order_relaxed);
}

int log_format_parse(const char *name, enum log_format *out)
{
	if (!name)
		return -1;
	if (strcasecmp(name, "text") == 0)
		*out = LOG_FORMAT_TEXT;
	else if (strcasecmp(name, "json") == 0)
		*out = LOG_FORMAT_JSON;
	else if (strcasecmp(name, "auto") == 0)
		*out = isatty(STDERR_FILENO) ? LOG_FORMAT_TEXT : LOG_FORMAT_JSON;
	else
		return -1;
	return 0;
}

int log_level_parse(const char *name, enum log_level *out)
{
	if (!name)
		return -1;
	for (int i = 0; i <= LOG_ERROR; i++) {
		if (strcasecmp(name, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	if (strcasecmp(name, "warning") == 0) {
		*out = LOG_WARN;
		return 0;
	}
	return -1;
}

void log_msg(enum log_level l, const char *fmt, ...)
{
	char msg[LOG_LINE_MAX];
	char ts[RFC3339_LEN];
	va_list ap;
	int n;

	if ((unsigned)l > LOG_ERROR)
		l = LOG_ERROR;
	if ((int)l < atomic_load_explicit(&log_threshold, memory_order_relaxed))
		return;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (n < 0)
		snprintf(msg, sizeof(msg), "(unformattable log message)");
	else if ((size_t)n >= sizeof(msg))
		memcpy(msg + sizeof(msg) - 4, "...", 4);

	for (char *p = msg; *p; p++) {
		if (*p == '\n' || *p == '\r' || *p == '\t')
			*p = ' ';
		else if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	}

	clock_format_rfc3339(clock_now_ms(), ts);
	if (atomic_load_explicit(&log_fmt, memory_order_relaxed) == LOG_FORMAT_JSON) {
		/* Control characters are gone already; only quotes and backslashes need
		 * escaping. */
		char esc[2 * LOG_LINE_MAX];
		size_t k = 0;
		for (const char *p = msg; *p && k < sizeof(esc) - 2; p++) {
			if (*p == '"' || *p == '\\')
				esc[k++] = '\\';
			esc[k++] = *p;
		}
		esc[k] = '\0';
		fprintf(stderr, "{\"time\":\"%s\",\"level\":\"%s\",\"msg\":\"%s\"}\n", ts,
			level_names[l], esc);
		return;
	}
	fprintf(stderr, "%s %s %s\n", ts, level_names[l], msg);
}

void log_record(const char *msg, const char *fields)
{
	char ts[RFC3339_LEN];
	size_t len = fields ? strlen(fields) : 0;

	if (len < 2 || fields[0] != '{' || fields[len - 1] != '}' || strpbrk(fields, "\r\n"))
		fields = "{}";
	for (const char *p = msg; *p; p++)
		if (!(*p >= 'A' && *p <= 'Z') && !(*p >= 'a' && *p <= 'z') && *p != '_' && *p != '.')
			msg = "record"; /* a word only: nothing to escape */
	clock_format_rfc3339(clock_now_ms(), ts);
	if (atomic_load_explicit(&log_fmt, memory_order_relaxed) == LOG_FORMAT_JSON) {
		int empty = strcmp(fields, "{}") == 0;
		fprintf(stderr, "{\"time\":\"%s\",\"level\":\"info\",\"msg\":\"%s\"%s%s\n", ts, msg,
			empty ? "" : ",", empty ? "}" : fields + 1);
		return;
	}
	fprintf(stderr, "%s info %s %s\n", ts, msg, fields);
}
