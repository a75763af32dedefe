-- 4: the W3C trace context a producer sent with the event, so the trace goes on
-- to the subscriber.

ALTER TABLE outboxd.events ADD COLUMN traceparent text;
