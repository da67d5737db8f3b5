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
import { vacuumInterval } from '../src/sidecar/queue-vacuum.ts';
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

it('the interval grows with the table: everyJobs up to twice as many rows, then sqrt(everyJobs × rows / 2)', () => {
  expect(vacuumInterval(25_000, 0)).toBe(25_000);
  expect(vacuumInterval(25_000, 50_000)).toBe(25_000);
  expect(vacuumInterval(25_000, 200_000)).toBe(50_000);
  expect(vacuumInterval(25_000, 1_000_000)).toBe(111_803);
  expect(vacuumInterval(100, 20_000)).toBe(1_000);
});

it('in a table holding many rows (a large dead-letter backlog), the drainer VACUUMs less often', async () => {
  // 20,000 dead-letter jobs kept in the table: a VACUUM reads every index whole, so at
  // vacuumEveryJobs 100 the drainer waits for about 1,000 claimed jobs, not 100.
  await t.query(
    `INSERT INTO pgdrain.jobs (kind, payload, status, attempts, max_attempts, last_error)
     SELECT 'vacuum-ballast', '{}', 'dead', 1, 1, 'kept' FROM generate_series(1, 20000)`,
  );
  await t.query('ANALYZE pgdrain.jobs');
  try {
    const before = await vacuumCount();
    const events: { claimedSince: number; tableRows: number }[] = [];
    const vacuumEvents = { onVacuumed: (done: { claimedSince: number; tableRows: number }) => events.push(done) };
    const runs = await drainJobs(t.db, 600, { vacuumEveryJobs: 100, vacuumEvents });
    expect(runs.size).toBe(600);
    expect(events).toEqual([]);
    expect(await vacuumCount()).toBe(before);

    const more = await drainJobs(t.db, 1_400, { vacuumEveryJobs: 100, vacuumEvents });
    expect(more.size).toBe(1_400);
    expect(events.length).toBe(1);
    expect(events[0]!.tableRows).toBeGreaterThanOrEqual(20_000);
    expect(events[0]!.claimedSince).toBeGreaterThanOrEqual(vacuumInterval(100, events[0]!.tableRows));
    expect(await vacuumCount(before + 1)).toBe(before + 1);
  } finally {
    await t.query(`DELETE FROM pgdrain.jobs WHERE kind = 'vacuum-ballast'`);
  }
});

it('while another session holds a lock a VACUUM would wait for, the drainer does not send one and counts on', async () => {
  // An ANALYZE, an index build or autovacuum's own VACUUM holds SHARE UPDATE EXCLUSIVE (or more);
  // `VACUUM (SKIP_LOCKED)` would then do nothing without a word, and the drainer would count it done.
  // The table's size estimate brought up to date first (a test before may have left it large, and
  // the interval grows with it).
  const counted = await vacuumCount();
  await t.query('VACUUM ANALYZE pgdrain.jobs');
  const before = await vacuumCount(counted + 1);
  // And the estimate from the live rows alone: a VACUUM counts the rows a snapshot somewhere may
  // still see (an autovacuum's ANALYZE of another table, under load), so the test before's 20,000
  // deleted rows could stay in it, and the interval (sqrt of the rows) outgrow this test's 600 jobs.
  await t.query('ANALYZE pgdrain.jobs');
  const holder = new pg.Client({ connectionString: t.url });
  await holder.connect();
  // Autovacuum's own VACUUM of the churned table holds the same lock, and the drainer rightly holds
  // off then too: under load it came in the middle of this test, which counts the drainer's VACUUMs
  // once the test's own holder lets go. Off for the test; the held-off case is what it tests.
  await t.query('ALTER TABLE pgdrain.jobs SET (autovacuum_enabled = false)');
  try {
    await holder.query('BEGIN');
    await holder.query('LOCK TABLE pgdrain.jobs IN SHARE UPDATE EXCLUSIVE MODE');
    const vacuumed: { claimedSince: number }[] = [];
    const heldOff: { claimedSince: number }[] = [];
    const vacuumEvents = {
      onVacuumed: (done: { claimedSince: number }) => vacuumed.push(done),
      onHeldOff: (due: { claimedSince: number }) => heldOff.push(due),
    };
    const runs = await drainJobs(t.db, 600, { vacuumEveryJobs: 100, vacuumEvents });
    expect(runs.size).toBe(600);
    expect(vacuumed).toEqual([]);
    expect(heldOff.length).toBeGreaterThanOrEqual(1);
    // The count goes on while held off: each look comes after 100 more claimed jobs than the last.
    for (const [i, due] of heldOff.entries()) {
      expect(due.claimedSince).toBeGreaterThanOrEqual(100 * (i + 1));
    }
    await holder.query('COMMIT');
    expect(await vacuumCount()).toBe(before);

    const more = await drainJobs(t.db, 300, { vacuumEveryJobs: 100, vacuumEvents });
    expect(more.size).toBe(300);
    expect(vacuumed.length).toBeGreaterThanOrEqual(1);
    // With the lock gone, a drainer's VACUUM is sent (and counted by the server) once due.
    expect(vacuumed[0]!.claimedSince).toBeGreaterThanOrEqual(100);
    expect(await vacuumCount(before + vacuumed.length)).toBe(before + vacuumed.length);
  } finally {
    await holder.query('ROLLBACK').catch(() => {});
    await holder.end();
    await t.query('ALTER TABLE pgdrain.jobs RESET (autovacuum_enabled)');
  }
});
