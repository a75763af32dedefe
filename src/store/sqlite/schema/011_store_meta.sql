-- 11: facts about the store itself, one row each. sealing_key_id: the id of the key that
-- seals the subscriptions' credentials, recorded by the first outboxd that starts on the
-- store; an outboxd with another key refuses to start (docs/operations.md, "The secret
-- key").
CREATE TABLE store_meta (
  name TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;
