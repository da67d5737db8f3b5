// A typed client for pgdrain's HTTP API, for Node, Workers (a service binding's fetch too) and
// browsers. Its request and response types are inferred from the contract's zod schemas
// (src/http/contract.ts) — the ones the server validates with and the OpenAPI document is
// generated from — and imported as types only, so the client itself is a few hundred bytes of
// fetch calls with no runtime dependency.
//
//   const queue = createClient({ baseUrl: 'https://queue.example.com', token: process.env.PGDRAIN_TOKEN });
//   const { id } = await queue.enqueue({ kind: 'send_receipt', payload: { orderId: 17 } });
import type * as api from '../http/contract.ts';
import { PgdrainError } from '../errors.ts';

/** The longest one request waits (GET /jobs/:id?waitSeconds); waitFor() asks again for longer waits. */
const MAX_WAIT_SECONDS = 60;
const FINAL = new Set(['completed', 'dead', 'cancelled', 'deleted']);

export interface ClientOptions {
  /** Where the API is served, with its mount prefix if any: `https://queue.example.com`,
   * `http://127.0.0.1:8080/queue`. */
  baseUrl: string;
  /** API_TOKEN, or a scoped token from API_TOKENS. */
  token?: string;
  /** Another fetch: a service binding's (`env.QUEUE.fetch.bind(env.QUEUE)`), a test's, a proxy's. */
  fetch?: (input: string, init: RequestInit) => Promise<Response>;
}

/** Every failure: the API's own `{ error: { code, message } }` with its status, or `network_error` (status 0). */
export class PgdrainApiError extends PgdrainError {
  override readonly name = 'PgdrainApiError';
  /** The HTTP status; 0 when there was no response. */
  readonly status: number;
  /** The API's error code (`invalid_request`, `unauthorized`, `not_found`, `not_dead`, `unknown_kind`, …). */
  readonly code: string;
  constructor(status: number, code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.status = status;
    this.code = code;
  }
}

type Query = Record<string, string | number | undefined>;

type Send = (input: string, init: RequestInit) => Promise<Response>;

/** One request to the API: JSON in and out, a PgdrainApiError for every failure. */
async function callApi<T>(
  send: Send,
  base: string,
  token: string | undefined,
  method: string,
  path: string,
  request: { body?: unknown; query?: Query } = {},
): Promise<T> {
  const headers: Record<string, string> = { accept: 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  if (request.body !== undefined) headers['content-type'] = 'application/json';
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(request.query ?? {}))
    if (value !== undefined) search.set(key, String(value));
  const url = `${base}${path}${search.size > 0 ? `?${search}` : ''}`;
  let response: Response;
  try {
    response = await send(url, {
      method,
      headers,
      body: request.body === undefined ? undefined : JSON.stringify(request.body),
    });
  } catch (error) {
    throw new PgdrainApiError(
      0,
      'network_error',
      `${method} ${path}: no response (${error instanceof Error ? error.message : String(error)})`,
      { cause: error },
    );
  }
  if (response.status === 204) return undefined as T;
  const text = await response.text();
  let body: unknown;
  try {
    body = text === '' ? undefined : JSON.parse(text);
  } catch {
    body = undefined;
  }
  if (!response.ok) {
    const error = (body as Partial<api.ApiErrorBody> | undefined)?.error;
    throw new PgdrainApiError(
      response.status,
      error?.code ?? `http_${response.status}`,
      error?.message ?? `${method} ${path} answered ${response.status}`,
    );
  }
  return body as T;
}

export function createClient(options: ClientOptions) {
  const base = options.baseUrl.replace(/\/+$/, '');
  // Unbound, a Workers runtime's global fetch throws "Illegal invocation".
  const send: Send = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
  const call = <T>(method: string, path: string, request?: { body?: unknown; query?: Query }) =>
    callApi<T>(send, base, options.token, method, path, request);

  const idPath = (id: string) => encodeURIComponent(id);

  /** The job once it is completed, dead or cancelled, or as it is after `timeoutSeconds` (default 60). */
  async function waitFor(
    id: string,
    { timeoutSeconds = MAX_WAIT_SECONDS }: { timeoutSeconds?: number } = {},
  ): Promise<api.Job | api.GoneJob> {
    const deadline = Date.now() + timeoutSeconds * 1000;
    for (;;) {
      const waitSeconds = Math.max(1, Math.min(MAX_WAIT_SECONDS, Math.ceil((deadline - Date.now()) / 1000)));
      const job = await call<api.Job | api.GoneJob>('GET', `/jobs/${idPath(id)}`, { query: { waitSeconds } });
      if (FINAL.has(job.status) || Date.now() >= deadline) return job;
    }
  }

  return {
    /** POST /jobs: 201, or the existing job (`deduplicated: true`) for a key still queued. */
    enqueue: (job: api.JobInput) => call<api.Enqueued>('POST', '/jobs', { body: job }),
    /** POST /jobs/batch: 1..1000 jobs in one transaction, all or none; ids in input order. */
    enqueueBatch: (jobs: api.JobInput[]) => call<api.BatchEnqueued>('POST', '/jobs/batch', { body: { jobs } }),
    /** GET /jobs/:id (404: unknown, or completed and deleted — its kind keeps no history). */
    getJob: (id: string) => call<api.Job>('GET', `/jobs/${idPath(id)}`),
    /** GET /jobs/:id?waitSeconds: the job as soon as it is completed, dead or cancelled (a job whose
     * kind keeps no history answers as a api.GoneJob: how it ended), else as it is after the timeout. */
    waitFor,
    /** POST /jobs/:id/cancel: `cancelled` at once if it was not running; `running` while its handler
     * is being stopped (it ends cancelled). 409 for a completed or dead job. */
    cancel: (id: string) => call<api.CancelAnswer>('POST', `/jobs/${idPath(id)}/cancel`),
    /** POST /events: answers every workflow run waiting on the event and key (step.waitForEvent). */
    sendEvent: (event: api.EventInput) => call<api.EventSent>('POST', '/events', { body: event }),
    /** GET /jobs: newest first; pass `nextCursor` back as `cursor` for the next page. */
    listJobs: (query: api.ListQuery = {}) => call<api.JobPage>('GET', '/jobs', { query }),
    /** POST /jobs/:id/retry: a dead job back to pending (409 for one that is not dead); with
     * `fromStep`, a finished workflow run again from that step (400 for an unknown step, 409 while
     * the run is live). */
    retryJob: (id: string, options: api.RetryInput = {}) =>
      call<api.Job>('POST', `/jobs/${idPath(id)}/retry`, options.fromStep === undefined ? {} : { body: options }),
    /** DELETE /jobs/:id: a pending or dead job (409 while it runs). */
    deleteJob: (id: string) => call<void>('DELETE', `/jobs/${idPath(id)}`),
    /** POST /jobs/retry-dead: in bounded batches; call again while `done` is false. */
    retryDeadJobs: (filter: { kind?: string } = {}) =>
      call<api.DeadRetried>('POST', '/jobs/retry-dead', { body: filter }),
    /** POST /jobs/delete-dead: in bounded batches; call again while `done` is false. */
    deleteDeadJobs: (filter: { kind?: string } = {}) =>
      call<api.DeadDeleted>('POST', '/jobs/delete-dead', { body: filter }),
    /** GET /stats: counts by kind and state, the oldest ready job's wait. */
    stats: () => call<api.QueueStats>('GET', '/stats'),
    /** GET /stats/throughput: settled jobs per minute. */
    throughput: (query: api.ThroughputQuery = {}) => call<api.Throughput>('GET', '/stats/throughput', { query }),
    /** GET /schedules: the drainer's recurring schedules. */
    schedules: () => call<api.ScheduleList>('GET', '/schedules'),
    /** The kinds the drainers define, as the database keeps them (GET /kinds). */
    kinds: () => call<api.KindList>('GET', '/kinds'),
    ...kindCalls(call),
    /** GET /healthz (no token needed); a 503 throws with code `database_unavailable`. */
    health: () => call<api.Health>('GET', '/healthz'),
  };
}

type Call = <T>(method: string, path: string, request?: { body?: unknown; query?: Query }) => Promise<T>;

/** The client's calls on kinds: pause and resume, a key's own limits, a retired kind's subscription. */
function kindCalls(call: Call) {
  return {
    /** POST /kinds/:kind/pause: no drainer claims the kind until it is resumed. */
    pauseKind: (kind: string) => call<api.KindPaused>('POST', `/kinds/${encodeURIComponent(kind)}/pause`),
    /** POST /kinds/:kind/resume */
    resumeKind: (kind: string) => call<api.KindPaused>('POST', `/kinds/${encodeURIComponent(kind)}/resume`),
    /** PUT /kinds/:kind/groups/:groupKey/limits: the key's own concurrency and/or rate, instead of its kind's. */
    setGroupLimits: (kind: string, groupKey: string, limits: api.GroupLimitsInput) =>
      call<api.GroupLimitsAnswer>(
        'PUT',
        `/kinds/${encodeURIComponent(kind)}/groups/${encodeURIComponent(groupKey)}/limits`,
        { body: limits },
      ),
    /** DELETE /kinds/:kind/groups/:groupKey/limits: the key goes back to its kind's limits. */
    removeGroupLimits: (kind: string, groupKey: string) =>
      call<api.GroupLimitsRemoved>(
        'DELETE',
        `/kinds/${encodeURIComponent(kind)}/groups/${encodeURIComponent(groupKey)}/limits`,
      ),
    /** DELETE /kinds/:kind/subscriptions/:event: a retired kind's subscription (404: none). */
    unsubscribe: (kind: string, event: string) =>
      call<api.Unsubscribed>('DELETE', `/kinds/${encodeURIComponent(kind)}/subscriptions/${encodeURIComponent(event)}`),
  };
}

export type PgdrainClient = ReturnType<typeof createClient>;
