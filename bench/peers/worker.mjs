// worker.mjs: a graphile-worker deliverer for `make bench` — graphile-worker 0.18 with an
// undici keep-alive client, tuned as its documentation tunes it for throughput: localQueue
// batching, batched job completion, per-job success logging off. bench/run.sh starts
// PEER_WORKERS of these processes on one database (graphile-worker scales by processes).
//
// Each job is one webhook: its payload { id, data } is POSTed as JSON to SINK_URL with the
// header webhook-id: id (the receiver's receipt key), and a non-2xx fails the job (graphile
// retries it later). Configured from the environment:
//   DATABASE_URL        postgres://... (required)
//   SINK_URL            http://127.0.0.1:PORT/path (required)
//   PEER_CONCURRENCY    jobs run at once by this process, and HTTP connections kept (64)
//   PEER_LOCAL_QUEUE    localQueue.size (default 500)
//   PEER_COMPLETE_DELAY completeJobBatchDelay/failJobBatchDelay in ms (default 50)
//   PEER_POOL           PostgreSQL connections of this process (default 10, the library's;
//                       with the local queue one fetch serves many jobs)
//   PEER_SYNC_COMMIT    synchronous_commit of this process's sessions (default off: job
//                       fetches and completions commit without waiting for the WAL flush,
//                       as outboxd's claims and results do; the producer's adds stay
//                       synchronous, as outboxd's ingest does)
// Prints "ready {json}" on stdout once it has migrated and is waiting for jobs, the JSON
// giving the library's version and the synchronous_commit its sessions run with (read back
// from the server); stops on SIGTERM.
//
// It must not do anything outboxd's path would not: one POST per job, nothing cached.

process.env.NO_LOG_SUCCESS = "1"; // graphile-worker reads this at import time

const { run, Logger } = await import("graphile-worker");
const { Pool } = await import("undici");
const pg = (await import("pg")).default;
const { readFileSync } = await import("node:fs");
// (the package's exports do not include its package.json)
const version = JSON.parse(readFileSync(new URL("./node_modules/graphile-worker/package.json",
  import.meta.url), "utf8")).version;

const connectionString = process.env.DATABASE_URL;
const sinkUrl = process.env.SINK_URL;
if (!connectionString || !sinkUrl) {
  console.error("worker.mjs: DATABASE_URL and SINK_URL are required");
  process.exit(2);
}
const concurrency = Number(process.env.PEER_CONCURRENCY || 64);
const localQueueSize = Number(process.env.PEER_LOCAL_QUEUE || 500);
const batchDelay = Number(process.env.PEER_COMPLETE_DELAY ?? 50);
const poolSize = Number(process.env.PEER_POOL || 10);
const syncCommit = process.env.PEER_SYNC_COMMIT || "off";

const sink = new URL(sinkUrl);
const http = new Pool(sink.origin, {
  connections: concurrency,
  pipelining: 1,
  keepAliveTimeout: 60_000,
  keepAliveMaxTimeout: 600_000,
});

// The pool is ours so that every session it opens gets synchronous_commit from the
// startup packet (graphile-worker takes a pg.Pool as pgPool).
const pgPool = new pg.Pool({
  connectionString,
  max: poolSize,
  options: `-c synchronous_commit=${syncCommit}`,
});
pgPool.on("error", (e) => console.error(`worker.mjs: pool: ${e.message}`));
pgPool.on("connect", (client) => client.on("error", (e) => console.error(`worker.mjs: client: ${e.message}`)));
const shown = (await pgPool.query("SHOW synchronous_commit")).rows[0].synchronous_commit;

// Warnings and errors only: no line per job.
const logger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`worker.mjs: ${level}: ${message}`);
});

const taskList = {
  deliver: async (payload) => {
    const { statusCode, body } = await http.request({
      path: sink.pathname,
      method: "POST",
      headers: { "content-type": "application/json", "webhook-id": payload.id },
      body: JSON.stringify(payload.data),
    });
    await body.dump();
    if (statusCode < 200 || statusCode > 299) throw new Error(`HTTP ${statusCode}`);
  },
};

const runner = await run({
  pgPool,
  concurrency,
  noHandleSignals: true,
  logger,
  taskList,
  preset: {
    worker: {
      localQueue: { size: localQueueSize },
      completeJobBatchDelay: batchDelay,
      failJobBatchDelay: batchDelay,
    },
  },
});
process.stdout.write(`ready ${JSON.stringify({
  library: "graphile-worker", version, concurrency, local_queue: localQueueSize,
  complete_batch_delay_ms: batchDelay, pool: poolSize, synchronous_commit: shown,
})}\n`);

const stop = async () => {
  try {
    await runner.stop();
    await http.close();
    await pgPool.end();
  } finally {
    process.exit(0);
  }
};
process.once("SIGTERM", stop);
process.once("SIGINT", stop);
await runner.promise;
