-- 3: the dead-letter queue gets its own small indexes: operators filter it by
-- subscription and event type and sort it by attempts, and with a million rows the
-- general indexes would scan every live delivery of a subscription (measured by
-- bench/list_latency.sh: 185 ms -> see docs/operations.md). Rows enter them only
-- when they die, so ingest and delivery do not pay for them.

CREATE INDEX deliveries_dead_sub ON deliveries(subscription_id, created_at, id)
  WHERE status = 'FAILED' AND next_attempt_at IS NULL;
CREATE INDEX deliveries_dead_type ON deliveries(event_type, created_at, id)
  WHERE status = 'FAILED' AND next_attempt_at IS NULL;
CREATE INDEX deliveries_dead_attempts ON deliveries(attempt_count, id)
  WHERE status = 'FAILED' AND next_attempt_at IS NULL;
