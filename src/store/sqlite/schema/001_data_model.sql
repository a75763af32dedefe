-- 1: the data model (its names and statuses are a contract: docs/contracts.md).

CREATE TABLE events (
  id TEXT PRIMARY KEY,
  event_type TEXT NOT NULL,
  source TEXT NOT NULL DEFAULT '',
  source_event_id TEXT,
  partition_key TEXT,
  content_type TEXT NOT NULL,
  payload BLOB NOT NULL,
  created_at INTEGER NOT NULL
);
-- The idempotency key: unique per source, only when given.
CREATE UNIQUE INDEX events_source_event_id ON events(source, source_event_id)
  WHERE source_event_id IS NOT NULL;
CREATE TABLE subscriptions (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  config TEXT NOT NULL,
  enabled INTEGER NOT NULL,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
-- subscription_id has no foreign key: the deliveries of a deleted subscription
-- stay for the record. event_type is copied from the event for filtering.
CREATE TABLE deliveries (
  id TEXT PRIMARY KEY,
  event_id TEXT NOT NULL REFERENCES events(id),
  subscription_id TEXT NOT NULL,
  event_type TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('NEW', 'PROCESSED', 'FAILED')),
  replay INTEGER NOT NULL DEFAULT 0,
  attempt_count INTEGER NOT NULL DEFAULT 0,
  retry_count INTEGER NOT NULL DEFAULT 0,
  next_attempt_at INTEGER,
  last_code INTEGER,
  last_message TEXT,
  last_cause TEXT,
  lease_owner TEXT,
  lease_until INTEGER,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL,
  processed_at INTEGER
);
-- The claim scans only this index: unleased deliveries with an attempt pending.
CREATE INDEX deliveries_due ON deliveries(next_attempt_at)
  WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL;
CREATE INDEX deliveries_lease ON deliveries(lease_until)
  WHERE lease_until IS NOT NULL;
-- Keyset pages of the operator list and the cleanup's PROCESSED scan.
CREATE INDEX deliveries_status ON deliveries(status, created_at, id);
CREATE INDEX deliveries_subscription ON deliveries(subscription_id, created_at, id);
CREATE INDEX deliveries_created ON deliveries(created_at, id);
CREATE INDEX deliveries_event ON deliveries(event_id);
CREATE TABLE attempts (
  delivery_id TEXT NOT NULL REFERENCES deliveries(id) ON DELETE CASCADE,
  n INTEGER NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('immediate', 'scheduled', 'manual')),
  started_at INTEGER NOT NULL,
  duration_ms INTEGER NOT NULL,
  code INTEGER NOT NULL,
  message TEXT,
  cause TEXT,
  PRIMARY KEY (delivery_id, n)
) WITHOUT ROWID;
-- The producer contract: INSERT INTO outbox(event_type, payload) VALUES (...).
CREATE TABLE outbox (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  event_type TEXT NOT NULL,
  source TEXT NOT NULL DEFAULT '',
  source_event_id TEXT,
  partition_key TEXT,
  payload BLOB NOT NULL,
  content_type TEXT NOT NULL DEFAULT 'application/json',
  created_at INTEGER NOT NULL
    DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
);
