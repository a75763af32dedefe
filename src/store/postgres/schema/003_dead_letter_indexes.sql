-- 3: the dead-letter queue's own small indexes (see the SQLite backend): rows enter
-- them only when they die, so ingest and delivery do not pay for them.

CREATE INDEX deliveries_dead_sub ON outboxd.deliveries(subscription_id, created_at, id)
  WHERE status = 'FAILED' AND next_attempt_at IS NULL;
CREATE INDEX deliveries_dead_type ON outboxd.deliveries(event_type, created_at, id)
  WHERE status = 'FAILED' AND next_attempt_at IS NULL;
CREATE INDEX deliveries_dead_attempts ON outboxd.deliveries(attempt_count, id)
  WHERE status = 'FAILED' AND next_attempt_at IS NULL;
