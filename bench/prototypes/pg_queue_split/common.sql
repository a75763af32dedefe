-- common.sql: helpers of the prototype: the backend's own CPU ticks (utime + stime of
-- /proc/self/stat; superuser for pg_read_file) and time-ordered ids like outboxd's UUIDv7.
CREATE OR REPLACE FUNCTION cpu_ticks() RETURNS bigint LANGUAGE sql AS $$
  SELECT (split_part(s, ' ', 12)::bigint + split_part(s, ' ', 13)::bigint)
  FROM (SELECT substr(pg_read_file('/proc/self/stat'), strpos(pg_read_file('/proc/self/stat'), ') ') + 2) AS s) x $$;
CREATE SEQUENCE IF NOT EXISTS idseq;
CREATE OR REPLACE FUNCTION nid() RETURNS text LANGUAGE sql AS $$
  SELECT '0190a0b0-0000-7000-8000-' || lpad(nextval('idseq')::text, 12, '0') $$;
