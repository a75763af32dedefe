// subform.js: a subscription's settings as a form instead of JSON: endpoint, event
// types and payload filter, auth (credentials masked as the API masks them), the retry
// policy, per-key ordering and disable_after. It builds the document a POST takes, or the merge patch of
// what changed for a PATCH (retry merges key by key, auth is replaced whole: a masked
// credential sent back as "********" with the same auth type keeps the stored one).
import { html, useState } from '../vendor/htm-preact.js';
import { ErrorNote } from '../util.js';

export const MASKED = '********';

// Each auth type's fields; secret ones are masked in reads.
const AUTH_FIELDS = {
  none: [],
  basic: [['username', 'Username'], ['password', 'Password', 'secret']],
  bearer: [['token', 'Token', 'secret']],
  api_key: [['header', 'Header name'], ['value', 'Value', 'secret']],
  query: [['param', 'Query parameter'], ['value', 'Value', 'secret']],
  oauth2: [['token_url', 'Token URL'], ['grant_type', 'Grant type', 'select', ['client_credentials', 'password']],
    ['client_id', 'Client id'], ['client_secret', 'Client secret', 'secret'],
    ['client_auth', 'Client authentication', 'select', ['basic', 'body']], ['scope', 'Scope'], ['audience', 'Audience'],
    ['username', 'Username (password grant)'], ['password', 'Password (password grant)', 'secret']],
};
const AUTH_KEYS = [...new Set(Object.values(AUTH_FIELDS).flat().map(([k]) => k))];

// retry: [key, label, kind, placeholder (the API's default), shown for these policies]
const RETRY_FIELDS = [
  ['immediate', 'Immediate tries (1–10, the first one included)', 'int', '4'],
  ['immediate_delay', 'Delay between immediate tries', 'text', '100ms'],
  ['interval', 'Interval (fixed) or step (linear)', 'text', '3s', ['fixed', 'linear']],
  ['min_delay', 'Minimum delay', 'text', '10s', ['exponential']],
  ['max_delay', 'Maximum delay', 'text', '60s', ['linear', 'exponential']],
  ['factor', 'Growth factor (1–10)', 'num', '2', ['exponential']],
  ['jitter', 'Jitter (0–1)', 'num', '0', ['fixed', 'linear']],
  ['max_retries', 'Scheduled retries (0: forever)', 'int', 'policy default'],
  ['timeout', 'Timeout of scheduled tries', 'text', '5s'],
  ['permanent', 'Dead-letter at once on (statuses)', 'list', '410, 422'],
  ['retry_after_max', 'Longest Retry-After honoured', 'text', '1h'],
];

const str = (v) => (v === undefined || v === null ? '' : Array.isArray(v) ? v.join(', ') : String(v));

// The form's state from a subscription document (a read: credentials masked).
function fromDoc(doc) {
  const auth = doc.auth || { type: 'none' };
  const f = {
    name: str(doc.name), endpoint: str(doc.endpoint || 'https://'), event_types: str(doc.event_types || ['*']),
    filter: doc.filter ? JSON.stringify(doc.filter) : '',
    timeout: str(doc.timeout), ordering: str(doc.ordering), ordering_on_dead: str(doc.ordering_on_dead),
    disable_after: str(doc.disable_after), auth_type: auth.type || 'none', policy: str(doc.retry && doc.retry.policy),
  };
  for (const k of AUTH_KEYS) f[`auth.${k}`] = auth[k] === MASKED ? '' : str(auth[k]);
  for (const [k] of RETRY_FIELDS) f[`retry.${k}`] = str(doc.retry && doc.retry[k]);
  return f;
}

function typed(kind, v) {
  if (kind === 'int' || kind === 'num') return Number(v);
  if (kind === 'list') return v.split(',').map((x) => x.trim()).filter(Boolean).map(Number);
  return v;
}

// The settings the form edits, as the API takes them. A secret field left empty keeps
// the stored credential (sent back masked) when the auth type is the stored one.
function toDoc(f, stored) {
  const doc = {
    name: f.name.trim(), endpoint: f.endpoint.trim(),
    event_types: f.event_types.split(',').map((x) => x.trim()).filter(Boolean),
  };
  if (f.filter.trim()) {
    try { doc.filter = JSON.parse(f.filter); } catch (err) {
      throw Object.assign(new Error(`the payload filter is not JSON: ${err.message}`), { field: 'filter' });
    }
  }
  for (const k of ['timeout', 'ordering', 'ordering_on_dead', 'disable_after']) if (f[k].trim()) doc[k] = f[k].trim();
  if (f.auth_type !== 'none') {
    const auth = { type: f.auth_type };
    const old = (stored && stored.auth) || {};
    for (const [k, , kind] of AUTH_FIELDS[f.auth_type]) {
      const v = f[`auth.${k}`];
      if (v !== '') auth[k] = v;
      else if (kind === 'secret' && old.type === f.auth_type && old[k] === MASKED) auth[k] = MASKED;
    }
    doc.auth = auth;
  }
  const retry = {};
  if (f.policy) retry.policy = f.policy;
  // Fields another policy uses are kept as they are (hidden, not removed): min_delay and
  // max_delay also bound the circuit breaker's delay actions.
  for (const [k, , kind] of RETRY_FIELDS) {
    const v = f[`retry.${k}`].trim();
    if (v !== '') retry[k] = typed(kind, v);
  }
  if (Object.keys(retry).length) doc.retry = retry;
  return doc;
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

// The merge patch from the stored document to the form's: top-level fields replaced or
// removed (null), retry key by key, auth whole.
function toPatch(stored, doc) {
  const before = toDoc(fromDoc(stored), stored);
  const patch = {};
  for (const k of ['name', 'endpoint', 'event_types', 'filter', 'timeout', 'ordering', 'ordering_on_dead', 'disable_after', 'auth']) {
    if (!same(before[k], doc[k])) patch[k] = doc[k] === undefined ? null : doc[k];
  }
  const rb = before.retry || {}, ra = doc.retry || {};
  const retry = {};
  for (const k of new Set([...Object.keys(rb), ...Object.keys(ra)])) if (!same(rb[k], ra[k])) retry[k] = ra[k] === undefined ? null : ra[k];
  if (Object.keys(retry).length) patch.retry = retry;
  return patch;
}

const origin = (u) => { try { const x = new URL(u); return `${x.protocol}//${x.host}`; } catch { return u; } };

// The form. stored: the subscription as read (null for a new one). onSave(body) gets the
// POST document (new) or the merge patch (edit) and returns a promise; an ApiError
// naming a field (auth.password, retry.max_retries, ...) is shown at that field.
export function SubscriptionForm({ stored, onSave, onCancel, extra }) {
  const [f, setF] = useState(() => fromDoc(stored || {}));
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const set = (k) => (e) => setF({ ...f, [k]: e.target.value });
  const fieldError = (k) => error && error.field === k && html`<p class="error small" role="alert" data-field=${k}>${error.message}</p>`;
  const moved = stored && stored.auth && origin(f.endpoint.trim()) !== origin(stored.endpoint);
  const input = (k, label, opts = {}) => html`<div class="field">
    <label for=${`sf-${k}`}>${label}</label>
    <input id=${`sf-${k}`} name=${k} value=${f[k]} onInput=${set(k)} ...${opts} aria-invalid=${error && error.field === k ? 'true' : undefined} />
    ${fieldError(k)}</div>`;
  const submit = async (e) => {
    e.preventDefault();
    setError(null);
    let doc;
    try { doc = toDoc(f, stored); } catch (err) { setError(err); return; }
    let body = stored ? toPatch(stored, doc) : doc;
    if (extra) {
      try { body = { ...extra.parse(), ...body }; } catch (err) { setError(err); return; }
    }
    if (stored && !Object.keys(body).length) { onCancel(); return; }
    setBusy(true);
    try { await onSave(body); } catch (err) { setError(err); } finally { setBusy(false); }
  };
  const authFields = AUTH_FIELDS[f.auth_type] || [];
  const oldAuth = (stored && stored.auth) || {};
  const policy = f.policy || 'fixed';
  return html`<form class="card form subform" onSubmit=${submit} aria-label="Subscription settings">
    <fieldset><legend>Endpoint</legend>
      ${input('name', 'Name', { required: true })}
      ${input('endpoint', 'Endpoint URL', { required: true })}
      ${input('event_types', 'Event types (comma-separated patterns)', { required: true })}
      <div class="field"><label for="sf-filter">Payload filter (JSON, optional)</label>
        <textarea id="sf-filter" name="filter" rows="2" value=${f.filter} onInput=${set('filter')}
          placeholder='{"data.amount": {"$gte": 100}, "data.currency": "EUR"}'
          aria-invalid=${error && error.field && error.field.startsWith('filter') ? 'true' : undefined}></textarea>
        ${error && error.field && error.field.startsWith('filter') && html`<p class="error small" role="alert" data-field="filter">${error.message}</p>`}</div>
      ${input('timeout', 'Timeout of immediate tries', { placeholder: '1s' })}
    </fieldset>
    <fieldset><legend>Authentication</legend>
      <div class="field"><label for="sf-auth_type">Auth type</label>
        <select id="sf-auth_type" value=${f.auth_type} onChange=${set('auth_type')}>
          ${Object.keys(AUTH_FIELDS).map((t) => html`<option value=${t} selected=${t === f.auth_type}>${t}</option>`)}
        </select>${fieldError('auth')}${fieldError('auth.type')}</div>
      ${moved && authFields.some(([, , kind]) => kind === 'secret') && html`<p class="warn-text small" data-testid="moved">The endpoint moves to another host: enter the credentials again (stored ones do not follow it).</p>`}
      ${authFields.map(([k, label, kind, choices]) => {
        if (kind === 'select') {
          return html`<div class="field"><label for=${`sf-auth.${k}`}>${label}</label>
            <select id=${`sf-auth.${k}`} value=${f[`auth.${k}`]} onChange=${set(`auth.${k}`)}>
              <option value="">default (${choices[0]})</option>${choices.map((c) => html`<option value=${c} selected=${c === f[`auth.${k}`]}>${c}</option>`)}
            </select>${fieldError(`auth.${k}`)}</div>`;
        }
        if (kind === 'secret') {
          const kept = oldAuth.type === f.auth_type && oldAuth[k] === MASKED;
          return input(`auth.${k}`, label, { type: 'password', autocomplete: 'new-password',
            placeholder: kept ? (moved ? 'stored: enter it again' : '******** stored: leave empty to keep') : '' });
        }
        return input(`auth.${k}`, label);
      })}
    </fieldset>
    <fieldset><legend>Retries</legend>
      <div class="field"><label for="sf-policy">Policy</label>
        <select id="sf-policy" value=${f.policy} onChange=${set('policy')}>
          <option value="">default (fixed)</option>${['fixed', 'linear', 'exponential'].map((p) => html`<option value=${p} selected=${p === f.policy}>${p}</option>`)}
        </select>${fieldError('retry.policy')}</div>
      ${RETRY_FIELDS.filter(([, , , , only]) => !only || only.includes(policy)).map(([k, label, kind, ph]) =>
        input(`retry.${k}`, label, { placeholder: ph, inputmode: kind === 'text' || kind === 'list' ? undefined : 'decimal' }))}
    </fieldset>
    <fieldset><legend>Ordering and disabling</legend>
      <div class="field"><label for="sf-ordering">Ordering</label>
        <select id="sf-ordering" value=${f.ordering} onChange=${set('ordering')}>
          <option value="">none (default)</option><option value="partition_key" selected=${f.ordering === 'partition_key'}>per partition_key, in ingest order</option>
        </select>${fieldError('ordering')}</div>
      ${f.ordering === 'partition_key' && html`<div class="field"><label for="sf-ordering_on_dead">A dead delivery</label>
        <select id="sf-ordering_on_dead" value=${f.ordering_on_dead} onChange=${set('ordering_on_dead')}>
          <option value="">blocks its key (default)</option><option value="skip" selected=${f.ordering_on_dead === 'skip'}>is skipped</option>
        </select>${fieldError('ordering_on_dead')}</div>`}
      ${input('disable_after', 'Disable after failing for (0s: never)', { placeholder: "the server's disable_after (5d)" })}
    </fieldset>
    ${extra && extra.render()}
    <${ErrorNote} error=${error} />
    <div class="actions"><button type="submit" class="primary" disabled=${busy}>${stored ? 'Save' : 'Create'}</button>
      <button type="button" onClick=${onCancel}>Cancel</button></div>
  </form>`;
}

// The settings the form covers, in words, for the subscription's page.
export function describeRetry(r) {
  if (!r) return 'defaults';
  const parts = [r.policy || 'fixed'];
  if (r.immediate !== undefined) parts.push(`${r.immediate} immediate ${r.immediate === 1 ? 'try' : 'tries'}`);
  if (r.interval) parts.push(`every ${r.interval}`);
  if (r.min_delay || r.max_delay) parts.push(`delays ${r.min_delay || '10s'}–${r.max_delay || '60s'}`);
  if (r.max_retries !== undefined) parts.push(r.max_retries === 0 ? 'retried forever' : `${r.max_retries} scheduled retries`);
  if (r.permanent && r.permanent.length) parts.push(`dead at once on ${r.permanent.join(', ')}`);
  return parts.join(', ');
}

export function describeAuth(a) {
  if (!a || a.type === 'none') return 'none';
  const shown = Object.entries(a).filter(([k]) => k !== 'type').map(([k, v]) => `${k} ${v}`);
  return `${a.type}${shown.length ? ` (${shown.join(', ')})` : ''}`;
}
