/* log.h: one-line logs to stderr, as text ("2026-11-21T23:04:15.123Z info message") or
 * as JSON lines ({"time":"...","level":"info","msg":"message"}) for log collectors. */
#ifndef OUTBOXD_UTIL_LOG_H
#define OUTBOXD_UTIL_LOG_H

enum log_level { LOG_DEBUG = 0, LOG_INFO, LOG_WARN, LOG_ERROR };

enum log_format { LOG_FORMAT_TEXT = 0, LOG_FORMAT_JSON };

void log_set_level(enum log_level l);
void log_set_format(enum log_format f);
/* "text", "json", or "auto" (text when stderr is a terminal, JSON otherwise). */
int log_format_parse(const char *name, enum log_format *out);
int log_level_parse(const char *name, enum log_level *out);
void log_msg(enum log_level l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An audit record, written whatever the log level: msg (a word such as "EXECUTED") and
 * fields, a one-line JSON object ("{...}", e.g. from json_dumps with JSON_COMPACT). As
 * JSON lines its members join time, level and msg in one object; as text the object
 * follows the message. A fields that is not one line of "{...}" is left out. */
void log_record(const char *msg, const char *fields);

#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

#endif
