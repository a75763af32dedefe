#!/usr/bin/env bash
# small_receiver.sh: what a small receiver carries at best, the yardstick of the "small
# receiver" row (outboxd's goodput / this). Starts the Python http.server receiver of the
# tests (tests/support/receivers/python_http_server.py: ThreadingHTTPServer, every default
# left alone) on a free port, runs wrk against it at each connection count of CONNS for
# SECONDS_EACH seconds (POSTs of a ~200-byte body with outboxd's header set and their own
# webhook-id, tests/support/receivers/wrk_post.lua), then once more at the best count with
# wrk's minimal header set, and prints one JSON object on stdout:
#
#   {"receiver":"python http.server","best_rate":R,"best_connections":C,"minimal_headers_rate":M,
#    "seconds_each":S,"receiver_requests":N,"runs":[{"connections":..,"requests":..,
#    "non_2xx":..,"socket_errors":..,"seconds":..,"rate":..},...]}
#
# rate = 2xx answers / wrk's measured duration. Needs python3 and wrk (scripts/deps.sh).
# Leaves nothing running. It measures, it does not judge: no threshold here.
set -euo pipefail
cd "$(dirname "$0")/.."

CONNS=${CONNS:-"4 16 64 256 512"}
SECONDS_EACH=${SECONDS_EACH:-3}
PYTHON=${PYTHON:-python3}
RX=tests/support/receivers

log() { printf '[small-receiver %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }
command -v wrk >/dev/null || die "wrk is not installed (scripts/deps.sh)"
command -v "$PYTHON" >/dev/null || die "$PYTHON is not installed (scripts/deps.sh)"

work=$(mktemp -d /tmp/outboxd-small-rx-XXXXXX)
rx_pid=""
cleanup() {
  if [ -n "$rx_pid" ]; then kill "$rx_pid" 2>/dev/null || true; wait "$rx_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Two ports the kernel just handed out (bound to port 0, then closed).
read -r port cport < <("$PYTHON" -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
"$PYTHON" -B "$RX/python_http_server.py" --port "$port" --control-port "$cport" \
  2>"$work/receiver.log" &
rx_pid=$!
for _ in $(seq 100); do curl -sf "127.0.0.1:$cport/_control/stats" >/dev/null && break; sleep 0.05; done
curl -sf "127.0.0.1:$cport/_control/stats" >/dev/null || die "the receiver did not start: $(tail -3 "$work/receiver.log")"

field() { [[ $1 =~ \"$2\":[[:space:]]*([0-9]+) ]] && echo "${BASH_REMATCH[1]}"; }
runs="" best=0 best_conns=0
for c in $CONNS; do
  out=$(wrk -t2 -c"$c" -d"${SECONDS_EACH}s" --timeout 2s -s "$RX/wrk_post.lua" \
    "http://127.0.0.1:$port/" -- "bench-$$-$c" 2>&1 | grep '^{' | tail -1) ||
    die "wrk -c$c failed"
  requests=$(field "$out" requests); non2xx=$(field "$out" status_errors)
  errors=$(field "$out" socket_errors); dur=$(field "$out" duration_us)
  rate=$(awk -v r="$requests" -v n="$non2xx" -v d="$dur" 'BEGIN { printf "%.1f", (d > 0 ? (r - n) * 1e6 / d : 0) }')
  secs=$(awk -v d="$dur" 'BEGIN { printf "%.3f", d / 1e6 }')
  log "wrk -c$c: $rate requests/s ($requests answered, $non2xx not 2xx, $errors socket errors)"
  runs="$runs${runs:+,}{\"connections\":$c,\"requests\":$requests,\"non_2xx\":$non2xx,\"socket_errors\":$errors,\"seconds\":$secs,\"rate\":$rate}"
  if awk -v a="$rate" -v b="$best" 'BEGIN { exit !(a > b) }'; then best=$rate; best_conns=$c; fi
done
# The same at the best connection count with wrk's minimal header set: what the receiver
# carries for a lighter request than outboxd's (information beside the yardstick)
out=$(wrk -t2 -c"$best_conns" -d"${SECONDS_EACH}s" --timeout 2s -s "$RX/wrk_post.lua" \
  "http://127.0.0.1:$port/" -- "bench-$$-min" minimal 2>&1 | grep '^{' | tail -1) ||
  die "wrk -c$best_conns (minimal headers) failed"
minimal=$(awk -v r="$(field "$out" requests)" -v n="$(field "$out" status_errors)" \
  -v d="$(field "$out" duration_us)" 'BEGIN { printf "%.1f", (d > 0 ? (r - n) * 1e6 / d : 0) }')
log "wrk -c$best_conns, minimal headers: $minimal requests/s"
total=$(field "$(curl -sf "127.0.0.1:$cport/_control/stats")" requests)
printf '{"receiver":"python http.server","best_rate":%s,"best_connections":%d,"minimal_headers_rate":%s,"seconds_each":%d,"receiver_requests":%d,"runs":[%s]}\n' \
  "$best" "$best_conns" "$minimal" "$SECONDS_EACH" "$total" "$runs"
