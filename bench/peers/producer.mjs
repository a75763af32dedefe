// producer.mjs: the peers' load generator for `make bench` — adds jobs the way an
// application would, with the same two modes and the same output as bench_loadgen, to
// graphile-worker (--peer graphile, the default) or to pg-boss (--peer pgboss):
//
//   node producer.mjs ingest --events N [--batch B] [--conns C] [--peer P]
//       N jobs, B per transaction over C connections, as fast as PostgreSQL commits them
//       (graphile: BEGIN; add_jobs(...); COMMIT; pg-boss: boss.insert of B jobs, one
//       statement). Prints one JSON object (start/end µs, events, errors).
//   node producer.mjs rate --rate R --duration S --out FILE [--batch B] [--conns C] [--peer P]
//       R jobs/s for S seconds, one job per transaction (graphile add_job, pg-boss send;
//       B > 1: B jobs at once), at most C in flight; every job keeps its intended time (no
//       coordinated omission). Writes "id intended_us sent_us acked_us" per job to FILE and
//       prints a JSON summary.
//
// DATABASE_URL names the database (the worker must have migrated it). Each job's payload is
// { id, data } where data is the same ~200-byte object bench_loadgen sends to outboxd. Its
// sessions keep the server's synchronous_commit (on): a job is acknowledged durably, as
// outboxd acknowledges an event only after a synchronous commit.

import { randomUUID } from "node:crypto";
import { writeFileSync } from "node:fs";
import pg from "pg";
import { PgBoss } from "pg-boss";

const args = process.argv.slice(2);
const mode = args[0];
const opt = {};
for (let i = 1; i < args.length; i += 2) opt[args[i].replace(/^--/, "")] = args[i + 1];
if (!process.env.DATABASE_URL || (mode !== "ingest" && mode !== "rate")) {
  console.error("usage: DATABASE_URL=... node producer.mjs ingest|rate [options]");
  process.exit(2);
}

const payloadBytes = Number(opt["payload-bytes"] || 200);
const peer = opt.peer || "graphile";
if (peer !== "graphile" && peer !== "pgboss") {
  console.error("producer.mjs: --peer is graphile or pgboss");
  process.exit(2);
}
const nowUs = () => Math.round((performance.timeOrigin + performance.now()) * 1000);

// The same payload as bench/loadgen.c: {"seq":N,"pad":"xxx..."}, payloadBytes long.
function eventData(seq) {
  const head = `{"seq":${seq},"pad":"`.length;
  return { seq, pad: "x".repeat(Math.max(0, payloadBytes - head - 2)) };
}

function percentile(sorted, p) {
  return sorted.length ? sorted[Math.floor((sorted.length - 1) * p)] : 0;
}

const maxConns = Number(opt.conns || (mode === "ingest" ? 4 : 16));
const pool = peer === "graphile"
  ? new pg.Pool({ connectionString: process.env.DATABASE_URL, max: maxConns })
  : null;
const boss = peer === "pgboss"
  ? new PgBoss({ connectionString: process.env.DATABASE_URL, max: maxConns, supervise: false, schedule: false })
  : null;
if (boss) {
  boss.on("error", (e) => console.error(`producer.mjs: ${e.message}`));
  await boss.start();
}
const QUEUE = "deliver";

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
    for (let seq = first; seq < Math.min(events, first + batch); seq++) {
      const payload = { id: randomUUID(), data: eventData(seq) };
      specs.push(boss ? { data: payload } : { identifier: "deliver", payload });
    }
    batches.push(boss ? specs : JSON.stringify(specs));
  }
  const lat = [];
  let next = 0, accepted = 0, errors = 0, failedRequests = 0, firstError;
  const start = nowUs();
  async function lane() {
    const client = pool ? await pool.connect() : null;
    try {
      while (next < batches.length) {
        const k = next++;
        const n = Math.min(batch, events - k * batch);
        const t0 = nowUs();
        try {
          if (boss) {
            await boss.insert(QUEUE, batches[k]);
          } else {
            await client.query("BEGIN");
            await client.query(ADD_JOBS, [batches[k]]);
            await client.query("COMMIT");
          }
          accepted += n;
        } catch (e) {
          if (client) await client.query("ROLLBACK").catch(() => {});
          errors += n;
          failedRequests++;
          firstError ??= String(e.message || e);
        }
        lat.push(nowUs() - t0);
      }
    } finally {
      client?.release();
    }
  }
  await Promise.all(Array.from({ length: conns }, lane));
  const end = nowUs();
  lat.sort((a, b) => a - b);
  return {
    mode: "ingest", peer, start_us: start, end_us: end, events, accepted, errors,
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
    const body = boss
      ? jobs.map((payload) => ({ data: payload }))
      : batch === 1
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
      const add = boss
        ? (batch === 1 ? boss.send(QUEUE, q.body[0].data) : boss.insert(QUEUE, q.body))
        : pool.query(batch === 1 ? ADD_JOB : ADD_JOBS, [q.body]);
      add.then(
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
    mode: "rate", peer, start_us: start, end_us: end, events: total, accepted: total - errors,
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
  if (pool) await pool.end();
  if (boss) await boss.stop({ graceful: false, wait: true });
}
