-- 12: what an event keeps of where it came from, for the Kafka intake.
-- events.webhook_id: the event's id upstream (an OutboxEvent's event.id), the webhook-id
-- of every request and publish of its deliveries, so a subscriber recognises one event
-- across hops (a hub, a processor, a dead-letter processor); NULL: the event's own id.
-- deliveries.starts_scheduled: the delivery's first round is a scheduled retry rather
-- than an immediate round, although it is stored NEW (a message from a dead-letter
-- topic: NEW, first tried by the scheduled layer after retry_interval).
ALTER TABLE events ADD COLUMN webhook_id TEXT;
ALTER TABLE deliveries ADD COLUMN starts_scheduled INTEGER NOT NULL DEFAULT 0;
