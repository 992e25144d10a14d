// The console's REST API, called with the user's Kubernetes bearer token (kept for this tab
// only, in sessionStorage; never in a cookie, so no other site can make the browser use it).
const TOKEN_KEY = "tidal-console-token";

export function token() { return sessionStorage.getItem(TOKEN_KEY); }
export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value.trim()); else sessionStorage.removeItem(TOKEN_KEY);
}

export class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || (body && body.message) || `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
    this.fields = (body && body.error && body.error.fields) || [];
  }
}

export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(`/api/v1${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  try { data = await resp.json(); } catch { data = null; }
  if (!resp.ok) throw new ApiError(resp.status, data);
  return data;
}
