-- drain with deliveries in flight: claims of 128, results written four claims later
-- (about 512 leased at a time, as outboxd's default max_in_flight keeps)
DROP PROCEDURE IF EXISTS drain(int);
CREATE OR REPLACE PROCEDURE drain(INOUT total int) LANGUAGE plpgsql AS $$
DECLARE ids text[]; q1 text[]; q2 text[]; q3 text[]; q4 text[]; ms bigint; done_ids text[];
BEGIN
  LOOP
    ms := (extract(epoch from clock_timestamp()) * 1000)::bigint;
    WITH c AS (
      UPDATE outboxd.deliveries d SET lease_owner = 'me', lease_until = ms + 60000
      WHERE d.id IN (SELECT id FROM outboxd.deliveries d
        WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL AND next_attempt_at <= ms
        AND d.order_key IS NULL
        ORDER BY next_attempt_at LIMIT 128 FOR UPDATE SKIP LOCKED)
      RETURNING d.id, d.event_id, d.subscription_id, d.status, d.attempt_count, d.next_attempt_at)
    SELECT array_agg(c.id ORDER BY c.next_attempt_at, c.id) INTO ids
      FROM c JOIN outboxd.events e ON e.id = c.event_id WHERE length(e.payload) > 0;
    COMMIT;
    done_ids := q4; q4 := q3; q3 := q2; q2 := q1; q1 := ids;
    EXIT WHEN ids IS NULL AND done_ids IS NULL AND q4 IS NULL AND q3 IS NULL AND q2 IS NULL;
    CONTINUE WHEN done_ids IS NULL;
    total := total + array_length(done_ids, 1);
    WITH upd AS (
      UPDATE outboxd.deliveries d SET status = 'PROCESSED', attempt_count = 1,
        next_attempt_at = NULL, processed_at = ms, last_code = NULL, last_message = NULL,
        lease_owner = NULL, lease_until = NULL, failing_since = NULL, updated_at = ms
      FROM unnest(done_ids) AS r(id) WHERE d.id = r.id AND d.lease_owner = 'me'
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
