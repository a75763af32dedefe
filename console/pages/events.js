// events.js: the event search (GET /v1/events): its filters in the URL (shareable), keyset
// pages newest first, each event with its deliveries counted by state; one event
// (GET /v1/events/{id}): what it is, its payload, and its deliveries, each linked to its
// page and its subscription; and the event types stored (GET /v1/event-types), each with
// when it was last seen and how many subscriptions take it.
import { html, useEffect, useState } from '../vendor/htm-preact.js';
import { api, qs } from '../api.js';
import {
  Cell, ErrorNote, fmtTime, fromRfc3339, navigate, shortId, subName, toRfc3339, useAsync,
  useListKeys,
} from '../util.js';
import { Status, useSubscriptions } from './list.js';
import { Payload } from './delivery.js';

const FILTERS = [
  ['event_type', 'Event type', 'order.* '],
  ['source', 'Source', 'crm'],
  ['source_event_id', 'Source event id', 'the producer\'s key'],
  ['id', 'Event id', 'UUID'],
  ['filter', 'Payload matches (JSON filter)', '{"order": 1042}'],
];
const TIMES = [['from', 'Created from (UTC)'], ['to', 'Created before (UTC)']];
const KEYS = [...FILTERS.map(([k]) => k), ...TIMES.map(([k]) => k)];

function readQuery(query) {
  const f = {};
  for (const k of [...KEYS, 'cursor']) if (query.get(k) !== null && query.get(k) !== '') f[k] = query.get(k);
  return f;
}

function SearchForm({ current, onApply }) {
  const asForm = (c) => ({ ...c, from: fromRfc3339(c.from), to: fromRfc3339(c.to) });
  const [f, setF] = useState(asForm(current));
  useEffect(() => setF(asForm(current)), [JSON.stringify(current)]);
  const bind = (k) => ({ id: `f-${k}`, name: k, value: f[k] || '', onInput: (e) => setF({ ...f, [k]: e.target.value }) });
  const submit = (e) => {
    e.preventDefault();
    const out = {};
    for (const k of KEYS) if (f[k]) out[k] = TIMES.some(([t]) => t === k) ? toRfc3339(f[k]) : f[k].trim();
    onApply(out);
  };
  const active = KEYS.filter((k) => current[k]).length;
  // Open on wide screens; on a phone the search folds away above the list.
  const [open] = useState(() => !window.matchMedia('(max-width: 640px)').matches);
  return html`<details class="filterbox card" open=${open}>
    <summary>Search filters${active ? ` · ${active} active` : ''}</summary>
    <form class="filters" onSubmit=${submit} aria-label="Search events">
      ${FILTERS.map(([k, label, hint]) => html`<div><label for=${`f-${k}`}>${label}</label><input ...${bind(k)} placeholder=${hint} /></div>`)}
      ${TIMES.map(([k, label]) => html`<div><label for=${`f-${k}`}>${label}</label><input type="datetime-local" step="1" ...${bind(k)} /></div>`)}
      <div class="actions"><button type="submit" class="primary">Search</button>
        <button type="button" onClick=${() => onApply({})}>Clear</button></div>
    </form>
  </details>`;
}

// An event's deliveries by state, as words (only the states it has), linked to the list.
function Counts({ e }) {
  const c = e.delivery_counts;
  const parts = [
    [c.PROCESSED, 'processed', 'st-PROCESSED'],
    [c.NEW, 'new', 'st-NEW'],
    [c.FAILED_RETRYING, 'retrying', 'st-FAILED'],
    [c.FAILED_DEAD, 'dead', 'st-dead'],
  ].filter(([n]) => n > 0);
  if (!parts.length) return html`<span class="muted" data-testid="counts">none</span>`;
  return html`<a href=${`#/deliveries?event_id=${e.id}`} class="counts" data-testid="counts" title="its deliveries">
    ${parts.map(([n, word, cls]) => html`<span class=${`pill ${cls}`}>${n} ${word}</span> `)}</a>`;
}

export function Events({ query, refresh }) {
  const current = readQuery(query);
  const key = new URLSearchParams(query).toString();
  const [list] = useAsync(() => api('GET', `/v1/events${qs({ limit: 50, ...current })}`), [key], refresh);
  const items = list.data ? list.data.items : [];
  useListKeys();
  const search = { ...current };
  delete search.cursor;
  return html`<main>
    <h1>Events</h1>
    <p><a class="button" href="#/event-types">Event types</a></p>
    <${SearchForm} current=${search} onApply=${(f) => navigate(`/events${qs(f)}`)} />
    <div class="toolbar">
      <span class="muted" data-testid="shown">${list.loading && !list.data ? 'Loading…'
        : list.data && list.data.scanned !== undefined
          ? `${items.length} found among ${list.data.scanned} events read, newest first${list.data.next_cursor ? '; the next page reads on' : ''}`
          : `${items.length} shown, newest first${list.data && list.data.next_cursor ? ', more on the next page' : ''}`}</span>
    </div>
    <${ErrorNote} error=${list.error} />
    <div class="scroll"><table class="list rows" data-testid="events">
      <thead><tr><th>Event</th><th>Event type</th><th>Source</th><th>Source event id</th><th>Deliveries</th><th>Created (UTC)</th></tr></thead>
      <tbody>
        ${items.map((e) => html`<tr data-id=${e.id}>
          <${Cell} label="Event" cls="id"><a href=${`#/events/${e.id}`}><code>${shortId(e.id)}</code></a><//>
          <${Cell} label="Event type" cls="target">${e.event_type}<//>
          <${Cell} label="Source" cls="target">${e.source || html`<span class="muted">—</span>`}<//>
          <${Cell} label="Source event id" cls="target">${e.source_event_id ? html`<code>${e.source_event_id}</code>` : html`<span class="muted">—</span>`}<//>
          <${Cell} label="Deliveries"><${Counts} e=${e} /><//>
          <${Cell} label="Created (UTC)">${fmtTime(e.created_at)}<//>
        </tr>`)}
        ${!list.loading && items.length === 0 && html`<tr><td colspan="6" class="muted" data-testid="empty">No event matches.</td></tr>`}
      </tbody>
    </table></div>
    <div class="pager">
      ${current.cursor && html`<a class="button" href=${`#/events${qs(search)}`}>First page</a>`}
      ${list.data && list.data.next_cursor && html`<a class="button" href=${`#/events${qs({ ...search, cursor: list.data.next_cursor })}`}>Next page</a>`}
    </div>
  </main>`;
}

export function EventDetail({ id, refresh }) {
  const [ev] = useAsync(() => api('GET', `/v1/events/${id}`), [id], refresh);
  const subs = useSubscriptions(refresh, ev.data ? ev.data.deliveries.map((d) => d.subscription_id) : []);
  const first = ev.data && ev.data.deliveries.length ? ev.data.deliveries[0].id : null;
  // The payload's exact bytes come with a delivery's request (GET /v1/events/{id} parses
  // JSON, so 0.10 could read 0.1); without a delivery, or when its subscription is gone,
  // the event's payload as the API returns it.
  const [req] = useAsync(() => (first ? api('GET', `/v1/deliveries/${first}/request`).catch(() => null) : Promise.resolve(null)), [first]);
  if (ev.error) return html`<main><h1>Event</h1><${ErrorNote} error=${ev.error} /></main>`;
  if (!ev.data) return html`<main><h1>Event</h1><p class="muted">Loading…</p></main>`;
  const x = ev.data;
  const none = html`<span class="muted">—</span>`;
  return html`<main>
    <p><a href="#/events">← Events</a></p>
    <h1>Event <code class="small">${x.id}</code></h1>
    <section class="card">
      <table class="kv" data-testid="event"><tbody>
        <tr><th>Event type</th><td>${x.event_type}</td></tr>
        <tr><th>Source</th><td>${x.source ? html`<a href=${`#/events${qs({ source: x.source })}`}>${x.source}</a>` : none}</td></tr>
        <tr><th>Source event id</th><td>${x.source_event_id ? html`<code>${x.source_event_id}</code>` : none}</td></tr>
        <tr><th>Partition key</th><td>${x.partition_key ? html`<code>${x.partition_key}</code>` : none}</td></tr>
        <tr><th>Webhook id</th><td><code>${x.webhook_id}</code><br /><small class="muted">${x.webhook_id === x.id ? "the event's own id" : "its id upstream (a Kafka envelope's event.id)"}</small></td></tr>
        <tr><th>Content type</th><td><code>${x.content_type}</code></td></tr>
        <tr><th>Created</th><td>${fmtTime(x.created_at)}</td></tr>
      </tbody></table>
    </section>
    <section class="card">
      <h2>Deliveries <small class="muted">${x.deliveries.length} · <a href=${`#/deliveries?event_id=${x.id}`}>in the deliveries list</a></small></h2>
      <div class="scroll"><table class="list rows" data-testid="event-deliveries">
        <thead><tr><th>Delivery</th><th>Subscription</th><th>Status</th><th>Attempts</th><th>Last error</th><th>Updated (UTC)</th></tr></thead>
        <tbody>
          ${x.deliveries.map((d) => html`<tr data-id=${d.id}>
            <${Cell} label="Delivery"><a href=${`#/deliveries/${d.id}`}><code>${shortId(d.id)}</code></a><//>
            <${Cell} label="Subscription"><a href=${`#/subscriptions/${d.subscription_id}`}>${subName(subs, d.subscription_id)}</a><//>
            <${Cell} label="Status"><${Status} d=${d} subs=${subs} /><//>
            <${Cell} label="Attempts" cls="num">${d.attempt_count}<//>
            <${Cell} label="Last error" cls="err">${d.last_error ? html`<b>${d.last_error.code}</b> ${d.last_error.message}` : '—'}<//>
            <${Cell} label="Updated (UTC)">${fmtTime(d.updated_at)}<//>
          </tr>`)}
          ${x.deliveries.length === 0 && html`<tr><td colspan="6" class="muted">No subscription took this event.</td></tr>`}
        </tbody>
      </table></div>
    </section>
    <section class="card"><h2>Payload</h2>${first && req.loading ? html`<p class="muted">Loading…</p>`
      : html`<${Payload} event=${x} bodyBase64=${req.data ? req.data.body_base64 : null} />`}</section>
  </main>`;
}

// The types of the stored events, a page of 100 at a time in byte order: when each was
// last seen, how many enabled subscriptions take it (none: stored, delivered to nobody),
// each linked to its events.
export function EventTypes({ query, refresh }) {
  const cursor = query ? query.get('cursor') || '' : '';
  const [types] = useAsync(() => api('GET', `/v1/event-types${qs({ limit: 100, cursor: cursor || undefined })}`), [cursor], refresh);
  const items = types.data ? types.data.items : [];
  return html`<main>
    <h1>Event types</h1>
    <p><a href="#/events">Events</a> · the types of the events stored, with how many subscriptions take each</p>
    <${ErrorNote} error=${types.error} />
    <div class="scroll"><table class="list rows" data-testid="event-types">
      <thead><tr><th>Event type</th><th>Last seen (UTC)</th><th>Subscriptions</th></tr></thead>
      <tbody>
        ${items.map((t) => html`<tr data-type=${t.event_type}>
          <${Cell} label="Event type" cls="target"><a href=${`#/events${qs({ event_type: t.event_type })}`}>${t.event_type}</a><//>
          <${Cell} label="Last seen (UTC)">${fmtTime(t.last_seen)}<//>
          <${Cell} label="Subscriptions" cls="num">${t.subscriptions || html`<span class="badge warn" title="stored, delivered to nobody">none</span>`}<//>
        </tr>`)}
        ${!types.loading && items.length === 0 && html`<tr><td colspan="3" class="muted" data-testid="empty">No event stored yet.</td></tr>`}
      </tbody>
    </table></div>
    <div class="pager">
      ${cursor && html`<a class="button" href="#/event-types">First page</a>`}
      ${types.data && types.data.next_cursor && html`<a class="button" href=${`#/event-types${qs({ cursor: types.data.next_cursor })}`}>Next page</a>`}
    </div>
  </main>`;
}
