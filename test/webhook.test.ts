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
import { isSpecialAddress, parseIp } from '../src/jobs/webhook-targets.ts';
import { enqueue } from '../src/queries/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { resetQueue } from './support/harness.ts';

let t: TestDatabase;
let server: http.Server;
let base: string;
const hits: { path: string; method: string; body: string; headers: http.IncomingHttpHeaders }[] = [];
const flakyCount = new Map<string, number>();

// The receiver listens on a port of its own: the allow-list names it (80 and 443 need no name).
let registry: JobRegistry;
let app: ReturnType<typeof createApp>;
let port: number;

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
  port = (server.address() as AddressInfo).port;
  base = `http://127.0.0.1:${port}`;
  registry = new JobRegistry([noopJob, createWebhookJob({ allowedHosts: [`127.0.0.1:${port}`], timeoutMs: 300 })]);
  app = createApp({ withDb: (fn) => fn(t.db), registry, apiToken: 'tok' });
});
afterAll(async () => {
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
  await t?.close();
});
beforeEach(async () => {
  await resetQueue(t);
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
const row = async (id: string) =>
  (await t.query('SELECT status, attempts, last_error FROM pgdrain.jobs WHERE id = $1', [id]))[0];
const dueNow = () => t.query(`UPDATE pgdrain.jobs SET run_at = now() WHERE status = 'pending'`);

it('a 2xx completes the job and the receiver gets the JSON body and headers', async () => {
  const id = await enqueueHook({
    url: `${base}/ok`,
    method: 'PUT',
    headers: { 'X-Signature': 'abc' },
    body: { order: 7 },
  });
  const report = await drain(t.db, registry, { workerId: 'w' });
  expect(report).toMatchObject({ claimed: 1, completed: 1 });
  expect(await row(id)).toBeUndefined();
  expect(hits).toHaveLength(1);
  expect(hits[0]).toMatchObject({ path: '/ok', method: 'PUT', body: '{"order":7}' });
  expect(hits[0]!.headers).toMatchObject({
    'content-type': 'application/json',
    'x-signature': 'abc',
    'x-pgdrain-job-id': id,
    'x-pgdrain-attempt': '1',
  });
});

it('a 500 is retried with backoff, and the next attempt that gets a 200 completes', async () => {
  const id = await enqueueHook({ url: `${base}/flaky-a` });
  expect(await drain(t.db, registry, { workerId: 'w' })).toMatchObject({ failed: 1 });
  expect(await row(id)).toEqual({
    status: 'pending',
    attempts: 1,
    last_error: `webhook POST ${base.slice(7)} answered HTTP 500`,
  });
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
  expect(await row(id)).toEqual({
    status: 'dead',
    attempts: 1,
    last_error: expect.stringContaining('redirects are not followed'),
  });
  expect(hits.map((h) => h.path)).toEqual(['/redirect']);
});

it('a 429 honours Retry-After', async () => {
  const id = await enqueueHook({ url: `${base}/busy` });
  await drain(t.db, registry, { workerId: 'w' });
  const [r] = await t.query(
    `SELECT status, extract(epoch from run_at - now())::int AS wait FROM pgdrain.jobs WHERE id = $1`,
    [id],
  );
  expect(r!.status).toBe('pending');
  expect(r!.wait).toBeGreaterThanOrEqual(115);
});

it('a receiver that does not answer in time is a retryable timeout', async () => {
  const id = await enqueueHook({ url: `${base}/slow` });
  const started = Date.now();
  await drain(t.db, registry, { workerId: 'w' });
  expect(Date.now() - started).toBeLessThan(2_000);
  expect(await row(id)).toEqual({
    status: 'pending',
    attempts: 1,
    last_error: 'TimeoutError: handler timed out after 300 ms',
  });
});

it('a connection refused is a retryable network error', async () => {
  const closed = http.createServer();
  await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
  const closedPort = (closed.address() as AddressInfo).port;
  await new Promise((r) => closed.close(r));
  const { id } = await enqueue(t.db, { kind: 'webhook', payload: { url: `http://127.0.0.1:${closedPort}/x` } });
  await drain(t.db, new JobRegistry([createWebhookJob({ allowedHosts: [`127.0.0.1:${closedPort}`] })]), {
    workerId: 'w',
  });
  expect(await row(id)).toEqual({
    status: 'pending',
    attempts: 1,
    last_error: expect.stringContaining('webhook request failed'),
  });
});

it('a host taken off the allow-list after enqueue is refused at delivery, without a request', async () => {
  const id = await enqueueHook({ url: `${base}/ok` });
  const stricter = new JobRegistry([createWebhookJob({ allowedHosts: ['hooks.example.com'] })]);
  await drain(t.db, stricter, { workerId: 'w' });
  expect(await row(id)).toEqual({
    status: 'dead',
    attempts: 1,
    last_error: expect.stringContaining('not in WEBHOOK_ALLOWED_HOSTS'),
  });
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

describe('where a delivery may go: the allow-list after DNS, the address checked is the one dialled', () => {
  /** A resolver the test controls: each lookup of a name takes its next answer (the last repeats). */
  const resolverOf = (answers: Record<string, string[]>) => {
    const lookups: string[] = [];
    const resolve = async (host: string) => {
      const list = answers[host];
      if (!list) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
      const n = lookups.filter((h) => h === host).length;
      lookups.push(host);
      const address = list[Math.min(n, list.length - 1)]!;
      return [{ address, family: address.includes(':') ? 6 : 4 }];
    };
    return { resolve, lookups };
  };
  const deliverWith = async (allowedHosts: string[], answers: Record<string, string[]>, url: string) => {
    const { resolve, lookups } = resolverOf(answers);
    const { id } = await enqueue(t.db, { kind: 'webhook', payload: { url } });
    await drain(t.db, new JobRegistry([createWebhookJob({ allowedHosts, timeoutMs: 1_000, resolve })]), {
      workerId: 'w',
    });
    return { id, lookups, job: await row(id) };
  };

  it('a name in the list that resolves to loopback is refused, saying not allowed and nothing else; naming the address lets it through', async () => {
    const refused = await deliverWith([`vm:${port}`], { vm: ['127.0.0.1'] }, `http://vm:${port}/ok`);
    expect(refused.job).toEqual({
      status: 'dead',
      attempts: 1,
      last_error:
        'PermanentJobError: host vm resolved to an address that is not allowed (loopback, private, link-local, unique-local, multicast, reserved and unspecified addresses are refused unless WEBHOOK_ALLOWED_HOSTS names them)',
    });
    expect(hits).toHaveLength(0);
    const allowed = await deliverWith(
      [`vm:${port}`, `127.0.0.1:${port}`],
      { vm: ['127.0.0.1'] },
      `http://vm:${port}/ok`,
    );
    expect(allowed.job).toBeUndefined();
    expect(hits.map((h) => [h.path, h.headers.host])).toEqual([['/ok', `vm:${port}`]]);
    // A range names every address in it.
    expect(
      (await deliverWith([`vm:${port}`, '127.0.0.0/8'], { vm: ['127.0.0.1'] }, `http://vm:${port}/ok`)).job,
    ).toBeUndefined();
  });

  it('a name that resolves to an allowed address first and to loopback next (DNS rebinding) is dialled at the first: resolved once, checked, dialled', async () => {
    // A second receiver on another loopback address, same port: the allowed one.
    const other = http.createServer((req, res) => {
      hits.push({ path: `other${req.url}`, method: req.method ?? '', body: '', headers: req.headers });
      res.writeHead(204).end();
    });
    await new Promise<void>((r) => other.listen(port, '127.0.0.2', r));
    try {
      const { job, lookups } = await deliverWith(
        [`rebind.test:${port}`, `127.0.0.2:${port}`],
        { 'rebind.test': ['127.0.0.2', '127.0.0.1'] },
        `http://rebind.test:${port}/ok`,
      );
      expect(job).toBeUndefined();
      expect(lookups).toEqual(['rebind.test']);
      expect(hits.map((h) => h.path)).toEqual(['other/ok']);
    } finally {
      await new Promise((r) => other.close(r));
    }
  });

  it('ports 80 and 443 only, unless an entry names the port; an address literal only when the list names it', async () => {
    const check = (allowedHosts: string[], url: string) =>
      createWebhookJob({ allowedHosts }).schema.safeParse({ url }).error?.issues[0]?.message ?? 'ok';
    expect(check(['hooks.example.com'], 'https://hooks.example.com/a')).toBe('ok');
    expect(check(['hooks.example.com'], 'http://hooks.example.com:80/a')).toBe('ok');
    expect(check(['hooks.example.com'], 'https://hooks.example.com:25901/a')).toBe(
      'port 25901 of host hooks.example.com is not allowed: WEBHOOK_ALLOWED_HOSTS allows ports 80 and 443 unless an entry names its port (hooks.example.com:25901)',
    );
    expect(check(['hooks.example.com:8443'], 'https://hooks.example.com:8443/a')).toBe('ok');
    expect(check(['hooks.example.com:8443'], 'https://hooks.example.com/a')).toMatch(
      /^port 443 of host hooks.example.com is not allowed/,
    );
    expect(check(['hooks.example.com'], 'http://10.0.0.5/')).toBe(
      'host 10.0.0.5 is not allowed: not in WEBHOOK_ALLOWED_HOSTS',
    );
    expect(check(['10.0.0.0/8'], 'http://10.0.0.5/')).toBe('ok');
    expect(check(['10.0.0.0/8'], 'http://10.0.0.5:8080/')).toMatch(/^port 8080 of host 10.0.0.5 is not allowed/);
    expect(check(['127.0.0.1:9000'], 'http://127.0.0.1:9000/')).toBe('ok');
    // What the URL parser makes of other spellings is what is checked.
    expect(check(['hooks.example.com'], 'http://0x7f.1/')).toBe(
      'host 127.0.0.1 is not allowed: not in WEBHOOK_ALLOWED_HOSTS',
    );
    expect(check(['hooks.example.com'], 'http://2130706433/')).toBe(
      'host 127.0.0.1 is not allowed: not in WEBHOOK_ALLOWED_HOSTS',
    );
    expect(check(['[::1]:9000'], 'http://[::1]:9000/')).toBe('ok');
    expect(check(['127.0.0.1:9000'], 'http://[::ffff:127.0.0.1]:9000/')).toBe('ok');
    expect(check(['hooks.example.com'], 'http://[::ffff:169.254.169.254]/')).toBe(
      'host ::ffff:a9fe:a9fe is not allowed: not in WEBHOOK_ALLOWED_HOSTS',
    );
  });

  it('an entry that is not a host, pattern, address or range is refused when the list is read', () => {
    expect(() => createWebhookJob({ allowedHosts: ['hooks.example.com:99999'] })).toThrow(
      'WEBHOOK_ALLOWED_HOSTS: entry "hooks.example.com:99999" has a port outside 1-65535',
    );
    expect(() => createWebhookJob({ allowedHosts: ['10.0.0.0/33'] })).toThrow('has a prefix longer than 32');
    expect(() => createWebhookJob({ allowedHosts: ['http://x'] })).toThrow(
      'WEBHOOK_ALLOWED_HOSTS: entry "http://x" has a port outside 1-65535',
    );
    expect(() => createWebhookJob({ allowedHosts: ['hooks/24'] })).toThrow('is not an address range');
    expect(() => createWebhookJob({ allowedHosts: ['hooks example.com'] })).toThrow(
      'is not a host name, *.domain pattern, address or range',
    );
  });

  it('the special ranges: loopback, private, shared, link-local, unique-local, multicast, reserved, unspecified, in both families', () => {
    const special = (text: string) => isSpecialAddress(parseIp(text)!);
    for (const address of [
      '127.0.0.1',
      '10.1.2.3',
      '172.31.255.255',
      '192.168.1.1',
      '100.64.0.1',
      '169.254.169.254',
      '0.0.0.0',
      '224.0.0.1',
      '255.255.255.255',
      '::',
      '::1',
      '::ffff:127.0.0.1',
      '::ffff:7f00:1',
      'fe80::1',
      'fd00::1',
      'fc00::1',
      'ff02::1',
      '64:ff9b::7f00:1',
      '2002:7f00:1::',
      '::127.0.0.1',
    ]) {
      expect([address, special(address)]).toEqual([address, true]);
    }
    for (const address of [
      '93.184.216.34',
      '8.8.8.8',
      '172.32.0.1',
      '192.169.0.1',
      '2606:4700:4700::1111',
      '2a00:1450:4001::200e',
    ]) {
      expect([address, special(address)]).toEqual([address, false]);
    }
    expect(parseIp('fe80::1%eth0')).toBeNull();
    expect(parseIp('1.2.3')).toBeNull();
    expect(parseIp('01.2.3.4')).toBeNull();
  });

  it('a header value with CR or LF is refused at enqueue, and header values are shown redacted', async () => {
    const res = await app.request('/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer tok' },
      body: JSON.stringify({
        kind: 'webhook',
        payload: { url: `${base}/ok`, headers: { 'X-Token': 'a\r\nX-Injected: 1' } },
      }),
    });
    expect(res.status).toBe(422);
    expect((await res.json()).error).toEqual({
      code: 'invalid_payload',
      message:
        'payload rejected by kind webhook: payload.headers.X-Token: a header value holds tabs and visible ASCII (U+0020 to U+007E): no CR, LF, NUL or other control character, nothing above U+007E (percent-encode or base64 other text)',
    });
    // U+0080 to U+00FF: HTTP's opaque bytes, which the runtimes would send as UTF-8 (`é` as `Ã©`).
    const latin1 = await app.request('/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer tok' },
      body: JSON.stringify({ kind: 'webhook', payload: { url: `${base}/ok`, headers: { 'X-Name': 'José' } } }),
    });
    expect(latin1.status).toBe(422);
    expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
    const id = await enqueueHook({ url: `${base}/ok`, headers: { Authorization: 'Bearer receiver-secret' } });
    const shown = await (await app.request(`/jobs/${id}`, { headers: { authorization: 'Bearer tok' } })).json();
    expect(shown.payload).toEqual({ url: `${base}/ok`, headers: { Authorization: '[redacted]' } });
    await drain(t.db, registry, { workerId: 'w' });
    expect(hits[0]!.headers.authorization).toBe('Bearer receiver-secret');
  });
});

describe('signed deliveries (Standard Webhooks), checked by the published verifier', () => {
  // Two secrets at once, as during a rotation: the receiver may know either.
  const oldSecret = `whsec_${Buffer.from('a'.repeat(32)).toString('base64')}`;
  const newSecret = `whsec_${Buffer.from('b'.repeat(32)).toString('base64')}`;
  const signed = () =>
    new JobRegistry([
      createWebhookJob({
        allowedHosts: [`127.0.0.1:${port}`],
        timeoutMs: 300,
        signingKeys: parseSigningSecrets(`${oldSecret} ${newSecret}`),
      }),
    ]);
  const headersOf = (hit: (typeof hits)[number]) =>
    Object.fromEntries(
      ['webhook-id', 'webhook-timestamp', 'webhook-signature'].map((h) => [h, String(hit.headers[h])]),
    );

  it('every delivery carries an id that is the same for each attempt of a job, and a signature each secret verifies', async () => {
    const { id } = await enqueue(t.db, {
      kind: 'webhook',
      payload: { url: `${base}/flaky-signed`, body: { order: 7, note: 'ünïcode ✓' } },
    });
    expect(await drain(t.db, signed(), { workerId: 'w' })).toMatchObject({ failed: 1 });
    await dueNow();
    expect(await drain(t.db, signed(), { workerId: 'w' })).toMatchObject({ completed: 1 });
    expect(hits).toHaveLength(2);
    for (const secret of [oldSecret, newSecret]) {
      for (const hit of hits)
        expect(new Webhook(secret).verify(hit.body, headersOf(hit))).toEqual({ order: 7, note: 'ünïcode ✓' });
    }
    // A retry is the same message: a receiver deduplicates on the id.
    expect(hits.map((h) => h.headers['webhook-id'])).toEqual([`msg_${id}`, `msg_${id}`]);
    expect(String(hits[0]!.headers['webhook-signature']).split(' ')).toHaveLength(2);
  });

  it('a tampered body, a signature from another secret and an old timestamp are refused by the verifier', async () => {
    await enqueue(t.db, { kind: 'webhook', payload: { url: `${base}/ok`, body: { amount: 10 } } });
    await drain(t.db, signed(), { workerId: 'w' });
    const [hit] = hits;
    const verifier = new Webhook(newSecret);
    expect(() => verifier.verify(hit!.body.replace('10', '1000'), headersOf(hit!))).toThrow(WebhookVerificationError);
    expect(() =>
      new Webhook(`whsec_${Buffer.from('c'.repeat(32)).toString('base64')}`).verify(hit!.body, headersOf(hit!)),
    ).toThrow(WebhookVerificationError);
    // The same signature replayed ten minutes later: the verifier's tolerance is five.
    const replayed = await createSigner(parseSigningSecrets(newSecret))!.headers(
      String(hit!.headers['webhook-id']),
      hit!.body,
      new Date(Date.now() - 10 * 60_000),
    );
    expect(() => verifier.verify(hit!.body, replayed)).toThrow(/timestamp/i);
  });

  it('WEBHOOK_SIGNING_SECRET is refused when it is not a whsec_ key, naming the entry and never its value', () => {
    expect(() => parseSigningSecrets(`${oldSecret}, sk_live_123`)).toThrow('secret 2 of 2 does not start with whsec_');
    expect(() => parseSigningSecrets('whsec_!!!')).toThrow('secret 1 of 1 is not base64 after whsec_');
    expect(() => parseSigningSecrets(`whsec_${Buffer.from('short').toString('base64')}`)).toThrow(
      'secret 1 of 1 is 5 bytes; use 24 to 64',
    );
    expect(parseSigningSecrets(undefined)).toEqual([]);
  });

  it('a payload cannot set the signature headers itself', async () => {
    const res = await app.request('/jobs', {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: 'Bearer tok' },
      body: JSON.stringify({
        kind: 'webhook',
        payload: { url: `${base}/ok`, headers: { 'Webhook-Signature': 'v1,forged' } },
      }),
    });
    expect(res.status).toBe(422);
    expect((await res.json()).error.message).toMatch(/webhook-signature and x-pgdrain-\* are set by pgdrain/);
    expect(await t.query('SELECT count(*)::int AS n FROM pgdrain.jobs')).toEqual([{ n: 0 }]);
  });

  it("pgdrain's own headers win: a payload naming one is refused at enqueue, and at delivery when written in SQL", async () => {
    for (const name of ['x-pgdrain-job-id', 'X-PGDRAIN-ATTEMPT', 'x-pgdrain-anything']) {
      const res = await app.request('/jobs', {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer tok' },
        body: JSON.stringify({ kind: 'webhook', payload: { url: `${base}/ok`, headers: { [name]: '1' } } }),
      });
      expect(res.status).toBe(422);
    }
    // Written in SQL (which cannot check a kind's schema): the drainer refuses it, sends nothing.
    const [{ id }] = (await t.query<{ id: string }>(
      `SELECT pgdrain.enqueue('webhook', jsonb_build_object('url', $1::text,
         'headers', jsonb_build_object('X-Pgdrain-Job-Id', '999')))::text AS id`,
      [`${base}/ok`],
    )) as [{ id: string }];
    await drain(t.db, registry, { workerId: 'w' });
    expect(hits).toHaveLength(0);
    expect(await row(id)).toMatchObject({
      status: 'dead',
      last_error: expect.stringMatching(/x-pgdrain-\* are set by pgdrain/),
    });
  });
});
