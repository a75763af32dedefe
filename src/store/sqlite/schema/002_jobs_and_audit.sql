-- 2: operator jobs (paced replays that survive restarts), the audit log, and the
-- attempt index that per-subscription stats over a recent window read.

CREATE TABLE jobs (
  id TEXT PRIMARY KEY,
  kind TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('running', 'done', 'cancelled', 'failed')),
  filter TEXT NOT NULL,
  force INTEGER NOT NULL,
  rate INTEGER NOT NULL,
  matched INTEGER NOT NULL,
  done INTEGER NOT NULL,
  cursor TEXT,
  actor TEXT,
  error TEXT,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
);
CREATE INDEX jobs_running ON jobs(created_at) WHERE state = 'running';
CREATE TABLE audit (
  id TEXT PRIMARY KEY,
  at INTEGER NOT NULL,
  actor TEXT NOT NULL,
  action TEXT NOT NULL,
  target TEXT,
  count INTEGER NOT NULL,
  detail TEXT
);
CREATE INDEX attempts_started ON attempts(started_at);
