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
    '9223372036854775808',
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
const deep = fc.integer({ min: 60, max: 3000 }).map((n) => JSON.parse('['.repeat(n) + ']'.repeat(n)) as unknown);
/** Values just past a bound PostgreSQL or JSON has: the bigint's end, NUL, a lone surrogate. */
const edges = fc.constantFrom(
  '9223372036854775808',
  '9223372036854775807',
  '0',
  '-1',
  '',
  'a\u0000b',
  '\ud800',
  'é',
  2 ** 63,
  -(2 ** 31) - 1,
  5e-324,
  1e308,
);
/** Any value of the wrong kind, or the right kind out of every bound. */
const weirdValue: fc.Arbitrary<unknown> = fc.oneof(
  { weight: 3, arbitrary: edges },
  weirdText,
  fc.oneof(fc.integer(), fc.double(), fc.constantFrom(-1, 0, 1001, 2 ** 31, 2 ** 53 + 1, 1e308, 5e-324)),
  fc.bigInt({ min: 0n, max: 10n ** 25n }).map(String),
  fc.constantFrom(null, true, [], {}),
  deep,
  fc.dictionary(weirdText, weirdText, { maxKeys: 3 }),
);
type Schema = {
  $ref?: string;
  type?: string | string[];
  anyOf?: Schema[];
  oneOf?: Schema[];
  enum?: unknown[];
  const?: unknown;
  format?: string;
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  items?: Schema;
  minItems?: number;
  maxItems?: number;
  properties?: Record<string, Schema>;
  required?: string[];
  additionalProperties?: boolean | Schema;
  example?: unknown;
};
type OpenApiDocument = {
  paths: Record<string, Record<string, Operation>>;
  components?: { schemas?: Record<string, Schema> };
};
type Operation = {
  parameters?: { name: string; in: string; required?: boolean; schema?: Schema }[];
  requestBody?: { content?: Record<string, { schema?: Schema }> };
};

/** What a field named so mostly holds, so that a request reaches the statements behind it. */
const NAMED: Record<string, fc.Arbitrary<unknown>> = {
  kind: fc.oneof({ weight: 4, arbitrary: fc.constantFrom('noop', 'webhook') }, fc.constant('send_fax')),
  id: fc.integer({ min: 1, max: 50 }).map(String),
  cursor: fc.integer({ min: 1, max: 50 }).map(String),
  after: fc.array(fc.integer({ min: 1, max: 50 }).map(String), { minLength: 1, maxLength: 3 }),
  payload: fc.oneof(
    fc.jsonValue({ maxDepth: 4 }),
    fc.record({
      url: fc.constantFrom('https://hooks.example.com/x', 'http://169.254.169.254/'),
      headers: fc.dictionary(fc.constantFrom('x-a', 'Authorization', 'x-pgdrain-job-id'), fc.string(), {
        maxKeys: 2,
      }),
    }),
  ),
};

/** Valid values for `schema` (a JSON Schema of the OpenAPI document); a field named in NAMED mostly
 * holds what it names, so that a request reaches the statements behind its checks. */
function valuesFor(schema: Schema, doc: OpenApiDocument, name = '', depth = 0): fc.Arbitrary<unknown> {
  if (schema.$ref) {
    const target = doc.components?.schemas?.[schema.$ref.replace('#/components/schemas/', '')];
    return target ? valuesFor(target, doc, name, depth) : fc.jsonValue({ maxDepth: 2 });
  }
  const named = NAMED[name];
  return named ? fc.oneof({ weight: 6, arbitrary: named }, validFor(schema, doc, depth)) : validFor(schema, doc, depth);
}

function validFor(schema: Schema, doc: OpenApiDocument, depth: number): fc.Arbitrary<unknown> {
  const choices = schema.anyOf ?? schema.oneOf;
  if (choices) return fc.oneof(...choices.map((s) => valuesFor(s, doc, '', depth)));
  if ('const' in schema) return fc.constant(schema.const);
  if (schema.enum) return fc.constantFrom(...schema.enum);
  const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== 'null') : schema.type;
  switch (type) {
    case 'string':
      if (schema.format === 'date-time')
        return fc
          .date({ min: new Date('2000-01-01'), max: new Date('2100-01-01'), noInvalidDate: true })
          .map((d) => d.toISOString());
      if (schema.pattern && schema.pattern.length < 80) return fc.stringMatching(new RegExp(schema.pattern));
      return fc.string({ minLength: schema.minLength ?? 0, maxLength: Math.min(schema.maxLength ?? 20, 20) });
    case 'integer':
      return fc.integer({ min: schema.minimum ?? -1000, max: Math.min(schema.maximum ?? 1000, 1000) });
    case 'number':
      return fc.double({
        min: schema.minimum ?? schema.exclusiveMinimum ?? -1000,
        max: Math.min(schema.maximum ?? 1000, 1000),
        noNaN: true,
      });
    case 'boolean':
      return fc.boolean();
    case 'array':
      return fc.array(schema.items && depth < 4 ? valuesFor(schema.items, doc, '', depth + 1) : fc.jsonValue(), {
        minLength: schema.minItems ?? 0,
        maxLength: Math.max(schema.minItems ?? 0, Math.min(schema.maxItems ?? 3, 3)),
      });
    case 'object': {
      // Each optional field one time in four: options that exclude each other rarely meet.
      const required = new Set(schema.required ?? []);
      const fields = Object.entries(schema.properties ?? {}).map(([key, s]) => {
        const value = valuesFor(s, doc, key, depth + 1);
        const absent = { weight: 3, arbitrary: fc.constant(undefined) };
        return [key, required.has(key) ? value : fc.oneof(absent, { weight: 1, arbitrary: value })] as const;
      });
      return fc
        .record(Object.fromEntries(fields))
        .map((r) => Object.fromEntries(Object.entries(r).filter(([, v]) => v !== undefined)));
    }
    default:
      return fc.jsonValue({ maxDepth: 3 });
  }
}

/** Valid values as the schema's weights say (a property's bias would favour small choices: an optional
 * field present, every one at once), then poisoned. */
const unbiased = (values: fc.Arbitrary<unknown>) => poisoned(fc.noBias(values));

/** `values` with, one time in two, one of its parts (the whole, a field, an element) replaced by a
 * hostile value, or an unknown field added: one poison per request, past every other check. */
function poisoned(values: fc.Arbitrary<unknown>): fc.Arbitrary<unknown> {
  return fc
    .tuple(values, fc.option(fc.tuple(fc.nat(), weirdValue, weirdText), { freq: 2, nil: undefined }))
    .map(([value, poison]) => {
      if (!poison) return value;
      const [pick, hostile, unknownKey] = poison;
      const slots: { parent: Record<string, unknown> | unknown[]; key: string | number }[] = [];
      const walk = (v: unknown) => {
        if (!v || typeof v !== 'object') return;
        for (const [k, item] of Object.entries(v)) {
          slots.push({ parent: v as Record<string, unknown>, key: Array.isArray(v) ? Number(k) : k });
          walk(item);
        }
      };
      const copy = structuredClone(value);
      walk(copy);
      const choice = pick % (slots.length + 2);
      if (choice === slots.length) return hostile;
      if (choice === slots.length + 1)
        return copy && typeof copy === 'object' && !Array.isArray(copy) ? { ...copy, [unknownKey]: hostile } : hostile;
      const { parent, key } = slots[choice]!;
      (parent as Record<string | number, unknown>)[key] = hostile;
      return copy;
    });
}

/** Every operation of the document as [method, path template, operation]. */
function operationsOf(doc: OpenApiDocument): [string, string, Operation][] {
  return Object.entries(doc.paths).flatMap(([path, methods]) =>
    Object.entries(methods).map(([method, op]) => [method.toUpperCase(), path, op] as [string, string, Operation]),
  );
}

/** One operation's requests: its path, query and body parameters from their schemas. */
function requestsFor(
  method: string,
  template: string,
  op: Operation,
  doc: OpenApiDocument,
): fc.Arbitrary<{ method: string; path: string; body?: string }> {
  const params = op.parameters ?? [];
  const values = Object.fromEntries(
    params.map((p) => [`${p.in}:${p.name}`, p.schema ? unbiased(valuesFor(p.schema, doc, p.name)) : weirdValue]),
  );
  const bodySchema = op.requestBody?.content?.['application/json']?.schema;
  const body = bodySchema
    ? fc.oneof(
        { weight: 6, arbitrary: unbiased(valuesFor(bodySchema, doc)).map((v) => JSON.stringify(v)) },
        { weight: 1, arbitrary: weirdText },
      )
    : fc.constant(undefined);
  return fc
    .tuple(
      fc.record(values, { requiredKeys: params.filter((p) => p.in === 'path').map((p) => `${p.in}:${p.name}`) }),
      fc.option(body, { nil: undefined, freq: 6 }),
    )
    .map(([given, text]) => {
      let path = template;
      const search = new URLSearchParams();
      for (const [key, value] of Object.entries(given)) {
        const [where, name] = key.split(':') as [string, string];
        const asText = typeof value === 'string' ? value : JSON.stringify(value);
        if (where === 'path') path = path.replace(`{${name}}`, encodeSegment(asText));
        else if (where === 'query' && value !== undefined) search.append(name, asText.toWellFormed());
      }
      const query = search.toString();
      return { method, path: query ? `${path}?${query}` : path, body: text };
    });
}

/**
 * Requests for every route and field of `document` (the app's /openapi.json), so a route is probed
 * the day it is added. `tokens`: the valid ones; requests mostly carry one of them, else garbage or
 * none. One request in four goes with another method, and one in ten to a path no route answers.
 */
export function hostileRequests(tokens: string[], document: unknown): fc.Arbitrary<HostileRequest> {
  const doc = document as OpenApiDocument;
  const operations = operationsOf(doc);
  if (operations.length < 10) throw new Error('the OpenAPI document lists fewer routes than the app has');
  const routed = fc.oneof(...operations.map(([method, path, op]) => requestsFor(method, path, op, doc)));
  return fc
    .record({
      routed: fc.oneof(
        { weight: 9, arbitrary: routed },
        { weight: 1, arbitrary: weirdText.map((t) => ({ method: 'GET', path: `/${encodeSegment(t)}` })) },
      ),
      otherMethod: fc.option(fc.constantFrom(...METHODS), { nil: undefined, freq: 3 }),
      contentType: fc.oneof(
        { weight: 6, arbitrary: fc.constant('application/json') },
        fc.constantFrom(
          'application/json; charset=utf-8',
          'text/plain',
          'application/x-www-form-urlencoded',
          'application/vnd.api+json',
        ),
      ),
      // The first token (the admin's) most, so that most requests reach the statements.
      auth: fc.oneof(
        { weight: 6, arbitrary: fc.constant(`Bearer ${tokens[0]}`) },
        { weight: 2, arbitrary: fc.constantFrom(...tokens.map((t) => `Bearer ${t}`)) },
        { weight: 1, arbitrary: fc.oneof(weirdText, fc.constant('Bearer')) },
      ),
    })
    .map(({ routed, otherMethod, contentType, auth }) => {
      const method = otherMethod ?? routed.method;
      const body = (routed as { body?: string }).body;
      const headers: Record<string, string> = { 'content-type': contentType };
      // Header values cannot hold every character; a request that fetch itself refuses tests nothing.
      if (/^[\t\x20-\x7e]*$/.test(auth)) headers.authorization = auth;
      const sendsBody = body !== undefined && method !== 'GET' && method !== 'HEAD';
      return { method, path: routed.path, headers, body: sendsBody ? body : undefined };
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
  (SELECT coalesce(sum(attempts), 0) FROM pgdrain.jobs)::int AS attempts,
  (SELECT count(*) FROM pgdrain.job_history)::int AS history,
  (SELECT count(*) FROM pgdrain.paused_kinds)::int AS paused,
  (SELECT count(*) FROM pgdrain.subscriptions)::int AS subscriptions,
  (SELECT count(*) FROM pgdrain.group_limits)::int AS group_limits`;
