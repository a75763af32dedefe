// lib.mjs: what the console's browser tests share: starting the built outboxd (SQLite in
// a temporary directory) and test_receiver on free local ports, calling the API, and a
// Chromium page (playwright-core driving Debian's /usr/bin/chromium) that records page
// errors, console errors and every request URL, so a test can fail on any of them.
// Everything started here is stopped by stopAll(), also when a test fails.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';

const need = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run through ctest: cd build-test && ctest -R browser)`);
  return v;
};

export const ARTIFACTS = process.env.ARTIFACTS_DIR || path.join(os.tmpdir(), 'outboxd-browser-artifacts');
fs.mkdirSync(ARTIFACTS, { recursive: true });
export const ADMIN_TOKEN = 'console-test-admin-token-0123456789';
// Logs are named after the test (both run at once under ctest -j): test_console-outboxd.log
const TEST_NAME = path.basename(process.argv[1] || 'test', '.mjs');

const children = [];
let tmpdir = null;

export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

// Polls fn until it returns a truthy value (returned), or fails after timeoutMs.
export async function waitFor(what, fn, timeoutMs = 30000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try { const v = await fn(); if (v) return v; } catch (e) { last = e; }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${last.message}` : ''}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function start(name, bin, args, env) {
  const log = fs.openSync(path.join(ARTIFACTS, `${TEST_NAME}-${name}.log`), 'w');
  const child = spawn(bin, args, { env: { ...process.env, ...env }, stdio: ['ignore', log, log] });
  child.label = name;
  children.push(child);
  child.on('exit', (code, sig) => { child.exited = { code, sig }; });
  return child;
}

// Starts a server on a free port and waits until ready() answers; the port may be taken
// by another process between freePort() and the child's bind (the machine is shared), so
// a child that exits while starting is started again on another port, up to 3 times.
async function startOnFreePort(name, bin, args, env, ready) {
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const child = start(name, bin, args(port), env(port));
    const url = `http://127.0.0.1:${port}`;
    const ok = await waitFor(`${name} on port ${port}`, async () => {
      if (child.exited) return 'exited';
      return (await ready(url)) && !child.exited ? 'ready' : false;
    });
    if (ok === 'ready') return url;
    child.replaced = true;
    if (attempt === 3) throw new Error(`${name} exited while starting (${JSON.stringify(child.exited)}), see ${ARTIFACTS}/${TEST_NAME}-${name}.log`);
  }
}

export async function startReceiver() {
  const url = await startOnFreePort('receiver', need('RECEIVER_BIN'), (port) => ['--port', String(port)], () => ({}),
    async (u) => (await fetch(`${u}/_control/stats`)).ok);
  return {
    url,
    script: async (p, status, body = '') => {
      const r = await fetch(`${url}/_control/script`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ path: p, default: { status, body } }),
      });
      if (!r.ok) throw new Error(`receiver script ${p}: ${r.status} ${await r.text()}`);
    },
  };
}

export async function startOutboxd() {
  tmpdir = fs.mkdtempSync(path.join(os.tmpdir(), 'outboxd-browser-'));
  const url = await startOnFreePort('outboxd', need('OUTBOXD_BIN'), () => ['serve', '--ssrf-allow', '127.0.0.0/8'],
    (port) => ({
      OUTBOXD_DB: `sqlite:${tmpdir}/outboxd.db`,
      OUTBOXD_LISTEN: `127.0.0.1:${port}`,
      OUTBOXD_ADMIN_TOKEN: ADMIN_TOKEN,
      OUTBOXD_DATA_DIR: tmpdir,
    }),
    async (u) => (await fetch(`${u}/readyz`)).ok);
  const call = async (method, p, body, token = ADMIN_TOKEN) => {
    const r = await fetch(url + p, {
      method, headers: { Authorization: `Bearer ${token}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    if (!r.ok) throw new Error(`${method} ${p}: ${r.status} ${text}`);
    return text ? JSON.parse(text) : null;
  };
  return { url, api: call };
}

export async function launchBrowser() {
  const require = createRequire(path.join(need('BROWSER_NODE_MODULES'), 'x.js'));
  const { chromium } = require('playwright-core');
  const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';
  if (!fs.existsSync(executablePath)) throw new Error(`${executablePath} is missing: bash scripts/deps.sh installs Debian's chromium`);
  return chromium.launch({ executablePath, headless: true, args: ['--no-sandbox', '--disable-dev-shm-usage'] });
}

// A page that records what must not happen: page errors, console errors (CSP violations
// are reported there), and any request to another origin.
export async function watchedPage(browser, origin, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 }, ...options });
  const page = await context.newPage();
  page.setDefaultTimeout(30000); // generous: make test shares 2 cores with everything else
  const problems = [];
  const requests = [];
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
  page.on('request', (r) => {
    requests.push(r.url());
    if (new URL(r.url()).origin !== origin) problems.push(`request to another origin: ${r.url()}`);
  });
  // net::ERR_ABORTED is the page's own cancel: a request still under way when the page
  // moved on (a chart's fetch when an action navigates away), which no user sees; every
  // other failure (refused, reset, timed out) is a problem.
  page.on('requestfailed', (r) => {
    const why = r.failure() && r.failure().errorText;
    if (why !== 'net::ERR_ABORTED') problems.push(`request failed: ${r.url()} ${why}`);
  });
  return { context, page, problems, requests };
}

// Runs a test's steps on a watched page of a fresh browser (steps gets { browser, page,
// problems, requests }), then the check every browser test ends with: no page error, no
// console error, no request to another host. When a step fails, failShot(page) keeps what
// the page showed; the browser is closed either way.
export async function inBrowser(origin, failShot, steps) {
  const browser = await launchBrowser();
  const watched = await watchedPage(browser, origin);
  const { page, problems, requests } = watched;
  try {
    await steps({ browser, ...watched });
    await step('no page error, no console error, no request to another host', async () => {
      check(requests.length > 10, `requests were recorded (${requests.length})`);
      check(problems.length === 0, problems.join('\n'));
    });
  } catch (e) {
    await failShot(page).catch(() => {});
    if (problems.length) console.log(problems.join('\n'));
    throw e;
  } finally {
    await browser.close();
  }
}

// Stops every child (SIGTERM, SIGKILL after 10 s) and removes the data directory.
// Returns what went wrong: outboxd must exit 0 on SIGTERM (under the sanitizers a leak
// or a memory error makes it exit otherwise; its log says which).
export async function stopAll() {
  const wrong = [];
  for (const c of children) {
    const early = c.exited;
    if (!early) {
      c.kill('SIGTERM');
      await new Promise((resolve) => {
        const t = setTimeout(() => { c.kill('SIGKILL'); resolve(); }, 10000);
        c.once('exit', () => { clearTimeout(t); resolve(); });
        if (c.exited) { clearTimeout(t); resolve(); }
      });
    }
    if (c.label === 'outboxd' && !c.replaced && (early || !c.exited || c.exited.code !== 0)) {
      wrong.push(`outboxd ${early ? 'exited before the end' : 'did not exit cleanly on SIGTERM'} (${JSON.stringify(c.exited)}): see ${ARTIFACTS}/${TEST_NAME}-outboxd.log`);
    }
  }
  if (tmpdir) fs.rmSync(tmpdir, { recursive: true, force: true });
  return wrong;
}

// Runs a test's main, then stops everything; exits 1 when either failed.
export function run(main) {
  main().then(async () => {
    const wrong = await stopAll();
    if (wrong.length) { console.error(wrong.join('\n')); process.exit(1); }
  }, async (e) => {
    const wrong = await stopAll();
    console.error(e);
    if (wrong.length) console.error(wrong.join('\n'));
    for (const name of ['outboxd', 'receiver']) {
      const f = path.join(ARTIFACTS, `${TEST_NAME}-${name}.log`);
      if (fs.existsSync(f)) console.error(`---- tail of ${f} ----\n${fs.readFileSync(f, 'utf8').slice(-3000)}`);
    }
    process.exit(1);
  });
}

export function check(cond, message) {
  if (!cond) throw new Error(`check failed: ${message}`);
}

// One step of a test, named in the output.
export async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.message}`);
    throw e;
  }
}

// What a page must look like at any width, checked in the page as laid out: the page
// does not scroll sideways (document.scrollingElement.scrollWidth <= innerWidth); no
// two visible pieces of text overlap (the client rectangles of every text node, and of
// the chart's SVG labels, more than 1 px into each other); every piece of text lies
// within the viewport's width, also inside sideways-scrolling boxes (a column pushed
// off-screen fails); no text is squeezed into a column so narrow that it wraps at
// fewer than 6 characters a line; and the boot text "Loading the outboxd console…" is
// gone. Returns the list of what is wrong (empty when nothing is).
export async function layoutProblems(page) {
  await page.evaluate(() => window.scrollTo(0, 0));
  return page.evaluate(() => {
    const wrong = [];
    const vw = window.innerWidth;
    const se = document.scrollingElement;
    if (se.scrollWidth > vw) wrong.push(`the page scrolls sideways: scrollWidth ${se.scrollWidth} > innerWidth ${vw}`);
    if (document.body.innerText.includes('Loading the outboxd console')) wrong.push('the boot text "Loading the outboxd console…" is still shown');
    const pieces = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      const text = n.textContent.trim();
      const el = n.parentElement;
      if (!text || !el || el.closest('select, option, title, script, style, noscript')) continue;
      // not rendered: display none, or inside a closed <details> (content-visibility)
      if (!el.checkVisibility({ opacityProperty: true, visibilityProperty: true, contentVisibilityAuto: true })) continue;
      let rects;
      if (el.closest('svg')) {
        const r = el.getBoundingClientRect();
        rects = [r];
      } else {
        const range = document.createRange();
        range.selectNodeContents(n);
        rects = [...range.getClientRects()];
      }
      rects = rects.filter((r) => r.width > 0.5 && r.height > 0.5);
      if (!rects.length) continue;
      pieces.push({ text, rects, el });
    }
    const name = (p) => JSON.stringify(p.text.slice(0, 40));
    for (const p of pieces) {
      const lines = new Set(p.rects.map((r) => Math.round(r.top))).size;
      if (lines > 1 && p.text.length / lines < 6) wrong.push(`${name(p)} is squeezed: ${lines} lines for ${p.text.length} characters`);
      for (const r of p.rects) {
        if (r.left < -1 || r.right > vw + 1) { wrong.push(`${name(p)} lies outside the viewport's width (${Math.round(r.left)}..${Math.round(r.right)} of ${vw})`); break; }
      }
    }
    const over = (a, b) => Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 && Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1;
    for (let i = 0; i < pieces.length && wrong.length < 20; i++) {
      for (let j = i + 1; j < pieces.length; j++) {
        const a = pieces[i], b = pieces[j];
        if (a.rects.some((ra) => b.rects.some((rb) => over(ra, rb)))) {
          wrong.push(`${name(a)} overlaps ${name(b)}`);
          break;
        }
      }
    }
    return wrong;
  });
}
