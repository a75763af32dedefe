// audit.js: the audit log, newest first, paged by id.
import { html } from '../vendor/htm-preact.js';
import { api, qs } from '../api.js';
import { Cell, ErrorNote, fmtTime, useAsync } from '../util.js';

export function Audit({ query, refresh }) {
  const before = query.get('before') || '';
  const [log] = useAsync(() => api('GET', `/v1/audit${qs({ limit: 50, before })}`), [before, refresh]);
  return html`<main>
    <h1>Audit log</h1>
    <${ErrorNote} error=${log.error} />
    <div class="scroll"><table class="list rows">
      <thead><tr><th>When (UTC)</th><th>Who</th><th>Action</th><th>Count</th><th>Target</th></tr></thead>
      <tbody>${log.data && log.data.items.map((a) => html`<tr>
        <${Cell} label="When (UTC)">${fmtTime(a.at)}<//><${Cell} label="Who">${a.actor}<//><${Cell} label="Action"><code>${a.action}</code><//><${Cell} label="Count" cls="num">${a.count}<//>
        <${Cell} label="Target" cls="target"><code>${typeof a.target === 'string' ? a.target : JSON.stringify(a.target)}</code><//></tr>`)}
        ${log.data && log.data.items.length === 0 && html`<tr><td colspan="5" class="muted">Nothing recorded yet.</td></tr>`}
      </tbody>
    </table></div>
    <div class="pager">
      ${before && html`<a class="button" href="#/audit">Newest</a>`}
      ${log.data && log.data.next_before && html`<a class="button" href=${`#/audit?before=${log.data.next_before}`}>Older</a>`}
    </div>
  </main>`;
}
