// overview.js: what an operator looks at first in an incident: attempts per minute by
// outcome, the dead-letter queue, the backlog, and each subscription's health, failing
// ones first. Refreshed with the console's auto-refresh (app.js).
import { html, useState } from '../vendor/htm-preact.js';
import { api } from '../api.js';
import { AttemptsChart } from '../chart.js';
import { Cell, ErrorNote, fmtAge, fmtRate, fmtTime, usePoll } from '../util.js';

// Marked as failing: what the API ranks before the healthy and the idle.
function failing(s) {
  return s.circuit === 'open' || s.circuit === 'half_open' || (!s.enabled && s.disabled_reason) ||
    (s.success_rate !== null && s.success_rate < 1);
}

// The subscriptions shown: the SHOWN to look at first (the API ranks them failing first:
// open circuit, half-open, disabled by outboxd, then by success rate); every one is on
// the Subscriptions page.
const SHOWN = 50;

export function Overview({ refresh }) {
  const [stats, setStats] = useState(null);
  const [series, setSeries] = useState(null);
  const [error, setError] = useState(null);
  usePoll(async (alive) => {
    try {
      const [s, t] = await Promise.all([api('GET', `/v1/stats?subscriptions_limit=${SHOWN}`), api('GET', '/v1/stats/series?minutes=60')]);
      if (!alive()) return;
      setStats(s); setSeries(t); setError(null);
    } catch (e) { if (alive()) setError(e); }
  }, 0, [refresh]);

  const subs = stats ? stats.subscriptions : []; // failing first, as the API orders them
  return html`<main>
    <h1>Overview</h1>
    <${ErrorNote} error=${error} />
    <section class="cards" aria-label="Queue">
      <a class="card stat" href="#/dlq"><span>Dead letters</span><b data-testid="dlq-depth">${stats ? stats.dlq_depth : '…'}</b>
        <small>oldest ${stats ? fmtAge(stats.oldest_dead_age_ms) : '…'}</small></a>
      <div class="card stat"><span>Backlog (due now)</span><b>${stats ? stats.due_backlog : '…'}</b>
        <small>oldest ${stats ? fmtAge(stats.oldest_due_age_ms) : '…'}</small></div>
      <div class="card stat"><span>In flight</span><b>${stats ? stats.in_flight : '…'}</b><small>leased now</small></div>
      <a class="card stat" href="#/deliveries?status=FAILED"><span>Retrying</span><b>${stats ? stats.deliveries.FAILED_RETRYING : '…'}</b>
        <small>${stats && stats.failing && stats.failing.oldest_age_ms !== null ? `failing for ${fmtAge(stats.failing.oldest_age_ms)}` : 'scheduled retry pending'}</small></a>
      <div class="card stat"><span>Blocked</span><b>${stats ? stats.blocked.deliveries : '…'}</b><small>${stats ? stats.blocked.keys : '…'} keys (ordering)</small></div>
    </section>
    <section class="card">
      <h2>Delivery attempts per minute</h2>
      <${AttemptsChart} series=${series} />
    </section>
    <section class="card">
      <h2>Subscriptions <small class="muted">${stats ? `attempts in the last ${fmtAge(stats.window.ms)}; failing first` : ''}</small></h2>
      <div class="scroll"><table class="health rows">
        <thead><tr><th>Subscription</th><th>Circuit</th><th>Success</th><th>Attempts</th><th>Last error</th><th></th></tr></thead>
        <tbody>
          ${subs.map((s) => html`<tr class=${failing(s) ? 'failing' : ''} data-sub=${s.name}>
            <${Cell} label="Subscription" cls="name"><a href=${`#/subscriptions/${s.id}`}>${s.name}</a>${!s.enabled && html` <span class="badge warn" title=${s.disabled_reason || ''}>disabled</span>`}<//>
            <${Cell} label="Circuit"><span class=${`pill circuit-${s.circuit}`}>${s.circuit.replace('_', '-')}</span><//>
            <${Cell} label="Success" cls="num">${fmtRate(s.success_rate)}<//>
            <${Cell} label="Attempts" cls="num">${s.attempts}<//>
            <${Cell} label="Last error" cls="err">${s.last_error ? html`<b>${s.last_error.code}</b> ${s.last_error.message} <small class="muted">${fmtTime(s.last_error.at)}</small>` : '—'}<//>
            <${Cell} label="Dead letters"><a href=${`#/dlq?subscription_id=${s.id}`}>dead letters</a><//>
          </tr>`)}
          ${stats && subs.length === 0 && html`<tr><td colspan="6" class="muted">No subscriptions yet.</td></tr>`}
          ${stats && stats.subscriptions_total > subs.length && html`<tr><td colspan="6" class="muted" data-testid="more-subs">${subs.length} of ${stats.subscriptions_total} shown; <a href="#/subscriptions">all subscriptions</a></td></tr>`}
        </tbody>
      </table></div>
    </section>
  </main>`;
}
