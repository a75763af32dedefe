-- 8: per-key ordering. A subscription's ordering (0 none, 1 by partition key,
-- a dead delivery blocks its key; 2 by partition key, a dead one is passed over) is a
-- column the claim reads. Each delivery carries its event's partition_key as order_key;
-- blocked parks a delivery (next_attempt_at NULL) so claims do not scan it: 1 behind a
-- dead one of its key, until that is replayed or purged; 2 waiting its turn behind an
-- unfinished one, until that one's final result lets it go.

ALTER TABLE subscriptions ADD COLUMN ordering INTEGER NOT NULL DEFAULT 0;
ALTER TABLE deliveries ADD COLUMN order_key TEXT;
ALTER TABLE deliveries ADD COLUMN blocked INTEGER NOT NULL DEFAULT 0;
UPDATE deliveries SET order_key = (SELECT partition_key FROM events e WHERE e.id = event_id)
  WHERE status <> 'PROCESSED';
-- The claim's question "is an earlier delivery of this key not done yet?"
CREATE INDEX deliveries_order ON deliveries(subscription_id, order_key, id)
  WHERE order_key IS NOT NULL AND status <> 'PROCESSED';
CREATE INDEX deliveries_blocked ON deliveries(subscription_id, order_key)
  WHERE blocked > 0;
