-- 20: the dead-letter queue in the order it is listed by default (created_at, id), a
-- small index like those of migration 3: rows enter it only when they die. Without it,
-- the first page of GET /v1/dlq (what the console shows, every 5 s) read every dead
-- delivery through deliveries_dead_attempts and sorted them: 54 ms with 90,000 dead
-- among 1,000,000 deliveries (bench/list_latency.sh), growing with the queue, where the
-- next page, with a cursor, took 3 ms.
CREATE INDEX deliveries_dead_created ON deliveries(created_at, id)
  WHERE status = 'FAILED' AND next_attempt_at IS NULL;
