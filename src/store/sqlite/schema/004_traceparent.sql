-- 4: the W3C trace context a producer sent with the event, so the trace goes on
-- to the subscriber.

ALTER TABLE events ADD COLUMN traceparent TEXT;
