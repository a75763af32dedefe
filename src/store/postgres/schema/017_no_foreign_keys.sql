-- 17: no foreign keys on the hot tables. deliveries.event_id -> events and
-- attempts.delivery_id -> deliveries were checked by a query and a row lock for every
-- delivery and every attempt inserted: 17% of the server's CPU per delivery. The
-- statements that write them keep what the keys kept: a delivery is inserted only in the
-- statement that inserts its event, an attempt only for a delivery the same statement
-- updated or found, and every statement that deletes deliveries deletes their attempts
-- (the cascade) and then the events left without deliveries. One case the keys refused
-- and these statements do not: a round whose lease was lost records its attempts for a
-- delivery it finds, and a delivery purged or removed by retention in that same instant
-- leaves those attempt rows behind: no delivery shows them, only the attempt counts over
-- time (the stats, the console's chart) include them while they are recent.
ALTER TABLE outboxd.deliveries DROP CONSTRAINT deliveries_event_id_fkey;
ALTER TABLE outboxd.attempts DROP CONSTRAINT attempts_delivery_id_fkey;
