// analyze.mjs: the arithmetic of bench/run.sh — latency joins, rows, and the report.
//
//   node bench/analyze.mjs latency RATE.txt RECEIPTS.txt RATE.json
//       joins "id intended_us sent_us acked_us" lines with the sink's "id received_at_us"
//       receipts (first receipt of each id) and prints percentiles of receipt - intended.
//   node bench/analyze.mjs row NAME KIND WORKDIR      one row's JSON from its raw files
//   node bench/analyze.mjs brief ROW.json             a one-line summary for the log
//   node bench/analyze.mjs report WORKDIR RESULTS     latest.json, latest.md, and the data
//                                                     files bench/report.gp plots; with
//                                                     BENCH_DOCS=FILE, also the table
//                                                     between FILE's bench:latest markers
//
// It computes; it must not measure (no timing happens here).

import { readFileSync, writeFileSync, existsSync, readdirSync } from "node:fs";
import { join } from "node:path";

const readJson = (p) => JSON.parse(readFileSync(p, "utf8"));
const maybeJson = (p) => (existsSync(p) ? readJson(p) : null);
const pct = (sorted, p) => (sorted.length ? sorted[Math.floor((sorted.length - 1) * p)] : null);

const ORDER = ["ceiling", "sqlite", "sqlite-fanout", "postgres", "peer"];

function latency(ratePath, receiptsPath, rateJsonPath) {
  const first = new Map();
  for (const line of readFileSync(receiptsPath, "utf8").split("\n")) {
    const sp = line.indexOf(" ");
    if (sp < 0) continue;
    const id = line.slice(0, sp);
    if (!first.has(id)) first.set(id, Number(line.slice(sp + 1)));
  }
  const lat = [];
  let missing = 0;
  for (const line of readFileSync(ratePath, "utf8").split("\n")) {
    if (!line) continue;
    const [id, intended] = line.split(" ");
    const r = first.get(id);
    if (r === undefined) missing++;
    else lat.push(r - Number(intended));
  }
  lat.sort((a, b) => a - b);
  const gen = readJson(rateJsonPath);
  return {
    rate: gen.rate, achieved_rate: gen.events_per_s, batch: gen.batch,
    seconds: (gen.end_us - gen.start_us) / 1e6, sent: gen.events,
    accepted: gen.accepted, errors: gen.errors, late_sends: gen.late_requests,
    samples: lat.length, missing,
    p50_us: pct(lat, 0.5), p90_us: pct(lat, 0.9), p99_us: pct(lat, 0.99),
    p999_us: pct(lat, 0.999), max_us: lat.length ? lat[lat.length - 1] : null,
    ingest_ack_p50_us: gen.ack_p50_us, ingest_ack_p99_us: gen.ack_p99_us,
  };
}

const LABELS = {
  ceiling: "ceiling: wrk -> sink",
  sqlite: "outboxd, SQLite, 1 subscription",
  "sqlite-fanout": "outboxd, SQLite, fan-out",
  postgres: "outboxd, PostgreSQL, 1 subscription",
  peer: "peer: graphile-worker + undici, PostgreSQL",
};

function row(name, kind, work) {
  const out = { row: name, label: LABELS[name] ?? name, available: true };
  if (kind === "ceiling") {
    const w = readJson(join(work, "ceiling.wrk.json"));
    const s = readJson(join(work, "ceiling.sink.json"));
    out.deliveries_per_s = w.requests / (w.duration_us / 1e6);
    out.requests = w.requests;
    out.errors = w.errors;
    out.seconds = w.duration_us / 1e6;
    out.conns = s.conns;
    out.sink_count = s.sink_count;
    out.wrk_latency_p50_us = w.p50_us;
    out.wrk_latency_p99_us = w.p99_us;
    return out;
  }
  const tp = readJson(join(work, `${name}.tp.json`));
  const secs = (tp.last_receipt_us - tp.ingest.start_us) / 1e6;
  Object.assign(out, {
    events: tp.events,
    subscriptions: tp.subscriptions,
    deliveries: tp.deliveries,
    deliveries_expected: tp.deliveries_expected,
    complete: tp.deliveries >= tp.deliveries_expected,
    deliveries_per_s: tp.deliveries / secs,
    end_to_end_s: secs,
    ingest_events_per_s: tp.ingest.events_per_s,
    ingest_s: (tp.ingest.end_us - tp.ingest.start_us) / 1e6,
    ingest_errors: tp.ingest.errors,
    cpu_us_per_delivery: ((tp.cpu_ticks / tp.hz) * 1e6) / Math.max(1, tp.deliveries),
    cpu_s: tp.cpu_ticks / tp.hz,
    peak_rss_mib: tp.vmhwm_kib / 1024,
    process: kind === "peer" ? "node (graphile-worker)" : "outboxd",
  });
  if (tp.ingest.first_error) out.ingest_first_error = tp.ingest.first_error;
  const lat = maybeJson(join(work, `${name}.lat.json`));
  if (lat) out.latency = lat;
  if (kind === "peer") out.peer = maybeJson(join(work, "peer.config.json"));
  return out;
}

const f0 = (x) => (x == null ? "–" : Math.round(x).toLocaleString("en-US"));
const f1 = (x) => (x == null ? "–" : x.toFixed(1));
const ms = (us) => (us == null ? "–" : (us / 1000).toFixed(2));
const ratio = (a, b) => (a && b ? `${(a / b).toFixed(2)}×` : "–");

function brief(r) {
  if (!r.available) return `[bench] ${r.row}: not available (${r.reason})`;
  let s = `[bench] ${r.row}: ${f0(r.deliveries_per_s)} deliveries/s`;
  if (r.ingest_events_per_s) s += `, ingest ${f0(r.ingest_events_per_s)} ev/s`;
  if (r.cpu_us_per_delivery != null) s += `, ${f1(r.cpu_us_per_delivery)} µs CPU/delivery`;
  if (r.peak_rss_mib != null) s += `, RSS ${f1(r.peak_rss_mib)} MiB`;
  if (r.complete === false) s += ` (INCOMPLETE: ${r.deliveries} of ${r.deliveries_expected})`;
  if (r.latency)
    s += `, latency p50 ${ms(r.latency.p50_us)} p99 ${ms(r.latency.p99_us)} max ${ms(r.latency.max_us)} ms`;
  return s;
}

function report(work, results) {
  const m = readJson(join(work, "machine.json"));
  const rows = {};
  for (const f of readdirSync(join(work, "rows"))) {
    const r = readJson(join(work, "rows", f));
    rows[r.row] = r;
  }
  const names = ORDER.filter((n) => rows[n]).concat(
    Object.keys(rows).filter((n) => !ORDER.includes(n)),
  );
  const ok = (n) => rows[n]?.available && rows[n].complete !== false;
  const ceiling = ok("ceiling") ? rows.ceiling.deliveries_per_s : null;
  const peer = ok("peer") ? rows.peer.deliveries_per_s : null;
  for (const n of ["sqlite", "sqlite-fanout", "postgres"]) {
    if (!ok(n)) continue;
    rows[n].vs_ceiling = ceiling ? rows[n].deliveries_per_s / ceiling : null;
    rows[n].vs_peer = peer ? rows[n].deliveries_per_s / peer : null;
  }
  if (rows["sqlite-fanout"]?.subscriptions)
    rows["sqlite-fanout"].label = `outboxd, SQLite, ${rows["sqlite-fanout"].subscriptions} subscriptions (fan-out)`;
  if (rows.peer?.peer?.graphile_worker)
    rows.peer.label = `peer: graphile-worker ${rows.peer.peer.graphile_worker} + undici, PostgreSQL`;

  const s = m.settings;
  const stamp =
    `${m.cpu_model}, ${m.cores} cores, kernel ${m.kernel}; load ${m.load_before} before, ` +
    `${m.load_after} after; commit ${m.commit}; ${m.date}`;
  const targets = [];
  const t = (what, measured, good) =>
    targets.push({ target: what, measured, met: measured === "–" ? null : good });
  if (rows.sqlite?.available) {
    const r = rows.sqlite;
    t("SQLite, 1 subscription: ≥ 25,000 deliveries/s", f0(r.deliveries_per_s), r.deliveries_per_s >= 25000);
    t("SQLite: ≤ 40 µs outboxd CPU per delivery", f1(r.cpu_us_per_delivery), r.cpu_us_per_delivery <= 40);
    t("SQLite: ≥ 5× the peer's deliveries/s", rows.sqlite.vs_peer ? ratio(r.deliveries_per_s, peer) : "–", (rows.sqlite.vs_peer ?? 0) >= 5);
    if (r.latency) t(`SQLite: p99 latency at ${s.lat_rate} events/s ≤ 10 ms`, `${ms(r.latency.p99_us)} ms`, r.latency.p99_us <= 10000);
    t("SQLite: peak RSS ≤ 64 MiB", `${f1(r.peak_rss_mib)} MiB`, r.peak_rss_mib <= 64);
  }
  if (rows.postgres?.available) {
    const r = rows.postgres;
    t("PostgreSQL: ≥ 15,000 deliveries/s", f0(r.deliveries_per_s), r.deliveries_per_s >= 15000);
    if (r.latency) t(`PostgreSQL: p99 latency at ${s.lat_rate} events/s ≤ 10 ms`, `${ms(r.latency.p99_us)} ms`, r.latency.p99_us <= 10000);
  } else if (rows.postgres) {
    t("PostgreSQL: ≥ 15,000 deliveries/s", "–", null);
  }

  const json = { machine: m, rows: names.map((n) => rows[n]), targets };
  writeFileSync(join(results, "latest.json"), JSON.stringify(json, null, 2) + "\n");

  // ---- the table ----
  const L = [];
  L.push("# outboxd benchmark — latest run", "");
  L.push(`Machine: ${m.cpu_model}, ${m.cores} cores, kernel ${m.kernel}  `);
  L.push(`Load average (1/5/15 min): ${m.load_before} before, ${m.load_after} after  `);
  L.push(`Commit: ${m.commit} · ${m.date} · \`make bench\` took ${m.duration_s} s  `);
  L.push(
    `Workload: ${f0(s.events)} events of ~200 bytes, batches of ${s.batch} over ${s.conns} ` +
      `connections; fan-out ${f0(s.fanout_events)} events × ${s.fanout_subs} subscriptions; ` +
      `latency at ${s.lat_rate} events/s for ${s.lat_seconds} s ` +
      `(${s.lat_batch > 1 ? `batches of ${s.lat_batch}` : "single events"}); sink: ` +
      `test_receiver --threads ${s.sink_threads}; ${s.build} build.`,
    "",
  );
  L.push(
    "| row | deliveries/s | ingest events/s | CPU µs/delivery | peak RSS MiB | latency p50 ms | p99 ms | max ms | outboxd/ceiling | outboxd/peer |",
    "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
  );
  for (const n of names) {
    const r = rows[n];
    if (!r.available) {
      L.push(`| ${r.label ?? LABELS[n] ?? n} | not available (${r.reason}) | | | | | | | | |`);
      continue;
    }
    const dps = f0(r.deliveries_per_s) + (r.complete === false ? ` (incomplete: ${f0(r.deliveries)} of ${f0(r.deliveries_expected)})` : "");
    const lat = r.latency;
    const over = lat && lat.achieved_rate < 0.95 * lat.rate ? " (overloaded)" : "";
    const isOutboxd = ["sqlite", "sqlite-fanout", "postgres"].includes(n);
    L.push(
      `| ${r.label} | ${dps} | ${r.ingest_events_per_s ? f0(r.ingest_events_per_s) : "–"} | ` +
        `${r.cpu_us_per_delivery != null ? f1(r.cpu_us_per_delivery) : "–"} | ` +
        `${r.peak_rss_mib != null ? f1(r.peak_rss_mib) : "–"} | ${lat ? ms(lat.p50_us) : "–"} | ` +
        `${lat ? ms(lat.p99_us) + over : "–"} | ${lat ? ms(lat.max_us) : "–"} | ` +
        `${isOutboxd && r.vs_ceiling ? r.vs_ceiling.toFixed(2) + "×" : "–"} | ` +
        `${isOutboxd && r.vs_peer ? r.vs_peer.toFixed(2) + "×" : "–"} |`,
    );
  }
  L.push("");
  L.push(
    "deliveries/s: deliveries ÷ (last receipt at the sink − first ingest request); for the " +
      "ceiling, wrk's requests/s. CPU: utime+stime of the delivering process only (outboxd, " +
      "or the peer's node process; not the database server) over the whole run ÷ deliveries. " +
      "Peak RSS: VmHWM. Latency: receipt at the sink − intended send time of the event, " +
      "joined by webhook-id, on a fresh store.",
  );
  if (targets.length) {
    L.push("", "| target (issue 4) | measured | met |", "|---|--:|:-:|");
    for (const x of targets)
      L.push(`| ${x.target} | ${x.measured} | ${x.met == null ? "–" : x.met ? "yes" : "no"} |`);
  }
  const notes = [];
  for (const n of names) {
    const r = rows[n];
    if (!r.available && r.detail) notes.push(`${n}: not available — ${r.detail}`);
    if (r.latency?.missing) notes.push(`${n}: ${r.latency.missing} latency events never reached the sink.`);
    if (r.ingest_errors) notes.push(`${n}: ${r.ingest_errors} events were refused at ingest (${r.ingest_first_error ?? ""}).`);
    if (r.latency?.errors) notes.push(`${n}: ${r.latency.errors} latency events were refused at ingest.`);
    if (r.latency && r.latency.achieved_rate < 0.95 * r.latency.rate)
      notes.push(
        `${n}: the latency run could not hold ${f0(r.latency.rate)} events/s — ingest ` +
          `sustained ${f0(r.latency.achieved_rate)}/s (ingest ack p50 ` +
          `${ms(r.latency.ingest_ack_p50_us)} ms from the intended send time), so its ` +
          `latency is mostly queueing before ingest.`,
      );
  }
  if (rows.peer?.peer) {
    const p = rows.peer.peer;
    notes.push(
      `peer settings: concurrency ${p.concurrency}, localQueue.size ${p.local_queue}, ` +
        `completeJobBatchDelay ${p.complete_batch_delay_ms} ms, NO_LOG_SUCCESS, undici Pool ` +
        `with ${p.concurrency} keep-alive connections; jobs added with add_jobs, ${s.batch} per transaction.`,
    );
  }
  if (notes.length) L.push("", ...notes.map((x) => `- ${x}`));
  L.push("", "![chart](latest.png)", "");
  writeFileSync(join(results, "latest.md"), L.join("\n"));

  // docs/performance.md shows the same table between its markers (when run.sh asks).
  const docs = process.env.BENCH_DOCS;
  if (docs && existsSync(docs)) {
    const begin = "<!-- bench:latest:begin -->", end = "<!-- bench:latest:end -->";
    const text = readFileSync(docs, "utf8");
    const a = text.indexOf(begin), b = text.indexOf(end);
    if (a >= 0 && b > a) {
      const body = L.slice(2).join("\n").replace("](latest.png)", "](../bench/results/latest.png)");
      writeFileSync(docs, text.slice(0, a + begin.length) + "\n" + body + text.slice(b));
    }
  }

  // ---- data for bench/report.gp ----
  const q = (x) => `"${x.replace(/"/g, "'")}"`;
  const short = {
    ceiling: "ceiling (wrk)",
    sqlite: "outboxd SQLite",
    "sqlite-fanout": `outboxd SQLite ×${rows["sqlite-fanout"]?.subscriptions ?? ""} subs`,
    postgres: "outboxd PostgreSQL",
    peer: "graphile-worker",
  };
  const dat = names.map((n) => `${q(short[n] ?? n)} ${rows[n].available ? rows[n].deliveries_per_s.toFixed(0) : 0}`);
  writeFileSync(join(results, "latest.dat"), dat.join("\n") + "\n");
  const lat = names
    .filter((n) => rows[n].available && rows[n].latency)
    .map((n) => `${q(short[n] ?? n)} ${ms(rows[n].latency.p50_us)} ${ms(rows[n].latency.p99_us)} ${ms(rows[n].latency.max_us)}`);
  writeFileSync(join(results, "latest-lat.dat"), (lat.length ? lat : ['"none" 0 0 0']).join("\n") + "\n");
  writeFileSync(join(results, "latest.stamp"), stamp.replace(/'/g, ""));
}

const [cmd, ...a] = process.argv.slice(2);
if (cmd === "latency") process.stdout.write(JSON.stringify(latency(a[0], a[1], a[2])) + "\n");
else if (cmd === "row") process.stdout.write(JSON.stringify(row(a[0], a[1], a[2])) + "\n");
else if (cmd === "brief") process.stdout.write(brief(readJson(a[0])) + "\n");
else if (cmd === "report") report(a[0], a[1]);
else {
  console.error("usage: node bench/analyze.mjs latency|row|brief|report ...");
  process.exit(2);
}
