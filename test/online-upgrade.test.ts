// Upgrading a busy queue: a database at the last wave-2 migration, holding 1,000,000 jobs, is
// migrated to this version while drainers of the old version claim and complete and an
// application enqueues. No statement of either may wait long on the migration's locks (target:
// under 1 s), both keep going throughout, and the schema ends up current.
import pg from 'pg';
import { readMigrationFiles } from 'drizzle-orm/migrator';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { migrateDatabase, migrationsFolder } from '../src/db/migrate.ts';
import type { TestDatabase } from './support/database.ts';
import { WAVE5, databaseShippedBy } from './support/shipped-migrations.ts';

/** The first migration after the wave-2 release (its last was 0003_priority_pause_schedules). */
const FIRST_AFTER_WAVE2 = '0004';
const JOBS = 1_000_000;

let t: TestDatabase;
beforeAll(async () => {
  t = await databaseShippedBy(WAVE5, FIRST_AFTER_WAVE2);
  await t.query(
    `INSERT INTO pgdrain.jobs (kind, payload, priority) SELECT 'old', jsonb_build_object('i', i), i % 3 FROM generate_series(1, ${JOBS}) AS i`,
  );
  await t.query('ANALYZE pgdrain.jobs');
}, 180_000);
afterAll(() => t?.close());

/** Runs `step` back to back until stopped, timing each call. */
function loop(step: (client: pg.Client) => Promise<unknown>) {
  const client = new pg.Client({ connectionString: t.url });
  const timings: { at: number; ms: number }[] = [];
  let running = true;
  const done = (async () => {
    await client.connect();
    while (running) {
      const started = performance.now();
      await step(client);
      timings.push({ at: Date.now(), ms: performance.now() - started });
      await new Promise((r) => setTimeout(r, 5));
    }
    await client.end();
  })();
  return {
    timings,
    stop: async () => {
      running = false;
      await done;
    },
  };
}

it('1,000,000 jobs, an old drainer and an enqueuing app at work: no statement waits a second on the upgrade, and both keep going', async () => {
  // What a wave-2 drainer sends: its claim (no lease end yet) and its completion.
  const drainer = loop(async (client) => {
    const { rows } = await client.query(
      `UPDATE pgdrain.jobs SET status = 'running', locked_at = now(), locked_by = 'old-drainer:1', attempts = attempts + 1
        WHERE id = ANY(ARRAY(SELECT id FROM pgdrain.jobs WHERE status = 'pending' AND run_at <= now()
                              ORDER BY priority DESC NULLS LAST, run_at, id LIMIT 50 FOR UPDATE SKIP LOCKED))
        RETURNING id`,
    );
    await client.query(`DELETE FROM pgdrain.jobs WHERE id = ANY($1::bigint[]) AND locked_by = 'old-drainer:1'`, [
      rows.map((r) => r.id),
    ]);
  });
  // A call that resolves pgdrain.enqueue() just as a migration drops the old definition to create
  // the new one (new parameters) fails with PostgreSQL's 'cache lookup failed for function': the
  // README's upgrade notes say to retry it, as this app does.
  const app = loop((client) =>
    client.query(`SELECT pgdrain.enqueue('app', '{"order": 1}')`).catch((error: Error) => {
      if (!/cache lookup failed for function/.test(error.message)) throw error;
      return client.query(`SELECT pgdrain.enqueue('app', '{"order": 1}')`);
    }),
  );
  await new Promise((r) => setTimeout(r, 500));

  const started = Date.now();
  await migrateDatabase(t.url);
  const finished = Date.now();
  await new Promise((r) => setTimeout(r, 300));
  await Promise.all([drainer.stop(), app.stop()]);

  const during = (timings: { at: number; ms: number }[]) =>
    timings.filter((x) => x.at >= started && x.at - x.ms <= finished);
  for (const [who, timings] of [
    ['drainer', drainer.timings],
    ['app', app.timings],
  ] as const) {
    const longest = Math.max(...timings.map((x) => x.ms));
    console.log(
      `online upgrade of ${JOBS} jobs in ${finished - started} ms: ${who} made ${during(timings).length} calls meanwhile, the longest took ${longest.toFixed(0)} ms`,
    );
    expect([who, longest]).toEqual([who, expect.any(Number)]);
    expect(longest).toBeLessThan(1_000);
    expect(during(timings).length).toBeGreaterThan(0);
  }
  const applied = await t.query('SELECT count(*)::int AS n FROM pgdrain.migrations');
  expect(applied).toEqual([{ n: readMigrationFiles({ migrationsFolder: migrationsFolder() }).length }]);
  expect(
    await t.query(
      `SELECT count(*)::int AS n FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = 'pgdrain'::regnamespace AND NOT i.indisvalid`,
    ),
  ).toEqual([{ n: 0 }]);
}, 120_000);
