// The deployed entry (the default export of src/worker/index.ts) through workerd's own fetch.
import { SELF, createExecutionContext, createScheduledController, env, waitOnExecutionContext } from 'cloudflare:test';
import { afterAll, beforeAll, expect, it } from 'vitest';
import worker from '../../src/worker/index.ts';
import type { Env } from '../../src/worker/create-worker.ts';
import { type Harness, resetQueue } from '../support/harness.ts';
import { createNeonHarness } from './neon-harness.ts';
import { TOKEN_SCOPES } from '../../src/http/app.ts';
import { SCOPED_ROUTES, allows, requestFor } from '../support/scope-matrix.ts';

let h: Harness;
beforeAll(async () => {
  h = await createNeonHarness(env.DATABASE_URL);
  await resetQueue(h);
});
afterAll(() => h?.close());

const auth = { authorization: `Bearer ${env.API_TOKEN}`, 'content-type': 'application/json' };

it('serves /healthz without a token and refuses the API without one', async () => {
  const health = await SELF.fetch('http://worker/healthz');
  expect(health.status).toBe(200);
  expect(await health.json()).toEqual({ ok: true });
  const denied = await SELF.fetch('http://worker/stats');
  expect(denied.status).toBe(401);
  expect((await denied.json()).error.code).toBe('unauthorized');
});

it('enqueues, reads, refuses bad input, and drains a noop job on the cron', async () => {
  const res = await SELF.fetch('http://worker/jobs', {
    method: 'POST',
    headers: auth,
    body: JSON.stringify({ kind: 'noop', payload: { via: 'worker' } }),
  });
  expect(res.status).toBe(201);
  const { id } = await res.json();
  const read = await SELF.fetch(`http://worker/jobs/${id}`, { headers: auth });
  expect(await read.json()).toMatchObject({ id, kind: 'noop', status: 'pending', payload: { via: 'worker' } });

  const bad = await SELF.fetch('http://worker/jobs', {
    method: 'POST',
    headers: auth,
    body: JSON.stringify({ kind: 'webhook', payload: { url: 'http://10.0.0.1/' } }),
  });
  expect(bad.status).toBe(422);
  const batch = await SELF.fetch('http://worker/jobs/batch', { method: 'POST', headers: auth, body: '{"jobs": [' });
  expect(batch.status).toBe(400);
  // The inputs that once gave 500s, a body over the limit, and a known route with another method.
  for (const body of [
    `{"kind":"noop","payload":${'['.repeat(5000)}${']'.repeat(5000)}}`,
    '{"kind":"noop","payload":"\\ud800"}',
    '{"kind":"noop","payload":{},"runAt":"0000-01-01T00:00:00Z"}',
  ]) {
    const refused = await SELF.fetch('http://worker/jobs', { method: 'POST', headers: auth, body });
    expect(refused.status).toBe(400);
    expect((await refused.json()).error.code).toBe('invalid_request');
  }
  const tooLarge = await SELF.fetch('http://worker/jobs', {
    method: 'POST',
    headers: auth,
    body: JSON.stringify({ kind: 'noop', payload: 'x'.repeat(1_100_000) }),
  });
  expect(tooLarge.status).toBe(413);
  expect((await tooLarge.json()).error.code).toBe('body_too_large');
  const put = await SELF.fetch('http://worker/jobs', { method: 'PUT', headers: auth });
  expect([put.status, put.headers.get('allow')]).toEqual([405, 'POST, GET, HEAD, OPTIONS']);
  expect(await h.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 1 }]);

  const ctx = createExecutionContext();
  await worker.scheduled(createScheduledController({ cron: '*/5 * * * *' }), env as unknown as Env, ctx);
  await waitOnExecutionContext(ctx);
  expect((await SELF.fetch(`http://worker/jobs/${id}`, { headers: auth })).status).toBe(404);
  const stats = await (await SELF.fetch('http://worker/stats', { headers: auth })).json();
  expect(stats).toEqual({ kinds: {}, oldestReadySeconds: null, subscriptions: [] });
});

it('serves the dashboard, and counts what the cron ran in /stats/throughput and /metrics', async () => {
  await resetQueue(h);
  const page = await SELF.fetch('http://worker/');
  expect(page.status).toBe(200);
  expect(page.headers.get('content-security-policy')).toContain("script-src 'self'");
  expect(await page.text()).toContain('<script src="/dashboard/script.js" defer></script>');
  const script = await SELF.fetch('http://worker/dashboard/script.js');
  expect(script.headers.get('content-type')).toBe('text/javascript; charset=utf-8');
  expect(await script.text()).toContain('sessionStorage.getItem(TOKEN_KEY)');

  const batch = await SELF.fetch('http://worker/jobs/batch', {
    method: 'POST',
    headers: auth,
    body: JSON.stringify({ jobs: Array.from({ length: 7 }, (_, i) => ({ kind: 'noop', payload: { i } })) }),
  });
  expect(batch.status).toBe(201);
  await h.query(
    `INSERT INTO pgdrain.job_counts (minute, kind, completed) VALUES (date_trunc('minute', now()) - interval '3 days', 'noop', 100)`,
  );
  const ctx = createExecutionContext();
  await worker.scheduled(createScheduledController({ cron: '* * * * *' }), env as unknown as Env, ctx);
  await waitOnExecutionContext(ctx);
  // The cron folded the three-day-old minute into the totals.
  expect(await h.query(`SELECT kind, completed::int FROM pgdrain.job_totals`)).toEqual([
    { kind: 'noop', completed: 100 },
  ]);

  const [counted] = await h.query(
    `SELECT sum(completed)::int AS completed FROM pgdrain.job_counts WHERE kind = 'noop' AND minute > now() - interval '1 hour'`,
  );
  expect(counted).toEqual({ completed: 7 });
  const { minutes } = await (await SELF.fetch('http://worker/stats/throughput?minutes=5', { headers: auth })).json();
  expect(minutes.reduce((s: number, m: { completed: number }) => s + m.completed, 0)).toBe(7);
  const metrics = await SELF.fetch('http://worker/metrics', { headers: auth });
  expect(metrics.status).toBe(200);
  const text = await metrics.text();
  expect(text).toContain('pgdrain_jobs_completed_total{kind="noop"} 107\n');
  expect(text).toContain('pgdrain_jobs{kind="noop",status="pending"} 0\n');
});

it('scoped tokens from the API_TOKENS secret: each scope on each route, allowed or 403', async () => {
  const tokens = {
    enqueue: 'worker-enqueue-token-0123',
    read: 'worker-read-token-01234567',
    admin: 'worker-admin-token-0123456',
  } as const;
  for (const scope of TOKEN_SCOPES) {
    for (const route of SCOPED_ROUTES) {
      const res = await SELF.fetch(`http://worker${route.path}`, requestFor(route, tokens[scope]));
      const label = `${scope} ${route.method} ${route.path}`;
      if (allows(scope, route.needs)) {
        expect(res.status, label).not.toBe(403);
        expect(res.status, label).toBeLessThan(500);
      } else {
        expect(res.status, label).toBe(403);
        expect((await res.json()).error.code, label).toBe('forbidden');
      }
    }
  }
});

it('an unusable setting makes the API answer 503 naming it, and the cron invocation fail with the same message', async () => {
  const misconfigured = { ...env, BATCH_SIZE: '5000' } as unknown as Env;
  const rows = () => h.query('SELECT id, status, attempts FROM pgdrain.jobs ORDER BY id');
  const before = await rows();
  const ctx = createExecutionContext();
  const res = await worker.fetch(new Request('http://worker/stats', { headers: auth }), misconfigured, ctx as never);
  await waitOnExecutionContext(ctx);
  expect(res.status).toBe(503);
  expect(await res.json()).toEqual({
    error: { code: 'not_configured', message: "the Worker's invalid settings: BATCH_SIZE: must be at most 1000" },
  });
  // The page and the health check need no settings of the queue's; they still answer.
  expect(
    (await worker.fetch(new Request('http://worker/healthz'), misconfigured, createExecutionContext() as never)).status,
  ).toBe(200);
  await expect(
    worker.scheduled(createScheduledController({ cron: '* * * * *' }), misconfigured, createExecutionContext()),
  ).rejects.toThrow('invalid settings: BATCH_SIZE: must be at most 1000');
  // Nothing was enqueued or claimed by either.
  expect(await rows()).toEqual(before);
});
