// `a transaction held open during a sustained load`: an application enqueues steadily while the
// sidecar's drainer (the same Drainer and drain pool as `pgdrain start`) keeps up; in the middle, a
// session elsewhere (a report, a stuck client) holds a REPEATABLE READ snapshot for a while. Vacuum
// cannot remove what that snapshot might still see, so dead tuples pile up in the jobs table and
// every claim walks past more dead index entries. Reported per phase (before, during, after):
// jobs drained per second, the backlog, and the dead tuples PostgreSQL counts. The drain must keep
// going throughout and recover once the transaction ends.
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { z } from 'zod';
import { migrateDatabase } from '../src/db/migrate.ts';
import { JobRegistry, defineJob } from '../src/jobs/index.ts';
import { type Db, enqueueMany, tableHealth } from '../src/queries/index.ts';
import { createDrainPool } from '../src/sidecar/database.ts';
import { Drainer } from '../src/sidecar/drainer.ts';

export interface PhaseFigures {
  phase: 'before' | 'during' | 'after';
  seconds: number;
  /** Median over the phase's seconds. */
  drainedPerSecond: number;
  maxBacklog: number;
  deadTuplesAtEnd: number;
}

export async function drainThroughLongTransaction(
  url: string,
  plan: { beforeS: number; holdS: number; afterS: number; enqueuePerSecond: number },
  log: (line: string) => void,
): Promise<PhaseFigures[]> {
  await migrateDatabase(url);
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  pool.on('error', () => {});
  const db = drizzle({ client: pool }) as unknown as Db;
  const drainPool = createDrainPool(url);
  drainPool.on('error', () => {});
  let drained = 0;
  const registry = new JobRegistry([defineJob({ kind: 'steady', schema: z.unknown(), handler: () => void drained++ })]);
  const drainer = new Drainer(drizzle({ client: drainPool }) as unknown as Db, registry, {
    workerId: 'bench-long-tx',
    placement: 'near',
    pollIntervalMs: 100,
  }).start();
  const report = new pg.Client({ connectionString: url, application_name: 'a long report' });
  await report.connect();

  // The application: a batch every 50 ms, then a wake-up as NOTIFY would give.
  let enqueueing = true;
  const perBatch = Math.max(1, Math.round(plan.enqueuePerSecond / 20));
  const producer = (async () => {
    while (enqueueing) {
      await enqueueMany(
        db,
        Array.from({ length: perBatch }, () => ({ kind: 'steady', payload: {} })),
      );
      drainer.wake();
      await new Promise((r) => setTimeout(r, 50));
    }
  })();

  const figures: PhaseFigures[] = [];
  try {
    for (const [phase, seconds] of [
      ['before', plan.beforeS],
      ['during', plan.holdS],
      ['after', plan.afterS],
    ] as const) {
      if (phase === 'during') {
        await report.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
        await report.query('SELECT count(*) FROM pgdrain.jobs');
      }
      if (phase === 'after') await report.query('COMMIT');
      const perSecond: number[] = [];
      let maxBacklog = 0;
      for (let s = 0; s < seconds; s++) {
        const before = drained;
        await new Promise((r) => setTimeout(r, 1_000));
        perSecond.push(drained - before);
        const [{ n }] = (
          await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM pgdrain.jobs WHERE status = 'pending'`)
        ).rows as [{ n: number }];
        maxBacklog = Math.max(maxBacklog, n);
      }
      const health = await tableHealth(db);
      const sorted = [...perSecond].sort((a, b) => a - b);
      const f: PhaseFigures = {
        phase,
        seconds,
        drainedPerSecond: sorted[Math.floor(sorted.length / 2)] ?? 0,
        maxBacklog,
        deadTuplesAtEnd: health.deadTuples,
      };
      figures.push(f);
      log(
        `  ${phase.padEnd(7)} ${String(seconds).padStart(3)} s: ${f.drainedPerSecond} jobs/s drained (median second), backlog at most ${maxBacklog}, ${f.deadTuplesAtEnd} dead tuples at the end${phase === 'during' ? `, snapshot held ${Math.round(health.oldestSnapshotSeconds)} s` : ''}`,
      );
    }
  } finally {
    enqueueing = false;
    await producer;
    await report.query('ROLLBACK').catch(() => {});
    await report.end();
    await drainer.stop(10_000);
    await Promise.all([pool.end(), drainPool.end()]);
  }
  return figures;
}
