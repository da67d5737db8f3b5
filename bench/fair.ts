// Round two's rows (npm run bench -- --only fair): fair claims (fair: true) against plain claims of
// the same jobs — `jobs` no-op jobs spread over `keys` group keys, drained by one in-process drain,
// once with a fair kind and once with a kind without limits: what a fair claim costs must not grow
// with the number of keys (each claim walks at most twice its size in keys) — and a batch kind
// of 100 no-op jobs per call against the same jobs one per handler call.
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { z } from 'zod';
import { drain } from '../src/drain/index.ts';
import { defineBatchJob } from '../src/jobs/batch.ts';
import { JobRegistry, type JobDefinition, defineJob } from '../src/jobs/registry.ts';
import { enqueueMany, type Db } from '../src/queries/index.ts';

export interface FairFigures {
  keys: number;
  jobs: number;
  fairPerSecond: number;
  plainPerSecond: number;
}

/** One database, migrated; both drains in turn on the same backlog shape. */
export async function benchFair(url: string, keys: number, jobs: number): Promise<FairFigures> {
  const pool = new pg.Pool({ connectionString: url, max: 12 });
  const db = drizzle({ client: pool }) as unknown as Db;
  const run = async (fair: boolean) => {
    const kind = fair ? 'fair_noop' : 'plain_noop';
    const definition = defineJob({ kind, schema: z.unknown(), ...(fair ? { fair: true } : {}), handler: () => {} });
    for (let start = 0; start < jobs; start += 10_000) {
      const n = Math.min(10_000, jobs - start);
      await enqueueMany(
        db,
        Array.from({ length: n }, (_, i) => ({ kind, payload: {}, groupKey: `tenant-${(start + i) % keys}` })),
      );
    }
    await pool.query('VACUUM ANALYZE pgdrain.jobs');
    const started = performance.now();
    const report = await drain(db, new JobRegistry([definition]), {
      workerId: `bench-${kind}`,
      batchSize: 50,
      concurrency: 50,
    });
    const seconds = (performance.now() - started) / 1000;
    if (report.completed !== jobs) throw new Error(`${kind}: completed ${report.completed} of ${jobs}`);
    return jobs / seconds;
  };
  const plainPerSecond = await run(false);
  const fairPerSecond = await run(true);
  await pool.end();
  return { keys, jobs, fairPerSecond, plainPerSecond };
}

export interface BatchFigures {
  jobs: number;
  batchPerSecond: number;
  singlePerSecond: number;
}

/** `jobs` no-op jobs of a batch kind (size 100) and of a plain kind, each drained by one drain. */
export async function benchBatch(url: string, jobs: number): Promise<BatchFigures> {
  const pool = new pg.Pool({ connectionString: url, max: 12 });
  const db = drizzle({ client: pool }) as unknown as Db;
  const run = async (definition: JobDefinition<unknown>) => {
    for (let start = 0; start < jobs; start += 10_000) {
      await enqueueMany(
        db,
        Array.from({ length: Math.min(10_000, jobs - start) }, () => ({ kind: definition.kind, payload: {} })),
      );
    }
    await pool.query('VACUUM ANALYZE pgdrain.jobs');
    const started = performance.now();
    const report = await drain(db, new JobRegistry([definition]), {
      workerId: `bench-${definition.kind}`,
      batchSize: 100,
      concurrency: 50,
    });
    if (report.completed !== jobs) throw new Error(`${definition.kind}: completed ${report.completed} of ${jobs}`);
    return jobs / ((performance.now() - started) / 1000);
  };
  const singlePerSecond = await run(defineJob({ kind: 'single_noop', schema: z.unknown(), handler: () => {} }));
  const batchPerSecond = await run(
    defineBatchJob({
      kind: 'batch_noop',
      schema: z.unknown(),
      size: 100,
      handler: (items) => items.map(() => null),
    }) as JobDefinition<unknown>,
  );
  await pool.end();
  return { jobs, batchPerSecond, singlePerSecond };
}
