-- 14: an attempt that failed before its request reached the receiver (a refused or
-- timed-out connect, the SSRF guard) is marked not sent: the history tells the requests
-- a subscriber may have seen from those it cannot have (docs/flow-control.md).
ALTER TABLE attempts ADD COLUMN not_sent INTEGER NOT NULL DEFAULT 0;
