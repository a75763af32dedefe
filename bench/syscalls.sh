#!/usr/bin/env bash
# syscalls.sh: the system calls outboxd makes per delivery, by thread and by call, counted
# by the kernel's tracepoints (perf stat; the counts do not slow the run as strace would).
#
# Builds Release binaries (BUILD, default build-bench), starts test_receiver as the sink and
# outboxd on a fresh SQLite store (DB=postgres: on a throwaway PostgreSQL server, bench/lib.sh)
# with SUBS subscriptions (each to its own path of the sink), then counts every system call
# of outboxd's threads while EVENTS events are ingested (bench_loadgen, BATCH per request,
# CONNS connections) and delivered (EVENTS x SUBS deliveries), from the first request to the
# last receipt. Prints tables: system calls and CPU µs per delivery by thread (MHD workers,
# the writer, the dispatcher, ...), and calls per delivery by call.
#
# Usage: [DB=sqlite|postgres] [EVENTS=50000] [SUBS=1] [BATCH=1000] [CONNS=4] bench/syscalls.sh
# Needs perf with tracepoints readable (root, or kernel.perf_event_paranoid <= -1).
# Leaves nothing running; its temporary directory is removed.
set -euo pipefail
cd "$(dirname "$0")/.."

DB=${DB:-sqlite}
EVENTS=${EVENTS:-50000}
SUBS=${SUBS:-1}
BATCH=${BATCH:-1000}
CONNS=${CONNS:-4}
BUILD=${BUILD:-build-bench}
ROW_TIMEOUT=${ROW_TIMEOUT:-300}
# the calls counted one by one; every call is in the total (raw_syscalls)
CALLS=${CALLS:-read write readv writev sendto recvfrom sendmsg recvmsg sendmmsg epoll_wait epoll_ctl poll ppoll futex pread64 pwrite64 fdatasync fsync lseek fcntl accept4 connect close openat getsockopt setsockopt madvise mmap munmap brk clock_nanosleep nanosleep getrandom}

log() { printf '[syscalls %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
# bench_build, free_port, stop_started, pg_start, pg_createdb, pg_url, HZ, sink_up, sink_stat,
# outboxd_up, api: bench/lib.sh
. bench/lib.sh
command -v perf >/dev/null || die "perf is not installed (apt-get install linux-perf)"
perf stat -e raw_syscalls:sys_enter -- true >/dev/null 2>&1 ||
  die "perf cannot read the syscall tracepoints here (run as root)"

bench_build "$BUILD" outboxd test_receiver bench_loadgen

work=$(mktemp -d /tmp/outboxd-bench-syscalls-XXXXXX)
pids=()
cleanup() {
  stop_started
  [ -z "$pg_dir" ] || rm -rf "$pg_dir"
  rm -rf "$work"
}
trap cleanup EXIT

SPORT=$(free_port) || die "no free port"
"$BUILD/test_receiver" --port "$SPORT" --no-bodies --threads 2 --unique-per-path >"$work/sink.log" 2>&1 &
pids+=($!)
SINK=http://127.0.0.1:$SPORT
sink_up "$SINK" || die "the sink did not start"
sink_unique() { sink_stat "$SINK" unique_ids; }

if [ "$DB" = postgres ]; then
  pg_start
  pg_createdb outboxd_syscalls
  DSN=$(pg_url outboxd_syscalls)
else
  DSN=sqlite:$work/o.db
fi
DPORT=$(free_port) || die "no free port"
OUTBOXD_DB=$DSN OUTBOXD_LISTEN=127.0.0.1:$DPORT OUTBOXD_ADMIN_TOKEN=bench OUTBOXD_LOG_LEVEL=warn \
  OUTBOXD_DATA_DIR="$work" OUTBOXD_SSRF_ALLOW=127.0.0.0/8 "$BUILD/outboxd" serve \
  >"$work/outboxd.log" 2>&1 &
DPID=$!
pids+=("$DPID")
outboxd_up "$DPORT" "$DPID" || die "outboxd did not start: $(tail -2 "$work/outboxd.log")"
for ((i = 1; i <= SUBS; i++)); do
  api -X POST "127.0.0.1:$DPORT/v1/subscriptions" \
    -d "{\"name\":\"sink-$i\",\"event_types\":[\"*\"],\"endpoint\":\"$SINK/sink/$i\"}" \
    >/dev/null || die "cannot create subscription $i"
done
DELIVERIES=$((EVENTS * SUBS))
# utime+stime of each of outboxd's threads, "tid name ticks" lines
thread_ticks() {
  local t
  for t in /proc/"$DPID"/task/*; do
    printf '%s %s %s\n' "${t##*/}" "$(tr ' ' '_' <"$t/comm")" \
      "$(sed 's/^.*) //' "$t/stat" | awk '{print $12 + $13}')"
  done
}

events=raw_syscalls:sys_enter
for c in $CALLS; do events=$events,syscalls:sys_enter_$c; done
log "counting outboxd's system calls while $EVENTS events x $SUBS subscriptions go through ($DB)"
thread_ticks >"$work/ticks0.txt"
perf stat --per-thread -x';' -e "$events" -p "$DPID" -o "$work/perf.txt" &
PERF=$!
sleep 0.5 # perf attaches to every thread before the first request
"$BUILD/bench_loadgen" ingest --url "http://127.0.0.1:$DPORT/v1/events" --token bench \
  --events "$EVENTS" --batch "$BATCH" --conns "$CONNS" >"$work/ingest.json"
deadline=$(($(date +%s) + ROW_TIMEOUT))
while [ "$(sink_unique || echo 0)" -lt "$DELIVERIES" ]; do
  [ "$(date +%s)" -lt "$deadline" ] || die "only $(sink_unique) of $DELIVERIES delivered"
  sleep 0.1
done
kill -INT "$PERF"
wait "$PERF" || true
thread_ticks >"$work/ticks1.txt"

# perf's lines: THREAD-TID;COUNT;;EVENT;...  (a thread's name, a dash, its id)
# CPU by thread name: the ticks each thread gained (threads of one name summed)
awk -v n="$DELIVERIES" -v hz="$HZ" '
  FNR == NR { t0[$1] = $3; next }
  { d = $3 - ($1 in t0 ? t0[$1] : 0); cpu[$2] += d; all += d }
  END {
    printf "CPU µs per delivery, all threads: %.1f\n\n| thread | CPU µs per delivery |\n|---|---:|\n", all * 1e6 / hz / n
    for (t in cpu) if (cpu[t] > 0) printf "| %s | %.1f |\n", t, cpu[t] * 1e6 / hz / n | "sort -t\"|\" -k3 -rn"
    close("sort -t\"|\" -k3 -rn")
    printf "\n"
  }' "$work/ticks0.txt" "$work/ticks1.txt"

awk -F';' -v n="$DELIVERIES" -v subs="$SUBS" -v db="$DB" '
  /^#/ || NF < 4 { next }
  {
    name = $1; sub(/-[0-9]+$/, "", name); gsub(/^ +| +$/, "", name)
    count = $2 + 0; ev = $4; sub(/^syscalls:sys_enter_/, "", ev)
    if (ev == "raw_syscalls:sys_enter") { thread[name] += count; total += count }
    else call[ev] += count
  }
  END {
    printf "outboxd on %s, %d deliveries (%d subscription(s)), system calls per delivery: %.2f\n\n", db, n, subs, total / n
    printf "| thread | calls per delivery |\n|---|---:|\n"
    for (t in thread) if (thread[t] > 0) printf "| %s | %.3f |\n", t, thread[t] / n | "sort -t\"|\" -k3 -rn"
    close("sort -t\"|\" -k3 -rn")
    printf "\n| call | per delivery |\n|---|---:|\n"
    for (c in call) { if (call[c] > 0) { printf "| %s | %.3f |\n", c, call[c] / n | "sort -t\"|\" -k3 -rn"; named += call[c] } }
    close("sort -t\"|\" -k3 -rn")
    printf "| (others) | %.3f |\n", (total - named) / n
  }' "$work/perf.txt"
