// The HTTP API in-process (app.request() against a real PostgreSQL): the shared contract
// (test/conformance/http-api-contract.ts, also run against the Worker under wrangler dev), then what
// only an in-process app can show: a drainer without a run-now hook, a keep-alive connection after
// a 413, scoped-token matrices, an app with no token, and an unreachable database.
import { serve } from '@hono/node-server';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createApp, parseScopedTokens, TOKEN_SCOPES } from '../src/http/app.ts';
import { OPEN_ROUTES, SCOPED_ROUTES, allows, requestFor } from './support/scope-matrix.ts';
import { createDefaultRegistry } from '../src/jobs/index.ts';
import { JobRegistry, defineJob } from '../src/jobs/registry.ts';
import { z } from 'zod';
import { CONTRACT_SETTINGS, expectError, httpApiContract } from './conformance/http-api-contract.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { resetQueue } from './support/harness.ts';
import { safeErrorMessage } from '../src/db/url.ts';

const TOKEN = 'test-token-7f3a9c';

httpApiContract('in-process app', async () => {
  const t = await createTestDatabase();
  const errors: string[] = [];
  const app = createApp({
    withDb: (fn) => fn(t.db),
    registry: createDefaultRegistry({ WEBHOOK_ALLOWED_HOSTS: CONTRACT_SETTINGS.webhookAllowedHosts }),
    apiToken: TOKEN,
    maxBodyBytes: CONTRACT_SETTINGS.maxBodyBytes,
    // What the sidecar logs of an error (errorForLog: its message, the database's words).
    onError: (e) => errors.push(safeErrorMessage(e)),
  });
  return {
    request: async (path, init) => app.request(path, init),
    t,
    token: TOKEN,
    loggedErrors: async () => errors.splice(0),
    close: () => t.close(),
  };
});

let t: TestDatabase;
let app: ReturnType<typeof createApp>;
const errors: unknown[] = [];

beforeAll(async () => {
  t = await createTestDatabase();
  app = createApp({
    withDb: (fn) => fn(t.db),
    registry: createDefaultRegistry({ WEBHOOK_ALLOWED_HOSTS: CONTRACT_SETTINGS.webhookAllowedHosts }),
    apiToken: TOKEN,
    maxBodyBytes: CONTRACT_SETTINGS.maxBodyBytes,
    onError: (e) => errors.push(e),
  });
});
afterAll(() => t?.close());
beforeEach(async () => {
  await resetQueue(t);
  errors.length = 0;
});

const auth = { authorization: `Bearer ${TOKEN}` };
const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  app.request(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...auth, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
const jobCount = async () => (await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs'))[0]!.n as number;

describe('only in-process', () => {
  it('accepts runNow on a drainer without a run-now hook (the sidecar: NOTIFY runs it) and stores the job as usual', async () => {
    expect((await post('/jobs', { kind: 'noop', payload: 1, runNow: true })).status).toBe(201);
    const batch = await (await post('/jobs/batch', { jobs: [{ kind: 'noop', payload: 2, runNow: true }] })).json();
    expect(Object.keys(batch)).toEqual(['ids']);
    expect(await jobCount()).toBe(2);
    await expectError(
      await post('/jobs', { kind: 'noop', payload: 1, runNow: 'yes' }),
      400,
      'invalid_request',
      'runNow',
    );
  });

  it('POST /events: a payload a subscribed kind of the app refuses is a 422 naming it, and nothing is sent', async () => {
    const strict = defineJob({
      kind: 'http_strict',
      schema: z.object({ n: z.number() }),
      on: 'http.strict',
      handler: () => {},
    });
    const strictApp = createApp({ withDb: (fn) => fn(t.db), registry: new JobRegistry([strict]), apiToken: TOKEN });
    const send = (payload: unknown) =>
      strictApp.request('/events', {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...auth },
        body: JSON.stringify({ event: 'http.strict', key: 'k', payload }),
      });
    const refused = await send({ n: 'one' });
    expect(refused.status).toBe(422);
    expect(await refused.json()).toMatchObject({
      error: { code: 'invalid_payload', message: expect.stringMatching(/subscriber http_strict: .*n/) },
    });
    expect(await t.query(`SELECT count(*)::int AS n FROM pgdrain.events WHERE event = 'http.strict'`)).toEqual([
      { n: 0 },
    ]);
    expect((await send({ n: 1 })).status).toBe(201);
  });

  it('GET /stats lists the kinds subscribed to events', async () => {
    const { subscribe } = await import('../src/jobs/subscriptions.ts');
    const listener = defineJob({ kind: 'http_listener', schema: z.any(), on: ['a.b', 'c.d'], handler: () => {} });
    await subscribe(t.db, new JobRegistry([listener]));
    const res = await app.request('/stats', { headers: auth });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { subscriptions: { event: string; kind: string; subscribedAt: string }[] };
    expect(body.subscriptions.map(({ event, kind }) => [event, kind])).toEqual([
      ['a.b', 'http_listener'],
      ['c.d', 'http_listener'],
    ]);
    // Unsubscribed over HTTP: gone from the table; a second time is a 404.
    const removed = await app.request('/kinds/http_listener/subscriptions/a.b', { method: 'DELETE', headers: auth });
    expect(removed.status).toBe(200);
    expect(await removed.json()).toEqual({ kind: 'http_listener', event: 'a.b', unsubscribed: true });
    expect(
      (await app.request('/kinds/http_listener/subscriptions/a.b', { method: 'DELETE', headers: auth })).status,
    ).toBe(404);
    expect(await t.query('SELECT event FROM pgdrain.subscriptions')).toEqual([{ event: 'c.d' }]);
    await t.query('DELETE FROM pgdrain.subscriptions');
  });

  it("a 413 closes its connection, so a keep-alive client's next request goes out on a fresh one and succeeds", async () => {
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' });
    await new Promise<void>((resolve) => server.once('listening', () => resolve()));
    const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    try {
      // Node's fetch keeps connections alive by default: the second request would reuse the first's.
      const send = (payload: unknown) =>
        fetch(`${url}/jobs`, {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: JSON.stringify({ kind: 'noop', payload }),
        });
      for (let i = 0; i < 3; i++) {
        const tooLarge = await send('x'.repeat(1_100_000));
        expect(tooLarge.status).toBe(413);
        expect(tooLarge.headers.get('connection')).toBe('close');
        await tooLarge.text();
        const next = await send({ after: i });
        expect(next.status).toBe(201);
      }
      expect(await jobCount()).toBe(3);
    } finally {
      (server as unknown as { closeAllConnections(): void }).closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it('never runs open: with no token configured every route but /healthz answers 503', async () => {
    const open = createApp({ withDb: (fn) => fn(t.db), registry: createDefaultRegistry({}), apiToken: undefined });
    const body = await expectError(await open.request('/stats'), 503, 'not_configured', 'API_TOKEN');
    expect(JSON.stringify(body)).not.toContain(TOKEN);
    expect((await open.request('/healthz')).status).toBe(200);
  });

  it('answers 503 without details when the database is unreachable, and /healthz says so', async () => {
    const secret = 'sup3r-s3cret-pw';
    const pg = await import('pg');
    const { drizzle } = await import('drizzle-orm/node-postgres');
    const pool = new pg.default.Pool({
      connectionString: `postgres://app:${secret}@127.0.0.1:1/nowhere`,
      connectionTimeoutMillis: 2000,
    });
    pool.on('error', () => {});
    const down = createApp({
      withDb: (fn) => fn(drizzle({ client: pool }) as never),
      registry: createDefaultRegistry({}),
      apiToken: TOKEN,
    });
    const health = await down.request('/healthz');
    expect(health.status).toBe(503);
    const res = await down.request('/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...auth },
      body: JSON.stringify({ kind: 'noop', payload: 1 }),
    });
    const body = await expectError(res, 503, 'database_unavailable');
    const text = JSON.stringify(body) + JSON.stringify(await health.json());
    expect(text).not.toContain(secret);
    expect(text).not.toContain('127.0.0.1');
    expect(text).not.toMatch(/INSERT|SELECT|at \w+ \(/);
    await pool.end();
  });
});

describe("the database's failures, by class", () => {
  /** An app on a pool of `url`; closes the pool after `use`. */
  async function appOn(url: string, use: (app: ReturnType<typeof createApp>) => Promise<void>) {
    const pg = await import('pg');
    const { drizzle } = await import('drizzle-orm/node-postgres');
    const pool = new pg.default.Pool({ connectionString: url, connectionTimeoutMillis: 5000 });
    pool.on('error', () => {});
    try {
      await use(
        createApp({
          withDb: (fn) => fn(drizzle({ client: pool }) as never),
          registry: createDefaultRegistry({}),
          apiToken: TOKEN,
        }),
      );
    } finally {
      await pool.end();
    }
  }
  const enqueue = (on: ReturnType<typeof createApp>) =>
    on.request('/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...auth },
      body: JSON.stringify({ kind: 'noop', payload: 1 }),
    });

  it('a connection limit is 503 database_busy, not "unreachable"; a read-only database 503 database_read_only', async () => {
    const role = `limited_${Date.now()}`;
    await t.query(`CREATE ROLE ${role} LOGIN PASSWORD 'pw' CONNECTION LIMIT 0`);
    // Straight to the server, whose words these are (a pooler in front answers in its own).
    const limited = new URL(t.directUrl);
    limited.username = role;
    limited.password = 'pw';
    try {
      await appOn(limited.toString(), async (busy) => {
        const body = await expectError(await enqueue(busy), 503, 'database_busy', 'too many clients');
        expect(JSON.stringify(body)).not.toMatch(/INSERT|pw|limited_/);
      });
    } finally {
      await t.query(`DROP ROLE ${role}`);
    }
    const readOnly = new URL(t.directUrl);
    readOnly.searchParams.set('options', '-c default_transaction_read_only=on');
    await appOn(readOnly.toString(), async (standby) => {
      await expectError(await enqueue(standby), 503, 'database_read_only', 'read-only');
    });
    expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
  });
});

describe('scoped tokens', () => {
  const tokens = {
    enqueue: 'enqueue-token-0123456789',
    read: 'read-token-0123456789ab',
    admin: 'admin-token-0123456789a',
  } as const;
  const scoped = createApp({
    withDb: (fn) => fn(t.db),
    registry: createDefaultRegistry({}),
    apiToken: TOKEN,
    scopedTokens: parseScopedTokens(`enqueue:${tokens.enqueue}, read:${tokens.read},admin:${tokens.admin}`),
  });

  it('every protected route is in the scope matrix', () => {
    const registered = new Set(scoped.routes.filter((r) => r.method !== 'ALL').map((r) => `${r.method} ${r.path}`));
    const covered = new Set(SCOPED_ROUTES.map((r) => `${r.method} ${r.pattern}`));
    expect([...registered].filter((r) => !covered.has(r) && !OPEN_ROUTES.includes(r.split(' ')[1]!)).sort()).toEqual(
      [],
    );
  });

  for (const scope of TOKEN_SCOPES) {
    it(`${scope === 'read' ? 'a' : 'an'} ${scope} token may use exactly its routes: the others answer 403 in the error shape and change nothing`, async () => {
      for (const route of SCOPED_ROUTES) {
        const before = await jobCount();
        const res = await scoped.request(route.path, requestFor(route, tokens[scope]));
        if (allows(scope, route.needs)) {
          expect([route.path, res.status], `${route.method} ${route.path}`).not.toEqual([route.path, 403]);
          expect(res.status, `${route.method} ${route.path}`).toBeLessThan(500);
          if (res.status < 300 && route.path !== '/metrics') expect(res.headers.get('x-pgdrain-scope')).toBe(scope);
        } else {
          await expectError(res, 403, 'forbidden', `this token's scope is ${scope}`);
          expect(await jobCount(), `${route.method} ${route.path}`).toBe(before);
        }
      }
    });
  }

  it('the full API token is admin; a wrong token is 401; API_TOKENS entries are checked', async () => {
    expect((await scoped.request('/jobs/retry-dead', requestFor(SCOPED_ROUTES[6]!, TOKEN))).status).toBe(200);
    await expectError(
      await scoped.request('/stats', { headers: { authorization: 'Bearer read-token-0123456789aX' } }),
      401,
      'unauthorized',
    );
    expect(() => parseScopedTokens('reader:abcdefghijklmnopq')).toThrow(/API_TOKENS entry 1: write scope:token/);
    expect(() => parseScopedTokens('read:abcdefghijklmnopq, admin:short')).toThrow(
      /API_TOKENS entry 2: the token is shorter than 16 characters/,
    );
    expect(() => parseScopedTokens('read:abcdefghijklmnopq, admin:short')).not.toThrow(/short$/);
  });
});
