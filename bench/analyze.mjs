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

const ORDER = ["ceiling", "sqlite", "sqlite-fanout", "postgres", "postgres-2", "postgres-3", "peer", "slow", "small"];
// The rows of outboxd against one PostgreSQL: 1, 2 and 3 instances.
const PG_ROWS = ["postgres", "postgres-2", "postgres-3"];

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
  "postgres-2": "outboxd, PostgreSQL, 1 subscription, 2 instances",
  "postgres-3": "outboxd, PostgreSQL, 1 subscription, 3 instances",
  peer: "peer: graphile-worker + undici, PostgreSQL",
  slow: "outboxd, SQLite, slow receivers",
  small: "outboxd, SQLite, Python http.server (default settings)",
};

// What every delivering row reports of its throughput run (tp: the run's .tp.json; secs:
// first ingest request to the last receipt or answer).
function runFigures(tp, secs) {
  return {
    end_to_end_s: secs,
    ingest_events_per_s: tp.ingest.events_per_s,
    ingest_s: (tp.ingest.end_us - tp.ingest.start_us) / 1e6,
    ingest_errors: tp.ingest.errors,
    cpu_us_per_delivery: ((tp.cpu_ticks / tp.hz) * 1e6) / Math.max(1, tp.deliveries),
    cpu_s: tp.cpu_ticks / tp.hz,
    peak_rss_mib: tp.vmhwm_kib / 1024,
  };
}

// The slow-receivers row: at most in_flight requests can be answered per delay,
// so in_flight / delay is the rate a perfect client reaches; the row is the fraction of it.
function slowRow(out, work) {
  const tp = readJson(join(work, "slow.tp.json"));
  const secs = (tp.last_answer_us - tp.ingest.start_us) / 1e6;
  const bound = tp.in_flight_setting / (tp.delay_ms / 1000);
  const dps = tp.deliveries / secs;
  Object.assign(out, {
    label: `outboxd, SQLite, slow receivers (${tp.subscriptions} subscriptions, answer after ${tp.delay_ms} ms)`,
    events: tp.events,
    subscriptions: tp.subscriptions,
    deliveries: tp.deliveries,
    deliveries_expected: tp.deliveries_expected,
    complete: tp.deliveries >= tp.deliveries_expected,
    in_flight_setting: tp.in_flight_setting,
    delay_ms: tp.delay_ms,
    timeout: tp.timeout,
    deliveries_per_s: dps,
    bound_per_s: bound,
    fraction: dps / bound,
    ...runFigures(tp, secs),
    rss_idle_mib: tp.rss_idle_kib / 1024,
    rss_busy_mib: tp.rss_busy_kib / 1024,
    busy_pending: tp.busy_pending,
    // (RSS with the most requests held − RSS before ingest) ÷ those requests: an upper
    // bound, since the store's caches and the queued deliveries grow meanwhile too.
    kib_per_request: tp.busy_pending > 0 ? (tp.rss_busy_kib - tp.rss_idle_kib) / tp.busy_pending : null,
    sink_max_pending: tp.max_pending,
    sink_max_connections: tp.max_connections,
    process: "outboxd",
  });
  Object.assign(out, slowRamp(work, tp, bound));
  if (tp.ingest.first_error) out.ingest_first_error = tp.ingest.first_error;
  return out;
}

// Several load generators' JSON (one per instance) as one: the first start to the last end.
function mergeIngest(parts) {
  const sum = (k) => parts.reduce((a, p) => a + (p[k] ?? 0), 0);
  const start_us = Math.min(...parts.map((p) => p.start_us));
  const end_us = Math.max(...parts.map((p) => p.end_us));
  const accepted = sum("accepted");
  const m = {
    mode: "ingest", start_us, end_us, events: sum("events"), accepted, errors: sum("errors"),
    requests: sum("requests"), conns: sum("conns"),
    events_per_s: end_us > start_us ? accepted / ((end_us - start_us) / 1e6) : 0,
    parts: parts.map((p) => ({ events: p.events, conns: p.conns, events_per_s: p.events_per_s, errors: p.errors })),
  };
  const fe = parts.find((p) => p.first_error);
  if (fe) m.first_error = fe.first_error;
  return m;
}

// The PostgreSQL probe of a row (run.sh pg_probe_*), per delivery: the server's CPU (every
// process of the server), WAL bytes, WAL fsyncs and commits; outboxd's sessions per instance.
function pgFigures(pg, tp, out) {
  const d = Math.max(1, tp.deliveries);
  const n = tp.instances || 1;
  return {
    cpu_s: pg.cpu_ticks / tp.hz,
    cpu_us_per_delivery: ((pg.cpu_ticks / tp.hz) * 1e6) / d,
    wal_bytes: pg.wal_bytes,
    wal_bytes_per_delivery: pg.wal_bytes / d,
    wal_syncs: pg.wal_syncs ?? null,
    wal_syncs_per_1000: pg.wal_syncs != null ? (pg.wal_syncs * 1000) / d : null,
    wal_writes: pg.wal_writes ?? null,
    wal_records_per_delivery: pg.wal_records != null ? pg.wal_records / d : null,
    wal_fpi: pg.wal_fpi ?? null,
    commits: pg.commits ?? null,
    commits_per_1000: pg.commits != null ? (pg.commits * 1000) / d : null,
    wal_syncs_per_s: pg.wal_syncs != null ? pg.wal_syncs / out.end_to_end_s : null,
    outboxd_sessions_max: pg.conn_max,
    outboxd_sessions_mean: pg.conn_mean,
    outboxd_sessions_samples: pg.conn_samples,
    sessions_per_instance_max: pg.conn_max / n,
    samples: pg.samples ?? null,
    autovacuum_samples: pg.autovacuum_samples ?? null,
    autovacuum_dbs: pg.autovacuum_dbs || null,
    // over all samples: outboxd's sessions running a statement, and of those waiting on a
    // heavyweight lock (rows, tuples, transactions) or on an internal LWLock
    active_sessions_sampled: pg.active_sessions_sampled ?? null,
    lock_waits_sampled: pg.lock_waits_sampled ?? null,
    lwlock_waits_sampled: pg.lwlock_waits_sampled ?? null,
    waits_sampled: pg.waits_sampled ?? null,
    total_cpu_us_per_delivery: ((pg.cpu_ticks + tp.cpu_ticks) / tp.hz) * 1e6 / d,
  };
}

// Where the slow row's time goes: the adaptive limits start at 4 per endpoint and double
// per round trip, so the sink holds max_in_flight only some seconds in. From the samples
// (time, answered, held every 0.2 s): when it first held 95% of max_in_flight, and the
// rate of answers from then until the last sample that still held 95%, beside the bound.
function slowRamp(work, tp, bound) {
  let lines;
  try {
    lines = readFileSync(join(work, "slow.samples.txt"), "utf8").trim().split("\n");
  } catch {
    return {};
  }
  const full = 0.95 * tp.in_flight_setting;
  const samples = lines.map((l) => l.split(" ").map(Number)).filter((x) => x.length >= 3);
  const first = samples.findIndex((x) => x[2] >= full);
  let last = -1;
  for (let i = samples.length - 1; i > first && first >= 0; i--)
    if (samples[i][2] >= full) {
      last = i;
      break;
    }
  if (first < 0) return { ramp_s: null };
  const out = { ramp_s: samples[first][0] - tp.ingest.start_us / 1e6 };
  if (last > first) {
    const rate = (samples[last][1] - samples[first][1]) / (samples[last][0] - samples[first][0]);
    out.full_rate_per_s = rate;
    out.full_fraction = rate / bound;
    out.full_seconds = samples[last][0] - samples[first][0];
  }
  return out;
}

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
  if (kind === "slow") return slowRow(out, work);
  if (kind === "small") {
    // a small receiver: outboxd's goodput against what wrk gets from the same program
    const tp = readJson(join(work, "small.tp.json"));
    const rx = tp.receiver ?? {};
    Object.assign(out, {
      label: "outboxd, SQLite, Python http.server (default settings)",
      events: tp.events,
      deliveries: rx.unique_ids ?? 0,
      deliveries_expected: tp.events,
      complete: (rx.unique_ids ?? 0) >= tp.events,
      deliveries_per_s: (rx.unique_ids ?? 0) / tp.seconds,
      duplicates: rx.duplicates ?? null,
      duplicates_retried: rx.duplicates_retried ?? null,
      dead: tp.dead,
      wrk_best_per_s: tp.wrk.best_rate,
      wrk_best_connections: tp.wrk.best_connections,
      wrk_minimal_headers_per_s: tp.wrk.minimal_headers_rate ?? null,
      process: "outboxd",
    });
    out.vs_wrk = out.wrk_best_per_s ? out.deliveries_per_s / out.wrk_best_per_s : null;
    return out;
  }
  const tp = readJson(join(work, `${name}.tp.json`));
  if (Array.isArray(tp.ingest)) tp.ingest = mergeIngest(tp.ingest);
  const secs = (tp.last_receipt_us - tp.ingest.start_us) / 1e6;
  Object.assign(out, {
    events: tp.events,
    subscriptions: tp.subscriptions,
    deliveries: tp.deliveries,
    deliveries_expected: tp.deliveries_expected,
    complete: tp.deliveries >= tp.deliveries_expected,
    deliveries_per_s: tp.deliveries / secs,
    ...runFigures(tp, secs),
    process: kind === "peer" ? "node (graphile-worker)" : "outboxd",
  });
  if (tp.ingest.first_error) out.ingest_first_error = tp.ingest.first_error;
  if (tp.instances) out.instances = tp.instances;
  if (tp.vmhwm_kib_sum && tp.instances > 1) out.peak_rss_mib_sum = tp.vmhwm_kib_sum / 1024;
  if (tp.ingest.parts) out.ingest_parts = tp.ingest.parts;
  const ids = maybeJson(join(work, `${name}.ids.json`));
  if (ids) {
    out.unique_ids = ids.unique_ids;
    out.duplicates = ids.duplicates;
    out.sink_requests = ids.requests;
  }
  const pg = maybeJson(join(work, `${name}.pg.json`));
  if (pg) out.postgres_server = pgFigures(pg, tp, out);
  const lat = maybeJson(join(work, `${name}.lat.json`));
  if (lat) out.latency = lat;
  // the probe of the latency run: single events at a fixed rate, on its own store
  const pgl = maybeJson(join(work, `${name}-lat.pg.json`));
  if (pgl && lat) {
    const d = lat.accepted, secs = lat.seconds;
    out.latency_postgres_server = {
      events: d, seconds: secs,
      cpu_us_per_delivery: ((pgl.cpu_ticks / tp.hz) * 1e6) / Math.max(1, d),
      wal_bytes_per_delivery: pgl.wal_bytes / Math.max(1, d),
      wal_syncs: pgl.wal_syncs, commits: pgl.commits,
      wal_syncs_per_1000: (pgl.wal_syncs * 1000) / Math.max(1, d),
      commits_per_1000: (pgl.commits * 1000) / Math.max(1, d),
      wal_syncs_per_s: pgl.wal_syncs / secs,
      sessions_per_instance_max: pgl.conn_max,
      samples: pgl.samples ?? null,
      autovacuum_samples: pgl.autovacuum_samples ?? null,
      autovacuum_dbs: pgl.autovacuum_dbs || null,
    };
  }
  if (kind === "peer") out.peer = maybeJson(join(work, "peer.config.json"));
  return out;
}

const f0 = (x) => (x == null ? "–" : Math.round(x).toLocaleString("en-US"));
const f1 = (x) =>
  x == null ? "–" : x.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });
const ms = (us) => (us == null ? "–" : (us / 1000).toFixed(2));
const ratio = (a, b) => (a && b ? `${(a / b).toFixed(2)}×` : "–");

function brief(r) {
  if (!r.available) return `[bench] ${r.row}: not available (${r.reason})`;
  let s = `[bench] ${r.row}: ${f0(r.deliveries_per_s)} deliveries/s`;
  if (r.fraction != null) s += ` (${r.fraction.toFixed(2)} of ${f0(r.bound_per_s)}), sink held ${f0(r.sink_max_pending)} at most`;
  if (r.kib_per_request != null) s += `, ${f1(r.kib_per_request)} KiB per request in flight`;
  if (r.ingest_events_per_s) s += `, ingest ${f0(r.ingest_events_per_s)} ev/s`;
  if (r.cpu_us_per_delivery != null) s += `, ${f1(r.cpu_us_per_delivery)} µs CPU/delivery`;
  if (r.peak_rss_mib != null) s += `, RSS ${f1(r.peak_rss_mib)} MiB`;
  if (r.duplicates != null && r.instances > 1) s += `, ${f0(r.unique_ids)} distinct ids, ${f0(r.duplicates)} duplicates`;
  const p = r.postgres_server;
  if (p) s += `; server ${f1(p.cpu_us_per_delivery)} µs CPU, ${f0(p.wal_bytes_per_delivery)} WAL bytes, ${p.wal_syncs_per_1000 != null ? f1(p.wal_syncs_per_1000) : "–"} fsyncs/1000, ${p.commits_per_1000 != null ? f1(p.commits_per_1000) : "–"} commits/1000 per delivery, ${p.outboxd_sessions_max} outboxd sessions`;
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
  for (const n of ["sqlite", "sqlite-fanout", ...PG_ROWS]) {
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
  // Each target belongs to a set: the first performance targets ("round 1"), those of
  // performance round 2 ("round 2"), and the small receiver's ("small receiver").
  const t = (what, measured, good, set = "round 1") =>
    targets.push({ target: what, measured, met: measured === "–" ? null : good, set });
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

  // Performance round 2's table: ratios from this same run.
  if (rows.sqlite?.available) {
    const r = rows.sqlite;
    t("SQLite 1 subscription, ÷ ceiling: ≥ 0.25×", r.vs_ceiling ? `${r.vs_ceiling.toFixed(2)}×` : "–", (r.vs_ceiling ?? 0) >= 0.25, "round 2");
    t("SQLite outboxd CPU per delivery: ≤ 35 µs", `${f1(r.cpu_us_per_delivery)} µs`, r.cpu_us_per_delivery <= 35, "round 2");
    t("SQLite ÷ peer: ≥ 5×", r.vs_peer ? `${r.vs_peer.toFixed(2)}×` : "–", (r.vs_peer ?? 0) >= 5, "round 2");
  }
  if (rows.postgres?.available) {
    const r = rows.postgres;
    t("PostgreSQL 1 subscription, ÷ ceiling: ≥ 0.20×", r.vs_ceiling ? `${r.vs_ceiling.toFixed(2)}×` : "–", (r.vs_ceiling ?? 0) >= 0.2, "round 2");
  }
  if (rows.sqlite?.latency && rows.postgres?.latency) {
    const a = rows.sqlite.latency.p99_us, b = rows.postgres.latency.p99_us;
    t("p99 at 1,000 events/s, SQLite ≤ 5 ms / PostgreSQL ≤ 10 ms", `${ms(a)} / ${ms(b)} ms`, a <= 5000 && b <= 10000, "round 2");
  }
  if (rows.slow?.available) {
    const r = rows.slow;
    t(`slow receivers: deliveries/s ≥ 0.85 of max_in_flight ÷ delay`, r.fraction.toFixed(2), r.fraction >= 0.85, "round 2");
    t("slow receivers: peak RSS ≤ 160 MiB", `${f1(r.peak_rss_mib)} MiB`, r.peak_rss_mib <= 160, "round 2");
    if (r.kib_per_request != null)
      t("slow receivers: ≤ 16 KiB per request in flight", `${f1(r.kib_per_request)} KiB`, r.kib_per_request <= 16, "round 2");
  }

  if (rows.small?.available && rows.small.vs_wrk != null) {
    const r = rows.small;
    t("small receiver (Python http.server): goodput ≥ 0.8 of wrk's best, 0 duplicates, 0 dead",
      `${r.vs_wrk.toFixed(2)}, ${r.duplicates} dup, ${r.dead} dead`,
      r.vs_wrk >= 0.8 && r.duplicates === 0 && r.dead === 0, "small receiver");
  }

  const json = { machine: m, rows: names.map((n) => rows[n]), targets };
  // The slow and small rows have columns of their own: tables of their own, no bar.
  const main = names.filter((n) => n !== "slow" && n !== "small");
  writeFileSync(join(results, "latest.json"), JSON.stringify(json, null, 2) + "\n");

  // ---- the table ----
  const L = [];
  L.push("# outboxd benchmark — latest run", "");
  L.push(`Machine: ${m.cpu_model}, ${m.cores} cores, kernel ${m.kernel}  `);
  L.push(`Load average (1/5/15 min): ${m.load_before} before, ${m.load_after} after  `);
  L.push(`Commit: ${m.commit} · ${m.date} · \`make bench\` took ${m.duration_s} s  `);
  if (main.length) L.push(
    `Workload: ${f0(s.events)} events of ~200 bytes, batches of ${s.batch} over ${s.conns} ` +
      `connections; fan-out ${f0(s.fanout_events)} events × ${s.fanout_subs} subscriptions; ` +
      `latency at ${s.lat_rate} events/s for ${s.lat_seconds} s ` +
      `(${s.lat_batch > 1 ? `batches of ${s.lat_batch}` : "single events"}); sink: ` +
      `test_receiver --threads ${s.sink_threads}; ${s.build} build.`,
    "",
  );
  if (main.length) L.push(
    "| row | deliveries/s | ingest events/s | CPU µs/delivery | peak RSS MiB | latency p50 ms | p99 ms | max ms | outboxd/ceiling | outboxd/peer |",
    "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|",
  );
  for (const n of main) {
    const r = rows[n];
    if (!r.available) {
      L.push(`| ${r.label ?? LABELS[n] ?? n} | not available (${r.reason}) | | | | | | | | |`);
      continue;
    }
    const dps = f0(r.deliveries_per_s) + (r.complete === false ? ` (incomplete: ${f0(r.deliveries)} of ${f0(r.deliveries_expected)})` : "");
    const lat = r.latency;
    const over = lat && lat.achieved_rate < 0.95 * lat.rate ? " (overloaded)" : "";
    const isOutboxd = ["sqlite", "sqlite-fanout", ...PG_ROWS].includes(n);
    L.push(
      `| ${r.label} | ${dps} | ${r.ingest_events_per_s ? f0(r.ingest_events_per_s) : "–"} | ` +
        `${r.cpu_us_per_delivery != null ? f1(r.cpu_us_per_delivery) : "–"} | ` +
        `${r.peak_rss_mib != null ? f1(r.peak_rss_mib) : "–"} | ${lat ? ms(lat.p50_us) : "–"} | ` +
        `${lat ? ms(lat.p99_us) + over : "–"} | ${lat ? ms(lat.max_us) : "–"} | ` +
        `${isOutboxd && r.vs_ceiling ? r.vs_ceiling.toFixed(2) + "×" : "–"} | ` +
        `${isOutboxd && r.vs_peer ? r.vs_peer.toFixed(2) + "×" : "–"} |`,
    );
  }
  if (main.length) L.push("",
    "deliveries/s: deliveries ÷ (last receipt at the sink − first ingest request); for the " +
      "ceiling, wrk's requests/s. CPU: utime+stime of the delivering process only (outboxd, " +
      "or the peer's node process; not the database server) over the whole run ÷ deliveries. " +
      "Peak RSS: VmHWM. Latency: receipt at the sink − intended send time of the event, " +
      "joined by webhook-id, on a fresh store.",
  );
  const multi = main.filter((n) => rows[n].available && rows[n].instances > 1);
  if (multi.length) L.push("",
    "With 2 and 3 instances: the instances share one secret key and one database; the " +
      "events are spread over their APIs (one load generator per instance, " +
      `${s.conns} connections in all), since the instance that stores an event leases its ` +
      "deliveries to itself first; deliveries/s runs to the last distinct webhook-id at the " +
      "sink; CPU is summed over the instances, peak RSS is the largest instance's; no " +
      "latency run. The instances, the PostgreSQL server, the sink and the load generators " +
      `share this machine's ${m.cores} cores: these rows measure the instances' contention ` +
      "on one server, not scale-out. " +
      multi.map((n) => `${n}: ${f0(rows[n].unique_ids)} distinct webhook-ids of ` +
        `${f0(rows[n].deliveries_expected)}, ${f0(rows[n].duplicates)} duplicates, ` +
        `peak RSS ${f1(rows[n].peak_rss_mib_sum)} MiB summed`).join("; ") + ".",
  );
  const pgRows = names.filter((n) => rows[n]?.available && rows[n].postgres_server);
  if (pgRows.length) {
    L.push("",
      "PostgreSQL server per delivery (the throughput runs above; the server at its defaults, fsync and synchronous_commit on):",
      "",
      "| row | instances | deliveries/s | outboxd CPU µs/delivery (all instances) | PostgreSQL CPU µs/delivery | WAL bytes/delivery | WAL fsyncs per 1,000 deliveries | commits per 1,000 deliveries | outboxd sessions per instance (most sampled) |",
      "|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    );
    for (const n of pgRows) {
      const r = rows[n], p = r.postgres_server;
      const isO = PG_ROWS.includes(n);
      L.push(
        `| ${r.label} | ${isO ? (r.instances ?? 1) : "–"} | ${f0(r.deliveries_per_s)} | ${f1(r.cpu_us_per_delivery)}${isO ? "" : " (node)"} | ` +
          `${f1(p.cpu_us_per_delivery)} | ${f0(p.wal_bytes_per_delivery)} | ` +
          `${p.wal_syncs_per_1000 != null ? f1(p.wal_syncs_per_1000) : "–"} | ` +
          `${p.commits_per_1000 != null ? f1(p.commits_per_1000) : "–"} | ` +
          `${isO ? (p.sessions_per_instance_max).toFixed(1) : "–"} |`,
      );
      const q = r.latency_postgres_server;
      if (q) L.push(
        `| ${r.label}, latency run: ${f0(s.lat_rate)} single events/s for ${s.lat_seconds} s | 1 | ${f0(q.events / q.seconds)} | – | ` +
          `${f1(q.cpu_us_per_delivery)} | ${f0(q.wal_bytes_per_delivery)} | ${f1(q.wal_syncs_per_1000)} | ` +
          `${f1(q.commits_per_1000)} | ${q.sessions_per_instance_max.toFixed(1)} |`,
      );
    }
    L.push("",
      "PostgreSQL CPU: utime+stime of every process of the bench's server (backends, walwriter, " +
        "checkpointer, autovacuum; the children that exited meanwhile through the postmaster's " +
        "cutime+cstime), first ingest request to last receipt, ÷ deliveries. WAL bytes: " +
        "pg_wal_lsn_diff of pg_current_wal_lsn() over the same run. WAL fsyncs: pg_stat_wal's " +
        "wal_sync; commits: pg_stat_database's xact_commit of the row's database (both read " +
        "once the row's clients stopped, so they include the stop). Sessions: pg_stat_activity " +
        `rows with application_name 'outboxd', sampled every 0.5 s during the run (the most ` +
        "seen ÷ instances). The latency run's line: the same probe from its first request to " +
        "the join of its receipts, on its own database, ÷ the events accepted; its WAL fsyncs " +
        "are those of single events acknowledged one request at a time.",
    );
    const av = [];
    for (const n of pgRows) {
      for (const [what, p] of [[n, rows[n].postgres_server], [`${n} latency run`, rows[n].latency_postgres_server]]) {
        if (p?.autovacuum_samples) av.push(`${what}: ${p.autovacuum_samples} of ${p.samples} samples (${p.autovacuum_dbs})`);
      }
    }
    const lw = pgRows.filter((n) => PG_ROWS.includes(n) && rows[n].postgres_server.active_sessions_sampled != null)
      .map((n) => { const p = rows[n].postgres_server;
        const w = Object.entries(p.waits_sampled ?? {}).map(([k, v]) => `${k} ${v}`).join(", ");
        return `${n} ${p.lock_waits_sampled} on a lock and ${p.lwlock_waits_sampled} on an LWLock of ${p.active_sessions_sampled} active${w ? ` (${w})` : ""}`; });
    if (lw.length) L.push("", `outboxd's sessions seen running a statement in those samples, and of them waiting: ${lw.join("; ")}.`);
    L.push("", av.length
      ? `Autovacuum workers ran during some of these runs, and their CPU is in the server's figure: ${av.join("; ")}.`
      : "No autovacuum worker was seen running in any sample of these runs.");
  }
  const targetTable = (set) => {
    const xs = targets.filter((x) => x.set === set);
    if (!xs.length) return;
    L.push("", `| target (${set}) | measured | met |`, "|---|--:|:-:|");
    for (const x of xs)
      L.push(`| ${x.target} | ${x.measured} | ${x.met == null ? "–" : x.met ? "yes" : "no"} |`);
  };
  targetTable("round 1");
  if (rows.slow) {
    const r = rows.slow;
    if (main.length) L.push("");
    L.push(
      `Slow receivers: ${f0(s.slow_events)} events × ${s.slow_subs} subscriptions on SQLite, ` +
        `max_in_flight ${f0(s.slow_in_flight)}, subscriber bench_slow_sink answering every ` +
        `request after ${s.slow_delay_ms} ms, timeout ${s.slow_timeout}.`,
      "",
      "| row | deliveries/s | of max_in_flight ÷ delay | CPU µs/delivery | peak RSS MiB | KiB per request in flight | most held at the sink |",
      "|---|--:|--:|--:|--:|--:|--:|",
    );
    if (!r.available) L.push(`| ${r.label} | not available (${r.reason}) | | | | | |`);
    else
      L.push(
        `| ${r.label} | ${f0(r.deliveries_per_s)}` +
          `${r.complete === false ? ` (incomplete: ${f0(r.deliveries)} of ${f0(r.deliveries_expected)})` : ""} | ` +
          `${r.fraction.toFixed(2)} of ${f0(r.bound_per_s)} | ${f1(r.cpu_us_per_delivery)} | ` +
          `${f1(r.peak_rss_mib)} | ${r.kib_per_request != null ? f1(r.kib_per_request) : "–"} | ` +
          `${f0(r.sink_max_pending)} |`,
      );
    L.push(
      "",
      "deliveries/s: deliveries ÷ (last answer of the sink − first ingest request); the bound " +
        "is max_in_flight ÷ the sink's delay. KiB per request: (outboxd's RSS when the sink " +
        "held the most requests − its RSS before ingest) ÷ those requests, an upper bound (the " +
        "store's cache and the queued deliveries grow meanwhile). Most held: the most requests " +
        "the sink was answering at once.",
    );
    if (r.available && r.ramp_s != null)
      L.push(
        "",
        `The limits start at 4 per endpoint and at most double per round trip (1 s here): the ` +
          `sink first held 95% of max_in_flight ${r.ramp_s.toFixed(1)} s after the first ingest ` +
          `request` +
          (r.full_rate_per_s != null
            ? `; while it held that many (${r.full_seconds.toFixed(1)} s), ` +
              `${f0(r.full_rate_per_s)} deliveries/s = ${r.full_fraction.toFixed(2)} of the bound.`
            : "."),
      );
  }
  targetTable("round 2");
  if (rows.small) {
    const r = rows.small;
    L.push(
      "",
      "Small receiver: Python's http.server as a user writes it (ThreadingHTTPServer, HTTP/1.0, " +
        "listen backlog 5), outboxd at default settings (adaptive concurrency, " +
        "docs/flow-control.md); wrk's best over 4 to 512 connections against the same program " +
        "(bench/small_receiver.sh), its requests with outboxd's header set (the receiver " +
        "parses the same headers for both). deliveries/s: events ÷ (the receiver's answer to " +
        "the last new webhook-id − the first ingest request); wrk's: 2xx answers ÷ its run.",
      "",
      "| row | deliveries/s | wrk's best /s (connections) | outboxd/wrk | duplicates (recorded retries) | dead |",
      "|---|--:|--:|--:|--:|--:|",
    );
    if (!r.available) L.push(`| ${r.label ?? "small"} | not available (${r.reason}) | | | | |`);
    else
      L.push(
        `| ${r.label} | ${f0(r.deliveries_per_s)}` +
          `${r.complete === false ? ` (incomplete: ${f0(r.deliveries)} of ${f0(r.deliveries_expected)})` : ""} | ` +
          `${f0(r.wrk_best_per_s)} (${r.wrk_best_connections}) | ` +
          `${r.vs_wrk != null ? r.vs_wrk.toFixed(2) : "–"} | ${r.duplicates} (${r.duplicates_retried}) | ${r.dead} |`,
      );
    if (r.available && r.wrk_minimal_headers_per_s)
      L.push(
        "",
        `With only 3 headers (Content-Type, webhook-id, outboxd-attempt) instead of outboxd's 9, ` +
          `wrk gets ${f0(r.wrk_minimal_headers_per_s)}/s at ${r.wrk_best_connections} ` +
          `connections from the same receiver: outboxd's goodput is ` +
          `${(r.deliveries_per_s / r.wrk_minimal_headers_per_s).toFixed(2)} of that.`,
      );
  }
  targetTable("small receiver");
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
    "postgres-2": "outboxd PostgreSQL ×2 inst.",
    "postgres-3": "outboxd PostgreSQL ×3 inst.",
    peer: "graphile-worker",
  };
  const dat = main.map((n) => `${q(short[n] ?? n)} ${rows[n].available ? rows[n].deliveries_per_s.toFixed(0) : 0}`);
  writeFileSync(join(results, "latest.dat"), (dat.length ? dat : ['"none" 0']).join("\n") + "\n");
  const lat = main
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
