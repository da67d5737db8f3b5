// The queue's clock as a user runs it: `npm run dev:worker` (wrangler dev, workerd, the Durable
// Object from wrangler.toml) on the Neon path, its database behind a TCP proxy that counts what is
// said to it. An idle queue's cron invocations send the database nothing at all — no connection,
// no byte — and a job enqueued through the API with a delay starts within a second of its run_at
// with no cron tick; a Worker killed (-9) in the middle of a job has it run again when its lease
// ends, by the clock's alarm once the Worker is back, with no cron tick. (The clock's other paths
// run in workerd: test/workers/clock.test.ts.)
import http from 'node:http';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { type TcpProxy, startTcpProxy } from './support/tcp-proxy.ts';
import { type WorkerDevProcess, startWorkerDev } from './support/worker-dev-process.ts';
import { sleep } from './support/time.ts';

const TOKEN = 'worker-dev-clock-token-0123456';

describe("the queue's clock under npm run dev:worker", () => {
  let t: TestDatabase;
  let proxy: TcpProxy;
  let worker: WorkerDevProcess;
  let hook: http.Server;
  const arrivals = new Map<number, number>();

  beforeAll(async () => {
    t = await createTestDatabase();
    const target = new URL(t.url);
    proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port) });
    hook = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        const seq = (JSON.parse(body || '{}') as { seq?: number }).seq;
        if (typeof seq === 'number' && !arrivals.has(seq)) arrivals.set(seq, Date.now());
        res.end('ok');
      });
    });
    await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
    const hookPort = (hook.address() as { port: number }).port;
    worker = await startWorkerDev({
      databaseUrl: proxy.urlFor(t.url),
      hyperdrive: false,
      // The mode in which an idle queue's database may sleep (the default looks every cron).
      env: { API_TOKEN: TOKEN, WEBHOOK_ALLOWED_HOSTS: `127.0.0.1:${hookPort}`, BACKSTOP_POLL_SECONDS: '3600' },
    });
  }, 90_000);

  afterAll(async () => {
    await worker?.stop();
    await new Promise((r) => hook?.close(r));
    await proxy?.close();
    await t?.close();
  });

  /** Runs scheduled() and returns the report the Worker logged. */
  const cron = async (): Promise<Record<string, unknown>> => {
    const before = worker.output().length;
    const res = await fetch(`${worker.url}/__scheduled?cron=*+*+*+*+*`);
    expect(res.ok).toBe(true);
    for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(20)) {
      const line = worker
        .output()
        .slice(before)
        .split('\n')
        .find((l) => l.includes('"event":"scheduled"'));
      if (line) return JSON.parse(line.slice(line.indexOf('{')));
    }
    throw new Error(`no scheduled report:\n${worker.output().slice(before)}`);
  };

  it('an idle queue: after the first look, cron invocations open no connection and send no byte', async () => {
    expect(await cron()).toMatchObject({ looked: 'drain', claimed: 0 });
    await sleep(500); // the first look's connections closed
    const before = proxy.traffic();
    for (let i = 0; i < 5; i++) expect(await cron()).toMatchObject({ looked: 'idle', claimed: 0, reaped: 0 });
    await sleep(500);
    expect(proxy.traffic()).toEqual(before);
  }, 60_000);

  it('a job enqueued through the API with a delay starts within a second of its run_at, with no cron tick', async () => {
    const hookUrl = `http://127.0.0.1:${(hook.address() as { port: number }).port}/hook`;
    const res = await fetch(`${worker.url}/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({ kind: 'webhook', payload: { url: hookUrl, body: { seq: 1 } }, delaySeconds: 2 }),
    });
    expect(res.status).toBe(201);
    const { id, runAt } = (await res.json()) as { id: string; runAt: string };
    for (const deadline = Date.now() + 10_000; !arrivals.has(1) && Date.now() < deadline; ) await sleep(20);
    expect(arrivals.has(1), "delivered by the clock's alarm").toBe(true);
    const late = arrivals.get(1)! - Date.parse(runAt);
    expect(late).toBeGreaterThanOrEqual(0);
    expect(late).toBeLessThan(1_000);
    // Completed and gone (webhooks keep nothing), within the same look.
    for (const deadline = Date.now() + 5_000; Date.now() < deadline; await sleep(50)) {
      if ((await t.query('SELECT 1 FROM pgdrain.jobs WHERE id = $1', [id])).length === 0) break;
    }
    expect(await t.query('SELECT status FROM pgdrain.jobs WHERE id = $1', [id])).toEqual([]);
  }, 30_000);
});

describe('a Worker killed in the middle of a job, under npm run dev:worker', () => {
  let t: TestDatabase;
  let hook: http.Server;
  let dataDir: string;
  let worker: WorkerDevProcess | undefined;
  /** Deliveries of the job's webhook: the first is held open (the handler never ends), the next answered. */
  const deliveries: number[] = [];

  beforeAll(async () => {
    t = await createTestDatabase();
    dataDir = await mkdtemp(path.join(os.tmpdir(), 'pgdrain-worker-dev-kill-'));
    hook = http.createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        deliveries.push(Date.now());
        if (deliveries.length > 1) res.end('ok'); // the first one hangs until the Worker is killed
      });
    });
    await new Promise<void>((resolve) => hook.listen(0, '127.0.0.1', resolve));
  });

  afterAll(async () => {
    await worker?.stop();
    hook?.closeAllConnections();
    await new Promise((r) => hook?.close(r));
    await rm(dataDir, { recursive: true, force: true });
    await t?.close();
  });

  it("its job runs again at its lease's end, by the alarm, once the Worker is back; no cron tick", async () => {
    const hookPort = (hook.address() as { port: number }).port;
    const env = { API_TOKEN: TOKEN, WEBHOOK_ALLOWED_HOSTS: `127.0.0.1:${hookPort}`, VISIBILITY_TIMEOUT_SECONDS: '8' };
    worker = await startWorkerDev({ databaseUrl: t.url, hyperdrive: false, env, dataDir });
    const res = await fetch(`${worker.url}/jobs`, {
      method: 'POST',
      headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' },
      body: JSON.stringify({
        kind: 'webhook',
        payload: { url: `http://127.0.0.1:${hookPort}/hook`, body: { seq: 7 } },
      }),
    });
    expect(res.status).toBe(201);
    const { id } = (await res.json()) as { id: string };
    for (const deadline = Date.now() + 10_000; deliveries.length === 0 && Date.now() < deadline; ) await sleep(20);
    expect(deliveries.length, 'the alarm started it').toBe(1);
    await worker.kill();
    worker = undefined;
    const [held] = await t.query<{ status: string; attempts: number; until: Date }>(
      'SELECT status, attempts, locked_until AS until FROM pgdrain.jobs WHERE id = $1',
      [id],
    );
    expect(held).toMatchObject({ status: 'running', attempts: 1 });
    worker = await startWorkerDev({ databaseUrl: t.url, hyperdrive: false, env, dataDir });
    // Under load the restart can outlast the lease (about 3 s of it are left on an idle machine): the
    // alarm then rings as the Worker comes back. Timed from whichever is later.
    const backAt = Date.now();
    for (const deadline = Date.now() + 30_000; deliveries.length < 2 && Date.now() < deadline; ) await sleep(20);
    expect(deliveries.length, 'delivered again after the restart').toBe(2);
    const leaseEnd = new Date(held!.until).getTime();
    expect(deliveries[1]! - leaseEnd, 'not before its lease ended').toBeGreaterThanOrEqual(0);
    expect(deliveries[1]! - Math.max(leaseEnd, backAt), 'within a second of it, or of the Worker back').toBeLessThan(
      1_000,
    );
    expect(worker.output()).not.toMatch(/"event":"scheduled"/);
    for (const deadline = Date.now() + 5_000; Date.now() < deadline; await sleep(50)) {
      if ((await t.query('SELECT 1 FROM pgdrain.jobs WHERE id = $1', [id])).length === 0) break;
    }
    expect(await t.query('SELECT status FROM pgdrain.jobs WHERE id = $1', [id])).toEqual([]);
  }, 90_000);
});
