#!/usr/bin/env bash
# soak.sh: the chaos soak of `make soak` (docs/reliability.md).
#
# For SOAK_MINUTES it runs three outboxd instances (A, B, C) on one throwaway PostgreSQL
# cluster, sharing one secret key, each with its own data directory (so each is its own
# static member of the Kafka intake's group), with the Kafka intake on in all three,
# against librdkafka's mock cluster (tests/support/kafka_mock.c), while
#   - two load generators POST events at a steady modest rate (RATE events/s in all), one
#     to A and one to B, and keep every id that came back in a 202;
#   - a producer produces events to the intake topic with kcat (KAFKA_RATE events/s, in
#     batches of KAFKA_BATCH) and counts an event as acknowledged only when kcat exits 0,
#     which it does only when the broker acknowledged every message of the batch;
#   - a killer SIGKILLs an outboxd every KILL_EVERY s on average (sometimes all three at
#     once); each is restarted at once by its supervisor loop;
#   - PostgreSQL is restarted every PG_EVERY s on average (`pg_ctl restart` or a stop, a
#     pause and a start; -m immediate and -m fast in turn);
#   - every broker of the mock cluster goes down for 3-6 s every BROKER_EVERY s on
#     average, and comes back with its data (at least KAFKA_SETTLE s after a SIGKILL,
#     for the mock cluster's sake: see the killer below);
#   - the subscribers (test_receiver in chaos mode, one path per subscription) switch at
#     random between profiles that answer slowly, 5xx, 429 with Retry-After, reset the
#     connection, or answer only after the delivery timeout.
# Then it stops the chaos, heals the subscribers, replays the dead-letter queue through
# the API, lets outboxd drain (at most DRAIN_SECONDS), and accounts for every acknowledged
# event by webhook-id against what each subscription's receiver acknowledged with a
# completely written 2xx: delivered (and how many duplicates), still pending, in the DLQ,
# or lost. An event acknowledged by the broker is found in the store by the
# source_event_id it was produced with. The store's view (psql) and the API's (/v1/stats,
# /v1/deliveries) are cross-checked. Writes $RESULTS/soak-latest.md, prints one summary
# line, and exits 1 when an acknowledged event was lost or outboxd exited in a way the
# soak did not cause.
#
# Everything listens on 127.0.0.1 only; everything is stopped at the end (also on Ctrl-C).
# The work directory (logs, id lists) is kept when something was lost, or with KEEP=1.
set -euo pipefail
cd "$(dirname "$0")/.."

SOAK_MINUTES=${SOAK_MINUTES:-10}
RATE=${RATE:-100}                 # events/s offered in all (each load generator: half)
KILL_EVERY=${KILL_EVERY:-25}      # mean s between SIGKILLs (uniform in 0.4x..1.6x)
PG_EVERY=${PG_EVERY:-}            # mean s between PostgreSQL restarts (SOAK/8, 30..240 s)
BROKER_EVERY=${BROKER_EVERY:-}    # mean s between broker restarts (half that, at least 30 s;
                                  # each also waits KAFKA_SETTLE s after a SIGKILL)
KAFKA_RATE=${KAFKA_RATE:-20}      # events/s produced to the Kafka intake topic
KAFKA_BATCH=${KAFKA_BATCH:-10}    # events per kcat run: acknowledged together or not at all
BROKERS=${BROKERS:-3}             # brokers of the mock cluster
PARTITIONS=${PARTITIONS:-6}       # partitions of the intake topic
CHAOS_EVERY=${CHAOS_EVERY:-30}    # mean s between changes of a subscriber's profile
LEASE=${LEASE:-30s}               # outboxd lease: a killed instance's work returns after it
DRAIN_SECONDS=${DRAIN_SECONDS:-900}
BUILD=${BUILD:-build-soak}
RESULTS=${RESULTS:-bench/results}
SEED=${SEED:-$(( $(date +%s) % 32768 ))}
KEEP=${KEEP:-0}

SOAK_SECONDS=$(awk -v m="$SOAK_MINUTES" 'BEGIN { s = int(m * 60 + 0.5); print (s < 30 ? 30 : s) }')
[ -n "$PG_EVERY" ] || PG_EVERY=$(( SOAK_SECONDS / 8 < 30 ? 30 : (SOAK_SECONDS / 8 > 240 ? 240 : SOAK_SECONDS / 8) ))
[ -n "$BROKER_EVERY" ] || BROKER_EVERY=$(( PG_EVERY / 2 < 30 ? 30 : PG_EVERY / 2 ))
TOKEN=soak

log() { printf '[soak %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 2; }
now_ms() { date +%s%3N; }

# ---- build --------------------------------------------------------------------------------
log "building Release binaries in $BUILD"
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target outboxd test_receiver bench_loadgen kafka_mock >/dev/null
command -v kcat >/dev/null || die "no kcat (scripts/deps.sh installs it)"
COMMIT=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- src tests/support bench 2>/dev/null || COMMIT="$COMMIT+dirty"

# ---- work area and teardown ---------------------------------------------------------------
work=$(mktemp -d /tmp/outboxd-soak-XXXXXX)
chmod 711 "$work"                    # the PostgreSQL user must reach its directory
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -x "$PGBIN/initdb" ] || die "no PostgreSQL server binaries under /usr/lib/postgresql (scripts/deps.sh)"
PGUSER_OS=nobody
id outboxd-test >/dev/null 2>&1 && PGUSER_OS=outboxd-test
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u "$PGUSER_OS" -- "$@"; else "$@"; fi; }
pg_dir=$work/pg
pg_data=$pg_dir/data
mkdir -p "$pg_dir"
[ "$(id -u)" -eq 0 ] && chown "$PGUSER_OS" "$pg_dir"

bg_pids=()          # loops and servers started here, stopped in cleanup
kafka_pid=""        # the mock cluster, stopped last
keep_work=$KEEP
cleanup() {
  local p
  set +e
  touch "$work/stop-chaos" "$work/stop-supervisors"
  for p in "${loadgen_pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  for name in A B C; do
    [ -f "$work/outboxd-$name.pid" ] && kill "$(cat "$work/outboxd-$name.pid")" 2>/dev/null
  done
  for p in "${bg_pids[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  for p in "${bg_pids[@]:-}" "${loadgen_pids[@]:-}"; do [ -n "$p" ] && wait "$p" 2>/dev/null; done
  for name in A B C; do   # a supervisor killed between its start and its pid file
    [ -f "$work/outboxd-$name.pid" ] && kill -9 "$(cat "$work/outboxd-$name.pid")" 2>/dev/null
  done
  if [ -n "$kafka_pid" ]; then   # the mock cluster exits on "quit"
    mock_cmd quit
    for _ in $(seq 20); do kill -0 "$kafka_pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$kafka_pid" 2>/dev/null
    wait "$kafka_pid" 2>/dev/null
  fi
  if [ -f "$pg_data/postmaster.pid" ]; then
    as_pg "$PGBIN/pg_ctl" -D "$pg_data" -m fast -w stop >/dev/null 2>&1
  fi
  if [ "$keep_work" = 1 ]; then log "work directory kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# A port nobody listens on, below the ephemeral range (no outgoing connection takes it).
read -r EPHEMERAL_LO _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || EPHEMERAL_LO=32768
PORT_LO=10000; PORT_SPAN=$((EPHEMERAL_LO - PORT_LO))
[ "$PORT_SPAN" -ge 1000 ] || { PORT_LO=20000; PORT_SPAN=10000; }
taken_ports=" "
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((PORT_LO + RANDOM % PORT_SPAN))
    case "$taken_ports" in *" $p "*) continue ;; esac
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
    taken_ports="$taken_ports$p "
    echo "$p"
    return 0
  done
  return 1
}
# Sleeps s seconds (fractions allowed) unless the stop file appears.
nap() {
  local end
  end=$(awk -v n="$(now_ms)" -v s="$1" 'BEGIN { printf "%.0f", n + s * 1000 }')
  while [ "$(now_ms)" -lt "$end" ] && [ ! -e "$work/stop-chaos" ]; do sleep 0.5; done
}
# MEAN x a draw in [0.4, 1.6]: jitter MEAN R, R a $RANDOM drawn by the caller (so that
# each loop's sequence follows from SEED; a subshell's RANDOM would not).
jitter() { awk -v m="$1" -v r="$2" 'BEGIN { printf "%.1f", m * (0.4 + 1.2 * r / 32767) }'; }
stamp() { date -u +%FT%T.%3NZ; }

# ---- PostgreSQL ---------------------------------------------------------------------------
PGPORT=$(free_port) || die "no free port"
PGOPTS="-p $PGPORT -k $pg_dir -c listen_addresses=127.0.0.1 -c max_connections=100"
as_pg "$PGBIN/initdb" -D "$pg_data" -U postgres -A trust -E UTF8 --locale=C --no-sync \
  >"$work/initdb.log" 2>&1 || die "initdb failed: $(tail -3 "$work/initdb.log")"
as_pg "$PGBIN/pg_ctl" -D "$pg_data" -l "$pg_dir/server.log" -w -o "$PGOPTS" start >/dev/null ||
  die "PostgreSQL did not start: $(tail -3 "$pg_dir/server.log")"
pg_sql() { psql -h 127.0.0.1 -p "$PGPORT" -U postgres -v ON_ERROR_STOP=1 -q "$@"; }
pg_sql -d postgres -c "CREATE DATABASE soak" >/dev/null
DSN="postgres://postgres@127.0.0.1:$PGPORT/soak"
PGVERSION=$("$PGBIN/postgres" --version | awk '{print $3}')
log "PostgreSQL $PGVERSION on 127.0.0.1:$PGPORT (fsync=$(pg_sql -d soak -Atc 'show fsync'), synchronous_commit=$(pg_sql -d soak -Atc 'show synchronous_commit'))"

# ---- Kafka --------------------------------------------------------------------------------
# librdkafka's mock cluster keeps every message and committed offset in memory for as long
# as it runs, across the outages below. Its commands (down ID, up ID, quit) go through a
# FIFO held open on fd 8 by this shell and the chaos loops; its answers to kafka.out.
# mock_cmd writes in a subshell: should the mock be gone, the SIGPIPE ends only that.
mock_cmd() { ( echo "$1" >&8 ) 2>/dev/null; }
mkfifo "$work/kafka.in"
"$BUILD/kafka_mock" --brokers "$BROKERS" --topic "soak.in:$PARTITIONS" \
  <"$work/kafka.in" >"$work/kafka.out" 2>"$work/kafka.log" &
kafka_pid=$!
exec 8>"$work/kafka.in"
for _ in $(seq 100); do grep -q '^bootstrap=' "$work/kafka.out" 2>/dev/null && break; sleep 0.05; done
KAFKA=$(sed -n 's/^bootstrap=//p' "$work/kafka.out")
[ -n "$KAFKA" ] || die "the Kafka mock cluster did not start: $(tail -3 "$work/kafka.log")"
log "Kafka mock cluster: $BROKERS brokers at $KAFKA, topic soak.in with $PARTITIONS partitions"

# ---- the subscribers ----------------------------------------------------------------------
RPORT=$(free_port) || die "no free port"
"$BUILD/test_receiver" --port "$RPORT" --no-bodies --acks >"$work/receiver.log" 2>&1 &
bg_pids+=($!)
RX=http://127.0.0.1:$RPORT
for _ in $(seq 100); do curl -sf "$RX/_control/stats" >/dev/null && break; sleep 0.05; done
curl -sf "$RX/_control/stats" >/dev/null || die "the receiver did not start"

# Weights of the outcomes ok, slow, error, throttle, reset, timeout (receiver.c).
profile_weights() {
  case $1 in
    calm)      echo '{"ok":90,"slow":10}' ;;
    flaky)     echo '{"ok":55,"slow":15,"error":10,"throttle":8,"reset":7,"timeout":5}' ;;
    stormy)    echo '{"ok":15,"slow":5,"error":35,"throttle":15,"reset":15,"timeout":15}' ;;
    throttled) echo '{"ok":30,"slow":5,"error":5,"throttle":60}' ;;
    down)      echo '{"error":40,"reset":40,"timeout":20}' ;;
    healthy)   echo '{}' ;;
  esac
}
# Slow answers stay well inside the subscriptions' 2 s timeout; "timeout" answers come
# after every timeout they have (3 s at most), and are 503s anyway.
set_profile() { # PATH PROFILE
  curl -sf -X POST "$RX/_control/chaos" -d "{\"path\":\"$1\",\"weights\":$(profile_weights "$2"),
    \"slow_ms\":[200,1200],\"retry_after_s\":[1,3],\"timeout_ms\":4500}" >/dev/null
}
SUBS=(s1 s2 s3 s4)

# ---- outboxd ------------------------------------------------------------------------------
APORT=$(free_port) || die "no free port"
BPORT=$(free_port) || die "no free port"
CPORT=$(free_port) || die "no free port"
# One key for the three, as every instance on one database needs: a subscription sealed
# by one must open in the others. Through the environment, so no command line shows it.
OUTBOXD_SECRET_KEY=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export OUTBOXD_SECRET_KEY
# supervise NAME PORT [ARGS...]: runs outboxd and starts it again whenever it exits, until
# the stop file appears; every exit is a line in exits.log.
supervise() {
  local name=$1 port=$2 n=0 pid rc
  shift 2
  set +e
  mkdir -p "$work/$name"
  while [ ! -e "$work/stop-supervisors" ]; do
    n=$((n + 1))
    "$BUILD/outboxd" serve --db "$DSN" --listen "127.0.0.1:$port" --admin-token "$TOKEN" \
      --data-dir "$work/$name" --ssrf-allow 127.0.0.0/8 --lease "$LEASE" --log-format json \
      --kafka-brokers "$KAFKA" --kafka-intake soak.in:event --kafka-group soak "$@" \
      2>>"$work/outboxd-$name.log" &
    pid=$!
    echo "$pid" >"$work/outboxd-$name.pid"
    echo "$(stamp) $name start $n pid $pid" >>"$work/starts.log"
    wait "$pid"
    rc=$?
    rm -f "$work/outboxd-$name.pid"
    # The last error it logged says why (nothing for our SIGKILLs).
    echo "$(stamp) $name pid $pid rc $rc $(tail -3 "$work/outboxd-$name.log" |
      jq -rR 'fromjson? | select(.level == "error") | .msg' 2>/dev/null | tail -1)" >>"$work/exits.log"
    # A start refused while PostgreSQL is down exits at once: do not spin.
    [ "$rc" -eq 137 ] || sleep 1
  done
}
wait_ready() { # PORT SECONDS
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    curl -sf "127.0.0.1:$1/readyz" >/dev/null && return 0
    sleep 0.1
  done
  return 1
}
# (bash's "Killed" notices go to supervisor.log)
supervise A "$APORT" 2>>"$work/supervisor.log" &
bg_pids+=($!)
wait_ready "$APORT" 30 || die "outboxd A did not start: $(tail -3 "$work/outboxd-A.log")"
# B keeps a spool: while PostgreSQL is down it acknowledges into it (A answers 503).
supervise B "$BPORT" --spool "$work/B.spool" 2>>"$work/supervisor.log" &
bg_pids+=($!)
wait_ready "$BPORT" 30 || die "outboxd B did not start: $(tail -3 "$work/outboxd-B.log")"
supervise C "$CPORT" 2>>"$work/supervisor.log" &
bg_pids+=($!)
wait_ready "$CPORT" 30 || die "outboxd C did not start: $(tail -3 "$work/outboxd-C.log")"
PORTS=("$APORT" "$BPORT" "$CPORT")
log "outboxd A on 127.0.0.1:$APORT, B (with a spool) on 127.0.0.1:$BPORT, C on 127.0.0.1:$CPORT, lease $LEASE, one secret key, Kafka intake soak.in:event"

api() { # PORT METHOD PATH [BODY]
  curl -sf -m 30 -X "$2" -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
    "127.0.0.1:$1$3" ${4:+-d "$4"}
}
# Every subscription's timeouts (2 s, 3 s) are shorter than the receiver's late answers.
TIMEOUTS='"timeout":"2s"'
api "$APORT" POST /v1/subscriptions "{\"name\":\"s1\",\"event_types\":[\"*\"],
  \"endpoint\":\"$RX/s1\",$TIMEOUTS,\"circuit_breaker\":{\"enabled\":false},
  \"retry\":{\"policy\":\"fixed\",\"interval\":\"2s\",\"max_retries\":0,\"timeout\":\"3s\"}}" >/dev/null
api "$APORT" POST /v1/subscriptions "{\"name\":\"s2\",\"event_types\":[\"*\"],
  \"endpoint\":\"$RX/s2\",$TIMEOUTS,\"secret\":\"generate\",\"circuit_breaker\":{\"enabled\":false},
  \"retry\":{\"policy\":\"exponential\",\"min_delay\":\"1s\",\"max_delay\":\"20s\",\"max_retries\":0,\"timeout\":\"3s\"}}" >/dev/null
api "$APORT" POST /v1/subscriptions "{\"name\":\"s3\",\"event_types\":[\"soak.order\",\"soak.kafka\"],
  \"endpoint\":\"$RX/s3\",$TIMEOUTS,\"retry\":{\"timeout\":\"3s\"}}" >/dev/null
api "$APORT" POST /v1/subscriptions "{\"name\":\"s4\",\"event_types\":[\"*\"],
  \"endpoint\":\"$RX/s4\",$TIMEOUTS,\"max_in_flight\":32,\"circuit_breaker\":{\"enabled\":false},
  \"retry\":{\"policy\":\"linear\",\"interval\":\"1s\",\"max_delay\":\"10s\",\"max_retries\":10,\"timeout\":\"3s\"}}" >/dev/null
# B and C reload the subscriptions on NOTIFY outboxd_subs: the load starts once all see them.
for port in "${PORTS[@]}"; do
  for _ in $(seq 100); do
    [ "$(api "$port" GET /v1/stats | jq '.subscriptions | length')" = 4 ] && break
    sleep 0.1
  done
done
for s in "${SUBS[@]}"; do set_profile "/$s" calm; done

# ---- chaos --------------------------------------------------------------------------------
# SIGKILLs and broker restarts keep apart, for the mock cluster's sake: librdkafka 2.0.2's
# mock names a consumer group member after its memory address and re-creates a member
# that rejoins with an id it has evicted. A member evicted while alive (no request for
# session.timeout.ms, 10 s) that rejoins, once a newcomer got its old address, makes two
# consumers one member, and the mock aborts on an assertion (rdkafka_mock_cgrp.c,
# `!member->resp`). A broker restart evicts live members when it catches the group
# rebalancing, which the mock does for about 20 s after a SIGKILL: 9 s waiting for the
# killed member when its successor joins, its eviction 10 s after its last heartbeat, 9 s
# more (a restart on a settled group makes no rebalance). So a broker restart waits until
# the last SIGKILL is KAFKA_SETTLE s old, and no SIGKILL falls in a broker restart or the
# 5 s after it. chaos.lock orders the two; last-kill and kafka-quiet-until hold the times
# (ms).
KAFKA_SETTLE=${KAFKA_SETTLE:-25}
killer() {
  set +e
  RANDOM=$((SEED + 1))
  local r t pid targets names=(A B C) killed
  while r=$RANDOM; nap "$(jitter "$KILL_EVERY" "$r")"; [ ! -e "$work/stop-chaos" ]; do
    # one of the three, and one time in twenty all of them at once
    r=$((RANDOM % 20))
    if [ "$r" -eq 0 ]; then targets=(A B C); else targets=("${names[r % 3]}"); fi
    killed=0
    while [ "$killed" -eq 0 ] && [ ! -e "$work/stop-chaos" ]; do
      {
        flock 9
        if [ "$(now_ms)" -ge "$(cat "$work/kafka-quiet-until" 2>/dev/null || echo 0)" ]; then
          for t in "${targets[@]}"; do
            pid=$(cat "$work/outboxd-$t.pid" 2>/dev/null)
            if [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = outboxd ] &&
              kill -9 "$pid" 2>/dev/null; then
              echo "$(stamp) SIGKILL $t pid $pid" >>"$work/kills.log"
            fi
          done
          now_ms >"$work/last-kill"
          killed=1
        fi
      } 9>"$work/chaos.lock"
      [ "$killed" -eq 1 ] || sleep 0.5
    done
  done
}
pg_chaos() {
  set +e
  RANDOM=$((SEED + 2))
  local k=0 mode how t0 pause r
  while r=$RANDOM; nap "$(jitter "$PG_EVERY" "$r")"; [ ! -e "$work/stop-chaos" ]; do
    k=$((k + 1))
    if [ $((k % 2)) -eq 1 ]; then mode=immediate; else mode=fast; fi
    t0=$(now_ms)
    if [ $((RANDOM % 2)) -eq 0 ]; then
      how="restart"
      as_pg "$PGBIN/pg_ctl" -D "$pg_data" -l "$pg_dir/server.log" -w -t 120 -m "$mode" \
        -o "$PGOPTS" restart >>"$work/pg_ctl.log" 2>&1
    else
      pause=$((3 + RANDOM % 8))
      how="stop, ${pause} s down, start"
      as_pg "$PGBIN/pg_ctl" -D "$pg_data" -w -t 120 -m "$mode" stop >>"$work/pg_ctl.log" 2>&1
      sleep "$pause"
      as_pg "$PGBIN/pg_ctl" -D "$pg_data" -l "$pg_dir/server.log" -w -t 120 -o "$PGOPTS" \
        start >>"$work/pg_ctl.log" 2>&1
    fi
    echo "$(stamp) PG -m $mode ($how) rc $? took $(( $(now_ms) - t0 )) ms" >>"$work/pg_restarts.log"
  done
}
# Broker restarts: every broker down at once for 3-6 s (clients see refused connections),
# then all back up, with every message and committed offset they had.
broker_chaos() {
  set +e
  RANDOM=$((SEED + 4))
  local pause r t0 b at ok
  while r=$RANDOM; nap "$(jitter "$BROKER_EVERY" "$r")"; [ ! -e "$work/stop-chaos" ]; do
    pause=$((3 + RANDOM % 4))
    # not while the group may still be rebalancing after a SIGKILL (see the killer)
    ok=0
    while [ "$ok" -eq 0 ] && [ ! -e "$work/stop-chaos" ]; do
      {
        flock 9
        if [ $(( $(now_ms) - $(cat "$work/last-kill" 2>/dev/null || echo 0) )) -ge $((KAFKA_SETTLE * 1000)) ]; then
          echo $(( $(now_ms) + (pause + 5) * 1000 )) >"$work/kafka-quiet-until"
          ok=1
        fi
      } 9>"$work/chaos.lock"
      [ "$ok" -eq 1 ] || sleep 0.5
    done
    [ "$ok" -eq 1 ] || break
    t0=$(now_ms)
    at=$(stamp)
    for ((b = 1; b <= BROKERS; b++)); do mock_cmd "down $b"; done
    sleep "$pause"
    for ((b = 1; b <= BROKERS; b++)); do mock_cmd "up $b"; done
    echo "$at brokers 1-$BROKERS down for $pause s (up again after $(( $(now_ms) - t0 )) ms)" >>"$work/broker_restarts.log"
  done
}
# Produces KAFKA_RATE events/s to soak.in in batches of KAFKA_BATCH, one kcat run each, for
# SOAK_SECONDS. Each event is a JSON object as POST /v1/events takes it, with source
# soak-kafka and a source_event_id of its own (also the message key): the store finds it
# by that pair. kcat exits 0 only when the broker acknowledged every message of the run
# (acks=all); a batch is acknowledged then, else none of it (it may be on the topic all
# the same, like an HTTP request whose 202 was lost). A late batch does not catch up.
kafka_producer() {
  set +e
  local n=0 rc t0 next now i first end_ms
  end_ms=$(( $(now_ms) + SOAK_SECONDS * 1000 ))
  next=$(now_ms)
  while [ "$(now_ms)" -lt "$end_ms" ]; do
    first=$((n + 1))
    for ((i = 0; i < KAFKA_BATCH; i++)); do
      n=$((n + 1))
      printf 'k%07d|{"event_type":"soak.kafka","source":"soak-kafka","source_event_id":"k%07d","payload":{"n":%d}}\n' "$n" "$n" "$n"
    done >"$work/kafka-batch.txt"
    t0=$(now_ms)
    timeout 60 kcat -P -b "$KAFKA" -t soak.in -K '|' -X acks=all -X message.timeout.ms=15000 \
      <"$work/kafka-batch.txt" 2>>"$work/kcat.log"
    rc=$?
    echo "$(stamp) k$(printf %07d "$first")..k$(printf %07d "$n") rc $rc $(( $(now_ms) - t0 )) ms" >>"$work/kafka-batches.log"
    if [ "$rc" -eq 0 ]; then
      cut -d'|' -f1 "$work/kafka-batch.txt" >>"$work/kafka-acked.txt"
    else
      cut -d'|' -f1 "$work/kafka-batch.txt" >>"$work/kafka-unacked.txt"
    fi
    next=$((next + KAFKA_BATCH * 1000 / KAFKA_RATE))
    now=$(now_ms)
    if [ "$now" -lt "$next" ]; then sleep "$(awk -v d=$((next - now)) 'BEGIN { printf "%.3f", d / 1000 }')"
    else next=$now; fi
  done
}
rx_chaos() {
  set +e
  RANDOM=$((SEED + 3))
  local s r p
  while r=$RANDOM; nap "$(jitter "$CHAOS_EVERY" "$r")"; [ ! -e "$work/stop-chaos" ]; do
    for s in "${SUBS[@]}"; do
      r=$((RANDOM % 100))
      if [ "$r" -lt 20 ]; then p=calm; elif [ "$r" -lt 55 ]; then p=flaky
      elif [ "$r" -lt 75 ]; then p=stormy; elif [ "$r" -lt 90 ]; then p=throttled; else p=down; fi
      set_profile "/$s" "$p" && echo "$(stamp) /$s $p" >>"$work/profiles.log"
    done
  done
}

log "chaos for $SOAK_SECONDS s: $RATE events/s over HTTP and $KAFKA_RATE/s over Kafka, a SIGKILL every ~$KILL_EVERY s, a PostgreSQL restart every ~$PG_EVERY s, a broker restart every ~$BROKER_EVERY s, subscriber profiles every ~$CHAOS_EVERY s (seed $SEED)"
T_START=$(date +%s)
START_ISO=$(stamp)
loadgen_pids=()
"$BUILD/bench_loadgen" rate --url "http://127.0.0.1:$APORT/v1/events" --token "$TOKEN" \
  --rate "$(awk -v r="$RATE" 'BEGIN { print r / 2 }')" --duration "$SOAK_SECONDS" --batch 1 \
  --conns 8 --event-type soak.order --out "$work/acked-A.txt" >"$work/loadgen-A.json" 2>"$work/loadgen-A.err" &
loadgen_pids+=($!)
"$BUILD/bench_loadgen" rate --url "http://127.0.0.1:$BPORT/v1/events" --token "$TOKEN" \
  --rate "$(awk -v r="$RATE" 'BEGIN { print r / 2 }')" --duration "$SOAK_SECONDS" --batch 5 \
  --conns 8 --event-type soak.user --out "$work/acked-B.txt" >"$work/loadgen-B.json" 2>"$work/loadgen-B.err" &
loadgen_pids+=($!)
: >"$work/kafka-acked.txt"; : >"$work/kafka-unacked.txt"; : >"$work/kafka-batches.log"
kafka_producer &
loadgen_pids+=($!)
: >"$work/kills.log"; : >"$work/pg_restarts.log"; : >"$work/profiles.log"; : >"$work/exits.log"
: >"$work/broker_restarts.log"
killer & bg_pids+=($!)
pg_chaos & bg_pids+=($!)
broker_chaos & bg_pids+=($!)
rx_chaos & bg_pids+=($!)

# Progress once a minute, until the load generators are done.
while :; do
  alive=0
  for p in "${loadgen_pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
  [ "$alive" -eq 1 ] || break
  if ! kill -0 "$kafka_pid" 2>/dev/null; then
    keep_work=1
    die "the Kafka mock cluster exited, and what its topic held with it: $(tail -3 "$work/kafka.log")"
  fi
  el=$(( $(date +%s) - T_START ))
  if [ $((el % 60)) -eq 0 ] && [ "$el" -gt 0 ]; then
    backlog=$(api "$APORT" GET /v1/stats 2>/dev/null | jq -r '"NEW \(.deliveries.NEW), retrying \(.deliveries.FAILED_RETRYING), dead \(.deliveries.FAILED_DEAD)"' 2>/dev/null) ||
      backlog="stats unavailable"
    log "$((el / 60)) min: $(wc -l <"$work/kills.log") kills, $(wc -l <"$work/pg_restarts.log") PostgreSQL restarts, $(wc -l <"$work/broker_restarts.log") broker restarts; $(wc -l <"$work/kafka-acked.txt") Kafka events acknowledged; $backlog; load $(cut -d' ' -f1 /proc/loadavg)"
  fi
  sleep 1
done
for p in "${loadgen_pids[@]}"; do wait "$p" 2>/dev/null || true; done
loadgen_pids=()
T_CHAOS_END=$(date +%s)

# ---- the end: stop the chaos, heal, replay, drain -----------------------------------------
touch "$work/stop-chaos"
n=${#bg_pids[@]}
for p in "${bg_pids[@]:$((n - 4))}"; do wait "$p" 2>/dev/null || true; done
bg_pids=("${bg_pids[@]:0:$((n - 4))}")
KILLS=$(wc -l <"$work/kills.log")
PG_RESTARTS=$(wc -l <"$work/pg_restarts.log")
BROKER_RESTARTS=$(wc -l <"$work/broker_restarts.log")
log "chaos over: $KILLS kills, $PG_RESTARTS PostgreSQL restarts, $BROKER_RESTARTS broker restarts; healing and draining"
kill -0 "$kafka_pid" 2>/dev/null || { keep_work=1; die "the Kafka mock cluster exited: $(tail -3 "$work/kafka.log")"; }
as_pg "$PGBIN/pg_ctl" -D "$pg_data" status >/dev/null 2>&1 ||
  as_pg "$PGBIN/pg_ctl" -D "$pg_data" -l "$pg_dir/server.log" -w -o "$PGOPTS" start >/dev/null
for s in "${SUBS[@]}"; do set_profile "/$s" healthy; done
wait_ready "$APORT" 60 || log "warning: outboxd A is not ready"
wait_ready "$BPORT" 60 || log "warning: outboxd B is not ready"
wait_ready "$CPORT" 60 || log "warning: outboxd C is not ready"

# What the topic holds now that nobody produces: every message's key (its source_event_id),
# read back from the brokers. Each must become an event in the store, acknowledged or not.
read_topic() {
  timeout 120 kcat -C -b "$KAFKA" -t soak.in -o beginning -e -q -f '%k\n' 2>>"$work/kcat.log" |
    sort -u >"$work/kafka-topic.txt"
}
read_topic || { sleep 5; read_topic; } || die "cannot read soak.in back: $(tail -3 "$work/kcat.log")"
KAFKA_ON_TOPIC=$(wc -l <"$work/kafka-topic.txt")
# Prints how many of the topic's events the store does not hold (yet).
kafka_unstored() {
  pg_sql -d soak -At -c "SELECT source_event_id FROM outboxd.events WHERE source = 'soak-kafka'" |
    sort -u | comm -23 "$work/kafka-topic.txt" - | wc -l
}

# Dead letters left by the chaos, by subscription, before any replay.
dead_by_sub() {
  pg_sql -d soak -AtF ' ' -c "SELECT s.name, count(*) FROM outboxd.deliveries d
    JOIN outboxd.subscriptions s ON s.id = d.subscription_id
    WHERE d.status = 'FAILED' AND d.next_attempt_at IS NULL GROUP BY s.name ORDER BY 1"
}
dead_by_sub >"$work/dead-at-chaos-end.txt"
stat_field() { jq -r "$1" <<<"$STATS"; }
T_DRAIN=$(date +%s)
replays=0; replayed=0; job=""; drained=0
while [ $(( $(date +%s) - T_DRAIN )) -lt "$DRAIN_SECONDS" ]; do
  STATS=$(api "$APORT" GET /v1/stats) || { sleep 2; continue; }
  new=$(stat_field .deliveries.NEW); retrying=$(stat_field .deliveries.FAILED_RETRYING)
  dead=$(stat_field .deliveries.FAILED_DEAD); inflight=$(stat_field .in_flight)
  running=0
  if [ -n "$job" ]; then
    state=$(api "$APORT" GET "/v1/jobs/$job" | jq -r .state) || state=running
    [ "$state" = running ] && running=1
  fi
  # The dead-letter queue is replayed through the API, as an operator would, once every
  # circuit breaker is closed again in every instance (an open one stays open for its
  # failure_window and dead-letters what it delays too often: replaying into it would
  # only feed it). A delivery that dies again is replayed again.
  open=0
  for port in "${PORTS[@]}"; do
    n=$(api "$port" GET /v1/stats | jq '[.subscriptions[] | select(.circuit != "closed")] | length') || n=1
    open=$((open + n))
  done
  if [ "$dead" -gt 0 ] && [ "$running" -eq 0 ] && [ "$open" -eq 0 ] && [ "$replays" -lt 100 ]; then
    out=$(api "$APORT" POST /v1/dlq/replay '{"filter":{}}') || out='{}'
    job=$(jq -r '.job_id // empty' <<<"$out")
    m=$(jq -r '.matched // 0' <<<"$out")
    replays=$((replays + 1)); replayed=$((replayed + m))
    log "drain: DLQ replay $replays: $m deliveries (job ${job:-none})"
    running=1
  fi
  # The intake may still be reading (a killed member's partitions wait out its session).
  unstored=$(kafka_unstored) || unstored="?"
  if [ "$new" -eq 0 ] && [ "$retrying" -eq 0 ] && [ "$inflight" -eq 0 ] && [ "$dead" -eq 0 ] &&
    [ "$running" -eq 0 ] && [ "$unstored" = 0 ]; then
    drained=1
    break
  fi
  log "drain: NEW $new, retrying $retrying, in flight $inflight, dead $dead, open circuits $open, Kafka events not stored yet $unstored"
  sleep 5
done
T_END=$(date +%s)
DRAIN_TOOK=$((T_END - T_DRAIN))
[ "$drained" -eq 1 ] && log "drained in $DRAIN_TOOK s" || log "drain: gave up after $DRAIN_TOOK s"

# ---- accounting ---------------------------------------------------------------------------
for s in "${SUBS[@]}"; do
  curl -sf "$RX/_control/acks?path=/$s" | sed "s/^/$s /" >>"$work/acks.txt"
  curl -sf "$RX/_control/chaos?path=/$s" >"$work/chaos-$s.json"
done
# events.txt: id, type, source ("-" for none), source_event_id ("-"); deliveries.txt: event
# id, subscription, status (DEAD: failed for good), attempt_count, leased, and how many
# requests the attempt history holds (an attempt whose cause says its request was written
# again on a new connection, the kept-alive one having closed before an answer, made two).
pg_sql -d soak -AtF ' ' -c "SELECT id, event_type, COALESCE(NULLIF(source, ''), '-'),
    COALESCE(source_event_id, '-') FROM outboxd.events" >"$work/events.txt"
pg_sql -d soak -AtF ' ' -c "SELECT d.event_id, s.name,
    CASE WHEN d.status = 'FAILED' AND d.next_attempt_at IS NULL THEN 'DEAD' ELSE d.status END,
    d.attempt_count,
    EXISTS (SELECT 1 FROM outboxd.queue q WHERE q.id = d.id AND q.lease_owner IS NOT NULL),
    (SELECT count(*) + count(*) FILTER (WHERE a.cause LIKE
       '%request was written again on a new connection%')
     FROM outboxd.attempts a WHERE a.delivery_id = d.id)
  FROM outboxd.deliveries d JOIN outboxd.subscriptions s ON s.id = d.subscription_id" \
  >"$work/deliveries.txt"
# acked.txt: one line per acknowledged event: its id, type and way in. A Kafka event's id
# is the one the store gave the event with its source_event_id; one the store does not
# have is "kafka:SOURCE_EVENT_ID" (no event row: lost).
sed 's/$/ soak.order/' "$work/acked-A.txt" | awk '{print $1, $5, "http"}' >"$work/acked.txt"
sed 's/$/ soak.user/' "$work/acked-B.txt" | awk '{print $1, $5, "http"}' >>"$work/acked.txt"
awk 'FILENAME ~ /events.txt$/ { if ($3 == "soak-kafka") id[$4] = $1; next }
  { print ($1 in id ? id[$1] : "kafka:" $1), "soak.kafka", "kafka" }' \
  "$work/events.txt" "$work/kafka-acked.txt" >>"$work/acked.txt"

# One line per (acknowledged event, subscription that wants it): its verdict.
#   delivered  the subscription's receiver answered it with a 2xx (dup: more than once)
#   pending    not delivered yet: NEW, or FAILED with a retry scheduled (or leased)
#   dlq        dead-lettered (FAILED, no next attempt)
#   lost       none of these: no event row, no delivery row, or PROCESSED in the store
#              without a 2xx at the receiver
# And for the delivered ones, whether the receiver answered more 2xx than the attempt
# history holds requests (a request outboxd made but never recorded: a SIGKILL between
# the answer and its write).
awk -v out="$work/verdicts.txt" -v unrec="$work/unrecorded.txt" '
  FILENAME ~ /events.txt$/     { ev[$1] = 1; next }
  FILENAME ~ /deliveries.txt$/ { st[$1 " " $2] = $3; rec[$1 " " $2] = $6; next }
  FILENAME ~ /acks.txt$/       { got[$2 " " $1] = $3; next }
  {
    id = $1; type = $2; via = $3
    if (seen[id]++) { dup_acked++; next }
    acked++; acked_via[via]++
    n = split(type == "soak.user" ? "s1 s2 s4" : "s1 s2 s3 s4", subs, " ")
    for (i = 1; i <= n; i++) {
      k = id " " subs[i]; pairs++; per[subs[i]]++; pv[via]++
      if (k in got) {
        v = got[k] > 1 ? "duplicated" : "delivered"
        extra[subs[i]] += got[k] - 1; xv[via] += got[k] - 1
        if (got[k] > rec[k] + 0) {
          u_pairs++; u_extra += got[k] - rec[k]
          print k, got[k], rec[k] + 0 > unrec
        }
      } else if (!(id in ev)) v = "lost:no-event-row"
      else if (!(k in st)) v = "lost:no-delivery-row"
      else if (st[k] == "DEAD") v = "dlq"
      else if (st[k] == "PROCESSED") v = "lost:processed-without-2xx"
      else v = "pending:" st[k]
      print k, v, via > out
      split(v, w, ":"); c[subs[i] " " w[1]]++; t[w[1]]++; cv[via " " w[1]]++
    }
  }
  END {
    printf "acked %d\nacked_repeated %d\npairs %d\n", acked, dup_acked, pairs
    printf "unrecorded %d %d\n", u_pairs, u_extra
    split("delivered duplicated pending dlq lost", kinds, " ")
    for (j = 1; j <= 5; j++) printf "total %s %d\n", kinds[j], t[kinds[j]]
    split("s1 s2 s3 s4", S, " ")
    for (i = 1; i <= 4; i++) {
      printf "sub %s %d", S[i], per[S[i]]
      for (j = 1; j <= 5; j++) printf " %d", c[S[i] " " kinds[j]]
      printf " %d\n", extra[S[i]]
    }
    split("http kafka", V, " ")
    for (i = 1; i <= 2; i++) {
      printf "via %s %d %d", V[i], acked_via[V[i]], pv[V[i]]
      for (j = 1; j <= 5; j++) printf " %d", cv[V[i] " " kinds[j]]
      printf " %d\n", xv[V[i]]
    }
  }' "$work/events.txt" "$work/deliveries.txt" "$work/acks.txt" "$work/acked.txt" \
  >"$work/accounting.txt"
acct() { awk -v k="$1" -v f="${2:-}" '$1 == k && (f == "" || $2 == f) { print $NF }' "$work/accounting.txt"; }
# via ORIGIN FIELD: acked, pairs, delivered, duplicated, pending, dlq, lost, extra
via() { awk -v o="$1" -v f="$2" '$1 == "via" && $2 == o { print $(f + 2) }' "$work/accounting.txt"; }
ACKED=$(acct acked); PAIRS=$(acct pairs)
DELIVERED=$(acct total delivered); DUPLICATED=$(acct total duplicated)
PENDING=$(acct total pending); DLQ=$(acct total dlq); LOST=$(acct total lost)
EXTRA=$(awk '$1 == "sub" { s += $NF } END { print s + 0 }' "$work/accounting.txt")
read -r UNREC_PAIRS UNREC_EXTRA < <(awk '$1 == "unrecorded" { print $2, $3 }' "$work/accounting.txt")
ACKED_HTTP=$(via http 1); ACKED_KAFKA=$(via kafka 1)
STORED_EVENTS=$(wc -l <"$work/events.txt")
# Stored but never acknowledged to the client, by way in.
read -r UNACKED_STORED KAFKA_UNACKED_STORED < <(awk '
  FILENAME ~ /kafka-acked.txt$/ { k[$1] = 1; next }
  FILENAME ~ /acked.txt$/ { a[$1] = 1; next }
  $3 == "soak-kafka" { if (!($4 in k)) kn++; next }
  !($1 in a) { n++ }
  END { print n + 0, kn + 0 }' "$work/kafka-acked.txt" "$work/acked.txt" "$work/events.txt")
RX_2XX=$(awk '{ s += $3 } END { print s + 0 }' "$work/acks.txt")
# Why the attempt history misses a request the receiver answered with a 2xx:
#   killed    a SIGKILL falls between the event's creation and the first request the
#             history records: the killed instance never wrote its round's attempts (its
#             lease expired, another instance sent again);
#   replayed  the first request recorded was written by an instance started after it
#             was sent: B's spool kept the round of a killed B, and its successor replayed
#             it after the lease had gone elsewhere. Those attempts are recorded as a lost
#             lease's (after the delivery's last one), but the delivery's attempt_count
#             stays, so the next round numbers its tries from there again and the store
#             drops the one whose number is taken (outboxd.attempts: ON CONFLICT (delivery_id,
#             n) DO NOTHING): the history misses the later request;
#   NO-KILL   neither.
# unrecorded-times.txt: event, subscription, created, first recorded request (ms, 0 for
# none), requests recorded, the delivery's status, the event's source, the instance that
# recorded the first request, and the reason.
UNREC_KILLED=0; UNREC_REPLAYED=0
if [ -s "$work/unrecorded.txt" ]; then
  pairs=$(awk '{ printf "%s(\x27%s\x27,\x27%s\x27)", (NR > 1 ? "," : ""), $1, $2 }' "$work/unrecorded.txt")
  while read -r at _; do date -d "$at" +%s%3N; done <"$work/kills.log" >"$work/kill-times.txt"
  # the start of every outboxd process: "pid ms"
  awk '{ print $6, $1 }' "$work/starts.log" | while read -r pid at; do echo "$pid $(date -d "$at" +%s%3N)"; done \
    >"$work/start-times.txt"
  pg_sql -d soak -AtF ' ' -c "SELECT d.event_id, s.name, e.created_at,
      COALESCE(min(a.started_at), 0), count(a.n), d.status, COALESCE(NULLIF(e.source, ''), '-'),
      COALESCE((array_agg(a.instance ORDER BY a.started_at))[1], '-')
    FROM outboxd.deliveries d JOIN outboxd.subscriptions s ON s.id = d.subscription_id
    JOIN outboxd.events e ON e.id = d.event_id LEFT JOIN outboxd.attempts a ON a.delivery_id = d.id
    WHERE (d.event_id, s.name) IN ($pairs) GROUP BY d.event_id, s.name, e.created_at, d.status, e.source" |
    awk 'FILENAME ~ /kill-times.txt$/ { k[++n] = $1; next }
      FILENAME ~ /start-times.txt$/ { started[$1] = $2; next }
      {
        y = 0; for (i = 1; i <= n; i++) if (k[i] >= $3 && k[i] <= $4) y = 1
        pid = $8; sub(/.*:/, "", pid)
        why = y ? "killed" : ((pid in started) && started[pid] > $4 ? "replayed" : "NO-KILL")
        print $0, why
      }' "$work/kill-times.txt" "$work/start-times.txt" - >"$work/unrecorded-times.txt"
  UNREC_KILLED=$(grep -c ' killed$' "$work/unrecorded-times.txt" || true)
  UNREC_REPLAYED=$(grep -c ' replayed$' "$work/unrecorded-times.txt" || true)
fi

# ---- the API's view -----------------------------------------------------------------------
STATS=$(api "$APORT" GET /v1/stats || echo '{}')
read -r DB_NEW DB_PROCESSED DB_RETRYING DB_DEAD < <(awk '
  $3 == "NEW" { n++ } $3 == "PROCESSED" { p++ } $3 == "FAILED" { r++ } $3 == "DEAD" { d++ }
  END { print n + 0, p + 0, r + 0, d + 0 }' "$work/deliveries.txt")
API_COUNTS=$(jq -r '[.deliveries.NEW, .deliveries.PROCESSED, .deliveries.FAILED_RETRYING, .deliveries.FAILED_DEAD] | map(tostring) | join(" ")' <<<"$STATS" 2>/dev/null || echo "? ? ? ?")
DB_COUNTS="$DB_NEW $DB_PROCESSED $DB_RETRYING $DB_DEAD"
# Every delivery of s1 (all events), paged through GET /v1/deliveries, against the store.
cursor=""; : >"$work/api-s1.txt"
while :; do
  page=$(api "$APORT" GET "/v1/deliveries?name=s1&limit=1000${cursor:+&cursor=$cursor}") || { echo "api error" >>"$work/api-s1.txt"; break; }
  jq -r '.items[] | "\(.event_id) \(if .dead then "DEAD" else .status end)"' <<<"$page" >>"$work/api-s1.txt"
  cursor=$(jq -r '.next_cursor // empty' <<<"$page")
  [ -n "$cursor" ] || break
done
API_S1_DIFF=$(awk '$2 == "s1" { print $1, $3 }' "$work/deliveries.txt" | sort | diff - <(sort "$work/api-s1.txt") | grep -c '^[<>]' || true)
API_S1_N=$(wc -l <"$work/api-s1.txt")
# The deliveries the API lists as not PROCESSED, and the store's.
API_OPEN=0
for st in NEW FAILED; do
  n=$(api "$APORT" GET "/v1/deliveries?status=$st&limit=1000" | jq '.items | length') || n="?"
  API_OPEN=$((API_OPEN + ${n/\?/0}))
done
# Evidence for every pair not delivered: the API's view of its event's deliveries.
grep -v -E ' (delivered|duplicated) ' "$work/verdicts.txt" >"$work/undelivered.txt" || true
head -20 "$work/undelivered.txt" | while read -r id sub verdict via; do
  echo "== $id $sub $verdict ($via)"
  api "$APORT" GET "/v1/deliveries?event_id=$id" | jq -c '.items[] | {subscription_id, status, dead, attempt_count, last_error, in_flight}'
done >"$work/undelivered-api.txt" 2>&1 || true

# ---- outboxd exits ------------------------------------------------------------------------
# Exits other than our SIGKILLs: a start refused while PostgreSQL was down exits 1 with
# "cannot open the store" (or "cannot load subscriptions") as its last error; anything
# else is unexpected, and so are more SIGKILLs than the killer sent.
EXITS=$(wc -l <"$work/exits.log")
EXIT_KILLED=$(awk '$6 == 137' "$work/exits.log" | wc -l)
STORE_REFUSED=$(awk '$6 == 1 && /cannot open the store|cannot load subscriptions/' "$work/exits.log" | wc -l)
awk '$6 != 137 && !($6 == 1 && /cannot open the store|cannot load subscriptions/)' \
  "$work/exits.log" >"$work/exits-unexpected.log"
UNEXPECTED=$(wc -l <"$work/exits-unexpected.log")
[ "$EXIT_KILLED" -le "$KILLS" ] || UNEXPECTED=$((UNEXPECTED + EXIT_KILLED - KILLS))
ERROR_LINES=$(cat "$work"/outboxd-*.log | jq -rR 'fromjson? | select(.level == "error") | .msg' 2>/dev/null |
  sed -E 's/[0-9a-f]{8}-[0-9a-f-]{27}/<id>/g; s/[0-9]+/N/g' | sort | uniq -c | sort -rn | head -8)

# B's spool: outages it drained, and the events it replayed into the store (each one
# acknowledged with a 202 while PostgreSQL was away).
SPOOL=$(jq -rR 'fromjson? | .msg | select(startswith("spool: drained "))' "$work/outboxd-B.log" 2>/dev/null |
  sed -nE 's/.*: ([0-9]+) records, ([0-9]+) events replayed into the store \(([0-9]+) already stored\), ([0-9]+) delivery results.*/\2 \3 \4/p' |
  awk '{ n++; e += $1; d += $2; r += $3 } END { printf "%d drains, %d events replayed into the store (%d already stored), %d delivery results", n, e, d, r }')

# ---- the load generators ------------------------------------------------------------------
lg() { jq -r "$1 // 0" "$work/loadgen-$2.json" 2>/dev/null || echo 0; }
SENT=$(( $(lg .events A) + $(lg .events B) ))
OUTCOMES=$(jq -s -r 'map(.outcomes) | reduce .[] as $o ({}; reduce ($o | to_entries[]) as $e (.; .[$e.key] += $e.value)) | to_entries | sort_by(-.value) | map("\(.key): \(.value)") | join(", ")' \
  "$work/loadgen-A.json" "$work/loadgen-B.json" 2>/dev/null || echo "?")
NOT_ACKED=$((SENT - ACKED_HTTP))
# Kafka: what the producer sent and the broker acknowledged, what the topic holds, what the
# store made of it.
KAFKA_ACKED=$(wc -l <"$work/kafka-acked.txt")
KAFKA_PRODUCED=$((KAFKA_ACKED + $(wc -l <"$work/kafka-unacked.txt")))
KAFKA_BATCHES=$(wc -l <"$work/kafka-batches.log")
KAFKA_BATCHES_FAILED=$(awk '$4 != 0' "$work/kafka-batches.log" | wc -l)
KAFKA_ACKED_OFF_TOPIC=$(sort -u "$work/kafka-acked.txt" | comm -23 - "$work/kafka-topic.txt" | wc -l)
KAFKA_STORED=$(awk '$3 == "soak-kafka"' "$work/events.txt" | wc -l)
KAFKA_TOPIC_UNSTORED=$(awk '$3 == "soak-kafka" { print $4 }' "$work/events.txt" | sort -u |
  comm -23 "$work/kafka-topic.txt" - | wc -l)
CHAOS_DRAWN=$(for s in "${SUBS[@]}"; do jq -r --arg s "$s" '"\($s): " + (.drawn | to_entries | map("\(.key) \(.value)") | join(", "))' "$work/chaos-$s.json"; done)
PG_MODES=$(awk '{ print $4 }' "$work/pg_restarts.log" | sort | uniq -c | awk '{ printf "%s%s %s", (NR > 1 ? ", " : ""), $1, $2 }')

# ---- report -------------------------------------------------------------------------------
mkdir -p "$RESULTS"
report=$RESULTS/soak-latest.md
fmt() { printf "%'d" "$1" 2>/dev/null || echo "$1"; }
{
  echo "# outboxd chaos soak — latest run"
  echo
  echo "Command: \`SOAK_MINUTES=$SOAK_MINUTES make soak\` (RATE=$RATE, KAFKA_RATE=$KAFKA_RATE, KAFKA_BATCH=$KAFKA_BATCH, KILL_EVERY=$KILL_EVERY, PG_EVERY=$PG_EVERY, BROKER_EVERY=$BROKER_EVERY, KAFKA_SETTLE=$KAFKA_SETTLE, CHAOS_EVERY=$CHAOS_EVERY, LEASE=$LEASE, SEED=$SEED)  "
  echo "Commit: $COMMIT · started $START_ISO · chaos $((T_CHAOS_END - T_START)) s, drain $DRAIN_TOOK s$([ "$drained" -eq 1 ] || echo ' (gave up: not drained)')  "
  echo "Machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end; PostgreSQL $PGVERSION (fsync on, synchronous_commit on); 3 outboxd instances sharing one secret key (B with a spool), the Kafka intake on in each (soak.in:event, $PARTITIONS partitions, librdkafka's mock cluster with $BROKERS brokers); Release build"
  echo
  echo "| | |"
  echo "|---|--:|"
  echo "| minutes of chaos | $SOAK_MINUTES |"
  echo "| SIGKILLs of outboxd | $KILLS |"
  echo "| PostgreSQL restarts | $PG_RESTARTS ($PG_MODES) |"
  echo "| broker restarts (all $BROKERS brokers down for 3–6 s, then up with their data) | $BROKER_RESTARTS |"
  echo "| HTTP: events sent / acknowledged (202) | $(fmt "$SENT") / $(fmt "$ACKED_HTTP") |"
  echo "| HTTP: not acknowledged (503, refused, reset) | $(fmt "$NOT_ACKED") |"
  echo "| Kafka: events produced / acknowledged by the broker | $(fmt "$KAFKA_PRODUCED") / $(fmt "$KAFKA_ACKED") |"
  echo "| Kafka: not acknowledged (kcat runs that failed: $KAFKA_BATCHES_FAILED of $KAFKA_BATCHES) | $(fmt $((KAFKA_PRODUCED - KAFKA_ACKED))) |"
  echo "| deliveries expected (acknowledged event × subscription) | $(fmt "$PAIRS") (HTTP $(fmt "$(via http 2)"), Kafka $(fmt "$(via kafka 2)")) |"
  echo "| delivered (2xx at the receiver) | $(fmt $((DELIVERED + DUPLICATED))) |"
  echo "| … of which delivered more than once | $(fmt "$DUPLICATED") ($(fmt "$EXTRA") extra 2xx) |"
  echo "| still pending after the drain | $(fmt "$PENDING") |"
  echo "| in the DLQ after the drain | $(fmt "$DLQ") |"
  echo "| **lost** | **$(fmt "$LOST")** |"
  echo
  echo "| way in | acknowledged | expected | delivered | dup | pending | DLQ | lost | extra 2xx |"
  echo "|---|--:|--:|--:|--:|--:|--:|--:|--:|"
  awk '$1 == "via" { printf "| %s | %d | %d | %d | %d | %d | %d | %d | %d |\n", ($2 == "http" ? "HTTP `POST /v1/events`" : "Kafka `soak.in`"), $3, $4, $5 + $6, $6, $7, $8, $9, $10 }' \
    "$work/accounting.txt"
  echo
  echo "| subscription | retry | expected | delivered | dup | pending | DLQ | lost | extra 2xx | dead-lettered during chaos |"
  echo "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|"
  for s in "${SUBS[@]}"; do
    case $s in
      s1) r="fixed 2 s, forever" ;; s2) r="exponential 1–20 s, forever, signed" ;;
      s3) r="defaults (3+3, then DLQ), breaker on; soak.order and soak.kafka" ;; s4) r="linear 1–10 s, 10 retries (the most linear takes), then DLQ, max 32 in flight" ;;
    esac
    awk -v s="$s" -v r="$r" -v d="$(awk -v s="$s" '$1 == s { print $2 }' "$work/dead-at-chaos-end.txt")" \
      '$1 == "sub" && $2 == s { printf "| %s | %s | %d | %d | %d | %d | %d | %d | %d | %d |\n", s, r, $3, $4 + $5, $5, $6, $7, $8, $9, d }' \
      "$work/accounting.txt"
  done
  echo
  echo "Cross-checks:"
  echo
  echo "- store (psql) NEW/PROCESSED/retrying/dead: $DB_COUNTS; \`GET /v1/stats\`: $API_COUNTS"
  echo "- \`GET /v1/deliveries?name=s1\` paged: $API_S1_N deliveries, $API_S1_DIFF lines differ from the store's"
  echo "- \`GET /v1/deliveries?status=NEW|FAILED\`: $API_OPEN open deliveries listed"
  echo "- events stored: $(fmt "$STORED_EVENTS"); over HTTP but never acknowledged to the client (committed, but the answer was lost: a SIGKILL or a reset mid-request): $(fmt "$UNACKED_STORED")"
  echo "- Kafka: $(fmt "$KAFKA_ON_TOPIC") events on soak.in at the end (read back by key), $(fmt "$KAFKA_STORED") stored, $(fmt "$KAFKA_TOPIC_UNSTORED") on the topic but not stored; $(fmt "$KAFKA_UNACKED_STORED") stored without the broker's acknowledgement to the producer (a kcat run that failed part way); $(fmt "$KAFKA_ACKED_OFF_TOPIC") acknowledged but not on the topic (lost by the broker, not by outboxd)"
  echo "- 2xx answers beyond the requests the attempt history records: $(fmt "$UNREC_PAIRS") deliveries, $(fmt "$UNREC_EXTRA") answers (unrecorded-times.txt): $(fmt "$UNREC_KILLED") after a SIGKILL of the sender before it wrote its round; $(fmt "$UNREC_REPLAYED") where a killed B's spooled round was recorded on replay and a later round's request was dropped for its attempt number; **$(fmt $((UNREC_PAIRS - UNREC_KILLED - UNREC_REPLAYED))) unexplained**. Every other duplicate is a recorded retry"
  echo "- 2xx answers written by the receiver: $(fmt "$RX_2XX"); acknowledged ids repeated by the load generators: $(acct acked_repeated)"
  echo "- DLQ replays through \`POST /v1/dlq/replay\` during the drain: $replays, $(fmt "$replayed") deliveries"
  echo "- B's spool: $SPOOL"
  echo "- outboxd exits: $EXITS ($EXIT_KILLED by SIGKILL, $STORE_REFUSED starts refused while PostgreSQL was down, **$UNEXPECTED unexpected**)"
  echo "- brokers down: $(awk '{ s += $6 } END { print s + 0 }' "$work/broker_restarts.log") s in all"
  echo
  echo "Ingest outcomes (events): $OUTCOMES"
  echo
  echo "Receiver outcomes drawn (requests):"
  echo
  echo "$CHAOS_DRAWN" | sed 's/^/- /'
  if [ -s "$work/exits-unexpected.log" ]; then
    echo
    echo "Unexpected outboxd exits:"
    echo
    echo '```'
    head -20 "$work/exits-unexpected.log"
    echo '```'
  fi
  if [ -n "$ERROR_LINES" ]; then
    echo
    echo "outboxd error log lines (most frequent, numbers masked):"
    echo
    echo '```'
    echo "$ERROR_LINES"
    echo '```'
  fi
} >"$report"

SUMMARY="soak: $SOAK_MINUTES min, $KILLS kills, $PG_RESTARTS PostgreSQL restarts, $BROKER_RESTARTS broker restarts, $ACKED events acknowledged ($ACKED_HTTP over HTTP, $ACKED_KAFKA over Kafka), $PAIRS deliveries expected: $((DELIVERED + DUPLICATED)) delivered ($DUPLICATED duplicated), $PENDING pending, $DLQ in DLQ, $LOST lost; $KAFKA_TOPIC_UNSTORED Kafka messages never stored; $UNEXPECTED unexpected outboxd exits"
echo "$SUMMARY"
echo "- $SUMMARY" >>"$report"
log "report: $report"
rc=0
# (a 2xx the attempt history misses with nothing to explain it keeps the evidence too)
if [ "$LOST" -gt 0 ] || [ "$UNEXPECTED" -gt 0 ] || [ "$PENDING" -gt 0 ] || [ "$DLQ" -gt 0 ] ||
  [ "$KAFKA_TOPIC_UNSTORED" -gt 0 ] || [ "$UNREC_PAIRS" -gt $((UNREC_KILLED + UNREC_REPLAYED)) ]; then
  keep_work=1
  grep -E ' lost' "$work/verdicts.txt" | head -20 >&2 || true
fi
# A message on the topic that never became an event was skipped by the intake: a loss
# whether or not its producer saw the acknowledgement.
[ "$LOST" -eq 0 ] && [ "$UNEXPECTED" -eq 0 ] && [ "$KAFKA_TOPIC_UNSTORED" -eq 0 ] || rc=1
exit "$rc"
