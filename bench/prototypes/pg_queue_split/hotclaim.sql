-- the claim's update made HOT-able: no index names the lease (the due index filters
-- leased rows through the heap), and pages keep room for the new row version
DROP INDEX outboxd.deliveries_lease;
DROP INDEX outboxd.deliveries_due;
CREATE INDEX deliveries_due ON outboxd.deliveries(next_attempt_at) WHERE next_attempt_at IS NOT NULL;
ALTER TABLE outboxd.deliveries SET (fillfactor = 70);
