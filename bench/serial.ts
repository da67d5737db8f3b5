// Serial kinds (npm run bench -- --only serial): a kind limited to one job at a time — per group key
// (groupConcurrency: 1, one key), for the whole kind (globalConcurrency: 1), and a fair kind with
// groupConcurrency 1 and one key — `jobs` jobs of about 10 ms each drained by the sidecar's drain
// scheduler on its own drain pool (as `pgdrain start` runs it), with its poll at 30 s: the gap
// between one job's end and the next one's start is how long the queue takes to hand the slot on,
// which is the settlement and the next claim (target: p50 ≤ 20 ms on every server).
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { z } from 'zod';
import { JobRegistry, defineJob } from '../src/jobs/registry.ts';
import { enqueueMany, type Db } from '../src/queries/index.ts';
import { createDrainPool } from '../src/sidecar/database.ts';
import { Drainer } from '../src/sidecar/drainer.ts';

export const SERIAL_VARIANTS = {
  'groupConcurrency 1, one key': { groupConcurrency: 1 },
  'globalConcurrency 1': { globalConcurrency: 1 },
  'fair, groupConcurrency 1, one key': { fair: true, groupConcurrency: 1 },
} as const;

export interface SerialFigures {
  variant: keyof typeof SERIAL_VARIANTS;
  jobs: number;
  seconds: number;
  gapP50Ms: number;
  gapP99Ms: number;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function benchSerial(
  url: string,
  variant: keyof typeof SERIAL_VARIANTS,
  jobs: number,
): Promise<SerialFigures> {
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  const drainPool = createDrainPool(url);
  const runs: { start: number; end: number }[] = [];
  const kind = 'serial';
  const definition = defineJob({
    kind,
    schema: z.object({ n: z.number() }),
    ...SERIAL_VARIANTS[variant],
    handler: async () => {
      const start = performance.now();
      await sleep(10);
      runs.push({ start, end: performance.now() });
    },
  });
  const db = drizzle({ client: pool }) as unknown as Db;
  await enqueueMany(
    db,
    Array.from({ length: jobs }, (_, n) => ({ kind, payload: { n }, groupKey: 'one' })),
  );
  const started = performance.now();
  const drainer = new Drainer(drizzle({ client: drainPool }) as unknown as Db, new JobRegistry([definition]), {
    workerId: 'bench-serial',
    placement: 'near',
    pollIntervalMs: 30_000,
    batchSize: 20,
    concurrency: 20,
  }).start();
  const deadline = performance.now() + 120_000;
  while (runs.length < jobs && performance.now() < deadline) await sleep(5);
  const seconds = (performance.now() - started) / 1000;
  await drainer.stop(5_000);
  await Promise.all([pool.end(), drainPool.end()]);
  if (runs.length !== jobs) throw new Error(`serial (${variant}): ${runs.length} of ${jobs} jobs ran within 120 s`);
  runs.sort((a, b) => a.start - b.start);
  const gaps = runs
    .slice(1)
    .map((r, i) => r.start - runs[i]!.end)
    .sort((a, b) => a - b);
  if (gaps[0]! < 0) throw new Error(`serial (${variant}): two jobs ran at once`);
  const at = (p: number) => gaps[Math.min(gaps.length - 1, Math.ceil((p / 100) * gaps.length) - 1)]!;
  return { variant, jobs, seconds, gapP50Ms: at(50), gapP99Ms: at(99) };
}
