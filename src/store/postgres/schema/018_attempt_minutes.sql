-- 18: attempts counted per minute as they are recorded, so that the per-subscription
-- figures of /v1/stats and the console's series read a few rows per minute instead of
-- every attempt of their range joined to its delivery (which grew with the traffic).
-- attempt_minutes: the attempts that started in the minute beginning at minute (ms since
-- the epoch), of subscription_id's deliveries, that took duration_ms, by outcome
-- (succeeded: 2xx; client_error: 4xx; server_error: any other code). Durations are kept
-- exact, so the series' percentiles stay exact; a minute has one row per distinct
-- duration. owner: the instance that recorded them: each instance adds to its own rows,
-- so instances sharing the store never wait on each other's row locks; readers sum them.
CREATE TABLE outboxd.attempt_minutes (
  minute bigint NOT NULL,
  subscription_id text COLLATE "C" NOT NULL,
  duration_ms bigint NOT NULL,
  owner text COLLATE "C" NOT NULL,
  succeeded bigint NOT NULL DEFAULT 0,
  client_error bigint NOT NULL DEFAULT 0,
  server_error bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (minute, subscription_id, duration_ms, owner)
);
-- attempt_errors: the newest failed attempt of each subscription that each instance
-- recorded (when it started, its code and message): /v1/stats' last_error.
CREATE TABLE outboxd.attempt_errors (
  subscription_id text COLLATE "C" NOT NULL,
  owner text COLLATE "C" NOT NULL,
  at bigint NOT NULL,
  code integer NOT NULL,
  message text,
  PRIMARY KEY (subscription_id, owner)
);
-- The last day of the history the store holds already, under the owner '' (no instance).
INSERT INTO outboxd.attempt_minutes(minute, subscription_id, duration_ms, owner, succeeded,
  client_error, server_error)
SELECT a.started_at - a.started_at % 60000, d.subscription_id, a.duration_ms, '',
  count(*) FILTER (WHERE a.code BETWEEN 200 AND 299),
  count(*) FILTER (WHERE a.code BETWEEN 400 AND 499),
  count(*) FILTER (WHERE NOT (a.code BETWEEN 200 AND 299) AND NOT (a.code BETWEEN 400 AND 499))
FROM outboxd.attempts a JOIN outboxd.deliveries d ON d.id = a.delivery_id
WHERE a.started_at >= (extract(epoch FROM now())::bigint - 90000) * 1000
GROUP BY 1, 2, 3;
INSERT INTO outboxd.attempt_errors(subscription_id, owner, at, code, message)
SELECT DISTINCT ON (d.subscription_id) d.subscription_id, '', a.started_at, a.code, a.message
FROM outboxd.attempts a JOIN outboxd.deliveries d ON d.id = a.delivery_id
WHERE a.started_at >= (extract(epoch FROM now())::bigint - 90000) * 1000
  AND NOT (a.code BETWEEN 200 AND 299)
ORDER BY d.subscription_id, a.started_at DESC;
-- Nothing reads attempts by start time any more (the figures above replace the reads that
-- did): the index was one more index insert for every attempt recorded.
DROP INDEX outboxd.attempts_started;
