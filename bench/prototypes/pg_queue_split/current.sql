-- current.sql: the delivery path on outboxd's PostgreSQL schema as its migrations make it
-- (run.sh migrates the database with outboxd itself): ingest in statements of 100 events
-- with their deliveries; a claim of 512 (the due index, FOR UPDATE SKIP LOCKED, a lease on
-- the delivery row, the events read) and its results (the delivery row updated, the
-- attempts and the per-minute counts inserted), as outboxd's statements do them, without
-- their rarer branches (lost leases, per-key ordering, taken attempt numbers).
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
      FROM generate_series(1, 100) RETURNING id)
    INSERT INTO outboxd.deliveries(id, event_id, subscription_id, event_type, status, replay,
      attempt_count, retry_count, next_attempt_at, created_at, updated_at, delay_actions,
      blocked, starts_scheduled, dead_letter_pending)
    SELECT nid(), id, 'sub1', 'bench.event', 'NEW', false, 0, 0, ms, ms, ms, 0, 0, false, false
    FROM ev;
    COMMIT;
  END LOOP;
END $$;
-- A claim of n (outboxd's statement: the pick materialized, run once) and its results;
-- inflight.sql drains with the same two.
CREATE OR REPLACE FUNCTION claim_batch(n int) RETURNS text[] LANGUAGE plpgsql AS $$
DECLARE ids text[]; ms bigint := (extract(epoch from clock_timestamp()) * 1000)::bigint;
BEGIN
  WITH pick AS MATERIALIZED (SELECT id FROM outboxd.deliveries d
      WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL AND next_attempt_at <= ms
      AND d.order_key IS NULL
      ORDER BY next_attempt_at LIMIT n FOR UPDATE SKIP LOCKED),
    c AS (
      UPDATE outboxd.deliveries d SET lease_owner = 'me', lease_until = ms + 60000
      FROM pick WHERE d.id = pick.id
      RETURNING d.id, d.event_id, d.subscription_id, d.status, d.attempt_count, d.next_attempt_at)
  SELECT array_agg(c.id ORDER BY c.next_attempt_at, c.id) INTO ids
    FROM c JOIN outboxd.events e ON e.id = c.event_id WHERE length(e.payload) > 0;
  RETURN ids;
END $$;
CREATE OR REPLACE FUNCTION record_batch(ids text[]) RETURNS void LANGUAGE plpgsql AS $$
DECLARE ms bigint := (extract(epoch from clock_timestamp()) * 1000)::bigint;
BEGIN
  WITH upd AS (
    UPDATE outboxd.deliveries d SET status = 'PROCESSED', attempt_count = 1,
      next_attempt_at = NULL, processed_at = ms, last_code = NULL, last_message = NULL,
      lease_owner = NULL, lease_until = NULL, failing_since = NULL, updated_at = ms
    FROM unnest(ids) AS r(id) WHERE d.id = r.id AND d.lease_owner = 'me'
    RETURNING d.id, d.subscription_id),
  att AS (INSERT INTO outboxd.attempts(delivery_id, n, kind, started_at, duration_ms, code,
      message, instance, not_sent)
    SELECT id, 1, 'immediate', ms, 1, 200, 'HTTP 200', 'me', false FROM upd)
  INSERT INTO outboxd.attempt_minutes AS m(minute, subscription_id, duration_ms, owner,
      succeeded, client_error, server_error)
    SELECT ms - ms % 60000, subscription_id, 1, 'me', count(*), 0, 0 FROM upd GROUP BY 2
    ON CONFLICT (minute, subscription_id, duration_ms, owner) DO UPDATE
    SET succeeded = m.succeeded + EXCLUDED.succeeded;
END $$;
DROP FUNCTION IF EXISTS drain(); DROP PROCEDURE IF EXISTS drain(int);
CREATE OR REPLACE PROCEDURE drain(INOUT total int) LANGUAGE plpgsql AS $$
DECLARE ids text[];
BEGIN
  LOOP
    ids := claim_batch(512);
    COMMIT;
    EXIT WHEN ids IS NULL;
    total := total + array_length(ids, 1);
    PERFORM record_batch(ids);
    COMMIT;
  END LOOP;
END $$;
