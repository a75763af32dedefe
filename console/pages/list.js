// list.js: the dead-letter queue and the deliveries browser: every filter of
// GET /v1/deliveries in the URL (shareable), keyset pages, and the operator actions:
// replay or purge a selection, or everything a filter matches (dry-run count first,
// then a paced replay job with live progress and cancel).
import { html, useEffect, useRef, useState } from '../vendor/htm-preact.js';
import { api, nameGlob, qs } from '../api.js';
import {
  Cell, ErrorNote, describeFilter, fmtTime, fromRfc3339, navigate, shortId, subName, toRfc3339, useAsync,
  useListKeys, waitingOn,
} from '../util.js';

const FILTER_KEYS = ['status', 'subscription_id', 'event_type', 'q', 'code', 'source', 'event_id', 'min_attempts', 'failing_since', 'from', 'to'];
const PAGE_KEYS = ['sort', 'order', 'limit'];

function readQuery(query) {
  const f = {};
  for (const k of [...FILTER_KEYS, ...PAGE_KEYS, 'cursor']) if (query.get(k)) f[k] = query.get(k);
  return f;
}

// The subscriptions (names for ids, enabled for "waiting", the filter's choices),
// reloaded with the page: the first SUBS_READ of them (a list to choose from is no help
// beyond that), and when there are more (a platform may have thousands), those of `ids`
// (the ones the page shows) read by id.
// The answer has `more` set when the first SUBS_READ are not all.
const SUBS_READ = 200;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export function useSubscriptions(refresh = 0, ids = []) {
  const [first] = useAsync(() => api('GET', `/v1/subscriptions${qs({ limit: SUBS_READ })}`), [], refresh);
  const have = new Set(first.data ? first.data.items.map((x) => x.id) : []);
  const missing = first.data && first.data.next_cursor
    ? [...new Set(ids.filter((id) => UUID.test(id || '') && !have.has(id)))].sort() : [];
  const [extra] = useAsync(async () => {
    let out = [];
    for (let i = 0; i < missing.length; i += 100) {
      out = out.concat((await api('GET', `/v1/subscriptions${qs({ id: missing.slice(i, i + 100).join(',') })}`)).items);
    }
    return out;
  }, [missing.join()], refresh);
  // the last answer stays while the next one loads: names do not blink at each refresh
  const last = useRef([]);
  if (first.data) {
    const all = first.data.items.concat(extra.data || []);
    all.more = Boolean(first.data.next_cursor);
    last.current = all;
  }
  return last.current;
}

function Filters({ dead, current, subs, onApply }) {
  const [f, setF] = useState({ ...current, from: fromRfc3339(current.from), to: fromRfc3339(current.to) });
  useEffect(() => setF({ ...current, from: fromRfc3339(current.from), to: fromRfc3339(current.to) }), [JSON.stringify(current)]);
  const bind = (k) => ({ id: `f-${k}`, name: k, value: f[k] || '', onInput: (e) => setF({ ...f, [k]: e.target.value }) });
  const [nameError, setNameError] = useState(null);
  const submit = async (e) => {
    e.preventDefault();
    const out = { ...f, from: toRfc3339(f.from), to: toRfc3339(f.to) };
    delete out.cursor;
    // with too many subscriptions for a list, a name typed: its id
    if (out.subscription_name !== undefined) {
      const name = out.subscription_name.trim();
      delete out.subscription_name;
      out.subscription_id = '';
      if (name) {
        try {
          // the name itself, else the one subscription whose name holds it (or matches
          // it, a glob): several are named in the error for the user to choose
          let found = /[*?]/.test(name) ? null : (await api('GET', `/v1/subscriptions${qs({ name })}`)).items[0];
          if (!found) {
            const like = (await api('GET', `/v1/subscriptions${qs({ name: nameGlob(name), limit: 6 })}`)).items;
            if (like.length !== 1) {
              const some = like.slice(0, 5).map((s) => s.name).join(', ') + (like.length > 5 ? ', …' : '');
              setNameError(new Error(like.length ? `${like.length > 5 ? 'more than 5' : like.length} subscriptions match ${name}: ${some}` : `no subscription's name matches ${name}`));
              return;
            }
            found = like[0];
          }
          out.subscription_id = found.id;
        } catch (err) { setNameError(err); return; }
      }
    }
    setNameError(null);
    onApply(out);
  };
  const active = FILTER_KEYS.filter((k) => current[k]).length;
  // Open on wide screens; on a phone the filter folds away above the list.
  const [open] = useState(() => !window.matchMedia('(max-width: 640px)').matches);
  return html`<details class="filterbox card" open=${open}>
    <summary>Filter${active ? ` · ${active} active` : ''}</summary>
    <form class="filters" onSubmit=${submit} aria-label="Filter">
    ${!dead && html`<div><label for="f-status">Status</label><select ...${bind('status')} onChange=${(e) => setF({ ...f, status: e.target.value })}>
      <option value="">any</option><option>NEW</option><option>PROCESSED</option><option>FAILED</option></select></div>`}
    ${subs.more
    ? html`<div><label for="f-subscription_name">Subscription</label><input id="f-subscription_name" name="subscription_name"
        value=${f.subscription_name !== undefined ? f.subscription_name : (f.subscription_id ? subName(subs, f.subscription_id) : '')}
        onInput=${(e) => setF({ ...f, subscription_name: e.target.value })} placeholder="its name" /></div>`
    : html`<div><label for="f-subscription_id">Subscription</label><select ...${bind('subscription_id')} onChange=${(e) => setF({ ...f, subscription_id: e.target.value })}>
      <option value="">any</option>${subs.map((s) => html`<option value=${s.id} selected=${s.id === f.subscription_id}>${s.name}</option>`)}</select></div>`}
    <div><label for="f-event_type">Event type</label><input ...${bind('event_type')} placeholder="order.* " /></div>
    <div><label for="f-q">Error text</label><input ...${bind('q')} placeholder="connection refused" /></div>
    <div><label for="f-code">Code</label><input ...${bind('code')} inputmode="numeric" size="4" placeholder="503" /></div>
    <div><label for="f-source">Source</label><input ...${bind('source')} /></div>
    <div><label for="f-event_id">Event id</label><input ...${bind('event_id')} placeholder="UUID" /></div>
    <div><label for="f-min_attempts">Attempts at least</label><input ...${bind('min_attempts')} inputmode="numeric" placeholder="10" /></div>
    <div><label for="f-failing_since">Failing for at least</label><input ...${bind('failing_since')} placeholder="1h, 2d or a time" /></div>
    <div><label for="f-from">Created from (UTC)</label><input type="datetime-local" step="1" ...${bind('from')} /></div>
    <div><label for="f-to">Created before (UTC)</label><input type="datetime-local" step="1" ...${bind('to')} /></div>
    <div><label for="f-sort">Sort</label><select ...${bind('sort')} onChange=${(e) => setF({ ...f, sort: e.target.value })}>
      <option value="">created</option><option value="updated_at">updated</option><option value="attempt_count">attempts</option></select></div>
    <div><label for="f-order">Order</label><select ...${bind('order')} onChange=${(e) => setF({ ...f, order: e.target.value })}>
      <option value="">oldest first</option><option value="desc">newest first</option></select></div>
    <${ErrorNote} error=${nameError} />
    <div class="actions"><button type="submit" class="primary">Apply</button>
      <button type="button" onClick=${() => onApply({})}>Clear</button></div>
  </form></details>`;
}

// A replay job's progress, polled every second until it ends; cancel while running.
export function JobProgress({ jobId, can, subs, onDone, onClose }) {
  const [job, setJob] = useState(null);
  const [error, setError] = useState(null);
  const done = useRef(false);
  useEffect(() => {
    let live = true, timer;
    const tick = async () => {
      try {
        const j = await api('GET', `/v1/jobs/${jobId}`);
        if (!live) return;
        setJob(j);
        if (j.state !== 'running') { if (!done.current) { done.current = true; onDone && onDone(j); } return; }
      } catch (e) { if (live) setError(e); }
      if (live) timer = setTimeout(tick, 1000);
    };
    tick();
    return () => { live = false; clearTimeout(timer); };
  }, [jobId]);
  const cancel = async () => {
    try { setJob(await api('POST', `/v1/jobs/${jobId}/cancel`, {})); } catch (e) { setError(e); }
  };
  const pct = job && job.matched ? Math.round((100 * job.replayed) / job.matched) : job && job.state !== 'running' ? 100 : 0;
  return html`<section class="card job" aria-live="polite" data-testid="job">
    <h2>Replay job <code>${shortId(jobId)}</code> <span class=${`pill job-${job ? job.state : 'running'}`} data-testid="job-state">${job ? job.state : 'starting'}</span></h2>
    <progress max="100" value=${pct} aria-label="Replay progress"></progress>
    <p data-testid="job-progress">${job ? `${job.replayed} of ${job.matched} replayed at ${job.rate}/s` : 'Starting…'}${job && job.error ? ` — ${job.error}` : ''}</p>
    ${job && job.filter && html`<p class="muted small" data-testid="job-filter">Filter: ${describeFilter(job.filter, subs)}</p>`}
    <${ErrorNote} error=${error} />
    <div class="actions">
      ${job && job.state === 'running' && can.operate && html`<button onClick=${cancel}>Cancel job</button>`}
      ${job && job.state !== 'running' && onClose && html`<button onClick=${onClose}>Close</button>`}
    </div>
  </section>`;
}

// A delivery's state: DEAD for the dead-letter queue, else its status, or why it waits
// when that is its subscription being disabled (the status would read plain FAILED or NEW).
export function Status({ d, subs, long }) {
  const waiting = waitingOn(d, subs);
  if (waiting) {
    return html`<span class="pill st-waiting" data-testid="status" title=${`${d.status}: sent again once the subscription is enabled`}>${waiting}</span>`;
  }
  return html`<span class=${`pill st-${d.dead ? 'dead' : d.status}`} data-testid="status">${d.dead ? (long ? 'DEAD (in the dead-letter queue)' : 'DEAD') : d.status}</span>${d.blocked ? html` <span class="badge">blocked</span>` : ''}`;
}

// Replay or purge everything the filter matches: the dry-run count first.
function BulkAction({ kind, filter, subs, onClose, onJob, onPurged }) {
  const [matched, setMatched] = useState(null);
  const [rate, setRate] = useState('');
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const path = kind === 'replay' ? '/v1/dlq/replay' : '/v1/dlq/purge';
  useEffect(() => {
    api('POST', path, { filter, dry_run: true }).then((r) => setMatched(r.matched), setError);
  }, [JSON.stringify(filter)]);
  const go = async () => {
    setBusy(true);
    try {
      if (kind === 'replay') {
        const body = { filter };
        if (rate) body.rate = Number(rate);
        const r = await api('POST', path, body);
        onJob(r.job_id);
      } else {
        const r = await api('POST', path, { filter });
        onPurged(r.purged);
      }
    } catch (e) { setError(e); setBusy(false); }
  };
  const desc = describeFilter(filter, subs);
  return html`<section class=${`card bulk ${kind}`} role="dialog" aria-label=${kind === 'replay' ? 'Replay matching' : 'Purge matching'}>
    <h2>${kind === 'replay' ? 'Replay' : 'Purge'} everything this filter matches</h2>
    <p class="muted" data-testid="bulk-filter">Filter: ${desc}</p>
    <p data-testid="dry-run">${matched === null ? 'Counting (dry run)…' : html`Dry run: <b>${matched}</b> dead ${matched === 1 ? 'delivery matches' : 'deliveries match'}.`}</p>
    ${kind === 'replay' && html`<label for="rate">Pace (deliveries per second, empty: the server's default)</label>
      <input id="rate" type="number" min="1" max="100000" value=${rate} onInput=${(e) => setRate(e.target.value)} />`}
    ${kind === 'purge' && html`<p class="warn-text">Purging deletes the deliveries and their attempt history. This cannot be undone.</p>`}
    <${ErrorNote} error=${error} />
    <div class="actions">
      <button class=${kind === 'replay' ? 'primary' : 'danger'} disabled=${busy || !matched} onClick=${go}>
        ${kind === 'replay' ? `Replay ${matched ?? ''}` : `Purge ${matched ?? ''}`}</button>
      <button onClick=${onClose}>Cancel</button>
    </div>
  </section>`;
}

export function DeliveryList({ dead, can, query, refresh }) {
  const current = readQuery(query);
  const base = dead ? 'dlq' : 'deliveries';
  const [selected, setSelected] = useState(new Set());
  const [bulk, setBulk] = useState(null);
  // A running replay job is in the URL too (&job=ID): a reload or a colleague follows it.
  const jobId = query.get('job');
  const [message, setMessage] = useState(null);
  const [actionError, setActionError] = useState(null);
  const [confirmPurge, setConfirmPurge] = useState(false);
  const withoutJob = new URLSearchParams(query);
  withoutJob.delete('job');
  const key = withoutJob.toString();
  const [list, reload] = useAsync(() => api('GET', `/v1/${dead ? 'dlq' : 'deliveries'}${qs({ limit: 50, ...current })}`), [key], refresh);
  useEffect(() => setSelected(new Set()), [key]);
  const subs = useSubscriptions(refresh, [current.subscription_id,
    ...(list.data ? list.data.items.map((d) => d.subscription_id) : [])]);

  useListKeys();

  const apply = (f) => navigate(`/${base}${qs(f)}`);
  const filter = {};
  for (const k of FILTER_KEYS) if (current[k] && (k !== 'status' || !dead)) filter[k] = current[k];
  const items = list.data ? list.data.items : [];
  const toggle = (id) => { const s = new Set(selected); s.has(id) ? s.delete(id) : s.add(id); setSelected(s); };
  const allOn = items.length > 0 && items.every((d) => selected.has(d.id));

  const replaySelected = async () => {
    setActionError(null);
    try {
      const r = await api('POST', '/v1/dlq/replay', { ids: [...selected] });
      const skipped = r.results.filter((x) => x.outcome !== 'replayed');
      setMessage(`Replayed ${r.replayed} of ${selected.size}${skipped.length ? ` (${skipped.map((x) => `${shortId(x.id)}: ${x.outcome}`).join(', ')})` : ''}.`);
      setSelected(new Set());
      reload();
    } catch (e) { setActionError(e); }
  };
  const purgeSelected = async () => {
    setActionError(null);
    let n = 0;
    try {
      for (const id of selected) { await api('DELETE', `/v1/dlq/${id}`); n++; }
      setMessage(`Purged ${n} dead ${n === 1 ? 'delivery' : 'deliveries'}.`);
    } catch (e) { setActionError(e); }
    setConfirmPurge(false);
    setSelected(new Set());
    reload();
  };

  return html`<main>
    <h1>${dead ? 'Dead-letter queue' : 'Deliveries'}</h1>
    <${Filters} dead=${dead} current=${current} subs=${subs} onApply=${apply} />
    ${jobId && html`<${JobProgress} key=${jobId} jobId=${jobId} can=${can} subs=${subs}
        onClose=${() => navigate(`/${base}${qs(current)}`)}
        onDone=${(j) => { setMessage(`Replay job ${j.state}: ${j.replayed} of ${j.matched} replayed.`); reload(); }} />`}
    ${bulk && html`<${BulkAction} kind=${bulk} filter=${filter} subs=${subs} onClose=${() => setBulk(null)}
        onJob=${(id) => { setBulk(null); navigate(`/${base}${qs({ ...current, cursor: '', job: id })}`); }}
        onPurged=${(n) => { setBulk(null); setMessage(`Purged ${n} dead deliveries.`); reload(); }} />`}
    ${message && html`<p class="notice" role="status">${message}</p>`}
    <${ErrorNote} error=${actionError} />
    <div class="toolbar">
      ${can.operate && html`
        <button onClick=${replaySelected} disabled=${!selected.size}>Replay selected (${selected.size})</button>
        ${dead && html`<button class="danger" onClick=${() => setConfirmPurge(true)} disabled=${!selected.size}>Purge selected</button>`}
        ${dead && html`<button onClick=${() => { setMessage(null); setBulk('replay'); }}>Replay all matching…</button>`}
        ${dead && html`<button class="danger" onClick=${() => { setMessage(null); setBulk('purge'); }}>Purge all matching…</button>`}`}
      <span class="muted">${list.loading && !list.data ? 'Loading…' : `${items.length} shown${list.data && list.data.next_cursor ? ', more on the next page' : ''}`}</span>
    </div>
    ${confirmPurge && html`<div class="card confirm" role="alertdialog" aria-label="Confirm purge">
      <p>Delete ${selected.size} dead ${selected.size === 1 ? 'delivery' : 'deliveries'} and their attempt history? This cannot be undone.</p>
      <button class="danger" onClick=${purgeSelected}>Purge ${selected.size}</button> <button onClick=${() => setConfirmPurge(false)}>Keep them</button></div>`}
    <${ErrorNote} error=${list.error} />
    <div class="scroll"><table class="list rows" data-testid="deliveries">
      <thead><tr>
        ${can.operate && html`<th class="sel"><label class="all"><input type="checkbox" aria-label="Select all on this page" checked=${allOn}
          onChange=${() => setSelected(allOn ? new Set() : new Set(items.map((d) => d.id)))} /><span class="lbl">All on this page</span></label></th>`}
        <th>Delivery</th><th>Event type</th><th>Subscription</th><th>Status</th><th>Attempts</th><th>Last error</th><th>Created (UTC)</th>
      </tr></thead>
      <tbody>
        ${items.map((d) => html`<tr data-id=${d.id}>
          ${can.operate && html`<td class="sel"><input type="checkbox" aria-label=${`Select ${d.id}`} checked=${selected.has(d.id)} onChange=${() => toggle(d.id)} /></td>`}
          <${Cell} label="Delivery"><a href=${`#/deliveries/${d.id}`}><code>${shortId(d.id)}</code></a><//>
          <${Cell} label="Event type">${d.event_type}<//>
          <${Cell} label="Subscription"><a href=${`#/subscriptions/${d.subscription_id}`}>${subName(subs, d.subscription_id)}</a><//>
          <${Cell} label="Status"><${Status} d=${d} subs=${subs} /><//>
          <${Cell} label="Attempts" cls="num">${d.attempt_count}<//>
          <${Cell} label="Last error" cls="err">${d.last_error ? html`<b>${d.last_error.code}</b> ${d.last_error.message}` : '—'}<//>
          <${Cell} label="Created (UTC)">${fmtTime(d.created_at)}<//>
        </tr>`)}
        ${!list.loading && items.length === 0 && html`<tr><td colspan="8" class="muted" data-testid="empty">Nothing matches.</td></tr>`}
      </tbody>
    </table></div>
    <div class="pager">
      ${current.cursor && html`<a class="button" href=${`#/${base}${qs({ ...current, cursor: '' })}`}>First page</a>`}
      ${list.data && list.data.next_cursor && html`<a class="button" href=${`#/${base}${qs({ ...current, cursor: list.data.next_cursor })}`}>Next page</a>`}
    </div>
  </main>`;
}
