// Leases when the database is out of reach: the drainer cannot renew, so once a job's visibility
// timeout has passed it gives the job up (aborts the handler's signal) instead of letting it run
// on beside the copy the reaper may hand to someone else. The drainer reaches PostgreSQL through a
// TCP proxy on 127.0.0.1 that the test cuts.
import net from 'node:net';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { drain } from '../src/drain.ts';
import { JobRegistry, defineJob } from '../src/jobs/index.ts';
import { type Db, enqueue, reap } from '../src/queries/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { until } from './support/sidecar-process.ts';

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(() => t?.close());

/** Forwards 127.0.0.1:<port> to the database until cut: then every connection drops and new ones are refused. */
async function cuttableProxy(target: URL) {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('error', () => {});
      s.on('close', () => sockets.delete(s));
    }
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = new URL(target);
  url.hostname = '127.0.0.1';
  url.port = String((server.address() as net.AddressInfo).port);
  return {
    url: url.toString(),
    cut: async () => {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        for (const s of sockets) s.destroy();
      });
    },
  };
}

it('a drainer that cannot renew a lease for its whole visibility timeout aborts that handler; the reaper then returns the job', async () => {
  const proxy = await cuttableProxy(new URL(t.url));
  const pool = new pg.Pool({ connectionString: proxy.url, max: 2, connectionTimeoutMillis: 500 });
  pool.on('error', () => {});
  const db = drizzle({ client: pool }) as unknown as Db;
  let abortedAt = 0;
  let abortedWith: unknown;
  const registry = new JobRegistry([
    defineJob({
      kind: 'waits', schema: z.unknown(), timeoutMs: 20_000,
      handler: (_, { signal }) => new Promise<void>((resolve) => signal.addEventListener('abort', () => {
        abortedAt = Date.now();
        abortedWith = signal.reason;
        resolve();
      })),
    }),
  ]);
  const { id } = await enqueue(t.db, { kind: 'waits', payload: {} });
  const settleErrors: unknown[] = [];
  const drained = drain(db, registry, { workerId: 'cut-off', visibilitySeconds: 2, onSettleError: (e) => settleErrors.push(e) });
  await until(() => t.query(`SELECT status FROM pgdrain.jobs WHERE id = $1`, [id]), (r) => r[0]?.status === 'running', 5_000, 'the claim');
  const cutAt = Date.now();
  await proxy.cut();

  const report = await drained;
  // Given up within the visibility timeout (plus one renewal tick), not at the 20 s handler timeout.
  expect(String(abortedWith)).toMatch(/LeaseLostError: job \d+: its lease could not be renewed for 2 s/);
  expect(abortedAt - cutAt).toBeLessThan(2_000 + 1_000);
  // Its settlement could not reach the database either: the job is still running there…
  expect(report).toMatchObject({ claimed: 1, completed: 0 });
  expect(settleErrors.length).toBeGreaterThan(0);
  expect(await t.query(`SELECT status, attempts FROM pgdrain.jobs WHERE id = $1`, [id])).toEqual([{ status: 'running', attempts: 1 }]);
  // …until the reaper, on a connection of its own, hands it back once the lease has expired.
  await until(async () => (await reap(t.db, 2)).reclaimed, (ids) => ids.includes(id), 5_000, 'the reaper');
  expect(await t.query(`SELECT status, locked_by FROM pgdrain.jobs WHERE id = $1`, [id])).toEqual([{ status: 'pending', locked_by: null }]);
  await pool.end();
}, 30_000);
