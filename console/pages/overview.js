// overview.js: what an operator looks at first in an incident: attempts per minute by
// outcome, the dead-letter queue, the backlog, and each subscription's health, failing
// ones first. Refreshed with the console's auto-refresh (app.js).
import { html, useState } from '../vendor/htm-preact.js';
import { api } from '../api.js';
import { Cell, ErrorNote, fmtAge, fmtRate, fmtTime, usePoll, useWidth } from '../util.js';

const SERIES = [
  ['succeeded', 'succeeded (2xx)'],
  ['client_error', 'client error (4xx)'],
  ['server_error', 'server or network error'],
];

// A stacked bar per minute, drawn as SVG by Preact (no chart library: 60 bars need none),
// at the width it is shown: scaling a fixed drawing down to a phone would shrink its
// labels to a few pixels.
function Chart({ series }) {
  const [ref, width] = useWidth();
  return html`<div ref=${ref}>${series ? html`<${Bars} series=${series} width=${width} />` : html`<p class="chart muted">Loading…</p>`}</div>`;
}

function Bars({ series, width }) {
  const pts = series.points;
  const narrow = width > 0 && width < 520;
  const W = Math.max(260, width || 720), H = narrow ? 150 : 180, pad = { l: 36, r: 4, t: 8, b: 22 };
  const totals = pts.map((p) => p.succeeded + p.client_error + p.server_error);
  const max = Math.max(1, ...totals);
  const step = (W - pad.l - pad.r) / pts.length;
  const y = (v) => ((H - pad.t - pad.b) * v) / max;
  const ticks = [...new Set([0, Math.round(max / 2), max])];
  const sum = (k) => pts.reduce((a, p) => a + p[k], 0);
  // Time labels at the start, middle and end, anchored so none runs past the edges.
  const labels = [[0, 'start'], [Math.floor(pts.length / 2), 'middle'], [pts.length - 1, 'end']];
  return html`<figure class="chart">
    <svg viewBox=${`0 0 ${W} ${H}`} width=${W} height=${H} role="img" aria-label="Delivery attempts per minute by outcome, last hour">
      ${ticks.map((t) => html`<g class="tick"><line x1=${pad.l} x2=${W - pad.r} y1=${H - pad.b - y(t)} y2=${H - pad.b - y(t)} /><text x=${pad.l - 4} y=${H - pad.b - y(t) + 4} text-anchor="end">${t}</text></g>`)}
      ${pts.map((p, i) => {
        let base = H - pad.b;
        return html`<g><title>${`${fmtTime(p.at).slice(11, 16)}Z: ${p.succeeded} ok, ${p.client_error} 4xx, ${p.server_error} 5xx/network`}</title>
          ${SERIES.map(([k]) => {
            const h = y(p[k]);
            base -= h;
            return h > 0 ? html`<rect class=${`s-${k}`} x=${pad.l + i * step + 0.5} y=${base} width=${Math.max(1, step - 1)} height=${h} />` : null;
          })}</g>`;
      })}
      ${labels.map(([i, anchor]) => html`<text class="tick" x=${anchor === 'start' ? pad.l : anchor === 'end' ? W - pad.r : pad.l + (i + 0.5) * step} y=${H - 6} text-anchor=${anchor}>${fmtTime(pts[i].at).slice(11, 16)}</text>`)}
    </svg>
    <figcaption>
      ${SERIES.map(([k, label]) => html`<span class="legend"><i class=${`s-${k}`}></i>${label}: <b data-series=${k}>${sum(k)}</b></span>`)}
      <span class="muted">last ${pts.length} min, UTC</span>
    </figcaption>
  </figure>`;
}

function failing(s) {
  if (s.circuit === 'open') return 0;
  if (s.circuit === 'half_open') return 1;
  if (!s.enabled && s.disabled_reason) return 2;
  if (s.success_rate !== null && s.success_rate < 1) return 3 + s.success_rate;
  return 5;
}

export function Overview({ refresh }) {
  const [stats, setStats] = useState(null);
  const [series, setSeries] = useState(null);
  const [error, setError] = useState(null);
  usePoll(async (alive) => {
    try {
      const [s, t] = await Promise.all([api('GET', '/v1/stats'), api('GET', '/v1/stats/series?minutes=60')]);
      if (!alive()) return;
      setStats(s); setSeries(t); setError(null);
    } catch (e) { if (alive()) setError(e); }
  }, 0, [refresh]);

  const subs = stats ? [...stats.subscriptions].sort((a, b) => failing(a) - failing(b) || a.name.localeCompare(b.name)) : [];
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
      <${Chart} series=${series} />
    </section>
    <section class="card">
      <h2>Subscriptions <small class="muted">${stats ? `attempts in the last ${fmtAge(stats.window.ms)}; failing first` : ''}</small></h2>
      <div class="scroll"><table class="health rows">
        <thead><tr><th>Subscription</th><th>Circuit</th><th>Success</th><th>Attempts</th><th>Last error</th><th></th></tr></thead>
        <tbody>
          ${subs.map((s) => html`<tr class=${failing(s) < 5 ? 'failing' : ''} data-sub=${s.name}>
            <${Cell} label="Subscription" cls="name"><a href=${`#/subscriptions/${s.id}`}>${s.name}</a>${!s.enabled && html` <span class="badge warn" title=${s.disabled_reason || ''}>disabled</span>`}<//>
            <${Cell} label="Circuit"><span class=${`pill circuit-${s.circuit}`}>${s.circuit.replace('_', '-')}</span><//>
            <${Cell} label="Success" cls="num">${fmtRate(s.success_rate)}<//>
            <${Cell} label="Attempts" cls="num">${s.attempts}<//>
            <${Cell} label="Last error" cls="err">${s.last_error ? html`<b>${s.last_error.code}</b> ${s.last_error.message} <small class="muted">${fmtTime(s.last_error.at)}</small>` : '—'}<//>
            <${Cell} label="Dead letters"><a href=${`#/dlq?subscription_id=${s.id}`}>dead letters</a><//>
          </tr>`)}
          ${stats && subs.length === 0 && html`<tr><td colspan="6" class="muted">No subscriptions yet.</td></tr>`}
        </tbody>
      </table></div>
    </section>
  </main>`;
}
