#!/usr/bin/env bash
# list_latency.sh: latency of the operator's list queries with 1,000,000 deliveries in
# the SQLite store. Fills a store directly with SQL (90% PROCESSED, 9% dead,
# 1% NEW, 20 subscriptions, 50 event types), starts outboxd on it, and times each query
# 50 times with curl. Prints p50/p99 in milliseconds per query.
# Usage: bench/list_latency.sh [deliveries]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}
BUILD=${BUILD:-build}
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target outboxd >/dev/null

dir=$(mktemp -d /tmp/outboxd-list-XXXXXX)
PORT=$((20000 + RANDOM % 20000))
cleanup() { kill "$dpid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
start() {
  OUTBOXD_DB="sqlite:$dir/o.db" OUTBOXD_LISTEN="127.0.0.1:$PORT" OUTBOXD_ADMIN_TOKEN=t \
    OUTBOXD_SSRF_ALLOW=127.0.0.0/8 OUTBOXD_LOG_LEVEL=warn "$BUILD/outboxd" serve 2>>"$dir/log" &
  dpid=$!
  for _ in $(seq 100); do curl -sf "127.0.0.1:$PORT/healthz" >/dev/null && return; sleep 0.1; done
  echo "outboxd did not start" >&2; cat "$dir/log" >&2; exit 1
}
start   # creates the schema
for i in $(seq 0 19); do
  curl -sf -H "Authorization: Bearer t" -H 'Content-Type: application/json' \
    "127.0.0.1:$PORT/v1/subscriptions" \
    -d "{\"name\":\"s$i\",\"event_types\":[\"t$i.*\"],\"endpoint\":\"http://127.0.0.1:9/\"}" >/dev/null
done
kill "$dpid"; wait "$dpid" 2>/dev/null || true

echo "filling $N deliveries..." >&2
t0=$(date +%s)
sqlite3 "$dir/o.db" <<SQL
PRAGMA journal_mode=WAL;
PRAGMA synchronous=OFF;
CREATE TEMP TABLE subs AS SELECT row_number() OVER (ORDER BY created_at) - 1 AS k, id FROM subscriptions;
BEGIN;
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < $N - 1)
INSERT INTO events(id, event_type, source, content_type, payload, created_at)
SELECT printf('%08x-0000-7000-8000-%012x', i / 65536, i), 't' || (i % 20) || '.e' || (i % 50),
       'src' || (i % 7), 'application/json', '{"i":' || i || '}', 1760000000000 + i * 10
FROM n;
INSERT INTO deliveries(id, event_id, subscription_id, event_type, status, attempt_count,
  retry_count, next_attempt_at, last_code, last_message, last_cause, created_at, updated_at,
  processed_at)
SELECT printf('%08x-0000-7000-9000-%012x', e.rowid / 65536, e.rowid), e.id, s.id, e.event_type,
  CASE WHEN e.rowid % 100 < 90 THEN 'PROCESSED' WHEN e.rowid % 100 < 99 THEN 'FAILED' ELSE 'NEW' END,
  CASE WHEN e.rowid % 100 < 90 THEN 1 WHEN e.rowid % 100 < 99 THEN 6 ELSE 0 END,
  CASE WHEN e.rowid % 100 BETWEEN 90 AND 98 THEN 3 ELSE 0 END,
  CASE WHEN e.rowid % 100 = 99 THEN e.created_at ELSE NULL END,
  CASE WHEN e.rowid % 100 BETWEEN 90 AND 98 THEN (CASE WHEN e.rowid % 3 = 0 THEN 504 ELSE 503 END) END,
  CASE WHEN e.rowid % 100 BETWEEN 90 AND 98 THEN (CASE WHEN e.rowid % 3 = 0 THEN 'timeout' ELSE 'connection refused' END) END,
  CASE WHEN e.rowid % 100 BETWEEN 90 AND 98 THEN 'Failed to connect to 127.0.0.1 port 9' END,
  e.created_at, e.created_at + 5, CASE WHEN e.rowid % 100 < 90 THEN e.created_at + 5 END
FROM events e JOIN subs s ON s.k = CAST(substr(e.event_type, 2, instr(e.event_type, '.') - 2) AS INTEGER);
COMMIT;
ANALYZE;
SQL
echo "filled in $(( $(date +%s) - t0 )) s" >&2
start
SUB=$(curl -sf -H "Authorization: Bearer t" "127.0.0.1:$PORT/v1/subscriptions" | grep -o '"id":"[^"]*"' | head -1 | cut -d'"' -f4)
CUR=$(curl -sf -H "Authorization: Bearer t" "127.0.0.1:$PORT/v1/dlq?limit=100" | grep -o '"next_cursor":"[^"]*"' | cut -d'"' -f4)

queries=(
  "/v1/deliveries?limit=100"
  "/v1/dlq?limit=100"
  "/v1/dlq?limit=100&cursor=$CUR"
  "/v1/deliveries?status=FAILED&limit=100&order=desc"
  "/v1/dlq?subscription_id=$SUB&limit=100"
  "/v1/dlq?name=s3&code=504&limit=100"
  "/v1/dlq?event_type=t5.*&limit=100"
  "/v1/dlq?q=timeout&limit=100"
  "/v1/dlq?from=2025-10-09T09:00:00Z&to=2025-10-09T10:00:00Z&limit=100"
  "/v1/deliveries?sort=attempt_count&order=desc&limit=100"
  "/v1/dlq?source=src3&limit=100"
  "/v1/dlq?sort=attempt_count&order=desc&limit=100"
)
printf '%-80s %8s %8s\n' "query ($N deliveries)" "p50 ms" "p99 ms"
for q in "${queries[@]}"; do
  for _ in $(seq 50); do
    curl -s -o /dev/null -w '%{time_total}\n' -H "Authorization: Bearer t" "127.0.0.1:$PORT$q"
  done | sort -n | awk -v q="$q" '{ v[NR] = $1 * 1000 } END { printf "%-80.80s %8.1f %8.1f\n", q, v[int(NR * 0.5)], v[int(NR * 0.99)] }'
done
