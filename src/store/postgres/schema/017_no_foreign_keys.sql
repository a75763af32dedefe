-- 17: no foreign keys on the hot tables. deliveries.event_id -> events and
-- attempts.delivery_id -> deliveries were checked by a query and a row lock for every
-- delivery and every attempt inserted (a sixth of the server's CPU per delivery). The
-- statements that write the rows keep what the keys kept: a delivery is inserted only by
-- the statement that inserts its event, an attempt only for a delivery the same statement
-- updated or found; the statements that delete deliveries delete the events they leave
-- without one. The cascade of a delivery's attempts is this trigger, once per deleting
-- statement for all its rows (purge and retention only: nothing on the delivery path), so
-- an instance of the previous version deletes them too during a roll-out.
-- One case the keys refused and these statements do not: a round whose lease was lost
-- records its attempts for a delivery it finds, and a delivery purged or removed by
-- retention in that same instant leaves those attempt rows behind: no delivery shows them,
-- only the attempt counts over time (the stats, the console's chart) include them while
-- they are recent.
ALTER TABLE outboxd.deliveries DROP CONSTRAINT deliveries_event_id_fkey;
ALTER TABLE outboxd.attempts DROP CONSTRAINT attempts_delivery_id_fkey;
CREATE FUNCTION outboxd.delete_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    DELETE FROM outboxd.attempts a USING gone g WHERE a.delivery_id = g.id;
    RETURN NULL;
  END $$;
CREATE TRIGGER deliveries_delete_attempts AFTER DELETE ON outboxd.deliveries
  REFERENCING OLD TABLE AS gone
  FOR EACH STATEMENT EXECUTE FUNCTION outboxd.delete_attempts();
