-- 16: the event search (GET /v1/events) lists events newest first, a page at a time,
-- by a created_at range or by event type (exact, or a glob that starts with a fixed prefix
-- such as order.*).
-- These two indexes give those pages in order without reading the rest of the table; an
-- event by id has the primary key, and with its source and key the unique index of 1.
-- Searches by source alone or by key alone walk events_created newest first, filtering:
-- fine for an operator's search, and each index here is a cost on every stored event
-- (two more entries per event), which the ingest path pays.
CREATE INDEX events_created ON events(created_at, id);
CREATE INDEX events_type ON events(event_type, created_at, id);
