-- 21: a change of subscriptions tells the instances which ones changed. The notification
-- carried nothing, so every instance, the one that made the change included, read every
-- subscription again for each change (at 10,000 subscriptions, a second or more of work
-- per instance for each one created). Each changed row now sends its id; an instance
-- reads those rows alone, and everything again when a burst names many (or none: an
-- instance of an older outboxd ignores the payload and reads everything, as before).
CREATE OR REPLACE FUNCTION outboxd.notify_subscriptions() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN
    IF TG_OP = 'DELETE' THEN
      PERFORM pg_notify('outboxd_subs', OLD.id);
    ELSE
      PERFORM pg_notify('outboxd_subs', NEW.id);
    END IF;
    RETURN NULL;
  END $$;
DROP TRIGGER subscriptions_notify ON outboxd.subscriptions;
CREATE TRIGGER subscriptions_notify AFTER INSERT OR UPDATE OR DELETE
  ON outboxd.subscriptions
  FOR EACH ROW EXECUTE FUNCTION outboxd.notify_subscriptions();
