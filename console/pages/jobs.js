// jobs.js: replay jobs (GET /v1/jobs), newest first: state filter in the URL, keyset
// pages, each job's progress, filter (subscriptions by name) and who started it, and
// Cancel on a running one for tokens with the operate scope.
import { html, useState } from '../vendor/htm-preact.js';
import { api, qs } from '../api.js';
import { Cell, ErrorNote, describeFilter, fmtTime, navigate, shortId, useAsync } from '../util.js';
import { useSubscriptions } from './list.js';

const STATES = ['running', 'done', 'cancelled', 'failed'];

function pct(j) {
  if (j.matched) return Math.round((100 * j.replayed) / j.matched);
  return j.state === 'running' ? 0 : 100;
}

export function Jobs({ can, query, refresh }) {
  const state = query.get('state') || '';
  const cursor = query.get('cursor') || '';
  const [list, reload] = useAsync(() => api('GET', `/v1/jobs${qs({ limit: 50, state, cursor })}`), [state, cursor], refresh);
  const subs = useSubscriptions(refresh, list.data ? list.data.items.map((j) => j.filter && j.filter.subscription_id) : []);
  const [error, setError] = useState(null);
  const [message, setMessage] = useState(null);
  const cancel = async (j) => {
    setError(null);
    try {
      const r = await api('POST', `/v1/jobs/${j.id}/cancel`, {});
      setMessage(`Job ${shortId(j.id)} ${r.state}: ${r.replayed} of ${r.matched} replayed.`);
      reload();
    } catch (e) { setError(e); }
  };
  const items = list.data ? list.data.items : [];
  return html`<main>
    <h1>Jobs</h1>
    <div class="toolbar">
      <label for="j-state" class="inline">State</label>
      <select id="j-state" value=${state} onChange=${(e) => navigate(`/jobs${qs({ state: e.target.value })}`)}>
        <option value="">any</option>${STATES.map((s) => html`<option value=${s} selected=${s === state}>${s}</option>`)}
      </select>
      <span class="muted">${list.loading && !list.data ? 'Loading…' : `${items.length} shown${list.data && list.data.next_cursor ? ', more on the next page' : ''}`}</span>
    </div>
    ${message && html`<p class="notice" role="status">${message}</p>`}
    <${ErrorNote} error=${error || list.error} />
    <div class="scroll"><table class="list rows" data-testid="jobs">
      <thead><tr><th>Job</th><th>State</th><th>Progress</th><th>Filter</th><th>Rate</th><th>Started by</th><th>Started (UTC)</th><th></th></tr></thead>
      <tbody>
        ${items.map((j) => html`<tr data-job=${j.id}>
          <${Cell} label="Job"><code>${shortId(j.id)}</code> <span class="muted small">${j.kind}${j.force ? ', forced' : ''}</span><//>
          <${Cell} label="State"><span class=${`pill job-${j.state}`} data-testid="job-state">${j.state}</span><//>
          <${Cell} label="Progress" cls="progress">
            <progress max="100" value=${pct(j)} aria-label=${`Progress of job ${shortId(j.id)}`}></progress>
            <span data-testid="job-progress">${j.replayed} of ${j.matched} replayed${j.state !== 'done' && j.remaining ? `, ${j.remaining} left` : ''}</span>
            ${j.error && html`<br /><small class="warn-text">${j.error}</small>`}<//>
          <${Cell} label="Filter" cls="target">${describeFilter(j.filter, subs)}<//>
          <${Cell} label="Rate" cls="num">${j.rate}/s<//>
          <${Cell} label="Started by">${j.actor || '—'}<//>
          <${Cell} label="Started (UTC)">${fmtTime(j.created_at)}<//>
          <${Cell} label="">${j.state === 'running' && can.operate ? html`<button onClick=${() => cancel(j)}>Cancel job</button>` : ''}<//>
        </tr>`)}
        ${!list.loading && items.length === 0 && html`<tr><td colspan="8" class="muted" data-testid="empty">No ${state ? `${state} ` : ''}jobs.</td></tr>`}
      </tbody>
    </table></div>
    <div class="pager">
      ${cursor && html`<a class="button" href=${`#/jobs${qs({ state })}`}>First page</a>`}
      ${list.data && list.data.next_cursor && html`<a class="button" href=${`#/jobs${qs({ state, cursor: list.data.next_cursor })}`}>Next page</a>`}
    </div>
  </main>`;
}
