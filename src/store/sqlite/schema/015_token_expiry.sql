-- 15: a named token may expire (expires_at, ms since the epoch; NULL: never), and its
-- last use is kept (last_used_at, written at most once a minute per token by each
-- instance, so authenticating a request is not a write).
ALTER TABLE tokens ADD COLUMN expires_at INTEGER;
ALTER TABLE tokens ADD COLUMN last_used_at INTEGER;
