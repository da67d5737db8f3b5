// prune: what a kept history leaves behind, removed once its time is up — completed and cancelled
// jobs past their keep_until (kinds with keepCompletedSeconds), notes of how watched jobs ended
// (kept 10 minutes), and dependency rows of jobs that are gone. In bounded batches, each its own
// short statement, so a large history never means one long transaction. Run with the reaper's round
// on the sidecar and every cron invocation on the Worker.
import { sql } from 'drizzle-orm';
import { finishedJobs, jobDependencies, jobs } from '../db/schema.ts';
import { type Db, rowsOf } from './db.ts';

export const PRUNE_BATCH = 5_000;
/** How long a note of how a watched, deleted job ended is kept. */
export const FINISHED_NOTE_MINUTES = 10;

export interface PruneResult {
  /** Kept jobs deleted. */
  jobs: number;
  notes: number;
  dependencies: number;
}

/** Up to `maxBatches` batches of each; call again if more is left. */
export async function pruneFinished(db: Db, maxBatches = 20): Promise<PruneResult> {
  const result: PruneResult = { jobs: 0, notes: 0, dependencies: 0 };
  const batches = async (statement: () => Promise<number>) => {
    let total = 0;
    for (let i = 0; i < maxBatches; i++) {
      const n = await statement();
      total += n;
      if (n < PRUNE_BATCH) break;
    }
    return total;
  };
  const count = async (query: ReturnType<typeof sql>) => Number((await rowsOf<{ n: number }>(db, query))[0]?.n ?? 0);
  result.jobs = await batches(() =>
    count(sql`WITH gone AS (
                DELETE FROM ${jobs} WHERE id IN (SELECT id FROM ${jobs} WHERE status IN ('completed', 'cancelled') AND keep_until < now()
                                                  ORDER BY keep_until LIMIT ${PRUNE_BATCH} FOR UPDATE SKIP LOCKED)
                RETURNING 1)
              SELECT count(*)::int AS n FROM gone`),
  );
  result.notes = await batches(() =>
    count(sql`WITH gone AS (
                DELETE FROM ${finishedJobs} WHERE id IN (SELECT id FROM ${finishedJobs}
                  WHERE finished_at < now() - make_interval(mins => ${FINISHED_NOTE_MINUTES}) LIMIT ${PRUNE_BATCH}) RETURNING 1)
              SELECT count(*)::int AS n FROM gone`),
  );
  result.dependencies = await batches(() =>
    count(sql`WITH gone AS (
                DELETE FROM ${jobDependencies} d WHERE (d.depends_on, d.job_id) IN (
                  SELECT depends_on, job_id FROM ${jobDependencies} o WHERE NOT EXISTS (SELECT 1 FROM ${jobs} j WHERE j.id = o.job_id) LIMIT ${PRUNE_BATCH})
                RETURNING 1)
              SELECT count(*)::int AS n FROM gone`),
  );
  return result;
}
