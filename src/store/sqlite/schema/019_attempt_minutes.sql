-- 19: attempts counted per minute as they are recorded, so that the per-subscription
-- figures of /v1/stats and the console's series read a few rows per minute instead of
-- every attempt of their range (which grew with the traffic: ~200 ms for 120,000
-- attempts, asked every 5 s by an open console).
-- attempt_minutes: the attempts that started in the minute beginning at minute (ms since
-- the epoch), of subscription_id's deliveries, that took duration_ms, by outcome
-- (succeeded: 2xx; client_error: 4xx; server_error: any other code). Durations are kept
-- exact, so the series' percentiles stay exact; a minute has one row per distinct
-- duration. owner: the instance that recorded them (each instance adds to its own rows,
-- so instances sharing a store never wait on each other's counts; readers sum them).
CREATE TABLE attempt_minutes (
  minute INTEGER NOT NULL,
  subscription_id TEXT NOT NULL,
  duration_ms INTEGER NOT NULL,
  owner TEXT NOT NULL,
  succeeded INTEGER NOT NULL DEFAULT 0,
  client_error INTEGER NOT NULL DEFAULT 0,
  server_error INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (minute, subscription_id, duration_ms, owner)
) WITHOUT ROWID;
-- attempt_errors: the newest failed attempt of each subscription that each instance
-- recorded (when it started, its code and message): /v1/stats' last_error.
CREATE TABLE attempt_errors (
  subscription_id TEXT NOT NULL,
  owner TEXT NOT NULL,
  at INTEGER NOT NULL,
  code INTEGER NOT NULL,
  message TEXT,
  PRIMARY KEY (subscription_id, owner)
) WITHOUT ROWID;
-- The last day of the history the store holds already, under the owner '' (no instance).
INSERT INTO attempt_minutes(minute, subscription_id, duration_ms, owner, succeeded,
  client_error, server_error)
SELECT a.started_at - a.started_at % 60000, d.subscription_id, a.duration_ms, '',
  sum(a.code BETWEEN 200 AND 299), sum(a.code BETWEEN 400 AND 499),
  sum(NOT (a.code BETWEEN 200 AND 299) AND NOT (a.code BETWEEN 400 AND 499))
FROM attempts a JOIN deliveries d ON d.id = a.delivery_id
WHERE a.started_at >= (CAST(strftime('%s', 'now') AS INTEGER) - 90000) * 1000
GROUP BY 1, 2, 3;
-- SQLite gives the bare columns of the row that holds max().
INSERT INTO attempt_errors(subscription_id, owner, at, code, message)
SELECT d.subscription_id, '', max(a.started_at), a.code, a.message
FROM attempts a JOIN deliveries d ON d.id = a.delivery_id
WHERE a.started_at >= (CAST(strftime('%s', 'now') AS INTEGER) - 90000) * 1000
  AND NOT (a.code BETWEEN 200 AND 299)
GROUP BY d.subscription_id;
-- Nothing reads attempts by start time any more (the figures above replace the reads that
-- did): the index was one more b-tree insert for every attempt recorded.
DROP INDEX attempts_started;
