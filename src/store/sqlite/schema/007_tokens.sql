-- 7: named API tokens with scopes. Only a SHA-256 of each token is kept; the
-- token itself is shown once, in the response that created it. prefix (the first
-- characters) lets an operator tell tokens apart without holding them.

CREATE TABLE tokens (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  scopes TEXT NOT NULL,
  hash TEXT NOT NULL UNIQUE,
  prefix TEXT NOT NULL,
  actor TEXT,
  created_at INTEGER NOT NULL
);
