// audit.js: the audit log, newest first, paged by id; subscriptions named, filters in
// words.
import { html } from '../vendor/htm-preact.js';
import { api, qs } from '../api.js';
import { Cell, ErrorNote, describeFilter, fmtTime, shortId, useAsync } from '../util.js';
import { useSubscriptions } from './list.js';

// An entry's target: a subscription by name (linked), a filter in words, ids as they are.
function Target({ action, target, subs }) {
  if (typeof target === 'string') {
    const s = subs.find((x) => x.id === target);
    if (s) return html`<a href=${`#/subscriptions/${s.id}`}>${s.name}</a> <code class="muted small">${shortId(target)}</code>`;
    return html`<code>${target}</code>`;
  }
  if (target && typeof target === 'object' && !Array.isArray(target) && /replay_job|purge_filter/.test(action)) {
    return describeFilter(target, subs);
  }
  return html`<code>${JSON.stringify(target)}</code>`;
}

export function Audit({ query, refresh }) {
  const before = query.get('before') || '';
  const [log] = useAsync(() => api('GET', `/v1/audit${qs({ limit: 50, before })}`), [before], refresh);
  // the subscriptions the entries name: a target id, or a filter's subscription
  const subs = useSubscriptions(refresh, log.data ? log.data.items.map((a) =>
    (typeof a.target === 'string' ? a.target : a.target && a.target.subscription_id)) : []);
  return html`<main>
    <h1>Audit log</h1>
    <${ErrorNote} error=${log.error} />
    <div class="scroll"><table class="list rows">
      <thead><tr><th>When (UTC)</th><th>Who</th><th>Action</th><th>Count</th><th>Target</th></tr></thead>
      <tbody>${log.data && log.data.items.map((a) => html`<tr>
        <${Cell} label="When (UTC)">${fmtTime(a.at)}<//><${Cell} label="Who">${a.actor}<//><${Cell} label="Action"><code>${a.action}</code><//><${Cell} label="Count" cls="num">${a.count}<//>
        <${Cell} label="Target" cls="target"><${Target} action=${a.action} target=${a.target} subs=${subs} /><//></tr>`)}
        ${log.data && log.data.items.length === 0 && html`<tr><td colspan="5" class="muted">Nothing recorded yet.</td></tr>`}
      </tbody>
    </table></div>
    <div class="pager">
      ${before && html`<a class="button" href="#/audit">Newest</a>`}
      ${log.data && log.data.next_before && html`<a class="button" href=${`#/audit?before=${log.data.next_before}`}>Older</a>`}
    </div>
  </main>`;
}
