// The HTTP API: one Hono app, runtime-neutral, served by the Worker and by the sidecar. It gets
// its database (per request, for the Worker's per-invocation Pool), registry and token from the
// shell that serves it, and imports nothing Node-only or Workers-only.
import { type Context, Hono, type MiddlewareHandler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { NONCE, secureHeaders } from 'hono/secure-headers';
import { Scalar } from '@scalar/hono-api-reference';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { timingSafeEqual } from 'hono/utils/buffer';
import { z } from 'zod';
import { JobValidationError, type JobRegistry, KIND_PATTERN } from '../jobs/registry.ts';
import {
  type Db, type Job, countTotals, countsByMinute, deleteDeadJobs, deleteJob, enqueue, enqueueMany, getJob, isJobId, kindInQueue, listJobs, pauseKind, ping,
  resumeKind, retryDead, retryDeadJobs, stats,
} from '../queries/index.ts';
import { describeSchedules, type ScheduleDefinition } from '../schedules.ts';
import { type Job as JobBody, type JobInput, batchInput, bulkInput, jobInput, listQuery, throughputQuery } from './contract.ts';
import { dashboardPage } from './dashboard/page.ts';
import { describe, openApiDocument } from './openapi.ts';
// Generated from ./dashboard/browser/dashboard.ts by scripts/build-dashboard.mjs (npm start/test/build, wrangler).
import { DASHBOARD_SCRIPT } from './dashboard/script.generated.ts';
import { DASHBOARD_CSS } from './dashboard/style.ts';
import { PROMETHEUS_CONTENT_TYPE, renderMetrics } from './metrics.ts';

/** Runs `fn` with a database; the shell decides how (a shared pool, or one Pool per request). */
export type WithDb = <T>(fn: (db: Db) => Promise<T>) => Promise<T>;

export interface ApiRuntime {
  withDb: WithDb;
  registry: JobRegistry;
  /** Recurring schedules, listed by GET /schedules. */
  schedules?: readonly ScheduleDefinition[];
  /** Bearer token for every route but /healthz and the dashboard's page and assets (which hold no
   * data). Unset: the API refuses with 503, never runs open. */
  apiToken: string | undefined;
  /** A second token that can read /metrics only (the API token can too). */
  metricsToken?: string | undefined;
  /** More tokens, each limited to a scope (API_TOKENS): `enqueue` may only enqueue, `read` may
   * only read (GET routes and /metrics), `admin` may do everything, like apiToken. */
  scopedTokens?: readonly ScopedToken[];
  /** Set when the shell found its token settings unusable: every protected route answers 503 with it. */
  misconfigured?: string;
  /** Runs just-enqueued jobs now, after the response (the Worker: in waitUntil). Unset: the flag
   * is accepted and the drainer's own wake-up runs them (the sidecar's NOTIFY). */
  runNow?: (ids: string[]) => void;
  /** The dashboard's warning threshold for the oldest ready job. Default 60 s. */
  oldestReadyWarnSeconds?: number;
  /** False when the drainer does not count settled jobs: the dashboard says why its chart is empty. */
  countsRecorded?: boolean;
  /** Default 1 MiB. */
  maxBodyBytes?: number;
  /** Where unexpected errors go (already stripped of secrets by the caller's logger). */
  onError?: (error: unknown, where: string) => void;
}

export type ApiConfig = ApiRuntime | ((c: Context) => ApiRuntime);

export const DEFAULT_MAX_BODY_BYTES = 1024 * 1024;
export const DASHBOARD_REFRESH_SECONDS = 5;
/** A batch starts at most this many jobs at once with runNow; the rest wait for the drainer. */
export const MAX_RUN_NOW = 20;

type Env = {
  Variables: {
    api: ApiRuntime;
    /** Where the app is mounted: '' or e.g. '/queue'. */
    basePath: string;
    /** What the request's token may do. */
    scope: TokenScope;
    /** The /docs page's script nonce (secureHeaders). */
    secureHeadersNonce?: string;
  };
};

export const TOKEN_SCOPES = ['enqueue', 'read', 'admin'] as const;
export type TokenScope = (typeof TOKEN_SCOPES)[number];
export interface ScopedToken {
  scope: TokenScope;
  token: string;
}

/**
 * API_TOKENS: comma-separated `scope:token` pairs, e.g. `enqueue:…, read:…`. Throws a message
 * that names the bad entry by position (never the token itself).
 */
export function parseScopedTokens(value: string | undefined): ScopedToken[] {
  if (!value || value.trim() === '') return [];
  return value.split(',').map((entry, i) => {
    const match = /^\s*(\w+):(\S+)\s*$/.exec(entry);
    if (!match || !(TOKEN_SCOPES as readonly string[]).includes(match[1]!)) {
      throw new Error(`API_TOKENS entry ${i + 1}: write scope:token with a scope of ${TOKEN_SCOPES.join(', ')}`);
    }
    if (match[2]!.length < 16) throw new Error(`API_TOKENS entry ${i + 1}: the token is shorter than 16 characters`);
    return { scope: match[1] as TokenScope, token: match[2]! };
  });
}

/** admin may do everything; enqueue and read only their own. */
const allows = (scope: TokenScope, needed: TokenScope) => scope === 'admin' || scope === needed;

/** Per route: what its token must be allowed to do (403 otherwise). */
function needs(needed: TokenScope): MiddlewareHandler<Env> {
  return async (c, next) => {
    if (!allows(c.var.scope, needed)) {
      throw new ApiError(403, 'forbidden', `this token's scope is ${c.var.scope}; ${c.req.method} ${c.req.path} needs ${needed === 'admin' ? 'admin' : `${needed} or admin`}`);
    }
    await next();
  };
}

class ApiError extends Error {
  status: ContentfulStatusCode;
  code: string;
  constructor(status: ContentfulStatusCode, code: string, message: string) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** A bulk request stops after this many batches (DEAD_BATCH jobs each) and says `done: false`. */
export const MAX_BULK_BATCHES = 200;

// The dashboard's page loads only its own script and stylesheet and talks only to this origin; its
// login form can never be submitted as a navigation (the token would end up in a URL).
const dashboardHeaders = secureHeaders({
  contentSecurityPolicy: {
    defaultSrc: ["'none'"],
    scriptSrc: ["'self'"],
    styleSrc: ["'self'"],
    connectSrc: ["'self'"],
    imgSrc: ["'self'", 'data:'],
    baseUri: ["'none'"],
    formAction: ["'none'"],
    frameAncestors: ["'none'"],
  },
  referrerPolicy: 'no-referrer',
});

/** The API reference at /docs: Scalar's page, its script pinned on jsDelivr, its config in a nonced inline script. */
const SCALAR_CDN = 'https://cdn.jsdelivr.net/npm/@scalar/api-reference@1.76.0';
const docsHeaders = secureHeaders({
  contentSecurityPolicy: {
    defaultSrc: ["'none'"],
    scriptSrc: [NONCE, 'https://cdn.jsdelivr.net'],
    // Scalar injects its styles at run time.
    styleSrc: ["'self'", "'unsafe-inline'", 'https://cdn.jsdelivr.net'],
    fontSrc: ["'self'", 'data:', 'https://cdn.jsdelivr.net', 'https://fonts.scalar.com'],
    imgSrc: ["'self'", 'data:'],
    // The document, and "try it" requests to this same API.
    connectSrc: ["'self'"],
    baseUri: ["'none'"],
    formAction: ["'none'"],
    frameAncestors: ["'none'"],
  },
  referrerPolicy: 'no-referrer',
});

export function createApp(config: ApiConfig): Hono<Env> {
  const app = new Hono<Env>();
  const runtimeOf = typeof config === 'function' ? config : () => config;

  app.use('*', async (c, next) => {
    c.set('api', runtimeOf(c));
    // This middleware's own route: '/*' at the root, '/queue/*' under myApp.route('/queue', app).
    const basePath = c.req.routePath.replace(/\/?\*$/, '');
    c.set('basePath', basePath);
    // The mounted app's page is at '/queue'; '/queue/' is the same page, not an API path.
    if (basePath !== '' && c.req.method === 'GET' && c.req.path === `${basePath}/`) return c.redirect(basePath, 308);
    await next();
  });

  app.get('/healthz', describe.health, async (c) => {
    try {
      await c.var.api.withDb((db) => ping(db));
      return c.json({ ok: true });
    } catch (error) {
      c.var.api.onError?.(error, 'healthz');
      return c.json({ ok: false, error: { code: 'database_unavailable', message: 'the database does not answer' } }, 503);
    }
  });

  // --- the API's description and its reference page: no data, no token ------------------------------
  app.get('/openapi.json', describe.openapi, async (c) => c.json(await openApiDocument(app, c.var.basePath)));
  app.get('/docs', describe.docs, docsHeaders, (c, next) =>
    Scalar({
      url: `${c.var.basePath}/openapi.json`,
      pageTitle: 'pgdrain API',
      cdn: SCALAR_CDN,
      nonce: c.get('secureHeadersNonce'),
      // Offline-friendly: no Scalar proxy, no hosted fonts beyond the stylesheet's.
      withDefaultFonts: false,
    })(c as never, next),
  );

  // --- the dashboard: the page and its assets hold no data, so they need no token ---------------
  app.on('GET', ['/', '/dashboard'], describe.dashboardPage, dashboardHeaders, (c) =>
    c.html(
      dashboardPage({
        oldestReadyWarnSeconds: c.var.api.oldestReadyWarnSeconds ?? 60,
        countsRecorded: c.var.api.countsRecorded !== false,
        refreshSeconds: DASHBOARD_REFRESH_SECONDS,
        basePath: c.var.basePath,
      }),
      200,
      { 'Cache-Control': 'no-store' },
    ),
  );
  app.get('/dashboard/script.js', describe.dashboardScript, dashboardHeaders, (c) =>
    c.body(DASHBOARD_SCRIPT, 200, { 'Content-Type': 'text/javascript; charset=utf-8', 'Cache-Control': 'no-cache' }),
  );
  app.get('/dashboard/style.css', describe.dashboardStyle, dashboardHeaders, (c) =>
    c.body(DASHBOARD_CSS, 200, { 'Content-Type': 'text/css; charset=utf-8', 'Cache-Control': 'no-cache' }),
  );

  // --- Prometheus: the API token, a read token, or the metrics-only token --------------------------
  app.get('/metrics', describe.metrics, async (c) => {
    const metricsOnly = c.var.api.metricsToken ? [{ scope: 'read' as const, token: c.var.api.metricsToken }] : [];
    c.set('scope', await authenticate(c, [...adminAndScoped(c.var.api), ...metricsOnly]));
    await needs('read')(c, async () => {});
    const [queue, totals] = await c.var.api.withDb((db) => Promise.all([stats(db), countTotals(db)]));
    return c.body(renderMetrics(queue, totals, c.var.api.registry.kinds()), 200, {
      'Content-Type': PROMETHEUS_CONTENT_TYPE,
      'Cache-Control': 'no-store',
    });
  });

  // --- everything below needs the API token ---------------------------------------------------------
  app.use('*', async (c, next) => {
    const scope = await authenticate(c, adminAndScoped(c.var.api));
    c.set('scope', scope);
    // The dashboard reads this to offer only what the token may do.
    c.header('X-Pgdrain-Scope', scope);
    await next();
  });

  app.use('*', async (c, next) => {
    const maxSize = c.var.api.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES;
    return bodyLimit({
      maxSize,
      onError: () => {
        throw new ApiError(413, 'body_too_large', `the request body is over the limit of ${maxSize} bytes; split a batch into smaller ones`);
      },
    })(c, next);
  });

  app.post('/jobs', describe.enqueue, needs('enqueue'), async (c) => {
    const input = parseInput(jobInput, await readJson(c), '');
    const job = prepare(c.var.api.registry, input, '');
    const result = await c.var.api.withDb((db) => enqueue(db, job));
    // After the commit: the runner claims it like any drainer, so whoever gets it first runs it.
    if (wantsRunNow(c.var.api, input) && result.status === 'pending') c.var.api.runNow?.([result.id]);
    if (result.deduplicated) {
      return c.json({ id: result.id, status: result.status, runAt: result.runAt.toISOString(), deduplicated: true }, 200);
    }
    return c.json({ id: result.id, status: result.status, runAt: result.runAt.toISOString() }, 201);
  });

  app.post('/jobs/batch', describe.enqueueBatch, needs('enqueue'), async (c) => {
    const input = parseInput(batchInput, await readJson(c), '');
    const jobs = input.jobs.map((j, i) => prepare(c.var.api.registry, j, `jobs[${i}].`));
    // One transaction: the batch is stored whole or not at all.
    const result = await c.var.api.withDb((db) => db.transaction((tx) => enqueueMany(tx, jobs)));
    const ids = result.map((j) => j.id);
    const asked = result.filter((j, i) => wantsRunNow(c.var.api, input.jobs[i]!) && j.status === 'pending').map((j) => j.id);
    if (asked.length === 0 || !c.var.api.runNow) return c.json({ ids }, 201);
    // At most MAX_RUN_NOW start in this invocation; the answer says how many wait for the cron.
    const started = asked.slice(0, MAX_RUN_NOW);
    c.var.api.runNow(started);
    return c.json({ ids, runNow: { started: started.length, deferred: asked.length - started.length } }, 201);
  });

  // Bulk actions on dead jobs, in bounded batches (see src/queries/dead-bulk.ts). Registered before
  // /jobs/:id so that `retry-dead` is never read as an id.
  app.post('/jobs/retry-dead', describe.retryDead, needs('admin'), async (c) => {
    const { kind } = parseInput(bulkInput, await readOptionalJson(c), '');
    const result = await c.var.api.withDb((db) => retryDeadJobs(db, { kind, maxBatches: MAX_BULK_BATCHES }));
    return c.json({ retried: result.count, done: result.done });
  });

  app.post('/jobs/delete-dead', describe.deleteDead, needs('admin'), async (c) => {
    const { kind } = parseInput(bulkInput, await readOptionalJson(c), '');
    const result = await c.var.api.withDb((db) => deleteDeadJobs(db, { kind, maxBatches: MAX_BULK_BATCHES }));
    return c.json({ deleted: result.count, done: result.done });
  });

  app.get('/jobs', describe.listJobs, needs('read'), async (c) => {
    const query = parseInput(listQuery, c.req.query(), 'query.');
    const page = await c.var.api.withDb((db) =>
      listJobs(db, { status: query.status, kind: query.kind, limit: query.limit, before: query.cursor }),
    );
    return c.json({ jobs: page.jobs.map(jobJson), nextCursor: page.nextCursor });
  });

  app.get('/jobs/:id', describe.getJob, needs('read'), async (c) => {
    const id = jobId(c);
    const job = await c.var.api.withDb((db) => getJob(db, id));
    if (!job) throw notFound(id);
    return c.json(jobJson(job));
  });

  app.post('/jobs/:id/retry', describe.retryJob, needs('admin'), async (c) => {
    const id = jobId(c);
    const result = await c.var.api.withDb((db) => retryDead(db, id));
    if (result.outcome === 'not_found') throw notFound(id);
    if (result.outcome === 'not_dead') throw new ApiError(409, 'not_dead', `job ${id} is ${result.status}; only dead jobs can be retried`);
    return c.json(jobJson(result.job));
  });

  app.delete('/jobs/:id', describe.deleteJob, needs('admin'), async (c) => {
    const id = jobId(c);
    const result = await c.var.api.withDb((db) => deleteJob(db, id));
    if (result.outcome === 'not_found') throw notFound(id);
    if (result.outcome === 'running') throw new ApiError(409, 'running', `job ${id} is running; wait until it settles, then delete it`);
    return c.body(null, 204);
  });

  app.get('/stats', describe.stats, needs('read'), async (c) => c.json(await c.var.api.withDb((db) => stats(db))));

  app.get('/schedules', describe.schedules, needs('read'), async (c) => {
    const schedules = c.var.api.schedules ?? [];
    return c.json({ schedules: await c.var.api.withDb((db) => describeSchedules(db, schedules)) });
  });

  // Pause / resume a kind for every drainer (the claim reads pgdrain.paused_kinds).
  for (const action of ['pause', 'resume'] as const) {
    app.post(`/kinds/:kind/${action}`, action === 'pause' ? describe.pauseKind : describe.resumeKind, needs('admin'), async (c) => {
      const kind = c.req.param('kind');
      // Known: registered here, or in the queue (another drainer pool may handle it).
      const known = KIND_PATTERN.test(kind) && (c.var.api.registry.get(kind) !== undefined || (await c.var.api.withDb((db) => kindInQueue(db, kind))));
      if (!known) {
        throw new ApiError(404, 'not_found', `unknown job kind ${JSON.stringify(kind.slice(0, 100))}: not registered here and no such jobs in the queue; registered kinds: ${c.var.api.registry.kinds().join(', ')}`);
      }
      await c.var.api.withDb((db) => (action === 'pause' ? pauseKind(db, kind) : resumeKind(db, kind)));
      return c.json({ kind, paused: action === 'pause' });
    });
  }

  app.get('/stats/throughput', describe.throughput, needs('read'), async (c) => {
    const query = parseInput(throughputQuery, c.req.query(), 'query.');
    const minutes = await c.var.api.withDb((db) => countsByMinute(db, { minutes: query.minutes, kind: query.kind }));
    return c.json({
      minutes: minutes.map((m) => ({ minute: m.minute.toISOString(), completed: m.completed, failed: m.failed, dead: m.dead })),
    });
  });

  // A known path with another method: 405 with the methods it has (OPTIONS: 204 and the same
  // Allow header), not a 404 that would say the path does not exist.
  const methodsByPath = new Map<string, Set<string>>();
  for (const route of app.routes) {
    if (route.method === 'ALL') continue;
    const methods = methodsByPath.get(route.path) ?? new Set<string>();
    methods.add(route.method);
    if (route.method === 'GET') methods.add('HEAD');
    methodsByPath.set(route.path, methods);
  }
  for (const [path, methods] of methodsByPath) {
    const allow = [...methods, 'OPTIONS'].join(', ');
    app.all(path, (c) => {
      if (c.req.method === 'OPTIONS') return c.body(null, 204, { Allow: allow });
      c.header('Allow', allow);
      throw new ApiError(405, 'method_not_allowed', `${c.req.method} is not allowed on ${c.req.path}; use ${allow}`);
    });
  }

  app.notFound(() => {
    throw new ApiError(404, 'not_found', 'no such route; see the README for the API');
  });

  app.onError((error, c) => {
    if (error instanceof ApiError) {
      // The rest of an oversized body was never read: a keep-alive client's next request on this
      // connection would be read from the middle of it. Say the connection ends here.
      const headers: Record<string, string> = error.status === 413 ? { Connection: 'close' } : {};
      return c.json({ error: { code: error.code, message: error.message } }, error.status, headers);
    }
    const api = c.get('api');
    api?.onError?.(error, `${c.req.method} ${c.req.routePath}`);
    if (isDatabaseUnavailable(error)) {
      return c.json({ error: { code: 'database_unavailable', message: 'the database is unreachable; nothing was changed, try again shortly' } }, 503);
    }
    return c.json({ error: { code: 'internal', message: 'an unexpected error occurred; nothing was changed if the request was an enqueue' } }, 500);
  });

  return app;
}

/** Passes when the request carries one of `accepted` (unset ones ignored) as a bearer token. */
/** The admin token (API_TOKEN) and the scoped ones (API_TOKENS). */
function adminAndScoped(api: ApiRuntime): ScopedToken[] {
  return [...(api.apiToken ? [{ scope: 'admin' as const, token: api.apiToken }] : []), ...(api.scopedTokens ?? [])];
}

/** The scope of the request's bearer token among `accepted`; 401 when it is none of them. */
async function authenticate(c: Context, accepted: readonly ScopedToken[]): Promise<TokenScope> {
  const misconfigured = (c.get('api') as ApiRuntime | undefined)?.misconfigured;
  if (misconfigured) throw new ApiError(503, 'not_configured', misconfigured);
  if (accepted.length === 0) {
    throw new ApiError(503, 'not_configured', 'no API token is configured: set API_TOKEN (sidecar: environment variable; Worker: `wrangler secret put API_TOKEN`)');
  }
  const match = /^Bearer\s+(\S+)\s*$/i.exec(c.req.header('authorization') ?? '');
  if (!match) throw new ApiError(401, 'unauthorized', 'send the API token as `Authorization: Bearer <token>`');
  // Every configured token is compared, so the time taken does not say which one nearly matched.
  let scope: TokenScope | undefined;
  for (const candidate of accepted) if ((await timingSafeEqual(match[1] as string, candidate.token)) && !scope) scope = candidate.scope;
  if (!scope) throw new ApiError(401, 'unauthorized', 'the API token is wrong');
  return scope;
}

async function readJson(c: Context): Promise<unknown> {
  const type = c.req.header('content-type') ?? '';
  if (!/^application\/([\w.+-]+\+)?json\b/i.test(type)) {
    throw new ApiError(415, 'unsupported_media_type', 'send the body as JSON with `Content-Type: application/json`');
  }
  const text = await c.req.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw new ApiError(400, 'malformed_json', `the body is not valid JSON: ${error instanceof Error ? error.message : 'parse error'}`);
  }
  const problem = findUnstorable(body);
  if (problem) throw new ApiError(400, 'invalid_request', problem);
  return body;
}

/** runNow on the request, or `eager` on the kind. */
function wantsRunNow(api: ApiRuntime, input: JobInput): boolean {
  return input.runNow === true || (input.runNow === undefined && api.registry.get(input.kind)?.eager === true);
}

/** A JSON body, or {} when there is none at all. */
async function readOptionalJson(c: Context): Promise<unknown> {
  const length = c.req.header('content-length');
  if ((length === undefined || length === '0') && !c.req.header('content-type') && !c.req.header('transfer-encoding')) return {};
  return readJson(c);
}

function parseInput<T extends z.ZodType>(schema: T, value: unknown, prefix: string): z.output<T> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const message = result.error.issues
    .slice(0, 5)
    .map((i) => `${prefix}${formatPath(i.path) || '(body)'}: ${i.message}`)
    .join('; ');
  throw new ApiError(400, 'invalid_request', message);
}

function formatPath(path: readonly PropertyKey[]): string {
  return path.reduce<string>((s, p) => (typeof p === 'number' ? `${s}[${p}]` : s ? `${s}.${String(p)}` : String(p)), '');
}

function prepare(registry: JobRegistry, input: JobInput, prefix: string) {
  const runAt = input.runAt !== undefined ? new Date(input.runAt) : input.delaySeconds !== undefined ? new Date(Date.now() + input.delaySeconds * 1000) : undefined;
  try {
    return registry.prepare({ kind: input.kind, payload: input.payload, runAt, maxAttempts: input.maxAttempts, dedupeKey: input.key, priority: input.priority });
  } catch (error) {
    if (error instanceof JobValidationError) throw new ApiError(422, error.code, prefix ? `${prefix.slice(0, -1)}: ${error.message}` : error.message);
    throw error;
  }
}

/** Deeper JSON is refused: validation walks it recursively, and no job payload needs more. */
export const MAX_JSON_DEPTH = 64;

/**
 * The first thing in a parsed body that PostgreSQL cannot store or that validation must not
 * walk: a string or key holding U+0000 (jsonb and text refuse it), a lone UTF-16 surrogate (not
 * Unicode; jsonb refuses it), or nesting past MAX_JSON_DEPTH. Iterative, so any depth is safe.
 */
function findUnstorable(root: unknown): string | null {
  const stack: [value: unknown, path: string, depth: number][] = [[root, '', 0]];
  const where = (path: string) => path || '(body)';
  const badString = (text: string, path: string) =>
    text.includes('\u0000')
      ? `${where(path)}: contains the NUL character (\\u0000), which PostgreSQL cannot store`
      : !text.isWellFormed()
        ? `${where(path)}: contains a lone UTF-16 surrogate (such as \\ud800), which is not valid Unicode and PostgreSQL cannot store`
        : null;
  while (stack.length > 0) {
    const [value, path, depth] = stack.pop()!;
    if (typeof value === 'string') {
      const problem = badString(value, path);
      if (problem) return problem;
    } else if (value !== null && typeof value === 'object') {
      if (depth >= MAX_JSON_DEPTH) return `${where(path)}: nested deeper than ${MAX_JSON_DEPTH} levels`;
      // Pushed in reverse so that the first problem in document order is the one reported.
      if (Array.isArray(value)) {
        for (let i = value.length - 1; i >= 0; i--) stack.push([value[i], `${path}[${i}]`, depth + 1]);
      } else {
        const entries = Object.entries(value);
        for (let i = entries.length - 1; i >= 0; i--) {
          const [key, child] = entries[i]!;
          const childPath = path ? `${path}.${key}` : key;
          const problem = badString(key, childPath);
          if (problem) return problem;
          stack.push([child, childPath, depth + 1]);
        }
      }
    }
  }
  return null;
}

function jobId(c: Context): string {
  const id = c.req.param('id') ?? '';
  if (!isJobId(id)) throw new ApiError(400, 'invalid_id', `job id ${JSON.stringify(id.slice(0, 40))} is not a positive integer`);
  return id;
}

const notFound = (id: string) => new ApiError(404, 'not_found', `job ${id} does not exist (completed jobs are deleted)`);

/** A job as the API shows it; typed by the contract, so the documented shape and this one cannot drift. */
function jobJson(job: Job): JobBody {
  return {
    id: job.id,
    kind: job.kind,
    payload: job.payload as JobBody['payload'], // read from jsonb: JSON by construction
    status: job.status,
    attempts: job.attempts,
    maxAttempts: job.maxAttempts,
    priority: job.priority,
    runAt: job.runAt.toISOString(),
    lockedAt: job.lockedAt?.toISOString() ?? null,
    lockedBy: job.lockedBy,
    lastError: job.lastError,
    createdAt: job.createdAt.toISOString(),
  };
}

/** Connection-level failures (refused, reset, server shutting down), as opposed to bad SQL. */
export function isDatabaseUnavailable(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e && depth < 5; e = (e as { cause?: unknown }).cause, depth++) {
    const code = String((e as { code?: unknown }).code ?? '');
    if (/^(08|57P0[1-3]|53300)/.test(code) || /^E(CONNREFUSED|CONNRESET|PIPE|TIMEDOUT|HOSTUNREACH|NOTFOUND|AI_AGAIN)$/.test(code)) return true;
    const message = String((e as { message?: unknown }).message ?? '');
    if (/Connection terminated|connection .*(closed|lost|timeout)|Network connection lost|ECONNREFUSED|terminating connection/i.test(message)) return true;
  }
  return false;
}

