// subscriptions.js: subscriptions list, detail (credentials as the API masks them, its
// attempts and latency per minute), create and edit (a form, subform.js, or the document
// as JSON; saved as a merge patch), enable/disable and delete (admin scope).
import { html, useEffect, useState } from '../vendor/htm-preact.js';
import { api, nameGlob, qs } from '../api.js';
import { AttemptsChart, LatencyChart } from '../chart.js';
import { Cell, ErrorNote, fmtRate, fmtTime, navigate, useAsync } from '../util.js';
import { SubscriptionForm, describeAuth, describeRetry } from './subform.js';

const READ_ONLY_FIELDS = ['id', 'created_at', 'updated_at', 'origin', 'previous_secret', 'previous_secret_expires_at', 'disabled_at', 'disabled_reason'];

// A page of PAGE subscriptions at a time (a platform may have thousands), with the health
// figures of that page's subscriptions alone.
const PAGE = 100;

export function Subscriptions({ can, query, refresh }) {
  const cursor = query ? query.get('cursor') || '' : '';
  const find = query ? query.get('find') || '' : '';
  const [typed, setTyped] = useState(find);
  useEffect(() => setTyped(find), [find]);
  const [subs] = useAsync(async () => {
    const page = await api('GET', `/v1/subscriptions${qs({ limit: PAGE, cursor: cursor || undefined, name: nameGlob(find) || undefined })}`);
    const ids = page.items.map((s) => s.id).join(',');
    const stats = ids ? await api('GET', `/v1/stats${qs({ subscription_id: ids })}`) : { subscriptions: [] };
    return [page, stats];
  }, [cursor, find], refresh);
  const health = (id) => (subs.data ? subs.data[1].subscriptions.find((s) => s.id === id) : null) || {};
  const next = subs.data && subs.data[0].next_cursor;
  const submit = (e) => {
    e.preventDefault();
    navigate(`/subscriptions${qs({ find: typed.trim() || undefined })}`);
  };
  return html`<main>
    <h1>Subscriptions</h1>
    ${can.admin && html`<p><a class="button primary" href="#/subscriptions/new">New subscription</a></p>`}
    <form class="filters find" role="search" aria-label="Find subscriptions" onSubmit=${submit}>
      <div><label for="f-find">Name</label><input id="f-find" name="find" value=${typed}
        onInput=${(e) => setTyped(e.target.value)} placeholder="part of it, or a glob: acme-*" /></div>
      <div class="actions"><button type="submit">Find</button>
        ${find && html` <a class="button" href="#/subscriptions">Show all</a>`}</div>
    </form>
    <${ErrorNote} error=${subs.error} />
    ${find && subs.data && !subs.data[0].items.length && !cursor && html`<p class="muted" data-testid="no-match">No subscription's name matches “${find}”.</p>`}
    <div class="scroll"><table class="list rows" data-testid="subscriptions">
      <thead><tr><th>Name</th><th>Endpoint</th><th>Event types</th><th>Enabled</th><th>Circuit</th><th>Success</th></tr></thead>
      <tbody>
        ${subs.data && subs.data[0].items.map((s) => html`<tr data-sub=${s.name}>
          <${Cell} label="Name"><a href=${`#/subscriptions/${s.id}`}>${s.name}</a><//>
          <${Cell} label="Endpoint" cls="target"><code>${s.endpoint}</code><//>
          <${Cell} label="Event types">${s.event_types.join(', ') || '—'}<//>
          <${Cell} label="Enabled">${s.enabled ? 'yes' : html`<span class="badge warn">no</span>`}<//>
          <${Cell} label="Circuit"><span class=${`pill circuit-${health(s.id).circuit}`}>${health(s.id).circuit || '—'}</span><//>
          <${Cell} label="Success" cls="num">${fmtRate(health(s.id).success_rate)}<//>
        </tr>`)}
      </tbody>
    </table></div>
    ${(cursor || next) && html`<p class="pager">
      ${cursor && html`<a class="button" href=${`#/subscriptions${qs({ find: find || undefined })}`}>First page</a>`}
      ${next && html` <a class="button" data-testid="next-page" href=${`#/subscriptions${qs({ cursor: next, find: find || undefined })}`}>Next page</a>`}
    </p>`}
  </main>`;
}

function editable(sub) {
  const out = { ...sub };
  for (const k of READ_ONLY_FIELDS) delete out[k];
  return out;
}

// A merge patch from the edited document: changed keys, and null for removed ones.
function mergePatch(before, after) {
  const patch = {};
  for (const k of Object.keys(after)) if (JSON.stringify(before[k]) !== JSON.stringify(after[k])) patch[k] = after[k];
  for (const k of Object.keys(before)) if (!(k in after)) patch[k] = null;
  return patch;
}

// How many requests this instance sends the subscription's endpoint at once, and why.
function FlowControl({ id, refresh }) {
  const [stats] = useAsync(() => api('GET', `/v1/stats${qs({ subscription_id: id })}`), [id], refresh);
  const mine = stats.data && stats.data.subscriptions.find((x) => x.id === id);
  const flow = mine && mine.concurrency;
  if (!flow) return html`<tr><th>Concurrency</th><td class="muted">—</td></tr>`;
  if (flow.mode === 'fixed') return html`<tr><th>Concurrency</th><td>fixed: ${flow.limit} at once</td></tr>`;
  const ep = stats.data.endpoints.find((e) => e.endpoint === flow.endpoint);
  if (!ep) return html`<tr><th>Concurrency</th><td>adaptive (nothing sent yet from this instance)</td></tr>`;
  return html`<tr><th>Concurrency</th><td>adaptive: limit <strong>${ep.limit}</strong> · ${ep.in_flight} in flight · ${ep.queued} waiting · latency ${ep.latency_ms.toFixed(1)} ms (unloaded ${ep.latency_min_ms.toFixed(1)} ms)</td></tr>`;
}

// This subscription's attempts per minute over the last hour, by outcome, and their
// latency (p50, p99), from GET /v1/stats/series?subscription_id=.
function Activity({ id, refresh }) {
  const [series] = useAsync(() => api('GET', `/v1/stats/series?minutes=60&subscription_id=${id}`), [id], refresh);
  return html`<section class="card" data-testid="activity">
    <h2>Attempts per minute</h2>
    <${ErrorNote} error=${series.error} />
    <${AttemptsChart} series=${series.data} label="This subscription's delivery attempts per minute by outcome, last hour" />
    <h2 class="sub">Latency</h2>
    <${LatencyChart} series=${series.data} label="This subscription's attempt latency per minute, p50 and p99, last hour" />
  </section>`;
}

export function SubscriptionDetail({ id, can, refresh }) {
  const [sub, reload] = useAsync(() => api('GET', `/v1/subscriptions/${id}`), [id], refresh);
  const [text, setText] = useState(null);
  const [form, setForm] = useState(false);
  const [sent, setSent] = useState(null);
  const [error, setError] = useState(null);
  const [message, setMessage] = useState(null);
  const [confirm, setConfirm] = useState(false);
  if (sub.error) return html`<main><h1>Subscription</h1><${ErrorNote} error=${sub.error} /></main>`;
  if (!sub.data) return html`<main><h1>Subscription</h1><p class="muted">Loading…</p></main>`;
  const s = sub.data;
  const patch = async (body, what) => {
    setError(null);
    try {
      const r = await api('PATCH', `/v1/subscriptions/${id}`, body);
      setMessage(`${what}.${r.secret && !String(r.secret).includes('*') ? ` New signing secret (shown once): ${r.secret}` : ''}`);
      setText(null);
      reload();
    } catch (e) { setError(e); }
  };
  // A test event (POST /v1/subscriptions/{id}/test): a real delivery, shown with the
  // deliveries of its event.
  const sendTest = async () => {
    setError(null);
    setMessage(null);
    try { setSent(await api('POST', `/v1/subscriptions/${id}/test`)); } catch (e) { setError(e); }
  };
  // The form's save: errors go back to the form, which shows them at their field.
  const saveForm = async (body) => {
    setError(null);
    await api('PATCH', `/v1/subscriptions/${id}`, body);
    setMessage('Saved.');
    setForm(false);
    reload();
  };
  const save = () => {
    let doc;
    try { doc = JSON.parse(text); } catch (e) { setError(new Error(`Not JSON: ${e.message}`)); return; }
    const p = mergePatch(editable(s), doc);
    if (!Object.keys(p).length) { setText(null); return; }
    patch(p, 'Saved');
  };
  const del = async () => {
    try { await api('DELETE', `/v1/subscriptions/${id}`); navigate('/subscriptions'); } catch (e) { setError(e); }
  };
  return html`<main>
    <p><a href="#/subscriptions">← Subscriptions</a></p>
    <h1>${s.name} ${!s.enabled && html`<span class="badge warn">disabled</span>`}</h1>
    <section class="card">
      <table class="kv"><tbody>
        <tr><th>Endpoint</th><td><code>${s.endpoint}</code></td></tr>
        <tr><th>Event types</th><td>${s.event_types.join(', ') || '—'}</td></tr>
        ${s.filter && html`<tr><th>Payload filter</th><td data-testid="filter"><code>${JSON.stringify(s.filter)}</code></td></tr>`}
        <tr><th>Auth</th><td data-testid="auth">${describeAuth(s.auth)}</td></tr>
        <tr><th>Retries</th><td data-testid="retry">${describeRetry(s.retry)}${s.timeout ? `; immediate tries time out after ${s.timeout}` : ''}</td></tr>
        <tr><th>Ordering</th><td data-testid="ordering">${s.ordering === 'partition_key' ? `per partition_key; a dead delivery ${s.ordering_on_dead === 'skip' ? 'is skipped' : 'blocks its key'}` : 'none'}</td></tr>
        <tr><th>Disable after</th><td data-testid="disable-after">${s.disable_after ? (s.disable_after === '0s' ? 'never' : `${s.disable_after} of failing`) : "the server's disable_after"}</td></tr>
        <tr><th>Signing secret</th><td>${s.secret ? html`<code>${s.secret}</code>` : 'none'}</td></tr>
        <${FlowControl} id=${id} refresh=${refresh} />
        ${s.disabled_reason && html`<tr><th>Disabled</th><td>${s.disabled_reason} (${fmtTime(s.disabled_at)})</td></tr>`}
        <tr><th>Created · updated</th><td>${fmtTime(s.created_at)} · ${fmtTime(s.updated_at)}</td></tr>
      </tbody></table>
      <p><a href=${`#/dlq?subscription_id=${s.id}`}>Its dead letters</a> · <a href=${`#/deliveries?subscription_id=${s.id}&order=desc`}>Its deliveries</a></p>
      ${message && html`<p class="notice" role="status">${message}</p>`}
      ${sent && html`<p class="notice" role="status" data-testid="test-sent">Test event sent: <a href=${`#/deliveries?event_id=${sent.event_id}`}>its delivery</a> (event <code>${sent.event_id}</code>).</p>`}
      <${ErrorNote} error=${error} />
      ${can.operate && html`<div class="actions"><button onClick=${sendTest} disabled=${!s.enabled}
          title=${s.enabled ? 'A real event (test.ping), delivered to this subscription only' : 'Enable it first: a test event would only wait'}>Send a test event</button></div>`}
      ${can.admin && html`<div class="actions">
        <button onClick=${() => patch({ enabled: !s.enabled }, s.enabled ? 'Disabled' : 'Enabled')}>${s.enabled ? 'Disable' : 'Enable'}</button>
        <button onClick=${() => { setError(null); setMessage(null); setText(null); setForm(true); }}>Edit…</button>
        <button onClick=${() => { setError(null); setForm(false); setText(JSON.stringify(editable(s), null, 2)); }}>Edit as JSON…</button>
        <button class="danger" onClick=${() => setConfirm(true)}>Delete…</button>
      </div>`}
      ${confirm && html`<div class="confirm" role="alertdialog" aria-label="Confirm delete"><p>Delete ${s.name}? Its pending deliveries go to the dead-letter queue (410 subscription deleted).</p>
        <button class="danger" onClick=${del}>Delete</button> <button onClick=${() => setConfirm(false)}>Keep it</button></div>`}
    </section>
    <${Activity} id=${id} refresh=${refresh} />
    ${form && html`<section><h2>Edit</h2><${SubscriptionForm} stored=${s} onSave=${saveForm} onCancel=${() => setForm(false)} /></section>`}
    ${text !== null && html`<section class="card">
      <h2>Edit</h2>
      <p class="muted small">The subscription as JSON; masked credentials (********) left as they are keep the stored value. Saved as a merge patch of what you changed.</p>
      <textarea class="json" aria-label="Subscription JSON" rows="20" value=${text} onInput=${(e) => setText(e.target.value)}></textarea>
      <div class="actions"><button class="primary" onClick=${save}>Save</button> <button onClick=${() => setText(null)}>Cancel</button></div>
    </section>`}
    <section class="card"><h2>Configuration</h2><pre class="payload">${JSON.stringify(s, null, 2)}</pre></section>
  </main>`;
}

export function SubscriptionNew({ can }) {
  const [secret, setSecret] = useState(true);
  const [more, setMore] = useState('{}');
  const [created, setCreated] = useState(null);
  if (!can.admin) return html`<main><h1>New subscription</h1><p>Creating subscriptions needs the admin scope.</p></main>`;
  // What the form does not cover (headers, tls, circuit_breaker, rate_limit, ...) as JSON,
  // and the generated signing secret.
  const extra = {
    parse: () => {
      let doc;
      try { doc = JSON.parse(more || '{}'); } catch (err) { throw new Error(`More settings: not JSON: ${err.message}`); }
      if (secret) doc.secret = 'generate';
      return doc;
    },
    render: () => html`<fieldset><legend>More</legend>
      <label class="check"><input type="checkbox" checked=${secret} onChange=${(e) => setSecret(e.target.checked)} /> Generate a signing secret</label>
      <label for="n-extra">More settings (JSON: headers, tls, circuit_breaker, rate_limit, … — see docs/api.md)</label>
      <textarea id="n-extra" class="json" rows="5" value=${more} onInput=${(e) => setMore(e.target.value)}></textarea></fieldset>`,
  };
  if (created) {
    return html`<main><h1>Created ${created.name}</h1>
      ${created.secret && !created.secret.includes('*') && html`<p class="notice">Signing secret, shown this once: <code>${created.secret}</code></p>`}
      <p><a href=${`#/subscriptions/${created.id}`}>Open it</a></p></main>`;
  }
  return html`<main><h1>New subscription</h1>
    <${SubscriptionForm} stored=${null} extra=${extra}
      onSave=${async (body) => setCreated(await api('POST', '/v1/subscriptions', body))}
      onCancel=${() => navigate('/subscriptions')} /></main>`;
}
