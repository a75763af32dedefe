// node_server.js: a webhook receiver on Node's http module, as a user writes one: answers
// 200 to every request at once (asynchronous, keep-alive, no limit of its own).
//
//     node node_server.js --port PORT --control-port CPORT
//
// Records every request's webhook-id and outboxd-attempt and serves the record on
// CPORT, the same way as recorder.py for the Python receivers (GET /_control/stats,
// POST /_control/reset). It must not delay or refuse anything: it is the receiver that
// keeps up.
'use strict';
const http = require('http');

function arg(name) {
  const i = process.argv.indexOf(name);
  if (i < 0 || i + 1 >= process.argv.length) throw new Error(`${name} is required`);
  return Number(process.argv[i + 1]);
}

let rec;
function reset() {
  rec = { requests: 0, withoutId: 0, duplicates: 0, retried: 0, attempts: new Map(),
    inProgress: 0, maxInProgress: 0 };
}
reset();

function begin(headers) {
  const id = headers['webhook-id'];
  const attempt = Number.parseInt(headers['outboxd-attempt'] || '0', 10) || 0;
  rec.requests++;
  rec.inProgress++;
  rec.maxInProgress = Math.max(rec.maxInProgress, rec.inProgress);
  if (!id) { rec.withoutId++; return; }
  const prev = rec.attempts.get(id);
  if (prev === undefined) { rec.attempts.set(id, new Set([attempt])); return; }
  rec.duplicates++;
  if (!prev.has(attempt)) { rec.retried++; prev.add(attempt); }
}

const server = http.createServer((req, res) => {
  begin(req.headers);
  req.resume();
  req.on('end', () => {
    rec.inProgress--;
    res.writeHead(200, { 'Content-Type': 'text/plain' });
    res.end('ok');
  });
});

const control = http.createServer((req, res) => {
  const path = req.url.split('?')[0];
  req.resume();
  let doc = null;
  if (req.method === 'GET' && path === '/_control/stats') {
    doc = { requests: rec.requests, unique_ids: rec.attempts.size, duplicates: rec.duplicates,
      duplicates_retried: rec.retried, without_id: rec.withoutId,
      max_in_progress: rec.maxInProgress, server: 'node http' };
  } else if (req.method === 'POST' && path === '/_control/reset') {
    reset();
    doc = { ok: true };
  }
  res.writeHead(doc ? 200 : 404, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(doc || { error: 'not found' }));
});

server.listen(arg('--port'), '127.0.0.1', () => {
  control.listen(arg('--control-port'), '127.0.0.1');
});
process.on('SIGTERM', () => process.exit(0));
