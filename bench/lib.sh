# lib.sh: what the benchmark scripts share (bench/run.sh, backlog.sh, https.sh, syscalls.sh
# source it).
# The caller defines log (its own prefix) and has an array pids of the processes it
# started; the PostgreSQL helpers write their logs in $work.

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }

# A port nobody listens on (the caller's servers bind it right after), below the kernel's
# ephemeral range so that no outgoing connection of the run can take it in between.
read -r EPHEMERAL_LO _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || EPHEMERAL_LO=32768
PORT_LO=10000; PORT_SPAN=$((EPHEMERAL_LO - PORT_LO))
[ "$PORT_SPAN" -ge 1000 ] || { PORT_LO=20000; PORT_SPAN=10000; }
free_port() {
  local p
  for _ in $(seq 200); do
    p=$((PORT_LO + RANDOM % PORT_SPAN))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
  done
  return 1
}

# bench_build DIR TARGET...: Release binaries of the targets in build directory DIR
# (niced, quiet; the caller's log says so).
bench_build() {
  local dir=$1
  shift
  log "building Release binaries in $dir"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release >/dev/null
  nice cmake --build "$dir" -j 2 --target "$@" >/dev/null
}

# test_receiver's control API at BASE (http://host:port): sink_up waits up to 5 s for it to
# answer (1 when it does not); sink_stat prints one number of its /_control/stats.
sink_up() {
  for _ in $(seq 100); do curl -sf "$1/_control/stats" >/dev/null && return 0; sleep 0.05; done
  return 1
}
sink_stat() { curl -sf "$1/_control/stats" | grep -o "\"$2\":[0-9]*" | cut -d: -f2; }

# An outboxd the caller started (OUTBOXD_ADMIN_TOKEN=bench) on 127.0.0.1:PORT as process
# PID: outboxd_up waits up to 10 s for its /healthz (1 when it exits or does not answer);
# api is curl with its token and a JSON body type (api -X POST URL -d BODY).
outboxd_up() {
  local port=$1 pid=$2
  for _ in $(seq 200); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 1; }
    curl -sf "127.0.0.1:$port/healthz" >/dev/null && return 0
    sleep 0.05
  done
  return 1
}
api() { curl -sf -H "Authorization: Bearer bench" -H 'Content-Type: application/json' "$@"; }

# utime+stime of a process in clock ticks (the whole process, every thread).
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
HZ=$(getconf CLK_TCK)

# Stops one process: TERM, up to 10 s, then KILL.
stop_pid() {
  local p=$1
  kill "$p" 2>/dev/null || true
  for _ in $(seq 200); do kill -0 "$p" 2>/dev/null || break; sleep 0.05; done
  kill -9 "$p" 2>/dev/null || true
  wait "$p" 2>/dev/null || true
}

# Every process in pids, and the PostgreSQL server pg_start started: for the caller's
# EXIT trap.
stop_started() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "$pg_data" ] && [ -f "$pg_data/postmaster.pid" ]; then
    as_pg "$PGBIN/pg_ctl" -D "$pg_data" -m fast -w stop >/dev/null 2>&1 || true
  fi
}

# ---- a PostgreSQL of the run's own: its defaults, fsync and synchronous_commit on --------
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
PGPORT=""
pg_dir=""
pg_data=""
# The server runs as nobody when the script runs as root (initdb refuses root).
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u nobody -- "$@"; else "$@"; fi; }
# pg_start [SERVER OPTIONS...]: initdb in a new directory under /tmp and start it on a
# free port (PGPORT; data in pg_data, log in $pg_dir/server.log); 1 when it cannot.
pg_start() {
  [ -x "$PGBIN/initdb" ] || { log "no PostgreSQL server binaries"; return 1; }
  pg_dir=$(mktemp -d /tmp/outboxd-bench-pg-XXXXXX)
  [ "$(id -u)" -eq 0 ] && chown nobody "$pg_dir"
  pg_data=$pg_dir/data
  PGPORT=$(free_port)
  as_pg "$PGBIN/initdb" -D "$pg_data" -U bench -A trust -E UTF8 >"$work/initdb.log" 2>&1 ||
    { log "initdb failed: $(tail -1 "$work/initdb.log")"; return 1; }
  as_pg "$PGBIN/pg_ctl" -D "$pg_data" -l "$pg_dir/server.log" -w \
    -o "-p $PGPORT -k $pg_dir -c listen_addresses=127.0.0.1 $*" start >/dev/null ||
    { log "PostgreSQL did not start: $(tail -3 "$pg_dir/server.log")"; return 1; }
  log "PostgreSQL $("$PGBIN/postgres" --version | awk '{print $3}') on port $PGPORT" \
      "(fsync=$(pg_sql -Atc 'show fsync'), synchronous_commit=$(pg_sql -Atc 'show synchronous_commit'))"
}
pg_sql() { psql -h 127.0.0.1 -p "$PGPORT" -U bench -d postgres -v ON_ERROR_STOP=1 -q "$@"; }
pg_createdb() {
  pg_sql -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS $1" \
    -c "CREATE DATABASE $1" >/dev/null
}
pg_url() { echo "postgres://bench@127.0.0.1:$PGPORT/$1"; }
# pg_fresh: drops every database the earlier rows left (their stores are read already)
# and checkpoints, so that a row's server figures hold its own work: not the autovacuum of
# an earlier row's tables, nor a checkpoint forced by the WAL the earlier rows wrote (and
# the full-page images that follow one). Prints the seconds it took.
pg_fresh() {
  local t0=$SECONDS db
  for db in $(pg_sql -Atc "SELECT datname FROM pg_database WHERE NOT datistemplate AND datname <> 'postgres'"); do
    pg_sql -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null
  done
  pg_sql -c CHECKPOINT >/dev/null
  echo $((SECONDS - t0))
}
