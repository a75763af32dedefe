-- 6: named API tokens with scopes. Only a SHA-256 of each token is kept; the
-- token itself is shown once, in the response that created it. prefix (the first
-- characters) lets an operator tell tokens apart without holding them.

CREATE TABLE outboxd.tokens (
  id text COLLATE "C" PRIMARY KEY,
  name text NOT NULL UNIQUE,
  scopes text NOT NULL,
  hash text NOT NULL UNIQUE,
  prefix text NOT NULL,
  actor text,
  created_at bigint NOT NULL
);
