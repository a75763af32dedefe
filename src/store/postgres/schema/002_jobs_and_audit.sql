-- 2: operator jobs (paced replays that survive restarts), the audit log, and the
-- attempt index that per-subscription stats over a recent window read.

CREATE TABLE outboxd.jobs (
  id text COLLATE "C" PRIMARY KEY,
  kind text NOT NULL,
  state text NOT NULL CHECK (state IN ('running', 'done', 'cancelled', 'failed')),
  filter text NOT NULL,
  force boolean NOT NULL,
  rate integer NOT NULL,
  matched bigint NOT NULL,
  done bigint NOT NULL,
  cursor text,
  actor text,
  error text,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL
);
CREATE INDEX jobs_running ON outboxd.jobs(created_at) WHERE state = 'running';
CREATE TABLE outboxd.audit (
  id text COLLATE "C" PRIMARY KEY,
  at bigint NOT NULL,
  actor text NOT NULL,
  action text NOT NULL,
  target text,
  count bigint NOT NULL,
  detail text
);
CREATE INDEX attempts_started ON outboxd.attempts(started_at);
