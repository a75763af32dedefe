-- 5: circuit-breaker delay actions a delivery has taken (seed 004 MaxDelayActions:
-- after that many it goes to the dead-letter queue).

ALTER TABLE deliveries ADD COLUMN delay_actions INTEGER NOT NULL DEFAULT 0;
