-- 20: the queue apart from the deliveries. A claim and a result each updated the
-- delivery's row and changed an indexed column (the lease; the status), so neither could
-- be a HOT update: every one wrote a new entry into every index of the table, about 18
-- index entries per delivery and a third of the server's CPU (docs/performance.md,
-- "The queue apart from the deliveries"). queue holds one row per delivery that is not
-- PROCESSED (new, retrying, dead, parked), with the columns that change while it is
-- unfinished and those its indexes need; the claims, the lease, per-key ordering, the
-- listings by state and the counts read it. deliveries keeps every column as before and
-- only indexes on columns that never change, on pages with room for a row's next version
-- (fillfactor 50), so that a result's update of it is HOT and writes no index entry.
--
-- What keeps the two together:
-- - a delivery's queue row is inserted by the trigger below, for every statement that
--   inserts deliveries (ingest, a copy into this store, an older outboxd during a
--   roll-out), and deleted with the delivery (the delete trigger);
-- - results delete a delivered one's queue row and update the others'; status,
--   attempt_count, next_attempt_at and failing_since are written to both tables by the
--   same statement;
-- - the lease, parking (blocked) and the due time a parked delivery gets back are the
--   queue's alone: deliveries.lease_owner and lease_until keep the lease a delivery was
--   inserted with (a hand-off at ingest), deliveries.blocked what a copy brought, and
--   deliveries.next_attempt_at the due time its last result, ingest or replay set.
--
-- An older outboxd keeps working on this schema during a roll-out, more slowly (its
-- claims read deliveries without the due index) and with some deliveries sent twice (its
-- results do not delete the queue rows, which this version then claims again once their
-- lease ends): docs/deployment.md, "Migrate before rolling out".

CREATE TABLE outboxd.queue (
  id text COLLATE "C" PRIMARY KEY,
  subscription_id text COLLATE "C" NOT NULL,
  event_type text NOT NULL,
  created_at bigint NOT NULL,
  status text NOT NULL,
  attempt_count integer NOT NULL,
  next_attempt_at bigint,
  lease_owner text,
  lease_until bigint,
  order_key text,
  blocked smallint NOT NULL DEFAULT 0,
  failing_since bigint
);
INSERT INTO outboxd.queue(id, subscription_id, event_type, created_at, status,
    attempt_count, next_attempt_at, lease_owner, lease_until, order_key, blocked,
    failing_since)
  SELECT id, subscription_id, event_type, created_at, status, attempt_count,
    next_attempt_at, lease_owner, lease_until, order_key, blocked, failing_since
  FROM outboxd.deliveries WHERE status <> 'PROCESSED';

CREATE INDEX queue_due ON outboxd.queue(next_attempt_at)
  WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL;
CREATE INDEX queue_lease ON outboxd.queue(lease_until) WHERE lease_until IS NOT NULL;
CREATE INDEX queue_status ON outboxd.queue(status, created_at, id);
CREATE INDEX queue_dead_sub ON outboxd.queue(subscription_id, created_at, id)
  WHERE status = 'FAILED' AND next_attempt_at IS NULL;
CREATE INDEX queue_dead_type ON outboxd.queue(event_type, created_at, id)
  WHERE status = 'FAILED' AND next_attempt_at IS NULL;
CREATE INDEX queue_dead_attempts ON outboxd.queue(attempt_count, id)
  WHERE status = 'FAILED' AND next_attempt_at IS NULL;
CREATE INDEX queue_order ON outboxd.queue(subscription_id, order_key, id)
  WHERE order_key IS NOT NULL;
CREATE INDEX queue_blocked ON outboxd.queue(subscription_id, order_key) WHERE blocked > 0;
CREATE INDEX queue_failing ON outboxd.queue(failing_since)
  WHERE status = 'FAILED' AND next_attempt_at IS NOT NULL;

DROP INDEX outboxd.deliveries_due;
DROP INDEX outboxd.deliveries_lease;
DROP INDEX outboxd.deliveries_status;
DROP INDEX outboxd.deliveries_dead_sub;
DROP INDEX outboxd.deliveries_dead_type;
DROP INDEX outboxd.deliveries_dead_attempts;
DROP INDEX outboxd.deliveries_order;
DROP INDEX outboxd.deliveries_blocked;
DROP INDEX outboxd.deliveries_failing;
ALTER TABLE outboxd.deliveries SET (fillfactor = 50);

-- New deliveries enter the queue in the statement that inserts them, and wake the
-- instances' dispatchers when one of them can claim one (a delivery an ingest hands to
-- its own instance is inserted leased).
CREATE OR REPLACE FUNCTION outboxd.notify_claimable() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    INSERT INTO outboxd.queue(id, subscription_id, event_type, created_at, status,
        attempt_count, next_attempt_at, lease_owner, lease_until, order_key, blocked,
        failing_since)
      SELECT id, subscription_id, event_type, created_at, status, attempt_count,
        next_attempt_at, lease_owner, lease_until, order_key, blocked, failing_since
      FROM fresh WHERE status <> 'PROCESSED';
    IF EXISTS (SELECT 1 FROM fresh WHERE lease_until IS NULL) THEN
      PERFORM pg_notify('outboxd_work', '');
    END IF;
    RETURN NULL;
  END $$;

-- A delivery's queue row goes with it, as its attempts do (purge, retention, an older
-- outboxd's deletes).
CREATE OR REPLACE FUNCTION outboxd.delete_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    DELETE FROM outboxd.attempts a USING gone g WHERE a.delivery_id = g.id;
    DELETE FROM outboxd.queue q USING gone g WHERE q.id = g.id;
    RETURN NULL;
  END $$;
