-- 16: events.envelope: the Kafka message an event came as, for the API's view of its
-- deliveries (the dead-letter queue shows the message as bytes and parsed): an
-- OutboxEvent with its credentials masked (they are kept, sealed, in the subscription
-- derived from its target), or the raw bytes of one that could not be decoded. NULL for
-- events that came another way.
ALTER TABLE outboxd.events ADD COLUMN envelope bytea;
