#!/usr/bin/env bash
# sign_quick.sh: what Standard Webhooks signing costs, in one run. One outboxd on SQLite and
# one local receiver; two subscriptions on different event types, identical but for a
# `secret`. Each round sends N events (~200-byte payloads, batch API) to the unsigned one,
# then N to the signed one, and measures end-to-end deliveries/s (first ingest to last
# receipt) and outboxd CPU per delivery; the rounds alternate so warm-up and the growing
# database hit both alike. Prints each round, the best of each, and the signed/unsigned
# ratio.
# Usage: bench/sign_quick.sh [events per phase] [rounds]   (builds a release binary first)
# Runs next to quick.sh and leaves it alone; nothing is left running.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10000}
ROUNDS=${2:-3}
BATCH=${BATCH:-100}
BUILD=${BUILD:-build}

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target outboxd test_receiver >/dev/null

dir=$(mktemp -d /tmp/outboxd-signbench-XXXXXX)
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)); }
RPORT=$(free_port); DPORT=$(free_port)
cleanup() { kill "$rpid" "$dpid" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT

"$BUILD/test_receiver" --port "$RPORT" --no-bodies --threads 2 >/dev/null &
rpid=$!
OUTBOXD_DB="sqlite:$dir/o.db" OUTBOXD_LISTEN="127.0.0.1:$DPORT" OUTBOXD_ADMIN_TOKEN=bench \
  OUTBOXD_SSRF_ALLOW=127.0.0.0/8 OUTBOXD_LOG_LEVEL=warn "$BUILD/outboxd" serve 2>"$dir/daemon.log" &
dpid=$!
for _ in $(seq 100); do curl -sf "127.0.0.1:$DPORT/healthz" >/dev/null && curl -sf "127.0.0.1:$RPORT/_control/stats" >/dev/null && break; sleep 0.05; done

api() { curl -sf -H "Authorization: Bearer bench" -H 'Content-Type: application/json' "$@"; }
api -X POST "127.0.0.1:$DPORT/v1/subscriptions" \
  -d "{\"name\":\"plain\",\"event_types\":[\"bench.plain\"],\"endpoint\":\"http://127.0.0.1:$RPORT/plain\"}" >/dev/null
api -X POST "127.0.0.1:$DPORT/v1/subscriptions" \
  -d "{\"name\":\"signed\",\"event_types\":[\"bench.signed\"],\"endpoint\":\"http://127.0.0.1:$RPORT/signed\",\"secret\":\"generate\"}" >/dev/null

# Request bodies and curl configs for both phases are made before any clock starts.
pad=$(printf '%0150d' 0)
for kind in plain signed; do
  for ((b = 0; b < N / BATCH; b++)); do
    {
      printf '{"events":['
      for ((i = 0; i < BATCH; i++)); do
        [ $i -gt 0 ] && printf ','
        printf '{"event_type":"bench.%s","payload":{"n":%d,"pad":"%s"}}' "$kind" $((b * BATCH + i)) "$pad"
      done
      printf ']}'
    } >"$dir/$kind-$b.json"
  done
  for ((b = 0; b < N / BATCH; b++)); do
    [ $b -gt 0 ] && echo next
    printf 'url = "http://127.0.0.1:%s/v1/events"\nheader = "Authorization: Bearer bench"\n' "$DPORT"
    printf 'header = "Content-Type: application/json"\ndata-binary = "@%s/%s-%s.json"\noutput = "/dev/null"\n' "$dir" "$kind" "$b"
  done >"$dir/$kind.cfg"
done

cpu_ticks() { awk '{print $14 + $15}' "/proc/$dpid/stat"; }
hz=$(getconf CLK_TCK)

# One phase: reset the receiver, send N events of $1, wait for N receipts on /$1.
# Prints "deliveries/s cpu_us_per_delivery".
phase() {
  local kind=$1 count=0 stats t0 last_us c0 c1
  curl -sf -X POST "127.0.0.1:$RPORT/_control/reset" -d '{}' >/dev/null
  c0=$(cpu_ticks)
  t0=$(date +%s%N)
  curl -sf --no-progress-meter --parallel --parallel-max 4 -K "$dir/$kind.cfg"
  for _ in $(seq 1200); do
    stats=$(curl -sf "127.0.0.1:$RPORT/_control/stats")
    count=$(grep -o '"count":[0-9]*' <<<"$stats" | cut -d: -f2)
    [ "$count" -ge "$N" ] && break
    sleep 0.05
  done
  c1=$(cpu_ticks)
  last_us=$(grep -o '"last_us":[0-9]*' <<<"$stats" | cut -d: -f2)
  [ "$count" -ge "$N" ] || { echo "only $count of $N $kind deliveries arrived" >&2; exit 1; }
  awk -v n="$N" -v t0="$t0" -v last="$last_us" -v c="$((c1 - c0))" -v hz="$hz" \
    'BEGIN { printf "%.0f %.1f\n", n / ((last * 1000 - t0) / 1e9), c / hz * 1e6 / n }'
}

best_plain=0; best_signed=0
printf '%-7s %-8s %14s %16s\n' round kind deliveries/s "CPU us/delivery"
for ((r = 1; r <= ROUNDS; r++)); do
  for kind in plain signed; do
    read -r rate cpu < <(phase "$kind")
    printf '%-7s %-8s %14s %16s\n' "$r" "$kind" "$rate" "$cpu"
    if [ "$kind" = plain ]; then
      [ "$rate" -gt "$best_plain" ] && best_plain=$rate
    else
      [ "$rate" -gt "$best_signed" ] && best_signed=$rate
    fi
  done
done
awk -v p="$best_plain" -v s="$best_signed" 'BEGIN {
  printf "best: unsigned %d/s, signed %d/s, signed/unsigned = %.3f\n", p, s, s / p }'
