-- 10: facts about the store itself, one row each. sealing_key_id: the id of the key that
-- seals the subscriptions' credentials, recorded by the first outboxd that starts on the
-- store; an outboxd with another key refuses to start (docs/operations.md, "The secret
-- key"), so instances started together cannot end up with different keys.
CREATE TABLE outboxd.store_meta (
  name text COLLATE "C" PRIMARY KEY,
  value text NOT NULL
);
