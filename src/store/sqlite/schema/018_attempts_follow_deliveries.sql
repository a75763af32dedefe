-- 18: a delivery's attempts are deleted with it by this trigger instead of the foreign
-- key's ON DELETE CASCADE: outboxd's connections no longer enforce foreign keys
-- (PRAGMA foreign_keys is off), since each check was a b-tree search for every delivery
-- and every attempt inserted (~5,600 instructions per delivery under callgrind, 3% of
-- the store's work), and the statements that write the rows keep what the keys kept: a
-- delivery is inserted with its event in one transaction, an attempt only for a delivery
-- the same transaction updated or found. Deletes are rare (purge, retention): the trigger
-- costs nothing on the hot path.
CREATE TRIGGER deliveries_delete_attempts AFTER DELETE ON deliveries
BEGIN
  DELETE FROM attempts WHERE delivery_id = OLD.id;
END;
