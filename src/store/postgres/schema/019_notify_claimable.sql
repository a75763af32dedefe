-- 19: a new delivery wakes the instances' dispatchers only when one of them can claim it.
-- An ingest inserts the deliveries it hands to its own instance already leased; a
-- notification for those made every instance run a claim that found nothing, one per
-- ingest commit (at 500 single events/s: 3,088 empty claims in 10 s, each with its own
-- transaction). The statement's new rows are read from its transition table.
CREATE FUNCTION outboxd.notify_claimable() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF EXISTS (SELECT 1 FROM fresh WHERE lease_until IS NULL) THEN
      PERFORM pg_notify('outboxd_work', '');
    END IF;
    RETURN NULL;
  END $$;
DROP TRIGGER deliveries_notify ON outboxd.deliveries;
CREATE TRIGGER deliveries_notify AFTER INSERT ON outboxd.deliveries
  REFERENCING NEW TABLE AS fresh
  FOR EACH STATEMENT EXECUTE FUNCTION outboxd.notify_claimable();
