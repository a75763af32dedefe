-- 7: per-key ordering. A subscription's ordering (0 none, 1 by partition key,
-- a dead delivery blocks its key; 2 by partition key, a dead one is passed over) is a
-- column the claim reads. Each delivery carries its event's partition_key as order_key;
-- blocked parks a delivery (next_attempt_at NULL) so claims do not scan it: 1 behind a
-- dead one of its key, until that is replayed or purged; 2 waiting its turn behind an
-- unfinished one, until that one's final result lets it go.

ALTER TABLE outboxd.subscriptions ADD COLUMN ordering smallint NOT NULL DEFAULT 0;
ALTER TABLE outboxd.deliveries ADD COLUMN order_key text;
ALTER TABLE outboxd.deliveries ADD COLUMN blocked smallint NOT NULL DEFAULT 0;
UPDATE outboxd.deliveries d SET order_key = e.partition_key FROM outboxd.events e
  WHERE e.id = d.event_id AND d.status <> 'PROCESSED' AND e.partition_key IS NOT NULL;
-- The claim's question "is an earlier delivery of this key not done yet?"
CREATE INDEX deliveries_order ON outboxd.deliveries(subscription_id, order_key, id)
  WHERE order_key IS NOT NULL AND status <> 'PROCESSED';
CREATE INDEX deliveries_blocked ON outboxd.deliveries(subscription_id, order_key)
  WHERE blocked > 0;
