/* deadline.h: the absolute deadline of each API connection's request.
 *
 * The idle timeout of the HTTP server restarts with every byte, so a client sending a
 * header line every few seconds, or a body a byte at a time, would hold its connection
 * for as long as it likes. Here each connection has a deadline instead: it starts when
 * the connection is accepted and again when an answer has been sent (the next request on
 * a kept-alive connection), again when a request line arrives, and stops once the request
 * has arrived whole (writing an answer to a slow reader is not bounded by it). So a
 * request line comes within the timeout of the connection being ready for it, and the
 * rest of the request within the timeout of its line. A connection still reading at its
 * deadline is
 * shut down (shutdown(2)), which the server sees as the client leaving: it closes the
 * connection and frees what it held. One thread checks the deadlines four times a second.
 *
 * Knows sockets and time only; http.c calls it from the server's callbacks. */
#ifndef OUTBOXD_API_DEADLINE_H
#define OUTBOXD_API_DEADLINE_H

#include <stdint.h>

struct deadlines;

/* Room for max_connections connections, each with timeout_ms to send a request; starts
 * the checking thread. Returned; NULL when out of memory or no thread could start. */
struct deadlines *deadlines_start(int max_connections, int64_t timeout_ms);
/* Stops the thread and frees d (NULL is fine). No connection may be watched any more. */
void deadlines_stop(struct deadlines *d);

/* Watches the connection on fd, its deadline running from now. Returns its handle
 * (>= 0), or -1 when every place is taken (the connection then has none). */
int deadline_watch(struct deadlines *d, int fd);
/* The request of handle arrived whole: no deadline until deadline_restart. */
void deadline_pause(struct deadlines *d, int handle);
/* The next request of handle may come, or its line came: its deadline runs from now. */
void deadline_restart(struct deadlines *d, int handle);
/* The connection of handle is closing; must be called before its fd is closed, so that
 * the fd, once reused, is never shut down in its place. */
void deadline_forget(struct deadlines *d, int handle);

#endif
