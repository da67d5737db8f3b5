// reap: running rows whose lock is older than their visibility timeout belong to a worker that
// died or hung. They go back to pending, or to dead when that claim was their last attempt (a job
// that reliably kills its worker must not loop forever). Idempotent, cheap (it walks the small
// jobs_running index), safe to call from any process at any time. A reaped attempt counts as
// failed (and dead, when it was the last) in job_counts, in the same statement.
import { sql } from 'drizzle-orm';
import { jobs } from '../db/schema.ts';
import { countFailed } from './counts.ts';
import { type Db, rowsOf } from './db.ts';

export interface ReapResult {
  /** Back to pending. */
  reclaimed: string[];
  /** Their last attempt timed out: now dead. */
  dead: string[];
}

export async function reap(db: Db, visibilityTimeoutSeconds: number): Promise<ReapResult> {
  const rows = await rowsOf<{ id: string; status: 'pending' | 'dead' }>(
    db,
    sql`WITH reaped AS (
        UPDATE ${jobs} SET
          status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'pending' END,
          last_error = 'visibility timeout: ' || locked_by || ' held the job for longer than '
                       || coalesce(visibility_seconds, ${visibilityTimeoutSeconds}::int) || ' s',
          locked_at = NULL, locked_by = NULL
        WHERE status = 'running'
          AND locked_at < now() - make_interval(secs => coalesce(visibility_seconds, ${visibilityTimeoutSeconds}::int))
        RETURNING id, kind, status),
      counted AS (${countFailed('reaped')})
      SELECT id, status FROM reaped`,
  );
  const result: ReapResult = { reclaimed: [], dead: [] };
  for (const r of rows) (r.status === 'dead' ? result.dead : result.reclaimed).push(String(r.id));
  return result;
}
