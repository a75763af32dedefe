#!/usr/bin/env bash
# quick.sh: a one-minute throughput check — N events (default 20,000, ~200-byte payloads)
# ingested through the batch API, spread over K outboxd instances (default 1) sharing one
# store, delivered to one local receiver. Prints ingest events/s and end-to-end
# deliveries/s (first ingest to last receipt), outboxd's CPU per delivery and, with the
# PostgreSQL server it starts itself, that server's. `make bench` is the full comparison.
#
# Usage: [DB=sqlite|postgres] [KEYS=n] [ORDERING=partition_key] [SUBS=n] bench/quick.sh
#        [events] [instances] [batch]
#   SUBS=n (default 1) fans every event out to n subscriptions, each to a path of its own
#   on the receiver: events x n deliveries, each (path, webhook-id) counted once.
#   SUB_EXTRA=',"concurrency":512' adds fields to each subscription's JSON (here: a pinned
#   concurrency instead of the adaptive limit).
#   KEYS=n gives the events n partition keys (round-robin); ORDERING=partition_key makes the
#   subscription deliver each key in order (docs/api.md#per-key-ordering).
#   DB=sqlite (default) runs one instance (one process owns a file). DB=postgres starts a throwaway PostgreSQL server (initdb in a temp dir, a free
#   port, default durability: fsync and synchronous_commit on), or uses BENCH_PG_DSN (a
#   role allowed to CREATE DATABASE): a database of its own there, dropped at the end
#   (KEEP_DB=1 keeps it; left behind, each run would leave ~200 MB on the server).
#   Builds a release binary first (BUILD, default build).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-20000}
K=${2:-1}
BATCH=${3:-100}
DB=${DB:-sqlite}
KEYS=${KEYS:-0}
ORDERING=${ORDERING:-none}
SUBS=${SUBS:-1}
BUILD=${BUILD:-build}
[ "$DB" = sqlite ] && [ "$K" -ne 1 ] && { echo "quick: SQLite takes one instance" >&2; exit 2; }

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target outboxd test_receiver >/dev/null

dir=$(mktemp -d /tmp/outboxd-bench-XXXXXX)
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])' 2>/dev/null || echo $((20000 + RANDOM % 20000)); }
pids=()
pgbin=""
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u "$PGUSER_OS" -- "$@"; else "$@"; fi; }
name=""
cleanup() {
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -n "$pgbin" ] && as_pg "$pgbin/pg_ctl" -D "$dir/pg/data" -m fast -w stop >/dev/null 2>&1 || true
  [ -n "$name" ] && [ "${KEEP_DB:-0}" != 1 ] &&
    psql -q "$BENCH_PG_DSN" -c "DROP DATABASE IF EXISTS $name" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

if [ "$DB" = postgres ]; then
  if [ -n "${BENCH_PG_DSN:-}" ]; then
    name="outboxd_bench_$$"
    psql -q "$BENCH_PG_DSN" -c "CREATE DATABASE $name"
    DSN=$(sed -E "s#(://[^/?]*)(/[^?]*)?#\1/$name#" <<<"$BENCH_PG_DSN")
  else
    pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
    PGUSER_OS=nobody
    id outboxd-test >/dev/null 2>&1 && PGUSER_OS=outboxd-test
    mkdir -p "$dir/pg"
    chmod 711 "$dir" # the server user must reach its directory
    [ "$(id -u)" -eq 0 ] && chown "$PGUSER_OS" "$dir/pg"
    PGPORT=$(free_port)
    (cd "$dir/pg" && as_pg "$pgbin/initdb" -D "$dir/pg/data" -U postgres -A trust -E UTF8 \
      --locale=C --no-sync >/dev/null)
    (cd "$dir/pg" && as_pg "$pgbin/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/log" -w \
      -o "-p $PGPORT -k $dir/pg -c listen_addresses=127.0.0.1 -c max_connections=200" start >/dev/null)
    psql -q "postgres://postgres@127.0.0.1:$PGPORT/postgres" -c "CREATE DATABASE bench"
    DSN="postgres://postgres@127.0.0.1:$PGPORT/bench"
  fi
else
  DSN="sqlite:$dir/o.db"
fi

RPORT=$(free_port)
"$BUILD/test_receiver" --port "$RPORT" --no-bodies --threads 2 --unique-per-path >/dev/null &
pids+=($!)
ports=()
opids=()
for ((i = 0; i < K; i++)); do
  p=$(free_port)
  ports+=("$p")
  OUTBOXD_DB="$DSN" OUTBOXD_LISTEN="127.0.0.1:$p" OUTBOXD_ADMIN_TOKEN=bench OUTBOXD_DATA_DIR="$dir" \
    OUTBOXD_SSRF_ALLOW=127.0.0.0/8 OUTBOXD_LOG_LEVEL=warn ${WRAP:-} "$BUILD/outboxd" serve 2>>"$dir/daemon-$i.log" &
  pids+=($!)
  opids+=($!)
  # One at a time: the first creates the schema.
  for _ in $(seq 200); do curl -sf "127.0.0.1:$p/healthz" >/dev/null && break; sleep 0.05; done
done
for _ in $(seq 100); do curl -sf "127.0.0.1:$RPORT/_control/stats" >/dev/null && break; sleep 0.05; done

api() { curl -sf -H "Authorization: Bearer bench" -H 'Content-Type: application/json' "$@"; }
for ((s = 0; s < SUBS; s++)); do
  path=sink
  [ "$SUBS" -gt 1 ] && path=sink/$s
  api -X POST "127.0.0.1:${ports[0]}/v1/subscriptions" \
    -d "{\"name\":\"sink$s\",\"event_types\":[\"*\"],\"endpoint\":\"http://127.0.0.1:$RPORT/$path\",\"ordering\":\"$ORDERING\"${SUB_EXTRA:-}}" >/dev/null
done
D=$((N * SUBS))
sleep 0.5 # the other instances reload the subscriptions on NOTIFY outboxd_subs

pad=$(printf '%0150d' 0)
for ((b = 0; b < N / BATCH; b++)); do
  {
    printf '{"events":['
    for ((i = 0; i < BATCH; i++)); do
      [ $i -gt 0 ] && printf ','
      n=$((b * BATCH + i))
      key=""
      [ "$KEYS" -gt 0 ] && key=",\"partition_key\":\"k$((n % KEYS))\""
      printf '{"event_type":"bench.event"%s,"payload":{"n":%d,"pad":"%s"}}' "$key" "$n" "$pad"
    done
    printf ']}'
  } >"$dir/batch-$b.json"
done
# Batches go round-robin to the instances, over 4 keep-alive connections per instance.
for ((b = 0; b < N / BATCH; b++)); do
  [ $b -gt 0 ] && echo next
  printf 'url = "http://127.0.0.1:%s/v1/events"\nheader = "Authorization: Bearer bench"\n' "${ports[$((b % K))]}"
  printf 'header = "Content-Type: application/json"\ndata-binary = "@%s/batch-%s.json"\noutput = "/dev/null"\n' "$dir" "$b"
done >"$dir/curl.cfg"

# CPU (utime + stime) of the PostgreSQL server this script started: the postmaster with
# what its exited children used, and its live children.
pg_ticks() {
  [ -n "$pgbin" ] || { echo 0; return; }
  local pm t c
  pm=$(head -1 "$dir/pg/data/postmaster.pid")
  t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat")
  for c in $(pgrep -P "$pm"); do
    t=$((t + $(awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || echo 0)))
  done
  echo "$t"
}
pg0=$(pg_ticks)
t0=$(date +%s%N)
curl -sf --no-progress-meter --parallel --parallel-max $((4 * K)) -K "$dir/curl.cfg"
t1=$(date +%s%N)
count=0
for _ in $(seq 1200); do
  stats=$(curl -sf "127.0.0.1:$RPORT/_control/stats")
  count=$(grep -o '"count":[0-9]*' <<<"$stats" | cut -d: -f2)
  [ "$count" -ge "$D" ] && break
  sleep 0.05
done
last_us=$(grep -o '"last_us":[0-9]*' <<<"$stats" | cut -d: -f2)
dups=$(grep -o '"duplicates":[0-9]*' <<<"$stats" | cut -d: -f2)
# CPU (utime + stime) of the outboxd processes only, before they stop.
ticks=0
for p in "${opids[@]}"; do
  ticks=$((ticks + $(awk '{print $14 + $15}' "/proc/$p/stat")))
done
pg1=$(pg_ticks)
hz=$(getconf CLK_TCK)
# how the rounds started: handed over by the ingest commit, or claimed
handed=0; claimed=0; lean=0; curl=0
for port in "${ports[@]}"; do
  m=$(curl -sf -H "Authorization: Bearer bench" "127.0.0.1:$port/metrics" || true)
  handed=$((handed + $(sed -n 's/^outboxd_rounds_started_total{via="handoff"} //p' <<<"$m" | head -1 | grep -E '^[0-9]+$' || echo 0)))
  claimed=$((claimed + $(sed -n 's/^outboxd_rounds_started_total{via="claim"} //p' <<<"$m" | head -1 | grep -E '^[0-9]+$' || echo 0)))
  lean=$((lean + $(sed -n 's/^outboxd_http_requests_total{client="lean"} //p' <<<"$m" | head -1 | grep -E '^[0-9]+$' || echo 0)))
  curl=$((curl + $(sed -n 's/^outboxd_http_requests_total{client="libcurl"} //p' <<<"$m" | head -1 | grep -E '^[0-9]+$' || echo 0)))
done

awk -v n="$N" -v d="$D" -v subs="$SUBS" -v k="$K" -v db="$DB" -v t0="$t0" -v t1="$t1" -v last="$last_us" -v got="$count" -v dups="$dups" -v ticks="$ticks" -v pgticks="$((pg1 - pg0))" -v ownpg="${pgbin:+1}" -v hz="$hz" -v keys="$KEYS" -v ordering="$ORDERING" -v handed="$handed" -v claimed="$claimed" -v lean="$lean" -v curl="$curl" 'BEGIN {
  ingest = (t1 - t0) / 1e9; e2e = (last * 1000 - t0) / 1e9;
  printf "store:             %s, %d instance(s), %d keys, ordering %s, %d subscription(s)\n", db, k, keys, ordering, subs;
  printf "events:            %d, %d deliveries (received %d, %d duplicates)\n", n, d, got, dups;
  printf "ingest:            %.0f events/s (%.3f s)\n", n / ingest, ingest;
  printf "end to end:        %.0f deliveries/s (%.3f s, first ingest to last receipt)\n", d / e2e, e2e;
  printf "outboxd CPU:       %.1f us per delivery (utime+stime of the outboxd processes)\n", ticks / hz * 1e6 / d;
  if (ownpg)
    printf "PostgreSQL CPU:    %.1f us per delivery (utime+stime of the server'"'"'s processes)\n", pgticks / hz * 1e6 / d;
  printf "rounds started:    %d handed over at ingest, %d claimed\n", handed, claimed;
  printf "http requests:     %d lean client, %d libcurl\n", lean, curl;
}'
