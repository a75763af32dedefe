// drain.mjs: the arithmetic of bench/backlog.sh — live events' latency while a backlog
// drains, and after.
//
//   node bench/drain.mjs RATE.txt RECEIPTS.txt
//
// RATE.txt: bench_loadgen rate's record of the live events, "id intended_us sent_us
// acked_us" per line. RECEIPTS.txt: the sink's "id received_at_us" for every request
// (live and backlog; the first receipt of an id counts). The backlog's deliveries are the
// ids not in RATE.txt; the drain ends at the last of their receipts. A live event belongs
// to the drain when its intended send time is before that end. Prints one JSON object;
// times in µs. It computes; it must not measure.

import { readFileSync } from "node:fs";
import { pct } from "./format.mjs";

const [ratePath, receiptsPath] = process.argv.slice(2);
if (!ratePath || !receiptsPath) {
  console.error("usage: node bench/drain.mjs RATE.txt RECEIPTS.txt");
  process.exit(2);
}

const live = [];
for (const line of readFileSync(ratePath, "utf8").split("\n")) {
  if (!line) continue;
  const [id, intended, sent, acked] = line.split(" ");
  live.push({ id, intended: Number(intended), sent: Number(sent), acked: Number(acked) });
}
const liveIds = new Set(live.map((e) => e.id));
const firstReceipt = new Map();
let backlogFirst = Infinity;
let backlogLast = 0;
let backlogCount = 0;
for (const line of readFileSync(receiptsPath, "utf8").split("\n")) {
  const sp = line.indexOf(" ");
  if (sp < 0) continue;
  const id = line.slice(0, sp);
  const at = Number(line.slice(sp + 1));
  if (firstReceipt.has(id)) continue;
  firstReceipt.set(id, at);
  if (!liveIds.has(id)) {
    backlogCount++;
    if (at < backlogFirst) backlogFirst = at;
    if (at > backlogLast) backlogLast = at;
  }
}

function summary(events) {
  const lat = [], ack = [], toReceipt = [];
  let missing = 0;
  for (const e of events) {
    const r = firstReceipt.get(e.id);
    if (r === undefined) {
      missing++;
      continue;
    }
    lat.push(r - e.intended);
    ack.push(e.acked - e.intended);
    toReceipt.push(r - e.acked);
  }
  for (const a of [lat, ack, toReceipt]) a.sort((x, y) => x - y);
  return {
    events: events.length, missing,
    p50_us: pct(lat, 0.5), p90_us: pct(lat, 0.9), p99_us: pct(lat, 0.99),
    max_us: lat.length ? lat[lat.length - 1] : null,
    ack_p50_us: pct(ack, 0.5), ack_p99_us: pct(ack, 0.99),
    ack_to_receipt_p50_us: pct(toReceipt, 0.5), ack_to_receipt_p99_us: pct(toReceipt, 0.99),
  };
}

const liveStart = live.length ? live[0].intended : 0;
const during = live.filter((e) => e.intended < backlogLast);
const after = live.filter((e) => e.intended >= backlogLast);
const drainSeconds = backlogLast > liveStart ? (backlogLast - liveStart) / 1e6 : 0;
// the backlog's deliveries received while live events were being sent
const backlogDuringLive = [...firstReceipt.entries()].filter(
  ([id, at]) => !liveIds.has(id) && at >= liveStart).length;
process.stdout.write(JSON.stringify({
  backlog_received: backlogCount,
  drain_s_after_live_start: drainSeconds,
  backlog_received_during_live: backlogDuringLive,
  backlog_per_s_during_live: drainSeconds > 0 ? backlogDuringLive / drainSeconds : null,
  during_drain: summary(during),
  after_drain: summary(after),
  all: summary(live),
}) + "\n");
