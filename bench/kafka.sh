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
# and prints the table (also written to OUT, bench/results/kafka.md) with each Kafka figure's
# ratio to row 1 and outboxd's CPU (utime+stime, every thread) per event over the same span.
# The mock broker is not a real Kafka (no disk, one process): the figures bound outboxd's
# side, not a cluster's. Knobs: EVENTS (20000), BATCH (1000), BUILD, INTAKE_PARTITIONS (the
# intake topic's partitions, 3), DB (outboxd's store: a fresh SQLite file by default, or
# the URL of an empty PostgreSQL database), PG_PID (that server's postmaster: its CPU, and
# its children's, per event too), OUT. The mock keeps at most 5 MiB per partition (librdkafka's
# rd_kafka_mock_partition: older message sets are dropped, unread or not): keep EVENTS x ~320
# bytes of envelope per partition under it (INTAKE_PARTITIONS=1: EVENTS <= 15000), or the
# consume row waits for messages the broker no longer has.
set -euo pipefail
cd "$(dirname "$0")/.."

EVENTS=${EVENTS:-20000}
BATCH=${BATCH:-1000}
BUILD=${BUILD:-build-bench}
TIMEOUT=${TIMEOUT:-180}
INTAKE_PARTITIONS=${INTAKE_PARTITIONS:-3}
DB=${DB:-}
PG_PID=${PG_PID:-}
OUT=${OUT:-bench/results/kafka.md}

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
"$BUILD/kafka_mock" --brokers 1 --topic "bench.in:$INTAKE_PARTITIONS" --topic bench.out:3 \
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
OUTBOXD_DB=${DB:-sqlite:$work/data/outboxd.db} OUTBOXD_LISTEN=127.0.0.1:$DPORT OUTBOXD_ADMIN_TOKEN=bench \
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
# outboxd's CPU (and, with PG_PID, the PostgreSQL server's: the postmaster with its
# children, living and exited) in clock ticks
HZ=$(getconf CLK_TCK)
stat_ticks() { # PID [1: with the children it reaped]
  local st
  read -r st <"/proc/$1/stat" || { echo 0; return; }
  read -r -a st <<<"${st##*) }"
  if [ "${2:-0}" = 1 ]; then echo $((st[11] + st[12] + st[13] + st[14])); else echo $((st[11] + st[12])); fi
}
pg_ticks() {
  local f st t
  [ -n "$PG_PID" ] || { echo 0; return; }
  t=$(stat_ticks "$PG_PID" 1)
  for f in /proc/[0-9]*/stat; do
    { read -r st <"$f"; } 2>/dev/null || continue
    read -r -a st <<<"${st##*) }"
    [ "${st[1]}" = "$PG_PID" ] && t=$((t + st[11] + st[12]))
  done
  echo "$t"
}
us_per() { awk -v t="$1" -v n="$2" -v hz="$HZ" 'BEGIN { printf "%.1f", (n > 0 ? t / hz * 1e6 / n : 0) }'; }
rate() { awk -v n="$1" -v ms="$2" 'BEGIN { printf "%.0f", (ms > 0 ? n * 1000 / ms : 0) }'; }

# ---- 1. http ------------------------------------------------------------------------------
api -X POST "$D/v1/subscriptions" -d "{\"name\":\"http\",\"event_types\":[\"bench.http\"],\"endpoint\":\"$SINK/http\"}" >/dev/null
curl -sf -X POST "$SINK/_control/reset" >/dev/null
log "1. http: $EVENTS events through POST /v1/events"
t0=$(now_ms); c0=$(stat_ticks "$DPID"); p0=$(pg_ticks)
"$BUILD/bench_loadgen" ingest --url "$D/v1/events" --token bench --events "$EVENTS" --batch "$BATCH" \
  --conns 4 --event-type bench.http >/dev/null
t1=$(wait_for sink_count "$EVENTS")
HTTP_CPU=$(us_per $(($(stat_ticks "$DPID") - c0)) "$EVENTS"); HTTP_PG=$(us_per $(($(pg_ticks) - p0)) "$EVENTS")
HTTP_MS=$((t1 - t0)); HTTP_RATE=$(rate "$EVENTS" "$HTTP_MS")
log "   $HTTP_RATE events/s delivered ($HTTP_MS ms)"

# ---- 2. consume ---------------------------------------------------------------------------
curl -sf -X POST "$SINK/_control/reset" >/dev/null
c0=$(metric outboxd_kafka_consumed_total); c0=${c0:-0}
log "2. consume: $EVENTS envelopes to bench.in ($INTAKE_PARTITIONS partitions)"
t0=$(now_ms); k0=$(stat_ticks "$DPID"); p0=$(pg_ticks)
"$BUILD/bench_kafka" produce --brokers "$BROKERS" --topic bench.in --count "$EVENTS" \
  --endpoint "$SINK/in" >"$work/produce.json"
consumed() { local v; v=$(metric outboxd_kafka_consumed_total); echo $(( ${v:-0} - c0 )); }
tc=$(wait_for consumed "$EVENTS")
STORE_CPU=$(us_per $(($(stat_ticks "$DPID") - k0)) "$EVENTS"); STORE_PG=$(us_per $(($(pg_ticks) - p0)) "$EVENTS")
t1=$(wait_for sink_count "$EVENTS")
CONSUME_CPU=$(us_per $(($(stat_ticks "$DPID") - k0)) "$EVENTS"); CONSUME_PG=$(us_per $(($(pg_ticks) - p0)) "$EVENTS")
STORE_MS=$((tc - t0)); CONSUME_MS=$((t1 - t0))
STORE_RATE=$(rate "$EVENTS" "$STORE_MS"); CONSUME_RATE=$(rate "$EVENTS" "$CONSUME_MS")
log "   $STORE_RATE envelopes/s stored, $CONSUME_RATE/s delivered (producer: $(cat "$work/produce.json"))"

# ---- 3. publish -----------------------------------------------------------------------------
SUB=$(api -X POST "$D/v1/subscriptions" \
  -d '{"name":"relay","event_types":["bench.pub"],"endpoint":"kafka://bench.out"}' |
  grep -o '"id":"[^"]*"' | head -1 | cut -d'"' -f4)
log "3. publish: $EVENTS events to kafka://bench.out"
t0=$(now_ms); c0=$(stat_ticks "$DPID"); p0=$(pg_ticks)
"$BUILD/bench_loadgen" ingest --url "$D/v1/events" --token bench --events "$EVENTS" --batch "$BATCH" \
  --conns 4 --event-type bench.pub >/dev/null
pub() { processed_of "$SUB"; }
t1=$(wait_for pub "$EVENTS")
PUB_CPU=$(us_per $(($(stat_ticks "$DPID") - c0)) "$EVENTS"); PUB_PG=$(us_per $(($(pg_ticks) - p0)) "$EVENTS")
PUB_MS=$((t1 - t0)); PUB_RATE=$(rate "$EVENTS" "$PUB_MS")
log "   $PUB_RATE events/s acknowledged by the broker ($PUB_MS ms)"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
mkdir -p "$(dirname "$OUT")"
pgcol() { if [ -n "$PG_PID" ]; then echo " $1 |"; fi; }
store=SQLite; [ -z "$DB" ] || store=${DB%%:*}
{
  echo "# Kafka benchmark ($(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo ?), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
  echo
  echo "\`bash bench/kafka.sh\`, EVENTS=$EVENTS, outboxd on $store, librdkafka's mock cluster (1 broker), intake topic of $INTAKE_PARTITIONS partitions."
  echo
  echo "| row | what | per second | ratio to http | outboxd CPU µs per event |$(pgcol "PostgreSQL CPU µs per event")"
  echo "|---|---|--:|--:|--:|$(pgcol "--:")"
  echo "| http | events ingested over HTTP, delivered over HTTP | $HTTP_RATE | 1.00 | $HTTP_CPU |$(pgcol "$HTTP_PG")"
  echo "| consume | envelopes consumed and stored (intake) | $STORE_RATE | $(ratio "$STORE_RATE" "$HTTP_RATE") | $STORE_CPU |$(pgcol "$STORE_PG")"
  echo "| consume | envelopes consumed, stored and delivered over HTTP | $CONSUME_RATE | $(ratio "$CONSUME_RATE" "$HTTP_RATE") | $CONSUME_CPU |$(pgcol "$CONSUME_PG")"
  echo "| publish | events ingested over HTTP, published to Kafka (acks=all) | $PUB_RATE | $(ratio "$PUB_RATE" "$HTTP_RATE") | $PUB_CPU |$(pgcol "$PUB_PG")"
  echo
  echo "CPU: utime+stime over the row's span (first request or produce to the figure's end) ÷ its events; the consume row's first line to the intake's last store (deliveries run meanwhile)."
} | tee "$OUT"
