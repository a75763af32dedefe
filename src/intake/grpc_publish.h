/* grpc_publish.h: the messages of the gRPC ingest (proto/outboxd/v1/ingest.proto, a
 * contract: docs/grpc.md) between bytes and events to store.
 *
 * Each OutboxEvent a call brings is decoded, checked by the rules of POST /v1/events
 * (intake/ingest.h: the event type, the lengths, the payload's size, JSON for a JSON
 * payload) and added to a batch the writer can take as it is; the answer is a
 * PublishReply. Only grpc_publish.c sees protobuf-c's generated types, and nothing here
 * knows gRPC (grpc_intake.c is the server), so the rules are tested without a socket. */
#ifndef OUTBOXD_INTAKE_GRPC_PUBLISH_H
#define OUTBOXD_INTAKE_GRPC_PUBLISH_H

#include <stddef.h>
#include <stdint.h>

#include "core/input_error.h"
#include "intake/ingest.h"

/* The methods' paths on the wire (HTTP/2 :path): /package.Service/Method. */
#define GRPC_PUBLISH_PATH "/outboxd.v1.Ingest/Publish"
#define GRPC_PUBLISH_STREAM_PATH "/outboxd.v1.Ingest/PublishStream"

/* The events of one call, ready for ingest_fanout and writer_ingest. */
struct publish_batch {
	struct ingest_batch in;      /* in.events and in.n: the events, in the order sent;
	                                the fan-out goes into in.sub_ids */
	void **messages;             /* the decoded messages in.events point into, in.n */
	size_t cap;                  /* room of in.events and messages */
	int64_t bytes;               /* encoded size of the messages added */
};

struct publish_limits {
	int64_t max_payload;         /* an event's payload, bytes */
	int64_t max_request;         /* the encoded messages of one call together, bytes */
	size_t max_events;           /* events of one call */
};

/* Decodes the OutboxEvent in data (len bytes, borrowed) and adds it to b (zeroed before
 * the first call) as an event with a new id, created now. index is the message's place in
 * its stream (from 0), named in err's message, or -1 for a unary call. Returns 0; or -1
 * with err naming the field at fault (err->status 400, or 413 for a payload over
 * max_payload or messages over max_request), b unchanged. */
int publish_add(struct publish_batch *b, const void *data, size_t len,
		const struct publish_limits *lim, long index, struct input_error *err);

/* Packs the PublishReply of the stored batch b (ids and duplicates written back by the
 * writer). *out is returned to the caller (free it). 0, or -1 when out of memory. */
int publish_reply(const struct publish_batch *b, void **out, size_t *len);

/* Frees what b holds and zeroes it; safe on a zeroed b. */
void publish_batch_free(struct publish_batch *b);

#endif
