-- split.sql: the proposed schema, on a database holding outboxd's events, attempts,
-- attempt_minutes and subscriptions tables (run.sh copies their definitions), and the same
-- delivery path on it.
-- the split: deliveries keeps what a delivery is and what happened to it, every index on
-- columns that never change (so a result's update can be HOT); queue holds the unfinished
-- ones with their due time and lease.
CREATE TABLE outboxd.deliveries (
  id text COLLATE "C" PRIMARY KEY,
  event_id text COLLATE "C" NOT NULL,
  subscription_id text COLLATE "C" NOT NULL,
  event_type text NOT NULL,
  status text NOT NULL,
  replay boolean NOT NULL DEFAULT false,
  attempt_count integer NOT NULL DEFAULT 0,
  retry_count integer NOT NULL DEFAULT 0,
  next_attempt_at bigint,
  last_code integer, last_message text, last_cause text,
  created_at bigint NOT NULL, updated_at bigint NOT NULL, processed_at bigint,
  delay_actions integer NOT NULL DEFAULT 0, order_key text,
  failing_since bigint, starts_scheduled boolean NOT NULL DEFAULT false,
  dead_letter_pending boolean NOT NULL DEFAULT false
) WITH (fillfactor = 50); -- room on the page for the result's new row version (HOT):
                          -- at 80, 27% of the results were HOT, at 50, 90%
CREATE INDEX deliveries_subscription ON outboxd.deliveries(subscription_id, created_at, id);
CREATE INDEX deliveries_created ON outboxd.deliveries(created_at, id);
CREATE INDEX deliveries_event ON outboxd.deliveries(event_id);
CREATE TABLE outboxd.queue (
  delivery_id text COLLATE "C" PRIMARY KEY,
  status text NOT NULL,
  created_at bigint NOT NULL,
  next_attempt_at bigint,
  lease_owner text,
  lease_until bigint,
  order_key text
);
CREATE INDEX queue_due ON outboxd.queue(next_attempt_at)
  WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL;
CREATE INDEX queue_lease ON outboxd.queue(lease_until) WHERE lease_until IS NOT NULL;
CREATE INDEX queue_status ON outboxd.queue(status, created_at, delivery_id);
INSERT INTO outboxd.subscriptions(id, name, config, enabled, created_at, updated_at)
  VALUES ('sub1', 'sink', '{}', true, 0, 0) ON CONFLICT DO NOTHING;
DROP FUNCTION IF EXISTS ingest(int); DROP PROCEDURE IF EXISTS ingest(int);
CREATE OR REPLACE PROCEDURE ingest(n int) LANGUAGE plpgsql AS $$
DECLARE ms bigint := (extract(epoch from clock_timestamp()) * 1000)::bigint;
BEGIN
  FOR i IN 1 .. n / 100 LOOP
    WITH ev AS (INSERT INTO outboxd.events(id, event_type, content_type, payload, created_at)
      SELECT nid(), 'bench.event', 'application/json',
        convert_to('{"n":1,"pad":"' || repeat('0', 150) || '"}', 'UTF8'), ms
      FROM generate_series(1, 100) RETURNING id),
    d AS (INSERT INTO outboxd.deliveries(id, event_id, subscription_id, event_type, status,
      next_attempt_at, created_at, updated_at)
      SELECT nid(), id, 'sub1', 'bench.event', 'NEW', ms, ms, ms FROM ev RETURNING id)
    INSERT INTO outboxd.queue(delivery_id, status, created_at, next_attempt_at)
    SELECT id, 'NEW', ms, ms FROM d;
    COMMIT;
  END LOOP;
END $$;
DROP FUNCTION IF EXISTS drain(); DROP PROCEDURE IF EXISTS drain(int);
CREATE OR REPLACE PROCEDURE drain(INOUT total int) LANGUAGE plpgsql AS $$
DECLARE ids text[]; ms bigint;
BEGIN
  LOOP
    ms := (extract(epoch from clock_timestamp()) * 1000)::bigint;
    WITH c AS (
      UPDATE outboxd.queue q SET lease_owner = 'me', lease_until = ms + 60000
      WHERE q.delivery_id IN (SELECT delivery_id FROM outboxd.queue
        WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL AND next_attempt_at <= ms
        AND order_key IS NULL
        ORDER BY next_attempt_at LIMIT 512 FOR UPDATE SKIP LOCKED)
      RETURNING q.delivery_id, q.next_attempt_at)
    SELECT array_agg(d.id ORDER BY c.next_attempt_at, d.id) INTO ids
      FROM c JOIN outboxd.deliveries d ON d.id = c.delivery_id
      JOIN outboxd.events e ON e.id = d.event_id WHERE length(e.payload) > 0;
    COMMIT;
    EXIT WHEN ids IS NULL;
    total := total + array_length(ids, 1);
    WITH gone AS (
      DELETE FROM outboxd.queue q USING unnest(ids) AS r(id)
      WHERE q.delivery_id = r.id AND q.lease_owner = 'me' RETURNING q.delivery_id),
    upd AS (
      UPDATE outboxd.deliveries d SET status = 'PROCESSED', attempt_count = 1,
        next_attempt_at = NULL, processed_at = ms, last_code = NULL, last_message = NULL,
        failing_since = NULL, updated_at = ms
      FROM gone WHERE d.id = gone.delivery_id
      RETURNING d.id, d.subscription_id),
    att AS (INSERT INTO outboxd.attempts(delivery_id, n, kind, started_at, duration_ms, code,
        message, instance, not_sent)
      SELECT id, 1, 'immediate', ms, 1, 200, 'HTTP 200', 'me', false FROM upd)
    INSERT INTO outboxd.attempt_minutes AS m(minute, subscription_id, duration_ms, owner,
        succeeded, client_error, server_error)
      SELECT ms - ms % 60000, subscription_id, 1, 'me', count(*), 0, 0 FROM upd GROUP BY 2
      ON CONFLICT (minute, subscription_id, duration_ms, owner) DO UPDATE
      SET succeeded = m.succeeded + EXCLUDED.succeeded;
    COMMIT;
  END LOOP;
END $$;
