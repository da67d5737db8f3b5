// The sidecar drainer's own VACUUM of the jobs table (src/sidecar/queue-vacuum.ts): every
// `vacuumEveryJobs` jobs it claims, beside the drain, so a busy queue's claims do not walk ever more
// dead jobs_ready entries between autovacuum's visits. Counted by the server
// (pg_stat_user_tables.vacuum_count counts manual VACUUMs only, not autovacuum's), with a real
// Drainer draining real jobs; a role that may not VACUUM the table is told once and drains on.
import { randomBytes } from 'node:crypto';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { z } from 'zod';
import { JobRegistry, defineJob } from '../src/jobs/index.ts';
import { type Db, enqueueMany, mayVacuumQueueTable } from '../src/queries/index.ts';
import { Drainer, type DrainerOptions } from '../src/sidecar/drainer.ts';
import { createTestDatabase, type TestDatabase } from './support/database.ts';
import { until } from './support/time.ts';

let t: TestDatabase;
beforeAll(async () => {
  t = await createTestDatabase();
});
afterAll(() => t?.close());

/** Manual VACUUMs of pgdrain.jobs so far. PostgreSQL 14's statistics collector is asynchronous:
 * its count arrives within half a second, so `atLeast` waits for it. */
async function vacuumCount(atLeast = 0): Promise<number> {
  let count = 0;
  await until(
    async () => {
      await t.query('SELECT pg_stat_clear_snapshot()');
      const [row] = await t.query<{ n: string }>(
        `SELECT vacuum_count AS n FROM pg_stat_user_tables WHERE relid = 'pgdrain.jobs'::regclass`,
      );
      count = Number(row!.n);
      return count >= atLeast;
    },
    Boolean,
    5_000,
  ).catch(() => {});
  return count;
}

/** Drains `n` jobs of a fresh kind through a Drainer on `db`; returns how often each ran. */
async function drainJobs(db: Db, n: number, options: Partial<DrainerOptions>): Promise<Map<number, number>> {
  const kind = `vacuum-${randomBytes(4).toString('hex')}`;
  const runs = new Map<number, number>();
  const registry = new JobRegistry([
    defineJob({
      kind,
      schema: z.object({ i: z.number() }),
      handler: ({ i }) => void runs.set(i, (runs.get(i) ?? 0) + 1),
    }),
  ]);
  await enqueueMany(
    t.db,
    Array.from({ length: n }, (_, i) => ({ kind, payload: { i } })),
  );
  // Claims of 50: the counter crosses its threshold several times within one drain.
  const drainer = new Drainer(db, registry, {
    workerId: 'vacuum-test',
    batchSize: 50,
    pollIntervalMs: 200,
    ...options,
  }).start();
  try {
    await until(
      () => runs.size,
      (size) => size === n,
      20_000,
      `${n} jobs run`,
    );
    await until(
      async () => (await t.query(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE kind = $1`, [kind]))[0]!.n,
      (left) => left === 0,
      10_000,
      'every job settled',
    );
  } finally {
    await drainer.stop(5_000);
  }
  return runs;
}

it('a drainer VACUUMs the jobs table every vacuumEveryJobs jobs it claims, and never with 0', async () => {
  const before = await vacuumCount();
  const runs = await drainJobs(t.db, 600, { vacuumEveryJobs: 0 });
  expect([...runs.values()].every((n) => n === 1) && runs.size === 600).toBe(true);
  expect(await vacuumCount()).toBe(before);

  const events: { claimedSince: number; ms: number }[] = [];
  const errors: unknown[] = [];
  const again = await drainJobs(t.db, 600, {
    vacuumEveryJobs: 200,
    vacuumEvents: { onVacuumed: (done) => events.push(done), onError: (e) => errors.push(e) },
  });
  expect([...again.values()].every((n) => n === 1) && again.size === 600).toBe(true);
  expect(errors).toEqual([]);
  // One VACUUM at a time: a threshold crossed while one runs waits for the next. 600 claimed, every
  // 200: one to three, each counting the claims since the one before.
  expect(events.length).toBeGreaterThanOrEqual(1);
  expect(events.length).toBeLessThanOrEqual(3);
  for (const e of events) expect(e.claimedSince).toBeGreaterThanOrEqual(200);
  expect(await vacuumCount(before + events.length)).toBe(before + events.length);
});

it('a role that may not VACUUM the jobs table is told once, and its drainer drains on without trying', async () => {
  const role = `pgdrain_vacuum_${randomBytes(4).toString('hex')}`;
  const password = randomBytes(12).toString('hex');
  await t.query(`CREATE ROLE ${role} LOGIN PASSWORD '${password}'`);
  await t.query(`GRANT USAGE ON SCHEMA pgdrain TO ${role}`);
  await t.query(`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA pgdrain TO ${role}`);
  await t.query(`GRANT ALL ON ALL SEQUENCES IN SCHEMA pgdrain TO ${role}`);
  await t.query(`GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA pgdrain TO ${role}`);
  const url = new URL(t.url);
  url.username = role;
  url.password = password;
  const pool = new pg.Pool({ connectionString: url.toString(), max: 4 });
  pool.on('error', () => {});
  try {
    const db = drizzle({ client: pool }) as unknown as Db;
    expect(await mayVacuumQueueTable(db)).toBe(false);
    expect(await mayVacuumQueueTable(t.db)).toBe(true);
    const before = await vacuumCount();
    let told = 0;
    const vacuumed: unknown[] = [];
    const runs = await drainJobs(db, 300, {
      vacuumEveryJobs: 50,
      vacuumEvents: { onNotAllowed: () => told++, onVacuumed: (done) => vacuumed.push(done) },
    });
    expect(runs.size).toBe(300);
    expect(told).toBe(1);
    expect(vacuumed).toEqual([]);
    expect(await vacuumCount()).toBe(before);
  } finally {
    await pool.end();
    await t.query(`DROP OWNED BY ${role}`);
    await t.query(`DROP ROLE ${role}`);
  }
});
