-- measure.sql: one round on the database psql is connected to (events: the number of
-- deliveries, psql -v events=N): the server CPU (its backend's utime + stime, from
-- /proc/self/stat) and WAL bytes per delivery of ingest, of the drain (claims of 512 and
-- their results, each statement its own transaction) and of a VACUUM afterwards; the
-- tables are analyzed between ingest and drain, as autovacuum would, outside the counts.
\set N :events
TRUNCATE outboxd.events, outboxd.deliveries, outboxd.attempts, outboxd.attempt_minutes;
SELECT to_regclass('outboxd.queue') IS NOT NULL AS has_queue \gset
\if :has_queue
TRUNCATE outboxd.queue;
\endif
CHECKPOINT;
SELECT cpu_ticks() AS c0, pg_current_wal_lsn() AS l0 \gset
CALL ingest(:N);
SELECT cpu_ticks() AS c1, pg_current_wal_lsn() AS l1 \gset
-- statistics of the filled tables, as autovacuum's analyze keeps them (not counted)
ANALYZE;
SELECT cpu_ticks() AS c1b, pg_current_wal_lsn() AS l1b \gset
CALL drain(0) \gset
\set drained :total
SELECT cpu_ticks() AS c2, pg_current_wal_lsn() AS l2 \gset
VACUUM outboxd.deliveries;
VACUUM outboxd.events;
VACUUM outboxd.attempts;
\if :has_queue
VACUUM outboxd.queue;
\endif
SELECT cpu_ticks() AS c3, pg_current_wal_lsn() AS l3 \gset
SELECT :drained AS drained,
  (:c1 - :c0) * 10000 / :N AS ingest_us, (:c2 - :c1b) * 10000 / :N AS drain_us,
  (:c3 - :c2) * 10000 / :N AS vacuum_us, (:c3 - :c2 + :c2 - :c1b + :c1 - :c0) * 10000 / :N AS total_us,
  round(pg_wal_lsn_diff(:'l1', :'l0') / :N) AS ingest_wal, round(pg_wal_lsn_diff(:'l2', :'l1b') / :N) AS drain_wal,
  round(pg_wal_lsn_diff(:'l3', :'l2') / :N) AS vacuum_wal;
