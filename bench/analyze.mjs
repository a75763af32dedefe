// analyze.mjs: the arithmetic of bench/run.sh — latency joins, rows, rounds and the report.
//
//   node bench/analyze.mjs latency RATE.txt RECEIPTS.txt RATE.json
//       joins "id intended_us sent_us acked_us" lines with the sink's receipts ("path id
//       received_at_us", or "id received_at_us"; the first receipt of each id) and prints
//       percentiles of receipt − intended send time and of receipt − ingest acknowledgement.
//   node bench/analyze.mjs row NAME KIND WORKDIR      one row's JSON from its raw files; KIND
//                                                     custom: a row of its own shape, read
//                                                     from WORKDIR/NAME.row.json as its
//                                                     function wrote it, whose report_lines
//                                                     (markdown) the report prints as they are
//   node bench/analyze.mjs brief ROW.json             a one-line summary for the log
//   node bench/analyze.mjs report BASEDIR RESULTS     latest.json, latest.md, and the data
//                                                     files bench/report.gp plots, from the
//                                                     rounds (BASEDIR/r1 ... rN) and the rows
//                                                     run once (BASEDIR/once); with
//                                                     BENCH_DOCS=FILE, also the table
//                                                     between FILE's bench:latest markers
//
// Definitions, used everywhere below and stated in the report:
//   delivered       a distinct (path, webhook-id) pair at the sink; further requests with a
//                   pair already seen are duplicates;
//   steady window   the deliveries after the first WINDOW_SKIP% (the warm-up, discarded) ÷
//                   the time from the receipt that completes that WINDOW_SKIP% to the last
//                   receipt; "end to end" is deliveries ÷ (last receipt − first ingest
//                   request);
//   CPU             utime+stime per delivery of each process involved over the whole run
//                   (first ingest request to last receipt);
//   a ratio         taken within a round (both figures from the same round), then the median
//                   and the range over the rounds.
//
// It computes; it must not measure (no timing happens here).

import { readFileSync, writeFileSync, existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { pct, f0, f1, ms } from "./format.mjs";

const readJson = (p) => JSON.parse(readFileSync(p, "utf8"));
const maybeJson = (p) => (existsSync(p) ? readJson(p) : null);

const ROUND_ORDER = ["ceiling", "sqlite", "postgres", "graphile", "pgboss"];
const ONCE_ORDER = ["sqlite-fanout", "postgres-2", "postgres-3", "latency", "slow", "small"];
const PEERS = ["graphile", "pgboss"];
// The rows of outboxd against one PostgreSQL: 1, 2 and 3 instances.
const PG_ROWS = ["postgres", "postgres-2", "postgres-3"];
const OUTBOXD_ROWS = ["sqlite", "sqlite-fanout", ...PG_ROWS];

// The sink's receipts, "path id µs" (or "id µs"): the first receipt of each key.
function firstReceipts(path) {
  const first = new Map();
  for (const line of readFileSync(path, "utf8").split("\n")) {
    const sp = line.lastIndexOf(" ");
    if (sp < 0) continue;
    const key = line.slice(0, sp);
    if (!first.has(key)) first.set(key, Number(line.slice(sp + 1)));
  }
  return first;
}

function latency(ratePath, receiptsPath, rateJsonPath) {
  // the join is by webhook-id: the key's last word (the latency runs have one path)
  const first = new Map();
  for (const [key, t] of firstReceipts(receiptsPath)) {
    const id = key.slice(key.lastIndexOf(" ") + 1);
    if (!first.has(id) || first.get(id) > t) first.set(id, t);
  }
  const lat = [], fromAck = [];
  let missing = 0;
  for (const line of readFileSync(ratePath, "utf8").split("\n")) {
    if (!line) continue;
    const [id, intended, , acked] = line.split(" ");
    const r = first.get(id);
    if (r === undefined) missing++;
    else {
      lat.push(r - Number(intended));
      if (acked !== undefined) fromAck.push(r - Number(acked));
    }
  }
  lat.sort((a, b) => a - b);
  fromAck.sort((a, b) => a - b);
  const gen = readJson(rateJsonPath);
  return {
    rate: gen.rate, achieved_rate: gen.events_per_s, batch: gen.batch,
    seconds: (gen.end_us - gen.start_us) / 1e6, sent: gen.events,
    accepted: gen.accepted, errors: gen.errors, late_sends: gen.late_requests,
    samples: lat.length, missing,
    p50_us: pct(lat, 0.5), p90_us: pct(lat, 0.9), p99_us: pct(lat, 0.99),
    p999_us: pct(lat, 0.999), max_us: lat.length ? lat[lat.length - 1] : null,
    // receipt − the ingest acknowledgement (the 2xx of outboxd's API, the peer's COMMIT):
    // the delivery path alone, without the wait for the acknowledgement
    ack_p50_us: pct(fromAck, 0.5), ack_p99_us: pct(fromAck, 0.99),
    ack_max_us: fromAck.length ? fromAck[fromAck.length - 1] : null,
    ingest_ack_p50_us: gen.ack_p50_us, ingest_ack_p99_us: gen.ack_p99_us,
  };
}

// The steady window of a throughput run (see the definitions above), from its receipts.
function steadyWindow(receiptsPath, skipPct, ingestStartUs) {
  if (!existsSync(receiptsPath)) return null;
  const times = [...firstReceipts(receiptsPath).values()].sort((a, b) => a - b);
  const n = times.length;
  if (n < 2) return null;
  const k0 = Math.min(n - 2, Math.floor((n * skipPct) / 100));
  const secs = (times[n - 1] - times[k0]) / 1e6;
  return {
    receipts_distinct: n,
    skip_pct: skipPct,
    window_s: secs,
    window_deliveries: n - 1 - k0,
    deliveries_per_s: secs > 0 ? (n - 1 - k0) / secs : null,
    warmup_s: (times[k0] - ingestStartUs) / 1e6,
  };
}

const LABELS = {
  ceiling: "ceiling: wrk -> sink",
  sqlite: "outboxd, SQLite (embedded store), 1 subscription",
  "sqlite-fanout": "outboxd, SQLite, fan-out",
  postgres: "outboxd, PostgreSQL, 1 subscription",
  "postgres-2": "outboxd, PostgreSQL, 1 subscription, 2 instances",
  "postgres-3": "outboxd, PostgreSQL, 1 subscription, 3 instances",
  graphile: "peer: graphile-worker + undici, PostgreSQL",
  pgboss: "peer: pg-boss + undici, PostgreSQL",
  latency: "latency",
  slow: "outboxd, SQLite, slow receivers",
  small: "outboxd, SQLite, Python http.server (default settings)",
};
const SHORT = {
  ceiling: "ceiling", sqlite: "outboxd SQLite", postgres: "outboxd PostgreSQL",
  graphile: "graphile-worker", pgboss: "pg-boss", "sqlite-fanout": "outboxd SQLite fan-out",
  "postgres-2": "outboxd PostgreSQL ×2", "postgres-3": "outboxd PostgreSQL ×3",
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
    peak_rss_mib: (tp.memory?.vmhwm_kib_max ?? tp.vmhwm_kib) / 1024,
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

// CPU per delivery of every process of a throughput run (µs): the deliverers, the
// PostgreSQL server, the ingest client; their sum; the sink apart.
function cpuFigures(tp, pg) {
  const d = Math.max(1, tp.deliveries);
  const us = (ticks) => (ticks == null ? null : ((ticks / tp.hz) * 1e6) / d);
  const c = {
    deliverers: us(tp.cpu_ticks),
    postgres: pg ? us(pg.cpu_ticks) : null,
    ingest_client: us(tp.ingest_ticks),
    sink: us(tp.sink_ticks),
  };
  c.sum = c.deliverers + (c.postgres ?? 0) + (c.ingest_client ?? 0);
  return c;
}

function row(name, kind, work) {
  const out = { row: name, label: LABELS[name] ?? name, available: true };
  const skip = Number(process.env.WINDOW_SKIP ?? 10);
  if (kind === "ceiling") {
    const w = readJson(join(work, "ceiling.wrk.json"));
    const s = readJson(join(work, "ceiling.sink.json"));
    const ids = maybeJson(join(work, "ceiling.ids.json")) ?? {};
    const secs = w.duration_us / 1e6;
    const d = ids.unique_ids ?? w.requests - w.status_errors;
    const us = (t) => ((t / s.hz) * 1e6) / Math.max(1, d);
    Object.assign(out, {
      deliveries: d,
      deliveries_per_s: d / secs,
      wrk_requests_per_s: w.requests / secs,
      requests: w.requests,
      status_errors: w.status_errors,
      socket_errors: w.socket_errors,
      duplicates: ids.duplicates ?? null,
      seconds: secs,
      conns: s.conns,
      cpu: { load_generator: us(s.wrk_ticks), sink: us(s.sink_ticks) },
    });
    return out;
  }
  if (kind === "slow") return slowRow(out, work);
  if (kind === "custom") return { ...out, ...readJson(join(work, `${name}.row.json`)) };
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
  if (kind === "latency") {
    out.runs = {};
    for (const t of ["sqlite", "postgres", "graphile", "pgboss"]) {
      const lat = maybeJson(join(work, `lat-${t}.lat.json`));
      if (!lat) continue;
      const r = { ...lat, label: LABELS[t] };
      const cfg = maybeJson(join(work, `${t}-${t}_lat.config.json`));
      if (cfg) r.peer = cfg;
      const pgl = maybeJson(join(work, `lat-${t}.pg.json`));
      if (pgl) {
        const d = Math.max(1, lat.accepted);
        r.postgres_server = {
          cpu_us_per_delivery: ((pgl.cpu_ticks / Number(process.env.HZ || 100)) * 1e6) / d,
          wal_bytes_per_delivery: pgl.wal_bytes / d,
          wal_syncs_per_1000: (pgl.wal_syncs * 1000) / d,
          commits_per_1000: (pgl.commits * 1000) / d,
          sessions_per_instance_max: pgl.conn_max,
        };
      }
      out.runs[t] = r;
    }
    out.available = Object.keys(out.runs).length > 0;
    if (!out.available) out.reason = "no latency run finished";
    return out;
  }
  const tp = readJson(join(work, `${name}.tp.json`));
  if (Array.isArray(tp.ingest)) tp.ingest = mergeIngest(tp.ingest);
  const secs = (tp.last_receipt_us - tp.ingest.start_us) / 1e6;
  const win = steadyWindow(join(work, `${name}.receipts.txt`), skip, tp.ingest.start_us);
  const pg = maybeJson(join(work, `${name}.pg.json`));
  Object.assign(out, {
    events: tp.events,
    subscriptions: tp.subscriptions,
    deliveries: tp.deliveries,
    deliveries_expected: tp.deliveries_expected,
    complete: tp.deliveries >= tp.deliveries_expected,
    deliveries_per_s: win?.deliveries_per_s ?? tp.deliveries / secs,
    end_to_end_per_s: tp.deliveries / secs,
    window: win,
    ...runFigures(tp, secs),
    cpu: cpuFigures(tp, pg),
    memory_mib: tp.memory ? {
      vmhwm_sum: tp.memory.vmhwm_kib_sum / 1024,
      vmhwm_max: tp.memory.vmhwm_kib_max / 1024,
      rss_anon_sum: tp.memory.rss_anon_kib_sum / 1024,
      pss_sum: tp.memory.pss_kib_sum / 1024,
    } : null,
    process: kind === "peer" ? `node (${name})` : "outboxd",
  });
  if (tp.ingest.first_error) out.ingest_first_error = tp.ingest.first_error;
  if (tp.instances) out.instances = tp.instances;
  if (tp.ingest.parts) out.ingest_parts = tp.ingest.parts;
  const ids = maybeJson(join(work, `${name}.ids.json`));
  if (ids) {
    out.unique_ids = ids.unique_ids;
    out.duplicates = ids.duplicates;
    out.sink_requests = ids.requests;
    // outboxd's own count of the requests it made (its attempts, every result class):
    // those beyond one per delivery are recorded retries; so are requests written again on
    // a new connection within an attempt (outboxd_http_resent_total: the attempt's cause
    // says so); duplicates beyond both were sent without a record
    const metrics = join(work, `${name}.metrics.txt`);
    const attempts = metricSum(metrics, "outboxd_attempts_total");
    const resent = metricSum(metrics, "outboxd_http_resent_total") ?? 0;
    if (attempts != null && ids.unique_ids != null && ids.duplicates != null)
      out.duplicates_unrecorded = Math.max(0, ids.duplicates - Math.max(0, attempts - ids.unique_ids) - resent);
  }
  if (pg) out.postgres_server = pgFigures(pg, tp, out);
  if (kind === "peer") out.peer = maybeJson(join(work, `${name}.config.json`));
  return out;
}

// The sum of a Prometheus counter's series in a /metrics scrape, or null without the file.
function metricSum(file, name) {
  let text;
  try { text = readFileSync(file, "utf8"); } catch { return null; }
  let sum = null;
  for (const line of text.split("\n")) {
    if (!line.startsWith(name + "{") && !line.startsWith(name + " ")) continue;
    const v = Number(line.slice(line.lastIndexOf(" ") + 1));
    if (Number.isFinite(v)) sum = (sum ?? 0) + v;
  }
  return sum;
}

const f2 = (x) => (x == null ? "–" : x.toFixed(2));
const times = (x) => (x == null ? "–" : `${x.toFixed(2)}×`);
// A ratio set against a bound: a third decimal where two would round it onto the bound
// (0.195× is not "0.20×" beside a "no").
const timesVs = (x, bound) =>
  x != null && Math.abs(x - bound) < 0.005 && x !== bound ? `${x.toFixed(3)}×` : times(x);

function brief(r) {
  if (!r.available) return `[bench] ${r.row}: not available (${r.reason})`;
  if (r.runs) {
    return `[bench] latency: ` + Object.entries(r.runs).map(([t, l]) =>
      `${t} ${f0(l.achieved_rate)}/s p50 ${ms(l.p50_us)} p99 ${ms(l.p99_us)} ms (ack→receipt p99 ${ms(l.ack_p99_us)})`).join("; ");
  }
  if (r.report_lines && r.deliveries_per_s == null)
    return `[bench] ${r.row}:\n` + r.report_lines.filter((l) => l.startsWith("|") && !l.startsWith("|-")).join("\n");
  let s = `[bench] ${r.row}: ${f0(r.deliveries_per_s)} deliveries/s`;
  if (r.end_to_end_per_s) s += ` (end to end ${f0(r.end_to_end_per_s)})`;
  if (r.fraction != null) s += ` (${r.fraction.toFixed(2)} of ${f0(r.bound_per_s)}), sink held ${f0(r.sink_max_pending)} at most`;
  if (r.kib_per_request != null) s += `, ${f1(r.kib_per_request)} KiB per request in flight`;
  if (r.ingest_events_per_s) s += `, ingest ${f0(r.ingest_events_per_s)} ev/s`;
  if (r.cpu?.sum != null) s += `, CPU µs/delivery ${f1(r.cpu.deliverers)} + server ${f1(r.cpu.postgres)} + client ${f1(r.cpu.ingest_client)} = ${f1(r.cpu.sum)}`;
  else if (r.cpu_us_per_delivery != null) s += `, ${f1(r.cpu_us_per_delivery)} µs CPU/delivery`;
  if (r.memory_mib) s += `, PSS ${f1(r.memory_mib.pss_sum)} MiB`;
  else if (r.peak_rss_mib != null) s += `, RSS ${f1(r.peak_rss_mib)} MiB`;
  if (r.duplicates != null) s += `, ${f0(r.duplicates)} duplicates`;
  if (r.duplicates && r.duplicates_unrecorded != null) s += ` (${f0(r.duplicates_unrecorded)} not recorded as attempts)`;
  if (r.complete === false) s += ` (INCOMPLETE: ${r.deliveries} of ${r.deliveries_expected})`;
  return s;
}

// ---- rounds ----------------------------------------------------------------------------
const median = (xs) => {
  const v = xs.filter((x) => x != null && Number.isFinite(x)).sort((a, b) => a - b);
  if (!v.length) return null;
  const m = Math.floor(v.length / 2);
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
};
function stats(xs) {
  const v = xs.filter((x) => x != null && Number.isFinite(x));
  return v.length ? { median: median(v), min: Math.min(...v), max: Math.max(...v), n: v.length, values: xs } : null;
}
// "median (min–max)", or the one value when there is one round
function mr(st, fmt) {
  if (!st) return "–";
  if (st.n === 1 || fmt(st.min) === fmt(st.max)) return fmt(st.median);
  return `${fmt(st.median)} (${fmt(st.min)}–${fmt(st.max)})`;
}
const get = (o, path) => path.split(".").reduce((a, k) => (a == null ? a : a[k]), o);

// What a row's commits wait for, beside its figures: "ingest / claims and results" (outboxd)
// or "producer's adds / worker's fetches and completions" (the peers, as their sessions
// reported synchronous_commit). The table of commits in the report says it in full.
function commitsOf(n, peer, s) {
  if (n === "ceiling") return "–";
  if (n.startsWith("sqlite") || n === "slow" || n === "small") return "FULL / NORMAL";
  if (n.startsWith("postgres")) return "on / off";
  const sc = peer?.ready?.map((x) => x.synchronous_commit).filter((x, i, xs) => xs.indexOf(x) === i).join("/");
  return `on / ${sc ?? s.peer_sync_commit}`;
}

function readRows(dir) {
  const rows = {};
  const d = join(dir, "rows");
  if (!existsSync(d)) return rows;
  for (const f of readdirSync(d)) {
    const r = readJson(join(d, f));
    rows[r.row] = r;
  }
  return rows;
}

function report(base, results) {
  const m = readJson(join(base, "machine.json"));
  const s = m.settings;
  const rounds = [];
  for (let k = 1; existsSync(join(base, `r${k}`)); k++)
    rounds.push({ k, info: maybeJson(join(base, `r${k}`, "round.json")) ?? {}, rows: readRows(join(base, `r${k}`)) });
  const once = readRows(join(base, "once"));
  const ok = (r) => r?.available && r.complete !== false;

  // every round row: its figures over the rounds
  const roundNames = ROUND_ORDER.filter((n) => rounds.some((r) => r.rows[n]))
    .concat([...new Set(rounds.flatMap((r) => Object.keys(r.rows)))].filter((n) => !ROUND_ORDER.includes(n)));
  const FIG = ["deliveries_per_s", "end_to_end_per_s", "ingest_events_per_s", "duplicates",
    "duplicates_unrecorded",
    "cpu.deliverers", "cpu.postgres", "cpu.ingest_client", "cpu.sum", "cpu.sink", "cpu.load_generator",
    "memory_mib.pss_sum", "memory_mib.rss_anon_sum", "memory_mib.vmhwm_sum", "window.window_s",
    "postgres_server.cpu_us_per_delivery", "postgres_server.wal_bytes_per_delivery",
    "postgres_server.wal_syncs_per_1000", "postgres_server.commits_per_1000",
    "postgres_server.sessions_per_instance_max"];
  const agg = {};
  for (const n of roundNames) {
    const per = rounds.map((r) => r.rows[n]);
    const good = per.filter(ok);
    const a = { row: n, label: good[0]?.label ?? per.find(Boolean)?.label ?? LABELS[n] ?? n, rounds_ok: good.length,
      rounds_run: per.filter(Boolean).length, failures: per.filter((r) => r && !ok(r)).map((r) => r.reason ?? `incomplete: ${r.deliveries} of ${r.deliveries_expected}`) };
    for (const f of FIG) {
      const st = stats(per.map((r) => (ok(r) ? get(r, f) : null)));
      if (st) a[f] = st;
    }
    a.peer = good[0]?.peer ?? null;
    agg[n] = a;
  }
  const peers = PEERS.filter((p) => agg[p]?.deliveries_per_s);
  // the strongest peer: the highest median deliveries/s of this run
  const strongest = peers.slice().sort((a, b) => agg[b].deliveries_per_s.median - agg[a].deliveries_per_s.median)[0] ?? null;
  // ratios within each round
  const within = (num, den) => rounds.map((r) => (ok(r.rows[num]) && ok(r.rows[den])
    ? r.rows[num].deliveries_per_s / r.rows[den].deliveries_per_s : null));
  const ratios = {};
  const addRatio = (key, num, den) => { const st = stats(within(num, den)); if (st) ratios[key] = { num, den, ...st }; };
  for (const o of ["sqlite", "postgres"]) {
    addRatio(`${o}/ceiling`, o, "ceiling");
    for (const p of peers) addRatio(`${o}/${p}`, o, p);
  }
  for (const p of peers) addRatio(`${p}/ceiling`, p, "ceiling");
  const headline = strongest ? ratios[`postgres/${strongest}`] ?? null : null;
  const embedded = strongest ? ratios[`sqlite/${strongest}`] ?? null : null;

  // the rows run once: their ratios ÷ the median of their one-instance row of this run
  const onceNames = ONCE_ORDER.filter((n) => once[n]).concat(Object.keys(once).filter((n) => !ONCE_ORDER.includes(n)));
  const med = (n, f = "deliveries_per_s") => agg[n]?.[f]?.median ?? null;
  if (ok(once["sqlite-fanout"])) {
    const r = once["sqlite-fanout"];
    r.label = `outboxd, SQLite, ${r.subscriptions} subscriptions (fan-out)`;
    r.vs_one = med("sqlite") ? r.deliveries_per_s / med("sqlite") : null;
    r.vs_one_of = "sqlite";
    r.vs_ceiling = med("ceiling") ? r.deliveries_per_s / med("ceiling") : null;
  }
  for (const n of ["postgres-2", "postgres-3"]) {
    if (!ok(once[n])) continue;
    once[n].vs_one = med("postgres") ? once[n].deliveries_per_s / med("postgres") : null;
    once[n].vs_one_of = "postgres";
    once[n].vs_ceiling = med("ceiling") ? once[n].deliveries_per_s / med("ceiling") : null;
  }

  const targets = [];
  // Each target belongs to a set: the first performance targets ("round 1"), those of
  // performance round 2 ("round 2"), and the small receiver's ("small receiver"); all on
  // the medians of this run.
  const t = (what, measured, good, set = "round 1") =>
    targets.push({ target: what, measured, met: measured === "–" ? null : good, set });
  const lat = once.latency?.available ? once.latency.runs : {};
  if (agg.sqlite?.deliveries_per_s) {
    const a = agg.sqlite;
    t("SQLite, 1 subscription: ≥ 25,000 deliveries/s", f0(med("sqlite")), med("sqlite") >= 25000);
    t("SQLite: ≤ 40 µs outboxd CPU per delivery", f1(med("sqlite", "cpu.deliverers")), med("sqlite", "cpu.deliverers") <= 40);
    if (embedded) t("SQLite: ≥ 5× the strongest peer's deliveries/s", times(embedded.median), embedded.median >= 5);
    if (lat.sqlite) t(`SQLite: p99 latency at ${s.lat_rate} events/s ≤ 10 ms`, `${ms(lat.sqlite.p99_us)} ms`, lat.sqlite.p99_us <= 10000);
    if (a["memory_mib.vmhwm_sum"]) t("SQLite: peak RSS ≤ 64 MiB", `${f1(a["memory_mib.vmhwm_sum"].median)} MiB`, a["memory_mib.vmhwm_sum"].median <= 64);
  }
  if (agg.postgres?.deliveries_per_s) {
    t("PostgreSQL: ≥ 15,000 deliveries/s", f0(med("postgres")), med("postgres") >= 15000);
    if (lat.postgres) t(`PostgreSQL: p99 latency at ${s.lat_rate} events/s ≤ 10 ms`, `${ms(lat.postgres.p99_us)} ms`, lat.postgres.p99_us <= 10000);
  }
  if (ratios["sqlite/ceiling"]) {
    const r = ratios["sqlite/ceiling"].median;
    t("SQLite 1 subscription, ÷ ceiling: ≥ 0.25×", timesVs(r, 0.25), r >= 0.25, "round 2");
    t("SQLite outboxd CPU per delivery: ≤ 35 µs", `${f1(med("sqlite", "cpu.deliverers"))} µs`, med("sqlite", "cpu.deliverers") <= 35, "round 2");
    if (embedded) t("SQLite ÷ strongest peer: ≥ 5×", times(embedded.median), embedded.median >= 5, "round 2");
  }
  if (ratios["postgres/ceiling"]) {
    const r = ratios["postgres/ceiling"].median;
    t("PostgreSQL 1 subscription, ÷ ceiling: ≥ 0.20×", timesVs(r, 0.2), r >= 0.2, "round 2");
  }
  if (lat.sqlite && lat.postgres) {
    const a = lat.sqlite.p99_us, b = lat.postgres.p99_us;
    t(`p99 at ${f0(s.lat_rate)} events/s, SQLite ≤ 5 ms / PostgreSQL ≤ 10 ms`, `${ms(a)} / ${ms(b)} ms`, a <= 5000 && b <= 10000, "round 2");
  }
  const rows = once; // the once rows' tables below read rows.slow, rows.small
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

  const json = {
    machine: m,
    definitions: {
      delivered: "a distinct (path, webhook-id) pair at the sink",
      deliveries_per_s: `deliveries after the first ${s.window_skip_pct}% ÷ (last receipt − the receipt completing the first ${s.window_skip_pct}%)`,
      end_to_end_per_s: "deliveries ÷ (last receipt − first ingest request)",
      cpu: "utime+stime per delivery, first ingest request to last receipt; sum = deliverers + PostgreSQL server + ingest client",
      ratios: "within a round, then median and range over the rounds",
    },
    strongest_peer: strongest,
    headline,
    embedded,
    ratios,
    round_rows: agg,
    rounds: rounds.map((r) => ({ round: r.k, ...r.info, rows: Object.values(r.rows) })),
    once_rows: onceNames.map((n) => once[n]),
    targets,
  };
  writeFileSync(join(results, "latest.json"), JSON.stringify(json, null, 2) + "\n");

  // ---- the report ----
  const L = [];
  const R = rounds.length;
  const peerName = (p) => (agg[p]?.label ?? LABELS[p]).replace(/^peer: /, "").replace(/, PostgreSQL$/, "");
  L.push("# outboxd benchmark — latest run", "");
  if (m.busy)
    L.push(`**BUSY MACHINE — NOT A RESULT TO PUBLISH: the 1-minute load average was ${m.load_before.split(" ")[0]} ` +
      `at the start, above ${m.load_max}${m.forced ? " (run with BENCH_FORCE=1)" : ""}; every figure below ` +
      `measures the other work on this machine as much as these programs.**`, "");
  L.push(`Machine: ${m.cpu_model}, ${m.cores} cores, kernel ${m.kernel}; fsync probe: ` +
    `${m.fsync_us == null ? "–" : f1(m.fsync_us)} µs per 4 KiB O_DSYNC write (${m.fsync_probe_n} writes, ${m.fs_type}, where the stores live)  `);
  L.push(`Load average (1/5/15 min): ${m.load_before} before, ${m.load_after} after` +
    (R > 1 ? `; at the start of each round: ${rounds.map((r) => (r.info.load_before ?? "?").split(" ")[0]).join(", ")}` : "") + "  ");
  L.push(`Commit: ${m.commit} · ${m.date} · took ${m.duration_s} s · PostgreSQL ${m.postgres ?? "–"}` +
    (strongest && agg[strongest].peer?.node ? ` · peers on Node.js ${agg[strongest].peer.node}` : "") + "  ");
  if (roundNames.length) L.push(
    `Workload: ${f0(s.events)} events of ~200 bytes per throughput row, batches of ${s.batch} over ${s.conns} ` +
      `connections, one subscription; ${R} round${R > 1 ? "s" : ""} of ${roundNames.join(", ")} in rotated order ` +
      `(round k starts at the k-th row)${s.warmup ? `, after a discarded warm-up pass of ${f0(s.warmup_events)} events each` : ""}; ` +
      `sink: test_receiver --threads ${s.sink_threads} --unique-per-path; ${s.build} build.`);
  L.push("");
  if (headline) {
    L.push(`**Headline: outboxd on PostgreSQL ÷ the strongest peer (${peerName(strongest)}) = ` +
      `${times(headline.median)}** (median of ${headline.n} round${headline.n > 1 ? "s" : ""}` +
      `${headline.n > 1 ? `, range ${times(headline.min)}–${times(headline.max)}` : ""}): both on the same PostgreSQL ` +
      `server, both acknowledging ingest only after a synchronous commit; outboxd's claims and results commit ` +
      `with synchronous_commit=off, the peer's job fetches and completions with synchronous_commit=` +
      `${agg[strongest].peer?.ready?.[0]?.synchronous_commit ?? s.peer_sync_commit} (the table of commits below).`);
    if (embedded) L.push("",
      `Embedded store (a different storage engine, not like for like): outboxd on SQLite ÷ the same peer = ` +
        `${times(embedded.median)}${embedded.n > 1 ? ` (range ${times(embedded.min)}–${times(embedded.max)})` : ""}.`);
    L.push("");
  }
  if (roundNames.length) {
    L.push(`Throughput, median (min–max) over ${R} round${R > 1 ? "s" : ""}:`, "",
      "| row | commits (ingest / claims, results) | deliveries/s (steady window) | end to end /s | duplicates | CPU µs/delivery: deliverers | PostgreSQL server | ingest client | sum | sink | PSS MiB | RssAnon MiB | VmHWM MiB | ÷ ceiling | ÷ strongest peer |",
      "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for (const n of roundNames) {
      const a = agg[n];
      if (!a.rounds_ok) {
        L.push(`| ${a.label} | | not available (${a.failures[0] ?? "no round finished"}) |${" |".repeat(13)}`);
        continue;
      }
      const vc = n === "ceiling" ? null : ratios[`${n}/ceiling`];
      const vp = OUTBOXD_ROWS.includes(n) && strongest ? ratios[`${n}/${strongest}`] : null;
      const c = (f) => mr(a[f], f1);
      L.push(`| ${a.label}${a.rounds_ok < a.rounds_run ? ` (${a.rounds_ok} of ${a.rounds_run} rounds)` : ""} | ` +
        `${commitsOf(n, a.peer, s)} | ${mr(a.deliveries_per_s, f0)} | ${mr(a.end_to_end_per_s, f0)} | ${mr(a.duplicates, f0)}` +
        `${a.duplicates?.max && a.duplicates_unrecorded ? ` (not recorded: ${mr(a.duplicates_unrecorded, f0)})` : ""} | ` +
        `${n === "ceiling" ? "– (wrk " + c("cpu.load_generator") + ")" : c("cpu.deliverers")} | ${c("cpu.postgres")} | ${c("cpu.ingest_client")} | ` +
        `${c("cpu.sum")} | ${c("cpu.sink")} | ${c("memory_mib.pss_sum")} | ${c("memory_mib.rss_anon_sum")} | ` +
        `${c("memory_mib.vmhwm_sum")} | ${vc ? mr(vc, times) : "–"} | ${vp ? mr(vp, times) : "–"} |`);
    }
    L.push("",
      `Commits: what an ingest acknowledgement waits for / what claims and results (the peers: job fetches ` +
        `and completions) wait for — SQLite synchronous=FULL / NORMAL, PostgreSQL synchronous_commit on / off ` +
        `(the table of commits below). Delivered: a distinct (path, webhook-id) pair at the sink; further requests for a pair are the ` +
        `duplicates; for outboxd, "not recorded" (shown when there are any) are those beyond its own count of ` +
        `requests made (outboxd_attempts_total less one per delivery: the rest are recorded retries, in the ` +
        `attempt history) and of requests written again on a new connection within an attempt ` +
        `(outboxd_http_resent_total: the attempt's cause says so). Deliveries/s (steady window): the deliveries after the first ${s.window_skip_pct}% of the ` +
        `row's (the warm-up: start, first claims, connection set-up; discarded) ÷ the time from the receipt ` +
        `that completes those ${s.window_skip_pct}% to the last receipt. End to end: deliveries ÷ (last receipt − ` +
        `first ingest request). The ceiling: distinct webhook-ids at the sink ÷ wrk's run (${s.ceiling_seconds} s, ` +
        `${s.ceiling_conns} keep-alive connections, outboxd's header set, a webhook-id per request). CPU: ` +
        `utime+stime ÷ deliveries, first ingest request to last receipt, of the deliverers (every outboxd ` +
        `instance; every peer worker process), the PostgreSQL server (every process of the bench's server), ` +
        `the ingest client (bench_loadgen for outboxd, the peer's producer.mjs, the whole process with ` +
        `Node's start-up) and their sum; the sink's beside it (the same program for every row; for the ` +
        `ceiling the load generator is wrk). Memory of the deliverers, summed over their processes: PSS ` +
        `(smaps_rollup) and RssAnon at the last receipt, VmHWM (peak). A ratio is taken within each round, ` +
        `then its median and range; the strongest peer is the one with the higher median deliveries/s.`);
    const ratioNames = Object.keys(ratios);
    if (ratioNames.length) {
      L.push("", "Every ratio of the rounds (each taken within a round; median and range):", "",
        "| ratio | median | min–max | rounds |", "|---|--:|--:|--:|");
      for (const k of ratioNames) {
        const r = ratios[k];
        L.push(`| ${SHORT[r.num] ?? r.num} ÷ ${SHORT[r.den] ?? r.den}${r.den === strongest ? " (strongest peer)" : ""} | ` +
          `${times(r.median)} | ${times(r.min)}–${times(r.max)} | ${r.n} |`);
      }
    }
    if (R > 1 || roundNames.length > 1) {
      const cols = roundNames;
      L.push("", "Each round (deliveries/s; the ratios of that round):", "",
        `| round | order | load at start | ${cols.map((n) => SHORT[n] ?? n).join(" | ")} | PostgreSQL ÷ strongest peer | SQLite ÷ strongest peer |`,
        `|--:|---|--:|${cols.map(() => "--:").join("|")}|--:|--:|`);
      for (const r of rounds) {
        const v = (n) => (ok(r.rows[n]) ? f0(r.rows[n].deliveries_per_s) : "–");
        const rr = (num) => (strongest && ok(r.rows[num]) && ok(r.rows[strongest])
          ? times(r.rows[num].deliveries_per_s / r.rows[strongest].deliveries_per_s) : "–");
        L.push(`| ${r.k} | ${r.info.order ?? "–"} | ${(r.info.load_before ?? "–").split(" ")[0]} | ${cols.map(v).join(" | ")} | ${rr("postgres")} | ${rr("sqlite")} |`);
      }
    }
    // durability: what each side's commits wait for
    const sc = (p) => agg[p]?.peer?.ready?.map((x) => x.synchronous_commit).filter((x, i, xs) => xs.indexOf(x) === i).join("/") ?? s.peer_sync_commit;
    L.push("", "What each side's commits wait for in these rows (the PostgreSQL server at its defaults: fsync on, synchronous_commit on, wal_writer_delay 200 ms):", "",
      "| side | ingest: acknowledged after | claims / job fetches | results / job completions |",
      "|---|---|---|---|",
      "| outboxd, SQLite (WAL mode) | a commit at synchronous=FULL: the WAL fsynced | synchronous=NORMAL: the WAL written, not fsynced (the next FULL commit or checkpoint syncs it) | synchronous=NORMAL |",
      "| outboxd, PostgreSQL | a synchronous commit on its ingest connection (the event rows and their first lease) | synchronous_commit=off on its dispatch connection (claims, lease renewals) | synchronous_commit=off (dispatch connection) |");
    for (const p of peers)
      L.push(`| ${peerName(p)} | a synchronous commit of the producer's transaction | synchronous_commit=${sc(p)} on the worker processes' sessions (read back from the server) | synchronous_commit=${sc(p)} |`);
    L.push("", "A relaxed commit (NORMAL, off) can be lost to a crash of the machine (SQLite) or of the server (PostgreSQL: the last ~3 × wal_writer_delay of commits); what it loses is a claim or a result, so those deliveries are made again (at least once). An acknowledged event or job is never in a relaxed commit on either side. Maintenance (outboxd's janitor, the peers' own) keeps the server's default.");
  }

  // the rows run once
  const onceTp = onceNames.filter((n) => !["latency", "slow", "small"].includes(n) && !once[n].report_lines);
  if (onceTp.length) {
    L.push("", "Run once, after the rounds (ratios ÷ the one-subscription / one-instance row's median of this run):", "",
      "| row | commits (ingest / claims, results) | deliveries/s (steady window) | end to end /s | distinct of expected | duplicates | CPU µs/delivery: outboxd | PostgreSQL server | ingest client | sum | PSS MiB (all instances) | ÷ one subscription / instance | ÷ ceiling |",
      "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for (const n of onceTp) {
      const r = once[n];
      if (!r.available) { L.push(`| ${r.label ?? n} | | not available (${r.reason}) |${" |".repeat(10)}`); continue; }
      L.push(`| ${r.label} | ${commitsOf(n, null, s)} | ${f0(r.deliveries_per_s)} | ${f0(r.end_to_end_per_s)} | ${f0(r.unique_ids)} of ${f0(r.deliveries_expected)} | ` +
        `${f0(r.duplicates)}${r.duplicates && r.duplicates_unrecorded != null ? ` (not recorded: ${f0(r.duplicates_unrecorded)})` : ""} | ${f1(r.cpu?.deliverers)} | ${f1(r.cpu?.postgres)} | ${f1(r.cpu?.ingest_client)} | ${f1(r.cpu?.sum)} | ` +
        `${f1(r.memory_mib?.pss_sum)} | ${r.vs_one != null ? `${times(r.vs_one)} (÷ ${r.vs_one_of})` : "–"} | ${times(r.vs_ceiling)} |`);
    }
    if (onceTp.some((n) => once[n].instances > 1))
      L.push("",
        "With 2 and 3 instances: the instances share one secret key and one database; the events are spread " +
          `over their APIs (one load generator per instance, ${s.conns} connections in all), since the instance ` +
          "that stores an event leases its deliveries to itself first. The instances, the PostgreSQL server, the " +
          `sink and the load generators share this machine's ${m.cores} cores: these rows measure the instances' ` +
          "contention on one server, not scale-out.");
  }

  // PostgreSQL server figures: medians for the round rows, the once rows' own
  const pgLines = [];
  for (const n of roundNames) {
    const a = agg[n];
    if (!a?.["postgres_server.cpu_us_per_delivery"]) continue;
    const c = (f, fmt = f1) => mr(a[f], fmt);
    pgLines.push(`| ${a.label} (median of rounds) | ${PG_ROWS.includes(n) ? 1 : "–"} | ${mr(a.deliveries_per_s, f0)} | ${c("postgres_server.cpu_us_per_delivery")} | ` +
      `${c("postgres_server.wal_bytes_per_delivery", f0)} | ${c("postgres_server.wal_syncs_per_1000")} | ${c("postgres_server.commits_per_1000")} | ` +
      `${PG_ROWS.includes(n) ? c("postgres_server.sessions_per_instance_max") : "–"} |`);
  }
  for (const n of onceTp) {
    const r = once[n], p = r?.postgres_server;
    if (!r?.available || !p) continue;
    pgLines.push(`| ${r.label} | ${r.instances ?? 1} | ${f0(r.deliveries_per_s)} | ${f1(p.cpu_us_per_delivery)} | ${f0(p.wal_bytes_per_delivery)} | ` +
      `${f1(p.wal_syncs_per_1000)} | ${f1(p.commits_per_1000)} | ${f1(p.sessions_per_instance_max)} |`);
  }
  const lp = lat.postgres?.postgres_server;
  if (lp) pgLines.push(`| outboxd, PostgreSQL, latency run: ${f0(s.lat_rate)} single events/s for ${s.lat_seconds} s | 1 | ${f0(lat.postgres.achieved_rate)} | ` +
    `${f1(lp.cpu_us_per_delivery)} | ${f0(lp.wal_bytes_per_delivery)} | ${f1(lp.wal_syncs_per_1000)} | ${f1(lp.commits_per_1000)} | ${f1(lp.sessions_per_instance_max)} |`);
  if (pgLines.length) {
    L.push("", "PostgreSQL server per delivery:", "",
      "| row | instances | deliveries/s | PostgreSQL CPU µs/delivery | WAL bytes/delivery | WAL fsyncs per 1,000 deliveries | commits per 1,000 deliveries | outboxd sessions per instance (most sampled) |",
      "|---|--:|--:|--:|--:|--:|--:|--:|", ...pgLines, "",
      "PostgreSQL CPU: utime+stime of every process of the bench's server (backends, walwriter, " +
        "checkpointer, autovacuum; the children that exited meanwhile through the postmaster's " +
        "cutime+cstime), first ingest request to last receipt, ÷ deliveries. WAL bytes: " +
        "pg_wal_lsn_diff of pg_current_wal_lsn() over the same run. WAL fsyncs: pg_stat_wal's " +
        "wal_sync; commits: pg_stat_database's xact_commit of the row's database (both read " +
        "once the row's clients stopped, so they include the stop). Sessions: pg_stat_activity " +
        "rows with application_name 'outboxd', sampled every 0.5 s during the run (the most seen ÷ instances).");
  }

  // latency
  if (Object.keys(lat).length) {
    L.push("", `Latency at ${f0(s.lat_rate)} events/s for ${s.lat_seconds} s ` +
      `(${s.lat_batch > 1 ? `batches of ${s.lat_batch}` : "single events"}, at most ${s.lat_conns} requests in flight), each on a fresh store, run once:`, "",
      "| target | commits (ingest / claims, results) | sustained events/s | intended → receipt p50 ms | p99 ms | max ms | ack → receipt p50 ms | p99 ms | ingest ack p50 ms | p99 ms |",
      "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|");
    for (const [k, l] of Object.entries(lat)) {
      const over = l.achieved_rate < 0.95 * l.rate ? " (not sustained)" : "";
      L.push(`| ${k === "sqlite" || k === "postgres" ? LABELS[k] : peerName(k)} | ${commitsOf(k, l.peer, s)} | ${f0(l.achieved_rate)}${over} | ${ms(l.p50_us)} | ${ms(l.p99_us)} | ${ms(l.max_us)} | ` +
        `${ms(l.ack_p50_us)} | ${ms(l.ack_p99_us)} | ${ms(l.ingest_ack_p50_us)} | ${ms(l.ingest_ack_p99_us)} |`);
    }
    L.push("", "Intended → receipt: the sink's receipt − the time the event was meant to be sent (the load generator keeps " +
      "that time when it falls behind: no coordinated omission). Ack → receipt: the receipt − the ingest " +
      "acknowledgement (outboxd's 2xx, the peer's commit of the job): the delivery path alone; it can be " +
      "below zero, when the delivery reaches the sink before the load generator has read the acknowledgement " +
      "(outboxd hands an event to its dispatcher as soon as its commit is done). Ingest ack: the " +
      "acknowledgement − the intended send time. A rate not sustained (under 0.95 of the one asked) makes the " +
      "latency mostly queueing before ingest.");
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
  // rows of their own shape (kind custom): the lines they wrote for the report
  for (const n of onceNames) if (once[n].available && once[n].report_lines) L.push("", ...once[n].report_lines);
  const notes = [];
  for (const r of rounds)
    for (const [n, x] of Object.entries(r.rows)) {
      if (!x.available) notes.push(`round ${r.k}, ${n}: not available — ${x.reason}${x.detail ? ` (${x.detail})` : ""}`);
      else if (x.complete === false) notes.push(`round ${r.k}, ${n}: incomplete, ${f0(x.deliveries)} of ${f0(x.deliveries_expected)} delivered (left out of the medians)`);
      if (x.ingest_errors) notes.push(`round ${r.k}, ${n}: ${x.ingest_errors} events were refused at ingest (${x.ingest_first_error ?? ""}).`);
    }
  for (const n of onceNames) {
    const r = once[n];
    if (!r.available && r.detail) notes.push(`${n}: not available — ${r.detail}`);
    if (r.ingest_errors) notes.push(`${n}: ${r.ingest_errors} events were refused at ingest (${r.ingest_first_error ?? ""}).`);
  }
  for (const [k, l] of Object.entries(lat)) {
    if (l.missing) notes.push(`latency ${k}: ${l.missing} events never reached the sink.`);
    if (l.errors) notes.push(`latency ${k}: ${l.errors} events were refused at ingest.`);
  }
  for (const p of peers) {
    const c = agg[p].peer, w = c?.ready?.[0] ?? {};
    if (p === "graphile")
      notes.push(`graphile-worker ${w.version}: ${c.workers} worker processes × concurrency ${w.concurrency} ` +
        `(${c.workers * w.concurrency} jobs in flight at most; outboxd: max_in_flight ${s.in_flight}), localQueue.size ` +
        `${w.local_queue}, completeJobBatchDelay ${w.complete_batch_delay_ms} ms, ${w.pool} PostgreSQL connections per process, ` +
        `NO_LOG_SUCCESS, an undici Pool of ${w.concurrency} keep-alive connections per process; jobs added with add_jobs, ${s.batch} per transaction.`);
    if (p === "pgboss")
      notes.push(`pg-boss ${w.version}: ${c.workers} worker processes × localConcurrency ${w.local_concurrency} × batchSize ` +
        `${w.batch_size} (${c.workers * w.local_concurrency * w.batch_size} jobs in flight at most), burstWhenBatchFull, ` +
        `LISTEN/NOTIFY wake-ups, perJobResults, ${w.pool} PostgreSQL connections per process, an undici Pool per process; ` +
        `jobs added with insert, ${s.batch} per statement.`);
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

  // ---- data for bench/report.gp: medians of the rounds, then the rows run once ----
  const q = (x) => `"${x.replace(/"/g, "'")}"`;
  const dat = [
    ...roundNames.filter((n) => agg[n].deliveries_per_s).map((n) => `${q(SHORT[n] ?? n)} ${agg[n].deliveries_per_s.median.toFixed(0)}`),
    ...onceTp.filter((n) => ok(once[n])).map((n) => `${q(SHORT[n] ?? n)} ${once[n].deliveries_per_s.toFixed(0)}`),
  ];
  writeFileSync(join(results, "latest.dat"), (dat.length ? dat : ['"none" 0']).join("\n") + "\n");
  const latDat = Object.entries(lat).map(([k, l]) => `${q(SHORT[k] ?? k)} ${ms(l.p50_us)} ${ms(l.p99_us)} ${ms(l.max_us)}`);
  writeFileSync(join(results, "latest-lat.dat"), (latDat.length ? latDat : ['"none" 0 0 0']).join("\n") + "\n");
  const stamp = `${m.cpu_model}, ${m.cores} cores; load ${m.load_before} before; commit ${m.commit}; ${m.date}${m.busy ? "; BUSY MACHINE" : ""}`;
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
