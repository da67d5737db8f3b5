// Leases when the database is out of reach: the drainer cannot renew, so once a job's visibility
// timeout has passed it gives the job up (aborts the handler's signal) instead of letting it run
// on beside the copy the reaper may hand to someone else. The drainer reaches PostgreSQL through a
// TCP proxy on 127.0.0.1 that the test cuts.
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { drain } from '../src/drain/index.ts';
import { JobBook } from '../src/drain/job-record.ts';
import { LeaseKeeper } from '../src/drain/lease-keeper.ts';
import { JobRegistry, defineJob } from '../src/jobs/index.ts';
import { type Db, claim, enqueue, enqueueMany, reap } from '../src/queries/index.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';

import { startTcpProxy } from './support/tcp-proxy.ts';
import { until } from './support/time.ts';

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(() => t?.close());

it('the lease keeper gives a lease up the moment it runs out, whatever the phase of its renewals', async () => {
  // Two real claimed jobs, held 1.4 s apart with 3 s leases (renewals every second, in the first
  // one's phase); the database is cut off after the first renewal. Each must be given up when its
  // own lease runs out — its last successful renewal's send time (or its claim) plus 3 s — not at
  // the next renewal tick after that.
  const target = new URL(t.url);
  const proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port) });
  const pool = new pg.Pool({ connectionString: proxy.urlFor(t.url), max: 2, connectionTimeoutMillis: 300 });
  pool.on('error', () => {});
  const keeper = new LeaseKeeper(drizzle({ client: pool }) as unknown as Db, {
    visibilityTimeoutSeconds: 3,
    onLostUnstarted: () => {},
  });
  const lost = new Map<string, { at: number; why: string }>();
  const book = new JobBook();
  const hold = async (token: string) => {
    const sentAt = Date.now();
    const [job] = await claim(t.db, { batchSize: 1, lockToken: token, visibilityTimeoutSeconds: 3, kinds: ['held'] });
    keeper.hold(book.claimed([job!], sentAt));
    keeper.attach(job!.id, (error) => lost.set(job!.id, { at: Date.now(), why: error.message }));
    return { job: job!, sentAt };
  };
  try {
    await enqueueMany(t.db, [
      { kind: 'held', payload: {} },
      { kind: 'held', payload: {} },
    ]);
    const a = await hold('keeper:1');
    await new Promise((r) => setTimeout(r, 1_400)); // a's first renewal (at ~1 s) succeeds
    const renewedA = await t.query(
      `SELECT locked_at > now() - interval '1 second' AS renewed FROM pgdrain.jobs WHERE id = $1`,
      [a.job.id],
    );
    expect(renewedA).toEqual([{ renewed: true }]);
    const b = await hold('keeper:2');
    await new Promise((r) => setTimeout(r, 300));
    await proxy.close(); // every renewal from here on fails
    await until(
      async () => lost.size,
      (n) => n === 2,
      8_000,
      'both leases to be given up',
    );
    const late = (id: string, leaseEnd: number) => lost.get(id)!.at - leaseEnd;
    // b was never renewed: its lease ends 3 s after its claim was sent. a's ended 3 s after the
    // renewal that reached the database (sent about 1 s after its claim).
    expect(late(b.job.id, b.sentAt + 3_000)).toBeGreaterThanOrEqual(0);
    expect(late(b.job.id, b.sentAt + 3_000)).toBeLessThan(200);
    expect(late(a.job.id, a.sentAt + 4_000)).toBeGreaterThanOrEqual(-150);
    expect(late(a.job.id, a.sentAt + 4_000)).toBeLessThan(200);
    expect(lost.get(b.job.id)!.why).toMatch(/its lease could not be renewed for 3 s/);
  } finally {
    keeper.stop();
    await pool.end();
  }
}, 20_000);

it('a drainer that cannot renew a lease for its whole visibility timeout aborts that handler; the reaper then returns the job', async () => {
  const target = new URL(t.url);
  const proxy = await startTcpProxy({ host: target.hostname, port: Number(target.port) });
  const pool = new pg.Pool({ connectionString: proxy.urlFor(t.url), max: 2, connectionTimeoutMillis: 500 });
  pool.on('error', () => {});
  const db = drizzle({ client: pool }) as unknown as Db;
  let abortedAt = 0;
  let abortedWith: unknown;
  const registry = new JobRegistry([
    defineJob({
      kind: 'waits',
      schema: z.unknown(),
      timeoutMs: 20_000,
      handler: (_, { signal }) =>
        new Promise<void>((resolve) =>
          signal.addEventListener('abort', () => {
            abortedAt = Date.now();
            abortedWith = signal.reason;
            resolve();
          }),
        ),
    }),
  ]);
  const { id } = await enqueue(t.db, { kind: 'waits', payload: {} });
  const settleErrors: unknown[] = [];
  const drained = drain(db, registry, {
    workerId: 'cut-off',
    visibilityTimeoutSeconds: 2,
    onSettleError: (e) => settleErrors.push(e),
  });
  await until(
    () => t.query(`SELECT status FROM pgdrain.jobs WHERE id = $1`, [id]),
    (r) => r[0]?.status === 'running',
    5_000,
    'the claim',
  );
  const cutAt = Date.now();
  await proxy.close();

  // The claims it keeps sending while the handler runs cannot reach the database either: the
  // drain ends saying so.
  await expect(drained).rejects.toThrow();
  // Given up within the visibility timeout (plus one renewal tick), not at the 20 s handler timeout.
  expect(String(abortedWith)).toMatch(/LeaseLostError: job \d+: its lease could not be renewed for 2 s/);
  expect(abortedAt - cutAt).toBeLessThan(2_000 + 1_000);
  // Its settlement could not reach the database: the job is still running there…
  expect(settleErrors.length).toBeGreaterThan(0);
  expect(await t.query(`SELECT status, attempts FROM pgdrain.jobs WHERE id = $1`, [id])).toEqual([
    { status: 'running', attempts: 1 },
  ]);
  // …until the reaper, on a connection of its own, hands it back once the lease has expired.
  await until(
    async () => (await reap(t.db, 2)).reclaimed,
    (ids) => ids.includes(id),
    5_000,
    'the reaper',
  );
  expect(await t.query(`SELECT status, locked_by FROM pgdrain.jobs WHERE id = $1`, [id])).toEqual([
    { status: 'pending', locked_by: null },
  ]);
  await pool.end();
}, 30_000);
