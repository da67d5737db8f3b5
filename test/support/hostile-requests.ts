// Generated hostile requests for every route of the app (fast-check), and the rules any answer
// must keep: never a 5xx, every error in the contract's shape, no stack, SQL or secret in a body,
// and a refused request changes nothing. Shared by the sidecar's test and the Worker's (workerd).
import fc from 'fast-check';

export interface HostileRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body?: string;
}

const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env ?? {};
/** The seed of every run, printed with a failure; FUZZ_SEED=… replays one. */
export const FUZZ_SEED = Number(env.FUZZ_SEED ?? 20261130);
/** Requests per run; FUZZ_RUNS=… for a longer search by hand. */
export const FUZZ_RUNS = Number(env.FUZZ_RUNS ?? 1000);

// Each route with the method it answers to; most requests use that one, the rest any method.
const ROUTES: [string, string][] = [
  ['POST', '/jobs'],
  ['GET', '/jobs'],
  ['POST', '/jobs/batch'],
  ['GET', '/jobs/:id'],
  ['DELETE', '/jobs/:id'],
  ['POST', '/jobs/:id/retry'],
  ['POST', '/jobs/retry-dead'],
  ['POST', '/jobs/delete-dead'],
  ['GET', '/stats'],
  ['GET', '/stats/throughput'],
  ['GET', '/schedules'],
  ['GET', '/kinds'],
  ['GET', '/metrics'],
  ['GET', '/healthz'],
  ['GET', '/'],
  ['GET', '/dashboard'],
  ['GET', '/dashboard/script.js'],
  ['POST', '/kinds/:kind/pause'],
  ['POST', '/kinds/:kind/resume'],
  ['GET', '/nope'],
];
const METHODS = ['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS', 'HEAD'];

const plainText = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }), // lone surrogates and all
  fc.string({ maxLength: 20 }),
  fc.constantFrom(
    '',
    ' ',
    'noop',
    'webhook',
    "'; DROP TABLE x; --",
    '%00',
    '../../etc/passwd',
    '9'.repeat(30),
    '-1',
    '0',
    '1e309',
  ),
);
// What PostgreSQL refuses in text, often: a NUL or a lone surrogate inside otherwise plain text.
const weirdText = fc.oneof(
  plainText,
  fc.tuple(plainText, fc.constantFrom('\u0000', '\ud800', '\udfff'), plainText).map((parts) => parts.join('')),
);
/** Mostly a valid value, so that requests get past the first check and poison the one after. */
const mostly = <T, U>(valid: fc.Arbitrary<T>, weird: fc.Arbitrary<U>) =>
  fc.oneof({ weight: 3, arbitrary: valid }, { weight: 1, arbitrary: weird });

const idText = mostly(
  fc.integer({ min: 1, max: 50 }).map(String),
  fc.oneof(fc.bigInt({ min: 0n, max: 10n ** 25n }).map(String), weirdText),
);
const kindText = mostly(fc.constantFrom('noop', 'webhook'), fc.oneof(fc.constant('send_fax'), weirdText));
const deep = fc.integer({ min: 60, max: 3000 }).map((n) => JSON.parse('['.repeat(n) + ']'.repeat(n)) as unknown);
const payload = mostly(
  fc.oneof(
    fc.jsonValue({ maxDepth: 4 }),
    fc.record({ url: fc.constantFrom('https://hooks.example.com/x', 'http://169.254.169.254/') }),
  ),
  fc.oneof(deep, weirdText, fc.dictionary(weirdText, weirdText, { maxKeys: 3 })),
);
const dateText = mostly(
  fc
    .date({ min: new Date('2000-01-01'), max: new Date('2100-01-01'), noInvalidDate: true })
    .map((d) => d.toISOString()),
  fc.oneof(
    fc.date({ min: new Date(-8.64e15), max: new Date(8.64e15), noInvalidDate: true }).map((d) => d.toISOString()),
    fc.constantFrom(
      '0000-01-01T00:00:00Z',
      '9999-12-31T23:59:59Z',
      '+275760-09-13T00:00:00.000Z',
      '2026-02-30T00:00:00Z',
      'tomorrow',
    ),
    weirdText,
  ),
);
const number = mostly(
  fc.integer({ min: 0, max: 20 }),
  fc.oneof(fc.integer(), fc.double(), fc.constantFrom(-1, 1001, 2 ** 31, 2 ** 53 + 1, 1e308)),
);
const job = fc
  .record(
    {
      kind: kindText,
      payload,
      runAt: dateText,
      delaySeconds: number,
      maxAttempts: number,
      dedupeKey: mostly(fc.string({ minLength: 1, maxLength: 10 }), weirdText),
      priority: number,
      extra: fc.jsonValue({ maxDepth: 1 }),
    },
    { requiredKeys: ['kind', 'payload'] },
  )
  .map(({ extra, ...rest }) => rest as Record<string, unknown>);
const body = fc.oneof(
  { weight: 4, arbitrary: job.map((j) => JSON.stringify(j)) },
  { weight: 2, arbitrary: fc.array(job, { maxLength: 3 }).map((jobs) => JSON.stringify({ jobs })) },
  fc.record({ kind: kindText }, { requiredKeys: [] }).map((b) => JSON.stringify(b)),
  fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)),
  deep.map((v) => JSON.stringify({ kind: 'noop', payload: v })),
  weirdText,
);
const query = fc.record(
  {
    status: mostly(fc.constantFrom('pending', 'running', 'dead'), weirdText),
    kind: kindText,
    limit: number.map(String),
    cursor: idText,
    minutes: mostly(fc.integer({ min: 1, max: 100 }).map(String), weirdText),
    // An unknown parameter, one request in ten.
    x: fc.oneof({ weight: 9, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: weirdText }),
  },
  { requiredKeys: [] },
);
/** The parameters each route reads; the others go only with `x`, the unknown one. */
const QUERY_KEYS: Record<string, string[]> = {
  '/jobs': ['status', 'kind', 'limit', 'cursor'],
  '/stats/throughput': ['minutes', 'kind'],
};

/** `tokens`: the valid ones; requests mostly carry one of them, else garbage or none. */
export function hostileRequests(tokens: string[]): fc.Arbitrary<HostileRequest> {
  return fc
    .record({
      route: fc.constantFrom(...ROUTES),
      otherMethod: fc.option(fc.constantFrom(...METHODS), { nil: undefined, freq: 3 }),
      id: idText,
      kind: kindText,
      query,
      body: fc.option(body, { nil: undefined }),
      contentType: fc.option(
        fc.constantFrom(
          'application/json',
          'application/json; charset=utf-8',
          'text/plain',
          'application/x-www-form-urlencoded',
          'application/vnd.api+json',
        ),
        { nil: undefined },
      ),
      auth: fc.oneof(
        { weight: 6, arbitrary: fc.constantFrom(...tokens.map((t) => `Bearer ${t}`)) },
        { weight: 1, arbitrary: fc.oneof(weirdText, fc.constant('Bearer')) },
      ),
    })
    .map(({ route: [routeMethod, route], otherMethod, id, kind, query, body, contentType, auth }) => {
      const method = otherMethod ?? routeMethod;
      const path = route.replace(':id', encodeSegment(id)).replace(':kind', encodeSegment(kind));
      const keys = [...(QUERY_KEYS[route] ?? []), 'x'];
      const search = new URLSearchParams(
        Object.entries(query).filter((e): e is [string, string] => keys.includes(e[0]) && e[1] !== undefined),
      ).toString();
      const headers: Record<string, string> = {};
      if (contentType) headers['content-type'] = contentType;
      // Header values cannot hold every character; a request that fetch itself refuses tests nothing.
      if (/^[\t\x20-\x7e]*$/.test(auth)) headers.authorization = auth;
      const sendsBody = body !== undefined && method !== 'GET' && method !== 'HEAD';
      return { method, path: search ? `${path}?${search}` : path, headers, body: sendsBody ? body : undefined };
    });
}

/** A path segment as any client could send it, including percent-escapes that are not UTF-8. */
function encodeSegment(text: string): string {
  return text.isWellFormed() ? encodeURIComponent(text) : `${encodeURIComponent(text.toWellFormed())}%FF%ED%A0%80`;
}

/** What must hold of every answer; returns the broken rule, or null. */
export function checkAnswer(
  status: number,
  contentType: string | null,
  text: string,
  secrets: string[],
  method: string,
): string | null {
  if (status >= 500) return `status ${status}: ${text.slice(0, 300)}`;
  if (/\n\s+at \S/.test(text) || /\bat async\b/.test(text)) return `a stack trace in the body: ${text.slice(0, 300)}`;
  if (/pgdrain\.(jobs|paused_kinds|schedules)|FOR UPDATE|RETURNING|postgres(ql)?:\/\//i.test(text))
    return `SQL or a connection string in the body: ${text.slice(0, 300)}`;
  for (const secret of secrets) if (secret && text.includes(secret)) return 'a secret in the body';
  if (status >= 400 && method !== 'HEAD') {
    if (!contentType?.includes('application/json')) return `a ${status} that is not JSON`;
    try {
      const error = (JSON.parse(text) as { error?: { code?: unknown; message?: unknown } }).error;
      if (typeof error?.code !== 'string' || typeof error.message !== 'string')
        return `a ${status} without {error:{code,message}}: ${text.slice(0, 200)}`;
    } catch {
      return `a ${status} whose body is not JSON: ${text.slice(0, 200)}`;
    }
  }
  return null;
}

/** The state a refused request must leave as it was. */
export const FINGERPRINT_SQL = `SELECT (SELECT count(*) FROM pgdrain.jobs)::int AS jobs,
  (SELECT count(*) FROM pgdrain.jobs WHERE status = 'dead')::int AS dead,
  (SELECT coalesce(max(id), 0) FROM pgdrain.jobs)::text AS max_id,
  (SELECT count(*) FROM pgdrain.paused_kinds)::int AS paused`;
