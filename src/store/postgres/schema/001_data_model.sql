-- 1: the data model (its names and statuses are a contract: docs/contracts.md)
-- and the producer contract, the outbox table.

CREATE TABLE outboxd.events (
  id text COLLATE "C" PRIMARY KEY,
  event_type text NOT NULL,
  source text NOT NULL DEFAULT '',
  source_event_id text,
  partition_key text,
  content_type text NOT NULL,
  payload bytea NOT NULL,
  created_at bigint NOT NULL
);
CREATE UNIQUE INDEX events_source_event_id ON outboxd.events(source, source_event_id)
  WHERE source_event_id IS NOT NULL;
CREATE TABLE outboxd.subscriptions (
  id text COLLATE "C" PRIMARY KEY,
  name text NOT NULL UNIQUE,
  config text NOT NULL,
  enabled boolean NOT NULL,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL
);
CREATE TABLE outboxd.deliveries (
  id text COLLATE "C" PRIMARY KEY,
  event_id text COLLATE "C" NOT NULL REFERENCES outboxd.events(id),
  subscription_id text COLLATE "C" NOT NULL,
  event_type text NOT NULL,
  status text NOT NULL CHECK (status IN ('NEW', 'PROCESSED', 'FAILED')),
  replay boolean NOT NULL DEFAULT false,
  attempt_count integer NOT NULL DEFAULT 0,
  retry_count integer NOT NULL DEFAULT 0,
  next_attempt_at bigint,
  last_code integer,
  last_message text,
  last_cause text,
  lease_owner text,
  lease_until bigint,
  created_at bigint NOT NULL,
  updated_at bigint NOT NULL,
  processed_at bigint
);
CREATE INDEX deliveries_due ON outboxd.deliveries(next_attempt_at)
  WHERE lease_until IS NULL AND next_attempt_at IS NOT NULL;
CREATE INDEX deliveries_lease ON outboxd.deliveries(lease_until)
  WHERE lease_until IS NOT NULL;
CREATE INDEX deliveries_status ON outboxd.deliveries(status, created_at, id);
CREATE INDEX deliveries_subscription ON outboxd.deliveries(subscription_id, created_at, id);
CREATE INDEX deliveries_created ON outboxd.deliveries(created_at, id);
CREATE INDEX deliveries_event ON outboxd.deliveries(event_id);
-- instance: the lease owner that made the attempt (which outboxd of a cluster).
CREATE TABLE outboxd.attempts (
  delivery_id text COLLATE "C" NOT NULL
    REFERENCES outboxd.deliveries(id) ON DELETE CASCADE,
  n integer NOT NULL,
  kind text NOT NULL CHECK (kind IN ('immediate', 'scheduled', 'manual')),
  started_at bigint NOT NULL,
  duration_ms bigint NOT NULL,
  code integer NOT NULL,
  message text,
  cause text,
  instance text,
  PRIMARY KEY (delivery_id, n)
);
-- The producer contract: INSERT INTO outboxd.outbox(event_type, payload) in the
-- producer's own transaction, or SELECT outboxd.enqueue(...).
CREATE TABLE outboxd.outbox (
  id bigserial PRIMARY KEY,
  event_type text NOT NULL,
  source text NOT NULL DEFAULT '',
  source_event_id text,
  partition_key text,
  payload bytea NOT NULL,
  content_type text NOT NULL DEFAULT 'application/json',
  created_at bigint NOT NULL
    DEFAULT (extract(epoch FROM clock_timestamp()) * 1000)::bigint
);
CREATE FUNCTION outboxd.enqueue(event_type text, payload bytea, source text DEFAULT '',
  source_event_id text DEFAULT NULL, partition_key text DEFAULT NULL,
  content_type text DEFAULT 'application/json') RETURNS bigint LANGUAGE sql AS $$
  INSERT INTO outboxd.outbox(event_type, payload, source, source_event_id,
    partition_key, content_type)
  VALUES ($1, $2, coalesce($3, ''), $4, $5, coalesce($6, 'application/json'))
  RETURNING id $$;
-- A text payload (also what an untyped literal resolves to) is stored as UTF-8.
CREATE FUNCTION outboxd.enqueue(event_type text, payload text, source text DEFAULT '',
  source_event_id text DEFAULT NULL, partition_key text DEFAULT NULL,
  content_type text DEFAULT 'application/json') RETURNS bigint LANGUAGE sql AS $$
  SELECT outboxd.enqueue($1, convert_to($2, 'UTF8'), $3, $4, $5, $6) $$;
CREATE FUNCTION outboxd.enqueue(event_type text, payload jsonb, source text DEFAULT '',
  source_event_id text DEFAULT NULL, partition_key text DEFAULT NULL,
  content_type text DEFAULT 'application/json') RETURNS bigint LANGUAGE sql AS $$
  SELECT outboxd.enqueue($1, convert_to($2::text, 'UTF8'), $3, $4, $5, $6) $$;
CREATE FUNCTION outboxd.enqueue(event_type text, payload json, source text DEFAULT '',
  source_event_id text DEFAULT NULL, partition_key text DEFAULT NULL,
  content_type text DEFAULT 'application/json') RETURNS bigint LANGUAGE sql AS $$
  SELECT outboxd.enqueue($1, convert_to($2::text, 'UTF8'), $3, $4, $5, $6) $$;
-- Wake-ups: a producer's outbox insert, and every new delivery (ingest, relay),
-- notify the listeners of every instance when the transaction commits. Once per
-- statement: PostgreSQL folds equal notifications of a transaction into one.
CREATE FUNCTION outboxd.notify_work() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN PERFORM pg_notify('outboxd_work', ''); RETURN NULL; END $$;
CREATE TRIGGER outbox_notify AFTER INSERT ON outboxd.outbox
  FOR EACH STATEMENT EXECUTE FUNCTION outboxd.notify_work();
CREATE TRIGGER deliveries_notify AFTER INSERT ON outboxd.deliveries
  FOR EACH STATEMENT EXECUTE FUNCTION outboxd.notify_work();
-- Every instance keeps the subscriptions in memory: a change anywhere tells all.
CREATE FUNCTION outboxd.notify_subscriptions() RETURNS trigger LANGUAGE plpgsql AS $$
  BEGIN PERFORM pg_notify('outboxd_subs', ''); RETURN NULL; END $$;
CREATE TRIGGER subscriptions_notify AFTER INSERT OR UPDATE OR DELETE
  ON outboxd.subscriptions
  FOR EACH STATEMENT EXECUTE FUNCTION outboxd.notify_subscriptions();
