// api.js: the one way the console talks to outboxd: fetch() to this origin's /v1 API
// with the operator's token as a bearer. The token lives in sessionStorage only (gone
// when the tab closes) and is never put in a URL.

const KEY = 'outboxd.token';

export const token = {
  get: () => sessionStorage.getItem(KEY),
  set: (t) => sessionStorage.setItem(KEY, t),
  clear: () => sessionStorage.removeItem(KEY),
};

export class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.code;
    this.field = e.field;
  }
}

let onUnauthenticated = () => {};
export function setUnauthenticatedHandler(fn) { onUnauthenticated = fn; }

export async function api(method, path, body, tok = token.get()) {
  const headers = { Authorization: `Bearer ${tok || ''}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store', credentials: 'omit',
  });
  const text = await res.text();
  let data = null;
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (!res.ok) {
    const err = new ApiError(res.status, data);
    if (res.status === 401 && tok === token.get()) onUnauthenticated(err);
    throw err;
  }
  return data;
}

// Query string from an object, leaving out empty values.
// A subscription name as typed into a find box, for GET /v1/subscriptions?name=: a glob as
// typed when it holds '*' or '?', else the names that hold the text (a glob's letters'
// case is ignored).
export function nameGlob(text) {
  const t = text.trim();
  return !t || /[*?]/.test(t) ? t : `*${t}*`;
}

export function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') u.set(k, v);
  const s = u.toString();
  return s ? `?${s}` : '';
}
