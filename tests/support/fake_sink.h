/* fake_sink.h: a delivery target for the dispatcher's unit tests (tests/unit/deliver/): a
 * member of the sink family (deliver/sink.h) whose attempts end as the test scripts them
 * — status, latency, message, cause, Retry-After, a failure before the request was sent,
 * a failure of outboxd's own — with no sockets, no threads and no timers.
 *
 * It takes endpoints starting with "fake://". An attempt it is sent waits until the test
 * runs the sink (fake_sink_run, or the dispatcher's sink_run): then each attempt waiting
 * ends with the next step of the script, in the order they were sent, and the dispatcher
 * hears of it through sink_env.done as from a real sink. Every send is recorded. An
 * attempt with no step left fails the test. */
#ifndef OUTBOXD_TESTS_FAKE_SINK_H
#define OUTBOXD_TESTS_FAKE_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "deliver/sink.h"

#define FAKE_SINK_STEPS 64   /* steps a script holds, and attempts recorded */
#define FAKE_SINK_PENDING 64 /* attempts waiting at once (the test's round pool at most) */

/* How one attempt ends; a field left out is 0 / false. */
struct fake_step {
	int code;                /* the status (or mapped code) the sink reports */
	int64_t latency_us;      /* the latency it reports; 0: the time since send */
	const char *message;     /* NULL: "HTTP <code>" */
	const char *cause;       /* NULL: none */
	int64_t retry_after_ms;  /* a Retry-After the target asked for; 0: none */
	bool not_sent;           /* it failed before the request reached the target */
	bool permanent;          /* a failure no retry can pass (as the SSRF guard's) */
	bool end_round;          /* no more immediate tries in this round */
	bool local;              /* it failed for want of outboxd's own resources */
	bool abandon;            /* it is stopped undecided (sink_env.abandoned), as at
	                            shutdown */
};

/* One attempt as the sink was sent it. */
struct fake_sent {
	char delivery_id[37];
	int attempt_no;
	int64_t timeout_ms;
};

struct fake_sink {
	struct sink sink;        /* the open member */
	struct sink_set set;     /* a set of it alone: dispatcher_config.sinks */
	bool dead_letter;        /* marks dead deliveries of events from a "kafka:" source for
	                            their dead-letter topic, as the Kafka sink does with
	                            kafka_dead_letter */
	struct sink_env env;     /* set by the dispatcher (sink_attach) */
	struct fake_step script[FAKE_SINK_STEPS];
	size_t n_script, next_step;
	struct sink_round *pending[FAKE_SINK_PENDING];
	size_t n_pending;
	struct fake_sent sent[FAKE_SINK_STEPS];
	size_t n_sent;
};

/* An empty sink with no script. */
void fake_sink_init(struct fake_sink *f);

/* Appends n steps (copied) to the script. */
void fake_sink_script(struct fake_sink *f, const struct fake_step *steps, size_t n);

/* Ends every attempt waiting when called (not those sent meanwhile), each with the next
 * step. Returns how many ended. */
size_t fake_sink_run(struct fake_sink *f);

#endif
