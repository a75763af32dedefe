// custom_rows.mjs: bench/run.sh's rows of their own shape, from their scripts' JSON, in the
// form analyze.mjs reads (NAME.row.json: the figures and report_lines, the markdown the
// report prints for the row).
//
//   node bench/custom_rows.mjs backlog BACKLOG.json   (bench/backlog.sh's lines, one per store)
//   node bench/custom_rows.mjs https HTTPS.json       (bench/https.sh's object)
//
// It computes; it must not measure.

import { readFileSync } from "node:fs";
import { f0, f1, ms } from "./format.mjs";

const [kind, file] = process.argv.slice(2);
const text = readFileSync(file, "utf8");

// Latency targets while a backlog drains (p99 of the live events sent during the drain).
const BACKLOG_P99_MS = { sqlite: 5, postgres: 10 };

function backlog() {
  const runs = text.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l));
  const L = [
    "Latency under a backlog: a fresh outboxd, two subscriptions to the sink; " +
      `${f0(runs[0]?.backlog_events)} events for the first stored as fast as outboxd takes them, then ` +
      `${f0(runs[0]?.live_rate)} single events/s for ${runs[0]?.live_seconds} s for the second ` +
      "(bench/backlog.sh). The live events sent while the backlog was still being delivered " +
      "are the \"during the drain\" columns.",
    "",
    "| store | drain after live start s | backlog deliveries/s meanwhile | live events during the drain | p50 ms | p99 ms | max ms | ingest ack p99 ms | ack → receipt p99 ms | p99 after the drain ms | duplicates | delivered of expected | target p99 during the drain | met |",
    "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|:-:|",
  ];
  const stores = {};
  for (const r of runs) {
    const l = r.latency, d = l.during_drain, a = l.after_drain;
    const target = BACKLOG_P99_MS[r.store];
    const met = d.events > 0 && d.p99_us != null && d.p99_us <= target * 1000 && !d.missing;
    stores[r.store] = { ...r, target_p99_ms: target, met };
    L.push(`| ${r.store} | ${f1(l.drain_s_after_live_start)} | ${f0(l.backlog_per_s_during_live)} | ${f0(d.events)} | ` +
      `${ms(d.p50_us)} | ${ms(d.p99_us)} | ${ms(d.max_us)} | ${ms(d.ack_p99_us)} | ${ms(d.ack_to_receipt_p99_us)} | ` +
      `${ms(a.p99_us)} | ${f0(r.duplicates)} | ${f0(r.unique_ids)} of ${f0(r.expected)} | ≤ ${target} ms | ${met ? "yes" : "no"} |`);
  }
  return { available: runs.length > 0, stores, report_lines: L };
}

function https() {
  const r = JSON.parse(text);
  const h = r.legs.http, s = r.legs.https, k = r.https_vs_http;
  const range = (x, f) => `${f(x.median)} (${f(x.min)}–${f(x.max)})`;
  const L = [
    `HTTPS against plain HTTP (bench/https.sh): ${f0(r.events)} events per leg, ${r.rounds} rounds of both legs ` +
      "taken alternately, each on a fresh outboxd and SQLite store, to test_receiver over plain HTTP and over " +
      "its own TLS (TLS 1.3, session tickets; the subscription's tls.ca_file the run's CA); deliveries/s first " +
      "ingest request to the last receipt; median (range).",
    "",
    "| leg | deliveries/s | outboxd CPU µs/delivery | sink CPU µs/delivery | wrk's ceiling on the same sink /s | TLS handshakes full + resumed (median round) |",
    "|---|--:|--:|--:|--:|--:|",
  ];
  for (const [name, leg] of [["http", h], ["https", s]]) {
    const mid = leg.rounds[Math.floor(leg.rounds.length / 2)] ?? {};
    L.push(`| ${name} | ${range(leg.deliveries_per_s, f0)} | ${range(leg.cpu_us_per_delivery, f1)} | ` +
      `${range(leg.sink_cpu_us_per_delivery, f1)} | ${f0(leg.target_ceiling?.requests_per_s ?? leg.target_ceiling)} | ` +
      `${name === "https" ? `${f0(mid.handshakes_full)} + ${f0(mid.handshakes_resumed)}` : "–"} |`);
  }
  const metRate = k.deliveries_per_s >= 0.75, metCpu = k.cpu_us_per_delivery <= 1.3;
  // a third decimal where two would round the ratio onto its bound (0.746× is not "0.75×"
  // beside a "no")
  const vs = (x, bound) => x.toFixed(Math.abs(x - bound) < 0.005 && x !== bound ? 3 : 2);
  L.push("", "| target | measured | met |", "|---|--:|:-:|",
    `| HTTPS ÷ HTTP deliveries/s ≥ 0.75× | ${vs(k.deliveries_per_s, 0.75)}× | ${metRate ? "yes" : "no"} |`,
    `| HTTPS ÷ HTTP CPU per delivery ≤ 1.3× | ${vs(k.cpu_us_per_delivery, 1.3)}× | ${metCpu ? "yes" : "no"} |`);
  return { available: true, https: r, report_lines: L };
}

const out = kind === "backlog" ? backlog() : kind === "https" ? https() : null;
if (!out) {
  console.error("usage: node bench/custom_rows.mjs backlog|https FILE");
  process.exit(2);
}
process.stdout.write(JSON.stringify(out) + "\n");
