/* service.h: outboxd under a service manager (systemd, Type=notify; dist/outboxd.service):
 * readiness once the store is open and the API listens, a status line, the watchdog, and
 * reloading the settings that can change without a restart on SIGHUP. The notifications
 * go through libsystemd's sd_notify, a no-op when NOTIFY_SOCKET is not set (a terminal,
 * the tests, another supervisor). */
#ifndef OUTBOXD_CLI_SERVICE_H
#define OUTBOXD_CLI_SERVICE_H

#include <stdint.h>

#include "core/config.h"
#include "deliver/dispatcher.h"
#include "intake/ops_events.h"

/* READY=1 with a STATUS= line naming where outboxd listens and its store. */
void service_ready(const char *scheme, const char *listen, const char *backend);

/* RELOADING=1 (SIGHUP received), STOPPING=1 (SIGTERM or SIGINT received). */
void service_reloading(void);
void service_stopping(void);

/* How often to call service_watchdog, in µs: half of the WATCHDOG_USEC systemd set for
 * this process; 0 when there is no watchdog. */
int64_t service_watchdog_interval_us(void);

/* WATCHDOG=1 when the dispatcher's loop turned within the watchdog interval (it turns
 * about once a second even when idle); else nothing, so that a stuck dispatcher is
 * restarted by systemd (WatchdogSec), and a warning is logged once. */
void service_watchdog(struct dispatcher *d);

/* SIGHUP: fresh holds the settings as they read now (flags, environment, config file).
 * The reloadable ones that changed (config_setting_reloadable) are applied to the
 * running parts (the log, ops, disp) and copied into live, each logged with its old and
 * new value; every other changed setting is named in one warning saying it needs a
 * restart and keeps its running value. ops and disp may be NULL. Returns the number of
 * settings applied. */
int service_reload(struct config *live, const struct config *fresh, struct ops_events *ops,
		   struct dispatcher *disp);

#endif
