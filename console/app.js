// app.js: the console's shell: sign-in, navigation (hash routes, so every view and its
// filter is a shareable URL), theme, keyboard shortcuts. Pages live in pages/.
import { html, render, useEffect, useRef, useState } from './vendor/htm-preact.js';
import { api, token, setUnauthenticatedHandler } from './api.js';
import { ErrorNote, navigate } from './util.js';
import { Overview } from './pages/overview.js';
import { DeliveryList } from './pages/list.js';
import { DeliveryDetail } from './pages/delivery.js';
import { Subscriptions, SubscriptionDetail, SubscriptionNew } from './pages/subscriptions.js';
import { Audit } from './pages/audit.js';
import { Jobs } from './pages/jobs.js';
import { Events, EventDetail, EventTypes } from './pages/events.js';

// "#/dlq?subscription_id=..." -> { path: ['dlq'], query: URLSearchParams }
function parseHash() {
  const h = location.hash.replace(/^#\/?/, '');
  const [p, q] = h.split('?');
  return { path: p ? p.split('/').filter(Boolean).map(decodeURIComponent) : [], query: new URLSearchParams(q || '') };
}

const REFRESH_MS = 5000;

const NAV = [
  ['overview', 'Overview', 'o'],
  ['dlq', 'Dead letters', 'q'],
  ['deliveries', 'Deliveries', 'd'],
  ['events', 'Events', 'e'],
  ['subscriptions', 'Subscriptions', 's'],
  ['jobs', 'Jobs', 'j'],
  ['audit', 'Audit log', 'a'],
];

function applyTheme(t) {
  if (t === 'light' || t === 'dark') document.documentElement.dataset.theme = t;
  else delete document.documentElement.dataset.theme;
}

function SignIn({ onSignedIn, notice }) {
  const [value, setValue] = useState('');
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      const me = await api('GET', '/v1/whoami', undefined, value.trim());
      if (!me.grants.includes('read')) throw new Error(`the token "${me.name}" has ${me.scopes.join(', ')}: the console needs at least the read scope`);
      token.set(value.trim());
      onSignedIn(me);
    } catch (err) {
      setError(err.status === 401 ? new Error('That token is not valid for this outboxd.') : err);
    } finally { setBusy(false); }
  };
  return html`<main class="signin">
    <form onSubmit=${submit} class="card">
      <h1>outboxd console</h1>
      ${notice && html`<p class="muted">${notice}</p>`}
      <label for="token">API token</label>
      <input id="token" name="token" type="password" autocomplete="off" autofocus required
        value=${value} onInput=${(e) => setValue(e.target.value)} placeholder="obx_… or the admin token" />
      <p class="muted small">Kept in this tab's session storage and sent as a bearer token to this server only. A read-scoped token opens a read-only console.</p>
      <${ErrorNote} error=${error} />
      <button type="submit" class="primary" disabled=${busy}>${busy ? 'Signing in…' : 'Sign in'}</button>
    </form>
  </main>`;
}

function Help({ onClose }) {
  return html`<div class="modal" role="dialog" aria-modal="true" aria-label="Keyboard shortcuts" onClick=${onClose}>
    <div class="card" onClick=${(e) => e.stopPropagation()}>
      <h2>Keyboard</h2>
      <table class="kv"><tbody>
        ${NAV.map(([, label, k]) => html`<tr><th><kbd>g</kbd> <kbd>${k}</kbd></th><td>${label}</td></tr>`)}
        <tr><th><kbd>/</kbd></th><td>Focus the first filter</td></tr>
        <tr><th><kbd>j</kbd> <kbd>k</kbd></th><td>Next / previous row of a list (<kbd>Enter</kbd> opens it)</td></tr>
        <tr><th><kbd>x</kbd></th><td>Tick the focused row</td></tr>
        <tr><th><kbd>r</kbd></th><td>Refresh the page's data</td></tr>
        <tr><th><kbd>?</kbd></th><td>This help</td></tr>
        <tr><th><kbd>Esc</kbd></th><td>Close a dialog</td></tr>
      </tbody></table>
      <button onClick=${onClose} autofocus>Close</button>
    </div>
  </div>`;
}

function App() {
  const [route, setRoute] = useState(parseHash());
  const [me, setMe] = useState(null);
  const [checking, setChecking] = useState(!!token.get());
  const [notice, setNotice] = useState(null);
  const [theme, setTheme] = useState(localStorage.getItem('outboxd.theme') || 'auto');
  const [help, setHelp] = useState(false);
  const [refresh, setRefresh] = useState(0);
  // Lists and pages reload every 5 s while the tab is shown, unless paused (kept in local
  // storage); r reloads at once either way.
  // The timer reads the ref, set in the click handler: a pause holds from the click on,
  // not from the effect that stops the timer after the next paint.
  const [live, setLiveState] = useState(localStorage.getItem('outboxd.refresh') !== 'paused');
  const liveRef = useRef(live);
  const setLive = (on) => { liveRef.current = on; setLiveState(on); };
  useEffect(() => {
    localStorage.setItem('outboxd.refresh', live ? 'on' : 'paused');
    if (!live) return undefined;
    const t = setInterval(() => {
      if (liveRef.current && document.visibilityState === 'visible') setRefresh((n) => n + 1);
    }, REFRESH_MS);
    return () => clearInterval(t);
  }, [live]);

  useEffect(() => {
    const on = () => setRoute(parseHash());
    window.addEventListener('hashchange', on);
    setUnauthenticatedHandler(() => { token.clear(); setMe(null); setNotice('The token was refused (revoked or changed): sign in again.'); });
    if (token.get()) {
      api('GET', '/v1/whoami').then(setMe, () => token.clear()).finally(() => setChecking(false));
    }
    return () => window.removeEventListener('hashchange', on);
  }, []);

  useEffect(() => { applyTheme(theme); localStorage.setItem('outboxd.theme', theme); }, [theme]);

  useEffect(() => {
    let pendingG = false;
    const onKey = (e) => {
      if (e.key === 'Escape') { setHelp(false); return; }
      const t = e.target;
      if (e.ctrlKey || e.metaKey || e.altKey || (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName)))) return;
      if (pendingG) {
        pendingG = false;
        const hit = NAV.find(([, , k]) => k === e.key);
        if (hit) { e.preventDefault(); navigate(`/${hit[0]}`); }
        return;
      }
      if (e.key === 'g') pendingG = true;
      else if (e.key === '?') setHelp(true);
      else if (e.key === 'r') setRefresh((n) => n + 1);
      else if (e.key === '/') {
        const f = document.querySelector('.filters input, .filters select');
        if (f) { e.preventDefault(); f.closest('details').open = true; f.focus(); }
      }
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, []);

  if (checking) return html`<p class="boot">Checking the token…</p>`;
  if (!me) return html`<${SignIn} notice=${notice} onSignedIn=${(m) => { setNotice(null); setMe(m); if (!location.hash) navigate('/overview'); }} />`;

  const can = { operate: me.grants.includes('operate'), admin: me.grants.includes('admin') };
  const [first = 'overview', second] = route.path;
  let page;
  const props = { me, can, query: route.query, refresh };
  if (first === 'overview') page = html`<${Overview} ...${props} />`;
  else if (first === 'dlq') page = html`<${DeliveryList} key="dlq" dead=${true} ...${props} />`;
  else if (first === 'deliveries' && second) page = html`<${DeliveryDetail} key=${second} id=${second} ...${props} />`;
  else if (first === 'deliveries') page = html`<${DeliveryList} key="deliveries" dead=${false} ...${props} />`;
  else if (first === 'events' && second) page = html`<${EventDetail} key=${second} id=${second} ...${props} />`;
  else if (first === 'events') page = html`<${Events} ...${props} />`;
  else if (first === 'event-types') page = html`<${EventTypes} ...${props} />`;
  else if (first === 'subscriptions' && second === 'new') page = html`<${SubscriptionNew} ...${props} />`;
  else if (first === 'subscriptions' && second) page = html`<${SubscriptionDetail} key=${second} id=${second} ...${props} />`;
  else if (first === 'subscriptions') page = html`<${Subscriptions} ...${props} />`;
  else if (first === 'jobs') page = html`<${Jobs} ...${props} />`;
  else if (first === 'audit') page = html`<${Audit} ...${props} />`;
  else page = html`<main><h1>Not found</h1><p>No console page <code>${location.hash}</code>. <a href="#/overview">Overview</a></p></main>`;

  const signOut = () => { token.clear(); setMe(null); setNotice('Signed out.'); };
  return html`
    <header class="top">
      <a class="brand" href="#/overview">outboxd</a>
      <nav aria-label="Main">
        ${NAV.map(([p, label]) => html`<a href=${`#/${p}`} aria-current=${first === p || (p === 'events' && first === 'event-types') ? 'page' : undefined}>${label}</a>`)}
      </nav>
      <div class="who">
        <span title="the token's scopes">${me.name} · ${me.scopes.join(', ')}</span>
        ${!can.operate && html`<span class="badge">read-only</span>`}
        <select aria-label="Theme" value=${theme} onChange=${(e) => setTheme(e.target.value)}>
          <option value="auto">Auto</option><option value="light">Light</option><option value="dark">Dark</option>
        </select>
        <button aria-pressed=${live} onClick=${() => setLive(!live)} title=${live ? 'Pages reload every 5 s: pause that' : 'Paused: pages reload only with r'}>${live ? 'Pause refresh' : 'Resume refresh'}</button>
        <button onClick=${() => setHelp(true)} title="Keyboard shortcuts (?)">?</button>
        <button onClick=${signOut}>Sign out</button>
      </div>
    </header>
    ${page}
    ${help && html`<${Help} onClose=${() => setHelp(false)} />`}`;
}

applyTheme(localStorage.getItem('outboxd.theme') || 'auto');
// The boot text ("Loading the outboxd console…") is the container's placeholder: it goes
// before the first render, which would otherwise keep it above the console.
const root = document.getElementById('app');
root.replaceChildren();
render(html`<${App} />`, root);
