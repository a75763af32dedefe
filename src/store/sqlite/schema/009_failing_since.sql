-- 9: the implicit dead-letter queue. With max_retries 0 retries never run out, so
-- nothing is dead for want of them: operators find what keeps failing by how long it
-- has. failing_since is when the delivery's current run of failures began (its first
-- failed round), kept while it stays FAILED and cleared by a success. The index holds
-- only deliveries that are still being retried, so the stats' "oldest failing" is one
-- probe and deliveries that succeed never enter it.

ALTER TABLE deliveries ADD COLUMN failing_since INTEGER;
UPDATE deliveries SET failing_since = COALESCE(
    (SELECT started_at FROM attempts a WHERE a.delivery_id = deliveries.id AND a.n = 1),
    updated_at)
  WHERE status = 'FAILED';
CREATE INDEX deliveries_failing ON deliveries(failing_since)
  WHERE status = 'FAILED' AND next_attempt_at IS NOT NULL;
