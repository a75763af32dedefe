// client.mjs: a real gRPC client of outboxd's gRPC ingest (outboxd.v1.Ingest,
// proto/outboxd/v1/ingest.proto), as a user writes one: @grpc/grpc-js with the .proto
// files loaded by @grpc/proto-loader, the token in the call's metadata. Used by
// tests/e2e/test_grpc.c and bench/grpc.sh; prints one JSON line on stdout per command.
//
//   node client.mjs --target HOST:PORT [--token T] [--ca PEM] [--wait no]
//                   [--traceparent TP] COMMAND ...
//     publish JSON          one Publish call with the OutboxEvent JSON
//     stream JSON-ARRAY     one PublishStream call with these OutboxEvents
//     load [--unary N] [--stream N] [--stream-size K] [--concurrency C] [--type T]
//          [--source S] [--run R]
//                           N events in Publish calls (C at once) and N in PublishStream
//                           calls of K events (C at once); idempotency keys R-u-i, R-s-i
//     hold JSON             a Publish of JSON (the connection is up), then a PublishStream
//                           that sends JSON and never ends: prints {"open":true} once the
//                           message is written and the server's headers came (it took the
//                           call), then the stream's answer when the server ends it (a stop)
//     load-http --url URL [--unary N] [--stream N] [--stream-size K] [--concurrency C] ...
//                           the same events through POST /v1/events (single events and
//                           batches of K), for bench/grpc.sh's comparison
//
// In the JSON of an OutboxEvent, event.payload may be a string (its UTF-8 bytes are sent)
// or event.payload_base64 (the bytes it decodes to). A call's answer:
//   {"code":0,"status":"OK","details":"","ids":[...],"duplicates":[...],"trailers":{...}}
// Needs GRPC_NODE_MODULES (the node_modules of tests/support/grpc/package-lock.json) and
// GRPC_PROTO_DIR (the repository's proto/).
import { createRequire } from 'node:module';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`client.mjs: ${name} is not set`);
    process.exit(2);
  }
  return v;
}

const require = createRequire(path.join(need('GRPC_NODE_MODULES'), 'x.js'));
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const args = process.argv.slice(2);
function option(name, def) {
  const i = args.indexOf(name);
  if (i < 0) return def;
  const v = args[i + 1];
  args.splice(i, 2);
  return v;
}
const target = option('--target');
const token = option('--token');
const ca = option('--ca');
// --wait no: a call fails at once when the server cannot be reached (UNAVAILABLE) instead
// of waiting for it until its deadline
const waitForReady = option('--wait', 'yes') !== 'no';
const traceparent = option('--traceparent'); // sent as the call's traceparent metadata
const url = option('--url');
const unary = Number(option('--unary', '0'));
const streamed = Number(option('--stream', '0'));
const streamSize = Number(option('--stream-size', '100'));
const concurrency = Number(option('--concurrency', '8'));
const eventType = option('--type', 'grpc.test');
const source = option('--source', 'grpc-client');
const run = option('--run', 'r');
const [command, arg] = args;

const protoDir = need('GRPC_PROTO_DIR');
const definition = protoLoader.loadSync('outboxd/v1/ingest.proto', {
  includeDirs: [protoDir],
  keepCase: true,
  enums: String,
  longs: String,
  defaults: false,
});
const proto = grpc.loadPackageDefinition(definition);

function client() {
  const creds = ca ? grpc.credentials.createSsl(fs.readFileSync(ca))
    : grpc.credentials.createInsecure();
  return new proto.outboxd.v1.Ingest(target, creds);
}

function metadata() {
  const md = new grpc.Metadata();
  if (token !== undefined) md.set('authorization', `Bearer ${token}`);
  if (traceparent !== undefined) md.set('traceparent', traceparent);
  return md;
}

// The OutboxEvent as protobufjs takes it: payloads as bytes.
function envelope(obj) {
  const e = structuredClone(obj);
  if (e.event && typeof e.event.payload === 'string') e.event.payload = Buffer.from(e.event.payload);
  if (e.event && e.event.payload_base64 !== undefined) {
    e.event.payload = Buffer.from(e.event.payload_base64, 'base64');
    delete e.event.payload_base64;
  }
  return e;
}

function answer(err, reply, trailers) {
  const t = {};
  if (trailers) {
    for (const [k, v] of Object.entries(trailers.getMap())) t[k] = String(v);
  }
  if (err) {
    for (const [k, v] of Object.entries(err.metadata ? err.metadata.getMap() : {})) t[k] = String(v);
    return { code: err.code, status: grpc.status[err.code], details: err.details, trailers: t };
  }
  return { code: 0, status: 'OK', details: '', ids: reply.ids || [],
           duplicates: (reply.duplicates || []).map(Number), trailers: t };
}

// One Publish call; resolves to its answer (never rejects).
function publish(c, event) {
  return new Promise((resolve) => {
    let trailers;
    const call = c.Publish(envelope(event), metadata(), { deadline: Date.now() + 60000, waitForReady },
      (err, reply) => resolve(answer(err, reply, trailers)));
    call.on('status', (s) => { trailers = s.metadata; });
  });
}

// One PublishStream call with these events.
function stream(c, events) {
  return new Promise((resolve) => {
    let trailers;
    const call = c.PublishStream(metadata(), { deadline: Date.now() + 60000, waitForReady },
      (err, reply) => resolve(answer(err, reply, trailers)));
    call.on('status', (s) => { trailers = s.metadata; });
    call.on('error', () => {}); // the callback has it
    for (const e of events) call.write(envelope(e));
    call.end();
  });
}

function event(kind, i) {
  return { event: { type: eventType, source, source_event_id: `${run}-${kind}-${i}`,
                    payload: JSON.stringify({ seq: i, via: kind, pad: 'x'.repeat(160) }) } };
}

// Runs jobs (functions returning promises) with at most n at once.
async function pool(jobs, n) {
  let next = 0;
  const workers = Array.from({ length: Math.min(n, jobs.length) }, async () => {
    while (next < jobs.length) await jobs[next++]();
  });
  await Promise.all(workers);
}

function chunks(n, k) {
  const out = [];
  for (let i = 0; i < n; i += k) out.push([i, Math.min(n, i + k)]);
  return out;
}

async function load(send) {
  const result = { unary_ok: 0, stream_ok: 0, ids: [], duplicates: 0, errors: [] };
  const note = (a) => { if (result.errors.length < 5) result.errors.push(a); };
  const t0 = Date.now();
  const unaryJobs = Array.from({ length: unary }, (_, i) => async () => {
    const a = await send.one(event('u', i));
    if (a.code !== 0) return note(a);
    result.unary_ok++;
    result.duplicates += a.duplicates.length;
    result.ids.push(...a.ids);
  });
  const cpu0 = process.cpuUsage();
  await pool(unaryJobs, concurrency);
  const t1 = Date.now();
  const cpu1 = process.cpuUsage();
  const streamJobs = chunks(streamed, streamSize).map(([from, to]) => async () => {
    const events = [];
    for (let i = from; i < to; i++) events.push(event('s', i));
    const a = await send.many(events);
    if (a.code !== 0) return note(a);
    result.stream_ok += events.length;
    result.duplicates += a.duplicates.length;
    result.ids.push(...a.ids);
  });
  await pool(streamJobs, concurrency);
  result.unary_ms = t1 - t0;
  result.stream_ms = Date.now() - t1;
  // the client's own CPU (user + system, µs) in each half: what it costs to send
  const cpu2 = process.cpuUsage();
  result.unary_cpu_us = cpu1.user + cpu1.system - cpu0.user - cpu0.system;
  result.stream_cpu_us = cpu2.user + cpu2.system - cpu1.user - cpu1.system;
  return result;
}

// POST /v1/events with a keep-alive agent: what bench/grpc.sh compares the gRPC calls with.
function httpSender() {
  const agent = new http.Agent({ keepAlive: true, maxSockets: concurrency });
  const post = (body) => new Promise((resolve) => {
    const req = http.request(url, { method: 'POST', agent, headers: {
      'content-type': 'application/json', authorization: `Bearer ${token}` } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => {
        let doc = {};
        try { doc = JSON.parse(text); } catch { /* not JSON */ }
        if (res.statusCode !== 202) return resolve({ code: res.statusCode, details: text });
        resolve({ code: 0, ids: doc.ids, duplicates: doc.duplicates || (doc.duplicate ? [0] : []) });
      });
    });
    req.on('error', (e) => resolve({ code: -1, details: String(e) }));
    req.end(body);
  });
  const asJson = (e) => ({ event_type: e.event.type, source: e.event.source,
                           source_event_id: e.event.source_event_id,
                           payload: JSON.parse(e.event.payload) });
  return {
    one: (e) => post(JSON.stringify(asJson(e))),
    many: (es) => post(JSON.stringify({ events: es.map(asJson) })),
  };
}

async function main() {
  if (command === 'publish' || command === 'stream') {
    const c = client();
    const a = command === 'publish' ? await publish(c, JSON.parse(arg))
      : await stream(c, JSON.parse(arg));
    console.log(JSON.stringify(a));
    c.close();
  } else if (command === 'hold') {
    const c = client();
    const first = await publish(c, JSON.parse(arg));
    if (first.code !== 0) {
      console.log(JSON.stringify(first));
    } else {
      const a = await new Promise((resolve) => {
        let trailers;
        const call = c.PublishStream(metadata(), { deadline: Date.now() + 60000 },
          (err, reply) => resolve(answer(err, reply, trailers)));
        // open: the message is written and the server's headers say it took the call
        let written = false;
        let taken = false;
        const opened = () => { if (written && taken) console.log(JSON.stringify({ open: true })); };
        call.on('metadata', () => { taken = true; opened(); });
        call.on('status', (st) => { trailers = st.metadata; });
        call.on('error', () => {});
        call.write(envelope(JSON.parse(arg)), () => { written = true; opened(); });
      });
      console.log(JSON.stringify(a));
    }
    c.close();
  } else if (command === 'load') {
    const c = client();
    console.log(JSON.stringify(await load({ one: (e) => publish(c, e),
                                            many: (es) => stream(c, es) })));
    c.close();
  } else if (command === 'load-http') {
    console.log(JSON.stringify(await load(httpSender())));
  } else {
    console.error('usage: node client.mjs --target HOST:PORT [--token T] publish|stream|load|load-http ...');
    process.exit(2);
  }
}

main().catch((e) => {
  console.error(`client.mjs: ${e.stack || e}`);
  process.exit(1);
});
