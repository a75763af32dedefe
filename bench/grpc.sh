#!/usr/bin/env bash
# grpc.sh: the gRPC ingest against the HTTP ingest, `make bench-grpc` (docs/grpc.md,
# docs/performance.md). In one run, on this machine, one outboxd on SQLite (Release build)
# with both ways in, and one Node client for both (tests/support/grpc/client.mjs: grpc-js
# for gRPC, node:http with keep-alive for HTTP), EVENTS events a row, CONCURRENCY calls
# or requests at once:
#
#   1. http-single   POST /v1/events, one event a request
#   2. grpc-unary    Publish, one event a call
#   3. http-batch    POST /v1/events, {"events":[...]} of BATCH events
#   4. grpc-stream   PublishStream, BATCH events a call
#
# Each row: events/s acknowledged (durable) from its first call to its last answer, the
# daemon's CPU (user + system, every thread, from /proc) per event, and the client's (Node's
# process.cpuUsage), which shares the 2 cores: a row whose client is busier leaves the
# daemon less. No subscription matches, so the figures are ingest's alone: parse, check,
# store, answer. Prints the table (also written to bench/results/grpc.md) with each gRPC
# row's ratio to the HTTP row of the same shape. Knobs: EVENTS (20000, rows 1-2),
# BATCH_EVENTS (100000, rows 3-4), BATCH (100), CONCURRENCY (8), BUILD, BENCH_OUTBOXD (the
# binary to run, default $BUILD/outboxd: to compare two builds in turn).
set -euo pipefail
cd "$(dirname "$0")/.."

EVENTS=${EVENTS:-20000}
BATCH_EVENTS=${BATCH_EVENTS:-100000}
BATCH=${BATCH:-100}
CONCURRENCY=${CONCURRENCY:-8}
BUILD=${BUILD:-build-bench}

log() { printf '[grpc-bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

bash scripts/deps.sh
log "building Release binaries in $BUILD"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target outboxd >/dev/null
export GRPC_NODE_MODULES=$PWD/$BUILD/grpc-npm/node_modules GRPC_PROTO_DIR=$PWD/proto
[ -d "$GRPC_NODE_MODULES/@grpc/grpc-js" ] || die "$GRPC_NODE_MODULES has no @grpc/grpc-js (cmake's npm ci)"

work=$(mktemp -d /tmp/outboxd-grpc-bench-XXXXXX)
pids=()
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
HZ=$(getconf CLK_TCK)

DPORT=$(free_port)
GPORT=$(free_port)
mkdir -p "$work/data"
OUTBOXD_DB=sqlite:$work/data/outboxd.db OUTBOXD_LISTEN=127.0.0.1:$DPORT \
  OUTBOXD_GRPC_LISTEN=127.0.0.1:$GPORT OUTBOXD_ADMIN_TOKEN=bench OUTBOXD_LOG_LEVEL=warn \
  OUTBOXD_DATA_DIR="$work/data" "${BENCH_OUTBOXD:-$BUILD/outboxd}" serve >"$work/outboxd.log" 2>&1 &
DPID=$!
pids+=("$DPID")
for _ in $(seq 200); do curl -sf "127.0.0.1:$DPORT/healthz" >/dev/null && break; sleep 0.05; done
curl -sf "127.0.0.1:$DPORT/healthz" >/dev/null || die "outboxd did not start: $(tail -3 "$work/outboxd.log")"

client=(node tests/support/grpc/client.mjs --target "127.0.0.1:$GPORT" --token bench
        --url "http://127.0.0.1:$DPORT/v1/events" --concurrency "$CONCURRENCY"
        --stream-size "$BATCH" --type bench.grpc)

# row NAME COMMAND SHAPE N: one row of N events; SHAPE is --unary or --stream. Sets
# RATE_NAME, CPU_NAME (outboxd's µs per event) and CLIENT_NAME (the client's).
row() {
  local name=$1 command=$2 shape=$3 n=$4 c0 c1 out ms ok client_us half
  half=${shape#--}
  c0=$(cpu_ticks "$DPID")
  out=$("${client[@]}" --run "$name" "$shape" "$n" "$command")
  c1=$(cpu_ticks "$DPID")
  ms=$(jq -r ".${half}_ms" <<<"$out"); ok=$(jq -r ".${half}_ok" <<<"$out")
  client_us=$(jq -r ".${half}_cpu_us" <<<"$out")
  [ "$ok" = "$n" ] || die "$name: $ok of $n acknowledged: $(jq -c .errors <<<"$out")"
  local rate cpu client_cpu
  rate=$(awk -v n="$n" -v ms="$ms" 'BEGIN { printf "%.0f", n * 1000 / ms }')
  cpu=$(awk -v t=$((c1 - c0)) -v hz="$HZ" -v n="$n" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }')
  client_cpu=$(awk -v us="$client_us" -v n="$n" 'BEGIN { printf "%.1f", us / n }')
  printf -v "RATE_${name//-/_}" '%s' "$rate"
  printf -v "CPU_${name//-/_}" '%s' "$cpu"
  printf -v "CLIENT_${name//-/_}" '%s' "$client_cpu"
  log "$name: $rate events/s, $cpu µs of outboxd CPU and $client_cpu µs of the client's per event ($ms ms)"
}

log "warm-up (both ways in, 1000 events each)"
"${client[@]}" --run warm-h --unary 1000 load-http >/dev/null
"${client[@]}" --run warm-g --unary 1000 load >/dev/null
row http-single load-http --unary "$EVENTS"
row grpc-unary load --unary "$EVENTS"
row http-batch load-http --stream "$BATCH_EVENTS"
row grpc-stream load --stream "$BATCH_EVENTS"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
mkdir -p bench/results
{
  echo "# gRPC ingest benchmark ($(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo
  echo "\`bash bench/grpc.sh\` (\`make bench-grpc\`): EVENTS=$EVENTS (single rows), BATCH_EVENTS=$BATCH_EVENTS (batch rows), BATCH=$BATCH, CONCURRENCY=$CONCURRENCY; outboxd on SQLite (Release), no subscription (ingest alone); one Node client (grpc-js; node:http keep-alive) on the same cores."
  echo
  echo "| row | what | events/s | outboxd CPU µs/event | client CPU µs/event | events/s vs HTTP | outboxd CPU vs HTTP |"
  echo "|---|---|--:|--:|--:|--:|--:|"
  echo "| http-single | POST /v1/events, 1 event a request | $RATE_http_single | $CPU_http_single | $CLIENT_http_single | 1.00 | 1.00 |"
  echo "| grpc-unary | Publish, 1 event a call | $RATE_grpc_unary | $CPU_grpc_unary | $CLIENT_grpc_unary | $(ratio "$RATE_grpc_unary" "$RATE_http_single") | $(ratio "$CPU_grpc_unary" "$CPU_http_single") |"
  echo "| http-batch | POST /v1/events, $BATCH events a request | $RATE_http_batch | $CPU_http_batch | $CLIENT_http_batch | 1.00 | 1.00 |"
  echo "| grpc-stream | PublishStream, $BATCH events a call | $RATE_grpc_stream | $CPU_grpc_stream | $CLIENT_grpc_stream | $(ratio "$RATE_grpc_stream" "$RATE_http_batch") | $(ratio "$CPU_grpc_stream" "$CPU_http_batch") |"
} | tee bench/results/grpc.md
