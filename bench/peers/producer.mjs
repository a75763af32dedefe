// producer.mjs: the peer's load generator for `make bench` — adds graphile-worker jobs the
// way an application would, with the same two modes and the same output as bench_loadgen:
//
//   node producer.mjs ingest --events N [--batch B] [--conns C]
//       N jobs, B per transaction (BEGIN; add_jobs(...); COMMIT) over C connections, as fast
//       as PostgreSQL commits them. Prints one JSON object (start/end µs, events, errors).
//   node producer.mjs rate --rate R --duration S --out FILE [--batch B] [--conns C]
//       R jobs/s for S seconds, one add_job per transaction (B > 1: add_jobs of B jobs), at
//       most C in flight; every job keeps its intended time (no coordinated omission). Writes
//       "id intended_us sent_us acked_us" per job to FILE and prints a JSON summary.
//
// DATABASE_URL names the database (the worker must have migrated it). Each job's payload is
// { id, data } where data is the same ~200-byte object bench_loadgen sends to outboxd.

import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import pg from "pg";

const args = process.argv.slice(2);
const mode = args[0];
const opt = {};
for (let i = 1; i < args.length; i += 2) opt[args[i].replace(/^--/, "")] = args[i + 1];
if (!process.env.DATABASE_URL || (mode !== "ingest" && mode !== "rate")) {
  console.error("usage: DATABASE_URL=... node producer.mjs ingest|rate [options]");
  process.exit(2);
}

const payloadBytes = Number(opt["payload-bytes"] || 200);
const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);

// The same payload as bench/loadgen.c: {"seq":N,"pad":"xxx..."}, payloadBytes long.
function eventData(seq) {
  const head = `{"seq":${seq},"pad":"`.length;
  return { seq, pad: "x".repeat(Math.max(0, payloadBytes - head - 2)) };
}

function percentile(sorted, p) {
  return sorted.length ? sorted[Math.floor((sorted.length - 1) * p)] : 0;
}

const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL,
  max: Number(opt.conns || (mode === "ingest" ? 4 : 16)),
});

const ADD_JOBS = `select id from graphile_worker.add_jobs(
  array(select json_populate_recordset(null::graphile_worker.job_spec, $1::json)))`;
const ADD_JOB = `select id from graphile_worker.add_job('deliver', $1::json)`;

async function ingest() {
  const events = Number(opt.events);
  const batch = Number(opt.batch || 1000);
  const conns = Number(opt.conns || 4);
  // Bodies are made before the clock starts, as bench_loadgen does.
  const batches = [];
  for (let first = 0; first < events; first += batch) {
    const specs = [];
    for (let seq = first; seq < Math.min(events, first + batch); seq++)
      specs.push({ identifier: "deliver", payload: { id: randomUUID(), data: eventData(seq) } });
    batches.push(JSON.stringify(specs));
  }
  const lat = [];
  let next = 0, accepted = 0, errors = 0, failedRequests = 0, firstError;
  const start = nowUs();
  async function lane() {
    const client = await pool.connect();
    try {
      while (next < batches.length) {
        const k = next++;
        const n = Math.min(batch, events - k * batch);
        const t0 = nowUs();
        try {
          await client.query("BEGIN");
          await client.query(ADD_JOBS, [batches[k]]);
          await client.query("COMMIT");
          accepted += n;
        } catch (e) {
          await client.query("ROLLBACK").catch(() => {});
          errors += n;
          failedRequests++;
          firstError ??= String(e.message || e);
        }
        lat.push(nowUs() - t0);
      }
    } finally {
      client.release();
    }
  }
  await Promise.all(Array.from({ length: conns }, lane));
  const end = nowUs();
  lat.sort((a, b) => a - b);
  return {
    mode: "ingest", start_us: start, end_us: end, events, accepted, errors,
    failed_requests: failedRequests, requests: batches.length, batch, conns,
    events_per_s: accepted / ((end - start) / 1e6),
    ack_p50_us: percentile(lat, 0.5), ack_p99_us: percentile(lat, 0.99),
    ack_max_us: lat.at(-1) ?? 0, ...(firstError ? { first_error: firstError } : {}),
  };
}

async function rate() {
  const r = Number(opt.rate);
  const duration = Number(opt.duration);
  const conns = Number(opt.conns || 16);
  const batch = Number(opt.batch || 1);
  const total = Math.max(1, Math.round(r * duration));
  // One request per `batch` jobs: add_job alone, or add_jobs for a batch (each its own
  // transaction), built before the clock starts.
  const reqs = [];
  for (let first = 0; first < total; first += batch) {
    const jobs = [];
    for (let seq = first; seq < Math.min(total, first + batch); seq++)
      jobs.push({ id: randomUUID(), data: eventData(seq) });
    const body = batch === 1
      ? JSON.stringify(jobs[0])
      : JSON.stringify(jobs.map((payload) => ({ identifier: "deliver", payload })));
    reqs.push({ ids: jobs.map((j) => j.id), body });
  }

  const start = nowUs();
  reqs.forEach((q, k) => { q.intended = start + Math.round((k * batch * 1e6) / r); });
  let next = 0, active = 0, done = 0, late = 0, errors = 0, firstError;
  await new Promise((resolve) => {
    const send = (q) => {
      active++;
      q.sent = nowUs();
      if (q.sent - q.intended > 1000) late++;
      pool.query(batch === 1 ? ADD_JOB : ADD_JOBS, [q.body]).then(
        () => { q.acked = nowUs(); q.ok = true; },
        (e) => { q.acked = nowUs(); errors += q.ids.length; firstError ??= String(e.message || e); },
      ).finally(() => {
        active--;
        done++;
        if (done === reqs.length) resolve();
        else pump();
      });
    };
    let timer = null;
    const pump = () => {
      const now = nowUs();
      while (next < reqs.length && active < conns && reqs[next].intended <= now) send(reqs[next++]);
      if (next < reqs.length && active < conns && !timer) {
        const wait = Math.max(0, Math.floor((reqs[next].intended - nowUs()) / 1000));
        timer = setTimeout(() => { timer = null; pump(); }, wait);
      }
    };
    pump();
  });
  const end = nowUs();
  const lines = [];
  const lat = [];
  for (const q of reqs) {
    lat.push(q.acked - q.intended);
    if (q.ok) for (const id of q.ids) lines.push(`${id} ${q.intended} ${q.sent} ${q.acked}\n`);
  }
  writeFileSync(opt.out, lines.join(""));
  lat.sort((a, b) => a - b);
  return {
    mode: "rate", start_us: start, end_us: end, events: total, accepted: total - errors,
    errors, failed_requests: reqs.filter((q) => !q.ok).length, requests: reqs.length, batch,
    conns, rate: r, events_per_s: (total - errors) / ((end - start) / 1e6), late_requests: late,
    ack_p50_us: percentile(lat, 0.5), ack_p99_us: percentile(lat, 0.99),
    ack_max_us: lat.at(-1) ?? 0, ...(firstError ? { first_error: firstError } : {}),
  };
}

try {
  const result = mode === "ingest" ? await ingest() : await rate();
  process.stdout.write(JSON.stringify(result) + "\n");
  process.exitCode = result.errors ? 3 : 0;
} finally {
  await pool.end();
}
