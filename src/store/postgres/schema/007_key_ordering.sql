-- 7: per-key ordering (issue 15). A subscription's ordering (0 none, 1 by partition key,
-- a dead delivery blocks its key; 2 by partition key, a dead one is passed over) is a
-- column the claim reads. Each delivery carries its event's partition_key as order_key;
-- blocked marks a delivery parked behind a dead one of its key (next_attempt_at NULL),
-- so claims do not scan it until the dead one is replayed or purged.

ALTER TABLE outboxd.subscriptions ADD COLUMN ordering smallint NOT NULL DEFAULT 0;
ALTER TABLE outboxd.deliveries ADD COLUMN order_key text;
ALTER TABLE outboxd.deliveries ADD COLUMN blocked boolean NOT NULL DEFAULT false;
UPDATE outboxd.deliveries d SET order_key = e.partition_key FROM outboxd.events e
  WHERE e.id = d.event_id AND d.status <> 'PROCESSED' AND e.partition_key IS NOT NULL;
-- The claim's question "is an earlier delivery of this key not done yet?"
CREATE INDEX deliveries_order ON outboxd.deliveries(subscription_id, order_key, id)
  WHERE order_key IS NOT NULL AND status <> 'PROCESSED';
CREATE INDEX deliveries_blocked ON outboxd.deliveries(subscription_id, order_key)
  WHERE blocked;
