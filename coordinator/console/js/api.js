// The console's calls to the coordinator: the session cookie goes with
// every request, the session's CSRF token with every one that changes
// something. A 401 sends the editor back to sign in.

let session = null;

/** The signed-in session (key name, CSRF token, settings), or null. */
export function currentSession() {
  return session;
}

export function setSession(info) {
  session = info;
}

/** An API failure, with the problem's detail as its message. */
export class ApiError extends Error {
  constructor(status, detail) {
    super(detail);
    this.status = status;
  }
}

/** Calls the API; resolves to the parsed JSON body (null when empty). */
export async function api(method, path, body) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && session) headers['X-CSRF-Token'] = session.csrf_token;
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: 'same-origin',
    cache: 'no-cache',
  });
  const text = await response.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  if (response.status === 401 && path !== '/console/session') {
    session = null;
    window.dispatchEvent(new CustomEvent('clarion:signed-out'));
  }
  if (!response.ok) {
    throw new ApiError(response.status, json?.detail ?? `${response.status} ${response.statusText}`);
  }
  return json;
}
