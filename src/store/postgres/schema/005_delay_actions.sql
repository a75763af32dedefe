-- 5: circuit-breaker delay actions a delivery has taken (after
-- circuit_breaker.max_delay_actions of them it goes to the dead-letter queue).

ALTER TABLE outboxd.deliveries ADD COLUMN delay_actions integer NOT NULL DEFAULT 0;
