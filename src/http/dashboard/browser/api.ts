// The dashboard's one way to the server: the public HTTP API with the token the person typed
// (sessionStorage: this tab only). A refusal comes back as an ApiFailure saying what kind it is.
export type Scope = 'enqueue' | 'read' | 'admin';
export type FailureKind = 'network' | 'auth' | 'database' | 'http';

export const TOKEN_KEY = 'pgdrain.token';
const basePath = document.body.dataset.basePath ?? '';
/** From the API's X-Pgdrain-Scope: 'read' makes the page read-only. */
let tokenScope: Scope | null = null;
export const scope = () => tokenScope;

export const token = () => sessionStorage.getItem(TOKEN_KEY);

export class ApiFailure extends Error {
  readonly kind: FailureKind;
  readonly status: number;
  readonly code: string;
  constructor(kind: FailureKind, status: number, code: string, message: string) {
    super(message);
    this.kind = kind;
    this.status = status;
    this.code = code;
  }
}

/** One request; `body` goes as JSON. */
export async function api<T>(method: string, path: string, body?: unknown): Promise<T> {
  let response: Response;
  const headers: Record<string, string> = { Authorization: `Bearer ${token()}`, Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  try {
    response = await fetch(basePath + path, {
      method,
      headers,
      cache: 'no-store',
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  } catch {
    throw new ApiFailure('network', 0, 'network', 'The server does not answer.');
  }
  const given = response.headers.get('X-Pgdrain-Scope');
  if (given) tokenScope = given as Scope;
  if (response.status === 204) return null as T;
  let data: unknown = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = (data as { error?: { code?: string; message?: string } } | null)?.error ?? {};
    // A token that cannot read (an enqueue-only one) cannot open the page at all.
    const refused = response.status === 401 || (response.status === 403 && method === 'GET');
    const kind: FailureKind = refused ? 'auth' : error.code === 'database_unavailable' ? 'database' : 'http';
    throw new ApiFailure(
      kind,
      response.status,
      error.code ?? `http_${response.status}`,
      error.message ?? `HTTP ${response.status}`,
    );
  }
  return data as T;
}
