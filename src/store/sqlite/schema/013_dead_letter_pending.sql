-- 13: a dead delivery still to be published to its Kafka dead-letter topic. The result
-- that makes a delivery dead sets the mark in the same transaction, and it is cleared
-- only once the topic acknowledged the message, so a crash between the two publishes it
-- after the restart (docs/kafka.md, "Dead-letter topics"). Only marked rows are indexed.
ALTER TABLE deliveries ADD COLUMN dead_letter_pending INTEGER NOT NULL DEFAULT 0;
CREATE INDEX deliveries_dead_letter_pending ON deliveries(id) WHERE dead_letter_pending = 1;
