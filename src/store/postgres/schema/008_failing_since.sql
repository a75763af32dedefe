-- 8: the implicit dead-letter queue. With max_retries 0 retries never run out, so
-- nothing is dead for want of them: operators find what keeps failing by how long it
-- has. failing_since is when the delivery's current run of failures began (its first
-- failed round), kept while it stays FAILED and cleared by a success. The index holds
-- only deliveries that are still being retried, so the stats' "oldest failing" is one
-- probe and deliveries that succeed never enter it.

ALTER TABLE outboxd.deliveries ADD COLUMN failing_since bigint;
UPDATE outboxd.deliveries d SET failing_since = COALESCE(
    (SELECT started_at FROM outboxd.attempts a WHERE a.delivery_id = d.id AND a.n = 1),
    d.updated_at)
  WHERE d.status = 'FAILED';
CREATE INDEX deliveries_failing ON outboxd.deliveries(failing_since)
  WHERE status = 'FAILED' AND next_attempt_at IS NOT NULL;
