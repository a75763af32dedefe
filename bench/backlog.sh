#!/usr/bin/env bash
# backlog.sh: latency of a live stream while a bulk backlog drains (docs/performance.md,
# "Latency under a backlog"). One outboxd, two subscriptions to the same sink on paths of
# their own: "bulk" takes events of type bench.bulk, "live" takes bench.live. First
# BACKLOG_EVENTS bulk events are stored as fast as outboxd accepts them; as soon as they
# are, bench_loadgen sends live events at LAT_RATE/s for LAT_SECONDS (single events, an
# intended send time each, no coordinated omission). The live events' latency is the
# sink's receipt − the intended send time, joined by webhook-id; the backlog's progress
# over the live run is reported too (a lane that starves the backlog is no answer).
#
#   bash bench/backlog.sh [sqlite|postgres]...      default: sqlite postgres
#
# Prints one JSON object per store on stdout. Knobs from the environment as below; BUILD
# is a Release build dir with outboxd, test_receiver and bench_loadgen (built if missing).
# For PostgreSQL it uses PG_URL if set (a database it may drop tables in), else starts a
# server of its own in a temporary directory (PG_OPTS: more server options, e.g.
# "-c log_min_duration_statement=20"). Leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/.."

BACKLOG_EVENTS=${BACKLOG_EVENTS:-100000}
BATCH=${BATCH:-1000}
CONNS=${CONNS:-4}
LAT_RATE=${LAT_RATE:-1000}
LAT_SECONDS=${LAT_SECONDS:-20}
LAT_CONNS=${LAT_CONNS:-16}
SINK_THREADS=${SINK_THREADS:-2}
ROW_TIMEOUT=${ROW_TIMEOUT:-180}
BUILD=${BUILD:-build-bench}
BENCH_OUTBOXD=${BENCH_OUTBOXD:-$BUILD/outboxd}
STORES=${*:-sqlite postgres}

log() { printf '[backlog %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

[ -x "$BUILD/bench_loadgen" ] && [ -x "$BUILD/test_receiver" ] && [ -x "$BENCH_OUTBOXD" ] || {
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$BUILD" -j "$(nproc)" --target outboxd test_receiver bench_loadgen >/dev/null
}

work=$(mktemp -d /tmp/outboxd-backlog-XXXXXX)
pids=()
# free_port, stop_pid, stop_started, pg_start, sink_up, sink_stat, outboxd_up, api:
# bench/lib.sh
. bench/lib.sh
cleanup() {
  stop_started
  if [ "${KEEP:-0}" = 1 ]; then log "raw files kept in $work"; else rm -rf "$work" "$pg_dir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

RPORT=$(free_port)
"$BUILD/test_receiver" --port "$RPORT" --no-bodies --threads "$SINK_THREADS" --timestamps \
  >"$work/sink.log" 2>&1 &
pids+=($!)
SINK=http://127.0.0.1:$RPORT
sink_up "$SINK" || true
sink_field() { sink_stat "$SINK" "$1"; }

pg_dsn=${PG_URL:-}

DPID=""; DPORT=""

# run_store STORE DSN: one measurement; prints its JSON.
run_store() {
  local store=$1 dsn=$2 bulk0 accepted
  DPORT=$(free_port)
  mkdir -p "$work/$store"
  OUTBOXD_DB=$dsn OUTBOXD_LISTEN=127.0.0.1:$DPORT OUTBOXD_ADMIN_TOKEN=bench \
    OUTBOXD_LOG_LEVEL=warn OUTBOXD_DATA_DIR="$work/$store" OUTBOXD_SSRF_ALLOW=127.0.0.0/8 \
    "$BENCH_OUTBOXD" serve >"$work/$store.log" 2>&1 &
  DPID=$!; pids+=("$DPID")
  outboxd_up "$DPORT" "$DPID" || die "$store: outboxd did not start: $(tail -1 "$work/$store.log")"
  api -X POST "127.0.0.1:$DPORT/v1/subscriptions" \
    -d "{\"name\":\"bulk\",\"event_types\":[\"bench.bulk\"],\"endpoint\":\"$SINK/bulk\"}" >/dev/null
  api -X POST "127.0.0.1:$DPORT/v1/subscriptions" \
    -d "{\"name\":\"live\",\"event_types\":[\"bench.live\"],\"endpoint\":\"$SINK/live\"}" >/dev/null
  curl -sf -X POST "$SINK/_control/reset" >/dev/null
  log "$store: $BACKLOG_EVENTS bulk events, then $LAT_RATE live events/s for $LAT_SECONDS s"
  "$BUILD/bench_loadgen" ingest --url "http://127.0.0.1:$DPORT/v1/events" --token bench \
    --event-type bench.bulk --events "$BACKLOG_EVENTS" --batch "$BATCH" --conns "$CONNS" \
    >"$work/$store.bulk.json"
  bulk0=$(sink_field count)
  timeout "$ROW_TIMEOUT" "$BUILD/bench_loadgen" rate --url "http://127.0.0.1:$DPORT/v1/events" \
    --token bench --event-type bench.live --rate "$LAT_RATE" --duration "$LAT_SECONDS" \
    --conns "$LAT_CONNS" --batch 1 --out "$work/$store.rate.txt" >"$work/$store.rate.json"
  accepted=$(grep -o '"accepted":[0-9]*' "$work/$store.rate.json" | cut -d: -f2)
  # every live event, and then the rest of the backlog
  local want=$((BACKLOG_EVENTS + accepted)) deadline=$(($(date +%s) + ROW_TIMEOUT)) n=0
  while [ "$(date +%s)" -lt "$deadline" ]; do
    n=$(sink_field unique_ids); [ "${n:-0}" -ge "$want" ] && break; sleep 0.2
  done
  curl -sf "$SINK/_control/timestamps" >"$work/$store.receipts.txt"
  # outboxd's own account (the store calls' wall times among it), kept with KEEP=1
  curl -sf "127.0.0.1:$DPORT/metrics" >"$work/$store.metrics.txt" || true
  printf '{"store":"%s","backlog_events":%d,"live_rate":%s,"live_seconds":%s,' "$store" \
    "$BACKLOG_EVENTS" "$LAT_RATE" "$LAT_SECONDS"
  printf '"backlog_delivered_before_live":%d,"unique_ids":%s,"expected":%d,"duplicates":%s,' \
    "$bulk0" "$n" "$want" "$(sink_field duplicates)"
  printf '"backlog_ingest":%s,"live_ingest":%s,"latency":%s}\n' \
    "$(tr -d '\n' <"$work/$store.bulk.json")" "$(tr -d '\n' <"$work/$store.rate.json")" \
    "$(node bench/drain.mjs "$work/$store.rate.txt" "$work/$store.receipts.txt")"
  stop_pid "$DPID"
}

for s in $STORES; do
  case $s in
    sqlite) run_store sqlite "sqlite:$work/sqlite/o.db" ;;
    postgres)
      if [ -z "$pg_dsn" ]; then
        # shellcheck disable=SC2086  # PG_OPTS is a list of server options
        pg_start ${PG_OPTS:-} || die "no PostgreSQL"
        pg_dsn=$(pg_url postgres)
      fi
      run_store postgres "$pg_dsn" ;;
    *) die "unknown store $s" ;;
  esac
done
