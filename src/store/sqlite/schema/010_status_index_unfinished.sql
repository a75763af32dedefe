-- 10: the status index keeps only deliveries that are not done. Every
-- delivery ends PROCESSED, so the full index paid a b-tree insert for each result and a
-- delete for each cleanup, to serve lists filtered by status=PROCESSED, which the
-- created_at index serves as well (nearly every row is PROCESSED), and the cleanup's
-- scan, which the table's own order serves (old rows first).
DROP INDEX deliveries_status;
CREATE INDEX deliveries_status ON deliveries(status, created_at, id)
  WHERE status <> 'PROCESSED';
