#!/usr/bin/env bash
# https.sh: what HTTPS costs outboxd against plain HTTP, to the same receiver.
#
# Builds Release binaries in its own build directory, makes a CA and a server certificate
# for 127.0.0.1, and starts two test_receiver sinks with the same thread count: one over
# plain HTTP, one over HTTPS (its own TLS: GnuTLS through libmicrohttpd, session tickets
# on). First wrk's ceiling over each (keep-alive POSTs of the same ~200-byte body: the
# sink's best, to show it does not bound the rows), then ROUNDS rounds of two legs, taken
# alternately so a noisy machine hits both alike:
#
#   http    outboxd -> http://127.0.0.1:P/sink
#   https   outboxd -> https://127.0.0.1:T/sink, the subscription's tls.ca_file the CA
#
# Each leg: a fresh outboxd on a fresh SQLite store, one subscription, EVENTS events
# ingested by bench_loadgen (BATCH per request, CONNS connections); deliveries/s from the
# first ingest request to the last receipt stamp at the sink (all EVENTS distinct
# webhook-ids counted by the sink), outboxd's CPU µs per delivery (utime+stime from
# /proc over the leg; the sink's too), and from its /metrics the requests by client (lean or libcurl) and
# the TLS handshakes (full, resumed). Prints one JSON object on stdout: per leg the
# median and range over the rounds, and the HTTPS÷HTTP ratios of the medians; the
# load average before and after. The lean client is on unless OUTBOXD_LEAN_HTTP=false
# (libcurl for everything), for the before/after.
#
# Usage: [EVENTS=50000] [ROUNDS=3] [OUTBOXD_LEAN_HTTP=true|false] bench/https.sh
#   PERF=FILE: perf record -g the outboxd of the first round's PERF_LEG leg (https) into
#   FILE (a profile costs CPU: that leg's figures are not comparable then).
# Leaves nothing running; its temporary directory is removed.
set -euo pipefail
cd "$(dirname "$0")/.."

EVENTS=${EVENTS:-50000}
BATCH=${BATCH:-1000}
CONNS=${CONNS:-4}
ROUNDS=${ROUNDS:-3}
SINK_THREADS=${SINK_THREADS:-2}
CEILING_SECONDS=${CEILING_SECONDS:-5}
CEILING_CONNS=${CEILING_CONNS:-64}
ROW_TIMEOUT=${ROW_TIMEOUT:-180}
BUILD=${BUILD:-build-bench-tls}
LEAN=${OUTBOXD_LEAN_HTTP:-true}
PERF=${PERF:-}
PERF_LEG=${PERF_LEG:-https}

log() { printf '[https %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
# bench_build, loadavg, free_port, cpu_ticks, HZ, stop_pid, stop_started, sink_up, sink_stat,
# outboxd_up, api: bench/lib.sh
. bench/lib.sh
LOAD_BEFORE=$(loadavg)

bench_build "$BUILD" outboxd test_receiver bench_loadgen

work=$(mktemp -d /tmp/outboxd-bench-https-XXXXXX)
pids=()
cleanup() {
  stop_started
  rm -rf "$work"
}
trap cleanup EXIT

# ---- certificates and sinks --------------------------------------------------------------
pki=$work/pki
mkdir -p "$pki"
(cd "$pki" &&
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key \
    -out ca.pem -days 2 -subj '/CN=outboxd bench CA' 2>/dev/null &&
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout server.key \
    -out server.csr -subj '/CN=127.0.0.1' 2>/dev/null &&
  printf 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n' >server.ext &&
  openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
    -days 2 -extfile server.ext 2>/dev/null) || die "cannot make certificates"

PLAIN_PORT=$(free_port) || die "no free port"
declare -A TARGET CONTROL SINK_PID
"$BUILD/test_receiver" --port "$PLAIN_PORT" --no-bodies --threads "$SINK_THREADS" \
  >"$work/sink-http.log" 2>&1 &
pids+=($!)
SINK_PID[http]=$!
TLS_PORT=$(free_port) || die "no free port"
TLS_CONTROL=$(free_port) || die "no free port"
"$BUILD/test_receiver" --port "$TLS_PORT" --no-bodies --threads "$SINK_THREADS" \
  --tls-cert "$pki/server.pem" --tls-key "$pki/server.key" --control-port "$TLS_CONTROL" \
  >"$work/sink-https.log" 2>&1 &
pids+=($!)
SINK_PID[https]=$!
TARGET[http]=http://127.0.0.1:$PLAIN_PORT/sink
CONTROL[http]=http://127.0.0.1:$PLAIN_PORT
TARGET[https]=https://127.0.0.1:$TLS_PORT/sink
CONTROL[https]=http://127.0.0.1:$TLS_CONTROL
for leg in http https; do
  sink_up "${CONTROL[$leg]}" || die "the $leg sink did not start"
done
sink_field() { sink_stat "${CONTROL[$1]}" "$2"; }

# ---- wrk's ceiling over each sink ----------------------------------------------------------
PAYLOAD=$(printf '{"seq":0,"pad":"%s"}' "$(printf 'x%.0s' $(seq 182))")
cat >"$work/post.lua" <<EOF
wrk.method = "POST"
wrk.body = '$PAYLOAD'
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  io.write(string.format('{"requests":%d,"duration_us":%d,"errors":%d}\n', summary.requests,
    summary.duration, summary.errors.connect + summary.errors.read + summary.errors.write +
    summary.errors.status + summary.errors.timeout))
end
EOF
for leg in http https; do
  log "ceiling over $leg: wrk -t2 -c$CEILING_CONNS for ${CEILING_SECONDS}s"
  wrk -t 2 -c "$CEILING_CONNS" -d "${CEILING_SECONDS}s" -s "$work/post.lua" "${TARGET[$leg]}" \
    >"$work/ceiling-$leg.txt" 2>&1 || die "wrk failed: $(tail -2 "$work/ceiling-$leg.txt")"
  tail -1 "$work/ceiling-$leg.txt" >"$work/ceiling-$leg.json"
  curl -sf -X POST "${CONTROL[$leg]}/_control/reset" >/dev/null
done

# ---- the legs ------------------------------------------------------------------------------
metric() { # the value of one series of outboxd's /metrics, 0 when absent
  curl -sf "127.0.0.1:$DPORT/metrics" -H "Authorization: Bearer bench" |
    awk -v s="$1" '$1 == s {print $2; f=1} END {if (!f) print 0}'
}
run_leg() { # LEG ROUND: one leg, its figures into $work/LEG-ROUND.json
  local leg=$1 round=$2 name=$1-$2 tls="" cpu0 cpu1 sink0 sink1 n=0 deadline first last
  local still=0 prev=-1
  DPORT=$(free_port) || die "no free port"
  mkdir -p "$work/$name"
  OUTBOXD_DB="sqlite:$work/$name/outboxd.db" OUTBOXD_LISTEN="127.0.0.1:$DPORT" \
    OUTBOXD_ADMIN_TOKEN=bench OUTBOXD_LOG_LEVEL=warn OUTBOXD_DATA_DIR="$work/$name" \
    OUTBOXD_SSRF_ALLOW=127.0.0.0/8 OUTBOXD_TLS_DIR="$pki" OUTBOXD_LEAN_HTTP="$LEAN" \
    "$BUILD/outboxd" serve >"$work/$name.log" 2>&1 &
  DPID=$!
  pids+=("$DPID")
  outboxd_up "$DPORT" "$DPID" || die "$name: outboxd did not start: $(tail -2 "$work/$name.log")"
  [ "$leg" = https ] && tls=",\"tls\":{\"ca_file\":\"$pki/ca.pem\"}"
  api -X POST "127.0.0.1:$DPORT/v1/subscriptions" \
    -d "{\"name\":\"bench-$leg\",\"event_types\":[\"*\"],\"endpoint\":\"${TARGET[$leg]}\"$tls}" \
    >/dev/null || die "$name: cannot subscribe"
  curl -sf -X POST "${CONTROL[$leg]}/_control/reset" >/dev/null
  local perf_pid=""
  if [ -n "$PERF" ] && [ "$leg" = "$PERF_LEG" ] && [ "$round" = 1 ]; then
    perf record -g -F 999 -p "$DPID" -o "$PERF" >"$work/perf.log" 2>&1 &
    perf_pid=$!
    sleep 0.5
  fi
  cpu0=$(cpu_ticks "$DPID")
  sink0=$(cpu_ticks "${SINK_PID[$leg]}")
  timeout "$ROW_TIMEOUT" "$BUILD/bench_loadgen" ingest --url "http://127.0.0.1:$DPORT/v1/events" \
    --token bench --events "$EVENTS" --batch "$BATCH" --conns "$CONNS" >"$work/$name.ingest.json" ||
    die "$name: the load generator failed"
  deadline=$(($(date +%s) + ROW_TIMEOUT))
  while :; do # slow poll: every curl here takes CPU from the leg
    n=$(sink_field "$leg" unique_ids || echo 0)
    [ "${n:-0}" -ge "$EVENTS" ] && break
    [ "$(date +%s)" -ge "$deadline" ] && { log "$name: timeout at $n of $EVENTS"; break; }
    if [ "$n" = "$prev" ]; then still=$((still + 1)); else still=0; prev=$n; fi
    [ "$still" -ge 300 ] && { log "$name: stalled at $n of $EVENTS"; break; }
    sleep 0.1
  done
  cpu1=$(cpu_ticks "$DPID")
  sink1=$(cpu_ticks "${SINK_PID[$leg]}")
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid" 2>/dev/null || true
    wait "$perf_pid" 2>/dev/null || true
    log "$name: profile in $PERF"
  fi
  first=$(sink_field "$leg" first_us); last=$(sink_field "$leg" last_us)
  printf '{"leg":"%s","round":%d,"deliveries":%d,"last_receipt_us":%s,"cpu_ticks":%d,"hz":%d,' \
    "$leg" "$round" "$n" "$last" $((cpu1 - cpu0)) "$HZ" >"$work/$name.json"
  printf '"sink_cpu_ticks":%d,' $((sink1 - sink0)) >>"$work/$name.json"
  printf '"lean":%s,"libcurl":%s,"handshakes_full":%s,"handshakes_resumed":%s,"ingest":%s}\n' \
    "$(metric 'outboxd_http_requests_total{client="lean"}')" \
    "$(metric 'outboxd_http_requests_total{client="libcurl"}')" \
    "$(metric 'outboxd_http_tls_handshakes_total{session="full"}')" \
    "$(metric 'outboxd_http_tls_handshakes_total{session="resumed"}')" \
    "$(cat "$work/$name.ingest.json")" >>"$work/$name.json"
  stop_pid "$DPID"
  log "$name: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); s=(r["last_receipt_us"]-r["ingest"]["start_us"])/1e6; d=max(r["deliveries"],1); print("%d deliveries, %.0f/s, outboxd %.1f us CPU each (sink %.1f), lean %s libcurl %s, handshakes %s full %s resumed" % (r["deliveries"], r["deliveries"]/s, r["cpu_ticks"]*1e6/r["hz"]/d, r["sink_cpu_ticks"]*1e6/r["hz"]/d, r["lean"], r["libcurl"], r["handshakes_full"], r["handshakes_resumed"]))' "$work/$name.json")"
}

for round in $(seq "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then order="http https"; else order="https http"; fi
  for leg in $order; do run_leg "$leg" "$round"; done
done

# ---- the summary -----------------------------------------------------------------------------
LOAD_AFTER=$(loadavg)
python3 - "$work" "$ROUNDS" "$EVENTS" "$LEAN" "$LOAD_BEFORE" "$LOAD_AFTER" \
  "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" "$SINK_THREADS" <<'EOF'
import json, os, statistics, sys
work, rounds, events, lean, load0, load1, commit, threads = sys.argv[1:9]
rounds = int(rounds)
def ceiling(leg):
    w = json.load(open(os.path.join(work, f"ceiling-{leg}.json")))
    return {"requests_per_s": round(w["requests"] / (w["duration_us"] / 1e6)), "errors": w["errors"]}
legs = {}
for leg in ("http", "https"):
    runs = []
    for r in range(1, rounds + 1):
        x = json.load(open(os.path.join(work, f"{leg}-{r}.json")))
        secs = (x["last_receipt_us"] - x["ingest"]["start_us"]) / 1e6
        runs.append({
            "deliveries": x["deliveries"],
            "deliveries_per_s": round(x["deliveries"] / secs),
            "cpu_us_per_delivery": round(x["cpu_ticks"] * 1e6 / x["hz"] / max(x["deliveries"], 1), 1),
            "sink_cpu_us_per_delivery": round(x["sink_cpu_ticks"] * 1e6 / x["hz"] / max(x["deliveries"], 1), 1),
            "requests_lean": int(float(x["lean"])), "requests_libcurl": int(float(x["libcurl"])),
            "handshakes_full": int(float(x["handshakes_full"])),
            "handshakes_resumed": int(float(x["handshakes_resumed"])),
        })
    def agg(k):
        v = [r[k] for r in runs]
        return {"median": statistics.median(v), "min": min(v), "max": max(v)}
    legs[leg] = {"target_ceiling": ceiling(leg),
                 "deliveries_per_s": agg("deliveries_per_s"),
                 "cpu_us_per_delivery": agg("cpu_us_per_delivery"),
                 "sink_cpu_us_per_delivery": agg("sink_cpu_us_per_delivery"),
                 "complete": all(r["deliveries"] >= int(events) for r in runs),
                 "rounds": runs}
h, s = legs["http"], legs["https"]
out = {
    "bench": "https", "commit": commit, "lean_http": lean, "events": int(events),
    "rounds": rounds, "sink_threads": int(threads),
    "load_average_before": load0, "load_average_after": load1,
    "legs": legs,
    "https_vs_http": {
        "deliveries_per_s": round(s["deliveries_per_s"]["median"] / h["deliveries_per_s"]["median"], 3),
        "cpu_us_per_delivery": round(s["cpu_us_per_delivery"]["median"] / h["cpu_us_per_delivery"]["median"], 3),
    },
}
print(json.dumps(out, indent=1))
EOF
