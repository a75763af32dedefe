// pgboss_worker.mjs: a pg-boss deliverer for `make bench` — pg-boss 12 with an undici
// keep-alive client, set up as its documentation sets it up for throughput: batch fetches
// (batchSize), several fetch loops per process (localConcurrency), continuous fetching
// while batches come back full (burstWhenBatchFull), NOTIFY wake-ups for new jobs, and one
// settlement per job (perJobResults). bench/run.sh starts PGBOSS_WORKERS of these
// processes on one database; the queue "deliver" is made by the first (createQueue).
//
// Each job is one webhook: its data { id, data } is POSTed as JSON to SINK_URL with the
// header webhook-id: id, and a non-2xx fails that job (pg-boss retries it). Environment:
//   DATABASE_URL          postgres://... (required)
//   SINK_URL              http://127.0.0.1:PORT/path (required)
//   PGBOSS_BATCH          jobs per fetch (default 32)
//   PGBOSS_CONCURRENCY    fetch loops of this process, localConcurrency (default 8); at
//                         most PGBOSS_BATCH x PGBOSS_CONCURRENCY jobs in flight per process,
//                         as many HTTP connections kept
//   PGBOSS_POOL           PostgreSQL connections of this process (default
//                         PGBOSS_CONCURRENCY + 2: one per fetch loop, and two spare)
//   PEER_SYNC_COMMIT      synchronous_commit of this process's sessions (default off, as
//                         for worker.mjs: fetches and completions, like outboxd's claims
//                         and results; the producer's inserts stay synchronous)
// Prints "ready {json}" once it has migrated and works the queue; stops on SIGTERM.
//
// It must not do anything outboxd's path would not: one POST per job, nothing cached.

import { createRequire } from "node:module";
import { PgBoss } from "pg-boss";
import { Pool } from "undici";

const version = createRequire(import.meta.url)("pg-boss/package.json").version;
const connectionString = process.env.DATABASE_URL;
const sinkUrl = process.env.SINK_URL;
if (!connectionString || !sinkUrl) {
  console.error("pgboss_worker.mjs: DATABASE_URL and SINK_URL are required");
  process.exit(2);
}
const batchSize = Number(process.env.PGBOSS_BATCH || 32);
const localConcurrency = Number(process.env.PGBOSS_CONCURRENCY || 8);
const poolSize = Number(process.env.PGBOSS_POOL || localConcurrency + 2);
const syncCommit = process.env.PEER_SYNC_COMMIT || "off";
const QUEUE = "deliver";

const sink = new URL(sinkUrl);
const http = new Pool(sink.origin, {
  connections: batchSize * localConcurrency,
  pipelining: 1,
  keepAliveTimeout: 60_000,
  keepAliveMaxTimeout: 600_000,
});

const boss = new PgBoss({
  connectionString,
  max: poolSize,
  options: `-c synchronous_commit=${syncCommit}`,
  useListenNotify: true,
  schedule: false,
});
boss.on("error", (e) => console.error(`pgboss_worker.mjs: error: ${e.message}`));
await boss.start();
// Two workers may start at once: the second one's createQueue may race the first's.
try {
  if (!(await boss.getQueue(QUEUE))) await boss.createQueue(QUEUE, { notify: true });
} catch (e) {
  if (!(await boss.getQueue(QUEUE))) throw e;
}
const shown = (await boss.getDb().executeSql("SHOW synchronous_commit")).rows[0].synchronous_commit;

async function post(job) {
  try {
    const { statusCode, body } = await http.request({
      path: sink.pathname,
      method: "POST",
      headers: { "content-type": "application/json", "webhook-id": job.data.id },
      body: JSON.stringify(job.data.data),
    });
    await body.dump();
    if (statusCode >= 200 && statusCode <= 299) return { id: job.id, status: "completed" };
    return { id: job.id, status: "failed", output: { status: statusCode } };
  } catch (e) {
    return { id: job.id, status: "failed", output: { error: String(e.message || e) } };
  }
}

await boss.work(
  QUEUE,
  { batchSize, localConcurrency, burstWhenBatchFull: true, pollingIntervalSeconds: 0.5, perJobResults: true },
  (jobs) => Promise.all(jobs.map(post)),
);
process.stdout.write(`ready ${JSON.stringify({
  library: "pg-boss", version, batch_size: batchSize, local_concurrency: localConcurrency,
  pool: poolSize, synchronous_commit: shown,
})}\n`);

const stop = async () => {
  try {
    await boss.stop({ graceful: true, timeout: 5000 });
    await http.close();
  } finally {
    process.exit(0);
  }
};
process.once("SIGTERM", stop);
process.once("SIGINT", stop);
