-- 9: the status index keeps only deliveries that are not done. Every
-- delivery ends PROCESSED, so the full index paid an index insert for each result and a
-- delete for each cleanup, to serve lists filtered by status=PROCESSED, which the
-- created_at index serves as well (nearly every row is PROCESSED), and the cleanup's
-- scan.
DROP INDEX outboxd.deliveries_status;
CREATE INDEX deliveries_status ON outboxd.deliveries(status, created_at, id)
  WHERE status <> 'PROCESSED';
