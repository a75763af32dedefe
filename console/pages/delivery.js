// delivery.js: one delivery: its state, the attempt timeline (kind, time, duration,
// code, message, cause), the payload (JSON pretty-printed, other bytes as hex or
// base64), the request outboxd sends (credentials masked), replay and purge.
import { html, useState } from '../vendor/htm-preact.js';
import { api } from '../api.js';
import { ErrorNote, b64ToBytes, fmtTime, hexDump, navigate, useAsync } from '../util.js';
import { Status, useSubscriptions } from './list.js';

// JSON.parse reviver keeping a number's text when a double would change it (0.10,
// integers past 2^53), so the pretty-printed payload shows what was sent. Browsers without
// JSON.rawJSON (before Chrome 114, Firefox 135, Safari 18.4) show the parsed value.
function keepNumberText(key, value, context) {
  if (typeof value === 'number' && context && typeof JSON.rawJSON === 'function' && context.source !== String(value)) {
    return JSON.rawJSON(context.source);
  }
  return value;
}

// The payload from the exact bytes (the request's body_base64); JSON pretty-printed,
// anything else as hex or base64. Without the bytes (the subscription is gone), the
// event's payload as GET /v1/deliveries/{id} returns it.
export function Payload({ event, bodyBase64 }) {
  const [view, setView] = useState('hex');
  if (!event && !bodyBase64) return html`<p class="muted">The event is gone (purged with its last delivery).</p>`;
  const b64 = bodyBase64 ?? (event && event.payload_base64);
  const type = (event && event.content_type) || '';
  if (b64 !== undefined && b64 !== null && /json/i.test(type)) {
    try {
      const text = new TextDecoder('utf-8', { fatal: true }).decode(b64ToBytes(b64));
      return html`<pre class="payload" data-testid="payload">${JSON.stringify(JSON.parse(text, keepNumberText), null, 2)}</pre>`;
    } catch { /* not JSON after all: shown as bytes below */ }
  }
  if ((b64 === undefined || b64 === null) && event.payload !== undefined) {
    return html`<pre class="payload" data-testid="payload">${JSON.stringify(event.payload, null, 2)}</pre>`;
  }
  const bytes = b64ToBytes(b64 || '');
  return html`<div>
    <div class="tabs" role="tablist">
      <button role="tab" aria-selected=${view === 'hex'} onClick=${() => setView('hex')}>Hex</button>
      <button role="tab" aria-selected=${view === 'base64'} onClick=${() => setView('base64')}>Base64</button>
      <span class="muted">${bytes.length} bytes, ${type}</span>
    </div>
    <pre class="payload" data-testid="payload">${view === 'hex' ? hexDump(bytes) : b64}</pre>
  </div>`;
}

function Request({ r }) {
  if (r.loading && !r.data) return html`<p class="muted">Loading…</p>`;
  if (r.error) return html`<p class="muted">${r.error.message}</p>`;
  const q = r.data;
  return html`<div>
    <p><code>${q.method} ${q.url}</code></p>
    <div class="scroll"><table class="kv headers" data-testid="headers"><tbody>
      ${q.headers.map((h) => html`<tr><th>${h.name}</th><td><code>${h.value || '…'}</code>${h.note && html` <small class="muted">${h.note}</small>`}</td></tr>`)}
    </tbody></table></div>
    <p class="muted small">As the subscription is configured now; values that change with each attempt are described, credentials shown as ********.</p>
  </div>`;
}

export function DeliveryDetail({ id, can, refresh }) {
  const [d, reload] = useAsync(() => api('GET', `/v1/deliveries/${id}`), [id], refresh);
  const [req] = useAsync(() => api('GET', `/v1/deliveries/${id}/request`), [id]);
  const subs = useSubscriptions(refresh, [d.data && d.data.subscription_id]);
  const [message, setMessage] = useState(null);
  const [error, setError] = useState(null);
  const [confirm, setConfirm] = useState(false);
  if (d.error) return html`<main><h1>Delivery</h1><${ErrorNote} error=${d.error} /></main>`;
  if (!d.data) return html`<main><h1>Delivery</h1><p class="muted">Loading…</p></main>`;
  const x = d.data;
  const sub = subs.find((s) => s.id === x.subscription_id);
  const replay = async () => {
    setError(null);
    try {
      const r = await api('POST', '/v1/dlq/replay', { ids: [id], force: x.status === 'PROCESSED' });
      setMessage(`Replay: ${r.results[0].outcome}.`);
      reload();
    } catch (e) { setError(e); }
  };
  const purge = async () => {
    try { await api('DELETE', `/v1/dlq/${id}`); navigate('/dlq'); } catch (e) { setError(e); setConfirm(false); }
  };
  return html`<main>
    <p><button class="link" onClick=${() => history.back()}>← Back</button></p>
    <h1>Delivery <code class="small">${x.id}</code></h1>
    <section class="card">
      <table class="kv"><tbody>
        <tr><th>Status</th><td><${Status} d=${x} subs=${subs} long=${true} />${x.replay ? ' (replayed)' : ''}
          ${sub && !sub.enabled && !x.dead && x.status !== 'PROCESSED' && html`<br /><small class="muted">${x.status}; ${sub.name} is disabled${sub.disabled_reason ? ` (${sub.disabled_reason})` : ''}: this delivery is sent again once it is enabled.</small>`}</td></tr>
        <tr><th>Event type</th><td>${x.event_type}</td></tr>
        <tr><th>Subscription</th><td>${sub ? html`<a href=${`#/subscriptions/${sub.id}`}>${sub.name}</a>` : x.subscription_id}</td></tr>
        <tr><th>Event</th><td><a href=${`#/events/${x.event_id}`} title="the event, its payload and its deliveries"><code>${x.event_id}</code></a>${x.event && x.event.source ? ` from ${x.event.source}` : ''}
          · <a href=${`#/deliveries?event_id=${x.event_id}`}>every delivery of it</a></td></tr>
        <tr><th>Attempts</th><td>${x.attempt_count} (${x.retry_count} scheduled retries)</td></tr>
        <tr><th>Next attempt</th><td>${fmtTime(x.next_attempt_at)}</td></tr>
        ${x.failing_since && html`<tr><th>Failing since</th><td>${fmtTime(x.failing_since)}</td></tr>`}
        <tr><th>Last error</th><td class="err">${x.last_error ? html`<b>${x.last_error.code}</b> ${x.last_error.message}${x.last_error.cause && html`<br /><small>${x.last_error.cause}</small>`}` : '—'}</td></tr>
        <tr><th>Created · updated · processed</th><td>${fmtTime(x.created_at)} · ${fmtTime(x.updated_at)} · ${fmtTime(x.processed_at)}</td></tr>
      </tbody></table>
      ${message && html`<p class="notice" role="status">${message}</p>`}
      <${ErrorNote} error=${error} />
      ${can.operate && html`<div class="actions">
        <button class="primary" onClick=${replay} disabled=${x.status === 'NEW'}>${x.status === 'PROCESSED' ? 'Re-send (force)' : 'Replay'}</button>
        ${x.dead && html`<button class="danger" onClick=${() => setConfirm(true)}>Purge…</button>`}
      </div>`}
      ${confirm && html`<div class="confirm" role="alertdialog" aria-label="Confirm purge"><p>Delete this delivery and its ${x.attempts.length} attempts? This cannot be undone.</p>
        <button class="danger" onClick=${purge}>Purge</button> <button onClick=${() => setConfirm(false)}>Keep it</button></div>`}
    </section>
    <section class="card">
      <h2>Attempts</h2>
      <ol class="timeline" data-testid="attempts">
        ${x.attempts.map((a) => html`<li class=${a.code >= 200 && a.code < 300 ? 'ok' : 'fail'}>
          <div><b>#${a.n}</b> <span class="pill">${a.kind}</span> <b class="code">${a.code}</b> ${a.message}</div>
          <div class="muted small">${fmtTime(a.started_at)} · ${a.duration_ms} ms</div>
          ${a.cause && html`<pre class="cause">${a.cause}</pre>`}
        </li>`)}
        ${x.attempts.length === 0 && html`<li class="muted">No attempt yet.</li>`}
      </ol>
    </section>
    <section class="card"><h2>Payload</h2>${req.loading && !req.data ? html`<p class="muted">Loading…</p>`
      : html`<${Payload} event=${x.event} bodyBase64=${req.data ? req.data.body_base64 : null} />`}</section>
    <section class="card"><h2>Request</h2><${Request} r=${req} /></section>
  </main>`;
}
