// worker.mjs: the peer's deliverer for `make bench` — graphile-worker 0.17 with an undici
// keep-alive client, tuned as a user chasing throughput would tune it: localQueue batching,
// batched job completion, per-job success logging off.
//
// Each job is one webhook: its payload { id, data } is POSTed as JSON to SINK_URL with the
// header webhook-id: id (the receiver's receipt key), and a non-2xx fails the job (graphile
// retries it later). Configured from the environment:
//   DATABASE_URL        postgres://... (required)
//   SINK_URL            http://127.0.0.1:PORT/path (required)
//   PEER_CONCURRENCY    jobs run at once, and HTTP connections kept (default 64)
//   PEER_LOCAL_QUEUE    localQueue.size (default 500)
//   PEER_COMPLETE_DELAY completeJobBatchDelay/failJobBatchDelay in ms (default 50)
// Prints "ready" on stdout once it has migrated and is waiting for jobs; stops on SIGTERM.
//
// It must not do anything outboxd's path would not: one POST per job, nothing cached.

process.env.NO_LOG_SUCCESS = "1"; // graphile-worker reads this at import time

const { run, Logger } = await import("graphile-worker");
const { Pool } = await import("undici");

const connectionString = process.env.DATABASE_URL;
const sinkUrl = process.env.SINK_URL;
if (!connectionString || !sinkUrl) {
  console.error("worker.mjs: DATABASE_URL and SINK_URL are required");
  process.exit(2);
}
const concurrency = Number(process.env.PEER_CONCURRENCY || 64);
const localQueueSize = Number(process.env.PEER_LOCAL_QUEUE || 500);
const batchDelay = Number(process.env.PEER_COMPLETE_DELAY ?? 50);

const sink = new URL(sinkUrl);
const http = new Pool(sink.origin, {
  connections: concurrency,
  pipelining: 1,
  keepAliveTimeout: 60_000,
  keepAliveMaxTimeout: 600_000,
});

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
  connectionString,
  concurrency,
  maxPoolSize: Math.max(10, concurrency + 2), // the documented recommendation
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
process.stdout.write("ready\n");

const stop = async () => {
  try {
    await runner.stop();
    await http.close();
  } finally {
    process.exit(0);
  }
};
process.once("SIGTERM", stop);
process.once("SIGINT", stop);
await runner.promise;
