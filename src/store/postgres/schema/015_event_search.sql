-- 15: the event search (GET /v1/events) lists events newest first, a page at a time,
-- by a created_at range, by event type (exact, or a glob that starts with a fixed prefix
-- such as order.*: a LIKE prefix range, which text_pattern_ops serves whatever the
-- database's collation), by source, or by idempotency key with or without its source.
-- Each index below gives one of those pages in order, or finds its few rows, without
-- reading the rest of the table; an event by id has the primary key, and with both its
-- source and its key the unique index of 1. Storing an event costs three more index
-- entries, four with an idempotency key (the last index holds only those).
CREATE INDEX events_created ON outboxd.events(created_at, id);
CREATE INDEX events_type ON outboxd.events(event_type text_pattern_ops, created_at, id);
CREATE INDEX events_source ON outboxd.events(source, created_at, id);
CREATE INDEX events_key ON outboxd.events(source_event_id) WHERE source_event_id IS NOT NULL;
