#!/usr/bin/env bash
# quick.sh: a first throughput figure — N events (default 10,000, ~200-byte payloads)
# ingested through the batch API into outboxd on SQLite, delivered to one local receiver.
# Prints ingest events/s and end-to-end deliveries/s (first ingest to last receipt).
# Usage: bench/quick.sh [events] [batch]      (builds a release binary first)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000}
BATCH=${2:-100}
BUILD=${BUILD:-build}

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target outboxd test_receiver >/dev/null

dir=$(mktemp -d /tmp/outboxd-bench-XXXXXX)
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)); }
RPORT=$(free_port); DPORT=$(free_port)
cleanup() { kill "$rpid" "$dpid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

"$BUILD/test_receiver" --port "$RPORT" --no-bodies --threads 2 >/dev/null &
rpid=$!
OUTBOXD_DB="sqlite:$dir/o.db" OUTBOXD_LISTEN="127.0.0.1:$DPORT" OUTBOXD_ADMIN_TOKEN=bench \
  OUTBOXD_LOG_LEVEL=warn ${WRAP:-} "$BUILD/outboxd" serve 2>"$dir/daemon.log" &
dpid=$!
for _ in $(seq 100); do curl -sf "127.0.0.1:$DPORT/healthz" >/dev/null && curl -sf "127.0.0.1:$RPORT/_control/stats" >/dev/null && break; sleep 0.05; done

api() { curl -sf -H "Authorization: Bearer bench" -H 'Content-Type: application/json' "$@"; }
api -X POST "127.0.0.1:$DPORT/v1/subscriptions" \
  -d "{\"name\":\"sink\",\"event_types\":[\"*\"],\"endpoint\":\"http://127.0.0.1:$RPORT/sink\"}" >/dev/null

# Request bodies are made before the clock starts.
pad=$(printf '%0150d' 0)
for ((b = 0; b < N / BATCH; b++)); do
  {
    printf '{"events":['
    for ((i = 0; i < BATCH; i++)); do
      [ $i -gt 0 ] && printf ','
      printf '{"event_type":"bench.event","payload":{"n":%d,"pad":"%s"}}' $((b * BATCH + i)) "$pad"
    done
    printf ']}'
  } >"$dir/batch-$b.json"
done

# One curl process sends every batch over 4 keep-alive connections.
for ((b = 0; b < N / BATCH; b++)); do
  [ $b -gt 0 ] && echo next
  printf 'url = "http://127.0.0.1:%s/v1/events"\nheader = "Authorization: Bearer bench"\n' "$DPORT"
  printf 'header = "Content-Type: application/json"\ndata-binary = "@%s/batch-%s.json"\noutput = "/dev/null"\n' "$dir" "$b"
done >"$dir/curl.cfg"

t0=$(date +%s%N)
curl -sf --parallel --parallel-max 4 -K "$dir/curl.cfg"
t1=$(date +%s%N)
count=0
for _ in $(seq 600); do
  stats=$(curl -sf "127.0.0.1:$RPORT/_control/stats")
  count=$(grep -o '"count":[0-9]*' <<<"$stats" | cut -d: -f2)
  [ "$count" -ge "$N" ] && break
  sleep 0.05
done
last_us=$(grep -o '"last_us":[0-9]*' <<<"$stats" | cut -d: -f2)
cpu=$(awk '{print $14 + $15}' "/proc/$dpid/stat")
hz=$(getconf CLK_TCK)

awk -v n="$N" -v t0="$t0" -v t1="$t1" -v last="$last_us" -v got="$count" -v cpu="$cpu" -v hz="$hz" 'BEGIN {
  ingest = (t1 - t0) / 1e9; e2e = (last * 1000 - t0) / 1e9;
  printf "events:            %d (received %d)\n", n, got;
  printf "ingest:            %.0f events/s (%.3f s)\n", n / ingest, ingest;
  printf "end to end:        %.0f deliveries/s (%.3f s, first ingest to last receipt)\n", n / e2e, e2e;
  printf "outboxd CPU:       %.1f us per delivery (utime+stime)\n", cpu / hz * 1e6 / n;
}'
