// util.js: formatting and small hooks shared by the pages.
import { html, useEffect, useRef, useState } from './vendor/htm-preact.js';

export function fmtTime(iso) {
  if (!iso) return '—';
  return iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

export function fmtAge(ms) {
  if (ms === null || ms === undefined) return '—';
  const s = Math.floor(ms / 1000);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return s % 60 ? `${m}m ${s % 60}s` : `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 48) return m % 60 ? `${h}h ${m % 60}m` : `${h}h`;
  return h % 24 ? `${Math.floor(h / 24)}d ${h % 24}h` : `${Math.floor(h / 24)}d`;
}

export function fmtRate(r) {
  if (r === null || r === undefined) return '—';
  return `${(r * 100).toFixed(r >= 0.995 || r === 0 ? 0 : 1)}%`;
}

export function shortId(id) { return id ? id.slice(-12) : ''; }

// A subscription's name from a list of subscriptions, or the end of its id while the list
// is loading or when it was deleted.
export function subName(subs, id) {
  const s = subs && subs.find((x) => x.id === id);
  return s ? s.name : shortId(id);
}

// A delivery filter (GET /v1/deliveries' parameters, a replay job's filter) in words, with
// the subscription's name instead of its id.
export function describeFilter(filter, subs) {
  const words = {
    status: (v) => `status ${v}`,
    subscription_id: (v) => `subscription ${subName(subs, v)}`,
    name: (v) => `subscription ${v}`,
    event_type: (v) => `event type ${v}`,
    q: (v) => `error text "${v}"`,
    code: (v) => `code ${v}`,
    source: (v) => `source ${v}`,
    event_id: (v) => `event ${v}`,
    min_attempts: (v) => `at least ${v} attempts`,
    failing_since: (v) => `failing since ${v}`,
    from: (v) => `created from ${fmtTime(v)}`,
    to: (v) => `created before ${fmtTime(v)}`,
  };
  const parts = Object.entries(filter || {}).filter(([, v]) => v !== '' && v !== null && v !== undefined)
    .map(([k, v]) => (words[k] ? words[k](v) : `${k}=${v}`));
  return parts.length ? parts.join(', ') : 'the whole dead-letter queue';
}

// Why a pending delivery is not moving, when it is its subscription's doing: a disabled
// subscription (by an operator or by disable_after) keeps its deliveries waiting until it
// is enabled again. Null otherwise.
export function waitingOn(delivery, subs) {
  if (delivery.dead || delivery.status === 'PROCESSED') return null;
  const s = subs && subs.find((x) => x.id === delivery.subscription_id);
  return s && !s.enabled ? 'waiting: subscription disabled' : null;
}

// Runs fn now and every `ms` while mounted (and again when deps change); fn gets an
// AbortSignal-like `alive()` to drop late answers.
export function usePoll(fn, ms, deps) {
  useEffect(() => {
    let live = true, timer = null;
    const tick = async () => {
      try { await fn(() => live); } finally { if (live && ms) timer = setTimeout(tick, ms); }
    };
    tick();
    return () => { live = false; clearTimeout(timer); };
  }, deps);
}

export function ErrorNote({ error }) {
  if (!error) return null;
  return html`<p class="error" role="alert">${error.message || String(error)}</p>`;
}

// Loads fn() when a dep changes and again at each refresh. A refresh keeps the data on
// screen while it loads; another dep (another filter, another id) does not: until its own
// answer arrives the page shows nothing, so rows of the previous view are never shown —
// nor ticked and acted on — under the new one. A late answer for older deps is dropped.
export function useAsync(fn, deps, refresh = 0) {
  const [state, set] = useState({ loading: true, data: null, error: null, of: null });
  const n = useRef(0);
  const of = JSON.stringify(deps);
  const load = () => {
    const mine = ++n.current;
    set((s) => ({ ...s, loading: true }));
    fn().then((data) => { if (mine === n.current) set({ loading: false, data, error: null, of }); },
      (error) => { if (mine === n.current) set({ loading: false, data: null, error, of }); });
  };
  useEffect(load, [of, refresh]);
  return [state.of === of ? state : { loading: true, data: null, error: null }, load];
}

// datetime-local value (read as UTC) <-> RFC 3339
export const toRfc3339 = (v) => (v ? `${v.length === 16 ? `${v}:00` : v}Z` : '');
export const fromRfc3339 = (v) => (v ? v.replace(/(\.\d+)?Z$/, '').slice(0, 19) : '');

export function hexDump(bytes) {
  const lines = [];
  for (let i = 0; i < bytes.length && i < 4096; i += 16) {
    const row = Array.from(bytes.slice(i, i + 16));
    const hex = row.map((b) => b.toString(16).padStart(2, '0')).join(' ');
    const txt = row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${i.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  ${txt}`);
  }
  if (bytes.length > 4096) lines.push(`… ${bytes.length - 4096} more bytes`);
  return lines.join('\n');
}

export function b64ToBytes(b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export function navigate(path) { location.hash = path; }

// A table cell that carries its column's name: hidden beside a header row on a wide
// screen, shown as the field's label when a narrow screen lays rows out as cards
// (style.css, table.rows). One value element, so the card's label/value grid keeps
// the cell's content together; inline, so a wide row reads as before.
export function Cell({ label, cls, children }) {
  return html`<td class=${cls}><span class="lbl">${label}</span><span class="val">${children}</span></td>`;
}

// The width of an element in CSS pixels, following resizes (the chart is drawn at the
// size it is shown, so its labels keep their font size on a phone).
export function useWidth() {
  const ref = useRef(null);
  const [width, setWidth] = useState(0);
  useEffect(() => {
    const el = ref.current;
    if (!el || typeof ResizeObserver !== 'function') return undefined;
    const ro = new ResizeObserver((entries) => setWidth(Math.floor(entries[0].contentRect.width)));
    ro.observe(el);
    return () => ro.disconnect();
  }, []);
  return [ref, width];
}

// A list's keys: j / k move between its rows (the focus is on the row's first link: Enter
// opens it), x ticks the focused row when it has a checkbox.
export function useListKeys() {
  useEffect(() => {
    const onKey = (e) => {
      const t = e.target;
      if (e.ctrlKey || e.metaKey || e.altKey || (t && /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName) && t.type !== 'checkbox')) return;
      const links = [...document.querySelectorAll('table.list tbody tr[data-id] td:first-of-type a, table.list tbody tr[data-id] td.sel + td a')];
      const row = document.activeElement && document.activeElement.closest('tr[data-id]');
      const at = row ? links.findIndex((a) => a.closest('tr') === row) : -1;
      if (e.key === 'j' || e.key === 'k') {
        const next = e.key === 'j' ? Math.min(at + 1, links.length - 1) : Math.max(at - 1, 0);
        if (links[next]) { e.preventDefault(); links[next].focus(); }
      } else if (e.key === 'x' && row) {
        const box = row.querySelector('input[type="checkbox"]');
        if (box) { e.preventDefault(); box.click(); }
      }
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, []);
}
