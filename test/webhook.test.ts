// The webhook kind against a real HTTP server on loopback, enqueued through the API and drained
// by the drain loop on a real PostgreSQL.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { drain } from '../src/drain/index.ts';
import { createApp } from '../src/http/app.ts';
import { JobRegistry, createWebhookJob, isHostAllowed, noopJob, parseSigningSecrets } from '../src/jobs/index.ts';
import { createSigner } from '../src/jobs/webhook-signature.ts';
import { enqueue } from '../src/queries/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';

let t: TestDatabase;
let server: http.Server;
let base: string;
const hits: { path: string; method: string; body: string; headers: http.IncomingHttpHeaders }[] = [];
const flakyCount = new Map<string, number>();

const registry = new JobRegistry([noopJob, createWebhookJob({ allowedHosts: ['127.0.0.1'], timeoutMs: 300 })]);
let app: ReturnType<typeof createApp>;

beforeAll(async () => {
  t = await createTestDatabase();
  server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => (body += c));
    req.on('end', () => {
      const path = req.url ?? '/';
      hits.push({ path, method: req.method ?? '', body, headers: req.headers });
      if (path === '/ok') return void res.writeHead(204).end();
      if (path.startsWith('/flaky')) {
        const n = (flakyCount.get(path) ?? 0) + 1;
        flakyCount.set(path, n);
        return void res.writeHead(n === 1 ? 500 : 200).end('done');
      }
      if (path === '/gone') return void res.writeHead(404).end('no such hook');
      if (path === '/busy') return void res.writeHead(429, { 'retry-after': '120' }).end();
      if (path === '/redirect') return void res.writeHead(302, { location: 'http://169.254.169.254/' }).end();
      if (path === '/slow') return; // never answers
      res.writeHead(500).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  app = createApp({ withDb: (fn) => fn(t.db), registry, apiToken: 'tok' });
});
afterAll(async () => {
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
  await t?.close();
});
beforeEach(async () => {
  await t.query('TRUNCATE pgdrain.jobs');
  hits.length = 0;
});

async function enqueueHook(payload: unknown): Promise<string> {
  const res = await app.request('/jobs', {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer tok' },
    body: JSON.stringify({ kind: 'webhook', payload }),
  });
  expect(res.status).toBe(201);
  return (await res.json()).id;
}
const row = async (id: string) => (await t.query('SELECT status, attempts, last_error FROM pgdrain.jobs WHERE id = $1', [id]))[0];
const dueNow = () => t.query(`UPDATE pgdrain.jobs SET run_at = now() WHERE status = 'pending'`);

it('a 2xx completes the job and the receiver gets the JSON body and headers', async () => {
  const id = await enqueueHook({ url: `${base}/ok`, method: 'PUT', headers: { 'X-Signature': 'abc' }, body: { order: 7 } });
  const report = await drain(t.db, registry, { workerId: 'w' });
  expect(report).toMatchObject({ claimed: 1, completed: 1 });
  expect(await row(id)).toBeUndefined();
  expect(hits).toHaveLength(1);
  expect(hits[0]).toMatchObject({ path: '/ok', method: 'PUT', body: '{"order":7}' });
  expect(hits[0]!.headers).toMatchObject({ 'content-type': 'application/json', 'x-signature': 'abc', 'x-pgdrain-job-id': id, 'x-pgdrain-attempt': '1' });
});

it('a 500 is retried with backoff, and the next attempt that gets a 200 completes', async () => {
  const id = await enqueueHook({ url: `${base}/flaky-a` });
  expect(await drain(t.db, registry, { workerId: 'w' })).toMatchObject({ failed: 1 });
  expect(await row(id)).toEqual({ status: 'pending', attempts: 1, last_error: `webhook POST ${base.slice(7)} answered HTTP 500` });
  await dueNow();
  expect(await drain(t.db, registry, { workerId: 'w' })).toMatchObject({ completed: 1 });
  expect(await row(id)).toBeUndefined();
  expect(hits.map((h) => h.path)).toEqual(['/flaky-a', '/flaky-a']);
});

it('a 404 is permanent: dead at once with the status in last_error', async () => {
  const id = await enqueueHook({ url: `${base}/gone` });
  expect(await drain(t.db, registry, { workerId: 'w' })).toMatchObject({ dead: 1 });
  expect(await row(id)).toEqual({ status: 'dead', attempts: 1, last_error: expect.stringContaining('HTTP 404') });
});

it('a redirect is not followed and is permanent', async () => {
  const id = await enqueueHook({ url: `${base}/redirect` });
  await drain(t.db, registry, { workerId: 'w' });
  expect(await row(id)).toEqual({ status: 'dead', attempts: 1, last_error: expect.stringContaining('redirects are not followed') });
  expect(hits.map((h) => h.path)).toEqual(['/redirect']);
});

it('a 429 honours Retry-After', async () => {
  const id = await enqueueHook({ url: `${base}/busy` });
  await drain(t.db, registry, { workerId: 'w' });
  const [r] = await t.query(`SELECT status, extract(epoch from run_at - now())::int AS wait FROM pgdrain.jobs WHERE id = $1`, [id]);
  expect(r!.status).toBe('pending');
  expect(r!.wait).toBeGreaterThanOrEqual(115);
});

it('a receiver that does not answer in time is a retryable timeout', async () => {
  const id = await enqueueHook({ url: `${base}/slow` });
  const started = Date.now();
  await drain(t.db, registry, { workerId: 'w' });
  expect(Date.now() - started).toBeLessThan(2_000);
  expect(await row(id)).toEqual({ status: 'pending', attempts: 1, last_error: 'TimeoutError: handler timed out after 300 ms' });
});

it('a connection refused is a retryable network error', async () => {
  const closed = http.createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const port = (closed.address() as AddressInfo).port;
  await new Promise((r) => closed.close(r));
  const id = await enqueueHook({ url: `http://127.0.0.1:${port}/x` });
  await drain(t.db, registry, { workerId: 'w' });
  expect(await row(id)).toEqual({ status: 'pending', attempts: 1, last_error: expect.stringContaining('webhook request failed') });
});

it('a host taken off the allow-list after enqueue is refused at delivery, without a request', async () => {
  const id = await enqueueHook({ url: `${base}/ok` });
  const stricter = new JobRegistry([createWebhookJob({ allowedHosts: ['hooks.example.com'] })]);
  await drain(t.db, stricter, { workerId: 'w' });
  expect(await row(id)).toEqual({ status: 'dead', attempts: 1, last_error: expect.stringContaining('not in WEBHOOK_ALLOWED_HOSTS') });
  expect(hits).toHaveLength(0);
});

it('host patterns: exact names and *.domain subdomains only', () => {
  const allowed = ['hooks.example.com', '*.example.org'];
  expect(isHostAllowed('hooks.example.com', allowed)).toBe(true);
  expect(isHostAllowed('HOOKS.example.com.', allowed)).toBe(true);
  expect(isHostAllowed('a.b.example.org', allowed)).toBe(true);
  expect(isHostAllowed('example.org', allowed)).toBe(false);
  expect(isHostAllowed('evilexample.org', allowed)).toBe(false);
  expect(isHostAllowed('hooks.example.com.evil.net', allowed)).toBe(false);
  expect(isHostAllowed('127.0.0.1', [])).toBe(false);
});

describe('signed deliveries (Standard Webhooks), checked by the published verifier', () => {
  // Two secrets at once, as during a rotation: the receiver may know either.
  const oldSecret = `whsec_${Buffer.from('a'.repeat(32)).toString('base64')}`;
  const newSecret = `whsec_${Buffer.from('b'.repeat(32)).toString('base64')}`;
  const signed = new JobRegistry([createWebhookJob({ allowedHosts: ['127.0.0.1'], timeoutMs: 300, signingKeys: parseSigningSecrets(`${oldSecret} ${newSecret}`) })]);
  const headersOf = (hit: (typeof hits)[number]) => Object.fromEntries(['webhook-id', 'webhook-timestamp', 'webhook-signature'].map((h) => [h, String(hit.headers[h])]));

  it('every delivery carries an id that is the same for each attempt of a job, and a signature each secret verifies', async () => {
    const { id } = await enqueue(t.db, { kind: 'webhook', payload: { url: `${base}/flaky-signed`, body: { order: 7, note: 'ünïcode ✓' } } });
    expect(await drain(t.db, signed, { workerId: 'w' })).toMatchObject({ failed: 1 });
    await dueNow();
    expect(await drain(t.db, signed, { workerId: 'w' })).toMatchObject({ completed: 1 });
    expect(hits).toHaveLength(2);
    for (const secret of [oldSecret, newSecret]) {
      for (const hit of hits) expect(new Webhook(secret).verify(hit.body, headersOf(hit))).toEqual({ order: 7, note: 'ünïcode ✓' });
    }
    // A retry is the same message: a receiver deduplicates on the id.
    expect(hits.map((h) => h.headers['webhook-id'])).toEqual([`msg_${id}`, `msg_${id}`]);
    expect(String(hits[0]!.headers['webhook-signature']).split(' ')).toHaveLength(2);
  });

  it('a tampered body, a signature from another secret and an old timestamp are refused by the verifier', async () => {
    await enqueue(t.db, { kind: 'webhook', payload: { url: `${base}/ok`, body: { amount: 10 } } });
    await drain(t.db, signed, { workerId: 'w' });
    const [hit] = hits;
    const verifier = new Webhook(newSecret);
    expect(() => verifier.verify(hit!.body.replace('10', '1000'), headersOf(hit!))).toThrow(WebhookVerificationError);
    expect(() => new Webhook(`whsec_${Buffer.from('c'.repeat(32)).toString('base64')}`).verify(hit!.body, headersOf(hit!))).toThrow(WebhookVerificationError);
    // The same signature replayed ten minutes later: the verifier's tolerance is five.
    const replayed = await createSigner(parseSigningSecrets(newSecret))!.headers(String(hit!.headers['webhook-id']), hit!.body, new Date(Date.now() - 10 * 60_000));
    expect(() => verifier.verify(hit!.body, replayed)).toThrow(/timestamp/i);
  });

  it('WEBHOOK_SIGNING_SECRET is refused when it is not a whsec_ key, naming the entry and never its value', () => {
    expect(() => parseSigningSecrets(`${oldSecret}, sk_live_123`)).toThrow('secret 2 of 2 does not start with whsec_');
    expect(() => parseSigningSecrets('whsec_!!!')).toThrow('secret 1 of 1 is not base64 after whsec_');
    expect(() => parseSigningSecrets(`whsec_${Buffer.from('short').toString('base64')}`)).toThrow('secret 1 of 1 is 5 bytes; use 24 to 64');
    expect(parseSigningSecrets(undefined)).toEqual([]);
  });

  it('a payload cannot set the signature headers itself', async () => {
    const res = await app.request('/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer tok' },
      body: JSON.stringify({ kind: 'webhook', payload: { url: `${base}/ok`, headers: { 'Webhook-Signature': 'v1,forged' } } }),
    });
    expect(res.status).toBe(422);
    expect((await res.json()).error.message).toMatch(/webhook-signature are set by pgdrain/);
    expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
  });
});
