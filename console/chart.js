// chart.js: the console's charts of GET /v1/stats/series, drawn as SVG by Preact (no chart
// library: 60 bars and two lines need none) at the width they are shown, since scaling a
// fixed drawing down to a phone would shrink its labels to a few pixels. Attempts per
// minute by outcome as stacked bars (the overview, a subscription), and the attempts'
// latency per minute, p50 and p99, as two lines (a subscription).
import { html } from './vendor/htm-preact.js';
import { fmtTime, useWidth } from './util.js';

export const OUTCOMES = [
  ['succeeded', 'succeeded (2xx)'],
  ['client_error', 'client error (4xx)'],
  ['server_error', 'server or network error'],
];

const LATENCY = [
  ['latency_p50_ms', 'p50'],
  ['latency_p99_ms', 'p99'],
];

// The frame both charts share: the size for the width shown, the y scale's ticks, and
// the time labels at the start, middle and end, anchored so none runs past the edges.
function frame(pts, width, max) {
  const narrow = width > 0 && width < 520;
  const ticks = [...new Set([0, Math.round(max / 2), max])];
  // the left margin fits the longest tick label (11 px text: about 7 px a digit)
  const pad = { l: 10 + 7 * String(max).length, r: 4, t: 8, b: 22 };
  const W = Math.max(260, width || 720), H = narrow ? 150 : 180;
  const step = (W - pad.l - pad.r) / pts.length;
  const y = (v) => ((H - pad.t - pad.b) * v) / max;
  const labels = [[0, 'start'], [Math.floor(pts.length / 2), 'middle'], [pts.length - 1, 'end']];
  const axes = html`
    ${ticks.map((t) => html`<g class="tick"><line x1=${pad.l} x2=${W - pad.r} y1=${H - pad.b - y(t)} y2=${H - pad.b - y(t)} /><text x=${pad.l - 4} y=${H - pad.b - y(t) + 4} text-anchor="end">${t}</text></g>`)}
    ${labels.map(([i, anchor]) => html`<text class="tick" x=${anchor === 'start' ? pad.l : anchor === 'end' ? W - pad.r : pad.l + (i + 0.5) * step} y=${H - 6} text-anchor=${anchor}>${fmtTime(pts[i].at).slice(11, 16)}</text>`)}`;
  return { W, H, pad, step, y, axes };
}

const minute = (p) => `${fmtTime(p.at).slice(11, 16)}Z`;

// Shows what it draws once it knows its width; "Loading…" until the series is there.
function Sized({ series, draw }) {
  const [ref, width] = useWidth();
  return html`<div ref=${ref}>${series ? draw(series, width) : html`<p class="chart muted">Loading…</p>`}</div>`;
}

function bars(series, width, label) {
  const pts = series.points;
  const totals = pts.map((p) => p.succeeded + p.client_error + p.server_error);
  const f = frame(pts, width, Math.max(1, ...totals));
  const sum = (k) => pts.reduce((a, p) => a + p[k], 0);
  return html`<figure class="chart" data-chart="attempts">
    <svg viewBox=${`0 0 ${f.W} ${f.H}`} width=${f.W} height=${f.H} role="img" aria-label=${label}>
      ${f.axes}
      ${pts.map((p, i) => {
        let base = f.H - f.pad.b;
        return html`<g><title>${`${minute(p)}: ${p.succeeded} ok, ${p.client_error} 4xx, ${p.server_error} 5xx/network`}</title>
          ${OUTCOMES.map(([k]) => {
            const h = f.y(p[k]);
            base -= h;
            return h > 0 ? html`<rect class=${`s-${k}`} x=${f.pad.l + i * f.step + 0.5} y=${base} width=${Math.max(1, f.step - 1)} height=${h} />` : null;
          })}</g>`;
      })}
    </svg>
    <figcaption>
      ${OUTCOMES.map(([k, name]) => html`<span class="legend"><i class=${`s-${k}`}></i>${name}: <b data-series=${k}>${sum(k)}</b></span>`)}
      <span class="muted">last ${pts.length} min, UTC</span>
    </figcaption>
  </figure>`;
}

// Delivery attempts per minute by outcome, stacked.
export function AttemptsChart({ series, label = 'Delivery attempts per minute by outcome, last hour' }) {
  return html`<${Sized} series=${series} draw=${(s, w) => bars(s, w, label)} />`;
}

function lines(series, width, label) {
  const pts = series.points;
  const values = pts.flatMap((p) => LATENCY.map(([k]) => p[k])).filter((v) => v !== null && v !== undefined);
  const f = frame(pts, width, Math.max(1, ...values));
  const x = (i) => f.pad.l + (i + 0.5) * f.step;
  // A minute without attempts has no latency: the line breaks there, and a minute alone
  // between two gaps is a dot.
  const runs = (k) => {
    const out = [];
    let run = [];
    pts.forEach((p, i) => {
      if (p[k] === null || p[k] === undefined) { if (run.length) out.push(run); run = []; } else run.push([x(i), f.H - f.pad.b - f.y(p[k])]);
    });
    if (run.length) out.push(run);
    return out;
  };
  const last = [...pts].reverse().find((p) => p.latency_p50_ms !== null && p.latency_p50_ms !== undefined);
  return html`<figure class="chart" data-chart="latency">
    <svg viewBox=${`0 0 ${f.W} ${f.H}`} width=${f.W} height=${f.H} role="img" aria-label=${label}>
      ${f.axes}
      ${LATENCY.map(([k]) => runs(k).map((run) => (run.length === 1
        ? html`<circle class=${`l-${k}`} cx=${run[0][0]} cy=${run[0][1]} r="2.5" />`
        : html`<polyline class=${`l-${k}`} points=${run.map(([a, b]) => `${a.toFixed(1)},${b.toFixed(1)}`).join(' ')} />`)))}
      ${pts.map((p, i) => (p.latency_p50_ms === null || p.latency_p50_ms === undefined ? null
        : html`<rect class="hit" x=${f.pad.l + i * f.step} y=${f.pad.t} width=${f.step} height=${f.H - f.pad.t - f.pad.b}><title>${`${minute(p)}: p50 ${p.latency_p50_ms} ms, p99 ${p.latency_p99_ms} ms`}</title></rect>`))}
    </svg>
    <figcaption>
      ${LATENCY.map(([k, name]) => html`<span class="legend"><i class=${`l-${k}`}></i>${name}: <b data-series=${k}>${last ? `${last[k]} ms` : '—'}</b></span>`)}
      <span class="muted">${last ? `minute ${minute(last)}, the last with attempts` : 'no attempts in the last hour'}</span>
    </figcaption>
  </figure>`;
}

// The attempts' latency per minute: the p50 and p99 of their durations, as lines.
export function LatencyChart({ series, label = 'Attempt latency per minute, p50 and p99, last hour' }) {
  return html`<${Sized} series=${series} draw=${(s, w) => lines(s, w, label)} />`;
}
