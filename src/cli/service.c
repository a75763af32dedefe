/* service.c: sd_notify readiness, status, watchdog and reload (see service.h). The only
 * file that includes libsystemd. */
#include "cli/service.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <systemd/sd-daemon.h>

#include "util/clock.h"
#include "util/duration.h"
#include "util/log.h"

void service_ready(const char *scheme, const char *listen, const char *backend)
{
	sd_notifyf(0, "READY=1\nSTATUS=serving on %s://%s (store: %s)", scheme, listen, backend);
}

void service_reloading(void)
{
	/* MONOTONIC_USEC lets systemd >= 253 (Type=notify-reload) tell this reload apart */
	sd_notifyf(0, "RELOADING=1\nSTATUS=reloading settings\nMONOTONIC_USEC=%lld",
		   (long long)clock_mono_us());
}

void service_stopping(void)
{
	sd_notify(0, "STOPPING=1\nSTATUS=stopping: finishing in-flight deliveries");
}

int64_t service_watchdog_interval_us(void)
{
	uint64_t usec = 0;
	if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
		return 0;
	return (int64_t)(usec / 2);
}

void service_watchdog(struct dispatcher *d)
{
	static int warned;
	int64_t interval = service_watchdog_interval_us();
	int64_t idle = clock_mono_us() - dispatcher_beat_us(d);
	/* the loop turns about once a second: allow it 2 s, or the interval if longer */
	int64_t allowed = interval > 2000000 ? interval : 2000000;

	if (idle <= allowed) {
		sd_notify(0, "WATCHDOG=1");
		warned = 0;
	} else if (!warned) {
		warned = 1;
		log_error("watchdog: the dispatcher has not turned for %lld ms; not telling systemd "
			  "we are alive (it restarts outboxd after WatchdogSec)",
			  (long long)(idle / 1000));
	}
}

/* The value of a reloadable setting as text, for the log (none of them is a secret). */
static void value_text(const struct config *c, const struct config_setting *s, char *out,
		       size_t size)
{
	const char *base = (const char *)c + s->offset;
	switch (s->type) {
	case CONFIG_STRING:
		snprintf(out, size, "%s", *(char *const *)base ? *(char *const *)base : "");
		break;
	case CONFIG_INT:
		snprintf(out, size, "%d", *(const int *)base);
		break;
	case CONFIG_BOOL:
		snprintf(out, size, "%s", *(const int *)base ? "true" : "false");
		break;
	case CONFIG_DURATION:
		duration_format(*(const int64_t *)base, out, size);
		break;
	case CONFIG_SIZE:
		snprintf(out, size, "%lld", (long long)*(const int64_t *)base);
		break;
	case CONFIG_NUMBER:
		snprintf(out, size, "%g", *(const double *)base);
		break;
	}
}

/* Copies setting s from fresh into live (strings duplicated). 0, or -1 out of memory. */
static int take(struct config *live, const struct config *fresh, const struct config_setting *s)
{
	char *dst = (char *)live + s->offset;
	const char *src = (const char *)fresh + s->offset;
	switch (s->type) {
	case CONFIG_STRING: {
		const char *v = *(char *const *)src;
		char *copy = v ? strdup(v) : NULL;
		if (v && !copy)
			return -1;
		free(*(char **)dst);
		*(char **)dst = copy;
		return 0;
	}
	case CONFIG_INT:
	case CONFIG_BOOL:
		*(int *)dst = *(const int *)src;
		return 0;
	case CONFIG_DURATION:
	case CONFIG_SIZE:
		*(int64_t *)dst = *(const int64_t *)src;
		return 0;
	case CONFIG_NUMBER:
		*(double *)dst = *(const double *)src;
		return 0;
	}
	return -1;
}

int service_reload(struct config *live, const struct config *fresh, struct ops_events *ops,
		   struct dispatcher *disp)
{
	char refused[1024] = "";
	size_t rlen = 0;
	int applied = 0, ops_changed = 0;
	enum log_level level;
	enum log_format format;

	/* refuse the whole reload when a reloadable value cannot be used */
	if (log_level_parse(fresh->log_level, &level) || log_format_parse(fresh->log_format, &format)) {
		log_error("reload: log_level must be debug, info, warn or error and log_format json, "
			  "text or auto; keeping the running settings");
		return 0;
	}
	for (const struct config_setting *s = config_settings; s->key; s++) {
		if (config_setting_equal(live, fresh, s))
			continue;
		if (!config_setting_reloadable(s)) {
			rlen += (size_t)snprintf(refused + rlen, rlen < sizeof(refused) ?
						 sizeof(refused) - rlen : 0, "%s%s",
						 rlen ? ", " : "", s->key);
			if (rlen >= sizeof(refused))
				rlen = sizeof(refused) - 1;
			continue;
		}
		char before[128], after[128];
		value_text(live, s, before, sizeof(before));
		value_text(fresh, s, after, sizeof(after));
		if (take(live, fresh, s)) {
			log_error("reload: out of memory applying %s", s->key);
			continue;
		}
		log_info("reload: %s %s -> %s", s->key, before, after);
		applied++;
		ops_changed |= !strcmp(s->key, "ops_events_limit") || !strcmp(s->key, "ops_events_window");
	}
	log_set_level(level);
	log_set_format(format);
	if (ops_changed && ops)
		ops_events_set_limits(ops, live->ops_events_limit, live->ops_events_window_ms);
	if (disp)
		dispatcher_set_log_deliveries(disp, live->log_deliveries);
	if (rlen)
		log_warn("reload: changed but needs a restart, still running with the old value: %s "
			 "(systemctl restart outboxd)", refused);
	log_info("reload: %d setting(s) applied%s", applied, rlen ? ", some refused (see above)" : "");
	return applied;
}
