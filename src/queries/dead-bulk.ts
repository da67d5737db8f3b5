// Bulk actions on dead jobs: retry or delete every dead job (of one kind, or all), in bounded
// batches. Each batch is its own short statement over the jobs_dead index, locking at most
// DEAD_BATCH rows (SKIP LOCKED: a row someone is retrying or deleting right now is left to them),
// so a million dead jobs never mean one long transaction, and pending or running jobs — concurrent
// enqueues included — are never touched.
import { sql } from 'drizzle-orm';
import { jobs } from '../db/schema.ts';
import { type Db, NOTIFY_CHANNEL, rowsOf } from './db.ts';

export const DEAD_BATCH = 5_000;

export interface BulkOptions {
  /** Only dead jobs of this kind; omit for every kind. */
  kind?: string;
  /** Stop after this many batches (the caller may call again); default: until none are left. */
  maxBatches?: number;
}

export interface BulkResult {
  /** Jobs retried or deleted. */
  count: number;
  /** False when maxBatches stopped it with dead jobs possibly left. */
  done: boolean;
}

/** Dead jobs back to pending, due now, attempts reset (as retryDead, in bulk); wakes the drainers. */
export function retryDeadJobs(db: Db, options: BulkOptions = {}): Promise<BulkResult> {
  return inBatches(options, async () => {
    const [row] = await rowsOf<{ n: number }>(
      db,
      sql`WITH batch AS (${deadBatch(options.kind)}),
               retried AS (
                 UPDATE ${jobs} j SET status = 'pending', attempts = 0, lost_attempts = 0, run_at = now()
                   FROM batch WHERE j.id = batch.id AND j.status = 'dead'
                 RETURNING j.kind)
          SELECT count(*)::int AS n,
                 (SELECT count(pg_notify(${NOTIFY_CHANNEL}, k)) FROM (SELECT DISTINCT kind AS k
                   FROM retried) AS kinds) AS notified
            FROM retried`,
    );
    return row?.n ?? 0;
  });
}

export function deleteDeadJobs(db: Db, options: BulkOptions = {}): Promise<BulkResult> {
  return inBatches(options, async () => {
    const [row] = await rowsOf<{ n: number }>(
      db,
      sql`WITH batch AS (${deadBatch(options.kind)}),
               deleted AS (DELETE FROM ${jobs} j USING batch WHERE j.id = batch.id AND j.status = 'dead' RETURNING 1)
          SELECT count(*)::int AS n FROM deleted`,
    );
    return row?.n ?? 0;
  });
}

function deadBatch(kind: string | undefined) {
  return sql`SELECT id FROM ${jobs}
              WHERE status = 'dead' ${kind === undefined ? sql`` : sql`AND kind = ${kind}`}
              ORDER BY id LIMIT ${DEAD_BATCH} FOR UPDATE SKIP LOCKED`;
}

async function inBatches(options: BulkOptions, runBatch: () => Promise<number>): Promise<BulkResult> {
  let count = 0;
  for (let batches = 0; ; batches++) {
    if (options.maxBatches !== undefined && batches >= options.maxBatches) return { count, done: false };
    const n = await runBatch();
    count += n;
    if (n < DEAD_BATCH) return { count, done: true };
  }
}
