#!/usr/bin/env bash
# peer_sweep.sh: which configuration of each peer is strongest on this machine — the data
# behind the peers' defaults in bench/run.sh. For every configuration of GRAPHILE_GRID and
# PGBOSS_GRID it runs bench/run.sh with the postgres row and that peer's row, SWEEP_ROUNDS
# interleaved rounds each (the ratio within each round, as make bench takes it), and writes
# OUT (default bench/results/peer-sweep.md): the command, the machine stamp of each run, one
# line per configuration with the peer's deliveries/s and CPU per delivery (median and range
# over the rounds) and outboxd-on-PostgreSQL ÷ that configuration, and the raw figures of
# every round as JSON lines.
#
#   GRAPHILE_GRID  WORKERSxCONCURRENCY[xPOOL] items (default "1x64 1x512 2x256 4x128 2x256x32")
#   PGBOSS_GRID    WORKERSxLOOPSxBATCH items (default "1x16x32 2x8x32 2x4x64 4x4x32 2x16x16")
#   SWEEP_ROUNDS   rounds per configuration (default 3); EVENTS as for run.sh (default 100000)
#
# Like make bench, it refuses a busy machine when it writes into bench/results (1-minute
# load average above LOAD_MAX, 1.0; BENCH_FORCE=1 runs it flagged). About 3–5 minutes per
# configuration with the defaults (the 10 of them: 40 minutes or so; EVENTS=50000 and
# SWEEP_ROUNDS=2 for a first look). Leaves nothing running (each run.sh cleans up after itself).
set -euo pipefail
cd "$(dirname "$0")/.."

GRAPHILE_GRID=${GRAPHILE_GRID:-1x64 1x512 2x256 4x128 2x256x32}
PGBOSS_GRID=${PGBOSS_GRID:-1x16x32 2x8x32 2x4x64 4x4x32 2x16x16}
SWEEP_ROUNDS=${SWEEP_ROUNDS:-3}
OUT=${OUT:-bench/results/peer-sweep.md}
LOAD_MAX=${LOAD_MAX:-1.0}
export EVENTS=${EVENTS:-100000}

log() { printf '[peer-sweep %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
load1=$(cut -d' ' -f1 /proc/loadavg)
busy=$(awk -v l="$load1" -v m="$LOAD_MAX" 'BEGIN { print (l > m) ? 1 : 0 }')
if [ "$busy" = 1 ] && [ "$OUT" = bench/results/peer-sweep.md ] && [ "${BENCH_FORCE:-0}" != 1 ]; then
  log "error: load average $load1 > LOAD_MAX $LOAD_MAX: not a sweep to publish (BENCH_FORCE=1 to run it flagged)"
  exit 1
fi

tmp=$(mktemp -d /tmp/outboxd-peer-sweep-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
data=$tmp/data.jsonl
: >"$data"

# one configuration: KIND LABEL VAR=VALUE...
sweep_one() {
  local kind=$1 label=$2 dir
  shift 2
  dir=$tmp/$kind-$label
  log "$kind $label: $*"
  env "$@" BENCH_ROUNDS="$SWEEP_ROUNDS" ROWS="postgres $kind" RESULTS="$dir" LOAD_MAX=1000 \
    bash bench/run.sh >"$dir.log" 2>&1 || { log "$kind $label: run.sh failed: $(tail -2 "$dir.log")"; return 0; }
  node -e '
    const [file, kind, label, settings] = process.argv.slice(1);
    const j = JSON.parse(require("fs").readFileSync(file, "utf8"));
    const r = j.round_rows[kind] ?? {};
    const pick = (f) => r[f] ? { median: r[f].median, min: r[f].min, max: r[f].max, values: r[f].values } : null;
    console.log(JSON.stringify({ kind, label, settings, machine: { load_before: j.machine.load_before,
      load_after: j.machine.load_after, commit: j.machine.commit, date: j.machine.date, fsync_us: j.machine.fsync_us },
      config: r.peer?.ready?.[0] ?? null, deliveries_per_s: pick("deliveries_per_s"),
      end_to_end_per_s: pick("end_to_end_per_s"), cpu_sum: pick("cpu.sum"), cpu_deliverers: pick("cpu.deliverers"),
      postgres_per_s: j.round_rows.postgres?.deliveries_per_s?.median ?? null,
      postgres_over_peer: j.ratios[`postgres/${kind}`] ?? null }));
  ' "$dir/latest.json" "$kind" "$label" "$*" >>"$data"
}

for g in $GRAPHILE_GRID; do
  IFS=x read -r w c pool <<<"$g"
  sweep_one graphile "$g" PEER_WORKERS="$w" PEER_CONCURRENCY="$c" PEER_POOL="${pool:-10}"
done
for g in $PGBOSS_GRID; do
  IFS=x read -r w loops batch <<<"$g"
  sweep_one pgboss "$g" PGBOSS_WORKERS="$w" PGBOSS_CONCURRENCY="$loops" PGBOSS_BATCH="$batch"
done

mkdir -p "$(dirname "$OUT")"
node - "$data" "$OUT" "$SWEEP_ROUNDS" "$EVENTS" "$busy" "$load1" <<'JS'
const fs = require("fs");
const [data, out, rounds, events, busy, load1] = process.argv.slice(2);
const rows = fs.readFileSync(data, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
const f0 = (x) => (x == null ? "–" : Math.round(x).toLocaleString("en-US"));
const f1 = (x) => (x == null ? "–" : x.toFixed(1));
const mr = (s, f) => (s ? (s.min === s.max ? f(s.median) : `${f(s.median)} (${f(s.min)}–${f(s.max)})`) : "–");
const L = ["# Peer sweep", ""];
if (busy === "1") L.push(`**BUSY MACHINE: the 1-minute load average was ${load1} at the start; not a sweep to publish.**`, "");
L.push(`Made by \`bash bench/peer_sweep.sh\` (${rounds} round${rounds === "1" ? "" : "s"} of the postgres row and the peer's row per ` +
  `configuration, ${f0(Number(events))} events each; the environment: GRAPHILE_GRID="${process.env.GRAPHILE_GRID ?? ""}" ` +
  `PGBOSS_GRID="${process.env.PGBOSS_GRID ?? ""}"). Deliveries/s: the steady window of bench/run.sh (median ` +
  `(min–max) over the rounds); CPU: µs per delivery of the worker processes, and the sum with the ` +
  `PostgreSQL server and the producer; outboxd ÷ peer: outboxd on PostgreSQL ÷ this configuration, ` +
  `within each round.`, "");
for (const kind of ["graphile", "pgboss"]) {
  const xs = rows.filter((r) => r.kind === kind);
  if (!xs.length) continue;
  const best = xs.filter((r) => r.deliveries_per_s).sort((a, b) => b.deliveries_per_s.median - a.deliveries_per_s.median)[0];
  L.push(`## ${kind === "graphile" ? "graphile-worker" : "pg-boss"}`, "",
    kind === "graphile" ? "| processes × concurrency [× pool] | settings | deliveries/s | end to end /s | CPU workers µs | CPU sum µs | outboxd PostgreSQL ÷ this |"
      : "| processes × fetch loops × batch | settings | deliveries/s | end to end /s | CPU workers µs | CPU sum µs | outboxd PostgreSQL ÷ this |",
    "|---|---|--:|--:|--:|--:|--:|");
  for (const r of xs)
    L.push(`| ${r.label}${r === best ? " (strongest)" : ""} | ${r.settings} | ${mr(r.deliveries_per_s, f0)} | ${mr(r.end_to_end_per_s, f0)} | ` +
      `${mr(r.cpu_deliverers, f1)} | ${mr(r.cpu_sum, f1)} | ${mr(r.postgres_over_peer, (x) => x.toFixed(2) + "×")} |`);
  L.push("");
}
L.push("## Data", "", "One JSON line per configuration (every round's figures under `values`; the machine stamp of its run):", "", "```", ...rows.map((r) => JSON.stringify(r)), "```", "");
fs.writeFileSync(out, L.join("\n"));
JS
log "wrote $OUT"
