#!/usr/bin/env bash
# run.sh: measures what the PostgreSQL server does per delivery on outboxd's schema
# (current.sql) and on a proposed one (split.sql: the unfinished deliveries' due time and
# lease in a narrow queue table, so that a claim updates a small row and a result's update
# of the delivery can be HOT). A throwaway server (initdb in a temp dir; fsync and
# synchronous_commit off, so the CPU is the server's work, not its waits; autovacuum off,
# so VACUUM's share is measured, after each drain), ROUNDS rounds of both in turn, EVENTS
# deliveries each. Prints the server backend's CPU µs and WAL bytes per delivery.
#
# SCHEMAS (default "current split") may also name hotclaim: the current schema with no
# index on the lease, so that a claim's update can be HOT (hotclaim.sql). INFLIGHT=1
# drains current and hotclaim with about 512 deliveries leased at a time (claims of 128,
# results four claims later: inflight.sql), as outboxd's dispatcher keeps them; split
# keeps its own drain.
#
# Usage: [EVENTS=200000] [ROUNDS=2] [BUILD=build] [SCHEMAS=...] [INFLIGHT=1]
#        bench/prototypes/pg_queue_split/run.sh
# A prototype of the schema outboxd has had since PostgreSQL migration 20 (README.md):
# nothing here is used by outboxd.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cd "$here/../../.."
EVENTS=${EVENTS:-200000}
ROUNDS=${ROUNDS:-2}
BUILD=${BUILD:-build}
SCHEMAS=${SCHEMAS:-current split}
INFLIGHT=${INFLIGHT:-0}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target outboxd >/dev/null

dir=$(mktemp -d /tmp/outboxd-proto-XXXXXX)
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
PGUSER_OS=nobody
id outboxd-test >/dev/null 2>&1 && PGUSER_OS=outboxd-test
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u "$PGUSER_OS" -- "$@"; else "$@"; fi; }
opid=""
cleanup() {
  [ -n "$opid" ] && kill "$opid" 2>/dev/null || true
  as_pg "$pgbin/pg_ctl" -D "$dir/pg/data" -m fast -w stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT
mkdir -p "$dir/pg" "$dir/data"
chmod 711 "$dir"
[ "$(id -u)" -eq 0 ] && chown "$PGUSER_OS" "$dir/pg"
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
(cd "$dir/pg" && as_pg "$pgbin/initdb" -D "$dir/pg/data" -U postgres -A trust -E UTF8 \
  --locale=C --no-sync >/dev/null)
(cd "$dir/pg" && as_pg "$pgbin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/log" -w -o \
  "-p $port -k $dir/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c autovacuum=off -c shared_buffers=256MB" \
  start >/dev/null)
P="postgres://postgres@127.0.0.1:$port"
psql -q "$P/postgres" -c "CREATE DATABASE current"

# outboxd's own migrations make the current schema
oport=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
OUTBOXD_DB="$P/current" OUTBOXD_LISTEN="127.0.0.1:$oport" OUTBOXD_ADMIN_TOKEN=proto \
  OUTBOXD_DATA_DIR="$dir/data" OUTBOXD_LOG_LEVEL=warn "$BUILD/outboxd" serve 2>"$dir/outboxd.log" &
opid=$!
for _ in $(seq 200); do curl -sf "127.0.0.1:$oport/healthz" >/dev/null && break; sleep 0.05; done
kill "$opid"; wait "$opid" 2>/dev/null || true; opid=""

psql -q "$P/current" -f "$here/common.sql" >/dev/null 2>&1
psql -q "$P/current" -f "$here/current.sql" >/dev/null 2>&1
for db in $SCHEMAS; do
  case $db in
  current) ;;
  split)
    # the tables both schemas share, as outboxd made them (their triggers left out)
    psql -q "$P/postgres" -c "CREATE DATABASE split"
    psql -q "$P/split" -c "CREATE SCHEMA outboxd"
    pg_dump -s "$P/current" -n outboxd -t outboxd.events -t outboxd.attempts \
      -t outboxd.attempt_minutes -t outboxd.subscriptions | grep -v "^CREATE TRIGGER" |
      psql -q "$P/split" >/dev/null
    psql -q "$P/split" -f "$here/common.sql" >/dev/null 2>&1
    psql -q "$P/split" -f "$here/split.sql" >/dev/null 2>&1 ;;
  hotclaim)
    psql -q "$P/postgres" -c "CREATE DATABASE hotclaim TEMPLATE current"
    psql -q "$P/hotclaim" -f "$here/hotclaim.sql" >/dev/null ;;
  *) echo "unknown schema $db" >&2; exit 2 ;;
  esac
done
if [ "$INFLIGHT" = 1 ]; then
  for db in $SCHEMAS; do
    [ "$db" = split ] || psql -q "$P/$db" -f "$here/inflight.sql" >/dev/null
  done
fi

echo "schema   round  ingest µs  drain µs  vacuum µs  total µs  WAL B/delivery (ingest+drain+vacuum)"
for ((r = 1; r <= ROUNDS; r++)); do
  for db in $SCHEMAS; do
    IFS='|' read -r _ ing dr vac tot wi wd wv < <(psql -qtA -v events="$EVENTS" "$P/$db" \
      -f "$here/measure.sql" 2>/dev/null | tail -1)
    printf '%-8s %5d  %9s  %8s  %9s  %8s  %s+%s+%s\n' "$db" "$r" "$ing" "$dr" "$vac" "$tot" \
      "$wi" "$wd" "$wv"
  done
done
