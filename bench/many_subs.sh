#!/usr/bin/env bash
# many_subs.sh: what the number of subscriptions costs ingest. NSUBS subscriptions, each
# with one pattern "tN.*" of its own, all to one local receiver; EVENTS events (batches
# of 100 over one connection) each matching one of them. Prints ingest events/s and
# outboxd's CPU per event while ingesting (deliveries run meanwhile), and how long the
# subscriptions took to create, per thousand. With ENDPOINTS=each, each subscription
# has an endpoint of its own (its own path: its own adaptive concurrency state), as when
# every subscription is a customer's URL. Then times the operator's reads that grow with
# the subscriptions: GET /v1/stats whole, for a page of 100, and for the first 20.
# SQLite, or with STORE=pg a PostgreSQL server of the run's own (bench/lib.sh); one
# instance. A measurement for docs/performance.md ("Many subscriptions"), not a row of
# make bench.
#
# Usage: [BUILD=build] [ENDPOINTS=one|each] [STORE=sqlite|pg] bench/many_subs.sh
#        [NSUBS=10000] [EVENTS=50000]
set -euo pipefail
cd "$(dirname "$0")/.."
NSUBS=${1:-10000}
EVENTS=${2:-50000}
BUILD=${BUILD:-build}
log() { printf '[many_subs %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "$*"; exit 1; }
# bench_build, free_port, sink_up, outboxd_up, cpu_ticks, HZ, stop_started: bench/lib.sh
. bench/lib.sh
bench_build "$BUILD" outboxd test_receiver
dir=$(mktemp -d /tmp/outboxd-subs-XXXXXX)
pids=()
work=$dir
cleanup() { stop_started; rm -rf "$dir" ${pg_dir:+"$pg_dir"}; }
trap cleanup EXIT
DB="sqlite:$dir/outboxd.db"
if [ "${STORE:-sqlite}" = pg ]; then
  pg_start || die "no PostgreSQL for STORE=pg"
  pg_createdb subs
  DB=$(pg_url subs)
fi
RPORT=$(free_port)
OPORT=$(free_port)
"$BUILD/test_receiver" --port "$RPORT" --no-bodies --threads 2 --unique-per-path >/dev/null 2>&1 &
pids+=($!)
sink_up "http://127.0.0.1:$RPORT" || die "the receiver did not start"
OUTBOXD_DB="$DB" OUTBOXD_LISTEN="127.0.0.1:$OPORT" OUTBOXD_ADMIN_TOKEN=bench \
  OUTBOXD_DATA_DIR="$dir" OUTBOXD_SSRF_ALLOW=127.0.0.0/8 OUTBOXD_LOG_LEVEL=warn \
  "$BUILD/outboxd" serve >"$dir/outboxd.log" 2>&1 &
opid=$!
pids+=($opid)
outboxd_up "$OPORT" "$opid" || die "outboxd did not start: $(tail -2 "$dir/outboxd.log")"
python3 - "$OPORT" "$RPORT" "$NSUBS" "${ENDPOINTS:-one}" <<'PY'
import http.client, json, sys, time
port, rport, n, each = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4] == "each"
c = http.client.HTTPConnection("127.0.0.1", port)
t0 = last = time.time()
for i in range(n):
    c.request("POST", "/v1/subscriptions", json.dumps({"name": "s%d" % i,
              "event_types": ["t%d.*" % i],
              "endpoint": "http://127.0.0.1:%s/sink%s" % (rport, "/%d" % i if each else "")}),
              {"Authorization": "Bearer bench", "content-type": "application/json"})
    r = c.getresponse(); r.read()
    assert r.status == 201, r.status
    if (i + 1) % 1000 == 0:  # each creation reloads the whole set: watch it grow
        now = time.time()
        print("created %d subscriptions: the last 1,000 in %.1f s" % (i + 1, now - last))
        last = now
print("created %d subscriptions in %.1f s" % (n, time.time() - t0))
PY
python3 - "$NSUBS" "$EVENTS" >"$dir/bodies" <<'PY'
import json, sys
n, ev = int(sys.argv[1]), int(sys.argv[2])
for b in range(ev // 100):
    print(json.dumps({"events": [{"event_type": "t%d.order" % ((b * 100 + i) % n),
                                  "payload": {"i": b * 100 + i}} for i in range(100)]}))
PY
c0=$(cpu_ticks "$opid")
s0=$(date +%s.%N)
python3 - "$OPORT" "$dir/bodies" <<'PY'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
for line in open(sys.argv[2]):
    c.request("POST", "/v1/events", line, {"Authorization": "Bearer bench",
              "content-type": "application/json"})
    r = c.getresponse(); r.read()
    assert r.status == 202, r.status
PY
s1=$(date +%s.%N)
c1=$(cpu_ticks "$opid")
awk -v n="$EVENTS" -v s="$NSUBS" -v t="$(echo "$s1 - $s0" | bc)" -v c="$((c1 - c0))" -v hz="$HZ" \
  'BEGIN { printf "%d subscriptions: ingest %.0f events/s, outboxd CPU %.1f us per event while ingesting\n", s, n / t, c / hz * 1e6 / n }'
# What the number of subscriptions costs the operator's reads: GET /v1/stats (every
# subscription's figures, or one page's) and the subscriptions' first page; best of five.
sleep 2
python3 - "$OPORT" <<'PY'
import http.client, sys, time, json
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
def get(path):
    best, size = None, 0
    for _ in range(5):
        t = time.time()
        c.request("GET", path, headers={"Authorization": "Bearer bench"})
        r = c.getresponse(); body = r.read()
        assert r.status == 200, (path, r.status, body[:200])
        dt = (time.time() - t) * 1000
        best, size = min(best or dt, dt), len(body)
    print("GET %s: %.1f ms, %d bytes" % (path if len(path) < 60 else path[:55] + "...", best, size))
    return json.loads(body)
get("/v1/stats")
page = get("/v1/subscriptions?limit=100")
ids = ",".join(s["id"] for s in page["items"])
get("/v1/stats?subscription_id=" + ids)
get("/v1/stats?subscriptions_limit=20")
PY
