#!/usr/bin/env bash
# kafka.sh: the Kafka benchmark of `make bench-kafka` (docs/kafka.md, docs/performance.md). In one
# run, on this machine, one outboxd on SQLite and librdkafka's mock cluster (one broker,
# in memory, over local TCP), with the test receiver as the subscriber:
#
#   1. http     EVENTS events through POST /v1/events to an HTTP subscription: events/s
#               from the first request to the last receipt (the reference)
#   2. consume  EVENTS OutboxEvent envelopes produced to an intake topic, each naming the
#               receiver as its endpoint: envelopes/s from the first produce to the last
#               receipt (consume, store, commit, deliver), and to the intake's last store
#   3. publish  EVENTS events through POST /v1/events to a kafka:// subscription:
#               events/s from the first request to the last broker acknowledgement
#
# and prints the table (also written to bench/results/kafka.md) with each Kafka figure's
# ratio to row 1. The mock broker is not a real Kafka (no disk, one process): the figures
# bound outboxd's side, not a cluster's. Knobs: EVENTS (20000), BATCH (1000), BUILD.
set -euo pipefail
cd "$(dirname "$0")/.."

EVENTS=${EVENTS:-20000}
BATCH=${BATCH:-1000}
BUILD=${BUILD:-build-bench}
TIMEOUT=${TIMEOUT:-180}

log() { printf '[kafka-bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

bash scripts/deps.sh
log "building Release binaries in $BUILD"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target outboxd test_receiver kafka_mock bench_loadgen \
  bench_kafka >/dev/null

work=$(mktemp -d /tmp/outboxd-kafka-bench-XXXXXX)
pids=()
cleanup() {
  local p
  exec 3>&- 2>/dev/null || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
now_ms() { date +%s%3N; }

# the mock cluster: commands on fd 3, its bootstrap on its stdout
mkfifo "$work/mock.in"
"$BUILD/kafka_mock" --brokers 1 --topic bench.in:3 --topic bench.out:3 \
  <"$work/mock.in" >"$work/mock.out" 2>"$work/mock.err" &
pids+=($!)
exec 3>"$work/mock.in"
for _ in $(seq 100); do grep -q bootstrap= "$work/mock.out" 2>/dev/null && break; sleep 0.05; done
BROKERS=$(sed -n 's/^bootstrap=//p' "$work/mock.out")
[ -n "$BROKERS" ] || die "the mock cluster did not start"

SPORT=$(free_port)
"$BUILD/test_receiver" --port "$SPORT" --no-bodies --threads 2 >/dev/null 2>"$work/sink.log" &
pids+=($!)
SINK=http://127.0.0.1:$SPORT
for _ in $(seq 100); do curl -sf "$SINK/_control/stats" >/dev/null && break; sleep 0.05; done

DPORT=$(free_port)
mkdir -p "$work/data"
OUTBOXD_DB=sqlite:$work/data/outboxd.db OUTBOXD_LISTEN=127.0.0.1:$DPORT OUTBOXD_ADMIN_TOKEN=bench \
  OUTBOXD_LOG_LEVEL=warn OUTBOXD_DATA_DIR="$work/data" OUTBOXD_KAFKA_BROKERS="$BROKERS" \
  OUTBOXD_KAFKA_INTAKE=bench.in OUTBOXD_MAX_IN_FLIGHT=256 \
  OUTBOXD_SSRF_ALLOW=127.0.0.0/8 "$BUILD/outboxd" serve >"$work/outboxd.log" 2>&1 &
DPID=$!
pids+=("$DPID")
D=http://127.0.0.1:$DPORT
for _ in $(seq 200); do curl -sf "$D/healthz" >/dev/null && break; sleep 0.05; done
api() { curl -sf -H "Authorization: Bearer bench" -H 'Content-Type: application/json' "$@"; }

sink_count() { curl -sf "$SINK/_control/stats" | grep -o '"count":[0-9]*' | cut -d: -f2; }
metric() { curl -sf "$D/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
processed_of() { # deliveries of subscription $1 PROCESSED, from /metrics
  curl -sf "$D/metrics" |
    awk -v s="outboxd_deliveries_total{subscription_id=\"$1\",outcome=\"processed\"}" '$1 == s { print $2 }'
}
# wait_for CMD WANT: polls CMD every 20 ms until it prints >= WANT; prints the time (ms)
wait_for() {
  local deadline=$(($(date +%s) + TIMEOUT)) v
  while :; do
    v=$($1 || true)
    [ "${v:-0}" -ge "$2" ] && break
    [ "$(date +%s)" -ge "$deadline" ] && { log "timeout: $1 at ${v:-0} of $2"; break; }
    sleep 0.02
  done
  now_ms
}
rate() { awk -v n="$1" -v ms="$2" 'BEGIN { printf "%.0f", (ms > 0 ? n * 1000 / ms : 0) }'; }

# ---- 1. http ------------------------------------------------------------------------------
api -X POST "$D/v1/subscriptions" -d "{\"name\":\"http\",\"event_types\":[\"bench.http\"],\"endpoint\":\"$SINK/http\"}" >/dev/null
curl -sf -X POST "$SINK/_control/reset" >/dev/null
log "1. http: $EVENTS events through POST /v1/events"
t0=$(now_ms)
"$BUILD/bench_loadgen" ingest --url "$D/v1/events" --token bench --events "$EVENTS" --batch "$BATCH" \
  --conns 4 --event-type bench.http >/dev/null
t1=$(wait_for sink_count "$EVENTS")
HTTP_MS=$((t1 - t0)); HTTP_RATE=$(rate "$EVENTS" "$HTTP_MS")
log "   $HTTP_RATE events/s delivered ($HTTP_MS ms)"

# ---- 2. consume ---------------------------------------------------------------------------
curl -sf -X POST "$SINK/_control/reset" >/dev/null
c0=$(metric outboxd_kafka_consumed_total); c0=${c0:-0}
log "2. consume: $EVENTS envelopes to bench.in"
t0=$(now_ms)
"$BUILD/bench_kafka" produce --brokers "$BROKERS" --topic bench.in --count "$EVENTS" \
  --endpoint "$SINK/in" >"$work/produce.json"
consumed() { local v; v=$(metric outboxd_kafka_consumed_total); echo $(( ${v:-0} - c0 )); }
tc=$(wait_for consumed "$EVENTS")
t1=$(wait_for sink_count "$EVENTS")
STORE_MS=$((tc - t0)); CONSUME_MS=$((t1 - t0))
STORE_RATE=$(rate "$EVENTS" "$STORE_MS"); CONSUME_RATE=$(rate "$EVENTS" "$CONSUME_MS")
log "   $STORE_RATE envelopes/s stored, $CONSUME_RATE/s delivered (producer: $(cat "$work/produce.json"))"

# ---- 3. publish -----------------------------------------------------------------------------
SUB=$(api -X POST "$D/v1/subscriptions" \
  -d '{"name":"relay","event_types":["bench.pub"],"endpoint":"kafka://bench.out"}' |
  grep -o '"id":"[^"]*"' | head -1 | cut -d'"' -f4)
log "3. publish: $EVENTS events to kafka://bench.out"
t0=$(now_ms)
"$BUILD/bench_loadgen" ingest --url "$D/v1/events" --token bench --events "$EVENTS" --batch "$BATCH" \
  --conns 4 --event-type bench.pub >/dev/null
pub() { processed_of "$SUB"; }
t1=$(wait_for pub "$EVENTS")
PUB_MS=$((t1 - t0)); PUB_RATE=$(rate "$EVENTS" "$PUB_MS")
log "   $PUB_RATE events/s acknowledged by the broker ($PUB_MS ms)"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
mkdir -p bench/results
{
  echo "# Kafka benchmark ($(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo
  echo "\`bash bench/kafka.sh\`, EVENTS=$EVENTS, outboxd on SQLite, librdkafka's mock cluster (1 broker)."
  echo
  echo "| row | what | per second | ratio to http |"
  echo "|---|---|--:|--:|"
  echo "| http | events ingested over HTTP, delivered over HTTP | $HTTP_RATE | 1.00 |"
  echo "| consume | envelopes consumed and stored (intake) | $STORE_RATE | $(ratio "$STORE_RATE" "$HTTP_RATE") |"
  echo "| consume | envelopes consumed, stored and delivered over HTTP | $CONSUME_RATE | $(ratio "$CONSUME_RATE" "$HTTP_RATE") |"
  echo "| publish | events ingested over HTTP, published to Kafka (acks=all) | $PUB_RATE | $(ratio "$PUB_RATE" "$HTTP_RATE") |"
} | tee bench/results/kafka.md
